/* jitop_layernorm_forward / _backward on a GPU against a float64 CPU
 * reference on fresh random inputs: every dtype, affine on and off, the row
 * lengths of issue 4 (1 to 65536, plus one past the specialized kernels),
 * M = 1, 3 and 1030 (64 for rows over 4096, to keep the CPU reference
 * quick; 200-300 where a cluster takes a row, so that each takes several),
 * in place, unaligned pointers; outputs poisoned with NaN before each run.
 * The backward is also checked against float64 finite differences of the
 * reference loss, and for determinism; calls chained without
 * synchronization under programmatic dependent launch, the same bits under
 * every JITOP_LN_PDL, the backward's partial rows reused after their L2
 * discard, and bad arguments, JITOP_LN_PDL and arch settings.
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
 * every test SKIPs (those that need no GPU run). The program's context
 * reads JITOP_LN_THREADS and JITOP_LN_PLAN when it first uses LayerNorm,
 * so the whole program checks the plan they name:
 *   JITOP_LN_PLAN=fwd_cluster_tpr=256,fwd_fit=1 \
 *   JITOP_TEST_FILTER=test_f32 build/tests/gpu/test_layernorm
 * (JITOP_TEST_FILTER: cmocka's pattern of the tests to run, * and ? allowed;
 * JITOP_LN_PLAN=legacy the plan before the per-dtype defaults,
 * JITOP_LN_PLAN=fwd_bulk=1 the forward's copy-engine kernel for long rows). */
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
#include "lntest.h"
#include "testutil.h"

static const int NS[] = {1, 7, 32, 33, 768, 1000, 1024, 4096, 8192, 12288, 32768, 65536};

/* Every N of issue 4 at M = 1, 3 and a larger M (1030 rows for short rows,
 * 64 for long ones, to keep the CPU reference fast), affine on and off. */
static void sweep(jitop_dtype dt)
{
    JT_REQUIRE_GPU();
    lnt_setup_ctx();
    for (size_t i = 0; i < sizeof NS / sizeof NS[0]; i++) {
        const int64_t ms[3] = {1, 3, NS[i] <= 4096 ? 1030 : 64};
        for (int k = 0; k < 3; k++)
            for (int affine = 1; affine >= 0; affine--)
                lnt_check_case(dt, ms[k], NS[i], affine, PLAIN);
    }
}

static void test_f32(void **state)
{
    (void)state;
    sweep(JITOP_FLOAT32);
}

static void test_f16(void **state)
{
    (void)state;
    sweep(JITOP_FLOAT16);
}

static void test_bf16(void **state)
{
    (void)state;
    sweep(JITOP_BFLOAT16);
}

/* y == x and dx == dy, and pointers one element off 16-byte alignment
 * (narrower loads), every dtype. */
static void test_inplace_unaligned(void **state)
{
    (void)state;
    JT_REQUIRE_GPU();
    lnt_setup_ctx();
    static const int ns[] = {7, 33, 1000, 4096, 65536};
    const jitop_dtype dts[3] = {JITOP_FLOAT32, JITOP_FLOAT16, JITOP_BFLOAT16};
    for (int d = 0; d < 3; d++)
        for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++)
            for (int affine = 0; affine < 2; affine++) {
                lnt_check_case(dts[d], 3, ns[i], affine, INPLACE);
                lnt_check_case(dts[d], 3, ns[i], affine, UNALIGNED);
            }
}

/* Rows too long for the register-resident kernels take the generic one. */
static void test_long_rows(void **state)
{
    (void)state;
    JT_REQUIRE_GPU();
    lnt_setup_ctx();
    lnt_check_case(JITOP_FLOAT32, 2, 300007, 1, PLAIN);
    lnt_check_case(JITOP_BFLOAT16, 3, 131072, 1, PLAIN);
    lnt_check_case(JITOP_FLOAT16, 2, 300000, 0, UNALIGNED);
}

/* Rows that need a cluster, with several rows per cluster (the grid holds
 * as many clusters as fit the GPU, 30-66 on an H100), so that the backward's
 * two copy-engine stages and the clusters' exchange buffers are reused and
 * their barriers change parity; N that leave some threads of a block
 * without a vector (24576 and 20480), in place too. */
static void test_cluster_rows_reused(void **state)
{
    (void)state;
    JT_REQUIRE_GPU();
    lnt_setup_ctx();
    lnt_check_case(JITOP_FLOAT16, 300, 32768, 1, PLAIN);
    lnt_check_case(JITOP_BFLOAT16, 300, 24576, 1, INPLACE);
    lnt_check_case(JITOP_FLOAT32, 300, 20480, 1, PLAIN);
    lnt_check_case(JITOP_FLOAT32, 200, 32768, 0, PLAIN);
    /* several rows per cluster for rows over 4 and 8 blocks too (the
     * forward's copy-engine kernel under fwd_bulk=1), in place */
    lnt_check_case(JITOP_BFLOAT16, 256, 65536, 1, INPLACE);
    lnt_check_case(JITOP_FLOAT32, 256, 36864, 1, PLAIN);
}

/* L = sum(y * w) for a fixed w, in float64. */
static double ref_loss(const double *x, const double *g, const double *b, const double *w,
                       int64_t m, int n)
{
    double *mu = malloc(m * sizeof *mu), *rs = malloc(m * sizeof *rs), l = 0;
    assert_true(mu && rs);
    lnt_ref_stats(x, m, n, mu, rs);
    for (int64_t r = 0; r < m; r++)
        for (int c = 0; c < n; c++)
            l += ((x[r * n + c] - mu[r]) * rs[r] * g[c] + b[c]) * w[r * n + c];
    free(mu);
    free(rs);
    return l;
}

/* The backward against central finite differences of the float64 loss
 * sum(y * dy) (float32, a few rows), which checks the formula itself and
 * not only our transcription of it. */
static void test_backward_finite_differences(void **state)
{
    (void)state;
    JT_REQUIRE_GPU();
    lnt_setup_ctx();
    const int64_t m = 3;
    const int n = 37;
    const size_t total = (size_t)m * n;
    float hx[3 * 37], hw[3 * 37], hg[37], hb[37], out[3 * 37], og[37], ob[37];
    double x[3 * 37], w[3 * 37], g[37], b[37], fdx[3 * 37], fdg[37], fdb[37];
    double gx[3 * 37], ggd[37], gbd[37];
    jt_random_floats(hx, total, -2.0f, 3.0f);
    jt_random_floats(hw, total, -1.0f, 1.0f);
    jt_random_floats(hg, n, 0.5f, 1.5f);
    jt_random_floats(hb, n, -1.0f, 1.0f);
    for (size_t i = 0; i < total; i++) {
        x[i] = hx[i];
        w[i] = hw[i];
    }
    for (int i = 0; i < n; i++) {
        g[i] = hg[i];
        b[i] = hb[i];
    }
    const double h = 1e-5;
    for (size_t i = 0; i < total; i++) {
        double s = x[i];
        x[i] = s + h;
        double lp = ref_loss(x, g, b, w, m, n);
        x[i] = s - h;
        double lm = ref_loss(x, g, b, w, m, n);
        x[i] = s;
        fdx[i] = (lp - lm) / (2 * h);
    }
    for (int i = 0; i < n; i++) {
        double s = g[i];
        g[i] = s + h;
        double lp = ref_loss(x, g, b, w, m, n);
        g[i] = s - h;
        double lm = ref_loss(x, g, b, w, m, n);
        g[i] = s;
        fdg[i] = (lp - lm) / (2 * h);
        s = b[i];
        b[i] = s + h;
        lp = ref_loss(x, g, b, w, m, n);
        b[i] = s - h;
        lm = ref_loss(x, g, b, w, m, n);
        b[i] = s;
        fdb[i] = (lp - lm) / (2 * h);
    }
    dbuf dx_ = lnt_dalloc(total * 4, 0), dw = lnt_dalloc(total * 4, 0), dg = lnt_dalloc(n * 4, 0),
         db = lnt_dalloc(n * 4, 0), dy = lnt_dalloc(total * 4, 0), dmean = lnt_dalloc(m * 4, 0),
         drstd = lnt_dalloc(m * 4, 0), dgx = lnt_dalloc(total * 4, 0), dgg = lnt_dalloc(n * 4, 0),
         dgb = lnt_dalloc(n * 4, 0);
    CU(lnt_cu->cuMemcpyHtoD(dx_.p, hx, total * 4));
    CU(lnt_cu->cuMemcpyHtoD(dw.p, hw, total * 4));
    CU(lnt_cu->cuMemcpyHtoD(dg.p, hg, n * 4));
    CU(lnt_cu->cuMemcpyHtoD(db.p, hb, n * 4));
    lnt_poison(dgx);
    lnt_poison(dgg);
    lnt_poison(dgb);
    OK(jitop_layernorm_forward(lnt_ctx, JITOP_FLOAT32, m, n, EPS, lnt_ptr(dx_), lnt_ptr(dg),
                               lnt_ptr(db), lnt_ptr(dy), (float *)lnt_ptr(dmean),
                               (float *)lnt_ptr(drstd), NULL));
    OK(jitop_layernorm_backward(lnt_ctx, JITOP_FLOAT32, m, n, lnt_ptr(dw), lnt_ptr(dx_),
                                lnt_ptr(dg), (const float *)lnt_ptr(dmean),
                                (const float *)lnt_ptr(drstd), lnt_ptr(dgx), lnt_ptr(dgg),
                                lnt_ptr(dgb), NULL));
    CU(lnt_cu->cuCtxSynchronize());
    CU(lnt_cu->cuMemcpyDtoH(out, dgx.p, total * 4));
    CU(lnt_cu->cuMemcpyDtoH(og, dgg.p, n * 4));
    CU(lnt_cu->cuMemcpyDtoH(ob, dgb.p, n * 4));
    for (size_t i = 0; i < total; i++)
        gx[i] = out[i];
    for (int i = 0; i < n; i++) {
        ggd[i] = og[i];
        gbd[i] = ob[i];
    }
    double ex = jt_rel_error(gx, fdx, total), eg = jt_rel_error(ggd, fdg, n),
           eb = jt_rel_error(gbd, fdb, n);
    if (!(ex < 1e-4 && eg < 1e-4 && eb < 1e-4))
        fail_msg("finite differences: rel err dx %.2e dgamma %.2e dbeta %.2e", ex, eg, eb);
    dbuf all[] = {dx_, dw, dg, db, dy, dmean, drstd, dgx, dgg, dgb};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        lnt_dfree(&all[i]);
}

/* dgamma/dbeta are reduced in a fixed order: two runs give the same bits. */
static void test_backward_deterministic(void **state)
{
    (void)state;
    JT_REQUIRE_GPU();
    lnt_setup_ctx();
    const int64_t m = 5000;
    const int n = 1024;
    const size_t total = (size_t)m * n;
    float *h = malloc(total * 4), *r1 = malloc(n * 4), *r2 = malloc(n * 4);
    assert_true(h && r1 && r2);
    dbuf x = lnt_dalloc(total * 4, 0), dy = lnt_dalloc(total * 4, 0), g = lnt_dalloc(n * 4, 0),
         y = lnt_dalloc(total * 4, 0), mean = lnt_dalloc(m * 4, 0), rstd = lnt_dalloc(m * 4, 0),
         dx = lnt_dalloc(total * 4, 0), dg = lnt_dalloc(n * 4, 0);
    jt_random_floats(h, total, -1.0f, 2.0f);
    CU(lnt_cu->cuMemcpyHtoD(x.p, h, total * 4));
    jt_random_floats(h, total, -1.0f, 1.0f);
    CU(lnt_cu->cuMemcpyHtoD(dy.p, h, total * 4));
    jt_random_floats(h, n, 0.5f, 1.5f);
    CU(lnt_cu->cuMemcpyHtoD(g.p, h, n * 4));
    OK(jitop_layernorm_forward(lnt_ctx, JITOP_FLOAT32, m, n, EPS, lnt_ptr(x), lnt_ptr(g), NULL,
                               lnt_ptr(y), (float *)lnt_ptr(mean), (float *)lnt_ptr(rstd), NULL));
    for (int run = 0; run < 2; run++) {
        lnt_poison(dg);
        OK(jitop_layernorm_backward(lnt_ctx, JITOP_FLOAT32, m, n, lnt_ptr(dy), lnt_ptr(x),
                                    lnt_ptr(g), (const float *)lnt_ptr(mean),
                                    (const float *)lnt_ptr(rstd), lnt_ptr(dx), lnt_ptr(dg), NULL,
                                    NULL));
        CU(lnt_cu->cuCtxSynchronize());
        CU(lnt_cu->cuMemcpyDtoH(run ? r2 : r1, dg.p, n * 4));
    }
    assert_memory_equal(r1, r2, n * 4);
    for (int i = 0; i < n; i++)
        assert_false(isnan(r1[i]));
    dbuf all[] = {x, dy, g, y, mean, rstd, dx, dg};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        lnt_dfree(&all[i]);
    free(h);
    free(r1);
    free(r2);
}

/* A compile-only context (no driver) in a cache of its own (*dir, to free
 * after the context), compiling for arch (NULL: none named): for the
 * checks made before any launch, which need no GPU. */
static jitop_ctx *compile_only_ctx(const char *arch, char **dir)
{
    jitop_config cfg;
    jitop_config_init(&cfg);
    cfg.compile_only = 1;
    cfg.arch = arch;
    *dir = jt_tmpdir();
    cfg.cache_dir = *dir;
    jitop_ctx *c = NULL;
    OK(jitop_ctx_create(&cfg, &c));
    return c;
}

/* Bad arguments fail with JITOP_EINVAL naming the argument, before any
 * launch (these need no GPU: they are checked first). */
static void test_argument_errors(void **state)
{
    (void)state;
    char *dir = NULL;
    jitop_ctx *c = compile_only_ctx(NULL, &dir);
    float dummy[4];
    struct {
        int rc;
        const char *word;
    } cases[] = {
        {jitop_layernorm_forward(c, JITOP_FLOAT32, 4, 0, EPS, dummy, NULL, NULL, dummy, NULL,
                                 NULL, NULL),
         "cols"},
        {jitop_layernorm_forward(c, JITOP_FLOAT32, 0, 4, EPS, dummy, NULL, NULL, dummy, NULL,
                                 NULL, NULL),
         "rows"},
        {jitop_layernorm_forward(c, JITOP_FLOAT32, 4, 4, EPS, NULL, NULL, NULL, dummy, NULL, NULL,
                                 NULL),
         "x is NULL"},
        {jitop_layernorm_forward(c, JITOP_FLOAT32, 4, 4, EPS, dummy, NULL, NULL, NULL, NULL, NULL,
                                 NULL),
         "y is NULL"},
        {jitop_layernorm_forward(c, JITOP_FLOAT64, 4, 4, EPS, dummy, NULL, NULL, dummy, NULL,
                                 NULL, NULL),
         "dtype"},
        {jitop_layernorm_forward(c, JITOP_FLOAT32, 4, 4, -1.0f, dummy, NULL, NULL, dummy, NULL,
                                 NULL, NULL),
         "eps"},
        {jitop_layernorm_backward(c, JITOP_FLOAT32, 4, 4, dummy, dummy, NULL, NULL, dummy, dummy,
                                  NULL, NULL, NULL),
         "mean"},
        {jitop_layernorm_backward(c, JITOP_FLOAT32, 4, 4, NULL, dummy, NULL, dummy, dummy, dummy,
                                  NULL, NULL, NULL),
         "dy is NULL"},
        {jitop_layernorm_backward(c, JITOP_FLOAT32, 4, 4, dummy, dummy, NULL, dummy, dummy, NULL,
                                  NULL, NULL, NULL),
         "dx is NULL"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        assert_int_equal(cases[i].rc, JITOP_EINVAL);
    /* the message of the last failure names its argument */
    assert_non_null(strstr(jitop_errmsg(NULL), "dx is NULL"));
    int rc = jitop_layernorm_forward(c, JITOP_FLOAT32, 4, -3, EPS, dummy, NULL, NULL, dummy, NULL,
                                     NULL, NULL);
    assert_int_equal(rc, JITOP_EINVAL);
    assert_non_null(strstr(jitop_errmsg(NULL), "cols"));
    /* valid arguments in a context that may not open the driver: the load
     * fails cleanly, nothing is launched */
    rc = jitop_layernorm_forward(c, JITOP_FLOAT32, 4, 4, EPS, dummy, NULL, NULL, dummy, NULL,
                                 NULL, NULL);
    assert_int_equal(rc, JITOP_ENODRIVER);
    jitop_ctx_destroy(c);
    free(dir);
}

/* A backward's dx, dgamma and dbeta on the device (ddx, ddg, ddb) against
 * float64 from dy, x, gamma and the statistics: their relative errors in
 * e[0..2]; dx read back into got; want, wg, wb, gg, gb: scratch (total,
 * n, n, n, n values). */
static void backward_errors(jitop_dtype dt, const double *dy, const double *x, const double *g,
                            const double *mu, const double *rs, int64_t m, int n, dbuf ddx,
                            dbuf ddg, dbuf ddb, double *got, double *want, double *wg, double *wb,
                            double *gg, double *gb, double e[3])
{
    const size_t total = (size_t)m * (size_t)n;
    lnt_ref_backward(dy, x, g, mu, rs, m, n, want, wg, wb);
    lnt_fetch(dt, ddx, total, got);
    lnt_fetch(dt, ddg, (size_t)n, gg);
    lnt_fetch(dt, ddb, (size_t)n, gb);
    e[0] = jt_rel_error(got, want, total);
    e[1] = jt_rel_error(gg, wg, (size_t)n);
    e[2] = jt_rel_error(gb, wb, (size_t)n);
}

/* One forward and two backwards chained through device memory on stream,
 * with no synchronization between the calls: backward #1 takes the
 * forward's y as dy, backward #2 takes backward #1's dx, written two grids
 * before it (the backward's kernel, then its dgamma/dbeta reduction).
 * Under programmatic dependent launch (sm_90: the backward's kernels by
 * default) a grid starts while the one before it ends, and must wait for
 * its writes before it reads; a read too early sees the NaN poison or a
 * partial row. Checked once, after one synchronization at the end: each
 * stage against float64 from that stage's actual inputs as the device
 * holds them (y, then dx1, rounded to dt), so that 16-bit rounding of one
 * stage does not carry into the next one's check. Affine. */
static void check_chain(jitop_dtype dt, int64_t m, int n, CUstream stream)
{
    const size_t es = jitop_dtype_size(dt), total = (size_t)m * (size_t)n;
    void *hx = malloc(total * es), *hg = malloc(n * es), *hb = malloc(n * es);
    double *x = malloc(total * sizeof *x), *y = malloc(total * sizeof *y),
           *dx1 = malloc(total * sizeof *dx1), *want = malloc(total * sizeof *want),
           *g = malloc(n * sizeof *g), *b = malloc(n * sizeof *b), *wg = malloc(n * sizeof *wg),
           *wb = malloc(n * sizeof *wb), *gg = malloc(n * sizeof *gg),
           *gb = malloc(n * sizeof *gb), *mu = malloc(m * sizeof *mu),
           *rs = malloc(m * sizeof *rs), *fm = malloc(m * sizeof *fm),
           *fr = malloc(m * sizeof *fr);
    assert_true(hx && hg && hb && x && y && dx1 && want && g && b && wg && wb && gg && gb && mu &&
                rs && fm && fr);
    lnt_draw_x(dt, hx, x, total);
    lnt_draw(dt, hg, g, n, 0.5f, 1.5f);
    lnt_draw(dt, hb, b, n, -1.0f, 1.0f);
    dbuf dX = lnt_upload(hx, total * es), dG = lnt_upload(hg, n * es), dB = lnt_upload(hb, n * es);
    dbuf out[9] = {lnt_dalloc(total * es, 0), lnt_dalloc(m * 4, 0),   lnt_dalloc(m * 4, 0),
                   lnt_dalloc(total * es, 0), lnt_dalloc(n * es, 0),  lnt_dalloc(n * es, 0),
                   lnt_dalloc(total * es, 0), lnt_dalloc(n * es, 0),  lnt_dalloc(n * es, 0)};
    const dbuf dY = out[0], dmean = out[1], drstd = out[2], ddx1 = out[3], ddg1 = out[4],
               ddb1 = out[5], ddx2 = out[6], ddg2 = out[7], ddb2 = out[8];
    for (int i = 0; i < 9; i++)
        lnt_poison(out[i]);
    /* the copies and the poison went to the legacy stream, which a
     * non-blocking stream does not wait for */
    CU(lnt_cu->cuCtxSynchronize());
    OK(jitop_layernorm_forward(lnt_ctx, dt, m, n, EPS, lnt_ptr(dX), lnt_ptr(dG), lnt_ptr(dB),
                               lnt_ptr(dY), (float *)lnt_ptr(dmean), (float *)lnt_ptr(drstd),
                               stream));
    OK(jitop_layernorm_backward(lnt_ctx, dt, m, n, lnt_ptr(dY), lnt_ptr(dX), lnt_ptr(dG),
                                (const float *)lnt_ptr(dmean), (const float *)lnt_ptr(drstd),
                                lnt_ptr(ddx1), lnt_ptr(ddg1), lnt_ptr(ddb1), stream));
    OK(jitop_layernorm_backward(lnt_ctx, dt, m, n, lnt_ptr(ddx1), lnt_ptr(dX), lnt_ptr(dG),
                                (const float *)lnt_ptr(dmean), (const float *)lnt_ptr(drstd),
                                lnt_ptr(ddx2), lnt_ptr(ddg2), lnt_ptr(ddb2), stream));
    CU(lnt_cu->cuCtxSynchronize());

    /* the forward */
    lnt_ref_forward(x, g, b, m, n, mu, rs, want);
    lnt_fetch(dt, dY, total, y);
    lnt_fetch(JITOP_FLOAT32, dmean, (size_t)m, fm);
    lnt_fetch(JITOP_FLOAT32, drstd, (size_t)m, fr);
    const double e_y = jt_rel_error(y, want, total), e_mu = lnt_mean_error(fm, mu, x, m, n),
                 e_rs = jt_rel_error(fr, rs, (size_t)m);
    /* backward #1, dy = y as stored */
    double e1[3], e2[3];
    backward_errors(dt, y, x, g, mu, rs, m, n, ddx1, ddg1, ddb1, dx1, want, wg, wb, gg, gb, e1);
    /* backward #2, dy = dx1 as stored (y's buffer takes dx2) */
    backward_errors(dt, dx1, x, g, mu, rs, m, n, ddx2, ddg2, ddb2, y, want, wg, wb, gg, gb, e2);
    const double t = lnt_tol(dt);
    if (!(e_y < t && e_mu < 1e-5 && e_rs < 1e-5 && e1[0] < t && e1[1] < t && e1[2] < t &&
          e2[0] < t && e2[1] < t && e2[2] < t))
        fail_msg("chain %s M=%lld N=%d on %s stream: rel err y %.2e mean %.2e rstd %.2e; "
                 "backward #1 (dy = y) dx %.2e dgamma %.2e dbeta %.2e; backward #2 (dy = dx1) "
                 "dx %.2e dgamma %.2e dbeta %.2e (tolerance %.0e)",
                 jt_dname(dt), (long long)m, n, stream ? "a created" : "the legacy", e_y, e_mu,
                 e_rs, e1[0], e1[1], e1[2], e2[0], e2[1], e2[2], t);
    for (int i = 0; i < 9; i++)
        lnt_dfree(&out[i]);
    lnt_dfree(&dX);
    lnt_dfree(&dG);
    lnt_dfree(&dB);
    free(hx), free(hg), free(hb), free(x), free(y), free(dx1), free(want), free(g), free(b);
    free(wg), free(wb), free(gg), free(gb), free(mu), free(rs), free(fm), free(fr);
}

/* The programmatic-launch tests' shapes: float32 N=1024 (register
 * kernel), float16 N=65536 (sm_90: the copy-engine cluster kernels),
 * bfloat16 N=6145 (rows the 16-byte vector does not divide). */
static const struct {
    jitop_dtype dt;
    int64_t m;
    int n;
} PDL_CASES[] = {
    {JITOP_FLOAT32, 1030, 1024},
    {JITOP_FLOAT16, 64, 65536},
    {JITOP_BFLOAT16, 601, 6145},
};

/* check_chain on the program's context (JITOP_LN_PDL unset: the backward's
 * two kernels under programmatic dependent launch), on the legacy stream
 * and on a stream of its own: float32 N=1024 (register kernel), float16
 * N=65536 (sm_90: the copy-engine cluster kernels), bfloat16 N=6145 (rows
 * the 16-byte vector does not divide). */
static void test_programmatic_chain(void **state)
{
    (void)state;
    JT_REQUIRE_GPU();
    lnt_setup_ctx();
    CUstream stream = NULL;
    CU(lnt_cu->cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
    for (size_t i = 0; i < sizeof PDL_CASES / sizeof PDL_CASES[0]; i++) {
        check_chain(PDL_CASES[i].dt, PDL_CASES[i].m, PDL_CASES[i].n, NULL);
        check_chain(PDL_CASES[i].dt, PDL_CASES[i].m, PDL_CASES[i].n, stream);
    }
    CU(lnt_cu->cuStreamDestroy(stream));
}

/* A producer that lets the grid behind it start at once
 * (griddepcontrol.launch_dependents first), then spins ~200 us before it
 * copies src to dst: a LayerNorm pass launched behind it with programmatic
 * launch has its blocks scheduled while it spins, so it reads dst's NaN
 * poison unless its kernels wait for the producer's grid before they read
 * (test_programmatic_chain cannot tell: without an early trigger a
 * dependent grid starts only after every block of the one before has
 * ended, so only the memory flush would be left to race). */
static const char LATE_COPY_SRC[] =
    "extern \"C\" __global__ void ln_test_late_copy(const unsigned char *src, unsigned char *dst,\n"
    "                                               long long n)\n"
    "{\n"
    "    asm volatile(\"griddepcontrol.launch_dependents;\" ::: \"memory\");\n"
    "    unsigned long long t0, t;\n"
    "    asm volatile(\"mov.u64 %0, %%globaltimer;\" : \"=l\"(t0));\n"
    "    do\n"
    "        asm volatile(\"mov.u64 %0, %%globaltimer;\" : \"=l\"(t));\n"
    "    while (t - t0 < 200000);\n"
    "    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;\n"
    "         i += (long long)gridDim.x * blockDim.x)\n"
    "        dst[i] = src[i];\n"
    "}\n";

/* The producer's op on lnt_ctx. */
static jitop_op *late_copy_op(void)
{
    char *dir = jt_tmpdir();
    char *path = jt_write(dir, "late_copy.lnt_cu", LATE_COPY_SRC);
    const char *srcs[1] = {path};
    jitop_module *m = NULL;
    jitop_op *op = NULL;
    OK(jitop_load(lnt_ctx, "ln_test_late", srcs, 1, NULL, 0, &m));
    OK(jitop_op_get(m, "ln_test_late_copy", &op));
    free(path);
    free(dir);
    return op;
}

/* One pass of dt rows (affine) whose input (dy for the backward, x for the
 * forward) the late producer writes just before it, on one stream with no
 * synchronization between: checked against float64 from the staged
 * values (the backward's mean and rstd from a forward before, synchronized). */
static void check_late_input(jitop_dtype dt, int64_t m, int n, int bwd, CUstream stream)
{
    const size_t es = jitop_dtype_size(dt), total = (size_t)m * (size_t)n;
    void *hx = malloc(total * es), *hdy = malloc(total * es), *hg = malloc(n * es),
         *hb = malloc(n * es);
    double *x = malloc(total * sizeof *x), *dy = malloc(total * sizeof *dy),
           *want = malloc(total * sizeof *want), *got = malloc(total * sizeof *got),
           *g = malloc(n * sizeof *g), *b = malloc(n * sizeof *b), *wg = malloc(n * sizeof *wg),
           *wb = malloc(n * sizeof *wb), *gg = malloc(n * sizeof *gg), *gb = malloc(n * sizeof *gb),
           *mu = malloc(m * sizeof *mu), *rs = malloc(m * sizeof *rs);
    assert_true(hx && hdy && hg && hb && x && dy && want && got && g && b && wg && wb && gg && gb &&
                mu && rs);
    lnt_draw_x(dt, hx, x, total);
    lnt_draw(dt, hdy, dy, total, -1.0f, 1.0f);
    lnt_draw(dt, hg, g, n, 0.5f, 1.5f);
    lnt_draw(dt, hb, b, n, -1.0f, 1.0f);
    /* the late input's staging copy; its real buffer starts as NaN */
    dbuf stage = lnt_upload(bwd ? hdy : hx, total * es), late = lnt_dalloc(total * es, 0);
    dbuf dX = bwd ? lnt_upload(hx, total * es) : late, dDY = bwd ? late : stage;
    dbuf dG = lnt_upload(hg, n * es), dB = lnt_upload(hb, n * es), dY = lnt_dalloc(total * es, 0),
         dmean = lnt_dalloc(m * 4, 0), drstd = lnt_dalloc(m * 4, 0),
         ddx = lnt_dalloc(total * es, 0), ddg = lnt_dalloc(n * es, 0), ddb = lnt_dalloc(n * es, 0);
    dbuf poisoned[] = {late, dY, ddx, ddg, ddb};
    for (size_t i = 0; i < sizeof poisoned / sizeof poisoned[0]; i++)
        lnt_poison(poisoned[i]);
    CU(lnt_cu->cuCtxSynchronize());
    if (bwd) /* mean and rstd; y is not checked here */
        OK(jitop_layernorm_forward(lnt_ctx, dt, m, n, EPS, lnt_ptr(dX), lnt_ptr(dG), lnt_ptr(dB),
                                   lnt_ptr(dY), (float *)lnt_ptr(dmean), (float *)lnt_ptr(drstd),
                                   stream));
    CU(lnt_cu->cuCtxSynchronize());
    jitop_op *copy = late_copy_op();
    long long count = (long long)(total * es);
    void *args[] = {&stage.p, &late.p, &count};
    size_t sizes[] = {8, 8, 8};
    OK(jitop_launch(copy, (jitop_dim3){8, 1, 1}, (jitop_dim3){256, 1, 1}, 0, stream, args, sizes,
                    3));
    if (bwd)
        OK(jitop_layernorm_backward(lnt_ctx, dt, m, n, lnt_ptr(dDY), lnt_ptr(dX), lnt_ptr(dG),
                                    (const float *)lnt_ptr(dmean), (const float *)lnt_ptr(drstd),
                                    lnt_ptr(ddx), lnt_ptr(ddg), lnt_ptr(ddb), stream));
    else
        OK(jitop_layernorm_forward(lnt_ctx, dt, m, n, EPS, lnt_ptr(dX), lnt_ptr(dG), lnt_ptr(dB),
                                   lnt_ptr(dY), (float *)lnt_ptr(dmean), (float *)lnt_ptr(drstd),
                                   stream));
    CU(lnt_cu->cuCtxSynchronize());
    lnt_ref_stats(x, m, n, mu, rs);
    double e[3] = {0, 0, 0};
    if (bwd) {
        backward_errors(dt, dy, x, g, mu, rs, m, n, ddx, ddg, ddb, got, want, wg, wb, gg, gb, e);
    } else {
        lnt_ref_forward(x, g, b, m, n, mu, rs, want);
        lnt_fetch(dt, dY, total, got);
        e[0] = jt_rel_error(got, want, total);
    }
    const double t = lnt_tol(dt);
    if (!(e[0] < t && e[1] < t && e[2] < t))
        fail_msg("%s %s M=%lld N=%d behind a producer that released it early: rel err %s %.2e "
                 "dgamma %.2e dbeta %.2e (tolerance %.0e; NaN: read before the producer wrote)",
                 bwd ? "backward" : "forward", jt_dname(dt), (long long)m, n, bwd ? "dx" : "y",
                 e[0], e[1], e[2], t);
    dbuf all[] = {stage, late, dG, dB, dY, dmean, drstd, ddx, ddg, ddb};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        lnt_dfree(&all[i]);
    if (bwd)
        lnt_dfree(&dX);
    free(hx), free(hdy), free(hg), free(hb), free(x), free(dy), free(want), free(got), free(g);
    free(b), free(wg), free(wb), free(gg), free(gb), free(mu), free(rs);
}

/* Each pass under programmatic launch, behind a producer that releases it
 * early: the default (the backward's kernels) on the program's context, and
 * the forward on a context with JITOP_LN_PDL=1. The register kernels, a
 * copy-engine cluster shape and rows the 16-byte vector does not divide. */
static void test_programmatic_early_release(void **state)
{
    (void)state;
    JT_REQUIRE_GPU();
    lnt_setup_ctx();
    CUstream stream = NULL;
    CU(lnt_cu->cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
    for (size_t i = 0; i < sizeof PDL_CASES / sizeof PDL_CASES[0]; i++)
        check_late_input(PDL_CASES[i].dt, PDL_CASES[i].m, PDL_CASES[i].n, 1, stream);
    lnt_set_pdl_env("1");
    lnt_use_ctx(lnt_new_ctx(NULL));
    for (size_t i = 0; i < sizeof PDL_CASES / sizeof PDL_CASES[0]; i++)
        check_late_input(PDL_CASES[i].dt, PDL_CASES[i].m, PDL_CASES[i].n, 0, stream);
    lnt_restore_ctx();
    lnt_restore_pdl_env();
    CU(lnt_cu->cuStreamDestroy(stream));
}

/* test_programmatic_settings_agree's shapes: the inputs and outputs on the
 * device, and the program context's outputs as read back. */
typedef struct pdl_case {
    jitop_dtype dt;
    int64_t m;
    int n;
    dbuf x, dy, g, b, y, mean, rstd, dx, dg, db;
    void *hy, *hdx, *hdg, *hdb;
    float *hmean, *hrstd;
} pdl_case;

/* Forward + backward (affine) of k on lnt_ctx, the outputs poisoned first, read
 * back into hy ... hrstd. */
static void run_pdl_case(const pdl_case *k, void *hy, void *hdx, void *hdg, void *hdb,
                         float *hmean, float *hrstd)
{
    const size_t es = jitop_dtype_size(k->dt), total = (size_t)k->m * (size_t)k->n;
    const dbuf outs[] = {k->y, k->mean, k->rstd, k->dx, k->dg, k->db};
    for (size_t i = 0; i < sizeof outs / sizeof outs[0]; i++)
        lnt_poison(outs[i]);
    OK(jitop_layernorm_forward(lnt_ctx, k->dt, k->m, k->n, EPS, lnt_ptr(k->x), lnt_ptr(k->g),
                               lnt_ptr(k->b), lnt_ptr(k->y), (float *)lnt_ptr(k->mean),
                               (float *)lnt_ptr(k->rstd), NULL));
    OK(jitop_layernorm_backward(lnt_ctx, k->dt, k->m, k->n, lnt_ptr(k->dy), lnt_ptr(k->x),
                                lnt_ptr(k->g), (const float *)lnt_ptr(k->mean),
                                (const float *)lnt_ptr(k->rstd), lnt_ptr(k->dx), lnt_ptr(k->dg),
                                lnt_ptr(k->db), NULL));
    CU(lnt_cu->cuCtxSynchronize());
    CU(lnt_cu->cuMemcpyDtoH(hy, k->y.p, total * es));
    CU(lnt_cu->cuMemcpyDtoH(hdx, k->dx.p, total * es));
    CU(lnt_cu->cuMemcpyDtoH(hdg, k->dg.p, (size_t)k->n * es));
    CU(lnt_cu->cuMemcpyDtoH(hdb, k->db.p, (size_t)k->n * es));
    CU(lnt_cu->cuMemcpyDtoH(hmean, k->mean.p, (size_t)k->m * 4));
    CU(lnt_cu->cuMemcpyDtoH(hrstd, k->rstd.p, (size_t)k->m * 4));
}

/* Fails unless got holds want's bytes, naming the first element that
 * differs. */
static void expect_same(const char *setting, const pdl_case *k, const char *what, const void *want,
                        const void *got, size_t count, size_t es)
{
    if (memcmp(want, got, count * es) == 0)
        return;
    size_t i = 0;
    while (memcmp((const char *)want + i * es, (const char *)got + i * es, es) == 0)
        i++;
    fail_msg("JITOP_LN_PDL=%s: %s M=%lld N=%d: %s differs from the program context's at element "
             "%zu of %zu",
             setting, jt_dname(k->dt), (long long)k->m, k->n, what, i, count);
}

/* Fails where any of count values of dt at h is NaN (the poison left). */
static void expect_written(const pdl_case *k, const char *what, jitop_dtype dt, const void *h,
                           size_t count)
{
    for (size_t i = 0; i < count; i++)
        if (isnan(jt_dload(dt, h, i)))
            fail_msg("%s M=%lld N=%d: %s[%zu] is NaN", jt_dname(k->dt), (long long)k->m, k->n,
                     what, i);
}

/* Programmatic dependent launch changes when a kernel starts, never what
 * it computes: under each JITOP_LN_PDL (0 none, 1 both passes, fwd, bwd;
 * each in a fresh context, which reads it at its first LayerNorm call)
 * forward + backward (affine) of the same inputs give the program
 * context's outputs bit for bit (y, mean, rstd, dx, dgamma, dbeta; the
 * dgamma/dbeta reduction has a fixed order). float16 N=4096 (register
 * kernels), float32 N=49152 (sm_90: the copy-engine cluster kernels). */
static void test_programmatic_settings_agree(void **state)
{
    (void)state;
    JT_REQUIRE_GPU();
    lnt_setup_ctx();
    pdl_case cases[2] = {{.dt = JITOP_FLOAT16, .m = 2000, .n = 4096},
                         {.dt = JITOP_FLOAT32, .m = 200, .n = 49152}};
    enum { NCASES = sizeof cases / sizeof cases[0] };
    size_t most = 0, most_n = 0, most_m = 0;
    for (int c = 0; c < NCASES; c++) {
        pdl_case *k = &cases[c];
        const size_t es = jitop_dtype_size(k->dt), total = (size_t)k->m * (size_t)k->n,
                     n = (size_t)k->n, m = (size_t)k->m;
        most = total * es > most ? total * es : most;
        most_n = n * es > most_n ? n * es : most_n;
        most_m = m > most_m ? m : most_m;
        void *h = malloc(total * es);
        double *v = malloc(total * sizeof *v);
        assert_true(h && v);
        lnt_draw_x(k->dt, h, v, total);
        k->x = lnt_upload(h, total * es);
        lnt_draw(k->dt, h, v, total, -1.0f, 1.0f);
        k->dy = lnt_upload(h, total * es);
        lnt_draw(k->dt, h, v, n, 0.5f, 1.5f);
        k->g = lnt_upload(h, n * es);
        lnt_draw(k->dt, h, v, n, -1.0f, 1.0f);
        k->b = lnt_upload(h, n * es);
        free(h);
        free(v);
        k->y = lnt_dalloc(total * es, 0);
        k->dx = lnt_dalloc(total * es, 0);
        k->dg = lnt_dalloc(n * es, 0);
        k->db = lnt_dalloc(n * es, 0);
        k->mean = lnt_dalloc(m * 4, 0);
        k->rstd = lnt_dalloc(m * 4, 0);
        k->hy = malloc(total * es);
        k->hdx = malloc(total * es);
        k->hdg = malloc(n * es);
        k->hdb = malloc(n * es);
        k->hmean = malloc(m * 4);
        k->hrstd = malloc(m * 4);
        assert_true(k->hy && k->hdx && k->hdg && k->hdb && k->hmean && k->hrstd);
        run_pdl_case(k, k->hy, k->hdx, k->hdg, k->hdb, k->hmean, k->hrstd);
        /* every output written: identical poison would agree too */
        expect_written(k, "y", k->dt, k->hy, total);
        expect_written(k, "dx", k->dt, k->hdx, total);
        expect_written(k, "dgamma", k->dt, k->hdg, n);
        expect_written(k, "dbeta", k->dt, k->hdb, n);
        expect_written(k, "mean", JITOP_FLOAT32, k->hmean, m);
        expect_written(k, "rstd", JITOP_FLOAT32, k->hrstd, m);
    }
    void *hy = malloc(most), *hdx = malloc(most), *hdg = malloc(most_n), *hdb = malloc(most_n);
    float *hmean = malloc(most_m * 4), *hrstd = malloc(most_m * 4);
    assert_true(hy && hdx && hdg && hdb && hmean && hrstd);
    static const char *const settings[] = {"0", "1", "fwd", "bwd"};
    for (size_t s = 0; s < sizeof settings / sizeof settings[0]; s++) {
        lnt_set_pdl_env(settings[s]);
        lnt_use_ctx(lnt_new_ctx(NULL));
        for (int c = 0; c < NCASES; c++) {
            const pdl_case *k = &cases[c];
            const size_t es = jitop_dtype_size(k->dt), total = (size_t)k->m * (size_t)k->n;
            run_pdl_case(k, hy, hdx, hdg, hdb, hmean, hrstd);
            expect_same(settings[s], k, "y", k->hy, hy, total, es);
            expect_same(settings[s], k, "mean", k->hmean, hmean, (size_t)k->m, 4);
            expect_same(settings[s], k, "rstd", k->hrstd, hrstd, (size_t)k->m, 4);
            expect_same(settings[s], k, "dx", k->hdx, hdx, total, es);
            expect_same(settings[s], k, "dgamma", k->hdg, hdg, (size_t)k->n, es);
            expect_same(settings[s], k, "dbeta", k->hdb, hdb, (size_t)k->n, es);
        }
    }
    lnt_restore_ctx();
    lnt_restore_pdl_env();
    for (int c = 0; c < NCASES; c++) {
        pdl_case *k = &cases[c];
        dbuf *all[] = {&k->x, &k->dy, &k->g, &k->b, &k->y, &k->mean, &k->rstd, &k->dx, &k->dg,
                       &k->db};
        for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
            lnt_dfree(all[i]);
        free(k->hy), free(k->hdx), free(k->hdg), free(k->hdb), free(k->hmean), free(k->hrstd);
    }
    free(hy), free(hdx), free(hdg), free(hdb), free(hmean), free(hrstd);
}

/* A JITOP_LN_PDL that is none of bwd, 1, fwd and 0 fails a context's first
 * LayerNorm call (forward or backward) with JITOP_EINVAL naming it, before
 * any use of the driver (so this needs no GPU); nothing of the failed call
 * stays: under a good value the next call goes on (to the driver, which
 * this context may not open). */
static void test_bad_pdl_setting(void **state)
{
    (void)state;
    char *dir = NULL;
    jitop_ctx *c = compile_only_ctx(NULL, &dir);
    float dummy[16];
    lnt_set_pdl_env("sometimes");
    int rc = jitop_layernorm_forward(c, JITOP_FLOAT32, 4, 4, EPS, dummy, NULL, NULL, dummy, NULL,
                                     NULL, NULL);
    assert_int_equal(rc, JITOP_EINVAL);
    const char *want = "JITOP_LN_PDL is 'sometimes': expected bwd, 1, fwd or 0";
    if (strstr(jitop_errmsg(NULL), want) == NULL)
        fail_msg("forward: the message: %s", jitop_errmsg(NULL));
    rc = jitop_layernorm_backward(c, JITOP_FLOAT32, 4, 4, dummy, dummy, NULL, dummy, dummy, dummy,
                                  NULL, NULL, NULL);
    assert_int_equal(rc, JITOP_EINVAL);
    if (strstr(jitop_errmsg(NULL), "JITOP_LN_PDL is 'sometimes'") == NULL)
        fail_msg("backward: the message: %s", jitop_errmsg(NULL));
    lnt_set_pdl_env("bwd");
    rc = jitop_layernorm_forward(c, JITOP_FLOAT32, 4, 4, EPS, dummy, NULL, NULL, dummy, NULL, NULL,
                                 NULL);
    assert_int_equal(rc, JITOP_ENODRIVER);
    lnt_restore_pdl_env();
    jitop_ctx_destroy(c);
    free(dir);
}

/* A context whose arch does not parse as sm_NN or compute_NN: its first
 * LayerNorm call fails with JITOP_EINVAL naming the arch, before any
 * driver is asked (the plans are made for the arch's capability). Needs
 * no GPU. */
static void test_bad_arch_setting(void **state)
{
    (void)state;
    char *dir = NULL;
    jitop_ctx *c = compile_only_ctx("gfx90a", &dir);
    float dummy[16];
    int rc = jitop_layernorm_forward(c, JITOP_FLOAT32, 4, 4, EPS, dummy, NULL, NULL, dummy, NULL,
                                     NULL, NULL);
    assert_int_equal(rc, JITOP_EINVAL);
    if (strstr(jitop_errmsg(NULL), "arch 'gfx90a' is not sm_NN or compute_NN") == NULL)
        fail_msg("forward: the message: %s", jitop_errmsg(NULL));
    jitop_ctx_destroy(c);
    free(dir);
}

/* The backward's partial dgamma/dbeta rows live in a workspace per context
 * and stream, whose 128-byte lines the reduction drops from L2 once read,
 * without writing them back (discard.L2: their bytes become undefined):
 * every call must write its partials anew and its reduction see only
 * those. One context and stream, M = 3000, float32 and float16, N = 2048
 * (whole lines of 32 columns) and 1000 (the last line of each half
 * partial): the backward with dgamma only (the reduction reads and drops
 * dgamma's half, dbeta's stays), dbeta only, then both, each on fresh dy
 * and checked (dx too) against float64, the outputs poisoned first; once
 * synchronizing after each call, once the three back to back. */
static void test_backward_partials_reused(void **state)
{
    (void)state;
    JT_REQUIRE_GPU();
    lnt_setup_ctx();
    static const struct {
        jitop_dtype dt;
        int n;
    } cases[] = {
        {JITOP_FLOAT32, 2048},
        {JITOP_FLOAT32, 1000},
        {JITOP_FLOAT16, 2048},
        {JITOP_FLOAT16, 1000},
    };
    static const char *const what[3] = {"dgamma only", "dbeta only", "dgamma and dbeta"};
    const int64_t m = 3000;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const jitop_dtype dt = cases[i].dt;
        const int n = cases[i].n;
        const size_t es = jitop_dtype_size(dt), total = (size_t)m * (size_t)n;
        void *hx = malloc(total * es), *hg = malloc(n * es), *hb = malloc(n * es),
             *hdy[3] = {malloc(total * es), malloc(total * es), malloc(total * es)};
        double *x = malloc(total * sizeof *x), *dy = malloc(total * sizeof *dy),
               *want = malloc(total * sizeof *want), *got = malloc(total * sizeof *got),
               *g = malloc(n * sizeof *g), *b = malloc(n * sizeof *b),
               *wg = malloc(n * sizeof *wg), *wb = malloc(n * sizeof *wb),
               *gg = malloc(n * sizeof *gg), *gb = malloc(n * sizeof *gb),
               *mu = malloc(m * sizeof *mu), *rs = malloc(m * sizeof *rs);
        assert_true(hx && hg && hb && hdy[0] && hdy[1] && hdy[2] && x && dy && want && got && g &&
                    b && wg && wb && gg && gb && mu && rs);
        lnt_draw_x(dt, hx, x, total);
        lnt_draw(dt, hg, g, n, 0.5f, 1.5f);
        lnt_draw(dt, hb, b, n, -1.0f, 1.0f);
        lnt_ref_stats(x, m, n, mu, rs);
        dbuf dX = lnt_upload(hx, total * es), dG = lnt_upload(hg, n * es),
             dB = lnt_upload(hb, n * es);
        dbuf dY = lnt_dalloc(total * es, 0), dmean = lnt_dalloc(m * 4, 0),
             drstd = lnt_dalloc(m * 4, 0);
        dbuf ddy[3], ddx[3], dgg[3], dgb[3];
        for (int k = 0; k < 3; k++) {
            ddy[k] = lnt_dalloc(total * es, 0);
            ddx[k] = lnt_dalloc(total * es, 0);
            dgg[k] = lnt_dalloc(n * es, 0);
            dgb[k] = lnt_dalloc(n * es, 0);
        }
        OK(jitop_layernorm_forward(lnt_ctx, dt, m, n, EPS, lnt_ptr(dX), lnt_ptr(dG), lnt_ptr(dB),
                                   lnt_ptr(dY), (float *)lnt_ptr(dmean), (float *)lnt_ptr(drstd),
                                   NULL));
        for (int round = 0; round < 2; round++) {
            for (int k = 0; k < 3; k++) {
                lnt_draw(dt, hdy[k], dy, total, -1.0f, 1.0f);
                CU(lnt_cu->cuMemcpyHtoD(ddy[k].p, hdy[k], total * es));
                lnt_poison(ddx[k]);
                lnt_poison(dgg[k]);
                lnt_poison(dgb[k]);
            }
            for (int k = 0; k < 3; k++) {
                OK(jitop_layernorm_backward(
                    lnt_ctx, dt, m, n, lnt_ptr(ddy[k]), lnt_ptr(dX), lnt_ptr(dG),
                    (const float *)lnt_ptr(dmean), (const float *)lnt_ptr(drstd), lnt_ptr(ddx[k]),
                    k != 1 ? lnt_ptr(dgg[k]) : NULL, k != 0 ? lnt_ptr(dgb[k]) : NULL, NULL));
                if (round == 0 || k == 2)
                    CU(lnt_cu->cuCtxSynchronize());
            }
            for (int k = 0; k < 3; k++) {
                for (size_t j = 0; j < total; j++)
                    dy[j] = jt_dload(dt, hdy[k], j);
                lnt_ref_backward(dy, x, g, mu, rs, m, n, want, wg, wb);
                lnt_fetch(dt, ddx[k], total, got);
                const double e_dx = jt_rel_error(got, want, total);
                double e_dg = 0, e_db = 0;
                if (k != 1) {
                    lnt_fetch(dt, dgg[k], (size_t)n, gg);
                    e_dg = jt_rel_error(gg, wg, (size_t)n);
                }
                if (k != 0) {
                    lnt_fetch(dt, dgb[k], (size_t)n, gb);
                    e_db = jt_rel_error(gb, wb, (size_t)n);
                }
                const double t = lnt_tol(dt);
                if (!(e_dx < t && e_dg < t && e_db < t))
                    fail_msg("%s M=%lld N=%d, backward %d of 3 (%s), %s: rel err dx %.2e dgamma "
                             "%.2e dbeta %.2e (tolerance %.0e)",
                             jt_dname(dt), (long long)m, n, k + 1, what[k],
                             round == 0 ? "synchronized after each" : "back to back", e_dx, e_dg,
                             e_db, t);
            }
        }
        for (int k = 0; k < 3; k++) {
            lnt_dfree(&ddy[k]);
            lnt_dfree(&ddx[k]);
            lnt_dfree(&dgg[k]);
            lnt_dfree(&dgb[k]);
            free(hdy[k]);
        }
        lnt_dfree(&dX), lnt_dfree(&dG), lnt_dfree(&dB), lnt_dfree(&dY), lnt_dfree(&dmean),
            lnt_dfree(&drstd);
        free(hx), free(hg), free(hb), free(x), free(dy), free(want), free(got), free(g), free(b);
        free(wg), free(wb), free(gg), free(gb), free(mu), free(rs);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_argument_errors),
        cmocka_unit_test_teardown(test_bad_pdl_setting, lnt_restore_state),
        cmocka_unit_test(test_bad_arch_setting),
        cmocka_unit_test(test_backward_finite_differences),
        cmocka_unit_test(test_backward_deterministic),
        cmocka_unit_test(test_f32),
        cmocka_unit_test(test_f16),
        cmocka_unit_test(test_bf16),
        cmocka_unit_test(test_inplace_unaligned),
        cmocka_unit_test(test_long_rows),
        cmocka_unit_test(test_cluster_rows_reused),
        cmocka_unit_test(test_programmatic_chain),
        cmocka_unit_test_teardown(test_programmatic_early_release, lnt_restore_state),
        cmocka_unit_test_teardown(test_programmatic_settings_agree, lnt_restore_state),
        cmocka_unit_test(test_backward_partials_reused),
    };
    const char *filter = getenv("JITOP_TEST_FILTER");
    if (filter != NULL && *filter != '\0')
        cmocka_set_test_filter(filter);
    return cmocka_run_group_tests(tests, NULL, lnt_teardown_all);
}
