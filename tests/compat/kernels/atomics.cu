/* Atomics: float and double atomicAdd, an atomicCAS loop (a float maximum
 * through its bits, the pattern for any atomic the hardware lacks), and an
 * integer histogram. */
extern "C" __global__ void hist_weighted_f32(const int *bin, const float *w, float *hist, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        atomicAdd(&hist[bin[i]], w[i]);
}

extern "C" __global__ void sum_f64(const double *x, double *total, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        atomicAdd(total, x[i]);
}

extern "C" __global__ void max_f32_cas(const float *x, float *result, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n)
        return;
    float v = x[i];
    int *addr = (int *)result;
    int old = *addr, assumed;
    do {
        assumed = old;
        if (__int_as_float(assumed) >= v)
            break;
        old = atomicCAS(addr, assumed, __float_as_int(v));
    } while (old != assumed);
}

extern "C" __global__ void hist_count_u32(const unsigned *x, unsigned *hist, unsigned nbins, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        atomicAdd(&hist[x[i] % nbins], 1u);
}
