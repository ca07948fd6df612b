/* Run functions of the cases where threads work together: cooperative
 * groups, CUB, warp shuffles, atomics and shared memory. Integer results
 * are exact; a float sum of k terms in any order is within (k - 1) u of
 * the sum of their magnitudes (u the unit roundoff), which bounds the
 * reductions whose order the hardware picks. */
#include "compat_env.h"
#include "compat_runs.h"

#include <float.h>
#include <math.h>
#include <string.h>

void run_cg_tile_reduce(compat_env *e)
{
    jitop_op *op = cx_op(e, "tile32_reduce_sum");
    int n = (int)cx_int(e, 50000, 200000);
    unsigned blocks = cx_blocks(n, 256), ntiles = blocks * 256 / 32;
    int *x = cx_host(e, n * sizeof *x), *got = cx_host(e, ntiles * sizeof *got);
    cx_fill_i32(e, x, n, -1000000, 1000000);
    CUdeviceptr dx = cx_upload_new(e, x, n * sizeof *x), ds = cx_alloc(e, ntiles * sizeof *got);
    CX_LAUNCH(e, op, blocks, 256, 0, CXA(dx), CXA(ds), CXA(n));
    cx_download(e, got, ds, ntiles * sizeof *got);
    for (unsigned t = 0; t < ntiles; t++) {
        int64_t want = 0;
        for (int i = (int)t * 32; i < n && i < (int)(t + 1) * 32; i++)
            want += x[i];
        cx_eq_i64(e, "tile sum", t, got[t], want);
    }
}

void run_cg_tile_shfl(compat_env *e)
{
    jitop_op *op = cx_op(e, "tile16_max");
    int n = (int)cx_int(e, 50000, 200000);
    unsigned blocks = cx_blocks(n, 128), ntiles = blocks * 128 / 16;
    float *x = cx_host(e, n * sizeof *x), *got = cx_host(e, ntiles * sizeof *got);
    cx_fill_f32(e, x, n, -1000.0f, 1000.0f);
    CUdeviceptr dx = cx_upload_new(e, x, n * sizeof *x), dm = cx_alloc(e, ntiles * sizeof *got);
    CX_LAUNCH(e, op, blocks, 128, 0, CXA(dx), CXA(dm), CXA(n));
    cx_download(e, got, dm, ntiles * sizeof *got);
    for (unsigned t = 0; t < ntiles; t++) {
        float want = -FLT_MAX; /* the kernel's padding */
        for (int i = (int)t * 16; i < n && i < (int)(t + 1) * 16; i++)
            want = fmaxf(want, x[i]);
        cx_near(e, "tile max", t, got[t], want, 0);
    }
}

void run_cg_grid_sync(compat_env *e)
{
    jitop_op *op = cx_op(e, "grid_center");
    /* One block per SM is always co-resident, as a cooperative launch
     * requires. */
    unsigned grid = (unsigned)cx_device_attribute(e, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
    int n = (int)cx_int(e, 100000, 500000);
    double *x = cx_host(e, n * sizeof *x), *got = cx_host(e, n * sizeof *got);
    cx_fill_f64(e, x, n, -10.0, 10.0);
    CUdeviceptr dx = cx_upload_new(e, x, n * sizeof *x), dy = cx_alloc(e, n * sizeof *got);
    CUdeviceptr dp = cx_alloc(e, grid * sizeof(double));
    jitop_launch_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.grid = cx_dim(grid, 1, 1);
    cfg.block = cx_dim(256, 1, 1);
    cfg.cooperative = 1;
    CX_LAUNCH_EX(e, op, &cfg, CXA(dx), CXA(dp), CXA(dy), CXA(n));
    cx_download(e, got, dy, n * sizeof *got);
    double total = 0, mag = 0;
    for (int i = 0; i < n; i++) {
        total += x[i];
        mag += fabs(x[i]);
    }
    double mean = total / n;
    /* Both totals (kernel and reference) are within n u sum|x| of the
     * exact one, so the means differ by at most 2 u sum|x| plus their own
     * roundings; each subtraction rounds once more. A block missing from
     * the total (no real grid barrier) moves the mean by its partial sum / n,
     * orders of magnitude more. */
    for (int i = 0; i < n; i++)
        cx_near(e, "x - mean", i, got[i], x[i] - mean,
                CX_EPS_F64 * (2 * fabs(x[i] - mean) + 3 * mag));
}

void run_cg_cluster(compat_env *e)
{
    jitop_op *op = cx_op(e, "cluster_ring_sum");
    enum { CLUSTER = 4, BLOCK = 256 };
    unsigned grid = CLUSTER * (unsigned)cx_int(e, 8, 40);
    int n = (int)(grid * BLOCK) - (int)cx_int(e, 1, BLOCK - 1); /* the last block is partial */
    int *x = cx_host(e, n * sizeof *x), *got = cx_host(e, n * sizeof *got);
    cx_fill_i32(e, x, n, -1000000, 1000000);
    CUdeviceptr dx = cx_upload_new(e, x, n * sizeof *x), dout = cx_alloc(e, n * sizeof *got);
    jitop_launch_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.grid = cx_dim(grid, 1, 1);
    cfg.block = cx_dim(BLOCK, 1, 1);
    cfg.cluster = cx_dim(CLUSTER, 1, 1);
    CX_LAUNCH_EX(e, op, &cfg, CXA(dx), CXA(dout), CXA(n));
    cx_download(e, got, dout, n * sizeof *got);
    for (int i = 0; i < n; i++) {
        int b = i / BLOCK, t = i % BLOCK;
        int peer = b / CLUSTER * CLUSTER + (b % CLUSTER + 1) % CLUSTER; /* rank + 1 in the cluster */
        int j = peer * BLOCK + t;
        cx_eq_i64(e, "out", i, got[i], (int64_t)x[i] + (j < n ? x[j] : 0));
    }
}

void run_cub_block_reduce(compat_env *e)
{
    jitop_op *op = cx_op(e, "cub_block_sum");
    int n = (int)cx_int(e, 50000, 200000);
    unsigned blocks = cx_blocks(n, 256);
    float *x = cx_host(e, n * sizeof *x), *got = cx_host(e, blocks * sizeof *got);
    cx_fill_f32(e, x, n, -10.0f, 10.0f);
    CUdeviceptr dx = cx_upload_new(e, x, n * sizeof *x), ds = cx_alloc(e, blocks * sizeof *got);
    CX_LAUNCH(e, op, blocks, 256, 0, CXA(dx), CXA(ds), CXA(n));
    cx_download(e, got, ds, blocks * sizeof *got);
    for (unsigned b = 0; b < blocks; b++) {
        double want = 0, mag = 0;
        for (int i = (int)b * 256; i < n && i < (int)(b + 1) * 256; i++) {
            want += x[i];
            mag += fabs(x[i]);
        }
        cx_near(e, "block sum", b, got[b], want, 256 * CX_EPS_F32 * mag); /* 256 terms */
    }
}

void run_cub_block_scan(compat_env *e)
{
    jitop_op *op = cx_op(e, "cub_block_exclusive_scan");
    int n = (int)cx_int(e, 50000, 200000);
    unsigned blocks = cx_blocks(n, 128);
    int *x = cx_host(e, n * sizeof *x), *got = cx_host(e, n * sizeof *got);
    int *totals = cx_host(e, blocks * sizeof *totals);
    cx_fill_i32(e, x, n, -1000, 1000);
    CUdeviceptr dx = cx_upload_new(e, x, n * sizeof *x), dy = cx_alloc(e, n * sizeof *got);
    CUdeviceptr dt = cx_alloc(e, blocks * sizeof *totals);
    CX_LAUNCH(e, op, blocks, 128, 0, CXA(dx), CXA(dy), CXA(dt), CXA(n));
    cx_download(e, got, dy, n * sizeof *got);
    cx_download(e, totals, dt, blocks * sizeof *totals);
    for (unsigned b = 0; b < blocks; b++) {
        int64_t prefix = 0;
        for (int i = (int)b * 128; i < n && i < (int)(b + 1) * 128; i++) {
            cx_eq_i64(e, "exclusive prefix", i, got[i], prefix);
            prefix += x[i];
        }
        cx_eq_i64(e, "block total", b, totals[b], prefix);
    }
}

void run_cub_warp_reduce(compat_env *e)
{
    jitop_op *op = cx_op(e, "cub_warp_sum");
    int n = (int)cx_int(e, 50000, 200000);
    unsigned blocks = cx_blocks(n, 256), nwarps = blocks * 8;
    int *x = cx_host(e, n * sizeof *x), *got = cx_host(e, nwarps * sizeof *got);
    cx_fill_i32(e, x, n, -1000000, 1000000);
    CUdeviceptr dx = cx_upload_new(e, x, n * sizeof *x), ds = cx_alloc(e, nwarps * sizeof *got);
    CX_LAUNCH(e, op, blocks, 256, 0, CXA(dx), CXA(ds), CXA(n));
    cx_download(e, got, ds, nwarps * sizeof *got);
    for (unsigned w = 0; w < nwarps; w++) {
        int64_t want = 0;
        for (int i = (int)w * 32; i < n && i < (int)(w + 1) * 32; i++)
            want += x[i];
        cx_eq_i64(e, "warp sum", w, got[w], want);
    }
}

void run_warp_xor_sum(compat_env *e)
{
    jitop_op *op = cx_op(e, "warp_xor_sum");
    int n = (int)cx_int(e, 50000, 200000);
    int *x = cx_host(e, n * sizeof *x), *got = cx_host(e, n * sizeof *got);
    cx_fill_i32(e, x, n, -1000000, 1000000);
    CUdeviceptr dx = cx_upload_new(e, x, n * sizeof *x), dy = cx_alloc(e, n * sizeof *got);
    CX_LAUNCH(e, op, cx_blocks(n, 256), 256, 0, CXA(dx), CXA(dy), CXA(n));
    cx_download(e, got, dy, n * sizeof *got);
    for (int w = 0; w * 32 < n; w++) { /* every lane holds its warp's sum */
        int64_t want = 0;
        for (int i = w * 32; i < n && i < (w + 1) * 32; i++)
            want += x[i];
        for (int i = w * 32; i < n && i < (w + 1) * 32; i++)
            cx_eq_i64(e, "warp sum", i, got[i], want);
    }
}

void run_warp_scan(compat_env *e)
{
    jitop_op *op = cx_op(e, "warp_inclusive_scan");
    int n = (int)cx_int(e, 50000, 200000);
    int *x = cx_host(e, n * sizeof *x), *got = cx_host(e, n * sizeof *got);
    cx_fill_i32(e, x, n, -1000000, 1000000);
    CUdeviceptr dx = cx_upload_new(e, x, n * sizeof *x), dy = cx_alloc(e, n * sizeof *got);
    CX_LAUNCH(e, op, cx_blocks(n, 128), 128, 0, CXA(dx), CXA(dy), CXA(n));
    cx_download(e, got, dy, n * sizeof *got);
    int64_t prefix = 0;
    for (int i = 0; i < n; i++) {
        prefix = (i % 32 == 0 ? 0 : prefix) + x[i];
        cx_eq_i64(e, "inclusive prefix", i, got[i], prefix);
    }
}

void run_warp_ballot(compat_env *e)
{
    jitop_op *op = cx_op(e, "warp_ballot_count");
    int n = (int)cx_int(e, 50000, 200000);
    unsigned blocks = cx_blocks(n, 256), nwarps = blocks * 8;
    float *x = cx_host(e, n * sizeof *x);
    unsigned *mask = cx_host(e, nwarps * sizeof *mask);
    int *count = cx_host(e, nwarps * sizeof *count);
    cx_fill_f32(e, x, n, -1.0f, 1.0f);
    CUdeviceptr dx = cx_upload_new(e, x, n * sizeof *x);
    CUdeviceptr dmask = cx_alloc(e, nwarps * sizeof *mask), dcount = cx_alloc(e, nwarps * sizeof *count);
    CX_LAUNCH(e, op, blocks, 256, 0, CXA(dx), CXA(dmask), CXA(dcount), CXA(n));
    cx_download(e, mask, dmask, nwarps * sizeof *mask);
    cx_download(e, count, dcount, nwarps * sizeof *count);
    for (unsigned w = 0; w < nwarps; w++) {
        uint32_t want = 0;
        for (int l = 0; l < 32; l++) {
            int i = (int)w * 32 + l;
            if (i < n && x[i] > 0.0f)
                want |= 1u << l;
        }
        cx_eq_u64(e, "ballot", w, mask[w], want);
        cx_eq_i64(e, "popc", w, count[w], __builtin_popcount(want));
    }
}

void run_atomic_float_hist(compat_env *e)
{
    jitop_op *op = cx_op(e, "hist_weighted_f32");
    enum { BINS = 64 };
    int n = (int)cx_int(e, 100000, 400000);
    int *bin = cx_host(e, n * sizeof *bin);
    float *w = cx_host(e, n * sizeof *w), got[BINS];
    cx_fill_f32(e, w, n, -2.0f, 2.0f);
    for (int i = 0; i < n; i++)
        bin[i] = (int)cx_int(e, 0, BINS - 1);
    CUdeviceptr dbin = cx_upload_new(e, bin, n * sizeof *bin), dw = cx_upload_new(e, w, n * sizeof *w);
    CUdeviceptr dh = cx_alloc(e, sizeof got);
    cx_memset0(e, dh, sizeof got); /* an accumulator starts at zero */
    CX_LAUNCH(e, op, cx_blocks(n, 256), 256, 0, CXA(dbin), CXA(dw), CXA(dh), CXA(n));
    cx_download(e, got, dh, sizeof got);
    double want[BINS] = {0}, mag[BINS] = {0};
    int k[BINS] = {0};
    for (int i = 0; i < n; i++) {
        want[bin[i]] += w[i];
        mag[bin[i]] += fabs(w[i]);
        k[bin[i]]++;
    }
    for (int b = 0; b < BINS; b++) /* k[b] additions in an order the hardware picks */
        cx_near(e, "bin", b, got[b], want[b], (k[b] + 1) * CX_EPS_F32 * mag[b]);
}

void run_atomic_double_sum(compat_env *e)
{
    jitop_op *op = cx_op(e, "sum_f64");
    int n = (int)cx_int(e, 100000, 400000);
    double *x = cx_host(e, n * sizeof *x), got = 0;
    cx_fill_f64(e, x, n, -5.0, 5.0);
    CUdeviceptr dx = cx_upload_new(e, x, n * sizeof *x), dt = cx_alloc(e, sizeof got);
    cx_memset0(e, dt, sizeof got);
    CX_LAUNCH(e, op, cx_blocks(n, 256), 256, 0, CXA(dx), CXA(dt), CXA(n));
    cx_download(e, &got, dt, sizeof got);
    double want = 0, mag = 0;
    for (int i = 0; i < n; i++) {
        want += x[i];
        mag += fabs(x[i]);
    }
    cx_near(e, "total", 0, got, want, 2.0 * n * CX_EPS_F64 * mag); /* two orders of n terms */
}

void run_atomic_cas_max(compat_env *e)
{
    jitop_op *op = cx_op(e, "max_f32_cas");
    int n = (int)cx_int(e, 100000, 400000);
    float *x = cx_host(e, n * sizeof *x), got = 0, init = -INFINITY;
    cx_fill_f32(e, x, n, -1000.0f, 1000.0f);
    CUdeviceptr dx = cx_upload_new(e, x, n * sizeof *x), dr = cx_upload_new(e, &init, sizeof init);
    CX_LAUNCH(e, op, cx_blocks(n, 256), 256, 0, CXA(dx), CXA(dr), CXA(n));
    cx_download(e, &got, dr, sizeof got);
    float want = -INFINITY;
    for (int i = 0; i < n; i++)
        want = fmaxf(want, x[i]);
    cx_near(e, "max", 0, got, want, 0);
}

void run_atomic_int_hist(compat_env *e)
{
    jitop_op *op = cx_op(e, "hist_count_u32");
    unsigned nbins = (unsigned)cx_int(e, 7, 100);
    int n = (int)cx_int(e, 100000, 400000);
    unsigned *x = cx_host(e, n * sizeof *x), *got = cx_host(e, nbins * sizeof *got);
    unsigned *want = cx_host(e, nbins * sizeof *want);
    for (int i = 0; i < n; i++) {
        x[i] = cx_u32(e);
        want[x[i] % nbins]++;
    }
    CUdeviceptr dx = cx_upload_new(e, x, n * sizeof *x), dh = cx_alloc(e, nbins * sizeof *got);
    cx_memset0(e, dh, nbins * sizeof *got);
    CX_LAUNCH(e, op, cx_blocks(n, 256), 256, 0, CXA(dx), CXA(dh), CXA(nbins), CXA(n));
    cx_download(e, got, dh, nbins * sizeof *got);
    for (unsigned b = 0; b < nbins; b++)
        cx_eq_u64(e, "count", b, got[b], want[b]);
}

void run_shared_static(compat_env *e)
{
    jitop_op *op = cx_op(e, "transpose_tiled");
    jitop_op_info info;
    CX_OK(e, jitop_op_info_get(op, &info));
    CX_EXPECT(e, info.static_shared_bytes == 32 * 33 * sizeof(float),
              "static shared memory %zu bytes, expected the 32 x 33 float tile (%zu)",
              info.static_shared_bytes, 32 * 33 * sizeof(float));
    int rows = (int)cx_int(e, 100, 1000), cols = (int)cx_int(e, 100, 1000);
    size_t n = (size_t)rows * cols;
    float *in = cx_host(e, n * sizeof *in), *got = cx_host(e, n * sizeof *got);
    cx_fill_f32(e, in, n, -1e6f, 1e6f);
    CUdeviceptr din = cx_upload_new(e, in, n * sizeof *in), dout = cx_alloc(e, n * sizeof *got);
    CX_LAUNCH_DIMS(e, op, cx_dim(cx_blocks(cols, 32), cx_blocks(rows, 32), 1), cx_dim(32, 8, 1), 0,
                   CXA(din), CXA(dout), CXA(rows), CXA(cols));
    cx_download(e, got, dout, n * sizeof *got);
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++)
            cx_near(e, "out", (size_t)c * rows + r, got[(size_t)c * rows + r],
                    in[(size_t)r * cols + c], 0);
}

void run_shared_dynamic(compat_env *e)
{
    jitop_op *op = cx_op(e, "reverse_segments");
    /* 80 to 195 KiB of dynamic shared memory per block: over the 48 KiB
     * default, under the H100's 227 KiB opt-in limit. */
    int seg = (int)cx_int(e, 20000, 50000);
    unsigned blocks = (unsigned)cx_int(e, 8, 40);
    size_t n = (size_t)seg * blocks;
    float *x = cx_host(e, n * sizeof *x), *got = cx_host(e, n * sizeof *got);
    cx_fill_f32(e, x, n, -100.0f, 100.0f);
    CUdeviceptr dx = cx_upload_new(e, x, n * sizeof *x), dy = cx_alloc(e, n * sizeof *got);
    CX_LAUNCH(e, op, blocks, 512, (size_t)seg * sizeof(float), CXA(dx), CXA(dy), CXA(seg));
    cx_download(e, got, dy, n * sizeof *got);
    for (size_t b = 0; b < blocks; b++)
        for (int k = 0; k < seg; k++)
            cx_near(e, "reversed", b * seg + k, got[b * seg + k], x[b * seg + (seg - 1 - k)], 0);
}
