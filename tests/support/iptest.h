/* What the in-place ops' GPU test programs share (tests/gpu/test_inplace.c,
 * the square product, and test_inplace_softmax.c; split so that make
 * test-gpu runs them side by side): host storage of the three dtypes, the
 * program's context with a kernel that fills device memory with fresh
 * random values, and device buffers between two guards of a poison
 * pattern. Device memory goes through jitop's driver table, so that the
 * programs start, and SKIP, without libcuda.so.1. Every function fails the
 * current test instead of returning an error. */
#ifndef JITOP_IPTEST_H
#define JITOP_IPTEST_H

#include <stddef.h>
#include <stdint.h>

#include "load/driver.h"
#include "jitop.h"
#include "hostdtype.h"

/* The driver's table and the program's context (ipt_setup_ctx makes
 * them). */
extern const jitop__cuda_api *ipt_cu;
extern jitop_ctx *ipt_ctx;


/* The program's context (once; after JT_REQUIRE_GPU), ipt_cu and the fill
 * kernels. */
void ipt_setup_ctx(void);
/* The group teardown's common part: the program's context and
 * jt_tmpdir's directories (a program destroys its own other contexts
 * first). */
int ipt_teardown_all(void **state);
/* n values of dt at p, uniform in [-1, 1) from a hash of a fresh seed and
 * the index, made on the GPU (on the legacy stream, not synchronized). */
void ipt_fill(jitop_dtype dt, CUdeviceptr p, long long n);

#define GUARD 4096 /* bytes each side of A */
#define POISON 0xA5

/* A buffer of bytes between two guards, all filled with the poison pattern. */
typedef struct guarded {
    CUdeviceptr base, p;
    size_t bytes;
} guarded;

/* bytes at offset bytes past the first guard, all poisoned. */
guarded ipt_galloc(size_t bytes, size_t offset);
/* Every guard byte still holds the poison (what: the failure's message). */
void ipt_check_guards(const guarded *g, size_t offset, const char *what);
void ipt_gfree(guarded *g);

#endif
