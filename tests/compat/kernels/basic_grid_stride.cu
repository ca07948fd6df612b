/* A grid-stride loop: a grid of any size covers any n, with 64-bit indices
 * (size_t n), as CuPy's elementwise kernels are written. */
extern "C" __global__ void scale_shift_strided(const float *x, float *y, float scale, float shift,
                                               size_t n)
{
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        y[i] = x[i] * scale + shift;
}
