/* The CUDA driver through dlopen: opens libcuda.so.1 and resolves the table
 * (driver.h) that every other file calls it through; starts the driver for
 * a context and answers its device's arch. */
#include "load/driver.h"

#include <cudaTypedefs.h>
#include <dlfcn.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The oldest driver whose module API has everything jitop uses
 * (cuModuleEnumerateFunctions, cuFuncLoad, cuFuncGetParamInfo arrived in
 * 12.4). */
#define JITOP__MIN_DRIVER 12040

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static jitop__cuda_api g_api;
/* Published once the core entries are resolved and cuInit succeeded. */
static const jitop__cuda_api *g_ready;
static int g_status;
static char g_msg[1024];

typedef __typeof__(cuGetProcAddress) *getproc_fn;
static getproc_fn g_getproc; /* for the rest of the table, later */

/* The rest of the table (JITOP__CUDA_MORE), resolved on first need. */
static pthread_once_t g_more_once = PTHREAD_ONCE_INIT;
static int g_more_status = JITOP_ENODRIVER;
static char g_more_msg[1024];

/* Each table entry's prototype is the ABI version we ask the driver for. */
#define JITOP__CHECK_ABI(fn, version)                                                             \
    _Static_assert(__builtin_types_compatible_p(__typeof__(fn) *, PFN_##fn##_v##version),        \
                   #fn " does not have the prototype of version " #version);
JITOP__CUDA_FUNCS(JITOP__CHECK_ABI)
#undef JITOP__CHECK_ABI

/* Where libcuda.so.1 was found (the path the loader opened), for messages;
 * "" until open_driver knows it. */
static char g_path[256];

/* The toolkit's stub libcuda.so (lib64/stubs) lets programs link without a
 * driver; every call of it returns CUDA_ERROR_STUB_LIBRARY. Found first on
 * the library path (a stubs folder in LD_LIBRARY_PATH, or copied as
 * libcuda.so.1), it hides the driver: "update the driver" would be wrong. */
static int stub_found(char *msg, size_t cap)
{
    snprintf(msg, cap,
             "the libcuda.so.1 found (%s) is the CUDA toolkit's stub library "
             "(CUDA_ERROR_STUB_LIBRARY), not the NVIDIA driver: it only lets programs link. Take "
             "its folder (.../lib64/stubs) out of LD_LIBRARY_PATH or the loader's configuration "
             "so that the driver's libcuda.so.1 is found, or install the NVIDIA driver; "
             "compiling and prewarming the cache still work",
             g_path[0] ? g_path : "path unknown");
    return JITOP_ENODRIVER;
}

static int resolve(getproc_fn getproc, const char *sym, int version, void **slot, char *msg,
                   size_t cap)
{
    CUdriverProcAddressQueryResult found = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    CUresult r = getproc(sym, slot, version, CU_GET_PROC_ADDRESS_DEFAULT, &found);
    if (r == CUDA_ERROR_STUB_LIBRARY) {
        *slot = NULL;
        return stub_found(msg, cap);
    }
    if (r != CUDA_SUCCESS || found != CU_GET_PROC_ADDRESS_SUCCESS || !*slot) {
        *slot = NULL;
        snprintf(msg, cap,
                 "the CUDA driver (libcuda.so.1) has no %s for CUDA %d.%d (error %d, query %d): "
                 "update the NVIDIA driver",
                 sym, version / 1000, version % 1000 / 10, (int)r, (int)found);
        return JITOP_ENODRIVER;
    }
    return JITOP_OK;
}

/* Runs once per process. The handle is never dlclose'd: the driver keeps
 * threads and state for the life of the process anyway. */
static void open_driver(void)
{
    int status = JITOP_OK;
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *why = dlerror();
        snprintf(g_msg, sizeof g_msg,
                 "no CUDA driver: cannot open libcuda.so.1 (%s); compiling and prewarming the "
                 "cache still work (pass an arch, e.g. sm_90)",
                 why ? why : "not found");
        status = JITOP_ENODRIVER;
        goto out;
    }
    struct link_map *where = NULL;
    if (dlinfo(h, RTLD_DI_LINKMAP, &where) == 0 && where && where->l_name)
        snprintf(g_path, sizeof g_path, "%s", where->l_name);
    getproc_fn getproc = (getproc_fn)dlsym(h, "cuGetProcAddress_v2");
    if (!getproc) {
        snprintf(g_msg, sizeof g_msg,
                 "the CUDA driver is too old: libcuda.so.1 has no cuGetProcAddress_v2 (needs a "
                 "CUDA %d.%d driver or newer)",
                 JITOP__MIN_DRIVER / 1000, JITOP__MIN_DRIVER % 1000 / 10);
        status = JITOP_ENODRIVER;
        goto out;
    }
    status = resolve(getproc, "cuDriverGetVersion", 2020, (void **)&g_api.cuDriverGetVersion,
                     g_msg, sizeof g_msg);
    if (status != JITOP_OK)
        goto out;
    int driver_version = 0;
    CUresult r = g_api.cuDriverGetVersion(&driver_version);
    if (r != CUDA_SUCCESS || driver_version < JITOP__MIN_DRIVER) {
        snprintf(g_msg, sizeof g_msg,
                 "the CUDA driver is too old (CUDA %d.%d): jitop needs %d.%d or newer",
                 driver_version / 1000, driver_version % 1000 / 10, JITOP__MIN_DRIVER / 1000,
                 JITOP__MIN_DRIVER % 1000 / 10);
        status = JITOP_ENODRIVER;
        goto out;
    }
#define JITOP__RESOLVE(fn, version)                                                               \
    if (status == JITOP_OK && !g_api.fn)                                                          \
        status = resolve(getproc, #fn, version, (void **)&g_api.fn, g_msg, sizeof g_msg);
    JITOP__CUDA_CORE(JITOP__RESOLVE)
#undef JITOP__RESOLVE
    if (status != JITOP_OK)
        goto out;
    g_getproc = getproc;
    r = g_api.cuInit(0);
    if (r == CUDA_ERROR_STUB_LIBRARY) {
        status = stub_found(g_msg, sizeof g_msg);
        goto out;
    }
    if (r != CUDA_SUCCESS) {
        const char *name = NULL, *text = NULL;
        if (g_api.cuGetErrorName(r, &name) != CUDA_SUCCESS)
            name = "unknown error";
        if (g_api.cuGetErrorString(r, &text) != CUDA_SUCCESS)
            text = "";
        snprintf(g_msg, sizeof g_msg,
                 "no usable CUDA device: cuInit failed with %s (%s); compiling and prewarming "
                 "still work",
                 name, text);
        status = JITOP_ENODRIVER;
        goto out;
    }
    __atomic_store_n(&g_ready, &g_api, __ATOMIC_RELEASE);
out:
    g_status = status;
}

/* Runs once, after the core table is published (g_getproc is set before). */
static void resolve_more(void)
{
    int status = JITOP_OK;
#define JITOP__RESOLVE(fn, version)                                                               \
    if (status == JITOP_OK)                                                                       \
        status = resolve(g_getproc, #fn, version, (void **)&g_api.fn, g_more_msg,               \
                         sizeof g_more_msg);
    JITOP__CUDA_MORE(JITOP__RESOLVE)
#undef JITOP__RESOLVE
    g_more_status = status;
}

int jitop__cuda_more(void)
{
    if (!__atomic_load_n(&g_ready, __ATOMIC_ACQUIRE))
        return jitop__fail(JITOP_ENODRIVER, "the CUDA driver is not started");
    if (pthread_once(&g_more_once, resolve_more) != 0)
        return jitop__fail(JITOP_ENODRIVER, "cannot resolve the CUDA driver's entries (pthread_once)");
    return g_more_status == JITOP_OK ? JITOP_OK : jitop__fail(g_more_status, "%s", g_more_msg);
}

const jitop__cuda_api *jitop__cuda(void)
{
    const jitop__cuda_api *api = __atomic_load_n(&g_ready, __ATOMIC_ACQUIRE);
    if (api && jitop__cuda_more() != JITOP_OK)
        return NULL;
    return api;
}

int jitop__driver_version(void)
{
    const jitop__cuda_api *api = __atomic_load_n(&g_ready, __ATOMIC_ACQUIRE);
    int v = 0;
    if (!api || api->cuDriverGetVersion(&v) != CUDA_SUCCESS)
        v = 0;
    return v;
}

int jitop__cu_check(CUresult r, const char *what, const char *op)
{
    if (r == CUDA_SUCCESS)
        return JITOP_OK;
    /* The core table: an error message never needs the rest resolved. */
    const jitop__cuda_api *api = __atomic_load_n(&g_ready, __ATOMIC_ACQUIRE);
    const char *name = NULL, *text = NULL;
    if (!api || api->cuGetErrorName(r, &name) != CUDA_SUCCESS || !name)
        name = "CUDA_ERROR_UNKNOWN";
    if (!api || api->cuGetErrorString(r, &text) != CUDA_SUCCESS || !text)
        text = "unknown error";
    if (op)
        return jitop__fail(JITOP_ECUDA, "%s (op %s): %s (%d): %s", what, op, name, (int)r, text);
    return jitop__fail(JITOP_ECUDA, "%s: %s (%d): %s", what, name, (int)r, text);
}

int jitop__driver_make_current(const jitop__driver *d)
{
    CUcontext cur = NULL;
    CUresult r = d->api->cuCtxGetCurrent(&cur);
    if (r == CUDA_SUCCESS && cur != d->cu)
        r = d->api->cuCtxSetCurrent(d->cu);
    return jitop__cu_check(r, "making jitop's CUDA context current", NULL);
}

static void driver_release(jitop_ctx *ctx)
{
    jitop__driver *d = ctx->driver;
    if (!d)
        return;
    if (d->primary) {
        /* Nothing useful can be done with a failure at teardown; the
         * driver releases primary contexts at process exit anyway. */
        CUresult r = d->api->cuDevicePrimaryCtxRelease(d->device);
        if (r != CUDA_SUCCESS)
            jitop__log(ctx, "cuDevicePrimaryCtxRelease failed (%d)", (int)r);
    }
    __atomic_store_n(&ctx->driver, NULL, __ATOMIC_RELEASE);
    free(d);
}

/* Fills d for cfg.cu_context or the primary context of cfg.device. */
static int attach_device(jitop_ctx *ctx, jitop__driver *d)
{
    const jitop__cuda_api *api = d->api;
    int status = JITOP_OK, count = 0;
    if (ctx->cfg.cu_context) {
        CUcontext popped;
        d->cu = (CUcontext)ctx->cfg.cu_context;
        status = jitop__cu_check(api->cuCtxPushCurrent(d->cu), "cuCtxPushCurrent(cfg.cu_context)",
                                 NULL);
        if (status == JITOP_OK) {
            status = jitop__cu_check(api->cuCtxGetDevice(&d->device), "cuCtxGetDevice", NULL);
            int pop = jitop__cu_check(api->cuCtxPopCurrent(&popped), "cuCtxPopCurrent", NULL);
            if (status == JITOP_OK)
                status = pop;
        }
        goto out;
    }
    status = jitop__cu_check(api->cuDeviceGetCount(&count), "cuDeviceGetCount", NULL);
    if (status == JITOP_OK && count == 0)
        status = jitop__fail(JITOP_ENODRIVER, "no CUDA device: the driver reports none");
    else if (status == JITOP_OK && (ctx->cfg.device < 0 || ctx->cfg.device >= count))
        status = jitop__fail(JITOP_ENOTFOUND,
                             "CUDA device %d does not exist: this machine has %d (0..%d)",
                             ctx->cfg.device, count, count - 1);
    if (status == JITOP_OK)
        status = jitop__cu_check(api->cuDeviceGet(&d->device, ctx->cfg.device), "cuDeviceGet",
                                 NULL);
    if (status == JITOP_OK) {
        status = jitop__cu_check(api->cuDevicePrimaryCtxRetain(&d->cu, d->device),
                                 "cuDevicePrimaryCtxRetain", NULL);
        d->primary = status == JITOP_OK;
    }
out:
    return status;
}

static int describe_device(jitop__driver *d)
{
    const jitop__cuda_api *api = d->api;
    int status = jitop__cu_check(
        api->cuDeviceGetAttribute(&d->cc_major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
                                  d->device),
        "cuDeviceGetAttribute(COMPUTE_CAPABILITY_MAJOR)", NULL);
    if (status == JITOP_OK)
        status = jitop__cu_check(
            api->cuDeviceGetAttribute(&d->cc_minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
                                      d->device),
            "cuDeviceGetAttribute(COMPUTE_CAPABILITY_MINOR)", NULL);
    if (status == JITOP_OK)
        status = jitop__cu_check(
            api->cuDeviceGetAttribute(&d->sm_count, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
                                      d->device),
            "cuDeviceGetAttribute(MULTIPROCESSOR_COUNT)", NULL);
    if (status == JITOP_OK)
        snprintf(d->arch, sizeof d->arch, "sm_%d%d", d->cc_major, d->cc_minor);
    return status;
}

int jitop__driver_start(jitop_ctx *ctx)
{
    int status = JITOP_OK;
    jitop__driver *d = NULL;
    if (jitop__driver_of(ctx))
        return JITOP_OK;
    double t0 = jitop__now_ms();
    if (ctx->cfg.compile_only)
        return jitop__fail(JITOP_ENODRIVER,
                           "this context is compile_only: it never opens the CUDA driver, so it "
                           "cannot load or launch (create one without compile_only)");
    if (pthread_once(&g_once, open_driver) != 0)
        return jitop__fail(JITOP_ENODRIVER, "cannot initialize the CUDA driver (pthread_once)");
    if (g_status != JITOP_OK)
        return jitop__fail(g_status, "%s", g_msg);
    if (pthread_mutex_lock(&ctx->lock) != 0)
        return jitop__fail(JITOP_EINVAL, "cannot lock the context");
    if (ctx->driver)
        goto out;
    d = calloc(1, sizeof *d);
    if (!d) {
        status = jitop__fail(JITOP_ENOMEM, "out of memory");
        goto out;
    }
    d->api = &g_api;
    status = attach_device(ctx, d);
    if (status == JITOP_OK)
        status = describe_device(d);
    if (status == JITOP_OK)
        status = jitop__ctx_on_destroy(ctx, driver_release);
    if (status != JITOP_OK) {
        if (d->primary && d->api->cuDevicePrimaryCtxRelease(d->device) != CUDA_SUCCESS)
            jitop__log(ctx, "cuDevicePrimaryCtxRelease failed while giving up");
        free(d);
        goto out;
    }
    if (ctx->verbose) {
        double ms = jitop__now_ms() - t0;
        char name[128];
        jitop__driver_device_name(d, name, sizeof name);
        jitop__log(ctx, "CUDA device %d: %s, %s, %d SMs (driver ready in %.3f ms)",
                   (int)d->device, name, d->arch, d->sm_count, ms);
    }
    __atomic_store_n(&ctx->driver, d, __ATOMIC_RELEASE);
out:
    pthread_mutex_unlock(&ctx->lock);
    return status;
}

void jitop__driver_device_name(const jitop__driver *d, char *buf, size_t cap)
{
    if (cap == 0)
        return;
    buf[0] = '\0';
    if (cap > 1 && d->api->cuDeviceGetName(buf, (int)(cap > 4096 ? 4096 : cap), d->device) !=
                       CUDA_SUCCESS)
        buf[0] = '\0';
}

int jitop__driver_arch(jitop_ctx *ctx, char *arch, size_t cap)
{
    int status = jitop__driver_start(ctx);
    if (status == JITOP_OK && (size_t)snprintf(arch, cap, "%s", jitop__driver_of(ctx)->arch) >= cap)
        status = jitop__fail(JITOP_EINVAL, "jitop__driver_arch: buffer of %zu bytes is too small",
                             cap);
    return status;
}

int jitop_ctx_cuda(jitop_ctx *ctx, void **cu_context, int *cu_device)
{
    if (!ctx)
        return jitop__fail(JITOP_EINVAL, "jitop_ctx_cuda: ctx is NULL");
    int status = jitop__driver_start(ctx);
    if (status == JITOP_OK)
        status = jitop__driver_make_current(jitop__driver_of(ctx));
    if (status == JITOP_OK) {
        const jitop__driver *d = jitop__driver_of(ctx);
        if (cu_context)
            *cu_context = d->cu;
        if (cu_device)
            *cu_device = (int)d->device;
    }
    return status;
}

