/* The host half of the LLTM extension, as the PyTorch tutorial's
 * lltm_cuda.cpp is: check the inputs, size the grids, launch the kernels
 * of kernels/lltm.cu. jitop compiles this file with the system compiler and
 * loads it together with the kernels (one jitop_load); the application
 * calls its functions by signature (jitop_fn_get + jitop_call). Editing
 * this file while the application runs reloads it (jitop_watch). */
#include <jitop_host.h>

/* The fused forward and backward (one launch each) and the split backward
 * (gates, then the products) of kernels/lltm.cu, float32; the tilings are
 * the ones src/ops/lltm.c uses. */
#define LLTM_FWD "lltm_fwd<float, 8, 4, 16, 1, 1, 16, true>"
#define LLTM_FWD_THREADS 512u
#define LLTM_BWD_FUSED "lltm_bwd<float, true, 16, 8, 4, 1, 1, 24, 32, 32, 2, 2, 3>"
#define LLTM_BWD_FUSED_THREADS 768u
#define LLTM_BWD_SPLIT "lltm_bwd<float, false, 16, 32, 64, 4, 4, 1, 64, 64, 8, 4, 1>"
#define LLTM_BWD_SPLIT_THREADS 128u
#define LLTM_GATES "lltm_bwd_gates<float, false>"
/* B * 3S * K from which the backward's per-tile recomputation of the gate
 * gradients costs more than a second launch (as src/ops/lltm.c). */
#define LLTM_SPLIT_FROM 4000000.0

static int check_sizes(int B, int I, int S)
{
    if (B <= 0 || I <= 0 || S <= 0)
        return JITOP_EINVAL;
    /* The kernels index with 32-bit ints. */
    if ((double)B * 4 * S * (S + I) > 2147483647.0)
        return JITOP_EINVAL;
    return JITOP_OK;
}

static int check_ptrs(const void *const *p, int n)
{
    for (int i = 0; i < n; i++)
        if (!p[i])
            return JITOP_EINVAL;
    return JITOP_OK;
}

static int launch(const char *name, jitop_dim3 grid, jitop_dim3 block, void *stream, void **args,
                  size_t nargs)
{
    jitop_op *op = NULL;
    /* A lock-free lookup after the first call; the handle follows kernel
     * reloads. */
    int status = jitop_host.op_get(jitop_host.module, name, &op);
    if (status == JITOP_OK)
        status = jitop_host.launch(op, grid, block, 0, stream, args, NULL, nargs);
    return status;
}

/* Which build of this file runs (the hot reload test edits it). */
JITOP_EXPORT(int, lltm_host_version, (void))
{
    return 1;
}

/* new_h, new_cell (B x S) from input (B x I), weights (3S x (S + I)), bias
 * (3S), old_h, old_cell (B x S); saved: jitop_lltm_saved_size() bytes for
 * the backward. Device pointers; stream a CUstream or NULL. */
JITOP_EXPORT(int, lltm_forward,
             (const float *input, const float *weights, const float *bias, const float *old_h,
              const float *old_cell, float *new_h, float *new_cell, float *saved, int B, int I,
              int S, void *stream))
{
    const void *ptrs[] = {input, weights, bias, old_h, old_cell, new_h, new_cell, saved};
    int status = check_sizes(B, I, S);
    if (status == JITOP_OK)
        status = check_ptrs(ptrs, 8);
    if (status != JITOP_OK)
        return status;
    void *args[] = {&input, &weights, &bias, &old_h, &old_cell, &new_h, &new_cell, &saved,
                    &B, &I, &S};
    jitop_dim3 grid = {((unsigned)S + 3) / 4, ((unsigned)B + 7) / 8, 1};
    return launch(LLTM_FWD, grid, (jitop_dim3){LLTM_FWD_THREADS, 1, 1}, stream, args, 11);
}

/* The gradients of the loss with respect to old_h, input, weights, bias and
 * old_cell, from grad_h, grad_cell and the forward's saved buffer. */
JITOP_EXPORT(int, lltm_backward,
             (const float *grad_h, const float *grad_cell, float *saved, const float *weights,
              float *d_old_h, float *d_input, float *d_weights, float *d_bias, float *d_old_cell,
              int B, int I, int S, void *stream))
{
    const void *ptrs[] = {grad_h, grad_cell, saved, weights, d_old_h,
                          d_input, d_weights, d_bias, d_old_cell};
    int status = check_sizes(B, I, S);
    if (status == JITOP_OK)
        status = check_ptrs(ptrs, 9);
    if (status != JITOP_OK)
        return status;
    int K = S + I;
    int split = (double)B * 3.0 * S * K >= LLTM_SPLIT_FROM;
    if (split) {
        void *gargs[] = {&grad_h, &grad_cell, &saved, &d_old_cell, &d_bias, &B, &I, &S};
        status = launch(LLTM_GATES, (jitop_dim3){((unsigned)S + 7) / 8, 1, 1},
                        (jitop_dim3){8, 32, 1}, stream, gargs, 8);
        if (status != JITOP_OK)
            return status;
    }
    /* d_X tiles (BM1 x BN1 over B x K), then d_W tiles (BM2 x BN2 over
     * 3S x (K + 1)), in one grid. */
    const int tile[2][4] = {{8, 4, 32, 32}, {32, 64, 64, 64}};
    const int *t = tile[split];
    unsigned ndx = (unsigned)((K + t[1] - 1) / t[1]) * (unsigned)((B + t[0] - 1) / t[0]);
    unsigned ndw = (unsigned)((K + 1 + t[3] - 1) / t[3]) * (unsigned)((3 * S + t[2] - 1) / t[2]);
    void *args[] = {&grad_h, &grad_cell, &saved, &weights, &d_old_h, &d_input, &d_weights,
                    &d_bias, &d_old_cell, &B, &I, &S};
    return launch(split ? LLTM_BWD_SPLIT : LLTM_BWD_FUSED, (jitop_dim3){ndx + ndw, 1, 1},
                  (jitop_dim3){split ? LLTM_BWD_SPLIT_THREADS : LLTM_BWD_FUSED_THREADS, 1, 1},
                  stream, args, 12);
}
