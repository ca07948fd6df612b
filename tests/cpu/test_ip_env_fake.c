/* The in-place state's square-matmul settings on the fake CUDA driver
 * (tests/fakecuda): a context reads JITOP_INPLACE_CHUNK_MB, _MM_BUFS and
 * _MM_COPY_SMS when its first in-place call makes its state, and its verbose
 * log names each one that was set but ignored (and nothing for good values);
 * with the SM partition asked for, a product without cuBLAS (whose runtime
 * finds no GPU behind the fake) still fails cleanly, holding no scratch. The
 * partition itself needs cuBLAS and a GPU: tests/gpu/test_inplace.c. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fakecuda.h"
#include "jitop.h"
#include "load/driver.h"
#include "ops/ip_plan.h"
#include "testutil.h"

static fake_cuda_stats_fn g_fake_stats;

#define NVARS 4
static const char *const VARS[NVARS] = {"JITOP_INPLACE_CHUNK_MB", "JITOP_INPLACE_MM_BUFS",
                                        "JITOP_INPLACE_MM_COPY_SMS", "JITOP_INPLACE_MM_PANEL"};

/* Sets the variables (NULL: unset), keeping the old values. */
static void env_set(const char *const v[NVARS], char *saved[NVARS])
{
    for (int i = 0; i < NVARS; i++) {
        const char *was = getenv(VARS[i]);
        saved[i] = was ? strdup(was) : NULL;
        assert_true(was == NULL || saved[i] != NULL);
        assert_int_equal(v[i] ? setenv(VARS[i], v[i], 1) : unsetenv(VARS[i]), 0);
    }
}

static void env_restore(char *saved[NVARS])
{
    for (int i = 0; i < NVARS; i++) {
        assert_int_equal(saved[i] ? setenv(VARS[i], saved[i], 1) : unsetenv(VARS[i]), 0);
        free(saved[i]);
    }
}

/* A verbose context on the fake driver, with a cache of its own. */
static jitop_ctx *fake_ctx(char **dir)
{
    *dir = jt_tmpdir();
    char *cache = jt_path(*dir, "cache");
    jitop_config cfg;
    jitop_config_init(&cfg);
    cfg.cache_dir = cache;
    cfg.verbose = 1;
    jitop_ctx *ctx = NULL;
    if (jitop_ctx_create(&cfg, &ctx) != JITOP_OK)
        fail_msg("jitop_ctx_create: %s", jitop_errmsg(NULL));
    assert_int_equal(jitop_ctx_cuda(ctx, NULL, NULL), JITOP_OK);
    free(cache);
    return ctx;
}

/* The context's first in-place call (a one-element softmax, a launch the
 * fake takes) under the settings v, with stderr captured: returns what was
 * logged (malloc'd). */
static char *first_call_logged(jitop_ctx *ctx, const char *dir, const char *const v[NVARS])
{
    const jitop__cuda_api *cu = jitop__cuda();
    assert_non_null(cu);
    CUdeviceptr x = 0;
    assert_int_equal(cu->cuMemAlloc(&x, 64), CUDA_SUCCESS);
    char *saved[NVARS];
    env_set(v, saved);
    jt_stderr cap;
    jt_stderr_begin(&cap, dir);
    const int rc = jitop_softmax_inplace(ctx, JITOP_FLOAT32, 1, 1, (void *)(uintptr_t)x, 1.f, 0,
                                         NULL);
    char *text = jt_stderr_end(&cap);
    env_restore(saved);
    if (rc != JITOP_OK)
        fail_msg("jitop_softmax_inplace: %s: %s", jitop_strerror(rc), jitop_errmsg(NULL));
    assert_int_equal(cu->cuMemFree(x), CUDA_SUCCESS);
    return text;
}

static void test_bad_settings_are_logged(void **state)
{
    (void)state;
    char *dir;
    jitop_ctx *ctx = fake_ctx(&dir);
    const char *const bad[NVARS] = {"8MB", "9", "-2", "2"};
    char *text = first_call_logged(ctx, dir, bad);
    static const char *const want[] = {
        "jitop: inplace: JITOP_INPLACE_CHUNK_MB=8MB ignored (want MiB in [1, 65536])\n",
        "jitop: inplace: JITOP_INPLACE_MM_BUFS=9 ignored (want 2, 3 or 4)\n",
        "jitop: inplace: JITOP_INPLACE_MM_COPY_SMS=-2 ignored (want SMs in [0, 65535])\n",
        "jitop: inplace: JITOP_INPLACE_MM_PANEL=2 ignored (want 0 or 1)\n",
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        if (strstr(text, want[i]) == NULL)
            fail_msg("no '%s' in the log:\n%s", want[i], text);
    free(text);
    /* made once: a later call reads nothing again and says nothing */
    const char *const none[NVARS] = {"x", "x", "x", "x"};
    text = first_call_logged(ctx, dir, none);
    if (strstr(text, "ignored") != NULL)
        fail_msg("a second call logged:\n%s", text);
    free(text);
    jitop_ctx_destroy(ctx);
    free(dir);
}

static void test_good_settings_are_quiet(void **state)
{
    (void)state;
    char *dir;
    jitop_ctx *ctx = fake_ctx(&dir);
    /* the panel kernel off: this call is the chunked path's (the panel
     * path on the fake: test_panel_path below) */
    const char *const good[NVARS] = {"8", "3", "16", "0"};
    char *text = first_call_logged(ctx, dir, good);
    if (strstr(text, "ignored") != NULL)
        fail_msg("good settings logged:\n%s", text);
    free(text);
    /* a product needs cuBLAS, which finds no GPU behind the fake: a clean
     * JITOP_ENOTFOUND before any scratch, partition asked for or not */
    const jitop__cuda_api *cu = jitop__cuda();
    CUdeviceptr a = 0, w = 0;
    assert_int_equal(cu->cuMemAlloc(&a, 4096 * 1024 * 2), CUDA_SUCCESS);
    assert_int_equal(cu->cuMemAlloc(&w, 1024 * 1024 * 2), CUDA_SUCCESS);
    const int rc = jitop_square_matmul_inplace(ctx, JITOP_FLOAT16, 4096, 1024,
                                               (void *)(uintptr_t)a, (void *)(uintptr_t)w, 0, 0,
                                               NULL);
    assert_int_equal(rc, JITOP_ENOTFOUND);
    assert_non_null(strstr(jitop_errmsg(NULL), "needs cuBLAS"));
    assert_int_equal(jitop_inplace_scratch_bytes(ctx), 0);
    assert_int_equal(cu->cuMemFree(a), CUDA_SUCCESS);
    assert_int_equal(cu->cuMemFree(w), CUDA_SUCCESS);
    jitop_ctx_destroy(ctx);
    free(dir);
}

/* One square product with stderr captured into *log (malloc'd). */
static int matmul_logged(jitop_ctx *ctx, const char *dir, int64_t m, CUdeviceptr a,
                         CUdeviceptr w, int trans, char **log)
{
    jt_stderr cap;
    jt_stderr_begin(&cap, dir);
    const int rc = jitop_square_matmul_inplace(ctx, JITOP_FLOAT16, m, 1024, (void *)(uintptr_t)a,
                                               (void *)(uintptr_t)w, trans, 0, NULL);
    *log = jt_stderr_end(&cap);
    return rc;
}

/* A context whose in-place state is made with the panel path forced on,
 * its kernel's build reported with regs registers a thread (the fake says
 * 16 otherwise; the kernel's setmaxnreg split needs 168). */
static jitop_ctx *panel_ctx(const char *regs, char **dir)
{
    assert_int_equal(setenv("FAKE_CUDA_NUM_REGS", regs, 1), 0);
    jitop_ctx *ctx = fake_ctx(dir);
    const char *const on[NVARS] = {NULL, NULL, NULL, "1"};
    free(first_call_logged(ctx, *dir, on));
    return ctx;
}

/* The panel kernel's host side on the fake driver (CC 9.0): the sm_90a
 * build (real NVRTC), its launch (and TF32's transpose), the tensor maps
 * (the fake checks their alignment and boxes), the cooperative launch, the
 * counters zeroed once per scratch buffer (the kernel leaves them zero) and
 * the scratch within the bound; a call it cannot take (A not
 * 16-byte aligned) goes to the chunked path (here: no cuBLAS behind the
 * fake, a clean JITOP_ENOTFOUND) and the log says why. The kernel's
 * results need the GPU: tests/gpu/test_inplace.c. */
static void test_panel_path(void **state)
{
    (void)state;
    char *dir, *text;
    jitop_ctx *ctx = panel_ctx("168", &dir);
    const jitop__cuda_api *cu = jitop__cuda();
    CUdeviceptr a = 0, w = 0;
    assert_int_equal(cu->cuMemAlloc(&a, 4096 * 1024 * 2 + 16), CUDA_SUCCESS);
    assert_int_equal(cu->cuMemAlloc(&w, 1024 * 1024 * 2), CUDA_SUCCESS);
    assert_int_equal(a % 16, 0);
    for (int trans = 0; trans < 2; trans++) {
        fake_cuda_stats st0, st;
        g_fake_stats(&st0);
        const int rc = matmul_logged(ctx, dir, 4096, a, w, trans, &text);
        if (rc != JITOP_OK)
            fail_msg("trans %d: %s: %s\n%s", trans, jitop_strerror(rc), jitop_errmsg(NULL), text);
        if (strstr(text, "chunked") != NULL)
            fail_msg("trans %d took the chunked path:\n%s", trans, text);
        free(text);
        assert_int_equal(jitop__inplace_panel_calls(ctx), (size_t)trans + 1);
        g_fake_stats(&st);
        /* the product's launch, the only one (16-bit A W reads W N-major):
         * cooperative, 384 threads, the kernel's shared memory (3 stages of
         * 48 KiB, the 64 KiB tile, 1 KiB of alignment), whole groups of 4
         * blocks, at most one a tile (32 panels x 4) and at most the 132
         * the fake holds; the counters zeroed by the first call only */
        assert_int_equal(st.launches - st0.launches, 1);
        assert_int_equal(st.memsets - st0.memsets, trans ? 0 : 1);
        assert_int_equal(st.last_cooperative, 1);
        assert_int_equal(st.last_block[0], 384);
        assert_int_equal(st.last_block[1] * st.last_block[2], 1);
        assert_int_equal(st.last_smem, 3 * (128 + 256) * 64 * 2 + 128 * 256 * 2 + 1024);
        assert_int_equal(st.last_grid[0], 128);
        assert_int_equal(st.last_grid[1] * st.last_grid[2], 1);
        /* two maps: A in boxes of 64 x 128, B (the last) in 64 x 256 (K
         * contiguous, A W^T) or 64 x 64 (N-major, A W) */
        assert_int_equal(st.tensor_maps - st0.tensor_maps, 2);
        assert_int_equal(st.last_box[0], 64);
        assert_int_equal(st.last_box[1], trans ? 256 : 64);
    }
    /* the counters only: two a block */
    const size_t held = jitop_inplace_scratch_bytes(ctx);
    if (held < 128 * 8 || held > 4096 ||
        held > jitop_square_matmul_scratch_bound(JITOP_FLOAT16, 1024))
        fail_msg("scratch %zu bytes: not the counters within the bound", held);
    /* A at 2 bytes past 16: the chunked path, which needs cuBLAS */
    int rc = matmul_logged(ctx, dir, 4095, a + 2, w, 0, &text);
    assert_int_equal(rc, JITOP_ENOTFOUND);
    assert_non_null(strstr(jitop_errmsg(NULL), "needs cuBLAS"));
    if (strstr(text, "the chunked path (a or w not 16-byte aligned)") == NULL)
        fail_msg("no reason logged:\n%s", text);
    free(text);
    assert_int_equal(jitop__inplace_panel_calls(ctx), 2);
    /* TF32: float32 A and W in tiles of 128 columns, groups of 8 (32 panels x
     * 8 tiles: 128 blocks), 4 stages, boxes of 32 floats, W^T by the
     * transpose first (a larger scratch: a new buffer, its counters zeroed
     * again); full float32 stays on the chunked path (no cuBLAS here:
     * JITOP_ENOTFOUND) */
    CUdeviceptr af = 0, wf = 0;
    assert_int_equal(cu->cuMemAlloc(&af, 4096 * 1024 * 4), CUDA_SUCCESS);
    assert_int_equal(cu->cuMemAlloc(&wf, 1024 * 1024 * 4), CUDA_SUCCESS);
    fake_cuda_stats st0, st;
    g_fake_stats(&st0);
    rc = jitop_square_matmul_inplace(ctx, JITOP_FLOAT32, 4096, 1024, (void *)(uintptr_t)af,
                                     (void *)(uintptr_t)wf, 0, JITOP_MATMUL_TF32, NULL);
    if (rc != JITOP_OK)
        fail_msg("TF32: %s: %s", jitop_strerror(rc), jitop_errmsg(NULL));
    g_fake_stats(&st);
    assert_int_equal(jitop__inplace_panel_calls(ctx), 3);
    assert_int_equal(st.launches - st0.launches, 2);
    assert_int_equal(st.memsets - st0.memsets, 1);
    assert_true(jitop_inplace_scratch_bytes(ctx) >= (size_t)1024 * 1024 * 4);
    assert_int_equal(st.last_cooperative, 1);
    assert_int_equal(st.last_smem, 4 * (128 + 128) * 32 * 4 + 128 * 128 * 4 + 1024);
    assert_int_equal(st.last_grid[0], 128);
    assert_int_equal(st.tensor_maps - st0.tensor_maps, 2);
    assert_int_equal(st.last_box[0], 32);
    assert_int_equal(st.last_box[1], 128);
    /* m 1: a grid of 8, W^T right after its counters, over the 128-block
     * grid's: no zeroing for this call, but the next large grid zeroes
     * again (its counters are W^T's bytes now) */
    const int64_t tm[] = {1, 4096, 4096};
    const long tz[] = {0, 1, 0};
    for (int i = 0; i < 3; i++) {
        g_fake_stats(&st0);
        rc = jitop_square_matmul_inplace(ctx, JITOP_FLOAT32, tm[i], 1024, (void *)(uintptr_t)af,
                                         (void *)(uintptr_t)wf, 0, JITOP_MATMUL_TF32, NULL);
        if (rc != JITOP_OK)
            fail_msg("TF32 m %lld: %s: %s", (long long)tm[i], jitop_strerror(rc),
                     jitop_errmsg(NULL));
        g_fake_stats(&st);
        assert_int_equal(st.last_grid[0], tm[i] == 1 ? 8 : 128);
        if (st.memsets - st0.memsets != tz[i])
            fail_msg("TF32 call %d (m %lld): %ld zeroings of the counters, want %ld", i,
                     (long long)tm[i], st.memsets - st0.memsets, tz[i]);
    }
    assert_int_equal(jitop__inplace_panel_calls(ctx), 6);
    rc = jitop_square_matmul_inplace(ctx, JITOP_FLOAT32, 4096, 1024, (void *)(uintptr_t)af,
                                     (void *)(uintptr_t)wf, 0, 0, NULL);
    assert_int_equal(rc, JITOP_ENOTFOUND);
    assert_int_equal(jitop__inplace_panel_calls(ctx), 6);
    assert_int_equal(cu->cuMemFree(af), CUDA_SUCCESS);
    assert_int_equal(cu->cuMemFree(wf), CUDA_SUCCESS);
    /* a device that refuses the cooperative grid: A untouched by the panel
     * path, the chunked one runs (no cuBLAS here: JITOP_ENOTFOUND, not the
     * launch's error), and from then on the context does not try again */
    assert_int_equal(setenv("FAKE_CUDA_NO_COOPERATIVE", "1", 1), 0);
    for (int i = 0; i < 2; i++) {
        g_fake_stats(&st0);
        const int r2 = matmul_logged(ctx, dir, 4096, a, w, 1, &text);
        g_fake_stats(&st);
        assert_int_equal(r2, JITOP_ENOTFOUND);
        assert_non_null(strstr(jitop_errmsg(NULL), "needs cuBLAS"));
        if (i == 0 && strstr(text, "sqmm_panel launch failed") == NULL)
            fail_msg("the refused launch not logged:\n%s", text);
        /* the first call tried the launch once, the second not at all */
        assert_int_equal(st.tensor_maps - st0.tensor_maps, i == 0 ? 2 : 0);
        free(text);
    }
    assert_int_equal(unsetenv("FAKE_CUDA_NO_COOPERATIVE"), 0);
    assert_int_equal(jitop__inplace_panel_calls(ctx), 6);
    assert_int_equal(jitop_inplace_release(ctx), JITOP_OK);
    assert_int_equal(jitop_inplace_scratch_bytes(ctx), 0);
    jitop_ctx_destroy(ctx);
    free(dir);
    /* a build with other than 168 registers a thread (another ptxas, say):
     * never launched (its consumers would wait for registers forever), the
     * chunked path runs and the log says why */
    ctx = panel_ctx("160", &dir);
    fake_cuda_stats st1;
    g_fake_stats(&st1);
    rc = matmul_logged(ctx, dir, 4096, a, w, 0, &text);
    g_fake_stats(&st);
    assert_int_equal(rc, JITOP_ENOTFOUND);
    assert_int_equal(st.launches - st1.launches, 0);
    if (strstr(text, "has 160 registers a thread, not the 168") == NULL)
        fail_msg("the register count not logged:\n%s", text);
    free(text);
    assert_int_equal(jitop__inplace_panel_calls(ctx), 0);
    jitop_ctx_destroy(ctx);
    assert_int_equal(unsetenv("FAKE_CUDA_NUM_REGS"), 0);
    assert_int_equal(cu->cuMemFree(a), CUDA_SUCCESS);
    assert_int_equal(cu->cuMemFree(w), CUDA_SUCCESS);
    free(dir);
}

/* CU_STREAM_PER_THREAD is another stream in every thread: two threads'
 * calls on it get a scratch each (one shared buffer would have both
 * threads' kernels use the same counters and products at once), while one
 * thread's calls keep reusing its own. */
typedef struct {
    jitop_ctx *ctx;
    CUdeviceptr a, w;
    int rc;
} pts_arg;

static void *pts_call(void *p)
{
    pts_arg *x = p;
    for (int i = 0; i < 2 && x->rc == JITOP_OK; i++)
        x->rc = jitop_square_matmul_inplace(x->ctx, JITOP_FLOAT16, 4096, 1024,
                                            (void *)(uintptr_t)x->a, (void *)(uintptr_t)x->w, 0,
                                            0, (void *)CU_STREAM_PER_THREAD);
    return NULL;
}

static void test_per_thread_stream_scratch(void **state)
{
    (void)state;
    char *dir;
    jitop_ctx *ctx = panel_ctx("168", &dir);
    const jitop__cuda_api *cu = jitop__cuda();
    pts_arg x[2];
    for (int i = 0; i < 2; i++) {
        x[i].ctx = ctx;
        x[i].rc = JITOP_OK;
        assert_int_equal(cu->cuMemAlloc(&x[i].a, 4096 * 1024 * 2), CUDA_SUCCESS);
        assert_int_equal(cu->cuMemAlloc(&x[i].w, 1024 * 1024 * 2), CUDA_SUCCESS);
    }
    pts_call(&x[0]); /* this thread: one scratch */
    assert_int_equal(x[0].rc, JITOP_OK);
    const size_t one = jitop_inplace_scratch_bytes(ctx);
    assert_true(one > 0);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, pts_call, &x[1]), 0);
    assert_int_equal(pthread_join(th, NULL), 0);
    if (x[1].rc != JITOP_OK)
        fail_msg("second thread: %s", jitop_strerror(x[1].rc));
    assert_int_equal(jitop_inplace_scratch_bytes(ctx), 2 * one);
    pts_call(&x[0]); /* this thread's again: no third */
    assert_int_equal(jitop_inplace_scratch_bytes(ctx), 2 * one);
    assert_int_equal(jitop__inplace_panel_calls(ctx), 6);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(cu->cuMemFree(x[i].a), CUDA_SUCCESS);
        assert_int_equal(cu->cuMemFree(x[i].w), CUDA_SUCCESS);
    }
    assert_int_equal(jitop_inplace_release(ctx), JITOP_OK);
    jitop_ctx_destroy(ctx);
    assert_int_equal(unsetenv("FAKE_CUDA_NUM_REGS"), 0);
    free(dir);
}

int main(int argc, char **argv)
{
    (void)argc;
    int started = jt_fake_cuda_start(argv, &g_fake_stats);
    if (started >= 0)
        return started;
    /* libcublas held for the program's life, as tests/cpu/test_cublas_dl_fake.c
     * says why: its own initializers' memory is not jitop's leak */
    const char *home = getenv("CUDA_HOME");
    char path[4096];
    void *held = dlopen("libcublas.so.13", RTLD_NOW | RTLD_LOCAL);
    if (!held && home &&
        snprintf(path, sizeof path, "%s/lib64/libcublas.so.13", home) < (int)sizeof path)
        held = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!held)
        held = dlopen("/usr/local/cuda/lib64/libcublas.so.13", RTLD_NOW | RTLD_LOCAL);
    (void)held;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bad_settings_are_logged),
        cmocka_unit_test(test_good_settings_are_quiet),
        cmocka_unit_test(test_panel_path),
        cmocka_unit_test(test_per_thread_stream_scratch),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    jt_cleanup();
    return failed;
}
