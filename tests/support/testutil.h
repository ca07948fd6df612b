/* Helpers shared by the cmocka test programs. Every helper fails the current
 * test (cmocka's fail_msg) instead of returning an error. */
#ifndef JITOP_TESTUTIL_H
#define JITOP_TESTUTIL_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <setjmp.h>
#include <cmocka.h>

#include "jitop.h"

/* A fresh directory under $TMPDIR (or /tmp), removed by jt_cleanup() or at
 * the end of the program. Returns a malloc'd absolute path. */
char *jt_tmpdir(void);
/* Removes a directory tree (like rm -rf). */
void jt_rm_rf(const char *path);
/* Removes every directory jt_tmpdir made so far. */
void jt_cleanup(void);

/* dir/name, malloc'd. */
char *jt_path(const char *dir, const char *name);
/* Writes text to dir/name (creating parent directories), returns the path
 * (malloc'd). */
char *jt_write(const char *dir, const char *name, const char *text);
/* Like jt_write but the way editors save: write a temporary file beside it,
 * then rename it over the old one. */
char *jt_write_rename(const char *dir, const char *name, const char *text);
/* Reads a whole file (malloc'd, NUL-terminated). */
char *jt_read(const char *path);
/* stderr sent to a file under a directory between jt_stderr_begin and
 * jt_stderr_end, which puts it back and returns what was written there
 * (malloc'd): what jitop logged meanwhile. */
typedef struct jt_stderr {
    int keep;
    FILE *f;
    char *path;
} jt_stderr;
void jt_stderr_begin(jt_stderr *c, const char *dir);
char *jt_stderr_end(jt_stderr *c);
/* Sets a file's mtime to now + delta_s seconds without changing its content. */
void jt_touch(const char *path, double delta_s);

/* A compile-only context on cache_dir for arch (NULL: "sm_90"). */
jitop_ctx *jt_ctx(const char *cache_dir, const char *arch);
/* A context on cache_dir that opens the driver on its first load (the
 * defaults otherwise). Fails the test when it cannot be created. */
jitop_ctx *jt_ctx_driver(const char *cache_dir);

/* Runs `sh -c cmd`, captures stdout and stderr together into *output
 * (malloc'd; may be NULL to discard) and returns the exit status (128+signal
 * when killed). */
int jt_run(const char *cmd, char **output);
/* Fails the test with what a command printed, whole, on stderr, then
 * fmt's message: cmocka cuts its own message at 1 KiB, which would drop
 * the error line at the end of a long log. */
#define jt_fail_showing(output, ...) jt__fail_showing(__FILE__, __LINE__, output, __VA_ARGS__)
void jt__fail_showing(const char *file, int line, const char *output, const char *fmt, ...)
    __attribute__((format(printf, 4, 5), noreturn));
/* The jitop CLI under test ($JITOP_CLI, set by make test). */
const char *jt_cli(void);

/* 1 when a CUDA driver and at least one device are present. GPU tests call
 * JT_REQUIRE_GPU() first: it prints "SKIP: ..." and skips the test. */
int jt_have_gpu(void);
#define JT_REQUIRE_GPU()                                                         \
    do {                                                                         \
        if (!jt_have_gpu()) {                                                    \
            print_message("SKIP: no CUDA driver or device on this machine\n");   \
            skip();                                                              \
        }                                                                        \
    } while (0)

/* The test data's generator: seeded once per program from
 * $JITOP_TEST_SEED, else at random, and the seed printed, so that a failure
 * on drawn data or shapes can be run again on the same draws.
 * jt_random_seed returns the seed; jt_random_u64 draws 64 bits. */
uint64_t jt_random_seed(void);
uint64_t jt_random_u64(void);
/* Fills n floats with uniform values in [lo, hi): every call draws fresh
 * values. */
void jt_random_floats(float *v, size_t n, float lo, float hi);
void jt_random_doubles(double *v, size_t n, double lo, double hi);
/* ||a - b|| / ||b|| in double; NaN anywhere gives +inf. */
double jt_rel_error(const double *a, const double *b, size_t n);

#endif
