/* Cooperative groups from the toolkit: tile reductions (cg::reduce from
 * <cooperative_groups/reduce.h>, and a tile's own shfl_down), a grid-wide
 * barrier that needs a cooperative launch, and a thread-block cluster that
 * reads its neighbour block's shared memory (sm_90). */
#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>

namespace cg = cooperative_groups;

/* One sum per 32-thread tile: tile_sums[global thread / 32]. */
extern "C" __global__ void tile32_reduce_sum(const int *x, int *tile_sums, int n)
{
    cg::thread_block_tile<32> tile = cg::tiled_partition<32>(cg::this_thread_block());
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int v = i < n ? x[i] : 0;
    int s = cg::reduce(tile, v, cg::plus<int>());
    if (tile.thread_rank() == 0)
        tile_sums[i / 32] = s;
}

/* One maximum per 16-thread tile, by the tile's shuffles. */
extern "C" __global__ void tile16_max(const float *x, float *tile_max, int n)
{
    cg::thread_block_tile<16> tile = cg::tiled_partition<16>(cg::this_thread_block());
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float v = i < n ? x[i] : -3.402823466e38f;
    for (unsigned off = tile.size() / 2; off > 0; off /= 2)
        v = fmaxf(v, tile.shfl_down(v, off));
    if (tile.thread_rank() == 0)
        tile_max[i / 16] = v;
}

/* Centers x on its mean: every block sums a grid-strided share into
 * partials[blockIdx.x], the grid waits at grid.sync(), then every block
 * reads all the partials. Only correct with a cooperative launch, with
 * blockDim.x == 256. */
extern "C" __global__ void grid_center(const double *x, double *partials, double *y, int n)
{
    cg::grid_group grid = cg::this_grid();
    __shared__ double s[256];
    double acc = 0.0;
    for (unsigned long long i = grid.thread_rank(); i < (unsigned long long)n; i += grid.size())
        acc += x[i];
    s[threadIdx.x] = acc;
    __syncthreads();
    for (int w = 128; w > 0; w >>= 1) {
        if ((int)threadIdx.x < w)
            s[threadIdx.x] += s[threadIdx.x + w];
        __syncthreads();
    }
    if (threadIdx.x == 0)
        partials[blockIdx.x] = s[0];
    grid.sync();
    double total = 0.0;
    for (unsigned b = 0; b < gridDim.x; b++)
        total += partials[b];
    double mean = total / n;
    for (unsigned long long i = grid.thread_rank(); i < (unsigned long long)n; i += grid.size())
        y[i] = x[i] - mean;
}

/* Launched with a cluster dimension (not compiled in): each block adds its
 * neighbour's (rank + 1 in the cluster) element through distributed shared
 * memory. blockDim.x == 256. */
extern "C" __global__ void cluster_ring_sum(const int *x, int *out, int n)
{
    __shared__ int s[256];
    cg::cluster_group cluster = cg::this_cluster();
    unsigned rank = cluster.block_rank();
    unsigned size = cluster.num_blocks();
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    s[threadIdx.x] = i < n ? x[i] : 0;
    cluster.sync();
    const int *peer = cluster.map_shared_rank(s, (rank + 1) % size);
    int v = s[threadIdx.x] + peer[threadIdx.x];
    cluster.sync(); /* the neighbour's shared memory stays until everyone has read it */
    if (i < n)
        out[i] = v;
}
