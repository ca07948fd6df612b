/* The in-place ops' GPU tests' helpers (iptest.h), shared by
 * tests/gpu/test_inplace.c (the square product) and test_inplace_softmax.c:
 * host storage of the dtypes, the program's context with its fill kernels,
 * and device buffers between poisoned guards. Linked into every test
 * program (the Makefile's TEST_SUPPORT); only those two call it. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "load/driver.h"
#include "jitop.h"
#include "gputest.h"
#include "testutil.h"

/* float16 goes through _Float16 (hostdtype.h: GCC 12 or newer on x86-64,
 * clang 15 or newer). Without it this file is empty, so that the CPU test
 * programs, which link every .c file of tests/support, build as before;
 * hostdtype.h then stops the build of the in-place ops' GPU tests with a message. */
#ifdef __FLT16_MAX__
#include "iptest.h"

const jitop__cuda_api *ipt_cu;
jitop_ctx *ipt_ctx;
static jitop_module *fill_mod;
static jitop_op *fill_op[3];

static int dindex(jitop_dtype dt)
{
    return dt == JITOP_FLOAT32 ? 0 : dt == JITOP_FLOAT16 ? 1 : 2;
}

/* ------------------------------------------------------------- setup */

/* Uniform values in [-1, 1) from a hash of (seed, index), made on the GPU so
 * that gigabyte inputs cost no host time. */
static const char *FILL_SRC =
    "#include <cuda_fp16.h>\n"
    "#include <cuda_bf16.h>\n"
    "__device__ float u(unsigned long long s, long long i) {\n"
    "  unsigned long long z = s + (unsigned long long)i * 0x9E3779B97F4A7C15ull;\n"
    "  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull; z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;\n"
    "  z ^= z >> 31; return (float)(z >> 40) * (2.0f / 16777216.0f) - 1.0f; }\n"
    "extern \"C\" __global__ void fill_f32(float *p, long long n, unsigned long long s) {\n"
    "  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;\n"
    "       i += (long long)gridDim.x * blockDim.x) p[i] = u(s, i); }\n"
    "extern \"C\" __global__ void fill_f16(__half *p, long long n, unsigned long long s) {\n"
    "  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;\n"
    "       i += (long long)gridDim.x * blockDim.x) p[i] = __float2half(u(s, i)); }\n"
    "extern \"C\" __global__ void fill_bf16(__nv_bfloat16 *p, long long n, unsigned long long s) {\n"
    "  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;\n"
    "       i += (long long)gridDim.x * blockDim.x) p[i] = __float2bfloat16(u(s, i)); }\n";

void ipt_setup_ctx(void)
{
    if (ipt_ctx != NULL)
        return;
    char *dir = jt_tmpdir();
    char *cache = jt_path(dir, "cache");
    ipt_ctx = jt_ctx_driver(cache);
    OK(jitop_ctx_cuda(ipt_ctx, NULL, NULL));
    ipt_cu = jitop__cuda();
    assert_non_null(ipt_cu);
    OK(jitop_load_inline(ipt_ctx, "fill", FILL_SRC, NULL, 0, &fill_mod));
    OK(jitop_op_get(fill_mod, "fill_f32", &fill_op[0]));
    OK(jitop_op_get(fill_mod, "fill_f16", &fill_op[1]));
    OK(jitop_op_get(fill_mod, "fill_bf16", &fill_op[2]));
    free(dir);
    free(cache);
}

int ipt_teardown_all(void **state)
{
    (void)state;
    jitop_ctx_destroy(ipt_ctx);
    ipt_ctx = NULL;
    jt_cleanup();
    return 0;
}

static unsigned long long fresh_seed(void)
{
    unsigned long long s;
    double r[2];
    jt_random_doubles(r, 2, 0, 4294967296.0);
    s = ((unsigned long long)r[0] << 32) ^ (unsigned long long)r[1];
    return s;
}

void ipt_fill(jitop_dtype dt, CUdeviceptr p, long long n)
{
    unsigned long long s = fresh_seed();
    void *ptr = (void *)(uintptr_t)p;
    void *args[] = {&ptr, &n, &s};
    long long blocks = (n + 255) / 256;
    if (blocks > 132 * 32)
        blocks = 132 * 32;
    OK(jitop_launch(fill_op[dindex(dt)], (jitop_dim3){(unsigned)blocks, 1, 1},
                    (jitop_dim3){256, 1, 1}, 0, NULL, args, NULL, 3));
}

guarded ipt_galloc(size_t bytes, size_t offset)
{
    guarded g = {0, 0, bytes};
    CU(ipt_cu->cuMemAlloc(&g.base, bytes + 2 * GUARD + offset));
    CU(ipt_cu->cuMemsetD8(g.base, POISON, bytes + 2 * GUARD + offset));
    g.p = g.base + GUARD + offset;
    return g;
}

/* Every guard byte still holds the poison. */
void ipt_check_guards(const guarded *g, size_t offset, const char *what)
{
    unsigned char buf[GUARD + 64];
    size_t lo = GUARD + offset;
    assert_true(lo <= sizeof buf);
    CU(ipt_cu->cuMemcpyDtoH(buf, g->base, lo));
    for (size_t i = 0; i < lo; i++)
        if (buf[i] != POISON)
            fail_msg("%s: byte %zu before the tensor was written", what, lo - i);
    CU(ipt_cu->cuMemcpyDtoH(buf, g->p + g->bytes, GUARD));
    for (size_t i = 0; i < GUARD; i++)
        if (buf[i] != POISON)
            fail_msg("%s: byte %zu after the tensor was written", what, i);
}

void ipt_gfree(guarded *g)
{
    if (g->base)
        CU(ipt_cu->cuMemFree(g->base));
    g->base = g->p = 0;
}

#endif /* __FLT16_MAX__ */
