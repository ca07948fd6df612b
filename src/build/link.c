/* Relocatable units (-rdc) to one linked image through the cache: the
 * link's key follows from the units' keys, so that a warm load of a linked
 * module reads one entry and links nothing, and an edit of one unit
 * recompiles that unit and links again. */
#include "build/build.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

void (*jitop__before_link_hook)(const char *label);

static char *unit_label(const jitop__unit *u)
{
    return jitop__unit_source_label(u);
}

/* The entry's metadata: its first source line says it is a link ("link:"
 * and the units' labels), so that explaining a unit's miss never takes it
 * for one of the unit's own entries; the units' labels follow. */
static int link_entry(const jitop__link_input *in, size_t n, const jitop__strv *options,
                      jitop__binary *bin, jitop__entry *e)
{
    jitop__strv labels = {0};
    int rc = JITOP_OK;
    memset(e, 0, sizeof *e);
    for (size_t i = 0; rc == JITOP_OK && i < n; i++) {
        char *label = unit_label(in[i].unit);
        rc = label ? jitop__strv_push(&labels, label) : JITOP_ENOMEM;
        free(label);
    }
    /* sources: "link:<a> + <b>" first (what explain and jitop ls show as
     * the entry's source), then each unit's label. */
    char *joined = rc == JITOP_OK ? jitop__strv_join(&labels, " + ") : NULL;
    if (rc == JITOP_OK)
        rc = joined ? jitop__strv_pushf(&e->sources, "link:%s", joined) : JITOP_ENOMEM;
    free(joined);
    for (size_t i = 0; rc == JITOP_OK && i < labels.n; i++)
        rc = jitop__strv_push(&e->sources, labels.v[i]);
    for (size_t i = 0; rc == JITOP_OK && i < options->n; i++)
        rc = jitop__strv_push(&e->options, options->v[i]);
    e->arch = jitop__strdup(in[0].unit->arch);
    e->nvrtc_version = jitop__strdup(jitop__nvjitlink_identity());
    e->created = (int64_t)time(NULL);
    jitop__strv_free(&labels);
    if (rc != JITOP_OK || !e->arch || !e->nvrtc_version) {
        jitop__entry_free(e);
        return jitop__fail(JITOP_ENOMEM, "out of memory");
    }
    e->bin = *bin;
    memset(bin, 0, sizeof *bin);
    return JITOP_OK;
}

/* The miss: every input in hand, under the key's lock. */
static int link_and_store(jitop_ctx *ctx, const jitop__link_input *in, size_t n,
                          const jitop__strv *options, jitop__built *out)
{
    int lock_fd = -1;
    bool found = false;
    jitop__binary bin = {0};
    const jitop__binary **bins = calloc(n, sizeof *bins);
    char **names = calloc(n, sizeof *names);
    int status = bins && names ? JITOP_OK : jitop__fail(JITOP_ENOMEM, "out of memory");
    for (size_t i = 0; status == JITOP_OK && i < n; i++) {
        bins[i] = in[i].bin;
        if (!(names[i] = unit_label(in[i].unit)))
            status = jitop__fail(JITOP_ENOMEM, "out of memory");
    }
    if (status == JITOP_OK)
        status = jitop__cache_lock(ctx->cache, out->key, &lock_fd);
    /* Another process may have linked it while we waited for the lock. */
    if (status == JITOP_OK)
        status = jitop__cache_get(ctx->cache, out->key, &out->entry, &found);
    if (status != JITOP_OK || found) {
        out->cached = found;
        goto out;
    }
    if (jitop__before_link_hook)
        jitop__before_link_hook(names[0]);
    double t = jitop__now_ms();
    status = jitop__link(in[0].unit->arch, options, bins, (const char *const *)names, n, &bin);
    if (status != JITOP_OK) {
        jitop__fail_prefix(status, "linking %s%s", names[0], n > 1 ? " and the other units" : "");
        goto out;
    }
    jitop__log(ctx, "%s%s: linked by nvJitLink in %.1f ms (key %s)", names[0],
               n > 1 ? " + ..." : "", jitop__now_ms() - t, out->key);
    status = link_entry(in, n, options, &bin, &out->entry);
    if (status == JITOP_OK)
        status = jitop__cache_put(ctx->cache, out->key, &out->entry);
out:
    jitop__cache_unlock(lock_fd);
    jitop__binary_free(&bin);
    for (size_t i = 0; names && i < n; i++)
        free(names[i]);
    free(names);
    free(bins);
    return status;
}

int jitop__build_link(jitop_ctx *ctx, const jitop__link_input *in, size_t n, bool defer,
                      jitop__built *out)
{
    double t0 = jitop__now_ms();
    jitop__strv options = {0};
    const char **keys = NULL;
    bool found = false;
    memset(out, 0, sizeof *out);
    if (!ctx || !ctx->cache || !in || n == 0)
        return jitop__fail(JITOP_EINVAL, "link: NULL context or no units");
    int status = jitop__link_options(in[0].unit, &options);
    if (status == JITOP_OK && !(keys = calloc(n, sizeof *keys)))
        status = jitop__fail(JITOP_ENOMEM, "out of memory");
    if (status != JITOP_OK)
        goto out;
    for (size_t i = 0; i < n; i++)
        keys[i] = in[i].key;
    jitop__link_key(in[0].unit->arch, &options, keys, n, out->key);
    status = defer ? jitop__cache_touch(ctx->cache, out->key, &found)
                   : jitop__cache_get(ctx->cache, out->key, &out->entry, &found);
    if (status != JITOP_OK || found) {
        out->cached = found;
        out->deferred = found && defer;
        goto out;
    }
    for (size_t i = 0; i < n; i++)
        if (!in[i].bin || !in[i].bin->data) {
            out->needs_inputs = true;
            goto out;
        }
    status = link_and_store(ctx, in, n, &options, out);
out:
    if (status != JITOP_OK)
        jitop__built_free(out);
    out->ms = jitop__now_ms() - t0;
    free(keys);
    jitop__strv_free(&options);
    return status;
}
