// Small kernels for tests/gpu/test_load.c: an extern "C" kernel with mixed
// parameter sizes (4- and 8-byte), and a template instantiated by name.

extern "C" __global__ void axpby(int n, float a, const float *x, float b, float *y)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        y[i] = a * x[i] + b * y[i];
}

// Adds N to every element; asked for as "add_n<double, 3>" and so on.
template <typename T, int N>
__global__ void add_n(T *x, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        x[i] += (T)N;
}
