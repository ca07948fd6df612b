/* 64-bit indexing: an array of over 2^31 bytes, indexed by a 64-bit global
 * thread index (blockIdx.x * blockDim.x in 32 bits would wrap). Each byte
 * is the top byte of a multiplicative hash of its index. */
extern "C" __global__ void fill_hash_u8(unsigned char *out, unsigned long long n,
                                        unsigned long long salt)
{
    unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        out[i] = (unsigned char)(((i ^ salt) * 0x9E3779B97F4A7C15ull) >> 56);
}
