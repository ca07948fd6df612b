/* Which watched files changed: inotify on their directories, events
 * filtered by name and coalesced until the files are quiet (see watch.h). */
#include "watch/watch.h"

#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/inotify.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

/* Everything that can replace, rewrite or remove a file in place or by a
 * rename, and the directory itself going away. IN_MODIFY and IN_CREATE
 * mark a write in progress (its IN_CLOSE_WRITE ends it). Opens and reads
 * are left out: the rebuild itself reads every file. */
#define WATCH_MASK                                                                            \
    (IN_CLOSE_WRITE | IN_MOVED_TO | IN_MOVED_FROM | IN_CREATE | IN_DELETE | IN_ATTRIB |       \
     IN_MODIFY | IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR | IN_EXCL_UNLINK)

typedef struct wdir {
    int wd;       /* -1 once the kernel dropped the watch (directory gone) */
    char *path;
    size_t refs;  /* files watched in it */
} wdir;

typedef struct wfile {
    uint64_t tag;
    wdir *dir;
    char *name;   /* the last path component */
    bool dirty;   /* changed since the last report */
    bool writing; /* IN_MODIFY/IN_CREATE seen, IN_CLOSE_WRITE not yet */
    bool missing; /* deleted or renamed away, not back yet */
} wfile;

struct jitop__watcher {
    pthread_mutex_t lock;
    int ifd;      /* inotify, non-blocking */
    int wake_fd;  /* eventfd: interrupts the waiter's poll */
    wdir **dirs;
    size_t ndirs, capdirs;
    wfile *files;
    size_t nfiles, capfiles;
    double first_ms, last_ms; /* first and latest event since the last report */
    double batch_first_ms;    /* first_ms of the batch the last CHANGED wait returned */
    int quiet_ms, max_delay_ms;
    bool waiting, woken, stopped;
    int injected;             /* jitop__watcher_inject_failure's status; 0: none */
};

int jitop__watcher_open(jitop__watcher **out)
{
    int rc = JITOP_OK;
    *out = NULL;
    jitop__watcher *w = calloc(1, sizeof *w);
    if (!w)
        return jitop__fail(JITOP_ENOMEM, "watch: out of memory");
    w->ifd = w->wake_fd = -1;
    w->quiet_ms = JITOP__WATCH_QUIET_MS;
    w->max_delay_ms = JITOP__WATCH_MAX_DELAY_MS;
    int err = pthread_mutex_init(&w->lock, NULL);
    if (err) {
        free(w);
        return jitop__fail(JITOP_ENOMEM, "watch: pthread_mutex_init: %s", strerror(err));
    }
    w->ifd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    if (w->ifd < 0) {
        rc = jitop__fail(JITOP_EIO, "watch: inotify_init1: %s (see fs.inotify.max_user_instances)",
                         strerror(errno));
        goto out;
    }
    w->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (w->wake_fd < 0) {
        rc = jitop__fail(JITOP_EIO, "watch: eventfd: %s", strerror(errno));
        goto out;
    }
    *out = w;
out:
    if (rc != JITOP_OK)
        jitop__watcher_close(w);
    return rc;
}

static void dir_unref(jitop__watcher *w, wdir *d)
{
    if (--d->refs > 0)
        return;
    /* EINVAL here means the kernel dropped the watch already: nothing to undo. */
    if (d->wd >= 0)
        (void)inotify_rm_watch(w->ifd, d->wd);
    for (size_t i = 0; i < w->ndirs; i++) {
        if (w->dirs[i] == d) {
            w->dirs[i] = w->dirs[--w->ndirs];
            break;
        }
    }
    free(d->path);
    free(d);
}

void jitop__watcher_close(jitop__watcher *w)
{
    if (!w)
        return;
    for (size_t i = 0; i < w->nfiles; i++)
        free(w->files[i].name);
    for (size_t i = 0; i < w->ndirs; i++) {
        free(w->dirs[i]->path);
        free(w->dirs[i]);
    }
    free(w->files);
    free(w->dirs);
    if (w->ifd >= 0)
        close(w->ifd); /* nothing to flush: a failure cannot lose data */
    if (w->wake_fd >= 0)
        close(w->wake_fd);
    pthread_mutex_destroy(&w->lock);
    free(w);
}

void jitop__watcher_tune(jitop__watcher *w, int quiet_ms, int max_delay_ms)
{
    pthread_mutex_lock(&w->lock);
    if (quiet_ms > 0)
        w->quiet_ms = quiet_ms;
    if (max_delay_ms > 0)
        w->max_delay_ms = max_delay_ms;
    pthread_mutex_unlock(&w->lock);
}

static void wake_fd_signal(jitop__watcher *w)
{
    uint64_t one = 1;
    /* Cannot fail short of a counter overflow (2^64 wakes); EAGAIN would
     * mean it is already readable, which is all a wake needs. */
    ssize_t n = write(w->wake_fd, &one, sizeof one);
    (void)n;
}

/* The watch on dir, shared with other files in it. Caller holds the lock. */
static int dir_ref(jitop__watcher *w, const char *path, wdir **out)
{
    int wd = inotify_add_watch(w->ifd, path, WATCH_MASK);
    if (wd < 0) {
        if (errno == ENOSPC)
            return jitop__fail(JITOP_EIO,
                               "watch: directory %s: inotify watch limit reached "
                               "(raise fs.inotify.max_user_watches)",
                               path);
        return jitop__fail(errno == ENOENT ? JITOP_ENOTFOUND : JITOP_EIO,
                           "watch: directory %s: inotify_add_watch: %s", path, strerror(errno));
    }
    /* The kernel gives the same wd for the same directory (any path to it). */
    for (size_t i = 0; i < w->ndirs; i++) {
        if (w->dirs[i]->wd == wd) {
            w->dirs[i]->refs++;
            *out = w->dirs[i];
            return JITOP_OK;
        }
    }
    wdir *d = calloc(1, sizeof *d);
    char *p = jitop__strdup(path);
    if (w->ndirs == w->capdirs) {
        size_t cap = w->capdirs ? 2 * w->capdirs : 8;
        wdir **v = realloc(w->dirs, cap * sizeof *v);
        if (v) {
            w->dirs = v;
            w->capdirs = cap;
        }
    }
    if (!d || !p || w->ndirs == w->capdirs) {
        free(d);
        free(p);
        (void)inotify_rm_watch(w->ifd, wd);
        return jitop__fail(JITOP_ENOMEM, "watch: out of memory");
    }
    d->wd = wd;
    d->path = p;
    d->refs = 1;
    w->dirs[w->ndirs++] = d;
    *out = d;
    return JITOP_OK;
}

static void files_drop_tag(jitop__watcher *w, uint64_t tag)
{
    size_t k = 0;
    for (size_t i = 0; i < w->nfiles; i++) {
        if (w->files[i].tag == tag) {
            dir_unref(w, w->files[i].dir);
            free(w->files[i].name);
        } else {
            w->files[k++] = w->files[i];
        }
    }
    w->nfiles = k;
}

/* Under w->lock: fresh[0..*nfresh) gets a file record of tag for each of
 * paths (once each), holding a reference to its directory's watch. On
 * failure the records made so far stay in fresh for the caller to drop. */
static int set_resolve(jitop__watcher *w, uint64_t tag, const char *const *paths, size_t n,
                       wfile *fresh, size_t *nfresh_out)
{
    int rc = JITOP_OK;
    size_t nfresh = 0;
    for (size_t i = 0; i < n; i++) {
        char *abs = jitop__abspath(paths[i]);
        if (!abs) {
            rc = jitop__fail_abspath(paths[i]);
            goto out;
        }
        char *slash = strrchr(abs, '/');
        char *name = jitop__strdup(slash + 1);
        if (slash == abs)
            slash[1] = '\0'; /* a file in "/" */
        else
            *slash = '\0';
        bool dup = false;
        for (size_t j = 0; name && j < nfresh && !dup; j++)
            dup = strcmp(fresh[j].name, name) == 0 && strcmp(fresh[j].dir->path, abs) == 0;
        if (!name || dup) {
            free(name);
            free(abs);
            if (!dup) {
                rc = jitop__fail(JITOP_ENOMEM, "watch: out of memory");
                goto out;
            }
            continue;
        }
        wdir *d = NULL;
        rc = dir_ref(w, abs, &d);
        free(abs);
        if (rc != JITOP_OK) {
            jitop__fail_prefix(rc, "watch: %s", paths[i]);
            free(name);
            goto out;
        }
        fresh[nfresh].tag = tag;
        fresh[nfresh].dir = d;
        fresh[nfresh].name = name;
        nfresh++;
    }
out:
    *nfresh_out = nfresh;
    return rc;
}

int jitop__watcher_set(jitop__watcher *w, uint64_t tag, const char *const *paths, size_t n)
{
    int rc = JITOP_OK;
    wfile *fresh = calloc(n ? n : 1, sizeof *fresh);
    size_t nfresh = 0;
    if (!fresh)
        return jitop__fail(JITOP_ENOMEM, "watch: out of memory");
    pthread_mutex_lock(&w->lock);
    rc = set_resolve(w, tag, paths, n, fresh, &nfresh);
    if (rc != JITOP_OK)
        goto out;
    if (w->nfiles + nfresh > w->capfiles) {
        size_t cap = w->capfiles ? w->capfiles : 16;
        while (cap < w->nfiles + nfresh)
            cap *= 2;
        wfile *v = realloc(w->files, cap * sizeof *v);
        if (!v) {
            rc = jitop__fail(JITOP_ENOMEM, "watch: out of memory");
            goto out;
        }
        w->files = v;
        w->capfiles = cap;
    }
    /* A change already seen on a file the tag keeps stays pending. */
    for (size_t j = 0; j < nfresh; j++) {
        for (size_t i = 0; i < w->nfiles; i++) {
            wfile *f = &w->files[i];
            if (f->tag == tag && strcmp(f->name, fresh[j].name) == 0 &&
                strcmp(f->dir->path, fresh[j].dir->path) == 0) {
                fresh[j].dirty = f->dirty;
                fresh[j].writing = f->writing;
                fresh[j].missing = f->missing;
            }
        }
    }
    files_drop_tag(w, tag);
    memcpy(w->files + w->nfiles, fresh, nfresh * sizeof *fresh);
    w->nfiles += nfresh;
    nfresh = 0;
out:
    for (size_t j = 0; j < nfresh; j++) {
        dir_unref(w, fresh[j].dir);
        free(fresh[j].name);
    }
    pthread_mutex_unlock(&w->lock);
    free(fresh);
    return rc;
}

void jitop__watcher_forget(jitop__watcher *w, uint64_t tag)
{
    pthread_mutex_lock(&w->lock);
    files_drop_tag(w, tag);
    pthread_mutex_unlock(&w->lock);
}

static void note_event(jitop__watcher *w, double now)
{
    bool pending = false;
    for (size_t i = 0; i < w->nfiles && !pending; i++)
        pending = w->files[i].dirty;
    if (!pending)
        w->first_ms = now;
    w->last_ms = now;
}

void jitop__watcher_touch(jitop__watcher *w, uint64_t tag)
{
    pthread_mutex_lock(&w->lock);
    double now = jitop__now_ms();
    note_event(w, now);
    w->last_ms = now - w->quiet_ms; /* nothing to wait for: no write happened */
    for (size_t i = 0; i < w->nfiles; i++)
        if (w->files[i].tag == tag)
            w->files[i].dirty = true;
    pthread_mutex_unlock(&w->lock);
    wake_fd_signal(w);
}

void jitop__watcher_wake(jitop__watcher *w)
{
    pthread_mutex_lock(&w->lock);
    w->woken = true;
    pthread_mutex_unlock(&w->lock);
    wake_fd_signal(w);
}

void jitop__watcher_stop(jitop__watcher *w)
{
    pthread_mutex_lock(&w->lock);
    w->stopped = true;
    pthread_mutex_unlock(&w->lock);
    wake_fd_signal(w);
}

void jitop__watcher_inject_failure(jitop__watcher *w, int status)
{
    pthread_mutex_lock(&w->lock);
    w->injected = status;
    pthread_mutex_unlock(&w->lock);
    wake_fd_signal(w);
}

static void mark_dir(jitop__watcher *w, const wdir *d)
{
    for (size_t i = 0; i < w->nfiles; i++)
        if (w->files[i].dir == d)
            w->files[i].dirty = true;
}

static void handle_event(jitop__watcher *w, const struct inotify_event *ev, double now)
{
    if (ev->mask & IN_Q_OVERFLOW) {
        /* Events were lost: anything may have changed. */
        note_event(w, now);
        for (size_t i = 0; i < w->nfiles; i++)
            w->files[i].dirty = true;
        return;
    }
    wdir *d = NULL;
    for (size_t i = 0; i < w->ndirs && !d; i++)
        if (w->dirs[i]->wd == ev->wd)
            d = w->dirs[i];
    if (!d)
        return; /* a watch dropped since, or its IN_IGNORED */
    if (ev->mask & (IN_IGNORED | IN_DELETE_SELF | IN_MOVE_SELF)) {
        /* The directory went away: the rebuild will say what is missing,
         * and the file list set after it watches the new directory. */
        note_event(w, now);
        mark_dir(w, d);
        if (ev->mask & IN_IGNORED)
            d->wd = -1;
        return;
    }
    if (ev->len == 0)
        return;
    for (size_t i = 0; i < w->nfiles; i++) {
        wfile *f = &w->files[i];
        if (f->dir != d || strcmp(f->name, ev->name) != 0)
            continue;
        note_event(w, now);
        f->dirty = true;
        if (ev->mask & (IN_MODIFY | IN_CREATE)) {
            f->writing = true;
            f->missing = false;
        }
        if (ev->mask & (IN_CLOSE_WRITE | IN_MOVED_TO)) {
            f->writing = false;
            f->missing = false;
        }
        if (ev->mask & (IN_DELETE | IN_MOVED_FROM)) {
            f->writing = false;
            f->missing = true;
        }
    }
}

/* Reads every queued event. Caller holds the lock. */
static int drain_events(jitop__watcher *w)
{
    char buf[8192] __attribute__((aligned(__alignof__(struct inotify_event))));
    for (;;) {
        ssize_t n = read(w->ifd, buf, sizeof buf);
        if (n < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                return JITOP_OK;
            if (errno == EINTR)
                continue;
            return jitop__fail(JITOP_EIO, "watch: reading inotify events: %s", strerror(errno));
        }
        double now = jitop__now_ms();
        for (ssize_t off = 0; off < n;) {
            const struct inotify_event *ev = (const struct inotify_event *)(buf + off);
            handle_event(w, ev, now);
            off += (ssize_t)(sizeof *ev + ev->len);
        }
    }
}

/* The tags of every dirty file, each once; clears the files' state. */
static int collect(jitop__watcher *w, uint64_t **tags, size_t *ntags)
{
    uint64_t *v = malloc((w->nfiles ? w->nfiles : 1) * sizeof *v);
    size_t n = 0;
    if (!v)
        return jitop__fail(JITOP_ENOMEM, "watch: out of memory");
    for (size_t i = 0; i < w->nfiles; i++) {
        wfile *f = &w->files[i];
        if (!f->dirty)
            continue;
        bool seen = false;
        for (size_t j = 0; j < n && !seen; j++)
            seen = v[j] == f->tag;
        if (!seen)
            v[n++] = f->tag;
        f->dirty = f->writing = f->missing = false;
    }
    *tags = v;
    *ntags = n;
    return JITOP_OK;
}

double jitop__watcher_batch_first_ms(jitop__watcher *w)
{
    pthread_mutex_lock(&w->lock);
    double t = w->batch_first_ms;
    pthread_mutex_unlock(&w->lock);
    return t;
}

/* Waits up to wait_ms (-1: no limit) for inotify events or a wake-up, with
 * w->lock released meanwhile (held on entry and on return), then reads the
 * events that came. Not JITOP_OK: the watcher cannot go on. */
static int poll_once(jitop__watcher *w, double wait_ms)
{
    struct pollfd fds[2] = {{.fd = w->ifd, .events = POLLIN}, {.fd = w->wake_fd, .events = POLLIN}};
    struct timespec ts = {0, 0}, *tsp = NULL;
    if (wait_ms >= 0) {
        ts.tv_sec = (time_t)(wait_ms / 1000);
        ts.tv_nsec = (long)((wait_ms - ts.tv_sec * 1000.0) * 1e6);
        tsp = &ts;
    }
    w->waiting = true;
    pthread_mutex_unlock(&w->lock);
    int pr = ppoll(fds, 2, tsp, NULL);
    int perr = errno;
    pthread_mutex_lock(&w->lock);
    w->waiting = false;
    if (pr < 0 && perr != EINTR)
        return jitop__fail(JITOP_EIO, "watch: poll: %s", strerror(perr));
    if (pr > 0 && (fds[1].revents & POLLIN)) {
        uint64_t count;
        ssize_t n = read(w->wake_fd, &count, sizeof count);
        (void)n; /* EAGAIN: another reader drained it; the flags say why */
    }
    if (pr > 0 && (fds[0].revents & POLLIN))
        return drain_events(w);
    return JITOP_OK;
}

int jitop__watcher_wait(jitop__watcher *w, int timeout_ms, jitop__wait_result *result,
                        uint64_t **tags, size_t *ntags)
{
    int rc = JITOP_OK;
    *tags = NULL;
    *ntags = 0;
    double deadline = timeout_ms >= 0 ? jitop__now_ms() + timeout_ms : -1;
    pthread_mutex_lock(&w->lock);
    for (;;) {
        if (w->stopped) {
            *result = JITOP__WAIT_STOPPED;
            break;
        }
        if (w->injected != JITOP_OK) {
            rc = jitop__fail(w->injected, "watch: reading inotify events: %s (injected by a test)",
                             jitop_strerror(w->injected));
            w->injected = JITOP_OK;
            *result = JITOP__WAIT_STOPPED;
            break;
        }
        if (w->woken) {
            w->woken = false;
            *result = JITOP__WAIT_WOKEN;
            break;
        }
        double now = jitop__now_ms(), wait_ms = -1;
        bool dirty = false, unsettled = false;
        for (size_t i = 0; i < w->nfiles; i++) {
            dirty |= w->files[i].dirty;
            unsettled |= w->files[i].dirty && (w->files[i].writing || w->files[i].missing);
        }
        if (dirty) {
            double cap_left = w->first_ms + w->max_delay_ms - now;
            double quiet_left = w->last_ms + w->quiet_ms - now;
            if (cap_left <= 0 || (!unsettled && quiet_left <= 0)) {
                w->batch_first_ms = w->first_ms;
                rc = collect(w, tags, ntags);
                *result = rc == JITOP_OK ? JITOP__WAIT_CHANGED : JITOP__WAIT_STOPPED;
                break;
            }
            wait_ms = unsettled ? cap_left : (quiet_left < cap_left ? quiet_left : cap_left);
        }
        if (deadline >= 0) {
            if (now >= deadline) {
                *result = JITOP__WAIT_WOKEN;
                break;
            }
            if (wait_ms < 0 || deadline - now < wait_ms)
                wait_ms = deadline - now;
        }
        rc = poll_once(w, wait_ms);
        if (rc != JITOP_OK) {
            *result = JITOP__WAIT_STOPPED;
            break;
        }
    }
    pthread_mutex_unlock(&w->lock);
    return rc;
}

static bool quiescent(jitop__watcher *w, bool pending_ok)
{
    pthread_mutex_lock(&w->lock);
    bool idle = w->waiting && !w->woken;
    for (size_t i = 0; i < w->nfiles && idle && !pending_ok; i++)
        idle = !w->files[i].dirty;
    int unread = 0;
    if (idle && ioctl(w->ifd, FIONREAD, &unread) == 0)
        idle = unread == 0;
    else
        idle = false;
    pthread_mutex_unlock(&w->lock);
    return idle;
}

bool jitop__watcher_idle(jitop__watcher *w)
{
    return quiescent(w, false);
}

bool jitop__watcher_drained(jitop__watcher *w)
{
    return quiescent(w, true);
}
