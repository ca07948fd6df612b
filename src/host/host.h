/*
 * The host room: C and C++ host sources to one shared object through the
 * cache, the host half of the data flow's top. Its files, each using only
 * those before it:
 *   compiler.c  the compiler ($CC / $CXX, else cc / c++): found on PATH,
 *               its identity (resolved path + `--version`), running it with
 *               its output captured, reading its -MMD dependency file
 *   object.c    one source to one object entry: manifest, stat fast path,
 *               key, per-unit lock, compile, atomic write
 *   ninja.c     the same objects built by ninja (build.ninja per module,
 *               deps = gcc), published into the cache afterwards
 *   modmanifest.c  the module's manifest: every file of every object and
 *               the linked .so's key, for a warm load's one read
 *   library.c   every object (in parallel, or through ninja), then the link
 *               to one .so entry
 * Objects and shared objects are ordinary cache entries (arch "host"): the
 * same checksums, atomic writes, locks, ownership checks and eviction as
 * cubins. Nothing here loads code: the load room dlopens the result.
 * May include: base, compile, cache, build. Included by the load room and
 * above, and by the CLI's privileged files.
 */
#ifndef JITOP_HOST_ROOM_H
#define JITOP_HOST_ROOM_H

#include "build/build.h"

/* Whether a path names a host source (.c .cc .cpp .cxx, and .C). */
bool jitop__host_is_source(const char *path);

/* The options of a module split by kind: "-Xhost=FLAG" is a host compile
 * flag, "-Xhost-ld=FLAG" a host link flag; -D, -U and -I apply to both
 * kinds (an -I made absolute); anything else is the device's. Host flags
 * that would change what jitop asks of the compiler (-o, -c, -E, -S, -M*,
 * -shared, -x) are refused with JITOP_EINVAL naming the option. */
int jitop__host_split_options(const char *const *options, size_t n, jitop__strv *device,
                              jitop__strv *cflags, jitop__strv *ldflags);

/* ----------------------------------------------------------- compiler.c */

/* A compiler as found now: the program ($CC's or $CXX's first word, else
 * cc / c++), the extra words of the variable, its resolved path and stat
 * data (a dep record whose hash is that of its identity, filled only by
 * jitop__host_cc_identify). */
typedef struct jitop__host_cc {
    bool cxx;
    char *var;          /* "CC" or "CXX" */
    char *asked;        /* the variable's value, or the default */
    jitop__strv argv0;  /* the program (resolved path) and the variable's extra words */
    jitop__dep rec;     /* path: the resolved program */
    bool identified;
} jitop__host_cc;

/* Finds the compiler (no process started): JITOP_ENOTFOUND naming the
 * variable and the program when PATH has none. */
int jitop__host_cc_find(bool cxx, jitop__host_cc *out);
/* Runs `compiler --version` (once per process per compiler file: cached by
 * its stat data) and sets rec.hash to the hash of path + output. */
int jitop__host_cc_identify(jitop__host_cc *cc);
void jitop__host_cc_free(jitop__host_cc *cc);

/* Runs argv (argv[0] a path) in the current directory; *log gets stdout and
 * stderr together (malloc'd, NUL-terminated), *exit_code the exit status
 * (-1: killed by a signal). */
int jitop__host_run(const char *const *argv, char **log, int *exit_code);
/* The same for a list (a NULL-terminated copy of its pointers is made). */
int jitop__host_run_strv(const jitop__strv *argv, char **log, int *exit_code);

/* The prerequisites of a make rule as gcc -MMD writes them (escaped spaces,
 * line continuations, "$$"): appended to out as absolute paths. */
int jitop__host_depfile_parse(const char *text, jitop__strv *out);

/* Where jitop_host.h is: $JITOP_INCLUDE_DIR, else the installed include
 * folder, else the source tree's include/ (static storage). */
const char *jitop__host_include_dir(void);

/* ------------------------------------------------------------- object.c */

/* One translation unit of host code. */
typedef struct jitop__host_unit {
    char *path;          /* absolute source path */
    bool cxx;
    bool runtime;        /* jitop's runtime object: jitop_host.h compiled as C */
    jitop__strv flags;   /* every compile flag, in order (what enters the key) */
} jitop__host_unit;

/* flags: the module's host compile flags; the fixed ones (-fPIC
 * -fvisibility=hidden, -fno-gnu-unique for C++, -I include_dir: where
 * jitop_host.h is, jitop__host_include_dir's answer, asked once per
 * module build since it probes the file system) are added here. */
int jitop__host_unit_init(jitop__host_unit *u, const char *path, bool runtime,
                          const jitop__strv *cflags, const char *include_dir);
void jitop__host_unit_free(jitop__host_unit *u);

/* One object built. */
typedef struct jitop__host_obj {
    char key[33];
    bool cached;
    /* Why it was (re)built, for JITOP_VERBOSE ("no manifest", "header.h
     * changed", ...); NULL on a hit. */
    char *why;
    jitop__deps deps;       /* [0] the compiler, [1] the source, then headers */
    jitop__binary bin;      /* the object's bytes; read only when asked */
} jitop__host_obj;
void jitop__host_obj_free(jitop__host_obj *o);

/* Builds u through the cache with cc (found, not yet identified). read:
 * also read the object's bytes (a link needs them). Concurrent processes
 * building the same unit compile it once (a lock per unit). A compile
 * error: JITOP_ECOMPILE with the compiler's output (file:line), nothing
 * written. */
int jitop__host_obj_build(jitop_ctx *ctx, const jitop__host_unit *u, jitop__host_cc *cc, bool read,
                          jitop__host_obj *out);
/* The key of u from its manifest when the stat fast path vouches for every
 * file, else *found false. Reads nothing else. */
int jitop__host_obj_fresh(jitop_ctx *ctx, const jitop__host_unit *u, const jitop__host_cc *cc,
                          jitop__host_obj *out, bool *found);
/* Stores a compiled object under the key its files give (cc identified,
 * deps hashed: [0] the compiler, [1] the source, then headers) and writes
 * the unit's manifest. */
int jitop__host_obj_publish(jitop_ctx *ctx, const jitop__host_unit *u, const jitop__host_cc *cc,
                            jitop__deps *deps, const unsigned char *data, size_t size,
                            const char *log, char key[33]);
/* The manifest id of a unit built with cc, and the lock taken on it. */
void jitop__host_obj_id(const jitop__host_unit *u, const jitop__host_cc *cc, char id[33]);
/* Deps from a -MMD file: [0] the compiler record, then every file it lists,
 * each read and hashed; *changed when one changed since since_ns (it may
 * have changed while the compiler read it: compile again). */
int jitop__host_deps_from_depfile(const jitop__host_cc *cc, const char *depfile, int64_t since_ns,
                                  jitop__deps *out, bool *changed);
/* Records in d->dirs the folders where the compiler looked for d's files:
 * each file's own folder and the include path's (-I, -iquote, -isystem,
 * -idirafter of u's flags and $CC's words), with their stat data. A file
 * created there later can shadow a header found further on: the stat
 * fast path then does not vouch and the files are listed again. One
 * changed since since_ns sets *changed. */
int jitop__host_deps_add_dirs(const jitop__host_unit *u, const jitop__host_cc *cc,
                              int64_t since_ns, jitop__deps *d, bool *changed);
/* Whether every folder of d->dirs is as recorded (none recent). */
bool jitop__host_dirs_same(const jitop__deps *d);
/* Appends to to->dirs each folder of from->dirs it lacks, with its record
 * as taken (a module's list: every object's folders once each). */
int jitop__host_dirs_merge(jitop__deps *to, const jitop__deps *from);

/* Test seam (like build.h's): called before each host compiler run with
 * the source path. NULL in normal use. */
extern void (*jitop__host_before_compile_hook)(const char *source);

/* -------------------------------------------------------------- ninja.c */

/* The ninja to use: $JITOP_NINJA (a path; "0" never), else ninja on PATH.
 * NULL when none (static storage otherwise). */
const char *jitop__host_ninja(void);

/* Builds the objects of units[0..n) that are not fresh with ninja in a
 * build folder of the module (build.ninja written there: one compile edge
 * per unit with deps = gcc and depfile, one link edge: ld -shared with
 * ldflags), then publishes each object into the cache. objs[i] is filled
 * as jitop__host_obj_build would (with the bytes), *so with the linked
 * object's bytes (the caller stores it under the link's key). */
int jitop__host_ninja_build(jitop_ctx *ctx, const char *ninja, const char *label,
                            jitop__host_unit *units, size_t n, jitop__host_cc *ccs,
                            jitop__host_obj *objs, const jitop__host_cc *ld,
                            const jitop__strv *ldflags, jitop__binary *so);

/* ------------------------------------------------------ modmanifest.c */

/* The shared object of one module's host sources. */
typedef struct jitop__host_lib jitop__host_lib;

/* The id of a module's manifest: its units' ids (path, kind, flags, the
 * compiler as asked), the linker as asked and the link flags. */
void jitop__host_lib_id(const jitop__host_unit *units, const jitop__host_cc *ccs, size_t n,
                        const jitop__host_cc *ld, const jitop__strv *ldflags, char id[33]);
/* The linked object from the module's manifest when its stat data vouch
 * for every file and it records exactly the compilers ccs[0..ncc) found
 * now: *found, and out filled as jitop__host_lib_build fills it on a hit
 * (the entry read and checksummed; deps without the compilers). Else
 * *found false and nothing but the manifest read. */
int jitop__host_lib_fresh(jitop_ctx *ctx, const char id[33], const jitop__host_cc *const *ccs,
                          size_t ncc, jitop__host_lib *out, bool *found);
/* Writes the module's manifest: every dep of objs[0..n) (compilers
 * included, once each), every folder of theirs (once each, as the objects
 * recorded it) and the link's key. A failure costs only speed. */
void jitop__host_lib_remember(jitop_ctx *ctx, const char id[33], const jitop__host_obj *objs,
                              size_t n, const char key[33]);

/* ------------------------------------------------------------ library.c */

struct jitop__host_lib {
    char key[33];
    bool cached;
    jitop__deps deps;       /* every file of every object (sources and headers) */
    jitop__binary bin;      /* the .so's bytes */
    char *builder;          /* "ninja", "jitop" or "cache": what built it */
};
void jitop__host_lib_free(jitop__host_lib *l);

/* Builds (through the cache) the shared object of sources (absolute paths)
 * with cflags and ldflags: each source one object, plus jitop's runtime
 * object, linked with -shared by $CXX when any source is C++, else $CC.
 * label names the module in messages and verbose lines. */
int jitop__host_lib_build(jitop_ctx *ctx, const char *label, const jitop__strv *sources,
                          const jitop__strv *cflags, const jitop__strv *ldflags,
                          jitop__host_lib *out);

#endif
