/* Module globals, wide parameter lists, modules of hundreds of kernels and
 * linked units (-rdc, -dlto, dynamic parallelism) on a GPU, each checked
 * against a CPU reference on fresh random inputs. Without libcuda.so.1
 * every test SKIPs. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "load/driver.h"
#include "jitop.h"
#include "gputest.h"
#include "testutil.h"

static const jitop__cuda_api *cu;

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

/* A context on a fresh cache in dir, its CUDA context current. */
static jitop_ctx *gpu_ctx(const char *dir)
{
    char *cache = jt_path(dir, "cache");
    jitop_ctx *ctx = jt_ctx_driver(cache);
    OK(jitop_ctx_cuda(ctx, NULL, NULL));
    cu = jitop__cuda();
    assert_non_null(cu);
    free(cache);
    return ctx;
}

static jitop_module *load(jitop_ctx *ctx, const char *name, const char *const *paths, size_t n,
                          const char *const *opts, size_t nopts)
{
    jitop_module *m = NULL;
    OK(jitop_load(ctx, name, paths, n, opts, nopts, &m));
    return m;
}

static CUdeviceptr dalloc(size_t bytes)
{
    CUdeviceptr p = 0;
    CU(cu->cuMemAlloc(&p, bytes));
    CU(cu->cuMemsetD8(p, 0xFF, bytes)); /* NaN bytes: an unwritten output never passes */
    return p;
}

static void upload(CUdeviceptr d, const void *h, size_t bytes)
{
    CU(cu->cuMemcpyHtoD(d, h, bytes));
}

static void download(void *h, CUdeviceptr d, size_t bytes)
{
    CU(cu->cuCtxSynchronize());
    CU(cu->cuMemcpyDtoH(h, d, bytes));
}

static jitop_dim3 dim(unsigned x)
{
    jitop_dim3 d = {x, 1, 1};
    return d;
}

static const jitop_dim3 one = {1, 1, 1};

static const char lookup_src[] =
    "__constant__ float table[256];\n"
    "namespace ns { __device__ float offset; }\n"
    "template <typename T> __device__ T scale;\n"
    "template __device__ float scale<float>;\n"
    "extern \"C\" __global__ void lookup(const int *idx, float *out, int n)\n"
    "{\n"
    "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "    if (i < n) out[i] = table[idx[i]] * scale<float> + ns::offset;\n"
    "}\n"
    "template <typename T> __global__ void lookup_t(const int *idx, T *out, int n)\n"
    "{\n"
    "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "    if (i < n) out[i] = (T)table[idx[i]] * scale<T> + (T)ns::offset;\n"
    "}\n";

/* Runs lookup (or lookup_t<double>, dbl) with the globals given and checks
 * it against the reference. */
static void check_lookup(jitop_op *op, bool dbl, const float *table, float scale, float offset)
{
    int n = 10000;
    int *idx = malloc(n * sizeof *idx);
    double *got = malloc(n * sizeof *got), *want = malloc(n * sizeof *want);
    float *gotf = malloc(n * sizeof *gotf);
    assert_true(idx && got && want && gotf);
    for (int i = 0; i < n; i++) {
        float r;
        jt_random_floats(&r, 1, 0.0f, 256.0f);
        idx[i] = (int)r & 255;
        want[i] = (double)table[idx[i]] * scale + offset;
    }
    size_t esize = dbl ? sizeof(double) : sizeof(float);
    CUdeviceptr didx = dalloc(n * sizeof *idx), dout = dalloc(n * esize);
    upload(didx, idx, n * sizeof *idx);
    void *args[] = {&didx, &dout, &n};
    size_t sizes[] = {sizeof didx, sizeof dout, sizeof n};
    OK(jitop_launch(op, dim((n + 255) / 256), dim(256), 0, NULL, args, sizes, 3));
    if (dbl) {
        download(got, dout, n * sizeof *got);
    } else {
        download(gotf, dout, n * sizeof *gotf);
        for (int i = 0; i < n; i++)
            got[i] = gotf[i];
    }
    assert_true(jt_rel_error(got, want, n) < (dbl ? 1e-12 : 1e-6));
    CU(cu->cuMemFree(didx));
    CU(cu->cuMemFree(dout));
    free(idx);
    free(got);
    free(want);
    free(gotf);
}

/* A __constant__ table, a namespaced and a templated __device__ variable,
 * filled by name and read by a kernel; a template instance (its own image)
 * gets every later write; an address from jitop_global_get works with the
 * driver's own copies. */
static void test_constant_table_and_cxx_globals(void **state)
{
    (void)state;
    JT_REQUIRE_GPU();
    char *dir = jt_tmpdir();
    jitop_ctx *ctx = gpu_ctx(dir);
    char *src = jt_write(dir, "lookup.cu", lookup_src);
    const char *paths[] = {src};
    jitop_module *m = load(ctx, "lookup", paths, 1, NULL, 0);
    jitop_op *lookup = NULL;
    OK(jitop_op_get(m, "lookup", &lookup));

    float table[256], scale, offset;
    jt_random_floats(table, 256, -4.0f, 4.0f);
    jt_random_floats(&scale, 1, 0.5f, 2.0f);
    jt_random_floats(&offset, 1, -1.0f, 1.0f);
    OK(jitop_global_write(m, "table", table, sizeof table, NULL));
    OK(jitop_global_write(m, "scale<float>", &scale, sizeof scale, NULL));
    jitop_global_info off;
    OK(jitop_global_get(m, "&ns::offset", &off));
    assert_int_equal(off.size, sizeof offset);
    upload((CUdeviceptr)off.dptr, &offset, sizeof offset);
    check_lookup(lookup, false, table, scale, offset);

    float back[256];
    OK(jitop_global_read(m, "table", back, sizeof back, NULL));
    assert_memory_equal(back, table, sizeof table);

    /* Queued on a stream. */
    CUstream stream = NULL;
    CU(cu->cuStreamCreate(&stream, 0));
    jt_random_floats(table, 256, -4.0f, 4.0f);
    OK(jitop_global_write(m, "table", table, sizeof table, stream));
    CU(cu->cuStreamSynchronize(stream));
    check_lookup(lookup, false, table, scale, offset);

    /* The double instance: its own copies, which start from zero... */
    jitop_op *ld = NULL;
    OK(jitop_op_get(m, "lookup_t<double>", &ld));
    jitop_global_info own, mod;
    OK(jitop_op_global_get(ld, "table", &own));
    OK(jitop_global_get(m, "table", &mod));
    assert_true(own.dptr != mod.dptr);
    /* ...and take every write from now on (scale<double> lives there only). */
    double dscale = scale;
    OK(jitop_global_write(m, "table", table, sizeof table, NULL));
    OK(jitop_global_write(m, "ns::offset", &offset, sizeof offset, NULL));
    OK(jitop_global_write(m, "scale<double>", &dscale, sizeof dscale, NULL));
    check_lookup(ld, true, table, scale, offset);
    check_lookup(lookup, false, table, scale, offset);
    CU(cu->cuStreamDestroy(stream));
    jitop_ctx_destroy(ctx);
    free(src);
    jt_rm_rf(dir);
    free(dir);
}

static const char gain_fmt[] = "__device__ float gain = %d.0f;\n"
                               "extern \"C\" __global__ void apply(float *p, int n)\n"
                               "{ int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
                               "  if (i < n) p[i] = p[i] * gain + %d.0f; }\n";

static void check_apply(jitop_op *op, float gain, float add)
{
    int n = 4096;
    float *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y);
    double *got = malloc(n * sizeof *got), *want = malloc(n * sizeof *want);
    assert_true(x && y && got && want);
    jt_random_floats(x, n, -3.0f, 3.0f);
    CUdeviceptr d = dalloc(n * sizeof *x);
    upload(d, x, n * sizeof *x);
    void *args[] = {&d, &n};
    size_t sizes[] = {sizeof d, sizeof n};
    OK(jitop_launch(op, dim(n / 128), dim(128), 0, NULL, args, sizes, 2));
    download(y, d, n * sizeof *y);
    for (int i = 0; i < n; i++) {
        got[i] = y[i];
        want[i] = (double)x[i] * gain + add;
    }
    assert_true(jt_rel_error(got, want, n) < 1e-6);
    CU(cu->cuMemFree(d));
    free(x);
    free(y);
    free(got);
    free(want);
}

/* New code after a hot reload has new globals with the source's initial
 * values, and a new generation; refilled, the kernel uses the new value. */
static void test_globals_across_reload(void **state)
{
    (void)state;
    JT_REQUIRE_GPU();
    char *dir = jt_tmpdir();
    jitop_ctx *ctx = gpu_ctx(dir);
    char *text = xasprintf(gain_fmt, 1, 0);
    char *src = jt_write_rename(dir, "gain.cu", text);
    free(text);
    const char *paths[] = {src};
    jitop_module *m = load(ctx, "gain", paths, 1, NULL, 0);
    jitop_op *apply = NULL;
    OK(jitop_op_get(m, "apply", &apply));
    float g;
    jt_random_floats(&g, 1, 2.0f, 3.0f);
    OK(jitop_global_write(m, "gain", &g, sizeof g, NULL));
    check_apply(apply, g, 0.0f);

    text = xasprintf(gain_fmt, 5, 1);
    free(jt_write_rename(dir, "gain.cu", text));
    free(text);
    OK(jitop_module_reload(m));
    jitop_global_info info;
    OK(jitop_global_get(m, "gain", &info));
    assert_int_equal(info.generation, jitop_module_generation(m));
    assert_int_equal(info.generation, 1);
    check_apply(apply, 5.0f, 1.0f); /* the initial value: nothing carried over */
    OK(jitop_global_write(m, "gain", &g, sizeof g, NULL));
    check_apply(apply, g, 1.0f);
    jitop_ctx_destroy(ctx);
    free(src);
    jt_rm_rf(dir);
    free(dir);
}

/* Parameter i (1..) of the wide kernel cycles through these types. */
static const struct {
    const char *type;
    size_t size;
} wide_types[] = {{"char", 1}, {"double", 8}, {"short", 2}, {"int", 4}, {"float", 4},
                  {"long long", 8}};
#define NWIDE (sizeof wide_types / sizeof wide_types[0])

/* 100 parameters: out[0] gets the sum of the other 99, in double. */
static void test_hundred_parameters(void **state)
{
    (void)state;
    JT_REQUIRE_GPU();
    enum { NP = 100 };
    char *dir = jt_tmpdir();
    jitop_ctx *ctx = gpu_ctx(dir);
    size_t cap = 64 * NP + 256, len = 0;
    char *text = malloc(cap);
    assert_non_null(text);
    len += (size_t)snprintf(text + len, cap - len, "extern \"C\" __global__ void wide(double *out");
    for (int i = 1; i < NP; i++)
        len += (size_t)snprintf(text + len, cap - len, ", %s p%d", wide_types[i % NWIDE].type, i);
    len += (size_t)snprintf(text + len, cap - len, ")\n{\n    double s = 0;\n");
    for (int i = 1; i < NP; i++)
        len += (size_t)snprintf(text + len, cap - len, "    s += (double)p%d;\n", i);
    snprintf(text + len, cap - len, "    out[0] = s;\n}\n");
    char *src = jt_write(dir, "wide.cu", text);
    free(text);
    const char *paths[] = {src};
    jitop_module *m = load(ctx, "wide", paths, 1, NULL, 0);
    jitop_op *wide = NULL;
    OK(jitop_op_get(m, "wide", &wide));
    jitop_op_info info;
    OK(jitop_op_info_get(wide, &info));
    assert_int_equal(info.nparams, NP);

    /* Fresh values, each stored in its own 8-byte slot. */
    unsigned char slots[NP][8];
    void *args[NP];
    size_t sizes[NP];
    double want = 0;
    CUdeviceptr dout = dalloc(sizeof(double));
    args[0] = &dout;
    sizes[0] = sizeof dout;
    for (int i = 1; i < NP; i++) {
        float r;
        jt_random_floats(&r, 1, -100.0f, 100.0f);
        int v = (int)r;
        memset(slots[i], 0, 8);
        char c = (char)v;
        double d = r;
        short h = (short)(v * 300);
        int k = v * 100000;
        float f = r * 0.25f;
        long long q = (long long)v * (1LL << 33);
        switch (i % NWIDE) {
        case 0: memcpy(slots[i], &c, 1); want += c; break;
        case 1: memcpy(slots[i], &d, 8); want += d; break;
        case 2: memcpy(slots[i], &h, 2); want += h; break;
        case 3: memcpy(slots[i], &k, 4); want += k; break;
        case 4: memcpy(slots[i], &f, 4); want += f; break;
        default: memcpy(slots[i], &q, 8); want += (double)q; break;
        }
        args[i] = slots[i];
        sizes[i] = wide_types[i % NWIDE].size;
        assert_int_equal(info.param_size[i], sizes[i]);
        assert_true(info.param_offset[i] % sizes[i] == 0);
        assert_true(info.param_offset[i] > info.param_offset[i - 1]);
    }
    OK(jitop_launch(wide, one, one, 0, NULL, args, sizes, NP));
    double got = 0;
    download(&got, dout, sizeof got);
    assert_true(fabs(got - want) <= 1e-12 * fabs(want) + 1e-9);
    /* A wrong size is caught before launching. */
    sizes[64] += 4;
    assert_int_equal(jitop_launch(wide, one, one, 0, NULL, args, sizes, NP), JITOP_EARGS);
    CU(cu->cuMemFree(dout));
    jitop_ctx_destroy(ctx);
    free(src);
    jt_rm_rf(dir);
    free(dir);
}

/* 500 kernels: every one listed, described and launched. */
static void test_five_hundred_kernels(void **state)
{
    (void)state;
    JT_REQUIRE_GPU();
    enum { N = 500 };
    char *dir = jt_tmpdir();
    jitop_ctx *ctx = gpu_ctx(dir);
    size_t cap = N * 100, len = 0;
    char *text = malloc(cap);
    assert_non_null(text);
    for (int i = 0; i < N; i++)
        len += (size_t)snprintf(text + len, cap - len,
                                "extern \"C\" __global__ void k%03d(int *o, int s) "
                                "{ o[%d] = s * %d + 1; }\n",
                                i, i, i + 1);
    char *src = jt_write(dir, "many.cu", text);
    free(text);
    const char *paths[] = {src};
    jitop_module *m = load(ctx, "many", paths, 1, NULL, 0);
    size_t count = 0;
    OK(jitop_module_ops(m, NULL, 0, &count));
    assert_int_equal(count, N);
    jitop_op_info *infos = calloc(count, sizeof *infos);
    assert_non_null(infos);
    OK(jitop_module_ops(m, infos, count, &count));
    float r;
    jt_random_floats(&r, 1, 1.0f, 1000.0f);
    int s = (int)r;
    CUdeviceptr dout = dalloc(N * sizeof(int));
    for (size_t i = 0; i < count; i++) {
        assert_int_equal(infos[i].nparams, 2);
        jitop_op *op = NULL;
        OK(jitop_op_get(m, infos[i].name, &op));
        void *args[] = {&dout, &s};
        size_t sizes[] = {sizeof dout, sizeof s};
        OK(jitop_launch(op, one, one, 0, NULL, args, sizes, 2));
    }
    int got[N];
    download(got, dout, sizeof got);
    for (int i = 0; i < N; i++)
        assert_int_equal(got[i], s * (i + 1) + 1);
    CU(cu->cuMemFree(dout));
    free(infos);
    jitop_ctx_destroy(ctx);
    free(src);
    jt_rm_rf(dir);
    free(dir);
}

/* a.cu: a kernel calling b.cu's device function and reading b.cu's
 * variables through extern declarations; a template kernel too. */
static const char a_src[] =
    "extern __device__ float bias;\n"
    "extern __device__ float bscale(float v);\n"
    "extern \"C\" __global__ void axpb(const float *x, float *y, int n)\n"
    "{ int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = bscale(x[i]) + bias; }\n"
    "template <int N> __global__ void axpb_n(const float *x, float *y, int n)\n"
    "{ int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "  if (i < n) y[i] = bscale(x[i]) * N + bias; }\n";
static const char b_src[] = "__device__ float bias = 0.0f;\n"
                            "__device__ float factor = 1.0f;\n"
                            "__device__ float bscale(float v) { return v * factor; }\n";

static void check_axpb(jitop_op *op, float factor, float bias, int mult)
{
    int n = (1 << 16) + 17;
    float *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y);
    double *got = malloc(n * sizeof *got), *want = malloc(n * sizeof *want);
    assert_true(x && y && got && want);
    jt_random_floats(x, n, -2.0f, 2.0f);
    CUdeviceptr dx = dalloc(n * sizeof *x), dy = dalloc(n * sizeof *y);
    upload(dx, x, n * sizeof *x);
    void *args[] = {&dx, &dy, &n};
    size_t sizes[] = {sizeof dx, sizeof dy, sizeof n};
    OK(jitop_launch(op, dim((n + 255) / 256), dim(256), 0, NULL, args, sizes, 3));
    download(y, dy, n * sizeof *y);
    for (int i = 0; i < n; i++) {
        got[i] = y[i];
        want[i] = (double)x[i] * factor * mult + bias;
    }
    assert_true(jt_rel_error(got, want, n) < 1e-6);
    CU(cu->cuMemFree(dx));
    CU(cu->cuMemFree(dy));
    free(x);
    free(y);
    free(got);
    free(want);
}

static void linked_units(const char *opt)
{
    char *dir = jt_tmpdir();
    jitop_ctx *ctx = gpu_ctx(dir);
    char *a = jt_write(dir, "a.cu", a_src), *b = jt_write(dir, "b.cu", b_src);
    const char *paths[] = {a, b};
    jitop_module *m = load(ctx, "linked", paths, 2, &opt, 1);
    jitop_op *axpb = NULL, *axpb3 = NULL;
    OK(jitop_op_get(m, "axpb", &axpb));
    float factor, bias;
    jt_random_floats(&factor, 1, 0.5f, 2.0f);
    jt_random_floats(&bias, 1, -1.0f, 1.0f);
    OK(jitop_global_write(m, "factor", &factor, sizeof factor, NULL));
    OK(jitop_global_write(m, "bias", &bias, sizeof bias, NULL));
    check_axpb(axpb, factor, bias, 1);
    /* A template instance: a.cu with the instance, linked with b.cu. */
    OK(jitop_op_get(m, "axpb_n<3>", &axpb3));
    OK(jitop_global_write(m, "factor", &factor, sizeof factor, NULL));
    OK(jitop_global_write(m, "bias", &bias, sizeof bias, NULL));
    check_axpb(axpb3, factor, bias, 3);
    check_axpb(axpb, factor, bias, 1);
    jitop_ctx_destroy(ctx);
    free(a);
    free(b);
    jt_rm_rf(dir);
    free(dir);
}

/* Two units linked by nvJitLink into one image. */
static void test_rdc_two_units(void **state)
{
    (void)state;
    JT_REQUIRE_GPU();
    linked_units("-rdc=true");
}

/* The same as LTO-IR linked with link-time optimization. */
static void test_dlto_two_units(void **state)
{
    (void)state;
    JT_REQUIRE_GPU();
    linked_units("-dlto");
}

static const char dp_src[] =
    "extern \"C\" __global__ void child(float *p, int n, float s)\n"
    "{ int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) p[i] = p[i] * s + 1.0f; }\n"
    "extern \"C\" __global__ void parent(float *p, int n, float s)\n"
    "{ if (blockIdx.x == 0 && threadIdx.x == 0) child<<<(n + 127) / 128, 128>>>(p, n, s); }\n";

/* Dynamic parallelism: a kernel launching a kernel, linked with the device
 * runtime; the parent grid completes after its child. */
static void test_dynamic_parallelism(void **state)
{
    (void)state;
    JT_REQUIRE_GPU();
    char *dir = jt_tmpdir();
    jitop_ctx *ctx = gpu_ctx(dir);
    char *src = jt_write(dir, "dp.cu", dp_src);
    const char *paths[] = {src};
    const char *opt = "-rdc";
    jitop_module *m = load(ctx, "dp", paths, 1, &opt, 1);
    jitop_op *parent = NULL;
    OK(jitop_op_get(m, "parent", &parent));
    int n = 100000;
    float s;
    jt_random_floats(&s, 1, -2.0f, 2.0f);
    float *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y);
    double *got = malloc(n * sizeof *got), *want = malloc(n * sizeof *want);
    assert_true(x && y && got && want);
    jt_random_floats(x, n, -1.0f, 1.0f);
    CUdeviceptr d = dalloc(n * sizeof *x);
    upload(d, x, n * sizeof *x);
    void *args[] = {&d, &n, &s};
    size_t sizes[] = {sizeof d, sizeof n, sizeof s};
    OK(jitop_launch(parent, one, dim(32), 0, NULL, args, sizes, 3));
    download(y, d, n * sizeof *y);
    for (int i = 0; i < n; i++) {
        got[i] = y[i];
        want[i] = (double)x[i] * s + 1.0;
    }
    assert_true(jt_rel_error(got, want, n) < 1e-6);
    CU(cu->cuMemFree(d));
    free(x);
    free(y);
    free(got);
    free(want);
    jitop_ctx_destroy(ctx);
    free(src);
    jt_rm_rf(dir);
    free(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_constant_table_and_cxx_globals),
        cmocka_unit_test(test_globals_across_reload),
        cmocka_unit_test(test_hundred_parameters),
        cmocka_unit_test(test_five_hundred_kernels),
        cmocka_unit_test(test_rdc_two_units),
        cmocka_unit_test(test_dlto_two_units),
        cmocka_unit_test(test_dynamic_parallelism),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    jt_cleanup();
    return failed;
}
