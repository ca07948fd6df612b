/*
 * What the library's files share and users never see. Internal names are
 * jitop__*; nothing here is exported (-fvisibility=hidden).
 *
 * Files and their one idea each (headers: core_private.h is what the core
 * files share beyond this one, cache_private.h what the cache files share,
 * cuda_driver.h the driver table, loader.h modules and ops, watch.h hot
 * reload, ops_state.h the shipped ops' per-context state):
 *   util.c       errors (thread-local message), string lists, file helpers
 *   context.c    jitop_ctx: configuration, cache root, arch, version
 *   deps.c       a unit's dependency list: include scanning, stat, hashing,
 *                the stat fast path
 *   compile.c    NVRTC: option normalization, compile, logs, name expressions
 *   cache.c      the cache object: open, read-only mode and its in-memory
 *                fallback, entries, locks
 *   cache_file.c the cache's file format, directories, atomic writes,
 *                checked reads
 *   cache_key.c  keys and manifest ids
 *   cache_manifest.c  stat manifests
 *   cache_walk.c list, gc, LRU eviction, clean, explain's search
 *   build.c      one unit to one binary: stat fast path, key, cache, lock,
 *                compile (jitop_build / jitop_explain)
 *   cuda.c       the CUDA driver through dlopen: the only file that calls it
 *   jit_loader.c modules: load through the cache, images, reload, teardown
 *   jit_ops.c    ops: the op table, template instances, bindings, launches
 *   watcher.c    which watched files changed (inotify, coalescing)
 *   watch.c      hot reload: background rebuilds of the changed targets
 *   layernorm.c, lltm.c  the shipped ops' C entry points
 */
#ifndef JITOP_INTERNAL_H
#define JITOP_INTERNAL_H

#include "jitop.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define XXH_INLINE_ALL /* header-only xxHash: no run-time library to ship */
#include <xxhash.h>

/* Bumped whenever the entry or manifest layout, or what goes into a key,
 * changes: older entries then simply miss. */
#define JITOP__FORMAT_VERSION 1

#define JITOP__DEFAULT_CACHE_MAX ((int64_t)1 << 30) /* 1 GiB */

#if defined(__GNUC__)
#define JITOP__PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define JITOP__PRINTF(f, a)
#endif

/* ------------------------------------------------------------- util.c */

/* Records a formatted message as this thread's jitop_errmsg() and returns
 * status, so that failures read `return jitop__fail(JITOP_EIO, "...")`. */
int jitop__fail(int status, const char *fmt, ...) JITOP__PRINTF(2, 3);
/* Prepends "prefix: " to this thread's message (adds context as an error
 * travels up) and returns status. */
int jitop__fail_prefix(int status, const char *fmt, ...) JITOP__PRINTF(2, 3);
void jitop__clear_error(void);

/* Verbose output (JITOP_VERBOSE / config.verbose) goes through this. */
void jitop__log(const jitop_ctx *ctx, const char *fmt, ...) JITOP__PRINTF(2, 3);

/* A growable list of owned strings. */
typedef struct jitop__strv {
    char **v;
    size_t n, cap;
} jitop__strv;
int jitop__strv_push(jitop__strv *sv, const char *s); /* copies s */
int jitop__strv_pushf(jitop__strv *sv, const char *fmt, ...) JITOP__PRINTF(2, 3);
void jitop__strv_free(jitop__strv *sv);
/* Joins with sep into a malloc'd string (NULL on ENOMEM). */
char *jitop__strv_join(const jitop__strv *sv, const char *sep);

char *jitop__strdup(const char *s);
/* asprintf into a malloc'd string; NULL on ENOMEM. */
char *jitop__sprintf(const char *fmt, ...) JITOP__PRINTF(1, 2);

/* Reads a whole file, NUL-terminated (the NUL is not counted in *len). */
int jitop__read_file(const char *path, char **data, size_t *len);
/* path with the links of its last component followed (libnvrtc.so.13 ->
 * libnvrtc.so.13.0.88), into out: the name of the file it is. Links of the
 * directories above stay, since they do not change that name, and
 * realpath would read one per component (nine for
 * /usr/local/cuda/lib64/libnvrtc.so.13). Stops where a link cannot be read
 * or after 16 links (a loop). */
void jitop__last_link_target(const char *path, char *out, size_t cap);
/* Absolute, normalized path (no symlink resolution needed by callers).
 * NULL with errno set on failure: ENOMEM, or why the current directory
 * could not be read for a relative path (ENOENT when it was deleted). */
char *jitop__abspath(const char *path);
/* Reports a failed jitop__abspath(path) from errno: "out of memory", or
 * "cannot resolve PATH: <strerror>" (JITOP_EIO). Returns the status. */
int jitop__fail_abspath(const char *path);
/* The directory part of path: "/a/b" -> "/a", "/a" -> "/", "a" -> "".
 * Malloc'd; NULL on ENOMEM. */
char *jitop__dirname(const char *path);
/* Whether text mentions, as a whole word, the identifier of the template a
 * name expression instantiates ("ns::fwd<float, 4>" -> "fwd"): how the
 * source that can compile an instance is found among several. False when
 * the expression has no identifier. */
bool jitop__mentions_template(const char *text, const char *name_expr);
/* The compute capability major of an arch name: sm_90 / sm_90a / compute_90
 * -> 9, sm_100 -> 10, sm_120 -> 12; -1 when it is none of these forms. */
int jitop__arch_major(const char *arch);
/* Monotonic clock in milliseconds. */
double jitop__now_ms(void);

/* 128-bit content hashes (XXH3-128) as 32 lowercase hex digits + NUL. */
void jitop__hash_hex(XXH128_hash_t h, char out[33]);

/* ------------------------------------------------------------ context.c */

typedef struct jitop__cache jitop__cache;
typedef struct jitop__driver jitop__driver;
typedef struct jitop__watch jitop__watch;
typedef struct jitop__ops_state jitop__ops_state;

struct jitop_ctx {
    jitop_config cfg;        /* strings below are owned copies */
    char *cache_dir_owned;
    char *kernel_dir;        /* resolved kernel directory */
    char *arch;              /* resolved lazily by jitop_ctx_arch */
    int verbose;
    jitop__cache *cache;

    pthread_mutex_t lock;    /* guards modules, arch, driver start */
    jitop__driver *driver;   /* NULL until the first load (cuda.c) */
    struct jitop_module *modules; /* loaded modules, newest first (jit_loader.c) */
    jitop__watch *watch;     /* NULL until the first jitop_watch (watch.c) */
    jitop__ops_state *ops;   /* the shipped ops' loaded instances (layernorm.c, lltm.c) */

    /* Teardown hooks, run last-registered-first by jitop_ctx_destroy: each
     * part registers one when it first attaches state to the context, so
     * the watch (registered after the driver) stops before modules are
     * unloaded, and the driver is released last. */
    struct jitop__ctx_hook {
        void (*fn)(jitop_ctx *ctx);
    } hooks[8];
    int nhooks;
};

/* Registers fn (once: a second call with the same fn is a no-op) to run at
 * jitop_ctx_destroy. Call with ctx->lock held. */
int jitop__ctx_on_destroy(jitop_ctx *ctx, void (*fn)(jitop_ctx *ctx));

/* cuda.c: "sm_90" for the context's device (starts the driver if needed). */
int jitop__driver_arch(jitop_ctx *ctx, char *arch, size_t cap);

/* ----------------------------------------------------------- compile.c */

/* Everything that determines one binary except the contents of the files:
 * one translation unit for one arch. */
typedef struct jitop__unit {
    char *source_path;        /* absolute; NULL for inline text */
    char *source_name;        /* the name NVRTC reports in its log */
    char *inline_text;        /* load_inline's text, else NULL */
    jitop__strv options;      /* normalized NVRTC options, in order */
    jitop__strv include_dirs; /* the source's own directory, then each -I, absolute */
    jitop__strv names;        /* name expressions */
    char arch[32];            /* "sm_90" or "compute_90" */
    /* Ops asked for by name: a name whose identifier the source's own text
     * never mentions is refused (JITOP_ENOTFOUND) before NVRTC runs, so that
     * a typo costs no compile. Not part of the key: it changes no binary. */
    bool names_in_text;
} jitop__unit;

/* Builds a unit: normalizes the options (canonical spelling of -D/-U/-I/-std/
 * fast math/line info/-G/maxrregcount, -I made absolute, arch options
 * refused in favour of the arch argument) and collects the include dirs.
 * path or inline_text, not both. A bad option is JITOP_EINVAL naming it. */
int jitop__unit_init(jitop__unit *u, const char *path, const char *inline_text,
                     const char *const *options, size_t noptions,
                     const char *const *names, size_t nnames, const char *arch);
void jitop__unit_free(jitop__unit *u);

/* "13.0": the NVRTC jitop compiles with, for messages and --version only
 * (keys use the library file's identity). May load NVRTC. Static storage. */
const char *jitop__nvrtc_version(void);

/* A compiled binary with what the cache stores beside it. */
typedef struct jitop__binary {
    unsigned char *data;   /* cubin or PTX (NUL-terminated) */
    size_t size;
    bool is_ptx;
    jitop__strv names;     /* name expressions, in the unit's order */
    jitop__strv lowered;   /* their lowered (mangled) names, same order */
} jitop__binary;
void jitop__binary_free(jitop__binary *b);

/* Compiles the unit with NVRTC, reading the source from text (what was
 * hashed). On a source error: JITOP_ECOMPILE with the log (file:line). */
int jitop__compile(const jitop__unit *u, const char *text, jitop__binary *out);

/* ------------------------------------------------------------- cubin.c */

/* Bytes of __device__ variables in a cubin, which the driver allocates and
 * initializes at every load of it; 0 for PTX or bytes that are not a
 * well-formed ELF file. */
size_t jitop__cubin_global_bytes(const unsigned char *data, size_t size);

/* -------------------------------------------------------------- deps.c */

typedef struct jitop__dep {
    char *path;           /* absolute */
    int64_t size;
    int64_t mtime_ns;
    uint64_t ino, dev;
    XXH128_hash_t hash;   /* of the contents */
    /* The mtime was within JITOP__RECENT_WINDOW_NS of the moment the stat
     * was recorded: a same-size save later in the same timestamp tick would
     * leave size, mtime and inode as recorded, so this record never vouches
     * for the contents by itself (git's "racy clean"); only a hash does. A
     * manifest keeps the flag (and then no mtime). */
    bool recent;
} jitop__dep;

/* The files one unit reads: [0] is the source (absent for inline text), then
 * every header it includes, found by scanning #include "..." and <...>
 * recursively against the including file's directory and the include dirs.
 * A name that resolves nowhere is an NVRTC built-in header, covered by its
 * version. */
typedef struct jitop__deps {
    jitop__dep *v;
    size_t n;
} jitop__deps;

/* Scans and hashes. *text receives the source's text (malloc'd), the one
 * that is compiled, so that what is hashed is what is built. */
int jitop__deps_scan(const jitop__unit *u, jitop__deps *out, char **text);
/* Stat fast path: *fresh = 1 when every file's size, mtime and inode match
 * and no record is recent (see jitop__dep). Otherwise *why (malloc'd, may be
 * NULL) names the first file that differs. */
int jitop__deps_fresh(const jitop__deps *d, bool *fresh, char **why);
void jitop__deps_free(jitop__deps *d);
/* A deep copy (to is overwritten; empty on failure). */
int jitop__deps_copy(const jitop__deps *from, jitop__deps *to);

/* ------------------------------------------------------------- cache.c */

int jitop__cache_open(const char *root, int64_t max_size, int verbose, jitop__cache **out);
void jitop__cache_close(jitop__cache *c);
const char *jitop__cache_root(const jitop__cache *c);

/* The key: XXH3-128 over the format version, NVRTC version, arch, options,
 * name expressions, and each dep's path and content hash. */
void jitop__cache_key(const jitop__unit *u, const jitop__deps *d, char key[33]);

/* One entry, as read or to be written. */
typedef struct jitop__entry {
    char *arch;
    char *nvrtc_version;
    char *options;      /* '\n'-joined */
    char *sources;      /* '\n'-joined dep paths */
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

/* The manifest of a unit (its deps with their stat data and the key they
 * gave), stored under an id that hashes everything but file contents. */
void jitop__manifest_id(const jitop__unit *u, char id[33]);
int jitop__manifest_get(jitop__cache *c, const char id[33], jitop__deps *deps, char key[33],
                        bool *found);
int jitop__manifest_put(jitop__cache *c, const char id[33], const jitop__deps *deps,
                        const char key[33]);

/* ------------------------------------------------------------- build.c */

/* One unit built: the binary plus what the loader and hot reload need. */
typedef struct jitop__built {
    char key[33];
    bool cached;
    bool deferred;        /* a hit whose entry was not read: entry is empty */
    double ms;
    jitop__deps deps;     /* every file the binary was built from */
    jitop__entry entry;
} jitop__built;

/* Stat fast path -> key -> cache -> lock -> compile -> write. */
int jitop__build_unit(jitop_ctx *ctx, const jitop__unit *u, jitop__built *out);
/* The same for a binary that may be needed later or never: when the stat
 * fast path finds the entry, it is marked used (jitop__cache_touch) but not
 * read, and out->deferred is set. Anything else builds as above. */
int jitop__build_unit_deferred(jitop_ctx *ctx, const jitop__unit *u, jitop__built *out);
/* The same for a unit whose files are known already: another unit of the
 * same source, options and include paths (a template instance of a source
 * its module loaded) read them as known. The key follows from known, with
 * no manifest read and no stat; when the cache lacks that key, this is
 * jitop__build_unit (which sees the files as they are now). */
int jitop__build_unit_known(jitop_ctx *ctx, const jitop__unit *u, const jitop__deps *known,
                            jitop__built *out);
/* Would jitop__build_unit hit? If not, *why says what changed. */
int jitop__explain_unit(jitop_ctx *ctx, const jitop__unit *u, bool *hit, char **why);
/* jitop_explain's answer without its reason: costs the stat fast path, or
 * one hashing pass of the unit's files when that fails, and never the walk
 * of the cache that explaining a miss may take (the CLI's hit check). */
int jitop__build_would_hit(jitop_ctx *ctx, const char *path, const char *arch,
                           const char *const *options, size_t noptions,
                           const char *const *names, size_t nnames, bool *hit);
void jitop__built_free(jitop__built *b);

#endif
