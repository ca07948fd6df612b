/* A module's host sources to one shared object through the cache: every
 * object (stat fast path, else built in parallel by jitop or by ninja),
 * then one link whose key is the objects' keys. */
#include "host/host.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

void jitop__host_lib_free(jitop__host_lib *l)
{
    if (!l)
        return;
    jitop__deps_free(&l->deps);
    jitop__binary_free(&l->bin);
    free(l->builder);
    memset(l, 0, sizeof *l);
}

/* The key of the link: the linker (its identity is the hash in its
 * objects' compiler record), its extra words, the link flags and every
 * object's key in order. */
static void link_key(const jitop__host_cc *ld, XXH128_hash_t ld_hash, const jitop__strv *ldflags,
                     const jitop__host_obj *objs, size_t n, char key[33])
{
    XXH3_state_t st;
    XXH3_INITSTATE(&st);
    XXH3_128bits_reset(&st);
    static const char tag[] = "jitop host link key";
    XXH3_128bits_update(&st, tag, sizeof tag);
    uint64_t v = JITOP__FORMAT_VERSION;
    XXH3_128bits_update(&st, &v, sizeof v);
    XXH128_canonical_t c;
    XXH128_canonicalFromHash(&c, ld_hash);
    XXH3_128bits_update(&st, c.digest, sizeof c.digest);
    const jitop__strv *lists[] = {&ld->argv0, ldflags};
    for (size_t l = 0; l < 2; l++) {
        v = lists[l]->n;
        XXH3_128bits_update(&st, &v, sizeof v);
        for (size_t i = l == 0 ? 1 : 0; i < lists[l]->n; i++)
            XXH3_128bits_update(&st, lists[l]->v[i], strlen(lists[l]->v[i]) + 1);
    }
    v = n;
    XXH3_128bits_update(&st, &v, sizeof v);
    for (size_t i = 0; i < n; i++)
        XXH3_128bits_update(&st, objs[i].key, 32);
    jitop__hash_hex(XXH3_128bits_digest(&st), key);
}

/* Every file of every object (not the compilers), once each: what the
 * module watches and checks. */
static int union_deps(const jitop__host_obj *objs, size_t n, jitop__deps *out)
{
    size_t total = 0;
    for (size_t i = 0; i < n; i++)
        total += objs[i].deps.n;
    memset(out, 0, sizeof *out);
    if (!(out->v = calloc(total ? total : 1, sizeof *out->v)))
        return jitop__fail(JITOP_ENOMEM, "out of memory");
    for (size_t i = 0; i < n; i++) {
        for (size_t j = 1; j < objs[i].deps.n; j++) {
            const jitop__dep *d = &objs[i].deps.v[j];
            if (jitop__deps_find(out, d->path))
                continue;
            out->v[out->n] = *d;
            if (!(out->v[out->n].path = jitop__strdup(d->path)))
                return jitop__fail(JITOP_ENOMEM, "out of memory");
            out->n++;
        }
    }
    /* And every folder where a header was looked for: a file created there
     * (shadowing a header found further on) makes the module stale too. */
    int status = JITOP_OK;
    for (size_t i = 0; status == JITOP_OK && i < n; i++)
        status = jitop__host_dirs_merge(out, &objs[i].deps);
    return status;
}

/* ------------------------------------------------- jitop's own builder */

struct pool {
    jitop_ctx *ctx;
    jitop__host_unit *units;
    jitop__host_cc *ccs; /* per unit: the C or C++ compiler (shared: identify is memoized) */
    jitop__host_obj *objs;
    int *status;
    char **msg;
    size_t n;
    atomic_size_t next;
};

static void *pool_worker(void *arg)
{
    struct pool *p = arg;
    for (;;) {
        size_t i = atomic_fetch_add(&p->next, 1);
        if (i >= p->n)
            break;
        double t = jitop__now_ms();
        p->status[i] = jitop__host_obj_build(p->ctx, &p->units[i], &p->ccs[i], true, &p->objs[i]);
        if (p->status[i] != JITOP_OK)
            p->msg[i] = jitop__strdup(jitop_errmsg(NULL)); /* the message is per thread */
        else
            jitop__log(p->ctx, "host: %s: %s%s%s, %.3f ms", p->units[i].path,
                       p->objs[i].cached ? "cache hit" : "compiled",
                       p->objs[i].why ? ": " : "", p->objs[i].why ? p->objs[i].why : "",
                       jitop__now_ms() - t);
    }
    return NULL;
}

/* Builds every object, in parallel up to the number of online CPUs. */
static int build_parallel(jitop_ctx *ctx, jitop__host_unit *units, size_t n, jitop__host_cc *ccs,
                          jitop__host_obj *objs)
{
    struct pool p = {.ctx = ctx, .units = units, .ccs = ccs, .objs = objs, .n = n};
    atomic_init(&p.next, 0);
    p.status = calloc(n, sizeof *p.status);
    p.msg = calloc(n, sizeof *p.msg);
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    size_t nthreads = cpus > 1 ? (size_t)cpus : 1;
    if (nthreads > n)
        nthreads = n;
    pthread_t *threads = calloc(nthreads, sizeof *threads);
    int status = JITOP_OK;
    if (!p.status || !p.msg || !threads) {
        status = jitop__fail(JITOP_ENOMEM, "out of memory");
        goto out;
    }
    /* The calling thread is one of the workers. */
    size_t started = 0;
    for (size_t t = 1; t < nthreads; t++) {
        if (pthread_create(&threads[t], NULL, pool_worker, &p) != 0)
            break; /* fewer workers: the others take the rest */
        started = t;
    }
    pool_worker(&p);
    for (size_t t = 1; t <= started; t++)
        pthread_join(threads[t], NULL);
    for (size_t i = 0; i < n; i++) {
        if (p.status[i] != JITOP_OK) {
            status = jitop__fail(p.status[i], "%s", p.msg[i] ? p.msg[i] : "out of memory");
            break;
        }
    }
out:
    for (size_t i = 0; p.msg && i < n; i++)
        free(p.msg[i]);
    free(p.msg);
    free(p.status);
    free(threads);
    return status;
}

/* --------------------------------------------------------------- link */

static int write_file(const char *path, const unsigned char *data, size_t n)
{
    FILE *f = fopen(path, "wbx");
    if (!f)
        return jitop__fail(JITOP_EIO, "cannot create %s: %s", path, strerror(errno));
    size_t w = fwrite(data, 1, n, f);
    int rc = fclose(f);
    if (w != n || rc != 0)
        return jitop__fail(JITOP_EIO, "cannot write %s: %s", path, strerror(errno));
    return JITOP_OK;
}

static int link_objects(jitop_ctx *ctx, const char *label, const jitop__host_cc *ld,
                        const jitop__strv *ldflags, const jitop__host_obj *objs, size_t n,
                        jitop__binary *so, char **log)
{
    char tmpl[PATH_MAX];
    const char *tmp = getenv("TMPDIR");
    jitop__strv argv = {0}, made = {0};
    int status = JITOP_OK, code = 0;
    *log = NULL;
    (void)ctx;
    if ((size_t)snprintf(tmpl, sizeof tmpl, "%s/jitop-link-XXXXXX", tmp && *tmp ? tmp : "/tmp") >=
        sizeof tmpl)
        return jitop__fail(JITOP_EINVAL, "TMPDIR is too long");
    if (!mkdtemp(tmpl))
        return jitop__fail(JITOP_EIO, "cannot make a temporary folder %s: %s", tmpl,
                           strerror(errno));
    for (size_t i = 0; status == JITOP_OK && i < ld->argv0.n; i++)
        status = jitop__strv_push(&argv, ld->argv0.v[i]);
    if (status == JITOP_OK)
        status = jitop__strv_push(&argv, "-shared");
    for (size_t i = 0; status == JITOP_OK && i < n; i++) {
        status = jitop__strv_pushf(&made, "%s/%zu.o", tmpl, i);
        if (status == JITOP_OK)
            status = write_file(made.v[made.n - 1], objs[i].bin.data, objs[i].bin.size);
        if (status == JITOP_OK)
            status = jitop__strv_push(&argv, made.v[made.n - 1]);
    }
    for (size_t i = 0; status == JITOP_OK && i < ldflags->n; i++)
        status = jitop__strv_push(&argv, ldflags->v[i]);
    if (status == JITOP_OK)
        status = jitop__strv_pushf(&made, "%s/lib.so", tmpl);
    if (status == JITOP_OK)
        status = jitop__strv_push(&argv, "-o");
    if (status == JITOP_OK)
        status = jitop__strv_push(&argv, made.v[made.n - 1]);
    if (status == JITOP_OK)
        status = jitop__host_run_strv(&argv, log, &code);
    if (status == JITOP_OK && code != 0) {
        char *cmd = jitop__strv_join(&argv, " ");
        status = jitop__fail(JITOP_ECOMPILE, "host link of %s failed (%s exit %d):\n%s", label,
                             cmd ? cmd : ld->argv0.v[0], code, *log);
        free(cmd);
    }
    if (status == JITOP_OK) {
        char *bytes = NULL;
        status = jitop__read_file(made.v[made.n - 1], &bytes, &so->size);
        so->data = (unsigned char *)bytes;
    }
    for (size_t i = 0; i < made.n; i++)
        unlink(made.v[i]);
    rmdir(tmpl);
    jitop__strv_free(&made);
    jitop__strv_free(&argv);
    return status;
}

/* ------------------------------------------------------------ library */

int jitop__host_lib_build(jitop_ctx *ctx, const char *label, const jitop__strv *sources,
                          const jitop__strv *cflags, const jitop__strv *ldflags,
                          jitop__host_lib *out)
{
    size_t n = sources->n + 1; /* jitop's runtime object last */
    jitop__host_unit *units = calloc(n, sizeof *units);
    jitop__host_obj *objs = calloc(n, sizeof *objs);
    jitop__host_cc *ccs = calloc(n, sizeof *ccs);
    jitop__host_cc cc = {0}, cxx = {0};
    char *rt = NULL;
    int status = JITOP_OK, lockfd = -1;
    bool any_cxx = false;
    memset(out, 0, sizeof *out);
    if (!units || !objs || !ccs) {
        status = jitop__fail(JITOP_ENOMEM, "out of memory");
        goto out;
    }
    const char *include_dir = jitop__host_include_dir();
    if (!(rt = jitop__sprintf("%s/jitop_host.h", include_dir))) {
        status = jitop__fail(JITOP_ENOMEM, "out of memory");
        goto out;
    }
    for (size_t i = 0; status == JITOP_OK && i < n; i++) {
        status = jitop__host_unit_init(&units[i], i < sources->n ? sources->v[i] : rt,
                                       i == sources->n, cflags, include_dir);
        any_cxx = any_cxx || units[i].cxx;
    }
    if (status == JITOP_OK)
        status = jitop__host_cc_find(false, &cc);
    if (status == JITOP_OK && any_cxx)
        status = jitop__host_cc_find(true, &cxx);
    if (status != JITOP_OK)
        goto out;
    /* Each unit's copy of its compiler: the builders may run in parallel. */
    for (size_t i = 0; status == JITOP_OK && i < n; i++) {
        const jitop__host_cc *from = units[i].cxx ? &cxx : &cc;
        ccs[i] = *from;
        ccs[i].var = jitop__strdup(from->var);
        ccs[i].asked = jitop__strdup(from->asked);
        ccs[i].rec.path = jitop__strdup(from->rec.path);
        memset(&ccs[i].argv0, 0, sizeof ccs[i].argv0);
        for (size_t j = 0; status == JITOP_OK && j < from->argv0.n; j++)
            status = jitop__strv_push(&ccs[i].argv0, from->argv0.v[j]);
        if (!ccs[i].var || !ccs[i].asked || !ccs[i].rec.path)
            status = jitop__fail(JITOP_ENOMEM, "out of memory");
    }
    if (status != JITOP_OK)
        goto out;
    /* The linker: the C++ driver when any source is C++ (its runtime). */
    size_t ld_unit = n - 1;
    for (size_t i = 0; any_cxx && i < n; i++)
        if (units[i].cxx) {
            ld_unit = i;
            break;
        }
    const jitop__host_cc *ld = any_cxx ? &cxx : &cc;

    /* Fastest path: the module's manifest vouches for every file, and the
     * link's entry is there (read and checksummed). */
    char mid[33];
    bool hit = false;
    const jitop__host_cc *used[2] = {&cc, &cxx};
    jitop__host_lib_id(units, ccs, n, ld, ldflags, mid);
    status = jitop__host_lib_fresh(ctx, mid, used, any_cxx ? 2 : 1, out, &hit);
    if (status != JITOP_OK || hit)
        goto out;

    /* Fast path: every object's manifest vouches, and the link is cached. */
    bool all = true;
    for (size_t i = 0; status == JITOP_OK && all && i < n; i++)
        status = jitop__host_obj_fresh(ctx, &units[i], &ccs[i], &objs[i], &all);
    if (status != JITOP_OK)
        goto out;
    if (all) {
        jitop__entry e;
        bool found = false;
        link_key(ld, objs[ld_unit].deps.v[0].hash, ldflags, objs, n, out->key);
        status = jitop__cache_get(ctx->cache, out->key, &e, &found);
        if (status == JITOP_OK && found) {
            out->cached = true;
            out->bin = e.bin;
            memset(&e.bin, 0, sizeof e.bin);
            jitop__entry_free(&e);
            status = union_deps(objs, n, &out->deps);
            if (status == JITOP_OK && !(out->builder = jitop__strdup("cache")))
                status = jitop__fail(JITOP_ENOMEM, "out of memory");
            if (status == JITOP_OK)
                jitop__host_lib_remember(ctx, mid, objs, n, out->key);
            goto out;
        }
    }
    for (size_t i = 0; i < n; i++)
        jitop__host_obj_free(&objs[i]);

    /* Objects: ninja when there is one, else jitop's own builder. */
    const char *ninja = jitop__host_ninja();
    double t = jitop__now_ms();
    jitop__binary ninja_so;
    memset(&ninja_so, 0, sizeof ninja_so);
    if (ninja)
        status = jitop__host_ninja_build(ctx, ninja, label, units, n, ccs, objs, ld, ldflags,
                                         &ninja_so);
    else
        status = build_parallel(ctx, units, n, ccs, objs);
    if (status != JITOP_OK)
        goto out;
    if (!(out->builder = jitop__strdup(ninja ? "ninja" : "jitop"))) {
        status = jitop__fail(JITOP_ENOMEM, "out of memory");
        goto out;
    }
    jitop__log(ctx, "module %s: host objects by %s%s%s, %.3f ms", label, out->builder,
               ninja ? " " : " (", ninja ? ninja : "no ninja: JITOP_NINJA=0 or none on PATH)",
               jitop__now_ms() - t);

    /* The link, once across processes (its key's lock). */
    link_key(ld, objs[ld_unit].deps.v[0].hash, ldflags, objs, n, out->key);
    status = jitop__cache_lock(ctx->cache, out->key, &lockfd);
    jitop__entry e;
    memset(&e, 0, sizeof e);
    bool found = false;
    if (status == JITOP_OK)
        status = jitop__cache_get(ctx->cache, out->key, &e, &found);
    if (status == JITOP_OK && found) {
        out->cached = true;
        out->bin = e.bin;
        memset(&e.bin, 0, sizeof e.bin);
    } else if (status == JITOP_OK) {
        char *log = NULL;
        t = jitop__now_ms();
        /* Ninja's link edge linked the same objects with the same
         * command: its output is this link's. */
        if (ninja_so.data) {
            e.bin = ninja_so;
            memset(&ninja_so, 0, sizeof ninja_so);
        } else {
            status = link_objects(ctx, label, ld, ldflags, objs, n, &e.bin, &log);
        }
        if (status == JITOP_OK &&
            (!(e.arch = jitop__strdup("host")) ||
             !(e.nvrtc_version = jitop__sprintf("host linker %s", ld->rec.path)) ||
             (log && *log && !(e.bin.log = jitop__strdup(log)))))
            status = jitop__fail(JITOP_ENOMEM, "out of memory");
        for (size_t i = 0; status == JITOP_OK && i < ldflags->n; i++)
            status = jitop__strv_push(&e.options, ldflags->v[i]);
        for (size_t i = 0; status == JITOP_OK && i < sources->n; i++)
            status = jitop__strv_push(&e.sources, sources->v[i]);
        if (status == JITOP_OK) {
            e.created = (int64_t)time(NULL);
            status = jitop__cache_put(ctx->cache, out->key, &e);
        }
        if (status == JITOP_OK) {
            out->bin = e.bin;
            memset(&e.bin, 0, sizeof e.bin);
            jitop__log(ctx, "module %s: host link %s, %.3f ms", label, out->key,
                       jitop__now_ms() - t);
        }
        free(log);
    }
    jitop__entry_free(&e);
    jitop__binary_free(&ninja_so);
    jitop__cache_unlock(lockfd);
    if (status == JITOP_OK)
        status = union_deps(objs, n, &out->deps);
    if (status == JITOP_OK)
        jitop__host_lib_remember(ctx, mid, objs, n, out->key);
out:
    for (size_t i = 0; i < n; i++) {
        if (units)
            jitop__host_unit_free(&units[i]);
        if (objs)
            jitop__host_obj_free(&objs[i]);
        if (ccs)
            jitop__host_cc_free(&ccs[i]);
    }
    free(units);
    free(objs);
    free(ccs);
    free(rt);
    jitop__host_cc_free(&cc);
    jitop__host_cc_free(&cxx);
    if (status != JITOP_OK)
        jitop__host_lib_free(out);
    return status;
}
