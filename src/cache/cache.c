/* The cache object: opening the root (read-only when it cannot be
 * written), writing an entry's bytes (then evicting under the size cap)
 * and per-key locks. The room's other files are listed in cache_private.h. */
#include "cache/cache_private.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

int jitop__cache_open(const char *root, int64_t max_size, int verbose, jitop__cache **out)
{
    int status = JITOP_OK, err = 0;
    *out = NULL;
    jitop__cache *c = calloc(1, sizeof *c);
    if (!c)
        return jitop__fail(JITOP_ENOMEM, "out of memory");
    if (pthread_mutex_init(&c->lock, NULL) != 0) {
        free(c);
        return jitop__fail(JITOP_ENOMEM, "cache: cannot create a mutex");
    }
    c->max_size = max_size;
    c->verbose = verbose;
    const char *fs = getenv("JITOP_CACHE_FSYNC");
    c->durable = fs != NULL && *fs != '\0' && strcmp(fs, "0") != 0;
    c->root = jitop__strdup(root);
    c->vdir = jitop__sprintf("%s/v%d", root, JITOP__FORMAT_VERSION);
    if (!c->root || !c->vdir) {
        status = jitop__fail(JITOP_ENOMEM, "out of memory");
        goto out;
    }
    status = jitop__cache_make_root(c, &err);
    if (status != JITOP_OK) {
        if (status == JITOP_EIO && jitop__cache_unwritable_errno(err)) {
            /* Nothing of it can be read either: memory only. */
            jitop__cache_go_readonly(c, root, err);
            status = JITOP_OK;
        }
        goto out;
    }
    jitop__cache_tag_root(c);
    const char *subdirs[] = {"", "/locks", "/manifests"};
    for (size_t i = 0; i < 3; i++) {
        char *dir = jitop__sprintf("%s%s", c->vdir, subdirs[i]);
        if (!dir) {
            status = jitop__fail(JITOP_ENOMEM, "out of memory");
            goto out;
        }
        status = jitop__cache_ensure_dir(c, dir, &err);
        free(dir);
        if (status == JITOP_EIO && jitop__cache_unwritable_errno(err)) {
            jitop__cache_go_readonly(c, c->vdir, err);
            status = JITOP_OK;
            break;
        }
        if (status != JITOP_OK)
            goto out;
    }
    /* The directories may exist on a read-only mount (a prewarmed cache in
     * an image): entries are read from there, new ones kept in memory. */
    if (!c->readonly && faccessat(AT_FDCWD, c->vdir, W_OK, AT_EACCESS) != 0) {
        if (!jitop__cache_unwritable_errno(errno)) {
            status = jitop__fail(JITOP_EIO, "cache: access %s: %s", c->vdir, strerror(errno));
            goto out;
        }
        jitop__cache_go_readonly(c, c->vdir, errno);
    }
out:
    if (status != JITOP_OK) {
        jitop__cache_free(c);
        return status;
    }
    *out = c;
    return JITOP_OK;
}

void jitop__cache_free(jitop__cache *c)
{
    if (!c)
        return;
    jitop__cache_mem_clear(c);
    pthread_mutex_destroy(&c->lock);
    free(c->ro_path);
    free(c->root);
    free(c->vdir);
    free(c);
}

const char *jitop__cache_root(const jitop__cache *c)
{
    return c ? c->root : NULL;
}


int jitop__cache_put_bytes(jitop__cache *c, const char key[33], struct jitop__wbuf *bp)
{
    struct jitop__wbuf b = *bp;
    char *dir = NULL;
    int err = 0, status = JITOP_OK;
    *bp = (struct jitop__wbuf){0};
    if (jitop__cache_is_readonly(c)) {
        jitop__cache_mem_put(c, key, false, &b);
        goto out;
    }
    dir = jitop__cache_entry_dir(c, key);
    if (!dir) {
        status = jitop__fail(JITOP_ENOMEM, "out of memory");
        goto out;
    }
    status = jitop__cache_write_atomic(c, dir, key, b.p, b.n, c->durable, &err);
    if (status == JITOP_EIO && jitop__cache_unwritable_errno(err)) {
        jitop__cache_go_readonly(c, dir, err);
        jitop__cache_mem_put(c, key, false, &b);
        status = JITOP_OK;
        goto out;
    }
    if (status != JITOP_OK)
        goto out;
    /* Eviction runs after writes only: they are rare (each follows a
     * compile), while hits must stay cheap. It walks the entry directories:
     * one stat per entry. A failure only leaves the cache over its cap. */
    if (c->max_size >= 0) {
        int64_t freed = 0;
        /* A cap below one entry evicts every entry right after its write:
         * nothing would be reused by the next process, and without a word
         * that looks like a cache that never hits. */
        pthread_mutex_lock(&c->lock);
        bool warn = (int64_t)b.n > c->max_size && !c->cap_warned;
        c->cap_warned = c->cap_warned || warn;
        pthread_mutex_unlock(&c->lock);
        if (warn)
            fprintf(stderr,
                    "jitop: warning: the cache cap (%lld bytes: JITOP_CACHE_MAX_SIZE or "
                    "cache_max_size) is smaller than the entry just written (%zu bytes, key %s): "
                    "each entry is evicted right after it is written and never reused; raise "
                    "the cap\n",
                    (long long)c->max_size, b.n, key);
        if (jitop__cache_evict(c, c->max_size, false, &freed) != JITOP_OK)
            jitop__cache_vlog(c, "cache: eviction failed: %s", jitop_errmsg(NULL));
        jitop__clear_error();
    }
out:
    free(b.p);
    free(dir);
    return status;
}

/* Once per cache: the locks that keep two processes from compiling the same
 * key cannot be taken here. */
static void warn_no_locks(jitop__cache *c, const char *path, int err)
{
    pthread_mutex_lock(&c->lock);
    bool warn = !c->lock_warned;
    c->lock_warned = true;
    pthread_mutex_unlock(&c->lock);
    if (warn)
        fprintf(stderr,
                "jitop: warning: cannot lock %s (%s): compiling without cache locks, so two "
                "processes may compile the same binary (the result stays correct)\n",
                path, strerror(err));
}

void jitop__cache_probe_locks(jitop__cache *c)
{
    if (jitop__cache_is_readonly(c))
        return;
    char *dir = jitop__sprintf("%s/locks", c->vdir);
    if (!dir)
        return; /* only the warning's timing is lost */
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
    if (fd >= 0) {
        int rc;
        while ((rc = flock(fd, LOCK_SH | LOCK_NB)) != 0 && errno == EINTR)
            ;
        if (rc != 0 && jitop__cache_no_locks_errno(errno))
            warn_no_locks(c, dir, errno);
        /* a lock taken is released by the close */
        if (close(fd) != 0)
            jitop__cache_vlog(c, "cache: close %s: %s", dir, strerror(errno));
    }
    free(dir);
}

/* Opens and locks path: 1 with *lfd locked; 0 to compile without a lock
 * (said why); -1 to open again (the name no longer is the file locked: gc
 * removed it, or clean moved the tree away). */
static int lock_once(jitop__cache *c, const char *path, int *lfd, int *status)
{
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0600);
    *lfd = -1;
    if (fd < 0) {
        if (errno == ENOENT)
            return -1;
        if (jitop__cache_unwritable_errno(errno) || errno == ELOOP || errno == EISDIR) {
            /* Without a lock two processes may compile the same key; the
             * atomic rename keeps the result correct. */
            jitop__cache_vlog(c, "cache: cannot create lock %s: %s; compiling without it", path,
                              strerror(errno));
        } else {
            *status = jitop__fail(JITOP_EIO, "cache: open lock %s: %s", path, strerror(errno));
        }
        return 0;
    }
    struct stat a, b;
    int rc = 0;
    if (fstat(fd, &a) != 0 || !S_ISREG(a.st_mode)) {
        jitop__cache_vlog(c, "cache: lock %s is not a regular file; compiling without it", path);
        goto out;
    }
    /* flock belongs to the open file description: it is released when the
     * process dies (kill -9 included), and two threads with their own open()
     * exclude each other too. */
    while (flock(fd, LOCK_EX) != 0) {
        if (errno == EINTR)
            continue;
        if (jitop__cache_no_locks_errno(errno))
            warn_no_locks(c, path, errno);
        else
            *status = jitop__fail(JITOP_EIO, "cache: flock %s: %s", path, strerror(errno));
        goto out;
    }
    /* gc unlinks an unheld lock file; one opened just before that is locked
     * by nobody else's name: look again. */
    if (stat(path, &b) != 0 || a.st_ino != b.st_ino || a.st_dev != b.st_dev) {
        rc = -1;
        goto out;
    }
    *lfd = fd;
    return 1;
out:
    if (close(fd) != 0)
        jitop__cache_vlog(c, "cache: close %s: %s", path, strerror(errno));
    return rc;
}

int jitop__cache_lock(jitop__cache *c, const char key[33], int *fd)
{
    *fd = -1;
    if (jitop__cache_is_readonly(c))
        return JITOP_OK; /* nothing shared on disk to protect */
    char *path = jitop__sprintf("%s/locks/%s.lock", c->vdir, key);
    char *dir = jitop__sprintf("%s/locks", c->vdir);
    int status = JITOP_OK, err = 0;
    if (!path || !dir) {
        status = jitop__fail(JITOP_ENOMEM, "out of memory");
        goto out;
    }
    for (int attempt = 0; status == JITOP_OK; attempt++) {
        if (lock_once(c, path, fd, &status) >= 0)
            break;
        if (attempt == JITOP__CACHE_RETRIES) {
            jitop__cache_vlog(c, "cache: lock %s kept vanishing; compiling without it", path);
            break;
        }
        /* The locks directory may be gone (jitop clean elsewhere). */
        status = jitop__cache_ensure_dir(c, dir, &err);
        if (status == JITOP_EIO && jitop__cache_unwritable_errno(err)) {
            jitop__cache_vlog(c, "cache: %s; compiling without a lock", jitop_errmsg(NULL));
            jitop__clear_error();
            status = JITOP_OK;
            break;
        }
    }
out:
    free(path);
    free(dir);
    return status;
}

void jitop__cache_unlock(int fd)
{
    /* Closing releases the flock even when close reports an error (the
     * descriptor is gone either way, and the lock file holds no data), so
     * its result is deliberately ignored. */
    if (fd >= 0)
        (void)close(fd);
}
