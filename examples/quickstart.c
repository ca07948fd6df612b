/*
 * jitop in one page: create a context, load kernels/layernorm.cu (compiled
 * at run time by NVRTC, kept in the on-disk cache), run LayerNorm on random
 * data, check it against a float64 CPU reference, time it, list the ops.
 *
 *   make && ./build/examples/quickstart
 *
 * Exits 0 when the result matches (relative error under 1e-4), 1 otherwise.
 * Device memory and events come from the CUDA driver API directly (an
 * application owns its buffers); jitop_ctx_cuda makes jitop's context
 * current on this thread so that they live in the same CUDA context.
 */
#include <jitop.h>

#include <cuda.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef JITOP_SOURCE_KERNEL_DIR
#define JITOP_SOURCE_KERNEL_DIR "kernels"
#endif

#define M 4096
#define N 1024
#define RUNS 20

static int check_cu(CUresult r, const char *what)
{
    if (r == CUDA_SUCCESS)
        return 0;
    const char *s = NULL;
    cuGetErrorString(r, &s);
    fprintf(stderr, "quickstart: %s: %s\n", what, s ? s : "unknown CUDA error");
    return 1;
}

static int check_jt(int st, const char *what)
{
    if (st == JITOP_OK)
        return 0;
    fprintf(stderr, "quickstart: %s: %s: %s\n", what, jitop_strerror(st), jitop_errmsg(NULL));
    return 1;
}

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

int main(void)
{
    int rc = 1;
    const size_t total = (size_t)M * N;
    const float eps = 1e-5f;
    float *x = malloc(total * sizeof *x), *y = malloc(total * sizeof *y);
    float *gamma = malloc(N * sizeof *gamma), *beta = malloc(N * sizeof *beta);
    jitop_ctx *ctx = NULL;
    CUdeviceptr dx = 0, dy = 0, dg = 0, db = 0, dmean = 0, drstd = 0;
    CUevent ev[2 * RUNS] = {0};
    jitop_op_info *infos = NULL;
    if (!x || !y || !gamma || !beta) {
        fprintf(stderr, "quickstart: out of memory\n");
        goto out;
    }
    srand(12345);
    for (size_t i = 0; i < total; i++)
        x[i] = 3.0f * ((float)rand() / RAND_MAX) - 1.0f;
    for (int i = 0; i < N; i++) {
        gamma[i] = 0.5f + (float)rand() / RAND_MAX;
        beta[i] = (float)rand() / RAND_MAX - 0.5f;
    }

    if (check_jt(jitop_ctx_create(NULL, &ctx), "jitop_ctx_create") ||
        check_jt(jitop_ctx_cuda(ctx, NULL, NULL), "jitop_ctx_cuda (is there a GPU?)"))
        goto out;
    if (check_cu(cuMemAlloc(&dx, total * 4), "cuMemAlloc") ||
        check_cu(cuMemAlloc(&dy, total * 4), "cuMemAlloc") ||
        check_cu(cuMemAlloc(&dg, N * 4), "cuMemAlloc") ||
        check_cu(cuMemAlloc(&db, N * 4), "cuMemAlloc") ||
        check_cu(cuMemAlloc(&dmean, M * 4), "cuMemAlloc") ||
        check_cu(cuMemAlloc(&drstd, M * 4), "cuMemAlloc") ||
        check_cu(cuMemcpyHtoD(dx, x, total * 4), "cuMemcpyHtoD") ||
        check_cu(cuMemcpyHtoD(dg, gamma, N * 4), "cuMemcpyHtoD") ||
        check_cu(cuMemcpyHtoD(db, beta, N * 4), "cuMemcpyHtoD") ||
        check_cu(cuMemsetD8(dy, 0xFF, total * 4), "cuMemsetD8")) /* NaN: unwritten shows */
        goto out;

    /* The first call compiles layernorm_fwd<float, 1024, true, ...> (or takes
     * it from the cache) and loads it; later calls only launch. */
    void *px = (void *)(uintptr_t)dx, *py = (void *)(uintptr_t)dy;
    void *pg = (void *)(uintptr_t)dg, *pb = (void *)(uintptr_t)db;
    float *pm = (float *)(uintptr_t)dmean, *pr = (float *)(uintptr_t)drstd;
    if (check_jt(jitop_layernorm_forward(ctx, JITOP_FLOAT32, M, N, eps, px, pg, pb, py, pm, pr,
                                         NULL),
                 "jitop_layernorm_forward") ||
        check_cu(cuCtxSynchronize(), "cuCtxSynchronize") ||
        check_cu(cuMemcpyDtoH(y, dy, total * 4), "cuMemcpyDtoH"))
        goto out;

    double num = 0, den = 0;
    for (int r = 0; r < M; r++) {
        double mu = 0, var = 0;
        for (int c = 0; c < N; c++)
            mu += x[(size_t)r * N + c];
        mu /= N;
        for (int c = 0; c < N; c++)
            var += (x[(size_t)r * N + c] - mu) * (x[(size_t)r * N + c] - mu);
        double rs = 1.0 / sqrt(var / N + eps);
        for (int c = 0; c < N; c++) {
            double want = (x[(size_t)r * N + c] - mu) * rs * gamma[c] + beta[c];
            double d = y[(size_t)r * N + c] - want;
            num += d * d;
            den += want * want;
        }
    }
    double err = sqrt(num / den);
    if (isnan(err))
        err = INFINITY;

    float ms[RUNS];
    for (int i = 0; i < 2 * RUNS; i++)
        if (check_cu(cuEventCreate(&ev[i], CU_EVENT_DEFAULT), "cuEventCreate"))
            goto out;
    for (int i = 0; i < RUNS; i++) {
        if (check_cu(cuEventRecord(ev[2 * i], NULL), "cuEventRecord") ||
            check_jt(jitop_layernorm_forward(ctx, JITOP_FLOAT32, M, N, eps, px, pg, pb, py, pm, pr,
                                             NULL),
                     "jitop_layernorm_forward") ||
            check_cu(cuEventRecord(ev[2 * i + 1], NULL), "cuEventRecord"))
            goto out;
    }
    if (check_cu(cuCtxSynchronize(), "cuCtxSynchronize"))
        goto out;
    for (int i = 0; i < RUNS; i++)
        if (check_cu(cuEventElapsedTime(&ms[i], ev[2 * i], ev[2 * i + 1]), "cuEventElapsedTime"))
            goto out;
    qsort(ms, RUNS, sizeof ms[0], cmp_float);
    double med = ms[RUNS / 2];

    /* The module the call loaded: loading the same source again returns it
     * (in-memory table), with every op instantiated so far. */
    char *path = NULL;
    const char *kdir = getenv("JITOP_KERNEL_DIR");
    if (asprintf(&path, "%s/layernorm.cu", kdir && *kdir ? kdir : JITOP_SOURCE_KERNEL_DIR) < 0) {
        fprintf(stderr, "quickstart: out of memory\n");
        goto out;
    }
    const char *srcs[1] = {path};
    jitop_module *m = NULL;
    size_t count = 0;
    int st = jitop_load(ctx, "layernorm", srcs, 1, NULL, 0, &m);
    free(path);
    if (check_jt(st, "jitop_load") || check_jt(jitop_module_ops(m, NULL, 0, &count), "ops"))
        goto out;
    if (count > 0 && (infos = calloc(count, sizeof *infos)) == NULL)
        goto out;
    if (check_jt(jitop_module_ops(m, infos, count, &count), "jitop_module_ops"))
        goto out;
    printf("module %s: %zu op(s)\n", jitop_module_name(m), count);
    for (size_t i = 0; i < count; i++)
        printf("  %s  (%zu params, %d registers)\n", infos[i].name, infos[i].nparams,
               infos[i].num_regs);

    printf("layernorm forward, float32, %d x %d: relative error %.3g vs float64, "
           "median %.1f us of %d (%.0f GB/s read + written)\n",
           M, N, err, med * 1e3, RUNS, 2.0 * total * 4 / (med * 1e-3) / 1e9);
    if (!(err < 1e-4)) {
        fprintf(stderr, "quickstart: FAILED: relative error %g over 1e-4\n", err);
        goto out;
    }
    printf("OK\n");
    rc = 0;
out:
    for (int i = 0; i < 2 * RUNS; i++)
        if (ev[i])
            cuEventDestroy(ev[i]);
    CUdeviceptr bufs[] = {dx, dy, dg, db, dmean, drstd};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (bufs[i] && cuMemFree(bufs[i]) != CUDA_SUCCESS)
            rc = 1;
    jitop_ctx_destroy(ctx);
    free(infos);
    free(x);
    free(y);
    free(gamma);
    free(beta);
    return rc;
}
