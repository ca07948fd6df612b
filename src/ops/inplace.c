/*
 * The in-place ops' C entry points (kernels/inplace.cu): the square product
 * A <- A W / A W^T and the row softmax, written over their input.
 *
 * Square product, two paths (bench/INPLACE_NOTES.md has the measurements):
 *  - n <= IP_SMALL_N: sqmm_small, compiled by jitop per (dtype, n, transpose):
 *    a tile of rows in shared memory, multiplied by W there, written back over
 *    itself. One read and one write of A, no scratch. At these n the product
 *    is memory-bound and a library GEMM cannot be in place.
 *  - larger n: cuBLAS (libcublas.so.13, opened at run time) in row chunks:
 *    chunk i's product goes to a scratch buffer, then is copied back over
 *    chunk i (cuMemcpyDtoDAsync). With two or more chunks the copies run on a
 *    second stream of the context's own, with b scratch buffers in turn
 *    (2 by default), so that chunk i's copy overlaps chunk i+1's product (the
 *    product is compute-bound there; the copy moves bytes). The scratch, per
 *    caller stream, holds at most b x max(chunk, one row) bytes whatever m
 *    is (jitop_inplace_scratch_bytes says how much is held now). cuBLAS's
 *    kernels fill every SM, and the driver's copy runs on SMs too, so the
 *    copies mostly run between products; $JITOP_INPLACE_MM_COPY_SMS=k keeps
 *    k SMs from cuBLAS (its SM count target) and copies with ip_copy on them
 *    instead. ops/ip_plan.h has the plan and the settings.
 * Softmax: softmax_rows (a row in one block's registers), softmax_split (a
 * row over a cluster of smaller blocks, several per SM, sm_90), else
 * softmax_long (two reads); softmax_cluster (a cluster of 1024-thread
 * blocks), softmax_lean2 and softmax_rows_lean2 only when asked for.
 *
 * Per-context state (ctx->ops->inplace): the module, the instances already
 * got (a short list under s->lock), cuBLAS, and the scratch per stream. The
 * product's whole enqueue runs under s->lock: cuBLAS's stream is set per
 * handle, and the scratch is in use until the enqueue is done.
 */
#include "load/driver.h"
#include "load/load.h"
#include "ops/cublas_dl.h"
#include "ops/ip_plan.h"
#include "ops/ops_state.h"

#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The largest n sqmm_small takes (its W and tile fit the 48 KiB of static
 * shared memory: 33 KiB at 64). */
#define IP_SMALL_N 64
/* Bytes of a row one softmax_rows thread holds at most (raw T: 32 float32
 * or 64 16-bit elements) and its largest block: rows to 128 KiB fit one
 * block. softmax_cluster spreads a row over up to IP_SOFTMAX_MAX_CLUSTER
 * blocks of 1024 threads holding IP_SOFTMAX_CLUSTER_BYTES each: rows to
 * 512 KiB. Which path a row length takes (the fastest when each path was
 * forced; the measurements are in bench/INPLACE_NOTES.md):
 *   rows of 32-128 KiB one block holds, unmasked: one block with
 *     softmax_lean2's arithmetic (softmax_rows_lean2: each exponential
 *     once), faster there than softmax_rows and every split layout on
 *     sm_90 (before sm_90, 16-bit rows over 64 KiB keep softmax_long);
 *   shorter rows, and masked rows to 64 KiB: one block (softmax_rows);
 *   masked float32 rows filling a 1024-thread block at 128 bytes a thread
 *     (32768): one block, which measured faster than split256;
 *   other rows, sm_90: softmax_lean2 (the split layout with one
 *     exponential an element; masked rows softmax_split) in blocks of 256
 *     for rows to 256 KiB, else 512: the lean arithmetics beat
 *     softmax_split's in the same layout, and that layout beats one block,
 *     a cluster of 1024s and the long kernel at these lengths; any
 *     alignment (odd rows: one element a vector, the last slice shorter);
 *   before sm_90: float32 rows to 128 KiB one block, the rest softmax_long;
 *   longer rows: softmax_long.
 * $JITOP_INPLACE_SOFTMAX=block|cluster|long|split|split256|split128|lean|
 * lean256|leanblock|lean2|lean2_256|lean2_128|lean2block forces a path where
 * it can run (read once per context, for the benchmark's comparison). split:
 * softmax_split with blocks of IP_SOFTMAX_SPLIT_TPR threads (split256: 256,
 * split128: 128), each thread holding at most IP_SOFTMAX_SPLIT_BYTES of the
 * row (twice that where the row needs it), over a cluster of 2 to
 * IP_SOFTMAX_MAX_CLUSTER blocks: rows of 16 KiB (8 KiB, 4 KiB) to 512 KiB
 * (256 KiB, 128 KiB). lean, lean256: split,
 * split256 with softmax_lean's arithmetic (fewer ALU ops a 16-bit element,
 * the same bits; masked rows take softmax_split); leanblock: block with it.
 * lean2, lean2_256, lean2_128, lean2block: split, split256, split128, block
 * with softmax_lean2's (each exponential once, w kept rounded to T between
 * the passes: up to half an ulp of T more error before a 16-bit output's
 * final rounding; masked rows take softmax_split / softmax_rows). */
#define IP_SOFTMAX_REG_BYTES 128
/* Rows of at least this many bytes that one block holds take
 * softmax_rows_lean2 (see the path list above). */
#define IP_SOFTMAX_LEAN2BLOCK_FROM 32768
#define IP_SOFTMAX_MAX_TPR 1024
#define IP_SOFTMAX_BLOCK_ROW 65536
#define IP_SOFTMAX_CLUSTER_FROM 131072
#define IP_SOFTMAX_CLUSTER_BYTES 64
#define IP_SOFTMAX_MAX_CLUSTER 8
#define IP_SOFTMAX_SPLIT_TPR 512
#define IP_SOFTMAX_SPLIT_BYTES 64

enum ip_softmax_path {
    SM_AUTO,
    SM_BLOCK,
    SM_CLUSTER,
    SM_LONG,
    SM_SPLIT,
    SM_SPLIT256,
    SM_SPLIT128,
    SM_LEAN,
    SM_LEAN256,
    SM_LEANBLOCK,
    SM_LEAN2,
    SM_LEAN2_256,
    SM_LEAN2_128,
    SM_LEAN2BLOCK
};
/* Target bytes per thread: 32 for rows under IP_SOFTMAX_SHORT_ROW bytes
 * (many rows per SM), 128 from there (16-bit rows of 4096, 8 KiB, run
 * markedly faster at 128 bytes than at 32), where fewer threads per row
 * means fewer warps waiting at the row's two reductions and more rows in
 * flight per SM (bench/INPLACE_NOTES.md). */
#define IP_SOFTMAX_SHORT_ROW 8192
#define IP_SOFTMAX_BYTES_SHORT 32
#define IP_SOFTMAX_BYTES_LONG 128
/* The n above which W (n x n elements) could not be indexed by cuBLAS's int
 * leading dimensions and counts. */
#define IP_MAX_N (1 << 20)

/* cuBLAS's cublasGemmEx (cublas_dl.h has the handle); enums as ints:
 * CUBLAS_OP_N 0 / T 1, CUDA_R_32F 0 / 16F 2 / 16BF 14, CUBLAS_COMPUTE_32F 68
 * / 32F_FAST_TF32 77, CUBLAS_GEMM_DEFAULT -1. */
typedef int (*ip_cublas_gemm_ex_fn)(void *h, int ta, int tb, int m, int n, int k,
                                    const void *alpha, const void *a, int atype, int lda,
                                    const void *b, int btype, int ldb, const void *beta, void *c,
                                    int ctype, int ldc, int compute, int algo);

/* cublasSetSmCountTarget / cublasGetSmCountTarget: optional (set_sm_target
 * NULL when the library lacks either; the copy-back then stays the driver's
 * copy). */
typedef int (*ip_cublas_set_int_fn)(void *h, int v);
typedef int (*ip_cublas_get_int_fn)(void *h, int *v);

typedef struct ip_cublas {
    jitop__cublas blas; /* first: jitop__cublas_open allocates the whole */
    ip_cublas_gemm_ex_fn gemm_ex;
    ip_cublas_set_int_fn set_sm_target;
    /* the handle's SM count target when it was made, and now (under s->lock:
     * the handle is the in-place state's own, lltm.c has another, so the
     * target is set only when a call wants another than the one set) */
    int sm_target_default, sm_target_now;
} ip_cublas;

typedef struct ip_inst {
    char name[96];
    jitop_op *op;
    struct ip_inst *next;
} ip_inst;

/* A caller stream's scratch, and the second stream and events of the
 * overlapped copies (created on first need). CU_STREAM_PER_THREAD names
 * another stream in every thread: its scratch is per thread (thread), so
 * that two threads' calls never share one buffer while both run. */
typedef struct ip_ws {
    void *stream;
    pthread_t thread; /* for CU_STREAM_PER_THREAD only */
    CUdeviceptr buf;
    size_t bytes;
    CUstream aux;
    CUevent done_gemm[JITOP__IP_MAX_BUFS], done_copy[JITOP__IP_MAX_BUFS];
    /* 32-bit words at buf's start known to be zero once the work queued on
     * the stream so far ran: the panel kernel's group counters, which it
     * leaves zero (0: a new buffer, or the chunked path wrote there) */
    size_t zero_words;
    struct ip_ws *next;
} ip_ws;

/* ip_copy<W> for W = 1 << index: the op, its block size and the blocks of
 * that size one SM holds (cuOccupancyMaxPotentialBlockSize); block 0: not
 * got yet. Under s->lock. */
typedef struct ip_copy_k {
    jitop_op *op;
    int block, per_sm;
} ip_copy_k;

struct jitop__inplace_state {
    pthread_mutex_t lock;
    jitop_module *module;
    ip_inst *insts;
    ip_ws *ws;
    int cublas_tried;
    ip_cublas *cublas;
    jitop__ip_mm_cfg mm; /* the square product's settings (ops/ip_plan.h) */
    ip_copy_k copy[5];
    int partition_said; /* the verbose log said whether the partition runs */
    size_t partitioned; /* calls whose copy-back ran on the kept SMs (tests) */
    jitop_module *panel_module; /* kernels/inplace_panel.cu for sm_90a, on first need */
    int panel_resident[2]; /* sqmm_panel's blocks the device holds, 16-bit and TF32;
                              0: not asked, -1: unknown, IP_PANEL_BAD_REGS: its build
                              cannot run */
    int panel_said;     /* the verbose log said why a call did not take the panel */
    int panel_broken;   /* its build or a launch failed once: the chunked path from then on */
    size_t panel_calls; /* calls the panel kernel took (tests) */
    enum ip_softmax_path softmax_path;
};

/* ------------------------------------------------------------- state */

static void ip_ws_release(const jitop__driver *d, ip_ws *w)
{
    const jitop__cuda_api *api = d->api;
    if (w->buf != 0)
        (void)api->cuMemFree(w->buf);
    for (int i = 0; i < JITOP__IP_MAX_BUFS; i++) {
        if (w->done_gemm[i] != NULL)
            (void)api->cuEventDestroy(w->done_gemm[i]);
        if (w->done_copy[i] != NULL)
            (void)api->cuEventDestroy(w->done_copy[i]);
    }
    if (w->aux != NULL)
        (void)api->cuStreamDestroy(w->aux);
}

static void ip_state_destroy(jitop_ctx *ctx)
{
    if (ctx->ops == NULL || ctx->ops->inplace == NULL)
        return;
    struct jitop__inplace_state *s = ctx->ops->inplace;
    const jitop__driver *d = jitop__driver_of(ctx);
    /* Teardown: nothing to report to; the driver releases the context right
     * after (hooks run in reverse order), which frees what is left anyway. */
    const int live = d != NULL && jitop__cuda_more() == JITOP_OK &&
                     jitop__driver_make_current(d) == JITOP_OK;
    if (!live)
        jitop__clear_error();
    /* the whole context, not each caller stream: those may be destroyed by now */
    if (live && s->ws != NULL)
        (void)d->api->cuCtxSynchronize();
    for (ip_ws *w = s->ws, *n; w != NULL; w = n) {
        n = w->next;
        if (live)
            ip_ws_release(d, w);
        free(w);
    }
    for (ip_inst *i = s->insts, *n; i != NULL; i = n) {
        n = i->next;
        free(i);
    }
    if (s->cublas != NULL)
        jitop__cublas_close(ctx, "inplace", &s->cublas->blas, live);
    pthread_mutex_destroy(&s->lock);
    free(s);
    ctx->ops->inplace = NULL;
}

/* ctx's in-place state if a call made it, else NULL (ctx may be NULL). */
static struct jitop__inplace_state *ip_state_made(jitop_ctx *ctx)
{
    jitop__ops_state *ops = ctx ? __atomic_load_n(&ctx->ops, __ATOMIC_ACQUIRE) : NULL;
    return ops ? __atomic_load_n(&ops->inplace, __ATOMIC_ACQUIRE) : NULL;
}

/* The state, created on first use: loads kernels/inplace.cu with decl (the
 * instance the first call asks, when it is known before the load; NULL:
 * none) declared (-instance=), so that a cold first call is one compile. */
static int ip_state(jitop_ctx *ctx, const char *decl, struct jitop__inplace_state **out)
{
    struct jitop__inplace_state *s = ip_state_made(ctx);
    if (s != NULL) {
        *out = s;
        return JITOP_OK;
    }
    if (ctx->kernel_dir == NULL)
        return jitop__fail(JITOP_ENOTFOUND, "inplace: the context has no kernel directory");
    char *path = jitop__sprintf("%s/inplace.cu", ctx->kernel_dir);
    if (path == NULL)
        return jitop__fail(JITOP_ENOMEM, "inplace: out of memory");
    const char *srcs[1] = {path};
    jitop_module *m = NULL;
    char *opt = decl ? jitop__sprintf("-instance=%s", decl) : NULL;
    const char *opts[1] = {opt};
    int rc = JITOP_OK;
    if (decl && !opt) {
        rc = jitop__fail(JITOP_ENOMEM, "inplace: out of memory");
    } else {
        rc = jitop_load(ctx, "inplace", srcs, 1, opts, opt ? 1 : 0, &m); /* starts the driver */
        if (rc != JITOP_OK)
            rc = jitop__fail_prefix(rc, "inplace: loading %s", path);
    }
    free(opt);
    free(path);
    if (rc != JITOP_OK)
        return rc;

    jitop__ip_mm_cfg mm;
    jitop__ip_mm_cfg_env(&mm);
    int made = 0;
    jitop__ops_state *ops = NULL;
    pthread_mutex_lock(&ctx->lock);
    rc = jitop__ops_state_get(ctx, &ops);
    if (rc == JITOP_OK && ops->inplace == NULL) {
        s = calloc(1, sizeof *s);
        if (s == NULL) {
            rc = jitop__fail(JITOP_ENOMEM, "inplace: out of memory");
        } else if (pthread_mutex_init(&s->lock, NULL) != 0) {
            free(s);
            s = NULL;
            rc = jitop__fail(JITOP_ENOMEM, "inplace: pthread_mutex_init failed");
        } else if ((rc = jitop__ctx_on_destroy(ctx, ip_state_destroy)) != JITOP_OK) {
            pthread_mutex_destroy(&s->lock);
            free(s);
            s = NULL;
        } else {
            s->module = m;
            s->mm = mm;
            made = 1;
            const char *sp = getenv("JITOP_INPLACE_SOFTMAX");
            s->softmax_path = sp == NULL                    ? SM_AUTO
                              : strcmp(sp, "block") == 0   ? SM_BLOCK
                              : strcmp(sp, "cluster") == 0 ? SM_CLUSTER
                              : strcmp(sp, "long") == 0    ? SM_LONG
                              : strcmp(sp, "split") == 0   ? SM_SPLIT
                              : strcmp(sp, "split256") == 0 ? SM_SPLIT256
                              : strcmp(sp, "split128") == 0 ? SM_SPLIT128
                              : strcmp(sp, "lean") == 0    ? SM_LEAN
                              : strcmp(sp, "lean256") == 0 ? SM_LEAN256
                              : strcmp(sp, "leanblock") == 0 ? SM_LEANBLOCK
                              : strcmp(sp, "lean2") == 0   ? SM_LEAN2
                              : strcmp(sp, "lean2_256") == 0 ? SM_LEAN2_256
                              : strcmp(sp, "lean2_128") == 0 ? SM_LEAN2_128
                              : strcmp(sp, "lean2block") == 0 ? SM_LEAN2BLOCK
                                                           : SM_AUTO;
            __atomic_store_n(&ops->inplace, s, __ATOMIC_RELEASE);
        }
    }
    if (rc == JITOP_OK)
        s = ops->inplace;
    pthread_mutex_unlock(&ctx->lock);
    /* a setting that did not parse is ignored, not fatal: say so */
    static const struct {
        unsigned bit;
        const char *var, *want;
    } bad[] = {
        {JITOP__IP_BAD_CHUNK, "JITOP_INPLACE_CHUNK_MB", "MiB in [1, 65536]"},
        {JITOP__IP_BAD_BUFS, "JITOP_INPLACE_MM_BUFS", "2, 3 or 4"},
        {JITOP__IP_BAD_COPY_SMS, "JITOP_INPLACE_MM_COPY_SMS", "SMs in [0, 65535]"},
        {JITOP__IP_BAD_PANEL, "JITOP_INPLACE_MM_PANEL", "0 or 1"},
    };
    for (size_t i = 0; made && i < sizeof bad / sizeof bad[0]; i++)
        if (mm.bad & bad[i].bit)
            jitop__log(ctx, "inplace: %s=%s ignored (want %s)", bad[i].var,
                       getenv(bad[i].var) ? getenv(bad[i].var) : "", bad[i].want);
    if (rc == JITOP_OK)
        *out = s;
    return rc;
}

/* The op name of module m (s->module or s->panel_module: their names
 * differ), got once and kept. Takes s->lock. */
static int ip_get_in(struct jitop__inplace_state *s, jitop_module *m, const char *name,
                     jitop_op **out)
{
    int rc = JITOP_OK;
    pthread_mutex_lock(&s->lock);
    ip_inst *i = s->insts;
    while (i != NULL && strcmp(i->name, name) != 0)
        i = i->next;
    if (i == NULL) {
        jitop_op *op = NULL;
        rc = jitop_op_get(m, name, &op); /* compiles the instance on first use */
        if (rc == JITOP_OK && strlen(name) >= sizeof i->name)
            rc = jitop__fail(JITOP_EINVAL, "inplace: op name %s too long", name);
        if (rc == JITOP_OK && (i = calloc(1, sizeof *i)) == NULL)
            rc = jitop__fail(JITOP_ENOMEM, "inplace: out of memory");
        if (rc == JITOP_OK) {
            memcpy(i->name, name, strlen(name) + 1);
            i->op = op;
            i->next = s->insts;
            s->insts = i;
        }
    }
    if (rc == JITOP_OK)
        *out = i->op;
    pthread_mutex_unlock(&s->lock);
    return rc;
}

static int ip_get(struct jitop__inplace_state *s, const char *name, jitop_op **out)
{
    return ip_get_in(s, s->module, name, out);
}

/* cuBLAS (see jitop__cublas_open) with cublasGemmEx; NULL, with the
 * reason logged, when a step fails. */
static ip_cublas *ip_cublas_load(jitop_ctx *ctx)
{
    static const char *const names[] = {"cublasGemmEx"};
    void *fns[1];
    ip_cublas *cb = jitop__cublas_open(ctx, "inplace", "", sizeof *cb, names, fns, 1);
    if (cb == NULL)
        return NULL;
    cb->gemm_ex = (ip_cublas_gemm_ex_fn)fns[0];
    /* the SM count target, for $JITOP_INPLACE_MM_COPY_SMS: both or neither */
    ip_cublas_set_int_fn set =
        (ip_cublas_set_int_fn)jitop__cublas_sym(&cb->blas, "cublasSetSmCountTarget");
    ip_cublas_get_int_fn get =
        (ip_cublas_get_int_fn)jitop__cublas_sym(&cb->blas, "cublasGetSmCountTarget");
    int target = 0;
    if (set != NULL && get != NULL && get(cb->blas.handle, &target) == 0) {
        cb->set_sm_target = set;
        cb->sm_target_default = cb->sm_target_now = target;
    } else {
        jitop__log(ctx, "inplace: cuBLAS has no usable cublasSetSmCountTarget / "
                        "cublasGetSmCountTarget: the copy-back stays the driver's copy");
    }
    return cb;
}

/* Sets the handle's SM count target to want unless it is set to that
 * already. Under s->lock. */
static int ip_sm_target(ip_cublas *cb, int want)
{
    if (cb->set_sm_target == NULL || cb->sm_target_now == want)
        return JITOP_OK;
    const int r = cb->set_sm_target(cb->blas.handle, want);
    if (r != 0)
        return jitop__fail(JITOP_ECUDA, "inplace: cublasSetSmCountTarget(%d) failed with status %d",
                           want, r);
    cb->sm_target_now = want;
    return JITOP_OK;
}

/* The caller stream's scratch, at least bytes long; with aux, its second
 * stream and events too. Called under s->lock. Growing frees the old buffer
 * only after the stream's queued work (which may still read it) is done. */
static int ip_workspace(jitop_ctx *ctx, struct jitop__inplace_state *s, void *stream, size_t bytes,
                        int aux, ip_ws **out)
{
    const jitop__driver *d = jitop__driver_of(ctx);
    const jitop__cuda_api *api = d->api;
    const int per_thread = stream == (void *)CU_STREAM_PER_THREAD;
    const pthread_t self = pthread_self();
    ip_ws *w = s->ws;
    while (w != NULL && (w->stream != stream || (per_thread && !pthread_equal(w->thread, self))))
        w = w->next;
    if (w == NULL) {
        if ((w = calloc(1, sizeof *w)) == NULL)
            return jitop__fail(JITOP_ENOMEM, "inplace: out of memory");
        w->stream = stream;
        w->thread = self;
        w->next = s->ws;
        s->ws = w;
    }
    int rc = JITOP_OK;
    if (w->bytes < bytes) {
        if (w->buf != 0) {
            rc = jitop__cu_check(api->cuStreamSynchronize((CUstream)stream), "cuStreamSynchronize",
                                 "inplace scratch");
            if (rc == JITOP_OK)
                rc = jitop__cu_check(api->cuMemFree(w->buf), "cuMemFree", "inplace scratch");
            if (rc != JITOP_OK)
                return rc;
            w->buf = 0;
            w->bytes = 0;
        }
        CUdeviceptr p = 0;
        rc = jitop__cu_check(api->cuMemAlloc(&p, bytes), "cuMemAlloc", "inplace scratch");
        if (rc != JITOP_OK)
            return rc;
        w->buf = p;
        w->bytes = bytes;
        w->zero_words = 0;
    }
    if (aux && w->aux == NULL) {
        /* made whole or not at all: w->aux set means the events exist (one
         * pair per buffer, as many as any setting may use) */
        enum { NEV = 2 * JITOP__IP_MAX_BUFS };
        CUevent ev[NEV] = {NULL};
        CUstream as = NULL;
        for (int i = 0; rc == JITOP_OK && i < NEV; i++)
            rc = jitop__cu_check(api->cuEventCreate(&ev[i], CU_EVENT_DISABLE_TIMING),
                                 "cuEventCreate", "inplace");
        if (rc == JITOP_OK)
            rc = jitop__cu_check(api->cuStreamCreate(&as, CU_STREAM_NON_BLOCKING),
                                 "cuStreamCreate", "inplace copy stream");
        if (rc != JITOP_OK) {
            for (int i = 0; i < NEV; i++)
                if (ev[i] != NULL)
                    (void)api->cuEventDestroy(ev[i]);
            return rc;
        }
        for (int i = 0; i < JITOP__IP_MAX_BUFS; i++) {
            w->done_gemm[i] = ev[i];
            w->done_copy[i] = ev[JITOP__IP_MAX_BUFS + i];
        }
        w->aux = as;
    }
    *out = w;
    return JITOP_OK;
}

/* ------------------------------------------------------------- dtype */

static const char *ip_ctype(jitop_dtype dt)
{
    switch (dt) {
    case JITOP_FLOAT32: return "float";
    case JITOP_FLOAT16: return "__half";
    case JITOP_BFLOAT16: return "__nv_bfloat16";
    default: return NULL;
    }
}

static int ip_cuda_type(jitop_dtype dt)
{
    return dt == JITOP_FLOAT32 ? 0 : dt == JITOP_FLOAT16 ? 2 : 14;
}

/* ------------------------------------------------------- square matmul */

size_t jitop_square_matmul_scratch_bound(jitop_dtype dtype, int64_t n)
{
    const size_t es = ip_ctype(dtype) != NULL ? jitop_dtype_size(dtype) : 0;
    if (es == 0 || n < 1 || n > IP_MAX_N)
        return 0;
    if (n <= IP_SMALL_N)
        return 0;
    jitop__ip_mm_cfg cfg;
    jitop__ip_mm_cfg_env(&cfg);
    const size_t chunked = jitop__ip_mm_scratch_bound(&cfg, (size_t)n * es);
    /* the panel kernel's (16-bit, n a multiple of 256, or TF32 of 128, up to
     * 4096): two counters a block, at most 65536 blocks (far more than any
     * GPU holds at once), and W^T for TF32 A W */
    const size_t panel = n % jitop__ip_panel_bn(es) == 0 && n <= JITOP__IP_PANEL_MAX_N
                             ? jitop__ip_panel_scratch(n, es, 0, 65536)
                             : 0;
    return chunked > panel ? chunked : panel;
}

/* The state's call counters (tests), read under its lock: the panel
 * kernel's calls, or the partitioned copy-backs. */
static size_t ip_count(jitop_ctx *ctx, int panel)
{
    struct jitop__inplace_state *s = ip_state_made(ctx);
    if (s == NULL)
        return 0;
    pthread_mutex_lock(&s->lock);
    const size_t n = panel ? s->panel_calls : s->partitioned;
    pthread_mutex_unlock(&s->lock);
    return n;
}

size_t jitop_inplace_scratch_bytes(jitop_ctx *ctx)
{
    size_t total = 0;
    struct jitop__inplace_state *s = ip_state_made(ctx);
    if (s == NULL)
        return 0;
    pthread_mutex_lock(&s->lock);
    for (ip_ws *w = s->ws; w != NULL; w = w->next)
        total += w->bytes;
    pthread_mutex_unlock(&s->lock);
    return total;
}

int jitop_inplace_release(jitop_ctx *ctx)
{
    if (ctx == NULL)
        return jitop__fail(JITOP_EINVAL, "jitop_inplace_release: ctx is NULL");
    struct jitop__inplace_state *s = ip_state_made(ctx);
    if (s == NULL)
        return JITOP_OK;
    const jitop__driver *d = jitop__driver_of(ctx);
    int rc = jitop__cuda_more();
    if (rc == JITOP_OK)
        rc = jitop__driver_make_current(d);
    pthread_mutex_lock(&s->lock);
    /* queued products and copies may still use the scratch */
    if (rc == JITOP_OK && s->ws != NULL)
        rc = jitop__cu_check(d->api->cuCtxSynchronize(), "cuCtxSynchronize", "jitop_inplace_release");
    for (ip_ws *w = s->ws; rc == JITOP_OK && w != NULL; w = w->next) {
        if (w->buf == 0)
            continue;
        rc = jitop__cu_check(d->api->cuMemFree(w->buf), "cuMemFree", "jitop_inplace_release");
        if (rc == JITOP_OK) {
            w->buf = 0;
            w->bytes = 0;
        }
    }
    pthread_mutex_unlock(&s->lock);
    return rc;
}

/* The arguments of both ops, checked in order; the first bad one named. */
static int ip_check(const char *fn, jitop_ctx *ctx, jitop_dtype dtype, int64_t m, int64_t n,
                    const char *nname, int64_t nmax, const void *a, const char *aname)
{
    if (ctx == NULL)
        return jitop__fail(JITOP_EINVAL, "%s: ctx is NULL", fn);
    if (ip_ctype(dtype) == NULL)
        return jitop__fail(JITOP_EINVAL, "%s: dtype %d is not float32, float16 or bfloat16", fn,
                           (int)dtype);
    if (m < 1)
        return jitop__fail(JITOP_EINVAL, "%s: m (rows) is %lld, must be >= 1", fn, (long long)m);
    if (n < 1 || n > nmax)
        return jitop__fail(JITOP_EINVAL, "%s: %s is %lld, must be in [1, %lld]", fn, nname,
                           (long long)n, (long long)nmax);
    if ((uint64_t)m > (uint64_t)(INT64_MAX / 4) / (uint64_t)n)
        return jitop__fail(JITOP_EINVAL, "%s: m x %s = %lld x %lld elements is too large", fn,
                           nname, (long long)m, (long long)n);
    if (a == NULL)
        return jitop__fail(JITOP_EINVAL, "%s: %s is NULL", fn, aname);
    if ((uintptr_t)a % jitop_dtype_size(dtype) != 0)
        return jitop__fail(JITOP_EINVAL, "%s: %s is not aligned to its element size", fn, aname);
    return JITOP_OK;
}

/* The small square matmul's instance for n and trans. */
static void ip_small_name(char *name, size_t cap, jitop_dtype dtype, int n, int trans)
{
    snprintf(name, cap, "sqmm_small<%s, %d, %s>", ip_ctype(dtype), n, trans ? "true" : "false");
}

static int ip_matmul_small(struct jitop__inplace_state *s, const jitop__driver *d,
                           jitop_dtype dtype, int64_t m, int n, void *a, const void *w, int trans,
                           void *stream)
{
    char name[96];
    ip_small_name(name, sizeof name, dtype, n, trans);
    jitop_op *op = NULL;
    int rc = ip_get(s, name, &op);
    if (rc != JITOP_OK)
        return rc;
    /* as kernels/inplace.cu's sqmm_shape: R rows per tile */
    int cg = 1;
    while (cg < (n + 3) / 4)
        cg *= 2;
    const long long rows_per_tile = 4LL * (256 / cg);
    long long tiles = (m + rows_per_tile - 1) / rows_per_tile;
    /* a persistent grid: W is read into shared memory once per block */
    long long grid = (long long)d->sm_count * 8;
    if (grid > tiles)
        grid = tiles;
    long long mm = m;
    void *args[] = {&a, &w, &mm};
    size_t sizes[] = {8, 8, 8};
    return jitop_launch(op, (jitop_dim3){(unsigned)grid, 1, 1}, (jitop_dim3){256, 1, 1}, 0, stream,
                        args, sizes, 3);
}

/* ------------------------------------------------- square matmul, panel */

/* The panel kernel's instance for A op(W) (B read N-major, W as it is, for
 * 16-bit A W; K-major otherwise) and the transpose's, into name and tname
 * (64 bytes each). TF32 A W needs W^T first (no transposed B in TF32
 * wgmma): ip_panel_transposes. */
static int ip_panel_nmajor(jitop_dtype dtype, int trans)
{
    return !trans && jitop_dtype_size(dtype) == 2;
}

static void ip_panel_names(jitop_dtype dtype, int n, int trans, char *name, char *tname)
{
    const char *ct = ip_ctype(dtype) != NULL ? ip_ctype(dtype) : "?"; /* checked before */
    snprintf(name, 64, "sqmm_panel<%s, %d, %s>", ct, n,
             ip_panel_nmajor(dtype, trans) ? "true" : "false");
    snprintf(tname, 64, "sqmm_panel_transpose<%s>", ct);
}

static int ip_panel_transposes(jitop_dtype dtype, int trans)
{
    return !trans && jitop_dtype_size(dtype) == 4;
}

/* kernels/inplace_panel.cu built for sm_90a, loaded on the first call that
 * wants it with that call's instances declared (decl, decl2: the product
 * and the transpose, one compile), and kept. Takes no
 * lock across the load (it compiles); two threads racing load the same
 * module (jitop__load_arch returns the one already loaded). */
static int ip_panel_module(jitop_ctx *ctx, struct jitop__inplace_state *s, const char *decl,
                           const char *decl2, jitop_module **out)
{
    jitop_module *m = __atomic_load_n(&s->panel_module, __ATOMIC_ACQUIRE);
    if (m != NULL) {
        *out = m;
        return JITOP_OK;
    }
    char *path = jitop__sprintf("%s/inplace_panel.cu", ctx->kernel_dir);
    char *opt = jitop__sprintf("-instance=%s", decl);
    char *opt2 = jitop__sprintf("-instance=%s", decl2);
    int rc = path && opt && opt2 ? JITOP_OK : jitop__fail(JITOP_ENOMEM, "inplace: out of memory");
    if (rc == JITOP_OK) {
        const char *srcs[1] = {path}, *opts[2] = {opt, opt2};
        rc = jitop__load_arch(ctx, "inplace_panel", srcs, 1, opts, 2, "sm_90a", &m);
        if (rc != JITOP_OK)
            rc = jitop__fail_prefix(rc, "inplace: loading %s for sm_90a", path);
    }
    free(opt);
    free(opt2);
    free(path);
    if (rc != JITOP_OK)
        return rc;
    __atomic_store_n(&s->panel_module, m, __ATOMIC_RELEASE);
    *out = m;
    return JITOP_OK;
}

/* A 2-D map of a row-major rows x n matrix at base, in boxes of box_rows x
 * 128 bytes of a row with the 128-byte swizzle (sqmm_panel's tiles). TF32
 * reads float32 as it is: the tensor cores use its top 19 bits. */
static int ip_panel_map(const jitop__cuda_api *api, jitop_dtype dtype, const void *base,
                        int64_t rows, int64_t n, unsigned box_rows, CUtensorMap *out)
{
    const size_t es = jitop_dtype_size(dtype);
    const cuuint64_t dims[2] = {(cuuint64_t)n, (cuuint64_t)rows};
    const cuuint64_t strides[1] = {(cuuint64_t)n * es};
    const cuuint32_t box[2] = {(cuuint32_t)(128 / es), box_rows}, ones[2] = {1, 1};
    return jitop__cu_check(
        api->cuTensorMapEncodeTiled(out,
                                    dtype == JITOP_BFLOAT16  ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                                    : dtype == JITOP_FLOAT32 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT32
                                                             : CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
                                    2, (void *)(uintptr_t)base, dims, strides, box, ones,
                                    CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                    CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                                    CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE),
        "cuTensorMapEncodeTiled", "inplace");
}

#define IP_PANEL_BAD_REGS (-2)

/* How many sqmm_panel blocks of es-byte elements the device holds at once
 * (132 on an H100: one an SM, at 384 threads and ~193-209 KiB of shared
 * memory), asked of the driver once per element size (op: the call's
 * instance, name its name); -1 when it could not say; IP_PANEL_BAD_REGS
 * when the build has other than the registers a thread its setmaxnreg
 * split needs (with fewer its consumers would wait forever for registers,
 * with more it would not launch), logged. */
static int ip_panel_resident(jitop_ctx *ctx, struct jitop__inplace_state *s, jitop_op *op,
                             const char *name, size_t es)
{
    int *slot = &s->panel_resident[es == 4];
    int n = __atomic_load_n(slot, __ATOMIC_ACQUIRE);
    if (n != 0)
        return n;
    jitop_op_info info;
    if (jitop_op_info_get(op, &info) == JITOP_OK && info.num_regs != JITOP__IP_PANEL_REGS) {
        jitop__log(ctx,
                   "inplace: %s has %d registers a thread, not the %d its register split "
                   "needs: the chunked path runs",
                   name, info.num_regs, JITOP__IP_PANEL_REGS);
        n = IP_PANEL_BAD_REGS;
    } else if (jitop_occupancy_clusters(op, 384, jitop__ip_panel_smem(es), 1, &n) != JITOP_OK ||
               n < 1) {
        n = -1;
    }
    jitop__clear_error(); /* either way the panel is not taken: the chunked path runs */
    __atomic_store_n(slot, n, __ATOMIC_RELEASE);
    return n;
}

/* Whether the panel kernel takes this call (ip_plan.h's rule; the module is
 * loaded, and the instance compiled, only for a call the cheap conditions
 * let through): 1 with *op and *grid; 0 with the reason logged once. */
static int ip_panel_pick(jitop_ctx *ctx, struct jitop__inplace_state *s, const jitop__driver *d,
                         jitop_dtype dtype, int tf32, int64_t m, int64_t n, const void *a,
                         const void *w, int trans, jitop_op **op, int *grid)
{
    const size_t es = jitop_dtype_size(dtype);
    const char *why = jitop__ip_panel_plan(s->mm.panel, d->cc_major, d->cc_minor, es, tf32, m, n,
                                           (uintptr_t)a, (uintptr_t)w, trans, INT_MAX, grid);
    if (why == NULL && __atomic_load_n(&s->panel_broken, __ATOMIC_ACQUIRE))
        why = "the kernel failed to build or launch before";
    if (why == NULL) {
        char name[64], tname[64];
        ip_panel_names(dtype, (int)n, trans, name, tname);
        jitop_module *pm = NULL;
        int rc = ip_panel_module(ctx, s, name, tname, &pm);
        if (rc == JITOP_OK)
            rc = ip_get_in(s, pm, name, op);
        if (rc != JITOP_OK) {
            /* a toolkit without sm_90a, say: the chunked path runs, now and
             * from now on (no compile tried again at every call) */
            jitop__log(ctx, "inplace: %s unavailable (%s): the chunked path runs", name,
                       jitop_errmsg(NULL));
            jitop__clear_error();
            __atomic_store_n(&s->panel_broken, 1, __ATOMIC_RELEASE);
            why = "the kernel did not build";
        } else {
            const int resident = ip_panel_resident(ctx, s, *op, name, es);
            why = resident == IP_PANEL_BAD_REGS
                      ? "the kernel's register count does not fit its register split"
                      : jitop__ip_panel_plan(s->mm.panel, d->cc_major, d->cc_minor, es, tf32, m,
                                             n, (uintptr_t)a, (uintptr_t)w, trans, resident,
                                             grid);
        }
    }
    if (why != NULL && !__atomic_exchange_n(&s->panel_said, 1, __ATOMIC_RELAXED))
        jitop__log(ctx, "inplace: square matmul n=%lld m=%lld: the chunked path (%s)",
                   (long long)n, (long long)m, why);
    return why == NULL;
}

/* A <- A op(W) by sqmm_panel on grid blocks (ip_plan.h), one cooperative
 * launch (every group's blocks are resident at once: they wait for one
 * another). The scratch: the group counters at its start, zeroed once per
 * buffer (the kernel leaves them zero), then, for TF32 A W only, W^T (the
 * kernel reads W itself otherwise). *refused: the launch failed with a as
 * it was, JITOP_OK returned: the caller runs the chunked path instead. */
static int ip_matmul_panel(jitop_ctx *ctx, struct jitop__inplace_state *s, jitop_dtype dtype,
                           int64_t m, int n, void *a, const void *w, int trans, jitop_op *op,
                           int grid, void *stream, int *refused)
{
    *refused = 0;
    const jitop__driver *d = jitop__driver_of(ctx);
    const jitop__cuda_api *api = d->api;
    const int transpose = ip_panel_transposes(dtype, trans);
    jitop_op *top = NULL;
    int rc = JITOP_OK;
    if (transpose) {
        char name[64], tname[64];
        ip_panel_names(dtype, n, trans, name, tname);
        rc = ip_get_in(s, __atomic_load_n(&s->panel_module, __ATOMIC_ACQUIRE), tname, &top);
    }
    if (rc == JITOP_OK)
        rc = jitop__cuda_more();
    if (rc == JITOP_OK)
        rc = jitop__driver_make_current(d);
    if (rc != JITOP_OK)
        return rc;
    const size_t es = jitop_dtype_size(dtype), words = 2 * (size_t)grid;
    pthread_mutex_lock(&s->lock);
    ip_ws *ws = NULL;
    rc = ip_workspace(ctx, s, stream, jitop__ip_panel_scratch(n, es, trans, grid), 0, &ws);
    const CUdeviceptr cnt = ws != NULL ? ws->buf : 0, wt = cnt + jitop__ip_panel_counters(grid);
    const void *b = transpose ? (const void *)(uintptr_t)wt : w;
    if (rc == JITOP_OK && transpose) {
        const void *wp = w;
        void *wtp = (void *)(uintptr_t)wt;
        int nn = n;
        void *targs[] = {&wp, &wtp, &nn};
        size_t tsizes[] = {sizeof wp, sizeof wtp, sizeof nn};
        rc = jitop_launch(top, (jitop_dim3){(unsigned)(n / 32), (unsigned)(n / 32), 1},
                          (jitop_dim3){32, 8, 1}, 0, stream, targs, tsizes, 3);
        /* W^T lands after this grid's counters: over an earlier, larger
         * grid's, which are zero no more */
        const size_t kept = jitop__ip_panel_counters(grid) / 4;
        if (ws->zero_words > kept)
            ws->zero_words = kept;
    }
    if (rc == JITOP_OK && ws->zero_words < words) {
        rc = jitop__cu_check(api->cuMemsetD32Async(cnt, 0, words, (CUstream)stream),
                             "cuMemsetD32Async", "inplace");
        if (rc == JITOP_OK)
            ws->zero_words = words;
    }
    /* B: boxes of bn rows x 128 bytes (K contiguous), or of 128 bytes of
     * columns x 128 bytes of K rows (N-major: 16-bit A W) */
    const int nmajor = ip_panel_nmajor(dtype, trans);
    CUtensorMap ta, tb;
    if (rc == JITOP_OK)
        rc = ip_panel_map(api, dtype, a, m, n, 128, &ta);
    if (rc == JITOP_OK)
        rc = ip_panel_map(api, dtype, b, n, n,
                          nmajor ? (unsigned)(128 / es) : (unsigned)jitop__ip_panel_bn(es), &tb);
    if (rc == JITOP_OK) {
        int mm = (int)m;
        unsigned *cp = (unsigned *)(uintptr_t)cnt;
        void *args[] = {&ta, &tb, &mm, &cp};
        size_t sizes[] = {sizeof ta, sizeof tb, sizeof mm, sizeof cp};
        jitop_launch_config cfg;
        memset(&cfg, 0, sizeof cfg);
        cfg.grid = (jitop_dim3){(unsigned)grid, 1, 1};
        cfg.block = (jitop_dim3){384, 1, 1};
        cfg.shared_bytes = jitop__ip_panel_smem(es);
        cfg.stream = stream;
        cfg.cooperative = 1;
        rc = jitop_launch_ex(op, &cfg, args, sizes, 4);
        if (rc != JITOP_OK) {
            /* nothing of a was written (the transpose and the counters are
             * jitop's scratch): the caller runs the chunked path instead, now
             * and from now on (a device that refuses the cooperative grid,
             * say, under MPS limits) */
            jitop__log(ctx, "inplace: sqmm_panel launch failed (%s): the chunked path runs",
                       jitop_errmsg(NULL));
            jitop__clear_error();
            __atomic_store_n(&s->panel_broken, 1, __ATOMIC_RELEASE);
            *refused = 1;
            rc = JITOP_OK;
        }
    }
    if (rc == JITOP_OK && !*refused)
        s->panel_calls++;
    pthread_mutex_unlock(&s->lock);
    return rc;
}

size_t jitop__inplace_panel_calls(jitop_ctx *ctx)
{
    return ip_count(ctx, 1);
}

/* C (rows x n) = A_chunk op(W) into c, row-major: in cuBLAS's column-major
 * view C^T (n x rows) = op'(W) A_chunk^T, where W's buffer read column-major
 * is W^T (so A W takes it untransposed, A W^T transposed). */
static int ip_gemm(ip_cublas *cb, jitop_dtype dtype, int tf32, int n, int rows, const void *w,
                   int trans, const void *a, void *c)
{
    const float one = 1.0f, zero = 0.0f;
    const int t = ip_cuda_type(dtype);
    const int compute = dtype == JITOP_FLOAT32 && tf32 ? 77 : 68;
    int r = cb->gemm_ex(cb->blas.handle, trans ? 1 : 0, 0, n, rows, n, &one, w, t, n, a, t, n,
                        &zero, c, t, n, compute, -1);
    if (r != 0)
        return jitop__fail(JITOP_ECUDA, "inplace: cublasGemmEx (%d x %d x %d) failed with status %d",
                           rows, n, n, r);
    return JITOP_OK;
}

/* ip_copy<width> (see ip_copy_k), got (compiled on first use) and sized
 * once. Called without s->lock: ip_get takes it. */
static int ip_copy_get(struct jitop__inplace_state *s, const jitop__driver *d, int width,
                       ip_copy_k *out)
{
    int wi = 0;
    while ((1 << wi) < width && wi < 4)
        wi++;
    pthread_mutex_lock(&s->lock);
    ip_copy_k k = s->copy[wi];
    pthread_mutex_unlock(&s->lock);
    if (k.block > 0) {
        *out = k;
        return JITOP_OK;
    }
    char name[32];
    snprintf(name, sizeof name, "ip_copy<%d>", width);
    int block = 0, grid = 0;
    int rc = ip_get(s, name, &k.op);
    if (rc == JITOP_OK)
        rc = jitop_occupancy(k.op, 0, &block, &grid);
    if (rc == JITOP_OK && (block < 32 || grid < 1))
        rc = jitop__fail(JITOP_ECUDA, "inplace: %s: the driver's occupancy is %d blocks of %d threads",
                         name, grid, block);
    if (rc != JITOP_OK)
        return rc;
    /* grid: the blocks of that size filling the device, so many per SM */
    k.block = block;
    k.per_sm = d->sm_count > 0 && grid / d->sm_count > 0 ? grid / d->sm_count : 1;
    pthread_mutex_lock(&s->lock);
    s->copy[wi] = k;
    pthread_mutex_unlock(&s->lock);
    *out = k;
    return JITOP_OK;
}

/* bytes from src (scratch) to dst (A) by ip_copy on stream st, with at most
 * sms SMs' worth of blocks. */
static int ip_copy_launch(const ip_copy_k *k, int width, void *dst, CUdeviceptr src, size_t bytes,
                          int sms, CUstream st)
{
    void *sp = (void *)(uintptr_t)src;
    unsigned long long nb = bytes;
    void *args[] = {&dst, &sp, &nb};
    size_t sizes[] = {sizeof dst, sizeof sp, sizeof nb};
    const unsigned grid = jitop__ip_copy_grid(bytes, width, k->block, k->per_sm, sms);
    return jitop_launch(k->op, (jitop_dim3){grid, 1, 1}, (jitop_dim3){(unsigned)k->block, 1, 1}, 0,
                        st, args, sizes, 3);
}

/* Once per state, on the first call where it applies, the verbose log says
 * whether $JITOP_INPLACE_MM_COPY_SMS takes effect, and why not. */
static void ip_say_partition(jitop_ctx *ctx, struct jitop__inplace_state *s, const ip_cublas *cb,
                             const jitop__driver *d, const jitop__ip_mm_plan *p)
{
    const int k = s->mm.copy_sms;
    if (k == 0 || p->chunks < 2 || __atomic_exchange_n(&s->partition_said, 1, __ATOMIC_RELAXED))
        return;
    if (p->partition)
        jitop__log(ctx, "inplace: square matmul copy-back by ip_copy<%d> on %d of %d SMs (cuBLAS "
                        "SM count target %d), %d scratch buffers of %zu bytes",
                   p->copy_width, k, d->sm_count, p->sm_target, p->bufs, p->chunk);
    else
        jitop__log(ctx, "inplace: JITOP_INPLACE_MM_COPY_SMS=%d not in effect (%s): the copy-back "
                        "stays the driver's copy",
                   k,
                   !s->mm.overlap ? "JITOP_INPLACE_OVERLAP=0"
                   : cb->set_sm_target == NULL ? "cuBLAS has no cublasSetSmCountTarget"
                                               : "not fewer than the device's SMs");
}

static int ip_matmul_chunked(jitop_ctx *ctx, struct jitop__inplace_state *s, jitop_dtype dtype,
                             int64_t m, int n, void *a, const void *w, int trans, int tf32,
                             void *stream)
{
    const jitop__driver *d = jitop__driver_of(ctx);
    const jitop__cuda_api *api = d->api;
    if (!__atomic_load_n(&s->cublas_tried, __ATOMIC_ACQUIRE)) {
        pthread_mutex_lock(&s->lock);
        if (!s->cublas_tried) {
            s->cublas = ip_cublas_load(ctx);
            __atomic_store_n(&s->cublas_tried, 1, __ATOMIC_RELEASE);
        }
        pthread_mutex_unlock(&s->lock);
    }
    ip_cublas *cb = s->cublas;
    if (cb == NULL)
        return jitop__fail(JITOP_ENOTFOUND,
                           "inplace: n = %d needs cuBLAS (libcublas.so.13), which could not be "
                           "opened (n <= %d runs without it)", n, IP_SMALL_N);
    const size_t es = jitop_dtype_size(dtype), row = (size_t)n * es;
    jitop__ip_mm_plan p;
    jitop__ip_mm_plan_make(&s->mm, m, row, (uintptr_t)a, d->sm_count, cb->set_sm_target != NULL,
                           &p);
    const int two = p.bufs > 1; /* copies on the second stream */
    int rc = jitop__cuda_more();
    if (rc == JITOP_OK)
        rc = jitop__driver_make_current(d);
    ip_copy_k ck = {NULL, 0, 0};
    if (rc == JITOP_OK && p.partition)
        rc = ip_copy_get(s, d, p.copy_width, &ck);
    if (rc != JITOP_OK)
        return rc;
    ip_say_partition(ctx, s, cb, d, &p);
    pthread_mutex_lock(&s->lock);
    ip_ws *ws = NULL;
    rc = ip_workspace(ctx, s, stream, (size_t)p.bufs * p.chunk, two, &ws);
    if (ws != NULL)
        ws->zero_words = 0; /* the products land over the panel's counters */
    if (rc == JITOP_OK && cb->blas.set_stream(cb->blas.handle, stream) != 0)
        rc = jitop__fail(JITOP_ECUDA, "inplace: cublasSetStream failed");
    /* a partitioned call's products leave copy_sms SMs to the copies; any
     * other call's run with the handle's own target */
    if (rc == JITOP_OK)
        rc = ip_sm_target(cb, p.partition ? p.sm_target : cb->sm_target_default);
    CUstream st = (CUstream)stream;
    int last_copy = -1; /* the buffer whose copy-back was recorded last */
    for (int64_t i = 0; rc == JITOP_OK && i < p.chunks; i++) {
        const int rows = (int)(m - i * p.rows < p.rows ? m - i * p.rows : p.rows);
        const int b = (int)(i % p.bufs);
        char *ai = (char *)a + (size_t)i * p.chunk;
        CUdeviceptr sc = ws->buf + (size_t)b * p.chunk;
        /* the buffer is free once the copy that read it bufs chunks ago is done */
        if (two && i >= p.bufs)
            rc = jitop__cu_check(api->cuStreamWaitEvent(st, ws->done_copy[b], 0),
                                 "cuStreamWaitEvent", "inplace");
        if (rc == JITOP_OK)
            rc = ip_gemm(cb, dtype, tf32, n, rows, w, trans, ai, (void *)(uintptr_t)sc);
        if (rc != JITOP_OK)
            break;
        const size_t bytes = (size_t)rows * row;
        if (!two) {
            rc = jitop__cu_check(api->cuMemcpyDtoDAsync((CUdeviceptr)(uintptr_t)ai, sc, bytes, st),
                                 "cuMemcpyDtoDAsync", "inplace");
            continue;
        }
        rc = jitop__cu_check(api->cuEventRecord(ws->done_gemm[b], st), "cuEventRecord", "inplace");
        if (rc == JITOP_OK)
            rc = jitop__cu_check(api->cuStreamWaitEvent(ws->aux, ws->done_gemm[b], 0),
                                 "cuStreamWaitEvent", "inplace");
        /* partitioned: on the kept SMs beside the next product; the last
         * copy has the device to itself and gets all of it */
        if (rc == JITOP_OK && p.partition)
            rc = ip_copy_launch(&ck, p.copy_width, ai, sc, bytes,
                                i == p.chunks - 1 ? d->sm_count : s->mm.copy_sms, ws->aux);
        else if (rc == JITOP_OK)
            rc = jitop__cu_check(
                api->cuMemcpyDtoDAsync((CUdeviceptr)(uintptr_t)ai, sc, bytes, ws->aux),
                "cuMemcpyDtoDAsync", "inplace");
        if (rc == JITOP_OK)
            rc = jitop__cu_check(api->cuEventRecord(ws->done_copy[b], ws->aux), "cuEventRecord",
                                 "inplace");
        if (rc == JITOP_OK)
            last_copy = b;
    }
    /* the caller's stream goes on after the last copy queued (the second
     * stream runs in order: that one is the last), also when a later chunk
     * failed: the copies already queued still write A and read the scratch
     * that the caller's next call reuses */
    if (two && last_copy >= 0) {
        int wrc = jitop__cu_check(api->cuStreamWaitEvent(st, ws->done_copy[last_copy], 0),
                                  "cuStreamWaitEvent", "inplace");
        if (rc == JITOP_OK)
            rc = wrc;
    }
    if (rc == JITOP_OK && p.partition)
        s->partitioned++;
    pthread_mutex_unlock(&s->lock);
    return rc;
}

size_t jitop__inplace_partitioned(jitop_ctx *ctx)
{
    return ip_count(ctx, 0);
}

int jitop_square_matmul_inplace(jitop_ctx *ctx, jitop_dtype dtype, int64_t m, int64_t n, void *a,
                                const void *w, int transpose_w, unsigned flags, void *stream)
{
    static const char *fn = "jitop_square_matmul_inplace";
    int rc = ip_check(fn, ctx, dtype, m, n, "n", IP_MAX_N, a, "a");
    if (rc != JITOP_OK)
        return rc;
    if (w == NULL)
        return jitop__fail(JITOP_EINVAL, "%s: w is NULL", fn);
    if ((uintptr_t)w % jitop_dtype_size(dtype) != 0)
        return jitop__fail(JITOP_EINVAL, "%s: w is not aligned to its element size", fn);
    if (flags & ~(unsigned)JITOP_MATMUL_TF32)
        return jitop__fail(JITOP_EINVAL, "%s: flags 0x%x has unknown bits", fn, flags);
    const size_t es = jitop_dtype_size(dtype);
    const uintptr_t a0 = (uintptr_t)a, a1 = a0 + (size_t)m * (size_t)n * es;
    const uintptr_t w0 = (uintptr_t)w, w1 = w0 + (size_t)n * (size_t)n * es;
    if (a0 < w1 && w0 < a1)
        return jitop__fail(JITOP_EINVAL, "%s: w overlaps a (w is read while a is written)", fn);

    struct jitop__inplace_state *s;
    char small[96];
    ip_small_name(small, sizeof small, dtype, (int)n, transpose_w != 0);
    if ((rc = ip_state(ctx, n <= IP_SMALL_N ? small : NULL, &s)) != JITOP_OK)
        return jitop__fail_prefix(rc, "%s", fn);
    const jitop__driver *d = jitop__driver_of(ctx);
    const int trans = transpose_w != 0, tf32 = (flags & JITOP_MATMUL_TF32) != 0;
    jitop_op *panel = NULL;
    int grid = 0, refused = 1; /* 1 until the panel kernel took the call */
    if (n <= IP_SMALL_N) {
        rc = ip_matmul_small(s, d, dtype, m, (int)n, a, w, trans, stream);
        refused = 0;
    } else if (ip_panel_pick(ctx, s, d, dtype, tf32, m, n, a, w, trans, &panel, &grid)) {
        rc = ip_matmul_panel(ctx, s, dtype, m, (int)n, a, w, trans, panel, grid, stream,
                             &refused);
    }
    if (rc == JITOP_OK && refused)
        rc = ip_matmul_chunked(ctx, s, dtype, m, (int)n, a, w, trans, tf32, stream);
    return rc == JITOP_OK ? JITOP_OK : jitop__fail_prefix(rc, "%s", fn);
}

/* ------------------------------------------------------------- softmax */

/* Widest vector (elements, 16 bytes at most) dividing n, to whose size x is
 * aligned. */
static int ip_vec(int64_t n, size_t es, const void *x)
{
    int v = (int)(16 / es);
    while (v > 1 && (n % v != 0 || (uintptr_t)x % ((size_t)v * es) != 0))
        v /= 2;
    return v;
}

/* softmax_split's cluster size for a row of nv vectors of wb register bytes
 * each (a vector takes whole 4-byte registers) in blocks of tpr threads: the
 * fewest blocks (at least 2) whose threads hold at most IP_SOFTMAX_SPLIT_BYTES
 * each, else twice that; 0 where more than IP_SOFTMAX_MAX_CLUSTER blocks would
 * be needed or where a thread would get no vector. */
static int ip_split_cluster(int64_t nv, int64_t wb, int tpr)
{
    for (int64_t bytes = IP_SOFTMAX_SPLIT_BYTES; bytes <= 2 * IP_SOFTMAX_SPLIT_BYTES; bytes *= 2) {
        const int64_t per_block = tpr * (bytes / wb);
        int64_t cl = per_block > 0 ? (nv + per_block - 1) / per_block : 0;
        if (cl < 2)
            cl = 2;
        if (per_block > 0 && cl <= IP_SOFTMAX_MAX_CLUSTER)
            return nv >= cl * tpr ? (int)cl : 0;
    }
    return 0;
}

/* The block size of a split-layout path (softmax_split, softmax_lean,
 * softmax_lean2), 0 for the others. */
static int ip_split_tpr(enum ip_softmax_path p)
{
    switch (p) {
    case SM_SPLIT:
    case SM_LEAN:
    case SM_LEAN2:
        return IP_SOFTMAX_SPLIT_TPR;
    case SM_SPLIT256:
    case SM_LEAN256:
    case SM_LEAN2_256:
        return 256;
    case SM_SPLIT128:
    case SM_LEAN2_128:
        return 128;
    default:
        return 0;
    }
}

int jitop_softmax_inplace(jitop_ctx *ctx, jitop_dtype dtype, int64_t rows, int64_t n, void *x,
                          float scale, int64_t causal_q, void *stream)
{
    static const char *fn = "jitop_softmax_inplace";
    int rc = ip_check(fn, ctx, dtype, rows, n, "n", INT32_MAX / 2, x, "x");
    if (rc != JITOP_OK)
        return rc;
    if (!isfinite(scale))
        return jitop__fail(JITOP_EINVAL, "%s: scale is %g, must be finite", fn, (double)scale);
    if (causal_q < 0 || causal_q > n)
        return jitop__fail(JITOP_EINVAL, "%s: causal_q is %lld, must be 0 (no mask) or in [1, n = %lld]",
                           fn, (long long)causal_q, (long long)n);
    struct jitop__inplace_state *s;
    if ((rc = ip_state(ctx, NULL, &s)) != JITOP_OK)
        return jitop__fail_prefix(rc, "%s", fn);
    const size_t es = jitop_dtype_size(dtype);
    const int vec = ip_vec(n, es, x);
    const int nv = (int)(n / vec);
    const char *mask = causal_q > 0 ? "true" : "false";
    const int64_t row_bytes = n * (int64_t)es;
    const int64_t per = row_bytes < IP_SOFTMAX_SHORT_ROW ? IP_SOFTMAX_BYTES_SHORT
                                                           : IP_SOFTMAX_BYTES_LONG;
    int tpr = 1;
    while (tpr < IP_SOFTMAX_MAX_TPR && (int64_t)tpr * per < row_bytes)
        tpr *= 2;
    while (tpr > 1 && tpr / 2 >= nv)
        tpr /= 2; /* no thread without a vector */
    const int cnt = (nv + tpr - 1) / tpr;
    char name[96];
    jitop_op *op = NULL;
    int qlen = (int)causal_q;
    long long rr = rows;
    const jitop__driver *d = jitop__driver_of(ctx);
    /* what can run: one block, a cluster of cl, the long kernel (always) */
    const int block_ok = (int64_t)cnt * vec * (int64_t)es <= IP_SOFTMAX_REG_BYTES;
    int cl = 2;
    {
        const int64_t slice = (int64_t)IP_SOFTMAX_MAX_TPR * IP_SOFTMAX_CLUSTER_BYTES;
        while (cl <= IP_SOFTMAX_MAX_CLUSTER && (int64_t)cl * slice < row_bytes)
            cl *= 2;
    }
    const int cluster_ok = d->cc_major >= 9 && row_bytes > IP_SOFTMAX_BLOCK_ROW &&
                           cl <= IP_SOFTMAX_MAX_CLUSTER && n % ((int64_t)cl * vec) == 0;
    /* the split layout's cluster (0: cannot run), computed only for the
     * block size the chosen path needs */
    const int64_t vec_bytes = (int64_t)vec * (int64_t)es < 4 ? 4 : (int64_t)vec * (int64_t)es;
    int split_cl = 0;
    enum ip_softmax_path path = s->softmax_path;
    if (ip_split_tpr(path) > 0 &&
        (d->cc_major < 9 || (split_cl = ip_split_cluster(nv, vec_bytes, ip_split_tpr(path))) == 0))
        path = SM_AUTO;
    if ((path == SM_BLOCK || path == SM_LEANBLOCK || path == SM_LEAN2BLOCK) && !block_ok)
        path = SM_AUTO;
    if (path == SM_CLUSTER && !cluster_ok)
        path = SM_AUTO;
    if (path == SM_AUTO) {
        /* a float32 row filling a 1024-thread block at 128 bytes a thread
         * (n = 32768) is read once in that block, which measured faster than
         * split256 (bench/INPLACE_NOTES.md) */
        const int block_full = es == 4 && tpr == IP_SOFTMAX_MAX_TPR &&
                               (int64_t)cnt * vec * (int64_t)es == IP_SOFTMAX_REG_BYTES &&
                               nv % tpr == 0;
        /* Rows of 32 KiB or more that one block holds (to 128 KiB): one
         * block with softmax_lean2's arithmetic (each exponential once),
         * which measured faster there than softmax_rows, softmax_rows_lean
         * and every split layout, float32 and 16-bit; shorter rows keep
         * softmax_rows. Longer rows: the split layout with the lean2
         * arithmetic, at least as fast as the lean one in both dtypes
         * (bench/INPLACE_NOTES.md). A masked row keeps the rules before
         * (softmax_rows to 64 KiB and a full float32 block, else
         * softmax_split: the lean kernels have no mask). */
        if (block_ok && row_bytes >= IP_SOFTMAX_LEAN2BLOCK_FROM && causal_q == 0 &&
            (d->cc_major >= 9 || es == 4 || row_bytes <= IP_SOFTMAX_BLOCK_ROW))
            path = SM_LEAN2BLOCK;
        else if (block_ok && (row_bytes <= IP_SOFTMAX_BLOCK_ROW || block_full))
            path = SM_BLOCK;
        else if (d->cc_major >= 9 && (split_cl = ip_split_cluster(nv, vec_bytes, 256)) > 0)
            path = SM_LEAN2_256;
        else if (d->cc_major >= 9 && (split_cl = ip_split_cluster(nv, vec_bytes, 512)) > 0)
            path = SM_LEAN2;
        else if (block_ok && es == 4 && row_bytes <= IP_SOFTMAX_CLUSTER_FROM)
            path = SM_BLOCK;
        else if (cluster_ok && row_bytes > IP_SOFTMAX_CLUSTER_FROM && es == 4)
            path = SM_CLUSTER;
        else
            path = SM_LONG;
    }
    if (ip_split_tpr(path) > 0) {
        const int split_tpr = ip_split_tpr(path);
        /* the lean arithmetics have no mask: a masked row takes softmax_split */
        if ((path == SM_LEAN || path == SM_LEAN256) && causal_q == 0)
            snprintf(name, sizeof name, "softmax_lean<%s, %d, %d, %d, %d>", ip_ctype(dtype),
                     (int)n, vec, split_tpr, split_cl);
        else if ((path == SM_LEAN2 || path == SM_LEAN2_256 || path == SM_LEAN2_128) &&
                 causal_q == 0)
            snprintf(name, sizeof name, "softmax_lean2<%s, %d, %d, %d, %d>", ip_ctype(dtype),
                     (int)n, vec, split_tpr, split_cl);
        else
            snprintf(name, sizeof name, "softmax_split<%s, %d, %d, %d, %d, %s>",
                     ip_ctype(dtype), (int)n, vec, split_tpr, split_cl, mask);
        if ((rc = ip_get(s, name, &op)) != JITOP_OK)
            return jitop__fail_prefix(rc, "%s", fn);
        if (rows > INT32_MAX / split_cl)
            return jitop__fail(JITOP_EINVAL, "%s: rows %lld over the grid limit", fn, rr);
        void *args[] = {&x, &rr, &scale, &qlen};
        size_t sizes[] = {8, 8, 4, 4};
        rc = jitop_launch(op, (jitop_dim3){(unsigned)(rows * split_cl), 1, 1},
                          (jitop_dim3){(unsigned)split_tpr, 1, 1}, 0, stream, args, sizes, 4);
    } else if (path == SM_CLUSTER) {
        snprintf(name, sizeof name, "softmax_cluster<%s, %d, %d, %d, %d, %s>", ip_ctype(dtype),
                 (int)n, vec, IP_SOFTMAX_MAX_TPR, cl, mask);
        if ((rc = ip_get(s, name, &op)) != JITOP_OK)
            return jitop__fail_prefix(rc, "%s", fn);
        if (rows > INT32_MAX / cl)
            return jitop__fail(JITOP_EINVAL, "%s: rows %lld over the grid limit", fn, rr);
        void *args[] = {&x, &rr, &scale, &qlen};
        size_t sizes[] = {8, 8, 4, 4};
        rc = jitop_launch(op, (jitop_dim3){(unsigned)(rows * cl), 1, 1},
                          (jitop_dim3){IP_SOFTMAX_MAX_TPR, 1, 1}, 0, stream, args, sizes, 4);
    } else if (path == SM_BLOCK || path == SM_LEANBLOCK || path == SM_LEAN2BLOCK) {
        if (path == SM_LEANBLOCK && causal_q == 0)
            snprintf(name, sizeof name, "softmax_rows_lean<%s, %d, %d, %d>", ip_ctype(dtype),
                     (int)n, vec, tpr);
        else if (path == SM_LEAN2BLOCK && causal_q == 0)
            snprintf(name, sizeof name, "softmax_rows_lean2<%s, %d, %d, %d>", ip_ctype(dtype),
                     (int)n, vec, tpr);
        else
            snprintf(name, sizeof name, "softmax_rows<%s, %d, %d, %d, %s>", ip_ctype(dtype),
                     (int)n, vec, tpr, mask);
        if ((rc = ip_get(s, name, &op)) != JITOP_OK)
            return jitop__fail_prefix(rc, "%s", fn);
        const int rpb = tpr < 128 ? 128 / tpr : 1;
        const long long blocks = (rows + rpb - 1) / rpb;
        if (blocks > INT32_MAX)
            return jitop__fail(JITOP_EINVAL, "%s: rows %lld over the grid limit", fn, rr);
        void *args[] = {&x, &rr, &scale, &qlen};
        size_t sizes[] = {8, 8, 4, 4};
        rc = jitop_launch(op, (jitop_dim3){(unsigned)blocks, 1, 1},
                          (jitop_dim3){(unsigned)(tpr * rpb), 1, 1}, 0, stream, args, sizes, 4);
    } else {
        snprintf(name, sizeof name, "softmax_long<%s, %d, %s>", ip_ctype(dtype), vec, mask);
        if ((rc = ip_get(s, name, &op)) != JITOP_OK)
            return jitop__fail_prefix(rc, "%s", fn);
        /* one row per SM at a time: a second row per SM gained nothing
         * (bench/INPLACE_NOTES.md) */
        long long blocks = (long long)d->sm_count;
        if (blocks > rows)
            blocks = rows;
        int nn = (int)n;
        void *args[] = {&x, &rr, &nn, &scale, &qlen};
        size_t sizes[] = {8, 8, 4, 4, 4};
        rc = jitop_launch(op, (jitop_dim3){(unsigned)blocks, 1, 1}, (jitop_dim3){1024, 1, 1}, 0,
                          stream, args, sizes, 5);
    }
    return rc == JITOP_OK ? JITOP_OK : jitop__fail_prefix(rc, "%s", fn);
}
