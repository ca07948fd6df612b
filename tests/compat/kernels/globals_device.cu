/* __device__ variables that outlive a launch: one kernel writes them, a
 * later kernel of the same module reads them (the host may read and write
 * them too, by name). */
__device__ float stash[1024];
__device__ unsigned int stash_writes;

extern "C" __global__ void stash_store(const float *x, float scale)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < 1024) {
        stash[i] = x[i] * scale;
        atomicAdd(&stash_writes, 1u);
    }
}

extern "C" __global__ void stash_load(float *y, unsigned *writes)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < 1024)
        y[i] = stash[i] + 1.0f;
    if (i == 0)
        *writes = stash_writes;
}
