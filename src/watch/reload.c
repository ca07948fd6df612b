/* Hot reload: the watch thread that rebuilds changed targets and swaps them
 * in (AUTO) or leaves them for jitop_poll (POLL), and the two targets it
 * knows: a loaded module and a unit built into the cache (see watch.h). */
#include "watch/watch.h"

#include "load/load.h"

#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* A swap leaves the old image loaded until no launch holds it; when the
 * loader says some are still held, the thread tries again this much later. */
#define REAP_RETRY_MS 50

typedef struct entry {
    uint64_t id;
    jitop_reload_mode mode;
    const jitop__target_ops *ops;
    void *self;
    int busy;           /* holders: a rebuild on the thread, a delivery in poll */
    bool removed;       /* freed by whoever drops busy to 0 */
    bool failed;        /* the last report was a failure (a revert reports recovery) */
    bool reap_due;      /* after_swap has work left */
    uint64_t commits;   /* commits started: invalidates a POLL "unchanged" verdict */
    /* POLL mode: what the next jitop_poll delivers. */
    void *ready;
    double ready_ms;
    int err_status;
    char *err_msg;
    double err_ms;
    bool stop_due;      /* err_* says the watch thread ended (see watch_failed) */
    bool recover_due;
    struct entry *next;
} entry;

struct jitop__watch {
    pthread_mutex_t lock;
    pthread_cond_t released; /* an entry's busy count dropped */
    jitop__watcher *watcher;
    pthread_t thread;
    bool started;
    entry *entries;
    uint64_t last_id;
    atomic_int poll_due;     /* something waits for jitop_poll */
    void (*batch_fn)(void *user);
    void *batch_user;
    jitop__watch_stats stats;
};

/* The watch whose report runs on this thread: a remove from inside a
 * report must not wait for the report to end. */
static _Thread_local jitop__watch *reporting;

static entry *find(jitop__watch *w, uint64_t id)
{
    for (entry *e = w->entries; e; e = e->next)
        if (e->id == id)
            return e;
    return NULL;
}

static void entry_free(entry *e)
{
    if (e->ready)
        e->ops->discard(e->self, e->ready);
    free(e->err_msg);
    e->ops->free(e->self);
    free(e);
}

/* Drops a holder; returns the entry to free (after unlocking) when it was
 * the last holder of a removed entry. Caller holds w->lock. */
static entry *release(jitop__watch *w, entry *e)
{
    e->busy--;
    pthread_cond_broadcast(&w->released);
    if (e->busy > 0 || !e->removed)
        return NULL;
    for (entry **pp = &w->entries; *pp; pp = &(*pp)->next) {
        if (*pp == e) {
            *pp = e->next;
            break;
        }
    }
    return e;
}

/* release() for a batch: the entries to free gather in *dead (linked
 * through next, which release() has taken out of w->entries), freed by
 * free_dead() after unlocking. Caller holds w->lock. */
static void release_into(jitop__watch *w, entry *e, entry **dead)
{
    entry *d = release(w, e);
    if (d) {
        d->next = *dead;
        *dead = d;
    }
}

static void free_dead(entry *dead)
{
    while (dead) {
        entry *e = dead;
        dead = e->next;
        entry_free(e);
    }
}

/* Watches the files the target's current code came from. */
static int refresh_files(jitop__watch *w, entry *e)
{
    jitop__strv paths = {0};
    int rc = e->ops->files(e->self, &paths);
    if (rc == JITOP_OK)
        rc = jitop__watcher_set(w->watcher, e->id, (const char *const *)paths.v, paths.n);
    jitop__strv_free(&paths);
    return rc;
}

/* Commits next (when not NULL) and reports what the application needs to
 * hear. Runs on the watch thread (AUTO) or in jitop_poll (POLL); e is held.
 * Returns whether new code went in; *status gets the outcome. */
static bool deliver(jitop__watch *w, entry *e, int *status, const char *msg, void *next,
                    const jitop__reload_report *timing)
{
    jitop__reload_report r = *timing;
    r.status = *status;
    r.message = msg;
    char *commit_msg = NULL;
    if (next) {
        pthread_mutex_lock(&w->lock);
        e->commits++;
        pthread_mutex_unlock(&w->lock);
        double t0 = jitop__now_ms();
        int rc = e->ops->commit(e->self, next);
        r.commit_ms = jitop__now_ms() - t0;
        if (rc != JITOP_OK) {
            commit_msg = jitop__strdup(jitop_errmsg(NULL));
            r.status = rc;
            r.message = commit_msg ? commit_msg : "reload: commit failed (out of memory for its message)";
        } else {
            r.swapped = true;
        }
    }
    pthread_mutex_lock(&w->lock);
    bool tell = r.status != JITOP_OK || r.swapped || e->failed;
    r.recovered = r.status == JITOP_OK && !r.swapped && e->failed;
    e->failed = r.status != JITOP_OK;
    if (r.swapped) {
        w->stats.swaps++;
        e->reap_due = e->ops->after_swap != NULL;
    }
    tell = tell && !e->removed;
    pthread_mutex_unlock(&w->lock);
    if (tell) {
        jitop__watch *outer = reporting;
        reporting = w;
        e->ops->report(e->self, &r);
        reporting = outer;
    }
    free(commit_msg);
    *status = r.status;
    return r.swapped;
}

/* Takes hold of target id for a rebuild (NULL: it is gone), with its
 * commit count and mode as the rebuild starts. */
static entry *rebuild_hold(jitop__watch *w, uint64_t id, uint64_t *commits,
                           jitop_reload_mode *mode)
{
    pthread_mutex_lock(&w->lock);
    entry *e = find(w, id);
    if (!e || e->removed) {
        pthread_mutex_unlock(&w->lock);
        return NULL;
    }
    e->busy++;
    *commits = e->commits;
    *mode = e->mode;
    pthread_mutex_unlock(&w->lock);
    return e;
}

/* POLL mode, under w->lock: keeps a rebuild's outcome (rc, the new code
 * *next or the error *msg, both taken: set to NULL) for the next jitop_poll.
 * *stale gets what it replaces, for the caller to discard. */
static void rebuild_keep(jitop__watch *w, entry *e, int rc, void **next, char **msg, double ms,
                         uint64_t commits_before, void **stale)
{
    if (rc != JITOP_OK) {
        free(e->err_msg);
        e->err_status = rc;
        e->err_msg = *msg;
        e->err_ms = ms;
        *msg = NULL;
    } else if (*next) {
        *stale = e->ready;
        e->ready = *next;
        e->ready_ms = ms;
        *next = NULL;
        free(e->err_msg);
        e->err_msg = NULL;
        e->err_status = JITOP_OK;
    } else if (e->commits != commits_before) {
        /* jitop_poll swapped in an older rebuild while this one ran: the
         * verdict "same as in place" may be about code no longer in
         * place. Check again. */
        jitop__watcher_touch(w->watcher, e->id);
    } else {
        /* The files went back to the code in place: drop what was
         * waiting, and say so if the application saw the failure. */
        *stale = e->ready;
        e->ready = NULL;
        free(e->err_msg);
        e->err_msg = NULL;
        e->err_status = JITOP_OK;
        e->recover_due = e->failed;
    }
    if (e->ready || e->err_status != JITOP_OK || e->recover_due)
        atomic_store_explicit(&w->poll_due, 1, memory_order_release);
}

/* Rebuilds one target on the watch thread. */
static void rebuild(jitop__watch *w, uint64_t id)
{
    uint64_t commits_before = 0;
    jitop_reload_mode mode = JITOP_RELOAD_AUTO;
    entry *e = rebuild_hold(w, id, &commits_before, &mode);
    if (!e)
        return;

    double t0 = jitop__now_ms();
    void *next = NULL;
    int rc = e->ops->prepare(e->self, &next);
    double ms = jitop__now_ms() - t0;
    /* For JITOP_VERBOSE: where a save-to-reload goes (the coalescing wait,
     * the rebuild, the file list, the swap). */
    double t_seen = jitop__watcher_batch_first_ms(w->watcher), t_files = 0;
    char *msg = NULL;
    if (rc != JITOP_OK) {
        msg = jitop__strdup(jitop_errmsg(NULL));
        if (!msg)
            rc = JITOP_ENOMEM;
    }
    /* A save that adds an #include must start watching it; a failure here
     * (a directory removed) keeps the earlier list: the next save of a file
     * still watched tries again. */
    t_files = jitop__now_ms();
    (void)refresh_files(w, e);
    t_files = jitop__now_ms() - t_files;

    void *stale = NULL;
    pthread_mutex_lock(&w->lock);
    w->stats.rebuilds++;
    w->stats.last_rebuild_ms = ms;
    w->stats.failures += rc != JITOP_OK;
    w->stats.unchanged += rc == JITOP_OK && !next;
    bool auto_mode = mode == JITOP_RELOAD_AUTO && e->mode == JITOP_RELOAD_AUTO;
    bool deliver_now = auto_mode && !e->removed;
    if (e->removed) {
        stale = next;
        next = NULL;
    } else if (!auto_mode) {
        rebuild_keep(w, e, rc, &next, &msg, ms, commits_before, &stale);
    }
    pthread_mutex_unlock(&w->lock);
    if (stale)
        e->ops->discard(e->self, stale);

    if (deliver_now) {
        int status = rc;
        jitop__reload_report timing = {
            .ms = ms, .wait_ms = t_seen > 0 ? t0 - t_seen : -1, .files_ms = t_files};
        if (deliver(w, e, &status, msg, next, &timing) && e->ops->after_swap) {
            bool left = e->ops->after_swap(e->self);
            pthread_mutex_lock(&w->lock);
            e->reap_due = left;
            pthread_mutex_unlock(&w->lock);
        }
    } else if (next) {
        e->ops->discard(e->self, next);
    }
    free(msg);
    pthread_mutex_lock(&w->lock);
    entry *dead = release(w, e);
    pthread_mutex_unlock(&w->lock);
    if (dead)
        entry_free(dead);
}

/* Runs the after-swap work (reaping old images) that is due; true when some
 * is left for later. */
static bool run_reaps(jitop__watch *w)
{
    bool left = false;
    pthread_mutex_lock(&w->lock);
    entry *e = w->entries;
    while (e) {
        if (!e->reap_due || e->removed || e->busy) {
            e = e->next;
            continue;
        }
        e->busy++;
        e->reap_due = false;
        pthread_mutex_unlock(&w->lock);
        bool more = e->ops->after_swap(e->self);
        pthread_mutex_lock(&w->lock);
        e->reap_due = e->reap_due || more;
        left = left || e->reap_due;
        entry *dead = release(w, e);
        if (dead) {
            pthread_mutex_unlock(&w->lock);
            entry_free(dead);
            pthread_mutex_lock(&w->lock);
            e = w->entries; /* the list changed under us: start over */
            continue;
        }
        e = e->next;
    }
    pthread_mutex_unlock(&w->lock);
    return left;
}

/* The watch thread is about to end on status (an inotify or poll failure,
 * out of memory): the application must hear that hot reload stopped. AUTO
 * targets are told now, POLL targets at their next jitop_poll (their
 * callbacks run there only). Logged to stderr when no target can say it. */
static void watch_failed(jitop__watch *w, int status)
{
    char *why = jitop__strdup(jitop_errmsg(NULL));
    char *msg = jitop__sprintf("hot reload stopped, the code in place keeps running: %s",
                               why ? why : jitop_strerror(status));
    const char *text = msg ? msg : "hot reload stopped (out of memory for the message)";
    size_t n = 0, k = 0, polled = 0;
    pthread_mutex_lock(&w->lock);
    for (entry *e = w->entries; e; e = e->next)
        n++;
    entry **told = calloc(n ? n : 1, sizeof *told); /* the AUTO targets, held */
    for (entry *e = w->entries; told && e; e = e->next) {
        if (e->removed)
            continue;
        if (e->mode == JITOP_RELOAD_AUTO) {
            e->busy++;
            told[k++] = e;
            continue;
        }
        char *copy = jitop__strdup(text);
        if (!copy)
            continue;
        free(e->err_msg);
        e->err_status = status;
        e->err_msg = copy;
        e->err_ms = 0;
        e->stop_due = true;
        polled++;
        atomic_store_explicit(&w->poll_due, 1, memory_order_release);
    }
    pthread_mutex_unlock(&w->lock);
    if (k == 0 && polled == 0)
        jitop__log(NULL, "watch: %s", text);
    for (size_t i = 0; i < k; i++) {
        int st = status;
        jitop__reload_report timing = {.wait_ms = -1, .stopped = true};
        deliver(w, told[i], &st, text, NULL, &timing);
    }
    pthread_mutex_lock(&w->lock);
    entry *dead = NULL;
    for (size_t i = 0; i < k; i++)
        release_into(w, told[i], &dead);
    pthread_mutex_unlock(&w->lock);
    free_dead(dead);
    free(told);
    free(msg);
    free(why);
}

static void *watch_thread(void *arg)
{
    jitop__watch *w = arg;
    bool reap_left = false;
    for (;;) {
        jitop__wait_result res;
        uint64_t *tags = NULL;
        size_t ntags = 0;
        int rc = jitop__watcher_wait(w->watcher, reap_left ? REAP_RETRY_MS : -1, &res, &tags,
                                     &ntags);
        /* An inotify read error (or running out of memory) ends the watch
         * (res is STOPPED): the code in place keeps running, it just no
         * longer reloads, and every target is told so. */
        if (res == JITOP__WAIT_STOPPED) {
            free(tags);
            if (rc != JITOP_OK)
                watch_failed(w, rc);
            break;
        }
        for (size_t i = 0; i < ntags; i++)
            rebuild(w, tags[i]);
        free(tags);
        pthread_mutex_lock(&w->lock);
        void (*batch_fn)(void *) = w->batch_fn;
        void *batch_user = w->batch_user;
        pthread_mutex_unlock(&w->lock);
        if (ntags > 0 && batch_fn)
            batch_fn(batch_user);
        reap_left = run_reaps(w);
    }
    return NULL;
}

int jitop__watch_create(jitop__watch **out)
{
    int rc = JITOP_OK;
    bool mutex = false, cond = false;
    *out = NULL;
    jitop__watch *w = calloc(1, sizeof *w);
    if (!w)
        return jitop__fail(JITOP_ENOMEM, "watch: out of memory");
    atomic_init(&w->poll_due, 0);
    int err = pthread_mutex_init(&w->lock, NULL);
    if (err) {
        rc = jitop__fail(JITOP_ENOMEM, "watch: pthread_mutex_init: %s", strerror(err));
        goto out;
    }
    mutex = true;
    err = pthread_cond_init(&w->released, NULL);
    if (err) {
        rc = jitop__fail(JITOP_ENOMEM, "watch: pthread_cond_init: %s", strerror(err));
        goto out;
    }
    cond = true;
    rc = jitop__watcher_open(&w->watcher);
    if (rc != JITOP_OK)
        goto out;
    /* The thread inherits a mask with every signal blocked: the
     * application's handlers (and its signalfd) see its signals, not us. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    err = pthread_create(&w->thread, NULL, watch_thread, w);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (err) {
        rc = jitop__fail(JITOP_ENOMEM, "watch: pthread_create: %s", strerror(err));
        goto out;
    }
    w->started = true;
    *out = w;
out:
    if (rc != JITOP_OK) {
        jitop__watcher_close(w->watcher);
        if (cond)
            pthread_cond_destroy(&w->released);
        if (mutex)
            pthread_mutex_destroy(&w->lock);
        free(w);
    }
    return rc;
}

void jitop__watch_destroy(jitop__watch *w)
{
    if (!w)
        return;
    if (w->started) {
        jitop__watcher_stop(w->watcher);
        pthread_join(w->thread, NULL);
    }
    while (w->entries) {
        entry *e = w->entries;
        w->entries = e->next;
        entry_free(e);
    }
    jitop__watcher_close(w->watcher);
    pthread_cond_destroy(&w->released);
    pthread_mutex_destroy(&w->lock);
    free(w);
}

void jitop__watch_tune(jitop__watch *w, int quiet_ms, int max_delay_ms)
{
    jitop__watcher_tune(w->watcher, quiet_ms, max_delay_ms);
}

void jitop__watch_inject_failure(jitop__watch *w, int status)
{
    jitop__watcher_inject_failure(w->watcher, status);
}

int jitop__watch_add(jitop__watch *w, jitop_reload_mode mode, const jitop__target_ops *ops,
                     void *self, uint64_t *id)
{
    int rc = JITOP_OK;
    entry *e = calloc(1, sizeof *e);
    if (!e) {
        ops->free(self);
        return jitop__fail(JITOP_ENOMEM, "watch: out of memory");
    }
    e->mode = mode;
    e->ops = ops;
    e->self = self;
    pthread_mutex_lock(&w->lock);
    e->id = ++w->last_id;
    pthread_mutex_unlock(&w->lock);
    rc = refresh_files(w, e);
    if (rc != JITOP_OK) {
        entry_free(e);
        return rc;
    }
    pthread_mutex_lock(&w->lock);
    e->next = w->entries;
    w->entries = e;
    pthread_mutex_unlock(&w->lock);
    *id = e->id;
    jitop__watcher_touch(w->watcher, e->id);
    return JITOP_OK;
}

void jitop__watch_remove(jitop__watch *w, uint64_t id)
{
    pthread_mutex_lock(&w->lock);
    entry *e = find(w, id);
    if (!e || e->removed) {
        pthread_mutex_unlock(&w->lock);
        return;
    }
    e->removed = true;
    jitop__watcher_forget(w->watcher, id);
    /* Our own hold first: whoever drops the last hold of a removed entry
     * frees it, so without it a rebuild (or reap, or poll) finishing while
     * we wait would free e under us. Inside a report of this watch the
     * caller may itself hold e: waiting would never end, and the holder
     * frees it when our release leaves its hold the last one. */
    e->busy++;
    while (e->busy > 1 && reporting != w)
        pthread_cond_wait(&w->released, &w->lock);
    entry *dead = release(w, e);
    pthread_mutex_unlock(&w->lock);
    if (dead)
        entry_free(dead);
}

/* One POLL delivery taken out of an entry. */
typedef struct delivery {
    entry *e;
    void *ready;
    double ready_ms;
    int err_status;
    char *err_msg;
    double err_ms;
    bool stopped;
    bool recover;
} delivery;

int jitop__watch_poll(jitop__watch *w, int *swapped)
{
    int nswapped = 0, first = JITOP_OK;
    char *first_msg = NULL;
    if (swapped)
        *swapped = 0;
    if (!atomic_load_explicit(&w->poll_due, memory_order_acquire))
        return JITOP_OK;

    pthread_mutex_lock(&w->lock);
    size_t n = 0, k = 0;
    for (entry *e = w->entries; e; e = e->next)
        n++;
    delivery *d = calloc(n ? n : 1, sizeof *d);
    if (!d) {
        pthread_mutex_unlock(&w->lock);
        return jitop__fail(JITOP_ENOMEM, "jitop_poll: out of memory");
    }
    atomic_store_explicit(&w->poll_due, 0, memory_order_relaxed);
    for (entry *e = w->entries; e; e = e->next) {
        if (e->removed || !(e->ready || e->err_status != JITOP_OK || e->recover_due))
            continue;
        d[k] = (delivery){e, e->ready, e->ready_ms, e->err_status, e->err_msg, e->err_ms,
                          e->stop_due, e->recover_due};
        e->ready = NULL;
        e->err_status = JITOP_OK;
        e->err_msg = NULL;
        e->stop_due = false;
        e->recover_due = false;
        e->busy++;
        k++;
    }
    pthread_mutex_unlock(&w->lock);

    bool reap = false;
    for (size_t i = 0; i < k; i++) {
        int status = JITOP_OK;
        if (d[i].ready || d[i].recover) {
            jitop__reload_report timing = {.ms = d[i].ready_ms, .wait_ms = -1};
            bool in = deliver(w, d[i].e, &status, NULL, d[i].ready, &timing);
            d[i].ready = NULL;
            nswapped += in;
            reap = reap || (in && d[i].e->ops->after_swap);
        }
        if (status == JITOP_OK && d[i].err_status != JITOP_OK) {
            status = d[i].err_status;
            jitop__reload_report timing = {.ms = d[i].err_ms, .wait_ms = -1,
                                           .stopped = d[i].stopped};
            deliver(w, d[i].e, &status, d[i].err_msg, NULL, &timing);
        }
        if (status != JITOP_OK && first == JITOP_OK) {
            first = status;
            first_msg = jitop__strdup(d[i].err_msg ? d[i].err_msg : jitop_errmsg(NULL));
        }
    }
    pthread_mutex_lock(&w->lock);
    entry *dead = NULL;
    for (size_t i = 0; i < k; i++)
        release_into(w, d[i].e, &dead);
    pthread_mutex_unlock(&w->lock);
    free_dead(dead);
    for (size_t i = 0; i < k; i++)
        free(d[i].err_msg);
    free(d);
    /* Unloading the old images may block (it waits for queued work): the
     * watch thread does it, not the application's thread. */
    if (reap)
        jitop__watcher_wake(w->watcher);
    if (swapped)
        *swapped = nswapped;
    int rc = first;
    if (first != JITOP_OK)
        rc = jitop__fail(first, "%s", first_msg ? first_msg : jitop_strerror(first));
    free(first_msg);
    return rc;
}

void jitop__watch_on_batch(jitop__watch *w, void (*fn)(void *user), void *user)
{
    pthread_mutex_lock(&w->lock);
    w->batch_fn = fn;
    w->batch_user = user;
    pthread_mutex_unlock(&w->lock);
}

void jitop__watch_get_stats(jitop__watch *w, jitop__watch_stats *out)
{
    pthread_mutex_lock(&w->lock);
    *out = w->stats;
    pthread_mutex_unlock(&w->lock);
}

static int wait_quiescent(jitop__watch *w, int timeout_ms, bool pending_ok)
{
    double deadline = jitop__now_ms() + timeout_ms;
    for (;;) {
        pthread_mutex_lock(&w->lock);
        bool busy = false;
        for (entry *e = w->entries; e && !busy; e = e->next)
            busy = e->busy > 0;
        pthread_mutex_unlock(&w->lock);
        if (!busy && (pending_ok ? jitop__watcher_drained(w->watcher)
                                 : jitop__watcher_idle(w->watcher)))
            return JITOP_OK;
        if (jitop__now_ms() > deadline)
            return jitop__fail(JITOP_EIO, "watch: still busy after %d ms", timeout_ms);
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
}

int jitop__watch_wait_idle(jitop__watch *w, int timeout_ms)
{
    return wait_quiescent(w, timeout_ms, false);
}

int jitop__watch_wait_drained(jitop__watch *w, int timeout_ms)
{
    return wait_quiescent(w, timeout_ms, true);
}

/* ---------------------------------------------------- a loaded module */

typedef struct module_target {
    jitop_module *m;
    jitop__watch *w;
    uint64_t id;
    jitop_reload_fn cb;
    void *user;
} module_target;

static int module_files(void *self, jitop__strv *out)
{
    return jitop__module_files(((module_target *)self)->m, out);
}

static int module_prepare(void *self, void **next)
{
    jitop__pending *p = NULL;
    int rc = jitop__module_prepare(((module_target *)self)->m, &p);
    if (rc == JITOP_OK && !jitop__pending_changed(p)) {
        jitop__pending_free(p);
        p = NULL;
    }
    *next = p;
    return rc;
}

static int module_commit(void *self, void *next)
{
    return jitop__module_commit(((module_target *)self)->m, next);
}

static void module_discard(void *self, void *next)
{
    (void)self;
    jitop__pending_free(next);
}

static void module_report(void *self, const jitop__reload_report *r)
{
    module_target *t = self;
    if (r->stopped)
        jitop__log(t->m->ctx, "watch %s: %s", t->m->name, r->message);
    else if (r->status == JITOP_OK)
        jitop__log(t->m->ctx,
                   "watch %s: %s (generation %llu): waited %.1f ms for the files to settle, "
                   "rebuilt in %.1f ms, file list %.1f ms, swap %.2f ms",
                   t->m->name, r->swapped ? "reloaded" : "back to the code in place",
                   (unsigned long long)jitop_module_generation(t->m), r->wait_ms, r->ms,
                   r->files_ms, r->commit_ms);
    else
        jitop__log(t->m->ctx, "watch %s: rebuild failed in %.1f ms, the old code keeps running",
                   t->m->name, r->ms);
    if (t->cb)
        t->cb(t->user, t->m, r->status, r->message);
}

static bool module_after_swap(void *self)
{
    module_target *t = self;
    size_t left = 0;
    /* Waits for the context's queued work, then unloads old images no launch
     * holds. A failure leaves them loaded (they cost device memory only) and
     * is retried with the next swap. */
    int rc = jitop__module_reap(t->m, true, &left);
    if (rc != JITOP_OK)
        jitop__log(t->m->ctx, "watch %s: %s", t->m->name, jitop_errmsg(NULL));
    return rc == JITOP_OK && left > 0;
}

static void module_target_free(void *self)
{
    module_target *t = self;
    /* m->watch is guarded by the watch's lock; entries are freed outside
     * it, so compare-and-clear: a new jitop_watch may have set it already. */
    pthread_mutex_lock(&t->w->lock);
    if (t->m->watch == t)
        t->m->watch = NULL;
    pthread_mutex_unlock(&t->w->lock);
    free(t);
}

static const jitop__target_ops module_ops = {
    .files = module_files,
    .prepare = module_prepare,
    .commit = module_commit,
    .discard = module_discard,
    .report = module_report,
    .after_swap = module_after_swap,
    .free = module_target_free,
};

void jitop__watch_ctx_destroy(jitop_ctx *ctx)
{
    jitop__watch *w = ctx->watch;
    ctx->watch = NULL;
    jitop__watch_destroy(w);
}

/* ctx->watch, started by the first jitop_watch of the context. */
static int ctx_watch(jitop_ctx *ctx, jitop__watch **out)
{
    int rc = JITOP_OK;
    pthread_mutex_lock(&ctx->lock);
    if (!ctx->watch) {
        jitop__watch *w = NULL;
        rc = jitop__watch_create(&w);
        if (rc == JITOP_OK)
            rc = jitop__ctx_on_destroy(ctx, jitop__watch_ctx_destroy);
        if (rc == JITOP_OK)
            __atomic_store_n(&ctx->watch, w, __ATOMIC_RELEASE); /* jitop_poll reads it unlocked */
        else
            jitop__watch_destroy(w);
    }
    *out = ctx->watch;
    pthread_mutex_unlock(&ctx->lock);
    return rc;
}

int jitop_watch(jitop_module *m, jitop_reload_mode mode, jitop_reload_fn cb, void *user)
{
    jitop__watch *w = NULL;
    if (!m)
        return jitop__fail(JITOP_EINVAL, "jitop_watch: m is NULL");
    if (mode != JITOP_RELOAD_AUTO && mode != JITOP_RELOAD_POLL)
        return jitop__fail(JITOP_EINVAL, "jitop_watch %s: unknown mode %d", m->name, (int)mode);
    int rc = ctx_watch(m->ctx, &w);
    if (rc != JITOP_OK)
        return jitop__fail_prefix(rc, "jitop_watch %s", m->name);
    /* Watching again replaces the mode and callback. */
    rc = jitop_unwatch(m);
    if (rc != JITOP_OK)
        return rc;
    module_target *t = calloc(1, sizeof *t);
    if (!t)
        return jitop__fail(JITOP_ENOMEM, "jitop_watch %s: out of memory", m->name);
    *t = (module_target){.m = m, .w = w, .cb = cb, .user = user};
    /* Published before the first check can report through it. */
    pthread_mutex_lock(&w->lock);
    m->watch = t;
    pthread_mutex_unlock(&w->lock);
    rc = jitop__watch_add(w, mode, &module_ops, t, &t->id);
    if (rc != JITOP_OK)
        return jitop__fail_prefix(rc, "jitop_watch %s", m->name);
    return JITOP_OK;
}

int jitop_unwatch(jitop_module *m)
{
    if (!m)
        return jitop__fail(JITOP_EINVAL, "jitop_unwatch: m is NULL");
    jitop__watch *w = __atomic_load_n(&m->ctx->watch, __ATOMIC_ACQUIRE);
    if (!w)
        return JITOP_OK;
    pthread_mutex_lock(&w->lock);
    module_target *t = m->watch;
    uint64_t id = t ? t->id : 0;
    pthread_mutex_unlock(&w->lock);
    if (t)
        jitop__watch_remove(w, id);
    return JITOP_OK;
}

int jitop_poll(jitop_ctx *ctx, int *swapped)
{
    if (swapped)
        *swapped = 0;
    if (!ctx)
        return jitop__fail(JITOP_EINVAL, "jitop_poll: ctx is NULL");
    jitop__watch *w = __atomic_load_n(&ctx->watch, __ATOMIC_ACQUIRE);
    return w ? jitop__watch_poll(w, swapped) : JITOP_OK;
}

/* ------------------------------------------- one unit built into the cache */

typedef struct unit_target {
    jitop__unit unit;
    jitop__built_state st;
} unit_target;

static int unit_files(void *self, jitop__strv *out)
{
    unit_target *t = self;
    return jitop__built_state_files(&t->st, out);
}

static void unit_set_files(unit_target *t, const jitop__deps *d)
{
    jitop__strv files = {0};
    int rc = jitop__strv_push(&files, t->unit.source_path);
    for (size_t i = 0; rc == JITOP_OK && i < d->n; i++)
        if (strcmp(d->v[i].path, t->unit.source_path) != 0)
            rc = jitop__strv_push(&files, d->v[i].path);
    if (rc == JITOP_OK)
        jitop__built_state_set_files(&t->st, &files);
    jitop__strv_free(&files); /* on ENOMEM: keep watching the earlier list */
}

static int unit_prepare(void *self, void **next)
{
    unit_target *t = self;
    *next = NULL;
    jitop__built *b = calloc(1, sizeof *b);
    if (!b)
        return jitop__fail(JITOP_ENOMEM, "watch %s: out of memory", t->unit.source_path);
    int rc = jitop__build_unit(t->st.ctx, &t->unit, b);
    if (rc != JITOP_OK) {
        free(b);
        /* A failed build returns no file list, yet the save that broke it
         * may have added an #include: scan for it so that creating or
         * fixing that header is seen. The scan's own failure changes
         * nothing (the build's message stays the one reported). */
        char *saved = jitop__strdup(jitop_errmsg(NULL));
        jitop__deps d = {0};
        char *text = NULL;
        if (jitop__deps_scan(&t->unit, &d, &text) == JITOP_OK)
            unit_set_files(t, &d);
        jitop__deps_free(&d);
        free(text);
        if (saved)
            jitop__fail(rc, "%s", saved);
        free(saved);
        return rc;
    }
    unit_set_files(t, &b->deps);
    if (jitop__built_state_same(&t->st, b->key)) {
        jitop__built_free(b);
        free(b);
    } else {
        *next = b;
    }
    return JITOP_OK;
}

static int unit_commit(void *self, void *next)
{
    unit_target *t = self;
    jitop__built *b = next;
    jitop__built_state_commit(&t->st, b->key, b->cached);
    jitop__built_free(b);
    free(b);
    return JITOP_OK;
}

static void unit_discard(void *self, void *next)
{
    (void)self;
    jitop__built_free(next);
    free(next);
}

static void unit_report(void *self, const jitop__reload_report *r)
{
    unit_target *t = self;
    jitop__built_state_report(&t->st, r, t->unit.source_path, t->unit.arch);
}

static void unit_target_free(void *self)
{
    unit_target *t = self;
    jitop__unit_free(&t->unit);
    jitop__built_state_fini(&t->st);
    free(t);
}

static const jitop__target_ops unit_ops = {
    .files = unit_files,
    .prepare = unit_prepare,
    .commit = unit_commit,
    .discard = unit_discard,
    .report = unit_report,
    .free = unit_target_free,
};

int jitop__watch_unit(jitop__watch *w, jitop_ctx *ctx, jitop_reload_mode mode, const char *path,
                      const char *arch, const char *const *options, size_t noptions,
                      const char *const *names, size_t nnames, jitop__unit_report_fn fn,
                      void *user, uint64_t *id)
{
    int rc = JITOP_OK;
    if (!arch) {
        rc = jitop_ctx_arch(ctx, &arch);
        if (rc != JITOP_OK)
            return rc;
    }
    unit_target *t = calloc(1, sizeof *t);
    if (!t)
        return jitop__fail(JITOP_ENOMEM, "watch %s: out of memory", path);
    int err = jitop__built_state_init(&t->st, ctx, fn, user);
    if (err) {
        free(t);
        return jitop__fail(JITOP_ENOMEM, "watch %s: pthread_mutex_init: %s", path, strerror(err));
    }
    rc = jitop__unit_init(&t->unit, path, NULL, options, noptions, names, nnames, arch);
    if (rc == JITOP_OK)
        rc = jitop__strv_push(&t->st.files, t->unit.source_path);
    if (rc != JITOP_OK) {
        unit_target_free(t);
        return rc;
    }
    return jitop__watch_add(w, mode, &unit_ops, t, id);
}
