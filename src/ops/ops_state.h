/*
 * The ops room: the shipped ops' C entry points (layernorm.c, lltm.c, inplace.c), the
 * top of src/. They load their kernels and launch them through the public
 * API; this private header (included by ops/ only) holds what that API
 * lacks: ctx->ops, the per-context state where each op keeps its loaded
 * module and op handles, and, through base.h, the context's teardown hooks
 * (to free that state with the context) and the error helpers. The ops also
 * include load/driver.h: the driver table and the context's device, for the
 * device memory some paths need (layernorm's workspace, lltm's split-K
 * scratch), the SM count, and the current context cuBLAS runs in, without
 * linking libcuda. cublas_dl.h (cublas_dl.c): the cuBLAS that lltm.c and
 * inplace.c open at run time.
 * May include: every room below.
 *
 * ctx->ops: each part defines and owns its own struct, creates it on first
 * use and frees it from its own teardown hook; this shell only holds the
 * two pointers.
 *
 * Publication: a part fills its struct completely, then stores the pointer
 * with __atomic_store_n(..., __ATOMIC_RELEASE) while holding ctx->lock; the
 * hot path reads it with __ATOMIC_ACQUIRE and no lock, so a call that finds
 * the state ready costs one load.
 */
#ifndef JITOP_OPS_STATE_H
#define JITOP_OPS_STATE_H

#include "base/base.h"

#include <stdlib.h>

struct jitop__layernorm_state;
struct jitop__lltm_state;
struct jitop__inplace_state;

struct jitop__ops_state {
    struct jitop__layernorm_state *layernorm; /* layernorm.c */
    struct jitop__lltm_state *lltm;           /* lltm.c */
    struct jitop__inplace_state *inplace;     /* inplace.c */
};

static inline void jitop__ops_state_free(jitop_ctx *ctx)
{
    free(ctx->ops);
    ctx->ops = NULL;
}

/* ctx->ops, created on first use. The caller holds ctx->lock. The shell's
 * hook is registered before any part's hook, so it runs after them. */
static inline int jitop__ops_state_get(jitop_ctx *ctx, jitop__ops_state **out)
{
    if (ctx->ops == NULL) {
        jitop__ops_state *s = calloc(1, sizeof *s);
        if (s == NULL)
            return jitop__fail(JITOP_ENOMEM, "jitop: out of memory for the ops state");
        int rc = jitop__ctx_on_destroy(ctx, jitop__ops_state_free);
        if (rc != JITOP_OK) {
            free(s);
            return rc;
        }
        ctx->ops = s;
    }
    *out = ctx->ops;
    return JITOP_OK;
}

#endif
