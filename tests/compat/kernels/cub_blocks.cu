/* CUB's block- and warp-level collectives from the toolkit's CCCL headers,
 * as CuPy's and PyTorch's JIT kernels use them. */
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>
#include <cub/warp/warp_reduce.cuh>

/* One sum per block of 256. */
extern "C" __global__ void __launch_bounds__(256) cub_block_sum(const float *x, float *sums, int n)
{
    using BlockReduce = cub::BlockReduce<float, 256>;
    __shared__ typename BlockReduce::TempStorage tmp;
    int i = blockIdx.x * 256 + threadIdx.x;
    float s = BlockReduce(tmp).Sum(i < n ? x[i] : 0.0f);
    if (threadIdx.x == 0)
        sums[blockIdx.x] = s;
}

/* Exclusive prefix sums within each block of 128, and each block's total. */
extern "C" __global__ void __launch_bounds__(128)
    cub_block_exclusive_scan(const int *x, int *y, int *block_totals, int n)
{
    using BlockScan = cub::BlockScan<int, 128>;
    __shared__ typename BlockScan::TempStorage tmp;
    int i = blockIdx.x * 128 + threadIdx.x;
    int prefix = 0, total = 0;
    BlockScan(tmp).ExclusiveSum(i < n ? x[i] : 0, prefix, total);
    if (i < n)
        y[i] = prefix;
    if (threadIdx.x == 0)
        block_totals[blockIdx.x] = total;
}

/* One sum per warp, blocks of 256 (8 warps). */
extern "C" __global__ void __launch_bounds__(256) cub_warp_sum(const int *x, int *warp_sums, int n)
{
    using WarpReduce = cub::WarpReduce<int>;
    __shared__ typename WarpReduce::TempStorage tmp[8];
    int i = blockIdx.x * 256 + threadIdx.x;
    int s = WarpReduce(tmp[threadIdx.x / 32]).Sum(i < n ? x[i] : 0);
    if (threadIdx.x % 32 == 0)
        warp_sums[i / 32] = s;
}
