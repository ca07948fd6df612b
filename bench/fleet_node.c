/* One "node" of the fleet simulation (bench/fleet_bench.sh): a process with
 * its own local cache that cold-starts a list of units through jitop_build,
 * with the remote tier from $JITOP_REMOTE_CACHE.
 *
 *   fleet_node --cache DIR [--warm] UNIT...
 *       UNIT is FILE or FILE::NAME (a template instance). Builds each unit
 *       for sm_90 in a compile-only context and prints one JSON line per
 *       unit: {"pass":"cold","unit":...,"cached":0|1,"ms":...}. On a fresh
 *       local cache a cached unit is a remote hit. --warm then builds them
 *       again in a new context of the same process (local hits: "warm").
 *       Exit 0 when every build succeeded.
 *
 *   fleet_node --prewarm-layernorm DIR COLS
 *       jitop_layernorm_prewarm for sm_90, fp32, COLS in a compile-only
 *       context on DIR: every entry it compiles is pushed to the writable
 *       remotes of $JITOP_REMOTE_CACHE (drained at the context's destroy).
 *
 *   fleet_node --gpu-layernorm DIR COLS
 *       On a GPU: the first jitop_layernorm_forward call of a new process
 *       (fp32, 4096 rows of COLS, affine) on the local cache DIR, timed
 *       from context creation to the end of the kernel, and a second call.
 *       JSON: {"first_call_ms":...,"second_call_ms":...}. Exit 77 without a
 *       driver. */
#include "jitop.h"
#include "load/driver.h" /* device memory through jitop's driver table */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int run_pass(const char *cache, const char *pass, int n, char **units)
{
    jitop_config cfg;
    jitop_config_init(&cfg);
    cfg.cache_dir = cache;
    cfg.arch = "sm_90";
    cfg.compile_only = 1;
    jitop_ctx *ctx = NULL;
    int st = jitop_ctx_create(&cfg, &ctx), bad = 0;
    if (st != JITOP_OK) {
        fprintf(stderr, "fleet_node: jitop_ctx_create: %s\n", jitop_errmsg(NULL));
        return 1;
    }
    for (int i = 0; i < n; i++) {
        char *file = strdup(units[i]);
        if (!file) {
            bad++;
            break;
        }
        char *sep = strstr(file, "::");
        const char *name = NULL;
        if (sep) {
            *sep = '\0';
            name = sep + 2;
        }
        jitop_build_result res;
        double t0 = now_ms();
        st = jitop_build(ctx, file, NULL, NULL, 0, name ? &name : NULL, name ? 1 : 0, &res);
        double ms = now_ms() - t0;
        if (st != JITOP_OK) {
            fprintf(stderr, "fleet_node: %s: %s\n", units[i], jitop_errmsg(ctx));
            bad++;
        } else {
            printf("{\"pass\":\"%s\",\"unit\":\"%s\",\"cached\":%d,\"ms\":%.3f}\n", pass, units[i],
                   res.cached, ms);
        }
        free(file);
    }
    jitop_ctx_destroy(ctx);
    return bad ? 1 : 0;
}

static int gpu_layernorm(const char *cache, int cols)
{
    double t0 = now_ms();
    jitop_config cfg;
    jitop_config_init(&cfg);
    cfg.cache_dir = cache;
    jitop_ctx *ctx = NULL;
    if (jitop_ctx_create(&cfg, &ctx) != JITOP_OK) {
        fprintf(stderr, "fleet_node: jitop_ctx_create: %s\n", jitop_errmsg(NULL));
        return 1;
    }
    void *cuctx = NULL;
    int st = jitop_ctx_cuda(ctx, &cuctx, NULL);
    if (st == JITOP_ENODRIVER) {
        printf("SKIP: no CUDA driver or device\n");
        jitop_ctx_destroy(ctx);
        return 77;
    }
    const jitop__cuda_api *cu = jitop__cuda();
    size_t rows = 4096, bytes = rows * (size_t)cols * sizeof(float);
    CUdeviceptr x = 0, y = 0, g = 0, b = 0;
    int rc = 1;
    if (st != JITOP_OK || !cu || cu->cuMemAlloc(&x, bytes) || cu->cuMemAlloc(&y, bytes) ||
        cu->cuMemAlloc(&g, cols * sizeof(float)) || cu->cuMemAlloc(&b, cols * sizeof(float)) ||
        cu->cuMemsetD8(x, 0, bytes) || cu->cuMemsetD8(g, 0, cols * sizeof(float)) ||
        cu->cuMemsetD8(b, 0, cols * sizeof(float)) || cu->cuCtxSynchronize()) {
        fprintf(stderr, "fleet_node: device setup failed: %s\n", jitop_errmsg(ctx));
        goto out;
    }
    double t1 = now_ms();
    st = jitop_layernorm_forward(ctx, JITOP_FLOAT32, (int64_t)rows, cols, 1e-5f, (void *)x,
                                 (void *)g, (void *)b, (void *)y, NULL, NULL, NULL);
    if (st != JITOP_OK || cu->cuCtxSynchronize()) {
        fprintf(stderr, "fleet_node: layernorm: %s\n", jitop_errmsg(ctx));
        goto out;
    }
    double first = now_ms() - t1;
    double t2 = now_ms();
    st = jitop_layernorm_forward(ctx, JITOP_FLOAT32, (int64_t)rows, cols, 1e-5f, (void *)x,
                                 (void *)g, (void *)b, (void *)y, NULL, NULL, NULL);
    if (st != JITOP_OK || cu->cuCtxSynchronize())
        goto out;
    printf("{\"setup_ms\":%.3f,\"first_call_ms\":%.3f,\"second_call_ms\":%.3f}\n", t1 - t0,
           first, now_ms() - t2);
    rc = 0;
out:
    if (cu) {
        if (x)
            cu->cuMemFree(x);
        if (y)
            cu->cuMemFree(y);
        if (g)
            cu->cuMemFree(g);
        if (b)
            cu->cuMemFree(b);
    }
    jitop_ctx_destroy(ctx);
    return rc;
}

static int prewarm_layernorm(const char *cache, int cols)
{
    jitop_config cfg;
    jitop_config_init(&cfg);
    cfg.cache_dir = cache;
    cfg.arch = "sm_90";
    cfg.compile_only = 1;
    jitop_ctx *ctx = NULL;
    if (jitop_ctx_create(&cfg, &ctx) != JITOP_OK) {
        fprintf(stderr, "fleet_node: jitop_ctx_create: %s\n", jitop_errmsg(NULL));
        return 1;
    }
    double t0 = now_ms();
    int st = jitop_layernorm_prewarm(ctx, "sm_90", JITOP_FLOAT32, cols);
    if (st != JITOP_OK)
        fprintf(stderr, "fleet_node: jitop_layernorm_prewarm: %s\n", jitop_errmsg(ctx));
    double t1 = now_ms();
    jitop_ctx_destroy(ctx); /* drains the pushes */
    printf("{\"prewarm_ms\":%.1f,\"drain_ms\":%.1f}\n", t1 - t0, now_ms() - t1);
    return st == JITOP_OK ? 0 : 1;
}

int main(int argc, char **argv)
{
    if (argc == 4 && strcmp(argv[1], "--prewarm-layernorm") == 0)
        return prewarm_layernorm(argv[2], atoi(argv[3]));
    if (argc == 4 && strcmp(argv[1], "--gpu-layernorm") == 0)
        return gpu_layernorm(argv[2], atoi(argv[3]));
    if (argc < 4 || strcmp(argv[1], "--cache") != 0) {
        fprintf(stderr, "usage: fleet_node --cache DIR [--warm] UNIT...\n"
                        "       fleet_node --prewarm-layernorm DIR COLS\n"
                        "       fleet_node --gpu-layernorm DIR COLS\n");
        return 2;
    }
    const char *cache = argv[2];
    int warm = strcmp(argv[3], "--warm") == 0, first = warm ? 4 : 3;
    int rc = run_pass(cache, "cold", argc - first, argv + first);
    if (rc == 0 && warm)
        rc = run_pass(cache, "warm", argc - first, argv + first);
    return rc;
}
