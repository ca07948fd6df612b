/*
 * The base room: what every other room stands on. The public header, the
 * context struct, its teardown hooks and its arch (context.c), errors,
 * verbose logging, string lists, paths and file helpers (util.c).
 * May include: nothing of src/ (jitop.h and system headers). It calls
 * nothing above it: what the context needs from above (its cache, a way to
 * ask the device for its arch) jitop_ctx_create wires in (load/open.c).
 *
 * Rooms, bottom to top: base -> compile -> cache -> build -> host -> load ->
 * op -> watch -> ops. A room includes the headers of its own room and the rooms
 * below it, never above, and calls only their functions (public API
 * functions included); inside a room, calls between files go one way.
 * scripts/check-rooms.sh checks all of it (make test runs it first).
 * Internal names are jitop__*; nothing here is exported
 * (-fvisibility=hidden).
 */
#ifndef JITOP_BASE_H
#define JITOP_BASE_H

#include "jitop.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>

#define XXH_INLINE_ALL /* header-only xxHash: no run-time library to ship */
#include <xxhash.h>

/* Bumped whenever the entry or manifest layout, or what goes into a key,
 * changes: older entries then simply miss. */
#define JITOP__FORMAT_VERSION 4

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
/* Writes one verbose line ("jitop: " and the message) to stderr, for a
 * room's own log that decides itself whether to speak. */
void jitop__vlog(const char *fmt, va_list ap) JITOP__PRINTF(1, 0);

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
/* s with C-style escapes for the bytes that would break a line-oriented
 * text or a terminal: backslash as \\, newline, tab and carriage return
 * as \n, \t, \r, other control bytes (below 0x20, and 0x7f) as \xNN.
 * Other bytes, UTF-8 included, pass. Unambiguous: each escaped text reads
 * back to one string. Malloc'd; NULL on ENOMEM. */
char *jitop__escape(const char *s);
/* asprintf into a malloc'd string; NULL on ENOMEM. */
char *jitop__sprintf(const char *fmt, ...) JITOP__PRINTF(1, 2);

/* Reads a whole file, NUL-terminated (the NUL is not counted in *len). */
int jitop__read_file(const char *path, char **data, size_t *len);
/* Reads from fd into buf until size bytes are in or the end of the file
 * (a file may shrink or grow while it is read), retrying when a signal
 * interrupts. *got: the bytes read, also on failure. 0, or -1 with errno
 * set by the failed read. */
int jitop__read_upto(int fd, void *buf, size_t size, size_t *got);
/* Opens path for reading if it is a regular file, with *st its fstat. A
 * FIFO, device, socket or directory is refused (JITOP_EIO naming it and its
 * type) without blocking: opening a FIFO for reading would wait for a
 * writer forever. JITOP_ENOTFOUND when missing. */
int jitop__open_regular(const char *path, int *fd, struct stat *st);
/* path with the links of its last component followed (libnvrtc.so.13 ->
 * libnvrtc.so.13.0.88), into out: the name of the file it is. Links of the
 * directories above stay, since they do not change that name, and
 * realpath would read one per component (nine for
 * /usr/local/cuda/lib64/libnvrtc.so.13). Stops where a link cannot be read
 * or after 16 links (a loop). */
void jitop__last_link_target(const char *path, char *out, size_t cap);
/* Absolute path naming the file the kernel opens for path: "." and repeated
 * slashes dropped, every ".." resolved as the kernel does (after the links
 * before it: realpath of the part up to the last ".."), links elsewhere kept
 * as written. NULL with errno set on failure: ENOMEM, or why the current
 * directory could not be read for a relative path (ENOENT when it was
 * deleted). */
char *jitop__abspath(const char *path);
/* Reports a failed jitop__abspath(path) from errno: "out of memory", or
 * "cannot resolve PATH: <strerror>" (JITOP_EIO). Returns the status. */
int jitop__fail_abspath(const char *path);
/* The directory part of path: "/a/b" -> "/a", "/a" -> "/", "a" -> "".
 * Malloc'd; NULL on ENOMEM. */
char *jitop__dirname(const char *path);
/* The compute capability major of an arch name: sm_90 / sm_90a / compute_90
 * -> 9, sm_100 -> 10, sm_120 -> 12; -1 when it is none of these forms. */
int jitop__arch_major(const char *arch);
/* The compute capability as major * 10 + minor: sm_86 -> 86, sm_90a -> 90,
 * sm_120 -> 120; -1 as above. */
int jitop__arch_cc(const char *arch);
/* symbol as a C++ programmer writes it ("_Z3fooIfEvPT_" -> "void foo<float>(float*)")
 * through the C++ runtime's demangler (opened on first use); a name that is
 * not mangled, or that no demangler is there for, comes back as it is.
 * Malloc'd; NULL on ENOMEM or a NULL symbol (demangle.c). */
char *jitop__demangle(const char *symbol);
/* Monotonic clock in milliseconds. */
double jitop__now_ms(void);

/* 128-bit content hashes (XXH3-128) as 32 lowercase hex digits + NUL. */
void jitop__hash_hex(XXH128_hash_t h, char out[33]);
/* A key's fields (cache keys, host objects' keys): a string goes in
 * length-prefixed, so that ("ab", "c") and ("a", "bc") never hash alike
 * (NULL as ""); a number as its 8 bytes. Inline: out of line, GCC inlines
 * xxHash's update into key.c's one direct call and reports a false
 * -Warray-bounds there. */
static inline void jitop__hash_u64(XXH3_state_t *st, uint64_t v)
{
    XXH3_128bits_update(st, &v, sizeof v);
}
static inline void jitop__hash_str(XXH3_state_t *st, const char *s)
{
    uint64_t n = s ? strlen(s) : 0;
    jitop__hash_u64(st, n);
    if (n)
        XXH3_128bits_update(st, s, n);
}

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
    /* Asks the device for its arch ("sm_90"), starting the driver: set by
     * jitop_ctx_create (load/open.c) to the load room's query, so that
     * jitop_ctx_arch answers the rooms below load without calling up. */
    int (*device_arch)(jitop_ctx *ctx, char *arch, size_t cap);
    jitop__driver *driver;   /* NULL until the first load (load/cuda.c) */
    struct jitop_module *modules; /* loaded modules, newest first (load/module.c) */
    jitop__watch *watch;     /* NULL until the first jitop_watch (watch/reload.c) */
    jitop__ops_state *ops;   /* the shipped ops' loaded instances (ops/) */

    /* Teardown hooks, run last-registered-first by jitop_ctx_destroy: each
     * part registers one when it first attaches state to the context, so
     * the watch (registered after the driver) stops before modules are
     * unloaded, and the driver is released last. */
    struct jitop__ctx_hook {
        void (*fn)(jitop_ctx *ctx);
    } hooks[8];
    int nhooks;
};

/* jitop_ctx_create's part that needs nothing above base: a context with its
 * configuration resolved (cache dir, kernel dir, arch, cache cap, verbosity)
 * and no cache open yet (ctx->cache NULL). The cache room finishes it. */
int jitop__ctx_new(const jitop_config *cfg, jitop_ctx **out);

/* Parses a byte size ($JITOP_CACHE_MAX_SIZE): decimal digits with an
 * optional fraction and an optional K, M, G or T (powers of 1024), then an
 * optional "B" or "iB": "4096", "64K", "1.5G", "512MiB". A fraction must
 * give whole bytes' worth (a fraction of a byte is refused, not rounded to
 * 0, which callers read as "the default"). A negative size ("-1") gives -1:
 * no cap. Hex, exponents, blanks, inf and nan are refused, as is anything
 * at or above 2^63 bytes. JITOP_EINVAL (no message) on bad text. */
int jitop__parse_size(const char *s, int64_t *out);

/* Registers fn (once: a second call with the same fn is a no-op) to run at
 * jitop_ctx_destroy. Call with ctx->lock held. */
int jitop__ctx_on_destroy(jitop_ctx *ctx, void (*fn)(jitop_ctx *ctx));


#endif
