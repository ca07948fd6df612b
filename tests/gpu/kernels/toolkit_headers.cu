// Kernels for tests/gpu/test_toolkit_headers.c, written as people write
// them with the toolkit's headers, which jitop finds without an -I:
// half and bfloat16 arithmetic, cooperative groups, CUB, cuRAND.
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>
#include <curand_kernel.h>

namespace cg = cooperative_groups;

// out = fma(a, b, c) in half precision (each input rounded to half first).
extern "C" __global__ void half_fma(const float *a, const float *b, const float *c, float *out,
                                    int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        out[i] = __half2float(
            __hfma(__float2half_rn(a[i]), __float2half_rn(b[i]), __float2half_rn(c[i])));
}

// The same in bfloat16.
extern "C" __global__ void bf16_fma(const float *a, const float *b, const float *c, float *out,
                                    int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        out[i] = __bfloat162float(__hfma(__float2bfloat16_rn(a[i]), __float2bfloat16_rn(b[i]),
                                         __float2bfloat16_rn(c[i])));
}

// One sum per block: warp tiles reduce with cg::reduce, then the first warp
// reduces the tiles' sums.
extern "C" __global__ void cg_block_sum(const float *x, float *out, int n)
{
    cg::thread_block block = cg::this_thread_block();
    cg::thread_block_tile<32> warp = cg::tiled_partition<32>(block);
    __shared__ float partial[32];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float v = i < n ? x[i] : 0.0f;
    float s = cg::reduce(warp, v, cg::plus<float>());
    if (warp.thread_rank() == 0)
        partial[warp.meta_group_rank()] = s;
    block.sync();
    if (warp.meta_group_rank() == 0) {
        float t = warp.thread_rank() < warp.meta_group_size() ? partial[warp.thread_rank()] : 0.0f;
        t = cg::reduce(warp, t, cg::plus<float>());
        if (warp.thread_rank() == 0)
            out[blockIdx.x] = t;
    }
}

// Per block of BLOCK elements: the inclusive prefix sums (cub::BlockScan)
// and the total (cub::BlockReduce). Asked for as "cub_scan<256>".
template <int BLOCK>
__global__ void cub_scan(const int *x, int *scan, int *sums, int n)
{
    typedef cub::BlockScan<int, BLOCK> scan_t;
    typedef cub::BlockReduce<int, BLOCK> reduce_t;
    __shared__ union {
        typename scan_t::TempStorage scan;
        typename reduce_t::TempStorage reduce;
    } tmp;
    int i = blockIdx.x * BLOCK + threadIdx.x;
    int v = i < n ? x[i] : 0;
    int incl = 0;
    scan_t(tmp.scan).InclusiveSum(v, incl);
    if (i < n)
        scan[i] = incl;
    __syncthreads();
    int total = reduce_t(tmp.reduce).Sum(v);
    if (threadIdx.x == 0)
        sums[blockIdx.x] = total;
}

// Uniform (0, 1] numbers from Philox, one subsequence per thread.
extern "C" __global__ void philox_uniform(unsigned long long seed, float *out, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n)
        return;
    curandStatePhilox4_32_10_t st;
    curand_init(seed, (unsigned long long)i, 0, &st);
    out[i] = curand_uniform(&st);
}
