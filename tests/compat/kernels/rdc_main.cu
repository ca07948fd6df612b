/* The main unit of a relocatable (-rdc) pair: it calls a function and reads
 * an array that rdc_lib.cu defines. */
extern __device__ float lib_bias[4];
__device__ int lib_transform(int a, int b);

extern "C" __global__ void rdc_apply(const int *a, const int *b, int *out, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        out[i] = lib_transform(a[i], b[i]) + 1;
}

extern "C" __global__ void rdc_add_bias(const float *x, float *y, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        y[i] = x[i] + lib_bias[i & 3];
}
