/* The cache object: opening the root (read-only when it cannot be
 * written), writing an entry (then evicting under the size cap) and
 * per-key locks. The room's other files are listed in cache_private.h. */
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
    c->root = jitop__strdup(root);
    c->vdir = jitop__sprintf("%s/v%d", root, JITOP__FORMAT_VERSION);
    if (!c->root || !c->vdir) {
        status = jitop__fail(JITOP_ENOMEM, "out of memory");
        goto out;
    }
    status = jitop__cache_make_root(root, &err);
    if (status != JITOP_OK) {
        if (status == JITOP_EIO && jitop__cache_unwritable_errno(err)) {
            /* Nothing of it can be read either: memory only. */
            jitop__cache_go_readonly(c, root, err);
            status = JITOP_OK;
        }
        goto out;
    }
    const char *subdirs[] = {"", "/locks", "/manifests"};
    for (size_t i = 0; i < 3; i++) {
        char *dir = jitop__sprintf("%s%s", c->vdir, subdirs[i]);
        if (!dir) {
            status = jitop__fail(JITOP_ENOMEM, "out of memory");
            goto out;
        }
        status = jitop__cache_ensure_dir(dir, &err);
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
        jitop__cache_close(c);
        return status;
    }
    *out = c;
    return JITOP_OK;
}

void jitop__cache_close(jitop__cache *c)
{
    if (!c)
        return;
    jitop__cache_mem_clear(c);
    pthread_mutex_destroy(&c->lock);
    free(c->root);
    free(c->vdir);
    free(c);
}

const char *jitop__cache_root(const jitop__cache *c)
{
    return c ? c->root : NULL;
}


int jitop__cache_put(jitop__cache *c, const char key[33], const jitop__entry *e)
{
    struct jitop__wbuf b = {0};
    char *dir = NULL;
    int err = 0;
    int status = jitop__cache_entry_serialize(key, e, &b);
    if (status != JITOP_OK)
        goto out;
    if (jitop__cache_is_readonly(c)) {
        jitop__cache_mem_put(c, key, false, &b);
        goto out;
    }
    dir = jitop__cache_entry_dir(c, key);
    if (!dir) {
        status = jitop__fail(JITOP_ENOMEM, "out of memory");
        goto out;
    }
    status = jitop__cache_write_atomic(dir, key, b.p, b.n, true, &err);
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
        if (jitop__cache_evict(c, c->max_size, false, &freed) != JITOP_OK)
            jitop__cache_vlog(c, "cache: eviction failed: %s", jitop_errmsg(NULL));
        jitop__clear_error();
    }
out:
    free(b.p);
    free(dir);
    return status;
}

int jitop__cache_lock(jitop__cache *c, const char key[33], int *fd)
{
    *fd = -1;
    if (jitop__cache_is_readonly(c))
        return JITOP_OK; /* nothing shared on disk to protect */
    char *path = jitop__sprintf("%s/locks/%s.lock", c->vdir, key);
    if (!path)
        return jitop__fail(JITOP_ENOMEM, "out of memory");
    int status = JITOP_OK, err = 0;
    int lfd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (lfd < 0 && errno == ENOENT) {
        /* The locks directory went (jitop clean elsewhere): make it again. */
        char *dir = jitop__sprintf("%s/locks", c->vdir);
        status = dir ? jitop__cache_ensure_dir(dir, &err)
                     : jitop__fail(JITOP_ENOMEM, "out of memory");
        free(dir);
        if (status != JITOP_OK)
            goto out;
        lfd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    }
    if (lfd < 0) {
        if (jitop__cache_unwritable_errno(errno)) {
            /* Without a lock two processes may compile the same key; the
             * atomic rename keeps the result correct. */
            jitop__cache_vlog(c, "cache: cannot create lock %s: %s; compiling without it", path,
                              strerror(errno));
        } else {
            status = jitop__fail(JITOP_EIO, "cache: open lock %s: %s", path, strerror(errno));
        }
        goto out;
    }
    /* flock belongs to the open file description: it is released when the
     * process dies (kill -9 included), and two threads with their own open()
     * exclude each other too. */
    while (flock(lfd, LOCK_EX) != 0) {
        if (errno == EINTR)
            continue;
        status = jitop__fail(JITOP_EIO, "cache: flock %s: %s", path, strerror(errno));
        if (close(lfd) != 0)
            jitop__cache_vlog(c, "cache: close %s: %s", path, strerror(errno));
        goto out;
    }
    *fd = lfd;
out:
    free(path);
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
