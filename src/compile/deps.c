/* A unit's dependency records: reading a file with its stat data and
 * content hash, the stat fast path, the check after a compile. The list
 * itself is made by resolve.c. */
#include "compile/compile.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

int64_t jitop__recent_window_ns = JITOP__RECENT_WINDOW_NS;

static int64_t mtime_ns_of(const struct stat *st)
{
    return (int64_t)st->st_mtim.tv_sec * 1000000000 + st->st_mtim.tv_nsec;
}

static int64_t ctime_ns_of(const struct stat *st)
{
    return (int64_t)st->st_ctim.tv_sec * 1000000000 + st->st_ctim.tv_nsec;
}

/* File times are wall-clock times, so this is the clock they are compared
 * with. */
static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

void jitop__dep_set_stat(jitop__dep *rec, const struct stat *st)
{
    rec->mtime_ns = mtime_ns_of(st);
    rec->ctime_ns = ctime_ns_of(st);
    rec->ino = (uint64_t)st->st_ino;
    rec->dev = (uint64_t)st->st_dev;
    int64_t horizon = now_ns() - jitop__recent_window_ns;
    rec->recent = rec->mtime_ns >= horizon || rec->ctime_ns >= horizon;
}

/* Reads a file and records its stat data. The stat is taken on the open
 * descriptor BEFORE reading: if the file changes while it is read, the
 * recorded stat is the older one and the next fast-path check sees a
 * difference and hashes again. The other order could record a new stat
 * beside old contents and trust them forever. The clock is read after the
 * stat, so that "recent" is judged against a time no earlier than the
 * recording. */
int jitop__dep_read(const char *path, jitop__dep *dep, char **data, size_t *len)
{
    int status = JITOP_OK;
    char *buf = NULL;
    size_t cap = 0, n = 0;
    int fd = -1;
    struct stat st;
    status = jitop__open_regular(path, &fd, &st);
    if (status != JITOP_OK)
        return status;
    cap = (size_t)st.st_size + 1;
    buf = malloc(cap);
    if (!buf) {
        status = jitop__fail(JITOP_ENOMEM, "%s: out of memory", path);
        goto out;
    }
    for (;;) {
        if (n + 1 >= cap) { /* the file grew while it was read */
            cap = cap * 2;
            char *p = realloc(buf, cap);
            if (!p) {
                status = jitop__fail(JITOP_ENOMEM, "%s: out of memory", path);
                goto out;
            }
            buf = p;
        }
        size_t got = 0;
        int failed = jitop__read_upto(fd, buf + n, cap - 1 - n, &got);
        n += got;
        if (failed) {
            status = jitop__fail(JITOP_EIO, "%s: read: %s", path, strerror(errno));
            goto out;
        }
        if (n + 1 < cap)
            break; /* the end of the file */
    }
    buf[n] = '\0';
    dep->size = (int64_t)st.st_size;
    jitop__dep_set_stat(dep, &st);
    dep->hash = XXH3_128bits(buf, n);
    *data = buf;
    *len = n;
    buf = NULL;
out:
    free(buf);
    if (close(fd) != 0 && status == JITOP_OK)
        status = jitop__fail(JITOP_EIO, "%s: close: %s", path, strerror(errno));
    return status;
}

const jitop__dep *jitop__deps_find(const jitop__deps *d, const char *path)
{
    for (size_t i = 0; i < d->n; i++)
        if (strcmp(d->v[i].path, path) == 0)
            return &d->v[i];
    return NULL;
}

/* How a file compares with its record, from the stat data alone. */
enum stat_verdict {
    STAT_SAME,   /* the record vouches for the contents */
    STAT_RECENT, /* nothing differs, but the record is recent: only a hash can tell */
    STAT_GONE,   /* stat failed (errno kept in *err) */
    STAT_SIZE,
    STAT_INODE,
    STAT_MTIME,
    STAT_CTIME,
};

static enum stat_verdict compare_stat(const jitop__dep *dep, struct stat *st, int *err)
{
    if (stat(dep->path, st) != 0) {
        *err = errno;
        return STAT_GONE;
    }
    if ((int64_t)st->st_size != dep->size)
        return STAT_SIZE;
    if ((uint64_t)st->st_ino != dep->ino || (uint64_t)st->st_dev != dep->dev)
        return STAT_INODE;
    if (dep->mtime_ns != JITOP__MTIME_UNKNOWN && mtime_ns_of(st) != dep->mtime_ns)
        return STAT_MTIME;
    if (ctime_ns_of(st) != dep->ctime_ns)
        return STAT_CTIME;
    return dep->recent ? STAT_RECENT : STAT_SAME;
}

int jitop__deps_fresh(const jitop__deps *d, bool *fresh, char **why)
{
    *fresh = false;
    if (why)
        *why = NULL;
    char *reason = NULL;
    if (d->uncacheable && !(reason = jitop__strdup(d->note ? d->note : "not cacheable")))
        return jitop__fail(JITOP_ENOMEM, "out of memory");
    for (size_t i = 0; i < d->n && !reason; i++) {
        const jitop__dep *dep = &d->v[i];
        struct stat st;
        int err = 0;
        switch (compare_stat(dep, &st, &err)) {
        case STAT_SAME:
            continue;
        case STAT_GONE:
            reason = err == ENOENT ? jitop__sprintf("%s: removed", dep->path)
                                   : jitop__sprintf("%s: stat: %s", dep->path, strerror(err));
            break;
        case STAT_SIZE:
            reason = jitop__sprintf("%s: size changed (%lld -> %lld bytes)", dep->path,
                                    (long long)dep->size, (long long)st.st_size);
            break;
        case STAT_INODE:
            reason = jitop__sprintf("%s: replaced by another file (inode changed)", dep->path);
            break;
        case STAT_MTIME:
            reason = jitop__sprintf("%s: modification time changed", dep->path);
            break;
        case STAT_CTIME:
            reason = jitop__sprintf("%s: status change time changed (written, or its times, "
                                    "mode or links changed)",
                                    dep->path);
            break;
        case STAT_RECENT:
            reason = jitop__sprintf("%s: saved within 2 s of when it was last scanned "
                                    "(timestamp granularity), so its contents are checked",
                                    dep->path);
            break;
        }
        if (!reason)
            return jitop__fail(JITOP_ENOMEM, "out of memory");
    }
    for (size_t i = 0; i < d->ndirs && !reason; i++) {
        const jitop__dep *dir = &d->dirs[i];
        struct stat st;
        if (stat(dir->path, &st) == 0 && (uint64_t)st.st_ino == dir->ino &&
            (uint64_t)st.st_dev == dir->dev && !dir->recent && mtime_ns_of(&st) == dir->mtime_ns &&
            ctime_ns_of(&st) == dir->ctime_ns)
            continue;
        reason = dir->recent
                     ? jitop__sprintf("%s: changed within 2 s of when an include name was looked "
                                      "for there (timestamp granularity), so the names are "
                                      "looked for again",
                                      dir->path)
                     : jitop__sprintf("%s: a file was added, removed or renamed where an include "
                                      "name was looked for, so the names are looked for again",
                                      dir->path);
        if (!reason)
            return jitop__fail(JITOP_ENOMEM, "out of memory");
    }
    *fresh = reason == NULL;
    if (why)
        *why = reason;
    else
        free(reason);
    return JITOP_OK;
}

int jitop__deps_changed(const jitop__deps *d, char **changed)
{
    *changed = NULL;
    for (size_t i = 0; i < d->n; i++) {
        const jitop__dep *dep = &d->v[i];
        struct stat st;
        int err = 0;
        enum stat_verdict v = compare_stat(dep, &st, &err);
        bool differs = v != STAT_SAME;
        if (v == STAT_RECENT) {
            char *data = NULL;
            size_t len = 0;
            if (jitop__read_file(dep->path, &data, &len) != JITOP_OK) {
                jitop__clear_error(); /* unreadable now: changed, and the rebuild says why */
            } else {
                differs = !XXH128_isEqual(XXH3_128bits(data, len), dep->hash);
            }
            free(data);
        }
        if (differs) {
            *changed = jitop__strdup(dep->path);
            return *changed ? JITOP_OK : jitop__fail(JITOP_ENOMEM, "out of memory");
        }
    }
    for (size_t i = 0; i < d->absent.n; i++) {
        struct stat st;
        if (stat(d->absent.v[i], &st) == 0 && !S_ISDIR(st.st_mode)) {
            *changed = jitop__strdup(d->absent.v[i]);
            return *changed ? JITOP_OK : jitop__fail(JITOP_ENOMEM, "out of memory");
        }
    }
    return JITOP_OK;
}

void jitop__deps_free(jitop__deps *d)
{
    if (!d)
        return;
    for (size_t i = 0; i < d->n; i++)
        free(d->v[i].path);
    for (size_t i = 0; i < d->ndirs; i++)
        free(d->dirs[i].path);
    free(d->v);
    free(d->dirs);
    free(d->note);
    jitop__strv_free(&d->absent);
    memset(d, 0, sizeof *d);
}

/* Copies n records into a new array *to (paths duplicated); *nto counts
 * the ones done, so that a failure frees what was made. */
static int copy_records(const jitop__dep *from, size_t n, jitop__dep **to, size_t *nto)
{
    if (n == 0)
        return JITOP_OK;
    if (!(*to = calloc(n, sizeof **to)))
        return jitop__fail(JITOP_ENOMEM, "out of memory");
    for (size_t i = 0; i < n; i++, ++*nto) {
        (*to)[i] = from[i];
        if (!((*to)[i].path = jitop__strdup(from[i].path)))
            return jitop__fail(JITOP_ENOMEM, "out of memory");
    }
    return JITOP_OK;
}

int jitop__deps_copy(const jitop__deps *from, jitop__deps *to)
{
    memset(to, 0, sizeof *to);
    to->uncacheable = from->uncacheable;
    int status = JITOP_OK;
    if (from->note && !(to->note = jitop__strdup(from->note)))
        status = jitop__fail(JITOP_ENOMEM, "out of memory");
    if (status == JITOP_OK)
        status = copy_records(from->v, from->n, &to->v, &to->n);
    if (status == JITOP_OK)
        status = copy_records(from->dirs, from->ndirs, &to->dirs, &to->ndirs);
    if (status != JITOP_OK)
        jitop__deps_free(to);
    return status;
}
