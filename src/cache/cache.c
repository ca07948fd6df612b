/* The cache object: opening the root, the read-only mode with its
 * in-memory fallback, entries (read, checked, written) and per-key locks.
 * Keys are in cache_key.c, manifests in cache_manifest.c, the file format in
 * cache_file.c, listing, gc, eviction and clean in cache_walk.c. */
#include "cache/cache_private.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <sys/file.h>
#include <unistd.h>

void jitop__cache_vlog(const jitop__cache *c, const char *fmt, ...)
{
    if (!c || !c->verbose)
        return;
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    jitop__log(NULL, "%s", msg);
}

/* Switches to keeping new files in memory, with one warning per cache. */
void jitop__cache_go_readonly(jitop__cache *c, const char *path, int err)
{
    pthread_mutex_lock(&c->lock);
    c->readonly = true;
    bool warn = !c->warned;
    c->warned = true;
    pthread_mutex_unlock(&c->lock);
    if (warn)
        fprintf(stderr,
                "jitop: warning: cannot write to the cache at %s (%s): compiled binaries are kept "
                "in memory for this process only\n",
                path, strerror(err));
}

bool jitop__cache_is_readonly(jitop__cache *c)
{
    pthread_mutex_lock(&c->lock);
    bool ro = c->readonly;
    pthread_mutex_unlock(&c->lock);
    return ro;
}

void jitop__cache_mem_put(jitop__cache *c, const char name[33], bool manifest,
                          struct jitop__wbuf *b)
{
    struct jitop__mem_item *it = calloc(1, sizeof *it);
    if (!it)
        return; /* the file is only lost: the next build compiles again */
    memcpy(it->name, name, 33);
    it->manifest = manifest;
    it->data = b->p;
    it->len = b->n;
    it->created = jitop__wall_seconds();
    b->p = NULL;
    b->n = b->cap = 0;
    pthread_mutex_lock(&c->lock);
    for (struct jitop__mem_item **pp = &c->items; *pp; pp = &(*pp)->next) {
        if ((*pp)->manifest == manifest && strcmp((*pp)->name, name) == 0) {
            struct jitop__mem_item *old = *pp;
            *pp = old->next;
            free(old->data);
            free(old);
            break;
        }
    }
    it->next = c->items;
    c->items = it;
    pthread_mutex_unlock(&c->lock);
}

/* A copy of a memory item's bytes (NULL, *found false when absent). */
int jitop__cache_mem_get(jitop__cache *c, const char name[33], bool manifest, unsigned char **data,
                         size_t *len, bool *found)
{
    int status = JITOP_OK;
    *found = false;
    pthread_mutex_lock(&c->lock);
    for (struct jitop__mem_item *it = c->items; it; it = it->next) {
        if (it->manifest != manifest || strcmp(it->name, name) != 0)
            continue;
        *data = malloc(it->len);
        if (!*data) {
            status = jitop__fail(JITOP_ENOMEM, "out of memory");
            break;
        }
        memcpy(*data, it->data, it->len);
        *len = it->len;
        *found = true;
        break;
    }
    pthread_mutex_unlock(&c->lock);
    return status;
}

void jitop__cache_mem_clear(jitop__cache *c)
{
    pthread_mutex_lock(&c->lock);
    while (c->items) {
        struct jitop__mem_item *it = c->items;
        c->items = it->next;
        free(it->data);
        free(it);
    }
    pthread_mutex_unlock(&c->lock);
}

static char *entry_dir(const jitop__cache *c, const char key[33])
{
    return jitop__sprintf("%s/%.2s", c->vdir, key);
}

static char *entry_path(const jitop__cache *c, const char key[33])
{
    return jitop__sprintf("%s/%.2s/%s", c->vdir, key, key);
}

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

void jitop__entry_free(jitop__entry *e)
{
    if (!e)
        return;
    free(e->arch);
    free(e->nvrtc_version);
    free(e->options);
    free(e->sources);
    jitop__binary_free(&e->bin);
    memset(e, 0, sizeof *e);
}

static int serialize_entry(const char key[33], const jitop__entry *e, struct jitop__wbuf *b)
{
    jitop__file_begin(b, JITOP__ENTRY_MAGIC,
                      (e->bin.is_ptx ? JITOP__ENTRY_FLAG_PTX : 0) |
                          (e->bin.unresolved ? JITOP__ENTRY_FLAG_UNRESOLVED : 0));
    /* The key inside the payload: a file copied or linked under another
     * key's name is invalid. */
    jitop__wb_str(b, key);
    jitop__wb_str(b, e->arch);
    jitop__wb_str(b, e->nvrtc_version);
    jitop__wb_str(b, e->options);
    jitop__wb_str(b, e->sources);
    jitop__wb_u64(b, (uint64_t)e->created);
    jitop__wb_u32(b, (uint32_t)e->bin.names.n);
    for (size_t i = 0; i < e->bin.names.n; i++) {
        jitop__wb_str(b, e->bin.names.v[i]);
        jitop__wb_str(b, i < e->bin.lowered.n ? e->bin.lowered.v[i] : "");
    }
    jitop__wb_u64(b, e->bin.size);
    jitop__wb_bytes(b, e->bin.data, e->bin.size);
    jitop__wb_str(b, e->bin.log);
    jitop__file_seal(b);
    return b->oom ? jitop__fail(JITOP_ENOMEM, "cache: out of memory serializing %s", key)
                  : JITOP_OK;
}

/* Parses a checked entry file held in *bufp (n bytes, malloc'd). NULL when
 * it parsed, else why not. On success the buffer becomes e->bin.data and
 * *bufp is set to NULL. */
const char *jitop__cache_entry_parse(const char key[33], unsigned char **bufp, size_t n,
                                     uint32_t flags, jitop__entry *e)
{
    struct jitop__rbuf r = {*bufp, n, JITOP__FILE_HEADER_SIZE, false};
    const char *why = NULL;
    memset(e, 0, sizeof *e);
    char *stored_key = jitop__rb_str(&r);
    e->arch = jitop__rb_str(&r);
    e->nvrtc_version = jitop__rb_str(&r);
    e->options = jitop__rb_str(&r);
    e->sources = jitop__rb_str(&r);
    e->created = (int64_t)jitop__rb_u64(&r);
    uint32_t nnames = jitop__rb_u32(&r);
    for (uint32_t i = 0; i < nnames && !r.bad; i++) {
        char *name = jitop__rb_str(&r), *lowered = jitop__rb_str(&r);
        if (name && lowered &&
            (jitop__strv_push(&e->bin.names, name) != JITOP_OK ||
             jitop__strv_push(&e->bin.lowered, lowered) != JITOP_OK))
            r.bad = true;
        free(name);
        free(lowered);
    }
    uint64_t size = jitop__rb_u64(&r);
    size_t code_at = r.off;
    jitop__rb_take(&r, size);
    char *log = jitop__rb_str(&r);
    if (log && *log)
        e->bin.log = log;
    else
        free(log);
    if (r.bad) {
        why = "malformed metadata";
        goto out;
    }
    if (r.off != n) {
        why = "trailing bytes after the log";
        goto out;
    }
    if ((flags & JITOP__ENTRY_FLAG_UNRESOLVED) && (size != 0 || !e->bin.log)) {
        why = "an unresolved-name answer with code or without a log";
        goto out;
    }
    if (key && (!stored_key || strcmp(stored_key, key) != 0)) {
        why = "stored under another key's name";
        goto out;
    }
    /* The binary moves to the front of the file's buffer, which is then
     * shrunk to it, instead of being copied into a second buffer: in a fresh
     * process every 4 KiB of new memory costs a page fault, and for a 240 KB
     * cubin the copy was a third of a warm hit. The metadata it overwrites
     * was copied out above. size + 1 <= n, since the header precedes it. */
    unsigned char *buf = *bufp;
    memmove(buf, buf + code_at, size);
    buf[size] = '\0';
    unsigned char *shrunk = realloc(buf, size + 1);
    e->bin.data = shrunk ? shrunk : buf;
    *bufp = NULL;
    e->bin.size = size;
    e->bin.is_ptx = (flags & JITOP__ENTRY_FLAG_PTX) != 0;
    e->bin.unresolved = (flags & JITOP__ENTRY_FLAG_UNRESOLVED) != 0;
out:
    free(stored_key);
    if (why)
        jitop__entry_free(e);
    return why;
}

int jitop__cache_entry_read(jitop__cache *c, const char key[33], int flags, jitop__entry *out,
                            bool *found)
{
    int status = JITOP_OK;
    unsigned char *data = NULL;
    size_t len = 0;
    uint32_t file_flags = 0;
    char *path = NULL, *dir = NULL;
    bool have = false;
    *found = false;
    status = jitop__cache_mem_get(c, key, false, &data, &len, &have);
    if (status != JITOP_OK)
        goto out;
    if (!have) {
        path = entry_path(c, key);
        dir = entry_dir(c, key);
        if (!path || !dir) {
            status = jitop__fail(JITOP_ENOMEM, "out of memory");
            goto out;
        }
        struct stat st;
        if (stat(dir, &st) != 0)
            goto out; /* no entry dir: a miss */
        status = jitop__cache_check_safe(dir, &st);
        if (status == JITOP_OK)
            status = jitop__cache_read_checked(c, path, JITOP__ENTRY_MAGIC, flags, &data, &len,
                                               &file_flags, &have);
        if (status != JITOP_OK || !have)
            goto out;
    } else if (jitop__file_check(data, len, JITOP__ENTRY_MAGIC, &file_flags)) {
        goto out;
    }
    jitop__entry e;
    const char *why = jitop__cache_entry_parse(key, &data, len, file_flags, &e);
    if (why) {
        jitop__cache_vlog(c, "cache: entry %s is invalid: %s", key, why);
        if (path && (flags & JITOP__READ_REMOVE_INVALID) && unlink(path) != 0 && errno != ENOENT)
            jitop__cache_vlog(c, "cache: cannot remove %s: %s", path, strerror(errno));
        goto out;
    }
    if (out)
        *out = e;
    else
        jitop__entry_free(&e);
    *found = true;
out:
    free(data);
    free(path);
    free(dir);
    return status;
}

int jitop__cache_get(jitop__cache *c, const char key[33], jitop__entry *out, bool *found)
{
    return jitop__cache_entry_read(c, key, JITOP__READ_MARK_USE | JITOP__READ_REMOVE_INVALID, out,
                                   found);
}

int jitop__cache_touch(jitop__cache *c, const char key[33], bool *found)
{
    *found = false;
    pthread_mutex_lock(&c->lock);
    for (struct jitop__mem_item *it = c->items; it && !*found; it = it->next)
        *found = !it->manifest && strcmp(it->name, key) == 0;
    pthread_mutex_unlock(&c->lock);
    if (*found)
        return JITOP_OK;
    char *path = entry_path(c, key);
    if (!path)
        return jitop__fail(JITOP_ENOMEM, "out of memory");
    /* The mark of use that a read makes (see jitop__cache_read_checked),
     * on the name itself: a link there is not followed (the read that comes
     * later refuses it). Failing for any reason (missing, not a file,
     * read-only, not ours) is a plain "not found": the caller then reads
     * the entry. A recent mark of an entry of ours is left as it is
     * (JITOP__USE_MARK_SECONDS); one of another user's is "not found", as
     * the write would have failed, so that the read refuses it now. */
    struct stat st;
    *found = fstatat(AT_FDCWD, path, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode) &&
             ((st.st_uid == geteuid() && jitop__cache_use_is_recent(&st)) ||
              utimensat(AT_FDCWD, path, NULL, AT_SYMLINK_NOFOLLOW) == 0);
    free(path);
    return JITOP_OK;
}

int jitop__cache_peek(jitop__cache *c, const char key[33], bool *found)
{
    return jitop__cache_entry_read(c, key, 0, NULL, found);
}


int jitop__cache_put(jitop__cache *c, const char key[33], const jitop__entry *e)
{
    struct jitop__wbuf b = {0};
    char *dir = NULL;
    int err = 0;
    int status = serialize_entry(key, e, &b);
    if (status != JITOP_OK)
        goto out;
    if (jitop__cache_is_readonly(c)) {
        jitop__cache_mem_put(c, key, false, &b);
        goto out;
    }
    dir = entry_dir(c, key);
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
