/* Opening and closing cuBLAS for the ops (see cublas_dl.h). */
#include "ops/cublas_dl.h"

#include "load/driver.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

static void *cublas_sym(void *lib, const char *name, int *missing)
{
    void *p = dlsym(lib, name);
    if (p == NULL)
        *missing = 1;
    return p;
}

void *jitop__cublas_open(jitop_ctx *ctx, const char *who, const char *fallback, size_t size,
                         const char *const *names, void **fns, size_t n)
{
    jitop__cublas *cb = calloc(1, size);
    void *lib = dlopen("libcublas.so.13", RTLD_NOW | RTLD_LOCAL);
    const char *home = getenv("CUDA_HOME");
    char path[4096];
    if (lib == NULL && home != NULL &&
        snprintf(path, sizeof path, "%s/lib64/libcublas.so.13", home) < (int)sizeof path)
        lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (lib == NULL)
        lib = dlopen("/usr/local/cuda/lib64/libcublas.so.13", RTLD_NOW | RTLD_LOCAL);
    int missing = 0, ok = 0;
    const jitop__driver *d = jitop__driver_of(ctx);
    if (cb != NULL && lib != NULL && d != NULL) {
        typedef int (*create_fn)(void **handle);
        typedef int (*set_int_fn)(void *handle, int mode);
        create_fn create = (create_fn)cublas_sym(lib, "cublasCreate_v2", &missing);
        set_int_fn math = (set_int_fn)cublas_sym(lib, "cublasSetMathMode", &missing);
        set_int_fn ptr = (set_int_fn)cublas_sym(lib, "cublasSetPointerMode_v2", &missing);
        cb->destroy = (int (*)(void *))cublas_sym(lib, "cublasDestroy_v2", &missing);
        cb->set_stream = (int (*)(void *, void *))cublas_sym(lib, "cublasSetStream_v2", &missing);
        for (size_t i = 0; i < n; i++)
            fns[i] = cublas_sym(lib, names[i], &missing);
        /* 0: CUBLAS_DEFAULT_MATH; 0: CUBLAS_POINTER_MODE_HOST. */
        if (!missing && jitop__driver_make_current(d) == JITOP_OK && create(&cb->handle) == 0) {
            ok = math(cb->handle, 0) == 0 && ptr(cb->handle, 0) == 0;
            if (!ok && cb->destroy(cb->handle) != 0)
                jitop__log(ctx, "%s: cublasDestroy failed", who);
        }
    }
    if (ok) {
        cb->lib = lib;
        return cb;
    }
    jitop__log(ctx, "%s: cuBLAS not available (%s)%s", who,
               lib == NULL ? "libcublas.so.13 not found" : "setup failed", fallback);
    if (lib != NULL && dlclose(lib) != 0)
        jitop__log(ctx, "%s: dlclose(libcublas): %s", who, dlerror());
    free(cb);
    return NULL;
}

void *jitop__cublas_sym(const jitop__cublas *cb, const char *name)
{
    return dlsym(cb->lib, name);
}

void jitop__cublas_close(jitop_ctx *ctx, const char *who, jitop__cublas *cb, bool live)
{
    if (live && cb->destroy(cb->handle) != 0)
        jitop__log(ctx, "%s: cublasDestroy failed", who);
    if (dlclose(cb->lib) != 0)
        jitop__log(ctx, "%s: dlclose(libcublas): %s", who, dlerror());
    free(cb);
}
