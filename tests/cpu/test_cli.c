/*
 * The `jitop` command-line tool, run as a real process ($JITOP_CLI) against a
 * fresh source directory and a fresh cache per test. Real NVRTC, no GPU.
 * $JITOP_CLI_WRAPPER (for example "valgrind -q --error-exitcode=99") is put
 * in front of every CLI run.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <ctype.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "testutil.h"

typedef struct fixture {
    char *dir;   /* sources */
    char *cache; /* the cache root, inside dir */
} fixture;

static const char kernel_a[] = "#include \"common.h\"\n"
                               "extern \"C\" __global__ void scale(float *x, int n) {\n"
                               "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
                               "    if (i < n) x[i] *= SCALE;\n"
                               "}\n";
static const char kernel_b[] = "extern \"C\" __global__ void add_one(float *x, int n) {\n"
                               "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
                               "    if (i < n) x[i] += 1.0f;\n"
                               "}\n";
static const char header_v1[] = "#define SCALE 2.0f\n";
static const char header_v2[] = "#define SCALE 3.0f\n";
/* Line 3 has the error. */
static const char kernel_bad[] = "extern \"C\" __global__ void broken(float *x) {\n"
                                 "    x[0] = 1.0f;\n"
                                 "    this is not C++;\n"
                                 "}\n";
/* common.h is found only through -I src. */
static const char kernel_tmpl[] = "#include \"common.h\"\n"
                                  "template <typename T, int N>\n"
                                  "__global__ void fill(T *x) { x[threadIdx.x] = T(N * SCALE); }\n";
static const char kernel_def[] = "#ifndef VALUE\n#error VALUE must be defined\n#endif\n"
                                 "extern \"C\" __global__ void put(int *x) { x[0] = VALUE; }\n";

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof *f);
    assert_non_null(f);
    f->dir = jt_tmpdir();
    f->cache = jt_path(f->dir, "cache");
    free(jt_write(f->dir, "src/common.h", header_v1));
    free(jt_write(f->dir, "src/a.cu", kernel_a));
    free(jt_write(f->dir, "src/sub/b.cu", kernel_b));
    free(jt_write(f->dir, "src/notes.txt", "not a kernel\n"));
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    jt_rm_rf(f->dir);
    free(f->dir);
    free(f->cache);
    free(f);
    return 0;
}

/* Runs `jitop ARGS` in the fixture's directory with the fixture's cache and
 * no JITOP_ARCH from the caller's environment. stdout_only: stderr is
 * discarded (for parsing). Returns the exit status; *out gets the output. */
static int cli(const fixture *f, int stdout_only, char **out, const char *fmt, ...)
{
    char args[2048];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    assert_true(n >= 0 && (size_t)n < sizeof args);
    const char *wrapper = getenv("JITOP_CLI_WRAPPER");
    size_t cap = strlen(f->dir) + strlen(f->cache) + strlen(jt_cli()) + (size_t)n +
                 (wrapper ? strlen(wrapper) : 0) + 128;
    char *cmd = malloc(cap);
    assert_non_null(cmd);
    snprintf(cmd, cap, "cd '%s' && env -u JITOP_ARCH JITOP_CACHE_DIR='%s' %s '%s' %s%s", f->dir,
             f->cache, wrapper ? wrapper : "", jt_cli(), args, stdout_only ? " 2>/dev/null" : "");
    int rc = jt_run(cmd, out);
    free(cmd);
    return rc;
}

static int count_lines(const char *s)
{
    int n = 0;
    for (; *s; s++)
        n += *s == '\n';
    return n;
}

/* A minimal parser for the CLI's flat JSON lines: an object whose values are
 * strings (with escapes), numbers, true, false or null. Fills up to 16
 * (name, value) pairs with the decoded text; returns the count, or -1 when
 * the line is not such an object. */
typedef struct jfield {
    char name[32];
    char value[4096];
    int is_string;
} jfield;

static const char *jstring(const char *p, char *out, size_t cap)
{
    size_t n = 0;
    if (*p++ != '"')
        return NULL;
    while (*p && *p != '"') {
        char c = *p++;
        if ((unsigned char)c < 0x20)
            return NULL;
        if (c == '\\') {
            c = *p++;
            switch (c) {
            case '"': case '\\': case '/': break;
            case 'n': c = '\n'; break;
            case 't': c = '\t'; break;
            case 'r': c = '\r'; break;
            case 'b': c = '\b'; break;
            case 'f': c = '\f'; break;
            case 'u':
                for (int k = 0; k < 4; k++)
                    if (!isxdigit((unsigned char)p[k]))
                        return NULL;
                p += 4;
                c = '?';
                break;
            default:
                return NULL;
            }
        }
        if (n + 1 < cap)
            out[n++] = c;
    }
    out[n] = '\0';
    return *p == '"' ? p + 1 : NULL;
}

static int parse_json_line(const char *line, jfield *fields, int cap)
{
    const char *p = line;
    int n = 0;
    if (*p++ != '{')
        return -1;
    while (*p != '}') {
        if (n == cap)
            return -1;
        jfield *f = &fields[n];
        if (!(p = jstring(p, f->name, sizeof f->name)) || *p++ != ':')
            return -1;
        f->is_string = *p == '"';
        if (f->is_string) {
            if (!(p = jstring(p, f->value, sizeof f->value)))
                return -1;
        } else if (*p == '[') {
            return -1; /* arrays are parsed by their own test */
        } else {
            size_t k = strspn(p, "-+.0123456789eEtruefalsn");
            if (k == 0 || k >= sizeof f->value)
                return -1;
            memcpy(f->value, p, k);
            f->value[k] = '\0';
            p += k;
        }
        n++;
        if (*p == ',')
            p++;
        else if (*p != '}')
            return -1;
    }
    return p[1] == '\0' ? n : -1;
}

static const jfield *jget(const jfield *fields, int n, const char *name)
{
    for (int i = 0; i < n; i++)
        if (strcmp(fields[i].name, name) == 0)
            return &fields[i];
    return NULL;
}

static int is_key(const char *s)
{
    if (strlen(s) != 32)
        return 0;
    for (; *s; s++)
        if (!isxdigit((unsigned char)*s) || isupper((unsigned char)*s))
            return 0;
    return 1;
}

/* The key of the first result line for file (text output: "FILE ARCH STATUS
 * KEY MS ms"), copied into key. */
static void key_of(const char *out, const char *file, const char *arch, char key[33])
{
    char prefix[256];
    snprintf(prefix, sizeof prefix, "%s %s ", file, arch);
    const char *p = strstr(out, prefix);
    assert_non_null(p);
    p += strlen(prefix);
    p = strchr(p, ' ');
    assert_non_null(p);
    memcpy(key, p + 1, 32);
    key[32] = '\0';
    assert_true(is_key(key));
}

static void test_build_then_cached(void **state)
{
    fixture *f = *state;
    char *out = NULL, k1[33], k2[33];
    assert_int_equal(cli(f, 0, &out, "build --arch sm_90 src/a.cu"), 0);
    assert_non_null(strstr(out, "src/a.cu sm_90 compiled "));
    key_of(out, "src/a.cu", "sm_90", k1);
    free(out);

    assert_int_equal(cli(f, 0, &out, "build --arch sm_90 src/a.cu"), 0);
    assert_non_null(strstr(out, "src/a.cu sm_90 cached "));
    assert_null(strstr(out, "compiled"));
    /* never a progress line when stderr is not a terminal */
    assert_null(strstr(out, "\r"));
    assert_null(strstr(out, "compiling"));
    key_of(out, "src/a.cu", "sm_90", k2);
    assert_string_equal(k1, k2);
    assert_int_equal(count_lines(out), 1);
    free(out);
}

static void test_json_lines(void **state)
{
    fixture *f = *state;
    char *out = NULL;
    jfield fields[16];
    for (int round = 0; round < 2; round++) {
        assert_int_equal(cli(f, 1, &out, "build --json --arch sm_90 src/a.cu src/sub/b.cu"), 0);
        assert_int_equal(count_lines(out), 2);
        int seen_a = 0, seen_b = 0;
        for (char *line = strtok(out, "\n"); line; line = strtok(NULL, "\n")) {
            int n = parse_json_line(line, fields, 16);
            assert_true(n == 6);
            assert_string_equal(jget(fields, n, "name")->value, "null"); /* the file alone */
            const jfield *file = jget(fields, n, "file"), *arch = jget(fields, n, "arch"),
                         *status = jget(fields, n, "status"), *key = jget(fields, n, "key"),
                         *ms = jget(fields, n, "ms");
            assert_true(file && arch && status && key && ms);
            assert_true(file->is_string && arch->is_string && status->is_string);
            assert_string_equal(arch->value, "sm_90");
            assert_string_equal(status->value, round == 0 ? "compiled" : "cached");
            assert_true(key->is_string && is_key(key->value));
            assert_false(ms->is_string);
            char *end = NULL;
            double v = strtod(ms->value, &end);
            assert_true(*end == '\0' && v >= 0.0);
            seen_a += strcmp(file->value, "src/a.cu") == 0;
            seen_b += strcmp(file->value, "src/sub/b.cu") == 0;
        }
        assert_int_equal(seen_a, 1);
        assert_int_equal(seen_b, 1);
        free(out);
    }
}

static void test_directory_expansion(void **state)
{
    fixture *f = *state;
    char *out = NULL;
    /* the directory, plus one of its files named again: each file once */
    assert_int_equal(cli(f, 1, &out, "build --arch sm_90 src src/a.cu ./src/sub/b.cu"), 0);
    assert_int_equal(count_lines(out), 2);
    const char *a = strstr(out, "src/a.cu sm_90 ");
    const char *b = strstr(out, "src/sub/b.cu sm_90 ");
    assert_non_null(a);
    assert_non_null(b);
    assert_null(strstr(out, "notes.txt"));
    free(out);

    /* sorted: a.cu before sub/b.cu (both cached now, so printed in order) */
    assert_int_equal(cli(f, 1, &out, "build --arch sm_90 src/"), 0);
    a = strstr(out, "src/a.cu sm_90 cached");
    b = strstr(out, "src/sub/b.cu sm_90 cached");
    assert_true(a && b && a < b);
    free(out);

    free(jt_write(f->dir, "empty/readme.txt", "no kernels\n"));
    assert_int_not_equal(cli(f, 0, &out, "build --arch sm_90 empty"), 0);
    assert_non_null(strstr(out, "no .cu files"));
    free(out);

    assert_int_not_equal(cli(f, 0, &out, "build --arch sm_90 src/missing.cu"), 0);
    assert_non_null(strstr(out, "src/missing.cu"));
    free(out);
}

static void test_multiple_archs(void **state)
{
    fixture *f = *state;
    char *out = NULL, k80[33], k90[33];
    assert_int_equal(cli(f, 1, &out, "build -j 2 --arch sm_80,sm_90 src"), 0);
    assert_int_equal(count_lines(out), 4);
    assert_non_null(strstr(out, "src/a.cu sm_80 compiled"));
    assert_non_null(strstr(out, "src/a.cu sm_90 compiled"));
    assert_non_null(strstr(out, "src/sub/b.cu sm_80 compiled"));
    assert_non_null(strstr(out, "src/sub/b.cu sm_90 compiled"));
    key_of(out, "src/a.cu", "sm_80", k80);
    key_of(out, "src/a.cu", "sm_90", k90);
    assert_string_not_equal(k80, k90);
    free(out);

    /* JITOP_ARCH gives the default, a list too; one arch cached, one new */
    char *cmd = NULL;
    assert_true(asprintf(&cmd, "cd '%s' && JITOP_CACHE_DIR='%s' JITOP_ARCH=sm_90,sm_86 '%s' build "
                               "src/a.cu 2>/dev/null",
                         f->dir, f->cache, jt_cli()) > 0);
    assert_int_equal(jt_run(cmd, &out), 0);
    free(cmd);
    assert_non_null(strstr(out, "src/a.cu sm_90 cached"));
    assert_non_null(strstr(out, "src/a.cu sm_86 compiled"));
    assert_int_equal(count_lines(out), 2);
    free(out);
}

static void test_syntax_error(void **state)
{
    fixture *f = *state;
    char *out = NULL;
    jfield fields[16];
    free(jt_write(f->dir, "bad/bad.cu", kernel_bad));
    free(jt_write(f->dir, "bad/good.cu", kernel_b));
    assert_int_equal(cli(f, 0, &out, "build --arch sm_90 bad"), 1);
    assert_non_null(strstr(out, "bad.cu(3)")); /* NVRTC's file(line) */
    assert_non_null(strstr(out, "bad/bad.cu sm_90 error"));
    assert_non_null(strstr(out, "bad/good.cu sm_90 compiled")); /* the others still build */
    free(out);

    /* JSON: the log is escaped into the error field; stdout stays parseable */
    assert_int_equal(cli(f, 1, &out, "build --json --arch sm_90 bad/bad.cu"), 1);
    assert_int_equal(count_lines(out), 1);
    *strchr(out, '\n') = '\0';
    int n = parse_json_line(out, fields, 16);
    assert_int_equal(n, 7);
    assert_string_equal(jget(fields, n, "status")->value, "error");
    assert_string_equal(jget(fields, n, "key")->value, "null");
    assert_non_null(strstr(jget(fields, n, "error")->value, "bad.cu(3)"));
    free(out);

    /* nothing was cached for it: still an error, never "cached" */
    assert_int_equal(cli(f, 0, &out, "build --arch sm_90 bad/bad.cu"), 1);
    assert_null(strstr(out, "cached"));
    free(out);
}

static void test_missing_arch(void **state)
{
    fixture *f = *state;
    char *out = NULL;
    int rc = cli(f, 0, &out, "build src/a.cu");
    if (jt_have_gpu()) {
        /* the driver names GPU 0's arch: then the build works */
        assert_int_equal(rc, 0);
    } else {
        assert_int_equal(rc, 2);
        assert_non_null(strstr(out, "--arch sm_90"));
        assert_non_null(strstr(out, "JITOP_ARCH"));
    }
    free(out);
    rc = cli(f, 0, &out, "build --arch '' src/a.cu");
    assert_int_equal(rc, 2);
    free(out);
}

static void test_explain(void **state)
{
    fixture *f = *state;
    char *out = NULL;
    jfield fields[16];
    free(jt_write(f->dir, "def/put.cu", kernel_def));

    assert_int_equal(cli(f, 0, &out, "explain --arch sm_90 src/a.cu"), 0);
    assert_non_null(strstr(out, "src/a.cu sm_90 miss"));
    free(out);

    assert_int_equal(cli(f, 0, &out, "build --arch sm_90 src/a.cu"), 0);
    free(out);
    assert_int_equal(cli(f, 0, &out, "explain --arch sm_90 src/a.cu"), 0);
    assert_non_null(strstr(out, "src/a.cu sm_90 hit"));
    free(out);
    assert_int_equal(cli(f, 1, &out, "explain --json --arch sm_90 src/a.cu"), 0);
    *strchr(out, '\n') = '\0';
    int n = parse_json_line(out, fields, 16);
    assert_true(n >= 3);
    assert_string_equal(jget(fields, n, "hit")->value, "true");
    assert_string_equal(jget(fields, n, "file")->value, "src/a.cu");
    free(out);

    /* a changed header is named */
    free(jt_write(f->dir, "src/common.h", header_v2));
    assert_int_equal(cli(f, 0, &out, "explain --arch sm_90 src/a.cu"), 0);
    assert_non_null(strstr(out, "src/a.cu sm_90 miss"));
    assert_non_null(strstr(out, "common.h"));
    free(out);

    /* a changed define is named */
    assert_int_equal(cli(f, 0, &out, "build --arch sm_90 -D VALUE=1 def/put.cu"), 0);
    free(out);
    assert_int_equal(cli(f, 0, &out, "explain --arch sm_90 -DVALUE=1 def/put.cu"), 0);
    assert_non_null(strstr(out, "def/put.cu sm_90 hit"));
    free(out);
    assert_int_equal(cli(f, 0, &out, "explain --arch sm_90 -D VALUE=2 def/put.cu"), 0);
    assert_non_null(strstr(out, "def/put.cu sm_90 miss"));
    assert_non_null(strstr(out, "VALUE=2"));
    assert_int_equal(count_lines(out), 1);
    free(out);
    /* explain compiled nothing: the build still compiles */
    assert_int_equal(cli(f, 0, &out, "build --arch sm_90 -D VALUE=2 def/put.cu"), 0);
    assert_non_null(strstr(out, "def/put.cu sm_90 compiled"));
    free(out);
}

static void test_options_and_names(void **state)
{
    fixture *f = *state;
    char *out = NULL;
    free(jt_write(f->dir, "t/fill.cu", kernel_tmpl));
    assert_int_equal(cli(f, 0, &out,
                         "build --arch sm_90 --std c++17 --use_fast_math -lineinfo -U NOTHING "
                         "-I src -Xnvrtc -maxrregcount=64 --name 'fill<float, 4>' "
                         "--name 'fill<int, 2>' t/fill.cu"),
                     0);
    /* The file alone and each instance on its own, as the runtime builds them. */
    assert_int_equal(count_lines(out), 3);
    assert_non_null(strstr(out, "t/fill.cu sm_90 compiled"));
    assert_non_null(strstr(out, " ms  fill<float, 4>\n"));
    assert_non_null(strstr(out, " ms  fill<int, 2>\n"));
    free(out);
    assert_int_equal(cli(f, 0, &out,
                         "build --arch sm_90 --std c++17 --use_fast_math -lineinfo -U NOTHING "
                         "-I src -Xnvrtc -maxrregcount=64 --name 'fill<float, 4>' "
                         "--name 'fill<int, 2>' t/fill.cu"),
                     0);
    assert_non_null(strstr(out, "t/fill.cu sm_90 cached"));
    assert_null(strstr(out, "compiled"));
    free(out);
    /* a different name expression is a different binary */
    assert_int_equal(cli(f, 0, &out,
                         "build --arch sm_90 --std c++17 --use_fast_math -lineinfo -U NOTHING "
                         "-I src -Xnvrtc -maxrregcount=64 --name 'fill<float, 8>' t/fill.cu"),
                     0);
    assert_non_null(strstr(out, "t/fill.cu sm_90 compiled"));
    assert_non_null(strstr(out, "t/fill.cu sm_90 cached")); /* the file alone */
    free(out);
    /* a name no source declares fails the build, naming it and NVRTC's answer */
    assert_int_equal(cli(f, 0, &out, "build --arch sm_90 -I src --name 'nope<1>' t/fill.cu"), 1);
    assert_non_null(strstr(out, "--name 'nope<1>' (sm_90): no file given declares it"));
    assert_non_null(strstr(out, "identifier \"nope\" is undefined"));
    free(out);
    /* the same answer again, from the cache: nothing compiled */
    assert_int_equal(cli(f, 0, &out, "build --arch sm_90 -I src --name 'nope<1>' t/fill.cu"), 1);
    assert_non_null(strstr(out, "no file given declares it"));
    assert_null(strstr(out, "compiled"));
    free(out);
    /* without -I src the header is not found: the log names it */
    assert_int_equal(cli(f, 0, &out, "build --arch sm_90 --name 'fill<float, 4>' t/fill.cu"), 1);
    assert_non_null(strstr(out, "common.h"));
    free(out);
    /* a flag NVRTC rejects fails the build, exit 1, naming it */
    assert_int_equal(cli(f, 0, &out, "build --arch sm_90 -I src -Xnvrtc --no-such-nvrtc-flag t/fill.cu"),
                     1);
    assert_non_null(strstr(out, "--no-such-nvrtc-flag"));
    free(out);
}

/* What `jitop build --name` prewarms is what the runtime looks up: the
 * instance built on its own, from the file that declares it, under the key
 * jitop_build gives it with one name; each other file answers that it does
 * not declare it (cached too: the runtime asks them the same). */
static void test_names_prewarm_runtime_keys(void **state)
{
    fixture *f = *state;
    char *out = NULL;
    free(jt_write(f->dir, "p/one.cu",
                  "template <int N> __global__ void addn(float *x) { x[threadIdx.x] += N; }\n"));
    free(jt_write(f->dir, "p/two.cu",
                  "template <typename T> __global__ void twice(T *x) { x[0] *= 2; }\n"));
    assert_int_equal(cli(f, 1, &out,
                         "build --json --arch sm_90,sm_100 --name 'addn<1>' --name 'addn<2>' "
                         "--name 'twice<float>' p/one.cu p/two.cu"),
                     0);
    /* each file alone and with each name (declared or not), x 2 archs */
    assert_int_equal(count_lines(out), 16);
    jitop_config cfg;
    jitop_config_init(&cfg);
    cfg.cache_dir = f->cache;
    cfg.compile_only = 1;
    jitop_ctx *ctx = NULL;
    assert_int_equal(jitop_ctx_create(&cfg, &ctx), JITOP_OK);
    jfield fields[16];
    int instances = 0, undeclared = 0;
    for (char *line = strtok(out, "\n"); line; line = strtok(NULL, "\n")) {
        int n = parse_json_line(line, fields, 16);
        assert_int_equal(n, 6);
        const jfield *file = jget(fields, n, "file"), *arch = jget(fields, n, "arch"),
                     *name = jget(fields, n, "name"), *key = jget(fields, n, "key"),
                     *status = jget(fields, n, "status");
        bool alone = !name->is_string;
        bool defines = alone || strstr(file->value, strncmp(name->value, "addn", 4) == 0
                                                        ? "one.cu"
                                                        : "two.cu");
        char *path = jt_path(f->dir, file->value);
        const char *names[1] = {name->value};
        jitop_build_result r;
        int st = jitop_build(ctx, path, arch->value, NULL, 0, alone ? NULL : names, alone ? 0 : 1,
                             &r);
        if (defines) {
            instances += !alone;
            assert_int_equal(st, JITOP_OK);
            assert_int_equal(r.cached, 1);
            assert_string_equal(r.key, key->value);
        } else {
            /* the other file's answer, cached: JITOP_ENOTFOUND without a compile */
            undeclared++;
            assert_string_equal(status->value, "undeclared");
            assert_int_equal(st, JITOP_ENOTFOUND);
        }
        free(path);
    }
    assert_int_equal(instances, 6);
    assert_int_equal(undeclared, 6);
    jitop_ctx_destroy(ctx);
    free(out);
}

/* A template defined in a header is the including file's, as NVRTC sees
 * it: --name builds it from that file, with no mention of it in its text. */
static void test_name_from_a_header(void **state)
{
    fixture *f = *state;
    char *out = NULL;
    free(jt_write(f->dir, "h/tmpl.cuh",
                  "template <typename T> __global__ void from_header(T *x) { x[0] = T(1); }\n"));
    free(jt_write(f->dir, "h/user.cu", "#include \"tmpl.cuh\"\n"));
    free(jt_write(f->dir, "h/other.cu", "extern \"C\" __global__ void other(int *x) {}\n"));
    assert_int_equal(cli(f, 0, &out,
                         "build --arch sm_90 --name 'from_header<float>' h/other.cu h/user.cu"),
                     0);
    assert_non_null(strstr(out, "h/user.cu sm_90 compiled"));
    assert_non_null(strstr(out, "  from_header<float>\n"));
    assert_int_equal(count_lines(out), 3); /* both files alone, the instance; not other.cu's no */
    free(out);
    assert_int_equal(cli(f, 0, &out,
                         "build --arch sm_90 --name 'from_header< float >' h/other.cu h/user.cu"),
                     0);
    assert_null(strstr(out, "compiled")); /* another spelling: the same key */
    free(out);
}

/* NVRTC's warnings are printed on stderr as a compiler prints them
 * (FILE:LINE: warning ...), at the compile and again on a cache hit, from
 * the entry; once per distinct log. */
static void test_warnings_printed_like_a_compiler(void **state)
{
    fixture *f = *state;
    char *out = NULL, *err = NULL;
    free(jt_write(f->dir, "w/warn.cu",
                  "extern \"C\" __global__ void warn(int *x) {\n"
                  "    int unused = 1;\n"
                  "    x[0] = 2;\n"
                  "}\n"));
    char *src = jt_path(f->dir, "w/warn.cu");
    char *where = NULL;
    assert_true(asprintf(&where, "%s:2: warning", src) > 0);
    for (int pass = 0; pass < 2; pass++) {
        assert_int_equal(cli(f, 0, &out, "build --arch sm_90 w/warn.cu 2>&1 >/dev/null"), 0);
        if (!strstr(out, where) || !strstr(out, "unused"))
            jt_fail_showing(out, "pass %d: expected '%s' on stderr", pass, where);
        free(out);
        assert_int_equal(cli(f, 1, &err, "build --arch sm_90 w/warn.cu"), 0);
        assert_non_null(strstr(err, "cached")); /* stdout: results only */
        assert_null(strstr(err, "warning"));
        free(err);
    }
    /* --verbose (JITOP_VERBOSE): the library's log says it too, from the
     * cache entry on a hit. */
    assert_int_equal(cli(f, 0, &out, "build --verbose --arch sm_90 w/warn.cu 2>&1 >/dev/null"), 0);
    if (!strstr(out, "NVRTC's log (from the cache):") || !strstr(out, "unused"))
        jt_fail_showing(out, "expected NVRTC's cached log with its warning");
    free(out);
    /* A quiet file prints nothing there. */
    assert_int_equal(cli(f, 0, &out, "build --arch sm_90 src/sub/b.cu 2>&1 >/dev/null"), 0);
    assert_string_equal(out, "");
    free(out);
    free(where);
    free(src);
}

/* The toolkit's stub libcuda.so found first on the library path: asking
 * GPU 0 for the arch fails saying it is the stub (not "update the
 * driver"), naming where it was found. */
static void test_stub_driver_named(void **state)
{
    fixture *f = *state;
    const char *stub = JITOP_CUDA_HOME "/lib64/stubs/libcuda.so";
    if (access(stub, R_OK) != 0) {
        print_message("SKIP: no toolkit stub at %s\n", stub);
        skip();
    }
    char *dir = jt_path(f->dir, "stubs");
    char *link = jt_path(dir, "libcuda.so.1");
    char *cmd = NULL, *out = NULL;
    assert_int_equal(mkdir(dir, 0700), 0);
    assert_int_equal(symlink(stub, link), 0);
    assert_true(asprintf(&cmd,
                         "cd '%s' && env -u JITOP_ARCH LD_LIBRARY_PATH='%s' JITOP_CACHE_DIR='%s' "
                         "'%s' build src/sub/b.cu",
                         f->dir, dir, f->cache, jt_cli()) > 0);
    assert_int_equal(jt_run(cmd, &out), 2);
    if (!strstr(out, "stub library") || !strstr(out, "CUDA_ERROR_STUB_LIBRARY") ||
        !strstr(out, link) || !strstr(out, "LD_LIBRARY_PATH") || strstr(out, "update the"))
        jt_fail_showing(out, "expected the stub library named, with the fix");
    free(out);
    free(cmd);
    free(link);
    free(dir);
}

/* On a terminal (a pseudo-terminal from script(1)) a progress line is drawn
 * on stderr and erased again; results still come one per line. */
static void test_progress_on_terminal(void **state)
{
    fixture *f = *state;
    char *out = NULL, *cmd = NULL;
    if (jt_run("command -v script >/dev/null", NULL) != 0) {
        print_message("SKIP: script(1) is not installed, no pseudo-terminal to test with\n");
        skip();
    }
    assert_true(asprintf(&cmd,
                         "cd '%s' && JITOP_CACHE_DIR='%s' script -qec \"'%s' build -j 2 --arch "
                         "sm_90 src\" /dev/null",
                         f->dir, f->cache, jt_cli()) > 0);
    assert_int_equal(jt_run(cmd, &out), 0);
    free(cmd);
    assert_non_null(strstr(out, "compiling src/"));
    assert_non_null(strstr(out, "/2] compiling "));
    assert_non_null(strstr(out, "\r\033[K"));
    assert_non_null(strstr(out, "src/a.cu sm_90 compiled"));
    assert_non_null(strstr(out, "src/sub/b.cu sm_90 compiled"));
    free(out);
}

/* A newer mtime with the same bytes is still a hit, and builds as cached. */
static void test_touch_is_hit(void **state)
{
    fixture *f = *state;
    char *out = NULL;
    assert_int_equal(cli(f, 1, &out, "build --arch sm_90 src/a.cu"), 0);
    free(out);
    char *src = jt_path(f->dir, "src/a.cu"), *hdr = jt_path(f->dir, "src/common.h");
    jt_touch(src, 5.0);
    jt_touch(hdr, 7.0);
    free(src);
    free(hdr);
    assert_int_equal(cli(f, 1, &out, "explain --arch sm_90 src/a.cu"), 0);
    assert_non_null(strstr(out, "src/a.cu sm_90 hit"));
    free(out);
    assert_int_equal(cli(f, 1, &out, "build --arch sm_90 src/a.cu"), 0);
    assert_non_null(strstr(out, "src/a.cu sm_90 cached"));
    free(out);
}

static void test_ls_gc_clean(void **state)
{
    fixture *f = *state;
    char *out = NULL, ka[33], kb[33];
    assert_int_equal(cli(f, 0, &out, "ls"), 0);
    assert_int_equal(count_lines(out), 0);
    free(out);

    assert_int_equal(cli(f, 1, &out, "build --arch sm_90 src"), 0);
    key_of(out, "src/a.cu", "sm_90", ka);
    key_of(out, "src/sub/b.cu", "sm_90", kb);
    free(out);

    assert_int_equal(cli(f, 1, &out, "ls"), 0);
    assert_int_equal(count_lines(out), 2);
    const char *la = strstr(out, ka), *lb = strstr(out, kb);
    assert_true(la && lb);
    const char *eol = strchr(la, '\n');
    char *src = strstr(la, "src/a.cu");
    assert_true(src && src < eol);
    char *hdr = strstr(la, "common.h");
    assert_true(hdr && hdr < eol);
    assert_true(strstr(la, " sm_90 ") && strstr(la, " sm_90 ") < eol);
    free(out);

    assert_int_equal(cli(f, 1, &out, "ls --json"), 0);
    assert_int_equal(count_lines(out), 2);
    assert_non_null(strstr(out, "\"key\":\""));
    assert_non_null(strstr(out, ka));
    assert_non_null(strstr(out, "\"sources\":[\""));
    assert_non_null(strstr(out, "\"size\":"));
    free(out);

    /* gc to a size both entries exceed: the cache ends empty */
    assert_int_equal(cli(f, 1, &out, "gc --max-size 1K"), 0);
    assert_non_null(strstr(out, "freed "));
    assert_null(strstr(out, "freed 0 bytes"));
    free(out);
    assert_int_equal(cli(f, 1, &out, "ls"), 0);
    assert_int_equal(count_lines(out), 0);
    free(out);

    /* a generous cap frees nothing */
    assert_int_equal(cli(f, 1, &out, "build --arch sm_90 src"), 0);
    free(out);
    assert_int_equal(cli(f, 1, &out, "gc --max-size=1G"), 0);
    assert_non_null(strstr(out, "freed 0 bytes"));
    free(out);
    assert_int_equal(cli(f, 1, &out, "ls"), 0);
    assert_int_equal(count_lines(out), 2);
    free(out);

    assert_int_equal(cli(f, 1, &out, "clean"), 0);
    free(out);
    assert_int_equal(cli(f, 1, &out, "ls"), 0);
    assert_int_equal(count_lines(out), 0);
    free(out);
    assert_int_equal(cli(f, 0, &out, "build --arch sm_90 src/a.cu"), 0);
    assert_non_null(strstr(out, "compiled"));
    free(out);

    /* --cache-dir beats $JITOP_CACHE_DIR */
    assert_int_equal(cli(f, 1, &out, "ls --cache-dir other"), 0);
    assert_int_equal(count_lines(out), 0);
    free(out);

    assert_int_equal(cli(f, 0, &out, "gc --max-size lots"), 2);
    assert_non_null(strstr(out, "lots"));
    free(out);
}

/* A file name holding an escape sequence and a newline: plain output shows
 * both as visible escapes (one line per result, nothing for the terminal to
 * act on); JSON output has the exact name. */
static void test_control_chars_escaped(void **state)
{
    fixture *f = *state;
    char *out = NULL;
    free(jt_write(f->dir, "src/odd\033[31m\nname.cu", kernel_b));
    const char *shown = "src/odd\\x1b[31m\\nname.cu";
    assert_int_equal(cli(f, 0, &out, "build --arch sm_90 'src/odd\033[31m\nname.cu'"), 0);
    assert_null(strchr(out, '\033'));
    assert_int_equal(count_lines(out), 1);
    assert_non_null(strstr(out, shown));
    free(out);
    assert_int_equal(cli(f, 0, &out, "explain --arch sm_90 'src/odd\033[31m\nname.cu'"), 0);
    assert_null(strchr(out, '\033'));
    assert_int_equal(count_lines(out), 1);
    assert_non_null(strstr(out, shown));
    free(out);
    assert_int_equal(cli(f, 0, &out, "ls"), 0);
    assert_null(strchr(out, '\033'));
    assert_int_equal(count_lines(out), 1);
    assert_non_null(strstr(out, "odd\\x1b[31m\\nname.cu"));
    free(out);
    assert_int_equal(cli(f, 1, &out, "ls --json"), 0);
    assert_int_equal(count_lines(out), 1);
    assert_non_null(strstr(out, "odd\\u001b[31m\\nname.cu\""));
    free(out);
    /* A failure names the file the same way on stderr. */
    free(jt_write(f->dir, "src/bad\033]0;x\a.cu", kernel_bad));
    assert_int_equal(cli(f, 0, &out, "build --arch sm_90 'src/bad\033]0;x\a.cu'"), 1);
    assert_null(strchr(out, '\033'));
    assert_non_null(strstr(out, "src/bad\\x1b]0;x\\x07.cu"));
    free(out);
}

static int count_of(const char *text, const char *what)
{
    int n = 0;
    for (const char *p = strstr(text, what); p; p = strstr(p + 1, what))
        n++;
    return n;
}

/* An arch named twice is built once. */
static void test_repeated_arch_built_once(void **state)
{
    fixture *f = *state;
    char *out = NULL;
    assert_int_equal(cli(f, 1, &out, "build --arch sm_90,sm_90 src/a.cu"), 0);
    assert_int_equal(count_lines(out), 1);
    assert_non_null(strstr(out, "src/a.cu sm_90 compiled"));
    free(out);
    assert_int_equal(cli(f, 1, &out, "build --arch sm_90 --arch sm_80,sm_90 src/a.cu"), 0);
    assert_int_equal(count_lines(out), 2);
    assert_int_equal(count_of(out, " sm_90 "), 1);
    free(out);
    assert_int_equal(cli(f, 1, &out, "explain --arch sm_90,sm_90 src/a.cu"), 0);
    assert_int_equal(count_lines(out), 1);
    free(out);
}

/* An arch this NVRTC does not compile for, or one that is not an arch
 * name: a usage error (exit 2) said once for the command, not once per
 * file, and nothing is compiled. */
static void test_unsupported_arch_is_usage_error(void **state)
{
    fixture *f = *state;
    char *out = NULL;
    assert_int_equal(cli(f, 0, &out, "build --arch sm_90,sm_10 src"), 2);
    if (count_of(out, "sm_10 is not one") != 1 || !strstr(out, "sm_90, sm_100") ||
        strstr(out, "compiled") || strstr(out, "options []"))
        jt_fail_showing(out, "expected sm_10 refused once, the known archs listed, nothing built");
    free(out);
    assert_int_equal(cli(f, 1, &out, "ls"), 0);
    assert_int_equal(count_lines(out), 0);
    free(out);
    assert_int_equal(cli(f, 0, &out, "build --arch compute_999 src"), 2);
    assert_int_equal(count_of(out, "compute_999 is not one"), 1);
    free(out);
    assert_int_equal(cli(f, 0, &out, "explain --arch sm_10 src"), 2);
    assert_int_equal(count_of(out, "sm_10 is not one"), 1);
    assert_null(strstr(out, "never built"));
    free(out);
    assert_int_equal(cli(f, 0, &out, "build --arch sm_9 src"), 2);
    assert_int_equal(count_of(out, "'sm_9' is not valid"), 1);
    free(out);
}

static void test_help(void **state)
{
    fixture *f = *state;
    static const char *const cmds[] = {"build", "explain", "watch", "ls", "gc", "clean"};
    char *out = NULL;
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
        char usage[64];
        snprintf(usage, sizeof usage, "usage: jitop %s", cmds[i]);
        assert_int_equal(cli(f, 1, &out, "help %s", cmds[i]), 0);
        assert_non_null(strstr(out, usage));
        free(out);
        assert_int_equal(cli(f, 1, &out, "%s --help", cmds[i]), 0);
        assert_non_null(strstr(out, usage));
        free(out);
    }
    assert_int_equal(cli(f, 1, &out, "--help"), 0);
    assert_non_null(strstr(out, "usage: jitop COMMAND"));
    free(out);
    assert_int_equal(cli(f, 1, &out, "help"), 0);
    assert_non_null(strstr(out, "usage: jitop COMMAND"));
    free(out);
    assert_int_equal(cli(f, 0, &out, "help frobnicate"), 2);
    assert_non_null(strstr(out, "frobnicate"));
    free(out);
    assert_int_equal(cli(f, 0, &out, ""), 2);
    assert_non_null(strstr(out, "usage: jitop"));
    free(out);
}

static void test_version(void **state)
{
    fixture *f = *state;
    char *out = NULL, expect[64];
    snprintf(expect, sizeof expect, "jitop %s\n", jitop_version_string());
    assert_int_equal(cli(f, 1, &out, "--version"), 0);
    assert_non_null(strstr(out, expect));
    assert_non_null(strstr(out, "NVRTC "));
    free(out);
}

/* The Makefile names the shared library after the version in jitop.h, its
 * one source of truth. */
static void test_library_named_after_header_version(void **state)
{
    (void)state;
    const char *build = getenv("JITOP_BUILD");
    assert_non_null(build);
    char *path = NULL;
    if (asprintf(&path, "%s/libjitop.so.%d.%d.%d", build, JITOP_VERSION_MAJOR,
                 JITOP_VERSION_MINOR, JITOP_VERSION_PATCH) < 0)
        fail_msg("asprintf: out of memory");
    FILE *fp = fopen(path, "rb");
    if (!fp)
        fail_msg("%s is missing: the Makefile's VERSION is not jitop.h's", path);
    fclose(fp);
    free(path);
}

static void test_usage_errors(void **state)
{
    fixture *f = *state;
    char *out = NULL;
    static const char *const cases[][2] = {
        {"build --arch sm_90 --bogus src", "--bogus"},
        {"explain --arch sm_90 --frob src", "--frob"},
        {"ls --bogus", "--bogus"},
        {"gc --nope", "--nope"},
        {"clean --nope", "--nope"},
        {"clean extra", "extra"},
        {"frobnicate", "frobnicate"},
        {"--frobnicate", "--frobnicate"},
        {"build --arch sm_90 -j 0 src", "-j"},
        {"build --arch sm_90 -j x src", "-j"},
        {"build --arch sm_90", "PATH"},
        {"build --arch sm_90 src -I", "-I"},
        {"build --arch sm_80,,sm_90 src", "--arch"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int rc = cli(f, 0, &out, "%s", cases[i][0]);
        if (rc != 2 || !strstr(out, cases[i][1]))
            jt_fail_showing(out, "`jitop %s`: exit %d, expected '%s'", cases[i][0], rc, cases[i][1]);
        free(out);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_build_then_cached, setup, teardown),
        cmocka_unit_test_setup_teardown(test_json_lines, setup, teardown),
        cmocka_unit_test_setup_teardown(test_directory_expansion, setup, teardown),
        cmocka_unit_test_setup_teardown(test_multiple_archs, setup, teardown),
        cmocka_unit_test_setup_teardown(test_syntax_error, setup, teardown),
        cmocka_unit_test_setup_teardown(test_missing_arch, setup, teardown),
        cmocka_unit_test_setup_teardown(test_explain, setup, teardown),
        cmocka_unit_test_setup_teardown(test_names_prewarm_runtime_keys, setup, teardown),
        cmocka_unit_test_setup_teardown(test_name_from_a_header, setup, teardown),
        cmocka_unit_test_setup_teardown(test_warnings_printed_like_a_compiler, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stub_driver_named, setup, teardown),
        cmocka_unit_test_setup_teardown(test_options_and_names, setup, teardown),
        cmocka_unit_test_setup_teardown(test_progress_on_terminal, setup, teardown),
        cmocka_unit_test_setup_teardown(test_touch_is_hit, setup, teardown),
        cmocka_unit_test_setup_teardown(test_ls_gc_clean, setup, teardown),
        cmocka_unit_test_setup_teardown(test_control_chars_escaped, setup, teardown),
        cmocka_unit_test_setup_teardown(test_repeated_arch_built_once, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unsupported_arch_is_usage_error, setup, teardown),
        cmocka_unit_test_setup_teardown(test_help, setup, teardown),
        cmocka_unit_test_setup_teardown(test_version, setup, teardown),
        cmocka_unit_test(test_library_named_after_header_version),
        cmocka_unit_test_setup_teardown(test_usage_errors, setup, teardown),
    };
    int failed = cmocka_run_group_tests_name("cli", tests, NULL, NULL);
    jt_cleanup();
    return failed;
}
