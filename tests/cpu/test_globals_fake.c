/* Module globals, parameter lists with no cap and modules of hundreds of
 * kernels, against the fake CUDA driver (tests/fakecuda), which reads a
 * cubin's symbol table for cuModuleGetGlobal (host memory holding each
 * variable's initial bytes) and its .nv.info attributes for
 * cuFuncGetParamInfo, and aborts on a copy into a global of an unloaded
 * module. Compiling uses the real NVRTC. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fakecuda.h"
#include "jitop.h"
#include "build/build.h"
#include "load/driver.h"
#include "load/load.h"
#include "testutil.h"

static fake_cuda_stats_fn g_fake_stats;
static char *g_cache; /* one cache for the program */

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

static char *xasprintf(const char *fmt, ...)
{
    va_list ap;
    char *s = NULL;
    va_start(ap, fmt);
    if (vasprintf(&s, fmt, ap) < 0)
        fail_msg("vasprintf failed");
    va_end(ap);
    return s;
}

static jitop_module *load_text(jitop_ctx *ctx, const char *dir, const char *file, const char *text)
{
    char *path = jt_write_rename(dir, file, text);
    const char *sources[] = {path};
    jitop_module *m = NULL;
    int st = jitop_load(ctx, file, sources, 1, NULL, 0, &m);
    if (st != JITOP_OK)
        fail_msg("jitop_load %s: %s", file, jitop_errmsg(NULL));
    free(path);
    return m;
}

static const char globals_src[] =
    "__constant__ float coeffs[16];\n"
    "__device__ int counter = 5;\n"
    "namespace ns { __device__ float table[4] = {1.5f, 2.5f, 3.5f, 4.5f}; }\n"
    "template <typename T> __device__ T scale = T(3);\n"
    "template __device__ float scale<float>;\n"
    "template <unsigned N> __device__ int widths[N];\n"
    "template __device__ int widths<4>[4];\n"
    "extern \"C\" __global__ void k(int *out)\n"
    "{ *out = (int)(coeffs[0] * ns::table[1] * scale<float>) + counter + scale<int> +\n"
    "         widths<4>[0]; }\n";

/* C names, '&', sizes, initial values, writes read back, size checks. */
static void test_global_by_c_name(void **state)
{
    (void)state;
    char *dir = jt_tmpdir();
    jitop_ctx *ctx = jt_ctx_driver(g_cache);
    jitop_module *m = load_text(ctx, dir, "globals.cu", globals_src);

    jitop_global_info g;
    assert_int_equal(jitop_global_get(m, "coeffs", &g), JITOP_OK);
    assert_int_equal(g.size, 16 * sizeof(float));
    assert_true(g.dptr != 0);
    assert_int_equal(g.generation, 0);
    jitop_global_info again;
    assert_int_equal(jitop_global_get(m, " & coeffs", &again), JITOP_OK);
    assert_true(again.dptr == g.dptr);

    int counter = 0;
    assert_int_equal(jitop_global_read(m, "counter", &counter, sizeof counter, NULL), JITOP_OK);
    assert_int_equal(counter, 5); /* the source's initial value */

    float want[16], got[16];
    jt_random_floats(want, 16, -1.0f, 1.0f);
    assert_int_equal(jitop_global_write(m, "coeffs", want, sizeof want, NULL), JITOP_OK);
    memset(got, 0, sizeof got);
    assert_int_equal(jitop_global_read(m, "coeffs", got, sizeof got, NULL), JITOP_OK);
    assert_memory_equal(got, want, sizeof want);

    /* Queued on a stream: the *Async copies. */
    long async = stats().global_async_copies;
    int stream_object;
    counter = 42;
    assert_int_equal(jitop_global_write(m, "counter", &counter, sizeof counter, &stream_object),
                     JITOP_OK);
    counter = 0;
    assert_int_equal(jitop_global_read(m, "counter", &counter, sizeof counter, &stream_object),
                     JITOP_OK);
    assert_int_equal(counter, 42);
    assert_int_equal(stats().global_async_copies, async + 2);

    /* The whole variable or nothing: a double table for a float one is caught. */
    double wrong[16];
    memset(wrong, 0, sizeof wrong);
    long copies = stats().global_copies;
    assert_int_equal(jitop_global_write(m, "coeffs", wrong, sizeof wrong, NULL), JITOP_EINVAL);
    assert_non_null(strstr(jitop_errmsg(NULL), "64 bytes, 128 given"));
    assert_int_equal(jitop_global_read(m, "coeffs", got, 4, NULL), JITOP_EINVAL);
    assert_int_equal(stats().global_copies, copies);

    /* Unknown names list what exists, demangled. */
    assert_int_equal(jitop_global_get(m, "coef", &g), JITOP_ENOTFOUND);
    const char *msg = jitop_errmsg(NULL);
    assert_non_null(strstr(msg, "'coef'"));
    assert_non_null(strstr(msg, "coeffs"));
    assert_non_null(strstr(msg, "ns::table"));
    assert_non_null(strstr(msg, "scale<float>"));
    assert_int_equal(jitop_global_get(m, "", &g), JITOP_EINVAL);
    assert_int_equal(jitop_global_get(m, NULL, &g), JITOP_EINVAL);

    jitop_ctx_destroy(ctx);
    jt_rm_rf(dir);
    free(dir);
}

/* C++ names as people write them; a spelling the demangler does not give
 * ("widths<4>" for "widths<4u>") costs one name-expression compile, once
 * per module, and is a cache hit in a new context. */
static void test_global_cxx_names(void **state)
{
    (void)state;
    char *dir = jt_tmpdir();
    jitop_ctx *ctx = jt_ctx_driver(g_cache);
    jitop_module *m = load_text(ctx, dir, "globals.cu", globals_src);
    jitop_global_info a, b;
    float table[4];

    assert_int_equal(jitop_global_get(m, "ns::table", &a), JITOP_OK);
    assert_int_equal(a.size, sizeof table);
    static const char *const spellings[] = {"&ns::table", " ns :: table ", "::ns::table",
                                            "_ZN2ns5tableE"};
    for (size_t i = 0; i < sizeof spellings / sizeof spellings[0]; i++) {
        assert_int_equal(jitop_global_get(m, spellings[i], &b), JITOP_OK);
        assert_true(b.dptr == a.dptr);
    }
    assert_int_equal(jitop_global_read(m, "ns::table", table, sizeof table, NULL), JITOP_OK);
    assert_true(table[0] == 1.5f && table[3] == 4.5f);

    float scale = 0;
    assert_int_equal(jitop_global_read(m, "scale< float >", &scale, sizeof scale, NULL), JITOP_OK);
    assert_true(scale == 3.0f);
    int iscale = 0; /* instantiated by its use in k only */
    assert_int_equal(jitop_global_read(m, "&scale<int>", &iscale, sizeof iscale, NULL), JITOP_OK);
    assert_int_equal(iscale, 3);

    jitop__before_compile_hook = count_compile;
    g_compiles = 0;
    assert_int_equal(jitop_global_get(m, "widths<4u>", &a), JITOP_OK); /* the demangler's */
    assert_int_equal(g_compiles, 0);
    assert_int_equal(a.size, 4 * sizeof(int));
    assert_int_equal(jitop_global_get(m, "widths<4>", &b), JITOP_OK);
    assert_true(b.dptr == a.dptr);
    assert_int_equal(g_compiles, 1); /* the program's cache starts empty */
    assert_int_equal(jitop_global_get(m, "widths<2+2>", &b), JITOP_OK);
    assert_true(b.dptr == a.dptr);
    assert_int_equal(g_compiles, 2);
    assert_int_equal(jitop_global_get(m, "widths<4>", &b), JITOP_OK); /* remembered */
    int after = g_compiles;
    assert_int_equal(jitop_global_get(m, "widths<4>", &b), JITOP_OK);
    assert_int_equal(g_compiles, after);

    /* A template instance the code never made, and a name that is none. */
    assert_int_equal(jitop_global_get(m, "scale<double>", &b), JITOP_ENOTFOUND);
    assert_non_null(strstr(jitop_errmsg(NULL), "instantiated"));
    assert_int_equal(jitop_global_get(m, "ns::nothing", &b), JITOP_ENOTFOUND);
    jitop_ctx_destroy(ctx);

    /* Warm: a new context finds the name expression's entry in the cache. */
    ctx = jt_ctx_driver(g_cache);
    m = load_text(ctx, dir, "globals.cu", globals_src);
    g_compiles = 0;
    assert_int_equal(jitop_global_get(m, "widths<4>", &b), JITOP_OK);
    assert_int_equal(b.size, 4 * sizeof(int));
    assert_int_equal(g_compiles, 0);
    jitop__before_compile_hook = NULL;
    jitop_ctx_destroy(ctx);
    jt_rm_rf(dir);
    free(dir);
}

/* A spelling the demangler does not give, for a variable of the second
 * source: the first source's answer that it declares no such name (NVRTC's
 * errors in the name expression, kept in the cache) sends the lookup on to
 * the next source, cold and warm. */
static void test_global_cxx_name_in_second_source(void **state)
{
    (void)state;
    char *dir = jt_tmpdir();
    char *first = jt_write_rename(dir, "first.cu",
                                  "extern \"C\" __global__ void f(int *out) { *out = 1; }\n");
    char *second = jt_write_rename(dir, "second.cu", globals_src);
    const char *sources[] = {first, second};
    for (int warm = 0; warm < 2; warm++) {
        jitop_ctx *ctx = jt_ctx_driver(g_cache);
        jitop_module *m = NULL;
        jitop_global_info a, b;
        assert_int_equal(jitop_load(ctx, "two", sources, 2, NULL, 0, &m), JITOP_OK);
        assert_int_equal(jitop_global_get(m, "widths<4u>", &a), JITOP_OK);
        if (jitop_global_get(m, "widths<4>", &b) != JITOP_OK)
            fail_msg("%s", jitop_errmsg(NULL));
        assert_true(b.dptr == a.dptr);
        jitop_ctx_destroy(ctx);
    }
    free(first);
    free(second);
    jt_rm_rf(dir);
    free(dir);
}

static const char instance_src[] =
    "__constant__ int bias = 10;\n"
    "extern \"C\" __global__ void k(int *out) { *out = bias; }\n"
    "template <int N> __global__ void t(int *out) { *out = bias + N; }\n";

/* Each template instance is its own image with its own copy: a write goes
 * to every copy loaded; jitop_op_global_get gives the op's own. */
static void test_global_copies_in_instances(void **state)
{
    (void)state;
    char *dir = jt_tmpdir();
    jitop_ctx *ctx = jt_ctx_driver(g_cache);
    jitop_module *m = load_text(ctx, dir, "inst.cu", instance_src);
    jitop_op *k = NULL, *t3 = NULL;
    assert_int_equal(jitop_op_get(m, "k", &k), JITOP_OK);
    assert_int_equal(jitop_op_get(m, "t<3>", &t3), JITOP_OK);

    jitop_global_info src, own, ks;
    assert_int_equal(jitop_global_get(m, "bias", &src), JITOP_OK);
    assert_int_equal(jitop_op_global_get(t3, "bias", &own), JITOP_OK);
    assert_int_equal(jitop_op_global_get(k, "bias", &ks), JITOP_OK);
    assert_true(own.dptr != src.dptr);
    assert_true(ks.dptr == src.dptr); /* k lives in the source's image */

    long copies = stats().global_copies;
    int v = 77;
    assert_int_equal(jitop_global_write(m, "bias", &v, sizeof v, NULL), JITOP_OK);
    assert_int_equal(stats().global_copies, copies + 2);
    const jitop__cuda_api *cu = jitop__cuda();
    assert_non_null(cu);
    int got = 0;
    assert_int_equal(cu->cuMemcpyDtoH(&got, (CUdeviceptr)own.dptr, sizeof got), CUDA_SUCCESS);
    assert_int_equal(got, 77);

    /* An instance made after the write starts from the initial value. */
    jitop_op *t4 = NULL;
    assert_int_equal(jitop_op_get(m, "t<4>", &t4), JITOP_OK);
    assert_int_equal(jitop_op_global_get(t4, "bias", &own), JITOP_OK);
    assert_int_equal(cu->cuMemcpyDtoH(&got, (CUdeviceptr)own.dptr, sizeof got), CUDA_SUCCESS);
    assert_int_equal(got, 10);
    assert_int_equal(jitop_op_global_get(t4, "nope", &own), JITOP_ENOTFOUND);
    assert_non_null(strstr(jitop_errmsg(NULL), "op t<4>"));

    jitop_ctx_destroy(ctx);
    jt_rm_rf(dir);
    free(dir);
}

typedef struct refill {
    jitop_module *m;
    int calls, status;
    uint64_t generation;
} refill;

/* The reload callback refills the new code's globals. */
static void refill_cb(void *user, jitop_module *m, int status, const char *message)
{
    (void)message;
    refill *r = user;
    r->calls++;
    if (status != JITOP_OK)
        return;
    int v = 1000 + (int)jitop_module_generation(m);
    jitop_global_info g;
    r->status = jitop_global_write(m, "counter", &v, sizeof v, NULL);
    if (r->status == JITOP_OK)
        r->status = jitop_global_get(m, "counter", &g);
    r->generation = g.generation;
}

/* New code, new globals: new addresses, the source's initial values,
 * a new generation; the application refills them. */
static void test_global_across_reload(void **state)
{
    (void)state;
    char *dir = jt_tmpdir();
    jitop_ctx *ctx = jt_ctx_driver(g_cache);
    static const char fmt[] = "__device__ int counter = %d;\n"
                              "extern \"C\" __global__ void k(int *out) { *out = counter; }\n";
    char *text = xasprintf(fmt, 1);
    jitop_module *m = load_text(ctx, dir, "reload.cu", text);
    free(text);
    jitop_global_info g0, g1;
    assert_int_equal(jitop_global_get(m, "counter", &g0), JITOP_OK);
    int v = 55;
    assert_int_equal(jitop_global_write(m, "counter", &v, sizeof v, NULL), JITOP_OK);

    text = xasprintf(fmt, 2);
    free(jt_write_rename(dir, "reload.cu", text));
    free(text);
    assert_int_equal(jitop_module_reload(m), JITOP_OK);
    assert_int_equal(jitop_module_generation(m), 1);
    assert_int_equal(jitop_global_get(m, "counter", &g1), JITOP_OK);
    assert_int_equal(g1.generation, 1);
    assert_true(g1.dptr != g0.dptr);
    assert_int_equal(jitop_global_read(m, "counter", &v, sizeof v, NULL), JITOP_OK);
    assert_int_equal(v, 2); /* the new source's value: nothing carried over */

    /* Refilled in the reload callback (poll mode: on this thread). */
    refill r = {m, 0, -1, 0};
    assert_int_equal(jitop_watch(m, JITOP_RELOAD_POLL, refill_cb, &r), JITOP_OK);
    text = xasprintf(fmt, 3);
    free(jt_write_rename(dir, "reload.cu", text));
    free(text);
    int swapped = 0;
    for (int i = 0; i < 500 && swapped == 0; i++) {
        assert_int_equal(jitop_poll(ctx, &swapped), JITOP_OK);
        if (!swapped) {
            struct timespec ts = {0, 10 * 1000 * 1000};
            nanosleep(&ts, NULL);
        }
    }
    assert_int_equal(swapped, 1);
    assert_int_equal(r.calls, 1);
    assert_int_equal(r.status, JITOP_OK);
    assert_int_equal(r.generation, 2);
    assert_int_equal(jitop_global_read(m, "counter", &v, sizeof v, NULL), JITOP_OK);
    assert_int_equal(v, 1002);
    assert_int_equal(jitop_unwatch(m), JITOP_OK);
    jitop_ctx_destroy(ctx);
    jt_rm_rf(dir);
    free(dir);
}

/* Parameter i of the wide kernel: an int* first, then these in turn. */
static const struct {
    const char *type;
    size_t size, align;
} param_types[] = {
    {"char", 1, 1}, {"double", 8, 8}, {"short", 2, 2}, {"Vec", 16, 16}, {"int", 4, 4},
    {"float", 4, 4},
};
#define NTYPES (sizeof param_types / sizeof param_types[0])

static char *wide_source(size_t nparams)
{
    size_t cap = 256 + nparams * 32, n = 0;
    char *s = malloc(cap);
    assert_non_null(s);
    n += (size_t)snprintf(s + n, cap - n,
                          "struct __align__(16) Vec { float x, y, z, w; };\n"
                          "extern \"C\" __global__ void wide(int *out");
    for (size_t i = 1; i < nparams; i++)
        n += (size_t)snprintf(s + n, cap - n, ", %s p%zu", param_types[i % NTYPES].type, i);
    snprintf(s + n, cap - n, ") { *out = (int)p1 + (int)p2; }\n");
    return s;
}

/* Far past the old cap of 64: 100 parameters of mixed sizes, and 2000 (the
 * driver allows 32764 bytes). Layouts as the driver reports them; a launch
 * with every size checked. */
static void test_many_params(void **state)
{
    (void)state;
    char *dir = jt_tmpdir();
    jitop_ctx *ctx = jt_ctx_driver(g_cache);
    static const size_t counts[] = {100, 2000};
    for (size_t c = 0; c < 2; c++) {
        size_t np = counts[c];
        char *text = wide_source(np);
        char *file = xasprintf("wide%zu.cu", np);
        jitop_module *m = load_text(ctx, dir, file, text);
        free(text);
        free(file);
        jitop_op *op = NULL;
        assert_int_equal(jitop_op_get(m, "wide", &op), JITOP_OK);
        jitop_op_info info;
        assert_int_equal(jitop_op_info_get(op, &info), JITOP_OK);
        assert_int_equal(info.nparams, np);
        size_t *want_off = calloc(np, sizeof *want_off), *sizes = calloc(np, sizeof *sizes);
        assert_non_null(want_off);
        assert_non_null(sizes);
        size_t off = 8;
        sizes[0] = 8;
        for (size_t i = 1; i < np; i++) {
            size_t a = param_types[i % NTYPES].align;
            off = (off + a - 1) / a * a;
            want_off[i] = off;
            sizes[i] = param_types[i % NTYPES].size;
            off += sizes[i];
        }
        for (size_t i = 0; i < np; i++) {
            assert_int_equal(info.param_size[i], sizes[i]);
            assert_int_equal(info.param_offset[i], want_off[i]);
        }
        /* Arguments: one zeroed buffer, each pointer at its own slot. */
        unsigned char *buf = calloc(np, 16);
        void **args = calloc(np, sizeof *args);
        assert_non_null(buf);
        assert_non_null(args);
        int out = 0, *pout = &out;
        args[0] = &pout;
        for (size_t i = 1; i < np; i++)
            args[i] = buf + 16 * i;
        long launches = stats().launches;
        assert_int_equal(jitop_launch(op, one, one, 0, NULL, args, sizes, np), JITOP_OK);
        assert_int_equal(stats().launches, launches + 1);
        sizes[np - 3] += 1;
        assert_int_equal(jitop_launch(op, one, one, 0, NULL, args, sizes, np), JITOP_EARGS);
        char *msg = xasprintf("parameter %zu (at byte offset %zu)", np - 3, want_off[np - 3]);
        assert_non_null(strstr(jitop_errmsg(NULL), msg));
        free(msg);
        assert_int_equal(jitop_launch(op, one, one, 0, NULL, args, sizes, np - 1), JITOP_EARGS);
        assert_int_equal(stats().launches, launches + 1);
        free(buf);
        free(args);
        free(want_off);
        free(sizes);
    }
    jitop_ctx_destroy(ctx);
    jt_rm_rf(dir);
    free(dir);
}

/* A module of 600 kernels is listed whole; the list's strings and arrays
 * stay valid across a reload that unloads the image they came from. */
static void test_many_kernels(void **state)
{
    (void)state;
    enum { N = 600 };
    char *dir = jt_tmpdir();
    jitop_ctx *ctx = jt_ctx_driver(g_cache);
    size_t cap = N * 96, len = 0;
    char *text = malloc(cap);
    assert_non_null(text);
    for (int i = 0; i < N; i++)
        len += (size_t)snprintf(text + len, cap - len,
                                "extern \"C\" __global__ void k%03d(int *o, float x) "
                                "{ *o = %d; }\n",
                                i, i);
    jitop_module *m = load_text(ctx, dir, "many.cu", text);
    size_t count = 0;
    assert_int_equal(jitop_module_ops(m, NULL, 0, &count), JITOP_OK);
    assert_int_equal(count, N);
    jitop_op_info *infos = calloc(count, sizeof *infos);
    assert_non_null(infos);
    assert_int_equal(jitop_module_ops(m, infos, count, &count), JITOP_OK);
    bool seen[N] = {false};
    for (size_t i = 0; i < count; i++) {
        int idx = -1;
        assert_int_equal(sscanf(infos[i].name, "k%d", &idx), 1);
        assert_true(idx >= 0 && idx < N && !seen[idx]);
        seen[idx] = true;
        assert_int_equal(infos[i].nparams, 2);
        assert_int_equal(infos[i].param_size[1], sizeof(float));
        assert_int_equal(infos[i].param_offset[1], 8);
    }
    /* Listing again asks the driver nothing. */
    long described = stats().describe_calls;
    assert_int_equal(jitop_module_ops(m, infos, count, &count), JITOP_OK);
    assert_int_equal(stats().describe_calls, described);
    jitop_op *op = NULL;
    assert_int_equal(jitop_op_get(m, "k599", &op), JITOP_OK);

    /* New code: the old image is unloaded, what the list handed out stays. */
    char *last = strstr(text, "= 599;");
    assert_non_null(last);
    last[4] = '8';
    free(jt_write_rename(dir, "many.cu", text));
    assert_int_equal(jitop_module_reload(m), JITOP_OK);
    assert_int_equal(jitop_module_generation(m), 1);
    size_t left = 9;
    assert_int_equal(jitop__module_reap(m, true, &left), JITOP_OK);
    assert_int_equal(left, 0);
    assert_int_equal(infos[N - 1].param_size[1], sizeof(float));
    assert_true(strncmp(infos[N - 1].name, "k", 1) == 0);
    free(infos);
    free(text);
    jitop_ctx_destroy(ctx);
    jt_rm_rf(dir);
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
        cmocka_unit_test(test_global_by_c_name),
        cmocka_unit_test(test_global_cxx_names),
        cmocka_unit_test(test_global_cxx_name_in_second_source),
        cmocka_unit_test(test_global_copies_in_instances),
        cmocka_unit_test(test_global_across_reload),
        cmocka_unit_test(test_many_params),
        cmocka_unit_test(test_many_kernels),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    free(g_cache);
    free(dir);
    jt_cleanup();
    return failed;
}
