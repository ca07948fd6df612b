/* Bindings: what a launch needs of one kernel (see jitop__binding in
 * load.h), made when an op is first got and again by each commit that moves
 * the op to new code, and the step that puts a kernel's code on the GPU
 * before its first launch. */
#include "load/driver.h"
#include "load/load.h"

#include <stdlib.h>

void jitop__binding_free_chain(jitop__binding *b)
{
    while (b) {
        jitop__binding *older = b->older;
        free(b->lowered);
        free(b->param_offset); /* one block: the offsets, then the sizes */
        free(b);
        b = older;
    }
}

int jitop__binding_stale(const char *lowered, jitop__binding **out)
{
    jitop__binding *b = calloc(1, sizeof *b);
    *out = NULL;
    if (!b || !(b->lowered = jitop__strdup(lowered))) {
        free(b);
        return jitop__fail(JITOP_ENOMEM, "out of memory");
    }
    atomic_init(&b->smem_raised, 0);
    atomic_init(&b->described, true); /* nothing to describe: launches fail first */
    *out = b;
    return JITOP_OK;
}

/* Puts the code of fn (a kernel of img) on the GPU if the driver has not
 * yet (it loads lazily: a listed function's code waits for its first use),
 * so that a launch never pays for it. An instance's lookup loaded its code
 * already: no driver call then. Makes m's context current. */
int jitop__function_load(const jitop_module *m, const jitop__image *img, CUfunction fn,
                         const char *what)
{
    int status = jitop__driver_make_current(m->drv);
    if (status == JITOP_OK && !img->code_loaded)
        status = jitop__cu_check(m->drv->api->cuFuncLoad(fn), "cuFuncLoad", what);
    return status;
}

int jitop__binding_make(jitop_module *m, jitop__image *img, CUfunction fn, const char *lowered,
                        jitop__binding **out)
{
    jitop__binding *b = calloc(1, sizeof *b);
    *out = NULL;
    if (!b)
        return jitop__fail(JITOP_ENOMEM, "out of memory");
    atomic_init(&b->smem_raised, 0);
    atomic_init(&b->described, false);
    int status = jitop__function_load(m, img, fn, lowered);
    if (status == JITOP_OK && !(b->lowered = jitop__strdup(lowered)))
        status = jitop__fail(JITOP_ENOMEM, "out of memory");
    if (status != JITOP_OK) {
        jitop__binding_free_chain(b);
        return status;
    }
    b->fn = fn;
    b->image = img;
    *out = b;
    return JITOP_OK;
}
