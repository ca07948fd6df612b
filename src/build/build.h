/*
 * The build room: one unit to one binary through the cache, the data flow's
 * top half. Stat fast path -> key -> cache -> per-key lock -> compile ->
 * atomic write, and jitop_build / jitop_explain on top of it; relocatable
 * units to one linked image through the cache (link.c). Never opens
 * the driver: with no arch given it asks jitop_ctx_arch (base), which asks
 * the device through the query jitop_ctx_create put in the context.
 * May include: base, compile, cache. Included by the load room and above,
 * and by the CLI's privileged files (tools/cli.h says which).
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
    bool needs_inputs;    /* a link that missed with inputs not in hand: nothing built */
    /* Set on JITOP_ENOTFOUND when the answer is that a name expression
     * names nothing in the unit (jitop__binary.unresolved), compiled now or
     * read from the cache; the rest of the struct is empty then. */
    bool unresolved;
    double ms;
    jitop__deps deps;     /* every file the binary was built from */
    /* The sizes of the files this call scanned, summed (0 when it scanned
     * none: a fast-path hit): a miss's estimate of its compile's length. */
    int64_t input_bytes;
    jitop__entry entry;
    /* A source (see the fold rule below): built, the name expressions
     * compiled into this binary (its unit's names, so in out->key); asked,
     * every one asked of the source, as its manifest now says (no bins).
     * Empty for any other unit. */
    jitop__instlist inst;
} jitop__built;

/* The fold rule: one program per (source, options, arch). A source unit
 * (no name expressions, not relocatable) is compiled with the template
 * instances asked of it, nvrtcAddNameExpression for each, as one binary:
 * its manifest keeps the lists (jitop__instlist), and the names (sorted:
 * one set, one key) are the unit's names, so they are in the key.
 *   - The fold's names: the caller's (declared at load, a prewarm's, a
 *     reload's instances in use; always in), the asked list's and the
 *     built list's, while they number at most the cap (jitop__fold_max);
 *     over it the caller's alone (with none: the cap most recent asked).
 *     Each NVRTC instance costs about as much as the source's own front
 *     end (tens to hundreds of ms for layernorm), so a binary grows by folding only
 *     up to the cap: past it, a shape's prewarm or cold load compiles its
 *     own names, never those of every shape asked before.
 *   - asked: most recent first, capped; a name that drops out is compiled
 *     on its own when asked again, as any first-asked one, and rejoins.
 *   - bins: the other binaries compiled for the same file contents (the
 *     built list a compile replaced, and the bins before it, less any a
 *     newer one holds; at most JITOP__FOLD_BINS_MAX), so that a load
 *     declaring a shape prewarmed before (or a prewarm of it again) takes
 *     its binary with no compile, and a get of a name in one of them
 *     (jitop__build_unit_known) too. A file's content changing drops them.
 *   - stat fast path: the binary of the built list, or of the first bin,
 *     that holds what the build wants (the caller's names; jitop_build and
 *     a prewarm: the fold's), else with no caller's names the built list's;
 *   - files changed: that binary if the cache has it for the files as
 *     they are (a touch: no compile); else one compile of the fold's names.
 *     A name asked since the last compile joins the binary there, never
 *     earlier: an instance first asked later is compiled on its own
 *     (jitop__build_join adds it to the list), so that one rare instance
 *     never recompiles all the others.
 *   - a fold that does not compile (a name the edited source no longer
 *     declares or instantiates) is compiled again without names, and the
 *     lists start empty: the instances are then compiled on their own and
 *     say what is wrong with them. */

/* The fold cap: at most this many names grow a source's binary by folding
 * (the rule above) and stay in its asked list. JITOP_FOLD_MAX (0 to
 * JITOP__FOLD_MAX_LIMIT; 0: nothing but the caller's names is ever folded
 * in), else JITOP__FOLD_MAX_DEFAULT; another value is logged and ignored. */
#define JITOP__FOLD_MAX_DEFAULT 32
#define JITOP__FOLD_MAX_LIMIT 4096
/* The most other binaries a manifest names (its size is read on every warm
 * load: 64 lists of 5 layernorm names is ~20 KB). */
#define JITOP__FOLD_BINS_MAX 64
size_t jitop__fold_max(jitop_ctx *ctx);

/* jitop__build_unit of a source with extra name expressions to fold in
 * when it must be compiled (a reload: its module's instances in use). */
int jitop__build_unit_fold(jitop_ctx *ctx, const jitop__unit *u, const jitop__strv *extra,
                           jitop__built *out);
/* jitop_build of a source with names folded in now (a prewarm of what the
 * ops will ask: the binary a load then finds through the manifest, with no
 * compile; with others asked only as the rule above says). A binary of the
 * lists that holds them all already is a hit. names may be NULL. A name
 * a fold that fell back left out is built alone (what a get of it then
 * finds); one that does not build fails the call with its own error. */
int jitop__build_fold(jitop_ctx *ctx, const char *path, const char *arch,
                      const char *const *options, size_t noptions, const jitop__strv *names,
                      jitop_build_result *result);
/* jitop__build_unit (defer: jitop__build_unit_deferred) of a source with
 * the instances declared at its load (jitop_load's -instance=) folded in
 * when it must be compiled (with others asked as the rule above says): a
 * cold load compiles them with the source, one program, and their gets
 * compile nothing. A binary of the lists that holds them is taken (a shape
 * prewarmed before); with none, the built list's binary is taken as it is:
 * a name declared since is then compiled at its first get, as any
 * instance (its own binary, or a bin's that holds it). */
int jitop__build_unit_declared(jitop_ctx *ctx, const jitop__unit *u, bool defer,
                               const jitop__strv *declared, jitop__built *out);
/* Puts name (canonical) first in the asked list of source u's manifest
 * (most recent first; the oldest past the cap drop out), unless it is
 * first already (or u has no manifest: never built through the cache). A
 * failure costs only speed: logged, not returned (but ENOMEM). */
int jitop__build_join(jitop_ctx *ctx, const jitop__unit *u, const char *name);
/* Whether u is a unit the fold rule applies to. */
bool jitop__unit_folds(const jitop__unit *u);

/* Stat fast path -> key -> cache -> lock -> compile -> write. */
int jitop__build_unit(jitop_ctx *ctx, const jitop__unit *u, jitop__built *out);
/* The same for a binary that may be needed later or never: when the stat
 * fast path finds the entry, it is marked used (jitop__cache_touch) but not
 * read, and out->deferred is set. Anything else builds as above. */
int jitop__build_unit_deferred(jitop_ctx *ctx, const jitop__unit *u, jitop__built *out);
/* The same for a unit whose files are known already: another unit of the
 * same source, options and include paths (a template instance of a source
 * its module loaded) read them as known. The key follows from known, with
 * no manifest read and no stat; when the cache lacks that key, an instance
 * takes a binary of its source's lists that holds it (the fold rule's
 * bins: out->key is that binary's, and out->entry.bin.names lists every
 * name in it: the instance's lowered name is at its own name's index),
 * else this is jitop__build_unit (which sees the files as they are now). */
int jitop__build_unit_known(jitop_ctx *ctx, const jitop__unit *u, const jitop__deps *known,
                            jitop__built *out);
/* Would jitop__build_unit hit? If not, *why says what changed. */
int jitop__explain_unit(jitop_ctx *ctx, const jitop__unit *u, bool *hit, char **why);
/* jitop_build when the cache holds the binary, and nothing else: *hit
 * then, with result filled as jitop_build fills it (its ms covers the
 * whole call: the stat checks, and the hashing when they do not vouch).
 * A miss leaves the cache as it was and sets result->ms to the time the
 * check took (the CLI adds it to the compile's). Costs the stat fast path,
 * or one hashing pass when that fails; never a compile, and never the walk
 * of the cache that explaining a miss may take (the CLI's hit pass). A
 * cached answer that the unit declares no such name fails as jitop_build
 * does (JITOP_ENOTFOUND with NVRTC's errors). input_bytes (may be NULL):
 * on a miss, the bytes of the source and every file it includes (the
 * CLI's longest-first order: jitop__built.input_bytes). */
int jitop__build_if_cached(jitop_ctx *ctx, const char *path, const char *arch,
                           const char *const *options, size_t noptions,
                           const char *const *names, size_t nnames, bool *hit,
                           jitop_build_result *result, int64_t *input_bytes);
void jitop__built_free(jitop__built *b);

/* ------------------------------------------------------------- fork.c */

/* Before forking processes that build through ctx: the cache's once-per-
 * cache warnings (no file locks here) said now, so that the workers inherit
 * them as said; and the pushes this process queued sent, so that no push
 * is in flight on its push thread when it forks. */
void jitop__build_before_fork(jitop_ctx *ctx);
/* In a forked worker, after a build and before it answers (it ends with
 * _exit, which would drop a queued push): its pushes sent, and the remotes
 * that took key from it (jitop__cache_pushed's bits; 0 for a NULL key). */
uint64_t jitop__build_worker_pushes(jitop_ctx *ctx, const char *key);
/* In the parent: what a worker said it pushed, so that --push
 * (jitop_remote_push) sends each entry once. */
void jitop__build_note_pushed(jitop_ctx *ctx, const char *key, uint64_t mask);

/* -------------------------------------------------------------- pch.c */

/* NVRTC's precompiled headers for a compile (pch.c says when, and why it
 * is safe): jitop__pch_prepare before jitop__compile_pch, jitop__pch_finish
 * after it. Neither fails: no PCH is a slower compile, never a wrong one. */
typedef struct jitop__pch_plan {
    jitop__pch_req req; /* the request to pass to jitop__compile_pch */
    int slot;           /* -1: no PCH for this compile */
} jitop__pch_plan;
/* deps: the unit's files as just scanned and hashed (the build's scan). */
void jitop__pch_prepare(jitop_ctx *ctx, const jitop__unit *u, const char *text,
                        const jitop__deps *deps, jitop__pch_plan *plan);
void jitop__pch_finish(jitop_ctx *ctx, const jitop__unit *u, jitop__pch_plan *plan);
/* Removes the PCH files ctx's compiles made (a jitop_ctx_destroy hook). */
void jitop__pch_ctx_destroy(jitop_ctx *ctx);
/* For a build of several sources on jobs forked workers: the index of the
 * first source of the preamble that most sources share, when more than
 * jobs share it (marked so that its compile makes a PCH: compile it in the
 * parent, before forking, and the workers inherit the PCH); -1 when no
 * preamble is shared that widely or PCH is off. */
int jitop__pch_plan_sources(jitop_ctx *ctx, const char *const *paths, const char *const *archs,
                            size_t n, int jobs, const char *const *options, size_t noptions);
/* Before forking: a child then knows it is one (it uses its parent's PCH,
 * never makes one). */
void jitop__pch_before_fork(void);

/* What this process's compiles did with PCHs (tests and benchmarks). */
typedef struct jitop__pch_counts {
    unsigned created;   /* PCH files made */
    unsigned used;      /* compiles that used one */
    unsigned stale;     /* a PCH of the preamble not used: a file changed since it was made */
    unsigned fell_back; /* NVRTC could not use one: compiled again without */
} jitop__pch_counts;
jitop__pch_counts jitop__pch_counts_get(void);

/* ------------------------------------------------------------- link.c */

/* One unit of a link: its unit, its cache key, and its binary when in hand
 * (NULL or no data: not read). */
typedef struct jitop__link_input {
    const jitop__unit *unit;
    const char *key;
    const jitop__binary *bin;
} jitop__link_input;

/* The image linked from in[0..n), in that order, through the cache.
 * out->key is the link's key (jitop__link_key of the units' keys, the link
 * options of in[0]'s unit, nvJitLink's identity), so a hit needs no unit's
 * binary: it is read, or with defer only marked used (out->deferred). On a
 * miss with every binary in hand the units are linked under the key's
 * lock and the image stored; with some binary not in hand nothing is done
 * but out->needs_inputs (status OK): the caller asks again with them. A
 * link error is JITOP_ECOMPILE with nvJitLink's log. out->deps stays empty:
 * the units' files are their own. */
int jitop__build_link(jitop_ctx *ctx, const jitop__link_input *in, size_t n, bool defer,
                      jitop__built *out);

/* A test seam like the compile hooks below: called just before nvJitLink
 * runs, with the first unit's label (tests count links with it). */
extern void (*jitop__before_link_hook)(const char *label);

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
/* The same seam after each scan and hash of a unit's files on the slow
 * path (tests make the hashing take a known time with it). */
extern void (*jitop__after_scan_hook)(const char *source);

#endif
