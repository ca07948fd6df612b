/* jitop_softmax_inplace on a GPU against a float64 CPU reference on fresh
 * random inputs.
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
 * lean2block) the same way, with rows over and under its one-FFMA limit.
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

#include "load/driver.h"
#include "jitop.h"
#include "gputest.h"
#include "iptest.h"
#include "testutil.h"

/* the context softmax_case runs in: ipt_ctx, or one with a softmax path forced */
static jitop_ctx *sm_ctx;
/* contexts forcing split, split256, split128, lean, lean256, leanblock,
 * lean2, lean2_256, lean2_128, lean2block */
#define SPLIT_PATHS 10
static jitop_ctx *split_ctx[SPLIT_PATHS];

static int teardown_all(void **state)
{
    for (int i = 0; i < SPLIT_PATHS; i++) {
        jitop_ctx_destroy(split_ctx[i]);
        split_ctx[i] = NULL;
    }
    return ipt_teardown_all(state);
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
    guarded x = ipt_galloc(total * es, offset_elems * es);
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
            jt_dstore(dt, h, (size_t)r * n + j, e);
        }
    }
    CU(ipt_cu->cuMemcpyHtoD(x.p, h, total * es));
    OK(jitop_softmax_inplace(sm_ctx != NULL ? sm_ctx : ipt_ctx, dt, rows, n, (void *)(uintptr_t)x.p,
                             scale, q, NULL));
    CU(ipt_cu->cuCtxSynchronize());
    CU(ipt_cu->cuMemcpyDtoH(o, x.p, total * es));
    const double rtol = dt == JITOP_FLOAT32 ? 1e-5 : dt == JITOP_FLOAT16 ? 2e-3 : 1e-2;
    const double atol = dt == JITOP_FLOAT32 ? 1e-7 : 1e-5;
    for (int64_t r = 0; r < rows; r++) {
        int64_t keep = q > 0 ? (r % q) + n - q + 1 : n;
        if (keep > n)
            keep = n;
        double mx = -INFINITY, s = 0;
        for (int64_t j = 0; j < keep; j++)
            mx = fmax(mx, (double)scale * jt_dload(dt, h, (size_t)r * n + j));
        for (int64_t j = 0; j < n; j++) {
            double xv = (double)scale * jt_dload(dt, h, (size_t)r * n + j);
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
            const double got = jt_dload(dt, o, (size_t)r * n + j);
            if (!(fabs(got - want) <= atol + rtol * want))
                fail_msg("softmax %s rows=%lld n=%lld scale=%g q=%lld off=%zu: row %lld col %lld "
                         "is %.8g, want %.8g",
                         jt_dname(dt), (long long)rows, (long long)n, (double)scale, (long long)q,
                         offset_elems, (long long)r, (long long)j, got, want);
        }
    }
    char what[128];
    snprintf(what, sizeof what, "softmax %s n=%lld", jt_dname(dt), (long long)n);
    ipt_check_guards(&x, offset_elems * es, what);
    free(h);
    free(o);
    free(v);
    free(ref);
    ipt_gfree(&x);
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
    ipt_setup_ctx();
    softmax_dtype(JITOP_FLOAT32);
}

static void test_softmax_f16(void **state)
{
    (void)state;
    JT_REQUIRE_GPU();
    ipt_setup_ctx();
    softmax_dtype(JITOP_FLOAT16);
}

static void test_softmax_bf16(void **state)
{
    (void)state;
    JT_REQUIRE_GPU();
    ipt_setup_ctx();
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
    guarded one = ipt_galloc(sizeof(float), 0);
    const int rc =
        jitop_softmax_inplace(c, JITOP_FLOAT32, 1, 1, (void *)(uintptr_t)one.p, 1.f, 0, NULL);
    assert_int_equal(saved != NULL ? setenv("JITOP_INPLACE_SOFTMAX", saved, 1)
                                   : unsetenv("JITOP_INPLACE_SOFTMAX"),
                     0);
    free(saved);
    OK(rc);
    CU(ipt_cu->cuCtxSynchronize());
    ipt_gfree(&one);
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
    ipt_setup_ctx();
    int dev = 0, major = 0;
    OK(jitop_ctx_cuda(ipt_ctx, NULL, &dev));
    CU(ipt_cu->cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev));
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
    ipt_setup_ctx();
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

/* argv[1]: a cmocka test-name pattern ("test_softmax_split": that test only) */
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
    };
    return cmocka_run_group_tests(tests, NULL, teardown_all);
}
