/* Loading and launching on a GPU: small kernels checked against a float64
 * CPU reference on fresh random data, argument checks, template instances,
 * module identity, several contexts, Hopper launch features, op listing,
 * occupancy, threads, and reload keeping handles valid. The driver is used
 * through jitop's own table (jitop__cuda), so without libcuda.so.1 this
 * program still starts and every test SKIPs. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "load/driver.h"
#include "jitop.h"
#include "load/load.h"
#include "gputest.h"
#include "testutil.h"

static const jitop__cuda_api *cu;

/* tests/gpu/kernels/<name>, from this file's own path (make runs from the
 * repository root, and so do the tests). */
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

/* A context on a fresh cache, its CUDA context current on this thread. */
static jitop_ctx *gpu_ctx(char **cache_out)
{
    char *dir = jt_tmpdir();
    char *cache = jt_path(dir, "cache");
    jitop_ctx *ctx = jt_ctx_driver(cache);
    OK(jitop_ctx_cuda(ctx, NULL, NULL));
    cu = jitop__cuda();
    assert_non_null(cu);
    free(dir);
    if (cache_out)
        *cache_out = cache;
    else
        free(cache);
    return ctx;
}

static CUdeviceptr dalloc(size_t bytes)
{
    CUdeviceptr p = 0;
    CU(cu->cuMemAlloc(&p, bytes));
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

/* Poisons device memory with NaN bytes (0xFF...) so that an output the
 * kernel did not write can never pass. */
static void poison(CUdeviceptr d, size_t bytes)
{
    CU(cu->cuMemsetD8(d, 0xFF, bytes));
}

static jitop_module *load_basic(jitop_ctx *ctx)
{
    char *basic = kernel_path("load_basic.cu");
    char *hopper = kernel_path("load_hopper.cu");
    /* The template lives in the second source: instances must be compiled
     * from the first unit that declares it. */
    const char *sources[] = {hopper, basic};
    jitop_module *m = NULL;
    OK(jitop_load(ctx, "basic", sources, 2, NULL, 0, &m));
    free(basic);
    free(hopper);
    return m;
}

static const jitop_dim3 one = {1, 1, 1};

static jitop_dim3 dim(unsigned x)
{
    jitop_dim3 d = {x, 1, 1};
    return d;
}

/* Runs axpby on fresh random data through op and compares with a float64
 * reference. Returns the relative error, or -1 with *why set when a call
 * failed. No cmocka assertion inside: worker threads call it too. */
static double axpby_error(jitop_op *op, CUstream stream, const char **why)
{
    int n = (1 << 18) + 37;
    float a = 0, b = 0;
    double err = -1;
    float *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y), *got = malloc(n * sizeof *got);
    double *want = malloc(n * sizeof *want), *gotd = malloc(n * sizeof *gotd);
    CUdeviceptr dx = 0, dy = 0;
    *why = "out of memory";
    if (!x || !y || !got || !want || !gotd)
        goto out;
    jt_random_floats(x, n, -2.0f, 2.0f);
    jt_random_floats(y, n, -2.0f, 2.0f);
    jt_random_floats(&a, 1, 0.5f, 3.0f);
    jt_random_floats(&b, 1, -3.0f, -0.5f);
    *why = "cuMemAlloc/cuMemcpyHtoD";
    if (cu->cuMemAlloc(&dx, n * sizeof *x) || cu->cuMemAlloc(&dy, n * sizeof *y) ||
        cu->cuMemcpyHtoD(dx, x, n * sizeof *x) || cu->cuMemcpyHtoD(dy, y, n * sizeof *y))
        goto out;
    void *args[] = {&n, &a, &dx, &b, &dy};
    size_t sizes[] = {sizeof n, sizeof a, sizeof dx, sizeof b, sizeof dy};
    /* A copy from pageable memory may return before its DMA is done, and a
     * non-blocking stream does not wait for the legacy stream: wait here. */
    *why = "cuStreamSynchronize(legacy stream)";
    if (stream && cu->cuStreamSynchronize(NULL))
        goto out;
    *why = "jitop_launch";
    if (jitop_launch(op, dim((n + 255) / 256), dim(256), 0, stream, args, sizes, 5) != JITOP_OK)
        goto out;
    *why = "synchronize/cuMemcpyDtoH";
    if ((stream ? cu->cuStreamSynchronize(stream) : cu->cuCtxSynchronize()) ||
        cu->cuMemcpyDtoH(got, dy, n * sizeof *got))
        goto out;
    for (int i = 0; i < n; i++) {
        want[i] = (double)a * x[i] + (double)b * y[i];
        gotd[i] = got[i];
    }
    err = jt_rel_error(gotd, want, n);
    *why = NULL;
out:
    if (dx && cu->cuMemFree(dx))
        err = -1;
    if (dy && cu->cuMemFree(dy))
        err = -1;
    free(x);
    free(y);
    free(got);
    free(want);
    free(gotd);
    return err;
}

static void check_axpby(jitop_op *op, CUstream stream)
{
    const char *why = NULL;
    double err = axpby_error(op, stream, &why);
    if (why)
        fail_msg("axpby: %s failed: %s", why, jitop_errmsg(NULL));
    if (!(err >= 0 && err < 1e-6))
        fail_msg("axpby: relative error %g", err);
}

static void test_launch_checked(void **state)
{
    (void)state;
    JT_REQUIRE_GPU();
    jitop_ctx *ctx = gpu_ctx(NULL);
    jitop_module *m = load_basic(ctx);
    assert_string_equal(jitop_module_name(m), "basic");
    assert_int_equal(jitop_module_generation(m), 0);
    jitop_op *op = NULL, *again = NULL;
    OK(jitop_op_get(m, "axpby", &op));
    OK(jitop_op_get(m, "axpby", &again));
    assert_ptr_equal(op, again);
    check_axpby(op, NULL);
    check_axpby(op, NULL); /* fresh data again */

    /* Loading the same sources again gives the loaded module. */
    assert_ptr_equal(load_basic(ctx), m);
    jitop_ctx_destroy(ctx);
}

static void test_argument_mismatch(void **state)
{
    (void)state;
    JT_REQUIRE_GPU();
    jitop_ctx *ctx = gpu_ctx(NULL);
    jitop_module *m = load_basic(ctx);
    jitop_op *op = NULL;
    OK(jitop_op_get(m, "axpby", &op));
    int n = 1024;
    float a = 2.0f;
    double wrong_b = 1.0;
    float *y = malloc(n * sizeof *y), *after = malloc(n * sizeof *after);
    jt_random_floats(y, n, 1.0f, 2.0f);
    CUdeviceptr dx = dalloc(n * 4), dy = dalloc(n * 4);
    upload(dx, y, n * 4);
    upload(dy, y, n * 4);

    /* Too few arguments. */
    void *args4[] = {&n, &a, &dx, &dy};
    size_t sizes4[] = {4, 4, 8, 8};
    assert_int_equal(jitop_launch(op, dim(4), dim(256), 0, NULL, args4, sizes4, 4), JITOP_EARGS);
    assert_non_null(strstr(jitop_errmsg(ctx), "axpby"));
    assert_non_null(strstr(jitop_errmsg(ctx), "5 parameters"));
    /* A double where the kernel takes a float: names parameter 3. */
    void *args5[] = {&n, &a, &dx, &wrong_b, &dy};
    size_t sizes5[] = {4, 4, 8, sizeof wrong_b, 8};
    assert_int_equal(jitop_launch(op, dim(4), dim(256), 0, NULL, args5, sizes5, 5), JITOP_EARGS);
    assert_non_null(strstr(jitop_errmsg(ctx), "parameter 3"));
    assert_non_null(strstr(jitop_errmsg(ctx), "8 bytes"));
    jitop_launch_config lc;
    memset(&lc, 0, sizeof lc);
    lc.grid = dim(4);
    lc.block = dim(256);
    assert_int_equal(jitop_launch_ex(op, &lc, args5, sizes5, 5), JITOP_EARGS);

    /* Nothing was launched: y is as uploaded. */
    download(after, dy, n * 4);
    assert_memory_equal(after, y, n * 4);
    CU(cu->cuMemFree(dx));
    CU(cu->cuMemFree(dy));
    free(y);
    free(after);
    jitop_ctx_destroy(ctx);
}

static void check_add_n_double(jitop_op *op, double add)
{
    int n = 5000;
    double *x = malloc(n * sizeof *x), *got = malloc(n * sizeof *got),
           *want = malloc(n * sizeof *want);
    jt_random_doubles(x, n, -10.0, 10.0);
    CUdeviceptr dx = dalloc(n * sizeof *x);
    upload(dx, x, n * sizeof *x);
    void *args[] = {&dx, &n};
    size_t sizes[] = {sizeof dx, sizeof n};
    OK(jitop_launch(op, dim((n + 127) / 128), dim(128), 0, NULL, args, sizes, 2));
    download(got, dx, n * sizeof *got);
    for (int i = 0; i < n; i++)
        want[i] = x[i] + add;
    assert_true(jt_rel_error(got, want, n) < 1e-15);
    CU(cu->cuMemFree(dx));
    free(x);
    free(got);
    free(want);
}

static void test_template_by_name(void **state)
{
    (void)state;
    JT_REQUIRE_GPU();
    jitop_ctx *ctx = gpu_ctx(NULL);
    jitop_module *m = load_basic(ctx);
    jitop_op *axpby = NULL, *d3 = NULL, *d5 = NULL, *again = NULL;
    OK(jitop_op_get(m, "axpby", &axpby));
    OK(jitop_op_get(m, "add_n<double, 3>", &d3));
    OK(jitop_op_get(m, "add_n<double, 5>", &d5));
    OK(jitop_op_get(m, "add_n<double, 3>", &again));
    assert_ptr_equal(d3, again);
    assert_ptr_not_equal(d3, d5);
    check_add_n_double(d3, 3.0);
    check_add_n_double(d5, 5.0);
    /* Handles taken before the instances were loaded still work. */
    check_axpby(axpby, NULL);

    jitop_op_info info;
    OK(jitop_op_info_get(d3, &info));
    assert_string_equal(info.name, "add_n<double, 3>");
    assert_non_null(strstr(info.lowered, "add_n")); /* the mangled symbol */
    assert_string_not_equal(info.lowered, info.name);
    assert_int_equal(info.nparams, 2);
    assert_int_equal(info.param_size[0], 8);
    assert_int_equal(info.param_size[1], 4);

    /* A template argument no source declares names no op: NVRTC's answer. */
    jitop_op *bad = NULL;
    assert_int_equal(jitop_op_get(m, "add_n<no_such_type, 1>", &bad), JITOP_ENOTFOUND);
    assert_null(bad);
    assert_non_null(strstr(jitop_errmsg(ctx), "identifier \"no_such_type\" is undefined"));
    jitop_ctx_destroy(ctx);
}

/* A module used first through a template instance: its source image is
 * loaded only when the extern "C" op is asked for, and both run correctly;
 * the op list then has both. */
static void test_template_first_then_extern_c(void **state)
{
    (void)state;
    JT_REQUIRE_GPU();
    jitop_ctx *ctx = gpu_ctx(NULL);
    jitop_module *m = load_basic(ctx);
    jitop_op *d7 = NULL, *axpby = NULL;
    OK(jitop_op_get(m, "add_n<double, 7>", &d7));
    check_add_n_double(d7, 7.0);
    OK(jitop_op_get(m, "axpby", &axpby));
    check_axpby(axpby, NULL);
    check_add_n_double(d7, 7.0);
    size_t n = 0;
    OK(jitop_module_ops(m, NULL, 0, &n));
    assert_true(n >= 2);
    jitop_ctx_destroy(ctx);
}

static void test_unknown_op_lists_ops(void **state)
{
    (void)state;
    JT_REQUIRE_GPU();
    jitop_ctx *ctx = gpu_ctx(NULL);
    jitop_module *m = load_basic(ctx);
    jitop_op *op = NULL;
    assert_int_equal(jitop_op_get(m, "axpbz", &op), JITOP_ENOTFOUND);
    assert_null(op);
    const char *msg = jitop_errmsg(ctx);
    assert_non_null(strstr(msg, "axpbz"));
    assert_non_null(strstr(msg, "axpby"));
    assert_non_null(strstr(msg, "smem_reverse"));
    assert_non_null(strstr(msg, "coop_sum"));
    jitop_ctx_destroy(ctx);
}

/* A name that is in the source but is no kernel fails once through NVRTC,
 * then from memory with the same message (no compile per jitop_op_get),
 * until a reload swaps new code in. The file is edited WITHOUT a reload in
 * between to see that: an op_get that compiled again would now succeed. */
static int run_version(jitop_op *op, int nargs, int *status);

static void test_failed_name_remembered_until_reload(void **state)
{
    (void)state;
    JT_REQUIRE_GPU();
    jitop_ctx *ctx = gpu_ctx(NULL);
    char *dir = jt_tmpdir();
    char *src = jt_write(dir, "f.cu",
                         "__device__ int helper(int x) { return x + 1; }\n"
                         "extern \"C\" __global__ void version(int *out) { *out = helper(0); }\n");
    const char *sources[] = {src};
    jitop_module *m = NULL;
    OK(jitop_load(ctx, "failed_names", sources, 1, NULL, 0, &m));
    jitop_op *op = NULL;
    assert_int_equal(jitop_op_get(m, "helper", &op), JITOP_ENOTFOUND);
    assert_null(op);
    char *first = strdup(jitop_errmsg(ctx));
    assert_non_null(first);
    assert_non_null(strstr(first, "helper"));
    assert_non_null(strstr(first, "version"));

    free(jt_write_rename(dir, "f.cu",
                         "__global__ void helper(int *out) { *out = 7; }\n"
                         "extern \"C\" __global__ void version(int *out) { *out = 2; }\n"));
    assert_int_equal(jitop_op_get(m, "helper", &op), JITOP_ENOTFOUND);
    assert_null(op);
    assert_string_equal(jitop_errmsg(ctx), first);

    OK(jitop_module_reload(m));
    assert_int_equal(jitop_module_generation(m), 1);
    OK(jitop_op_get(m, "helper", &op));
    int st = 0;
    assert_int_equal(run_version(op, 1, &st), 7);
    free(first);
    jitop_ctx_destroy(ctx);
    free(src);
    free(dir);
}

/* One kernel that writes a constant: which module a launch ran. */
static int run_which(jitop_module *m)
{
    jitop_op *op = NULL;
    OK(jitop_op_get(m, "which", &op));
    CUdeviceptr d = dalloc(4);
    poison(d, 4);
    void *args[] = {&d};
    size_t sizes[] = {sizeof d};
    OK(jitop_launch(op, one, one, 0, NULL, args, sizes, 1));
    int v = 0;
    download(&v, d, 4);
    CU(cu->cuMemFree(d));
    return v;
}

static void test_same_name_different_sources(void **state)
{
    (void)state;
    JT_REQUIRE_GPU();
    jitop_ctx *ctx = gpu_ctx(NULL);
    const char *one_src = "extern \"C\" __global__ void which(int *o) { *o = 101; }\n";
    const char *two_src = "extern \"C\" __global__ void which(int *o) { *o = 202; }\n";
    jitop_module *a = NULL, *b = NULL, *a2 = NULL, *other_name = NULL;
    OK(jitop_load_inline(ctx, "samename", one_src, NULL, 0, &a));
    OK(jitop_load_inline(ctx, "samename", two_src, NULL, 0, &b));
    assert_ptr_not_equal(a, b);
    assert_int_equal(run_which(a), 101);
    assert_int_equal(run_which(b), 202);
    OK(jitop_load_inline(ctx, "samename", one_src, NULL, 0, &a2));
    assert_ptr_equal(a, a2);
    /* Different options: a different module. */
    const char *opts[] = {"-DUNUSED=1"};
    OK(jitop_load_inline(ctx, "samename", one_src, opts, 1, &other_name));
    assert_ptr_not_equal(a, other_name);
    assert_int_equal(run_which(other_name), 101);
    jitop_ctx_destroy(ctx);
}

static void test_two_contexts(void **state)
{
    (void)state;
    JT_REQUIRE_GPU();
    char *cache = NULL;
    jitop_ctx *c1 = gpu_ctx(&cache);
    jitop_ctx *c2 = jt_ctx_driver(cache); /* the same cache: the second load is a hit */
    jitop_module *m1 = load_basic(c1), *m2 = load_basic(c2);
    assert_ptr_not_equal(m1, m2);
    jitop_op *o1 = NULL, *o2 = NULL;
    OK(jitop_op_get(m1, "axpby", &o1));
    OK(jitop_op_get(m2, "axpby", &o2));
    assert_ptr_not_equal(o1, o2);
    check_axpby(o1, NULL);
    check_axpby(o2, NULL);
    void *cu1 = NULL, *cu2 = NULL;
    OK(jitop_ctx_cuda(c1, &cu1, NULL));
    OK(jitop_ctx_cuda(c2, &cu2, NULL));
    assert_ptr_equal(cu1, cu2); /* both use device 0's primary context */
    /* Destroying one leaves the other working (the primary context is
     * retained once per jitop context). */
    jitop_ctx_destroy(c1);
    OK(jitop_ctx_cuda(c2, NULL, NULL));
    check_axpby(o2, NULL);
    jitop_ctx_destroy(c2);
    free(cache);
}

/* cfg.cu_context: jitop launches in the application's context and never
 * releases it. */
static void test_application_context(void **state)
{
    (void)state;
    JT_REQUIRE_GPU();
    char *cache = NULL;
    jitop_ctx *owner = gpu_ctx(&cache);
    void *app_cu = NULL;
    int app_dev = -1;
    OK(jitop_ctx_cuda(owner, &app_cu, &app_dev));
    jitop_config cfg;
    jitop_config_init(&cfg);
    cfg.cache_dir = cache;
    cfg.cu_context = app_cu;
    jitop_ctx *ctx = NULL;
    OK(jitop_ctx_create(&cfg, &ctx));
    void *got_cu = NULL;
    int got_dev = -1;
    OK(jitop_ctx_cuda(ctx, &got_cu, &got_dev));
    assert_ptr_equal(got_cu, app_cu);
    assert_int_equal(got_dev, app_dev);
    jitop_module *m = load_basic(ctx);
    jitop_op *op = NULL;
    OK(jitop_op_get(m, "axpby", &op));
    check_axpby(op, NULL);
    jitop_ctx_destroy(ctx); /* must not release the application's context */
    OK(jitop_ctx_cuda(owner, NULL, NULL));
    jitop_module *m2 = load_basic(owner);
    OK(jitop_op_get(m2, "axpby", &op));
    check_axpby(op, NULL);
    jitop_ctx_destroy(owner);
    free(cache);
}

static void test_large_dynamic_shared(void **state)
{
    (void)state;
    JT_REQUIRE_GPU();
    jitop_ctx *ctx = gpu_ctx(NULL);
    jitop_module *m = load_basic(ctx);
    jitop_op *op = NULL;
    OK(jitop_op_get(m, "smem_reverse", &op));
    int n = 25000; /* 100000 bytes of shared memory: over 48 KiB */
    size_t bytes = n * sizeof(float);
    float *in = malloc(bytes), *out = malloc(bytes);
    CUdeviceptr din = dalloc(bytes), dout = dalloc(bytes);
    for (int round = 0; round < 2; round++) { /* the limit is raised once, used twice */
        jt_random_floats(in, n, -1.0f, 1.0f);
        upload(din, in, bytes);
        poison(dout, bytes);
        void *args[] = {&din, &dout, &n};
        size_t sizes[] = {8, 8, 4};
        OK(jitop_launch(op, one, dim(1024), bytes, NULL, args, sizes, 3));
        download(out, dout, bytes);
        for (int i = 0; i < n; i++)
            if (out[i] != in[n - 1 - i])
                fail_msg("smem_reverse: out[%d] = %g, want %g", i, out[i], in[n - 1 - i]);
    }
    /* More than any block can have: a clear error naming the op. */
    void *args[] = {&din, &dout, &n};
    assert_int_equal(jitop_launch(op, one, dim(1024), 1u << 20, NULL, args, NULL, 3), JITOP_ECUDA);
    assert_non_null(strstr(jitop_errmsg(ctx), "smem_reverse"));
    /* Sizes the driver's int and unsigned cannot hold are refused before any
     * sum with the static part can wrap (SIZE_MAX) or a cast truncate them
     * to a size that would launch (2^32 + 16 KiB). */
    const size_t huge[] = {(size_t)INT_MAX + 1, ((size_t)1 << 32) + 16384, SIZE_MAX};
    for (size_t i = 0; i < sizeof huge / sizeof *huge; i++) {
        assert_int_equal(jitop_launch(op, one, dim(1024), huge[i], NULL, args, NULL, 3),
                         JITOP_EINVAL);
        assert_non_null(strstr(jitop_errmsg(ctx), "smem_reverse"));
        jitop_launch_config lc;
        memset(&lc, 0, sizeof lc);
        lc.grid = one;
        lc.block = dim(1024);
        lc.shared_bytes = huge[i];
        assert_int_equal(jitop_launch_ex(op, &lc, args, NULL, 3), JITOP_EINVAL);
        assert_non_null(strstr(jitop_errmsg(ctx), "smem_reverse"));
    }
    CU(cu->cuMemFree(din));
    CU(cu->cuMemFree(dout));
    free(in);
    free(out);
    jitop_ctx_destroy(ctx);
}

static void test_cluster_launch(void **state)
{
    (void)state;
    JT_REQUIRE_GPU();
    jitop_ctx *ctx = gpu_ctx(NULL);
    jitop_module *m = load_basic(ctx);
    jitop_op *op = NULL;
    OK(jitop_op_get(m, "cluster_ranks", &op));
    enum { blocks = 16 };
    int out[blocks];
    CUdeviceptr d = dalloc(sizeof out);
    for (unsigned cluster = 1; cluster <= 4; cluster *= 2) {
        poison(d, sizeof out);
        jitop_launch_config lc;
        memset(&lc, 0, sizeof lc);
        lc.grid = dim(blocks);
        lc.block = dim(64);
        lc.cluster = dim(cluster);
        void *args[] = {&d};
        size_t sizes[] = {8};
        OK(jitop_launch_ex(op, &lc, args, sizes, 1));
        download(out, d, sizeof out);
        for (int b = 0; b < blocks; b++)
            assert_int_equal(out[b], (int)((b % cluster) * 1000 + cluster));
    }

    /* Clusters that fit at once: with a block that takes most of an SM's
     * shared memory, at most one block per SM, so no more clusters of 4
     * than SMs / 4, and fewer than clusters of 1 of small blocks; and a
     * grid of that many clusters runs. */
    int dev = 0, sms = 0, fit4 = 0, fit1 = 0;
    OK(jitop_ctx_cuda(ctx, NULL, &dev));
    CU(cu->cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev));
    const size_t big = 160 * 1024;
    OK(jitop_occupancy_clusters(op, 64, big, 4, &fit4));
    OK(jitop_occupancy_clusters(op, 64, 0, 1, &fit1));
    assert_true(fit4 >= 1 && fit4 * 4 <= sms);
    assert_true(fit1 > fit4);
    int *all = malloc((size_t)fit4 * 4 * sizeof *all);
    assert_non_null(all);
    CUdeviceptr dall = dalloc((size_t)fit4 * 4 * sizeof *all);
    poison(dall, (size_t)fit4 * 4 * sizeof *all);
    jitop_launch_config lc;
    memset(&lc, 0, sizeof lc);
    lc.grid = dim((unsigned)fit4 * 4);
    lc.block = dim(64);
    lc.cluster = dim(4);
    lc.shared_bytes = big;
    void *args[] = {&dall};
    OK(jitop_launch_ex(op, &lc, args, NULL, 1));
    download(all, dall, (size_t)fit4 * 4 * sizeof *all);
    for (int b = 0; b < fit4 * 4; b++)
        assert_int_equal(all[b], (b % 4) * 1000 + 4);
    free(all);
    CU(cu->cuMemFree(dall));
    CU(cu->cuMemFree(d));
    jitop_ctx_destroy(ctx);
}

static void test_cooperative_launch(void **state)
{
    (void)state;
    JT_REQUIRE_GPU();
    jitop_ctx *ctx = gpu_ctx(NULL);
    jitop_module *m = load_basic(ctx);
    jitop_op *op = NULL;
    OK(jitop_op_get(m, "coop_sum", &op));
    int dev = 0, sms = 0;
    OK(jitop_ctx_cuda(ctx, NULL, &dev));
    CU(cu->cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev));
    int n = 1 << 20;
    float *x = malloc(n * sizeof *x);
    jt_random_floats(x, n, 0.0f, 1.0f);
    double want = 0;
    for (int i = 0; i < n; i++)
        want += x[i];
    unsigned grid = (unsigned)sms; /* one 256-thread block per SM is always resident */
    CUdeviceptr dx = dalloc(n * 4), dpart = dalloc(grid * 4), dout = dalloc(4),
                dcount = dalloc(4);
    upload(dx, x, n * 4);
    poison(dout, 4);
    CU(cu->cuMemsetD8(dcount, 0, 4));
    void *args[] = {&dx, &n, &dpart, &dout, &dcount};
    size_t sizes[] = {8, 4, 8, 8, 8};
    jitop_launch_config lc;
    memset(&lc, 0, sizeof lc);
    lc.grid = dim(grid);
    lc.block = dim(256);
    lc.cooperative = 1;
    OK(jitop_launch_ex(op, &lc, args, sizes, 5));
    float got = 0;
    download(&got, dout, 4);
    if (!(fabs(got - want) / want < 1e-5))
        fail_msg("coop_sum: %g, want %g", got, want);
    /* A cooperative grid larger than the device can hold at once is refused
     * by the driver, and the message says which op. */
    lc.grid = dim(grid * 64); /* 64 x 256 threads per SM: more than any SM holds */
    assert_int_equal(jitop_launch_ex(op, &lc, args, sizes, 5), JITOP_ECUDA);
    assert_non_null(strstr(jitop_errmsg(ctx), "coop_sum"));
    assert_non_null(strstr(jitop_errmsg(ctx), "CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE"));
    CU(cu->cuMemFree(dx));
    CU(cu->cuMemFree(dpart));
    CU(cu->cuMemFree(dout));
    CU(cu->cuMemFree(dcount));
    free(x);
    jitop_ctx_destroy(ctx);
}

/* Programmatic dependent launch: each consumer, launched with the attribute
 * right behind a producer that releases it at once, still reads what that
 * producer wrote (its griddepcontrol.wait holds it until the producer's grid
 * is done), round after round with new values. */
static void test_programmatic_launch(void **state)
{
    (void)state;
    JT_REQUIRE_GPU();
    jitop_ctx *ctx = gpu_ctx(NULL);
    jitop_module *m = load_basic(ctx);
    jitop_op *produce = NULL, *consume = NULL;
    OK(jitop_op_get(m, "pdl_produce", &produce));
    OK(jitop_op_get(m, "pdl_consume", &consume));
    int n = 1 << 22;
    CUdeviceptr dmid = dalloc((size_t)n * 4), dout = dalloc((size_t)n * 4);
    poison(dmid, (size_t)n * 4);
    poison(dout, (size_t)n * 4);
    float *out = malloc((size_t)n * sizeof *out);
    jitop_launch_config lc;
    memset(&lc, 0, sizeof lc);
    lc.grid = dim(264);
    lc.block = dim(256);
    lc.programmatic = 1;
    for (int round = 0; round < 8; round++) {
        float v = (float)(round * 4096 + 7);
        void *pargs[] = {&dmid, &n, &v};
        void *cargs[] = {&dmid, &dout, &n};
        size_t psizes[] = {8, 4, 4}, csizes[] = {8, 8, 4};
        OK(jitop_launch_ex(produce, &lc, pargs, psizes, 3));
        OK(jitop_launch_ex(consume, &lc, cargs, csizes, 3));
        download(out, dout, (size_t)n * 4);
        for (int i = 0; i < n; i++)
            if (out[i] != v + (float)(i & 1023) + 1.0f)
                fail_msg("round %d: out[%d] = %g, want %g", round, i, out[i],
                         v + (float)(i & 1023) + 1.0f);
    }
    free(out);
    CU(cu->cuMemFree(dmid));
    CU(cu->cuMemFree(dout));
    jitop_ctx_destroy(ctx);
}

static const jitop_op_info *find_info(const jitop_op_info *v, size_t n, const char *name)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(v[i].name, name) == 0)
            return &v[i];
    fail_msg("op %s not listed", name);
    return NULL;
}

static void test_listing_and_occupancy(void **state)
{
    (void)state;
    JT_REQUIRE_GPU();
    jitop_ctx *ctx = gpu_ctx(NULL);
    jitop_module *m = load_basic(ctx);
    size_t count = 0;
    OK(jitop_module_ops(m, NULL, 0, &count));
    assert_int_equal(count, 6); /* the template has no instance yet */
    jitop_op *inst = NULL;
    OK(jitop_op_get(m, "add_n<float, 2>", &inst));
    OK(jitop_module_ops(m, NULL, 0, &count));
    assert_int_equal(count, 7);
    jitop_op_info infos[8];
    size_t got = 0;
    OK(jitop_module_ops(m, infos, 8, &got));
    assert_int_equal(got, 7);
    const jitop_op_info *ax = find_info(infos, got, "axpby");
    assert_int_equal(ax->nparams, 5);
    size_t want_size[] = {4, 4, 8, 4, 8}, want_off[] = {0, 4, 8, 16, 24};
    for (int i = 0; i < 5; i++) {
        assert_int_equal(ax->param_size[i], want_size[i]);
        assert_int_equal(ax->param_offset[i], want_off[i]);
    }
    assert_true(ax->max_threads_per_block >= 256);
    assert_true(ax->num_regs > 0);
    const jitop_op_info *cr = find_info(infos, got, "coop_sum");
    assert_int_equal(cr->static_shared_bytes, 256 * sizeof(float));
    const jitop_op_info *ti = find_info(infos, got, "add_n<float, 2>");
    assert_int_equal(ti->nparams, 2);
    assert_string_not_equal(ti->lowered, ti->name);
    /* cap smaller than the count: fills cap, reports all. */
    OK(jitop_module_ops(m, infos, 2, &got));
    assert_int_equal(got, 7);

    jitop_op *op = NULL;
    OK(jitop_op_get(m, "axpby", &op));
    int block = 0, grid = 0;
    OK(jitop_occupancy(op, 0, &block, &grid));
    assert_true(block >= 32 && block <= 1024 && block % 32 == 0);
    assert_true(grid > 0);
    OK(jitop_op_get(m, "smem_reverse", &op));
    int block_big = 0, grid_big = 0;
    OK(jitop_occupancy(op, 48 * 1024, &block_big, &grid_big));
    assert_true(block_big > 0 && grid_big > 0);
    jitop_ctx_destroy(ctx);
}

typedef struct worker {
    jitop_ctx *ctx;
    const char *const *sources;
    jitop_op *axpby, *inst;
    jitop_module *m;
    const char *failed; /* what failed, NULL when all went well */
    double max_err;
} worker;

/* Every thread loads, gets (an extern "C" op and a template instance that
 * none has compiled yet) and launches on its own stream. cmocka asserts
 * must stay on the main thread, so failures are recorded. */
static void *worker_main(void *arg)
{
    worker *w = arg;
    CUstream s = NULL;
    if (jitop_load(w->ctx, "basic", w->sources, 2, NULL, 0, &w->m) != JITOP_OK) {
        w->failed = "jitop_load";
        return NULL;
    }
    if (jitop_op_get(w->m, "axpby", &w->axpby) != JITOP_OK ||
        jitop_op_get(w->m, "add_n<float, 9>", &w->inst) != JITOP_OK) {
        w->failed = "jitop_op_get";
        return NULL;
    }
    if (jitop_ctx_cuda(w->ctx, NULL, NULL) != JITOP_OK ||
        cu->cuStreamCreate(&s, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS) {
        w->failed = "jitop_ctx_cuda/cuStreamCreate";
        return NULL;
    }
    for (int i = 0; i < 3 && !w->failed; i++) {
        double err = axpby_error(w->axpby, s, &w->failed);
        if (err > w->max_err)
            w->max_err = err;
    }
    if (cu->cuStreamDestroy(s) != CUDA_SUCCESS && !w->failed)
        w->failed = "cuStreamDestroy";
    return NULL;
}

static void test_threads(void **state)
{
    (void)state;
    JT_REQUIRE_GPU();
    jitop_ctx *ctx = gpu_ctx(NULL);
    enum { nthreads = 8 };
    pthread_t th[nthreads];
    worker w[nthreads];
    memset(w, 0, sizeof w);
    char *basic = kernel_path("load_basic.cu");
    char *hopper = kernel_path("load_hopper.cu");
    const char *sources[] = {hopper, basic};
    for (int i = 0; i < nthreads; i++) {
        w[i].ctx = ctx;
        w[i].sources = sources;
        assert_int_equal(pthread_create(&th[i], NULL, worker_main, &w[i]), 0);
    }
    for (int i = 0; i < nthreads; i++)
        assert_int_equal(pthread_join(th[i], NULL), 0);
    for (int i = 0; i < nthreads; i++) {
        if (w[i].failed)
            fail_msg("thread %d: %s failed", i, w[i].failed);
        if (!(w[i].max_err < 1e-6))
            fail_msg("thread %d: axpby relative error %g", i, w[i].max_err);
    }
    assert_ptr_equal(w[0].m, load_basic(ctx));
    for (int i = 1; i < nthreads; i++) {
        assert_ptr_equal(w[i].m, w[0].m);
        assert_ptr_equal(w[i].axpby, w[0].axpby);
        assert_ptr_equal(w[i].inst, w[0].inst);
    }
    free(basic);
    free(hopper);
    jitop_ctx_destroy(ctx);
}

/* Launches version(out[, add]) and returns *out. */
static int run_version(jitop_op *op, int nargs, int *status)
{
    CUdeviceptr d = dalloc(4);
    poison(d, 4);
    int add = 1000;
    void *args[] = {&d, &add};
    size_t sizes[] = {sizeof d, sizeof add};
    int v = -1;
    *status = jitop_launch(op, one, one, 0, NULL, args, sizes, (size_t)nargs);
    if (*status == JITOP_OK)
        download(&v, d, 4);
    CU(cu->cuMemFree(d));
    return v;
}

static void test_reload_keeps_handles(void **state)
{
    (void)state;
    JT_REQUIRE_GPU();
    jitop_ctx *ctx = gpu_ctx(NULL);
    char *dir = jt_tmpdir();
    char *src = jt_write(dir, "v.cu",
                         "extern \"C\" __global__ void version(int *out) { *out = 1; }\n"
                         "template <int N> __global__ void tval(int *out) { *out = N + 10; }\n");
    const char *sources[] = {src};
    jitop_module *m = NULL;
    OK(jitop_load(ctx, "reload", sources, 1, NULL, 0, &m));
    jitop_op *op = NULL, *inst = NULL;
    int st = 0;
    OK(jitop_op_get(m, "version", &op));
    OK(jitop_op_get(m, "tval<5>", &inst));
    assert_int_equal(run_version(op, 1, &st), 1);
    assert_int_equal(run_version(inst, 1, &st), 15);

    /* Edit (the way editors save) and reload: same handles, new code. */
    free(jt_write_rename(dir, "v.cu",
                         "extern \"C\" __global__ void version(int *out) { *out = 2; }\n"
                         "template <int N> __global__ void tval(int *out) { *out = N + 20; }\n"));
    OK(jitop_module_reload(m));
    assert_int_equal(jitop_module_generation(m), 1);
    assert_int_equal(run_version(op, 1, &st), 2);
    assert_int_equal(run_version(inst, 1, &st), 25);
    jitop_op *again = NULL;
    OK(jitop_op_get(m, "version", &again));
    assert_ptr_equal(again, op);

    /* A reload with nothing changed keeps the generation. */
    OK(jitop_module_reload(m));
    assert_int_equal(jitop_module_generation(m), 1);

    /* The signature changes: the old argument layout is refused. */
    free(jt_write_rename(dir, "v.cu",
                         "extern \"C\" __global__ void version(int *out, int add) "
                         "{ *out = 3 + add; }\n"
                         "template <int N> __global__ void tval(int *out) { *out = N + 30; }\n"));
    OK(jitop_module_reload(m));
    assert_int_equal(jitop_module_generation(m), 2);
    run_version(op, 1, &st);
    assert_int_equal(st, JITOP_EARGS);
    assert_int_equal(run_version(op, 2, &st), 1003);

    /* jitop_load of the edited sources reloads in place, too. */
    free(jt_write_rename(dir, "v.cu",
                         "extern \"C\" __global__ void version(int *out, int add) "
                         "{ *out = 4 + add; }\n"
                         "template <int N> __global__ void tval(int *out) { *out = N + 40; }\n"));
    jitop_module *same = NULL;
    OK(jitop_load(ctx, "reload", sources, 1, NULL, 0, &same));
    assert_ptr_equal(same, m);
    assert_int_equal(jitop_module_generation(m), 3);
    assert_int_equal(run_version(op, 2, &st), 1004);
    assert_int_equal(run_version(inst, 1, &st), 45);

    /* A broken edit keeps the old code. */
    free(jt_write_rename(dir, "v.cu", "extern \"C\" __global__ void version(int *out) { oops }\n"));
    assert_int_equal(jitop_module_reload(m), JITOP_ECOMPILE);
    assert_int_equal(jitop_module_generation(m), 3);
    assert_int_equal(run_version(op, 2, &st), 1004);

    /* The kernel disappears: launching the old handle is JITOP_ESTALE. */
    free(jt_write_rename(dir, "v.cu",
                         "extern \"C\" __global__ void renamed(int *out) { *out = 5; }\n"
                         "template <int N> __global__ void tval(int *out) { *out = N + 50; }\n"));
    OK(jitop_module_reload(m));
    run_version(op, 2, &st);
    assert_int_equal(st, JITOP_ESTALE);
    assert_non_null(strstr(jitop_errmsg(ctx), "version"));
    assert_int_equal(run_version(inst, 1, &st), 55);
    jitop_op_info info;
    assert_int_equal(jitop_op_info_get(op, &info), JITOP_ESTALE);

    /* The files the module was built from, for the watcher. */
    jitop__strv files = {0};
    OK(jitop__module_files(m, &files));
    assert_true(files.n >= 1);
    assert_string_equal(files.v[0], src);
    jitop__strv_free(&files);
    jitop_ctx_destroy(ctx);
    free(src);
    free(dir);
}


typedef struct reload_worker {
    jitop_op *op;
    jitop_ctx *ctx;
    atomic_int *stop;
    int launches, last, went_back;
    const char *failed;
} reload_worker;

/* Launches version(out) until told to stop; every value read must be a
 * version, never older than the one this thread saw before. */
static void *reload_worker_main(void *arg)
{
    reload_worker *w = arg;
    CUstream s = NULL;
    CUdeviceptr d = 0;
    if (jitop_ctx_cuda(w->ctx, NULL, NULL) != JITOP_OK ||
        cu->cuStreamCreate(&s, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS ||
        cu->cuMemAlloc(&d, 4) != CUDA_SUCCESS) {
        w->failed = "setup";
        return NULL;
    }
    void *args[] = {&d};
    size_t sizes[] = {sizeof d};
    while (!atomic_load(w->stop) && !w->failed) {
        int v = -1;
        if (jitop_launch(w->op, one, one, 0, s, args, sizes, 1) != JITOP_OK)
            w->failed = "jitop_launch";
        else if (cu->cuStreamSynchronize(s) != CUDA_SUCCESS ||
                 cu->cuMemcpyDtoH(&v, d, 4) != CUDA_SUCCESS)
            w->failed = "cuStreamSynchronize/cuMemcpyDtoH";
        else if (v < w->last || v < 1)
            w->went_back++;
        w->last = v > w->last ? v : w->last;
        w->launches++;
    }
    if ((cu->cuMemFree(d) != CUDA_SUCCESS || cu->cuStreamDestroy(s) != CUDA_SUCCESS) && !w->failed)
        w->failed = "cleanup";
    return NULL;
}

/* Reloads while four threads launch the op: no launch fails, none runs an
 * unloaded image, and each thread sees the versions in order. */
static void test_reload_while_launching(void **state)
{
    (void)state;
    JT_REQUIRE_GPU();
    jitop_ctx *ctx = gpu_ctx(NULL);
    char *dir = jt_tmpdir();
    char *src =
        jt_write(dir, "v.cu", "extern \"C\" __global__ void version(int *out) { *out = 1; }\n");
    const char *sources[] = {src};
    jitop_module *m = NULL;
    jitop_op *op = NULL;
    OK(jitop_load(ctx, "hammered", sources, 1, NULL, 0, &m));
    OK(jitop_op_get(m, "version", &op));
    enum { nthreads = 4, edits = 10 };
    atomic_int stop;
    atomic_init(&stop, 0);
    reload_worker w[nthreads];
    pthread_t th[nthreads];
    memset(w, 0, sizeof w);
    for (int i = 0; i < nthreads; i++) {
        w[i].op = op;
        w[i].ctx = ctx;
        w[i].stop = &stop;
        assert_int_equal(pthread_create(&th[i], NULL, reload_worker_main, &w[i]), 0);
    }
    for (int v = 2; v <= edits + 1; v++) {
        char text[128];
        snprintf(text, sizeof text,
                 "extern \"C\" __global__ void version(int *out) { *out = %d; }\n", v);
        free(jt_write_rename(dir, "v.cu", text));
        OK(jitop_module_reload(m));
        assert_int_equal(jitop_module_generation(m), (uint64_t)(v - 1));
    }
    atomic_store(&stop, 1);
    for (int i = 0; i < nthreads; i++)
        assert_int_equal(pthread_join(th[i], NULL), 0);
    for (int i = 0; i < nthreads; i++) {
        if (w[i].failed)
            fail_msg("thread %d: %s failed: %s", i, w[i].failed, jitop_errmsg(NULL));
        assert_int_equal(w[i].went_back, 0);
        assert_true(w[i].launches > 0);
        print_message("thread %d: %d launches, last version %d\n", i, w[i].launches, w[i].last);
    }
    /* After the last reload every thread's next launch runs the last edit. */
    int st = 0;
    assert_int_equal(run_version(op, 1, &st), edits + 1);
    jitop_ctx_destroy(ctx);
    free(src);
    free(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_launch_checked),
        cmocka_unit_test(test_argument_mismatch),
        cmocka_unit_test(test_template_by_name),
        cmocka_unit_test(test_template_first_then_extern_c),
        cmocka_unit_test(test_unknown_op_lists_ops),
        cmocka_unit_test(test_failed_name_remembered_until_reload),
        cmocka_unit_test(test_same_name_different_sources),
        cmocka_unit_test(test_two_contexts),
        cmocka_unit_test(test_application_context),
        cmocka_unit_test(test_large_dynamic_shared),
        cmocka_unit_test(test_cluster_launch),
        cmocka_unit_test(test_cooperative_launch),
        cmocka_unit_test(test_programmatic_launch),
        cmocka_unit_test(test_listing_and_occupancy),
        cmocka_unit_test(test_threads),
        cmocka_unit_test(test_reload_keeps_handles),
        cmocka_unit_test(test_reload_while_launching),
    };
    int failed = cmocka_run_group_tests_name("load", tests, NULL, NULL);
    jt_cleanup();
    return failed;
}
