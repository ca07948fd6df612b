/*
 * `jitop build`'s worker processes (tools/cli_pool.c) and their memory
 * guard (tools/cli_mem.c): the pool's protocol alone (large replies, a
 * worker that exits, one killed; every task run once, in order); 32
 * sources built by two workers, each compiled
 * once and all hits the second time; a worker killed with SIGKILL in the
 * middle of a compile fails its file by name and leaves no entry; the
 * guard's arithmetic on fake /proc/meminfo texts, and its cut of -j as the
 * CLI says it. Real NVRTC, no GPU.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

/* The pool and the guard, compiled into this test (the CLI's objects are
 * not in libjitop.a). */
#include "../../tools/cli_mem.c"
#include "../../tools/cli_pool.c"

#include <signal.h>

static size_t count(const char *text, const char *what)
{
    size_t n = 0;
    for (const char *p = text; (p = strstr(p, what)) != NULL; p += strlen(what))
        n++;
    return n;
}

static char *run_cli(const char *env, const char *args)
{
    char cmd[4096], *out = NULL;
    snprintf(cmd, sizeof cmd, "%s %s %s 2>&1", env ? env : "", jt_cli(), args);
    int rc = jt_run(cmd, &out);
    size_t n = strlen(out) + 32;
    char *r = malloc(n);
    assert_non_null(r);
    snprintf(r, n, "rc=%d\n%s", rc, out);
    free(out);
    return r;
}

static void test_pool_builds_32_sources_once(void **state)
{
    (void)state;
    char *dir = jt_tmpdir(), *src = jt_path(dir, "src"), *cache = jt_path(dir, "cache");
    for (int i = 0; i < 32; i++) {
        char name[32], text[256];
        snprintf(name, sizeof name, "k%02d.cu", i);
        snprintf(text, sizeof text,
                 "extern \"C\" __global__ void k%d(float *x) { x[threadIdx.x] *= %d.0f; }\n", i,
                 i + 2);
        free(jt_write(src, name, text));
    }
    char args[2048];
    snprintf(args, sizeof args, "build --cache-dir %s --arch sm_90 -j2 --json %s", cache, src);
    char *out = run_cli("JITOP_JOB_MEM=0", args);
    assert_true(strncmp(out, "rc=0\n", 5) == 0);
    assert_int_equal(count(out, "\"status\":\"compiled\""), 32);
    assert_int_equal(count(out, "\"status\":\"cached\""), 0);
    /* 32 keys, all different, and the cache holds exactly those 32 */
    char *keys[32];
    size_t nkeys = 0;
    for (const char *p = out; (p = strstr(p, "\"key\":\"")) != NULL; p += 7) {
        assert_true(nkeys < 32);
        keys[nkeys] = strndup(p + 7, 32);
        for (size_t k = 0; k < nkeys; k++)
            assert_string_not_equal(keys[k], keys[nkeys]);
        nkeys++;
    }
    assert_int_equal(nkeys, 32);
    snprintf(args, sizeof args, "ls --json --cache-dir %s", cache);
    char *ls = run_cli(NULL, args);
    assert_true(strncmp(ls, "rc=0\n", 5) == 0);
    assert_int_equal(count(ls, "\"key\":"), 32);
    for (size_t k = 0; k < nkeys; k++) {
        assert_non_null(strstr(ls, keys[k]));
        free(keys[k]);
    }
    /* the second run compiles nothing */
    snprintf(args, sizeof args, "build --cache-dir %s --arch sm_90 -j2 --json %s", cache, src);
    char *again = run_cli("JITOP_JOB_MEM=0", args);
    assert_true(strncmp(again, "rc=0\n", 5) == 0);
    assert_int_equal(count(again, "\"status\":\"cached\""), 32);
    assert_int_equal(count(again, "\"status\":\"compiled\""), 0);
    free(again);
    free(ls);
    free(out);
    free(cache);
    free(src);
    free(dir);
}

/* A compile long enough (cooperative groups and CUB: a second or more of
 * NVRTC's front end) to be killed in the middle of. */
static const char heavy[] = "#include <cooperative_groups.h>\n"
                            "#include <cub/block/block_reduce.cuh>\n"
                            "namespace cg = cooperative_groups;\n"
                            "extern \"C\" __global__ void %s(const float *x, float *y) {\n"
                            "    typedef cub::BlockReduce<float, 128> R;\n"
                            "    __shared__ typename R::TempStorage t;\n"
                            "    float s = R(t).Sum(x[threadIdx.x]);\n"
                            "    cg::this_thread_block().sync();\n"
                            "    if (threadIdx.x == 0) y[blockIdx.x] = s;\n"
                            "}\n";

static void test_worker_killed_fails_its_file(void **state)
{
    (void)state;
    char *dir = jt_tmpdir(), *src = jt_path(dir, "src"), *cache = jt_path(dir, "cache");
    char text[1024];
    snprintf(text, sizeof text, heavy, "alpha");
    free(jt_write(src, "alpha.cu", text));
    snprintf(text, sizeof text, heavy, "beta");
    free(jt_write(src, "beta.cu", text));
    /* The build in the background; as soon as it has two workers, one of
     * them is killed 0.2 s into its compile, then the build's exit status
     * is printed. */
    char cmd[4096], *out = NULL;
    snprintf(cmd, sizeof cmd,
             "JITOP_JOB_MEM=0 %s build --cache-dir %s --arch sm_90 -j2 %s 2>&1 & p=$!; "
             "i=0; while [ $i -lt 3000 ]; do "
             "  kids=$(cat /proc/$p/task/*/children 2>/dev/null); "
             "  set -- $kids; [ $# -ge 2 ] && break; sleep 0.01; i=$((i+1)); done; "
             "sleep 0.2; kill -9 $1; echo killed=$1; wait $p; echo rc=$?",
             jt_cli(), cache, src);
    assert_int_equal(jt_run(cmd, &out), 0);
    assert_non_null(strstr(out, "rc=1\n"));
    assert_non_null(strstr(out, "was killed by signal 9"));
    /* exactly one of the two compiled; the other is named as failed */
    int alpha_ok = strstr(out, "alpha.cu sm_90 compiled") != NULL;
    int beta_ok = strstr(out, "beta.cu sm_90 compiled") != NULL;
    assert_int_equal(alpha_ok + beta_ok, 1);
    const char *lost = alpha_ok ? "beta.cu (sm_90): " : "alpha.cu (sm_90): ";
    assert_non_null(strstr(out, lost));
    assert_non_null(strstr(out, "1 of 2 builds failed"));
    free(out);

    /* The cache holds one entry, and the next build compiles the lost one
     * (nothing half-written was taken for it) and hits the other. */
    char args[2048];
    snprintf(args, sizeof args, "ls --json --cache-dir %s", cache);
    char *ls = run_cli(NULL, args);
    assert_int_equal(count(ls, "\"key\":"), 1);
    snprintf(args, sizeof args, "build --cache-dir %s --arch sm_90 -j2 %s", cache, src);
    char *again = run_cli("JITOP_JOB_MEM=0", args);
    assert_true(strncmp(again, "rc=0\n", 5) == 0);
    assert_int_equal(count(again, " compiled "), 1);
    assert_int_equal(count(again, " cached "), 1);
    assert_non_null(strstr(again, alpha_ok ? "beta.cu sm_90 compiled" : "alpha.cu sm_90 compiled"));
    free(again);
    free(ls);
    free(cache);
    free(src);
    free(dir);
}

/* The pool's protocol on its own: 40 tasks on 3 workers; task 7 exits
 * (status 7), task 13 kills itself (SIGKILL), every other task answers
 * with a reply of 1 + task * 100 KiB (up to ~4 MiB: many partial reads and
 * writes through the socket) filled with its own byte. */
typedef struct pool_run {
    int started[40], done[40];
    char died[40][256];
    size_t order[40], norder;
} pool_run;

static void pool_task(void *user, size_t task, jitop_cli_buf *reply)
{
    (void)user;
    if (task == 7)
        _exit(7);
    if (task == 13)
        raise(SIGKILL);
    size_t n = 1 + task * 100 * 1024;
    char *b = malloc(n);
    if (!b)
        _exit(99);
    memset(b, (int)('A' + task), n);
    jitop_cli_buf_put(reply, b, n);
    free(b);
}

static void pool_started(void *user, size_t task)
{
    pool_run *r = user;
    r->started[task]++;
    r->order[r->norder++] = task;
}

static void pool_done(void *user, size_t task, const void *reply, size_t len, const char *died)
{
    pool_run *r = user;
    r->done[task]++;
    if (died) {
        snprintf(r->died[task], sizeof r->died[task], "%s", died);
        return;
    }
    size_t want = 1 + task * 100 * 1024;
    const unsigned char *p = reply;
    int ok = len == want;
    for (size_t i = 0; ok && i < len; i++)
        ok = p[i] == (unsigned char)('A' + task);
    if (!ok)
        snprintf(r->died[task], sizeof r->died[task], "bad reply of %zu bytes", len);
}

static void test_pool_protocol(void **state)
{
    (void)state;
    pool_run r = {0};
    jitop_cli_pool_ops ops = {.run = pool_task, .started = pool_started, .done = pool_done};
    assert_int_equal(jitop_cli_pool_procs(40, 3, &ops, &r), 0);
    assert_int_equal(r.norder, 40);
    for (size_t t = 0; t < 40; t++) {
        assert_int_equal(r.started[t], 1);
        assert_int_equal(r.done[t], 1);
        assert_int_equal(r.order[t], t); /* handed out in order */
        if (t == 7)
            assert_non_null(strstr(r.died[t], "exited with status 7"));
        else if (t == 13)
            assert_non_null(strstr(r.died[t], "was killed by signal 9"));
        else if (r.died[t][0])
            fail_msg("task %zu: %s", t, r.died[t]);
    }
    /* nothing to do, and one worker for many tasks */
    assert_int_equal(jitop_cli_pool_procs(0, 3, &ops, &r), 0);
    pool_run one = {0};
    assert_int_equal(jitop_cli_pool_procs(5, 1, &ops, &one), 0);
    for (size_t t = 0; t < 5; t++)
        assert_int_equal(one.done[t], 1);
}

static const char meminfo[] = "MemTotal:        2097152 kB\n"
                              "MemFree:          100000 kB\n"
                              "MemAvailable:    1048576 kB\n"
                              "Buffers:           12345 kB\n";

static void test_mem_guard_limits(void **state)
{
    (void)state;
    assert_true(jitop_cli_meminfo_available(meminfo) == (int64_t)1 << 30);
    assert_true(jitop_cli_meminfo_available("MemTotal: 5 kB\n") == -1);
    assert_true(jitop_cli_meminfo_available("MemAvailable: lots\n") == -1);
    assert_true(jitop_cli_meminfo_available("MemAvailable: 12 MB\n") == -1);
    assert_true(jitop_cli_meminfo_available("") == -1);
    /* 1 GiB at the default 384 MiB per compile: 2 of 16 */
    assert_int_equal(jitop_cli_mem_jobs(16, (int64_t)1 << 30, JITOP_CLI_JOB_MEM_DEFAULT), 2);
    /* never more than asked, never fewer than one */
    assert_int_equal(jitop_cli_mem_jobs(4, (int64_t)64 << 30, JITOP_CLI_JOB_MEM_DEFAULT), 4);
    assert_int_equal(jitop_cli_mem_jobs(8, (int64_t)100 << 20, JITOP_CLI_JOB_MEM_DEFAULT), 1);
    assert_int_equal(jitop_cli_mem_jobs(0, (int64_t)1 << 30, JITOP_CLI_JOB_MEM_DEFAULT), 1);
    /* unknown memory, or the guard off: as asked */
    assert_int_equal(jitop_cli_mem_jobs(8, -1, JITOP_CLI_JOB_MEM_DEFAULT), 8);
    assert_int_equal(jitop_cli_mem_jobs(8, (int64_t)1 << 20, 0), 8);
    /* the file form reads the same as the text */
    char *dir = jt_tmpdir(), *fake = jt_write(dir, "meminfo", meminfo);
    assert_true(jitop_cli_mem_available(fake) == (int64_t)1 << 30);
    char *missing = jt_path(dir, "nothing");
    assert_true(jitop_cli_mem_available(missing) == -1);
    /* this machine's own: a positive figure */
    assert_true(jitop_cli_mem_available("/proc/meminfo") > 0);
    free(missing);
    free(fake);
    free(dir);
}

/* The CLI says when memory cuts -j: a compile guessed at 1 TiB leaves room
 * for one; a bad JITOP_JOB_MEM is named; 0 turns the guard off. */
static void test_mem_guard_in_cli(void **state)
{
    (void)state;
    char *dir = jt_tmpdir(), *src = jt_path(dir, "src"), *cache = jt_path(dir, "cache");
    free(jt_write(src, "a.cu", "extern \"C\" __global__ void a(float *x) { x[0] = 1; }\n"));
    free(jt_write(src, "b.cu", "extern \"C\" __global__ void b(float *x) { x[0] = 2; }\n"));
    char args[2048];
    snprintf(args, sizeof args, "build --cache-dir %s --arch sm_90 -j2 %s", cache, src);
    char *cut = run_cli("JITOP_JOB_MEM=1T", args);
    assert_true(strncmp(cut, "rc=0\n", 5) == 0);
    assert_non_null(strstr(cut, "jitop build: 1 compiles at once, not 2: "));
    assert_non_null(strstr(cut, "1048576 MiB per compile (JITOP_JOB_MEM"));
    assert_int_equal(count(cut, " compiled "), 2);
    jt_rm_rf(cache);
    char *bad = run_cli("JITOP_JOB_MEM=lots", args);
    assert_true(strncmp(bad, "rc=0\n", 5) == 0);
    assert_non_null(strstr(bad, "JITOP_JOB_MEM='lots' is not a size"));
    jt_rm_rf(cache);
    /* JITOP_JOBS stands for -j; text that is no count is named */
    snprintf(args, sizeof args, "build --cache-dir %s --arch sm_90 %s", cache, src);
    char *jobs = run_cli("JITOP_JOB_MEM=1T JITOP_JOBS=2", args);
    assert_non_null(strstr(jobs, "1 compiles at once, not 2: "));
    jt_rm_rf(cache);
    char *badjobs = run_cli("JITOP_JOBS=many", args);
    assert_true(strncmp(badjobs, "rc=0\n", 5) == 0);
    assert_non_null(strstr(badjobs, "JITOP_JOBS='many' is not a number of jobs"));
    assert_int_equal(count(badjobs, " compiled "), 2);
    jt_rm_rf(cache);
    snprintf(args, sizeof args, "build --cache-dir %s --arch sm_90 -j2 %s", cache, src);
    char *off = run_cli("JITOP_JOB_MEM=0", args);
    assert_true(strncmp(off, "rc=0\n", 5) == 0);
    assert_null(strstr(off, "compiles at once"));
    assert_int_equal(count(off, " compiled "), 2);
    free(off);
    free(badjobs);
    free(jobs);
    free(bad);
    free(cut);
    free(cache);
    free(src);
    free(dir);
}

/* Longest first, ties in the order given. */
static void test_longest_first_order(void **state)
{
    (void)state;
    size_t tasks[6] = {10, 11, 12, 13, 14, 15};
    int64_t est[6] = {5, 900, 5, 0, 900, 7};
    jitop_cli_longest_first(tasks, est, 6);
    const size_t want[6] = {11, 14, 15, 10, 12, 13};
    const int64_t want_est[6] = {900, 900, 7, 5, 5, 0};
    for (int i = 0; i < 6; i++) {
        assert_int_equal(tasks[i], want[i]);
        assert_int_equal(est[i], want_est[i]);
    }
    jitop_cli_longest_first(tasks, est, 0); /* nothing to order */
    jitop_cli_longest_first(tasks, est, 1);
    assert_int_equal(tasks[0], 11);
}

/* With two workers and three sources, the one that reads the most bytes
 * (the fp16 and bf16 headers) is handed out first although it comes last
 * on the command line: it starts before the second small one, which waits
 * for a worker to be free. */
static void test_pool_starts_heaviest_first(void **state)
{
    (void)state;
    char *dir = jt_tmpdir(), *src = jt_path(dir, "src"), *cache = jt_path(dir, "cache");
    free(jt_write(src, "a.cu", "extern \"C\" __global__ void a(float *x) { x[0] = 1; }\n"));
    free(jt_write(src, "b.cu", "extern \"C\" __global__ void b(float *x) { x[0] = 2; }\n"));
    free(jt_write(src, "z.cu",
                  "#include <cuda_fp16.h>\n#include <cuda_bf16.h>\n"
                  "extern \"C\" __global__ void z(__half *x) { x[0] = __float2half(3.0f); }\n"));
    char args[2048];
    snprintf(args, sizeof args, "build --cache-dir %s --arch sm_90 -j2 %s/a.cu %s/b.cu %s/z.cu",
             cache, src, src, src);
    char *out = run_cli("JITOP_JOB_MEM=0 JITOP_VERBOSE=1", args);
    assert_true(strncmp(out, "rc=0\n", 5) == 0);
    char zline[4096], bline[4096];
    snprintf(zline, sizeof zline, "building %s/z.cu", src);
    snprintf(bline, sizeof bline, "building %s/b.cu", src);
    const char *z = strstr(out, zline), *b = strstr(out, bline);
    if (!z || !b || z > b)
        jt_fail_showing(out, "z.cu should start before b.cu");
    free(out);
    free(cache);
    free(src);
    free(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pool_protocol),
        cmocka_unit_test(test_mem_guard_limits),
        cmocka_unit_test(test_mem_guard_in_cli),
        cmocka_unit_test(test_pool_builds_32_sources_once),
        cmocka_unit_test(test_worker_killed_fails_its_file),
        cmocka_unit_test(test_longest_first_order),
        cmocka_unit_test(test_pool_starts_heaviest_first),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    jt_cleanup();
    return failed;
}
