/* jitop_ctx_create: a base context (base/context.c) with its cache opened
 * (the cache room) and its way to ask the device for an arch (this room's
 * jitop__driver_arch, called only if no arch was configured), wired here,
 * in the lowest room that sees all three. The cache closes from a teardown
 * hook registered first, so it runs after every other part's teardown
 * (modules, watch, shipped ops), as the last step; the process's PCH files
 * that this context's compiles made go just before it (build/pch.c). */
#include "load/driver.h"
#include "build/build.h" /* jitop__pch_ctx_destroy */
#include "cache/cache.h"

#include <stdlib.h>

static void close_cache(jitop_ctx *ctx)
{
    jitop__cache_close(ctx->cache);
    ctx->cache = NULL;
}

int jitop_ctx_create(const jitop_config *cfg, jitop_ctx **out)
{
    jitop_ctx *ctx = NULL;
    if (!out)
        return jitop__fail(JITOP_EINVAL, "jitop_ctx_create: out is NULL");
    *out = NULL;
    int status = jitop__ctx_new(cfg, &ctx);
    if (status == JITOP_OK) {
        ctx->device_arch = jitop__driver_arch;
        status = jitop__ctx_on_destroy(ctx, close_cache);
    }
    if (status == JITOP_OK) /* runs before close_cache: hooks run last first */
        status = jitop__ctx_on_destroy(ctx, jitop__pch_ctx_destroy);
    if (status == JITOP_OK)
        status = jitop__cache_open(ctx->cfg.cache_dir, ctx->cfg.cache_max_size, ctx->verbose,
                                   &ctx->cache);
    if (status == JITOP_OK) {
        /* The strings are the caller's: read here, copied by the cache. */
        const char *spec = ctx->cfg.remote_cache ? ctx->cfg.remote_cache
                                                 : getenv("JITOP_REMOTE_CACHE");
        const char *secret = ctx->cfg.remote_cache_secret ? ctx->cfg.remote_cache_secret
                                                          : getenv("JITOP_REMOTE_CACHE_SECRET");
        status = jitop__cache_remote_setup(ctx->cache, spec, secret);
        ctx->cfg.remote_cache = ctx->cfg.remote_cache_secret = NULL;
    }
    if (status != JITOP_OK) {
        jitop_ctx_destroy(ctx);
        return status;
    }
    *out = ctx;
    return JITOP_OK;
}
