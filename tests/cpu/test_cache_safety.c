/* The cache's trust in its filesystem: only jitop's own files are ever
 * deleted (markers, clean, a planted root link), builds survive a clean or
 * gc in another process, a filesystem without flock, FIFOs, links and
 * directories where files belong; gc counts and removes manifests and
 * locks; manifest directories are checked like entry directories. */
#include "testutil.h"

#include "cache/cache_private.h"
#include "build/build.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* The tree jitop makes under a root: v<format version>. */
#define TREE_STR2(v) #v
#define TREE_STR(v) TREE_STR2(v)
#define TREE "v" TREE_STR(JITOP__FORMAT_VERSION)

static const char *const kernel_src =
    "extern \"C\" __global__ void k(float *x) { x[threadIdx.x] = V; }\n";

static char *entry_file(const char *cache, const char *key)
{
    char *p = malloc(strlen(cache) + 80);
    assert_non_null(p);
    sprintf(p, "%s/v%d/%.2s/%s", cache, JITOP__FORMAT_VERSION, key, key);
    return p;
}

/* The manifest of jitop_build(src, arch sm_90, -DV=v). */
static char *manifest_file(const char *cache, const char *src, int v)
{
    char opt[32], id[33];
    snprintf(opt, sizeof opt, "-DV=%d", v);
    const char *opts[] = {opt};
    jitop__unit u;
    assert_int_equal(jitop__unit_init(&u, src, NULL, opts, 1, NULL, 0, "sm_90"), JITOP_OK);
    jitop__manifest_id(&u, id);
    jitop__unit_free(&u);
    char *p = malloc(strlen(cache) + 120);
    assert_non_null(p);
    sprintf(p, "%s/v%d/manifests/%.2s/%s", cache, JITOP__FORMAT_VERSION, id, id);
    return p;
}

static bool exists(const char *path)
{
    struct stat st;
    return lstat(path, &st) == 0;
}

static bool is_regular(const char *path)
{
    struct stat st;
    return lstat(path, &st) == 0 && S_ISREG(st.st_mode);
}

static int build_st(jitop_ctx *ctx, const char *src, int v, jitop_build_result *r)
{
    char opt[32];
    snprintf(opt, sizeof opt, "-DV=%d", v);
    const char *opts[] = {opt};
    return jitop_build(ctx, src, NULL, opts, 1, NULL, 0, r);
}

static jitop_build_result build_v(jitop_ctx *ctx, const char *src, int v)
{
    jitop_build_result r;
    int st = build_st(ctx, src, v, &r);
    if (st != JITOP_OK)
        fail_msg("jitop_build: %s: %s", jitop_strerror(st), jitop_errmsg(ctx));
    return r;
}

static void assert_file_text(const char *path, const char *text)
{
    char *got = jt_read(path);
    assert_string_equal(got, text);
    free(got);
}

static int count_names(const char *dir)
{
    DIR *d = opendir(dir);
    assert_non_null(d);
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL)
        n += strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0;
    closedir(d);
    return n;
}

/* The first name in dir that starts with prefix, as a path (malloc'd), or NULL. */
static char *find_prefixed(const char *dir, const char *prefix)
{
    DIR *d = opendir(dir);
    assert_non_null(d);
    char *found = NULL;
    struct dirent *de;
    while (!found && (de = readdir(d)) != NULL)
        if (strncmp(de->d_name, prefix, strlen(prefix)) == 0)
            found = jt_path(dir, de->d_name);
    closedir(d);
    return found;
}

/* Item 4: a new cache is marked (CACHEDIR.TAG in the root, jitop.tag in the
 * tree); a root that already holds someone's files gets no CACHEDIR.TAG,
 * which would make backup tools skip their files. */
static void test_new_cache_is_marked(void **state)
{
    (void)state;
    char *base = jt_tmpdir();
    char *root = jt_path(base, "cache");
    jitop_ctx *ctx = jt_ctx(root, "sm_90");
    char *tag = jt_path(root, "CACHEDIR.TAG");
    char *text = jt_read(tag);
    assert_int_equal(strncmp(text, "Signature: 8a477f597d28d172789f06886806bc55", 43), 0);
    free(text);
    char *tree_tag = jt_path(root, TREE "/jitop.tag");
    assert_true(is_regular(tree_tag));
    jitop_ctx_destroy(ctx);

    char *home = jt_tmpdir();
    free(jt_write(home, "notes.txt", "mine"));
    ctx = jt_ctx(home, "sm_90");
    char *home_tag = jt_path(home, "CACHEDIR.TAG"), *home_tree_tag = jt_path(home, TREE "/jitop.tag");
    assert_false(exists(home_tag));
    assert_true(is_regular(home_tree_tag));
    jitop_ctx_destroy(ctx);
    free(home_tag); free(home_tree_tag); free(home);
    free(tree_tag); free(tag); free(root); free(base);
}

/* Item 4: clean deletes jitop's names in marked trees (and in an unmarked
 * tree that holds nothing else) and nothing else: a user's v99/thesis.tex,
 * their files beside the trees and inside a marked one all stay. */
static void test_clean_deletes_only_jitops_files(void **state)
{
    (void)state;
    char *dir = jt_tmpdir(), *root = jt_tmpdir();
    char *src = jt_write(dir, "k.cu", kernel_src);
    jitop_ctx *ctx = jt_ctx(root, "sm_90");
    jitop_build_result r1 = build_v(ctx, src, 1), r2 = build_v(ctx, src, 2);
    jitop_ctx_destroy(ctx);

    char shard[8], readme[64];
    snprintf(shard, sizeof shard, TREE "/%.2s", r1.key);
    snprintf(readme, sizeof readme, "%s/README", shard);
    char *thesis = jt_write(root, "v99/thesis.tex", "chapter 1");
    char *notes = jt_write(root, "notes.txt", "notes");
    char *mine = jt_write(root, TREE "/mine.txt", "mine");
    char *readme_path = jt_write(root, readme, "read me");
    char *v8 = jt_write(root, "v8", "a file named like a tree");
    /* A tree from before markers, holding only jitop's names: adopted. */
    free(jt_write(root, "v7/ab/abababababababababababababababab", "old entry"));
    free(jt_write(root, "v7/locks/abababababababababababababababab.lock", ""));
    char *v7 = jt_path(root, "v7");

    char cmd[8192], *out = NULL;
    snprintf(cmd, sizeof cmd, "'%s' clean --cache-dir '%s' 2>&1", jt_cli(), root);
    int rc = jt_run(cmd, &out);
    if (rc != 0)
        jt_fail_showing(out, "jitop clean exited %d", rc);
    assert_file_text(thesis, "chapter 1");
    assert_file_text(notes, "notes");
    assert_file_text(mine, "mine");
    assert_file_text(readme_path, "read me");
    assert_file_text(v8, "a file named like a tree");
    if (!strstr(out, "v99") || !strstr(out, "left"))
        jt_fail_showing(out, "clean should say what it left alone");
    free(out);
    char *e1 = entry_file(root, r1.key), *e2 = entry_file(root, r2.key);
    assert_false(exists(e1));
    assert_false(exists(e2));
    assert_false(exists(v7));
    /* The cache works on. */
    ctx = jt_ctx(root, "sm_90");
    assert_int_equal(build_v(ctx, src, 1).cached, 0);
    assert_int_equal(build_v(ctx, src, 1).cached, 1);
    jitop_ctx_destroy(ctx);

    /* Without anything foreign, clean leaves the markers and the layout. */
    char *root2 = jt_tmpdir();
    ctx = jt_ctx(root2, "sm_90");
    build_v(ctx, src, 1);
    assert_int_equal(jitop_cache_clean(ctx), JITOP_OK);
    snprintf(cmd, sizeof cmd, "cd '%s' && find . | sort | tr '\\n' ' '", root2);
    assert_int_equal(jt_run(cmd, &out), 0);
    assert_string_equal(out, ". ./CACHEDIR.TAG ./" TREE " ./" TREE "/jitop.tag ./" TREE "/locks ./" TREE "/manifests ");
    free(out);
    jitop_ctx_destroy(ctx);
    free(root2);
    free(e1); free(e2); free(v7); free(v8); free(readme_path); free(mine); free(notes);
    free(thesis); free(src); free(root); free(dir);
}

/* Item 4: a tree that jitop did not mark and that holds something else is
 * refused (never written into, never cleaned); one from before markers that
 * holds only jitop's names is adopted and keeps its entries. */
static void test_unmarked_trees(void **state)
{
    (void)state;
    char *root = jt_tmpdir();
    char *thesis = jt_write(root, TREE "/thesis.tex", "chapter 1");
    jitop_config cfg;
    jitop_config_init(&cfg);
    cfg.cache_dir = root;
    cfg.arch = "sm_90";
    cfg.compile_only = 1;
    jitop_ctx *ctx = NULL;
    assert_int_equal(jitop_ctx_create(&cfg, &ctx), JITOP_EUNSAFE);
    assert_non_null(strstr(jitop_errmsg(NULL), "thesis.tex"));
    assert_file_text(thesis, "chapter 1");
    char *v1 = jt_path(root, TREE);
    assert_int_equal(count_names(v1), 1);

    char *dir = jt_tmpdir(), *cache = jt_tmpdir();
    char *src = jt_write(dir, "k.cu", kernel_src);
    ctx = jt_ctx(cache, "sm_90");
    build_v(ctx, src, 1);
    jitop_ctx_destroy(ctx);
    char *tree_tag = jt_path(cache, TREE "/jitop.tag"), *root_tag = jt_path(cache, "CACHEDIR.TAG");
    assert_int_equal(unlink(tree_tag), 0);
    assert_int_equal(unlink(root_tag), 0);
    ctx = jt_ctx(cache, "sm_90");
    assert_int_equal(build_v(ctx, src, 1).cached, 1);
    assert_true(is_regular(tree_tag));
    assert_true(is_regular(root_tag));
    jitop_ctx_destroy(ctx);
    free(tree_tag); free(root_tag); free(src); free(cache); free(dir);
    free(v1); free(thesis); free(root);
}

/* Item 4: a symbolic link at the root that another user made (in /tmp, say)
 * is refused, by the library and by clean: nothing is written into, or
 * deleted from, the directory it names. A link of our own is followed. */
static void test_root_link_of_another_user_refused(void **state)
{
    (void)state;
    if (geteuid() != 0) {
        print_message("SKIP: only root can make a link owned by another user here\n");
        skip();
    }
    char *victim = jt_tmpdir(), *base = jt_tmpdir();
    char *thesis = jt_write(victim, "thesis.tex", "chapter 1");
    char *link = jt_path(base, "cache");
    assert_int_equal(symlink(victim, link), 0);
    assert_int_equal(lchown(link, 12345, 12345), 0);
    jitop_config cfg;
    jitop_config_init(&cfg);
    cfg.cache_dir = link;
    cfg.arch = "sm_90";
    cfg.compile_only = 1;
    jitop_ctx *ctx = NULL;
    assert_int_equal(jitop_ctx_create(&cfg, &ctx), JITOP_EUNSAFE);
    assert_non_null(strstr(jitop_errmsg(NULL), link));
    assert_non_null(strstr(jitop_errmsg(NULL), "symbolic link"));
    char cmd[8192], *out = NULL;
    snprintf(cmd, sizeof cmd, "'%s' clean --cache-dir '%s' 2>&1", jt_cli(), link);
    assert_int_not_equal(jt_run(cmd, &out), 0);
    assert_non_null(strstr(out, "symbolic link"));
    free(out);
    assert_int_equal(count_names(victim), 1);
    assert_file_text(thesis, "chapter 1");

    assert_int_equal(lchown(link, 0, 0), 0);
    ctx = jt_ctx(link, "sm_90");
    char *tree = jt_path(victim, TREE);
    assert_true(exists(tree));
    jitop_ctx_destroy(ctx);
    free(tree); free(link); free(thesis); free(base); free(victim);
}

/* Item 5, deterministic: the tree vanishes (a clean elsewhere moves it
 * away) between a temporary file's write and its rename, three times in a
 * row. The write makes the directory again and starts over. */
static char *hook_root;
static int hook_moves;

static void move_tree_away(const char *tmp)
{
    (void)tmp;
    if (hook_moves <= 0)
        return;
    char from[4096], trash[4096], to[4200];
    snprintf(from, sizeof from, "%s/v%d", hook_root, JITOP__FORMAT_VERSION);
    snprintf(trash, sizeof trash, "%s/.jitop-trash-hook%02d", hook_root, hook_moves);
    snprintf(to, sizeof to, "%s/v%d", trash, JITOP__FORMAT_VERSION);
    if (mkdir(trash, 0700) == 0 && rename(from, to) == 0)
        hook_moves--;
}

static void test_write_survives_the_tree_moving_away(void **state)
{
    (void)state;
    char *dir = jt_tmpdir(), *cache = jt_tmpdir();
    char *src = jt_write(dir, "k.cu", kernel_src);
    jitop_ctx *ctx = jt_ctx(cache, "sm_90");
    hook_root = cache;
    hook_moves = 3;
    jitop__cache_write_hook = move_tree_away;
    jitop_build_result r;
    int st = build_st(ctx, src, 1, &r);
    jitop__cache_write_hook = NULL;
    if (st != JITOP_OK)
        fail_msg("build while the tree moved away: %s: %s", jitop_strerror(st),
                 jitop_errmsg(ctx));
    assert_int_equal(hook_moves, 0);
    assert_int_equal(r.cached, 0);
    char *e = entry_file(cache, r.key);
    assert_true(is_regular(e));
    assert_int_equal(build_v(ctx, src, 1).cached, 1);
    /* The moved trees are trash of jitop's own: clean deletes them. */
    assert_int_equal(jitop_cache_clean(ctx), JITOP_OK);
    char *left = find_prefixed(cache, ".jitop-trash-");
    assert_null(left);
    jitop_ctx_destroy(ctx);
    free(e); free(src); free(cache); free(dir);
}

/* Item 5, as it happens: one process writes entries and manifests in a
 * loop while another cleans and gcs the cache in a loop. Neither fails. */
static int writer_child(const char *root, int stop_fd)
{
    jitop__cache *c = NULL;
    if (jitop__cache_open(root, -1, 0, &c) != JITOP_OK)
        return 10;
    int code = 0;
    jitop__entry e = {0};
    e.arch = "sm_90";
    e.nvrtc_version = "test";
    if (jitop__strv_push(&e.sources, "/src/k.cu") != JITOP_OK)
        return 13;
    e.bin.data = (unsigned char *)"binary";
    e.bin.size = 6;
    jitop__dep dep = {.path = "/src/k.cu", .hash = XXH3_128bits("k", 1)};
    jitop__deps deps = {.v = &dep, .n = 1};
    for (unsigned i = 0; code == 0 && i < 100000; i++) {
        struct pollfd p = {stop_fd, POLLIN, 0};
        if (poll(&p, 1, 0) != 0)
            break;
        char key[33], id[33];
        jitop__hash_hex(XXH3_128bits(&i, sizeof i), key);
        memcpy(id, key, 33);
        id[0] = id[0] == 'f' ? '0' : 'f';
        if (jitop__cache_put(c, key, &e) != JITOP_OK) {
            fprintf(stderr, "put: %s\n", jitop_errmsg(NULL));
            code = 11;
        } else if (jitop__manifest_put(c, id, &deps, key) != JITOP_OK) {
            fprintf(stderr, "manifest put: %s\n", jitop_errmsg(NULL));
            code = 12;
        }
    }
    jitop__strv_free(&e.sources);
    jitop__cache_close(c);
    return code;
}

static void test_clean_and_gc_race_writers(void **state)
{
    (void)state;
    char *cache = jt_tmpdir();
    jitop_ctx *ctx = jt_ctx(cache, "sm_90");
    int stop[2];
    assert_int_equal(pipe(stop), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(stop[1]);
        int code = writer_child(cache, stop[0]);
        /* What the parent allocated: valgrind checks the child for leaks. */
        jitop_ctx_destroy(ctx);
        free(cache);
        _exit(code);
    }
    close(stop[0]);
    int failures = 0;
    char first[1024] = "";
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    do {
        int64_t freed = 0;
        int st = jitop_cache_clean(ctx);
        if (st == JITOP_OK)
            st = jitop_cache_gc(ctx, 4096, &freed);
        if (st != JITOP_OK && failures++ == 0)
            snprintf(first, sizeof first, "%s: %s", jitop_strerror(st), jitop_errmsg(ctx));
        clock_gettime(CLOCK_MONOTONIC, &t);
    } while (t.tv_sec - t0.tv_sec < 3);
    close(stop[1]);
    int ws = 0;
    assert_int_equal(waitpid(pid, &ws, 0), pid);
    jitop_ctx_destroy(ctx);
    if (failures)
        fail_msg("%d clean/gc calls failed, the first: %s", failures, first);
    assert_true(WIFEXITED(ws));
    if (WEXITSTATUS(ws) != 0)
        fail_msg("the writer failed at step %d", WEXITSTATUS(ws));
    free(cache);
}

/* Item 6: flock unsupported (ENOLCK, EOPNOTSUPP: NFS without a lock
 * daemon), through an LD_PRELOAD shim: builds compile without the lock and
 * say so once. */
static void test_builds_without_flock(void **state)
{
    (void)state;
    const char *build = getenv("JITOP_BUILD");
    assert_non_null(build);
    char shim[4096];
    snprintf(shim, sizeof shim, "%s/tests/shim/libflock_fail.so", build);
    if (!exists(shim))
        fail_msg("%s is missing (make builds it)", shim);
    char *dir = jt_tmpdir();
    free(jt_write(dir, "a.cu", "extern \"C\" __global__ void a(float *x) { x[0] = 1; }\n"));
    free(jt_write(dir, "b.cu", "extern \"C\" __global__ void b(float *x) { x[0] = 2; }\n"));
    const int errnos[] = {ENOLCK, EOPNOTSUPP};
    for (size_t i = 0; i < 2; i++) {
        char *cache = jt_tmpdir();
        char cmd[8192], *out = NULL;
        snprintf(cmd, sizeof cmd,
                 "cd '%s' && LD_PRELOAD='%s' JITOP_TEST_FLOCK_ERRNO=%d "
                 "ASAN_OPTIONS=\"${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0\" "
                 "'%s' build --cache-dir '%s' --arch sm_90 a.cu b.cu 2>&1",
                 dir, shim, errnos[i], jt_cli(), cache);
        int rc = jt_run(cmd, &out);
        if (rc != 0)
            jt_fail_showing(out, "errno %d: jitop build exited %d", errnos[i], rc);
        const char *w = strstr(out, "without cache locks");
        if (!w || strstr(w + 1, "without cache locks"))
            jt_fail_showing(out, "expected one warning about locks");
        assert_non_null(strstr(out, "a.cu sm_90 compiled"));
        assert_non_null(strstr(out, "b.cu sm_90 compiled"));
        free(out);
        assert_int_equal(jt_run(cmd, &out), 0);
        assert_non_null(strstr(out, "a.cu sm_90 cached"));
        free(out);
        free(cache);
    }
    free(dir);
}

/* Item 7, in a child that SIGALRM ends if anything blocks: a FIFO as the
 * source, as an included header, at an entry's and at a manifest's path.
 * Exit codes say which step failed. */
static int fifo_child(const char *cache, const char *fifo_src, const char *with_fifo_header,
                      const char *good, const char *entry, const char *manifest)
{
    jitop_config cfg;
    jitop_config_init(&cfg);
    cfg.cache_dir = cache;
    cfg.arch = "sm_90";
    cfg.compile_only = 1;
    jitop_ctx *ctx = NULL;
    jitop_build_result r;
    int code = 0;
    char *data = NULL;
    if (jitop_ctx_create(&cfg, &ctx) != JITOP_OK)
        return 10;
    if (build_st(ctx, fifo_src, 1, &r) != JITOP_EIO || !strstr(jitop_errmsg(ctx), fifo_src) ||
        !strstr(jitop_errmsg(ctx), "FIFO"))
        code = 11;
    else if (jitop__read_file(fifo_src, &data, NULL) != JITOP_EIO)
        code = 12;
    else if (build_st(ctx, with_fifo_header, 1, &r) == JITOP_OK ||
             !strstr(jitop_errmsg(ctx), "h.cuh") || !strstr(jitop_errmsg(ctx), "FIFO"))
        code = 13;
    else if (build_st(ctx, good, 1, &r) != JITOP_OK || r.cached || !is_regular(entry))
        code = 14; /* the FIFO at the entry's path was replaced */
    else if (unlink(entry) != 0 || mkfifo(entry, 0600) != 0 || unlink(manifest) != 0 ||
             mkfifo(manifest, 0600) != 0)
        code = 15;
    else if (build_st(ctx, good, 1, &r) != JITOP_OK || r.cached || !is_regular(entry) ||
             !is_regular(manifest))
        code = 16;
    free(data);
    jitop_ctx_destroy(ctx);
    return code;
}

static void test_fifos_never_block(void **state)
{
    (void)state;
    char *dir = jt_tmpdir(), *cache = jt_tmpdir();
    char *fifo_src = jt_path(dir, "fifo.cu"), *header = jt_path(dir, "h.cuh");
    assert_int_equal(mkfifo(fifo_src, 0600), 0);
    assert_int_equal(mkfifo(header, 0600), 0);
    char *with_header = jt_write(dir, "inc.cu", "#include \"h.cuh\"\n__global__ void k() {}\n");
    char *good = jt_write(dir, "k.cu", kernel_src);
    jitop_ctx *ctx = jt_ctx(cache, "sm_90");
    jitop_build_result r = build_v(ctx, good, 1);
    jitop_ctx_destroy(ctx);
    char *entry = entry_file(cache, r.key), *manifest = manifest_file(cache, good, 1);
    assert_true(is_regular(manifest));
    assert_int_equal(unlink(entry), 0);
    assert_int_equal(mkfifo(entry, 0600), 0);

    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        alarm(600); /* far beyond the steps' time, even under valgrind */
        int code = fifo_child(cache, fifo_src, with_header, good, entry, manifest);
        free(entry); free(manifest); free(good); free(with_header); free(header);
        free(fifo_src); free(cache); free(dir);
        _exit(code);
    }
    int ws = 0;
    assert_int_equal(waitpid(pid, &ws, 0), pid);
    if (WIFSIGNALED(ws))
        fail_msg("the child was killed by signal %d (SIGALRM: it blocked on a FIFO)",
                 WTERMSIG(ws));
    assert_true(WIFEXITED(ws));
    if (WEXITSTATUS(ws) != 0)
        fail_msg("the child failed at step %d", WEXITSTATUS(ws));
    free(entry); free(manifest); free(good); free(with_header); free(header); free(fifo_src);
    free(cache); free(dir);
}

/* Item 8: a symbolic link or a directory where an entry or a manifest
 * belongs is an invalid file: the link is removed (its target untouched),
 * an empty directory removed, one with files moved aside; the build goes
 * on. gc removes a link at an entry's name too. */
static void test_links_and_directories_at_cache_paths(void **state)
{
    (void)state;
    char *dir = jt_tmpdir(), *cache = jt_tmpdir();
    char *src = jt_write(dir, "k.cu", kernel_src);
    char *victim = jt_write(dir, "victim.txt", "precious");
    jitop_ctx *ctx = jt_ctx(cache, "sm_90");
    jitop_build_result r = build_v(ctx, src, 1);
    char *entry = entry_file(cache, r.key), *manifest = manifest_file(cache, src, 1);
    const char *paths[] = {entry, manifest};
    for (size_t i = 0; i < 2; i++) {
        const char *p = paths[i];
        int want_cached = p == manifest;
        /* A link. */
        assert_int_equal(unlink(p), 0);
        assert_int_equal(symlink(victim, p), 0);
        jitop_build_result b;
        int st = build_st(ctx, src, 1, &b);
        if (st != JITOP_OK)
            fail_msg("a link at %s: %s: %s", p, jitop_strerror(st), jitop_errmsg(ctx));
        assert_int_equal(b.cached, want_cached);
        assert_true(is_regular(p));
        assert_file_text(victim, "precious");
        /* An empty directory. */
        assert_int_equal(unlink(p), 0);
        assert_int_equal(mkdir(p, 0700), 0);
        st = build_st(ctx, src, 1, &b);
        if (st != JITOP_OK)
            fail_msg("a directory at %s: %s: %s", p, jitop_strerror(st), jitop_errmsg(ctx));
        assert_int_equal(b.cached, want_cached);
        assert_true(is_regular(p));
        /* A directory with someone's file in it: moved aside, kept. */
        assert_int_equal(unlink(p), 0);
        assert_int_equal(mkdir(p, 0700), 0);
        free(jt_write(p, "keep.txt", "mine"));
        st = build_st(ctx, src, 1, &b);
        if (st != JITOP_OK)
            fail_msg("a directory with a file at %s: %s: %s", p, jitop_strerror(st),
                     jitop_errmsg(ctx));
        assert_int_equal(b.cached, want_cached);
        assert_true(is_regular(p));
        char *parent = strdup(p);
        char prefix[64];
        snprintf(prefix, sizeof prefix, "%s.aside-", strrchr(p, '/') + 1);
        *strrchr(parent, '/') = '\0';
        char *aside = find_prefixed(parent, prefix);
        assert_non_null(aside);
        char *kept = jt_path(aside, "keep.txt");
        assert_file_text(kept, "mine");
        free(kept); free(aside); free(parent);
    }
    /* gc no longer skips a link at an entry's name. */
    assert_int_equal(unlink(entry), 0);
    assert_int_equal(symlink(victim, entry), 0);
    int64_t freed = 0;
    assert_int_equal(jitop_cache_gc(ctx, -1, &freed), JITOP_OK);
    assert_false(exists(entry));
    assert_file_text(victim, "precious");
    jitop_ctx_destroy(ctx);
    free(entry); free(manifest); free(victim); free(src); free(cache); free(dir);
}

/* The bytes of the entries and manifests in a cache, and how many of each. */
static int64_t cache_bytes(const char *cache, int *nentries, int *nmanifests)
{
    char cmd[8192], *out = NULL;
    snprintf(cmd, sizeof cmd,
             "cd '%s/v%d' && find . -type f -regextype posix-extended "
             "-regex '.*/[0-9a-f]{32}' -printf '%%h %%s\\n'",
             cache, JITOP__FORMAT_VERSION);
    assert_int_equal(jt_run(cmd, &out), 0);
    int64_t total = 0;
    *nentries = *nmanifests = 0;
    for (char *line = out; *line;) {
        char *nl = strchr(line, '\n');
        assert_non_null(nl);
        *nl = '\0';
        char *sp = strrchr(line, ' ');
        total += atoll(sp + 1);
        if (strstr(line, "manifests"))
            (*nmanifests)++;
        else
            (*nentries)++;
        line = nl + 1;
    }
    free(out);
    return total;
}

/* A source including n headers with long names: a manifest much larger
 * than its entry (a 10,000-header unit's is 836 KB). */
static char *many_headers_source(const char *dir, int n)
{
    size_t cap = (size_t)n * 128 + 256;
    char *text = malloc(cap);
    assert_non_null(text);
    size_t len = 0;
    for (int i = 0; i < n; i++) {
        char name[128];
        snprintf(name, sizeof name, "headers/a_header_with_a_rather_long_name_%04d.cuh", i);
        free(jt_write(dir, name, "#pragma once\n"));
        len += (size_t)snprintf(text + len, cap - len, "#include \"%s\"\n", name);
    }
    snprintf(text + len, cap - len, "%s", kernel_src);
    char *src = jt_write(dir, "many.cu", text);
    free(text);
    return src;
}

/* Item 9: manifests count toward the cap and go with their entries. */
static void test_gc_counts_manifests(void **state)
{
    (void)state;
    char *dir = jt_tmpdir(), *cache = jt_tmpdir();
    char *src = many_headers_source(dir, 300);
    jitop_ctx *ctx = jt_ctx(cache, "sm_90");
    jitop_build_result r3 = {0};
    for (int v = 1; v <= 3; v++)
        r3 = build_v(ctx, src, v);
    int ne = 0, nm = 0;
    int64_t all = cache_bytes(cache, &ne, &nm);
    assert_int_equal(ne, 3);
    assert_int_equal(nm, 3);
    char *e3 = entry_file(cache, r3.key), *m3 = manifest_file(cache, src, 3);
    struct stat se, sm;
    assert_int_equal(stat(e3, &se), 0);
    assert_int_equal(stat(m3, &sm), 0);
    print_message("entry %lld bytes, manifest %lld bytes\n", (long long)se.st_size, (long long)sm.st_size);
    /* Room for one entry and its manifest: the newest pair stays. */
    int64_t cap = (int64_t)(se.st_size + sm.st_size) + 512, freed = 0;
    assert_true(all > cap);
    assert_int_equal(jitop_cache_gc(ctx, cap, &freed), JITOP_OK);
    int64_t now = cache_bytes(cache, &ne, &nm);
    if (now > cap)
        fail_msg("%lld bytes of entries and manifests left under a cap of %lld",
                 (long long)now, (long long)cap);
    assert_int_equal(ne, 1);
    assert_int_equal(nm, 1);
    assert_true(is_regular(e3));
    char key[33];
    assert_true(jitop__manifest_peek_key(m3, key));
    assert_string_equal(key, r3.key);
    assert_int_equal(freed, all - now);
    assert_int_equal(build_v(ctx, src, 3).cached, 1);
    jitop_ctx_destroy(ctx);

    /* The same through the cap a context keeps (eviction after writes):
     * what stays over the cap is at most the newest manifest, which is
     * written after its entry's eviction pass. */
    char *cache2 = jt_tmpdir();
    jitop_config cfg;
    jitop_config_init(&cfg);
    cfg.cache_dir = cache2;
    cfg.arch = "sm_90";
    cfg.compile_only = 1;
    cfg.cache_max_size = cap;
    assert_int_equal(jitop_ctx_create(&cfg, &ctx), JITOP_OK);
    for (int v = 1; v <= 3; v++)
        build_v(ctx, src, v);
    now = cache_bytes(cache2, &ne, &nm);
    if (now > cap + sm.st_size)
        fail_msg("%lld bytes left under a cap of %lld", (long long)now, (long long)cap);
    jitop_ctx_destroy(ctx);
    free(cache2); free(e3); free(m3); free(src); free(cache); free(dir);
}

/* Item 9: gc removes the manifest and the lock of an entry that is gone,
 * stale temporary files among manifests, unheld locks of absent entries;
 * a held lock and the files of an entry that is there stay. */
static void test_gc_removes_manifests_and_locks_of_absent_entries(void **state)
{
    (void)state;
    char *dir = jt_tmpdir(), *cache = jt_tmpdir();
    char *src = jt_write(dir, "k.cu", kernel_src);
    jitop_ctx *ctx = jt_ctx(cache, "sm_90");
    jitop_build_result a = build_v(ctx, src, 1), b = build_v(ctx, src, 2);
    char *ea = entry_file(cache, a.key), *ma = manifest_file(cache, src, 1);
    char *mb = manifest_file(cache, src, 2);
    char locks[4096], la[4200], lb[4200], lx[4200], ly[4200], stale[4200];
    snprintf(locks, sizeof locks, "%s/v%d/locks", cache, JITOP__FORMAT_VERSION);
    snprintf(la, sizeof la, "%s/%s.lock", locks, a.key);
    snprintf(lb, sizeof lb, "%s/%s.lock", locks, b.key);
    snprintf(lx, sizeof lx, "%s/%s.lock", locks, "11111111111111111111111111111111");
    snprintf(ly, sizeof ly, "%s/%s.lock", locks, "22222222222222222222222222222222");
    assert_true(exists(la));
    assert_true(exists(lb));
    free(jt_write(locks, strrchr(lx, '/') + 1, ""));
    free(jt_write(locks, strrchr(ly, '/') + 1, ""));
    int held = open(ly, O_RDONLY);
    assert_true(held >= 0);
    assert_int_equal(flock(held, LOCK_EX), 0);
    char *mdir = strdup(ma);
    *strrchr(mdir, '/') = '\0';
    snprintf(stale, sizeof stale, "%s/.tmp-%s-AAAAAA", mdir, strrchr(ma, '/') + 1);
    free(jt_write(mdir, strrchr(stale, '/') + 1, "partial manifest"));
    jt_touch(stale, -7200);
    assert_int_equal(unlink(ea), 0);

    int64_t freed = 0;
    assert_int_equal(jitop_cache_gc(ctx, -1, &freed), JITOP_OK);
    assert_false(exists(ma));
    assert_false(exists(stale));
    assert_false(exists(la));
    assert_false(exists(lx));
    assert_true(exists(ly)); /* held: someone is compiling that key */
    assert_true(is_regular(mb));
    assert_true(exists(lb));
    assert_true(freed > (int64_t)strlen("partial manifest"));
    assert_int_equal(build_v(ctx, src, 2).cached, 1);
    close(held);
    jitop_ctx_destroy(ctx);
    free(mdir); free(ea); free(ma); free(mb); free(src); free(cache); free(dir);
}

/* Item 11: a manifest directory writable by others, or owned by another
 * user, is refused like an entry directory. */
static void test_manifest_directories_checked(void **state)
{
    (void)state;
    char *dir = jt_tmpdir(), *cache = jt_tmpdir();
    char *src = jt_write(dir, "k.cu", kernel_src);
    jitop_ctx *ctx = jt_ctx(cache, "sm_90");
    build_v(ctx, src, 1);
    char *m = manifest_file(cache, src, 1);
    char *mdir = strdup(m);
    *strrchr(mdir, '/') = '\0';
    jitop_build_result r;
    assert_int_equal(chmod(mdir, 0777), 0);
    assert_int_equal(build_st(ctx, src, 1, &r), JITOP_EUNSAFE);
    assert_non_null(strstr(jitop_errmsg(ctx), mdir));
    assert_int_equal(chmod(mdir, 0700), 0);
    if (geteuid() == 0) {
        assert_int_equal(chown(mdir, 12345, 12345), 0);
        assert_int_equal(build_st(ctx, src, 1, &r), JITOP_EUNSAFE);
        assert_non_null(strstr(jitop_errmsg(ctx), "owned by uid"));
        assert_int_equal(chown(mdir, 0, 0), 0);
    }
    assert_int_equal(build_v(ctx, src, 1).cached, 1);
    jitop_ctx_destroy(ctx);
    free(mdir); free(m); free(src); free(cache); free(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_new_cache_is_marked),
        cmocka_unit_test(test_clean_deletes_only_jitops_files),
        cmocka_unit_test(test_unmarked_trees),
        cmocka_unit_test(test_root_link_of_another_user_refused),
        cmocka_unit_test(test_write_survives_the_tree_moving_away),
        cmocka_unit_test(test_clean_and_gc_race_writers),
        cmocka_unit_test(test_builds_without_flock),
        cmocka_unit_test(test_fifos_never_block),
        cmocka_unit_test(test_links_and_directories_at_cache_paths),
        cmocka_unit_test(test_gc_counts_manifests),
        cmocka_unit_test(test_gc_removes_manifests_and_locks_of_absent_entries),
        cmocka_unit_test(test_manifest_directories_checked),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    jt_cleanup();
    return rc;
}
