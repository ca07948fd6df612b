/* cuRAND's device API: Philox4x32-10 states initialized per thread
 * (seed, subsequence = thread, offset) and drawn from, raw and uniform. */
#include <curand_kernel.h>

/* per_thread raw 32-bit draws per thread. */
extern "C" __global__ void philox_bits(unsigned long long seed, unsigned long long offset,
                                       unsigned *out, int nthreads, int per_thread)
{
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= nthreads)
        return;
    curandStatePhilox4_32_10_t state;
    curand_init(seed, t, offset, &state);
    for (int k = 0; k < per_thread; k++)
        out[(size_t)t * per_thread + k] = curand(&state);
}

/* per_thread uniform floats in (0, 1] per thread. */
extern "C" __global__ void philox_uniform(unsigned long long seed, float *out, int nthreads,
                                          int per_thread)
{
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= nthreads)
        return;
    curandStatePhilox4_32_10_t state;
    curand_init(seed, t, 0, &state);
    for (int k = 0; k < per_thread; k++)
        out[(size_t)t * per_thread + k] = curand_uniform(&state);
}
