/* Run functions of the generated cases (compat_gen.c): a kernel of 100
 * parameters of every scalar size, and a module of 500 kernels. */
#include "compat_env.h"
#include "compat_runs.h"

#include <stdio.h>
#include <string.h>

/* A random value of parameter pk's type, never zero, stored at slot (8
 * aligned bytes); returns it as a double, which holds every such value
 * exactly (the 64-bit ones stay under 2^53). */
static double param_value(compat_env *e, const compat_param_type *t, unsigned char *slot)
{
    double v;
    if (t->is_float) {
        v = cx_signed(e, 0.001, 1000.0);
        if (t->size == 4) {
            float f = (float)v;
            memcpy(slot, &f, 4);
            return f;
        }
        memcpy(slot, &v, 8);
        return v;
    }
    int bits = (int)t->size * 8;
    int64_t hi = bits >= 64 ? (INT64_C(1) << 53) - 1 : (t->is_signed ? (INT64_C(1) << (bits - 1)) - 1
                                                                     : (INT64_C(1) << bits) - 1);
    int64_t lo = t->is_signed ? -hi : 1;
    int64_t x;
    do
        x = cx_int(e, lo, hi);
    while (x == 0);
    switch (t->size) { /* little-endian low bytes: the two's complement value */
    case 1: { int8_t s = (int8_t)x; memcpy(slot, &s, 1); break; }
    case 2: { int16_t s = (int16_t)x; memcpy(slot, &s, 2); break; }
    case 4: { int32_t s = (int32_t)x; memcpy(slot, &s, 4); break; }
    default: memcpy(slot, &x, 8); break;
    }
    return (double)x;
}

void run_params_100(compat_env *e)
{
    jitop_op *op = cx_op(e, "params100");
    enum { N = COMPAT_MANY_PARAMS };
    size_t sizes[N];
    sizes[0] = sizeof(CUdeviceptr);
    for (int k = 1; k < N; k++)
        sizes[k] = compat_param_type_of(k)->size;
    cx_expect_params(e, op, N, sizes);

    _Alignas(8) unsigned char slots[N][8];
    double want[N - 1], got[N - 1];
    cx_arg args[N];
    CUdeviceptr dout = cx_alloc(e, sizeof got);
    args[0] = CXA(dout);
    for (int k = 1; k < N; k++) {
        want[k - 1] = param_value(e, compat_param_type_of(k), slots[k]);
        args[k] = (cx_arg){slots[k], sizes[k]};
    }
    cx_launch_args(e, op, cx_dim(1, 1, 1), cx_dim(32, 1, 1), 0, args, N);
    cx_download(e, got, dout, sizeof got);
    for (int k = 1; k < N; k++) {
        char what[64];
        snprintf(what, sizeof what, "p%d (%s)", k, compat_param_type_of(k)->cuda);
        cx_near(e, what, 0, got[k - 1], want[k - 1], 0);
    }
}

void run_kernels_500(compat_env *e)
{
    enum { K = COMPAT_MANY_KERNELS };
    size_t count = 0, filled = 0;
    CX_OK(e, jitop_module_ops(e->m, NULL, 0, &count));
    CX_EXPECT(e, count == K, "jitop_module_ops counts %zu kernels, expected %d", count, K);
    jitop_op_info *infos = cx_host(e, count * sizeof *infos);
    CX_OK(e, jitop_module_ops(e->m, infos, count, &filled));
    CX_EXPECT(e, filled == count, "jitop_module_ops listed %zu of %zu", filled, count);
    unsigned char *seen = cx_host(e, K);
    for (size_t i = 0; i < count; i++) {
        int k = -1, end = 0;
        if (sscanf(infos[i].name, "many_k%3d%n", &k, &end) != 1 || infos[i].name[end] != '\0' ||
            k < 0 || k >= K || seen[k]++)
            cx_fail(e, "listed kernel %zu is '%s': not one of many_k000..many_k%03d once",
                    i, infos[i].name, K - 1);
    }

    int n = (int)cx_int(e, 200, 1000);
    int *x = cx_host(e, n * sizeof *x), *got = cx_host(e, (size_t)K * n * sizeof *got);
    cx_fill_i32(e, x, n, -100000, 100000);
    CUdeviceptr dx = cx_upload_new(e, x, n * sizeof *x), dy = cx_alloc(e, (size_t)K * n * sizeof *got);
    for (int k = 0; k < K; k++) {
        char name[32];
        snprintf(name, sizeof name, "many_k%03d", k);
        jitop_op *op = cx_op(e, name);
        CUdeviceptr slice = dy + (size_t)k * n * sizeof *got;
        CX_LAUNCH(e, op, cx_blocks(n, 128), 128, 0, CXA(dx), CXA(slice), CXA(n));
    }
    cx_download(e, got, dy, (size_t)K * n * sizeof *got);
    for (int k = 0; k < K; k++)
        for (int i = 0; i < n; i++)
            cx_eq_i64(e, "many_k", (size_t)k * n + i, got[(size_t)k * n + i],
                      (int64_t)x[i] * compat_many_mul(k) + compat_many_add(k));
}
