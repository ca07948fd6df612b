/* Include scanning, stat data, content hashes and the stat fast path. */
#include "testutil.h"

#include "build/build.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static jitop__unit make_unit(const char *src, const char *inc_dir)
{
    jitop__unit u;
    const char *opts[2] = {"-I", inc_dir};
    assert_int_equal(jitop__unit_init(&u, src, NULL, opts, inc_dir ? 2 : 0, NULL, 0, "sm_90"),
                     JITOP_OK);
    return u;
}

static size_t dep_index(const jitop__deps *d, const char *path)
{
    for (size_t i = 0; i < d->n; i++)
        if (strcmp(d->v[i].path, path) == 0)
            return i;
    fail_msg("%s is not among the %zu deps", path, d->n);
    return 0;
}

static void assert_not_dep(const jitop__deps *d, const char *path)
{
    for (size_t i = 0; i < d->n; i++)
        if (strcmp(d->v[i].path, path) == 0)
            fail_msg("%s should not be a dependency", path);
}

/* Moves every dep's mtime 10 s into the past and closes the recent window,
 * so that the recent-modification rule does not get in the way (a ctime
 * cannot be set back: without the window, a file written just now counts as
 * old). Tests that need the window put it back. */
static void age_files(char **paths, size_t n)
{
    for (size_t i = 0; i < n; i++)
        jt_touch(paths[i], -10);
    jitop__recent_window_ns = 0;
}

static void test_nested_cycles_comments_builtins(void **state)
{
    (void)state;
    char *dir = jt_tmpdir();
    char *inc = jt_tmpdir();
    char *src = jt_write(dir, "main.cu",
                         "// #include \"commented.cuh\"\n"
                         "/* #include \"commented.cuh\"\n"
                         "   still a comment */\n"
                         "#include \"a.cuh\"\n"
                         "  #  include <b.cuh>\n"
                         "#include <cuda_fp16.h>\n"
                         "const char *s = \"#include \\\"commented.cuh\\\"\";\n"
                         "#include \"a.cuh\"\n"
                         "__global__ void k() {}\n");
    char *a = jt_write(dir, "a.cuh", "#pragma once\n#include \"sub/c.cuh\"\n");
    char *c = jt_write(dir, "sub/c.cuh", "#pragma once\n#include \"../a.cuh\" // cycle\n#include <b.cuh>\n");
    char *b = jt_write(inc, "b.cuh", "#pragma once\n#include <type_traits>\n");
    char *commented = jt_write(dir, "commented.cuh", "#error never included\n");
    jitop__unit u = make_unit(src, inc);
    jitop__deps d;
    char *text = NULL;
    assert_int_equal(jitop__deps_scan(&u, &d, &text), JITOP_OK);
    assert_int_equal(d.n, 4);
    assert_string_equal(d.v[0].path, src);
    dep_index(&d, a);
    dep_index(&d, b);
    dep_index(&d, c);
    assert_not_dep(&d, commented);
    assert_non_null(strstr(text, "__global__ void k"));
    free(text);
    jitop__deps_free(&d);
    jitop__unit_free(&u);
    free(src); free(a); free(b); free(c); free(commented); free(inc); free(dir);
}

static void test_stat_and_hash_recorded(void **state)
{
    (void)state;
    char *dir = jt_tmpdir();
    const char *body = "#include \"h.cuh\"\n__global__ void k() {}\n";
    char *src = jt_write(dir, "k.cu", body);
    char *h = jt_write(dir, "h.cuh", "#define H 1\n");
    jitop__unit u = make_unit(src, NULL);
    jitop__deps d;
    char *text = NULL;
    assert_int_equal(jitop__deps_scan(&u, &d, &text), JITOP_OK);
    assert_string_equal(text, body);
    struct stat st;
    assert_int_equal(stat(src, &st), 0);
    assert_int_equal(d.v[0].size, st.st_size);
    assert_int_equal(d.v[0].mtime_ns, (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec);
    assert_int_equal(d.v[0].ino, st.st_ino);
    assert_int_equal(d.v[0].dev, st.st_dev);
    assert_true(XXH128_isEqual(d.v[0].hash, XXH3_128bits(body, strlen(body))));
    size_t hi = dep_index(&d, h);
    assert_true(XXH128_isEqual(d.v[hi].hash, XXH3_128bits("#define H 1\n", 12)));
    free(text);
    jitop__deps_free(&d);
    jitop__unit_free(&u);
    free(src); free(h); free(dir);
}

static void test_quoted_include_prefers_including_dir(void **state)
{
    (void)state;
    char *dir = jt_tmpdir();
    char *inc = jt_tmpdir();
    const char *body = "#include \"sub/x.cuh\"\n#include <h.cuh>\n"
                       "#if !defined(NEAR) || !defined(TOP) || defined(FAR)\n"
                       "#error NVRTC resolved another header than the scanner\n"
                       "#endif\n";
    char *src = jt_write(dir, "k.cu", body);
    char *x = jt_write(dir, "sub/x.cuh", "#include \"h.cuh\"\n");
    char *near = jt_write(dir, "sub/h.cuh", "#define NEAR\n");
    char *top = jt_write(dir, "h.cuh", "#define TOP\n");
    char *far = jt_write(inc, "h.cuh", "#define FAR\n");
    jitop__unit u = make_unit(src, inc);
    jitop__deps d;
    char *text = NULL;
    assert_int_equal(jitop__deps_scan(&u, &d, &text), JITOP_OK);
    /* "h.cuh" from sub/x.cuh: beside x.cuh; <h.cuh>: the include dirs in
     * order, the source's own directory first. */
    dep_index(&d, near);
    dep_index(&d, top);
    assert_not_dep(&d, far);
    assert_int_equal(d.n, 4);
    /* NVRTC agrees: the #error fires if it picked another file. */
    jitop__binary bin;
    if (jitop__compile(&u, text, &bin) != JITOP_OK)
        fail_msg("%s", jitop_errmsg(NULL));
    jitop__binary_free(&bin);
    free(text);
    jitop__deps_free(&d);
    jitop__unit_free(&u);
    free(src); free(x); free(near); free(top); free(far); free(inc); free(dir);
}

static void test_inline_text_headers(void **state)
{
    (void)state;
    char *inc = jt_tmpdir();
    char *h = jt_write(inc, "ops.cuh", "#define OPS 1\n");
    const char *text_in = "#include \"ops.cuh\"\n#include <cuda_bf16.h>\n__global__ void k() {}\n";
    const char *opts[] = {"-I", inc};
    jitop__unit u;
    assert_int_equal(jitop__unit_init(&u, NULL, text_in, opts, 2, NULL, 0, "sm_90"), JITOP_OK);
    jitop__deps d;
    char *text = NULL;
    assert_int_equal(jitop__deps_scan(&u, &d, &text), JITOP_OK);
    assert_string_equal(text, text_in);
    assert_int_equal(d.n, 1);
    assert_string_equal(d.v[0].path, h);
    free(text);
    jitop__deps_free(&d);
    jitop__unit_free(&u);
    free(h); free(inc);
}

static void test_fresh_and_why(void **state)
{
    (void)state;
    char *dir = jt_tmpdir();
    char *src = jt_write(dir, "k.cu", "#include \"a.cuh\"\n");
    char *a = jt_write(dir, "a.cuh", "#include \"b.cuh\"\n");
    char *b = jt_write(dir, "b.cuh", "// b\n");
    char *paths[] = {src, a, b};
    age_files(paths, 3);
    jitop__unit u = make_unit(src, NULL);
    jitop__deps d;
    char *text = NULL, *why = NULL;
    bool fresh = false;
    assert_int_equal(jitop__deps_scan(&u, &d, &text), JITOP_OK);
    assert_int_equal(d.n, 3);
    assert_int_equal(jitop__deps_fresh(&d, &fresh, &why), JITOP_OK);
    assert_true(fresh);
    assert_null(why);

    /* An mtime change on the nested header. */
    jt_touch(b, -5);
    assert_int_equal(jitop__deps_fresh(&d, &fresh, &why), JITOP_OK);
    assert_false(fresh);
    assert_non_null(why);
    assert_non_null(strstr(why, b));
    free(why);

    /* Unchanged stat data, but modified just now: never trusted. */
    jitop__deps_free(&d);
    free(text);
    jitop__recent_window_ns = JITOP__RECENT_WINDOW_NS;
    jt_touch(b, 0);
    assert_int_equal(jitop__deps_scan(&u, &d, &text), JITOP_OK);
    for (size_t i = 0; i < d.n; i++) /* written moments ago too: their records as if old */
        if (strcmp(d.v[i].path, b) != 0)
            d.v[i].recent = false;
    assert_int_equal(jitop__deps_fresh(&d, &fresh, &why), JITOP_OK);
    assert_false(fresh);
    assert_non_null(strstr(why, b));
    assert_non_null(strstr(why, "within"));
    free(why);

    /* A removed header. */
    assert_int_equal(unlink(a), 0);
    assert_int_equal(jitop__deps_fresh(&d, &fresh, &why), JITOP_OK);
    assert_false(fresh);
    assert_non_null(strstr(why, a));
    assert_non_null(strstr(why, "removed"));
    free(why);
    free(text);
    jitop__deps_free(&d);
    jitop__unit_free(&u);
    free(src); free(a); free(b); free(dir);
}

/* Rewrites path in place (same inode) with text of the same size, then puts
 * the old mtime back: the stat data cannot tell the two contents apart. */
static void rewrite_keeping_stat(const char *path, const char *text)
{
    struct stat before, after;
    assert_int_equal(stat(path, &before), 0);
    assert_int_equal((size_t)before.st_size, strlen(text));
    FILE *f = fopen(path, "r+b");
    assert_non_null(f);
    assert_int_equal(fwrite(text, 1, strlen(text), f), strlen(text));
    assert_int_equal(fclose(f), 0);
    struct timespec ts[2] = {before.st_atim, before.st_mtim};
    assert_int_equal(utimensat(AT_FDCWD, path, ts, 0), 0);
    assert_int_equal(stat(path, &after), 0);
    assert_int_equal(after.st_ino, before.st_ino);
    assert_int_equal(after.st_size, before.st_size);
    assert_int_equal(after.st_mtim.tv_sec, before.st_mtim.tv_sec);
    assert_int_equal(after.st_mtim.tv_nsec, before.st_mtim.tv_nsec);
}

/* Racy clean: a file saved within the recent window of its scan keeps that
 * mark in the record, so the record never vouches for it, however late the
 * check. Aging the file and its record together stands in for the wait: a
 * check against the time of the check would now trust it. */
static void test_recent_record_never_trusted(void **state)
{
    (void)state;
    char *dir = jt_tmpdir();
    char *src = jt_write(dir, "k.cu", "#include \"h.cuh\"\n");
    char *h = jt_write(dir, "h.cuh", "#define H 1\n");
    jt_touch(src, -60);
    jitop__recent_window_ns = JITOP__RECENT_WINDOW_NS;
    jitop__unit u = make_unit(src, NULL);
    jitop__deps d;
    char *text = NULL, *why = NULL, *changed = NULL;
    bool fresh = true;
    assert_int_equal(jitop__deps_scan(&u, &d, &text), JITOP_OK);
    size_t hi = dep_index(&d, h);
    assert_true(d.v[hi].recent); /* just written */
    d.v[0].recent = false;       /* the source's record, as if it were old */

    jt_touch(h, -60);
    struct stat st;
    assert_int_equal(stat(h, &st), 0);
    d.v[hi].mtime_ns = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
    d.v[hi].ctime_ns = (int64_t)st.st_ctim.tv_sec * 1000000000 + st.st_ctim.tv_nsec;
    assert_int_equal(jitop__deps_fresh(&d, &fresh, &why), JITOP_OK);
    assert_false(fresh);
    if (!why || !strstr(why, h) || !strstr(why, "within"))
        fail_msg("why should name %s as recent: %s", h, why ? why : "(null)");
    free(why);
    /* The contents are what was scanned: nothing changed. */
    assert_int_equal(jitop__deps_changed(&d, &changed), JITOP_OK);
    assert_null(changed);
    /* Same size, same mtime, same inode, other bytes, and (as a write in the
     * tick of the record would leave it) the same ctime: only the hash sees
     * it. */
    rewrite_keeping_stat(h, "#define H 2\n");
    assert_int_equal(stat(h, &st), 0);
    d.v[hi].ctime_ns = (int64_t)st.st_ctim.tv_sec * 1000000000 + st.st_ctim.tv_nsec;
    assert_int_equal(jitop__deps_changed(&d, &changed), JITOP_OK);
    assert_non_null(changed);
    assert_string_equal(changed, h);
    free(changed);

    /* A scan that finds the file old records it as trusted. */
    free(text);
    jitop__deps_free(&d);
    jitop__recent_window_ns = 0;
    assert_int_equal(jitop__deps_scan(&u, &d, &text), JITOP_OK);
    assert_false(d.v[dep_index(&d, h)].recent);
    assert_int_equal(jitop__deps_fresh(&d, &fresh, &why), JITOP_OK);
    assert_true(fresh);
    assert_null(why);
    free(text);
    jitop__deps_free(&d);
    jitop__unit_free(&u);
    free(src); free(h); free(dir);
}

static void test_missing_source(void **state)
{
    (void)state;
    char *dir = jt_tmpdir();
    char *src = jt_path(dir, "nope.cu");
    jitop__unit u = make_unit(src, NULL);
    jitop__deps d;
    char *text = NULL;
    assert_int_equal(jitop__deps_scan(&u, &d, &text), JITOP_ENOTFOUND);
    assert_null(text);
    assert_non_null(strstr(jitop_errmsg(NULL), src));
    jitop__unit_free(&u);
    free(src); free(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_nested_cycles_comments_builtins),
        cmocka_unit_test(test_stat_and_hash_recorded),
        cmocka_unit_test(test_quoted_include_prefers_including_dir),
        cmocka_unit_test(test_inline_text_headers),
        cmocka_unit_test(test_fresh_and_why),
        cmocka_unit_test(test_recent_record_never_trusted),
        cmocka_unit_test(test_missing_source),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
