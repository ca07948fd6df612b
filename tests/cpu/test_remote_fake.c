/* Loads through the remote tier on the fake CUDA driver (tests/fakecuda):
 * jitop_load, an extern "C" op, a template instance and a launch, with
 * their binaries from the remote (no compile), and from a local compile
 * when the remote serves a corrupted entry (nothing of it loaded). The
 * server is tests/support/nginx_dav.sh; SKIP without nginx. */
#include "fakecuda.h"
#include "testutil.h"

#include "build/build.h"  /* jitop__before_compile_hook */
#include "cache/cache.h"  /* jitop__remote_forget_dead */

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define NGINX_DAV JITOP_SOURCE_KERNEL_DIR "/../tests/support/nginx_dav.sh"

static fake_cuda_stats_fn g_fake_stats;
static char *g_srv;
static int g_port;
static int g_compiles;

static void count_compile(const char *source)
{
    (void)source;
    __atomic_add_fetch(&g_compiles, 1, __ATOMIC_SEQ_CST);
}

static const char source_text[] =
    "extern \"C\" __global__ void k(int *out) { *out = 42; }\n"
    "template <int N> __global__ void t(int *out) { *out = N; }\n";

static jitop_ctx *ctx_with(const char *cache, const char *spec)
{
    jitop_config cfg;
    jitop_config_init(&cfg);
    cfg.cache_dir = cache;
    cfg.remote_cache = spec;
    cfg.remote_cache_secret = "";
    jitop_ctx *ctx = NULL;
    if (jitop_ctx_create(&cfg, &ctx) != JITOP_OK)
        fail_msg("jitop_ctx_create: %s", jitop_errmsg(NULL));
    return ctx;
}

/* Loads src, gets k and t<3>, launches k: the compiles it took. */
static int load_and_launch(const char *cache, const char *spec, const char *src)
{
    int before = __atomic_load_n(&g_compiles, __ATOMIC_SEQ_CST);
    jitop_ctx *ctx = ctx_with(cache, spec);
    jitop_module *m = NULL;
    jitop_op *k = NULL, *t3 = NULL;
    const char *sources[] = {src};
    assert_int_equal(jitop_load(ctx, "remote", sources, 1, NULL, 0, &m), JITOP_OK);
    assert_int_equal(jitop_op_get(m, "k", &k), JITOP_OK);
    assert_int_equal(jitop_op_get(m, "t<3>", &t3), JITOP_OK);
    int out = 0, *pout = &out;
    void *args[] = {&pout};
    jitop_dim3 one = {1, 1, 1};
    assert_int_equal(jitop_launch(k, one, one, 0, NULL, args, NULL, 0), JITOP_OK);
    assert_int_equal(jitop_launch(t3, one, one, 0, NULL, args, NULL, 0), JITOP_OK);
    jitop_ctx_destroy(ctx);
    fake_cuda_stats s;
    g_fake_stats(&s);
    assert_int_equal(s.modules_loaded, 0);
    return __atomic_load_n(&g_compiles, __ATOMIC_SEQ_CST) - before;
}

static void test_load_from_the_remote(void **state)
{
    (void)state;
    if (!g_port) {
        print_message("SKIP: nginx is not installed\n");
        skip();
    }
    jitop__remote_forget_dead();
    char *dir = jt_tmpdir(), *src = jt_write(dir, "k.cu", source_text);
    char *spec = NULL, *bad = NULL;
    assert_true(asprintf(&spec, "http://127.0.0.1:%d/cache|connect-timeout=5000|timeout=20000",
                         g_port) > 0);
    assert_true(asprintf(&bad, "http://127.0.0.1:%d/bad|connect-timeout=5000|timeout=20000",
                         g_port) > 0);
    char *c1 = jt_tmpdir(), *c2 = jt_tmpdir(), *c3 = jt_tmpdir();
    /* The writer compiles the source and the instance, and pushes both. */
    assert_int_equal(load_and_launch(c1, spec, src), 2);
    /* A new node loads and launches both without a compile. */
    assert_int_equal(load_and_launch(c2, spec, src), 0);
    /* The remote's files, bit-flipped, under /bad/: a node compiles both and
     * loads what it compiled. */
    char cmd[4096];
    snprintf(cmd, sizeof cmd,
             "cd '%s/www' && mkdir -p bad && cp -r cache/v4 bad/ && for f in bad/v4/*/*; do "
             "printf '\\377' | dd of=\"$f\" bs=1 seek=100 conv=notrunc status=none; done",
             g_srv);
    assert_int_equal(jt_run(cmd, NULL), 0);
    assert_int_equal(load_and_launch(c3, bad, src), 2);
    free(spec);
    free(bad);
    free(src);
    free(dir);
    free(c1);
    free(c2);
    free(c3);
}

int main(int argc, char **argv)
{
    (void)argc;
    int started = jt_fake_cuda_start(argv, &g_fake_stats);
    if (started >= 0)
        return started;
    jitop__before_compile_hook = count_compile;
    g_srv = jt_tmpdir();
    char cmd[4096], *out = NULL;
    snprintf(cmd, sizeof cmd, "'%s' start '%s' 2>&1", NGINX_DAV, g_srv);
    int rc = jt_run(cmd, &out);
    if (rc == 0)
        g_port = atoi(out);
    else if (rc != 77)
        fprintf(stderr, "nginx_dav.sh failed (%d): %s\n", rc, out ? out : "");
    free(out);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_load_from_the_remote),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    snprintf(cmd, sizeof cmd, "'%s' stop '%s'", NGINX_DAV, g_srv);
    if (jt_run(cmd, NULL) != 0)
        failed++;
    free(g_srv);
    jt_cleanup();
    return failed;
}
