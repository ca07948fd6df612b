/*
 * What a process does before it forks workers that build through its
 * context (`jitop build`'s worker processes, tools/cli_pool.c): what the
 * cache would say once at the first compile is said now, in the parent, so
 * that every worker inherits it as said instead of each saying it again.
 */
#include "build/build.h"

void jitop__build_before_fork(jitop_ctx *ctx)
{
    if (ctx && ctx->cache)
        jitop__cache_probe_locks(ctx->cache);
    jitop__pch_before_fork();
}
