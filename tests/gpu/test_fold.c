/* One program per source on a GPU (the fold rule, build/build.h): template
 * instances compiled into their source's binary compute what they compiled
 * on their own would, before and after an edit, and in a new context that
 * finds them through the manifest with no compile. Every output is checked
 * on the host. */
#include "gputest.h"
#include "testutil.h"

#include "build/build.h"
#include "load/load.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N 256

static int g_compiles;

static void count_compile(const char *source)
{
    (void)source;
    g_compiles++;
}

static char *write_version(const char *dir, int version)
{
    char *text = NULL;
    if (asprintf(&text,
                 "template <int M> __global__ void scale(const int *in, int *out, int n) {\n"
                 "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
                 "    if (i < n) out[i] = in[i] * M + %d;\n"
                 "}\n",
                 version) < 0)
        fail_msg("asprintf failed");
    char *src = jt_write_rename(dir, "fold.cu", text);
    free(text);
    return src;
}

static const char *const names[4] = {"scale<1>", "scale<2>", "scale<3>", "scale<5>"};
static const int mult[4] = {1, 2, 3, 5};

/* Launches each op and checks out[i] == in[i] * M + version. */
static void check_all(const jitop__cuda_api *cu, jitop_op *const *ops, int version)
{
    int in[N], out[N];
    CUdeviceptr din, dout;
    for (int i = 0; i < N; i++)
        in[i] = i - 17;
    CU(cu->cuMemAlloc(&din, sizeof in));
    CU(cu->cuMemAlloc(&dout, sizeof out));
    CU(cu->cuMemcpyHtoD(din, in, sizeof in));
    for (int k = 0; k < 4; k++) {
        int n = N;
        void *args[] = {&din, &dout, &n};
        OK(jitop_launch(ops[k], (jitop_dim3){1, 1, 1}, (jitop_dim3){N, 1, 1}, 0, NULL, args,
                        NULL, 0));
        CU(cu->cuCtxSynchronize());
        CU(cu->cuMemcpyDtoH(out, dout, sizeof out));
        for (int i = 0; i < N; i++)
            if (out[i] != in[i] * mult[k] + version)
                fail_msg("%s, version %d: out[%d] = %d, expected %d", names[k], version, i,
                         out[i], in[i] * mult[k] + version);
    }
    CU(cu->cuMemFree(din));
    CU(cu->cuMemFree(dout));
}

static void test_folded_instances_compute(void **state)
{
    (void)state;
    JT_REQUIRE_GPU();
    char *dir = jt_tmpdir(), *cache = jt_path(dir, "cache");
    char *src = write_version(dir, 0);
    jitop_config cfg;
    jitop_config_init(&cfg);
    cfg.cache_dir = cache;
    jitop_ctx *ctx = NULL;
    OK(jitop_ctx_create(&cfg, &ctx));
    OK(jitop_ctx_cuda(ctx, NULL, NULL));
    const jitop__cuda_api *cu = jitop__cuda();
    assert_non_null(cu);
    jitop_module *m = NULL;
    jitop_op *ops[4];
    const char *sources[] = {src};
    OK(jitop_load(ctx, "fold", sources, 1, NULL, 0, &m));
    for (int k = 0; k < 4; k++)
        OK(jitop_op_get(m, names[k], &ops[k]));
    check_all(cu, ops, 0); /* each compiled on its own */

    /* An edit: one compile, every instance from the source's one image. */
    g_compiles = 0;
    jitop__before_compile_hook = count_compile;
    free(write_version(dir, 7));
    OK(jitop_module_reload(m));
    assert_int_equal(g_compiles, 1);
    check_all(cu, ops, 7);
    jitop_ctx_destroy(ctx);

    /* A new context: the manifest names them, nothing is compiled. */
    ctx = NULL;
    OK(jitop_ctx_create(&cfg, &ctx));
    OK(jitop_load(ctx, "fold", sources, 1, NULL, 0, &m));
    for (int k = 0; k < 4; k++)
        OK(jitop_op_get(m, names[k], &ops[k]));
    assert_int_equal(g_compiles, 1);
    check_all(cu, ops, 7);
    jitop_ctx_destroy(ctx);
    jitop__before_compile_hook = NULL;
    jt_rm_rf(dir);
    free(src);
    free(cache);
    free(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_folded_instances_compute),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    jt_cleanup();
    return failed;
}
