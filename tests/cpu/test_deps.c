/* Include scanning, stat data, content hashes and the stat fast path. */
#include "testutil.h"

#include "build/build.h"

#include <errno.h>
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

/* How many deps lie in the toolkit's include folders (the last
 * u->toolkit_dirs of its include dirs), where <cuda_fp16.h> and the
 * headers it includes are found without an -I. */
static size_t toolkit_deps(const jitop__unit *u, const jitop__deps *d)
{
    size_t n = 0;
    for (size_t i = 0; i < d->n; i++) {
        bool in = false;
        for (size_t j = u->include_dirs.n - u->toolkit_dirs; j < u->include_dirs.n && !in; j++) {
            size_t len = strlen(u->include_dirs.v[j]);
            in = strncmp(d->v[i].path, u->include_dirs.v[j], len) == 0 && d->v[i].path[len] == '/';
        }
        n += in;
    }
    return n;
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
    /* <cuda_fp16.h> is the toolkit's (hashed like any header); <type_traits>
     * resolves nowhere and is left out. */
    assert_true(u.toolkit_dirs > 0);
    assert_true(toolkit_deps(&u, &d) > 0);
    char *fp16 = jt_path(u.include_dirs.v[u.include_dirs.n - u.toolkit_dirs], "cuda_fp16.h");
    dep_index(&d, fp16);
    free(fp16);
    assert_int_equal(d.n - toolkit_deps(&u, &d), 4);
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
    assert_true(toolkit_deps(&u, &d) > 0); /* cuda_bf16.h and what it includes */
    assert_int_equal(d.n - toolkit_deps(&u, &d), 1);
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

/* One scanner case: a text and the header names it must yield (in order;
 * "?TEXT" for a directive whose name comes from macros, with TEXT what the
 * scanner keeps of it; "+" before a name for #include_next, "<" for an
 * angle-bracket name). */
struct scan_case {
    const char *text;
    const char *want[4];
    unsigned line; /* of the first directive found, when not 1 */
};

static const struct scan_case scan_cases[] = {
    {"#include \"h.h\"\n", {"h.h"}, 0},
    {"#include <h.h>\n", {"<h.h"}, 0},
    {"#/**/include \"h.h\"\n", {"h.h"}, 0},
    {"#include/**/\"h.h\"\n", {"h.h"}, 0},
    {"  #  include   \"h.h\"  // c\n", {"h.h"}, 0},
    {"#\\\ninclude \"h.h\"\n", {"h.h"}, 0},
    {"#inc\\\nlude \"h.h\"\n", {"h.h"}, 0},
    {"#inc\\\r\nlude \"h.h\"\n", {"h.h"}, 0},
    {"%:include \"h.h\"\n", {"h.h"}, 0},
    {"%:  include <h.h>\n", {"<h.h"}, 0},
    {"#\finclude\v\"h.h\"\n", {"h.h"}, 0},
    {"#include_next <h.h>\n", {"+<h.h"}, 0},
    {"#include_next \"h.h\"\n", {"+h.h"}, 0},
    {"#include \"h\\\n.h\"\n", {"h.h"}, 0},
    {"#include <sub/\\\nh.h>\n", {"<sub/h.h"}, 0},
    {"/* a\n   b */ #include \"h.h\"\n", {"h.h"}, 2},
    {"#include /* a\n b */ \"h.h\"\n", {"h.h"}, 0},
    {"#include \"a//b.h\"\n#include <c/*d.h>\n", {"a//b.h", "<c/*d.h"}, 0},
    /* trigraphs: taken whatever the standard (they are only in C++14 and
     * earlier), and ??/ is a backslash that splices */
    {"?\?=include \"h.h\"\n", {"h.h"}, 0},
    {"#inc?\?/\nlude \"h.h\"\n", {"h.h"}, 0},
    /* gcc splices a backslash followed by blanks, NVRTC does not: both */
    {"#\\  \ninclude \"h.h\"\n", {"h.h"}, 0},
    {"#include \"a.h\"\n#include \"b.h\"\n#include \"a.h\"\n", {"a.h", "b.h"}, 0},
    {"#include CONFIG_H\n", {"?CONFIG_H"}, 0},
    {"#include HDR(x, y) /* c */ // d\n", {"?HDR(x, y)"}, 0},
    {"#  include_next NEXT\n", {"+?NEXT"}, 0},
    {"#include \"unterminated.h\n", {"?\"unterminated.h"}, 0},
    {"#include A\n#include B\n#include A\n", {"?A", "?B"}, 0},
    /* not directives */
    {"// #include \"no1.h\"\n/* #include \"no2.h\" */\n", {NULL}, 0},
    {"int a; #include \"no.h\"\n", {NULL}, 0},
    {"int a; /* x\n */ #include \"no.h\"\n", {NULL}, 0},
    {"const char *s = \"\\\n#include \\\"no.h\\\"\";\n", {NULL}, 0},
    {"#define X \\\n#include \"no.h\"\n", {NULL}, 0},
    {"const char *r = R\"x(\n#include \"no.h\"\n)x\";\n#include \"yes.h\"\n", {"yes.h"}, 4},
    {"const char *r = R\"(\n/* )\";\n#include \"yes.h\"\n// */\n", {"yes.h"}, 3},
    {"int n = 1'000; /* '\n#include \"no.h\"\n*/\n#include \"yes.h\"\n", {"yes.h"}, 4},
    {"char c = '\"'; /*\n#include \"no.h\"\n*/\n", {NULL}, 0},
    {"## include \"no.h\"\n%:%: include \"no2.h\"\n", {NULL}, 0},
    {"#include \"\"\n#include <>\n#include\n", {NULL}, 0},
    {"#if 0\n#include \"maybe.h\"\n#endif\n", {"maybe.h"}, 2},
    {"#includes \"no.h\"\n#pragma include \"no2.h\"\n", {NULL}, 0},
    {"#embed \"data.bin\"\n", {"*data.bin"}, 0},
    {"\xEF\xBB\xBF#include \"bom.h\"\n", {"bom.h"}, 0},
};

static void check_scan_case(const struct scan_case *c)
{
    jitop__includes incs;
    assert_int_equal(jitop__scan_includes(c->text, strlen(c->text), &incs), JITOP_OK);
    size_t nwant = 0;
    while (nwant < 4 && c->want[nwant])
        nwant++;
    if (incs.n != nwant)
        fail_msg("%s: %zu includes found, %zu expected", c->text, incs.n, nwant);
    for (size_t i = 0; i < nwant; i++) {
        const char *w = c->want[i];
        const jitop__include *inc = &incs.v[i];
        bool next = *w == '+', embed = *w == '*';
        w += next || embed;
        bool unresolved = *w == '?', angle = *w == '<';
        w += unresolved || angle;
        if (inc->next != next || inc->embed != embed || (inc->name == NULL) != unresolved ||
            (!unresolved && inc->quoted == angle) ||
            strcmp(unresolved ? inc->text : inc->name, w) != 0)
            fail_msg("%s: include %zu is %s%s%s%s (quoted %d), expected %s", c->text, i,
                     inc->next ? "next " : "", inc->embed ? "embed " : "",
                     inc->name ? "" : "unresolved ", inc->name ? inc->name : inc->text,
                     inc->quoted, c->want[i]);
    }
    if (nwant > 0 && incs.v[0].line != (c->line ? c->line : 1))
        fail_msg("%s: first directive on line %u, expected %u", c->text, incs.v[0].line,
                 c->line ? c->line : 1);
    jitop__includes_free(&incs);
}

/* Every spelling a preprocessor honours is found, and nothing it does not
 * take as a directive is (translation phases 1-3, then the directive). */
static void test_scan_spellings(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof scan_cases / sizeof scan_cases[0]; i++)
        check_scan_case(&scan_cases[i]);
}

/* A unit of path for compute_90: PTX, so that a test reads which kernels
 * the binary holds. */
static void unit_ptx(jitop__unit *u, const char *path, const char *const *opts, size_t nopts)
{
    if (jitop__unit_init(u, path, NULL, opts, nopts, NULL, 0, "compute_90") != JITOP_OK)
        fail_msg("unit %s: %s", path, jitop_errmsg(NULL));
}

/* Builds path through ctx's cache and checks the binary: against expect
 * when given (the PTX an earlier check of the same files returned), else
 * against a fresh compile of the files as they are on disk now. The same
 * bytes either way. Returns the PTX (malloc'd); *cached and key say what the
 * build did. */
static char *build_checked_as(jitop_ctx *ctx, const char *path, const char *const *opts,
                              size_t nopts, const char *expect, bool *cached, char key[33])
{
    jitop__unit u;
    jitop__built b;
    jitop__binary fresh = {0};
    unit_ptx(&u, path, opts, nopts);
    if (jitop__build_unit(ctx, &u, &b) != JITOP_OK)
        fail_msg("build %s: %s", path, jitop_errmsg(ctx));
    *cached = b.cached;
    memcpy(key, b.key, 33);
    if (!expect) {
        jitop__deps d;
        char *text = NULL;
        assert_int_equal(jitop__deps_scan(&u, &d, &text), JITOP_OK);
        if (jitop__compile(&u, text, &fresh) != JITOP_OK)
            fail_msg("fresh compile of %s: %s", path, jitop_errmsg(NULL));
        expect = (const char *)fresh.data;
        jitop__deps_free(&d);
        free(text);
    }
    if (strlen(expect) != b.entry.bin.size || memcmp(expect, b.entry.bin.data, b.entry.bin.size))
        fail_msg("%s: the %s binary is not what a fresh compile gives:\n%s\n---\n%s", path,
                 b.cached ? "cached" : "built", (char *)b.entry.bin.data, expect);
    char *ptx = jitop__strdup(expect);
    assert_non_null(ptx);
    jitop__binary_free(&fresh);
    jitop__built_free(&b);
    jitop__unit_free(&u);
    return ptx;
}

static char *build_checked(jitop_ctx *ctx, const char *path, const char *const *opts,
                           size_t nopts, bool *cached, char key[33])
{
    return build_checked_as(ctx, path, opts, nopts, NULL, cached, key);
}

static void assert_has_kernel(const char *ptx, const char *kernel)
{
    char want[64];
    snprintf(want, sizeof want, ".entry %s(", kernel);
    if (!strstr(ptx, want))
        fail_msg("the binary has no kernel %s:\n%s", kernel, ptx);
}

/* An edit of file (same size: kernel old_k becomes new_k) must rebuild path,
 * cold and warm: the build after the edit compiles and holds new_k, the one
 * after it hits with the same key, and a new context (a new process) too. */
static void edit_must_rebuild(const char *cache, const char *path, const char *const *opts,
                              size_t nopts, const char *file, const char *old_k,
                              const char *new_k)
{
    char *text = jt_read(file);
    char *at = strstr(text, old_k);
    if (!at || strlen(old_k) != strlen(new_k))
        fail_msg("%s holds no %s", file, old_k);
    memcpy(at, new_k, strlen(new_k));
    FILE *f = fopen(file, "r+b");
    assert_non_null(f);
    assert_int_equal(fwrite(text, 1, strlen(text), f), strlen(text));
    assert_int_equal(fclose(f), 0);
    free(text);

    jitop_ctx *ctx = jt_ctx(cache, "compute_90");
    bool cached = true;
    char key[33], key2[33];
    char *ptx = build_checked(ctx, path, opts, nopts, &cached, key);
    if (cached)
        fail_msg("an edit of %s was served from the cache for %s", file, path);
    assert_has_kernel(ptx, new_k);
    char *again = build_checked_as(ctx, path, opts, nopts, ptx, &cached, key2);
    assert_true(cached);
    assert_string_equal(key, key2);
    free(again);
    jitop_ctx_destroy(ctx);
    ctx = jt_ctx(cache, "compute_90");
    again = build_checked_as(ctx, path, opts, nopts, ptx, &cached, key2);
    assert_true(cached);
    assert_string_equal(key, key2);
    free(again);
    free(ptx);
    jitop_ctx_destroy(ctx);
}

static void make_link(const char *target, const char *dir, const char *name)
{
    char *path = jt_path(dir, name);
    if (symlink(target, path) != 0)
        fail_msg("symlink %s -> %s: %s", path, target, strerror(errno));
    free(path);
}

static char *real_path_of(const char *path)
{
    char *r = realpath(path, NULL);
    if (!r)
        fail_msg("realpath %s: %s", path, strerror(errno));
    return r;
}

/* The dep list holds the file at path (compared as real paths). */
static void assert_dep_file(const jitop__deps *d, const char *path)
{
    char *want = real_path_of(path);
    for (size_t i = 0; i < d->n; i++) {
        char *r = realpath(d->v[i].path, NULL);
        bool same = r && strcmp(r, want) == 0;
        free(r);
        if (same) {
            free(want);
            return;
        }
    }
    fail_msg("%s (%s) is not among the %zu deps", path, want, d->n);
}

/* Item 1: a ".." after a symlinked directory goes where the kernel (and
 * NVRTC) go, not where the text says: in the source's path, in an include
 * name, and in a header reached through a symlinked folder. Decoys sit where
 * a textual normalization would look; editing the real files rebuilds. */
static void test_symlinked_dirs_resolved_as_the_kernel_does(void **state)
{
    (void)state;
    char *d = jt_tmpdir(), *cache = jt_tmpdir();
    jitop__recent_window_ns = 0;
    /* d/lnk -> real/sub: d/lnk/../a.cu is d/real/a.cu. */
    char *src = jt_write(d, "real/a.cu",
                         "#include \"lnk/../x.h\"\n"
                         "#include \"inc/h.h\"\n"
                         "extern \"C\" __global__ void K_SRC_1() {}\n");
    char *decoy_src = jt_write(d, "a.cu", "#error the textual a.cu\n");
    /* d/real/lnk -> sub/deep: "lnk/../x.h" from d/real is d/real/sub/x.h. */
    char *x = jt_write(d, "real/sub/x.h", "extern \"C\" __global__ void K_X_1() {}\n");
    char *decoy_x = jt_write(d, "real/x.h", "#error the textual x.h\n");
    free(jt_write(d, "real/sub/deep/keep", ""));
    /* d/real/inc -> ../other/dir: h.h's "../common/c.h" is d/other/common/c.h. */
    char *h = jt_write(d, "other/dir/h.h",
                       "#include \"../common/c.h\"\n"
                       "extern \"C\" __global__ void K_H_1() {}\n");
    char *c = jt_write(d, "other/common/c.h", "extern \"C\" __global__ void K_C_1() {}\n");
    char *decoy_c = jt_write(d, "real/common/c.h", "#error the textual c.h\n");
    make_link("real/sub", d, "lnk");
    char *real_dir = jt_path(d, "real");
    make_link("sub/deep", real_dir, "lnk");
    make_link("../other/dir", real_dir, "inc");
    char *spelled = jt_path(d, "lnk/../a.cu");

    /* The headers, from the source named plainly. */
    jitop__unit u;
    unit_ptx(&u, src, NULL, 0);
    jitop__deps deps;
    char *text = NULL;
    assert_int_equal(jitop__deps_scan(&u, &deps, &text), JITOP_OK);
    assert_int_equal(deps.n, 4);
    assert_dep_file(&deps, src);
    assert_dep_file(&deps, x);
    assert_dep_file(&deps, h);
    assert_dep_file(&deps, c);
    assert_null(deps.note);
    free(text);
    jitop__deps_free(&deps);
    jitop__unit_free(&u);
    jitop_ctx *ctx = jt_ctx(cache, "compute_90");
    bool cached = true;
    char key[33];
    char *ptx = build_checked(ctx, src, NULL, 0, &cached, key);
    assert_false(cached);
    assert_has_kernel(ptx, "K_SRC_1");
    assert_has_kernel(ptx, "K_X_1");
    assert_has_kernel(ptx, "K_H_1");
    assert_has_kernel(ptx, "K_C_1");
    free(ptx);
    jitop_ctx_destroy(ctx);
    edit_must_rebuild(cache, src, NULL, 0, x, "K_X_1", "K_X_2");
    edit_must_rebuild(cache, src, NULL, 0, c, "K_C_1", "K_C_2");
    edit_must_rebuild(cache, src, NULL, 0, h, "K_H_1", "K_H_2");

    /* The source named through the link and "..": the same file. */
    unit_ptx(&u, spelled, NULL, 0);
    char *want_src = real_path_of(src);
    assert_string_equal(u.source_path, want_src);
    jitop__unit_free(&u);
    edit_must_rebuild(cache, spelled, NULL, 0, src, "K_SRC_1", "K_SRC_2");
    edit_must_rebuild(cache, spelled, NULL, 0, x, "K_X_2", "K_X_3");
    free(want_src); free(spelled); free(real_dir);
    free(src); free(decoy_src); free(x); free(decoy_x); free(h); free(c); free(decoy_c);
    free(cache); free(d);
}

/* Item 2: every spelling NVRTC honours is a dependency: editing a header
 * included through any of them rebuilds. A header missing on an #if 0
 * branch does not fail the build. */
static void test_include_spellings_rebuild(void **state)
{
    (void)state;
    char *d = jt_tmpdir(), *cache = jt_tmpdir();
    jitop__recent_window_ns = 0;
    static const char *const spellings[] = {
        "#/**/include \"h0.h\"\n",
        "#include/**/\"h1.h\"\n",
        "#\\\ninclude \"h2.h\"\n",
        "#inc\\\nlude \"h3.h\"\n",
        "%:include \"h4.h\"\n",
        "#\f include\v\"h5.h\"\n",
        "#include \"h\\\n6.h\"\n",
        "/* a\n */ #include <h7.h>\n",
        "#include <n8.h>\n", /* n8.h in inc1 does #include_next <n8.h>: inc2's */
    };
    enum { N = sizeof spellings / sizeof spellings[0] };
    char text[2048] = "#if 0\n#include \"never_there.h\"\n#endif\n";
    for (size_t i = 0; i < N; i++)
        strcat(text, spellings[i]);
    char *src = jt_write(d, "src/k.cu", text);
    char *inc1 = jt_path(d, "inc1"), *inc2 = jt_path(d, "inc2");
    char *files[N];
    for (size_t i = 0; i < N - 1; i++) {
        char name[32], body[128];
        snprintf(name, sizeof name, "src/h%zu.h", i);
        snprintf(body, sizeof body, "extern \"C\" __global__ void K_%zu_1() {}\n", i);
        files[i] = jt_write(d, name, body);
    }
    free(jt_write(inc1, "n8.h", "#include_next <n8.h>\n"));
    files[N - 1] = jt_write(inc2, "n8.h", "extern \"C\" __global__ void K_8_1() {}\n");
    const char *opts[] = {"-I", inc1, "-I", inc2};

    jitop_ctx *ctx = jt_ctx(cache, "compute_90");
    bool cached = true;
    char key[33];
    char *ptx = build_checked(ctx, src, opts, 4, &cached, key);
    assert_false(cached);
    for (size_t i = 0; i < N; i++) {
        char k[16];
        snprintf(k, sizeof k, "K_%zu_1", i);
        assert_has_kernel(ptx, k);
    }
    free(ptx);
    jitop_ctx_destroy(ctx);
    for (size_t i = 0; i < N; i++) {
        char k1[16], k2[16];
        snprintf(k1, sizeof k1, "K_%zu_1", i);
        snprintf(k2, sizeof k2, "K_%zu_2", i);
        edit_must_rebuild(cache, src, opts, 4, files[i], k1, k2);
        free(files[i]);
    }
    free(src); free(inc1); free(inc2); free(cache); free(d);
}

/* Item 3: a same-size edit in place with the mtime put back (touch -r,
 * rsync --inplace -t) leaves size, mtime and inode as recorded; the ctime
 * says it. Aged records (no recent window), so that only the stat data
 * decides. */
static void test_ctime_same_size_edit_mtime_restored(void **state)
{
    (void)state;
    char *d = jt_tmpdir(), *cache = jt_tmpdir();
    jitop__recent_window_ns = 0;
    char *src = jt_write(d, "k.cu", "#include \"h.cuh\"\n");
    char *h = jt_write(d, "h.cuh", "extern \"C\" __global__ void K_A() {}\n");
    jt_touch(src, -60);
    jt_touch(h, -60);
    jitop_ctx *ctx = jt_ctx(cache, "compute_90");
    bool cached = true;
    char key1[33], key2[33];
    char *ptx = build_checked(ctx, src, NULL, 0, &cached, key1);
    assert_false(cached);
    assert_has_kernel(ptx, "K_A");
    free(ptx);
    ptx = build_checked(ctx, src, NULL, 0, &cached, key2);
    assert_true(cached); /* the stat fast path */
    free(ptx);
    rewrite_keeping_stat(h, "extern \"C\" __global__ void K_B() {}\n");
    int hit = 1;
    char *why = NULL;
    assert_int_equal(jitop_explain(ctx, src, "compute_90", NULL, 0, NULL, 0, &hit, &why),
                     JITOP_OK);
    assert_int_equal(hit, 0);
    jitop_free(why);
    ptx = build_checked(ctx, src, NULL, 0, &cached, key2);
    if (cached)
        fail_msg("a same-size edit with its mtime restored was served from the cache");
    assert_has_kernel(ptx, "K_B");
    assert_string_not_equal(key1, key2);
    free(ptx);
    jitop_ctx_destroy(ctx);
    /* Warm, in a new context: the new binary. */
    ctx = jt_ctx(cache, "compute_90");
    ptx = build_checked(ctx, src, NULL, 0, &cached, key1);
    assert_true(cached);
    assert_string_equal(key1, key2);
    assert_has_kernel(ptx, "K_B");
    free(ptx);
    jitop_ctx_destroy(ctx);
    free(src); free(h); free(cache); free(d);
}

static bool has_dep_file(const jitop__deps *d, const char *path)
{
    char *want = real_path_of(path);
    bool found = false;
    for (size_t i = 0; i < d->n && !found; i++) {
        char *r = realpath(d->v[i].path, NULL);
        found = r && strcmp(r, want) == 0;
        free(r);
    }
    free(want);
    return found;
}

/* jitop CLI command (build or explain) for src into cache, its output. */
static char *cli(const char *cmd, const char *cache, const char *src, const char *extra)
{
    char line[4096], *out = NULL;
    snprintf(line, sizeof line,
             "JITOP_VERBOSE=1 '%s' %s --arch compute_90 --cache-dir '%s' %s '%s'", jt_cli(), cmd,
             cache, extra, src);
    int rc = jt_run(line, &out);
    if (rc != 0)
        fail_msg("%s: exit %d: %s", line, rc, out ? out : "");
    return out;
}

/* Item 2's safe mode: a directive whose file only macros name. Every file
 * under the folders the include search starts from is hashed, so an edit of
 * the header the macros name rebuilds; JITOP_VERBOSE and explain say so. */
static void test_macro_include_safe_mode(void **state)
{
    (void)state;
    char *d = jt_tmpdir(), *cache = jt_tmpdir();
    jitop__recent_window_ns = 0;
    char *src = jt_write(d, "k.cu",
                         "#define STR(x) #x\n#define XSTR(x) STR(x)\n"
                         "#include XSTR(CFG)\n"
                         "extern \"C\" __global__ void K_S() {}\n");
    char *cfg = jt_write(d, "cfg/b.h", "extern \"C\" __global__ void K_B_1() {}\n");
    char *other = jt_write(d, "notes.txt", "not a header\n");
    const char *opts[] = {"-DCFG=cfg/b.h"};
    jitop__unit u;
    unit_ptx(&u, src, opts, 1);
    jitop__deps deps;
    char *text = NULL;
    assert_int_equal(jitop__deps_scan(&u, &deps, &text), JITOP_OK);
    assert_non_null(deps.note);
    if (!strstr(deps.note, "safe mode") || !strstr(deps.note, "k.cu:3") ||
        !strstr(deps.note, "XSTR(CFG)"))
        fail_msg("note: %s", deps.note);
    assert_false(deps.uncacheable);
    assert_true(has_dep_file(&deps, cfg));
    assert_true(has_dep_file(&deps, other));
    free(text);
    jitop__deps_free(&deps);
    jitop__unit_free(&u);

    jitop_ctx *ctx = jt_ctx(cache, "compute_90");
    bool cached = true;
    char key[33];
    char *ptx = build_checked(ctx, src, opts, 1, &cached, key);
    assert_false(cached);
    assert_has_kernel(ptx, "K_B_1");
    free(ptx);
    int hit = 0;
    char *why = NULL;
    assert_int_equal(jitop_explain(ctx, src, "compute_90", opts, 1, NULL, 0, &hit, &why),
                     JITOP_OK);
    assert_int_equal(hit, 1);
    if (!strstr(why, "safe mode"))
        fail_msg("explain should say safe mode: %s", why);
    jitop_free(why);
    jitop_ctx_destroy(ctx);
    edit_must_rebuild(cache, src, opts, 1, cfg, "K_B_1", "K_B_2");

    /* A file added to the folders is seen (the macros may name it now): the
     * stat fast path does not vouch, and the new file is hashed too. */
    char *added = jt_write(d, "cfg/c.h", "extern \"C\" __global__ void K_C() {}\n");
    ctx = jt_ctx(cache, "compute_90");
    unit_ptx(&u, src, opts, 1);
    jitop__built b;
    assert_int_equal(jitop__build_unit(ctx, &u, &b), JITOP_OK);
    assert_false(b.cached);
    assert_true(has_dep_file(&b.deps, added));
    jitop__built_free(&b);
    jitop__unit_free(&u);
    jitop_ctx_destroy(ctx);
    free(added);

    /* The CLI says it too, in JITOP_VERBOSE's log and in explain. */
    char *out = cli("build", cache, src, "-D CFG=cfg/b.h");
    if (!strstr(out, "safe mode"))
        jt_fail_showing(out, "jitop build (JITOP_VERBOSE=1) should say safe mode");
    free(out);
    out = cli("explain", cache, src, "-D CFG=cfg/b.h");
    if (!strstr(out, "hit") || !strstr(out, "safe mode"))
        jt_fail_showing(out, "jitop explain should say safe mode");
    free(out);
    free(src); free(cfg); free(other); free(cache); free(d);
}

static int count_cb(const jitop_cache_entry_info *info, void *user)
{
    (void)info;
    (*(int *)user)++;
    return 0;
}

/* Safe mode past its bound: the unit is compiled at every build, never
 * stored or served, and explain and a loaded module's stat check say why. */
static void test_macro_include_unbounded_not_cached(void **state)
{
    (void)state;
    char *d = jt_tmpdir(), *cache = jt_tmpdir();
    jitop__recent_window_ns = 0;
    char *src = jt_write(d, "k.cu",
                         "#define STR(x) #x\n#define XSTR(x) STR(x)\n#include XSTR(HEADER)\n"
                         "extern \"C\" __global__ void K_U() {}\n");
    free(jt_write(d, "h.h", "extern \"C\" __global__ void K_H() {}\n"));
    char *many = jt_path(d, "many");
    assert_int_equal(mkdir(many, 0700), 0);
    for (int i = 0; i < JITOP__SAFE_MAX_FILES; i++) {
        char name[64];
        snprintf(name, sizeof name, "%s/f%d", many, i);
        int fd = open(name, O_CREAT | O_WRONLY | O_CLOEXEC, 0600);
        assert_true(fd >= 0);
        assert_int_equal(close(fd), 0);
    }
    const char *opts[] = {"-DHEADER=h.h"};
    jitop__unit u;
    unit_ptx(&u, src, opts, 1);
    jitop__deps deps;
    char *text = NULL, *why = NULL;
    bool fresh = true;
    assert_int_equal(jitop__deps_scan(&u, &deps, &text), JITOP_OK);
    assert_true(deps.uncacheable);
    if (!deps.note || !strstr(deps.note, "not cacheable") || !strstr(deps.note, "HEADER"))
        fail_msg("note: %s", deps.note ? deps.note : "(null)");
    assert_int_equal(jitop__deps_fresh(&deps, &fresh, &why), JITOP_OK);
    assert_false(fresh);
    assert_non_null(strstr(why, "not cacheable"));
    free(why);
    free(text);
    jitop__deps_free(&deps);
    jitop__unit_free(&u);

    jitop_ctx *ctx = jt_ctx(cache, "compute_90");
    for (int i = 0; i < 2; i++) {
        bool cached = true;
        char key[33];
        char *ptx = build_checked(ctx, src, opts, 1, &cached, key);
        assert_false(cached);
        assert_has_kernel(ptx, "K_H");
        free(ptx);
    }
    int n = 0;
    assert_int_equal(jitop_cache_list(ctx, count_cb, &n), JITOP_OK);
    assert_int_equal(n, 0);
    int hit = 1;
    assert_int_equal(jitop_explain(ctx, src, "compute_90", opts, 1, NULL, 0, &hit, &why),
                     JITOP_OK);
    assert_int_equal(hit, 0);
    if (!strstr(why, "not cacheable"))
        fail_msg("explain should say not cacheable: %s", why);
    jitop_free(why);
    jitop_ctx_destroy(ctx);
    free(src); free(many); free(cache); free(d);
}

/* A directive the scanner cannot resolve inside a toolkit header (the
 * include dirs after the user's) is the toolkit's own: no safe mode. The
 * same header in a user's -I dir puts the unit in safe mode. */
static void test_macro_include_in_toolkit_header(void **state)
{
    (void)state;
    char *d = jt_tmpdir();
    char *src = jt_write(d, "src/k.cu", "#include <tk.h>\n");
    char *tk = jt_path(d, "toolkit");
    free(jt_write(tk, "tk.h", "#include TK_SYSTEM_HEADER\n"));
    const char *opts[] = {"-I", tk};
    for (int user = 0; user < 2; user++) {
        jitop__unit u;
        unit_ptx(&u, src, user ? opts : NULL, user ? 2 : 0);
        if (!user)
            assert_int_equal(jitop__strv_push(&u.include_dirs, tk), JITOP_OK);
        jitop__deps deps;
        char *text = NULL;
        assert_int_equal(jitop__deps_scan(&u, &deps, &text), JITOP_OK);
        assert_int_equal(deps.note != NULL, user);
        free(text);
        jitop__deps_free(&deps);
        jitop__unit_free(&u);
    }
    free(src); free(tk); free(d);
}

/* Inline text has no directory: NVRTC looks its quoted names up in the
 * current directory, and so does the scan. */
static void test_inline_text_quoted_include_in_cwd(void **state)
{
    (void)state;
    char *d = jt_tmpdir();
    char *q = jt_write(d, "q.h", "extern \"C\" __global__ void K_Q() {}\n");
    char old[4096];
    assert_non_null(getcwd(old, sizeof old));
    assert_int_equal(chdir(d), 0);
    jitop__unit u;
    assert_int_equal(jitop__unit_init(&u, NULL, "#include \"q.h\"\n", NULL, 0, NULL, 0,
                                      "compute_90"),
                     JITOP_OK);
    jitop__deps deps;
    char *text = NULL;
    assert_int_equal(jitop__deps_scan(&u, &deps, &text), JITOP_OK);
    jitop__binary bin;
    int st = jitop__compile(&u, text, &bin);
    assert_int_equal(chdir(old), 0);
    if (st != JITOP_OK)
        fail_msg("%s", jitop_errmsg(NULL));
    assert_has_kernel((const char *)bin.data, "K_Q"); /* NVRTC read it */
    assert_int_equal(deps.n, 1);
    assert_true(has_dep_file(&deps, q));              /* and it was hashed */
    jitop__binary_free(&bin);
    free(text);
    jitop__deps_free(&deps);
    jitop__unit_free(&u);
    free(q); free(d);
}

/* "#include NAME" is resolved from the definitions of NAME: #define lines
 * of every file the scan reads (on every #if branch) and -D options, with
 * identifiers followed; each file any definition names is hashed, and no
 * safe mode is needed. */
static void test_macro_include_resolved_from_defines(void **state)
{
    (void)state;
    char *d = jt_tmpdir(), *cache = jt_tmpdir();
    jitop__recent_window_ns = 0;
    char *src = jt_write(d, "k.cu",
                         "#include \"cfg.h\"\n"
                         "#include CFG\n"        /* -> "sel/a.h" or <b.h> */
                         "#include VIA_OPTION\n" /* -D: an identifier, then "o.h" */
                         "#include FIRST\n");    /* first.h defines and includes SECOND */
    char *cfg = jt_write(d, "cfg.h",
                         "#if USE_B\n#define CFG <b.h>\n#else\n#define CFG \"sel/a.h\"\n#endif\n"
                         "#define INDIRECT \"o.h\" // a comment\n");
    char *a = jt_write(d, "sel/a.h", "extern \"C\" __global__ void K_A_1() {}\n");
    char *inc = jt_path(d, "inc");
    char *b = jt_write(inc, "b.h", "extern \"C\" __global__ void K_B() {}\n");
    char *o = jt_write(d, "o.h", "extern \"C\" __global__ void K_O() {}\n");
    char *first = jt_write(d, "first.h", "#define SECOND \"second.h\"\n#include SECOND\n");
    char *second = jt_write(d, "second.h", "extern \"C\" __global__ void K_2() {}\n");
    char *unrelated = jt_write(d, "unrelated.h", "#error never included\n");
    const char *opts[] = {"-I", inc, "-DVIA_OPTION=INDIRECT", "-DFIRST=\"first.h\""};
    jitop__unit u;
    unit_ptx(&u, src, opts, 4);
    jitop__deps deps;
    char *text = NULL;
    assert_int_equal(jitop__deps_scan(&u, &deps, &text), JITOP_OK);
    if (deps.note)
        fail_msg("no safe mode needed: %s", deps.note);
    assert_true(has_dep_file(&deps, a));
    assert_true(has_dep_file(&deps, b));
    assert_true(has_dep_file(&deps, o));
    assert_true(has_dep_file(&deps, first));
    assert_true(has_dep_file(&deps, second));
    assert_false(has_dep_file(&deps, unrelated));
    free(text);
    jitop__deps_free(&deps);
    jitop__unit_free(&u);

    jitop_ctx *ctx = jt_ctx(cache, "compute_90");
    bool cached = true;
    char key[33];
    char *ptx = build_checked(ctx, src, opts, 4, &cached, key);
    assert_false(cached);
    assert_has_kernel(ptx, "K_A_1");
    assert_has_kernel(ptx, "K_O");
    assert_has_kernel(ptx, "K_2");
    free(ptx);
    jitop_ctx_destroy(ctx);
    edit_must_rebuild(cache, src, opts, 4, a, "K_A_1", "K_A_2");

    /* A macro inside a <name> a macro gives, a function-like macro, a value
     * of several tokens, no definition at all: only a preprocessor knows. */
    static const char *const unknown[] = {
        "#define ROOT sel\n#define H <ROOT/a.h>\n#include H\n",
        "#define H(x) #x\n#include H\n",
        "#define H \"sel/a.h\" \"x\"\n#include H\n",
        "#include NOWHERE_DEFINED\n",
    };
    for (size_t i = 0; i < sizeof unknown / sizeof unknown[0]; i++) {
        free(jt_write(d, "k.cu", unknown[i]));
        unit_ptx(&u, src, NULL, 0);
        assert_int_equal(jitop__deps_scan(&u, &deps, &text), JITOP_OK);
        if (!deps.note || !strstr(deps.note, "safe mode"))
            fail_msg("%s: should be in safe mode", unknown[i]);
        free(text);
        jitop__deps_free(&deps);
        jitop__unit_free(&u);
    }
    free(src); free(cfg); free(a); free(inc); free(b); free(o); free(first); free(second);
    free(unrelated); free(cache); free(d);
}

/* The #defines the scanner reports for "#include NAME": a header name or an
 * identifier as the value, NULL for anything else. */
static void test_scan_defines(void **state)
{
    (void)state;
    const char *text = "#define A \"a.h\"\n#define B <b/c.h> /* c */\n# define C A // d\n"
                       "#define F(x) x\n#define N 1\n#define E\n#define M \"m.h\" extra\n"
                       "#def\\\nine S \\\n \"s.h\"\n";
    static const char *const want[][2] = {
        {"A", "\"a.h\""}, {"B", "<b/c.h>"}, {"C", "A"}, {"F", NULL},
        {"N", NULL},      {"E", NULL},      {"M", NULL}, {"S", "\"s.h\""},
    };
    jitop__includes incs;
    assert_int_equal(jitop__scan_includes(text, strlen(text), &incs), JITOP_OK);
    assert_int_equal(incs.n, 0);
    assert_int_equal(incs.ndefs, sizeof want / sizeof want[0]);
    for (size_t i = 0; i < incs.ndefs; i++) {
        assert_string_equal(incs.defs[i].name, want[i][0]);
        if (want[i][1])
            assert_string_equal(incs.defs[i].value, want[i][1]);
        else
            assert_null(incs.defs[i].value);
    }
    jitop__includes_free(&incs);
}

/* Inline text's "name" is looked up in the current directory: a manifest
 * recorded in one directory must not vouch for another directory's header
 * (the stat fast path would serve the other header's binary). */
static void test_inline_text_manifest_per_directory(void **state)
{
    (void)state;
    char *x = jt_tmpdir(), *y = jt_tmpdir(), *cache = jt_tmpdir();
    jitop__recent_window_ns = 0;
    free(jt_write(x, "q.h", "extern \"C\" __global__ void K_X() {}\n"));
    free(jt_write(y, "q.h", "extern \"C\" __global__ void K_Y() {}\n"));
    char old[4096];
    assert_non_null(getcwd(old, sizeof old));
    const char *dirs[] = {x, y, x};
    const char *kernels[] = {"K_X", "K_Y", "K_X"};
    jitop_ctx *ctx = jt_ctx(cache, "compute_90");
    for (int i = 0; i < 3; i++) {
        assert_int_equal(chdir(dirs[i]), 0);
        jitop__unit u;
        assert_int_equal(jitop__unit_init(&u, NULL, "#include \"q.h\"\n", NULL, 0, NULL, 0,
                                          "compute_90"),
                         JITOP_OK);
        jitop__built b;
        int st = jitop__build_unit(ctx, &u, &b);
        assert_int_equal(chdir(old), 0);
        if (st != JITOP_OK)
            fail_msg("%s", jitop_errmsg(ctx));
        assert_int_equal(b.cached, i == 2); /* the third: the first's entry */
        assert_has_kernel((const char *)b.entry.bin.data, kernels[i]);
        jitop__built_free(&b);
        jitop__unit_free(&u);
    }
    jitop_ctx_destroy(ctx);
    free(x); free(y); free(cache);
}

/* A header created where an include name was looked for and not found:
 * beside the source, shadowing the one found in an -I directory, or where
 * __has_include found nothing. The directory's stat data says so, and the
 * build after it must compile the new header, cold and warm. */
static void test_new_header_shadowing_rebuilds(void **state)
{
    (void)state;
    char *d = jt_tmpdir(), *cache = jt_tmpdir();
    jitop__recent_window_ns = 0;
    char *src = jt_write(d, "src/k.cu",
                         "#include \"h.h\"\n"
                         "#if __has_include(\"opt.h\")\n#include \"opt.h\"\n#endif\n");
    char *inc = jt_path(d, "inc");
    free(jt_write(inc, "h.h", "extern \"C\" __global__ void K_FAR() {}\n"));
    const char *opts[] = {"-I", inc};
    jitop_ctx *ctx = jt_ctx(cache, "compute_90");
    bool cached = true;
    char key[33];
    char *ptx = build_checked(ctx, src, opts, 2, &cached, key);
    assert_false(cached);
    assert_has_kernel(ptx, "K_FAR");
    free(ptx);
    ptx = build_checked(ctx, src, opts, 2, &cached, key);
    assert_true(cached); /* nothing new: the stat fast path */
    free(ptx);

    char *srcdir = jt_path(d, "src");
    static const char *const created[][2] = {{"h.h", "K_NEAR"}, {"opt.h", "K_OPT"}};
    for (int i = 0; i < 2; i++) {
        char body[128];
        snprintf(body, sizeof body, "extern \"C\" __global__ void %s() {}\n", created[i][1]);
        free(jt_write(srcdir, created[i][0], body));
        int hit = 1;
        char *why = NULL;
        assert_int_equal(jitop_explain(ctx, src, "compute_90", opts, 2, NULL, 0, &hit, &why),
                         JITOP_OK);
        assert_int_equal(hit, 0);
        jitop_free(why);
        ptx = build_checked(ctx, src, opts, 2, &cached, key);
        if (cached)
            fail_msg("%s created beside the source was not seen", created[i][0]);
        assert_has_kernel(ptx, created[i][1]);
        char key2[33];
        char *again = build_checked_as(ctx, src, opts, 2, ptx, &cached, key2);
        assert_true(cached);
        assert_string_equal(key, key2);
        free(again);
        jitop_ctx *cold = jt_ctx(cache, "compute_90");
        again = build_checked_as(cold, src, opts, 2, ptx, &cached, key2);
        assert_true(cached);
        assert_string_equal(key, key2);
        free(again);
        jitop_ctx_destroy(cold);
        free(ptx);
    }
    jitop_ctx_destroy(ctx);
    free(src); free(inc); free(srcdir); free(cache); free(d);
}

static char *g_create_dir;

static void create_header_during_compile(const char *source)
{
    (void)source;
    jitop__after_compile_hook = NULL; /* once */
    free(jt_write(g_create_dir, "h.h", "extern \"C\" __global__ void K_NEAR() {}\n"));
}

/* The same header created while NVRTC compiles: the build looks again for
 * what it did not find, and starts over instead of caching a binary whose
 * key never saw the new header. */
static void test_header_created_during_compile(void **state)
{
    (void)state;
    char *d = jt_tmpdir(), *cache = jt_tmpdir();
    jitop__recent_window_ns = 0;
    char *src = jt_write(d, "src/k.cu", "#include \"h.h\"\n");
    char *inc = jt_path(d, "inc");
    free(jt_write(inc, "h.h", "extern \"C\" __global__ void K_FAR() {}\n"));
    const char *opts[] = {"-I", inc};
    g_create_dir = jt_path(d, "src");
    jitop__after_compile_hook = create_header_during_compile;
    jitop_ctx *ctx = jt_ctx(cache, "compute_90");
    bool cached = true;
    char key[33];
    char *ptx = build_checked(ctx, src, opts, 2, &cached, key);
    jitop__after_compile_hook = NULL;
    assert_false(cached);
    assert_has_kernel(ptx, "K_NEAR");
    free(ptx);
    jitop_ctx_destroy(ctx);
    free(g_create_dir);
    free(src); free(inc); free(cache); free(d);
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
        cmocka_unit_test(test_scan_spellings),
        cmocka_unit_test(test_scan_defines),
        cmocka_unit_test(test_symlinked_dirs_resolved_as_the_kernel_does),
        cmocka_unit_test(test_include_spellings_rebuild),
        cmocka_unit_test(test_ctime_same_size_edit_mtime_restored),
        cmocka_unit_test(test_macro_include_safe_mode),
        cmocka_unit_test(test_macro_include_unbounded_not_cached),
        cmocka_unit_test(test_macro_include_in_toolkit_header),
        cmocka_unit_test(test_macro_include_resolved_from_defines),
        cmocka_unit_test(test_inline_text_quoted_include_in_cwd),
        cmocka_unit_test(test_inline_text_manifest_per_directory),
        cmocka_unit_test(test_new_header_shadowing_rebuilds),
        cmocka_unit_test(test_header_created_during_compile),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
