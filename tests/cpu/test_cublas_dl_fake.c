/* The ops' cuBLAS opening (src/ops/cublas_dl.c) where no handle can be
 * made: on the fake CUDA driver of tests/fakecuda (libcublas's own runtime
 * finds no GPU behind it) and in a compile-only context (no driver at
 * all). Either way it must return NULL, leave nothing of its own
 * allocated (ASan, valgrind) and say why in the caller's words. The success path
 * needs a GPU: tests/gpu/test_lltm.c and test_inplace.c run it. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fakecuda.h"
#include "jitop.h"
#include "load/driver.h"
#include "ops/cublas_dl.h"
#include "testutil.h"

static fake_cuda_stats_fn g_fake_stats;

typedef struct probe {
    jitop__cublas blas;
    int after; /* the op's own fields follow the shared part */
} probe;

/* Runs jitop__cublas_open on ctx with stderr (the verbose log) captured;
 * returns what was logged (malloc'd). */
static char *open_logged(jitop_ctx *ctx, void **out)
{
    static const char *const names[] = {"cublasGemmEx", "cublasSgemm_v2"};
    void *fns[2] = {NULL, NULL};
    char *dir = jt_tmpdir();
    char *log = jt_path(dir, "stderr");
    fflush(stderr);
    int saved = dup(2);
    FILE *f = fopen(log, "w");
    assert_non_null(f);
    assert_true(saved >= 0);
    assert_true(dup2(fileno(f), 2) >= 0);
    *out = jitop__cublas_open(ctx, "probe", "; the probe runs without it", sizeof(probe), names,
                              fns, 2);
    fflush(stderr);
    assert_true(dup2(saved, 2) >= 0);
    assert_int_equal(close(saved), 0);
    assert_int_equal(fclose(f), 0);
    char *text = jt_read(log);
    free(log);
    free(dir);
    return text;
}

/* The one line a failed open logs, whichever step failed (libcublas.so.13
 * may be missing where this runs). */
static void expect_unavailable(const char *text)
{
    const char *found = "jitop: probe: cuBLAS not available (setup failed); the probe runs "
                        "without it\n";
    const char *missing = "jitop: probe: cuBLAS not available (libcublas.so.13 not found); the "
                          "probe runs without it\n";
    if (strcmp(text, found) != 0 && strcmp(text, missing) != 0)
        fail_msg("logged '%s'", text);
}

/* A verbose context, with the driver open on the fake or compile-only (no
 * driver at all): jitop__cublas_open must fail there and log why. */
static void expect_open_fails(int compile_only)
{
    char *dir = jt_tmpdir();
    char *cache = jt_path(dir, "cache");
    jitop_config cfg;
    jitop_config_init(&cfg);
    cfg.cache_dir = cache;
    cfg.compile_only = compile_only;
    cfg.arch = compile_only ? "sm_90" : NULL;
    cfg.verbose = 1;
    jitop_ctx *ctx = NULL;
    if (jitop_ctx_create(&cfg, &ctx) != JITOP_OK)
        fail_msg("jitop_ctx_create: %s", jitop_errmsg(NULL));
    if (!compile_only)
        assert_int_equal(jitop_ctx_cuda(ctx, NULL, NULL), JITOP_OK);
    assert_true((jitop__driver_of(ctx) == NULL) == compile_only);
    void *cb = (void *)1;
    char *text = open_logged(ctx, &cb);
    assert_null(cb);
    expect_unavailable(text);
    free(text);
    jitop_ctx_destroy(ctx);
    free(cache);
    free(dir);
}

static void test_no_handle_on_the_fake_driver(void **state)
{
    (void)state;
    expect_open_fails(0);
}

static void test_no_driver_in_a_compile_only_context(void **state)
{
    (void)state;
    expect_open_fails(1);
}

int main(int argc, char **argv)
{
    (void)argc;
    int started = jt_fake_cuda_start(argv, &g_fake_stats);
    if (started >= 0)
        return started;
    /* libcublas, where it is found, held for the program's life as by an
     * application that links it: what its own initializers allocate is not
     * freed at its dlclose, and LeakSanitizer would report that against an
     * unknown module. Held here, the tests' opens and closes only count
     * references, and any leak left is jitop's. */
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
        cmocka_unit_test(test_no_handle_on_the_fake_driver),
        cmocka_unit_test(test_no_driver_in_a_compile_only_context),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    jt_cleanup();
    return failed;
}
