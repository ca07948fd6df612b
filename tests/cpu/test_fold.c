/* One program per (source, options, arch): the fold rule of build/build.h.
 * A source's manifest keeps the template instances asked of it; a compile
 * of the source (cold, after an edit, jitop build, a prewarm) has them all
 * compiled in, and a get of one of them costs no compile. Real NVRTC,
 * compiles counted through jitop__before_compile_hook; loads on the fake
 * CUDA driver of tests/fakecuda; other processes are the CLI. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
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

/* A source of one extern "C" kernel and one template; version changes the
 * code (an edit). */
static char *write_source(const char *dir, int version)
{
    char *text = NULL;
    if (asprintf(&text,
                 "extern \"C\" __global__ void k(int *out) { *out = %d; }\n"
                 "template <int N> __global__ void t(int *out) { *out = N + %d; }\n",
                 version, version) < 0)
        fail_msg("asprintf failed");
    char *src = jt_write_rename(dir, "k.cu", text);
    free(text);
    return src;
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
    s->src = write_source(s->dir, 0);
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

/* The source's manifest lists, as a context of this cache reads them. */
static void lists_of(const setup *s, jitop__instlist *lists)
{
    jitop_ctx *ctx = jt_ctx(s->cache, s->arch);
    jitop__unit u;
    assert_int_equal(jitop__unit_init(&u, s->src, NULL, NULL, 0, NULL, 0, s->arch), JITOP_OK);
    char id[33], key[33];
    jitop__deps deps;
    bool found = false;
    jitop__manifest_id(&u, id);
    assert_int_equal(jitop__manifest_get_lists(ctx->cache, id, &deps, key, lists, &found),
                     JITOP_OK);
    assert_true(found);
    jitop__deps_free(&deps);
    jitop__unit_free(&u);
    jitop_ctx_destroy(ctx);
}

static bool has(const jitop__strv *sv, const char *s)
{
    for (size_t i = 0; i < sv->n; i++)
        if (strcmp(sv->v[i], s) == 0)
            return true;
    return false;
}

static jitop__image *image_of(jitop_op *op)
{
    jitop__binding *b = atomic_load(&op->cur);
    assert_non_null(b->image);
    return b->image;
}

static const jitop_dim3 one = {1, 1, 1};

static void launch(jitop_op *op)
{
    int out = 0, *pout = &out;
    void *args[] = {&pout};
    assert_int_equal(jitop_launch(op, one, one, 0, NULL, args, NULL, 1), JITOP_OK);
}

static const char *const names4[] = {"t<1>", "t<2>", "t<3>", "t<4>"};

/* The instances asked in one process are in the manifest; a build in
 * another process (the CLI) compiles the source once with all of them; a
 * load in a third then gets each with no compile, from the source's own
 * image. */
static void test_list_persisted_across_processes(void **state)
{
    (void)state;
    setup s;
    setup_open(&s);
    jitop_ctx *ctx = jt_ctx_driver(s.cache);
    jitop_module *m = NULL;
    jitop_op *op[4];
    const char *sources[] = {s.src};
    assert_int_equal(jitop_load(ctx, "fold", sources, 1, NULL, 0, &m), JITOP_OK);
    assert_int_equal(g_compiles, 1); /* the source, no instance known yet */
    for (int i = 0; i < 2; i++)
        assert_int_equal(jitop_op_get(m, names4[i], &op[i]), JITOP_OK);
    assert_int_equal(g_compiles, 3); /* each compiled on its own, as first asked */
    jitop_ctx_destroy(ctx);

    jitop__instlist l;
    lists_of(&s, &l);
    assert_int_equal(l.built.n, 0);
    assert_int_equal(l.asked.n, 2);
    assert_true(has(&l.asked, "t<1>") && has(&l.asked, "t<2>"));
    jitop__instlist_free(&l);

    /* Another process: explain says what a build would compile in, the
     * build compiles it (one program), explain then finds it. */
    char cmd[4096], *out = NULL;
    snprintf(cmd, sizeof cmd, "%s explain --cache-dir %s --arch %s %s", jt_cli(), s.cache,
             s.arch, s.src);
    assert_int_equal(jt_run(cmd, &out), 0);
    if (!strstr(out, "miss") || !strstr(out, "2 instances asked of this source") ||
        !strstr(out, "t<1>; t<2>"))
        jt_fail_showing(out, "expected a miss naming the 2 instances");
    free(out);
    snprintf(cmd, sizeof cmd, "%s build --cache-dir %s --arch %s %s", jt_cli(), s.cache, s.arch,
             s.src);
    assert_int_equal(jt_run(cmd, &out), 0);
    if (!strstr(out, " compiled "))
        jt_fail_showing(out, "expected \" compiled \"");
    free(out);
    snprintf(cmd, sizeof cmd, "%s explain --cache-dir %s --arch %s %s", jt_cli(), s.cache,
             s.arch, s.src);
    assert_int_equal(jt_run(cmd, &out), 0);
    if (!strstr(out, " hit") || !strstr(out, "compiled with the 2 instances"))
        jt_fail_showing(out, "expected a hit compiled with the 2 instances");
    free(out);
    lists_of(&s, &l);
    assert_int_equal(l.built.n, 2);
    jitop__instlist_free(&l);

    /* A load in a new context: no compile at all; both instances are
     * kernels of the source's one image. */
    g_compiles = 0;
    long ever = 0;
    fake_cuda_stats st;
    g_fake_stats(&st);
    ever = st.modules_ever;
    ctx = jt_ctx_driver(s.cache);
    assert_int_equal(jitop_load(ctx, "fold", sources, 1, NULL, 0, &m), JITOP_OK);
    for (int i = 0; i < 2; i++)
        assert_int_equal(jitop_op_get(m, names4[i], &op[i]), JITOP_OK);
    jitop_op *k = NULL;
    assert_int_equal(jitop_op_get(m, "k", &k), JITOP_OK);
    assert_int_equal(g_compiles, 0);
    assert_ptr_equal(image_of(op[0]), image_of(op[1]));
    assert_ptr_equal(image_of(op[0]), image_of(k));
    g_fake_stats(&st);
    assert_int_equal(st.modules_ever - ever, 1);
    launch(op[0]);
    launch(op[1]);
    /* The op list shows each instance once, by its name, and k. */
    size_t n = 0;
    assert_int_equal(jitop_module_ops(m, NULL, 0, &n), JITOP_OK);
    assert_int_equal(n, 3);
    jitop_ctx_destroy(ctx);
    setup_close(&s);
}

/* Edit to live with k instances in use: one compile, whatever k. */
static void test_reload_compiles_once(void **state)
{
    (void)state;
    setup s;
    setup_open(&s);
    jitop_ctx *ctx = jt_ctx_driver(s.cache);
    jitop_module *m = NULL;
    jitop_op *op[4];
    const char *sources[] = {s.src};
    assert_int_equal(jitop_load(ctx, "fold", sources, 1, NULL, 0, &m), JITOP_OK);
    for (int i = 0; i < 4; i++)
        assert_int_equal(jitop_op_get(m, names4[i], &op[i]), JITOP_OK);
    assert_int_equal(g_compiles, 5);
    for (int edit = 1; edit <= 2; edit++) {
        free(write_source(s.dir, edit));
        g_compiles = 0;
        assert_int_equal(jitop_module_reload(m), JITOP_OK);
        assert_int_equal(g_compiles, 1);
        assert_int_equal(jitop_module_generation(m), (uint64_t)edit);
        for (int i = 0; i < 4; i++) {
            assert_ptr_equal(image_of(op[i]), m->units[0].image);
            launch(op[i]);
        }
    }
    /* The key of the source's binary is the key of the source compiled
     * with those four name expressions: what is in it is in its key. */
    jitop_build_result r;
    assert_int_equal(jitop_build(ctx, s.src, s.arch, NULL, 0, names4, 4, &r), JITOP_OK);
    assert_true(r.cached);
    assert_string_equal(r.key, m->units[0].key);
    size_t left = 0;
    assert_int_equal(jitop__module_reap(m, true, &left), JITOP_OK);
    assert_int_equal(left, 0);
    jitop_ctx_destroy(ctx);
    fake_cuda_stats st;
    g_fake_stats(&st);
    assert_int_equal(st.modules_loaded, 0);
    setup_close(&s);
}

/* An instance first asked after the fold is compiled on its own (it never
 * recompiles the others) and joins the list; a touch compiles nothing; the
 * next edit folds it in. */
static void test_new_instance_alone_then_folded(void **state)
{
    (void)state;
    setup s;
    setup_open(&s);
    jitop_ctx *ctx = jt_ctx(s.cache, s.arch);
    jitop__strv want = {0};
    for (int i = 0; i < 2; i++)
        assert_int_equal(jitop__strv_push(&want, names4[i]), JITOP_OK);
    jitop_build_result r2, r3;
    assert_int_equal(jitop__build_fold(ctx, s.src, s.arch, NULL, 0, &want, &r2), JITOP_OK);
    jitop__strv_free(&want);
    assert_int_equal(g_compiles, 1);
    jitop_ctx_destroy(ctx);

    ctx = jt_ctx_driver(s.cache);
    jitop_module *m = NULL;
    jitop_op *a = NULL, *b = NULL, *late = NULL;
    const char *sources[] = {s.src};
    assert_int_equal(jitop_load(ctx, "fold", sources, 1, NULL, 0, &m), JITOP_OK);
    assert_int_equal(jitop_op_get(m, "t<1>", &a), JITOP_OK);
    assert_int_equal(jitop_op_get(m, "t<2>", &b), JITOP_OK);
    assert_int_equal(g_compiles, 1);
    assert_int_equal(jitop_op_get(m, "t<3>", &late), JITOP_OK);
    assert_int_equal(g_compiles, 2); /* alone: t<1> and t<2> are not compiled again */
    assert_ptr_not_equal(image_of(late), image_of(a));
    jitop__instlist l;
    lists_of(&s, &l);
    assert_int_equal(l.built.n, 2);
    assert_int_equal(l.asked.n, 3);
    assert_true(has(&l.asked, "t<3>"));
    jitop__instlist_free(&l);

    /* A touch: the files hash the same, the binary of the built list is
     * there: no compile, nothing swapped. */
    jt_touch(s.src, 1);
    assert_int_equal(jitop_module_reload(m), JITOP_OK);
    assert_int_equal(g_compiles, 2);
    assert_int_equal(jitop_module_generation(m), 0);

    /* An edit: one compile, with t<3> folded in; all three move to it. */
    free(write_source(s.dir, 1));
    assert_int_equal(jitop_module_reload(m), JITOP_OK);
    assert_int_equal(g_compiles, 3);
    assert_ptr_equal(image_of(late), image_of(a));
    assert_ptr_equal(image_of(b), m->units[0].image);
    launch(late);
    lists_of(&s, &l);
    assert_int_equal(l.built.n, 3);
    jitop__instlist_free(&l);
    jitop_ctx_destroy(ctx);

    /* The key follows the set: three names are not two. */
    ctx = jt_ctx(s.cache, s.arch);
    assert_int_equal(jitop_build(ctx, s.src, s.arch, NULL, 0, NULL, 0, &r3), JITOP_OK);
    assert_true(r3.cached);
    assert_string_not_equal(r3.key, r2.key);
    int would_hit = 0;
    char *why = NULL;
    assert_int_equal(jitop_explain(ctx, s.src, s.arch, NULL, 0, NULL, 0, &would_hit, &why),
                     JITOP_OK);
    assert_true(would_hit);
    if (!strstr(why, "3 instances asked of this source (in the key): t<1>; t<2>; t<3>"))
        fail_msg("%s", why);
    jitop_free(why);
    jitop_ctx_destroy(ctx);
    setup_close(&s);
}

/* A list the edited source no longer compiles with (the template is
 * gone): the source is compiled alone, the list starts over, the load
 * works, and the instance says what is wrong with it. */
static void test_fold_that_fails_falls_back(void **state)
{
    (void)state;
    setup s;
    setup_open(&s);
    jitop_ctx *ctx = jt_ctx(s.cache, s.arch);
    jitop__strv want = {0};
    assert_int_equal(jitop__strv_push(&want, "t<1>"), JITOP_OK);
    jitop_build_result r;
    assert_int_equal(jitop__build_fold(ctx, s.src, s.arch, NULL, 0, &want, &r), JITOP_OK);
    jitop__strv_free(&want);
    jitop_ctx_destroy(ctx);
    free(jt_write_rename(s.dir, "k.cu", "extern \"C\" __global__ void k(int *out) { *out = 7; }\n"));
    g_compiles = 0;
    ctx = jt_ctx_driver(s.cache);
    jitop_module *m = NULL;
    jitop_op *op = NULL;
    const char *sources[] = {s.src};
    assert_int_equal(jitop_load(ctx, "fold", sources, 1, NULL, 0, &m), JITOP_OK);
    assert_int_equal(g_compiles, 2); /* the fold, then the source alone */
    assert_int_equal(jitop_op_get(m, "k", &op), JITOP_OK);
    assert_int_equal(jitop_op_get(m, "t<1>", &op), JITOP_ENOTFOUND);
    assert_non_null(strstr(jitop_errmsg(NULL), "t<1>"));
    jitop__instlist l;
    lists_of(&s, &l);
    assert_int_equal(l.built.n, 0);
    assert_int_equal(l.asked.n, 0);
    jitop__instlist_free(&l);
    jitop_ctx_destroy(ctx);
    setup_close(&s);
}

/* `jitop build --op`: bad specs are usage errors naming the spec; a good
 * one prewarms exactly what the op asks for on a GPU of that arch, so the
 * op then compiles nothing. */
static void test_op_prewarm_then_warm_hit(void **state)
{
    (void)state;
    setup s;
    setup_open(&s);
    static const struct {
        const char *spec, *says;
    } bad[] = {
        {"layernorm:f32", "no row length"},
        {"layernorm:f64:1024", "unknown dtype"},
        {"layernorm:f32:0", "row length"},
        {"layernorm:f32:12x", "row length"},
        {"layernorm:f32:1024:3", "too many fields"},
        {"lltm:bf16", "unknown dtype"},
        {"lltm:f32:16", "no size"},
        {"gelu:f32", "unknown op"},
        {"layernorm::1024", "empty field"},
    };
    char cmd[4096], *out = NULL;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(cmd, sizeof cmd, "%s build --cache-dir %s --arch %s --op '%s'", jt_cli(),
                 s.cache, s.arch, bad[i].spec);
        int rc = jt_run(cmd, &out);
        if (rc != 2 || !strstr(out, bad[i].spec) || !strstr(out, bad[i].says))
            jt_fail_showing(out, "%s: exit %d", bad[i].spec, rc);
        free(out);
    }
    snprintf(cmd, sizeof cmd, "%s explain --cache-dir %s --arch %s --op lltm:f32 %s", jt_cli(),
             s.cache, s.arch, s.src);
    assert_int_equal(jt_run(cmd, &out), 2);
    assert_non_null(strstr(out, "only jitop build"));
    free(out);

    snprintf(cmd, sizeof cmd,
             "%s build --cache-dir %s --arch %s,sm_80 --op layernorm:f32:1024 --op lltm:f32",
             jt_cli(), s.cache, s.arch);
    int rc = jt_run(cmd, &out);
    if (rc != 0 || !strstr(out, "op layernorm:f32:1024 sm_80 prewarmed") ||
        !strstr(out, "op lltm:f32 sm_80 prewarmed"))
        jt_fail_showing(out, "exit %d", rc);
    free(out);

    g_compiles = 0;
    jitop_ctx *ctx = jt_ctx_driver(s.cache);
    const size_t bytes = 64 * 1024 * 8;
    void *buf[8];
    for (int i = 0; i < 8; i++) {
        buf[i] = aligned_alloc(256, bytes);
        assert_non_null(buf[i]);
    }
    assert_int_equal(jitop_layernorm_forward(ctx, JITOP_FLOAT32, 4, 1024, 1e-5f, buf[0], buf[1],
                                             buf[2], buf[3], buf[6], buf[7], NULL),
                     JITOP_OK);
    assert_int_equal(jitop_layernorm_backward(ctx, JITOP_FLOAT32, 4, 1024, buf[0], buf[1],
                                              buf[6], buf[7], buf[2], buf[3], buf[4], buf[5],
                                              NULL),
                     JITOP_OK);
    assert_int_equal(jitop_lltm_forward(ctx, JITOP_FLOAT32, 4, 8, 16, buf[0], buf[1], buf[2],
                                        buf[3], buf[4], buf[5], buf[6], buf[7], NULL),
                     JITOP_OK);
    assert_int_equal(g_compiles, 0);
    /* And the count can move: a row length not prewarmed compiles. */
    assert_int_equal(jitop_layernorm_forward(ctx, JITOP_FLOAT32, 4, 2048, 1e-5f, buf[0], buf[1],
                                             buf[2], buf[3], buf[6], buf[7], NULL),
                     JITOP_OK);
    assert_int_equal(g_compiles, 1);
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
    /* Files written in the last seconds are hashed anyway: here the stat
     * fast path may vouch for them, as for files saved long ago. */
    jitop__recent_window_ns = 0;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_list_persisted_across_processes),
        cmocka_unit_test(test_reload_compiles_once),
        cmocka_unit_test(test_new_instance_alone_then_folded),
        cmocka_unit_test(test_fold_that_fails_falls_back),
        cmocka_unit_test(test_op_prewarm_then_warm_hit),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    jt_cleanup();
    return failed;
}
