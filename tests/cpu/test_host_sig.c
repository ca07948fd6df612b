/* Host functions' recorded prototypes read as the C they are: a parameter
 * whose name is also one of jitop's type codes (i8, f32, ptr ...) is still
 * its declared type, and a type jitop cannot call (long double) is refused
 * instead of being read as another one (a mismatched call otherwise passes
 * the signature check). */
#include "testutil.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define OK(call)                                                                                  \
    do {                                                                                          \
        int st_ = (call);                                                                         \
        if (st_ != JITOP_OK)                                                                      \
            fail_msg("%s: %s: %s", #call, jitop_strerror(st_), jitop_errmsg(NULL));               \
    } while (0)

static int setup(void **state)
{
    (void)state;
    setenv("JITOP_NINJA", "0", 1);
    unsetenv("CC");
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    unsetenv("JITOP_NINJA");
    jt_cleanup();
    return 0;
}

static jitop_module *load_src(jitop_ctx *ctx, const char *dir, const char *text)
{
    char *src = jt_write(dir, "s.c", text);
    const char *srcs[] = {src};
    jitop_module *m = NULL;
    OK(jitop_load(ctx, "sig", srcs, 1, NULL, 0, &m));
    free(src);
    return m;
}

/* A parameter named like a type code keeps its declared type: the record
 * "int (uintptr_t ptr)" is a uintptr_t, "int (size_t f32)" a size_t. */
static void test_param_named_like_a_code(void **state)
{
    (void)state;
    char *dir = jt_tmpdir(), *cache = jt_path(dir, "cache");
    jitop_ctx *ctx = jt_ctx(cache, NULL);
    jitop_module *m = load_src(ctx, dir,
                               "#include <stdint.h>\n"
                               "#include <stddef.h>\n"
                               "#include <jitop_host.h>\n"
                               "JITOP_EXPORT(int, low, (uintptr_t ptr)) { return (int)(ptr & 0xff); }\n"
                               "JITOP_EXPORT(long, twice, (size_t f32)) { return (long)f32 * 2; }\n");
    jitop_fn *f = NULL;
    OK(jitop_fn_get(m, "low", "int(uintptr_t)", &f));
    uintptr_t p = 0x1234;
    void *args[] = {&p};
    int r = 0;
    OK(jitop_call(f, args, &r));
    assert_int_equal(r, 0x34);
    /* The size_t passes in an integer register: asking for a float would
     * hand the function whatever the register holds. */
    assert_int_equal(jitop_fn_get(m, "twice", "long(f32)", &f), JITOP_EARGS);
    OK(jitop_fn_get(m, "twice", "long(size_t)", &f));
    size_t n = 21;
    void *args2[] = {&n};
    long lr = 0;
    OK(jitop_call(f, args2, &lr));
    assert_int_equal(lr, 42);
    jitop_ctx_destroy(ctx);
    free(cache);
    free(dir);
}

/* A type jitop cannot call is refused, not read as its first word: the
 * record "long double (void)" is no i64 (its value comes back in x87's
 * st0, which a caller reading rax leaves pushed), and "double _Complex"
 * no double. */
static void test_uncallable_types_refused(void **state)
{
    (void)state;
    char *dir = jt_tmpdir(), *cache = jt_path(dir, "cache");
    jitop_ctx *ctx = jt_ctx(cache, NULL);
    jitop_module *m = load_src(ctx, dir,
                               "#include <jitop_host.h>\n"
                               "JITOP_EXPORT(long double, ld, (void)) { return 1.5L; }\n"
                               "JITOP_EXPORT(double _Complex, cx, (void)) { return 2.0; }\n"
                               "JITOP_EXPORT(long, fine, (long double *p)) { return (long)*p; }\n");
    jitop_fn *f = NULL;
    assert_int_not_equal(jitop_fn_get(m, "ld", "i64(void)", &f), JITOP_OK);
    assert_null(f);
    assert_int_not_equal(jitop_fn_get(m, "ld", "long(void)", &f), JITOP_OK);
    assert_int_not_equal(jitop_fn_get(m, "cx", "f64(void)", &f), JITOP_OK);
    assert_int_not_equal(jitop_fn_get(m, "cx", "double(void)", &f), JITOP_OK);
    /* Asking with such a type is refused too. */
    assert_int_not_equal(jitop_fn_get(m, "ld", "long double(void)", &f), JITOP_OK);
    /* A pointer to one is a pointer. */
    OK(jitop_fn_get(m, "fine", "long(ptr)", &f));
    long double v = 7.0L;
    long double *pv = &v;
    void *args[] = {&pv};
    long r = 0;
    OK(jitop_call(f, args, &r));
    assert_int_equal(r, 7);
    jitop_ctx_destroy(ctx);
    free(cache);
    free(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_param_named_like_a_code, setup, teardown),
        cmocka_unit_test_setup_teardown(test_uncallable_types_refused, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
