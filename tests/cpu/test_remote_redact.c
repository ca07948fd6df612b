/* The remote tier never shows a URL's credentials, also when the user part
 * holds an '@' (an e-mail address as the user name): the warning about a
 * remote that is down names the redacted URL only. No server needed: port
 * 1 on 127.0.0.1 refuses the connection. */
#include "testutil.h"

#include "cache/cache.h" /* jitop__remote_forget_dead */

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Builds a small kernel (compile only) with spec as the remote: what it
 * wrote on stderr. */
static char *build_with_remote(const char *spec)
{
    char *dir = jt_tmpdir(), *cache = jt_path(dir, "cache");
    char *src = jt_write(dir, "k.cu", "extern \"C\" __global__ void k(int *x) { *x = 3; }\n");
    char *cap = jt_path(dir, "stderr.txt");
    jitop__remote_forget_dead();
    fflush(stderr);
    int fd = open(cap, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    assert_true(fd >= 0);
    int saved = dup(2);
    assert_true(saved >= 0);
    assert_int_equal(dup2(fd, 2), 2);
    assert_int_equal(close(fd), 0);
    jitop_config cfg;
    jitop_config_init(&cfg);
    cfg.cache_dir = cache;
    cfg.arch = "sm_90";
    cfg.compile_only = 1;
    cfg.remote_cache = spec;
    cfg.remote_cache_secret = "";
    jitop_ctx *ctx = NULL;
    int st = jitop_ctx_create(&cfg, &ctx);
    jitop_build_result res;
    if (st == JITOP_OK)
        st = jitop_build(ctx, src, NULL, NULL, 0, NULL, 0, &res);
    jitop_ctx_destroy(ctx);
    fflush(stderr);
    assert_int_equal(dup2(saved, 2), 2);
    assert_int_equal(close(saved), 0);
    assert_int_equal(st, JITOP_OK);
    char *text = jt_read(cap);
    fputs(text, stderr);
    free(cap);
    free(src);
    free(cache);
    free(dir);
    return text;
}

static void test_user_with_at_sign(void **state)
{
    (void)state;
    char *err = build_with_remote("http://ci@example.com:hunter2@127.0.0.1:1/cache");
    assert_non_null(strstr(err, "remote cache"));
    assert_null(strstr(err, "hunter2"));
    assert_null(strstr(err, "example.com"));
    assert_non_null(strstr(err, "http://127.0.0.1:1/cache"));
    free(err);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_user_with_at_sign),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    jt_cleanup();
    return rc;
}
