/* LayerNorm's plan for a row length, as JITOP_VERBOSE names it (the CLI's
 * prewarm logs the instance and the split of the row for each pass): the
 * default threads-per-row rule takes whole warps, so that a row like 4352
 * 16-bit elements leaves few lanes idle; JITOP_LN_THREADS=pow2 gives the
 * power-of-two rule for comparison; a bad value is refused by name.
 * JITOP_LN_PLAN overrides the plan's constants: the instances it picks are
 * named by the template arguments they compile (the default plan's names
 * unchanged), the log names the plan, and a malformed plan is refused with
 * the field named. Rows the 16-byte vector does not divide move in
 * 16-byte vectors from each row's first 16-byte boundary (row_shift), said
 * by the log. Each prewarm case compiles kernels/layernorm.cu with real
 * NVRTC for sm_90 (no GPU), so the instances a plan names exist. */
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
#include "ops/ln_plan.h"
#include "testutil.h"

/* Runs `jitop build --arch ARCH --op SPEC` with JITOP_VERBOSE=1 in a cache
 * of its own, under JITOP_LN_PLAN=plan (unset when NULL); returns the exit
 * status, *out its output. */
static int prewarm_arch(const char *arch, const char *rule, const char *plan, const char *spec,
                        char **out)
{
    char *dir = jt_tmpdir(), cmd[8192], env[1024] = "env -u JITOP_LN_PLAN";
    if (plan != NULL)
        snprintf(env, sizeof env, "JITOP_LN_PLAN='%s'", plan);
    snprintf(cmd, sizeof cmd,
             "%s JITOP_VERBOSE=1 JITOP_LN_THREADS='%s' JITOP_CACHE_DIR='%s/cache' '%s' build "
             "--arch %s --op %s",
             env, rule, dir, jt_cli(), arch, spec);
    free(dir);
    return jt_run(cmd, out);
}

/* The same for sm_90, the arch the plans are tuned on. */
static int prewarm_plan(const char *rule, const char *plan, const char *spec, char **out)
{
    return prewarm_arch("sm_90", rule, plan, spec, out);
}

static int prewarm(const char *rule, const char *spec, char **out)
{
    return prewarm_plan(rule, NULL, spec, out);
}

/* prewarm_arch that must succeed: its output, or a failure showing it. */
static char *prewarm_arch_ok(const char *arch, const char *rule, const char *plan,
                             const char *spec)
{
    char *out = NULL;
    const int rc = prewarm_arch(arch, rule, plan, spec, &out);
    if (rc != 0)
        jt_fail_showing(out, "--arch %s --op %s: exit %d under JITOP_LN_PLAN='%s'", arch, spec, rc,
                        plan ? plan : "");
    return out;
}

/* The same for sm_90. */
static char *prewarm_ok(const char *rule, const char *plan, const char *spec)
{
    return prewarm_arch_ok("sm_90", rule, plan, spec);
}

static void expect(const char *out, const char *what)
{
    if (!strstr(out, what))
        jt_fail_showing(out, "expected \"%s\"", what);
}

static void expect_none(const char *out, const char *what)
{
    if (strstr(out, what))
        jt_fail_showing(out, "expected no \"%s\"", what);
}

/* One prewarm case (the warps rule): every want that is not NULL in its
 * output, absent (unless NULL) nowhere in it, and the op prewarmed. */
static void expect_case(const char *arch, const char *plan, const char *spec,
                        const char *const *want, size_t nwant, const char *absent)
{
    char *out = prewarm_arch_ok(arch, "warps", plan, spec);
    for (size_t k = 0; k < nwant; k++)
        if (want[k] != NULL)
            expect(out, want[k]);
    if (absent != NULL)
        expect_none(out, absent);
    expect(out, "prewarmed");
    free(out);
}

/* What the plan line adds for an instance that moves a row the vector does
 * not divide in 16-byte vectors (row_shift). */
#define LN_SHIFTED "vectors from each row's first 16-byte boundary (head and tail by element)"

static void test_whole_warps_by_default(void **state)
{
    (void)state;
    char *out = NULL;
    /* h16_bwd_pf_bytes=0: the backward's 32-byte budget alone (the 16-bit
     * default's second budget for prefetching rows, 48 bytes, takes 192
     * threads here: test_backward_pf_bytes) */
    out = prewarm_ok("warps", "h16_bwd_pf_bytes=0", "layernorm:f16:4352");
    /* 544 vectors of 16 B: the forward's 128-byte budget needs 68 threads,
     * 96 in whole warps; the backward's 32 bytes 272, so 288. */
    expect(out, "layernorm_fwd<__half, 4352, true, 8, 96>: register kernel, 96 threads per row "
                "(1 row per block), 6 vectors of 16 B per thread, 6% of lanes idle");
    expect(out, "layernorm_bwd<__half, 4352, true, 8, 288>: register kernel, 288 threads per row "
                "(1 row per block), 2 vectors of 16 B per thread, 6% of lanes idle in the last pass, "
                "accumulators in shared memory");
    expect(out, "prewarmed");
    free(out);
}

static void test_pow2_rule_for_comparison(void **state)
{
    (void)state;
    char *out = NULL;
    /* the backward's 32-byte budget alone, as above (with the 48-byte one
     * the power-of-two rule ties at 16 warps an SM and takes 256) */
    out = prewarm_ok("pow2", "h16_bwd_pf_bytes=0", "layernorm:f16:4352");
    expect(out, "layernorm_fwd<__half, 4352, true, 8, 128>: register kernel, 128 threads per row "
                "(1 row per block), 5 vectors of 16 B per thread, 15% of lanes idle");
    expect(out, "layernorm_bwd<__half, 4352, true, 8, 512>: register kernel, 512 threads per row "
                "(1 row per block), 2 vectors of 16 B per thread, 47% of lanes idle");
    free(out);
}

/* A power-of-two row: both rules agree (short rows share a block). */
static void test_power_of_two_rows_unchanged(void **state)
{
    (void)state;
    char *out = prewarm_ok("warps", NULL, "layernorm:f32:1024");
    expect(out, "layernorm_fwd<float, 1024, true, 4, 32>: register kernel, 32 threads per row "
                "(4 rows per block), 8 vectors of 16 B per thread, 0% of lanes idle");
    expect(out, "layernorm_bwd<float, 1024, true, 4, 128>: register kernel, 128 threads per row "
                "(1 row per block), 2 vectors of 16 B per thread, 0% of lanes idle");
    free(out);
}

/* No JITOP_LN_PLAN, or an empty one: the default plan, said so; a 16-bit
 * row of 72 KiB or more takes the copy-engine forward in 16 KiB blocks of
 * 128 threads (64 elements each), 4 stages, gamma and beta in registers,
 * one exchange a row (template arguments that the name, the cache
 * key, carries); its backward (from 112 KiB, bulk_long_from) 8 blocks of
 * 256 threads. */
static void test_default_plan_named(void **state)
{
    (void)state;
    char *out = prewarm_ok("warps", "", "layernorm:bf16:65536");
    expect(out, "layernorm_fwd_bulk<__nv_bfloat16, 65536, true, 128, 8, 4, 2, 1>: copy-engine "
                "cluster kernel, 1024 threads per row (over a cluster of 8 blocks), 8 vectors of "
                "16 B per thread");
    expect(out, "layernorm_bwd_bulk<__nv_bfloat16, 65536, true, 256, 8>: copy-engine cluster "
                "kernel");
    expect(out, "; plan default");
    free(out);
}

/* The launch-bounds and prefetch fields: extra template arguments, in the
 * name and the log. */
static void test_min_blocks_and_prefetch(void **state)
{
    (void)state;
    char *out = prewarm_ok("warps", "fwd_min_blocks=2,bwd_pf=0,bwd_min_blocks=2",
                                  "layernorm:f16:24576");
    /* 3072 vectors at 128 bytes: 384 threads, 2 blocks per SM asked */
    expect(out, "layernorm_fwd<__half, 24576, true, 8, 384, 2>: register kernel, 384 threads per "
                "row (1 row per block), 8 vectors of 16 B per thread, 0% of lanes idle in the last "
                "pass, launch bounds for 2 blocks per SM; plan fwd_min_blocks=2,bwd_pf=0,"
                "bwd_min_blocks=2");
    free(out);
    out = prewarm_ok("warps", "bwd_pf=0,bwd_min_blocks=2", "layernorm:f16:9216");
    expect(out, "layernorm_bwd<__half, 9216, true, 8, 576, true, 0, 2>: register kernel, 576 "
                "threads per row (1 row per block), 2 vectors of 16 B per thread, 0% of lanes idle "
                "in the last pass, accumulators in shared memory, launch bounds for 2 blocks per SM");
    /* the default's prefetch, asked for explicitly, is named as such (the
     * default's block as well: prefetching rows take the 16-bit 48-byte
     * budget, 384 threads) */
    free(out);
    out = prewarm_ok("warps", "bwd_pf=1", "layernorm:f16:9216");
    expect(out, "layernorm_bwd<__half, 9216, true, 8, 384, true, 1, 0>: register kernel");
    expect(out, "next rows prefetched; plan bwd_pf=1");
    free(out);
}

/* fwd_min_blocks_from/_to and bwd_min_blocks_from/_to: the launch bounds
 * only for blocks of those sizes (the others keep their short names). The
 * backward's blocks from its 32-byte budget alone (h16_bwd_pf_bytes=0), so
 * that 9216's 576 threads fall outside bwd_min_blocks_to. */
static void test_min_blocks_range(void **state)
{
    (void)state;
    char *out = NULL;
    const char *plan = "fwd_min_blocks=2,fwd_min_blocks_from=320,h16_bwd_pf_bytes=0,"
                       "bwd_min_blocks=2,bwd_min_blocks_to=512";
    out = prewarm_ok("warps", plan, "layernorm:f16:4352");
    expect(out, "layernorm_fwd<__half, 4352, true, 8, 96>: register kernel");
    expect(out, "layernorm_bwd<__half, 4352, true, 8, 288, true, -1, 2>: register kernel");
    free(out);
    out = prewarm_ok("warps", plan, "layernorm:f16:9216");
    expect(out, "layernorm_fwd<__half, 9216, true, 8, 160>: register kernel");
    expect(out, "layernorm_bwd<__half, 9216, true, 8, 576>: register kernel");
    expect(out, "; plan fwd_min_blocks=2,fwd_min_blocks_from=320,bwd_pf_bytes=0,"
                "bwd_min_blocks=2,bwd_min_blocks_to=512");
    free(out);
    out = prewarm_ok("warps", plan, "layernorm:bf16:22528");
    expect(out, "layernorm_fwd<__nv_bfloat16, 22528, true, 8, 352, 2>: register kernel");
    free(out);
}

/* A row split over a cluster of smaller blocks: fwd_cluster_tpr caps the
 * block, fwd_fit shrinks it to the whole warps that hold the row at the
 * byte budget (1152 threads over 4 blocks: 288 each, no idle lanes). */
static void test_cluster_fit(void **state)
{
    (void)state;
    char *out = prewarm_ok("warps", "fwd_cluster_tpr=512,fwd_fit=0,fwd_bulk=0", "layernorm:f32:36864");
    expect(out, "layernorm_fwd_cluster<float, 36864, true, 4, 512, 4, 0, 1>: cluster kernel, 2048 "
                "threads per row (over a cluster of 4 blocks), 5 vectors of 16 B per thread, 10% "
                "of lanes idle");
    free(out);
    out = prewarm_ok("warps", "fwd_cluster_tpr=512,fwd_fit=1,fwd_min_blocks=3,fwd_bulk=0",
                                  "layernorm:f32:36864");
    expect(out, "layernorm_fwd_cluster<float, 36864, true, 4, 288, 4, 3, 1>: cluster kernel, 1152 "
                "threads per row (over a cluster of 4 blocks), 8 vectors of 16 B per thread, 0% "
                "of lanes idle in the last pass, one cluster exchange per row, launch bounds for 3 "
                "blocks per SM");
    free(out);
}

/* The backward's block sizes pick between the register, cluster and
 * copy-engine kernels; bwd_bulk=0 keeps the register cluster kernel. */
static void test_backward_kernels(void **state)
{
    (void)state;
    char *out = prewarm_ok("warps", "bwd_max_tpr=512,bwd_cluster_tpr=512",
                                  "layernorm:f16:16384");
    expect(out, "layernorm_bwd_bulk<__half, 16384, true, 512, 2>: copy-engine cluster kernel, "
                "1024 threads per row (over a cluster of 2 blocks)");
    free(out);
    out = prewarm_ok("warps", "bwd_max_tpr=512,bwd_cluster_tpr=512,bwd_bulk=0",
                                  "layernorm:f16:16384");
    expect(out, "layernorm_bwd_cluster<__half, 16384, true, 8, 512, 2>: cluster kernel, 1024 "
                "threads per row (over a cluster of 2 blocks), 2 vectors of 16 B per thread");
    free(out);
}

/* A malformed plan fails the prewarm with the field and value named. */
static void test_bad_plan_is_refused(void **state)
{
    (void)state;
    static const struct {
        const char *plan, *msg;
    } bad[] = {
        {"fwd_bytes=abc", "JITOP_LN_PLAN: fwd_bytes is 'abc': expected an integer in [2, 1024]"},
        {"fwd_cluster_tpr=300",
         "JITOP_LN_PLAN: fwd_cluster_tpr is '300': expected a multiple of 32 in [32, 1024]"},
        {"bwd_pf=yes", "JITOP_LN_PLAN: bwd_pf is 'yes': expected auto, 0 or 1"},
        {"fwd_fit=2", "JITOP_LN_PLAN: fwd_fit is '2': expected 0 or 1"},
        {"fwd_bytes=64,fwd_byte=32", "JITOP_LN_PLAN: unknown field 'fwd_byte' (fields: fwd_bytes,"},
        {"fwd_bytes", "JITOP_LN_PLAN: 'fwd_bytes' is not field=value"},
        {"bwd_min_blocks=2,bwd_min_blocks=3", "JITOP_LN_PLAN: bwd_min_blocks is set twice"},
        {"bwd_min_blocks=", "JITOP_LN_PLAN: bwd_min_blocks is '': expected an integer in [0, 32]"},
        {"row_shift=yes", "JITOP_LN_PLAN: row_shift is 'yes': expected 0 or 1"},
        {"shift_bwd_tpr=100",
         "JITOP_LN_PLAN: shift_bwd_tpr is '100': expected a multiple of 32 in [0, 1024]"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char *out = NULL;
        assert_int_not_equal(prewarm_plan("warps", bad[i].plan, "layernorm:f32:1024", &out), 0);
        expect(out, bad[i].msg);
        free(out);
    }
}

/* The parser alone: the canonical text (table order, whatever the order
 * given), auto, and the defaults left whole by a refused spec. */
static void test_plan_parse(void **state)
{
    (void)state;
    jitop__ln_cfg d = {.fwd_bytes = 128, .fwd_max_tpr = 1024, .bwd_pf = -1, .bwd_bulk = 1},
                  c;
    snprintf(d.text, sizeof d.text, "default");
    assert_int_equal(jitop__ln_cfg_parse("P", NULL, 4, &d, &d, &c), JITOP_OK);
    assert_string_equal(c.text, "default");
    assert_int_equal(c.fwd_bytes, 128);
    assert_int_equal(
        jitop__ln_cfg_parse("P", "bwd_pf=auto,fwd_bytes=64,,bwd_bulk=0,", 4, &d, &d, &c), JITOP_OK);
    assert_string_equal(c.text, "fwd_bytes=64,bwd_pf=auto,bwd_bulk=0");
    assert_int_equal(c.fwd_bytes, 64);
    assert_int_equal(c.bwd_pf, -1);
    assert_int_equal(c.bwd_bulk, 0);
    assert_int_equal(c.fwd_max_tpr, 1024);
    assert_int_equal(jitop__ln_cfg_parse("P", "fwd_bytes=64,bwd_bytes=1025", 4, &d, &d, &c),
                     JITOP_EINVAL);
    assert_non_null(strstr(jitop_errmsg(NULL), "P: bwd_bytes is '1025'"));
    assert_int_equal(c.fwd_bytes, 128);
    assert_string_equal(c.text, "default");
    assert_int_equal(jitop__ln_cfg_parse("P", "fwd_bytes=99999999999999999999", 4, &d, &d, &c),
                     JITOP_EINVAL);
    assert_int_equal(jitop__ln_cfg_parse("P", "fwd_bytes=64x", 4, &d, &d, &c), JITOP_EINVAL);
    assert_int_equal(jitop__ln_cfg_parse("P", "fwd_bytes=-64", 4, &d, &d, &c), JITOP_EINVAL);
    assert_int_equal(jitop__ln_cfg_parse("P", "bwd_pf=-1", 4, &d, &d, &c), JITOP_EINVAL);
}

/* Dtype prefixes and legacy: f32_ fields apply to float32 rows only, h16_
 * to 16-bit ones, over the unprefixed field whatever the order; the other
 * dtype's fields are still checked; legacy (first only) swaps the base. */
static void test_plan_parse_dtype(void **state)
{
    (void)state;
    jitop__ln_cfg d = {.fwd_bytes = 128, .fwd_fit = 1, .bwd_pf = -1}, old = {.fwd_bytes = 96},
                  c;
    snprintf(d.text, sizeof d.text, "default");
    const char *spec = "h16_fwd_bytes=32,fwd_bytes=64,f32_fwd_bulk=1";
    assert_int_equal(jitop__ln_cfg_parse("P", spec, 2, &d, &old, &c), JITOP_OK);
    assert_int_equal(c.fwd_bytes, 32);
    assert_int_equal(c.fwd_bulk, 0);
    assert_int_equal(c.fwd_fit, 1);
    assert_string_equal(c.text, "fwd_bytes=32");
    assert_int_equal(jitop__ln_cfg_parse("P", spec, 4, &d, &old, &c), JITOP_OK);
    assert_int_equal(c.fwd_bytes, 64);
    assert_int_equal(c.fwd_bulk, 1);
    assert_string_equal(c.text, "fwd_bytes=64,fwd_bulk=1");
    /* legacy: the other base, its fields over it, said in the text */
    assert_int_equal(jitop__ln_cfg_parse("P", "legacy", 4, &d, &old, &c), JITOP_OK);
    assert_int_equal(c.fwd_bytes, 96);
    assert_int_equal(c.fwd_fit, 0);
    assert_string_equal(c.text, "legacy");
    assert_int_equal(jitop__ln_cfg_parse("P", "legacy,f32_fwd_fit=1", 4, &d, &old, &c), JITOP_OK);
    assert_int_equal(c.fwd_bytes, 96);
    assert_int_equal(c.fwd_fit, 1);
    assert_string_equal(c.text, "legacy,fwd_fit=1");
    assert_int_equal(jitop__ln_cfg_parse("P", "fwd_fit=0,legacy", 4, &d, &old, &c), JITOP_EINVAL);
    assert_non_null(strstr(jitop_errmsg(NULL), "P: legacy must come first"));
    /* the other dtype's field is checked */
    assert_int_equal(jitop__ln_cfg_parse("P", "h16_fwd_bulk=2", 4, &d, &old, &c), JITOP_EINVAL);
    assert_non_null(strstr(jitop_errmsg(NULL), "P: fwd_bulk is '2': expected 0 or 1"));
    assert_int_equal(c.fwd_bytes, 128);
    /* once per scope */
    assert_int_equal(jitop__ln_cfg_parse("P", "h16_fwd_bulk=1,h16_fwd_bulk=0", 2, &d, &old, &c),
                     JITOP_EINVAL);
    assert_non_null(strstr(jitop_errmsg(NULL), "P: h16_fwd_bulk is set twice"));
    assert_int_equal(jitop__ln_cfg_parse("P", "f32_nope=1", 2, &d, &old, &c), JITOP_EINVAL);
    assert_non_null(strstr(jitop_errmsg(NULL), "P: unknown field 'nope'"));
}

/* The default plan differs by dtype where the H100 A/B won (float32 long
 * forward rows over 8 small blocks, float32 backward rows of 16-32 KiB
 * prefetched, 16-bit 320-384-thread forward blocks at 2 per SM, 16-bit
 * forward rows of 72 KiB or more on the copy-engine kernel at 64 elements
 * a thread, 16-bit backward rows of 24 KiB or more on the copy-engine
 * kernel, in whole warps where a power of two idles a third of the lanes,
 * 16-bit prefetching backward rows at 48 bytes a thread where that puts
 * 12-16 warps on an SM); JITOP_LN_PLAN=legacy gives the plan before, short
 * names. */
static void test_defaults_by_dtype(void **state)
{
    (void)state;
    static const struct {
        const char *spec, *now, *legacy;
    } rows[] = {
        /* a float32 row 8 blocks of 256 cannot hold: the plan before's
         * blocks of 1024, not the generic kernel */
        {"layernorm:f32:131072",
         "layernorm_fwd_cluster<float, 131072, true, 4, 1024, 4, 0, 1>: cluster kernel, 4096 "
         "threads per row (over a cluster of 4 blocks)",
         "layernorm_fwd_cluster<float, 131072, true, 4, 1024, 4>: cluster kernel"},
        {"layernorm:f32:36864",
         "layernorm_fwd_bulk<float, 36864, true, 256, 8, 4, 2, 1>: copy-engine cluster kernel, "
         "2048 threads per row (over a cluster of 8 blocks), 5 vectors of 16 B per thread, 10% of "
         "lanes idle in the last pass, rows staged in shared memory (4 stages), gamma and beta in "
         "registers, one cluster exchange per row; plan default",
         "layernorm_fwd_cluster<float, 36864, true, 4, 1024, 2>: cluster kernel"},
        /* float32 rows one block of 1024 threads no longer holds: the
         * copy-engine forward; 32768, which it holds, the register kernel */
        {"layernorm:f32:33792",
         "layernorm_fwd_bulk<float, 33792, true, 256, 8, 4, 2, 1>: copy-engine cluster kernel",
         "layernorm_fwd_cluster<float, 33792, true, 4, 1024, 2>: cluster kernel"},
        {"layernorm:f32:32768", "layernorm_fwd<float, 32768, true, 4, 1024>: register kernel",
         "layernorm_fwd<float, 32768, true, 4, 1024>: register kernel"},
        /* a shifted float32 row of 64 KiB and more that one register
         * block would hold (bwd_bulk_bytes): the copy-engine backward */
        {"layernorm:f32:16385",
         "layernorm_bwd_bulk<float, 16385, true, 512, 2>: copy-engine cluster kernel",
         "layernorm_bwd_cluster<float, 16385, true, 1, 1024, 2>: cluster kernel"},
        {"layernorm:f16:24576",
         "layernorm_fwd<__half, 24576, true, 8, 384, 2>: register kernel, 384 threads per row (1 "
         "row per block), 8 vectors of 16 B per thread, 0% of lanes idle in the last pass, launch "
         "bounds for 2 blocks per SM; plan default",
         "layernorm_fwd<__half, 24576, true, 8, 384>: register kernel"},
        {"layernorm:bf16:12288",
         "layernorm_bwd_bulk<__nv_bfloat16, 12288, true, 512, 2>: copy-engine cluster kernel, 1024 "
         "threads per row (over a cluster of 2 blocks)",
         "layernorm_bwd<__nv_bfloat16, 12288, true, 8, 768>: register kernel"},
        {"layernorm:f16:16384", "layernorm_bwd_bulk<__half, 16384, true, 512, 2>: copy-engine",
         "layernorm_bwd<__half, 16384, true, 8, 1024>: register kernel"},
        /* 1024 threads would idle 44% of the lanes: 576, whole warps */
        {"layernorm:f16:18432",
         "layernorm_bwd_bulk<__half, 18432, true, 576, 2>: copy-engine cluster kernel, 1152 "
         "threads per row (over a cluster of 2 blocks), 2 vectors of 16 B per thread, 0% of "
         "lanes idle in the last pass",
         "layernorm_bwd_bulk<__half, 18432, true, 1024, 2>: copy-engine cluster kernel, 2048 "
         "threads per row (over a cluster of 2 blocks), 2 vectors of 16 B per thread, 44% of "
         "lanes idle in the last pass"},
        /* 48 bytes a thread: 384 threads, 2 blocks (12 warps) an SM, not
         * one block of 576 (18 warps) */
        {"layernorm:f16:9216",
         "layernorm_bwd<__half, 9216, true, 8, 384>: register kernel, 384 threads per row (1 row "
         "per block), 3 vectors of 16 B per thread",
         "layernorm_bwd<__half, 9216, true, 8, 576>: register kernel, 576 threads per row (1 row "
         "per block), 2 vectors of 16 B per thread"},
        /* a 17 KiB float32 row prefetched, which the kernel's own rule
         * would not: PF named */
        {"layernorm:f32:4352",
         "layernorm_bwd<float, 4352, true, 4, 544, true, 1, 0>: register kernel, 544 threads per "
         "row (1 row per block), 2 vectors of 16 B per thread, 0% of lanes idle in the last pass, "
         "accumulators in shared memory, next rows prefetched; plan default",
         "layernorm_bwd<float, 4352, true, 4, 544>: register kernel, 544 threads per row (1 row "
         "per block), 2 vectors of 16 B per thread, 0% of lanes idle in the last pass, "
         "accumulators in shared memory; plan legacy"},
        /* 16-bit rows of 72 KiB or more: the copy-engine forward (6656
         * elements a block: 128 threads of up to 64); below, the register
         * kernel */
        {"layernorm:f16:53248",
         "layernorm_fwd_bulk<__half, 53248, true, 128, 8, 4, 2, 1>: copy-engine cluster kernel",
         "layernorm_fwd<__half, 53248, true, 8, 832>: register kernel"},
        {"layernorm:f16:36864",
         "layernorm_fwd_bulk<__half, 36864, true, 128, 8, 4, 2, 1>: copy-engine cluster kernel",
         "layernorm_fwd<__half, 36864, true, 8, 576>: register kernel"},
        {"layernorm:f16:36352", "layernorm_fwd<__half, 36352, true, 8, 576>: register kernel",
         "layernorm_fwd<__half, 36352, true, 8, 576>: register kernel"},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        char *out = prewarm_ok("warps", "", rows[i].spec);
        expect(out, rows[i].now);
        free(out);
        out = prewarm_ok("warps", "legacy", rows[i].spec);
        expect(out, rows[i].legacy);
        expect(out, "; plan legacy");
        free(out);
    }
    /* left as they were: the float32 backward over a cluster (the
     * copy-engine kernel's power-of-two blocks), float32 forward rows one
     * block holds */
    char *out = prewarm_ok("warps", "", "layernorm:f32:12288");
    expect(out, "layernorm_fwd<float, 12288, true, 4, 384>: register kernel");
    expect(out, "layernorm_bwd_bulk<float, 12288, true, 512, 2>: copy-engine");
    free(out);
    /* a prefixed field reaches its dtype only */
    out = prewarm_ok("warps", "h16_fwd_fit=0,f32_fwd_fit=0,f32_fwd_bulk=0",
                                  "layernorm:f32:36864");
    expect(out, "layernorm_fwd_cluster<float, 36864, true, 4, 256, 8, 0, 1>: cluster kernel");
    expect(out, "; plan fwd_fit=0,fwd_bulk=0");
    free(out);
}

/* fwd_bulk: long rows (fwd_bulk_bytes or more: 72 KiB for 16-bit rows,
 * over 128 KiB for float32 by default) over the forward's copy-engine kernel,
 * compiled by NVRTC for sm_90 here; rows it cannot split keep the register
 * kernels, and the plan line says why. */
static void test_forward_bulk(void **state)
{
    (void)state;
    char *out = prewarm_ok("warps", "fwd_bulk=1,fwd_bulk_chunk=32768", "layernorm:f16:65536");
    /* 32 KiB shares: 4 blocks, 256 threads at the 16-bit default's 64
     * elements a thread */
    expect(out, "layernorm_fwd_bulk<__half, 65536, true, 256, 4, 4, 2, 1>: copy-engine cluster "
                "kernel, 1024 threads per row (over a cluster of 4 blocks), 8 vectors of 16 B per "
                "thread, 0% of lanes idle in the last pass, rows staged in shared memory (4 "
                "stages), gamma and beta in registers, one cluster exchange per row; plan "
                "fwd_bulk=1,fwd_bulk_chunk=32768");
    expect(out, "prewarmed");
    free(out);
    /* a 32 KiB float32 row, a smaller share per block: 8 blocks of 4 KiB,
     * 128 threads of 8 elements */
    out = prewarm_ok("warps",
                                  "fwd_bulk=1,fwd_bulk_bytes=32768,fwd_bulk_chunk=4096,"
                                  "fwd_bulk_ept=8,fwd_bulk_stages=2,fwd_bulk_gb=0,fwd_one_sync=0",
                                  "layernorm:f32:8192");
    expect(out, "layernorm_fwd_bulk<float, 8192, true, 128, 8>: copy-engine cluster kernel");
    expect(out, "prewarmed");
    free(out);
    /* 50000 16-bit: 6250 vectors, ragged over 4 blocks of <= 32 KiB
     * (1562 or 1563 each); in blocks of <= 8 KiB it would take more than 8 */
    out = prewarm_ok("warps", "fwd_bulk=1,fwd_bulk_bytes=65536,fwd_bulk_chunk=32768",
                     "layernorm:bf16:50000");
    expect(out, "layernorm_fwd_bulk<__nv_bfloat16, 50000, true, 256, 4, 4, 2, 1>: copy-engine "
                "cluster kernel, 1024 threads per row (over a cluster of 4 blocks), 7 vectors of "
                "16 B per thread, 13% of lanes idle in the last pass");
    free(out);
    out = prewarm_ok("warps", "fwd_bulk=1,fwd_bulk_bytes=65536,fwd_bulk_chunk=8192",
                     "layernorm:bf16:50000");
    expect(out, "layernorm_fwd<__nv_bfloat16, 50000, true, 8, 800>: register kernel");
    expect(out, "fwd_bulk: N does not split into 16-byte vectors over 2-8 blocks of <= 8192 B, "
                "register path; plan fwd_bulk=1,fwd_bulk_bytes=65536,fwd_bulk_chunk=8192");
    free(out);
    /* under fwd_bulk_bytes: the register kernel, nothing said */
    out = prewarm_ok("warps", "fwd_bulk=1", "layernorm:f16:16384");
    expect(out, "layernorm_fwd<__half, 16384, true, 8, 256>: register kernel");
    expect_none(out, "fwd_bulk:"); /* under fwd_bulk_bytes: no copy-engine note */
    free(out);
}

/* The forward's long-row fields alone: canonical text in table order, the
 * ranges (stages 2 to 4, the switches 0 or 1), the dtype prefix. */
static void test_plan_parse_forward_options(void **state)
{
    (void)state;
    jitop__ln_cfg d = {.fwd_bulk_stages = 2}, c;
    snprintf(d.text, sizeof d.text, "default");
    assert_int_equal(jitop__ln_cfg_parse("P", "fwd_bulk_gb=1,fwd_bulk_stages=3,fwd_one_sync=1", 2,
                                         &d, &d, &c),
                     JITOP_OK);
    assert_string_equal(c.text, "fwd_one_sync=1,fwd_bulk_stages=3,fwd_bulk_gb=1");
    assert_int_equal(c.fwd_one_sync, 1);
    assert_int_equal(c.fwd_bulk_stages, 3);
    assert_int_equal(c.fwd_bulk_gb, 1);
    /* h16_ applies to 16-bit rows only, over the unprefixed field */
    assert_int_equal(jitop__ln_cfg_parse("P", "h16_fwd_bulk_stages=4,fwd_bulk_stages=3", 4, &d, &d,
                                         &c),
                     JITOP_OK);
    assert_int_equal(c.fwd_bulk_stages, 3);
    assert_int_equal(jitop__ln_cfg_parse("P", "h16_fwd_bulk_stages=4,fwd_bulk_stages=3", 2, &d, &d,
                                         &c),
                     JITOP_OK);
    assert_int_equal(c.fwd_bulk_stages, 4);
    static const struct {
        const char *spec, *msg;
    } bad[] = {
        {"fwd_bulk_stages=1", "P: fwd_bulk_stages is '1': expected an integer in [2, 4]"},
        {"fwd_bulk_stages=5", "P: fwd_bulk_stages is '5': expected an integer in [2, 4]"},
        {"fwd_one_sync=2", "P: fwd_one_sync is '2': expected 0 or 1"},
        {"fwd_bulk_gb=yes", "P: fwd_bulk_gb is 'yes': expected an integer in [0, 2]"},
        {"fwd_bulk_gb=3", "P: fwd_bulk_gb is '3': expected an integer in [0, 2]"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(jitop__ln_cfg_parse("P", bad[i].spec, 2, &d, &d, &c), JITOP_EINVAL);
        if (strstr(jitop_errmsg(NULL), bad[i].msg) == NULL)
            fail_msg("expected \"%s\" in \"%s\"", bad[i].msg, jitop_errmsg(NULL));
        assert_int_equal(c.fwd_bulk_stages, 2);
    }
}

/* fwd_one_sync, fwd_bulk_stages, fwd_bulk_gb: extra template arguments of
 * the instances they change (the defaults' names, the cache keys, stay
 * short), named by the plan line, compiled by NVRTC for sm_90 here. */
static void test_forward_long_row_options(void **state)
{
    (void)state;
    char *out = NULL;
    /* one exchange on the float32 register cluster (and with launch
     * bounds: MINB is then named as well) */
    out = prewarm_ok("warps", "fwd_bulk=0,fwd_one_sync=1", "layernorm:f32:49152");
    expect(out, "layernorm_fwd_cluster<float, 49152, true, 4, 192, 8, 0, 1>: cluster kernel, 1536 "
                "threads per row (over a cluster of 8 blocks), 8 vectors of 16 B per thread, 0% "
                "of lanes idle in the last pass, one cluster exchange per row; plan "
                "fwd_bulk=0,fwd_one_sync=1");
    expect(out, "layernorm_fwd_cluster<float, 49152, false, 4, 192, 8, 0, 1>");
    expect(out, "prewarmed");
    free(out);
    out = prewarm_ok("warps", "fwd_bulk=0,fwd_min_blocks=2", "layernorm:f32:49152");
    expect(out, "layernorm_fwd_cluster<float, 49152, true, 4, 192, 8, 2, 1>: cluster kernel");
    expect(out, "launch bounds for 2 blocks per SM");
    expect(out, "prewarmed");
    free(out);
    /* a row one block holds has no cluster exchange to save: unchanged */
    out = prewarm_ok("warps", "fwd_one_sync=1", "layernorm:f16:16384");
    expect(out, "layernorm_fwd<__half, 16384, true, 8, 256>: register kernel");
    expect_none(out, "one cluster exchange");
    free(out);
    /* all three on the 16-bit copy-engine default; gamma and beta only
     * where the kernel reads them (affine) */
    out = prewarm_ok("warps", "fwd_one_sync=1,fwd_bulk_stages=3,fwd_bulk_gb=1",
                                  "layernorm:bf16:65536");
    expect(out, "layernorm_fwd_bulk<__nv_bfloat16, 65536, true, 128, 8, 3, 1, 1>: copy-engine "
                "cluster kernel, 1024 threads per row (over a cluster of 8 blocks), 8 vectors of "
                "16 B per thread, 0% of lanes idle in the last pass, rows staged in shared memory "
                "(3 stages), gamma and beta in shared memory, one cluster exchange per row; plan "
                "fwd_one_sync=1,fwd_bulk_stages=3,fwd_bulk_gb=1");
    expect(out, "layernorm_fwd_bulk<__nv_bfloat16, 65536, false, 128, 8, 3, 0, 1>");
    expect(out, "prewarmed");
    free(out);
    /* the stages and gamma/beta count in the shared memory that bounds a
     * block's share: 2 stages of 16 KiB float32 shares fit 4 blocks, 4
     * stages and gamma/beta (24 B per element) need 8 */
    out = prewarm_ok("warps", "fwd_bulk=1,fwd_bulk_chunk=65536,fwd_bulk_stages=2,fwd_bulk_gb=0",
                                  "layernorm:f32:65536");
    expect(out, "layernorm_fwd_bulk<float, 65536, true, 512, 4, 2, 0, 1>: copy-engine cluster kernel");
    free(out);
    out = prewarm_ok("warps",
                                  "fwd_bulk=1,fwd_bulk_chunk=65536,fwd_bulk_stages=4,fwd_bulk_gb=1,"
                                  "fwd_one_sync=0",
                                  "layernorm:f32:65536");
    expect(out, "layernorm_fwd_bulk<float, 65536, true, 256, 8, 4, 1, 0>: copy-engine cluster "
                "kernel, 2048 threads per row (over a cluster of 8 blocks), 8 vectors of 16 B per "
                "thread, 0% of lanes idle in the last pass, rows staged in shared memory (4 "
                "stages), gamma and beta in shared memory; plan");
    expect(out, "layernorm_fwd_bulk<float, 65536, false, 256, 8, 4, 0, 0>");
    expect(out, "prewarmed");
    free(out);
    /* 2 stages with gamma/beta: the short list of the default stages */
    out = prewarm_ok("warps", "fwd_one_sync=0,fwd_bulk_stages=2,fwd_bulk_gb=1", "layernorm:f16:65536");
    expect(out, "layernorm_fwd_bulk<__half, 65536, true, 128, 8, 2, 1, 0>: copy-engine cluster "
                "kernel");
    expect(out, "rows staged in shared memory, gamma and beta in shared memory; plan "
                "fwd_one_sync=0,fwd_bulk_stages=2,fwd_bulk_gb=1");
    expect(out, "layernorm_fwd_bulk<__half, 65536, false, 128, 8>: copy-engine");
    expect(out, "prewarmed");
    free(out);
    /* gamma and beta in registers: no shared memory for them, so float32
     * 65536's 32 KiB shares at 3 stages are 96 KiB a block; a shifted row
     * keeps them in shared memory (its pairs move with each row's head) */
    out = prewarm_ok("warps", "fwd_bulk_gb=2,f32_fwd_bulk_stages=3", "layernorm:f32:65536");
    expect(out, "layernorm_fwd_bulk<float, 65536, true, 256, 8, 3, 2, 1>: copy-engine cluster "
                "kernel, 2048 threads per row (over a cluster of 8 blocks), 8 vectors of 16 B per "
                "thread, 0% of lanes idle in the last pass, rows staged in shared memory (3 "
                "stages), gamma and beta in registers, one cluster exchange per row; plan");
    expect(out, "layernorm_fwd_bulk<float, 65536, false, 256, 8, 3, 0, 1>");
    expect(out, "prewarmed");
    free(out);
    /* more than 8 vectors a thread (64 elements at 128 of them: 16) would
     * spill with gamma and beta in registers: shared memory then */
    out = prewarm_ok("warps", "h16_fwd_bulk_ept=128", "layernorm:f16:65536");
    expect(out, "layernorm_fwd_bulk<__half, 65536, true, 64, 8, 4, 1, 1>: copy-engine cluster "
                "kernel, 512 threads per row (over a cluster of 8 blocks), 16 vectors of 16 B per "
                "thread");
    expect(out, "gamma and beta in shared memory");
    expect(out, "prewarmed");
    free(out);
    out = prewarm_ok("warps", "fwd_bulk_gb=2", "layernorm:f16:65535");
    expect(out, "layernorm_fwd_bulk<__half, 65535, true, 128, 8, 3, 1, 1>: copy-engine cluster "
                "kernel");
    expect(out, "gamma and beta in shared memory");
    expect_none(out, "in registers");
    expect(out, "prewarmed");
    free(out);
}

/* bwd_bulk_stages alone: its range, its place at the end of the canonical
 * text, the dtype prefix; a refused spec leaves *out as it was. */
static void test_plan_parse_backward_stages(void **state)
{
    (void)state;
    jitop__ln_cfg d = {.bwd_bulk_stages = 2}, c;
    snprintf(d.text, sizeof d.text, "default");
    assert_int_equal(jitop__ln_cfg_parse("P", "bwd_bulk_stages=3,fwd_bulk_stages=4", 2, &d, &d, &c),
                     JITOP_OK);
    assert_string_equal(c.text, "fwd_bulk_stages=4,bwd_bulk_stages=3");
    assert_int_equal(c.bwd_bulk_stages, 3);
    assert_int_equal(c.fwd_bulk_stages, 4);
    /* h16_ reaches 16-bit rows only */
    assert_int_equal(jitop__ln_cfg_parse("P", "h16_bwd_bulk_stages=4", 4, &d, &d, &c), JITOP_OK);
    assert_int_equal(c.bwd_bulk_stages, 2);
    assert_string_equal(c.text, "default");
    assert_int_equal(jitop__ln_cfg_parse("P", "h16_bwd_bulk_stages=4", 2, &d, &d, &c), JITOP_OK);
    assert_int_equal(c.bwd_bulk_stages, 4);
    assert_string_equal(c.text, "bwd_bulk_stages=4");
    static const char *bad[][2] = {
        {"bwd_bulk_stages=1", "P: bwd_bulk_stages is '1': expected an integer in [2, 4]"},
        {"bwd_bulk_stages=5", "P: bwd_bulk_stages is '5': expected an integer in [2, 4]"},
        {"f32_bwd_bulk_stages=x", "P: bwd_bulk_stages is 'x': expected an integer in [2, 4]"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        c.bwd_bulk_stages = 7;
        assert_int_equal(jitop__ln_cfg_parse("P", bad[i][0], 4, &d, &d, &c), JITOP_EINVAL);
        if (strstr(jitop_errmsg(NULL), bad[i][1]) == NULL)
            fail_msg("expected \"%s\" in \"%s\"", bad[i][1], jitop_errmsg(NULL));
    }
}

/* bwd_bulk_stages: S stages of x and dy in layernorm_bwd_bulk, an extra
 * template argument only when not the kernel's 2 (the default names, the
 * cache keys, unchanged), said by the plan line; the stages count in the
 * shared memory that bounds a block's share (16-bit 32768: 2 stages and
 * float32 gamma, 12 B an element, fit 2 blocks of 16384; 3 stages, 16 B,
 * need 4). Compiled by NVRTC for sm_90 here. */
static void test_backward_stages(void **state)
{
    (void)state;
    char *out = prewarm_ok("warps", "bwd_bulk_stages=3", "layernorm:f16:32768");
    expect(out, "layernorm_bwd_bulk<__half, 32768, true, 512, 4, 3>: copy-engine cluster kernel, "
                "2048 threads per row (over a cluster of 4 blocks), 2 vectors of 16 B per thread, "
                "0% of lanes idle in the last pass, rows staged in shared memory (3 stages); plan "
                "bwd_bulk_stages=3");
    expect(out, "layernorm_bwd_bulk<__half, 32768, false, 512, 4, 3>: copy-engine");
    expect(out, "prewarmed");
    free(out);
    out = prewarm_ok("warps", "h16_bwd_bulk_stages=4,bulk_long_from=0", "layernorm:bf16:65536");
    expect(out, "layernorm_bwd_bulk<__nv_bfloat16, 65536, true, 512, 8, 4>: copy-engine cluster "
                "kernel, 4096 threads per row (over a cluster of 8 blocks), 2 vectors of 16 B per "
                "thread, 0% of lanes idle in the last pass, rows staged in shared memory (4 "
                "stages); plan bwd_bulk_stages=4,bulk_long_from=0");
    expect(out, "prewarmed");
    free(out);
    /* 2 stages named: the default instance, short name, no stage count */
    out = prewarm_ok("warps", "bwd_bulk_stages=2", "layernorm:f16:32768");
    expect(out, "layernorm_bwd_bulk<__half, 32768, true, 1024, 2>: copy-engine cluster kernel, "
                "2048 threads per row (over a cluster of 2 blocks), 2 vectors of 16 B per thread, "
                "0% of lanes idle in the last pass, rows staged in shared memory; plan "
                "bwd_bulk_stages=2");
    free(out);
    out = prewarm_ok("warps", "", "layernorm:f16:32768");
    expect(out, "layernorm_bwd_bulk<__half, 32768, true, 1024, 2>: copy-engine cluster kernel, "
                "2048 threads per row (over a cluster of 2 blocks), 2 vectors of 16 B per thread, "
                "0% of lanes idle in the last pass, rows staged in shared memory; plan default");
    expect_none(out, "stages)"); /* no stage count in the default backward */
    free(out);
    /* float32 rows take it as well (f32_ prefix), the forward untouched */
    out = prewarm_ok("warps", "f32_bwd_bulk_stages=3", "layernorm:f32:12288");
    expect(out, "layernorm_bwd_bulk<float, 12288, true, 512, 2, 3>: copy-engine cluster kernel");
    expect(out, "rows staged in shared memory (3 stages); plan bwd_bulk_stages=3");
    expect(out, "layernorm_fwd<float, 12288, true, 4, 384>: register kernel");
    expect(out, "prewarmed");
    free(out);
}

/* Each of the count refused specs bad[i][0] (parsed for es-byte rows over
 * defaults d and legacy base old) fails with bad[i][1] in the error, and
 * leaves the fields at offs (poisoned first) at d's values and the text
 * "default": a refused spec never half-applies. */
static void expect_refused(const char *const (*bad)[2], size_t count, size_t es,
                           const jitop__ln_cfg *d, const jitop__ln_cfg *old, const size_t *offs,
                           size_t noffs)
{
    jitop__ln_cfg c;
    for (size_t i = 0; i < count; i++) {
        memset(&c, 0, sizeof c);
        snprintf(c.text, sizeof c.text, "unset");
        for (size_t k = 0; k < noffs; k++)
            *(int *)(void *)((char *)&c + offs[k]) = 7;
        assert_int_equal(jitop__ln_cfg_parse("P", bad[i][0], es, d, old, &c), JITOP_EINVAL);
        if (strstr(jitop_errmsg(NULL), bad[i][1]) == NULL)
            fail_msg("expected \"%s\" in \"%s\"", bad[i][1], jitop_errmsg(NULL));
        for (size_t k = 0; k < noffs; k++)
            assert_int_equal(*(const int *)(const void *)((const char *)&c + offs[k]),
                             *(const int *)(const void *)((const char *)d + offs[k]));
        assert_string_equal(c.text, "default");
    }
}

/* bwd_pf_from, bwd_pf_bytes and bulk_idle alone: their ranges (the error
 * names the field, the value and the range), their places in the canonical
 * text (the two prefetch fields after bwd_pf, bulk_idle last), the dtype
 * prefixes; a refused spec leaves the defaults whole. */
static void test_plan_parse_backward_shape_fields(void **state)
{
    (void)state;
    jitop__ln_cfg d = {.bwd_pf = -1, .bulk_idle = 100}, c;
    snprintf(d.text, sizeof d.text, "default");
    assert_int_equal(jitop__ln_cfg_parse("P",
                                         "bulk_idle=33,bwd_min_blocks=2,bwd_pf_bytes=48,"
                                         "bwd_pf_from=16384,bwd_pf=1",
                                         2, &d, &d, &c),
                     JITOP_OK);
    assert_string_equal(
        c.text, "bwd_pf=1,bwd_pf_from=16384,bwd_pf_bytes=48,bwd_min_blocks=2,bulk_idle=33");
    assert_int_equal(c.bulk_idle, 33);
    assert_int_equal(c.bwd_pf_bytes, 48);
    assert_int_equal(c.bwd_pf_from, 16384);
    assert_int_equal(c.bwd_pf, 1);
    /* the ends of each range */
    assert_int_equal(jitop__ln_cfg_parse("P",
                                         "bulk_idle=0,bwd_pf_bytes=1024,bwd_pf_from=1073741824", 4,
                                         &d, &d, &c),
                     JITOP_OK);
    assert_int_equal(c.bulk_idle, 0);
    assert_int_equal(c.bwd_pf_bytes, 1024);
    assert_int_equal(c.bwd_pf_from, 1073741824);
    assert_string_equal(c.text, "bwd_pf_from=1073741824,bwd_pf_bytes=1024,bulk_idle=0");
    assert_int_equal(
        jitop__ln_cfg_parse("P", "bulk_idle=100,bwd_pf_bytes=0,bwd_pf_from=0", 4, &d, &d, &c),
        JITOP_OK);
    assert_int_equal(c.bulk_idle, 100);
    assert_int_equal(c.bwd_pf_bytes, 0);
    assert_int_equal(c.bwd_pf_from, 0);
    assert_string_equal(c.text, "bwd_pf_from=0,bwd_pf_bytes=0,bulk_idle=100");
    /* h16_ and f32_ reach their dtype only, over the unprefixed field */
    const char *spec = "h16_bulk_idle=33,f32_bwd_pf_from=16384,h16_bwd_pf_bytes=48,bwd_pf_bytes=8";
    assert_int_equal(jitop__ln_cfg_parse("P", spec, 2, &d, &d, &c), JITOP_OK);
    assert_int_equal(c.bulk_idle, 33);
    assert_int_equal(c.bwd_pf_from, 0);
    assert_int_equal(c.bwd_pf_bytes, 48);
    assert_string_equal(c.text, "bwd_pf_bytes=48,bulk_idle=33");
    assert_int_equal(jitop__ln_cfg_parse("P", spec, 4, &d, &d, &c), JITOP_OK);
    assert_int_equal(c.bulk_idle, 100);
    assert_int_equal(c.bwd_pf_from, 16384);
    assert_int_equal(c.bwd_pf_bytes, 8);
    assert_string_equal(c.text, "bwd_pf_from=16384,bwd_pf_bytes=8");
    static const char *const bad[][2] = {
        {"bulk_idle=101", "P: bulk_idle is '101': expected an integer in [0, 100]"},
        {"bulk_idle=-1", "P: bulk_idle is '-1': expected an integer in [0, 100]"},
        {"bwd_pf_bytes=1025", "P: bwd_pf_bytes is '1025': expected an integer in [0, 1024]"},
        /* the other dtype's field is checked too */
        {"h16_bwd_pf_bytes=-8", "P: bwd_pf_bytes is '-8': expected an integer in [0, 1024]"},
        {"bwd_pf_from=1073741825",
         "P: bwd_pf_from is '1073741825': expected an integer in [0, 1073741824]"},
        {"f32_bwd_pf_from=16k", "P: bwd_pf_from is '16k': expected an integer in [0, 1073741824]"},
        {"bulk_idle=33,bulk_idle=50", "P: bulk_idle is set twice"},
    };
    static const size_t offs[] = {offsetof(jitop__ln_cfg, bulk_idle),
                                  offsetof(jitop__ln_cfg, bwd_pf_bytes),
                                  offsetof(jitop__ln_cfg, bwd_pf_from)};
    expect_refused(bad, sizeof bad / sizeof bad[0], 4, &d, &d, offs, sizeof offs / sizeof offs[0]);
}

/* row_shift, shift_bwd_tpr and shift_bwd_pf alone: their ranges (switches
 * 0 or 1; whole warps up to 1024, 0 off), their places last in the
 * canonical text, the dtype prefixes, legacy's base under them; a refused
 * spec leaves the defaults whole. */
static void test_plan_parse_row_shift(void **state)
{
    (void)state;
    jitop__ln_cfg d = {.row_shift = 1, .bulk_idle = 100, .shift_bwd_tpr = 512, .shift_bwd_pf = 1},
                  old = {.row_shift = 0}, c;
    snprintf(d.text, sizeof d.text, "default");
    assert_int_equal(jitop__ln_cfg_parse("P", "shift_bwd_pf=0,row_shift=0,shift_bwd_tpr=1024,"
                                         "bulk_idle=33",
                                         2, &d, &old, &c),
                     JITOP_OK);
    assert_int_equal(c.row_shift, 0);
    assert_int_equal(c.bulk_idle, 33);
    assert_int_equal(c.shift_bwd_tpr, 1024);
    assert_int_equal(c.shift_bwd_pf, 0);
    assert_string_equal(c.text, "bulk_idle=33,row_shift=0,shift_bwd_tpr=1024,shift_bwd_pf=0");
    assert_int_equal(jitop__ln_cfg_parse("P", "shift_bwd_tpr=0", 2, &d, &old, &c), JITOP_OK);
    assert_int_equal(c.shift_bwd_tpr, 0);
    assert_int_equal(c.shift_bwd_pf, 1);
    assert_string_equal(c.text, "shift_bwd_tpr=0");
    assert_int_equal(jitop__ln_cfg_parse("P", NULL, 2, &d, &old, &c), JITOP_OK);
    assert_int_equal(c.row_shift, 1);
    /* the shifted rows' copy-engine forward threshold: last in the
     * canonical text, by dtype */
    assert_int_equal(jitop__ln_cfg_parse("P", "h16_shift_fwd_bulk_bytes=65536,f32_shift_fwd_bulk_bytes=0,"
                                         "row_shift=1",
                                         2, &d, &old, &c),
                     JITOP_OK);
    assert_int_equal(c.shift_fwd_bulk_bytes, 65536);
    assert_string_equal(c.text, "row_shift=1,shift_fwd_bulk_bytes=65536");
    assert_int_equal(jitop__ln_cfg_parse("P", "h16_shift_fwd_bulk_bytes=65536", 4, &d, &old, &c),
                     JITOP_OK);
    assert_int_equal(c.shift_fwd_bulk_bytes, 0);
    /* h16_ reaches 16-bit rows only, f32_ float32 rows only */
    assert_int_equal(jitop__ln_cfg_parse("P", "h16_row_shift=0", 4, &d, &old, &c), JITOP_OK);
    assert_int_equal(c.row_shift, 1);
    assert_string_equal(c.text, "default");
    assert_int_equal(jitop__ln_cfg_parse("P", "h16_row_shift=0", 2, &d, &old, &c), JITOP_OK);
    assert_int_equal(c.row_shift, 0);
    assert_string_equal(c.text, "row_shift=0");
    assert_int_equal(jitop__ln_cfg_parse("P", "f32_row_shift=0,row_shift=1", 4, &d, &old, &c),
                     JITOP_OK);
    assert_int_equal(c.row_shift, 0);
    /* legacy: its base's row_shift, the field over it */
    assert_int_equal(jitop__ln_cfg_parse("P", "legacy", 2, &d, &old, &c), JITOP_OK);
    assert_int_equal(c.row_shift, 0);
    assert_int_equal(jitop__ln_cfg_parse("P", "legacy,row_shift=1", 2, &d, &old, &c), JITOP_OK);
    assert_int_equal(c.row_shift, 1);
    assert_string_equal(c.text, "legacy,row_shift=1");
    static const char *const bad[][2] = {
        {"row_shift=2", "P: row_shift is '2': expected 0 or 1"},
        {"row_shift=", "P: row_shift is '': expected 0 or 1"},
        /* the other dtype's field is checked too */
        {"f32_row_shift=yes", "P: row_shift is 'yes': expected 0 or 1"},
        {"row_shift=0,row_shift=1", "P: row_shift is set twice"},
        {"shift_bwd_tpr=100", "P: shift_bwd_tpr is '100': expected a multiple of 32 in [0, 1024]"},
        {"shift_bwd_tpr=1056",
         "P: shift_bwd_tpr is '1056': expected a multiple of 32 in [0, 1024]"},
        {"h16_shift_bwd_pf=2", "P: shift_bwd_pf is '2': expected 0 or 1"},
        {"shift_fwd_stages=1", "P: shift_fwd_stages is '1': expected an integer in [2, 4]"},
        {"f32_shift_fwd_stages=5", "P: shift_fwd_stages is '5': expected an integer in [2, 4]"},
        {"shift_bwd_bulk=2", "P: shift_bwd_bulk is '2': expected 0 or 1"},
        {"bulk_long_chunk=1000",
         "P: bulk_long_chunk is '1000': expected a multiple of 16 in [512, 65536]"},
        {"h16_bulk_long_ept=0", "P: bulk_long_ept is '0': expected an integer in [1, 256]"},
        {"shift_bulk_long_from=-1",
         "P: shift_bulk_long_from is '-1': expected an integer in [0, 1073741824]"},
        {"bulk_long_from=96k", "P: bulk_long_from is '96k': expected an integer in [0, 1073741824]"},
        {"shift_fwd_bulk_bytes=-1",
         "P: shift_fwd_bulk_bytes is '-1': expected an integer in [0, 1073741824]"},
    };
    static const size_t offs[] = {offsetof(jitop__ln_cfg, row_shift),
                                  offsetof(jitop__ln_cfg, shift_bwd_tpr),
                                  offsetof(jitop__ln_cfg, shift_bwd_pf),
                                  offsetof(jitop__ln_cfg, shift_fwd_stages),
                                  offsetof(jitop__ln_cfg, shift_bwd_bulk),
                                  offsetof(jitop__ln_cfg, bulk_long_from),
                                  offsetof(jitop__ln_cfg, bulk_long_chunk),
                                  offsetof(jitop__ln_cfg, bulk_long_ept),
                                  offsetof(jitop__ln_cfg, shift_bulk_long_from),
                                  offsetof(jitop__ln_cfg, shift_fwd_bulk_bytes)};
    expect_refused(bad, sizeof bad / sizeof bad[0], 2, &d, &old, offs,
                   sizeof offs / sizeof offs[0]);
}

/* A prewarm under a threads rule and a plan ("" the default), and the
 * lines expected in its log (want2 NULL: one). */
typedef struct plan_case {
    const char *rule, *plan, *spec, *want, *want2;
} plan_case;

static void expect_cases(const plan_case *cases, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        char *out = prewarm_ok(cases[i].rule, cases[i].plan, cases[i].spec);
        expect(out, cases[i].want);
        if (cases[i].want2 != NULL)
            expect(out, cases[i].want2);
        expect(out, "prewarmed");
        free(out);
    }
}

/* bwd_pf_bytes: a second budget of bytes per thread for the rows that take
 * the prefetching backward (16-bit default 48, float32 0: none); of it and
 * bwd_bytes (32), the one whose block, times the launch bounds' blocks per
 * SM (512 threads' worth, at least 1, or the plan's bwd_min_blocks in its
 * range), puts nearer 12-16 warps on an SM, bwd_pf_bytes on a tie. */
static void test_backward_pf_bytes(void **state)
{
    (void)state;
    static const plan_case cases[] = {
        /* 4352: 288 threads at 32 B, one block of 9 warps an SM; 192 at
         * 48 B, two blocks, 12 warps */
        {"warps", "", "layernorm:f16:4352",
         "layernorm_bwd<__half, 4352, true, 8, 192>: register kernel, 192 threads per row (1 row "
         "per block), 3 vectors of 16 B per thread, 6% of lanes idle in the last pass, "
         "accumulators in shared memory, next rows prefetched; plan default",
         NULL},
        {"warps", "", "layernorm:bf16:4352",
         "layernorm_bwd<__nv_bfloat16, 4352, true, 8, 192>: register kernel, 192 threads per row",
         NULL},
        {"warps", "h16_bwd_pf_bytes=0", "layernorm:f16:4352",
         "layernorm_bwd<__half, 4352, true, 8, 288>: register kernel, 288 threads per row (1 row "
         "per block), 2 vectors of 16 B per thread, 6% of lanes idle in the last pass, "
         "accumulators in shared memory, next rows prefetched; plan bwd_pf_bytes=0",
         NULL},
        {"warps", "h16_bwd_pf_bytes=0", "layernorm:bf16:4352",
         "layernorm_bwd<__nv_bfloat16, 4352, true, 8, 288>: register kernel, 288 threads per row",
         NULL},
        /* an odd N on 2-byte vectors (row_shift=0): bwd_bytes' 32 B only
         * (2-byte vectors spill at 48 B a thread), whatever bwd_pf_bytes
         * says: 288 threads of 15 elements, where 48 B would give 192 */
        {"warps", "row_shift=0", "layernorm:f16:4097",
         "layernorm_bwd<__half, 4097, true, 1, 288>: register kernel, 288 threads per row (1 row "
         "per block), 15 vectors of 2 B per thread, 5% of lanes idle in the last pass, "
         "accumulators in shared memory, next rows prefetched; plan row_shift=0",
         NULL},
        {"warps", "row_shift=0,h16_bwd_pf_bytes=64", "layernorm:f16:4097",
         "layernorm_bwd<__half, 4097, true, 1, 288>: register kernel, 288 threads per row",
         "; plan bwd_pf_bytes=64,row_shift=0"},
        /* the same N shifted onto 16-byte vectors (the default row_shift):
         * 511 body vectors (N / 8 - 1), 256 threads at 32 B and 192 at
         * 48 B, two blocks an SM either way (16 and 12 warps), a tie:
         * bwd_pf_bytes */
        {"warps", "", "layernorm:f16:4097",
         "layernorm_bwd<__half, 4097, true, 8, 192>: register kernel, 192 threads per row (1 row "
         "per block), 3 vectors of 16 B per thread, 11% of lanes idle in the last pass, "
         "accumulators and gamma in shared memory, " LN_SHIFTED ", next rows prefetched; plan "
         "default",
         NULL},
        {"warps", "h16_bwd_pf_bytes=0", "layernorm:f16:4097",
         "layernorm_bwd<__half, 4097, true, 8, 256>: register kernel, 256 threads per row (1 row "
         "per block), 2 vectors of 16 B per thread, 0% of lanes idle in the last pass",
         NULL},
        /* 7936: 512 threads at 32 B, 16 warps; 352 at 48 B, one block of
         * 11: 32 B wins */
        {"warps", "", "layernorm:f16:7936",
         "layernorm_bwd<__half, 7936, true, 8, 512>: register kernel, 512 threads per row (1 row "
         "per block), 2 vectors of 16 B per thread",
         NULL},
        /* 9216: one block of 576 (18 warps) or one of 384 (12) */
        {"warps", "", "layernorm:f16:9216",
         "layernorm_bwd<__half, 9216, true, 8, 384>: register kernel, 384 threads per row (1 row "
         "per block), 3 vectors of 16 B per thread, 0% of lanes idle in the last pass",
         NULL},
        {"warps", "h16_bwd_pf_bytes=0", "layernorm:f16:9216",
         "layernorm_bwd<__half, 9216, true, 8, 576>: register kernel, 576 threads per row", NULL},
        /* the plan's launch bounds count: two blocks of 384 are 24 warps,
         * one of 576 (over bwd_min_blocks_to, 512 threads an SM) 18 */
        {"warps", "bwd_min_blocks=2,bwd_min_blocks_to=512", "layernorm:f16:9216",
         "layernorm_bwd<__half, 9216, true, 8, 576>: register kernel", NULL},
        /* a tie: power-of-two blocks of 512 (32 B, one an SM) and 256
         * (48 B, two), 16 warps each: bwd_pf_bytes */
        {"pow2", "", "layernorm:f16:4352",
         "layernorm_bwd<__half, 4352, true, 8, 256>: register kernel, 256 threads per row (1 row "
         "per block), 3 vectors of 16 B per thread, 29% of lanes idle in the last pass",
         NULL},
        /* rows that do not prefetch keep bwd_bytes: under 8 KiB (3072:
         * 192 threads, where 48 B's 128 would tie at 16 warps), or
         * bwd_pf=0 */
        {"warps", "", "layernorm:f16:3072",
         "layernorm_bwd<__half, 3072, true, 8, 192>: register kernel, 192 threads per row (1 row "
         "per block), 2 vectors of 16 B per thread, 0% of lanes idle in the last pass, "
         "accumulators in shared memory; plan default",
         NULL},
        {"warps", "bwd_pf=0", "layernorm:f16:9216",
         "layernorm_bwd<__half, 9216, true, 8, 576, true, 0, 0>: register kernel", NULL},
        /* float32 prefetching rows: no second budget by default (544
         * threads, one block of 17 warps); 384 (12 warps) when asked */
        {"warps", "", "layernorm:f32:4352",
         "layernorm_bwd<float, 4352, true, 4, 544, true, 1, 0>: register kernel", NULL},
        {"warps", "f32_bwd_pf_bytes=48", "layernorm:f32:4352",
         "layernorm_bwd<float, 4352, true, 4, 384, true, 1, 0>: register kernel, 384 threads per "
         "row (1 row per block), 3 vectors of 16 B per thread",
         NULL},
    };
    expect_cases(cases, sizeof cases / sizeof cases[0]);
}

/* bwd_pf_from: rows one block holds of at least that many bytes take the
 * prefetching backward when bwd_pf is auto (float32 default 16 KiB; 0, the
 * 16-bit default: the kernel's own rule, 16-bit rows of 8 KiB or more). An
 * instance whose prefetch differs from the kernel's rule names it (PF 1 or
 * 0); the others keep their short names, the cache keys. */
static void test_backward_pf_from(void **state)
{
    (void)state;
    static const plan_case cases[] = {
        /* float32 rows of 16-32 KiB prefetch; the kernel's rule would not */
        {"warps", "", "layernorm:f32:4352",
         "layernorm_bwd<float, 4352, true, 4, 544, true, 1, 0>: register kernel, 544 threads per "
         "row (1 row per block), 2 vectors of 16 B per thread, 0% of lanes idle in the last pass, "
         "accumulators in shared memory, next rows prefetched; plan default",
         "layernorm_bwd<float, 4352, false, 4, 544, true, 1, 0>: register kernel"},
        {"warps", "", "layernorm:f32:8192",
         "layernorm_bwd<float, 8192, true, 4, 1024, true, 1, 0>: register kernel", NULL},
        /* 0: the kernel's rule, the short name */
        {"warps", "f32_bwd_pf_from=0", "layernorm:f32:4352",
         "layernorm_bwd<float, 4352, true, 4, 544>: register kernel, 544 threads per row (1 row "
         "per block), 2 vectors of 16 B per thread, 0% of lanes idle in the last pass, "
         "accumulators in shared memory; plan bwd_pf_from=0",
         NULL},
        /* 15 KiB: under the float32 default */
        {"warps", "", "layernorm:f32:3840",
         "layernorm_bwd<float, 3840, true, 4, 480>: register kernel, 480 threads per row (1 row "
         "per block), 2 vectors of 16 B per thread, 0% of lanes idle in the last pass, "
         "accumulators in shared memory; plan default",
         NULL},
        {"warps", "f32_bwd_pf_from=8192", "layernorm:f32:2048",
         "layernorm_bwd<float, 2048, true, 4, 256, true, 1, 0>: register kernel", NULL},
        /* bwd_pf set wins over it */
        {"warps", "f32_bwd_pf=0", "layernorm:f32:4352",
         "layernorm_bwd<float, 4352, true, 4, 544, true, 0, 0>: register kernel, 544 threads per "
         "row (1 row per block), 2 vectors of 16 B per thread, 0% of lanes idle in the last pass, "
         "accumulators in shared memory; plan bwd_pf=0",
         NULL},
        /* 16-bit rows: off under it (PF 0 named, and bwd_bytes' block,
         * not bwd_pf_bytes'), on from it (PF 1 named, 48 B a thread) */
        {"warps", "h16_bwd_pf_from=16384", "layernorm:f16:4352",
         "layernorm_bwd<__half, 4352, true, 8, 288, true, 0, 0>: register kernel, 288 threads per "
         "row (1 row per block), 2 vectors of 16 B per thread, 6% of lanes idle in the last pass, "
         "accumulators in shared memory; plan bwd_pf_from=16384",
         NULL},
        {"warps", "h16_bwd_pf_from=4096", "layernorm:f16:3072",
         "layernorm_bwd<__half, 3072, true, 8, 128, true, 1, 0>: register kernel, 128 threads per "
         "row (1 row per block), 3 vectors of 16 B per thread, 0% of lanes idle in the last pass, "
         "accumulators in shared memory, next rows prefetched; plan bwd_pf_from=4096",
         NULL},
        /* a row over a cluster never prefetches: the short name */
        {"warps", "bwd_bulk=0", "layernorm:f32:9216",
         "layernorm_bwd_cluster<float, 9216, true, 4, 1024, 2>: cluster kernel", NULL},
    };
    expect_cases(cases, sizeof cases / sizeof cases[0]);
}

/* bulk_idle: layernorm_bwd_bulk's blocks in the fewest whole warps where
 * the power of two leaves bulk_idle percent or more of its lanes idle,
 * measured as a block's share against threads times bulk_ept (16 elements)
 * (16-bit default 33; float32 100: always the power of two); the forward's
 * copy-engine kernel keeps its power of two. */
static void test_backward_bulk_whole_warps(void **state)
{
    (void)state;
    static const plan_case cases[] = {
        /* 9216 elements a block: 1024 threads of 16 leave 44% idle, 576 */
        {"warps", "", "layernorm:f16:18432",
         "layernorm_bwd_bulk<__half, 18432, true, 576, 2>: copy-engine cluster kernel, 1152 "
         "threads per row (over a cluster of 2 blocks), 2 vectors of 16 B per thread, 0% of lanes "
         "idle in the last pass, rows staged in shared memory; plan default",
         NULL},
        {"warps", "", "layernorm:bf16:36864",
         "layernorm_bwd_bulk<__nv_bfloat16, 36864, true, 576, 4>: copy-engine cluster kernel, "
         "2304 threads per row (over a cluster of 4 blocks)",
         NULL},
        {"warps", "", "layernorm:f16:36864",
         "layernorm_bwd_bulk<__half, 36864, true, 576, 4>: copy-engine cluster kernel", NULL},
        /* under a third idle: 31% (45056), 6% (15360) */
        {"warps", "", "layernorm:f16:45056",
         "layernorm_bwd_bulk<__half, 45056, true, 1024, 4>: copy-engine cluster kernel, 4096 "
         "threads per row (over a cluster of 4 blocks), 2 vectors of 16 B per thread, 31% of "
         "lanes idle in the last pass",
         NULL},
        {"warps", "", "layernorm:f16:15360",
         "layernorm_bwd_bulk<__half, 15360, true, 512, 2>: copy-engine cluster kernel, 1024 "
         "threads per row (over a cluster of 2 blocks), 2 vectors of 16 B per thread, 6% of lanes "
         "idle in the last pass",
         NULL},
        /* 100: always the power of two; 0: always whole warps */
        {"warps", "h16_bulk_idle=100", "layernorm:f16:36864",
         "layernorm_bwd_bulk<__half, 36864, true, 1024, 4>: copy-engine cluster kernel, 4096 "
         "threads per row (over a cluster of 4 blocks), 2 vectors of 16 B per thread, 44% of "
         "lanes idle in the last pass, rows staged in shared memory; plan bulk_idle=100",
         NULL},
        {"warps", "bulk_idle=0", "layernorm:f16:15360",
         "layernorm_bwd_bulk<__half, 15360, true, 480, 2>: copy-engine cluster kernel, 960 "
         "threads per row (over a cluster of 2 blocks)",
         NULL},
        /* the forward's 6144-element shares: 128 threads of 64, not 96 */
        {"warps", "bulk_idle=0", "layernorm:f16:49152",
         "layernorm_bwd_bulk<__half, 49152, true, 768, 4>: copy-engine cluster kernel",
         "layernorm_fwd_bulk<__half, 49152, true, 128, 8, 4, 2, 1>: copy-engine cluster kernel"},
        /* float32: the power of two by default (4608 elements a block of
         * 512 threads of 16: 44% by the rule's measure), 288 threads of 16
         * when asked */
        {"warps", "", "layernorm:f32:9216",
         "layernorm_bwd_bulk<float, 9216, true, 512, 2>: copy-engine cluster kernel, 1024 "
         "threads per row (over a cluster of 2 blocks)",
         NULL},
        {"warps", "f32_bulk_idle=33", "layernorm:f32:9216",
         "layernorm_bwd_bulk<float, 9216, true, 288, 2>: copy-engine cluster kernel, 576 threads "
         "per row (over a cluster of 2 blocks), 4 vectors of 16 B per thread, 0% of lanes idle in "
         "the last pass, rows staged in shared memory; plan bulk_idle=33",
         NULL},
        /* 16-bit rows from 112 KiB (bulk_long_from): 8 blocks of 16 KiB at
         * 32 elements a thread, 256 threads; 53248 below it keeps 4 of 1024;
         * bulk_long_from=0: the one rule for every row */
        {"warps", "", "layernorm:f16:57344",
         "layernorm_bwd_bulk<__half, 57344, true, 256, 8>: copy-engine cluster kernel, 2048 "
         "threads per row (over a cluster of 8 blocks), 4 vectors of 16 B per thread, 12% of "
         "lanes idle in the last pass, rows staged in shared memory; plan default",
         NULL},
        {"warps", "", "layernorm:bf16:53248",
         "layernorm_bwd_bulk<__nv_bfloat16, 53248, true, 1024, 4>: copy-engine cluster kernel",
         NULL},
        {"warps", "bulk_long_from=0", "layernorm:f16:65536",
         "layernorm_bwd_bulk<__half, 65536, true, 1024, 4>: copy-engine cluster kernel, 4096 "
         "threads per row (over a cluster of 4 blocks)",
         NULL},
        {"warps", "bulk_long_chunk=32768,bulk_long_ept=64", "layernorm:bf16:65536",
         "layernorm_bwd_bulk<__nv_bfloat16, 65536, true, 256, 4>: copy-engine cluster kernel", NULL},
    };
    expect_cases(cases, sizeof cases / sizeof cases[0]);
}

/* The 16-bit copy-engine forward's default 64 elements a thread: 128
 * threads for a 16 KiB share (h16_fwd_bulk_ept=32, float32's default:
 * 256); float32 keeps 32 (256 threads for its 32 KiB share). */
static void test_forward_bulk_ept(void **state)
{
    (void)state;
    static const plan_case cases[] = {
        {"warps", "", "layernorm:f16:65536",
         "layernorm_fwd_bulk<__half, 65536, true, 128, 8, 4, 2, 1>: copy-engine cluster kernel, "
         "1024 threads per row (over a cluster of 8 blocks), 8 vectors of 16 B per thread, 0% of "
         "lanes idle in the last pass, rows staged in shared memory (4 stages), gamma and beta in "
         "registers, one cluster exchange per row; plan default",
         NULL},
        {"warps", "h16_fwd_bulk_ept=32", "layernorm:f16:65536",
         "layernorm_fwd_bulk<__half, 65536, true, 256, 8, 4, 2, 1>: copy-engine cluster kernel, "
         "2048 threads per row (over a cluster of 8 blocks), 4 vectors of 16 B per thread",
         NULL},
        {"warps", "", "layernorm:f32:65536",
         "layernorm_fwd_bulk<float, 65536, true, 256, 8, 4, 2, 1>: copy-engine cluster kernel, "
         "2048 threads per row (over a cluster of 8 blocks), 8 vectors of 16 B per thread",
         NULL},
    };
    expect_cases(cases, sizeof cases / sizeof cases[0]);
}

/* row_shift (default 1): a row the 16-byte vector does not divide (16-bit
 * N % 8 != 0, float32 N % 4 != 0, N of two vectors or more) moves in
 * 16-byte vectors from its first 16-byte boundary, a body of N / VEC - 1
 * of them and N % VEC + VEC head and tail elements one by one: instances
 * named with VEC 8 or 4 for an N it does not divide, sized by that body,
 * and the plan line says so (the backward's also that gamma's body vectors
 * sit in shared memory). The prewarm has no pointers, so it always takes
 * it where a register kernel holds the row. Not taken, the widest vector
 * that divides N: under row_shift=0 or legacy; where only the generic
 * kernel takes the row; for a backward whose row has fewer threads than
 * head and tail elements (each would hold more than one); by the
 * copy-engine kernels (the register kernels take the row, the plan line's
 * note says why). A shifted row over a cluster keeps two exchanges
 * (fwd_one_sync counts whole vectors a block). 16-bit shifted backward
 * rows also take shift_bwd_tpr's blocks and shift_bwd_pf's prefetch. */
typedef struct shift_case {
    const char *plan, *spec, *want[4];
    const char *absent; /* nowhere in the log (NULL: no such check) */
} shift_case;

static void test_row_shift(void **state)
{
    (void)state;
    static const shift_case cases[] = {
        /* odd 16-bit rows, short to long: forward and backward shifted;
         * 4097's forward holds its 511 body vectors in 64 threads at 128 B
         * (2 rows a block) */
        {"",
         "layernorm:f16:4097",
         {"layernorm_fwd<__half, 4097, true, 8, 64>: register kernel, 64 threads per row (2 rows "
          "per block), 8 vectors of 16 B per thread, 0% of lanes idle in the last pass, " LN_SHIFTED
          "; plan default",
          "layernorm_bwd<__half, 4097, true, 8, 192>: register kernel, 192 threads per row (1 row "
          "per block), 3 vectors of 16 B per thread, 11% of lanes idle in the last pass, "
          "accumulators and gamma in shared memory, " LN_SHIFTED ", next rows prefetched; plan "
          "default",
          "layernorm_fwd<__half, 4097, false, 8, 64>: register kernel",
          "layernorm_bwd<__half, 4097, false, 8, 192>: register kernel"},
         NULL},
        /* 24 KiB: the copy-engine backward, as 12288's: 1535 body vectors
         * over 2 blocks (767 and 768) */
        {"",
         "layernorm:bf16:12289",
         {"layernorm_fwd<__nv_bfloat16, 12289, true, 8, 192>: register kernel, 192 threads per row "
          "(1 row per block), 8 vectors of 16 B per thread, 0% of lanes idle in the last pass, "
          LN_SHIFTED "; plan default",
          "layernorm_bwd_bulk<__nv_bfloat16, 12289, true, 512, 2>: copy-engine cluster kernel, "
          "1024 threads per row (over a cluster of 2 blocks), 2 vectors of 16 B per thread, 25% of "
          "lanes idle in the last pass, rows staged in shared memory, " LN_SHIFTED "; plan default",
          NULL, NULL},
         NULL},
        /* shift_bwd_bulk=0: the register kernel, which the copy-engine
         * kernel's plan names */
        {"shift_bwd_bulk=0",
         "layernorm:bf16:12289",
         {"layernorm_bwd<__nv_bfloat16, 12289, true, 8, 512>: register kernel, 512 threads per row "
          "(1 row per block), 3 vectors of 16 B per thread, 0% of lanes idle in the last pass, "
          "accumulators and gamma in shared memory, " LN_SHIFTED ", next rows prefetched, "
          "bwd_bulk: not for shifted rows (shift_bwd_bulk=0), register path; plan "
          "shift_bwd_bulk=0",
          NULL, NULL, NULL},
         "layernorm_bwd_bulk"},
        /* float32 */
        {"",
         "layernorm:f32:1001",
         {"layernorm_fwd<float, 1001, true, 4, 32>: register kernel, 32 threads per row (4 rows "
          "per block), 8 vectors of 16 B per thread, 3% of lanes idle in the last pass, " LN_SHIFTED
          "; plan default",
          "layernorm_bwd<float, 1001, true, 4, 128>: register kernel, 128 threads per row (1 row "
          "per block), 2 vectors of 16 B per thread, 3% of lanes idle in the last pass, "
          "accumulators and gamma in shared memory, " LN_SHIFTED "; plan default",
          NULL, NULL},
         NULL},
        /* a float32 backward the register kernels would split over a
         * cluster (2498 body vectors at 32 B need 1249 threads): the
         * copy-engine kernel, as 10000's, 1249 body vectors a block */
        {"",
         "layernorm:f32:9999",
         {"layernorm_fwd<float, 9999, true, 4, 320>: register kernel, 320 threads per row (1 row "
          "per block), 8 vectors of 16 B per thread, 2% of lanes idle in the last pass, " LN_SHIFTED
          "; plan default",
          "layernorm_bwd_bulk<float, 9999, true, 512, 2>: copy-engine cluster kernel, 1024 threads "
          "per row (over a cluster of 2 blocks), 3 vectors of 16 B per thread, 19% of lanes idle "
          "in the last pass, rows staged in shared memory, " LN_SHIFTED "; plan default",
          NULL, NULL},
         NULL},
        /* even but not a multiple of 8 (8-byte vectors divide it) */
        {"",
         "layernorm:f16:4100",
         {"layernorm_fwd<__half, 4100, true, 8, 64>: register kernel, 64 threads per row (2 rows "
          "per block), 8 vectors of 16 B per thread, 0% of lanes idle in the last pass, " LN_SHIFTED
          "; plan default",
          "layernorm_bwd<__half, 4100, true, 8, 192>: register kernel, 192 threads per row (1 row "
          "per block), 3 vectors of 16 B per thread, 11% of lanes idle in the last pass, "
          "accumulators and gamma in shared memory, " LN_SHIFTED ", next rows prefetched; plan "
          "default",
          NULL, NULL},
         NULL},
        /* the copy-engine kernels for long shifted rows: 65535's 8190 body
         * vectors over 8 blocks (1023 or 1024 each), forward at 128
         * threads, 3 stages (shift_fwd_stages), backward at 256 (from 80
         * KiB, shift_bulk_long_from: bulk_long_chunk, bulk_long_ept) */
        {"",
         "layernorm:f16:65535",
         {"layernorm_fwd_bulk<__half, 65535, true, 128, 8, 3, 1, 1>: copy-engine cluster kernel, "
          "1024 threads per row (over a cluster of 8 blocks), 8 vectors of 16 B per thread, 0% of "
          "lanes idle in the last pass, rows staged in shared memory (3 stages), gamma and beta in "
          "shared memory, one cluster exchange per row, " LN_SHIFTED "; plan default",
          "layernorm_fwd_bulk<__half, 65535, false, 128, 8, 3, 0, 1>: copy-engine cluster kernel",
          "layernorm_bwd_bulk<__half, 65535, true, 256, 8>: copy-engine cluster kernel, 2048 "
          "threads per row (over a cluster of 8 blocks), 4 vectors of 16 B per thread, 0% of lanes "
          "idle in the last pass, rows staged in shared memory, " LN_SHIFTED "; plan default"},
         NULL},
        /* float32 from 112 KiB, a ragged share (9999 body vectors over 8),
         * the stages as the plan says */
        {"shift_fwd_stages=2",
         "layernorm:f32:40001",
         {"layernorm_fwd_bulk<float, 40001, true, 256, 8, 2, 1, 1>: copy-engine cluster kernel, "
          "2048 threads per row (over a cluster of 8 blocks), 5 vectors of 16 B per thread, 2% of "
          "lanes idle in the last pass, rows staged in shared memory, gamma and beta in shared "
          "memory, one cluster exchange per row, " LN_SHIFTED "; plan shift_fwd_stages=2",
          NULL, NULL, NULL},
         NULL},
        /* shifted 16-bit rows from 56 KiB (shift_fwd_bulk_bytes) on the
         * copy-engine forward, gamma and beta in shared memory; under it
         * the register kernels */
        {"",
         "layernorm:f16:28673",
         {"layernorm_fwd_bulk<__half, 28673, true, 128, 4, 3, 1, 1>: copy-engine cluster kernel",
          NULL, NULL, NULL},
         NULL},
        {"",
         "layernorm:f16:28671",
         {"layernorm_fwd<__half, 28671, true, 8, 448>: register kernel", NULL, NULL, NULL},
         "layernorm_fwd_bulk"},
        /* row_shift=0: the names before, nothing shifted */
        {"row_shift=0",
         "layernorm:f16:4097",
         {"layernorm_fwd<__half, 4097, true, 1, 96>: register kernel, 96 threads per row (1 row "
          "per block), 43 vectors of 2 B per thread, 1% of lanes idle in the last pass; plan "
          "row_shift=0",
          "layernorm_bwd<__half, 4097, true, 1, 288>: register kernel, 288 threads per row (1 row "
          "per block), 15 vectors of 2 B per thread, 5% of lanes idle in the last pass, "
          "accumulators in shared memory, next rows prefetched; plan row_shift=0",
          NULL, NULL},
         LN_SHIFTED},
        {"row_shift=0",
         "layernorm:bf16:12289",
         {"layernorm_fwd<__nv_bfloat16, 12289, true, 1, 224>: register kernel, 224 threads per row",
          "layernorm_bwd<__nv_bfloat16, 12289, true, 1, 800>: register kernel, 800 threads per row",
          NULL, NULL},
         LN_SHIFTED},
        {"row_shift=0",
         "layernorm:f32:1001",
         {"layernorm_fwd<float, 1001, true, 1, 32>: register kernel, 32 threads per row (4 rows "
          "per block), 32 vectors of 4 B per thread, 2% of lanes idle in the last pass; plan "
          "row_shift=0",
          "layernorm_bwd<float, 1001, true, 1, 128>: register kernel, 128 threads per row (1 row "
          "per block), 8 vectors of 4 B per thread, 2% of lanes idle in the last pass, "
          "accumulators in shared memory; plan row_shift=0",
          NULL, NULL},
         LN_SHIFTED},
        {"row_shift=0",
         "layernorm:f32:9999",
         {"layernorm_fwd<float, 9999, true, 1, 320>: register kernel",
          "layernorm_bwd_cluster<float, 9999, true, 1, 1024, 2>: cluster kernel, 2048 threads per "
          "row (over a cluster of 2 blocks), 5 vectors of 4 B per thread, 2% of lanes idle",
          NULL, NULL},
         LN_SHIFTED},
        {"row_shift=0",
         "layernorm:f16:4100",
         {"layernorm_fwd<__half, 4100, true, 4, 96>: register kernel, 96 threads per row (1 row "
          "per block), 11 vectors of 8 B per thread",
          "layernorm_bwd<__half, 4100, true, 4, 288>: register kernel", NULL, NULL},
         LN_SHIFTED},
        /* legacy: off; legacy,row_shift=1: on, over legacy's backward
         * budget (32 B alone: 256 threads) */
        {"legacy",
         "layernorm:f16:4097",
         {"layernorm_fwd<__half, 4097, true, 1, 96>: register kernel",
          "layernorm_bwd<__half, 4097, true, 1, 288>: register kernel", "; plan legacy\n", NULL},
         LN_SHIFTED},
        {"legacy,row_shift=1",
         "layernorm:f16:4097",
         {"layernorm_fwd<__half, 4097, true, 8, 64>: register kernel",
          "layernorm_bwd<__half, 4097, true, 8, 256>: register kernel, 256 threads per row (1 row "
          "per block), 2 vectors of 16 B per thread",
          LN_SHIFTED "; plan legacy,row_shift=1", NULL},
         NULL},
        /* row_shift named in the plan line when set, 1 as well; a dtype
         * prefix reaches its dtype only */
        {"row_shift=1",
         "layernorm:f32:1001",
         {"layernorm_fwd<float, 1001, true, 4, 32>: register kernel",
          "layernorm_bwd<float, 1001, true, 4, 128>: register kernel",
          LN_SHIFTED "; plan row_shift=1", NULL},
         NULL},
        {"h16_row_shift=0",
         "layernorm:f16:4097",
         {"layernorm_fwd<__half, 4097, true, 1, 96>: register kernel",
          "1% of lanes idle in the last pass; plan row_shift=0", NULL, NULL},
         LN_SHIFTED},
        {"h16_row_shift=0",
         "layernorm:f32:1001",
         {"layernorm_fwd<float, 1001, true, 4, 32>: register kernel",
          LN_SHIFTED "; plan default", NULL, NULL},
         "row_shift"},
        /* a row the 16-byte vector divides, or under two vectors: as
         * before; from two vectors, shifted (17: a body of one vector, its
         * backward's 1 thread too few, below) */
        {"",
         "layernorm:f16:4104",
         {"layernorm_fwd<__half, 4104, true, 8, 96>: register kernel, 96 threads per row (1 row "
          "per block), 6 vectors of 16 B per thread, 11% of lanes idle in the last pass; plan "
          "default",
          "layernorm_bwd<__half, 4104, true, 8, 192>: register kernel, 192 threads per row (1 row "
          "per block), 3 vectors of 16 B per thread, 11% of lanes idle in the last pass, "
          "accumulators in shared memory, next rows prefetched; plan default",
          NULL, NULL},
         LN_SHIFTED},
        {"",
         "layernorm:f16:15",
         {"layernorm_fwd<__half, 15, true, 1, 1>: register kernel",
          "layernorm_bwd<__half, 15, true, 1, 1>: register kernel", NULL, NULL},
         LN_SHIFTED},
        {"",
         "layernorm:f16:17",
         {"layernorm_fwd<__half, 17, true, 8, 1>: register kernel, 1 threads per row (128 rows "
          "per block), 1 vectors of 16 B per thread, 0% of lanes idle in the last pass, " LN_SHIFTED
          "; plan default",
          "layernorm_bwd<__half, 17, true, 1, 2>: register kernel, 2 threads per row (64 rows per "
          "block), 9 vectors of 2 B per thread, 6% of lanes idle in the last pass, accumulators in "
          "shared memory; plan default",
          NULL, NULL},
         NULL},
        /* generic rows: the widest dividing vector. 300001's forward fits
         * 8 blocks of 1024 shifted (two exchanges; on 2-byte vectors, one),
         * its backward only the generic kernel */
        {"",
         "layernorm:f16:300001",
         {"layernorm_fwd_cluster<__half, 300001, true, 8, 1024, 8>: cluster kernel, 8192 threads "
          "per row (over a cluster of 8 blocks), 5 vectors of 16 B per thread, 8% of lanes idle "
          "in the last pass, " LN_SHIFTED ", fwd_bulk: N does not split into 16-byte vectors over "
          "2-8 blocks of <= 16384 B, register path; plan default",
          "layernorm_bwd_generic<__half, true, 1>: generic kernel (512 threads per row, row read "
          "from memory twice); plan default",
          "layernorm_bwd_generic<__half, false, 1>: generic kernel", NULL},
         "one cluster exchange per row"},
        {"row_shift=0",
         "layernorm:f16:300001",
         {"layernorm_fwd_cluster<__half, 300001, true, 1, 1024, 8, 0, 1>: cluster kernel, 8192 "
          "threads per row (over a cluster of 8 blocks), 37 vectors of 2 B per thread, 1% of "
          "lanes idle in the last pass, one cluster exchange per row",
          "layernorm_bwd_generic<__half, true, 1>: generic kernel", NULL, NULL},
         LN_SHIFTED},
        {"",
         "layernorm:f16:1000001",
         {"layernorm_fwd_generic<__half, true, 1>: generic kernel (512 threads per row, row read "
          "from memory twice)",
          "layernorm_bwd_generic<__half, true, 1>: generic kernel", NULL, NULL},
         LN_SHIFTED},
        {"",
         "layernorm:f32:300002",
         {"layernorm_fwd_generic<float, true, 2>: generic kernel",
          "layernorm_bwd_generic<float, true, 2>: generic kernel", NULL, NULL},
         LN_SHIFTED},
        /* short backward rows: under N % VEC + VEC threads a row (the
         * head and tail elements) the widest dividing vector, the forward
         * shifted. 33: 3 body vectors, 1 thread at 128 B; its backward
         * would take 2 threads for 9 elements */
        {"",
         "layernorm:f16:33",
         {"layernorm_fwd<__half, 33, true, 8, 1>: register kernel, 1 threads per row (128 rows "
          "per block), 3 vectors of 16 B per thread, 0% of lanes idle in the last pass, " LN_SHIFTED
          "; plan default",
          "layernorm_bwd<__half, 33, true, 1, 4>: register kernel, 4 threads per row (32 rows per "
          "block), 9 vectors of 2 B per thread, 8% of lanes idle in the last pass, accumulators in "
          "shared memory; plan default",
          "layernorm_bwd<__half, 33, false, 1, 4>: register kernel, 4 threads per row (32 rows per "
          "block), 9 vectors of 2 B per thread, 8% of lanes idle in the last pass; plan default",
          NULL},
         NULL},
        /* 100: 8-byte vectors; shifted it would take 8 threads for 12 */
        {"",
         "layernorm:f16:100",
         {"layernorm_fwd<__half, 100, true, 8, 2>: register kernel, 2 threads per row (64 rows per "
          "block), 6 vectors of 16 B per thread, 8% of lanes idle in the last pass, " LN_SHIFTED
          "; plan default",
          "layernorm_bwd<__half, 100, true, 4, 8>: register kernel, 8 threads per row (16 rows per "
          "block), 4 vectors of 8 B per thread, 22% of lanes idle in the last pass, accumulators "
          "in shared memory; plan default",
          NULL, NULL},
         NULL},
        /* 16-bit rows either side of 8 and 16 threads (at most 15 head and
         * tail elements): 143 (16 body vectors, 8 threads shifted) falls
         * back; 145 (17, 16 threads) and 255 (30, 16 threads for 15) keep
         * the shift, and prefetch (shift_bwd_pf, below) */
        {"",
         "layernorm:f16:143",
         {"layernorm_fwd<__half, 143, true, 8, 2>: register kernel",
          "layernorm_bwd<__half, 143, true, 1, 16>: register kernel, 16 threads per row (8 rows "
          "per block), 9 vectors of 2 B per thread, 1% of lanes idle in the last pass, "
          "accumulators in shared memory; plan default",
          NULL, NULL},
         NULL},
        {"",
         "layernorm:f16:145",
         {"layernorm_bwd<__half, 145, true, 8, 16, true, 1, 0>: register kernel, 16 threads per "
          "row (8 rows per block), 2 vectors of 16 B per thread, 47% of lanes idle in the last "
          "pass, accumulators and gamma in shared memory, " LN_SHIFTED ", next rows prefetched; "
          "plan default",
          NULL, NULL, NULL},
         NULL},
        {"",
         "layernorm:f16:255",
         {"layernorm_fwd<__half, 255, true, 8, 4>: register kernel",
          "layernorm_bwd<__half, 255, true, 8, 16, true, 1, 0>: register kernel, 16 threads per "
          "row (8 rows per block), 2 vectors of 16 B per thread, 6% of lanes idle in the last "
          "pass, accumulators and gamma in shared memory, " LN_SHIFTED ", next rows prefetched; "
          "plan default",
          "layernorm_bwd<__half, 255, false, 8, 16, true, 1, 0>: register kernel", NULL},
         NULL},
        /* float32 either side of 4 and 8 threads (at most 7): 39 (8 body
         * vectors, 4 threads shifted), 41 (9, 8 threads); no shift_bwd_pf */
        {"",
         "layernorm:f32:39",
         {"layernorm_fwd<float, 39, true, 4, 1>: register kernel",
          "layernorm_bwd<float, 39, true, 1, 8>: register kernel, 8 threads per row (16 rows per "
          "block), 5 vectors of 4 B per thread, 3% of lanes idle in the last pass, accumulators in "
          "shared memory; plan default",
          NULL, NULL},
         NULL},
        {"",
         "layernorm:f32:41",
         {"layernorm_bwd<float, 41, true, 4, 8>: register kernel, 8 threads per row (16 rows per "
          "block), 2 vectors of 16 B per thread, 44% of lanes idle in the last pass, accumulators "
          "and gamma in shared memory, " LN_SHIFTED "; plan default",
          NULL, NULL, NULL},
         NULL},
        /* 16385 by default: the copy-engine backward (2047 body vectors
         * over 2 blocks) */
        {"",
         "layernorm:f16:16385",
         {"layernorm_bwd_bulk<__half, 16385, true, 512, 2>: copy-engine cluster kernel",
          "layernorm_fwd<__half, 16385, true, 8, 256>: register kernel", NULL, NULL},
         NULL},
        /* shift_bwd_tpr (16-bit default 512), for the register backward
         * (shift_bwd_bulk=0): a shifted backward the plan would give a
         * block of more threads (704 for 16385) or a cluster takes fitted
         * register clusters of at most 512 a block; 0: off */
        {"shift_bwd_bulk=0",
         "layernorm:f16:16385",
         {"layernorm_bwd_cluster<__half, 16385, true, 8, 512, 2>: cluster kernel, 1024 threads "
          "per row (over a cluster of 2 blocks), 2 vectors of 16 B per thread, 0% of lanes idle in "
          "the last pass, accumulators and gamma in shared memory, " LN_SHIFTED ", bwd_bulk: not "
          "for shifted rows (shift_bwd_bulk=0), register path; plan shift_bwd_bulk=0",
          "layernorm_fwd<__half, 16385, true, 8, 256>: register kernel", NULL, NULL},
         NULL},
        {"shift_bwd_bulk=0,shift_bwd_tpr=0",
         "layernorm:f16:16385",
         {"layernorm_bwd<__half, 16385, true, 8, 704>: register kernel, 704 threads per row (1 "
          "row per block), 3 vectors of 16 B per thread",
          "; plan shift_bwd_tpr=0,shift_bwd_bulk=0\n", NULL, NULL},
         NULL},
        /* shift_bwd_pf (16-bit default 1): a shifted row one block holds
         * prefetches under 8 KiB too (PF named); 0: the kernel's rule */
        {"",
         "layernorm:f16:1001",
         {"layernorm_bwd<__half, 1001, true, 8, 64, true, 1, 0>: register kernel, 64 threads per "
          "row (2 rows per block), 2 vectors of 16 B per thread, 3% of lanes idle in the last "
          "pass, accumulators and gamma in shared memory, " LN_SHIFTED ", next rows prefetched; "
          "plan default",
          "layernorm_bwd<__half, 1001, false, 8, 64, true, 1, 0>: register kernel", NULL, NULL},
         NULL},
        {"shift_bwd_pf=0",
         "layernorm:f16:1001",
         {"layernorm_bwd<__half, 1001, true, 8, 64>: register kernel, 64 threads per row (2 rows "
          "per block), 2 vectors of 16 B per thread, 3% of lanes idle in the last pass, "
          "accumulators and gamma in shared memory, " LN_SHIFTED "; plan shift_bwd_pf=0",
          NULL, NULL, NULL},
         "next rows prefetched"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        expect_case("sm_90", cases[i].plan, cases[i].spec, cases[i].want,
                    sizeof cases[i].want / sizeof cases[i].want[0], cases[i].absent);
}

static void test_bad_rule_is_refused(void **state)
{
    (void)state;
    char *out = NULL;
    assert_int_not_equal(prewarm("fast", "layernorm:f32:1024", &out), 0);
    expect(out, "JITOP_LN_THREADS is 'fast': expected warps or pow2");
    free(out);
}

/* JITOP_LN_PDL is checked by a prewarm as by a call's first use, though a
 * prewarm launches nothing: a typo fails `jitop build` in CI, not the first
 * backward on a GPU. The accepted values pass. */
static char *pdl_before; /* JITOP_LN_PDL as the program found it */
static int pdl_had;

static int save_pdl(void **state)
{
    (void)state;
    const char *v = getenv("JITOP_LN_PDL");
    pdl_had = v != NULL;
    pdl_before = v != NULL ? strdup(v) : NULL;
    return pdl_had && pdl_before == NULL ? -1 : 0;
}

/* The teardown: JITOP_LN_PDL back as it was, also after a failed check, so
 * that the prewarms of the tests after it do not inherit a bad value. */
static int restore_pdl(void **state)
{
    (void)state;
    if (pdl_had)
        (void)setenv("JITOP_LN_PDL", pdl_before, 1);
    else
        (void)unsetenv("JITOP_LN_PDL");
    free(pdl_before);
    pdl_before = NULL;
    return 0;
}

static void test_bad_pdl_setting_is_refused(void **state)
{
    (void)state;
    static const char *const good[] = {"bwd", "1", "fwd", "0"};
    char *out = NULL;
    setenv("JITOP_LN_PDL", "sometimes", 1);
    assert_int_not_equal(prewarm("warps", "layernorm:f32:1024", &out), 0);
    expect(out, "JITOP_LN_PDL is 'sometimes': expected bwd, 1, fwd or 0");
    free(out);
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        setenv("JITOP_LN_PDL", good[i], 1);
        out = prewarm_ok("warps", NULL, "layernorm:f32:1024");
        expect(out, "op layernorm:f32:1024 sm_90 prewarmed");
        free(out);
    }
}

/* A backward register plan keeps its dgamma/dbeta accumulators (and a
 * shifted row's gamma) in shared memory, 8 bytes a column and more: on an
 * arch whose block holds less than the plan needs (99 KiB on sm_86,
 * sm_89 and sm_120, 163 KiB on sm_80, 64 KiB on sm_75) a shifted row takes
 * the narrow vector's plan, and where that is over too the generic kernel,
 * the plan line saying why; a prewarm for that arch names what a call on
 * its GPU picks. Without gamma there are no accumulators: the register
 * plan stays. sm_90's 227 KiB hold them (the plans it is tuned on). */
static void test_block_smem_by_arch(void **state)
{
    (void)state;
    static const struct {
        const char *arch, *spec, *want[2], *absent;
    } cases[] = {
        {"sm_86",
         "layernorm:f16:16384",
         {"layernorm_bwd_generic<__half, true, 8>: generic kernel (512 threads per row, row read "
          "from memory twice), the register kernel's 136192 B of shared memory over a block's "
          "101376 B; plan default",
          "layernorm_bwd<__half, 16384, false, 8, 704>: register kernel"},
         NULL},
        {"sm_86",
         "layernorm:f16:16383",
         {"layernorm_bwd_generic<__half, true, 1>: generic kernel", "over a block's 101376 B"},
         NULL},
        /* sm_120's clusters: the shifted row's copy-engine backward (73,728
         * B of stages and gamma a block) instead of the register plan
         * over 99 KiB */
        {"sm_120",
         "layernorm:f16:12289",
         {"layernorm_bwd_bulk<__half, 12289, true, 512, 2>: copy-engine cluster kernel", NULL},
         "generic"},
        /* sm_120 has clusters and 99 KiB: the copy-engine backward's
         * 2-block share (101,376 B of stages and gamma, and its static
         * bytes) is over, the 4-block one not */
        {"sm_120",
         "layernorm:f16:16896",
         {"layernorm_bwd_bulk<__half, 16896, true, 288, 4>: copy-engine cluster kernel", NULL},
         NULL},
        {"sm_80",
         "layernorm:f16:16383",
         {"layernorm_bwd<__half, 16383, true, 1, 1024>: register kernel, 1024 threads per row (1 "
          "row per block), 16 vectors of 2 B per thread",
          "layernorm_bwd<__half, 16383, false, 8, 704>: register kernel"},
         "generic"},
        {"sm_75",
         "layernorm:f32:8192",
         {"layernorm_bwd_generic<float, true, 4>: generic kernel (512 threads per row, row read "
          "from memory twice), the register kernel's 66560 B of shared memory over a block's "
          "65536 B",
          NULL},
         NULL},
        {"sm_90",
         "layernorm:f32:8192",
         {"layernorm_bwd<float, 8192, true, 4, 1024, true, 1, 0>: register kernel, 1024 threads "
          "per row (1 row per block), 2 vectors of 16 B per thread, 0% of lanes idle in the last "
          "pass, accumulators in shared memory",
          NULL},
         "generic"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        expect_case(cases[i].arch, NULL, cases[i].spec, cases[i].want, 2, cases[i].absent);
}

/* 16-bit rows for sm_75 (real NVRTC, ptxas included): the paired
 * float -> half and float -> bfloat16 converts (cvt.rn.f16x2.f32,
 * cvt.rn.bf16x2.f32, and bfloat16 converts at all) are sm_80's, so below
 * sm_80 the kernels convert element by element (bfloat16 rounded by hand);
 * before, ptxas refused these for sm_75. Register kernels and the generic
 * backward (no clusters, 64 KiB a block on sm_75), rows the 16-byte vector
 * divides and rows it does not (1001, 24577), up to 65536 (a row a block
 * of 1024 threads). A failed compile fails with the CLI's output. */
static void test_sm75_16bit_rows(void **state)
{
    (void)state;
    static const char *const specs[] = {"layernorm:f16:8192", "layernorm:bf16:1001",
                                        "layernorm:bf16:65536", "layernorm:f16:24577"};
    char want[128];
    for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++) {
        char *out = prewarm_arch_ok("sm_75", "warps", NULL, specs[i]);
        snprintf(want, sizeof want, "op %s sm_75 prewarmed", specs[i]);
        expect(out, want);
        free(out);
    }
}

/* Row lengths nobody picked: eight drawn each run (log-uniform over
 * 1-70000, so every residue and every plan's range comes up; the first two
 * under 160, where the small-row rules sit), each dtype, prewarmed in one
 * `jitop build` for sm_90 and one other arch drawn (no clusters and 64 KiB
 * blocks on sm_75, element-by-element 16-bit converts there too; no
 * clusters on sm_80, smaller blocks on sm_86 and sm_120): every instance
 * the plans name for them compiles (real NVRTC) and each plan line names
 * the N asked. The seed is printed: JITOP_TEST_SEED=S draws the same
 * again. */
static void test_random_row_lengths(void **state)
{
    (void)state;
    static const char *const dtypes[3][2] = {
        {"f32", "float"}, {"f16", "__half"}, {"bf16", "__nv_bfloat16"}};
    static const char *const others[] = {"sm_75", "sm_80", "sm_86", "sm_100", "sm_120"};
    const char *other = others[jt_random_u64() % (sizeof others / sizeof others[0])];
    char archs[32];
    snprintf(archs, sizeof archs, "sm_90,%s", other);
    enum { DRAWS = 8 };
    int dt[DRAWS], n[DRAWS];
    char specs[DRAWS * 40] = "", want[256];
    size_t used = 0;
    for (int i = 0; i < DRAWS; i++) {
        double u;
        jt_random_doubles(&u, 1, 0.0, log(i < 2 ? 160.0 : 70000.0));
        dt[i] = (int)(jt_random_u64() % 3);
        n[i] = (int)exp(u);
        if (n[i] < 1)
            n[i] = 1;
        used += (size_t)snprintf(specs + used, sizeof specs - used, "%slayernorm:%s:%d",
                                 i > 0 ? " --op " : "", dtypes[dt[i]][0], n[i]);
        assert_true(used < sizeof specs);
    }
    print_message("drawn: --arch %s --op %s\n", archs, specs);
    char *out = prewarm_arch_ok(archs, "warps", NULL, specs);
    for (int i = 0; i < DRAWS; i++) {
        const char *const *d = dtypes[dt[i]];
        snprintf(want, sizeof want, "layernorm forward %s N=%d: layernorm_fwd", d[1], n[i]);
        expect(out, want);
        snprintf(want, sizeof want, "layernorm backward %s N=%d: layernorm_bwd", d[1], n[i]);
        expect(out, want);
        snprintf(want, sizeof want, "<%s, %d, ", d[1], n[i]);
        expect(out, want);
        snprintf(want, sizeof want, "op layernorm:%s:%d sm_90 prewarmed", d[0], n[i]);
        expect(out, want);
        snprintf(want, sizeof want, "op layernorm:%s:%d %s prewarmed", d[0], n[i], other);
        expect(out, want);
    }
    free(out);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_whole_warps_by_default),
        cmocka_unit_test(test_pow2_rule_for_comparison),
        cmocka_unit_test(test_power_of_two_rows_unchanged),
        cmocka_unit_test(test_bad_rule_is_refused),
        cmocka_unit_test(test_default_plan_named),
        cmocka_unit_test(test_min_blocks_and_prefetch),
        cmocka_unit_test(test_min_blocks_range),
        cmocka_unit_test(test_cluster_fit),
        cmocka_unit_test(test_backward_kernels),
        cmocka_unit_test(test_bad_plan_is_refused),
        cmocka_unit_test(test_plan_parse),
        cmocka_unit_test(test_plan_parse_dtype),
        cmocka_unit_test(test_defaults_by_dtype),
        cmocka_unit_test(test_forward_bulk),
        cmocka_unit_test(test_plan_parse_forward_options),
        cmocka_unit_test(test_forward_long_row_options),
        cmocka_unit_test(test_plan_parse_backward_stages),
        cmocka_unit_test(test_backward_stages),
        cmocka_unit_test(test_plan_parse_backward_shape_fields),
        cmocka_unit_test(test_backward_pf_bytes),
        cmocka_unit_test(test_backward_pf_from),
        cmocka_unit_test(test_backward_bulk_whole_warps),
        cmocka_unit_test(test_forward_bulk_ept),
        cmocka_unit_test(test_plan_parse_row_shift),
        cmocka_unit_test(test_row_shift),
        cmocka_unit_test(test_block_smem_by_arch),
        cmocka_unit_test(test_sm75_16bit_rows),
        cmocka_unit_test_setup_teardown(test_bad_pdl_setting_is_refused, save_pdl, restore_pdl),
        cmocka_unit_test(test_random_row_lengths),
    };
    /* JITOP_TEST_FILTER: only the tests whose names match (cmocka's
     * pattern, * and ?), e.g. test_row_shift */
    const char *filter = getenv("JITOP_TEST_FILTER");
    if (filter != NULL && *filter != '\0')
        cmocka_set_test_filter(filter);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
