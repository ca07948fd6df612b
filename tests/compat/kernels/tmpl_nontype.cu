/* Non-type template parameters: a vector width that unrolls the per-thread
 * loop, and integer, bool and unsigned constants (a negative one too) that
 * pick the arithmetic at compile time. */
template <typename T, int VEC>
__global__ void scale_vec(const T *x, T *y, T s, int nvec)
{
    int v = blockIdx.x * blockDim.x + threadIdx.x;
    if (v >= nvec)
        return;
    T buf[VEC];
#pragma unroll
    for (int k = 0; k < VEC; k++)
        buf[k] = x[(size_t)v * VEC + k];
#pragma unroll
    for (int k = 0; k < VEC; k++)
        y[(size_t)v * VEC + k] = buf[k] * s + (T)k;
}

/* SHIFT > 0 shifts left, < 0 right (logical), then MASK, then NEGATE. */
template <int SHIFT, bool NEGATE, unsigned MASK>
__global__ void bits_op(const unsigned *x, unsigned *y, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n)
        return;
    unsigned u = x[i];
    u = SHIFT >= 0 ? u << (SHIFT >= 0 ? SHIFT : 0) : u >> (SHIFT < 0 ? -SHIFT : 0);
    u &= MASK;
    y[i] = NEGATE ? 0u - u : u;
}
