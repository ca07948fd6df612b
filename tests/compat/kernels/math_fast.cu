/* Compiled with --use_fast_math: expf, sinf and logf become the hardware
 * approximations __expf, __sinf and __logf, so each pair below must agree
 * bit for bit (without the option they differ for most inputs). */
extern "C" __global__ void fast_math_f32(const float *x, float *out, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n)
        return;
    float v = x[i];
    out[0 * (size_t)n + i] = expf(v);
    out[1 * (size_t)n + i] = __expf(v);
    out[2 * (size_t)n + i] = sinf(v);
    out[3 * (size_t)n + i] = __sinf(v);
    out[4 * (size_t)n + i] = logf(fabsf(v) + 0.5f);
    out[5 * (size_t)n + i] = __logf(fabsf(v) + 0.5f);
}
