/* What a case's run function works with on the GPU: its module, device
 * memory that is freed after the case, checked launches, a seeded random
 * generator, checks whose failure names the case, its needs and the seed,
 * and exact CPU references for the formats and generators the kernels use. */
#ifndef JITOP_COMPAT_ENV_H
#define JITOP_COMPAT_ENV_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "compat.h"
#include "load/driver.h"

#define COMPAT_MAX_ALLOCS 64

struct compat_env {
    const compat_case *c;
    jitop_ctx *ctx;
    jitop_module *m;
    const jitop__cuda_api *cu;
    int device;                /* the CUdevice ordinal of ctx */
    uint64_t base_seed, seed;  /* the run's seed, and this case's */
    uint64_t rng;              /* the generator's state */
    CUdeviceptr allocs[COMPAT_MAX_ALLOCS];
    size_t nallocs;
    void *host[COMPAT_MAX_ALLOCS];
    size_t nhost;
};

/* Fails the current test: "case NAME (needs: ...): message [seed ...]". */
void cx_fail(compat_env *e, const char *fmt, ...) __attribute__((format(printf, 2, 3), noreturn));

/* A driver call that must succeed. */
#define CX_CU(e, call)                                                                            \
    do {                                                                                          \
        CUresult r_ = (call);                                                                     \
        if (r_ != CUDA_SUCCESS)                                                                   \
            cx_fail((e), "%s failed: CUDA error %d", #call, (int)r_);                             \
    } while (0)

/* A jitop call that must succeed. */
#define CX_OK(e, call)                                                                            \
    do {                                                                                          \
        int st_ = (call);                                                                         \
        if (st_ != JITOP_OK)                                                                      \
            cx_fail((e), "%s: %s: %s", #call, jitop_strerror(st_), jitop_errmsg(NULL));           \
    } while (0)

/* A condition that must hold; the rest is the failure's printf message. */
#define CX_EXPECT(e, cond, ...)                                                                   \
    do {                                                                                          \
        if (!(cond))                                                                              \
            cx_fail((e), __VA_ARGS__);                                                            \
    } while (0)

/* ------------------------------------------------------------ the module */

jitop_op *cx_op(compat_env *e, const char *name);
/* Parameter count and sizes, from jitop_op_info_get. */
void cx_expect_params(compat_env *e, jitop_op *op, size_t nparams, const size_t *sizes);

/* The module's globals (issue 20 item 3). */
void cx_global_get(compat_env *e, const char *name, uint64_t *dptr, size_t *size);
void cx_global_write(compat_env *e, const char *name, const void *src, size_t size);
void cx_global_read(compat_env *e, const char *name, void *dst, size_t size);

/* --------------------------------------------------------- device memory */

/* Device memory freed after the case, filled with 0xFF bytes (NaN for
 * floats) so that an output the kernel does not write cannot pass. */
CUdeviceptr cx_alloc(compat_env *e, size_t bytes);
/* A new allocation holding a copy of host bytes. */
CUdeviceptr cx_upload_new(compat_env *e, const void *host, size_t bytes);
void cx_upload(compat_env *e, CUdeviceptr dst, const void *host, size_t bytes);
void cx_memset0(compat_env *e, CUdeviceptr dst, size_t bytes);
/* Waits for the device, then copies to the host. */
void cx_download(compat_env *e, void *host, CUdeviceptr src, size_t bytes);
void cx_sync(compat_env *e);
/* Zeroed host memory freed after the case. */
void *cx_host(compat_env *e, size_t bytes);
/* Frees every allocation of the case, device and host. */
void cx_free_all(compat_env *e);

/* ---------------------------------------------------------------- launch */

typedef struct cx_arg {
    void *p;
    size_t size;
} cx_arg;
#define CXA(v) ((cx_arg){(void *)&(v), sizeof(v)})

jitop_dim3 cx_dim(unsigned x, unsigned y, unsigned z);
/* jitop_launch with every argument's size checked. */
void cx_launch_args(compat_env *e, jitop_op *op, jitop_dim3 grid, jitop_dim3 block, size_t smem,
                    const cx_arg *args, size_t nargs);
/* jitop_launch_ex with every argument's size checked. */
void cx_launch_ex_args(compat_env *e, jitop_op *op, const jitop_launch_config *cfg,
                       const cx_arg *args, size_t nargs);
#define CX_NARGS(...) (sizeof((cx_arg[]){__VA_ARGS__}) / sizeof(cx_arg))
/* One-dimensional grid and block: CX_LAUNCH(e, op, grid, block, smem, CXA(n), CXA(dx)). */
#define CX_LAUNCH(e, op, grid, block, smem, ...)                                                  \
    cx_launch_args((e), (op), cx_dim((grid), 1, 1), cx_dim((block), 1, 1), (smem),                \
                   (const cx_arg[]){__VA_ARGS__}, CX_NARGS(__VA_ARGS__))
#define CX_LAUNCH_DIMS(e, op, grid, block, smem, ...)                                             \
    cx_launch_args((e), (op), (grid), (block), (smem), (const cx_arg[]){__VA_ARGS__},             \
                   CX_NARGS(__VA_ARGS__))
#define CX_LAUNCH_EX(e, op, cfg, ...)                                                             \
    cx_launch_ex_args((e), (op), (cfg), (const cx_arg[]){__VA_ARGS__}, CX_NARGS(__VA_ARGS__))
/* Blocks of block threads covering n. */
unsigned cx_blocks(size_t n, unsigned block);
/* A device attribute of the context's device (CU_DEVICE_ATTRIBUTE_...). */
int cx_device_attribute(compat_env *e, CUdevice_attribute attr);

/* ---------------------------------------------------- random (per case) */

uint64_t cx_u64(compat_env *e);
uint32_t cx_u32(compat_env *e);
/* Uniform in [lo, hi). */
double cx_uniform(compat_env *e, double lo, double hi);
/* Uniform integer in [lo, hi]. */
int64_t cx_int(compat_env *e, int64_t lo, int64_t hi);
/* Fills with uniform values in [lo, hi), never exactly zero. */
void cx_fill_f32(compat_env *e, float *v, size_t n, float lo, float hi);
void cx_fill_f64(compat_env *e, double *v, size_t n, double lo, double hi);
/* Fills with uniform integers in [lo, hi], never zero. */
void cx_fill_i32(compat_env *e, int *v, size_t n, int lo, int hi);
/* A value whose magnitude is uniform in [lo, hi) with a random sign. */
double cx_signed(compat_env *e, double lo, double hi);

/* ------------------------------------------------------------ the checks */

/* |got - want| <= tol, else fails naming what[i]. NaN never passes. */
void cx_near(compat_env *e, const char *what, size_t i, double got, double want, double tol);
void cx_eq_i64(compat_env *e, const char *what, size_t i, int64_t got, int64_t want);
void cx_eq_u64(compat_env *e, const char *what, size_t i, uint64_t got, uint64_t want);

/* Unit in the last place of a float (double) of magnitude |x|: the spacing
 * of the format at x, subnormal spacing below the normal range. */
double cx_ulp_f32(double x);
double cx_ulp_f64(double x);
/* Unit roundoff of float and double. */
#define CX_EPS_F32 0x1p-24
#define CX_EPS_F64 0x1p-53

/* -------------------------------------------------- exact CPU references */

/* IEEE binary16 from a double, rounded to nearest even once (overflow to
 * infinity, subnormals), as __float2half_rn and the half arithmetic do. */
uint16_t cx_half_from_double(double x);
double cx_half_to_double(uint16_t h);
/* bfloat16 from a float, rounded to nearest even, as __float2bfloat16_rn. */
uint16_t cx_bf16_from_float(float x);
float cx_bf16_to_float(uint16_t h);
uint32_t cx_f32_bits(float x);

/* cuRAND's Philox4x32-10 device generator (curand_philox4x32_x.h and
 * curand_kernel.h): the same state, initialization and draws. */
typedef struct cx_philox {
    uint32_t ctr[4];
    uint32_t key[2];
    uint32_t output[4];
    unsigned state; /* the next output word */
} cx_philox;
void cx_philox_init(cx_philox *p, uint64_t seed, uint64_t subsequence, uint64_t offset);
uint32_t cx_philox_next(cx_philox *p);
/* curand_uniform's mapping of a raw draw to (0, 1]. */
float cx_curand_uniform(uint32_t bits);

#endif
