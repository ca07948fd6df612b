/* The include scanner's speed (jitop__scan_includes, src/compile/scan.c) on
 * real headers: each file given is read once, then scanned --reps times;
 * prints the bytes per second of the whole set and the directives found,
 * so that a faster scanner that finds something else shows at once.
 *
 *   scan_bench [--reps N] FILE...
 *   scan_bench [--reps N] --unit SOURCE   (a whole jitop__deps_scan of
 *       SOURCE for sm_90: read, hash, scan, resolve; with the memo emptied
 *       before each rep ("cold") and kept ("memo"))
 *
 * What a cold build pays for its scan is this set's bytes over this rate
 * (once per file per build: scan_memo.c keeps a text's scan per process). */
#include "compile/compile.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Times jitop__deps_scan of one source, memo emptied each time or kept. */
static int unit_bench(const char *src, int reps, double *t)
{
    jitop__unit u;
    if (jitop__unit_init(&u, src, NULL, NULL, 0, NULL, 0, "sm_90") != JITOP_OK) {
        fprintf(stderr, "scan_bench: %s: %s\n", src, jitop_errmsg(NULL));
        return 1;
    }
    size_t ndeps = 0;
    int64_t bytes = 0;
    for (int memo = 0; memo < 2; memo++) {
        for (int r = 0; r < reps; r++) {
            if (!memo)
                jitop__scan_memo_clear();
            jitop__deps d;
            char *text = NULL;
            double t0 = now_s();
            if (jitop__deps_scan(&u, &d, &text) != JITOP_OK) {
                fprintf(stderr, "scan_bench: %s: %s\n", src, jitop_errmsg(NULL));
                return 1;
            }
            t[r] = now_s() - t0;
            ndeps = d.n;
            bytes = 0;
            for (size_t k = 0; k < d.n; k++)
                bytes += d.v[k].size;
            free(text);
            jitop__deps_free(&d);
        }
        qsort(t, (size_t)reps, sizeof *t, cmp_double);
        printf("{\"bench\":\"deps_scan\",\"source\":\"%s\",\"memo\":%s,\"deps\":%zu,"
               "\"bytes\":%lld,\"reps\":%d,\"median_ms\":%.3f,\"min_ms\":%.3f}\n",
               src, memo ? "true" : "false", ndeps, (long long)bytes, reps, t[reps / 2] * 1e3, t[0] * 1e3);
    }
    jitop__unit_free(&u);
    return 0;
}

int main(int argc, char **argv)
{
    int reps = 20, first = 1;
    if (argc > 2 && strcmp(argv[1], "--reps") == 0) {
        reps = atoi(argv[2]);
        first = 3;
    }
    if (reps < 1 || first >= argc) {
        fprintf(stderr, "usage: scan_bench [--reps N] FILE... | --unit SOURCE\n");
        return 2;
    }
    if (strcmp(argv[first], "--unit") == 0) {
        double *tu = calloc((size_t)reps, sizeof *tu);
        int rc = tu && first + 1 < argc ? unit_bench(argv[first + 1], reps, tu) : 2;
        free(tu);
        return rc;
    }
    int nfiles = argc - first;
    char **text = calloc((size_t)nfiles, sizeof *text);
    size_t *len = calloc((size_t)nfiles, sizeof *len);
    double *t = calloc((size_t)reps, sizeof *t);
    if (!text || !len || !t)
        return 1;
    size_t total = 0;
    for (int i = 0; i < nfiles; i++) {
        jitop__dep d = {0};
        if (jitop__dep_read(argv[first + i], &d, &text[i], &len[i]) != JITOP_OK) {
            fprintf(stderr, "scan_bench: %s: cannot read\n", argv[first + i]);
            return 1;
        }
        total += len[i];
    }
    size_t directives = 0, defines = 0;
    for (int r = 0; r < reps; r++) {
        double t0 = now_s();
        size_t nd = 0, ndef = 0;
        for (int i = 0; i < nfiles; i++) {
            jitop__includes incs;
            if (jitop__scan_includes(text[i], len[i], &incs) != JITOP_OK) {
                fprintf(stderr, "scan_bench: %s: scan failed\n", argv[first + i]);
                return 1;
            }
            nd += incs.n;
            ndef += incs.ndefs;
            jitop__includes_free(&incs);
        }
        t[r] = now_s() - t0;
        directives = nd;
        defines = ndef;
    }
    qsort(t, (size_t)reps, sizeof *t, cmp_double);
    double med = t[reps / 2];
    printf("{\"bench\":\"scan\",\"files\":%d,\"bytes\":%zu,\"reps\":%d,\"median_ms\":%.3f,"
           "\"min_ms\":%.3f,\"mb_per_s\":%.1f,\"includes\":%zu,\"defines\":%zu}\n",
           nfiles, total, reps, med * 1e3, t[0] * 1e3, (double)total / med / 1e6, directives,
           defines);
    for (int i = 0; i < nfiles; i++)
        free(text[i]);
    free(text);
    free(len);
    free(t);
    return 0;
}
