/* Run functions of the cases whose kernels come from somewhere else than
 * the loaded source's own text: headers it includes, another relocatable
 * unit (-dc, linked), or a kernel launched from the device. */
#include "compat_env.h"
#include "compat_runs.h"

#include <math.h>

void run_hdr_extern_c(compat_env *e)
{
    jitop_op *op = cx_op(e, "hdr_scale_add");
    int n = (int)cx_int(e, 10000, 100000);
    float s = (float)cx_signed(e, 0.5, 3.0);
    float *x = cx_host(e, n * sizeof *x), *y = cx_host(e, n * sizeof *y);
    float *got = cx_host(e, n * sizeof *got);
    cx_fill_f32(e, x, n, -4.0f, 4.0f);
    cx_fill_f32(e, y, n, -4.0f, 4.0f);
    CUdeviceptr dx = cx_upload_new(e, x, n * sizeof *x), dy = cx_upload_new(e, y, n * sizeof *y);
    CX_LAUNCH(e, op, cx_blocks(n, 256), 256, 0, CXA(dx), CXA(dy), CXA(s), CXA(n));
    cx_download(e, got, dy, n * sizeof *got);
    for (int i = 0; i < n; i++) { /* as saxpy: at most two roundings */
        double xs = (double)x[i] * s;
        cx_near(e, "y", i, got[i], xs + y[i], 2 * CX_EPS_F32 * (fabs(xs) + fabs(y[i])));
    }
}

void run_hdr_template(compat_env *e)
{
    int ntiles = (int)cx_int(e, 5000, 50000);
    {
        jitop_op *op = cx_op(e, "tile_accumulate<float, 4>");
        size_t n = (size_t)ntiles * 4;
        float *x = cx_host(e, n * sizeof *x), *got = cx_host(e, ntiles * sizeof *got);
        cx_fill_f32(e, x, n, -10.0f, 10.0f);
        CUdeviceptr dx = cx_upload_new(e, x, n * sizeof *x), dy = cx_alloc(e, ntiles * sizeof *got);
        CX_LAUNCH(e, op, cx_blocks(ntiles, 128), 128, 0, CXA(dx), CXA(dy), CXA(ntiles));
        cx_download(e, got, dy, ntiles * sizeof *got);
        for (int t = 0; t < ntiles; t++) {
            double want = 0, mag = 0;
            for (int k = 0; k < 4; k++) {
                want += x[(size_t)t * 4 + k];
                mag += fabs(x[(size_t)t * 4 + k]);
            }
            cx_near(e, "tile_accumulate<float, 4>", t, got[t], want, 4 * CX_EPS_F32 * mag);
        }
    }
    {
        jitop_op *op = cx_op(e, "tile_accumulate<int, 8>");
        size_t n = (size_t)ntiles * 8;
        int *x = cx_host(e, n * sizeof *x), *got = cx_host(e, ntiles * sizeof *got);
        cx_fill_i32(e, x, n, -1000000, 1000000);
        CUdeviceptr dx = cx_upload_new(e, x, n * sizeof *x), dy = cx_alloc(e, ntiles * sizeof *got);
        CX_LAUNCH(e, op, cx_blocks(ntiles, 128), 128, 0, CXA(dx), CXA(dy), CXA(ntiles));
        cx_download(e, got, dy, ntiles * sizeof *got);
        for (int t = 0; t < ntiles; t++) {
            int64_t want = 0;
            for (int k = 0; k < 8; k++)
                want += x[(size_t)t * 8 + k];
            cx_eq_i64(e, "tile_accumulate<int, 8>", t, got[t], want);
        }
    }
}

void run_hdr_ns_template(compat_env *e)
{
    jitop_op *op = cx_op(e, "compat::hdr::clamp_copy<double>");
    int n = (int)cx_int(e, 10000, 100000);
    double lo = cx_uniform(e, -50.0, -1.0), hi = cx_uniform(e, 1.0, 50.0);
    double *x = cx_host(e, n * sizeof *x), *got = cx_host(e, n * sizeof *got);
    cx_fill_f64(e, x, n, -100.0, 100.0);
    CUdeviceptr dx = cx_upload_new(e, x, n * sizeof *x), dy = cx_alloc(e, n * sizeof *got);
    CX_LAUNCH(e, op, cx_blocks(n, 256), 256, 0, CXA(dx), CXA(dy), CXA(lo), CXA(hi), CXA(n));
    cx_download(e, got, dy, n * sizeof *got);
    for (int i = 0; i < n; i++)
        cx_near(e, "clamp", i, got[i], x[i] < lo ? lo : (x[i] > hi ? hi : x[i]), 0);
}

void run_rdc_cross_call(compat_env *e)
{
    jitop_op *op = cx_op(e, "rdc_apply");
    int n = (int)cx_int(e, 10000, 100000);
    int *a = cx_host(e, n * sizeof *a), *b = cx_host(e, n * sizeof *b);
    int *got = cx_host(e, n * sizeof *got);
    cx_fill_i32(e, a, n, -1000000, 1000000);
    cx_fill_i32(e, b, n, -1000000, 1000000);
    CUdeviceptr da = cx_upload_new(e, a, n * sizeof *a), db = cx_upload_new(e, b, n * sizeof *b);
    CUdeviceptr dout = cx_alloc(e, n * sizeof *got);
    CX_LAUNCH(e, op, cx_blocks(n, 256), 256, 0, CXA(da), CXA(db), CXA(dout), CXA(n));
    cx_download(e, got, dout, n * sizeof *got);
    for (int i = 0; i < n; i++) /* lib_transform(a, b) + 1, from rdc_lib.cu */
        cx_eq_i64(e, "out", i, got[i], (int64_t)a[i] * 3 - b[i] + 1);
}

void run_rdc_extern_var(compat_env *e)
{
    jitop_op *set = cx_op(e, "rdc_set_bias"), *add = cx_op(e, "rdc_add_bias");
    float bias[4];
    cx_fill_f32(e, bias, 4, -100.0f, 100.0f);
    CUdeviceptr db = cx_upload_new(e, bias, sizeof bias);
    CX_LAUNCH(e, set, 1, 32, 0, CXA(db));
    int n = (int)cx_int(e, 10000, 100000);
    float *x = cx_host(e, n * sizeof *x), *got = cx_host(e, n * sizeof *got);
    cx_fill_f32(e, x, n, -100.0f, 100.0f);
    CUdeviceptr dx = cx_upload_new(e, x, n * sizeof *x), dy = cx_alloc(e, n * sizeof *got);
    CX_LAUNCH(e, add, cx_blocks(n, 256), 256, 0, CXA(dx), CXA(dy), CXA(n));
    cx_download(e, got, dy, n * sizeof *got);
    for (int i = 0; i < n; i++) { /* one float addition, as C rounds it */
        float want = x[i] + bias[i & 3];
        cx_near(e, "x + lib_bias", i, got[i], want, 0);
    }
}

void run_rdc_dynamic_parallelism(compat_env *e)
{
    jitop_op *parent = cx_op(e, "dp_parent");
    cx_op(e, "dp_child"); /* launched from the device, and an op of the module too */
    int n = (int)cx_int(e, 10000, 100000), chunk = (int)cx_int(e, 500, 3000);
    int *data = cx_host(e, n * sizeof *data), *got = cx_host(e, n * sizeof *got);
    cx_fill_i32(e, data, n, -10000, 10000);
    CUdeviceptr dd = cx_upload_new(e, data, n * sizeof *data);
    CX_LAUNCH(e, parent, cx_blocks(n, chunk), 32, 0, CXA(dd), CXA(n), CXA(chunk));
    cx_download(e, got, dd, n * sizeof *got);
    for (int i = 0; i < n; i++) { /* block b's child: x * (2 + b % 3) + index in the chunk */
        int b = i / chunk, j = i % chunk;
        cx_eq_i64(e, "data", i, got[i], (int64_t)data[i] * (2 + b % 3) + j);
    }
}
