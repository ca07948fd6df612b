/* The CUDA toolkit's headers without an -I (found where NVRTC came from,
 * else $CUDA_HOME, else the build's toolkit), hashed into the key like any
 * header; the messages for a header NVRTC cannot open (no toolkit found, a
 * C++ standard library header). Real NVRTC, no GPU. */
#include "testutil.h"

#include "build/build.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* A source of the kinds people write, each one's header found only in the
 * toolkit: fp16/bf16 arithmetic, a cooperative group, a CUB block
 * reduction, a cuRAND state, libcu++. */
static const char toolkit_src[] =
    "#include <cuda_fp16.h>\n"
    "#include <cuda_bf16.h>\n"
    "#include <cooperative_groups.h>\n"
    "#include <cub/block/block_reduce.cuh>\n"
    "#include <curand_kernel.h>\n"
    "#include <cuda/std/type_traits>\n"
    "namespace cg = cooperative_groups;\n"
    "static_assert(cuda::std::is_same<float, float>::value, \"libcu++\");\n"
    "extern \"C\" __global__ void mix(__half *h, __nv_bfloat16 *b, float *out, unsigned long long seed) {\n"
    "    cg::thread_block block = cg::this_thread_block();\n"
    "    typedef cub::BlockReduce<float, 128> reduce;\n"
    "    __shared__ typename reduce::TempStorage tmp;\n"
    "    curandStatePhilox4_32_10_t st;\n"
    "    curand_init(seed, block.thread_rank(), 0, &st);\n"
    "    float v = __half2float(__hadd(h[0], h[0])) + __bfloat162float(b[0]) + curand_uniform(&st);\n"
    "    float sum = reduce(tmp).Sum(v);\n"
    "    if (block.thread_rank() == 0) out[0] = sum;\n"
    "}\n";

static int find_source(const jitop_cache_entry_info *info, void *user)
{
    char **sources = user;
    if (!*sources && strstr(info->sources, "mix.cu"))
        *sources = strdup(info->sources);
    return 0;
}

/* Cold, then warm: the same key, no compile; the toolkit's headers are
 * among the files of the entry (hashed like the user's). */
static void test_toolkit_headers_need_no_include_path(void **state)
{
    (void)state;
    char *dir = jt_tmpdir(), *cache = jt_tmpdir();
    char *src = jt_write(dir, "mix.cu", toolkit_src);
    jitop_ctx *ctx = jt_ctx(cache, "sm_90");
    jitop_build_result r1, r2;
    if (jitop_build(ctx, src, NULL, NULL, 0, NULL, 0, &r1) != JITOP_OK)
        fail_msg("%s", jitop_errmsg(ctx));
    assert_int_equal(r1.cached, 0);
    assert_int_equal(jitop_build(ctx, src, NULL, NULL, 0, NULL, 0, &r2), JITOP_OK);
    assert_int_equal(r2.cached, 1);
    assert_string_equal(r1.key, r2.key);
    jitop_ctx_destroy(ctx);
    /* A new context (a new process's view): the same key. */
    ctx = jt_ctx(cache, "sm_90");
    assert_int_equal(jitop_build(ctx, src, NULL, NULL, 0, NULL, 0, &r2), JITOP_OK);
    assert_int_equal(r2.cached, 1);
    assert_string_equal(r1.key, r2.key);
    char *sources = NULL;
    assert_int_equal(jitop_cache_list(ctx, find_source, &sources), JITOP_OK);
    assert_non_null(sources);
    const jitop__toolkit *t = jitop__toolkit_get();
    char *fp16 = jt_path(t->include, "cuda_fp16.h");
    if (!strstr(sources, fp16) || !strstr(sources, "cooperative_groups.h") ||
        !strstr(sources, "block_reduce.cuh") || !strstr(sources, "curand_kernel.h"))
        fail_msg("the toolkit's headers should be the entry's files too: %s", sources);
    free(fp16);
    free(sources);
    jitop_ctx_destroy(ctx);
    free(src);
    free(dir);
    free(cache);
}

/* The user's -I comes first: a header of theirs with a toolkit header's
 * name is the one NVRTC reads, and the one in the key. */
static void test_user_headers_come_first(void **state)
{
    (void)state;
    char *dir = jt_tmpdir(), *cache = jt_tmpdir(), *inc = jt_tmpdir();
    char *mine = jt_write(inc, "cuda_fp16.h", "#define MY_FP16 1\n");
    char *src = jt_write(dir, "k.cu",
                         "#include <cuda_fp16.h>\n"
                         "#ifndef MY_FP16\n#error the toolkit's cuda_fp16.h was read\n#endif\n"
                         "extern \"C\" __global__ void k(int *x) { x[0] = MY_FP16; }\n");
    const char *opts[] = {"-I", inc};
    jitop__unit u;
    assert_int_equal(jitop__unit_init(&u, src, NULL, opts, 2, NULL, 0, "sm_90"), JITOP_OK);
    jitop__deps d;
    char *text = NULL;
    assert_int_equal(jitop__deps_scan(&u, &d, &text), JITOP_OK);
    assert_int_equal(d.n, 2);
    assert_string_equal(d.v[1].path, mine);
    jitop__binary b;
    if (jitop__compile(&u, text, &b) != JITOP_OK)
        fail_msg("%s", jitop_errmsg(NULL));
    jitop__binary_free(&b);
    free(text);
    jitop__deps_free(&d);
    jitop__unit_free(&u);
    free(mine);
    free(src);
    free(inc);
    free(dir);
    free(cache);
}

/* A fake toolkit folder: <root>/lib64 (where NVRTC would be) and, when
 * headers, <root>/include/cuda_fp16.h (and include/cccl when cccl). */
static char *fake_toolkit(bool headers, bool cccl)
{
    char *root = jt_tmpdir();
    free(jt_write(root, "lib64/libnvrtc.so.13", ""));
    free(jt_write(root, "include/nvrtc.h", "")); /* NVRTC's own wheel has only this */
    if (headers)
        free(jt_write(root, "include/cuda_fp16.h", ""));
    if (cccl)
        free(jt_write(root, "include/cccl/cuda/std/type_traits", ""));
    return root;
}

/* The toolkit NVRTC came from first, then $CUDA_HOME, then the build's;
 * a folder without cuda_fp16.h (NVRTC's own pip wheel) is passed over. */
static void test_toolkit_search_order(void **state)
{
    (void)state;
    char *nv = fake_toolkit(true, true), *home = fake_toolkit(true, false);
    char *bare = fake_toolkit(false, false), *built = fake_toolkit(true, false);
    char *nv_lib = jt_path(nv, "lib64/libnvrtc.so.13");
    char *bare_lib = jt_path(bare, "lib64/libnvrtc.so.13");
    char *nv_inc = jt_path(nv, "include"), *home_inc = jt_path(home, "include");
    char *built_inc = jt_path(built, "include"), *nv_cccl = jt_path(nv, "include/cccl");
    jitop__toolkit *t = malloc(sizeof *t);
    assert_non_null(t);

    jitop__toolkit_find(t, nv_lib, home, built);
    assert_string_equal(t->include, nv_inc);
    assert_string_equal(t->cccl, nv_cccl);
    jitop__toolkit_find(t, bare_lib, home, built);
    assert_string_equal(t->include, home_inc);
    assert_string_equal(t->cccl, ""); /* CUDA 12: everything in include/ */
    jitop__toolkit_find(t, bare_lib, NULL, built);
    assert_string_equal(t->include, built_inc);
    jitop__toolkit_find(t, NULL, "", built);
    assert_string_equal(t->include, built_inc);

    /* None: the message names every folder tried and CUDA_HOME. */
    jitop__toolkit_find(t, bare_lib, bare, NULL);
    assert_string_equal(t->include, "");
    char *hint = jitop__toolkit_hint(
        t, "k.cu(1): catastrophic error: could not open source file \"cuda_fp16.h\" (no "
           "directories in search list)\n");
    assert_non_null(hint);
    char *bare_inc = jt_path(bare, "include");
    if (!strstr(hint, bare_inc) || !strstr(hint, "CUDA_HOME") || !strstr(hint, "cuda_fp16.h"))
        fail_msg("%s", hint);
    free(hint);
    free(bare_inc);
    /* Found: a missing header of the user's needs no word from jitop. */
    jitop__toolkit_find(t, nv_lib, NULL, NULL);
    assert_null(jitop__toolkit_hint(
        t, "k.cu(1): catastrophic error: cannot open source file \"mine.cuh\"\n"));

    free(t);
    free(nv_lib); free(bare_lib); free(nv_inc); free(home_inc); free(built_inc); free(nv_cccl);
    free(nv); free(home); free(bare); free(built);
}

/* NVRTC has no C++ standard library: the message says so and names the
 * libcu++ header to include instead, where the toolkit has one. */
static void test_standard_library_headers(void **state)
{
    (void)state;
    const char *cases[][2] = {
        {"type_traits", "<cuda/std/type_traits>"},
        {"cstdint", "<cuda/std/cstdint>"},
        {"stdint.h", "<cuda/std/cstdint>"},
        {"limits", "<cuda/std/limits>"},
        {"vector", NULL},
        {"cstdio", NULL},
    };
    char *dir = jt_tmpdir(), *cache = jt_tmpdir();
    jitop_ctx *ctx = jt_ctx(cache, "sm_90");
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *text = NULL, *name = NULL;
        assert_true(asprintf(&text, "#include <%s>\n__global__ void k() {}\n", cases[i][0]) > 0);
        assert_true(asprintf(&name, "std%zu.cu", i) > 0);
        char *src = jt_write(dir, name, text);
        jitop_build_result r;
        assert_int_equal(jitop_build(ctx, src, NULL, NULL, 0, NULL, 0, &r), JITOP_ECOMPILE);
        const char *msg = jitop_errmsg(ctx);
        if (!strstr(msg, "NVRTC has no C++ standard library") || !strstr(msg, cases[i][0]) ||
            (cases[i][1] && !strstr(msg, cases[i][1])) ||
            (!cases[i][1] && !strstr(msg, "libcu++")))
            fail_msg("<%s>: %s", cases[i][0], msg);
        free(src);
        free(name);
        free(text);
    }
    jitop_ctx_destroy(ctx);
    free(dir);
    free(cache);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_toolkit_headers_need_no_include_path),
        cmocka_unit_test(test_user_headers_come_first),
        cmocka_unit_test(test_toolkit_search_order),
        cmocka_unit_test(test_standard_library_headers),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    jt_cleanup();
    return rc;
}
