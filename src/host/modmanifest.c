/* The module's manifest: one record of every file the module's host
 * objects read (the compilers' files included) and the key of the linked
 * .so they gave. A warm load then reads one manifest and stats each file
 * once, instead of one manifest per object (the runtime object's included)
 * and a stat of every object entry: on the development machine that is
 * about a third of the cache hit's time. It vouches exactly as the
 * objects' manifests do (stat data, racy-clean records never), and the
 * entry it names is read and checksummed before anything is loaded; when
 * it does not vouch, the per-object path decides as before. */
#include "host/host.h"

#include <stdlib.h>
#include <string.h>

static void h_str(XXH3_state_t *st, const char *s)
{
    uint64_t n = s ? strlen(s) : 0;
    XXH3_128bits_update(st, &n, sizeof n);
    if (n)
        XXH3_128bits_update(st, s, n);
}

void jitop__host_lib_id(const jitop__host_unit *units, const jitop__host_cc *ccs, size_t n,
                        const jitop__host_cc *ld, const jitop__strv *ldflags, char id[33])
{
    XXH3_state_t st;
    XXH3_INITSTATE(&st);
    XXH3_128bits_reset(&st);
    /* "with folders": a manifest written before the folders were recorded
     * in it would vouch for a build a new header now shadows. */
    h_str(&st, "jitop host module manifest id, with folders");
    uint64_t v = JITOP__FORMAT_VERSION;
    XXH3_128bits_update(&st, &v, sizeof v);
    /* Each unit's id holds its path, kind, flags and its compiler as asked
     * for ($CC / $CXX); the linker's variable and words, and the link
     * flags, complete what the link key holds besides file contents. */
    v = n;
    XXH3_128bits_update(&st, &v, sizeof v);
    for (size_t i = 0; i < n; i++) {
        char uid[33];
        jitop__host_obj_id(&units[i], &ccs[i], uid);
        XXH3_128bits_update(&st, uid, 32);
    }
    h_str(&st, ld->var);
    h_str(&st, ld->asked);
    v = ld->argv0.n + ldflags->n;
    XXH3_128bits_update(&st, &v, sizeof v);
    for (size_t i = 1; i < ld->argv0.n; i++)
        h_str(&st, ld->argv0.v[i]);
    for (size_t i = 0; i < ldflags->n; i++)
        h_str(&st, ldflags->v[i]);
    jitop__hash_hex(XXH3_128bits_digest(&st), id);
}

static bool is_compiler(const char *path, const jitop__host_cc *const *ccs, size_t ncc)
{
    for (size_t i = 0; i < ncc; i++)
        if (strcmp(path, ccs[i]->rec.path) == 0)
            return true;
    return false;
}

int jitop__host_lib_fresh(jitop_ctx *ctx, const char id[33], const jitop__host_cc *const *ccs,
                          size_t ncc, jitop__host_lib *out, bool *found)
{
    jitop__deps d;
    jitop__entry e;
    bool have = false, fresh = false;
    *found = false;
    memset(out, 0, sizeof *out);
    memset(&d, 0, sizeof d);
    int status = jitop__manifest_get(ctx->cache, id, &d, out->key, &have);
    if (status != JITOP_OK || !have)
        goto out;
    /* The compilers found now are the ones recorded (another PATH may find
     * others: their records would be missing). */
    for (size_t i = 0; i < ncc; i++)
        if (!jitop__deps_find(&d, ccs[i]->rec.path))
            goto out;
    status = jitop__deps_fresh(&d, &fresh, NULL);
    if (status != JITOP_OK || !fresh)
        goto out;
    status = jitop__cache_get(ctx->cache, out->key, &e, found);
    if (status != JITOP_OK || !*found)
        goto out;
    out->bin = e.bin;
    memset(&e.bin, 0, sizeof e.bin);
    jitop__entry_free(&e);
    out->cached = true;
    if (!(out->builder = jitop__strdup("cache"))) {
        status = jitop__fail(JITOP_ENOMEM, "out of memory");
        goto out;
    }
    /* What the module watches: every file but the compilers, in place. */
    size_t k = 0;
    for (size_t i = 0; i < d.n; i++) {
        if (is_compiler(d.v[i].path, ccs, ncc))
            free(d.v[i].path);
        else
            d.v[k++] = d.v[i];
    }
    d.n = k;
    out->deps = d;
    memset(&d, 0, sizeof d);
out:
    jitop__deps_free(&d);
    if (status != JITOP_OK || !*found) {
        /* jitop__host_lib_free's work, not called: library.c calls this
         * file, not the other way round. */
        *found = false;
        jitop__deps_free(&out->deps);
        jitop__binary_free(&out->bin);
        free(out->builder);
        memset(out, 0, sizeof *out);
    }
    return status;
}

void jitop__host_lib_remember(jitop_ctx *ctx, const char id[33], const jitop__host_obj *objs,
                              size_t n, const char key[33])
{
    jitop__deps all;
    size_t total = 0;
    memset(&all, 0, sizeof all);
    for (size_t i = 0; i < n; i++)
        total += objs[i].deps.n;
    if (!(all.v = calloc(total ? total : 1, sizeof *all.v)))
        return; /* costs only speed */
    bool ok = true;
    for (size_t i = 0; ok && i < n; i++) {
        for (size_t j = 0; ok && j < objs[i].deps.n; j++) {
            const jitop__dep *d = &objs[i].deps.v[j];
            if (jitop__deps_find(&all, d->path))
                continue;
            all.v[all.n] = *d;
            ok = (all.v[all.n].path = jitop__strdup(d->path)) != NULL;
            all.n += ok;
        }
    }
    /* The folders: a header created in one would shadow the one recorded,
     * and jitop__deps_fresh refuses then (one stat per folder), leaving the
     * decision to the objects' manifests, which list the headers again. */
    for (size_t i = 0; ok && i < n; i++)
        ok = jitop__host_dirs_merge(&all, &objs[i].deps) == JITOP_OK;
    if (ok)
        jitop__manifest_put(ctx->cache, id, &all, key); /* costs only speed if it fails */
    jitop__clear_error();
    jitop__deps_free(&all);
}
