/* The include scanner's fast path and the process's scan memo: the fast
 * reader finds exactly what the reference reader (every character through
 * phases 1 and 2) finds, on random texts made of the spellings that make
 * scanning hard and on every real header a shipped kernel reads; the memo
 * never answers for bytes it has not seen (an edit that keeps the size and
 * mtime is scanned again) and leaves a unit's deps and key unchanged. */
#include "testutil.h"

#include "build/build.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static bool str_eq(const char *a, const char *b)
{
    return (!a && !b) || (a && b && strcmp(a, b) == 0);
}

/* Fails naming the text when the two scans differ in anything. */
static void assert_same_scan(const char *text, size_t len, const char *what)
{
    jitop__includes f, r;
    assert_int_equal(jitop__scan_includes(text, len, &f), JITOP_OK);
    assert_int_equal(jitop__scan_includes_reference(text, len, &r), JITOP_OK);
    bool same = f.n == r.n && f.ndefs == r.ndefs;
    for (size_t i = 0; same && i < f.n; i++)
        same = str_eq(f.v[i].name, r.v[i].name) && str_eq(f.v[i].text, r.v[i].text) &&
               f.v[i].line == r.v[i].line && f.v[i].quoted == r.v[i].quoted &&
               f.v[i].next == r.v[i].next && f.v[i].embed == r.v[i].embed;
    for (size_t i = 0; same && i < f.ndefs; i++)
        same = str_eq(f.defs[i].name, r.defs[i].name) && str_eq(f.defs[i].value, r.defs[i].value);
    if (!same) {
        fprintf(stderr, "fast and reference scans differ on %s (%zu/%zu includes, %zu/%zu "
                        "defines); text:\n%.*s\n",
                what, f.n, r.n, f.ndefs, r.ndefs, (int)len, text);
        for (size_t i = 0; i < f.n || i < r.n; i++)
            fprintf(stderr, "  [%zu] fast %s:%u  ref %s:%u\n", i,
                    i < f.n ? (f.v[i].name ? f.v[i].name : f.v[i].text) : "-",
                    i < f.n ? f.v[i].line : 0,
                    i < r.n ? (r.v[i].name ? r.v[i].name : r.v[i].text) : "-",
                    i < r.n ? r.v[i].line : 0);
    }
    jitop__includes_free(&f);
    jitop__includes_free(&r);
    assert_true(same);
}

/* Pieces that start or end every construct the scanner knows, and the bytes
 * that make phases 1 and 2 matter (splices, trigraphs, CR, blanks before a
 * newline), so that random texts put each next to each. */
static const char *const pieces[] = {
    "#", "#", "%:", "%", "include", "include_next", "embed", "define", " ", "\t", "\f", "\n",
    "\n", "\r\n", "\\\n", "\\ \n", "\\\r\n", "\\", "?\?/", "?\?/\n", "?\?=", "?\?(", "?", "?\?",
    "/*", "*/", "*", "/", "//", "\"", "'", "<", ">", "\"h.h\"", "<x.h>", "h.h", "NAME", "R",
    "u8R", "LR", "R\"d(", ")d\"", "(", ")", "1", "1'000", "0x1e+", "e", "+", "-", ".", ".5",
    "$", "\xc3\xa9", "a", "_b", "##", "\xEF\xBB\xBF", "\v",
};

static void test_fast_matches_reference_random(void **state)
{
    (void)state;
    size_t np = sizeof pieces / sizeof *pieces;
    char buf[1024];
    unsigned seed = 12345;
    for (int iter = 0; iter < 40000; iter++) {
        size_t len = 0, count = 1 + (size_t)(rand_r(&seed) % 40);
        for (size_t k = 0; k < count; k++) {
            const char *p = pieces[rand_r(&seed) % np];
            size_t n = strlen(p);
            if (len + n >= sizeof buf)
                break;
            memcpy(buf + len, p, n);
            len += n;
        }
        char what[64];
        snprintf(what, sizeof what, "random text %d (seed 12345)", iter);
        assert_same_scan(buf, len, what);
    }
}

/* Hand-picked cases where a fast path must hand over to the slow reader. */
static void test_fast_matches_reference_cases(void **state)
{
    (void)state;
    static const char *const cases[] = {
        "#include \"a.h\"\n",
        "/* x *\\\n/ #include \"in.h\" */\n#include \"out.h\"\n",
        "/* x *?\?/\n/\n#include \"tri.h\"\n",
        "// comment \\\n#include \"spliced.h\"\n#include \"b.h\"\n",
        "// comment \\  \n#include \"blank.h\"\n",
        "// ?\?/\n#include \"trig.h\"\n",
        "\"abc\\\n#include \\\"s.h\\\"\"\n#include \"t.h\"\n",
        "'\\\\'\n#include \"c.h\"\n",
        "\"\\\\\\\n#include \\\"u.h\\\"\n",
        "int x = 1'000; /* \n#include \"hidden.h\" */\n#include \"v.h\"\n",
        "a1'b'\n#include \"w.h\"\n",
        "u8\\\nR\"x(\n#include \"raw.h\"\n)x\"\n#include \"after.h\"\n",
        "R\"(\n#include \"raw2.h\"\n)\"\n",
        "FOOR\"x\"\n#include \"y.h\"\n",
        "0x1e\\\n+1 /*\n#include \"n.h\" */\n",
        ".\\\n5'a' /*\n#include \"m.h\" */\n",
        "/\\\n* #include \"sc.h\" */\n#include \"z.h\"\n",
        "x /\\\n/ c\n#include \"lc.h\"\n",
        "#define H \"h.h\"\n#include H\n",
        "  %: include <p.h>\n",
        "\"unterminated\n#include \"q.h\"\n",
        "/* never closed\n#include \"r.h\"\n",
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char what[32];
        snprintf(what, sizeof what, "case %zu", i);
        assert_same_scan(cases[i], strlen(cases[i]), what);
    }
}

/* Every toolkit header a shipped kernel reads, and the kernels. */
static void test_fast_matches_reference_real_headers(void **state)
{
    (void)state;
    static const char *const kernels[] = {"layernorm.cu", "lltm.cu"};
    size_t files = 0;
    for (size_t k = 0; k < sizeof kernels / sizeof *kernels; k++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", JITOP_SOURCE_KERNEL_DIR, kernels[k]);
        if (access(path, R_OK) != 0)
            continue;
        jitop__unit u;
        assert_int_equal(jitop__unit_init(&u, path, NULL, NULL, 0, NULL, 0, "sm_90"), JITOP_OK);
        jitop__deps d;
        char *text = NULL;
        assert_int_equal(jitop__deps_scan(&u, &d, &text), JITOP_OK);
        for (size_t i = 0; i < d.n; i++) {
            jitop__dep dep = {0};
            char *data = NULL;
            size_t len = 0;
            assert_int_equal(jitop__dep_read(d.v[i].path, &dep, &data, &len), JITOP_OK);
            assert_same_scan(data, len, d.v[i].path);
            free(data);
            files++;
        }
        free(text);
        jitop__deps_free(&d);
        jitop__unit_free(&u);
    }
    assert_true(files >= 10); /* layernorm.cu alone reads the fp16/bf16 headers */
}

static void scan_unit(const char *src, jitop__deps *d, char key[33])
{
    jitop__unit u;
    assert_int_equal(jitop__unit_init(&u, src, NULL, NULL, 0, NULL, 0, "sm_90"), JITOP_OK);
    char *text = NULL;
    assert_int_equal(jitop__deps_scan(&u, d, &text), JITOP_OK);
    jitop__cache_key(&u, d, key);
    free(text);
    jitop__unit_free(&u);
}

static void assert_same_deps(const jitop__deps *a, const jitop__deps *b)
{
    assert_int_equal(a->n, b->n);
    for (size_t i = 0; i < a->n; i++) {
        assert_string_equal(a->v[i].path, b->v[i].path);
        assert_true(XXH128_isEqual(a->v[i].hash, b->v[i].hash));
    }
}

/* A second scan in the process is answered by the memo and gives the same
 * deps, in the same order, and so the same key, as a scan with the memo
 * empty. */
static void test_memo_keeps_deps_and_key(void **state)
{
    (void)state;
    char path[4096];
    snprintf(path, sizeof path, "%s/layernorm.cu", JITOP_SOURCE_KERNEL_DIR);
    jitop__deps cold, warm;
    char kcold[33], kwarm[33];
    jitop__scan_memo_clear();
    scan_unit(path, &cold, kcold);
    size_t kept = jitop__scan_memo_size();
    assert_true(kept >= 10);
    scan_unit(path, &warm, kwarm);
    assert_int_equal(jitop__scan_memo_size(), kept); /* nothing new to keep */
    assert_same_deps(&cold, &warm);
    assert_string_equal(kcold, kwarm);
    jitop__deps_free(&cold);
    jitop__deps_free(&warm);
}

/* An edit that keeps the size and puts the mtime back is scanned again: the
 * memo is keyed by the bytes, never by stat data. */
static void test_memo_never_stale(void **state)
{
    (void)state;
    char *dir = jt_tmpdir();
    char *src = jt_write(dir, "main.cu", "#include \"a.h\"\n__global__ void k() {}\n");
    char *a = jt_write(dir, "a.h", "#include \"b.h\"\n");
    char *b = jt_write(dir, "b.h", "// b\n");
    char *c = jt_write(dir, "c.h", "// c\n");
    struct stat st;
    assert_int_equal(stat(a, &st), 0);
    jitop__deps d1, d2;
    char k1[33], k2[33];
    scan_unit(src, &d1, k1);
    assert_int_equal(d1.n, 3);
    assert_string_equal(d1.v[2].path, b);
    char *a2 = jt_write(dir, "a.h", "#include \"c.h\"\n");
    struct timespec times[2] = {st.st_atim, st.st_mtim};
    assert_int_equal(utimensat(AT_FDCWD, a2, times, 0), 0);
    scan_unit(src, &d2, k2);
    assert_int_equal(d2.n, 3);
    assert_string_equal(d2.v[2].path, c);
    assert_string_not_equal(k1, k2);
    jitop__deps_free(&d1);
    jitop__deps_free(&d2);
    free(src); free(a); free(a2); free(b); free(c); free(dir);
}

/* Many different texts: the memo starts over past its bounds and answers
 * right throughout. */
static void test_memo_bounded(void **state)
{
    (void)state;
    jitop__scan_memo_clear();
    char text[64];
    for (int i = 0; i < 5000; i++) {
        int n = snprintf(text, sizeof text, "#include \"h%d.h\"\n", i);
        XXH128_hash_t h = XXH3_128bits(text, (size_t)n);
        for (int twice = 0; twice < 2; twice++) {
            jitop__includes incs;
            assert_int_equal(jitop__scan_includes_memo(text, (size_t)n, h, &incs), JITOP_OK);
            assert_int_equal(incs.n, 1);
            char want[32];
            snprintf(want, sizeof want, "h%d.h", i);
            assert_string_equal(incs.v[0].name, want);
            jitop__includes_free(&incs);
        }
        assert_true(jitop__scan_memo_size() <= 4096);
    }
    jitop__scan_memo_clear();
    assert_int_equal(jitop__scan_memo_size(), 0);
}

/* Threads scanning through the memo at once (a watch thread's rebuild
 * beside an application's load): every answer right, whoever holds the
 * lock (TSAN=1 checks the locking). */
static void *memo_worker(void *arg)
{
    unsigned seed = (unsigned)(uintptr_t)arg;
    char text[64];
    for (int i = 0; i < 2000; i++) {
        int k = (int)(rand_r(&seed) % 50);
        int n = snprintf(text, sizeof text, "#include <t%d.h>\n#define M%d \"m.h\"\n", k, k);
        jitop__includes incs;
        if (jitop__scan_includes_memo(text, (size_t)n, XXH3_128bits(text, (size_t)n), &incs) !=
            JITOP_OK)
            return (void *)1;
        char want[32];
        snprintf(want, sizeof want, "t%d.h", k);
        bool ok = incs.n == 1 && strcmp(incs.v[0].name, want) == 0 && incs.ndefs == 1 &&
                  strcmp(incs.defs[0].value, "\"m.h\"") == 0;
        jitop__includes_free(&incs);
        if (!ok)
            return (void *)1;
        if (i % 500 == 499 && arg == (void *)1)
            jitop__scan_memo_clear();
    }
    return NULL;
}

static void test_memo_threads(void **state)
{
    (void)state;
    pthread_t t[4];
    for (uintptr_t i = 0; i < 4; i++)
        assert_int_equal(pthread_create(&t[i], NULL, memo_worker, (void *)(i + 1)), 0);
    for (int i = 0; i < 4; i++) {
        void *rc = (void *)1;
        assert_int_equal(pthread_join(t[i], &rc), 0);
        assert_null(rc);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fast_matches_reference_random),
        cmocka_unit_test(test_fast_matches_reference_cases),
        cmocka_unit_test(test_fast_matches_reference_real_headers),
        cmocka_unit_test(test_memo_keeps_deps_and_key),
        cmocka_unit_test(test_memo_never_stale),
        cmocka_unit_test(test_memo_bounded),
        cmocka_unit_test(test_memo_threads),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    jitop__scan_memo_clear();
    jt_cleanup();
    return rc;
}
