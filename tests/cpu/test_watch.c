/* Hot reload without a GPU: the watching core and the watch thread driving
 * unit targets (real NVRTC builds into a fresh cache), and `jitop watch`.
 * Nothing here asserts a time: each step waits until the watch is idle
 * (every event read and handled), then checks counts and keys. */
#include "testutil.h"
#include "watch/watch.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

/* NVRTC under valgrind takes seconds per compile: generous on purpose. */
#define SETTLE_MS 180000

typedef struct recorder {
    pthread_mutex_t lock;
    int reports, swaps, failures, recoveries, stops;
    int last_status;
    char *last_message;
    char key[33];
    uint64_t generation;
} recorder;

typedef struct fixture {
    char *src, *cache;
    jitop_ctx *ctx;
    jitop__watch *w;
    recorder rec, rec2;
    pid_t cli;          /* a `jitop watch` still running: killed by teardown */
} fixture;

static void on_report(void *user, const jitop__unit_report *ur)
{
    recorder *r = user;
    pthread_mutex_lock(&r->lock);
    r->reports++;
    r->swaps += ur->r->swapped;
    r->failures += ur->r->status != JITOP_OK;
    r->recoveries += ur->r->recovered;
    r->stops += ur->r->stopped;
    r->last_status = ur->r->status;
    free(r->last_message);
    r->last_message = ur->r->message ? strdup(ur->r->message) : NULL;
    memcpy(r->key, ur->key, sizeof r->key);
    r->generation = ur->generation;
    pthread_mutex_unlock(&r->lock);
}

static recorder snap(recorder *r)
{
    pthread_mutex_lock(&r->lock);
    recorder s = *r;
    pthread_mutex_unlock(&r->lock);
    return s;
}

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof *f);
    assert_non_null(f);
    f->src = jt_tmpdir();
    f->cache = jt_tmpdir();
    f->ctx = jt_ctx(f->cache, "sm_90");
    assert_int_equal(jitop__watch_create(&f->w), JITOP_OK);
    pthread_mutex_init(&f->rec.lock, NULL);
    pthread_mutex_init(&f->rec2.lock, NULL);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    if (f->cli > 0) { /* a test failed before stopping it */
        kill(f->cli, SIGKILL);
        waitpid(f->cli, NULL, 0);
    }
    jitop__watch_destroy(f->w);
    jitop_ctx_destroy(f->ctx);
    free(f->rec.last_message);
    free(f->rec2.last_message);
    pthread_mutex_destroy(&f->rec.lock);
    pthread_mutex_destroy(&f->rec2.lock);
    jt_rm_rf(f->src);
    jt_rm_rf(f->cache);
    free(f->src);
    free(f->cache);
    free(f);
    return 0;
}

static void settle(fixture *f)
{
    int rc = jitop__watch_wait_idle(f->w, SETTLE_MS);
    if (rc != JITOP_OK)
        fail_msg("%s", jitop_errmsg(NULL));
}

static uint64_t watch_file(fixture *f, const char *path, jitop_reload_mode mode, recorder *rec)
{
    uint64_t id = 0;
    int rc = jitop__watch_unit(f->w, f->ctx, mode, path, "sm_90", NULL, 0, NULL, 0, on_report,
                               rec, &id);
    if (rc != JITOP_OK)
        fail_msg("jitop__watch_unit %s: %s", path, jitop_errmsg(NULL));
    return id;
}

static char *kernel(int value)
{
    char *s = NULL;
    int n = asprintf(&s, "extern \"C\" __global__ void k(int *p)\n{\n    *p = %d;\n}\n", value);
    assert_true(n > 0);
    return s;
}

static void write_kernel(const char *dir, const char *name, int value, bool rename_save)
{
    char *text = kernel(value);
    char *p = rename_save ? jt_write_rename(dir, name, text) : jt_write(dir, name, text);
    free(p);
    free(text);
}

/* The key jitop_build gives path now: what a watch must end up holding. */
static void build_key(fixture *f, const char *path, char key[33])
{
    jitop_build_result res;
    int rc = jitop_build(f->ctx, path, "sm_90", NULL, 0, NULL, 0, &res);
    if (rc != JITOP_OK)
        fail_msg("jitop_build %s: %s", path, jitop_errmsg(NULL));
    memcpy(key, res.key, 33);
}

static void test_initial_build_and_source_change(void **state)
{
    fixture *f = *state;
    write_kernel(f->src, "k.cu", 1, false);
    char *path = jt_path(f->src, "k.cu");
    watch_file(f, path, JITOP_RELOAD_AUTO, &f->rec);
    settle(f);
    recorder r = snap(&f->rec);
    assert_int_equal(r.reports, 1);
    assert_int_equal(r.swaps, 1);
    assert_int_equal(r.last_status, JITOP_OK);
    char first[33];
    memcpy(first, r.key, 33);

    write_kernel(f->src, "k.cu", 2, false);
    settle(f);
    r = snap(&f->rec);
    assert_int_equal(r.swaps, 2);
    assert_int_equal(r.generation, 2);
    assert_string_not_equal(r.key, first);
    char now[33];
    build_key(f, path, now);
    assert_string_equal(r.key, now);
    free(path);
}

static void test_nested_header_change(void **state)
{
    fixture *f = *state;
    free(jt_write(f->src, "inc/outer.h", "#include \"inner.h\"\n"));
    free(jt_write(f->src, "inc/inner.h", "#define VALUE 1\n"));
    char *path = jt_write(f->src, "k.cu",
                          "#include \"inc/outer.h\"\n"
                          "extern \"C\" __global__ void k(int *p) { *p = VALUE; }\n");
    watch_file(f, path, JITOP_RELOAD_AUTO, &f->rec);
    settle(f);
    assert_int_equal(snap(&f->rec).swaps, 1);

    /* inner.h lives in another directory than the source and is included
     * by a header, not by the source. */
    free(jt_write(f->src, "inc/inner.h", "#define VALUE 2\n"));
    settle(f);
    recorder r = snap(&f->rec);
    assert_int_equal(r.swaps, 2);
    char now[33];
    build_key(f, path, now);
    assert_string_equal(r.key, now);
    free(path);
}

static void test_rename_save_is_seen(void **state)
{
    fixture *f = *state;
    write_kernel(f->src, "k.cu", 1, true);
    char *path = jt_path(f->src, "k.cu");
    watch_file(f, path, JITOP_RELOAD_AUTO, &f->rec);
    settle(f);
    /* Twice: a watch on the old inode would miss the second one. */
    write_kernel(f->src, "k.cu", 2, true);
    settle(f);
    assert_int_equal(snap(&f->rec).swaps, 2);
    write_kernel(f->src, "k.cu", 3, true);
    settle(f);
    recorder r = snap(&f->rec);
    assert_int_equal(r.swaps, 3);
    char now[33];
    build_key(f, path, now);
    assert_string_equal(r.key, now);
    free(path);
}

static void test_touch_does_not_swap(void **state)
{
    fixture *f = *state;
    write_kernel(f->src, "k.cu", 1, false);
    char *path = jt_path(f->src, "k.cu");
    watch_file(f, path, JITOP_RELOAD_AUTO, &f->rec);
    settle(f);
    jitop__watch_stats before, after;
    jitop__watch_get_stats(f->w, &before);

    jt_touch(path, 5.0);                     /* IN_ATTRIB, same content */
    settle(f);
    write_kernel(f->src, "k.cu", 1, false);  /* rewritten with the same text */
    settle(f);
    jitop__watch_get_stats(f->w, &after);
    assert_true(after.rebuilds >= before.rebuilds + 1); /* the events were seen */
    assert_int_equal(after.swaps, before.swaps);
    assert_int_equal(after.unchanged - before.unchanged, after.rebuilds - before.rebuilds);
    recorder r = snap(&f->rec);
    assert_int_equal(r.reports, 1);
    assert_int_equal(r.generation, 1);
    free(path);
}

static void test_quick_writes_coalesce(void **state)
{
    fixture *f = *state;
    /* A quiet window far longer than ten writes take, even under valgrind:
     * the count below then depends on nothing timed. */
    jitop__watch_tune(f->w, 5000, 60000);
    write_kernel(f->src, "k.cu", 0, false);
    char *path = jt_path(f->src, "k.cu");
    watch_file(f, path, JITOP_RELOAD_AUTO, &f->rec);
    settle(f);
    jitop__watch_stats before, after;
    jitop__watch_get_stats(f->w, &before);
    for (int i = 1; i <= 10; i++) {
        write_kernel(f->src, "k.cu", i, i % 2 == 0);
        /* Each write is seen before the next: without coalescing, each
         * would start its own rebuild. */
        if (jitop__watch_wait_drained(f->w, SETTLE_MS) != JITOP_OK)
            fail_msg("%s", jitop_errmsg(NULL));
    }
    settle(f);
    jitop__watch_get_stats(f->w, &after);
    uint64_t rebuilds = after.rebuilds - before.rebuilds;
    assert_true(rebuilds >= 1);
    assert_true(rebuilds <= 2);
    char now[33];
    build_key(f, path, now);
    assert_string_equal(snap(&f->rec).key, now); /* the last write won */
    free(path);
}

static void test_failed_rebuild_keeps_old_and_recovers(void **state)
{
    fixture *f = *state;
    write_kernel(f->src, "k.cu", 1, false);
    char *path = jt_path(f->src, "k.cu");
    watch_file(f, path, JITOP_RELOAD_AUTO, &f->rec);
    settle(f);
    recorder good = snap(&f->rec);

    free(jt_write(f->src, "k.cu",
                  "extern \"C\" __global__ void k(int *p)\n{\n    *p = undefined_name;\n}\n"));
    settle(f);
    recorder r = snap(&f->rec);
    assert_int_equal(r.failures, 1);
    assert_int_equal(r.last_status, JITOP_ECOMPILE);
    assert_non_null(r.last_message);
    if (!strstr(r.last_message, "k.cu(3)"))
        fail_msg("no file:line in the log: %s", r.last_message);
    assert_non_null(strstr(r.last_message, "undefined_name"));
    assert_string_equal(r.key, good.key); /* the old binary stays in place */
    assert_int_equal(r.generation, good.generation);

    /* A fix with new content swaps in. */
    write_kernel(f->src, "k.cu", 2, true);
    settle(f);
    r = snap(&f->rec);
    assert_int_equal(r.last_status, JITOP_OK);
    assert_int_equal(r.generation, good.generation + 1);
    char now[33];
    build_key(f, path, now);
    assert_string_equal(r.key, now);

    /* Broken, then back to exactly what is in place: a recovery is reported
     * and nothing is swapped. */
    free(jt_write(f->src, "k.cu", "this is not CUDA\n"));
    settle(f);
    write_kernel(f->src, "k.cu", 2, false);
    settle(f);
    recorder back = snap(&f->rec);
    assert_int_equal(back.failures, 2);
    assert_int_equal(back.recoveries, 1);
    assert_int_equal(back.last_status, JITOP_OK);
    assert_int_equal(back.generation, r.generation);
    free(path);
}

static void test_new_include_is_watched(void **state)
{
    fixture *f = *state;
    write_kernel(f->src, "k.cu", 1, false);
    free(jt_write(f->src, "sub/extra.h", "#define EXTRA 1\n"));
    char *path = jt_path(f->src, "k.cu");
    watch_file(f, path, JITOP_RELOAD_AUTO, &f->rec);
    settle(f);
    free(jt_write(f->src, "k.cu",
                  "#include \"sub/extra.h\"\n"
                  "extern \"C\" __global__ void k(int *p) { *p = EXTRA; }\n"));
    settle(f);
    assert_int_equal(snap(&f->rec).swaps, 2);
    free(jt_write(f->src, "sub/extra.h", "#define EXTRA 2\n"));
    settle(f);
    recorder r = snap(&f->rec);
    assert_int_equal(r.swaps, 3);
    char now[33];
    build_key(f, path, now);
    assert_string_equal(r.key, now);
    free(path);
}

static void test_remove_stops_reports(void **state)
{
    fixture *f = *state;
    write_kernel(f->src, "a.cu", 1, false);
    write_kernel(f->src, "b.cu", 1, false);
    char *a = jt_path(f->src, "a.cu"), *b = jt_path(f->src, "b.cu");
    uint64_t ida = watch_file(f, a, JITOP_RELOAD_AUTO, &f->rec);
    watch_file(f, b, JITOP_RELOAD_AUTO, &f->rec2);
    settle(f);
    jitop__watch_remove(f->w, ida);
    jitop__watch_remove(f->w, ida); /* twice is fine */
    write_kernel(f->src, "a.cu", 2, false);
    write_kernel(f->src, "b.cu", 2, false);
    settle(f);
    assert_int_equal(snap(&f->rec).reports, 1);  /* only the first build */
    assert_int_equal(snap(&f->rec2).reports, 2); /* the control saw its save */
    free(a);
    free(b);
}

/* A report that blocks until told to return, to hold the watch thread's
 * reference to an entry while another thread removes it. */
typedef struct gate {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    bool entered, go, left;
} gate;

static void on_report_gated(void *user, const jitop__unit_report *ur)
{
    gate *g = user;
    (void)ur;
    pthread_mutex_lock(&g->lock);
    g->entered = true;
    pthread_cond_broadcast(&g->cond);
    while (!g->go)
        pthread_cond_wait(&g->cond, &g->lock);
    g->left = true;
    pthread_mutex_unlock(&g->lock);
}

static void *open_gate_later(void *arg)
{
    gate *g = arg;
    /* Long enough for the main thread to be waiting inside the remove; if
     * it is not there yet the test still passes, it just checks less. */
    struct timespec ts = {0, 200 * 1000 * 1000};
    nanosleep(&ts, NULL);
    pthread_mutex_lock(&g->lock);
    g->go = true;
    pthread_cond_broadcast(&g->cond);
    pthread_mutex_unlock(&g->lock);
    return NULL;
}

/* A remove that has to wait for a rebuild in progress (the watch thread in
 * the target's report): the rebuild's end must not free the entry under the
 * waiting remove (it did, and the remove then freed it a second time: the
 * reload_bench crash at jitop_unwatch). ASan/valgrind see it at once. */
static void test_remove_while_a_rebuild_holds_it(void **state)
{
    fixture *f = *state;
    gate g = {.entered = false};
    pthread_mutex_init(&g.lock, NULL);
    pthread_cond_init(&g.cond, NULL);
    write_kernel(f->src, "k.cu", 1, false);
    char *path = jt_path(f->src, "k.cu");
    uint64_t id = 0;
    int rc = jitop__watch_unit(f->w, f->ctx, JITOP_RELOAD_AUTO, path, "sm_90", NULL, 0, NULL, 0,
                               on_report_gated, &g, &id);
    if (rc != JITOP_OK)
        fail_msg("jitop__watch_unit %s: %s", path, jitop_errmsg(NULL));
    /* The first check builds and reports: wait until that report blocks. */
    pthread_mutex_lock(&g.lock);
    while (!g.entered)
        pthread_cond_wait(&g.cond, &g.lock);
    pthread_mutex_unlock(&g.lock);
    pthread_t opener;
    assert_int_equal(pthread_create(&opener, NULL, open_gate_later, &g), 0);
    jitop__watch_remove(f->w, id);
    /* The remove waited for the report to end (no report outlives it). */
    pthread_mutex_lock(&g.lock);
    bool left = g.left;
    pthread_mutex_unlock(&g.lock);
    assert_true(left);
    assert_int_equal(pthread_join(opener, NULL), 0);
    settle(f);
    jitop__watch_remove(f->w, id); /* already gone: ignored */
    pthread_cond_destroy(&g.cond);
    pthread_mutex_destroy(&g.lock);
    free(path);
}

static void test_poll_mode_swaps_in_poll(void **state)
{
    fixture *f = *state;
    write_kernel(f->src, "k.cu", 1, false);
    char *path = jt_path(f->src, "k.cu");
    watch_file(f, path, JITOP_RELOAD_POLL, &f->rec);
    settle(f);
    assert_int_equal(snap(&f->rec).reports, 0); /* the first build waits for poll too */
    int swapped = -1;
    assert_int_equal(jitop__watch_poll(f->w, &swapped), JITOP_OK);
    assert_int_equal(swapped, 1);
    assert_int_equal(snap(&f->rec).reports, 1);
    assert_int_equal(jitop__watch_poll(f->w, &swapped), JITOP_OK);
    assert_int_equal(swapped, 0);

    write_kernel(f->src, "k.cu", 2, false);
    settle(f);
    jitop__watch_stats st;
    jitop__watch_get_stats(f->w, &st);
    assert_int_equal(st.rebuilds, 2);
    assert_int_equal(snap(&f->rec).generation, 1); /* built, not swapped */
    assert_int_equal(jitop__watch_poll(f->w, &swapped), JITOP_OK);
    assert_int_equal(swapped, 1);
    assert_int_equal(snap(&f->rec).generation, 2);

    free(jt_write(f->src, "k.cu", "extern \"C\" __global__ void k(int *p) { *p = nope; }\n"));
    settle(f);
    assert_int_equal(snap(&f->rec).failures, 0);
    int rc = jitop__watch_poll(f->w, &swapped);
    assert_int_equal(rc, JITOP_ECOMPILE);
    assert_int_equal(swapped, 0);
    if (!strstr(jitop_errmsg(NULL), "k.cu(1)"))
        fail_msg("poll's message lacks file:line: %s", jitop_errmsg(NULL));
    assert_int_equal(snap(&f->rec).failures, 1);
    assert_int_equal(snap(&f->rec).generation, 2);
    free(path);
}

/* The watch thread cannot be asked whether it waits once it ended: wait
 * for a report count instead. */
static void wait_reports(recorder *rec, int n)
{
    for (int ms = 0; snap(rec).reports < n; ms++) {
        if (ms > SETTLE_MS)
            fail_msg("no report %d after %d ms", n, SETTLE_MS);
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
}

static void test_watcher_failure_is_reported(void **state)
{
    fixture *f = *state;
    write_kernel(f->src, "a.cu", 1, false);
    write_kernel(f->src, "b.cu", 2, false);
    char *a = jt_path(f->src, "a.cu"), *b = jt_path(f->src, "b.cu");
    watch_file(f, a, JITOP_RELOAD_AUTO, &f->rec);
    watch_file(f, b, JITOP_RELOAD_POLL, &f->rec2);
    settle(f);
    int swapped = -1;
    assert_int_equal(jitop__watch_poll(f->w, &swapped), JITOP_OK);
    assert_int_equal(swapped, 1);
    assert_int_equal(snap(&f->rec).reports, 1);
    assert_int_equal(snap(&f->rec2).reports, 1);

    /* As if reading inotify failed: the AUTO target hears it on the watch
     * thread, the POLL target at its next poll (marked before the AUTO
     * report is made, so once that report arrived, poll must see it). */
    jitop__watch_inject_failure(f->w, JITOP_EIO);
    wait_reports(&f->rec, 2);
    recorder r = snap(&f->rec);
    assert_int_equal(r.last_status, JITOP_EIO);
    assert_int_equal(r.stops, 1);
    assert_int_equal(r.swaps, 1);
    assert_non_null(r.last_message);
    if (!strstr(r.last_message, "hot reload stopped") || !strstr(r.last_message, "inotify"))
        fail_msg("the stop report does not say why: %s", r.last_message);

    assert_int_equal(snap(&f->rec2).reports, 1);
    assert_int_equal(jitop__watch_poll(f->w, &swapped), JITOP_EIO);
    assert_int_equal(swapped, 0);
    if (!strstr(jitop_errmsg(NULL), "hot reload stopped"))
        fail_msg("poll's message does not say hot reload stopped: %s", jitop_errmsg(NULL));
    r = snap(&f->rec2);
    assert_int_equal(r.reports, 2);
    assert_int_equal(r.stops, 1);
    assert_int_equal(r.last_status, JITOP_EIO);
    assert_int_equal(jitop__watch_poll(f->w, &swapped), JITOP_OK); /* told once */
    free(a);
    free(b);
}

static void test_delete_then_recreate_is_one_change(void **state)
{
    fixture *f = *state;
    jitop__watch_tune(f->w, 0, 60000); /* the default quiet window, a long cap */
    write_kernel(f->src, "k.cu", 1, false);
    char *path = jt_path(f->src, "k.cu");
    watch_file(f, path, JITOP_RELOAD_AUTO, &f->rec);
    settle(f);
    /* A save that removes the file first (some tools, `rm` then `cp`): the
     * watcher waits for it to come back instead of reporting a failure. The
     * pause (far beyond the quiet window, far below the cap) is what a
     * watcher without that wait would fail on; the correct one passes
     * whatever it lasts. */
    assert_int_equal(unlink(path), 0);
    if (jitop__watch_wait_drained(f->w, SETTLE_MS) != JITOP_OK)
        fail_msg("%s", jitop_errmsg(NULL));
    struct timespec pause = {0, 100000000};
    nanosleep(&pause, NULL);
    write_kernel(f->src, "k.cu", 2, false);
    settle(f);
    recorder r = snap(&f->rec);
    assert_int_equal(r.failures, 0);
    assert_int_equal(r.swaps, 2);
    char now[33];
    build_key(f, path, now);
    assert_string_equal(r.key, now);
    free(path);
}

static void test_public_calls_without_a_watch(void **state)
{
    fixture *f = *state;
    int swapped = -1;
    assert_int_equal(jitop_poll(f->ctx, &swapped), JITOP_OK); /* never watched: nothing */
    assert_int_equal(swapped, 0);
    assert_int_equal(jitop_poll(NULL, &swapped), JITOP_EINVAL);
    assert_int_equal(jitop_watch(NULL, JITOP_RELOAD_AUTO, NULL, NULL), JITOP_EINVAL);
    assert_int_equal(jitop_unwatch(NULL), JITOP_EINVAL);
    /* A directory that does not exist cannot be watched: the error names it. */
    char *gone = jt_path(f->src, "no/such/dir/k.cu");
    uint64_t id = 0;
    int rc = jitop__watch_unit(f->w, f->ctx, JITOP_RELOAD_AUTO, gone, "sm_90", NULL, 0, NULL, 0,
                               on_report, &f->rec, &id);
    assert_int_not_equal(rc, JITOP_OK);
    assert_non_null(strstr(jitop_errmsg(NULL), "no/such/dir"));
    free(gone);
}

static char *read_or_empty(const char *path)
{
    if (access(path, F_OK) != 0)
        return strdup("");
    return jt_read(path);
}

static int count_lines(const char *s, const char *needle)
{
    int n = 0;
    for (const char *p = s; (p = strstr(p, needle)); p += strlen(needle))
        n++;
    return n;
}

/* Waits until the file holds at least n occurrences of needle. */
static void wait_for(const char *path, const char *needle, int n)
{
    for (int i = 0; i < SETTLE_MS / 10; i++) {
        char *s = read_or_empty(path);
        int got = count_lines(s, needle);
        free(s);
        if (got >= n)
            return;
        struct timespec ts = {0, 10000000};
        nanosleep(&ts, NULL);
    }
    char *s = read_or_empty(path);
    fail_msg("%s: waited for %d x '%s', have:\n%s", path, n, needle, s);
}

/* Starts the CLI with stdout and stderr into out. */
static pid_t spawn_cli(fixture *f, char **argv, const char *out)
{
    posix_spawn_file_actions_t fa;
    assert_int_equal(posix_spawn_file_actions_init(&fa), 0);
    assert_int_equal(posix_spawn_file_actions_addopen(&fa, 1, out, O_WRONLY | O_CREAT | O_TRUNC, 0600), 0);
    assert_int_equal(posix_spawn_file_actions_adddup2(&fa, 1, 2), 0);
    pid_t pid;
    assert_int_equal(posix_spawn(&pid, jt_cli(), &fa, NULL, argv, environ), 0);
    posix_spawn_file_actions_destroy(&fa);
    f->cli = pid;
    return pid;
}

/* Sends sig and returns the exit status (fails when it does not exit). */
static int stop_cli(fixture *f, pid_t pid, int sig)
{
    assert_int_equal(kill(pid, sig), 0);
    int status = 0;
    pid_t got = 0;
    for (int i = 0; i < SETTLE_MS / 10 && got == 0; i++) {
        got = waitpid(pid, &status, WNOHANG);
        if (got == 0) {
            struct timespec ts = {0, 10000000};
            nanosleep(&ts, NULL);
        }
    }
    if (got == 0) {
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
        f->cli = 0;
        fail_msg("jitop watch did not exit after signal %d", sig);
    }
    f->cli = 0;
    assert_true(WIFEXITED(status));
    return WEXITSTATUS(status);
}

static void test_cli_watch_json_and_sigterm(void **state)
{
    fixture *f = *state;
    write_kernel(f->src, "k.cu", 1, false);
    char *src = jt_path(f->src, "k.cu");
    char *out = jt_path(f->src, "out.json");
    char *cache = jt_path(f->cache, "cli");
    char *argv[] = {(char *)jt_cli(), "watch", "--json", "--arch", "sm_90", "--cache-dir", cache,
                    src, NULL};
    pid_t pid = spawn_cli(f, argv, out);
    wait_for(out, "\"status\":\"ok\"", 1);
    free(jt_write(f->src, "k.cu", "extern \"C\" __global__ void k(int *p) { *p = \"; }\n"));
    wait_for(out, "\"status\":\"error\"", 1);
    assert_int_equal(stop_cli(f, pid, SIGTERM), 0);
    char *text = jt_read(out);
    assert_non_null(strstr(text, "\"error\":\""));
    assert_non_null(strstr(text, "k.cu(1)"));
    free(text);
    free(cache);
    free(out);
    free(src);
}

static void test_cli_watch_runs_command_and_exits_on_sigint(void **state)
{
    fixture *f = *state;
    write_kernel(f->src, "k.cu", 1, false);
    char *src = jt_path(f->src, "k.cu");
    char *out = jt_path(f->src, "out.txt");
    char *marker = jt_path(f->src, "ran.txt");
    char *cache = jt_path(f->cache, "cli");
    char *command = NULL;
    assert_true(asprintf(&command, "echo ran >> '%s'", marker) > 0);

    char *argv[] = {(char *)jt_cli(), "watch", "--arch", "sm_90", "--cache-dir", cache, src,
                    "--", command, NULL};
    pid_t pid = spawn_cli(f, argv, out);

    wait_for(out, "ok ", 1);
    wait_for(marker, "ran", 1);
    write_kernel(f->src, "k.cu", 2, true);
    wait_for(out, "ok ", 2);
    wait_for(marker, "ran", 2);

    free(jt_write(f->src, "k.cu", "extern \"C\" __global__ void k(int *p)\n{\n  *p = oops;\n}\n"));
    wait_for(out, "error ", 1);
    wait_for(out, "k.cu(3)", 1);
    write_kernel(f->src, "k.cu", 3, false);
    wait_for(out, "ok ", 3);
    wait_for(marker, "ran", 3);

    assert_int_equal(stop_cli(f, pid, SIGINT), 0);
    char *text = jt_read(out);
    assert_int_equal(count_lines(text, "\033["), 0); /* no color into a file */
    char *ran = jt_read(marker);
    assert_int_equal(count_lines(ran, "ran"), 3); /* not after the failed build */
    free(text);
    free(ran);
    free(command);
    free(cache);
    free(marker);
    free(out);
    free(src);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_initial_build_and_source_change, setup, teardown),
        cmocka_unit_test_setup_teardown(test_nested_header_change, setup, teardown),
        cmocka_unit_test_setup_teardown(test_rename_save_is_seen, setup, teardown),
        cmocka_unit_test_setup_teardown(test_touch_does_not_swap, setup, teardown),
        cmocka_unit_test_setup_teardown(test_quick_writes_coalesce, setup, teardown),
        cmocka_unit_test_setup_teardown(test_failed_rebuild_keeps_old_and_recovers, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_new_include_is_watched, setup, teardown),
        cmocka_unit_test_setup_teardown(test_remove_stops_reports, setup, teardown),
        cmocka_unit_test_setup_teardown(test_remove_while_a_rebuild_holds_it, setup, teardown),
        cmocka_unit_test_setup_teardown(test_poll_mode_swaps_in_poll, setup, teardown),
        cmocka_unit_test_setup_teardown(test_watcher_failure_is_reported, setup, teardown),
        cmocka_unit_test_setup_teardown(test_delete_then_recreate_is_one_change, setup, teardown),
        cmocka_unit_test_setup_teardown(test_public_calls_without_a_watch, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cli_watch_json_and_sigterm, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cli_watch_runs_command_and_exits_on_sigint, setup,
                                        teardown),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    jt_cleanup();
    return failed;
}
