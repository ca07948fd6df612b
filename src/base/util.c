/* Errors, string lists and file helpers shared by the library's files. */
#include "base/base.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* The message of the last failure, per thread: a context may be shared by
 * threads, and a message must not be overwritten by another thread's call
 * between a failure and the caller reading it. */
#define JITOP__ERRMSG_CAP 16384
static _Thread_local char errmsg[JITOP__ERRMSG_CAP];

static const char *const status_names[JITOP_STATUS_COUNT] = {
    [JITOP_OK] = "success",
    [JITOP_EINVAL] = "invalid argument",
    [JITOP_ENOMEM] = "out of memory",
    [JITOP_EIO] = "file input/output error",
    [JITOP_ECOMPILE] = "compile error",
    [JITOP_ENVRTC] = "NVRTC failure",
    [JITOP_ENODRIVER] = "no CUDA driver or device",
    [JITOP_ECUDA] = "CUDA driver error",
    [JITOP_ENOTFOUND] = "not found",
    [JITOP_EARGS] = "launch arguments do not match the kernel",
    [JITOP_EUNSAFE] = "unsafe cache directory",
    [JITOP_ESTALE] = "op changed or vanished after a reload",
    [JITOP_ENOTSUP] = "not supported",
};

const char *jitop_strerror(int status)
{
    if (status < 0 || status >= JITOP_STATUS_COUNT || !status_names[status])
        return "unknown jitop status";
    return status_names[status];
}

const char *jitop_errmsg(const jitop_ctx *ctx)
{
    (void)ctx;
    return errmsg;
}

void jitop_free(void *p)
{
    free(p);
}

int jitop__fail(int status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(errmsg, sizeof errmsg, fmt, ap);
    va_end(ap);
    return status;
}

int jitop__fail_prefix(int status, const char *fmt, ...)
{
    char prefix[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    /* Shift the old message right to make room; its tail is cut when the
     * whole would not fit. */
    size_t pl = strlen(prefix) + 2, ol = strlen(errmsg);
    if (pl + ol >= sizeof errmsg)
        ol = sizeof errmsg - 1 - pl;
    memmove(errmsg + pl, errmsg, ol);
    errmsg[pl + ol] = '\0';
    memcpy(errmsg, prefix, pl - 2);
    errmsg[pl - 2] = ':';
    errmsg[pl - 1] = ' ';
    return status;
}

void jitop__clear_error(void)
{
    errmsg[0] = '\0';
}

void jitop__vlog(const char *fmt, va_list ap)
{
    fputs("jitop: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
}

void jitop__log(const jitop_ctx *ctx, const char *fmt, ...)
{
    if (ctx && !ctx->verbose)
        return;
    va_list ap;
    va_start(ap, fmt);
    jitop__vlog(fmt, ap);
    va_end(ap);
}

char *jitop__strdup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *p = malloc(n);
    if (p)
        memcpy(p, s, n);
    return p;
}

char *jitop__escape(const char *s)
{
    size_t n = 1;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '\\' || *p == '\n' || *p == '\t' || *p == '\r')
            n += 2;
        else
            n += *p < 0x20 || *p == 0x7f ? 4 : 1;
    }
    char *out = malloc(n), *o = out;
    if (!out)
        return NULL;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        switch (*p) {
        case '\\': *o++ = '\\'; *o++ = '\\'; break;
        case '\n': *o++ = '\\'; *o++ = 'n'; break;
        case '\t': *o++ = '\\'; *o++ = 't'; break;
        case '\r': *o++ = '\\'; *o++ = 'r'; break;
        default:
            if (*p < 0x20 || *p == 0x7f) {
                static const char hex[] = "0123456789abcdef";
                *o++ = '\\';
                *o++ = 'x';
                *o++ = hex[*p >> 4];
                *o++ = hex[*p & 15];
            } else {
                *o++ = (char)*p;
            }
        }
    }
    *o = '\0';
    return out;
}

static char *vformat(const char *fmt, va_list ap)
{
    va_list ap2;
    va_copy(ap2, ap);
    int n = vsnprintf(NULL, 0, fmt, ap2);
    va_end(ap2);
    if (n < 0)
        return NULL;
    char *p = malloc((size_t)n + 1);
    if (p)
        vsnprintf(p, (size_t)n + 1, fmt, ap);
    return p;
}

char *jitop__sprintf(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *p = vformat(fmt, ap);
    va_end(ap);
    return p;
}

static int strv_take(jitop__strv *sv, char *s)
{
    if (!s)
        return jitop__fail(JITOP_ENOMEM, "out of memory");
    if (sv->n == sv->cap) {
        size_t cap = sv->cap ? sv->cap * 2 : 8;
        char **v = realloc(sv->v, cap * sizeof *v);
        if (!v) {
            free(s);
            return jitop__fail(JITOP_ENOMEM, "out of memory");
        }
        sv->v = v;
        sv->cap = cap;
    }
    sv->v[sv->n++] = s;
    return JITOP_OK;
}

int jitop__strv_push(jitop__strv *sv, const char *s)
{
    return strv_take(sv, jitop__strdup(s));
}

int jitop__strv_pushf(jitop__strv *sv, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *p = vformat(fmt, ap);
    va_end(ap);
    return strv_take(sv, p);
}

void jitop__strv_free(jitop__strv *sv)
{
    if (!sv)
        return;
    for (size_t i = 0; i < sv->n; i++)
        free(sv->v[i]);
    free(sv->v);
    sv->v = NULL;
    sv->n = sv->cap = 0;
}

char *jitop__strv_join(const jitop__strv *sv, const char *sep)
{
    size_t seplen = strlen(sep), total = 1;
    for (size_t i = 0; i < sv->n; i++)
        total += strlen(sv->v[i]) + (i ? seplen : 0);
    char *out = malloc(total), *p = out;
    if (!out)
        return NULL;
    for (size_t i = 0; i < sv->n; i++) {
        if (i) {
            memcpy(p, sep, seplen);
            p += seplen;
        }
        size_t n = strlen(sv->v[i]);
        memcpy(p, sv->v[i], n);
        p += n;
    }
    *p = '\0';
    return out;
}

static const char *file_type_name(mode_t m)
{
    return S_ISFIFO(m) ? "a FIFO"
           : S_ISDIR(m) ? "a directory"
           : S_ISCHR(m) ? "a character device"
           : S_ISBLK(m) ? "a block device"
           : S_ISSOCK(m) ? "a socket"
                         : "not a regular file";
}

int jitop__open_regular(const char *path, int *fd, struct stat *st)
{
    *fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (*fd < 0)
        return jitop__fail(errno == ENOENT ? JITOP_ENOTFOUND : JITOP_EIO, "%s: %s", path,
                           strerror(errno));
    int status = JITOP_OK;
    if (fstat(*fd, st) != 0)
        status = jitop__fail(JITOP_EIO, "%s: fstat: %s", path, strerror(errno));
    else if (!S_ISREG(st->st_mode))
        status = jitop__fail(JITOP_EIO, "%s: not a regular file (%s): refused, since reading it "
                                        "may block or never end",
                             path, file_type_name(st->st_mode));
    if (status != JITOP_OK) {
        /* Nothing was read: a close error changes nothing. */
        (void)close(*fd);
        *fd = -1;
    }
    return status;
}

int jitop__read_upto(int fd, void *buf, size_t size, size_t *got)
{
    *got = 0;
    while (*got < size) {
        ssize_t r = read(fd, (char *)buf + *got, size - *got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return -1;
        if (r == 0)
            break;
        *got += (size_t)r;
    }
    return 0;
}

int jitop__read_file(const char *path, char **data, size_t *len)
{
    int status = JITOP_OK, fd = -1;
    char *buf = NULL;
    struct stat st;
    status = jitop__open_regular(path, &fd, &st);
    if (status != JITOP_OK)
        return status;
    size_t size = (size_t)st.st_size, got = 0;
    buf = malloc(size + 1);
    if (!buf) {
        status = jitop__fail(JITOP_ENOMEM, "%s: out of memory reading %zu bytes", path, size);
        goto out;
    }
    /* The file may shrink or grow while it is read (an editor saving): read
     * what is there now and stop at the end. */
    if (jitop__read_upto(fd, buf, size, &got) != 0) {
        status = jitop__fail(JITOP_EIO, "%s: read: %s", path, strerror(errno));
        goto out;
    }
    buf[got] = '\0';
    *data = buf;
    if (len)
        *len = got;
    buf = NULL;
out:
    free(buf);
    if (close(fd) != 0 && status == JITOP_OK)
        status = jitop__fail(JITOP_EIO, "%s: close: %s", path, strerror(errno));
    return status;
}

void jitop__last_link_target(const char *path, char *out, size_t cap)
{
    char next[PATH_MAX], target[PATH_MAX];
    snprintf(out, cap, "%s", path);
    for (int hops = 0; hops < 16; hops++) { /* a loop of links ends the walk */
        ssize_t n = readlink(out, target, sizeof target - 1);
        if (n < 0)
            return; /* EINVAL: not a link, out is the file; else keep what we have */
        target[n] = '\0';
        const char *slash = strrchr(out, '/');
        int len = target[0] == '/' || !slash
                      ? snprintf(next, sizeof next, "%s", target)
                      : snprintf(next, sizeof next, "%.*s/%s", (int)(slash - out), out, target);
        if (len < 0 || (size_t)len >= sizeof next || (size_t)len >= cap)
            return;
        memcpy(out, next, (size_t)len + 1);
    }
}

/* Drops "." components and repeated slashes of an absolute path, which
 * never changes the file the kernel opens (a link stays a link), into a new
 * string. ".." components are kept: see jitop__abspath. NULL on ENOMEM. */
static char *drop_dots(const char *abs)
{
    char *out = malloc(strlen(abs) + 2);
    if (!out)
        return NULL;
    size_t n = 0;
    const char *p = abs;
    while (*p) {
        while (*p == '/')
            p++;
        const char *seg = p;
        while (*p && *p != '/')
            p++;
        size_t len = (size_t)(p - seg);
        if (len == 0 || (len == 1 && seg[0] == '.'))
            continue;
        out[n++] = '/';
        memcpy(out + n, seg, len);
        n += len;
    }
    if (n == 0)
        out[n++] = '/';
    out[n] = '\0';
    return out;
}

/* The end of the last ".." component of an absolute path, NULL if none. */
static const char *last_dotdot_end(const char *abs)
{
    const char *found = NULL;
    for (const char *p = abs; *p;) {
        while (*p == '/')
            p++;
        const char *seg = p;
        while (*p && *p != '/')
            p++;
        if (p - seg == 2 && seg[0] == '.' && seg[1] == '.')
            found = p;
    }
    return found;
}

/* The kernel resolves ".." after following the link before it: with
 * lnk -> x/y, "lnk/../a.cu" is x/a.cu, not ./a.cu. So a ".." is never
 * dropped as text: the part of the path up to the last ".." is resolved by
 * realpath (which asks the kernel), and the rest, free of "..", is kept as
 * written so that the user's names (a symlinked kernel directory, a header
 * that is a link) stay in messages and keys. A path whose ".." part does not
 * exist keeps it: the kernel fails on it the same way at every open. */
char *jitop__abspath(const char *path)
{
    char *joined, *resolved = NULL, *out = NULL;
    if (path[0] == '/') {
        joined = jitop__strdup(path);
    } else {
        char cwd[PATH_MAX];
        if (!getcwd(cwd, sizeof cwd))
            return NULL; /* errno says why: ENOENT for a deleted directory */
        joined = jitop__sprintf("%s/%s", cwd, path);
    }
    if (!joined) {
        errno = ENOMEM;
        return NULL;
    }
    const char *dotdot = last_dotdot_end(joined);
    if (dotdot) {
        char *prefix = jitop__sprintf("%.*s", (int)(dotdot - joined), joined);
        if (!prefix) {
            free(joined);
            errno = ENOMEM;
            return NULL;
        }
        char *real = realpath(prefix, NULL);
        int err = errno;
        free(prefix);
        if (!real && err == ENOMEM) {
            free(joined);
            errno = ENOMEM;
            return NULL;
        }
        if (real) {
            resolved = jitop__sprintf("%s/%s", real, dotdot);
            free(real);
            if (!resolved) {
                free(joined);
                errno = ENOMEM;
                return NULL;
            }
        }
    }
    out = drop_dots(resolved ? resolved : joined);
    free(resolved);
    free(joined);
    if (!out)
        errno = ENOMEM;
    return out;
}

int jitop__fail_abspath(const char *path)
{
    int e = errno;
    if (e == ENOMEM)
        return jitop__fail(JITOP_ENOMEM, "out of memory");
    return jitop__fail(JITOP_EIO, "cannot resolve %s: the current directory: %s", path,
                       strerror(e));
}

char *jitop__dirname(const char *path)
{
    const char *slash = strrchr(path, '/');
    size_t n = !slash ? 0 : slash == path ? 1 : (size_t)(slash - path);
    char *d = malloc(n + 1);
    if (d) {
        memcpy(d, path, n);
        d[n] = '\0';
    }
    return d;
}

double jitop__now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

void jitop__hash_hex(XXH128_hash_t h, char out[33])
{
    snprintf(out, 33, "%016llx%016llx", (unsigned long long)h.high64,
             (unsigned long long)h.low64);
}

size_t jitop_dtype_size(jitop_dtype dtype)
{
    switch (dtype) {
    case JITOP_FLOAT32: return 4;
    case JITOP_FLOAT16: return 2;
    case JITOP_BFLOAT16: return 2;
    case JITOP_FLOAT64: return 8;
    }
    return 0;
}

int jitop__arch_major(const char *arch)
{
    const int cc = jitop__arch_cc(arch);
    return cc < 0 ? -1 : cc / 10;
}

int jitop__arch_cc(const char *arch)
{
    const char *p = NULL;
    if (arch && strncmp(arch, "sm_", 3) == 0)
        p = arch + 3;
    else if (arch && strncmp(arch, "compute_", 8) == 0)
        p = arch + 8;
    if (!p || !isdigit((unsigned char)p[0]) || !isdigit((unsigned char)p[1]))
        return -1;
    int v = 0, digits = 0;
    for (; isdigit((unsigned char)*p) && digits < 4; p++, digits++)
        v = v * 10 + (*p - '0');
    return digits <= 3 ? v : -1;
}
