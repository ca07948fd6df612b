/*
 * The CUDA driver for the bench programs, opened with dlopen so that the
 * compile-only parts run on machines without a driver (the same reason
 * src/load/cuda.c opens it at run time). Only the calls the benchmarks use.
 */
#ifndef JITOP_BENCH_CUDA_H
#define JITOP_BENCH_CUDA_H

#include <cuda.h>
#include <stddef.h>

typedef struct bench_cu {
    void *lib;
    CUresult (*Init)(unsigned);
    CUresult (*DeviceGet)(CUdevice *, int);
    CUresult (*DeviceGetAttribute)(int *, CUdevice_attribute, CUdevice);
    CUresult (*DevicePrimaryCtxRetain)(CUcontext *, CUdevice);
    CUresult (*CtxSetCurrent)(CUcontext);
    CUresult (*CtxSynchronize)(void);
    CUresult (*ModuleLoadData)(CUmodule *, const void *);
    CUresult (*ModuleUnload)(CUmodule);
    CUresult (*ModuleGetFunction)(CUfunction *, CUmodule, const char *);
    CUresult (*LaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
                             unsigned, unsigned, CUstream, void **, void **);
    CUresult (*MemAlloc)(CUdeviceptr *, size_t);
    CUresult (*MemFree)(CUdeviceptr);
    CUresult (*MemcpyHtoD)(CUdeviceptr, const void *, size_t);
    CUresult (*MemcpyDtoH)(void *, CUdeviceptr, size_t);
    CUresult (*GetErrorName)(CUresult, const char **);
    CUcontext ctx;
    CUdevice dev;
} bench_cu;

/* Opens libcuda.so.1 and resolves the calls. Returns 0, or -1 with a reason
 * ("no CUDA driver: ...") in err. Nothing is initialised yet. */
int bench_cu_open(bench_cu *cu, char *err, size_t errcap);

/* cuInit, device `ordinal`, its primary context made current. Returns 0 or -1
 * with the failing call and the driver's error name in err. */
int bench_cu_start(bench_cu *cu, int ordinal, char *err, size_t errcap);

/* "sm_90" for the current device into buf. Returns 0 or -1 with err. */
int bench_cu_arch(bench_cu *cu, char *buf, size_t cap, char *err, size_t errcap);

/* Formats "what: CUDA_ERROR_X" into err when r is not CUDA_SUCCESS.
 * Returns 0 when r is CUDA_SUCCESS, -1 otherwise. */
int bench_cu_check(bench_cu *cu, CUresult r, const char *what, char *err, size_t errcap);

/* Closes the library (the process exits soon after; contexts are left to it). */
void bench_cu_close(bench_cu *cu);

#endif
