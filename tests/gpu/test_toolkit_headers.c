/* Real sources on a GPU: kernels using the toolkit's headers without an -I
 * (half and bfloat16 arithmetic, cooperative groups, CUB, cuRAND) checked
 * against a CPU reference on fresh random data; kernels defined in an
 * included header (extern "C", a C++ kernel by its qualified name, a
 * template through two spellings that are one op), cold and warm. Without
 * libcuda.so.1 every test SKIPs. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gputest.h"
#include "jitop.h"
#include "load/driver.h"
#include "testutil.h"

static const jitop__cuda_api *cu;
/* One cache for the program: toolkit_headers.cu compiles once (CUB and
 * cuRAND make it a few seconds), each test then loads it warm. */
static char *g_cache;

/* tests/gpu/kernels/<name>, from this file's own path. */
static char *kernel_path(const char *name)
{
    const char *file = __FILE__;
    const char *slash = strrchr(file, '/');
    int dirlen = slash ? (int)(slash - file) : 1;
    char *p = NULL;
    if (asprintf(&p, "%.*s/kernels/%s", dirlen, slash ? file : ".", name) < 0)
        fail_msg("out of memory");
    return p;
}

static jitop_ctx *gpu_ctx(const char *cache)
{
    jitop_ctx *ctx = jt_ctx_driver(cache);
    OK(jitop_ctx_cuda(ctx, NULL, NULL));
    cu = jitop__cuda();
    assert_non_null(cu);
    return ctx;
}

static jitop_module *load_one(jitop_ctx *ctx, const char *name, const char *file)
{
    char *path = kernel_path(file);
    const char *sources[] = {path};
    jitop_module *m = NULL;
    OK(jitop_load(ctx, name, sources, 1, NULL, 0, &m));
    free(path);
    return m;
}

static CUdeviceptr dalloc(size_t bytes)
{
    CUdeviceptr p = 0;
    CU(cu->cuMemAlloc(&p, bytes));
    CU(cu->cuMemsetD8(p, 0xFF, bytes)); /* NaN bytes: an unwritten output never passes */
    return p;
}

static CUdeviceptr upload(const void *h, size_t bytes)
{
    CUdeviceptr d = dalloc(bytes);
    CU(cu->cuMemcpyHtoD(d, h, bytes));
    return d;
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

/* f rounded to the nearest value with mbits fraction bits and the smallest
 * normal exponent min_exp (half: 10, -14; bfloat16: 7, -126), ties to even
 * (nearbyint in the default rounding mode). Inputs here are far from
 * overflow. */
static double round_to(double f, int mbits, int min_exp)
{
    if (f == 0.0)
        return 0.0;
    int e = 0;
    frexp(f, &e); /* f = m * 2^e, 0.5 <= |m| < 1 */
    int p = e - 1 < min_exp ? min_exp : e - 1;
    double ulp = ldexp(1.0, p - mbits);
    return nearbyint(f / ulp) * ulp;
}

static double ulp_of(double f, int mbits, int min_exp)
{
    int e = 0;
    frexp(f, &e);
    int p = e - 1 < min_exp ? min_exp : e - 1;
    return ldexp(1.0, p - mbits);
}

/* fma(a, b, c) of 16-bit inputs against the reference: the inputs rounded,
 * the exact product-sum rounded once. One unit in the last place of slack:
 * the reference rounds the double result, which may already be rounded. */
static void check_fma16(jitop_op *op, int mbits, int min_exp, const char *what)
{
    int n = (1 << 16) + 13;
    float *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b), *c = malloc(n * sizeof *c);
    float *got = malloc(n * sizeof *got);
    assert_true(a && b && c && got);
    jt_random_floats(a, n, -4.0f, 4.0f);
    jt_random_floats(b, n, -4.0f, 4.0f);
    jt_random_floats(c, n, -4.0f, 4.0f);
    CUdeviceptr da = upload(a, n * sizeof *a), db = upload(b, n * sizeof *b);
    CUdeviceptr dc = upload(c, n * sizeof *c), dout = dalloc(n * sizeof *got);
    void *args[] = {&da, &db, &dc, &dout, &n};
    size_t sizes[] = {8, 8, 8, 8, 4};
    OK(jitop_launch(op, dim((n + 255) / 256), dim(256), 0, NULL, args, sizes, 5));
    download(got, dout, n * sizeof *got);
    for (int i = 0; i < n; i++) {
        double ha = round_to(a[i], mbits, min_exp), hb = round_to(b[i], mbits, min_exp);
        double hc = round_to(c[i], mbits, min_exp);
        double want = round_to(ha * hb + hc, mbits, min_exp);
        if (!(fabs(got[i] - want) <= ulp_of(want, mbits, min_exp)))
            fail_msg("%s: element %d: fma(%g, %g, %g) = %g, expected %g", what, i, ha, hb, hc,
                     (double)got[i], want);
    }
    CU(cu->cuMemFree(da));
    CU(cu->cuMemFree(db));
    CU(cu->cuMemFree(dc));
    CU(cu->cuMemFree(dout));
    free(a); free(b); free(c); free(got);
}

static void test_half_and_bfloat16(void **state)
{
    (void)state;
    JT_REQUIRE_GPU();
    jitop_ctx *ctx = gpu_ctx(g_cache);
    jitop_module *m = load_one(ctx, "toolkit", "toolkit_headers.cu");
    jitop_op *h = NULL, *bf = NULL;
    OK(jitop_op_get(m, "half_fma", &h));
    OK(jitop_op_get(m, "bf16_fma", &bf));
    check_fma16(h, 10, -14, "half");
    check_fma16(bf, 7, -126, "bfloat16");
    jitop_ctx_destroy(ctx);
}

static void test_cooperative_groups_reduce(void **state)
{
    (void)state;
    JT_REQUIRE_GPU();
    jitop_ctx *ctx = gpu_ctx(g_cache);
    jitop_module *m = load_one(ctx, "toolkit", "toolkit_headers.cu");
    jitop_op *op = NULL;
    OK(jitop_op_get(m, "cg_block_sum", &op));
    int n = 1000003, block = 256, blocks = (n + block - 1) / block;
    float *x = malloc(n * sizeof *x), *got = malloc(blocks * sizeof *got);
    assert_true(x && got);
    jt_random_floats(x, n, -1.0f, 1.0f);
    CUdeviceptr dx = upload(x, n * sizeof *x), dout = dalloc(blocks * sizeof *got);
    void *args[] = {&dx, &dout, &n};
    OK(jitop_launch(op, dim(blocks), dim(block), 0, NULL, args, NULL, 0));
    download(got, dout, blocks * sizeof *got);
    for (int b = 0; b < blocks; b++) {
        double want = 0, mag = 0;
        for (int i = b * block; i < n && i < (b + 1) * block; i++) {
            want += x[i];
            mag += fabs(x[i]);
        }
        if (!(fabs(got[b] - want) <= 1e-5 * mag + 1e-6))
            fail_msg("block %d: sum %g, expected %g", b, (double)got[b], want);
    }
    CU(cu->cuMemFree(dx));
    CU(cu->cuMemFree(dout));
    free(x);
    free(got);
    jitop_ctx_destroy(ctx);
}

static void test_cub_block_scan_and_reduce(void **state)
{
    (void)state;
    JT_REQUIRE_GPU();
    jitop_ctx *ctx = gpu_ctx(g_cache);
    jitop_module *m = load_one(ctx, "toolkit", "toolkit_headers.cu");
    jitop_op *op = NULL;
    OK(jitop_op_get(m, "cub_scan<256>", &op));
    int n = 300007, block = 256, blocks = (n + block - 1) / block;
    int *x = malloc(n * sizeof *x), *scan = malloc(n * sizeof *scan);
    int *sums = malloc(blocks * sizeof *sums);
    float *r = malloc(n * sizeof *r);
    assert_true(x && scan && sums && r);
    jt_random_floats(r, n, -1000.0f, 1000.0f);
    for (int i = 0; i < n; i++)
        x[i] = (int)r[i];
    CUdeviceptr dx = upload(x, n * sizeof *x), dscan = dalloc(n * sizeof *scan);
    CUdeviceptr dsums = dalloc(blocks * sizeof *sums);
    void *args[] = {&dx, &dscan, &dsums, &n};
    size_t sizes[] = {8, 8, 8, 4};
    OK(jitop_launch(op, dim(blocks), dim(block), 0, NULL, args, sizes, 4));
    download(scan, dscan, n * sizeof *scan);
    download(sums, dsums, blocks * sizeof *sums);
    for (int b = 0; b < blocks; b++) {
        int run = 0;
        for (int i = b * block; i < n && i < (b + 1) * block; i++) {
            run += x[i];
            if (scan[i] != run)
                fail_msg("element %d: inclusive sum %d, expected %d", i, scan[i], run);
        }
        if (sums[b] != run)
            fail_msg("block %d: sum %d, expected %d", b, sums[b], run);
    }
    CU(cu->cuMemFree(dx));
    CU(cu->cuMemFree(dscan));
    CU(cu->cuMemFree(dsums));
    free(x); free(scan); free(sums); free(r);
    jitop_ctx_destroy(ctx);
}

/* Philox has no CPU reference here: the numbers must lie in (0, 1], have
 * the uniform distribution's mean and variance, repeat for a seed and
 * change with it. */
static void test_curand_philox(void **state)
{
    (void)state;
    JT_REQUIRE_GPU();
    jitop_ctx *ctx = gpu_ctx(g_cache);
    jitop_module *m = load_one(ctx, "toolkit", "toolkit_headers.cu");
    jitop_op *op = NULL;
    OK(jitop_op_get(m, "philox_uniform", &op));
    int n = 1 << 20;
    float *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b), *c = malloc(n * sizeof *c);
    assert_true(a && b && c);
    float seedf = 0;
    jt_random_floats(&seedf, 1, 1.0f, 1e6f);
    unsigned long long seed = (unsigned long long)seedf, other = seed + 1;
    CUdeviceptr d = dalloc(n * sizeof *a);
    void *args[] = {&seed, &d, &n};
    OK(jitop_launch(op, dim(n / 256), dim(256), 0, NULL, args, NULL, 0));
    download(a, d, n * sizeof *a);
    OK(jitop_launch(op, dim(n / 256), dim(256), 0, NULL, args, NULL, 0));
    download(b, d, n * sizeof *b);
    void *args2[] = {&other, &d, &n};
    OK(jitop_launch(op, dim(n / 256), dim(256), 0, NULL, args2, NULL, 0));
    download(c, d, n * sizeof *c);
    double sum = 0, sq = 0;
    int differ = 0;
    for (int i = 0; i < n; i++) {
        if (!(a[i] > 0.0f && a[i] <= 1.0f))
            fail_msg("element %d: %g is not in (0, 1]", i, (double)a[i]);
        if (a[i] != b[i])
            fail_msg("element %d: %g then %g for one seed", i, (double)a[i], (double)b[i]);
        differ += a[i] != c[i];
        sum += a[i];
        sq += (double)a[i] * a[i];
    }
    double mean = sum / n, var = sq / n - mean * mean;
    /* 5 standard errors: sd of the mean is sqrt(1/12/n) = 2.8e-4. */
    if (fabs(mean - 0.5) > 1.5e-3 || fabs(var - 1.0 / 12.0) > 1.5e-3)
        fail_msg("mean %g, variance %g: not uniform on (0, 1]", mean, var);
    assert_true(differ > n / 2);
    CU(cu->cuMemFree(d));
    free(a); free(b); free(c);
    jitop_ctx_destroy(ctx);
}

/* Every kernel of the module comes from an included header; asked for cold
 * (compiled) and warm (a new context on the same cache), with the same
 * answers. The template's two spellings are one op. */
static void test_kernels_from_a_header(void **state)
{
    (void)state;
    JT_REQUIRE_GPU();
    char *dir = jt_tmpdir(), *cache = jt_path(dir, "cache");
    int n = 100003;
    float *x = malloc(n * sizeof *x), *got = malloc(n * sizeof *got), v = 0;
    assert_true(x && got);
    for (int warm = 0; warm < 2; warm++) {
        jitop_ctx *ctx = gpu_ctx(cache);
        jitop_module *m = load_one(ctx, "from_header", "from_header.cu");
        jitop_op *add = NULL, *neg = NULL, *s1 = NULL, *s2 = NULL;
        OK(jitop_op_get(m, "hdr_add", &add));
        OK(jitop_op_get(m, "hdr::negate", &neg));
        OK(jitop_op_get(m, "hdr_scale<float, 3>", &s1));
        OK(jitop_op_get(m, "hdr_scale< float,3u >", &s2));
        assert_ptr_equal(s1, s2);
        jt_random_floats(x, n, -2.0f, 2.0f);
        jt_random_floats(&v, 1, 0.5f, 1.5f);
        CUdeviceptr d = upload(x, n * sizeof *x);
        void *add_args[] = {&d, &v, &n}, *args[] = {&d, &n};
        OK(jitop_launch(add, dim((n + 255) / 256), dim(256), 0, NULL, add_args, NULL, 0));
        OK(jitop_launch(neg, dim((n + 255) / 256), dim(256), 0, NULL, args, NULL, 0));
        OK(jitop_launch(s2, dim((n + 255) / 256), dim(256), 0, NULL, args, NULL, 0));
        download(got, d, n * sizeof *got);
        for (int i = 0; i < n; i++) {
            float want = -(x[i] + v) * 3.0f;
            if (got[i] != want)
                fail_msg("%s: element %d: %g, expected %g", warm ? "warm" : "cold", i,
                         (double)got[i], (double)want);
        }
        CU(cu->cuMemFree(d));
        jitop_ctx_destroy(ctx);
    }
    free(x);
    free(got);
    free(cache);
    free(dir);
}

int main(void)
{
    char *dir = jt_tmpdir();
    g_cache = jt_path(dir, "cache");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_half_and_bfloat16),
        cmocka_unit_test(test_cooperative_groups_reduce),
        cmocka_unit_test(test_cub_block_scan_and_reduce),
        cmocka_unit_test(test_curand_philox),
        cmocka_unit_test(test_kernels_from_a_header),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    free(g_cache);
    free(dir);
    return rc;
}
