/* Stat manifests: per unit, each file's size, mtime, ctime, inode and
 * content hash with the key they gave, so that an unchanged unit is found
 * without reading or hashing a source (deps.c compares, build.c decides).
 *
 * Payload: the key (u32 length + bytes), the scan's safe-mode note
 * (jitop__deps.note: u32 length + bytes, empty for none), the dep count
 * (u32), then per dep its path (u32 length + bytes), size, mtime in ns,
 * ctime in ns, inode, device (u64 each) and content hash (16 bytes). A
 * recent dep (jitop__dep.recent) is stored with JITOP__MTIME_UNKNOWN as its
 * mtime, which reads back as recent: its stat data never vouches for it.
 * An uncacheable unit has no manifest. */
#include "cache/cache_private.h"

/* The bytes of a dep record with an empty path: the smallest possible. */
#define DEP_RECORD_MIN (4 + 5 * 8 + 16)

static char *manifest_dir(const jitop__cache *c, const char id[33])
{
    return jitop__sprintf("%s/manifests/%.2s", c->vdir, id);
}

int jitop__manifest_get(jitop__cache *c, const char id[33], jitop__deps *deps, char key[33],
                        bool *found)
{
    int status = JITOP_OK;
    unsigned char *data = NULL;
    size_t len = 0;
    uint32_t flags = 0;
    char *path = NULL, *stored_key = NULL, *note = NULL;
    bool have = false;
    jitop__deps d = {0};
    *found = false;
    memset(deps, 0, sizeof *deps);
    status = jitop__cache_mem_get(c, id, true, &data, &len, &have);
    if (status != JITOP_OK)
        goto out;
    if (have) {
        if (jitop__file_check(data, len, JITOP__MANIFEST_MAGIC, &flags))
            goto out;
    } else {
        path = jitop__sprintf("%s/manifests/%.2s/%s", c->vdir, id, id);
        if (!path) {
            status = jitop__fail(JITOP_ENOMEM, "out of memory");
            goto out;
        }
        status = jitop__cache_read_checked(c, path, JITOP__MANIFEST_MAGIC,
                                           JITOP__READ_REMOVE_INVALID, &data, &len, &flags,
                                           &have);
        if (status != JITOP_OK || !have)
            goto out;
    }
    struct jitop__rbuf r = {data, len, JITOP__FILE_HEADER_SIZE, false};
    stored_key = jitop__rb_str(&r);
    note = jitop__rb_str(&r);
    uint32_t n = jitop__rb_u32(&r);
    if (!r.bad && n <= (len - r.off) / DEP_RECORD_MIN) {
        d.v = calloc(n ? n : 1, sizeof *d.v);
        if (!d.v) {
            status = jitop__fail(JITOP_ENOMEM, "out of memory");
            goto out;
        }
    } else {
        r.bad = true;
    }
    for (uint32_t i = 0; i < n && !r.bad; i++) {
        jitop__dep *dep = &d.v[d.n];
        dep->path = jitop__rb_str(&r);
        if (!dep->path)
            break;
        d.n++;
        dep->size = (int64_t)jitop__rb_u64(&r);
        dep->mtime_ns = (int64_t)jitop__rb_u64(&r);
        dep->recent = dep->mtime_ns == JITOP__MTIME_UNKNOWN;
        dep->ctime_ns = (int64_t)jitop__rb_u64(&r);
        dep->ino = jitop__rb_u64(&r);
        dep->dev = jitop__rb_u64(&r);
        dep->hash = jitop__rb_hash(&r);
    }
    if (r.bad || r.off != len || !stored_key || strlen(stored_key) != 32 || !note) {
        jitop__cache_vlog(c, "cache: manifest %s is malformed: ignored", id);
        goto out;
    }
    memcpy(key, stored_key, 33);
    if (*note) {
        d.note = note;
        note = NULL;
    }
    *deps = d;
    memset(&d, 0, sizeof d);
    *found = true;
out:
    jitop__deps_free(&d);
    free(stored_key);
    free(note);
    free(data);
    free(path);
    return status;
}

int jitop__manifest_put(jitop__cache *c, const char id[33], const jitop__deps *deps,
                        const char key[33])
{
    struct jitop__wbuf b = {0};
    char *dir = NULL;
    int err = 0, status = JITOP_OK;
    jitop__file_begin(&b, JITOP__MANIFEST_MAGIC, 0);
    jitop__wb_str(&b, key);
    jitop__wb_str(&b, deps->note ? deps->note : "");
    jitop__wb_u32(&b, (uint32_t)deps->n);
    for (size_t i = 0; i < deps->n; i++) {
        const jitop__dep *dep = &deps->v[i];
        jitop__wb_str(&b, dep->path);
        jitop__wb_u64(&b, (uint64_t)dep->size);
        jitop__wb_u64(&b, (uint64_t)(dep->recent ? JITOP__MTIME_UNKNOWN : dep->mtime_ns));
        jitop__wb_u64(&b, (uint64_t)dep->ctime_ns);
        jitop__wb_u64(&b, dep->ino);
        jitop__wb_u64(&b, dep->dev);
        jitop__wb_hash(&b, dep->hash);
    }
    jitop__file_seal(&b);
    if (b.oom) {
        status = jitop__fail(JITOP_ENOMEM, "out of memory");
        goto out;
    }
    if (jitop__cache_is_readonly(c)) {
        jitop__cache_mem_put(c, id, true, &b);
        goto out;
    }
    dir = manifest_dir(c, id);
    if (!dir) {
        status = jitop__fail(JITOP_ENOMEM, "out of memory");
        goto out;
    }
    /* No fsync: a manifest is a checksummed hint. One lost or torn by a crash
     * is invalid or stale, and costs one hashing pass, never a wrong binary
     * (the key is recomputed from it, and stale stat data does not match). */
    status = jitop__cache_write_atomic(dir, id, b.p, b.n, false, &err);
    if (status == JITOP_EIO && jitop__cache_unwritable_errno(err)) {
        jitop__cache_go_readonly(c, dir, err);
        jitop__cache_mem_put(c, id, true, &b);
        status = JITOP_OK;
    }
out:
    free(b.p);
    free(dir);
    return status;
}
