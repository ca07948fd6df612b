/* The remote tier across fork, against a real server (nginx with WebDAV,
 * tests/support/nginx_dav.sh): every entry a build produced reaches every
 * writable remote exactly once (the server's access log counts the PUTs),
 * whether it was compiled in `jitop build -j N`'s forked workers, in the
 * parent, or in a process forked from one whose push thread was running;
 * and a forked child never inherits the parent's push thread, its queue or
 * its locks. Each test pushes into a remote of its own (a fresh path under
 * /cache/), so counts do not mix. */
#include "remote_server.h"

#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>

#define NSRC 6


/* A fresh remote path for a test: cache/<tag>-<pid>. */
static char *fresh_tree(const char *tag)
{
    char *t = NULL;
    assert_true(asprintf(&t, "cache/%s-%ld", tag, (long)getpid()) > 0);
    return t;
}

/* The sources and their keys (built without a remote, into a throwaway
 * cache, only to learn the keys). */
static void make_sources(const char *tag, char *src[NSRC], char key[NSRC][33])
{
    char *cache = jt_tmpdir();
    jitop_ctx *ctx = rs_ctx(cache, "");
    for (int i = 0; i < NSRC; i++) {
        char t[64];
        snprintf(t, sizeof t, "%s%d", tag, i);
        src[i] = rs_source(t);
        rs_build(ctx, src[i], key[i]);
    }
    jitop_ctx_destroy(ctx);
    free(cache);
}

/* `jitop build` with the remote spec, extra flags and every source, into
 * cache: its exit status, its output in *out. */
static int cli_build(const char *spec, const char *flags, const char *cache, char *src[NSRC],
                     char **out)
{
    char cmd[16384];
    int n = snprintf(cmd, sizeof cmd,
                     "JITOP_REMOTE_CACHE='%s' JITOP_JOB_MEM=0 '%s' build %s --cache-dir '%s' "
                     "--arch sm_90",
                     spec, jt_cli(), flags, cache);
    for (int i = 0; i < NSRC; i++)
        n += snprintf(cmd + n, sizeof cmd - (size_t)n, " '%s'", src[i]);
    return jt_run(cmd, out);
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int count(const char *text, const char *needle)
{
    int n = 0;
    for (const char *p = text; (p = strstr(p, needle)) != NULL; p++)
        n++;
    return n;
}

/* Every key PUT exactly once under tree, and held there; then a fresh
 * `jitop build` with an empty local cache and the remote compiles nothing. */
static void assert_pushed_once(const char *tree, const char *spec, char *src[NSRC],
                               char key[NSRC][33])
{
    for (int i = 0; i < NSRC; i++) {
        int puts = rs_requests_settled("PUT", tree, key[i], 1);
        if (puts != 1 || !rs_holds(tree, key[i]))
            fail_msg("%s: key %s was PUT %d times (held: %d); expected once", tree, key[i], puts,
                     rs_holds(tree, key[i]));
    }
    char *fresh = jt_tmpdir(), *out = NULL;
    assert_int_equal(cli_build(spec, "-j4", fresh, src, &out), 0);
    if (count(out, " compiled ") != 0 || count(out, " cached ") != NSRC)
        jt_fail_showing(out, "a fresh process compiled from a prewarmed remote");
    free(out);
    free(fresh);
}

/* The brief's case: `jitop build --push -j4` of several sources into an
 * empty remote. The workers' own pushes (the library's, from
 * JITOP_REMOTE_CACHE) are done before each answers, and --push sends only
 * what no worker did. */
static void test_build_push_j4(void **state)
{
    (void)state;
    RS_NEED_SERVER();
    char *src[NSRC], key[NSRC][33], *tree = fresh_tree("pushj4"), *cache = jt_tmpdir(), *out = NULL;
    make_sources("pj", src, key);
    char *spec = rs_url(tree, RS_PATIENT);
    assert_int_equal(cli_build(spec, "--push -j4", cache, src, &out), 0);
    assert_int_equal(count(out, " compiled "), NSRC);
    assert_non_null(strstr(out, "pushed 6 entries"));
    free(out);
    assert_pushed_once(tree, spec, src, key);
    for (int i = 0; i < NSRC; i++)
        free(src[i]);
    free(spec);
    free(tree);
    free(cache);
}

/* Without --push: only the library's background pushes, from workers that
 * end with _exit. */
static void test_build_j4_background_push(void **state)
{
    (void)state;
    RS_NEED_SERVER();
    char *src[NSRC], key[NSRC][33], *tree = fresh_tree("bgj4"), *cache = jt_tmpdir(), *out = NULL;
    make_sources("bj", src, key);
    char *spec = rs_url(tree, RS_PATIENT);
    assert_int_equal(cli_build(spec, "-j4", cache, src, &out), 0);
    assert_int_equal(count(out, " compiled "), NSRC);
    free(out);
    assert_pushed_once(tree, spec, src, key);
    for (int i = 0; i < NSRC; i++)
        free(src[i]);
    free(spec);
    free(tree);
    free(cache);
}

/* -j1: the parent compiles, its push thread pushes, and --push must not
 * push the same entries again. */
static void test_build_push_j1(void **state)
{
    (void)state;
    RS_NEED_SERVER();
    char *src[NSRC], key[NSRC][33], *tree = fresh_tree("pushj1"), *cache = jt_tmpdir(), *out = NULL;
    make_sources("p1", src, key);
    char *spec = rs_url(tree, RS_PATIENT);
    assert_int_equal(cli_build(spec, "--push -j1", cache, src, &out), 0);
    assert_non_null(strstr(out, "pushed 6 entries"));
    free(out);
    assert_pushed_once(tree, spec, src, key);
    /* Pushed again by a later --push of the cached entries: a new process
     * does not know what an earlier one sent, so these are sent once more
     * (the prewarm step's contract: every entry of the command line). */
    assert_int_equal(cli_build(spec, "--push -j4", cache, src, &out), 0);
    assert_int_equal(count(out, " cached "), NSRC);
    free(out);
    for (int i = 0; i < NSRC; i++)
        assert_int_equal(rs_requests_settled("PUT", tree, key[i], 2), 2);
    for (int i = 0; i < NSRC; i++)
        free(src[i]);
    free(spec);
    free(tree);
    free(cache);
}

/* The library's own case: a process whose push thread has run forks (the
 * thread idle, waiting for work); the child builds through the same
 * context and destroys it. The child must start a push thread of its own
 * (not signal, wait on or join the parent's, which does not exist in it)
 * and push its entries once. An alarm turns a hang into a failure. (A fork
 * while that thread is inside a request is test_fork_during_request.) */
static void test_fork_after_push_thread(void **state)
{
    (void)state;
#ifdef __SANITIZE_THREAD__
    /* A child of a multi-threaded process that starts a thread (its own
     * push thread: what is tested here) is what glibc allows and TSan does
     * not follow: it still counts the parent's threads in the child and
     * ends it ("dup thread with used id"). The plain and ASan runs test it. */
    print_message("SKIP: under ThreadSanitizer (no thread may start after a multi-threaded "
                  "fork)\n");
    skip();
#endif
    RS_NEED_SERVER();
    char *src[NSRC], key[NSRC][33], *tree = fresh_tree("lib"), *cache = jt_tmpdir();
    make_sources("lf", src, key);
    char *spec = rs_url(tree, RS_PATIENT);
    jitop_ctx *ctx = rs_ctx(cache, spec);
    for (int i = 0; i < 3; i++)
        assert_int_equal(rs_build(ctx, src[i], NULL), 0);
    /* The server has answered the three PUTs; a moment later the thread
     * is back in its wait. */
    double t0 = now_ms();
    while (rs_requests("PUT", tree, key[0]) + rs_requests("PUT", tree, key[1]) +
               rs_requests("PUT", tree, key[2]) < 3 &&
           now_ms() - t0 < 30000) {
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    struct timespec settle = {0, 200 * 1000 * 1000};
    nanosleep(&settle, NULL);
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        alarm(60);
        int bad = 0;
        for (int i = 3; i < NSRC; i++) {
            jitop_build_result res;
            bad |= jitop_build(ctx, src[i], NULL, NULL, 0, NULL, 0, &res) != JITOP_OK ||
                   res.cached;
        }
        jitop_ctx_destroy(ctx); /* drains the child's pushes */
        /* The child's copies freed: valgrind checks a forked child's leaks. */
        for (int i = 0; i < NSRC; i++)
            free(src[i]);
        free(spec);
        free(tree);
        free(cache);
        _exit(bad ? 3 : 0);
    }
    int st = 0;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    jitop_ctx_destroy(ctx);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
        fail_msg("the forked child %s %d", WIFSIGNALED(st) ? "was killed by signal" : "exited",
                 WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
    assert_pushed_once(tree, spec, src, key);
    for (int i = 0; i < NSRC; i++)
        free(src[i]);
    free(spec);
    free(tree);
    free(cache);
}

struct slow_get {
    jitop_ctx *ctx;
    const char *src;
    int status;
};

static void *slow_build(void *arg)
{
    struct slow_get *g = arg;
    jitop_build_result res;
    g->status = jitop_build(g->ctx, g->src, NULL, NULL, 0, NULL, 0, &res);
    return NULL;
}

/* A fork while another thread is inside a request (a GET of the slow
 * location): whatever that thread held inside curl or its TLS library is
 * held forever in the child, so the child does not use the remote tier at
 * all. It compiles at once, asks the server nothing, and says why. */
static void test_fork_during_request(void **state)
{
    (void)state;
    RS_NEED_SERVER();
    char *src[NSRC], key[NSRC][33], *cache = jt_tmpdir();
    make_sources("fr", src, key);
    char *spec = rs_url("slow", "|connect-timeout=5000|timeout=3000");
    /* Something to serve slowly under src[0]'s key (1 byte a second). */
    char rel[512];
    snprintf(rel, sizeof rel, "www/cache/v4/%.2s", key[0]);
    char *dir = jt_path(rs_dir, rel), cmd[1024];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s' && head -c 4096 /dev/zero > '%s/%s'", dir, dir,
             key[0]);
    assert_int_equal(jt_run(cmd, NULL), 0);
    free(dir);
    jitop_ctx *ctx = rs_ctx(cache, spec);
    struct slow_get g = {ctx, src[0], -1};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, slow_build, &g), 0);
    /* The GET holds its connection for the whole timeout (3 s); once the
     * server logged nothing yet and a second has passed, it is in flight. */
    struct timespec ts = {1, 0};
    nanosleep(&ts, NULL);
    char *errpath = jt_path(cache, "child.err");
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        alarm(60);
        FILE *f = freopen(errpath, "w", stderr);
        jitop_build_result res;
        int st = f ? jitop_build(ctx, src[1], NULL, NULL, 0, NULL, 0, &res) : -1;
        fflush(stderr);
        /* Ends by exec, not _exit: the memory of the request that was in
         * flight on the other thread is unreachable here (that thread does
         * not exist in the child), and valgrind would count it as leaked
         * at an exit; it is the cost of a fork mid-request, one request's
         * worth. */
        const char *code = st != JITOP_OK ? "exit 3" : res.cached ? "exit 4" : "exit 0";
        execl("/bin/sh", "sh", "-c", code, (char *)NULL);
        _exit(5);
    }
    int st = 0;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_int_equal(pthread_join(th, NULL), 0);
    assert_int_equal(g.status, JITOP_OK);
    jitop_ctx_destroy(ctx);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
    char *err = jt_read(errpath);
    fputs(err, stderr);
    assert_non_null(strstr(err, "forked"));
    free(err);
    assert_int_equal(rs_requests_settled("GET", "slow", key[0], 1), 1);
    assert_int_equal(rs_requests("GET", "slow", key[1]), 0);
    for (int i = 0; i < NSRC; i++)
        free(src[i]);
    free(errpath);
    free(spec);
    free(cache);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_build_push_j4),
        cmocka_unit_test(test_build_j4_background_push),
        cmocka_unit_test(test_build_push_j1),
        cmocka_unit_test(test_fork_after_push_thread),
        cmocka_unit_test(test_fork_during_request),
    };
    int rc = cmocka_run_group_tests(tests, rs_setup, rs_teardown);
    jt_cleanup();
    return rc;
}
