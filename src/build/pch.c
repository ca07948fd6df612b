/*
 * NVRTC's precompiled headers inside one process (and its forks): when a
 * compile may use one, when one is worth making, and where its file lives.
 *
 * What NVRTC 13.0 allows decides the shape (bench/BUILD_NOTES.md):
 *   - a PCH serves only the process whose NVRTC made it, and its forked
 *     children (warning 20282 elsewhere: it holds NVRTC's heap address), so
 *     it is never a cache entry: a file per process, removed at
 *     jitop_ctx_destroy of the context that made it and at exit;
 *   - NVRTC uses a PCH whose headers were edited since (no content check),
 *     so a PCH is used only when every file its compile read has the
 *     content hash it had then, and every include name looked for and not
 *     found then is still absent (a new file would change what the
 *     preamble reads); otherwise it is not used, and a new one is made;
 *   - the binary is the same with and without (tested by
 *     tests/cpu/test_pch.c), so cache keys leave the PCH out.
 *
 * The preamble: the source's leading lines that are preprocessor
 * directives, blank lines or // comments, up to the first other line (the
 * header stop NVRTC's front end takes: the first token outside a
 * directive). A PCH is found by a key over the preamble's text, the arch,
 * the options, the include folders (the source's own first) and NVRTC's
 * identity; the header hashes are checked on top of that key.
 *
 * Policy (JITOP_PCH): "0" never; "1" make one at the first compile of any
 * preamble that includes a file; "auto" at the second compile of a
 * preamble in the process, or at the first when the preamble includes a
 * heavy toolkit header (cooperative groups, CUB, Thrust, libcu++, CUTLASS);
 * unset, only when `jitop build` saw it in more than its worker count of
 * sources (jitop__pch_plan). Making a PCH costs more than the plain compile
 * it rides on (NVRTC writes the heap out: ~200 MiB for CUB and cooperative
 * groups; bench/BUILD_NOTES.md), so a library process, which cannot know
 * whether a second source with the same includes will come, makes none
 * unless asked.
 *
 * The file: <cache>/pch/<host>-<pid>-<key>.pch, at most two per process
 * (the least recently used one goes first). Under the cache rather than
 * $TMPDIR: /tmp is often a tmpfs, where 200 MiB is memory; the cache is
 * jitop's own folder, and a process killed before its exit leaves a file
 * that the next process of that host making a PCH removes (its pid no
 * longer runs). Only files of that exact name pattern are ever removed.
 */
#include "build/build.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#define PCH_SLOTS 2
#define SEEN_MAX 64
/* Left free on the cache's file system after a PCH is written. */
#define PCH_MIN_FREE ((unsigned long long)1 << 30)

struct slot {
    bool live;     /* made, usable */
    bool creating; /* being made by a compile now */
    int busy;      /* compiles using or making it now: never removed then */
    char key[33];
    char *path;
    pid_t pid;     /* the process that made it: the only one that removes it */
    const jitop_ctx *owner;
    unsigned long long used; /* a clock for "least recently used" */
    char *made_by;           /* the source whose compile made it */
    jitop__dep *files;       /* what that compile read (path, hash) */
    size_t nfiles;
    jitop__strv absent;      /* include paths it looked for and did not find */
};

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static struct slot g_slots[PCH_SLOTS];
static char g_seen[SEEN_MAX][33]; /* preamble keys compiled in this process */
static size_t g_nseen;
static char g_planned[SEEN_MAX][33]; /* preambles `jitop build` saw twice */
static size_t g_nplanned;
static unsigned long long g_clock;
static bool g_atexit, g_swept;
static jitop__pch_counts g_counts;

static void slot_clear(struct slot *s)
{
    free(s->path);
    free(s->made_by);
    for (size_t i = 0; i < s->nfiles; i++)
        free(s->files[i].path);
    free(s->files);
    jitop__strv_free(&s->absent);
    memset(s, 0, sizeof *s);
}

/* Removes the slot's file when this process made it (a fork's child leaves
 * its parent's file alone), and forgets the slot. */
static void slot_drop(struct slot *s)
{
    if (s->path && s->pid == getpid() && unlink(s->path) != 0 && errno != ENOENT)
        fprintf(stderr, "jitop: cannot remove the precompiled header %s: %s\n", s->path,
                strerror(errno));
    slot_clear(s);
}

static void drop_all_at_exit(void)
{
    pthread_mutex_lock(&g_lock);
    for (int i = 0; i < PCH_SLOTS; i++)
        if (!g_slots[i].busy)
            slot_drop(&g_slots[i]);
    pthread_mutex_unlock(&g_lock);
}

void jitop__pch_ctx_destroy(jitop_ctx *ctx)
{
    pthread_mutex_lock(&g_lock);
    for (int i = 0; i < PCH_SLOTS; i++)
        if (g_slots[i].owner == ctx && !g_slots[i].busy)
            slot_drop(&g_slots[i]);
        else if (g_slots[i].owner == ctx)
            g_slots[i].owner = NULL; /* its compile ends after the context: exit removes it */
    pthread_mutex_unlock(&g_lock);
}

/* JITOP_PCH: 0 off, 1 eager, 2 ("auto") by reuse and heavy headers, -1
 * (unset or anything else) the default: `jitop build`'s shared preambles. */
static int pch_mode(void)
{
    const char *e = getenv("JITOP_PCH");
    if (e && strcmp(e, "0") == 0)
        return 0;
    if (e && strcmp(e, "1") == 0)
        return 1;
    if (e && strcmp(e, "auto") == 0)
        return 2;
    return -1;
}

/* The preamble of text: its length, how many #include lines it holds, and
 * whether it ends at a block comment (whose inside the front end would
 * read past: no PCH then, the header stop is not where the text says). */
static size_t preamble(const char *text, size_t *includes, bool *comment_end)
{
    const char *p = text, *end = text;
    *includes = 0;
    *comment_end = false;
    while (*p) {
        const char *q = p;
        while (*q == ' ' || *q == '\t' || *q == '\r' || *q == '\f' || *q == '\v')
            q++;
        bool directive = *q == '#';
        if (!(*q == '\n' || *q == '\0' || directive || (q[0] == '/' && q[1] == '/'))) {
            *comment_end = q[0] == '/' && q[1] == '*';
            break;
        }
        if (directive) {
            const char *d = q + 1;
            while (*d == ' ' || *d == '\t')
                d++;
            if (strncmp(d, "include", 7) == 0)
                (*includes)++;
        }
        /* to the end of the line, through backslash continuations (a //
         * comment continues so too) */
        const char *nl;
        for (nl = q; *nl; nl++) {
            if (*nl == '\n') {
                const char *b = nl;
                if (b > q && b[-1] == '\r')
                    b--;
                if (b > q && b[-1] == '\\')
                    continue;
                break;
            }
            if (directive && nl[0] == '/' && nl[1] == '*') {
                *comment_end = true; /* a block comment inside a directive */
                return 0;
            }
        }
        p = *nl ? nl + 1 : nl;
        end = p;
    }
    return (size_t)(end - text);
}

static bool heavy(const char *pre, size_t n)
{
    static const char *const names[] = {"<cooperative_groups", "<cub/", "<thrust/", "<cuda/",
                                        "<cute/", "<cutlass/"};
    char *copy = strndup(pre, n);
    bool found = false;
    for (size_t i = 0; copy && !found && i < sizeof names / sizeof names[0]; i++)
        found = strstr(copy, names[i]) != NULL;
    free(copy);
    return found;
}

static void key_of(const jitop__unit *u, const char *pre, size_t n, char key[33])
{
    XXH3_state_t st;
    XXH3_128bits_reset(&st);
    XXH3_128bits_update(&st, "jitop-pch-1", 12);
    XXH3_128bits_update(&st, pre, n);
    XXH3_128bits_update(&st, "", 1);
    XXH3_128bits_update(&st, u->arch, strlen(u->arch) + 1);
    for (size_t i = 0; i < u->options.n; i++)
        XXH3_128bits_update(&st, u->options.v[i], strlen(u->options.v[i]) + 1);
    XXH3_128bits_update(&st, "", 1);
    for (size_t i = 0; i < u->include_dirs.n; i++)
        XXH3_128bits_update(&st, u->include_dirs.v[i], strlen(u->include_dirs.v[i]) + 1);
    const char *id = jitop__nvrtc_identity();
    XXH3_128bits_update(&st, id, strlen(id) + 1);
    XXH128_hash_t h = XXH3_128bits_digest(&st);
    snprintf(key, 33, "%016llx%016llx", (unsigned long long)h.high64,
             (unsigned long long)h.low64);
}

static bool in_list(char list[][33], size_t n, const char *key)
{
    for (size_t i = 0; i < n && i < SEEN_MAX; i++)
        if (strcmp(list[i], key) == 0)
            return true;
    return false;
}

static void list_add(char list[][33], size_t *n, const char *key)
{
    if (!in_list(list, *n, key))
        snprintf(list[(*n)++ % SEEN_MAX], 33, "%s", key);
}

/* Whether a file of the slot is not as it was when the PCH was made, as
 * deps (scanned now, hashed) and a stat of each absent name say; why names
 * the first such file and how. */
static bool stale(const struct slot *s, const jitop__deps *deps, char *why, size_t cap)
{
    for (size_t i = 0; i < s->nfiles; i++) {
        const jitop__dep *d = jitop__deps_find(deps, s->files[i].path);
        if (!d) {
            snprintf(why, cap, "%s, read when it was made, is not read by this source",
                     s->files[i].path);
            return true;
        }
        if (!XXH128_isEqual(d->hash, s->files[i].hash)) {
            snprintf(why, cap, "%s changed since it was made", s->files[i].path);
            return true;
        }
    }
    struct stat st;
    for (size_t i = 0; i < s->absent.n; i++)
        if (stat(s->absent.v[i], &st) == 0 || errno != ENOENT) {
            snprintf(why, cap, "%s appeared since it was made", s->absent.v[i]);
            return true;
        }
    return false;
}

/* The files of the preamble's compile, kept with the slot: every file the
 * source reads but the source itself (deps[0]), which is a superset of
 * what the preamble reads. A later source is checked against all of them:
 * one whose body reads fewer headers than the maker's is not served
 * (a missed PCH, never a wrong one). */
static int slot_record(struct slot *s, const jitop__unit *u, const jitop__deps *deps)
{
    size_t first = u->source_path ? 1 : 0;
    s->nfiles = 0;
    s->files = calloc(deps->n ? deps->n : 1, sizeof *s->files);
    if (!s->files)
        return JITOP_ENOMEM;
    for (size_t i = first; i < deps->n; i++) {
        s->files[s->nfiles] = deps->v[i];
        if (!(s->files[s->nfiles].path = jitop__strdup(deps->v[i].path)))
            return JITOP_ENOMEM;
        s->nfiles++;
    }
    for (size_t i = 0; i < deps->absent.n; i++)
        if (jitop__strv_push(&s->absent, deps->absent.v[i]) != JITOP_OK)
            return JITOP_ENOMEM;
    s->made_by = jitop__strdup(u->source_name);
    return s->made_by ? JITOP_OK : JITOP_ENOMEM;
}

/* Removes <dir>/<host>-<pid>-<32 hex>.pch files of this host whose pid no
 * longer runs: what a process killed before its exit left. */
static void sweep(const char *dir, const char *host)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *e;
    size_t hn = strlen(host);
    while ((e = readdir(d)) != NULL) {
        const char *n = e->d_name;
        if (strncmp(n, host, hn) != 0 || n[hn] != '-')
            continue;
        char *endp;
        long pid = strtol(n + hn + 1, &endp, 10);
        if (endp == n + hn + 1 || *endp != '-' || pid <= 0 || strlen(endp + 1) != 36 ||
            strspn(endp + 1, "0123456789abcdef") != 32 || strcmp(endp + 33, ".pch") != 0)
            continue;
        if (pid == (long)getpid() || kill((pid_t)pid, 0) == 0 || errno != ESRCH)
            continue;
        char path[4096];
        if (snprintf(path, sizeof path, "%s/%s", dir, n) < (int)sizeof path)
            (void)unlink(path); /* another process may sweep it first */
    }
    closedir(d);
}

/* This host's name as a file name part. */
static void host_part(char *out, size_t cap)
{
    char h[256] = "";
    if (gethostname(h, sizeof h - 1) != 0 || !h[0])
        snprintf(h, sizeof h, "host");
    size_t o = 0;
    for (size_t i = 0; h[i] && o + 1 < cap && o < 64; i++)
        out[o++] = (isalnum((unsigned char)h[i]) || h[i] == '.') ? h[i] : '_';
    out[o] = '\0';
}

/* The file a new PCH of key goes to, its folder made; NULL with *why set
 * when there is no room for it. */
static char *pch_path(jitop_ctx *ctx, const char *key, char *why, size_t cap)
{
    char *dir = NULL, *path = NULL, host[80];
    host_part(host, sizeof host);
    if (asprintf(&dir, "%s/pch", jitop__cache_root(ctx->cache)) < 0)
        return NULL;
    if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
        snprintf(why, cap, "cannot make %s: %s", dir, strerror(errno));
        free(dir);
        return NULL;
    }
    if (!g_swept) {
        g_swept = true;
        sweep(dir, host);
    }
    struct statvfs vs;
    if (statvfs(dir, &vs) == 0 &&
        (unsigned long long)vs.f_bavail * vs.f_frsize < PCH_MIN_FREE) {
        snprintf(why, cap, "%s has %llu MiB free, less than the %llu MiB a PCH leaves", dir,
                 (unsigned long long)vs.f_bavail * vs.f_frsize >> 20, PCH_MIN_FREE >> 20);
        free(dir);
        return NULL;
    }
    if (asprintf(&path, "%s/%s-%ld-%s.pch", dir, host, (long)getpid(), key) < 0)
        path = NULL;
    free(dir);
    return path;
}

/* In a forked child (a `jitop build` worker, which ends with _exit: no
 * exit handler would remove a file it made) a PCH is used, never made. */
static bool g_forked;
static void on_fork_child(void)
{
    g_forked = true;
}
static pthread_once_t fork_once = PTHREAD_ONCE_INIT;
static void fork_init(void)
{
    if (pthread_atfork(NULL, NULL, on_fork_child) != 0)
        g_forked = true; /* cannot tell a child: never make a file there */
}

void jitop__pch_prepare(jitop_ctx *ctx, const jitop__unit *u, const char *text,
                        const jitop__deps *deps, jitop__pch_plan *plan)
{
    memset(plan, 0, sizeof *plan);
    plan->slot = -1;
    pthread_once(&fork_once, fork_init);
    int mode = pch_mode();
    if (mode == 0 || !u->source_path || !text)
        return;
    size_t includes;
    bool comment_end;
    size_t n = preamble(text, &includes, &comment_end);
    if (includes == 0)
        return;
    const char *name = u->source_name;
    if (comment_end) {
        jitop__log(ctx, "%s: no PCH: its #include lines end at a block comment", name);
        return;
    }
    if (deps->uncacheable || deps->note) {
        jitop__log(ctx, "%s: no PCH: the scanner could not name every header it reads", name);
        return;
    }
    if (!jitop__nvrtc_has_pch()) {
        jitop__log(ctx, "%s: no PCH: this NVRTC (%s) has no PCH calls", name,
                   jitop__nvrtc_version());
        return;
    }
    char key[33];
    key_of(u, text, n, key);
    pthread_mutex_lock(&g_lock);
    struct slot *same = NULL;
    for (int i = 0; i < PCH_SLOTS; i++)
        if ((g_slots[i].live || g_slots[i].creating) && strcmp(g_slots[i].key, key) == 0)
            same = &g_slots[i];
    bool seen = in_list(g_seen, g_nseen, key), replace = false;
    list_add(g_seen, &g_nseen, key);
    if (same && same->live) {
        char why[4200];
        if (!stale(same, deps, why, sizeof why)) {
            same->busy++;
            same->used = ++g_clock;
            plan->slot = (int)(same - g_slots);
            plan->req.use = same->path;
            g_counts.used++;
            jitop__log(ctx, "%s: PCH used: %s (made by %s's compile, %zu headers checked)", name,
                       same->path, same->made_by, same->nfiles);
            goto out;
        }
        g_counts.stale++;
        jitop__log(ctx, "%s: PCH %s not used: %s; a new one replaces it", name, same->path, why);
        if (same->busy) {
            jitop__log(ctx, "%s: no new PCH: the old one is in use by another compile", name);
            goto out;
        }
        slot_drop(same);
        replace = true;
    } else if (same) {
        jitop__log(ctx, "%s: no PCH: another compile is making this preamble's now", name);
        goto out;
    }
    bool want = mode == 1 || replace || in_list(g_planned, g_nplanned, key) ||
                (mode == 2 && (seen || heavy(text, n)));
    if (!want) {
        jitop__log(ctx, "%s: no PCH made: %s", name,
                   mode == 2 ? "the first compile of its preamble in this process (a second "
                               "source with the same #include lines makes one)"
                             : "JITOP_PCH is not set (1 or auto make one)");
        goto out;
    }
    if (g_forked) {
        jitop__log(ctx, "%s: no PCH made: a forked worker uses its parent's PCH, never makes "
                        "one (its file would outlive it)",
                   name);
        goto out;
    }
    struct slot *s = NULL;
    for (int i = 0; i < PCH_SLOTS && !s; i++)
        if (!g_slots[i].live && !g_slots[i].creating)
            s = &g_slots[i];
    for (int i = 0; i < PCH_SLOTS && !s; i++) /* the least recently used, if idle */
        if (!g_slots[i].busy && (!s || g_slots[i].used < s->used))
            s = &g_slots[i];
    if (!s) {
        jitop__log(ctx, "%s: no PCH made: both PCHs of this process are in use", name);
        goto out;
    }
    if (s->live)
        jitop__log(ctx, "%s: PCH %s removed (at most %d per process)", name, s->path,
                   PCH_SLOTS);
    slot_drop(s);
    char why[512] = "";
    char *path = pch_path(ctx, key, why, sizeof why);
    if (!path) {
        jitop__log(ctx, "%s: no PCH made: %s", name, why[0] ? why : "out of memory");
        goto out;
    }
    if (unlink(path) != 0 && errno != ENOENT) { /* this process's own, from a dropped slot */
        jitop__log(ctx, "%s: no PCH made: cannot replace %s: %s", name, path, strerror(errno));
        free(path);
        goto out;
    }
    s->path = path;
    snprintf(s->key, sizeof s->key, "%s", key);
    s->pid = getpid();
    s->owner = ctx;
    if (slot_record(s, u, deps) != JITOP_OK) {
        slot_clear(s);
        goto out;
    }
    if (!g_atexit && atexit(drop_all_at_exit) == 0)
        g_atexit = true;
    s->creating = true;
    s->busy = 1;
    s->used = ++g_clock;
    plan->slot = (int)(s - g_slots);
    plan->req.create = s->path;
out:
    pthread_mutex_unlock(&g_lock);
}

void jitop__pch_finish(jitop_ctx *ctx, const jitop__unit *u, jitop__pch_plan *plan)
{
    if (plan->slot < 0)
        return;
    const char *name = u->source_name;
    pthread_mutex_lock(&g_lock);
    struct slot *s = &g_slots[plan->slot];
    s->busy--;
    if (plan->req.heap_resized) /* the heap moved: every other PCH is void */
        for (int i = 0; i < PCH_SLOTS; i++)
            if (&g_slots[i] != s && !g_slots[i].busy && g_slots[i].live)
                slot_drop(&g_slots[i]);
    if (plan->req.create) {
        s->creating = false;
        struct stat st;
        if (plan->req.created && !plan->req.fell_back && stat(s->path, &st) == 0) {
            s->live = true;
            g_counts.created++;
            jitop__log(ctx, "%s: PCH created: %s (%lld MiB%s)", name, s->path,
                       (long long)st.st_size >> 20,
                       plan->req.heap_resized ? ", PCH heap resized" : "");
        } else {
            jitop__log(ctx, "%s: PCH not created: %s", name,
                       plan->req.why[0] ? plan->req.why : "NVRTC made no file");
            slot_drop(s);
        }
    } else if (plan->req.fell_back) {
        g_counts.used--;
        g_counts.fell_back++;
        jitop__log(ctx, "%s: PCH %s not used (%s): compiled without it", name, s->path,
                   plan->req.why);
        if (!s->busy)
            slot_drop(s);
        else
            s->live = false;
    }
    pthread_mutex_unlock(&g_lock);
}

void jitop__pch_before_fork(void)
{
    pthread_once(&fork_once, fork_init);
}

int jitop__pch_plan_sources(jitop_ctx *ctx, const char *const *paths, const char *const *archs,
                            size_t n, int jobs, const char *const *options, size_t noptions)
{
    if (pch_mode() == 0 || n < 2)
        return -1;
    char (*keys)[33] = calloc(n, sizeof *keys);
    if (!keys)
        return -1;
    for (size_t i = 0; i < n; i++) {
        jitop__unit u;
        char *text = NULL;
        size_t len = 0, includes;
        bool comment_end;
        jitop__dep dep = {0};
        if (jitop__unit_init(&u, paths[i], NULL, options, noptions, NULL, 0, archs[i]) !=
            JITOP_OK) {
            jitop__clear_error();
            continue;
        }
        if (jitop__dep_read(u.source_path, &dep, &text, &len) == JITOP_OK) {
            size_t pn = preamble(text, &includes, &comment_end);
            if (includes > 0 && !comment_end)
                key_of(&u, text, pn, keys[i]);
        } else {
            jitop__clear_error();
        }
        free(text);
        jitop__unit_free(&u);
    }
    /* The preamble most files share, and its first file. */
    size_t best = 0, best_n = 0;
    for (size_t i = 0; i < n; i++) {
        size_t same = 0;
        bool first = true;
        for (size_t j = 0; keys[i][0] && j < n; j++) {
            if (strcmp(keys[i], keys[j]) == 0)
                same++;
            if (j < i && strcmp(keys[i], keys[j]) == 0)
                first = false;
        }
        if (first && same > best_n) {
            best = i;
            best_n = same;
        }
    }
    int found = -1;
    /* The first compile, here, is on the critical path before any worker
     * starts: with k files of one preamble on J workers, ceil(k / J)
     * compiles at full cost become one plus ceil((k - 1) / J) with the PCH,
     * a gain only when k > J (a file per worker already runs them all at
     * once). */
    if (best_n >= 2 && best_n > (size_t)(jobs > 0 ? jobs : 1)) {
        found = (int)best;
        pthread_mutex_lock(&g_lock);
        list_add(g_planned, &g_nplanned, keys[best]);
        pthread_mutex_unlock(&g_lock);
        jitop__log(ctx, "%zu files share the #include lines of %s (more than the %d workers): it "
                        "is compiled here first, making a PCH the workers use",
                   best_n, paths[best], jobs);
    }
    free(keys);
    return found;
}

jitop__pch_counts jitop__pch_counts_get(void)
{
    pthread_mutex_lock(&g_lock);
    jitop__pch_counts c = g_counts;
    pthread_mutex_unlock(&g_lock);
    return c;
}
