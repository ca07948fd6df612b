/* Run functions of the half, bfloat16 and libcu++ cases. The half and
 * bfloat16 operations round once, to nearest even; their inputs are chosen
 * so that the exact result is a double (products of halves have 22
 * significant bits, sums and fused sums of values within a few binades stay
 * under 53), so the reference rounds that double once and results compare
 * bit for bit. */
#include "compat_env.h"
#include "compat_runs.h"

#include <math.h>
#include <string.h>

/* A half of magnitude in [1/16, 2) with a random sign. */
static uint16_t random_half(compat_env *e)
{
    return cx_half_from_double(cx_signed(e, 0.0625, 2.0));
}

void run_half_convert(compat_env *e)
{
    jitop_op *op = cx_op(e, "half_round_trip");
    int n = (int)cx_int(e, 50000, 200000);
    float *x = cx_host(e, n * sizeof *x), *back = cx_host(e, n * sizeof *back);
    uint16_t *bits = cx_host(e, n * sizeof *bits);
    /* Magnitudes from 2^-27 (below the smallest subnormal half, 2^-24) to
     * 2^18 (over the largest half, 65504): underflow, subnormals, normals
     * and overflow to infinity all occur. */
    for (int i = 0; i < n; i++)
        x[i] = (float)ldexp(cx_signed(e, 1.0, 2.0), (int)cx_int(e, -27, 17));
    CUdeviceptr dx = cx_upload_new(e, x, n * sizeof *x);
    CUdeviceptr dbits = cx_alloc(e, n * sizeof *bits), dback = cx_alloc(e, n * sizeof *back);
    CX_LAUNCH(e, op, cx_blocks(n, 256), 256, 0, CXA(dx), CXA(dbits), CXA(dback), CXA(n));
    cx_download(e, bits, dbits, n * sizeof *bits);
    cx_download(e, back, dback, n * sizeof *back);
    for (int i = 0; i < n; i++) {
        uint16_t want = cx_half_from_double(x[i]);
        cx_eq_u64(e, "__float2half_rn bits", i, bits[i], want);
        cx_eq_u64(e, "__half2float bits", i, cx_f32_bits(back[i]),
                  cx_f32_bits((float)cx_half_to_double(want)));
    }
}

void run_half2_arith(compat_env *e)
{
    jitop_op *op = cx_op(e, "half2_add_mul");
    int n2 = (int)cx_int(e, 20000, 100000);
    size_t n = (size_t)n2 * 2; /* a __half2 is two halves: .x first */
    uint16_t *a = cx_host(e, n * 2), *b = cx_host(e, n * 2);
    uint16_t *sum = cx_host(e, n * 2), *prod = cx_host(e, n * 2);
    for (size_t i = 0; i < n; i++) {
        a[i] = random_half(e);
        b[i] = random_half(e);
    }
    CUdeviceptr da = cx_upload_new(e, a, n * 2), db = cx_upload_new(e, b, n * 2);
    CUdeviceptr dsum = cx_alloc(e, n * 2), dprod = cx_alloc(e, n * 2);
    CX_LAUNCH(e, op, cx_blocks(n2, 256), 256, 0, CXA(da), CXA(db), CXA(dsum), CXA(dprod), CXA(n2));
    cx_download(e, sum, dsum, n * 2);
    cx_download(e, prod, dprod, n * 2);
    for (size_t i = 0; i < n; i++) {
        double x = cx_half_to_double(a[i]), y = cx_half_to_double(b[i]);
        cx_eq_u64(e, "__hadd2", i, sum[i], cx_half_from_double(x + y));
        cx_eq_u64(e, "__hmul2", i, prod[i], cx_half_from_double(x * y));
    }
}

void run_half_fma(compat_env *e)
{
    jitop_op *op = cx_op(e, "half_fma");
    int n = (int)cx_int(e, 50000, 200000);
    uint16_t *a = cx_host(e, n * 2), *b = cx_host(e, n * 2), *c = cx_host(e, n * 2);
    uint16_t *got = cx_host(e, n * 2);
    for (int i = 0; i < n; i++) {
        a[i] = random_half(e);
        b[i] = random_half(e);
        c[i] = random_half(e);
    }
    CUdeviceptr da = cx_upload_new(e, a, n * 2), db = cx_upload_new(e, b, n * 2);
    CUdeviceptr dc = cx_upload_new(e, c, n * 2), dout = cx_alloc(e, n * 2);
    CX_LAUNCH(e, op, cx_blocks(n, 256), 256, 0, CXA(da), CXA(db), CXA(dc), CXA(dout), CXA(n));
    cx_download(e, got, dout, n * 2);
    /* a b + c spans at most 2^3 .. 2^-29: exact in a double, rounded once. */
    for (int i = 0; i < n; i++) {
        double want = cx_half_to_double(a[i]) * cx_half_to_double(b[i]) + cx_half_to_double(c[i]);
        cx_eq_u64(e, "__hfma", i, got[i], cx_half_from_double(want));
    }
}

void run_bf16_convert(compat_env *e)
{
    jitop_op *op = cx_op(e, "bf16_round_trip");
    int n = (int)cx_int(e, 50000, 200000);
    float *x = cx_host(e, n * sizeof *x);
    uint16_t *bits = cx_host(e, n * sizeof *bits);
    /* Normal floats across the whole exponent range. */
    for (int i = 0; i < n; i++)
        x[i] = (float)ldexp(cx_signed(e, 1.0, 2.0), (int)cx_int(e, -120, 126));
    CUdeviceptr dx = cx_upload_new(e, x, n * sizeof *x), dbits = cx_alloc(e, n * sizeof *bits);
    CX_LAUNCH(e, op, cx_blocks(n, 256), 256, 0, CXA(dx), CXA(dbits), CXA(n));
    cx_download(e, bits, dbits, n * sizeof *bits);
    for (int i = 0; i < n; i++)
        cx_eq_u64(e, "__float2bfloat16_rn bits", i, bits[i], cx_bf16_from_float(x[i]));
}

void run_bf16_dot(compat_env *e)
{
    jitop_op *op = cx_op(e, "bf16_dot_rows");
    int rows = (int)cx_int(e, 64, 300), cols = (int)cx_int(e, 100, 2000);
    uint16_t *a = cx_host(e, (size_t)rows * cols * 2), *b = cx_host(e, (size_t)cols * 2);
    float *got = cx_host(e, rows * sizeof *got);
    for (size_t i = 0; i < (size_t)rows * cols; i++)
        a[i] = cx_bf16_from_float((float)cx_signed(e, 0.1, 2.0));
    for (int c = 0; c < cols; c++)
        b[c] = cx_bf16_from_float((float)cx_signed(e, 0.1, 2.0));
    CUdeviceptr da = cx_upload_new(e, a, (size_t)rows * cols * 2), db = cx_upload_new(e, b, cols * 2);
    CUdeviceptr dout = cx_alloc(e, rows * sizeof *got);
    /* 256 threads: 8 warps, one row each. */
    CX_LAUNCH(e, op, cx_blocks(rows, 8), 256, 0, CXA(da), CXA(db), CXA(dout), CXA(rows), CXA(cols));
    cx_download(e, got, dout, rows * sizeof *got);
    /* bf16 products are exact in float (16 significant bits); each lane
     * adds ceil(cols / 32) of them in float and five shuffle steps add the
     * lanes: within (cols / 32 + 6) u of the sum of magnitudes. */
    for (int r = 0; r < rows; r++) {
        double want = 0, mag = 0;
        for (int c = 0; c < cols; c++) {
            double p = (double)cx_bf16_to_float(a[(size_t)r * cols + c]) * cx_bf16_to_float(b[c]);
            want += p;
            mag += fabs(p);
        }
        cx_near(e, "out", r, got[r], want, (cols / 32.0 + 6) * CX_EPS_F32 * mag);
    }
}

void run_libcu_limits(compat_env *e)
{
    int n = (int)cx_int(e, 20000, 100000);
    float *x = cx_host(e, n * sizeof *x);
    CUdeviceptr dx = cx_alloc(e, n * sizeof *x);
    {
        jitop_op *op = cx_op(e, "saturate_from_float<signed char>");
        signed char *got = cx_host(e, n);
        cx_fill_f32(e, x, n, -400.0f, 400.0f);
        cx_upload(e, dx, x, n * sizeof *x);
        CUdeviceptr dy = cx_alloc(e, n);
        CX_LAUNCH(e, op, cx_blocks(n, 256), 256, 0, CXA(dx), CXA(dy), CXA(n));
        cx_download(e, got, dy, n);
        for (int i = 0; i < n; i++) /* rintf: to nearest even, as nearbyint */
            cx_eq_i64(e, "saturate<signed char>", i, got[i],
                      (int64_t)fmin(fmax(nearbyint(x[i]), -128.0), 127.0));
    }
    {
        jitop_op *op = cx_op(e, "saturate_from_float<unsigned short>");
        uint16_t *got = cx_host(e, n * sizeof *got);
        cx_fill_f32(e, x, n, -80000.0f, 80000.0f);
        cx_upload(e, dx, x, n * sizeof *x);
        CUdeviceptr dy = cx_alloc(e, n * sizeof *got);
        CX_LAUNCH(e, op, cx_blocks(n, 256), 256, 0, CXA(dx), CXA(dy), CXA(n));
        cx_download(e, got, dy, n * sizeof *got);
        for (int i = 0; i < n; i++)
            cx_eq_i64(e, "saturate<unsigned short>", i, got[i],
                      (int64_t)fmin(fmax(nearbyint(x[i]), 0.0), 65535.0));
    }
}

void run_libcu_complex(compat_env *e)
{
    jitop_op *op = cx_op(e, "complex_mul_conj");
    int n = (int)cx_int(e, 20000, 100000);
    float *a = cx_host(e, (size_t)n * 8), *b = cx_host(e, (size_t)n * 8);
    float *got = cx_host(e, (size_t)n * 8);
    cx_fill_f32(e, a, (size_t)n * 2, -3.0f, 3.0f);
    cx_fill_f32(e, b, (size_t)n * 2, -3.0f, 3.0f);
    CUdeviceptr da = cx_upload_new(e, a, (size_t)n * 8), db = cx_upload_new(e, b, (size_t)n * 8);
    CUdeviceptr dc = cx_alloc(e, (size_t)n * 8);
    CX_LAUNCH(e, op, cx_blocks(n, 256), 256, 0, CXA(da), CXA(db), CXA(dc), CXA(n));
    cx_download(e, got, dc, (size_t)n * 8);
    /* (ar + i ai)(br - i bi): each part is two products and a sum, at most
     * three roundings: within 3u of the products' magnitudes. */
    for (int i = 0; i < n; i++) {
        double ar = a[2 * i], ai = a[2 * i + 1], br = b[2 * i], bi = b[2 * i + 1];
        cx_near(e, "real", i, got[2 * i], ar * br + ai * bi,
                3 * CX_EPS_F32 * (fabs(ar * br) + fabs(ai * bi)));
        cx_near(e, "imag", i, got[2 * i + 1], ai * br - ar * bi,
                3 * CX_EPS_F32 * (fabs(ai * br) + fabs(ar * bi)));
    }
}
