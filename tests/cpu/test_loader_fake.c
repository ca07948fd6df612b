/* The loader (load, op lookup, launch, reload, reap, teardown) against the
 * fake CUDA driver of tests/fakecuda, which needs no GPU and aborts the
 * program when an image is unloaded while a kernel launched from it may
 * still be queued. Compiling uses the real NVRTC. The program re-executes
 * itself onto the fake (tests/support/fakecuda.c). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "fakecuda.h"
#include "jitop.h"
#include "build/build.h"
#include "load/driver.h"
#include "jitop_ops.h"
#include "load/load.h"
#include "testutil.h"

static fake_cuda_stats_fn g_fake_stats;
static char *g_cache; /* one cache for the program: each source compiles once */

/* Two versions of one source, the same size, so that reloads alternate
 * between two cached binaries and cost no NVRTC compile after the first two.
 * helper is a device function, not a kernel: asking for it must fail. */
static char *kernel_source(int version)
{
    static const char fmt[] =
        "__device__ int helper(int x) { return x + %d; }\n"
        "extern \"C\" __global__ void k(int *out) { *out = helper(%d); }\n"
        "template <int N> __global__ void t(int *out) { *out = N + %d; }\n";
    char *text = NULL;
    if (asprintf(&text, fmt, version, version, version) < 0)
        fail_msg("asprintf failed");
    return text;
}

static fake_cuda_stats stats(void)
{
    fake_cuda_stats s;
    g_fake_stats(&s);
    return s;
}

typedef struct fixture {
    char *dir;
    char *src;
    jitop_ctx *ctx;
    jitop_module *m;
    jitop_op *k;  /* extern "C" */
    jitop_op *t3; /* template instance, its own image */
} fixture;

static void fixture_write(fixture *f, int version)
{
    char *text = kernel_source(version);
    free(f->src);
    f->src = jt_write_rename(f->dir, "k.cu", text);
    free(text);
}

static void fixture_open(fixture *f)
{
    memset(f, 0, sizeof *f);
    f->dir = jt_tmpdir();
    fixture_write(f, 0);
    f->ctx = jt_ctx_driver(g_cache);
    const char *sources[] = {f->src};
    assert_int_equal(jitop_load(f->ctx, "fake", sources, 1, NULL, 0, &f->m), JITOP_OK);
    assert_int_equal(jitop_op_get(f->m, "k", &f->k), JITOP_OK);
    assert_int_equal(jitop_op_get(f->m, "t<3>", &f->t3), JITOP_OK);
}

/* Destroying the context unloads every image and releases the context. */
static void fixture_close(fixture *f)
{
    jitop_ctx_destroy(f->ctx);
    fake_cuda_stats s = stats();
    assert_int_equal(s.modules_loaded, 0);
    assert_int_equal(s.primary_ctx_refs, 0);
    jt_rm_rf(f->dir);
    free(f->dir);
    free(f->src);
}

static const jitop_dim3 one = {1, 1, 1};

#define COUNT_ENTRY(fn, version) +1
enum { CORE_ENTRIES = 0 JITOP__CUDA_CORE(COUNT_ENTRY), MORE_ENTRIES = 0 JITOP__CUDA_MORE(COUNT_ENTRY) };
#undef COUNT_ENTRY

/* Runs first in this program, so that the driver starts in it: loading,
 * getting and an unchecked launch resolve the table's core only (each entry
 * costs a warm load in a new process); the first call that needs one of the
 * rest resolves all of them, once. */
static void test_driver_table_rest_resolved_on_first_need(void **state)
{
    (void)state;
    assert_int_equal(stats().symbols_resolved, 0);
    fixture f;
    fixture_open(&f);
    /* The core (cuDriverGetVersion first, to check the driver's version). */
    assert_int_equal(stats().symbols_resolved, CORE_ENTRIES);
    int out = 0, *pout = &out;
    void *args[] = {&pout};
    assert_int_equal(jitop_launch(f.k, one, one, 0, NULL, args, NULL, 0), JITOP_OK);
    assert_int_equal(stats().symbols_resolved, CORE_ENTRIES);
    /* The occupancy helper is the first to need one of the rest. */
    int block = 0, grid = 0;
    assert_int_equal(jitop_occupancy(f.k, 0, &block, &grid), JITOP_OK);
    assert_true(block > 0 && grid > 0);
    assert_int_equal(stats().symbols_resolved, CORE_ENTRIES + MORE_ENTRIES);
    /* Checked sizes need the parameter layout (cuFuncGetParamInfo). */
    size_t sizes[] = {sizeof pout};
    assert_int_equal(jitop_launch(f.k, one, one, 0, NULL, args, sizes, 1), JITOP_OK);
    assert_int_equal(stats().symbols_resolved, CORE_ENTRIES + MORE_ENTRIES);
    assert_int_equal(jitop_launch(f.t3, one, one, 70000, NULL, args, sizes, 1), JITOP_OK);
    assert_int_equal(stats().symbols_resolved, CORE_ENTRIES + MORE_ENTRIES);
    fixture_close(&f);
}

static void test_load_get_launch(void **state)
{
    (void)state;
    fixture f;
    fixture_open(&f);

    /* The same sources again: the module already loaded. */
    const char *sources[] = {f.src};
    jitop_module *again = NULL;
    assert_int_equal(jitop_load(f.ctx, "fake", sources, 1, NULL, 0, &again), JITOP_OK);
    assert_ptr_equal(again, f.m);
    jitop_op *op = NULL;
    assert_int_equal(jitop_op_get(f.m, "t<3>", &op), JITOP_OK);
    assert_ptr_equal(op, f.t3);
    /* The source unit and the instance: two images. */
    assert_int_equal(stats().modules_loaded, 2);

    jitop_op_info info;
    assert_int_equal(jitop_op_info_get(f.k, &info), JITOP_OK);
    assert_string_equal(info.lowered, "k");
    assert_int_equal(info.nparams, 1);
    assert_int_equal(info.param_size[0], sizeof(int *));
    assert_int_equal(jitop_op_info_get(f.t3, &info), JITOP_OK);
    assert_string_not_equal(info.lowered, "t<3>"); /* a mangled C++ symbol */

    op = (jitop_op *)0x1;
    assert_int_equal(jitop_op_get(f.m, "helper", &op), JITOP_ENOTFOUND);
    assert_non_null(strstr(jitop_errmsg(NULL), "helper"));

    /* The fake stores the id of the module a launch used. */
    int out = 0, *pout = &out;
    void *args[] = {&pout};
    size_t sizes[] = {sizeof pout}, small[] = {4};
    long launches = stats().launches;
    assert_int_equal(jitop_launch(f.k, one, one, 0, NULL, args, sizes, 1), JITOP_OK);
    int k_lib = out;
    assert_true(k_lib > 0);
    assert_int_equal(jitop_launch(f.t3, one, one, 0, NULL, args, sizes, 1), JITOP_OK);
    assert_true(out > 0 && out != k_lib);
    /* Over 48 KiB: jitop raises the limit first, or the fake refuses. */
    assert_int_equal(jitop_launch(f.k, one, one, 70000, NULL, args, sizes, 1), JITOP_OK);
    assert_int_equal(stats().launches, launches + 3);

    /* Wrong sizes or counts are caught before anything is launched. */
    assert_int_equal(jitop_launch(f.k, one, one, 0, NULL, args, small, 1), JITOP_EARGS);
    assert_non_null(strstr(jitop_errmsg(NULL), "k"));
    void *two[] = {&pout, &pout};
    size_t two_sizes[] = {sizeof pout, sizeof pout};
    assert_int_equal(jitop_launch(f.t3, one, one, 0, NULL, two, two_sizes, 2), JITOP_EARGS);
    assert_non_null(strstr(jitop_errmsg(NULL), "t<3>"));
    assert_int_equal(stats().launches, launches + 3);

    fixture_close(&f);
}

static void test_huge_shared_bytes(void **state)
{
    (void)state;
    fixture f;
    fixture_open(&f);
    int out = 0, *pout = &out;
    void *args[] = {&pout};
    const size_t huge[] = {(size_t)INT_MAX + 1, ((size_t)1 << 32) + 16384, SIZE_MAX};
    long launches = stats().launches;
    for (size_t i = 0; i < sizeof huge / sizeof huge[0]; i++) {
        assert_int_equal(jitop_launch(f.k, one, one, huge[i], NULL, args, NULL, 1), JITOP_EINVAL);
        assert_non_null(strstr(jitop_errmsg(NULL), "op k:"));
        jitop_launch_config lc;
        memset(&lc, 0, sizeof lc);
        lc.grid = one;
        lc.block = one;
        lc.shared_bytes = huge[i];
        assert_int_equal(jitop_launch_ex(f.t3, &lc, args, NULL, 1), JITOP_EINVAL);
        assert_non_null(strstr(jitop_errmsg(NULL), "op t<3>:"));
    }
    assert_int_equal(stats().launches, launches);
    fixture_close(&f);
}

/* The concurrent part. Workers must not call cmocka's asserts (they longjmp
 * on the main thread's stack), so the first failure is kept here and checked
 * by the main thread after the join. */
typedef struct stress {
    fixture *f;
    size_t nops;            /* what jitop_module_ops lists, before any reload */
    atomic_bool stop;
    atomic_long rounds[6];  /* per worker: iterations done */
    pthread_mutex_t fail_lock;
    char failure[512];      /* "" while all is well */
} stress;

typedef struct worker {
    stress *s;
    int index;
} worker;

static void stress_fail(stress *s, const char *what, int status)
{
    if (pthread_mutex_lock(&s->fail_lock) != 0)
        abort();
    if (s->failure[0] == '\0')
        snprintf(s->failure, sizeof s->failure, "%s: status %d: %s", what, status,
                 jitop_errmsg(NULL));
    if (pthread_mutex_unlock(&s->fail_lock) != 0)
        abort();
    atomic_store(&s->stop, true);
}

/* Launches both ops (one over 48 KiB of shared memory, which takes the
 * module lock to raise the limit) and looks an op up. */
static bool launch_round(stress *s)
{
    int out = 0, *pout = &out;
    void *args[] = {&pout};
    size_t sizes[] = {sizeof pout};
    int st = jitop_launch(s->f->k, one, one, 0, NULL, args, sizes, 1);
    if (st != JITOP_OK) {
        stress_fail(s, "jitop_launch(k)", st);
        return false;
    }
    st = jitop_launch(s->f->t3, one, one, 70000, NULL, args, sizes, 1);
    if (st != JITOP_OK) {
        stress_fail(s, "jitop_launch(t<3>, 70000 shared bytes)", st);
        return false;
    }
    jitop_op *op = NULL;
    st = jitop_op_get(s->f->m, "k", &op);
    if (st != JITOP_OK || op != s->f->k) {
        stress_fail(s, "jitop_op_get(k) gave another handle", st);
        return false;
    }
    return true;
}

static bool bad_name_round(stress *s)
{
    jitop_op *op = NULL;
    int st = jitop_op_get(s->f->m, "helper", &op);
    if (st != JITOP_ENOTFOUND || op || !strstr(jitop_errmsg(NULL), "helper")) {
        stress_fail(s, "jitop_op_get(helper) should fail with JITOP_ENOTFOUND", st);
        return false;
    }
    return true;
}

static bool reap_round(stress *s)
{
    size_t left = 0;
    int st = jitop__module_reap(s->f->m, true, &left);
    if (st != JITOP_OK) {
        stress_fail(s, "jitop__module_reap", st);
        return false;
    }
    return true;
}

static bool list_round(stress *s)
{
    jitop_op_info infos[8];
    size_t n = 0;
    int st = jitop_module_ops(s->f->m, infos, 8, &n);
    if (st != JITOP_OK || n != s->nops) {
        stress_fail(s, "jitop_module_ops listed another number of ops", st);
        return false;
    }
    jitop_op_info info;
    st = jitop_op_info_get(s->f->k, &info);
    if (st != JITOP_OK || info.nparams != 1) {
        stress_fail(s, "jitop_op_info_get(k)", st);
        return false;
    }
    return true;
}

static void *worker_main(void *arg)
{
    worker *w = arg;
    stress *s = w->s;
    while (!atomic_load(&s->stop)) {
        bool ok;
        switch (w->index) {
        case 0: case 1: case 2: ok = launch_round(s); break;
        case 3: ok = bad_name_round(s); break;
        case 4: ok = reap_round(s); break;
        default: ok = list_round(s); break;
        }
        if (!ok)
            break;
        atomic_fetch_add(&s->rounds[w->index], 1);
        sched_yield(); /* gives the reloading thread its turns on 2 cores */
    }
    return NULL;
}

/* The key jitop_build gives the file now: what an image of it must hold. */
static void current_key(jitop_ctx *ctx, const char *src, char key[33])
{
    jitop_build_result r;
    assert_int_equal(jitop_build(ctx, src, NULL, NULL, 0, NULL, 0, &r), JITOP_OK);
    memcpy(key, r.key, 33);
}

static const char *binding_key(jitop_op *op)
{
    jitop__binding *b = atomic_load(&op->cur);
    assert_non_null(b->image);
    return b->image->key;
}

/* A module used only through template instances never loads the image of
 * its source (which holds no instance); the first op that may be an extern
 * "C" kernel loads it, from the current code, also across reloads. */
/* Threads racing the first checked launch of one op. */
typedef struct describe_race {
    jitop_op *op;
    atomic_int go;
    int status;
} describe_race;

static void *checked_launch_thread(void *arg)
{
    describe_race *r = arg;
    int out = 0, *pout = &out;
    void *args[] = {&pout};
    size_t sizes[] = {sizeof pout};
    while (!atomic_load(&r->go))
        sched_yield();
    r->status = jitop_launch(r->op, one, one, 0, NULL, args, sizes, 1);
    return NULL;
}

/* The parameter layout and attributes are asked of the driver once, when
 * something first needs them, not by jitop_op_get: an unchecked launch
 * without dynamic shared memory never needs them. */
static void test_description_read_on_first_need(void **state)
{
    (void)state;
    fixture f;
    fake_cuda_stats s0 = stats();
    fixture_open(&f);
    assert_int_equal(stats().describe_calls, s0.describe_calls);

    int out = 0, *pout = &out;
    void *args[] = {&pout};
    size_t sizes[] = {sizeof pout}, small[] = {4};
    assert_int_equal(jitop_launch(f.k, one, one, 0, NULL, args, NULL, 0), JITOP_OK);
    assert_int_equal(stats().describe_calls, s0.describe_calls);

    /* The first checked launch reads it and still catches a wrong size,
     * naming the parameter; later ones, and op info, read nothing. */
    assert_int_equal(jitop_launch(f.k, one, one, 0, NULL, args, small, 1), JITOP_EARGS);
    assert_non_null(strstr(jitop_errmsg(NULL), "parameter 0"));
    long once = stats().describe_calls - s0.describe_calls;
    assert_true(once > 0);
    assert_int_equal(jitop_launch(f.k, one, one, 0, NULL, args, sizes, 1), JITOP_OK);
    jitop_op_info info;
    assert_int_equal(jitop_op_info_get(f.k, &info), JITOP_OK);
    assert_int_equal(info.nparams, 1);
    assert_int_equal(info.param_size[0], sizeof pout);
    assert_int_equal(info.max_threads_per_block, 1024);
    assert_int_equal(stats().describe_calls - s0.describe_calls, once);

    /* Dynamic shared memory needs it too: over 48 KiB as the first use of
     * the instance, the limit is raised (the fake refuses otherwise). */
    long before = stats().describe_calls;
    assert_int_equal(jitop_launch(f.t3, one, one, 70000, NULL, args, NULL, 0), JITOP_OK);
    assert_int_equal(stats().describe_calls - before, once);

    /* A reload makes new bindings: described again on first need, once
     * however many threads race for it. */
    fixture_write(&f, 1);
    assert_int_equal(jitop_module_reload(f.m), JITOP_OK);
    before = stats().describe_calls;
    enum { nthreads = 4 };
    describe_race races[nthreads];
    pthread_t th[nthreads];
    for (int i = 0; i < nthreads; i++) {
        races[i].op = f.k;
        races[i].status = -1;
        atomic_init(&races[i].go, 0);
        assert_int_equal(pthread_create(&th[i], NULL, checked_launch_thread, &races[i]), 0);
    }
    for (int i = 0; i < nthreads; i++)
        atomic_store(&races[i].go, 1);
    for (int i = 0; i < nthreads; i++) {
        assert_int_equal(pthread_join(th[i], NULL), 0);
        assert_int_equal(races[i].status, JITOP_OK);
    }
    assert_int_equal(stats().describe_calls - before, once);
    fixture_close(&f);
}

/* The driver loads a module's functions lazily; jitop_op_get puts an op's
 * code on the GPU (cuFuncLoad for a source's kernel, cuModuleGetFunction
 * for an instance), so that no launch pays for it, also after a reload. */
static void test_op_code_loaded_at_get(void **state)
{
    (void)state;
    fixture f;
    fake_cuda_stats s0 = stats();
    fixture_open(&f);
    assert_int_equal(stats().functions_loaded - s0.functions_loaded, 2);
    int out = 0, *pout = &out;
    void *args[] = {&pout};
    assert_int_equal(jitop_launch(f.k, one, one, 0, NULL, args, NULL, 0), JITOP_OK);
    assert_int_equal(jitop_launch(f.t3, one, one, 0, NULL, args, NULL, 0), JITOP_OK);
    assert_int_equal(stats().loaded_at_launch, s0.loaded_at_launch);

    fixture_write(&f, 1);
    assert_int_equal(jitop_module_reload(f.m), JITOP_OK);
    assert_int_equal(stats().functions_loaded - s0.functions_loaded, 4);
    assert_int_equal(jitop_launch(f.k, one, one, 0, NULL, args, NULL, 0), JITOP_OK);
    assert_int_equal(jitop_launch(f.t3, one, one, 0, NULL, args, NULL, 0), JITOP_OK);
    assert_int_equal(stats().loaded_at_launch, s0.loaded_at_launch);
    fixture_close(&f);
}

/* jitop_occupancy_clusters passes the cluster size and shared memory to the
 * driver and returns its count, which need not be SMs / cluster size (the
 * fake, like an H100, leaves some SMs out of clusters); bad arguments are
 * named. */
static void test_occupancy_clusters(void **state)
{
    (void)state;
    fixture f;
    fixture_open(&f);
    fake_cuda_stats s0 = stats();
    int n = -1;
    assert_int_equal(jitop_occupancy_clusters(f.k, 1024, 200000, 4, &n), JITOP_OK);
    assert_int_equal(stats().cluster_queries - s0.cluster_queries, 1);
    assert_int_equal(stats().last_cluster_size, 4);
    assert_int_equal(stats().last_cluster_smem, 200000);
    assert_int_equal(n, (132 - 12) / 4);
    assert_int_equal(jitop_occupancy_clusters(f.k, 256, 1000, 2, &n), JITOP_OK);
    assert_int_equal(n, (132 - 12) * 2 / 2);
    /* 0: the kernel's own cluster dimensions; it has none (the fake says
     * width 0), so clusters of 1, asked for explicitly. */
    assert_int_equal(jitop_occupancy_clusters(f.k, 256, 0, 0, &n), JITOP_OK);
    assert_int_equal(stats().last_cluster_size, 1);
    assert_int_equal(n, 132 * 2);

    n = -1;
    assert_int_equal(jitop_occupancy_clusters(f.k, 0, 0, 2, &n), JITOP_EINVAL);
    assert_non_null(strstr(jitop_errmsg(NULL), "block_size"));
    assert_int_equal(jitop_occupancy_clusters(f.k, 32, 0, -1, &n), JITOP_EINVAL);
    assert_non_null(strstr(jitop_errmsg(NULL), "cluster_size"));
    assert_int_equal(jitop_occupancy_clusters(f.k, 32, 0, 2, NULL), JITOP_EINVAL);
    assert_int_equal(jitop_occupancy_clusters(NULL, 32, 0, 2, &n), JITOP_EINVAL);
    assert_int_equal(n, -1);
    assert_int_equal(stats().cluster_queries - s0.cluster_queries, 3);
    fixture_close(&f);
}

static void test_source_image_loaded_on_first_use(void **state)
{
    (void)state;
    fixture f;
    memset(&f, 0, sizeof f);
    f.dir = jt_tmpdir();
    fixture_write(&f, 0);
    f.ctx = jt_ctx_driver(g_cache);
    const char *sources[] = {f.src};
    fake_cuda_stats s0 = stats();
    assert_int_equal(jitop_load(f.ctx, "lazy", sources, 1, NULL, 0, &f.m), JITOP_OK);
    assert_int_equal(stats().modules_ever - s0.modules_ever, 0);
    assert_int_equal(jitop_op_get(f.m, "t<3>", &f.t3), JITOP_OK);
    assert_int_equal(stats().modules_ever - s0.modules_ever, 1); /* the instance only */
    int out = 0, *pout = &out;
    void *args[] = {&pout};
    assert_int_equal(jitop_launch(f.t3, one, one, 0, NULL, args, NULL, 1), JITOP_OK);

    /* A reload after an edit compiles the source once, with t<3> folded
     * in (the fold rule, build/build.h): the instance's code is the
     * source's new binary, whose image the reload loads for it. (A source
     * with no instance in use is rebuilt without loading: m4 below.) */
    fixture_write(&f, 1);
    assert_int_equal(jitop_module_reload(f.m), JITOP_OK);
    assert_int_equal(jitop_module_generation(f.m), 1);
    assert_int_equal(stats().modules_ever - s0.modules_ever, 2); /* the source, with t<3> */
    char key1[33];
    current_key(f.ctx, f.src, key1);
    assert_string_equal(f.m->units[0].key, key1);
    assert_non_null(f.m->units[0].image);
    assert_string_equal(binding_key(f.t3), key1);
    assert_int_equal(jitop_launch(f.t3, one, one, 0, NULL, args, NULL, 1), JITOP_OK);

    /* A plain name finds its kernel in that image: no other load. */
    assert_int_equal(jitop_op_get(f.m, "k", &f.k), JITOP_OK);
    assert_int_equal(stats().modules_ever - s0.modules_ever, 2);
    assert_string_equal(binding_key(f.k), key1);
    assert_int_equal(jitop_launch(f.k, one, one, 0, NULL, args, NULL, 1), JITOP_OK);

    /* Loaded now: a reload loads the new source image at once. */
    fixture_write(&f, 2);
    assert_int_equal(jitop_module_reload(f.m), JITOP_OK);
    char key2[33];
    current_key(f.ctx, f.src, key2);
    assert_string_equal(binding_key(f.k), key2);

    /* Loaded between a prepare (which saw it unloaded and kept the new
     * binary) and the commit: the commit loads the new binary, and the op
     * made meanwhile from the old one moves to it. */
    char *dir4 = jt_tmpdir();
    char *text = kernel_source(5);
    char *src4 = jt_write(dir4, "k4.cu", text);
    free(text);
    const char *sources4[] = {src4};
    jitop_module *m4 = NULL;
    assert_int_equal(jitop_load(f.ctx, "lazy4", sources4, 1, NULL, 0, &m4), JITOP_OK);
    assert_null(m4->units[0].image);
    text = kernel_source(6);
    free(jt_write_rename(dir4, "k4.cu", text));
    free(text);
    jitop__pending *p = NULL;
    assert_int_equal(jitop__module_prepare(m4, &p), JITOP_OK);
    assert_true(jitop__pending_changed(p));
    jitop_op *k4 = NULL;
    assert_int_equal(jitop_op_get(m4, "k", &k4), JITOP_OK);
    char key6[33];
    current_key(f.ctx, src4, key6);
    assert_string_not_equal(binding_key(k4), key6);
    assert_int_equal(jitop__module_commit(m4, p), JITOP_OK);
    assert_string_equal(binding_key(k4), key6);
    assert_string_equal(m4->units[0].image->key, key6);

    jitop_module *m2 = NULL, *m3 = NULL;
    assert_int_equal(jitop_load_inline(f.ctx, "lazy2",
                                       "extern \"C\" __global__ void k2(int *o) {}\n"
                                       "template <int N> __global__ void u(int *o) { *o = N; }\n",
                                       NULL, 0, &m2),
                     JITOP_OK);
    assert_int_equal(jitop_load_inline(f.ctx, "lazy3",
                                       "extern \"C\" __global__ void k3(int *o) {}\n"
                                       "template <int N> __global__ void v(int *o) { *o = N; }\n",
                                       NULL, 0, &m3),
                     JITOP_OK);
    jitop_op *v1 = NULL;
    assert_int_equal(jitop_op_get(m3, "v<1>", &v1), JITOP_OK);
    assert_null(m2->units[0].image);
    assert_null(m3->units[0].image);
    /* What lists or misses a name loads the sources too. */
    size_t n = 0;
    assert_int_equal(jitop_module_ops(m3, NULL, 0, &n), JITOP_OK);
    assert_int_equal(n, 2); /* k3 and the instance v<1> */
    assert_non_null(m3->units[0].image);
    jitop_op *op = NULL;
    assert_int_equal(jitop_op_get(m2, "nope<1>", &op), JITOP_ENOTFOUND);
    assert_non_null(strstr(jitop_errmsg(NULL), "k2"));

    jitop_ctx_destroy(f.ctx);
    assert_int_equal(stats().modules_loaded, 0);
    jt_rm_rf(dir4);
    free(dir4);
    free(src4);
    jt_rm_rf(f.dir);
    free(f.dir);
    free(f.src);
}

static int count_entry(const jitop_cache_entry_info *info, void *user)
{
    (void)info;
    (*(int *)user)++;
    return 0;
}

static int cache_entries(jitop_ctx *ctx)
{
    int n = 0;
    assert_int_equal(jitop_cache_list(ctx, count_entry, &n), JITOP_OK);
    return n;
}

static int g_compiles;
static void count_compile(const char *source)
{
    (void)source;
    g_compiles++;
}

/* What exists is what the compiler says. A plain name is looked up in the
 * sources' images (no compile: a typo costs nothing). A name expression is
 * compiled: a source that does not declare it answers so once, that
 * answer is cached like a binary, and asking again, in this context or a
 * new one, compiles nothing. A module of several sources compiles the
 * instance from the first that declares it. */
static void test_instance_unit_and_unknown_names(void **state)
{
    (void)state;
    fixture f;
    fixture_open(&f);
    g_compiles = 0;
    jitop__before_compile_hook = count_compile;
    jitop_op *op = NULL;
    assert_int_equal(jitop_op_get(f.m, "kk", &op), JITOP_ENOTFOUND); /* plain: the image says */
    assert_null(op);
    assert_non_null(strstr(jitop_errmsg(NULL), "has no kernel 'kk'; its ops: k"));
    assert_int_equal(g_compiles, 0);
    assert_int_equal(jitop_op_get(f.m, "nope<2>", &op), JITOP_ENOTFOUND);
    assert_null(op);
    const char *msg = jitop_errmsg(NULL);
    assert_non_null(strstr(msg, "nope<2>"));
    assert_non_null(strstr(msg, "identifier \"nope\" is undefined")); /* NVRTC's answer */
    assert_non_null(strstr(msg, "its ops: k")); /* what exists */
    assert_null(strstr(msg, "template"));       /* no template in sight */
    assert_int_equal(g_compiles, 1);
    /* Asked again: the same answer, no compile. */
    assert_int_equal(jitop_op_get(f.m, "nope<2>", &op), JITOP_ENOTFOUND);
    assert_int_equal(jitop_op_get(f.m, "nope< 2 >", &op), JITOP_ENOTFOUND);
    assert_int_equal(g_compiles, 1);
    /* Template arguments that fit no instance are an answer about the name. */
    assert_int_equal(jitop_op_get(f.m, "t<int>", &op), JITOP_ENOTFOUND);
    assert_non_null(strstr(jitop_errmsg(NULL), "t<int>"));
    assert_int_equal(g_compiles, 2);
    /* A new context on the same cache: the same answers, no compile. */
    jitop_ctx *ctx2 = jt_ctx_driver(g_cache);
    jitop_module *m2 = NULL;
    const char *one[] = {f.src};
    assert_int_equal(jitop_load(ctx2, "fake", one, 1, NULL, 0, &m2), JITOP_OK);
    assert_int_equal(jitop_op_get(m2, "nope<2>", &op), JITOP_ENOTFOUND);
    assert_non_null(strstr(jitop_errmsg(NULL), "identifier \"nope\" is undefined"));
    assert_int_equal(jitop_op_get(m2, "t<int>", &op), JITOP_ENOTFOUND);
    assert_int_equal(g_compiles, 2);
    jitop_ctx_destroy(ctx2);

    char *text = kernel_source(7);
    char *other = jt_write(f.dir, "other.cu", "extern \"C\" __global__ void o(int *out) { *out = 1; }\n");
    char *defs = jt_write(f.dir, "defs.cu", text);
    free(text);
    const char *two[] = {other, defs};
    jitop_module *mm = NULL;
    assert_int_equal(jitop_load(f.ctx, "two", two, 2, NULL, 0, &mm), JITOP_OK);
    int before = g_compiles;
    assert_int_equal(jitop_op_get(mm, "t<4>", &op), JITOP_OK);
    assert_string_equal(mm->instances[0]->unit.source_path, defs);
    assert_int_equal(g_compiles - before, 2); /* other.cu says no, defs.cu compiles it */
    assert_int_equal(jitop_op_get(mm, "absent<1>", &op), JITOP_ENOTFOUND);
    assert_non_null(strstr(jitop_errmsg(NULL), "absent<1>"));
    assert_non_null(strstr(jitop_errmsg(NULL), "its ops: o, k"));
    /* Warm, in a new context: other.cu's answer is cached too. */
    before = g_compiles;
    ctx2 = jt_ctx_driver(g_cache);
    assert_int_equal(jitop_load(ctx2, "two", two, 2, NULL, 0, &m2), JITOP_OK);
    assert_int_equal(jitop_op_get(m2, "t<4>", &op), JITOP_OK);
    assert_string_equal(m2->instances[0]->unit.source_path, defs);
    assert_int_equal(jitop_op_get(m2, "absent<1>", &op), JITOP_ENOTFOUND);
    assert_int_equal(g_compiles, before);
    jitop_ctx_destroy(ctx2);
    jitop__before_compile_hook = NULL;
    free(other);
    free(defs);
    fixture_close(&f);
}

/* PTX whose ISA version the driver's JIT does not know (NVRTC newer than
 * the driver) fails its load naming the cause and both ways out, not as
 * an arch mismatch. The fake refuses PTX newer than $FAKE_CUDA_MAX_PTX. */
static void test_ptx_newer_than_the_driver(void **state)
{
    (void)state;
    char *dir = jt_tmpdir();
    char *text = kernel_source(31);
    char *src = jt_write(dir, "k.cu", text);
    free(text);
    jitop_config cfg;
    jitop_config_init(&cfg);
    cfg.cache_dir = g_cache;
    cfg.arch = "compute_90";
    jitop_ctx *ctx = NULL;
    assert_int_equal(jitop_ctx_create(&cfg, &ctx), JITOP_OK);
    const char *sources[] = {src};
    jitop_module *m = NULL;
    assert_int_equal(setenv("FAKE_CUDA_MAX_PTX", "1.0", 1), 0);
    int st = jitop_load(ctx, "ptx", sources, 1, NULL, 0, &m);
    assert_int_equal(unsetenv("FAKE_CUDA_MAX_PTX"), 0);
    assert_int_equal(st, JITOP_ECUDA);
    const char *msg = jitop_errmsg(NULL);
    if (!strstr(msg, "the PTX needs a newer driver") || !strstr(msg, "compile for sm_90") ||
        !strstr(msg, "update the NVIDIA driver") || !strstr(msg, "CUDA_ERROR_UNSUPPORTED_PTX"))
        fail_msg("%s", msg);
    assert_null(strstr(msg, "was built for")); /* not an arch mismatch */
    /* A driver that knows the version loads it. */
    jitop_op *op = NULL;
    assert_int_equal(jitop_load(ctx, "ptx", sources, 1, NULL, 0, &m), JITOP_OK);
    assert_int_equal(jitop_op_get(m, "k", &op), JITOP_OK);
    jitop_ctx_destroy(ctx);
    assert_int_equal(stats().modules_loaded, 0);
    free(src);
    jt_rm_rf(dir);
    free(dir);
}

/* After jitop_layernorm_prewarm / jitop_lltm_prewarm for the device's arch,
 * the ops' calls compile nothing: every instance they ask for is a cache hit.
 * The fake runs no kernel and describes every kernel as taking one pointer,
 * so each call stops at its first launch with an argument-count error; the
 * instances it needed were got (and built, on a miss) before that. */
static char *entry_file(const char key[33])
{
    char *path = NULL;
    if (asprintf(&path, "%s/v%d/%.2s/%s", g_cache, JITOP__FORMAT_VERSION, key, key) < 0)
        fail_msg("asprintf failed");
    return path;
}

static time_t mtime_of(const char *path)
{
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    return st.st_mtime;
}

/* dir/k.cu at version, with an old mtime: the manifest's stat data then
 * vouches for it (a file changed in the last seconds is hashed again, which
 * reads the entry). */
static char *write_old_source(const char *dir, int version)
{
    char *text = kernel_source(version);
    char *src = jt_write(dir, "k.cu", text);
    free(text);
    struct timespec old[2] = {{.tv_sec = 1000000000}, {.tv_sec = 1000000000}};
    assert_int_equal(utimensat(AT_FDCWD, src, old, 0), 0);
    /* Its ctime is now, and no call sets it back: without the recent window
     * the file counts as old, and the stat fast path vouches for it. */
    jitop__recent_window_ns = 0;
    return src;
}

/* dir/k.cu rewritten at version, mtime now (an edit). */
static void edit_source(const char *dir, int version)
{
    char *text = kernel_source(version);
    free(jt_write(dir, "k.cu", text));
    free(text);
}

/* The key of instance name as a new context that loads src gets it. */
static void instance_key(const char *src, const char *module, const char *name, char key[33])
{
    const char *sources[] = {src};
    jitop_module *m = NULL;
    jitop_op *op = NULL;
    jitop_ctx *ctx = jt_ctx_driver(g_cache);
    assert_int_equal(jitop_load(ctx, module, sources, 1, NULL, 0, &m), JITOP_OK);
    assert_int_equal(jitop_op_get(m, name, &op), JITOP_OK);
    snprintf(key, 33, "%s", binding_key(op));
    jitop_ctx_destroy(ctx);
}

/* A warm jitop_load marks a source's entry used without reading it: the
 * entry is read with the source image, when an op first needs it. One that
 * turns out invalid then, or is gone, is built again. */
static void test_source_entry_read_with_its_image(void **state)
{
    (void)state;
    char *dir = jt_tmpdir();
    char *src = write_old_source(dir, 21);
    struct timespec old[2] = {{.tv_sec = 1000000000}, {.tv_sec = 1000000000}};
    const char *sources[] = {src};
    jitop_ctx *ctx = jt_ctx_driver(g_cache);
    jitop_module *m = NULL;
    assert_int_equal(jitop_load(ctx, "deferred", sources, 1, NULL, 0, &m), JITOP_OK);
    jitop_ctx_destroy(ctx);
    char key[33];
    ctx = jt_ctx_driver(g_cache);
    current_key(ctx, src, key);
    jitop_ctx_destroy(ctx);

    /* Corrupt the entry (same size) and age it: a read would remove it. */
    char *entry = entry_file(key);
    FILE *fp = fopen(entry, "r+b");
    assert_non_null(fp);
    assert_int_equal(fseek(fp, -8, SEEK_END), 0);
    assert_int_equal(fputc('!', fp) == EOF, 0);
    assert_int_equal(fclose(fp), 0);
    assert_int_equal(utimensat(AT_FDCWD, entry, old, 0), 0);

    g_compiles = 0;
    jitop__before_compile_hook = count_compile;
    ctx = jt_ctx_driver(g_cache);
    assert_int_equal(jitop_load(ctx, "deferred", sources, 1, NULL, 0, &m), JITOP_OK);
    assert_true(mtime_of(entry) > 1000000000); /* marked used */
    jitop_op *op = NULL;
    assert_int_equal(jitop_op_get(m, "t<3>", &op), JITOP_OK); /* an instance: its own entry */
    assert_int_equal(g_compiles, 1);
    struct stat st;
    assert_int_equal(stat(entry, &st), 0); /* never read, so still there */

    /* The first plain name reads it, finds it invalid, builds it again:
     * with t<3>, asked of it meanwhile, folded in (build/build.h). A unit
     * of that source with that one name is the instance's own: its entry
     * is that binary, so no compile. */
    char tkey[33];
    snprintf(tkey, sizeof tkey, "%s", binding_key(op));
    assert_int_equal(jitop_op_get(m, "k", &op), JITOP_OK);
    assert_int_equal(g_compiles, 1);
    int out = 0, *pout = &out;
    void *args[] = {&pout};
    assert_int_equal(jitop_launch(op, one, one, 0, NULL, args, NULL, 1), JITOP_OK);
    assert_true(out > 0);
    assert_string_equal(binding_key(op), tkey);
    jitop_ctx_destroy(ctx);

    /* Gone between the load and the first use: built again too. */
    char *folded = entry_file(tkey);
    ctx = jt_ctx_driver(g_cache);
    assert_int_equal(jitop_load(ctx, "deferred", sources, 1, NULL, 0, &m), JITOP_OK);
    assert_int_equal(unlink(folded), 0);
    assert_int_equal(jitop_op_get(m, "k", &op), JITOP_OK);
    assert_int_equal(g_compiles, 2);
    assert_int_equal(jitop_launch(op, one, one, 0, NULL, args, NULL, 1), JITOP_OK);
    assert_int_equal(stat(folded, &st), 0);
    jitop_ctx_destroy(ctx);

    /* A recent mark of use is left as it is: no inode write on the load. */
    jt_touch(folded, -10);
    time_t marked = mtime_of(folded);
    ctx = jt_ctx_driver(g_cache);
    assert_int_equal(jitop_load(ctx, "deferred", sources, 1, NULL, 0, &m), JITOP_OK);
    assert_int_equal(mtime_of(folded), marked);
    assert_int_equal(g_compiles, 2);
    jitop_ctx_destroy(ctx);
    free(folded);

    jitop__before_compile_hook = NULL;
    free(entry);
    free(src);
    jt_rm_rf(dir);
    free(dir);
}

/* An instance is built from the sources as its module read them: the key
 * comes from the source unit's file hashes, with no manifest read and no
 * stat of its own. An edit after the load (no reload yet) therefore gets
 * the instance of the loaded code from the cache, not a compile of the new
 * text beside an image of the old; the reload then moves both. */
static void test_instance_follows_the_loaded_sources(void **state)
{
    (void)state;
    char *dir = jt_tmpdir();
    char *src = write_old_source(dir, 41);
    char key41[33];
    instance_key(src, "loaded", "t<5>", key41);

    const char *sources[] = {src};
    jitop_module *m = NULL;
    jitop_op *op = NULL;
    g_compiles = 0;
    jitop__before_compile_hook = count_compile;
    jitop_ctx *ctx = jt_ctx_driver(g_cache);
    assert_int_equal(jitop_load(ctx, "loaded", sources, 1, NULL, 0, &m), JITOP_OK);
    edit_source(dir, 42); /* after the load */
    assert_int_equal(jitop_op_get(m, "t<5>", &op), JITOP_OK);
    assert_int_equal(g_compiles, 0);
    assert_string_equal(binding_key(op), key41);
    /* The reload builds the edited text, the instance with it. */
    assert_int_equal(jitop_module_reload(m), JITOP_OK);
    assert_true(g_compiles >= 1);
    assert_string_not_equal(binding_key(op), key41);
    jitop_ctx_destroy(ctx);
    jitop__before_compile_hook = NULL;
    free(src);
    jt_rm_rf(dir);
    free(dir);
}

/* A rebuild prepared but not committed yet (a reload compiling, a watch in
 * poll mode waiting for jitop_poll) has read the edited files; its commit
 * leaves the instances made after it began as they are. So an instance
 * asked for meanwhile is built from the files as they are, not from the
 * hashes of the generation about to be replaced (even with that one's
 * instance in the cache): after the commit it runs the new code. */
static void test_instance_during_a_prepared_rebuild(void **state)
{
    (void)state;
    char *dir = jt_tmpdir();
    char *src = write_old_source(dir, 71);
    char key71[33];
    instance_key(src, "prepared", "t<6>", key71); /* v71's instance, cached */

    const char *sources[] = {src};
    jitop_module *m = NULL;
    jitop_op *op = NULL;
    jitop_ctx *ctx = jt_ctx_driver(g_cache);
    assert_int_equal(jitop_load(ctx, "prepared", sources, 1, NULL, 0, &m), JITOP_OK);
    edit_source(dir, 72);
    jitop__pending *p = NULL;
    assert_int_equal(jitop__module_prepare(m, &p), JITOP_OK);
    assert_true(jitop__pending_changed(p));
    assert_int_equal(jitop_op_get(m, "t<6>", &op), JITOP_OK);
    assert_int_equal(jitop__module_commit(m, p), JITOP_OK);
    char key72[33];
    snprintf(key72, sizeof key72, "%s", binding_key(op));
    assert_string_not_equal(key72, key71);
    jitop_ctx_destroy(ctx);

    /* The same key a new context gets for v72. */
    char fresh[33];
    instance_key(src, "prepared", "t<6>", fresh);
    assert_string_equal(fresh, key72);
    free(src);
    jt_rm_rf(dir);
    free(dir);
}

static void test_prewarm_is_what_the_ops_ask_for(void **state)
{
    (void)state;
    char *dir = jt_tmpdir();
    char *cache = jt_path(dir, "cache");
    jitop_ctx *ctx = jt_ctx_driver(cache);
    /* Under valgrind (NVRTC takes seconds a compile there) one shape only. */
    const char *wrapper = getenv("JITOP_TEST_WRAPPER");
    const bool all = !(wrapper && strstr(wrapper, "valgrind"));
    assert_int_equal(jitop_layernorm_prewarm(ctx, "sm_90", JITOP_FLOAT32, 1024), JITOP_OK);
    if (all) {
        /* a row split over a cluster, on the context's arch (the fake's sm_90) */
        assert_int_equal(jitop_layernorm_prewarm(ctx, NULL, JITOP_BFLOAT16, 32768), JITOP_OK);
        assert_int_equal(jitop_lltm_prewarm(ctx, "sm_90", JITOP_FLOAT32), JITOP_OK);
    }
    const int prewarmed = cache_entries(ctx);
    /* One binary per prewarm: each source with its instances folded in
     * (build/build.h); layernorm's second shape compiles its own five (the
     * first's are in a binary of the same files already, which the
     * manifest keeps findable: the gets below compile nothing). */
    assert_int_equal(prewarmed, all ? 3 : 1);

    /* "Device" buffers: the fake's memory is host memory, cuMemAlloc-aligned. */
    const size_t bytes = 64 * 32768 * 4;
    void *buf[8];
    for (int i = 0; i < 8; i++) {
        buf[i] = aligned_alloc(256, bytes);
        assert_non_null(buf[i]);
    }
    float *mean = buf[6], *rstd = buf[7];
    /* Each op launches with its arguments checked against the parameter
     * layouts the fake reads from the cubins, without compiling anything. */
    long launches = stats().launches;
    int rc = jitop_layernorm_forward(ctx, JITOP_FLOAT32, 4, 1024, 1e-5f, buf[0], buf[1], buf[2],
                                     buf[3], mean, rstd, NULL);
    assert_int_equal(rc, JITOP_OK);
    rc = jitop_layernorm_forward(ctx, JITOP_FLOAT32, 4, 1024, 1e-5f, buf[0], NULL, NULL, buf[3],
                                 mean, rstd, NULL);
    assert_int_equal(rc, JITOP_OK);
    rc = jitop_layernorm_backward(ctx, JITOP_FLOAT32, 4, 1024, buf[0], buf[1], mean, rstd,
                                  buf[2], buf[3], buf[4], buf[5], NULL);
    assert_int_equal(rc, JITOP_OK);
    if (all) {
        rc = jitop_layernorm_forward(ctx, JITOP_BFLOAT16, 2, 32768, 1e-5f, buf[0], buf[1],
                                     buf[2], buf[3], mean, rstd, NULL);
        assert_int_equal(rc, JITOP_OK);
        rc = jitop_layernorm_backward(ctx, JITOP_BFLOAT16, 2, 32768, buf[0], buf[1], mean, rstd,
                                      buf[2], buf[3], buf[4], buf[5], NULL);
        assert_int_equal(rc, JITOP_OK);
        rc = jitop_lltm_forward(ctx, JITOP_FLOAT32, 4, 8, 16, buf[0], buf[1], buf[2], buf[3],
                                buf[4], buf[5], buf[6], buf[7], NULL);
        assert_int_equal(rc, JITOP_OK);
        rc = jitop_lltm_backward(ctx, JITOP_FLOAT32, 4, 8, 16, buf[0], buf[1], buf[2], buf[3],
                                 buf[4], buf[5], buf[6], buf[7], buf[0], NULL);
        assert_int_equal(rc, JITOP_OK);
    }
    assert_int_equal(cache_entries(ctx), prewarmed); /* nothing compiled */
    assert_true(stats().launches >= launches + (all ? 7 : 3));

    /* And the check can fail: a row length not prewarmed compiles. */
    rc = jitop_layernorm_forward(ctx, JITOP_FLOAT32, 4, 2048, 1e-5f, buf[0], buf[1], buf[2],
                                 buf[3], mean, rstd, NULL);
    assert_int_equal(rc, JITOP_OK);
    assert_int_equal(cache_entries(ctx), prewarmed + 1);

    /* Bad arguments are named. */
    assert_int_equal(jitop_layernorm_prewarm(ctx, "gfx90a", JITOP_FLOAT32, 1024), JITOP_EINVAL);
    assert_non_null(strstr(jitop_errmsg(ctx), "gfx90a"));
    assert_int_equal(jitop_lltm_prewarm(ctx, "sm_90", JITOP_FLOAT16), JITOP_EINVAL);
    assert_non_null(strstr(jitop_errmsg(ctx), "dtype"));
    assert_int_equal(jitop_layernorm_prewarm(ctx, "sm_90", JITOP_FLOAT32, 0), JITOP_EINVAL);
    assert_non_null(strstr(jitop_errmsg(ctx), "cols"));
    for (int i = 0; i < 8; i++)
        free(buf[i]);
    jitop_ctx_destroy(ctx);
    jt_rm_rf(dir);
    free(cache);
    free(dir);
}

/* Inline text's "name" includes are looked up in the current directory: the
 * same text loaded from another directory is another module, built from
 * that directory's header, not the module loaded first. */
static void test_inline_module_per_directory(void **state)
{
    (void)state;
    char *x = jt_tmpdir(), *y = jt_tmpdir();
    free(jt_write(x, "q.h", "extern \"C\" __global__ void k_x(int *o) {}\n"));
    free(jt_write(y, "q.h", "extern \"C\" __global__ void k_y(int *o) {}\n"));
    char old[4096];
    assert_non_null(getcwd(old, sizeof old));
    jitop_ctx *ctx = jt_ctx_driver(g_cache);
    jitop_module *mx = NULL, *my = NULL;
    jitop_op *op = NULL;
    assert_int_equal(chdir(x), 0);
    int sx = jitop_load_inline(ctx, "q", "#include \"q.h\"\n", NULL, 0, &mx);
    assert_int_equal(chdir(y), 0);
    int sy = jitop_load_inline(ctx, "q", "#include \"q.h\"\n", NULL, 0, &my);
    assert_int_equal(chdir(old), 0);
    assert_int_equal(sx, JITOP_OK);
    assert_int_equal(sy, JITOP_OK);
    assert_ptr_not_equal(mx, my);
    assert_int_equal(jitop_op_get(mx, "k_x", &op), JITOP_OK);
    assert_int_equal(jitop_op_get(my, "k_y", &op), JITOP_OK);
    assert_int_equal(jitop_op_get(my, "k_x", &op), JITOP_ENOTFOUND);
    jitop_ctx_destroy(ctx);
    free(x); free(y);
}

/* Valgrind runs threads one at a time and NVRTC slowly: fewer reloads there. */
static int reload_count(void)
{
    const char *wrapper = getenv("JITOP_TEST_WRAPPER");
    return wrapper && strstr(wrapper, "valgrind") ? 4 : 50;
}

static void test_reload_while_launching(void **state)
{
    (void)state;
    fixture f;
    fixture_open(&f);
    stress s;
    memset(&s, 0, sizeof s);
    s.f = &f;
    assert_int_equal(pthread_mutex_init(&s.fail_lock, NULL), 0);
    assert_int_equal(jitop_module_ops(f.m, NULL, 0, &s.nops), JITOP_OK);
    assert_true(s.nops >= 1);
    fake_cuda_stats before = stats();

    enum { NWORKERS = 6 };
    worker workers[NWORKERS];
    pthread_t threads[NWORKERS];
    for (int i = 0; i < NWORKERS; i++) {
        workers[i] = (worker){&s, i};
        assert_int_equal(pthread_create(&threads[i], NULL, worker_main, &workers[i]), 0);
    }
    /* Reload only once every worker is running, so that each one overlaps
     * the reloads whatever the scheduler does. */
    for (int i = 0; i < NWORKERS && !atomic_load(&s.stop); i++)
        while (atomic_load(&s.rounds[i]) == 0 && !atomic_load(&s.stop))
            sched_yield();

    int reloads = reload_count();
    int reload_status = JITOP_OK;
    for (int i = 1; i <= reloads && !atomic_load(&s.stop); i++) {
        fixture_write(&f, i % 2);
        reload_status = jitop_module_reload(f.m);
        if (reload_status != JITOP_OK) {
            stress_fail(&s, "jitop_module_reload", reload_status);
            break;
        }
        if (jitop_module_generation(f.m) != (uint64_t)i) {
            stress_fail(&s, "a reload did not swap new code in", reload_status);
            break;
        }
    }
    atomic_store(&s.stop, true);
    for (int i = 0; i < NWORKERS; i++)
        assert_int_equal(pthread_join(threads[i], NULL), 0);
    assert_int_equal(pthread_mutex_destroy(&s.fail_lock), 0);
    if (s.failure[0])
        fail_msg("%s", s.failure);
    assert_int_equal(jitop_module_generation(f.m), (uint64_t)reloads);

    /* A last waiting reap leaves only the current image: the source unit,
     * with the t<3> instance compiled into it since the first reload (the
     * fold rule, build/build.h), which retired the instance's own image
     * too. Each reload replaced that one image. */
    size_t left = 99;
    assert_int_equal(jitop__module_reap(f.m, true, &left), JITOP_OK);
    assert_int_equal(left, 0);
    fake_cuda_stats after = stats();
    assert_int_equal(after.modules_loaded, 1);
    assert_int_equal(after.modules_ever - before.modules_ever, reloads);
    assert_int_equal(after.unloads - before.unloads, reloads + 1L);
    print_message("%d reloads: %ld launches, %ld syncs, rounds: launch %ld/%ld/%ld, bad name %ld, "
                  "reap %ld, list %ld\n",
                  reloads, after.launches - before.launches, after.syncs - before.syncs,
                  atomic_load(&s.rounds[0]), atomic_load(&s.rounds[1]),
                  atomic_load(&s.rounds[2]), atomic_load(&s.rounds[3]),
                  atomic_load(&s.rounds[4]), atomic_load(&s.rounds[5]));

    /* The handles launch the code of the last reload. */
    int out = 0, *pout = &out;
    void *args[] = {&pout};
    assert_int_equal(jitop_launch(f.k, one, one, 0, NULL, args, NULL, 1), JITOP_OK);
    assert_true(out > before.modules_ever);
    fixture_close(&f);
}

int main(int argc, char **argv)
{
    (void)argc;
    int started = jt_fake_cuda_start(argv, &g_fake_stats);
    if (started >= 0)
        return started;
    char *dir = jt_tmpdir();
    g_cache = jt_path(dir, "cache");
    const struct CMUnitTest tests[] = {
        /* First: it counts the driver entries resolved since the start. */
        cmocka_unit_test(test_driver_table_rest_resolved_on_first_need),
        cmocka_unit_test(test_load_get_launch),
        cmocka_unit_test(test_huge_shared_bytes),
        cmocka_unit_test(test_description_read_on_first_need),
        cmocka_unit_test(test_op_code_loaded_at_get),
        cmocka_unit_test(test_occupancy_clusters),
        cmocka_unit_test(test_source_image_loaded_on_first_use),
        cmocka_unit_test(test_instance_unit_and_unknown_names),
        cmocka_unit_test(test_ptx_newer_than_the_driver),
        cmocka_unit_test(test_source_entry_read_with_its_image),
        cmocka_unit_test(test_instance_follows_the_loaded_sources),
        cmocka_unit_test(test_instance_during_a_prepared_rebuild),
        cmocka_unit_test(test_prewarm_is_what_the_ops_ask_for),
        cmocka_unit_test(test_reload_while_launching),
        cmocka_unit_test(test_inline_module_per_directory),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    free(g_cache);
    free(dir);
    jt_cleanup();
    return failed;
}
