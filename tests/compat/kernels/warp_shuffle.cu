/* Warp-synchronous primitives: a butterfly (xor) all-reduce, an up-shuffle
 * inclusive scan, and a ballot with its population count. Every lane of
 * every warp runs the shuffles (blocks are whole warps). */
#define FULL_MASK 0xffffffffu

extern "C" __global__ void warp_xor_sum(const int *x, int *y, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int v = i < n ? x[i] : 0;
    for (int m = 16; m > 0; m >>= 1)
        v += __shfl_xor_sync(FULL_MASK, v, m);
    if (i < n)
        y[i] = v;
}

extern "C" __global__ void warp_inclusive_scan(const int *x, int *y, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int lane = threadIdx.x & 31;
    int v = i < n ? x[i] : 0;
    for (int d = 1; d < 32; d <<= 1) {
        int t = __shfl_up_sync(FULL_MASK, v, d);
        if (lane >= d)
            v += t;
    }
    if (i < n)
        y[i] = v;
}

extern "C" __global__ void warp_ballot_count(const float *x, unsigned *mask, int *count, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    unsigned b = __ballot_sync(FULL_MASK, i < n && x[i] > 0.0f);
    if ((threadIdx.x & 31) == 0) {
        mask[i / 32] = b;
        count[i / 32] = __popc(b);
    }
}
