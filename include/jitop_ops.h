/*
 * The ops jitop ships as .cu sources (kernels/layernorm.cu, kernels/lltm.cu),
 * with C calls that pick the template instance and launch shape for the
 * caller. Included by jitop.h; do not include it on its own.
 *
 * All pointers are device pointers in the context's CUDA context; stream is a
 * CUstream (NULL: the legacy default stream). The first call for a given
 * shape compiles (through the cache) and loads the instance it needs; later
 * calls only launch.
 */
#ifndef JITOP_OPS_H
#define JITOP_OPS_H

#ifdef __cplusplus
extern "C" {
#endif

/* LayerNorm: declared by the layernorm work (kernels/layernorm.cu). */

/* LLTM: declared by the lltm work (kernels/lltm.cu). */

#ifdef __cplusplus
}
#endif

#endif
