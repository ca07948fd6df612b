#include "testutil.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_TMPDIRS 256
static char *tmpdirs[MAX_TMPDIRS];
static int ntmpdirs;
static int atexit_registered;

char *jt_tmpdir(void)
{
    const char *base = getenv("TMPDIR");
    char templ[4096];
    snprintf(templ, sizeof templ, "%s/jitop-test-XXXXXX", base && *base ? base : "/tmp");
    if (!mkdtemp(templ))
        fail_msg("mkdtemp %s: %s", templ, strerror(errno));
    char *dir = strdup(templ);
    assert_non_null(dir);
    if (!atexit_registered) {
        atexit(jt_cleanup);
        atexit_registered = 1;
    }
    if (ntmpdirs < MAX_TMPDIRS) {
        tmpdirs[ntmpdirs] = strdup(dir);
        assert_non_null(tmpdirs[ntmpdirs]);
        ntmpdirs++;
    }
    return dir;
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st; (void)ftw;
    /* Tests may leave read-only directories behind (unwritable-cache tests). */
    if (flag == FTW_DP || flag == FTW_D)
        chmod(path, 0700);
    return remove(path) == 0 || errno == ENOENT ? 0 : 0;
}

void jt_rm_rf(const char *path)
{
    /* Make every directory writable first so that the depth-first removal
     * can delete their entries. */
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "chmod -R u+rwx '%s' 2>/dev/null", path);
    int rc = system(cmd);
    (void)rc;
    nftw(path, rm_entry, 32, FTW_DEPTH | FTW_PHYS);
}

void jt_cleanup(void)
{
    if (getenv("JITOP_TEST_KEEP"))
        return;
    for (int i = 0; i < ntmpdirs; i++) {
        jt_rm_rf(tmpdirs[i]);
        free(tmpdirs[i]);
    }
    ntmpdirs = 0;
}

char *jt_path(const char *dir, const char *name)
{
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    assert_non_null(p);
    snprintf(p, n, "%s/%s", dir, name);
    return p;
}

static void mkparents(const char *path)
{
    char *p = strdup(path);
    assert_non_null(p);
    for (char *s = p + 1; *s; s++) {
        if (*s != '/')
            continue;
        *s = '\0';
        if (mkdir(p, 0700) != 0 && errno != EEXIST)
            fail_msg("mkdir %s: %s", p, strerror(errno));
        *s = '/';
    }
    free(p);
}

static void write_all(const char *path, const char *text)
{
    mkparents(path);
    FILE *f = fopen(path, "wb");
    if (!f)
        fail_msg("open %s: %s", path, strerror(errno));
    size_t n = strlen(text);
    if (fwrite(text, 1, n, f) != n)
        fail_msg("write %s failed", path);
    if (fclose(f) != 0)
        fail_msg("close %s: %s", path, strerror(errno));
}

char *jt_write(const char *dir, const char *name, const char *text)
{
    char *path = jt_path(dir, name);
    write_all(path, text);
    return path;
}

char *jt_write_rename(const char *dir, const char *name, const char *text)
{
    char *path = jt_path(dir, name);
    size_t n = strlen(path) + 16;
    char *tmp = malloc(n);
    assert_non_null(tmp);
    snprintf(tmp, n, "%s.swp~", path);
    write_all(tmp, text);
    if (rename(tmp, path) != 0)
        fail_msg("rename %s -> %s: %s", tmp, path, strerror(errno));
    free(tmp);
    return path;
}

void jt_stderr_begin(jt_stderr *c, const char *dir)
{
    c->path = jt_path(dir, "stderr.log");
    fflush(stderr);
    c->keep = dup(2);
    c->f = fopen(c->path, "w");
    if (c->keep < 0 || c->f == NULL || dup2(fileno(c->f), 2) < 0)
        fail_msg("capturing stderr into %s: %s", c->path, strerror(errno));
}

char *jt_stderr_end(jt_stderr *c)
{
    fflush(stderr);
    if (dup2(c->keep, 2) < 0 || close(c->keep) != 0 || fclose(c->f) != 0)
        fail_msg("restoring stderr: %s", strerror(errno));
    char *text = jt_read(c->path);
    free(c->path);
    c->path = NULL;
    return text;
}

char *jt_read(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        fail_msg("open %s: %s", path, strerror(errno));
    char *buf = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len + 4096 + 1 > cap) {
            cap = cap ? cap * 2 : 8192;
            buf = realloc(buf, cap);
            assert_non_null(buf);
        }
        size_t got = fread(buf + len, 1, 4096, f);
        len += got;
        if (got == 0)
            break;
    }
    fclose(f);
    buf[len] = '\0';
    return buf;
}

void jt_touch(const char *path, double delta_s)
{
    struct timespec now, ts[2];
    clock_gettime(CLOCK_REALTIME, &now);
    double t = (double)now.tv_sec + (double)now.tv_nsec / 1e9 + delta_s;
    ts[0].tv_sec = ts[1].tv_sec = (time_t)t;
    ts[0].tv_nsec = ts[1].tv_nsec = (long)((t - (double)(time_t)t) * 1e9);
    if (utimensat(AT_FDCWD, path, ts, 0) != 0)
        fail_msg("utimensat %s: %s", path, strerror(errno));
}

jitop_ctx *jt_ctx(const char *cache_dir, const char *arch)
{
    jitop_config cfg;
    jitop_config_init(&cfg);
    cfg.cache_dir = cache_dir;
    cfg.arch = arch ? arch : "sm_90";
    cfg.compile_only = 1;
    jitop_ctx *ctx = NULL;
    int st = jitop_ctx_create(&cfg, &ctx);
    if (st != JITOP_OK)
        fail_msg("jitop_ctx_create(%s): %s: %s", cache_dir, jitop_strerror(st), jitop_errmsg(NULL));
    return ctx;
}

jitop_ctx *jt_ctx_driver(const char *cache_dir)
{
    jitop_config cfg;
    jitop_config_init(&cfg);
    cfg.cache_dir = cache_dir;
    jitop_ctx *ctx = NULL;
    int st = jitop_ctx_create(&cfg, &ctx);
    if (st != JITOP_OK)
        fail_msg("jitop_ctx_create(%s): %s: %s", cache_dir, jitop_strerror(st), jitop_errmsg(NULL));
    return ctx;
}

static int run_once(const char *cmd, char **output);

/* The line LeakSanitizer prints when its own stop-the-world tracer dies at a
 * process's exit ("Tracer caught signal 11"): the run is lost (exit 1) with
 * no finding, a known intermittent failure of the sanitizer runtime
 * (google/sanitizers#1353). A leak found prints "detected memory leaks". */
#define LSAN_TRACER_DIED "LeakSanitizer has encountered a fatal error"

int jt_run(const char *cmd, char **output)
{
    char *out = NULL;
    int rc = run_once(cmd, &out);
    if (rc != 0 && strstr(out, LSAN_TRACER_DIED)) {
        fprintf(stderr, "jt_run: LeakSanitizer's tracer died, running once more: %s\n", cmd);
        free(out);
        out = NULL;
        rc = run_once(cmd, &out);
    }
    if (output)
        *output = out;
    else
        free(out);
    return rc;
}

static int run_once(const char *cmd, char **output)
{
    char *full = malloc(strlen(cmd) + 16);
    assert_non_null(full);
    sprintf(full, "(%s) 2>&1", cmd);
    FILE *p = popen(full, "r");
    free(full);
    if (!p)
        fail_msg("popen %s: %s", cmd, strerror(errno));
    char *buf = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len + 4096 + 1 > cap) {
            cap = cap ? cap * 2 : 8192;
            buf = realloc(buf, cap);
            assert_non_null(buf);
        }
        size_t got = fread(buf + len, 1, 4096, p);
        len += got;
        if (got == 0)
            break;
    }
    buf[len] = '\0';
    int rc = pclose(p);
    *output = buf;
    if (rc == -1)
        fail_msg("pclose: %s", strerror(errno));
    if (WIFSIGNALED(rc))
        return 128 + WTERMSIG(rc);
    return WEXITSTATUS(rc);
}

void jt__fail_showing(const char *file, int line, const char *output, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "--- the command's output ---\n%s--- end ---\n", output ? output : "(none)");
    print_error("ERROR: %s (the command's output above)\n", msg);
    _fail(file, line); /* the caller's line in cmocka's report */
    abort();           /* _fail does not return */
}

const char *jt_cli(void)
{
    const char *cli = getenv("JITOP_CLI");
    if (!cli || !*cli)
        fail_msg("JITOP_CLI is not set (run the tests through make test)");
    return cli;
}

int jt_have_gpu(void)
{
    static int cached = -1;
    if (cached >= 0)
        return cached;
    cached = 0;
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h)
        return cached;
    typedef int (*init_fn)(unsigned);
    typedef int (*count_fn)(int *);
    init_fn cu_init = (init_fn)dlsym(h, "cuInit");
    count_fn cu_count = (count_fn)dlsym(h, "cuDeviceGetCount");
    int n = 0;
    if (cu_init && cu_count && cu_init(0) == 0 && cu_count(&n) == 0 && n > 0)
        cached = 1;
    /* The handle stays open: jitop opens the same library again. */
    return cached;
}

static uint64_t rng_state;

uint64_t jt_random_seed(void)
{
    static uint64_t seed;
    if (seed != 0)
        return seed;
    const char *given = getenv("JITOP_TEST_SEED");
    if (given && *given) {
        char *end;
        errno = 0;
        seed = strtoull(given, &end, 0);
        if (errno != 0 || *end != '\0')
            fail_msg("JITOP_TEST_SEED is '%s': expected a number", given);
    } else if (getrandom(&seed, sizeof seed, 0) != (ssize_t)sizeof seed) {
        seed = (uint64_t)time(NULL) ^ (uint64_t)getpid() << 32;
    }
    seed |= 1; /* xorshift's state is never 0 */
    print_message("random seed %llu (JITOP_TEST_SEED=%llu draws the same)\n",
                  (unsigned long long)seed, (unsigned long long)seed);
    return seed;
}

static uint64_t next_u64(void)
{
    if (rng_state == 0)
        rng_state = jt_random_seed();
    /* xorshift64*: plenty for test data. */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 2685821657736338717ULL;
}

uint64_t jt_random_u64(void)
{
    return next_u64();
}

void jt_random_floats(float *v, size_t n, float lo, float hi)
{
    for (size_t i = 0; i < n; i++)
        v[i] = lo + (hi - lo) * (float)((double)(next_u64() >> 11) / 9007199254740992.0);
}

void jt_random_doubles(double *v, size_t n, double lo, double hi)
{
    for (size_t i = 0; i < n; i++)
        v[i] = lo + (hi - lo) * ((double)(next_u64() >> 11) / 9007199254740992.0);
}

double jt_rel_error(const double *a, const double *b, size_t n)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        if (isnan(a[i]) || isnan(b[i]))
            return INFINITY;
        double d = a[i] - b[i];
        num += d * d;
        den += b[i] * b[i];
    }
    if (den == 0)
        return num == 0 ? 0 : INFINITY;
    return sqrt(num / den);
}
