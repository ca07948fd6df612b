/* The in-place square matmul's plan (src/ops/ip_plan.c) without a GPU: the
 * settings' parsing (JITOP_INPLACE_CHUNK_MB, _OVERLAP, _MM_BUFS,
 * _MM_COPY_SMS: a bad value is ignored and flagged, never half-applied),
 * the chunk plan (rows per product, buffers, when the SM partition runs,
 * its rows rounded to multiples of 8 and its copy word), the scratch bound
 * (the plan's scratch never exceeds it, for any m; the public
 * jitop_square_matmul_scratch_bound follows the environment), and
 * ip_copy's grid; the panel kernel's setting (JITOP_INPLACE_MM_PANEL), when
 * it takes a call and on how many blocks, and its scratch within the bound. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jitop.h"
#include "ops/ip_plan.h"
#include "testutil.h"

#define MiB ((size_t)1 << 20)

static jitop__ip_mm_cfg parse(const char *chunk, const char *overlap, const char *bufs,
                              const char *sms)
{
    jitop__ip_mm_cfg c;
    memset(&c, 0x5a, sizeof c); /* every field must be written */
    jitop__ip_mm_cfg_parse(chunk, overlap, bufs, sms, &c);
    return c;
}

static void test_parse_defaults_and_values(void **state)
{
    (void)state;
    jitop__ip_mm_cfg c = parse(NULL, NULL, NULL, NULL);
    assert_int_equal(c.chunk_bytes, 32 * MiB);
    assert_int_equal(c.overlap, 1);
    assert_int_equal(c.bufs, 2);
    assert_int_equal(c.copy_sms, 0);
    assert_int_equal(c.bad, 0);

    c = parse("8", "0", "3", "16");
    assert_int_equal(c.chunk_bytes, 8 * MiB);
    assert_int_equal(c.overlap, 0);
    assert_int_equal(c.bufs, 3);
    assert_int_equal(c.copy_sms, 16);
    assert_int_equal(c.bad, 0);

    c = parse("1", "1", "4", "0"); /* the ends of the ranges; 0 SMs: off */
    assert_int_equal(c.chunk_bytes, 1 * MiB);
    assert_int_equal(c.overlap, 1);
    assert_int_equal(c.bufs, 4);
    assert_int_equal(c.copy_sms, 0);
    assert_int_equal(c.bad, 0);
    c = parse("65536", "yes", "2", "65535");
    assert_int_equal(c.chunk_bytes, 65536 * MiB);
    assert_int_equal(c.overlap, 1); /* only "0" turns it off */
    assert_int_equal(c.copy_sms, 65535);
    assert_int_equal(c.bad, 0);
}

static void test_parse_bad_values(void **state)
{
    (void)state;
    static const char *const chunk[] = {"", "0", "-4", "65537", "8MB", "abc", " 8x",
                                        "99999999999999999999"};
    for (size_t i = 0; i < sizeof chunk / sizeof chunk[0]; i++) {
        jitop__ip_mm_cfg c = parse(chunk[i], NULL, "3", "8");
        if (c.bad != JITOP__IP_BAD_CHUNK || c.chunk_bytes != 32 * MiB)
            fail_msg("JITOP_INPLACE_CHUNK_MB='%s': bad 0x%x, chunk %zu", chunk[i], c.bad,
                     c.chunk_bytes);
        assert_int_equal(c.bufs, 3); /* the others still apply */
        assert_int_equal(c.copy_sms, 8);
    }
    static const char *const bufs[] = {"", "0", "1", "5", "-2", "2.5", "x"};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) {
        jitop__ip_mm_cfg c = parse("16", NULL, bufs[i], NULL);
        if (c.bad != JITOP__IP_BAD_BUFS || c.bufs != 2)
            fail_msg("JITOP_INPLACE_MM_BUFS='%s': bad 0x%x, bufs %d", bufs[i], c.bad, c.bufs);
        assert_int_equal(c.chunk_bytes, 16 * MiB);
    }
    static const char *const sms[] = {"", "-1", "65536", "4x", "eight"};
    for (size_t i = 0; i < sizeof sms / sizeof sms[0]; i++) {
        jitop__ip_mm_cfg c = parse(NULL, NULL, NULL, sms[i]);
        if (c.bad != JITOP__IP_BAD_COPY_SMS || c.copy_sms != 0)
            fail_msg("JITOP_INPLACE_MM_COPY_SMS='%s': bad 0x%x, sms %d", sms[i], c.bad, c.copy_sms);
    }
    jitop__ip_mm_cfg c = parse("0", NULL, "9", "x");
    assert_int_equal(c.bad, JITOP__IP_BAD_CHUNK | JITOP__IP_BAD_BUFS | JITOP__IP_BAD_COPY_SMS);
}

/* Sets (value non-NULL) or unsets each variable; the old values are kept in
 * saved[] (malloc'd) for env_restore. */
static const char *const VARS[4] = {"JITOP_INPLACE_CHUNK_MB", "JITOP_INPLACE_OVERLAP",
                                    "JITOP_INPLACE_MM_BUFS", "JITOP_INPLACE_MM_COPY_SMS"};

static void env_set(const char *const values[4], char *saved[4])
{
    for (int i = 0; i < 4; i++) {
        const char *was = getenv(VARS[i]);
        saved[i] = was ? strdup(was) : NULL;
        assert_true(was == NULL || saved[i] != NULL);
        assert_int_equal(values[i] ? setenv(VARS[i], values[i], 1) : unsetenv(VARS[i]), 0);
    }
}

static void env_restore(char *saved[4])
{
    for (int i = 0; i < 4; i++) {
        assert_int_equal(saved[i] ? setenv(VARS[i], saved[i], 1) : unsetenv(VARS[i]), 0);
        free(saved[i]);
    }
}

static void test_env_and_public_bound(void **state)
{
    (void)state;
    char *saved[4];
    const char *const v1[4] = {"4", NULL, "3", "8"};
    env_set(v1, saved);
    jitop__ip_mm_cfg c;
    jitop__ip_mm_cfg_env(&c);
    assert_int_equal(c.chunk_bytes, 4 * MiB);
    assert_int_equal(c.overlap, 1);
    assert_int_equal(c.bufs, 3);
    assert_int_equal(c.copy_sms, 8);
    /* the public bound follows: three buffers of 4 MiB of whole rows */
    assert_int_equal(jitop_square_matmul_scratch_bound(JITOP_FLOAT32, 1024), 12 * MiB);
    assert_int_equal(jitop_square_matmul_scratch_bound(JITOP_FLOAT16, 1000),
                     3 * ((4 * MiB) / 2000 * 2000));
    /* a row over the chunk: three rows */
    assert_int_equal(jitop_square_matmul_scratch_bound(JITOP_FLOAT32, 1 << 20), 3 * 4 * MiB);
    assert_int_equal(jitop_square_matmul_scratch_bound(JITOP_BFLOAT16, 64), 0); /* no scratch */
    env_restore(saved);

    const char *const v2[4] = {NULL, "0", "4", NULL}; /* no copy stream: one buffer */
    env_set(v2, saved);
    assert_int_equal(jitop_square_matmul_scratch_bound(JITOP_FLOAT32, 1024), 32 * MiB);
    env_restore(saved);

    const char *const v3[4] = {NULL, NULL, "4", NULL};
    env_set(v3, saved);
    assert_int_equal(jitop_square_matmul_scratch_bound(JITOP_FLOAT32, 1024), 128 * MiB);
    env_restore(saved);

    const char *const v4[4] = {"bogus", NULL, "7", NULL}; /* ignored: the defaults */
    env_set(v4, saved);
    assert_int_equal(jitop_square_matmul_scratch_bound(JITOP_FLOAT32, 1024), 64 * MiB);
    env_restore(saved);
}

static void test_plan_cases(void **state)
{
    (void)state;
    jitop__ip_mm_plan p;
    const jitop__ip_mm_cfg def = parse(NULL, NULL, NULL, NULL);
    const jitop__ip_mm_cfg k8 = parse(NULL, NULL, NULL, "8");
    const uintptr_t a = 0x7f0000000000; /* as cuMemAlloc returns it */

    /* one chunk: one product, no copy stream, never partitioned */
    jitop__ip_mm_plan_make(&k8, 100, 2048, a, 132, 1, &p);
    assert_int_equal(p.rows, 100);
    assert_int_equal(p.chunks, 1);
    assert_int_equal(p.bufs, 1);
    assert_int_equal(p.partition, 0);
    assert_int_equal(p.chunk, 100 * 2048);

    /* float16 n 1024, m 65536: four chunks of 16384 rows, two buffers */
    jitop__ip_mm_plan_make(&def, 65536, 2048, a, 132, 1, &p);
    assert_int_equal(p.rows, 16384);
    assert_int_equal(p.chunks, 4);
    assert_int_equal(p.bufs, 2);
    assert_int_equal(p.partition, 0);
    /* with 8 SMs kept: cuBLAS gets 124, copies in 16-byte words */
    jitop__ip_mm_plan_make(&k8, 65536, 2048, a, 132, 1, &p);
    assert_int_equal(p.partition, 1);
    assert_int_equal(p.rows, 16384);
    assert_int_equal(p.sm_target, 124);
    assert_int_equal(p.copy_width, 16);
    /* cuBLAS without the SM count target: the driver's copy */
    jitop__ip_mm_plan_make(&k8, 65536, 2048, a, 132, 0, &p);
    assert_int_equal(p.partition, 0);
    assert_int_equal(p.bufs, 2);
    assert_int_equal(p.sm_target, 0);
    /* as many SMs kept as the device has: off; one fewer: on */
    const jitop__ip_mm_cfg k132 = parse(NULL, NULL, NULL, "132");
    jitop__ip_mm_plan_make(&k132, 65536, 2048, a, 132, 1, &p);
    assert_int_equal(p.partition, 0);
    const jitop__ip_mm_cfg k131 = parse(NULL, NULL, NULL, "131");
    jitop__ip_mm_plan_make(&k131, 65536, 2048, a, 132, 1, &p);
    assert_int_equal(p.partition, 1);
    assert_int_equal(p.sm_target, 1);
    /* overlap off: one buffer on the caller's stream, no partition */
    const jitop__ip_mm_cfg noov = parse(NULL, "0", "3", "8");
    jitop__ip_mm_plan_make(&noov, 65536, 2048, a, 132, 1, &p);
    assert_int_equal(p.partition, 0);
    assert_int_equal(p.bufs, 1);
    assert_int_equal(p.chunks, 4);
    /* three buffers */
    const jitop__ip_mm_cfg b3 = parse("8", NULL, "3", "16");
    jitop__ip_mm_plan_make(&b3, 65536, 2048, a, 132, 1, &p);
    assert_int_equal(p.bufs, 3);
    assert_int_equal(p.rows, 4096);
    assert_int_equal(p.chunks, 16);
    assert_int_equal(p.sm_target, 116);

    /* float16 n 1000 (rows of 2000 bytes): 16777 rows fit 32 MiB; the
     * partition takes 16776 (a multiple of 8: 16-byte chunks) */
    jitop__ip_mm_plan_make(&def, 100003, 2000, a, 132, 1, &p);
    assert_int_equal(p.rows, 16777);
    jitop__ip_mm_plan_make(&k8, 100003, 2000, a, 132, 1, &p);
    assert_int_equal(p.rows, 16776);
    assert_int_equal(p.chunks, 6);
    assert_int_equal(p.chunk % 16, 0);
    assert_int_equal(p.copy_width, 16);
    /* A misaligned (element-aligned only): the word follows it */
    jitop__ip_mm_plan_make(&k8, 100003, 2000, a + 2, 132, 1, &p);
    assert_int_equal(p.copy_width, 2);
    jitop__ip_mm_plan_make(&k8, 100003, 2000, a + 4, 132, 1, &p);
    assert_int_equal(p.copy_width, 4);
    jitop__ip_mm_plan_make(&k8, 100003, 2000, a + 8, 132, 1, &p);
    assert_int_equal(p.copy_width, 8);
    jitop__ip_mm_plan_make(&k8, 100003, 2000, a + 24, 132, 1, &p);
    assert_int_equal(p.copy_width, 8);

    /* fewer than 8 rows a chunk are kept as they are: the word follows the
     * chunk (float16 n 75001: 150002-byte rows, 6 in 1 MiB, 900012 bytes) */
    const jitop__ip_mm_cfg small = parse("1", NULL, NULL, "8");
    jitop__ip_mm_plan_make(&small, 50, 150002, a, 132, 1, &p);
    assert_int_equal(p.rows, 6);
    assert_int_equal(p.chunks, 9);
    assert_int_equal(p.partition, 1);
    assert_int_equal(p.copy_width, 4);
    /* a row over the chunk: one row a product */
    jitop__ip_mm_plan_make(&small, 5, 4 * MiB, a, 132, 1, &p);
    assert_int_equal(p.rows, 1);
    assert_int_equal(p.chunks, 5);
    assert_int_equal(p.chunk, 4 * MiB);
    assert_int_equal(p.copy_width, 16);
}

/* For many shapes and settings: the chunks cover m exactly once (the last
 * one non-empty), the plan's scratch is within the bound, the partition's
 * word divides A's address and every chunk's offset. */
static void test_plan_invariants(void **state)
{
    (void)state;
    static const char *const chunk[] = {NULL, "1", "4", "7", "16"};
    static const char *const bufs[] = {NULL, "3", "4"};
    static const char *const sms[] = {NULL, "4", "16"};
    static const char *const ov[] = {NULL, "0"};
    static const size_t rows_b[] = {65 * 2, 65 * 4, 769 * 2, 1000 * 2, 1024 * 2, 1024 * 4,
                                    4096 * 2, 4099 * 4, 12288 * 4, 150002, 4 * MiB + 4};
    static const int64_t ms[] = {1, 7, 8, 9, 1000, 4096, 10007, 65536, 65543, 300000};
    static const uintptr_t offs[] = {0, 2, 4, 6, 8, 12, 14};
    size_t n = 0;
    for (size_t ci = 0; ci < sizeof chunk / sizeof chunk[0]; ci++)
        for (size_t bi = 0; bi < sizeof bufs / sizeof bufs[0]; bi++)
            for (size_t si = 0; si < sizeof sms / sizeof sms[0]; si++)
                for (size_t oi = 0; oi < sizeof ov / sizeof ov[0]; oi++) {
                    const jitop__ip_mm_cfg c = parse(chunk[ci], ov[oi], bufs[bi], sms[si]);
                    assert_int_equal(c.bad, 0);
                    for (size_t ri = 0; ri < sizeof rows_b / sizeof rows_b[0]; ri++) {
                        const size_t row = rows_b[ri];
                        const size_t bound = jitop__ip_mm_scratch_bound(&c, row);
                        for (size_t mi = 0; mi < sizeof ms / sizeof ms[0]; mi++)
                            for (size_t ai = 0; ai < sizeof offs / sizeof offs[0]; ai++) {
                                const uintptr_t a = (uintptr_t)0x7f0000000000 + offs[ai];
                                if (a % (row % 4 == 0 ? 4 : 2) != 0)
                                    continue; /* element-aligned only */
                                jitop__ip_mm_plan p;
                                jitop__ip_mm_plan_make(&c, ms[mi], row, a, 132, 1, &p);
                                const int64_t m = ms[mi];
                                char what[160];
                                snprintf(what, sizeof what,
                                         "chunk %s bufs %s sms %s ov %s row %zu m %lld a+%u",
                                         chunk[ci] ? chunk[ci] : "-", bufs[bi] ? bufs[bi] : "-",
                                         sms[si] ? sms[si] : "-", ov[oi] ? ov[oi] : "-", row,
                                         (long long)m, (unsigned)offs[ai]);
                                if (p.rows < 1 || p.chunks < 1 || p.chunks * p.rows < m ||
                                    (p.chunks - 1) * p.rows >= m || p.chunk != (size_t)p.rows * row)
                                    fail_msg("%s: rows %lld chunks %lld", what, (long long)p.rows,
                                             (long long)p.chunks);
                                if ((size_t)p.bufs * p.chunk > bound)
                                    fail_msg("%s: %d x %zu bytes over the bound %zu", what, p.bufs,
                                             p.chunk, bound);
                                const int two = c.overlap && p.chunks > 1;
                                if (p.bufs != (two ? c.bufs : 1))
                                    fail_msg("%s: %d buffers", what, p.bufs);
                                if (p.partition != (two && c.copy_sms > 0))
                                    fail_msg("%s: partition %d", what, p.partition);
                                if (p.partition) {
                                    const unsigned wd = (unsigned)p.copy_width;
                                    if (wd < 1 || wd > 16 || (wd & (wd - 1)) != 0 ||
                                        a % wd != 0 || p.chunk % wd != 0 ||
                                        p.sm_target != 132 - c.copy_sms)
                                        fail_msg("%s: word %u target %d", what, wd, p.sm_target);
                                    /* the widest such word */
                                    if (wd < 16 && a % (2 * wd) == 0 && p.chunk % (2 * wd) == 0)
                                        fail_msg("%s: word %u, %u would do", what, wd, 2 * wd);
                                    if (p.rows >= 8 && p.rows % 8 != 0)
                                        fail_msg("%s: %lld rows, not a multiple of 8", what,
                                                 (long long)p.rows);
                                }
                                n++;
                            }
                    }
                }
    assert_true(n > 10000);
}

static void test_copy_grid(void **state)
{
    (void)state;
    /* 16 MiB in 16-byte words, 256-thread blocks, 8 a SM: capped by the SMs */
    assert_int_equal(jitop__ip_copy_grid(16 * MiB, 16, 256, 8, 8), 64);
    assert_int_equal(jitop__ip_copy_grid(16 * MiB, 16, 256, 8, 132), 1056);
    /* small copies: one thread a word at most */
    assert_int_equal(jitop__ip_copy_grid(16 * 256 * 3, 16, 256, 8, 132), 3);
    assert_int_equal(jitop__ip_copy_grid(16 * 256 * 3 + 1, 16, 256, 8, 132), 3);
    assert_int_equal(jitop__ip_copy_grid(16 * 256 * 3 + 16, 16, 256, 8, 132), 4);
    assert_int_equal(jitop__ip_copy_grid(100, 16, 256, 8, 132), 1);
    assert_int_equal(jitop__ip_copy_grid(15, 16, 256, 8, 132), 1); /* the tail only */
    assert_int_equal(jitop__ip_copy_grid(0, 16, 256, 8, 132), 1);
    assert_int_equal(jitop__ip_copy_grid(1000000, 1, 128, 16, 4), 64);
    /* nonsense occupancy answers still give a launchable grid */
    assert_int_equal(jitop__ip_copy_grid(16 * MiB, 16, 256, 0, 0), 1);
    assert_int_equal(jitop__ip_copy_grid(16 * MiB, 0, 256, 8, 8), 1);
}

static void test_panel_parse(void **state)
{
    (void)state;
    jitop__ip_mm_cfg c = parse(NULL, NULL, NULL, NULL);
    assert_int_equal(c.panel, -1); /* unset: the automatic rule */
    jitop__ip_panel_parse("0", &c);
    assert_int_equal(c.panel, 0);
    assert_int_equal(c.bad, 0);
    jitop__ip_panel_parse("1", &c);
    assert_int_equal(c.panel, 1);
    assert_int_equal(c.bad, 0);
    const char *bad[] = {"", "2", "01", "yes", "1 ", "-1"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        c = parse(NULL, NULL, NULL, NULL);
        jitop__ip_panel_parse(bad[i], &c);
        if (c.panel != -1 || c.bad != JITOP__IP_BAD_PANEL)
            fail_msg("'%s': panel %d bad %u", bad[i], c.panel, c.bad);
    }
    jitop__ip_panel_parse(NULL, &c); /* unset again: the rule, the flag kept */
    assert_int_equal(c.panel, -1);
    assert_int_equal(c.bad, JITOP__IP_BAD_PANEL);
}

/* jitop__ip_panel_plan on an H100 (CC 9.0, 132 blocks resident) unless said */
static const char *panel(int mode, int64_t m, int64_t n, uintptr_t a, int *grid)
{
    return jitop__ip_panel_plan(mode, 9, 0, 2, 0, m, n, a, (uintptr_t)0x7f0000100000, 1, 132, grid);
}

static void test_panel_plan(void **state)
{
    (void)state;
    const uintptr_t a = (uintptr_t)0x7f0000000000;
    int grid = -1;
    /* n 1024: groups of 4, 132 blocks resident = 33 groups */
    assert_null(panel(-1, 65536, 1024, a, &grid));
    assert_int_equal(grid, 132);
    assert_null(panel(-1, 4096, 1024, a, &grid)); /* 32 panels x 4 tiles */
    assert_int_equal(grid, 128);
    assert_null(panel(-1, 1, 1024, a, &grid)); /* one panel: one group */
    assert_int_equal(grid, 4);
    assert_null(panel(1, 129, 768, a, &grid)); /* 2 panels x 3 */
    assert_int_equal(grid, 6);
    assert_null(panel(1, 1000000, 1536, a, &grid)); /* groups of 6: 22 */
    assert_int_equal(grid, 132);
    assert_null(panel(1, 1000000, 4096, a, &grid)); /* groups of 16: 8 */
    assert_int_equal(grid, 128);
    assert_null(panel(1, 5, 256, a, &grid)); /* a group of one */
    assert_int_equal(grid, 1);
    /* the automatic rule: 256-1024 always, up to 2048 from m 16384 */
    assert_null(panel(-1, 7, 512, a, &grid));
    assert_null(panel(-1, 65536, 256, a, &grid));
    assert_int_equal(grid, 132); /* 512 panels of one tile each */
    assert_non_null(strstr(panel(-1, 16383, 1536, a, &grid), "automatic"));
    assert_null(panel(-1, 16384, 1536, a, &grid));
    assert_null(panel(-1, 65536, 2048, a, &grid));
    assert_non_null(strstr(panel(-1, 1 << 20, 2304, a, &grid), "automatic"));
    assert_non_null(strstr(panel(-1, 1 << 20, 4096, a, &grid), "automatic"));
    /* what no mode overrides */
    for (int mode = -1; mode <= 1; mode++) {
        if (mode == 0)
            continue;
        assert_non_null(strstr(panel(mode, 4096, 1000, a, &grid), "multiple of 256"));
        assert_non_null(strstr(panel(mode, 4096, 128, a, &grid), "multiple of 256"));
        assert_non_null(strstr(panel(mode, 4096, 4352, a, &grid), "multiple of 256"));
        assert_non_null(strstr(panel(mode, 4096, 1024, a + 2, &grid), "aligned"));
        assert_non_null(strstr(panel(mode, 4096, 1024, a + 8, &grid), "aligned"));
        assert_non_null(strstr(jitop__ip_panel_plan(mode, 9, 0, 2, 0, 4096, 1024, a, a + 4, 1, 132,
                                                    &grid),
                               "aligned"));
        /* 16-bit A W reads W by TMA too (N-major); TF32 A W only through
         * the transpose into jitop's scratch */
        assert_non_null(strstr(jitop__ip_panel_plan(mode, 9, 0, 2, 0, 4096, 1024, a, a + 2, 0, 132,
                                                    &grid),
                               "aligned"));
        assert_null(jitop__ip_panel_plan(mode, 9, 0, 4, 1, 4096, 1024, a, a + 4, 0, 132, &grid));
        assert_int_equal(grid, 128);
        assert_non_null(strstr(jitop__ip_panel_plan(mode, 9, 0, 4, 1, 4096, 1024, a, a + 4, 1, 132,
                                                    &grid),
                               "aligned"));
        assert_non_null(strstr(panel(mode, 0, 1024, a, &grid), "range"));
        assert_non_null(strstr(panel(mode, JITOP__IP_PANEL_MAX_M + 1, 1024, a, &grid), "range"));
        assert_null(panel(mode, JITOP__IP_PANEL_MAX_M, 1024, a, &grid));
        assert_int_equal(grid, 132);
        const char *why = jitop__ip_panel_plan(mode, 8, 9, 2, 0, 4096, 1024, a, a, 1, 132, &grid);
        assert_non_null(strstr(why, "9.0"));
        why = jitop__ip_panel_plan(mode, 10, 0, 2, 0, 4096, 1024, a, a, 1, 132, &grid);
        assert_non_null(strstr(why, "9.0")); /* sm_90a code does not run on sm_100 */
        why = jitop__ip_panel_plan(mode, 9, 0, 4, 0, 4096, 1024, a, a, 1, 132, &grid);
        assert_non_null(strstr(why, "16-bit or TF32")); /* full float32: cuBLAS */
        /* TF32: tiles of 128 columns, groups of n / 128 */
        assert_null(jitop__ip_panel_plan(mode, 9, 0, 4, 1, 4096, 1024, a, a, 1, 132, &grid));
        assert_int_equal(grid, 128);
        assert_null(jitop__ip_panel_plan(mode, 9, 0, 4, 1, 16384, 1152, a, a, 1, 132, &grid));
        assert_int_equal(grid, 126); /* 14 groups of 9 */
        assert_null(jitop__ip_panel_plan(1, 9, 0, 4, 1, 129, 1152, a, a, 1, 132, &grid));
        assert_int_equal(grid, 18); /* 2 panels x 9 tiles */
        why = jitop__ip_panel_plan(mode, 9, 0, 4, 1, 4096, 1100, a, a, 1, 132, &grid);
        assert_non_null(strstr(why, "multiple of 128"));
        why = jitop__ip_panel_plan(mode, 9, 0, 2, 1, 4096, 1152, a, a, 1, 132, &grid);
        assert_non_null(strstr(why, "multiple of 256")); /* the flag means nothing to 16-bit */
        /* a device holding fewer blocks than a group */
        assert_non_null(jitop__ip_panel_plan(mode, 9, 0, 2, 0, 4096, 1024, a, a, 1, 3, &grid));
        assert_non_null(jitop__ip_panel_plan(mode, 9, 0, 2, 0, 4096, 1024, a, a, 1, -1, &grid));
        assert_int_equal(grid, 0);
        assert_null(jitop__ip_panel_plan(mode, 9, 0, 2, 0, 4096, 1024, a, a, 1, 7, &grid));
        assert_int_equal(grid, 4); /* one group of 4 of the 7 */
    }
    assert_non_null(strstr(panel(0, 65536, 1024, a, &grid), "JITOP_INPLACE_MM_PANEL=0"));
    /* every grid, 16-bit (tiles of 256 columns) and TF32 (128): whole
     * groups, at most one block a tile, at most resident */
    static const struct {
        size_t es;
        int tf32, bn;
    } kinds[] = {{2, 0, 256}, {4, 1, 128}};
    int n_ok = 0;
    for (size_t ki = 0; ki < sizeof kinds / sizeof kinds[0]; ki++)
        for (int64_t n = 256; n <= 4096; n += kinds[ki].bn)
            for (int64_t m = 1; m < 100000; m = m * 3 + 1)
                for (int res = 1; res <= 300; res += 37) {
                    const char *why = jitop__ip_panel_plan(1, 9, 0, kinds[ki].es, kinds[ki].tf32,
                                                           m, n, a, a, 1, res, &grid);
                    const int cl = (int)(n / kinds[ki].bn);
                    const int64_t tiles = (m + 127) / 128 * cl;
                    if (why != NULL) {
                        if (res >= cl)
                            fail_msg("es %zu n %lld m %lld res %d: %s", kinds[ki].es,
                                     (long long)n, (long long)m, res, why);
                        continue;
                    }
                    if (grid < cl || grid % cl != 0 || grid > res || grid > tiles ||
                        (grid < tiles && grid + cl <= res))
                        fail_msg("es %zu n %lld m %lld res %d: grid %d", kinds[ki].es,
                                 (long long)n, (long long)m, res, grid);
                    n_ok++;
                }
    assert_true(n_ok > 3000);
}

static void test_panel_scratch(void **state)
{
    (void)state;
    /* the kernel's shapes (kernels/inplace_panel.cu's ip_panel_cfg) */
    assert_int_equal(jitop__ip_panel_bn(2), 256);
    assert_int_equal(jitop__ip_panel_bn(4), 128);
    assert_int_equal(jitop__ip_panel_smem(2), 214016);
    assert_int_equal(jitop__ip_panel_smem(4), 197632);
    assert_true(jitop__ip_panel_smem(2) <= 227 * 1024 && jitop__ip_panel_smem(4) <= 227 * 1024);
    /* two counters a block in 256-byte steps, then W^T (n x n x 4) for TF32
     * A W only: 16-bit A W reads W N-major as it is */
    assert_int_equal(jitop__ip_panel_counters(0), 0);
    assert_int_equal(jitop__ip_panel_counters(1), 256);
    assert_int_equal(jitop__ip_panel_counters(32), 256);
    assert_int_equal(jitop__ip_panel_counters(33), 512);
    assert_int_equal(jitop__ip_panel_counters(132), 1280);
    assert_int_equal(jitop__ip_panel_scratch(1024, 4, 0, 128), 1024 + 4 * MiB);
    assert_int_equal(jitop__ip_panel_scratch(1024, 4, 1, 128), 1024);
    assert_int_equal(jitop__ip_panel_scratch(384, 4, 0, 132), 1280 + 384 * 384 * 4);
    assert_int_equal(jitop__ip_panel_scratch(1024, 2, 0, 132), 1280);
    assert_int_equal(jitop__ip_panel_scratch(1024, 2, 1, 132), 1280);
    assert_int_equal(jitop__ip_panel_scratch(256, 2, 1, 1), 256);
    assert_int_equal(jitop__ip_panel_scratch(4096, 2, 0, 128), 1024);
    /* the public bound covers the panel path's scratch at any grid a GPU
     * holds, whatever the chunk setting */
    const char *chunks[] = {NULL, "1", "32"};
    for (size_t i = 0; i < sizeof chunks / sizeof chunks[0]; i++) {
        char *saved = getenv("JITOP_INPLACE_CHUNK_MB") ? strdup(getenv("JITOP_INPLACE_CHUNK_MB"))
                                                      : NULL;
        assert_int_equal(chunks[i] ? setenv("JITOP_INPLACE_CHUNK_MB", chunks[i], 1)
                                   : unsetenv("JITOP_INPLACE_CHUNK_MB"),
                         0);
        for (int64_t n = 256; n <= 4096; n += 256) {
            const size_t bound = jitop_square_matmul_scratch_bound(JITOP_FLOAT16, n);
            for (int trans = 0; trans < 2; trans++)
                if (jitop__ip_panel_scratch(n, 2, trans, 4096) > bound)
                    fail_msg("chunk %s n %lld: panel scratch over the bound %zu",
                             chunks[i] ? chunks[i] : "-", (long long)n, bound);
            assert_int_equal(jitop_square_matmul_scratch_bound(JITOP_BFLOAT16, n), bound);
        }
        for (int64_t n = 256; n <= 4096; n += 128) /* TF32 */
            for (int trans = 0; trans < 2; trans++)
                if (jitop__ip_panel_scratch(n, 4, trans, 4096) >
                    jitop_square_matmul_scratch_bound(JITOP_FLOAT32, n))
                    fail_msg("chunk %s n %lld: TF32 panel scratch over the bound",
                             chunks[i] ? chunks[i] : "-", (long long)n);
        assert_int_equal(saved ? setenv("JITOP_INPLACE_CHUNK_MB", saved, 1)
                               : unsetenv("JITOP_INPLACE_CHUNK_MB"),
                         0);
        free(saved);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_defaults_and_values),
        cmocka_unit_test(test_parse_bad_values),
        cmocka_unit_test(test_env_and_public_bound),
        cmocka_unit_test(test_plan_cases),
        cmocka_unit_test(test_plan_invariants),
        cmocka_unit_test(test_copy_grid),
        cmocka_unit_test(test_panel_parse),
        cmocka_unit_test(test_panel_plan),
        cmocka_unit_test(test_panel_scratch),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    jt_cleanup();
    return rc;
}
