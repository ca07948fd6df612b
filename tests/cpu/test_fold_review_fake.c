/* The fold rule (build/build.h) against answers the cache already holds:
 * a source's build must give what a fresh compile of its bytes gives,
 * whatever else was asked of the same files before, and gets of new
 * instances racing reloads must end on the code of the files as they are.
 * Real NVRTC; loads on the fake CUDA driver of tests/fakecuda. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fakecuda.h"
#include "jitop.h"
#include "build/build.h"
#include "load/load.h"
#include "testutil.h"

static fake_cuda_stats_fn g_fake_stats;

static const char *const ARCH = "sm_80";

/* A name asked of a source (it joined its list), then an edit that drops
 * the template; the instance asked alone of the edited files first: its
 * answer ("names nothing") is cached under the key of the unit with that
 * one name, which is also the key of the source folded with it. The
 * source's build must fall back to the source alone, as a fresh compile
 * does, not return the instance's answer. */
static void test_cached_unresolved_fold_falls_back(void **state)
{
    (void)state;
    char *dir = jt_tmpdir(), *cache = jt_path(dir, "cache");
    char *src = jt_write_rename(dir, "k.cu",
                                "extern \"C\" __global__ void k(int *out) { *out = 1; }\n"
                                "template <int N> __global__ void t(int *out) { *out = N; }\n");
    jitop_ctx *ctx = jt_ctx(cache, ARCH);
    jitop__strv want = {0};
    assert_int_equal(jitop__strv_push(&want, "t<1>"), JITOP_OK);
    jitop_build_result r;
    assert_int_equal(jitop__build_fold(ctx, src, ARCH, NULL, 0, &want, &r), JITOP_OK);
    jitop__strv_free(&want);
    jitop_ctx_destroy(ctx);

    free(jt_write_rename(dir, "k.cu", "extern \"C\" __global__ void k(int *out) { *out = 2; }\n"));
    ctx = jt_ctx(cache, ARCH);
    const char *one[1] = {"t<1>"};
    assert_int_equal(jitop_build(ctx, src, ARCH, NULL, 0, one, 1, &r), JITOP_ENOTFOUND);
    jitop_ctx_destroy(ctx);

    /* A fresh context: what the source's build answers now. */
    ctx = jt_ctx(cache, ARCH);
    int rc = jitop_build(ctx, src, ARCH, NULL, 0, NULL, 0, &r);
    if (rc != JITOP_OK)
        fail_msg("the source alone compiles, but its build failed: %s", jitop_errmsg(ctx));
    jitop_ctx_destroy(ctx);

    /* And a fresh cache agrees on the key. */
    char *cache2 = jt_path(dir, "cache2");
    jitop_build_result fresh;
    ctx = jt_ctx(cache2, ARCH);
    assert_int_equal(jitop_build(ctx, src, ARCH, NULL, 0, NULL, 0, &fresh), JITOP_OK);
    jitop_ctx_destroy(ctx);
    assert_string_equal(r.key, fresh.key);

    jt_rm_rf(dir);
    free(dir);
    free(cache);
    free(cache2);
    free(src);
}


/* A prewarm (jitop__build_fold: jitop build --op, the ops' _prewarm calls)
 * of a source whose list still holds a name the edited source no longer
 * declares: the fold of everything fails and falls back to the source
 * alone. The prewarm says it worked: the names it was asked for must then
 * be in the cache all the same (each alone, the key a later get looks
 * up), so that the get compiles nothing. */
static void test_prewarm_after_fallback_still_prewarms(void **state)
{
    (void)state;
    char *dir = jt_tmpdir(), *cache = jt_path(dir, "cache");
    char *src = jt_write_rename(dir, "k.cu",
                                "template <int N> __global__ void t(int *out) { *out = N; }\n"
                                "template <int N> __global__ void u(int *out) { *out = -N; }\n");
    jitop_ctx *ctx = jt_ctx(cache, ARCH);
    jitop__strv want = {0};
    assert_int_equal(jitop__strv_push(&want, "u<1>"), JITOP_OK);
    jitop_build_result r;
    assert_int_equal(jitop__build_fold(ctx, src, ARCH, NULL, 0, &want, &r), JITOP_OK);
    jitop__strv_free(&want);
    jitop_ctx_destroy(ctx);

    free(jt_write_rename(dir, "k.cu",
                         "template <int N> __global__ void t(int *out) { *out = N + 1; }\n"));
    ctx = jt_ctx(cache, ARCH);
    assert_int_equal(jitop__strv_push(&want, "t<2>"), JITOP_OK);
    int rc = jitop__build_fold(ctx, src, ARCH, NULL, 0, &want, &r);
    jitop__strv_free(&want);
    jitop_ctx_destroy(ctx);
    assert_int_equal(rc, JITOP_OK);

    ctx = jt_ctx(cache, ARCH);
    const char *one[1] = {"t<2>"};
    assert_int_equal(jitop_build(ctx, src, ARCH, NULL, 0, one, 1, &r), JITOP_OK);
    if (!r.cached)
        fail_msg("the prewarm said it worked, but t<2> was compiled after it");
    jitop_ctx_destroy(ctx);

    /* And a name the source does not declare fails the prewarm, naming it. */
    ctx = jt_ctx(cache, ARCH);
    assert_int_equal(jitop__strv_push(&want, "u<3>"), JITOP_OK);
    rc = jitop__build_fold(ctx, src, ARCH, NULL, 0, &want, &r);
    jitop__strv_free(&want);
    assert_int_not_equal(rc, JITOP_OK);
    assert_non_null(strstr(jitop_errmsg(ctx), "u<3>"));
    jitop_ctx_destroy(ctx);

    jt_rm_rf(dir);
    free(dir);
    free(cache);
    free(src);
}

static char *write_version(const char *dir, int v)
{
    char *text = NULL;
    if (asprintf(&text,
                 "extern \"C\" __global__ void k(int *out) { *out = %d; }\n"
                 "template <int N> __global__ void t(int *out) { *out = N + %d; }\n",
                 v, v) < 0)
        fail_msg("asprintf failed");
    char *src = jt_write_rename(dir, "k.cu", text);
    free(text);
    return src;
}

enum { RACE_INSTANCES = 12 };

typedef struct race {
    jitop_module *m;
    jitop_op *ops[RACE_INSTANCES];
    atomic_int failures, done, progress;
} race;

static void *get_thread(void *arg)
{
    race *r = arg;
    for (int i = 0; i < RACE_INSTANCES; i++) {
        char name[32];
        snprintf(name, sizeof name, "t<%d>", i + 1);
        if (jitop_op_get(r->m, name, &r->ops[i]) != JITOP_OK) {
            fprintf(stderr, "get %s: %s\n", name, jitop_errmsg(NULL));
            atomic_fetch_add(&r->failures, 1);
            continue;
        }
        int out = 0, *pout = &out;
        void *args[] = {&pout};
        jitop_dim3 one = {1, 1, 1};
        if (jitop_launch(r->ops[i], one, one, 0, NULL, args, NULL, 1) != JITOP_OK)
            atomic_fetch_add(&r->failures, 1);
        atomic_fetch_add(&r->progress, 1);
    }
    atomic_store(&r->done, 1);
    return NULL;
}

/* Gets of new instances (each folded or compiled alone) while the source
 * is edited and reloaded; after a last reload every op runs code built
 * from the files as they are: its image's key is what a build of those
 * bytes gives (the source folded with the names its binary has, or the
 * instance alone). */
static void test_gets_racing_reloads_end_current(void **state)
{
    (void)state;
    char *dir = jt_tmpdir(), *cache = jt_path(dir, "cache");
    char *src = write_version(dir, 0);
    jitop_ctx *ctx = jt_ctx_driver(cache);
    const char *sources[] = {src};
    /* Half the names in the source's list already: those gets take the
     * source's image (no compile), the others compile alone and join. */
    const char *arch = NULL;
    assert_int_equal(jitop_ctx_arch(ctx, &arch), JITOP_OK);
    jitop__strv half = {0};
    for (int i = 0; i < RACE_INSTANCES / 2; i++) {
        char name[32];
        snprintf(name, sizeof name, "t<%d>", 2 * i + 1);
        assert_int_equal(jitop__strv_push(&half, name), JITOP_OK);
    }
    jitop_build_result pr;
    assert_int_equal(jitop__build_fold(ctx, src, arch, NULL, 0, &half, &pr), JITOP_OK);
    jitop__strv_free(&half);
    race r;
    memset(&r, 0, sizeof r);
    atomic_init(&r.failures, 0);
    atomic_init(&r.done, 0);
    atomic_init(&r.progress, 0);
    assert_int_equal(jitop_load(ctx, "race", sources, 1, NULL, 0, &r.m), JITOP_OK);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, get_thread, &r), 0);
    /* Edits and reloads for as long as the gets go on (two at least),
     * one per get made: a file that never stops changing fails a get
     * ("kept changing"), as it should. */
    int v = 1;
    for (; v <= 2 || !atomic_load(&r.done); v++) {
        int seen = atomic_load(&r.progress);
        free(write_version(dir, v));
        int rc = jitop_module_reload(r.m);
        if (rc != JITOP_OK)
            fail_msg("reload %d: %s", v, jitop_errmsg(NULL));
        while (atomic_load(&r.progress) == seen && !atomic_load(&r.done))
            sched_yield();
    }
    assert_int_equal(pthread_join(th, NULL), 0);
    assert_int_equal(atomic_load(&r.failures), 0);
    free(write_version(dir, v));
    assert_int_equal(jitop_module_reload(r.m), JITOP_OK);

    jitop_ctx *b = jt_ctx(cache, r.m->arch);
    jitop__modunit *su = &r.m->units[0];
    for (int i = 0; i < RACE_INSTANCES; i++) {
        char name[32];
        snprintf(name, sizeof name, "t<%d>", i + 1);
        jitop__binding *bd = atomic_load(&r.ops[i]->cur);
        assert_non_null(bd->image);
        char want[33];
        jitop_build_result br;
        if (bd->image == su->image) {
            const char **names = calloc(su->folded.n + 1, sizeof *names);
            assert_non_null(names);
            for (size_t j = 0; j < su->folded.n; j++)
                names[j] = su->folded.v[j];
            assert_int_equal(jitop_build(b, src, r.m->arch, NULL, 0, names, su->folded.n, &br),
                             JITOP_OK);
            free(names);
        } else {
            const char *one[1] = {name};
            assert_int_equal(jitop_build(b, src, r.m->arch, NULL, 0, one, 1, &br), JITOP_OK);
        }
        memcpy(want, br.key, sizeof want);
        if (strcmp(bd->image->key, want) != 0)
            fail_msg("%s runs image %s; the files as they are build %s", name, bd->image->key,
                     want);
    }
    jitop_ctx_destroy(b);
    jitop_ctx_destroy(ctx);
    jt_rm_rf(dir);
    free(dir);
    free(cache);
    free(src);
}

int main(int argc, char **argv)
{
    (void)argc;
    int started = jt_fake_cuda_start(argv, &g_fake_stats);
    if (started >= 0)
        return started;
    jitop__recent_window_ns = 0;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cached_unresolved_fold_falls_back),
        cmocka_unit_test(test_gets_racing_reloads_end_current),
        cmocka_unit_test(test_prewarm_after_fallback_still_prewarms),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    jt_cleanup();
    return failed;
}
