/* Hot reload on a GPU: an op launched in a loop while its source is edited
 * switches to the new code with no launch failing and never an output that
 * is not one of the two latest versions; a broken edit keeps the old code;
 * POLL mode swaps only inside jitop_poll; a changed signature makes a launch
 * with the old layout fail cleanly. Device memory goes through jitop's
 * driver table (jitop__cuda), so without libcuda.so.1 every test SKIPs.
 * Waits have a generous deadline and fail only when it passes: no time is
 * asserted. */
#include "gputest.h"
#include "testutil.h"

#include "load/driver.h"
#include "load/load.h"
#include "watch/watch.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define DEADLINE_MS 120000.0
#define N 1024

static const jitop__cuda_api *cu;

typedef struct reloads {
    atomic_int ok, failed;
    pthread_t last_thread;
    pthread_mutex_t lock;
    char *last_message;
} reloads;

static void on_reload(void *user, jitop_module *m, int status, const char *message)
{
    reloads *r = user;
    (void)m;
    pthread_mutex_lock(&r->lock);
    r->last_thread = pthread_self();
    if (status != JITOP_OK) {
        free(r->last_message);
        r->last_message = strdup(message ? message : "");
    }
    pthread_mutex_unlock(&r->lock);
    if (status == JITOP_OK)
        atomic_fetch_add(&r->ok, 1);
    else
        atomic_fetch_add(&r->failed, 1);
}

typedef struct rig {
    char *dir, *path;
    jitop_ctx *ctx;
    jitop_module *m;
    jitop_op *op;
    CUdeviceptr in, out;
    int host_in[N], host_out[N];
    reloads rec;
} rig;

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {0, ms * 1000000L};
    nanosleep(&ts, NULL);
}

/* Version v's kernel: out[i] = in[i] * scale(v) + offset(v). */
static int scale_of(int v)
{
    return 3 + v % 5;
}

static int offset_of(int v)
{
    return 1000 * v + 7;
}

static void write_version(rig *r, int v)
{
    char *text = NULL;
    assert_true(asprintf(&text,
                         "#define OFFSET %d\n"
                         "extern \"C\" __global__ void k(const int *in, int *out, int n)\n"
                         "{\n"
                         "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
                         "    if (i < n)\n"
                         "        out[i] = in[i] * %d + OFFSET;\n"
                         "}\n",
                         offset_of(v), scale_of(v)) > 0);
    free(jt_write_rename(r->dir, "reload.cu", text));
    free(text);
}

static rig *rig_new(int v0)
{
    rig *r = calloc(1, sizeof *r);
    assert_non_null(r);
    pthread_mutex_init(&r->rec.lock, NULL);
    r->dir = jt_tmpdir();
    char *cache = jt_path(r->dir, "cache");
    jitop_config cfg;
    jitop_config_init(&cfg);
    cfg.cache_dir = cache;
    OK(jitop_ctx_create(&cfg, &r->ctx));
    OK(jitop_ctx_cuda(r->ctx, NULL, NULL));
    free(cache);
    cu = jitop__cuda();
    assert_non_null(cu);
    write_version(r, v0);
    r->path = jt_path(r->dir, "reload.cu");
    const char *sources[] = {r->path};
    OK(jitop_load(r->ctx, "reload", sources, 1, NULL, 0, &r->m));
    OK(jitop_op_get(r->m, "k", &r->op));
    CU(cu->cuMemAlloc(&r->in, sizeof r->host_in));
    CU(cu->cuMemAlloc(&r->out, sizeof r->host_out));
    return r;
}

static void rig_free(rig *r)
{
    CU(cu->cuMemFree(r->in));
    CU(cu->cuMemFree(r->out));
    jitop_ctx_destroy(r->ctx);
    jt_rm_rf(r->dir);
    free(r->rec.last_message);
    pthread_mutex_destroy(&r->rec.lock);
    free(r->dir);
    free(r->path);
    free(r);
}

static int launch(rig *r)
{
    int n = N;
    void *args[] = {&r->in, &r->out, &n};
    size_t sizes[] = {sizeof r->in, sizeof r->out, sizeof n};
    jitop_dim3 grid = {N / 128, 1, 1}, block = {128, 1, 1};
    return jitop_launch(r->op, grid, block, 0, NULL, args, sizes, 3);
}

/* One launch on fresh random input into a poisoned buffer. Returns which
 * of the versions a and b the whole output matches (never a mix, never
 * garbage: anything else fails the test). */
static int run_once(rig *r, int a, int b)
{
    for (int i = 0; i < N; i++)
        r->host_in[i] = 1 + rand() % 100000;
    CU(cu->cuMemcpyHtoD(r->in, r->host_in, sizeof r->host_in));
    CU(cu->cuMemsetD8(r->out, 0xFF, sizeof r->host_out));
    OK(launch(r));
    CU(cu->cuCtxSynchronize());
    CU(cu->cuMemcpyDtoH(r->host_out, r->out, sizeof r->host_out));
    int versions[2] = {a, b};
    for (int k = 0; k < 2; k++) {
        int v = versions[k], i = 0;
        while (i < N && r->host_out[i] == r->host_in[i] * scale_of(v) + offset_of(v))
            i++;
        if (i == N)
            return v;
    }
    fail_msg("output[0] = %d matches neither version %d (%d) nor %d (%d)", r->host_out[0], a,
             r->host_in[0] * scale_of(a) + offset_of(a), b,
             r->host_in[0] * scale_of(b) + offset_of(b));
    return -1;
}

/* Launches until the output is version want; each output must be want or
 * the version before it. */
static void launch_until(rig *r, int before, int want)
{
    double deadline = now_ms() + DEADLINE_MS;
    while (run_once(r, before, want) != want) {
        if (now_ms() > deadline)
            fail_msg("version %d never went live", want);
    }
}

static void wait_generation(jitop_module *m, uint64_t g)
{
    double deadline = now_ms() + DEADLINE_MS;
    while (jitop_module_generation(m) < g) {
        if (now_ms() > deadline)
            fail_msg("generation %llu never came", (unsigned long long)g);
        sleep_ms(1);
    }
}

/* Waits until the watch finished more than `after` rebuilds and is idle. */
static void wait_rebuilds(jitop__watch *w, uint64_t after, jitop__watch_stats *st)
{
    double deadline = now_ms() + DEADLINE_MS;
    for (;;) {
        OK(jitop__watch_wait_idle(w, (int)DEADLINE_MS));
        jitop__watch_get_stats(w, st);
        if (st->rebuilds > after)
            return;
        if (now_ms() > deadline)
            fail_msg("no rebuild after %llu", (unsigned long long)after);
        sleep_ms(1);
    }
}

static void test_hundred_edits_while_launching(void **state)
{
    (void)state;
    JT_REQUIRE_GPU();
    rig *r = rig_new(0);
    OK(jitop_watch(r->m, JITOP_RELOAD_AUTO, on_reload, &r->rec));
    assert_int_equal(run_once(r, 0, 0), 0);
    for (int v = 1; v <= 100; v++) {
        write_version(r, v);
        launch_until(r, v - 1, v);
    }
    /* Each edit was waited for, so none coalesced with another. */
    wait_generation(r->m, 100);
    assert_int_equal(jitop_module_generation(r->m), 100);
    double deadline = now_ms() + DEADLINE_MS;
    while (atomic_load(&r->rec.ok) < 100 && now_ms() < deadline)
        sleep_ms(1);
    assert_int_equal(atomic_load(&r->rec.ok), 100);
    assert_int_equal(atomic_load(&r->rec.failed), 0);
    rig_free(r);
}

static void test_broken_edit_keeps_old_code(void **state)
{
    (void)state;
    JT_REQUIRE_GPU();
    rig *r = rig_new(1);
    OK(jitop_watch(r->m, JITOP_RELOAD_AUTO, on_reload, &r->rec));
    free(jt_write_rename(r->dir, "reload.cu",
                         "extern \"C\" __global__ void k(const int *in, int *out, int n)\n"
                         "{\n"
                         "    out[0] = in[0] +;\n"
                         "}\n"));
    double deadline = now_ms() + DEADLINE_MS;
    while (atomic_load(&r->rec.failed) == 0) {
        assert_int_equal(run_once(r, 1, 1), 1); /* the old code keeps running */
        if (now_ms() > deadline)
            fail_msg("the broken edit was never reported");
    }
    pthread_mutex_lock(&r->rec.lock);
    if (!strstr(r->rec.last_message, "reload.cu(3)"))
        fail_msg("no file:line in %s", r->rec.last_message);
    pthread_mutex_unlock(&r->rec.lock);
    assert_int_equal(run_once(r, 1, 1), 1);
    assert_int_equal(jitop_module_generation(r->m), 0);
    write_version(r, 2);
    launch_until(r, 1, 2);
    wait_generation(r->m, 1);
    assert_int_equal(jitop_module_generation(r->m), 1);
    rig_free(r);
}

static void test_poll_swaps_only_in_poll(void **state)
{
    (void)state;
    JT_REQUIRE_GPU();
    rig *r = rig_new(0);
    OK(jitop_watch(r->m, JITOP_RELOAD_POLL, on_reload, &r->rec));
    int swapped = -1;
    OK(jitop_poll(r->ctx, &swapped));
    assert_int_equal(swapped, 0);

    jitop__watch *w = __atomic_load_n(&r->ctx->watch, __ATOMIC_ACQUIRE);
    assert_non_null(w);
    jitop__watch_stats st;
    OK(jitop__watch_wait_idle(w, (int)DEADLINE_MS)); /* the first check is done */
    jitop__watch_get_stats(w, &st);
    write_version(r, 1);
    wait_rebuilds(w, st.rebuilds, &st);
    /* Rebuilt, yet nothing changed for the application until it polls. */
    for (int i = 0; i < 10; i++)
        assert_int_equal(run_once(r, 0, 0), 0);
    assert_int_equal(jitop_module_generation(r->m), 0);
    assert_int_equal(atomic_load(&r->rec.ok), 0);
    OK(jitop_poll(r->ctx, &swapped));
    assert_int_equal(swapped, 1);
    assert_int_equal(atomic_load(&r->rec.ok), 1);
    assert_true(pthread_equal(r->rec.last_thread, pthread_self()));
    assert_int_equal(run_once(r, 1, 1), 1);

    free(jt_write_rename(r->dir, "reload.cu", "extern \"C\" __global__ void k(int *p) { *p = ; }\n"));
    wait_rebuilds(w, st.rebuilds, &st);
    assert_int_equal(st.failures, 1);
    int rc = jitop_poll(r->ctx, &swapped);
    assert_int_equal(rc, JITOP_ECOMPILE);
    if (!strstr(jitop_errmsg(NULL), "reload.cu(1)"))
        fail_msg("jitop_poll's message lacks file:line: %s", jitop_errmsg(NULL));
    assert_int_equal(swapped, 0);
    assert_int_equal(atomic_load(&r->rec.failed), 1);
    assert_int_equal(run_once(r, 1, 1), 1);
    rig_free(r);
}

static void test_signature_change_fails_cleanly(void **state)
{
    (void)state;
    JT_REQUIRE_GPU();
    rig *r = rig_new(0);
    OK(jitop_watch(r->m, JITOP_RELOAD_AUTO, on_reload, &r->rec));
    free(jt_write_rename(r->dir, "reload.cu",
                         "extern \"C\" __global__ void k(const int *in, int *out, int n, int extra)\n"
                         "{\n"
                         "    if (threadIdx.x == 0) out[0] = extra;\n"
                         "}\n"));
    wait_generation(r->m, 1);
    assert_int_equal(launch(r), JITOP_EARGS);

    free(jt_write_rename(r->dir, "reload.cu",
                         "extern \"C\" __global__ void renamed(const int *in, int *out, int n)\n"
                         "{\n"
                         "    out[0] = n;\n"
                         "}\n"));
    wait_generation(r->m, 2);
    assert_int_equal(launch(r), JITOP_ESTALE);

    /* Back to a kernel named k with the old layout: the handle works again. */
    write_version(r, 5);
    wait_generation(r->m, 3);
    assert_int_equal(run_once(r, 5, 5), 5);
    rig_free(r);
}

static void test_unwatch_stops_reloads(void **state)
{
    (void)state;
    JT_REQUIRE_GPU();
    rig *r = rig_new(0);
    OK(jitop_watch(r->m, JITOP_RELOAD_AUTO, on_reload, &r->rec));
    write_version(r, 1);
    launch_until(r, 0, 1);
    OK(jitop_unwatch(r->m));
    OK(jitop_unwatch(r->m));
    int before = atomic_load(&r->rec.ok);
    write_version(r, 2);
    jitop__watch *w = __atomic_load_n(&r->ctx->watch, __ATOMIC_ACQUIRE);
    OK(jitop__watch_wait_idle(w, (int)DEADLINE_MS));
    assert_int_equal(run_once(r, 1, 1), 1);
    assert_int_equal(atomic_load(&r->rec.ok), before);
    assert_int_equal(jitop_module_generation(r->m), 1);
    rig_free(r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hundred_edits_while_launching),
        cmocka_unit_test(test_broken_edit_keeps_old_code),
        cmocka_unit_test(test_poll_swaps_only_in_poll),
        cmocka_unit_test(test_signature_change_fails_cleanly),
        cmocka_unit_test(test_unwatch_stops_reloads),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    jt_cleanup();
    return failed;
}
