/* The LLTM op (kernels/lltm.cu through src/ops/lltm.c) on a GPU: forward and
 * backward against a float64 CPU reference on fresh random inputs, for both
 * paths (fused kernels, cuBLAS products) and both dtypes, at sizes from 1 to
 * the tutorial's large 256/1024/4096; a finite-difference gradcheck of the
 * backward in float64; inference (no saved buffer) equal to training; and
 * argument errors. Outputs are poisoned with NaN before every run. The
 * driver is used through jitop's own table, so without libcuda.so.1 every
 * GPU test SKIPs. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "load/driver.h"
#include "jitop.h"
#include "gputest.h"
#include "testutil.h"

static const jitop__cuda_api *cu;
static char *cache_root; /* one fresh cache for the program: instances compile once */

/* A context whose LLTM calls take path ("fused", "cublas" or NULL for the
 * automatic choice; read at the context's first LLTM call). */
static jitop_ctx *lltm_ctx(const char *path)
{
    if (path)
        setenv("JITOP_LLTM_PATH", path, 1);
    else
        unsetenv("JITOP_LLTM_PATH");
    if (cache_root == NULL)
        cache_root = jt_tmpdir();
    char *cache = jt_path(cache_root, "cache");
    jitop_ctx *ctx = jt_ctx_driver(cache);
    OK(jitop_ctx_cuda(ctx, NULL, NULL));
    cu = jitop__cuda();
    assert_non_null(cu);
    free(cache);
    return ctx;
}

/* ---------------------------------------------------------- host tensors */

typedef struct lltm_case {
    int B, I, S, K;
    jitop_dtype dtype;
    double *input, *weights, *bias, *old_h, *old_cell, *grad_h, *grad_cell;
} lltm_case;

static double *rnd(size_t n, double scale)
{
    double *v = malloc(n * sizeof *v);
    assert_non_null(v);
    jt_random_doubles(v, n, -scale, scale);
    return v;
}

/* Fresh random inputs. Weights scaled by 2/sqrt(K) keep the gates O(1), so
 * both sides of elu and the saturating parts of the sigmoids are exercised. */
static void case_init(lltm_case *c, jitop_dtype dtype, int B, int I, int S)
{
    c->B = B, c->I = I, c->S = S, c->K = S + I, c->dtype = dtype;
    c->input = rnd((size_t)B * I, 1.0);
    c->weights = rnd((size_t)3 * S * c->K, 2.0 / sqrt((double)c->K));
    c->bias = rnd((size_t)3 * S, 0.5);
    c->old_h = rnd((size_t)B * S, 1.0);
    c->old_cell = rnd((size_t)B * S, 1.0);
    c->grad_h = rnd((size_t)B * S, 1.0);
    c->grad_cell = rnd((size_t)B * S, 1.0);
    if (dtype == JITOP_FLOAT32) {
        /* The reference sees exactly the values the GPU sees. */
        double *all[] = {c->input, c->weights, c->bias, c->old_h, c->old_cell, c->grad_h, c->grad_cell};
        size_t ns[] = {(size_t)B * I, (size_t)3 * S * c->K, (size_t)3 * S, (size_t)B * S,
                       (size_t)B * S, (size_t)B * S, (size_t)B * S};
        for (int a = 0; a < 7; a++)
            for (size_t i = 0; i < ns[a]; i++)
                all[a][i] = (float)all[a][i];
    }
}

static void case_free(lltm_case *c)
{
    free(c->input), free(c->weights), free(c->bias), free(c->old_h), free(c->old_cell);
    free(c->grad_h), free(c->grad_cell);
}

/* ------------------------------------------------------- device tensors */

static size_t esize(jitop_dtype t)
{
    return t == JITOP_FLOAT64 ? 8 : 4;
}

static CUdeviceptr upload(const double *v, size_t n, jitop_dtype t)
{
    CUdeviceptr p = 0;
    CU(cu->cuMemAlloc(&p, n * esize(t) + 16));
    if (t == JITOP_FLOAT64) {
        CU(cu->cuMemcpyHtoD(p, v, n * 8));
    } else {
        float *f = malloc(n * sizeof *f + 1);
        assert_non_null(f);
        for (size_t i = 0; i < n; i++)
            f[i] = (float)v[i];
        CU(cu->cuMemcpyHtoD(p, f, n * 4));
        free(f);
    }
    return p;
}

/* A device buffer of n elements full of NaN (all bits set). */
static CUdeviceptr poisoned(size_t n, jitop_dtype t)
{
    CUdeviceptr p = 0;
    CU(cu->cuMemAlloc(&p, n * esize(t) + 16));
    CU(cu->cuMemsetD8(p, 0xff, n * esize(t) + 16));
    return p;
}

static double *download(CUdeviceptr p, size_t n, jitop_dtype t)
{
    double *v = malloc(n * sizeof *v + 1);
    assert_non_null(v);
    if (t == JITOP_FLOAT64) {
        CU(cu->cuMemcpyDtoH(v, p, n * 8));
    } else {
        float *f = malloc(n * sizeof *f + 1);
        assert_non_null(f);
        CU(cu->cuMemcpyDtoH(f, p, n * 4));
        for (size_t i = 0; i < n; i++)
            v[i] = f[i];
        free(f);
    }
    return v;
}

typedef struct lltm_dev {
    CUdeviceptr input, weights, bias, old_h, old_cell, grad_h, grad_cell;
    CUdeviceptr new_h, new_cell, saved, d_old_h, d_input, d_weights, d_bias, d_old_cell;
} lltm_dev;

static void dev_init(lltm_dev *d, const lltm_case *c)
{
    jitop_dtype t = c->dtype;
    size_t B = c->B, I = c->I, S = c->S, K = c->K;
    d->input = upload(c->input, B * I, t);
    d->weights = upload(c->weights, 3 * S * K, t);
    d->bias = upload(c->bias, 3 * S, t);
    d->old_h = upload(c->old_h, B * S, t);
    d->old_cell = upload(c->old_cell, B * S, t);
    d->grad_h = upload(c->grad_h, B * S, t);
    d->grad_cell = upload(c->grad_cell, B * S, t);
    d->new_h = poisoned(B * S, t);
    d->new_cell = poisoned(B * S, t);
    d->saved = poisoned(jitop_lltm_saved_size(t, c->B, c->I, c->S) / esize(t), t);
    d->d_old_h = poisoned(B * S, t);
    d->d_input = poisoned(B * I, t);
    d->d_weights = poisoned(3 * S * K, t);
    d->d_bias = poisoned(3 * S, t);
    d->d_old_cell = poisoned(B * S, t);
}

static void dev_free(lltm_dev *d)
{
    CUdeviceptr all[] = {d->input, d->weights, d->bias, d->old_h, d->old_cell, d->grad_h,
                         d->grad_cell, d->new_h, d->new_cell, d->saved, d->d_old_h, d->d_input,
                         d->d_weights, d->d_bias, d->d_old_cell};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        CU(cu->cuMemFree(all[i]));
}

#define P(x) ((void *)(uintptr_t)(x))

static void dev_forward(jitop_ctx *ctx, const lltm_case *c, lltm_dev *d, int save)
{
    OK(jitop_lltm_forward(ctx, c->dtype, c->B, c->I, c->S, P(d->input), P(d->weights),
                          P(d->bias), P(d->old_h), P(d->old_cell), P(d->new_h), P(d->new_cell),
                          save ? P(d->saved) : NULL, NULL));
}

static void dev_backward(jitop_ctx *ctx, const lltm_case *c, lltm_dev *d)
{
    OK(jitop_lltm_backward(ctx, c->dtype, c->B, c->I, c->S, P(d->grad_h), P(d->grad_cell),
                           P(d->saved), P(d->weights), P(d->d_old_h), P(d->d_input),
                           P(d->d_weights), P(d->d_bias), P(d->d_old_cell), NULL));
}

/* ------------------------------------------------------ CPU reference */

static double sigm(double x)
{
    return 1.0 / (1.0 + exp(-x));
}

static double xval(const lltm_case *c, int b, int k)
{
    return k < c->S ? c->old_h[(size_t)b * c->S + k] : c->input[(size_t)b * c->I + (k - c->S)];
}

static double gate(const lltm_case *c, int b, int g)
{
    const double *w = c->weights + (size_t)g * c->K;
    double s = c->bias[g];
    for (int k = 0; k < c->S; k++)
        s += c->old_h[(size_t)b * c->S + k] * w[k];
    for (int k = 0; k < c->I; k++)
        s += c->input[(size_t)b * c->I + k] * w[c->S + k];
    return s;
}

/* Everything the reference derives from the three gates at (b, j). */
typedef struct cell {
    double nh, nc, d_nc, g[3];
} cell;

static cell cell_at(const lltm_case *c, int b, int j, double g0, double g1, double g2)
{
    cell r;
    double ig = sigm(g0), og = sigm(g1), cand = g2 > 0 ? g2 : expm1(g2);
    size_t o = (size_t)b * c->S + j;
    r.nc = c->old_cell[o] + cand * ig;
    double t = tanh(r.nc);
    r.nh = t * og;
    double gh = c->grad_h[o];
    r.d_nc = (1 - t * t) * og * gh + c->grad_cell[o];
    r.g[0] = cand * r.d_nc * ig * (1 - ig);
    r.g[1] = t * gh * og * (1 - og);
    r.g[2] = ig * r.d_nc * (g2 > 0 ? 1.0 : exp(g2));
    return r;
}

/* Checks the GPU's outputs (already downloaded in full) on the rows rows[]
 * (batch rows: new_h, new_cell, d_old_cell, d_old_h, d_input) and the state
 * columns cols[] (d_weights and d_bias rows j, S+j, 2S+j), against float64
 * values computed here. Returns the worst ||gpu - ref|| / ||ref||. */
static double check_outputs(const lltm_case *c, const int *rows, int nrows, const int *cols,
                            int ncols, const double *nh, const double *nc, const double *dh,
                            const double *di, const double *dw, const double *db,
                            const double *dc, const char *label)
{
    int B = c->B, S = c->S, I = c->I, K = c->K;
    size_t nr = (size_t)nrows * S;
    double *ref = malloc(sizeof(double) * (nr * 3 + (size_t)nrows * K));
    double *got = malloc(sizeof(double) * (nr * 3 + (size_t)nrows * K));
    double *grow = malloc(sizeof(double) * 3 * S);
    assert_true(ref && got && grow);
    double worst = 0;
    /* Rows: forward outputs, d_old_cell, and d_X = G W. */
    for (int r = 0; r < nrows; r++) {
        int b = rows[r];
        for (int j = 0; j < S; j++) {
            cell e = cell_at(c, b, j, gate(c, b, j), gate(c, b, S + j), gate(c, b, 2 * S + j));
            size_t o = (size_t)b * S + j, q = (size_t)r * S + j;
            ref[q] = e.nh, got[q] = nh[o];
            ref[nr + q] = e.nc, got[nr + q] = nc[o];
            ref[2 * nr + q] = e.d_nc, got[2 * nr + q] = dc[o];
            grow[j] = e.g[0], grow[S + j] = e.g[1], grow[2 * S + j] = e.g[2];
        }
        double *dx = ref + 3 * nr + (size_t)r * K;
        for (int k = 0; k < K; k++)
            dx[k] = 0;
        for (int g = 0; g < 3 * S; g++) {
            const double *w = c->weights + (size_t)g * K;
            double gg = grow[g];
            for (int k = 0; k < K; k++)
                dx[k] += gg * w[k];
        }
        double *gx = got + 3 * nr + (size_t)r * K;
        for (int k = 0; k < K; k++)
            gx[k] = k < S ? dh[(size_t)b * S + k] : di[(size_t)b * I + (k - S)];
    }
    const char *names[] = {"new_h", "new_cell", "d_old_cell"};
    for (int a = 0; a < 3; a++) {
        double e = jt_rel_error(got + a * nr, ref + a * nr, nr);
        print_message("  %s %-10s rel err %.3e\n", label, names[a], e);
        worst = e > worst ? e : worst;
    }
    double e = jt_rel_error(got + 3 * nr, ref + 3 * nr, (size_t)nrows * K);
    print_message("  %s %-10s rel err %.3e\n", label, "d_X", e);
    worst = e > worst ? e : worst;

    /* Columns: d_W rows and d_bias for the gates of state columns cols[]. */
    size_t nw = (size_t)ncols * 3 * K;
    double *wref = calloc(nw + (size_t)ncols * 3, sizeof(double));
    double *wgot = malloc(sizeof(double) * (nw + (size_t)ncols * 3));
    double *xrow = malloc(sizeof(double) * K);
    assert_true(wref && wgot && xrow);
    for (int b = 0; b < B; b++) {
        for (int k = 0; k < K; k++)
            xrow[k] = xval(c, b, k);
        for (int q = 0; q < ncols; q++) {
            int j = cols[q];
            cell e = cell_at(c, b, j, gate(c, b, j), gate(c, b, S + j), gate(c, b, 2 * S + j));
            for (int a = 0; a < 3; a++) {
                double *w = wref + ((size_t)q * 3 + a) * K;
                for (int k = 0; k < K; k++)
                    w[k] += e.g[a] * xrow[k];
                wref[nw + (size_t)q * 3 + a] += e.g[a];
            }
        }
    }
    for (int q = 0; q < ncols; q++)
        for (int a = 0; a < 3; a++) {
            size_t g = (size_t)a * S + cols[q];
            memcpy(wgot + ((size_t)q * 3 + a) * K, dw + g * K, sizeof(double) * K);
            wgot[nw + (size_t)q * 3 + a] = db[g];
        }
    e = jt_rel_error(wgot, wref, nw);
    print_message("  %s %-10s rel err %.3e\n", label, "d_weights", e);
    worst = e > worst ? e : worst;
    e = jt_rel_error(wgot + nw, wref + nw, (size_t)ncols * 3);
    print_message("  %s %-10s rel err %.3e\n", label, "d_bias", e);
    worst = e > worst ? e : worst;
    free(ref), free(got), free(grow), free(wref), free(wgot), free(xrow);
    return worst;
}

/* Runs forward + backward on fresh inputs and checks every output. Sizes
 * whose full reference would take long check random rows and columns (each
 * output element checked is computed in full). */
static void run_case(jitop_ctx *ctx, const char *path, jitop_dtype t, int B, int I, int S)
{
    lltm_case c;
    lltm_dev d;
    case_init(&c, t, B, I, S);
    dev_init(&d, &c);
    dev_forward(ctx, &c, &d, 1);
    dev_backward(ctx, &c, &d);
    CU(cu->cuCtxSynchronize());
    size_t bs = (size_t)B * S;
    double *nh = download(d.new_h, bs, t), *nc = download(d.new_cell, bs, t);
    double *dh = download(d.d_old_h, bs, t), *di = download(d.d_input, (size_t)B * I, t);
    double *dw = download(d.d_weights, (size_t)3 * S * c.K, t);
    double *db = download(d.d_bias, (size_t)3 * S, t), *dc = download(d.d_old_cell, bs, t);

    int full = (double)B * 3 * S * c.K <= 4e8;
    int nrows = full ? B : 12, ncols = full ? S : 24;
    int *rows = malloc(sizeof(int) * nrows), *cols = malloc(sizeof(int) * ncols);
    assert_true(rows && cols);
    for (int r = 0; r < nrows; r++)
        rows[r] = full ? r : (int)(((double)rand() / RAND_MAX) * (B - 1));
    for (int q = 0; q < ncols; q++)
        cols[q] = full ? q : (int)(((double)rand() / RAND_MAX) * (S - 1));
    if (!full) {
        rows[0] = 0, rows[1] = B - 1; /* the edges, where tiles end */
        cols[0] = 0, cols[1] = S - 1;
    }
    char label[96];
    snprintf(label, sizeof label, "%s %s B=%d I=%d S=%d%s", t == JITOP_FLOAT32 ? "f32" : "f64",
             path ? path : "auto", B, I, S, full ? "" : " (sampled)");
    double worst = check_outputs(&c, rows, nrows, cols, ncols, nh, nc, dh, di, dw, db, dc, label);
    print_message("%s: worst rel err %.3e\n", label, worst);
    /* Full fp32 (no TF32) lands near 1e-6; TF32 would be ~1e-3. */
    assert_true(worst < (t == JITOP_FLOAT32 ? 1e-4 : 1e-12));

    /* Inference (no saved buffer) computes the same forward. */
    CU(cu->cuMemsetD8(d.new_h, 0xff, bs * esize(t)));
    CU(cu->cuMemsetD8(d.new_cell, 0xff, bs * esize(t)));
    dev_forward(ctx, &c, &d, 0);
    CU(cu->cuCtxSynchronize());
    double *nh2 = download(d.new_h, bs, t), *nc2 = download(d.new_cell, bs, t);
    assert_true(jt_rel_error(nh2, nh, bs) < (t == JITOP_FLOAT32 ? 1e-5 : 1e-13));
    assert_true(jt_rel_error(nc2, nc, bs) < (t == JITOP_FLOAT32 ? 1e-5 : 1e-13));

    free(nh2), free(nc2), free(nh), free(nc), free(dh), free(di), free(dw), free(db), free(dc);
    free(rows), free(cols);
    dev_free(&d);
    case_free(&c);
}

static const int small_sizes[][3] = {
    {1, 1, 1}, {2, 3, 1}, {1, 7, 5}, {3, 5, 7}, {17, 33, 65}, {16, 32, 128}, {5, 300, 33},
};

static void run_sizes(const char *path, jitop_dtype t)
{
    jitop_ctx *ctx = lltm_ctx(path);
    for (size_t i = 0; i < sizeof small_sizes / sizeof small_sizes[0]; i++)
        run_case(ctx, path, t, small_sizes[i][0], small_sizes[i][1], small_sizes[i][2]);
    /* The tutorial's medium size, and one whose products split k unevenly
     * sized against it (cuBLAS path: forward in 4 slices of K = 800, d_X in
     * 12 of 3S = 1800, B not a multiple of 64). */
    run_case(ctx, path, t, 64, 256, 1024);
    run_case(ctx, path, t, 48, 200, 600);
    jitop_ctx_destroy(ctx);
}

static void test_f32_auto(void **state)
{
    (void)state;
    JT_REQUIRE_GPU();
    run_sizes(NULL, JITOP_FLOAT32);
}

static void test_f32_fused(void **state)
{
    (void)state;
    JT_REQUIRE_GPU();
    run_sizes("fused", JITOP_FLOAT32);
}

static void test_f32_cublas(void **state)
{
    (void)state;
    JT_REQUIRE_GPU();
    run_sizes("cublas", JITOP_FLOAT32);
}

static void test_f64_fused(void **state)
{
    (void)state;
    JT_REQUIRE_GPU();
    run_sizes("fused", JITOP_FLOAT64);
}

static void test_f64_cublas(void **state)
{
    (void)state;
    JT_REQUIRE_GPU();
    run_sizes("cublas", JITOP_FLOAT64);
}

/* The tutorial's large size, once, with the automatic path (cuBLAS). */
static void test_f32_large(void **state)
{
    (void)state;
    JT_REQUIRE_GPU();
    jitop_ctx *ctx = lltm_ctx(NULL);
    run_case(ctx, NULL, JITOP_FLOAT32, 256, 1024, 4096);
    jitop_ctx_destroy(ctx);
}

/* ------------------------------------------------------------ gradcheck */

/* L = sum(grad_h * new_h + grad_cell * new_cell), from the GPU forward. */
static double loss(jitop_ctx *ctx, lltm_case *c, lltm_dev *d)
{
    size_t bs = (size_t)c->B * c->S;
    CU(cu->cuMemcpyHtoD(d->input, c->input, (size_t)c->B * c->I * 8));
    CU(cu->cuMemcpyHtoD(d->weights, c->weights, (size_t)3 * c->S * c->K * 8));
    CU(cu->cuMemcpyHtoD(d->bias, c->bias, (size_t)3 * c->S * 8));
    CU(cu->cuMemcpyHtoD(d->old_h, c->old_h, bs * 8));
    CU(cu->cuMemcpyHtoD(d->old_cell, c->old_cell, bs * 8));
    dev_forward(ctx, c, d, 0);
    CU(cu->cuCtxSynchronize());
    double *nh = download(d->new_h, bs, JITOP_FLOAT64), *nc = download(d->new_cell, bs, JITOP_FLOAT64);
    double s = 0;
    for (size_t i = 0; i < bs; i++)
        s += c->grad_h[i] * nh[i] + c->grad_cell[i] * nc[i];
    free(nh), free(nc);
    return s;
}

/* For each input, the directional derivative of L along a fresh random
 * direction, by central differences of the GPU forward, against the
 * backward's gradient dotted with the same direction. */
static void gradcheck(const char *path)
{
    jitop_ctx *ctx = lltm_ctx(path);
    lltm_case c;
    lltm_dev d;
    case_init(&c, JITOP_FLOAT64, 3, 4, 6);
    dev_init(&d, &c);
    dev_forward(ctx, &c, &d, 1);
    dev_backward(ctx, &c, &d);
    CU(cu->cuCtxSynchronize());
    size_t bs = (size_t)c.B * c.S;
    double *x[5] = {c.input, c.weights, c.bias, c.old_h, c.old_cell};
    size_t n[5] = {(size_t)c.B * c.I, (size_t)3 * c.S * c.K, (size_t)3 * c.S, bs, bs};
    CUdeviceptr gp[5] = {d.d_input, d.d_weights, d.d_bias, d.d_old_h, d.d_old_cell};
    const char *names[5] = {"input", "weights", "bias", "old_h", "old_cell"};
    for (int a = 0; a < 5; a++) {
        double *grad = download(gp[a], n[a], JITOP_FLOAT64);
        double *v = rnd(n[a], 1.0);
        double analytic = 0;
        for (size_t i = 0; i < n[a]; i++)
            analytic += grad[i] * v[i];
        const double eps = 1e-6;
        double *orig = malloc(n[a] * sizeof(double));
        assert_non_null(orig);
        memcpy(orig, x[a], n[a] * sizeof(double));
        for (size_t i = 0; i < n[a]; i++)
            x[a][i] = orig[i] + eps * v[i];
        double lp = loss(ctx, &c, &d);
        for (size_t i = 0; i < n[a]; i++)
            x[a][i] = orig[i] - eps * v[i];
        double lm = loss(ctx, &c, &d);
        memcpy(x[a], orig, n[a] * sizeof(double));
        double numeric = (lp - lm) / (2 * eps);
        double err = fabs(numeric - analytic) / fmax(fabs(analytic), 1e-3);
        print_message("gradcheck %s %-8s numeric %.10f analytic %.10f rel %.2e\n",
                      path ? path : "auto", names[a], numeric, analytic, err);
        assert_true(err < 1e-6);
        free(orig), free(v), free(grad);
    }
    dev_free(&d);
    case_free(&c);
    jitop_ctx_destroy(ctx);
}

static void test_gradcheck_fused(void **state)
{
    (void)state;
    JT_REQUIRE_GPU();
    gradcheck("fused");
}

static void test_gradcheck_cublas(void **state)
{
    (void)state;
    JT_REQUIRE_GPU();
    gradcheck("cublas");
}

/* ------------------------------------------------------------ arguments */

/* Bad arguments fail before anything touches the driver (a compile-only
 * context, so this runs everywhere), and the message names the argument. */
static void test_arguments(void **state)
{
    (void)state;
    char *dir = jt_tmpdir();
    jitop_ctx *ctx = jt_ctx(dir, "sm_90");
    void *p = (void *)(uintptr_t)0x1000;
#define EXPECT_EINVAL(call, needle)                                                      \
    do {                                                                                 \
        assert_int_equal((call), JITOP_EINVAL);                                          \
        if (strstr(jitop_errmsg(NULL), (needle)) == NULL)                                \
            fail_msg("message \"%s\" does not name %s", jitop_errmsg(NULL), (needle));  \
    } while (0)
    EXPECT_EINVAL(jitop_lltm_forward(ctx, JITOP_FLOAT32, 0, 4, 4, p, p, p, p, p, p, p, p, NULL),
                  "B (batch)");
    EXPECT_EINVAL(jitop_lltm_forward(ctx, JITOP_FLOAT32, 2, -1, 4, p, p, p, p, p, p, p, p, NULL),
                  "I (input features)");
    EXPECT_EINVAL(jitop_lltm_forward(ctx, JITOP_FLOAT32, 2, 4, 0, p, p, p, p, p, p, p, p, NULL),
                  "S (state size)");
    EXPECT_EINVAL(jitop_lltm_forward(ctx, JITOP_BFLOAT16, 2, 4, 4, p, p, p, p, p, p, p, p, NULL),
                  "dtype");
    EXPECT_EINVAL(jitop_lltm_forward(ctx, JITOP_FLOAT32, 2, 4, 4, p, NULL, p, p, p, p, p, p, NULL),
                  "weights is NULL");
    EXPECT_EINVAL(jitop_lltm_forward(ctx, JITOP_FLOAT32, 2, 4, 4, p, p, p, p, p, NULL, p, p, NULL),
                  "new_h is NULL");
    EXPECT_EINVAL(jitop_lltm_backward(ctx, JITOP_FLOAT64, 2, 4, 4, p, p, NULL, p, p, p, p, p, p,
                                      NULL),
                  "saved is NULL");
    EXPECT_EINVAL(jitop_lltm_backward(ctx, JITOP_FLOAT64, 2, 4, 4, p, p, p, p, p, p, NULL, p, p,
                                      NULL),
                  "d_weights is NULL");
    EXPECT_EINVAL(jitop_lltm_backward(NULL, JITOP_FLOAT64, 2, 4, 4, p, p, p, p, p, p, p, p, p,
                                      NULL),
                  "ctx is NULL");
    EXPECT_EINVAL(jitop_lltm_forward(ctx, JITOP_FLOAT32, 1 << 20, 1 << 20, 1 << 20, p, p, p, p, p,
                                     p, p, p, NULL),
                  "too large");
#undef EXPECT_EINVAL
    assert_int_equal(jitop_lltm_saved_size(JITOP_FLOAT32, 16, 32, 128), (size_t)16 * (8 * 128 + 32) * 4);
    assert_int_equal(jitop_lltm_saved_size(JITOP_FLOAT64, 2, 3, 5), (size_t)2 * (8 * 5 + 3) * 8);
    assert_int_equal(jitop_lltm_saved_size(JITOP_FLOAT16, 2, 3, 5), 0);
    assert_int_equal(jitop_lltm_saved_size(JITOP_FLOAT32, 0, 3, 5), 0);
    jitop_ctx_destroy(ctx);
    free(dir);
}

int main(void)
{
    srand((unsigned)time(NULL));
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_arguments),
        cmocka_unit_test(test_f32_auto),
        cmocka_unit_test(test_f32_fused),
        cmocka_unit_test(test_f32_cublas),
        cmocka_unit_test(test_f64_fused),
        cmocka_unit_test(test_f64_cublas),
        cmocka_unit_test(test_gradcheck_fused),
        cmocka_unit_test(test_gradcheck_cublas),
        cmocka_unit_test(test_f32_large),
    };
    int failed = cmocka_run_group_tests_name("lltm", tests, NULL, NULL);
    free(cache_root);
    jt_cleanup();
    return failed;
}
