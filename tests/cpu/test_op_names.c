/* Ops as real sources name them, against the fake CUDA driver (no GPU;
 * NVRTC is real): kernels and templates defined in included headers, C++
 * kernels by their qualified names, template names however they are
 * spelled, the same answers cold and warm, the message for a missing op,
 * and NVRTC's warnings kept with the cache entries. */
#include "testutil.h"

#include "fakecuda.h"
#include "build/build.h"
#include "load/load.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static fake_cuda_stats_fn g_fake_stats;
static char *g_cache; /* one cache for the program; each test's files are its own */

static fake_cuda_stats stats(void)
{
    fake_cuda_stats s;
    g_fake_stats(&s);
    return s;
}

static int g_compiles;
static void count_compile(const char *source)
{
    (void)source;
    g_compiles++;
}

static const jitop_dim3 one = {1, 1, 1};

/* Launches op; the fake stores the id of the module it launched from. */
static int launch_module(jitop_op *op)
{
    int out = 0, *pout = &out;
    void *args[] = {&pout};
    assert_int_equal(jitop_launch(op, one, one, 0, NULL, args, NULL, 0), JITOP_OK);
    assert_true(out > 0);
    return out;
}

static jitop_module *load(jitop_ctx *ctx, const char *name, const char *const *srcs, size_t n)
{
    jitop_module *m = NULL;
    if (jitop_load(ctx, name, srcs, n, NULL, 0, &m) != JITOP_OK)
        fail_msg("%s", jitop_errmsg(NULL));
    return m;
}

static jitop_op *get(jitop_module *m, const char *name)
{
    jitop_op *op = NULL;
    if (jitop_op_get(m, name, &op) != JITOP_OK)
        fail_msg("jitop_op_get(%s): %s", name, jitop_errmsg(NULL));
    return op;
}

/* A header that defines every kind of kernel; the source that includes it
 * mentions none of them. */
static const char header_kernels[] =
    "#pragma once\n"
    "extern \"C\" __global__ void hk(int *out) { *out = 1; }\n"
    "namespace hn { __global__ void cxx(int *out) { *out = 2; } }\n"
    "template <int N> __global__ void ht(int *out) { *out = N; }\n";

/* Kernels from a header are found by what the compiler says, cold and
 * warm alike: an extern "C" one and a C++ one from the source's image, a
 * template instance by a compile of its name (cached). */
static void test_kernels_from_a_header(void **state)
{
    (void)state;
    char *dir = jt_tmpdir();
    free(jt_write(dir, "inc/kernels.cuh", header_kernels));
    char *src = jt_write(dir, "main.cu", "#include \"inc/kernels.cuh\"\n");
    const char *srcs[] = {src};
    jitop__before_compile_hook = count_compile;
    for (int warm = 0; warm < 2; warm++) {
        g_compiles = 0;
        jitop_ctx *ctx = jt_ctx_driver(g_cache);
        jitop_module *m = load(ctx, "header", srcs, 1);
        jitop_op *hk = get(m, "hk"), *cxx = get(m, "hn::cxx"), *ht = get(m, "ht<3>");
        jitop_op_info info;
        assert_int_equal(jitop_op_info_get(cxx, &info), JITOP_OK);
        assert_string_equal(info.name, "hn::cxx");
        assert_string_equal(info.lowered, "_ZN2hn3cxxEPi");
        assert_ptr_equal(get(m, "::hn::cxx"), cxx); /* another spelling, the same op */
        int source_image = launch_module(hk);
        assert_int_equal(launch_module(cxx), source_image);
        assert_int_not_equal(launch_module(ht), source_image); /* the instance's own image */
        /* Cold: the source and the instance; warm: nothing. */
        assert_int_equal(g_compiles, warm ? 0 : 2);
        jitop_ctx_destroy(ctx);
    }
    jitop__before_compile_hook = NULL;
    assert_int_equal(stats().modules_loaded, 0);
    free(src);
    free(dir);
}

/* Several sources: the instance comes from the first that declares it;
 * one that does not answers so once (cached), so a warm get compiles
 * nothing and picks the same source. */
static void test_template_from_a_header_of_the_second_source(void **state)
{
    (void)state;
    char *dir = jt_tmpdir();
    free(jt_write(dir, "kernels.cuh", header_kernels));
    char *a = jt_write(dir, "a.cu", "extern \"C\" __global__ void ka(int *out) { *out = 5; }\n");
    char *b = jt_write(dir, "b.cu", "#include \"kernels.cuh\"\n");
    const char *srcs[] = {a, b};
    jitop__before_compile_hook = count_compile;
    for (int warm = 0; warm < 2; warm++) {
        g_compiles = 0;
        jitop_ctx *ctx = jt_ctx_driver(g_cache);
        jitop_module *m = load(ctx, "two", srcs, 2);
        get(m, "ht<9>");
        assert_string_equal(m->instances[0]->unit.source_path, b);
        /* Cold: both sources, a.cu's answer for ht<9>, b.cu's instance. */
        assert_int_equal(g_compiles, warm ? 0 : 4);
        jitop_op *op = NULL;
        assert_int_equal(jitop_op_get(m, "hx<9>", &op), JITOP_ENOTFOUND);
        assert_non_null(strstr(jitop_errmsg(NULL), "identifier \"hx\" is undefined"));
        assert_int_equal(g_compiles, warm ? 0 : 6);
        jitop_ctx_destroy(ctx);
    }
    jitop__before_compile_hook = NULL;
    free(a);
    free(b);
    free(dir);
}

/* Any spelling the compiler takes for an instance is one op: white space
 * shares a compile, "3u" for "3" compiles once more but finds the same
 * kernel symbol, so the same op and no second image. */
static void test_spellings_of_one_instance(void **state)
{
    (void)state;
    char *dir = jt_tmpdir();
    char *src = jt_write(dir, "t.cu", "template <typename T, int N> __global__ void "
                                      "fill(T *out) { *out = T(N); }\n");
    const char *srcs[] = {src};
    jitop_ctx *ctx = jt_ctx_driver(g_cache);
    jitop_module *m = load(ctx, "spell", srcs, 1);
    jitop__before_compile_hook = count_compile;
    g_compiles = 0;
    jitop_op *a = get(m, "fill<int,4>");
    assert_int_equal(g_compiles, 1);
    long images = stats().modules_loaded;
    assert_ptr_equal(get(m, "fill<int, 4>"), a);
    assert_ptr_equal(get(m, " fill < int , 4 > "), a);
    assert_int_equal(g_compiles, 1);
    assert_ptr_equal(get(m, "fill<int, 4u>"), a);
    assert_ptr_equal(get(m, "fill<int, 2 + 2>"), a);
    assert_int_equal(g_compiles, 3);
    assert_int_equal(stats().modules_loaded, images); /* their images were dropped */
    assert_int_equal(m->ninstances, 1);
    assert_ptr_not_equal(get(m, "fill<int, 5>"), a);
    assert_int_equal(m->ninstances, 2);
    /* Each spelling goes on finding the op after a reload. */
    free(jt_write(dir, "t.cu", "template <typename T, int N> __global__ void "
                               "fill(T *out) { *out = T(N + 1); }\n"));
    int before = launch_module(a);
    assert_int_equal(jitop_module_reload(m), JITOP_OK);
    assert_int_not_equal(launch_module(get(m, "fill<int, 4u>")), before);
    assert_ptr_equal(get(m, "fill<int,4>"), a);
    jitop__before_compile_hook = NULL;
    jitop_ctx_destroy(ctx);
    free(src);
    free(dir);
}

/* C++ kernels by their names: overloads need a name expression (the
 * message says which), one in an anonymous namespace is found by its
 * name, and one whose parameters change in a reload keeps its op. */
static void test_cxx_kernel_names(void **state)
{
    (void)state;
    char *dir = jt_tmpdir();
    char *src = jt_write(dir, "cxx.cu",
                         "namespace ns {\n"
                         "__global__ void over(int *out) { *out = 1; }\n"
                         "__global__ void over(float *out) { *out = 2; }\n"
                         "__global__ void k(int *out) { *out = 3; }\n"
                         "}\n"
                         "namespace { __global__ void hidden(int *out) { *out = 4; } }\n");
    const char *srcs[] = {src};
    jitop_ctx *ctx = jt_ctx_driver(g_cache);
    jitop_module *m = load(ctx, "cxx", srcs, 1);
    jitop_op *op = NULL;
    assert_int_equal(jitop_op_get(m, "ns::over", &op), JITOP_EINVAL);
    const char *msg = jitop_errmsg(NULL);
    if (!strstr(msg, "ns::over(int*)") || !strstr(msg, "ns::over(float*)") ||
        !strstr(msg, "(void (*)("))
        fail_msg("%s", msg);
    jitop_op *f = get(m, "(void (*)(float *))ns::over");
    jitop_op_info info;
    assert_int_equal(jitop_op_info_get(f, &info), JITOP_OK);
    assert_string_equal(info.lowered, "_ZN2ns4overEPf");
    jitop_op *hidden = get(m, "hidden");
    assert_int_equal(jitop_op_info_get(hidden, &info), JITOP_OK);
    assert_non_null(strstr(info.lowered, "6hiddenEPi"));
    jitop_op *k = get(m, "ns::k");
    int before = launch_module(k);
    free(jt_write(dir, "cxx.cu", "namespace ns { __global__ void k(long *out) { *out = 5; }\n"
                                 "__global__ void over(float *out) { *out = 2; } }\n"
                                 "namespace { __global__ void hidden(int *out) {} }\n"));
    assert_int_equal(jitop_module_reload(m), JITOP_OK);
    assert_int_not_equal(launch_module(k), before); /* the new ns::k(long*) */
    assert_int_equal(jitop_op_info_get(k, &info), JITOP_OK);
    assert_string_equal(info.lowered, "_ZN2ns1kEPl");
    jitop_ctx_destroy(ctx);
    free(src);
    free(dir);
}

/* A missing op's message lists the ops by their C++ names and says
 * "template" only where there is one. */
static void test_missing_op_message(void **state)
{
    (void)state;
    char *dir = jt_tmpdir();
    char *plain = jt_write(dir, "plain.cu", "extern \"C\" __global__ void k(int *o) {}\n"
                                            "namespace ns { __global__ void c(float *o) {} }\n");
    char *tmpl = jt_write(dir, "tmpl.cu", "template <typename T> __global__ void t(T *o) {}\n"
                                          "template __global__ void t<int>(int *);\n");
    const char *one[] = {plain}, *two[] = {tmpl};
    jitop_ctx *ctx = jt_ctx_driver(g_cache);
    jitop_module *m = load(ctx, "plain", one, 1);
    jitop_op *op = NULL;
    assert_int_equal(jitop_op_get(m, "kk", &op), JITOP_ENOTFOUND);
    const char *msg = jitop_errmsg(NULL);
    if (!strstr(msg, "no kernel 'kk'; its ops: ") || !strstr(msg, " k") ||
        !strstr(msg, "ns::c(float*)") || strstr(msg, "template"))
        fail_msg("%s", msg);
    m = load(ctx, "tmpl", two, 1);
    assert_int_equal(jitop_op_get(m, "t", &op), JITOP_ENOTFOUND);
    msg = jitop_errmsg(NULL);
    if (!strstr(msg, "void t<int>(int*)") || !strstr(msg, "'t' is a template"))
        fail_msg("%s", msg);
    jitop_ctx_destroy(ctx);
    free(plain);
    free(tmpl);
    free(dir);
}

/* NVRTC's warnings stay with the entries: jitop_build_log for a key,
 * jitop_module_log for what a module runs, on a cache hit as after the
 * compile. */
static void test_warnings_kept_with_the_entry(void **state)
{
    (void)state;
    char *dir = jt_tmpdir();
    char *src = jt_write(dir, "w.cu",
                         "extern \"C\" __global__ void w(int *out) {\n"
                         "    int unused_here = 1;\n"
                         "    *out = 1;\n"
                         "}\n"
                         "template <int N> __global__ void wt(int *out) {\n"
                         "    int unused_there = N;\n"
                         "    *out = N;\n"
                         "}\n");
    char *quiet = jt_write(dir, "q.cu", "extern \"C\" __global__ void q(int *out) { *out = 1; }\n");
    char *where = NULL;
    assert_true(asprintf(&where, "%s(2): warning", src) > 0);
    for (int warm = 0; warm < 2; warm++) {
        jitop_ctx *ctx = jt_ctx_driver(g_cache);
        jitop_build_result r;
        assert_int_equal(jitop_build(ctx, src, NULL, NULL, 0, NULL, 0, &r), JITOP_OK);
        assert_int_equal(r.cached, warm);
        assert_int_equal(r.warnings, 1);
        char *log = NULL;
        assert_int_equal(jitop_build_log(ctx, r.key, &log), JITOP_OK);
        if (!strstr(log, where) || !strstr(log, "unused_here"))
            fail_msg("%s", log);
        jitop_free(log);
        assert_int_equal(jitop_build(ctx, quiet, NULL, NULL, 0, NULL, 0, &r), JITOP_OK);
        assert_int_equal(r.warnings, 0);
        assert_int_equal(jitop_build_log(ctx, r.key, &log), JITOP_OK);
        assert_string_equal(log, "");
        jitop_free(log);

        const char *srcs[] = {src, quiet};
        jitop_module *m = load(ctx, "warn", srcs, 2);
        get(m, "wt<2>");
        assert_int_equal(jitop_module_log(m, &log), JITOP_OK);
        /* The source's log, then the instance's (which repeats the source's
         * warning, and adds its own). */
        const char *first = strstr(log, "unused_here"), *inst = strstr(log, "unused_there");
        if (!first || !inst || first > inst)
            fail_msg("%s", log);
        jitop_free(log);
        jitop_ctx_destroy(ctx);
    }
    jitop_ctx *ctx = jt_ctx_driver(g_cache);
    char *log = (char *)"untouched";
    assert_int_equal(jitop_build_log(ctx, "0123456789abcdef0123456789abcdef", &log),
                     JITOP_ENOTFOUND);
    assert_int_equal(jitop_build_log(ctx, "not a key", &log), JITOP_EINVAL);
    jitop_ctx_destroy(ctx);
    free(where);
    free(src);
    free(quiet);
    free(dir);
}

int main(int argc, char **argv)
{
    (void)argc;
    int started = jt_fake_cuda_start(argv, &g_fake_stats);
    if (started >= 0)
        return started;
    char *dir = jt_tmpdir();
    g_cache = jt_path(dir, "cache");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kernels_from_a_header),
        cmocka_unit_test(test_template_from_a_header_of_the_second_source),
        cmocka_unit_test(test_spellings_of_one_instance),
        cmocka_unit_test(test_cxx_kernel_names),
        cmocka_unit_test(test_missing_op_message),
        cmocka_unit_test(test_warnings_kept_with_the_entry),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    free(g_cache);
    free(dir);
    return rc;
}
