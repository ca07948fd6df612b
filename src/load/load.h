/*
 * The load room: built binaries become code in a CUDA context. The driver
 * table (cuda.c, see driver.h), images (one CUmodule per built unit, with
 * its kernel list), bindings (what a launch needs of one kernel:
 * binding.c), modules (jitop_load, the context's module table, teardown)
 * and their reload (prepare / commit / reap: module.c), and
 * jitop_ctx_create, which wires the cache and the device into a context
 * (open.c).
 * May include: base, compile, cache, build. Calls nothing above it.
 * Included by the load room and the rooms above it that use modules (op,
 * watch).
 *
 * Why reload is here although it moves ops: a commit switches every op of
 * a module to the new code under m->lock, each new binding made before any
 * is published, so that a failure leaves the module exactly as it was.
 * That needs the op handle and its binding, not the op room's lookup: so
 * the handle (struct jitop_op: a name and one atomic binding pointer) and
 * bindings are declared here, and the op room (op/op.h) makes handles
 * (jitop_op_get), finds them (its lock-free table) and launches them. What
 * the op room keeps in a module it frees itself, through m->ops_free.
 *
 * Op indirection. A jitop_op handle never changes for the life of its
 * module. It points to a *binding* (the CUfunction, its parameter layout and
 * the image (CUmodule) it lives in) through one C11 atomic pointer. A
 * reload builds new images and new bindings first (prepare, no lock, may run
 * on a background thread), then publishes them with one atomic store per op
 * (commit). A launch loads the pointer once and uses only that binding, so it
 * sees either the old code or the new, never a mix. Ops switch one at a time
 * inside a commit: an application that wants every op of a module to switch
 * between two of its own launches applies reloads at a point it chooses
 * (JITOP_RELOAD_POLL).
 *
 * When an old image may be unloaded. Bindings and image structs are never
 * freed before the module (they are small: a reload costs ~1 KiB per op), so
 * a launch that loaded an old pointer can always dereference it. What is
 * released early is the CUmodule. A launch brackets its use with the
 * image's in-flight count:
 *     inflight++ (seq_cst); if op->cur changed meanwhile: inflight--, retry;
 *     cuLaunchKernel; inflight--
 * and commit stores the new binding (seq_cst) before the image is retired, so
 * a reaper that reads inflight == 0 after the store knows that no launch can
 * still start on that image. cuModuleUnload promises nothing about kernels
 * already queued on streams (the driver docs say only that using the handle
 * afterwards is undefined), so the reaper also waits for the context's queued
 * work (cuCtxSynchronize) before unloading. That wait blocks, so it happens
 * only in jitop__module_reap(m, true): on the watch thread, at a point the
 * application chose, or at jitop_ctx_destroy; a retired image that cannot be
 * unloaded yet only costs its device memory until then.
 *
 * After a reload an op whose kernel no longer exists gets a stale binding
 * (launch: JITOP_ESTALE naming the op); one whose parameters changed gets the
 * new layout, so a launch with the old arg_sizes fails with JITOP_EARGS.
 *
 * Locks: ctx->lock guards ctx->modules; m->lock guards everything of a module
 * that changes (ops table inserts, instances, images, commit). jitop_launch
 * and the op_get hit path take no lock. Never take ctx->lock while holding
 * m->lock.
 */
#ifndef JITOP_LOADER_H
#define JITOP_LOADER_H

#include "host/host.h"

#include "jitop_host.h"

#include <cuda.h> /* types only: the driver is called through cuda.c's table */
#include <stdatomic.h>

/* One kernel of an image, as listed at load. */
typedef struct jitop__kernel {
    char *name;     /* as the driver names it (mangled for C++ symbols); owned */
    CUfunction fn;  /* in m's context; its code may not be on the GPU yet (lazy loading) */
    /* jitop_module_ops' description, read from the driver the first time the
     * list asks (m->lock). desc.param_offset owns one block holding the
     * offsets, then the sizes; name and lowered are not set here. */
    bool described;
    jitop_op_info desc;
} jitop__kernel;

/* One loaded binary: the module of one built unit, in m's context.
 *
 * Why a CUmodule and not a context-independent CUlibrary: a module is only
 * ever used in its own context, and it loads faster. On an H100 (driver
 * 580), loading the LLTM forward's 18.6 KB cubin and getting its function
 * took 98 us as cuModuleLoadData + cuModuleGetFunction (an instance), 105 us
 * with the function list and cuFuncLoad instead (a source), and 134 us as
 * cuLibraryLoadData + the kernel list + cuKernelGetFunction (medians of 25
 * new processes; bench/lltm_NOTES.md). Each device of a process
 * loads its own module anyway (its own arch). */
typedef struct jitop__image {
    CUmodule mod;             /* NULL once unloaded */
    atomic_uint inflight;     /* launches between binding load and launch return */
    bool retired;             /* replaced by a commit; unloaded by the reaper */
    /* The reap that saw no launch holding it before its sync and will unload
     * it after that sync (m->reaps ticket; 0: none). Guarded by m->lock. */
    uint64_t reap_claim;
    char key[33];             /* cache key of the binary */
    /* A source's image lists every kernel (cuModuleEnumerateFunctions); a
     * template instance's only its own (cuModuleGetFunction by its lowered
     * name: no list to walk), or none if that symbol is no kernel. */
    jitop__kernel *kernels;
    size_t nkernels;
    bool code_loaded;         /* the lookup put every listed kernel's code on the GPU */
    /* jitop_module_ops handed out pointers into kernels (m->lock): the list
     * then stays until the module is freed, not only until the unload. */
    bool listed;
    /* The symbols of the variables the binary defines (__device__,
     * __constant__; mangled for C++ names), read from it at load: what
     * jitop_global_get matches names against (src/op/global.c). */
    jitop__strv globals;
    /* The same names demangled and normalized (global.c), filled on the
     * first lookup by a C++ name (m->lock). */
    jitop__strv globals_cxx;
    struct jitop__image *next; /* every image of the module, newest first */
} jitop__image;

/* What a launch needs, immutable once published (smem_raised and the
 * description aside). The description (parameter layout, attributes) is
 * read from the driver the first time something needs it: a launch that
 * checks its arguments or asks for dynamic shared memory, jitop_op_info_get.
 * Asked at jitop_op_get, those driver calls would cost a warm get in a new
 * process ~0.04 ms on an H100, for launches that mostly never look at them. */
typedef struct jitop__binding {
    CUfunction fn;            /* NULL: stale, the kernel is gone */
    jitop__image *image;      /* NULL when stale */
    char *lowered;            /* the symbol (mangled for templates); owned */
    /* Set (release) once the fields below are filled, under m->lock; a
     * reader that sees it (acquire) may read them without the lock. */
    atomic_bool described;
    size_t nparams;
    /* nparams offsets, then nparams sizes, in one block owned through
     * param_offset (NULL without parameters). */
    size_t *param_offset;
    size_t *param_size;
    int max_threads_per_block;
    int num_regs;
    size_t static_shared_bytes;
    /* The dynamic shared memory limit already raised on fn (launches above
     * 48 KiB raise it once per binding, under m->lock). */
    _Atomic size_t smem_raised;
    struct jitop__binding *older; /* the op's previous bindings, freed with it */
} jitop__binding;

/* An op handle: made by the op room (jitop_op_get), re-pointed by a commit. */
struct jitop_op {
    _Atomic(jitop__binding *) cur;
    struct jitop_module *module;
    char *name;               /* as asked for */
    size_t instance;          /* SIZE_MAX: an extern "C" kernel; else index into m->instances */
    _Atomic uint64_t changed_gen; /* generation whose commit last changed its binding */
    struct jitop_op *next;    /* every op of the module */
};

/* A unit the module was built from, with what its current image came from.
 * Sources are m->units; template instances are m->instances (one unit each,
 * compiled with the name expression, loaded as their own image).
 *
 * Source images are loaded lazily. NVRTC emits no code for a template that
 * is not instantiated, so a source made of templates (the shipped kernels)
 * compiles to an image with no kernel, and loading it would cost a
 * cuModuleLoadData in every warm load of a module used only through its
 * instances. jitop_load still builds every source (a compile error shows at
 * load) and keeps the binary, or, when the stat fast path finds it cached,
 * only marks its entry used (unloaded.data stays NULL: the entry is read
 * with the image). The source images are loaded, all together, the first
 * time something needs their kernels: an op that is not a name expression,
 * the op list, an unknown-name error (m->units_loaded). */
typedef struct jitop__modunit {
    jitop__unit unit;
    jitop__deps deps;         /* files of the current generation (guarded by m->lock) */
    char key[33];             /* cache key of the current generation's binary */
    jitop__image *image;      /* current image; NULL for a source not loaded yet */
    jitop__binary unloaded;   /* while image is NULL: its binary (no data yet: read by key) */
    char *lowered;            /* instances: the instance's symbol in the current image */
    /* Sources (the fold rule, build/build.h): the name expressions compiled
     * into the current binary (in its key), their lowered names in the same
     * order once the binary was read (empty before: a deferred hit), and
     * every name asked of the source (its manifest's list, and each
     * instance joined since). m->lock. */
    jitop__strv folded, folded_lowered, asked;
    /* Instances: the source unit they were asked of (index in m->units),
     * and whether their code is that source's binary (a fold): image is
     * then the source's image, owned and retired through the source. */
    size_t src;
    bool shared;
} jitop__modunit;

/* The op room's lock-free op table and the names in it (op/op.h). */
typedef struct jitop__optab jitop__optab;
typedef struct jitop__opname jitop__opname;

struct jitop_module {
    jitop_ctx *ctx;
    const struct jitop__driver *drv; /* ctx->driver, started before any module exists */
    char *name;
    char id[33];              /* identity: name, sources, inline text, options, arch */
    char arch[32];
    jitop__modunit *units;
    size_t nunits;
    bool units_loaded;        /* every source image is loaded (m->lock; see jitop__modunit) */
    jitop__modunit **instances; /* grown under m->lock; elements never move */
    size_t ninstances, cap_instances;
    jitop__strv options;      /* as given at load */
    pthread_mutex_t lock;
    _Atomic(jitop__optab *) optab;
    jitop_op *ops;            /* every op, newest first (m->lock) */
    jitop__opname *opnames;   /* every name in optab (m->lock) */
    jitop__image *images;     /* live and retired (m->lock) */
    _Atomic uint64_t generation;
    uint64_t reaps;           /* tickets handed to jitop__module_reap calls (m->lock) */
    /* Names jitop_op_get could not make an op of (not a kernel, does not
     * compile), with their error, so that asking again fails without
     * another NVRTC compile. Only for generation failed_gen: a reload that
     * swaps new code in forgets them (m->lock; op/op.c). */
    struct jitop__failed_name *failed;
    size_t nfailed;
    uint64_t failed_gen;
    /* Rebuilds prepared (jitop__module_prepare) and not yet committed or
     * dropped, and how many were ever begun (m->lock): an instance whose
     * key comes from the current generation's file hashes is only
     * published if no rebuild began meanwhile (op/op.c, instantiate). */
    unsigned pending;
    uint64_t prepares;
    /* Frees what the op room keeps in the module (ops, op tables, failed
     * names): set by the op room (under m->lock) before it adds any, called
     * when the module is freed. NULL: the module never had any. */
    void (*ops_free)(jitop_module *m);
    /* The same for the global names the op room resolved (op/global.c). */
    void (*globals_free)(jitop_module *m);
    void *watch;              /* watch/reload.c's per-module state; NULL when not watched */
    /* The module's host code (hostlib.c): NULL when it has no host source. */
    struct jitop__host *host;
    /* A linked module (-rdc or -dlto in its options: linked.c). Its units
     * compile to relocatable binaries that no driver loads, so they have no
     * image of their own: the image linked from all of them (in source
     * order) is m->units[0].image, where kernels are found as in any source
     * image, and the other units' image stays NULL. Its cache key is
     * link_key; loaded lazily like a source image, with its binary kept
     * meanwhile in link_unloaded (no data: read by link_key). A unit's
     * own binary is in its mu->unloaded only while in hand; a link reads
     * the ones it lacks by their keys. Each template instance's image is
     * its unit linked with the other units (its own source's left out).
     * (m->lock, as the units.) */
    bool linked;
    char link_key[33];
    jitop__binary link_unloaded;
    /* Global names resolved by a name-expression compile (global.c). */
    struct jitop__global_alias *global_aliases;
    /* The -instance= names of the load (declare.c), canonical: folded into
     * the source's build at load when it must compile (one device source
     * only), so that their first gets compile nothing. */
    jitop__strv declared;
    struct jitop_module *next; /* ctx->modules */
};

/* A rebuild prepared but not yet swapped in. */
typedef struct jitop__pending jitop__pending;

/* Rebuilds every unit and template instance of m through the cache (stat
 * fast path, so unchanged files cost a stat) and loads the images whose key
 * changed; swaps nothing. Safe on any thread, concurrently with launches and
 * op_get (takes m->lock only to snapshot the unit list). On a compile error:
 * JITOP_ECOMPILE with the log, *out NULL, nothing loaded stays behind. */
int jitop__module_prepare(jitop_module *m, jitop__pending **out);

/* Non-zero when p would change any code (some unit's key differs). A commit
 * of an unchanged p is a no-op that keeps the generation. */
int jitop__pending_changed(const jitop__pending *p);

/* Swaps p in: new bindings published atomically op by op, the generation
 * bumped (only when some code changed), the old images retired (unloaded
 * later by jitop__module_reap). Each op whose binding changed gets
 * op->changed_gen = the new generation (walk m->ops under m->lock to find
 * them for a callback). Consumes p, also on failure (on failure nothing is
 * swapped). Instances created after prepare keep their binding. */
int jitop__module_commit(jitop_module *m, jitop__pending *p);

/* Discards a prepared rebuild (unloads its images). Accepts NULL. */
void jitop__pending_free(jitop__pending *p);

/* Every source and header path the current generation was built from (the
 * sources' own paths first), without duplicates, appended to paths. Inline
 * text has no path; its headers are listed. */
int jitop__module_files(jitop_module *m, jitop__strv *paths);

/* Unloads retired images that no launch holds. wait: first waits for the
 * context's queued work (cuCtxSynchronize, blocking, run without m->lock so
 * that op_get, jitop_module_ops and launches that raise their shared memory
 * limit do not wait for the GPU) so that no kernel still queued on a stream
 * runs from an unloaded image; without wait nothing is unloaded (retired
 * images stay until a waiting reap). *left (may be NULL) gets the retired
 * images still loaded. Several reaps may run at once: each unloads only the
 * images it claimed. */
int jitop__module_reap(jitop_module *m, bool wait, size_t *left);

/* The context's teardown of the loader part (registered with
 * jitop__ctx_on_destroy at driver start): waits for queued work, unloads and
 * frees every module, releases the primary context. */
void jitop__loader_ctx_destroy(jitop_ctx *ctx);

/* Used by the load room itself and by the op room (ops, launch). */

/* Compiles one unit through the cache (jitop__unit_init + jitop__build_unit)
 * for m's arch and, unless lazy, loads its image (lazy: keeps the binary in
 * mu->unloaded). names: template name expressions (may be NULL). known: the
 * unit's files as another unit of m read them (jitop__build_unit_known), or
 * NULL. On success mu holds the unit, its key, deps, image or binary and,
 * for one name, its lowered symbol; on failure mu is zeroed, and
 * *unresolved (may be NULL) says whether the failure is the answer that
 * the unit declares no such name (jitop__built.unresolved). The image is
 * linked into m->images by the caller (under m->lock). */
int jitop__modunit_build(jitop_module *m, const char *path, const char *text,
                         const char *const *names, size_t nnames, bool lazy,
                         const jitop__deps *known, jitop__modunit *mu, bool *unresolved);
void jitop__modunit_free(jitop__modunit *mu);

/* Loads the source images not loaded yet (m->lock held): after it, every
 * m->units[i].image is set and m->units_loaded is true. */
int jitop__units_load(jitop_module *m);
/* Loads one source's image if not loaded yet (m->lock held; not for a
 * linked module): what an instance folded into it needs. Its
 * folded_lowered is filled then. */
int jitop__unit_load(jitop_module *m, jitop__modunit *mu);

/* Loads a built binary as an image (cuModuleLoadData in m's context) and
 * lists its kernels: all of them, or with only set (an instance's lowered
 * name) that one if it is a kernel. what names the unit in messages. */
int jitop__image_load(jitop_module *m, const char key[33], const jitop__binary *bin,
                      const char *what, const char *only, jitop__image **out);
/* Links img into m->images, the list freed with the module (m->lock held,
 * or m not yet published). */
void jitop__module_add_image(jitop_module *m, jitop__image *img);
/* Unloads (if still loaded; makes drv's context current) and frees.
 * Accepts NULL. */
void jitop__image_free(const struct jitop__driver *drv, jitop__image *img);
/* Frees img's kernel list (names and descriptions); the image stays. */
void jitop__image_free_kernels(jitop__image *img);
/* The kernel of img with this exact driver name, or NULL. */
const jitop__kernel *jitop__image_find(const jitop__image *img, const char *name);

/* Bindings (binding.c). A binding for function fn of img, with fn's code
 * put on the GPU now (cuFuncLoad, unless img->code_loaded), not at its first
 * launch. Makes m's context current on the calling thread. */
int jitop__binding_make(jitop_module *m, jitop__image *img, CUfunction fn, const char *lowered,
                        jitop__binding **out);
/* A stale binding: launches fail with JITOP_ESTALE. */
int jitop__binding_stale(const char *lowered, jitop__binding **out);
void jitop__binding_free_chain(jitop__binding *b);
/* Puts fn's code (a kernel of img) on the GPU unless img->code_loaded (the
 * step jitop__binding_make takes; the op list takes it too). Makes m's
 * context current. */
int jitop__function_load(const jitop_module *m, const jitop__image *img, CUfunction fn,
                         const char *what);

/* Where the kernel an op of the sources names lives now: the first unit
 * image (in source order) holding a kernel whose symbol is name (an extern
 * "C" kernel, or a symbol asked for as it is), else whose C++ name is name
 * ("ns::scale" for the symbol of ns::scale(float*): qualified as declared,
 * parameters left out). images[i] overrides m->units[i].image (commit looks
 * up in the images it is about to swap in); may be NULL. Source images not
 * loaded are not searched: load them first (jitop__units_load). Returns 1
 * with *img, *fn and *symbol (owned by the image) set; 0 when no kernel has
 * that name; -1 when several kernels of one image do (overloads), with
 * *symbol the first. The C++ match reads the symbols' own encoding of plain
 * names (no demangler); only a name it cannot match that way (an anonymous
 * namespace) demangles the image's symbols (jitop__demangle). */
int jitop__find_kernel(const jitop_module *m, jitop__image *const *images, const char *name,
                       jitop__image **img, CUfunction *fn, const char **symbol);

/* Identifiers joined by "::" (a leading "::" allowed): a name that the
 * kernels of the sources' images answer for (jitop__find_kernel), with no
 * compile. Anything else ("f<float>", "(void (*)(int *))k", "&k") is a name
 * expression for NVRTC. */
bool jitop__name_is_plain(const char *name);

/* jitop_load's options without its -instance=NAME ones (declare.c): *kept
 * (malloc'd, pointing into options; NULL when noptions is 0) and the names,
 * canonical (jitop__name_canonical) and without repeats, in *declared. An
 * empty name is JITOP_EINVAL, nothing left allocated. The caller refuses
 * plain names (jitop__name_is_plain: an extern "C" kernel, nothing to
 * instantiate) with jitop__load_instance_refused, which says so. */
int jitop__load_instances(const char *name, const char *const *options, size_t noptions,
                          const char ***kept, size_t *nkept, jitop__strv *declared);
int jitop__load_instance_refused(const char *module, const char *option);

/* Linked modules (linked.c). */

/* jitop__build_link, reading the binaries not in hand from the cache by
 * their keys when the link misses (an entry gone is built again from its
 * files: in[i] then points to the new key and binary, valid during the
 * call only). */
int jitop__link_units(jitop_module *m, jitop__link_input *in, size_t n, bool defer,
                      jitop__built *out);
/* Links m's units by their current keys (m->link_key): loads the image as
 * m->units[0].image or, lazy, keeps its binary (link_unloaded; with no
 * data on a hit). Frees the units' binaries in hand. m->lock held, or m
 * not published. */
int jitop__link_module(jitop_module *m, bool lazy);
/* jitop__units_load for a linked module (m->lock held). */
int jitop__link_load(jitop_module *m);
/* The index of the unit an instance unit iu was made from (same source
 * path or inline text). */
size_t jitop__link_source_of(const jitop_module *m, const jitop__unit *iu);
/* An instance's image in a linked module: iu's binary ibin (its key key)
 * linked with the module's other units, loaded with only its kernel
 * (only). Takes m->lock briefly (call without it). */
int jitop__link_instance(jitop_module *m, const jitop__unit *iu, const char key[33],
                         const jitop__binary *ibin, const char *only, jitop__image **out);

/* Host code (hostlib.c). A module's host sources are one shared object
 * (host/library.c builds it through the cache), loaded from its bytes
 * with dlopen(RTLD_NOW | RTLD_LOCAL) under a name that holds its key, so
 * that a rebuilt object never aliases an old one.
 *
 * Calls and unloading. A call (op/hostfn.c) brackets its use of an
 * object with the object's in-flight count, as a launch does an image's:
 *     lib = host->cur; inflight++ (seq_cst); if host->cur changed: inflight--, retry;
 *     call; inflight--
 * A commit stores the new object in host->cur (one store: every jitop_fn
 * of the module switches at once) and retires the old one; a reap
 * dlcloses a retired object whose count it reads as 0 after that store:
 * no call can still enter it. The structs stay until the module is freed
 * (a call that loaded an old pointer may still touch its count). */
typedef struct jitop__hostlib {
    void *handle;             /* NULL once dlclose'd */
    /* The memory file the object was loaded from, open while the object
     * is: dlopen knows an object by the path it was given
     * (/proc/self/fd/N), and a number reused by another object's file
     * would alias it. An object dlclose could not unload keeps its
     * number for the life of the process. */
    int fd;
    char key[33];
    /* The exports, copied out of the object (they must outlive it). */
    size_t n;
    char **names;
    char **sigs;
    void **addrs;             /* in the object: valid while handle is set */
    int (*init)(const jitop_host_api *api);
    bool inited;              /* the API table was handed over (m->lock) */
    atomic_uint inflight;
    bool retired;
    struct jitop__hostlib *next; /* every object of the module, newest first */
} jitop__hostlib;

typedef struct jitop__host {
    jitop__strv sources;      /* absolute paths, in load order */
    jitop__strv cflags, ldflags;
    jitop__deps deps;         /* the current object's files (m->lock) */
    _Atomic(jitop__hostlib *) cur;
    jitop__hostlib *libs;     /* m->lock */
    /* The table handed to each object (the op room fills its calls before
     * it hands out a function: api_ready, m->lock). */
    jitop_host_api api;
    bool api_ready;
    /* What the op room keeps (its jitop_fn handles), freed with it. */
    void *fns;
    void (*fns_free)(jitop_module *m);
} jitop__host;

/* Builds and loads the host object of m (m not yet published). */
int jitop__host_load(jitop_module *m, const jitop__strv *sources, const jitop__strv *cflags,
                     const jitop__strv *ldflags);
/* A rebuild: *out NULL when the object's key did not change; otherwise the
 * new object, loaded, not published, with its files in *deps. */
int jitop__host_prepare(jitop_module *m, jitop__hostlib **out, jitop__deps *deps);
/* Publishes lib as m's host code (m->lock held): hands it the API table
 * when the op room made one; the old object is retired. On failure the
 * old code stays and lib is freed. Consumes lib and deps. */
int jitop__host_commit(jitop_module *m, jitop__hostlib *lib, jitop__deps *deps);
/* Hands the API table to lib if it has not had it (m->lock held). */
int jitop__hostlib_init(jitop_module *m, jitop__hostlib *lib);
/* dlcloses retired objects no call is inside; *left gets those still open. */
void jitop__host_reap(jitop_module *m, size_t *left);
/* Unloads and frees (a prepared object never published, or at module free). */
void jitop__hostlib_free(jitop__hostlib *lib);
void jitop__host_free(jitop_module *m);
/* The stat fast path over the current object's files. */
int jitop__host_fresh(jitop_module *m, bool *fresh);

/* jitop_load for arch instead of the context's (the same device's
 * arch-specific variant, e.g. "sm_90a" for wgmma on an sm_90 context): a
 * module of its own (the arch is part of its identity), built and reloaded
 * for that arch; the driver loads it at once, so a device that cannot run
 * it fails the load. For the shipped ops. */
int jitop__load_arch(jitop_ctx *ctx, const char *name, const char *const *sources,
                     size_t nsources, const char *const *options, size_t noptions,
                     const char *arch, jitop_module **out);

#endif
