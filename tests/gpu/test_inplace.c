/* jitop_square_matmul_inplace on a GPU against a float64 CPU reference on
 * fresh random inputs.
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
 * The in-place ops' GPU tests are two programs, which make test-gpu runs
 * side by side: test_inplace.c (the square product) and
 * test_inplace_softmax.c; their helpers are tests/support/iptest.c's. A
 * cmocka test-name pattern as the first argument runs the tests it names. */
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
#include "iptest.h"
#include "testutil.h"

/* the context matmul_case runs in: ipt_ctx, or one with a copy-back variant */
static jitop_ctx *mm_ctx;

static int teardown_all(void **state)
{
    jitop_ctx_destroy(mm_ctx); /* left by a variant case that failed */
    mm_ctx = NULL;
    return ipt_teardown_all(state);
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
            jt_dstore(dt, h, (size_t)k, v[k]);
        CU(ipt_cu->cuMemcpyHtoD(a + (size_t)r * n * es, h, (size_t)n * es));
    }
    for (int64_t i = 0; i < n; i++) {
        jt_random_floats(v, (size_t)n, 0.5f, 1.f);
        for (int64_t j = 0; j < n; j++) {
            const int64_t k = trans ? j : i;
            jt_dstore(dt, h, (size_t)i * n + j, k < n / 2 ? v[j] : -v[j]);
        }
    }
    CU(ipt_cu->cuMemcpyHtoD(w, h, (size_t)n * n * es));
    free(v);
    free(h);
}

/* A at offset bytes past a 256-byte boundary (0: as cuMemAlloc gives). */
static void matmul_case_at(jitop_dtype dt, int trans, int64_t m, int64_t n, unsigned flags,
                           size_t offset)
{
    const size_t es = jitop_dtype_size(dt);
    jitop_ctx *c = mm_ctx != NULL ? mm_ctx : ipt_ctx;
    guarded a = ipt_galloc((size_t)m * n * es, offset);
    guarded wg = ipt_galloc((size_t)n * n * es, mm_woff);
    const CUdeviceptr w = wg.p;
    ipt_fill(dt, a.p, m * n);
    ipt_fill(dt, w, n * n);
    CU(ipt_cu->cuCtxSynchronize());
    if (mm_large)
        put_large(dt, a.p, m, w, n, trans);

    int64_t rows[64];
    size_t nr = pick_rows(m, n, rows, 64);
    void *wh = malloc((size_t)n * n * es);
    float *wf = malloc((size_t)n * n * sizeof(float));
    void *ah = malloc((size_t)nr * n * es), *oh = malloc((size_t)nr * n * es);
    double *acc = malloc((size_t)n * sizeof(double)), *ad = malloc((size_t)n * sizeof(double));
    assert_true(wh && wf && ah && oh && acc && ad);
    CU(ipt_cu->cuMemcpyDtoH(wh, w, (size_t)n * n * es));
    for (size_t i = 0; i < (size_t)n * n; i++)
        wf[i] = jt_dload(dt, wh, i);
    for (size_t i = 0; i < nr; i++)
        CU(ipt_cu->cuMemcpyDtoH((char *)ah + i * n * es, a.p + (size_t)rows[i] * n * es, n * es));

    for (int rep = 0; rep < mm_reps; rep++)
        OK(jitop_square_matmul_inplace(c, dt, m, n, (void *)(uintptr_t)a.p,
                                       (void *)(uintptr_t)w, trans, flags, NULL));
    CU(ipt_cu->cuCtxSynchronize());
    for (size_t i = 0; i < nr; i++)
        CU(ipt_cu->cuMemcpyDtoH((char *)oh + i * n * es, a.p + (size_t)rows[i] * n * es, n * es));
    /* W is read only (the panel path reads a transposed copy of its own) */
    {
        void *wa = malloc((size_t)n * n * es);
        assert_non_null(wa);
        CU(ipt_cu->cuMemcpyDtoH(wa, w, (size_t)n * n * es));
        if (memcmp(wa, wh, (size_t)n * n * es) != 0)
            fail_msg("%s trans=%d m=%lld n=%lld: w was written", jt_dname(dt), trans, (long long)m,
                     (long long)n);
        free(wa);
    }

    /* float32: full float32 products (no TF32); 16-bit: the output's rounding */
    double tol = dt == JITOP_FLOAT32 ? 1e-5 : dt == JITOP_FLOAT16 ? 2e-3 : 1e-2;
    if (flags & JITOP_MATMUL_TF32)
        tol = 5e-3;
    for (size_t i = 0; i < nr; i++) {
        for (int64_t k = 0; k < n; k++)
            ad[k] = jt_dload(dt, (const char *)ah + i * n * es, (size_t)k);
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
            const double o = jt_dload(dt, (const char *)oh + i * n * es, (size_t)j);
            if (!isfinite(o))
                fail_msg("%s trans=%d m=%lld n=%lld: row %lld col %lld is %g", jt_dname(dt), trans,
                         (long long)m, (long long)n, (long long)rows[i], (long long)j, o);
            num += (o - acc[j]) * (o - acc[j]);
            den += acc[j] * acc[j];
        }
        const double err = den > 0 ? sqrt(num / den) : sqrt(num);
        if (!(err <= tol))
            fail_msg("%s trans=%d m=%lld n=%lld: row %lld relative error %.3g > %.1g",
                     jt_dname(dt), trans, (long long)m, (long long)n, (long long)rows[i], err,
                     tol);
    }
    char what[96];
    snprintf(what, sizeof what, "matmul %s trans=%d m=%lld n=%lld off=%zu", jt_dname(dt), trans,
             (long long)m, (long long)n, offset);
    ipt_check_guards(&a, offset, what);
    char wwhat[112];
    snprintf(wwhat, sizeof wwhat, "%s: w", what);
    ipt_check_guards(&wg, mm_woff, wwhat);
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
    ipt_gfree(&wg);
    ipt_gfree(&a);
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
    ipt_setup_ctx();
    matmul_dtype(JITOP_FLOAT32);
}

static void test_matmul_f16(void **state)
{
    (void)state;
    JT_REQUIRE_GPU();
    ipt_setup_ctx();
    matmul_dtype(JITOP_FLOAT16);
}

static void test_matmul_bf16(void **state)
{
    (void)state;
    JT_REQUIRE_GPU();
    ipt_setup_ctx();
    matmul_dtype(JITOP_BFLOAT16);
}

/* The scratch stays within its bound for any m, and goes when released;
 * TF32 when asked is close to float32 but allowed its own error. */
static void test_matmul_scratch_and_tf32(void **state)
{
    (void)state;
    JT_REQUIRE_GPU();
    ipt_setup_ctx();
    OK(jitop_inplace_release(ipt_ctx));
    assert_int_equal(jitop_inplace_scratch_bytes(ipt_ctx), 0);
    const int64_t n = 1024, m = 300000; /* 1.2 GB of float32: many chunks */
    guarded a = ipt_galloc((size_t)m * n * 4, 0);
    CUdeviceptr w;
    CU(ipt_cu->cuMemAlloc(&w, (size_t)n * n * 4));
    ipt_fill(JITOP_FLOAT32, a.p, m * n);
    ipt_fill(JITOP_FLOAT32, w, n * n);
    OK(jitop_square_matmul_inplace(ipt_ctx, JITOP_FLOAT32, m, n, (void *)(uintptr_t)a.p,
                                   (void *)(uintptr_t)w, 0, JITOP_MATMUL_TF32, NULL));
    CU(ipt_cu->cuCtxSynchronize());
    size_t held = jitop_inplace_scratch_bytes(ipt_ctx);
    print_message("scratch for m=%lld n=%lld f32: %zu bytes (bound %zu, A is %zu)\n",
                  (long long)m, (long long)n, held, jitop_square_matmul_scratch_bound(JITOP_FLOAT32, n),
                  (size_t)m * n * 4);
    assert_true(held > 0);
    assert_true(held <= jitop_square_matmul_scratch_bound(JITOP_FLOAT32, n));
    ipt_check_guards(&a, 0, "tf32");
    OK(jitop_inplace_release(ipt_ctx));
    assert_int_equal(jitop_inplace_scratch_bytes(ipt_ctx), 0);
    CU(ipt_cu->cuMemFree(w));
    ipt_gfree(&a);
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
    mm_ctx = jt_ctx_driver(jitop_cache_dir(ipt_ctx)); /* the same cache: no second compile */
    OK(jitop_ctx_cuda(mm_ctx, NULL, NULL));
    /* the state (and its settings) made now, by a one-element softmax */
    guarded one = ipt_galloc(sizeof(float), 0);
    OK(jitop_softmax_inplace(mm_ctx, JITOP_FLOAT32, 1, 1, (void *)(uintptr_t)one.p, 1.f, 0, NULL));
    CU(ipt_cu->cuCtxSynchronize());
    ipt_gfree(&one);
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
    CU(ipt_cu->cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev));
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
                  getenv(MM_VARS[1]) ? getenv(MM_VARS[1]) : "-", jt_dname(dt), trans, (long long)m,
                  (long long)n, offset, (long long)p.chunks, (long long)p.rows,
                  ran ? "partitioned" : "driver copy");
    if (ran != (p.partition ? 1u : 0u))
        fail_msg("%s trans=%d m=%lld n=%lld: the SM partition ran %zu times, the plan says %d",
                 jt_dname(dt), trans, (long long)m, (long long)n, ran, p.partition);
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
    ipt_setup_ctx();
    variant_dtype(JITOP_FLOAT16, 0);
    variant_dtype(JITOP_BFLOAT16, 0);
    variant_dtype(JITOP_FLOAT32, 0);
    variant_dtype(JITOP_FLOAT32, JITOP_MATMUL_TF32);
}

/* ------------------------------------------------------ the panel path */

/* The device of ipt_ctx has compute capability 9.0 exactly (sm_90a's kernels run
 * on it and on no other). */
static int is_sm90(void)
{
    int dev = 0, major = 0, minor = 0;
    OK(jitop_ctx_cuda(ipt_ctx, NULL, &dev));
    CU(ipt_cu->cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev));
    CU(ipt_cu->cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev));
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
                 jt_dname(dt), trans, (long long)m, (long long)n, offset, mm_reps, ran, want);
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
    CU(ipt_cu->cuMemAlloc(&a0, bytes));
    CU(ipt_cu->cuMemAlloc(&a, bytes));
    CU(ipt_cu->cuMemAlloc(&w, (size_t)n * n * es));
    ipt_fill(dt, a0, m * n);
    ipt_fill(dt, w, n * n);
    void *ref = malloc(bytes), *out = malloc(bytes);
    assert_true(ref && out);
    /* the reference: the chunked path */
    variant_begin_panel(NULL, NULL, NULL, NULL, "0");
    CU(ipt_cu->cuMemcpyDtoDAsync(a, a0, bytes, NULL));
    OK(jitop_square_matmul_inplace(mm_ctx, dt, m, n, (void *)(uintptr_t)a, (void *)(uintptr_t)w,
                                   trans, flags, NULL));
    CU(ipt_cu->cuCtxSynchronize());
    CU(ipt_cu->cuMemcpyDtoH(ref, a, bytes));
    variant_end();
    double top = 0;
    for (size_t i = 0; i < (size_t)m * n; i++)
        top = fmax(top, fabs(jt_dload(dt, ref, i)));
    assert_true(top > 0 && isfinite(top));
    /* TF32: cuBLAS rounds the inputs to TF32, the panel's tensor cores
     * drop their low bits */
    const double tol = (dt == JITOP_FLOAT16 ? 4e-3 : dt == JITOP_BFLOAT16 ? 2e-2 : 1e-2) * top;
    variant_begin_panel(NULL, NULL, NULL, NULL, "1");
    for (int r = 0; r < reps; r++) {
        const size_t before = jitop__inplace_panel_calls(mm_ctx);
        CU(ipt_cu->cuMemcpyDtoDAsync(a, a0, bytes, NULL));
        OK(jitop_square_matmul_inplace(mm_ctx, dt, m, n, (void *)(uintptr_t)a,
                                       (void *)(uintptr_t)w, trans, flags, NULL));
        CU(ipt_cu->cuCtxSynchronize());
        assert_int_equal(jitop__inplace_panel_calls(mm_ctx) - before, is_sm90() ? 1 : 0);
        CU(ipt_cu->cuMemcpyDtoH(out, a, bytes));
        size_t bad = 0, first = 0;
        for (size_t i = 0; i < (size_t)m * n; i++)
            if (!(fabs(jt_dload(dt, out, i) - jt_dload(dt, ref, i)) <= tol) && bad++ == 0)
                first = i;
        if (bad != 0)
            fail_msg("panel race %s trans=%d m=%lld n=%lld rep %d: %zu elements off the chunked "
                     "path's product (first: row %zu col %zu, %g against %g)",
                     jt_dname(dt), trans, (long long)m, (long long)n, r, bad, first / (size_t)n,
                     first % (size_t)n, jt_dload(dt, out, first), jt_dload(dt, ref, first));
    }
    variant_end();
    free(ref);
    free(out);
    CU(ipt_cu->cuMemFree(a0));
    CU(ipt_cu->cuMemFree(a));
    CU(ipt_cu->cuMemFree(w));
}

static void test_matmul_panel(void **state)
{
    (void)state;
    JT_REQUIRE_GPU();
    ipt_setup_ctx();
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
    ipt_setup_ctx();
    panel_race_case(JITOP_FLOAT32, 0, 1000, 4096, JITOP_MATMUL_TF32, 6);
    panel_race_case(JITOP_FLOAT32, 1, 4097, 2048, JITOP_MATMUL_TF32, 3);
    panel_race_case(JITOP_FLOAT16, 0, 4097, 4096, 0, 3);
    panel_race_case(JITOP_BFLOAT16, 1, 20000, 2048, 0, 3);
    panel_race_case(JITOP_FLOAT16, 0, 20000, 1280, 0, 3);
    panel_race_case(JITOP_BFLOAT16, 1, 4097, 1024, 0, 3);
}

/* argv[1]: a cmocka test-name pattern ("test_matmul_panel*": the panel path's tests) */
int main(int argc, char **argv)
{
    if (argc > 1)
        cmocka_set_test_filter(argv[1]);
    const struct CMUnitTest tests[] = {
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
