/* jitop_square_matmul_inplace and jitop_softmax_inplace on a GPU against a
 * float64 CPU reference on fresh random inputs.
 *
 * Square product: every dtype, W and W^T, m in {1, 7, 1000, 65536}, n in
 * {1, 17, 64, 768, 1024, 4096, 12288}. A is filled on the GPU (a hash of a
 * fresh seed per case); the rows checked are copied back before and after:
 * every row where m x n x n is small, else the first, the last, the rows
 * around each quarter of m (where the chunks meet) and random ones. A sits
 * between two guard regions filled with a poison pattern, checked after each
 * call: nothing outside A may be written (the op's scratch is its own
 * allocation, reported by jitop_inplace_scratch_bytes and checked against
 * the documented bound). The scratch is reused across cases, holding the
 * previous case's products, so stale scratch would show as wrong rows.
 * The same cases under the copy-back variants (JITOP_INPLACE_MM_COPY_SMS,
 * _MM_BUFS, small JITOP_INPLACE_CHUNK_MB, in contexts of their own): m not a
 * multiple of the chunk's rows, n 1000, 1024, 4096, W and W^T, every dtype
 * and TF32, A off 16-byte alignment (narrower copy words); each checks that
 * the variant ran (jitop__inplace_partitioned) or, where it must not
 * (overlap off), that it did not. W sits between guards too and must come
 * back unchanged.
 *
 * The panel path (float16/bfloat16 on sm_90, JITOP_INPLACE_MM_PANEL=1 in a
 * context of its own): n from 256 to 4096 in steps of 256 and m from 1 to
 * 65536, W and W^T, rows whose partial sums pass float16's top, two calls in
 * a row on the stream; jitop__inplace_panel_calls must count exactly the
 * eligible calls on a device of compute capability 9.0 and none elsewhere;
 * A or W off 16-byte alignment, n = 1000 or 4352, float32 and
 * JITOP_INPLACE_MM_PANEL=0 never take it. The copy-back variants run with the panel path off.
 *
 * Softmax: every dtype, N from 1 to 140000 (powers of two and not: one block,
 * a cluster and the long-row kernel), scale 1
 * and not (2 and -1.5 on rows near the dtype's top, 0), causal mask, unaligned
 * rows, rows of equal values, of very large values, spread over +-the top,
 * with -inf elements and all -inf, with +inf elements; no NaN, and guards
 * around x. The split kernel (JITOP_INPLACE_SOFTMAX=split, split256, split128,
 * and its lean arithmetic lean, lean256, leanblock for one block, in contexts
 * of their own) over its row lengths (16 KiB to 512 KiB, odd and
 * not splitting into whole vectors per block), with the same options and
 * rows; the one-exponential arithmetic (lean2, lean2_256, lean2_128,
 * lean2block) the same way, with rows over and under its one-FFMA limit. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "load/driver.h"
#include "jitop.h"
#include "ops/ip_plan.h"
#include "gputest.h"
#include "testutil.h"

static const jitop__cuda_api *cu;
static jitop_ctx *ctx;
/* the context matmul_case runs in: ctx, or one with a copy-back variant */
static jitop_ctx *mm_ctx;
/* the context softmax_case runs in: ctx, or one with a softmax path forced */
static jitop_ctx *sm_ctx;
/* contexts forcing split, split256, split128, lean, lean256, leanblock,
 * lean2, lean2_256, lean2_128, lean2block */
#define SPLIT_PATHS 10
static jitop_ctx *split_ctx[SPLIT_PATHS];
static jitop_module *fill_mod;
static jitop_op *fill_op[3];

#define GUARD 4096 /* bytes each side of A */
#define POISON 0xA5

static const char *dname(jitop_dtype dt)
{
    return dt == JITOP_FLOAT32 ? "f32" : dt == JITOP_FLOAT16 ? "f16" : "bf16";
}

static int dindex(jitop_dtype dt)
{
    return dt == JITOP_FLOAT32 ? 0 : dt == JITOP_FLOAT16 ? 1 : 2;
}

/* ---------------------------------------------- host storage of 16-bit types */

static uint16_t f32_to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static float bf16_to_f32(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static void store(jitop_dtype dt, void *buf, size_t i, float v)
{
    if (dt == JITOP_FLOAT32) {
        ((float *)buf)[i] = v;
    } else if (dt == JITOP_FLOAT16) {
        _Float16 h = (_Float16)v;
        memcpy((char *)buf + 2 * i, &h, 2);
    } else {
        uint16_t b = f32_to_bf16(v);
        memcpy((char *)buf + 2 * i, &b, 2);
    }
}

static float load(jitop_dtype dt, const void *buf, size_t i)
{
    if (dt == JITOP_FLOAT32)
        return ((const float *)buf)[i];
    uint16_t b;
    memcpy(&b, (const char *)buf + 2 * i, 2);
    if (dt == JITOP_BFLOAT16)
        return bf16_to_f32(b);
    _Float16 h;
    memcpy(&h, &b, 2);
    return (float)h;
}

/* ------------------------------------------------------------- setup */

/* Uniform values in [-1, 1) from a hash of (seed, index), made on the GPU so
 * that gigabyte inputs cost no host time. */
static const char *FILL_SRC =
    "#include <cuda_fp16.h>\n"
    "#include <cuda_bf16.h>\n"
    "__device__ float u(unsigned long long s, long long i) {\n"
    "  unsigned long long z = s + (unsigned long long)i * 0x9E3779B97F4A7C15ull;\n"
    "  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull; z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;\n"
    "  z ^= z >> 31; return (float)(z >> 40) * (2.0f / 16777216.0f) - 1.0f; }\n"
    "extern \"C\" __global__ void fill_f32(float *p, long long n, unsigned long long s) {\n"
    "  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;\n"
    "       i += (long long)gridDim.x * blockDim.x) p[i] = u(s, i); }\n"
    "extern \"C\" __global__ void fill_f16(__half *p, long long n, unsigned long long s) {\n"
    "  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;\n"
    "       i += (long long)gridDim.x * blockDim.x) p[i] = __float2half(u(s, i)); }\n"
    "extern \"C\" __global__ void fill_bf16(__nv_bfloat16 *p, long long n, unsigned long long s) {\n"
    "  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;\n"
    "       i += (long long)gridDim.x * blockDim.x) p[i] = __float2bfloat16(u(s, i)); }\n";

static void setup_ctx(void)
{
    if (ctx != NULL)
        return;
    char *dir = jt_tmpdir();
    char *cache = jt_path(dir, "cache");
    ctx = jt_ctx_driver(cache);
    OK(jitop_ctx_cuda(ctx, NULL, NULL));
    cu = jitop__cuda();
    assert_non_null(cu);
    OK(jitop_load_inline(ctx, "fill", FILL_SRC, NULL, 0, &fill_mod));
    OK(jitop_op_get(fill_mod, "fill_f32", &fill_op[0]));
    OK(jitop_op_get(fill_mod, "fill_f16", &fill_op[1]));
    OK(jitop_op_get(fill_mod, "fill_bf16", &fill_op[2]));
    free(dir);
    free(cache);
}

static int teardown_all(void **state)
{
    (void)state;
    for (int i = 0; i < SPLIT_PATHS; i++) {
        jitop_ctx_destroy(split_ctx[i]);
        split_ctx[i] = NULL;
    }
    jitop_ctx_destroy(mm_ctx); /* left by a variant case that failed */
    mm_ctx = NULL;
    jitop_ctx_destroy(ctx);
    ctx = NULL;
    jt_cleanup();
    return 0;
}

static unsigned long long fresh_seed(void)
{
    unsigned long long s;
    double r[2];
    jt_random_doubles(r, 2, 0, 4294967296.0);
    s = ((unsigned long long)r[0] << 32) ^ (unsigned long long)r[1];
    return s;
}

static void fill(jitop_dtype dt, CUdeviceptr p, long long n)
{
    unsigned long long s = fresh_seed();
    void *ptr = (void *)(uintptr_t)p;
    void *args[] = {&ptr, &n, &s};
    long long blocks = (n + 255) / 256;
    if (blocks > 132 * 32)
        blocks = 132 * 32;
    OK(jitop_launch(fill_op[dindex(dt)], (jitop_dim3){(unsigned)blocks, 1, 1},
                    (jitop_dim3){256, 1, 1}, 0, NULL, args, NULL, 3));
}

/* A buffer of bytes between two guards, all filled with the poison pattern. */
typedef struct guarded {
    CUdeviceptr base, p;
    size_t bytes;
} guarded;

static guarded galloc(size_t bytes, size_t offset)
{
    guarded g = {0, 0, bytes};
    CU(cu->cuMemAlloc(&g.base, bytes + 2 * GUARD + offset));
    CU(cu->cuMemsetD8(g.base, POISON, bytes + 2 * GUARD + offset));
    g.p = g.base + GUARD + offset;
    return g;
}

/* Every guard byte still holds the poison. */
static void check_guards(const guarded *g, size_t offset, const char *what)
{
    unsigned char buf[GUARD + 64];
    size_t lo = GUARD + offset;
    assert_true(lo <= sizeof buf);
    CU(cu->cuMemcpyDtoH(buf, g->base, lo));
    for (size_t i = 0; i < lo; i++)
        if (buf[i] != POISON)
            fail_msg("%s: byte %zu before the tensor was written", what, lo - i);
    CU(cu->cuMemcpyDtoH(buf, g->p + g->bytes, GUARD));
    for (size_t i = 0; i < GUARD; i++)
        if (buf[i] != POISON)
            fail_msg("%s: byte %zu after the tensor was written", what, i);
}

static void gfree(guarded *g)
{
    if (g->base)
        CU(cu->cuMemFree(g->base));
    g->base = g->p = 0;
}

/* ---------------------------------------------------------- square matmul */

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

/* The rows to check (sorted, distinct); returns how many. */
static size_t pick_rows(int64_t m, int64_t n, int64_t *rows, size_t cap)
{
    size_t k = 0;
    if ((double)m * (double)n * (double)n <= 2e8 && (size_t)m <= cap) {
        for (int64_t r = 0; r < m; r++)
            rows[k++] = r;
        return k;
    }
    const int64_t want[] = {0, m - 1, m / 4 - 1, m / 4, m / 2 - 1, m / 2, 3 * m / 4, m - 2};
    for (size_t i = 0; i < sizeof want / sizeof want[0] && k < cap; i++)
        if (want[i] >= 0 && want[i] < m)
            rows[k++] = want[i];
    double r[4];
    jt_random_doubles(r, 4, 0, (double)m);
    for (size_t i = 0; i < 4 && k < cap; i++)
        rows[k++] = (int64_t)r[i];
    qsort(rows, k, sizeof rows[0], cmp_i64);
    size_t u = 0;
    for (size_t i = 0; i < k; i++)
        if (u == 0 || rows[u - 1] != rows[i])
            rows[u++] = rows[i];
    /* large n: the float64 reference costs n * n per row */
    if (n >= 4096 && u > 4) {
        rows[1] = rows[u / 2];
        rows[2] = rows[u - 1];
        u = 3;
    }
    return u;
}

static size_t max_bound; /* the largest scratch bound of the cases run so far */

/* matmul_case_at's inputs. 0: fill's uniform [-1, 1) everywhere. 1: the
 * even rows of A from 96 to 100, W's entries 0.5 to 1 in magnitude, positive
 * for k < n / 2 and negative after (k: W's row, or its column when
 * transposed), so that the partial sums of an even row reach about
 * 100 x 0.75 x n / 2 (over float16's top 65504 for n >= 2048: an
 * accumulator of the input's type would overflow) while the result stays
 * near 100 x 0.15 x sqrt(n); the odd rows stay uniform. */
static int mm_large;
/* calls in a row on the stream, no synchronization between: A <- A W^reps */
static int mm_reps = 1;
/* W at this many bytes past a 256-byte boundary */
static size_t mm_woff;

static void put_large(jitop_dtype dt, CUdeviceptr a, int64_t m, CUdeviceptr w, int64_t n,
                      int trans)
{
    const size_t es = jitop_dtype_size(dt);
    float *v = malloc((size_t)n * sizeof(float));
    void *h = malloc((size_t)n * n * es);
    assert_true(v != NULL && h != NULL);
    for (int64_t r = 0; r < m; r += 2) {
        jt_random_floats(v, (size_t)n, 96.f, 100.f);
        for (int64_t k = 0; k < n; k++)
            store(dt, h, (size_t)k, v[k]);
        CU(cu->cuMemcpyHtoD(a + (size_t)r * n * es, h, (size_t)n * es));
    }
    for (int64_t i = 0; i < n; i++) {
        jt_random_floats(v, (size_t)n, 0.5f, 1.f);
        for (int64_t j = 0; j < n; j++) {
            const int64_t k = trans ? j : i;
            store(dt, h, (size_t)i * n + j, k < n / 2 ? v[j] : -v[j]);
        }
    }
    CU(cu->cuMemcpyHtoD(w, h, (size_t)n * n * es));
    free(v);
    free(h);
}

/* A at offset bytes past a 256-byte boundary (0: as cuMemAlloc gives). */
static void matmul_case_at(jitop_dtype dt, int trans, int64_t m, int64_t n, unsigned flags,
                           size_t offset)
{
    const size_t es = jitop_dtype_size(dt);
    jitop_ctx *c = mm_ctx != NULL ? mm_ctx : ctx;
    guarded a = galloc((size_t)m * n * es, offset);
    guarded wg = galloc((size_t)n * n * es, mm_woff);
    const CUdeviceptr w = wg.p;
    fill(dt, a.p, m * n);
    fill(dt, w, n * n);
    CU(cu->cuCtxSynchronize());
    if (mm_large)
        put_large(dt, a.p, m, w, n, trans);

    int64_t rows[64];
    size_t nr = pick_rows(m, n, rows, 64);
    void *wh = malloc((size_t)n * n * es);
    float *wf = malloc((size_t)n * n * sizeof(float));
    void *ah = malloc((size_t)nr * n * es), *oh = malloc((size_t)nr * n * es);
    double *acc = malloc((size_t)n * sizeof(double)), *ad = malloc((size_t)n * sizeof(double));
    assert_true(wh && wf && ah && oh && acc && ad);
    CU(cu->cuMemcpyDtoH(wh, w, (size_t)n * n * es));
    for (size_t i = 0; i < (size_t)n * n; i++)
        wf[i] = load(dt, wh, i);
    for (size_t i = 0; i < nr; i++)
        CU(cu->cuMemcpyDtoH((char *)ah + i * n * es, a.p + (size_t)rows[i] * n * es, n * es));

    for (int rep = 0; rep < mm_reps; rep++)
        OK(jitop_square_matmul_inplace(c, dt, m, n, (void *)(uintptr_t)a.p,
                                       (void *)(uintptr_t)w, trans, flags, NULL));
    CU(cu->cuCtxSynchronize());
    for (size_t i = 0; i < nr; i++)
        CU(cu->cuMemcpyDtoH((char *)oh + i * n * es, a.p + (size_t)rows[i] * n * es, n * es));
    /* W is read only (the panel path reads a transposed copy of its own) */
    {
        void *wa = malloc((size_t)n * n * es);
        assert_non_null(wa);
        CU(cu->cuMemcpyDtoH(wa, w, (size_t)n * n * es));
        if (memcmp(wa, wh, (size_t)n * n * es) != 0)
            fail_msg("%s trans=%d m=%lld n=%lld: w was written", dname(dt), trans, (long long)m,
                     (long long)n);
        free(wa);
    }

    /* float32: full float32 products (no TF32); 16-bit: the output's rounding */
    double tol = dt == JITOP_FLOAT32 ? 1e-5 : dt == JITOP_FLOAT16 ? 2e-3 : 1e-2;
    if (flags & JITOP_MATMUL_TF32)
        tol = 5e-3;
    for (size_t i = 0; i < nr; i++) {
        for (int64_t k = 0; k < n; k++)
            ad[k] = load(dt, (const char *)ah + i * n * es, (size_t)k);
        double num = 0, den = 0;
        for (int rep = 0; rep < mm_reps; rep++) {
            if (rep > 0) /* the next product's input (unrounded: within the tolerance) */
                memcpy(ad, acc, (size_t)n * sizeof(double));
            if (trans) {
                for (int64_t j = 0; j < n; j++) {
                    double s = 0;
                    const float *wr = wf + (size_t)j * n;
                    for (int64_t k = 0; k < n; k++)
                        s += ad[k] * wr[k];
                    acc[j] = s;
                }
            } else {
                for (int64_t j = 0; j < n; j++)
                    acc[j] = 0;
                for (int64_t k = 0; k < n; k++) {
                    const double av = ad[k];
                    const float *wr = wf + (size_t)k * n;
                    for (int64_t j = 0; j < n; j++)
                        acc[j] += av * wr[j];
                }
            }
        }
        for (int64_t j = 0; j < n; j++) {
            const double o = load(dt, (const char *)oh + i * n * es, (size_t)j);
            if (!isfinite(o))
                fail_msg("%s trans=%d m=%lld n=%lld: row %lld col %lld is %g", dname(dt), trans,
                         (long long)m, (long long)n, (long long)rows[i], (long long)j, o);
            num += (o - acc[j]) * (o - acc[j]);
            den += acc[j] * acc[j];
        }
        const double err = den > 0 ? sqrt(num / den) : sqrt(num);
        if (!(err <= tol))
            fail_msg("%s trans=%d m=%lld n=%lld: row %lld relative error %.3g > %.1g", dname(dt),
                     trans, (long long)m, (long long)n, (long long)rows[i], err, tol);
    }
    char what[96];
    snprintf(what, sizeof what, "matmul %s trans=%d m=%lld n=%lld off=%zu", dname(dt), trans,
             (long long)m, (long long)n, offset);
    check_guards(&a, offset, what);
    char wwhat[112];
    snprintf(wwhat, sizeof wwhat, "%s: w", what);
    check_guards(&wg, mm_woff, wwhat);
    size_t bound = jitop_square_matmul_scratch_bound(dt, n);
    if (bound > max_bound)
        max_bound = bound;
    if (jitop_inplace_scratch_bytes(c) > max_bound)
        fail_msg("%s: %zu bytes of scratch held, over the bound %zu", what,
                 jitop_inplace_scratch_bytes(c), max_bound);
    free(wh);
    free(wf);
    free(ah);
    free(oh);
    free(acc);
    free(ad);
    gfree(&wg);
    gfree(&a);
}

static void matmul_case(jitop_dtype dt, int trans, int64_t m, int64_t n, unsigned flags)
{
    matmul_case_at(dt, trans, m, n, flags, 0);
}

static void matmul_dtype(jitop_dtype dt)
{
    static const int64_t ms[] = {65536, 1, 7, 1000};
    static const int64_t ns[] = {1, 17, 64, 768, 1024, 4096, 12288};
    for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++)
        for (size_t mi = 0; mi < sizeof ms / sizeof ms[0]; mi++)
            for (int trans = 0; trans <= 1; trans++)
                matmul_case(dt, trans, ms[mi], ns[ni], 0);
}

static void test_matmul_f32(void **state)
{
    (void)state;
    JT_REQUIRE_GPU();
    setup_ctx();
    matmul_dtype(JITOP_FLOAT32);
}

static void test_matmul_f16(void **state)
{
    (void)state;
    JT_REQUIRE_GPU();
    setup_ctx();
    matmul_dtype(JITOP_FLOAT16);
}

static void test_matmul_bf16(void **state)
{
    (void)state;
    JT_REQUIRE_GPU();
    setup_ctx();
    matmul_dtype(JITOP_BFLOAT16);
}

/* The scratch stays within its bound for any m, and goes when released;
 * TF32 when asked is close to float32 but allowed its own error. */
static void test_matmul_scratch_and_tf32(void **state)
{
    (void)state;
    JT_REQUIRE_GPU();
    setup_ctx();
    OK(jitop_inplace_release(ctx));
    assert_int_equal(jitop_inplace_scratch_bytes(ctx), 0);
    const int64_t n = 1024, m = 300000; /* 1.2 GB of float32: many chunks */
    guarded a = galloc((size_t)m * n * 4, 0);
    CUdeviceptr w;
    CU(cu->cuMemAlloc(&w, (size_t)n * n * 4));
    fill(JITOP_FLOAT32, a.p, m * n);
    fill(JITOP_FLOAT32, w, n * n);
    OK(jitop_square_matmul_inplace(ctx, JITOP_FLOAT32, m, n, (void *)(uintptr_t)a.p,
                                   (void *)(uintptr_t)w, 0, JITOP_MATMUL_TF32, NULL));
    CU(cu->cuCtxSynchronize());
    size_t held = jitop_inplace_scratch_bytes(ctx);
    print_message("scratch for m=%lld n=%lld f32: %zu bytes (bound %zu, A is %zu)\n",
                  (long long)m, (long long)n, held, jitop_square_matmul_scratch_bound(JITOP_FLOAT32, n),
                  (size_t)m * n * 4);
    assert_true(held > 0);
    assert_true(held <= jitop_square_matmul_scratch_bound(JITOP_FLOAT32, n));
    check_guards(&a, 0, "tf32");
    OK(jitop_inplace_release(ctx));
    assert_int_equal(jitop_inplace_scratch_bytes(ctx), 0);
    CU(cu->cuMemFree(w));
    gfree(&a);
    matmul_case(JITOP_FLOAT32, 0, 1000, 768, JITOP_MATMUL_TF32);
    matmul_case(JITOP_FLOAT32, 1, 4096, 1024, JITOP_MATMUL_TF32);
}

/* The copy-back variants' settings and the panel path's, read by a context
 * when its first in-place call makes its state, and by
 * jitop_square_matmul_scratch_bound at each call: set by variant_begin for
 * the context it makes and kept set while that context's cases run
 * (variant_end restores them). */
#define MM_NVARS 5
static const char *const MM_VARS[MM_NVARS] = {"JITOP_INPLACE_CHUNK_MB", "JITOP_INPLACE_OVERLAP",
                                              "JITOP_INPLACE_MM_BUFS", "JITOP_INPLACE_MM_COPY_SMS",
                                              "JITOP_INPLACE_MM_PANEL"};
static char *mm_saved[MM_NVARS];
static size_t mm_saved_bound;

/* panel: JITOP_INPLACE_MM_PANEL's value (NULL: unset, the automatic rule) */
static void variant_begin_panel(const char *chunk_mb, const char *overlap, const char *bufs,
                                const char *copy_sms, const char *panel)
{
    const char *const v[MM_NVARS] = {chunk_mb, overlap, bufs, copy_sms, panel};
    for (int i = 0; i < MM_NVARS; i++) {
        const char *was = getenv(MM_VARS[i]);
        mm_saved[i] = was != NULL ? strdup(was) : NULL;
        assert_true(was == NULL || mm_saved[i] != NULL);
        assert_int_equal(v[i] != NULL ? setenv(MM_VARS[i], v[i], 1) : unsetenv(MM_VARS[i]), 0);
    }
    mm_ctx = jt_ctx_driver(jitop_cache_dir(ctx)); /* the same cache: no second compile */
    OK(jitop_ctx_cuda(mm_ctx, NULL, NULL));
    /* the state (and its settings) made now, by a one-element softmax */
    guarded one = galloc(sizeof(float), 0);
    OK(jitop_softmax_inplace(mm_ctx, JITOP_FLOAT32, 1, 1, (void *)(uintptr_t)one.p, 1.f, 0, NULL));
    CU(cu->cuCtxSynchronize());
    gfree(&one);
    mm_saved_bound = max_bound;
    max_bound = 0;
}

/* The copy-back variants are the chunked path's: the panel path off, so that
 * no float16/bfloat16 case on sm_90 leaves it unseen. */
static void variant_begin(const char *chunk_mb, const char *overlap, const char *bufs,
                          const char *copy_sms)
{
    variant_begin_panel(chunk_mb, overlap, bufs, copy_sms, "0");
}

static void variant_end(void)
{
    OK(jitop_inplace_release(mm_ctx));
    assert_int_equal(jitop_inplace_scratch_bytes(mm_ctx), 0);
    jitop_ctx_destroy(mm_ctx);
    mm_ctx = NULL;
    for (int i = 0; i < MM_NVARS; i++) {
        assert_int_equal(mm_saved[i] != NULL ? setenv(MM_VARS[i], mm_saved[i], 1)
                                             : unsetenv(MM_VARS[i]),
                         0);
        free(mm_saved[i]);
        mm_saved[i] = NULL;
    }
    max_bound = mm_saved_bound;
}

/* matmul_case_at in the variant's context; the copy-back must have run on
 * the kept SMs exactly when the plan (ops/ip_plan.h, on this device, with
 * cuBLAS's SM count target, which libcublas.so.13 has) says so. */
static void variant_case(jitop_dtype dt, int trans, int64_t m, int64_t n, unsigned flags,
                         size_t offset)
{
    int dev = 0, sms = 0;
    OK(jitop_ctx_cuda(mm_ctx, NULL, &dev));
    CU(cu->cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev));
    jitop__ip_mm_cfg cfg;
    jitop__ip_mm_cfg_env(&cfg);
    assert_int_equal(cfg.bad, 0);
    jitop__ip_mm_plan p;
    /* the address only picks the copy word, not whether the partition runs */
    jitop__ip_mm_plan_make(&cfg, m, (size_t)n * jitop_dtype_size(dt), 0, sms, 1, &p);
    const size_t before = jitop__inplace_partitioned(mm_ctx);
    matmul_case_at(dt, trans, m, n, flags, offset);
    const size_t ran = jitop__inplace_partitioned(mm_ctx) - before;
    print_message("variant chunk %s bufs %s copy_sms %s overlap %s: %s trans=%d m=%lld n=%lld "
                  "off=%zu: %lld chunks of %lld rows, %s\n",
                  getenv(MM_VARS[0]) ? getenv(MM_VARS[0]) : "-",
                  getenv(MM_VARS[2]) ? getenv(MM_VARS[2]) : "-",
                  getenv(MM_VARS[3]) ? getenv(MM_VARS[3]) : "-",
                  getenv(MM_VARS[1]) ? getenv(MM_VARS[1]) : "-", dname(dt), trans, (long long)m,
                  (long long)n, offset, (long long)p.chunks, (long long)p.rows,
                  ran ? "partitioned" : "driver copy");
    if (ran != (p.partition ? 1u : 0u))
        fail_msg("%s trans=%d m=%lld n=%lld: the SM partition ran %zu times, the plan says %d",
                 dname(dt), trans, (long long)m, (long long)n, ran, p.partition);
}

static void variant_dtype(jitop_dtype dt, unsigned flags)
{
    const size_t es = jitop_dtype_size(dt);
    /* 8 SMs kept, 4 MiB chunks, two buffers */
    variant_begin("4", NULL, NULL, "8");
    for (int trans = 0; trans <= 1; trans++) {
        variant_case(dt, trans, 10007, 1024, flags, 0); /* last chunk partial */
        variant_case(dt, trans, 1031, 4096, flags, 0);  /* 7 or 3 rows in the last */
    }
    variant_case(dt, 0, 9000, 1000, flags, 0);     /* n not a multiple of 8 */
    variant_case(dt, 1, 5000, 1024, flags, es);    /* A off 16 bytes: narrower words */
    variant_case(dt, 0, 3001, 1000, flags, 3 * es); /* and odd rows */
    variant_case(dt, 0, 1000, 768, flags, 0);      /* one chunk: no partition */
    variant_end();
    /* 16 SMs, 8 MiB chunks, three buffers */
    variant_begin("8", NULL, "3", "16");
    variant_case(dt, 0, 65536 + 37, 1024, flags, 0);
    variant_case(dt, 1, 65536 + 37, 1024, flags, 0);
    variant_case(dt, 0, 4096, 4096, flags, 0);
    variant_case(dt, 1, 4096, 4096, flags, 0);
    variant_end();
    /* 4 SMs, 1 MiB chunks (many small products), four buffers */
    variant_begin("1", NULL, "4", "4");
    variant_case(dt, 0, 1031, 4096, flags, 0);
    variant_case(dt, 1, 3001, 1024, flags, 0);
    variant_end();
    /* three buffers, the driver's copy */
    variant_begin("2", NULL, "3", NULL);
    variant_case(dt, 0, 10007, 1024, flags, 0);
    variant_case(dt, 1, 1031, 4096, flags, 0);
    variant_end();
    /* SMs asked for but no copy stream: the driver's copy on the caller's stream */
    variant_begin("4", "0", NULL, "8");
    variant_case(dt, 0, 10007, 1024, flags, 0);
    variant_end();
}

static void test_matmul_variants(void **state)
{
    (void)state;
    JT_REQUIRE_GPU();
    setup_ctx();
    variant_dtype(JITOP_FLOAT16, 0);
    variant_dtype(JITOP_BFLOAT16, 0);
    variant_dtype(JITOP_FLOAT32, 0);
    variant_dtype(JITOP_FLOAT32, JITOP_MATMUL_TF32);
}

/* ------------------------------------------------------ the panel path */

/* The device of ctx has compute capability 9.0 exactly (sm_90a's kernels run
 * on it and on no other). */
static int is_sm90(void)
{
    int dev = 0, major = 0, minor = 0;
    OK(jitop_ctx_cuda(ctx, NULL, &dev));
    CU(cu->cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev));
    CU(cu->cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev));
    return major == 9 && minor == 0;
}

/* The panel path's shapes (inplace.c's rule, restated here so that the test
 * does not take the code's word): 16-bit, n a multiple of 256 in
 * [256, 4096], A 16-byte aligned, and W where TMA reads it (W^T: trans). */
static int panel_shape(jitop_dtype dt, int trans, int64_t n, size_t offset)
{
    (void)trans; /* 16-bit: TMA reads W for A W (N-major) and A W^T alike */
    return (dt == JITOP_FLOAT16 || dt == JITOP_BFLOAT16) && n % 256 == 0 && n >= 256 &&
           n <= 4096 && offset % 16 == 0 && mm_woff % 16 == 0;
}

/* matmul_case_at in mm_ctx; jitop__inplace_panel_calls must grow by one per
 * call exactly when want_panel (and the device is sm_90), else stay. */
static unsigned panel_flags; /* panel_case's flags (JITOP_MATMUL_TF32) */

static void panel_case(jitop_dtype dt, int trans, int64_t m, int64_t n, size_t offset,
                       int want_panel)
{
    const size_t before = jitop__inplace_panel_calls(mm_ctx);
    matmul_case_at(dt, trans, m, n, panel_flags, offset);
    const size_t ran = jitop__inplace_panel_calls(mm_ctx) - before;
    const size_t want = want_panel && is_sm90() ? (size_t)mm_reps : 0;
    if (ran != want)
        fail_msg("panel %s: %s trans=%d m=%lld n=%lld off=%zu reps=%d: the panel path ran %zu "
                 "times, want %zu",
                 getenv("JITOP_INPLACE_MM_PANEL") ? getenv("JITOP_INPLACE_MM_PANEL") : "-",
                 dname(dt), trans, (long long)m, (long long)n, offset, mm_reps, ran, want);
}

static void panel_dtype(jitop_dtype dt)
{
    static const int64_t ns[] = {256, 512, 768, 1024, 1536, 2048, 4096};
    static const int64_t ms[] = {1, 7, 129, 1000, 4096};
    for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++)
        for (size_t mi = 0; mi < sizeof ms / sizeof ms[0]; mi++)
            for (int trans = 0; trans <= 1; trans++)
                panel_case(dt, trans, ms[mi], ns[ni], 0, 1);
    for (int trans = 0; trans <= 1; trans++) {
        panel_case(dt, trans, 65536, 1024, 0, 1); /* 512 panels: each group loops */
        panel_case(dt, trans, 20000, 1280, 0, 1); /* groups of 5 over 157 panels: 6-7 rounds */
        panel_case(dt, trans, 20000, 1792, 0, 1); /* groups of 7 (126 blocks) */
        mm_large = 1;
        panel_case(dt, trans, 1000, 2048, 0, 1);
        mm_large = 0;
    }
    /* two calls in a row on the stream: the second must see the first's
     * output whole (and find the path's counters ready again) */
    mm_reps = 2;
    panel_case(dt, 0, 4096, 1024, 0, 1);
    panel_case(dt, 1, 1000, 512, 0, 1);
    mm_reps = 1;
    /* not the panel path, the same results */
    panel_case(dt, 0, 1000, 1024, 2, panel_shape(dt, 0, 1024, 2)); /* A off 16 bytes */
    mm_woff = 8;
    /* W off 16 bytes, read by TMA both ways */
    panel_case(dt, 1, 1000, 1024, 0, panel_shape(dt, 1, 1024, 0));
    panel_case(dt, 0, 1000, 1024, 0, panel_shape(dt, 0, 1024, 0));
    mm_woff = 0;
    panel_case(dt, 1, 1000, 1000, 0, panel_shape(dt, 1, 1000, 0)); /* n not a multiple of 256 */
    panel_case(dt, 0, 129, 4352, 0, panel_shape(dt, 0, 4352, 0));  /* n over 4096 */
}

/* The panel kernel's group handshake under repetition: reps fresh copies
 * of one A, each multiplied by the panel path (mm_ctx), every element
 * compared with the chunked cuBLAS path's product of the same A (a block
 * that stored into a panel its group still read would spoil whole tiles,
 * now and then: the sampled rows of matmul_case_at could miss it). Both
 * accumulate in float32: they may differ by the output's rounding. */
static void panel_race_case(jitop_dtype dt, int trans, int64_t m, int64_t n, unsigned flags,
                            int reps)
{
    const size_t es = jitop_dtype_size(dt), bytes = (size_t)m * n * es;
    OK(jitop__cuda_more()); /* cuMemcpyDtoDAsync is in the table's second part */
    CUdeviceptr a0 = 0, a = 0, w = 0;
    CU(cu->cuMemAlloc(&a0, bytes));
    CU(cu->cuMemAlloc(&a, bytes));
    CU(cu->cuMemAlloc(&w, (size_t)n * n * es));
    fill(dt, a0, m * n);
    fill(dt, w, n * n);
    void *ref = malloc(bytes), *out = malloc(bytes);
    assert_true(ref && out);
    /* the reference: the chunked path */
    variant_begin_panel(NULL, NULL, NULL, NULL, "0");
    CU(cu->cuMemcpyDtoDAsync(a, a0, bytes, NULL));
    OK(jitop_square_matmul_inplace(mm_ctx, dt, m, n, (void *)(uintptr_t)a, (void *)(uintptr_t)w,
                                   trans, flags, NULL));
    CU(cu->cuCtxSynchronize());
    CU(cu->cuMemcpyDtoH(ref, a, bytes));
    variant_end();
    double top = 0;
    for (size_t i = 0; i < (size_t)m * n; i++)
        top = fmax(top, fabs(load(dt, ref, i)));
    assert_true(top > 0 && isfinite(top));
    /* TF32: cuBLAS rounds the inputs to TF32, the panel's tensor cores
     * drop their low bits */
    const double tol = (dt == JITOP_FLOAT16 ? 4e-3 : dt == JITOP_BFLOAT16 ? 2e-2 : 1e-2) * top;
    variant_begin_panel(NULL, NULL, NULL, NULL, "1");
    for (int r = 0; r < reps; r++) {
        const size_t before = jitop__inplace_panel_calls(mm_ctx);
        CU(cu->cuMemcpyDtoDAsync(a, a0, bytes, NULL));
        OK(jitop_square_matmul_inplace(mm_ctx, dt, m, n, (void *)(uintptr_t)a,
                                       (void *)(uintptr_t)w, trans, flags, NULL));
        CU(cu->cuCtxSynchronize());
        assert_int_equal(jitop__inplace_panel_calls(mm_ctx) - before, is_sm90() ? 1 : 0);
        CU(cu->cuMemcpyDtoH(out, a, bytes));
        size_t bad = 0, first = 0;
        for (size_t i = 0; i < (size_t)m * n; i++)
            if (!(fabs(load(dt, out, i) - load(dt, ref, i)) <= tol) && bad++ == 0)
                first = i;
        if (bad != 0)
            fail_msg("panel race %s trans=%d m=%lld n=%lld rep %d: %zu elements off the chunked "
                     "path's product (first: row %zu col %zu, %g against %g)",
                     dname(dt), trans, (long long)m, (long long)n, r, bad, first / (size_t)n,
                     first % (size_t)n, load(dt, out, first), load(dt, ref, first));
    }
    variant_end();
    free(ref);
    free(out);
    CU(cu->cuMemFree(a0));
    CU(cu->cuMemFree(a));
    CU(cu->cuMemFree(w));
}

static void test_matmul_panel(void **state)
{
    (void)state;
    JT_REQUIRE_GPU();
    setup_ctx();
    print_message("panel path: device %s compute capability 9.0\n", is_sm90() ? "of" : "not of");
    variant_begin_panel(NULL, NULL, NULL, NULL, "1");
    panel_dtype(JITOP_FLOAT16);
    panel_dtype(JITOP_BFLOAT16);
    /* full float32 never; TF32 on its shapes (n a multiple of 128: tiles
     * of 128 columns), its own tolerance */
    panel_case(JITOP_FLOAT32, 0, 1000, 1024, 0, 0);
    panel_case(JITOP_FLOAT32, 1, 4096, 1024, 0, 0);
    panel_flags = JITOP_MATMUL_TF32;
    static const int64_t tn[] = {256, 384, 1024, 1152, 2048, 4096};
    static const int64_t tm[] = {1, 129, 1000, 4096};
    for (size_t ni = 0; ni < sizeof tn / sizeof tn[0]; ni++)
        for (size_t mi = 0; mi < sizeof tm / sizeof tm[0]; mi++)
            for (int trans = 0; trans <= 1; trans++)
                panel_case(JITOP_FLOAT32, trans, tm[mi], tn[ni], 0, 1);
    panel_case(JITOP_FLOAT32, 0, 20000, 1024, 0, 1); /* groups of 8 over 157 panels */
    panel_case(JITOP_FLOAT32, 1, 20000, 1152, 0, 1); /* groups of 9 */
    panel_case(JITOP_FLOAT32, 1, 1000, 1000, 0, 0);  /* n not a multiple of 128 */
    panel_case(JITOP_FLOAT32, 0, 1000, 1024, 4, 0);  /* A off 16 bytes */
    mm_woff = 4; /* A W: W read by the transpose, into jitop's aligned W^T */
    panel_case(JITOP_FLOAT32, 0, 1000, 1024, 0, 1);
    mm_woff = 0;
    panel_flags = 0;
    assert_int_equal(jitop__inplace_panel_calls(mm_ctx),
                     is_sm90() ? 2 * (7 * 5 * 2 + 2 + 4 + 2 + 2 * 2) + 6 * 4 * 2 + 2 + 1 : 0);
    variant_end();
    /* the automatic rule, one context and stream, calls that share the
     * scratch whose first words are the panel kernel's counters (zero
     * between calls: a kernel that found them dirty would store into a
     * panel its group still reads, or never finish): panel; chunked (n 1280
     * at m 4096: its products land over the counters); panel again; TF32 A
     * W on a small grid (m 1: W^T right after its few counters, over the
     * large grid's); the large grid twice (the first zeroes them again) */
    variant_begin_panel(NULL, NULL, NULL, NULL, NULL);
    for (int round = 0; round < 2; round++) {
        panel_case(JITOP_FLOAT16, 0, 4096, 1024, 0, 1);
        panel_case(JITOP_BFLOAT16, 1, 4096, 1280, 0, 0);
        panel_case(JITOP_BFLOAT16, 1, 1000, 512, 0, 1);
        panel_flags = JITOP_MATMUL_TF32;
        panel_case(JITOP_FLOAT32, 0, 129, 768, 0, 1);
        panel_case(JITOP_FLOAT32, 0, 1, 1024, 0, 1);
        panel_flags = 0;
        panel_case(JITOP_FLOAT16, 0, 65536, 1024, 0, 1);
        panel_case(JITOP_BFLOAT16, 1, 65536, 1024, 0, 1);
    }
    variant_end();
    /* JITOP_INPLACE_MM_PANEL=0: never, on the path's own shapes */
    variant_begin_panel(NULL, NULL, NULL, NULL, "0");
    panel_case(JITOP_FLOAT16, 0, 4096, 1024, 0, 0);
    panel_case(JITOP_FLOAT16, 1, 1000, 256, 0, 0);
    panel_case(JITOP_BFLOAT16, 1, 4096, 2048, 0, 0);
    panel_case(JITOP_BFLOAT16, 0, 7, 4096, 0, 0);
    assert_int_equal(jitop__inplace_panel_calls(mm_ctx), 0);
    variant_end();
}

/* Every element of the panel path's product, repeated. A store before the
 * group's wait shows where a group's blocks drift apart: wide groups (TF32
 * n 4096: 32 blocks; 16-bit n 4096: 16), many rounds a group (m 20000,
 * groups of 5, the last panel part-empty), one round (m 4097: 33 panels on
 * 33 groups). */
static void test_matmul_panel_race(void **state)
{
    (void)state;
    JT_REQUIRE_GPU();
    setup_ctx();
    panel_race_case(JITOP_FLOAT32, 0, 1000, 4096, JITOP_MATMUL_TF32, 6);
    panel_race_case(JITOP_FLOAT32, 1, 4097, 2048, JITOP_MATMUL_TF32, 3);
    panel_race_case(JITOP_FLOAT16, 0, 4097, 4096, 0, 3);
    panel_race_case(JITOP_BFLOAT16, 1, 20000, 2048, 0, 3);
    panel_race_case(JITOP_FLOAT16, 0, 20000, 1280, 0, 3);
    panel_race_case(JITOP_BFLOAT16, 1, 4097, 1024, 0, 3);
}

/* ------------------------------------------------------------- softmax */

/* Row kinds: random, all equal, very large (near the dtype's top), with some
 * -inf, all -inf, spread over +-the dtype's top (x - max overflows float32;
 * scale * x too for |scale| > 1), with some +inf among such values (each +inf
 * gets an equal share: softmax's limit as they grow). */
enum { ROW_RANDOM, ROW_EQUAL, ROW_LARGE, ROW_SOMEINF, ROW_ALLINF, ROW_SPREAD, ROW_PINF, ROW_KINDS };

static float big_value(jitop_dtype dt)
{
    return dt == JITOP_FLOAT16 ? 60000.f : 1e30f;
}

static float top_value(jitop_dtype dt)
{
    return dt == JITOP_FLOAT16 ? 60000.f : 3e38f;
}

static void softmax_case(jitop_dtype dt, int64_t rows, int64_t n, float scale, int64_t q,
                         size_t offset_elems)
{
    const size_t es = jitop_dtype_size(dt), total = (size_t)rows * n;
    guarded x = galloc(total * es, offset_elems * es);
    void *h = malloc(total * es), *o = malloc(total * es);
    float *v = malloc((size_t)n * sizeof(float));
    double *ref = malloc((size_t)n * sizeof(double));
    assert_true(h && o && v && ref);
    for (int64_t r = 0; r < rows; r++) {
        int kind = rows >= ROW_KINDS ? (int)(r % ROW_KINDS) : ROW_RANDOM;
        if (kind == ROW_ALLINF && q > 0)
            kind = ROW_RANDOM; /* the mask may keep none of a row's -inf */
        jt_random_floats(v, (size_t)n, -8.f, 8.f);
        for (int64_t j = 0; j < n; j++) {
            float e = v[j];
            if (kind == ROW_EQUAL)
                e = 3.25f;
            else if (kind == ROW_LARGE)
                e = big_value(dt) * (j % 3 == 0 ? 1.f : (j % 3 == 1 ? 0.999f : -1.f));
            else if (kind == ROW_SOMEINF && j % 4 == 1)
                e = -INFINITY;
            else if (kind == ROW_ALLINF)
                e = -INFINITY;
            else if (kind == ROW_SPREAD || kind == ROW_PINF)
                e = top_value(dt) * (v[j] / 8.f);
            if (kind == ROW_PINF && j % 5 == 2)
                e = INFINITY;
            else if (kind == ROW_PINF && j % 5 == 4)
                e = -INFINITY;
            store(dt, h, (size_t)r * n + j, e);
        }
    }
    CU(cu->cuMemcpyHtoD(x.p, h, total * es));
    OK(jitop_softmax_inplace(sm_ctx != NULL ? sm_ctx : ctx, dt, rows, n, (void *)(uintptr_t)x.p,
                             scale, q, NULL));
    CU(cu->cuCtxSynchronize());
    CU(cu->cuMemcpyDtoH(o, x.p, total * es));
    const double rtol = dt == JITOP_FLOAT32 ? 1e-5 : dt == JITOP_FLOAT16 ? 2e-3 : 1e-2;
    const double atol = dt == JITOP_FLOAT32 ? 1e-7 : 1e-5;
    for (int64_t r = 0; r < rows; r++) {
        int64_t keep = q > 0 ? (r % q) + n - q + 1 : n;
        if (keep > n)
            keep = n;
        double mx = -INFINITY, s = 0;
        for (int64_t j = 0; j < keep; j++)
            mx = fmax(mx, (double)scale * load(dt, h, (size_t)r * n + j));
        for (int64_t j = 0; j < n; j++) {
            double xv = (double)scale * load(dt, h, (size_t)r * n + j);
            if (j >= keep || mx == -INFINITY)
                ref[j] = 0.0;
            else if (mx == INFINITY) /* the +inf elements share the row */
                ref[j] = xv == INFINITY ? 1.0 : 0.0;
            else
                ref[j] = exp(xv - mx);
            s += ref[j];
        }
        for (int64_t j = 0; j < n; j++) {
            const double want = s > 0 ? ref[j] / s : 0.0;
            const double got = load(dt, o, (size_t)r * n + j);
            if (!(fabs(got - want) <= atol + rtol * want))
                fail_msg("softmax %s rows=%lld n=%lld scale=%g q=%lld off=%zu: row %lld col %lld "
                         "is %.8g, want %.8g",
                         dname(dt), (long long)rows, (long long)n, (double)scale, (long long)q,
                         offset_elems, (long long)r, (long long)j, got, want);
        }
    }
    char what[128];
    snprintf(what, sizeof what, "softmax %s n=%lld", dname(dt), (long long)n);
    check_guards(&x, offset_elems * es, what);
    free(h);
    free(o);
    free(v);
    free(ref);
    gfree(&x);
}

/* Each (n, alignment, mask) is one more instance to compile (~0.3 s): the
 * lists are chosen to cover each kernel shape (1 thread per row to 1024,
 * partial vectors, the long-row kernel) rather than every n. */
static void softmax_dtype(jitop_dtype dt)
{
    static const int64_t ns[] = {1,    3,     5,     7,     32,    100,    256,
                                 1000, 1025,  4096,  5000,  12288, 32768,  32769,
                                 50000, 65536, 131072, 140000};
    static const int64_t odd[] = {7, 1000, 5000, 32769};
    static const int64_t masked[] = {100, 1024, 5000, 65536};
    for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++) {
        const int64_t n = ns[i];
        int64_t rows = (int64_t)(1500000 / n);
        if (rows < 6)
            rows = 6;
        if (rows > 1031)
            rows = 1031;
        softmax_case(dt, rows, n, 1.0f, 0, 0);
    }
    for (size_t i = 0; i < sizeof odd / sizeof odd[0]; i++)
        softmax_case(dt, 7, odd[i], 0.125f, 0, 1); /* unaligned rows: scalar loads */
    for (size_t i = 0; i < sizeof masked / sizeof masked[0]; i++)
        softmax_case(dt, 128, masked[i], 0.5f, 64, 0); /* causal, 64 queries per matrix */
    /* huge rows under a scale that overflows scale * x (and flips the sign),
     * per kernel shape: one thread per row, blocks, a cluster, the long one */
    static const int64_t big[] = {5, 1000, 4096, 50000, 140000};
    for (size_t i = 0; i < sizeof big / sizeof big[0]; i++) {
        softmax_case(dt, 2 * ROW_KINDS, big[i], 2.0f, 0, 0);
        softmax_case(dt, 2 * ROW_KINDS, big[i], -1.5f, 0, 0);
    }
    softmax_case(dt, 3, 1000, 0.0f, 0, 0); /* scale 0: uniform (random rows only) */
}

static void test_softmax_f32(void **state)
{
    (void)state;
    JT_REQUIRE_GPU();
    setup_ctx();
    softmax_dtype(JITOP_FLOAT32);
}

static void test_softmax_f16(void **state)
{
    (void)state;
    JT_REQUIRE_GPU();
    setup_ctx();
    softmax_dtype(JITOP_FLOAT16);
}

static void test_softmax_bf16(void **state)
{
    (void)state;
    JT_REQUIRE_GPU();
    setup_ctx();
    softmax_dtype(JITOP_BFLOAT16);
}

/* A context whose softmax path is forced: $JITOP_INPLACE_SOFTMAX is read
 * when a context's first in-place op makes its state, so it is set around a
 * first call (one row of one element) and restored. */
static jitop_ctx *path_ctx(const char *path)
{
    char *dir = jt_tmpdir();
    char *cache = jt_path(dir, "cache");
    jitop_ctx *c = jt_ctx_driver(cache);
    free(cache);
    OK(jitop_ctx_cuda(c, NULL, NULL));
    const char *was = getenv("JITOP_INPLACE_SOFTMAX");
    char *saved = was != NULL ? strdup(was) : NULL;
    assert_true(was == NULL || saved != NULL);
    assert_int_equal(setenv("JITOP_INPLACE_SOFTMAX", path, 1), 0);
    guarded one = galloc(sizeof(float), 0);
    const int rc =
        jitop_softmax_inplace(c, JITOP_FLOAT32, 1, 1, (void *)(uintptr_t)one.p, 1.f, 0, NULL);
    assert_int_equal(saved != NULL ? setenv("JITOP_INPLACE_SOFTMAX", saved, 1)
                                   : unsetenv("JITOP_INPLACE_SOFTMAX"),
                     0);
    free(saved);
    OK(rc);
    CU(cu->cuCtxSynchronize());
    gfree(&one);
    free(dir);
    return c;
}

/* softmax_split over its row lengths: 16 KiB rows (cluster of 2) to 512 KiB
 * (float32 131072, 16-bit 262144: 8 blocks of 128 bytes per thread),
 * lengths whose slices end mid-block (40000, 24576 in 256-thread blocks),
 * odd lengths (one element per vector; 131071: the cluster's last slice
 * shorter), unaligned rows, the causal mask, the special rows under scales
 * that overflow scale * x. */
static void split_dtype(jitop_dtype dt)
{
    static const int64_t ns[] = {16384, 40000, 65536, 131072, 131071};
    sm_ctx = split_ctx[0];
    for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++)
        softmax_case(dt, ns[i] >= 131071 ? 9 : 23, ns[i], 1.0f, 0, 0);
    softmax_case(dt, 7, 50001, 0.125f, 0, 1); /* odd and unaligned */
    softmax_case(dt, 64, 40000, 0.5f, 64, 0); /* causal, 64 queries per matrix */
    if (dt != JITOP_FLOAT32)
        softmax_case(dt, 5, 262144, 1.0f, 0, 0); /* 16-bit: 128 bytes a thread */
    softmax_case(dt, 2 * ROW_KINDS, 65536, 2.0f, 0, 0);
    softmax_case(dt, 2 * ROW_KINDS, 65536, -1.5f, 0, 0);
    sm_ctx = split_ctx[1];
    softmax_case(dt, 2 * ROW_KINDS, 24576, -1.5f, 0, 0);
    softmax_case(dt, 11, 65536, 1.0f, 0, 0);
    /* split128: 16-bit rows to 65536 (8 blocks of 128 bytes a thread) */
    sm_ctx = split_ctx[2];
    softmax_case(dt, 2 * ROW_KINDS, 32768, -1.5f, 0, 0);
    softmax_case(dt, 7, 50001, 0.125f, 0, 1);
    if (dt != JITOP_FLOAT32)
        softmax_case(dt, 13, 65536, 1.0f, 0, 0);
    /* lean, lean256: the special rows under both signs (+inf rows take the
     * ip_weight form, scale < 0 the smallest element), odd, unaligned and
     * masked rows (softmax_split), ragged slices */
    for (int k = 3; k < 5; k++) {
        sm_ctx = split_ctx[k];
        softmax_case(dt, 2 * ROW_KINDS, 65536, 2.0f, 0, 0);
        softmax_case(dt, 2 * ROW_KINDS, 40000, -1.5f, 0, 0);
        softmax_case(dt, 3, 16384, 0.0f, 0, 0); /* scale 0: random rows only */
        softmax_case(dt, 7, 50001, 0.125f, 0, 1);
        softmax_case(dt, 64, 40000, 0.5f, 64, 0);
        softmax_case(dt, 9, k == 3 ? 131072 : 24576, 1.0f, 0, 0);
    }
    /* lean2, lean2_256, lean2_128 (softmax_lean2): lengths from 16 KiB to
     * 512 KiB, odd ones (one element a vector, slices ending mid-block, the
     * last slice shorter), the special rows under both signs (+inf and the
     * huge rows take ip_weight's form, the others one FFMA), scale 0, large
     * scales near the one-FFMA limit, unaligned and masked rows
     * (softmax_split) */
    static const int64_t ns2[] = {16384, 24576, 32768, 40000, 49152, 65536, 131072, 24577};
    for (int k = 6; k < 9; k++) {
        sm_ctx = split_ctx[k];
        for (size_t i = 0; i < sizeof ns2 / sizeof ns2[0]; i++)
            softmax_case(dt, ns2[i] >= 131072 ? 5 : 13, ns2[i], 1.0f, 0, 0);
        softmax_case(dt, 2 * ROW_KINDS, 65536, 2.0f, 0, 0);
        softmax_case(dt, 2 * ROW_KINDS, 40000, -1.5f, 0, 0);
        softmax_case(dt, 2 * ROW_KINDS, 32768, 3.0f, 0, 0);
        softmax_case(dt, 11, 24576, 90.0f, 0, 0); /* |c mt| over the float32 limit */
        softmax_case(dt, 11, 24576, -60.0f, 0, 0);
        softmax_case(dt, 3, 16384, 0.0f, 0, 0); /* scale 0: random rows only */
        softmax_case(dt, 7, 50001, 0.125f, 0, 1);
        softmax_case(dt, 64, 40000, 0.5f, 64, 0);
    }
    sm_ctx = NULL;
}

static void test_softmax_split(void **state)
{
    (void)state;
    JT_REQUIRE_GPU();
    setup_ctx();
    int dev = 0, major = 0;
    OK(jitop_ctx_cuda(ctx, NULL, &dev));
    CU(cu->cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev));
    if (major < 9)
        skip(); /* clusters: sm_90 on */
    static const char *const paths[] = {"split",   "split256",  "split128",  "lean",
                                        "lean256", "leanblock", "lean2",     "lean2_256",
                                        "lean2_128"};
    for (int i = 0; i < 9; i++)
        if (i != 5 && split_ctx[i] == NULL)
            split_ctx[i] = path_ctx(paths[i]);
    split_dtype(JITOP_FLOAT32);
    split_dtype(JITOP_FLOAT16);
    split_dtype(JITOP_BFLOAT16);
}

/* softmax_rows_lean (JITOP_INPLACE_SOFTMAX=leanblock) over one block's row
 * lengths: short rows several to a block, odd, unaligned, 32 and 128 bytes a
 * thread, the special rows under both signs of scale, scale 0, and the mask
 * (softmax_rows). */
static void leanblock_dtype(jitop_dtype dt, int k)
{
    static const int64_t ns[] = {1, 7, 128, 1000, 4096, 8192, 32768};
    sm_ctx = split_ctx[k];
    for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++)
        softmax_case(dt, ns[i] >= 8192 ? 9 : 37, ns[i], 1.0f, 0, 0);
    softmax_case(dt, 2 * ROW_KINDS, 4096, 2.0f, 0, 0);
    softmax_case(dt, 2 * ROW_KINDS, 16384, -1.5f, 0, 0);
    softmax_case(dt, 3, 1000, 0.0f, 0, 0); /* scale 0: random rows only */
    softmax_case(dt, 7, 4097, 0.125f, 0, 1); /* odd and unaligned */
    softmax_case(dt, 64, 4096, 0.5f, 64, 0); /* causal: softmax_rows */
    softmax_case(dt, 2 * ROW_KINDS, 1000, 3.0f, 0, 0);
    softmax_case(dt, 2 * ROW_KINDS, 32768, -1.5f, 0, 0);
    softmax_case(dt, 11, 2000, 90.0f, 0, 0); /* |c mt| over the float32 one-FFMA limit */
    sm_ctx = NULL;
}

static void test_softmax_leanblock(void **state)
{
    (void)state;
    JT_REQUIRE_GPU();
    setup_ctx();
    if (split_ctx[5] == NULL)
        split_ctx[5] = path_ctx("leanblock");
    if (split_ctx[9] == NULL)
        split_ctx[9] = path_ctx("lean2block");
    for (int k = 5; k <= 9; k += 4) {
        leanblock_dtype(JITOP_FLOAT32, k);
        leanblock_dtype(JITOP_FLOAT16, k);
        leanblock_dtype(JITOP_BFLOAT16, k);
    }
}

/* argv[1]: a cmocka test-name pattern ("test_softmax*": the softmax tests only) */
int main(int argc, char **argv)
{
    if (argc > 1)
        cmocka_set_test_filter(argv[1]);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_softmax_f32),
        cmocka_unit_test(test_softmax_f16),
        cmocka_unit_test(test_softmax_bf16),
        cmocka_unit_test(test_softmax_split),
        cmocka_unit_test(test_softmax_leanblock),
        cmocka_unit_test(test_matmul_f32),
        cmocka_unit_test(test_matmul_f16),
        cmocka_unit_test(test_matmul_bf16),
        cmocka_unit_test(test_matmul_scratch_and_tf32),
        cmocka_unit_test(test_matmul_variants),
        cmocka_unit_test(test_matmul_panel),
        cmocka_unit_test(test_matmul_panel_race),
    };
    return cmocka_run_group_tests(tests, NULL, teardown_all);
}
