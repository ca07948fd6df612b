/* The lowered name of one name expression when the binary the cache hands
 * back holds others too: after a prewarm folded "&ns::alpha" and
 * "&ns::norm" into a source's binary (names sorted), a build of the unit
 * asking "&ns::norm" alone may be served that binary, whose first lowered
 * name is alpha's. jitop_global_*'s alias lookup and a module's instance
 * images take the asked name's own (jitop__binary_lowered). Real NVRTC,
 * compile-only context. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "build/build.h"
#include "jitop.h"
#include "testutil.h"

static const char *SRC = "namespace ns { __device__ float alpha; __device__ float norm; }\n"
                         "extern \"C\" __global__ void k(float *p) { p[0] = ns::alpha + ns::norm; }\n";

static void test_asked_names_own_lowered_name(void **state)
{
    (void)state;
    char *dir = jt_tmpdir(), *cache = jt_path(dir, "cache");
    char *src = jt_write(dir, "g.cu", SRC);
    jitop_ctx *ctx = jt_ctx(cache, "sm_90");
    jitop__strv want = {0};
    assert_int_equal(jitop__strv_push(&want, "&ns::norm"), JITOP_OK);
    assert_int_equal(jitop__strv_push(&want, "&ns::alpha"), JITOP_OK);
    jitop_build_result r;
    assert_int_equal(jitop__build_fold(ctx, src, "sm_90", NULL, 0, &want, &r), JITOP_OK);
    jitop__strv_free(&want);

    static const char *const asked[][2] = {{"&ns::norm", "_ZN2ns4normE"},
                                           {"&ns::alpha", "_ZN2ns5alphaE"}};
    for (size_t i = 0; i < 2; i++) {
        const char *names[1] = {asked[i][0]};
        jitop__unit u;
        jitop__built built;
        assert_int_equal(jitop__unit_init(&u, src, NULL, NULL, 0, names, 1, "sm_90"), JITOP_OK);
        assert_int_equal(jitop__build_unit(ctx, &u, &built), JITOP_OK);
        /* served the prewarm's binary: both names, sorted (alpha first) */
        assert_int_equal(built.entry.bin.names.n, 2);
        assert_string_equal(built.entry.bin.lowered.v[0], "_ZN2ns5alphaE");
        const char *lowered = jitop__binary_lowered(&built.entry.bin, asked[i][0]);
        assert_non_null(lowered);
        assert_string_equal(lowered, asked[i][1]);
        jitop__built_free(&built);
        jitop__unit_free(&u);
    }
    jitop_ctx_destroy(ctx);
    free(src);
    free(cache);
    free(dir);
}

/* A binary of several names that lacks the one asked gives NULL, never
 * another name's symbol; a binary of one name gives its own. */
static void test_absent_name_is_null(void **state)
{
    (void)state;
    char *n2[] = {"&a", "&b"}, *l2[] = {"a_", "b_"}, *n1[] = {"&c"}, *l1[] = {"c_"};
    jitop__binary two = {.names = {n2, 2, 2}, .lowered = {l2, 2, 2}};
    jitop__binary one = {.names = {n1, 1, 1}, .lowered = {l1, 1, 1}};
    assert_string_equal(jitop__binary_lowered(&two, "&b"), "b_");
    assert_null(jitop__binary_lowered(&two, "&c"));
    assert_string_equal(jitop__binary_lowered(&one, "&c"), "c_");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_asked_names_own_lowered_name),
        cmocka_unit_test(test_absent_name_is_null),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
