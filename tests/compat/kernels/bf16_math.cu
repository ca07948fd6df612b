/* __nv_bfloat16 through the toolkit's <cuda_bf16.h>: round-to-nearest-even
 * conversion, and the usual mixed-precision pattern of bf16 inputs with a
 * float accumulator (one warp per row, partial sums combined by shuffles). */
#include <cuda_bf16.h>

extern "C" __global__ void bf16_round_trip(const float *x, unsigned short *bits, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        bits[i] = __bfloat16_as_ushort(__float2bfloat16_rn(x[i]));
}

/* out[r] = sum over c of a[r][c] * b[c]; blockDim.x a multiple of 32. */
extern "C" __global__ void bf16_dot_rows(const __nv_bfloat16 *a, const __nv_bfloat16 *b, float *out,
                                         int rows, int cols)
{
    int warp = (blockIdx.x * blockDim.x + threadIdx.x) / 32;
    int lane = threadIdx.x % 32;
    if (warp >= rows)
        return; /* whole warps leave together: rows are warp-uniform */
    const __nv_bfloat16 *row = a + (size_t)warp * cols;
    float acc = 0.0f;
    for (int c = lane; c < cols; c += 32)
        acc += __bfloat162float(row[c]) * __bfloat162float(b[c]);
    for (int off = 16; off > 0; off >>= 1)
        acc += __shfl_down_sync(0xffffffffu, acc, off);
    if (lane == 0)
        out[warp] = acc;
}
