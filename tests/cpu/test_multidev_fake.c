/* Several devices in one process, against the fake CUDA driver presenting
 * three of them (FAKE_CUDA_DEVICES=90,80,90: two sm_90, one sm_80), each with
 * its own primary context; compiling uses the real NVRTC.
 *
 * jitop's model is one context per device: a jitop_ctx holds one CUDA
 * context (cfg.device's primary context, or cfg.cu_context), its arch and
 * its modules; a module's code lives in that CUDA context only. Contexts
 * that share a cache directory share its entries, whose key holds the arch:
 * two devices of one arch compile a source once, devices of different archs
 * once each. The fake aborts when a module is used while another device's
 * context is current. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fakecuda.h"
#include "jitop.h"
#include "build/build.h"
#include "testutil.h"

#define NDEV 3
static const char *const DEVICES = "90,80,90";
static const char *const ARCH[NDEV] = {"sm_90", "sm_80", "sm_90"};

static fake_cuda_stats_fn g_fake_stats;
static atomic_int g_compiles;

static void count_compile(const char *source)
{
    (void)source;
    atomic_fetch_add(&g_compiles, 1);
}

static fake_cuda_stats stats(void)
{
    fake_cuda_stats s;
    g_fake_stats(&s);
    return s;
}

typedef struct rig {
    char *dir, *cache, *path;
    jitop_ctx *ctx[NDEV];
    jitop_module *m[NDEV];
    jitop_op *op[NDEV];
} rig;

static void write_version(rig *r, int v)
{
    char text[256];
    snprintf(text, sizeof text,
             "extern \"C\" __global__ void k(int *out)\n"
             "{\n"
             "    if (threadIdx.x == 0)\n"
             "        *out = %d;\n"
             "}\n",
             v);
    free(jt_write_rename(r->dir, "k.cu", text));
}

static jitop_ctx *ctx_on(const rig *r, int device)
{
    jitop_config cfg;
    jitop_config_init(&cfg);
    cfg.cache_dir = r->cache;
    cfg.device = device;
    jitop_ctx *ctx = NULL;
    assert_int_equal(jitop_ctx_create(&cfg, &ctx), JITOP_OK);
    return ctx;
}

static void rig_open(rig *r)
{
    memset(r, 0, sizeof *r);
    r->dir = jt_tmpdir();
    r->cache = jt_path(r->dir, "cache");
    write_version(r, 1);
    r->path = jt_path(r->dir, "k.cu");
    for (int d = 0; d < NDEV; d++)
        r->ctx[d] = ctx_on(r, d);
}

static void load_on(rig *r, int d)
{
    const char *sources[] = {r->path};
    int st = jitop_load(r->ctx[d], "k", sources, 1, NULL, 0, &r->m[d]);
    if (st != JITOP_OK)
        fail_msg("load on device %d: %s: %s", d, jitop_strerror(st), jitop_errmsg(r->ctx[d]));
    assert_int_equal(jitop_op_get(r->m[d], "k", &r->op[d]), JITOP_OK);
}

/* One launch; the fake writes the id of the module it launched from into
 * *out (host memory stands in for device memory). */
static int launch_on(rig *r, int d)
{
    int out = -1;
    int *p = &out;
    void *args[] = {&p};
    jitop_dim3 one = {1, 1, 1};
    int st = jitop_launch(r->op[d], one, one, 0, NULL, args, NULL, 1);
    if (st != JITOP_OK)
        fail_msg("launch on device %d: %s: %s", d, jitop_strerror(st), jitop_errmsg(r->ctx[d]));
    assert_true(out > 0);
    return out;
}

static void rig_close(rig *r)
{
    for (int d = 0; d < NDEV; d++)
        jitop_ctx_destroy(r->ctx[d]);
    fake_cuda_stats s = stats();
    assert_int_equal(s.modules_loaded, 0);
    assert_int_equal(s.primary_ctx_refs, 0);
    jt_rm_rf(r->dir);
    free(r->dir);
    free(r->cache);
    free(r->path);
}

typedef struct arch_count {
    int sm_80, sm_90, other;
} arch_count;

static int count_arch(const jitop_cache_entry_info *info, void *user)
{
    arch_count *c = user;
    if (strcmp(info->arch, "sm_80") == 0)
        c->sm_80++;
    else if (strcmp(info->arch, "sm_90") == 0)
        c->sm_90++;
    else
        c->other++;
    return 0;
}

/* Each context compiles for its own device's arch; the second sm_90 device
 * reuses the first one's entry, the sm_80 one compiles its own. */
static void test_arch_in_key(void **state)
{
    (void)state;
    rig r;
    rig_open(&r);
    for (int d = 0; d < NDEV; d++) {
        const char *arch = NULL;
        assert_int_equal(jitop_ctx_arch(r.ctx[d], &arch), JITOP_OK);
        assert_string_equal(arch, ARCH[d]);
        int dev = -1;
        assert_int_equal(jitop_ctx_cuda(r.ctx[d], NULL, &dev), JITOP_OK);
        assert_int_equal(dev, d);
    }
    atomic_store(&g_compiles, 0);
    load_on(&r, 0);
    assert_int_equal(atomic_load(&g_compiles), 1);
    load_on(&r, 2); /* same arch: a cache hit */
    assert_int_equal(atomic_load(&g_compiles), 1);
    load_on(&r, 1); /* sm_80: its own compile */
    assert_int_equal(atomic_load(&g_compiles), 2);
    arch_count c = {0, 0, 0};
    assert_int_equal(jitop_cache_list(r.ctx[0], count_arch, &c), JITOP_OK);
    assert_int_equal(c.sm_80, 1);
    assert_int_equal(c.sm_90, 1);
    assert_int_equal(c.other, 0);
    /* Three modules, one per device's context, each launching its own. */
    int ids[NDEV];
    for (int d = 0; d < NDEV; d++)
        ids[d] = launch_on(&r, d);
    assert_true(ids[0] != ids[1] && ids[1] != ids[2] && ids[0] != ids[2]);
    rig_close(&r);
}

typedef struct loader {
    rig *r;
    int device;
    pthread_barrier_t *go;
    int status;
} loader;

static void *load_thread(void *arg)
{
    loader *l = arg;
    const char *sources[] = {l->r->path};
    int b = pthread_barrier_wait(l->go);
    if (b != 0 && b != PTHREAD_BARRIER_SERIAL_THREAD) {
        l->status = JITOP_EINVAL;
        return NULL;
    }
    l->status = jitop_load(l->r->ctx[l->device], "k", sources, 1, NULL, 0, &l->r->m[l->device]);
    return NULL;
}

/* All devices load the same source at once from an empty cache: one compile
 * per arch, however many devices ask. */
static void test_concurrent_loads_compile_once_per_arch(void **state)
{
    (void)state;
    rig r;
    rig_open(&r);
    pthread_barrier_t go;
    assert_int_equal(pthread_barrier_init(&go, NULL, NDEV), 0);
    loader l[NDEV];
    pthread_t t[NDEV];
    atomic_store(&g_compiles, 0);
    for (int d = 0; d < NDEV; d++) {
        l[d] = (loader){&r, d, &go, -1};
        assert_int_equal(pthread_create(&t[d], NULL, load_thread, &l[d]), 0);
    }
    for (int d = 0; d < NDEV; d++)
        assert_int_equal(pthread_join(t[d], NULL), 0);
    assert_int_equal(pthread_barrier_destroy(&go), 0);
    for (int d = 0; d < NDEV; d++) {
        assert_int_equal(l[d].status, JITOP_OK);
        assert_int_equal(jitop_op_get(r.m[d], "k", &r.op[d]), JITOP_OK);
        launch_on(&r, d);
    }
    assert_int_equal(atomic_load(&g_compiles), 2);
    rig_close(&r);
}

/* An edit reloaded on every device's module: each swaps to new code (a new
 * image, so a new fake module id), one compile per arch again. */
static void test_reload_reaches_every_device(void **state)
{
    (void)state;
    rig r;
    rig_open(&r);
    int before[NDEV];
    for (int d = 0; d < NDEV; d++) {
        load_on(&r, d);
        before[d] = launch_on(&r, d);
    }
    write_version(&r, 2);
    atomic_store(&g_compiles, 0);
    for (int d = 0; d < NDEV; d++) {
        int st = jitop_module_reload(r.m[d]);
        if (st != JITOP_OK)
            fail_msg("reload on device %d: %s: %s", d, jitop_strerror(st),
                     jitop_errmsg(r.ctx[d]));
        assert_int_equal(jitop_module_generation(r.m[d]), 1);
        int now = launch_on(&r, d);
        assert_true(now != before[d]);
    }
    assert_int_equal(atomic_load(&g_compiles), 2);
    rig_close(&r);
}

/* Contexts destroyed in every order: after each destroy, the devices left
 * still launch; at the end no module and no primary context reference is
 * left (rig_close checks the fake's counts). */
static void test_teardown_any_order(void **state)
{
    (void)state;
    static const int orders[6][NDEV] = {{0, 1, 2}, {0, 2, 1}, {1, 0, 2},
                                        {1, 2, 0}, {2, 0, 1}, {2, 1, 0}};
    for (int o = 0; o < 6; o++) {
        rig r;
        rig_open(&r);
        for (int d = 0; d < NDEV; d++) {
            load_on(&r, d);
            launch_on(&r, d);
        }
        for (int i = 0; i < NDEV; i++) {
            int gone = orders[o][i];
            jitop_ctx_destroy(r.ctx[gone]);
            r.ctx[gone] = NULL;
            for (int d = 0; d < NDEV; d++)
                if (r.ctx[d])
                    launch_on(&r, d);
        }
        rig_close(&r);
    }
}

/* A device the driver does not have is refused, naming it. */
static void test_missing_device(void **state)
{
    (void)state;
    rig r;
    rig_open(&r);
    jitop_ctx *ctx = ctx_on(&r, NDEV);
    assert_int_equal(jitop_ctx_cuda(ctx, NULL, NULL), JITOP_ENOTFOUND);
    assert_non_null(strstr(jitop_errmsg(ctx), "device 3"));
    jitop_ctx_destroy(ctx);
    rig_close(&r);
}

int main(int argc, char **argv)
{
    (void)argc;
    /* Before the re-exec, so that the fake reads it; an arch from the
     * environment would override the devices'. */
    if (setenv("FAKE_CUDA_DEVICES", DEVICES, 1) != 0 || unsetenv("JITOP_ARCH") != 0) {
        perror("setenv");
        return 1;
    }
    int started = jt_fake_cuda_start(argv, &g_fake_stats);
    if (started >= 0)
        return started;
    jitop__before_compile_hook = count_compile;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_arch_in_key),
        cmocka_unit_test(test_concurrent_loads_compile_once_per_arch),
        cmocka_unit_test(test_reload_reaches_every_device),
        cmocka_unit_test(test_teardown_any_order),
        cmocka_unit_test(test_missing_device),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    jt_cleanup();
    return failed;
}
