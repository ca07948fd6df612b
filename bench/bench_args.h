/*
 * The command line shared by floor and jitop_bench:
 *   PROGRAM MODE --src FILE --kernel LABEL [--op NAME] [--arch ARCH]
 *           [--opt NVRTC_OPTION]... [--reps N] [--area AREA] [--cubin FILE]
 * --op is the kernel to get: an extern "C" name or a template name
 * expression ("layernorm_fwd<float, 1024, true>"). Options given as
 * --opt=-DX=1 (with '=') so that values starting with '-' stay values.
 */
#ifndef JITOP_BENCH_ARGS_H
#define JITOP_BENCH_ARGS_H

#include <stddef.h>

#define BENCH_MAX_OPTS 32

typedef struct bench_args {
    const char *mode;
    const char *src;
    const char *kernel;
    const char *op;
    const char *arch;
    const char *area;
    const char *cubin;
    const char *opts[BENCH_MAX_OPTS];
    size_t nopts;
    int reps;
} bench_args;

/* Parses argv into a (argv strings are borrowed). Returns 0, or -1 after
 * printing what is wrong and the usage to stderr. */
int bench_args_parse(int argc, char **argv, const char *usage, bench_args *a);

/* Rewrites the value of the first "#define SAXPY_BIAS " line of text to
 * "<value>.0f" (the edit of the edit-to-live benchmarks), or, when text has
 * no such line, appends a comment "// bench edit <value>" (a change of
 * content that forces a rebuild without changing what the code does).
 * Returns a malloc'd text or NULL when out of memory. *semantic is 1 when
 * the bias line was rewritten. */
char *bench_edit_text(const char *text, int value, int *semantic);

#endif
