/* Stat manifests: per unit, each file's size, mtime, ctime, inode and
 * content hash with the key they gave, so that an unchanged unit is found
 * without reading or hashing a source (deps.c compares, build.c decides).
 *
 * Payload: the key (u32 length + bytes), the scan's safe-mode note
 * (jitop__deps.note: u32 length + bytes, empty for none), the dep count
 * (u32), then per dep its path (u32 length + bytes), size, mtime in ns,
 * ctime in ns, inode, device (u64 each) and content hash (16 bytes); then
 * the count of directories where include names were not found
 * (jitop__deps.dirs, u32), each as its path, mtime, ctime, inode and device.
 * A recent record (jitop__dep.recent) is stored with JITOP__MTIME_UNKNOWN
 * as its mtime, which reads back as recent: its stat data never vouches for
 * it. An uncacheable unit has no manifest.
 *
 * A source's manifest (a unit with no name expressions, build.c) may also
 * hold its instance lists (jitop__instlist), flag bit 0 of the header:
 * after the directories, the name expressions compiled into the binary of
 * the key, then every name expression asked of the source (each a
 * jitop__wb_strv list). They ride in the manifest because the warm path
 * reads it anyway: knowing them costs no extra file read. A manifest
 * without the flag has empty lists (one written before them parses). With
 * flag bit 1 too, the lists of the source's other binaries follow (bins: a
 * u32 count, then each a jitop__wb_strv list); a reader that predates them
 * finds the manifest malformed (one hashing pass, never a wrong binary). */
#include "cache/cache_private.h"

#include <fcntl.h>
#include <unistd.h>

/* The bytes of a dep record, and of a directory record, with an empty
 * path: the smallest possible. */
#define DEP_RECORD_MIN (4 + 5 * 8 + 16)
#define DIR_RECORD_MIN (4 + 4 * 8)

/* Reads a count and that many records (with size and hash: files; without:
 * directories) into a new array; sets r->bad on malformed bytes. */
static int read_records(struct jitop__rbuf *r, bool files, jitop__dep **v, size_t *nv)
{
    uint32_t n = jitop__rb_u32(r);
    if (r->bad || n > (r->n - r->off) / (files ? DEP_RECORD_MIN : DIR_RECORD_MIN)) {
        r->bad = true;
        return JITOP_OK;
    }
    if (!(*v = calloc(n ? n : 1, sizeof **v)))
        return jitop__fail(JITOP_ENOMEM, "out of memory");
    for (uint32_t i = 0; i < n && !r->bad; i++) {
        jitop__dep *dep = &(*v)[*nv];
        if (!(dep->path = jitop__rb_str(r)))
            break;
        ++*nv;
        dep->size = files ? (int64_t)jitop__rb_u64(r) : 0;
        dep->mtime_ns = (int64_t)jitop__rb_u64(r);
        dep->recent = dep->mtime_ns == JITOP__MTIME_UNKNOWN;
        dep->ctime_ns = (int64_t)jitop__rb_u64(r);
        dep->ino = jitop__rb_u64(r);
        dep->dev = jitop__rb_u64(r);
        if (files)
            dep->hash = jitop__rb_hash(r);
    }
    return JITOP_OK;
}

static void write_records(struct jitop__wbuf *b, bool files, const jitop__dep *v, size_t n)
{
    jitop__wb_u32(b, (uint32_t)n);
    for (size_t i = 0; i < n; i++) {
        jitop__wb_str(b, v[i].path);
        if (files)
            jitop__wb_u64(b, (uint64_t)v[i].size);
        jitop__wb_u64(b, (uint64_t)(v[i].recent ? JITOP__MTIME_UNKNOWN : v[i].mtime_ns));
        jitop__wb_u64(b, (uint64_t)v[i].ctime_ns);
        jitop__wb_u64(b, v[i].ino);
        jitop__wb_u64(b, v[i].dev);
        if (files)
            jitop__wb_hash(b, v[i].hash);
    }
}

static char *manifest_dir(const jitop__cache *c, const char id[33])
{
    return jitop__sprintf("%s/manifests/%.2s", c->vdir, id);
}

#define MANIFEST_FLAG_INSTANCES 1u
#define MANIFEST_FLAG_BINS 2u

int jitop__manifest_parse(const unsigned char *data, size_t len, jitop__deps *deps,
                          char key[33], bool *valid)
{
    return jitop__manifest_parse_lists(data, len, deps, key, NULL, valid);
}

int jitop__manifest_parse_lists(const unsigned char *data, size_t len, jitop__deps *deps,
                                char key[33], jitop__instlist *lists, bool *valid)
{
    jitop__instlist l = {0};
    int status = JITOP_OK;
    char *stored_key = NULL, *note = NULL;
    jitop__deps d = {0};
    *valid = false;
    memset(deps, 0, sizeof *deps);
    if (lists)
        memset(lists, 0, sizeof *lists);
    struct jitop__rbuf r = {data, len, JITOP__FILE_HEADER_SIZE, len < JITOP__FILE_HEADER_SIZE};
    uint32_t flags = len >= JITOP__FILE_HEADER_SIZE
                         ? (uint32_t)data[12] | (uint32_t)data[13] << 8 |
                               (uint32_t)data[14] << 16 | (uint32_t)data[15] << 24
                         : 0;
    stored_key = jitop__rb_str(&r);
    note = jitop__rb_str(&r);
    status = read_records(&r, true, &d.v, &d.n);
    if (status == JITOP_OK && !r.bad)
        status = read_records(&r, false, &d.dirs, &d.ndirs);
    if (status != JITOP_OK)
        goto out;
    if (flags & MANIFEST_FLAG_INSTANCES) {
        jitop__rb_strv(&r, &l.built);
        if (!r.bad)
            jitop__rb_strv(&r, &l.asked);
    }
    if ((flags & MANIFEST_FLAG_BINS) && !r.bad) {
        /* Checked here, decoded on demand (jitop__instlist_bins). */
        uint32_t n = jitop__rb_u32(&r);
        size_t from = r.off;
        r.bad = r.bad || n == 0;
        for (uint32_t i = 0; i < n && !r.bad; i++) {
            uint32_t m = jitop__rb_u32(&r);
            for (uint32_t j = 0; j < m && !r.bad; j++)
                jitop__rb_take(&r, jitop__rb_u32(&r));
        }
        if (!r.bad) {
            l.nbins = n;
            l.bins_raw_len = r.off - from;
            if (!(l.bins_raw = malloc(l.bins_raw_len ? l.bins_raw_len : 1))) {
                status = jitop__fail(JITOP_ENOMEM, "out of memory");
                goto out;
            }
            memcpy(l.bins_raw, data + from, l.bins_raw_len);
        }
    }
    if (r.bad || r.off != len || !stored_key || strlen(stored_key) != 32 || !note)
        goto out;
    memcpy(key, stored_key, 33);
    if (*note) {
        d.note = note;
        note = NULL;
    }
    *deps = d;
    memset(&d, 0, sizeof d);
    if (lists) {
        *lists = l;
        memset(&l, 0, sizeof l);
    }
    *valid = true;
out:
    jitop__instlist_free(&l);
    jitop__deps_free(&d);
    free(stored_key);
    free(note);
    return status;
}

int jitop__manifest_get(jitop__cache *c, const char id[33], jitop__deps *deps, char key[33],
                        bool *found)
{
    return jitop__manifest_get_lists(c, id, deps, key, NULL, found);
}

int jitop__manifest_get_lists(jitop__cache *c, const char id[33], jitop__deps *deps,
                              char key[33], jitop__instlist *lists, bool *found)
{
    int status = JITOP_OK;
    unsigned char *data = NULL;
    size_t len = 0;
    uint32_t flags = 0;
    char *path = NULL, *dir = NULL;
    bool have = false;
    *found = false;
    memset(deps, 0, sizeof *deps);
    if (lists)
        memset(lists, 0, sizeof *lists);
    status = jitop__cache_mem_get(c, id, true, &data, &len, &have);
    if (status != JITOP_OK)
        goto out;
    if (have) {
        if (jitop__file_check(data, len, JITOP__MANIFEST_MAGIC, &flags))
            goto out;
    } else {
        path = jitop__sprintf("%s/manifests/%.2s/%s", c->vdir, id, id);
        dir = manifest_dir(c, id);
        if (!path || !dir) {
            status = jitop__fail(JITOP_ENOMEM, "out of memory");
            goto out;
        }
        /* The directory is checked as an entry's is: whoever can write in it
         * can swap the manifest, and with it the stat data that vouch for a
         * hit. */
        struct stat st;
        if (stat(dir, &st) != 0)
            goto out; /* none: a miss */
        status = jitop__cache_check_safe(dir, &st);
        if (status != JITOP_OK)
            goto out;
        status = jitop__cache_read_checked(c, path, JITOP__MANIFEST_MAGIC,
                                           JITOP__READ_REMOVE_INVALID, &data, &len, &flags,
                                           &have);
        if (status != JITOP_OK || !have)
            goto out;
    }
    status = jitop__manifest_parse_lists(data, len, deps, key, lists, found);
    if (status == JITOP_OK && !*found)
        jitop__cache_vlog(c, "cache: manifest %s is malformed: ignored", id);
out:
    free(data);
    free(path);
    free(dir);
    return status;
}

bool jitop__manifest_peek_key(const char *path, char key[33])
{
    unsigned char head[JITOP__FILE_HEADER_SIZE + 4 + 32];
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0)
        return false;
    struct stat st;
    ssize_t got = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) ? pread(fd, head, sizeof head, 0)
                                                             : -1;
    /* Read only: a close error loses nothing. */
    (void)close(fd);
    if (got != (ssize_t)sizeof head || memcmp(head, JITOP__MANIFEST_MAGIC, 8) != 0)
        return false;
    struct jitop__rbuf r = {head, sizeof head, 8, false};
    uint32_t version = jitop__rb_u32(&r);
    r.off = JITOP__FILE_HEADER_SIZE;
    if (version != JITOP__FORMAT_VERSION || jitop__rb_u32(&r) != 32)
        return false;
    memcpy(key, head + r.off, 32);
    key[32] = '\0';
    return jitop__is_hex(key, 32);
}

int jitop__manifest_put(jitop__cache *c, const char id[33], const jitop__deps *deps,
                        const char key[33])
{
    return jitop__manifest_put_lists(c, id, deps, key, NULL);
}

int jitop__manifest_put_lists(jitop__cache *c, const char id[33], const jitop__deps *deps,
                              const char key[33], const jitop__instlist *lists)
{
    struct jitop__wbuf b = {0};
    char *dir = NULL;
    int err = 0, status = JITOP_OK;
    bool bins = lists && lists->nbins > 0;
    bool with = lists && (lists->built.n > 0 || lists->asked.n > 0 || bins);
    jitop__file_begin(&b, JITOP__MANIFEST_MAGIC,
                      (with ? MANIFEST_FLAG_INSTANCES : 0) | (bins ? MANIFEST_FLAG_BINS : 0));
    jitop__wb_str(&b, key);
    jitop__wb_str(&b, deps->note ? deps->note : "");
    write_records(&b, true, deps->v, deps->n);
    write_records(&b, false, deps->dirs, deps->ndirs);
    if (with) {
        jitop__wb_strv(&b, &lists->built);
        jitop__wb_strv(&b, &lists->asked);
    }
    if (bins) {
        jitop__wb_u32(&b, (uint32_t)lists->nbins);
        if (lists->bins) {
            for (size_t i = 0; i < lists->nbins; i++)
                jitop__wb_strv(&b, &lists->bins[i]);
        } else {
            jitop__wb_bytes(&b, lists->bins_raw, lists->bins_raw_len);
        }
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
    status = jitop__cache_write_atomic(c, dir, id, b.p, b.n, false, &err);
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

void jitop__instlist_free(jitop__instlist *l)
{
    if (!l)
        return;
    jitop__strv_free(&l->built);
    jitop__strv_free(&l->asked);
    for (size_t i = 0; l->bins && i < l->nbins; i++)
        jitop__strv_free(&l->bins[i]);
    free(l->bins);
    free(l->bins_raw);
    l->bins = NULL;
    l->bins_raw = NULL;
    l->nbins = l->bins_raw_len = 0;
}

int jitop__instlist_bins(jitop__instlist *l)
{
    if (l->bins || l->nbins == 0)
        return JITOP_OK;
    jitop__strv *v = calloc(l->nbins, sizeof *v);
    if (!v)
        return jitop__fail(JITOP_ENOMEM, "out of memory");
    /* The bytes were checked when read: a failure here is memory. */
    struct jitop__rbuf r = {l->bins_raw, l->bins_raw_len, 0, false};
    for (size_t i = 0; i < l->nbins && !r.bad; i++)
        jitop__rb_strv(&r, &v[i]);
    if (r.bad) {
        for (size_t i = 0; i < l->nbins; i++)
            jitop__strv_free(&v[i]);
        free(v);
        return jitop__fail(JITOP_ENOMEM, "out of memory");
    }
    l->bins = v;
    free(l->bins_raw);
    l->bins_raw = NULL;
    l->bins_raw_len = 0;
    return JITOP_OK;
}
