/*
 * Does a forked child's first NVRTC compile get cheaper when the parent ran
 * one tiny compile before the fork? (`jitop build -j N` forks its workers
 * after such a warm-up: src/build/fork.c.) Raw NVRTC, no GPU.
 *
 * For each of REPS rounds, three parents are forked from this process (so
 * that none inherits another's NVRTC state), in turn: a cold one, that has
 * NVRTC linked but never compiled; a warm one, that compiled a one-line
 * kernel first; and a cold one whose child first populates its page tables
 * for libnvrtc's mappings (madvise MADV_POPULATE_READ, Linux 5.14), to see
 * how much of a child's first compile is faulting the library in again.
 * Each parent forks one child that compiles the bench kernel twice (first
 * and second compile: wall and CPU time, minor faults). Printed: the
 * medians, the parent's warm-up time (what a warm-up costs the build once,
 * on its critical path) and the child's populate time. It also reports the
 * parent's thread count after the warm-up: a fork is only safe while the
 * parent runs one thread.
 *
 *   fork_warm_probe ARCH [REPS]             (bench/build_pool.sh runs it)
 */
#include <nvrtc.h>

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static double cpu_ms(void)
{
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0)
        return 0;
    return (ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e3 +
           (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e3;
}

/* Minor page faults so far: a child refaults the library pages and copies
 * the parent's written ones, which is where a first compile's set-up goes. */
static double faults(void)
{
    struct rusage ru;
    return getrusage(RUSAGE_SELF, &ru) == 0 ? (double)ru.ru_minflt : 0;
}

static const char *tiny = "extern \"C\" __global__ void jitop_warm(){}\n";

/* About one of bench/build_pool.sh's --light sources. */
static const char *bench_src =
    "template <typename T, int B> __device__ T block_sum(T v) {\n"
    "    __shared__ T s[B]; s[threadIdx.x] = v; __syncthreads();\n"
    "    for (int o = B / 2; o > 0; o /= 2) {\n"
    "        if (threadIdx.x < o) s[threadIdx.x] += s[threadIdx.x + o];\n"
    "        __syncthreads(); }\n"
    "    return s[0]; }\n"
    "extern \"C\" __global__ void reduce(const float *x, float *y, int n) {\n"
    "    float v = 0;\n"
    "    for (int k = blockIdx.x * 256 + threadIdx.x; k < n; k += gridDim.x * 256) v += x[k];\n"
    "    v = block_sum<float, 256>(v);\n"
    "    if (threadIdx.x == 0) atomicAdd(y, v); }\n"
    "extern \"C\" __global__ void map(const double *a, double *c, int n) {\n"
    "    int k = blockIdx.x * blockDim.x + threadIdx.x; if (k < n) c[k] = a[k] * 3.0 + 1.0; }\n";

static const char *opt_arch;

/* 0, or 1 after printing why. */
static int compile(const char *text, const char *name)
{
    nvrtcProgram p;
    nvrtcResult r = nvrtcCreateProgram(&p, text, name, 0, NULL, NULL);
    if (r != NVRTC_SUCCESS) {
        fprintf(stderr, "fork_warm_probe: nvrtcCreateProgram: %s\n", nvrtcGetErrorString(r));
        return 1;
    }
    const char *opts[] = {opt_arch};
    r = nvrtcCompileProgram(p, 1, opts);
    nvrtcResult d = nvrtcDestroyProgram(&p);
    if (r != NVRTC_SUCCESS || d != NVRTC_SUCCESS) {
        fprintf(stderr, "fork_warm_probe: %s: %s\n", name,
                nvrtcGetErrorString(r != NVRTC_SUCCESS ? r : d));
        return 1;
    }
    return 0;
}

static int threads(void)
{
    DIR *d = opendir("/proc/self/task");
    int n = 0;
    struct dirent *e;
    if (!d)
        return -1;
    while ((e = readdir(d)) != NULL)
        n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22 /* Linux 5.14; older headers lack it */
#endif

/* Populates the page tables of every readable mapping of libnvrtc; 0, or
 * -1 after printing why. */
static int populate_nvrtc(void)
{
    FILE *f = fopen("/proc/self/maps", "r");
    char line[4096];
    int rc = 0;
    if (!f) {
        perror("fork_warm_probe: /proc/self/maps");
        return -1;
    }
    while (rc == 0 && fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        char perm[8];
        if (sscanf(line, "%lx-%lx %7s", &lo, &hi, perm) != 3 || perm[0] != 'r' ||
            !strstr(line, "libnvrtc"))
            continue;
        if (madvise((void *)lo, hi - lo, MADV_POPULATE_READ) != 0) {
            perror("fork_warm_probe: madvise(MADV_POPULATE_READ)");
            rc = -1;
        }
    }
    fclose(f);
    return rc;
}

/* What a child sends back through its pipe. warm and warm_cpu: the parent's
 * warm-up compile (mode 1), or the child's populate (mode 2). */
typedef struct {
    double first, first_cpu, second, second_cpu, warm, warm_cpu, first_faults, second_faults;
    int parent_threads;
} sample;

static int wait_ok(pid_t pid)
{
    int st;
    return waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

enum { COLD, WARM, POPULATE, MODES };

/* A parent of one mode that forks one child; the child measures. Runs in
 * its own process and exits. */
static void parent(int mode, int fd)
{
    sample s = {0};
    if (mode == WARM) {
        double t0 = now_ms(), c0 = cpu_ms();
        if (compile(tiny, "jitop_warm.cu"))
            _exit(1);
        s.warm = now_ms() - t0;
        s.warm_cpu = cpu_ms() - c0;
    }
    s.parent_threads = threads();
    pid_t pid = fork();
    if (pid < 0)
        _exit(1);
    if (pid == 0) {
        if (mode == POPULATE) {
            double t0 = now_ms(), c0 = cpu_ms();
            if (populate_nvrtc() != 0)
                _exit(1);
            s.warm = now_ms() - t0;
            s.warm_cpu = cpu_ms() - c0;
        }
        double t0 = now_ms(), c0 = cpu_ms(), f0 = faults();
        if (compile(bench_src, "bench.cu"))
            _exit(1);
        s.first = now_ms() - t0;
        s.first_cpu = cpu_ms() - c0;
        s.first_faults = faults() - f0;
        t0 = now_ms(), c0 = cpu_ms(), f0 = faults();
        if (compile(bench_src, "bench.cu"))
            _exit(1);
        s.second = now_ms() - t0;
        s.second_cpu = cpu_ms() - c0;
        s.second_faults = faults() - f0;
        _exit(write(fd, &s, sizeof s) == (ssize_t)sizeof s ? 0 : 1);
    }
    _exit(wait_ok(pid) ? 0 : 1);
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp);
    return v[n / 2];
}

int main(int argc, char **argv)
{
    static char arch[64];
    if (argc < 2) {
        fprintf(stderr, "usage: fork_warm_probe ARCH [REPS]\n");
        return 2;
    }
    snprintf(arch, sizeof arch, "--gpu-architecture=%s", argv[1]);
    opt_arch = arch;
    int reps = argc > 2 ? atoi(argv[2]) : 5;
    if (reps < 1 || reps > 100)
        reps = 5;
    double v[MODES][8][100];
    int thr[MODES] = {0, 0, 0};
    for (int r = 0; r < reps; r++) {
        for (int mode = 0; mode < MODES; mode++) {
            int p[2];
            sample s;
            if (pipe(p) != 0) {
                perror("fork_warm_probe: pipe");
                return 1;
            }
            pid_t pid = fork();
            if (pid < 0) {
                perror("fork_warm_probe: fork");
                return 1;
            }
            if (pid == 0) {
                close(p[0]);
                parent(mode, p[1]);
            }
            close(p[1]);
            ssize_t got = read(p[0], &s, sizeof s);
            close(p[0]);
            if (!wait_ok(pid) || got != (ssize_t)sizeof s) {
                fprintf(stderr, "fork_warm_probe: a measuring process failed\n");
                return 1;
            }
            double f[8]; /* the sample's eight doubles, in order */
            memcpy(f, &s, sizeof f);
            for (int k = 0; k < 8; k++)
                v[mode][k][r] = f[k];
            if (s.parent_threads > thr[mode])
                thr[mode] = s.parent_threads;
        }
    }
    double m[MODES][8];
    for (int w = 0; w < MODES; w++)
        for (int k = 0; k < 8; k++)
            m[w][k] = median(v[w][k], reps);
    printf("# a forked child's compiles of one small kernel, %s, median of %d\n", argv[1], reps);
    static const char *const what[MODES] = {"parent not warmed:", "parent warmed:",
                                            "child populated:"};
    for (int w = 0; w < MODES; w++)
        printf("%-19s child's 1st %7.1f ms (cpu %7.1f, %6.0f faults), 2nd %7.1f ms "
               "(cpu %7.1f, %6.0f faults); parent threads %d\n",
               what[w], m[w][0], m[w][1], m[w][6], m[w][2], m[w][3], m[w][7], thr[w]);
    printf("parent's warm-up compile %.1f ms (cpu %.1f); child's 1st compile %.2fx faster "
           "(cpu %.2fx)\n",
           m[WARM][4], m[WARM][5], m[COLD][0] / m[WARM][0], m[COLD][1] / m[WARM][1]);
    printf("child's populate of libnvrtc %.1f ms (cpu %.1f); child's 1st compile %.2fx faster, "
           "populate included (cpu %.2fx)\n",
           m[POPULATE][4], m[POPULATE][5], m[COLD][0] / (m[POPULATE][0] + m[POPULATE][4]),
           m[COLD][1] / (m[POPULATE][1] + m[POPULATE][5]));
    return 0;
}
