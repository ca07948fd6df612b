/* Run functions of the cuRAND cases: every draw compared bit for bit with
 * a CPU Philox4x32-10 (compat_ref.c) started the way curand_init starts the
 * device's (seed, subsequence = thread index, offset). */
#include "compat_env.h"
#include "compat_runs.h"

void run_curand_bits(compat_env *e)
{
    jitop_op *op = cx_op(e, "philox_bits");
    /* Six draws cross the generator's four-word blocks; an offset that is
     * not a multiple of four starts inside one. */
    int nthreads = (int)cx_int(e, 1000, 5000), per_thread = 6;
    unsigned long long seed = cx_u64(e), offset = (unsigned long long)cx_int(e, 1, 1000);
    size_t n = (size_t)nthreads * per_thread;
    uint32_t *got = cx_host(e, n * sizeof *got);
    CUdeviceptr dout = cx_alloc(e, n * sizeof *got);
    CX_LAUNCH(e, op, cx_blocks(nthreads, 128), 128, 0, CXA(seed), CXA(offset), CXA(dout),
              CXA(nthreads), CXA(per_thread));
    cx_download(e, got, dout, n * sizeof *got);
    for (int t = 0; t < nthreads; t++) {
        cx_philox p;
        cx_philox_init(&p, seed, (uint64_t)t, offset);
        for (int k = 0; k < per_thread; k++)
            cx_eq_u64(e, "curand", (size_t)t * per_thread + k, got[(size_t)t * per_thread + k],
                      cx_philox_next(&p));
    }
}

void run_curand_uniform(compat_env *e)
{
    jitop_op *op = cx_op(e, "philox_uniform");
    int nthreads = (int)cx_int(e, 2000, 5000), per_thread = 8;
    unsigned long long seed = cx_u64(e);
    size_t n = (size_t)nthreads * per_thread;
    float *got = cx_host(e, n * sizeof *got);
    CUdeviceptr dout = cx_alloc(e, n * sizeof *got);
    CX_LAUNCH(e, op, cx_blocks(nthreads, 128), 128, 0, CXA(seed), CXA(dout), CXA(nthreads),
              CXA(per_thread));
    cx_download(e, got, dout, n * sizeof *got);
    for (int t = 0; t < nthreads; t++) {
        cx_philox p;
        cx_philox_init(&p, seed, (uint64_t)t, 0);
        for (int k = 0; k < per_thread; k++) {
            size_t i = (size_t)t * per_thread + k;
            float want = cx_curand_uniform(cx_philox_next(&p));
            cx_eq_u64(e, "curand_uniform bits", i, cx_f32_bits(got[i]), cx_f32_bits(want));
            CX_EXPECT(e, got[i] > 0.0f && got[i] <= 1.0f, "curand_uniform[%zu] = %g, not in (0, 1]",
                      i, got[i]);
        }
    }
}
