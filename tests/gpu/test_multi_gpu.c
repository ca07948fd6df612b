/* Every GPU of the machine in one process (issue 26). SKIPs with fewer than
 * two devices (as under CUDA_VISIBLE_DEVICES=k, which `make test-gpu-all`
 * uses to run the rest of the suite on each device in turn).
 *
 * The API's model is one jitop context per device: a jitop_ctx holds one
 * CUDA context (cfg.device's primary context, or cfg.cu_context), the arch
 * it compiles for and the modules loaded into that CUDA context, whose code
 * cannot run in another. So this program makes one context per device, all
 * on one cache directory: the cache key holds the arch, and a device whose
 * arch an earlier device already compiled for loads from the cache (no NVRTC
 * compile, counted through jitop__before_compile_hook).
 *
 * Checked on every device, each on its own stream and data: a loaded kernel
 * and the shipped LayerNorm (forward and backward) and LLTM (forward) ops
 * against a float64 CPU reference on fresh random inputs; a hot reload
 * (jitop_watch) of a source every device holds, with one thread per device
 * launching it and LayerNorm without pause through the edits, no launch
 * failing and every device reaching the new code; contexts destroyed in
 * both orders while the others keep launching. Timings are printed, never
 * asserted. Waits have a generous deadline and fail only when it passes. */
#include "gputest.h"
#include "testutil.h"

#include "build/build.h"
#include "load/driver.h"

#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define DEADLINE_MS 120000.0
#define MAX_DEV 64
/* The AXPY kernel's length, and the shipped ops' shapes (small enough for a
 * quick reference, large enough for several blocks). */
#define N_AXPY (1 << 20)
#define LN_ROWS 64
#define LN_COLS 1024
#define LLTM_B 8
#define LLTM_I 32
#define LLTM_S 64
#define LLTM_K (LLTM_S + LLTM_I)
/* Reload: ints per launch, and edits per round. */
#define N_RELOAD 4096
#define EDITS 3

static const jitop__cuda_api *cu;
static int g_ndev;
static atomic_int g_compiles;

static void count_compile(const char *source)
{
    (void)source;
    atomic_fetch_add(&g_compiles, 1);
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {0, ms * 1000000L};
    nanosleep(&ts, NULL);
}

/* A context on device `device` over cache_dir, its CUDA context created and
 * current on the calling thread. */
static jitop_ctx *dev_ctx(const char *cache_dir, int device)
{
    jitop_config cfg;
    jitop_config_init(&cfg);
    cfg.cache_dir = cache_dir;
    cfg.device = device;
    jitop_ctx *ctx = NULL;
    OK(jitop_ctx_create(&cfg, &ctx));
    int got = -1;
    OK(jitop_ctx_cuda(ctx, NULL, &got));
    assert_int_equal(got, device);
    return ctx;
}

/* Makes ctx's CUDA context current on this thread: driver calls (memory,
 * streams) go to the current context, and a launch on another device leaves
 * that one's current. */
static void use(jitop_ctx *ctx)
{
    OK(jitop_ctx_cuda(ctx, NULL, NULL));
}

/* Skips unless the driver shows at least two devices; sets cu and g_ndev. */
static void require_gpus(void)
{
    JT_REQUIRE_GPU();
    char *dir = jt_tmpdir();
    jitop_ctx *ctx = dev_ctx(dir, 0);
    cu = jitop__cuda();
    assert_non_null(cu);
    CU(cu->cuDeviceGetCount(&g_ndev));
    jitop_ctx_destroy(ctx);
    jt_rm_rf(dir);
    free(dir);
    if (g_ndev > MAX_DEV)
        g_ndev = MAX_DEV;
    if (g_ndev < 2) {
        print_message("SKIP: %d CUDA device(s) visible; this test needs 2 or more\n", g_ndev);
        skip();
    }
}

static CUdeviceptr dalloc(size_t bytes)
{
    CUdeviceptr p = 0;
    CU(cu->cuMemAlloc(&p, bytes));
    return p;
}

static CUdeviceptr upload(const void *host, size_t bytes)
{
    CUdeviceptr p = dalloc(bytes);
    CU(cu->cuMemcpyHtoD(p, host, bytes));
    return p;
}

static void *dptr(CUdeviceptr p)
{
    return (void *)(uintptr_t)p;
}

static float *host_floats(size_t n, float lo, float hi)
{
    float *v = malloc(n * sizeof *v);
    assert_non_null(v);
    jt_random_floats(v, n, lo, hi);
    return v;
}

/* float32 device results against a float64 reference. */
static double rel_err_f(const float *got, const double *ref, size_t n)
{
    double *g = malloc(n * sizeof *g);
    assert_non_null(g);
    for (size_t i = 0; i < n; i++)
        g[i] = got[i];
    double e = jt_rel_error(g, ref, n);
    free(g);
    return e;
}

/* ------------------------------------------------- load and launch */

static const char AXPY[] =
    "extern \"C\" __global__ void axpy(float a, const float *x, const float *y, float *out, int n)\n"
    "{\n"
    "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "    if (i < n)\n"
    "        out[i] = a * x[i] + y[i];\n"
    "}\n";

typedef struct axpy_dev {
    jitop_ctx *ctx;
    jitop_module *m;
    jitop_op *op;
    CUstream stream;
    CUdeviceptr x, y, out;
    float *hx, *hy, *hout;
    float a;
} axpy_dev;

static void axpy_load(axpy_dev *d, const char *path)
{
    const char *sources[] = {path};
    OK(jitop_load(d->ctx, "axpy", sources, 1, NULL, 0, &d->m));
    OK(jitop_op_get(d->m, "axpy", &d->op));
}

/* Fresh inputs, queued on the device's stream. */
static void axpy_queue(axpy_dev *d)
{
    use(d->ctx);
    if (!d->stream)
        CU(cu->cuStreamCreate(&d->stream, 0));
    free(d->hx);
    free(d->hy);
    free(d->hout);
    d->hx = host_floats(N_AXPY, -1, 1);
    d->hy = host_floats(N_AXPY, -1, 1);
    d->hout = malloc(N_AXPY * sizeof(float));
    assert_non_null(d->hout);
    float a;
    jt_random_floats(&a, 1, 0.5f, 2.0f);
    d->a = a;
    if (!d->x) {
        d->x = dalloc(N_AXPY * sizeof(float));
        d->y = dalloc(N_AXPY * sizeof(float));
        d->out = dalloc(N_AXPY * sizeof(float));
    }
    CU(cu->cuMemcpyHtoD(d->x, d->hx, N_AXPY * sizeof(float)));
    CU(cu->cuMemcpyHtoD(d->y, d->hy, N_AXPY * sizeof(float)));
    CU(cu->cuMemsetD8(d->out, 0xFF, N_AXPY * sizeof(float)));
    int n = N_AXPY;
    void *args[] = {&a, &d->x, &d->y, &d->out, &n};
    size_t sizes[] = {sizeof a, sizeof d->x, sizeof d->y, sizeof d->out, sizeof n};
    jitop_dim3 grid = {N_AXPY / 256, 1, 1}, block = {256, 1, 1};
    OK(jitop_launch(d->op, grid, block, 0, (void *)d->stream, args, sizes, 5));
}

static void axpy_check(axpy_dev *d, int device)
{
    use(d->ctx);
    CU(cu->cuStreamSynchronize(d->stream));
    CU(cu->cuMemcpyDtoH(d->hout, d->out, N_AXPY * sizeof(float)));
    double *ref = malloc(N_AXPY * sizeof *ref);
    assert_non_null(ref);
    for (size_t i = 0; i < N_AXPY; i++)
        ref[i] = (double)d->a * d->hx[i] + d->hy[i];
    double e = rel_err_f(d->hout, ref, N_AXPY);
    free(ref);
    if (!(e < 1e-6))
        fail_msg("device %d: axpy rel err %.3e", device, e);
}

static void axpy_free(axpy_dev *d)
{
    if (d->ctx) {
        use(d->ctx);
        if (d->x) {
            CU(cu->cuMemFree(d->x));
            CU(cu->cuMemFree(d->y));
            CU(cu->cuMemFree(d->out));
        }
        if (d->stream)
            CU(cu->cuStreamDestroy(d->stream));
        jitop_ctx_destroy(d->ctx);
    }
    free(d->hx);
    free(d->hy);
    free(d->hout);
    memset(d, 0, sizeof *d);
}

/* Whether an earlier device has arch (its binary is in the cache then). */
static int arch_seen(char archs[][16], int k)
{
    for (int j = 0; j < k; j++)
        if (strcmp(archs[j], archs[k]) == 0)
            return 1;
    return 0;
}

/* Device 0 compiles; every later device of an arch already compiled for
 * loads from the shared cache. Then every device runs the kernel on its own
 * stream and data, all queued before any is checked. */
static void test_load_and_launch_on_every_device(void **state)
{
    (void)state;
    require_gpus();
    char *dir = jt_tmpdir();
    char *cache = jt_path(dir, "cache");
    char *path = jt_write(dir, "axpy.cu", AXPY);
    axpy_dev d[MAX_DEV];
    char archs[MAX_DEV][16];
    memset(d, 0, sizeof d);
    /* Context creation is left out of the timings. */
    for (int k = 0; k < g_ndev; k++) {
        d[k].ctx = dev_ctx(cache, k);
        const char *arch = NULL;
        OK(jitop_ctx_arch(d[k].ctx, &arch));
        snprintf(archs[k], sizeof archs[k], "%s", arch);
    }
    for (int k = 0; k < g_ndev; k++) {
        use(d[k].ctx);
        int before = atomic_load(&g_compiles);
        double t0 = now_ms();
        axpy_load(&d[k], path);
        double ms = now_ms() - t0;
        int compiles = atomic_load(&g_compiles) - before;
        print_message("device %d (%s): %s load + get %.3f ms, %d compile(s)\n", k, archs[k],
                      k == 0 ? "cold" : "warm", ms, compiles);
        if (arch_seen(archs, k) && compiles != 0)
            fail_msg("device %d (%s): the same module for an arch already in the cache "
                     "compiled %d time(s)",
                     k, archs[k], compiles);
        if (!arch_seen(archs, k) && compiles != 1)
            fail_msg("device %d (%s): a new arch compiled %d time(s), want 1", k, archs[k],
                     compiles);
    }
    /* A second round of loads (a new module object each) on every device
     * after the first: the steady warm cost, beyond first-use costs. */
    for (int k = 1; k < g_ndev; k++) {
        jitop_module *m = NULL;
        jitop_op *op = NULL;
        const char *sources[] = {path};
        use(d[k].ctx);
        int before = atomic_load(&g_compiles);
        double t0 = now_ms();
        OK(jitop_load(d[k].ctx, "axpy2", sources, 1, NULL, 0, &m));
        OK(jitop_op_get(m, "axpy", &op));
        double ms = now_ms() - t0;
        assert_int_equal(atomic_load(&g_compiles), before);
        print_message("device %d: warm load + get of a second module %.3f ms\n", k, ms);
    }
    for (int k = 0; k < g_ndev; k++)
        axpy_queue(&d[k]);
    for (int k = 0; k < g_ndev; k++)
        axpy_check(&d[k], k);
    for (int k = 0; k < g_ndev; k++)
        axpy_free(&d[k]);
    jt_rm_rf(dir);
    free(path);
    free(cache);
    free(dir);
}

/* --------------------------------------------------- the shipped ops */

/* LayerNorm in float64: y, mean, rstd from x; dx, dgamma, dbeta from dy. */
static void ln_reference(const float *x, const float *g, const float *b, const float *dy,
                         double eps, double *y, double *mean, double *rstd, double *dx,
                         double *dg, double *db)
{
    memset(dg, 0, LN_COLS * sizeof *dg);
    memset(db, 0, LN_COLS * sizeof *db);
    for (int r = 0; r < LN_ROWS; r++) {
        const float *xr = x + (size_t)r * LN_COLS;
        const float *dyr = dy + (size_t)r * LN_COLS;
        double s = 0, v = 0;
        for (int c = 0; c < LN_COLS; c++)
            s += xr[c];
        double mu = s / LN_COLS;
        for (int c = 0; c < LN_COLS; c++)
            v += (xr[c] - mu) * (xr[c] - mu);
        double rs = 1.0 / sqrt(v / LN_COLS + eps);
        mean[r] = mu;
        rstd[r] = rs;
        double m1 = 0, m2 = 0;
        for (int c = 0; c < LN_COLS; c++) {
            double xhat = (xr[c] - mu) * rs;
            y[(size_t)r * LN_COLS + c] = xhat * g[c] + b[c];
            double gdy = (double)g[c] * dyr[c];
            m1 += gdy;
            m2 += gdy * xhat;
            dg[c] += dyr[c] * xhat;
            db[c] += dyr[c];
        }
        m1 /= LN_COLS;
        m2 /= LN_COLS;
        for (int c = 0; c < LN_COLS; c++) {
            double xhat = (xr[c] - mu) * rs;
            dx[(size_t)r * LN_COLS + c] = rs * ((double)g[c] * dyr[c] - m1 - xhat * m2);
        }
    }
}

static double sigm(double v)
{
    return 1.0 / (1.0 + exp(-v));
}

/* The LLTM forward in float64 (include/jitop_ops.h). */
static void lltm_reference(const float *input, const float *w, const float *bias,
                           const float *old_h, const float *old_cell, double *new_h,
                           double *new_cell)
{
    for (int b = 0; b < LLTM_B; b++) {
        for (int s = 0; s < LLTM_S; s++) {
            double gate[3];
            for (int gi = 0; gi < 3; gi++) {
                int row = gi * LLTM_S + s;
                const float *wr = w + (size_t)row * LLTM_K;
                double acc = bias[row];
                for (int k = 0; k < LLTM_S; k++)
                    acc += (double)old_h[b * LLTM_S + k] * wr[k];
                for (int k = 0; k < LLTM_I; k++)
                    acc += (double)input[b * LLTM_I + k] * wr[LLTM_S + k];
                gate[gi] = acc;
            }
            double ig = sigm(gate[0]), og = sigm(gate[1]);
            double cand = gate[2] > 0 ? gate[2] : expm1(gate[2]);
            double c = old_cell[b * LLTM_S + s] + cand * ig;
            new_cell[b * LLTM_S + s] = c;
            new_h[b * LLTM_S + s] = tanh(c) * og;
        }
    }
}

enum { LN_X, LN_G, LN_B, LN_DY, LN_Y, LN_MEAN, LN_RSTD, LN_DX, LN_DG, LN_DB,
       LT_IN, LT_W, LT_BIAS, LT_H, LT_C, LT_NH, LT_NC, NBUF };

static const size_t BUF_FLOATS[NBUF] = {
    LN_ROWS * LN_COLS, LN_COLS, LN_COLS, LN_ROWS * LN_COLS, LN_ROWS * LN_COLS, LN_ROWS,
    LN_ROWS, LN_ROWS * LN_COLS, LN_COLS, LN_COLS,
    LLTM_B * LLTM_I, 3 * LLTM_S * LLTM_K, 3 * LLTM_S, LLTM_B * LLTM_S, LLTM_B * LLTM_S,
    LLTM_B * LLTM_S, LLTM_B * LLTM_S};

typedef struct ops_dev {
    jitop_ctx *ctx;
    CUstream stream;
    float *host[NBUF];
    CUdeviceptr dev[NBUF];
} ops_dev;

static const float LN_EPS = 1e-5f;

/* Fresh inputs on device k, and every op queued on its stream. */
static void ops_queue(ops_dev *o)
{
    use(o->ctx);
    CU(cu->cuStreamCreate(&o->stream, 0));
    for (int i = 0; i < NBUF; i++) {
        float lo = -1, hi = 1;
        if (i == LT_W)
            lo = -0.2f, hi = 0.2f; /* about 2/sqrt(K): gates O(1) */
        o->host[i] = host_floats(BUF_FLOATS[i], lo, hi);
        o->dev[i] = upload(o->host[i], BUF_FLOATS[i] * sizeof(float));
    }
    void *s = (void *)o->stream;
    CUdeviceptr *p = o->dev;
    OK(jitop_layernorm_forward(o->ctx, JITOP_FLOAT32, LN_ROWS, LN_COLS, LN_EPS, dptr(p[LN_X]),
                               dptr(p[LN_G]), dptr(p[LN_B]), dptr(p[LN_Y]), dptr(p[LN_MEAN]),
                               dptr(p[LN_RSTD]), s));
    OK(jitop_layernorm_backward(o->ctx, JITOP_FLOAT32, LN_ROWS, LN_COLS, dptr(p[LN_DY]),
                                dptr(p[LN_X]), dptr(p[LN_G]), dptr(p[LN_MEAN]),
                                dptr(p[LN_RSTD]), dptr(p[LN_DX]), dptr(p[LN_DG]),
                                dptr(p[LN_DB]), s));
    OK(jitop_lltm_forward(o->ctx, JITOP_FLOAT32, LLTM_B, LLTM_I, LLTM_S, dptr(p[LT_IN]),
                          dptr(p[LT_W]), dptr(p[LT_BIAS]), dptr(p[LT_H]), dptr(p[LT_C]),
                          dptr(p[LT_NH]), dptr(p[LT_NC]), NULL, s));
}

static void ops_check(ops_dev *o, int device)
{
    use(o->ctx);
    CU(cu->cuStreamSynchronize(o->stream));
    static const int outs[] = {LN_Y, LN_MEAN, LN_RSTD, LN_DX, LN_DG, LN_DB, LT_NH, LT_NC};
    for (size_t i = 0; i < sizeof outs / sizeof *outs; i++)
        CU(cu->cuMemcpyDtoH(o->host[outs[i]], o->dev[outs[i]],
                            BUF_FLOATS[outs[i]] * sizeof(float)));
    double *ref[NBUF] = {0};
    for (size_t i = 0; i < sizeof outs / sizeof *outs; i++) {
        ref[outs[i]] = malloc(BUF_FLOATS[outs[i]] * sizeof(double));
        assert_non_null(ref[outs[i]]);
    }
    float **h = o->host;
    ln_reference(h[LN_X], h[LN_G], h[LN_B], h[LN_DY], LN_EPS, ref[LN_Y], ref[LN_MEAN],
                 ref[LN_RSTD], ref[LN_DX], ref[LN_DG], ref[LN_DB]);
    lltm_reference(h[LT_IN], h[LT_W], h[LT_BIAS], h[LT_H], h[LT_C], ref[LT_NH], ref[LT_NC]);
    static const char *const names[] = {"ln y", "ln mean", "ln rstd", "ln dx",
                                        "ln dgamma", "ln dbeta", "lltm new_h", "lltm new_cell"};
    for (size_t i = 0; i < sizeof outs / sizeof *outs; i++) {
        double e = rel_err_f(h[outs[i]], ref[outs[i]], BUF_FLOATS[outs[i]]);
        print_message("device %d: %-13s rel err %.3e\n", device, names[i], e);
        if (!(e < 1e-4))
            fail_msg("device %d: %s rel err %.3e over 1e-4", device, names[i], e);
    }
    for (int i = 0; i < NBUF; i++)
        free(ref[i]);
}

static void ops_free(ops_dev *o)
{
    use(o->ctx);
    for (int i = 0; i < NBUF; i++) {
        CU(cu->cuMemFree(o->dev[i]));
        free(o->host[i]);
    }
    CU(cu->cuStreamDestroy(o->stream));
    jitop_ctx_destroy(o->ctx);
}

/* LayerNorm forward and backward and the LLTM forward on every device, each
 * on its own data and stream, all queued before any is checked. A device of
 * an arch an earlier one compiled the instances for compiles nothing. */
static void test_shipped_ops_on_every_device(void **state)
{
    (void)state;
    require_gpus();
    char *dir = jt_tmpdir();
    char *cache = jt_path(dir, "cache");
    ops_dev o[MAX_DEV];
    char archs[MAX_DEV][16];
    memset(o, 0, sizeof o);
    for (int k = 0; k < g_ndev; k++) {
        o[k].ctx = dev_ctx(cache, k);
        const char *arch = NULL;
        OK(jitop_ctx_arch(o[k].ctx, &arch));
        snprintf(archs[k], sizeof archs[k], "%s", arch);
    }
    for (int k = 0; k < g_ndev; k++) {
        int before = atomic_load(&g_compiles);
        ops_queue(&o[k]);
        int compiles = atomic_load(&g_compiles) - before;
        print_message("device %d (%s): shipped ops' first calls compiled %d instance(s)\n", k,
                      archs[k], compiles);
        if (arch_seen(archs, k) && compiles != 0)
            fail_msg("device %d (%s): the ops compiled %d time(s) for an arch already in the "
                     "cache",
                     k, archs[k], compiles);
    }
    for (int k = 0; k < g_ndev; k++)
        ops_check(&o[k], k);
    for (int k = g_ndev - 1; k >= 0; k--)
        ops_free(&o[k]);
    jt_rm_rf(dir);
    free(cache);
    free(dir);
}

/* ------------------------------------------------------- hot reload */

/* Version v's kernel: out[i] = in[i] * scale(v) + offset(v). */
static int scale_of(int v)
{
    return 3 + v % 5;
}

static int offset_of(int v)
{
    return 1000 * v + 7;
}

static void write_version(const char *dir, int v)
{
    char text[512];
    snprintf(text, sizeof text,
             "#define OFFSET %d\n"
             "extern \"C\" __global__ void k(const int *in, int *out, int n)\n"
             "{\n"
             "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
             "    if (i < n)\n"
             "        out[i] = in[i] * %d + OFFSET;\n"
             "}\n",
             offset_of(v), scale_of(v));
    free(jt_write_rename(dir, "reload.cu", text));
}

/* One device's launcher. Threads cannot fail a cmocka test, so a failure
 * is recorded (the first one's text kept) and checked after the join. */
typedef struct launcher {
    int device;
    jitop_ctx *ctx;
    jitop_module *m;
    jitop_op *op;
    CUstream stream;
    CUdeviceptr in, out;
    CUdeviceptr ln_x, ln_y;
    float *ln_hx, *ln_hy;
    double *ln_ref;
    int hin[N_RELOAD], hout[N_RELOAD];
    uint64_t rng;
    pthread_t thread;
    atomic_int *want;   /* the version the main thread wrote last */
    atomic_int *stop;
    atomic_int seen;    /* the version of the last output */
    atomic_long launches;
    atomic_int failures;
    char failure[256];
    atomic_int reloads_ok, reloads_failed;
} launcher;

static void record(launcher *l, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void record(launcher *l, const char *fmt, ...)
{
    if (atomic_fetch_add(&l->failures, 1) == 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(l->failure, sizeof l->failure, fmt, ap);
        va_end(ap);
    }
}

static void on_reload(void *user, jitop_module *m, int status, const char *message)
{
    launcher *l = user;
    (void)m;
    (void)message;
    if (status == JITOP_OK)
        atomic_fetch_add(&l->reloads_ok, 1);
    else
        atomic_fetch_add(&l->reloads_failed, 1);
}

/* xorshift64: the shared generator of testutil is not for threads. */
static uint32_t next_rand(launcher *l)
{
    l->rng ^= l->rng << 13;
    l->rng ^= l->rng >> 7;
    l->rng ^= l->rng << 17;
    return (uint32_t)(l->rng >> 32);
}

/* One reload kernel launch on fresh input and one LayerNorm forward on the
 * thread's fixed data; 0 when both gave what they must. */
static int launch_once(launcher *l)
{
    CUresult r;
    for (int i = 0; i < N_RELOAD; i++)
        l->hin[i] = 1 + (int)(next_rand(l) % 100000);
    if ((r = cu->cuMemcpyHtoD(l->in, l->hin, sizeof l->hin)) != CUDA_SUCCESS ||
        (r = cu->cuMemsetD8(l->out, 0xFF, sizeof l->hout)) != CUDA_SUCCESS) {
        record(l, "device %d: copy in: %d", l->device, (int)r);
        return -1;
    }
    int n = N_RELOAD;
    void *args[] = {&l->in, &l->out, &n};
    size_t sizes[] = {sizeof l->in, sizeof l->out, sizeof n};
    jitop_dim3 grid = {N_RELOAD / 128, 1, 1}, block = {128, 1, 1};
    int st = jitop_launch(l->op, grid, block, 0, (void *)l->stream, args, sizes, 3);
    if (st != JITOP_OK) {
        record(l, "device %d: jitop_launch: %s: %s", l->device, jitop_strerror(st),
               jitop_errmsg(l->ctx));
        return -1;
    }
    st = jitop_layernorm_forward(l->ctx, JITOP_FLOAT32, LN_ROWS, LN_COLS, LN_EPS,
                                 dptr(l->ln_x), NULL, NULL, dptr(l->ln_y), NULL, NULL,
                                 (void *)l->stream);
    if (st != JITOP_OK) {
        record(l, "device %d: jitop_layernorm_forward: %s: %s", l->device, jitop_strerror(st),
               jitop_errmsg(l->ctx));
        return -1;
    }
    if ((r = cu->cuStreamSynchronize(l->stream)) != CUDA_SUCCESS ||
        (r = cu->cuMemcpyDtoH(l->hout, l->out, sizeof l->hout)) != CUDA_SUCCESS ||
        (r = cu->cuMemcpyDtoH(l->ln_hy, l->ln_y, LN_ROWS * LN_COLS * sizeof(float))) !=
            CUDA_SUCCESS) {
        record(l, "device %d: sync or copy out: %d", l->device, (int)r);
        return -1;
    }
    atomic_fetch_add(&l->launches, 1);
    /* The output is all one version: the one wanted, or the one before.
     * Read after the output is in: the main thread writes version v + 1
     * only after this thread saw v, so this launch ran v or later. */
    int want = atomic_load(l->want);
    int versions[2] = {want, want - 1}, got = -1;
    for (int k = 0; k < 2 && got < 0; k++) {
        int v = versions[k], i = 0;
        while (i < N_RELOAD && l->hout[i] == l->hin[i] * scale_of(v) + offset_of(v))
            i++;
        if (i == N_RELOAD)
            got = v;
    }
    if (got < 0) {
        record(l, "device %d: output[0] = %d is neither version %d nor %d", l->device,
               l->hout[0], want, want - 1);
        return -1;
    }
    atomic_store(&l->seen, got);
    double num = 0, den = 0;
    for (size_t i = 0; i < LN_ROWS * LN_COLS; i++) {
        double d = l->ln_hy[i] - l->ln_ref[i];
        num += isnan(l->ln_hy[i]) ? INFINITY : d * d;
        den += l->ln_ref[i] * l->ln_ref[i];
    }
    if (!(sqrt(num / den) < 1e-4)) {
        record(l, "device %d: LayerNorm during the reload: rel err %.3e", l->device,
               sqrt(num / den));
        return -1;
    }
    return 0;
}

static void *launch_loop(void *arg)
{
    launcher *l = arg;
    int st = jitop_ctx_cuda(l->ctx, NULL, NULL);
    if (st != JITOP_OK) {
        record(l, "device %d: jitop_ctx_cuda: %s", l->device, jitop_strerror(st));
        return NULL;
    }
    while (!atomic_load(l->stop) && launch_once(l) == 0)
        ;
    return NULL;
}

static void launcher_open(launcher *l, int device, const char *cache, const char *path,
                          atomic_int *want, atomic_int *stop)
{
    memset(l, 0, sizeof *l);
    l->device = device;
    l->want = want;
    l->stop = stop;
    l->rng = 0x9E3779B97F4A7C15ull ^ ((uint64_t)device << 32) ^ (uint64_t)time(NULL);
    atomic_store(&l->seen, -1);
    l->ctx = dev_ctx(cache, device);
    const char *sources[] = {path};
    OK(jitop_load(l->ctx, "reload", sources, 1, NULL, 0, &l->m));
    OK(jitop_op_get(l->m, "k", &l->op));
    OK(jitop_watch(l->m, JITOP_RELOAD_AUTO, on_reload, l));
    use(l->ctx);
    CU(cu->cuStreamCreate(&l->stream, 0));
    l->in = dalloc(sizeof l->hin);
    l->out = dalloc(sizeof l->hout);
    size_t ln = (size_t)LN_ROWS * LN_COLS;
    l->ln_hx = host_floats(ln, -2, 2);
    l->ln_hy = malloc(ln * sizeof(float));
    l->ln_ref = malloc(ln * sizeof(double));
    assert_non_null(l->ln_hy);
    assert_non_null(l->ln_ref);
    l->ln_x = upload(l->ln_hx, ln * sizeof(float));
    l->ln_y = dalloc(ln * sizeof(float));
    /* No affine: gamma 1, beta 0 in the reference. */
    float *ones = malloc(LN_COLS * sizeof(float)), *zeros = calloc(LN_COLS, sizeof(float));
    float *dy = calloc(ln, sizeof(float));
    double *mean = malloc(LN_ROWS * sizeof(double)), *rstd = malloc(LN_ROWS * sizeof(double));
    double *dx = malloc(ln * sizeof(double)), *dg = malloc(LN_COLS * sizeof(double)),
           *db = malloc(LN_COLS * sizeof(double));
    assert_true(ones && zeros && dy && mean && rstd && dx && dg && db);
    for (int c = 0; c < LN_COLS; c++)
        ones[c] = 1;
    ln_reference(l->ln_hx, ones, zeros, dy, LN_EPS, l->ln_ref, mean, rstd, dx, dg, db);
    free(ones);
    free(zeros);
    free(dy);
    free(mean);
    free(rstd);
    free(dx);
    free(dg);
    free(db);
}

static void launcher_close(launcher *l)
{
    use(l->ctx);
    CU(cu->cuMemFree(l->in));
    CU(cu->cuMemFree(l->out));
    CU(cu->cuMemFree(l->ln_x));
    CU(cu->cuMemFree(l->ln_y));
    CU(cu->cuStreamDestroy(l->stream));
    jitop_ctx_destroy(l->ctx);
    free(l->ln_hx);
    free(l->ln_hy);
    free(l->ln_ref);
}

/* Waits until each of the n launchers finished at_least[k] launches; 0,
 * or -1 with why filled. */
static int wait_launches(launcher *l, int n, const long *at_least, char *why, size_t cap)
{
    double deadline = now_ms() + DEADLINE_MS;
    for (int k = 0; k < n; k++) {
        while (atomic_load(&l[k].launches) < at_least[k] && atomic_load(&l[k].failures) == 0) {
            if (now_ms() > deadline) {
                snprintf(why, cap, "device %d: no launch finished", l[k].device);
                return -1;
            }
            sleep_ms(1);
        }
        if (atomic_load(&l[k].failures)) {
            snprintf(why, cap, "%s", l[k].failure);
            return -1;
        }
    }
    return 0;
}

/* EDITS edits of a source that devices 0..n-1 each hold (watched), while a
 * thread per device launches it (and LayerNorm) without pause. Each edit is
 * live once every device's thread has seen its output. */
static void reload_round(int n)
{
    char *dir = jt_tmpdir();
    char *cache = jt_path(dir, "cache");
    write_version(dir, 0);
    char *path = jt_path(dir, "reload.cu");
    launcher *l = calloc((size_t)n, sizeof *l);
    assert_non_null(l);
    atomic_int want = 0, stop = 0;
    char archs[MAX_DEV][16];
    int narchs = 0;
    for (int k = 0; k < n; k++) {
        launcher_open(&l[k], k, cache, path, &want, &stop);
        const char *arch = NULL;
        OK(jitop_ctx_arch(l[k].ctx, &arch));
        snprintf(archs[k], sizeof archs[k], "%s", arch);
        narchs += !arch_seen(archs, k);
    }
    for (int k = 0; k < n; k++)
        assert_int_equal(pthread_create(&l[k].thread, NULL, launch_loop, &l[k]), 0);
    /* From here on a failure stops and joins the threads first (why), so
     * that none outlives its test. */
    char why[512] = "";
    long at_least[MAX_DEV] = {0};
    for (int k = 0; k < n; k++)
        at_least[k] = 1;
    int compiles0 = 0;
    double total = 0;
    if (wait_launches(l, n, at_least, why, sizeof why) != 0)
        goto stop;
    compiles0 = atomic_load(&g_compiles);
    for (int v = 1; v <= EDITS; v++) {
        atomic_store(&want, v);
        double t0 = now_ms();
        write_version(dir, v);
        double deadline = t0 + DEADLINE_MS;
        for (int k = 0; k < n; k++) {
            while (atomic_load(&l[k].seen) != v && atomic_load(&l[k].failures) == 0) {
                if (now_ms() > deadline) {
                    snprintf(why, sizeof why, "device %d: version %d never went live", k, v);
                    goto stop;
                }
                sched_yield();
            }
            if (atomic_load(&l[k].failures)) {
                snprintf(why, sizeof why, "%s", l[k].failure);
                goto stop;
            }
        }
        double ms = now_ms() - t0;
        total += ms;
        print_message("edit to live, N = %d device(s): edit %d %.1f ms\n", n, v, ms);
    }
    print_message("edit to live, N = %d device(s): mean %.1f ms over %d edits\n", n,
                  total / EDITS, EDITS);
    /* A few more launches on the last version, then stop. */
    for (int k = 0; k < n; k++)
        at_least[k] = atomic_load(&l[k].launches) + 2;
    wait_launches(l, n, at_least, why, sizeof why);
stop:
    atomic_store(&stop, 1);
    for (int k = 0; k < n; k++)
        assert_int_equal(pthread_join(l[k].thread, NULL), 0);
    if (why[0])
        fail_msg("%s", why);
    int compiles = atomic_load(&g_compiles) - compiles0;
    for (int k = 0; k < n; k++) {
        if (atomic_load(&l[k].failures))
            fail_msg("%s", l[k].failure);
        print_message("device %d: %ld launches, generation %llu\n", k,
                      atomic_load(&l[k].launches),
                      (unsigned long long)jitop_module_generation(l[k].m));
        assert_int_equal(jitop_module_generation(l[k].m), EDITS);
        assert_int_equal(atomic_load(&l[k].reloads_failed), 0);
    }
    /* Every device rebuilt each edit; the devices of one arch share each
     * compile through the cache. */
    print_message("N = %d: %d compile(s) for %d edits on %d arch(es)\n", n, compiles, EDITS,
                  narchs);
    assert_int_equal(compiles, EDITS * narchs);
    for (int k = n - 1; k >= 0; k--)
        launcher_close(&l[k]);
    free(l);
    jt_rm_rf(dir);
    free(path);
    free(cache);
    free(dir);
}

static void test_reload_reaches_every_device(void **state)
{
    (void)state;
    require_gpus();
    reload_round(1);
    reload_round(g_ndev);
}

/* ---------------------------------------------------------- teardown */

/* Contexts destroyed first to last, then last to first: after each
 * destroy, every device left still loads nothing new and launches right. */
static void teardown_order(const char *cache, const char *path, int reverse)
{
    axpy_dev d[MAX_DEV];
    memset(d, 0, sizeof d);
    for (int k = 0; k < g_ndev; k++) {
        d[k].ctx = dev_ctx(cache, k);
        axpy_load(&d[k], path);
        axpy_queue(&d[k]);
    }
    for (int k = 0; k < g_ndev; k++)
        axpy_check(&d[k], k);
    for (int i = 0; i < g_ndev; i++) {
        int gone = reverse ? g_ndev - 1 - i : i;
        axpy_free(&d[gone]);
        for (int k = 0; k < g_ndev; k++) {
            if (d[k].ctx) {
                axpy_queue(&d[k]);
                axpy_check(&d[k], k);
            }
        }
    }
}

static void test_teardown_in_both_orders(void **state)
{
    (void)state;
    require_gpus();
    char *dir = jt_tmpdir();
    char *cache = jt_path(dir, "cache");
    char *path = jt_write(dir, "axpy.cu", AXPY);
    teardown_order(cache, path, 0);
    teardown_order(cache, path, 1);
    jt_rm_rf(dir);
    free(path);
    free(cache);
    free(dir);
}

int main(void)
{
    /* Each context compiles for its own device's arch. */
    if (unsetenv("JITOP_ARCH") != 0) {
        perror("unsetenv");
        return 1;
    }
    jitop__before_compile_hook = count_compile;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_load_and_launch_on_every_device),
        cmocka_unit_test(test_shipped_ops_on_every_device),
        cmocka_unit_test(test_reload_reaches_every_device),
        cmocka_unit_test(test_teardown_in_both_orders),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    jt_cleanup();
    return failed;
}
