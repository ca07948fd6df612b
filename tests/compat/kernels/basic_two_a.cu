/* First of two sources loaded as one module without -rdc: separate
 * translation units, each with its own internal helper of the same name. */
static __device__ int helper(int x) { return 3 * x + 1; }

extern "C" __global__ void unit_a_map(const int *x, int *y, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        y[i] = helper(x[i]);
}
