/* The fold rule (build/build.h) against answers the cache already holds:
 * a source's build must give what a fresh compile of its bytes gives,
 * whatever else was asked of the same files before. Real NVRTC, no
 * driver. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jitop.h"
#include "build/build.h"
#include "testutil.h"

static const char *const ARCH = "sm_80";

/* A name asked of a source (it joined its list), then an edit that drops
 * the template; the instance asked alone of the edited files first: its
 * answer ("names nothing") is cached under the key of the unit with that
 * one name, which is also the key of the source folded with it. The
 * source's build must fall back to the source alone, as a fresh compile
 * does, not return the instance's answer. */
static void test_cached_unresolved_fold_falls_back(void **state)
{
    (void)state;
    char *dir = jt_tmpdir(), *cache = jt_path(dir, "cache");
    char *src = jt_write_rename(dir, "k.cu",
                                "extern \"C\" __global__ void k(int *out) { *out = 1; }\n"
                                "template <int N> __global__ void t(int *out) { *out = N; }\n");
    jitop_ctx *ctx = jt_ctx(cache, ARCH);
    jitop__strv want = {0};
    assert_int_equal(jitop__strv_push(&want, "t<1>"), JITOP_OK);
    jitop_build_result r;
    assert_int_equal(jitop__build_fold(ctx, src, ARCH, NULL, 0, &want, &r), JITOP_OK);
    jitop__strv_free(&want);
    jitop_ctx_destroy(ctx);

    free(jt_write_rename(dir, "k.cu", "extern \"C\" __global__ void k(int *out) { *out = 2; }\n"));
    ctx = jt_ctx(cache, ARCH);
    const char *one[1] = {"t<1>"};
    assert_int_equal(jitop_build(ctx, src, ARCH, NULL, 0, one, 1, &r), JITOP_ENOTFOUND);
    jitop_ctx_destroy(ctx);

    /* A fresh context: what the source's build answers now. */
    ctx = jt_ctx(cache, ARCH);
    int rc = jitop_build(ctx, src, ARCH, NULL, 0, NULL, 0, &r);
    if (rc != JITOP_OK)
        fail_msg("the source alone compiles, but its build failed: %s", jitop_errmsg(ctx));
    jitop_ctx_destroy(ctx);

    /* And a fresh cache agrees on the key. */
    char *cache2 = jt_path(dir, "cache2");
    jitop_build_result fresh;
    ctx = jt_ctx(cache2, ARCH);
    assert_int_equal(jitop_build(ctx, src, ARCH, NULL, 0, NULL, 0, &fresh), JITOP_OK);
    jitop_ctx_destroy(ctx);
    assert_string_equal(r.key, fresh.key);

    jt_rm_rf(dir);
    free(dir);
    free(cache);
    free(cache2);
    free(src);
}

int main(void)
{
    jitop__recent_window_ns = 0;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cached_unresolved_fold_falls_back),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    jt_cleanup();
    return failed;
}
