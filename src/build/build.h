/*
 * The build room: one unit to one binary through the cache, the data flow's
 * top half. Stat fast path -> key -> cache -> per-key lock -> compile ->
 * atomic write, and jitop_build / jitop_explain on top of it.
 * May include: base, compile, cache.
 */
#ifndef JITOP_BUILD_H
#define JITOP_BUILD_H

#include "cache/cache.h"

/* ------------------------------------------------------------- build.c */

/* One unit built: the binary plus what the loader and hot reload need. */
typedef struct jitop__built {
    char key[33];
    bool cached;
    bool deferred;        /* a hit whose entry was not read: entry is empty */
    /* Set on JITOP_ENOTFOUND when the answer is that a name expression
     * names nothing in the unit (jitop__binary.unresolved), compiled now or
     * read from the cache; the rest of the struct is empty then. */
    bool unresolved;
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

/* Logs (verbose only) NVRTC's log of the binary of u, as a compiler prints
 * its warnings: at the compile, and at each hit that reads the entry (as
 * ccache does), so that a warning is not lost to the cache. cached: the
 * binary was read from the cache. */
void jitop__log_warnings(jitop_ctx *ctx, const jitop__unit *u, const jitop__binary *bin,
                         bool cached);

/* A test seam (build.c): when set, the build calls it after NVRTC returns
 * and before it checks the files again, with the unit's source name. Tests
 * use it to edit a header "during" a compile, or to die there, at a known
 * point rather than by racing a timer (which valgrind's scheduler loses).
 * NULL in normal use; set it only while no build runs. */
extern void (*jitop__after_compile_hook)(const char *source);
/* The same seam just before NVRTC runs (tests count compiles with it,
 * failed ones included). */
extern void (*jitop__before_compile_hook)(const char *source);

#endif
