/* A module's host code: its shared object built (host room), loaded from
 * the cache entry's bytes, swapped at a reload and unloaded when idle. */
#include "load/load.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* dlclose, and the file's number given back only when the object is
 * really gone (see jitop__hostlib.fd). */
static void unload(jitop__hostlib *lib)
{
    if (lib->handle) {
        dlclose(lib->handle);
        lib->handle = NULL;
    }
    if (lib->fd < 0)
        return;
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", lib->fd);
    void *still = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
    if (still)
        dlclose(still); /* pinned (a GNU unique symbol, a thread's destructor): keep the fd */
    else
        close(lib->fd);
    lib->fd = -1;
}

void jitop__hostlib_free(jitop__hostlib *lib)
{
    if (!lib)
        return;
    unload(lib);
    for (size_t i = 0; i < lib->n; i++) {
        free(lib->names[i]);
        free(lib->sigs[i]);
    }
    free(lib->names);
    free(lib->sigs);
    free(lib->addrs);
    free(lib);
}

/* The exports the object recorded (JITOP_EXPORT), copied. */
static int read_exports(const char *label, jitop__hostlib *lib)
{
    typedef const jitop_host_export *(*exports_fn)(size_t *n);
    exports_fn get = (exports_fn)dlsym(lib->handle, "jitop_host_exports");
    lib->init = (int (*)(const jitop_host_api *))dlsym(lib->handle, "jitop_host_init");
    if (!get || !lib->init)
        return jitop__fail(JITOP_ENOTFOUND,
                           "module %s: the host object has no jitop_host_exports or "
                           "jitop_host_init (jitop's runtime object was not linked in)",
                           label);
    size_t n = 0;
    const jitop_host_export *ex = get(&n);
    lib->names = calloc(n ? n : 1, sizeof *lib->names);
    lib->sigs = calloc(n ? n : 1, sizeof *lib->sigs);
    lib->addrs = calloc(n ? n : 1, sizeof *lib->addrs);
    if (!lib->names || !lib->sigs || !lib->addrs)
        return jitop__fail(JITOP_ENOMEM, "out of memory");
    for (size_t i = 0; i < n; i++) {
        if (ex[i].magic != JITOP_HOST_EXPORT_MAGIC || !ex[i].name || !ex[i].signature)
            return jitop__fail(JITOP_EINVAL,
                               "module %s: record %zu of the host object's jitop_exports "
                               "section is not a JITOP_EXPORT record",
                               label, i);
        for (size_t j = 0; j < lib->n; j++)
            if (strcmp(lib->names[j], ex[i].name) == 0)
                return jitop__fail(JITOP_EINVAL, "module %s: host function %s exported twice",
                                   label, ex[i].name);
        if (!(lib->names[i] = jitop__strdup(ex[i].name)) ||
            !(lib->sigs[i] = jitop__strdup(ex[i].signature)))
            return jitop__fail(JITOP_ENOMEM, "out of memory");
        lib->addrs[i] = (void *)ex[i].fn;
        lib->n = i + 1;
    }
    return JITOP_OK;
}

/* dlopen of the object's bytes through a memory file named by its key:
 * the bytes are the checksummed cache entry's, read just now, so nothing
 * on disk can be swapped between the check and the load, and no file
 * outside the cache is left to clean. The name shows in /proc/PID/maps and
 * to debuggers as /memfd:jitop-<key>.so. */
static int open_lib(const char *label, const char key[33], const jitop__binary *bin,
                    jitop__hostlib **out)
{
    char name[64], path[64];
    int status = JITOP_OK;
    jitop__hostlib *lib = calloc(1, sizeof *lib);
    *out = NULL;
    if (!lib)
        return jitop__fail(JITOP_ENOMEM, "out of memory");
    atomic_init(&lib->inflight, 0);
    lib->fd = -1;
    memcpy(lib->key, key, sizeof lib->key);
    snprintf(name, sizeof name, "jitop-%s.so", key);
    int fd = lib->fd = memfd_create(name, MFD_CLOEXEC);
    if (fd < 0) {
        status = jitop__fail(JITOP_EIO, "module %s: memfd_create: %s", label, strerror(errno));
        goto out;
    }
    size_t off = 0;
    while (off < bin->size) {
        ssize_t w = write(fd, bin->data + off, bin->size - off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            status = jitop__fail(JITOP_EIO, "module %s: writing the host object: %s", label,
                                 strerror(errno));
            goto out;
        }
        off += (size_t)w;
    }
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    lib->handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!lib->handle) {
        const char *e = dlerror();
        status = jitop__fail(JITOP_EIO, "module %s: dlopen of its host object %s: %s", label,
                             key, e ? e : "unknown error");
        goto out;
    }
    status = read_exports(label, lib);
out:
    if (status == JITOP_OK)
        *out = lib;
    else
        jitop__hostlib_free(lib);
    return status;
}

static int build_open(jitop_module *m, jitop__hostlib **lib, jitop__deps *deps)
{
    jitop__host *h = m->host;
    jitop__host_lib built;
    double t = jitop__now_ms();
    int status = jitop__host_lib_build(m->ctx, m->name, &h->sources, &h->cflags, &h->ldflags,
                                       &built);
    if (status != JITOP_OK)
        return jitop__fail_prefix(status, "module %s", m->name);
    double tb = jitop__now_ms() - t;
    status = open_lib(m->name, built.key, &built.bin, lib);
    if (status == JITOP_OK) {
        jitop__log(m->ctx, "module %s: host object %s: %s %.3f ms, %zu bytes, dlopen %.3f ms, "
                   "%zu functions",
                   m->name, built.key, built.cached ? "cache hit" : built.builder, tb,
                   built.bin.size, jitop__now_ms() - t - tb, (*lib)->n);
        *deps = built.deps;
        memset(&built.deps, 0, sizeof built.deps);
    }
    jitop__host_lib_free(&built);
    return status;
}

int jitop__host_load(jitop_module *m, const jitop__strv *sources, const jitop__strv *cflags,
                     const jitop__strv *ldflags)
{
    jitop__host *h = calloc(1, sizeof *h);
    if (!h)
        return jitop__fail(JITOP_ENOMEM, "out of memory");
    atomic_init(&h->cur, NULL);
    m->host = h;
    int status = JITOP_OK;
    const jitop__strv *from[] = {sources, cflags, ldflags};
    jitop__strv *to[] = {&h->sources, &h->cflags, &h->ldflags};
    for (size_t l = 0; l < 3; l++)
        for (size_t i = 0; status == JITOP_OK && i < from[l]->n; i++)
            status = jitop__strv_push(to[l], from[l]->v[i]);
    jitop__hostlib *lib = NULL;
    if (status == JITOP_OK)
        status = build_open(m, &lib, &h->deps);
    if (status == JITOP_OK) {
        h->libs = lib;
        atomic_store(&h->cur, lib);
    }
    return status;
}

int jitop__host_prepare(jitop_module *m, jitop__hostlib **out, jitop__deps *deps)
{
    *out = NULL;
    memset(deps, 0, sizeof *deps);
    jitop__host *h = m->host;
    if (!h)
        return JITOP_OK;
    bool fresh = false;
    int status = jitop__host_fresh(m, &fresh);
    if (status != JITOP_OK || fresh)
        return status;
    jitop__hostlib *lib = NULL;
    status = build_open(m, &lib, deps);
    if (status != JITOP_OK)
        return status;
    pthread_mutex_lock(&m->lock);
    bool same = strcmp(atomic_load(&h->cur)->key, lib->key) == 0;
    if (same) {
        /* Files touched, contents the same: new stat data, same code. */
        jitop__deps_free(&h->deps);
        h->deps = *deps;
        memset(deps, 0, sizeof *deps);
    }
    pthread_mutex_unlock(&m->lock);
    if (same)
        jitop__hostlib_free(lib);
    else
        *out = lib;
    return JITOP_OK;
}

int jitop__hostlib_init(jitop_module *m, jitop__hostlib *lib)
{
    jitop__host *h = m->host;
    if (lib->inited || !h->api_ready)
        return JITOP_OK;
    if (lib->init(&h->api) != 0)
        return jitop__fail(JITOP_EINVAL,
                           "module %s: its host object refused jitop's API table (built "
                           "against another jitop_host.h?)",
                           m->name);
    lib->inited = true;
    return JITOP_OK;
}

int jitop__host_commit(jitop_module *m, jitop__hostlib *lib, jitop__deps *deps)
{
    jitop__host *h = m->host;
    int status = jitop__hostlib_init(m, lib);
    if (status != JITOP_OK) {
        jitop__hostlib_free(lib);
        jitop__deps_free(deps);
        return status;
    }
    jitop__hostlib *old = atomic_load(&h->cur);
    lib->next = h->libs;
    h->libs = lib;
    atomic_store_explicit(&h->cur, lib, memory_order_seq_cst);
    old->retired = true;
    jitop__deps_free(&h->deps);
    h->deps = *deps;
    memset(deps, 0, sizeof *deps);
    jitop__log(m->ctx, "module %s: host object %s swapped in (was %s)", m->name, lib->key,
               old->key);
    return JITOP_OK;
}

void jitop__host_reap(jitop_module *m, size_t *left)
{
    size_t still = 0;
    jitop__host *h = m->host;
    if (h) {
        pthread_mutex_lock(&m->lock);
        for (jitop__hostlib *l = h->libs; l; l = l->next) {
            if (!l->retired || !l->handle)
                continue;
            if (atomic_load_explicit(&l->inflight, memory_order_seq_cst) == 0)
                unload(l);
            else
                still++;
        }
        pthread_mutex_unlock(&m->lock);
    }
    if (left)
        *left = still;
}

void jitop__host_free(jitop_module *m)
{
    jitop__host *h = m->host;
    if (!h)
        return;
    if (h->fns_free)
        h->fns_free(m);
    for (jitop__hostlib *l = h->libs, *next; l; l = next) {
        next = l->next;
        jitop__hostlib_free(l);
    }
    jitop__strv_free(&h->sources);
    jitop__strv_free(&h->cflags);
    jitop__strv_free(&h->ldflags);
    jitop__deps_free(&h->deps);
    free(h);
    m->host = NULL;
}

int jitop__host_fresh(jitop_module *m, bool *fresh)
{
    *fresh = true;
    if (!m->host)
        return JITOP_OK;
    jitop__deps d;
    pthread_mutex_lock(&m->lock);
    int status = jitop__deps_copy(&m->host->deps, &d);
    pthread_mutex_unlock(&m->lock);
    char *why = NULL;
    if (status == JITOP_OK)
        status = jitop__deps_fresh(&d, fresh, &why);
    if (status == JITOP_OK && !*fresh && why)
        jitop__log(m->ctx, "module %s: %s", m->name, why);
    free(why);
    jitop__deps_free(&d);
    return status;
}
