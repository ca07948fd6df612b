/* What the cache's files share and nothing else sees. The cache is split by
 * idea: cache.c (the cache object: open, read-only mode and its in-memory
 * fallback, entries, locks), cache_file.c (the file format, directories and
 * their safety, atomic writes, checked reads), cache_key.c (keys and manifest
 * ids), cache_manifest.c (stat manifests), cache_walk.c (list, gc, LRU
 * eviction, clean, explain's search).
 *
 * Layout under the root (every directory 0700, every file 0600):
 *   v<F>/<ab>/<key>            entries (ab: the key's first two hex digits)
 *   v<F>/manifests/<ab>/<id>   stat manifests
 *   v<F>/locks/<key>.lock      flock files (empty)
 *   .tmp-* beside their target while being written
 *
 * Both file formats start with the same 40-byte header: an 8-byte magic, the
 * format version (u32), flags (u32), the payload length (u64) and the XXH3-128
 * of the payload. All integers are little-endian. A file whose header or
 * checksum does not match is treated as absent and removed: it is never
 * handed on, because a cubin runs on the GPU. */
#ifndef JITOP_CACHE_PRIVATE_H
#define JITOP_CACHE_PRIVATE_H

#include "cache/cache.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#define JITOP__FILE_HEADER_SIZE 40
#define JITOP__ENTRY_MAGIC "JITOPBIN"
#define JITOP__MANIFEST_MAGIC "JITOPMAN"
#define JITOP__ENTRY_FLAG_PTX 1u
/* The entry is the answer "a name expression names nothing in this unit"
 * (jitop__binary.unresolved): no code, the log says why. */
#define JITOP__ENTRY_FLAG_UNRESOLVED 2u

/* One file kept in memory when the root cannot be written. */
struct jitop__mem_item {
    struct jitop__mem_item *next;
    char name[33];
    bool manifest;
    unsigned char *data; /* the whole file: header + payload */
    size_t len;
    int64_t created;
};

struct jitop__cache {
    char *root;
    char *vdir; /* root/v<F> */
    int64_t max_size; /* negative: no cap */
    int verbose;
    pthread_mutex_t lock; /* guards readonly, warned and items */
    bool readonly;        /* writes go to items; reads still try the disk */
    bool warned;
    struct jitop__mem_item *items;
};

static inline int64_t jitop__wall_seconds(void)
{
    return (int64_t)time(NULL);
}

/* Logs on stderr when the cache is verbose (cache.c). */
void jitop__cache_vlog(const jitop__cache *c, const char *fmt, ...) JITOP__PRINTF(2, 3);

/* Byte encoding (cache_file.c). A growing buffer that remembers an
 * allocation failure (oom) instead of failing each call. */
struct jitop__wbuf {
    unsigned char *p;
    size_t n, cap;
    bool oom;
};
void jitop__wb_bytes(struct jitop__wbuf *b, const void *src, size_t n);
void jitop__wb_u32(struct jitop__wbuf *b, uint32_t v);
void jitop__wb_u64(struct jitop__wbuf *b, uint64_t v);
void jitop__wb_str(struct jitop__wbuf *b, const char *s);
void jitop__wb_hash(struct jitop__wbuf *b, XXH128_hash_t h);

/* A bounded reader: a read past the end sets bad and returns zeros/NULL. */
struct jitop__rbuf {
    const unsigned char *p;
    size_t n, off;
    bool bad;
};
const unsigned char *jitop__rb_take(struct jitop__rbuf *r, size_t n);
uint32_t jitop__rb_u32(struct jitop__rbuf *r);
uint64_t jitop__rb_u64(struct jitop__rbuf *r);
char *jitop__rb_str(struct jitop__rbuf *r);
XXH128_hash_t jitop__rb_hash(struct jitop__rbuf *r);

/* The common header: begin, append the payload, seal; check on reading. */
void jitop__file_begin(struct jitop__wbuf *b, const char *magic, uint32_t flags);
void jitop__file_seal(struct jitop__wbuf *b);
const char *jitop__file_check(const unsigned char *p, size_t n, const char *magic,
                              uint32_t *flags);

/* Directories and their safety (cache_file.c). */
int jitop__cache_check_safe(const char *path, const struct stat *st);
int jitop__cache_ensure_dir(const char *dir, int *err);
int jitop__cache_make_root(const char *root, int *err);
bool jitop__cache_unwritable_errno(int e);

/* Atomic write and checked read of one cache file (cache_file.c). */
int jitop__cache_write_atomic(const char *dir, const char *name, const unsigned char *data,
                              size_t len, bool durable, int *err);
/* A use stamps an entry's mtime (the LRU order eviction follows) unless
 * the mtime is already this recent: a stamp is an inode write (10-12 us in
 * a fresh process on the GPU machine, a warm load's largest file cost), and
 * eviction needs no finer order than this. */
#define JITOP__USE_MARK_SECONDS 60
bool jitop__cache_use_is_recent(const struct stat *st);

enum jitop__read_flags {
    JITOP__READ_MARK_USE = 1,       /* stamp the file as used (LRU), see above */
    JITOP__READ_REMOVE_INVALID = 2, /* delete a file that fails its checks */
};
int jitop__cache_read_checked(jitop__cache *c, const char *path, const char *magic, int flags,
                              unsigned char **data, size_t *len, uint32_t *file_flags,
                              bool *found);

/* Read-only mode and the in-memory fallback (cache.c). */
void jitop__cache_go_readonly(jitop__cache *c, const char *path, int err);
bool jitop__cache_is_readonly(jitop__cache *c);
void jitop__cache_mem_put(jitop__cache *c, const char name[33], bool manifest,
                          struct jitop__wbuf *b);
int jitop__cache_mem_get(jitop__cache *c, const char name[33], bool manifest,
                         unsigned char **data, size_t *len, bool *found);
void jitop__cache_mem_clear(jitop__cache *c);

/* Entries (cache.c): read one (flags from jitop__read_flags; out may be
 * NULL), and parse a checked entry file. */
int jitop__cache_entry_read(jitop__cache *c, const char key[33], int flags, jitop__entry *out,
                            bool *found);
const char *jitop__cache_entry_parse(const char key[33], unsigned char **bufp, size_t n,
                                     uint32_t flags, jitop__entry *e);

/* Removes least-recently-used entries until the rest fit in cap (negative:
 * no cap); in gc mode invalid entries and stale temporary files too
 * (cache_walk.c). */
int jitop__cache_evict(jitop__cache *c, int64_t cap, bool gc, int64_t *freed);

#endif
