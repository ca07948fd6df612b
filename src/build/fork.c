/*
 * What a process does before it forks workers that build through its
 * context (`jitop build`'s worker processes, tools/cli_pool.c): what the
 * cache would say once at the first compile is said now, in the parent, so
 * that every worker inherits it as said instead of each saying it again.
 *
 * No warm-up NVRTC compile is run here, although a worker's first compile
 * costs two to three times a later one: the set-up behind that first
 * compile is not inherited. bench/fork_warm_probe.c measured a forked
 * child's first compile of a small kernel at 0.86-0.97x the speed (CPU
 * time, six runs) when the parent had compiled a tiny kernel before the
 * fork, while that warm-up cost the parent 100-127 ms on the build's
 * critical path (2-core VM, NVRTC 13.0; bench/BUILD_NOTES.md). The child's
 * first compile takes ~4000 minor page faults against ~1000 for its
 * second: fork copies no page table entries of NVRTC's read-only file
 * mappings, and the heap a compile writes is copy-on-write or fresh, so
 * each process faults its working set in again, warmed parent or not.
 */
#include "build/build.h"

void jitop__build_before_fork(jitop_ctx *ctx)
{
    if (ctx && ctx->cache)
        jitop__cache_probe_locks(ctx->cache);
    jitop__pch_before_fork();
}
