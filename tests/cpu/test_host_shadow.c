/* A header created where the compiler looks before the one it found (next
 * to the source, shadowing one under -I) is what a fresh compile reads:
 * the next load must not take the old object from the cache. */
#include "testutil.h"
#include "load/load.h" /* jitop__recent_window_ns */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define OK(call)                                                                                  \
    do {                                                                                          \
        int st_ = (call);                                                                         \
        if (st_ != JITOP_OK)                                                                      \
            fail_msg("%s: %s: %s", #call, jitop_strerror(st_), jitop_errmsg(NULL));               \
    } while (0)

static int value_of(const char *cache, const char *src, const char *opt)
{
    jitop_ctx *ctx = jt_ctx(cache, NULL);
    const char *srcs[] = {src}, *opts[] = {opt};
    jitop_module *m = NULL;
    OK(jitop_load(ctx, "shadow", srcs, 1, opts, 1, &m));
    jitop_fn *f = NULL;
    OK(jitop_fn_get(m, "value", "int(void)", &f));
    int r = -1;
    OK(jitop_call(f, NULL, &r));
    jitop_ctx_destroy(ctx);
    return r;
}

static void shadowing(const char *ninja)
{
    jitop__recent_window_ns = 0; /* files written here count as settled */
    setenv("JITOP_NINJA", ninja, 1);
    unsetenv("CC");
    char *dir = jt_tmpdir(), *cache = jt_path(dir, "cache"), *srcdir = jt_path(dir, "src");
    char *inc = jt_path(dir, "inc"), cmd[4096];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s' '%s'", srcdir, inc);
    assert_int_equal(jt_run(cmd, NULL), 0);
    char *src = jt_write(srcdir, "s.c",
                         "#include <jitop_host.h>\n"
                         "#include \"value.h\"\n"
                         "JITOP_EXPORT(int, value, (void)) { return VALUE; }\n");
    free(jt_write(inc, "value.h", "#define VALUE 1\n"));
    char opt[4200];
    snprintf(opt, sizeof opt, "-I%s", inc);
    usleep(20000);
    assert_int_equal(value_of(cache, src, opt), 1);
    /* The quoted include looks next to the source first. */
    free(jt_write(srcdir, "value.h", "#define VALUE 2\n"));
    usleep(20000);
    assert_int_equal(value_of(cache, src, opt), 2);
    /* And gone again: the -I one is back. */
    char *shadow = jt_path(srcdir, "value.h");
    assert_int_equal(unlink(shadow), 0);
    usleep(20000);
    assert_int_equal(value_of(cache, src, opt), 1);
    unsetenv("JITOP_NINJA");
    free(shadow);
    free(src);
    free(inc);
    free(srcdir);
    free(cache);
    free(dir);
}

static void test_header_shadowing_an_include_dir(void **state)
{
    (void)state;
    shadowing("0");
}

/* The same through ninja (deps = gcc knows nothing of the new header:
 * its object must be rebuilt all the same). */
static void test_header_shadowing_with_ninja(void **state)
{
    (void)state;
    char *ninja = NULL;
    if (jt_run("command -v ninja", &ninja) != 0) {
        print_message("SKIP: no ninja\n");
        free(ninja);
        skip();
    }
    ninja[strcspn(ninja, "\n")] = '\0';
    shadowing(ninja);
    free(ninja);
}

/* The same in a running process: a reload of the module sees the new
 * header. */
static void test_reload_sees_a_shadowing_header(void **state)
{
    (void)state;
    jitop__recent_window_ns = 0;
    setenv("JITOP_NINJA", "0", 1);
    unsetenv("CC");
    char *dir = jt_tmpdir(), *cache = jt_path(dir, "cache"), *srcdir = jt_path(dir, "src");
    char *inc = jt_path(dir, "inc"), cmd[4096];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s' '%s'", srcdir, inc);
    assert_int_equal(jt_run(cmd, NULL), 0);
    char *src = jt_write(srcdir, "s.c",
                         "#include <jitop_host.h>\n"
                         "#include \"value.h\"\n"
                         "JITOP_EXPORT(int, value, (void)) { return VALUE; }\n");
    free(jt_write(inc, "value.h", "#define VALUE 1\n"));
    char opt[4200];
    snprintf(opt, sizeof opt, "-I%s", inc);
    usleep(20000);
    jitop_ctx *ctx = jt_ctx(cache, NULL);
    const char *srcs[] = {src}, *opts[] = {opt};
    jitop_module *m = NULL;
    OK(jitop_load(ctx, "shadow", srcs, 1, opts, 1, &m));
    jitop_fn *f = NULL;
    OK(jitop_fn_get(m, "value", "int(void)", &f));
    int r = -1;
    OK(jitop_call(f, NULL, &r));
    assert_int_equal(r, 1);
    free(jt_write(srcdir, "value.h", "#define VALUE 2\n"));
    usleep(20000);
    OK(jitop_module_reload(m));
    OK(jitop_call(f, NULL, &r));
    assert_int_equal(r, 2);
    jitop_ctx_destroy(ctx);
    unsetenv("JITOP_NINJA");
    free(src);
    free(inc);
    free(srcdir);
    free(cache);
    free(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_header_shadowing_an_include_dir),
        cmocka_unit_test(test_header_shadowing_with_ninja),
        cmocka_unit_test(test_reload_sees_a_shadowing_header),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    jt_cleanup();
    return rc;
}
