/*
 * NVRTC called directly, the way an application without jitop does it: the
 * floor that jitop's compile path is measured against (and the raw module the
 * launch benchmark compares jitop_launch with).
 */
#ifndef JITOP_BENCH_NVRTC_H
#define JITOP_BENCH_NVRTC_H

#include <stddef.h>

typedef struct bench_nvrtc_out {
    char *cubin;
    size_t cubin_size;
    char **lowered;  /* one per name expression, in order */
    size_t nnames;
} bench_nvrtc_out;

/* Compiles text (named path in messages) to a cubin for arch ("sm_90"):
 * nvrtcCreateProgram, nvrtcAddNameExpression for each name, nvrtcCompileProgram
 * with "--gpu-architecture=<arch>" followed by opts, nvrtcGetCUBIN and the
 * lowered names. Returns 0, or -1 with the NVRTC error (and the start of the
 * log) in err; out is then empty. */
int bench_nvrtc_compile(const char *text, const char *path, const char *arch,
                        const char *const *opts, size_t nopts,
                        const char *const *names, size_t nnames,
                        bench_nvrtc_out *out, char *err, size_t errcap);

void bench_nvrtc_out_free(bench_nvrtc_out *out);

/* "13.0" into buf. */
void bench_nvrtc_version(char *buf, size_t cap);

#endif
