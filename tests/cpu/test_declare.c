/* Template instances declared at load (jitop_load's -instance=NAME): the
 * source's first compile has them in (the fold rule, build/build.h), so a
 * cold load + get of a declared instance is one NVRTC program; the shipped
 * ops declare what a call of theirs will ask. Real NVRTC, compiles counted
 * through jitop__before_compile_hook; loads on the fake CUDA driver of
 * tests/fakecuda; explain through the CLI. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fakecuda.h"
#include "jitop.h"
#include "jitop_ops.h"
#include "build/build.h"
#include "load/load.h"
#include "testutil.h"

static fake_cuda_stats_fn g_fake_stats;
static int g_compiles;

static void count_compile(const char *source)
{
    (void)source;
    g_compiles++;
}

typedef struct setup {
    char *dir, *cache, *src;
    char arch[32];
} setup;

static void setup_open(setup *s)
{
    memset(s, 0, sizeof *s);
    s->dir = jt_tmpdir();
    s->cache = jt_path(s->dir, "cache");
    s->src = jt_write_rename(s->dir, "k.cu",
                             "extern \"C\" __global__ void k(int *out) { *out = 1; }\n"
                             "template <int N> __global__ void t(int *out) { *out = N; }\n");
    jitop_ctx *ctx = jt_ctx_driver(s->cache);
    const char *arch = NULL;
    assert_int_equal(jitop_ctx_arch(ctx, &arch), JITOP_OK);
    snprintf(s->arch, sizeof s->arch, "%s", arch);
    jitop_ctx_destroy(ctx);
    g_compiles = 0;
    jitop__before_compile_hook = count_compile;
}

static void setup_close(setup *s)
{
    jitop__before_compile_hook = NULL;
    jt_rm_rf(s->dir);
    free(s->dir);
    free(s->cache);
    free(s->src);
}

static jitop__image *image_of(jitop_op *op)
{
    jitop__binding *b = atomic_load(&op->cur);
    assert_non_null(b->image);
    return b->image;
}

static void launch(jitop_op *op)
{
    const jitop_dim3 one = {1, 1, 1};
    int out = 0, *pout = &out;
    void *args[] = {&pout};
    assert_int_equal(jitop_launch(op, one, one, 0, NULL, args, NULL, 1), JITOP_OK);
}

/* Cold: one compile for the load and both declared instances (spelled any
 * way: canonical names), from the source's one image; the module is the
 * one a load without the option names; a new process compiles nothing;
 * explain says the instances are in the key. */
static void test_declared_cold_is_one_compile(void **state)
{
    (void)state;
    setup s;
    setup_open(&s);
    jitop_ctx *ctx = jt_ctx_driver(s.cache);
    jitop_module *m = NULL, *again = NULL;
    jitop_op *a = NULL, *b = NULL, *k = NULL;
    const char *sources[] = {s.src};
    const char *opts[] = {"-instance=t< 3 >", "-DUNUSED=1", "-instance=t<4>", "-instance=t<3>"};
    assert_int_equal(jitop_load(ctx, "decl", sources, 1, opts, 4, &m), JITOP_OK);
    assert_int_equal(g_compiles, 1);
    assert_int_equal(m->options.n, 1); /* the -instance= options are no compiler option */
    assert_int_equal(jitop_op_get(m, "t<3>", &a), JITOP_OK);
    assert_int_equal(jitop_op_get(m, "t< 4 >", &b), JITOP_OK);
    assert_int_equal(jitop_op_get(m, "k", &k), JITOP_OK);
    assert_int_equal(g_compiles, 1);
    assert_ptr_equal(image_of(a), image_of(b));
    assert_ptr_equal(image_of(a), image_of(k));
    launch(a);
    launch(b);
    /* Not the module's identity: the same module, with or without names. */
    const char *plain[] = {"-DUNUSED=1"};
    assert_int_equal(jitop_load(ctx, "decl", sources, 1, plain, 1, &again), JITOP_OK);
    assert_ptr_equal(again, m);
    /* An instance not declared is compiled on its own, as before. */
    jitop_op *c = NULL;
    assert_int_equal(jitop_op_get(m, "t<5>", &c), JITOP_OK);
    assert_int_equal(g_compiles, 2);
    jitop_ctx_destroy(ctx);

    g_compiles = 0;
    ctx = jt_ctx_driver(s.cache);
    assert_int_equal(jitop_load(ctx, "decl", sources, 1, opts, 4, &m), JITOP_OK);
    assert_int_equal(jitop_op_get(m, "t<4>", &b), JITOP_OK);
    assert_int_equal(g_compiles, 0);
    jitop_ctx_destroy(ctx);

    char cmd[4096], *out = NULL;
    snprintf(cmd, sizeof cmd, "%s explain --cache-dir %s --arch %s -DUNUSED=1 %s", jt_cli(),
             s.cache, s.arch, s.src);
    int rc = jt_run(cmd, &out);
    /* t<5> joined the asked list: a build would fold it in (a miss). */
    if (rc != 0 || !strstr(out, "3 instances asked of this source") || !strstr(out, "t<3>; t<4>"))
        jt_fail_showing(out, "exit %d", rc);
    free(out);
    setup_close(&s);
}

/* A declared name the source does not have: the load still works (the
 * source compiled alone, the fold rule's fallback), and the error is the
 * get's, naming the name. A plain name or an empty one is refused at load,
 * naming the option. */
static void test_declared_errors(void **state)
{
    (void)state;
    setup s;
    setup_open(&s);
    jitop_ctx *ctx = jt_ctx_driver(s.cache);
    jitop_module *m = NULL;
    jitop_op *op = NULL;
    const char *sources[] = {s.src};
    const char *bad[] = {"-instance=nosuch<1>"};
    assert_int_equal(jitop_load(ctx, "bad", sources, 1, bad, 1, &m), JITOP_OK);
    assert_int_equal(g_compiles, 2); /* the fold, then the source alone */
    int rc = jitop_op_get(m, "nosuch<1>", &op);
    assert_true(rc == JITOP_ENOTFOUND || rc == JITOP_ECOMPILE);
    if (!strstr(jitop_errmsg(ctx), "nosuch"))
        fail_msg("%s", jitop_errmsg(ctx));
    assert_int_equal(jitop_op_get(m, "t<1>", &op), JITOP_OK);
    static const char *const refused[] = {"-instance=k", "-instance=", "-instance=ns::f"};
    for (size_t i = 0; i < 3; i++) {
        const char *o[] = {refused[i]};
        assert_int_equal(jitop_load(ctx, "refused", sources, 1, o, 1, &m), JITOP_EINVAL);
        if (!strstr(jitop_errmsg(ctx), refused[i]) ||
            !strstr(jitop_errmsg(ctx), "not a template instance"))
            fail_msg("%s", jitop_errmsg(ctx));
    }
    jitop_ctx_destroy(ctx);
    setup_close(&s);
}

/* Two sources: the names are not folded into either (a source without the
 * template would fail its fold), each is compiled at its get. */
static void test_declared_several_sources(void **state)
{
    (void)state;
    setup s;
    setup_open(&s);
    char *other = jt_write_rename(s.dir, "o.cu",
                                  "extern \"C\" __global__ void o(int *out) { *out = 2; }\n");
    jitop_ctx *ctx = jt_ctx_driver(s.cache);
    jitop_module *m = NULL;
    jitop_op *op = NULL;
    const char *sources[] = {other, s.src};
    const char *opts[] = {"-instance=t<7>"};
    assert_int_equal(jitop_load(ctx, "two", sources, 2, opts, 1, &m), JITOP_OK);
    assert_int_equal(g_compiles, 2);
    assert_int_equal(jitop_op_get(m, "t<7>", &op), JITOP_OK);
    launch(op);
    jitop_ctx_destroy(ctx);
    free(other);
    setup_close(&s);
}

/* The shipped ops: a cold forward + backward (layernorm, lltm) is one
 * NVRTC program each, from an empty cache; so is inplace's first small
 * matmul. */
static void test_ops_cold_step_one_compile(void **state)
{
    (void)state;
    setup s;
    setup_open(&s);
    jitop_ctx *ctx = jt_ctx_driver(s.cache);
    const size_t bytes = 64 * 1024 * 8;
    void *buf[8];
    for (int i = 0; i < 8; i++) {
        buf[i] = aligned_alloc(256, bytes);
        assert_non_null(buf[i]);
    }
    fake_cuda_stats st;
    g_fake_stats(&st);
    long ever = st.modules_ever;
    assert_int_equal(jitop_layernorm_forward(ctx, JITOP_FLOAT32, 4, 1024, 1e-5f, buf[0], buf[1],
                                             buf[2], buf[3], buf[6], buf[7], NULL),
                     JITOP_OK);
    assert_int_equal(jitop_layernorm_backward(ctx, JITOP_FLOAT32, 4, 1024, buf[0], buf[1],
                                              buf[6], buf[7], buf[2], buf[3], buf[4], buf[5],
                                              NULL),
                     JITOP_OK);
    assert_int_equal(g_compiles, 1);
    g_fake_stats(&st);
    assert_int_equal(st.modules_ever - ever, 1); /* one image holds the step's kernels */
    assert_int_equal(jitop_lltm_forward(ctx, JITOP_FLOAT32, 4, 8, 16, buf[0], buf[1], buf[2],
                                        buf[3], buf[4], buf[5], buf[6], buf[7], NULL),
                     JITOP_OK);
    assert_int_equal(jitop_lltm_backward(ctx, JITOP_FLOAT32, 4, 8, 16, buf[0], buf[1], buf[7],
                                         buf[2], buf[3], buf[4], buf[5], buf[6], buf[0], NULL),
                     JITOP_OK);
    assert_int_equal(g_compiles, 2);
    /* inplace: the small square matmul's instance is known before the load. */
    assert_int_equal(jitop_square_matmul_inplace(ctx, JITOP_FLOAT32, 8, 16, buf[0], buf[1], 0, 0,
                                                 NULL),
                     JITOP_OK);
    assert_int_equal(g_compiles, 3);
    for (int i = 0; i < 8; i++)
        free(buf[i]);
    jitop_ctx_destroy(ctx);
    setup_close(&s);
}

int main(int argc, char **argv)
{
    (void)argc;
    int started = jt_fake_cuda_start(argv, &g_fake_stats);
    if (started >= 0)
        return started;
    jitop__recent_window_ns = 0;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_declared_cold_is_one_compile),
        cmocka_unit_test(test_declared_errors),
        cmocka_unit_test(test_declared_several_sources),
        cmocka_unit_test(test_ops_cold_step_one_compile),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    jt_cleanup();
    return failed;
}
