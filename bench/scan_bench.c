/* The include scanner's speed (jitop__scan_includes, src/compile/scan.c) on
 * real headers: each file given is read once, then scanned --reps times;
 * prints the bytes per second of the whole set and the directives found,
 * so that a faster scanner that finds something else shows at once.
 *
 *   scan_bench [--reps N] FILE...
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

int main(int argc, char **argv)
{
    int reps = 20, first = 1;
    if (argc > 2 && strcmp(argv[1], "--reps") == 0) {
        reps = atoi(argv[2]);
        first = 3;
    }
    if (reps < 1 || first >= argc) {
        fprintf(stderr, "usage: scan_bench [--reps N] FILE...\n");
        return 2;
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
