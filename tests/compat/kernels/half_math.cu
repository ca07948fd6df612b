/* __half through the toolkit's <cuda_fp16.h>: round-to-nearest-even
 * conversion (subnormals, overflow to infinity), packed half2 arithmetic,
 * and a fused multiply-add with one rounding. */
#include <cuda_fp16.h>

extern "C" __global__ void half_round_trip(const float *x, unsigned short *bits, float *back, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n)
        return;
    __half h = __float2half_rn(x[i]);
    bits[i] = __half_as_ushort(h);
    back[i] = __half2float(h);
}

extern "C" __global__ void half2_add_mul(const __half2 *a, const __half2 *b, __half2 *sum,
                                         __half2 *prod, int n2)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n2)
        return;
    sum[i] = __hadd2(a[i], b[i]);
    prod[i] = __hmul2(a[i], b[i]);
}

extern "C" __global__ void half_fma(const __half *a, const __half *b, const __half *c, __half *out,
                                    int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        out[i] = __hfma(a[i], b[i], c[i]);
}
