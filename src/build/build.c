/* One unit to one binary: stat fast path, key, cache, lock, compile, write;
 * and the explanation of why a build would (not) hit the cache. */
#include "build/build.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* How often a build starts over because a file changed while NVRTC read it
 * (an editor saving in bursts) before it gives up. */
#define MAX_BUILD_ATTEMPTS 4

void (*jitop__after_compile_hook)(const char *source);
void (*jitop__before_compile_hook)(const char *source);
void (*jitop__after_scan_hook)(const char *source);

/* What build_unit does when the stat fast path does not find the binary. */
enum build_mode {
    BUILD_FULL,        /* scan, key, cache, compile on a miss */
    BUILD_DEFER,       /* the same, but a fast-path hit is only marked used */
    BUILD_CACHED_ONLY, /* scan, key, cache; a miss returns with nothing built */
    BUILD_FOLD,        /* BUILD_FULL, with every name asked of a source folded in now */
};

/* The line before + s + after, with s escaped (jitop__escape): explain's
 * text is one reason per line, and a newline in a path, an option or a name
 * must not break it. */
static int push_escaped(jitop__strv *lines, const char *before, const char *s, const char *after)
{
    char *shown = jitop__escape(s);
    int rc = shown ? jitop__strv_pushf(lines, "%s%s%s", before, shown, after)
                   : jitop__fail(JITOP_ENOMEM, "out of memory");
    free(shown);
    return rc;
}

/* Lines naming each file that differs between two dependency lists. */
static int diff_deps(const jitop__deps *old, const jitop__deps *cur, jitop__strv *lines)
{
    int rc = JITOP_OK;
    for (size_t i = 0; rc == JITOP_OK && i < cur->n; i++) {
        const jitop__dep *o = jitop__deps_find(old, cur->v[i].path);
        if (!o)
            rc = push_escaped(lines, "", cur->v[i].path, ": new file");
        else if (!XXH128_isEqual(o->hash, cur->v[i].hash))
            rc = push_escaped(lines, "", cur->v[i].path, ": content changed");
    }
    for (size_t i = 0; rc == JITOP_OK && i < old->n; i++)
        if (!jitop__deps_find(cur, old->v[i].path))
            rc = push_escaped(lines, "", old->v[i].path, ": removed");
    return rc;
}

static bool strv_has(const jitop__strv *sv, const char *s)
{
    for (size_t i = 0; i < sv->n; i++)
        if (strcmp(sv->v[i], s) == 0)
            return true;
    return false;
}

/* Lines naming what differs between the unit and an older entry of the same
 * source: NVRTC version, arch, options, name expressions. */
static int diff_entry(const jitop__unit *u, const jitop__entry *e, jitop__strv *lines)
{
    const jitop__strv *old_opts = &e->options;
    int rc = JITOP_OK;
    if (strcmp(e->nvrtc_version, jitop__nvrtc_version()) != 0)
        rc = jitop__strv_pushf(lines, "NVRTC version differs: %s (cached: %s)",
                               jitop__nvrtc_version(), e->nvrtc_version);
    if (rc == JITOP_OK && strcmp(e->arch, u->arch) != 0)
        rc = jitop__strv_pushf(lines, "arch differs: %s (cached: %s)", u->arch, e->arch);
    for (size_t i = 0; rc == JITOP_OK && i < u->options.n; i++)
        if (!strv_has(old_opts, u->options.v[i]))
            rc = push_escaped(lines, "option added: ", u->options.v[i], "");
    for (size_t i = 0; rc == JITOP_OK && i < old_opts->n; i++)
        if (!strv_has(&u->options, old_opts->v[i]))
            rc = push_escaped(lines, "option removed: ", old_opts->v[i], "");
    for (size_t i = 0; rc == JITOP_OK && i < u->names.n; i++)
        if (!strv_has(&e->bin.names, u->names.v[i]))
            rc = push_escaped(lines, "name expression added: ", u->names.v[i], "");
    for (size_t i = 0; rc == JITOP_OK && i < e->bin.names.n; i++)
        if (!strv_has(&u->names, e->bin.names.v[i]))
            rc = push_escaped(lines, "name expression removed: ", e->bin.names.v[i], "");
    return rc;
}

/* Why the unit's key (with deps cur) is not in the cache, as '\n'-joined
 * lines (malloc'd). old: the deps of the unit's manifest, NULL without one.
 * Compares files against the manifest first; when no file differs, against
 * the most recent entry of the same source (which walks the cache). The
 * scan's safe-mode note comes last; an uncacheable unit has only that. */
static int describe_miss(jitop_ctx *ctx, const jitop__unit *u, const jitop__deps *old,
                         const char *old_key, const jitop__deps *cur, const char *key, char **why)
{
    jitop__strv lines = {0};
    jitop__entry recent = {0};
    char recent_key[33] = "";
    bool have_recent = false;
    char *label = NULL;
    int status = old && !cur->uncacheable ? diff_deps(old, cur, &lines) : JITOP_OK;
    if (status != JITOP_OK || cur->uncacheable)
        goto note;
    if (lines.n == 0) {
        label = jitop__unit_source_label(u);
        if (!label) {
            status = JITOP_ENOMEM;
            goto out;
        }
        status = jitop__cache_find_recent(ctx->cache, label, &recent, recent_key, &have_recent);
        if (status != JITOP_OK)
            goto out;
        if (have_recent)
            status = diff_entry(u, &recent, &lines);
    }
    if (status == JITOP_OK && lines.n == 0) {
        char msg[160];
        if (old && old_key && strcmp(old_key, key) == 0) {
            status = jitop__strv_pushf(&lines, "entry %s is no longer in the cache "
                                               "(evicted, cleaned or found invalid)", key);
        } else if (have_recent) {
            snprintf(msg, sizeof msg, "the sources differ from the most recent entry %s of ",
                     recent_key);
            status = push_escaped(&lines, msg, label, "");
        } else {
            snprintf(msg, sizeof msg, " for %s in the cache", u->arch);
            status = push_escaped(&lines, "never built: no entry of ",
                                  label ? label : u->source_name, msg);
        }
    }
note:
    if (status == JITOP_OK && cur->note)
        status = jitop__strv_push(&lines, cur->note);
    if (status != JITOP_OK)
        goto out;
    *why = jitop__strv_join(&lines, "\n");
    if (!*why)
        status = JITOP_ENOMEM;
out:
    if (status == JITOP_ENOMEM)
        status = jitop__fail(JITOP_ENOMEM, "out of memory");
    jitop__entry_free(&recent);
    jitop__strv_free(&lines);
    free(label);
    return status;
}

/* Records the unit's deps so that the next build takes the stat fast path
 * (a recent dep keeps its flag, so the next build hashes it). A failure
 * costs only speed: it is logged, not returned. */
static void save_manifest(jitop_ctx *ctx, const char id[33], const jitop__deps *deps,
                          const char key[33], const jitop__instlist *lists)
{
    if (jitop__manifest_put_lists(ctx->cache, id, deps, key, lists) != JITOP_OK) {
        jitop__log(ctx, "cannot write manifest %s: %s", id, jitop_errmsg(ctx));
        jitop__clear_error();
    }
}

static int make_entry(const jitop__unit *u, const jitop__deps *deps, jitop__binary *bin,
                      jitop__entry *e)
{
    memset(e, 0, sizeof *e);
    int rc = JITOP_OK;
    if (!u->source_path) {
        char *label = jitop__unit_source_label(u);
        rc = label ? jitop__strv_push(&e->sources, label) : JITOP_ENOMEM;
        free(label);
    }
    for (size_t i = 0; rc == JITOP_OK && i < deps->n; i++)
        rc = jitop__strv_push(&e->sources, deps->v[i].path);
    for (size_t i = 0; rc == JITOP_OK && i < u->options.n; i++)
        rc = jitop__strv_push(&e->options, u->options.v[i]);
    e->arch = jitop__strdup(u->arch);
    e->nvrtc_version = jitop__strdup(jitop__nvrtc_version());
    e->created = (int64_t)time(NULL);
    if (rc != JITOP_OK || !e->arch || !e->nvrtc_version) {
        jitop__entry_free(e);
        return jitop__fail(JITOP_ENOMEM, "out of memory");
    }
    e->bin = *bin;
    memset(bin, 0, sizeof *bin);
    return JITOP_OK;
}

/* Logs (verbose only) why the unit is compiled. */
static void log_rebuild(jitop_ctx *ctx, const jitop__unit *u, const jitop__deps *old,
                        const char *old_key, const jitop__deps *cur, const char *key)
{
    if (!ctx->verbose)
        return;
    char *why = NULL;
    if (describe_miss(ctx, u, old, old_key, cur, key, &why) != JITOP_OK) {
        jitop__clear_error();
        return;
    }
    jitop__log(ctx, "building %s for %s (key %s):", u->source_name, u->arch, key);
    for (char *line = why; line;) {
        char *nl = strchr(line, '\n');
        if (nl)
            *nl = '\0';
        jitop__log(ctx, "  %s", line);
        line = nl ? nl + 1 : NULL;
    }
    free(why);
}

void jitop__log_warnings(jitop_ctx *ctx, const jitop__unit *u, const jitop__binary *bin,
                         bool cached)
{
    if (!ctx->verbose || !bin->log || bin->unresolved)
        return;
    jitop__log(ctx, "%s: NVRTC's log%s:", u->source_name, cached ? " (from the cache)" : "");
    for (const char *line = bin->log; line && *line;) {
        const char *nl = strchr(line, '\n');
        int n = nl ? (int)(nl - line) : (int)strlen(line);
        if (n > 0)
            jitop__log(ctx, "  %.*s", n, line);
        line = nl ? nl + 1 : NULL;
    }
}

/* What the entry of out, read from the cache, answers: its code, or the
 * failure it recorded (jitop__binary.unresolved, then out->unresolved). */
static int entry_answer(jitop_ctx *ctx, const jitop__unit *u, jitop__built *out)
{
    if (out->entry.bin.unresolved) {
        out->unresolved = true;
        return jitop__unresolved_fail(u, &out->entry.bin);
    }
    jitop__log_warnings(ctx, u, &out->entry.bin, true);
    return JITOP_OK;
}

/* The end of a slow build: a binary just compiled (found: a hit, read
 * already into out->entry) becomes the cache entry under out->key, the
 * manifest records deps, and deps move into out. An uncacheable unit
 * (jitop__deps.uncacheable) gets neither entry nor manifest. */
static int build_store(jitop_ctx *ctx, const jitop__unit *u, const char id[33],
                       jitop__deps *deps, jitop__binary *bin, bool found, double t_compile,
                       const jitop__instlist *lists, jitop__built *out)
{
    int status = JITOP_OK;
    out->cached = found;
    if (!found) {
        jitop__log_warnings(ctx, u, bin, false);
        double t_put = jitop__now_ms();
        status = make_entry(u, deps, bin, &out->entry);
        if (status == JITOP_OK && !deps->uncacheable)
            status = jitop__cache_put(ctx->cache, out->key, &out->entry);
        if (status != JITOP_OK)
            return status;
        /* Where a cold build's time goes: NVRTC, or writing the entry
         * (fsync on a slow disk shows here). */
        if (deps->uncacheable)
            jitop__log(ctx, "%s: NVRTC %.1f ms, not cached", u->source_name, t_compile);
        else
            jitop__log(ctx, "%s: NVRTC %.1f ms, cache write %.1f ms", u->source_name,
                       t_compile, jitop__now_ms() - t_put);
    }
    if (!deps->uncacheable)
        save_manifest(ctx, id, deps, out->key, lists);
    out->unresolved = !found && out->entry.bin.unresolved;
    status = found             ? entry_answer(ctx, u, out)
             : out->unresolved ? jitop__unresolved_fail(u, &out->entry.bin)
                               : JITOP_OK;
    if (status != JITOP_OK)
        return status;
    out->deps = *deps;
    memset(deps, 0, sizeof *deps);
    return JITOP_OK;
}

bool jitop__unit_folds(const jitop__unit *u)
{
    return u->names.n == 0 && !u->relocatable;
}

/* What the build of a source knows of its instances (the fold rule in
 * build.h): the manifest's lists and the caller's extra names. */
struct fold {
    bool on;                   /* u is a source */
    /* The fold's names are wanted in the binary now (jitop_build, the CLI's
     * hit pass, a prewarm): only a binary that holds them all will do. */
    bool all;
    size_t cap;                /* jitop__fold_max */
    jitop__instlist lists;     /* as its manifest has them */
    const jitop__strv *extra;  /* NULL: none */
};

/* Appends each string of from not in sv already. */
static int strv_union(jitop__strv *sv, const jitop__strv *from)
{
    int rc = JITOP_OK;
    for (size_t i = 0; rc == JITOP_OK && from && i < from->n; i++)
        if (!strv_has(sv, from->v[i]))
            rc = jitop__strv_push(sv, from->v[i]);
    return rc;
}

static int strv_copy(jitop__strv *dst, const jitop__strv *src)
{
    memset(dst, 0, sizeof *dst);
    int rc = strv_union(dst, src);
    if (rc != JITOP_OK)
        jitop__strv_free(dst);
    return rc;
}

/* Whether every string of b is in a. */
static bool strv_covers(const jitop__strv *a, const jitop__strv *b)
{
    for (size_t i = 0; b && i < b->n; i++)
        if (!strv_has(a, b->v[i]))
            return false;
    return true;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

size_t jitop__fold_max(jitop_ctx *ctx)
{
    const char *s = getenv("JITOP_FOLD_MAX");
    if (!s || !*s)
        return JITOP__FOLD_MAX_DEFAULT;
    char *end = NULL;
    errno = 0;
    unsigned long v = strtoul(s, &end, 10);
    if (errno != 0 || *end != '\0' || s[0] == '-' || v > JITOP__FOLD_MAX_LIMIT) {
        jitop__log(ctx, "JITOP_FOLD_MAX=%s is not a count of names from 0 to %d: %d is used",
                   s, JITOP__FOLD_MAX_LIMIT, JITOP__FOLD_MAX_DEFAULT);
        return JITOP__FOLD_MAX_DEFAULT;
    }
    return (size_t)v;
}

/* The names a compile of the source folds in (build.h's rule), sorted so
 * that one set of names is one key whatever order it was asked in. The
 * caller's names, alone while the files are those of the lists (changed
 * false: every other name is in a binary of them already). Else, or with
 * no names of the caller's (jitop_build), the caller's, asked and built
 * while they fit in cap; over it the caller's alone, or with none, the cap
 * most recent asked. */
static int fold_target(const struct fold *f, bool changed, jitop__strv *out)
{
    jitop__strv all = {0};
    memset(out, 0, sizeof *out);
    bool own = f->extra && f->extra->n > 0;
    if (own && !changed) {
        if (strv_union(out, f->extra) != JITOP_OK) {
            jitop__strv_free(out);
            return jitop__fail(JITOP_ENOMEM, "out of memory");
        }
        if (out->n > 1)
            qsort(out->v, out->n, sizeof *out->v, cmp_str);
        return JITOP_OK;
    }
    int rc = strv_union(&all, f->extra);
    if (rc == JITOP_OK)
        rc = strv_union(&all, &f->lists.asked);
    if (rc == JITOP_OK)
        rc = strv_union(&all, &f->lists.built);
    if (rc == JITOP_OK && all.n <= f->cap) {
        *out = all;
        memset(&all, 0, sizeof all);
    } else if (rc == JITOP_OK && own) {
        rc = strv_union(out, f->extra);
    } else {
        for (size_t i = 0; rc == JITOP_OK && i < f->lists.asked.n && out->n < f->cap; i++)
            if (!strv_has(out, f->lists.asked.v[i]))
                rc = jitop__strv_push(out, f->lists.asked.v[i]);
    }
    jitop__strv_free(&all);
    if (rc != JITOP_OK) {
        jitop__strv_free(out);
        return jitop__fail(JITOP_ENOMEM, "out of memory");
    }
    if (out->n > 1)
        qsort(out->v, out->n, sizeof *out->v, cmp_str);
    return JITOP_OK;
}

/* The binary of the manifest's lists a build takes without compiling: the
 * first of built and the bins that holds the caller's names (a prewarm's
 * shape is prewarmed once a binary holds it, whatever else was asked
 * since), or with all and no such names, the fold's (target). Else, but
 * with all, built (a name it lacks is then compiled at its get, build.h).
 * NULL: none will do. */
static int fold_pick(struct fold *f, const jitop__strv *target, const jitop__strv **pick)
{
    const jitop__strv *want = f->extra && f->extra->n > 0 ? f->extra : f->all ? target : NULL;
    *pick = &f->lists.built;
    if (strv_covers(&f->lists.built, want))
        return JITOP_OK;
    /* Decoded only now: the warm path that built does is spared it. */
    int status = jitop__instlist_bins(&f->lists);
    for (size_t i = 0; status == JITOP_OK && i < f->lists.nbins; i++) {
        if (strv_covers(&f->lists.bins[i], want)) {
            *pick = &f->lists.bins[i];
            return JITOP_OK;
        }
    }
    *pick = f->all ? NULL : &f->lists.built;
    return status;
}

/* Whether two scans found the same files with the same contents (what a
 * key reads of them): the manifest's bins stay valid. */
static bool same_files(const jitop__deps *a, const jitop__deps *b)
{
    if (!a || !b || a->n != b->n)
        return false;
    for (size_t i = 0; i < a->n; i++)
        if (strcmp(a->v[i].path, b->v[i].path) != 0 || !XXH128_isEqual(a->v[i].hash, b->v[i].hash))
            return false;
    return true;
}

/* The lists the manifest keeps after a build that took or compiled the
 * binary of used: asked with the caller's names first, capped; the bins
 * the old built list and the old bins, for the same files only, less any
 * that used or a more recent bin holds, at most JITOP__FOLD_BINS_MAX. */
static int fold_lists_after(struct fold *f, const jitop__strv *used, bool same,
                            jitop__instlist *out)
{
    memset(out, 0, sizeof *out);
    if (same && jitop__instlist_bins(&f->lists) != JITOP_OK)
        return JITOP_ENOMEM;
    int rc = strv_copy(&out->built, used);
    for (size_t i = 0; rc == JITOP_OK && f->extra && i < f->extra->n && out->asked.n < f->cap;
         i++)
        if (!strv_has(&out->asked, f->extra->v[i]))
            rc = jitop__strv_push(&out->asked, f->extra->v[i]);
    for (size_t i = 0; rc == JITOP_OK && i < f->lists.asked.n && out->asked.n < f->cap; i++)
        if (!strv_has(&out->asked, f->lists.asked.v[i]))
            rc = jitop__strv_push(&out->asked, f->lists.asked.v[i]);
    size_t nold = same ? 1 + f->lists.nbins : 0;
    if (rc == JITOP_OK && nold > 0 && !(out->bins = calloc(nold, sizeof *out->bins)))
        rc = JITOP_ENOMEM;
    for (size_t i = 0; rc == JITOP_OK && i < nold && out->nbins < JITOP__FOLD_BINS_MAX; i++) {
        const jitop__strv *c = i == 0 ? &f->lists.built : &f->lists.bins[i - 1];
        bool keep = c->n > 0 && !strv_covers(used, c);
        for (size_t j = 0; keep && j < out->nbins; j++)
            keep = !strv_covers(&out->bins[j], c);
        if (keep && (rc = strv_copy(&out->bins[out->nbins], c)) == JITOP_OK)
            out->nbins++;
    }
    if (rc != JITOP_OK) {
        jitop__instlist_free(out);
        return jitop__fail(JITOP_ENOMEM, "out of memory");
    }
    return JITOP_OK;
}

/* l without its bins: what jitop__built.inst hands on (its callers take
 * built and asked, and clear the struct). */
static void drop_bins(jitop__instlist *l)
{
    jitop__instlist bins = {0};
    bins.bins = l->bins;
    bins.nbins = l->nbins;
    bins.bins_raw = l->bins_raw;
    bins.bins_raw_len = l->bins_raw_len;
    jitop__instlist_free(&bins);
    l->bins = NULL;
    l->bins_raw = NULL;
    l->nbins = l->bins_raw_len = 0;
}

/* u with names as its name expressions: a view (no copy) for keys and the
 * compile, never freed. */
static jitop__unit unit_named(const jitop__unit *u, const jitop__strv *names)
{
    jitop__unit v = *u;
    v.names = *names;
    return v;
}

static int known_in_lists(jitop_ctx *ctx, const jitop__unit *u, const jitop__deps *known,
                          jitop__built *out, bool *found);

/* The slow path: scan, key, cache, then lock, check again, compile, store.
 * f: a source's fold (build.h's rule), or NULL. */
static int build_slow(jitop_ctx *ctx, const jitop__unit *u, enum build_mode mode,
                      const char id[33], const jitop__deps *mdeps, const char *mkey,
                      struct fold *f, jitop__built *out)
{
    int status = JITOP_OK, lock_fd = -1;
    jitop__deps deps = {0};
    jitop__binary bin = {0};
    char *text = NULL, *changed = NULL;
    bool found = false;
    double t_compile = 0;
    /* fset: what a compile of a source folds in (fold_target, planned once
     * the first scan says whether the files changed since the manifest);
     * uc: u with those names. */
    jitop__strv fset = {0};
    jitop__instlist lists = {0};
    const jitop__strv *pick = NULL;
    bool try_built = false, fell_back = false, planned = !(f && f->on);
    jitop__unit uc = *u;
    const jitop__strv *used = &fset; /* the names of the binary found or compiled */
    for (int attempt = 1;; attempt++) {
        status = jitop__deps_scan(u, &deps, &text);
        if (status != JITOP_OK)
            goto out;
        out->input_bytes = 0;
        for (size_t i = 0; i < deps.n; i++)
            out->input_bytes += deps.v[i].size;
        if (jitop__after_scan_hook)
            jitop__after_scan_hook(u->source_name);
        if (deps.note && attempt == 1)
            jitop__log(ctx, "%s: %s", u->source_name, deps.note);
        if (!planned) {
            planned = true;
            status = fold_target(f, !same_files(mdeps, &deps), &fset);
            if (status != JITOP_OK)
                goto out;
            uc = unit_named(u, &fset);
            /* A binary of the manifest's lists that will do, looked up for
             * the files as they are before anything is compiled (a touch, a
             * save of the same bytes, a prewarm's shape in a bin). */
            status = fold_pick(f, &fset, &pick);
            if (status != JITOP_OK)
                goto out;
            try_built = pick != NULL;
        }
        /* A source whose binary of the manifest's lists is cached for these
         * files takes it: names asked since wait for the next compile (the
         * fold rule). */
        if (try_built && !deps.uncacheable) {
            jitop__unit ub = unit_named(u, pick);
            jitop__cache_key(&ub, &deps, out->key);
            status = jitop__cache_get(ctx->cache, out->key, &out->entry, &found);
            if (status != JITOP_OK)
                goto out;
            if (found && out->entry.bin.unresolved) {
                /* Not a binary of the list: an answer that a name of it
                 * names nothing in these files (fold_failed below). */
                jitop__entry_free(&out->entry);
                memset(&out->entry, 0, sizeof out->entry);
                found = false;
            }
            if (found) {
                used = pick;
                break;
            }
        }
        jitop__cache_key(&uc, &deps, out->key);
        /* An uncacheable unit is compiled every time: neither looked up nor
         * stored, so no lock either. */
        if (!deps.uncacheable) {
            status = jitop__cache_get(ctx->cache, out->key, &out->entry, &found);
            if (status != JITOP_OK)
                goto out;
        }
        /* An instance asked alone of these files has the key of the
         * source folded with that one name: its cached answer that the
         * name names nothing is the fold not compiling (fold_failed). */
        if (found && f && f->on && uc.names.n > 0 && out->entry.bin.unresolved)
            goto fold_failed;
        if (found) {
            if (mkey)
                jitop__log(ctx, "%s: files touched but unchanged: cache hit %s", u->source_name,
                           out->key);
            break;
        }
        /* An instance a module rebuilds (a reload's): a binary of its
         * source's lists that holds it, before a compile of its own. */
        if ((mode == BUILD_FULL || mode == BUILD_DEFER) && !(f && f->on) && !deps.uncacheable) {
            status = known_in_lists(ctx, u, &deps, out, &found);
            if (status != JITOP_OK)
                goto out;
            if (found)
                break;
        }
        if (mode == BUILD_CACHED_ONLY)
            goto out; /* a miss: out->cached stays false, nothing is built */
        if (!deps.uncacheable)
            status = jitop__cache_lock(ctx->cache, out->key, &lock_fd);
        if (status != JITOP_OK)
            goto out;
        /* Another process may have built it while we waited for the lock. */
        if (!deps.uncacheable) {
            status = jitop__cache_get(ctx->cache, out->key, &out->entry, &found);
            if (status == JITOP_OK && found && f && f->on && uc.names.n > 0 &&
                out->entry.bin.unresolved)
                goto fold_failed;
            if (status != JITOP_OK || found)
                break;
        }
        log_rebuild(ctx, &uc, mdeps, mkey, &deps, out->key);
        if (uc.names.n > 0 && f && f->on)
            jitop__log(ctx, "%s: one program with the %zu instances asked of it", u->source_name,
                       uc.names.n);
        if (jitop__before_compile_hook)
            jitop__before_compile_hook(u->source_name);
        t_compile = jitop__now_ms();
        jitop__pch_plan pch;
        jitop__pch_prepare(ctx, &uc, text, &deps, &pch);
        status = jitop__compile_pch(&uc, text, &pch.req, &bin);
        jitop__pch_finish(ctx, &uc, &pch);
        t_compile = jitop__now_ms() - t_compile;
        if (f && f->on && uc.names.n > 0 &&
            (status == JITOP_ECOMPILE || status == JITOP_ENOTFOUND || bin.unresolved)) {
            /* The fold does not compile: the source on its own, and the
             * lists start over (build.h). Its instances, compiled alone,
             * say what is wrong with them. */
        fold_failed:
            jitop__entry_free(&out->entry);
            memset(&out->entry, 0, sizeof out->entry);
            found = false;
            jitop__log(ctx, "%s: does not compile with the %zu instances asked of it: "
                            "compiling it alone",
                       u->source_name, uc.names.n);
            jitop__clear_error();
            status = JITOP_OK;
            fell_back = true;
            jitop__strv_free(&fset);
            uc = unit_named(u, &fset);
            try_built = false;
            jitop__cache_unlock(lock_fd);
            lock_fd = -1;
            jitop__binary_free(&bin);
            jitop__deps_free(&deps);
            free(text);
            text = NULL;
            attempt--;
            continue;
        }
        /* A name this unit does not declare is an answer like code: kept
         * in the cache below, so that asking again (in this process or the
         * next) compiles nothing; the failure is returned at the end. */
        if (status == JITOP_ENOTFOUND && bin.unresolved)
            status = JITOP_OK;
        if (status != JITOP_OK)
            goto out;
        if (jitop__after_compile_hook)
            jitop__after_compile_hook(u->source_name);
        status = jitop__deps_changed(&deps, &changed);
        if (status != JITOP_OK)
            goto out;
        if (!changed)
            break;
        jitop__log(ctx, "%s changed during the compile of %s: building again", changed,
                   u->source_name);
        if (attempt == MAX_BUILD_ATTEMPTS) {
            status = jitop__fail(JITOP_EIO, "%s kept changing while %s was compiled (%d attempts)",
                                 changed, u->source_name, attempt);
            goto out;
        }
        jitop__cache_unlock(lock_fd);
        lock_fd = -1;
        jitop__binary_free(&bin);
        jitop__deps_free(&deps);
        free(text);
        free(changed);
        text = changed = NULL;
    }
    if (status == JITOP_OK && f && f->on) {
        /* The lists the manifest keeps: the binary's names, the names
         * asked and the other binaries of these files (none after a fold
         * that failed). */
        status = fell_back ? strv_copy(&lists.built, used)
                           : fold_lists_after(f, used, same_files(mdeps, &deps), &lists);
    }
    if (status == JITOP_OK) {
        jitop__unit ustore = f && f->on ? unit_named(u, used) : *u;
        status = build_store(ctx, &ustore, id, &deps, &bin, found, t_compile,
                             f && f->on ? &lists : NULL, out);
    }
    if (status == JITOP_OK && f && f->on) {
        drop_bins(&lists);
        out->inst = lists;
        memset(&lists, 0, sizeof lists);
    }
out:
    jitop__cache_unlock(lock_fd);
    jitop__binary_free(&bin);
    jitop__deps_free(&deps);
    jitop__strv_free(&fset);
    jitop__instlist_free(&lists);
    free(text);
    free(changed);
    return status;
}

static int build_unit(jitop_ctx *ctx, const jitop__unit *u, enum build_mode mode,
                      const jitop__strv *extra, jitop__built *out)
{
    double t0 = jitop__now_ms();
    int status = JITOP_OK;
    jitop__deps mdeps = {0};
    char id[33], mkey[33];
    bool mfound = false, fresh = false, found = false;
    char *why = NULL;
    struct fold f = {0};
    memset(out, 0, sizeof *out);
    if (!ctx || !ctx->cache || !u)
        return jitop__fail(JITOP_EINVAL, "build: NULL context, cache or unit");
    f.on = jitop__unit_folds(u);
    f.extra = extra;

    /* A source's instance lists are in the manifest read here anyway: the
     * warm path reads no other file for them. */
    jitop__manifest_id(u, id);
    status = jitop__manifest_get_lists(ctx->cache, id, &mdeps, mkey, f.on ? &f.lists : NULL,
                                       &mfound);
    if (status != JITOP_OK)
        goto out;
    if (mfound) {
        status = jitop__deps_fresh(&mdeps, &fresh, &why);
        if (status != JITOP_OK)
            goto out;
    }
    f.all = f.on && (mode == BUILD_FOLD || mode == BUILD_CACHED_ONLY);
    f.cap = f.on ? jitop__fold_max(ctx) : 0;
    const jitop__strv *pick = NULL;
    if (fresh && f.on) {
        /* The binary of built or of a bin that holds what is wanted (the
         * fold's names, or the caller's: fold_pick). With none, the binary
         * that folds them in is another key: the slow path looks for it
         * (and writes the manifest that names it) or compiles it. */
        jitop__strv target = {0};
        if (f.all && (status = fold_target(&f, false, &target)) != JITOP_OK)
            goto out;
        if (status == JITOP_OK)
            status = fold_pick(&f, &target, &pick);
        jitop__strv_free(&target);
        if (status != JITOP_OK)
            goto out;
        fresh = pick != NULL;
    }
    if (fresh) {
        /* The fast path: no file but the manifest and the entry is read. The
         * key is recomputed from the manifest's hashes, so that it follows
         * the NVRTC version and the unit, not what the manifest claims. */
        jitop__unit uk = f.on ? unit_named(u, pick) : *u;
        jitop__cache_key(&uk, &mdeps, out->key);
        status = mode == BUILD_DEFER ? jitop__cache_touch(ctx->cache, out->key, &found)
                       : jitop__cache_get(ctx->cache, out->key, &out->entry, &found);
        if (status != JITOP_OK)
            goto out;
        if (found) {
            if (mdeps.note)
                jitop__log(ctx, "%s: %s", u->source_name, mdeps.note);
            out->cached = true;
            out->deferred = mode == BUILD_DEFER;
            if (mode != BUILD_DEFER)
                status = entry_answer(ctx, u, out);
            out->deps = mdeps;
            memset(&mdeps, 0, sizeof mdeps);
            /* inst.built names the binary taken: a bin's, when it was. */
            for (size_t i = 0; i < f.lists.nbins; i++) {
                if (pick == &f.lists.bins[i]) {
                    jitop__strv t = f.lists.built;
                    f.lists.built = f.lists.bins[i];
                    f.lists.bins[i] = t;
                }
            }
            drop_bins(&f.lists);
            out->inst = f.lists;
            memset(&f.lists, 0, sizeof f.lists);
            goto out;
        }
    } else if (why) {
        jitop__log(ctx, "%s: %s", u->source_name, why);
    }
    status = build_slow(ctx, u, mode, id, mfound ? &mdeps : NULL, mfound ? mkey : NULL, &f, out);
out:
    if (status != JITOP_OK)
        jitop__built_free(out);
    out->ms = jitop__now_ms() - t0;
    jitop__deps_free(&mdeps);
    jitop__instlist_free(&f.lists);
    free(why);
    return status;
}

int jitop__build_unit(jitop_ctx *ctx, const jitop__unit *u, jitop__built *out)
{
    return build_unit(ctx, u, BUILD_FULL, NULL, out);
}

int jitop__build_unit_deferred(jitop_ctx *ctx, const jitop__unit *u, jitop__built *out)
{
    return build_unit(ctx, u, BUILD_DEFER, NULL, out);
}

int jitop__build_unit_fold(jitop_ctx *ctx, const jitop__unit *u, const jitop__strv *extra,
                           jitop__built *out)
{
    return build_unit(ctx, u, BUILD_FULL, extra, out);
}

int jitop__build_unit_declared(jitop_ctx *ctx, const jitop__unit *u, bool defer,
                               const jitop__strv *declared, jitop__built *out)
{
    return build_unit(ctx, u, defer ? BUILD_DEFER : BUILD_FULL, declared, out);
}

int jitop__build_join(jitop_ctx *ctx, const jitop__unit *u, const char *name)
{
    jitop__deps deps = {0};
    jitop__instlist lists = {0};
    char id[33], key[33];
    bool found = false;
    if (!jitop__unit_folds(u))
        return JITOP_OK;
    jitop__manifest_id(u, id);
    int status = jitop__manifest_get_lists(ctx->cache, id, &deps, key, &lists, &found);
    size_t cap = jitop__fold_max(ctx);
    if (status == JITOP_OK && found && cap > 0 &&
        (lists.asked.n == 0 || strcmp(lists.asked.v[0], name) != 0)) {
        /* Most recent first: the name, then the others, as many as the cap
         * keeps (the oldest drop out). */
        jitop__strv asked = {0};
        status = jitop__strv_push(&asked, name);
        for (size_t i = 0; status == JITOP_OK && i < lists.asked.n && asked.n < cap; i++)
            if (strcmp(lists.asked.v[i], name) != 0)
                status = jitop__strv_push(&asked, lists.asked.v[i]);
        jitop__strv_free(&lists.asked);
        lists.asked = asked;
        if (status == JITOP_OK)
            status = jitop__manifest_put_lists(ctx->cache, id, &deps, key, &lists);
        if (status == JITOP_OK)
            jitop__log(ctx, "%s: %s joins the instances asked of it (compiled in at its next "
                            "compile, while they fit in %zu)",
                       u->source_name, name, cap);
    }
    if (status != JITOP_OK && status != JITOP_ENOMEM) {
        jitop__log(ctx, "%s: cannot add %s to its instance list: %s", u->source_name, name,
                   jitop_errmsg(ctx));
        jitop__clear_error();
        status = JITOP_OK;
    }
    jitop__deps_free(&deps);
    jitop__instlist_free(&lists);
    return status;
}

/* An instance (u: a source's unit with one name) whose own binary the
 * cache lacks for the files known: the binary of its source's manifest
 * lists (built, then the bins) that holds it, looked up under the key of
 * that list and these files, so what it holds is in its key (build.h's
 * bins). *found false when none is cached. Costs the manifest's read and
 * a lookup per list holding the name: only on the way to a compile. */
static int known_in_lists(jitop_ctx *ctx, const jitop__unit *u, const jitop__deps *known,
                          jitop__built *out, bool *found)
{
    jitop__strv none = {0};
    jitop__unit src = unit_named(u, &none);
    jitop__deps md = {0};
    jitop__instlist l = {0};
    char id[33], mkey[33];
    bool mfound = false;
    *found = false;
    if (u->names.n != 1 || u->relocatable)
        return JITOP_OK;
    jitop__manifest_id(&src, id);
    int status = jitop__manifest_get_lists(ctx->cache, id, &md, mkey, &l, &mfound);
    if (status == JITOP_OK && mfound)
        status = jitop__instlist_bins(&l);
    for (size_t i = 0; status == JITOP_OK && mfound && !*found && i <= l.nbins; i++) {
        const jitop__strv *c = i == 0 ? &l.built : &l.bins[i - 1];
        /* A list of the name alone is the key already looked up. */
        if (c->n < 2 || !strv_has(c, u->names.v[0]))
            continue;
        jitop__unit uc = unit_named(&src, c);
        char key[33];
        jitop__cache_key(&uc, known, key);
        status = jitop__cache_get(ctx->cache, key, &out->entry, found);
        if (status == JITOP_OK && *found && out->entry.bin.unresolved) {
            jitop__entry_free(&out->entry);
            memset(&out->entry, 0, sizeof out->entry);
            *found = false;
        }
        if (status == JITOP_OK && *found) {
            memcpy(out->key, key, sizeof key);
            jitop__log(ctx, "%s: %s is in the binary %s of %zu instances (no compile)",
                       u->source_name, u->names.v[0], key, c->n);
        }
    }
    jitop__deps_free(&md);
    jitop__instlist_free(&l);
    return status;
}

int jitop__build_unit_known(jitop_ctx *ctx, const jitop__unit *u, const jitop__deps *known,
                            jitop__built *out)
{
    double t0 = jitop__now_ms();
    bool found = false;
    memset(out, 0, sizeof *out);
    if (!ctx || !ctx->cache || !u || !known)
        return jitop__fail(JITOP_EINVAL, "build: NULL context, cache, unit or files");
    if (known->uncacheable)
        return build_unit(ctx, u, BUILD_FULL, NULL, out);
    jitop__cache_key(u, known, out->key);
    int status = jitop__cache_get(ctx->cache, out->key, &out->entry, &found);
    if (status == JITOP_OK && !found)
        status = known_in_lists(ctx, u, known, out, &found);
    if (status == JITOP_OK && found)
        status = entry_answer(ctx, u, out);
    if (status == JITOP_OK && found)
        status = jitop__deps_copy(known, &out->deps);
    if (status != JITOP_OK) {
        jitop__built_free(out);
        return status;
    }
    if (!found) {
        jitop__built_free(out);
        return build_unit(ctx, u, BUILD_FULL, NULL, out);
    }
    out->cached = true;
    out->ms = jitop__now_ms() - t0;
    return JITOP_OK;
}

void jitop__built_free(jitop__built *b)
{
    if (!b)
        return;
    jitop__deps_free(&b->deps);
    jitop__entry_free(&b->entry);
    jitop__instlist_free(&b->inst);
}

/* What explain and would_hit share: the key the unit would be built under
 * now, and whether the cache holds it (a peek: nothing is marked used or
 * removed). The manifest's stat data is tried first; when it does not vouch
 * for the files, they are scanned and hashed. */
struct probe {
    jitop__deps mdeps, deps; /* the manifest's deps; the scanned ones */
    char mkey[33], key[33];
    bool mfound, fresh, found;
    char *stale;             /* why the manifest did not vouch, or NULL */
    /* A source (the fold rule, build.h): its manifest's lists, and the
     * names of the binary jitop_build would give (every name asked). */
    jitop__instlist lists;
    jitop__strv names;
};

static int probe_unit(jitop_ctx *ctx, const jitop__unit *u, struct probe *p)
{
    char id[33], *text = NULL;
    int status = JITOP_OK;
    bool folds = jitop__unit_folds(u);
    memset(p, 0, sizeof *p);
    jitop__manifest_id(u, id);
    status = jitop__manifest_get_lists(ctx->cache, id, &p->mdeps, p->mkey,
                                       folds ? &p->lists : NULL, &p->mfound);
    if (status == JITOP_OK && p->mfound)
        status = jitop__deps_fresh(&p->mdeps, &p->fresh, &p->stale);
    /* What jitop_build would build: the fold's names (fold_target), or a
     * binary of the lists that holds them all (fold_pick). */
    const jitop__strv *pick = NULL;
    if (status == JITOP_OK && folds)
        status = jitop__instlist_bins(&p->lists); /* f below is a shallow copy */
    if (status == JITOP_OK && folds) {
        struct fold f = {.on = true, .all = true, .cap = jitop__fold_max(ctx), .lists = p->lists};
        status = fold_target(&f, !p->fresh, &p->names);
        if (status == JITOP_OK)
            status = fold_pick(&f, &p->names, &pick);
        if (pick && pick->n > 0) {
            jitop__strv_free(&p->names);
            status = strv_copy(&p->names, pick);
        }
    }
    if (status != JITOP_OK)
        goto out;
    /* The manifest vouches for the files, not for a binary of names it
     * has not built: hashed then, as the build does. */
    if (p->fresh && folds && !pick)
        p->fresh = false;
    const jitop__deps *d = &p->mdeps;
    if (!p->fresh) {
        status = jitop__deps_scan(u, &p->deps, &text);
        if (status != JITOP_OK)
            goto out;
        d = &p->deps;
    }
    jitop__unit uk = folds ? unit_named(u, &p->names) : *u;
    jitop__cache_key(&uk, d, p->key);
    if (!p->deps.uncacheable)
        status = jitop__cache_peek(ctx->cache, p->key, &p->found);
out:
    free(text);
    return status;
}

static void probe_free(struct probe *p)
{
    jitop__deps_free(&p->mdeps);
    jitop__deps_free(&p->deps);
    jitop__instlist_free(&p->lists);
    jitop__strv_free(&p->names);
    free(p->stale);
}

/* Explain's line on a source's instances: the name expressions compiled
 * into the binary its key names (they are in that key), each escaped;
 * NULL when there are none. */
static char *instances_line(const jitop__strv *names, bool hit)
{
    jitop__strv shown = {0};
    char *line = NULL, *joined = NULL;
    for (size_t i = 0; i < names->n; i++) {
        char *e = jitop__escape(names->v[i]);
        int rc = e ? jitop__strv_push(&shown, e) : JITOP_ENOMEM;
        free(e);
        if (rc != JITOP_OK)
            goto out;
    }
    joined = jitop__strv_join(&shown, "; ");
    if (joined)
        line = jitop__sprintf("%s %zu instance%s asked of this source (in the key): %s",
                              hit ? "compiled with the" : "a build compiles it with the",
                              names->n, names->n == 1 ? "" : "s", joined);
out:
    free(joined);
    jitop__strv_free(&shown);
    return line;
}

/* A local miss, said further: what the remote tier answers for key ("remote
 * hit" means the next build reads it from there instead of compiling). */
static int explain_remote(jitop_ctx *ctx, const char key[33], char **why)
{
    int state = JITOP__REMOTE_NONE;
    char *where = NULL, *more = NULL;
    int status = jitop__cache_remote_probe(ctx->cache, key, &state, &where);
    if (status != JITOP_OK || state == JITOP__REMOTE_NONE)
        return status;
    more = jitop__sprintf("%s\n%s", *why,
                          state == JITOP__REMOTE_HIT
                              ? "remote hit: the next build reads it from the remote cache"
                          : state == JITOP__REMOTE_MISS
                              ? "remote miss: no remote cache holds it either"
                              : "remote down: no remote cache answered (see the warning)");
    if (more && where) {
        char *with = jitop__sprintf("%s (%s)", more, where);
        free(more);
        more = with;
    }
    free(where);
    if (!more)
        return jitop__fail(JITOP_ENOMEM, "out of memory");
    free(*why);
    *why = more;
    return JITOP_OK;
}

int jitop__explain_unit(jitop_ctx *ctx, const jitop__unit *u, bool *hit, char **why)
{
    struct probe p;
    *hit = false;
    *why = NULL;
    if (!ctx || !ctx->cache || !u)
        return jitop__fail(JITOP_EINVAL, "explain: NULL context, cache or unit");
    int status = probe_unit(ctx, u, &p);
    if (status != JITOP_OK)
        goto out;
    if (p.found) {
        const char *note = p.fresh ? p.mdeps.note : p.deps.note;
        *hit = true;
        *why = p.fresh   ? jitop__sprintf("cached: %s (no file changed since the last build)%s%s",
                                          p.key, note ? "\n" : "", note ? note : "")
               : p.stale ? jitop__sprintf("cached: %s (%s; contents unchanged)%s%s", p.key,
                                          p.stale, note ? "\n" : "", note ? note : "")
                         : jitop__sprintf("cached: %s%s%s", p.key, note ? "\n" : "",
                                          note ? note : "");
        if (!*why)
            status = jitop__fail(JITOP_ENOMEM, "out of memory");
        goto out;
    }
    jitop__unit uk = jitop__unit_folds(u) ? unit_named(u, &p.names) : *u;
    status = describe_miss(ctx, &uk, p.mfound ? &p.mdeps : NULL, p.mfound ? p.mkey : NULL,
                           p.fresh ? &p.mdeps : &p.deps, p.key, why);
    if (status == JITOP_OK && !p.deps.uncacheable)
        status = explain_remote(ctx, p.key, why);
out:
    if (status == JITOP_OK && *why && p.names.n > 0) {
        char *line = instances_line(&p.names, *hit);
        char *both = line ? jitop__sprintf("%s\n%s", *why, line) : NULL;
        free(line);
        free(*why);
        *why = both;
        if (!both)
            status = jitop__fail(JITOP_ENOMEM, "out of memory");
    }
    probe_free(&p);
    return status;
}

/* The unit jitop_build and jitop_explain describe, for ctx's arch when arch
 * is NULL. */
static int public_unit(jitop_ctx *ctx, const char *call, const char *path, const char *arch,
                       const char *const *options, size_t noptions, const char *const *names,
                       size_t nnames, jitop__unit *u)
{
    if (!ctx || !path)
        return jitop__fail(JITOP_EINVAL, "%s: NULL %s", call, ctx ? "path" : "context");
    if (!arch) {
        int status = jitop_ctx_arch(ctx, &arch);
        if (status != JITOP_OK)
            return status;
    }
    return jitop__unit_init(u, path, NULL, options, noptions, names, nnames, arch);
}

int jitop_build(jitop_ctx *ctx, const char *path, const char *arch, const char *const *options,
                size_t noptions, const char *const *names, size_t nnames,
                jitop_build_result *result)
{
    double t0 = jitop__now_ms();
    jitop__unit u;
    jitop__built b;
    int status = public_unit(ctx, "jitop_build", path, arch, options, noptions, names, nnames, &u);
    if (status != JITOP_OK)
        return status;
    status = build_unit(ctx, &u, BUILD_FOLD, NULL, &b);
    if (status == JITOP_OK && result) {
        result->cached = b.cached;
        memcpy(result->key, b.key, sizeof result->key);
        result->ms = jitop__now_ms() - t0;
        result->warnings = b.entry.bin.log != NULL;
    }
    if (status == JITOP_OK)
        jitop__built_free(&b);
    jitop__unit_free(&u);
    return status;
}

int jitop__build_if_cached(jitop_ctx *ctx, const char *path, const char *arch,
                           const char *const *options, size_t noptions,
                           const char *const *names, size_t nnames, bool *hit,
                           jitop_build_result *result, int64_t *input_bytes)
{
    double t0 = jitop__now_ms();
    jitop__unit u;
    jitop__built b;
    *hit = false;
    if (input_bytes)
        *input_bytes = 0;
    int status = public_unit(ctx, "jitop build", path, arch, options, noptions, names, nnames, &u);
    if (status != JITOP_OK)
        return status;
    status = build_unit(ctx, &u, BUILD_CACHED_ONLY, NULL, &b);
    if (status == JITOP_OK) {
        *hit = b.cached;
        memset(result, 0, sizeof *result);
        result->cached = b.cached;
        if (b.cached)
            memcpy(result->key, b.key, sizeof result->key);
        result->warnings = b.cached && b.entry.bin.log != NULL;
        result->ms = jitop__now_ms() - t0;
        if (input_bytes)
            *input_bytes = b.input_bytes;
        jitop__built_free(&b);
    }
    jitop__unit_free(&u);
    return status;
}

int jitop_explain(jitop_ctx *ctx, const char *path, const char *arch,
                  const char *const *options, size_t noptions, const char *const *names,
                  size_t nnames, int *would_hit, char **why)
{
    if (!would_hit || !why)
        return jitop__fail(JITOP_EINVAL, "jitop_explain: NULL would_hit or why");
    *would_hit = 0;
    *why = NULL;
    jitop__unit u;
    bool hit = false;
    int status = public_unit(ctx, "jitop_explain", path, arch, options, noptions, names, nnames,
                             &u);
    if (status != JITOP_OK)
        return status;
    status = jitop__explain_unit(ctx, &u, &hit, why);
    *would_hit = hit;
    jitop__unit_free(&u);
    return status;
}

int jitop_build_log(jitop_ctx *ctx, const char *key, char **log)
{
    jitop__entry e;
    bool found = false;
    if (!ctx || !ctx->cache || !key || !log)
        return jitop__fail(JITOP_EINVAL, "jitop_build_log: NULL argument");
    *log = NULL;
    size_t n = strspn(key, "0123456789abcdef");
    if (n != 32 || key[n] != '\0')
        return jitop__fail(JITOP_EINVAL, "jitop_build_log: '%s' is not a cache key (32 lowercase "
                                         "hex digits)",
                           key);
    int status = jitop__cache_get(ctx->cache, key, &e, &found);
    if (status != JITOP_OK)
        return status;
    if (!found)
        return jitop__fail(JITOP_ENOTFOUND, "jitop_build_log: no entry %s in the cache at %s "
                                            "(evicted or cleaned since it was built?)",
                           key, jitop__cache_root(ctx->cache));
    *log = jitop__strdup(e.bin.log ? e.bin.log : "");
    jitop__entry_free(&e);
    return *log ? JITOP_OK : jitop__fail(JITOP_ENOMEM, "out of memory");
}

int jitop__build_fold(jitop_ctx *ctx, const char *path, const char *arch,
                      const char *const *options, size_t noptions, const jitop__strv *names,
                      jitop_build_result *result)
{
    double t0 = jitop__now_ms();
    jitop__unit u;
    jitop__built b;
    int status = public_unit(ctx, "jitop build", path, arch, options, noptions, NULL, 0, &u);
    if (status != JITOP_OK)
        return status;
    status = build_unit(ctx, &u, BUILD_FOLD, names, &b);
    /* A fold that fell back (a name asked of the source before no longer
     * compiles) left names out of the binary: each is built alone then,
     * the key a later get of it looks up, so that the prewarm did what it
     * says or fails with that name's own error. */
    for (size_t i = 0; status == JITOP_OK && names && i < names->n; i++) {
        if (strv_has(&b.inst.built, names->v[i]))
            continue;
        const char *one[1] = {names->v[i]};
        jitop__unit ui;
        jitop__built bi;
        status = jitop__unit_init(&ui, path, NULL, options, noptions, one, 1, u.arch);
        if (status == JITOP_OK) {
            status = build_unit(ctx, &ui, BUILD_FULL, NULL, &bi);
            if (status == JITOP_OK)
                jitop__built_free(&bi);
            jitop__unit_free(&ui);
        }
        if (status != JITOP_OK)
            jitop__built_free(&b);
    }
    if (status == JITOP_OK && result) {
        memset(result, 0, sizeof *result);
        result->cached = b.cached;
        memcpy(result->key, b.key, sizeof result->key);
        result->ms = jitop__now_ms() - t0;
        result->warnings = b.entry.bin.log != NULL;
    }
    if (status == JITOP_OK)
        jitop__built_free(&b);
    jitop__unit_free(&u);
    return status;
}
