/* The in-place ops' argument checks, without a GPU: every bad argument fails
 * with JITOP_EINVAL and a message naming it, before anything is loaded or
 * queued; valid arguments in a context that may not open the driver fail
 * cleanly with JITOP_ENODRIVER. Also the scratch bound's arithmetic, and
 * that kernels/inplace.cu's instances compile (real NVRTC, for sm_90). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jitop.h"
#include "testutil.h"

static jitop_ctx *compile_only_ctx(char **dir)
{
    *dir = jt_tmpdir();
    char *cache = jt_path(*dir, "cache");
    jitop_config cfg;
    jitop_config_init(&cfg);
    cfg.cache_dir = cache;
    cfg.compile_only = 1;
    cfg.arch = "sm_90";
    jitop_ctx *c = NULL;
    int rc = jitop_ctx_create(&cfg, &c);
    if (rc != JITOP_OK)
        fail_msg("jitop_ctx_create: %s: %s", jitop_strerror(rc), jitop_errmsg(NULL));
    free(cache);
    return c;
}

typedef struct arg_case {
    int rc;
    const char *names; /* a substring the message must hold */
} arg_case;

static void expect(arg_case c, const char *what)
{
    if (c.rc != JITOP_EINVAL)
        fail_msg("%s: returned %d (%s), want JITOP_EINVAL", what, c.rc, jitop_strerror(c.rc));
    if (strstr(jitop_errmsg(NULL), c.names) == NULL)
        fail_msg("%s: message '%s' does not name '%s'", what, jitop_errmsg(NULL), c.names);
}

static void test_matmul_arguments(void **state)
{
    (void)state;
    char *dir;
    jitop_ctx *c = compile_only_ctx(&dir);
    /* never dereferenced: the checks fail first (aligned for every dtype) */
    void *a = (void *)(uintptr_t)0x100000, *w = (void *)(uintptr_t)0x900000000;
    const char *fn = "jitop_square_matmul_inplace";
    expect((arg_case){jitop_square_matmul_inplace(NULL, JITOP_FLOAT32, 4, 4, a, w, 0, 0, NULL),
                      "ctx is NULL"}, "ctx");
    expect((arg_case){jitop_square_matmul_inplace(c, JITOP_FLOAT64, 4, 4, a, w, 0, 0, NULL),
                      "dtype 3"}, "dtype float64");
    expect((arg_case){jitop_square_matmul_inplace(c, (jitop_dtype)42, 4, 4, a, w, 0, 0, NULL),
                      "dtype 42"}, "dtype 42");
    expect((arg_case){jitop_square_matmul_inplace(c, JITOP_FLOAT32, 0, 4, a, w, 0, 0, NULL),
                      "m (rows) is 0"}, "m 0");
    expect((arg_case){jitop_square_matmul_inplace(c, JITOP_FLOAT32, -5, 4, a, w, 0, 0, NULL),
                      "m (rows) is -5"}, "m -5");
    expect((arg_case){jitop_square_matmul_inplace(c, JITOP_FLOAT16, 4, 0, a, w, 0, 0, NULL),
                      "n is 0"}, "n 0");
    expect((arg_case){jitop_square_matmul_inplace(c, JITOP_FLOAT16, 4, (1 << 20) + 1, a, w, 0, 0,
                                                  NULL),
                      "n is 1048577"}, "n too large");
    expect((arg_case){jitop_square_matmul_inplace(c, JITOP_FLOAT32, INT64_MAX / 2, 1 << 20, a, w,
                                                  0, 0, NULL),
                      "too large"}, "m x n overflow");
    expect((arg_case){jitop_square_matmul_inplace(c, JITOP_BFLOAT16, 4, 4, NULL, w, 0, 0, NULL),
                      "a is NULL"}, "a NULL");
    expect((arg_case){jitop_square_matmul_inplace(c, JITOP_BFLOAT16, 4, 4, a, NULL, 0, 0, NULL),
                      "w is NULL"}, "w NULL");
    expect((arg_case){jitop_square_matmul_inplace(c, JITOP_FLOAT32, 4, 4, (char *)a + 2, w, 0, 0,
                                                  NULL),
                      "a is not aligned"}, "a misaligned");
    expect((arg_case){jitop_square_matmul_inplace(c, JITOP_FLOAT32, 4, 4, a, (char *)w + 1, 0, 0,
                                                  NULL),
                      "w is not aligned"}, "w misaligned");
    expect((arg_case){jitop_square_matmul_inplace(c, JITOP_FLOAT32, 4, 4, a, w, 0, 6, NULL),
                      "flags 0x6"}, "flags");
    /* w inside a, and a inside w */
    expect((arg_case){jitop_square_matmul_inplace(c, JITOP_FLOAT32, 100, 4, a,
                                                  (char *)a + 64, 0, 0, NULL),
                      "w overlaps a"}, "w in a");
    expect((arg_case){jitop_square_matmul_inplace(c, JITOP_FLOAT32, 1, 64, (char *)w + 64, w, 1,
                                                  0, NULL),
                      "w overlaps a"}, "a in w");
    /* every message starts with the call's name */
    assert_non_null(strstr(jitop_errmsg(NULL), fn));
    /* valid: the load fails for want of a driver, nothing is queued */
    int rc = jitop_square_matmul_inplace(c, JITOP_FLOAT32, 4, 4, a, w, 1, JITOP_MATMUL_TF32, NULL);
    assert_int_equal(rc, JITOP_ENODRIVER);
    assert_int_equal(jitop_inplace_scratch_bytes(c), 0);
    assert_int_equal(jitop_inplace_scratch_bytes(NULL), 0);
    assert_int_equal(jitop_inplace_release(c), JITOP_OK);
    assert_int_equal(jitop_inplace_release(NULL), JITOP_EINVAL);
    jitop_ctx_destroy(c);
    free(dir);
}

static void test_softmax_arguments(void **state)
{
    (void)state;
    char *dir;
    jitop_ctx *c = compile_only_ctx(&dir);
    void *x = (void *)(uintptr_t)0x100000;
    expect((arg_case){jitop_softmax_inplace(NULL, JITOP_FLOAT32, 4, 4, x, 1.f, 0, NULL),
                      "ctx is NULL"}, "ctx");
    expect((arg_case){jitop_softmax_inplace(c, JITOP_FLOAT64, 4, 4, x, 1.f, 0, NULL), "dtype 3"},
           "dtype");
    expect((arg_case){jitop_softmax_inplace(c, JITOP_FLOAT32, 0, 4, x, 1.f, 0, NULL),
                      "m (rows) is 0"}, "rows");
    expect((arg_case){jitop_softmax_inplace(c, JITOP_FLOAT32, 4, 0, x, 1.f, 0, NULL), "n is 0"},
           "n");
    expect((arg_case){jitop_softmax_inplace(c, JITOP_FLOAT32, 4, 4, NULL, 1.f, 0, NULL),
                      "x is NULL"}, "x");
    expect((arg_case){jitop_softmax_inplace(c, JITOP_FLOAT16, 4, 4, (char *)x + 1, 1.f, 0, NULL),
                      "x is not aligned"}, "x misaligned");
    expect((arg_case){jitop_softmax_inplace(c, JITOP_FLOAT32, 4, 4, x, NAN, 0, NULL), "scale"},
           "scale NaN");
    expect((arg_case){jitop_softmax_inplace(c, JITOP_FLOAT32, 4, 4, x, INFINITY, 0, NULL),
                      "scale"}, "scale inf");
    expect((arg_case){jitop_softmax_inplace(c, JITOP_FLOAT32, 4, 4, x, 1.f, 5, NULL),
                      "causal_q is 5"}, "causal_q > n");
    expect((arg_case){jitop_softmax_inplace(c, JITOP_FLOAT32, 4, 4, x, 1.f, -1, NULL),
                      "causal_q is -1"}, "causal_q < 0");
    assert_non_null(strstr(jitop_errmsg(NULL), "jitop_softmax_inplace"));
    assert_int_equal(jitop_softmax_inplace(c, JITOP_BFLOAT16, 4, 4, x, -0.5f, 4, NULL),
                     JITOP_ENODRIVER);
    jitop_ctx_destroy(c);
    free(dir);
}

static void test_scratch_bound(void **state)
{
    (void)state;
    assert_int_equal(jitop_square_matmul_scratch_bound(JITOP_FLOAT32, 64), 0); /* no scratch */
    assert_int_equal(jitop_square_matmul_scratch_bound(JITOP_FLOAT32, 0), 0);
    assert_int_equal(jitop_square_matmul_scratch_bound(JITOP_FLOAT64, 1024), 0);
    if (getenv("JITOP_INPLACE_CHUNK_MB") != NULL || getenv("JITOP_INPLACE_MM_BUFS") != NULL ||
        getenv("JITOP_INPLACE_OVERLAP") != NULL)
        skip(); /* tests/cpu/test_ip_plan.c covers them */
    /* 32 MiB of whole rows, twice */
    assert_int_equal(jitop_square_matmul_scratch_bound(JITOP_FLOAT32, 1024), (size_t)64 << 20);
    assert_int_equal(jitop_square_matmul_scratch_bound(JITOP_FLOAT16, 12288),
                     2 * ((size_t)(32 << 20) / (12288 * 2)) * 12288 * 2);
    /* the largest n: rows of 4 MiB, eight to a chunk */
    assert_int_equal(jitop_square_matmul_scratch_bound(JITOP_FLOAT32, 1 << 20), (size_t)64 << 20);
}

/* The instances the ops ask for compile (what a first call on a GPU does). */
static void test_instances_compile(void **state)
{
    (void)state;
    char *dir;
    jitop_ctx *c = compile_only_ctx(&dir);
    char *src = jt_path(JITOP_SOURCE_KERNEL_DIR, "inplace.cu");
    const char *names[] = {
        "sqmm_small<float, 1, false>",
        "sqmm_small<__half, 17, true>",
        "sqmm_small<__nv_bfloat16, 64, false>",
        "softmax_rows<float, 7, 1, 4, false>",
        "softmax_rows<__half, 32768, 8, 1024, true>",
        "softmax_long<__nv_bfloat16, 8, true>",
        "softmax_cluster<float, 65536, 4, 1024, 4, false>",
        "softmax_split<float, 131072, 4, 512, 8, false>",
        "softmax_split<__nv_bfloat16, 65537, 1, 512, 8, true>",
        "softmax_split<__half, 16384, 8, 256, 2, false>",
        "softmax_split<__half, 65536, 8, 128, 8, false>",
        "softmax_lean<__nv_bfloat16, 65536, 8, 256, 8>",
        "softmax_lean<float, 50001, 1, 512, 7>",
        "softmax_rows_lean<__half, 4096, 8, 256>",
        "softmax_rows_lean<float, 7, 1, 4>",
        "ip_copy<16>",
        "ip_copy<8>",
        "ip_copy<4>",
        "ip_copy<2>",
        "ip_copy<1>",
        "softmax_lean2<__nv_bfloat16, 65536, 8, 256, 8>",
        "softmax_lean2<__half, 40000, 8, 128, 5>",
        "softmax_lean2<float, 50001, 1, 512, 7>",
        "softmax_lean2<__half, 50001, 1, 256, 7>",
        "softmax_rows_lean2<__half, 4096, 8, 256>",
        "softmax_rows_lean2<__nv_bfloat16, 7, 1, 4>",
        "softmax_rows_lean2<float, 1000, 4, 32>",
    };
    jitop_build_result r;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        const char *one[1] = {names[i]};
        int rc = jitop_build(c, src, "sm_90", NULL, 0, one, 1, &r);
        if (rc != JITOP_OK)
            fail_msg("%s: %s: %s", names[i], jitop_strerror(rc), jitop_errmsg(NULL));
    }
    free(src);
    jitop_ctx_destroy(c);
    free(dir);
}

/* Before sm_90 the ops pick the same kernels but clusters (sm_80: bfloat16
 * pairs; sm_75: no bfloat16 arithmetic, the file's fallbacks): every
 * instance those archs can be asked for compiles there. */
static void test_instances_compile_older_archs(void **state)
{
    (void)state;
    char *dir;
    jitop_ctx *c = compile_only_ctx(&dir);
    char *src = jt_path(JITOP_SOURCE_KERNEL_DIR, "inplace.cu");
    const char *archs[] = {"sm_75", "sm_80"};
    const char *names[] = {
        "sqmm_small<__nv_bfloat16, 64, false>",
        "softmax_rows<__half, 4096, 8, 256, false>",
        "softmax_rows<__nv_bfloat16, 32768, 8, 1024, true>",
        "softmax_rows_lean2<__nv_bfloat16, 65536, 8, 1024>",
        "softmax_rows_lean2<__half, 16384, 8, 256>",
        "softmax_rows_lean2<float, 32768, 4, 1024>",
        "softmax_long<__nv_bfloat16, 8, false>",
        "ip_copy<16>",
    };
    jitop_build_result r;
    for (size_t a = 0; a < sizeof archs / sizeof archs[0]; a++)
        for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
            const char *one[1] = {names[i]};
            int rc = jitop_build(c, src, archs[a], NULL, 0, one, 1, &r);
            if (rc != JITOP_OK)
                fail_msg("%s for %s: %s: %s", names[i], archs[a], jitop_strerror(rc),
                         jitop_errmsg(NULL));
        }
    free(src);
    jitop_ctx_destroy(c);
    free(dir);
}

/* The row-in-registers instances the C side picks for long rows keep the row
 * in registers: ptxas (through NVRTC, -Xptxas -v into the build log) reports
 * no spill. bfloat16 rows of 32768 and 65536 in one block once took twice
 * float16's registers (32768) or spilled (65536). */
static void test_instances_no_spill(void **state)
{
    (void)state;
    char *dir;
    jitop_ctx *c = compile_only_ctx(&dir);
    char *src = jt_path(JITOP_SOURCE_KERNEL_DIR, "inplace.cu");
    /* name, the most registers it may take (what lets its blocks per SM run) */
    const struct {
        const char *name;
        int regs;
    } cases[] = {
        {"softmax_rows<__nv_bfloat16, 32768, 8, 512, false>", 64},
        {"softmax_rows<__nv_bfloat16, 65536, 8, 1024, false>", 64},
        {"softmax_split<float, 65536, 4, 512, 8, false>", 32},
        {"softmax_split<float, 131072, 4, 512, 8, true>", 64},
        {"softmax_split<__nv_bfloat16, 131072, 8, 512, 8, true>", 42},
        {"softmax_split<__half, 40000, 8, 512, 3, false>", 32},
        {"softmax_split<float, 65536, 4, 256, 8, false>", 64},
        {"softmax_lean<__half, 65536, 8, 256, 8>", 32},
        {"softmax_lean<__nv_bfloat16, 131072, 8, 256, 8>", 64},
        {"softmax_split<__half, 65536, 8, 128, 8, false>", 64},
        {"softmax_rows_lean<__nv_bfloat16, 32768, 8, 512>", 64},
        /* the copy-back: 8 blocks of 256 on an SM's 64K registers, no spill
         * of its four 16-byte words in flight */
        {"ip_copy<16>", 32},
        /* softmax_lean2 keeps its weights in the raw registers: the same
         * registers as softmax_lean (float32 32768 in 8 x 256: 32, two
         * rows' blocks per SM more than one 1024-thread block of 64) */
        {"softmax_lean2<__nv_bfloat16, 65536, 8, 256, 8>", 32},
        {"softmax_lean2<__half, 65536, 8, 256, 8>", 32},
        {"softmax_lean2<float, 32768, 4, 256, 8>", 32},
        {"softmax_lean2<float, 24576, 4, 256, 6>", 32},
        {"softmax_lean2<float, 49152, 4, 256, 6>", 64},
        {"softmax_lean2<float, 32768, 4, 128, 8>", 64},
        {"softmax_lean2<__nv_bfloat16, 131072, 8, 256, 8>", 64},
        /* 512-thread blocks: the parts of 16 warps once spilled there */
        {"softmax_lean2<__half, 65536, 8, 512, 4>", 32},
        {"softmax_lean2<float, 65536, 4, 512, 8>", 32},
        {"softmax_rows_lean2<__nv_bfloat16, 32768, 8, 512>", 64},
    };
    const char *opts[] = {"-Xptxas=-v"};
    jitop_build_result r;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *one[1] = {cases[i].name};
        int rc = jitop_build(c, src, "sm_90", opts, 1, one, 1, &r);
        if (rc != JITOP_OK)
            fail_msg("%s: %s: %s", cases[i].name, jitop_strerror(rc), jitop_errmsg(NULL));
        char *log = NULL;
        assert_int_equal(jitop_build_log(c, r.key, &log), JITOP_OK);
        const char *used = strstr(log, "Used ");
        int regs = 0;
        if (used == NULL || sscanf(used, "Used %d registers", &regs) != 1 ||
            regs > cases[i].regs || strstr(log, " 0 bytes spill stores") == NULL ||
            strstr(log, " 0 bytes spill loads") == NULL)
            fail_msg("%s: over %d registers or spills, or no ptxas report:\n%s", cases[i].name,
                     cases[i].regs, log);
        jitop_free(log);
    }
    free(src);
    jitop_ctx_destroy(c);
    free(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matmul_arguments),
        cmocka_unit_test(test_softmax_arguments),
        cmocka_unit_test(test_scratch_bound),
        cmocka_unit_test(test_instances_compile),
        cmocka_unit_test(test_instances_compile_older_archs),
        cmocka_unit_test(test_instances_no_spill),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    jt_cleanup();
    return rc;
}
