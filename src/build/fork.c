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
 *
 * Pushes to a remote cache: a worker sends what it compiled before it
 * answers (the library's push thread would die with the worker's _exit)
 * and says which remotes took it; the parent records that, so that
 * `jitop build --push` sends each entry once. The parent sends its own
 * queue before forking: its push thread is then idle, holding nothing a
 * child could inherit mid-use (cache/remote_private.h, fork safety).
 */
#include "build/build.h"

void jitop__build_before_fork(jitop_ctx *ctx)
{
    if (ctx && ctx->cache) {
        jitop__cache_probe_locks(ctx->cache);
        jitop__cache_push_flush(ctx->cache);
    }
    jitop__pch_before_fork();
}

uint64_t jitop__build_worker_pushes(jitop_ctx *ctx, const char *key)
{
    if (!ctx || !ctx->cache)
        return 0;
    jitop__cache_push_flush(ctx->cache);
    return key && strlen(key) == 32 ? jitop__cache_pushed(ctx->cache, key) : 0;
}

void jitop__build_note_pushed(jitop_ctx *ctx, const char *key, uint64_t mask)
{
    if (ctx && ctx->cache && key && strlen(key) == 32)
        jitop__cache_note_pushed(ctx->cache, key, mask);
}
