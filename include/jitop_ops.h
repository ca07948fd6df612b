/*
 * The ops jitop ships as .cu sources (kernels/layernorm.cu, kernels/lltm.cu,
 * kernels/inplace.cu),
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

/* In place (kernels/inplace.cu): ops that overwrite their input, for models
 * short of device memory. Row-major, dtype JITOP_FLOAT32, JITOP_FLOAT16 or
 * JITOP_BFLOAT16 (float32 accumulation), pointers aligned to their element
 * size; queued on stream, nothing synchronizes. Arguments are checked before
 * anything is queued (JITOP_EINVAL naming the argument). */

/* jitop_square_matmul_inplace flag: float32 products may round their inputs
 * to TF32 on the tensor cores (about 1e-3 relative error, several times
 * faster). Without it float32 is full float32. */
#define JITOP_MATMUL_TF32 1u

/* a (m x n) <- a w, or a w^T when transpose_w is non-zero; w is n x n and
 * must not overlap a. Any m >= 1, n in [1, 2^20].
 * n <= 64: one jitop kernel, a tile of rows in shared memory at a time (one
 * read and one write of a, no scratch). float16/bfloat16 (n a multiple of
 * 256) and float32 with JITOP_MATMUL_TF32 (n a multiple of 128) on a
 * compute capability 9.0 GPU (H100), a 16-byte aligned (and w, except
 * for TF32 without transpose_w): a jitop kernel built for sm_90a
 * (kernels/inplace_panel.cu: wgmma, TMA) whose blocks own panels of 128
 * rows and write the product straight into a (one read and one write of a
 * from DRAM); its extra memory is two 4-byte counters a block (zeroed once
 * per scratch buffer), and for TF32 without transpose_w a transposed copy
 * of w (n x n elements), within the bound below. It runs for n 256-1024 at any m and n up to
 * 2048 from m 16384, where it measured faster than the path below;
 * $JITOP_INPLACE_MM_PANEL=1 gives it every call it can take (n 256-4096),
 * 0 none. Other n, full float32, other GPUs: cuBLAS (libcublas.so.13,
 * opened at run time; without it JITOP_ENOTFOUND) in chunks of rows whose
 * product goes to a scratch buffer and is copied back over the chunk.
 * Extra device memory, whatever m is: at most
 * jitop_square_matmul_scratch_bound(dtype, n) bytes (b x 32 MiB of whole
 * rows, or b rows when a row is larger; b = 2 buffers by default,
 * $JITOP_INPLACE_MM_BUFS sets it to 2..4, $JITOP_INPLACE_CHUNK_MB sets the
 * 32, and with $JITOP_INPLACE_OVERLAP=0 b is 1), kept per context and per
 * stream between calls (jitop_inplace_release frees it), plus cuBLAS's own
 * workspace. The copies run on a second stream of jitop's, ordered with
 * events, so that they overlap the next chunk's product; the caller's
 * stream waits for the last copy. $JITOP_INPLACE_MM_COPY_SMS=k: the
 * products run with cuBLAS's SM count target at the device's SMs - k and
 * the copies by a jitop kernel sized to k SMs, so that they run beside the
 * next product (no extra memory; the driver's copy where cuBLAS lacks
 * cublasSetSmCountTarget). The settings are read when a context's first
 * in-place call makes its state. */
JITOP_API int jitop_square_matmul_inplace(jitop_ctx *ctx, jitop_dtype dtype, int64_t m, int64_t n,
                                          void *a, const void *w, int transpose_w, unsigned flags,
                                          void *stream);

/* The most scratch jitop_square_matmul_inplace holds for one stream at this
 * (dtype, n), for any m (0 for n <= 64, or invalid arguments), under the
 * $JITOP_INPLACE_* settings in the environment now (a context keeps those it
 * read at its first in-place call). */
JITOP_API size_t jitop_square_matmul_scratch_bound(jitop_dtype dtype, int64_t n);

/* Bytes of device scratch the in-place ops of ctx hold now, all streams. */
JITOP_API size_t jitop_inplace_scratch_bytes(jitop_ctx *ctx);

/* Frees that scratch after synchronizing the context (queued work may still
 * use it); the next call allocates again. */
JITOP_API int jitop_inplace_release(jitop_ctx *ctx);

/* x (rows x n) <- softmax(scale * x) over each row, max-subtracted, in
 * float32 (any finite scale; scale * x must stay finite). causal_q 0: every
 * element counts; causal_q = Q in [1, n]: the rows are attention scores of Q
 * queries each (row r is query r % Q), and row r keeps its first
 * r % Q + n - Q + 1 elements, writing 0 over the rest. A row whose kept
 * elements are all -inf is written as zeros. Compiled per (dtype, n,
 * alignment, mask): rows up to 128 KiB are read once into one block's
 * registers and written once; longer rows up to 512 KiB (float32 n <=
 * 131072, 16-bit n <= 262144) into the registers of a thread-block cluster
 * of 2-8 smaller blocks (sm_90); other rows are read twice (the second read
 * mostly from L2). Unmasked rows of 32 KiB or more compute each exponential
 * once and keep the weight in the element type between the passes: a 16-bit
 * result is within about 1 ulp of the float32 softmax rounded (half an ulp
 * more than rounding alone). Rows read once run close to a device copy's
 * speed (measurements in bench/INPLACE_NOTES.md). No scratch. */
JITOP_API int jitop_softmax_inplace(jitop_ctx *ctx, jitop_dtype dtype, int64_t rows, int64_t n,
                                    void *x, float scale, int64_t causal_q, void *stream);

#ifdef __cplusplus
}
#endif

#endif
