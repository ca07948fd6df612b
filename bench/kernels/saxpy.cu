// The small single-kernel source of the benchmarks (cold, warm, in-process,
// launch overhead). SAXPY_BIAS is the line the edit-to-live benchmarks
// rewrite: the value a launch writes tells which build is running.
#ifndef SAXPY_BIAS
#define SAXPY_BIAS 0.0f
#endif

extern "C" __global__ void saxpy(int n, float a, const float *x, float *y)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        y[i] = a * x[i] + y[i] + SAXPY_BIAS;
}
