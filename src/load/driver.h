/*
 * The CUDA driver, opened at run time: cuda.c opens and resolves the
 * driver; the rest call it through the table. libcuda.so.1 is dlopen'ed
 * once per process; every entry point is resolved with cuGetProcAddress for
 * the ABI version of the toolkit headers we were compiled with (so
 * "cuMemAlloc" is the _v2 the header's prototype describes), into a table
 * typed from <cuda.h>. Nothing links -lcuda, so the library and its tests
 * start, and compile/prewarm work, without a driver.
 *
 * Part of the load room (see load.h). Included by the load room and by the
 * rooms above that call the driver: op (launches, describing kernels) and
 * ops (the shipped ops' memory and streams); outside src/, by the GPU tests,
 * the benchmarks and the fake driver (tests/fakecuda), which use its table
 * so that none of them links libcuda.
 *
 * Named driver.h, not cuda.h: that name would shadow the toolkit's <cuda.h>
 * for every file compiled with -Isrc.
 */
#ifndef JITOP_CUDA_DRIVER_H
#define JITOP_CUDA_DRIVER_H

#include "base/base.h"

#include <cuda.h>

/* Every driver call jitop (and its GPU tests and benchmarks) makes, with the
 * ABI version that the toolkit header's prototype describes. The version is
 * explicit because asking cuGetProcAddress for CUDA_VERSION returns the
 * newest ABI, which for some calls takes other arguments (13.0 added
 * cuCtxSynchronize(CUcontext) and cuCtxGetDevice(CUdevice *, CUcontext)
 * under the same names). cuda.c checks every pair at compile time against
 * the PFN_<name>_v<version> typedefs of <cudaTypedefs.h>. The name given is
 * the unversioned symbol cuGetProcAddress expects; the field has the header's
 * prototype, so a macro such as cuMemAlloc -> cuMemAlloc_v2 names the same
 * field in the struct and at the call. */
/* The core: what starting the driver, loading, getting an op, launching it
 * and tearing down need, resolved when the driver starts. A warm load in a
 * new process pays for every entry resolved then (each cuGetProcAddress took
 * 0.6-0.7 us on the GPU machine, 31 us for the whole table). */
#define JITOP__CUDA_CORE(X)                                                                        \
    X(cuInit, 2000)                                                                                \
    X(cuDriverGetVersion, 2020)                                                                    \
    X(cuGetErrorName, 6000)                                                                        \
    X(cuGetErrorString, 6000)                                                                      \
    X(cuDeviceGet, 2000)                                                                           \
    X(cuDeviceGetCount, 2000)                                                                      \
    X(cuDeviceGetAttribute, 2000)                                                                  \
    X(cuDeviceGetName, 2000)                                                                       \
    X(cuDevicePrimaryCtxRetain, 7000)                                                              \
    X(cuDevicePrimaryCtxRelease, 11000)                                                            \
    X(cuCtxGetCurrent, 4000)                                                                       \
    X(cuCtxSetCurrent, 4000)                                                                       \
    X(cuCtxPushCurrent, 4000)                                                                      \
    X(cuCtxPopCurrent, 4000)                                                                       \
    X(cuCtxGetDevice, 2000)                                                                        \
    X(cuCtxSynchronize, 2000)                                                                      \
    X(cuModuleLoadData, 2000)                                                                      \
    X(cuModuleUnload, 2000)                                                                        \
    X(cuModuleGetFunction, 2000)                                                                   \
    X(cuModuleGetFunctionCount, 12040)                                                             \
    X(cuModuleEnumerateFunctions, 12040)                                                           \
    X(cuFuncGetName, 12030)                                                                        \
    X(cuFuncLoad, 12040)                                                                           \
    X(cuLaunchKernel, 4000)                                                                        \
    X(cuLaunchKernelEx, 11060)

/* The rest, resolved all at once the first time one of them is needed
 * (jitop__cuda_more): NULL in the table until then. */
#define JITOP__CUDA_MORE(X)                                                                        \
    X(cuFuncGetParamInfo, 12040)                                                                   \
    X(cuFuncGetAttribute, 2020)                                                                    \
    X(cuFuncSetAttribute, 9000)                                                                    \
    X(cuOccupancyMaxPotentialBlockSize, 6050)                                                      \
    X(cuOccupancyMaxActiveBlocksPerMultiprocessor, 6050)                                           \
    X(cuOccupancyMaxActiveClusters, 11070)                                                         \
    X(cuMemAlloc, 3020)                                                                            \
    X(cuMemFree, 3020)                                                                             \
    X(cuMemAllocAsync, 11020)                                                                      \
    X(cuMemFreeAsync, 11020)                                                                       \
    X(cuMemcpyHtoD, 3020)                                                                          \
    X(cuMemcpyDtoH, 3020)                                                                          \
    X(cuMemsetD8, 3020)                                                                            \
    X(cuStreamCreate, 2000)                                                                        \
    X(cuStreamDestroy, 4000)                                                                       \
    X(cuStreamSynchronize, 2000)                                                                   \
    X(cuEventCreate, 2000)                                                                         \
    X(cuEventDestroy, 4000)                                                                        \
    X(cuEventRecord, 2000)                                                                         \
    X(cuEventSynchronize, 2000)                                                                    \
    X(cuEventElapsedTime, 12080)                                                                   \
    X(cuMemcpyDtoDAsync, 3020)                                                                     \
    X(cuStreamWaitEvent, 3020)                                                                     \
    X(cuMemsetD32Async, 3020)                                                                      \
    X(cuTensorMapEncodeTiled, 12000)                                                               \
    JITOP__CUDA_GLOBALS(X)

/* Module globals (src/op/global.c): looked up and copied, part of the rest. */
#define JITOP__CUDA_GLOBALS(X)                                                                     \
    X(cuModuleGetGlobal, 3020)                                                                     \
    X(cuMemcpyHtoDAsync, 3020)                                                                     \
    X(cuMemcpyDtoHAsync, 3020)

#define JITOP__CUDA_FUNCS(X) JITOP__CUDA_CORE(X) JITOP__CUDA_MORE(X)

#define JITOP__CUDA_FIELD(fn, version) __typeof__(fn) *fn;
typedef struct jitop__cuda_api {
    JITOP__CUDA_FUNCS(JITOP__CUDA_FIELD)
} jitop__cuda_api;
#undef JITOP__CUDA_FIELD

/* One context's view of the driver (ctx->driver). Immutable once started. */
struct jitop__driver {
    const jitop__cuda_api *api;
    CUdevice device;
    CUcontext cu;          /* the context jitop loads and launches in */
    bool primary;          /* cu is the device's retained primary context */
    int cc_major, cc_minor;
    int sm_count;
    char arch[16];         /* "sm_90" */
};

/* The device's name (for messages: asked of the driver each time, so that
 * starting the driver does not pay for it); "" when it cannot be had. */
void jitop__driver_device_name(const jitop__driver *d, char *buf, size_t cap);

/* Starts the driver for ctx if it is not started: opens libcuda.so.1 (once
 * per process), cuInit, picks cfg.device (or the device of cfg.cu_context),
 * retains its primary context unless cfg.cu_context is given, and registers
 * the release as a context teardown hook. Takes ctx->lock: call it without
 * holding it. Cheap once started (one atomic load). Without libcuda.so.1,
 * without a device, or in a compile_only context: JITOP_ENODRIVER with a
 * message saying which. */
int jitop__driver_start(jitop_ctx *ctx);

/* ctx->driver, started (NULL until jitop__driver_start succeeded). */
static inline jitop__driver *jitop__driver_of(const jitop_ctx *ctx)
{
    return __atomic_load_n(&ctx->driver, __ATOMIC_ACQUIRE);
}

/* The process's driver table with every entry resolved, or NULL when no
 * context started the driver yet or the rest cannot be resolved (GPU tests
 * and benchmarks use it for memory, streams and events, so that they need
 * not link libcuda and can SKIP where it is missing). */
const jitop__cuda_api *jitop__cuda(void);

/* Resolves the table's JITOP__CUDA_MORE entries (once per process; the
 * driver must be started): call it before using any of them. JITOP_OK, or
 * JITOP_ENODRIVER naming the entry the driver lacks. */
int jitop__cuda_more(void);

/* Turns a driver result into a status: CUDA_SUCCESS is JITOP_OK; anything
 * else is JITOP_ECUDA with a message naming the call, the op (may be NULL),
 * and the driver's name and text for the error. */
int jitop__cu_check(CUresult r, const char *what, const char *op);

/* The CUDA version the driver supports (cuDriverGetVersion: 13000 for
 * 13.0), 0 when the driver is not started. For messages. */
int jitop__driver_version(void);

/* Makes ctx's CUcontext current on the calling thread if it is not already
 * (one cuCtxGetCurrent: a thread-local read in the driver). */
int jitop__driver_make_current(const jitop__driver *d);

/* "sm_90" for the context's device (starts the driver if needed). */
int jitop__driver_arch(jitop_ctx *ctx, char *arch, size_t cap);

#endif
