/* What the remote-cache tests that need a real server share
 * (tests/cpu/test_remote_creds.c, tests/cpu/test_remote_fork.c): nginx
 * with WebDAV from tests/support/nginx_dav.sh, started in a group setup and
 * stopped in its teardown; compile-only contexts with a remote; stderr
 * captured; the server's access log read back (nginx writes one line per
 * request, unbuffered, so a count of PUTs is exact once the writers are
 * done).
 *
 * Static inline functions in a header, so that a test may use some only:
 * the Makefile links tests/support's two .c files into every test, and
 * only these tests need these. */
#ifndef JITOP_TEST_REMOTE_SERVER_H
#define JITOP_TEST_REMOTE_SERVER_H

#include "testutil.h"

#include "cache/cache.h" /* jitop__remote_forget_dead */

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define RS_NGINX_DAV JITOP_SOURCE_KERNEL_DIR "/../tests/support/nginx_dav.sh"
/* Generous bounds where a test wants the remote to answer (valgrind and
 * sanitizers are slow). */
#define RS_PATIENT "|connect-timeout=5000|timeout=20000|put-timeout=20000"

static char *rs_dir; /* the server's directory */
static int rs_port;  /* 0: no nginx, every test skips */

static inline int rs_setup(void **state)
{
    (void)state;
    rs_dir = jt_tmpdir();
    char cmd[4096], *out = NULL;
    snprintf(cmd, sizeof cmd, "'%s' start '%s' 2>&1", RS_NGINX_DAV, rs_dir);
    int rc = jt_run(cmd, &out);
    if (rc == 0)
        rs_port = atoi(out);
    else if (rc == 77)
        fprintf(stderr, "SKIP: nginx is not installed (scripts/install-deps.sh with "
                        "JITOP_WANT_NGINX=1 installs it)\n");
    else
        fprintf(stderr, "nginx_dav.sh failed (%d): %s\n", rc, out ? out : "");
    free(out);
    return rc == 0 || rc == 77 ? 0 : -1;
}

static inline int rs_teardown(void **state)
{
    (void)state;
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "'%s' stop '%s'", RS_NGINX_DAV, rs_dir);
    int rc = jt_run(cmd, NULL);
    free(rs_dir);
    return rc == 0 ? 0 : -1;
}

#define RS_NEED_SERVER()                                                                         \
    do {                                                                                         \
        if (!rs_port) {                                                                          \
            print_message("SKIP: nginx is not installed\n");                                     \
            skip();                                                                              \
        }                                                                                        \
        jitop__remote_forget_dead();                                                             \
    } while (0)

/* http://127.0.0.1:<port>/<loc><attrs> (malloc'd). */
static inline char *rs_url(const char *loc, const char *attrs)
{
    char *u = NULL;
    if (asprintf(&u, "http://127.0.0.1:%d/%s%s", rs_port, loc, attrs ? attrs : "") < 0)
        fail_msg("asprintf");
    return u;
}

/* A compile-only context on its own local cache with the remote spec. */
static inline jitop_ctx *rs_ctx(const char *cache, const char *spec)
{
    jitop_config cfg;
    jitop_config_init(&cfg);
    cfg.cache_dir = cache;
    cfg.arch = "sm_90";
    cfg.compile_only = 1;
    cfg.remote_cache = spec;
    cfg.remote_cache_secret = "";
    jitop_ctx *ctx = NULL;
    if (jitop_ctx_create(&cfg, &ctx) != JITOP_OK)
        fail_msg("jitop_ctx_create: %s", jitop_errmsg(NULL));
    return ctx;
}

/* A source of its own for each tag (its own key), in a directory of its
 * own. */
static inline char *rs_source(const char *tag)
{
    char *dir = jt_tmpdir(), text[512], name[128];
    snprintf(text, sizeof text,
             "extern \"C\" __global__ void k_%s(float *x) { x[threadIdx.x] += 2.0f; }\n", tag);
    snprintf(name, sizeof name, "%s.cu", tag);
    char *p = jt_write(dir, name, text);
    free(dir);
    return p;
}

/* jitop_build of src: 1 when it was cached (locally or from a remote), 0
 * when compiled; fails the test when the build fails. */
static inline int rs_build(jitop_ctx *ctx, const char *src, char key[33])
{
    jitop_build_result res;
    if (jitop_build(ctx, src, NULL, NULL, 0, NULL, 0, &res) != JITOP_OK)
        fail_msg("jitop_build %s: %s", src, jitop_errmsg(ctx));
    if (key)
        memcpy(key, res.key, 33);
    return res.cached;
}

/* stderr into a file between rs_capture_begin and rs_capture_end, which
 * returns what was written (malloc'd; also copied to the real stderr). */
static int rs_saved_fd = -1;
static char *rs_cap_path;
static inline void rs_capture_begin(void)
{
    char *dir = jt_tmpdir();
    rs_cap_path = jt_path(dir, "stderr.txt");
    free(dir);
    fflush(stderr);
    int fd = open(rs_cap_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    assert_true(fd >= 0);
    rs_saved_fd = dup(2);
    assert_true(rs_saved_fd >= 0);
    assert_int_equal(dup2(fd, 2), 2);
    assert_int_equal(close(fd), 0);
}
static inline char *rs_capture_end(void)
{
    fflush(stderr);
    assert_int_equal(dup2(rs_saved_fd, 2), 2);
    assert_int_equal(close(rs_saved_fd), 0);
    char *text = jt_read(rs_cap_path);
    free(rs_cap_path);
    fputs(text, stderr); /* still shown in the test's log */
    return text;
}

/* How many requests of method reached /<loc>/v4/<ab>/<key> (the access
 * log's request field). */
static inline int rs_requests(const char *method, const char *loc, const char key[33])
{
    char *log = jt_path(rs_dir, "access.log"), needle[512];
    snprintf(needle, sizeof needle, "\"%s /%s/v4/%.2s/%s ", method, loc, key, key);
    char *text = jt_read(log);
    int n = 0;
    for (const char *p = text; (p = strstr(p, needle)) != NULL; p++)
        n++;
    free(text);
    free(log);
    return n;
}

/* rs_requests once it reaches want, or after 5 s: nginx writes a request's
 * access-log line after the response has gone out, so a client holding
 * its answer can read the log before the line is there. An exact count is
 * then still checked by the caller (more than want is a failure too). */
static inline int rs_requests_settled(const char *method, const char *loc, const char key[33],
                                      int want)
{
    int n = rs_requests(method, loc, key);
    for (int i = 0; i < 500 && n < want; i++) {
        const struct timespec ten_ms = {0, 10 * 1000 * 1000};
        nanosleep(&ten_ms, NULL);
        n = rs_requests(method, loc, key);
    }
    return n;
}

/* Whether the server's tree holds the entry under www/<tree>/. */
static inline int rs_holds(const char *tree, const char key[33])
{
    char rel[512];
    snprintf(rel, sizeof rel, "www/%s/v4/%.2s/%s", tree, key, key);
    char *p = jt_path(rs_dir, rel);
    int ok = access(p, F_OK) == 0;
    free(p);
    return ok;
}

#endif
