/* What the cache room's files share and nothing else sees: included by the
 * .c files of src/cache/ only (the rooms above use cache/cache.h). The room
 * is split by idea, and calls between its files go one way, each file using
 * only those listed before it:
 *   file.c      the byte encoding and the common header, directories and
 *               their safety, atomic writes, checked reads, the verbose log,
 *               and the read-only mode with its in-memory stand-in for files
 *   tree.c      what jitop owns under the root: markers, the shape of its
 *               names, adopting an old tree, making its directories and
 *               writing files into them (ensure_dir, write_atomic), lock
 *               file removal, clean
 *   key.c       keys and manifest ids
 *   manifest.c  stat manifests
 *   entry.c     the entry format; reading an entry (get, peek, touch)
 *   walk.c      list, gc, LRU eviction, clean, explain's search
 *   cache.c     open and free, put_bytes (a write, then eviction), per-key locks
 *   remote_http.c, remote_sign.c, remote_list.c, remote_config.c, remote.c
 *               the remote tier (remote_private.h): HTTP through libcurl,
 *               signatures through libcrypto, listing (PROPFIND), the spec and
 *               dead-remote state, and the tier itself, which
 *               defines the room's get, put and close (local, then remote)
 *
 * Layout under the root (every directory 0700, every file 0600):
 *   CACHEDIR.TAG               the Cache Directory Tagging marker (backup tools
 *                              skip the root); written only into a root that
 *                              holds nothing but jitop's names
 *   v<F>/jitop.tag             the marker of a tree jitop made: clean deletes
 *                              only marked trees, and only jitop's names there
 *   v<F>/<ab>/<key>            entries (ab: the key's first two hex digits)
 *   v<F>/manifests/<ab>/<id>   stat manifests
 *   v<F>/locks/<key>.lock      flock files (empty)
 *   .tmp-<name>-XXXXXX beside their target while being written
 *   .jitop-trash-XXXXXX/v<N>   a tree clean moved aside and is deleting
 * The names jitop makes, level by level, are in tree.c.
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
    /* JITOP_CACHE_FSYNC set and not 0: entries fsynced (file and directory)
     * before a build returns. Off by default, as ccache, sccache and
     * Triton's cache do: a write is atomic either way (temporary file and
     * rename), and what a power loss can leave (an entry missing, empty or
     * torn) fails the checked read and is a miss, while the two fsyncs
     * would add a disk flush to every cold compile. The tags of a new tree are
     * always fsynced: they decide what jitop clean may delete. */
    bool durable;
    pthread_mutex_t lock; /* guards readonly, ro_*, the warned flags and items */
    bool readonly;        /* writes go to items; reads still try the disk */
    /* Why the cache went read-only: the first path that could not be
     * written and its errno. The warning waits for the first binary kept in
     * memory: a process that only reads (jitop ls, explain, a warm load
     * from a prewarmed read-only cache) has nothing to be warned about. */
    char *ro_path;
    int ro_err;
    bool warned;
    bool lock_warned;     /* said once that flock is not supported here */
    bool cap_warned; /* the cap is smaller than an entry: said once */
    struct jitop__mem_item *items;
    /* The remote tier (remote.c); NULL when none is configured. */
    struct jitop__remote *remote;
};

static inline int64_t jitop__wall_seconds(void)
{
    return (int64_t)time(NULL);
}

/* Logs on stderr when the cache is verbose (file.c). */
void jitop__cache_vlog(const jitop__cache *c, const char *fmt, ...) JITOP__PRINTF(2, 3);

/* Byte encoding (file.c). A growing buffer that remembers an
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
/* A list: its count (u32), then each string as jitop__wb_str writes it.
 * Each item carries its own length, so any byte (a newline in a path or
 * an option) survives the round trip. */
void jitop__wb_strv(struct jitop__wbuf *b, const jitop__strv *sv);
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
/* Reads a jitop__wb_strv list into out (empty on entry); sets bad on a
 * bound error or ENOMEM. The count is checked against the bytes left
 * before anything is allocated. */
void jitop__rb_strv(struct jitop__rbuf *r, jitop__strv *out);
XXH128_hash_t jitop__rb_hash(struct jitop__rbuf *r);

/* The common header: begin, append the payload, seal; check on reading. */
void jitop__file_begin(struct jitop__wbuf *b, const char *magic, uint32_t flags);
void jitop__file_seal(struct jitop__wbuf *b);
const char *jitop__file_check(const unsigned char *p, size_t n, const char *magic,
                              uint32_t *flags);

/* How often a step that found its directory gone (jitop clean in another
 * process moved the tree away) makes the directory again and starts over
 * before it gives up. Each retry is a few system calls; a clean takes far
 * longer than this many of them to come round again. */
#define JITOP__CACHE_RETRIES 32

/* Directories and their safety (file.c; ensure_dir in tree.c). ensure_dir
 * takes the root, the tree (c->vdir) or a directory below it, and makes
 * missing parents again, the tree with its marker. */
int jitop__cache_check_safe(const char *path, const struct stat *st);
int jitop__cache_ensure_dir(jitop__cache *c, const char *dir, int *err);
int jitop__cache_make_root(jitop__cache *c, int *err);
bool jitop__cache_unwritable_errno(int e);

/* Atomic write and checked read of one cache file (file.c; the retrying
 * write_atomic in tree.c). The retrying write makes dir (ensure_dir) and starts over when the directory
 * vanishes under it; write_once does one attempt in an existing dir. */
int jitop__cache_write_atomic(jitop__cache *c, const char *dir, const char *name,
                              const unsigned char *data, size_t len, bool durable, int *err);
/* Test seam: called with the temporary file's path between its write and
 * its rename (a concurrent jitop clean's window). NULL outside tests. */
extern void (*jitop__cache_write_hook)(const char *tmp);
/* Tests: called with each path jitop__cache_write_once fsyncs. */
extern void (*jitop__cache_fsync_hook)(const char *path);
int jitop__cache_write_once(const char *dir, const char *name, const unsigned char *data,
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

/* What jitop owns under the root (tree.c): the markers, the shape of
 * its names, adopting a tree made before markers existed, and clean.
 * ensure_tree makes (or checks) c->vdir with its marker; a tree that holds
 * anything jitop did not make is refused (JITOP_EUNSAFE). tag_root writes
 * the root's CACHEDIR.TAG where the root holds only jitop's names. */
bool jitop__is_hex(const char *s, size_t n);
int jitop__cache_ensure_tree(jitop__cache *c, int *err);
void jitop__cache_tag_root(jitop__cache *c);
/* Clean's part under the root: every marked tree (or unmarked one that
 * holds only jitop's names) is moved into a trash directory and its jitop
 * names deleted there; other trees and names stay, with a warning. */
int jitop__cache_clean_trees(jitop__cache *c);
/* Moves a directory found where a file of jitop's belongs to
 * "<path>.aside-XXXXXX" beside it (removes it when empty), with a warning:
 * jitop deletes only its own files, and the name is free again (file.c). */
void jitop__cache_move_aside(const jitop__cache *c, const char *path);
/* flock's answer where the filesystem has no locks (NFS without a lock
 * daemon, some FUSE filesystems). */
bool jitop__cache_no_locks_errno(int e);
/* Removes the lock file at path unless someone holds it (a non-blocking
 * flock first; lockers check that the name still is the file they locked). */
void jitop__cache_remove_lock(const jitop__cache *c, const char *path);

/* Read-only mode and the in-memory fallback (file.c). Going read-only
 * says nothing; keeping the first entry in memory warns, once. */
void jitop__cache_go_readonly(jitop__cache *c, const char *path, int err);
bool jitop__cache_is_readonly(jitop__cache *c);
void jitop__cache_mem_put(jitop__cache *c, const char name[33], bool manifest,
                          struct jitop__wbuf *b);
int jitop__cache_mem_get(jitop__cache *c, const char name[33], bool manifest,
                         unsigned char **data, size_t *len, bool *found);
void jitop__cache_mem_clear(jitop__cache *c);

/* Entries (entry.c): read one (flags from jitop__read_flags; out may be
 * NULL), parse a checked entry file, serialize one (header included) for a
 * write, and the directory an entry's file goes in (malloc'd; NULL on
 * ENOMEM). */
int jitop__cache_entry_read(jitop__cache *c, const char key[33], int flags, jitop__entry *out,
                            bool *found);
const char *jitop__cache_entry_parse(const char key[33], unsigned char **bufp, size_t n,
                                     uint32_t flags, jitop__entry *e);
int jitop__cache_entry_serialize(const char key[33], const jitop__entry *e,
                                 struct jitop__wbuf *b);
char *jitop__cache_entry_dir(const jitop__cache *c, const char key[33]);

/* The local halves of jitop__cache_get / put / close, which remote.c
 * wraps with the remote tier. put_bytes writes a serialized entry (b is
 * consumed: written and freed, or kept in memory when read-only), then
 * evicts (cache.c); get_local reads one (entry.c); free releases
 * everything but the remote tier (cache.c). */
int jitop__cache_put_bytes(jitop__cache *c, const char key[33], struct jitop__wbuf *b);
int jitop__cache_get_local(jitop__cache *c, const char key[33], jitop__entry *out, bool *found);
void jitop__cache_free(jitop__cache *c);

/* Parses a checked manifest file (len bytes, header included): its deps
 * and the key they gave. *valid false (deps empty) when the payload is
 * malformed; an error only on ENOMEM (manifest.c). */
int jitop__manifest_parse(const unsigned char *data, size_t len, jitop__deps *deps,
                          char key[33], bool *valid);
/* The same with the instance lists (lists may be NULL). */
int jitop__manifest_parse_lists(const unsigned char *data, size_t len, jitop__deps *deps,
                                char key[33], jitop__instlist *lists, bool *valid);

/* Removes least-recently-used entries, with their manifests and unheld
 * locks, until entries and manifests fit in cap (negative: no cap); in gc
 * mode also invalid entries and manifests, manifests and unheld locks of
 * absent entries, and stale temporary files (walk.c). */
int jitop__cache_evict(jitop__cache *c, int64_t cap, bool gc, int64_t *freed);

/* The key a manifest file names, from its first bytes (magic, version and
 * the key; no checksum): for eviction, which needs only to know which
 * entry a manifest belongs to. false when unreadable or not a manifest. */
bool jitop__manifest_peek_key(const char *path, char key[33]);

#endif
