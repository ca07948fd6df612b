/* Modules: load through the cache, the per-context table, reload
 * (prepare / commit / reap) and teardown. Ops and launches are the op
 * room's (op/op.c); images are image.c, bindings binding.c, linked
 * (-rdc) modules linked.c. */
#include "load/driver.h"
#include "load/load.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ------------------------------------------------------------ units */

void jitop__modunit_free(jitop__modunit *mu)
{
    if (!mu)
        return;
    jitop__unit_free(&mu->unit);
    jitop__deps_free(&mu->deps);
    jitop__binary_free(&mu->unloaded);
    free(mu->lowered);
    jitop__strv_free(&mu->folded);
    jitop__strv_free(&mu->folded_lowered);
    jitop__strv_free(&mu->asked);
    memset(mu, 0, sizeof *mu);
}

/* A source's folded names and their lowered names, as its binary says
 * (bin->names are the names it was compiled with, in order): moved out of
 * bin. */
static void take_folded(jitop__modunit *mu, jitop__binary *bin)
{
    if (!jitop__unit_folds(&mu->unit) || bin->names.n != bin->lowered.n)
        return;
    jitop__strv_free(&mu->folded);
    jitop__strv_free(&mu->folded_lowered);
    mu->folded = bin->names;
    mu->folded_lowered = bin->lowered;
    memset(&bin->names, 0, sizeof bin->names);
    memset(&bin->lowered, 0, sizeof bin->lowered);
}

static const char *unit_label(const jitop__unit *u)
{
    return u->source_path ? u->source_path : u->source_name ? u->source_name : "inline source";
}

/* The lowered name of the instance name in bin: its own binary's one, or
 * where a binary of its source's lists holds other names too
 * (jitop__build_unit_known, build/build.h's bins), the one at its index.
 * NULL when NVRTC gave none. */

/* Builds mu->unit (already initialized) and loads its image, or keeps its
 * binary when lazy; key, deps and lowered name move into mu. */
static int build_and_load(jitop_module *m, jitop__modunit *mu, bool lazy,
                          const jitop__deps *known, bool *unresolved)
{
    jitop__built built;
    memset(&built, 0, sizeof built);
    double t_build = jitop__now_ms();
    bool declared = !known && mu->unit.names.n == 0 && !m->linked && m->declared.n > 0;
    int status = known      ? jitop__build_unit_known(m->ctx, &mu->unit, known, &built)
                 : declared ? jitop__build_unit_declared(m->ctx, &mu->unit, lazy, &m->declared,
                                                         &built)
                 : lazy     ? jitop__build_unit_deferred(m->ctx, &mu->unit, &built)
                            : jitop__build_unit(m->ctx, &mu->unit, &built);
    t_build = jitop__now_ms() - t_build;
    if (unresolved)
        *unresolved = status == JITOP_ENOTFOUND && built.unresolved;
    if (status != JITOP_OK)
        goto out;
    if (mu->unit.names.n > 0) {
        const char *lowered = jitop__binary_lowered(&built.entry.bin, mu->unit.names.v[0]);
        if (!lowered) {
            status = jitop__fail(JITOP_ENVRTC, "module %s: NVRTC gave no lowered name for %s",
                                 m->name, mu->unit.names.v[0]);
            goto out;
        }
        if (!(mu->lowered = jitop__strdup(lowered))) {
            status = jitop__fail(JITOP_ENOMEM, "out of memory");
            goto out;
        }
    }
    double t_load = jitop__now_ms();
    if (!lazy && m->linked)
        status = jitop__link_instance(m, &mu->unit, built.key, &built.entry.bin, mu->lowered,
                                      &mu->image);
    else if (!lazy)
        status = jitop__image_load(m, built.key, &built.entry.bin, unit_label(&mu->unit),
                                   mu->lowered, &mu->image);
    t_load = jitop__now_ms() - t_load;
    if (status != JITOP_OK)
        goto out;
    /* Where a load's time goes (JITOP_VERBOSE=1): the cache or NVRTC, then
     * the driver. */
    jitop__log(m->ctx, "module %s: %s%s%s: %s %.3f ms, %zu bytes, %s %.3f ms", m->name,
               unit_label(&mu->unit), mu->unit.names.n ? " as " : "",
               mu->unit.names.n ? mu->unit.names.v[0] : "",
               built.deferred ? "cache hit (entry read when needed)"
               : built.cached ? "cache hit"
                              : "built",
               t_build, built.entry.bin.size,
               lazy            ? "image loaded when needed"
               : mu->lowered ? "cuModuleLoadData + cuModuleGetFunction"
                             : "cuModuleLoadData + kernel list",
               t_load);
    memcpy(mu->key, built.key, sizeof mu->key);
    mu->deps = built.deps;
    memset(&built.deps, 0, sizeof built.deps);
    mu->folded = built.inst.built;
    mu->asked = built.inst.asked;
    memset(&built.inst, 0, sizeof built.inst);
    if (built.entry.bin.data)
        take_folded(mu, &built.entry.bin);
    if (lazy) {
        mu->unloaded = built.entry.bin;
        memset(&built.entry.bin, 0, sizeof built.entry.bin);
    }
out:
    jitop__built_free(&built);
    return status;
}

int jitop__modunit_build(jitop_module *m, const char *path, const char *text,
                         const char *const *names, size_t nnames, bool lazy,
                         const jitop__deps *known, jitop__modunit *mu, bool *unresolved)
{
    if (unresolved)
        *unresolved = false;
    memset(mu, 0, sizeof *mu);
    int status = jitop__unit_init(&mu->unit, path, text, (const char *const *)m->options.v,
                                  m->options.n, names, nnames, m->arch);
    if (status != JITOP_OK) {
        memset(mu, 0, sizeof *mu);
        return jitop__fail_prefix(status, "module %s", m->name);
    }
    status = build_and_load(m, mu, lazy, known, unresolved);
    if (status != JITOP_OK)
        jitop__modunit_free(mu);
    return status;
}

/* ------------------------------------------------------------ modules */

static void module_free(jitop_module *m)
{
    if (!m)
        return;
    if (m->ops_free)
        m->ops_free(m);
    if (m->globals_free)
        m->globals_free(m);
    for (size_t i = 0; i < m->nunits; i++)
        jitop__modunit_free(&m->units[i]);
    free(m->units);
    for (size_t i = 0; i < m->ninstances; i++) {
        jitop__modunit_free(m->instances[i]);
        free(m->instances[i]);
    }
    free(m->instances);
    jitop__image *img = m->images;
    while (img) {
        jitop__image *next = img->next;
        jitop__image_free(m->drv, img);
        img = next;
    }
    jitop__binary_free(&m->link_unloaded);
    jitop__host_free(m);
    jitop__strv_free(&m->options);
    jitop__strv_free(&m->declared);
    pthread_mutex_destroy(&m->lock);
    free(m->name);
    free(m);
}

/* What makes two loads the same module: the name (two modules with one name
 * and different sources stay apart, and so do two names for one source),
 * the arch, each source's absolute path or inline text (with the current
 * directory, where its quoted includes are looked up), and the options. */
static void module_id(const char *name, const char *arch, const jitop__strv *paths,
                      const char *text, const char *const *options, size_t noptions, char id[33])
{
    XXH3_state_t st;
    XXH3_INITSTATE(&st);
    XXH3_128bits_reset(&st);
    /* Each field with its terminating NUL, so that fields cannot run into
     * each other; counts and kinds tag the lists. */
    XXH3_128bits_update(&st, name, strlen(name) + 1);
    XXH3_128bits_update(&st, arch, strlen(arch) + 1);
    XXH3_128bits_update(&st, &paths->n, sizeof paths->n);
    for (size_t i = 0; i < paths->n; i++)
        XXH3_128bits_update(&st, paths->v[i], strlen(paths->v[i]) + 1);
    XXH3_128bits_update(&st, text ? "T" : "F", 1);
    if (text) {
        char cwd[PATH_MAX];
        const char *dir = getcwd(cwd, sizeof cwd) ? cwd : "";
        XXH3_128bits_update(&st, text, strlen(text) + 1);
        XXH3_128bits_update(&st, dir, strlen(dir) + 1);
    }
    XXH3_128bits_update(&st, &noptions, sizeof noptions);
    for (size_t i = 0; i < noptions; i++)
        XXH3_128bits_update(&st, options[i], strlen(options[i]) + 1);
    jitop__hash_hex(XXH3_128bits_digest(&st), id);
}

static jitop_module *find_module(jitop_ctx *ctx, const char id[33])
{
    for (jitop_module *m = ctx->modules; m; m = m->next)
        if (memcmp(m->id, id, 32) == 0)
            return m;
    return NULL;
}

/* True when every file of every unit and instance passes the stat fast path. */
static int module_fresh(jitop_module *m, bool *fresh)
{
    int status = JITOP_OK;
    *fresh = true;
    pthread_mutex_lock(&m->lock);
    for (size_t i = 0; *fresh && status == JITOP_OK && i < m->nunits + m->ninstances; i++) {
        jitop__modunit *mu = i < m->nunits ? &m->units[i] : m->instances[i - m->nunits];
        char *why = NULL;
        status = jitop__deps_fresh(&mu->deps, fresh, &why);
        if (why && !*fresh)
            jitop__log(m->ctx, "module %s: %s changed since it was loaded", m->name, why);
        free(why);
    }
    pthread_mutex_unlock(&m->lock);
    if (status == JITOP_OK && *fresh)
        status = jitop__host_fresh(m, fresh);
    return status;
}

static int module_new(jitop_ctx *ctx, const char *name, const char *arch, const char id[33],
                      const char *const *options, size_t noptions, jitop_module **out)
{
    jitop_module *m = calloc(1, sizeof *m);
    *out = NULL;
    if (!m)
        return jitop__fail(JITOP_ENOMEM, "out of memory");
    if (pthread_mutex_init(&m->lock, NULL) != 0) {
        free(m);
        return jitop__fail(JITOP_ENOMEM, "cannot create a mutex");
    }
    m->ctx = ctx;
    m->drv = jitop__driver_of(ctx);
    memcpy(m->id, id, sizeof m->id);
    snprintf(m->arch, sizeof m->arch, "%s", arch);
    atomic_init(&m->optab, NULL);
    atomic_init(&m->generation, 0);
    int status = JITOP_OK;
    if (!(m->name = jitop__strdup(name)))
        status = jitop__fail(JITOP_ENOMEM, "out of memory");
    for (size_t i = 0; status == JITOP_OK && i < noptions; i++)
        status = jitop__strv_push(&m->options, options[i]);
    /* Linked or not is what the options say (-rdc, -dc, -dlto, ...), as
     * each unit's normalization reads them: ask it once (a module of host
     * code only has no device unit, and its arch is no GPU's). */
    jitop__unit probe;
    if (status == JITOP_OK && strcmp(arch, "host") != 0 &&
        (status = jitop__unit_init(&probe, NULL, "", options, noptions, NULL, 0, arch)) ==
            JITOP_OK) {
        m->linked = probe.relocatable;
        jitop__unit_free(&probe);
    }
    if (status != JITOP_OK) {
        module_free(m);
        return status == JITOP_ENOMEM ? status : jitop__fail_prefix(status, "module %s", name);
    }
    *out = m;
    return JITOP_OK;
}

/* Builds every unit of a new module (no lock held: loads of different
 * modules compile in parallel). The images wait for their first use (see
 * jitop__modunit) when they are cubins for the device's own arch, which the
 * driver loads; built for another arch (PTX, an older or newer GPU), they
 * are loaded now, so that a binary the device cannot run fails the load. */
static int module_build(jitop_module *m, const jitop__strv *paths, const char *text)
{
    bool lazy = m->drv && strcmp(m->arch, m->drv->arch) == 0;
    size_t n = text ? 1 : paths->n;
    /* Declared instances go to the one source there is: with several, a
     * name folded into a source that does not declare it would make that
     * fold fail and compile the source twice (build.h), so each is then
     * compiled at its first get, from the source that declares it. */
    if (n > 1 && m->declared.n > 0) {
        jitop__log(m->ctx, "module %s: %zu sources: the -instance= names are compiled at their "
                           "first get, not folded in at load",
                   m->name, n);
        jitop__strv_free(&m->declared);
    }
    m->units = calloc(n, sizeof *m->units);
    if (!m->units)
        return jitop__fail(JITOP_ENOMEM, "out of memory");
    /* A linked module's units are never loaded themselves: built as lazy
     * ones are (a hit reads nothing), then linked. */
    for (size_t i = 0; i < n; i++) {
        int status = jitop__modunit_build(m, text ? NULL : paths->v[i], text, NULL, 0,
                                          lazy || m->linked, NULL, &m->units[i], NULL);
        if (status != JITOP_OK)
            return status;
        if (m->units[i].image)
            jitop__module_add_image(m, m->units[i].image);
        m->nunits++;
    }
    if (m->linked)
        return jitop__link_module(m, lazy);
    m->units_loaded = !lazy;
    return JITOP_OK;
}

/* The binary of a source unit whose entry jitop_load found but did not
 * read (jitop__build_unit_deferred): read now by its key. When it went
 * meanwhile (evicted, cleaned, found invalid), the unit is built again from
 * its files as they are now, and the module takes that key and those deps. */
static int unit_binary_fetch(jitop_module *m, jitop__modunit *mu)
{
    jitop__entry e;
    bool found = false;
    int status = jitop__cache_get(m->ctx->cache, mu->key, &e, &found);
    if (status != JITOP_OK)
        return status;
    if (found) {
        jitop__log_warnings(m->ctx, &mu->unit, &e.bin, true);
        take_folded(mu, &e.bin);
        mu->unloaded = e.bin;
        memset(&e.bin, 0, sizeof e.bin);
        jitop__entry_free(&e);
        return JITOP_OK;
    }
    jitop__built built;
    status = jitop__build_unit(m->ctx, &mu->unit, &built);
    if (status != JITOP_OK)
        return jitop__fail_prefix(status, "module %s", m->name);
    jitop__log(m->ctx, "module %s: %s: entry %s was gone at first use: %s %s", m->name,
               unit_label(&mu->unit), mu->key, built.cached ? "found" : "built", built.key);
    memcpy(mu->key, built.key, sizeof mu->key);
    jitop__deps_free(&mu->deps);
    mu->deps = built.deps;
    memset(&built.deps, 0, sizeof built.deps);
    jitop__strv_free(&mu->asked);
    mu->asked = built.inst.asked;
    memset(&built.inst.asked, 0, sizeof built.inst.asked);
    jitop__strv_free(&mu->folded_lowered);
    take_folded(mu, &built.entry.bin);
    mu->unloaded = built.entry.bin;
    memset(&built.entry.bin, 0, sizeof built.entry.bin);
    jitop__built_free(&built);
    return JITOP_OK;
}

int jitop__unit_load(jitop_module *m, jitop__modunit *mu)
{
    if (mu->image)
        return JITOP_OK;
    double t = jitop__now_ms();
    if (!mu->unloaded.data) {
        int status = unit_binary_fetch(m, mu);
        if (status != JITOP_OK)
            return status;
    }
    int status = jitop__image_load(m, mu->key, &mu->unloaded, unit_label(&mu->unit), NULL,
                                   &mu->image);
    if (status != JITOP_OK)
        return status;
    jitop__log(m->ctx, "module %s: %s: image loaded on first use, %zu kernels, %.3f ms",
               m->name, unit_label(&mu->unit), mu->image->nkernels, jitop__now_ms() - t);
    jitop__module_add_image(m, mu->image);
    jitop__binary_free(&mu->unloaded);
    return JITOP_OK;
}

int jitop__units_load(jitop_module *m)
{
    if (m->linked)
        return m->units_loaded ? JITOP_OK : jitop__link_load(m);
    for (size_t i = 0; !m->units_loaded && i < m->nunits; i++) {
        int status = jitop__unit_load(m, &m->units[i]);
        if (status != JITOP_OK)
            return status;
    }
    m->units_loaded = true;
    return JITOP_OK;
}

static int load_common(jitop_ctx *ctx, const char *name, const char *const *sources,
                       size_t nsources, const char *text, const char *const *options,
                       size_t noptions, const char *arch_for, jitop_module **out)
{
    int status = JITOP_OK;
    jitop__strv paths = {0}, dev_paths = {0}, host_paths = {0};
    jitop__strv dev_options = {0}, cflags = {0}, ldflags = {0};
    jitop_module *m = NULL, *found = NULL;
    const char *arch = NULL;
    char id[33];

    if (!ctx || !out)
        return jitop__fail(JITOP_EINVAL, "jitop_load: ctx and out must not be NULL");
    /* The clock only for JITOP_VERBOSE: a load asked again is a hot path. */
    const double t0 = ctx->verbose ? jitop__now_ms() : 0.0;
    if (!name)
        name = "module";
    if (noptions && !options)
        return jitop__fail(JITOP_EINVAL, "module %s: options is NULL but noptions is %zu", name,
                           noptions);
    /* -instance= names are no compiler option and not the module's
     * identity: a load asked again with other names is the same module. */
    const char **kept = NULL;
    jitop__strv declared = {0};
    status = jitop__load_instances(name, options, noptions, &kept, &noptions, &declared);
    if (status != JITOP_OK)
        return status;
    options = kept;
    for (size_t i = 0; i < declared.n; i++) {
        if (jitop__name_is_plain(declared.v[i])) {
            char *o = jitop__sprintf("-instance=%s", declared.v[i]);
            status = o ? jitop__load_instance_refused(name, o)
                       : jitop__fail(JITOP_ENOMEM, "out of memory");
            free(o);
            goto out;
        }
    }
    /* Host sources (.c, .cpp, ...) go to the host compiler, the rest to
     * NVRTC; a module of host code only needs no GPU. */
    size_t ndevice = text ? 1 : 0;
    for (size_t i = 0; i < nsources; i++)
        ndevice += !jitop__host_is_source(sources[i]);
    if (ndevice > 0) {
        status = jitop__driver_start(ctx);
        if (status != JITOP_OK) {
            jitop__fail_prefix(status, "loading module %s", name);
            goto out;
        }
        if (arch_for != NULL)
            arch = arch_for;
        else if ((status = jitop_ctx_arch(ctx, &arch)) != JITOP_OK)
            goto out;
    } else {
        arch = "host";
    }
    for (size_t i = 0; status == JITOP_OK && i < nsources; i++) {
        char *abs = sources[i] ? jitop__abspath(sources[i]) : NULL;
        if (!abs) {
            status = sources[i] ? jitop__fail_abspath(sources[i])
                                : jitop__fail(JITOP_EINVAL, "module %s: source %zu is NULL",
                                              name, i);
            break;
        }
        status = jitop__strv_push(&paths, abs);
        free(abs);
    }
    if (status != JITOP_OK)
        goto out;
    module_id(name, arch, &paths, text, options, noptions, id);

    pthread_mutex_lock(&ctx->lock);
    found = find_module(ctx, id);
    pthread_mutex_unlock(&ctx->lock);
    if (found) {
        /* Loaded before: only the stat fast path touches the disk. A file
         * that changed since is rebuilt in place, so handles stay valid. */
        bool fresh = false;
        status = module_fresh(found, &fresh);
        if (status == JITOP_OK && !fresh)
            status = jitop_module_reload(found);
        if (status == JITOP_OK)
            *out = found;
        goto out;
    }

    status = jitop__host_split_options(options, noptions, &dev_options, &cflags, &ldflags);
    if (status != JITOP_OK) {
        jitop__fail_prefix(status, "module %s", name);
        goto out;
    }
    for (size_t i = 0; status == JITOP_OK && i < paths.n; i++)
        status = jitop__strv_push(jitop__host_is_source(paths.v[i]) ? &host_paths : &dev_paths,
                                  paths.v[i]);
    if (status == JITOP_OK)
        status = module_new(ctx, name, arch, id, (const char *const *)dev_options.v,
                            dev_options.n, &m);
    if (status == JITOP_OK) {
        m->declared = declared;
        memset(&declared, 0, sizeof declared);
    }
    if (status == JITOP_OK && (dev_paths.n > 0 || text))
        status = module_build(m, &dev_paths, text);
    if (status == JITOP_OK && host_paths.n > 0)
        status = jitop__host_load(m, &host_paths, &cflags, &ldflags);
    if (status != JITOP_OK)
        goto out;
    pthread_mutex_lock(&ctx->lock);
    found = find_module(ctx, id); /* another thread may have loaded it meanwhile */
    if (!found) {
        status = jitop__ctx_on_destroy(ctx, jitop__loader_ctx_destroy);
        if (status == JITOP_OK) {
            m->next = ctx->modules;
            ctx->modules = m;
            *out = m;
            m = NULL;
        }
    } else {
        *out = found;
    }
    pthread_mutex_unlock(&ctx->lock);
out:
    if (status == JITOP_OK && ctx->verbose)
        jitop__log(ctx, "module %s: jitop_load %.3f ms", name, jitop__now_ms() - t0);
    module_free(m);
    jitop__strv_free(&paths);
    jitop__strv_free(&dev_paths);
    jitop__strv_free(&host_paths);
    jitop__strv_free(&dev_options);
    jitop__strv_free(&cflags);
    jitop__strv_free(&ldflags);
    jitop__strv_free(&declared);
    free(kept);
    return status;
}

int jitop_load(jitop_ctx *ctx, const char *name, const char *const *sources, size_t nsources,
               const char *const *options, size_t noptions, jitop_module **out)
{
    if (!sources || nsources == 0)
        return jitop__fail(JITOP_EINVAL, "jitop_load %s: no sources given", name ? name : "");
    return load_common(ctx, name, sources, nsources, NULL, options, noptions, NULL, out);
}

int jitop__load_arch(jitop_ctx *ctx, const char *name, const char *const *sources,
                     size_t nsources, const char *const *options, size_t noptions,
                     const char *arch, jitop_module **out)
{
    if (!sources || nsources == 0 || !arch)
        return jitop__fail(JITOP_EINVAL, "jitop__load_arch %s: no sources or no arch given",
                           name ? name : "");
    return load_common(ctx, name, sources, nsources, NULL, options, noptions, arch, out);
}

int jitop_load_inline(jitop_ctx *ctx, const char *name, const char *source_text,
                      const char *const *options, size_t noptions, jitop_module **out)
{
    if (!source_text)
        return jitop__fail(JITOP_EINVAL, "jitop_load_inline %s: source_text is NULL",
                           name ? name : "");
    return load_common(ctx, name, NULL, 0, source_text, options, noptions, NULL, out);
}

const char *jitop_module_name(const jitop_module *m)
{
    return m ? m->name : NULL;
}

uint64_t jitop_module_generation(const jitop_module *m)
{
    return m ? atomic_load_explicit(&m->generation, memory_order_acquire) : 0;
}

int jitop_module_log(jitop_module *m, char **log)
{
    jitop__strv keys = {0}, logs = {0};
    int status = JITOP_OK;
    if (!m || !log)
        return jitop__fail(JITOP_EINVAL, "jitop_module_log: NULL argument");
    *log = NULL;
    /* The keys of the code in place; the entries are read without the lock
     * (a source loaded lazily never read its entry). */
    pthread_mutex_lock(&m->lock);
    for (size_t i = 0; status == JITOP_OK && i < m->nunits + m->ninstances; i++) {
        const jitop__modunit *mu = i < m->nunits ? &m->units[i] : m->instances[i - m->nunits];
        status = jitop__strv_push(&keys, mu->key);
    }
    pthread_mutex_unlock(&m->lock);
    for (size_t i = 0; status == JITOP_OK && i < keys.n; i++) {
        jitop__entry e;
        bool found = false, seen = false;
        status = jitop__cache_get(m->ctx->cache, keys.v[i], &e, &found);
        if (status != JITOP_OK || !found)
            continue;
        for (size_t j = 0; e.bin.log && j < logs.n && !seen; j++)
            seen = strcmp(logs.v[j], e.bin.log) == 0;
        if (e.bin.log && !seen)
            status = jitop__strv_push(&logs, e.bin.log);
        jitop__entry_free(&e);
    }
    if (status == JITOP_OK && !(*log = jitop__strv_join(&logs, "")))
        status = jitop__fail(JITOP_ENOMEM, "out of memory");
    jitop__strv_free(&keys);
    jitop__strv_free(&logs);
    return status;
}

/* ------------------------------------------------------------ reload */

typedef struct pending_item {
    jitop__modunit *mu;
    char old_key[33];
    char key[33];           /* the new key (old_key when nothing changed) */
    jitop__deps deps;       /* fresh stat data, moved into mu at commit */
    bool unloaded;          /* the unit had no image at prepare: rebuilt without loading */
    bool changed;           /* key differs: image or bin holds the new code */
    jitop__image *image;    /* the new image, for a unit loaded at prepare */
    jitop__binary bin;      /* the new binary, for a source not loaded at prepare; in a
                               linked module every item's, the input of the links */
    char *lowered;
    /* A linked module's instance: the key of its image (its link) and its
     * symbol at prepare, a snapshot taken under the lock. */
    char old_image_key[33];
    char *old_lowered;
    /* The fold rule (build/build.h). Sources: the new binary's names, their
     * lowered names, and the asked list, moved into the unit at commit.
     * Instances: their source's item, whether the new code is that
     * source's binary (no compile of their own), and whether the code in
     * place was (its image is then the source's, not theirs to retire). */
    jitop__strv folded, folded_lowered, asked;
    size_t src;
    bool shared, was_shared;
} pending_item;

struct jitop__pending {
    jitop_module *m;
    pending_item *items;
    size_t n;
    bool changed;
    bool counted; /* in m->pending */
    /* A linked module's image (m->units[0].image), relinked from the new
     * units: its old key and whether it was loaded at prepare, the new key,
     * and the new image (loaded at prepare) or binary (not loaded). */
    char link_old_key[33];
    bool link_loaded;
    bool link_changed;
    char link_key[33];
    jitop__image *link_image;
    jitop__binary link_bin;
    /* The rebuilt host object (hostlib.c), NULL when its code is the same. */
    jitop__hostlib *host;
    jitop__deps host_deps;
};

void jitop__pending_free(jitop__pending *p)
{
    if (!p)
        return;
    if (p->counted) {
        pthread_mutex_lock(&p->m->lock);
        p->m->pending--;
        pthread_mutex_unlock(&p->m->lock);
    }
    for (size_t i = 0; i < p->n; i++) {
        jitop__deps_free(&p->items[i].deps);
        /* A prepared image was never published: nothing can launch it. */
        jitop__image_free(p->m->drv, p->items[i].image);
        jitop__binary_free(&p->items[i].bin);
        free(p->items[i].lowered);
        free(p->items[i].old_lowered);
        jitop__strv_free(&p->items[i].folded);
        jitop__strv_free(&p->items[i].folded_lowered);
        jitop__strv_free(&p->items[i].asked);
    }
    jitop__image_free(p->m->drv, p->link_image);
    jitop__binary_free(&p->link_bin);
    jitop__hostlib_free(p->host);
    jitop__deps_free(&p->host_deps);
    free(p->items);
    free(p);
}

/* What an item's new image is loaded for: an instance's new symbol, or
 * NULL (a source: every kernel). Only the item's own fields: m->lock is not
 * held in prepare. */
static const char *instance_symbol(const pending_item *it)
{
    return it->mu->unit.names.n > 0 ? it->lowered : NULL;
}

int jitop__pending_changed(const jitop__pending *p)
{
    return p && (p->changed || p->host);
}

/* A linked module's rebuild: the module's image and each instance's image
 * linked again from the units just built (every binary in hand, so a link
 * that misses the cache runs at once); only a link whose key changed is
 * loaded (the module's, if it was loaded at prepare; else its binary is
 * kept for commit). An instance's unit replaces its own source's. */
static int prepare_links(jitop_module *m, jitop__pending *p)
{
    size_t nunits = m->nunits; /* fixed: units never change */
    jitop__link_input *in = calloc(nunits, sizeof *in);
    int status = in ? JITOP_OK : jitop__fail(JITOP_ENOMEM, "out of memory");
    for (size_t k = nunits; status == JITOP_OK && k <= p->n; k++) {
        /* k == p->n: the module's image; else instance item k. */
        pending_item *inst = k < p->n ? &p->items[k] : NULL;
        size_t src = inst ? jitop__link_source_of(m, &inst->mu->unit) : SIZE_MAX;
        for (size_t i = 0; i < nunits; i++) {
            const pending_item *it = i == src ? inst : &p->items[i];
            in[i] = (jitop__link_input){&it->mu->unit, it->key, &it->bin};
        }
        /* The key first (a hit reads nothing): most rebuilds leave most
         * links as they were. */
        jitop__built built;
        const char *old_key = inst ? inst->old_image_key : p->link_old_key;
        status = jitop__link_units(m, in, nunits, true, &built);
        if (status == JITOP_OK && built.deferred && strcmp(built.key, old_key) != 0) {
            jitop__built_free(&built);
            status = jitop__link_units(m, in, nunits, false, &built);
        }
        if (status != JITOP_OK)
            break;
        if (strcmp(built.key, old_key) != 0) {
            p->changed = true;
            if (inst) {
                inst->changed = true;
                status = jitop__image_load(m, built.key, &built.entry.bin,
                                           inst->mu->unit.source_name,
                                           inst->lowered ? inst->lowered : inst->old_lowered,
                                           &inst->image);
            } else {
                p->link_changed = true;
                memcpy(p->link_key, built.key, sizeof p->link_key);
                if (p->link_loaded)
                    status = jitop__image_load(m, built.key, &built.entry.bin,
                                               "the relinked image", NULL, &p->link_image);
                else {
                    p->link_bin = built.entry.bin;
                    memset(&built.entry.bin, 0, sizeof built.entry.bin);
                }
            }
        }
        jitop__built_free(&built);
    }
    free(in);
    return status;
}

static int strv_dup(jitop__strv *dst, const jitop__strv *src)
{
    for (size_t i = 0; i < src->n; i++)
        if (jitop__strv_push(dst, src->v[i]) != JITOP_OK)
            return jitop__fail(JITOP_ENOMEM, "out of memory");
    return JITOP_OK;
}

/* An instance item whose name its source's new binary has compiled in
 * (the source's item was built first): the instance takes that binary's
 * key, files and image, and its lowered name, with no build of its own
 * (*shared). Only when the source's image is or can be in hand: a source
 * unchanged and not loaded leaves the instance to its own build. */
static int prepare_folded(jitop_module *m, jitop__pending *p, pending_item *it, bool *shared)
{
    *shared = false;
    if (it->src >= m->nunits)
        return JITOP_OK;
    pending_item *si = &p->items[it->src];
    size_t k = SIZE_MAX;
    for (size_t j = 0; j < si->folded.n && k == SIZE_MAX; j++)
        if (strcmp(si->folded.v[j], it->mu->unit.names.v[0]) == 0)
            k = j;
    if (k == SIZE_MAX || k >= si->folded_lowered.n || (!si->changed && si->unloaded))
        return JITOP_OK;
    int status = JITOP_OK;
    if (si->changed && !si->image)
        status = jitop__image_load(m, si->key, &si->bin, unit_label(&si->mu->unit), NULL,
                                   &si->image);
    if (status == JITOP_OK)
        status = jitop__deps_copy(&si->deps, &it->deps);
    if (status == JITOP_OK && !(it->lowered = jitop__strdup(si->folded_lowered.v[k])))
        status = jitop__fail(JITOP_ENOMEM, "out of memory");
    if (status != JITOP_OK)
        return status;
    memcpy(it->key, si->key, sizeof it->key);
    it->shared = *shared = true;
    if (strcmp(it->key, it->old_key) != 0)
        it->changed = p->changed = true;
    return JITOP_OK;
}

int jitop__module_prepare(jitop_module *m, jitop__pending **out)
{
    int status = JITOP_OK;
    jitop__pending *p = NULL;
    jitop__strv *extras = NULL;
    if (!m || !out)
        return jitop__fail(JITOP_EINVAL, "jitop__module_prepare: NULL argument");
    *out = NULL;
    if (!(p = calloc(1, sizeof *p)))
        return jitop__fail(JITOP_ENOMEM, "out of memory");
    p->m = m;

    /* Snapshot the units under the lock; they never move or change, only
     * their key, image and deps (which commit replaces) do. A source not
     * loaded now is rebuilt without loading (commit loads it if it was
     * loaded meanwhile). */
    pthread_mutex_lock(&m->lock);
    size_t n = m->nunits + m->ninstances;
    p->items = calloc(n ? n : 1, sizeof *p->items);
    /* Each source's instances in use, folded into its compile (build.h). */
    extras = calloc(m->nunits ? m->nunits : 1, sizeof *extras);
    if (p->items && extras) {
        m->pending++;
        m->prepares++;
        p->counted = true;
        p->n = n;
        for (size_t i = 0; i < n; i++) {
            jitop__modunit *mu = i < m->nunits ? &m->units[i] : m->instances[i - m->nunits];
            p->items[i].mu = mu;
            memcpy(p->items[i].old_key, mu->key, sizeof p->items[i].old_key);
            p->items[i].unloaded = !mu->image;
            if (i >= m->nunits) {
                p->items[i].src = mu->src;
                p->items[i].was_shared = mu->shared;
                if (!m->linked && mu->src < m->nunits &&
                    jitop__strv_push(&extras[mu->src], mu->unit.names.v[0]) != JITOP_OK)
                    p->n = 0; /* out of memory, reported below */
            }
            if (m->linked && i >= m->nunits) {
                memcpy(p->items[i].old_image_key, mu->image->key, sizeof mu->image->key);
                if (!(p->items[i].old_lowered = jitop__strdup(mu->lowered)))
                    p->n = 0; /* out of memory, reported below */
            }
        }
        if (m->linked) {
            memcpy(p->link_old_key, m->link_key, sizeof p->link_old_key);
            p->link_loaded = m->units[0].image != NULL;
        }
    }
    pthread_mutex_unlock(&m->lock);
    if (!p->items || !extras || p->n != n) {
        status = jitop__fail(JITOP_ENOMEM, "out of memory");
        goto out;
    }

    for (size_t i = 0; i < p->n; i++) {
        pending_item *it = &p->items[i];
        jitop__built built;
        memset(&built, 0, sizeof built);
        if (i >= m->nunits && !m->linked) {
            bool shared = false;
            status = prepare_folded(m, p, it, &shared);
            if (status != JITOP_OK)
                goto out;
            if (shared)
                continue;
        }
        status = i < m->nunits && !m->linked
                     ? jitop__build_unit_fold(m->ctx, &it->mu->unit, &extras[i], &built)
                     : jitop__build_unit(m->ctx, &it->mu->unit, &built);
        if (status == JITOP_OK && i < m->nunits && !m->linked) {
            it->asked = built.inst.asked;
            memset(&built.inst.asked, 0, sizeof built.inst.asked);
            status = strv_dup(&it->folded, &built.entry.bin.names);
            if (status == JITOP_OK)
                status = strv_dup(&it->folded_lowered, &built.entry.bin.lowered);
        }
        if (status != JITOP_OK) {
            jitop__fail_prefix(status, "reloading module %s", m->name);
            jitop__built_free(&built);
            goto out;
        }
        it->deps = built.deps;
        memset(&built.deps, 0, sizeof built.deps);
        memcpy(it->key, built.key, sizeof it->key);
        if (m->linked) {
            /* Relocatable code: the input of the links below, never loaded. */
            if (strcmp(built.key, it->old_key) != 0) {
                it->changed = p->changed = true;
                if (it->mu->unit.names.n > 0 && built.entry.bin.lowered.n > 0 &&
                    !(it->lowered = jitop__strdup(built.entry.bin.lowered.v[0])))
                    status = jitop__fail(JITOP_ENOMEM, "out of memory");
            }
            it->bin = built.entry.bin;
            memset(&built.entry.bin, 0, sizeof built.entry.bin);
        } else if (strcmp(built.key, it->old_key) != 0 || it->was_shared) {
            /* An instance that shared its source's image and now has a
             * binary of its own needs its own image, even under the same
             * key (a bin of the lists that was its source's binary). */
            const char *lowered = it->mu->unit.names.n > 0
                                      ? jitop__binary_lowered(&built.entry.bin, it->mu->unit.names.v[0])
                                      : NULL;
            if (lowered && !(it->lowered = jitop__strdup(lowered)))
                status = jitop__fail(JITOP_ENOMEM, "out of memory");
            if (status == JITOP_OK && !it->unloaded)
                status = jitop__image_load(m, built.key, &built.entry.bin,
                                           unit_label(&it->mu->unit), instance_symbol(it),
                                           &it->image);
            if (status == JITOP_OK && it->unloaded) {
                it->bin = built.entry.bin;
                memset(&built.entry.bin, 0, sizeof built.entry.bin);
            }
            it->changed = p->changed = true;
        }
        jitop__built_free(&built);
        if (status != JITOP_OK)
            goto out;
    }
    if (m->linked && (status = prepare_links(m, p)) != JITOP_OK) {
        jitop__fail_prefix(status, "reloading module %s", m->name);
        goto out;
    }
    /* Host code: rebuilt only when one of its files changed (a .cu edit
     * reloads the kernels alone). */
    if ((status = jitop__host_prepare(m, &p->host, &p->host_deps)) != JITOP_OK) {
        jitop__fail_prefix(status, "reloading module %s", m->name);
        goto out;
    }
    *out = p;
    p = NULL;
out:
    for (size_t i = 0; extras && i < m->nunits; i++)
        jitop__strv_free(&extras[i]);
    free(extras);
    jitop__pending_free(p);
    return status;
}

static bool ident_start(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

static bool ident_char(char c)
{
    return ident_start(c) || (c >= '0' && c <= '9');
}

bool jitop__name_is_plain(const char *name)
{
    const char *p = name[0] == ':' && name[1] == ':' ? name + 2 : name;
    for (;;) {
        if (!ident_start(*p))
            return false;
        while (ident_char(*p))
            p++;
        if (*p == '\0')
            return true;
        if (p[0] != ':' || p[1] != ':')
            return false;
        p += 2;
    }
}

/* The start of the symbol of a function whose plain name is name, the
 * identifiers a::b::c (a leading "::" allowed), as the Itanium C++ ABI
 * encodes it: "_Z1c" for one identifier, "_ZN1a1b1cE" for a qualified one,
 * the parameter types following. A template's symbol has its arguments
 * ("I...E") where a plain function's name ends, so it never starts so.
 * False (buf unset) for anything else, and for std:: (abbreviated "St"). */
static bool symbol_prefix(const char *name, char *buf, size_t cap)
{
    size_t o = 0, parts = 0;
    const char *p = name[0] == ':' && name[1] == ':' ? name + 2 : name;
    if (strncmp(p, "std::", 5) == 0)
        return false;
    char body[512];
    for (;;) {
        const char *id = p;
        if (!ident_start(*p))
            return false;
        while (ident_char(*p))
            p++;
        int w = snprintf(body + o, sizeof body - o, "%zu%.*s", (size_t)(p - id), (int)(p - id),
                         id);
        if (w < 0 || (size_t)w >= sizeof body - o)
            return false;
        o += (size_t)w;
        parts++;
        if (*p == '\0')
            break;
        if (p[0] != ':' || p[1] != ':')
            return false;
        p += 2;
    }
    int w = parts == 1 ? snprintf(buf, cap, "_Z%s", body) : snprintf(buf, cap, "_ZN%sE", body);
    return w > 0 && (size_t)w < cap;
}

/* Whether symbol demangles to the function name(...): its parameter list
 * left out, "(anonymous namespace)::" too (NVRTC names that namespace per
 * file, and it is written without a name). */
static bool demangles_to(const char *symbol, const char *name)
{
    static const char anon[] = "(anonymous namespace)::";
    char *d = jitop__demangle(symbol);
    bool same = false;
    size_t n = d ? strlen(d) : 0;
    if (n > 0 && d[n - 1] == ')') {
        int depth = 0;
        while (n > 0) {
            char c = d[--n];
            depth += c == ')' ? 1 : c == '(' ? -1 : 0;
            if (depth == 0)
                break;
        }
        d[n] = '\0';
        for (char *a = strstr(d, anon); a; a = strstr(a, anon))
            memmove(a, a + sizeof anon - 1, strlen(a + sizeof anon - 1) + 1);
        same = strcmp(d, name[0] == ':' && name[1] == ':' ? name + 2 : name) == 0;
    }
    free(d);
    return same;
}

enum kernel_match { MATCH_SYMBOL, MATCH_PREFIX, MATCH_DEMANGLED };

static bool kernel_matches(const char *symbol, const char *name, const char *prefix,
                           enum kernel_match how)
{
    switch (how) {
    case MATCH_SYMBOL:
        return strcmp(symbol, name) == 0;
    case MATCH_PREFIX: {
        size_t n = strlen(prefix);
        return strncmp(symbol, prefix, n) == 0 && symbol[n] != '\0' && symbol[n] != 'I';
    }
    case MATCH_DEMANGLED:
        return strncmp(symbol, "_Z", 2) == 0 && demangles_to(symbol, name);
    }
    return false;
}

int jitop__find_kernel(const jitop_module *m, jitop__image *const *images, const char *name,
                       jitop__image **img, CUfunction *fn, const char **symbol)
{
    char prefix[600];
    bool plain = jitop__name_is_plain(name);
    bool cxx = plain && symbol_prefix(name, prefix, sizeof prefix);
    for (int how = MATCH_SYMBOL; how <= MATCH_DEMANGLED; how++) {
        if ((how == MATCH_PREFIX && !cxx) || (how == MATCH_DEMANGLED && !plain))
            continue;
        for (size_t i = 0; i < m->nunits; i++) {
            jitop__image *cand = images ? images[i] : m->units[i].image;
            int found = 0;
            for (size_t j = 0; cand && j < cand->nkernels; j++) {
                if (!kernel_matches(cand->kernels[j].name, name, prefix, how))
                    continue;
                if (found++ == 0) {
                    *img = cand;
                    *fn = cand->kernels[j].fn;
                    *symbol = cand->kernels[j].name;
                }
            }
            if (found)
                return found == 1 ? 1 : -1;
        }
    }
    return 0;
}

/* Where op's kernel lives once p is swapped in. *unchanged: op keeps its
 * binding (same image, or still stale, or an instance newer than p). */
static int commit_target(jitop_module *m, jitop__pending *p, jitop__image *const *images,
                         jitop_op *op, jitop__image **img, CUfunction *fn, const char **lowered,
                         bool *unchanged)
{
    jitop__binding *cur = atomic_load_explicit(&op->cur, memory_order_relaxed);
    int found = 0;
    *unchanged = false;
    *lowered = op->name;
    if (op->instance == SIZE_MAX) {
        /* Found by its name again, as jitop_op_get did: a C++ kernel whose
         * parameters changed has another symbol but the same name. Several
         * kernels of that name now (an overload added) is no kernel. */
        found = jitop__find_kernel(m, images, op->name, img, fn, lowered) == 1;
        if (!found)
            *lowered = op->name;
    } else {
        size_t idx = m->nunits + op->instance;
        if (idx >= p->n) {
            *unchanged = true; /* instantiated after prepare: built from newer files already */
            return 0;
        }
        jitop__modunit *mu = m->instances[op->instance];
        *img = images[idx];
        *lowered = p->items[idx].lowered ? p->items[idx].lowered : mu->lowered;
        const jitop__kernel *kk = jitop__image_find(*img, *lowered);
        if (kk) {
            *fn = kk->fn;
            found = 1;
        }
    }
    if ((found && *img == cur->image) || (!found && !cur->image))
        *unchanged = true;
    if (!found)
        *img = NULL;
    return found;
}

/* Under m->lock: JITOP_ESTALE when a commit since p's prepare changed m
 * (another reload won). */
static int commit_check(jitop_module *m, const jitop__pending *p)
{
    for (size_t i = 0; i < p->n; i++)
        if (strcmp(p->items[i].mu->key, p->items[i].old_key) != 0)
            return jitop__fail(JITOP_ESTALE,
                               "module %s changed since this rebuild was prepared (another "
                               "reload won): prepare again",
                               m->name);
    return JITOP_OK;
}

/* Under m->lock, for a p that changes code, before anything is published:
 * loads what prepare left unloaded and is needed now, sets images[i] to
 * unit i's image once p is in, and makes each op's new binding in fresh[j]
 * (the j-th op of m->ops; NULL: the op keeps its binding). On failure the
 * module is exactly as it was (fresh's bindings are the caller's to free). */
static int commit_stage(jitop_module *m, jitop__pending *p, jitop__image **images,
                        jitop__binding **fresh)
{
    int status = JITOP_OK;
    /* A source that was loaded after prepare rebuilt it lazily: load
     * its new binary now, so that its ops move to the new code. */
    for (size_t i = 0; i < p->n && status == JITOP_OK && !m->linked; i++) {
        pending_item *it = &p->items[i];
        if (it->changed && !it->image && !it->shared && it->mu->image)
            status = jitop__image_load(m, it->key, &it->bin, unit_label(&it->mu->unit),
                                       NULL, &it->image);
    }
    /* The same for a linked module's image. */
    if (status == JITOP_OK && m->linked && p->link_changed && !p->link_image &&
        m->units[0].image)
        status = jitop__image_load(m, p->link_key, &p->link_bin, "the relinked image", NULL,
                                   &p->link_image);
    if (status != JITOP_OK)
        return status;
    for (size_t i = 0; i < p->n; i++)
        images[i] = p->items[i].shared ? images[p->items[i].src]
                    : p->items[i].image ? p->items[i].image
                                        : p->items[i].mu->image;
    if (m->linked && p->link_image)
        images[0] = p->link_image; /* where a linked module's kernels are */
    /* Every new binding is made before anything is published, so that a
     * failure leaves the module exactly as it was. */
    size_t j = 0;
    for (jitop_op *op = m->ops; op && status == JITOP_OK; op = op->next, j++) {
        jitop__image *img = NULL;
        CUfunction fn = NULL;
        const char *lowered = NULL;
        bool unchanged = false;
        int found = commit_target(m, p, images, op, &img, &fn, &lowered, &unchanged);
        if (unchanged)
            continue;
        status = found ? jitop__binding_make(m, img, fn, lowered, &fresh[j])
                       : jitop__binding_stale(op->name, &fresh[j]);
    }
    return status;
}

/* Under m->lock: every unit takes p's key, deps and new code (a new image
 * replaces the old one, which is retired; a source still not loaded keeps
 * the new binary for later), and a linked module its relinked image. */
static void commit_units(jitop_module *m, jitop__pending *p)
{
    for (size_t i = 0; i < p->n; i++) {
        pending_item *it = &p->items[i];
        jitop__deps_free(&it->mu->deps);
        it->mu->deps = it->deps;
        memset(&it->deps, 0, sizeof it->deps);
        memcpy(it->mu->key, it->key, sizeof it->mu->key);
        if (m->linked && i < m->nunits)
            continue; /* a unit of a linked module: its code is in the link (below) */
        if (i < m->nunits) {
            jitop__strv_free(&it->mu->folded);
            jitop__strv_free(&it->mu->folded_lowered);
            jitop__strv_free(&it->mu->asked);
            it->mu->folded = it->folded;
            it->mu->folded_lowered = it->folded_lowered;
            it->mu->asked = it->asked;
            memset(&it->folded, 0, sizeof it->folded);
            memset(&it->folded_lowered, 0, sizeof it->folded_lowered);
            memset(&it->asked, 0, sizeof it->asked);
        }
        if (it->shared) {
            /* Its code is its source's new binary (committed above: sources
             * come first); an image of its own, if it had one, retires. */
            if (!it->was_shared && it->mu->image)
                it->mu->image->retired = true;
            it->mu->image = m->units[it->src].image;
            it->mu->shared = true;
            if (it->lowered) {
                free(it->mu->lowered);
                it->mu->lowered = it->lowered;
                it->lowered = NULL;
            }
            continue;
        }
        if (it->changed && !it->image) {
            /* A source still not loaded: keep the new binary for later. */
            jitop__binary_free(&it->mu->unloaded);
            it->mu->unloaded = it->bin;
            memset(&it->bin, 0, sizeof it->bin);
            continue;
        }
        if (!it->image)
            continue;
        /* Not a source's image an instance shared (its source retires
         * that), nor one a source loaded only now. */
        if (it->mu->image && !it->was_shared)
            it->mu->image->retired = true;
        /* A source loaded at prepare for the instances folded into it: its
         * binary kept for a later load is not needed any more. */
        jitop__binary_free(&it->mu->unloaded);
        it->mu->shared = false;
        it->mu->image = it->image;
        jitop__module_add_image(m, it->image);
        it->image = NULL;
        if (it->lowered) {
            free(it->mu->lowered);
            it->mu->lowered = it->lowered;
            it->lowered = NULL;
        }
    }
    if (m->linked && p->link_changed) {
        memcpy(m->link_key, p->link_key, sizeof m->link_key);
        if (p->link_image) {
            if (m->units[0].image)
                m->units[0].image->retired = true;
            m->units[0].image = p->link_image;
            jitop__module_add_image(m, p->link_image);
            p->link_image = NULL;
        } else {
            /* Still not loaded: keep the new binary for later. */
            jitop__binary_free(&m->link_unloaded);
            m->link_unloaded = p->link_bin;
            memset(&p->link_bin, 0, sizeof p->link_bin);
        }
    }
}

/* Under m->lock: publishes the bindings commit_stage made, op by op, and
 * bumps the generation. fresh's entries are taken (set to NULL). */
static void commit_publish(jitop_module *m, jitop__binding **fresh)
{
    uint64_t gen = atomic_load_explicit(&m->generation, memory_order_relaxed) + 1;
    size_t j = 0;
    for (jitop_op *op = m->ops; op; op = op->next, j++) {
        if (!fresh[j])
            continue;
        fresh[j]->older = atomic_load_explicit(&op->cur, memory_order_relaxed);
        /* seq_cst: pairs with the launch's in-flight increment and
         * re-check (see load.h), so the reaper never unloads an image
         * a launch is about to use. */
        atomic_store_explicit(&op->cur, fresh[j], memory_order_seq_cst);
        atomic_store_explicit(&op->changed_gen, gen, memory_order_relaxed);
        fresh[j] = NULL;
    }
    atomic_store_explicit(&m->generation, gen, memory_order_release);
    jitop__log(m->ctx, "module %s: generation %llu swapped in", m->name,
               (unsigned long long)gen);
}

int jitop__module_commit(jitop_module *m, jitop__pending *p)
{
    int status = JITOP_OK;
    jitop__image **images = NULL;
    jitop__binding **fresh = NULL;
    size_t nops = 0;
    if (!m || !p || p->m != m) {
        jitop__pending_free(p);
        return jitop__fail(JITOP_EINVAL,
                           "jitop__module_commit: no module, or a rebuild of another module");
    }
    pthread_mutex_lock(&m->lock);
    status = commit_check(m, p);
    if (status != JITOP_OK)
        goto out;
    if (p->changed) {
        for (jitop_op *op = m->ops; op; op = op->next)
            nops++;
        images = calloc(p->n ? p->n : 1, sizeof *images);
        fresh = calloc(nops ? nops : 1, sizeof *fresh);
        if (!images || !fresh) {
            status = jitop__fail(JITOP_ENOMEM, "out of memory");
            goto out;
        }
        status = commit_stage(m, p, images, fresh);
        if (status != JITOP_OK)
            goto out;
    }
    /* The host object first: a failure there leaves the kernels as they
     * were too. */
    bool host_swapped = p->host != NULL;
    if (host_swapped) {
        status = jitop__host_commit(m, p->host, &p->host_deps);
        p->host = NULL;
        if (status != JITOP_OK)
            goto out;
    }
    commit_units(m, p);
    if (p->changed)
        commit_publish(m, fresh);
    else if (host_swapped)
        atomic_fetch_add_explicit(&m->generation, 1, memory_order_acq_rel);
out:
    pthread_mutex_unlock(&m->lock);
    for (size_t j = 0; fresh && j < nops; j++)
        jitop__binding_free_chain(fresh[j]);
    free(fresh);
    free(images);
    jitop__pending_free(p);
    return status;
}

int jitop__module_reap(jitop_module *m, bool wait, size_t *left)
{
    int status = JITOP_OK;
    size_t claimed = 0, still = 0;
    if (!m)
        return jitop__fail(JITOP_EINVAL, "jitop__module_reap: m is NULL");
    pthread_mutex_lock(&m->lock);
    uint64_t ticket = ++m->reaps;
    /* Only images idle BEFORE the sync may go: a launch that held an image
     * then may queue its kernel while the sync runs and let go of the image
     * after it, and that kernel is not covered by the sync. A retired image
     * idle before the sync stays idle: no new launch can take hold of it
     * (the binding no longer points to it; a launch that loaded the old
     * binding sees the change at its re-check and never launches). Each
     * reap claims the images it saw idle, so that a reap whose sync started
     * earlier never unloads an image that went idle after its sync began. */
    for (jitop__image *img = m->images; wait && img; img = img->next) {
        if (img->retired && img->mod && !img->reap_claim &&
            atomic_load_explicit(&img->inflight, memory_order_seq_cst) == 0) {
            img->reap_claim = ticket;
            claimed++;
        }
    }
    pthread_mutex_unlock(&m->lock);
    if (claimed > 0) {
        /* Kernels already queued may still run from these images: wait for
         * every stream of the context before unloading. Without m->lock:
         * images are freed only with the module (jitop_ctx_destroy joins
         * the watch thread before it frees modules, and no other thread may
         * use a module it is destroying), and a claimed image is unloaded
         * only by its claimant, so it stays loaded meanwhile. */
        status = jitop__driver_make_current(m->drv);
        if (status == JITOP_OK)
            status = jitop__cu_check(m->drv->api->cuCtxSynchronize(),
                                     "cuCtxSynchronize before unloading an old image", m->name);
    }
    pthread_mutex_lock(&m->lock);
    for (jitop__image *img = m->images; claimed > 0 && img; img = img->next) {
        if (img->reap_claim != ticket)
            continue;
        if (status != JITOP_OK) {
            img->reap_claim = 0; /* a later reap tries again */
            continue;
        }
        /* The context is current: the sync above made it so on this thread. */
        status = jitop__cu_check(m->drv->api->cuModuleUnload(img->mod), "cuModuleUnload",
                                 m->name);
        img->mod = NULL;
        /* A listed image's names and descriptions are still in the
         * application's hands (jitop_module_ops): they go with the module. */
        if (!img->listed) {
            jitop__image_free_kernels(img);
        }
    }
    for (jitop__image *img = m->images; img; img = img->next)
        if (img->retired && img->mod)
            still++;
    pthread_mutex_unlock(&m->lock);
    size_t host_left = 0;
    jitop__host_reap(m, &host_left);
    if (left)
        *left = still + host_left;
    return status;
}

int jitop_module_reload(jitop_module *m)
{
    jitop__pending *p = NULL;
    if (!m)
        return jitop__fail(JITOP_EINVAL, "jitop_module_reload: m is NULL");
    int status = jitop__module_prepare(m, &p);
    if (status == JITOP_OK)
        status = jitop__module_commit(m, p);
    if (status == JITOP_OK)
        status = jitop__module_reap(m, true, NULL);
    return status;
}

static int push_unique(jitop__strv *paths, const char *path)
{
    for (size_t i = 0; i < paths->n; i++)
        if (strcmp(paths->v[i], path) == 0)
            return JITOP_OK;
    return jitop__strv_push(paths, path);
}

int jitop__module_files(jitop_module *m, jitop__strv *paths)
{
    int status = JITOP_OK;
    if (!m || !paths)
        return jitop__fail(JITOP_EINVAL, "jitop__module_files: NULL argument");
    pthread_mutex_lock(&m->lock);
    /* Sources first (deps[0] of a file unit), then every header. */
    for (size_t i = 0; status == JITOP_OK && i < m->nunits; i++)
        if (m->units[i].unit.source_path)
            status = push_unique(paths, m->units[i].unit.source_path);
    for (size_t i = 0; status == JITOP_OK && i < m->nunits + m->ninstances; i++) {
        const jitop__modunit *mu = i < m->nunits ? &m->units[i] : m->instances[i - m->nunits];
        for (size_t j = 0; status == JITOP_OK && j < mu->deps.n; j++)
            status = push_unique(paths, mu->deps.v[j].path);
    }
    for (size_t j = 0; status == JITOP_OK && m->host && j < m->host->deps.n; j++)
        status = push_unique(paths, m->host->deps.v[j].path);
    pthread_mutex_unlock(&m->lock);
    return status;
}

/* ------------------------------------------------------------ teardown */

void jitop__loader_ctx_destroy(jitop_ctx *ctx)
{
    jitop_module *m = ctx->modules;
    ctx->modules = NULL;
    const jitop__driver *drv = jitop__driver_of(ctx);
    if (m && drv) {
        /* Queued kernels may still run from these images. */
        int status = jitop__driver_make_current(drv);
        if (status == JITOP_OK)
            status = jitop__cu_check(drv->api->cuCtxSynchronize(),
                                     "cuCtxSynchronize at jitop_ctx_destroy", NULL);
        if (status != JITOP_OK)
            jitop__log(ctx, "%s", jitop_errmsg(ctx));
    }
    while (m) {
        jitop_module *next = m->next;
        module_free(m);
        m = next;
    }
}
