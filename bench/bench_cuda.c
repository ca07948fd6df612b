#include "bench_cuda.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

/* dlsym returns void *; the cast through a union keeps -Wpedantic quiet and
 * states the POSIX guarantee that function pointers round-trip. */
static int sym(void *lib, const char *name, void *slot, char *err, size_t errcap)
{
    void *p = dlsym(lib, name);
    if (!p) {
        snprintf(err, errcap, "libcuda.so.1 lacks %s", name);
        return -1;
    }
    memcpy(slot, &p, sizeof p);
    return 0;
}

int bench_cu_open(bench_cu *cu, char *err, size_t errcap)
{
    memset(cu, 0, sizeof *cu);
    cu->lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!cu->lib) {
        const char *why = dlerror();
        snprintf(err, errcap, "no CUDA driver: %s", why ? why : "dlopen(libcuda.so.1) failed");
        return -1;
    }
    /* The versioned names are the ones cuda.h maps the plain calls to. */
    if (sym(cu->lib, "cuInit", &cu->Init, err, errcap) ||
        sym(cu->lib, "cuDeviceGet", &cu->DeviceGet, err, errcap) ||
        sym(cu->lib, "cuDeviceGetAttribute", &cu->DeviceGetAttribute, err, errcap) ||
        sym(cu->lib, "cuDevicePrimaryCtxRetain", &cu->DevicePrimaryCtxRetain, err, errcap) ||
        sym(cu->lib, "cuCtxSetCurrent", &cu->CtxSetCurrent, err, errcap) ||
        sym(cu->lib, "cuCtxSynchronize", &cu->CtxSynchronize, err, errcap) ||
        sym(cu->lib, "cuModuleLoadData", &cu->ModuleLoadData, err, errcap) ||
        sym(cu->lib, "cuModuleUnload", &cu->ModuleUnload, err, errcap) ||
        sym(cu->lib, "cuModuleGetFunction", &cu->ModuleGetFunction, err, errcap) ||
        sym(cu->lib, "cuLaunchKernel", &cu->LaunchKernel, err, errcap) ||
        sym(cu->lib, "cuMemAlloc_v2", &cu->MemAlloc, err, errcap) ||
        sym(cu->lib, "cuMemFree_v2", &cu->MemFree, err, errcap) ||
        sym(cu->lib, "cuMemcpyHtoD_v2", &cu->MemcpyHtoD, err, errcap) ||
        sym(cu->lib, "cuMemcpyDtoH_v2", &cu->MemcpyDtoH, err, errcap) ||
        sym(cu->lib, "cuGetErrorName", &cu->GetErrorName, err, errcap)) {
        (void)dlclose(cu->lib);
        cu->lib = NULL;
        return -1;
    }
    return 0;
}

int bench_cu_check(bench_cu *cu, CUresult r, const char *what, char *err, size_t errcap)
{
    const char *name = NULL;
    if (r == CUDA_SUCCESS)
        return 0;
    if (!cu->GetErrorName || cu->GetErrorName(r, &name) != CUDA_SUCCESS || !name)
        name = "unknown CUDA error";
    snprintf(err, errcap, "%s: %s (%d)", what, name, (int)r);
    return -1;
}

int bench_cu_start(bench_cu *cu, int ordinal, char *err, size_t errcap)
{
    if (bench_cu_check(cu, cu->Init(0), "cuInit", err, errcap) ||
        bench_cu_check(cu, cu->DeviceGet(&cu->dev, ordinal), "cuDeviceGet", err, errcap) ||
        bench_cu_check(cu, cu->DevicePrimaryCtxRetain(&cu->ctx, cu->dev),
                       "cuDevicePrimaryCtxRetain", err, errcap) ||
        bench_cu_check(cu, cu->CtxSetCurrent(cu->ctx), "cuCtxSetCurrent", err, errcap))
        return -1;
    return 0;
}

int bench_cu_arch(bench_cu *cu, char *buf, size_t cap, char *err, size_t errcap)
{
    int major = 0, minor = 0;
    if (bench_cu_check(cu, cu->DeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, cu->dev),
                       "cuDeviceGetAttribute(major)", err, errcap) ||
        bench_cu_check(cu, cu->DeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, cu->dev),
                       "cuDeviceGetAttribute(minor)", err, errcap))
        return -1;
    snprintf(buf, cap, "sm_%d%d", major, minor);
    return 0;
}

void bench_cu_close(bench_cu *cu)
{
    if (cu->lib)
        (void)dlclose(cu->lib);
    cu->lib = NULL;
}
