/* One host source to one object entry through the cache.
 *
 * A C compiler finds its headers while it compiles, so the key cannot be
 * known before the first compile (as ccache's direct mode, the manifest
 * learns it): the unit's manifest (its id: compiler as asked, flags,
 * source path) records the files the compiler's -MMD output listed, with
 * their stat data and hashes, and the key they gave. Later builds take the
 * key from the manifest when the stat fast path vouches for every file, or
 * hash the recorded files again; only when the cache lacks that key does
 * the compiler run. Headers the compiler finds in system folders (-MMD
 * leaves them out) are covered by the compiler's identity. */
#include "host/host.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

void (*jitop__host_before_compile_hook)(const char *source);

static bool is_cxx_path(const char *path)
{
    const char *dot = strrchr(path, '.');
    return dot && strcmp(dot, ".c") != 0;
}

int jitop__host_unit_init(jitop__host_unit *u, const char *path, bool runtime,
                          const jitop__strv *cflags, const char *include_dir)
{
    memset(u, 0, sizeof *u);
    u->runtime = runtime;
    u->cxx = !runtime && is_cxx_path(path);
    int status = JITOP_OK;
    if (!(u->path = jitop__strdup(path)))
        status = jitop__fail(JITOP_ENOMEM, "out of memory");
    /* -O2 first, so that a -O of the module's wins; -fPIC and hidden
     * visibility for a shared object whose only exports are JITOP_EXPORT's. */
    static const char *const fixed[] = {"-O2", "-fPIC", "-fvisibility=hidden"};
    for (size_t i = 0; status == JITOP_OK && i < sizeof fixed / sizeof *fixed; i++)
        status = jitop__strv_push(&u->flags, fixed[i]);
    if (status == JITOP_OK)
        status = jitop__strv_pushf(&u->flags, "-I%s", include_dir);
    if (status == JITOP_OK && runtime) {
        status = jitop__strv_push(&u->flags, "-DJITOP_HOST_RUNTIME");
        if (status == JITOP_OK)
            status = jitop__strv_push(&u->flags, "-xc");
    }
    for (size_t i = 0; status == JITOP_OK && !runtime && cflags && i < cflags->n; i++)
        status = jitop__strv_push(&u->flags, cflags->v[i]);
    if (status != JITOP_OK)
        jitop__host_unit_free(u);
    return status;
}

void jitop__host_unit_free(jitop__host_unit *u)
{
    if (!u)
        return;
    free(u->path);
    jitop__strv_free(&u->flags);
    memset(u, 0, sizeof *u);
}

void jitop__host_obj_free(jitop__host_obj *o)
{
    if (!o)
        return;
    free(o->why);
    jitop__deps_free(&o->deps);
    jitop__binary_free(&o->bin);
    memset(o, 0, sizeof *o);
}

/* GCC marks C++ inline statics and template statics STB_GNU_UNIQUE, which
 * pins a shared object in memory for the life of the process (dlclose
 * then unloads nothing). Clang makes no such symbols (and has no flag). */
static bool cc_is_gcc_like(const jitop__host_cc *cc)
{
    const char *base = strrchr(cc->argv0.v[0], '/');
    return !strstr(base ? base + 1 : cc->argv0.v[0], "clang");
}

/* The full flag list of a compile: the unit's, and the C++ one above. */
static int unit_flags(const jitop__host_unit *u, const jitop__host_cc *cc, jitop__strv *out)
{
    int status = JITOP_OK;
    for (size_t i = 1; status == JITOP_OK && i < cc->argv0.n; i++)
        status = jitop__strv_push(out, cc->argv0.v[i]);
    if (status == JITOP_OK && u->cxx && cc_is_gcc_like(cc))
        status = jitop__strv_push(out, "-fno-gnu-unique");
    for (size_t i = 0; status == JITOP_OK && i < u->flags.n; i++)
        status = jitop__strv_push(out, u->flags.v[i]);
    return status;
}

static void h_unit(XXH3_state_t *st, const char *tag, const jitop__host_unit *u,
                   const jitop__host_cc *cc)
{
    jitop__hash_str(st, tag);
    jitop__hash_u64(st, JITOP__FORMAT_VERSION);
    jitop__hash_str(st, u->path);
    jitop__hash_u64(st, u->cxx);
    jitop__hash_u64(st, cc->argv0.n + u->flags.n);
    for (size_t i = 1; i < cc->argv0.n; i++)
        jitop__hash_str(st, cc->argv0.v[i]);
    for (size_t i = 0; i < u->flags.n; i++)
        jitop__hash_str(st, u->flags.v[i]);
}

void jitop__host_obj_id(const jitop__host_unit *u, const jitop__host_cc *cc, char id[33])
{
    XXH3_state_t st;
    XXH3_INITSTATE(&st);
    XXH3_128bits_reset(&st);
    h_unit(&st, "jitop host manifest id", u, cc);
    /* The variable as asked (not the file found): another PATH may find
     * another compiler, which the compiler record then tells apart. */
    jitop__hash_str(&st, cc->var);
    jitop__hash_str(&st, cc->asked);
    jitop__hash_hex(XXH3_128bits_digest(&st), id);
}

/* The key: the unit, then every dep (the compiler's identity first) by path
 * and content hash. */
static void obj_key(const jitop__host_unit *u, const jitop__host_cc *cc, const jitop__deps *d,
                    char key[33])
{
    XXH3_state_t st;
    XXH3_INITSTATE(&st);
    XXH3_128bits_reset(&st);
    h_unit(&st, "jitop host object key", u, cc);
    jitop__deps_hash(&st, d);
    jitop__hash_hex(XXH3_128bits_digest(&st), key);
}

/* The manifest's compiler is the one found now (another PATH may find
 * another). */
static bool same_compiler(const jitop__deps *d, const jitop__host_cc *cc)
{
    return d->n >= 2 && strcmp(d->v[0].path, cc->rec.path) == 0;
}

int jitop__host_obj_fresh(jitop_ctx *ctx, const jitop__host_unit *u, const jitop__host_cc *cc,
                          jitop__host_obj *out, bool *found)
{
    char id[33];
    *found = false;
    memset(out, 0, sizeof *out);
    jitop__host_obj_id(u, cc, id);
    bool have = false, fresh = false;
    int status = jitop__manifest_get(ctx->cache, id, &out->deps, out->key, &have);
    if (status == JITOP_OK && have && same_compiler(&out->deps, cc))
        status = jitop__deps_fresh(&out->deps, &fresh, NULL);
    if (status == JITOP_OK && fresh)
        status = jitop__cache_touch(ctx->cache, out->key, found);
    if (status != JITOP_OK || !*found)
        jitop__host_obj_free(out);
    else
        out->cached = true;
    return status;
}

/* Hashes the files a manifest recorded again (the compiler by its
 * identity). *ok false when one is gone: the compiler decides then. */
static int rehash(jitop__host_cc *cc, jitop__deps *d, bool *ok)
{
    *ok = false;
    int status = jitop__host_cc_identify(cc);
    if (status != JITOP_OK)
        return status;
    d->v[0] = (jitop__dep){.path = d->v[0].path};
    d->v[0].size = cc->rec.size;
    d->v[0].mtime_ns = cc->rec.mtime_ns;
    d->v[0].ctime_ns = cc->rec.ctime_ns;
    d->v[0].ino = cc->rec.ino;
    d->v[0].dev = cc->rec.dev;
    d->v[0].recent = cc->rec.recent;
    d->v[0].hash = cc->rec.hash;
    for (size_t i = 1; i < d->n; i++) {
        char *data = NULL;
        size_t len = 0;
        char *path = d->v[i].path;
        status = jitop__dep_read(path, &d->v[i], &data, &len);
        d->v[i].path = path;
        free(data);
        if (status == JITOP_ENOTFOUND || status == JITOP_EIO) {
            jitop__clear_error();
            return JITOP_OK;
        }
        if (status != JITOP_OK)
            return status;
    }
    *ok = true;
    return JITOP_OK;
}

int jitop__host_deps_from_depfile(const jitop__host_cc *cc, const char *depfile, int64_t since_ns,
                                  jitop__deps *out, bool *changed)
{
    char *text = NULL;
    size_t len = 0;
    jitop__strv paths = {0};
    *changed = false;
    memset(out, 0, sizeof *out);
    int status = jitop__read_file(depfile, &text, &len);
    if (status == JITOP_OK)
        status = jitop__host_depfile_parse(text, &paths);
    if (status == JITOP_OK && !(out->v = calloc(paths.n + 1, sizeof *out->v)))
        status = jitop__fail(JITOP_ENOMEM, "out of memory");
    if (status == JITOP_OK) {
        out->v[0] = cc->rec;
        out->v[0].path = jitop__strdup(cc->rec.path);
        out->n = 1;
        if (!out->v[0].path)
            status = jitop__fail(JITOP_ENOMEM, "out of memory");
    }
    for (size_t i = 0; status == JITOP_OK && i < paths.n; i++) {
        bool dup = false;
        for (size_t j = 1; j < out->n && !dup; j++)
            dup = strcmp(out->v[j].path, paths.v[i]) == 0;
        if (dup)
            continue;
        jitop__dep *d = &out->v[out->n];
        char *data = NULL;
        size_t dl = 0;
        status = jitop__dep_read(paths.v[i], d, &data, &dl);
        free(data);
        if (status != JITOP_OK)
            break;
        if (!(d->path = jitop__strdup(paths.v[i]))) {
            status = jitop__fail(JITOP_ENOMEM, "out of memory");
            break;
        }
        out->n++;
        /* Written after the compile began (since_ns is read from the
         * coarse clock the kernel stamps files with: a write after it is
         * stamped no earlier): the compiler may have read the old or the
         * new bytes. */
        if (d->mtime_ns >= since_ns || d->ctime_ns >= since_ns)
            *changed = true;
    }
    free(text);
    jitop__strv_free(&paths);
    if (status != JITOP_OK)
        jitop__deps_free(out);
    return status;
}

/* Pushes dir (absolute, existing) to d->dirs once, with its stat data. A
 * directory changed after since_ns sets *changed: a header may have been
 * created there during the compile. */
static int add_dir(jitop__deps *d, const char *dir, size_t len, int64_t since_ns, bool *changed)
{
    char path[PATH_MAX];
    if (len == 0 || len >= sizeof path || dir[0] != '/')
        return JITOP_OK;
    memcpy(path, dir, len);
    path[len] = '\0';
    for (size_t i = 0; i < d->ndirs; i++)
        if (strcmp(d->dirs[i].path, path) == 0)
            return JITOP_OK;
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode))
        return JITOP_OK;
    jitop__dep *grown = realloc(d->dirs, (d->ndirs + 1) * sizeof *grown);
    if (!grown)
        return jitop__fail(JITOP_ENOMEM, "out of memory");
    d->dirs = grown;
    jitop__dep *r = &d->dirs[d->ndirs];
    memset(r, 0, sizeof *r);
    jitop__dep_set_stat(r, &st);
    if (!(r->path = jitop__strdup(path)))
        return jitop__fail(JITOP_ENOMEM, "out of memory");
    d->ndirs++;
    if (r->mtime_ns >= since_ns || r->ctime_ns >= since_ns)
        *changed = true;
    return JITOP_OK;
}

int jitop__host_deps_add_dirs(const jitop__host_unit *u, const jitop__host_cc *cc,
                              int64_t since_ns, jitop__deps *d, bool *changed)
{
    int status = JITOP_OK;
    /* Where each file was found: a quoted include looks in its includer's
     * folder first. */
    for (size_t i = 1; status == JITOP_OK && i < d->n; i++) {
        const char *slash = strrchr(d->v[i].path, '/');
        if (slash)
            status = add_dir(d, d->v[i].path, (size_t)(slash - d->v[i].path), since_ns, changed);
    }
    /* Every folder of the include path (the compiler's own are covered by
     * its identity). */
    static const char *const opts[] = {"-I", "-iquote", "-isystem", "-idirafter"};
    const jitop__strv *lists[] = {&cc->argv0, &u->flags};
    for (size_t l = 0; l < 2; l++) {
        const jitop__strv *v = lists[l];
        for (size_t i = l == 0 ? 1 : 0; status == JITOP_OK && i < v->n; i++) {
            for (size_t k = 0; k < sizeof opts / sizeof *opts; k++) {
                size_t ol = strlen(opts[k]);
                if (strncmp(v->v[i], opts[k], ol) != 0)
                    continue;
                const char *dir = v->v[i][ol] ? v->v[i] + ol : i + 1 < v->n ? v->v[i + 1] : "";
                status = add_dir(d, dir, strlen(dir), since_ns, changed);
                break;
            }
        }
    }
    return status;
}

int jitop__host_dirs_merge(jitop__deps *to, const jitop__deps *from)
{
    for (size_t j = 0; j < from->ndirs; j++) {
        const jitop__dep *d = &from->dirs[j];
        bool seen = false;
        for (size_t k = 0; k < to->ndirs && !seen; k++)
            seen = strcmp(to->dirs[k].path, d->path) == 0;
        if (seen)
            continue;
        jitop__dep *grown = realloc(to->dirs, (to->ndirs + 1) * sizeof *grown);
        if (!grown)
            return jitop__fail(JITOP_ENOMEM, "out of memory");
        to->dirs = grown;
        to->dirs[to->ndirs] = *d;
        if (!(to->dirs[to->ndirs].path = jitop__strdup(d->path)))
            return jitop__fail(JITOP_ENOMEM, "out of memory");
        to->ndirs++;
    }
    return JITOP_OK;
}

bool jitop__host_dirs_same(const jitop__deps *d)
{
    for (size_t i = 0; i < d->ndirs; i++) {
        const jitop__dep *r = &d->dirs[i];
        struct stat st;
        if (r->recent || stat(r->path, &st) != 0 || (uint64_t)st.st_ino != r->ino ||
            (uint64_t)st.st_dev != r->dev)
            return false;
        jitop__dep now;
        memset(&now, 0, sizeof now);
        jitop__dep_set_stat(&now, &st);
        if (now.mtime_ns != r->mtime_ns || now.ctime_ns != r->ctime_ns)
            return false;
    }
    return true;
}

int jitop__host_obj_publish(jitop_ctx *ctx, const jitop__host_unit *u, const jitop__host_cc *cc,
                            jitop__deps *deps, const unsigned char *data, size_t size,
                            const char *log, char key[33])
{
    char id[33];
    jitop__entry e;
    memset(&e, 0, sizeof e);
    obj_key(u, cc, deps, key);
    jitop__host_obj_id(u, cc, id);
    int status = JITOP_OK;
    if (!(e.arch = jitop__strdup("host")) ||
        !(e.nvrtc_version = jitop__sprintf("host compiler %s", cc->rec.path)))
        status = jitop__fail(JITOP_ENOMEM, "out of memory");
    if (status == JITOP_OK)
        status = unit_flags(u, cc, &e.options);
    for (size_t i = 1; status == JITOP_OK && i < deps->n; i++)
        status = jitop__strv_push(&e.sources, deps->v[i].path);
    if (status == JITOP_OK && log && *log && !(e.bin.log = jitop__strdup(log)))
        status = jitop__fail(JITOP_ENOMEM, "out of memory");
    if (status == JITOP_OK) {
        e.created = (int64_t)time(NULL);
        e.bin.data = (unsigned char *)data;
        e.bin.size = size;
        status = jitop__cache_put(ctx->cache, key, &e);
        e.bin.data = NULL;
    }
    if (status == JITOP_OK)
        jitop__manifest_put(ctx->cache, id, deps, key); /* costs only speed if it fails */
    jitop__clear_error();
    jitop__entry_free(&e);
    return status;
}

/* Runs the compiler on u into a private temporary folder; *obj, *size:
 * the object's bytes; *deps: what its -MMD listed, hashed. */
static int compile_once(const jitop__host_unit *u, jitop__host_cc *cc, bool deps_only,
                        unsigned char **obj, size_t *size, jitop__deps *deps, char **log,
                        bool *changed)
{
    char tmpl[PATH_MAX];
    const char *tmp = getenv("TMPDIR");
    jitop__strv argv = {0};
    char *o = NULL, *d = NULL;
    int status = JITOP_OK, code = 0;
    *obj = NULL;
    *log = NULL;
    if ((size_t)snprintf(tmpl, sizeof tmpl, "%s/jitop-host-XXXXXX", tmp && *tmp ? tmp : "/tmp") >=
        sizeof tmpl)
        return jitop__fail(JITOP_EINVAL, "TMPDIR is too long");
    if (!mkdtemp(tmpl))
        return jitop__fail(JITOP_EIO, "cannot make a temporary folder %s: %s", tmpl,
                           strerror(errno));
    if (!(o = jitop__sprintf("%s/obj.o", tmpl)) || !(d = jitop__sprintf("%s/obj.d", tmpl)))
        status = jitop__fail(JITOP_ENOMEM, "out of memory");
    if (status == JITOP_OK)
        status = jitop__strv_push(&argv, cc->argv0.v[0]);
    if (status == JITOP_OK)
        status = unit_flags(u, cc, &argv);
    /* deps_only: the preprocessor's list alone (-MM: the same files as
     * -MMD), no object. */
    const char *tail[] = {"-MMD", "-MF", d, "-c", u->path, "-o", o};
    const char *list[] = {"-MM", "-MF", d, u->path};
    const char *const *words = deps_only ? list : tail;
    size_t nwords = deps_only ? sizeof list / sizeof *list : sizeof tail / sizeof *tail;
    for (size_t i = 0; status == JITOP_OK && i < nwords; i++)
        status = jitop__strv_push(&argv, words[i]);
    if (status != JITOP_OK)
        goto out;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME_COARSE, &ts);
    int64_t t0 = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
    if (jitop__host_before_compile_hook && !deps_only)
        jitop__host_before_compile_hook(u->path);
    status = jitop__host_run_strv(&argv, log, &code);
    if (status != JITOP_OK)
        goto out;
    if (code != 0) {
        char *cmd = jitop__strv_join(&argv, " ");
        status = jitop__fail(JITOP_ECOMPILE, "host compile of %s failed (%s exit %d):\n%s",
                             u->path, cmd ? cmd : cc->argv0.v[0], code, *log);
        free(cmd);
        goto out;
    }
    char *bytes = NULL;
    if (!deps_only)
        status = jitop__read_file(o, &bytes, size);
    *obj = (unsigned char *)bytes;
    if (status == JITOP_OK)
        status = jitop__host_deps_from_depfile(cc, d, t0, deps, changed);
    if (status == JITOP_OK)
        status = jitop__host_deps_add_dirs(u, cc, t0, deps, changed);
out:
    /* Only the files this call made, then its own folder. */
    if (o)
        unlink(o);
    if (d)
        unlink(d);
    rmdir(tmpl);
    free(o);
    free(d);
    jitop__strv_free(&argv);
    if (status != JITOP_OK) {
        free(*obj);
        *obj = NULL;
    }
    return status;
}

/* A folder where the compiler looks for headers changed (a file added,
 * removed or renamed): the recorded list may no longer be what the
 * compiler would read (a header created next to the source shadows one
 * under -I). The preprocessor lists the files again; *ok false when it
 * fails or a file changed meanwhile: the compile then decides and says
 * why. */
static int relist(const jitop__host_unit *u, jitop__host_cc *cc, jitop__deps *d, bool *ok)
{
    *ok = false;
    jitop__deps_free(d);
    int status = jitop__host_cc_identify(cc);
    unsigned char *obj = NULL;
    size_t size = 0;
    char *log = NULL;
    bool changed = false;
    if (status == JITOP_OK)
        status = compile_once(u, cc, true, &obj, &size, d, &log, &changed);
    free(obj);
    free(log);
    if (status == JITOP_ECOMPILE || status == JITOP_ENOTFOUND || status == JITOP_EIO) {
        jitop__clear_error();
        status = JITOP_OK;
    } else if (status == JITOP_OK) {
        *ok = !changed;
    }
    return status;
}

static int read_entry(jitop_ctx *ctx, jitop__host_obj *out, bool *found)
{
    jitop__entry e;
    int status = jitop__cache_get(ctx->cache, out->key, &e, found);
    if (status == JITOP_OK && *found) {
        out->bin = e.bin;
        memset(&e.bin, 0, sizeof e.bin);
        jitop__entry_free(&e);
    }
    return status;
}

int jitop__host_obj_build(jitop_ctx *ctx, const jitop__host_unit *u, jitop__host_cc *cc, bool read,
                          jitop__host_obj *out)
{
    char id[33];
    int lockfd = -1;
    bool found = false;
    memset(out, 0, sizeof *out);
    int status = jitop__host_obj_fresh(ctx, u, cc, out, &found);
    if (status != JITOP_OK)
        return status;
    if (found) {
        if (!read)
            return JITOP_OK;
        status = read_entry(ctx, out, &found);
        if (status != JITOP_OK || found)
            return status;
        jitop__host_obj_free(out);
    }
    /* One compile per unit across processes: the lock is the unit's (its
     * key is not known before the compiler lists the headers). */
    jitop__host_obj_id(u, cc, id);
    status = jitop__cache_lock(ctx->cache, id, &lockfd);
    if (status != JITOP_OK)
        return status;
    /* The manifest again: another process may have built it meanwhile. */
    bool have = false, ok = false;
    status = jitop__manifest_get(ctx->cache, id, &out->deps, out->key, &have);
    if (status == JITOP_OK && have && same_compiler(&out->deps, cc)) {
        bool fresh = false;
        char *why = NULL;
        status = jitop__deps_fresh(&out->deps, &fresh, &why);
        if (status == JITOP_OK && !fresh && !jitop__host_dirs_same(&out->deps))
            status = relist(u, cc, &out->deps, &ok);
        else if (status == JITOP_OK && !fresh)
            status = rehash(cc, &out->deps, &ok);
        else
            ok = true;
        if (status == JITOP_OK && ok) {
            char key[33];
            obj_key(u, cc, &out->deps, key);
            if (!fresh)
                memcpy(out->key, key, sizeof key);
            status = read_entry(ctx, out, &found);
            if (status == JITOP_OK && found) {
                out->cached = true;
                if (!fresh) /* new stat data for the next fast path */
                    jitop__manifest_put(ctx->cache, id, &out->deps, out->key);
                jitop__clear_error();
            } else if (status == JITOP_OK) {
                out->why = why ? why : jitop__strdup("its entry is gone");
                why = NULL;
            }
        } else if (status == JITOP_OK) {
            out->why = jitop__strdup("a file it read is gone");
        }
        free(why);
    } else if (status == JITOP_OK) {
        out->why = jitop__strdup(have ? "another compiler" : "not built before");
    }
    if (status != JITOP_OK || found)
        goto out;
    jitop__deps_free(&out->deps);
    status = jitop__host_cc_identify(cc);
    for (int attempt = 0; status == JITOP_OK; attempt++) {
        unsigned char *obj = NULL;
        size_t size = 0;
        char *log = NULL;
        bool changed = false;
        status = compile_once(u, cc, false, &obj, &size, &out->deps, &log, &changed);
        if (status == JITOP_OK && changed && attempt < 3) {
            free(obj);
            free(log);
            jitop__deps_free(&out->deps);
            continue;
        }
        if (status == JITOP_OK)
            status = jitop__host_obj_publish(ctx, u, cc, &out->deps, obj, size, log, out->key);
        if (status == JITOP_OK && read) {
            out->bin.data = obj;
            out->bin.size = size;
            obj = NULL;
        }
        free(obj);
        free(log);
        break;
    }
out:
    jitop__cache_unlock(lockfd);
    if (status != JITOP_OK)
        jitop__host_obj_free(out);
    return status;
}
