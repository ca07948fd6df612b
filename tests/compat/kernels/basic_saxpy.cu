/* The first kernel of every CUDA tutorial and NVRTC sample: y = a * x + y,
 * one thread per element, an extern "C" name so that the loader finds it
 * without name expressions. */
extern "C" __global__ void saxpy(int n, float a, const float *x, float *y)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        y[i] = a * x[i] + y[i];
}
