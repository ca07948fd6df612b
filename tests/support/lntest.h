/* What the LayerNorm GPU test programs share (tests/gpu/test_layernorm.c,
 * _sweep.c, _odd.c, _plans.c; split so that make test-gpu runs them side
 * by side): host storage of the three dtypes, device buffers through
 * jitop's driver table (so that the programs start, and SKIP, without
 * libcuda.so.1), the program's context, the float64 reference, one
 * forward + backward checked against it (lnt_check_case_at), and the
 * contexts and JITOP_LN_PDL a test swaps, put back by lnt_restore_state.
 * Every function fails the current test instead of returning an error. */
#ifndef JITOP_LNTEST_H
#define JITOP_LNTEST_H

#include <stddef.h>
#include <stdint.h>

#include "load/driver.h"
#include "jitop.h"
#include "hostdtype.h"

/* The driver's table (lnt_setup_ctx fills it). */
extern const jitop__cuda_api *lnt_cu;
/* The context the checks run on: the program's, one for the whole program
 * (instances compile once), or one a test swapped in (lnt_use_ctx,
 * lnt_run_plans). */
extern jitop_ctx *lnt_ctx;

static const float EPS = 1e-5f;

/* float32 well under 1e-3 (issue 4), 16-bit types under 1e-2. */
double lnt_tol(jitop_dtype dt);

/* ------------------------------------------------------ device buffers */

typedef struct dbuf {
    CUdeviceptr base; /* cuMemAlloc's: 256-byte aligned */
    CUdeviceptr p;    /* base + the offset asked (lnt_check_case_at's modes) */
    size_t bytes;
} dbuf;

/* bytes at offset bytes past an allocation (16 bytes to spare after). */
dbuf lnt_dalloc(size_t bytes, size_t offset);
void lnt_dfree(dbuf *b);
/* 0xFF bytes: NaN in float32, float16 and bfloat16 alike. */
void lnt_poison(dbuf b);
void *lnt_ptr(dbuf b);
/* A device copy of bytes at h (cuMemAlloc's alignment). */
dbuf lnt_upload(const void *h, size_t bytes);
/* count values of dt from the device, as float64. */
void lnt_fetch(jitop_dtype dt, dbuf b, size_t count, double *out);

/* The program's context (once; after JT_REQUIRE_GPU) and lnt_cu. */
void lnt_setup_ctx(void);
/* The group teardown: the program's context and jt_tmpdir's directories. */
int lnt_teardown_all(void **state);

/* ------------------------------------------------------------ reference */

/* Row statistics in float64. */
void lnt_ref_stats(const double *x, int64_t m, int n, double *mu, double *rs);
/* The forward in float64: the row statistics and y (g, b NULL: 1, 0). */
void lnt_ref_forward(const double *x, const double *g, const double *b, int64_t m, int n,
                     double *mu, double *rs, double *y);
/* The backward in float64 from dy, x, the float64 statistics and gamma
 * (NULL: 1): dx, and dgamma and dbeta where not NULL (as
 * lnt_check_case_at). */
void lnt_ref_backward(const double *dy, const double *x, const double *g, const double *mu,
                      const double *rs, int64_t m, int n, double *dx, double *dg, double *db);
/* The mean's error against the rows' scale, as lnt_check_case_at measures
 * it. */
double lnt_mean_error(const double *got, const double *mu, const double *x, int64_t m, int n);
/* count values uniform in [lo, hi) stored as dt into h; v: the values
 * stored (rounded to dt). */
void lnt_draw(jitop_dtype dt, void *h, double *v, size_t count, float lo, float hi);
/* Rows as lnt_check_case_at draws them: a random shift and scale. */
void lnt_draw_x(jitop_dtype dt, void *h, double *v, size_t count);

/* ------------------------------------------------------------ one case */

/* lnt_check_case_at's buffers: PLAIN at the allocation's base; INPLACE too,
 * with y == x and dx == dy; UNALIGNED every buffer one element past it
 * (gamma and beta too: narrower vectors); SPLIT y and dx one element past x
 * and dy (the row tensors at different offsets within 16 bytes, gamma and
 * beta aligned: for an N the 16-byte vector does not divide, the narrow
 * vectors, not the row-shifted path). */
enum { PLAIN, INPLACE, UNALIGNED, SPLIT };

/* lnt_check_case's rows: a common offset of lnt_x_offset (when not 0, set
 * by lnt_set_offset for a dtype, put back to 0 by the test) plus a small
 * spread, else a random shift and scale. */
extern float lnt_x_offset;
void lnt_set_offset(jitop_dtype dt);

/* One forward + backward (affine: gamma and beta, and their gradients) of
 * m rows of n on lnt_ctx on fresh random data, checked against float64,
 * the outputs poisoned first; the row tensors (x, y, dy, dx) k elements
 * further past their buffers' offsets (mode's), gamma, beta, dgamma and
 * dbeta not. */
void lnt_check_case_at(jitop_dtype dt, int64_t m, int n, int affine, int mode, int k);
/* The same with the row tensors at their buffers' offsets. */
void lnt_check_case(jitop_dtype dt, int64_t m, int n, int affine, int mode);

/* A plan and the rows of each dtype to check under it. */
typedef struct ln_plan_rows {
    const char *plan;
    jitop_dtype dt[8];
    int n[8];
} ln_plan_rows;

/* Each plan (JITOP_LN_PLAN) in a fresh context, its rows checked (several
 * rows per cluster, every third in place, then 37 rows of a large common
 * offset); JITOP_LN_PLAN and lnt_ctx put back after. */
void lnt_run_plans(const ln_plan_rows *plans, size_t count);

/* ------------------------------------------- contexts and the environment */

/* Sets JITOP_LN_PDL (a context reads it at its first LayerNorm call),
 * saving the program's value the first time; lnt_restore_pdl_env puts it
 * back. */
void lnt_set_pdl_env(const char *value);
void lnt_restore_pdl_env(void);
/* A fresh context of the driver (its LayerNorm reads JITOP_LN_* anew),
 * compiling for arch (cfg.arch; NULL: the device's), in the program
 * context's cache (instances compiled once for both). */
jitop_ctx *lnt_new_ctx(const char *arch);
/* Makes c the context the checks use (lnt_ctx), destroying the one a test
 * swapped in before, never the program's; opens c's driver. */
void lnt_use_ctx(jitop_ctx *c);
/* The program's context back as lnt_ctx. */
void lnt_restore_ctx(void);
/* The teardown of the tests that swap the context or set JITOP_LN_PDL:
 * both put back, also when the test fails. */
int lnt_restore_state(void **state);

#endif
