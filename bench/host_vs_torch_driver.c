/* jitop's half of bench/host_vs_torch.py: the LLTM extension (a host file
 * and kernels/lltm.cu in one jitop_load), timed in the process this driver
 * runs as. Prints one JSON object on stdout.
 *
 *   host_vs_torch_driver load CACHE HOST.c LLTM.cu
 *     ctx + jitop_load + jitop_fn_get (load_ms), then the CUDA context,
 *     the buffers, one lltm_forward and cuCtxSynchronize (first_call_ms,
 *     from the same start). Cold or warm depending on CACHE.
 *   host_vs_torch_driver edit CACHE HOST.c LLTM.cu EDITS
 *     loads, calls lltm_forward once, jitop_watch(AUTO); then EDITS times:
 *     rewrites HOST.c (a copy: its lltm_host_version() returns N, the edit
 *     makes it N + 1, saved as an editor does, temp file + rename) and
 *     times from before the write to the first jitop_call of
 *     lltm_host_version that returns N + 1, then one lltm_forward in the
 *     new code, synced (edit_ms, edit_first_call_ms: lists).
 * Exit 0 on success, 1 on a failed step (message on stderr). */
#include <jitop.h>

#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define B 16
#define I 32
#define S 128
#define K (S + I)
#define MAX_EDITS 16
#define LIVE_TIMEOUT_MS 120000.0

static const char FWD_SIG[] = "int(ptr, ptr, ptr, ptr, ptr, ptr, ptr, ptr, i32, i32, i32, ptr)";
static const char VERSION_MARK[] = "lltm_host_version, (void))\n{\n    return ";

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int fail(const char *what, int status)
{
    fprintf(stderr, "host_vs_torch_driver: %s: %s: %s\n", what, jitop_strerror(status),
            jitop_errmsg(NULL));
    return 1;
}

struct bufs {
    CUdeviceptr x, w, b, h, c, nh, nc, saved;
};

static int alloc_one(CUdeviceptr *p, size_t bytes)
{
    /* A constant fill: the figures are times, the values only have to be
     * finite (main.c of the example checks the numbers). */
    if (cuMemAlloc(p, bytes) != CUDA_SUCCESS)
        return -1;
    return cuMemsetD32(*p, 0x3c23d70a /* 0.01f */, bytes / 4) == CUDA_SUCCESS ? 0 : -1;
}

static int alloc_bufs(struct bufs *d)
{
    size_t f = sizeof(float);
    size_t saved = jitop_lltm_saved_size(JITOP_FLOAT32, B, I, S);
    if (alloc_one(&d->x, B * I * f) || alloc_one(&d->w, (size_t)3 * S * K * f) ||
        alloc_one(&d->b, 3 * S * f) || alloc_one(&d->h, B * S * f) ||
        alloc_one(&d->c, B * S * f) || alloc_one(&d->nh, B * S * f) ||
        alloc_one(&d->nc, B * S * f) || alloc_one(&d->saved, (saved + 3) / 4 * 4)) {
        fprintf(stderr, "host_vs_torch_driver: cuMemAlloc or cuMemsetD32 failed\n");
        return -1;
    }
    return 0;
}

static int forward(jitop_fn *fwd, struct bufs *d)
{
    int nB = B, nI = I, nS = S, ret = -1;
    void *stream = NULL;
    void *args[] = {&d->x, &d->w, &d->b, &d->h, &d->c, &d->nh, &d->nc, &d->saved,
                    &nB,   &nI,   &nS,   &stream};
    int st = jitop_call(fwd, args, &ret);
    if (st != JITOP_OK || ret != JITOP_OK)
        return fail("lltm_forward", st != JITOP_OK ? st : ret);
    if (cuCtxSynchronize() != CUDA_SUCCESS) {
        fprintf(stderr, "host_vs_torch_driver: lltm_forward's kernels failed\n");
        return 1;
    }
    return 0;
}

static int load(const char *cache, const char *host, const char *cu, jitop_ctx **ctx,
                jitop_module **m, jitop_fn **fwd)
{
    jitop_config cfg;
    jitop_config_init(&cfg);
    cfg.cache_dir = cache;
    int st = jitop_ctx_create(&cfg, ctx);
    if (st != JITOP_OK)
        return fail("jitop_ctx_create", st);
    const char *srcs[] = {host, cu};
    if ((st = jitop_load(*ctx, "lltm_extension", srcs, 2, NULL, 0, m)) != JITOP_OK)
        return fail("jitop_load", st);
    if ((st = jitop_fn_get(*m, "lltm_forward", FWD_SIG, fwd)) != JITOP_OK)
        return fail("jitop_fn_get lltm_forward", st);
    return 0;
}

static char *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    char *buf = NULL;
    long n = -1;
    if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0 &&
        (buf = malloc((size_t)n + 1)) && fread(buf, 1, (size_t)n, f) == (size_t)n) {
        buf[n] = 0;
        *len = (size_t)n;
    } else {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    return buf;
}

/* Rewrites path with lltm_host_version's "return N;" as "return to;", as an
 * editor saves: a temp file beside it, then rename. */
static int set_version(const char *path, int to)
{
    size_t len = 0;
    char *text = read_file(path, &len);
    char *at = text ? strstr(text, VERSION_MARK) : NULL;
    if (!at) {
        fprintf(stderr, "host_vs_torch_driver: %s: no lltm_host_version() to edit\n", path);
        free(text);
        return -1;
    }
    char *num = at + sizeof VERSION_MARK - 1, *end = NULL;
    strtol(num, &end, 10);
    char tmp[4096];
    int n = snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = n > 0 && (size_t)n < sizeof tmp ? fopen(tmp, "wb") : NULL;
    int bad = !f || end == num;
    if (!bad) {
        bad |= fwrite(text, 1, (size_t)(num - text), f) != (size_t)(num - text);
        bad |= fprintf(f, "%d", to) < 0;
        bad |= fwrite(end, 1, len - (size_t)(end - text), f) != len - (size_t)(end - text);
    }
    if (f)
        bad |= fclose(f) != 0;
    if (!bad)
        bad = rename(tmp, path) != 0;
    if (bad)
        fprintf(stderr, "host_vs_torch_driver: could not rewrite %s\n", path);
    free(text);
    return bad ? -1 : 0;
}

static void print_list(const char *key, const double *v, int n, int last)
{
    printf("\"%s\": [", key);
    for (int i = 0; i < n; i++)
        printf("%s%.3f", i ? ", " : "", v[i]);
    printf("]%s", last ? "" : ", ");
}

int main(int argc, char **argv)
{
    if (argc < 5 || (strcmp(argv[1], "load") && strcmp(argv[1], "edit")) ||
        (!strcmp(argv[1], "edit") && argc < 6)) {
        fprintf(stderr, "usage: %s load|edit CACHE HOST.c LLTM.cu [EDITS]\n", argv[0]);
        return 2;
    }
    jitop_ctx *ctx = NULL;
    jitop_module *m = NULL;
    jitop_fn *fwd = NULL, *ver = NULL;
    struct bufs d;
    double t0 = now_ms();
    if (load(argv[2], argv[3], argv[4], &ctx, &m, &fwd))
        return 1;
    double load_ms = now_ms() - t0;
    int st = jitop_ctx_cuda(ctx, NULL, NULL);
    if (st != JITOP_OK)
        return fail("jitop_ctx_cuda", st);
    if (alloc_bufs(&d) || forward(fwd, &d))
        return 1;
    double first_ms = now_ms() - t0;
    if (!strcmp(argv[1], "load")) {
        printf("{\"load_ms\": %.3f, \"first_call_ms\": %.3f}\n", load_ms, first_ms);
        jitop_ctx_destroy(ctx);
        return 0;
    }

    int edits = atoi(argv[5]);
    if (edits < 1 || edits > MAX_EDITS) {
        fprintf(stderr, "host_vs_torch_driver: EDITS must be 1..%d\n", MAX_EDITS);
        return 2;
    }
    int version = -1;
    if ((st = jitop_fn_get(m, "lltm_host_version", "int(void)", &ver)) != JITOP_OK ||
        (st = jitop_call(ver, NULL, &version)) != JITOP_OK)
        return fail("lltm_host_version", st);
    if ((st = jitop_watch(m, JITOP_RELOAD_AUTO, NULL, NULL)) != JITOP_OK)
        return fail("jitop_watch", st);
    double edit_ms[MAX_EDITS], edit_call_ms[MAX_EDITS];
    for (int e = 0; e < edits; e++) {
        int want = version + 1, got = version;
        double start = now_ms();
        if (set_version(argv[3], want))
            return 1;
        while (got != want) {
            if ((st = jitop_call(ver, NULL, &got)) != JITOP_OK)
                return fail("lltm_host_version after the edit", st);
            if (got != want && now_ms() - start > LIVE_TIMEOUT_MS) {
                fprintf(stderr, "host_vs_torch_driver: edit %d not live after %.0f ms\n", e,
                        LIVE_TIMEOUT_MS);
                return 1;
            }
            if (got != want)
                usleep(100);
        }
        edit_ms[e] = now_ms() - start;
        if (forward(fwd, &d))
            return 1;
        edit_call_ms[e] = now_ms() - start;
        version = want;
    }
    printf("{\"load_ms\": %.3f, \"first_call_ms\": %.3f, ", load_ms, first_ms);
    print_list("edit_ms", edit_ms, edits, 0);
    print_list("edit_first_call_ms", edit_call_ms, edits, 1);
    printf("}\n");
    if ((st = jitop_unwatch(m)) != JITOP_OK)
        return fail("jitop_unwatch", st);
    jitop_ctx_destroy(ctx);
    return 0;
}
