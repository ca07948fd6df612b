/* The LLTM op's cost per call from C, without Python's ctypes in front of it:
 * jitop_lltm_forward / jitop_lltm_backward at the tutorial's sizes, per call
 * from the host (sync, a loop of n calls, sync; one sample per loop), next to
 * lltm_bench.py's figures for the same calls through ctypes. Outputs are
 * poisoned (NaN) first and checked finite after the warm-up, so a timing of
 * a broken call cannot pass unnoticed; correctness proper is
 * tests/gpu/test_lltm.c's job. The driver is used through jitop's own table
 * (src/load/driver.h), so the program starts without libcuda.so.1 and then
 * prints one "skipped" line and exits 0. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "load/driver.h"
#include "jitop.h"

static const jitop__cuda_api *cu;

#define P(x) ((void *)(uintptr_t)(x))

typedef struct bufs {
    CUdeviceptr in, w, bias, oh, oc, gh, gc, nh, nc, saved, dh, di, dw, db, dc;
} bufs;

static int alloc_random(CUdeviceptr *p, size_t n, float scale)
{
    float *h = malloc(n * sizeof *h);
    if (h == NULL)
        return -1;
    for (size_t i = 0; i < n; i++)
        h[i] = scale * (2.0f * (float)rand() / (float)RAND_MAX - 1.0f);
    int rc = cu->cuMemAlloc(p, n * sizeof *h) == CUDA_SUCCESS &&
                     cu->cuMemcpyHtoD(*p, h, n * sizeof *h) == CUDA_SUCCESS
                 ? 0
                 : -1;
    free(h);
    return rc;
}

static int alloc_nan(CUdeviceptr *p, size_t bytes)
{
    return cu->cuMemAlloc(p, bytes) == CUDA_SUCCESS && cu->cuMemsetD8(*p, 0xff, bytes) == CUDA_SUCCESS ? 0 : -1;
}

static int setup(bufs *b, int B, int I, int S)
{
    size_t K = (size_t)S + I;
    int rc = 0;
    rc |= alloc_random(&b->in, (size_t)B * I, 1.0f);
    rc |= alloc_random(&b->w, 3 * (size_t)S * K, 2.0f / sqrtf((float)K));
    rc |= alloc_random(&b->bias, 3 * (size_t)S, 0.5f);
    rc |= alloc_random(&b->oh, (size_t)B * S, 1.0f);
    rc |= alloc_random(&b->oc, (size_t)B * S, 1.0f);
    rc |= alloc_random(&b->gh, (size_t)B * S, 1.0f);
    rc |= alloc_random(&b->gc, (size_t)B * S, 1.0f);
    rc |= alloc_nan(&b->nh, (size_t)B * S * 4);
    rc |= alloc_nan(&b->nc, (size_t)B * S * 4);
    rc |= alloc_nan(&b->saved, jitop_lltm_saved_size(JITOP_FLOAT32, B, I, S));
    rc |= alloc_nan(&b->dh, (size_t)B * S * 4);
    rc |= alloc_nan(&b->di, (size_t)B * I * 4);
    rc |= alloc_nan(&b->dw, 3 * (size_t)S * K * 4);
    rc |= alloc_nan(&b->db, 3 * (size_t)S * 4);
    rc |= alloc_nan(&b->dc, (size_t)B * S * 4);
    return rc;
}

static void release(bufs *b)
{
    CUdeviceptr all[] = {b->in, b->w, b->bias, b->oh, b->oc, b->gh, b->gc, b->nh,
                         b->nc, b->saved, b->dh, b->di, b->dw, b->db, b->dc};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (all[i] && cu->cuMemFree(all[i]) != CUDA_SUCCESS)
            fprintf(stderr, "lltm_host: cuMemFree failed\n");
}

static int fwd(jitop_ctx *ctx, const bufs *b, int B, int I, int S)
{
    return jitop_lltm_forward(ctx, JITOP_FLOAT32, B, I, S, P(b->in), P(b->w), P(b->bias), P(b->oh),
                              P(b->oc), P(b->nh), P(b->nc), P(b->saved), NULL);
}

static int bwd(jitop_ctx *ctx, const bufs *b, int B, int I, int S)
{
    return jitop_lltm_backward(ctx, JITOP_FLOAT32, B, I, S, P(b->gh), P(b->gc), P(b->saved),
                               P(b->w), P(b->dh), P(b->di), P(b->dw), P(b->db), P(b->dc), NULL);
}

/* Every output element finite after a forward+backward. */
static int outputs_finite(const bufs *b, int B, int I, int S)
{
    size_t K = (size_t)S + I;
    CUdeviceptr p[] = {b->nh, b->nc, b->dh, b->di, b->dw, b->db, b->dc};
    size_t n[] = {(size_t)B * S, (size_t)B * S, (size_t)B * S, (size_t)B * I, 3 * (size_t)S * K,
                  3 * (size_t)S, (size_t)B * S};
    for (size_t a = 0; a < sizeof p / sizeof p[0]; a++) {
        float *h = malloc(n[a] * sizeof *h);
        int ok = h != NULL && cu->cuMemcpyDtoH(h, p[a], n[a] * sizeof *h) == CUDA_SUCCESS;
        for (size_t i = 0; ok && i < n[a]; i++)
            ok = isfinite(h[i]);
        free(h);
        if (!ok)
            return 0;
    }
    return 1;
}

/* Runs forward+backward for at least ms milliseconds: an idle GPU sits at a
 * low clock, and the first short timing loop would pay the ramp. */
static int warm_up(jitop_ctx *ctx, const bufs *b, int B, int I, int S, double ms)
{
    int rc = 0;
    double end = bench_now_ms() + ms;
    while (rc == 0 && bench_now_ms() < end) {
        for (int i = 0; rc == 0 && i < 20; i++)
            if (fwd(ctx, b, B, I, S) != JITOP_OK || bwd(ctx, b, B, I, S) != JITOP_OK)
                rc = -1;
        if (rc == 0 && cu->cuCtxSynchronize() != CUDA_SUCCESS)
            rc = -1;
    }
    return rc;
}

/* what: 0 forward, 1 backward, 2 both. */
static int time_loop(jitop_ctx *ctx, const bufs *b, int B, int I, int S, int what, int n,
                     int loops, double *samples)
{
    for (int l = 0; l < loops; l++) {
        double t0 = bench_now_ms();
        for (int i = 0; i < n; i++) {
            if (what != 1 && fwd(ctx, b, B, I, S) != JITOP_OK)
                return -1;
            if (what != 0 && bwd(ctx, b, B, I, S) != JITOP_OK)
                return -1;
        }
        if (cu->cuCtxSynchronize() != CUDA_SUCCESS)
            return -1;
        samples[l] = (bench_now_ms() - t0) * 1e3 / n;
    }
    return 0;
}

int main(void)
{
    static const struct {
        const char *name;
        int B, I, S, n;
    } sizes[] = {{"tiny", 16, 32, 128, 2000}, {"medium", 64, 256, 1024, 300}, {"large", 256, 1024, 4096, 10}};
    static const char *whats[] = {"forward", "backward", "forward+backward"};
    jitop_ctx *ctx = NULL;
    int rc = jitop_ctx_create(NULL, &ctx);
    if (rc == JITOP_OK)
        rc = jitop_ctx_cuda(ctx, NULL, NULL);
    if (rc == JITOP_OK && (cu = jitop__cuda()) == NULL)
        rc = JITOP_ENODRIVER;
    if (rc != JITOP_OK) {
        bench_emit_status("kernel", "lltm", "jitop-c", "LLTM per call from C", "skipped",
                          rc == JITOP_ENODRIVER ? "no CUDA driver" : jitop_errmsg(NULL));
        jitop_ctx_destroy(ctx);
        return rc == JITOP_ENODRIVER ? 0 : 1;
    }
    int loops = bench_reps(15, 9, 3);
    double *samples = calloc((size_t)loops, sizeof *samples);
    int status = samples ? 0 : 1;
    /* LLTM_HOST_SIZES=tiny,medium narrows the run (profiling one size). */
    const char *only = getenv("LLTM_HOST_SIZES");
    for (size_t s = 0; status == 0 && s < sizeof sizes / sizeof sizes[0]; s++) {
        if (only != NULL && *only != '\0' && strstr(only, sizes[s].name) == NULL)
            continue;
        int B = sizes[s].B, I = sizes[s].I, S = sizes[s].S;
        int n = bench_reps(sizes[s].n, sizes[s].n / 3 + 1, sizes[s].n / 20 + 1);
        bufs b = {0};
        char what[160];
        if (setup(&b, B, I, S) != 0 || fwd(ctx, &b, B, I, S) != JITOP_OK ||
            bwd(ctx, &b, B, I, S) != JITOP_OK || cu->cuCtxSynchronize() != CUDA_SUCCESS ||
            !outputs_finite(&b, B, I, S) || warm_up(ctx, &b, B, I, S, 300.0) != 0) {
            snprintf(what, sizeof what, "%s LLTM per call from C", sizes[s].name);
            bench_emit_status("kernel", "lltm", "jitop-c", what, "failed", jitop_errmsg(NULL));
            status = 1;
        }
        for (int w = 0; status == 0 && w < 3; w++) {
            snprintf(what, sizeof what, "%s %d/%d/%d %s per call from C (host; no ctypes)",
                     sizes[s].name, B, I, S, whats[w]);
            if (time_loop(ctx, &b, B, I, S, w, n, loops, samples) != 0) {
                bench_emit_status("kernel", "lltm", "jitop-c", what, "failed", jitop_errmsg(NULL));
                status = 1;
            } else {
                bench_emit_detail("kernel", "lltm", "jitop-c", what, "us", samples, (size_t)loops);
            }
        }
        release(&b);
    }
    free(samples);
    jitop_ctx_destroy(ctx);
    return status;
}
