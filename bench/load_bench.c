/*
 * The loader's own numbers (issue 3), medians on the GPU machine:
 *  - warm load in a new process (cache on disk, sources unchanged): jitop_load
 *    + jitop_op_get of bench/kernels/saxpy.cu, timed after the driver start
 *    (cuInit + primary context, reported apart), each sample a fresh process;
 *  - jitop_op_get of an op already loaded;
 *  - host cost per launch of an empty kernel: the raw cuLaunchKernel of the
 *    same CUfunction against jitop_launch (without and with argument sizes),
 *    interleaved in batches so that clock and queue effects hit both alike.
 * Output: one JSON object per figure (bench_util.h); logs on stderr. Without
 * a driver every figure is printed as skipped and the program exits 0.
 *
 * Usage: load_bench            (parent: runs everything)
 *        load_bench --child    (one warm-load sample; prints "load driver ctx" ms)
 */
#include "bench_util.h"
#include "load/driver.h"
#include "jitop.h"
#include "load/load.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *saxpy_path(void)
{
    const char *dir = getenv("JITOP_BENCH_KERNELS");
    static char buf[4096];
    snprintf(buf, sizeof buf, "%s/saxpy.cu", dir && *dir ? dir : "bench/kernels");
    return buf;
}

static int fail(const char *what, int st)
{
    fprintf(stderr, "load_bench: %s: %s: %s\n", what, jitop_strerror(st), jitop_errmsg(NULL));
    return 1;
}

/* One sample in this (new) process. */
static int child(void)
{
    jitop_ctx *ctx = NULL;
    jitop_module *m = NULL;
    jitop_op *op = NULL;
    const char *src = saxpy_path();
    double t0 = bench_now_ms();
    int st = jitop_ctx_create(NULL, &ctx);
    if (st != JITOP_OK)
        return fail("jitop_ctx_create", st);
    double t1 = bench_now_ms();
    st = jitop_ctx_cuda(ctx, NULL, NULL); /* cuInit + primary context */
    if (st != JITOP_OK)
        return fail("jitop_ctx_cuda", st);
    double t2 = bench_now_ms();
    st = jitop_load(ctx, "saxpy", &src, 1, NULL, 0, &m);
    if (st == JITOP_OK)
        st = jitop_op_get(m, "saxpy", &op);
    double t3 = bench_now_ms();
    if (st != JITOP_OK)
        return fail("jitop_load/jitop_op_get", st);
    printf("%.6f %.6f %.6f\n", t3 - t2, t2 - t1, t1 - t0);
    jitop_ctx_destroy(ctx);
    return 0;
}

static int run_child(const char *self, double *load, double *driver, double *ctxms)
{
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "'%s' --child", self);
    FILE *p = popen(cmd, "r");
    if (!p)
        return -1;
    int n = fscanf(p, "%lf %lf %lf", load, driver, ctxms);
    int rc = pclose(p);
    return n == 3 && rc == 0 ? 0 : -1;
}

static void warm_load(void)
{
    char self[4096];
    ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
    if (len <= 0) {
        bench_emit_status("warm", "saxpy", "jitop-c", "load+get, new process", "failed",
                          "cannot find /proc/self/exe");
        return;
    }
    self[len] = '\0';
    int reps = bench_reps(30, 10, 3);
    double cold[1], load[64], driver[64], ctxms[64];
    /* The first process compiles (cold cache); the rest are warm. */
    if (run_child(self, &cold[0], &driver[0], &ctxms[0]) != 0) {
        bench_emit_status("warm", "saxpy", "jitop-c", "load+get, new process", "failed",
                          "the child process failed (see stderr)");
        return;
    }
    bench_emit_detail("cold", "saxpy", "jitop-c",
                      "jitop_load+jitop_op_get, new process, empty cache (NVRTC compile), "
                      "beyond cuInit+context",
                      "ms", cold, 1);
    int n = 0;
    for (int i = 0; i < reps; i++)
        if (run_child(self, &load[n], &driver[n], &ctxms[n]) == 0)
            n++;
    bench_emit("warm", "saxpy", "jitop-c",
               "jitop_load+jitop_op_get in a new process, cache on disk, beyond cuInit+context",
               "ms", load, (size_t)n);
    bench_emit_detail("warm", "saxpy", "jitop-c",
                      "driver start in a new process: cuInit + primary context retain", "ms",
                      driver, (size_t)n);
    bench_emit_detail("warm", "saxpy", "jitop-c", "jitop_ctx_create (cache dir open)", "ms",
                      ctxms, (size_t)n);
}

static void op_get(jitop_module *m)
{
    enum { calls = 1000000 };
    int reps = bench_reps(15, 5, 2);
    double us[32];
    jitop_op *op = NULL;
    for (int r = 0; r < reps; r++) {
        double t0 = bench_now_ms();
        for (int i = 0; i < calls; i++)
            if (jitop_op_get(m, "saxpy", &op) != JITOP_OK)
                abort();
        us[r] = (bench_now_ms() - t0) * 1e3 / calls;
    }
    bench_emit("inproc", "saxpy", "jitop-c", "jitop_op_get of an op already loaded", "us", us,
               (size_t)reps);
}

/* Per-launch host time of `batch` launches, one of three ways. */
static double launch_batch(int how, jitop_op *op, CUfunction fn, const jitop__cuda_api *cu,
                           int batch)
{
    static const size_t no_sizes[1] = {0}; /* sizes given, zero of them */
    double t0 = bench_now_ms();
    for (int i = 0; i < batch; i++) {
        int bad;
        jitop_dim3 one = {1, 1, 1};
        if (how == 0)
            bad = cu->cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL) != CUDA_SUCCESS;
        else if (how == 1)
            bad = jitop_launch(op, one, one, 0, NULL, NULL, NULL, 0) != JITOP_OK;
        else
            bad = jitop_launch(op, one, one, 0, NULL, NULL, no_sizes, 0) != JITOP_OK;
        if (bad)
            abort();
    }
    double us = (bench_now_ms() - t0) * 1e3 / batch;
    if (cu->cuCtxSynchronize() != CUDA_SUCCESS)
        abort();
    return us;
}

/* The same for saxpy with its four arguments: raw, jitop without sizes,
 * jitop with sizes (count and sizes checked). */
static double saxpy_batch(int how, jitop_op *op, CUfunction fn, const jitop__cuda_api *cu,
                          int batch, void **args)
{
    static const size_t sizes[] = {4, 4, 8, 8};
    jitop_dim3 one = {1, 1, 1};
    double t0 = bench_now_ms();
    for (int i = 0; i < batch; i++) {
        int bad;
        if (how == 0)
            bad = cu->cuLaunchKernel(fn, 1, 1, 1, 32, 1, 1, 0, NULL, args, NULL) != CUDA_SUCCESS;
        else if (how == 1)
            bad = jitop_launch(op, one, (jitop_dim3){32, 1, 1}, 0, NULL, args, NULL, 0) !=
                  JITOP_OK;
        else
            bad = jitop_launch(op, one, (jitop_dim3){32, 1, 1}, 0, NULL, args, sizes, 4) !=
                  JITOP_OK;
        if (bad)
            abort();
    }
    double us = (bench_now_ms() - t0) * 1e3 / batch;
    if (cu->cuCtxSynchronize() != CUDA_SUCCESS)
        abort();
    return us;
}

static void emit_launch(const char *kernel, double *raw, double *plain, double *sized, int n,
                        const char *plain_what, const char *sized_what)
{
    double diff[256], diff2[256];
    for (int i = 0; i < n; i++) {
        diff[i] = plain[i] - raw[i];
        diff2[i] = sized[i] - raw[i];
    }
    bench_emit("launch", kernel, "floor", "raw cuLaunchKernel host time per launch", "us", raw,
               (size_t)n);
    bench_emit("launch", kernel, "jitop-c", plain_what, "us", plain, (size_t)n);
    bench_emit_detail("launch", kernel, "jitop-c", sized_what, "us", sized, (size_t)n);
    bench_emit_detail("launch", kernel, "jitop-c",
                      "jitop_launch minus raw cuLaunchKernel, paired batches", "us", diff,
                      (size_t)n);
    bench_emit_detail("launch", kernel, "jitop-c",
                      "jitop_launch with arg sizes minus raw cuLaunchKernel, paired batches",
                      "us", diff2, (size_t)n);
}

static void launches(jitop_ctx *ctx, jitop_module *saxpy_mod)
{
    const jitop__cuda_api *cu = jitop__cuda();
    jitop_module *m = NULL;
    jitop_op *empty = NULL, *saxpy = NULL;
    int st = jitop_load_inline(ctx, "empty", "extern \"C\" __global__ void empty_kernel() {}\n",
                               NULL, 0, &m);
    if (st == JITOP_OK)
        st = jitop_op_get(m, "empty_kernel", &empty);
    if (st == JITOP_OK)
        st = jitop_op_get(saxpy_mod, "saxpy", &saxpy);
    if (st != JITOP_OK) {
        fail("loading the launch kernels", st);
        bench_emit_status("launch", "empty", "jitop-c", "jitop_launch host time", "failed",
                          jitop_errmsg(NULL));
        return;
    }
    /* The very CUfunction jitop launches, so both sides run the same code. */
    CUfunction fe = atomic_load(&empty->cur)->fn, fs = atomic_load(&saxpy->cur)->fn;
    int rounds = bench_reps(101, 31, 5), batch = 256;
    double raw[256], plain[256], sized[256];
    for (int w = 0; w < 3; w++) /* warm up: lazy loading, caches, clocks */
        for (int how = 0; how < 3; how++)
            launch_batch(how, empty, fe, cu, batch);
    for (int r = 0; r < rounds; r++) {
        /* Rotate the order so that none is always first after a sync. */
        for (int k = 0; k < 3; k++) {
            int how = (r + k) % 3;
            double us = launch_batch(how, empty, fe, cu, batch);
            (how == 0 ? raw : how == 1 ? plain : sized)[r] = us;
        }
    }
    emit_launch("empty", raw, plain, sized, rounds, "jitop_launch host time per launch",
                "jitop_launch host time per launch (arg sizes given: nothing to check)");

    int n = 32;
    float a = 2.0f;
    CUdeviceptr x = 0, y = 0;
    if (cu->cuMemAlloc(&x, 128) != CUDA_SUCCESS || cu->cuMemAlloc(&y, 128) != CUDA_SUCCESS ||
        cu->cuMemsetD8(x, 0, 128) != CUDA_SUCCESS || cu->cuMemsetD8(y, 0, 128) != CUDA_SUCCESS)
        abort();
    void *args[] = {&n, &a, &x, &y};
    for (int w = 0; w < 3; w++)
        for (int how = 0; how < 3; how++)
            saxpy_batch(how, saxpy, fs, cu, batch, args);
    for (int r = 0; r < rounds; r++)
        for (int k = 0; k < 3; k++) {
            int how = (r + k) % 3;
            double us = saxpy_batch(how, saxpy, fs, cu, batch, args);
            (how == 0 ? raw : how == 1 ? plain : sized)[r] = us;
        }
    emit_launch("saxpy", raw, plain, sized, rounds, "jitop_launch host time per launch",
                "jitop_launch host time per launch, 4 arg sizes checked");
    if (cu->cuMemFree(x) != CUDA_SUCCESS || cu->cuMemFree(y) != CUDA_SUCCESS)
        abort();
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "--child") == 0)
        return child();

    char tmpl[] = "/tmp/jitop-load-bench-XXXXXX";
    if (!getenv("JITOP_CACHE_DIR")) {
        if (!mkdtemp(tmpl) || setenv("JITOP_CACHE_DIR", tmpl, 1) != 0) {
            perror("load_bench: cache dir");
            return 1;
        }
    }
    jitop_ctx *ctx = NULL;
    int st = jitop_ctx_create(NULL, &ctx);
    if (st != JITOP_OK)
        return fail("jitop_ctx_create", st);
    st = jitop_ctx_cuda(ctx, NULL, NULL);
    if (st == JITOP_ENODRIVER) {
        const char *why = "no CUDA driver";
        bench_emit_status("warm", "saxpy", "jitop-c", "load+get, new process", "skipped", why);
        bench_emit_status("inproc", "saxpy", "jitop-c", "jitop_op_get", "skipped", why);
        bench_emit_status("launch", "empty", "jitop-c", "jitop_launch host time", "skipped", why);
        jitop_ctx_destroy(ctx);
        return 0;
    }
    if (st != JITOP_OK)
        return fail("jitop_ctx_cuda", st);
    jitop_ctx_destroy(ctx);
    ctx = NULL;

    warm_load(); /* fresh processes on this cache */

    const char *src = saxpy_path();
    jitop_module *m = NULL;
    st = jitop_ctx_create(NULL, &ctx);
    if (st == JITOP_OK)
        st = jitop_load(ctx, "saxpy", &src, 1, NULL, 0, &m);
    if (st != JITOP_OK)
        return fail("jitop_load", st);
    op_get(m);
    launches(ctx, m);
    jitop_ctx_destroy(ctx);
    return 0;
}
