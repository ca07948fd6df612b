/* Entries: the entry format (jitop__entry to bytes and back; the common
 * header is file.c's) and reading an entry by key, from memory or disk,
 * checked (get, peek, touch). Writing one, which may evict, is cache.c's. */
#include "cache/cache_private.h"

#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

char *jitop__cache_entry_dir(const jitop__cache *c, const char key[33])
{
    return jitop__sprintf("%s/%.2s", c->vdir, key);
}

static char *entry_path(const jitop__cache *c, const char key[33])
{
    return jitop__sprintf("%s/%.2s/%s", c->vdir, key, key);
}

void jitop__entry_free(jitop__entry *e)
{
    if (!e)
        return;
    free(e->arch);
    free(e->nvrtc_version);
    jitop__strv_free(&e->options);
    jitop__strv_free(&e->sources);
    jitop__binary_free(&e->bin);
    memset(e, 0, sizeof *e);
}

int jitop__cache_entry_serialize(const char key[33], const jitop__entry *e,
                                 struct jitop__wbuf *b)
{
    jitop__file_begin(b, JITOP__ENTRY_MAGIC,
                      (e->bin.is_ptx ? JITOP__ENTRY_FLAG_PTX : 0) |
                          (e->bin.unresolved ? JITOP__ENTRY_FLAG_UNRESOLVED : 0));
    /* The key inside the payload: a file copied or linked under another
     * key's name is invalid. */
    jitop__wb_str(b, key);
    jitop__wb_str(b, e->arch);
    jitop__wb_str(b, e->nvrtc_version);
    jitop__wb_strv(b, &e->options);
    jitop__wb_strv(b, &e->sources);
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
    struct jitop__rbuf r = {*bufp, n, JITOP__FILE_HEADER_SIZE, n < JITOP__FILE_HEADER_SIZE};
    const char *why = NULL;
    memset(e, 0, sizeof *e);
    char *stored_key = jitop__rb_str(&r);
    e->arch = jitop__rb_str(&r);
    e->nvrtc_version = jitop__rb_str(&r);
    jitop__rb_strv(&r, &e->options);
    jitop__rb_strv(&r, &e->sources);
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
     * cubin the copy would be a third of a warm hit. The metadata it overwrites
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
        dir = jitop__cache_entry_dir(c, key);
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

int jitop__cache_get_local(jitop__cache *c, const char key[33], jitop__entry *out, bool *found)
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
