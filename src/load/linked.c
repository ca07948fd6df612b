/* Linked modules (-rdc): the image linked from every unit of a module, and
 * the image of each template instance, which is its unit linked with the
 * module's other units. See jitop_module.linked for where they live. */
#include "load/driver.h"
#include "load/load.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Reads in->unit's binary by in->key into *bin; if its entry went
 * (evicted, cleaned), builds the unit again from its files, which may give
 * another key (into key). in then points to them. */
static int fetch_input(jitop_ctx *ctx, jitop__link_input *in, char key[33], jitop__binary *bin)
{
    jitop__entry e;
    bool found = false;
    int status = jitop__cache_get(ctx->cache, in->key, &e, &found);
    if (status != JITOP_OK)
        return status;
    if (found) {
        *bin = e.bin;
        memset(&e.bin, 0, sizeof e.bin);
        jitop__entry_free(&e);
        memcpy(key, in->key, 33);
    } else {
        jitop__built built;
        status = jitop__build_unit(ctx, in->unit, &built);
        if (status != JITOP_OK)
            return status;
        jitop__log(ctx, "%s: entry %s was gone when a link needed it: %s %s",
                   in->unit->source_name, in->key, built.cached ? "found" : "built", built.key);
        memcpy(key, built.key, 33);
        *bin = built.entry.bin;
        memset(&built.entry.bin, 0, sizeof built.entry.bin);
        jitop__built_free(&built);
    }
    in->key = key;
    in->bin = bin;
    return JITOP_OK;
}

int jitop__link_units(jitop_module *m, jitop__link_input *in, size_t n, bool defer,
                      jitop__built *out)
{
    jitop__binary *bins = NULL;
    char (*keys)[33] = NULL;
    int status = jitop__build_link(m->ctx, in, n, defer, out);
    if (status != JITOP_OK || !out->needs_inputs)
        return status;
    /* A miss: read what is not in hand, then link. */
    bins = calloc(n, sizeof *bins);
    keys = calloc(n, sizeof *keys);
    if (!bins || !keys)
        status = jitop__fail(JITOP_ENOMEM, "out of memory");
    for (size_t i = 0; status == JITOP_OK && i < n; i++)
        if (!in[i].bin || !in[i].bin->data)
            status = fetch_input(m->ctx, &in[i], keys[i], &bins[i]);
    if (status == JITOP_OK)
        status = jitop__build_link(m->ctx, in, n, false, out);
    if (status == JITOP_OK && out->needs_inputs) /* cannot happen: every input is in hand */
        status = jitop__fail(JITOP_EIO, "module %s: a unit's binary could not be read", m->name);
    for (size_t i = 0; bins && i < n; i++)
        jitop__binary_free(&bins[i]);
    free(bins);
    free(keys);
    return status;
}

static void link_label(const jitop_module *m, char *buf, size_t cap)
{
    const jitop__unit *u = &m->units[0].unit;
    snprintf(buf, cap, "the image linked from %s%s",
             u->source_path ? u->source_path : "inline source",
             m->nunits > 1 ? " and the other units" : "");
}

int jitop__link_module(jitop_module *m, bool lazy)
{
    jitop__built built;
    jitop__link_input *in = calloc(m->nunits, sizeof *in);
    memset(&built, 0, sizeof built);
    if (!in)
        return jitop__fail(JITOP_ENOMEM, "out of memory");
    for (size_t i = 0; i < m->nunits; i++)
        in[i] = (jitop__link_input){&m->units[i].unit, m->units[i].key, &m->units[i].unloaded};
    double t = jitop__now_ms();
    int status = jitop__link_units(m, in, m->nunits, lazy, &built);
    free(in);
    if (status != JITOP_OK)
        return jitop__fail_prefix(status, "module %s", m->name);
    char label[PATH_MAX + 64];
    link_label(m, label, sizeof label);
    jitop__log(m->ctx, "module %s: %s: %s %.3f ms", m->name, label,
               built.deferred ? "cache hit (entry read when needed)"
               : built.cached ? "cache hit"
                              : "linked",
               jitop__now_ms() - t);
    memcpy(m->link_key, built.key, sizeof m->link_key);
    /* The units' own binaries are read again by key if a later link needs
     * them (an instance, a reload): not kept in memory meanwhile. */
    for (size_t i = 0; i < m->nunits; i++)
        jitop__binary_free(&m->units[i].unloaded);
    jitop__binary_free(&m->link_unloaded);
    if (lazy) {
        m->link_unloaded = built.entry.bin;
        memset(&built.entry.bin, 0, sizeof built.entry.bin);
    } else {
        status = jitop__image_load(m, built.key, &built.entry.bin, label, NULL, &m->units[0].image);
        if (status == JITOP_OK) {
            jitop__module_add_image(m, m->units[0].image);
            m->units_loaded = true;
        }
    }
    jitop__built_free(&built);
    return status;
}

int jitop__link_load(jitop_module *m)
{
    if (m->units[0].image) {
        m->units_loaded = true;
        return JITOP_OK;
    }
    if (!m->link_unloaded.data) {
        jitop__entry e;
        bool found = false;
        int status = jitop__cache_get(m->ctx->cache, m->link_key, &e, &found);
        if (status != JITOP_OK)
            return status;
        if (!found) /* gone since the load: link again, now, from the units' entries */
            return jitop__link_module(m, false);
        m->link_unloaded = e.bin;
        memset(&e.bin, 0, sizeof e.bin);
        jitop__entry_free(&e);
    }
    char label[PATH_MAX + 64];
    link_label(m, label, sizeof label);
    int status = jitop__image_load(m, m->link_key, &m->link_unloaded, label, NULL,
                                   &m->units[0].image);
    if (status != JITOP_OK)
        return status;
    jitop__module_add_image(m, m->units[0].image);
    jitop__binary_free(&m->link_unloaded);
    m->units_loaded = true;
    return JITOP_OK;
}

size_t jitop__link_source_of(const jitop_module *m, const jitop__unit *iu)
{
    for (size_t i = 0; i < m->nunits; i++) {
        const jitop__unit *u = &m->units[i].unit;
        if (iu->source_path ? u->source_path && strcmp(u->source_path, iu->source_path) == 0
                            : u->inline_text && strcmp(u->inline_text, iu->inline_text) == 0)
            return i;
    }
    return 0;
}

int jitop__link_instance(jitop_module *m, const jitop__unit *iu, const char key[33],
                         const jitop__binary *ibin, const char *only, jitop__image **out)
{
    jitop__built built;
    jitop__link_input *in = calloc(m->nunits, sizeof *in);
    char (*keys)[33] = calloc(m->nunits, sizeof *keys);
    int status = in && keys ? JITOP_OK : jitop__fail(JITOP_ENOMEM, "out of memory");
    memset(&built, 0, sizeof built);
    *out = NULL;
    if (status != JITOP_OK)
        goto out;
    /* The other units as the module has them now (their keys change only
     * under the lock, at a commit); their binaries are read by key. */
    size_t src = jitop__link_source_of(m, iu);
    pthread_mutex_lock(&m->lock);
    for (size_t i = 0; i < m->nunits; i++)
        memcpy(keys[i], m->units[i].key, sizeof keys[i]);
    pthread_mutex_unlock(&m->lock);
    for (size_t i = 0; i < m->nunits; i++)
        in[i] = i == src ? (jitop__link_input){iu, key, ibin}
                         : (jitop__link_input){&m->units[i].unit, keys[i], NULL};
    status = jitop__link_units(m, in, m->nunits, false, &built);
    if (status == JITOP_OK)
        status = jitop__image_load(m, built.key, &built.entry.bin, iu->source_name, only, out);
out:
    jitop__built_free(&built);
    free(in);
    free(keys);
    return status;
}
