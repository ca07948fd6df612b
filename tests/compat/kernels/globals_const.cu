/* __constant__ tables the host fills by name: a plain one, one inside a
 * namespace ("compat_ns::lut") and a variable template ("gain<float>"), each
 * read by a kernel. */
__constant__ float poly_coeffs[8];

namespace compat_ns {
__constant__ int lut[64];
}

template <typename T>
__constant__ T gain;

/* y = sum over k of poly_coeffs[k] * x^k (Horner). */
extern "C" __global__ void poly_eval(const float *x, float *y, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n)
        return;
    float v = x[i], acc = poly_coeffs[7];
    for (int k = 6; k >= 0; k--)
        acc = acc * v + poly_coeffs[k];
    y[i] = acc;
}

extern "C" __global__ void lut_gather(const int *idx, int *out, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        out[i] = compat_ns::lut[idx[i] & 63];
}

template <typename T>
__global__ void apply_gain(const T *x, T *y, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        y[i] = x[i] * gain<T>;
}
