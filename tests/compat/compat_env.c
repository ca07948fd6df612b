/* The GPU harness of the compatibility suite (compat_env.h): loading a
 * case, device memory, checked launches, the per-case random generator and
 * the checks. */
#include "compat_env.h"

#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

const char *compat_needs_text(unsigned needs, char *buf, size_t size)
{
    static const struct {
        unsigned bit;
        const char *name;
    } names[] = {
        {COMPAT_NEEDS_TOOLKIT_HEADERS, "TOOLKIT_HEADERS"}, {COMPAT_NEEDS_HEADER_KERNELS, "HEADER_KERNELS"},
        {COMPAT_NEEDS_GLOBALS, "GLOBALS"},                 {COMPAT_NEEDS_MANY_PARAMS, "MANY_PARAMS"},
        {COMPAT_NEEDS_MANY_KERNELS, "MANY_KERNELS"},       {COMPAT_NEEDS_RDC, "RDC"},
        {COMPAT_NEEDS_NAME_SPELLING, "NAME_SPELLING"},
    };
    size_t len = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        if (!(needs & names[i].bit))
            continue;
        int w = snprintf(buf + len, size - len, "%s%s", len ? "|" : "", names[i].name);
        if (w < 0 || (size_t)w >= size - len)
            break;
        len += (size_t)w;
    }
    if (len == 0)
        snprintf(buf, size, "none");
    return buf;
}

char *compat_kernel_dir(void)
{
    const char *file = __FILE__;
    const char *slash = strrchr(file, '/');
    char *rel = NULL, *abs = NULL;
    if (asprintf(&rel, "%.*s/kernels", slash ? (int)(slash - file) : 1, slash ? file : ".") < 0)
        fail_msg("out of memory");
    abs = realpath(rel, NULL);
    if (!abs)
        fail_msg("the compat kernels are not at %s (run from the repository root)", rel);
    free(rel);
    return abs;
}

char *compat_source_path(const char *kernel_dir, const char *gen_dir, const char *src)
{
    char *p = NULL;
    int rc = src[0] == '@' ? asprintf(&p, "%s/%s", gen_dir, src + 1)
                           : asprintf(&p, "%s/%s", kernel_dir, src);
    if (rc < 0)
        fail_msg("out of memory");
    return p;
}

/* splitmix64: a well-mixed 64-bit generator from any state, one add per
 * draw, so that a case's inputs follow from (run seed, case index) alone. */
static uint64_t splitmix64(uint64_t *state)
{
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

uint64_t compat_base_seed(void)
{
    const char *env = getenv("JITOP_COMPAT_SEED");
    if (env && *env) {
        char *end = NULL;
        unsigned long long v = strtoull(env, &end, 0);
        if (end && *end == '\0')
            return (uint64_t)v;
        fail_msg("JITOP_COMPAT_SEED=%s is not a number", env);
    }
    struct timespec ts;
    if (clock_gettime(CLOCK_REALTIME, &ts) != 0)
        fail_msg("clock_gettime failed");
    uint64_t s = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
    s ^= (uint64_t)getpid() << 32;
    return splitmix64(&s);
}

void cx_fail(compat_env *e, const char *fmt, ...)
{
    char msg[2048], needs[160];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fail_msg("case %s (%s; needs: %s): %s [inputs from JITOP_COMPAT_SEED=%" PRIu64 "]",
             e->c->name, e->c->category, compat_needs_text(e->c->needs, needs, sizeof needs), msg,
             e->base_seed);
    abort(); /* fail_msg does not return; this tells the compiler so */
}

jitop_op *cx_op(compat_env *e, const char *name)
{
    jitop_op *op = NULL;
    CX_OK(e, jitop_op_get(e->m, name, &op));
    CX_EXPECT(e, op != NULL, "jitop_op_get(%s) gave no op", name);
    return op;
}

void cx_expect_params(compat_env *e, jitop_op *op, size_t nparams, const size_t *sizes)
{
    jitop_op_info info;
    CX_OK(e, jitop_op_info_get(op, &info));
    CX_EXPECT(e, info.nparams == nparams, "%s: %zu parameters, expected %zu", info.name,
              info.nparams, nparams);
    for (size_t i = 0; i < nparams; i++)
        CX_EXPECT(e, info.param_size[i] == sizes[i], "%s: parameter %zu is %zu bytes, expected %zu",
                  info.name, i, (size_t)info.param_size[i], sizes[i]);
}

void cx_global_get(compat_env *e, const char *name, uint64_t *dptr, size_t *size)
{
    jitop_global_info info;
    memset(&info, 0, sizeof info);
    CX_OK(e, jitop_global_get(e->m, name, &info));
    *dptr = info.dptr;
    *size = info.size;
}

void cx_global_write(compat_env *e, const char *name, const void *src, size_t size)
{
    CX_OK(e, jitop_global_write(e->m, name, src, size, NULL));
}

void cx_global_read(compat_env *e, const char *name, void *dst, size_t size)
{
    CX_OK(e, jitop_global_read(e->m, name, dst, size, NULL));
}

CUdeviceptr cx_alloc(compat_env *e, size_t bytes)
{
    CUdeviceptr p = 0;
    CX_EXPECT(e, e->nallocs < COMPAT_MAX_ALLOCS, "more than %d allocations in one case",
              COMPAT_MAX_ALLOCS);
    CX_CU(e, e->cu->cuMemAlloc(&p, bytes ? bytes : 1));
    e->allocs[e->nallocs++] = p;
    CX_CU(e, e->cu->cuMemsetD8(p, 0xFF, bytes));
    return p;
}

CUdeviceptr cx_upload_new(compat_env *e, const void *host, size_t bytes)
{
    CUdeviceptr p = cx_alloc(e, bytes);
    cx_upload(e, p, host, bytes);
    return p;
}

void cx_upload(compat_env *e, CUdeviceptr dst, const void *host, size_t bytes)
{
    CX_CU(e, e->cu->cuMemcpyHtoD(dst, host, bytes));
}

void cx_memset0(compat_env *e, CUdeviceptr dst, size_t bytes)
{
    CX_CU(e, e->cu->cuMemsetD8(dst, 0, bytes));
}

void cx_sync(compat_env *e)
{
    CX_CU(e, e->cu->cuCtxSynchronize());
}

void cx_download(compat_env *e, void *host, CUdeviceptr src, size_t bytes)
{
    cx_sync(e);
    CX_CU(e, e->cu->cuMemcpyDtoH(host, src, bytes));
}

void *cx_host(compat_env *e, size_t bytes)
{
    CX_EXPECT(e, e->nhost < COMPAT_MAX_ALLOCS, "more than %d host allocations in one case",
              COMPAT_MAX_ALLOCS);
    void *p = calloc(1, bytes ? bytes : 1);
    CX_EXPECT(e, p != NULL, "out of host memory (%zu bytes)", bytes);
    e->host[e->nhost++] = p;
    return p;
}

void cx_free_all(compat_env *e)
{
    size_t n = e->nallocs;
    e->nallocs = 0;
    for (size_t i = 0; i < e->nhost; i++)
        free(e->host[i]);
    e->nhost = 0;
    if (!e->cu)
        return;
    for (size_t i = 0; i < n; i++)
        CX_CU(e, e->cu->cuMemFree(e->allocs[i]));
}

jitop_dim3 cx_dim(unsigned x, unsigned y, unsigned z)
{
    jitop_dim3 d = {x, y, z};
    return d;
}

unsigned cx_blocks(size_t n, unsigned block)
{
    return (unsigned)((n + block - 1) / block);
}

int cx_device_attribute(compat_env *e, CUdevice_attribute attr)
{
    CUdevice dev = 0;
    int v = 0;
    CX_CU(e, e->cu->cuDeviceGet(&dev, e->device));
    CX_CU(e, e->cu->cuDeviceGetAttribute(&v, attr, dev));
    return v;
}

#define CX_MAX_ARGS 128

void cx_launch_args(compat_env *e, jitop_op *op, jitop_dim3 grid, jitop_dim3 block, size_t smem,
                    const cx_arg *args, size_t nargs)
{
    void *ptrs[CX_MAX_ARGS];
    size_t sizes[CX_MAX_ARGS];
    CX_EXPECT(e, nargs <= CX_MAX_ARGS, "%zu arguments: more than %d", nargs, CX_MAX_ARGS);
    for (size_t i = 0; i < nargs; i++) {
        ptrs[i] = args[i].p;
        sizes[i] = args[i].size;
    }
    CX_OK(e, jitop_launch(op, grid, block, smem, NULL, ptrs, sizes, nargs));
}

void cx_launch_ex_args(compat_env *e, jitop_op *op, const jitop_launch_config *cfg,
                       const cx_arg *args, size_t nargs)
{
    void *ptrs[CX_MAX_ARGS];
    size_t sizes[CX_MAX_ARGS];
    CX_EXPECT(e, nargs <= CX_MAX_ARGS, "%zu arguments: more than %d", nargs, CX_MAX_ARGS);
    for (size_t i = 0; i < nargs; i++) {
        ptrs[i] = args[i].p;
        sizes[i] = args[i].size;
    }
    CX_OK(e, jitop_launch_ex(op, cfg, ptrs, sizes, nargs));
}

uint64_t cx_u64(compat_env *e)
{
    return splitmix64(&e->rng);
}

uint32_t cx_u32(compat_env *e)
{
    return (uint32_t)(cx_u64(e) >> 32);
}

double cx_uniform(compat_env *e, double lo, double hi)
{
    return lo + (hi - lo) * ((double)(cx_u64(e) >> 11) * 0x1p-53);
}

int64_t cx_int(compat_env *e, int64_t lo, int64_t hi)
{
    uint64_t span = (uint64_t)(hi - lo) + 1;
    return lo + (int64_t)(span ? cx_u64(e) % span : cx_u64(e));
}

void cx_fill_f32(compat_env *e, float *v, size_t n, float lo, float hi)
{
    for (size_t i = 0; i < n; i++)
        do
            v[i] = (float)cx_uniform(e, lo, hi);
        while (v[i] == 0.0f);
}

void cx_fill_f64(compat_env *e, double *v, size_t n, double lo, double hi)
{
    for (size_t i = 0; i < n; i++)
        do
            v[i] = cx_uniform(e, lo, hi);
        while (v[i] == 0.0);
}

void cx_fill_i32(compat_env *e, int *v, size_t n, int lo, int hi)
{
    for (size_t i = 0; i < n; i++)
        do
            v[i] = (int)cx_int(e, lo, hi);
        while (v[i] == 0 && (lo != 0 || hi != 0));
}

double cx_signed(compat_env *e, double lo, double hi)
{
    double m = cx_uniform(e, lo, hi);
    return (cx_u64(e) & 1) ? -m : m;
}

void cx_near(compat_env *e, const char *what, size_t i, double got, double want, double tol)
{
    double d = fabs(got - want);
    if (!(d <= tol))
        cx_fail(e, "%s[%zu]: got %.17g, want %.17g (|difference| %.3g > tolerance %.3g)", what, i,
                got, want, d, tol);
}

void cx_eq_i64(compat_env *e, const char *what, size_t i, int64_t got, int64_t want)
{
    if (got != want)
        cx_fail(e, "%s[%zu]: got %" PRId64 ", want %" PRId64, what, i, got, want);
}

void cx_eq_u64(compat_env *e, const char *what, size_t i, uint64_t got, uint64_t want)
{
    if (got != want)
        cx_fail(e, "%s[%zu]: got %" PRIu64 " (0x%" PRIx64 "), want %" PRIu64 " (0x%" PRIx64 ")",
                what, i, got, got, want, want);
}

/* The case being run; kept between calls so that the allocations of a case
 * that failed (cmocka leaves it by a long jump) are freed by the next. */
static compat_env g_env;

void compat_run_case(jitop_ctx *ctx, const char *kernel_dir, const char *gen_dir, size_t index,
                     uint64_t base_seed)
{
    compat_env *e = &g_env;
    cx_free_all(e);
    memset(e, 0, sizeof *e);
    e->c = &compat_cases[index];
    e->ctx = ctx;
    e->base_seed = base_seed;
    uint64_t s = base_seed ^ (0xD1B54A32D192ED03ull * (index + 1));
    e->seed = splitmix64(&s);
    e->rng = e->seed;
    CX_OK(e, jitop_ctx_cuda(ctx, NULL, &e->device));
    e->cu = jitop__cuda();
    CX_EXPECT(e, e->cu != NULL, "no driver table after jitop_ctx_cuda");

    const char *paths[8];
    size_t nsrc = 0, nopt = 0;
    while (e->c->sources[nsrc]) {
        CX_EXPECT(e, nsrc < 8, "more than 8 sources");
        paths[nsrc] = compat_source_path(kernel_dir, gen_dir, e->c->sources[nsrc]);
        nsrc++;
    }
    while (e->c->options && e->c->options[nopt])
        nopt++;
    int st = jitop_load(ctx, e->c->name, paths, nsrc, e->c->options, nopt, &e->m);
    for (size_t i = 0; i < nsrc; i++)
        free((char *)paths[i]);
    if (st != JITOP_OK)
        cx_fail(e, "jitop_load: %s: %s", jitop_strerror(st), jitop_errmsg(NULL));
    e->c->run(e);
    cx_free_all(e);
}

void compat_finish(void)
{
    cx_free_all(&g_env);
}
