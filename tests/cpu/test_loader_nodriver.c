/* Without a CUDA driver, loading and launching fail cleanly with
 * JITOP_ENODRIVER while compiling still works. Skips where a driver exists
 * (the GPU suite covers that machine). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "jitop.h"
#include "testutil.h"

static const char *kernel_src =
    "extern \"C\" __global__ void add_one(float *x, int n)\n"
    "{\n"
    "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "    if (i < n) x[i] += 1.0f;\n"
    "}\n";

static void require_no_driver(void)
{
    if (jt_have_gpu()) {
        print_message("SKIP: a CUDA driver is present; the GPU suite tests loading here\n");
        skip();
    }
}

/* A context that may open the driver: no compile_only, no arch. */
static jitop_ctx *driver_ctx(const char *cache)
{
    jitop_config cfg;
    jitop_config_init(&cfg);
    cfg.cache_dir = cache;
    jitop_ctx *ctx = NULL;
    assert_int_equal(jitop_ctx_create(&cfg, &ctx), JITOP_OK);
    return ctx;
}

static void test_load_without_driver(void **state)
{
    (void)state;
    require_no_driver();
    char *dir = jt_tmpdir();
    char *cache = jt_path(dir, "cache");
    char *src = jt_write(dir, "k.cu", kernel_src);
    jitop_ctx *ctx = driver_ctx(cache);
    jitop_module *m = (jitop_module *)0x1;
    const char *sources[] = {src};

    assert_int_equal(jitop_load(ctx, "nodrv_mod", sources, 1, NULL, 0, &m), JITOP_ENODRIVER);
    assert_ptr_equal(m, (jitop_module *)0x1); /* outputs untouched on failure */
    assert_non_null(strstr(jitop_errmsg(ctx), "libcuda.so.1"));
    assert_non_null(strstr(jitop_errmsg(ctx), "nodrv_mod")); /* names the module */

    assert_int_equal(jitop_load_inline(ctx, "inline", kernel_src, NULL, 0, &m), JITOP_ENODRIVER);
    assert_ptr_equal(m, (jitop_module *)0x1);

    /* Asking again gives the same clear answer (the failure is remembered,
     * not retried into a crash). */
    assert_int_equal(jitop_load(ctx, "nodrv_mod", sources, 1, NULL, 0, &m), JITOP_ENODRIVER);
    assert_non_null(strstr(jitop_errmsg(ctx), "libcuda.so.1"));

    void *cu = (void *)0x2;
    int dev = 77;
    assert_int_equal(jitop_ctx_cuda(ctx, &cu, &dev), JITOP_ENODRIVER);
    assert_ptr_equal(cu, (void *)0x2);
    assert_int_equal(dev, 77);

    const char *arch = NULL;
    assert_int_equal(jitop_ctx_arch(ctx, &arch), JITOP_ENODRIVER);
    assert_null(arch);

    jitop_ctx_destroy(ctx);
    free(src);
    free(cache);
    free(dir);
}

static void test_compile_only_refuses_load(void **state)
{
    (void)state;
    require_no_driver();
    char *dir = jt_tmpdir();
    char *cache = jt_path(dir, "cache");
    jitop_ctx *ctx = jt_ctx(cache, "sm_90");
    jitop_module *m = NULL;
    assert_int_equal(jitop_load_inline(ctx, "inline", kernel_src, NULL, 0, &m), JITOP_ENODRIVER);
    assert_null(m);
    assert_non_null(strstr(jitop_errmsg(ctx), "compile_only"));
    jitop_ctx_destroy(ctx);
    free(cache);
    free(dir);
}

static void test_compile_still_works(void **state)
{
    (void)state;
    require_no_driver();
    char *dir = jt_tmpdir();
    char *cache = jt_path(dir, "cache");
    char *src = jt_write(dir, "k.cu", kernel_src);
    jitop_ctx *ctx = driver_ctx(cache);
    jitop_module *m = NULL;
    const char *sources[] = {src};
    assert_int_equal(jitop_load(ctx, "k", sources, 1, NULL, 0, &m), JITOP_ENODRIVER);

    /* The failed load did not break the context: prewarming works. */
    jitop_build_result r;
    int st = jitop_build(ctx, src, "sm_90", NULL, 0, NULL, 0, &r);
    if (st != JITOP_OK)
        fail_msg("jitop_build: %s: %s", jitop_strerror(st), jitop_errmsg(ctx));
    assert_int_equal(r.cached, 0);
    assert_int_equal(strlen(r.key), 32);
    assert_int_equal(jitop_build(ctx, src, "sm_90", NULL, 0, NULL, 0, &r), JITOP_OK);
    assert_int_equal(r.cached, 1);

    jitop_ctx_destroy(ctx);
    free(src);
    free(cache);
    free(dir);
}

static void test_null_handles(void **state)
{
    (void)state;
    jitop_dim3 one = {1, 1, 1};
    jitop_op *op = NULL;
    jitop_op_info info;
    jitop_launch_config lc;
    memset(&lc, 0, sizeof lc);
    size_t count = 5;
    int block = 0, grid = 0;
    assert_int_equal(jitop_launch(NULL, one, one, 0, NULL, NULL, NULL, 0), JITOP_EINVAL);
    assert_int_equal(jitop_launch_ex(NULL, &lc, NULL, NULL, 0), JITOP_EINVAL);
    assert_int_equal(jitop_op_get(NULL, "x", &op), JITOP_EINVAL);
    assert_int_equal(jitop_op_info_get(NULL, &info), JITOP_EINVAL);
    assert_int_equal(jitop_module_ops(NULL, NULL, 0, &count), JITOP_EINVAL);
    assert_int_equal(count, 5);
    assert_int_equal(jitop_occupancy(NULL, 0, &block, &grid), JITOP_EINVAL);
    assert_int_equal(jitop_module_reload(NULL), JITOP_EINVAL);
    assert_int_equal(jitop_ctx_cuda(NULL, NULL, NULL), JITOP_EINVAL);
    assert_null(jitop_module_name(NULL));
    assert_int_equal(jitop_module_generation(NULL), 0);
    assert_int_equal(jitop_load(NULL, "x", NULL, 0, NULL, 0, NULL), JITOP_EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_load_without_driver),
        cmocka_unit_test(test_compile_only_refuses_load),
        cmocka_unit_test(test_compile_still_works),
        cmocka_unit_test(test_null_handles),
    };
    int failed = cmocka_run_group_tests_name("loader_nodriver", tests, NULL, NULL);
    jt_cleanup();
    return failed;
}
