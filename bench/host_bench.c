/* Host ops against doing it by hand, side by side in one run, on the CPU:
 *  - cold build of examples/lltm_extension/lltm_host.c into a fresh cache
 *    (jitop's own builder, and ninja when there is one) against running the
 *    compiler by hand on the same file and flags (compile, then link);
 *  - warm jitop_ctx_create + jitop_load + jitop_fn_get in a new process
 *    against dlopen + dlsym of the hand-built object in a new process;
 *  - jitop_call (libffi) against a direct call through the address.
 * Prints bench_util.h's JSON lines. */
#include "bench_util.h"
#include "jitop.h"

#include <dlfcn.h>
#include <ffi.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

#define HOST_SRC JITOP_SOURCE_KERNEL_DIR "/../examples/lltm_extension/lltm_host.c"
#define INCLUDE JITOP_SOURCE_KERNEL_DIR "/../include"

static int run(char *const argv[])
{
    pid_t pid;
    int ws = 0;
    if (posix_spawnp(&pid, argv[0], NULL, NULL, argv, environ) != 0 || waitpid(pid, &ws, 0) != pid)
        return -1;
    return WIFEXITED(ws) ? WEXITSTATUS(ws) : -1;
}

/* *ms: the whole (context, load, fn_get); *ctx_ms: jitop_ctx_create's
 * share, which a host-only module pays once per process (as kernels pay
 * cuInit and the CUDA context), so that the load itself is compared with
 * dlopen + dlsym beyond it. */
static int load_once(const char *cache, double *ms, double *ctx_ms)
{
    jitop_config cfg;
    jitop_config_init(&cfg);
    cfg.cache_dir = cache;
    cfg.compile_only = 1;
    jitop_ctx *ctx = NULL;
    jitop_module *m = NULL;
    jitop_fn *f = NULL;
    const char *srcs[] = {HOST_SRC};
    double t = bench_now_ms();
    int st = jitop_ctx_create(&cfg, &ctx);
    if (ctx_ms)
        *ctx_ms = bench_now_ms() - t;
    if (st == JITOP_OK)
        st = jitop_load(ctx, "lltm_host", srcs, 1, NULL, 0, &m);
    if (st == JITOP_OK)
        st = jitop_fn_get(m, "lltm_forward",
                          "int(ptr, ptr, ptr, ptr, ptr, ptr, ptr, ptr, i32, i32, i32, ptr)", &f);
    *ms = bench_now_ms() - t;
    if (st != JITOP_OK)
        fprintf(stderr, "host_bench: %s: %s\n", jitop_strerror(st), jitop_errmsg(NULL));
    jitop_ctx_destroy(ctx);
    return st;
}

/* Child modes: print one time in ms. */
static int child(int argc, char **argv)
{
    double ms = 0, ctx_ms = 0;
    if (argc == 3 && strcmp(argv[1], "--warm") == 0) {
        if (load_once(argv[2], &ms, &ctx_ms) != JITOP_OK)
            return 1;
        printf("%.6f %.6f\n", ms, ctx_ms);
        return 0;
    } else if (argc == 3 && strcmp(argv[1], "--dlopen") == 0) {
        double t = bench_now_ms();
        void *h = dlopen(argv[2], RTLD_NOW | RTLD_LOCAL);
        void *s = h ? dlsym(h, "lltm_forward") : NULL;
        ms = bench_now_ms() - t;
        if (!s)
            return 1;
    } else {
        return 2;
    }
    printf("%.6f\n", ms);
    return 0;
}

/* The child's time in ms; *ctx_ms (when not NULL) its second figure. */
static double child_ms(const char *self, const char *mode, const char *arg, double *ctx_ms)
{
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "'%s' %s '%s'", self, mode, arg);
    FILE *p = popen(cmd, "r");
    double ms = -1;
    if (!p || fscanf(p, "%lf", &ms) != 1 || (ctx_ms && fscanf(p, "%lf", ctx_ms) != 1))
        ms = -1;
    if (p && pclose(p) != 0)
        ms = -1;
    return ms;
}

int main(int argc, char **argv)
{
    if (argc > 1)
        return child(argc, argv);
    char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0)
        return 1;
    self[n] = '\0';
    char dir[] = "/tmp/jitop-host-bench-XXXXXX";
    if (!mkdtemp(dir))
        return 1;
    int reps = bench_reps(7, 3, 1);
    double *a = calloc((size_t)reps, sizeof *a), *b = calloc((size_t)reps, sizeof *b);
    double *c = calloc((size_t)reps, sizeof *c);
    char so[4200], obj[4200], rt[4200], cache[4200];
    snprintf(rt, sizeof rt, "%s/rt.o", dir);
    snprintf(so, sizeof so, "%s/hand.so", dir);
    snprintf(obj, sizeof obj, "%s/hand.o", dir);
    int have_ninja = access("/usr/bin/ninja", X_OK) == 0 || getenv("JITOP_NINJA");
    for (int r = 0; r < reps; r++) {
        /* By hand, one after the other, with the flags jitop uses: the file,
         * the table's runtime object (jitop_host.h compiled as C), the link. */
        double t = bench_now_ms();
        char *cc1[] = {"cc", "-O2", "-fPIC", "-fvisibility=hidden", "-I" INCLUDE, "-c", HOST_SRC,
                       "-o", obj, NULL};
        char *cc2[] = {"cc", "-O2", "-fPIC", "-fvisibility=hidden", "-DJITOP_HOST_RUNTIME", "-xc",
                       "-c", INCLUDE "/jitop_host.h", "-o", rt, NULL};
        char *ld[] = {"cc", "-shared", obj, rt, "-o", so, NULL};
        if (run(cc1) != 0 || run(cc2) != 0 || run(ld) != 0)
            return 1;
        a[r] = bench_now_ms() - t;
        snprintf(cache, sizeof cache, "%s/cold-jitop-%d", dir, r);
        setenv("JITOP_NINJA", "0", 1);
        if (load_once(cache, &b[r], NULL) != JITOP_OK)
            return 1;
        if (have_ninja) {
            /* Ninja's build folder lives under TMPDIR: a fresh one per run,
             * or ninja would find the last run's objects up to date. */
            char tmp[4200];
            const char *old_tmp = getenv("TMPDIR");
            char *saved_tmp = old_tmp ? strdup(old_tmp) : NULL;
            snprintf(tmp, sizeof tmp, "%s/tmp-%d", dir, r);
            snprintf(cache, sizeof cache, "%s/cold-ninja-%d", dir, r);
            if (mkdir(tmp, 0700) != 0)
                return 1;
            setenv("TMPDIR", tmp, 1);
            unsetenv("JITOP_NINJA");
            int st = load_once(cache, &c[r], NULL);
            if (saved_tmp)
                setenv("TMPDIR", saved_tmp, 1);
            else
                unsetenv("TMPDIR");
            free(saved_tmp);
            if (st != JITOP_OK)
                return 1;
        }
    }
    bench_emit("host", "lltm_host.c", "cc by hand", "cold build (compile + link)", "ms", a,
               (size_t)reps);
    bench_emit("host", "lltm_host.c", "jitop", "cold build, own builder (load + fn_get)", "ms",
               b, (size_t)reps);
    if (have_ninja)
        bench_emit("host", "lltm_host.c", "jitop", "cold build, ninja (load + fn_get)", "ms", c,
                   (size_t)reps);

    /* Warm, each in a new process (the cache of the last cold run). */
    int wreps = bench_reps(25, 7, 2);
    double *w1 = calloc((size_t)wreps, sizeof *w1), *w2 = calloc((size_t)wreps, sizeof *w2);
    double *wc = calloc((size_t)wreps, sizeof *wc), *wl = calloc((size_t)wreps, sizeof *wl);
    for (int r = 0; r < wreps; r++) {
        w1[r] = child_ms(self, "--warm", cache, &wc[r]);
        w2[r] = child_ms(self, "--dlopen", so, NULL);
        if (w1[r] < 0 || w2[r] < 0)
            return 1;
        wl[r] = w1[r] - wc[r];
    }
    bench_emit("host", "lltm_host.c", "jitop", "warm ctx + load + fn_get, new process", "ms", w1,
               (size_t)wreps);
    bench_emit("host", "lltm_host.c", "jitop", "warm jitop_ctx_create alone, new process", "ms",
               wc, (size_t)wreps);
    bench_emit("host", "lltm_host.c", "jitop", "warm load + fn_get beyond ctx creation, new process",
               "ms", wl, (size_t)wreps);
    bench_emit("host", "lltm_host.c", "dlopen by hand", "dlopen + dlsym, new process", "ms", w2,
               (size_t)wreps);

    /* Calls: lltm_forward with B = 0 returns at its first check. */
    jitop_config cfg;
    jitop_config_init(&cfg);
    cfg.cache_dir = cache;
    cfg.compile_only = 1;
    jitop_ctx *ctx = NULL;
    jitop_module *m = NULL;
    jitop_fn *f = NULL;
    const char *srcs[] = {HOST_SRC};
    void *addr = NULL;
    if (jitop_ctx_create(&cfg, &ctx) != JITOP_OK ||
        jitop_load(ctx, "lltm_host", srcs, 1, NULL, 0, &m) != JITOP_OK ||
        jitop_fn_get(m, "lltm_forward",
                     "int(ptr, ptr, ptr, ptr, ptr, ptr, ptr, ptr, i32, i32, i32, ptr)",
                     &f) != JITOP_OK ||
        jitop_fn_addr(f, &addr) != JITOP_OK)
        return 1;
    typedef int (*fwd_t)(void *, void *, void *, void *, void *, void *, void *, void *, int, int,
                         int, void *);
    fwd_t direct = (fwd_t)addr;
    void *p = NULL;
    int zero = 0, one = 1, ret = 0;
    void *args[] = {&p, &p, &p, &p, &p, &p, &p, &p, &zero, &one, &one, &p};
    const int calls = 1000000, creps = bench_reps(7, 3, 1);
    double *d1 = calloc((size_t)creps, sizeof *d1), *d2 = calloc((size_t)creps, sizeof *d2);
    double *d3 = calloc((size_t)creps, sizeof *d3);
    /* libffi alone on the same prototype: the floor of jitop_call. */
    ffi_cif cif;
    ffi_type *at[12];
    for (int i = 0; i < 12; i++)
        at[i] = i >= 8 && i < 11 ? &ffi_type_sint32 : &ffi_type_pointer;
    if (ffi_prep_cif(&cif, FFI_DEFAULT_ABI, 12, &ffi_type_sint32, at) != FFI_OK)
        return 1;
    for (int r = 0; r < creps; r++) {
        double t = bench_now_ms();
        for (int i = 0; i < calls; i++)
            if (jitop_call(f, args, &ret) != JITOP_OK)
                return 1;
        d1[r] = (bench_now_ms() - t) * 1e6 / calls;
        volatile fwd_t vf = direct;
        t = bench_now_ms();
        for (int i = 0; i < calls; i++)
            ret += vf(p, p, p, p, p, p, p, p, zero, one, one, p);
        d2[r] = (bench_now_ms() - t) * 1e6 / calls;
        ffi_arg fr;
        t = bench_now_ms();
        for (int i = 0; i < calls; i++)
            ffi_call(&cif, FFI_FN(addr), &fr, args);
        d3[r] = (bench_now_ms() - t) * 1e6 / calls;
    }
    bench_emit("host", "lltm_forward (12 args)", "jitop", "jitop_call", "ns", d1, (size_t)creps);
    bench_emit("host", "lltm_forward (12 args)", "direct", "call through the address", "ns", d2,
               (size_t)creps);
    bench_emit("host", "lltm_forward (12 args)", "libffi", "ffi_call alone (same cif)", "ns", d3,
               (size_t)creps);
    jitop_ctx_destroy(ctx);
    char rm[128];
    snprintf(rm, sizeof rm, "rm -rf '%s'", dir);
    return system(rm) == 0 ? 0 : 1;
}
