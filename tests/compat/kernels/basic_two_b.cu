/* Second of two sources loaded as one module: its helper has the name of
 * the first unit's, and a different body. */
static __device__ int helper(int x) { return x * x - 5; }

extern "C" __global__ void unit_b_map(const int *x, int *y, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        y[i] = helper(x[i]);
}
