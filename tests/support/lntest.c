/* The LayerNorm GPU tests' helpers (lntest.h), shared by
 * tests/gpu/test_layernorm*.c: host storage of the dtypes, device buffers
 * through jitop's driver table, the program's context, the float64
 * reference, check_case (one forward + backward against it) and the
 * contexts and environment a test swaps. Linked into every test program
 * (the Makefile's TEST_SUPPORT); only the LayerNorm programs call it. */
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
#include "testutil.h"

/* float16 goes through _Float16 (hostdtype.h: GCC 12 or newer on x86-64,
 * clang 15 or newer). Without it this file is empty, so that the CPU test
 * programs, which link every .c file of tests/support, build as before;
 * hostdtype.h then stops the build of the LayerNorm GPU tests with a message. */
#ifdef __FLT16_MAX__
#include "lntest.h"

const jitop__cuda_api *lnt_cu;
jitop_ctx *lnt_ctx; /* one context for the program: instances compile once */

/* float32 well under 1e-3 (issue 4), 16-bit types under 1e-2. */
double lnt_tol(jitop_dtype dt)
{
    return dt == JITOP_FLOAT32 ? 1e-4 : 1e-2;
}

/* ------------------------------------------------------ device helpers */

dbuf lnt_dalloc(size_t bytes, size_t offset)
{
    dbuf b = {0, 0, bytes};
    CU(lnt_cu->cuMemAlloc(&b.base, bytes + offset + 16));
    b.p = b.base + offset;
    return b;
}

void lnt_dfree(dbuf *b)
{
    if (b->base)
        CU(lnt_cu->cuMemFree(b->base));
    b->base = b->p = 0;
}

/* 0xFF bytes: NaN in float32, float16 and bfloat16 alike. */
void lnt_poison(dbuf b)
{
    CU(lnt_cu->cuMemsetD8(b.p, 0xFF, b.bytes));
}

void *lnt_ptr(dbuf b)
{
    return (void *)(uintptr_t)b.p;
}

void lnt_setup_ctx(void)
{
    if (lnt_ctx != NULL)
        return;
    char *dir = jt_tmpdir();
    char *cache = jt_path(dir, "cache");
    lnt_ctx = jt_ctx_driver(cache);
    OK(jitop_ctx_cuda(lnt_ctx, NULL, NULL));
    lnt_cu = jitop__cuda();
    assert_non_null(lnt_cu);
    free(dir);
    free(cache);
}

int lnt_teardown_all(void **state)
{
    (void)state;
    jitop_ctx_destroy(lnt_ctx);
    lnt_ctx = NULL;
    jt_cleanup();
    return 0;
}

/* ------------------------------------------------------------ reference */

/* Row statistics in float64. */
void lnt_ref_stats(const double *x, int64_t m, int n, double *mu, double *rs)
{
    for (int64_t r = 0; r < m; r++) {
        double s = 0, q = 0;
        for (int c = 0; c < n; c++)
            s += x[r * n + c];
        s /= n;
        for (int c = 0; c < n; c++)
            q += (x[r * n + c] - s) * (x[r * n + c] - s);
        mu[r] = s;
        rs[r] = 1.0 / sqrt(q / n + (double)EPS);
    }
}

/* The names of lntest.h's modes (PLAIN ... SPLIT), for the messages. */
static const char *const MODE_NAMES[] = {"plain", "in place", "unaligned", "split"};

/* lnt_check_case's rows: lnt_x_offset + lnt_x_spread * uniform(-1, 1) when lnt_x_offset is
 * not 0 (a common offset far larger than the spread: a variance from
 * E[x^2] - mean^2 in float32 would be off by 1e-3 to 20% there, where the
 * test allows 1e-5 of rstd), else a random shift and scale. */
float lnt_x_offset;
static float lnt_x_spread;

/* The offset and spread per dtype: the offset as large as float32's
 * rounding of the mean leaves y within the tolerance (1e-4), the spread
 * wide enough that the 16-bit values still differ (bfloat16 rounds 1000 +
 * u to a multiple of 4). */
void lnt_set_offset(jitop_dtype dt)
{
    lnt_x_offset = dt == JITOP_FLOAT32 ? 100.0f : 1000.0f;
    lnt_x_spread = dt == JITOP_BFLOAT16 ? 16.0f : 1.0f;
}

/* One forward + backward on fresh random data, checked against float64;
 * the row tensors (x, y, dy, dx) k elements further past their buffers'
 * offsets (mode's), gamma, beta, dgamma and dbeta not: with k not a
 * multiple of the 16-byte vector even the first row starts off a 16-byte
 * boundary. */
void lnt_check_case_at(jitop_dtype dt, int64_t m, int n, int affine, int mode, int k)
{
    const size_t es = jitop_dtype_size(dt), total = (size_t)m * (size_t)n;
    /* bytes past the base: gamma and beta (and their gradients), x and
     * dy, y and dx */
    const size_t poff = mode == UNALIGNED ? es : 0, xoff = poff + (size_t)k * es,
                 yoff = xoff + (mode == SPLIT ? es : 0);
    void *hx = malloc(total * es), *hdy = malloc(total * es), *hg = malloc(n * es),
         *hb = malloc(n * es), *hout = malloc(total * es), *hdg = malloc(n * es),
         *hdb = malloc(n * es);
    double *x = malloc(total * sizeof *x), *dy = malloc(total * sizeof *dy),
           *g = malloc(n * sizeof *g), *b = malloc(n * sizeof *b),
           *want = malloc(total * sizeof *want), *got = malloc(total * sizeof *got),
           *mu = malloc(m * sizeof *mu), *rs = malloc(m * sizeof *rs),
           *wg = malloc(n * sizeof *wg), *wb = malloc(n * sizeof *wb),
           *gg = malloc(n * sizeof *gg), *gb = malloc(n * sizeof *gb),
           *gmu = malloc(m * sizeof *gmu), *grs = malloc(m * sizeof *grs),
           *term = malloc(total * sizeof *term);
    float *tmp = malloc((total > (size_t)n ? total : (size_t)n) * sizeof *tmp),
          *fm = malloc(m * sizeof *fm), *fr = malloc(m * sizeof *fr);
    assert_true(hx && hdy && hg && hb && hout && hdg && hdb && x && dy && g && b && want && got &&
                mu && rs && wg && wb && gg && gb && gmu && grs && term && tmp && fm && fr);

    /* x with a non-zero mean and non-unit spread; fresh every call */
    float shift = 0, scale = 0;
    jt_random_floats(&shift, 1, -3.0f, 3.0f);
    jt_random_floats(&scale, 1, 0.5f, 4.0f);
    if (lnt_x_offset != 0.0f) {
        shift = lnt_x_offset;
        scale = lnt_x_spread;
    }
    jt_random_floats(tmp, total, -1.0f, 1.0f);
    for (size_t i = 0; i < total; i++)
        x[i] = jt_dstore(dt, hx, i, shift + scale * tmp[i]);
    jt_random_floats(tmp, total, -1.0f, 1.0f);
    for (size_t i = 0; i < total; i++)
        dy[i] = jt_dstore(dt, hdy, i, tmp[i]);
    jt_random_floats(tmp, n, 0.5f, 1.5f);
    for (int i = 0; i < n; i++)
        g[i] = affine ? jt_dstore(dt, hg, i, tmp[i]) : 1.0;
    jt_random_floats(tmp, n, -1.0f, 1.0f);
    for (int i = 0; i < n; i++)
        b[i] = affine ? jt_dstore(dt, hb, i, tmp[i]) : 0.0;

    dbuf dx_ = lnt_dalloc(total * es, xoff), ddy = lnt_dalloc(total * es, xoff);
    dbuf dg = lnt_dalloc(n * es, poff), db = lnt_dalloc(n * es, poff);
    dbuf dout = mode == INPLACE ? dx_ : lnt_dalloc(total * es, yoff);
    dbuf dmean = lnt_dalloc(m * 4, 0), drstd = lnt_dalloc(m * 4, 0);
    dbuf dgg = lnt_dalloc(n * es, poff), dgb = lnt_dalloc(n * es, poff);
    CU(lnt_cu->cuMemcpyHtoD(dx_.p, hx, total * es));
    CU(lnt_cu->cuMemcpyHtoD(ddy.p, hdy, total * es));
    CU(lnt_cu->cuMemcpyHtoD(dg.p, hg, n * es));
    CU(lnt_cu->cuMemcpyHtoD(db.p, hb, n * es));
    if (mode != INPLACE)
        lnt_poison(dout);
    lnt_poison(dmean);
    lnt_poison(drstd);

    /* forward */
    OK(jitop_layernorm_forward(lnt_ctx, dt, m, n, EPS, lnt_ptr(dx_), affine ? lnt_ptr(dg) : NULL,
                               affine ? lnt_ptr(db) : NULL, lnt_ptr(dout), (float *)lnt_ptr(dmean),
                               (float *)lnt_ptr(drstd), NULL));
    CU(lnt_cu->cuCtxSynchronize());
    CU(lnt_cu->cuMemcpyDtoH(hout, dout.p, total * es));
    CU(lnt_cu->cuMemcpyDtoH(fm, dmean.p, m * 4));
    CU(lnt_cu->cuMemcpyDtoH(fr, drstd.p, m * 4));
    lnt_ref_stats(x, m, n, mu, rs);
    for (int64_t r = 0; r < m; r++)
        for (int c = 0; c < n; c++)
            want[r * n + c] = (x[r * n + c] - mu[r]) * rs[r] * g[c] + b[c];
    for (size_t i = 0; i < total; i++)
        got[i] = jt_dload(dt, hout, i);
    for (int64_t r = 0; r < m; r++) {
        gmu[r] = fm[r];
        grs[r] = fr[r];
    }
    double e_y = jt_rel_error(got, want, total);
    /* The mean's error against the rows' scale (root mean square of x), not
     * its own size, which may be near 0 whatever the precision. */
    double e_mu = 0, msq = 0;
    for (int64_t r = 0; r < m; r++) {
        e_mu += (gmu[r] - mu[r]) * (gmu[r] - mu[r]);
        for (int c = 0; c < n; c++)
            msq += x[r * n + c] * x[r * n + c] / n;
    }
    e_mu = isnan(e_mu) ? INFINITY : sqrt(e_mu / msq);
    double e_rs = jt_rel_error(grs, rs, m);
    /* N == 1: y is exactly beta (x - mean == 0); the relative error of an
     * all-zero reference is 0 only for an exact zero, which holds. */

    /* backward, from the statistics the forward saved; x must be the
     * original (in place overwrote it with y) */
    if (mode == INPLACE)
        CU(lnt_cu->cuMemcpyHtoD(dx_.p, hx, total * es));
    dbuf ddx = mode == INPLACE ? ddy : lnt_dalloc(total * es, yoff);
    if (mode != INPLACE)
        lnt_poison(ddx);
    lnt_poison(dgg);
    lnt_poison(dgb);
    OK(jitop_layernorm_backward(lnt_ctx, dt, m, n, lnt_ptr(ddy), lnt_ptr(dx_),
                                affine ? lnt_ptr(dg) : NULL, (const float *)lnt_ptr(dmean),
                                (const float *)lnt_ptr(drstd), lnt_ptr(ddx),
                                affine ? lnt_ptr(dgg) : NULL, affine ? lnt_ptr(dgb) : NULL, NULL));
    CU(lnt_cu->cuCtxSynchronize());
    CU(lnt_cu->cuMemcpyDtoH(hout, ddx.p, total * es));
    for (int c = 0; c < n; c++)
        wg[c] = wb[c] = 0;
    for (int64_t r = 0; r < m; r++) {
        double a = 0, bb = 0;
        for (int c = 0; c < n; c++) {
            double xh = (x[r * n + c] - mu[r]) * rs[r], gy = dy[r * n + c] * g[c];
            a += gy;
            bb += gy * xh;
            wg[c] += dy[r * n + c] * xh;
            wb[c] += dy[r * n + c];
        }
        a /= n;
        bb /= n;
        for (int c = 0; c < n; c++) {
            double xh = (x[r * n + c] - mu[r]) * rs[r], gy = dy[r * n + c] * g[c];
            want[r * n + c] = rs[r] * (gy - a - xh * bb);
            term[r * n + c] = rs[r] * gy;
        }
    }
    for (size_t i = 0; i < total; i++)
        got[i] = jt_dload(dt, hout, i);
    double e_dx = jt_rel_error(got, want, total);
    if (n == 1) {
        /* The exact dx is 0 for N == 1: measure against the size of the
         * terms that cancel instead. */
        double num = 0, den = 0;
        for (size_t i = 0; i < total; i++) {
            num += (got[i] - want[i]) * (got[i] - want[i]);
            den += term[i] * term[i];
        }
        e_dx = isnan(num) ? INFINITY : sqrt(num / den);
    }
    double e_dg = 0, e_db = 0;
    if (affine) {
        CU(lnt_cu->cuMemcpyDtoH(hdg, dgg.p, n * es));
        CU(lnt_cu->cuMemcpyDtoH(hdb, dgb.p, n * es));
        for (int c = 0; c < n; c++) {
            gg[c] = jt_dload(dt, hdg, c);
            gb[c] = jt_dload(dt, hdb, c);
        }
        e_dg = jt_rel_error(gg, wg, n);
        e_db = jt_rel_error(gb, wb, n);
    }
    const double t = lnt_tol(dt);
    if (!(e_y < t && e_mu < 1e-5 && e_rs < 1e-5 && e_dx < t && e_dg < t && e_db < t))
        fail_msg("%s M=%lld N=%d affine=%d %s, rows %d elements in, common offset %g: rel err y "
                 "%.2e mean %.2e rstd %.2e dx %.2e dgamma %.2e dbeta %.2e (tolerance %.0e)",
                 jt_dname(dt), (long long)m, n, affine, MODE_NAMES[mode], k, (double)lnt_x_offset,
                 e_y, e_mu, e_rs, e_dx, e_dg, e_db, t);

    lnt_dfree(&dx_);
    lnt_dfree(&ddy);
    lnt_dfree(&dg);
    lnt_dfree(&db);
    if (mode != INPLACE) {
        lnt_dfree(&dout);
        lnt_dfree(&ddx);
    }
    lnt_dfree(&dmean);
    lnt_dfree(&drstd);
    lnt_dfree(&dgg);
    lnt_dfree(&dgb);
    free(hx), free(hdy), free(hg), free(hb), free(hout), free(hdg), free(hdb);
    free(x), free(dy), free(g), free(b), free(want), free(got), free(mu), free(rs);
    free(wg), free(wb), free(gg), free(gb), free(gmu), free(grs), free(term);
    free(tmp), free(fm), free(fr);
}

/* The same with the row tensors at their buffers' offsets. */
void lnt_check_case(jitop_dtype dt, int64_t m, int n, int affine, int mode)
{
    lnt_check_case_at(dt, m, n, affine, mode, 0);
}

/* ------------------------------------------- contexts and the environment */

/* The program's context while a test runs on one of its own (lnt_ctx, which
 * lnt_check_case_at uses, is then that one); lnt_restore_state puts it back, also
 * when the test fails, so that the tests after it run on the program's. */
static jitop_ctx *outer_ctx;

/* JITOP_LN_PDL as the program found it while a test sets its own (a
 * context reads it at its first LayerNorm call); lnt_restore_state puts it
 * back, also when the test fails. */
static int pdl_env_saved;
static char *pdl_env;

void lnt_set_pdl_env(const char *value)
{
    if (!pdl_env_saved) {
        const char *was = getenv("JITOP_LN_PDL");
        pdl_env = was != NULL ? strdup(was) : NULL;
        assert_true(was == NULL || pdl_env != NULL);
        pdl_env_saved = 1;
    }
    assert_int_equal(setenv("JITOP_LN_PDL", value, 1), 0);
}

void lnt_restore_pdl_env(void)
{
    if (!pdl_env_saved)
        return;
    if (pdl_env != NULL)
        (void)setenv("JITOP_LN_PDL", pdl_env, 1);
    else
        (void)unsetenv("JITOP_LN_PDL");
    free(pdl_env);
    pdl_env = NULL;
    pdl_env_saved = 0;
}

/* A fresh context of the driver (its LayerNorm reads JITOP_LN_* anew),
 * compiling for arch (cfg.arch; NULL: the device's), in the program
 * context's cache (instances compiled once for both). */
jitop_ctx *lnt_new_ctx(const char *arch)
{
    jitop_config cfg;
    jitop_config_init(&cfg);
    cfg.cache_dir = jitop_cache_dir(outer_ctx != NULL ? outer_ctx : lnt_ctx);
    cfg.arch = arch;
    jitop_ctx *c = NULL;
    const int st = jitop_ctx_create(&cfg, &c);
    if (st != JITOP_OK)
        fail_msg("jitop_ctx_create (arch %s): %s: %s", arch ? arch : "the device's",
                 jitop_strerror(st), jitop_errmsg(NULL));
    return c;
}

/* Makes c the context the checks use (lnt_ctx), destroying the one a test
 * swapped in before, never the program's; opens c's driver. */
void lnt_use_ctx(jitop_ctx *c)
{
    if (outer_ctx == NULL)
        outer_ctx = lnt_ctx;
    else if (lnt_ctx != outer_ctx)
        jitop_ctx_destroy(lnt_ctx);
    lnt_ctx = c;
    OK(jitop_ctx_cuda(lnt_ctx, NULL, NULL));
}

void lnt_restore_ctx(void)
{
    if (outer_ctx == NULL)
        return;
    if (lnt_ctx != outer_ctx)
        jitop_ctx_destroy(lnt_ctx);
    lnt_ctx = outer_ctx;
    outer_ctx = NULL;
}

/* The teardown of the tests that swap the context or set JITOP_LN_PDL. */
int lnt_restore_state(void **state)
{
    (void)state;
    lnt_restore_pdl_env();
    lnt_restore_ctx();
    return 0;
}

/* ------------------------------------------------------- reference and data */

/* count values uniform in [lo, hi) stored as dt into h; v: the values
 * stored (rounded to dt). */
void lnt_draw(jitop_dtype dt, void *h, double *v, size_t count, float lo, float hi)
{
    float *tmp = malloc(count * sizeof *tmp);
    assert_non_null(tmp);
    jt_random_floats(tmp, count, lo, hi);
    for (size_t i = 0; i < count; i++)
        v[i] = jt_dstore(dt, h, i, tmp[i]);
    free(tmp);
}

/* Rows as lnt_check_case_at draws them: a random shift and scale. */
void lnt_draw_x(jitop_dtype dt, void *h, double *v, size_t count)
{
    float shift = 0, scale = 0;
    jt_random_floats(&shift, 1, -3.0f, 3.0f);
    jt_random_floats(&scale, 1, 0.5f, 4.0f);
    lnt_draw(dt, h, v, count, shift - scale, shift + scale);
}

/* A device copy of bytes at h (cuMemAlloc's alignment). */
dbuf lnt_upload(const void *h, size_t bytes)
{
    dbuf b = lnt_dalloc(bytes, 0);
    CU(lnt_cu->cuMemcpyHtoD(b.p, h, bytes));
    return b;
}

/* count values of dt from the device, as float64. */
void lnt_fetch(jitop_dtype dt, dbuf b, size_t count, double *out)
{
    const size_t es = jitop_dtype_size(dt);
    void *h = malloc(count * es);
    assert_non_null(h);
    CU(lnt_cu->cuMemcpyDtoH(h, b.p, count * es));
    for (size_t i = 0; i < count; i++)
        out[i] = jt_dload(dt, h, i);
    free(h);
}

/* The forward in float64: the row statistics and y (g, b NULL: 1, 0). */
void lnt_ref_forward(const double *x, const double *g, const double *b, int64_t m, int n,
                        double *mu, double *rs, double *y)
{
    lnt_ref_stats(x, m, n, mu, rs);
    for (int64_t r = 0; r < m; r++)
        for (int c = 0; c < n; c++)
            y[r * n + c] = (x[r * n + c] - mu[r]) * rs[r] * (g ? g[c] : 1.0) + (b ? b[c] : 0.0);
}

/* The backward in float64 from dy, x, the float64 statistics and gamma
 * (NULL: 1): dx, and dgamma and dbeta where not NULL (as lnt_check_case_at). */
void lnt_ref_backward(const double *dy, const double *x, const double *g, const double *mu,
                         const double *rs, int64_t m, int n, double *dx, double *dg, double *db)
{
    for (int c = 0; c < n; c++) {
        if (dg != NULL)
            dg[c] = 0;
        if (db != NULL)
            db[c] = 0;
    }
    for (int64_t r = 0; r < m; r++) {
        const double *d = dy + r * n, *xr = x + r * n;
        double a = 0, bb = 0;
        for (int c = 0; c < n; c++) {
            const double xh = (xr[c] - mu[r]) * rs[r], gy = d[c] * (g ? g[c] : 1.0);
            a += gy;
            bb += gy * xh;
            if (dg != NULL)
                dg[c] += d[c] * xh;
            if (db != NULL)
                db[c] += d[c];
        }
        a /= n;
        bb /= n;
        for (int c = 0; c < n; c++) {
            const double xh = (xr[c] - mu[r]) * rs[r], gy = d[c] * (g ? g[c] : 1.0);
            dx[r * n + c] = rs[r] * (gy - a - xh * bb);
        }
    }
}

/* The mean's error against the rows' scale, as lnt_check_case_at measures it. */
double lnt_mean_error(const double *got, const double *mu, const double *x, int64_t m, int n)
{
    double e = 0, msq = 0;
    for (int64_t r = 0; r < m; r++) {
        e += (got[r] - mu[r]) * (got[r] - mu[r]);
        for (int c = 0; c < n; c++)
            msq += x[r * n + c] * x[r * n + c] / n;
    }
    return isnan(e) ? INFINITY : sqrt(e / msq);
}

/* Each plan in a fresh context (the plan is read at a context's first
 * LayerNorm), its rows at M of several rows per cluster (30-80 clusters
 * fit an H100) and not a multiple of the grid, every third in place, then
 * 37 rows of a large common offset, affine on and off in turn. */
void lnt_run_plans(const ln_plan_rows *plans, size_t count)
{
    const char *was = getenv("JITOP_LN_PLAN");
    char *saved = was != NULL ? strdup(was) : NULL;
    assert_true(was == NULL || saved != NULL);
    jitop_ctx *outer = lnt_ctx;
    for (size_t k = 0; k < count; k++) {
        assert_int_equal(setenv("JITOP_LN_PLAN", plans[k].plan, 1), 0);
        char *dir = jt_tmpdir();
        char *cache = jt_path(dir, "cache");
        lnt_ctx = jt_ctx_driver(cache);
        OK(jitop_ctx_cuda(lnt_ctx, NULL, NULL));
        for (size_t i = 0; i < 8 && plans[k].n[i] != 0; i++) {
            const jitop_dtype dt = plans[k].dt[i];
            const int n = plans[k].n[i];
            /* at most 24 Mi elements for the float64 reference */
            int64_t m = (24 << 20) / n;
            m = m > 601 ? 601 : m;
            lnt_check_case(dt, m, n, 1, i % 3 == 1 ? INPLACE : PLAIN);
            lnt_set_offset(dt);
            lnt_check_case(dt, 37, n, (int)(i % 2), PLAIN);
            lnt_x_offset = 0.0f;
        }
        jitop_ctx_destroy(lnt_ctx);
        free(cache);
        free(dir);
    }
    lnt_ctx = outer;
    assert_int_equal(saved != NULL ? setenv("JITOP_LN_PLAN", saved, 1) : unsetenv("JITOP_LN_PLAN"),
                     0);
    free(saved);
}

#endif /* __FLT16_MAX__ */
