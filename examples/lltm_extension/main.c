/* The LLTM extension in C: lltm_host.c (checks, sizes, launches) and
 * kernels/lltm.cu loaded with one jitop_load, called through jitop_fn_get +
 * jitop_call on random data, checked against a float64 CPU reference.
 *
 *   make lltm-extension && build/examples/lltm_extension
 *
 * Exits 0 when forward and backward match the reference (relative error
 * below 1e-4), 1 otherwise, 2 on a setup error (no GPU: message, exit 2). */
#include <jitop.h>

#include <cuda.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef LLTM_EXT_DIR
#define LLTM_EXT_DIR "examples/lltm_extension"
#endif
#ifndef LLTM_KERNEL_DIR
#define LLTM_KERNEL_DIR "kernels"
#endif

#define B 16
#define I 32
#define S 128
#define K (S + I)

static int fail(const char *what, int status)
{
    fprintf(stderr, "lltm_extension: %s: %s: %s\n", what, jitop_strerror(status),
            jitop_errmsg(NULL));
    return 2;
}

static double urand(void)
{
    return 2.0 * rand() / RAND_MAX - 1.0;
}

static float *rnd(size_t n, double scale)
{
    float *v = malloc(n * sizeof *v);
    for (size_t i = 0; v && i < n; i++)
        v[i] = (float)(urand() * scale);
    return v;
}

static CUdeviceptr dev(const float *host, size_t n)
{
    CUdeviceptr p = 0;
    if (cuMemAlloc(&p, n * sizeof(float)) != CUDA_SUCCESS)
        return 0;
    if (host && cuMemcpyHtoD(p, host, n * sizeof(float)) != CUDA_SUCCESS)
        return 0;
    return p;
}

static double rel_err(const float *got, const double *ref, size_t n)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = got[i] - ref[i];
        num += d * d;
        den += ref[i] * ref[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

static double sigm(double x)
{
    return 1.0 / (1.0 + exp(-x));
}

int main(void)
{
    jitop_ctx *ctx = NULL;
    jitop_module *m = NULL;
    jitop_fn *fwd = NULL, *bwd = NULL;
    int st = jitop_ctx_create(NULL, &ctx);
    if (st != JITOP_OK)
        return fail("jitop_ctx_create", st);
    const char *srcs[] = {LLTM_EXT_DIR "/lltm_host.c", LLTM_KERNEL_DIR "/lltm.cu"};
    if ((st = jitop_load(ctx, "lltm_extension", srcs, 2, NULL, 0, &m)) != JITOP_OK)
        return fail("jitop_load", st);
    if ((st = jitop_fn_get(m, "lltm_forward",
                           "int(ptr, ptr, ptr, ptr, ptr, ptr, ptr, ptr, i32, i32, i32, ptr)",
                           &fwd)) != JITOP_OK ||
        (st = jitop_fn_get(m, "lltm_backward",
                           "int(ptr, ptr, ptr, ptr, ptr, ptr, ptr, ptr, ptr, i32, i32, i32, ptr)",
                           &bwd)) != JITOP_OK)
        return fail("jitop_fn_get", st);
    if ((st = jitop_ctx_cuda(ctx, NULL, NULL)) != JITOP_OK)
        return fail("jitop_ctx_cuda", st);

    srand(1234);
    float *x = rnd((size_t)B * I, 1), *w = rnd((size_t)3 * S * K, 2.0 / sqrt(K));
    float *b = rnd(3 * S, 0.5), *h = rnd((size_t)B * S, 1), *c = rnd((size_t)B * S, 1);
    float *gh = rnd((size_t)B * S, 1), *gc = rnd((size_t)B * S, 1);
    size_t saved_bytes = jitop_lltm_saved_size(JITOP_FLOAT32, B, I, S);
    CUdeviceptr dx = dev(x, (size_t)B * I), dw = dev(w, (size_t)3 * S * K), db = dev(b, 3 * S);
    CUdeviceptr dh = dev(h, (size_t)B * S), dc = dev(c, (size_t)B * S);
    CUdeviceptr dgh = dev(gh, (size_t)B * S), dgc = dev(gc, (size_t)B * S);
    CUdeviceptr nh = dev(NULL, (size_t)B * S), nc = dev(NULL, (size_t)B * S);
    CUdeviceptr saved = dev(NULL, saved_bytes / sizeof(float) + 1);
    CUdeviceptr d_h = dev(NULL, (size_t)B * S), d_x = dev(NULL, (size_t)B * I);
    CUdeviceptr d_w = dev(NULL, (size_t)3 * S * K), d_b = dev(NULL, 3 * S);
    CUdeviceptr d_c = dev(NULL, (size_t)B * S);
    if (!x || !w || !b || !h || !c || !gh || !gc || !dx || !dw || !db || !dh || !dc || !dgh ||
        !dgc || !nh || !nc || !saved || !d_h || !d_x || !d_w || !d_b || !d_c) {
        fprintf(stderr, "lltm_extension: out of host or device memory\n");
        return 2;
    }

    /* Through libffi: each argument's address, as for cuLaunchKernel. */
    int nB = B, nI = I, nS = S, ret = -1;
    void *stream = NULL;
    void *fargs[] = {&dx, &dw, &db, &dh, &dc, &nh, &nc, &saved, &nB, &nI, &nS, &stream};
    if ((st = jitop_call(fwd, fargs, &ret)) != JITOP_OK || ret != JITOP_OK)
        return fail("lltm_forward", st != JITOP_OK ? st : ret);
    void *bargs[] = {&dgh, &dgc, &saved, &dw, &d_h, &d_x, &d_w, &d_b, &d_c, &nB, &nI, &nS,
                     &stream};
    if ((st = jitop_call(bwd, bargs, &ret)) != JITOP_OK || ret != JITOP_OK)
        return fail("lltm_backward", st != JITOP_OK ? st : ret);
    if (cuCtxSynchronize() != CUDA_SUCCESS) {
        fprintf(stderr, "lltm_extension: a kernel failed\n");
        return 1;
    }
    float *g_nh = malloc(sizeof(float) * B * S), *g_nc = malloc(sizeof(float) * B * S);
    float *g_dh = malloc(sizeof(float) * B * S), *g_dx = malloc(sizeof(float) * B * I);
    float *g_dw = malloc(sizeof(float) * 3 * S * K), *g_db = malloc(sizeof(float) * 3 * S);
    float *g_dc = malloc(sizeof(float) * B * S);
    double *r_nh = calloc((size_t)B * S, 8), *r_nc = calloc((size_t)B * S, 8);
    double *r_dh = calloc((size_t)B * S, 8), *r_dx = calloc((size_t)B * I, 8);
    double *r_dw = calloc((size_t)3 * S * K, 8), *r_db = calloc(3 * S, 8);
    double *r_dc = calloc((size_t)B * S, 8);
    if (!g_nh || !g_nc || !g_dh || !g_dx || !g_dw || !g_db || !g_dc || !r_nh || !r_nc || !r_dh ||
        !r_dx || !r_dw || !r_db || !r_dc)
        return 2;
    cuMemcpyDtoH(g_nh, nh, sizeof(float) * B * S);
    cuMemcpyDtoH(g_nc, nc, sizeof(float) * B * S);
    cuMemcpyDtoH(g_dh, d_h, sizeof(float) * B * S);
    cuMemcpyDtoH(g_dx, d_x, sizeof(float) * B * I);
    cuMemcpyDtoH(g_dw, d_w, sizeof(float) * 3 * S * K);
    cuMemcpyDtoH(g_db, d_b, sizeof(float) * 3 * S);
    cuMemcpyDtoH(g_dc, d_c, sizeof(float) * B * S);

    /* The reference in float64: X = [old_h, input], gates = X W^T + b. */
    for (int bb = 0; bb < B; bb++) {
        double X[K], G[3 * S], dG[3 * S];
        for (int k = 0; k < K; k++)
            X[k] = k < S ? h[bb * S + k] : x[bb * I + k - S];
        for (int g = 0; g < 3 * S; g++) {
            double s = b[g];
            for (int k = 0; k < K; k++)
                s += X[k] * w[(size_t)g * K + k];
            G[g] = s;
        }
        for (int j = 0; j < S; j++) {
            double ig = sigm(G[j]), og = sigm(G[S + j]), g2 = G[2 * S + j];
            double cand = g2 > 0 ? g2 : expm1(g2);
            int o = bb * S + j;
            double ncell = c[o] + cand * ig, t = tanh(ncell);
            r_nc[o] = ncell;
            r_nh[o] = t * og;
            double d_nc = (1 - t * t) * og * gh[o] + gc[o];
            r_dc[o] = d_nc;
            dG[j] = cand * d_nc * ig * (1 - ig);
            dG[S + j] = t * gh[o] * og * (1 - og);
            dG[2 * S + j] = ig * d_nc * (g2 > 0 ? 1.0 : exp(g2));
        }
        for (int g = 0; g < 3 * S; g++) {
            r_db[g] += dG[g];
            for (int k = 0; k < K; k++) {
                double wv = w[(size_t)g * K + k];
                r_dw[(size_t)g * K + k] += dG[g] * X[k];
                if (k < S)
                    r_dh[bb * S + k] += dG[g] * wv;
                else
                    r_dx[bb * I + k - S] += dG[g] * wv;
            }
        }
    }
    struct {
        const char *name;
        const float *got;
        const double *ref;
        size_t n;
    } outs[] = {{"new_h", g_nh, r_nh, (size_t)B * S},      {"new_cell", g_nc, r_nc, (size_t)B * S},
                {"d_old_h", g_dh, r_dh, (size_t)B * S},    {"d_input", g_dx, r_dx, (size_t)B * I},
                {"d_weights", g_dw, r_dw, (size_t)3 * S * K}, {"d_bias", g_db, r_db, 3 * S},
                {"d_old_cell", g_dc, r_dc, (size_t)B * S}};
    int bad = 0;
    for (size_t i = 0; i < sizeof outs / sizeof *outs; i++) {
        double e = rel_err(outs[i].got, outs[i].ref, outs[i].n);
        printf("%-10s rel err %.3e %s\n", outs[i].name, e, e < 1e-4 ? "ok" : "FAILED");
        bad |= !(e < 1e-4);
    }
    jitop_ctx_destroy(ctx);
    printf("lltm_extension: %s\n", bad ? "FAILED" : "forward and backward match float64");
    return bad;
}
