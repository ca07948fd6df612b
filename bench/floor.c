/*
 * The floor: a kernel source through NVRTC and the CUDA driver called
 * directly from C, with no cache and no bookkeeping. Every jitop figure is
 * compared with this one (bench/README.md).
 *
 *   floor arch                      print the arch of GPU 0 ("sm_90"), exit 2 without a driver
 *   floor compile ...               NVRTC to cubin: first call in this process, then --reps repeats
 *   floor load --area cold|warm ... cuInit+context, then read + compile + load + get; with
 *                                   --cubin FILE: cold writes the cubin there, warm also times
 *                                   reading it back + load + get ("floor-cubin")
 *   floor inproc ...                cuModuleGetFunction again on a loaded module
 *   floor launch ...                host cost of cuLaunchKernel (the saxpy kernel)
 *   floor edit ...                  edit the source, then read + compile + load + get + launch + sync
 *
 * Output: one JSON line per figure (bench_util.h).
 */
#include "bench_args.h"
#include "bench_cuda.h"
#include "bench_nvrtc.h"
#include "bench_util.h"

#include <libgen.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define USAGE "floor arch | floor compile|load|inproc|launch|edit --src FILE --kernel LABEL " \
              "[--op NAME] [--arch ARCH] [--opt=OPTION]... [--reps N] [--area cold|warm] [--cubin FILE]"
#define SYSTEM "floor"

typedef struct floor_run {
    bench_args a;
    bench_cu cu;
    int have_cu;
    char arch[32];
    char incopt[4200];
    const char *opts[BENCH_MAX_OPTS + 1];
    size_t nopts;
    char err[4096];
} floor_run;

/* The options jitop uses too: the source's directory on the include path,
 * then the caller's. */
static void build_opts(floor_run *r)
{
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", r->a.src);
    snprintf(r->incopt, sizeof r->incopt, "-I%s", dirname(dir));
    r->opts[0] = r->incopt;
    for (size_t i = 0; i < r->a.nopts; i++)
        r->opts[i + 1] = r->a.opts[i];
    r->nopts = r->a.nopts + 1;
}

static const char *op_name(const floor_run *r)
{
    return r->a.op ? r->a.op : r->a.kernel;
}

static int compile_file(floor_run *r, bench_nvrtc_out *out)
{
    char *text = NULL;
    const char *name = op_name(r);
    int rc;
    if (bench_read_file(r->a.src, &text, NULL) != 0) {
        snprintf(r->err, sizeof r->err, "cannot read %s", r->a.src);
        return -1;
    }
    rc = bench_nvrtc_compile(text, r->a.src, r->arch, r->opts, r->nopts, &name, 1, out,
                             r->err, sizeof r->err);
    free(text);
    return rc;
}

static int mode_compile(floor_run *r)
{
    int reps = r->a.reps ? r->a.reps : bench_reps(10, 3, 1);
    double first = 0;
    double *t = calloc((size_t)reps, sizeof *t);
    int rc = -1;
    if (!t)
        goto out;
    for (int i = 0; i <= reps; i++) {
        bench_nvrtc_out o;
        double t0 = bench_now_ms();
        if (compile_file(r, &o) != 0)
            goto out;
        double dt = bench_now_ms() - t0;
        bench_nvrtc_out_free(&o);
        if (i == 0)
            first = dt;
        else
            t[i - 1] = dt;
    }
    char version[32];
    bench_nvrtc_version(version, sizeof version);
    bench_emit_env("NVRTC", version);
    /* The first NVRTC call in a process pays for loading NVRTC's builtins;
     * a cold start of any runtime pays it, so both figures are reported. */
    rc = bench_emit("compile", r->a.kernel, SYSTEM, "NVRTC compile to cubin, first call in a new process",
                    "ms", &first, 1);
    if (rc == 0)
        rc = bench_emit_detail("compile", r->a.kernel, SYSTEM, "NVRTC compile to cubin, repeated in the same process",
                               "ms", t, (size_t)reps);
out:
    if (rc != 0 && r->err[0])
        bench_emit_status("compile", r->a.kernel, SYSTEM, "NVRTC compile to cubin", "failed", r->err);
    free(t);
    return rc;
}

/* The cubin, and beside it (PATH.lowered) the kernel's lowered name, which
 * the warm run needs before it compiles anything. */
static int write_cubin(const char *path, const bench_nvrtc_out *o, char *err, size_t errcap)
{
    char name_path[4096];
    snprintf(name_path, sizeof name_path, "%s.lowered", path);
    if (bench_write_file(path, o->cubin, o->cubin_size) != 0 ||
        bench_write_file(name_path, o->lowered[0], strlen(o->lowered[0]) + 1) != 0) {
        snprintf(err, errcap, "cannot write %.2000s or its .lowered file", path);
        return -1;
    }
    return 0;
}

static int load_get(floor_run *r, const void *image, const char *lowered, CUmodule *mod, CUfunction *fn)
{
    if (bench_cu_check(&r->cu, r->cu.ModuleLoadData(mod, image), "cuModuleLoadData", r->err, sizeof r->err))
        return -1;
    if (bench_cu_check(&r->cu, r->cu.ModuleGetFunction(fn, *mod, lowered), "cuModuleGetFunction", r->err, sizeof r->err))
        return -1;
    return 0;
}

/* Read a cubin file, load it, get its kernel: the least a program that
 * keeps its own cubins pays. Runs first in its process, so that its load is
 * the process's first module load, as jitop's warm load is (a second load
 * of the same image finds the driver warm and costs less). */
static int cubin_floor(floor_run *r, const char *area)
{
    char name_path[4096], *lowered = NULL, *image = NULL;
    CUmodule mod = NULL;
    CUfunction fn = NULL;
    int rc = -1;
    snprintf(name_path, sizeof name_path, "%s.lowered", r->a.cubin);
    if (bench_read_file(name_path, &lowered, NULL) != 0) {
        snprintf(r->err, sizeof r->err, "cannot read %.3000s (written by the cold run)", name_path);
        return -1;
    }
    double c0 = bench_now_ms();
    if (bench_read_file(r->a.cubin, &image, NULL) != 0)
        snprintf(r->err, sizeof r->err, "cannot read %s (written by the cold run)", r->a.cubin);
    else if (load_get(r, image, lowered, &mod, &fn) == 0)
        rc = 0;
    double dt = bench_now_ms() - c0;
    if (rc == 0)
        rc = bench_emit(area, r->a.kernel, "floor-cubin",
                        "read a cubin file + cuModuleLoadData + cuModuleGetFunction (first load in the process)",
                        "ms", &dt, 1);
    free(image);
    free(lowered);
    return rc;
}

static int mode_load(floor_run *r)
{
    const char *area = r->a.area ? r->a.area : "cold";
    bench_nvrtc_out o = {0};
    CUmodule mod = NULL;
    CUfunction fn = NULL;
    int rc = -1;
    bool warm_cubin = r->a.cubin && strcmp(area, "cold") != 0;

    if (warm_cubin && cubin_floor(r, area) != 0)
        goto out;
    double t0 = bench_now_ms();
    if (compile_file(r, &o) != 0)
        goto out;
    double t1 = bench_now_ms();
    if (load_get(r, o.cubin, o.lowered[0], &mod, &fn) != 0)
        goto out;
    double t2 = bench_now_ms();
    double total = t2 - t0, comp = t1 - t0, load = t2 - t1;
    /* The floor keeps nothing: cold and warm are the same work. */
    if (bench_emit(area, r->a.kernel, SYSTEM, "read source + NVRTC + cuModuleLoadData + cuModuleGetFunction",
                   "ms", &total, 1) ||
        bench_emit_detail(area, r->a.kernel, SYSTEM, "of which NVRTC compile", "ms", &comp, 1) ||
        bench_emit_detail(area, r->a.kernel, SYSTEM,
                          warm_cubin ? "of which cuModuleLoadData + cuModuleGetFunction (the second load in the process)"
                                     : "of which cuModuleLoadData + cuModuleGetFunction",
                          "ms", &load, 1))
        goto out;
    if (r->a.cubin && !warm_cubin && write_cubin(r->a.cubin, &o, r->err, sizeof r->err) != 0)
        goto out;
    rc = 0;
out:
    if (rc != 0)
        bench_emit_status(area, r->a.kernel, SYSTEM, "compile + load + get", "failed", r->err);
    bench_nvrtc_out_free(&o);
    return rc;
}

static int mode_inproc(floor_run *r)
{
    enum { CALLS = 1000 };
    int reps = r->a.reps ? r->a.reps : bench_reps(100, 20, 3);
    bench_nvrtc_out o = {0};
    CUmodule mod = NULL;
    CUfunction fn = NULL;
    double *t = calloc((size_t)reps, sizeof *t);
    int rc = -1;
    if (!t || compile_file(r, &o) != 0 || load_get(r, o.cubin, o.lowered[0], &mod, &fn) != 0)
        goto out;
    for (int i = -1; i < reps; i++) {
        double t0 = bench_now_ms();
        for (int k = 0; k < CALLS; k++)
            if (bench_cu_check(&r->cu, r->cu.ModuleGetFunction(&fn, mod, o.lowered[0]), "cuModuleGetFunction",
                               r->err, sizeof r->err))
                goto out;
        double us = (bench_now_ms() - t0) * 1e3 / CALLS;
        if (i >= 0)
            t[i] = us;
    }
    rc = bench_emit("inproc", r->a.kernel, SYSTEM, "cuModuleGetFunction again (per call)", "us", t, (size_t)reps);
out:
    if (rc != 0)
        bench_emit_status("inproc", r->a.kernel, SYSTEM, "cuModuleGetFunction again", "failed", r->err);
    free(t);
    bench_nvrtc_out_free(&o);
    return rc;
}

/* x = 1, y = 0 on the device, n elements. */
static int saxpy_buffers(floor_run *r, int n, CUdeviceptr *x, CUdeviceptr *y)
{
    float *h = malloc((size_t)n * sizeof *h);
    int rc = -1;
    if (!h)
        return -1;
    for (int i = 0; i < n; i++)
        h[i] = 1.0f;
    if (bench_cu_check(&r->cu, r->cu.MemAlloc(x, (size_t)n * sizeof *h), "cuMemAlloc", r->err, sizeof r->err) ||
        bench_cu_check(&r->cu, r->cu.MemAlloc(y, (size_t)n * sizeof *h), "cuMemAlloc", r->err, sizeof r->err) ||
        bench_cu_check(&r->cu, r->cu.MemcpyHtoD(*x, h, (size_t)n * sizeof *h), "cuMemcpyHtoD", r->err, sizeof r->err))
        goto out;
    memset(h, 0, (size_t)n * sizeof *h);
    if (bench_cu_check(&r->cu, r->cu.MemcpyHtoD(*y, h, (size_t)n * sizeof *h), "cuMemcpyHtoD", r->err, sizeof r->err))
        goto out;
    rc = 0;
out:
    free(h);
    return rc;
}

static int mode_launch(floor_run *r)
{
    enum { BATCH = 100 };
    int reps = r->a.reps ? r->a.reps : bench_reps(200, 50, 5);
    bench_nvrtc_out o = {0};
    CUmodule mod = NULL;
    CUfunction fn = NULL;
    CUdeviceptr x = 0, y = 0;
    int n = 1;
    float a = 2.0f;
    void *args[4] = {&n, &a, &x, &y};
    double *t = calloc((size_t)reps, sizeof *t);
    int rc = -1;
    if (!t || compile_file(r, &o) != 0 || load_get(r, o.cubin, o.lowered[0], &mod, &fn) != 0 ||
        saxpy_buffers(r, 1, &x, &y) != 0)
        goto out;
    /* Batches of BATCH launches, timed on the host, a sync between batches
     * (not timed): the queue never fills, so this is the host's cost. */
    for (int i = -2; i < reps; i++) {
        double t0 = bench_now_ms();
        for (int k = 0; k < BATCH; k++)
            if (bench_cu_check(&r->cu, r->cu.LaunchKernel(fn, 1, 1, 1, 32, 1, 1, 0, NULL, args, NULL),
                               "cuLaunchKernel", r->err, sizeof r->err))
                goto out;
        double us = (bench_now_ms() - t0) * 1e3 / BATCH;
        if (bench_cu_check(&r->cu, r->cu.CtxSynchronize(), "cuCtxSynchronize", r->err, sizeof r->err))
            goto out;
        if (i >= 0)
            t[i] = us;
    }
    rc = bench_emit("launch", r->a.kernel, SYSTEM, "cuLaunchKernel host cost per launch (1 block of 32)", "us",
                    t, (size_t)reps);
out:
    if (rc != 0)
        bench_emit_status("launch", r->a.kernel, SYSTEM, "cuLaunchKernel", "failed", r->err);
    free(t);
    bench_nvrtc_out_free(&o);
    return rc;
}

static int mode_edit(floor_run *r)
{
    int reps = r->a.reps ? r->a.reps : bench_reps(10, 3, 1);
    char *orig = NULL;
    double *t = calloc((size_t)reps, sizeof *t);
    CUdeviceptr x = 0, y = 0;
    int n = 256, rc = -1, semantic = 0;
    float a = 2.0f;
    void *args[4] = {&n, &a, &x, &y};
    if (!t || bench_read_file(r->a.src, &orig, NULL) != 0 || saxpy_buffers(r, n, &x, &y) != 0) {
        if (!r->err[0])
            snprintf(r->err, sizeof r->err, "cannot read %s or out of memory", r->a.src);
        goto out;
    }
    for (int i = 0; i < reps; i++) {
        int value = i + 1;
        char *edited = bench_edit_text(orig, value, &semantic);
        bench_nvrtc_out o = {0};
        CUmodule mod = NULL;
        CUfunction fn = NULL;
        float zero[256] = {0}, got = 0;
        if (!edited || bench_write_file(r->a.src, edited, strlen(edited)) != 0) {
            free(edited);
            snprintf(r->err, sizeof r->err, "cannot write %s", r->a.src);
            goto out;
        }
        free(edited);
        if (bench_cu_check(&r->cu, r->cu.MemcpyHtoD(y, zero, sizeof zero), "cuMemcpyHtoD", r->err, sizeof r->err))
            goto out;
        double t0 = bench_now_ms();
        int crc = compile_file(r, &o);
        if (crc == 0)
            crc = load_get(r, o.cubin, o.lowered[0], &mod, &fn);
        if (crc == 0 && semantic)
            crc = bench_cu_check(&r->cu, r->cu.LaunchKernel(fn, 1, 1, 1, 256, 1, 1, 0, NULL, args, NULL),
                                 "cuLaunchKernel", r->err, sizeof r->err);
        /* A synchronous copy: returns once the kernel has run. */
        if (crc == 0 && semantic)
            crc = bench_cu_check(&r->cu, r->cu.MemcpyDtoH(&got, y, sizeof got), "cuMemcpyDtoH", r->err, sizeof r->err);
        t[i] = bench_now_ms() - t0;
        bench_nvrtc_out_free(&o);
        if (mod)
            (void)r->cu.ModuleUnload(mod);
        if (crc != 0)
            goto out;
        if (semantic && got != 2.0f + (float)value) {
            snprintf(r->err, sizeof r->err, "after the edit y[0] = %g, expected %g: the new code did not run",
                     (double)got, 2.0 + value);
            goto out;
        }
    }
    rc = bench_emit("edit", r->a.kernel, SYSTEM,
                    semantic ? "edit saved -> read + NVRTC + load + get + launch + sync (result checked)"
                             : "edit saved -> read + NVRTC + load + get (comment edit)",
                    "ms", t, (size_t)reps);
out:
    if (rc != 0)
        bench_emit_status("edit", r->a.kernel, SYSTEM, "edit to live", "failed", r->err);
    if (orig && bench_write_file(r->a.src, orig, strlen(orig)) != 0 && rc == 0) {
        fprintf(stderr, "floor: cannot restore %s\n", r->a.src);
        rc = -1;
    }
    free(orig);
    free(t);
    return rc;
}

static int start_driver(floor_run *r, int need)
{
    double t0 = bench_now_ms();
    if (bench_cu_open(&r->cu, r->err, sizeof r->err) != 0 || bench_cu_start(&r->cu, 0, r->err, sizeof r->err) != 0) {
        if (need)
            return -1;
        r->err[0] = '\0';
        return 0;
    }
    double dt = bench_now_ms() - t0;
    r->have_cu = 1;
    if (need && r->a.kernel &&
        bench_emit("startup", "-", "cuda-driver", "dlopen libcuda + cuInit + primary context retain + set current",
                   "ms", &dt, 1))
        return -1;
    return 0;
}

int main(int argc, char **argv)
{
    static floor_run r;
    int rc = 1;
    if (argc == 2 && strcmp(argv[1], "arch") == 0) {
        if (start_driver(&r, 1) != 0 || bench_cu_arch(&r.cu, r.arch, sizeof r.arch, r.err, sizeof r.err) != 0) {
            fprintf(stderr, "floor arch: %s\n", r.err);
            return 2;
        }
        printf("%s\n", r.arch);
        return 0;
    }
    if (bench_args_parse(argc, argv, USAGE, &r.a) != 0)
        return 2;
    int gpu = strcmp(r.a.mode, "compile") != 0;
    if (gpu && strcmp(r.a.mode, "load") && strcmp(r.a.mode, "inproc") && strcmp(r.a.mode, "launch") &&
        strcmp(r.a.mode, "edit")) {
        fprintf(stderr, "unknown mode '%s'\nusage: %s\n", r.a.mode, USAGE);
        return 2;
    }
    if (start_driver(&r, gpu) != 0) {
        const char *area = strcmp(r.a.mode, "load") == 0 ? (r.a.area ? r.a.area : "cold") : r.a.mode;
        bench_emit_status(area, r.a.kernel, SYSTEM, r.a.mode, "skipped", r.err);
        return 0;
    }
    if (r.a.arch)
        snprintf(r.arch, sizeof r.arch, "%s", r.a.arch);
    else if (r.have_cu) {
        if (bench_cu_arch(&r.cu, r.arch, sizeof r.arch, r.err, sizeof r.err) != 0) {
            fprintf(stderr, "floor: %s\n", r.err);
            return 1;
        }
    } else
        snprintf(r.arch, sizeof r.arch, "%s", getenv("JITOP_ARCH") ? getenv("JITOP_ARCH") : "sm_90");
    build_opts(&r);
    if (strcmp(r.a.mode, "compile") == 0)
        rc = mode_compile(&r);
    else if (strcmp(r.a.mode, "load") == 0)
        rc = mode_load(&r);
    else if (strcmp(r.a.mode, "inproc") == 0)
        rc = mode_inproc(&r);
    else if (strcmp(r.a.mode, "launch") == 0)
        rc = mode_launch(&r);
    else
        rc = mode_edit(&r);
    if (rc != 0)
        fprintf(stderr, "floor %s: %s\n", r.a.mode, r.err);
    return rc == 0 ? 0 : 1;
}
