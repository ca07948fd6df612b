/* The compatibility suite (issue 20): kernels written in the style of CUDA's
 * NVRTC samples, CuPy's RawModule tests and jitify's tests, one case per
 * kernel (or per small family of kernels), each tied to how it is built and
 * how a GPU run is checked against a float64 CPU reference on fresh random
 * inputs.
 *
 * Two programs read the one table (compat_cases.c):
 *  - tests/cpu/test_compat (CI, no GPU): compiles every case through jitop
 *    for sm_90 and checks that the kernels and globals each case names are
 *    in the binaries;
 *  - tests/gpu/test_compat: loads every case through jitop_load, launches
 *    it and checks the results.
 * A case's `needs` names the issue-20 features it relies on, so that a
 * failure says which feature is missing; nothing is skipped because of it. */
#ifndef JITOP_COMPAT_H
#define JITOP_COMPAT_H

#include <stddef.h>
#include <stdint.h>

#include "jitop.h"

/* The features of issue 20 a case relies on (beyond what jitop had before). */
enum compat_need {
    COMPAT_NEEDS_TOOLKIT_HEADERS = 1u << 0, /* item 1: <cuda_fp16.h>, <cub/...> with no -I */
    COMPAT_NEEDS_HEADER_KERNELS = 1u << 1,  /* item 2: kernels and templates from headers */
    COMPAT_NEEDS_GLOBALS = 1u << 2,         /* item 3: jitop_global_get/read/write */
    COMPAT_NEEDS_MANY_PARAMS = 1u << 3,     /* item 4: over 64 parameters */
    COMPAT_NEEDS_MANY_KERNELS = 1u << 4,    /* item 4: listing a module of 500 kernels */
    COMPAT_NEEDS_RDC = 1u << 5,             /* item 5: -dc units linked with nvJitLink */
    COMPAT_NEEDS_NAME_SPELLING = 1u << 6,   /* item 7: f<float,4> == f<float, 4> */
};

/* Writes "TOOLKIT_HEADERS|GLOBALS" for a needs mask ("none" for 0) into
 * buf and returns buf. */
const char *compat_needs_text(unsigned needs, char *buf, size_t size);

typedef struct compat_env compat_env;
typedef void (*compat_run_fn)(compat_env *e);

typedef struct compat_case {
    const char *name;     /* the cmocka test's name */
    const char *category; /* "templates", "cub", ... */
    /* NULL-terminated. A path under tests/compat/kernels, or "@name" for a
     * source the suite generates at run time (compat_gen.c). */
    const char *const *sources;
    const char *const *options; /* NULL-terminated NVRTC options, may be NULL */
    /* NULL-terminated op names as jitop_op_get takes them. Template names
     * are instantiated from sources[0] (a case with templates has one
     * source). */
    const char *const *ops;
    /* NULL-terminated global names as jitop_global_get takes them, may be
     * NULL; a C++ name ("ns::t", "v<float>") is in sources[0]. */
    const char *const *globals;
    size_t min_kernels; /* the binaries hold at least this many kernels */
    unsigned needs;     /* enum compat_need bits */
    compat_run_fn run;  /* launches and checks on a GPU */
} compat_case;

extern const compat_case compat_cases[];
extern const size_t compat_ncases;

/* The absolute path of tests/compat/kernels (from this file's location,
 * made absolute against the working directory: make runs from the
 * repository root). Malloc'd. */
char *compat_kernel_dir(void);
/* Writes the generated sources ("@params100.cu", "@many500.cu") into dir. */
void compat_generate(const char *dir);
/* The path of one of a case's sources: kernel_dir/src, or gen_dir/name
 * for "@name". Malloc'd. */
char *compat_source_path(const char *kernel_dir, const char *gen_dir, const char *src);
/* The generated sources' sizes: "@many500.cu" holds COMPAT_MANY_KERNELS
 * kernels many_k000.., "@params100.cu" one kernel of COMPAT_MANY_PARAMS
 * parameters (out, then p1..p99). */
#define COMPAT_MANY_KERNELS 500
#define COMPAT_MANY_PARAMS 100
/* The type of params100's parameter pk (k >= 1). */
typedef struct compat_param_type {
    const char *cuda; /* "unsigned short" */
    size_t size;
    int is_float;
    int is_signed;
} compat_param_type;
const compat_param_type *compat_param_type_of(int k);
/* many_k<k> computes y = x * compat_many_mul(k) + compat_many_add(k). */
int compat_many_mul(int k);
int compat_many_add(int k);

/* Runs one case on the GPU: loads its sources (through ctx, whose CUDA
 * context is current), seeds its generator from base_seed and the case's
 * index, calls its run function, frees its device memory. Fails the cmocka
 * test with the case's name, needs and seed. */
void compat_run_case(jitop_ctx *ctx, const char *kernel_dir, const char *gen_dir, size_t index,
                     uint64_t base_seed);
/* Frees what a failed last case left (before the context is destroyed). */
void compat_finish(void);
/* The run's seed: $JITOP_COMPAT_SEED when set (to replay a failure), else
 * from the time and the process id. */
uint64_t compat_base_seed(void);

#endif
