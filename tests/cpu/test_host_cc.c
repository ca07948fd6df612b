/* The host compiler runs under the name it was asked by: a driver that is
 * a link to another (clang++ -> clang) behaves by the name it is started
 * with, and clang started as "clang" links C++ objects without the C++
 * library. SKIPs without clang++. */
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

static void test_cxx_named_by_a_link(void **state)
{
    (void)state;
    if (jt_run("command -v clang++ >/dev/null 2>&1", NULL) != 0) {
        print_message("SKIP: no clang++\n");
        skip();
    }
    setenv("JITOP_NINJA", "0", 1);
    setenv("CXX", "clang++", 1);
    char *dir = jt_tmpdir(), *cache = jt_path(dir, "cache");
    char *src = jt_write(dir, "s.cpp",
                         "#include <jitop_host.h>\n"
                         "#include <string>\n"
                         "JITOP_EXPORT(int, len, (const char *s)) { return (int)std::string(s).size(); }\n");
    const char *srcs[] = {src};
    jitop_ctx *ctx = jt_ctx(cache, NULL);
    jitop_module *m = NULL;
    OK(jitop_load(ctx, "cxx", srcs, 1, NULL, 0, &m));
    jitop_fn *f = NULL;
    OK(jitop_fn_get(m, "len", "int(ptr)", &f));
    const char *s = "hello";
    void *args[] = {&s};
    int r = 0;
    OK(jitop_call(f, args, &r));
    assert_int_equal(r, 5);
    jitop_ctx_destroy(ctx);
    unsetenv("CXX");
    unsetenv("JITOP_NINJA");
    free(src);
    free(cache);
    free(dir);
}

/* $CC names a link that is pointed at another compiler (as
 * update-alternatives does, or an upgrade in place): the objects are the
 * new compiler's, by jitop's builder and by ninja's (whose command line
 * stays the same). */
static void compiler_switch(const char *ninja)
{
    if (jt_run("command -v clang >/dev/null 2>&1 && command -v gcc >/dev/null 2>&1", NULL) != 0) {
        print_message("SKIP: needs gcc and clang\n");
        skip();
    }
    setenv("JITOP_NINJA", ninja, 1);
    jitop__recent_window_ns = 0; /* files written here count as settled */
    /* The link in a folder of its own: nothing where the source's headers
     * are looked for changes. */
    char *dir = jt_tmpdir(), *cache = jt_path(dir, "cache"), *cc = jt_path(dir, "bin/mycc");
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "mkdir '%s/bin' && ln -s \"$(command -v gcc)\" '%s'", dir, cc);
    assert_int_equal(jt_run(cmd, NULL), 0);
    setenv("CC", cc, 1);
    char *src = jt_write(dir, "w.c",
                         "#include <jitop_host.h>\n"
                         "#ifdef __clang__\n#define WHO 2\n#else\n#define WHO 1\n#endif\n"
                         "JITOP_EXPORT(int, who, (void)) { return WHO; }\n");
    const char *srcs[] = {src};
    for (int round = 0; round < 2; round++) {
        jitop_ctx *ctx = jt_ctx(cache, NULL);
        jitop_module *m = NULL;
        OK(jitop_load(ctx, "who", srcs, 1, NULL, 0, &m));
        jitop_fn *f = NULL;
        OK(jitop_fn_get(m, "who", "int(void)", &f));
        int r = 0;
        OK(jitop_call(f, NULL, &r));
        assert_int_equal(r, round + 1);
        jitop_ctx_destroy(ctx);
        snprintf(cmd, sizeof cmd, "ln -sfn \"$(command -v clang)\" '%s'", cc);
        assert_int_equal(jt_run(cmd, NULL), 0);
    }
    unsetenv("CC");
    unsetenv("JITOP_NINJA");
    free(src);
    free(cc);
    free(cache);
    free(dir);
}

static void test_compiler_switch(void **state)
{
    (void)state;
    compiler_switch("0");
}

static void test_compiler_switch_with_ninja(void **state)
{
    (void)state;
    char *ninja = NULL;
    if (jt_run("command -v ninja", &ninja) != 0) {
        print_message("SKIP: no ninja\n");
        free(ninja);
        skip();
    }
    ninja[strcspn(ninja, "\n")] = '\0';
    compiler_switch(ninja);
    free(ninja);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cxx_named_by_a_link),
        cmocka_unit_test(test_compiler_switch),
        cmocka_unit_test(test_compiler_switch_with_ninja),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    jt_cleanup();
    return rc;
}
