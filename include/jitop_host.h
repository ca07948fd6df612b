/*
 * jitop_host.h: the header for host-op authors. A host op is C or C++ code
 * (a .c, .cc, .cpp or .cxx file) given to jitop_load in the same list as
 * the module's .cu files: jitop compiles it with the system compiler into a
 * shared object (cached like a cubin), loads it, and hands its functions
 * out by name (jitop_fn_get, jitop_call).
 *
 * What an author writes:
 *
 *     #include <jitop_host.h>
 *
 *     JITOP_EXPORT(int, scale, (float *x, int n, float by))
 *     {
 *         jitop_op *k;
 *         if (jitop_host.op_get(jitop_host.module, "scale_kernel", &k) != 0)
 *             return -1;
 *         ...
 *         return jitop_host.launch(k, grid, block, 0, NULL, args, NULL, 0);
 *     }
 *
 * JITOP_EXPORT(ret, name, (params)) defines an exported function and
 * records its prototype (as written: "int (float *x, int n, float by)") in
 * the shared object's jitop_exports section. jitop reads that record at
 * load: jitop_fn_get compares the signature asked for with it and refuses
 * a mismatch, and jitop_module_fns lists the exported functions. Only
 * exported functions are visible: jitop compiles with
 * -fvisibility=hidden. In C++ the function is extern "C" (no overloads).
 *
 * Parameter and return types jitop can call (through libffi): void, every
 * C integer (char, short, int, long, long long, signed or unsigned,
 * [u]int8_t..[u]int64_t, size_t, ssize_t, ptrdiff_t, [u]intptr_t, bool),
 * float, double, and any pointer (T *, T[], a function pointer). A struct
 * or union by value is refused at jitop_fn_get.
 *
 * Using jitop from host code: jitop_host (below) is the table of jitop's
 * calls, handed to the shared object before any of its exported functions
 * can run (the first jitop_fn_get of the module, and before a reloaded
 * object is swapped in). Host code never links libjitop: an application
 * with a static libjitop works, and nothing it exports is needed. Not set
 * in a constructor (__attribute__((constructor)), a C++ static
 * initializer): those run when the object is loaded, before the table.
 * jitop_host.module is the module the object belongs to: its op handles
 * (op_get) are stable and follow kernel hot reloads.
 *
 * What unloading needs: jitop unloads an old object (dlclose) once no call
 * is inside it. An object that pins itself cannot be unloaded (a
 * thread_local variable with a C++ destructor registered on a thread that
 * lives on, or a thread the object started and never joined): leave those
 * out of host ops you want to reload, or the old code stays mapped (it is
 * never called again).
 */
#ifndef JITOP_HOST_H
#define JITOP_HOST_H

#include "jitop.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One exported function as the shared object records it. */
typedef struct jitop_host_export {
    const char *name;
    const char *signature; /* "ret (params)" as written in JITOP_EXPORT */
    void (*fn)(void);
    uint64_t magic; /* JITOP_HOST_EXPORT_MAGIC: a stray object in the section is refused */
} jitop_host_export;

#define JITOP_HOST_EXPORT_MAGIC 0x6a69746f70657870ull /* "jitopexp" */

/* The calls host code may make into jitop, handed over at load. size is
 * sizeof(jitop_host_api) of the library, version JITOP_HOST_API_VERSION:
 * fields are only ever appended. */
typedef struct jitop_host_api {
    uint32_t size;
    uint32_t version;
    jitop_module *module; /* the module this object belongs to */
    jitop_ctx *ctx;
    int (*op_get)(jitop_module *m, const char *name, jitop_op **out);
    int (*launch)(jitop_op *op, jitop_dim3 grid, jitop_dim3 block, size_t shared_bytes,
                  void *stream, void **args, const size_t *arg_sizes, size_t nargs);
    int (*launch_ex)(jitop_op *op, const jitop_launch_config *cfg, void **args,
                     const size_t *arg_sizes, size_t nargs);
    int (*occupancy)(jitop_op *op, size_t shared_bytes, int *block_size, int *min_grid);
    int (*op_info_get)(jitop_op *op, jitop_op_info *info);
    int (*ctx_cuda)(jitop_ctx *ctx, void **cu_context, int *cu_device);
    int (*global_get)(jitop_module *m, const char *name, jitop_global_info *out);
    int (*global_write)(jitop_module *m, const char *name, const void *src, size_t size,
                        void *stream);
    const char *(*errmsg)(const jitop_ctx *ctx);
    const char *(*strerror)(int status);
} jitop_host_api;

#define JITOP_HOST_API_VERSION 1

#if defined(__GNUC__)
#define JITOP__HOST_VISIBLE __attribute__((visibility("default")))
#define JITOP__HOST_HIDDEN __attribute__((visibility("hidden")))
#else
#error "jitop_host.h needs GCC or Clang (sections and visibility attributes)"
#endif

#ifdef __cplusplus
#define JITOP__HOST_LINKAGE extern "C"
#else
#define JITOP__HOST_LINKAGE
#endif

/* The table (defined once per shared object by jitop's own runtime object,
 * which jitop compiles from this header with JITOP_HOST_RUNTIME). */
extern JITOP__HOST_HIDDEN jitop_host_api jitop_host;

/* Every record is pointer-aligned and no more, so that the section is an
 * array: a compiler that raised the alignment of one record would leave a
 * gap the reader cannot walk. */
#define JITOP_EXPORT(ret, name, params)                                                        \
    JITOP__HOST_LINKAGE JITOP__HOST_VISIBLE ret name params;                                  \
    static const jitop_host_export jitop__export_##name                                       \
        __attribute__((section("jitop_exports"), used, aligned(sizeof(void *)))) = {          \
            #name, #ret " " #params, (void (*)(void))name, JITOP_HOST_EXPORT_MAGIC};           \
    JITOP__HOST_LINKAGE JITOP__HOST_VISIBLE ret name params

#ifdef JITOP_HOST_RUNTIME
/* jitop's runtime object: the table's storage, the record list and the
 * init call jitop makes before any exported function can run. The section
 * bounds come from the linker (__start_/__stop_ of a section whose name is
 * a C identifier); weak, so that an object with no export links too. */
JITOP__HOST_HIDDEN jitop_host_api jitop_host;
extern const jitop_host_export __start_jitop_exports[] __attribute__((weak, visibility("hidden")));
extern const jitop_host_export __stop_jitop_exports[] __attribute__((weak, visibility("hidden")));

JITOP__HOST_LINKAGE JITOP__HOST_VISIBLE const jitop_host_export *jitop_host_exports(size_t *n)
{
    *n = (size_t)(__stop_jitop_exports - __start_jitop_exports);
    return __start_jitop_exports;
}

JITOP__HOST_LINKAGE JITOP__HOST_VISIBLE int jitop_host_init(const jitop_host_api *api)
{
    if (!api || api->version != JITOP_HOST_API_VERSION || api->size < sizeof jitop_host)
        return -1;
    jitop_host = *api;
    return 0;
}
#endif

#ifdef __cplusplus
}
#endif

#endif
