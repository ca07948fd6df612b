/*
 * One program per (source, options, arch), measured side by side with raw
 * NVRTC from C (issue 21, part 1). Figures, each the median of reps fresh
 * runs in this process (the driver started beforehand, as an application
 * has it; every compile of the source's new bytes is NVRTC's, no cache hit):
 *   instance-cold     a template instance whose source changed since the
 *                     last run (its instance list known): jitop_load +
 *                     jitop_op_get, vs one raw NVRTC program with that name
 *                     expression + cuModuleLoadData + cuModuleGetFunction
 *   instance-first    the same in an empty cache (nothing known: the source
 *                     is compiled at load, the instance on its own)
 *   instance-declared the same in an empty cache, the instance declared at
 *                     load (-instance=NAME): one program
 *   layernorm-cold    a cold jitop_layernorm_forward + backward (float32,
 *                     rows of 1024) in an empty cache, the shipped op
 *                     declaring its instances at load, vs one raw program
 *                     of kernels/layernorm.cu with the instances it got
 *   reload-kN         edit to live with N = 1, 4, 8 instances in use:
 *                     jitop_module_reload, vs one raw program with all N
 *                     name expressions + load + N lookups
 *   layernorm-step    kernels/layernorm.cu with the instances a training
 *                     step asks (forward and backward, float32 and bfloat16,
 *                     rows of 1024): reload vs raw with the same names
 * Fairness: NVRTC's first compile of a new kind of program in a process
 * costs several times a later one (about ten times for kernels/layernorm.cu,
 * bench/fold_NOTES.md: its code paths and the headers' parse paths are paged
 * in and set up then), and whichever side runs first in a repetition pays it.
 * So each figure starts with one uncounted repetition that runs both
 * sides, and the counted ones alternate which side goes first (even
 * repetitions jitop, odd ones raw): neither side is timed on NVRTC's first
 * touch, and what one compile leaves warm for the next favours both sides
 * equally.
 * Without a GPU (or with --compile-only) the driver parts drop out: jitop's
 * side is jitop_build of the instance / the source with its list folded in
 * (what the load and the reload compile), raw's the NVRTC compile alone.
 *
 *   fold_bench [--compile-only] [--reps N] [--arch ARCH]
 *
 * Prints bench_emit JSON lines (bench/README.md), then a summary table on
 * stderr with the ratios the goals are stated in.
 */
#include "bench_cuda.h"
#include "bench_nvrtc.h"
#include "bench_util.h"
#include "jitop.h"
#include "jitop_ops.h"
#include "build/build.h"
#include "compile/compile.h"
#include "load/load.h"

#include <limits.h>
#include <stdint.h>
#include <sys/stat.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define AREA "fold"

/* bench/fold_bench.sh passes the repository's kernels/; bench/run.sh runs
 * from the repository root. */
#ifndef JITOP_SOURCE_KERNEL_DIR
#define JITOP_SOURCE_KERNEL_DIR "kernels"
#endif

typedef struct run {
    int gpu;
    int reps;
    char arch[32];
    char dir[PATH_MAX]; /* scratch: sources and caches */
    bench_cu cu;
    int edits;          /* a counter that makes each edit new bytes */
} run;

static void die(const char *what, const char *why)
{
    fprintf(stderr, "fold_bench: %s: %s\n", what, why);
    exit(1);
}

static void check(int st, const char *what)
{
    if (st != JITOP_OK) {
        fprintf(stderr, "fold_bench: %s: %s: %s\n", what, jitop_strerror(st),
                jitop_errmsg(NULL));
        exit(1);
    }
}

/* The templated test source, made new bytes by an edit counter. */
static char *test_source(int edit)
{
    char *t = NULL;
    if (asprintf(&t,
                 "// edit %d\n"
                 "template <typename T, int V>\n"
                 "__global__ void axpy(T a, const T *x, T *y, int n) {\n"
                 "    int i = (blockIdx.x * blockDim.x + threadIdx.x) * V;\n"
                 "    for (int v = 0; v < V; v++)\n"
                 "        if (i + v < n) y[i + v] = a * x[i + v] + y[i + v];\n"
                 "}\n",
                 edit) < 0)
        die("asprintf", "out of memory");
    return t;
}

static const char *const axpy_names[8] = {
    "axpy<float, 1>",  "axpy<float, 2>",  "axpy<float, 4>",  "axpy<float, 8>",
    "axpy<double, 1>", "axpy<double, 2>", "axpy<double, 4>", "axpy<double, 8>",
};

static char *path_in(const run *r, const char *name)
{
    char *p = NULL;
    if (asprintf(&p, "%s/%s", r->dir, name) < 0)
        die("asprintf", "out of memory");
    return p;
}

static jitop_ctx *make_ctx(const run *r, const char *cache, const char *kernel_dir)
{
    jitop_config cfg;
    jitop_config_init(&cfg);
    cfg.cache_dir = cache;
    cfg.compile_only = !r->gpu;
    cfg.arch = r->gpu ? NULL : r->arch;
    if (kernel_dir)
        cfg.kernel_dir = kernel_dir;
    jitop_ctx *ctx = NULL;
    check(jitop_ctx_create(&cfg, &ctx), "jitop_ctx_create");
    if (r->gpu) {
        /* The driver started (cuInit, context) before anything is timed. */
        jitop_module *m = NULL;
        check(jitop_load_inline(ctx, "warmup", "extern \"C\" __global__ void w() {}\n", NULL, 0,
                                &m),
              "warm-up load");
    }
    return ctx;
}

/* Raw: one NVRTC program of text with names, and on a GPU the module
 * loaded and each name's function looked up. */
static double raw_once(run *r, const char *text, const char *const *names, size_t n)
{
    bench_nvrtc_out out;
    char err[512];
    double t0 = bench_now_ms();
    if (bench_nvrtc_compile(text, "src.cu", r->arch, NULL, 0, names, n, &out, err, sizeof err))
        die("raw NVRTC", err);
    if (r->gpu) {
        CUmodule mod;
        CUfunction fn;
        if (bench_cu_check(&r->cu, r->cu.ModuleLoadData(&mod, out.cubin), "cuModuleLoadData",
                           err, sizeof err))
            die("raw load", err);
        for (size_t i = 0; i < n; i++)
            if (bench_cu_check(&r->cu, r->cu.ModuleGetFunction(&fn, mod, out.lowered[i]),
                               "cuModuleGetFunction", err, sizeof err))
                die("raw lookup", err);
        double t = bench_now_ms() - t0;
        (void)r->cu.ModuleUnload(mod);
        bench_nvrtc_out_free(&out);
        return t;
    }
    double t = bench_now_ms() - t0;
    bench_nvrtc_out_free(&out);
    return t;
}

static void write_text(const char *path, const char *text)
{
    if (bench_write_file(path, text, strlen(text)) != 0)
        die(path, "cannot write");
}

typedef struct pair {
    double jitop, raw; /* medians */
} pair;

static pair emit_pair(const char *kernel, const char *what, double *j, double *w, int n)
{
    bench_stats sj, sw;
    bench_emit(AREA, kernel, "jitop", what, "ms", j, (size_t)n);
    bench_emit(AREA, kernel, "nvrtc", what, "ms", w, (size_t)n);
    bench_stats_of(j, (size_t)n, &sj);
    bench_stats_of(w, (size_t)n, &sw);
    return (pair){sj.median, sw.median};
}

/* Which side a repetition runs first (the uncounted warm-up, i < 0, runs
 * jitop first: it must, where raw compiles the names jitop's run finds). */
static bool raw_first(int i)
{
    return i >= 0 && i % 2 == 1;
}

/* A template instance of a source that changed since the last run: the
 * manifest knows the instance, so the load compiles it in. first: an empty
 * cache each time instead; declared: an empty cache, the instance declared
 * at load (-instance=). */
static pair instance_cold(run *r, bool first, bool declared)
{
    double *j = calloc((size_t)r->reps, sizeof *j), *w = calloc((size_t)r->reps, sizeof *w);
    const char *tag = declared ? "declared" : first ? "first" : "cold";
    char srcname[32];
    snprintf(srcname, sizeof srcname, "%s.cu", tag);
    char *src = path_in(r, srcname);
    const char *name = axpy_names[2];
    char decl[64];
    snprintf(decl, sizeof decl, "-instance=%s", name);
    const char *opts[] = {decl};
    first = first || declared;
    if (!j || !w)
        die("calloc", "out of memory");
    /* -1: the run that makes the list known, and the warm-up of both sides */
    for (int i = -1; i < r->reps; i++) {
        char cachename[64];
        snprintf(cachename, sizeof cachename, "cache-%s-%d", tag, first ? i + 1 : 0);
        char *cache = path_in(r, cachename);
        char *text = test_source(++r->edits);
        write_text(src, text);
        double traw = raw_first(i) ? raw_once(r, text, &name, 1) : 0;
        jitop_ctx *ctx = make_ctx(r, cache, NULL);
        double t0 = bench_now_ms();
        if (r->gpu) {
            jitop_module *m = NULL;
            jitop_op *op = NULL;
            const char *srcs[] = {src};
            check(jitop_load(ctx, "cold", srcs, 1, declared ? opts : NULL, declared ? 1 : 0, &m),
                  "jitop_load");
            check(jitop_op_get(m, name, &op), "jitop_op_get");
        } else if (declared) {
            /* What the load compiles: the source with the name folded in. */
            jitop_build_result res;
            jitop__strv want = {0};
            check(jitop__strv_push(&want, name), "push");
            check(jitop__build_fold(ctx, src, r->arch, NULL, 0, &want, &res), "fold");
            jitop__strv_free(&want);
        } else {
            /* What a load compiles: the source with its list folded in (or,
             * first, the source alone and then the instance). */
            jitop_build_result res;
            const char *one[] = {name};
            if (first || i < 0) {
                check(jitop_build(ctx, src, r->arch, NULL, 0, NULL, 0, &res), "jitop_build");
                check(jitop_build(ctx, src, r->arch, NULL, 0, one, 1, &res), "jitop_build");
            } else {
                check(jitop_build(ctx, src, r->arch, NULL, 0, NULL, 0, &res), "jitop_build");
            }
            /* In compile-only mode nothing joins the list (no module):
             * the one run before the timed ones folds it by hand. */
            if (!first && i < 0) {
                jitop__strv want = {0};
                check(jitop__strv_push(&want, name), "push");
                check(jitop__build_fold(ctx, src, r->arch, NULL, 0, &want, &res), "fold");
                jitop__strv_free(&want);
            }
        }
        double t = bench_now_ms() - t0;
        jitop_ctx_destroy(ctx);
        if (!raw_first(i))
            traw = raw_once(r, text, &name, 1); /* the warm-up's too: uncounted */
        if (i >= 0) {
            j[i] = t;
            w[i] = traw;
        }
        free(text);
        free(cache);
    }
    char what[32];
    snprintf(what, sizeof what, "instance-%s", tag);
    pair p = emit_pair("axpy", what, j, w, r->reps);
    free(src);
    free(j);
    free(w);
    return p;
}

/* Edit to live with k instances in use. */
static pair reload_k(run *r, int k)
{
    double *j = calloc((size_t)r->reps, sizeof *j), *w = calloc((size_t)r->reps, sizeof *w);
    char srcname[32], cachename[32], what[32];
    snprintf(srcname, sizeof srcname, "reload%d.cu", k);
    snprintf(cachename, sizeof cachename, "cache-reload%d", k);
    snprintf(what, sizeof what, "reload-k%d", k);
    char *src = path_in(r, srcname), *cache = path_in(r, cachename);
    char *text = test_source(++r->edits);
    if (!j || !w)
        die("calloc", "out of memory");
    write_text(src, text);
    free(text);
    jitop_ctx *ctx = make_ctx(r, cache, NULL);
    jitop_module *m = NULL;
    jitop__strv want = {0};
    for (int i = 0; i < k; i++)
        check(jitop__strv_push(&want, axpy_names[i]), "push");
    if (r->gpu) {
        const char *srcs[] = {src};
        check(jitop_load(ctx, "reload", srcs, 1, NULL, 0, &m), "jitop_load");
        for (int i = 0; i < k; i++) {
            jitop_op *op = NULL;
            check(jitop_op_get(m, axpy_names[i], &op), "jitop_op_get");
        }
    }
    for (int i = -1; i < r->reps; i++) { /* -1: the warm-up, uncounted */
        text = test_source(++r->edits);
        write_text(src, text);
        double traw = raw_first(i) ? raw_once(r, text, axpy_names, (size_t)k) : 0;
        double t0 = bench_now_ms();
        if (r->gpu) {
            check(jitop_module_reload(m), "jitop_module_reload");
        } else {
            jitop_build_result res;
            check(jitop__build_fold(ctx, src, r->arch, NULL, 0, &want, &res), "fold");
        }
        double t = bench_now_ms() - t0;
        if (!raw_first(i))
            traw = raw_once(r, text, axpy_names, (size_t)k);
        if (i >= 0) {
            j[i] = t;
            w[i] = traw;
        }
        free(text);
    }
    jitop_ctx_destroy(ctx);
    jitop__strv_free(&want);
    pair p = emit_pair("axpy", what, j, w, r->reps);
    free(src);
    free(cache);
    free(j);
    free(w);
    return p;
}

/* Raw: one NVRTC program of a copy of kernels/layernorm.cu (text, named
 * src) with names, -I its directory kdir as jitop passes the source's
 * directory, then -I each of the toolkit's include folders, as jitop and
 * CuPy pass them: without them NVRTC has no <cuda_fp16.h> or
 * <cuda_bf16.h>, and layernorm.cu's __has_include test leaves out both
 * headers and its 16-bit kernels, a smaller program than the one jitop
 * compiles, and so a faster raw side (bench/fold_NOTES.md);
 * on a GPU the module loaded and each name looked up. */
static double raw_layernorm(run *r, const char *text, const char *src, const char *kdir,
                            const jitop__strv *names)
{
    bench_nvrtc_out out;
    char err[512];
    jitop__strv opts = {0}, tk = {0};
    check(jitop__strv_pushf(&opts, "-I%s", kdir), "push");
    check(jitop__toolkit_include_dirs(&tk), "the toolkit's include folders");
    for (size_t i = 0; i < tk.n; i++)
        check(jitop__strv_pushf(&opts, "-I%s", tk.v[i]), "push");
    jitop__strv_free(&tk);
    double t1 = bench_now_ms(), t;
    if (bench_nvrtc_compile(text, src, r->arch, (const char *const *)opts.v, opts.n,
                            (const char *const *)names->v, names->n, &out, err, sizeof err))
        die("raw NVRTC of layernorm.cu", err);
    jitop__strv_free(&opts);
    if (r->gpu) {
        CUmodule mod;
        CUfunction fn;
        if (bench_cu_check(&r->cu, r->cu.ModuleLoadData(&mod, out.cubin), "cuModuleLoadData",
                           err, sizeof err))
            die("raw load", err);
        for (size_t k = 0; k < names->n; k++)
            if (bench_cu_check(&r->cu, r->cu.ModuleGetFunction(&fn, mod, out.lowered[k]),
                               "cuModuleGetFunction", err, sizeof err))
                die("raw lookup", err);
        t = bench_now_ms() - t1;
        (void)r->cu.ModuleUnload(mod);
    } else {
        t = bench_now_ms() - t1;
    }
    bench_nvrtc_out_free(&out);
    return t;
}

/* The names of src's binary as its manifest in ctx's cache lists them. */
static void manifest_names(jitop_ctx *ctx, const run *r, const char *src, jitop__strv *names)
{
    jitop__unit u;
    check(jitop__unit_init(&u, src, NULL, NULL, 0, NULL, 0, r->arch), "unit");
    char id[33], key[33];
    jitop__deps deps;
    jitop__instlist l;
    bool found = false;
    jitop__manifest_id(&u, id);
    check(jitop__manifest_get_lists(ctx->cache, id, &deps, key, &l, &found), "manifest");
    for (size_t k = 0; k < l.built.n; k++)
        check(jitop__strv_push(names, l.built.v[k]), "push");
    jitop__instlist_free(&l);
    jitop__deps_free(&deps);
    jitop__unit_free(&u);
}

static bool same_names(const jitop__strv *a, const jitop__strv *b)
{
    if (a->n != b->n)
        return false;
    for (size_t i = 0; i < a->n; i++)
        if (strcmp(a->v[i], b->v[i]) != 0)
            return false;
    return true;
}

/* A cold jitop_layernorm_forward + backward (float32, rows of 1024) in an
 * empty cache: the op declares the step's instances at load, so the source
 * is one program. Raw: one NVRTC program of kernels/layernorm.cu with the
 * names the module got (in the warm-up repetition; every later one must get
 * the same). Compile-only: what the op's load compiles there
 * (jitop_layernorm_prewarm folds both affine variants: more names than a
 * call's, raw compiles the same ones). */
static pair layernorm_cold(run *r, size_t *nnames)
{
    double *j = calloc((size_t)r->reps, sizeof *j), *w = calloc((size_t)r->reps, sizeof *w);
    char *kdir = path_in(r, "kernels-cold"), *src = path_in(r, "kernels-cold/layernorm.cu");
    char *orig = NULL;
    size_t len = 0;
    enum { ROWS = 64, COLS = 1024 };
    if (!j || !w)
        die("calloc", "out of memory");
    if (mkdir(kdir, 0700) != 0)
        die(kdir, "cannot create");
    if (bench_read_file(JITOP_SOURCE_KERNEL_DIR "/layernorm.cu", &orig, &len) != 0)
        die(JITOP_SOURCE_KERNEL_DIR "/layernorm.cu", "cannot read");
    CUdeviceptr d[8] = {0};
    char err[512];
    for (int i = 0; r->gpu && i < 8; i++)
        if (bench_cu_check(&r->cu, r->cu.MemAlloc(&d[i], (size_t)ROWS * COLS * 4), "cuMemAlloc",
                           err, sizeof err))
            die("layernorm buffers", err);
    jitop__strv names = {0}; /* what the warm-up's module got */
    for (int i = -1; i < r->reps; i++) { /* -1: the warm-up, uncounted */
        char cachename[64], *text = NULL;
        snprintf(cachename, sizeof cachename, "cache-lncold-%d", i + 1);
        char *cache = path_in(r, cachename);
        if (asprintf(&text, "%s\n// bench edit %d\n", orig, ++r->edits) < 0)
            die("asprintf", "out of memory");
        write_text(src, text);
        double traw = raw_first(i) ? raw_layernorm(r, text, src, kdir, &names) : 0;
        jitop_ctx *ctx = make_ctx(r, cache, kdir);
        double t0 = bench_now_ms();
        if (r->gpu) {
            void *p[8];
            for (int k = 0; k < 8; k++)
                p[k] = (void *)(uintptr_t)d[k];
            check(jitop_layernorm_forward(ctx, JITOP_FLOAT32, ROWS, COLS, 1e-5f, p[0], p[1], p[2],
                                          p[3], p[6], p[7], NULL),
                  "jitop_layernorm_forward");
            check(jitop_layernorm_backward(ctx, JITOP_FLOAT32, ROWS, COLS, p[0], p[1], p[6], p[7],
                                           p[2], p[3], p[4], p[5], NULL),
                  "jitop_layernorm_backward");
        } else {
            check(jitop_layernorm_prewarm(ctx, r->arch, JITOP_FLOAT32, COLS), "prewarm");
        }
        double t = bench_now_ms() - t0;
        jitop__strv got = {0};
        manifest_names(ctx, r, src, &got);
        jitop_ctx_destroy(ctx);
        if (i < 0) {
            names = got;
            memset(&got, 0, sizeof got);
        } else if (!same_names(&got, &names)) {
            die("layernorm-cold", "the op's module got other names than in the warm-up");
        }
        jitop__strv_free(&got);
        if (!raw_first(i))
            traw = raw_layernorm(r, text, src, kdir, &names);
        if (i >= 0) {
            j[i] = t;
            w[i] = traw;
        }
        free(text);
        free(cache);
    }
    *nnames = names.n;
    jitop__strv_free(&names);
    for (int i = 0; r->gpu && i < 8; i++)
        (void)r->cu.MemFree(d[i]);
    pair p = emit_pair("layernorm", "layernorm-cold", j, w, r->reps);
    free(orig);
    free(src);
    free(kdir);
    free(j);
    free(w);
    return p;
}

/* kernels/layernorm.cu (a copy, edited) with a training step's instances. */
static pair layernorm_step(run *r, size_t *nnames)
{
    double *j = calloc((size_t)r->reps, sizeof *j), *w = calloc((size_t)r->reps, sizeof *w);
    char *kdir = path_in(r, "kernels"), *cache = path_in(r, "cache-layernorm");
    char *src = path_in(r, "kernels/layernorm.cu"), *orig = NULL;
    size_t len = 0;
    if (!j || !w)
        die("calloc", "out of memory");
    if (mkdir(kdir, 0700) != 0)
        die(kdir, "cannot create");
    if (bench_read_file(JITOP_SOURCE_KERNEL_DIR "/layernorm.cu", &orig, &len) != 0)
        die(JITOP_SOURCE_KERNEL_DIR "/layernorm.cu", "cannot read");
    write_text(src, orig);
    jitop_ctx *ctx = make_ctx(r, cache, kdir);
    jitop_module *m = NULL;
    const jitop_dtype dts[2] = {JITOP_FLOAT32, JITOP_BFLOAT16};
    jitop__strv names = {0};
    if (r->gpu) {
        /* The step: forward and backward in both dtypes asks the op's
         * instances of the module; the same module then reloads. */
        enum { ROWS = 64, COLS = 1024 };
        CUdeviceptr d[8];
        char err[256];
        for (int i = 0; i < 8; i++)
            if (bench_cu_check(&r->cu, r->cu.MemAlloc(&d[i], (size_t)ROWS * COLS * 4),
                               "cuMemAlloc", err, sizeof err))
                die("layernorm buffers", err);
        for (int t = 0; t < 2; t++) {
            void *p[8];
            for (int i = 0; i < 8; i++)
                p[i] = (void *)(uintptr_t)d[i];
            check(jitop_layernorm_forward(ctx, dts[t], ROWS, COLS, 1e-5f, p[0], p[1], p[2], p[3],
                                          p[6], p[7], NULL),
                  "jitop_layernorm_forward");
            check(jitop_layernorm_backward(ctx, dts[t], ROWS, COLS, p[0], p[1], p[6], p[7], p[2],
                                           p[3], p[4], p[5], NULL),
                  "jitop_layernorm_backward");
        }
        const char *srcs[] = {src};
        check(jitop_load(ctx, "layernorm", srcs, 1, NULL, 0, &m), "jitop_load (the op's module)");
        for (size_t i = 0; i < m->ninstances; i++)
            check(jitop__strv_push(&names, m->instances[i]->unit.names.v[0]), "push");
    } else {
        /* What the ops ask on a GPU of arch, as their prewarms know it. */
        for (int t = 0; t < 2; t++)
            check(jitop_layernorm_prewarm(ctx, r->arch, dts[t], 1024), "prewarm");
        jitop_build_result res;
        check(jitop_build(ctx, src, r->arch, NULL, 0, NULL, 0, &res), "jitop_build");
        manifest_names(ctx, r, src, &names);
    }
    *nnames = names.n;
    for (int i = -1; i < r->reps; i++) { /* -1: the warm-up, uncounted */
        char *text = NULL;
        if (asprintf(&text, "%s\n// bench edit %d\n", orig, ++r->edits) < 0)
            die("asprintf", "out of memory");
        write_text(src, text);
        double traw = raw_first(i) ? raw_layernorm(r, text, src, kdir, &names) : 0;
        double t0 = bench_now_ms();
        if (r->gpu) {
            check(jitop_module_reload(m), "jitop_module_reload");
        } else {
            jitop_build_result res;
            check(jitop__build_fold(ctx, src, r->arch, NULL, 0, &names, &res), "fold");
        }
        double t = bench_now_ms() - t0;
        if (!raw_first(i))
            traw = raw_layernorm(r, text, src, kdir, &names);
        if (i >= 0) {
            j[i] = t;
            w[i] = traw;
        }
        free(text);
    }
    jitop_ctx_destroy(ctx);
    pair p = emit_pair("layernorm", "layernorm-step", j, w, r->reps);
    jitop__strv_free(&names);
    free(orig);
    free(src);
    free(kdir);
    free(cache);
    free(j);
    free(w);
    return p;
}

static void row(const char *what, pair p, double slack)
{
    double goal = 1.1 * p.raw + slack;
    fprintf(stderr, "  %-16s jitop %8.1f ms   raw %8.1f ms   %.2fx   goal <= %.1f ms: %s\n", what,
            p.jitop, p.raw, p.raw > 0 ? p.jitop / p.raw : 0.0, goal,
            p.jitop <= goal ? "met" : "NOT met");
}

int main(int argc, char **argv)
{
    run r = {0};
    r.reps = bench_reps(9, 5, 2);
    const char *arch = NULL;
    int compile_only = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--compile-only") == 0)
            compile_only = 1;
        else if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc)
            r.reps = atoi(argv[++i]);
        else if (strcmp(argv[i], "--arch") == 0 && i + 1 < argc)
            arch = argv[++i];
        else {
            fprintf(stderr, "usage: fold_bench [--compile-only] [--reps N] [--arch ARCH]\n");
            return 2;
        }
    }
    if (r.reps < 1)
        die("--reps", "must be at least 1");
    char err[256];
    r.gpu = !compile_only && bench_cu_open(&r.cu, err, sizeof err) == 0 &&
            bench_cu_start(&r.cu, 0, err, sizeof err) == 0;
    if (r.gpu && bench_cu_arch(&r.cu, r.arch, sizeof r.arch, err, sizeof err) != 0)
        die("arch", err);
    if (!r.gpu)
        snprintf(r.arch, sizeof r.arch, "%s", arch ? arch : "sm_90");
    snprintf(r.dir, sizeof r.dir, "/tmp/jitop-fold-bench-XXXXXX");
    if (!mkdtemp(r.dir))
        die("mkdtemp", "cannot create a scratch directory");
    bench_emit_env("fold_mode", r.gpu ? "gpu" : "compile-only");
    bench_emit_env("fold_arch", r.arch);
    /* NVRTC's first call in a process costs ~100 ms more: paid here. */
    (void)raw_once(&r, "__global__ void f() {}\n", NULL, 0);

    pair cold = instance_cold(&r, false, false);
    pair first = instance_cold(&r, true, false);
    pair declared = instance_cold(&r, false, true);
    size_t nlc = 0;
    pair lc = layernorm_cold(&r, &nlc);
    pair k1 = reload_k(&r, 1), k4 = reload_k(&r, 4), k8 = reload_k(&r, 8);
    size_t nln = 0;
    pair ln = layernorm_step(&r, &nln);

    fprintf(stderr, "fold_bench (%s, %s, medians of %d):\n",
            r.gpu ? "GPU: compile + load + lookups" : "compile-only: NVRTC side only", r.arch,
            r.reps);
    row("instance-cold", cold, 0);
    row("instance-first", first, 0);
    row("instance-declared", declared, 0);
    row("reload-k1", k1, 5);
    row("reload-k4", k4, 5);
    row("reload-k8", k8, 5);
    char what[32];
    snprintf(what, sizeof what, "layernorm(%zu)", nln);
    row(what, ln, 5);
    snprintf(what, sizeof what, "ln-cold(%zu)", nlc);
    row(what, lc, 0);
    fprintf(stderr, "(instance-first: an empty cache, nothing known of the source: its compile at "
                    "load, then the instance's own; instance-declared: the same with "
                    "-instance=NAME at load, one program; ln-cold: a cold layernorm forward + "
                    "backward, empty cache)\n");
    char cmd[PATH_MAX + 16];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", r.dir);
    if (system(cmd) != 0)
        fprintf(stderr, "fold_bench: could not remove %s\n", r.dir);
    return 0;
}
