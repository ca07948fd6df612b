/*
 * Shared by the bench programs: a monotonic clock, order statistics, and the
 * one output format every bench program prints (bench/README.md): one JSON
 * object per figure on stdout, with the raw samples so that report.py can
 * merge figures measured in several processes.
 */
#ifndef JITOP_BENCH_UTIL_H
#define JITOP_BENCH_UTIL_H

#include <stddef.h>

/* Monotonic wall clock in milliseconds (CLOCK_MONOTONIC). */
double bench_now_ms(void);

typedef struct bench_stats {
    double median, p10, p90, min, max;
    size_t n;
} bench_stats;

/* Sorts samples in place and fills st (percentiles by linear interpolation).
 * n may be 0: everything is then 0. */
void bench_stats_of(double *samples, size_t n, bench_stats *st);

/* Prints one figure: {"area":..,"kernel":..,"system":..,"what":..,"unit":..,
 * "median":..,"p10":..,"p90":..,"min":..,"max":..,"n":..,"samples":[..]}.
 * Sorts samples. Returns 0, or -1 when stdout could not be written. */
int bench_emit(const char *area, const char *kernel, const char *system, const char *what,
               const char *unit, double *samples, size_t n);

/* The same for a breakdown figure (a part of a main figure, or a variant):
 * adds "detail":true so that report.py lists it without computing ratios. */
int bench_emit_detail(const char *area, const char *kernel, const char *system, const char *what,
                      const char *unit, double *samples, size_t n);

/* Prints a step that did not run: status "skipped" or "failed" with reason. */
int bench_emit_status(const char *area, const char *kernel, const char *system, const char *what,
                      const char *status, const char *reason);

/* Prints a fact about the run: {"area":"env","key":..,"value":..}. */
int bench_emit_env(const char *key, const char *value);

/* JITOP_BENCH_MODE: "full" (default), "quick" or "smoke". */
const char *bench_mode(void);

/* The repetition count for the current mode. */
int bench_reps(int full, int quick, int smoke);

/* Reads a whole file into a NUL-terminated malloc'd buffer. Returns 0 or -1
 * (errno set); *text is NULL on failure. */
int bench_read_file(const char *path, char **text, size_t *len);

/* Replaces path's content the way an editor does (write a temporary file in
 * the same directory, fsync, rename over path). Returns 0 or -1. */
int bench_write_file(const char *path, const char *text, size_t len);

#endif
