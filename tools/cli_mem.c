/*
 * The memory guard of `jitop build`'s workers: no more compiles at once than
 * the memory the kernel says it can give without swapping (MemAvailable in
 * /proc/meminfo) holds, at an estimated peak per compile. What -j alone
 * cannot know on a small machine, as torch's MAX_JOBS leaves to the user.
 *
 * The default estimate, JITOP_CLI_JOB_MEM_DEFAULT, was measured with NVRTC 13.0
 * (peak resident set of a process that compiles one source for sm_90, less
 * its size with NVRTC loaded, which the forked workers share): 42 MiB for
 * bench/kernels/saxpy.cu and 40 MiB for kernels/layernorm.cu, 256 MiB for a
 * kernel including <cooperative_groups.h> and <cub/block/block_reduce.cuh>.
 * The default takes the heavy one with half again as a margin.
 */
#include "cli.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

int64_t jitop_cli_meminfo_available(const char *text)
{
    for (const char *line = text; line && *line;) {
        if (strncmp(line, "MemAvailable:", 13) == 0) {
            char *end;
            errno = 0;
            unsigned long long kib = strtoull(line + 13, &end, 10);
            while (*end == ' ' || *end == '\t')
                end++;
            if (errno != 0 || end == line + 13 || strncmp(end, "kB", 2) != 0 ||
                kib > (unsigned long long)INT64_MAX / 1024)
                return -1;
            return (int64_t)kib * 1024;
        }
        line = strchr(line, '\n');
        if (line)
            line++;
    }
    return -1;
}

int jitop_cli_mem_jobs(int want, int64_t avail, int64_t per_job)
{
    if (want < 1)
        want = 1;
    if (avail < 0 || per_job <= 0)
        return want; /* unknown memory, or the guard turned off */
    int64_t fit = avail / per_job;
    if (fit < 1)
        return 1; /* one compile always runs: -j1 is what the user gets today */
    return fit < want ? (int)fit : want;
}

int64_t jitop_cli_mem_available(const char *path)
{
    FILE *f = fopen(path, "r");
    char buf[8192];
    size_t n;
    if (!f)
        return -1;
    n = fread(buf, 1, sizeof buf - 1, f);
    int bad = ferror(f);
    if (fclose(f) != 0 || bad)
        return -1;
    buf[n] = '\0';
    return jitop_cli_meminfo_available(buf);
}
