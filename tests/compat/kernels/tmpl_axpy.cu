/* A kernel template over its element type, instantiated through name
 * expressions ("axpy<float>", "axpy<double>", "axpy<int>"), as jitify and
 * CuPy's RawModule(name_expressions=...) do. */
template <typename T>
__global__ void axpy(T a, const T *x, T *y, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        y[i] = a * x[i] + y[i];
}
