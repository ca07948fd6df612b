/* libcu++ (<cuda/std/...>, the C++ standard library NVRTC lacks, from the
 * toolkit's CCCL): numeric_limits and type_traits in a saturating
 * conversion template, and cuda::std::complex arithmetic. */
#include <cuda/std/complex>
#include <cuda/std/limits>
#include <cuda/std/type_traits>

/* Rounds to nearest (even) and clamps to To's range. */
template <typename To>
__global__ void saturate_from_float(const float *x, To *y, int n)
{
    static_assert(cuda::std::is_integral<To>::value, "an integer type");
    static_assert(sizeof(To) <= 2, "its range is exact in float");
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n)
        return;
    const float lo = (float)cuda::std::numeric_limits<To>::min();
    const float hi = (float)cuda::std::numeric_limits<To>::max();
    y[i] = (To)fminf(fmaxf(rintf(x[i]), lo), hi);
}

/* c = a * conj(b). */
extern "C" __global__ void complex_mul_conj(const cuda::std::complex<float> *a,
                                            const cuda::std::complex<float> *b,
                                            cuda::std::complex<float> *c, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        c[i] = a[i] * cuda::std::conj(b[i]);
}
