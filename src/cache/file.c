/* The cache's files, shared by entries and manifests: the byte encoding
 * and the common header, directories and their safety checks, atomic
 * writes and checked reads, the verbose log, and the read-only mode that
 * keeps new files in memory when the root cannot be written. The bottom of
 * the cache room: it calls no other file of it. The formats are described
 * in cache_private.h. */
#include "cache/cache_private.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

void jitop__wb_bytes(struct jitop__wbuf *b, const void *src, size_t n)
{
    if (b->oom)
        return;
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n)
            cap *= 2;
        unsigned char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = true;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    if (n)
        memcpy(b->p + b->n, src, n);
    b->n += n;
}

void jitop__wb_u32(struct jitop__wbuf *b, uint32_t v)
{
    unsigned char x[4];
    for (int i = 0; i < 4; i++)
        x[i] = (unsigned char)(v >> (8 * i));
    jitop__wb_bytes(b, x, 4);
}

void jitop__wb_u64(struct jitop__wbuf *b, uint64_t v)
{
    unsigned char x[8];
    for (int i = 0; i < 8; i++)
        x[i] = (unsigned char)(v >> (8 * i));
    jitop__wb_bytes(b, x, 8);
}

void jitop__wb_str(struct jitop__wbuf *b, const char *s)
{
    size_t n = s ? strlen(s) : 0;
    jitop__wb_u32(b, (uint32_t)n);
    jitop__wb_bytes(b, s, n);
}

void jitop__wb_strv(struct jitop__wbuf *b, const jitop__strv *sv)
{
    jitop__wb_u32(b, (uint32_t)sv->n);
    for (size_t i = 0; i < sv->n; i++)
        jitop__wb_str(b, sv->v[i]);
}

void jitop__wb_hash(struct jitop__wbuf *b, XXH128_hash_t h)
{
    XXH128_canonical_t c;
    XXH128_canonicalFromHash(&c, h);
    jitop__wb_bytes(b, c.digest, sizeof c.digest);
}

const unsigned char *jitop__rb_take(struct jitop__rbuf *r, size_t n)
{
    if (r->bad || n > r->n - r->off) {
        r->bad = true;
        return NULL;
    }
    const unsigned char *p = r->p + r->off;
    r->off += n;
    return p;
}

uint32_t jitop__rb_u32(struct jitop__rbuf *r)
{
    const unsigned char *p = jitop__rb_take(r, 4);
    uint32_t v = 0;
    for (int i = 0; p && i < 4; i++)
        v |= (uint32_t)p[i] << (8 * i);
    return v;
}

uint64_t jitop__rb_u64(struct jitop__rbuf *r)
{
    const unsigned char *p = jitop__rb_take(r, 8);
    uint64_t v = 0;
    for (int i = 0; p && i < 8; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

/* A malloc'd NUL-terminated copy; NULL with r->bad on a bound error or ENOMEM. */
char *jitop__rb_str(struct jitop__rbuf *r)
{
    uint32_t n = jitop__rb_u32(r);
    const unsigned char *p = jitop__rb_take(r, n);
    if (!p)
        return NULL;
    char *s = malloc((size_t)n + 1);
    if (!s) {
        r->bad = true;
        return NULL;
    }
    memcpy(s, p, n);
    s[n] = '\0';
    return s;
}

void jitop__rb_strv(struct jitop__rbuf *r, jitop__strv *out)
{
    uint32_t n = jitop__rb_u32(r);
    /* Every item takes at least its 4-byte length: a count the rest of the
     * payload cannot hold is malformed, whatever the allocator would do. */
    if (r->bad || n > (r->n - r->off) / 4) {
        r->bad = true;
        return;
    }
    for (uint32_t i = 0; i < n && !r->bad; i++) {
        char *s = jitop__rb_str(r);
        if (s && jitop__strv_push(out, s) != JITOP_OK)
            r->bad = true;
        free(s);
    }
}

XXH128_hash_t jitop__rb_hash(struct jitop__rbuf *r)
{
    XXH128_canonical_t c;
    XXH128_hash_t zero = {0, 0};
    const unsigned char *p = jitop__rb_take(r, sizeof c.digest);
    if (!p)
        return zero;
    memcpy(c.digest, p, sizeof c.digest);
    return XXH128_hashFromCanonical(&c);
}

/* Starts a file: a header whose length and checksum jitop__file_seal fills in. */
void jitop__file_begin(struct jitop__wbuf *b, const char *magic, uint32_t flags)
{
    jitop__wb_bytes(b, magic, 8);
    jitop__wb_u32(b, JITOP__FORMAT_VERSION);
    jitop__wb_u32(b, flags);
    jitop__wb_u64(b, 0);
    unsigned char zero[16] = {0};
    jitop__wb_bytes(b, zero, sizeof zero);
}

void jitop__file_seal(struct jitop__wbuf *b)
{
    if (b->oom)
        return;
    uint64_t len = b->n - JITOP__FILE_HEADER_SIZE;
    for (int i = 0; i < 8; i++)
        b->p[16 + i] = (unsigned char)(len >> (8 * i));
    XXH128_canonical_t c;
    XXH128_canonicalFromHash(&c, XXH3_128bits(b->p + JITOP__FILE_HEADER_SIZE, len));
    memcpy(b->p + 24, c.digest, sizeof c.digest);
}

/* Checks a whole file's header and checksum. NULL when valid, else why not. */
const char *jitop__file_check(const unsigned char *p, size_t n, const char *magic, uint32_t *flags)
{
    if (n < JITOP__FILE_HEADER_SIZE)
        return "truncated (shorter than its header)";
    if (memcmp(p, magic, 8) != 0)
        return "bad magic (not a jitop file)";
    struct jitop__rbuf r = {p, n, 8, false};
    uint32_t version = jitop__rb_u32(&r);
    *flags = jitop__rb_u32(&r);
    uint64_t len = jitop__rb_u64(&r);
    if (version != JITOP__FORMAT_VERSION)
        return "unknown format version";
    if (len != n - JITOP__FILE_HEADER_SIZE)
        return len > n - JITOP__FILE_HEADER_SIZE ? "truncated (payload shorter than recorded)"
                                     : "trailing bytes after the payload";
    XXH128_canonical_t c;
    XXH128_canonicalFromHash(&c, XXH3_128bits(p + JITOP__FILE_HEADER_SIZE, len));
    if (memcmp(c.digest, p + 24, sizeof c.digest) != 0)
        return "checksum mismatch (corrupted)";
    return NULL;
}

/* A directory or file someone else could have written is refused: a
 * poisoned cubin would run arbitrary code on the GPU. */
int jitop__cache_check_safe(const char *path, const struct stat *st)
{
    if (st->st_uid != geteuid())
        return jitop__fail(JITOP_EUNSAFE,
                           "cache path %s is owned by uid %u, not by this user (uid %u): refused, "
                           "since another user could place code there; use a cache directory "
                           "of your own (JITOP_CACHE_DIR)",
                           path, (unsigned)st->st_uid, (unsigned)geteuid());
    if (st->st_mode & (S_IWGRP | S_IWOTH))
        return jitop__fail(JITOP_EUNSAFE,
                           "cache path %s is writable by group or others (mode %03o): refused; "
                           "run chmod go-w on it",
                           path, (unsigned)(st->st_mode & 0777));
    return JITOP_OK;
}

/* The root, made with its parents (mkdir -p) when missing: its parents may
 * be shared directories (/home/u/.cache), so only the root is checked for
 * safety. The root itself is looked at with lstat: a symbolic link there
 * that another user owns (planted in /tmp, say) would make jitop write into,
 * and clean delete in, whatever directory of ours it names; it is refused.
 * A link of our own is followed. */
int jitop__cache_make_root(jitop__cache *c, int *err)
{
    const char *root = c->root;
    *err = 0;
    struct stat st;
    if (lstat(root, &st) != 0) {
        char *p = jitop__strdup(root);
        if (!p)
            return jitop__fail(JITOP_ENOMEM, "out of memory");
        for (char *s = p + 1; *s; s++) {
            if (*s != '/')
                continue;
            *s = '\0';
            if (mkdir(p, 0700) != 0 && errno != EEXIST) {
                *err = errno;
                int status = jitop__fail(JITOP_EIO, "cannot create %s: %s", p, strerror(errno));
                free(p);
                return status;
            }
            *s = '/';
        }
        free(p);
        if (mkdir(root, 0700) != 0 && errno != EEXIST) {
            *err = errno;
            return jitop__fail(JITOP_EIO, "cannot create cache directory %s: %s", root,
                               strerror(errno));
        }
        /* Made now, or by someone else meanwhile: looked at again. */
        if (lstat(root, &st) != 0) {
            *err = errno;
            return jitop__fail(JITOP_EIO, "cache directory %s: lstat: %s", root,
                               strerror(errno));
        }
    }
    if (S_ISLNK(st.st_mode)) {
        if (st.st_uid != geteuid())
            return jitop__fail(JITOP_EUNSAFE,
                               "cache root %s is a symbolic link owned by uid %u, not by this "
                               "user (uid %u): refused, since whoever made it chooses which of "
                               "your directories jitop would write and delete in; use a cache "
                               "directory of your own (JITOP_CACHE_DIR)",
                               root, (unsigned)st.st_uid, (unsigned)geteuid());
        if (stat(root, &st) != 0) {
            *err = errno;
            return jitop__fail(JITOP_EIO, "cache directory %s: stat: %s", root, strerror(errno));
        }
    }
    if (!S_ISDIR(st.st_mode))
        return jitop__fail(JITOP_EIO, "cache path %s is not a directory", root);
    return jitop__cache_check_safe(root, &st);
}

bool jitop__cache_unwritable_errno(int e)
{
    return e == EACCES || e == EROFS || e == EPERM || e == ENOSPC || e == EDQUOT;
}

static int write_all(int fd, const unsigned char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0)
            return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

void (*jitop__cache_write_hook)(const char *tmp);
void (*jitop__cache_fsync_hook)(const char *path);

/* Writes dir/name atomically: a unique temporary file in the same directory,
 * (fsync), rename over the name, (fsync of the directory). Readers see the
 * old file or the new one, never a part. On failure nothing is left behind
 * and *err holds the errno that caused it (ENOENT: dir went away). */
int jitop__cache_write_once(const char *dir, const char *name, const unsigned char *data,
                            size_t len, bool durable, int *err)
{
    int status = JITOP_OK, fd = -1, dfd = -1;
    char *tmp = NULL, *dst = NULL;
    *err = 0;
    tmp = jitop__sprintf("%s/.tmp-%s-XXXXXX", dir, name);
    dst = jitop__sprintf("%s/%s", dir, name);
    if (!tmp || !dst) {
        status = jitop__fail(JITOP_ENOMEM, "out of memory");
        goto out;
    }
    fd = mkostemp(tmp, O_CLOEXEC); /* mode 0600, O_EXCL */
    if (fd < 0) {
        *err = errno;
        status = jitop__fail(JITOP_EIO, "cache: cannot create a temporary file in %s: %s", dir,
                             strerror(errno));
        free(tmp);
        tmp = NULL; /* nothing to remove */
        goto out;
    }
    if (write_all(fd, data, len) != 0) {
        *err = errno;
        status = jitop__fail(JITOP_EIO, "cache: write %s: %s", tmp, strerror(errno));
        goto out;
    }
    if (durable && jitop__cache_fsync_hook)
        jitop__cache_fsync_hook(tmp);
    if (durable && fsync(fd) != 0) {
        *err = errno;
        status = jitop__fail(JITOP_EIO, "cache: fsync %s: %s", tmp, strerror(errno));
        goto out;
    }
    int rc = close(fd);
    fd = -1;
    if (rc != 0) {
        *err = errno;
        status = jitop__fail(JITOP_EIO, "cache: close %s: %s", tmp, strerror(errno));
        goto out;
    }
    if (jitop__cache_write_hook)
        jitop__cache_write_hook(tmp);
    if (rename(tmp, dst) != 0) {
        *err = errno;
        status = jitop__fail(JITOP_EIO, "cache: rename %s -> %s: %s", tmp, dst, strerror(errno));
        goto out;
    }
    free(tmp);
    tmp = NULL; /* renamed: nothing to remove */
    if (durable) {
        /* The rename itself is only durable once the directory is synced. A
         * directory gone by now was moved away by jitop clean after the
         * rename, with the file: as if cleaned right after, nothing to sync. */
        if (jitop__cache_fsync_hook)
            jitop__cache_fsync_hook(dir);
        dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if ((dfd < 0 && errno != ENOENT) || (dfd >= 0 && fsync(dfd) != 0)) {
            *err = errno;
            status = jitop__fail(JITOP_EIO, "cache: fsync directory %s: %s", dir, strerror(errno));
            goto out;
        }
    }
out:
    if (fd >= 0 && close(fd) != 0 && status == JITOP_OK)
        status = jitop__fail(JITOP_EIO, "cache: close %s: %s", tmp, strerror(errno));
    if (dfd >= 0 && close(dfd) != 0 && status == JITOP_OK) {
        *err = errno;
        status = jitop__fail(JITOP_EIO, "cache: close directory %s: %s", dir, strerror(errno));
    }
    if (tmp && unlink(tmp) != 0 && errno != ENOENT && status == JITOP_OK)
        status = jitop__fail(JITOP_EIO, "cache: remove %s: %s", tmp, strerror(errno));
    free(tmp);
    free(dst);
    return status;
}

/* Removes path if it is still the file fd refers to: another process may
 * have renamed a fresh, valid file into place since we opened ours. */
static void remove_if_same(const jitop__cache *c, const char *path, int fd, const char *why)
{
    struct stat a, b;
    if (fstat(fd, &a) != 0 || lstat(path, &b) != 0 || a.st_ino != b.st_ino || a.st_dev != b.st_dev)
        return;
    if (unlink(path) != 0) {
        jitop__cache_vlog(c, "cache: %s is invalid (%s) and could not be removed: %s", path, why,
                          strerror(errno));
        return;
    }
    jitop__cache_vlog(c, "cache: removed %s: %s", path, why);
}

bool jitop__cache_use_is_recent(const struct stat *st)
{
    struct timespec now;
    if (clock_gettime(CLOCK_REALTIME, &now) != 0)
        return false;
    /* A future mtime (a clock set back) is not recent: stamp it. */
    return st->st_mtim.tv_sec <= now.tv_sec &&
           now.tv_sec - st->st_mtim.tv_sec < JITOP__USE_MARK_SECONDS;
}

/* malloc, with a buffer's pages faulted in by one madvise call rather than
 * one fault per 4 KiB during read() (2-2.5 us each in a fresh process on the
 * GPU machine): about 0.1 ms less for a 240 KB entry, and worth it from four
 * pages up (the 40 KB LLTM instance). MADV_POPULATE_WRITE needs Linux 5.14;
 * elsewhere the call fails and the pages fault in as usual. */
static unsigned char *alloc_prefaulted(size_t n)
{
    unsigned char *p = malloc(n);
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif
    if (p && n >= ((size_t)16 << 10)) {
        uintptr_t start = ((uintptr_t)p + 4095) & ~(uintptr_t)4095;
        uintptr_t end = ((uintptr_t)p + n) & ~(uintptr_t)4095;
        if (end > start && madvise((void *)start, end - start, MADV_POPULATE_WRITE) != 0) {
            /* best effort: nothing is lost but the speed-up */
        }
    }
    return p;
}

/* Reads a whole cache file and checks its header and checksum. *found is
 * false for a missing or invalid file. A file that is not ours, or writable
 * by others, is an error (JITOP_EUNSAFE). */
int jitop__cache_read_checked(jitop__cache *c, const char *path, const char *magic, int flags,
                              unsigned char **data, size_t *len, uint32_t *file_flags, bool *found)
{
    int status = JITOP_OK;
    unsigned char *buf = NULL;
    *found = false;
    /* O_NONBLOCK: opening a FIFO for reading would wait for a writer
     * forever; it opens at once and is refused below, by its type. */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0) {
        int e = errno;
        struct stat lst;
        if (e == ENOENT)
            return JITOP_OK;
        if (e == ELOOP) {
            /* A symbolic link where a file of jitop's belongs: invalid like
             * a corrupt file, never followed; unlink removes the link only. */
            if (!(flags & JITOP__READ_REMOVE_INVALID))
                jitop__cache_vlog(c, "cache: %s is a symbolic link: ignored", path);
            else if (unlink(path) == 0)
                jitop__cache_vlog(c, "cache: removed %s: a symbolic link", path);
            else
                jitop__cache_vlog(c, "cache: cannot remove the symbolic link %s: %s", path,
                                  strerror(errno));
            return JITOP_OK;
        }
        /* Another user's file (mode 0600) cannot even be opened: that is
         * the unsafe cache the check below names, not an I/O error. */
        if ((e == EACCES || e == EPERM) && lstat(path, &lst) == 0 && lst.st_uid != geteuid())
            return jitop__cache_check_safe(path, &lst);
        return jitop__fail(JITOP_EIO, "cache: open %s: %s", path, strerror(e));
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        status = jitop__fail(JITOP_EIO, "cache: fstat %s: %s", path, strerror(errno));
        goto out;
    }
    if (!S_ISREG(st.st_mode)) {
        /* A FIFO, socket, device or directory under a file's name: invalid,
         * so that the name is free for the rebuilt file. A directory may
         * hold someone's files: it is moved aside, not deleted. */
        if (!(flags & JITOP__READ_REMOVE_INVALID))
            jitop__cache_vlog(c, "cache: %s is not a regular file: ignored", path);
        else if (S_ISDIR(st.st_mode))
            jitop__cache_move_aside(c, path);
        else
            remove_if_same(c, path, fd, "not a regular file");
        goto out;
    }
    status = jitop__cache_check_safe(path, &st);
    if (status != JITOP_OK)
        goto out;
    size_t size = (size_t)st.st_size, got = 0;
    buf = alloc_prefaulted(size ? size : 1);
    if (!buf) {
        status = jitop__fail(JITOP_ENOMEM, "cache: out of memory reading %s", path);
        goto out;
    }
    if (jitop__read_upto(fd, buf, size, &got) != 0) {
        status = jitop__fail(JITOP_EIO, "cache: read %s: %s", path, strerror(errno));
        goto out;
    }
    const char *why = jitop__file_check(buf, got, magic, file_flags);
    if (why) {
        if (flags & JITOP__READ_REMOVE_INVALID)
            remove_if_same(c, path, fd, why);
        else
            jitop__cache_vlog(c, "cache: %s is invalid: %s", path, why);
        goto out;
    }
    if ((flags & JITOP__READ_MARK_USE) && !jitop__cache_use_is_recent(&st)) {
        /* The last use is recorded in the mtime (entries never change after
         * their rename, so the mtime is free for it). atime is not trusted:
         * relatime updates it at most daily and noatime never. One inode
         * update per hit that is not recent, no data written. */
        if (futimens(fd, NULL) != 0)
            jitop__cache_vlog(c, "cache: cannot mark %s as used: %s", path, strerror(errno));
    }
    *data = buf;
    *len = got;
    *found = true;
    buf = NULL;
out:
    free(buf);
    if (close(fd) != 0 && status == JITOP_OK)
        status = jitop__fail(JITOP_EIO, "cache: close %s: %s", path, strerror(errno));
    return status;
}

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

/* Switches to keeping new files in memory. The first reason is kept for
 * the warning that jitop__cache_mem_put gives (a failed copy only makes
 * that warning name the root instead). */
void jitop__cache_go_readonly(jitop__cache *c, const char *path, int err)
{
    pthread_mutex_lock(&c->lock);
    c->readonly = true;
    if (!c->ro_path) {
        c->ro_path = jitop__strdup(path);
        c->ro_err = err;
    }
    pthread_mutex_unlock(&c->lock);
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
    bool warn = !manifest && !c->warned;
    c->warned = c->warned || warn;
    /* ro_path is set once and freed only with the cache. */
    const char *path = c->ro_path ? c->ro_path : c->root;
    int err = c->ro_err;
    pthread_mutex_unlock(&c->lock);
    if (warn)
        fprintf(stderr,
                "jitop: warning: cannot write to the cache at %s (%s): compiled binaries are kept "
                "in memory for this process only\n",
                path, strerror(err));
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

void jitop__cache_move_aside(const jitop__cache *c, const char *path)
{
    if (rmdir(path) == 0) {
        jitop__cache_vlog(c, "cache: removed the empty directory %s (a file of jitop's belongs "
                             "there)",
                          path);
        return;
    }
    if (errno != ENOTEMPTY && errno != EEXIST) {
        jitop__cache_vlog(c, "cache: cannot remove the directory %s: %s", path, strerror(errno));
        return;
    }
    char *aside = jitop__sprintf("%s.aside-XXXXXX", path);
    if (!aside || !mkdtemp(aside)) {
        fprintf(stderr, "jitop: warning: %s is a directory where a cache file belongs, and it "
                        "cannot be moved aside: %s\n",
                path, aside ? strerror(errno) : "out of memory");
        free(aside);
        return;
    }
    /* A directory renamed over an empty one replaces it. */
    if (rename(path, aside) != 0) {
        int e = errno;
        if (rmdir(aside) != 0)
            jitop__cache_vlog(c, "cache: rmdir %s: %s", aside, strerror(errno));
        if (e != ENOENT)
            fprintf(stderr, "jitop: warning: cannot move the directory %s aside: %s\n", path,
                    strerror(e));
    } else {
        fprintf(stderr, "jitop: warning: %s was a directory where a cache file belongs: moved "
                        "to %s (jitop deletes only its own files); the file is made again\n",
                path, aside);
    }
    free(aside);
}
