/* The LLTM cell's C entry points: pick a path and launch shapes for the
 * caller, fetch the kernel instances from kernels/lltm.cu through jitop
 * itself, and for large sizes run the products through cuBLAS (opened with
 * dlopen: the library never links it).
 *
 * Two paths, chosen per call from the size (bench/lltm_NOTES.md has the
 * measurements behind the threshold):
 *  - fused (small): the whole forward in one launch (the three gate products
 *    with the gate math in the epilogue) and the whole backward in one launch
 *    (both products, d_gates recomputed while loading). Launch overhead
 *    dominates there, so the fewest launches win.
 *  - cuBLAS (large, and only with a saved buffer): forward = copy X, one
 *    sgemm/dgemm into the saved buffer, one elementwise kernel; backward =
 *    one elementwise kernel (d_gates, d_old_cell, d_bias) and three
 *    products. The products dominate there and cuBLAS runs them faster than
 *    our SIMT tiles. Full fp32: the handle's math mode is CUBLAS_DEFAULT_MATH
 *    (no TF32).
 * $JITOP_LLTM_PATH=fused|cublas forces a path (read once per context; tests
 * and benchmarks use it to check both).
 *
 * Host cost per call: argument checks, one acquire load of the state, one
 * table lookup per kernel, the launches. The first call per (dtype, kernel)
 * loads the module and gets the instance under ctx->lock. */
#include "build/build.h"
#include "load/driver.h"
#include "ops/cublas_dl.h"
#include "ops/ops_state.h"

#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum lltm_slot {
    SLOT_FWD_SAVE,    /* fused forward that fills saved */
    SLOT_FWD_NOSAVE,  /* fused forward, inference */
    SLOT_BWD_FUSED,   /* both backward products, d_gates computed on the fly */
    SLOT_BWD_SPLIT,   /* both backward products, d_gates read from saved */
    SLOT_GATES,       /* d_gates + d_old_cell into saved (before SLOT_BWD_SPLIT) */
    SLOT_GATES_BIAS,  /* the same plus d_bias (cuBLAS path) */
    SLOT_POINTWISE,   /* cuBLAS path: raw gates to outputs and activations */
    SLOT_COPY_X,      /* cuBLAS path: X = [old_h, input] into saved */
    SLOT_DX_REDUCE,   /* cuBLAS path: split-K partials of d_X to d_old_h, d_input */
    SLOT_COUNT
};

/* One kernel instance: its name expression and block size. The tilings are
 * the template arguments; lltm_shape() below must agree with them. */
typedef struct lltm_kernel {
    const char *name;
    unsigned threads;
} lltm_kernel;

/* Tilings (see kernels/lltm.cu): fwd <T, BM, BN, BK, TM, TN, KS, SAVE>,
 * threads (BM/TM)(BN/TN)KS; bwd <T, FUSED, BK, BM1, BN1, TM1, TN1, KS1, BM2,
 * BN2, TM2, TN2, KS2>. At the small sizes the fused kernels run on a few
 * dozen blocks, and a block's time is its chain of k tiles plus its shared
 * memory reads: small output tiles (more blocks, fewer shared reads each)
 * and the reduction split over KS thread groups. At the tutorial's size
 * (K + 1 = 161, 3S = 384) the fp32 kernels take one round of k tiles with
 * short chains: the forward 11 tiles of 16 over 16 groups, the backward's
 * d_X 24 tiles of 16 over 24 groups (its d_W blocks, 3 groups of 256
 * threads, reduce over B). Against 8 and 16 groups of 32 this is a faster
 * forward + backward and a forward of less than half the code
 * (bench/lltm_NOTES.md). */
/* The fused forward's BM, BN per dtype (must match the names below). */
static const unsigned lltm_fwd_tile[2][2] = {{8, 4}, {16, 8}};
static const lltm_kernel lltm_kernels[2][SLOT_COUNT] = {
    {
        {"lltm_fwd<float, 8, 4, 16, 1, 1, 16, true>", 512},
        {"lltm_fwd<float, 8, 4, 16, 1, 1, 16, false>", 512},
        {"lltm_bwd<float, true, 16, 8, 4, 1, 1, 24, 32, 32, 2, 2, 3>", 768},
        {"lltm_bwd<float, false, 16, 32, 64, 4, 4, 1, 64, 64, 8, 4, 1>", 128},
        {"lltm_bwd_gates<float, false>", 256},
        {"lltm_bwd_gates<float, true>", 256},
        {"lltm_fwd_pointwise<float>", 256},
        {"lltm_copy_x<float>", 256},
        {"lltm_dx_reduce<float>", 256},
    },
    {
        {"lltm_fwd<double, 16, 8, 16, 2, 1, 4, true>", 256},
        {"lltm_fwd<double, 16, 8, 16, 2, 1, 4, false>", 256},
        {"lltm_bwd<double, true, 16, 16, 32, 2, 2, 2, 32, 32, 2, 2, 1>", 256},
        {"lltm_bwd<double, false, 16, 16, 32, 2, 2, 1, 32, 32, 2, 4, 1>", 128},
        {"lltm_bwd_gates<double, false>", 256},
        {"lltm_bwd_gates<double, true>", 256},
        {"lltm_fwd_pointwise<double>", 256},
        {"lltm_copy_x<double>", 256},
        {"lltm_dx_reduce<double>", 256},
    },
};
/* The d_X and d_W tilings of the two bwd instances (fused, split), per
 * dtype: BM1, BN1, BM2, BN2. */
static const int lltm_bwd_tiles[2][2][4] = {
    {{8, 4, 32, 32}, {32, 64, 64, 64}},
    {{16, 32, 32, 32}, {16, 32, 32, 32}},
};

/* Sizes (B * 3S * K multiply-adds) from which cuBLAS runs the products, and
 * from which the fused backward's recomputation of d_gates per tile costs
 * more than a second launch. They sit between the tutorial's size, B16 I32
 * S128 (1.0e6), fastest fused, and B64 I256 S1024 (2.5e8), fastest with
 * cuBLAS (bench/lltm_NOTES.md). */
#define LLTM_CUBLAS_FROM 16000000.0
#define LLTM_SPLIT_BWD_FROM 4000000.0

enum lltm_path { PATH_AUTO, PATH_FUSED, PATH_CUBLAS };

/* cuBLAS's products (cublas_dl.h has the handle); enums are ints
 * (CUBLAS_OP_N 0, CUBLAS_OP_T 1). */
typedef int (*cublas_sgemm_fn)(void *h, int ta, int tb, int m, int n, int k, const float *alpha,
                               const float *a, int lda, const float *b, int ldb,
                               const float *beta, float *c, int ldc);
typedef int (*cublas_dgemm_fn)(void *h, int ta, int tb, int m, int n, int k, const double *alpha,
                               const double *a, int lda, const double *b, int ldb,
                               const double *beta, double *c, int ldc);
typedef int (*cublas_sgemm_strided_fn)(void *h, int ta, int tb, int m, int n, int k,
                                       const float *alpha, const float *a, int lda, long long sa,
                                       const float *b, int ldb, long long sb, const float *beta,
                                       float *c, int ldc, long long sc, int count);
typedef int (*cublas_dgemm_strided_fn)(void *h, int ta, int tb, int m, int n, int k,
                                       const double *alpha, const double *a, int lda,
                                       long long sa, const double *b, int ldb, long long sb,
                                       const double *beta, double *c, int ldc, long long sc,
                                       int count);

typedef struct lltm_cublas {
    jitop__cublas blas; /* first: jitop__cublas_open allocates the whole */
    cublas_sgemm_fn sgemm;
    cublas_dgemm_fn dgemm;
    cublas_sgemm_strided_fn sgemm_strided;
    cublas_dgemm_strided_fn dgemm_strided;
    pthread_mutex_t lock; /* the handle's stream is per handle: one caller at a time */
} lltm_cublas;

struct jitop__lltm_state {
    jitop_module *module;
    jitop_op *ops[2][SLOT_COUNT]; /* published with release stores */
    enum lltm_path path;
    int cublas_tried;             /* set under ctx->lock after cublas, read with acquire */
    lltm_cublas *cublas;          /* NULL: not available (fused path everywhere) */
    bool programmatic;            /* launch our kernels with programmatic serialization */
};

static void lltm_state_destroy(jitop_ctx *ctx)
{
    struct jitop__lltm_state *st = ctx->ops ? ctx->ops->lltm : NULL;
    if (st != NULL && st->cublas != NULL) {
        const jitop__driver *d = jitop__driver_of(ctx);
        /* The handle belongs to the context: destroy it with that current. */
        const bool live = d != NULL && jitop__driver_make_current(d) == JITOP_OK;
        pthread_mutex_destroy(&st->cublas->lock);
        jitop__cublas_close(ctx, "lltm", &st->cublas->blas, live);
    }
    free(st);
    if (ctx->ops != NULL)
        ctx->ops->lltm = NULL;
}

/* Creates the state under ctx->lock (another thread may have won the race:
 * then its state is used). */
static int lltm_state_create(jitop_ctx *ctx, jitop_module *m, struct jitop__lltm_state **out)
{
    jitop__ops_state *ops = NULL;
    struct jitop__lltm_state *st = NULL;
    pthread_mutex_lock(&ctx->lock);
    int status = jitop__ops_state_get(ctx, &ops);
    if (status == JITOP_OK && ops->lltm == NULL) {
        st = calloc(1, sizeof *st);
        if (st == NULL)
            status = jitop__fail(JITOP_ENOMEM, "lltm: out of memory");
        if (status == JITOP_OK)
            status = jitop__ctx_on_destroy(ctx, lltm_state_destroy);
        if (status == JITOP_OK) {
            const char *p = getenv("JITOP_LLTM_PATH");
            st->module = m;
            st->path = PATH_AUTO;
            if (p != NULL && strcmp(p, "fused") == 0)
                st->path = PATH_FUSED;
            else if (p != NULL && strcmp(p, "cublas") == 0)
                st->path = PATH_CUBLAS;
            /* Programmatic dependent launch needs sm_90; JITOP_LLTM_PDL=0
             * turns it off (to compare). */
            const char *pdl = getenv("JITOP_LLTM_PDL");
            st->programmatic = jitop__driver_of(ctx) != NULL &&
                               jitop__driver_of(ctx)->cc_major >= 9 &&
                               !(pdl != NULL && strcmp(pdl, "0") == 0);
            __atomic_store_n(&ops->lltm, st, __ATOMIC_RELEASE);
            st = NULL;
        }
        free(st);
    }
    if (status == JITOP_OK)
        *out = ops->lltm;
    pthread_mutex_unlock(&ctx->lock);
    return status;
}

/* The state, created on first use (loads kernels/lltm.cu with every
 * instance of dtype index t declared, -instance=, as the prewarm folds
 * them: a cold first call compiles the source once, and which instances
 * its sizes pick then costs no compile). Once it exists: two acquire
 * loads. */
static int lltm_state(jitop_ctx *ctx, int t, struct jitop__lltm_state **out)
{
    jitop__ops_state *ops = __atomic_load_n(&ctx->ops, __ATOMIC_ACQUIRE);
    struct jitop__lltm_state *st = ops ? __atomic_load_n(&ops->lltm, __ATOMIC_ACQUIRE) : NULL;
    int status = JITOP_OK;
    char *path = NULL;
    jitop_module *m = NULL;
    if (st != NULL) {
        *out = st;
        goto out;
    }
    if (ctx->kernel_dir == NULL) {
        status = jitop__fail(JITOP_ENOTFOUND, "lltm: the context has no kernel directory");
        goto out;
    }
    path = jitop__sprintf("%s/lltm.cu", ctx->kernel_dir);
    if (path == NULL) {
        status = jitop__fail(JITOP_ENOMEM, "lltm: out of memory");
        goto out;
    }
    const char *sources[1] = {path};
    jitop__strv opts = {0};
    for (int slot = 0; status == JITOP_OK && slot < SLOT_COUNT; slot++)
        status = jitop__strv_pushf(&opts, "-instance=%s", lltm_kernels[t][slot].name);
    /* Outside ctx->lock: jitop_load takes it itself. Two threads racing here
     * get the same module (the loader's table). */
    if (status == JITOP_OK)
        status = jitop_load(ctx, "lltm", sources, 1, (const char *const *)opts.v, opts.n, &m);
    jitop__strv_free(&opts);
    if (status != JITOP_OK) {
        status = jitop__fail_prefix(status, "lltm: loading %s", path);
        goto out;
    }
    status = lltm_state_create(ctx, m, out);
out:
    free(path);
    return status;
}

static int lltm_op(struct jitop__lltm_state *st, int t, enum lltm_slot slot, jitop_op **out)
{
    int status = JITOP_OK;
    jitop_op *op = __atomic_load_n(&st->ops[t][slot], __ATOMIC_ACQUIRE);
    if (op == NULL) {
        /* jitop_op_get is thread-safe and returns the same handle for the
         * same name, so a race here only stores the same pointer twice. */
        status = jitop_op_get(st->module, lltm_kernels[t][slot].name, &op);
        if (status == JITOP_OK)
            __atomic_store_n(&st->ops[t][slot], op, __ATOMIC_RELEASE);
    }
    if (status == JITOP_OK)
        *out = op;
    return status;
}

/* Gets the instance in slot and launches it: the one step every path
 * repeats. Every kernel of kernels/lltm.cu begins with
 * lltm_after_previous_grid(), so any may be launched with programmatic
 * stream serialization. */
static int lltm_run(struct jitop__lltm_state *st, int t, enum lltm_slot slot, jitop_dim3 grid,
                    jitop_dim3 block, void *stream, void **args, size_t nargs)
{
    jitop_op *op = NULL;
    int status = lltm_op(st, t, slot, &op);
    if (status != JITOP_OK)
        return status;
    if (!st->programmatic)
        return jitop_launch(op, grid, block, 0, stream, args, NULL, nargs);
    jitop_launch_config lc = {.grid = grid, .block = block, .stream = stream, .programmatic = 1};
    return jitop_launch_ex(op, &lc, args, NULL, nargs);
}

/* cuBLAS (see jitop__cublas_open) with the products' entry points and the
 * lock; NULL, with the reason logged, when any step fails. */
static lltm_cublas *lltm_cublas_load(jitop_ctx *ctx)
{
    static const char *const names[] = {"cublasSgemm_v2", "cublasDgemm_v2",
                                        "cublasSgemmStridedBatched", "cublasDgemmStridedBatched"};
    static const char fallback[] = "; the fused kernels run every size";
    void *fns[4];
    lltm_cublas *cb = jitop__cublas_open(ctx, "lltm", fallback, sizeof *cb, names, fns, 4);
    if (cb == NULL)
        return NULL;
    if (pthread_mutex_init(&cb->lock, NULL) != 0) {
        jitop__cublas_close(ctx, "lltm", &cb->blas, true);
        jitop__log(ctx, "lltm: cuBLAS not available (setup failed)%s", fallback);
        return NULL;
    }
    cb->sgemm = (cublas_sgemm_fn)fns[0];
    cb->dgemm = (cublas_dgemm_fn)fns[1];
    cb->sgemm_strided = (cublas_sgemm_strided_fn)fns[2];
    cb->dgemm_strided = (cublas_dgemm_strided_fn)fns[3];
    return cb;
}

/* Opens cuBLAS for ctx once (under ctx->lock). Not finding it is not an
 * error: the fused path then runs every size. */
static void lltm_cublas_open(jitop_ctx *ctx, struct jitop__lltm_state *st)
{
    pthread_mutex_lock(&ctx->lock);
    if (!st->cublas_tried) {
        lltm_cublas *cb = lltm_cublas_load(ctx);
        if (cb != NULL)
            __atomic_store_n(&st->cublas, cb, __ATOMIC_RELEASE);
        __atomic_store_n(&st->cublas_tried, 1, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&ctx->lock);
}

static int lltm_dtype_index(jitop_dtype dtype)
{
    return dtype == JITOP_FLOAT32 ? 0 : (dtype == JITOP_FLOAT64 ? 1 : -1);
}

static size_t lltm_esize(jitop_dtype dtype)
{
    return dtype == JITOP_FLOAT64 ? sizeof(double) : sizeof(float);
}

/* The first invalid argument, named; JITOP_OK when all are valid. ptrs[i]
 * is the pointer argument called names[i]. */
static int lltm_check_args(const char *fn, jitop_ctx *ctx, jitop_dtype dtype, int B, int I, int S,
                           const void *const *ptrs, const char *const *names, size_t nptrs)
{
    int status = JITOP_OK;
    double K = (double)S + I;
    if (ctx == NULL)
        status = jitop__fail(JITOP_EINVAL, "%s: ctx is NULL", fn);
    else if (lltm_dtype_index(dtype) < 0)
        status = jitop__fail(JITOP_EINVAL, "%s: dtype %d is not JITOP_FLOAT32 or JITOP_FLOAT64",
                             fn, (int)dtype);
    else if (B < 1)
        status = jitop__fail(JITOP_EINVAL, "%s: B (batch) must be >= 1, got %d", fn, B);
    else if (I < 1)
        status = jitop__fail(JITOP_EINVAL, "%s: I (input features) must be >= 1, got %d", fn, I);
    else if (S < 1)
        status = jitop__fail(JITOP_EINVAL, "%s: S (state size) must be >= 1, got %d", fn, S);
    /* The kernels index matrices with 32-bit rows/columns and grids. */
    else if ((double)B * (8.0 * S + I) > (double)INT_MAX || 3.0 * S * (K + 1) > (double)INT_MAX)
        status = jitop__fail(JITOP_EINVAL, "%s: B=%d I=%d S=%d is too large (more than 2^31 "
                             "elements in one matrix)", fn, B, I, S);
    for (size_t i = 0; status == JITOP_OK && i < nptrs; i++)
        if (ptrs[i] == NULL)
            status = jitop__fail(JITOP_EINVAL, "%s: %s is NULL", fn, names[i]);
    return status;
}

size_t jitop_lltm_saved_size(jitop_dtype dtype, int B, int I, int S)
{
    size_t bytes = 0;
    if (lltm_dtype_index(dtype) >= 0 && B >= 1 && I >= 1 && S >= 1)
        bytes = (size_t)B * (8 * (size_t)S + (size_t)I) * lltm_esize(dtype);
    return bytes;
}

static bool lltm_use_cublas(jitop_ctx *ctx, struct jitop__lltm_state *st, int B, int I, int S)
{
    bool want = st->path == PATH_CUBLAS ||
                (st->path == PATH_AUTO && (double)B * 3.0 * S * ((double)S + I) >= LLTM_CUBLAS_FROM);
    if (want && !__atomic_load_n(&st->cublas_tried, __ATOMIC_ACQUIRE))
        lltm_cublas_open(ctx, st);
    return want && __atomic_load_n(&st->cublas, __ATOMIC_ACQUIRE) != NULL;
}

/* One product in cuBLAS's column-major view (see the mapping in each
 * caller); with count > 1, count products at strides sa, sb, sc apart (the
 * slices of a split-K product). */
typedef struct lltm_product {
    int ta, tb, m, n, k;
    const void *a;
    int lda;
    long long sa;
    const void *b;
    int ldb;
    long long sb;
    void *c;
    int ldc;
    long long sc;
    int count;
} lltm_product;

static int lltm_gemm(lltm_cublas *cb, int t, const lltm_product *p)
{
    void *h = cb->blas.handle;
    int r;
    if (t == 0) {
        const float one = 1.0f, zero = 0.0f;
        r = p->count == 1 ? cb->sgemm(h, p->ta, p->tb, p->m, p->n, p->k, &one, p->a,
                                      p->lda, p->b, p->ldb, &zero, p->c, p->ldc)
                          : cb->sgemm_strided(h, p->ta, p->tb, p->m, p->n, p->k, &one,
                                              p->a, p->lda, p->sa, p->b, p->ldb, p->sb, &zero,
                                              p->c, p->ldc, p->sc, p->count);
    } else {
        const double one = 1.0, zero = 0.0;
        r = p->count == 1 ? cb->dgemm(h, p->ta, p->tb, p->m, p->n, p->k, &one, p->a,
                                      p->lda, p->b, p->ldb, &zero, p->c, p->ldc)
                          : cb->dgemm_strided(h, p->ta, p->tb, p->m, p->n, p->k, &one,
                                              p->a, p->lda, p->sa, p->b, p->ldb, p->sb, &zero,
                                              p->c, p->ldc, p->sc, p->count);
    }
    if (r != 0)
        return jitop__fail(JITOP_ECUDA, "lltm: cuBLAS %s (%d x %d x %d, %d slices) failed with status %d",
                           t == 0 ? "sgemm" : "dgemm", p->m, p->n, p->k, p->count, r);
    return JITOP_OK;
}

/* Split-K for a product with an out_rows x out_cols result and a reduced
 * dimension k: at the medium sizes the result has too few 64 x 64 tiles to
 * fill the GPU (B = 64 rows), and cuBLAS runs each tile's whole k on one
 * block. Slices of k, each its own product in one batched call, give about
 * four tiles per SM; the slices are summed by the kernel that reads the
 * result next. At B64 I256 S1024 that nearly halves d_X's product (12
 * slices: 24 are no faster over the whole backward, with twice the partials
 * to sum) and cuts the forward's gates by a fifth (8 slices); cuBLASLt's
 * own split-K and every algorithm it offers for these shapes were slower
 * (bench/lltm_NOTES.md). 1: no split (large sizes fill
 * the GPU). */
static int lltm_split_k(const jitop__driver *d, int out_rows, int out_cols, int k)
{
    /* At most LLTM_MAX_SLICES (kernels/lltm.cu), which the kernels that sum
     * the slices unroll to: the list starts at that limit. */
    enum { LLTM_MAX_SLICES = 12 };
    static const int slices[] = {LLTM_MAX_SLICES, 8, 6, 4, 3, 2};
    long tiles = (long)((out_rows + 63) / 64) * ((out_cols + 63) / 64);
    long want = 4L * d->sm_count / tiles;
    for (size_t i = 0; i < sizeof slices / sizeof slices[0]; i++)
        if (slices[i] <= want && k % slices[i] == 0 && k / slices[i] >= 128)
            return slices[i];
    return 1;
}

/* Scratch for split-K partials, stream-ordered on the caller's stream (the
 * driver's memory pool keeps it between calls, and two streams never share
 * it). When the pool cannot give it, the product runs unsplit: 0 there. */
static CUdeviceptr lltm_scratch(jitop_ctx *ctx, size_t bytes, void *stream)
{
    const jitop__driver *d = jitop__driver_of(ctx);
    CUdeviceptr p = 0;
    if (jitop__cuda_more() != JITOP_OK) {
        jitop__log(ctx, "lltm: %s: products run unsplit", jitop_errmsg(NULL));
        jitop__clear_error();
        return 0;
    }
    CUresult r = d->api->cuMemAllocAsync(&p, bytes, (CUstream)stream);
    if (r != CUDA_SUCCESS) {
        jitop__log(ctx, "lltm: cuMemAllocAsync(%zu bytes) failed (%d): products run unsplit",
                   bytes, (int)r);
        return 0;
    }
    return p;
}

static int lltm_scratch_free(jitop_ctx *ctx, CUdeviceptr p, void *stream)
{
    if (p == 0)
        return JITOP_OK;
    const jitop__driver *d = jitop__driver_of(ctx);
    return jitop__cu_check(d->api->cuMemFreeAsync(p, (CUstream)stream), "lltm: cuMemFreeAsync",
                           NULL);
}

/* lltm_bwd_gates' launch shape (LLTM_GATES_COLS x LLTM_GATES_ROWS in
 * kernels/lltm.cu): a block per 8 state columns. */
static const jitop_dim3 lltm_gates_block = {8, 32, 1};
static jitop_dim3 lltm_gates_grid(int S)
{
    return (jitop_dim3){((unsigned)S + 7) / 8, 1, 1};
}

static unsigned lltm_blocks(size_t n, unsigned threads)
{
    size_t b = (n + threads - 1) / threads;
    return b > 65535u * 16u ? 65535u * 16u : (unsigned)b; /* grid-stride loops cover the rest */
}

/* Forward, cuBLAS path: X into saved, gates = X W^T (into act's first 3S
 * columns, ld 4S, or split-K into scratch), then the elementwise kernel. In
 * cuBLAS's column-major view act^T (3S x B) = W (col-major K x 3S,
 * transposed) times X^T (K x B). */
static int lltm_forward_cublas(jitop_ctx *ctx, struct jitop__lltm_state *st, int t, int B, int I,
                               int S, const void *input, const void *weights, const void *bias,
                               const void *old_h, const void *old_cell, void *new_h,
                               void *new_cell, void *saved, void *stream)
{
    lltm_cublas *cb = st->cublas;
    size_t es = lltm_esize(t == 0 ? JITOP_FLOAT32 : JITOP_FLOAT64);
    int K = S + I;
    const char *X = (const char *)saved + (size_t)4 * B * S * es;
    unsigned nt = lltm_kernels[t][SLOT_COPY_X].threads;
    void *cargs[] = {&input, &old_h, &saved, &B, &I, &S};
    int status = lltm_run(st, t, SLOT_COPY_X, (jitop_dim3){lltm_blocks((size_t)B * K, nt), 1, 1},
                          (jitop_dim3){nt, 1, 1}, stream, cargs, 6);
    if (status == JITOP_OK)
        status = jitop__driver_make_current(jitop__driver_of(ctx));
    if (status != JITOP_OK)
        return status;
    int ks = lltm_split_k(jitop__driver_of(ctx), B, 3 * S, K);
    CUdeviceptr scratch = ks > 1 ? lltm_scratch(ctx, (size_t)ks * B * 3 * S * es, stream) : 0;
    if (scratch == 0)
        ks = 1;
    lltm_product p = {1, 0, 3 * S, B, K / ks, weights, K, K / ks, X, K, K / ks, saved, 4 * S, 0, ks};
    if (ks > 1) {
        p.c = (void *)(uintptr_t)scratch;
        p.ldc = 3 * S;
        p.sc = (long long)B * 3 * S;
    }
    pthread_mutex_lock(&cb->lock);
    if (cb->blas.set_stream(cb->blas.handle, stream) != 0)
        status = jitop__fail(JITOP_ECUDA, "lltm: cublasSetStream failed");
    if (status == JITOP_OK)
        status = lltm_gemm(cb, t, &p);
    pthread_mutex_unlock(&cb->lock);
    nt = lltm_kernels[t][SLOT_POINTWISE].threads;
    const void *part = (const void *)(uintptr_t)scratch;
    void *pargs[] = {&bias, &old_cell, &new_h, &new_cell, &saved, &part, &ks, &B, &S};
    if (status == JITOP_OK)
        status = lltm_run(st, t, SLOT_POINTWISE, (jitop_dim3){lltm_blocks((size_t)B * S, nt), 1, 1},
                          (jitop_dim3){nt, 1, 1}, stream, pargs, 9);
    int freed = lltm_scratch_free(ctx, scratch, stream);
    return status != JITOP_OK ? status : freed;
}

int jitop_lltm_forward(jitop_ctx *ctx, jitop_dtype dtype, int B, int I, int S, const void *input,
                       const void *weights, const void *bias, const void *old_h,
                       const void *old_cell, void *new_h, void *new_cell, void *saved,
                       void *stream)
{
    const void *ptrs[] = {input, weights, bias, old_h, old_cell, new_h, new_cell};
    static const char *const names[] = {"input", "weights", "bias", "old_h",
                                        "old_cell", "new_h", "new_cell"};
    struct jitop__lltm_state *st = NULL;
    int t = lltm_dtype_index(dtype);
    int status = lltm_check_args("jitop_lltm_forward", ctx, dtype, B, I, S, ptrs, names, 7);
    if (status == JITOP_OK)
        status = lltm_state(ctx, t, &st);
    if (status == JITOP_OK && saved != NULL && lltm_use_cublas(ctx, st, B, I, S)) {
        status = lltm_forward_cublas(ctx, st, t, B, I, S, input, weights, bias, old_h, old_cell,
                                     new_h, new_cell, saved, stream);
    } else if (status == JITOP_OK) {
        /* The whole forward in one launch. */
        enum lltm_slot slot = saved != NULL ? SLOT_FWD_SAVE : SLOT_FWD_NOSAVE;
        unsigned bm = lltm_fwd_tile[t][0], bn = lltm_fwd_tile[t][1];
        void *args[] = {&input, &weights, &bias, &old_h, &old_cell, &new_h, &new_cell, &saved,
                        &B, &I, &S};
        status = lltm_run(st, t, slot,
                          (jitop_dim3){((unsigned)S + bn - 1) / bn, ((unsigned)B + bm - 1) / bm, 1},
                          (jitop_dim3){lltm_kernels[t][slot].threads, 1, 1}, stream, args, 11);
    }
    return status;
}

/* Backward, cuBLAS path: d_gates (+ d_old_cell, d_bias) into saved's
 * scratch, then the products (column-major views in the comments): d_X
 * split-K into stream-ordered scratch and summed into d_old_h and d_input
 * by one kernel, or, unsplit, straight into each. */
static int lltm_backward_cublas(jitop_ctx *ctx, struct jitop__lltm_state *st, int t, int B, int I,
                                int S, const void *grad_h, const void *grad_cell, void *saved,
                                const void *weights, void *d_old_h, void *d_input,
                                void *d_weights, void *d_bias, void *d_old_cell, void *stream)
{
    lltm_cublas *cb = st->cublas;
    size_t es = lltm_esize(t == 0 ? JITOP_FLOAT32 : JITOP_FLOAT64);
    int K = S + I;
    const char *X = (const char *)saved + (size_t)4 * B * S * es;
    const char *G = X + (size_t)B * K * es;
    void *gargs[] = {&grad_h, &grad_cell, &saved, &d_old_cell, &d_bias, &B, &I, &S};
    int status = lltm_run(st, t, SLOT_GATES_BIAS, lltm_gates_grid(S), lltm_gates_block, stream,
                          gargs, 8);
    if (status == JITOP_OK)
        status = jitop__driver_make_current(jitop__driver_of(ctx));
    if (status != JITOP_OK)
        return status;
    int ks = lltm_split_k(jitop__driver_of(ctx), B, K, 3 * S);
    CUdeviceptr scratch = ks > 1 ? lltm_scratch(ctx, (size_t)ks * B * K * es, stream) : 0;
    /* d_X (B x K) = G W: d_X^T (K x B) = W as col-major K x 3S times G^T
     * (3S x B, ld 3S); slice j of 3S takes W's rows and G's columns j*k..
     * d_old_h^T (S x B) alone = W[:, :S] (ld K) times G^T; d_input alike
     * from W[:, S:]. */
    lltm_product dx[2];
    int ndx = 1;
    if (scratch != 0) {
        int k = 3 * S / ks;
        dx[0] = (lltm_product){0, 0, K, B, k, weights, K, (long long)k * K, G, 3 * S, k,
                               (void *)(uintptr_t)scratch, K, (long long)B * K, ks};
    } else {
        ks = 1;
        ndx = 2;
        dx[0] = (lltm_product){0, 0, S, B, 3 * S, weights, K, 0, G, 3 * S, 0, d_old_h, S, 0, 1};
        dx[1] = (lltm_product){0, 0, I, B, 3 * S, (const char *)weights + (size_t)S * es, K, 0,
                               G, 3 * S, 0, d_input, I, 0, 1};
    }
    /* d_W (3S x K) = G^T X: d_W^T (K x 3S) = X^T (K x B) times G (B x 3S,
     * the col-major 3S x B transposed). */
    lltm_product dw = {0, 1, K, 3 * S, B, X, K, 0, G, 3 * S, 0, d_weights, K, 0, 1};
    pthread_mutex_lock(&cb->lock);
    if (cb->blas.set_stream(cb->blas.handle, stream) != 0)
        status = jitop__fail(JITOP_ECUDA, "lltm: cublasSetStream failed");
    for (int i = 0; status == JITOP_OK && i < ndx; i++)
        status = lltm_gemm(cb, t, &dx[i]);
    if (status == JITOP_OK)
        status = lltm_gemm(cb, t, &dw);
    pthread_mutex_unlock(&cb->lock);
    if (status == JITOP_OK && scratch != 0) {
        unsigned nt = lltm_kernels[t][SLOT_DX_REDUCE].threads;
        const void *part = (const void *)(uintptr_t)scratch;
        void *rargs[] = {&part, &ks, &d_old_h, &d_input, &B, &I, &S};
        status = lltm_run(st, t, SLOT_DX_REDUCE,
                          (jitop_dim3){lltm_blocks((size_t)B * K, nt), 1, 1},
                          (jitop_dim3){nt, 1, 1}, stream, rargs, 7);
    }
    int freed = lltm_scratch_free(ctx, scratch, stream);
    return status != JITOP_OK ? status : freed;
}

int jitop_lltm_backward(jitop_ctx *ctx, jitop_dtype dtype, int B, int I, int S,
                        const void *grad_h, const void *grad_cell, void *saved,
                        const void *weights, void *d_old_h, void *d_input, void *d_weights,
                        void *d_bias, void *d_old_cell, void *stream)
{
    const void *ptrs[] = {grad_h, grad_cell, saved, weights, d_old_h,
                          d_input, d_weights, d_bias, d_old_cell};
    static const char *const names[] = {"grad_h", "grad_cell", "saved", "weights", "d_old_h",
                                        "d_input", "d_weights", "d_bias", "d_old_cell"};
    struct jitop__lltm_state *st = NULL;
    int t = lltm_dtype_index(dtype);
    int status = lltm_check_args("jitop_lltm_backward", ctx, dtype, B, I, S, ptrs, names, 9);
    if (status == JITOP_OK)
        status = lltm_state(ctx, t, &st);
    if (status == JITOP_OK && lltm_use_cublas(ctx, st, B, I, S)) {
        status = lltm_backward_cublas(ctx, st, t, B, I, S, grad_h, grad_cell, saved, weights,
                                      d_old_h, d_input, d_weights, d_bias, d_old_cell, stream);
    } else if (status == JITOP_OK) {
        /* Fused: one launch, d_gates computed while loading. Split (larger
         * sizes, where that recomputation per tile costs more than a launch):
         * d_gates into saved's scratch first. */
        int K = S + I;
        int split = (double)B * 3.0 * S * K >= LLTM_SPLIT_BWD_FROM;
        void *gargs[] = {&grad_h, &grad_cell, &saved, &d_old_cell, &d_bias, &B, &I, &S};
        if (split)
            status = lltm_run(st, t, SLOT_GATES, lltm_gates_grid(S), lltm_gates_block, stream,
                              gargs, 8);
        enum lltm_slot slot = split ? SLOT_BWD_SPLIT : SLOT_BWD_FUSED;
        const int *tile = lltm_bwd_tiles[t][split];
        unsigned ndx = (unsigned)((K + tile[1] - 1) / tile[1]) *
                       (unsigned)((B + tile[0] - 1) / tile[0]);
        unsigned ndw = (unsigned)((K + 1 + tile[3] - 1) / tile[3]) *
                       (unsigned)((3 * S + tile[2] - 1) / tile[2]);
        void *args[] = {&grad_h, &grad_cell, &saved, &weights, &d_old_h, &d_input, &d_weights,
                        &d_bias, &d_old_cell, &B, &I, &S};
        if (status == JITOP_OK)
            status = lltm_run(st, t, slot, (jitop_dim3){ndx + ndw, 1, 1},
                              (jitop_dim3){lltm_kernels[t][slot].threads, 1, 1}, stream, args, 12);
    }
    return status;
}

/* ------------------------------------------------------------ prewarm */

int jitop_lltm_prewarm(jitop_ctx *ctx, const char *arch, jitop_dtype dtype)
{
    static const char *fn = "jitop_lltm_prewarm";
    if (ctx == NULL)
        return jitop__fail(JITOP_EINVAL, "%s: ctx is NULL", fn);
    if (dtype != JITOP_FLOAT32 && dtype != JITOP_FLOAT64)
        return jitop__fail(JITOP_EINVAL, "%s: dtype %d is not float32 or float64", fn, (int)dtype);
    if (ctx->kernel_dir == NULL)
        return jitop__fail(JITOP_ENOTFOUND, "%s: the context has no kernel directory", fn);
    int status = JITOP_OK;
    if (arch == NULL && (status = jitop_ctx_arch(ctx, &arch)) != JITOP_OK)
        return jitop__fail_prefix(status, "%s", fn);
    char *path = jitop__sprintf("%s/lltm.cu", ctx->kernel_dir);
    if (path == NULL)
        return jitop__fail(JITOP_ENOMEM, "%s: out of memory", fn);
    /* The source as jitop_load builds it, with every instance the ops may
     * ask for (which ones a call uses depends on its sizes) folded in
     * (build/build.h): one compile, each get then none. */
    const int t = dtype == JITOP_FLOAT64;
    jitop__strv want = {0};
    for (int slot = 0; status == JITOP_OK && slot < SLOT_COUNT; slot++)
        status = jitop__strv_push(&want, lltm_kernels[t][slot].name);
    jitop_build_result r;
    if (status == JITOP_OK)
        status = jitop__build_fold(ctx, path, arch, NULL, 0, &want, &r);
    jitop__strv_free(&want);
    free(path);
    return status == JITOP_OK ? JITOP_OK : jitop__fail_prefix(status, "%s (%s)", fn, arch);
}
