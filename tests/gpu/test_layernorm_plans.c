/* jitop_layernorm_forward / _backward on a GPU against a float64 CPU
 * reference on fresh random inputs (lnt_check_case, tests/support/lntest.h)
 * under JITOP_LN_PLAN's options for long rows, each plan in a fresh
 * context: the forward's (one exchange, copy-engine stages, gamma and beta
 * in shared memory, 16-bit register clusters: test_forward_long_row_plans)
 * and the backward's copy-engine stages (test_backward_stage_plans).
 *
 * LayerNorm's GPU tests are four programs, which make test-gpu runs side
 * by side (each test mostly waits on NVRTC, on one thread):
 * test_layernorm.c (the dtypes, in place, unaligned, long and cluster
 * rows, the backward's finite differences, determinism and partial rows,
 * programmatic dependent launch, bad arguments and settings),
 * test_layernorm_sweep.c (a sample of row lengths and hidden sizes;
 * contexts of an arch below the device's), test_layernorm_odd.c (rows the
 * 16-byte vector does not divide) and test_layernorm_plans.c
 * (JITOP_LN_PLAN's long-row options); their helpers are
 * tests/support/lntest.c's.
 *
 * Device memory goes through jitop's driver table, so without libcuda.so.1
 * every test SKIPs. Each plan is set in a context of its own, so
 * JITOP_LN_PLAN in the environment changes nothing here (it is restored
 * after); JITOP_TEST_FILTER: cmocka's pattern of the tests to run, * and ?
 * allowed:
 *   JITOP_TEST_FILTER=test_backward_stage_plans build/tests/gpu/test_layernorm_plans */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdlib.h>

#include "load/driver.h"
#include "jitop.h"
#include "gputest.h"
#include "lntest.h"
#include "testutil.h"

/* The forward's long-row options (JITOP_LN_PLAN fwd_one_sync,
 * fwd_bulk_stages, fwd_bulk_gb; bench/layernorm_NOTES.md, session 15), each
 * plan in a fresh context (the plan is read at a context's first
 * LayerNorm), over long rows of every dtype on the kernels the plan sends
 * them to (tests/cpu/test_ln_plan.c checks which): register clusters with
 * equal and with ragged shares per block (float32 40000: the last block
 * holds fewer vectors), copy-engine clusters with full and partial last
 * passes (16-bit 40000: 625 vectors over 256 threads), 2-4 stages with
 * several rows per cluster (so that every stage's barrier changes parity),
 * rows not a multiple of the grid, in place, and rows of a large common
 * offset (lnt_set_offset: the one-exchange variance is exact). */
static void test_forward_long_row_plans(void **state)
{
    (void)state;
    JT_REQUIRE_GPU();
    lnt_setup_ctx();
    static const ln_plan_rows plans[] = {
        /* the default kernels with one exchange: copy-engine rows, gamma
         * and beta in registers */
        {"fwd_one_sync=1",
         {JITOP_FLOAT32, JITOP_FLOAT32, JITOP_FLOAT32, JITOP_FLOAT32, JITOP_BFLOAT16,
          JITOP_FLOAT16},
         {36864, 40000, 49152, 65536, 65536, 65536}},
        /* copy-engine rows from 48 KiB: one exchange, 3 stages, gamma and
         * beta in shared memory */
        {"fwd_bulk=1,fwd_bulk_bytes=49152,fwd_one_sync=1,fwd_bulk_stages=3,fwd_bulk_gb=1",
         {JITOP_FLOAT16, JITOP_BFLOAT16, JITOP_FLOAT16, JITOP_BFLOAT16, JITOP_FLOAT32,
          JITOP_FLOAT32, JITOP_FLOAT32},
         {24576, 36864, 40000, 49152, 24576, 40000, 65536}},
        /* 4 stages alone, two exchanges */
        {"fwd_bulk=1,fwd_bulk_bytes=49152,fwd_bulk_stages=4",
         {JITOP_BFLOAT16, JITOP_FLOAT16, JITOP_BFLOAT16, JITOP_FLOAT32, JITOP_FLOAT32},
         {24576, 49152, 65536, 36864, 49152}},
        /* gamma and beta in registers at 2 stages, two exchanges, from 48
         * KiB (16-bit 40000: a partial last pass); and from L2 (gb 0) at 3 */
        {"fwd_bulk=1,fwd_bulk_bytes=49152,fwd_bulk_gb=2,fwd_bulk_stages=2,fwd_one_sync=0",
         {JITOP_FLOAT16, JITOP_BFLOAT16, JITOP_FLOAT16, JITOP_FLOAT32, JITOP_FLOAT32},
         {24576, 40000, 65536, 40000, 65536}},
        {"fwd_bulk=1,fwd_bulk_bytes=49152,fwd_bulk_gb=0,fwd_bulk_stages=3",
         {JITOP_BFLOAT16, JITOP_FLOAT16, JITOP_FLOAT32},
         {36864, 57344, 49152}},
        /* 16-bit register clusters (rows over 256 threads) with one exchange */
        {"fwd_one_sync=1,fwd_bulk=0,h16_fwd_max_tpr=256,h16_fwd_cluster_tpr=256,h16_fwd_fit=1",
         {JITOP_FLOAT16, JITOP_BFLOAT16, JITOP_FLOAT16, JITOP_BFLOAT16, JITOP_FLOAT32},
         {24576, 40000, 36864, 49152, 40000}},
    };
    lnt_run_plans(plans, sizeof plans / sizeof plans[0]);
}

/* The backward's copy-engine kernel with 3 and 4 stages of x and dy
 * (JITOP_LN_PLAN bwd_bulk_stages; tests/cpu/test_ln_plan.c checks the
 * instances): 16-bit rows of 24576-65536 (2-8 blocks a row as the stages'
 * shared memory allows), 40000 with a partial last pass (625 vectors a
 * block over 1024 threads; float32: 1250 over 512), float32 rows over a
 * cluster; 601 rows and 37 (fewer rows than stages x clusters: clusters
 * with one row or none, stages never filled), in place, so that every
 * stage's barrier changes parity several times. */
static void test_backward_stage_plans(void **state)
{
    (void)state;
    JT_REQUIRE_GPU();
    lnt_setup_ctx();
    static const ln_plan_rows plans[] = {
        {"bwd_bulk_stages=3",
         {JITOP_FLOAT16, JITOP_BFLOAT16, JITOP_FLOAT16, JITOP_BFLOAT16, JITOP_FLOAT16,
          JITOP_FLOAT32, JITOP_FLOAT32},
         {24576, 32768, 36864, 65536, 40000, 40000, 65536}},
        {"bwd_bulk_stages=4",
         {JITOP_BFLOAT16, JITOP_FLOAT16, JITOP_BFLOAT16, JITOP_FLOAT16, JITOP_BFLOAT16,
          JITOP_FLOAT32, JITOP_FLOAT16},
         {24576, 32768, 36864, 65536, 40000, 36864, 28672}},
    };
    lnt_run_plans(plans, sizeof plans / sizeof plans[0]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_forward_long_row_plans),
        cmocka_unit_test(test_backward_stage_plans),
    };
    const char *filter = getenv("JITOP_TEST_FILTER");
    if (filter != NULL && *filter != '\0')
        cmocka_set_test_filter(filter);
    return cmocka_run_group_tests(tests, NULL, lnt_teardown_all);
}
