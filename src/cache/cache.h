/*
 * The cache room: keys, the on-disk entry and manifest formats, atomic
 * writes, locks, listing, eviction and clean (its files, and the one way
 * their calls go, are listed in cache_private.h). Callers above hand it
 * units, their files and binaries; below it is only the filesystem.
 * May include: base, compile. Included by the build room and above.
 */
#ifndef JITOP_CACHE_H
#define JITOP_CACHE_H

#include "compile/compile.h"

int jitop__cache_open(const char *root, int64_t max_size, int verbose, jitop__cache **out);
void jitop__cache_close(jitop__cache *c);
const char *jitop__cache_root(const jitop__cache *c);

/* The key: XXH3-128 over the format version, NVRTC version, arch, options,
 * name expressions, and each dep's path and content hash. */
void jitop__cache_key(const jitop__unit *u, const jitop__deps *d, char key[33]);

/* A linked image's key: XXH3-128 over the format version, the arch, the
 * link options, nvJitLink's identity and each unit's key in link order
 * (each of which holds everything its own binary came from). */
void jitop__link_key(const char *arch, const jitop__strv *options, const char *const *keys,
                     size_t n, char key[33]);

/* One entry, as read or to be written. */
typedef struct jitop__entry {
    char *arch;
    char *nvrtc_version;
    jitop__strv options; /* the unit's normalized options, in order */
    /* The unit's files: its source path (or "inline:<name>" for inline
     * text), then every header. Stored as a counted list of
     * length-prefixed strings: a path may hold any byte but NUL. */
    jitop__strv sources;
    int64_t created;
    jitop__binary bin;
} jitop__entry;
void jitop__entry_free(jitop__entry *e);

/* Reads and validates an entry (magic, version, checksum). A missing or
 * invalid entry is *found = false (never an error), and an invalid one is
 * removed. */
int jitop__cache_get(jitop__cache *c, const char key[33], jitop__entry *out, bool *found);
/* Marks the entry under key used, as jitop__cache_get does, without
 * reading it: *found when that worked. Whether it is valid is learnt when it
 * is read. */
int jitop__cache_touch(jitop__cache *c, const char key[33], bool *found);
/* Writes an entry atomically (temporary file, fsync, rename). On an
 * unwritable or full cache: keeps it in memory, warns once, returns OK. */
int jitop__cache_put(jitop__cache *c, const char key[33], const jitop__entry *e);

/* A per-key lock (flock: released if the process dies). */
int jitop__cache_lock(jitop__cache *c, const char key[33], int *fd);
void jitop__cache_unlock(int fd);
/* Says now (once per cache, as jitop__cache_lock would at its first compile)
 * when this filesystem cannot lock (an flock of the locks directory fails
 * with ENOLCK or EOPNOTSUPP): for a process about to fork workers that
 * build through it, so that each inherits the warning as said instead of
 * saying it again. Creates nothing; a failure to ask is silent. */
void jitop__cache_probe_locks(jitop__cache *c);

/* The manifest of a unit (its deps with their stat data and the key they
 * gave), stored under an id that hashes everything but file contents. */
void jitop__manifest_id(const jitop__unit *u, char id[33]);
int jitop__manifest_get(jitop__cache *c, const char id[33], jitop__deps *deps, char key[33],
                        bool *found);
int jitop__manifest_put(jitop__cache *c, const char id[33], const jitop__deps *deps,
                        const char key[33]);

/* A source's instance lists, kept in its manifest (manifest.c; the build
 * room's fold rule, build/build.h, says how they are used). built: the name
 * expressions compiled into the binary of the manifest's key (in the key:
 * they are the unit's names); asked: the name expressions asked of the
 * source, most recent first, at most the fold cap; bins: the name lists of
 * other binaries compiled for the same file contents (each one's key is
 * the source's with that list as its names: a hint, looked up, never
 * trusted), most recent first. */
typedef struct jitop__instlist {
    jitop__strv built;
    jitop__strv asked;
    /* nbins lists: decoded in bins (NULL until jitop__instlist_bins), or
     * still the manifest's bytes in bins_raw (a read keeps them so, checked
     * but not decoded: the warm path needs them only when built will not
     * do, and decoding many lists on every warm read would cost more
     * than the read itself). A write takes bins when
     * decoded, else bins_raw as read. */
    jitop__strv *bins;
    size_t nbins;
    unsigned char *bins_raw;
    size_t bins_raw_len;
} jitop__instlist;
void jitop__instlist_free(jitop__instlist *l);
/* Decodes l's bins (nothing when decoded already or none). */
int jitop__instlist_bins(jitop__instlist *l);
/* jitop__manifest_get / _put with the lists (lists may be NULL: read
 * nothing / write none). A manifest without lists reads as empty ones. */
int jitop__manifest_get_lists(jitop__cache *c, const char id[33], jitop__deps *deps,
                              char key[33], jitop__instlist *lists, bool *found);
int jitop__manifest_put_lists(jitop__cache *c, const char id[33], const jitop__deps *deps,
                              const char key[33], const jitop__instlist *lists);


/* Whether a valid entry exists under key. Does not mark it used and leaves
 * an invalid one in place. */
int jitop__cache_peek(jitop__cache *c, const char key[33], bool *found);

/* The most recently used valid entry whose first source is source (a
 * path, or the inline unit's name). *found false when none. Walks the whole
 * cache: meant for explaining a miss, not for the build path. */
int jitop__cache_find_recent(jitop__cache *c, const char *source, jitop__entry *out,
                             char key[33], bool *found);

/* The first line of an entry's sources for a unit: its path, or
 * "inline:<name>" for inline text. Malloc'd (NULL on ENOMEM). */
char *jitop__unit_source_label(const jitop__unit *u);

/* The remote tier (remote.c). jitop__cache_get and jitop__cache_put above
 * go through it once it is set up: a local miss asks each live remote, a
 * write is pushed to each writable one from a background thread, and
 * jitop__cache_close drains that thread (at most about 2 s plus one PUT's
 * timeout). spec is JITOP_REMOTE_CACHE's syntax, secret_path the key file
 * or NULL. A spec or secret that cannot be used is warned about and leaves
 * the cache without a remote (fail-open); only ENOMEM is an error. */
int jitop__cache_remote_setup(jitop__cache *c, const char *spec, const char *secret_path);
enum { JITOP__REMOTE_NONE, JITOP__REMOTE_HIT, JITOP__REMOTE_MISS, JITOP__REMOTE_DOWN };
/* What the remotes answer for key, for jitop explain: HIT or MISS with
 * *where the (redacted) URL that answered, DOWN when none answered, NONE
 * when no remote is configured. Nothing is stored locally. */
int jitop__cache_remote_probe(jitop__cache *c, const char key[33], int *state, char **where);
/* Waits until every push this process queued has been sent or has failed
 * (each PUT is bounded by its remote's put-timeout). A process that ends
 * with _exit (a forked build worker) calls it first: _exit would drop the
 * queue. */
void jitop__cache_push_flush(jitop__cache *c);
/* The writable remotes that took key from this process: bit i for the
 * spec's i-th remote (i < 64); 0 with no remote. jitop_remote_push skips
 * them. */
uint64_t jitop__cache_pushed(jitop__cache *c, const char key[33]);
/* Records that another process (a forked worker, which said so) pushed key
 * to the remotes in mask, so that jitop_remote_push here skips them. */
void jitop__cache_note_pushed(jitop__cache *c, const char key[33], uint64_t mask);
/* Forgets which remotes this process found broken (tests only). */
void jitop__remote_forget_dead(void);

#endif
