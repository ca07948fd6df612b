/* A unit's dependency list: the files its directives name, resolved as
 * NVRTC resolves them, recursively from the source (the directives
 * themselves are found by scan.c, what a macro names by macros.c); safe mode
 * for a directive only a preprocessor can resolve; and the directories
 * where a name was looked for and not found. Each file is read and hashed
 * by deps.c. */
#include "compile/compile.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Per dep, what the scan knows of it beyond the record. */
enum {
    DEP_EMBED = 1,  /* #embed: hashed, not scanned */
    DEP_FOLDER = 2, /* found by safe mode's walk: skipped if it cannot be read */
    DEP_DROP = 4,   /* a folder file that could not be read: removed at the end */
};

/* A set of paths (open addressing on their hash): the deps already listed,
 * so that a unit of thousands of headers is not quadratic. */
struct path_set {
    const char **v; /* borrowed from the deps */
    size_t cap, n;
};

static bool path_set_has(const struct path_set *s, const char *path)
{
    if (!s->cap)
        return false;
    for (size_t i = XXH3_64bits(path, strlen(path)) & (s->cap - 1); s->v[i];
         i = (i + 1) & (s->cap - 1))
        if (strcmp(s->v[i], path) == 0)
            return true;
    return false;
}

static int path_set_add(struct path_set *s, const char *path)
{
    if (2 * (s->n + 1) > s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 64;
        struct path_set g = {calloc(cap, sizeof *g.v), cap, 0};
        if (!g.v)
            return JITOP_ENOMEM;
        for (size_t i = 0; i < s->cap; i++)
            if (s->v[i])
                path_set_add(&g, s->v[i]); /* cannot grow again */
        free(s->v);
        *s = g;
    }
    size_t i = XXH3_64bits(path, strlen(path)) & (s->cap - 1);
    while (s->v[i])
        i = (i + 1) & (s->cap - 1);
    s->v[i] = path;
    s->n++;
    return JITOP_OK;
}

/* The stat answers of one scan, by path: a header directive is looked for
 * beside its file and in each include dir, and a library's headers name
 * the same few hundred names from hundreds of files (cooperative_groups.h
 * asks for many more stats than it has distinct paths: bench/fold_NOTES.md).
 * A path's first answer in the scan stands for the scan: that is
 * the order a scan that looked at it once would see, and a file or folder
 * created during the scan is caught where one created just after it would
 * be (the folder records taken before the look, the absent names looked for
 * again after the compile: jitop__deps_changed). */
struct stat_memo {
    struct stat_slot {
        char *path; /* NULL: free */
        bool ok;
        struct stat st;
    } *v;
    size_t cap, n;
};

/* One unit's scan in progress. */
struct scan {
    const jitop__unit *u;
    jitop__deps d;
    size_t cap;
    unsigned char *flags; /* per dep, DEP_* */
    struct path_set seen;
    char *cwd; /* inline text's directory: see jitop__deps_scan */
    /* Safe mode: the first directive no literal name resolves, as
     * "file:line: #include TEXT"; the folders it hashes (their directories
     * walked, by device and inode, so that none is walked twice). */
    char *unresolved;
    jitop__strv roots;
    size_t roots_walked;
    struct dir_id {
        uint64_t dev, ino;
    } *walked;
    size_t nwalked, walked_cap;
    size_t folder_files;
    int64_t folder_bytes;
    bool over_bound;
    /* "#include NAME" directives, resolved from the definitions of NAME once
     * every text the scan can reach is read (macro_round), and those
     * definitions: each #define of every scanned text, and each -D. */
    struct pending {
        char *file, *cur_dir; /* the including file (NULL: inline text), its directory */
        jitop__include inc;   /* inc.text is NAME */
        bool given_up;        /* left to safe mode */
    } *pending;
    size_t npending, pending_cap;
    jitop__macros macros;
    struct path_set dirs_seen, absent_seen; /* the paths of d.dirs, of d.absent */
    size_t dirs_cap;
    struct stat_memo stats;
};

static size_t stat_slot_of(const char *path, size_t cap)
{
    return (size_t)XXH3_64bits(path, strlen(path)) & (cap - 1);
}

/* stat(path) as this scan first saw it. A memo that cannot grow only asks
 * the file system again. */
static bool scan_stat(struct scan *s, const char *path, struct stat *st)
{
    struct stat_memo *m = &s->stats;
    if (m->cap) {
        for (size_t i = stat_slot_of(path, m->cap); m->v[i].path; i = (i + 1) & (m->cap - 1))
            if (strcmp(m->v[i].path, path) == 0) {
                *st = m->v[i].st;
                return m->v[i].ok;
            }
    }
    bool ok = stat(path, st) == 0;
    if (2 * (m->n + 1) > m->cap) {
        size_t cap = m->cap ? 2 * m->cap : 256;
        struct stat_slot *v = calloc(cap, sizeof *v);
        if (!v)
            return ok;
        for (size_t i = 0; i < m->cap; i++) {
            if (!m->v[i].path)
                continue;
            size_t k = stat_slot_of(m->v[i].path, cap);
            while (v[k].path)
                k = (k + 1) & (cap - 1);
            v[k] = m->v[i];
        }
        free(m->v);
        m->v = v;
        m->cap = cap;
    }
    char *copy = jitop__strdup(path);
    if (!copy)
        return ok;
    size_t i = stat_slot_of(path, m->cap);
    while (m->v[i].path)
        i = (i + 1) & (m->cap - 1);
    m->v[i] = (struct stat_slot){copy, ok, {0}};
    if (ok)
        m->v[i].st = *st;
    m->n++;
    return ok;
}

static void stat_memo_free(struct stat_memo *m)
{
    for (size_t i = 0; i < m->cap; i++)
        free(m->v[i].path);
    free(m->v);
    memset(m, 0, sizeof *m);
}

static int scan_append(struct scan *s, char *path, unsigned char flags)
{
    if (s->d.n == s->cap) {
        size_t ncap = s->cap ? s->cap * 2 : 8;
        jitop__dep *v = realloc(s->d.v, ncap * sizeof *v);
        unsigned char *f = v ? realloc(s->flags, ncap) : NULL;
        if (v)
            s->d.v = v;
        if (!f) {
            free(path);
            return jitop__fail(JITOP_ENOMEM, "out of memory");
        }
        s->flags = f;
        s->cap = ncap;
    }
    memset(&s->d.v[s->d.n], 0, sizeof s->d.v[s->d.n]);
    s->d.v[s->d.n].path = path;
    s->flags[s->d.n] = flags;
    s->d.n++;
    if (path_set_add(&s->seen, path) != JITOP_OK)
        return jitop__fail(JITOP_ENOMEM, "out of memory");
    return JITOP_OK;
}

/* Adds the file at path (made absolute as the kernel resolves it) unless it
 * is listed already. */
static int scan_add(struct scan *s, const char *path, unsigned char flags)
{
    char *abs = jitop__abspath(path);
    if (!abs)
        return jitop__fail_abspath(path);
    if (path_set_has(&s->seen, abs)) {
        free(abs);
        return JITOP_OK;
    }
    return scan_append(s, abs, flags);
}

static bool is_regular_file(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* Whether an include search stops at path: a regular file, or anything else
 * but a directory (which a preprocessor's search passes over). A FIFO or
 * device is then refused by jitop__dep_read, naming it, rather than
 * skipped: NVRTC would open it and block. */
static bool stops_search(struct scan *s, const char *path)
{
    struct stat st;
    return scan_stat(s, path, &st) && !S_ISDIR(st.st_mode);
}

/* Records dir (with st, taken before the look that found nothing) in
 * d.dirs, once. */
static int record_dir(struct scan *s, const char *dir, const struct stat *st)
{
    char *abs = jitop__abspath(dir);
    if (!abs)
        return jitop__fail_abspath(dir);
    if (path_set_has(&s->dirs_seen, abs)) {
        free(abs);
        return JITOP_OK;
    }
    if (s->d.ndirs == s->dirs_cap) {
        size_t cap = s->dirs_cap ? 2 * s->dirs_cap : 8;
        jitop__dep *v = realloc(s->d.dirs, cap * sizeof *v);
        if (!v) {
            free(abs);
            return jitop__fail(JITOP_ENOMEM, "out of memory");
        }
        s->d.dirs = v;
        s->dirs_cap = cap;
    }
    jitop__dep *r = &s->d.dirs[s->d.ndirs++];
    memset(r, 0, sizeof *r);
    r->path = abs;
    jitop__dep_set_stat(r, st);
    return path_set_add(&s->dirs_seen, abs) == JITOP_OK
               ? JITOP_OK
               : jitop__fail(JITOP_ENOMEM, "out of memory");
}

/* Whether the search stops at candidate (*found: stops_search). When not, the
 * directory its absence depends on (the deepest one on its path that
 * exists) is recorded with stat data taken BEFORE the look, so that a file
 * created there after the look changes the record's stat; and candidate
 * goes to d.absent, to be looked for again after the compile. */
static int probe(struct scan *s, const char *candidate, bool *found)
{
    struct stat st;
    bool have_dir = false;
    char *dir = jitop__dirname(candidate);
    while (dir && *dir && !(have_dir = scan_stat(s, dir, &st) && S_ISDIR(st.st_mode)) &&
           strcmp(dir, "/") != 0) {
        char *up = jitop__dirname(dir);
        free(dir);
        dir = up;
    }
    if (!dir)
        return jitop__fail(JITOP_ENOMEM, "out of memory");
    *found = stops_search(s, candidate);
    int status = JITOP_OK;
    if (!*found && have_dir)
        status = record_dir(s, dir, &st);
    if (!*found && status == JITOP_OK && !path_set_has(&s->absent_seen, candidate)) {
        if (jitop__strv_push(&s->d.absent, candidate) != JITOP_OK ||
            path_set_add(&s->absent_seen, s->d.absent.v[s->d.absent.n - 1]) != JITOP_OK)
            status = jitop__fail(JITOP_ENOMEM, "out of memory");
    }
    free(dir);
    return status;
}

/* Whether path lies in dir or below it. */
static bool path_under(const char *path, const char *dir)
{
    size_t n = strlen(dir);
    while (n > 1 && dir[n - 1] == '/')
        n--;
    return strncmp(path, dir, n) == 0 && (path[n] == '/' || (n == 1 && dir[0] == '/'));
}

/* Whether a file lies in one of the toolkit's include dirs (those after the
 * user's): a directive it cannot resolve there is the toolkit's own (the
 * Thrust headers name theirs through macros), covered by the toolkit the
 * unit is built with, and does not put the unit in safe mode. Compared as
 * written and as real paths (a ".." in a toolkit header's include resolves
 * through the links of the toolkit's path). Asked only for the rare
 * directive the scanner cannot resolve. */
static bool in_toolkit(const jitop__unit *u, const char *path)
{
    bool in = false;
    char *real = NULL;
    for (size_t i = u->user_include_dirs; i < u->include_dirs.n && !in; i++) {
        in = path_under(path, u->include_dirs.v[i]);
        if (!in && (real || (real = realpath(path, NULL)))) {
            char *dir = realpath(u->include_dirs.v[i], NULL);
            in = dir && path_under(real, dir);
            free(dir);
        }
    }
    free(real);
    return in;
}

/* Resolves one directive of the file whose directory is cur_dir (NULL: no
 * directory of its own) as NVRTC does, and adds what it names:
 *  - "name": beside the including file (the directory of the path it was
 *    opened by, links in it kept: NVRTC looks there, not beside a link's
 *    target), then each include dir in order; <name>: the include dirs;
 *    an absolute name as it is. The first file found (anything but a
 *    directory: stops_search) is the one.
 *  - #include_next: the search goes on after the directory the including
 *    file was found in; every match in every directory is added instead,
 *    which holds the one NVRTC takes whichever it is.
 *  - a candidate's ".." is resolved as the kernel resolves it (after the
 *    links before it: jitop__abspath), which is what NVRTC opens.
 * A name found nowhere is left out: an NVRTC built-in header, one on an #if
 * branch that is not compiled, or a compile error to come. */
static int resolve(struct scan *s, const jitop__include *inc, const char *cur_dir)
{
    const jitop__strv *dirs = &s->u->include_dirs;
    unsigned char flags = inc->embed ? DEP_EMBED : 0;
    bool found = false;
    int status = JITOP_OK;
    if (inc->name[0] == '/') {
        status = probe(s, inc->name, &found);
        return status == JITOP_OK && found ? scan_add(s, inc->name, flags) : status;
    }
    size_t first = inc->quoted && cur_dir ? 0 : 1;
    for (size_t i = first; i < dirs->n + 1; i++) {
        const char *dir = i == 0 ? cur_dir : dirs->v[i - 1];
        char *joined = jitop__sprintf("%s/%s", dir, inc->name);
        if (!joined)
            return jitop__fail(JITOP_ENOMEM, "out of memory");
        status = probe(s, joined, &found);
        if (status == JITOP_OK && found)
            status = scan_add(s, joined, flags);
        free(joined);
        if (status != JITOP_OK || (found && !inc->next))
            return status;
    }
    return JITOP_OK;
}

/* Safe mode: a directive names its file through macros, so the file could be
 * any the include search reaches from where it stands. Every file under the
 * including file's directory and under each of the user's include dirs is
 * hashed, and scanned like a header (so that what a macro-named header
 * includes is found too). Asked once per such directive; the walk happens
 * after the literal includes are done (walk_roots). */
static int unresolved_directive(struct scan *s, const char *file, const jitop__include *inc,
                                const char *cur_dir)
{
    if (file && in_toolkit(s->u, file))
        return JITOP_OK;
    if (!s->unresolved) {
        const char *word = inc->embed ? "embed" : inc->next ? "include_next" : "include";
        s->unresolved = jitop__sprintf("%s:%u: '#%s %s'", file ? file : s->u->source_name,
                                       inc->line, word, inc->text);
        if (!s->unresolved)
            return jitop__fail(JITOP_ENOMEM, "out of memory");
        for (size_t i = 0; i < s->u->user_include_dirs; i++)
            if (jitop__strv_push(&s->roots, s->u->include_dirs.v[i]) != JITOP_OK)
                return jitop__fail(JITOP_ENOMEM, "out of memory");
    }
    for (size_t i = 0; cur_dir && i < s->roots.n; i++)
        if (strcmp(s->roots.v[i], cur_dir) == 0)
            return JITOP_OK;
    if (cur_dir && jitop__strv_push(&s->roots, cur_dir) != JITOP_OK)
        return jitop__fail(JITOP_ENOMEM, "out of memory");
    return JITOP_OK;
}

static int add_pending(struct scan *s, const char *file, const jitop__include *inc,
                       const char *cur_dir)
{
    if (s->npending == s->pending_cap) {
        size_t cap = s->pending_cap ? 2 * s->pending_cap : 8;
        struct pending *v = realloc(s->pending, cap * sizeof *v);
        if (!v)
            return jitop__fail(JITOP_ENOMEM, "out of memory");
        s->pending = v;
        s->pending_cap = cap;
    }
    struct pending *p = &s->pending[s->npending];
    memset(p, 0, sizeof *p);
    p->inc = *inc;
    p->file = file ? jitop__strdup(file) : NULL;
    p->cur_dir = cur_dir ? jitop__strdup(cur_dir) : NULL;
    p->inc.text = jitop__strdup(inc->text);
    if ((file && !p->file) || (cur_dir && !p->cur_dir) || !p->inc.text) {
        free(p->file);
        free(p->cur_dir);
        free(p->inc.text);
        return jitop__fail(JITOP_ENOMEM, "out of memory");
    }
    s->npending++;
    return JITOP_OK;
}

/* Resolves each "#include NAME" from the definitions seen so far (adding
 * what they name; resolving one again adds nothing). With give_up, one that
 * cannot be resolved goes to safe mode. */
static int macro_round(struct scan *s, bool give_up)
{
    int status = JITOP_OK;
    for (size_t i = 0; status == JITOP_OK && i < s->npending; i++) {
        struct pending *p = &s->pending[i];
        jitop__strv names = {0};
        bool known = false;
        if (p->given_up)
            continue;
        status = jitop__macros_expand(&s->macros, p->inc.text, &names, &known);
        if (status == JITOP_OK && known) {
            for (size_t k = 0; status == JITOP_OK && k < names.n; k++) {
                jitop__include inc = p->inc;
                size_t len = strlen(names.v[k]);
                names.v[k][len - 1] = '\0'; /* the closing delimiter */
                inc.name = names.v[k] + 1;
                inc.quoted = names.v[k][0] == '"';
                status = resolve(s, &inc, p->cur_dir);
            }
        } else if (status == JITOP_OK && give_up) {
            p->given_up = true;
            status = unresolved_directive(s, p->file, &p->inc, p->cur_dir);
        }
        jitop__strv_free(&names);
    }
    return status;
}

/* Resolves the directives of one text (file: its path, NULL for inline
 * text; hash: its bytes' hash when it was read from a file, which lets the
 * process's memo answer for a text scanned before; cur_dir: where its
 * quoted names are looked up first) and keeps its
 * #defines. "#include NAME" waits for every definition of NAME the scan can
 * see (macro_round); any other directive whose name macros make goes to
 * safe mode at once. */
static int add_includes(struct scan *s, const char *file, const char *text, size_t len,
                        const XXH128_hash_t *hash, const char *cur_dir)
{
    jitop__includes incs;
    int status = hash ? jitop__scan_includes_memo(text, len, *hash, &incs)
                      : jitop__scan_includes(text, len, &incs);
    if (status != JITOP_OK)
        return jitop__fail(JITOP_ENOMEM, "out of memory");
    for (size_t i = 0; status == JITOP_OK && i < incs.ndefs; i++)
        status = jitop__macros_add(&s->macros, incs.defs[i].name, incs.defs[i].value);
    for (size_t i = 0; status == JITOP_OK && i < incs.n; i++) {
        const jitop__include *inc = &incs.v[i];
        if (inc->name)
            status = resolve(s, inc, cur_dir);
        else if (jitop__is_identifier(inc->text))
            status = add_pending(s, file, inc, cur_dir);
        else
            status = unresolved_directive(s, file, inc, cur_dir);
    }
    jitop__includes_free(&incs);
    return status;
}

static int dir_compare(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Whether the directory (dev, ino) was walked already; records it if not. */
static int walked_before(struct scan *s, const struct stat *st, bool *before)
{
    *before = false;
    for (size_t i = 0; i < s->nwalked; i++)
        if (s->walked[i].dev == (uint64_t)st->st_dev && s->walked[i].ino == (uint64_t)st->st_ino) {
            *before = true;
            return JITOP_OK;
        }
    if (s->nwalked == s->walked_cap) {
        size_t cap = s->walked_cap ? 2 * s->walked_cap : 16;
        struct dir_id *v = realloc(s->walked, cap * sizeof *v);
        if (!v)
            return jitop__fail(JITOP_ENOMEM, "out of memory");
        s->walked = v;
        s->walked_cap = cap;
    }
    s->walked[s->nwalked++] = (struct dir_id){(uint64_t)st->st_dev, (uint64_t)st->st_ino};
    return JITOP_OK;
}

/* Directories safe mode does not walk: hidden ones (version control
 * metadata, editor state, a project's .cache), which no header is named
 * into and which would blow the bound of any repository's root; and a jitop
 * cache (one holding v<format>/manifests), whose entries change with every
 * build: hashed, each build would change the key of the next. */
static bool skipped_dir(const char *dir, const char *name)
{
    if (name[0] == '.')
        return true;
    char *probe = jitop__sprintf("%s/%s/v%d/manifests", dir, name, JITOP__FORMAT_VERSION);
    struct stat st;
    bool cache = probe && stat(probe, &st) == 0 && S_ISDIR(st.st_mode);
    free(probe);
    return cache;
}

/* Adds every regular file under dir (links followed; directories in name
 * order, so that the list and the key do not depend on readdir's order),
 * and records each directory walked (jitop__deps.dirs).
 * A directory that cannot be read adds nothing: NVRTC cannot read it
 * either. Stops at the bound, setting over_bound. */
static int walk_dir(struct scan *s, const char *dir, unsigned depth)
{
    int status = JITOP_OK;
    jitop__strv names = {0};
    struct stat st;
    bool before = false;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode) || depth > 64)
        return JITOP_OK;
    if ((status = walked_before(s, &st, &before)) != JITOP_OK || before)
        return status;
    /* Its stat, taken before it is listed: a file added to it later (one the
     * macros may name) makes the stat fast path look again. */
    if ((status = record_dir(s, dir, &st)) != JITOP_OK)
        return status;
    DIR *dp = opendir(dir);
    if (!dp)
        return JITOP_OK;
    for (struct dirent *e; (e = readdir(dp)) != NULL;) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        if (jitop__strv_push(&names, e->d_name) != JITOP_OK) {
            status = jitop__fail(JITOP_ENOMEM, "out of memory");
            break;
        }
    }
    closedir(dp);
    if (names.n > 1)
        qsort(names.v, names.n, sizeof *names.v, dir_compare);
    for (size_t i = 0; status == JITOP_OK && !s->over_bound && i < names.n; i++) {
        char *path = jitop__sprintf("%s%s%s", dir, strcmp(dir, "/") ? "/" : "", names.v[i]);
        if (!path) {
            status = jitop__fail(JITOP_ENOMEM, "out of memory");
            break;
        }
        if (stat(path, &st) != 0) {
            /* a dangling link, or gone since readdir: nothing to read */
        } else if (S_ISDIR(st.st_mode)) {
            if (!skipped_dir(dir, names.v[i]))
                status = walk_dir(s, path, depth + 1);
        } else if (S_ISREG(st.st_mode)) {
            if (++s->folder_files > JITOP__SAFE_MAX_FILES ||
                (s->folder_bytes += (int64_t)st.st_size) > JITOP__SAFE_MAX_BYTES)
                s->over_bound = true;
            else
                status = scan_add(s, path, DEP_FOLDER);
        }
        free(path);
    }
    jitop__strv_free(&names);
    return status;
}

/* Walks the roots safe mode collected that are not walked yet. */
static int walk_roots(struct scan *s)
{
    int status = JITOP_OK;
    for (; status == JITOP_OK && s->roots_walked < s->roots.n; s->roots_walked++) {
        const char *root = s->roots.v[s->roots_walked];
        if (!in_toolkit(s->u, root) && !s->over_bound)
            status = walk_dir(s, root, 0);
    }
    return status;
}

/* The note of a safe-mode scan (see jitop__deps.note). */
static int safe_mode_note(struct scan *s)
{
    char *roots = jitop__strv_join(&s->roots, ", ");
    if (!roots)
        return jitop__fail(JITOP_ENOMEM, "out of memory");
    if (s->over_bound) {
        s->d.uncacheable = true;
        s->d.note = jitop__sprintf(
            "not cacheable: %s names its file through macros, which only a preprocessor "
            "expands, and the folders safe mode would hash instead (%s) hold more than %d files "
            "or %lld MiB: compiled at every build, never cached; name the file literally "
            "(#include \"file.h\") to cache it",
            s->unresolved, roots, JITOP__SAFE_MAX_FILES, (long long)(JITOP__SAFE_MAX_BYTES >> 20));
    } else {
        s->d.note = jitop__sprintf(
            "safe mode: %s names its file through macros, which only a preprocessor expands: "
            "every file under %s is hashed instead (%zu files)",
            s->unresolved, roots, s->folder_files);
    }
    free(roots);
    return s->d.note ? JITOP_OK : jitop__fail(JITOP_ENOMEM, "out of memory");
}

/* Removes the folder files that could not be read. */
static void drop_unread(struct scan *s)
{
    size_t k = 0;
    for (size_t i = 0; i < s->d.n; i++) {
        if (s->flags[i] & DEP_DROP) {
            free(s->d.v[i].path);
            continue;
        }
        s->d.v[k++] = s->d.v[i];
    }
    s->d.n = k;
}

static bool is_readable_file(const char *path)
{
    return is_regular_file(path) && access(path, R_OK) == 0;
}

/* Reads, hashes and scans deps[next]. A folder file that cannot be opened
 * (no permission, gone since the walk) is dropped: NVRTC could not read it
 * either. */
static int scan_one(struct scan *s, size_t next, char **source_text)
{
    char *data = NULL, *dir = NULL;
    size_t len = 0;
    const jitop__unit *u = s->u;
    int status = jitop__dep_read(s->d.v[next].path, &s->d.v[next], &data, &len);
    if (status != JITOP_OK) {
        if ((s->flags[next] & DEP_FOLDER) && !is_readable_file(s->d.v[next].path)) {
            jitop__clear_error();
            s->flags[next] |= DEP_DROP;
            return JITOP_OK;
        }
        if (next > 0 || !u->source_path)
            jitop__fail_prefix(status, "header of %s",
                               u->source_path ? u->source_path : u->source_name);
        return status;
    }
    if (!(s->flags[next] & DEP_EMBED)) {
        dir = jitop__dirname(s->d.v[next].path);
        status = dir ? add_includes(s, s->d.v[next].path, data, len, &s->d.v[next].hash, dir)
                     : jitop__fail(JITOP_ENOMEM, "out of memory");
    }
    free(dir);
    if (next == 0 && u->source_path)
        *source_text = data;
    else
        free(data);
    return status;
}


/* Inline text has no file: NVRTC names it by a relative name, so its quoted
 * includes are looked up in the process's current directory, and so are
 * they here. */
int jitop__deps_scan(const jitop__unit *u, jitop__deps *out, char **text)
{
    int status = JITOP_OK;
    struct scan s = {.u = u};
    char *source_text = NULL;
    memset(out, 0, sizeof *out);
    *text = NULL;

    if (u->source_path) {
        char *p = jitop__strdup(u->source_path);
        status = p ? scan_append(&s, p, 0) : jitop__fail(JITOP_ENOMEM, "out of memory");
    } else {
        char cwd[PATH_MAX];
        source_text = jitop__strdup(u->inline_text ? u->inline_text : "");
        s.cwd = getcwd(cwd, sizeof cwd) ? jitop__strdup(cwd) : NULL;
        status = source_text ? add_includes(&s, NULL, source_text, strlen(source_text), NULL, s.cwd)
                             : jitop__fail(JITOP_ENOMEM, "out of memory");
    }
    if (status == JITOP_OK)
        status = jitop__macros_add_options(&s.macros, &u->options);
    /* Until nothing is added: the files listed, then what "#include NAME"
     * names now that more definitions are known, then (only when that adds
     * nothing) safe mode for what remains, and its folders. */
    for (size_t next = 0; status == JITOP_OK;) {
        for (; status == JITOP_OK && next < s.d.n; next++)
            status = scan_one(&s, next, &source_text);
        size_t listed = s.d.n;
        if (status == JITOP_OK)
            status = macro_round(&s, false);
        if (status != JITOP_OK || s.d.n > listed)
            continue;
        status = macro_round(&s, true);
        if (status != JITOP_OK || !s.unresolved || s.roots_walked == s.roots.n)
            break;
        status = walk_roots(&s);
    }
    if (status == JITOP_OK && s.unresolved)
        status = safe_mode_note(&s);
    if (status != JITOP_OK)
        goto out;
    drop_unread(&s);
    *out = s.d;
    memset(&s.d, 0, sizeof s.d);
    *text = source_text;
    source_text = NULL;
out:
    jitop__deps_free(&s.d);
    free(s.flags);
    free(s.seen.v);
    free(s.cwd);
    free(s.unresolved);
    jitop__strv_free(&s.roots);
    free(s.walked);
    for (size_t i = 0; i < s.npending; i++) {
        free(s.pending[i].file);
        free(s.pending[i].cur_dir);
        free(s.pending[i].inc.text);
    }
    free(s.pending);
    jitop__macros_free(&s.macros);
    free(s.dirs_seen.v);
    free(s.absent_seen.v);
    stat_memo_free(&s.stats);
    free(source_text);
    return status;
}
