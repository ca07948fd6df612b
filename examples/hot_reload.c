/*
 * Hot reload: launches the kernel of examples/hot_reload_kernel.cu every
 * 200 ms and prints its output. Edit the .cu file while this runs: the
 * output changes without a restart.
 *
 *   ./build/examples/hot_reload [SECONDS [KERNEL.cu]]
 *
 * SECONDS: how long to run (default: until Ctrl-C). KERNEL.cu: default
 * examples/hot_reload_kernel.cu (run from the repository root).
 */
#include <jitop.h>

#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define N 8

/* Called on jitop's watch thread after each rebuild (JITOP_RELOAD_AUTO). */
static void on_reload(void *user, jitop_module *m, int status, const char *message)
{
    (void)user;
    if (status == JITOP_OK)
        printf("reloaded (generation %llu)\n", (unsigned long long)jitop_module_generation(m));
    else
        printf("reload failed, the old code keeps running:\n%s\n", message);
    fflush(stdout);
}

static int cu_check(CUresult r, const char *what)
{
    if (r == CUDA_SUCCESS)
        return 0;
    const char *name = NULL;
    cuGetErrorName(r, &name);
    fprintf(stderr, "hot_reload: %s: %s\n", what, name ? name : "unknown CUDA error");
    return 1;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
    double seconds = argc > 1 ? atof(argv[1]) : 0; /* 0: forever */
    const char *path = argc > 2 ? argv[2] : "examples/hot_reload_kernel.cu";
    jitop_ctx *ctx = NULL;
    jitop_module *m = NULL;
    jitop_op *op = NULL;
    CUdeviceptr out = 0;
    int rc = 1, st;

    if ((st = jitop_ctx_create(NULL, &ctx)) != JITOP_OK ||
        (st = jitop_load(ctx, "hot_reload", &path, 1, NULL, 0, &m)) != JITOP_OK ||
        (st = jitop_op_get(m, "fill", &op)) != JITOP_OK ||
        (st = jitop_ctx_cuda(ctx, NULL, NULL)) != JITOP_OK ||
        (st = jitop_watch(m, JITOP_RELOAD_AUTO, on_reload, NULL)) != JITOP_OK) {
        fprintf(stderr, "hot_reload: %s: %s\n", jitop_strerror(st), jitop_errmsg(ctx));
        goto out;
    }
    if (cu_check(cuMemAlloc(&out, N * sizeof(int)), "cuMemAlloc"))
        goto out;
    printf("watching %s: edit it and save (%s)\n", path,
           seconds > 0 ? "running for a while" : "Ctrl-C to stop");
    double end = now_s() + seconds;
    while (seconds <= 0 || now_s() < end) {
        int n = N, host[N];
        void *args[] = {&out, &n};
        size_t sizes[] = {sizeof out, sizeof n};
        jitop_dim3 grid = {1, 1, 1}, block = {N, 1, 1};
        st = jitop_launch(op, grid, block, 0, NULL, args, sizes, 2);
        if (st != JITOP_OK) {
            /* A save that renamed the kernel or changed its parameters:
             * say so and keep going until the next save fixes it. */
            printf("launch: %s: %s\n", jitop_strerror(st), jitop_errmsg(ctx));
        } else {
            if (cu_check(cuMemcpyDtoH(host, out, sizeof host), "cuMemcpyDtoH"))
                goto out;
            printf("generation %llu: out =", (unsigned long long)jitop_module_generation(m));
            for (int i = 0; i < N; i++)
                printf(" %d", host[i]);
            printf("\n");
        }
        fflush(stdout);
        struct timespec pause = {0, 200 * 1000 * 1000};
        nanosleep(&pause, NULL);
    }
    rc = 0;
out:
    if (out && cu_check(cuMemFree(out), "cuMemFree"))
        rc = 1;
    jitop_ctx_destroy(ctx); /* stops the watch, unloads the module */
    return rc;
}
