/*
 * The base room: what every other room stands on. The public header, the
 * context struct and its teardown hooks (context.c), errors, verbose
 * logging, string lists, paths and file helpers (util.c). It calls nothing
 * above it.
 *
 * Rooms, bottom to top (each may include the headers of the rooms below it,
 * never above): base -> compile -> cache -> build -> load -> op -> watch,
 * and ops/ (the shipped ops) over the public API. Internal names are
 * jitop__*; nothing here is exported (-fvisibility=hidden).
 */
#ifndef JITOP_BASE_H
#define JITOP_BASE_H
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
#define JITOP__FORMAT_VERSION 2

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

/* jitop_ctx_create's part that needs nothing above base: a context with its
 * configuration resolved (cache dir, kernel dir, arch, cache cap, verbosity)
 * and no cache open yet (ctx->cache NULL). The cache room finishes it. */
int jitop__ctx_new(const jitop_config *cfg, jitop_ctx **out);

/* Registers fn (once: a second call with the same fn is a no-op) to run at
 * jitop_ctx_destroy. Call with ctx->lock held. */
int jitop__ctx_on_destroy(jitop_ctx *ctx, void (*fn)(jitop_ctx *ctx));


#endif
