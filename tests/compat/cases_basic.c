/* Run functions of the plain extern "C", template and struct-parameter
 * cases. Tolerances: u is the unit roundoff (CX_EPS_F32 = 2^-24,
 * CX_EPS_F64 = 2^-53); a result of one rounding is within u|r| of the
 * exact value, so a kernel of k roundings is held to about k u times the
 * magnitudes involved, and integer results are exact. */
#include "compat_env.h"
#include "compat_runs.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

void run_saxpy(compat_env *e)
{
    jitop_op *op = cx_op(e, "saxpy");
    int n = (int)cx_int(e, 100000, 300000);
    float a = (float)cx_signed(e, 0.5, 3.0);
    float *x = cx_host(e, n * sizeof *x), *y = cx_host(e, n * sizeof *y);
    float *got = cx_host(e, n * sizeof *got);
    cx_fill_f32(e, x, n, -4.0f, 4.0f);
    cx_fill_f32(e, y, n, -4.0f, 4.0f);
    CUdeviceptr dx = cx_upload_new(e, x, n * sizeof *x), dy = cx_upload_new(e, y, n * sizeof *y);
    CX_LAUNCH(e, op, cx_blocks(n, 256), 256, 0, CXA(n), CXA(a), CXA(dx), CXA(dy));
    cx_download(e, got, dy, n * sizeof *got);
    /* a * x + y fused (one rounding) or not (two): within 2u (|a x| + |y|). */
    for (int i = 0; i < n; i++) {
        double ax = (double)a * x[i];
        cx_near(e, "y", i, got[i], ax + y[i], 2 * CX_EPS_F32 * (fabs(ax) + fabs(y[i])));
    }
}

/* Each type: random a and b, c = a + b as C computes it in that type. */
#define VADD_CASE(suffix, T, lo, hi, draw)                                                        \
    do {                                                                                          \
        jitop_op *op = cx_op(e, "vadd_" #suffix);                                                 \
        T *a = cx_host(e, n * sizeof(T)), *b = cx_host(e, n * sizeof(T));                         \
        T *c = cx_host(e, n * sizeof(T));                                                         \
        for (unsigned i = 0; i < n; i++) {                                                        \
            a[i] = (T)draw(lo, hi);                                                               \
            b[i] = (T)draw(lo, hi);                                                               \
        }                                                                                         \
        CUdeviceptr da = cx_upload_new(e, a, n * sizeof(T));                                      \
        CUdeviceptr db = cx_upload_new(e, b, n * sizeof(T));                                      \
        CUdeviceptr dc = cx_alloc(e, n * sizeof(T));                                              \
        CX_LAUNCH(e, op, cx_blocks(n, 128), 128, 0, CXA(da), CXA(db), CXA(dc), CXA(n));           \
        cx_download(e, c, dc, n * sizeof(T));                                                     \
        for (unsigned i = 0; i < n; i++) {                                                        \
            T want = (T)(a[i] + b[i]);                                                            \
            if (memcmp(&c[i], &want, sizeof want) != 0)                                           \
                cx_fail(e, "vadd_" #suffix "[%u]: got %.17g, want %.17g", i, (double)c[i],        \
                        (double)want);                                                            \
        }                                                                                         \
    } while (0)

void run_vadd_types(compat_env *e)
{
    unsigned n = (unsigned)cx_int(e, 5000, 60000);
#define DRAW_REAL(lo, hi) cx_signed(e, lo, hi)
#define DRAW_INT(lo, hi) cx_int(e, lo, hi)
    /* Every sum is exact in its type or wraps as C defines (unsigned), so
     * results compare bit for bit. */
    VADD_CASE(f32, float, 0.001, 100.0, DRAW_REAL);
    VADD_CASE(f64, double, 0.001, 100.0, DRAW_REAL);
    VADD_CASE(i32, int, -1000000000, 1000000000, DRAW_INT);
    VADD_CASE(i64, long long, -4000000000000000000LL, 4000000000000000000LL, DRAW_INT);
    VADD_CASE(u16, unsigned short, 1, 65535, DRAW_INT);
    VADD_CASE(u8, unsigned char, 1, 255, DRAW_INT);
#undef DRAW_REAL
#undef DRAW_INT
}

void run_grid_stride(compat_env *e)
{
    jitop_op *op = cx_op(e, "scale_shift_strided");
    size_t n = (size_t)cx_int(e, 1000000, 2000000);
    float scale = (float)cx_signed(e, 0.25, 4.0), shift = (float)cx_signed(e, 0.5, 8.0);
    float *x = cx_host(e, n * sizeof *x), *got = cx_host(e, n * sizeof *got);
    cx_fill_f32(e, x, n, -10.0f, 10.0f);
    CUdeviceptr dx = cx_upload_new(e, x, n * sizeof *x), dy = cx_alloc(e, n * sizeof *got);
    /* 37 blocks of 128: each thread walks about n / 4736 elements. */
    CX_LAUNCH(e, op, 37, 128, 0, CXA(dx), CXA(dy), CXA(scale), CXA(shift), CXA(n));
    cx_download(e, got, dy, n * sizeof *got);
    for (size_t i = 0; i < n; i++) {
        double xs = (double)x[i] * scale;
        cx_near(e, "y", i, got[i], xs + shift, 2 * CX_EPS_F32 * (fabs(xs) + fabs(shift)));
    }
}

void run_transpose_naive(compat_env *e)
{
    jitop_op *op = cx_op(e, "transpose_naive");
    int rows = (int)cx_int(e, 100, 700), cols = (int)cx_int(e, 100, 700);
    size_t n = (size_t)rows * cols;
    double *in = cx_host(e, n * sizeof *in), *got = cx_host(e, n * sizeof *got);
    cx_fill_f64(e, in, n, -1e6, 1e6);
    CUdeviceptr din = cx_upload_new(e, in, n * sizeof *in), dout = cx_alloc(e, n * sizeof *got);
    CX_LAUNCH_DIMS(e, op, cx_dim(cx_blocks(cols, 16), cx_blocks(rows, 16), 1), cx_dim(16, 16, 1), 0,
                   CXA(din), CXA(dout), CXA(rows), CXA(cols));
    cx_download(e, got, dout, n * sizeof *got);
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++)
            cx_near(e, "out", (size_t)c * rows + r, got[(size_t)c * rows + r], in[(size_t)r * cols + c], 0);
}

void run_defines(compat_env *e)
{
    jitop_op *op = cx_op(e, "scaled_copy");
    jitop_op_info info;
    CX_OK(e, jitop_op_info_get(op, &info));
    /* __launch_bounds__(COMPAT_BLOCK) with -DCOMPAT_BLOCK=128. */
    CX_EXPECT(e, info.max_threads_per_block == 128, "max threads per block %d, expected 128",
              info.max_threads_per_block);
    int n = (int)cx_int(e, 10000, 100000);
    int *x = cx_host(e, n * sizeof *x), *got = cx_host(e, n * sizeof *got);
    cx_fill_i32(e, x, n, -1000000, 1000000);
    CUdeviceptr dx = cx_upload_new(e, x, n * sizeof *x), dy = cx_alloc(e, n * sizeof *got);
    CX_LAUNCH(e, op, cx_blocks(n, 128), 128, 0, CXA(dx), CXA(dy), CXA(n));
    cx_download(e, got, dy, n * sizeof *got);
    for (int i = 0; i < n; i++) /* COMPAT_SCALE=3, COMPAT_OFFSET=-7 */
        cx_eq_i64(e, "y", i, got[i], (int64_t)x[i] * 3 - 7);
}

void run_two_sources(compat_env *e)
{
    jitop_op *a = cx_op(e, "unit_a_map"), *b = cx_op(e, "unit_b_map");
    int n = (int)cx_int(e, 10000, 50000);
    int *x = cx_host(e, n * sizeof *x), *ya = cx_host(e, n * sizeof *ya);
    int *yb = cx_host(e, n * sizeof *yb);
    cx_fill_i32(e, x, n, -1000, 1000);
    CUdeviceptr dx = cx_upload_new(e, x, n * sizeof *x);
    CUdeviceptr dya = cx_alloc(e, n * sizeof *ya), dyb = cx_alloc(e, n * sizeof *yb);
    CX_LAUNCH(e, a, cx_blocks(n, 256), 256, 0, CXA(dx), CXA(dya), CXA(n));
    CX_LAUNCH(e, b, cx_blocks(n, 256), 256, 0, CXA(dx), CXA(dyb), CXA(n));
    cx_download(e, ya, dya, n * sizeof *ya);
    cx_download(e, yb, dyb, n * sizeof *yb);
    /* Each unit's own helper: 3x + 1 and x^2 - 5. */
    for (int i = 0; i < n; i++) {
        cx_eq_i64(e, "unit_a_map", i, ya[i], 3 * (int64_t)x[i] + 1);
        cx_eq_i64(e, "unit_b_map", i, yb[i], (int64_t)x[i] * x[i] - 5);
    }
}

void run_tmpl_axpy(compat_env *e)
{
    int n = (int)cx_int(e, 10000, 100000);
    {
        jitop_op *op = cx_op(e, "axpy<float>");
        float a = (float)cx_signed(e, 0.5, 2.0);
        float *x = cx_host(e, n * sizeof *x), *y = cx_host(e, n * sizeof *y);
        cx_fill_f32(e, x, n, -3.0f, 3.0f);
        cx_fill_f32(e, y, n, -3.0f, 3.0f);
        CUdeviceptr dx = cx_upload_new(e, x, n * sizeof *x), dy = cx_upload_new(e, y, n * sizeof *y);
        CX_LAUNCH(e, op, cx_blocks(n, 256), 256, 0, CXA(a), CXA(dx), CXA(dy), CXA(n));
        float *got = cx_host(e, n * sizeof *got);
        cx_download(e, got, dy, n * sizeof *got);
        for (int i = 0; i < n; i++) { /* as saxpy: at most two roundings */
            double ax = (double)a * x[i];
            cx_near(e, "axpy<float>", i, got[i], ax + y[i], 2 * CX_EPS_F32 * (fabs(ax) + fabs(y[i])));
        }
    }
    {
        jitop_op *op = cx_op(e, "axpy<double>");
        double a = cx_signed(e, 0.5, 2.0);
        double *x = cx_host(e, n * sizeof *x), *y = cx_host(e, n * sizeof *y);
        cx_fill_f64(e, x, n, -3.0, 3.0);
        cx_fill_f64(e, y, n, -3.0, 3.0);
        CUdeviceptr dx = cx_upload_new(e, x, n * sizeof *x), dy = cx_upload_new(e, y, n * sizeof *y);
        CX_LAUNCH(e, op, cx_blocks(n, 256), 256, 0, CXA(a), CXA(dx), CXA(dy), CXA(n));
        double *got = cx_host(e, n * sizeof *got);
        cx_download(e, got, dy, n * sizeof *got);
        for (int i = 0; i < n; i++) /* the reference itself rounds twice: 4u */
            cx_near(e, "axpy<double>", i, got[i], a * x[i] + y[i],
                    4 * CX_EPS_F64 * (fabs(a * x[i]) + fabs(y[i])));
    }
    {
        jitop_op *op = cx_op(e, "axpy<int>");
        int a = (int)cx_int(e, 2, 50);
        int *x = cx_host(e, n * sizeof *x), *y = cx_host(e, n * sizeof *y);
        cx_fill_i32(e, x, n, -100000, 100000);
        cx_fill_i32(e, y, n, -100000, 100000);
        CUdeviceptr dx = cx_upload_new(e, x, n * sizeof *x), dy = cx_upload_new(e, y, n * sizeof *y);
        CX_LAUNCH(e, op, cx_blocks(n, 256), 256, 0, CXA(a), CXA(dx), CXA(dy), CXA(n));
        int *got = cx_host(e, n * sizeof *got);
        cx_download(e, got, dy, n * sizeof *got);
        for (int i = 0; i < n; i++)
            cx_eq_i64(e, "axpy<int>", i, got[i], (int64_t)a * x[i] + y[i]);
    }
}

void run_tmpl_nontype(compat_env *e)
{
    int nvec = (int)cx_int(e, 5000, 40000);
    {
        jitop_op *op = cx_op(e, "scale_vec<float, 4>");
        size_t n = (size_t)nvec * 4;
        float s = (float)cx_signed(e, 0.5, 2.0);
        float *x = cx_host(e, n * sizeof *x), *got = cx_host(e, n * sizeof *got);
        cx_fill_f32(e, x, n, -8.0f, 8.0f);
        CUdeviceptr dx = cx_upload_new(e, x, n * sizeof *x), dy = cx_alloc(e, n * sizeof *got);
        CX_LAUNCH(e, op, cx_blocks(nvec, 128), 128, 0, CXA(dx), CXA(dy), CXA(s), CXA(nvec));
        cx_download(e, got, dy, n * sizeof *got);
        for (size_t i = 0; i < n; i++) { /* x s + k: two roundings at most */
            double xs = (double)x[i] * s, k = (double)(i % 4);
            cx_near(e, "scale_vec<float, 4>", i, got[i], xs + k, 2 * CX_EPS_F32 * (fabs(xs) + k));
        }
    }
    {
        jitop_op *op = cx_op(e, "scale_vec<double, 2>");
        size_t n = (size_t)nvec * 2;
        double s = cx_signed(e, 0.5, 2.0);
        double *x = cx_host(e, n * sizeof *x), *got = cx_host(e, n * sizeof *got);
        cx_fill_f64(e, x, n, -8.0, 8.0);
        CUdeviceptr dx = cx_upload_new(e, x, n * sizeof *x), dy = cx_alloc(e, n * sizeof *got);
        CX_LAUNCH(e, op, cx_blocks(nvec, 128), 128, 0, CXA(dx), CXA(dy), CXA(s), CXA(nvec));
        cx_download(e, got, dy, n * sizeof *got);
        for (size_t i = 0; i < n; i++) {
            double xs = x[i] * s, k = (double)(i % 2);
            cx_near(e, "scale_vec<double, 2>", i, got[i], xs + k, 4 * CX_EPS_F64 * (fabs(xs) + k));
        }
    }
    int n = nvec;
    unsigned *x = cx_host(e, n * sizeof *x), *got = cx_host(e, n * sizeof *got);
    for (int i = 0; i < n; i++)
        do
            x[i] = cx_u32(e);
        while (x[i] == 0);
    CUdeviceptr dx = cx_upload_new(e, x, n * sizeof *x), dy = cx_alloc(e, n * sizeof *got);
    jitop_op *right = cx_op(e, "bits_op<-3, true, 0xFFFFu>");
    CX_LAUNCH(e, right, cx_blocks(n, 256), 256, 0, CXA(dx), CXA(dy), CXA(n));
    cx_download(e, got, dy, n * sizeof *got);
    for (int i = 0; i < n; i++)
        cx_eq_u64(e, "bits_op<-3, true, 0xFFFFu>", i, got[i], 0u - ((x[i] >> 3) & 0xFFFFu));
    jitop_op *left = cx_op(e, "bits_op<5, false, 0xFFFFFF00u>");
    CX_LAUNCH(e, left, cx_blocks(n, 256), 256, 0, CXA(dx), CXA(dy), CXA(n));
    cx_download(e, got, dy, n * sizeof *got);
    for (int i = 0; i < n; i++)
        cx_eq_u64(e, "bits_op<5, false, 0xFFFFFF00u>", i, got[i], (x[i] << 5) & 0xFFFFFF00u);
}

void run_tmpl_namespace(compat_env *e)
{
    int n = (int)cx_int(e, 10000, 100000);
    /* a + t (b - a): three roundings, each within u of a value no larger
     * than |a| + |t| (|a| + |b|); 4u of that covers them. */
    {
        jitop_op *op = cx_op(e, "compat::detail::blend<float>");
        float t = (float)cx_uniform(e, 0.05, 0.95);
        float *a = cx_host(e, n * sizeof *a), *b = cx_host(e, n * sizeof *b);
        float *got = cx_host(e, n * sizeof *got);
        cx_fill_f32(e, a, n, -5.0f, 5.0f);
        cx_fill_f32(e, b, n, -5.0f, 5.0f);
        CUdeviceptr da = cx_upload_new(e, a, n * sizeof *a), db = cx_upload_new(e, b, n * sizeof *b);
        CUdeviceptr dout = cx_alloc(e, n * sizeof *got);
        CX_LAUNCH(e, op, cx_blocks(n, 256), 256, 0, CXA(da), CXA(db), CXA(t), CXA(dout), CXA(n));
        cx_download(e, got, dout, n * sizeof *got);
        for (int i = 0; i < n; i++) {
            double want = a[i] + (double)t * ((double)b[i] - a[i]);
            double mag = fabs(a[i]) + t * (fabs(a[i]) + fabs(b[i]));
            cx_near(e, "blend<float>", i, got[i], want, 4 * CX_EPS_F32 * mag);
        }
    }
    {
        jitop_op *op = cx_op(e, "compat::detail::blend<double>");
        double t = cx_uniform(e, 0.05, 0.95);
        double *a = cx_host(e, n * sizeof *a), *b = cx_host(e, n * sizeof *b);
        double *got = cx_host(e, n * sizeof *got);
        cx_fill_f64(e, a, n, -5.0, 5.0);
        cx_fill_f64(e, b, n, -5.0, 5.0);
        CUdeviceptr da = cx_upload_new(e, a, n * sizeof *a), db = cx_upload_new(e, b, n * sizeof *b);
        CUdeviceptr dout = cx_alloc(e, n * sizeof *got);
        CX_LAUNCH(e, op, cx_blocks(n, 256), 256, 0, CXA(da), CXA(db), CXA(t), CXA(dout), CXA(n));
        cx_download(e, got, dout, n * sizeof *got);
        for (int i = 0; i < n; i++) { /* the double reference rounds too: 8u */
            double want = a[i] + t * (b[i] - a[i]);
            double mag = fabs(a[i]) + t * (fabs(a[i]) + fabs(b[i]));
            cx_near(e, "blend<double>", i, got[i], want, 8 * CX_EPS_F64 * mag);
        }
    }
}

void run_tmpl_nested(compat_env *e)
{
    int n = (int)cx_int(e, 10000, 100000);
    int *a = cx_host(e, n * sizeof *a), *b = cx_host(e, n * sizeof *b);
    int *got = cx_host(e, n * sizeof *got);
    cx_fill_i32(e, a, n, -3000, 3000);
    cx_fill_i32(e, b, n, -3000, 3000);
    CUdeviceptr da = cx_upload_new(e, a, n * sizeof *a), db = cx_upload_new(e, b, n * sizeof *b);
    CUdeviceptr dout = cx_alloc(e, n * sizeof *got);
    jitop_op *mul = cx_op(e, "zip_with<ops::Mul<int>, int>");
    CX_LAUNCH(e, mul, cx_blocks(n, 256), 256, 0, CXA(da), CXA(db), CXA(dout), CXA(n));
    cx_download(e, got, dout, n * sizeof *got);
    for (int i = 0; i < n; i++)
        cx_eq_i64(e, "Mul", i, got[i], (int64_t)a[i] * b[i]);
    jitop_op *fma = cx_op(e, "zip_with<ops::Compose<ops::Add<int>, ops::Mul<int>>, int>");
    CX_LAUNCH(e, fma, cx_blocks(n, 256), 256, 0, CXA(da), CXA(db), CXA(dout), CXA(n));
    cx_download(e, got, dout, n * sizeof *got);
    for (int i = 0; i < n; i++) /* Add(Mul(a, b), b) */
        cx_eq_i64(e, "Compose<Add, Mul>", i, got[i], (int64_t)a[i] * b[i] + b[i]);
}

void run_tmpl_default(compat_env *e)
{
    jitop_op_info info;
    {
        jitop_op *op = cx_op(e, "block_sum<int>");
        CX_OK(e, jitop_op_info_get(op, &info));
        CX_EXPECT(e, info.max_threads_per_block == 256,
                  "block_sum<int>: max threads per block %d, expected 256 (the default BLOCK)",
                  info.max_threads_per_block);
        int n = (int)cx_int(e, 50000, 200000);
        unsigned blocks = cx_blocks(n, 256);
        int *x = cx_host(e, n * sizeof *x), *got = cx_host(e, blocks * sizeof *got);
        cx_fill_i32(e, x, n, -100000, 100000);
        CUdeviceptr dx = cx_upload_new(e, x, n * sizeof *x), ds = cx_alloc(e, blocks * sizeof *got);
        CX_LAUNCH(e, op, blocks, 256, 0, CXA(dx), CXA(ds), CXA(n));
        cx_download(e, got, ds, blocks * sizeof *got);
        for (unsigned b = 0; b < blocks; b++) {
            int64_t want = 0;
            for (int i = (int)b * 256; i < n && i < (int)(b + 1) * 256; i++)
                want += x[i];
            cx_eq_i64(e, "block_sum<int>", b, got[b], want);
        }
    }
    {
        jitop_op *op = cx_op(e, "block_sum<double, 128>");
        CX_OK(e, jitop_op_info_get(op, &info));
        CX_EXPECT(e, info.max_threads_per_block == 128,
                  "block_sum<double, 128>: max threads per block %d, expected 128",
                  info.max_threads_per_block);
        int n = (int)cx_int(e, 50000, 200000);
        unsigned blocks = cx_blocks(n, 128);
        double *x = cx_host(e, n * sizeof *x), *got = cx_host(e, blocks * sizeof *got);
        cx_fill_f64(e, x, n, -100.0, 100.0);
        CUdeviceptr dx = cx_upload_new(e, x, n * sizeof *x), ds = cx_alloc(e, blocks * sizeof *got);
        CX_LAUNCH(e, op, blocks, 128, 0, CXA(dx), CXA(ds), CXA(n));
        cx_download(e, got, ds, blocks * sizeof *got);
        for (unsigned b = 0; b < blocks; b++) {
            double want = 0, mag = 0;
            for (int i = (int)b * 128; i < n && i < (int)(b + 1) * 128; i++) {
                want += x[i];
                mag += fabs(x[i]);
            }
            /* A 7-level tree, and the reference's own sequential sum:
             * within (7 + 128) u of the sum of magnitudes. */
            cx_near(e, "block_sum<double, 128>", b, got[b], want, 136 * CX_EPS_F64 * mag);
        }
    }
}

void run_tmpl_spelling(compat_env *e)
{
    static const char *const spellings[] = {"fill_affine<float,4>", "fill_affine<float, 4>",
                                            "fill_affine< float , 4 >"};
    jitop_op *ops[3];
    char lowered[3][256];
    for (int s = 0; s < 3; s++) {
        jitop_op_info info;
        ops[s] = cx_op(e, spellings[s]);
        CX_OK(e, jitop_op_info_get(ops[s], &info));
        snprintf(lowered[s], sizeof lowered[s], "%s", info.lowered);
    }
    for (int s = 1; s < 3; s++) {
        CX_EXPECT(e, strcmp(lowered[s], lowered[0]) == 0, "'%s' is %s but '%s' is %s",
                  spellings[s], lowered[s], spellings[0], lowered[0]);
        CX_EXPECT(e, ops[s] == ops[0], "'%s' and '%s' are two ops, not one instance",
                  spellings[s], spellings[0]);
    }
    int n = (int)cx_int(e, 1000, 4000);
    float *got = cx_host(e, n * sizeof *got);
    CUdeviceptr dout = cx_alloc(e, n * sizeof *got);
    for (int s = 0; s < 3; s++) {
        float base = (float)cx_signed(e, 1.0, 2.0);
        CX_LAUNCH(e, ops[s], cx_blocks(n, 128), 128, 0, CXA(dout), CXA(base), CXA(n));
        cx_download(e, got, dout, n * sizeof *got);
        for (int i = 0; i < n; i++) { /* one float addition, as C rounds it */
            float want = base + (float)(4 * i);
            cx_near(e, spellings[s], i, got[i], want, 0);
        }
    }
}

/* Host mirrors of the kernels' structures (params_struct.cu). */
struct affine_h {
    float scale;
    int32_t shift;
    double bias;
    char apply;
};
_Static_assert(sizeof(struct affine_h) == 24, "Affine is 24 bytes on the device");

struct view_h {
    _Alignas(16) float w[4];
    CUdeviceptr data;
    int32_t count;
};
_Static_assert(sizeof(struct view_h) == 32, "View is 32 bytes on the device");

void run_struct_mixed(compat_env *e)
{
    jitop_op *op = cx_op(e, "affine_apply");
    cx_expect_params(e, op, 4, (const size_t[]){sizeof(struct affine_h), 8, 8, 4});
    int n = (int)cx_int(e, 10000, 100000);
    float *x = cx_host(e, n * sizeof *x);
    double *got = cx_host(e, n * sizeof *got);
    cx_fill_f32(e, x, n, -100.0f, 100.0f);
    CUdeviceptr dx = cx_upload_new(e, x, n * sizeof *x), dy = cx_alloc(e, n * sizeof *got);
    for (int apply = 1; apply >= 0; apply--) {
        struct affine_h p;
        memset(&p, 0, sizeof p);
        p.scale = (float)cx_signed(e, 0.5, 4.0);
        p.shift = (int32_t)cx_int(e, -1000, 1000);
        p.bias = cx_signed(e, 0.001, 10.0);
        p.apply = (char)apply;
        CX_LAUNCH(e, op, cx_blocks(n, 256), 256, 0, CXA(p), CXA(dx), CXA(dy), CXA(n));
        cx_download(e, got, dy, n * sizeof *got);
        /* x * scale is exact in double; the additions round as C's do, in
         * the same order (a fused first step rounds the same exact value). */
        for (int i = 0; i < n; i++) {
            double want = apply ? (double)x[i] * p.scale + p.shift + p.bias : p.bias - x[i];
            cx_near(e, apply ? "y (apply)" : "y (bias - x)", i, got[i], want, 0);
        }
    }
}

void run_struct_aligned(compat_env *e)
{
    jitop_op *op = cx_op(e, "view_dot");
    cx_expect_params(e, op, 2, (const size_t[]){sizeof(struct view_h), 8});
    int n = (int)cx_int(e, 10000, 100000);
    float *d = cx_host(e, (size_t)n * 4 * sizeof *d), *got = cx_host(e, n * sizeof *got);
    cx_fill_f32(e, d, (size_t)n * 4, -2.0f, 2.0f);
    struct view_h v;
    memset(&v, 0, sizeof v);
    for (int k = 0; k < 4; k++)
        v.w[k] = (float)cx_signed(e, 0.1, 2.0);
    v.data = cx_upload_new(e, d, (size_t)n * 4 * sizeof *d);
    v.count = n;
    CUdeviceptr dout = cx_alloc(e, n * sizeof *got);
    CX_LAUNCH(e, op, cx_blocks(n, 256), 256, 0, CXA(v), CXA(dout));
    cx_download(e, got, dout, n * sizeof *got);
    /* Four products and three sums, some fused: within 5u of the sum of
     * the products' magnitudes. */
    for (int i = 0; i < n; i++) {
        double want = 0, mag = 0;
        for (int k = 0; k < 4; k++) {
            want += (double)d[(size_t)i * 4 + k] * v.w[k];
            mag += fabs((double)d[(size_t)i * 4 + k] * v.w[k]);
        }
        cx_near(e, "out", i, got[i], want, 5 * CX_EPS_F32 * mag);
    }
}

void run_struct_big(compat_env *e)
{
    jitop_op *op = cx_op(e, "big_param_mix");
    enum { W = 2048 };
    cx_expect_params(e, op, 4, (const size_t[]){W * sizeof(float), 8, 8, 4});
    struct {
        float v[W];
    } w;
    cx_fill_f32(e, w.v, W, -2.0f, 2.0f);
    int n = (int)cx_int(e, 20000, 100000);
    float *x = cx_host(e, n * sizeof *x), *got = cx_host(e, n * sizeof *got);
    cx_fill_f32(e, x, n, -2.0f, 2.0f);
    CUdeviceptr dx = cx_upload_new(e, x, n * sizeof *x), dout = cx_alloc(e, n * sizeof *got);
    CX_LAUNCH(e, op, cx_blocks(n, 256), 256, 0, CXA(w), CXA(dx), CXA(dout), CXA(n));
    cx_download(e, got, dout, n * sizeof *got);
    for (int i = 0; i < n; i++) { /* one multiply-add: as saxpy */
        double p = (double)w.v[i % W] * x[i], q = w.v[(i * 7 + 3) % W];
        cx_near(e, "out", i, got[i], p + q, 2 * CX_EPS_F32 * (fabs(p) + fabs(q)));
    }
}
