/*
 * What a process does before it forks workers that build through its
 * context (`jitop build`'s worker processes, tools/cli_pool.c): what the
 * cache would say once at the first compile is said now, in the parent, so
 * that every worker inherits it as said instead of each saying it again.
 *
 * No warm-up NVRTC compile is run here, although a worker's first compile
 * costs two to three times a later one: the set-up behind that first
 * compile is not inherited (bench/fork_warm_probe.c; bench/BUILD_NOTES.md),
 * while a warm-up would sit on the build's critical path. Fork copies no
 * page table entries of NVRTC's read-only file mappings, and the heap a
 * compile writes is copy-on-write or fresh, so each process faults its
 * working set in again, warmed parent or not.
 */
#include "build/build.h"

void jitop__build_before_fork(jitop_ctx *ctx)
{
    if (ctx && ctx->cache)
        jitop__cache_probe_locks(ctx->cache);
    jitop__pch_before_fork();
}
