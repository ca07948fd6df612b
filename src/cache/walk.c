/* Walking the cache: listing, gc, least-recently-used eviction under the
 * size cap, clean, and explain's search for an older entry of a source. */
#include "cache/cache_private.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

/* Temporary files left by a process that died mid-write are removed by gc
 * once older than this (a live writer finishes in well under a second). */
#define STALE_TMP_SECONDS 3600

struct walk_item {
    char *path;
    char key[33];    /* the file's name: an entry's key, a manifest's id, a lock's key */
    char target[33]; /* a manifest's entry key, once read ("" before) */
    int64_t size;
    struct timespec mtime;
    bool regular;
    bool gone; /* removed, or found not to count */
};

struct walk {
    struct walk_item *v;
    size_t n, cap;
};

static void walk_free(struct walk *w)
{
    for (size_t i = 0; i < w->n; i++)
        free(w->v[i].path);
    free(w->v);
    memset(w, 0, sizeof *w);
}

static int walk_push(struct walk *w, char *path, const char *key, const struct stat *st)
{
    if (w->n == w->cap) {
        size_t cap = w->cap ? w->cap * 2 : 64;
        struct walk_item *v = realloc(w->v, cap * sizeof *v);
        if (!v) {
            free(path);
            return jitop__fail(JITOP_ENOMEM, "out of memory");
        }
        w->v = v;
        w->cap = cap;
    }
    struct walk_item *it = &w->v[w->n++];
    memset(it, 0, sizeof *it);
    it->path = path;
    memcpy(it->key, key, 32);
    it->regular = S_ISREG(st->st_mode);
    it->size = it->regular ? (int64_t)st->st_size : 0;
    it->mtime = st->st_mtim;
    return JITOP_OK;
}

/* Stale temporary files (a writer died between create and rename) go when
 * older than STALE_TMP_SECONDS; younger ones may belong to a live writer. */
static void remove_stale_tmp(jitop__cache *c, const char *path, const struct stat *st,
                             int64_t *freed)
{
    if (jitop__wall_seconds() - (int64_t)st->st_mtim.tv_sec < STALE_TMP_SECONDS)
        return;
    if (unlink(path) == 0) {
        *freed += (int64_t)st->st_size;
        jitop__cache_vlog(c, "cache: removed stale temporary file %s", path);
    }
}

/* Lists the files named by a key in base's <ab> directories (the entries
 * under the tree, the manifests under manifests/), and in gc mode removes
 * stale temporary files. Regular files only, except in gc mode, which lists
 * anything under such a name so that it is checked (and removed) like an
 * invalid file. Files that vanish during the walk (another process
 * evicting) are skipped, and so is a base that is gone (jitop clean). */
static int walk_shards(jitop__cache *c, const char *base, bool gc, struct walk *w,
                       int64_t *freed)
{
    int status = JITOP_OK;
    DIR *top = opendir(base);
    if (!top)
        return errno == ENOENT ? JITOP_OK
                               : jitop__fail(JITOP_EIO, "cache: opendir %s: %s", base,
                                             strerror(errno));
    struct dirent *de;
    while (status == JITOP_OK && (de = readdir(top)) != NULL) {
        if (!jitop__is_hex(de->d_name, 2))
            continue;
        char *dir = jitop__sprintf("%s/%s", base, de->d_name);
        DIR *sub = dir ? opendir(dir) : NULL;
        if (!dir) {
            status = jitop__fail(JITOP_ENOMEM, "out of memory");
            break;
        }
        if (!sub) {
            free(dir);
            continue;
        }
        struct dirent *fe;
        while (status == JITOP_OK && (fe = readdir(sub)) != NULL) {
            bool named = jitop__is_hex(fe->d_name, 32);
            bool tmp = strncmp(fe->d_name, ".tmp-", 5) == 0;
            if (!named && !tmp)
                continue;
            char *path = jitop__sprintf("%s/%s", dir, fe->d_name);
            struct stat st;
            if (!path) {
                status = jitop__fail(JITOP_ENOMEM, "out of memory");
                break;
            }
            if (lstat(path, &st) != 0 || (!S_ISREG(st.st_mode) && (tmp || !gc))) {
                free(path);
                continue;
            }
            if (tmp) {
                if (gc)
                    remove_stale_tmp(c, path, &st, freed);
                free(path);
                continue;
            }
            status = walk_push(w, path, fe->d_name, &st);
        }
        if (closedir(sub) != 0 && status == JITOP_OK)
            status = jitop__fail(JITOP_EIO, "cache: closedir %s: %s", dir, strerror(errno));
        free(dir);
    }
    if (closedir(top) != 0 && status == JITOP_OK)
        status = jitop__fail(JITOP_EIO, "cache: closedir %s: %s", base, strerror(errno));
    return status;
}

static int walk_entries(jitop__cache *c, bool gc, struct walk *w, int64_t *freed)
{
    return walk_shards(c, c->vdir, gc, w, freed);
}

/* The lock files (<key>.lock) under locks/. */
static int walk_locks(jitop__cache *c, struct walk *w)
{
    int status = JITOP_OK;
    char *base = jitop__sprintf("%s/locks", c->vdir);
    DIR *d = base ? opendir(base) : NULL;
    if (!d) {
        if (!base)
            status = jitop__fail(JITOP_ENOMEM, "out of memory");
        else if (errno != ENOENT)
            status = jitop__fail(JITOP_EIO, "cache: opendir %s: %s", base, strerror(errno));
        free(base);
        return status;
    }
    struct dirent *de;
    while (status == JITOP_OK && (de = readdir(d)) != NULL) {
        const char *n = de->d_name;
        if (strlen(n) != 37 || strcmp(n + 32, ".lock") != 0)
            continue;
        char key[33];
        memcpy(key, n, 32);
        key[32] = '\0';
        if (!jitop__is_hex(key, 32))
            continue;
        char *path = jitop__sprintf("%s/%s", base, n);
        struct stat st;
        if (!path)
            status = jitop__fail(JITOP_ENOMEM, "out of memory");
        else if (lstat(path, &st) != 0)
            free(path);
        else
            status = walk_push(w, path, key, &st);
    }
    if (closedir(d) != 0 && status == JITOP_OK)
        status = jitop__fail(JITOP_EIO, "cache: closedir %s: %s", base, strerror(errno));
    free(base);
    return status;
}

static int by_mtime(const void *a, const void *b)
{
    const struct walk_item *x = a, *y = b;
    if (x->mtime.tv_sec != y->mtime.tv_sec)
        return x->mtime.tv_sec < y->mtime.tv_sec ? -1 : 1;
    if (x->mtime.tv_nsec != y->mtime.tv_nsec)
        return x->mtime.tv_nsec < y->mtime.tv_nsec ? -1 : 1;
    return strcmp(x->key, y->key);
}

static int by_key(const void *a, const void *b)
{
    return strcmp(((const struct walk_item *)a)->key, ((const struct walk_item *)b)->key);
}

static int by_target(const void *a, const void *b)
{
    return strcmp(((const struct walk_item *)a)->target, ((const struct walk_item *)b)->target);
}

/* Whether key names an entry that is there and counts (ents sorted by key). */
static bool entry_present(const struct walk *ents, const char *key)
{
    if (ents->n == 0)
        return false;
    struct walk_item probe;
    memcpy(probe.key, key, 33);
    const struct walk_item *it = bsearch(&probe, ents->v, ents->n, sizeof *ents->v, by_key);
    return it && !it->gone;
}

/* Removes a listed file that counts toward total; a file already gone
 * (another process evicting) counts as removed. */
static int remove_item(struct walk_item *it, int64_t *total, int64_t *freed)
{
    if (unlink(it->path) != 0 && errno != ENOENT)
        return jitop__fail(JITOP_EIO, "cache: remove %s: %s", it->path, strerror(errno));
    *total -= it->size;
    *freed += it->size;
    it->gone = true;
    return JITOP_OK;
}

static char *lock_path(const jitop__cache *c, const char *key)
{
    return jitop__sprintf("%s/locks/%s.lock", c->vdir, key);
}

/* Removes least-recently-used entries until entries and manifests fit in
 * cap (negative: no cap); each entry goes with its manifests and its lock
 * (when nobody holds it). In gc mode every entry and manifest is also
 * checked and invalid ones go, and so do manifests and unheld locks of
 * entries that are not there. Manifests are listed before entries: a
 * manifest is written after its entry, so one listed has its entry listed
 * too unless that is really gone. */
int jitop__cache_evict(jitop__cache *c, int64_t cap, bool gc, int64_t *freed)
{
    struct walk ents = {0}, mans = {0}, locks = {0};
    int64_t total = 0;
    *freed = 0;
    char *mdir = jitop__sprintf("%s/manifests", c->vdir);
    int status = mdir ? walk_shards(c, mdir, gc, &mans, freed)
                      : jitop__fail(JITOP_ENOMEM, "out of memory");
    if (status == JITOP_OK)
        status = walk_entries(c, gc, &ents, freed);
    if (status == JITOP_OK && gc)
        status = walk_locks(c, &locks);
    if (status != JITOP_OK)
        goto out;
    for (size_t i = 0; i < ents.n; i++) {
        struct walk_item *it = &ents.v[i];
        if (gc) {
            bool valid = false;
            /* JITOP__READ_REMOVE_INVALID removes it; jitop__cache_entry_read reads the whole file
             * and checks its checksum and metadata. */
            status = jitop__cache_entry_read(c, it->key, JITOP__READ_REMOVE_INVALID, NULL, &valid);
            if (status != JITOP_OK)
                goto out;
            if (!valid) {
                *freed += it->size;
                it->gone = true;
                continue;
            }
        }
        total += it->size;
    }
    for (size_t i = 0; i < mans.n; i++) {
        struct walk_item *it = &mans.v[i];
        if (gc) {
            jitop__deps deps;
            bool found = false;
            status = jitop__manifest_get(c, it->key, &deps, it->target, &found);
            if (status != JITOP_OK)
                goto out;
            jitop__deps_free(&deps);
            if (!found) {
                /* A corrupt one was removed by the read, and a directory
                 * moved aside (or left, EISDIR); a malformed one (a valid
                 * checksum over a payload that does not parse) goes here. */
                if (unlink(it->path) != 0 && errno != ENOENT && errno != EISDIR) {
                    status = jitop__fail(JITOP_EIO, "cache: remove %s: %s", it->path,
                                         strerror(errno));
                    goto out;
                }
                *freed += it->size;
                it->gone = true;
                continue;
            }
        }
        total += it->size;
    }
    if (ents.n)
        qsort(ents.v, ents.n, sizeof *ents.v, by_key);
    if (gc) {
        for (size_t i = 0; status == JITOP_OK && i < mans.n; i++)
            if (!mans.v[i].gone && !entry_present(&ents, mans.v[i].target))
                status = remove_item(&mans.v[i], &total, freed);
        for (size_t i = 0; status == JITOP_OK && i < locks.n; i++)
            if (!entry_present(&ents, locks.v[i].key))
                jitop__cache_remove_lock(c, locks.v[i].path);
        if (status != JITOP_OK)
            goto out;
    }
    if (cap < 0 || total <= cap)
        goto out;
    /* Over the cap: the manifests' entries are needed now. A manifest
     * whose entry is not there is garbage, and goes first. */
    for (size_t i = 0; status == JITOP_OK && i < mans.n; i++) {
        struct walk_item *it = &mans.v[i];
        if (it->gone || !it->regular)
            continue;
        if (!gc && !jitop__manifest_peek_key(it->path, it->target))
            it->target[0] = '\0';
        if (!entry_present(&ents, it->target))
            status = remove_item(it, &total, freed);
    }
    if (status != JITOP_OK)
        goto out;
    if (mans.n)
        qsort(mans.v, mans.n, sizeof *mans.v, by_target);
    if (ents.n)
        qsort(ents.v, ents.n, sizeof *ents.v, by_mtime);
    for (size_t i = 0; i < ents.n && total > cap; i++) {
        struct walk_item *it = &ents.v[i];
        if (it->gone || !it->regular)
            continue;
        status = remove_item(it, &total, freed);
        if (status != JITOP_OK)
            goto out;
        jitop__cache_vlog(c,
                          "cache: evicted %s (%lld bytes, least recently used) to stay under "
                          "%lld bytes",
                          it->key, (long long)it->size, (long long)cap);
        struct walk_item probe;
        memcpy(probe.target, it->key, 33);
        struct walk_item *m =
            mans.n ? bsearch(&probe, mans.v, mans.n, sizeof *mans.v, by_target) : NULL;
        while (m && m > mans.v && strcmp(m[-1].target, it->key) == 0)
            m--;
        for (; m && m < mans.v + mans.n && strcmp(m->target, it->key) == 0; m++)
            if (!m->gone && (status = remove_item(m, &total, freed)) != JITOP_OK)
                goto out;
        char *lock = lock_path(c, it->key);
        if (!lock) {
            status = jitop__fail(JITOP_ENOMEM, "out of memory");
            goto out;
        }
        jitop__cache_remove_lock(c, lock);
        free(lock);
    }
out:
    free(mdir);
    walk_free(&ents);
    walk_free(&mans);
    walk_free(&locks);
    return status;
}

static int need_cache(jitop_ctx *ctx, const char *call)
{
    if (!ctx || !ctx->cache)
        return jitop__fail(JITOP_EINVAL, "%s: the context has no cache", call);
    return JITOP_OK;
}

/* info.sources for callers written against the '\n'-joined field: each
 * path escaped (jitop__escape), so that a newline inside one cannot split
 * it in two. Malloc'd; NULL on ENOMEM. */
static char *escaped_lines(const jitop__strv *sv)
{
    jitop__strv esc = {0};
    char *out = NULL;
    for (size_t i = 0; i < sv->n; i++) {
        char *e = jitop__escape(sv->v[i]);
        int rc = e ? jitop__strv_push(&esc, e) : JITOP_ENOMEM;
        free(e);
        if (rc != JITOP_OK)
            goto out;
    }
    out = jitop__strv_join(&esc, "\n");
out:
    jitop__strv_free(&esc);
    return out;
}

static int list_one(const char *key, const jitop__entry *e, int64_t size, int64_t atime,
                    int (*fn)(const jitop_cache_entry_info *, void *), void *user)
{
    char *joined = escaped_lines(&e->sources);
    if (!joined)
        return jitop__fail(JITOP_ENOMEM, "out of memory");
    jitop_cache_entry_info info = {
        .key = key,
        .arch = e->arch,
        .sources = joined,
        .size = size,
        .atime = atime,
        .created = e->created,
        .source_list = (const char *const *)e->sources.v,
        .nsources = e->sources.n,
    };
    int rc = fn(&info, user);
    free(joined);
    return rc;
}

int jitop_cache_list(jitop_ctx *ctx, int (*fn)(const jitop_cache_entry_info *info, void *user),
                     void *user)
{
    int status = need_cache(ctx, "jitop_cache_list");
    if (status != JITOP_OK)
        return status;
    if (!fn)
        return jitop__fail(JITOP_EINVAL, "jitop_cache_list: fn is NULL");
    jitop__cache *c = ctx->cache;
    struct walk w = {0};
    int64_t unused = 0;
    status = walk_entries(c, false, &w, &unused);
    for (size_t i = 0; status == JITOP_OK && i < w.n; i++) {
        jitop__entry e;
        bool found = false;
        status = jitop__cache_entry_read(c, w.v[i].key, 0, &e, &found);
        if (status != JITOP_OK || !found)
            continue;
        status = list_one(w.v[i].key, &e, w.v[i].size, (int64_t)w.v[i].mtime.tv_sec, fn, user);
        jitop__entry_free(&e);
    }
    walk_free(&w);
    /* Entries kept in memory (an unwritable cache) are listed too. */
    for (size_t idx = 0; status == JITOP_OK; idx++) {
        char key[33];
        unsigned char *data = NULL;
        size_t len = 0;
        int64_t created = 0;
        bool have = false;
        pthread_mutex_lock(&c->lock);
        size_t k = 0;
        for (struct jitop__mem_item *it = c->items; it; it = it->next) {
            if (it->manifest || k++ != idx)
                continue;
            data = malloc(it->len);
            if (data) {
                memcpy(data, it->data, it->len);
                memcpy(key, it->name, 33);
                len = it->len;
                created = it->created;
            }
            have = true;
            break;
        }
        pthread_mutex_unlock(&c->lock);
        if (!have)
            break;
        if (!data) {
            status = jitop__fail(JITOP_ENOMEM, "out of memory");
            break;
        }
        uint32_t flags = 0;
        jitop__entry e;
        if (!jitop__file_check(data, len, JITOP__ENTRY_MAGIC, &flags) &&
            !jitop__cache_entry_parse(key, &data, len, flags, &e)) {
            status = list_one(key, &e, (int64_t)len, created, fn, user);
            jitop__entry_free(&e);
        }
        free(data);
    }
    return status;
}

int jitop_cache_gc(jitop_ctx *ctx, int64_t max_size, int64_t *freed)
{
    int status = need_cache(ctx, "jitop_cache_gc");
    if (status != JITOP_OK)
        return status;
    int64_t f = 0;
    int64_t cap = max_size >= 0 ? max_size : ctx->cache->max_size;
    status = jitop__cache_evict(ctx->cache, cap, true, &f);
    if (freed)
        *freed = f;
    return status;
}

int jitop_cache_clean(jitop_ctx *ctx)
{
    int status = need_cache(ctx, "jitop_cache_clean");
    if (status != JITOP_OK)
        return status;
    jitop__cache *c = ctx->cache;
    jitop__cache_mem_clear(c);
    /* Every tree jitop made (older formats' too) goes; anything else under
     * the root stays (tree.c). */
    status = jitop__cache_clean_trees(c);
    /* Recreate the layout so that the context stays usable. */
    const char *subdirs[] = {"", "/locks", "/manifests"};
    for (size_t i = 0; status == JITOP_OK && !jitop__cache_is_readonly(c) && i < 3; i++) {
        int err = 0;
        char *dir = jitop__sprintf("%s%s", c->vdir, subdirs[i]);
        status = dir ? jitop__cache_ensure_dir(c, dir, &err)
                     : jitop__fail(JITOP_ENOMEM, "out of memory");
        free(dir);
    }
    return status;
}

int jitop__cache_find_recent(jitop__cache *c, const char *source, jitop__entry *out,
                             char key[33], bool *found)
{
    struct walk w = {0};
    int64_t unused = 0;
    *found = false;
    size_t best = 0;
    int status = walk_entries(c, false, &w, &unused);
    for (size_t i = 0; status == JITOP_OK && i < w.n; i++) {
        jitop__entry e;
        bool have = false;
        status = jitop__cache_entry_read(c, w.v[i].key, 0, &e, &have);
        if (status != JITOP_OK || !have)
            continue;
        bool same = e.sources.n > 0 && strcmp(e.sources.v[0], source) == 0;
        if (same && (!*found || by_mtime(&w.v[i], &w.v[best]) > 0)) {
            if (*found)
                jitop__entry_free(out);
            *out = e;
            memcpy(key, w.v[i].key, 33);
            best = i;
            *found = true;
        } else {
            jitop__entry_free(&e);
        }
    }
    walk_free(&w);
    if (status != JITOP_OK && *found) {
        jitop__entry_free(out);
        *found = false;
    }
    return status;
}
