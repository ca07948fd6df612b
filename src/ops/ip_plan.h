/*
 * The in-place square matmul's chunk plan (inplace.c, the cuBLAS path for
 * n > 64): how many rows one product covers, how many scratch buffers turn,
 * and whether the copy-back runs on SMs kept from cuBLAS. Pure arithmetic on
 * the environment's settings, so that it is tested without a GPU
 * (tests/cpu/test_ip_plan.c). The settings (read once per context, when its
 * first in-place call makes the state; jitop_square_matmul_scratch_bound
 * reads them at each call):
 *
 *   JITOP_INPLACE_CHUNK_MB=c     MiB of A one product covers, 1..65536 (32)
 *   JITOP_INPLACE_OVERLAP=0      copies on the caller's stream, one buffer
 *                                (any other value, or unset: overlap on)
 *   JITOP_INPLACE_MM_BUFS=b      scratch buffers in turn with the copy
 *                                stream, 2..4 (2): product i waits for the
 *                                copy of chunk i - b only
 *   JITOP_INPLACE_MM_COPY_SMS=k  k >= 1: the products run with cuBLAS's SM
 *                                count target at (SMs - k) and the copy-back
 *                                is ip_copy (kernels/inplace.cu) on the copy
 *                                stream with at most k SMs' worth of blocks,
 *                                so that it runs beside the next product on
 *                                the SMs cuBLAS leaves free (the driver's D2D
 *                                copy also runs on SMs, and cuBLAS's kernels
 *                                fill them all). 0 or unset: off.
 *   JITOP_INPLACE_MM_PANEL=0|1   the panel kernel (kernels/inplace_panel.cu,
 *                                below): 0 never, 1 for every call it can
 *                                take; unset: for the calls the automatic
 *                                rule gives it (jitop__ip_panel_plan)
 *
 * A value that does not parse or is out of range is ignored (the default
 * holds) and named in jitop__ip_mm_cfg.bad, which the context's verbose log
 * reports.
 */
#ifndef JITOP_OPS_IP_PLAN_H
#define JITOP_OPS_IP_PLAN_H

#include "base/base.h"

#include <stddef.h>
#include <stdint.h>

#define JITOP__IP_CHUNK_BYTES ((size_t)32 << 20)
#define JITOP__IP_MAX_CHUNK_MB 65536
#define JITOP__IP_MAX_BUFS 4
#define JITOP__IP_MAX_COPY_SMS 65535

/* jitop__ip_mm_cfg.bad: the variables set but ignored */
#define JITOP__IP_BAD_CHUNK 1u
#define JITOP__IP_BAD_BUFS 2u
#define JITOP__IP_BAD_COPY_SMS 4u
#define JITOP__IP_BAD_PANEL 8u

typedef struct jitop__ip_mm_cfg {
    size_t chunk_bytes; /* bytes of A per product (before rounding to whole rows) */
    int overlap;        /* 0: no copy stream, one buffer */
    int bufs;           /* buffers in turn when the copy stream runs, 2..4 */
    int copy_sms;       /* SMs kept for the copy-back; 0: the driver's copy */
    unsigned bad;       /* JITOP__IP_BAD_* */
    int panel;          /* JITOP_INPLACE_MM_PANEL: -1 the automatic rule, 0, 1 */
} jitop__ip_mm_cfg;

/* The settings from the four variables' values (NULL: unset). */
void jitop__ip_mm_cfg_parse(const char *chunk_mb, const char *overlap, const char *bufs,
                            const char *copy_sms, jitop__ip_mm_cfg *out);

/* JITOP_INPLACE_MM_PANEL's value (NULL: unset) into out->panel: "0", "1",
 * else -1 (the automatic rule), with JITOP__IP_BAD_PANEL when set to
 * anything else. */
void jitop__ip_panel_parse(const char *panel, jitop__ip_mm_cfg *out);

/* The same from getenv (all five). */
void jitop__ip_mm_cfg_env(jitop__ip_mm_cfg *out);

/* One call's plan for m rows of row bytes at address a, on a device of
 * sm_count SMs; can_partition: cuBLAS has cublasSetSmCountTarget.
 *  - rows per product: chunk_bytes / row (at least 1, at most INT_MAX),
 *    all m when m fits one chunk (one product, no copy stream);
 *  - bufs: 1 without the copy stream (one chunk, or overlap off), else
 *    cfg->bufs; the scratch is bufs x chunk bytes;
 *  - partition when the copy stream runs, copy_sms > 0, can_partition and
 *    copy_sms < sm_count; then the rows per product are rounded down to a
 *    multiple of 8 (when at least 8), so that every chunk starts 16-byte
 *    aligned relative to A (chunk bytes a multiple of 16 for 2- and 4-byte
 *    elements), and copy_width is the widest word (16, 8, 4, 2, 1 bytes)
 *    dividing both a and the chunk's bytes: the scratch is 256-byte aligned
 *    and its buffers chunk bytes apart, so both ends of every copy are
 *    aligned to it. */
typedef struct jitop__ip_mm_plan {
    int64_t rows;   /* rows per product (the last one may have fewer) */
    int64_t chunks; /* products */
    size_t chunk;   /* rows x row: bytes of one full chunk, and one buffer */
    int bufs;       /* scratch buffers (1: copies on the caller's stream) */
    int partition;  /* 1: ip_copy on copy_sms SMs, cuBLAS at sm_target */
    int sm_target;  /* cuBLAS's SM count target for the products (partition) */
    int copy_width; /* ip_copy's word in bytes (partition) */
} jitop__ip_mm_plan;

void jitop__ip_mm_plan_make(const jitop__ip_mm_cfg *cfg, int64_t m, size_t row, uintptr_t a,
                            int sm_count, int can_partition, jitop__ip_mm_plan *out);

/* The most scratch one stream's calls hold for rows of row bytes, any m:
 * (overlap ? bufs : 1) x the whole rows of one chunk (one row at least). */
size_t jitop__ip_mm_scratch_bound(const jitop__ip_mm_cfg *cfg, size_t row);

/* ip_copy's grid for bytes in words of width bytes, blocks of block threads,
 * blocks_per_sm of them resident per SM, on sms SMs: one thread a word at
 * most, at most sms x blocks_per_sm blocks (the rest is the kernel's loop),
 * at least one. */
unsigned jitop__ip_copy_grid(size_t bytes, int width, int block, int blocks_per_sm, int sms);

/* The panel kernel (kernels/inplace_panel.cu, sqmm_panel<T, n, ...>): A <- A W
 * on sm_90a for 16-bit A, and float32 A with TF32 products, written
 * straight into A by groups of n / bn blocks (bn: jitop__ip_panel_bn) that
 * each own a panel of 128 rows (no copy-back). It can take a call when: the
 * device is compute capability 9.0 exactly (sm_90a code runs there only);
 * 2-byte elements, or 4-byte ones with tf32; n a multiple of bn in [256,
 * 4096]; 1 <= m <= JITOP__IP_PANEL_MAX_M; a 16-byte aligned, and w where
 * TMA reads it (16-bit, and TF32 A W^T; TF32 A W reads jitop's own aligned
 * W^T); the device holds at least a group's blocks at once (resident: the
 * driver's occupancy over all SMs). It takes it when mode is 1, or mode is -1 (unset) and the
 * automatic rule does: n in [256, 1024] for any m, n in (1024, 2048] for m
 * >= JITOP__IP_PANEL_AUTO_WIDE_M (where it measured faster than the chunked
 * path on the H100; below that m a wide n leaves the last round of panels
 * part-empty: bench/INPLACE_NOTES.md). Then it returns NULL and *grid is
 * the persistent grid: resident rounded down to whole groups, at most one
 * block per tile (a multiple of n / 256: every block of a group runs at
 * once, which the cooperative launch guarantees); else the reason, for the
 * verbose log. */
#define JITOP__IP_PANEL_MIN_N 256
#define JITOP__IP_PANEL_MAX_N 4096
#define JITOP__IP_PANEL_MAX_M ((int64_t)INT32_MAX - 128)
#define JITOP__IP_PANEL_AUTO_MIN_N 256
#define JITOP__IP_PANEL_AUTO_MAX_N 1024
#define JITOP__IP_PANEL_AUTO_WIDE_N 2048
#define JITOP__IP_PANEL_AUTO_WIDE_M 16384
const char *jitop__ip_panel_plan(int mode, int cc_major, int cc_minor, size_t es, int tf32,
                                 int64_t m, int64_t n, uintptr_t a, uintptr_t w, int transposed,
                                 int resident, int *grid);

/* sqmm_panel's tile columns for es-byte elements (256; TF32: 128) and its
 * blocks' shared memory (kernels/inplace_panel.cu's ip_panel_cfg<T>::SMEM:
 * 214016 bytes; TF32: 197632). */
int jitop__ip_panel_bn(size_t es);
size_t jitop__ip_panel_smem(size_t es);

/* The registers a thread sqmm_panel must be built with: its warpgroups
 * trade them by setmaxnreg, 40 for the producer's and 232 for each
 * consumer's, 64512 of the 65536 an SM has, which only 168 a thread at
 * launch (384 threads, one block an SM) gives back. */
#define JITOP__IP_PANEL_REGS 168

/* The panel path's scratch: two 4-byte counters a block of the grid (the
 * kernel uses two a group) in the first jitop__ip_panel_counters(grid)
 * bytes (a multiple of 256), then, for TF32 A W only (not transposed, es
 * 4: TF32 wgmma reads B K-contiguous only), W^T, n x n elements; 16-bit
 * and transposed calls read W as it is. */
size_t jitop__ip_panel_counters(int grid);
size_t jitop__ip_panel_scratch(int64_t n, size_t es, int transposed, int grid);

/* Calls of ctx that the panel kernel took (defined in inplace.c; for the
 * GPU test). */
size_t jitop__inplace_panel_calls(jitop_ctx *ctx);

/* Calls of ctx whose copy-back ran by ip_copy on the kept SMs (defined in
 * inplace.c; for the GPU test, which must see the variant run, not fall
 * back unseen). */
size_t jitop__inplace_partitioned(jitop_ctx *ctx);

#endif
