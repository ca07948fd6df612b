/* Differential test of the dependency scan against real preprocessors.
 * Over generated projects (nested headers with include guards and cycles,
 * symlinked folders, relative names with "..", absolute names,
 * #include_next, names given by macros, and every adversarial spelling of a
 * directive: comments inside it, line splices inside the directive name and
 * the header name, %:, form feed and vertical tab, trigraphs, gcc's
 * blank-before-newline splice, next to commented-out and #if 0 includes and
 * strings that look like directives), every file gcc's preprocessor lists
 * (gcc -M -nostdinc with the same include dirs) and every header whose
 * kernel NVRTC compiled must be in jitop's dependency list, compared as
 * real paths, and no directive may need safe mode.
 *
 * Seeded: the CI runs fixed seeds (JITOP_DIFF_SEED, default 1, is the
 * first; each round adds one) for JITOP_DIFF_ITERATIONS rounds (default
 * 24; NVRTC compiles every 6th round, every 12th under valgrind). A failure
 * prints its seed and the generated files. */
#include "testutil.h"

#include "build/build.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static uint64_t rng;

static uint32_t rnd(uint32_t n)
{
    rng ^= rng << 13; /* xorshift64 */
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng % n);
}

/* The folders of a generated project, relative to its root. lnk is a link
 * into real/a, lk a link into real/b/deep: headers are named through them. */
static const char *const folders[] = {"src", "inc1", "inc2", "real/a", "real/b", "real/b/deep",
                                      "common"};
enum { NFOLDERS = sizeof folders / sizeof folders[0], MAX_HEADERS = 12 };

struct project {
    char *root;                    /* real path */
    int nheaders;
    int folder[MAX_HEADERS];       /* index into folders */
    char text[MAX_HEADERS + 1][4096]; /* [nheaders] is the source */
    bool c_iso;                    /* gcc in ISO C mode: trigraphs are replaced */
    bool gcc_only;                 /* holds what gcc reads and NVRTC rejects */
};

static void append(char *buf, const char *fmt, ...) JITOP__PRINTF(2, 3);
static void append(char *buf, const char *fmt, ...)
{
    size_t n = strlen(buf);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf + n, 4096 - n, fmt, ap);
    va_end(ap);
    if (strlen(buf) >= 4000)
        fail_msg("generated text too long");
}

/* "../x/y": path seen from directory from (both relative to the root). */
static void relative(const char *from, const char *path, char *out, size_t cap)
{
    /* Skip the leading components the two share. */
    const char *f = from, *p = path;
    for (;;) {
        size_t nf = strcspn(f, "/"), np = strcspn(p, "/");
        if (nf == 0 || nf != np || strncmp(f, p, nf) != 0 || p[np] != '/')
            break;
        f += nf + (f[nf] == '/');
        p += np + 1;
    }
    out[0] = '\0';
    for (const char *q = f; *q; q += strcspn(q, "/"), q += *q == '/')
        snprintf(out + strlen(out), cap - strlen(out), "../");
    snprintf(out + strlen(out), cap - strlen(out), "%s", p);
}

/* A name that resolves to header j from a file in folder f: relative to f,
 * through a link and "..", relative to an include dir, or absolute. */
static void spell_name(const struct project *p, int f, int j, char *name, size_t cap,
                       bool *angle)
{
    const char *to = folders[p->folder[j]];
    char file[128], rel[256];
    snprintf(file, sizeof file, "%s/h%d.h", to, j);
    *angle = false;
    switch (rnd(6)) {
    case 0: /* through src/lnk (real/a) and "..": lnk/../b/... from src */
        if (strncmp(to, "real/", 5) == 0) {
            relative(folders[f], "src/lnk", rel, sizeof rel);
            snprintf(name, cap, "%s/../%s", rel, file + 5);
            return;
        }
        break;
    case 1: /* relative to an include dir, in brackets or quotes */
        if (strcmp(to, "inc1") == 0 || strcmp(to, "inc2") == 0 || strcmp(to, "src") == 0) {
            snprintf(name, cap, "h%d.h", j);
            *angle = rnd(2);
            return;
        }
        if (strcmp(to, "real/b/deep") == 0) { /* inc1/lk */
            snprintf(name, cap, "lk/h%d.h", j);
            *angle = rnd(2);
            return;
        }
        break;
    case 2: /* absolute, through the link */
        if (strncmp(to, "real/", 5) == 0) {
            snprintf(name, cap, "%s/src/lnk/../%s", p->root, file + 5);
            return;
        }
        snprintf(name, cap, "%s/%s", p->root, file);
        return;
    default:
        break;
    }
    relative(folders[f], file, name, cap);
}

/* One #include of name, spelled one of the many ways a preprocessor takes. */
static void spell_directive(struct project *p, char *buf, const char *name, bool angle)
{
    char open = angle ? '<' : '"', close = angle ? '>' : '"';
    size_t split = strlen(name) > 1 ? 1 + rnd((uint32_t)strlen(name) - 1) : 0;
    static int macro;
    switch (rnd(18)) {
    case 0: append(buf, "#/**/include %c%s%c\n", open, name, close); break;
    case 1: append(buf, "#include/**/%c%s%c\n", open, name, close); break;
    case 2: append(buf, "#\\\ninclude %c%s%c\n", open, name, close); break;
    case 3: append(buf, "#inc\\\nlude %c%s%c\n", open, name, close); break;
    case 4: append(buf, "%%:include %c%s%c\n", open, name, close); break;
    case 5: append(buf, "#\f include\v%c%s%c\n", open, name, close); break;
    case 6: /* a splice inside the name */
        append(buf, "#include %c%.*s\\\n%s%c\n", open, (int)split, name, name + split, close);
        break;
    case 7: append(buf, "/* a\n */ #include %c%s%c // b\n", open, name, close); break;
    case 8: append(buf, "# include /* c\n d */ %c%s%c /* e\n f */\n", open, name, close); break;
    case 9: append(buf, "  #   include %c%s%c\r\n", open, name, close); break;
    case 10: append(buf, "#inc\\\r\nlude %c%s%c\n", open, name, close); break;
    case 13: /* a macro names it */
        macro++;
        append(buf, "#define INC_%d %c%s%c\n#include INC_%d\n", macro, open, name, close, macro);
        break;
    case 14: /* through a second macro */
        macro++;
        append(buf, "#define VAL_%d %c%s%c\n#define INC_%d VAL_%d\n#include/**/INC_%d\n", macro,
               open, name, close, macro, macro, macro);
        break;
    case 11:
        if (p->c_iso) { /* gcc -std=c11 replaces trigraphs; NVRTC then runs as C++14 */
            append(buf, "?\?=include %c%s%c\n", open, name, close);
            break;
        }
        /* fall through */
    case 12:
        if (!p->c_iso) { /* gcc splices "\\ \n", NVRTC does not */
            p->gcc_only = true;
            append(buf, "#\\ \ninclude %c%s%c\n", open, name, close);
            break;
        }
        /* fall through */
    default: append(buf, "#include %c%s%c\n", open, name, close); break;
    }
}

/* Lines a preprocessor does not read as an include (the names do not
 * exist: an include of one would fail gcc). */
static void distractor(char *buf, int k)
{
    switch (rnd(7)) {
    case 0: append(buf, "// #include \"nope%d.h\"\n", k); break;
    case 1: append(buf, "/* #include \"nope%d.h\"\n#include <nope%d.h> */\n", k, k); break;
    case 2:
        append(buf, "__device__ const char s%d[] = \"#include \\\"nope%d.h\\\"\";\n", k, k);
        break;
    case 3: append(buf, "#if 0\n#include \"missing%d.h\"\n#endif\n", k); break;
    case 4: append(buf, "__device__ int x%d; /* '\n#include \"nope%d.h\" */\n", k, k); break;
    case 5: append(buf, "#define M%d \\\n  include \"nope%d.h\"\n", k, k); break;
    default: append(buf, "__device__ const char c%d = '\"'; /* \" */\n", k); break;
    }
}

static void generate(struct project *p)
{
    p->nheaders = 4 + (int)rnd(MAX_HEADERS - 3);
    p->c_iso = rnd(4) == 0;
    p->gcc_only = false;
    for (int i = 0; i < p->nheaders; i++)
        p->folder[i] = (int)rnd(NFOLDERS);
    for (int i = 0; i <= p->nheaders; i++) {
        char *t = p->text[i];
        int f = i < p->nheaders ? p->folder[i] : 0; /* the source is in src */
        t[0] = '\0';
        if (i < p->nheaders)
            append(t, "#ifndef G%d\n#define G%d\n", i, i);
        int n = (int)rnd(4) + (i == p->nheaders ? 3 : 0);
        for (int k = 0; k < n; k++) {
            int j = (int)rnd((uint32_t)p->nheaders);
            char name[512];
            bool angle;
            spell_name(p, f, j, name, sizeof name, &angle);
            if (rnd(3) == 0)
                distractor(t, i * 10 + k);
            spell_directive(p, t, name, angle);
        }
        if (rnd(3) == 0) /* inc1/nx.h includes inc2/nx.h by #include_next */
            append(t, "#include <nx.h>\n");
        if (i < p->nheaders)
            append(t, "extern \"C\" __global__ void k%d() {}\n#endif\n", i);
        else
            append(t, "extern \"C\" __global__ void k_main() {}\n");
    }
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        fail_msg("open %s: %s", path, strerror(errno));
    assert_int_equal(fwrite(text, 1, strlen(text), f), strlen(text));
    assert_int_equal(fclose(f), 0);
}

static void make_dirs_and_files(const struct project *p)
{
    char path[1024];
    for (int i = 0; i < NFOLDERS; i++) { /* parents come first in the list */
        snprintf(path, sizeof path, "%s/%s", p->root, folders[i]);
        for (char *q = path + strlen(p->root) + 1;; q++) {
            char c = *q;
            if (c != '/' && c != '\0')
                continue;
            *q = '\0';
            if (mkdir(path, 0700) != 0 && errno != EEXIST)
                fail_msg("mkdir %s: %s", path, strerror(errno));
            *q = c;
            if (!c)
                break;
        }
    }
    snprintf(path, sizeof path, "%s/src/lnk", p->root);
    assert_int_equal(symlink("../real/a", path), 0);
    snprintf(path, sizeof path, "%s/inc1/lk", p->root);
    assert_int_equal(symlink("../real/b/deep", path), 0);
    snprintf(path, sizeof path, "%s/inc1/nx.h", p->root);
    write_file(path, "#ifndef NX1\n#define NX1\n#include_next <nx.h>\n#endif\n");
    snprintf(path, sizeof path, "%s/inc2/nx.h", p->root);
    write_file(path, "#ifndef NX2\n#define NX2\nextern \"C\" __global__ void k_nx() {}\n#endif\n");
    for (int i = 0; i < p->nheaders; i++) {
        snprintf(path, sizeof path, "%s/%s/h%d.h", p->root, folders[p->folder[i]], i);
        write_file(path, p->text[i]);
    }
    snprintf(path, sizeof path, "%s/src/main.cu", p->root);
    write_file(path, p->text[p->nheaders]);
}

static void dump(const struct project *p, uint64_t seed)
{
    print_message("seed %llu (c_iso %d), project %s:\n", (unsigned long long)seed, p->c_iso,
                  p->root);
    for (int i = 0; i <= p->nheaders; i++)
        print_message("--- %s/%s\n%s", i < p->nheaders ? folders[p->folder[i]] : "src",
                      i < p->nheaders ? "h.h" : "main.cu", p->text[i]);
}

struct path_list {
    char *v[64];
    int n;
};

static void list_add_real(struct path_list *l, const char *path, const char *what)
{
    char *r = realpath(path, NULL);
    if (!r)
        fail_msg("%s lists %s, which does not resolve: %s", what, path, strerror(errno));
    if (l->n == 64)
        fail_msg("too many files");
    l->v[l->n++] = r;
}

static bool list_has(const struct path_list *l, const char *real)
{
    for (int i = 0; i < l->n; i++)
        if (strcmp(l->v[i], real) == 0)
            return true;
    return false;
}

static void list_free(struct path_list *l)
{
    for (int i = 0; i < l->n; i++)
        free(l->v[i]);
    l->n = 0;
}

/* gcc -M's list: "main.o: a b \\\n c". */
static void gcc_deps(const struct project *p, struct path_list *out)
{
    char cmd[2048], *output = NULL;
    snprintf(cmd, sizeof cmd,
             "cd '%s' && gcc -M -nostdinc -x c %s -Isrc -Iinc1 -Iinc2 src/main.cu 2>/dev/null",
             p->root, p->c_iso ? "-std=c11" : "-std=gnu11");
    int rc = jt_run(cmd, &output);
    if (rc != 0) {
        char again[2100];
        snprintf(again, sizeof again,
                 "cd '%s' && gcc -M -nostdinc -x c -Isrc -Iinc1 -Iinc2 src/main.cu", p->root);
        free(output);
        jt_run(again, &output);
        fail_msg("gcc -M failed (%d): %s", rc, output ? output : "");
    }
    bool target = true;
    for (char *tok = strtok(output, " \t\r\n"); tok; tok = strtok(NULL, " \t\r\n")) {
        if (strcmp(tok, "\\") == 0)
            continue;
        if (target) {
            target = tok[strlen(tok) - 1] != ':';
            continue;
        }
        char path[2048];
        snprintf(path, sizeof path, "%s%s%s", tok[0] == '/' ? "" : p->root,
                 tok[0] == '/' ? "" : "/", tok);
        list_add_real(out, path, "gcc -M");
    }
    free(output);
}

static void check_subset(const struct path_list *ref, const struct path_list *ours,
                         const char *who, const struct project *p, uint64_t seed)
{
    for (int i = 0; i < ref->n; i++)
        if (!list_has(ours, ref->v[i])) {
            dump(p, seed);
            for (int k = 0; k < ours->n; k++)
                print_message("jitop: %s\n", ours->v[k]);
            fail_msg("seed %llu: %s reads %s, which jitop's dependency list lacks",
                     (unsigned long long)seed, who, ref->v[i]);
        }
}

/* NVRTC's list: the files whose kernel is in the PTX it compiled. */
static void nvrtc_deps(const struct project *p, jitop__unit *u, const char *text,
                       struct path_list *out, uint64_t seed)
{
    jitop__binary bin;
    if (jitop__compile(u, text, &bin) != JITOP_OK) {
        dump(p, seed);
        fail_msg("seed %llu: NVRTC: %s", (unsigned long long)seed, jitop_errmsg(NULL));
    }
    char path[1024], want[32];
    for (int i = 0; i < p->nheaders; i++) {
        snprintf(want, sizeof want, ".entry k%d(", i);
        if (strstr((const char *)bin.data, want)) {
            snprintf(path, sizeof path, "%s/%s/h%d.h", p->root, folders[p->folder[i]], i);
            list_add_real(out, path, "NVRTC");
        }
    }
    if (strstr((const char *)bin.data, ".entry k_nx(")) {
        snprintf(path, sizeof path, "%s/inc2/nx.h", p->root);
        list_add_real(out, path, "NVRTC");
    }
    jitop__binary_free(&bin);
}

static uint64_t env_u64(const char *name, uint64_t def)
{
    const char *v = getenv(name);
    return v && *v ? strtoull(v, NULL, 10) : def;
}

static void test_deps_contain_what_preprocessors_read(void **state)
{
    (void)state;
    uint64_t first = env_u64("JITOP_DIFF_SEED", 1);
    uint64_t rounds = env_u64("JITOP_DIFF_ITERATIONS", 24);
    const char *wrapper = getenv("JITOP_TEST_WRAPPER");
    uint64_t nvrtc_every = wrapper && strstr(wrapper, "valgrind") ? 12 : 6;
    int nvrtc_runs = 0;
    for (uint64_t seed = first; seed < first + rounds; seed++) {
        struct project p;
        char *tmp = jt_tmpdir();
        p.root = realpath(tmp, NULL);
        assert_non_null(p.root);
        rng = seed * 0x9E3779B97F4A7C15ull + 1;
        generate(&p);
        make_dirs_and_files(&p);

        char src[1024], inc1[1024], inc2[1024];
        snprintf(src, sizeof src, "%s/src/main.cu", p.root);
        snprintf(inc1, sizeof inc1, "%s/inc1", p.root);
        snprintf(inc2, sizeof inc2, "%s/inc2", p.root);
        const char *opts[] = {"-I", inc1, "-I", inc2, "-std=c++14"};
        jitop__unit u;
        assert_int_equal(jitop__unit_init(&u, src, NULL, opts, p.c_iso ? 5 : 4, NULL, 0,
                                          "compute_90"),
                         JITOP_OK);
        jitop__deps d;
        char *text = NULL;
        if (jitop__deps_scan(&u, &d, &text) != JITOP_OK)
            fail_msg("seed %llu: %s", (unsigned long long)seed, jitop_errmsg(NULL));
        if (d.note) {
            dump(&p, seed);
            fail_msg("seed %llu: no directive here needs safe mode: %s", (unsigned long long)seed,
                     d.note);
        }
        struct path_list ours = {0}, ref = {0};
        for (size_t i = 0; i < d.n; i++)
            list_add_real(&ours, d.v[i].path, "jitop");

        gcc_deps(&p, &ref);
        check_subset(&ref, &ours, "gcc -M", &p, seed);
        list_free(&ref);
        if (!p.gcc_only && (seed - first) % nvrtc_every == 0) {
            nvrtc_deps(&p, &u, text, &ref, seed);
            check_subset(&ref, &ours, "NVRTC", &p, seed);
            list_free(&ref);
            nvrtc_runs++;
        }
        list_free(&ours);
        free(text);
        jitop__deps_free(&d);
        jitop__unit_free(&u);
        free(tmp); /* removed at exit, with the others */
        free(p.root);
    }
    print_message("%llu projects from seed %llu, %d compiled by NVRTC\n",
                  (unsigned long long)rounds, (unsigned long long)first, nvrtc_runs);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_deps_contain_what_preprocessors_read),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
