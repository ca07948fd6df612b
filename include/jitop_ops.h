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

/* LayerNorm over the last dimension of a rows x cols row-major tensor
 * (kernels/layernorm.cu): y = (x - mean) / sqrt(var + eps) * gamma + beta,
 * var the biased variance, statistics and sums in float32. dtype is
 * JITOP_FLOAT32, JITOP_FLOAT16 or JITOP_BFLOAT16 for x, y, gamma, beta (and
 * dy, dx, dgamma, dbeta); mean and rstd are float32, one per row.
 *
 * Any cols from 1 up (rows up to ~128K floats per row run from registers,
 * one read and one write of the tensor; longer rows take a generic kernel
 * that reads x up to three times), any rows >= 1, any element-aligned
 * pointers (16-byte loads when every pointer and the row length allow
 * them, narrower ones otherwise). In place is allowed: y == x. The first
 * call for a (dtype, cols, affine, alignment) compiles its instance through
 * the cache (milliseconds warm, ~0.1-1 s cold); later calls only launch,
 * asynchronously on stream. Errors (JITOP_EINVAL naming the argument for a
 * NULL x/y, rows or cols < 1, an unknown dtype, eps < 0) launch nothing.
 *
 * gamma NULL: no scale; beta NULL: no shift. mean / rstd NULL: not saved
 * (the backward needs them). */
JITOP_API int jitop_layernorm_forward(jitop_ctx *ctx, jitop_dtype dtype, int64_t rows,
                                      int64_t cols, float eps, const void *x, const void *gamma,
                                      const void *beta, void *y, float *mean, float *rstd,
                                      void *stream);

/* The backward of jitop_layernorm_forward: dx from dy, x, gamma (NULL when
 * the forward had no scale) and the forward's mean and rstd (required);
 * dgamma = sum over rows of dy * xhat and dbeta = sum over rows of dy, each
 * written when not NULL (float32 partial sums per block in a per-context,
 * per-stream workspace, reduced in a fixed order: the result is
 * deterministic). dx may be the same buffer as dy. Calls on one stream run in
 * order; calls on different streams each get their own workspace. */
JITOP_API int jitop_layernorm_backward(jitop_ctx *ctx, jitop_dtype dtype, int64_t rows,
                                       int64_t cols, const void *dy, const void *x,
                                       const void *gamma, const float *mean, const float *rstd,
                                       void *dx, void *dgamma, void *dbeta, void *stream);

/* Builds into the cache, without a GPU (a compile_only context will do),
 * every kernel jitop_layernorm_forward and jitop_layernorm_backward use for
 * rows of cols elements of dtype on a GPU of arch ("sm_90"; NULL: the
 * context's arch), with and without gamma/beta, for buffers aligned as
 * cuMemAlloc returns them; their first call there then compiles nothing
 * (a misaligned pointer picks a narrower instance, compiled on first use).
 * For a deployment: run it for each arch and shape before the first call,
 * on any machine that shares the cache directory (JITOP_CACHE_DIR). */
JITOP_API int jitop_layernorm_prewarm(jitop_ctx *ctx, const char *arch, jitop_dtype dtype,
                                      int64_t cols);

/* LLTM (kernels/lltm.cu). */
/* The LLTM cell of PyTorch's C++/CUDA extension tutorial (B batch, I input
 * features, S state size, K = S + I), row-major, dtype JITOP_FLOAT32 or
 * JITOP_FLOAT64 for every tensor:
 *   X = [old_h, input] (B x K); gates = X weights^T + bias, weights 3S x K,
 *   bias 3S; ig = sigmoid(gates[:, :S]), og = sigmoid(gates[:, S:2S]),
 *   cand = elu(gates[:, 2S:]); new_cell = old_cell + cand * ig;
 *   new_h = tanh(new_cell) * og.
 * Full fp32 semantics (no TF32). Small sizes run the whole forward in one
 * launch and the whole backward in one; large sizes run the products through
 * cuBLAS (libcublas.so.13, opened at run time when present) around fused
 * elementwise kernels ($JITOP_LLTM_PATH=fused|cublas forces one path).
 * After the first call (which loads the instances it needs, and at a cuBLAS
 * size creates the context's cuBLAS handle), nothing is allocated and nothing
 * synchronizes: all work is queued on stream (a CUstream; NULL: the legacy
 * default stream). Arguments are checked before anything is queued: B, I,
 * S < 1, a NULL pointer or another dtype fail with JITOP_EINVAL naming the
 * argument. Errors from the kernels themselves surface at the caller's next
 * synchronization. */

/* Bytes of the saved buffer that jitop_lltm_forward fills for the backward
 * (activations, X, and the backward's scratch): B * (8S + I) elements. 0 for
 * invalid arguments. */
JITOP_API size_t jitop_lltm_saved_size(jitop_dtype dtype, int B, int I, int S);

/* Forward: reads input (B x I), weights (3S x K), bias (3S), old_h (B x S),
 * old_cell (B x S); writes new_h and new_cell (B x S). saved: NULL for
 * inference, else jitop_lltm_saved_size() bytes that the backward reads
 * (the caller's input buffers may be reused after this call is queued).
 * Inference always runs the one-launch fused forward (the cuBLAS path keeps
 * its gates in saved), which at large sizes is ~3x slower than with saved.
 * Outputs must not alias inputs. */
JITOP_API int jitop_lltm_forward(jitop_ctx *ctx, jitop_dtype dtype, int B, int I, int S,
                                 const void *input, const void *weights, const void *bias,
                                 const void *old_h, const void *old_cell, void *new_h,
                                 void *new_cell, void *saved, void *stream);

/* Backward: from grad_h and grad_cell (B x S, gradients of new_h and
 * new_cell) and the saved buffer of the matching forward, writes (overwrites,
 * never accumulates) d_old_h (B x S), d_input (B x I), d_weights (3S x K),
 * d_bias (3S) and d_old_cell (B x S). weights as given to the forward. The
 * saved buffer is also the backward's scratch: two backwards on the same
 * saved buffer must not run at the same time (one after the other, on one
 * stream, is fine: saved's activations are left intact). */
JITOP_API int jitop_lltm_backward(jitop_ctx *ctx, jitop_dtype dtype, int B, int I, int S,
                                  const void *grad_h, const void *grad_cell, void *saved,
                                  const void *weights, void *d_old_h, void *d_input,
                                  void *d_weights, void *d_bias, void *d_old_cell, void *stream);

/* Builds into the cache, without a GPU, every kernel jitop_lltm_forward and
 * jitop_lltm_backward may use for dtype (float32 or float64) on a GPU of
 * arch (NULL: the context's arch), whatever the sizes. */
JITOP_API int jitop_lltm_prewarm(jitop_ctx *ctx, const char *arch, jitop_dtype dtype);

#ifdef __cplusplus
}
#endif

#endif
