/* CUDA's math library in single and double precision, each function's
 * result in its own row of out (row k at out + k * n). */
extern "C" __global__ void math_f32(const float *x, float *out, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n)
        return;
    float v = x[i];
    out[0 * (size_t)n + i] = expf(v);
    out[1 * (size_t)n + i] = logf(v);
    out[2 * (size_t)n + i] = erff(v);
    out[3 * (size_t)n + i] = rsqrtf(v);
    out[4 * (size_t)n + i] = sinf(v);
    out[5 * (size_t)n + i] = tanhf(v);
    out[6 * (size_t)n + i] = sqrtf(v);
}

extern "C" __global__ void math_f64(const double *x, double *out, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n)
        return;
    double v = x[i];
    out[0 * (size_t)n + i] = exp(v);
    out[1 * (size_t)n + i] = log(v);
    out[2 * (size_t)n + i] = erf(v);
    out[3 * (size_t)n + i] = sqrt(v);
    out[4 * (size_t)n + i] = sin(v);
    out[5 * (size_t)n + i] = cbrt(v);
}
