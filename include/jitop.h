/*
 * jitop: compile CUDA .cu sources at run time with NVRTC, keep the binaries in
 * a content-addressed on-disk cache, load them through the CUDA driver and
 * hand out named, launchable ops, with hot reload when a source changes.
 *
 * This header is the documentation. Conventions that hold for every call:
 *  - Every call returns an int status: JITOP_OK (0) or one of jitop_status.
 *    jitop_strerror() names a status; jitop_errmsg() gives the details of the
 *    last failure on the calling thread (the NVRTC log with file:line, the
 *    path or argument at fault). That text is owned by the library.
 *  - Handles are opaque. Whatever a call creates, the matching destroy call
 *    frees; every destroy call accepts NULL.
 *  - A failing call leaves its outputs untouched (or NULL) and frees anything
 *    it created along the way.
 *  - Contexts may be used from several threads at once: load, op lookup and
 *    launch take the locks they need.
 */
#ifndef JITOP_H
#define JITOP_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(JITOP_BUILDING) && defined(__GNUC__)
#define JITOP_API __attribute__((visibility("default")))
#else
#define JITOP_API
#endif

#define JITOP_VERSION_MAJOR 0
#define JITOP_VERSION_MINOR 1
#define JITOP_VERSION_PATCH 0
#define JITOP_VERSION_NUMBER \
    (JITOP_VERSION_MAJOR * 10000 + JITOP_VERSION_MINOR * 100 + JITOP_VERSION_PATCH)

/* The JITOP_VERSION_NUMBER the library was built with (compare with the
 * header's to catch a mismatched shared library). */
JITOP_API int jitop_version(void);
/* "MAJOR.MINOR.PATCH" of the library. Static storage. */
JITOP_API const char *jitop_version_string(void);
/* "13.0": the version of the NVRTC the library compiles with. Static storage. */
JITOP_API const char *jitop_nvrtc_version(void);

/* ---------------------------------------------------------------- errors */

typedef enum jitop_status {
    JITOP_OK = 0,
    JITOP_EINVAL,    /* an argument is invalid; the message names it */
    JITOP_ENOMEM,    /* out of host memory */
    JITOP_EIO,       /* a file could not be read or written; the message names it */
    JITOP_ECOMPILE,  /* a compiler (NVRTC, host cc) rejected the source; the log (file:line) */
    JITOP_ENVRTC,    /* NVRTC itself failed (not a source error) */
    JITOP_ENODRIVER, /* no usable CUDA driver (libcuda.so.1 missing, or no device) */
    JITOP_ECUDA,     /* the driver returned an error; the message has its name and text */
    JITOP_ENOTFOUND, /* no such file, op or device */
    JITOP_EARGS,     /* launch arguments do not match the kernel's parameters */
    JITOP_EUNSAFE,   /* the cache directory is owned by another user or writable by others */
    JITOP_ESTALE,    /* an op's kernel no longer exists or changed signature after a reload */
    JITOP_ENOTSUP,   /* not supported on this device, driver or build */
    JITOP_STATUS_COUNT
} jitop_status;

/* A short fixed description of a status ("NVRTC compile error", ...).
 * Never NULL; an unknown status gives "unknown jitop status". */
JITOP_API const char *jitop_strerror(int status);

/* The details of the last call that failed on the calling thread (the ctx
 * argument may be NULL). Valid until the next jitop call on this thread.
 * Never NULL; "" when nothing failed yet. */
typedef struct jitop_ctx jitop_ctx;
JITOP_API const char *jitop_errmsg(const jitop_ctx *ctx);

/* Frees memory the library handed to the caller (jitop_explain's text). */
JITOP_API void jitop_free(void *p);

/* --------------------------------------------------------------- context */

typedef struct jitop_config {
    /* Cache root. NULL: $JITOP_CACHE_DIR, else $XDG_CACHE_HOME/jitop, else
     * ~/.cache/jitop. Created with mode 0700. A root owned by another user or
     * writable by group/others, a root that is a symbolic link another user
     * owns, and a v<N> tree under it that jitop did not make (no jitop.tag
     * marker, and files jitop would not have made) are refused with
     * JITOP_EUNSAFE. An unwritable root is not an error: binaries are then
     * kept in memory (one warning). */
    const char *cache_dir;
    /* Target: "sm_90" (cubin), "compute_90" (PTX). NULL: $JITOP_ARCH, else the
     * arch of the context's device when a driver is present. */
    const char *arch;
    /* CUDA device ordinal whose primary context is used (default 0). */
    int device;
    /* A CUcontext the application owns, used instead of the primary context.
     * jitop never destroys it, and loads its modules into it: destroy it
     * after jitop_ctx_destroy, which unloads them. NULL: the device's primary
     * context. */
    void *cu_context;
    /* Non-zero: never open the driver (prewarming on machines with no GPU).
     * Load and launch calls then fail with JITOP_ENODRIVER. */
    int compile_only;
    /* 0 quiet, 1 say why each binary was (re)built on stderr. -1: take it
     * from $JITOP_VERBOSE. */
    int verbose;
    /* Cache size cap in bytes, enforced by least-recently-used eviction after
     * writes. 0: $JITOP_CACHE_MAX_SIZE, else (unset or 0) 1 GiB. Negative:
     * no cap. */
    int64_t cache_max_size;
    /* Where jitop's own kernels (layernorm.cu, lltm.cu) are read from. NULL:
     * $JITOP_KERNEL_DIR, else the installed share/jitop/kernels, else the
     * source tree's kernels/. */
    const char *kernel_dir;
    /* The remote cache tier (docs/GUIDE.md, "Remote cache"): one or more base
     * URLs separated by blanks, each with |attributes: read-only,
     * connect-timeout=MS (100), timeout=MS (500), put-timeout=MS (2000).
     * NULL: $JITOP_REMOTE_CACHE; "" none. A local miss asks each remote
     * (GET <url>/v<F>/<ab>/<key>) before compiling; a compile is pushed (PUT)
     * to each writable one from a background thread that jitop_ctx_destroy
     * drains (at most about 2 s). A remote that fails in any way is warned
     * about once, not asked again by this process, and the binary compiled
     * locally. Credentials: $JITOP_REMOTE_CACHE_TOKEN (bearer),
     * $JITOP_REMOTE_CACHE_USER (user:password) or ~/.netrc. */
    const char *remote_cache;
    /* A file holding the key that signs pushed entries (HMAC-SHA256) and
     * without whose valid signature no remote entry is accepted. NULL:
     * $JITOP_REMOTE_CACHE_SECRET; "" none. */
    const char *remote_cache_secret;
} jitop_config;

/* Fills cfg with the defaults described above. */
JITOP_API void jitop_config_init(jitop_config *cfg);

/* Creates a context. cfg may be NULL (defaults). The driver is opened lazily,
 * on the first load, unless cfg->compile_only. On failure *out is NULL. */
JITOP_API int jitop_ctx_create(const jitop_config *cfg, jitop_ctx **out);

/* Unloads every module of the context and frees it. Op and module handles of
 * the context are invalid afterwards. Accepts NULL. */
JITOP_API void jitop_ctx_destroy(jitop_ctx *ctx);

/* The cache root the context uses (absolute). Owned by the context. */
JITOP_API const char *jitop_cache_dir(const jitop_ctx *ctx);

/* The arch the context compiles for: cfg->arch, $JITOP_ARCH, or the device's.
 * Fails with JITOP_ENODRIVER when none is set and no driver is present; the
 * message says how to choose one. *arch is owned by the context. */
JITOP_API int jitop_ctx_arch(jitop_ctx *ctx, const char **arch);

/* ----------------------------------------------------- compile (prewarm) */

/* What one (source, arch) build did. */
typedef struct jitop_build_result {
    int cached;     /* 1: served from the cache; 0: compiled by this call */
    char key[33];   /* the cache key, 32 hex digits */
    double ms;      /* wall time of the call */
    /* 1: NVRTC printed something (warnings) when it compiled this binary;
     * the log is kept with the cache entry, so a hit has it too:
     * jitop_build_log(ctx, key, ...) gives it. */
    int warnings;
} jitop_build_result;

/* Compiles one .cu file for one arch into the cache, unless an entry for the
 * same key is there already. options: NVRTC flags (-D, -U, -I, -std,
 * --use_fast_math, -lineinfo, -G, -maxrregcount, ...), normalized before they
 * enter the key. names: template name expressions to instantiate (for
 * example "layernorm_fwd<float, 1024, true>"), may be NULL with nnames 0;
 * spellings that differ only in white space ("f<float, 4>", "f< float,4 >")
 * are one name. arch NULL: the context's arch. On a compile error:
 * JITOP_ECOMPILE with the log in jitop_errmsg(), and nothing is written to
 * the cache. A name the source (with its headers) does not declare:
 * JITOP_ENOTFOUND with NVRTC's errors; that answer is cached like a binary,
 * so asking again compiles nothing until a file changes. Thread-safe;
 * concurrent processes building the same key compile it once.
 *
 * The CUDA toolkit's headers (<cuda_fp16.h>, <cuda_bf16.h>,
 * <cooperative_groups.h>, <cub/...>, <curand_kernel.h>, libcu++'s
 * <cuda/std/...>) need no -I: jitop searches the toolkit's include folder
 * (and, on CUDA 13, include/cccl) after the -I folders. The toolkit is the
 * one NVRTC was loaded from (its lib folder's ../include), else $CUDA_HOME,
 * else the one jitop was built against: the first that holds cuda_fp16.h.
 * Its headers are hashed into the key like any other. Where none is found,
 * a source that includes one fails with a message naming the folders tried
 * and CUDA_HOME. NVRTC has no C++ standard library: <type_traits>,
 * <cstdint>, <vector>... fail, with the libcu++ header to use instead.
 *
 * What is hashed (here and in jitop_load): the source and every file its
 * #include, #include_next and #embed directives name, found as NVRTC finds
 * them ("name" beside the including file, then the source's directory, each
 * -I and the toolkit's include folders in order; <name> in those
 * directories; a "..", in the path or in a name, taken after the symbolic
 * links before it, as the kernel does),
 * whatever the spelling (comments or line splices inside the directive,
 * %:include, trigraphs), on every #if branch. A name found nowhere is one of
 * NVRTC's built-in headers (covered by the NVRTC release in the key) or a
 * compile error. "#include NAME" is resolved from the definitions of NAME:
 * the #define lines of the files read and the -D options, on every #if
 * branch, each a header name or another such NAME; every file they name is
 * hashed.
 *
 * Safe mode: a directive whose file only preprocessing can name
 * (#include STR(x), a NAME defined as something else or nowhere, a macro
 * inside a <name> that a macro gives) makes every file under the source's
 * directory, each -I directory and the directory of the file holding that
 * directive (recursively, links followed; hidden directories and jitop
 * caches skipped) hashed and watched instead. It does not see a file the
 * macros name outside these folders (an absolute name, or one whose ".."
 * leaves them): name such a file literally. Past 4096 files or 64 MiB, the
 * unit is compiled at every build and never cached (result->cached is 0,
 * every time). Either is said by JITOP_VERBOSE=1 and by jitop_explain. The
 * toolkit's include folders are never hashed whole: a directive a toolkit
 * header names through macros is the toolkit's own (covered by its headers
 * hashed and the NVRTC release).
 *
 * The stat fast path compares each file's size, mtime, ctime and inode,
 * and the mtime and ctime of each directory where a name was looked for and
 * not found (a header created there later, shadowing the one found further
 * on, makes the names be looked for again). */
JITOP_API int jitop_build(jitop_ctx *ctx, const char *path, const char *arch,
                          const char *const *options, size_t noptions,
                          const char *const *names, size_t nnames,
                          jitop_build_result *result);

/* NVRTC's log (its warnings, as "file(line): warning ...") from the compile
 * that made the cache entry under key (a jitop_build_result's key), kept
 * with the entry so that a cache hit gives it too, as ccache keeps a
 * compiler's output. *log is malloc'd (free it with jitop_free): "" when the
 * compile printed nothing. JITOP_ENOTFOUND when the cache holds no valid
 * entry under key (evicted or cleaned since), JITOP_EINVAL for a key that is
 * not 32 lowercase hex digits. */
JITOP_API int jitop_build_log(jitop_ctx *ctx, const char *key, char **log);

/* Says, without compiling, whether jitop_build with the same arguments would
 * hit the cache (*would_hit = 1) and why not otherwise: which file changed,
 * which option differs, a new NVRTC. *why is a malloc'd text the caller frees
 * with jitop_free. */
JITOP_API int jitop_explain(jitop_ctx *ctx, const char *path, const char *arch,
                            const char *const *options, size_t noptions,
                            const char *const *names, size_t nnames,
                            int *would_hit, char **why);

/* ------------------------------------------------------ cache management */

typedef struct jitop_cache_entry_info {
    const char *key;      /* 32 hex digits */
    const char *arch;
    /* The files of source_list one per line (separated by '\n'), each with
     * C-style escapes for backslash and control bytes (\\, \n, \t, \r,
     * \xNN), so that a newline in a path cannot split it: for display and
     * for older callers. A path without such bytes appears as it is. */
    const char *sources;
    int64_t size;         /* bytes on disk */
    int64_t atime;        /* last use (to within a minute), seconds since the epoch */
    int64_t created;      /* seconds since the epoch */
    /* The files the entry was built from, exactly: the source's absolute
     * path ("inline:NAME" for jitop_load_inline text), then every header it
     * includes. nsources strings. */
    const char *const *source_list;
    size_t nsources;
} jitop_cache_entry_info;

/* Calls fn once per valid entry in the cache (invalid entries are skipped).
 * The info is valid during the call only. A non-zero return from fn stops
 * the walk and is returned. */
JITOP_API int jitop_cache_list(jitop_ctx *ctx,
                               int (*fn)(const jitop_cache_entry_info *info, void *user),
                               void *user);

/* Evicts least-recently-used entries, each with its manifests and lock,
 * until entries and manifests hold at most max_size bytes (negative: the
 * context's cap). Also removes invalid entries and manifests, manifests and
 * unheld locks of entries that are gone, and stale temporary files. *freed
 * (may be NULL) receives the bytes removed. Safe while other processes
 * build in the same cache. */
JITOP_API int jitop_cache_gc(jitop_ctx *ctx, int64_t max_size, int64_t *freed);

/* Removes every entry, manifest and lock of the cache (the root and its
 * markers stay). Only trees jitop made (marked, or holding nothing but
 * jitop's names) are touched, and in them only jitop's names: anything else
 * stays, with a warning on stderr. Safe while other processes build in the
 * same cache: each tree is moved aside first, then deleted. */
JITOP_API int jitop_cache_clean(jitop_ctx *ctx);

/* --------------------------------------------------- remote cache tier */

/* Pushes the local entry under key (a jitop_build_result's key) to every
 * writable remote now, on the calling thread (jitop build --push). It first
 * waits for this context's background pushes, and skips each remote that
 * already took key from this process (a compile's own push): an entry is
 * sent once. *pushed (may be NULL) gets how many remotes hold it from this
 * process, those included. JITOP_EINVAL when no remote is
 * configured, JITOP_ENOTFOUND when the local cache holds no valid entry
 * under key, JITOP_EIO when no remote took it (each is read-only or down;
 * the warnings on stderr say why). */
JITOP_API int jitop_remote_push(jitop_ctx *ctx, const char *key, int *pushed);

/* Calls fn once per entry the remotes hold (key, size in bytes), listed with
 * WebDAV PROPFIND. A server that cannot list fails with JITOP_EINVAL and a
 * message that says so; no remote configured: JITOP_EINVAL. A non-zero
 * return from fn stops the walk and is returned. */
JITOP_API int jitop_remote_list(jitop_ctx *ctx,
                                int (*fn)(const char *url, const char *key, int64_t size,
                                          void *user),
                                void *user);

/* ----------------------------------------------------- modules and ops */

/* The CUDA context jitop loads and launches in (the device's primary context,
 * or cfg.cu_context), for applications that allocate memory or create streams
 * with the driver or runtime API. Starts the driver if needed and makes the
 * context current on the calling thread. cu_context receives a CUcontext,
 * cu_device a CUdevice ordinal; either may be NULL. The context stays owned
 * by jitop (released at jitop_ctx_destroy unless it was cfg.cu_context).
 * Without a driver or device: JITOP_ENODRIVER, outputs untouched. */
JITOP_API int jitop_ctx_cuda(jitop_ctx *ctx, void **cu_context, int *cu_device);

typedef struct jitop_module jitop_module;
typedef struct jitop_op jitop_op;

/* Compiles (through the cache) the given .cu files for the context's device
 * and loads them: the C counterpart of torch's cpp_extension.load(name,
 * sources, extra_cuda_cflags, extra_include_paths). Each source is its own
 * translation unit, loaded on its own; ops are looked up across all of them.
 *
 * Linked units. With -rdc (or -rdc=true, --relocatable-device-code=true,
 * -dc) each source is compiled as a relocatable unit and nvJitLink (the
 * toolkit's libnvJitLink, opened at run time like NVRTC) links them into
 * one image: a kernel may call __device__ functions and use extern
 * __device__ variables of another source, and launch kernels from the
 * device (dynamic parallelism: the toolkit's libcudadevrt.a is linked in
 * when the code needs it). -dlto (implies -rdc) compiles the units to
 * LTO-IR and optimizes across them at the link. Each unit is cached on its
 * own, and so is the linked image (keyed by the units' keys, the link
 * options and the nvJitLink library): an edit of one source recompiles that
 * source only, then relinks, at load and at a hot reload. A template
 * instance of a linked module is its unit compiled with the instance,
 * linked with the other units. For a compute_XX (PTX) arch, linking needs
 * -dlto (nvJitLink emits PTX only from LTO-IR).
 *
 * Declared instances. An option -instance=NAME (a name expression, as
 * jitop_op_get takes it, e.g. "-instance=axpy<float, 4>"; spelled any way,
 * it is canonicalized as jitop_op_get does) declares a template instance
 * the caller will ask for: when the load has to compile the source, it
 * compiles it once with every declared instance in (one NVRTC program, the
 * names in the cache key), so the first get of each costs no compile. It is
 * no compiler option and not part of the module's identity (a load asked
 * again with other -instance= options returns the module already loaded;
 * its new names are compiled at their gets). A binary the cache already
 * holds for the files as they are is used as it is (a name it lacks is
 * compiled at its get, then folded in at the source's next compile). For a
 * module of one device source only: with several, each declared instance
 * is compiled at its get. A declared name the source does not have does not
 * fail the load (the source is then compiled without names); its get fails
 * with NVRTC's error. A plain name (an extern "C" kernel) or an empty one
 * is JITOP_EINVAL. The shipped ops declare the instances a call of theirs
 * will ask.
 *
 * name is a label for messages. Loading the same sources with the same options again returns
 * the module already loaded (only the stat fast path touches the disk).
 * Which files are hashed and watched, and safe mode (a directive whose file
 * only macros name): see jitop_build. A unit safe mode cannot bound is
 * compiled again by every load. Modules belong to the context and live until
 * jitop_ctx_destroy; *out stays valid across hot reloads. */
JITOP_API int jitop_load(jitop_ctx *ctx, const char *name,
                         const char *const *sources, size_t nsources,
                         const char *const *options, size_t noptions,
                         jitop_module **out);

/* Like jitop_load for source text instead of a file (torch's load_inline).
 * The text is copied. -I options still apply; a "name" include is looked up
 * in the current directory first, as NVRTC does for text without a file. */
JITOP_API int jitop_load_inline(jitop_ctx *ctx, const char *name, const char *source_text,
                                const char *const *options, size_t noptions,
                                jitop_module **out);

/* The name given at load. Owned by the module. */
JITOP_API const char *jitop_module_name(const jitop_module *m);

/* How many times the module's code was swapped in by a reload (0 at load). */
JITOP_API uint64_t jitop_module_generation(const jitop_module *m);

/* NVRTC's logs (warnings) of the code m runs now: each source's compile,
 * then each template instance's, in that order, a log that repeats one
 * before left out (an instance's compile repeats its source's warnings).
 * Read from the cache entries of the current generation, so a module loaded
 * from a warm cache has them too; an entry evicted since is skipped. *log is
 * malloc'd (free it with jitop_free): "" when no compile printed anything.
 * JITOP_VERBOSE=1 also prints each log when its binary is compiled or read
 * from the cache. */
JITOP_API int jitop_module_log(jitop_module *m, char **log);

/* Gets an op by name. What exists is what the compiler says, never a
 * search of the source text, so kernels and templates defined in included
 * headers are found like the source's own, and the answer is the same
 * whether or not the cache was warm:
 *  - a kernel of the sources' images: an extern "C" kernel by its name
 *    ("lltm_forward"), a C++ one by its qualified name ("ns::scale", for
 *    the kernel ns::scale(float*)); overloads are told apart with a name
 *    expression ("(void (*)(float *))ns::scale");
 *  - a template instance ("layernorm_fwd<__nv_bfloat16, 4096, true>", any
 *    other name expression): compiled on demand (through the cache) the
 *    first time it is asked for, as its own unit, from the first source (in
 *    the order given to jitop_load) that declares it; a source that does not
 *    answers so once, and that answer is cached like a binary. Spellings the
 *    compiler takes for the same instance ("f<float,4>", "f< float, 4 >",
 *    "f<float, 4u>") give the same op: one compile per white-space-free
 *    spelling, one instance and one handle per kernel symbol.
 * The handle stays valid for the life of the module, across reloads. An
 * unknown name fails with JITOP_ENOTFOUND and a message listing the ops that
 * exist (by their C++ names); the failure is remembered (asking again fails
 * at once, without compiling) until the module's code is reloaded. A
 * template instance that does not compile fails with JITOP_ECOMPILE and
 * NVRTC's log. */
JITOP_API int jitop_op_get(jitop_module *m, const char *name, jitop_op **out);

typedef struct jitop_op_info {
    const char *name;       /* as asked for, or the kernel's name when listed */
    const char *lowered;    /* the mangled symbol (== name for extern "C") */
    size_t nparams;
    /* nparams entries each (NULL when nparams is 0): each parameter's byte
     * offset and size, as the driver reports them (cuFuncGetParamInfo). No
     * fixed cap: the driver takes up to 32764 bytes of parameters (CUDA
     * 12.1 and newer), so a kernel may have thousands. */
    const size_t *param_offset;
    const size_t *param_size;
    int max_threads_per_block;
    int num_regs;
    size_t static_shared_bytes;
} jitop_op_info;

/* Describes an op (parameters from cuFuncGetParamInfo, attributes from
 * cuFuncGetAttribute). The driver is asked once per op and code generation,
 * the first time something needs the answer: this call, a launch that
 * checks its arguments, or one with dynamic shared memory; jitop_op_get
 * does not (asking there would cost a warm load ~0.04 ms). The strings and
 * arrays are owned by the op and stay valid for the life of the module (a
 * reload gives later calls new ones; those handed out before stay
 * readable). */
JITOP_API int jitop_op_info_get(jitop_op *op, jitop_op_info *info);

/* Lists the kernels a module holds, any number of them: fills up to cap
 * infos and sets *count to how many there are (call with cap 0 to count,
 * then with an array of *count). Each kernel is described once per code
 * generation; the strings and arrays are owned by the module and stay
 * valid for its life. */
JITOP_API int jitop_module_ops(jitop_module *m, jitop_op_info *infos, size_t cap, size_t *count);

/* ------------------------------------------------------- module globals */

/* A __device__ or __constant__ variable of a module's current code. */
typedef struct jitop_global_info {
    uint64_t dptr;        /* its CUdeviceptr, in the module's CUDA context (jitop_ctx_cuda) */
    size_t size;          /* bytes */
    uint64_t generation;  /* the jitop_module_generation() the address belongs to */
} jitop_global_info;

/* Finds a global variable of m by name: "table" (a C or extern "C" name),
 * "ns::table", "scale<float>" (a variable template's instance), as the
 * source spells it, with or without a leading '&' and with any spacing.
 * The name is matched against the variables the module's code defines,
 * demangled; a template argument spelled differently from the demangler
 * ("scale<4>" for "scale<4u>") is resolved by compiling the name
 * expression "&name" against the sources until one declares it (once: through
 * the cache). A variable template must be instantiated in the code (used
 * by a kernel, or explicitly: template __device__ float scale<float>;).
 *
 * Where the variable lives. Each loaded binary holds its own copy of the
 * variables its source defines: a module of several sources compiled
 * separately (no -rdc) has one copy per source that defines it, and each
 * template instance jitop compiled on demand is its own binary with its
 * own copy. jitop_global_get gives the copy of the first source (in load
 * order) that defines it, or, if no source's binary has it, the first
 * template instance's; jitop_op_global_get gives the copy a given op's
 * kernel uses. A linked module (-rdc) has one copy (an extern __device__
 * declared in one unit and defined in another is the one variable).
 *
 * Hot reload. New code is new binaries: its variables have new addresses
 * and start from the initial values the source gives them; nothing is
 * carried over. out->generation says which code the address belongs to:
 * after a reload (jitop_module_generation(m) differs, or in the reload
 * callback, which runs after the swap) fill the variables again, and get
 * their addresses again. An address of an older generation must not be
 * used once that code may be unloaded (the reaper frees it when no launch
 * holds it). Template instances compiled after a write start from the
 * initial values too: write again after getting new instances.
 *
 * Errors: JITOP_ENOTFOUND naming the variable and listing those the
 * module has; JITOP_ENODRIVER/JITOP_ECUDA from the driver. */
JITOP_API int jitop_global_get(jitop_module *m, const char *name, jitop_global_info *out);

/* The copy of global name that op's kernel uses now (its own binary: a
 * template instance's copy, or the copy of the source image it lives in). */
JITOP_API int jitop_op_global_get(jitop_op *op, const char *name, jitop_global_info *out);

/* Copies size bytes from host memory src into every copy of global name
 * the module's current code holds (see jitop_global_get: the sources',
 * then each template instance's), so that every kernel of the module reads
 * the new value. size must equal the variable's size (JITOP_EINVAL naming
 * both otherwise: a float table written with double data is caught; write
 * part of a variable through jitop_global_get's address). stream NULL: a
 * synchronous copy (cuMemcpyHtoD, ordered with the legacy default stream);
 * else a copy queued on that CUstream (cuMemcpyHtoDAsync: src must stay
 * valid until it runs, and be pinned for the copy to be truly
 * asynchronous). */
JITOP_API int jitop_global_write(jitop_module *m, const char *name, const void *src, size_t size,
                                 void *stream);

/* Copies the variable (the copy jitop_global_get gives) into dst; size
 * must equal its size. stream NULL: synchronous (cuMemcpyDtoH); else
 * queued on that CUstream (cuMemcpyDtoHAsync: dst is filled once the
 * stream reaches the copy). */
JITOP_API int jitop_global_read(jitop_module *m, const char *name, void *dst, size_t size,
                                void *stream);

/* --------------------------------------------------------------- launch */

typedef struct jitop_dim3 {
    unsigned x, y, z;
} jitop_dim3;

/* Launches op on stream (a CUstream; NULL: the legacy default stream).
 * args[i] points to the i-th argument's value, as for cuLaunchKernel. A
 * non-zero nargs is checked against the kernel's parameter count; when
 * arg_sizes is not NULL each size is checked too, before anything is
 * launched, and a mismatch fails with JITOP_EARGS naming the parameter (by
 * index and byte offset: kernels carry no parameter names). shared_bytes over 48 KiB raises the
 * kernel's dynamic shared memory limit automatically. */
JITOP_API int jitop_launch(jitop_op *op, jitop_dim3 grid, jitop_dim3 block, size_t shared_bytes,
                           void *stream, void **args, const size_t *arg_sizes, size_t nargs);

typedef struct jitop_launch_config {
    jitop_dim3 grid, block;
    size_t shared_bytes;
    void *stream;
    jitop_dim3 cluster;   /* thread-block cluster dimensions; {0,0,0}: none */
    int cooperative;      /* non-zero: a cooperative launch (grid-wide sync) */
    /* non-zero (sm_90 and newer): programmatic dependent launch. The kernel
     * may be scheduled while the previous kernel in the stream still runs
     * (once that one executes griddepcontrol.launch_dependents, or ends); it
     * must execute griddepcontrol.wait (cudaGridDependencySynchronize)
     * before it reads or writes memory the previous work uses. */
    int programmatic;
} jitop_launch_config;

/* jitop_launch with the Hopper launch attributes. */
JITOP_API int jitop_launch_ex(jitop_op *op, const jitop_launch_config *cfg, void **args,
                              const size_t *arg_sizes, size_t nargs);

/* Suggests a block size that maximizes occupancy for op with shared_bytes of
 * dynamic shared memory per block, and the smallest grid that fills the
 * device at that size (cuOccupancyMaxPotentialBlockSize). */
JITOP_API int jitop_occupancy(jitop_op *op, size_t shared_bytes, int *block_size, int *min_grid);

/* The most clusters of cluster_size blocks (block_size threads, shared_bytes
 * of dynamic shared memory each) that the device holds at once
 * (cuOccupancyMaxActiveClusters): the grid for a persistent cluster kernel,
 * whose clusters beyond it would run as a second wave. It can be fewer than
 * SMs / cluster_size (an H100 holds 30 clusters of 4 one-block-per-SM blocks
 * on 132 SMs). cluster_size 0: the size the kernel was compiled with
 * (__cluster_dims__), else 1. Raises the op's shared memory limit as a
 * launch with shared_bytes would. */
JITOP_API int jitop_occupancy_clusters(jitop_op *op, int block_size, size_t shared_bytes,
                                       int cluster_size, int *clusters);

/* ------------------------------------------------------- host functions */

/* Host code. C and C++ sources (.c, .cc, .cpp, .cxx) given to jitop_load in
 * the same list as .cu files are compiled by the system compiler ($CC /
 * $CXX, else cc / c++) into one shared object of the module, cached like
 * a cubin (each source one object entry, the link one more; the key holds
 * the compiler's resolved path and `--version`, every flag, and every
 * source and header the compiler's -MMD output lists, by content). A
 * module of host sources only needs no GPU. Options for host code:
 * "-Xhost=FLAG" a compile flag ("-Xhost=-O3", "-Xhost=-std=c17",
 * "-Xhost=-DN=4", "-Xhost=-Idir"), "-Xhost-ld=FLAG" a link flag or library
 * ("-Xhost-ld=-lm"); -D, -U and -I options without the prefix apply to
 * both kinds. With ninja on PATH ($JITOP_NINJA names one; JITOP_NINJA=0
 * never) the objects are built by ninja, else by jitop's own parallel
 * builder; the result is the same. Host code exports functions with
 * JITOP_EXPORT (include/jitop_host.h, which also says how host code calls
 * jitop: it never links libjitop). A compile error is JITOP_ECOMPILE with
 * the compiler's output (file:line); no compiler: JITOP_ENOTFOUND naming
 * CC or CXX. Hot reload (jitop_watch, jitop_module_reload) rebuilds the
 * objects whose files changed, loads the new shared object and switches
 * every jitop_fn of the module to it at once; an edit of a .cu file
 * reloads only the kernels. */
typedef struct jitop_fn jitop_fn;

/* Gets host function name of m, checking its prototype: signature is
 * "ret(params)" with C types ("int(float *, int, double)") or codes
 * ("i32(ptr, i32, f64)"): void, i8 u8 i16 u16 i32 u32 i64 u64 f32 f64
 * bool ptr (any pointer); parameter names are allowed. It must match the
 * prototype JITOP_EXPORT recorded, type by type (C integer types by width
 * and signedness, so "long" and "i64" match on LP64), else JITOP_EARGS
 * naming both; an unknown name is JITOP_ENOTFOUND listing the exported
 * functions. The handle lives as long as m and follows hot reloads; the
 * first call prepares libffi's call description (ffi_prep_cif) once. */
JITOP_API int jitop_fn_get(jitop_module *m, const char *name, const char *signature,
                           jitop_fn **out);

/* Calls fn through libffi: args[i] points to the i-th argument's value
 * (NULL when there are none), ret (may be NULL) to an object of the
 * return type, written with exactly its size. Runs the module's current
 * host object; a reload during the call lets it finish in the old code,
 * which is unloaded only after. JITOP_ESTALE when the current object no
 * longer exports the function or changed its prototype (the message
 * says which). Thread-safe; no lock on the way. */
JITOP_API int jitop_call(jitop_fn *fn, void **args, void *ret);

/* The function's address in the current host object, for callers that
 * call it directly (cast to its real type). Valid until the module's next
 * host reload: the swap does not wait for direct callers, and the old
 * object is unloaded once no jitop_call is inside it. Ask again after a
 * reload (jitop_module_generation changes; or use JITOP_RELOAD_POLL and ask
 * after jitop_poll). JITOP_ESTALE as jitop_call. */
JITOP_API int jitop_fn_addr(jitop_fn *fn, void **addr);

typedef struct jitop_fn_info {
    const char *name;
    const char *signature; /* as JITOP_EXPORT recorded it: "int (float *x, int n)" */
} jitop_fn_info;

/* Lists the host functions m's current object exports, as
 * jitop_module_ops lists kernels (cap 0 to count). The strings are owned
 * by the module and live as long as it. A module without host code has
 * none. */
JITOP_API int jitop_module_fns(jitop_module *m, jitop_fn_info *infos, size_t cap, size_t *count);

/* ------------------------------------------------------------ hot reload */

/* Called once per rebuild of a watched module m: status JITOP_OK and message
 * NULL when the new code is in place (every op handle of m now launches it),
 * or an error status with the compile log in message when the rebuild failed
 * and the old code keeps running. Also called, once, with an error status and
 * a message starting "hot reload stopped" if the watch itself fails (inotify
 * or memory): the code in place keeps running, it no longer reloads. Called on
 * the watch thread in JITOP_RELOAD_AUTO mode and inside jitop_poll in
 * JITOP_RELOAD_POLL mode. message is valid during the call only. */
typedef void (*jitop_reload_fn)(void *user, jitop_module *m, int status, const char *message);

typedef enum jitop_reload_mode {
    JITOP_RELOAD_AUTO = 0, /* rebuild and swap in the background as soon as a file is saved */
    JITOP_RELOAD_POLL = 1  /* rebuild in the background, swap only inside jitop_poll */
} jitop_reload_mode;

/* Watches every file m was built from (sources and headers, through inotify
 * on their directories so that rename-saves are seen) and rebuilds it when
 * one changes. Saves in quick succession coalesce into one rebuild. Op handles
 * stay valid and launch the new code after the swap; a failed rebuild keeps
 * the old code. cb may be NULL. */
JITOP_API int jitop_watch(jitop_module *m, jitop_reload_mode mode, jitop_reload_fn cb, void *user);

/* Stops watching m (pending rebuilds are dropped). Accepts a module that is
 * not watched. */
JITOP_API int jitop_unwatch(jitop_module *m);

/* In JITOP_RELOAD_POLL mode, swaps in every rebuild that finished since the
 * last call, on the calling thread, and calls the callbacks. *swapped (may be
 * NULL) gets how many modules changed. Returns the first rebuild error seen
 * (its log in jitop_errmsg()), JITOP_OK otherwise. Cheap when nothing changed. */
JITOP_API int jitop_poll(jitop_ctx *ctx, int *swapped);

/* Rebuilds m now, on the calling thread, and swaps it in when it compiles. */
JITOP_API int jitop_module_reload(jitop_module *m);

/* ------------------------------------------------------- shipped ops */

typedef enum jitop_dtype {
    JITOP_FLOAT32 = 0,
    JITOP_FLOAT16 = 1,
    JITOP_BFLOAT16 = 2,
    JITOP_FLOAT64 = 3
} jitop_dtype;

/* Size in bytes of one element of dtype, 0 for an unknown dtype. */
JITOP_API size_t jitop_dtype_size(jitop_dtype dtype);

#ifdef __cplusplus
}
#endif

#include "jitop_ops.h"

#endif
