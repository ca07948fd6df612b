/* The remote cache tier against a real server: nginx with WebDAV, started
 * on 127.0.0.1 in a temporary directory (tests/support/nginx_dav.sh) and
 * stopped at the end. Every test SKIPs when nginx is not installed
 * (scripts/install-deps.sh installs it with JITOP_WANT_NGINX=1, which
 * `make test` sets).
 *
 * Contexts are compile-only (sm_90, real NVRTC): a remote hit shows as a
 * cached build result, a compile as cached == 0. Bad bodies are crafted in
 * the server's /bad/ tree; /err500/, /slow/ and /auth/ are nginx locations. */
#include "testutil.h"

#include "cache/cache.h" /* jitop__remote_forget_dead */

#include <errno.h>
#include <stdbool.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define NGINX_DAV JITOP_SOURCE_KERNEL_DIR "/../tests/support/nginx_dav.sh"
/* Generous bounds where a test wants the remote to answer (valgrind and
 * sanitizers are slow); the timeout tests set their own. */
#define PATIENT "|connect-timeout=5000|timeout=20000"

static char *g_srv;       /* the server's directory */
static int g_port;        /* 0: no nginx, every test skips */
static char *g_self;      /* this program, for the fresh-process checks */

static int setup(void **state)
{
    (void)state;
    g_srv = jt_tmpdir();
    char cmd[4096], *out = NULL;
    snprintf(cmd, sizeof cmd, "'%s' start '%s' 2>&1", NGINX_DAV, g_srv);
    int rc = jt_run(cmd, &out);
    if (rc == 0)
        g_port = atoi(out);
    else if (rc == 77)
        fprintf(stderr, "SKIP: nginx is not installed (scripts/install-deps.sh with "
                        "JITOP_WANT_NGINX=1 installs it)\n");
    else
        fprintf(stderr, "nginx_dav.sh failed (%d): %s\n", rc, out ? out : "");
    free(out);
    return rc == 0 || rc == 77 ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "'%s' stop '%s'", NGINX_DAV, g_srv);
    int rc = jt_run(cmd, NULL);
    free(g_srv);
    return rc == 0 ? 0 : -1;
}

#define NEED_SERVER()                                                                            \
    do {                                                                                         \
        if (!g_port) {                                                                           \
            print_message("SKIP: nginx is not installed\n");                                     \
            skip();                                                                              \
        }                                                                                        \
        jitop__remote_forget_dead();                                                             \
    } while (0)

static char *url(const char *loc, const char *attrs)
{
    char *u = NULL;
    if (asprintf(&u, "http://127.0.0.1:%d/%s%s", g_port, loc, attrs ? attrs : "") < 0)
        fail_msg("asprintf");
    return u;
}

/* A compile-only context on its own local cache, with the given remote
 * spec and secret ("" for none). */
static jitop_ctx *rctx(const char *cache, const char *spec, const char *secret)
{
    jitop_config cfg;
    jitop_config_init(&cfg);
    cfg.cache_dir = cache;
    cfg.arch = "sm_90";
    cfg.compile_only = 1;
    cfg.verbose = 0;
    cfg.remote_cache = spec;
    cfg.remote_cache_secret = secret ? secret : "";
    jitop_ctx *ctx = NULL;
    int st = jitop_ctx_create(&cfg, &ctx);
    if (st != JITOP_OK)
        fail_msg("jitop_ctx_create: %s", jitop_errmsg(NULL));
    return ctx;
}

/* A source of its own for each tag (its own key). */
static char *source(const char *tag)
{
    char *dir = jt_tmpdir(), text[512], name[128];
    snprintf(text, sizeof text,
             "extern \"C\" __global__ void k_%s(float *x) { x[threadIdx.x] += 1.0f; }\n", tag);
    snprintf(name, sizeof name, "%s.cu", tag);
    char *p = jt_write(dir, name, text);
    free(dir);
    return p;
}

static int build(jitop_ctx *ctx, const char *src, jitop_build_result *res)
{
    int st = jitop_build(ctx, src, NULL, NULL, 0, NULL, 0, res);
    if (st != JITOP_OK)
        fail_msg("jitop_build %s: %s", src, jitop_errmsg(ctx));
    return res->cached;
}

/* stderr into a file between begin and end; end returns what was written. */
static int g_saved_fd = -1;
static char *g_cap_path;
static void capture_begin(void)
{
    char *dir = jt_tmpdir();
    g_cap_path = jt_path(dir, "stderr.txt");
    free(dir);
    fflush(stderr);
    int fd = open(g_cap_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    assert_true(fd >= 0);
    g_saved_fd = dup(2);
    assert_true(g_saved_fd >= 0);
    assert_int_equal(dup2(fd, 2), 2);
    close(fd);
}
static char *capture_end(void)
{
    fflush(stderr);
    assert_int_equal(dup2(g_saved_fd, 2), 2);
    close(g_saved_fd);
    char *text = jt_read(g_cap_path);
    free(g_cap_path);
    fputs(text, stderr); /* still shown in the test's log */
    return text;
}

static char *remote_file(const char *tree, const char key[33])
{
    char rel[256];
    snprintf(rel, sizeof rel, "www/%s/v4/%.2s/%s", tree, key, key);
    return jt_path(g_srv, rel);
}

static char *local_file(const char *cache, const char key[33])
{
    char rel[128];
    snprintf(rel, sizeof rel, "v4/%.2s/%s", key, key);
    return jt_path(cache, rel);
}

static unsigned char *slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    unsigned char *buf = malloc(1 << 22);
    assert_non_null(buf);
    *n = fread(buf, 1, 1 << 22, f);
    fclose(f);
    return buf;
}

static void put_file(const char *path, const unsigned char *p, size_t n)
{
    char *dir = strdup(path);
    *strrchr(dir, '/') = '\0';
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s'", dir);
    assert_int_equal(jt_run(cmd, NULL), 0);
    free(dir);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(p, 1, n, f), n);
    assert_int_equal(fclose(f), 0);
}

/* Builds src into a throwaway cache with no remote: its key and entry
 * bytes (what a fresh compile gives). */
static unsigned char *reference(const char *src, char key[33], size_t *n)
{
    char *cache = jt_tmpdir();
    jitop_ctx *ctx = rctx(cache, "", NULL);
    jitop_build_result res;
    assert_int_equal(build(ctx, src, &res), 0);
    memcpy(key, res.key, 33);
    jitop_ctx_destroy(ctx);
    char *lf = local_file(cache, key);
    unsigned char *b = slurp(lf, n);
    assert_non_null(b);
    free(lf);
    free(cache);
    return b;
}

/* A local compile is pushed; a fresh local cache then hits from the remote,
 * and the entry lands in the local cache, byte for byte the remote's. */
static void test_hit_after_clean(void **state)
{
    (void)state;
    NEED_SERVER();
    char *src = source("hit"), *cache = jt_tmpdir(), *spec = url("cache", PATIENT);
    jitop_build_result res;
    jitop_ctx *ctx = rctx(cache, spec, NULL);
    assert_int_equal(build(ctx, src, &res), 0);
    jitop_ctx_destroy(ctx); /* drains the push */
    char *rf = remote_file("cache", res.key), *lf = local_file(cache, res.key);
    size_t rn = 0, ln = 0;
    unsigned char *rb = slurp(rf, &rn), *lb = slurp(lf, &ln);
    assert_non_null(rb);
    assert_non_null(lb);
    assert_int_equal(rn, ln);
    assert_memory_equal(rb, lb, rn);
    free(lb);

    ctx = rctx(cache, spec, NULL);
    assert_int_equal(jitop_cache_clean(ctx), JITOP_OK);
    assert_int_equal(access(lf, F_OK), -1);
    jitop_build_result again;
    assert_int_equal(build(ctx, src, &again), 1); /* from the remote */
    assert_string_equal(again.key, res.key);
    lb = slurp(lf, &ln);
    assert_non_null(lb);
    assert_int_equal(ln, rn);
    assert_memory_equal(lb, rb, rn);
    jitop_ctx_destroy(ctx);
    free(rb);
    free(lb);
    free(rf);
    free(lf);
    free(src);
    free(cache);
    free(spec);
}

/* A read-only remote is read, never written. */
static void test_read_only(void **state)
{
    (void)state;
    NEED_SERVER();
    char *src = source("ro"), *cache = jt_tmpdir(), *spec = url("cache", "|read-only" PATIENT);
    jitop_build_result res;
    jitop_ctx *ctx = rctx(cache, spec, NULL);
    assert_int_equal(build(ctx, src, &res), 0);
    jitop_ctx_destroy(ctx);
    char *rf = remote_file("cache", res.key);
    assert_int_equal(access(rf, F_OK), -1);
    /* jitop_remote_push has nowhere to push. */
    ctx = rctx(cache, spec, NULL);
    int pushed = -1;
    capture_begin();
    assert_int_equal(jitop_remote_push(ctx, res.key, &pushed), JITOP_EIO);
    free(capture_end());
    assert_int_equal(pushed, 0);
    jitop_ctx_destroy(ctx);
    /* Prewarmed by a writer, it serves read-only readers. */
    char *wspec = url("cache", PATIENT), *c2 = jt_tmpdir(), *c3 = jt_tmpdir();
    ctx = rctx(c2, wspec, NULL);
    assert_int_equal(build(ctx, src, &res), 0);
    jitop_ctx_destroy(ctx);
    assert_int_equal(access(rf, F_OK), 0);
    ctx = rctx(c3, spec, NULL);
    assert_int_equal(build(ctx, src, &res), 1);
    jitop_ctx_destroy(ctx);
    free(rf);
    free(src);
    free(cache);
    free(c2);
    free(c3);
    free(spec);
    free(wspec);
}

static char *secret_file(const char *text, mode_t mode)
{
    char *dir = jt_tmpdir(), *p = jt_write(dir, "key", text);
    assert_int_equal(chmod(p, mode), 0);
    free(dir);
    return p;
}

/* Reads src through spec with secret into a fresh local cache: 1 when it
 * hit, 0 when it compiled; *err gets stderr. */
static int read_through(const char *spec, const char *secret, const char *src, char **err)
{
    char *cache = jt_tmpdir();
    jitop_build_result res;
    jitop__remote_forget_dead();
    capture_begin();
    jitop_ctx *ctx = rctx(cache, spec, secret);
    int hit = build(ctx, src, &res);
    jitop_ctx_destroy(ctx);
    *err = capture_end();
    free(cache);
    return hit;
}

static void test_signed_entries(void **state)
{
    (void)state;
    NEED_SERVER();
    char *s = secret_file("0123456789abcdef0123456789abcdef\n", 0600);
    char *t = secret_file("fedcba9876543210fedcba9876543210\n", 0600);
    char *src = source("signed"), *usrc = source("unsigned"), *spec = url("cache", PATIENT);
    char *err = NULL, *cache = jt_tmpdir(), *c2 = jt_tmpdir();
    jitop_build_result res, ures;
    jitop_ctx *ctx = rctx(cache, spec, s);
    assert_int_equal(build(ctx, src, &res), 0);
    jitop_ctx_destroy(ctx);
    ctx = rctx(c2, spec, "");
    assert_int_equal(build(ctx, usrc, &ures), 0);
    jitop_ctx_destroy(ctx);
    /* The signed body is the entry and a 40-byte trailer. */
    char *rf = remote_file("cache", res.key), *lf = local_file(cache, res.key);
    size_t rn = 0, ln = 0;
    unsigned char *rb = slurp(rf, &rn), *lb = slurp(lf, &ln);
    assert_non_null(rb);
    assert_int_equal(rn, ln + 40);
    assert_memory_equal(rb, lb, ln);
    assert_memory_equal(rb + ln, "JITOPSIG", 8);

    assert_int_equal(read_through(spec, s, src, &err), 1); /* same secret */
    assert_null(strstr(err, "warning"));
    free(err);
    assert_int_equal(read_through(spec, "", src, &err), 1); /* no secret: not checked */
    free(err);
    assert_int_equal(read_through(spec, t, src, &err), 0); /* another secret */
    assert_non_null(strstr(err, "bad signature"));
    free(err);
    assert_int_equal(read_through(spec, s, usrc, &err), 0); /* unsigned */
    assert_non_null(strstr(err, "unsigned entry"));
    free(err);
    /* A signature whose MAC was altered. */
    rb[rn - 1] ^= 1;
    char *bf = remote_file("bad", res.key), *bspec = url("bad", PATIENT);
    put_file(bf, rb, rn);
    assert_int_equal(read_through(bspec, s, src, &err), 0);
    assert_non_null(strstr(err, "bad signature"));
    free(err);
    /* A signed entry served under another key: the signature holds, the
     * key inside does not. */
    rb[rn - 1] ^= 1;
    char *wf = remote_file("bad", ures.key);
    put_file(wf, rb, rn);
    assert_int_equal(read_through(bspec, s, usrc, &err), 0);
    assert_non_null(strstr(err, "another key"));
    free(err);
    /* A secret others can read is refused: no remote at all. */
    char *loose = secret_file("0123456789abcdef0123456789abcdef\n", 0644);
    assert_int_equal(read_through(spec, loose, src, &err), 0);
    assert_non_null(strstr(err, "only you can read"));
    free(err);
    free(loose);
    free(wf);
    free(bf);
    free(bspec);
    free(rb);
    free(lb);
    free(rf);
    free(lf);
    free(s);
    free(t);
    free(src);
    free(usrc);
    free(spec);
    free(cache);
    free(c2);
}

/* Bodies that must never be loaded: each is a compile, a warning that says
 * why, and the local cache then holds the fresh compile's entry. */
static void test_bad_bodies_fail_open(void **state)
{
    (void)state;
    NEED_SERVER();
    char *src = source("bad"), *other = source("badother");
    char key[33], okey[33];
    size_t n = 0, on = 0;
    unsigned char *good = reference(src, key, &n);
    unsigned char *ogood = reference(other, okey, &on);
    char *bf = remote_file("bad", key), *spec = url("bad", PATIENT);
    struct {
        const char *what, *expect;
        size_t len;
        int flip;
        const unsigned char *body;
    } cases[] = {
        {"truncated", "truncated", n / 2, -1, good},
        {"bit-flipped", "checksum mismatch", n, (int)(n - 100), good},
        {"header only", "truncated", 40, -1, good},
        {"garbage", "not a jitop entry", 21, -1, (const unsigned char *)"this is not an entry"},
        {"another key's entry", "another key", on, -1, ogood},
        {"trailing garbage", "no signature", n, -2, good},
        {"empty", "empty body", 0, -1, good},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        unsigned char *b = malloc(cases[i].len + 16);
        memcpy(b, cases[i].body, cases[i].len);
        size_t len = cases[i].len;
        if (cases[i].flip >= 0)
            b[cases[i].flip] ^= 0x10;
        if (cases[i].flip == -2) {
            memcpy(b + len, "0123456789abcdef", 16);
            len += 16;
        }
        put_file(bf, b, len);
        char *cache = jt_tmpdir(), *err = NULL;
        jitop__remote_forget_dead();
        capture_begin();
        jitop_ctx *ctx = rctx(cache, spec, NULL);
        jitop_build_result res;
        int hit = build(ctx, src, &res);
        jitop_ctx_destroy(ctx);
        err = capture_end();
        if (hit || !strstr(err, cases[i].expect) || !strstr(err, "not used again"))
            fail_msg("%s: hit %d, stderr: %s", cases[i].what, hit, err);
        /* What the local cache holds is the fresh compile: the same as
         * the reference but for its creation time (8 bytes). */
        char *lf = local_file(cache, key);
        size_t ln = 0;
        unsigned char *lb = slurp(lf, &ln);
        assert_non_null(lb);
        assert_int_equal(ln, n);
        if (len == ln)
            assert_true(memcmp(lb, b, ln) != 0);
        free(lb);
        free(lf);
        free(err);
        free(b);
        free(cache);
    }
    free(good);
    free(ogood);
    free(bf);
    free(spec);
    free(src);
    free(other);
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* A closed port, a 500 and a server that stalls: each a compile with one
 * warning, and the remote not asked again by the process. */
static void test_down_500_slow(void **state)
{
    (void)state;
    NEED_SERVER();
    char *src = source("down"), *src2 = source("down2"), *err = NULL;
    /* A port nothing listens on: bind one, then close it. */
    char *down = NULL;
    assert_true(asprintf(&down, "http://127.0.0.1:1/cache") > 0);
    assert_int_equal(read_through(down, "", src, &err), 0);
    assert_non_null(strstr(err, "GET failed"));
    free(err);
    /* Once dead, a second context of the process asks nothing and says
     * nothing. */
    {
        char *cache = jt_tmpdir();
        capture_begin();
        jitop_ctx *ctx = rctx(cache, down, "");
        jitop_build_result res;
        assert_int_equal(build(ctx, src2, &res), 0);
        jitop_ctx_destroy(ctx);
        err = capture_end();
        assert_null(strstr(err, "warning"));
        free(err);
        free(cache);
    }
    char *e500 = url("err500", PATIENT);
    assert_int_equal(read_through(e500, "", src, &err), 0);
    assert_non_null(strstr(err, "HTTP 500"));
    free(err);
    /* A push to it fails the same way, off the caller's path. */
    /* The stalled body: prewarm, then read through /slow/ (1 byte/s) with
     * a 300 ms total timeout. */
    char *w = url("cache", PATIENT), *cache = jt_tmpdir();
    jitop_ctx *ctx = rctx(cache, w, "");
    jitop_build_result res;
    build(ctx, src, &res);
    jitop_ctx_destroy(ctx);
    char *slow = url("slow", "|timeout=300");
    double t0 = now_ms();
    assert_int_equal(read_through(slow, "", src, &err), 0);
    double ms = now_ms() - t0;
    assert_non_null(strstr(err, "timed out"));
    assert_true(ms < 10000);
    free(err);
    free(slow);
    free(w);
    free(cache);
    free(e500);
    free(down);
    free(src);
    free(src2);
}

/* Credentials from the environment (bearer) and from .netrc (basic); the
 * URL's user and password never appear in a message. */
static void test_auth_and_redaction(void **state)
{
    (void)state;
    NEED_SERVER();
    char *src = source("auth"), *w = url("cache", PATIENT), *a = url("auth", PATIENT);
    char *cache = jt_tmpdir(), *err = NULL;
    jitop_ctx *ctx = rctx(cache, w, "");
    jitop_build_result res;
    build(ctx, src, &res);
    jitop_ctx_destroy(ctx);
    assert_int_equal(read_through(a, "", src, &err), 0);
    assert_non_null(strstr(err, "HTTP 401"));
    free(err);
    setenv("JITOP_REMOTE_CACHE_TOKEN", "jitop-test-token", 1);
    assert_int_equal(read_through(a, "", src, &err), 1);
    free(err);
    unsetenv("JITOP_REMOTE_CACHE_TOKEN");
    setenv("JITOP_REMOTE_CACHE_USER", "u:pw", 1);
    assert_int_equal(read_through(a, "", src, &err), 1);
    assert_null(strstr(err, "pw"));
    free(err);
    unsetenv("JITOP_REMOTE_CACHE_USER");
    char *dir = jt_tmpdir(), text[256];
    snprintf(text, sizeof text, "machine 127.0.0.1 login u password pw\n");
    char *netrc = jt_write(dir, "netrc", text);
    assert_int_equal(chmod(netrc, 0600), 0);
    setenv("NETRC", netrc, 1);
    assert_int_equal(read_through(a, "", src, &err), 1);
    free(err);
    unsetenv("NETRC");
    char *cred = NULL;
    assert_true(asprintf(&cred, "http://someone:hunter2@127.0.0.1:1/x?sig=hunter3") > 0);
    assert_int_equal(read_through(cred, "", src, &err), 0);
    assert_null(strstr(err, "hunter"));
    assert_non_null(strstr(err, "http://127.0.0.1:1/x"));
    free(err);
    /* A spec that cannot be used is a warning, and the build goes on. */
    assert_int_equal(read_through("ftp://127.0.0.1/x", "", src, &err), 0);
    assert_non_null(strstr(err, "expected an http"));
    free(err);
    assert_int_equal(read_through("http://127.0.0.1:1/x|colour=blue", "", src, &err), 0);
    assert_non_null(strstr(err, "unknown attribute"));
    free(err);
    free(cred);
    free(netrc);
    free(dir);
    free(src);
    free(w);
    free(a);
    free(cache);
}

struct builder {
    jitop_ctx *ctx;
    char *src[3];
    char key[3][33];
};

static void *build_three(void *arg)
{
    struct builder *b = arg;
    for (int i = 0; i < 3; i++) {
        jitop_build_result res;
        if (jitop_build(b->ctx, b->src[i], NULL, NULL, 0, NULL, 0, &res) != JITOP_OK)
            return (void *)1;
        memcpy(b->key[i], res.key, 33);
    }
    return NULL;
}

/* Two threads compile in one context while the push thread sends what
 * each compile wrote; destroy drains it: every entry reaches the server. */
static void test_push_while_building(void **state)
{
    (void)state;
    NEED_SERVER();
    char *spec = url("cache", PATIENT), *cache = jt_tmpdir();
    jitop_ctx *ctx = rctx(cache, spec, NULL);
    struct builder b[2];
    pthread_t th[2];
    for (int t = 0; t < 2; t++) {
        b[t].ctx = ctx;
        for (int i = 0; i < 3; i++) {
            char tag[32];
            snprintf(tag, sizeof tag, "push%d_%d", t, i);
            b[t].src[i] = source(tag);
        }
        assert_int_equal(pthread_create(&th[t], NULL, build_three, &b[t]), 0);
    }
    for (int t = 0; t < 2; t++) {
        void *rv = NULL;
        assert_int_equal(pthread_join(th[t], &rv), 0);
        assert_null(rv);
    }
    jitop_ctx_destroy(ctx);
    for (int t = 0; t < 2; t++)
        for (int i = 0; i < 3; i++) {
            char *rf = remote_file("cache", b[t].key[i]);
            assert_int_equal(access(rf, F_OK), 0);
            free(rf);
            free(b[t].src[i]);
        }
    free(spec);
    free(cache);
}

/* 16 processes, each with its own local cache, against one prewarmed
 * remote: no compile anywhere. */
static void test_sixteen_processes(void **state)
{
    (void)state;
    NEED_SERVER();
    char *src = source("fleet"), *spec = url("cache", PATIENT), *cache = jt_tmpdir();
    jitop_ctx *ctx = rctx(cache, spec, "");
    jitop_build_result res;
    assert_int_equal(build(ctx, src, &res), 0);
    jitop_ctx_destroy(ctx);
    /* Fresh processes (this program with --node-child), as nodes are:
     * nothing inherited from this one's state. */
    pid_t pids[16];
    char *caches[16];
    for (int i = 0; i < 16; i++) {
        caches[i] = jt_tmpdir();
        fflush(NULL);
        pids[i] = fork();
        assert_true(pids[i] >= 0);
        if (pids[i] == 0) {
            execl(g_self, g_self, "--node-child", caches[i], spec, src, (char *)NULL);
            _exit(4);
        }
    }
    int compiles = 0, failures = 0;
    for (int i = 0; i < 16; i++) {
        int st = 0;
        assert_int_equal(waitpid(pids[i], &st, 0), pids[i]);
        int code = WIFEXITED(st) ? WEXITSTATUS(st) : 128;
        compiles += code == 1;
        failures += code > 1;
        free(caches[i]);
    }
    assert_int_equal(failures, 0);
    assert_int_equal(compiles, 0);
    free(src);
    free(spec);
    free(cache);
}

/* No link-time dependency: neither the library nor the CLI needs libcurl
 * or libcrypto to start. */
static void test_no_link_dependency(void **state)
{
    (void)state;
    const char *b = getenv("JITOP_BUILD");
    if (!b)
        skip();
    char cmd[2048], *out = NULL;
    snprintf(cmd, sizeof cmd, "readelf -d '%s/libjitop.so' '%s' | grep NEEDED", b, jt_cli());
    assert_int_equal(jt_run(cmd, &out), 0);
    assert_non_null(strstr(out, "libc.so"));
    assert_null(strstr(out, "curl"));
    assert_null(strstr(out, "crypto"));
    assert_null(strstr(out, "ssl"));
    free(out);
}

/* In a fresh process (this program again, with --maps-child): a warm local
 * hit with a remote configured never maps libcurl; a miss does. */
static int maps_child(const char *cache, const char *spec, const char *src)
{
    jitop_config cfg;
    jitop_config_init(&cfg);
    cfg.cache_dir = cache;
    cfg.arch = "sm_90";
    cfg.compile_only = 1;
    cfg.remote_cache = spec;
    cfg.remote_cache_secret = "";
    jitop_ctx *c = NULL;
    jitop_build_result r;
    if (jitop_ctx_create(&cfg, &c) != JITOP_OK ||
        jitop_build(c, src, NULL, NULL, 0, NULL, 0, &r) != JITOP_OK)
        return 3;
    jitop_ctx_destroy(c);
    char *maps = jt_read("/proc/self/maps");
    int curl = strstr(maps, "libcurl") != NULL;
    free(maps);
    return (r.cached ? 10 : 20) + curl;
}

static void test_unused_costs_nothing(void **state)
{
    (void)state;
    NEED_SERVER();
    char *src = source("maps"), *spec = url("cache", PATIENT), *cache = jt_tmpdir();
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "'%s' --maps-child '%s' '%s' '%s'", g_self, cache, spec, src);
    int rc = jt_run(cmd, NULL);
    assert_int_equal(rc, 21); /* compiled; asked the remote: libcurl mapped */
    rc = jt_run(cmd, NULL);
    assert_int_equal(rc, 10); /* a local hit: libcurl never opened */
    free(src);
    free(spec);
    free(cache);
}

/* The CLI: build --push prewarms, explain says remote hit/miss/down, ls
 * --remote lists (or says it cannot). */
static void test_cli(void **state)
{
    (void)state;
    NEED_SERVER();
    char *src = source("cli"), *src2 = source("cli2"), *spec = url("cache", PATIENT);
    char *c1 = jt_tmpdir(), *c2 = jt_tmpdir(), *c3 = jt_tmpdir(), *out = NULL;
    char cmd[8192];
    /* Built first without a remote, then pushed by a cached build. */
    snprintf(cmd, sizeof cmd, "JITOP_REMOTE_CACHE= '%s' build --cache-dir '%s' --arch sm_90 '%s'",
             jt_cli(), c1, src);
    assert_int_equal(jt_run(cmd, &out), 0);
    free(out);
    snprintf(cmd, sizeof cmd,
             "JITOP_REMOTE_CACHE='%s' '%s' build --push --cache-dir '%s' --arch sm_90 '%s'", spec,
             jt_cli(), c1, src);
    assert_int_equal(jt_run(cmd, &out), 0);
    assert_non_null(strstr(out, "cached"));
    assert_non_null(strstr(out, "pushed 1 entries"));
    free(out);
    /* --push with no remote configured: said once, exit 1. */
    snprintf(cmd, sizeof cmd, "JITOP_REMOTE_CACHE= '%s' build --push --cache-dir '%s' --arch sm_90 '%s'",
             jt_cli(), c1, src);
    assert_int_equal(jt_run(cmd, &out), 1);
    assert_non_null(strstr(out, "no remote cache configured"));
    free(out);
    snprintf(cmd, sizeof cmd,
             "JITOP_REMOTE_CACHE='%s' '%s' explain --cache-dir '%s' --arch sm_90 '%s' '%s'", spec,
             jt_cli(), c2, src, src2);
    assert_int_equal(jt_run(cmd, &out), 0);
    assert_non_null(strstr(out, "remote hit"));
    assert_non_null(strstr(out, "remote miss"));
    free(out);
    snprintf(cmd, sizeof cmd,
             "JITOP_REMOTE_CACHE='http://127.0.0.1:1/x' '%s' explain --cache-dir '%s' "
             "--arch sm_90 '%s'",
             jt_cli(), c2, src);
    assert_int_equal(jt_run(cmd, &out), 0);
    assert_non_null(strstr(out, "remote down"));
    free(out);
    /* explain stored nothing; a build hits from the remote. */
    snprintf(cmd, sizeof cmd, "JITOP_REMOTE_CACHE='%s' '%s' build --cache-dir '%s' --arch sm_90 '%s'",
             spec, jt_cli(), c3, src);
    assert_int_equal(jt_run(cmd, &out), 0);
    assert_non_null(strstr(out, "cached"));
    free(out);
    char key[33];
    size_t n = 0;
    free(reference(src, key, &n));
    snprintf(cmd, sizeof cmd, "JITOP_REMOTE_CACHE='%s' '%s' ls --remote --cache-dir '%s'", spec,
             jt_cli(), c3);
    /* Listing needs the dav-ext module (PROPFIND); without it the answer is
     * "cannot list". */
    bool can_list = access("/usr/lib/nginx/modules/ngx_http_dav_ext_module.so", F_OK) == 0 ||
                    access("/usr/share/nginx/modules/ngx_http_dav_ext_module.so", F_OK) == 0;
    int rc = jt_run(cmd, &out);
    if (can_list ? rc != 0 || !strstr(out, key) : rc != 1 || !strstr(out, "cannot list"))
        jt_fail_showing(out, "ls --remote (PROPFIND %s): exit %d", can_list ? "on" : "off", rc);
    free(out);
    char *bad = url("bad", "");
    snprintf(cmd, sizeof cmd, "JITOP_REMOTE_CACHE='%s' '%s' ls --remote --cache-dir '%s'", bad,
             jt_cli(), c3);
    assert_int_equal(jt_run(cmd, &out), 1);
    assert_non_null(strstr(out, "cannot list"));
    free(out);
    free(bad);
    free(src);
    free(src2);
    free(spec);
    free(c1);
    free(c2);
    free(c3);
}

int main(int argc, char **argv)
{
    if (argc == 5 && strcmp(argv[1], "--maps-child") == 0)
        return maps_child(argv[2], argv[3], argv[4]);
    if (argc == 5 && strcmp(argv[1], "--node-child") == 0) {
        int rc = maps_child(argv[2], argv[3], argv[4]);
        return rc == 3 ? 3 : rc >= 20; /* 0: a hit, 1: a compile */
    }
    g_self = realpath("/proc/self/exe", NULL);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hit_after_clean),
        cmocka_unit_test(test_read_only),
        cmocka_unit_test(test_signed_entries),
        cmocka_unit_test(test_bad_bodies_fail_open),
        cmocka_unit_test(test_down_500_slow),
        cmocka_unit_test(test_auth_and_redaction),
        cmocka_unit_test(test_push_while_building),
        cmocka_unit_test(test_sixteen_processes),
        cmocka_unit_test(test_no_link_dependency),
        cmocka_unit_test(test_unused_costs_nothing),
        cmocka_unit_test(test_cli),
    };
    int rc = cmocka_run_group_tests(tests, setup, teardown);
    free(g_self);
    return rc;
}
