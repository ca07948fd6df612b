/* Kernel templates defined in a header: the including .cu never names
 * them, the application asks for "tile_accumulate<float, 4>" or
 * "compat::hdr::clamp_copy<double>". */
#pragma once

/* y[t] = sum of x[t * TILE .. t * TILE + TILE - 1]. */
template <typename T, int TILE>
__global__ void tile_accumulate(const T *x, T *y, int ntiles)
{
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= ntiles)
        return;
    T acc = T(0);
#pragma unroll
    for (int k = 0; k < TILE; k++)
        acc += x[(size_t)t * TILE + k];
    y[t] = acc;
}

namespace compat {
namespace hdr {

template <typename T>
__device__ T clamp_value(T v, T lo, T hi)
{
    return v < lo ? lo : (v > hi ? hi : v);
}

template <typename T>
__global__ void clamp_copy(const T *x, T *y, T lo, T hi, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        y[i] = clamp_value(x[i], lo, hi);
}

} // namespace hdr
} // namespace compat
