/* jitop_layernorm_forward / _backward on a GPU against a float64 CPU
 * reference on fresh random inputs: every dtype, affine on and off, the row
 * lengths of issue 4 (1 to 65536, plus one past the specialized kernels),
 * M = 1, 3 and 1030 (64 for rows over 4096, to keep the CPU reference
 * quick; 200-300 where a cluster takes a row, so that each takes several),
 * in place, unaligned pointers, rows the 16-byte vector does not divide
 * at every offset within 16 bytes (test_odd_rows); outputs poisoned with
 * NaN before each run. The backward is also checked against float64 finite
 * differences of the reference loss, and for determinism; calls chained
 * without synchronization under programmatic dependent launch, the same
 * bits under every JITOP_LN_PDL, contexts of an arch below the device's
 * (compute_75, compute_80), and the backward's partial rows reused after
 * their L2 discard. Device memory goes through jitop's driver table, so
 * without libcuda.so.1 every test SKIPs (those that need no GPU run).
 * The context reads JITOP_LN_THREADS and JITOP_LN_PLAN when it first uses
 * LayerNorm, so the whole program checks the plan they name:
 *   JITOP_LN_PLAN=fwd_cluster_tpr=256,fwd_fit=1 \
 *   JITOP_TEST_FILTER=test_row_length_sweep build/tests/gpu/test_layernorm
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
#include "testutil.h"

static const jitop__cuda_api *cu;
static jitop_ctx *ctx; /* one context for the program: instances compile once */
static const float EPS = 1e-5f;

static const char *dname(jitop_dtype dt)
{
    return dt == JITOP_FLOAT32 ? "f32" : dt == JITOP_FLOAT16 ? "f16" : "bf16";
}

/* float32 well under 1e-3 (issue 4), 16-bit types under 1e-2. */
static double tol(jitop_dtype dt)
{
    return dt == JITOP_FLOAT32 ? 1e-4 : 1e-2;
}

/* -------------------------------------------------- host storage types */

static uint16_t f32_to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1u); /* round to nearest even */
    return (uint16_t)(u >> 16);
}

static float bf16_to_f32(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* Stores v as dtype into buf[i]; returns the value actually stored. */
static float store(jitop_dtype dt, void *buf, size_t i, float v)
{
    if (dt == JITOP_FLOAT32) {
        ((float *)buf)[i] = v;
        return v;
    }
    if (dt == JITOP_FLOAT16) {
        _Float16 h = (_Float16)v;
        memcpy((char *)buf + 2 * i, &h, 2);
        return (float)h;
    }
    uint16_t b = f32_to_bf16(v);
    memcpy((char *)buf + 2 * i, &b, 2);
    return bf16_to_f32(b);
}

static double load(jitop_dtype dt, const void *buf, size_t i)
{
    if (dt == JITOP_FLOAT32)
        return ((const float *)buf)[i];
    uint16_t b;
    memcpy(&b, (const char *)buf + 2 * i, 2);
    if (dt == JITOP_FLOAT16) {
        _Float16 h;
        memcpy(&h, &b, 2);
        return (double)h;
    }
    return bf16_to_f32(b);
}

/* ------------------------------------------------------ device helpers */

typedef struct dbuf {
    CUdeviceptr base; /* cuMemAlloc's: 256-byte aligned */
    CUdeviceptr p;    /* base + the offset asked (check_case_at's modes) */
    size_t bytes;
} dbuf;

static dbuf dalloc(size_t bytes, size_t offset)
{
    dbuf b = {0, 0, bytes};
    CU(cu->cuMemAlloc(&b.base, bytes + offset + 16));
    b.p = b.base + offset;
    return b;
}

static void dfree(dbuf *b)
{
    if (b->base)
        CU(cu->cuMemFree(b->base));
    b->base = b->p = 0;
}

/* 0xFF bytes: NaN in float32, float16 and bfloat16 alike. */
static void poison(dbuf b)
{
    CU(cu->cuMemsetD8(b.p, 0xFF, b.bytes));
}

static void *ptr(dbuf b)
{
    return (void *)(uintptr_t)b.p;
}

static void setup_ctx(void)
{
    if (ctx != NULL)
        return;
    char *dir = jt_tmpdir();
    char *cache = jt_path(dir, "cache");
    ctx = jt_ctx_driver(cache);
    OK(jitop_ctx_cuda(ctx, NULL, NULL));
    cu = jitop__cuda();
    assert_non_null(cu);
    free(dir);
    free(cache);
}

static int teardown_all(void **state)
{
    (void)state;
    jitop_ctx_destroy(ctx);
    ctx = NULL;
    jt_cleanup();
    return 0;
}

/* ------------------------------------------------------------ reference */

/* Row statistics in float64. */
static void ref_stats(const double *x, int64_t m, int n, double *mu, double *rs)
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

/* check_case_at's buffers: PLAIN at the allocation's base; INPLACE too,
 * with y == x and dx == dy; UNALIGNED every buffer one element past it
 * (gamma and beta too: narrower vectors); SPLIT y and dx one element past x
 * and dy (the row tensors at different offsets within 16 bytes, gamma and
 * beta aligned: for an N the 16-byte vector does not divide, the narrow
 * vectors, not the row-shifted path). */
enum { PLAIN, INPLACE, UNALIGNED, SPLIT };
static const char *const MODE_NAMES[] = {"plain", "in place", "unaligned", "split"};

/* check_case's rows: x_offset + x_spread * uniform(-1, 1) when x_offset is
 * not 0 (a common offset far larger than the spread: a variance from
 * E[x^2] - mean^2 in float32 would be off by 1e-3 to 20% there, where the
 * test allows 1e-5 of rstd), else a random shift and scale. */
static float x_offset, x_spread;

/* The offset and spread per dtype: the offset as large as float32's
 * rounding of the mean leaves y within the tolerance (1e-4), the spread
 * wide enough that the 16-bit values still differ (bfloat16 rounds 1000 +
 * u to a multiple of 4). */
static void set_offset(jitop_dtype dt)
{
    x_offset = dt == JITOP_FLOAT32 ? 100.0f : 1000.0f;
    x_spread = dt == JITOP_BFLOAT16 ? 16.0f : 1.0f;
}

/* One forward + backward on fresh random data, checked against float64;
 * the row tensors (x, y, dy, dx) k elements further past their buffers'
 * offsets (mode's), gamma, beta, dgamma and dbeta not: with k not a
 * multiple of the 16-byte vector even the first row starts off a 16-byte
 * boundary. */
static void check_case_at(jitop_dtype dt, int64_t m, int n, int affine, int mode, int k)
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
    if (x_offset != 0.0f) {
        shift = x_offset;
        scale = x_spread;
    }
    jt_random_floats(tmp, total, -1.0f, 1.0f);
    for (size_t i = 0; i < total; i++)
        x[i] = store(dt, hx, i, shift + scale * tmp[i]);
    jt_random_floats(tmp, total, -1.0f, 1.0f);
    for (size_t i = 0; i < total; i++)
        dy[i] = store(dt, hdy, i, tmp[i]);
    jt_random_floats(tmp, n, 0.5f, 1.5f);
    for (int i = 0; i < n; i++)
        g[i] = affine ? store(dt, hg, i, tmp[i]) : 1.0;
    jt_random_floats(tmp, n, -1.0f, 1.0f);
    for (int i = 0; i < n; i++)
        b[i] = affine ? store(dt, hb, i, tmp[i]) : 0.0;

    dbuf dx_ = dalloc(total * es, xoff), ddy = dalloc(total * es, xoff);
    dbuf dg = dalloc(n * es, poff), db = dalloc(n * es, poff);
    dbuf dout = mode == INPLACE ? dx_ : dalloc(total * es, yoff);
    dbuf dmean = dalloc(m * 4, 0), drstd = dalloc(m * 4, 0);
    dbuf dgg = dalloc(n * es, poff), dgb = dalloc(n * es, poff);
    CU(cu->cuMemcpyHtoD(dx_.p, hx, total * es));
    CU(cu->cuMemcpyHtoD(ddy.p, hdy, total * es));
    CU(cu->cuMemcpyHtoD(dg.p, hg, n * es));
    CU(cu->cuMemcpyHtoD(db.p, hb, n * es));
    if (mode != INPLACE)
        poison(dout);
    poison(dmean);
    poison(drstd);

    /* forward */
    OK(jitop_layernorm_forward(ctx, dt, m, n, EPS, ptr(dx_), affine ? ptr(dg) : NULL,
                               affine ? ptr(db) : NULL, ptr(dout), (float *)ptr(dmean),
                               (float *)ptr(drstd), NULL));
    CU(cu->cuCtxSynchronize());
    CU(cu->cuMemcpyDtoH(hout, dout.p, total * es));
    CU(cu->cuMemcpyDtoH(fm, dmean.p, m * 4));
    CU(cu->cuMemcpyDtoH(fr, drstd.p, m * 4));
    ref_stats(x, m, n, mu, rs);
    for (int64_t r = 0; r < m; r++)
        for (int c = 0; c < n; c++)
            want[r * n + c] = (x[r * n + c] - mu[r]) * rs[r] * g[c] + b[c];
    for (size_t i = 0; i < total; i++)
        got[i] = load(dt, hout, i);
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
        CU(cu->cuMemcpyHtoD(dx_.p, hx, total * es));
    dbuf ddx = mode == INPLACE ? ddy : dalloc(total * es, yoff);
    if (mode != INPLACE)
        poison(ddx);
    poison(dgg);
    poison(dgb);
    OK(jitop_layernorm_backward(ctx, dt, m, n, ptr(ddy), ptr(dx_), affine ? ptr(dg) : NULL,
                                (const float *)ptr(dmean), (const float *)ptr(drstd), ptr(ddx),
                                affine ? ptr(dgg) : NULL, affine ? ptr(dgb) : NULL, NULL));
    CU(cu->cuCtxSynchronize());
    CU(cu->cuMemcpyDtoH(hout, ddx.p, total * es));
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
        got[i] = load(dt, hout, i);
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
        CU(cu->cuMemcpyDtoH(hdg, dgg.p, n * es));
        CU(cu->cuMemcpyDtoH(hdb, dgb.p, n * es));
        for (int c = 0; c < n; c++) {
            gg[c] = load(dt, hdg, c);
            gb[c] = load(dt, hdb, c);
        }
        e_dg = jt_rel_error(gg, wg, n);
        e_db = jt_rel_error(gb, wb, n);
    }
    const double t = tol(dt);
    if (!(e_y < t && e_mu < 1e-5 && e_rs < 1e-5 && e_dx < t && e_dg < t && e_db < t))
        fail_msg("%s M=%lld N=%d affine=%d %s, rows %d elements in, common offset %g: rel err y "
                 "%.2e mean %.2e rstd %.2e dx %.2e dgamma %.2e dbeta %.2e (tolerance %.0e)",
                 dname(dt), (long long)m, n, affine, MODE_NAMES[mode], k, (double)x_offset,
                 e_y, e_mu, e_rs, e_dx, e_dg, e_db, t);

    dfree(&dx_);
    dfree(&ddy);
    dfree(&dg);
    dfree(&db);
    if (mode != INPLACE) {
        dfree(&dout);
        dfree(&ddx);
    }
    dfree(&dmean);
    dfree(&drstd);
    dfree(&dgg);
    dfree(&dgb);
    free(hx), free(hdy), free(hg), free(hb), free(hout), free(hdg), free(hdb);
    free(x), free(dy), free(g), free(b), free(want), free(got), free(mu), free(rs);
    free(wg), free(wb), free(gg), free(gb), free(gmu), free(grs), free(term);
    free(tmp), free(fm), free(fr);
}

/* The same with the row tensors at their buffers' offsets. */
static void check_case(jitop_dtype dt, int64_t m, int n, int affine, int mode)
{
    check_case_at(dt, m, n, affine, mode, 0);
}

/* ------------------------------------------- contexts and the environment */

/* The program's context while a test runs on one of its own (ctx, which
 * check_case_at uses, is then that one); restore_state puts it back, also
 * when the test fails, so that the tests after it run on the program's. */
static jitop_ctx *outer_ctx;

/* JITOP_LN_PDL as the program found it while a test sets its own (a
 * context reads it at its first LayerNorm call); restore_state puts it
 * back, also when the test fails. */
static int pdl_env_saved;
static char *pdl_env;

static void set_pdl_env(const char *value)
{
    if (!pdl_env_saved) {
        const char *was = getenv("JITOP_LN_PDL");
        pdl_env = was != NULL ? strdup(was) : NULL;
        assert_true(was == NULL || pdl_env != NULL);
        pdl_env_saved = 1;
    }
    assert_int_equal(setenv("JITOP_LN_PDL", value, 1), 0);
}

static void restore_pdl_env(void)
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
static jitop_ctx *new_ctx(const char *arch)
{
    jitop_config cfg;
    jitop_config_init(&cfg);
    cfg.cache_dir = jitop_cache_dir(outer_ctx != NULL ? outer_ctx : ctx);
    cfg.arch = arch;
    jitop_ctx *c = NULL;
    const int st = jitop_ctx_create(&cfg, &c);
    if (st != JITOP_OK)
        fail_msg("jitop_ctx_create (arch %s): %s: %s", arch ? arch : "the device's",
                 jitop_strerror(st), jitop_errmsg(NULL));
    return c;
}

/* Makes c the context the checks use (ctx), destroying the one a test
 * swapped in before, never the program's; opens c's driver. */
static void use_ctx(jitop_ctx *c)
{
    if (outer_ctx == NULL)
        outer_ctx = ctx;
    else if (ctx != outer_ctx)
        jitop_ctx_destroy(ctx);
    ctx = c;
    OK(jitop_ctx_cuda(ctx, NULL, NULL));
}

static void restore_ctx(void)
{
    if (outer_ctx == NULL)
        return;
    if (ctx != outer_ctx)
        jitop_ctx_destroy(ctx);
    ctx = outer_ctx;
    outer_ctx = NULL;
}

/* The teardown of the tests that swap the context or set JITOP_LN_PDL. */
static int restore_state(void **state)
{
    (void)state;
    restore_pdl_env();
    restore_ctx();
    return 0;
}

/* ------------------------------------------------- shared by the tests below */

/* count values uniform in [lo, hi) stored as dt into h; v: the values
 * stored (rounded to dt). */
static void draw(jitop_dtype dt, void *h, double *v, size_t count, float lo, float hi)
{
    float *tmp = malloc(count * sizeof *tmp);
    assert_non_null(tmp);
    jt_random_floats(tmp, count, lo, hi);
    for (size_t i = 0; i < count; i++)
        v[i] = store(dt, h, i, tmp[i]);
    free(tmp);
}

/* Rows as check_case_at draws them: a random shift and scale. */
static void draw_x(jitop_dtype dt, void *h, double *v, size_t count)
{
    float shift = 0, scale = 0;
    jt_random_floats(&shift, 1, -3.0f, 3.0f);
    jt_random_floats(&scale, 1, 0.5f, 4.0f);
    draw(dt, h, v, count, shift - scale, shift + scale);
}

/* A device copy of bytes at h (cuMemAlloc's alignment). */
static dbuf upload(const void *h, size_t bytes)
{
    dbuf b = dalloc(bytes, 0);
    CU(cu->cuMemcpyHtoD(b.p, h, bytes));
    return b;
}

/* count values of dt from the device, as float64. */
static void fetch(jitop_dtype dt, dbuf b, size_t count, double *out)
{
    const size_t es = jitop_dtype_size(dt);
    void *h = malloc(count * es);
    assert_non_null(h);
    CU(cu->cuMemcpyDtoH(h, b.p, count * es));
    for (size_t i = 0; i < count; i++)
        out[i] = load(dt, h, i);
    free(h);
}

/* The forward in float64: the row statistics and y (g, b NULL: 1, 0). */
static void ref_forward(const double *x, const double *g, const double *b, int64_t m, int n,
                        double *mu, double *rs, double *y)
{
    ref_stats(x, m, n, mu, rs);
    for (int64_t r = 0; r < m; r++)
        for (int c = 0; c < n; c++)
            y[r * n + c] = (x[r * n + c] - mu[r]) * rs[r] * (g ? g[c] : 1.0) + (b ? b[c] : 0.0);
}

/* The backward in float64 from dy, x, the float64 statistics and gamma
 * (NULL: 1): dx, and dgamma and dbeta where not NULL (as check_case_at). */
static void ref_backward(const double *dy, const double *x, const double *g, const double *mu,
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

/* The mean's error against the rows' scale, as check_case_at measures it. */
static double mean_error(const double *got, const double *mu, const double *x, int64_t m, int n)
{
    double e = 0, msq = 0;
    for (int64_t r = 0; r < m; r++) {
        e += (got[r] - mu[r]) * (got[r] - mu[r]);
        for (int c = 0; c < n; c++)
            msq += x[r * n + c] * x[r * n + c] / n;
    }
    return isnan(e) ? INFINITY : sqrt(e / msq);
}

static const int NS[] = {1, 7, 32, 33, 768, 1000, 1024, 4096, 8192, 12288, 32768, 65536};

/* Every N of issue 4 at M = 1, 3 and a larger M (1030 rows for short rows,
 * 64 for long ones, to keep the CPU reference fast), affine on and off. */
static void sweep(jitop_dtype dt)
{
    JT_REQUIRE_GPU();
    setup_ctx();
    for (size_t i = 0; i < sizeof NS / sizeof NS[0]; i++) {
        const int64_t ms[3] = {1, 3, NS[i] <= 4096 ? 1030 : 64};
        for (int k = 0; k < 3; k++)
            for (int affine = 1; affine >= 0; affine--)
                check_case(dt, ms[k], NS[i], affine, PLAIN);
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
    setup_ctx();
    static const int ns[] = {7, 33, 1000, 4096, 65536};
    const jitop_dtype dts[3] = {JITOP_FLOAT32, JITOP_FLOAT16, JITOP_BFLOAT16};
    for (int d = 0; d < 3; d++)
        for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++)
            for (int affine = 0; affine < 2; affine++) {
                check_case(dts[d], 3, ns[i], affine, INPLACE);
                check_case(dts[d], 3, ns[i], affine, UNALIGNED);
            }
}

/* Rows too long for the register-resident kernels take the generic one. */
static void test_long_rows(void **state)
{
    (void)state;
    JT_REQUIRE_GPU();
    setup_ctx();
    check_case(JITOP_FLOAT32, 2, 300007, 1, PLAIN);
    check_case(JITOP_BFLOAT16, 3, 131072, 1, PLAIN);
    check_case(JITOP_FLOAT16, 2, 300000, 0, UNALIGNED);
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
    setup_ctx();
    check_case(JITOP_FLOAT16, 300, 32768, 1, PLAIN);
    check_case(JITOP_BFLOAT16, 300, 24576, 1, INPLACE);
    check_case(JITOP_FLOAT32, 300, 20480, 1, PLAIN);
    check_case(JITOP_FLOAT32, 200, 32768, 0, PLAIN);
    /* several rows per cluster for rows over 4 and 8 blocks too (the
     * forward's copy-engine kernel under fwd_bulk=1), in place */
    check_case(JITOP_BFLOAT16, 256, 65536, 1, INPLACE);
    check_case(JITOP_FLOAT32, 256, 36864, 1, PLAIN);
}

/* A plan and the rows of each dtype to check under it (tests below). */
typedef struct ln_plan_rows {
    const char *plan;
    jitop_dtype dt[8];
    int n[8];
} ln_plan_rows;

/* Each plan in a fresh context (the plan is read at a context's first
 * LayerNorm), its rows at M of several rows per cluster (30-80 clusters
 * fit an H100) and not a multiple of the grid, every third in place, then
 * 37 rows of a large common offset, affine on and off in turn. */
static void run_plans(const ln_plan_rows *plans, size_t count)
{
    const char *was = getenv("JITOP_LN_PLAN");
    char *saved = was != NULL ? strdup(was) : NULL;
    assert_true(was == NULL || saved != NULL);
    jitop_ctx *outer = ctx;
    for (size_t k = 0; k < count; k++) {
        assert_int_equal(setenv("JITOP_LN_PLAN", plans[k].plan, 1), 0);
        char *dir = jt_tmpdir();
        char *cache = jt_path(dir, "cache");
        ctx = jt_ctx_driver(cache);
        OK(jitop_ctx_cuda(ctx, NULL, NULL));
        for (size_t i = 0; i < 8 && plans[k].n[i] != 0; i++) {
            const jitop_dtype dt = plans[k].dt[i];
            const int n = plans[k].n[i];
            /* at most 24 Mi elements for the float64 reference */
            int64_t m = (24 << 20) / n;
            m = m > 601 ? 601 : m;
            check_case(dt, m, n, 1, i % 3 == 1 ? INPLACE : PLAIN);
            set_offset(dt);
            check_case(dt, 37, n, (int)(i % 2), PLAIN);
            x_offset = 0.0f;
        }
        jitop_ctx_destroy(ctx);
        free(cache);
        free(dir);
    }
    ctx = outer;
    assert_int_equal(saved != NULL ? setenv("JITOP_LN_PLAN", saved, 1) : unsetenv("JITOP_LN_PLAN"),
                     0);
    free(saved);
}

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
 * offset (set_offset: the one-exchange variance is exact). */
static void test_forward_long_row_plans(void **state)
{
    (void)state;
    JT_REQUIRE_GPU();
    setup_ctx();
    static const ln_plan_rows plans[] = {
        /* the default kernels with one exchange: float32 register clusters,
         * 16-bit copy-engine rows of 120 KiB and more */
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
        /* 16-bit register clusters (rows over 256 threads) with one exchange */
        {"fwd_one_sync=1,fwd_bulk=0,h16_fwd_max_tpr=256,h16_fwd_cluster_tpr=256,h16_fwd_fit=1",
         {JITOP_FLOAT16, JITOP_BFLOAT16, JITOP_FLOAT16, JITOP_BFLOAT16, JITOP_FLOAT32},
         {24576, 40000, 36864, 49152, 40000}},
    };
    run_plans(plans, sizeof plans / sizeof plans[0]);
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
    setup_ctx();
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
    run_plans(plans, sizeof plans / sizeof plans[0]);
}

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
    setup_ctx();
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
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const int n = cases[i].n;
        int64_t m = (4 << 20) / n;
        m = m < 3 ? 3 : m > 2053 ? 2053 : m;
        check_case(cases[i].dt, m, n, 1, PLAIN);
        if (i % 2 == 0)
            check_case(cases[i].dt, m, n, 0, PLAIN);
    }
}

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
 * - OFFS: 37 shifted rows of a large common offset (set_offset), whose
 *   variance must stay exact over head, vectors and tail.
 * Then a few odd N under row_shift=0 (run_plans, a fresh context): the
 * narrow vectors that path still takes. */
static void test_odd_rows(void **state)
{
    (void)state;
    JT_REQUIRE_GPU();
    setup_ctx();
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
        /* the copy-engine forward's shifted rows (16-bit from 96 KiB,
         * float32 from 144 KiB): ragged 8-block shares of the body (49157,
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
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const jitop_dtype dt = cases[i].dt;
        const int n = cases[i].n, f = cases[i].flags, affine = (f & AFF) != 0;
        const int vec = (int)(16 / jitop_dtype_size(dt)), k = 1 + (int)(i % (size_t)(vec - 1));
        const int64_t full = odd_rows(n), few = n <= 8192 ? 37 : 5;
        check_case_at(dt, (f & FULLP) ? full : few, n, affine, PLAIN, 0);
        check_case_at(dt, (f & FULLP) ? few : full, n, affine, (f & INPL) ? INPLACE : PLAIN, k);
        if (f & UNAL) {
            check_case(dt, n <= 8192 ? 601 : 37, n, affine, UNALIGNED);
            check_case_at(dt, 37, n, affine, SPLIT, k);
        }
        if (f & OFFS) {
            set_offset(dt);
            check_case_at(dt, 37, n, affine, PLAIN, k);
            x_offset = 0.0f;
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
    run_plans(plans, sizeof plans / sizeof plans[0]);
}

/* L = sum(y * w) for a fixed w, in float64. */
static double ref_loss(const double *x, const double *g, const double *b, const double *w,
                       int64_t m, int n)
{
    double *mu = malloc(m * sizeof *mu), *rs = malloc(m * sizeof *rs), l = 0;
    assert_true(mu && rs);
    ref_stats(x, m, n, mu, rs);
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
    setup_ctx();
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
    dbuf dx_ = dalloc(total * 4, 0), dw = dalloc(total * 4, 0), dg = dalloc(n * 4, 0),
         db = dalloc(n * 4, 0), dy = dalloc(total * 4, 0), dmean = dalloc(m * 4, 0),
         drstd = dalloc(m * 4, 0), dgx = dalloc(total * 4, 0), dgg = dalloc(n * 4, 0),
         dgb = dalloc(n * 4, 0);
    CU(cu->cuMemcpyHtoD(dx_.p, hx, total * 4));
    CU(cu->cuMemcpyHtoD(dw.p, hw, total * 4));
    CU(cu->cuMemcpyHtoD(dg.p, hg, n * 4));
    CU(cu->cuMemcpyHtoD(db.p, hb, n * 4));
    poison(dgx);
    poison(dgg);
    poison(dgb);
    OK(jitop_layernorm_forward(ctx, JITOP_FLOAT32, m, n, EPS, ptr(dx_), ptr(dg), ptr(db), ptr(dy),
                               (float *)ptr(dmean), (float *)ptr(drstd), NULL));
    OK(jitop_layernorm_backward(ctx, JITOP_FLOAT32, m, n, ptr(dw), ptr(dx_), ptr(dg),
                                (const float *)ptr(dmean), (const float *)ptr(drstd), ptr(dgx),
                                ptr(dgg), ptr(dgb), NULL));
    CU(cu->cuCtxSynchronize());
    CU(cu->cuMemcpyDtoH(out, dgx.p, total * 4));
    CU(cu->cuMemcpyDtoH(og, dgg.p, n * 4));
    CU(cu->cuMemcpyDtoH(ob, dgb.p, n * 4));
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
        dfree(&all[i]);
}

/* dgamma/dbeta are reduced in a fixed order: two runs give the same bits. */
static void test_backward_deterministic(void **state)
{
    (void)state;
    JT_REQUIRE_GPU();
    setup_ctx();
    const int64_t m = 5000;
    const int n = 1024;
    const size_t total = (size_t)m * n;
    float *h = malloc(total * 4), *r1 = malloc(n * 4), *r2 = malloc(n * 4);
    assert_true(h && r1 && r2);
    dbuf x = dalloc(total * 4, 0), dy = dalloc(total * 4, 0), g = dalloc(n * 4, 0),
         y = dalloc(total * 4, 0), mean = dalloc(m * 4, 0), rstd = dalloc(m * 4, 0),
         dx = dalloc(total * 4, 0), dg = dalloc(n * 4, 0);
    jt_random_floats(h, total, -1.0f, 2.0f);
    CU(cu->cuMemcpyHtoD(x.p, h, total * 4));
    jt_random_floats(h, total, -1.0f, 1.0f);
    CU(cu->cuMemcpyHtoD(dy.p, h, total * 4));
    jt_random_floats(h, n, 0.5f, 1.5f);
    CU(cu->cuMemcpyHtoD(g.p, h, n * 4));
    OK(jitop_layernorm_forward(ctx, JITOP_FLOAT32, m, n, EPS, ptr(x), ptr(g), NULL, ptr(y),
                               (float *)ptr(mean), (float *)ptr(rstd), NULL));
    for (int run = 0; run < 2; run++) {
        poison(dg);
        OK(jitop_layernorm_backward(ctx, JITOP_FLOAT32, m, n, ptr(dy), ptr(x), ptr(g),
                                    (const float *)ptr(mean), (const float *)ptr(rstd), ptr(dx),
                                    ptr(dg), NULL, NULL));
        CU(cu->cuCtxSynchronize());
        CU(cu->cuMemcpyDtoH(run ? r2 : r1, dg.p, n * 4));
    }
    assert_memory_equal(r1, r2, n * 4);
    for (int i = 0; i < n; i++)
        assert_false(isnan(r1[i]));
    dbuf all[] = {x, dy, g, y, mean, rstd, dx, dg};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        dfree(&all[i]);
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
    ref_backward(dy, x, g, mu, rs, m, n, want, wg, wb);
    fetch(dt, ddx, total, got);
    fetch(dt, ddg, (size_t)n, gg);
    fetch(dt, ddb, (size_t)n, gb);
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
    draw_x(dt, hx, x, total);
    draw(dt, hg, g, n, 0.5f, 1.5f);
    draw(dt, hb, b, n, -1.0f, 1.0f);
    dbuf dX = upload(hx, total * es), dG = upload(hg, n * es), dB = upload(hb, n * es);
    dbuf out[9] = {dalloc(total * es, 0), dalloc(m * 4, 0),   dalloc(m * 4, 0),
                   dalloc(total * es, 0), dalloc(n * es, 0),  dalloc(n * es, 0),
                   dalloc(total * es, 0), dalloc(n * es, 0),  dalloc(n * es, 0)};
    const dbuf dY = out[0], dmean = out[1], drstd = out[2], ddx1 = out[3], ddg1 = out[4],
               ddb1 = out[5], ddx2 = out[6], ddg2 = out[7], ddb2 = out[8];
    for (int i = 0; i < 9; i++)
        poison(out[i]);
    /* the copies and the poison went to the legacy stream, which a
     * non-blocking stream does not wait for */
    CU(cu->cuCtxSynchronize());
    OK(jitop_layernorm_forward(ctx, dt, m, n, EPS, ptr(dX), ptr(dG), ptr(dB), ptr(dY),
                               (float *)ptr(dmean), (float *)ptr(drstd), stream));
    OK(jitop_layernorm_backward(ctx, dt, m, n, ptr(dY), ptr(dX), ptr(dG), (const float *)ptr(dmean),
                                (const float *)ptr(drstd), ptr(ddx1), ptr(ddg1), ptr(ddb1),
                                stream));
    OK(jitop_layernorm_backward(ctx, dt, m, n, ptr(ddx1), ptr(dX), ptr(dG),
                                (const float *)ptr(dmean), (const float *)ptr(drstd), ptr(ddx2),
                                ptr(ddg2), ptr(ddb2), stream));
    CU(cu->cuCtxSynchronize());

    /* the forward */
    ref_forward(x, g, b, m, n, mu, rs, want);
    fetch(dt, dY, total, y);
    fetch(JITOP_FLOAT32, dmean, (size_t)m, fm);
    fetch(JITOP_FLOAT32, drstd, (size_t)m, fr);
    const double e_y = jt_rel_error(y, want, total), e_mu = mean_error(fm, mu, x, m, n),
                 e_rs = jt_rel_error(fr, rs, (size_t)m);
    /* backward #1, dy = y as stored */
    double e1[3], e2[3];
    backward_errors(dt, y, x, g, mu, rs, m, n, ddx1, ddg1, ddb1, dx1, want, wg, wb, gg, gb, e1);
    /* backward #2, dy = dx1 as stored (y's buffer takes dx2) */
    backward_errors(dt, dx1, x, g, mu, rs, m, n, ddx2, ddg2, ddb2, y, want, wg, wb, gg, gb, e2);
    const double t = tol(dt);
    if (!(e_y < t && e_mu < 1e-5 && e_rs < 1e-5 && e1[0] < t && e1[1] < t && e1[2] < t &&
          e2[0] < t && e2[1] < t && e2[2] < t))
        fail_msg("chain %s M=%lld N=%d on %s stream: rel err y %.2e mean %.2e rstd %.2e; "
                 "backward #1 (dy = y) dx %.2e dgamma %.2e dbeta %.2e; backward #2 (dy = dx1) "
                 "dx %.2e dgamma %.2e dbeta %.2e (tolerance %.0e)",
                 dname(dt), (long long)m, n, stream ? "a created" : "the legacy", e_y, e_mu, e_rs,
                 e1[0], e1[1], e1[2], e2[0], e2[1], e2[2], t);
    for (int i = 0; i < 9; i++)
        dfree(&out[i]);
    dfree(&dX);
    dfree(&dG);
    dfree(&dB);
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
    setup_ctx();
    CUstream stream = NULL;
    CU(cu->cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
    for (size_t i = 0; i < sizeof PDL_CASES / sizeof PDL_CASES[0]; i++) {
        check_chain(PDL_CASES[i].dt, PDL_CASES[i].m, PDL_CASES[i].n, NULL);
        check_chain(PDL_CASES[i].dt, PDL_CASES[i].m, PDL_CASES[i].n, stream);
    }
    CU(cu->cuStreamDestroy(stream));
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

/* The producer's op on ctx. */
static jitop_op *late_copy_op(void)
{
    char *dir = jt_tmpdir();
    char *path = jt_write(dir, "late_copy.cu", LATE_COPY_SRC);
    const char *srcs[1] = {path};
    jitop_module *m = NULL;
    jitop_op *op = NULL;
    OK(jitop_load(ctx, "ln_test_late", srcs, 1, NULL, 0, &m));
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
    draw_x(dt, hx, x, total);
    draw(dt, hdy, dy, total, -1.0f, 1.0f);
    draw(dt, hg, g, n, 0.5f, 1.5f);
    draw(dt, hb, b, n, -1.0f, 1.0f);
    /* the late input's staging copy; its real buffer starts as NaN */
    dbuf stage = upload(bwd ? hdy : hx, total * es), late = dalloc(total * es, 0);
    dbuf dX = bwd ? upload(hx, total * es) : late, dDY = bwd ? late : stage;
    dbuf dG = upload(hg, n * es), dB = upload(hb, n * es), dY = dalloc(total * es, 0),
         dmean = dalloc(m * 4, 0), drstd = dalloc(m * 4, 0), ddx = dalloc(total * es, 0),
         ddg = dalloc(n * es, 0), ddb = dalloc(n * es, 0);
    dbuf poisoned[] = {late, dY, ddx, ddg, ddb};
    for (size_t i = 0; i < sizeof poisoned / sizeof poisoned[0]; i++)
        poison(poisoned[i]);
    CU(cu->cuCtxSynchronize());
    if (bwd) /* mean and rstd; y is not checked here */
        OK(jitop_layernorm_forward(ctx, dt, m, n, EPS, ptr(dX), ptr(dG), ptr(dB), ptr(dY),
                                   (float *)ptr(dmean), (float *)ptr(drstd), stream));
    CU(cu->cuCtxSynchronize());
    jitop_op *copy = late_copy_op();
    long long count = (long long)(total * es);
    void *args[] = {&stage.p, &late.p, &count};
    size_t sizes[] = {8, 8, 8};
    OK(jitop_launch(copy, (jitop_dim3){8, 1, 1}, (jitop_dim3){256, 1, 1}, 0, stream, args, sizes,
                    3));
    if (bwd)
        OK(jitop_layernorm_backward(ctx, dt, m, n, ptr(dDY), ptr(dX), ptr(dG),
                                    (const float *)ptr(dmean), (const float *)ptr(drstd),
                                    ptr(ddx), ptr(ddg), ptr(ddb), stream));
    else
        OK(jitop_layernorm_forward(ctx, dt, m, n, EPS, ptr(dX), ptr(dG), ptr(dB), ptr(dY),
                                   (float *)ptr(dmean), (float *)ptr(drstd), stream));
    CU(cu->cuCtxSynchronize());
    ref_stats(x, m, n, mu, rs);
    double e[3] = {0, 0, 0};
    if (bwd) {
        backward_errors(dt, dy, x, g, mu, rs, m, n, ddx, ddg, ddb, got, want, wg, wb, gg, gb, e);
    } else {
        ref_forward(x, g, b, m, n, mu, rs, want);
        fetch(dt, dY, total, got);
        e[0] = jt_rel_error(got, want, total);
    }
    const double t = tol(dt);
    if (!(e[0] < t && e[1] < t && e[2] < t))
        fail_msg("%s %s M=%lld N=%d behind a producer that released it early: rel err %s %.2e "
                 "dgamma %.2e dbeta %.2e (tolerance %.0e; NaN: read before the producer wrote)",
                 bwd ? "backward" : "forward", dname(dt), (long long)m, n, bwd ? "dx" : "y", e[0],
                 e[1], e[2], t);
    dbuf all[] = {stage, late, dG, dB, dY, dmean, drstd, ddx, ddg, ddb};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        dfree(&all[i]);
    if (bwd)
        dfree(&dX);
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
    setup_ctx();
    CUstream stream = NULL;
    CU(cu->cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
    for (size_t i = 0; i < sizeof PDL_CASES / sizeof PDL_CASES[0]; i++)
        check_late_input(PDL_CASES[i].dt, PDL_CASES[i].m, PDL_CASES[i].n, 1, stream);
    set_pdl_env("1");
    use_ctx(new_ctx(NULL));
    for (size_t i = 0; i < sizeof PDL_CASES / sizeof PDL_CASES[0]; i++)
        check_late_input(PDL_CASES[i].dt, PDL_CASES[i].m, PDL_CASES[i].n, 0, stream);
    restore_ctx();
    restore_pdl_env();
    CU(cu->cuStreamDestroy(stream));
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

/* Forward + backward (affine) of k on ctx, the outputs poisoned first, read
 * back into hy ... hrstd. */
static void run_pdl_case(const pdl_case *k, void *hy, void *hdx, void *hdg, void *hdb,
                         float *hmean, float *hrstd)
{
    const size_t es = jitop_dtype_size(k->dt), total = (size_t)k->m * (size_t)k->n;
    const dbuf outs[] = {k->y, k->mean, k->rstd, k->dx, k->dg, k->db};
    for (size_t i = 0; i < sizeof outs / sizeof outs[0]; i++)
        poison(outs[i]);
    OK(jitop_layernorm_forward(ctx, k->dt, k->m, k->n, EPS, ptr(k->x), ptr(k->g), ptr(k->b),
                               ptr(k->y), (float *)ptr(k->mean), (float *)ptr(k->rstd), NULL));
    OK(jitop_layernorm_backward(ctx, k->dt, k->m, k->n, ptr(k->dy), ptr(k->x), ptr(k->g),
                                (const float *)ptr(k->mean), (const float *)ptr(k->rstd),
                                ptr(k->dx), ptr(k->dg), ptr(k->db), NULL));
    CU(cu->cuCtxSynchronize());
    CU(cu->cuMemcpyDtoH(hy, k->y.p, total * es));
    CU(cu->cuMemcpyDtoH(hdx, k->dx.p, total * es));
    CU(cu->cuMemcpyDtoH(hdg, k->dg.p, (size_t)k->n * es));
    CU(cu->cuMemcpyDtoH(hdb, k->db.p, (size_t)k->n * es));
    CU(cu->cuMemcpyDtoH(hmean, k->mean.p, (size_t)k->m * 4));
    CU(cu->cuMemcpyDtoH(hrstd, k->rstd.p, (size_t)k->m * 4));
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
             setting, dname(k->dt), (long long)k->m, k->n, what, i, count);
}

/* Fails where any of count values of dt at h is NaN (the poison left). */
static void expect_written(const pdl_case *k, const char *what, jitop_dtype dt, const void *h,
                           size_t count)
{
    for (size_t i = 0; i < count; i++)
        if (isnan(load(dt, h, i)))
            fail_msg("%s M=%lld N=%d: %s[%zu] is NaN", dname(k->dt), (long long)k->m, k->n, what,
                     i);
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
    setup_ctx();
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
        draw_x(k->dt, h, v, total);
        k->x = upload(h, total * es);
        draw(k->dt, h, v, total, -1.0f, 1.0f);
        k->dy = upload(h, total * es);
        draw(k->dt, h, v, n, 0.5f, 1.5f);
        k->g = upload(h, n * es);
        draw(k->dt, h, v, n, -1.0f, 1.0f);
        k->b = upload(h, n * es);
        free(h);
        free(v);
        k->y = dalloc(total * es, 0);
        k->dx = dalloc(total * es, 0);
        k->dg = dalloc(n * es, 0);
        k->db = dalloc(n * es, 0);
        k->mean = dalloc(m * 4, 0);
        k->rstd = dalloc(m * 4, 0);
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
        set_pdl_env(settings[s]);
        use_ctx(new_ctx(NULL));
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
    restore_ctx();
    restore_pdl_env();
    for (int c = 0; c < NCASES; c++) {
        pdl_case *k = &cases[c];
        dbuf *all[] = {&k->x, &k->dy, &k->g, &k->b, &k->y, &k->mean, &k->rstd, &k->dx, &k->dg,
                       &k->db};
        for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
            dfree(all[i]);
        free(k->hy), free(k->hdx), free(k->hdg), free(k->hdb), free(k->hmean), free(k->hrstd);
    }
    free(hy), free(hdx), free(hdg), free(hdb), free(hmean), free(hrstd);
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
    setup_ctx();
    static const char *const archs[] = {"compute_75", "compute_80"};
    static const int ns[] = {1000, 1001, 4096, 12289, 65536};
    const jitop_dtype dts[3] = {JITOP_FLOAT16, JITOP_BFLOAT16, JITOP_FLOAT32};
    for (size_t a = 0; a < sizeof archs / sizeof archs[0]; a++) {
        use_ctx(new_ctx(archs[a]));
        const char *arch = NULL;
        OK(jitop_ctx_arch(ctx, &arch));
        assert_string_equal(arch, archs[a]);
        print_message("context arch %s\n", arch);
        for (int d = 0; d < 3; d++)
            for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++) {
                OK(jitop_layernorm_prewarm(ctx, NULL, dts[d], ns[i]));
                for (int affine = 1; affine >= 0; affine--)
                    check_case(dts[d], ns[i] == 65536 ? 8 : 64, ns[i], affine, PLAIN);
            }
    }
    restore_ctx();
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
    set_pdl_env("sometimes");
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
    set_pdl_env("bwd");
    rc = jitop_layernorm_forward(c, JITOP_FLOAT32, 4, 4, EPS, dummy, NULL, NULL, dummy, NULL, NULL,
                                 NULL);
    assert_int_equal(rc, JITOP_ENODRIVER);
    restore_pdl_env();
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
    setup_ctx();
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
        draw_x(dt, hx, x, total);
        draw(dt, hg, g, n, 0.5f, 1.5f);
        draw(dt, hb, b, n, -1.0f, 1.0f);
        ref_stats(x, m, n, mu, rs);
        dbuf dX = upload(hx, total * es), dG = upload(hg, n * es), dB = upload(hb, n * es);
        dbuf dY = dalloc(total * es, 0), dmean = dalloc(m * 4, 0), drstd = dalloc(m * 4, 0);
        dbuf ddy[3], ddx[3], dgg[3], dgb[3];
        for (int k = 0; k < 3; k++) {
            ddy[k] = dalloc(total * es, 0);
            ddx[k] = dalloc(total * es, 0);
            dgg[k] = dalloc(n * es, 0);
            dgb[k] = dalloc(n * es, 0);
        }
        OK(jitop_layernorm_forward(ctx, dt, m, n, EPS, ptr(dX), ptr(dG), ptr(dB), ptr(dY),
                                   (float *)ptr(dmean), (float *)ptr(drstd), NULL));
        for (int round = 0; round < 2; round++) {
            for (int k = 0; k < 3; k++) {
                draw(dt, hdy[k], dy, total, -1.0f, 1.0f);
                CU(cu->cuMemcpyHtoD(ddy[k].p, hdy[k], total * es));
                poison(ddx[k]);
                poison(dgg[k]);
                poison(dgb[k]);
            }
            for (int k = 0; k < 3; k++) {
                OK(jitop_layernorm_backward(ctx, dt, m, n, ptr(ddy[k]), ptr(dX), ptr(dG),
                                            (const float *)ptr(dmean), (const float *)ptr(drstd),
                                            ptr(ddx[k]), k != 1 ? ptr(dgg[k]) : NULL,
                                            k != 0 ? ptr(dgb[k]) : NULL, NULL));
                if (round == 0 || k == 2)
                    CU(cu->cuCtxSynchronize());
            }
            for (int k = 0; k < 3; k++) {
                for (size_t j = 0; j < total; j++)
                    dy[j] = load(dt, hdy[k], j);
                ref_backward(dy, x, g, mu, rs, m, n, want, wg, wb);
                fetch(dt, ddx[k], total, got);
                const double e_dx = jt_rel_error(got, want, total);
                double e_dg = 0, e_db = 0;
                if (k != 1) {
                    fetch(dt, dgg[k], (size_t)n, gg);
                    e_dg = jt_rel_error(gg, wg, (size_t)n);
                }
                if (k != 0) {
                    fetch(dt, dgb[k], (size_t)n, gb);
                    e_db = jt_rel_error(gb, wb, (size_t)n);
                }
                const double t = tol(dt);
                if (!(e_dx < t && e_dg < t && e_db < t))
                    fail_msg("%s M=%lld N=%d, backward %d of 3 (%s), %s: rel err dx %.2e dgamma "
                             "%.2e dbeta %.2e (tolerance %.0e)",
                             dname(dt), (long long)m, n, k + 1, what[k],
                             round == 0 ? "synchronized after each" : "back to back", e_dx, e_dg,
                             e_db, t);
            }
        }
        for (int k = 0; k < 3; k++) {
            dfree(&ddy[k]);
            dfree(&ddx[k]);
            dfree(&dgg[k]);
            dfree(&dgb[k]);
            free(hdy[k]);
        }
        dfree(&dX), dfree(&dG), dfree(&dB), dfree(&dY), dfree(&dmean), dfree(&drstd);
        free(hx), free(hg), free(hb), free(x), free(dy), free(want), free(got), free(g), free(b);
        free(wg), free(wb), free(gg), free(gb), free(mu), free(rs);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_argument_errors),
        cmocka_unit_test_teardown(test_bad_pdl_setting, restore_state),
        cmocka_unit_test(test_bad_arch_setting),
        cmocka_unit_test(test_backward_finite_differences),
        cmocka_unit_test(test_backward_deterministic),
        cmocka_unit_test(test_f32),
        cmocka_unit_test(test_f16),
        cmocka_unit_test(test_bf16),
        cmocka_unit_test(test_inplace_unaligned),
        cmocka_unit_test(test_long_rows),
        cmocka_unit_test(test_cluster_rows_reused),
        cmocka_unit_test(test_row_length_sweep),
        cmocka_unit_test(test_odd_rows),
        cmocka_unit_test(test_forward_long_row_plans),
        cmocka_unit_test(test_backward_stage_plans),
        cmocka_unit_test(test_programmatic_chain),
        cmocka_unit_test_teardown(test_programmatic_early_release, restore_state),
        cmocka_unit_test_teardown(test_programmatic_settings_agree, restore_state),
        cmocka_unit_test_teardown(test_ctx_arch_below_device, restore_state),
        cmocka_unit_test(test_backward_partials_reused),
    };
    const char *filter = getenv("JITOP_TEST_FILTER");
    if (filter != NULL && *filter != '\0')
        cmocka_set_test_filter(filter);
    return cmocka_run_group_tests(tests, NULL, teardown_all);
}
