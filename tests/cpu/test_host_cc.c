/* The host compiler runs under the name it was asked by: a driver that is
 * a link to another (clang++ -> clang) behaves by the name it is started
 * with, and clang started as "clang" links C++ objects without the C++
 * library. SKIPs without clang++. */
#include "testutil.h"

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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cxx_named_by_a_link),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    jt_cleanup();
    return rc;
}
