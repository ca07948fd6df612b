/* Host ops on a GPU: examples/lltm_extension/lltm_host.c (checks, sizes,
 * launches) loaded with kernels/lltm.cu in one jitop_load, its forward and
 * backward compared with the shipped LLTM op (src/ops/lltm.c, the same
 * kernels) on random data, before and after a hot reload of the host half
 * and of the device half. Without a driver every test SKIPs. */
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
#include "load/load.h"

#define B 16
#define I 32
#define S 128
#define K (S + I)
#define P(x) ((void *)(uintptr_t)(x))

static const jitop__cuda_api *cu;

typedef struct bufs {
    CUdeviceptr in[7];   /* input, weights, bias, old_h, old_cell, grad_h, grad_cell */
    CUdeviceptr out[2][8]; /* per run: new_h, new_cell, saved, d_old_h, d_input, d_weights, d_bias, d_old_cell */
} bufs;

static const size_t in_n[7] = {B * I, 3 * S * K, 3 * S, B * S, B * S, B * S, B * S};
static size_t out_n[8];

static void bufs_init(bufs *b)
{
    size_t saved = jitop_lltm_saved_size(JITOP_FLOAT32, B, I, S) / 4 + 1;
    size_t n[8] = {B * S, B * S, saved, B * S, B * I, 3 * S * K, 3 * S, B * S};
    memcpy(out_n, n, sizeof n);
    for (int i = 0; i < 7; i++) {
        float *v = malloc(in_n[i] * sizeof *v);
        assert_non_null(v);
        jt_random_floats(v, in_n[i], -1.0f, 1.0f);
        if (i == 1)
            for (size_t k = 0; k < in_n[i]; k++)
                v[k] *= 2.0f / sqrtf((float)K);
        CU(cu->cuMemAlloc(&b->in[i], in_n[i] * 4));
        CU(cu->cuMemcpyHtoD(b->in[i], v, in_n[i] * 4));
        free(v);
    }
    for (int r = 0; r < 2; r++)
        for (int i = 0; i < 8; i++) {
            CU(cu->cuMemAlloc(&b->out[r][i], out_n[i] * 4));
            CU(cu->cuMemsetD8(b->out[r][i], 0xff, out_n[i] * 4)); /* NaN */
        }
}

static void bufs_free(bufs *b)
{
    for (int i = 0; i < 7; i++)
        CU(cu->cuMemFree(b->in[i]));
    for (int r = 0; r < 2; r++)
        for (int i = 0; i < 8; i++)
            CU(cu->cuMemFree(b->out[r][i]));
}

/* Run 0: the shipped op. */
static void run_shipped(jitop_ctx *ctx, bufs *b)
{
    CUdeviceptr *o = b->out[0];
    OK(jitop_lltm_forward(ctx, JITOP_FLOAT32, B, I, S, P(b->in[0]), P(b->in[1]), P(b->in[2]),
                          P(b->in[3]), P(b->in[4]), P(o[0]), P(o[1]), P(o[2]), NULL));
    OK(jitop_lltm_backward(ctx, JITOP_FLOAT32, B, I, S, P(b->in[5]), P(b->in[6]), P(o[2]),
                           P(b->in[1]), P(o[3]), P(o[4]), P(o[5]), P(o[6]), P(o[7]), NULL));
    CU(cu->cuCtxSynchronize());
}

/* Run 1: the host op, through jitop_call. */
static void run_host(jitop_module *m, bufs *b)
{
    jitop_fn *fwd, *bwd;
    OK(jitop_fn_get(m, "lltm_forward",
                    "int(ptr, ptr, ptr, ptr, ptr, ptr, ptr, ptr, int, int, int, ptr)", &fwd));
    OK(jitop_fn_get(m, "lltm_backward",
                    "int(ptr, ptr, ptr, ptr, ptr, ptr, ptr, ptr, ptr, int, int, int, ptr)", &bwd));
    CUdeviceptr *o = b->out[1];
    for (int i = 0; i < 8; i++)
        CU(cu->cuMemsetD8(o[i], 0xff, out_n[i] * 4));
    int nb = B, ni = I, ns = S, ret = -1;
    void *stream = NULL;
    void *fa[] = {&b->in[0], &b->in[1], &b->in[2], &b->in[3], &b->in[4], &o[0], &o[1], &o[2],
                  &nb, &ni, &ns, &stream};
    OK(jitop_call(fwd, fa, &ret));
    assert_int_equal(ret, JITOP_OK);
    void *ba[] = {&b->in[5], &b->in[6], &o[2], &b->in[1], &o[3], &o[4], &o[5], &o[6], &o[7],
                  &nb, &ni, &ns, &stream};
    OK(jitop_call(bwd, ba, &ret));
    assert_int_equal(ret, JITOP_OK);
    CU(cu->cuCtxSynchronize());
    /* Every output but the saved buffer against the shipped op's. */
    for (int i = 0; i < 8; i++) {
        if (i == 2)
            continue;
        float *x = malloc(out_n[i] * 4), *y = malloc(out_n[i] * 4);
        double *dx = malloc(out_n[i] * 8), *dy = malloc(out_n[i] * 8);
        assert_true(x && y && dx && dy);
        CU(cu->cuMemcpyDtoH(x, o[i], out_n[i] * 4));
        CU(cu->cuMemcpyDtoH(y, b->out[0][i], out_n[i] * 4));
        for (size_t k = 0; k < out_n[i]; k++)
            dx[k] = x[k], dy[k] = y[k];
        double e = jt_rel_error(dx, dy, out_n[i]);
        if (!(e < 1e-5))
            fail_msg("output %d: host op vs shipped op rel err %.3e", i, e);
        free(x), free(y), free(dx), free(dy);
    }
}

static int version(jitop_module *m)
{
    jitop_fn *f;
    int v = 0;
    OK(jitop_fn_get(m, "lltm_host_version", "int(void)", &f));
    OK(jitop_call(f, NULL, &v));
    return v;
}

static char *replace(const char *text, const char *from, const char *to)
{
    const char *at = strstr(text, from);
    assert_non_null(at);
    char *out = malloc(strlen(text) + strlen(to) + 1);
    assert_non_null(out);
    sprintf(out, "%.*s%s%s", (int)(at - text), text, to, at + strlen(from));
    return out;
}

static void test_host_op_launches_kernels_across_reloads(void **state)
{
    (void)state;
    JT_REQUIRE_GPU();
    char *dir = jt_tmpdir(), *cache = jt_path(dir, "cache");
    char *host_text = jt_read(JITOP_SOURCE_KERNEL_DIR "/../examples/lltm_extension/lltm_host.c");
    char *cu_text = jt_read(JITOP_SOURCE_KERNEL_DIR "/lltm.cu");
    char *host = jt_write(dir, "lltm_host.c", host_text);
    char *dev = jt_write(dir, "lltm.cu", cu_text);
    jitop_ctx *ctx = jt_ctx_driver(cache);
    OK(jitop_ctx_cuda(ctx, NULL, NULL));
    cu = jitop__cuda();
    const char *srcs[] = {host, dev};
    jitop_module *m = NULL;
    OK(jitop_load(ctx, "lltm_ext", srcs, 2, NULL, 0, &m));
    bufs b;
    bufs_init(&b);
    run_shipped(ctx, &b);
    run_host(m, &b);
    assert_int_equal(version(m), 1);

    /* The host half edited: a new object, the kernels as they were. */
    char host_key[33];
    memcpy(host_key, atomic_load(&m->host->cur)->key, 33);
    char *edited = replace(host_text, "return 1;", "return 2;");
    free(jt_write(dir, "lltm_host.c", edited));
    OK(jitop_module_reload(m));
    assert_int_equal(version(m), 2);
    assert_string_not_equal(atomic_load(&m->host->cur)->key, host_key);
    run_host(m, &b);

    /* The device half edited: new kernels, the host object as it was. */
    memcpy(host_key, atomic_load(&m->host->cur)->key, 33);
    uint64_t gen = jitop_module_generation(m);
    char *cu_edited = malloc(strlen(cu_text) + 64);
    assert_non_null(cu_edited);
    sprintf(cu_edited, "%s\n// edited by test_host_ops\n", cu_text);
    free(jt_write(dir, "lltm.cu", cu_edited));
    OK(jitop_module_reload(m));
    assert_true(jitop_module_generation(m) > gen);
    assert_string_equal(atomic_load(&m->host->cur)->key, host_key);
    assert_int_equal(version(m), 2);
    run_host(m, &b);

    bufs_free(&b);
    jitop_ctx_destroy(ctx);
    free(host_text), free(cu_text), free(edited), free(cu_edited);
    free(host), free(dev), free(cache), free(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_host_op_launches_kernels_across_reloads),
    };
    int failed = cmocka_run_group_tests_name("host_ops", tests, NULL, NULL);
    jt_cleanup();
    return failed;
}
