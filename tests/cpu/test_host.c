/* Host ops without a GPU: C sources compiled by the system compiler into a
 * cached shared object, called through libffi, rebuilt per object, built by
 * ninja or by jitop, hot-reloaded while another thread calls. */
#include "testutil.h"
#include "load/load.h"
#include "cache/cache_private.h"
#include "jitop_host.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define OK(call)                                                                                  \
    do {                                                                                          \
        int st_ = (call);                                                                         \
        if (st_ != JITOP_OK)                                                                      \
            fail_msg("%s: %s: %s", #call, jitop_strerror(st_), jitop_errmsg(NULL));               \
    } while (0)

/* Compiles seen by the hook, and the sources they were of. */
static atomic_int g_compiles;
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static char g_compiled[4096];

static void count_compile(const char *source)
{
    atomic_fetch_add(&g_compiles, 1);
    pthread_mutex_lock(&g_lock);
    const char *base = strrchr(source, '/');
    strncat(g_compiled, base ? base + 1 : source, sizeof g_compiled - strlen(g_compiled) - 2);
    strcat(g_compiled, " ");
    pthread_mutex_unlock(&g_lock);
}

static void reset_count(void)
{
    atomic_store(&g_compiles, 0);
    g_compiled[0] = '\0';
}

static int setup(void **state)
{
    (void)state;
    jitop__recent_window_ns = 0; /* files written by the test count as settled */
    jitop__host_before_compile_hook = count_compile;
    setenv("JITOP_NINJA", "0", 1);
    unsetenv("CC");
    reset_count();
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    jitop__host_before_compile_hook = NULL;
    unsetenv("JITOP_NINJA");
    unsetenv("CC");
    jt_cleanup();
    return 0;
}

/* A compile that starts in the clock tick of a write to one of its files
 * is done again (the compiler may have read either version: see
 * jitop__host_deps_from_depfile). Tests that count compiles let the tick
 * of their writes pass first: 10 ms is more than a kernel tick. */
static void settle(void)
{
    usleep(10000);
}

/* A context whose cache folder (made now, in the sources' folder) is
 * settled too: a folder changed in the clock tick a compile begins in makes
 * jitop compile again (it cannot tell whether a header appeared there
 * during the compile), and these tests count compiles. */
static jitop_ctx *host_ctx(const char *cache, const char *arch)
{
    jitop_ctx *ctx = jt_ctx(cache, arch);
    settle();
    return ctx;
}

static jitop_module *load(jitop_ctx *ctx, const char *name, const char *const *srcs, size_t n,
                          const char *const *opts, size_t nopts)
{
    jitop_module *m = NULL;
    OK(jitop_load(ctx, name, srcs, n, opts, nopts, &m));
    return m;
}

static int call_int(jitop_module *m, const char *name)
{
    jitop_fn *f = NULL;
    OK(jitop_fn_get(m, name, "int(void)", &f));
    int r = -1;
    OK(jitop_call(f, NULL, &r));
    return r;
}

static const char *VALUE_SRC = "#include <jitop_host.h>\n"
                               "#include \"value.h\"\n"
                               "JITOP_EXPORT(int, value, (void)) { return VALUE; }\n";

static void test_build_then_cache_hit(void **state)
{
    (void)state;
    char *dir = jt_tmpdir(), *cache = jt_path(dir, "cache");
    char *src = jt_write(dir, "v.c", VALUE_SRC);
    free(jt_write(dir, "value.h", "#define VALUE 41\n"));
    settle();
    const char *srcs[] = {src};
    jitop_ctx *ctx = host_ctx(cache, NULL);
    jitop_module *m = load(ctx, "v", srcs, 1, NULL, 0);
    assert_int_equal(call_int(m, "value"), 41);
    assert_int_equal(atomic_load(&g_compiles), 2); /* v.c and jitop's runtime object */
    jitop_ctx_destroy(ctx);

    /* A new context on the same cache: nothing compiled, same code. */
    reset_count();
    ctx = host_ctx(cache, NULL);
    m = load(ctx, "v", srcs, 1, NULL, 0);
    assert_int_equal(call_int(m, "value"), 41);
    assert_int_equal(atomic_load(&g_compiles), 0);
    jitop_fn_info infos[4];
    size_t count = 0;
    OK(jitop_module_fns(m, infos, 4, &count));
    assert_int_equal(count, 1);
    assert_string_equal(infos[0].name, "value");
    assert_string_equal(infos[0].signature, "int (void)");
    jitop_ctx_destroy(ctx);
    free(src);
    free(cache);
    free(dir);
}

/* The cache entries under root/v<N>/<ab>/ whose payload is an ELF object
 * of type t (1: relocatable, an object; 3: shared, the link), by path. */
static size_t find_elf_entries(const char *cache, int type, char paths[][1024], size_t max)
{
    char cmd[1200];
    /* An entry lives in a two-hex-digit folder of the versioned root. */
    snprintf(cmd, sizeof cmd,
             "find '%s' -type f -regex '.*/v[0-9]+/[0-9a-f][0-9a-f]/[0-9a-f]+'", cache);
    char *out = NULL;
    assert_int_equal(jt_run(cmd, &out), 0);
    size_t n = 0;
    for (char *line = strtok(out, "\n"); line; line = strtok(NULL, "\n")) {
        FILE *f = fopen(line, "rb");
        assert_non_null(f);
        static unsigned char buf[1 << 20];
        size_t len = fread(buf, 1, sizeof buf, f);
        fclose(f);
        for (size_t i = 0; i + 18 <= len; i++) {
            if (memcmp(buf + i, "\177ELF", 4) == 0 && buf[i + 16] == type && buf[i + 17] == 0) {
                if (n < max)
                    snprintf(paths[n], 1024, "%s", line);
                n++;
                break;
            }
        }
    }
    free(out);
    return n;
}

/* A warm load reads the module's one manifest: the objects' manifests are
 * not needed (removed here, nothing is compiled). An edit goes through the
 * objects' manifests (only the edited object is compiled) and leaves the
 * module's manifest naming the new link. */
static void test_warm_load_reads_the_module_manifest(void **state)
{
    (void)state;
    char *dir = jt_tmpdir(), *cache = jt_path(dir, "cache");
    char *src = jt_write(dir, "v.c", VALUE_SRC);
    free(jt_write(dir, "value.h", "#define VALUE 43\n"));
    settle();
    const char *srcs[] = {src};
    jitop_ctx *ctx = host_ctx(cache, NULL);
    assert_int_equal(call_int(load(ctx, "v", srcs, 1, NULL, 0), "value"), 43);
    jitop_ctx_destroy(ctx);
    /* Three manifests: v.c's, the runtime object's, the module's. */
    char cmd[2400], *out = NULL;
    snprintf(cmd, sizeof cmd, "find '%s' -path '*/manifests/*' -type f | wc -l", cache);
    assert_int_equal(jt_run(cmd, &out), 0);
    assert_int_equal(atoi(out), 3);
    free(out);

    /* A header edit: the module's manifest no longer vouches, v.c alone is
     * compiled again. */
    free(jt_write(dir, "value.h", "#define VALUE 44\n"));
    settle();
    reset_count();
    ctx = host_ctx(cache, NULL);
    assert_int_equal(call_int(load(ctx, "v", srcs, 1, NULL, 0), "value"), 44);
    assert_int_equal(atomic_load(&g_compiles), 1);
    assert_string_equal(g_compiled, "v.c ");
    jitop_ctx_destroy(ctx);

    /* Remove the objects' manifests: all but the one naming the new
     * link's key (the .so entry's name). */
    static char so[4][1024];
    char key[33];
    assert_int_equal(find_elf_entries(cache, 3, so, 4), 2); /* the old link and the new */
    snprintf(cmd, sizeof cmd, "ls -t '%s' '%s' | head -n 1", so[0], so[1]);
    assert_int_equal(jt_run(cmd, &out), 0);
    const char *slash = strrchr(out, '/');
    assert_non_null(slash);
    snprintf(key, sizeof key, "%.32s", slash + 1);
    free(out);
    snprintf(cmd, sizeof cmd,
             "find '%s' -path '*/manifests/*' -type f | xargs grep -L %s | xargs rm -f", cache,
             key);
    assert_int_equal(jt_run(cmd, NULL), 0);
    snprintf(cmd, sizeof cmd, "find '%s' -path '*/manifests/*' -type f | wc -l", cache);
    assert_int_equal(jt_run(cmd, &out), 0);
    assert_int_equal(atoi(out), 1);
    free(out);
    reset_count();
    ctx = host_ctx(cache, NULL);
    assert_int_equal(call_int(load(ctx, "v", srcs, 1, NULL, 0), "value"), 44);
    assert_int_equal(atomic_load(&g_compiles), 0);
    jitop_ctx_destroy(ctx);
    free(src);
    free(cache);
    free(dir);
}

/* A tampered .so entry (a byte of its code changed on disk) fails its
 * checksum: it is never loaded, the link is made again, the call gives
 * the source's value. */
static void test_tampered_so_entry_is_refused(void **state)
{
    (void)state;
    char *dir = jt_tmpdir(), *cache = jt_path(dir, "cache");
    char *src = jt_write(dir, "v.c", VALUE_SRC);
    free(jt_write(dir, "value.h", "#define VALUE 45\n"));
    settle();
    const char *srcs[] = {src};
    jitop_ctx *ctx = host_ctx(cache, NULL);
    assert_int_equal(call_int(load(ctx, "v", srcs, 1, NULL, 0), "value"), 45);
    jitop_ctx_destroy(ctx);
    static char so[4][1024];
    assert_int_equal(find_elf_entries(cache, 3, so, 4), 1);
    /* Flip every byte of the 45 immediate (mov $0x2d): a loaded object
     * would return another value. */
    FILE *f = fopen(so[0], "r+b");
    assert_non_null(f);
    static unsigned char buf[1 << 20];
    size_t len = fread(buf, 1, sizeof buf, f);
    size_t flipped = 0;
    for (size_t i = 0; i + 5 <= len; i++)
        if (buf[i] == 0xb8 && buf[i + 1] == 45 && buf[i + 2] == 0 && buf[i + 3] == 0 &&
            buf[i + 4] == 0) {
            buf[i + 1] = 46;
            flipped++;
        }
    assert_true(flipped >= 1);
    assert_int_equal(fseek(f, 0, SEEK_SET), 0);
    assert_int_equal(fwrite(buf, 1, len, f), len);
    assert_int_equal(fclose(f), 0);

    reset_count();
    ctx = host_ctx(cache, NULL);
    assert_int_equal(call_int(load(ctx, "v", srcs, 1, NULL, 0), "value"), 45);
    assert_int_equal(atomic_load(&g_compiles), 0); /* the objects are intact: a link only */
    jitop_ctx_destroy(ctx);
    /* The entry was written again: the next context loads it as is. */
    assert_int_equal(find_elf_entries(cache, 3, so, 4), 1);
    ctx = host_ctx(cache, NULL);
    assert_int_equal(call_int(load(ctx, "v", srcs, 1, NULL, 0), "value"), 45);
    jitop_ctx_destroy(ctx);
    free(src);
    free(cache);
    free(dir);
}

static void test_header_edit_rebuilds_only_its_object(void **state)
{
    (void)state;
    char *dir = jt_tmpdir(), *cache = jt_path(dir, "cache");
    char *a = jt_write(dir, "a.c", VALUE_SRC);
    char *b = jt_write(dir, "b.c", "#include <jitop_host.h>\n"
                                   "JITOP_EXPORT(int, other, (void)) { return 7; }\n");
    char *h = jt_write(dir, "value.h", "#define VALUE 1\n");
    settle();
    const char *srcs[] = {a, b};
    jitop_ctx *ctx = host_ctx(cache, NULL);
    jitop_module *m = load(ctx, "ab", srcs, 2, NULL, 0);
    assert_int_equal(call_int(m, "value"), 1);
    assert_int_equal(atomic_load(&g_compiles), 3);

    reset_count();
    free(jt_write(dir, "value.h", "#define VALUE 2 /* longer */\n"));
    settle();
    OK(jitop_module_reload(m));
    assert_int_equal(call_int(m, "value"), 2);
    assert_int_equal(call_int(m, "other"), 7);
    assert_string_equal(g_compiled, "a.c ");
    assert_int_equal(atomic_load(&g_compiles), 1);
    assert_int_equal(jitop_module_generation(m), 1);

    /* Touched, same bytes: no compile, no new code. */
    reset_count();
    jt_touch(h, 5);
    OK(jitop_module_reload(m));
    assert_int_equal(atomic_load(&g_compiles), 0);
    assert_int_equal(jitop_module_generation(m), 1);
    jitop_ctx_destroy(ctx);
    free(a);
    free(b);
    free(h);
    free(cache);
    free(dir);
}

static void test_flag_and_compiler_change_rebuild(void **state)
{
    (void)state;
    char *dir = jt_tmpdir(), *cache = jt_path(dir, "cache");
    char *src = jt_write(dir, "f.c", "#include <jitop_host.h>\n"
                                     "JITOP_EXPORT(int, n, (void)) { return N; }\n");
    settle();
    const char *srcs[] = {src};
    const char *o1[] = {"-Xhost=-DN=1"}, *o2[] = {"-DN=2"};
    jitop_ctx *ctx = host_ctx(cache, NULL);
    assert_int_equal(call_int(load(ctx, "f1", srcs, 1, o1, 1), "n"), 1);
    reset_count();
    assert_int_equal(call_int(load(ctx, "f2", srcs, 1, o2, 1), "n"), 2);
    assert_int_equal(atomic_load(&g_compiles), 1); /* f.c only: the runtime object is the same */
    jitop_ctx_destroy(ctx);

    /* Another compiler: everything again (the runtime object too). */
    if (access("/usr/bin/clang", X_OK) == 0) {
        setenv("CC", "clang", 1);
        reset_count();
        ctx = host_ctx(cache, NULL);
        assert_int_equal(call_int(load(ctx, "f1", srcs, 1, o1, 1), "n"), 1);
        assert_int_equal(atomic_load(&g_compiles), 2);
        jitop_ctx_destroy(ctx);
        unsetenv("CC");
    }
    /* A compiler that is not there: a clear error naming CC. */
    setenv("CC", "no-such-compiler-jitop", 1);
    ctx = host_ctx(cache, NULL);
    jitop_module *m = NULL;
    const char *o3[] = {"-DN=3"};
    assert_int_equal(jitop_load(ctx, "f3", srcs, 1, o3, 1, &m), JITOP_ENOTFOUND);
    assert_non_null(strstr(jitop_errmsg(NULL), "CC"));
    assert_non_null(strstr(jitop_errmsg(NULL), "no-such-compiler-jitop"));
    jitop_ctx_destroy(ctx);
    unsetenv("CC");
    free(src);
    free(cache);
    free(dir);
}

static const char *SCALARS_SRC =
    "#include <jitop_host.h>\n"
    "#include <stdbool.h>\n"
    "#include <stddef.h>\n"
    "JITOP_EXPORT(signed char, neg8, (signed char x)) { return (signed char)-x; }\n"
    "JITOP_EXPORT(unsigned char, inc8, (unsigned char x)) { return (unsigned char)(x + 1); }\n"
    "JITOP_EXPORT(short, neg16, (short x)) { return (short)-x; }\n"
    "JITOP_EXPORT(unsigned short, inc16, (unsigned short x)) { return (unsigned short)(x + 1); }\n"
    "JITOP_EXPORT(int, neg32, (int x)) { return -x; }\n"
    "JITOP_EXPORT(unsigned, inc32, (unsigned x)) { return x + 1; }\n"
    "JITOP_EXPORT(long long, neg64, (long long x)) { return -x; }\n"
    "JITOP_EXPORT(unsigned long, inc64, (unsigned long x)) { return x + 1; }\n"
    "JITOP_EXPORT(float, halff, (float x)) { return x / 2; }\n"
    "JITOP_EXPORT(double, halfd, (double x)) { return x / 2; }\n"
    "JITOP_EXPORT(bool, notb, (bool x)) { return !x; }\n"
    "JITOP_EXPORT(size_t, mix, (const double *restrict v, size_t n, int8_t a, uint16_t b,\n"
    "                           float c, double d, long e, void (*cb)(int)))\n"
    "{ (void)cb; size_t s = 0; for (size_t i = 0; i < n; i++) s += (size_t)v[i];\n"
    "  return s + (size_t)(a + b) + (size_t)c + (size_t)d + (size_t)e; }\n"
    "JITOP_EXPORT(void, fill, (int *out, int n)) { for (int i = 0; i < n; i++) out[i] = i * i; }\n"
    "JITOP_EXPORT(const char *, name, (void)) { return \"jitop\"; }\n";

static void test_calls_of_every_scalar_and_pointer(void **state)
{
    (void)state;
    char *dir = jt_tmpdir(), *cache = jt_path(dir, "cache");
    char *src = jt_write(dir, "s.c", SCALARS_SRC);
    const char *srcs[] = {src};
    jitop_ctx *ctx = host_ctx(cache, NULL);
    jitop_module *m = load(ctx, "s", srcs, 1, NULL, 0);
    jitop_fn *f;

    int8_t i8 = -100, r8 = 0;
    OK(jitop_fn_get(m, "neg8", "i8(i8)", &f));
    OK(jitop_call(f, (void *[]){&i8}, &r8));
    assert_int_equal(r8, 100);
    uint8_t u8 = 254, ru8 = 0;
    OK(jitop_fn_get(m, "inc8", "unsigned char(unsigned char)", &f));
    OK(jitop_call(f, (void *[]){&u8}, &ru8));
    assert_int_equal(ru8, 255);
    int16_t i16 = -30000, r16 = 0;
    OK(jitop_fn_get(m, "neg16", "i16(i16 x)", &f));
    OK(jitop_call(f, (void *[]){&i16}, &r16));
    assert_int_equal(r16, 30000);
    uint16_t u16 = 65534, ru16 = 0;
    OK(jitop_fn_get(m, "inc16", "u16(u16)", &f));
    OK(jitop_call(f, (void *[]){&u16}, &ru16));
    assert_int_equal(ru16, 65535);
    int32_t i32 = -2000000000, r32 = 0;
    OK(jitop_fn_get(m, "neg32", "int(int)", &f));
    OK(jitop_call(f, (void *[]){&i32}, &r32));
    assert_int_equal(r32, 2000000000);
    uint32_t u32 = 4000000000u, ru32 = 0;
    OK(jitop_fn_get(m, "inc32", "u32(unsigned int)", &f));
    OK(jitop_call(f, (void *[]){&u32}, &ru32));
    assert_true(ru32 == 4000000001u);
    int64_t i64 = -(INT64_C(1) << 62), r64 = 0;
    OK(jitop_fn_get(m, "neg64", "i64(long long)", &f));
    OK(jitop_call(f, (void *[]){&i64}, &r64));
    assert_true(r64 == INT64_C(1) << 62);
    uint64_t u64 = UINT64_MAX - 1, ru64 = 0;
    OK(jitop_fn_get(m, "inc64", "u64(u64)", &f));
    OK(jitop_call(f, (void *[]){&u64}, &ru64));
    assert_true(ru64 == UINT64_MAX);
    float fl = 3.0f, rf = 0;
    OK(jitop_fn_get(m, "halff", "float(float)", &f));
    OK(jitop_call(f, (void *[]){&fl}, &rf));
    assert_true(rf == 1.5f);
    double db = 5.0, rd = 0;
    OK(jitop_fn_get(m, "halfd", "f64(f64)", &f));
    OK(jitop_call(f, (void *[]){&db}, &rd));
    assert_true(rd == 2.5);
    _Bool b = 0, rb = 0;
    OK(jitop_fn_get(m, "notb", "bool(bool)", &f));
    OK(jitop_call(f, (void *[]){&b}, &rb));
    assert_true(rb == 1);

    double v[3] = {1, 2, 3};
    const double *vp = v;
    size_t n = 3, rs = 0;
    int8_t a = -1;
    uint16_t bb = 60000;
    float c = 2.0f;
    double d = 4.0;
    long e = 1L << 40;
    void *cb = NULL;
    OK(jitop_fn_get(m, "mix", "size_t(ptr, size_t, i8, u16, f32, f64, i64, ptr)", &f));
    OK(jitop_call(f, (void *[]){&vp, &n, &a, &bb, &c, &d, &e, &cb}, &rs));
    assert_true(rs == 6 + 59999 + 2 + 4 + ((size_t)1 << 40));

    int out[5] = {0}, cnt = 5;
    int *op = out;
    OK(jitop_fn_get(m, "fill", "void(int *, int)", &f));
    OK(jitop_call(f, (void *[]){&op, &cnt}, NULL));
    assert_int_equal(out[4], 16);
    const char *s = NULL;
    OK(jitop_fn_get(m, "name", "ptr()", &f));
    OK(jitop_call(f, NULL, &s));
    assert_string_equal(s, "jitop");

    /* The raw address: a direct call. */
    void *addr = NULL;
    OK(jitop_fn_get(m, "neg32", "i32(i32)", &f));
    OK(jitop_fn_addr(f, &addr));
    int (*neg)(int) = (int (*)(int))addr;
    assert_int_equal(neg(5), -5);
    jitop_ctx_destroy(ctx);
    free(src);
    free(cache);
    free(dir);
}

static void test_signature_mismatch_and_unknown_name(void **state)
{
    (void)state;
    char *dir = jt_tmpdir(), *cache = jt_path(dir, "cache");
    char *src = jt_write(dir, "s.c", SCALARS_SRC);
    const char *srcs[] = {src};
    jitop_ctx *ctx = host_ctx(cache, NULL);
    jitop_module *m = load(ctx, "s", srcs, 1, NULL, 0);
    jitop_fn *f = NULL;
    assert_int_equal(jitop_fn_get(m, "neg32", "i64(i64)", &f), JITOP_EARGS);
    assert_null(f);
    assert_non_null(strstr(jitop_errmsg(NULL), "int (int x)"));
    assert_int_equal(jitop_fn_get(m, "neg32", "int(int, int)", &f), JITOP_EARGS);
    assert_non_null(strstr(jitop_errmsg(NULL), "1 parameters, not 2"));
    assert_int_equal(jitop_fn_get(m, "halff", "double(double)", &f), JITOP_EARGS);
    assert_int_equal(jitop_fn_get(m, "fill", "void(int, int)", &f), JITOP_EARGS);
    assert_non_null(strstr(jitop_errmsg(NULL), "parameter 1 is ptr, not i32"));
    assert_int_equal(jitop_fn_get(m, "nope", "void(void)", &f), JITOP_ENOTFOUND);
    assert_non_null(strstr(jitop_errmsg(NULL), "neg8: signed char (signed char x)"));
    assert_non_null(strstr(jitop_errmsg(NULL), "fill: void (int *out, int n)"));
    assert_int_equal(jitop_fn_get(m, "neg32", "int(struct s)", &f), JITOP_EINVAL);
    assert_int_equal(jitop_fn_get(m, "neg32", "int", &f), JITOP_EINVAL);
    jitop_ctx_destroy(ctx);
    free(src);
    free(cache);
    free(dir);
}

static void test_syntax_error_gives_file_line(void **state)
{
    (void)state;
    char *dir = jt_tmpdir(), *cache = jt_path(dir, "cache");
    char *src = jt_write(dir, "bad.c", "#include <jitop_host.h>\n"
                                       "JITOP_EXPORT(int, f, (void))\n"
                                       "{ return 1 +; }\n");
    const char *srcs[] = {src};
    jitop_ctx *ctx = host_ctx(cache, NULL);
    jitop_module *m = NULL;
    assert_int_equal(jitop_load(ctx, "bad", srcs, 1, NULL, 0, &m), JITOP_ECOMPILE);
    assert_null(m);
    assert_non_null(strstr(jitop_errmsg(NULL), "bad.c:3:"));
    /* Nothing of it in the cache but the runtime object. */
    jitop_ctx_destroy(ctx);
    free(src);
    free(cache);
    free(dir);
}

/* Both builders give a working object and the same keys (what a key holds
 * does not depend on who ran the compiler). */
static char *built_key(const char *cache, const char *src, const char *ninja)
{
    if (ninja)
        setenv("JITOP_NINJA", ninja, 1);
    jitop_ctx *ctx = host_ctx(cache, NULL);
    jitop__host_lib lib;
    jitop__strv srcs = {0}, none = {0};
    OK(jitop__strv_push(&srcs, src));
    OK(jitop__host_lib_build(ctx, "n", &srcs, &none, &none, &lib));
    assert_false(lib.cached);
    assert_string_equal(lib.builder, strcmp(ninja, "0") == 0 ? "jitop" : "ninja");
    char *key = strdup(lib.key);
    jitop__host_lib_free(&lib);
    jitop__strv_free(&srcs);
    jitop_ctx_destroy(ctx);
    return key;
}

static void test_ninja_and_jitop_builders_agree(void **state)
{
    (void)state;
    if (access("/usr/bin/ninja", X_OK) != 0)
        skip();
    char *dir = jt_tmpdir(), *c1 = jt_path(dir, "c1"), *c2 = jt_path(dir, "c2");
    char *src = jt_write(dir, "v.c", VALUE_SRC);
    free(jt_write(dir, "value.h", "#define VALUE 5\n"));
    char *k1 = built_key(c1, src, "0");
    char *k2 = built_key(c2, src, "/usr/bin/ninja");
    assert_string_equal(k1, k2);

    /* Through ninja, a header edit: the module reloads with the new value. */
    jitop_ctx *ctx = host_ctx(c2, NULL);
    const char *srcs[] = {src};
    jitop_module *m = load(ctx, "v", srcs, 1, NULL, 0);
    assert_int_equal(call_int(m, "value"), 5);
    free(jt_write(dir, "value.h", "#define VALUE 6 /* edited */\n"));
    OK(jitop_module_reload(m));
    assert_int_equal(call_int(m, "value"), 6);
    jitop_ctx_destroy(ctx);
    setenv("JITOP_NINJA", "0", 1);
    free(k1);
    free(k2);
    free(src);
    free(c1);
    free(c2);
    free(dir);
}

/* The LLTM extension's host half compiles on its own (its kernels need a
 * GPU to load), records its prototypes, and checks its arguments before it
 * launches anything. */
static void test_lltm_extension_host_half(void **state)
{
    (void)state;
    char *dir = jt_tmpdir(), *cache = jt_path(dir, "cache");
    const char *srcs[] = {JITOP_SOURCE_KERNEL_DIR "/../examples/lltm_extension/lltm_host.c"};
    const char *opts[] = {"-Xhost=-Wall", "-Xhost=-Werror"};
    jitop_ctx *ctx = host_ctx(cache, NULL);
    jitop_module *m = load(ctx, "lltm_host", srcs, 1, opts, 2);
    assert_int_equal(call_int(m, "lltm_host_version"), 1);
    jitop_fn *f = NULL;
    OK(jitop_fn_get(m, "lltm_forward",
                    "int(ptr, ptr, ptr, ptr, ptr, ptr, ptr, ptr, i32, i32, i32, ptr)", &f));
    void *p = NULL;
    int zero = 0, one = 1, ret = -1;
    void *args[] = {&p, &p, &p, &p, &p, &p, &p, &p, &zero, &one, &one, &p};
    OK(jitop_call(f, args, &ret));
    assert_int_equal(ret, JITOP_EINVAL); /* B = 0: refused before any launch */
    OK(jitop_fn_get(m, "lltm_backward",
                    "int(const float *, const float *, float *, const float *, float *, float *, "
                    "float *, float *, float *, int, int, int, void *)",
                    &f));
    jitop_ctx_destroy(ctx);
    free(cache);
    free(dir);
}

/* `jitop build` prewarms host sources (no GPU): then a load compiles
 * nothing. */
static void test_cli_build_prewarms_host_sources(void **state)
{
    (void)state;
    char *dir = jt_tmpdir(), *cache = jt_path(dir, "cache");
    char *src = jt_write(dir, "v.c", VALUE_SRC);
    free(jt_write(dir, "value.h", "#define VALUE 8\n"));
    settle();
    char cmd[8192], *out = NULL;
    snprintf(cmd, sizeof cmd, "JITOP_NINJA=0 '%s' build --arch sm_90 --cache-dir '%s' '%s' "
             "-Xnvrtc -Xhost=-O1", jt_cli(), cache, src);
    assert_int_equal(jt_run(cmd, &out), 0);
    assert_non_null(strstr(out, "host built"));
    free(out);
    assert_int_equal(jt_run(cmd, &out), 0);
    assert_non_null(strstr(out, "host hit"));
    free(out);
    reset_count();
    jitop_ctx *ctx = host_ctx(cache, NULL);
    const char *srcs[] = {src}, *opts[] = {"-Xhost=-O1"};
    assert_int_equal(call_int(load(ctx, "v", srcs, 1, opts, 1), "value"), 8);
    assert_int_equal(atomic_load(&g_compiles), 0);
    jitop_ctx_destroy(ctx);
    free(src);
    free(cache);
    free(dir);
}

/* Lines of a file that contain needle. */
static int count_lines(const char *path, const char *needle)
{
    char *text = jt_read(path);
    int n = 0;
    for (const char *p = text; (p = strstr(p, needle)); p += strlen(needle))
        n++;
    free(text);
    return n;
}

/* `jitop watch` on a host source: built at start, again after a header
 * save, an error with file:line after a bad save; SIGTERM ends it. */
static void test_cli_watch_rebuilds_host_sources(void **state)
{
    (void)state;
    char *dir = jt_tmpdir(), *cache = jt_path(dir, "cache"), *out = jt_path(dir, "out.txt");
    char *src = jt_write(dir, "v.c", VALUE_SRC);
    free(jt_write(dir, "value.h", "#define VALUE 1\n"));
    settle();
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "JITOP_NINJA=0 exec '%s' watch --arch sm_90 --cache-dir '%s' '%s' > '%s' 2>&1",
             jt_cli(), cache, src, out);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    free(jt_write(dir, "out.txt", "")); /* exists before the first poll */
    for (int i = 0; i < 6000 && count_lines(out, "ok ") < 1; i++)
        usleep(10000);
    assert_int_equal(count_lines(out, "ok "), 1);
    free(jt_write_rename(dir, "value.h", "#define VALUE 2\n"));
    for (int i = 0; i < 6000 && count_lines(out, "ok ") < 2; i++)
        usleep(10000);
    assert_int_equal(count_lines(out, "ok "), 2);
    free(jt_write_rename(dir, "value.h", "#define VALUE 3 +\n"));
    for (int i = 0; i < 6000 && count_lines(out, "error ") < 1; i++)
        usleep(10000);
    assert_int_equal(count_lines(out, "v.c:3:"), 1);
    assert_int_equal(kill(pid, SIGTERM), 0);
    int ws = 0;
    assert_int_equal(waitpid(pid, &ws, 0), pid);
    assert_true(WIFEXITED(ws) && WEXITSTATUS(ws) == 0);
    free(src);
    free(out);
    free(cache);
    free(dir);
}

/* ---------------------------------------------------------- hot reload */

struct caller {
    jitop_fn *f;
    atomic_bool stop;
    atomic_int calls, failures, saw_new;
};

static void *call_loop(void *arg)
{
    struct caller *c = arg;
    while (!atomic_load(&c->stop)) {
        int r = -1;
        int st = jitop_call(c->f, NULL, &r);
        if (st != JITOP_OK || (r != 1 && r != 2))
            atomic_fetch_add(&c->failures, 1);
        if (r == 2)
            atomic_store(&c->saw_new, 1);
        atomic_fetch_add(&c->calls, 1);
    }
    return NULL;
}

/* Whether this process maps the host object of key (its memfd name). */
static bool mapped(const char *key)
{
    char *maps = jt_read("/proc/self/maps");
    char needle[64];
    snprintf(needle, sizeof needle, "jitop-%s.so", key);
    bool found = strstr(maps, needle) != NULL;
    free(maps);
    return found;
}

static void test_hot_reload_while_another_thread_calls(void **state)
{
    (void)state;
    char *dir = jt_tmpdir(), *cache = jt_path(dir, "cache");
    char *src = jt_write(dir, "v.c", VALUE_SRC);
    free(jt_write(dir, "value.h", "#define VALUE 1\n"));
    const char *srcs[] = {src};
    jitop_ctx *ctx = host_ctx(cache, NULL);
    jitop_module *m = load(ctx, "hot", srcs, 1, NULL, 0);
    struct caller c = {0};
    OK(jitop_fn_get(m, "value", "int(void)", &c.f));
    char old_key[33];
    memcpy(old_key, atomic_load(&m->host->cur)->key, sizeof old_key);
    assert_true(mapped(old_key));
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, call_loop, &c), 0);
    while (atomic_load(&c.calls) < 100)
        usleep(1000);
    free(jt_write(dir, "value.h", "#define VALUE 2\n"));
    OK(jitop_module_reload(m));
    while (!atomic_load(&c.saw_new))
        usleep(1000);
    int after = atomic_load(&c.calls);
    while (atomic_load(&c.calls) < after + 100)
        usleep(1000);
    atomic_store(&c.stop, true);
    pthread_join(t, NULL);
    assert_int_equal(atomic_load(&c.failures), 0);
    /* The old object is unloaded once no call is inside it. */
    size_t left = 1;
    jitop__host_reap(m, &left);
    assert_int_equal(left, 0);
    assert_false(mapped(old_key));
    assert_int_equal(call_int(m, "value"), 2);

    /* A failed build keeps the old code. */
    free(jt_write(dir, "value.h", "#define VALUE 3 +\n"));
    assert_int_equal(jitop_module_reload(m), JITOP_ECOMPILE);
    assert_non_null(strstr(jitop_errmsg(NULL), "v.c:3:"));
    assert_int_equal(call_int(m, "value"), 2);
    jitop_ctx_destroy(ctx);
    free(src);
    free(cache);
    free(dir);
}

/* jitop_watch on a module of host code: a save is rebuilt in the
 * background and swapped in at jitop_poll. */
static atomic_int g_reloads;

static void on_reload(void *user, jitop_module *m, int status, const char *message)
{
    (void)user;
    (void)m;
    (void)message;
    if (status == JITOP_OK)
        atomic_fetch_add(&g_reloads, 1);
}

static void test_watch_reloads_host_code(void **state)
{
    (void)state;
    char *dir = jt_tmpdir(), *cache = jt_path(dir, "cache");
    char *src = jt_write(dir, "v.c", VALUE_SRC);
    free(jt_write(dir, "value.h", "#define VALUE 10\n"));
    const char *srcs[] = {src};
    jitop_ctx *ctx = host_ctx(cache, NULL);
    jitop_module *m = load(ctx, "w", srcs, 1, NULL, 0);
    atomic_store(&g_reloads, 0);
    OK(jitop_watch(m, JITOP_RELOAD_POLL, on_reload, NULL));
    free(jt_write_rename(dir, "value.h", "#define VALUE 11\n"));
    /* The rebuild runs on the watch thread; the swap waits for the poll. */
    for (int i = 0; i < 60000 && atomic_load(&g_reloads) == 0; i++) {
        int swapped = 0;
        OK(jitop_poll(ctx, &swapped));
        if (!swapped)
            usleep(5000);
    }
    assert_int_equal(atomic_load(&g_reloads), 1);
    assert_int_equal(call_int(m, "value"), 11);
    OK(jitop_unwatch(m));
    jitop_ctx_destroy(ctx);
    free(src);
    free(cache);
    free(dir);
}

/* C++: exports are extern "C"; an inline function's static (which GCC
 * would make a GNU unique symbol, pinning the object) does not keep the
 * old object mapped after a reload. */
static void test_cxx_source_reloads_and_unloads(void **state)
{
    (void)state;
    char *dir = jt_tmpdir(), *cache = jt_path(dir, "cache");
    const char *text = "#include <jitop_host.h>\n"
                       "#include \"value.h\"\n"
                       "template <typename T> struct box { static T v; };\n"
                       "template <typename T> T box<T>::v = T(VALUE);\n"
                       "inline int &counter() { static int c = 0; return c; }\n"
                       "JITOP_EXPORT(int, value, (void)) { counter()++; return box<int>::v; }\n";
    char *src = jt_write(dir, "v.cpp", text);
    free(jt_write(dir, "value.h", "#define VALUE 20\n"));
    const char *srcs[] = {src}, *opts[] = {"-Xhost=-std=c++17"};
    jitop_ctx *ctx = host_ctx(cache, NULL);
    jitop_module *m = load(ctx, "cxx", srcs, 1, opts, 1);
    assert_int_equal(call_int(m, "value"), 20);
    char old_key[33];
    memcpy(old_key, atomic_load(&m->host->cur)->key, sizeof old_key);
    free(jt_write(dir, "value.h", "#define VALUE 21\n"));
    OK(jitop_module_reload(m));
    assert_int_equal(call_int(m, "value"), 21);
    assert_false(mapped(old_key));
    jitop_ctx_destroy(ctx);
    free(src);
    free(cache);
    free(dir);
}

/* ------------------------------------------------------ processes */

static void test_16_processes_build_once(void **state)
{
    (void)state;
    char *dir = jt_tmpdir(), *cache = jt_path(dir, "cache");
    char *src = jt_write(dir, "v.c", VALUE_SRC);
    free(jt_write(dir, "value.h", "#define VALUE 9\n"));
    settle();
    /* The cache made first, as an application's first run would. */
    jitop_ctx_destroy(host_ctx(cache, NULL));
    pid_t kids[16];
    for (int i = 0; i < 16; i++) {
        kids[i] = fork();
        assert_true(kids[i] >= 0);
        if (kids[i] == 0) {
            reset_count();
            jitop_ctx *ctx = host_ctx(cache, NULL);
            jitop_module *m = NULL;
            const char *srcs[] = {src};
            jitop_fn *f = NULL;
            int r = 0;
            if (jitop_load(ctx, "race", srcs, 1, NULL, 0, &m) != JITOP_OK ||
                jitop_fn_get(m, "value", "int(void)", &f) != JITOP_OK ||
                jitop_call(f, NULL, &r) != JITOP_OK || r != 9)
                _exit(100);
            jitop_ctx_destroy(ctx);
            _exit(atomic_load(&g_compiles));
        }
    }
    int total = 0;
    for (int i = 0; i < 16; i++) {
        int ws = 0;
        assert_int_equal(waitpid(kids[i], &ws, 0), kids[i]);
        assert_true(WIFEXITED(ws));
        assert_true(WEXITSTATUS(ws) < 100);
        total += WEXITSTATUS(ws);
    }
    assert_int_equal(total, 2); /* v.c and the runtime object, once each */
    free(src);
    free(cache);
    free(dir);
}

static void die_at_write(const char *tmp)
{
    (void)tmp;
    raise(SIGKILL);
}

static int count_entry(const jitop_cache_entry_info *info, void *user)
{
    (void)info;
    (*(int *)user)++;
    return 0;
}

static void test_kill9_mid_build_publishes_nothing(void **state)
{
    (void)state;
    char *dir = jt_tmpdir(), *cache = jt_path(dir, "cache");
    char *src = jt_write(dir, "v.c", VALUE_SRC);
    free(jt_write(dir, "value.h", "#define VALUE 4\n"));
    jitop_ctx_destroy(host_ctx(cache, NULL));
    pid_t kid = fork();
    assert_true(kid >= 0);
    if (kid == 0) {
        jitop__cache_write_hook = die_at_write; /* the object written, not yet renamed */
        jitop_ctx *ctx = host_ctx(cache, NULL);
        jitop_module *m = NULL;
        const char *srcs[] = {src};
        jitop_load(ctx, "k", srcs, 1, NULL, 0, &m);
        _exit(0);
    }
    int ws = 0;
    assert_int_equal(waitpid(kid, &ws, 0), kid);
    assert_true(WIFSIGNALED(ws) && WTERMSIG(ws) == SIGKILL);
    jitop_ctx *ctx = host_ctx(cache, NULL);
    int entries = 0;
    OK(jitop_cache_list(ctx, count_entry, &entries));
    assert_int_equal(entries, 0);
    const char *srcs[] = {src};
    jitop_module *m = load(ctx, "k", srcs, 1, NULL, 0);
    assert_int_equal(call_int(m, "value"), 4);
    entries = 0;
    OK(jitop_cache_list(ctx, count_entry, &entries));
    assert_int_equal(entries, 3); /* two objects and the link */
    jitop_ctx_destroy(ctx);
    free(src);
    free(cache);
    free(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_build_then_cache_hit, setup, teardown),
        cmocka_unit_test_setup_teardown(test_warm_load_reads_the_module_manifest, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_tampered_so_entry_is_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_header_edit_rebuilds_only_its_object, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_flag_and_compiler_change_rebuild, setup, teardown),
        cmocka_unit_test_setup_teardown(test_calls_of_every_scalar_and_pointer, setup, teardown),
        cmocka_unit_test_setup_teardown(test_signature_mismatch_and_unknown_name, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_syntax_error_gives_file_line, setup, teardown),
        cmocka_unit_test_setup_teardown(test_ninja_and_jitop_builders_agree, setup, teardown),
        cmocka_unit_test_setup_teardown(test_lltm_extension_host_half, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cli_build_prewarms_host_sources, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cli_watch_rebuilds_host_sources, setup, teardown),
        cmocka_unit_test_setup_teardown(test_hot_reload_while_another_thread_calls, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_watch_reloads_host_code, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cxx_source_reloads_and_unloads, setup, teardown),
        cmocka_unit_test_setup_teardown(test_16_processes_build_once, setup, teardown),
        cmocka_unit_test_setup_teardown(test_kill9_mid_build_publishes_nothing, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
