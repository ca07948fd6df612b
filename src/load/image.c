/* Images: one loaded binary (a CUmodule in the module's context) with the
 * kernels listed in it, loaded, looked up and freed. Called by module.c
 * (sources, instances, reload) and linked.c (linked images). */
#include "load/driver.h"
#include "load/load.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void jitop__image_free_kernels(jitop__image *img)
{
    jitop__kernel *k = img->kernels;
    size_t n = img->nkernels;
    for (size_t i = 0; i < n; i++) {
        free(k[i].name);
        free((size_t *)k[i].desc.param_offset);
    }
    free(k);
    img->kernels = NULL;
    img->nkernels = 0;
}

void jitop__image_free(const jitop__driver *drv, jitop__image *img)
{
    if (!img)
        return;
    if (img->mod && drv) {
        /* A failure here leaves nothing to recover: the handle is gone. */
        if (jitop__driver_make_current(drv) == JITOP_OK)
            jitop__cu_check(drv->api->cuModuleUnload(img->mod), "cuModuleUnload", NULL);
    }
    jitop__image_free_kernels(img);
    jitop__strv_free(&img->globals);
    jitop__strv_free(&img->globals_cxx);
    free(img);
}

const jitop__kernel *jitop__image_find(const jitop__image *img, const char *name)
{
    for (size_t i = 0; img && i < img->nkernels; i++)
        if (strcmp(img->kernels[i].name, name) == 0)
            return &img->kernels[i];
    return NULL;
}

static int list_kernels(const jitop__driver *drv, jitop__image *img, const char *what)
{
    const jitop__cuda_api *api = drv->api;
    unsigned count = 0;
    CUfunction *fns = NULL;
    int status = jitop__cu_check(api->cuModuleGetFunctionCount(&count, img->mod),
                                 "cuModuleGetFunctionCount", what);
    if (status != JITOP_OK || count == 0)
        goto out;
    fns = calloc(count, sizeof *fns);
    img->kernels = calloc(count, sizeof *img->kernels);
    if (!fns || !img->kernels) {
        status = jitop__fail(JITOP_ENOMEM, "out of memory");
        goto out;
    }
    status = jitop__cu_check(api->cuModuleEnumerateFunctions(fns, count, img->mod),
                             "cuModuleEnumerateFunctions", what);
    for (unsigned i = 0; status == JITOP_OK && i < count; i++) {
        const char *name = NULL;
        status = jitop__cu_check(api->cuFuncGetName(&name, fns[i]), "cuFuncGetName", what);
        if (status != JITOP_OK)
            break;
        img->kernels[i].fn = fns[i];
        if (!(img->kernels[i].name = jitop__strdup(name)))
            status = jitop__fail(JITOP_ENOMEM, "out of memory");
        else
            img->nkernels++;
    }
out:
    free(fns);
    return status;
}

/* An instance's image: its one kernel looked up by name, which also puts
 * the kernel's code on the GPU (the list of a source image does not). A
 * name that is no kernel leaves the list empty: the caller says so. */
static int list_kernel(const jitop__driver *drv, jitop__image *img, const char *name,
                       const char *what)
{
    CUfunction fn = NULL;
    CUresult r = drv->api->cuModuleGetFunction(&fn, img->mod, name);
    if (r == CUDA_ERROR_NOT_FOUND)
        return JITOP_OK;
    int status = jitop__cu_check(r, "cuModuleGetFunction", what);
    if (status != JITOP_OK)
        return status;
    if (!(img->kernels = calloc(1, sizeof *img->kernels)) ||
        !(img->kernels[0].name = jitop__strdup(name)))
        return jitop__fail(JITOP_ENOMEM, "out of memory");
    img->kernels[0].fn = fn;
    img->nkernels = 1;
    img->code_loaded = true;
    return JITOP_OK;
}

int jitop__image_load(jitop_module *m, const char key[33], const jitop__binary *bin,
                      const char *what, const char *only, jitop__image **out)
{
    const jitop__driver *drv = m->drv;
    jitop__image *img = calloc(1, sizeof *img);
    int status = JITOP_OK;
    *out = NULL;
    if (!img)
        return jitop__fail(JITOP_ENOMEM, "out of memory");
    atomic_init(&img->inflight, 0);
    memcpy(img->key, key, sizeof img->key);
    /* The module goes into the current context: make it m's (a reload may
     * run on any thread). */
    status = jitop__driver_make_current(drv);
    if (status != JITOP_OK)
        goto out;
    /* The driver copies the image, so the entry can be freed afterwards. */
    CUresult r = drv->api->cuModuleLoadData(&img->mod, bin->data);
    if (r != CUDA_SUCCESS) {
        img->mod = NULL;
        status = jitop__cu_check(r, "cuModuleLoadData", what);
        if (r == CUDA_ERROR_UNSUPPORTED_PTX_VERSION) {
            /* PTX from an NVRTC newer than the driver: its ISA version is
             * one the driver's JIT does not know. A cubin needs no JIT. */
            int v = jitop__driver_version();
            jitop__fail_prefix(status,
                               "module %s: %s: the PTX needs a newer driver (NVRTC %s made it; "
                               "the driver is CUDA %d.%d): compile for %s (a cubin, which the "
                               "driver loads without its PTX compiler: arch %s, JITOP_ARCH=%s) "
                               "or update the NVIDIA driver",
                               m->name, what, jitop__nvrtc_version(), v / 1000, v % 1000 / 10,
                               drv->arch, drv->arch, drv->arch);
        } else if (r == CUDA_ERROR_NO_BINARY_FOR_GPU || r == CUDA_ERROR_INVALID_IMAGE) {
            char name[128];
            jitop__driver_device_name(drv, name, sizeof name);
            jitop__fail_prefix(status, "module %s: %s was built for %s but device %d is %s (%s)",
                               m->name, what, m->arch, (int)drv->device, drv->arch, name);
        }
        goto out;
    }
    status = only ? list_kernel(drv, img, only, what) : list_kernels(drv, img, what);
    /* What jitop_global_get looks for: a walk of the symbol table (a few
     * microseconds), kept because the binary is not. */
    if (status == JITOP_OK)
        status = jitop__binary_globals(bin, &img->globals);
    if (status == JITOP_OK && m->ctx->verbose && !bin->is_ptx) {
        size_t globals = jitop__cubin_global_bytes(bin->data, bin->size);
        if (globals > 0)
            jitop__log(m->ctx,
                       "module %s: %s has %zu bytes of __device__ variables, which the driver "
                       "allocates and copies at every load (0.2-0.3 ms on an H100); a static "
                       "constexpr data member used in device code is one, an enumerator is not",
                       m->name, what, globals);
    }
out:
    if (status != JITOP_OK)
        jitop__image_free(drv, img);
    else
        *out = img;
    return status;
}

void jitop__module_add_image(jitop_module *m, jitop__image *img)
{
    img->next = m->images;
    m->images = img;
}
