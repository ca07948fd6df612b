/* The compatibility suite (tests/compat) on a GPU: every case loaded through
 * jitop_load from a fresh cache, launched and checked against a float64 CPU
 * reference on fresh random inputs, one cmocka test per case. The inputs
 * follow from one seed printed at the start (JITOP_COMPAT_SEED=N replays
 * them, and every failure names it). Without a driver every case SKIPs.
 * Case definitions: tests/compat/compat_cases.c; checks and tolerances:
 * tests/compat/cases_*.c. */
#include "testutil.h"

#include "compat.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

static jitop_ctx *g_ctx;
static char *g_kernels, *g_gen;
static uint64_t g_seed;

static void test_case(void **state)
{
    const compat_case *c = *state;
    JT_REQUIRE_GPU();
    compat_run_case(g_ctx, g_kernels, g_gen, (size_t)(c - compat_cases), g_seed);
}

static int setup(void **state)
{
    (void)state; /* left NULL: each test's own state is its case */
    if (!jt_have_gpu())
        return 0;
    char *cache = jt_tmpdir();
    g_gen = jt_tmpdir();
    g_kernels = compat_kernel_dir();
    compat_generate(g_gen);
    g_ctx = jt_ctx_driver(cache);
    free(cache);
    g_seed = compat_base_seed();
    print_message("compat: %zu cases, inputs from JITOP_COMPAT_SEED=%" PRIu64 "\n", compat_ncases,
                  g_seed);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    if (g_ctx)
        compat_finish();
    jitop_ctx_destroy(g_ctx);
    free(g_gen);
    free(g_kernels);
    return 0;
}

int main(void)
{
    struct CMUnitTest *tests = calloc(compat_ncases, sizeof *tests);
    if (!tests)
        return 1;
    for (size_t i = 0; i < compat_ncases; i++)
        tests[i] = (struct CMUnitTest){compat_cases[i].name, test_case, NULL, NULL,
                                       (void *)&compat_cases[i]};
    int rc = _cmocka_run_group_tests("compat_gpu", tests, compat_ncases, setup, teardown);
    free(tests);
    return rc;
}
