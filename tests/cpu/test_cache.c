/* The on-disk cache: keys, entries and their corruption, manifests, safety
 * checks, the unwritable-directory fallback, eviction, list/gc/clean. */
#include "testutil.h"

#include "cache/cache_private.h"
#include "build/build.h"

#include <errno.h>
#include <fcntl.h>
#include <pwd.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static const char *const kernel_src =
    "extern \"C\" __global__ void k(float *x) { x[threadIdx.x] = V; }\n";

static char *entry_file(const char *cache, const char *key)
{
    char *p = malloc(strlen(cache) + 64);
    assert_non_null(p);
    sprintf(p, "%s/v%d/%.2s/%s", cache, JITOP__FORMAT_VERSION, key, key);
    return p;
}

static bool exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

static int64_t file_size(const char *path)
{
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    return (int64_t)st.st_size;
}

/* Seconds since path's mtime. */
static double mtime_age(const char *path)
{
    struct stat st;
    struct timespec now;
    assert_int_equal(stat(path, &st), 0);
    clock_gettime(CLOCK_REALTIME, &now);
    return (double)(now.tv_sec - st.st_mtim.tv_sec) + (now.tv_nsec - st.st_mtim.tv_nsec) / 1e9;
}

static jitop_build_result build_v(jitop_ctx *ctx, const char *src, int v)
{
    char opt[32];
    snprintf(opt, sizeof opt, "-DV=%d", v);
    const char *opts[] = {opt};
    jitop_build_result r;
    int st = jitop_build(ctx, src, NULL, opts, 1, NULL, 0, &r);
    if (st != JITOP_OK)
        fail_msg("jitop_build: %s: %s", jitop_strerror(st), jitop_errmsg(ctx));
    return r;
}

static jitop__unit unit_with_names(const char *const *names, size_t n, const char *const *opts,
                                   size_t nopts)
{
    jitop__unit u;
    assert_int_equal(jitop__unit_init(&u, "/tmp/k.cu", NULL, opts, nopts, names, n, "sm_90"),
                     JITOP_OK);
    return u;
}

static void test_key_fields_cannot_collide(void **state)
{
    (void)state;
    jitop__deps none = {0};
    char k1[33], k2[33], k3[33], k4[33];
    const char *n1[] = {"ab", "c"}, *n2[] = {"a", "bc"};
    jitop__unit u1 = unit_with_names(n1, 2, NULL, 0), u2 = unit_with_names(n2, 2, NULL, 0);
    jitop__cache_key(&u1, &none, k1);
    jitop__cache_key(&u2, &none, k2);
    assert_string_not_equal(k1, k2);
    /* A name moved into the options list is another key too. */
    const char *o3[] = {"-DX"}, *n3[] = {"y"}, *o4[] = {"-DX", "y"};
    jitop__unit u3 = unit_with_names(n3, 1, o3, 1), u4 = unit_with_names(NULL, 0, o4, 2);
    jitop__cache_key(&u3, &none, k3);
    jitop__cache_key(&u4, &none, k4);
    assert_string_not_equal(k3, k4);
    /* Same inputs, same key; a dep's hash is part of it. */
    jitop__cache_key(&u1, &none, k2);
    assert_string_equal(k1, k2);
    jitop__dep dep = {.path = "/tmp/h.cuh", .hash = XXH3_128bits("a", 1)};
    jitop__deps one = {.v = &dep, .n = 1};
    jitop__cache_key(&u1, &one, k3);
    dep.hash = XXH3_128bits("b", 1);
    jitop__cache_key(&u1, &one, k4);
    assert_string_not_equal(k1, k3);
    assert_string_not_equal(k3, k4);
    jitop__unit_free(&u1); jitop__unit_free(&u2); jitop__unit_free(&u3); jitop__unit_free(&u4);
}

static void fill_entry(jitop__entry *e, const char *payload)
{
    memset(e, 0, sizeof *e);
    e->arch = strdup("sm_90");
    e->nvrtc_version = strdup(jitop__nvrtc_version());
    /* Items may hold any byte but NUL: a newline in an option or a path
     * stays inside its item. */
    assert_int_equal(jitop__strv_push(&e->options, "-DA=1\n-DB=2"), JITOP_OK);
    assert_int_equal(jitop__strv_push(&e->options, "--use_fast_math"), JITOP_OK);
    assert_int_equal(jitop__strv_push(&e->sources, "/src/dir\nk.cu"), JITOP_OK);
    assert_int_equal(jitop__strv_push(&e->sources, "/src/k.cuh"), JITOP_OK);
    e->created = 1700000000;
    e->bin.size = strlen(payload);
    e->bin.data = (unsigned char *)strdup(payload);
    assert_int_equal(jitop__strv_push(&e->bin.names, "f<int>"), JITOP_OK);
    assert_int_equal(jitop__strv_push(&e->bin.lowered, "_Z1fIiEvv"), JITOP_OK);
}

static const char key_a[33] = "0123456789abcdef0123456789abcdef";
static const char key_b[33] = "fedcba9876543210fedcba9876543210";

static void test_entry_round_trip(void **state)
{
    (void)state;
    char *root = jt_tmpdir();
    jitop__cache *c = NULL;
    assert_int_equal(jitop__cache_open(root, -1, 0, &c), JITOP_OK);
    assert_string_equal(jitop__cache_root(c), root);
    jitop__entry in, out;
    fill_entry(&in, "\177ELF-not-really");
    assert_int_equal(jitop__cache_put(c, key_a, &in), JITOP_OK);
    char *path = entry_file(root, key_a);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0600);
    bool found = false;
    assert_int_equal(jitop__cache_get(c, key_a, &out, &found), JITOP_OK);
    assert_true(found);
    assert_string_equal(out.arch, "sm_90");
    assert_int_equal(out.options.n, 2);
    assert_string_equal(out.options.v[0], "-DA=1\n-DB=2");
    assert_string_equal(out.options.v[1], "--use_fast_math");
    assert_int_equal(out.sources.n, 2);
    assert_string_equal(out.sources.v[0], "/src/dir\nk.cu");
    assert_string_equal(out.sources.v[1], "/src/k.cuh");
    assert_int_equal(out.created, 1700000000);
    assert_int_equal(out.bin.size, in.bin.size);
    assert_memory_equal(out.bin.data, in.bin.data, in.bin.size);
    assert_int_equal(out.bin.data[out.bin.size], 0);
    assert_string_equal(out.bin.lowered.v[0], "_Z1fIiEvv");
    jitop__entry_free(&out);
    assert_int_equal(jitop__cache_get(c, key_b, &out, &found), JITOP_OK);
    assert_false(found);
    jitop__entry_free(&in);
    jitop__cache_close(c);
    free(path);
    free(root);
}

/* Rewrites a file with fn applied to its bytes. */
static void mangle(const char *path, void (*fn)(unsigned char *p, size_t *n))
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    unsigned char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    fn(buf, &n);
    f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(buf, 1, n, f), n);
    assert_int_equal(fclose(f), 0);
}

static void truncate_half(unsigned char *p, size_t *n) { (void)p; *n /= 2; }
static void flip_last(unsigned char *p, size_t *n) { p[*n - 3] ^= 0x10; }
static void flip_header_len(unsigned char *p, size_t *n) { (void)n; p[16] ^= 1; }
static void bump_version(unsigned char *p, size_t *n) { (void)n; p[8] = 99; }
static void empty(unsigned char *p, size_t *n) { (void)p; *n = 0; }

static void test_corrupt_entries_are_misses_and_removed(void **state)
{
    (void)state;
    void (*manglers[])(unsigned char *, size_t *) = {truncate_half, flip_last, flip_header_len,
                                                      bump_version, empty};
    char *root = jt_tmpdir();
    jitop__cache *c = NULL;
    assert_int_equal(jitop__cache_open(root, -1, 0, &c), JITOP_OK);
    char *path = entry_file(root, key_a);
    for (size_t i = 0; i < sizeof manglers / sizeof manglers[0]; i++) {
        jitop__entry in, out;
        fill_entry(&in, "payload bytes that matter");
        assert_int_equal(jitop__cache_put(c, key_a, &in), JITOP_OK);
        jitop__entry_free(&in);
        mangle(path, manglers[i]);
        bool found = true;
        assert_int_equal(jitop__cache_get(c, key_a, &out, &found), JITOP_OK);
        assert_false(found);
        assert_false(exists(path)); /* removed, never handed on */
    }
    /* A valid entry copied under another key's name is not that key's. */
    jitop__entry in, out;
    fill_entry(&in, "payload");
    assert_int_equal(jitop__cache_put(c, key_a, &in), JITOP_OK);
    jitop__entry_free(&in);
    char *other = entry_file(root, key_b);
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/v%d/%.2s", root, JITOP__FORMAT_VERSION, key_b);
    assert_int_equal(mkdir(dir, 0700), 0);
    FILE *f = fopen(path, "rb");
    unsigned char buf[4096];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    f = fopen(other, "wb");
    assert_int_equal(fwrite(buf, 1, n, f), n);
    fclose(f);
    chmod(other, 0600);
    bool found = true;
    assert_int_equal(jitop__cache_get(c, key_b, &out, &found), JITOP_OK);
    assert_false(found);
    jitop__cache_close(c);
    free(other);
    free(path);
    free(root);
}

static void test_corrupt_entry_rebuilt_by_build(void **state)
{
    (void)state;
    char *dir = jt_tmpdir(), *cache = jt_tmpdir();
    char *src = jt_write(dir, "k.cu", kernel_src);
    jitop_ctx *ctx = jt_ctx(cache, "sm_90");
    jitop_build_result r = build_v(ctx, src, 1);
    char *path = entry_file(cache, r.key);
    mangle(path, flip_last);
    jitop_build_result r2 = build_v(ctx, src, 1);
    assert_int_equal(r2.cached, 0);
    assert_string_equal(r2.key, r.key);
    mangle(path, truncate_half);
    assert_int_equal(build_v(ctx, src, 1).cached, 0);
    assert_int_equal(build_v(ctx, src, 1).cached, 1);
    jitop_ctx_destroy(ctx);
    free(path); free(src); free(dir); free(cache);
}

static void test_manifest_round_trip_and_corruption(void **state)
{
    (void)state;
    char *root = jt_tmpdir();
    jitop__cache *c = NULL;
    assert_int_equal(jitop__cache_open(root, -1, 0, &c), JITOP_OK);
    jitop__dep v[2] = {
        {.path = "/src/k.cu", .size = 10, .mtime_ns = 123456789012345,
         .ctime_ns = 123456789012999, .ino = 7, .dev = 8, .hash = XXH3_128bits("k", 1)},
        {.path = "/src/k.cuh", .size = 20, .mtime_ns = -1, .ctime_ns = -2, .ino = 9, .dev = 8,
         .hash = XXH3_128bits("h", 1)},
    };
    char note[] = "safe mode: a note";
    jitop__dep dirs[1] = {{.path = "/src/inc", .mtime_ns = 5, .ctime_ns = 6, .ino = 11, .dev = 8}};
    jitop__deps d = {.v = v, .n = 2, .note = note, .dirs = dirs, .ndirs = 1}, out;
    char key[33];
    bool found = false;
    assert_int_equal(jitop__manifest_put(c, key_b, &d, key_a), JITOP_OK);
    assert_int_equal(jitop__manifest_get(c, key_b, &out, key, &found), JITOP_OK);
    assert_true(found);
    assert_string_equal(key, key_a);
    assert_int_equal(out.n, 2);
    for (size_t i = 0; i < 2; i++) {
        assert_string_equal(out.v[i].path, v[i].path);
        assert_int_equal(out.v[i].size, v[i].size);
        assert_int_equal(out.v[i].mtime_ns, v[i].mtime_ns);
        assert_int_equal(out.v[i].ctime_ns, v[i].ctime_ns);
        assert_int_equal(out.v[i].ino, v[i].ino);
        assert_int_equal(out.v[i].dev, v[i].dev);
        assert_true(XXH128_isEqual(out.v[i].hash, v[i].hash));
    }
    assert_non_null(out.note);
    assert_string_equal(out.note, note);
    assert_int_equal(out.ndirs, 1);
    assert_string_equal(out.dirs[0].path, "/src/inc");
    assert_int_equal(out.dirs[0].mtime_ns, 5);
    assert_int_equal(out.dirs[0].ctime_ns, 6);
    assert_int_equal(out.dirs[0].ino, 11);
    assert_int_equal(out.dirs[0].dev, 8);
    assert_false(out.uncacheable);
    jitop__deps_free(&out);
    char path[4096];
    snprintf(path, sizeof path, "%s/v%d/manifests/%.2s/%s", root, JITOP__FORMAT_VERSION, key_b, key_b);
    mangle(path, flip_last);
    assert_int_equal(jitop__manifest_get(c, key_b, &out, key, &found), JITOP_OK);
    assert_false(found);
    assert_false(exists(path));
    jitop__cache_close(c);
    free(root);
}

/* A recent dep keeps its mark through a manifest (and its stat data then
 * never vouches for it), and a record with a short path is not taken for a
 * truncated manifest. */
static void test_manifest_recent_mark_and_short_paths(void **state)
{
    (void)state;
    char *root = jt_tmpdir(), *dir = jt_tmpdir();
    char *h = jt_write(dir, "h.cuh", "#define H 1\n");
    jt_touch(h, -60);
    struct stat st;
    assert_int_equal(stat(h, &st), 0);
    jitop__cache *c = NULL;
    assert_int_equal(jitop__cache_open(root, -1, 0, &c), JITOP_OK);
    jitop__dep v = {.path = h, .size = (int64_t)st.st_size,
                    .mtime_ns = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec,
                    .ctime_ns = (int64_t)st.st_ctim.tv_sec * 1000000000 + st.st_ctim.tv_nsec,
                    .ino = (uint64_t)st.st_ino, .dev = (uint64_t)st.st_dev,
                    .hash = XXH3_128bits("#define H 1\n", 12)};
    jitop__deps d = {.v = &v, .n = 1}, out;
    char key[33], *why = NULL;
    bool found = false, fresh = false;
    for (int recent = 0; recent < 2; recent++) {
        v.recent = recent;
        assert_int_equal(jitop__manifest_put(c, key_b, &d, key_a), JITOP_OK);
        assert_int_equal(jitop__manifest_get(c, key_b, &out, key, &found), JITOP_OK);
        assert_true(found);
        assert_int_equal(out.n, 1);
        assert_int_equal(out.v[0].recent, recent);
        assert_int_equal(out.v[0].mtime_ns, recent ? JITOP__MTIME_UNKNOWN : v.mtime_ns);
        assert_int_equal(jitop__deps_fresh(&out, &fresh, &why), JITOP_OK);
        assert_int_equal(fresh, !recent);
        if (recent && (!why || !strstr(why, "within")))
            fail_msg("a recent record should be checked by content: %s", why ? why : "(null)");
        free(why);
        jitop__deps_free(&out);
    }

    /* 4 + 2 + 5 * 8 + 16 = 62 bytes: shorter than a bound of 64. */
    jitop__dep s1 = {.path = "/a", .size = 1, .hash = XXH3_128bits("a", 1)};
    jitop__deps short_deps = {.v = &s1, .n = 1};
    assert_int_equal(jitop__manifest_put(c, key_a, &short_deps, key_b), JITOP_OK);
    assert_int_equal(jitop__manifest_get(c, key_a, &out, key, &found), JITOP_OK);
    assert_true(found);
    assert_int_equal(out.n, 1);
    assert_string_equal(out.v[0].path, "/a");
    assert_string_equal(key, key_b);
    jitop__deps_free(&out);
    jitop__cache_close(c);
    free(h); free(dir); free(root);
}

/* $JITOP_CACHE_MAX_SIZE: sizes with suffixes, 0 for the default, a
 * negative size for no cap, and nothing an int64_t cannot hold or that is
 * not a size written in decimal. */
static void test_cache_max_size_env(void **state)
{
    (void)state;
    char *cache = jt_tmpdir();
    jitop_config cfg;
    jitop_config_init(&cfg);
    cfg.cache_dir = cache;
    cfg.arch = "sm_90";
    cfg.compile_only = 1;
    static const struct {
        const char *value;
        int status;
        int64_t size;
    } cases[] = {
        {"0", JITOP_OK, JITOP__DEFAULT_CACHE_MAX},
        {"2G", JITOP_OK, (int64_t)2 << 30},
        {"1.5K", JITOP_OK, 1536},
        {"8388607T", JITOP_OK, ((int64_t)8388607) << 40},
        {"8388608T", JITOP_EINVAL, 0}, /* 2^63 */
        {"9223372036854775808", JITOP_EINVAL, 0},
        {"1e300", JITOP_EINVAL, 0},
        {"inf", JITOP_EINVAL, 0},
        {"nan", JITOP_EINVAL, 0},
        {"-1", JITOP_OK, -1}, /* negative: no cap, as for cache_max_size */
        {"-2G", JITOP_OK, -1},
        {"-0", JITOP_EINVAL, 0},
        {"12X", JITOP_EINVAL, 0},
        {"4096", JITOP_OK, 4096},
        {"100B", JITOP_OK, 100},
        {"512MiB", JITOP_OK, (int64_t)512 << 20},
        {"1.5G", JITOP_OK, (int64_t)3 << 29},
        {"0.5K", JITOP_OK, 512},
        {"0x10", JITOP_EINVAL, 0},   /* hex is not a size (strtod read it as 16) */
        {"0.5", JITOP_EINVAL, 0},    /* half a byte: not 0, which means the default */
        {"1.5", JITOP_EINVAL, 0},
        {"0.0001K", JITOP_EINVAL, 0}, /* rounds to no byte at all */
        {"1e3", JITOP_EINVAL, 0},
        {" 1G", JITOP_EINVAL, 0},
        {"1G ", JITOP_EINVAL, 0},
        {".5K", JITOP_EINVAL, 0},
        {"1.K", JITOP_EINVAL, 0},
        {"1.0000000001G", JITOP_EINVAL, 0},
        {"18446744073709551616", JITOP_EINVAL, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        assert_int_equal(setenv("JITOP_CACHE_MAX_SIZE", cases[i].value, 1), 0);
        jitop_ctx *ctx = NULL;
        int st = jitop_ctx_create(&cfg, &ctx);
        if (st != cases[i].status)
            fail_msg("JITOP_CACHE_MAX_SIZE=%s: %s (%s)", cases[i].value, jitop_strerror(st),
                     jitop_errmsg(NULL));
        if (st == JITOP_OK)
            assert_int_equal(ctx->cfg.cache_max_size, cases[i].size);
        else
            assert_non_null(strstr(jitop_errmsg(NULL), "JITOP_CACHE_MAX_SIZE"));
        jitop_ctx_destroy(ctx);
    }
    assert_int_equal(unsetenv("JITOP_CACHE_MAX_SIZE"), 0);
    free(cache);
}

static void test_unsafe_caches_refused(void **state)
{
    (void)state;
    jitop_config cfg;
    jitop_ctx *ctx = NULL;
    jitop_config_init(&cfg);
    cfg.compile_only = 1;
    cfg.arch = "sm_90";
    char *root = jt_tmpdir();
    const mode_t modes[] = {0777, 0770, 0722};
    for (size_t i = 0; i < 3; i++) {
        assert_int_equal(chmod(root, modes[i]), 0);
        cfg.cache_dir = root;
        assert_int_equal(jitop_ctx_create(&cfg, &ctx), JITOP_EUNSAFE);
        assert_null(ctx);
        assert_non_null(strstr(jitop_errmsg(NULL), root));
    }
    assert_int_equal(chmod(root, 0700), 0);

    /* Owned by someone else: chown where we may (root, as in CI); otherwise
     * "/" is such a directory for an ordinary user. */
    char *foreign = jt_tmpdir();
    if (geteuid() == 0)
        assert_int_equal(chown(foreign, 12345, 12345), 0);
    cfg.cache_dir = geteuid() == 0 ? foreign : "/";
    assert_int_equal(jitop_ctx_create(&cfg, &ctx), JITOP_EUNSAFE);
    assert_non_null(strstr(jitop_errmsg(NULL), "owned by uid"));

    /* An entry directory or an entry someone else could have written. */
    char *dir = jt_tmpdir();
    char *src = jt_write(dir, "k.cu", kernel_src);
    ctx = jt_ctx(root, "sm_90");
    jitop_build_result r = build_v(ctx, src, 1);
    char *entry = entry_file(root, r.key);
    assert_int_equal(chmod(entry, 0666), 0);
    const char *opts[] = {"-DV=1"};
    assert_int_equal(jitop_build(ctx, src, NULL, opts, 1, NULL, 0, &r), JITOP_EUNSAFE);
    assert_int_equal(chmod(entry, 0600), 0);
    if (geteuid() == 0) {
        assert_int_equal(chown(entry, 12345, 12345), 0);
        assert_int_equal(jitop_build(ctx, src, NULL, opts, 1, NULL, 0, &r), JITOP_EUNSAFE);
        assert_int_equal(chown(entry, 0, 0), 0);
    }
    char *edir = strdup(entry);
    *strrchr(edir, '/') = '\0';
    assert_int_equal(chmod(edir, 0757), 0);
    assert_int_equal(jitop_build(ctx, src, NULL, opts, 1, NULL, 0, &r), JITOP_EUNSAFE);
    assert_int_equal(chmod(edir, 0700), 0);
    assert_int_equal(build_v(ctx, src, 1).cached, 1);
    jitop_ctx_destroy(ctx);

    /* The format directory too. */
    char vdir[4096];
    snprintf(vdir, sizeof vdir, "%s/v%d", root, JITOP__FORMAT_VERSION);
    assert_int_equal(chmod(vdir, 0777), 0);
    cfg.cache_dir = root;
    assert_int_equal(jitop_ctx_create(&cfg, &ctx), JITOP_EUNSAFE);
    assert_int_equal(chmod(vdir, 0700), 0);
    free(edir); free(entry); free(src); free(dir); free(foreign); free(root);
}

/* An entry or manifest owned by another user, mode 0600: this user cannot
 * even open it. That is an unsafe cache (JITOP_EUNSAFE, naming the owner),
 * not an I/O error. Needs root to make a file of another user's: the files
 * are given to nobody, and a child running as nobody reads them. */
static void test_foreign_files_are_unsafe_not_eio(void **state)
{
    (void)state;
    struct passwd *pw = getpwnam("nobody");
    if (geteuid() != 0 || !pw || pw->pw_uid == 0) {
        print_message("SKIP: needs root and a user nobody to make another user's cache file\n");
        skip();
    }
    uid_t uid = pw->pw_uid;
    gid_t gid = pw->pw_gid;
    char *dir = jt_tmpdir(), *cache = jt_tmpdir();
    char *src = jt_write(dir, "k.cu", kernel_src);
    jitop_ctx *ctx = jt_ctx(cache, "sm_90");
    jitop_build_result r = build_v(ctx, src, 1);
    jitop__unit u;
    const char *opts[] = {"-DV=1"};
    assert_int_equal(jitop__unit_init(&u, src, NULL, opts, 1, NULL, 0, "sm_90"), JITOP_OK);
    char id[33];
    jitop__manifest_id(&u, id);
    jitop__unit_free(&u);
    jitop_ctx_destroy(ctx);
    /* The whole cache becomes nobody's, but for the entry and manifest. */
    char cmd[8192], manifest[4200];
    snprintf(manifest, sizeof manifest, "%s/v%d/manifests/%.2s/%s", cache, JITOP__FORMAT_VERSION,
             id, id);
    char *entry = entry_file(cache, r.key);
    snprintf(cmd, sizeof cmd, "chown -R %u:%u '%s' && chown 0:0 '%s' '%s'", (unsigned)uid,
             (unsigned)gid, cache, entry, manifest);
    assert_int_equal(jt_run(cmd, NULL), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        int code = 0;
        jitop__cache *c = NULL;
        jitop__entry e;
        jitop__deps deps;
        char key[33];
        bool found = true;
        if (setgid(gid) != 0 || setuid(uid) != 0)
            code = 10;
        else if (jitop__cache_open(cache, -1, 0, &c) != JITOP_OK)
            code = 11;
        else if (jitop__cache_get(c, r.key, &e, &found) != JITOP_EUNSAFE)
            code = 12;
        else if (!strstr(jitop_errmsg(NULL), "owned by uid 0"))
            code = 13;
        else if (jitop__manifest_get(c, id, &deps, key, &found) != JITOP_EUNSAFE)
            code = 14;
        if (code >= 12)
            fprintf(stderr, "%s\n", jitop_errmsg(NULL));
        jitop__cache_close(c);
        free(entry); free(src); free(dir); free(cache);
        _exit(code);
    }
    int ws = 0;
    assert_int_equal(waitpid(pid, &ws, 0), pid);
    assert_true(WIFEXITED(ws));
    if (WEXITSTATUS(ws) != 0)
        fail_msg("child (uid %u) failed at step %d", (unsigned)uid, WEXITSTATUS(ws));
    free(entry); free(src); free(dir); free(cache);
}

/* Makes dir unwritable for the calling process, for real: as root (CI),
 * permission bits do not stop writes, so dir is bind-mounted read-only in a
 * private mount namespace (EROFS, which stops root too); as another user,
 * chmod 0500. Returns 0, or -1 when neither can be done here. */
static int make_unwritable(const char *dir)
{
    if (geteuid() != 0)
        return chmod(dir, 0500);
    if (unshare(CLONE_NEWNS) != 0)
        return -1;
    /* The type is ignored for these calls; "none" rather than NULL keeps
     * valgrind from reporting an unaddressable argument. */
    if (mount("none", "/", "none", MS_REC | MS_PRIVATE, NULL) != 0 ||
        mount(dir, dir, "none", MS_BIND, NULL) != 0 ||
        mount("none", dir, "none", MS_BIND | MS_REMOUNT | MS_RDONLY, NULL) != 0)
        return -1;
    return 0;
}

static int count_cb(const jitop_cache_entry_info *info, void *user)
{
    (void)info;
    (*(int *)user)++;
    return 0;
}

/* In the child: exit codes say which step failed. */
static int unwritable_child(const char *cache, const char *src)
{
    jitop_config cfg;
    jitop_config_init(&cfg);
    cfg.cache_dir = cache;
    cfg.arch = "sm_90";
    cfg.compile_only = 1;
    jitop_ctx *ctx = NULL;
    jitop_build_result r;
    const char *o1[] = {"-DV=1"}, *o2[] = {"-DV=2"}, *o3[] = {"-DV=3"};
    int code = 0;
    if (jitop_ctx_create(&cfg, &ctx) != JITOP_OK)
        return 10;
    /* What only reads (jitop ls, jitop explain) writes nothing, so it has
     * nothing to warn about: the parent checks that no warning comes before
     * the marker. */
    int listed = 0, hit = 0;
    char *why = NULL;
    if (jitop_cache_list(ctx, count_cb, &listed) != JITOP_OK || listed != 1)
        code = 16;
    else if (jitop_explain(ctx, src, NULL, o2, 1, NULL, 0, &hit, &why) != JITOP_OK || hit)
        code = 17;
    jitop_free(why);
    fputs("-- reads done\n", stderr);
    if (code)
        goto out;
    /* Prewarmed before the directory turned read-only: read from disk. */
    int n = 0;
    if (jitop_build(ctx, src, NULL, o1, 1, NULL, 0, &r) != JITOP_OK || !r.cached)
        code = 11;
    /* New: compiled, kept in memory, served from memory the second time. */
    else if (jitop_build(ctx, src, NULL, o2, 1, NULL, 0, &r) != JITOP_OK || r.cached)
        code = 12;
    else if (jitop_build(ctx, src, NULL, o2, 1, NULL, 0, &r) != JITOP_OK || !r.cached)
        code = 13;
    else if (jitop_build(ctx, src, NULL, o3, 1, NULL, 0, &r) != JITOP_OK || r.cached)
        code = 14;
    else if (jitop_cache_list(ctx, count_cb, &n) != JITOP_OK || n != 3)
        code = 15;
out:
    jitop_ctx_destroy(ctx);
    return code;
}

static void test_unwritable_cache_still_works(void **state)
{
    (void)state;
    char *dir = jt_tmpdir(), *cache = jt_tmpdir();
    char *src = jt_write(dir, "k.cu", kernel_src);
    jitop_ctx *ctx = jt_ctx(cache, "sm_90");
    build_v(ctx, src, 1);
    jitop_ctx_destroy(ctx);
    char cmd[8192], *before = NULL, *after = NULL;
    snprintf(cmd, sizeof cmd, "cd '%s' && find . | sort", cache);
    assert_int_equal(jt_run(cmd, &before), 0);

    int err[2];
    assert_int_equal(pipe(err), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(err[0]);
        int code = 77;
        if (make_unwritable(cache) == 0) {
            dup2(err[1], 2);
            code = unwritable_child(cache, src);
        }
        /* What the parent allocated: valgrind checks the child for leaks. */
        free(before); free(src); free(dir); free(cache);
        _exit(code);
    }
    close(err[1]);
    char log[8192];
    size_t n = 0;
    ssize_t got;
    while ((got = read(err[0], log + n, sizeof log - 1 - n)) > 0)
        n += (size_t)got;
    log[n] = '\0';
    close(err[0]);
    int ws = 0;
    assert_int_equal(waitpid(pid, &ws, 0), pid);
    if (geteuid() != 0)
        chmod(cache, 0700);
    assert_true(WIFEXITED(ws));
    if (WEXITSTATUS(ws) == 77) {
        print_message("SKIP: running as root without CAP_SYS_ADMIN: cannot make a read-only "
                      "mount, and permission bits do not stop root\n");
        skip();
    }
    if (WEXITSTATUS(ws) != 0)
        fail_msg("child failed at step %d; stderr:\n%s", WEXITSTATUS(ws), log);
    /* One warning, naming the directory, and only once something had to be
     * kept in memory. */
    char *first = strstr(log, "warning"), *reads = strstr(log, "-- reads done");
    assert_non_null(first);
    assert_non_null(reads);
    if (first < reads)
        fail_msg("a warning before anything was written: %s", log);
    assert_null(strstr(first + 1, "warning"));
    assert_non_null(strstr(log, cache));
    /* Nothing was written. */
    assert_int_equal(jt_run(cmd, &after), 0);
    assert_string_equal(before, after);
    free(before); free(after); free(src); free(dir); free(cache);
}

/* A root that cannot even be created, for root too: sysfs refuses new
 * directories (EPERM, EACCES for other users). Needs no mount privilege, so
 * it runs where the read-only bind mount above cannot. */
static void test_uncreatable_root_keeps_binaries_in_memory(void **state)
{
    (void)state;
    const char *root = "/sys/jitop-test-cache";
    struct stat st;
    if (stat("/sys/kernel", &st) != 0 || mkdir(root, 0700) == 0 || errno == EEXIST) {
        rmdir(root);
        print_message("SKIP: no sysfs at /sys that refuses new directories\n");
        skip();
    }
    char *dir = jt_tmpdir();
    char *src = jt_write(dir, "k.cu", kernel_src);
    jitop_ctx *ctx = jt_ctx(root, "sm_90");
    assert_int_equal(build_v(ctx, src, 4).cached, 0);
    assert_int_equal(build_v(ctx, src, 4).cached, 1); /* from memory */
    assert_int_equal(build_v(ctx, src, 5).cached, 0);
    int n = 0;
    assert_int_equal(jitop_cache_list(ctx, count_cb, &n), JITOP_OK);
    assert_int_equal(n, 2);
    int hit = 0;
    char *why = NULL;
    const char *opts[] = {"-DV=4"};
    assert_int_equal(jitop_explain(ctx, src, NULL, opts, 1, NULL, 0, &hit, &why), JITOP_OK);
    assert_int_equal(hit, 1);
    free(why);
    assert_false(exists(root));
    jitop_ctx_destroy(ctx);
    free(src); free(dir);
}

/* A hit stamps the entry as used unless its stamp is already recent: the
 * write is what a warm load would pay for most among its file operations. */
static void test_use_stamp_only_when_not_recent(void **state)
{
    (void)state;
    char *dir = jt_tmpdir(), *cache = jt_tmpdir();
    char *src = jt_write(dir, "k.cu", kernel_src);
    jitop_ctx *ctx = jt_ctx(cache, "sm_90");
    jitop_build_result a = build_v(ctx, src, 1);
    char *ea = entry_file(cache, a.key);
    /* Recent: left as it is (10 s old stays 10 s old). */
    jt_touch(ea, -10);
    assert_int_equal(build_v(ctx, src, 1).cached, 1);
    double age = mtime_age(ea);
    assert_true(age > 9 && age < JITOP__USE_MARK_SECONDS);
    /* Older than the window: stamped now. */
    jt_touch(ea, -(JITOP__USE_MARK_SECONDS + 5));
    assert_int_equal(build_v(ctx, src, 1).cached, 1);
    assert_true(mtime_age(ea) < 5);
    /* From the future (a clock set back): stamped now too. */
    jt_touch(ea, 3600);
    assert_int_equal(build_v(ctx, src, 1).cached, 1);
    age = mtime_age(ea);
    assert_true(age > -1 && age < 5);
    jitop_ctx_destroy(ctx);
    free(ea); free(src); free(dir); free(cache);
}

static void test_eviction_keeps_most_recently_used(void **state)
{
    (void)state;
    char *dir = jt_tmpdir(), *cache = jt_tmpdir();
    char *src = jt_write(dir, "k.cu", kernel_src);
    /* Size one entry in a scratch cache first. */
    char *scratch = jt_tmpdir();
    jitop_ctx *probe = jt_ctx(scratch, "sm_90");
    jitop_build_result pr = build_v(probe, src, 7);
    char *pe = entry_file(scratch, pr.key);
    int64_t size = file_size(pe);
    jitop_ctx_destroy(probe);

    jitop_config cfg;
    jitop_config_init(&cfg);
    cfg.cache_dir = cache;
    cfg.arch = "sm_90";
    cfg.compile_only = 1;
    cfg.cache_max_size = size * 5 / 2; /* room for two */
    jitop_ctx *ctx = NULL;
    assert_int_equal(jitop_ctx_create(&cfg, &ctx), JITOP_OK);
    /* Last uses in the past, beyond the window in which a use leaves a
     * recent stamp alone (JITOP__USE_MARK_SECONDS): A used before B. */
    jitop_build_result a = build_v(ctx, src, 1);
    jitop_build_result b = build_v(ctx, src, 2);
    char *ea = entry_file(cache, a.key), *eb = entry_file(cache, b.key);
    jt_touch(ea, -3 * JITOP__USE_MARK_SECONDS);
    jt_touch(eb, -2 * JITOP__USE_MARK_SECONDS);
    assert_int_equal(build_v(ctx, src, 1).cached, 1); /* A is now the most recently used */
    assert_true(mtime_age(ea) < JITOP__USE_MARK_SECONDS);
    jitop_build_result c = build_v(ctx, src, 3);
    char *ec = entry_file(cache, c.key);
    assert_true(exists(ea));
    assert_false(exists(eb));
    assert_true(exists(ec));
    assert_int_equal(build_v(ctx, src, 2).cached, 0); /* B comes back by compiling */

    /* gc with an explicit cap keeps the newest only. */
    int64_t freed = 0;
    assert_int_equal(jitop_cache_gc(ctx, size * 3 / 2, &freed), JITOP_OK);
    assert_true(freed >= size);
    int n = 0;
    assert_int_equal(jitop_cache_list(ctx, count_cb, &n), JITOP_OK);
    assert_int_equal(n, 1);
    assert_true(exists(eb));
    jitop_ctx_destroy(ctx);
    free(ea); free(eb); free(ec); free(pe); free(scratch); free(src); free(dir); free(cache);
}

/* Sends stderr to a temporary file until capture_end, which returns what
 * was written (malloc'd). */
struct capture {
    int saved;
    char path[64];
};

static void capture_start(struct capture *c)
{
    snprintf(c->path, sizeof c->path, "/tmp/jitop-stderr-XXXXXX");
    int fd = mkstemp(c->path);
    assert_true(fd >= 0);
    fflush(stderr);
    c->saved = dup(2);
    assert_true(c->saved >= 0);
    assert_int_equal(dup2(fd, 2), 2);
    close(fd);
}

static char *capture_end(struct capture *c)
{
    fflush(stderr);
    assert_int_equal(dup2(c->saved, 2), 2);
    close(c->saved);
    char *text = jt_read(c->path);
    unlink(c->path);
    return text;
}

static int count_of(const char *text, const char *what)
{
    int n = 0;
    for (const char *p = strstr(text, what); p; p = strstr(p + 1, what))
        n++;
    return n;
}

/* A cap smaller than one entry evicts every entry right after its write:
 * said once per context, verbose or not, naming both sizes. */
static void test_cap_below_one_entry_warns_once(void **state)
{
    (void)state;
    char *dir = jt_tmpdir();
    char *src = jt_write(dir, "k.cu", kernel_src);
    for (int verbose = 0; verbose <= 1; verbose++) {
        char *cache = jt_tmpdir();
        jitop_config cfg;
        jitop_config_init(&cfg);
        cfg.cache_dir = cache;
        cfg.arch = "sm_90";
        cfg.compile_only = 1;
        cfg.cache_max_size = 100;
        cfg.verbose = verbose;
        jitop_ctx *ctx = NULL;
        assert_int_equal(jitop_ctx_create(&cfg, &ctx), JITOP_OK);
        struct capture cap;
        capture_start(&cap);
        jitop_build_result a = build_v(ctx, src, 1);
        jitop_build_result b = build_v(ctx, src, 2);
        char *err = capture_end(&cap);
        assert_int_equal(a.cached, 0);
        assert_int_equal(b.cached, 0);
        if (count_of(err, "is smaller than the entry") != 1)
            fail_msg("verbose %d: expected one warning about the cap:\n%s", verbose, err);
        assert_non_null(strstr(err, "cache cap (100 bytes"));
        /* The cap still holds: both entries went. */
        char *ea = entry_file(cache, a.key), *eb = entry_file(cache, b.key);
        assert_false(exists(ea));
        assert_false(exists(eb));
        free(ea); free(eb); free(err);
        jitop_ctx_destroy(ctx);
        free(cache);
    }
    free(src); free(dir);
}

struct listed {
    int n;
    char key[33];
    int64_t size, created;
    char arch[16];
    char sources[4096];
};

static int list_cb(const jitop_cache_entry_info *info, void *user)
{
    struct listed *l = user;
    l->n++;
    snprintf(l->key, sizeof l->key, "%s", info->key);
    snprintf(l->arch, sizeof l->arch, "%s", info->arch);
    snprintf(l->sources, sizeof l->sources, "%s", info->sources);
    l->size = info->size;
    l->created = info->created;
    return 0;
}

static int stop_cb(const jitop_cache_entry_info *info, void *user)
{
    (void)info; (void)user;
    return 42;
}

static void test_list_gc_clean(void **state)
{
    (void)state;
    char *dir = jt_tmpdir(), *cache = jt_tmpdir();
    char *src = jt_write(dir, "k.cu", "#include \"k.cuh\"\n" "extern \"C\" __global__ void k(float *x) { x[0] = V; }\n");
    char *hdr = jt_write(dir, "k.cuh", "#pragma once\n");
    jitop_ctx *ctx = jt_ctx(cache, "sm_90");
    jitop_build_result r1 = build_v(ctx, src, 1);
    jitop_build_result r2 = build_v(ctx, src, 2);
    struct listed l = {0};
    assert_int_equal(jitop_cache_list(ctx, list_cb, &l), JITOP_OK);
    assert_int_equal(l.n, 2);
    assert_string_equal(l.arch, "sm_90");
    char want_sources[8192];
    snprintf(want_sources, sizeof want_sources, "%s\n%s", src, hdr);
    assert_string_equal(l.sources, want_sources);
    assert_true(l.created >= time(NULL) - 600);
    assert_int_equal(jitop_cache_list(ctx, stop_cb, NULL), 42);

    /* gc: the invalid entry and the stale temporary file go; a young
     * temporary file (a live writer's) stays. */
    char *e2 = entry_file(cache, r2.key);
    mangle(e2, flip_last);
    char edir[4096], stale[4200], young[4200];
    snprintf(edir, sizeof edir, "%s/v%d/%.2s", cache, JITOP__FORMAT_VERSION, r1.key);
    snprintf(stale, sizeof stale, "%s/.tmp-%s-AAAAAA", edir, r1.key);
    snprintf(young, sizeof young, "%s/.tmp-%s-BBBBBB", edir, r1.key);
    free(jt_write(edir, strrchr(stale, '/') + 1, "partial"));
    free(jt_write(edir, strrchr(young, '/') + 1, "partial"));
    jt_touch(stale, -7200);
    int64_t freed = 0;
    assert_int_equal(jitop_cache_gc(ctx, -1, &freed), JITOP_OK);
    assert_false(exists(e2));
    assert_false(exists(stale));
    assert_true(exists(young));
    assert_true(freed > 0);
    memset(&l, 0, sizeof l);
    assert_int_equal(jitop_cache_list(ctx, list_cb, &l), JITOP_OK);
    assert_int_equal(l.n, 1);
    assert_string_equal(l.key, r1.key);

    /* clean: nothing left but the root and the markers, and it stays usable. */
    assert_int_equal(jitop_cache_clean(ctx), JITOP_OK);
    memset(&l, 0, sizeof l);
    assert_int_equal(jitop_cache_list(ctx, list_cb, &l), JITOP_OK);
    assert_int_equal(l.n, 0);
    char cmd[8192], *out = NULL;
    snprintf(cmd, sizeof cmd, "find '%s' -type f ! -name CACHEDIR.TAG ! -name jitop.tag | wc -l",
             cache);
    assert_int_equal(jt_run(cmd, &out), 0);
    assert_int_equal(atoi(out), 0);
    free(out);
    assert_true(exists(cache));
    assert_int_equal(build_v(ctx, src, 1).cached, 0);
    jitop_ctx_destroy(ctx);
    free(e2); free(hdr); free(src); free(dir); free(cache);
}

struct exact {
    int n;
    size_t nsources;
    char first[256], second[256], joined[512];
};

static int exact_cb(const jitop_cache_entry_info *info, void *user)
{
    struct exact *x = user;
    x->n++;
    x->nsources = info->nsources;
    snprintf(x->first, sizeof x->first, "%s", info->nsources > 0 ? info->source_list[0] : "");
    snprintf(x->second, sizeof x->second, "%s", info->nsources > 1 ? info->source_list[1] : "");
    snprintf(x->joined, sizeof x->joined, "%s", info->sources);
    return 0;
}

/* A newline (or a backslash) in a path: the list has it exactly, and the
 * one-per-line field escapes it, so that it still has one line per file. */
static void test_list_paths_with_newlines(void **state)
{
    (void)state;
    char *cache = jt_tmpdir();
    jitop_ctx *ctx = jt_ctx(cache, "sm_90");
    jitop__entry in;
    fill_entry(&in, "payload");
    jitop__strv_free(&in.sources);
    assert_int_equal(jitop__strv_push(&in.sources, "/src/dir\nk.cu"), JITOP_OK);
    assert_int_equal(jitop__strv_push(&in.sources, "/src/a\\b\t.h"), JITOP_OK);
    assert_int_equal(jitop__cache_put(ctx->cache, key_a, &in), JITOP_OK);
    jitop__entry_free(&in);
    struct exact x = {0};
    assert_int_equal(jitop_cache_list(ctx, exact_cb, &x), JITOP_OK);
    assert_int_equal(x.n, 1);
    assert_int_equal(x.nsources, 2);
    assert_string_equal(x.first, "/src/dir\nk.cu");
    assert_string_equal(x.second, "/src/a\\b\t.h");
    assert_string_equal(x.joined, "/src/dir\\nk.cu\n/src/a\\\\b\\t.h");
    jitop_ctx_destroy(ctx);
    free(cache);
}

/* explain looks for an older entry of the same source. A source whose path
 * holds a newline must not match another source's entry whose file list,
 * joined by newlines, spells that path ("DIR/a.cu" including "DIR/h.h" vs
 * the file "DIR/a.cu\nDIR/h.h"). */
static void test_explain_newline_path_is_its_own_source(void **state)
{
    (void)state;
    char *dir = jt_tmpdir(), *cache = jt_tmpdir();
    char *src = jt_write(dir, "a.cu", "#include \"h.h\"\n"
                                      "extern \"C\" __global__ void k(float *x) { x[0] = V; }\n");
    char *hdr = jt_write(dir, "h.h", "#pragma once\n");
    jitop_ctx *ctx = jt_ctx(cache, "sm_90");
    build_v(ctx, src, 1);
    char name[4096];
    snprintf(name, sizeof name, "a.cu\n%s/h.h", dir);
    char *odd = jt_write(dir, name, "extern \"C\" __global__ void k(float *x) { x[0] = V; }\n");
    char expect[8192];
    snprintf(expect, sizeof expect, "%s\n%s", src, hdr);
    const char *opts[] = {"-DV=1"};
    int hit = 1;
    char *why = NULL;
    assert_int_equal(jitop_explain(ctx, expect, NULL, opts, 1, NULL, 0, &hit, &why), JITOP_OK);
    assert_false(hit);
    if (!strstr(why, "never built"))
        fail_msg("explain matched another source's entry: %s", why);
    /* The path is shown escaped: the reason stays one line. */
    assert_null(strchr(why, '\n'));
    jitop_free(why);
    jitop_ctx_destroy(ctx);
    free(odd); free(hdr); free(src); free(dir); free(cache);
}

static void test_cache_calls_check_arguments(void **state)
{
    (void)state;
    assert_int_equal(jitop_cache_list(NULL, count_cb, NULL), JITOP_EINVAL);
    assert_int_equal(jitop_cache_gc(NULL, 0, NULL), JITOP_EINVAL);
    assert_int_equal(jitop_cache_clean(NULL), JITOP_EINVAL);
    char *cache = jt_tmpdir();
    jitop_ctx *ctx = jt_ctx(cache, "sm_90");
    assert_int_equal(jitop_cache_list(ctx, NULL, NULL), JITOP_EINVAL);
    jitop_ctx_destroy(ctx);
    free(cache);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_key_fields_cannot_collide),
        cmocka_unit_test(test_entry_round_trip),
        cmocka_unit_test(test_corrupt_entries_are_misses_and_removed),
        cmocka_unit_test(test_corrupt_entry_rebuilt_by_build),
        cmocka_unit_test(test_manifest_round_trip_and_corruption),
        cmocka_unit_test(test_manifest_recent_mark_and_short_paths),
        cmocka_unit_test(test_cache_max_size_env),
        cmocka_unit_test(test_unsafe_caches_refused),
        cmocka_unit_test(test_foreign_files_are_unsafe_not_eio),
        cmocka_unit_test(test_unwritable_cache_still_works),
        cmocka_unit_test(test_uncreatable_root_keeps_binaries_in_memory),
        cmocka_unit_test(test_use_stamp_only_when_not_recent),
        cmocka_unit_test(test_eviction_keeps_most_recently_used),
        cmocka_unit_test(test_cap_below_one_entry_warns_once),
        cmocka_unit_test(test_list_gc_clean),
        cmocka_unit_test(test_list_paths_with_newlines),
        cmocka_unit_test(test_explain_newline_path_is_its_own_source),
        cmocka_unit_test(test_cache_calls_check_arguments),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
