/*
 * LayerNorm's plan constants as one value (jitop__ln_cfg), and JITOP_LN_PLAN,
 * which overrides any of them for a context (read when the context first
 * uses LayerNorm, like JITOP_LN_THREADS) and for a prewarm, so that plans
 * can be compared on the GPU in one process without a rebuild:
 *
 *   JITOP_LN_PLAN=fwd_bytes=64,fwd_cluster_tpr=512,fwd_min_blocks=2
 *
 * Fields (unset: layernorm.c's default; every instance a plan picks is
 * named by what it compiles, so the name stays the cache key):
 *   fwd_bytes        bytes of a row per thread at most (forward)
 *   fwd_max_tpr      largest block for one row before a cluster splits it
 *   fwd_cluster_tpr  block size of a cluster (largest, with fwd_fit)
 *   fwd_fit          1: a cluster's blocks shrink to the whole warps that
 *                    hold the row at fwd_bytes (no idle last pass)
 *   fwd_min_blocks   launch bounds' blocks per SM (0: none), the register cap
 *   fwd_min_blocks_from, fwd_min_blocks_to: ... for blocks of that many
 *                    threads only (default 0 to 1024): a cap above what a
 *                    small block needs makes ptxas use more registers, and
 *                    fewer of those blocks fit; one below what a large
 *                    block needs spills
 *   bwd_bytes, bwd_long_bytes (float32 rows over 64 KiB), bwd_max_tpr,
 *   bwd_cluster_tpr, bwd_fit: the backward's register kernels, as above
 *   bwd_pf           prefetch of the next rows: auto (the kernel's rule), 0, 1
 *   bwd_pf_from      rows of at least this many bytes that one block holds
 *                    take the prefetching kernel when bwd_pf is auto (0: the
 *                    kernel's rule, 16-bit rows of 8 KiB or more)
 *   bwd_pf_bytes     a second budget of bytes per thread for rows of 16-byte
 *                    vectors that take the prefetching kernel (0: none): of
 *                    bwd_bytes and it,
 *                    the one whose blocks (and the launch bounds' blocks per
 *                    SM) put nearer 12-16 warps on an SM, it on a tie
 *   bwd_min_blocks   0: the kernel's rule (ln_bwd_min_blocks), else n
 *   bwd_min_blocks_from, bwd_min_blocks_to: as the forward's
 *   bwd_bulk         1: rows over a cluster take the copy-engine kernel
 *                    where it fits (16-byte vectors), 0: never
 *   bulk_chunk, bulk_ept: that kernel's bytes of a row per block at most and
 *                    elements per thread at most
 *   bwd_bulk_bytes   rows of at least this many bytes take the copy-engine
 *                    kernel where it splits them even when one block of the
 *                    register kernel holds them (0: only rows over a cluster)
 *   fwd_bulk         1: forward rows of at least fwd_bulk_bytes (a shifted
 *                    row: shift_fwd_bulk_bytes, when not 0) take the
 *                    copy-engine kernel (layernorm_fwd_bulk) where it splits
 *                    them (16-byte vectors, a shifted row's body for an odd
 *                    N, over 2-8 blocks whose shares differ by one vector at
 *                    most, each <= fwd_bulk_chunk bytes, threads a power of
 *                    two for <= fwd_bulk_ept elements each); other rows keep
 *                    the register kernels, which the plan line says
 *   fwd_one_sync     1: the forward's cluster kernels (layernorm_fwd_cluster,
 *                    layernorm_fwd_bulk) take a row's mean and variance from
 *                    one cluster exchange of each block's sum and M2 (Chan
 *                    et al.'s merge) instead of two (mean, then squared
 *                    deviations); 0: two
 *   fwd_bulk_stages  layernorm_fwd_bulk's rows in flight per block, 2 to 4
 *                    (each a stage of its share of a row in shared memory)
 *   fwd_bulk_gb      1: layernorm_fwd_bulk keeps its share of gamma and beta
 *                    in shared memory (2 more shares' bytes), loaded once,
 *                    instead of reading them from L2 for every row; 2: in
 *                    each thread's registers (no shared memory; a shifted
 *                    row, or a thread of more than 8 vectors, takes 1)
 *   bwd_bulk_stages  layernorm_bwd_bulk's rows in flight per block, 2 to 4
 *                    (each a stage of its share of a row's x and dy in
 *                    shared memory)
 *   bulk_idle        layernorm_bwd_bulk's threads per block: the power of
 *                    two that holds the block's share at bulk_ept, unless
 *                    that leaves at least bulk_idle percent of its threads'
 *                    bulk_ept element slots idle, then the fewest whole
 *                    warps (100, the default: always the power of two; 0:
 *                    always whole warps)
 *   row_shift        1: rows whose length the 16-byte vector does not divide
 *                    (an odd 16-bit N) move in 16-byte vectors from each
 *                    row's first 16-byte boundary, head and tail element by
 *                    element, where the row tensors sit at one offset within
 *                    16 bytes and gamma and beta are 16-byte aligned; 0: the
 *                    widest vector that divides N (2 bytes for an odd N)
 *   shift_bwd_tpr    such rows whose backward plan takes a cluster or a
 *                    block of more threads than this take register clusters
 *                    of at most this many threads a block, fitted (bwd_fit),
 *                    instead (0: no such rule)
 *   shift_bwd_pf     1: such rows that one block holds take the prefetching
 *                    backward whatever their length (rows under bwd_pf_from
 *                    or the kernel's 8 KiB too), when bwd_pf is auto
 *   shift_fwd_stages layernorm_fwd_bulk's stages (as fwd_bulk_stages) for
 *                    such rows
 *   shift_bwd_bulk   1: such rows take the copy-engine backward where
 *                    aligned rows would (bwd_bulk), the grid's row stride
 *                    made whole 16-byte units; 0: the register kernels
 *   bulk_long_from, bulk_long_chunk, bulk_long_ept
 *                    backward rows of at least bulk_long_from bytes (0: no
 *                    such rows) split for the copy-engine kernel by these
 *                    instead of bulk_chunk and bulk_ept
 *   shift_bulk_long_from
 *                    the same threshold for rows the 16-byte vector does
 *                    not divide
 *   shift_fwd_bulk_bytes
 *                    fwd_bulk_bytes for such rows (0: fwd_bulk_bytes)
 * Any field may carry a dtype prefix, f32_ or h16_ (float16 and bfloat16),
 * to apply to that dtype only. The defaults differ by dtype
 * (src/ops/layernorm.c, chosen by the A/B in bench/layernorm_NOTES.md);
 * "legacy" as the first item starts from the plan before them, the same for
 * every dtype:
 *
 *   JITOP_LN_PLAN=legacy,h16_fwd_min_blocks=2
 * A malformed spec is JITOP_EINVAL naming the field and value at fault.
 */
#ifndef JITOP_OPS_LN_PLAN_H
#define JITOP_OPS_LN_PLAN_H

#include <stddef.h>

typedef struct jitop__ln_cfg {
    int fwd_bytes, fwd_max_tpr, fwd_cluster_tpr, fwd_fit;
    int fwd_min_blocks, fwd_min_blocks_from, fwd_min_blocks_to;
    int bwd_bytes, bwd_long_bytes, bwd_max_tpr, bwd_cluster_tpr, bwd_fit, bwd_pf, bwd_pf_bytes;
    int bwd_pf_from;
    int bwd_min_blocks, bwd_min_blocks_from, bwd_min_blocks_to;
    int bwd_bulk, bulk_chunk, bulk_ept, bwd_bulk_bytes;
    int fwd_bulk, fwd_bulk_bytes, fwd_bulk_chunk, fwd_bulk_ept;
    int fwd_one_sync, fwd_bulk_stages, fwd_bulk_gb;
    int bwd_bulk_stages, bulk_idle;
    int row_shift, shift_bwd_tpr, shift_bwd_pf, shift_fwd_stages, shift_bwd_bulk;
    int bulk_long_from, bulk_long_chunk, bulk_long_ept, shift_bulk_long_from;
    int shift_fwd_bulk_bytes;
    /* the fields set for this dtype, canonical (table order, "name=value"
     * joined by ',', unprefixed), after "legacy" when the spec starts so,
     * or "default" when none: what JITOP_VERBOSE prints as the plan */
    char text[768];
} jitop__ln_cfg;

/* *out = the plan for rows of es-byte elements (4: float32, 2: 16-bit):
 * *defaults (*legacy when spec starts with "legacy") with spec's fields
 * over it, those prefixed f32_ / h16_ only for their dtype and over the
 * unprefixed (spec NULL or "": none); what names the spec in errors (e.g.
 * "JITOP_LN_PLAN"). */
int jitop__ln_cfg_parse(const char *what, const char *spec, size_t es,
                        const jitop__ln_cfg *defaults, const jitop__ln_cfg *legacy,
                        jitop__ln_cfg *out);

#endif
