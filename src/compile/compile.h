/*
 * The compile room: one translation unit from its files to a binary. Units
 * and their option normalization, NVRTC (nvrtc.c), the CUDA toolkit's
 * include folders (toolkit.c), the files a unit reads (the directives of a
 * text: scan.c; what a macro names: macros.c; the unit's list: resolve.c)
 * and their stat/hash freshness (deps.c), a look inside cubins (cubin.c),
 * the variables a binary defines (globals.c), and nvJitLink, which links
 * relocatable units into one binary (link.c).
 * Knows nothing of the cache: callers above hash, key and store.
 * May include: base. Included by every room above it.
 */
#ifndef JITOP_COMPILE_H
#define JITOP_COMPILE_H

#include "base/base.h"

/* ------------------------------------------------------------ nvrtc.c */

/* Everything that determines one binary except the contents of the files:
 * one translation unit for one arch. */
typedef struct jitop__unit {
    char *source_path;        /* absolute; NULL for inline text */
    char *source_name;        /* the name NVRTC reports in its log */
    char *inline_text;        /* load_inline's text, else NULL */
    jitop__strv options;      /* normalized NVRTC options, in order */
    /* The source's own directory, then each -I, then the CUDA toolkit's
     * include folders (toolkit.c), absolute: where the include scanner looks,
     * in NVRTC's order. Part of the key. */
    jitop__strv include_dirs;
    size_t toolkit_dirs;      /* how many of include_dirs, at the end, are the toolkit's */
    /* How many of include_dirs are the user's (the source's directory and
     * each -I); any after them are the toolkit's, never hashed whole by the
     * scanner's safe mode, and a directive it cannot resolve inside a header
     * found there is the toolkit's own (resolve.c). */
    size_t user_include_dirs;
    jitop__strv names;        /* name expressions */
    char arch[32];            /* "sm_90" or "compute_90" */
    /* -rdc (any spelling) or -dlto: the unit compiles to a relocatable
     * cubin (PTX for compute_XX), or with lto to LTO-IR, which only a link
     * makes loadable (jitop__link). Their canonical options ("-rdc=true",
     * "-dlto") are in options, so they are in the key. */
    bool relocatable;
    bool lto;
} jitop__unit;

/* Builds a unit: normalizes the options (canonical spelling of -D/-U/-I/-std/
 * fast math/line info/-G/maxrregcount, -I made absolute, arch options
 * refused in favour of the arch argument) and collects the include dirs.
 * path or inline_text, not both. A bad option is JITOP_EINVAL naming it. */
int jitop__unit_init(jitop__unit *u, const char *path, const char *inline_text,
                     const char *const *options, size_t noptions,
                     const char *const *names, size_t nnames, const char *arch);
void jitop__unit_free(jitop__unit *u);

/* The NVRTC library file jitop compiles with (or would): its path as the
 * loader opens it, "" when there is none. Free where NVRTC is in the
 * toolkit jitop was built against; otherwise it loads NVRTC (nvrtc.c). */
const char *jitop__nvrtc_file(void);

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
    char *log;             /* NVRTC's log of the compile (warnings); NULL when it said nothing */
    /* The compile's answer was that a name expression names nothing this
     * unit declares (every error NVRTC reported is in the name, none in the
     * source): no code, and log holds NVRTC's errors. Kept in the cache like
     * code, under the same key, so that asking again costs no compile: it is
     * what a fresh compile of those bytes answers. */
    bool unresolved;
} jitop__binary;
void jitop__binary_free(jitop__binary *b);
/* The lowered name of name expression name in bin (a binary may hold other
 * names beside it, in sorted order: a fold's or a bin's); a binary of one
 * name gives that one's; NULL when bin holds several and not name. */
const char *jitop__binary_lowered(const jitop__binary *bin, const char *name);

/* "sm_90", "sm_90a", "sm_100f", "compute_90": the forms NVRTC takes (2 or
 * 3 digits, an optional a or f). Says nothing of whether NVRTC supports it. */
bool jitop__arch_valid(const char *arch);

/* JITOP_OK when arch is valid and NVRTC compiles for it, by its number in
 * nvrtcGetSupportedArchs; otherwise JITOP_EINVAL with a message naming arch
 * and every arch NVRTC supports. Loads NVRTC (JITOP_ENVRTC when it cannot
 * be): not for the hit path. An NVRTC that cannot list its archs passes
 * every valid arch on to its own check. */
int jitop__nvrtc_check_arch(const char *arch);

/* Compiles the unit with NVRTC, reading the source from text (what was
 * hashed). On a source error: JITOP_ECOMPILE with the log (file:line). When
 * the only errors are in the name expressions (the unit declares no such
 * template or kernel, or the name does not parse): JITOP_ENOTFOUND, with
 * out->unresolved set and out->log holding NVRTC's errors (the rest of out
 * empty), so that the caller can keep that answer; out is freed in every
 * other failure. */
int jitop__compile(const jitop__unit *u, const char *text, jitop__binary *out);

/* A compile with NVRTC's precompiled headers (jitop__compile_pch). The
 * caller names the file; NVRTC creates it from the header stop of this
 * compile's source, or uses one made before in this process (NVRTC ties a
 * PCH to its heap in the process that made it and its forks). NVRTC checks
 * neither the headers' contents nor anything jitop keys on: the caller
 * (build/pch.c) decides when a PCH may be used. */
typedef struct jitop__pch_req {
    const char *create;   /* --create-pch FILE, or NULL */
    const char *use;      /* --use-pch FILE, or NULL (not both) */
    /* What happened: */
    bool created;         /* the file was made (nvrtcGetPCHCreateStatus) */
    bool said_created, said_used; /* NVRTC's log said so (that line is taken out) */
    bool exhausted;       /* the PCH heap was too small */
    bool heap_resized;    /* nvrtcSetPCHHeapSize was called: older PCHs are void */
    size_t heap_required;
    /* The compile went wrong with the PCH (NVRTC could not read or refused
     * it, an error not in the source) and was done again without: the
     * binary and log are those of a compile without PCH. */
    bool suspect, fell_back;
    char why[512];        /* why the PCH was not created or used, "" if it was */
} jitop__pch_req;

/* jitop__compile with pch's option (NULL or no file: jitop__compile). The
 * binary and its log are always what jitop__compile gives: NVRTC's line
 * about the PCH is taken out of the log, and a compile that went wrong
 * with the PCH is done again without it (fail-open, pch->fell_back).
 * Creating with a heap too small resizes it and compiles again. */
int jitop__compile_pch(const jitop__unit *u, const char *text, jitop__pch_req *pch,
                       jitop__binary *out);
/* Whether this NVRTC has the PCH calls (12.8 and later). Loads NVRTC. */
bool jitop__nvrtc_has_pch(void);

/* A name expression without the white space that does not change its
 * tokens, and one space after each comma: "f< float ,4 >" and "f<float,4>"
 * give "f<float, 4>", the spelling people write (and the one jitop_module_ops
 * and messages show). A space
 * stays between two identifiers or numbers ("unsigned int") and between two
 * operator characters that could otherwise run into one token ("> >",
 * "- -1"); literals are copied as they are. jitop__unit_init passes every
 * name through it, so that spellings of one name share one key (one
 * compile). Malloc'd; NULL on ENOMEM (nvrtc.c). */
char *jitop__name_canonical(const char *expr);

/* The failure a binary that is the answer "unresolved" stands for:
 * JITOP_ENOTFOUND naming the unit and the names, with NVRTC's errors
 * (nvrtc.c). */
int jitop__unresolved_fail(const jitop__unit *u, const jitop__binary *b);

/* ----------------------------------------------------------- toolkit.c */

/* The toolkit's search and hints are toolkit.c's; the process's own
 * toolkit (jitop__toolkit_get and the two calls that use it) is nvrtc.c's,
 * since it is found from the NVRTC jitop compiles with. */

/* Appends the CUDA toolkit's include folders to dirs: "<toolkit>/include"
 * and, on CUDA 13, "<toolkit>/include/cccl" (libcu++, CUB, Thrust). The
 * toolkit is the one NVRTC came from (its library folder's ../include),
 * else $CUDA_HOME, else the one jitop was built against: the first of these
 * holding cuda_fp16.h. Found once per process (a few stats). Appends
 * nothing when none is found: a header of it then fails to open, and
 * jitop__missing_header_hint says where jitop looked and what to set. */
int jitop__toolkit_include_dirs(jitop__strv *dirs);

/* For a compile log in which NVRTC could not open a header: a sentence on
 * what to do (a C++ standard library header: the libcu++ one to include
 * instead; no toolkit headers found: where jitop looked and that CUDA_HOME
 * names the toolkit). NULL when there is nothing to add. Malloc'd. */
char *jitop__missing_header_hint(const char *log);

/* The search behind both, for a given NVRTC file, $CUDA_HOME and built-in
 * toolkit (each may be NULL), so that tests can point it at folders of
 * their own; the process's own is jitop__toolkit_get(). */
typedef struct jitop__toolkit {
    char include[4096]; /* "<toolkit>/include", "" when none was found */
    char cccl[4096];    /* "<toolkit>/include/cccl" (CUDA 13), "" when absent */
    char tried[3 * 4096 + 64]; /* the folders looked at, ", "-separated */
} jitop__toolkit;
void jitop__toolkit_find(jitop__toolkit *t, const char *nvrtc_file, const char *cuda_home,
                         const char *built_home);
const jitop__toolkit *jitop__toolkit_get(void);
char *jitop__toolkit_hint(const jitop__toolkit *t, const char *log);

/* -------------------------------------------------------------- scan.c */

/* One directive that reads another file (#include, #include_next, #embed),
 * found by jitop__scan_includes. */
typedef struct jitop__include {
    char *name;    /* the header name between its quotes or brackets; NULL
                      when macros name the file (then see text) */
    char *text;    /* name NULL: what follows the directive name (comments as
                      one space), for messages */
    unsigned line; /* physical line of the directive, from 1 */
    bool quoted;   /* "name", not <name> */
    bool next;     /* #include_next */
    bool embed;    /* #embed: the file's bytes, not preprocessed */
} jitop__include;

/* A #define, for the directives whose file a macro names (scan.c). */
typedef struct jitop__define {
    char *name;
    /* What the macro stands for when that is a header name with its
     * delimiters ("\"x.h\"", "<x.h>") or one identifier; NULL for anything
     * else (function-like, several tokens, a number, nothing). */
    char *value;
} jitop__define;

typedef struct jitop__includes {
    jitop__include *v;
    size_t n, cap;
    jitop__define *defs; /* every #define of the text (a macro defined twice
                            the same way by two readings appears twice) */
    size_t ndefs, defcap;
} jitop__includes;

/* The directives of a text that read another file, each once, in the order
 * found, after the translation phases a preprocessor applies, and its
 * #defines (scan.c). JITOP_ENOMEM (no message set) is the only failure; out
 * is empty then. */
int jitop__scan_includes(const char *text, size_t len, jitop__includes *out);
void jitop__includes_free(jitop__includes *l);
/* The same answer with every character read through phases 1 and 2, no
 * fast path: the reference the tests compare jitop__scan_includes with. */
int jitop__scan_includes_reference(const char *text, size_t len, jitop__includes *out);

/* -------------------------------------------------------- scan_memo.c */

/* jitop__scan_includes of a text whose XXH3-128 hash (of exactly these len
 * bytes: jitop__dep.hash) is hash, answered from this process's memo when
 * the same bytes were scanned before (scan_memo.c). */
int jitop__scan_includes_memo(const char *text, size_t len, XXH128_hash_t hash,
                              jitop__includes *out);
/* Empties the memo; how many texts it holds (tests). */
void jitop__scan_memo_clear(void);
size_t jitop__scan_memo_size(void);

/* ------------------------------------------------------------ macros.c */

/* The object-like macros a unit's texts (jitop__includes.defs) and -D
 * options define, for the directives whose file a macro names. */
typedef struct jitop__macros {
    jitop__define *v;
    size_t n, cap;
} jitop__macros;

int jitop__macros_add(jitop__macros *m, const char *name, const char *value);
/* Each -DNAME=VALUE of options as a #define would give it: a header name or
 * an identifier as its value, NULL for anything else (-DNAME is 1). */
int jitop__macros_add_options(jitop__macros *m, const jitop__strv *options);
/* The header names macro name can stand for, delimiters kept, into out: the
 * value of every definition of it, identifiers followed (16 deep at most).
 * *known is false (out empty) when one of them cannot be known without
 * preprocessing: no definition at all, a value that is neither a header
 * name nor an identifier (function-like, several tokens), or a <name> with
 * a defined macro inside. Fails only with JITOP_ENOMEM. */
int jitop__macros_expand(const jitop__macros *m, const char *name, jitop__strv *out, bool *known);
void jitop__macros_free(jitop__macros *m);
/* Whether text is one C identifier. */
bool jitop__is_identifier(const char *text);

/* ------------------------------------------------------------- cubin.c */

/* Bytes of __device__ variables in a cubin, which the driver allocates and
 * initializes at every load of it; 0 for PTX or bytes that are not a
 * well-formed ELF file. */
size_t jitop__cubin_global_bytes(const unsigned char *data, size_t size);

/* -------------------------------------------------------------- link.c */

/* nvJitLink's options for linking units compiled with u's options (all
 * units of a module share them): the arch, -lto for LTO-IR, -ptx for a
 * compute_XX arch (which needs -dlto: JITOP_EINVAL otherwise), and what
 * the compile options mean at the link (line info, debug, register cap,
 * fast math under LTO). Appended to out. */
int jitop__link_options(const jitop__unit *u, jitop__strv *out);

/* Links relocatable binaries (cubin, PTX or LTO-IR: one per unit, names[i]
 * labelling in[i] in the log) into one loadable binary for arch: a cubin,
 * or PTX for a compute_XX arch. Code that launches kernels from the device
 * is linked with the toolkit's libcudadevrt.a: seen in a cubin's or PTX's
 * symbols, or for LTO-IR (opaque) from a link that failed for want of it,
 * which is then run again. It is otherwise left out: linked in, its own
 * kernels would join every module's list and ~200 KB its image. A link
 * error is JITOP_ECOMPILE with nvJitLink's log; no nvJitLink is
 * JITOP_ENVRTC naming where it was looked for. */
int jitop__link(const char *arch, const jitop__strv *options, const jitop__binary *const *in,
                const char *const *names, size_t n, jitop__binary *out);

/* The nvJitLink a link would use and the device runtime beside it, as
 * their file names and sizes ("libnvJitLink.so.13 98806736, libcudadevrt.a
 * 1234"): the linker's part of a linked image's key, found by stat (the
 * library is loaded only where it is not in the toolkit jitop was built
 * against), so that a cache hit never loads it. "unknown" without one. */
const char *jitop__nvjitlink_identity(void);

/* ----------------------------------------------------------- globals.c */

/* The symbols of the variables (__device__, __constant__) a binary defines,
 * appended to names (mangled for C++ names, as the driver's
 * cuModuleGetGlobal takes them): a cubin's symbol table objects, PTX's
 * file-scope .global/.const declarations (not .extern ones). The
 * compiler's own ($str...) are left out. A malformed binary gives what
 * could be read; only memory fails (JITOP_ENOMEM). */
int jitop__binary_globals(const jitop__binary *bin, jitop__strv *names);

/* -------------------------------------------------------------- deps.c */

typedef struct jitop__dep {
    char *path;           /* absolute, as jitop__abspath gives it */
    int64_t size;
    int64_t mtime_ns;
    /* The inode's change time: set by the kernel at every write, and unlike
     * the mtime it cannot be set back (touch -r, rsync -t, utimensat), so
     * that a same-size edit with the mtime restored is still seen (git
     * compares it too). Also changes on chmod, chown and link: a hash then
     * finds the contents unchanged. */
    int64_t ctime_ns;
    uint64_t ino, dev;
    XXH128_hash_t hash;   /* of the contents */
    /* The mtime or ctime was within JITOP__RECENT_WINDOW_NS of the moment
     * the stat was recorded: a same-size save later in the same timestamp
     * tick would leave the stat data as recorded, so this record never
     * vouches for the contents by itself (git's "racy clean"); only a hash
     * does. A manifest keeps the flag (and then no mtime). */
    bool recent;
} jitop__dep;

/* The files one unit reads: [0] is the source (absent for inline text), then
 * every file its directives read (jitop__scan_includes), resolved as NVRTC
 * resolves them (resolve.c). A name that resolves nowhere is an NVRTC
 * built-in header, covered by its version. */
typedef struct jitop__deps {
    jitop__dep *v;
    size_t n;
    /* NULL when every directive named its file. Else the scanner's safe
     * mode says here which directive it could not resolve and what it did
     * instead (resolve.c), for JITOP_VERBOSE and explain. */
    char *note;
    /* Safe mode could not bound what the unit may read: its binary must
     * never be stored in or served from the cache, and its files are never
     * fresh (note says why). */
    bool uncacheable;
    /* The directories where an include name was looked for and not found
     * (for each name, the deepest directory on its path that exists), with
     * their stat data taken before the look (size and hash unused). A file
     * created there later could shadow the one found further on, or appear
     * where none was: adding, removing or renaming an entry changes a
     * directory's mtime and ctime, and the stat fast path then does not
     * vouch. Kept in the manifest. */
    jitop__dep *dirs;
    size_t ndirs;
    /* The paths looked for and not found, checked again after a compile
     * (jitop__deps_changed). Only in a list just scanned: neither in a
     * manifest nor in a copy. */
    jitop__strv absent;
} jitop__deps;

/* Safe mode's bounds: what the scan hashes when a directive's file is named
 * by macros (resolve.c). Past either, the unit is not cached at all
 * (jitop__deps.uncacheable). Each file costs a stat on every fast-path
 * check and a manifest record. */
#define JITOP__SAFE_MAX_FILES 4096
#define JITOP__SAFE_MAX_BYTES ((int64_t)64 << 20)

/* Scans and hashes (resolve.c). *text receives the source's text
 * (malloc'd), the one that is compiled, so that what is hashed is what is
 * built. */
int jitop__deps_scan(const jitop__unit *u, jitop__deps *out, char **text);
/* Reads a file whole and records its stat data and content hash in dep
 * (its path untouched); *data receives the bytes, NUL-terminated (deps.c). */
int jitop__dep_read(const char *path, jitop__dep *dep, char **data, size_t *len);
/* Records st's mtime, ctime, inode and device in rec, and whether it is
 * recent (jitop__dep.recent), now (deps.c). */
struct stat;
void jitop__dep_set_stat(jitop__dep *rec, const struct stat *st);
/* Stat fast path: *fresh = 1 when every file's size, mtime, ctime and inode
 * match, every directory of d->dirs is as recorded, and no record is recent
 * (see jitop__dep). Otherwise *why (malloc'd, may be NULL) names the first
 * file or directory that differs. An uncacheable list is never fresh. */
int jitop__deps_fresh(const jitop__deps *d, bool *fresh, char **why);
void jitop__deps_free(jitop__deps *d);
/* A deep copy (to is overwritten; empty on failure). */
int jitop__deps_copy(const jitop__deps *from, jitop__deps *to);

/* A file whose mtime or ctime is this close to the moment its stat data was
 * recorded is never trusted by that stat data alone (jitop__dep.recent).
 * Timestamps have a granularity: ext4 stamps files from a coarse kernel
 * clock (a few ms), some network file systems to 1 s, FAT to 2 s. Two
 * writes within one tick, the second after we looked, leave size, mtime and
 * ctime unchanged (git calls this "racy clean"). The ctime counts: after
 * touch -r or chmod the mtime is old but the ctime is now, and a same-size
 * write in that tick would change neither. The test is against the time of the recording,
 * not of a later check: a manifest written in the tick of an edit must not
 * be trusted once the tick is old. 2 s covers the coarsest of these; the
 * cost is one content hash per check of a file saved less than 2 s before
 * it was last scanned, until a scan records it older. */
#define JITOP__RECENT_WINDOW_NS ((int64_t)2000000000)
/* The window in force: JITOP__RECENT_WINDOW_NS. Tests lower it to look at
 * the stat path on files they have just written, whose ctime (which no call
 * can set back) would otherwise keep them recent for 2 s (deps.c). */
extern int64_t jitop__recent_window_ns;

/* The mtime of a recent record read back from a manifest, which stores the
 * flag in place of the time (cache/manifest.c): no file has this mtime (it
 * is 292 years before 1970, and the ns count of such a time overflows). */
#define JITOP__MTIME_UNKNOWN INT64_MIN

/* The dep of d whose path is path, NULL when none (deps.c). */
const jitop__dep *jitop__deps_find(const jitop__deps *d, const char *path);

/* d into a key (the cache's and the host objects'): the count, then each
 * file's path and content hash. */
static inline void jitop__deps_hash(XXH3_state_t *st, const jitop__deps *d)
{
    jitop__hash_u64(st, d->n);
    for (size_t i = 0; i < d->n; i++) {
        XXH128_canonical_t c;
        XXH128_canonicalFromHash(&c, d->v[i].hash);
        jitop__hash_str(st, d->v[i].path);
        XXH3_128bits_update(st, c.digest, sizeof c.digest);
    }
}

/* After a compile: did any file change since it was scanned, or appear
 * where an include name was not found? NVRTC read the files itself, so a
 * header saved during the compile may be in the binary while the key holds
 * its old hash. Stat differences say so; a recent record is hashed again.
 * *changed names the first such file (malloc'd), NULL when none (deps.c). */
int jitop__deps_changed(const jitop__deps *d, char **changed);

/* The NVRTC library file jitop compiles with, as its soname and the size of
 * the file behind it, for example "libnvrtc.so.13 109338064" (nvrtc.c). It
 * is the NVRTC part of every key: nvrtcVersion gives major.minor only, while
 * a patch release may change the code it generates (and its library size
 * differs). Found by one stat of the file dlopen would open, through its
 * links, without loading NVRTC, so that a hit never pays for the load; only
 * where NVRTC is not in the toolkit jitop was built against is it loaded to
 * learn which file the search path gives. "unknown" when there is no NVRTC.
 * Path, file name and mtime are left out so that a cache prewarmed on one
 * machine hits on another with the same release, whatever its layout. */
const char *jitop__nvrtc_identity(void);

#endif
