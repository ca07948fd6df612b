/* Run functions of the math-library cases and of 64-bit indexing.
 * Accuracy bounds are the CUDA Programming Guide's maximum ulp errors
 * (against the correctly rounded result, hence + 0.5 ulp against the exact
 * value the reference approximates): single precision expf 2, logf 1,
 * erff 2, rsqrtf 2, sinf 2, tanhf 2, sqrtf 0; double exp 1, log 1, erf 2,
 * sqrt 0, sin 2, cbrt 1. The fast-math intrinsics: __expf 2 + floor(|1.173
 * x|) ulp; __sinf 2^-21.41 absolute on [-pi, pi]; __logf 2^-21.41 absolute
 * on [0.5, 2], else 3 ulp. */
#include "compat_env.h"
#include "compat_runs.h"

#include <math.h>
#include <string.h>

/* |got - ref| within ulps units in the last place of the larger of the two
 * (a result just over a power of two is counted in its own binade's ulp). */
static void near_ulps_f32(compat_env *e, const char *what, size_t i, float got, double ref,
                          double ulps)
{
    double big = fabs(ref) > fabs(got) ? ref : got;
    cx_near(e, what, i, got, ref, ulps * cx_ulp_f32(big));
}

static void near_ulps_f64(compat_env *e, const char *what, size_t i, double got, long double ref,
                          double ulps)
{
    double r = (double)ref;
    double big = fabs(r) > fabs(got) ? r : got;
    /* The difference is taken in long double: the reference carries more
     * bits than a double (x87: 64; quad on other hosts). */
    long double d = fabsl((long double)got - ref);
    if (!(d <= (long double)(ulps * cx_ulp_f64(big))))
        cx_fail(e, "%s[%zu]: got %.17g, want %.21Lg (%.3Lg ulp > %.2f)", what, i, got, ref,
                d / (long double)cx_ulp_f64(big), ulps);
}

void run_math_f32(compat_env *e)
{
    jitop_op *op = cx_op(e, "math_f32");
    int n = (int)cx_int(e, 50000, 200000);
    float *x = cx_host(e, n * sizeof *x), *got = cx_host(e, (size_t)7 * n * sizeof *got);
    cx_fill_f32(e, x, n, 0.01f, 10.0f);
    CUdeviceptr dx = cx_upload_new(e, x, n * sizeof *x), dout = cx_alloc(e, (size_t)7 * n * sizeof *got);
    CX_LAUNCH(e, op, cx_blocks(n, 256), 256, 0, CXA(dx), CXA(dout), CXA(n));
    cx_download(e, got, dout, (size_t)7 * n * sizeof *got);
    /* glibc's double functions are within 1 ulp of double: exact enough
     * against float ulps. */
    for (int i = 0; i < n; i++) {
        double v = x[i];
        near_ulps_f32(e, "expf", i, got[0 * (size_t)n + i], exp(v), 2.5);
        near_ulps_f32(e, "logf", i, got[1 * (size_t)n + i], log(v), 1.5);
        near_ulps_f32(e, "erff", i, got[2 * (size_t)n + i], erf(v), 2.5);
        near_ulps_f32(e, "rsqrtf", i, got[3 * (size_t)n + i], 1.0 / sqrt(v), 2.5);
        near_ulps_f32(e, "sinf", i, got[4 * (size_t)n + i], sin(v), 2.5);
        near_ulps_f32(e, "tanhf", i, got[5 * (size_t)n + i], tanh(v), 2.5);
        /* sqrt of a float is correctly rounded through a double too. */
        cx_near(e, "sqrtf", i, got[6 * (size_t)n + i], (float)sqrt(v), 0);
    }
}

void run_math_f64(compat_env *e)
{
    jitop_op *op = cx_op(e, "math_f64");
    int n = (int)cx_int(e, 50000, 200000);
    double *x = cx_host(e, n * sizeof *x), *got = cx_host(e, (size_t)6 * n * sizeof *got);
    cx_fill_f64(e, x, n, 0.01, 10.0);
    CUdeviceptr dx = cx_upload_new(e, x, n * sizeof *x), dout = cx_alloc(e, (size_t)6 * n * sizeof *got);
    CX_LAUNCH(e, op, cx_blocks(n, 256), 256, 0, CXA(dx), CXA(dout), CXA(n));
    cx_download(e, got, dout, (size_t)6 * n * sizeof *got);
    /* long double references, within a few of their own ulps (2^-11
     * double ulps or less): 0.05 ulp of slack covers them. */
    for (int i = 0; i < n; i++) {
        long double v = x[i];
        near_ulps_f64(e, "exp", i, got[0 * (size_t)n + i], expl(v), 1.55);
        near_ulps_f64(e, "log", i, got[1 * (size_t)n + i], logl(v), 1.55);
        near_ulps_f64(e, "erf", i, got[2 * (size_t)n + i], erfl(v), 2.55);
        /* IEEE square root, the host's included: correctly rounded. */
        cx_near(e, "sqrt", i, got[3 * (size_t)n + i], sqrt(x[i]), 0);
        near_ulps_f64(e, "sin", i, got[4 * (size_t)n + i], sinl(v), 2.55);
        near_ulps_f64(e, "cbrt", i, got[5 * (size_t)n + i], cbrtl(v), 1.55);
    }
}

void run_math_fast(compat_env *e)
{
    jitop_op *op = cx_op(e, "fast_math_f32");
    int n = (int)cx_int(e, 50000, 200000);
    float *x = cx_host(e, n * sizeof *x), *got = cx_host(e, (size_t)6 * n * sizeof *got);
    cx_fill_f32(e, x, n, -3.14159f, 3.14159f);
    CUdeviceptr dx = cx_upload_new(e, x, n * sizeof *x), dout = cx_alloc(e, (size_t)6 * n * sizeof *got);
    CX_LAUNCH(e, op, cx_blocks(n, 256), 256, 0, CXA(dx), CXA(dout), CXA(n));
    cx_download(e, got, dout, (size_t)6 * n * sizeof *got);
    const float *r[6];
    for (int k = 0; k < 6; k++)
        r[k] = got + (size_t)k * n;
    for (int i = 0; i < n; i++) {
        /* --use_fast_math reached NVRTC: the library calls are the
         * intrinsics. */
        cx_eq_u64(e, "expf == __expf", i, cx_f32_bits(r[0][i]), cx_f32_bits(r[1][i]));
        cx_eq_u64(e, "sinf == __sinf", i, cx_f32_bits(r[2][i]), cx_f32_bits(r[3][i]));
        cx_eq_u64(e, "logf == __logf", i, cx_f32_bits(r[4][i]), cx_f32_bits(r[5][i]));
        /* l as the kernel rounds it: fabsf(v) + 0.5f in float. */
        double v = x[i], l = fabsf(x[i]) + 0.5f, abs_err = exp2(-21.41);
        near_ulps_f32(e, "__expf", i, r[1][i], exp(v), 2.5 + floor(fabs(1.173 * v)));
        cx_near(e, "__sinf", i, r[3][i], sin(v), abs_err + 0.5 * cx_ulp_f32(sin(v)));
        if (l <= 2.0)
            cx_near(e, "__logf", i, r[5][i], log(l), abs_err + 0.5 * cx_ulp_f32(log(l)));
        else
            near_ulps_f32(e, "__logf", i, r[5][i], log(l), 3.5);
    }
}

void run_index64(compat_env *e)
{
    jitop_op *op = cx_op(e, "fill_hash_u8");
    const unsigned long long two31 = 1ull << 31;
    unsigned long long n = two31 + (unsigned long long)cx_int(e, 1 << 20, 1 << 21);
    unsigned long long salt = cx_u64(e);
    CUdeviceptr d = cx_alloc(e, n);
    CX_LAUNCH(e, op, cx_blocks(n, 256), 256, 0, CXA(d), CXA(n), CXA(salt));
    cx_sync(e);
    enum { W = 65536 };
    unsigned char *got = cx_host(e, W);
    /* The start, across 2^31, the end, and eight random windows above 2^31. */
    unsigned long long starts[11] = {0, two31 - W / 2, n - W};
    for (int k = 3; k < 11; k++)
        starts[k] = two31 + (unsigned long long)cx_int(e, 0, (int64_t)(n - W - two31));
    for (int k = 0; k < 11; k++) {
        cx_download(e, got, d + starts[k], W);
        for (unsigned long long i = starts[k]; i < starts[k] + W; i++)
            cx_eq_u64(e, "hash byte", (size_t)i, got[i - starts[k]],
                      (uint8_t)(((i ^ salt) * 0x9E3779B97F4A7C15ull) >> 56));
    }
}
