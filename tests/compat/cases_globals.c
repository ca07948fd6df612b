/* Run functions of the module-global cases: __constant__ tables filled by
 * name (plain, namespaced, a variable template), one with a static
 * initializer, and __device__ variables handed from kernel to kernel and
 * read and written by the host. */
#include "compat_env.h"
#include "compat_runs.h"

#include <math.h>
#include <string.h>

/* A global's address and size as jitop reports them. */
static uint64_t expect_global(compat_env *e, const char *name, size_t size)
{
    uint64_t dptr = 0;
    size_t got = 0;
    cx_global_get(e, name, &dptr, &got);
    CX_EXPECT(e, dptr != 0, "global %s: device address 0", name);
    CX_EXPECT(e, got == size, "global %s: %zu bytes, expected %zu", name, got, size);
    return dptr;
}

void run_const_table(compat_env *e)
{
    jitop_op *op = cx_op(e, "poly_eval");
    float c[8];
    expect_global(e, "poly_coeffs", sizeof c);
    cx_fill_f32(e, c, 8, -1.0f, 1.0f);
    cx_global_write(e, "poly_coeffs", c, sizeof c);
    int n = (int)cx_int(e, 10000, 100000);
    float *x = cx_host(e, n * sizeof *x), *got = cx_host(e, n * sizeof *got);
    cx_fill_f32(e, x, n, -1.5f, 1.5f);
    CUdeviceptr dx = cx_upload_new(e, x, n * sizeof *x), dy = cx_alloc(e, n * sizeof *got);
    CX_LAUNCH(e, op, cx_blocks(n, 256), 256, 0, CXA(dx), CXA(dy), CXA(n));
    cx_download(e, got, dy, n * sizeof *got);
    /* Horner's rule of degree 7 rounds at most 14 times: within 16 u of
     * sum |c_k| |x|^k. */
    for (int i = 0; i < n; i++) {
        double want = 0, mag = 0, p = 1;
        for (int k = 0; k < 8; k++, p *= x[i]) {
            want += c[k] * p;
            mag += fabs(c[k] * p);
        }
        cx_near(e, "p(x)", i, got[i], want, 16 * CX_EPS_F32 * mag);
    }
}

void run_const_namespaced(compat_env *e)
{
    jitop_op *op = cx_op(e, "lut_gather");
    int lut[64];
    expect_global(e, "compat_ns::lut", sizeof lut);
    cx_fill_i32(e, lut, 64, -1000000, 1000000);
    cx_global_write(e, "compat_ns::lut", lut, sizeof lut);
    int n = (int)cx_int(e, 10000, 100000);
    int *idx = cx_host(e, n * sizeof *idx), *got = cx_host(e, n * sizeof *got);
    cx_fill_i32(e, idx, n, 1, 1000000);
    CUdeviceptr di = cx_upload_new(e, idx, n * sizeof *idx), dout = cx_alloc(e, n * sizeof *got);
    CX_LAUNCH(e, op, cx_blocks(n, 256), 256, 0, CXA(di), CXA(dout), CXA(n));
    cx_download(e, got, dout, n * sizeof *got);
    for (int i = 0; i < n; i++)
        cx_eq_i64(e, "lut[idx & 63]", i, got[i], lut[idx[i] & 63]);
}

/* A variable template read by template kernels: each instance jitop
 * compiles on demand is a binary of its own with its own copy of the
 * variable, and jitop_global_write writes every copy loaded (include/
 * jitop.h, jitop_global_get). So the value is written after the kernel's
 * instance was asked for, and the kernel must read exactly that value:
 * gain<float> with the source's own instance also in the module, and
 * gain<double>, which exists only in its instance's binary. */
void run_const_template_var(compat_env *e)
{
    int n = (int)cx_int(e, 10000, 100000);
    {
        jitop_op *op = cx_op(e, "apply_gain<float>");
        float g = (float)cx_signed(e, 0.5, 4.0);
        expect_global(e, "gain<float>", sizeof g);
        cx_global_write(e, "gain<float>", &g, sizeof g);
        float *x = cx_host(e, n * sizeof *x), *got = cx_host(e, n * sizeof *got);
        cx_fill_f32(e, x, n, -10.0f, 10.0f);
        CUdeviceptr dx = cx_upload_new(e, x, n * sizeof *x), dy = cx_alloc(e, n * sizeof *got);
        CX_LAUNCH(e, op, cx_blocks(n, 256), 256, 0, CXA(dx), CXA(dy), CXA(n));
        cx_download(e, got, dy, n * sizeof *got);
        for (int i = 0; i < n; i++) { /* one float product, as C rounds it */
            float want = x[i] * g;
            cx_near(e, "x * gain<float>", i, got[i], want, 0);
        }
    }
    {
        double g = cx_signed(e, 0.5, 4.0);
        jitop_op *op = cx_op(e, "apply_gain<double>");
        expect_global(e, "gain<double>", sizeof g);
        cx_global_write(e, "gain<double>", &g, sizeof g);
        double *x = cx_host(e, n * sizeof *x), *got = cx_host(e, n * sizeof *got);
        cx_fill_f64(e, x, n, -10.0, 10.0);
        CUdeviceptr dx = cx_upload_new(e, x, n * sizeof *x), dy = cx_alloc(e, n * sizeof *got);
        CX_LAUNCH(e, op, cx_blocks(n, 256), 256, 0, CXA(dx), CXA(dy), CXA(n));
        cx_download(e, got, dy, n * sizeof *got);
        for (int i = 0; i < n; i++)
            cx_near(e, "x * gain<double>", i, got[i], x[i] * g, 0);
    }
}

void run_const_initialized(compat_env *e)
{
    static const int primes[32] = {2,  3,  5,  7,  11, 13, 17, 19, 23,  29,  31,  37,  41,  43,  47,  53,
                                   59, 61, 67, 71, 73, 79, 83, 89, 97, 101, 103, 107, 109, 113, 127, 131};
    jitop_op *op = cx_op(e, "prime_scale");
    int n = (int)cx_int(e, 10000, 100000);
    int *idx = cx_host(e, n * sizeof *idx);
    long long *got = cx_host(e, n * sizeof *got);
    cx_fill_i32(e, idx, n, 1, 1000000);
    CUdeviceptr di = cx_upload_new(e, idx, n * sizeof *idx), dout = cx_alloc(e, n * sizeof *got);
    CX_LAUNCH(e, op, cx_blocks(n, 256), 256, 0, CXA(di), CXA(dout), CXA(n));
    cx_download(e, got, dout, n * sizeof *got);
    for (int i = 0; i < n; i++)
        cx_eq_i64(e, "prime * idx", i, got[i], (int64_t)primes[idx[i] % 32] * idx[i]);
}

/* stash_store then stash_load: y = x scale + 1 (two roundings), and the
 * write counter grows by 1024 per store. */
static void store_then_load(compat_env *e, jitop_op *store, jitop_op *load, unsigned *writes)
{
    float x[1024], y[1024];
    float scale = (float)cx_signed(e, 0.5, 4.0);
    cx_fill_f32(e, x, 1024, -10.0f, 10.0f);
    CUdeviceptr dx = cx_upload_new(e, x, sizeof x), dy = cx_alloc(e, sizeof y);
    CUdeviceptr dw = cx_alloc(e, sizeof *writes);
    CX_LAUNCH(e, store, 4, 256, 0, CXA(dx), CXA(scale));
    CX_LAUNCH(e, load, 4, 256, 0, CXA(dy), CXA(dw));
    cx_download(e, y, dy, sizeof y);
    cx_download(e, writes, dw, sizeof *writes);
    for (int i = 0; i < 1024; i++) {
        double xs = (double)x[i] * scale;
        cx_near(e, "stash + 1", i, y[i], xs + 1.0, 2 * CX_EPS_F32 * (fabs(xs) + 1.0));
    }
}

void run_device_global_handoff(compat_env *e)
{
    jitop_op *store = cx_op(e, "stash_store"), *load = cx_op(e, "stash_load");
    unsigned w1 = 0, w2 = 0;
    store_then_load(e, store, load, &w1);
    store_then_load(e, store, load, &w2);
    CX_EXPECT(e, w1 >= 1024 && w2 - w1 == 1024,
              "stash_writes went from %u to %u, expected 1024 more per store", w1, w2);
}

void run_device_global_api(compat_env *e)
{
    jitop_op *store = cx_op(e, "stash_store"), *load = cx_op(e, "stash_load");
    float v[1024], y[1024], back[1024];
    uint64_t dstash = expect_global(e, "stash", sizeof v);
    expect_global(e, "stash_writes", sizeof(unsigned));

    /* Host writes, a kernel reads; the address reads back the same bytes. */
    cx_fill_f32(e, v, 1024, -10.0f, 10.0f);
    cx_global_write(e, "stash", v, sizeof v);
    cx_download(e, back, (CUdeviceptr)dstash, sizeof back);
    CX_EXPECT(e, memcmp(back, v, sizeof v) == 0, "stash at its address differs from what was written");
    unsigned count = (unsigned)cx_int(e, 1, 1000000), seen = 0;
    cx_global_write(e, "stash_writes", &count, sizeof count);
    CUdeviceptr dy = cx_alloc(e, sizeof y), dw = cx_alloc(e, sizeof seen);
    CX_LAUNCH(e, load, 4, 256, 0, CXA(dy), CXA(dw));
    cx_download(e, y, dy, sizeof y);
    cx_download(e, &seen, dw, sizeof seen);
    for (int i = 0; i < 1024; i++) { /* one float addition, as C rounds it */
        float want = v[i] + 1.0f;
        cx_near(e, "stash + 1", i, y[i], want, 0);
    }
    cx_eq_u64(e, "stash_writes as the kernel saw it", 0, seen, count);

    /* A kernel writes, the host reads. */
    float x[1024], scale = (float)cx_signed(e, 0.5, 4.0);
    cx_fill_f32(e, x, 1024, -10.0f, 10.0f);
    CUdeviceptr dx = cx_upload_new(e, x, sizeof x);
    CX_LAUNCH(e, store, 4, 256, 0, CXA(dx), CXA(scale));
    cx_sync(e);
    cx_global_read(e, "stash", back, sizeof back);
    for (int i = 0; i < 1024; i++) {
        float want = x[i] * scale;
        cx_near(e, "stash read", i, back[i], want, 0);
    }
    cx_global_read(e, "stash_writes", &seen, sizeof seen);
    cx_eq_u64(e, "stash_writes read", 0, seen, (uint64_t)count + 1024);
}
