/* jitop_build / jitop_explain end to end: real NVRTC, a temporary cache per
 * test, several processes and a kill -9 where the contract says so. */
#include "testutil.h"

#include "build/build.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static const char *const simple_src =
    "#include \"a.cuh\"\n"
    "template <typename T, int N> __global__ void scale(T *x) { x[threadIdx.x] *= (T)(N * A_VALUE); }\n"
    "extern \"C\" __global__ void twice(float *x) { x[threadIdx.x] *= 2.0f * B_VALUE; }\n";

/* Long enough to compile (about a second at DEPTH 40 on a laptop core) that
 * a test can act while it runs: every level unrolls a loop of sinf. */
static const char *const slow_src =
    "#include \"h.cuh\"\n"
    "template <int N> struct S { __device__ static float f(float a) {\n"
    "#pragma unroll\n"
    "  for (int i = 0; i < 64; i++) a = a * 1.0001f + __sinf(a + N);\n"
    "  return S<N - 1>::f(a) + a; } };\n"
    "template <> struct S<0> { __device__ static float f(float a) { return a; } };\n"
    "extern \"C\" __global__ void slow(float *x) { x[threadIdx.x] = S<DEPTH>::f(x[threadIdx.x]) + H; }\n";

struct project {
    char *dir, *cache, *src, *a, *b;
};

static void project_make(struct project *p)
{
    p->dir = jt_tmpdir();
    p->cache = jt_tmpdir();
    p->src = jt_write(p->dir, "k.cu", simple_src);
    p->a = jt_write(p->dir, "a.cuh", "#pragma once\n#include \"inc/b.cuh\"\n#define A_VALUE 3\n");
    p->b = jt_write(p->dir, "inc/b.cuh", "#pragma once\n#define B_VALUE 1\n");
    /* Old mtimes, and no window: the recent-modification rule would
     * otherwise make every check hash (correct, but these tests look at the
     * stat path), and the ctimes of files just written cannot be aged. */
    jt_touch(p->src, -60);
    jt_touch(p->a, -60);
    jt_touch(p->b, -60);
    jitop__recent_window_ns = 0;
}

static void project_free(struct project *p)
{
    free(p->dir); free(p->cache); free(p->src); free(p->a); free(p->b);
}

static jitop_build_result build(jitop_ctx *ctx, const char *path, const char *arch,
                                const char *const *opts, size_t nopts, const char *const *names,
                                size_t nnames)
{
    jitop_build_result r;
    memset(&r, 0, sizeof r);
    int st = jitop_build(ctx, path, arch, opts, nopts, names, nnames, &r);
    if (st != JITOP_OK)
        fail_msg("jitop_build %s: %s: %s", path, jitop_strerror(st), jitop_errmsg(ctx));
    assert_int_equal(strlen(r.key), 32);
    return r;
}

static char *explain(jitop_ctx *ctx, const char *path, const char *arch, const char *const *opts,
                     size_t nopts, const char *const *names, size_t nnames, int *hit)
{
    char *why = NULL;
    int st = jitop_explain(ctx, path, arch, opts, nopts, names, nnames, hit, &why);
    if (st != JITOP_OK)
        fail_msg("jitop_explain %s: %s: %s", path, jitop_strerror(st), jitop_errmsg(ctx));
    assert_non_null(why);
    return why;
}

static char *entry_file(const char *cache, const char *key)
{
    char *p = malloc(strlen(cache) + 64);
    assert_non_null(p);
    sprintf(p, "%s/v%d/%.2s/%s", cache, JITOP__FORMAT_VERSION, key, key);
    return p;
}

static bool exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

static int count_cb(const jitop_cache_entry_info *info, void *user)
{
    (void)info;
    (*(int *)user)++;
    return 0;
}

static int count_entries(jitop_ctx *ctx)
{
    int n = 0;
    assert_int_equal(jitop_cache_list(ctx, count_cb, &n), JITOP_OK);
    return n;
}

static void test_compile_then_hit(void **state)
{
    (void)state;
    struct project p;
    project_make(&p);
    jitop_ctx *ctx = jt_ctx(p.cache, "sm_90");
    jitop_build_result r1 = build(ctx, p.src, NULL, NULL, 0, NULL, 0);
    assert_int_equal(r1.cached, 0);
    char *entry = entry_file(p.cache, r1.key);
    assert_true(exists(entry));
    jitop_build_result r2 = build(ctx, p.src, NULL, NULL, 0, NULL, 0);
    assert_int_equal(r2.cached, 1);
    assert_string_equal(r1.key, r2.key);
    /* A new context (as a new process would) hits too. */
    jitop_ctx *ctx2 = jt_ctx(p.cache, "sm_90");
    assert_int_equal(build(ctx2, p.src, NULL, NULL, 0, NULL, 0).cached, 1);
    int hit = 0;
    char *why = explain(ctx2, p.src, NULL, NULL, 0, NULL, 0, &hit);
    assert_int_equal(hit, 1);
    free(why);
    assert_int_equal(count_entries(ctx2), 1);
    jitop_ctx_destroy(ctx2);
    jitop_ctx_destroy(ctx);
    free(entry);
    project_free(&p);
}

static void test_touch_is_a_hit_and_refreshes_manifest(void **state)
{
    (void)state;
    struct project p;
    project_make(&p);
    jitop_ctx *ctx = jt_ctx(p.cache, "sm_90");
    jitop_build_result r1 = build(ctx, p.src, NULL, NULL, 0, NULL, 0);
    jt_touch(p.b, -10); /* new mtime, same bytes */
    int hit = 0;
    char *why = explain(ctx, p.src, NULL, NULL, 0, NULL, 0, &hit);
    assert_int_equal(hit, 1);
    free(why);
    jitop_build_result r2 = build(ctx, p.src, NULL, NULL, 0, NULL, 0);
    assert_int_equal(r2.cached, 1);
    assert_string_equal(r1.key, r2.key);

    /* The manifest now holds the new stat data: the next build is a stat
     * hit that reads no source. */
    jitop__unit u;
    assert_int_equal(jitop__unit_init(&u, p.src, NULL, NULL, 0, NULL, 0, "sm_90"), JITOP_OK);
    char id[33], key[33];
    jitop__manifest_id(&u, id);
    jitop__deps d;
    bool found = false, fresh = false;
    assert_int_equal(jitop__manifest_get(ctx->cache, id, &d, key, &found), JITOP_OK);
    assert_true(found);
    assert_string_equal(key, r1.key);
    assert_int_equal(d.n, 3);
    struct stat st;
    assert_int_equal(stat(p.b, &st), 0);
    bool seen = false;
    for (size_t i = 0; i < d.n; i++) {
        if (strcmp(d.v[i].path, p.b) == 0) {
            seen = true;
            assert_int_equal(d.v[i].mtime_ns,
                             (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec);
        }
    }
    assert_true(seen);
    char *stale = NULL;
    assert_int_equal(jitop__deps_fresh(&d, &fresh, &stale), JITOP_OK);
    assert_true(fresh);
    jitop__deps_free(&d);
    jitop__unit_free(&u);
    jitop_ctx_destroy(ctx);
    project_free(&p);
}

static void test_nested_header_edit_rebuilds(void **state)
{
    (void)state;
    struct project p;
    project_make(&p);
    jitop_ctx *ctx = jt_ctx(p.cache, "sm_90");
    jitop_build_result r1 = build(ctx, p.src, NULL, NULL, 0, NULL, 0);
    /* One byte, same size, in the header included by a header. */
    free(jt_write(p.dir, "inc/b.cuh", "#pragma once\n#define B_VALUE 2\n"));
    jt_touch(p.b, -30);
    int hit = 1;
    char *why = explain(ctx, p.src, NULL, NULL, 0, NULL, 0, &hit);
    assert_int_equal(hit, 0);
    if (!strstr(why, p.b) || !strstr(why, "content changed"))
        fail_msg("explain should name %s: %s", p.b, why);
    free(why);
    jitop_build_result r2 = build(ctx, p.src, NULL, NULL, 0, NULL, 0);
    assert_int_equal(r2.cached, 0);
    assert_string_not_equal(r1.key, r2.key);
    /* Back to the old bytes: the old entry is still there. */
    free(jt_write(p.dir, "inc/b.cuh", "#pragma once\n#define B_VALUE 1\n"));
    jitop_build_result r3 = build(ctx, p.src, NULL, NULL, 0, NULL, 0);
    assert_int_equal(r3.cached, 1);
    assert_string_equal(r3.key, r1.key);
    jitop_ctx_destroy(ctx);
    project_free(&p);
}

static void expect_rebuild(jitop_ctx *ctx, const char *src, const char *arch,
                           const char *const *opts, size_t nopts, const char *const *names,
                           size_t nnames, const char *must_say, char seen[][33], size_t *nseen)
{
    int hit = 1;
    char *why = explain(ctx, src, arch, opts, nopts, names, nnames, &hit);
    assert_int_equal(hit, 0);
    if (must_say && !strstr(why, must_say))
        fail_msg("explain should say '%s': %s", must_say, why);
    free(why);
    jitop_build_result r = build(ctx, src, arch, opts, nopts, names, nnames);
    assert_int_equal(r.cached, 0);
    for (size_t i = 0; i < *nseen; i++)
        assert_string_not_equal(seen[i], r.key);
    memcpy(seen[(*nseen)++], r.key, 33);
    assert_int_equal(build(ctx, src, arch, opts, nopts, names, nnames).cached, 1);
}

static void test_option_define_arch_name_changes_rebuild(void **state)
{
    (void)state;
    struct project p;
    project_make(&p);
    jitop_ctx *ctx = jt_ctx(p.cache, "sm_90");
    char seen[8][33];
    size_t nseen = 0;
    const char *none[] = {NULL};
    expect_rebuild(ctx, p.src, "sm_90", none, 0, NULL, 0, "never built", seen, &nseen);
    const char *def1[] = {"-DEXTRA=1"};
    expect_rebuild(ctx, p.src, "sm_90", def1, 1, NULL, 0, "option added: -DEXTRA=1", seen, &nseen);
    const char *def2[] = {"-D", "EXTRA=2"};
    expect_rebuild(ctx, p.src, "sm_90", def2, 2, NULL, 0, "-DEXTRA=2", seen, &nseen);
    const char *fast[] = {"-D", "EXTRA=2", "-use_fast_math"};
    expect_rebuild(ctx, p.src, "sm_90", fast, 3, NULL, 0, "option added: --use_fast_math", seen,
                   &nseen);
    expect_rebuild(ctx, p.src, "sm_80", fast, 3, NULL, 0, "arch differs: sm_80", seen, &nseen);
    const char *names[] = {"scale<float, 2>"};
    expect_rebuild(ctx, p.src, "sm_80", fast, 3, names, 1, "name expression added: scale<float, 2>",
                   seen, &nseen);
    /* Spellings that normalize alike share the entry, names too. */
    const char *respelled[] = {"--define-macro=EXTRA=2", "--use_fast_math"};
    const char *renamed[] = {" scale< float,2 > "};
    assert_int_equal(build(ctx, p.src, "sm_80", respelled, 2, names, 1).cached, 1);
    assert_int_equal(build(ctx, p.src, "sm_80", respelled, 2, renamed, 1).cached, 1);
    jitop_ctx_destroy(ctx);
    project_free(&p);
}

static void test_syntax_error_writes_nothing(void **state)
{
    (void)state;
    char *dir = jt_tmpdir(), *cache = jt_tmpdir();
    char *src = jt_write(dir, "bad.cu", "__global__ void k(float *x) {\n  x[0] = 1;\n  x[1] = ;\n}\n");
    jitop_ctx *ctx = jt_ctx(cache, "sm_90");
    jitop_build_result r;
    assert_int_equal(jitop_build(ctx, src, NULL, NULL, 0, NULL, 0, &r), JITOP_ECOMPILE);
    char where[PATH_MAX + 32];
    snprintf(where, sizeof where, "%s(3): error", src);
    if (!strstr(jitop_errmsg(ctx), where))
        fail_msg("expected '%s' in: %s", where, jitop_errmsg(ctx));
    assert_int_equal(count_entries(ctx), 0);
    char cmd[PATH_MAX + 64];
    char *out = NULL;
    snprintf(cmd, sizeof cmd,
             "find '%s' -type f ! -path '*/locks/*' ! -name CACHEDIR.TAG ! -name jitop.tag | wc -l",
             cache);
    assert_int_equal(jt_run(cmd, &out), 0);
    assert_int_equal(atoi(out), 0); /* no entry, no manifest, no temp file (locks, markers aside) */
    free(out);
    jitop_ctx_destroy(ctx);
    free(src); free(dir); free(cache);
}

/* Children report through their exit status: 10 compiled, 11 cached. They
 * end with _exit, so that the test runner's atexit cleanup stays the
 * parent's, after freeing what the parent had allocated (valgrind checks
 * each child for leaks too). */
static int racer(const char *cache, const char *src, int start_fd)
{
    char c;
    while (read(start_fd, &c, 1) < 0 && errno == EINTR)
        ;
    jitop_config cfg;
    jitop_config_init(&cfg);
    cfg.cache_dir = cache;
    cfg.arch = "sm_90";
    cfg.compile_only = 1;
    jitop_ctx *ctx = NULL;
    if (jitop_ctx_create(&cfg, &ctx) != JITOP_OK)
        return 2;
    jitop_build_result r;
    int st = jitop_build(ctx, src, NULL, NULL, 0, NULL, 0, &r);
    jitop_ctx_destroy(ctx);
    return st != JITOP_OK ? 3 : r.cached ? 11 : 10;
}

static void test_16_processes_compile_once(void **state)
{
    (void)state;
    struct project p;
    project_make(&p);
    enum { N = 16 };
    int start[2];
    assert_int_equal(pipe(start), 0);
    pid_t pids[N];
    for (int i = 0; i < N; i++) {
        pids[i] = fork();
        assert_true(pids[i] >= 0);
        if (pids[i] == 0) {
            close(start[1]);
            int code = racer(p.cache, p.src, start[0]);
            project_free(&p);
            _exit(code);
        }
    }
    close(start[0]);
    close(start[1]); /* every child starts now */
    int compiled = 0, cached = 0;
    for (int i = 0; i < N; i++) {
        int ws = 0;
        assert_int_equal(waitpid(pids[i], &ws, 0), pids[i]);
        assert_true(WIFEXITED(ws));
        int code = WEXITSTATUS(ws);
        if (code == 10)
            compiled++;
        else if (code == 11)
            cached++;
        else
            fail_msg("child %d exited with %d", i, code);
    }
    assert_int_equal(compiled, 1);
    assert_int_equal(cached, N - 1);
    project_free(&p);
}

static char *lock_file(const char *cache, const char *key)
{
    char *p = malloc(strlen(cache) + 80);
    assert_non_null(p);
    sprintf(p, "%s/v%d/locks/%s.lock", cache, JITOP__FORMAT_VERSION, key);
    return p;
}

/* The key jitop_build will use for src (computed the library's way). */
static void key_of(const char *src, const char *const *opts, size_t nopts, char key[33])
{
    jitop__unit u;
    assert_int_equal(jitop__unit_init(&u, src, NULL, opts, nopts, NULL, 0, "sm_90"), JITOP_OK);
    jitop__deps d;
    char *text = NULL;
    assert_int_equal(jitop__deps_scan(&u, &d, &text), JITOP_OK);
    jitop__cache_key(&u, &d, key);
    free(text);
    jitop__deps_free(&d);
    jitop__unit_free(&u);
}

static bool lock_held_by_other(const char *path)
{
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0)
        return false;
    bool held = flock(fd, LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK;
    close(fd); /* releases it if we got it */
    return held;
}

/* The child's seam: tell the parent NVRTC is done, then wait to be killed
 * between the compile and the cache write. */
static int kill_point_fd = -1;
static void stop_after_compile(const char *source)
{
    (void)source;
    if (write(kill_point_fd, "c", 1) != 1)
        _exit(4);
    for (;;)
        pause();
}

static void test_kill_9_during_compile(void **state)
{
    (void)state;
    char *dir = jt_tmpdir(), *cache = jt_tmpdir();
    char *src = jt_write(dir, "slow.cu", slow_src);
    free(jt_write(dir, "h.cuh", "#define H 1.0f\n"));
    const char *opts[] = {"-DDEPTH=3"};
    char key[33];
    key_of(src, opts, 1, key);
    char *lock = lock_file(cache, key), *entry = entry_file(cache, key);
    int ready[2];
    assert_int_equal(pipe(ready), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(ready[0]);
        kill_point_fd = ready[1];
        jitop__after_compile_hook = stop_after_compile;
        jitop_config cfg;
        jitop_config_init(&cfg);
        cfg.cache_dir = cache;
        cfg.arch = "sm_90";
        cfg.compile_only = 1;
        jitop_ctx *ctx = NULL;
        jitop_build_result r;
        int code = jitop_ctx_create(&cfg, &ctx) != JITOP_OK ||
                           jitop_build(ctx, src, NULL, opts, 1, NULL, 0, &r) != JITOP_OK
                       ? 3
                       : 0;
        jitop_ctx_destroy(ctx);
        free(lock); free(entry); free(src); free(dir); free(cache);
        _exit(code);
    }
    close(ready[1]);
    char c = 0;
    assert_int_equal(read(ready[0], &c, 1), 1); /* compiled, not yet written */
    close(ready[0]);
    assert_true(lock_held_by_other(lock));
    assert_int_equal(kill(pid, SIGKILL), 0);
    int ws = 0;
    assert_int_equal(waitpid(pid, &ws, 0), pid);
    assert_true(WIFSIGNALED(ws) && WTERMSIG(ws) == SIGKILL);
    /* The lock died with the process; no entry is visible. */
    assert_false(lock_held_by_other(lock));
    assert_false(exists(entry));
    jitop_ctx *ctx = jt_ctx(cache, "sm_90");
    int hit = 1;
    free(explain(ctx, src, NULL, opts, 1, NULL, 0, &hit));
    assert_int_equal(hit, 0);
    jitop_build_result r = build(ctx, src, NULL, opts, 1, NULL, 0);
    assert_int_equal(r.cached, 0);
    assert_string_equal(r.key, key);
    assert_true(exists(entry));
    assert_int_equal(build(ctx, src, NULL, opts, 1, NULL, 0).cached, 1);
    jitop_ctx_destroy(ctx);
    free(lock); free(entry); free(src); free(dir); free(cache);
}

/* The seam that plays an editor saving h.cuh while NVRTC reads it: the
 * first `edits_left` compiles each see a new version appear (a rename, as
 * editors save), with a distinct text each time. */
static const char *edit_dir;
static int edits_left, edits_made;
static void save_header_during_compile(const char *source)
{
    (void)source;
    if (edits_left == 0)
        return;
    edits_left--;
    edits_made++;
    char text[64];
    snprintf(text, sizeof text, "#define H %d.0f\n", edits_made + 1);
    free(jt_write_rename(edit_dir, "h.cuh", text));
}

static void test_header_edited_during_compile_is_not_cached_stale(void **state)
{
    (void)state;
    char *dir = jt_tmpdir(), *cache = jt_tmpdir();
    char *src = jt_write(dir, "slow.cu", slow_src);
    char *h = jt_write(dir, "h.cuh", "#define H 1.0f\n");
    jt_touch(h, -60);
    const char *opts[] = {"-DDEPTH=3"};
    char old_key[33], new_key[33];
    key_of(src, opts, 1, old_key);
    jitop_ctx *ctx = jt_ctx(cache, "sm_90");
    edit_dir = dir;
    edits_left = 1;
    edits_made = 0;
    jitop__after_compile_hook = save_header_during_compile;
    jitop_build_result r;
    int status = jitop_build(ctx, src, NULL, opts, 1, NULL, 0, &r);
    jitop__after_compile_hook = NULL;
    assert_int_equal(status, JITOP_OK);
    assert_int_equal(edits_made, 1);
    key_of(src, opts, 1, new_key);
    assert_string_not_equal(old_key, new_key);
    /* What was cached is the build of the new header, under its key; the
     * compile that raced the edit was not stored under the old key. */
    assert_string_equal(r.key, new_key);
    assert_int_equal(r.cached, 0);
    char *old_entry = entry_file(cache, old_key), *new_entry = entry_file(cache, new_key);
    assert_false(exists(old_entry));
    assert_true(exists(new_entry));
    jitop_ctx_destroy(ctx);
    free(old_entry); free(new_entry); free(src); free(h); free(dir); free(cache);
}

/* A file that changes during every compile: the build gives up after a few
 * tries with an error naming it, and caches nothing. */
static void test_header_that_keeps_changing_fails_cleanly(void **state)
{
    (void)state;
    char *dir = jt_tmpdir(), *cache = jt_tmpdir();
    char *src = jt_write(dir, "slow.cu", slow_src);
    char *h = jt_write(dir, "h.cuh", "#define H 1.0f\n");
    const char *opts[] = {"-DDEPTH=1"};
    jitop_ctx *ctx = jt_ctx(cache, "sm_90");
    edit_dir = dir;
    edits_left = 1000;
    edits_made = 0;
    jitop__after_compile_hook = save_header_during_compile;
    jitop_build_result r;
    int status = jitop_build(ctx, src, NULL, opts, 1, NULL, 0, &r);
    jitop__after_compile_hook = NULL;
    assert_int_equal(status, JITOP_EIO);
    assert_non_null(strstr(jitop_errmsg(ctx), "h.cuh"));
    assert_non_null(strstr(jitop_errmsg(ctx), "kept changing"));
    assert_true(edits_made >= 2 && edits_made < 1000);
    /* Once the editor stops, the next build succeeds and is what is on disk. */
    char key[33];
    key_of(src, opts, 1, key);
    r = build(ctx, src, NULL, opts, 1, NULL, 0);
    assert_int_equal(r.cached, 0);
    assert_string_equal(r.key, key);
    jitop_ctx_destroy(ctx);
    free(src); free(h); free(dir); free(cache);
}

struct bg_build {
    jitop_ctx *ctx;
    const char *src;
    const char *const *opts;
    size_t nopts;
    int status;
    jitop_build_result r;
};

static void *thread_build(void *arg)
{
    struct bg_build *b = arg;
    for (int i = 0; i < 3 && b->status == JITOP_OK; i++)
        b->status = jitop_build(b->ctx, b->src, NULL, b->opts, b->nopts, NULL, 0, &b->r);
    return NULL;
}

static void test_threads_share_a_context(void **state)
{
    (void)state;
    struct project p;
    project_make(&p);
    jitop_ctx *ctx = jt_ctx(p.cache, "sm_90");
    enum { T = 4 };
    const char *o0[] = {"-DCASE=0"}, *o1[] = {"-DCASE=1"};
    struct bg_build b[T];
    pthread_t t[T];
    for (int i = 0; i < T; i++) {
        b[i] = (struct bg_build){ctx, p.src, i % 2 ? o1 : o0, 1, JITOP_OK, {0}};
        assert_int_equal(pthread_create(&t[i], NULL, thread_build, &b[i]), 0);
    }
    for (int i = 0; i < T; i++) {
        assert_int_equal(pthread_join(t[i], NULL), 0);
        if (b[i].status != JITOP_OK)
            fail_msg("thread %d: %s", i, jitop_strerror(b[i].status));
        assert_int_equal(b[i].r.cached, 1); /* the last of its 3 builds */
    }
    assert_string_equal(b[0].r.key, b[2].r.key);
    assert_string_not_equal(b[0].r.key, b[1].r.key);
    assert_int_equal(count_entries(ctx), 2);
    jitop_ctx_destroy(ctx);
    project_free(&p);
}

static int64_t realtime_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Racy clean, end to end: a header saved half a second before a build (so
 * inside the timestamp-granularity window when the manifest records it),
 * then rewritten with the same size and its old mtime restored. Once the
 * window has passed, a check against the time of the check would trust the
 * manifest and serve the old binary; the manifest must have kept the header
 * marked, so the build hashes it and compiles the new text. */
static void test_racy_clean_manifest_not_trusted_later(void **state)
{
    (void)state;
    struct project p;
    project_make(&p);
    jitop__recent_window_ns = JITOP__RECENT_WINDOW_NS;
    jitop_ctx *ctx = jt_ctx(p.cache, "sm_90");
    jt_touch(p.b, -0.5);
    struct stat st;
    assert_int_equal(stat(p.b, &st), 0);
    int64_t mtime = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
    jitop_build_result r1 = build(ctx, p.src, NULL, NULL, 0, NULL, 0);
    assert_int_equal(r1.cached, 0);

    /* The premise: the manifest holds the header as recent (the scan ran
     * within 1.5 s of the touch). */
    jitop__unit u;
    assert_int_equal(jitop__unit_init(&u, p.src, NULL, NULL, 0, NULL, 0, "sm_90"), JITOP_OK);
    char id[33], key[33];
    jitop__manifest_id(&u, id);
    jitop__deps d;
    bool found = false;
    assert_int_equal(jitop__manifest_get(ctx->cache, id, &d, key, &found), JITOP_OK);
    assert_true(found);
    bool marked = false;
    for (size_t i = 0; i < d.n; i++)
        if (strcmp(d.v[i].path, p.b) == 0)
            marked = d.v[i].recent;
    assert_true(marked);
    jitop__deps_free(&d);
    jitop__unit_free(&u);

    /* Same size, same inode, same mtime: only the bytes differ. */
    FILE *f = fopen(p.b, "r+b");
    assert_non_null(f);
    const char *text = "#pragma once\n#define B_VALUE 2\n";
    assert_int_equal(fwrite(text, 1, strlen(text), f), strlen(text));
    assert_int_equal(fclose(f), 0);
    struct timespec ts[2] = {st.st_atim, st.st_mtim};
    assert_int_equal(utimensat(AT_FDCWD, p.b, ts, 0), 0);
    struct stat st2;
    assert_int_equal(stat(p.b, &st2), 0);
    assert_int_equal(st2.st_size, st.st_size);
    assert_int_equal(st2.st_ino, st.st_ino);

    /* Wait until the mtime is older than the window, as any later build
     * would see it. */
    while (realtime_ns() < mtime + (int64_t)2200000000) {
        struct timespec nap = {0, 50 * 1000 * 1000};
        nanosleep(&nap, NULL);
    }
    int hit = 1;
    char *why = explain(ctx, p.src, NULL, NULL, 0, NULL, 0, &hit);
    assert_int_equal(hit, 0);
    free(why);
    jitop_build_result r2 = build(ctx, p.src, NULL, NULL, 0, NULL, 0);
    assert_int_equal(r2.cached, 0);
    assert_string_not_equal(r2.key, r1.key);
    /* Now recorded as old: the stat fast path serves the new binary. */
    jitop_build_result r3 = build(ctx, p.src, NULL, NULL, 0, NULL, 0);
    assert_int_equal(r3.cached, 1);
    assert_string_equal(r3.key, r2.key);
    jitop_ctx_destroy(ctx);
    project_free(&p);
}

/* The CLI's hit pass: a hit is built from the cache (as jitop_build
 * would), a miss builds nothing. */
static bool if_cached(jitop_ctx *ctx, const char *src, const char *arch, const char *const *opts,
                      size_t nopts, int expect_status, jitop_build_result *r)
{
    bool hit = true;
    int st = jitop__build_if_cached(ctx, src, arch, opts, nopts, NULL, 0, &hit, r, NULL);
    if (st != expect_status)
        fail_msg("%s: %s: %s", src, jitop_strerror(st), jitop_errmsg(ctx));
    return hit;
}

static void test_if_cached(void **state)
{
    (void)state;
    struct project p;
    project_make(&p);
    jitop_ctx *ctx = jt_ctx(p.cache, "sm_90");
    jitop_build_result r;
    assert_false(if_cached(ctx, p.src, NULL, NULL, 0, JITOP_OK, &r));
    assert_int_equal(r.cached, 0);
    assert_int_equal(count_entries(ctx), 0); /* a miss compiles nothing */
    jitop_build_result built = build(ctx, p.src, NULL, NULL, 0, NULL, 0);
    assert_true(if_cached(ctx, p.src, NULL, NULL, 0, JITOP_OK, &r));
    assert_int_equal(r.cached, 1);
    assert_string_equal(r.key, built.key);
    assert_false(if_cached(ctx, p.src, "sm_80", NULL, 0, JITOP_OK, &r));
    const char *opts[] = {"-DEXTRA=1"};
    assert_false(if_cached(ctx, p.src, NULL, opts, 1, JITOP_OK, &r));
    /* Touched but unchanged: still a hit (found by hashing). */
    jt_touch(p.a, -20);
    assert_true(if_cached(ctx, p.src, NULL, NULL, 0, JITOP_OK, &r));
    assert_string_equal(r.key, built.key);
    /* Edited: a miss. */
    free(jt_write(p.dir, "a.cuh", "#pragma once\n#include \"inc/b.cuh\"\n#define A_VALUE 4\n"));
    jt_touch(p.a, -10);
    assert_false(if_cached(ctx, p.src, NULL, NULL, 0, JITOP_OK, &r));
    assert_false(if_cached(ctx, "/no/such/file.cu", NULL, NULL, 0, JITOP_ENOTFOUND, &r));
    assert_false(if_cached(ctx, p.src, "sm_9", NULL, 0, JITOP_EINVAL, &r));
    jitop_ctx_destroy(ctx);
    project_free(&p);
}

static void sleep_300ms(const char *source)
{
    (void)source;
    struct timespec ts = {0, 300 * 1000 * 1000};
    while (nanosleep(&ts, &ts) != 0)
        ;
}

/* A hit found by hashing (the stat data did not vouch) reports the time
 * the hashing took: the scan is made to last at least 300 ms, and the
 * reported time covers it (a lower bound a sleep guarantees, whatever the
 * machine's speed). */
static void test_hit_time_includes_hashing(void **state)
{
    (void)state;
    struct project p;
    project_make(&p);
    jitop_ctx *ctx = jt_ctx(p.cache, "sm_90");
    build(ctx, p.src, NULL, NULL, 0, NULL, 0);
    jt_touch(p.src, -30);
    jitop_build_result r;
    jitop__after_scan_hook = sleep_300ms;
    bool hit = if_cached(ctx, p.src, NULL, NULL, 0, JITOP_OK, &r);
    jt_touch(p.src, -40);
    jitop_build_result r2 = build(ctx, p.src, NULL, NULL, 0, NULL, 0);
    jitop__after_scan_hook = NULL;
    assert_true(hit);
    if (r.ms < 300.0)
        fail_msg("a hit after 300 ms of scanning reported %.1f ms", r.ms);
    assert_int_equal(r2.cached, 1);
    if (r2.ms < 300.0)
        fail_msg("jitop_build: a hit after 300 ms of scanning reported %.1f ms", r2.ms);
    jitop_ctx_destroy(ctx);
    project_free(&p);
}

static void test_bad_arguments(void **state)
{
    (void)state;
    char *cache = jt_tmpdir();
    jitop_ctx *ctx = jt_ctx(cache, "sm_90");
    jitop_build_result r;
    assert_int_equal(jitop_build(NULL, "/x.cu", NULL, NULL, 0, NULL, 0, &r), JITOP_EINVAL);
    assert_int_equal(jitop_build(ctx, NULL, NULL, NULL, 0, NULL, 0, &r), JITOP_EINVAL);
    assert_int_equal(jitop_build(ctx, "/no/such/file.cu", NULL, NULL, 0, NULL, 0, &r),
                     JITOP_ENOTFOUND);
    assert_non_null(strstr(jitop_errmsg(ctx), "/no/such/file.cu"));
    const char *arch_opt[] = {"-arch=sm_80"};
    assert_int_equal(jitop_build(ctx, "/x.cu", NULL, arch_opt, 1, NULL, 0, &r), JITOP_EINVAL);
    int hit;
    char *why;
    assert_int_equal(jitop_explain(ctx, "/x.cu", NULL, NULL, 0, NULL, 0, NULL, &why), JITOP_EINVAL);
    assert_int_equal(jitop_explain(ctx, "/x.cu", "sm_9", NULL, 0, NULL, 0, &hit, &why), JITOP_EINVAL);
    jitop_ctx_destroy(ctx);
    free(cache);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_compile_then_hit),
        cmocka_unit_test(test_touch_is_a_hit_and_refreshes_manifest),
        cmocka_unit_test(test_nested_header_edit_rebuilds),
        cmocka_unit_test(test_option_define_arch_name_changes_rebuild),
        cmocka_unit_test(test_syntax_error_writes_nothing),
        cmocka_unit_test(test_16_processes_compile_once),
        cmocka_unit_test(test_kill_9_during_compile),
        cmocka_unit_test(test_header_edited_during_compile_is_not_cached_stale),
        cmocka_unit_test(test_header_that_keeps_changing_fails_cleanly),
        cmocka_unit_test(test_threads_share_a_context),
        cmocka_unit_test(test_racy_clean_manifest_not_trusted_later),
        cmocka_unit_test(test_if_cached),
        cmocka_unit_test(test_hit_time_includes_hashing),
        cmocka_unit_test(test_bad_arguments),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
