/*
 * jitop through its C API, measured the same way as bench/floor.c.
 *
 *   jitop_bench compile ...            jitop_build with no driver: area "compile" when it compiled,
 *                                      "hit" when the cache (JITOP_CACHE_DIR) already held the entry
 *   jitop_bench load --area cold|warm  cuInit+context (own line), then jitop_ctx_create,
 *                                      jitop_load + jitop_op_get until the op is launchable
 *   jitop_bench inproc ...             jitop_load again and jitop_op_get again on a loaded module
 *   jitop_bench launch ...             host cost of jitop_launch (checked and unchecked) next to a
 *                                      raw cuLaunchKernel of the same kernel, interleaved
 *   jitop_bench edit ...               edit the source, jitop_module_reload, launch, sync, check
 *   jitop_bench lltm-launch ...        host cost of jitop_lltm_forward at the tutorial's size
 *
 * The cache is the one in JITOP_CACHE_DIR (the driver, bench/drive.py, gives
 * each step a fresh or a warm one). Output: one JSON line per figure.
 */
#include "bench_args.h"
#include "bench_cuda.h"
#include "bench_nvrtc.h"
#include "bench_util.h"

#include <jitop.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define USAGE "jitop_bench compile|load|inproc|launch|edit|lltm-launch --src FILE --kernel LABEL [--op NAME] " \
              "[--arch ARCH] [--opt=OPTION]... [--reps N] [--area cold|warm]"
#define SYSTEM "jitop-c"

/* Hot reload is another part of the library: a build without it still
 * measures everything else (the edit row then says why it is missing). */
#pragma weak jitop_module_reload
#pragma weak jitop_lltm_forward
#pragma weak jitop_lltm_saved_size

typedef struct jb_run {
    bench_args a;
    bench_cu cu;
    jitop_ctx *ctx;
    jitop_module *mod;
    jitop_op *op;
    char err[4096];
} jb_run;

static const char *op_name(const jb_run *r)
{
    return r->a.op ? r->a.op : r->a.kernel;
}

static void set_jitop_err(jb_run *r, const char *what, int status)
{
    snprintf(r->err, sizeof r->err, "%s: %s: %s", what, jitop_strerror(status), jitop_errmsg(r->ctx));
}

static int make_ctx(jb_run *r, int compile_only)
{
    jitop_config cfg;
    jitop_config_init(&cfg);
    cfg.compile_only = compile_only;
    cfg.arch = r->a.arch;
    int s = jitop_ctx_create(&cfg, &r->ctx);
    if (s != JITOP_OK) {
        set_jitop_err(r, "jitop_ctx_create", s);
        return -1;
    }
    return 0;
}

static int load_and_get(jb_run *r)
{
    const char *src = r->a.src;
    int s = jitop_load(r->ctx, r->a.kernel, &src, 1, r->a.opts, r->a.nopts, &r->mod);
    if (s != JITOP_OK) {
        set_jitop_err(r, "jitop_load", s);
        return -1;
    }
    s = jitop_op_get(r->mod, op_name(r), &r->op);
    if (s != JITOP_OK) {
        set_jitop_err(r, "jitop_op_get", s);
        return -1;
    }
    return 0;
}

/* The first compile in a process also pays for loading NVRTC (jitop opens
 * it on first use; the floor links it, so it loads before main and its
 * timer never sees it). Compiles repeated in the same process, each into a
 * fresh empty cache, compare the two with NVRTC loaded on both sides. */
static int compile_repeated(jb_run *r, const char *name)
{
    int reps = r->a.reps ? r->a.reps : bench_reps(10, 3, 1), rc = -1;
    const char *base = getenv("JITOP_CACHE_DIR");
    double *t = calloc((size_t)reps, sizeof *t);
    if (!t || !base)
        goto out;
    for (int i = 0; i < reps; i++) {
        char dir[4096];
        snprintf(dir, sizeof dir, "%s/repeat-%d", base, i);
        jitop_config cfg;
        jitop_config_init(&cfg);
        cfg.compile_only = 1;
        cfg.arch = r->a.arch;
        cfg.cache_dir = dir;
        cfg.verbose = 0;
        jitop_ctx *ctx = NULL;
        jitop_build_result res;
        double t0 = bench_now_ms();
        int s = jitop_ctx_create(&cfg, &ctx);
        if (s == JITOP_OK)
            s = jitop_build(ctx, r->a.src, r->a.arch, r->a.opts, r->a.nopts, &name, 1, &res);
        t[i] = bench_now_ms() - t0;
        if (s != JITOP_OK) {
            snprintf(r->err, sizeof r->err, "repeated jitop_build: %s: %s", jitop_strerror(s),
                     jitop_errmsg(ctx));
            jitop_ctx_destroy(ctx);
            goto out;
        }
        jitop_ctx_destroy(ctx);
    }
    rc = bench_emit_detail("compile", r->a.kernel, SYSTEM,
                           "jitop_build into an empty cache, repeated in the same process",
                           "ms", t, (size_t)reps);
out:
    free(t);
    return rc;
}

static int mode_compile(jb_run *r)
{
    const char *name = op_name(r);
    jitop_build_result res;
    int rc = -1;
    double t0 = bench_now_ms();
    if (make_ctx(r, 1) != 0)
        goto out;
    double t1 = bench_now_ms();
    int s = jitop_build(r->ctx, r->a.src, r->a.arch, r->a.opts, r->a.nopts, &name, 1, &res);
    double t2 = bench_now_ms();
    if (s != JITOP_OK) {
        set_jitop_err(r, "jitop_build", s);
        goto out;
    }
    double build = t2 - t1, create = t1 - t0;
    const char *area = res.cached ? "hit" : "compile";
    rc = bench_emit(area, r->a.kernel, SYSTEM,
                    res.cached ? "jitop_build, cache hit in a new process (stat path + read entry)"
                               : "jitop_build into an empty cache, first call in a new process (NVRTC + write entry)",
                    "ms", &build, 1);
    if (rc == 0)
        rc = bench_emit_detail(area, r->a.kernel, SYSTEM, "jitop_ctx_create (compile-only)", "ms", &create, 1);
    if (rc == 0 && !res.cached)
        rc = compile_repeated(r, name);
out:
    if (rc != 0)
        bench_emit_status("compile", r->a.kernel, SYSTEM, "jitop_build", "failed", r->err);
    return rc;
}

static int mode_load(jb_run *r)
{
    const char *area = r->a.area ? r->a.area : "cold";
    int rc = -1;
    double t0 = bench_now_ms();
    if (make_ctx(r, 0) != 0)
        goto out;
    double t1 = bench_now_ms();
    if (load_and_get(r) != 0)
        goto out;
    double t2 = bench_now_ms();
    double total = t2 - t1, create = t1 - t0;
    rc = bench_emit(area, r->a.kernel, SYSTEM, "jitop_load + jitop_op_get (op launchable)", "ms", &total, 1);
    if (rc == 0)
        rc = bench_emit_detail(area, r->a.kernel, SYSTEM, "jitop_ctx_create (before the load, not in the figure)",
                               "ms", &create, 1);
out:
    if (rc != 0)
        bench_emit_status(area, r->a.kernel, SYSTEM, "jitop_load + jitop_op_get", "failed", r->err);
    return rc;
}

static int mode_inproc(jb_run *r)
{
    enum { GETS = 1000, LOADS = 100 };
    int reps = r->a.reps ? r->a.reps : bench_reps(100, 20, 3);
    double *tg = calloc((size_t)reps, sizeof *tg);
    double *tl = calloc((size_t)reps, sizeof *tl);
    const char *src = r->a.src;
    int rc = -1;
    if (!tg || !tl || make_ctx(r, 0) != 0 || load_and_get(r) != 0)
        goto out;
    for (int i = -1; i < reps; i++) {
        jitop_op *op = NULL;
        jitop_module *m = NULL;
        double t0 = bench_now_ms();
        for (int k = 0; k < GETS; k++) {
            int s = jitop_op_get(r->mod, op_name(r), &op);
            if (s != JITOP_OK) {
                set_jitop_err(r, "jitop_op_get", s);
                goto out;
            }
        }
        double t1 = bench_now_ms();
        for (int k = 0; k < LOADS; k++) {
            int s = jitop_load(r->ctx, r->a.kernel, &src, 1, r->a.opts, r->a.nopts, &m);
            if (s != JITOP_OK) {
                set_jitop_err(r, "jitop_load", s);
                goto out;
            }
        }
        double t2 = bench_now_ms();
        if (m != r->mod || !op) {
            snprintf(r->err, sizeof r->err, "loading again gave a different module (or no op)");
            goto out;
        }
        if (i >= 0) {
            tg[i] = (t1 - t0) * 1e3 / GETS;
            tl[i] = (t2 - t1) * 1e3 / LOADS;
        }
    }
    rc = bench_emit("inproc", r->a.kernel, SYSTEM, "jitop_op_get again (per call)", "us", tg, (size_t)reps);
    if (rc == 0)
        rc = bench_emit_detail("inproc", r->a.kernel, SYSTEM,
                               "jitop_load again, same sources (per call; stat fast path)", "us", tl, (size_t)reps);
out:
    if (rc != 0)
        bench_emit_status("inproc", r->a.kernel, SYSTEM, "jitop_op_get / jitop_load again", "failed", r->err);
    free(tg);
    free(tl);
    return rc;
}

static int saxpy_buffers(jb_run *r, int n, CUdeviceptr *x, CUdeviceptr *y)
{
    float *h = malloc((size_t)n * sizeof *h);
    int rc = -1;
    if (!h)
        return -1;
    for (int i = 0; i < n; i++)
        h[i] = 1.0f;
    if (!bench_cu_check(&r->cu, r->cu.MemAlloc(x, (size_t)n * sizeof *h), "cuMemAlloc", r->err, sizeof r->err) &&
        !bench_cu_check(&r->cu, r->cu.MemAlloc(y, (size_t)n * sizeof *h), "cuMemAlloc", r->err, sizeof r->err) &&
        !bench_cu_check(&r->cu, r->cu.MemcpyHtoD(*x, h, (size_t)n * sizeof *h), "cuMemcpyHtoD", r->err, sizeof r->err)) {
        memset(h, 0, (size_t)n * sizeof *h);
        if (!bench_cu_check(&r->cu, r->cu.MemcpyHtoD(*y, h, (size_t)n * sizeof *h), "cuMemcpyHtoD", r->err,
                            sizeof r->err))
            rc = 0;
    }
    free(h);
    return rc;
}

/* The same source through NVRTC + cuModuleLoadData in this process, for a
 * raw cuLaunchKernel of the same kernel next to jitop_launch. */
static int raw_function(jb_run *r, CUfunction *fn)
{
    char dir[4096], inc[4200], *text = NULL;
    const char *opts[BENCH_MAX_OPTS + 1];
    const char *name = op_name(r);
    const char *arch = NULL;
    bench_nvrtc_out o = {0};
    CUmodule mod = NULL;
    int rc = -1;
    snprintf(dir, sizeof dir, "%s", r->a.src);
    snprintf(inc, sizeof inc, "-I%s", dirname(dir));
    opts[0] = inc;
    for (size_t i = 0; i < r->a.nopts; i++)
        opts[i + 1] = r->a.opts[i];
    int s = jitop_ctx_arch(r->ctx, &arch);
    if (s != JITOP_OK) {
        set_jitop_err(r, "jitop_ctx_arch", s);
        goto out;
    }
    if (bench_read_file(r->a.src, &text, NULL) != 0) {
        snprintf(r->err, sizeof r->err, "cannot read %s", r->a.src);
        goto out;
    }
    if (bench_nvrtc_compile(text, r->a.src, arch, opts, r->a.nopts + 1, &name, 1, &o, r->err, sizeof r->err) != 0)
        goto out;
    if (bench_cu_check(&r->cu, r->cu.ModuleLoadData(&mod, o.cubin), "cuModuleLoadData", r->err, sizeof r->err) ||
        bench_cu_check(&r->cu, r->cu.ModuleGetFunction(fn, mod, o.lowered[0]), "cuModuleGetFunction", r->err,
                       sizeof r->err))
        goto out;
    rc = 0;
out:
    free(text);
    bench_nvrtc_out_free(&o);
    return rc;
}

static int mode_launch(jb_run *r)
{
    enum { BATCH = 100 };
    int reps = r->a.reps ? r->a.reps : bench_reps(200, 50, 5);
    double *tc = calloc((size_t)reps, sizeof *tc);
    double *tu = calloc((size_t)reps, sizeof *tu);
    double *tr = calloc((size_t)reps, sizeof *tr);
    CUdeviceptr x = 0, y = 0;
    CUfunction raw = NULL;
    int n = 1, rc = -1;
    float a = 2.0f;
    void *args[4] = {&n, &a, &x, &y};
    const size_t sizes[4] = {sizeof n, sizeof a, sizeof x, sizeof y};
    const jitop_dim3 grid = {1, 1, 1}, block = {32, 1, 1};
    if (!tc || !tu || !tr || make_ctx(r, 0) != 0 || load_and_get(r) != 0 || saxpy_buffers(r, 1, &x, &y) != 0 ||
        raw_function(r, &raw) != 0)
        goto out;
    /* Interleaved batches (checked, unchecked, raw) so that drift of the
     * machine hits the three alike; a sync between batches is not timed. */
    for (int i = -2; i < reps; i++) {
        double t0 = bench_now_ms();
        for (int k = 0; k < BATCH; k++) {
            int s = jitop_launch(r->op, grid, block, 0, NULL, args, sizes, 4);
            if (s != JITOP_OK) {
                set_jitop_err(r, "jitop_launch", s);
                goto out;
            }
        }
        double t1 = bench_now_ms();
        if (bench_cu_check(&r->cu, r->cu.CtxSynchronize(), "cuCtxSynchronize", r->err, sizeof r->err))
            goto out;
        double t2 = bench_now_ms();
        for (int k = 0; k < BATCH; k++) {
            int s = jitop_launch(r->op, grid, block, 0, NULL, args, NULL, 4);
            if (s != JITOP_OK) {
                set_jitop_err(r, "jitop_launch", s);
                goto out;
            }
        }
        double t3 = bench_now_ms();
        if (bench_cu_check(&r->cu, r->cu.CtxSynchronize(), "cuCtxSynchronize", r->err, sizeof r->err))
            goto out;
        double t4 = bench_now_ms();
        for (int k = 0; k < BATCH; k++)
            if (bench_cu_check(&r->cu, r->cu.LaunchKernel(raw, 1, 1, 1, 32, 1, 1, 0, NULL, args, NULL),
                               "cuLaunchKernel", r->err, sizeof r->err))
                goto out;
        double t5 = bench_now_ms();
        if (bench_cu_check(&r->cu, r->cu.CtxSynchronize(), "cuCtxSynchronize", r->err, sizeof r->err))
            goto out;
        if (i >= 0) {
            tc[i] = (t1 - t0) * 1e3 / BATCH;
            tu[i] = (t3 - t2) * 1e3 / BATCH;
            tr[i] = (t5 - t4) * 1e3 / BATCH;
        }
    }
    rc = bench_emit("launch", r->a.kernel, SYSTEM, "jitop_launch host cost per launch, sizes checked (1 block of 32)",
                    "us", tc, (size_t)reps);
    if (rc == 0)
        rc = bench_emit_detail("launch", r->a.kernel, SYSTEM, "jitop_launch host cost per launch, no size check",
                               "us", tu, (size_t)reps);
    if (rc == 0)
        rc = bench_emit_detail("launch", r->a.kernel, SYSTEM,
                               "raw cuLaunchKernel of the same kernel in the same process (interleaved)", "us", tr,
                               (size_t)reps);
out:
    if (rc != 0)
        bench_emit_status("launch", r->a.kernel, SYSTEM, "jitop_launch", "failed", r->err);
    free(tc);
    free(tu);
    free(tr);
    return rc;
}

static int mode_edit(jb_run *r)
{
    int reps = r->a.reps ? r->a.reps : bench_reps(10, 3, 1);
    double *t = calloc((size_t)reps, sizeof *t);
    char *orig = NULL;
    CUdeviceptr x = 0, y = 0;
    int n = 256, rc = -1, semantic = 0;
    float a = 2.0f;
    void *args[4] = {&n, &a, &x, &y};
    const jitop_dim3 grid = {1, 1, 1}, block = {256, 1, 1};
    if (!jitop_module_reload) {
        snprintf(r->err, sizeof r->err, "jitop_module_reload is not in this build of libjitop");
        bench_emit_status("edit", r->a.kernel, SYSTEM, "edit to live with jitop_module_reload", "skipped", r->err);
        free(t);
        return 0;
    }
    if (!t || bench_read_file(r->a.src, &orig, NULL) != 0 || make_ctx(r, 0) != 0 || load_and_get(r) != 0 ||
        saxpy_buffers(r, n, &x, &y) != 0) {
        if (!r->err[0])
            snprintf(r->err, sizeof r->err, "cannot read %s or out of memory", r->a.src);
        goto out;
    }
    for (int i = 0; i < reps; i++) {
        int value = i + 1;
        float zero[256] = {0}, got = 0;
        char *edited = bench_edit_text(orig, value, &semantic);
        if (!edited || bench_write_file(r->a.src, edited, strlen(edited)) != 0) {
            free(edited);
            snprintf(r->err, sizeof r->err, "cannot write %s", r->a.src);
            goto out;
        }
        free(edited);
        if (bench_cu_check(&r->cu, r->cu.MemcpyHtoD(y, zero, sizeof zero), "cuMemcpyHtoD", r->err, sizeof r->err))
            goto out;
        uint64_t gen = jitop_module_generation(r->mod);
        double t0 = bench_now_ms();
        int s = jitop_module_reload(r->mod);
        if (s != JITOP_OK) {
            set_jitop_err(r, "jitop_module_reload", s);
            goto out;
        }
        if (semantic) {
            s = jitop_launch(r->op, grid, block, 0, NULL, args, NULL, 4);
            if (s != JITOP_OK) {
                set_jitop_err(r, "jitop_launch after the reload", s);
                goto out;
            }
            if (bench_cu_check(&r->cu, r->cu.MemcpyDtoH(&got, y, sizeof got), "cuMemcpyDtoH", r->err, sizeof r->err))
                goto out;
        }
        t[i] = bench_now_ms() - t0;
        if (jitop_module_generation(r->mod) == gen) {
            snprintf(r->err, sizeof r->err, "jitop_module_reload did not swap in new code (generation unchanged)");
            goto out;
        }
        if (semantic && got != 2.0f + (float)value) {
            snprintf(r->err, sizeof r->err, "after the reload y[0] = %g, expected %g: the new code did not run",
                     (double)got, 2.0 + value);
            goto out;
        }
    }
    rc = bench_emit("edit", r->a.kernel, SYSTEM,
                    semantic ? "edit saved -> jitop_module_reload + launch + sync (explicit reload, result checked)"
                             : "edit saved -> jitop_module_reload (explicit reload, comment edit)",
                    "ms", t, (size_t)reps);
out:
    if (rc != 0)
        bench_emit_status("edit", r->a.kernel, SYSTEM, "edit to live with jitop_module_reload", "failed", r->err);
    if (orig && bench_write_file(r->a.src, orig, strlen(orig)) != 0 && rc == 0) {
        fprintf(stderr, "jitop_bench: cannot restore %s\n", r->a.src);
        rc = -1;
    }
    free(orig);
    free(t);
    return rc;
}

/* Host cost of the shipped LLTM forward at the tutorial's size, the
 * counterpart of calling the torch extension's forward (bench/peers.py). */
static int mode_lltm_launch(jb_run *r)
{
    enum { BATCH = 20, B = 16, I = 32, S = 128 };
    int reps = r->a.reps ? r->a.reps : bench_reps(100, 30, 3);
    double *t = calloc((size_t)reps, sizeof *t);
    const size_t sizes[7] = {B * I, 3 * S * (S + I), 3 * S, B * S, B * S, B * S, B * S};
    CUdeviceptr buf[8] = {0};
    float *host = NULL;
    int rc = -1;
    const char *what = "jitop_lltm_forward host cost per call (B=16, I=32, S=128, fp32, saved for backward)";
    if (!jitop_lltm_forward || !jitop_lltm_saved_size) {
        bench_emit_status("launch", r->a.kernel, SYSTEM, what, "skipped", "jitop_lltm_forward is not in this build");
        free(t);
        return 0;
    }
    if (!t || make_ctx(r, 0) != 0)
        goto out;
    host = malloc(sizes[1] * sizeof *host);
    if (!host) {
        snprintf(r->err, sizeof r->err, "out of memory");
        goto out;
    }
    for (size_t i = 0; i < sizes[1]; i++)
        host[i] = (float)((int)(i * 2654435761u % 1000) - 500) / 5000.0f;
    for (int i = 0; i < 7; i++)
        if (bench_cu_check(&r->cu, r->cu.MemAlloc(&buf[i], sizes[i] * sizeof(float)), "cuMemAlloc", r->err,
                           sizeof r->err) ||
            bench_cu_check(&r->cu, r->cu.MemcpyHtoD(buf[i], host, sizes[i] * sizeof(float)), "cuMemcpyHtoD", r->err,
                           sizeof r->err))
            goto out;
    if (bench_cu_check(&r->cu, r->cu.MemAlloc(&buf[7], jitop_lltm_saved_size(JITOP_FLOAT32, B, I, S)), "cuMemAlloc",
                       r->err, sizeof r->err))
        goto out;
    /* The first call compiles and loads (through the cache): a warm-up. */
    for (int i = -2; i < reps; i++) {
        double t0 = bench_now_ms();
        for (int k = 0; k < BATCH; k++) {
            int st = jitop_lltm_forward(r->ctx, JITOP_FLOAT32, B, I, S, (void *)buf[0], (void *)buf[1],
                                        (void *)buf[2], (void *)buf[3], (void *)buf[4], (void *)buf[5],
                                        (void *)buf[6], (void *)buf[7], NULL);
            if (st != JITOP_OK) {
                set_jitop_err(r, "jitop_lltm_forward", st);
                goto out;
            }
        }
        double us = (bench_now_ms() - t0) * 1e3 / BATCH;
        if (bench_cu_check(&r->cu, r->cu.CtxSynchronize(), "cuCtxSynchronize", r->err, sizeof r->err))
            goto out;
        if (i >= 0)
            t[i] = us;
    }
    rc = bench_emit("launch", r->a.kernel, SYSTEM, what, "us", t, (size_t)reps);
out:
    if (rc != 0)
        bench_emit_status("launch", r->a.kernel, SYSTEM, what, "failed", r->err);
    free(host);
    free(t);
    return rc;
}

int main(int argc, char **argv)
{
    static jb_run r;
    int rc = 1;
    if (bench_args_parse(argc, argv, USAGE, &r.a) != 0)
        return 2;
    const char *m = r.a.mode;
    if (strcmp(m, "compile") && strcmp(m, "load") && strcmp(m, "inproc") && strcmp(m, "launch") && strcmp(m, "edit") &&
        strcmp(m, "lltm-launch")) {
        fprintf(stderr, "unknown mode '%s'\nusage: %s\n", m, USAGE);
        return 2;
    }
    if (strcmp(m, "compile") == 0) {
        rc = mode_compile(&r);
    } else {
        /* The driver is started here, before jitop, so that cuInit and the
         * context are a figure of their own and not inside jitop's. */
        const char *area = strcmp(m, "load") == 0 ? (r.a.area ? r.a.area : "cold")
                           : strcmp(m, "lltm-launch") == 0 ? "launch" : m;
        double t0 = bench_now_ms();
        if (bench_cu_open(&r.cu, r.err, sizeof r.err) != 0 || bench_cu_start(&r.cu, 0, r.err, sizeof r.err) != 0) {
            bench_emit_status(area, r.a.kernel, SYSTEM, m, "skipped", r.err);
            return 0;
        }
        double dt = bench_now_ms() - t0;
        if (bench_emit("startup", "-", "cuda-driver", "dlopen libcuda + cuInit + primary context retain + set current",
                       "ms", &dt, 1) != 0)
            return 1;
        if (strcmp(m, "load") == 0)
            rc = mode_load(&r);
        else if (strcmp(m, "inproc") == 0)
            rc = mode_inproc(&r);
        else if (strcmp(m, "launch") == 0)
            rc = mode_launch(&r);
        else if (strcmp(m, "lltm-launch") == 0)
            rc = mode_lltm_launch(&r);
        else
            rc = mode_edit(&r);
    }
    if (rc != 0)
        fprintf(stderr, "jitop_bench %s: %s\n", m, r.err);
    jitop_ctx_destroy(r.ctx);
    return rc == 0 ? 0 : 1;
}
