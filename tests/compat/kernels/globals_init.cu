/* A __constant__ table with a static initializer, which the driver loads
 * with the image: no host write needed. */
__constant__ int primes_table[32] = {2,  3,  5,  7,  11, 13, 17, 19, 23, 29, 31,
                                     37, 41, 43, 47, 53, 59, 61, 67, 71, 73, 79,
                                     83, 89, 97, 101, 103, 107, 109, 113, 127, 131};

extern "C" __global__ void prime_scale(const int *idx, long long *out, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        out[i] = (long long)primes_table[idx[i] % 32] * idx[i];
}
