/* A unit's dependency list: include scanning, stat data, content hashes and
 * the stat fast path. */
#include "compile/compile.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static int64_t mtime_ns_of(const struct stat *st)
{
    return (int64_t)st->st_mtim.tv_sec * 1000000000 + st->st_mtim.tv_nsec;
}

/* File times are wall-clock times, so this is the clock they are compared
 * with. */
static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Reads a file and records its stat data. The stat is taken on the open
 * descriptor BEFORE reading: if the file changes while it is read, the
 * recorded stat is the older one and the next fast-path check sees a
 * difference and hashes again. The other order could record a new stat
 * beside old contents and trust them forever. The clock is read after the
 * stat, so that "recent" is judged against a time no earlier than the
 * recording. */
static int read_dep(const char *path, jitop__dep *dep, char **data, size_t *len)
{
    int status = JITOP_OK;
    char *buf = NULL;
    size_t cap = 0, n = 0;
    int fd = -1;
    struct stat st;
    status = jitop__open_regular(path, &fd, &st);
    if (status != JITOP_OK)
        return status;
    cap = (size_t)st.st_size + 1;
    buf = malloc(cap);
    if (!buf) {
        status = jitop__fail(JITOP_ENOMEM, "%s: out of memory", path);
        goto out;
    }
    for (;;) {
        if (n + 1 >= cap) { /* the file grew while it was read */
            cap = cap * 2;
            char *p = realloc(buf, cap);
            if (!p) {
                status = jitop__fail(JITOP_ENOMEM, "%s: out of memory", path);
                goto out;
            }
            buf = p;
        }
        ssize_t got = read(fd, buf + n, cap - 1 - n);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0) {
            status = jitop__fail(JITOP_EIO, "%s: read: %s", path, strerror(errno));
            goto out;
        }
        if (got == 0)
            break;
        n += (size_t)got;
    }
    buf[n] = '\0';
    dep->size = (int64_t)st.st_size;
    dep->mtime_ns = mtime_ns_of(&st);
    dep->recent = dep->mtime_ns >= now_ns() - JITOP__RECENT_WINDOW_NS;
    dep->ino = (uint64_t)st.st_ino;
    dep->dev = (uint64_t)st.st_dev;
    dep->hash = XXH3_128bits(buf, n);
    *data = buf;
    *len = n;
    buf = NULL;
out:
    free(buf);
    if (close(fd) != 0 && status == JITOP_OK)
        status = jitop__fail(JITOP_EIO, "%s: close: %s", path, strerror(errno));
    return status;
}

/* One #include directive found by the scanner. */
struct include {
    char *name;
    bool quoted; /* "..." rather than <...> */
};

struct include_list {
    struct include *v;
    size_t n, cap;
};

static void include_list_free(struct include_list *l)
{
    for (size_t i = 0; i < l->n; i++)
        free(l->v[i].name);
    free(l->v);
    memset(l, 0, sizeof *l);
}

static int include_list_add(struct include_list *l, const char *name, size_t len, bool quoted)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 16;
        struct include *v = realloc(l->v, cap * sizeof *v);
        if (!v)
            return JITOP_ENOMEM;
        l->v = v;
        l->cap = cap;
    }
    char *s = malloc(len + 1);
    if (!s)
        return JITOP_ENOMEM;
    memcpy(s, name, len);
    s[len] = '\0';
    l->v[l->n].name = s;
    l->v[l->n].quoted = quoted;
    l->n++;
    return JITOP_OK;
}

/* Parses the directive after a '#' at the start of a line; p points just
 * past the '#'. Adds the header name if it is an #include with a literal
 * name (#include MACRO cannot be resolved without preprocessing: skipped). */
static int parse_directive(const char *p, const char *end, struct include_list *out)
{
    while (p < end && (*p == ' ' || *p == '\t'))
        p++;
    if ((size_t)(end - p) < 7 || strncmp(p, "include", 7) != 0)
        return JITOP_OK;
    p += 7;
    while (p < end && (*p == ' ' || *p == '\t'))
        p++;
    if (p >= end || (*p != '"' && *p != '<'))
        return JITOP_OK;
    char close = *p == '"' ? '"' : '>';
    const char *name = ++p;
    while (p < end && *p != close && *p != '\n')
        p++;
    if (p >= end || *p != close || p == name)
        return JITOP_OK;
    return include_list_add(out, name, (size_t)(p - name), close == '"');
}

/* Finds the #include directives of a text. Comments, string and character
 * literals are skipped, so that a commented-out include or "#include" inside
 * a string is not a dependency. Directives inside #if 0 blocks are still
 * taken: a few extra headers only make the key more conservative. */
static int scan_includes(const char *text, size_t len, struct include_list *out)
{
    const char *p = text, *end = text + len;
    bool line_start = true;
    while (p < end) {
        char c = *p;
        if (c == '\n') {
            line_start = true;
            p++;
        } else if (c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v') {
            p++;
        } else if (c == '\\' && p + 1 < end && p[1] == '\n') {
            p += 2; /* a line continuation keeps the logical line */
        } else if (c == '/' && p + 1 < end && p[1] == '/') {
            while (p < end && *p != '\n')
                p++;
        } else if (c == '/' && p + 1 < end && p[1] == '*') {
            /* A block comment counts as whitespace: line_start is kept, so
             * that a directive after a comment on the same line is found. */
            p += 2;
            while (p + 1 < end && !(p[0] == '*' && p[1] == '/')) {
                if (*p == '\n')
                    line_start = true;
                p++;
            }
            p = p + 1 < end ? p + 2 : end;
        } else if (c == '"' || c == '\'') {
            p++;
            while (p < end && *p != c && *p != '\n') {
                if (*p == '\\' && p + 1 < end)
                    p++;
                p++;
            }
            if (p < end && *p == c)
                p++;
            line_start = false;
        } else if (c == '#' && line_start) {
            int rc = parse_directive(p + 1, end, out);
            if (rc != JITOP_OK)
                return rc;
            while (p < end && *p != '\n')
                p++;
        } else {
            line_start = false;
            p++;
        }
    }
    return JITOP_OK;
}

/* Whether the search stops at path: a regular file, or anything else but a
 * directory (which a preprocessor's search passes over). A FIFO or device
 * is then refused by read_dep, naming it, rather than skipped: NVRTC would
 * open it and block. */
static bool is_regular_file(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && !S_ISDIR(st.st_mode);
}

/* Where the preprocessor would find name: "..." first beside the including
 * file, then in the include dirs; <...> in the include dirs. NULL: nowhere
 * (one of NVRTC's built-in headers, covered by the NVRTC version in the key).
 * On ENOMEM returns NULL too and sets *oom. */
static char *resolve_include(const struct include *inc, const char *cur_dir,
                             const jitop__strv *dirs, bool *oom)
{
    if (inc->name[0] == '/') {
        if (!is_regular_file(inc->name))
            return NULL;
        char *abs = jitop__abspath(inc->name);
        *oom = abs == NULL;
        return abs;
    }
    size_t ndirs = dirs->n + (inc->quoted && cur_dir ? 1 : 0);
    for (size_t i = 0; i < ndirs; i++) {
        const char *dir = inc->quoted && cur_dir ? (i == 0 ? cur_dir : dirs->v[i - 1]) : dirs->v[i];
        char *joined = jitop__sprintf("%s/%s", dir, inc->name);
        if (!joined) {
            *oom = true;
            return NULL;
        }
        if (is_regular_file(joined)) {
            char *abs = jitop__abspath(joined);
            free(joined);
            *oom = abs == NULL;
            return abs;
        }
        free(joined);
    }
    return NULL;
}

const jitop__dep *jitop__deps_find(const jitop__deps *d, const char *path)
{
    for (size_t i = 0; i < d->n; i++)
        if (strcmp(d->v[i].path, path) == 0)
            return &d->v[i];
    return NULL;
}

/* Appends a dep with only its path set (ownership of path moves). */
static int deps_append(jitop__deps *d, size_t *cap, char *path)
{
    if (d->n == *cap) {
        size_t ncap = *cap ? *cap * 2 : 8;
        jitop__dep *v = realloc(d->v, ncap * sizeof *v);
        if (!v) {
            free(path);
            return jitop__fail(JITOP_ENOMEM, "out of memory");
        }
        d->v = v;
        *cap = ncap;
    }
    memset(&d->v[d->n], 0, sizeof d->v[d->n]);
    d->v[d->n++].path = path;
    return JITOP_OK;
}

/* Resolves the includes of one text (whose own directory is cur_dir, NULL
 * for inline text) and appends every new header to d. The list doubles as
 * the visited set: a header is scanned once however often it is included,
 * which also ends include cycles. */
static int add_includes(const jitop__unit *u, const char *text, size_t len, const char *cur_dir,
                        jitop__deps *d, size_t *cap)
{
    struct include_list incs = {0};
    int status = scan_includes(text, len, &incs);
    if (status != JITOP_OK) {
        status = jitop__fail(JITOP_ENOMEM, "out of memory");
        goto out;
    }
    for (size_t i = 0; i < incs.n; i++) {
        bool oom = false;
        char *path = resolve_include(&incs.v[i], cur_dir, &u->include_dirs, &oom);
        if (oom) {
            status = jitop__fail(JITOP_ENOMEM, "out of memory");
            goto out;
        }
        if (!path)
            continue;
        if (jitop__deps_find(d, path)) {
            free(path);
            continue;
        }
        status = deps_append(d, cap, path);
        if (status != JITOP_OK)
            goto out;
    }
out:
    include_list_free(&incs);
    return status;
}

int jitop__deps_scan(const jitop__unit *u, jitop__deps *out, char **text)
{
    int status = JITOP_OK;
    jitop__deps d = {0};
    size_t cap = 0;
    char *source_text = NULL;
    memset(out, 0, sizeof *out);
    *text = NULL;

    size_t next = 0; /* the first dep whose includes are not scanned yet */
    if (u->source_path) {
        char *p = jitop__strdup(u->source_path);
        status = p ? deps_append(&d, &cap, p) : jitop__fail(JITOP_ENOMEM, "out of memory");
        if (status != JITOP_OK)
            goto out;
    } else {
        source_text = jitop__strdup(u->inline_text ? u->inline_text : "");
        if (!source_text) {
            status = jitop__fail(JITOP_ENOMEM, "out of memory");
            goto out;
        }
        status = add_includes(u, source_text, strlen(source_text), NULL, &d, &cap);
        if (status != JITOP_OK)
            goto out;
    }
    for (; next < d.n; next++) {
        char *data = NULL, *dir = NULL;
        size_t len = 0;
        status = read_dep(d.v[next].path, &d.v[next], &data, &len);
        if (status != JITOP_OK) {
            if (next > 0 || !u->source_path)
                jitop__fail_prefix(status, "header of %s",
                                   u->source_path ? u->source_path : u->source_name);
            goto out;
        }
        dir = jitop__dirname(d.v[next].path);
        status = dir ? add_includes(u, data, len, dir, &d, &cap)
                     : jitop__fail(JITOP_ENOMEM, "out of memory");
        free(dir);
        if (next == 0 && u->source_path)
            source_text = data;
        else
            free(data);
        if (status != JITOP_OK)
            goto out;
    }
    *out = d;
    memset(&d, 0, sizeof d);
    *text = source_text;
    source_text = NULL;
out:
    jitop__deps_free(&d);
    free(source_text);
    return status;
}

/* How a file compares with its record, from the stat data alone. */
enum stat_verdict {
    STAT_SAME,   /* the record vouches for the contents */
    STAT_RECENT, /* nothing differs, but the record is recent: only a hash can tell */
    STAT_GONE,   /* stat failed (errno kept in *err) */
    STAT_SIZE,
    STAT_INODE,
    STAT_MTIME,
};

static enum stat_verdict compare_stat(const jitop__dep *dep, struct stat *st, int *err)
{
    if (stat(dep->path, st) != 0) {
        *err = errno;
        return STAT_GONE;
    }
    if ((int64_t)st->st_size != dep->size)
        return STAT_SIZE;
    if ((uint64_t)st->st_ino != dep->ino || (uint64_t)st->st_dev != dep->dev)
        return STAT_INODE;
    if (dep->mtime_ns != JITOP__MTIME_UNKNOWN && mtime_ns_of(st) != dep->mtime_ns)
        return STAT_MTIME;
    return dep->recent ? STAT_RECENT : STAT_SAME;
}

int jitop__deps_fresh(const jitop__deps *d, bool *fresh, char **why)
{
    *fresh = false;
    if (why)
        *why = NULL;
    char *reason = NULL;
    for (size_t i = 0; i < d->n && !reason; i++) {
        const jitop__dep *dep = &d->v[i];
        struct stat st;
        int err = 0;
        switch (compare_stat(dep, &st, &err)) {
        case STAT_SAME:
            continue;
        case STAT_GONE:
            reason = err == ENOENT ? jitop__sprintf("%s: removed", dep->path)
                                   : jitop__sprintf("%s: stat: %s", dep->path, strerror(err));
            break;
        case STAT_SIZE:
            reason = jitop__sprintf("%s: size changed (%lld -> %lld bytes)", dep->path,
                                    (long long)dep->size, (long long)st.st_size);
            break;
        case STAT_INODE:
            reason = jitop__sprintf("%s: replaced by another file (inode changed)", dep->path);
            break;
        case STAT_MTIME:
            reason = jitop__sprintf("%s: modification time changed", dep->path);
            break;
        case STAT_RECENT:
            reason = jitop__sprintf("%s: saved within 2 s of when it was last scanned "
                                    "(timestamp granularity), so its contents are checked",
                                    dep->path);
            break;
        }
        if (!reason)
            return jitop__fail(JITOP_ENOMEM, "out of memory");
    }
    *fresh = reason == NULL;
    if (why)
        *why = reason;
    else
        free(reason);
    return JITOP_OK;
}

int jitop__deps_changed(const jitop__deps *d, char **changed)
{
    *changed = NULL;
    for (size_t i = 0; i < d->n; i++) {
        const jitop__dep *dep = &d->v[i];
        struct stat st;
        int err = 0;
        enum stat_verdict v = compare_stat(dep, &st, &err);
        bool differs = v != STAT_SAME;
        if (v == STAT_RECENT) {
            char *data = NULL;
            size_t len = 0;
            if (jitop__read_file(dep->path, &data, &len) != JITOP_OK) {
                jitop__clear_error(); /* unreadable now: changed, and the rebuild says why */
            } else {
                differs = !XXH128_isEqual(XXH3_128bits(data, len), dep->hash);
            }
            free(data);
        }
        if (differs) {
            *changed = jitop__strdup(dep->path);
            return *changed ? JITOP_OK : jitop__fail(JITOP_ENOMEM, "out of memory");
        }
    }
    return JITOP_OK;
}

void jitop__deps_free(jitop__deps *d)
{
    if (!d)
        return;
    for (size_t i = 0; i < d->n; i++)
        free(d->v[i].path);
    free(d->v);
    d->v = NULL;
    d->n = 0;
}

int jitop__deps_copy(const jitop__deps *from, jitop__deps *to)
{
    memset(to, 0, sizeof *to);
    if (from->n == 0)
        return JITOP_OK;
    if (!(to->v = calloc(from->n, sizeof *to->v)))
        return jitop__fail(JITOP_ENOMEM, "out of memory");
    for (size_t i = 0; i < from->n; i++, to->n++) {
        to->v[i] = from->v[i];
        if (!(to->v[i].path = jitop__strdup(from->v[i].path))) {
            jitop__deps_free(to);
            return jitop__fail(JITOP_ENOMEM, "out of memory");
        }
    }
    return JITOP_OK;
}
