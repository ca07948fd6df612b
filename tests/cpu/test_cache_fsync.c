/* JITOP_CACHE_FSYNC: entries are written atomically either way (temporary
 * file, rename); set and not 0, each entry's file and directory are also
 * fsynced before the build returns. Default off: the entry is still read
 * back by a new context as a hit. (The tags of a new cache tree, written
 * once, are always fsynced: they decide what jitop clean may delete.) Real
 * NVRTC, compile-only context. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache/cache_private.h"
#include "jitop.h"
#include "testutil.h"

static int g_fsyncs;

static void count_fsync(const char *path)
{
    (void)path;
    g_fsyncs++;
}

/* Builds src into cache with JITOP_CACHE_FSYNC set to value (NULL: unset);
 * returns how many fsyncs the write made; then checks a new context hits. */
static int fsyncs_of_a_build(const char *value, int seed)
{
    char *dir = jt_tmpdir(), *cache = jt_path(dir, "cache"), text[256];
    snprintf(text, sizeof text, "extern \"C\" __global__ void k(float *p) { p[0] = %d.f; }\n", seed);
    char *src = jt_write(dir, "k.cu", text);
    if (value)
        setenv("JITOP_CACHE_FSYNC", value, 1);
    else
        unsetenv("JITOP_CACHE_FSYNC");
    jitop_ctx *ctx = jt_ctx(cache, "sm_90"); /* a new cache's tags: fsynced, once */
    g_fsyncs = 0;
    jitop__cache_fsync_hook = count_fsync;
    jitop_build_result r;
    assert_int_equal(jitop_build(ctx, src, NULL, NULL, 0, NULL, 0, &r), JITOP_OK);
    assert_int_equal(r.cached, 0);
    jitop_ctx_destroy(ctx);
    const int n = g_fsyncs;
    jitop__cache_fsync_hook = NULL;
    unsetenv("JITOP_CACHE_FSYNC");
    ctx = jt_ctx(cache, "sm_90");
    assert_int_equal(jitop_build(ctx, src, NULL, NULL, 0, NULL, 0, &r), JITOP_OK);
    assert_int_equal(r.cached, 1); /* written and renamed into place either way */
    jitop_ctx_destroy(ctx);
    free(src);
    free(cache);
    free(dir);
    return n;
}

static void test_default_writes_without_fsync(void **state)
{
    (void)state;
    assert_int_equal(fsyncs_of_a_build(NULL, 1), 0);
    assert_int_equal(fsyncs_of_a_build("0", 2), 0);
    assert_int_equal(fsyncs_of_a_build("", 3), 0);
}

static void test_fsync_on_request(void **state)
{
    (void)state;
    /* the entry's temporary file before the rename, its directory after */
    assert_int_equal(fsyncs_of_a_build("1", 4), 2);
    assert_int_equal(fsyncs_of_a_build("yes", 5), 2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_default_writes_without_fsync),
        cmocka_unit_test(test_fsync_on_request),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
