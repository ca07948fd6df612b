// Edit SCALE while examples/python/saxpy.py runs: the next launch uses it.
#define SCALE 1.0f

extern "C" __global__ void saxpy(int n, float a, const float *x, float *y)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        y[i] = SCALE * a * x[i] + y[i];
}
