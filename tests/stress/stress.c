/* make stress: PROCS processes share one cache for SECONDS, each looping
 * over building (through the cache, as jitop_load does), gc with and without
 * a cap, clean, and opening a new context. Passes when every build
 * succeeded and gave exactly the binary of a reference compile, nothing
 * else failed, and afterwards every entry and manifest in the cache is
 * valid, no temporary file or trash directory is left, and every unit still
 * builds to its reference.
 *
 *   stress [PROCS [SECONDS]]     (defaults: 8 processes, 60 seconds)
 *
 * Prints one summary line; exits 0 on success, 1 on any failure (each one
 * is printed with the process and the step). */
#include "testutil.h"

#include "build/build.h"
#include "cache/cache_private.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define NSOURCES 3
#define NVARIANTS 2
#define NUNITS (NSOURCES * NVARIANTS)

struct unit {
    char *path;
    char opt[32];
    jitop__binary ref;
};

static struct unit units[NUNITS];

/* What a worker counts; sent to the parent through a pipe at its end. */
struct counts {
    long builds, hits, gcs, cleans, opens, failures;
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static jitop_ctx *open_ctx(const char *cache)
{
    jitop_config cfg;
    jitop_config_init(&cfg);
    cfg.cache_dir = cache;
    cfg.arch = "sm_90";
    cfg.compile_only = 1;
    jitop_ctx *ctx = NULL;
    int st = jitop_ctx_create(&cfg, &ctx);
    if (st != JITOP_OK) {
        fprintf(stderr, "stress[%d]: open %s: %s: %s\n", (int)getpid(), cache,
                jitop_strerror(st), jitop_errmsg(NULL));
        return NULL;
    }
    return ctx;
}

/* Builds unit i through ctx's cache; 0 when it matched the reference (or,
 * with ref NULL, stores the binary as the reference). */
static int build_one(jitop_ctx *ctx, int i, jitop__binary *ref, bool *hit)
{
    const char *opts[] = {units[i].opt};
    jitop__unit u;
    jitop__built b;
    int st = jitop__unit_init(&u, units[i].path, NULL, opts, 1, NULL, 0, "sm_90");
    if (st == JITOP_OK) {
        st = jitop__build_unit(ctx, &u, &b);
        jitop__unit_free(&u);
    }
    if (st != JITOP_OK) {
        fprintf(stderr, "stress[%d]: build %s %s: %s: %s\n", (int)getpid(), units[i].path,
                units[i].opt, jitop_strerror(st), jitop_errmsg(ctx));
        return 1;
    }
    int rc = 0;
    *hit = b.cached;
    if (!ref) {
        units[i].ref = b.entry.bin;
        memset(&b.entry.bin, 0, sizeof b.entry.bin);
    } else if (b.entry.bin.size != ref->size || b.entry.bin.is_ptx != ref->is_ptx ||
               memcmp(b.entry.bin.data, ref->data, ref->size) != 0) {
        fprintf(stderr,
                "stress[%d]: %s %s (key %s, %s): %zu bytes differ from the reference's %zu\n",
                (int)getpid(), units[i].path, units[i].opt, b.key,
                b.cached ? "cache hit" : "compiled", (size_t)b.entry.bin.size,
                (size_t)ref->size);
        rc = 1;
    }
    jitop__built_free(&b);
    return rc;
}

static struct counts worker(const char *cache, double seconds, unsigned seed)
{
    struct counts n = {0};
    jitop_ctx *ctx = open_ctx(cache);
    if (!ctx) {
        n.failures++;
        return n;
    }
    double end = now_s() + seconds;
    while (now_s() < end) {
        unsigned r = (unsigned)rand_r(&seed) % 100;
        if (r < 70) {
            bool hit = false;
            int i = rand_r(&seed) % NUNITS;
            n.failures += build_one(ctx, i, &units[i].ref, &hit);
            n.builds++;
            n.hits += hit;
        } else if (r < 82) {
            /* No cap, a cap of about one entry, or nothing (evicts all). */
            int64_t caps[] = {-1, (int64_t)units[0].ref.size + 4096, 0}, freed = 0;
            int64_t cap = caps[rand_r(&seed) % 3];
            int st = jitop_cache_gc(ctx, cap < 0 ? INT64_MAX : cap, &freed);
            if (st != JITOP_OK) {
                fprintf(stderr, "stress[%d]: gc: %s: %s\n", (int)getpid(), jitop_strerror(st),
                        jitop_errmsg(ctx));
                n.failures++;
            }
            n.gcs++;
        } else if (r < 92) {
            int st = jitop_cache_clean(ctx);
            if (st != JITOP_OK) {
                fprintf(stderr, "stress[%d]: clean: %s: %s\n", (int)getpid(),
                        jitop_strerror(st), jitop_errmsg(ctx));
                n.failures++;
            }
            n.cleans++;
        } else {
            jitop_ctx_destroy(ctx);
            ctx = open_ctx(cache);
            n.opens++;
            if (!ctx) {
                n.failures++;
                break;
            }
        }
    }
    jitop_ctx_destroy(ctx);
    return n;
}

/* Checks every file under the cache tree once the workers are done. */
static int check_tree(jitop_ctx *ctx, const char *dir, int depth, long *entries,
                      long *manifests)
{
    int failures = 0;
    DIR *d = opendir(dir);
    if (!d) {
        fprintf(stderr, "stress: opendir %s: %s\n", dir, strerror(errno));
        return 1;
    }
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        const char *n = de->d_name;
        if (strcmp(n, ".") == 0 || strcmp(n, "..") == 0)
            continue;
        char *path = jt_path(dir, n);
        if (strncmp(n, ".tmp-", 5) == 0 || strncmp(n, ".jitop-trash-", 13) == 0 ||
            strstr(n, ".aside-")) {
            fprintf(stderr, "stress: left behind: %s\n", path);
            failures++;
        } else if (de->d_type == DT_DIR) {
            failures += check_tree(ctx, path, depth + 1, entries, manifests);
        } else if (jitop__is_hex(n, 32)) {
            bool found = false;
            int st;
            if (strstr(path, "/manifests/")) {
                jitop__deps deps;
                char key[33];
                st = jitop__manifest_get(ctx->cache, n, &deps, key, &found);
                if (st == JITOP_OK && found)
                    jitop__deps_free(&deps);
                (*manifests)++;
            } else {
                st = jitop__cache_peek(ctx->cache, n, &found);
                (*entries)++;
            }
            if (st != JITOP_OK || !found) {
                fprintf(stderr, "stress: invalid after the run: %s (%s)\n", path,
                        st != JITOP_OK ? jitop_errmsg(ctx) : "fails its checks");
                failures++;
            }
        }
        free(path);
    }
    closedir(d);
    return failures;
}

int main(int argc, char **argv)
{
    int procs = argc > 1 ? atoi(argv[1]) : 8;
    double seconds = argc > 2 ? atof(argv[2]) : 60;
    if (procs < 1 || seconds <= 0) {
        fprintf(stderr, "usage: stress [PROCS [SECONDS]]\n");
        return 2;
    }
    char *dir = jt_tmpdir(), *cache = jt_tmpdir(), *scratch = jt_tmpdir();
    free(jt_write(dir, "common.cuh", "#pragma once\n#define SCALE 3.0f\n"));
    for (int s = 0; s < NSOURCES; s++) {
        char name[32], text[512];
        snprintf(name, sizeof name, "k%d.cu", s);
        snprintf(text, sizeof text,
                 "#include \"common.cuh\"\n"
                 "extern \"C\" __global__ void k%d(float *x, int n) {\n"
                 "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
                 "  if (i < n) x[i] = x[i] * SCALE + V + %d;\n}\n",
                 s, s);
        char *path = jt_write(dir, name, text);
        for (int v = 0; v < NVARIANTS; v++) {
            units[s * NVARIANTS + v].path = v == 0 ? path : strdup(path);
            snprintf(units[s * NVARIANTS + v].opt, sizeof units[0].opt, "-DV=%d", v);
        }
    }
    /* The references: each unit compiled once into a cache of its own. */
    jitop_ctx *ref = open_ctx(scratch);
    int failures = ref ? 0 : 1;
    for (int i = 0; ref && i < NUNITS; i++) {
        bool hit = false;
        failures += build_one(ref, i, NULL, &hit);
    }
    jitop_ctx_destroy(ref);
    if (failures)
        return 1;

    int pipes[2];
    if (pipe(pipes) != 0) {
        perror("stress: pipe");
        return 1;
    }
    for (int p = 0; p < procs; p++) {
        pid_t pid = fork();
        if (pid < 0) {
            perror("stress: fork");
            return 1;
        }
        if (pid == 0) {
            close(pipes[0]);
            struct counts n = worker(cache, seconds, (unsigned)(time(NULL) ^ (p * 7919)));
            ssize_t w = write(pipes[1], &n, sizeof n);
            _exit(w == (ssize_t)sizeof n && n.failures == 0 ? 0 : 1);
        }
    }
    close(pipes[1]);
    struct counts total = {0}, n;
    int reported = 0;
    while (read(pipes[0], &n, sizeof n) == (ssize_t)sizeof n) {
        total.builds += n.builds;
        total.hits += n.hits;
        total.gcs += n.gcs;
        total.cleans += n.cleans;
        total.opens += n.opens;
        total.failures += n.failures;
        reported++;
    }
    close(pipes[0]);
    for (int p = 0; p < procs; p++) {
        int ws = 0;
        if (wait(&ws) < 0 || !WIFEXITED(ws) || WEXITSTATUS(ws) != 0)
            failures++;
    }
    if (reported != procs)
        fprintf(stderr, "stress: %d of %d processes did not report\n", procs - reported, procs);

    /* Afterwards: every file valid, nothing left over, every unit builds to
     * its reference (from the cache or compiled again). */
    long entries = 0, manifests = 0;
    jitop_ctx *ctx = open_ctx(cache);
    if (!ctx) {
        failures++;
    } else {
        failures += check_tree(ctx, cache, 0, &entries, &manifests);
        for (int i = 0; i < NUNITS; i++) {
            bool hit = false;
            failures += build_one(ctx, i, &units[i].ref, &hit);
        }
        jitop_ctx_destroy(ctx);
    }
    printf("stress: %d processes, %.0f s: %ld builds (%ld cache hits), %ld gc, %ld clean, "
           "%ld opens; afterwards %ld entries and %ld manifests checked; %ld failures\n",
           procs, seconds, total.builds, total.hits, total.gcs, total.cleans, total.opens,
           entries, manifests, total.failures + failures);
    for (int i = 0; i < NUNITS; i++) {
        free(units[i].path);
        jitop__binary_free(&units[i].ref);
    }
    free(dir);
    free(cache);
    free(scratch);
    jt_cleanup();
    return total.failures + failures == 0 && reported == procs ? 0 : 1;
}
