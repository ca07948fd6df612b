/* NVRTC's precompiled headers in the compile path (build/pch.c), with real
 * NVRTC: a PCH never changes a binary (byte for byte against compiles
 * without), an edited header is never served from the old PCH, a PCH NVRTC
 * cannot read is compiled around, a forked child uses its parent's, and
 * the file goes with the context. Small preambles: this machine is slow. */
#include "testutil.h"

#include "build/build.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define PRE "#include \"common.h\"\n#include <cuda_fp16.h>\n"

static const char *const src_a =
    PRE "extern \"C\" __global__ void ka(float *x) { x[threadIdx.x] *= SCALE; }\n";
static const char *const src_b =
    PRE "extern \"C\" __global__ void kb(__half *x) {\n"
        "    x[threadIdx.x] = __float2half(__half2float(x[threadIdx.x]) + SCALE); }\n";
static const char *const src_c =
    PRE "extern \"C\" __global__ void kc(float *x) { x[threadIdx.x] -= SCALE; }\n";

struct proj {
    char *dir, *a, *b, *c, *h;
};

static void proj_make(struct proj *p)
{
    p->dir = jt_tmpdir();
    p->h = jt_write(p->dir, "common.h", "#pragma once\n#define SCALE 2.0f\n");
    p->a = jt_write(p->dir, "a.cu", src_a);
    p->b = jt_write(p->dir, "b.cu", src_b);
    p->c = jt_write(p->dir, "c.cu", src_c);
    jitop__recent_window_ns = 0;
}

static void proj_free(struct proj *p)
{
    free(p->dir); free(p->a); free(p->b); free(p->c); free(p->h);
}

/* The binary of path for sm_90 through a new cache of its own (so that
 * nothing is a hit), with JITOP_PCH as given. */
static unsigned char *compile_names(jitop_ctx *ctx, const char *path, const char *const *names,
                                    size_t nnames, size_t *size)
{
    jitop__unit u;
    jitop__built b;
    assert_int_equal(jitop__unit_init(&u, path, NULL, NULL, 0, names, nnames, "sm_90"), JITOP_OK);
    int st = jitop__build_unit(ctx, &u, &b);
    if (st != JITOP_OK)
        fail_msg("build %s: %s", path, jitop_errmsg(ctx));
    assert_false(b.cached);
    assert_non_null(b.entry.bin.data);
    assert_null(b.entry.bin.log); /* NVRTC's line about the PCH is not kept */
    unsigned char *copy = malloc(b.entry.bin.size);
    assert_non_null(copy);
    memcpy(copy, b.entry.bin.data, b.entry.bin.size);
    *size = b.entry.bin.size;
    jitop__built_free(&b);
    jitop__unit_free(&u);
    return copy;
}

static unsigned char *compile(jitop_ctx *ctx, const char *path, size_t *size)
{
    return compile_names(ctx, path, NULL, 0, size);
}

/* The binary without any PCH, in a context of its own. */
static unsigned char *compile_plain_names(const char *path, const char *const *names,
                                          size_t nnames, size_t *size)
{
    char *cache = jt_tmpdir();
    setenv("JITOP_PCH", "0", 1);
    jitop_ctx *ctx = jt_ctx(cache, "sm_90");
    unsigned char *bin = compile_names(ctx, path, names, nnames, size);
    jitop_ctx_destroy(ctx);
    setenv("JITOP_PCH", "1", 1);
    free(cache);
    return bin;
}

static unsigned char *compile_plain(const char *path, size_t *size)
{
    return compile_plain_names(path, NULL, 0, size);
}

static void assert_same(const unsigned char *x, size_t nx, const unsigned char *y, size_t ny)
{
    assert_int_equal(nx, ny);
    assert_memory_equal(x, y, nx);
}

static int pch_files(const char *cache)
{
    char *dir = jt_path(cache, "pch");
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL)
        n += strstr(e->d_name, ".pch") != NULL;
    if (d)
        closedir(d);
    free(dir);
    return n;
}

static void test_pch_changes_no_binary(void **state)
{
    (void)state;
    struct proj p;
    proj_make(&p);
    size_t na0, nb0, na, nb;
    unsigned char *a0 = compile_plain(p.a, &na0), *b0 = compile_plain(p.b, &nb0);
    char *cache = jt_tmpdir();
    setenv("JITOP_PCH", "1", 1);
    jitop_ctx *ctx = jt_ctx(cache, "sm_90");
    jitop__pch_counts c0 = jitop__pch_counts_get();
    unsigned char *a = compile(ctx, p.a, &na); /* makes the PCH */
    jitop__pch_counts c1 = jitop__pch_counts_get();
    assert_int_equal(c1.created, c0.created + 1);
    assert_int_equal(pch_files(cache), 1);
    unsigned char *b = compile(ctx, p.b, &nb); /* uses it */
    jitop__pch_counts c2 = jitop__pch_counts_get();
    assert_int_equal(c2.used, c1.used + 1);
    assert_int_equal(c2.fell_back, c1.fell_back);
    assert_same(a, na, a0, na0);
    assert_same(b, nb, b0, nb0);

    /* A forked child (a `jitop build` worker) uses its parent's PCH. */
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        size_t nc;
        jitop__pch_counts k0 = jitop__pch_counts_get();
        free(compile(ctx, p.c, &nc));
        jitop__pch_counts k1 = jitop__pch_counts_get();
        /* the child's copies, freed so that valgrind (which checks a
         * forked child's leaks at its _exit) has none to report */
        free(a0);
        free(b0);
        free(a);
        free(b);
        free(cache);
        _exit(k1.used == k0.used + 1 && k1.fell_back == k0.fell_back ? 0 : 1);
    }
    int ws;
    assert_int_equal(waitpid(pid, &ws, 0), pid);
    assert_true(WIFEXITED(ws));
    assert_int_equal(WEXITSTATUS(ws), 0);
    assert_int_equal(pch_files(cache), 1); /* the child left its parent's file */

    jitop_ctx_destroy(ctx); /* removes the PCH file */
    assert_int_equal(pch_files(cache), 0);
    free(a0); free(b0); free(a); free(b); free(cache);
    proj_free(&p);
}

static void test_edited_header_never_served_from_old_pch(void **state)
{
    (void)state;
    struct proj p;
    proj_make(&p);
    char *cache = jt_tmpdir();
    setenv("JITOP_PCH", "1", 1);
    jitop_ctx *ctx = jt_ctx(cache, "sm_90");
    size_t na, nb, nb0, na2, na0;
    free(compile(ctx, p.a, &na)); /* the PCH, made with SCALE 2.0f */
    /* Same size, a new value: the edit NVRTC's own check missed. */
    free(jt_write(p.dir, "common.h", "#pragma once\n#define SCALE 5.0f\n"));
    jitop__pch_counts c0 = jitop__pch_counts_get();
    unsigned char *b = compile(ctx, p.b, &nb);
    jitop__pch_counts c1 = jitop__pch_counts_get();
    unsigned char *b0 = compile_plain(p.b, &nb0);
    assert_same(b, nb, b0, nb0);
    assert_int_equal(c1.stale, c0.stale + 1);
    assert_int_equal(c1.used, c0.used);
    assert_int_equal(c1.created, c0.created + 1); /* a new one, of the edited header */
    /* a (its key changed with the header) now uses the new PCH */
    unsigned char *a2 = compile(ctx, p.a, &na2);
    jitop__pch_counts c2 = jitop__pch_counts_get();
    assert_int_equal(c2.used, c1.used + 1);
    unsigned char *a0 = compile_plain(p.a, &na0);
    assert_same(a2, na2, a0, na0);
    assert_int_equal(pch_files(cache), 1);
    jitop_ctx_destroy(ctx);
    assert_int_equal(pch_files(cache), 0);
    free(b); free(b0); free(a2); free(a0); free(cache);
    proj_free(&p);
}

/* A program with name expressions (template instances, the fold rule's
 * one program per source) gets the same binary with a PCH. */
static void test_name_expressions_same_binary(void **state)
{
    (void)state;
    struct proj p;
    proj_make(&p);
    char *t = jt_write(p.dir, "t.cu",
                       PRE "template <int N> __global__ void tk(float *x) {\n"
                           "    x[threadIdx.x] *= SCALE * N; }\n");
    const char *names[] = {"tk<2>", "tk<3>"};
    char *cache = jt_tmpdir();
    setenv("JITOP_PCH", "1", 1);
    jitop_ctx *ctx = jt_ctx(cache, "sm_90");
    size_t na, nt, nt0;
    free(compile(ctx, p.a, &na)); /* makes the PCH */
    jitop__pch_counts c0 = jitop__pch_counts_get();
    unsigned char *bt = compile_names(ctx, t, names, 2, &nt);
    jitop__pch_counts c1 = jitop__pch_counts_get();
    assert_int_equal(c1.used, c0.used + 1);
    assert_int_equal(c1.fell_back, c0.fell_back);
    unsigned char *bt0 = compile_plain_names(t, names, 2, &nt0);
    assert_same(bt, nt, bt0, nt0);
    jitop_ctx_destroy(ctx);
    free(bt); free(bt0); free(t); free(cache);
    proj_free(&p);
}

/* A header that appears where the preamble looked and found nothing (the
 * source's folder, ahead of an -I) changes what it reads: no use. */
static void test_shadowing_header_is_not_served(void **state)
{
    (void)state;
    char *dir = jt_tmpdir(), *cache = jt_tmpdir();
    free(jt_write(dir, "inc/common.h", "#pragma once\n#define SCALE 2.0f\n"));
    char *a = jt_write(dir, "a.cu", src_a), *b = jt_write(dir, "b.cu", src_b);
    char *inc = jt_path(dir, "inc"), opt[4200];
    snprintf(opt, sizeof opt, "-I%s", inc);
    const char *opts[] = {opt};
    setenv("JITOP_PCH", "1", 1);
    jitop_ctx *ctx = jt_ctx(cache, "sm_90");
    jitop_build_result r;
    assert_int_equal(jitop_build(ctx, a, "sm_90", opts, 1, NULL, 0, &r), JITOP_OK);
    free(jt_write(dir, "common.h", "#pragma once\n#define SCALE 7.0f\n"));
    jitop__pch_counts c0 = jitop__pch_counts_get();
    assert_int_equal(jitop_build(ctx, b, "sm_90", opts, 1, NULL, 0, &r), JITOP_OK);
    jitop__pch_counts c1 = jitop__pch_counts_get();
    assert_int_equal(c1.stale, c0.stale + 1);
    assert_int_equal(c1.used, c0.used);
    jitop_ctx_destroy(ctx);
    free(dir); free(cache); free(a); free(b); free(inc);
}

/* A PCH NVRTC cannot read: the compile is done again without it. */
static void test_unreadable_pch_fails_open(void **state)
{
    (void)state;
    struct proj p;
    proj_make(&p);
    char *cache = jt_tmpdir();
    setenv("JITOP_PCH", "1", 1);
    jitop_ctx *ctx = jt_ctx(cache, "sm_90");
    size_t na, nb, nb0;
    free(compile(ctx, p.a, &na));
    char *dir = jt_path(cache, "pch");
    DIR *d = opendir(dir);
    assert_non_null(d);
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (strstr(e->d_name, ".pch")) {
            char *f = jt_path(dir, e->d_name);
            assert_int_equal(truncate(f, 100), 0);
            free(f);
        }
    closedir(d);
    jitop__pch_counts c0 = jitop__pch_counts_get();
    unsigned char *b = compile(ctx, p.b, &nb);
    jitop__pch_counts c1 = jitop__pch_counts_get();
    assert_int_equal(c1.fell_back, c0.fell_back + 1);
    unsigned char *b0 = compile_plain(p.b, &nb0);
    assert_same(b, nb, b0, nb0);
    jitop_ctx_destroy(ctx);
    assert_int_equal(pch_files(cache), 0);
    free(b); free(b0); free(dir); free(cache);
    proj_free(&p);
}

/* JITOP_PCH=0 makes none, nor does the default in a library process;
 * with JITOP_PCH=auto one compile of a light preamble makes none, the
 * second makes one. */
static void test_policy(void **state)
{
    (void)state;
    struct proj p;
    proj_make(&p);
    char *cache = jt_tmpdir();
    setenv("JITOP_PCH", "0", 1);
    jitop_ctx *ctx = jt_ctx(cache, "sm_90");
    size_t n;
    jitop__pch_counts c0 = jitop__pch_counts_get();
    free(compile(ctx, p.a, &n));
    free(compile(ctx, p.b, &n));
    jitop__pch_counts c1 = jitop__pch_counts_get();
    assert_int_equal(c1.created, c0.created);
    assert_int_equal(c1.used, c0.used);
    jitop_ctx_destroy(ctx);
    jt_rm_rf(cache);
    setenv("JITOP_PCH", "auto", 1);
    ctx = jt_ctx(cache, "sm_90");
    free(compile(ctx, p.a, &n)); /* first of its preamble: none */
    jitop__pch_counts c2 = jitop__pch_counts_get();
    assert_int_equal(c2.created, c1.created);
    free(compile(ctx, p.b, &n)); /* second: makes one */
    jitop__pch_counts c3 = jitop__pch_counts_get();
    assert_int_equal(c3.created, c2.created + 1);
    free(compile(ctx, p.c, &n)); /* third: uses it */
    jitop__pch_counts c4 = jitop__pch_counts_get();
    assert_int_equal(c4.used, c3.used + 1);
    jitop_ctx_destroy(ctx);
    assert_int_equal(pch_files(cache), 0);
    /* unset: a library process makes none (the preambles were seen above,
     * which JITOP_PCH=auto would count) */
    jt_rm_rf(cache);
    unsetenv("JITOP_PCH");
    ctx = jt_ctx(cache, "sm_90");
    jitop__pch_counts c5 = jitop__pch_counts_get();
    free(compile(ctx, p.a, &n));
    free(compile(ctx, p.b, &n));
    jitop__pch_counts c6 = jitop__pch_counts_get();
    assert_int_equal(c6.created, c5.created);
    assert_int_equal(c6.used, c5.used);
    jitop_ctx_destroy(ctx);
    assert_int_equal(pch_files(cache), 0);
    free(cache);
    proj_free(&p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pch_changes_no_binary),
        cmocka_unit_test(test_edited_header_never_served_from_old_pch),
        cmocka_unit_test(test_name_expressions_same_binary),
        cmocka_unit_test(test_shadowing_header_is_not_served),
        cmocka_unit_test(test_unreadable_pch_fails_open),
        cmocka_unit_test(test_policy),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    jt_cleanup();
    return rc;
}
