/* jitop_layernorm_forward / _backward on a GPU against a float64 CPU
 * reference on fresh random inputs (lnt_check_case, tests/support/lntest.h):
 * a sample of the row lengths of bench/layernorm_bench.py --sweep and of
 * real models' hidden sizes, every kind of plan (test_row_length_sweep),
 * and contexts of an arch below the device's (compute_75, compute_80:
 * test_ctx_arch_below_device).
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
 * every test SKIPs. The program's context reads JITOP_LN_THREADS and
 * JITOP_LN_PLAN when it first uses LayerNorm, so the whole program checks
 * the plan they name:
 *   JITOP_LN_PLAN=fwd_cluster_tpr=256,fwd_fit=1 \
 *   JITOP_TEST_FILTER=test_row_length_sweep build/tests/gpu/test_layernorm_sweep
 * (JITOP_TEST_FILTER: cmocka's pattern of the tests to run, * and ? allowed;
 * JITOP_LN_PLAN=legacy the plan before the per-dtype defaults,
 * JITOP_LN_PLAN=fwd_bulk=1 the forward's copy-engine kernel for long rows). */
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

/* A sample of bench/layernorm_bench.py --sweep's row lengths and hidden
 * sizes of real models, chosen so that every kind of plan is checked: whole
 * warps that are not a power of two (96 to 1024 threads per row, a row
 * group's sums added in warp order), last passes with idle lanes, narrower
 * vectors (N not a multiple of 8), cluster and copy-engine kernels of
 * non-power-of-two blocks. M: enough rows that the backward's persistent
 * blocks each take several, capped so that the float64 CPU reference stays
 * quick; affine on, and off for every other N. */
static void test_row_length_sweep(void **state)
{
    (void)state;
    JT_REQUIRE_GPU();
    lnt_setup_ctx();
    static const struct {
        jitop_dtype dt;
        int n;
    } cases[] = {
        {JITOP_FLOAT32, 1280},  {JITOP_FLOAT32, 2304},  {JITOP_FLOAT32, 4352},
        {JITOP_FLOAT32, 5120},  {JITOP_FLOAT32, 6144},  {JITOP_FLOAT32, 9216},
        {JITOP_FLOAT32, 18432}, {JITOP_FLOAT32, 40960}, {JITOP_FLOAT32, 1600},
        {JITOP_FLOAT32, 12345}, {JITOP_FLOAT16, 1536},  {JITOP_FLOAT16, 2560},
        {JITOP_FLOAT16, 3072},  {JITOP_FLOAT16, 4352},  {JITOP_FLOAT16, 5120},
        {JITOP_FLOAT16, 6144},  {JITOP_FLOAT16, 10240}, {JITOP_FLOAT16, 14336},
        {JITOP_FLOAT16, 20480}, {JITOP_FLOAT16, 40960}, {JITOP_FLOAT16, 7000},
        {JITOP_FLOAT16, 30000}, {JITOP_BFLOAT16, 3072}, {JITOP_BFLOAT16, 5376},
        {JITOP_BFLOAT16, 12288}, {JITOP_BFLOAT16, 49152}, {JITOP_BFLOAT16, 2500},
        /* rows where JITOP_LN_PLAN's candidate plans differ most from the
         * default (bench/layernorm_NOTES.md, run 8), and long rows that are
         * not a power of two */
        {JITOP_FLOAT16, 9216},  {JITOP_FLOAT16, 16384}, {JITOP_FLOAT16, 22528},
        {JITOP_BFLOAT16, 61440}, {JITOP_FLOAT32, 36864}, {JITOP_FLOAT32, 50000},
        {JITOP_BFLOAT16, 45056},
        /* rows the forward's copy-engine kernel takes under fwd_bulk=1 (64
         * KiB and more, over 2 and 4 blocks) */
        {JITOP_FLOAT16, 65536}, {JITOP_FLOAT32, 16384}, {JITOP_BFLOAT16, 32768},
        /* the 16-bit defaults of run 11: the prefetching backward at 48
         * bytes a thread (224-480 threads, a partial last pass at 7936, odd
         * N), the copy-engine backward in whole warps (576 and 640 threads,
         * clusters of 2 and 4), the copy-engine forward at 128 threads over
         * a ragged 8-block share (53248) */
        {JITOP_FLOAT16, 4864},  {JITOP_BFLOAT16, 7936}, {JITOP_FLOAT16, 11264},
        {JITOP_FLOAT16, 4500},  {JITOP_BFLOAT16, 9000}, {JITOP_FLOAT16, 18432},
        {JITOP_BFLOAT16, 36864}, {JITOP_FLOAT16, 53248},
        /* aligned rows whose vectors the cluster does not divide: the
         * copy-engine kernels' ragged shares (40004: 10001 vectors over 8,
         * 49160: 6145, 24584: 3073 over 2 in the backward); the 16-bit
         * backward's blocks of 16 KiB from 112 KiB (61448) */
        {JITOP_FLOAT32, 40004}, {JITOP_FLOAT16, 49160}, {JITOP_BFLOAT16, 24584},
        {JITOP_BFLOAT16, 61448},
        /* the copy-engine forward's thresholds: float32 just over one
         * block of 1024 threads (34816), 16-bit from 72 KiB (36864 above,
         * 38912 with a partial last pass), gamma and beta in registers */
        {JITOP_FLOAT32, 34816}, {JITOP_FLOAT16, 38912},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const int n = cases[i].n;
        int64_t m = (4 << 20) / n;
        m = m < 3 ? 3 : m > 2053 ? 2053 : m;
        lnt_check_case(cases[i].dt, m, n, 1, PLAIN);
        if (i % 2 == 0)
            lnt_check_case(cases[i].dt, m, n, 0, PLAIN);
    }
}

/* A context whose arch is below the device's (cfg.arch compute_75 and
 * compute_80 on an sm_90 GPU) loads PTX for that arch, which the driver
 * compiles (__CUDA_ARCH__ 750 and 800 in the kernels: sm_75's
 * element-by-element 16-bit converts, bfloat16 rounded by hand), and
 * takes that arch's plans (no clusters or copy-engine kernels, 64 KiB and
 * 163 KiB of shared memory a block); before, it took sm_90's cluster plans,
 * which its kernels cannot run. Every dtype, affine on and off, rows the
 * 16-byte vector divides and rows it does not (1001, 12289), up to 65536
 * (without clusters: a block a row, or the generic kernel), each prewarmed
 * first (one compile for its five instances). A driver that refuses the
 * PTX fails the test. */
static void test_ctx_arch_below_device(void **state)
{
    (void)state;
    JT_REQUIRE_GPU();
    lnt_setup_ctx();
    static const char *const archs[] = {"compute_75", "compute_80"};
    static const int ns[] = {1000, 1001, 4096, 12289, 65536};
    const jitop_dtype dts[3] = {JITOP_FLOAT16, JITOP_BFLOAT16, JITOP_FLOAT32};
    for (size_t a = 0; a < sizeof archs / sizeof archs[0]; a++) {
        lnt_use_ctx(lnt_new_ctx(archs[a]));
        const char *arch = NULL;
        OK(jitop_ctx_arch(lnt_ctx, &arch));
        assert_string_equal(arch, archs[a]);
        print_message("context arch %s\n", arch);
        for (int d = 0; d < 3; d++)
            for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++) {
                OK(jitop_layernorm_prewarm(lnt_ctx, NULL, dts[d], ns[i]));
                for (int affine = 1; affine >= 0; affine--)
                    lnt_check_case(dts[d], ns[i] == 65536 ? 8 : 64, ns[i], affine, PLAIN);
            }
    }
    lnt_restore_ctx();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_row_length_sweep),
        cmocka_unit_test_teardown(test_ctx_arch_below_device, lnt_restore_state),
    };
    const char *filter = getenv("JITOP_TEST_FILTER");
    if (filter != NULL && *filter != '\0')
        cmocka_set_test_filter(filter);
    return cmocka_run_group_tests(tests, NULL, lnt_teardown_all);
}
