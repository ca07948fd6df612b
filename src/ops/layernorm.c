/*
 * LayerNorm's C entry points: pick the instance of kernels/layernorm.cu for
 * (dtype, N, affine, alignment), get it through the op API (compiled on first
 * use, through the cache), pick the launch shape, launch.
 *
 * Per-context state (ctx->ops->layernorm): the loaded module, the instances
 * already got (a short list searched under a mutex: one uncontended lock and
 * a few string compares per call, small next to a launch's microseconds),
 * and the float32 workspace for the backward's dgamma/dbeta partial rows,
 * one per stream so that backward calls on different streams never share it.
 *
 * The launch-shape rule is the one documented at the top of layernorm.cu;
 * bench/layernorm_dev.py holds the same rule for the register kernels (not
 * the bulk kernel's, nor the cluster grid from the occupancy query) and the
 * measurements behind the two knobs below.
 */

#include "build/build.h"
#include "load/driver.h"
#include "ops/ln_plan.h"
#include "ops/ops_state.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Bytes of a row each thread holds per tensor, and the largest block for one
 * row, in the forward and the backward (as kernels/layernorm.cu's defaults;
 * bench/layernorm_NOTES.md: the forward gains up to 128 bytes per thread; the
 * backward holds two tensors in at most 64 registers per thread, so that
 * 1024 threads per SM stay resident, and keeps its accumulators in shared
 * memory; for 16-bit rows of 8 KiB or more it also holds the next rows, in
 * up to 128 registers: see ln_bwd_prefetch in kernels/layernorm.cu). */
#define LN_FWD_MAX_BYTES 128
#define LN_FWD_MAX_TPR 1024
#define LN_BWD_MAX_BYTES 32
#define LN_BWD_MAX_TPR 1024
/* float32 rows over 64 KiB: 64 bytes per thread, so that a long row takes
 * a 2-block cluster rather than a 4-block one (fewer cluster barriers per
 * row; bench/layernorm_NOTES.md). 16-bit rows stay at 32 bytes so that the shared-memory accumulators (2 floats per element held)
 * fit in a block's 227 KiB. */
#define LN_BWD_LONG_ROW_BYTES 65536
#define LN_BWD_LONG_MAX_BYTES 64
/* Block size of the backward's cluster kernels. Smaller blocks (more of
 * them per SM, so that one block's reduction overlaps another's loads)
 * are slower: each cluster barrier per row costs more than the overlap
 * gives (bench/layernorm_NOTES.md). */
#ifndef LN_BWD_CLUSTER_TPR
#define LN_BWD_CLUSTER_TPR 1024
#endif
#define LN_GENERIC_THREADS 512
/* The prefetching backward (kernels/layernorm.cu's ln_bwd_prefetch): its
 * launch bounds ask LN_BWD_PF_THREADS_PER_SM / block blocks per SM (as the
 * kernel's macro), and its blocks do best with 12-16 warps resident on an
 * SM: fewer leave the loads of the next rows too few warps to hide behind,
 * and a lone block of 18-22 warps pays a longer block-wide reduction per
 * row (the A/B of 48 against 32 bytes a thread: bench/layernorm_NOTES.md). */
#define LN_BWD_PF_THREADS_PER_SM 512
#define LN_BWD_PF_WARPS_LO 12
#define LN_BWD_PF_WARPS_HI 16
/* The backward for rows that need a cluster, on sm_90 with 16-byte aligned
 * rows: layernorm_bwd_bulk (rows brought in by the copy engine), each block
 * taking at most 32 KiB of each row and 16 elements per thread: faster
 * there than layernorm_bwd_cluster, for 16-bit rows most
 * (bench/layernorm_NOTES.md). */
#define LN_BULK_CHUNK_BYTES 32768
#define LN_BULK_ELEMS_PER_THREAD 16
/* The forward's copy-engine kernel (layernorm_fwd_bulk, JITOP_LN_PLAN's
 * fwd_bulk, off by default until the GPU has timed it): rows of 64 KiB or
 * more (16-bit N >= 32768, float32 >= 16384, where one block per SM held
 * the register kernel's row), 32 KiB of a row per block, 32 elements per
 * thread (16-bit: 512 threads, float32: 256), two 32 KiB stages: 3 blocks
 * per SM by shared memory, their loads in flight without registers. */
#define LN_FWD_BULK_MIN_BYTES 65536
#define LN_FWD_BULK_ELEMS_PER_THREAD 32
#define LN_MAX_CLUSTER 8
/* The static shared memory at most of a kernel whose dynamic bytes are
 * large: the register backward's reduction scratch (ln_red_smem, under 1
 * KiB at 32 warps; the short rows whose blocks also combine register
 * accumulators there, a few KiB, are far under every limit) and the
 * copy-engine kernels' (their barriers and scratch, about 340 B). A plan
 * adds it to its dynamic bytes to compare with a block's limit before the
 * instance is compiled (a prewarm never compiles to decide); a call checks
 * the compiled instance's own static bytes too. */
#define LN_STATIC_SMEM 1024

/* How many threads share a row (JITOP_LN_THREADS, read when a context first
 * uses LayerNorm): LN_THREADS_WARPS, the default, takes the fewest threads
 * that hold the row at the byte budget each, in whole warps once past one
 * warp; LN_THREADS_POW2 rounds up to a power of two (the rule the kernels
 * were first tuned with, kept to compare the two: its last vector pass can
 * leave up to half the lanes idle, e.g. 544 vectors over 512 threads). */
enum { LN_THREADS_WARPS, LN_THREADS_POW2 };

static int ln_threads_rule(int *rule)
{
    const char *v = getenv("JITOP_LN_THREADS");
    if (v == NULL || *v == '\0' || strcmp(v, "warps") == 0)
        *rule = LN_THREADS_WARPS;
    else if (strcmp(v, "pow2") == 0)
        *rule = LN_THREADS_POW2;
    else
        return jitop__fail(JITOP_EINVAL, "JITOP_LN_THREADS is '%s': expected warps or pow2", v);
    return JITOP_OK;
}

/* The passes launched with programmatic dependent launch (sm_90):
 * JITOP_LN_PDL=bwd (or unset) the backward's two kernels, 1 both passes, fwd
 * the forward alone, 0 neither. The backward is two grids a call (its
 * kernel, then the dgamma/dbeta reduction), each started behind the
 * previous grid's tail; the forward's register kernels were slower so
 * launched, so it is not by default (bench/layernorm_NOTES.md). */
enum { LN_PDL_FWD = 1, LN_PDL_BWD = 2 };

static int ln_pdl_passes(int *passes)
{
    const char *v = getenv("JITOP_LN_PDL");
    if (v == NULL || *v == '\0' || strcmp(v, "bwd") == 0)
        *passes = LN_PDL_BWD;
    else if (strcmp(v, "1") == 0)
        *passes = LN_PDL_FWD | LN_PDL_BWD;
    else if (strcmp(v, "0") == 0)
        *passes = 0;
    else if (strcmp(v, "fwd") == 0)
        *passes = LN_PDL_FWD;
    else
        return jitop__fail(JITOP_EINVAL, "JITOP_LN_PDL is '%s': expected bwd, 1, fwd or 0", v);
    return JITOP_OK;
}

/* The constants above as a plan: LN_PLAN_LEGACY, the same for every dtype,
 * is the plan the A/B in bench/layernorm_NOTES.md compared against
 * (JITOP_LN_PLAN=legacy keeps it reachable); the defaults differ from it by
 * dtype where that A/B won across neighbouring shapes and both 16-bit
 * dtypes (ln_plan_defaults). A legacy plan names no extra template
 * argument, so its instances keep their short names, the cache keys. */
#define LN_PLAN_LEGACY                                                                             \
    {                                                                                              \
        .fwd_bytes = LN_FWD_MAX_BYTES, .fwd_max_tpr = LN_FWD_MAX_TPR,                              \
        .fwd_cluster_tpr = LN_FWD_MAX_TPR, .fwd_fit = 0, .fwd_min_blocks = 0,                      \
        .fwd_min_blocks_from = 0, .fwd_min_blocks_to = 1024, .bwd_bytes = LN_BWD_MAX_BYTES,        \
        .bwd_long_bytes = LN_BWD_LONG_MAX_BYTES, .bwd_max_tpr = LN_BWD_MAX_TPR,                    \
        .bwd_cluster_tpr = LN_BWD_CLUSTER_TPR, .bwd_fit = 0, .bwd_pf = -1, .bwd_pf_bytes = 0,     \
        .bwd_pf_from = 0, .bwd_min_blocks = 0,                                                     \
        .bwd_min_blocks_from = 0, .bwd_min_blocks_to = 1024, .bwd_bulk = 1,                        \
        .bulk_chunk = LN_BULK_CHUNK_BYTES, .bulk_ept = LN_BULK_ELEMS_PER_THREAD,                   \
        .bwd_bulk_bytes = 0, .fwd_bulk = 0, .fwd_bulk_bytes = LN_FWD_BULK_MIN_BYTES,               \
        .fwd_bulk_chunk = LN_BULK_CHUNK_BYTES, .fwd_bulk_ept = LN_FWD_BULK_ELEMS_PER_THREAD,       \
        .fwd_one_sync = 0, .fwd_bulk_stages = 2, .fwd_bulk_gb = 0, .bwd_bulk_stages = 2,           \
        .bulk_idle = 100, .row_shift = 0, .shift_bwd_tpr = 0, .shift_bwd_pf = 0,                  \
        .shift_fwd_stages = 2, .shift_bwd_bulk = 0, .bulk_long_from = 0, .shift_bulk_long_from = 0,\
        .bulk_long_chunk = LN_BULK_CHUNK_BYTES, .bulk_long_ept = LN_BULK_ELEMS_PER_THREAD,         \
        .shift_fwd_bulk_bytes = 0,                                                                 \
        .text = "default",                                                                         \
    }

/* The default plan for rows of es-byte elements; each entry measured
 * faster than LN_PLAN_LEGACY across its shapes (bench/layernorm_NOTES.md):
 * - float32 forward rows over 1024 threads that the copy-engine forward
 *   (below) does not take (fwd_bulk=0, or a shifted row under its
 *   threshold): a cluster of 8 blocks of at most 256 threads, shrunk to
 *   whole warps (4-8 blocks per SM instead of one of 1024, so more rows in
 *   flight).
 * - 16-bit forward in blocks of 320-384 threads (N 20480-24576): launch
 *   bounds for 2 blocks per SM instead of 1: ptxas then spills a little,
 *   which costs less than the lost block.
 * - 16-bit backward rows of 24 KiB or more (N 12288-16384, which one
 *   register block holds): the copy-engine kernel, 2 blocks of 512.
 * - 16-bit copy-engine backward: whole warps where the power of two would
 *   leave a third or more of its element slots idle (N 18432, 20480,
 *   36864, 40960 at 1024 threads); with fewer idle, the power of two.
 * - 16-bit forward rows of 72 KiB or more (N >= 36864): the copy-engine
 *   forward kernel, blocks of 16 KiB of a row (8 per row), 64 elements a
 *   thread (128 threads), 4 stages of rows in flight a block (the loads of
 *   the next rows hide each row's exchange), its gamma and beta in each
 *   thread's registers (read once, not from L2 every row, and no shared
 *   memory: 3 blocks an SM instead of the 2 that shared-memory copies
 *   left) and one cluster exchange a row; below 72 KiB the register and
 *   cluster kernels. Shifted rows (below) from 56 KiB (N >= 28672, where
 *   the register kernels are slower for them), gamma and beta in shared
 *   memory (their pairs move with each row's head).
 * - float32 forward rows over 128 KiB (N > 32768, which one block of
 *   1024 threads no longer holds; the register clusters there are
 *   slower): the same kernel in blocks of at most 32 KiB of a row
 *   (8 per row up to N 65536), 4 stages, gamma and beta in registers, one
 *   exchange; shifted rows from 112 KiB (N >= 28672).
 * - float32 backward rows of 64 KiB or more that one register block would
 *   hold (shifted rows just over N 16384): the copy-engine kernel.
 * - One cluster exchange a row in the forward's register clusters too
 *   (one barrier less a row).
 * - float32 backward rows of 16-32 KiB (N 4096-8192, one block): the
 *   prefetching kernel.
 * - 16-bit prefetching backward (rows of 8-24 KiB): 48 bytes a thread
 *   where its blocks put nearer 12-16 warps on an SM than 32 bytes' do
 *   (LN_BWD_PF_WARPS_LO).
 * - Rows the 16-byte vector does not divide (an odd 16-bit N): 16-byte
 *   vectors from each row's first 16-byte boundary (row_shift) instead of
 *   the widest vector that divides N, 2 bytes for an odd 16-bit N.
 * - 16-bit such rows whose backward would take a cluster or a block of
 *   more than 512 threads (N over about 12288, where aligned rows take the
 *   copy-engine kernel): register clusters of at most 512 threads a block
 *   (shift_bwd_tpr); those one block holds prefetch the next rows also
 *   under 8 KiB (shift_bwd_pf).
 * - Such rows in the copy-engine forward (from their own threshold,
 *   shift_fwd_bulk_bytes, above): 3 stages of rows in flight a block, not
 *   4 (shift_fwd_stages).
 * - Such rows in the copy-engine backward where aligned rows take it
 *   (shift_bwd_bulk), the grid's row stride made whole 16-byte units.
 * - 16-bit backward rows of 112 KiB or more (N >= 57344), shifted ones
 *   from 80 KiB: the copy-engine kernel in blocks of 16 KiB of a row (8 a
 *   row) at 32 elements a thread (bulk_long_*), so that several blocks
 *   share an SM and the grid's clusters cover the GPU (a shifted row's
 *   grid is a multiple of 8 clusters).
 * Everything else as LN_PLAN_LEGACY. */
static void ln_plan_defaults(size_t es, jitop__ln_cfg *out)
{
    static const jitop__ln_cfg legacy = LN_PLAN_LEGACY;
    *out = legacy;
    out->fwd_one_sync = 1;
    out->fwd_bulk_gb = 2;
    out->row_shift = 1;
    out->shift_fwd_stages = 3;
    out->shift_bwd_bulk = 1;
    if (es == 4) {
        out->fwd_cluster_tpr = 256;
        out->fwd_fit = 1;
        out->fwd_bulk = 1;
        out->fwd_bulk_bytes = 131076;
        out->fwd_bulk_chunk = 32768;
        out->fwd_bulk_stages = 4;
        out->shift_fwd_bulk_bytes = 114688;
        out->bwd_pf_from = 16384;
        out->bwd_bulk_bytes = 65536;
    } else {
        out->fwd_min_blocks = 2;
        out->fwd_min_blocks_from = 320;
        out->fwd_min_blocks_to = 384;
        out->bwd_bulk_bytes = 24576;
        out->fwd_bulk = 1;
        out->fwd_bulk_bytes = 73728;
        out->shift_fwd_bulk_bytes = 57344;
        out->fwd_bulk_chunk = 16384;
        out->fwd_bulk_stages = 4;
        out->fwd_bulk_ept = 64;
        out->bulk_idle = 33;
        out->bwd_pf_bytes = 48;
        out->shift_bwd_tpr = 512;
        out->shift_bwd_pf = 1;
        out->bulk_long_from = 114688;
        out->shift_bulk_long_from = 81920;
        out->bulk_long_chunk = 16384;
        out->bulk_long_ept = 32;
    }
}

/* The plan for dtype: its defaults with JITOP_LN_PLAN's fields over them
 * (ops/ln_plan.h). */
static int ln_plan_cfg(jitop_dtype dtype, jitop__ln_cfg *out)
{
    static const jitop__ln_cfg legacy = LN_PLAN_LEGACY;
    const size_t es = jitop_dtype_size(dtype);
    jitop__ln_cfg defaults;
    ln_plan_defaults(es, &defaults);
    return jitop__ln_cfg_parse("JITOP_LN_PLAN", getenv("JITOP_LN_PLAN"), es, &defaults, &legacy,
                               out);
}

/* The GPU's compute capability (major * 10 + minor: 90 for sm_90); a plan
 * takes its shared memory a block where smaller than the arch's
 * (ln_target). */
static int ln_ctx_cc(const jitop_ctx *ctx)
{
    const jitop__driver *d = jitop__driver_of(ctx);
    return d->cc_major * 10 + d->cc_minor;
}

/* Thread-block clusters need sm_90; older GPUs take the generic kernel for
 * rows one block cannot hold. */
static int ln_arch_clusters(int cc)
{
    return cc >= 90 ? LN_MAX_CLUSTER : 1;
}

/* A block's shared memory at most, static and dynamic together (the opt-in
 * limit, CUDA's per-arch figures): a plan over it would fail to launch. */
static size_t ln_arch_block_smem(int cc)
{
    switch (cc) {
    case 80:
    case 87:
        return 163 * 1024;
    case 86:
    case 89:
    case 120:
    case 121:
        return 99 * 1024;
    default:
        return cc >= 90 ? 227 * 1024 : cc >= 80 ? 99 * 1024 : 64 * 1024;
    }
}

/* What a plan is made for: the clusters the kernels are compiled with (the
 * arch's) and a block's shared memory at most. A prewarm's both from the
 * arch it names; a call's the smaller of its arch's and its GPU's limit,
 * since an arch's kernels run on a GPU of another (an sm_80 cubin on an
 * sm_86 GPU, compute_90 PTX on sm_120) whose blocks can hold less. */
typedef struct ln_target {
    int max_cl;
    size_t block_smem;
} ln_target;

static ln_target ln_arch_target(int cc)
{
    return (ln_target){.max_cl = ln_arch_clusters(cc), .block_smem = ln_arch_block_smem(cc)};
}

typedef struct ln_inst {
    char name[128];
    jitop_op *op;
    int regs;
    size_t smem;
    atomic_int clusters; /* cluster kernels: how many fit at once (0: not asked yet) */
    struct ln_inst *next;
} ln_inst;

typedef struct ln_ws {
    void *stream;
    CUdeviceptr ptr;
    size_t bytes;
    struct ln_ws *next;
} ln_ws;

struct jitop__layernorm_state {
    pthread_mutex_t lock;
    jitop_module *module;
    ln_inst *insts;
    ln_ws *ws;
    int threads_rule; /* JITOP_LN_THREADS when the context first used LayerNorm */
    /* the passes (LN_PDL_FWD, LN_PDL_BWD) launched with programmatic stream
     * serialization (sm_90 and newer; JITOP_LN_PDL, read then too); every
     * kernel of kernels/layernorm.cu waits for the previous grid first */
    int programmatic;
    /* the plans of float32 [0] and 16-bit [1] rows (JITOP_LN_PLAN, read then
     * too) */
    jitop__ln_cfg cfg[2];
    /* what every plan of a call is made for: the clusters of the arch the
     * module is compiled for (the context's: a compute_80 context on an
     * sm_90 GPU runs sm_80's kernels, so takes sm_80's plans), the smaller
     * of that arch's and the GPU's shared memory a block */
    ln_target target;
};

/* ------------------------------------------------------------- state */

static void ln_state_destroy(jitop_ctx *ctx)
{
    if (ctx->ops == NULL || ctx->ops->layernorm == NULL)
        return;
    struct jitop__layernorm_state *s = ctx->ops->layernorm;
    const jitop__driver *d = jitop__driver_of(ctx);
    for (ln_inst *i = s->insts, *n; i != NULL; i = n) {
        n = i->next;
        free(i);
    }
    for (ln_ws *w = s->ws, *n; w != NULL; w = n) {
        n = w->next;
        /* Teardown: nothing to report to; the driver releases the context
         * right after (hooks run in reverse order), which frees it anyway. */
        if (d != NULL && w->ptr != 0 && jitop__cuda_more() == JITOP_OK &&
            jitop__driver_make_current(d) == JITOP_OK)
            (void)d->api->cuMemFree(w->ptr);
        free(w);
    }
    pthread_mutex_destroy(&s->lock);
    free(s);
    ctx->ops->layernorm = NULL;
}

/* The state with the module loaded (first call: loads kernels/layernorm.cu,
 * which starts the driver). */
/* kernels/layernorm.cu as the ops load it (malloc'd; NULL on ENOMEM). */
static char *ln_source(const jitop_ctx *ctx)
{
    return jitop__sprintf("%s/layernorm.cu", ctx->kernel_dir ? ctx->kernel_dir : ".");
}

static int ln_load_options(int cc, jitop_dtype dtype, int n, int affine, int rule,
                           const jitop__ln_cfg *cfg, jitop__strv *opts);

/* *cc = the compute capability of the arch a context compiles for (what
 * its calls plan for; called before the driver starts). */
static int ln_plan_cc(jitop_ctx *ctx, int *cc)
{
    const char *arch = NULL;
    int rc = jitop_ctx_arch(ctx, &arch);
    if (rc != JITOP_OK)
        return rc;
    if ((*cc = jitop__arch_cc(arch)) <= 0)
        return jitop__fail(JITOP_EINVAL, "the context's arch '%s' is not sm_NN or compute_NN",
                           arch);
    return JITOP_OK;
}

/* The index of dtype's plan in the state's cfg. */
static int ln_cfg_index(jitop_dtype dtype)
{
    return jitop_dtype_size(dtype) == 4 ? 0 : 1;
}

/* The first call loads the module with the instances a forward + backward
 * of its shape ask declared (-instance=, ln_load_options): a cold first
 * call compiles the source once with all of them, and the other gets of
 * the step compile nothing. */
static int ln_state(jitop_ctx *ctx, jitop_dtype dtype, int n, int affine,
                    struct jitop__layernorm_state **out)
{
    struct jitop__layernorm_state *s = NULL;
    jitop__ops_state *ops = __atomic_load_n(&ctx->ops, __ATOMIC_ACQUIRE);
    if (ops != NULL && (s = __atomic_load_n(&ops->layernorm, __ATOMIC_ACQUIRE)) != NULL) {
        *out = s;
        return JITOP_OK;
    }
    jitop__strv opts = {0};
    int rule = LN_THREADS_WARPS;
    jitop__ln_cfg cfg[2];
    int pdl = 0, cc = 0;
    int rc = ln_threads_rule(&rule);
    if (rc == JITOP_OK)
        rc = ln_pdl_passes(&pdl);
    if (rc == JITOP_OK)
        rc = ln_plan_cc(ctx, &cc);
    if (rc == JITOP_OK)
        rc = ln_plan_cfg(JITOP_FLOAT32, &cfg[0]);
    if (rc == JITOP_OK)
        rc = ln_plan_cfg(JITOP_FLOAT16, &cfg[1]);
    if (rc == JITOP_OK)
        rc = ln_load_options(cc, dtype, n, affine, rule, &cfg[ln_cfg_index(dtype)], &opts);
    if (rc != JITOP_OK)
        return jitop__fail_prefix(rc, "layernorm");
    char *path = ln_source(ctx);
    jitop_module *m = NULL;
    if (path == NULL) {
        jitop__strv_free(&opts);
        return jitop__fail(JITOP_ENOMEM, "layernorm: out of memory");
    }
    const char *srcs[1] = {path};
    /* starts the driver; cached */
    rc = jitop_load(ctx, "layernorm", srcs, 1, (const char *const *)opts.v, opts.n, &m);
    jitop__strv_free(&opts);
    free(path);
    if (rc != JITOP_OK)
        return jitop__fail_prefix(rc, "layernorm: loading kernels/layernorm.cu");

    pthread_mutex_lock(&ctx->lock);
    rc = jitop__ops_state_get(ctx, &ops);
    if (rc == JITOP_OK && ops->layernorm == NULL) {
        s = calloc(1, sizeof *s);
        if (s == NULL) {
            rc = jitop__fail(JITOP_ENOMEM, "layernorm: out of memory");
        } else if (pthread_mutex_init(&s->lock, NULL) != 0) {
            free(s);
            s = NULL;
            rc = jitop__fail(JITOP_ENOMEM, "layernorm: pthread_mutex_init failed");
        } else if ((rc = jitop__ctx_on_destroy(ctx, ln_state_destroy)) != JITOP_OK) {
            pthread_mutex_destroy(&s->lock);
            free(s);
            s = NULL;
        } else {
            s->module = m;
            s->threads_rule = rule;
            memcpy(s->cfg, cfg, sizeof s->cfg);
            s->target = ln_arch_target(cc);
            const size_t gpu_smem = ln_arch_block_smem(ln_ctx_cc(ctx));
            if (gpu_smem < s->target.block_smem)
                s->target.block_smem = gpu_smem;
            /* the kernels wait for the previous grid where compiled for sm_90 */
            s->programmatic = cc >= 90 && jitop__driver_of(ctx)->cc_major >= 9 ? pdl : 0;
            __atomic_store_n(&ops->layernorm, s, __ATOMIC_RELEASE);
        }
    }
    if (rc == JITOP_OK)
        s = ops->layernorm;
    pthread_mutex_unlock(&ctx->lock);
    if (rc == JITOP_OK)
        *out = s;
    return rc;
}

/* The instance called name (is_new: 1 when this call got it first). */
static int ln_get(struct jitop__layernorm_state *s, const char *name, ln_inst **out, int *is_new)
{
    *is_new = 0;
    int rc = JITOP_OK;
    pthread_mutex_lock(&s->lock);
    ln_inst *i = s->insts;
    while (i != NULL && strcmp(i->name, name) != 0)
        i = i->next;
    if (i == NULL) {
        jitop_op *op = NULL;
        jitop_op_info info;
        rc = jitop_op_get(s->module, name, &op); /* compiles the instance on first use */
        if (rc == JITOP_OK)
            rc = jitop_op_info_get(op, &info);
        ln_inst *fresh = NULL;
        if (rc == JITOP_OK && strlen(name) >= sizeof fresh->name)
            rc = jitop__fail(JITOP_EINVAL, "layernorm: op name %s too long", name);
        if (rc == JITOP_OK && (fresh = calloc(1, sizeof *fresh)) == NULL)
            rc = jitop__fail(JITOP_ENOMEM, "layernorm: out of memory");
        if (fresh != NULL) {
            i = fresh;
            memcpy(i->name, name, strlen(name) + 1);
            i->op = op;
            i->regs = info.num_regs;
            i->smem = info.static_shared_bytes;
            i->next = s->insts;
            s->insts = i;
            *is_new = 1;
        }
    }
    pthread_mutex_unlock(&s->lock);
    if (rc == JITOP_OK)
        *out = i;
    return rc;
}

/* The stream's workspace, at least bytes long. Growing frees the old buffer
 * only after the stream's queued work (which may still read it) is done. */
static int ln_workspace(jitop_ctx *ctx, struct jitop__layernorm_state *s, void *stream,
                        size_t bytes, CUdeviceptr *out)
{
    const jitop__driver *d = jitop__driver_of(ctx);
    int rc = JITOP_OK;
    pthread_mutex_lock(&s->lock);
    ln_ws *w = s->ws;
    while (w != NULL && w->stream != stream)
        w = w->next;
    if (w == NULL) {
        if ((w = calloc(1, sizeof *w)) == NULL) {
            rc = jitop__fail(JITOP_ENOMEM, "layernorm: out of memory");
            goto out;
        }
        w->stream = stream;
        w->next = s->ws;
        s->ws = w;
    }
    if (w->bytes < bytes) {
        CUdeviceptr p = 0;
        size_t want = bytes + bytes / 2;
        rc = jitop__cuda_more();
        if (rc == JITOP_OK)
            rc = jitop__driver_make_current(d);
        if (rc == JITOP_OK && w->ptr != 0)
            rc = jitop__cu_check(d->api->cuStreamSynchronize((CUstream)stream),
                                 "cuStreamSynchronize", "layernorm workspace");
        if (rc == JITOP_OK && w->ptr != 0) {
            rc = jitop__cu_check(d->api->cuMemFree(w->ptr), "cuMemFree", "layernorm workspace");
            w->ptr = 0;
            w->bytes = 0;
        }
        if (rc == JITOP_OK)
            rc = jitop__cu_check(d->api->cuMemAlloc(&p, want), "cuMemAlloc", "layernorm workspace");
        if (rc != JITOP_OK)
            goto out;
        w->ptr = p;
        w->bytes = want;
    }
    *out = w->ptr;
out:
    pthread_mutex_unlock(&s->lock);
    return rc;
}

/* ------------------------------------------------------------- shapes */

static const char *ln_ctype(jitop_dtype dt)
{
    switch (dt) {
    case JITOP_FLOAT32: return "float";
    case JITOP_FLOAT16: return "__half";
    case JITOP_BFLOAT16: return "__nv_bfloat16";
    default: return NULL;
    }
}

/* The vector (elements) the kernels move rows of n in. With shift, the
 * 16-byte vector for an n it does not divide, where the row tensors
 * (rows[0..nr)) sit at one offset within 16 bytes and the others (params,
 * NULL pointers do not count) are 16-byte aligned: each row then moves in
 * 16-byte vectors from its first 16-byte boundary, its head and tail
 * element by element (kernels/layernorm.cu, rows of any alignment).
 * Otherwise the widest vector that divides n and to whose size every
 * pointer is aligned. No pointers: buffers as cuMemAlloc aligns them. */
static int ln_vec(int shift, int n, size_t es, const void *const *rows, size_t nr,
                  const void *const *params, size_t np)
{
    const int full = (int)(16 / es);
    if (shift && n % full != 0 && n >= 2 * full) {
        int ok = 1;
        for (size_t i = 1; ok && i < nr; i++)
            ok = (uintptr_t)rows[i] % 16 == (uintptr_t)rows[0] % 16;
        for (size_t i = 0; ok && i < np; i++)
            ok = params[i] == NULL || (uintptr_t)params[i] % 16 == 0;
        if (ok)
            return full;
    }
    int v = full;
    for (; v > 1; v /= 2) {
        int ok = n % v == 0;
        for (size_t i = 0; ok && i < nr + np; i++) {
            const void *q = i < nr ? rows[i] : params[i - nr];
            ok = q == NULL || ((uintptr_t)q % ((size_t)v * es)) == 0;
        }
        if (ok)
            break;
    }
    return v;
}

/* The vectors the kernels move of a row of n: n / vec, or when vec does
 * not divide n, the body's n / vec - 1 (kernels/layernorm.cu's ln_shape
 * NVEC; rows of any alignment). */
static long long ln_row_vecs(int n, int vec)
{
    return n / vec - (n % vec != 0);
}

/* Elements a thread holds of a row's head and tail when vec does not
 * divide n (ln_shape's XS: n % vec + vec elements over the tt threads of a
 * row). */
static long long ln_edge_slots(int n, int vec, long long tt)
{
    return n % vec != 0 ? (n % vec + vec + tt - 1) / tt : 0;
}

/* Threads per row (TPR) and cluster size (CL); 0 when the row is too long
 * for registers and the generic kernel takes it. A row of more than max_tpr
 * threads is split over a cluster of blocks of cluster_tpr threads; with
 * fit, of the fewest whole warps that still hold the row at max_bytes per
 * thread over those blocks (cluster_tpr is then the most). */
static int ln_shape(int n, size_t es, int vec, int max_bytes, int max_tpr, int cluster_tpr,
                    int fit, int max_cl, int rule, int *tpr, int *cl)
{
    const long long nvec = ln_row_vecs(n, vec), vb = (long long)vec * (long long)es;
    const long long per = max_bytes / vb > 0 ? max_bytes / vb : 1; /* vectors per thread */
    const long long need = (nvec + per - 1) / per;
    long long tt = 1;
    if (rule == LN_THREADS_WARPS && need > 32) {
        tt = (need + 31) / 32 * 32; /* whole warps: the kernel's ln_threads_per_row */
    } else {
        while (tt < need)
            tt *= 2;
    }
    if (tt <= max_tpr) {
        *tpr = (int)tt;
        *cl = 1;
        return 1;
    }
    long long c = 1;
    while (c * cluster_tpr < tt)
        c *= 2;
    if (c > max_cl && cluster_tpr < max_tpr) {
        /* A row that max_cl blocks of the plan's cluster block cannot
         * hold takes blocks of max_tpr, unfitted, as the plan before
         * (float32 rows of 65537-262144 with the 256-thread default),
         * rather than the generic kernel's two reads. */
        cluster_tpr = max_tpr;
        fit = 0;
        c = 1;
        while (c * cluster_tpr < tt)
            c *= 2;
    }
    if (c > max_cl)
        return 0;
    *tpr = cluster_tpr;
    if (fit) {
        const long long per_block = (tt + c - 1) / c;
        *tpr = (int)((per_block + 31) / 32 * 32);
    }
    *cl = (int)c;
    return 1;
}

/* The template instance for a shape, as kernels/layernorm.cu names them:
 * KIND_generic<T, AFFINE, VEC> for rows the specialized kernels do not take,
 * KIND<T, N, AFFINE, VEC, TPR> for one block per row group, and
 * KIND_cluster<T, N, AFFINE, VEC, TPR, CL> for a row split over a cluster;
 * extra: the trailing template arguments a JITOP_LN_PLAN sets (MINB; SACC,
 * PF, MINB for the backward), "" for the defaults, whose names (the cache
 * keys) are the short ones. */
static void ln_instance_name(char *name, size_t cap, const char *kind, jitop_dtype dtype, int n,
                             int affine, int vec, int special, int tpr, int cl, const char *extra)
{
    const char *aff = affine ? "true" : "false";
    if (!special)
        snprintf(name, cap, "%s_generic<%s, %s, %d>", kind, ln_ctype(dtype), aff, vec);
    else if (cl == 1)
        snprintf(name, cap, "%s<%s, %d, %s, %d, %d%s>", kind, ln_ctype(dtype), n, aff, vec, tpr,
                 extra);
    else
        snprintf(name, cap, "%s_cluster<%s, %d, %s, %d, %d, %d%s>", kind, ln_ctype(dtype), n, aff,
                 vec, tpr, cl, extra);
}

/* The instance and launch shape for a row length: one rule for the ops and
 * for jitop_layernorm_prewarm, so that a prewarm builds what a call asks. */
typedef struct ln_plan {
    int special, tpr, cl; /* ln_shape's answer */
    int bulk;             /* layernorm_fwd_bulk / layernorm_bwd_bulk */
    int one;              /* forward clusters: one exchange per row (fwd_one_sync) */
    int stages, gb;       /* the bulk kernels' stages; fwd: gamma/beta in shared memory */
    int minb;             /* the launch bounds' blocks per SM the plan asks (0: the kernel's) */
    int pf;               /* backward register kernels: prefetch of the next rows, resolved */
    size_t dyn;           /* backward: dynamic shared memory bytes of the instance */
    const char *plan;     /* the plan's fields (jitop__ln_cfg.text) */
    char note[128];       /* why the plan's copy-engine kernel does not take the row ("": n/a) */
    char name[128];
} ln_plan;

static int ln_rows_per_block(int tpr, int cl)
{
    return (cl == 1 && tpr < 128) ? 128 / tpr : 1;
}

/* The most 16-byte vectors of a row a copy-engine forward's thread holds
 * with gamma and beta in registers (fwd_bulk_gb=2): the defaults' count,
 * which ptxas fits without spilling; twice as many spill
 * (bench/layernorm_NOTES.md). */
#define LN_FWD_GB_REG_VECS 8

/* The plan line's words for a copy-engine forward's gamma and beta (gb). */
static const char *const ln_gb_words[3] = {"", ", gamma and beta in shared memory",
                                           ", gamma and beta in registers"};

/* One line on a plan, for JITOP_VERBOSE: which kernel, how the row is split
 * (vectors per thread, idle lanes in the last pass), rows per block, what
 * the plan asks of the launch bounds, and which JITOP_LN_PLAN made it. */
static void ln_plan_describe(const ln_plan *p, int n, int vec, size_t es, char *out, size_t cap)
{
    const int bulk = p->bulk;
    if (!p->special) {
        snprintf(out, cap,
                 "generic kernel (%d threads per row, row read from memory twice)%s; plan %s",
                 LN_GENERIC_THREADS, p->note, p->plan);
        return;
    }
    const long long vb = (long long)vec * (long long)es; /* 16 B for the copy-engine kernels */
    const long long nvec = ln_row_vecs(n, vec),
                    tt = (long long)p->tpr * p->cl;
    const long long vpt = (nvec + tt - 1) / tt;
    const double idle = 100.0 * (1.0 - (double)nvec / (double)(tt * vpt));
    char split[48], minb[48] = "", fwd[256] = "";
    if (p->cl > 1)
        snprintf(split, sizeof split, "over a cluster of %d blocks", p->cl);
    else
        snprintf(split, sizeof split, "%d row%s per block", ln_rows_per_block(p->tpr, p->cl),
                 ln_rows_per_block(p->tpr, p->cl) == 1 ? "" : "s");
    if (p->minb > 0)
        snprintf(minb, sizeof minb, ", launch bounds for %d blocks per SM", p->minb);
    /* the copy-engine kernels' options (fwd_bulk_stages and bwd_bulk_stages
     * when not the kernels' 2, fwd_bulk_gb, fwd_one_sync) */
    if (bulk && p->stages > 2)
        snprintf(fwd, sizeof fwd, ", rows staged in shared memory (%d stages)%s", p->stages,
                 ln_gb_words[p->gb]);
    else if (bulk)
        snprintf(fwd, sizeof fwd, ", rows staged in shared memory%s",
                 ln_gb_words[p->gb]);
    else if (p->dyn)
        snprintf(fwd, sizeof fwd, ", accumulators%s in shared memory",
                 n % vec != 0 ? " and gamma" : "");
    if (p->one) {
        size_t len = strlen(fwd);
        snprintf(fwd + len, sizeof fwd - len, ", one cluster exchange per row");
    }
    if (n % vec != 0) {
        size_t len = strlen(fwd);
        snprintf(fwd + len, sizeof fwd - len,
                 ", vectors from each row's first 16-byte boundary (head and tail by element)");
    }
    snprintf(out, cap,
             "%s, %lld threads per row (%s), %lld vectors of %lld B per thread, %.0f%% of lanes "
             "idle in the last pass%s%s%s%s; plan %s",
             bulk ? "copy-engine cluster kernel" : p->cl > 1 ? "cluster kernel" : "register kernel",
             tt, split, vpt, vb, idle, fwd, p->pf > 0 ? ", next rows prefetched" : "", minb,
             p->note, p->plan);
}

/* A copy-engine kernel's dynamic shared memory: per_vec bytes for each
 * 16-byte vector of a block's share of the row and extra more; shift 1: the
 * kernel takes rows the 16-byte vector does not divide (their body, the
 * split of kernels/layernorm.cu's ln_bulk_split). */
typedef struct ln_bulk_smem {
    size_t per_vec, extra;
    int shift;
} ln_bulk_smem;

/* 16-byte vectors of a block's share of a row of n over cl blocks at most
 * (ln_bulk_split's CVEC), 0 where the kernel cannot split the row so (a
 * shifted row without shift). */
static long long ln_bulk_share(int n, size_t es, int cl, int shift)
{
    const int vec = (int)(16 / es);
    if (n % vec != 0 && !shift)
        return 0;
    const long long nb = ln_row_vecs(n, vec); /* a shifted row: its body */
    return nb >= cl ? (nb + cl - 1) / cl : 0;
}

/* The copy-engine kernels' shape for a row of n elements of es bytes: the
 * fewest blocks (cl) whose share of the row fits chunk bytes (and whose
 * shared memory, sm, and LN_STATIC_SMEM fit a block's block_smem), split
 * in 16-byte vectors, with threads enough (a power of two, 32 to 1024) for
 * at most ept elements each, or the fewest whole warps where the power of
 * two leaves idle_pct% or more of its t x ept element slots idle; 0 when
 * none fits. *dyn: the shape's dynamic shared memory. A power of two under
 * either threads rule by default: the backward reads its rows from shared
 * memory, so idle lanes in its last pass cost no bytes in flight, and the
 * extra threads shorten its instruction-bound row: whole warps are slower
 * there where few lanes idle, and in float32 always
 * (bench/layernorm_NOTES.md). */
static int ln_bulk_shape(int n, size_t es, int max_cl, int chunk, int ept, int idle_pct,
                         const ln_bulk_smem *sm, size_t block_smem, int *tpr, int *cl,
                         size_t *dyn)
{
    const int vec = (int)(16 / es);
    for (int c = 2; c <= max_cl; c *= 2) {
        const long long sv = ln_bulk_share(n, es, c, sm->shift), share = sv * vec;
        const size_t bytes = (size_t)sv * sm->per_vec + sm->extra;
        if (sv == 0 || (size_t)sv * 16 > (size_t)chunk || bytes + LN_STATIC_SMEM > block_smem)
            continue;
        int t = 32;
        while (t < 1024 && (long long)t * ept < share)
            t *= 2;
        if ((long long)t * ept < share)
            continue;
        /* whole warps instead where the power of two leaves idle_pct% or
         * more of its element slots idle (100 - share / (t * ept) in
         * percent) */
        const long long need = (share + ept - 1) / ept;
        if (100LL * ((long long)t * ept - share) >= (long long)idle_pct * t * ept)
            t = (int)((need + 31) / 32 * 32);
        *tpr = t;
        *cl = c;
        *dyn = bytes;
        return 1;
    }
    return 0;
}

/* The note of a row the plan sends to a copy-engine kernel that cannot
 * take it (max_cl 1: no clusters before sm_90; shift_off: a shifted row the
 * plan keeps off it). */
static void ln_bulk_note(ln_plan *p, const char *field, int chunk, int max_cl, int shift_off)
{
    if (max_cl < 2)
        snprintf(p->note, sizeof p->note, ", %s: needs sm_90, register path", field);
    else if (shift_off)
        snprintf(p->note, sizeof p->note, ", %s: not for shifted rows (shift_bwd_bulk=0), register path",
                 field);
    else
        snprintf(p->note, sizeof p->note,
                 ", %s: N does not split into 16-byte vectors over 2-%d blocks of <= %d B, "
                 "register path",
                 field, max_cl, chunk);
}

/* ln_bulk_shape for the copy-engine forward at these stages and gb (its
 * gamma and beta: 0 from L2, 1 in shared memory, 2 in registers). */
static int ln_fwd_bulk_fits(const jitop__ln_cfg *c, int n, size_t es, int vec, int stages, int gb,
                            const ln_target *tg, int *tpr, int *cl, size_t *dyn)
{
    const int gbs = gb == 1; /* in shared memory */
    /* ln_fwd_bulk_smem_bytes: the stages of x, then gamma's and beta's
     * shares with gb 1 (a shifted row's: a vector more each) */
    const ln_bulk_smem sm = {.per_vec = (size_t)(stages + 2 * gbs) * 16,
                             .extra = n % vec != 0 ? (size_t)(2 * gbs) * 16 : 0,
                             .shift = 1};
    return ln_bulk_shape(n, es, tg->max_cl, c->fwd_bulk_chunk, c->fwd_bulk_ept, 100, &sm,
                         tg->block_smem, tpr, cl, dyn);
}

static void ln_fwd_plan(ln_plan *p, const jitop__ln_cfg *c, jitop_dtype dtype, int n, int affine,
                        int vec, const ln_target *tg, int rule)
{
    const size_t es = jitop_dtype_size(dtype);
    const int max_cl = tg->max_cl;
    p->plan = c->text;
    p->note[0] = '\0';
    p->pf = 0;
    p->minb = 0;
    p->one = 0;
    p->stages = 0;
    p->gb = 0;
    const int from = n % vec != 0 && c->shift_fwd_bulk_bytes > 0 ? c->shift_fwd_bulk_bytes
                                                                  : c->fwd_bulk_bytes;
    if (c->fwd_bulk && (long long)n * (long long)es >= from) {
        int tpr, cl;
        /* gamma and beta held only where the kernel reads them; a shifted
         * row shifts them by its own head, so it keeps them in shared
         * memory (gb 1) where registers are asked for (gb 2) */
        int gb = !affine ? 0 : c->fwd_bulk_gb == 2 && n % vec != 0 ? 1 : c->fwd_bulk_gb;
        const int stages = n % vec != 0 ? c->shift_fwd_stages : c->fwd_bulk_stages;
        size_t dyn = 0;
        int ok = (size_t)vec * es == 16 &&
                 ln_fwd_bulk_fits(c, n, es, vec, stages, gb, tg, &tpr, &cl, &dyn);
        /* gamma and beta in registers cost 2 x 4 a thread's 16-byte vectors:
         * over LN_FWD_GB_REG_VECS of them (a plan's larger fwd_bulk_ept or
         * chunk) ptxas spills, so shared memory then */
        if (ok && gb == 2 && (ln_bulk_share(n, es, cl, 1) + tpr - 1) / tpr > LN_FWD_GB_REG_VECS) {
            gb = 1;
            ok = ln_fwd_bulk_fits(c, n, es, vec, stages, gb, tg, &tpr, &cl, &dyn);
        }
        if (ok) {
            p->special = 1;
            p->tpr = tpr;
            p->cl = cl;
            p->bulk = 1;
            p->one = c->fwd_one_sync;
            p->stages = stages;
            p->gb = gb;
            p->dyn = dyn;
            /* the short name (the cache key) for the kernel's defaults */
            char extra[32] = "";
            if (stages != 2 || gb || p->one)
                snprintf(extra, sizeof extra, ", %d, %d, %d", stages, gb, p->one);
            snprintf(p->name, sizeof p->name, "layernorm_fwd_bulk<%s, %d, %s, %d, %d%s>",
                     ln_ctype(dtype), n, affine ? "true" : "false", tpr, cl, extra);
            return;
        }
        ln_bulk_note(p, "fwd_bulk", c->fwd_bulk_chunk, max_cl, 0);
    }
    p->special = ln_shape(n, es, vec, c->fwd_bytes, c->fwd_max_tpr, c->fwd_cluster_tpr,
                          c->fwd_fit, max_cl, rule, &p->tpr, &p->cl);
    p->dyn = 0;
    p->bulk = 0;
    const long long block = (long long)p->tpr * ln_rows_per_block(p->tpr, p->cl);
    if (p->special && block >= c->fwd_min_blocks_from && block <= c->fwd_min_blocks_to)
        p->minb = c->fwd_min_blocks;
    /* one exchange per row: cluster rows only (a block's own row has no
     * cluster exchange to save), of whole vectors (the kernel counts each
     * block's elements from its vectors) */
    p->one = p->special && p->cl > 1 && c->fwd_one_sync && n % vec == 0;
    char extra[16] = "";
    if (p->one)
        snprintf(extra, sizeof extra, ", %d, 1", p->minb);
    else if (p->minb > 0)
        snprintf(extra, sizeof extra, ", %d", p->minb);
    ln_instance_name(p->name, sizeof p->name, "layernorm_fwd", dtype, n, affine, vec, p->special,
                     p->tpr, p->cl, extra);
}

/* kernels/layernorm.cu's ln_bwd_prefetch: what an instance that names no
 * PF does (16-bit rows of 8 KiB or more, one block). */
static int ln_bwd_pf_kernel_rule(size_t es, int n, int cl)
{
    return es == 2 && cl == 1 && (long long)n * 2 >= 8192;
}

/* Whether the backward's register kernel for a row of n es-byte elements
 * over cl blocks prefetches the next rows: the plan's bwd_pf, else its
 * bwd_pf_from, else the kernel's own rule. */
static int ln_bwd_pf_rule(const jitop__ln_cfg *c, size_t es, int n, int cl)
{
    if (c->bwd_pf >= 0)
        return c->bwd_pf;
    if (c->bwd_pf_from > 0)
        return cl == 1 && (long long)n * (long long)es >= c->bwd_pf_from;
    return ln_bwd_pf_kernel_rule(es, n, cl);
}

/* The launch bounds' blocks per SM the plan asks of a backward register
 * block: bwd_min_blocks for blocks in its range, else 0 (the kernel's
 * ln_bwd_min_blocks). */
static int ln_bwd_minb_plan(const jitop__ln_cfg *c, long long block)
{
    return block >= c->bwd_min_blocks_from && block <= c->bwd_min_blocks_to ? c->bwd_min_blocks
                                                                             : 0;
}

/* How far a prefetching block of tpr threads a row puts the warps resident
 * on an SM (its launch bounds' blocks) from LN_BWD_PF_WARPS_LO-HI. */
static long long ln_bwd_pf_warps_off(const jitop__ln_cfg *c, int tpr)
{
    const long long block = (long long)tpr * ln_rows_per_block(tpr, 1);
    const int minb = ln_bwd_minb_plan(c, block);
    const long long fit = LN_BWD_PF_THREADS_PER_SM / block;
    const long long blocks = minb > 0 ? minb : fit > 0 ? fit : 1;
    const long long warps = blocks * block / 32;
    return warps < LN_BWD_PF_WARPS_LO   ? LN_BWD_PF_WARPS_LO - warps
           : warps > LN_BWD_PF_WARPS_HI ? warps - LN_BWD_PF_WARPS_HI
                                        : 0;
}

static void ln_bwd_plan(ln_plan *p, const jitop__ln_cfg *c, jitop_dtype dtype, int n, int affine,
                        int vec, const ln_target *tg, int rule)
{
    const size_t es = jitop_dtype_size(dtype);
    const int max_cl = tg->max_cl;
    const int bwd_bytes = es == 4 && (long long)n * (long long)es > LN_BWD_LONG_ROW_BYTES
                              ? c->bwd_long_bytes
                              : c->bwd_bytes;
    p->special = ln_shape(n, es, vec, bwd_bytes, c->bwd_max_tpr, c->bwd_cluster_tpr, c->bwd_fit,
                          max_cl, rule, &p->tpr, &p->cl);
    /* a row one block holds that takes the prefetching kernel: of the two
     * budgets, bwd_bytes and bwd_pf_bytes, the one whose blocks put nearer
     * LN_BWD_PF_WARPS_LO-HI warps on an SM (bwd_pf_bytes on a tie), where
     * one block still holds the row at it; rows of 16-byte vectors only
     * (shifted ones too): narrower vectors take more registers a byte, and
     * 48 bytes of them spill */
    int tpr, cl;
    if (p->special && p->cl == 1 && c->bwd_pf_bytes > 0 && (size_t)vec * es == 16 &&
        ln_bwd_pf_rule(c, es, n, 1) &&
        ln_shape(n, es, vec, c->bwd_pf_bytes, c->bwd_max_tpr, c->bwd_cluster_tpr, c->bwd_fit,
                 max_cl, rule, &tpr, &cl) &&
        cl == 1 && ln_bwd_pf_warps_off(c, tpr) <= ln_bwd_pf_warps_off(c, p->tpr))
        p->tpr = tpr;
    p->plan = c->text;
    p->note[0] = '\0';
    p->minb = 0;
    p->pf = 0;
    p->one = 0;
    p->stages = 0;
    p->gb = 0;
    /* the bulk kernel for rows over a cluster, and for rows of at least
     * bwd_bulk_bytes that one register block would hold */
    const int want = p->special && c->bwd_bulk &&
                     (p->cl > 1 || (c->bwd_bulk_bytes > 0 &&
                                    (long long)n * (long long)es >= c->bwd_bulk_bytes));
    /* the kernel's ln_bwd_bulk_smem_bytes: the stages of x and dy, and
     * gamma in float32 */
    const int stages = c->bwd_bulk_stages;
    const ln_bulk_smem sm = {.per_vec = (size_t)(2 * stages) * 16 + 4 * (size_t)vec, .extra = 0,
                             .shift = c->shift_bwd_bulk};
    size_t dyn = 0;
    /* rows of bulk_long_from bytes and more (shift_bulk_long_from for a
     * shifted row): their own share and threads */
    const int long_from = n % vec != 0 ? c->shift_bulk_long_from : c->bulk_long_from;
    const int long_row = long_from > 0 && (long long)n * (long long)es >= long_from;
    const int chunk = long_row ? c->bulk_long_chunk : c->bulk_chunk;
    const int ept = long_row ? c->bulk_long_ept : c->bulk_ept;
    if (want && (size_t)vec * es == 16 &&
        ln_bulk_shape(n, es, max_cl, chunk, ept, c->bulk_idle, &sm, tg->block_smem, &tpr,
                      &cl, &dyn)) {
        p->tpr = tpr;
        p->cl = cl;
        p->bulk = 1;
        p->stages = stages;
        p->dyn = dyn;
        /* the short name (the cache key) for the kernel's default 2 stages */
        char extra[16] = "";
        if (stages != 2)
            snprintf(extra, sizeof extra, ", %d", stages);
        snprintf(p->name, sizeof p->name, "layernorm_bwd_bulk<%s, %d, %s, %d, %d%s>",
                 ln_ctype(dtype), n, affine ? "true" : "false", tpr, cl, extra);
        return;
    }
    if (want)
        ln_bulk_note(p, "bwd_bulk", chunk, max_cl, n % vec != 0 && !c->shift_bwd_bulk);
    /* the register kernels' dgamma/dbeta accumulators (ln_bwd_smem_bytes) */
    p->dyn = 0;
    p->bulk = 0;
    if (p->special && affine) {
        const long long tt = (long long)p->tpr * p->cl, nvec = ln_row_vecs(n, vec);
        const size_t block = (size_t)p->tpr * (size_t)ln_rows_per_block(p->tpr, p->cl);
        const size_t vpt = (size_t)((nvec + tt - 1) / tt);
        const size_t ept = vpt * (size_t)vec + (size_t)ln_edge_slots(n, vec, tt);
        /* and with a shifted row, gamma's body vectors (16 bytes each) */
        p->dyn = 2 * block * ept * sizeof(float) + (n % vec != 0 ? vpt * block * 16 : 0);
    }
    char extra[32] = "";
    if (p->special) {
        /* shifted rows one block holds: shift_bwd_pf, unless bwd_pf is set */
        p->pf = n % vec != 0 && c->shift_bwd_pf && c->bwd_pf < 0 && p->cl == 1
                    ? 1
                    : ln_bwd_pf_rule(c, es, n, p->cl);
        const long long block = (long long)p->tpr * ln_rows_per_block(p->tpr, p->cl);
        p->minb = ln_bwd_minb_plan(c, block);
        /* PF named where the plan sets it or it differs from the kernel's
         * own rule (the short names, the cache keys, otherwise) */
        const int name_pf = c->bwd_pf >= 0 || p->pf != ln_bwd_pf_kernel_rule(es, n, p->cl);
        if (name_pf || p->minb > 0)
            snprintf(extra, sizeof extra, ", true, %d, %d", name_pf ? p->pf : -1, p->minb);
    }
    ln_instance_name(p->name, sizeof p->name, "layernorm_bwd", dtype, n, affine, vec, p->special,
                     p->tpr, p->cl, extra);
}

/* JITOP_VERBOSE: the plan of a shape, once per context and instance. */
static void ln_log_plan(const jitop_ctx *ctx, const char *pass, jitop_dtype dtype, int n, int vec,
                        const ln_plan *p)
{
    char why[1280]; /* the description and the plan text (up to 768) */
    ln_plan_describe(p, n, vec, jitop_dtype_size(dtype), why, sizeof why);
    jitop__log(ctx, "layernorm %s %s N=%d: %s: %s", pass, ln_ctype(dtype), n, p->name, why);
}

/* The backward's dgamma/dbeta reduction (affine only). */
static void ln_reduce_name(char *name, size_t cap, jitop_dtype dtype)
{
    snprintf(name, cap, "layernorm_bwd_reduce<%s>", ln_ctype(dtype));
}

/* Threads per column of layernorm_bwd_reduce for p partial rows: about
 * p / 16, so that each has two batches of eight loads or fewer. */
static int ln_reduce_rows(long long p)
{
    int r = 1;
    while (r < 32 && r * 16LL < p)
        r *= 2;
    return r;
}


/* Resident blocks per SM for the backward's persistent grid, from the
 * kernel's registers and shared memory (the sm_90 limits). */
static int ln_blocks_per_sm(const ln_inst *i, int block, size_t dyn_smem)
{
    const size_t smem = i->smem + dyn_smem;
    int regs = i->regs > 0 ? i->regs : 1;
    int per_warp = ((regs * 32 + 255) / 256) * 256;
    int warps = per_warp <= 16384 ? (16384 / per_warp) * 4 : 0;
    int wpb = (block + 31) / 32;
    int b = warps / wpb;
    if (b > 2048 / block)
        b = 2048 / block;
    if (smem > 0 && (int)((228 * 1024) / (smem + 1024)) < b)
        b = (int)((228 * 1024) / (smem + 1024));
    if (b > 32)
        b = 32;
    return b < 1 ? 1 : b;
}

static int ln_check_common(jitop_ctx *ctx, const char *fn, jitop_dtype dtype, int64_t rows,
                           int64_t cols)
{
    if (ctx == NULL)
        return jitop__fail(JITOP_EINVAL, "%s: ctx is NULL", fn);
    if (ln_ctype(dtype) == NULL)
        return jitop__fail(JITOP_EINVAL, "%s: dtype %d is not float32, float16 or bfloat16", fn,
                           (int)dtype);
    if (rows < 1)
        return jitop__fail(JITOP_EINVAL, "%s: rows (M) is %lld, must be >= 1", fn, (long long)rows);
    if (cols < 1 || cols > INT32_MAX / 2)
        return jitop__fail(JITOP_EINVAL, "%s: cols (N) is %lld, must be in [1, %d]", fn,
                           (long long)cols, INT32_MAX / 2);
    return JITOP_OK;
}

/* The persistent grid of the backward and of layernorm_fwd_bulk, in groups
 * of rpb rows (a group is a cluster of
 * `clusters` blocks when clusters > 1): a persistent grid of one wave, and
 * no more groups than rows need. Clusters: as many as the device holds at
 * once, which can be fewer than SMs / cluster size: one more makes a
 * second wave, at about half the speed (bench/layernorm_NOTES.md). */
static int ln_bwd_groups(jitop_ctx *ctx, ln_inst *inst, int block, size_t dyn, int clusters,
                         int rpb, int64_t rows, long long *out)
{
    const jitop__driver *d = jitop__driver_of(ctx);
    long long groups;
    if (clusters > 1) {
        /* asked once per instance: its block and shared memory are fixed */
        int fit = atomic_load_explicit(&inst->clusters, memory_order_relaxed);
        if (fit == 0) {
            int rc = jitop_occupancy_clusters(inst->op, block, dyn, clusters, &fit);
            if (rc != JITOP_OK)
                return rc;
            /* said once, by the thread that stores it: the persistent grid
             * at most (a group count that does not divide the rows leaves
             * part of the last pass's clusters idle) */
            int unset = 0;
            if (atomic_compare_exchange_strong_explicit(&inst->clusters, &unset, fit,
                                                        memory_order_relaxed,
                                                        memory_order_relaxed))
                jitop__log(ctx, "layernorm %s: %d clusters of %d blocks fit at once (the persistent "
                                "grid's groups at most)",
                           inst->name, fit, clusters);
        }
        groups = fit;
    } else {
        groups = (long long)d->sm_count * ln_blocks_per_sm(inst, block, dyn);
    }
    if (groups < 1)
        groups = 1;
    if (groups > (rows + rpb - 1) / rpb)
        groups = (rows + rpb - 1) / rpb;
    *out = groups;
    return JITOP_OK;
}

/* A persistent grid of groups of rpb rows, for rows of n es-byte elements
 * the 16-byte vector does not divide, whose kernel needs every row a group
 * takes to start at the same offset within 16 bytes (it traps otherwise):
 * the grid's row stride (groups x rpb rows) made whole 16-byte units, the
 * groups rounded down to a multiple of 16 / gcd(16, rpb n es) (up to it
 * where fewer), unless one pass of the grid takes every row. */
static long long ln_same_head_groups(long long groups, int64_t rows, int rpb, int n, size_t es)
{
    if (groups * rpb >= rows)
        return groups;
    long long unit = 16, stride = (long long)rpb * n * (long long)es;
    while (stride % 2 == 0 && unit > 1) {
        stride /= 2;
        unit /= 2;
    }
    return groups / unit * unit > 0 ? groups / unit * unit : unit;
}

/* A shifted backward row (vec does not divide n) that the plan gives a
 * cluster or a block of more than shift_bwd_tpr threads: fitted clusters
 * of at most that many, where they hold the row (else the plan stays). */
static void ln_bwd_fit_shifted(ln_plan *p, const jitop__ln_cfg *c, jitop_dtype dtype, int n,
                               int affine, int vec, const ln_target *tg, int rule)
{
    if (n % vec == 0 || !p->special || p->bulk || c->shift_bwd_tpr <= 0 ||
        (p->cl == 1 && p->tpr <= c->shift_bwd_tpr))
        return;
    jitop__ln_cfg fc = *c;
    fc.bwd_max_tpr = fc.bwd_cluster_tpr = c->shift_bwd_tpr;
    fc.bwd_fit = 1;
    ln_plan fitted;
    ln_bwd_plan(&fitted, &fc, dtype, n, affine, vec, tg, rule);
    if (fitted.special) {
        *p = fitted;
        p->plan = c->text; /* not the copy's */
    }
}

/* Whether a backward register plan's shared memory (its dgamma/dbeta
 * accumulators, and gamma for a shifted row) is over a block's limit:
 * the register kernels' bytes grow with N, by 8 a column and more,
 * against 99 KiB a block on sm_86/sm_89/sm_120 and 163 KiB on sm_80. */
static int ln_bwd_over_block(const ln_plan *p, size_t limit)
{
    return p->special && !p->bulk && p->dyn + LN_STATIC_SMEM > limit;
}

/* The backward's generic kernel (whole vectors of n, no dynamic shared
 * memory) for a row whose register plan is over a block's limit; the
 * plan line says why. */
static void ln_bwd_generic(ln_plan *p, jitop_dtype dtype, int n, int affine, int vec,
                           size_t limit)
{
    snprintf(p->note, sizeof p->note,
             ", the register kernel's %zu B of shared memory over a block's %zu B",
             p->dyn + LN_STATIC_SMEM, limit);
    p->special = 0;
    p->bulk = 0;
    p->tpr = 0;
    p->cl = 1;
    p->dyn = 0;
    p->pf = 0;
    p->minb = 0;
    p->stages = 0;
    ln_instance_name(p->name, sizeof p->name, "layernorm_bwd", dtype, n, affine, vec, 0, 0, 1, "");
}

/* The vector and plan of a forward (bwd 0) or backward (bwd 1), for
 * ln_vec's pointers: the shifted 16-byte vector (the plan's row_shift) only
 * where a register kernel takes the row (the generic kernel moves whole
 * vectors of N), and in the backward (after ln_bwd_fit_shifted) only where
 * a row's threads hold at most one head or tail element each (at least
 * N % VEC + VEC threads a row): below that (16-bit rows up to 143
 * elements, float32 up to 39) each thread keeps several of them in its
 * accumulators, and the narrow vector is faster. A backward register plan
 * over the arch's shared memory a block (ln_bwd_over_block) takes, for a
 * shifted row, the narrow vector's plan, and where that is over too, the
 * generic kernel. */
static int ln_choose(int bwd, ln_plan *p, const jitop__ln_cfg *c, jitop_dtype dtype, int n,
                     int affine, const void *const *rows, size_t nr, const void *const *params,
                     size_t np, const ln_target *tg, int rule)
{
    void (*plan)(ln_plan *, const jitop__ln_cfg *, jitop_dtype, int, int, int, const ln_target *,
                 int) =
        bwd ? ln_bwd_plan : ln_fwd_plan;
    const size_t es = jitop_dtype_size(dtype), limit = tg->block_smem;
    int vec = ln_vec(c->row_shift, n, es, rows, nr, params, np);
    plan(p, c, dtype, n, affine, vec, tg, rule);
    if (bwd)
        ln_bwd_fit_shifted(p, c, dtype, n, affine, vec, tg, rule);
    if (n % vec != 0 &&
        (!p->special || (bwd && (ln_edge_slots(n, vec, (long long)p->tpr * p->cl) > 1 ||
                                 ln_bwd_over_block(p, limit))))) {
        vec = ln_vec(0, n, es, rows, nr, params, np);
        plan(p, c, dtype, n, affine, vec, tg, rule);
    }
    if (bwd && ln_bwd_over_block(p, limit))
        ln_bwd_generic(p, dtype, n, affine, vec, limit);
    return vec;
}

/* ------------------------------------------------------------- forward */

/* Launches inst of pass (LN_PDL_FWD or LN_PDL_BWD; its cluster shape is
 * compiled in), with programmatic stream serialization where the state
 * says so for that pass. */
static int ln_launch(const struct jitop__layernorm_state *s, int pass, const ln_inst *inst,
                     jitop_dim3 grid, jitop_dim3 block, size_t dyn, void *stream, void **args,
                     const size_t *sizes, size_t nargs)
{
    if (!(s->programmatic & pass))
        return jitop_launch(inst->op, grid, block, dyn, stream, args, sizes, nargs);
    jitop_launch_config lc = {
        .grid = grid, .block = block, .shared_bytes = dyn, .stream = stream, .programmatic = 1};
    return jitop_launch_ex(inst->op, &lc, args, sizes, nargs);
}

int jitop_layernorm_forward(jitop_ctx *ctx, jitop_dtype dtype, int64_t rows, int64_t cols,
                            float eps, const void *x, const void *gamma, const void *beta, void *y,
                            float *mean, float *rstd, void *stream)
{
    static const char *fn = "jitop_layernorm_forward";
    int rc = ln_check_common(ctx, fn, dtype, rows, cols);
    if (rc != JITOP_OK)
        return rc;
    if (x == NULL)
        return jitop__fail(JITOP_EINVAL, "%s: x is NULL", fn);
    if (y == NULL)
        return jitop__fail(JITOP_EINVAL, "%s: y is NULL", fn);
    if (!(eps >= 0.f))
        return jitop__fail(JITOP_EINVAL, "%s: eps is %g, must be >= 0", fn, (double)eps);

    struct jitop__layernorm_state *s;
    const int n = (int)cols;
    const int affine = gamma != NULL || beta != NULL;
    if ((rc = ln_state(ctx, dtype, n, affine, &s)) != JITOP_OK)
        return rc;
    const void *rows_p[2] = {x, y}, *params[2] = {gamma, beta};
    ln_plan plan;
    const int vec = ln_choose(0, &plan, &s->cfg[ln_cfg_index(dtype)], dtype, n, affine, rows_p, 2,
                              params, 2, &s->target, s->threads_rule);
    const int special = plan.special, tpr = plan.tpr, cl = plan.cl;
    ln_inst *inst;
    int fresh;
    if ((rc = ln_get(s, plan.name, &inst, &fresh)) != JITOP_OK)
        return jitop__fail_prefix(rc, "%s", fn);
    if (fresh)
        ln_log_plan(ctx, "forward", dtype, n, vec, &plan);

    long long m = rows;
    jitop_dim3 grid, block;
    if (plan.bulk) {
        /* a persistent grid, as the backward's */
        long long groups = 0;
        const size_t limit = s->target.block_smem;
        if (inst->smem + plan.dyn > limit)
            return jitop__fail(JITOP_EINVAL,
                               "%s: %s needs %zu bytes of shared memory, over a block's %zu (plan "
                               "%s: lower fwd_bulk_chunk)",
                               fn, plan.name, inst->smem + plan.dyn, limit, plan.plan);
        if ((rc = ln_bwd_groups(ctx, inst, tpr, plan.dyn, cl, 1, rows, &groups)) != JITOP_OK)
            return jitop__fail_prefix(rc, "%s", fn);
        grid = (jitop_dim3){(unsigned)(groups * cl), 1, 1};
        block = (jitop_dim3){(unsigned)tpr, 1, 1};
        void *args[] = {&x, &gamma, &beta, &y, &mean, &rstd, &m, &eps};
        size_t sizes[] = {8, 8, 8, 8, 8, 8, 8, 4};
        rc = ln_launch(s, LN_PDL_FWD, inst, grid, block, plan.dyn, stream, args, sizes, 8);
    } else if (!special) {
        if (rows > 0x7fffffffLL)
            return jitop__fail(JITOP_EINVAL, "%s: rows %lld over the grid limit", fn, m);
        grid = (jitop_dim3){(unsigned)rows, 1, 1};
        block = (jitop_dim3){LN_GENERIC_THREADS, 1, 1};
        void *args[] = {&x, &gamma, &beta, &y, &mean, &rstd, &m, (void *)&n, &eps};
        size_t sizes[] = {8, 8, 8, 8, 8, 8, 8, 4, 4};
        rc = ln_launch(s, LN_PDL_FWD, inst, grid, block, 0, stream, args, sizes, 9);
    } else {
        const int rpb = ln_rows_per_block(tpr, cl);
        const long long blocks = (m + rpb - 1) / rpb * cl;
        if (blocks > 0x7fffffffLL)
            return jitop__fail(JITOP_EINVAL, "%s: rows %lld over the grid limit", fn, m);
        grid = (jitop_dim3){(unsigned)blocks, 1, 1};
        block = (jitop_dim3){(unsigned)(tpr * rpb), 1, 1};
        void *args[] = {&x, &gamma, &beta, &y, &mean, &rstd, &m, &eps};
        size_t sizes[] = {8, 8, 8, 8, 8, 8, 8, 4};
        rc = ln_launch(s, LN_PDL_FWD, inst, grid, block, 0, stream, args, sizes, 8);
    }
    if (rc != JITOP_OK)
        return jitop__fail_prefix(rc, "%s", fn);
    return JITOP_OK;
}

/* ------------------------------------------------------------ backward */

static int ln_bwd_check(const char *fn, const void *dy, const void *x, const float *mean,
                        const float *rstd, const void *dx)
{
    if (dy == NULL)
        return jitop__fail(JITOP_EINVAL, "%s: dy is NULL", fn);
    if (x == NULL)
        return jitop__fail(JITOP_EINVAL, "%s: x is NULL", fn);
    if (mean == NULL || rstd == NULL)
        return jitop__fail(JITOP_EINVAL, "%s: %s is NULL (save it in the forward)", fn,
                           mean == NULL ? "mean" : "rstd");
    if (dx == NULL)
        return jitop__fail(JITOP_EINVAL, "%s: dx is NULL", fn);
    return JITOP_OK;
}

int jitop_layernorm_backward(jitop_ctx *ctx, jitop_dtype dtype, int64_t rows, int64_t cols,
                             const void *dy, const void *x, const void *gamma, const float *mean,
                             const float *rstd, void *dx, void *dgamma, void *dbeta, void *stream)
{
    static const char *fn = "jitop_layernorm_backward";
    int rc = ln_check_common(ctx, fn, dtype, rows, cols);
    if (rc == JITOP_OK)
        rc = ln_bwd_check(fn, dy, x, mean, rstd, dx);
    if (rc != JITOP_OK)
        return rc;

    struct jitop__layernorm_state *s;
    const int n = (int)cols;
    const size_t es = jitop_dtype_size(dtype);
    const int affine = gamma != NULL || dgamma != NULL || dbeta != NULL;
    if ((rc = ln_state(ctx, dtype, n, affine, &s)) != JITOP_OK)
        return rc;
    const void *rows_p[3] = {dy, x, dx}, *params[1] = {gamma};
    ln_plan plan;
    const int vec = ln_choose(1, &plan, &s->cfg[ln_cfg_index(dtype)], dtype, n, affine, rows_p, 3,
                              params, 1, &s->target, s->threads_rule);
    const int special = plan.special, tpr = plan.tpr, cl = plan.cl;
    ln_inst *inst, *red = NULL;
    int fresh;
    if ((rc = ln_get(s, plan.name, &inst, &fresh)) != JITOP_OK)
        return jitop__fail_prefix(rc, "%s", fn);
    if (fresh)
        ln_log_plan(ctx, "backward", dtype, n, vec, &plan);
    /* a plan's accumulators can outgrow a block (ln_choose keeps the
     * register plans under LN_STATIC_SMEM's bound: a JITOP_LN_PLAN's
     * copy-engine stages can still) */
    const size_t limit = s->target.block_smem;
    if (special && inst->smem + plan.dyn > limit)
        return jitop__fail(JITOP_EINVAL,
                           "%s: %s needs %zu bytes of shared memory, over a block's %zu (plan %s: "
                           "lower bwd_bytes or the block size)",
                           fn, plan.name, inst->smem + plan.dyn, limit, plan.plan);
    if (affine) {
        char rname[64];
        ln_reduce_name(rname, sizeof rname, dtype);
        if ((rc = ln_get(s, rname, &red, &fresh)) != JITOP_OK)
            return jitop__fail_prefix(rc, "%s", fn);
    }

    const int rpb = special ? ln_rows_per_block(tpr, cl) : 1;
    const int block = special ? tpr * rpb : LN_GENERIC_THREADS;
    const int clusters = special ? cl : 1;
    const size_t dyn = plan.dyn;
    long long groups = 0;
    if ((rc = ln_bwd_groups(ctx, inst, block, dyn, clusters, rpb, rows, &groups)) != JITOP_OK)
        return jitop__fail_prefix(rc, "%s", fn);
    /* Rows of any alignment (vec does not divide n): each row group keeps
     * one row's columns in its accumulators, so the grid's row stride is
     * whole 16-byte units, and every row group writes its own partial
     * row. */
    const int shift = special && n % vec != 0;
    if (shift)
        groups = ln_same_head_groups(groups, rows, rpb, n, es);
    const long long parts = shift ? groups * rpb : groups;
    CUdeviceptr ws = 0;
    /* partial rows of dgamma's and dbeta's columns, each rounded up to
     * whole 128-byte lines (ln_part_row in kernels/layernorm.cu) */
    const size_t part_row = 2 * (((size_t)n + 31) / 32 * 32);
    if (affine && (rc = ln_workspace(ctx, s, stream, (size_t)parts * part_row * sizeof(float),
                                     &ws)) != JITOP_OK)
        return jitop__fail_prefix(rc, "%s", fn);
    float *part = (float *)(uintptr_t)ws;
    long long m = rows;
    jitop_dim3 grid = {(unsigned)(groups * clusters), 1, 1}, blk = {(unsigned)block, 1, 1};
    if (!special) {
        void *args[] = {&dy, &x, &gamma, &mean, &rstd, &dx, &part, &m, (void *)&n};
        size_t sizes[] = {8, 8, 8, 8, 8, 8, 8, 8, 4};
        rc = ln_launch(s, LN_PDL_BWD, inst, grid, blk, 0, stream, args, sizes, 9);
    } else {
        void *args[] = {&dy, &x, &gamma, &mean, &rstd, &dx, &part, &m};
        size_t sizes[] = {8, 8, 8, 8, 8, 8, 8, 8};
        rc = ln_launch(s, LN_PDL_BWD, inst, grid, blk, dyn, stream, args, sizes, 8);
    }
    if (rc == JITOP_OK && affine && (dgamma != NULL || dbeta != NULL)) {
        long long p = parts;
        jitop_dim3 rgrid = {(unsigned)((n + 31) / 32), 2, 1}, rblk = {32 * (unsigned)ln_reduce_rows(p), 1, 1};
        void *args[] = {&part, &p, (void *)&n, &dgamma, &dbeta};
        size_t sizes[] = {8, 8, 4, 8, 8};
        rc = ln_launch(s, LN_PDL_BWD, red, rgrid, rblk, 0, stream, args, sizes, 5);
    }
    if (rc != JITOP_OK)
        return jitop__fail_prefix(rc, "%s", fn);
    return JITOP_OK;
}

/* -instance= options for the instances a forward and a backward of rows of
 * n elements ask on the arch of capability cc (the reduction too when
 * affine), on buffers aligned as
 * cuMemAlloc aligns them (the prewarm's rule): a call on other pointers
 * may pick a narrower vector, whose instance is then compiled at its get. */
static int ln_load_options(int cc, jitop_dtype dtype, int n, int affine, int rule,
                           const jitop__ln_cfg *cfg, jitop__strv *opts)
{
    /* the arch's target: the GPU's limit is not asked before the load
     * (which starts the driver); where it is smaller, the call plans
     * another instance, compiled at its first use */
    const ln_target tg = ln_arch_target(cc);
    ln_plan plan;
    char red[64];
    ln_choose(0, &plan, cfg, dtype, n, affine, NULL, 0, NULL, 0, &tg, rule);
    int rc = jitop__strv_pushf(opts, "-instance=%s", plan.name);
    ln_choose(1, &plan, cfg, dtype, n, affine, NULL, 0, NULL, 0, &tg, rule);
    if (rc == JITOP_OK)
        rc = jitop__strv_pushf(opts, "-instance=%s", plan.name);
    ln_reduce_name(red, sizeof red, dtype);
    if (rc == JITOP_OK && affine)
        rc = jitop__strv_pushf(opts, "-instance=%s", red);
    if (rc != JITOP_OK)
        jitop__strv_free(opts);
    return rc;
}

/* ------------------------------------------------------------ prewarm */

int jitop_layernorm_prewarm(jitop_ctx *ctx, const char *arch, jitop_dtype dtype, int64_t cols)
{
    static const char *fn = "jitop_layernorm_prewarm";
    int rc = ln_check_common(ctx, fn, dtype, 1, cols);
    if (rc != JITOP_OK)
        return rc;
    if (arch == NULL && (rc = jitop_ctx_arch(ctx, &arch)) != JITOP_OK)
        return jitop__fail_prefix(rc, "%s", fn);
    const int cc = jitop__arch_cc(arch);
    if (cc < 0)
        return jitop__fail(JITOP_EINVAL, "%s: arch '%s' is not sm_NN or compute_NN", fn, arch);
    const ln_target tg = ln_arch_target(cc);
    /* What a call on a GPU of this arch picks for buffers from cuMemAlloc
     * (aligned for the widest vector), with and without gamma/beta. */
    const int n = (int)cols;
    int rule;
    jitop__ln_cfg cfg;
    int pdl; /* launches nothing, but a bad setting fails here as at a call */
    if ((rc = ln_threads_rule(&rule)) != JITOP_OK || (rc = ln_pdl_passes(&pdl)) != JITOP_OK ||
        (rc = ln_plan_cfg(dtype, &cfg)) != JITOP_OK)
        return jitop__fail_prefix(rc, "%s", fn);
    ln_plan plan;
    char names[5][sizeof plan.name];
    for (int affine = 0; affine <= 1; affine++) {
        int vec = ln_choose(0, &plan, &cfg, dtype, n, affine, NULL, 0, NULL, 0, &tg, rule);
        memcpy(names[affine * 2], plan.name, sizeof plan.name);
        ln_log_plan(ctx, "forward", dtype, n, vec, &plan);
        vec = ln_choose(1, &plan, &cfg, dtype, n, affine, NULL, 0, NULL, 0, &tg, rule);
        memcpy(names[affine * 2 + 1], plan.name, sizeof plan.name);
        ln_log_plan(ctx, "backward", dtype, n, vec, &plan);
    }
    ln_reduce_name(names[4], sizeof names[4], dtype);
    char *path = ln_source(ctx);
    if (path == NULL)
        return jitop__fail(JITOP_ENOMEM, "%s: out of memory", fn);
    /* The source as jitop_load builds it, with the five instances folded
     * in (build/build.h): one compile, and the binary a load then finds
     * through the source's manifest, each instance a get with no compile. */
    jitop__strv want = {0};
    for (int i = 0; rc == JITOP_OK && i < 5; i++)
        rc = jitop__strv_push(&want, names[i]);
    jitop_build_result r;
    if (rc == JITOP_OK)
        rc = jitop__build_fold(ctx, path, arch, NULL, 0, &want, &r);
    jitop__strv_free(&want);
    free(path);
    return rc == JITOP_OK ? JITOP_OK : jitop__fail_prefix(rc, "%s (%s)", fn, arch);
}
