/*
 * The compile path and the cache, against NVRTC called directly:
 *  - cold: jitop_build into an empty cache vs bench_nvrtc_compile on the same
 *    source, arch, include path and name expressions (both after one warm-up
 *    compile in the process, so that NVRTC's first-call start-up is in
 *    neither);
 *  - warm, new process: a fresh process creates a context and calls
 *    jitop_build on a cached source (stat fast path + reading the entry);
 *    the process start is excluded, the context creation reported apart;
 *  - warm, same context: the same call again in one process;
 *  - hashed: no manifest (as after a touch or a first build of a prewarmed
 *    entry), so every file is read and hashed before the entry is read.
 *
 * Usage: cache_bench [--source PATH] [--arch ARCH] [--name EXPR]... [--reps N]
 * Default: kernels/lltm.cu with the float name expressions src/ops/lltm.c asks
 * for (read from src/ops/lltm.c; run from the source tree), sm_90. Prints one JSON object per figure (bench_util.h) on stdout and
 * a summary on stderr. Needs NVRTC, no GPU.
 */
#include "bench_nvrtc.h"
#include "bench_util.h"
#include "jitop.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_NAMES 64

/* The float name expressions src/ops/lltm.c instantiates, read from it so that
 * the bench follows the op as it changes: each {"lltm_...<float, ...>", ...}
 * table row. Kept in names_buf; returns how many were found. */
static char names_buf[8192];

static size_t lltm_float_names(const char **names, size_t cap)
{
    char *text = NULL;
    size_t len = 0, n = 0, used = 0;
    if (bench_read_file("src/ops/lltm.c", &text, &len) != 0)
        return 0;
    for (char *p = strstr(text, "{\"lltm_"); p && n < cap; p = strstr(p + 1, "{\"lltm_")) {
        char *start = p + 2, *end = strchr(start, '"');
        size_t l = end ? (size_t)(end - start) : 0;
        if (!end || !memmem(start, l, "<float", 6) || used + l + 1 > sizeof names_buf)
            continue;
        memcpy(names_buf + used, start, l);
        names_buf[used + l] = '\0';
        names[n++] = names_buf + used;
        used += l + 1;
    }
    free(text);
    return n;
}

struct args {
    const char *source;
    const char *arch;
    const char *names[MAX_NAMES];
    size_t nnames;
    int reps;
};

static int parse_args(int argc, char **argv, struct args *a)
{
    a->source = "kernels/lltm.cu";
    a->arch = "sm_90";
    a->reps = bench_reps(7, 4, 2);
    for (int i = 1; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(argv[i], "--source") == 0 && v)
            a->source = v;
        else if (strcmp(argv[i], "--arch") == 0 && v)
            a->arch = v;
        else if (strcmp(argv[i], "--name") == 0 && v && a->nnames < MAX_NAMES)
            a->names[a->nnames++] = v;
        else if (strcmp(argv[i], "--reps") == 0 && v && atoi(v) > 0)
            a->reps = atoi(v);
        else {
            fprintf(stderr, "usage: cache_bench [--source PATH] [--arch ARCH] [--name EXPR]... "
                            "[--reps N]\n");
            return -1;
        }
        i++;
    }
    if (a->nnames == 0 && strstr(a->source, "lltm.cu"))
        a->nnames = lltm_float_names(a->names, MAX_NAMES);
    return 0;
}

static jitop_ctx *make_ctx(const char *cache, const char *arch)
{
    jitop_config cfg;
    jitop_config_init(&cfg);
    cfg.cache_dir = cache;
    cfg.arch = arch;
    cfg.compile_only = 1;
    cfg.verbose = 0;
    jitop_ctx *ctx = NULL;
    int st = jitop_ctx_create(&cfg, &ctx);
    if (st != JITOP_OK) {
        fprintf(stderr, "cache_bench: jitop_ctx_create(%s): %s\n", cache, jitop_errmsg(NULL));
        return NULL;
    }
    return ctx;
}

/* The child of the new-process figure: prints "<ctx ms> <build ms> <cached>". */
static int warm_child(const char *cache, const struct args *a)
{
    double t0 = bench_now_ms();
    jitop_ctx *ctx = make_ctx(cache, a->arch);
    double t1 = bench_now_ms();
    if (!ctx)
        return 1;
    jitop_build_result r;
    int st = jitop_build(ctx, a->source, NULL, NULL, 0, a->names, a->nnames, &r);
    double t2 = bench_now_ms();
    if (st != JITOP_OK) {
        fprintf(stderr, "cache_bench: %s\n", jitop_errmsg(ctx));
        return 1;
    }
    printf("%.6f %.6f %d\n", t1 - t0, t2 - t1, r.cached);
    jitop_ctx_destroy(ctx);
    return 0;
}

/* Runs the child in a new process (fork + exec of this program). */
static int run_child(char *self, const char *cache, char **argv_rest, int nrest, double *ctx_ms,
                     double *build_ms)
{
    int fds[2];
    if (pipe(fds) != 0)
        return -1;
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        char *argv[128] = {self, "--warm-child", (char *)cache};
        for (int i = 0; i < nrest && i < 120; i++)
            argv[3 + i] = argv_rest[i];
        dup2(fds[1], 1);
        close(fds[0]);
        execv("/proc/self/exe", argv);
        _exit(127);
    }
    close(fds[1]);
    char buf[256];
    ssize_t n = read(fds[0], buf, sizeof buf - 1);
    close(fds[0]);
    int ws = 0, cached = 0;
    if (waitpid(pid, &ws, 0) != pid || !WIFEXITED(ws) || WEXITSTATUS(ws) != 0 || n <= 0)
        return -1;
    buf[n] = '\0';
    if (sscanf(buf, "%lf %lf %d", ctx_ms, build_ms, &cached) != 3 || !cached)
        return -1;
    return 0;
}

static char *source_dir(const char *path)
{
    char *abs = realpath(path, NULL);
    if (!abs)
        return NULL;
    char *slash = strrchr(abs, '/');
    if (slash && slash != abs)
        *slash = '\0';
    return abs;
}

int main(int argc, char **argv)
{
    struct args a = {0};
    if (argc >= 3 && strcmp(argv[1], "--warm-child") == 0) {
        if (parse_args(argc - 2, argv + 2, &a) != 0) /* argv[2], the cache, stands for argv[0] */
            return 2;
        return warm_child(argv[2], &a);
    }
    if (parse_args(argc, argv, &a) != 0)
        return 2;
    int rc = 1;
    char *text = NULL, *dir = NULL;
    size_t len = 0;
    char tmpl[] = "/tmp/jitop-cache-bench-XXXXXX";
    char *root = mkdtemp(tmpl);
    double *raw = calloc((size_t)a.reps, sizeof *raw), *cold = calloc((size_t)a.reps, sizeof *cold);
    double *wnew = calloc((size_t)a.reps * 4, sizeof *wnew), *wctx = calloc((size_t)a.reps * 4, sizeof *wctx);
    double *wsame = calloc((size_t)a.reps * 4, sizeof *wsame), *hashed = calloc((size_t)a.reps, sizeof *hashed);
    if (!root || !raw || !cold || !wnew || !wctx || !wsame || !hashed)
        goto out;
    if (bench_read_file(a.source, &text, &len) != 0 || !(dir = source_dir(a.source))) {
        fprintf(stderr, "cache_bench: cannot read %s: %s\n", a.source, strerror(errno));
        bench_emit_status("cache", a.source, "jitop", "cold compile", "failed", "source unreadable");
        goto out;
    }
    char inc[PATH_MAX + 3];
    snprintf(inc, sizeof inc, "-I%s", dir);
    const char *raw_opts[] = {inc};
    char err[2048];
    bench_nvrtc_out o;
    /* Warm-up: NVRTC's first call in a process loads its builtins (~100 ms). */
    if (bench_nvrtc_compile(text, a.source, a.arch, raw_opts, 1, a.names, a.nnames, &o, err,
                            sizeof err) != 0) {
        fprintf(stderr, "cache_bench: NVRTC: %s\n", err);
        goto out;
    }
    bench_nvrtc_out_free(&o);

    char cache[PATH_MAX];
    for (int i = 0; i < a.reps; i++) {
        /* Alternate which goes first, so that neither always gets warm caches. */
        for (int k = 0; k < 2; k++) {
            if ((i + k) % 2 == 0) {
                double t0 = bench_now_ms();
                int st = bench_nvrtc_compile(text, a.source, a.arch, raw_opts, 1, a.names,
                                             a.nnames, &o, err, sizeof err);
                raw[i] = bench_now_ms() - t0;
                if (st != 0) {
                    fprintf(stderr, "cache_bench: NVRTC: %s\n", err);
                    goto out;
                }
                bench_nvrtc_out_free(&o);
            } else {
                snprintf(cache, sizeof cache, "%s/cold%d", root, i);
                jitop_ctx *ctx = make_ctx(cache, a.arch);
                if (!ctx)
                    goto out;
                jitop_build_result r;
                double t0 = bench_now_ms();
                int st = jitop_build(ctx, a.source, NULL, NULL, 0, a.names, a.nnames, &r);
                cold[i] = bench_now_ms() - t0;
                if (st != JITOP_OK || r.cached) {
                    fprintf(stderr, "cache_bench: jitop_build: %s\n",
                            st ? jitop_errmsg(ctx) : "unexpected cache hit");
                    jitop_ctx_destroy(ctx);
                    goto out;
                }
                jitop_ctx_destroy(ctx);
            }
        }
    }

    /* Warm: the last cold cache holds the entry and a manifest. */
    int nwarm = a.reps * 4;
    char *rest[2 * MAX_NAMES + 8];
    int nrest = 0;
    rest[nrest++] = "--source";
    rest[nrest++] = (char *)a.source;
    rest[nrest++] = "--arch";
    rest[nrest++] = (char *)a.arch;
    for (size_t i = 0; i < a.nnames; i++) {
        rest[nrest++] = "--name";
        rest[nrest++] = (char *)a.names[i];
    }
    rest[nrest] = NULL;
    for (int i = 0; i < nwarm; i++) {
        if (run_child(argv[0], cache, rest, nrest, &wctx[i], &wnew[i]) != 0) {
            fprintf(stderr, "cache_bench: the warm child failed\n");
            goto out;
        }
    }
    jitop_ctx *ctx = make_ctx(cache, a.arch);
    if (!ctx)
        goto out;
    for (int i = 0; i < nwarm; i++) {
        jitop_build_result r;
        double t0 = bench_now_ms();
        int st = jitop_build(ctx, a.source, NULL, NULL, 0, a.names, a.nnames, &r);
        wsame[i] = bench_now_ms() - t0;
        if (st != JITOP_OK || !r.cached) {
            jitop_ctx_destroy(ctx);
            goto out;
        }
    }
    /* Hashed: another cache dir whose entry exists but whose manifest is
     * gone, so the key comes from reading and hashing every file. */
    for (int i = 0; i < a.reps; i++) {
        char cmd[PATH_MAX + 96];
        /* v*: whatever the format version's directory is called. */
        snprintf(cmd, sizeof cmd, "rm -rf '%s'/v*/manifests", cache);
        if (system(cmd) != 0)
            break;
        jitop_build_result r;
        double t0 = bench_now_ms();
        int st = jitop_build(ctx, a.source, NULL, NULL, 0, a.names, a.nnames, &r);
        hashed[i] = bench_now_ms() - t0;
        if (st != JITOP_OK || !r.cached) {
            jitop_ctx_destroy(ctx);
            goto out;
        }
    }
    jitop_ctx_destroy(ctx);

    bench_stats sr, sc, sn, sx, ss, sh;
    bench_stats_of(raw, (size_t)a.reps, &sr);
    bench_stats_of(cold, (size_t)a.reps, &sc);
    bench_stats_of(wnew, (size_t)nwarm, &sn);
    bench_stats_of(wctx, (size_t)nwarm, &sx);
    bench_stats_of(wsame, (size_t)nwarm, &ss);
    bench_stats_of(hashed, (size_t)a.reps, &sh);
    fprintf(stderr,
            "cache_bench: %s for %s, %zu name expressions, %d reps\n"
            "  cold compile: NVRTC direct %.2f ms, jitop_build %.2f ms (%+.1f%%)\n"
            "  warm hit, new process: jitop_build %.3f ms (+ context creation %.3f ms)\n"
            "  warm hit, same context: %.3f ms; without a manifest (hashing every file): %.3f ms\n",
            a.source, a.arch, a.nnames, a.reps, sr.median, sc.median,
            100.0 * (sc.median - sr.median) / sr.median, sn.median, sx.median, ss.median,
            sh.median);
    if (bench_emit("compile", a.source, "nvrtc", "cold compile", "ms", raw, (size_t)a.reps) ||
        bench_emit("compile", a.source, "jitop", "cold compile", "ms", cold, (size_t)a.reps) ||
        bench_emit("cache", a.source, "jitop", "warm hit, new process", "ms", wnew, (size_t)nwarm) ||
        bench_emit_detail("cache", a.source, "jitop", "context creation, new process", "ms", wctx,
                          (size_t)nwarm) ||
        bench_emit_detail("cache", a.source, "jitop", "warm hit, same context", "ms", wsame,
                          (size_t)nwarm) ||
        bench_emit_detail("cache", a.source, "jitop", "hit without a manifest (hashing every file)", "ms", hashed,
                          (size_t)a.reps))
        goto out;
    rc = 0;
out:
    if (root) {
        char cmd[PATH_MAX + 16];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
        if (system(cmd) != 0)
            fprintf(stderr, "cache_bench: could not remove %s\n", root);
    }
    free(raw); free(cold); free(wnew); free(wctx); free(wsame); free(hashed);
    free(text); free(dir);
    return rc;
}
