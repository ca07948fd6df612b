/*
 * NVRTC's precompiled headers, measured with raw NVRTC (what jitop would
 * gain, and what NVRTC 13.0 allows): two different sources with the same
 * heavy includes (cooperative groups, CUB, fp16, bf16 and a user header),
 * in one process after a warm-up compile:
 *   A and B without PCH; A with --create-pch (heap resized and retried when
 *   NVRTC asks); B with --use-pch (and its cubin compared with B's without);
 *   B with --use-pch in a forked child (same address space) and in a fresh
 *   process (exec of this program); B with --use-pch after the user header
 *   was edited (is a stale PCH refused?).
 *
 *   pch_probe CUDA_HOME ARCH WORKDIR        (bench/build_pool.sh runs it)
 */
#include <nvrtc.h>

#include <sys/types.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static char opt_arch[64], opt_inc[4096], opt_cccl[4096], opt_work[4096], pch_path[4096];

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

/* This process's CPU time (user + system): what a compile costs, less
 * sensitive than wall time to other work on a shared machine. */
static double cpu_ms(void)
{
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0)
        return 0;
    return (ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e3 +
           (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e3;
}

static void die(const char *what, nvrtcResult r)
{
    fprintf(stderr, "pch_probe: %s: %s\n", what, nvrtcGetErrorString(r));
    exit(1);
}

static const char *src_a = "#include <cooperative_groups.h>\n"
                           "#include <cub/block/block_reduce.cuh>\n"
                           "#include <cuda_fp16.h>\n"
                           "#include <cuda_bf16.h>\n"
                           "#include \"common.h\"\n"
                           "namespace cg = cooperative_groups;\n"
                           "extern \"C\" __global__ void sum_a(const float *x, float *y) {\n"
                           "    typedef cub::BlockReduce<float, 128> R;\n"
                           "    __shared__ typename R::TempStorage t;\n"
                           "    float s = R(t).Sum(x[threadIdx.x] * SCALE);\n"
                           "    cg::this_thread_block().sync();\n"
                           "    if (threadIdx.x == 0) y[blockIdx.x] = s;\n"
                           "}\n";
static const char *src_b = "#include <cooperative_groups.h>\n"
                           "#include <cub/block/block_reduce.cuh>\n"
                           "#include <cuda_fp16.h>\n"
                           "#include <cuda_bf16.h>\n"
                           "#include \"common.h\"\n"
                           "namespace cg = cooperative_groups;\n"
                           "extern \"C\" __global__ void max_b(const __half *x, float *y) {\n"
                           "    typedef cub::BlockReduce<float, 256> R;\n"
                           "    __shared__ typename R::TempStorage t;\n"
                           "    float v = __half2float(x[threadIdx.x]) * SCALE;\n"
                           "    float s = R(t).Reduce(v, [](float a, float b) { return a > b ? a : b; });\n"
                           "    cg::this_thread_block().sync();\n"
                           "    if (threadIdx.x == 0) y[blockIdx.x] = s;\n"
                           "}\n";

/* Same includes, a light kernel: the front end's share of the compile is
 * the headers. */
static const char *src_c = "#include <cooperative_groups.h>\n"
                           "#include <cub/block/block_reduce.cuh>\n"
                           "#include <cuda_fp16.h>\n"
                           "#include <cuda_bf16.h>\n"
                           "#include \"common.h\"\n"
                           "namespace cg = cooperative_groups;\n"
                           "extern \"C\" __global__ void scale_c(__half *x) {\n"
                           "    cg::this_thread_block().sync();\n"
                           "    x[threadIdx.x] = __float2half(__half2float(x[threadIdx.x]) * SCALE);\n"
                           "}\n";

typedef struct result {
    double ms, cpu;
    int ok;
    nvrtcResult pch_status;
    size_t heap_required;
    char log[4096];
    char *cubin;
    size_t cubin_size;
} result;

/* One compile; extra: NULL, or a PCH option. */
static result compile(const char *name, const char *text, const char *extra)
{
    result res = {0};
    /* $PCH_PROBE_OPTION: one more NVRTC option for every compile (e.g.
     * -fdevice-syntax-only, to time the front end alone) */
    const char *more = getenv("PCH_PROBE_OPTION");
    const char *opts[6] = {opt_arch, opt_work, opt_inc, opt_cccl};
    int nopts = 4;
    if (extra)
        opts[nopts++] = extra;
    if (more && *more)
        opts[nopts++] = more;
    nvrtcProgram p;
    double t0 = now_ms(), c0 = cpu_ms();
    nvrtcResult r = nvrtcCreateProgram(&p, text, name, 0, NULL, NULL);
    if (r != NVRTC_SUCCESS)
        die("nvrtcCreateProgram", r);
    r = nvrtcCompileProgram(p, nopts, opts);
    res.ms = now_ms() - t0;
    res.cpu = cpu_ms() - c0;
    res.ok = r == NVRTC_SUCCESS;
    size_t n = 0;
    if (nvrtcGetProgramLogSize(p, &n) == NVRTC_SUCCESS && n > 0) {
        char *l = malloc(n);
        if (l && nvrtcGetProgramLog(p, l) == NVRTC_SUCCESS)
            snprintf(res.log, sizeof res.log, "%s", l);
        free(l);
    }
    res.pch_status = nvrtcGetPCHCreateStatus(p);
    if (nvrtcGetPCHHeapSizeRequired(p, &res.heap_required) != NVRTC_SUCCESS)
        res.heap_required = 0;
    if (res.ok && nvrtcGetCUBINSize(p, &res.cubin_size) == NVRTC_SUCCESS &&
        (res.cubin = malloc(res.cubin_size)) != NULL &&
        nvrtcGetCUBIN(p, res.cubin) != NVRTC_SUCCESS) {
        free(res.cubin);
        res.cubin = NULL;
    }
    if ((r = nvrtcDestroyProgram(&p)) != NVRTC_SUCCESS)
        die("nvrtcDestroyProgram", r);
    return res;
}

static int used_pch(const result *r)
{
    return strstr(r->log, "using precompiled header") != NULL;
}

static int same_cubin(const result *a, const result *b)
{
    return a->cubin && b->cubin && a->cubin_size == b->cubin_size &&
           memcmp(a->cubin, b->cubin, a->cubin_size) == 0;
}

static void line(const char *what, const result *r)
{
    char first[200];
    size_t n = strnlen(r->log, sizeof first - 1);
    memcpy(first, r->log, n);
    first[n] = '\0';
    for (char *c = first; *c; c++)
        if (*c == '\n')
            *c = ' ';
    printf("%-40s %7.1f ms (cpu %7.1f)  %s  %s\n", what, r->ms, r->cpu, r->ok ? "ok" : "FAILED",
           first);
}

static void write_header(const char *dir, const char *text)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/common.h", dir);
    FILE *f = fopen(path, "w");
    if (!f || fputs(text, f) < 0 || fclose(f) != 0) {
        perror(path);
        exit(1);
    }
}

int main(int argc, char **argv)
{
    if (argc == 5 && strcmp(argv[4], "--use-only") == 0) {
        /* the fresh process: B with the PCH the parent made */
        snprintf(opt_arch, sizeof opt_arch, "--gpu-architecture=%s", argv[2]);
        snprintf(opt_inc, sizeof opt_inc, "-I%s/include", argv[1]);
        snprintf(opt_cccl, sizeof opt_cccl, "-I%s/include/cccl", argv[1]);
        snprintf(opt_work, sizeof opt_work, "-I%s", argv[3]);
        snprintf(pch_path, sizeof pch_path, "--use-pch=%s/ab.pch", argv[3]);
        result w = compile("warm.cu", "__global__ void w() {}\n", NULL);
        (void)w;
        result r = compile("b.cu", src_b, pch_path);
        line("B --use-pch, a fresh process", &r);
        printf("  fresh process used the PCH: %s\n", used_pch(&r) ? "yes" : "no");
        return 0;
    }
    if (argc != 4) {
        fprintf(stderr, "usage: pch_probe CUDA_HOME ARCH WORKDIR\n");
        return 2;
    }
    snprintf(opt_arch, sizeof opt_arch, "--gpu-architecture=%s", argv[2]);
    snprintf(opt_inc, sizeof opt_inc, "-I%s/include", argv[1]);
    snprintf(opt_cccl, sizeof opt_cccl, "-I%s/include/cccl", argv[1]);
    snprintf(opt_work, sizeof opt_work, "-I%s", argv[3]);
    write_header(argv[3], "#define SCALE 2.0f\n");
    char create[4200], use[4200];
    snprintf(create, sizeof create, "--create-pch=%s/ab.pch", argv[3]);
    snprintf(use, sizeof use, "--use-pch=%s/ab.pch", argv[3]);

    result warm = compile("warm.cu", "__global__ void w() {}\n", NULL);
    line("warm-up (NVRTC's first compile)", &warm);
    result a = compile("a.cu", src_a, NULL);
    line("A, no PCH", &a);
    result b = compile("b.cu", src_b, NULL);
    line("B, no PCH", &b);
    result ac = compile("a.cu", src_a, create);
    if (ac.pch_status == NVRTC_ERROR_PCH_CREATE_HEAP_EXHAUSTED) {
        nvrtcResult r = nvrtcSetPCHHeapSize(ac.heap_required);
        if (r != NVRTC_SUCCESS)
            die("nvrtcSetPCHHeapSize", r);
        ac = compile("a.cu", src_a, create);
    }
    line("A --create-pch", &ac);
    struct stat st;
    printf("  PCH create status %s, heap required %zu MiB, file %lld MiB\n",
           nvrtcGetErrorString(ac.pch_status), ac.heap_required >> 20,
           stat(create + 13, &st) == 0 ? (long long)st.st_size >> 20 : -1LL);
    result bu = compile("b.cu", src_b, use);
    line("B --use-pch", &bu);
    printf("  used the PCH: %s; cubin identical to B without PCH: %s; B speed-up %.2fx (cpu %.2fx)\n",
           used_pch(&bu) ? "yes" : "no", same_cubin(&b, &bu) ? "yes" : "NO", b.ms / bu.ms,
           b.cpu / bu.cpu);

    /* the best of 5, interleaved: this machine's load moves single runs */
    result c = {0}, cu = {0};
    for (int rep = 0; rep < 5; rep++) {
        result x = compile("c.cu", src_c, NULL), y = compile("c.cu", src_c, use);
        if (rep == 0 || x.cpu < c.cpu) {
            free(c.cubin);
            c = x;
        } else {
            free(x.cubin);
        }
        if (rep == 0 || y.cpu < cu.cpu) {
            free(cu.cubin);
            cu = y;
        } else {
            free(y.cubin);
        }
    }
    line("C (light kernel), no PCH, best of 5 by cpu", &c);
    line("C --use-pch, best of 5 by cpu", &cu);
    printf("  used the PCH: %s; cubin identical to C without PCH: %s; C speed-up %.2fx (cpu %.2fx)\n",
           used_pch(&cu) ? "yes" : "no", same_cubin(&c, &cu) ? "yes" : "NO", c.ms / cu.ms,
           c.cpu / cu.cpu);

    /* NVRTC's automatic mode: it picks the header stop and the file name in
     * --pch-dir, creating at the first compile and using at the next */
    char autodir[4200];
    snprintf(autodir, sizeof autodir, "--pch-dir=%s/auto", argv[3]);
    if (mkdir(autodir + 10, 0700) != 0 && errno != EEXIST) {
        perror(autodir + 10);
        return 1;
    }
    setenv("PCH_PROBE_OPTION", "--pch", 1);
    result aa = compile("a.cu", src_a, autodir);
    line("A --pch (automatic), first", &aa);
    result ca = {0};
    for (int rep = 0; rep < 3; rep++) {
        result y = compile("c.cu", src_c, autodir);
        if (rep == 0 || y.cpu < ca.cpu) {
            free(ca.cubin);
            ca = y;
        } else {
            free(y.cubin);
        }
    }
    unsetenv("PCH_PROBE_OPTION");
    line("C --pch (automatic), best of 3 by cpu", &ca);
    printf("  cubin identical to C without PCH: %s; C speed-up %.2fx (cpu %.2fx)\n",
           same_cubin(&c, &ca) ? "yes" : "NO", c.ms / ca.ms, c.cpu / ca.cpu);

    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        result r = compile("b.cu", src_b, use);
        line("B --use-pch, a forked child", &r);
        printf("  forked child used the PCH: %s\n", used_pch(&r) ? "yes" : "no");
        fflush(stdout);
        _exit(0);
    }
    int wst;
    if (pid < 0 || waitpid(pid, &wst, 0) != pid)
        perror("fork");
    pid = fork();
    if (pid == 0) {
        execl("/proc/self/exe", argv[0], argv[1], argv[2], argv[3], "--use-only", (char *)NULL);
        _exit(127);
    }
    if (pid < 0 || waitpid(pid, &wst, 0) != pid)
        perror("fork");

    /* a stale PCH: the user header edited after the PCH was made */
    write_header(argv[3], "#define SCALE 5.0f\n");
    result bs = compile("b.cu", src_b, use);
    line("B --use-pch after common.h was edited", &bs);
    result bf = compile("b.cu", src_b, NULL);
    printf("  stale PCH used: %s; cubin as a fresh compile of the edited header: %s\n",
           used_pch(&bs) ? "yes" : "no", same_cubin(&bs, &bf) ? "yes" : "NO");
    return 0;
}
