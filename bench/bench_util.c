#include "bench_util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

double bench_now_ms(void)
{
    struct timespec ts;
    /* CLOCK_MONOTONIC cannot fail with a valid clock id and pointer. */
    (void)clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double percentile(const double *sorted, size_t n, double q)
{
    double pos = q * (double)(n - 1);
    size_t lo = (size_t)pos;
    size_t hi = lo + 1 < n ? lo + 1 : lo;
    double frac = pos - (double)lo;
    return sorted[lo] + (sorted[hi] - sorted[lo]) * frac;
}

void bench_stats_of(double *samples, size_t n, bench_stats *st)
{
    memset(st, 0, sizeof *st);
    st->n = n;
    if (n == 0)
        return;
    qsort(samples, n, sizeof *samples, cmp_double);
    st->median = percentile(samples, n, 0.5);
    st->p10 = percentile(samples, n, 0.1);
    st->p90 = percentile(samples, n, 0.9);
    st->min = samples[0];
    st->max = samples[n - 1];
}

/* Writes s as a JSON string (quotes included). */
static void put_json_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p; p++) {
        if (*p == '"' || *p == '\\')
            fprintf(f, "\\%c", *p);
        else if (*p == '\n')
            fputs("\\n", f);
        else if (*p == '\t')
            fputs("\\t", f);
        else if (*p < 0x20)
            fprintf(f, "\\u%04x", *p);
        else
            fputc(*p, f);
    }
    fputc('"', f);
}

static void put_head(const char *area, const char *kernel, const char *system, const char *what)
{
    fputs("{\"area\":", stdout);
    put_json_string(stdout, area);
    fputs(",\"kernel\":", stdout);
    put_json_string(stdout, kernel);
    fputs(",\"system\":", stdout);
    put_json_string(stdout, system);
    fputs(",\"what\":", stdout);
    put_json_string(stdout, what);
}

static int finish_line(void)
{
    fputs("}\n", stdout);
    /* Flushed per line: a later crash or timeout keeps what was measured. */
    return (fflush(stdout) == 0 && !ferror(stdout)) ? 0 : -1;
}

static int emit(const char *area, const char *kernel, const char *system, const char *what,
                const char *unit, double *samples, size_t n, int detail)
{
    bench_stats st;
    bench_stats_of(samples, n, &st);
    put_head(area, kernel, system, what);
    fputs(",\"unit\":", stdout);
    put_json_string(stdout, unit);
    fprintf(stdout, ",\"median\":%.6g,\"p10\":%.6g,\"p90\":%.6g,\"min\":%.6g,\"max\":%.6g,\"n\":%zu",
            st.median, st.p10, st.p90, st.min, st.max, st.n);
    fputs(",\"samples\":[", stdout);
    for (size_t i = 0; i < n; i++)
        fprintf(stdout, "%s%.6g", i ? "," : "", samples[i]);
    fputc(']', stdout);
    if (detail)
        fputs(",\"detail\":true", stdout);
    return finish_line();
}

int bench_emit(const char *area, const char *kernel, const char *system, const char *what,
               const char *unit, double *samples, size_t n)
{
    return emit(area, kernel, system, what, unit, samples, n, 0);
}

int bench_emit_detail(const char *area, const char *kernel, const char *system, const char *what,
                      const char *unit, double *samples, size_t n)
{
    return emit(area, kernel, system, what, unit, samples, n, 1);
}

int bench_emit_status(const char *area, const char *kernel, const char *system, const char *what,
                      const char *status, const char *reason)
{
    put_head(area, kernel, system, what);
    fputs(",\"status\":", stdout);
    put_json_string(stdout, status);
    fputs(",\"reason\":", stdout);
    put_json_string(stdout, reason);
    return finish_line();
}

int bench_emit_env(const char *key, const char *value)
{
    fputs("{\"area\":\"env\",\"key\":", stdout);
    put_json_string(stdout, key);
    fputs(",\"value\":", stdout);
    put_json_string(stdout, value);
    return finish_line();
}

const char *bench_mode(void)
{
    const char *m = getenv("JITOP_BENCH_MODE");
    if (m && (strcmp(m, "quick") == 0 || strcmp(m, "smoke") == 0))
        return m;
    return "full";
}

int bench_reps(int full, int quick, int smoke)
{
    const char *m = bench_mode();
    if (strcmp(m, "smoke") == 0)
        return smoke;
    if (strcmp(m, "quick") == 0)
        return quick;
    return full;
}

int bench_read_file(const char *path, char **text, size_t *len)
{
    int rc = -1;
    char *buf = NULL;
    FILE *f = fopen(path, "rb");
    *text = NULL;
    if (!f)
        goto out;
    if (fseek(f, 0, SEEK_END) != 0)
        goto out;
    long size = ftell(f);
    if (size < 0 || fseek(f, 0, SEEK_SET) != 0)
        goto out;
    buf = malloc((size_t)size + 1);
    if (!buf)
        goto out;
    if (fread(buf, 1, (size_t)size, f) != (size_t)size)
        goto out;
    buf[size] = '\0';
    if (len)
        *len = (size_t)size;
    *text = buf;
    buf = NULL;
    rc = 0;
out:
    free(buf);
    if (f && fclose(f) != 0)
        rc = -1;
    return rc;
}

int bench_write_file(const char *path, const char *text, size_t len)
{
    int rc = -1;
    int fd = -1;
    char tmp[4096];
    if (snprintf(tmp, sizeof tmp, "%s.benchtmp%ld", path, (long)getpid()) >= (int)sizeof tmp) {
        errno = ENAMETOOLONG;
        return -1;
    }
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0)
        goto out;
    for (size_t off = 0; off < len;) {
        ssize_t w = write(fd, text + off, len - off);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            goto out;
        }
        off += (size_t)w;
    }
    if (fsync(fd) != 0)
        goto out;
    int cfd = fd;
    fd = -1;
    if (close(cfd) != 0)
        goto out;
    if (rename(tmp, path) != 0)
        goto out;
    rc = 0;
out:
    if (fd >= 0)
        (void)close(fd);
    if (rc != 0)
        (void)unlink(tmp);
    return rc;
}
