/* The fold cap (build/build.h's fold rule): a source's binary grows by
 * folding only while its names fit in JITOP_FOLD_MAX; past it, a prewarm or
 * a compile of the source folds the caller's names alone, never every name
 * asked before. The asked list is kept most recent first and capped; the
 * manifest's bins keep the other binaries of the same files findable, so
 * that a shape prewarmed earlier is a load and gets with no compile. Keys
 * stay honest: every binary a manifest names holds exactly the names of
 * its key. Real NVRTC, compiles counted through jitop__before_compile_hook;
 * loads on the fake CUDA driver. */
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
#include "cache/cache_private.h"
#include "load/load.h"
#include "testutil.h"

static fake_cuda_stats_fn g_fake_stats;
static int g_compiles;

static void count_compile(const char *source)
{
    (void)source;
    g_compiles++;
}

/* One extern "C" kernel and one template; version changes the code. */
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

static void setup_open(setup *s, const char *cap)
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
    assert_int_equal(setenv("JITOP_FOLD_MAX", cap, 1), 0);
    g_compiles = 0;
    jitop__before_compile_hook = count_compile;
}

static void setup_close(setup *s)
{
    jitop__before_compile_hook = NULL;
    assert_int_equal(unsetenv("JITOP_FOLD_MAX"), 0);
    jt_rm_rf(s->dir);
    free(s->dir);
    free(s->cache);
    free(s->src);
}

static bool has(const jitop__strv *sv, const char *s)
{
    for (size_t i = 0; i < sv->n; i++)
        if (strcmp(sv->v[i], s) == 0)
            return true;
    return false;
}

/* sv is exactly the names given (a NULL-ended list), in any order. */
static bool is_set(const jitop__strv *sv, ...)
{
    va_list ap;
    va_start(ap, sv);
    size_t n = 0;
    bool ok = true;
    for (const char *s = va_arg(ap, const char *); s; s = va_arg(ap, const char *), n++)
        ok = ok && has(sv, s);
    va_end(ap);
    return ok && n == sv->n;
}

/* The source's manifest: its lists and deps. Every binary it names (built
 * and each bin) that the cache holds for these files holds exactly the
 * names of its key: checked here each time (keys honest); *held counts
 * those the cache holds. */
static void lists_of(const setup *s, jitop__instlist *lists, size_t *held)
{
    jitop_ctx *ctx = jt_ctx(s->cache, s->arch);
    jitop__unit u;
    assert_int_equal(jitop__unit_init(&u, s->src, NULL, NULL, 0, NULL, 0, s->arch), JITOP_OK);
    char id[33], mkey[33];
    jitop__deps deps;
    bool found = false;
    jitop__manifest_id(&u, id);
    assert_int_equal(jitop__manifest_get_lists(ctx->cache, id, &deps, mkey, lists, &found),
                     JITOP_OK);
    assert_true(found);
    assert_int_equal(jitop__instlist_bins(lists), JITOP_OK);
    size_t n = 0;
    for (size_t i = 0; i <= lists->nbins; i++) {
        jitop__strv *names = i == 0 ? &lists->built : &lists->bins[i - 1];
        jitop__unit un = u;
        un.names = *names;
        char key[33];
        jitop__cache_key(&un, &deps, key);
        jitop__entry e;
        bool in = false;
        assert_int_equal(jitop__cache_get(ctx->cache, key, &e, &in), JITOP_OK);
        if (!in)
            continue;
        n++;
        assert_int_equal(e.bin.names.n, names->n);
        for (size_t j = 0; j < names->n; j++)
            assert_true(has(&e.bin.names, names->v[j]));
        jitop__entry_free(&e);
    }
    if (held)
        *held = n;
    jitop__deps_free(&deps);
    jitop__unit_free(&u);
    jitop_ctx_destroy(ctx);
}

/* A prewarm of the names given (NULL-ended), as jitop_layernorm_prewarm
 * does it (jitop__build_fold), in a compile-only context. */
static void prewarm(const setup *s, ...)
{
    jitop__strv names = {0};
    va_list ap;
    va_start(ap, s);
    for (const char *n = va_arg(ap, const char *); n; n = va_arg(ap, const char *))
        assert_int_equal(jitop__strv_push(&names, n), JITOP_OK);
    va_end(ap);
    jitop_ctx *ctx = jt_ctx(s->cache, s->arch);
    jitop_build_result r;
    assert_int_equal(jitop__build_fold(ctx, s->src, s->arch, NULL, 0, &names, &r), JITOP_OK);
    jitop_ctx_destroy(ctx);
    jitop__strv_free(&names);
}

static const char *binding_key(jitop_op *op)
{
    jitop__binding *b = atomic_load(&op->cur);
    assert_non_null(b->image);
    return b->image->key;
}

/* The asked list keeps the most recent names first and no more than the
 * cap; a name that dropped out joins again, first, when asked again; a
 * build folds what the list holds. */
static void test_asked_list_most_recent_first_and_capped(void **state)
{
    (void)state;
    setup s;
    setup_open(&s, "3");
    jitop_ctx *ctx = jt_ctx_driver(s.cache);
    jitop_module *m = NULL;
    jitop_op *op = NULL;
    const char *sources[] = {s.src};
    assert_int_equal(jitop_load(ctx, "cap", sources, 1, NULL, 0, &m), JITOP_OK);
    static const char *const five[] = {"t<1>", "t<2>", "t<3>", "t<4>", "t<5>"};
    for (int i = 0; i < 5; i++)
        assert_int_equal(jitop_op_get(m, five[i], &op), JITOP_OK);
    assert_int_equal(g_compiles, 6); /* the source, then each name alone */
    jitop_ctx_destroy(ctx);

    jitop__instlist l;
    lists_of(&s, &l, NULL);
    assert_int_equal(l.built.n, 0);
    assert_int_equal(l.asked.n, 3);
    assert_string_equal(l.asked.v[0], "t<5>");
    assert_string_equal(l.asked.v[1], "t<4>");
    assert_string_equal(l.asked.v[2], "t<3>");
    jitop__instlist_free(&l);

    /* t<1> dropped out: asked again (its own binary is cached: no compile)
     * it is first again, and t<3> drops out. */
    g_compiles = 0;
    ctx = jt_ctx_driver(s.cache);
    assert_int_equal(jitop_load(ctx, "cap", sources, 1, NULL, 0, &m), JITOP_OK);
    assert_int_equal(jitop_op_get(m, "t<1>", &op), JITOP_OK);
    assert_int_equal(g_compiles, 0);
    jitop_ctx_destroy(ctx);
    lists_of(&s, &l, NULL);
    assert_int_equal(l.asked.n, 3);
    assert_string_equal(l.asked.v[0], "t<1>");
    assert_string_equal(l.asked.v[1], "t<5>");
    assert_string_equal(l.asked.v[2], "t<4>");
    jitop__instlist_free(&l);

    /* jitop_build folds the list: three names, one program. */
    ctx = jt_ctx(s.cache, s.arch);
    jitop_build_result r;
    assert_int_equal(jitop_build(ctx, s.src, s.arch, NULL, 0, NULL, 0, &r), JITOP_OK);
    assert_false(r.cached);
    assert_int_equal(g_compiles, 1);
    int hit = 0;
    char *why = NULL;
    assert_int_equal(jitop_explain(ctx, s.src, s.arch, NULL, 0, NULL, 0, &hit, &why), JITOP_OK);
    assert_true(hit);
    if (!strstr(why, "compiled with the 3 instances asked of this source (in the key): "
                     "t<1>; t<4>; t<5>"))
        fail_msg("%s", why);
    free(why);
    jitop_ctx_destroy(ctx);
    size_t held = 0;
    lists_of(&s, &l, &held);
    assert_true(is_set(&l.built, "t<1>", "t<4>", "t<5>", NULL));
    assert_int_equal(held, 1);
    jitop__instlist_free(&l);
    setup_close(&s);
}

/* A sweep of prewarms, two names a shape, of files that do not change:
 * each shape compiles its own two names, never the shapes before it (they
 * are in binaries of these files already); each binary stays findable. */
static void test_prewarm_sweep_compiles_each_shape_once(void **state)
{
    (void)state;
    setup s;
    setup_open(&s, "4");
    jitop__instlist l;
    size_t held = 0;
    prewarm(&s, "t<1>", "t<2>", NULL);
    prewarm(&s, "t<3>", "t<4>", NULL);
    assert_int_equal(g_compiles, 2);
    lists_of(&s, &l, &held);
    assert_true(is_set(&l.built, "t<3>", "t<4>", NULL));
    assert_int_equal(l.nbins, 1);
    assert_true(is_set(&l.bins[0], "t<1>", "t<2>", NULL));
    jitop__instlist_free(&l);

    prewarm(&s, "t<5>", "t<6>", NULL);
    prewarm(&s, "t<7>", "t<8>", NULL);
    assert_int_equal(g_compiles, 4);
    lists_of(&s, &l, &held);
    assert_true(is_set(&l.built, "t<7>", "t<8>", NULL)); /* its own names alone */
    assert_int_equal(l.nbins, 3);
    assert_true(is_set(&l.bins[0], "t<5>", "t<6>", NULL));
    assert_true(is_set(&l.bins[2], "t<1>", "t<2>", NULL));
    assert_int_equal(held, 4);
    assert_int_equal(l.asked.n, 4); /* capped, most recent first */
    assert_string_equal(l.asked.v[0], "t<7>");
    assert_string_equal(l.asked.v[2], "t<5>");
    jitop__instlist_free(&l);

    /* Any shape prewarmed again: a binary holds it, nothing compiles. */
    prewarm(&s, "t<1>", "t<2>", NULL);
    prewarm(&s, "t<6>", "t<5>", NULL);
    prewarm(&s, "t<3>", NULL);
    assert_int_equal(g_compiles, 4);

    /* A load declaring an early shape: no compile, its gets folded. */
    jitop_ctx *ctx = jt_ctx_driver(s.cache);
    jitop_module *m = NULL;
    jitop_op *a = NULL, *b = NULL, *k = NULL, *c = NULL, *d = NULL;
    const char *sources[] = {s.src};
    const char *opts[] = {"-instance=t<1>", "-instance=t<2>"};
    assert_int_equal(jitop_load(ctx, "sweep", sources, 1, opts, 2, &m), JITOP_OK);
    assert_int_equal(jitop_op_get(m, "t<1>", &a), JITOP_OK);
    assert_int_equal(jitop_op_get(m, "t<2>", &b), JITOP_OK);
    assert_int_equal(jitop_op_get(m, "k", &k), JITOP_OK);
    assert_int_equal(g_compiles, 4);
    assert_string_equal(binding_key(a), binding_key(k));
    /* Another shape in the same process: its binary, found through the
     * source's lists, with no compile; its key names a binary that holds
     * it (lists_of checks what each key holds). */
    assert_int_equal(jitop_op_get(m, "t<5>", &c), JITOP_OK);
    assert_int_equal(jitop_op_get(m, "t<8>", &d), JITOP_OK);
    assert_int_equal(g_compiles, 4);
    assert_string_not_equal(binding_key(c), binding_key(a));
    assert_string_not_equal(binding_key(c), binding_key(d));
    char key5[33];
    snprintf(key5, sizeof key5, "%s", binding_key(c));
    jitop__entry e;
    bool in = false;
    assert_int_equal(jitop__cache_get(ctx->cache, key5, &e, &in), JITOP_OK);
    assert_true(in);
    assert_true(is_set(&e.bin.names, "t<5>", "t<6>", NULL));
    jitop__entry_free(&e);
    int out = 0, *pout = &out;
    void *args[] = {&pout};
    const jitop_dim3 one = {1, 1, 1};
    assert_int_equal(jitop_launch(c, one, one, 0, NULL, args, NULL, 1), JITOP_OK);
    assert_int_equal(jitop_launch(a, one, one, 0, NULL, args, NULL, 1), JITOP_OK);
    /* A name in no binary: compiled on its own, as any first-asked one. */
    assert_int_equal(jitop_op_get(m, "t<9>", &d), JITOP_OK);
    assert_int_equal(g_compiles, 5);
    jitop_ctx_destroy(ctx);

    /* A new shape after the long sweep: its two names, not nine. */
    prewarm(&s, "t<10>", "t<11>", NULL);
    assert_int_equal(g_compiles, 6);
    lists_of(&s, &l, &held);
    assert_true(is_set(&l.built, "t<10>", "t<11>", NULL));
    assert_int_equal(held, 1 + l.nbins);
    jitop__instlist_free(&l);
    setup_close(&s);
}

/* A module running two prewarmed shapes (one its source's binary, one a
 * bin's), reloaded after a save that changed no byte: every instance is
 * found again in a binary of the lists, nothing compiles, each op runs. */
static void test_reload_of_unchanged_files_compiles_nothing(void **state)
{
    (void)state;
    setup s;
    setup_open(&s, "4");
    prewarm(&s, "t<1>", "t<2>", NULL);
    prewarm(&s, "t<3>", "t<4>", NULL);
    assert_int_equal(g_compiles, 2);
    jitop_ctx *ctx = jt_ctx_driver(s.cache);
    jitop_module *m = NULL;
    jitop_op *op[3];
    const char *sources[] = {s.src};
    const char *opts[] = {"-instance=t<1>", "-instance=t<2>"};
    assert_int_equal(jitop_load(ctx, "touch", sources, 1, opts, 2, &m), JITOP_OK);
    static const char *const names[] = {"t<1>", "t<2>", "t<3>"};
    for (int i = 0; i < 3; i++)
        assert_int_equal(jitop_op_get(m, names[i], &op[i]), JITOP_OK);
    assert_int_equal(g_compiles, 2);
    jt_touch(s.src, 5);
    assert_int_equal(jitop_module_reload(m), JITOP_OK);
    assert_int_equal(g_compiles, 2);
    int out = 0, *pout = &out;
    void *args[] = {&pout};
    const jitop_dim3 one = {1, 1, 1};
    for (int i = 0; i < 3; i++)
        assert_int_equal(jitop_launch(op[i], one, one, 0, NULL, args, NULL, 1), JITOP_OK);
    jitop_ctx_destroy(ctx);
    setup_close(&s);
}

/* An edit: the bins were binaries of the old files; the first build of the
 * new ones keeps none, and no get takes old code through them. */
static void test_edit_drops_the_bins(void **state)
{
    (void)state;
    setup s;
    setup_open(&s, "2");
    prewarm(&s, "t<1>", "t<2>", NULL);
    prewarm(&s, "t<3>", "t<4>", NULL);
    jitop__instlist l;
    size_t held = 0;
    lists_of(&s, &l, &held);
    assert_int_equal(l.nbins, 1);
    jitop__instlist_free(&l);
    free(s.src);
    s.src = write_source(s.dir, 1);
    g_compiles = 0;
    prewarm(&s, "t<3>", "t<4>", NULL);
    assert_int_equal(g_compiles, 1);
    lists_of(&s, &l, &held);
    assert_int_equal(l.nbins, 0);
    assert_true(is_set(&l.built, "t<3>", "t<4>", NULL));
    jitop__instlist_free(&l);
    /* t<1>'s binary (of the old files) is in the cache still: a get of it
     * compiles it for the files as they are. */
    jitop_ctx *ctx = jt_ctx_driver(s.cache);
    jitop_module *m = NULL;
    jitop_op *op = NULL;
    const char *sources[] = {s.src};
    assert_int_equal(jitop_load(ctx, "edit", sources, 1, NULL, 0, &m), JITOP_OK);
    assert_int_equal(jitop_op_get(m, "t<1>", &op), JITOP_OK);
    assert_int_equal(g_compiles, 2);
    jitop_ctx_destroy(ctx);
    setup_close(&s);
}

/* After an edit no binary of the lists is current: a load compiles its
 * declared names with every name asked, one program, while they fit in the
 * cap; past it, its own names alone (one rarely used name never makes the
 * edit recompile all). */
static void test_edit_folds_asked_while_they_fit(void **state)
{
    (void)state;
    setup s;
    setup_open(&s, "4");
    prewarm(&s, "t<1>", "t<2>", NULL);
    prewarm(&s, "t<3>", NULL);
    assert_int_equal(g_compiles, 2);
    free(s.src);
    s.src = write_source(s.dir, 1);

    jitop_ctx *ctx = jt_ctx_driver(s.cache);
    jitop_module *m = NULL;
    jitop_op *op = NULL;
    const char *sources[] = {s.src};
    const char *three[] = {"-instance=t<3>"};
    assert_int_equal(jitop_load(ctx, "edit", sources, 1, three, 1, &m), JITOP_OK);
    assert_int_equal(g_compiles, 3);
    static const char *const names[] = {"t<1>", "t<2>", "t<3>"};
    for (int i = 0; i < 3; i++)
        assert_int_equal(jitop_op_get(m, names[i], &op), JITOP_OK);
    assert_int_equal(g_compiles, 3); /* one program for the three */
    jitop_ctx_destroy(ctx);
    jitop__instlist l;
    lists_of(&s, &l, NULL);
    assert_true(is_set(&l.built, "t<1>", "t<2>", "t<3>", NULL));
    jitop__instlist_free(&l);

    prewarm(&s, "t<5>", "t<6>", NULL); /* the same files: its own two */
    assert_int_equal(g_compiles, 4);
    free(s.src);
    s.src = write_source(s.dir, 2);
    sources[0] = s.src;
    ctx = jt_ctx_driver(s.cache);
    const char *seven[] = {"-instance=t<7>"};
    assert_int_equal(jitop_load(ctx, "edit", sources, 1, seven, 1, &m), JITOP_OK);
    assert_int_equal(g_compiles, 5);
    lists_of(&s, &l, NULL);
    /* t<7> with the four asked before and t<5>, t<6> built: five, over
     * the cap: its own name alone. */
    assert_true(is_set(&l.built, "t<7>", NULL));
    assert_int_equal(l.nbins, 0);
    jitop__instlist_free(&l);
    assert_int_equal(jitop_op_get(m, "t<7>", &op), JITOP_OK);
    assert_int_equal(g_compiles, 5);
    assert_int_equal(jitop_op_get(m, "t<5>", &op), JITOP_OK);
    assert_int_equal(g_compiles, 6); /* in no binary of these files: alone */
    jitop_ctx_destroy(ctx);
    setup_close(&s);
}

/* The bins in a manifest's bytes: read back as written (also when passed
 * on undecoded), and a count the bytes do not hold, or zero, makes the
 * manifest malformed (ignored: one hashing pass), never a read past it. */
static void test_manifest_bins_bytes(void **state)
{
    (void)state;
    setup s;
    setup_open(&s, "4");
    jitop_ctx *ctx = jt_ctx(s.cache, s.arch);
    jitop__deps deps = {0};
    jitop__instlist w = {0}, r = {0}, again = {0};
    char key[33], got[33], id[33];
    memset(key, 'a', 32);
    key[32] = '\0';
    memset(id, 'b', 32);
    id[32] = '\0';
    assert_int_equal(jitop__strv_push(&w.built, "t<1>"), JITOP_OK);
    w.bins = calloc(1, sizeof *w.bins);
    assert_non_null(w.bins);
    w.nbins = 1;
    assert_int_equal(jitop__strv_push(&w.bins[0], "x"), JITOP_OK);
    assert_int_equal(jitop__manifest_put_lists(ctx->cache, id, &deps, key, &w), JITOP_OK);
    bool found = false;
    assert_int_equal(jitop__manifest_get_lists(ctx->cache, id, &deps, got, &r, &found), JITOP_OK);
    assert_true(found);
    assert_int_equal(r.nbins, 1);
    assert_null(r.bins); /* not decoded yet */
    jitop__deps_free(&deps);
    /* Written back undecoded (a join), then read and decoded. */
    assert_int_equal(jitop__manifest_put_lists(ctx->cache, id, &deps, key, &r), JITOP_OK);
    assert_int_equal(jitop__manifest_get_lists(ctx->cache, id, &deps, got, &again, &found),
                     JITOP_OK);
    assert_true(found);
    jitop__deps_free(&deps);
    assert_int_equal(jitop__instlist_bins(&again), JITOP_OK);
    assert_int_equal(again.nbins, 1);
    assert_true(is_set(&again.bins[0], "x", NULL));
    assert_true(is_set(&again.built, "t<1>", NULL));

    /* The file's bytes, the bins' count (13 bytes from the end: count, the
     * list's count, the name's length, "x") changed. */
    char *path = NULL;
    assert_true(asprintf(&path, "%s/v%d/manifests/%.2s/%s", s.cache, JITOP__FORMAT_VERSION, id,
                         id) > 0);
    FILE *fp = fopen(path, "rb");
    assert_non_null(fp);
    unsigned char buf[4096];
    size_t len = fread(buf, 1, sizeof buf, fp);
    assert_int_equal(fclose(fp), 0);
    assert_true(len > 13 && len < sizeof buf);
    static const uint32_t counts[] = {0, 2, 0x7fffffff};
    for (size_t i = 0; i < sizeof counts / sizeof counts[0]; i++) {
        unsigned char bad[4096];
        memcpy(bad, buf, len);
        for (int b = 0; b < 4; b++)
            bad[len - 13 + b] = (unsigned char)(counts[i] >> (8 * b));
        jitop__deps d;
        jitop__instlist l;
        bool valid = true;
        assert_int_equal(jitop__manifest_parse_lists(bad, len, &d, got, &l, &valid), JITOP_OK);
        assert_false(valid);
    }
    jitop__deps d;
    jitop__instlist l;
    bool valid = false;
    assert_int_equal(jitop__manifest_parse_lists(buf, len, &d, got, &l, &valid), JITOP_OK);
    assert_true(valid);
    assert_int_equal(l.nbins, 1);
    jitop__instlist_free(&l);
    jitop__deps_free(&d);
    free(path);
    jitop__instlist_free(&w);
    jitop__instlist_free(&r);
    jitop__instlist_free(&again);
    jitop__deps_free(&deps);
    jitop_ctx_destroy(ctx);
    setup_close(&s);
}

/* JITOP_FOLD_MAX=0: nothing but the caller's names is ever compiled in,
 * and no list is kept; bad values fall back to the default. */
static void test_cap_zero_and_bad_values(void **state)
{
    (void)state;
    setup s;
    setup_open(&s, "0");
    prewarm(&s, "t<1>", "t<2>", NULL);
    prewarm(&s, "t<3>", NULL);
    assert_int_equal(g_compiles, 2);
    jitop__instlist l;
    lists_of(&s, &l, NULL);
    assert_true(is_set(&l.built, "t<3>", NULL));
    assert_int_equal(l.asked.n, 0);
    assert_int_equal(l.nbins, 1);
    jitop__instlist_free(&l);

    jitop_ctx *ctx = jt_ctx(s.cache, s.arch);
    static const struct {
        const char *value;
        size_t cap;
    } v[] = {{"7", 7}, {"0", 0}, {"abc", JITOP__FOLD_MAX_DEFAULT}, {"-1", JITOP__FOLD_MAX_DEFAULT},
             {"99999999", JITOP__FOLD_MAX_DEFAULT}, {"", JITOP__FOLD_MAX_DEFAULT}};
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        assert_int_equal(setenv("JITOP_FOLD_MAX", v[i].value, 1), 0);
        assert_int_equal(jitop__fold_max(ctx), v[i].cap);
    }
    jitop_ctx_destroy(ctx);
    setup_close(&s);
}

/* The shipped op: layernorm prewarmed for two row lengths with a cap that
 * one shape fills; the second shape compiles its own names; a new process
 * then runs both shapes with no compile. */
static void test_layernorm_two_shapes_prewarmed(void **state)
{
    (void)state;
    const char *wrapper = getenv("JITOP_TEST_WRAPPER");
    if (wrapper && strstr(wrapper, "valgrind")) {
        print_message("SKIP: two layernorm compiles take minutes under valgrind\n");
        skip();
    }
    setup s;
    setup_open(&s, "5");
    jitop_ctx *ctx = jt_ctx_driver(s.cache);
    assert_int_equal(jitop_layernorm_prewarm(ctx, NULL, JITOP_FLOAT32, 1024), JITOP_OK);
    assert_int_equal(jitop_layernorm_prewarm(ctx, NULL, JITOP_FLOAT32, 2048), JITOP_OK);
    assert_int_equal(g_compiles, 2);
    jitop_ctx_destroy(ctx);

    g_compiles = 0;
    ctx = jt_ctx_driver(s.cache);
    const size_t bytes = 64 * 2048 * 4;
    void *buf[8];
    for (int i = 0; i < 8; i++) {
        buf[i] = aligned_alloc(256, bytes);
        assert_non_null(buf[i]);
    }
    for (int cols = 1024; cols <= 2048; cols *= 2) {
        assert_int_equal(jitop_layernorm_forward(ctx, JITOP_FLOAT32, 4, cols, 1e-5f, buf[0],
                                                 buf[1], buf[2], buf[3], buf[6], buf[7], NULL),
                         JITOP_OK);
        assert_int_equal(jitop_layernorm_backward(ctx, JITOP_FLOAT32, 4, cols, buf[0], buf[1],
                                                  buf[6], buf[7], buf[2], buf[3], buf[4],
                                                  buf[5], NULL),
                         JITOP_OK);
    }
    assert_int_equal(g_compiles, 0);
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
        cmocka_unit_test(test_asked_list_most_recent_first_and_capped),
        cmocka_unit_test(test_prewarm_sweep_compiles_each_shape_once),
        cmocka_unit_test(test_reload_of_unchanged_files_compiles_nothing),
        cmocka_unit_test(test_edit_drops_the_bins),
        cmocka_unit_test(test_edit_folds_asked_while_they_fit),
        cmocka_unit_test(test_manifest_bins_bytes),
        cmocka_unit_test(test_cap_zero_and_bad_values),
        cmocka_unit_test(test_layernorm_two_shapes_prewarmed),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    jt_cleanup();
    return failed;
}
