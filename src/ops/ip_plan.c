/* The in-place square matmul's chunk plan (see ip_plan.h). */
#include "ops/ip_plan.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

/* 1: s is a whole decimal integer in [lo, hi], in *out; 0: s is NULL;
 * -1: anything else. */
static int ip_parse(const char *s, long lo, long hi, long *out)
{
    if (s == NULL)
        return 0;
    char *end = NULL;
    errno = 0;
    const long v = strtol(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0' || v < lo || v > hi)
        return -1;
    *out = v;
    return 1;
}

void jitop__ip_mm_cfg_parse(const char *chunk_mb, const char *overlap, const char *bufs,
                            const char *copy_sms, jitop__ip_mm_cfg *out)
{
    jitop__ip_mm_cfg c = {JITOP__IP_CHUNK_BYTES, 1, 2, 0, 0, -1};
    long v = 0;
    int r = ip_parse(chunk_mb, 1, JITOP__IP_MAX_CHUNK_MB, &v);
    if (r > 0)
        c.chunk_bytes = (size_t)v << 20;
    else if (r < 0)
        c.bad |= JITOP__IP_BAD_CHUNK;
    c.overlap = !(overlap != NULL && strcmp(overlap, "0") == 0);
    if ((r = ip_parse(bufs, 2, JITOP__IP_MAX_BUFS, &v)) > 0)
        c.bufs = (int)v;
    else if (r < 0)
        c.bad |= JITOP__IP_BAD_BUFS;
    if ((r = ip_parse(copy_sms, 0, JITOP__IP_MAX_COPY_SMS, &v)) > 0)
        c.copy_sms = (int)v;
    else if (r < 0)
        c.bad |= JITOP__IP_BAD_COPY_SMS;
    *out = c;
}

void jitop__ip_panel_parse(const char *panel, jitop__ip_mm_cfg *out)
{
    out->panel = -1;
    if (panel == NULL)
        return;
    if (strcmp(panel, "0") == 0 || strcmp(panel, "1") == 0)
        out->panel = panel[0] - '0';
    else
        out->bad |= JITOP__IP_BAD_PANEL;
}

void jitop__ip_mm_cfg_env(jitop__ip_mm_cfg *out)
{
    jitop__ip_mm_cfg_parse(getenv("JITOP_INPLACE_CHUNK_MB"), getenv("JITOP_INPLACE_OVERLAP"),
                           getenv("JITOP_INPLACE_MM_BUFS"), getenv("JITOP_INPLACE_MM_COPY_SMS"),
                           out);
    jitop__ip_panel_parse(getenv("JITOP_INPLACE_MM_PANEL"), out);
}

int jitop__ip_panel_bn(size_t es)
{
    return es == 4 ? 128 : 256;
}

size_t jitop__ip_panel_smem(size_t es)
{
    /* stages x (128 + bn) rows of 128 bytes, the 128 x bn tile, 1 KiB */
    const size_t bn = (size_t)jitop__ip_panel_bn(es), stages = es == 4 ? 4 : 3;
    return stages * (128 + bn) * 128 + 128 * bn * es + 1024;
}

const char *jitop__ip_panel_plan(int mode, int cc_major, int cc_minor, size_t es, int tf32,
                                 int64_t m, int64_t n, uintptr_t a, uintptr_t w, int transposed,
                                 int resident, int *grid)
{
    *grid = 0;
    if (mode == 0)
        return "JITOP_INPLACE_MM_PANEL=0";
    if (cc_major != 9 || cc_minor != 0)
        return "not compute capability 9.0";
    if (es != 2 && !(es == 4 && tf32))
        return "not 16-bit or TF32 (full float32 runs on cuBLAS)";
    const int bn = jitop__ip_panel_bn(es);
    if (n % bn != 0 || n < JITOP__IP_PANEL_MIN_N || n > JITOP__IP_PANEL_MAX_N)
        return es == 2 ? "n not a multiple of 256 in [256, 4096]"
                       : "n not a multiple of 128 in [256, 4096]";
    if (m < 1 || m > JITOP__IP_PANEL_MAX_M)
        return "m out of the kernel's range";
    if (a % 16 != 0 || ((transposed || es == 2) && w % 16 != 0))
        return "a or w not 16-byte aligned";
    if (mode < 0 && n < JITOP__IP_PANEL_AUTO_MIN_N)
        return "n below the automatic rule's range";
    if (mode < 0 && n > JITOP__IP_PANEL_AUTO_MAX_N &&
        (n > JITOP__IP_PANEL_AUTO_WIDE_N || m < JITOP__IP_PANEL_AUTO_WIDE_M))
        return "n and m outside the automatic rule's range";
    const int64_t cl = n / bn, tiles = (m + 127) / 128 * cl;
    int64_t g = resident > 0 ? resident : 0;
    g -= g % cl;
    if (g < cl)
        return "the device holds fewer blocks than a group";
    *grid = (int)(g < tiles ? g : tiles);
    return NULL;
}

size_t jitop__ip_panel_counters(int grid)
{
    return ((size_t)(grid > 0 ? grid : 0) * 8 + 255) / 256 * 256;
}

size_t jitop__ip_panel_scratch(int64_t n, size_t es, int transposed, int grid)
{
    const size_t wt = !transposed && es == 4 ? (size_t)n * (size_t)n * es : 0;
    return jitop__ip_panel_counters(grid) + (wt + 255) / 256 * 256;
}

void jitop__ip_mm_plan_make(const jitop__ip_mm_cfg *cfg, int64_t m, size_t row, uintptr_t a,
                            int sm_count, int can_partition, jitop__ip_mm_plan *out)
{
    jitop__ip_mm_plan p;
    memset(&p, 0, sizeof p);
    int64_t rpc = row > 0 && cfg->chunk_bytes / row <= (size_t)INT_MAX
                      ? (int64_t)(cfg->chunk_bytes / row)
                      : INT_MAX;
    if (rpc < 1)
        rpc = 1;
    if (m <= rpc)
        rpc = m; /* one product: smaller ones lost more than the overlap won */
    int64_t chunks = (m + rpc - 1) / rpc;
    const int two = cfg->overlap && chunks > 1;
    p.partition = two && cfg->copy_sms > 0 && can_partition && cfg->copy_sms < sm_count;
    if (p.partition && rpc >= 8) {
        rpc -= rpc % 8; /* still < m: more than one chunk */
        chunks = (m + rpc - 1) / rpc;
    }
    p.rows = rpc;
    p.chunks = chunks;
    p.chunk = (size_t)rpc * row;
    p.bufs = two ? cfg->bufs : 1;
    if (p.partition) {
        p.sm_target = sm_count - cfg->copy_sms;
        int w = 16;
        while (w > 1 && (a % (uintptr_t)w != 0 || p.chunk % (size_t)w != 0))
            w /= 2;
        p.copy_width = w;
    }
    *out = p;
}

size_t jitop__ip_mm_scratch_bound(const jitop__ip_mm_cfg *cfg, size_t row)
{
    if (row == 0)
        return 0;
    const size_t one = cfg->chunk_bytes > row ? cfg->chunk_bytes / row * row : row;
    return (size_t)(cfg->overlap ? cfg->bufs : 1) * one;
}

unsigned jitop__ip_copy_grid(size_t bytes, int width, int block, int blocks_per_sm, int sms)
{
    if (width < 1 || block < 1)
        return 1;
    const size_t words = bytes / (size_t)width;
    size_t grid = (words + (size_t)block - 1) / (size_t)block;
    const size_t cap = (size_t)(blocks_per_sm > 0 ? blocks_per_sm : 1) * (size_t)(sms > 0 ? sms : 1);
    if (grid > cap)
        grid = cap;
    return grid < 1 ? 1u : (unsigned)grid;
}
