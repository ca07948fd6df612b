/* LayerNorm's plan for a row length, as JITOP_VERBOSE names it (the CLI's
 * prewarm logs the instance and the split of the row for each pass): the
 * default threads-per-row rule takes whole warps, so that a row like 4352
 * 16-bit elements leaves few lanes idle; JITOP_LN_THREADS=pow2 gives the
 * power-of-two rule for comparison; a bad value is refused by name. Each
 * case compiles kernels/layernorm.cu with real NVRTC for sm_90 (no GPU). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

/* Runs `jitop build --op SPEC` with JITOP_VERBOSE=1 in a cache of its own;
 * returns the exit status, *out its output. */
static int prewarm(const char *rule, const char *spec, char **out)
{
    char *dir = jt_tmpdir(), cmd[8192];
    snprintf(cmd, sizeof cmd,
             "JITOP_VERBOSE=1 JITOP_LN_THREADS='%s' JITOP_CACHE_DIR='%s/cache' '%s' build "
             "--arch sm_90 --op %s",
             rule, dir, jt_cli(), spec);
    free(dir);
    return jt_run(cmd, out);
}

static void expect(const char *out, const char *what)
{
    if (!strstr(out, what))
        fail_msg("expected \"%s\" in:\n%s", what, out);
}

static void test_whole_warps_by_default(void **state)
{
    (void)state;
    char *out = NULL;
    assert_int_equal(prewarm("warps", "layernorm:f16:4352", &out), 0);
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
    assert_int_equal(prewarm("pow2", "layernorm:f16:4352", &out), 0);
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
    char *out = NULL;
    assert_int_equal(prewarm("warps", "layernorm:f32:1024", &out), 0);
    expect(out, "layernorm_fwd<float, 1024, true, 4, 32>: register kernel, 32 threads per row "
                "(4 rows per block), 8 vectors of 16 B per thread, 0% of lanes idle");
    expect(out, "layernorm_bwd<float, 1024, true, 4, 128>: register kernel, 128 threads per row "
                "(1 row per block), 2 vectors of 16 B per thread, 0% of lanes idle");
    free(out);
}

static void test_bad_rule_is_refused(void **state)
{
    (void)state;
    char *out = NULL;
    assert_int_not_equal(prewarm("fast", "layernorm:f32:1024", &out), 0);
    expect(out, "JITOP_LN_THREADS is 'fast': expected warps or pow2");
    free(out);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_whole_warps_by_default),
        cmocka_unit_test(test_pow2_rule_for_comparison),
        cmocka_unit_test(test_power_of_two_rows_unchanged),
        cmocka_unit_test(test_bad_rule_is_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
