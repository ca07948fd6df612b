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
    char key[33];
    int64_t size;
    struct timespec mtime;
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

static bool is_hex(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
            return false;
    return s[n] == '\0';
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

/* Lists the entry files (and in gc mode removes stale temporary files).
 * Files that vanish during the walk (another process evicting) are skipped. */
static int walk_entries(jitop__cache *c, bool gc, struct walk *w, int64_t *freed)
{
    int status = JITOP_OK;
    DIR *top = opendir(c->vdir);
    if (!top)
        return errno == ENOENT ? JITOP_OK
                               : jitop__fail(JITOP_EIO, "cache: opendir %s: %s", c->vdir,
                                             strerror(errno));
    struct dirent *de;
    while (status == JITOP_OK && (de = readdir(top)) != NULL) {
        if (strlen(de->d_name) != 2 || !is_hex(de->d_name, 2))
            continue;
        char *dir = jitop__sprintf("%s/%s", c->vdir, de->d_name);
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
        while ((fe = readdir(sub)) != NULL) {
            bool entry = strlen(fe->d_name) == 32 && is_hex(fe->d_name, 32);
            bool tmp = strncmp(fe->d_name, ".tmp-", 5) == 0;
            if (!entry && !tmp)
                continue;
            char *path = jitop__sprintf("%s/%s", dir, fe->d_name);
            struct stat st;
            if (!path) {
                status = jitop__fail(JITOP_ENOMEM, "out of memory");
                break;
            }
            if (lstat(path, &st) != 0 || !S_ISREG(st.st_mode)) {
                free(path);
                continue;
            }
            if (tmp) {
                if (gc)
                    remove_stale_tmp(c, path, &st, freed);
                free(path);
                continue;
            }
            if (w->n == w->cap) {
                size_t cap = w->cap ? w->cap * 2 : 64;
                struct walk_item *v = realloc(w->v, cap * sizeof *v);
                if (!v) {
                    free(path);
                    status = jitop__fail(JITOP_ENOMEM, "out of memory");
                    break;
                }
                w->v = v;
                w->cap = cap;
            }
            struct walk_item *it = &w->v[w->n++];
            it->path = path;
            memcpy(it->key, fe->d_name, 33);
            it->size = (int64_t)st.st_size;
            it->mtime = st.st_mtim;
        }
        if (closedir(sub) != 0 && status == JITOP_OK)
            status = jitop__fail(JITOP_EIO, "cache: closedir %s: %s", dir, strerror(errno));
        free(dir);
    }
    if (closedir(top) != 0 && status == JITOP_OK)
        status = jitop__fail(JITOP_EIO, "cache: closedir %s: %s", c->vdir, strerror(errno));
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

/* Removes least-recently-used entries until the rest fit in cap (negative:
 * no cap). In gc mode every entry is also checked and invalid ones go. */
int jitop__cache_evict(jitop__cache *c, int64_t cap, bool gc, int64_t *freed)
{
    struct walk w = {0};
    int64_t total = 0;
    *freed = 0;
    int status = walk_entries(c, gc, &w, freed);
    if (status != JITOP_OK)
        goto out;
    for (size_t i = 0; i < w.n; i++) {
        if (gc) {
            bool valid = false;
            /* JITOP__READ_REMOVE_INVALID removes it; jitop__cache_entry_read reads the whole file
             * and checks its checksum and metadata. */
            int rc =
                jitop__cache_entry_read(c, w.v[i].key, JITOP__READ_REMOVE_INVALID, NULL, &valid);
            if (rc != JITOP_OK) {
                status = rc;
                goto out;
            }
            if (!valid) {
                *freed += w.v[i].size;
                w.v[i].size = -1; /* gone */
                continue;
            }
        }
        total += w.v[i].size;
    }
    if (cap < 0 || total <= cap)
        goto out;
    qsort(w.v, w.n, sizeof *w.v, by_mtime);
    for (size_t i = 0; i < w.n && total > cap; i++) {
        if (w.v[i].size < 0)
            continue;
        if (unlink(w.v[i].path) != 0) {
            if (errno == ENOENT) { /* another process evicted it first */
                total -= w.v[i].size;
                continue;
            }
            status = jitop__fail(JITOP_EIO, "cache: remove %s: %s", w.v[i].path, strerror(errno));
            goto out;
        }
        jitop__cache_vlog(c,
                          "cache: evicted %s (%lld bytes, least recently used) to stay under "
                          "%lld bytes",
                          w.v[i].key, (long long)w.v[i].size, (long long)cap);
        total -= w.v[i].size;
        *freed += w.v[i].size;
    }
out:
    walk_free(&w);
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

/* Removes a tree without following symbolic links (a link inside the cache
 * must not make clean delete files elsewhere). */
static int remove_tree(int parent, const char *name, const char *shown)
{
    int status = JITOP_OK;
    int fd = openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT)
            return JITOP_OK;
        if (errno == ENOTDIR || errno == ELOOP) {
            if (unlinkat(parent, name, 0) != 0 && errno != ENOENT)
                return jitop__fail(JITOP_EIO, "cache: remove %s: %s", shown, strerror(errno));
            return JITOP_OK;
        }
        return jitop__fail(JITOP_EIO, "cache: open %s: %s", shown, strerror(errno));
    }
    DIR *d = fdopendir(fd);
    if (!d) {
        status = jitop__fail(JITOP_EIO, "cache: fdopendir %s: %s", shown, strerror(errno));
        /* Already failing: a close error would add nothing the caller can use. */
        if (close(fd) != 0)
            jitop__cache_vlog(NULL, "cache: close %s failed", shown);
        return status;
    }
    struct dirent *de;
    while (status == JITOP_OK && (de = readdir(d)) != NULL) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        char *sub = jitop__sprintf("%s/%s", shown, de->d_name);
        if (!sub) {
            status = jitop__fail(JITOP_ENOMEM, "out of memory");
            break;
        }
        if (de->d_type == DT_DIR)
            status = remove_tree(dirfd(d), de->d_name, sub);
        else if (unlinkat(dirfd(d), de->d_name, 0) != 0 && errno != ENOENT)
            status = errno == EISDIR ? remove_tree(dirfd(d), de->d_name, sub)
                                     : jitop__fail(JITOP_EIO, "cache: remove %s: %s", sub,
                                                   strerror(errno));
        free(sub);
    }
    if (closedir(d) != 0 && status == JITOP_OK)
        status = jitop__fail(JITOP_EIO, "cache: closedir %s: %s", shown, strerror(errno));
    if (status == JITOP_OK && unlinkat(parent, name, AT_REMOVEDIR) != 0 && errno != ENOENT)
        status = jitop__fail(JITOP_EIO, "cache: rmdir %s: %s", shown, strerror(errno));
    return status;
}

int jitop_cache_clean(jitop_ctx *ctx)
{
    int status = need_cache(ctx, "jitop_cache_clean");
    if (status != JITOP_OK)
        return status;
    jitop__cache *c = ctx->cache;
    jitop__cache_mem_clear(c);
    /* Every format's directory v<N> goes (older formats are dead weight);
     * anything else a user put under the root stays. */
    DIR *d = opendir(c->root);
    if (!d)
        return errno == ENOENT ? JITOP_OK
                               : jitop__fail(JITOP_EIO, "cache: opendir %s: %s", c->root,
                                             strerror(errno));
    struct dirent *de;
    while (status == JITOP_OK && (de = readdir(d)) != NULL) {
        const char *n = de->d_name;
        if (n[0] != 'v' || !n[1] || strspn(n + 1, "0123456789") != strlen(n + 1))
            continue;
        char *shown = jitop__sprintf("%s/%s", c->root, n);
        status = shown ? remove_tree(dirfd(d), n, shown)
                       : jitop__fail(JITOP_ENOMEM, "out of memory");
        free(shown);
    }
    if (closedir(d) != 0 && status == JITOP_OK)
        status = jitop__fail(JITOP_EIO, "cache: closedir %s: %s", c->root, strerror(errno));
    /* Recreate the layout so that the context stays usable. */
    const char *subdirs[] = {"", "/locks", "/manifests"};
    for (size_t i = 0; status == JITOP_OK && !jitop__cache_is_readonly(c) && i < 3; i++) {
        int err = 0;
        char *dir = jitop__sprintf("%s%s", c->vdir, subdirs[i]);
        status = dir ? jitop__cache_ensure_dir(dir, &err)
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
