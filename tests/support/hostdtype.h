/* Host storage of jitop's dtypes for the GPU tests' inputs and outputs:
 * float32, float16 (through _Float16) and bfloat16 (round to nearest even).
 * Shared by the LayerNorm and in-place test helpers (lntest.c, iptest.c). */
#ifndef JITOP_HOSTDTYPE_H
#define JITOP_HOSTDTYPE_H

#ifndef __FLT16_MAX__
#error "these tests store float16 through _Float16: GCC 12 or newer (x86-64), clang 15 or newer"
#endif

#include <stddef.h>

#include "jitop.h"

/* "f32", "f16" or "bf16". */
const char *jt_dname(jitop_dtype dt);
/* Stores v as dtype into buf[i]; returns the value actually stored. */
float jt_dstore(jitop_dtype dt, void *buf, size_t i, float v);
/* buf[i] of dtype, as float64. */
double jt_dload(jitop_dtype dt, const void *buf, size_t i);

#endif
