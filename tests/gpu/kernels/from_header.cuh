// Kernels defined in a header, for tests/gpu/test_toolkit_headers.c: the
// source that includes it (from_header.cu) names none of them.
#pragma once

extern "C" __global__ void hdr_add(float *x, float v, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        x[i] += v;
}

namespace hdr {
// A C++ kernel, asked for as "hdr::negate".
__global__ void negate(float *x, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        x[i] = -x[i];
}
} // namespace hdr

// Asked for as "hdr_scale<float, 3>" and as "hdr_scale< float,3u >".
template <typename T, unsigned K>
__global__ void hdr_scale(T *x, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        x[i] *= (T)K;
}
