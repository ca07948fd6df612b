/* jitop_layernorm_forward / _backward on a GPU against a float64 CPU
 * reference on fresh random inputs (lnt_check_case, tests/support/lntest.h):
 * rows the 16-byte vector does not divide (float32 N % 4 != 0, 16-bit
 * N % 8 != 0), short to long, at every offset within 16 bytes, in place,
 * unaligned, of a large common offset, and under the plans that change
 * how such rows are moved (test_odd_rows).
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
 *   JITOP_TEST_FILTER=test_odd_rows build/tests/gpu/test_layernorm_odd
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

/* Rows for test_odd_rows' full cases of n elements: for rows of up to 8192
 * at least 601, so that the backward's persistent blocks each take several
 * rows, and as many as fit 1 Mi elements up to 4099; longer rows (a block
 * or a cluster a row) 1.5 Mi elements, at least 37. Odd, so never a
 * multiple of the 4 (float32) or 8 rows after which an odd N's rows come
 * back to the same offset within 16 bytes: the last rows are a partial
 * cycle of heads. */
static int64_t odd_rows(int n)
{
    int64_t m = n <= 8192 ? (1 << 20) / n : (3 << 19) / n;
    if (n <= 8192)
        m = m < 601 ? 601 : m > 4099 ? 4099 : m;
    else if (m < 37)
        m = 37;
    return m | 1;
}

/* Rows the 16-byte vector does not divide (float32: N % 4 != 0, 16-bit:
 * N % 8 != 0): every row starts at its own offset within 16 bytes, and the
 * kernels move it as a head of fewer than a vector's elements up to its
 * first 16-byte boundary, whole 16-byte vectors, and a tail, gamma and beta
 * read shifted to match (JITOP_LN_PLAN row_shift=1, the default, where the
 * row tensors share one offset within 16 bytes and gamma and beta are
 * aligned), else the narrow vectors that divide N. Row lengths short to
 * long, each 16-bit one in float16 or bfloat16 (one code path, the element
 * type aside), N = 100 and 2050 with heads of two and four sizes only.
 * Each N:
 * - PLAIN: rows from an aligned base, row 0's head empty, the others' every
 *   size, and
 * - shifted: the row tensors k elements past a 16-byte boundary (k cycles
 *   over 1 to VEC - 1 along the table), gamma and beta aligned, so that row
 *   0 has a head too; in place where INPL,
 * one of the two at odd_rows (FULLP: PLAIN's), the other at 37 rows (5
 * over 8192: fewer rows than blocks or clusters fit the GPU); affine on
 * (AFF) or off, the same for all of an N's cases (one instance each);
 * - UNAL: every buffer one element off (gamma and beta unaligned) and
 *   SPLIT (y and dx one element past x and dy): the narrow-vector fallback;
 * - OFFS: 37 shifted rows of a large common offset (lnt_set_offset), whose
 *   variance must stay exact over head, vectors and tail.
 * Then a few odd N under row_shift=0 (lnt_run_plans, a fresh context): the
 * narrow vectors that path still takes. */
static void test_odd_rows(void **state)
{
    (void)state;
    JT_REQUIRE_GPU();
    lnt_setup_ctx();
    enum { AFF = 1, FULLP = 2, INPL = 4, UNAL = 8, OFFS = 16 };
    static const struct {
        jitop_dtype dt;
        int n, flags;
    } cases[] = {
        {JITOP_FLOAT32, 5, AFF | FULLP},
        {JITOP_FLOAT32, 7, INPL},
        {JITOP_FLOAT32, 31, AFF | UNAL},
        {JITOP_FLOAT32, 255, FULLP},
        {JITOP_FLOAT32, 1001, AFF | OFFS},
        {JITOP_FLOAT32, 3073, AFF | FULLP | INPL},
        {JITOP_FLOAT32, 4099, 0},
        {JITOP_FLOAT32, 9999, FULLP | UNAL},
        {JITOP_FLOAT32, 12345, AFF | INPL},
        {JITOP_FLOAT32, 20001, AFF | FULLP | OFFS},
        {JITOP_FLOAT32, 33333, 0},
        {JITOP_FLOAT16, 9, AFF | FULLP},
        {JITOP_BFLOAT16, 15, 0},
        {JITOP_FLOAT16, 17, FULLP | INPL},
        {JITOP_BFLOAT16, 33, AFF},
        {JITOP_FLOAT16, 100, AFF | FULLP},
        {JITOP_BFLOAT16, 129, INPL},
        {JITOP_FLOAT16, 255, AFF},
        {JITOP_BFLOAT16, 257, FULLP | OFFS},
        {JITOP_FLOAT16, 1001, AFF | FULLP | UNAL},
        {JITOP_BFLOAT16, 1023, AFF | INPL},
        {JITOP_FLOAT16, 1025, 0},
        {JITOP_BFLOAT16, 2050, FULLP},
        {JITOP_FLOAT16, 3071, AFF | INPL | OFFS},
        {JITOP_BFLOAT16, 4097, AFF | FULLP | UNAL},
        {JITOP_FLOAT16, 5001, 0},
        {JITOP_BFLOAT16, 8191, FULLP | INPL},
        {JITOP_FLOAT16, 12289, AFF | FULLP},
        {JITOP_BFLOAT16, 16383, AFF | OFFS},
        {JITOP_FLOAT16, 20001, FULLP | INPL},
        {JITOP_BFLOAT16, 33333, 0},
        {JITOP_FLOAT16, 40001, AFF},
        {JITOP_BFLOAT16, 65535, AFF | FULLP | OFFS},
        /* the copy-engine forward's shifted rows (16-bit from 56 KiB,
         * float32 from 112 KiB): ragged 8-block shares of the body (49157,
         * 36867, 65535: 8190 vectors), even ones (49161: 6144 vectors, 768
         * a block of 128 threads, every lane busy; 36869: 9216); their
         * backward (and 9999's up) the copy-engine kernel too, each
         * cluster's rows at one head */
        {JITOP_FLOAT32, 36867, AFF | FULLP | INPL},
        {JITOP_FLOAT16, 49157, AFF | INPL | UNAL},
        {JITOP_FLOAT32, 65535, FULLP},
        {JITOP_BFLOAT16, 50001, AFF | OFFS},
        {JITOP_FLOAT16, 49161, AFF | FULLP},
        {JITOP_FLOAT32, 36869, INPL},
        /* just over those thresholds (16-bit 28673 over 4 blocks, float32
         * 28673), and a float32 backward one register block would hold
         * (16385: the copy-engine backward from 64 KiB) */
        {JITOP_FLOAT16, 28673, AFF | FULLP},
        {JITOP_FLOAT32, 28673, AFF | INPL},
        {JITOP_FLOAT32, 16385, AFF | FULLP | OFFS},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const jitop_dtype dt = cases[i].dt;
        const int n = cases[i].n, f = cases[i].flags, affine = (f & AFF) != 0;
        const int vec = (int)(16 / jitop_dtype_size(dt)), k = 1 + (int)(i % (size_t)(vec - 1));
        const int64_t full = odd_rows(n), few = n <= 8192 ? 37 : 5;
        lnt_check_case_at(dt, (f & FULLP) ? full : few, n, affine, PLAIN, 0);
        lnt_check_case_at(dt, (f & FULLP) ? few : full, n, affine, (f & INPL) ? INPLACE : PLAIN, k);
        if (f & UNAL) {
            lnt_check_case(dt, n <= 8192 ? 601 : 37, n, affine, UNALIGNED);
            lnt_check_case_at(dt, 37, n, affine, SPLIT, k);
        }
        if (f & OFFS) {
            lnt_set_offset(dt);
            lnt_check_case_at(dt, 37, n, affine, PLAIN, k);
            lnt_x_offset = 0.0f;
        }
    }
    static const ln_plan_rows plans[] = {
        {"row_shift=0", {JITOP_FLOAT16, JITOP_BFLOAT16, JITOP_FLOAT32}, {1001, 3071, 255}},
        /* the shifted copy-engine forward's other template options: two
         * and four stages, gamma and beta from L2, two exchanges; a
         * cluster of 4 with a ragged share (16-bit 65535 at 32 KiB a
         * block: 8190 body vectors over 4) */
        {"shift_fwd_stages=2,fwd_bulk_gb=0,fwd_one_sync=0",
         {JITOP_FLOAT16, JITOP_FLOAT32, JITOP_BFLOAT16},
         {49153, 40003, 65533}},
        {"shift_fwd_stages=4", {JITOP_BFLOAT16, JITOP_FLOAT32}, {57345, 49155}},
        {"fwd_bulk_chunk=32768", {JITOP_FLOAT16, JITOP_BFLOAT16}, {65535, 49155}},
        /* the register backward the copy-engine kernel took these from
         * (fitted clusters of 512, a block, clusters of 1024) */
        {"shift_bwd_bulk=0", {JITOP_FLOAT16, JITOP_FLOAT32, JITOP_BFLOAT16}, {16385, 12345, 40001}},
    };
    lnt_run_plans(plans, sizeof plans / sizeof plans[0]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_odd_rows),
    };
    const char *filter = getenv("JITOP_TEST_FILTER");
    if (filter != NULL && *filter != '\0')
        cmocka_set_test_filter(filter);
    return cmocka_run_group_tests(tests, NULL, lnt_teardown_all);
}
