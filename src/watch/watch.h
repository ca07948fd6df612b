/*
 * The watch room: hot reload, in two layers.
 * May include: base, compile, cache, build, load (reload.c rebuilds and
 * swaps modules through load.h). Included by watch/ and by the CLI's
 * `jitop watch` (tools/cmd_watch.c, a privileged client: see tools/cli.h).
 *
 * inotify.c: which files changed. inotify on the DIRECTORIES of the files
 * (a rename-save replaces the inode, so a watch on the file itself would go
 * deaf after the first vim or VS Code save), events filtered by file name,
 * coalesced until the files are quiet. Knows nothing of builds.
 *
 * reload.c: what to do about it. One background thread per jitop__watch (one
 * per context for jitop_watch; `jitop watch` and the tests make their own)
 * rebuilds the *targets* whose files changed and swaps the results in, or
 * leaves them for jitop_poll. A target is a loaded module (prepare/commit of
 * the loader) or one unit built into the cache (what `jitop watch` prints),
 * so everything but the driver is testable on a machine with no GPU.
 * host_target.c: the target of host sources; built_state.c: the key and
 * files both build-only targets (unit, host) keep, and their report.
 */
#ifndef JITOP_WATCH_H
#define JITOP_WATCH_H

#include "base/base.h"

#include <stdbool.h>
#include <stdint.h>

/* ------------------------------------------------------------- inotify.c */

typedef struct jitop__watcher jitop__watcher;

/* After the first event on a watched file, the watcher waits until no new
 * event came for this long before it reports the change. Why so short: the
 * goal is save-to-first-new-launch within NVRTC's compile time plus 5 ms, so
 * the window must be a small part of those 5 ms. It only has to bridge the
 * gap between files of one multi-file save ("save all", git checkout), which
 * are written back to back within microseconds; a file that is still being
 * written is not what this window protects against: the watcher tracks it
 * (an IN_MODIFY or IN_CREATE without its IN_CLOSE_WRITE, or a file renamed
 * or deleted away and not back yet) and waits for it, up to the cap below. */
#define JITOP__WATCH_QUIET_MS 2
/* The longest a change is postponed: for a writer that keeps the file open,
 * a file deleted and not recreated, or events that never stop. */
#define JITOP__WATCH_MAX_DELAY_MS 1000

/* Opens an inotify instance and a wake-up eventfd. */
int jitop__watcher_open(jitop__watcher **out);
/* Closes it. Nobody may be waiting. Accepts NULL. */
void jitop__watcher_close(jitop__watcher *w);

/* Tunes the coalescing (tests use a long quiet window so that a burst of
 * writes is one change however slow the machine). Values <= 0 keep the
 * current ones. */
void jitop__watcher_tune(jitop__watcher *w, int quiet_ms, int max_delay_ms);

/* Sets the files watched for tag (replacing its earlier list; directory
 * watches are added and dropped as needed). A directory that does not exist
 * is an error naming it; the tag then keeps its earlier list. Thread-safe,
 * also while another thread waits. */
int jitop__watcher_set(jitop__watcher *w, uint64_t tag, const char *const *paths, size_t n);
/* Stops watching the files of tag; a change not yet reported is dropped. */
void jitop__watcher_forget(jitop__watcher *w, uint64_t tag);
/* Reports tag as changed at the next wait, without any event. */
void jitop__watcher_touch(jitop__watcher *w, uint64_t tag);

typedef enum jitop__wait_result {
    JITOP__WAIT_CHANGED, /* *tags holds the tags whose files changed */
    JITOP__WAIT_WOKEN,   /* jitop__watcher_wake, or timeout_ms passed */
    JITOP__WAIT_STOPPED  /* jitop__watcher_stop was called */
} jitop__wait_result;

/* Blocks until some tags' files changed and are quiet (see above), the
 * watcher is woken or stopped, or timeout_ms passed (negative: no limit).
 * On CHANGED, *tags (malloc'd, the caller frees it) holds each changed tag
 * once. One waiter at a time. An I/O error reading inotify is returned as a
 * jitop status after recording a message (the result is then STOPPED). */
int jitop__watcher_wait(jitop__watcher *w, int timeout_ms, jitop__wait_result *result,
                        uint64_t **tags, size_t *ntags);
/* When the first change of the batch the last CHANGED wait returned was
 * seen (jitop__now_ms clock): the start of a save-to-reload timeline. */
double jitop__watcher_batch_first_ms(jitop__watcher *w);
/* Makes the current (or next) wait return WOKEN. Thread-safe. */
void jitop__watcher_wake(jitop__watcher *w);
/* Makes every wait from now on return STOPPED. Thread-safe. */
void jitop__watcher_stop(jitop__watcher *w);
/* For tests: makes the next wait fail with status as a failed inotify read
 * would (a recorded message, result STOPPED), so that what a watch does
 * when its watcher breaks can be checked without breaking the kernel's.
 * Thread-safe. */
void jitop__watcher_inject_failure(jitop__watcher *w, int status);

/* True when a waiter is blocked with nothing to report: no change pending
 * and no event left unread in the kernel's queue. Since inotify queues an
 * event before the write or rename that caused it returns, a test that saw
 * its own writes finish and then finds the watcher idle knows that every
 * one of them was seen. */
bool jitop__watcher_idle(jitop__watcher *w);
/* Like jitop__watcher_idle, but a change may be pending (seen, waiting for
 * the files to be quiet): every event so far was read. */
bool jitop__watcher_drained(jitop__watcher *w);

/* -------------------------------------------------------------- reload.c */

/* What a rebuild of a target led to, as given to its report function. */
typedef struct jitop__reload_report {
    int status;          /* JITOP_OK, or why the rebuild failed (old code kept) */
    const char *message; /* the error (compile log with file:line); NULL when OK */
    bool swapped;        /* new code is in place */
    bool recovered;      /* OK, no new code: the files are back to what is in place
                            after a failed rebuild */
    double ms;           /* the rebuild's wall time (prepare, not waiting) */
    double wait_ms;      /* first change seen -> rebuild start (coalescing); -1 unknown */
    double files_ms;     /* re-reading the file list after the rebuild */
    double commit_ms;    /* the swap (AUTO; 0 in POLL, where jitop_poll swaps) */
    bool stopped;        /* the watch itself failed (status, message say how) and
                            its thread ended: the code in place keeps running,
                            but nothing is reloaded any more */
} jitop__reload_report;

/* What the watch thread rebuilds. self is the target's own state. */
typedef struct jitop__target_ops {
    /* Appends every file the current code was built from (absolute paths).
     * Called when the watch starts and after every rebuild (new includes). */
    int (*files)(void *self, jitop__strv *out);
    /* Rebuilds without swapping, on the watch thread. *next: what commit
     * swaps in, or NULL when the result is the code in place (same cache
     * keys: a touch, or a save that changes nothing). On failure the
     * message (compile log) is the thread's jitop_errmsg. */
    int (*prepare)(void *self, void **next);
    /* Swaps next in (consumes it, also on failure). */
    int (*commit)(void *self, void *next);
    /* Frees next without swapping it in. */
    void (*discard)(void *self, void *next);
    /* Tells the owner what happened: on the watch thread in AUTO mode, in
     * jitop__watch_poll in POLL mode. Not called for a rebuild that changed
     * nothing, unless it recovers from a failure. */
    void (*report)(void *self, const jitop__reload_report *r);
    /* Optional: work that may block, done on the watch thread after a swap
     * (the loader's reap of retired images). Returns true when something is
     * left to do later (it is retried after a short while). */
    bool (*after_swap)(void *self);
    /* Frees self when the target is dropped (unwatch, destroy). */
    void (*free)(void *self);
} jitop__target_ops;

/* Counters, for tests and benchmarks. */
typedef struct jitop__watch_stats {
    uint64_t rebuilds;   /* prepare calls finished (the first check included) */
    uint64_t swaps;      /* commits that put new code in place */
    uint64_t unchanged;  /* rebuilds that found the code in place */
    uint64_t failures;   /* rebuilds that failed */
    double last_rebuild_ms; /* wall time of the latest prepare (compile, write, load) */
} jitop__watch_stats;

/* Starts a watch: a watcher and its thread (all signals blocked on it, so
 * that the application's handlers run on its own threads). */
int jitop__watch_create(jitop__watch **out);
/* Stops and joins the thread, drops every target (discarding rebuilds not
 * yet polled) and frees the watch. Accepts NULL. */
void jitop__watch_destroy(jitop__watch *w);
/* See jitop__watcher_tune. */
void jitop__watch_tune(jitop__watch *w, int quiet_ms, int max_delay_ms);
/* For tests: see jitop__watcher_inject_failure. The thread then reports
 * the failure (stopped set) to every target and ends. */
void jitop__watch_inject_failure(jitop__watch *w, int status);

/* Adds a target (ops must outlive the watch). Its files are watched before
 * this returns, and the thread checks it once right away, so that a save
 * between the target's build and this call is not missed (a check of
 * unchanged files costs one stat per file and swaps nothing). On failure
 * ops->free(self) has been called. *id identifies it for jitop__watch_remove. */
int jitop__watch_add(jitop__watch *w, jitop_reload_mode mode, const jitop__target_ops *ops,
                     void *self, uint64_t *id);
/* Drops a target: no report starts after this returns (unless called from
 * that target's own report, which then finishes). Unknown ids are ignored. */
void jitop__watch_remove(jitop__watch *w, uint64_t id);
/* POLL mode: commits every rebuild that finished, on the calling thread,
 * and reports. One atomic load when there is nothing. Returns the first
 * failure with its message in jitop_errmsg (recorded after the reports). */
int jitop__watch_poll(jitop__watch *w, int *swapped);
/* Calls fn(user) on the watch thread after each batch of rebuilds (the
 * targets whose files changed together), after their reports. Set it
 * before adding targets. `jitop watch` runs its COMMAND there, once per
 * batch. */
void jitop__watch_on_batch(jitop__watch *w, void (*fn)(void *user), void *user);
void jitop__watch_get_stats(jitop__watch *w, jitop__watch_stats *out);
/* Waits until the thread is blocked with nothing to do and no unread event
 * (see jitop__watcher_idle), at most timeout_ms. 0, or JITOP_EIO on
 * timeout. For tests and benchmarks; polls every 1 ms. */
int jitop__watch_wait_idle(jitop__watch *w, int timeout_ms);
/* Waits until the thread is blocked and every event so far was read (see
 * jitop__watcher_drained): a test that writes, then waits for this, knows
 * that a watch without coalescing would be rebuilding by now. */
int jitop__watch_wait_drained(jitop__watch *w, int timeout_ms);

/* A target that builds one .cu file for one arch into the cache: `jitop
 * watch` and the CPU tests. "In place" is the last key built successfully;
 * a commit makes the new key the current one. */
typedef struct jitop__unit_report {
    const jitop__reload_report *r;
    const char *path;    /* the source */
    const char *arch;
    const char *key;     /* the key in place ("" before the first success) */
    bool cached;         /* the swapped-in binary came from the cache */
    uint64_t generation; /* successful builds that changed the key */
} jitop__unit_report;
typedef void (*jitop__unit_report_fn)(void *user, const jitop__unit_report *r);

/* Watches path built for arch with options and name expressions (see
 * jitop_build) in ctx's cache. The first check builds it (and reports it:
 * there is no key in place yet). */
int jitop__watch_unit(jitop__watch *w, jitop_ctx *ctx, jitop_reload_mode mode, const char *path,
                      const char *arch, const char *const *options, size_t noptions,
                      const char *const *names, size_t nnames, jitop__unit_report_fn fn,
                      void *user, uint64_t *id);

/* The same for host sources (host_target.c): paths built together as one
 * module's host object (jitop__host_lib_build) with the host part of
 * options, not loaded. Reports like a unit: path the first source, arch
 * "host". */
int jitop__watch_host(jitop__watch *w, jitop_ctx *ctx, jitop_reload_mode mode,
                      const char *const *paths, size_t npaths, const char *const *options,
                      size_t noptions, jitop__unit_report_fn fn, void *user, uint64_t *id);

/* ---------------------------------------------------------- built_state.c */

/* What the unit and host targets keep between rebuilds: the key in place
 * and the files its build read (the lock guards both: prepare on the watch
 * thread vs commit in jitop_poll), and whom to report to. */
typedef struct jitop__built_state {
    jitop_ctx *ctx;
    pthread_mutex_t lock;
    char key[33];          /* "" until the first success */
    bool cached;
    uint64_t generation;
    jitop__strv files;     /* what the latest build read */
    jitop__unit_report_fn fn;
    void *user;
} jitop__built_state;

/* Inits a zeroed state; returns pthread_mutex_init's error (0: done), for
 * the caller to word. */
int jitop__built_state_init(jitop__built_state *s, jitop_ctx *ctx, jitop__unit_report_fn fn,
                            void *user);
/* Frees the file list and the lock. */
void jitop__built_state_fini(jitop__built_state *s);
/* The target's files op: appends the files to out. */
int jitop__built_state_files(jitop__built_state *s, jitop__strv *out);
/* Takes *files (left empty) as the list to watch, freeing the earlier one. */
void jitop__built_state_set_files(jitop__built_state *s, jitop__strv *files);
/* Whether key is the key in place (a rebuild that changed nothing). */
bool jitop__built_state_same(jitop__built_state *s, const char key[33]);
/* The target's commit: key, built or cached, is now in place. */
void jitop__built_state_commit(jitop__built_state *s, const char key[33], bool cached);
/* The target's report: the unit report for path and arch to fn, and the
 * failure that stopped the watch to the context's log. */
void jitop__built_state_report(jitop__built_state *s, const jitop__reload_report *r,
                               const char *path, const char *arch);

/* The context's teardown of the watch (registered with jitop__ctx_on_destroy
 * at the first jitop_watch, so it runs before the loader unloads modules). */
void jitop__watch_ctx_destroy(jitop_ctx *ctx);

#endif
