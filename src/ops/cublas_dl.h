/* cuBLAS for the ops that run products through it (inplace.c, lltm.c):
 * libcublas.so.13 opened with dlopen (the library never links it), one
 * handle in the context's CUDA context, and the entry points each op asks
 * for. Handles and streams are pointers; enums are ints. */
#ifndef JITOP_OPS_CUBLAS_DL_H
#define JITOP_OPS_CUBLAS_DL_H

#include "base/base.h"

#include <stdbool.h>
#include <stddef.h>

/* The first member of each op's own cuBLAS struct. */
typedef struct jitop__cublas {
    void *lib;    /* the dlopen handle */
    void *handle; /* the cublasHandle_t */
    int (*destroy)(void *handle);
    int (*set_stream)(void *handle, void *stream);
} jitop__cublas;

/* Opens libcublas.so.13 (by soname, then $CUDA_HOME/lib64, then
 * /usr/local/cuda/lib64), looks up names[0..n) into fns[0..n), and makes a
 * handle in ctx's CUDA context with CUBLAS_DEFAULT_MATH (full fp32: no TF32
 * unless a call's compute type asks) and host pointer mode. Returns a
 * zeroed block of size bytes (the op's struct, a jitop__cublas first) with
 * the jitop__cublas filled in; or NULL, with "<who>: cuBLAS not available
 * (<reason>)<fallback>" logged, when any step fails (nothing is left open). */
void *jitop__cublas_open(jitop_ctx *ctx, const char *who, const char *fallback, size_t size,
                         const char *const *names, void **fns, size_t n);

/* An entry point that not every libcublas.so.13 may have (looked up after
 * jitop__cublas_open, so that its absence fails nothing): NULL when the
 * library lacks it. */
void *jitop__cublas_sym(const jitop__cublas *cb, const char *name);

/* Destroys the handle when live (ctx's CUDA context is current: at a
 * teardown the driver may be gone), closes the library and frees cb (the
 * block jitop__cublas_open returned). A failure is logged under who. */
void jitop__cublas_close(jitop_ctx *ctx, const char *who, jitop__cublas *cb, bool live);

#endif
