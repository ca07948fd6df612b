/* What the two build-only targets (a unit built into the cache, reload.c;
 * host sources, host_target.c) keep between rebuilds and tell their owner:
 * the key in place, the files its build read, and the unit report. */
#include "watch/watch.h"

#include <string.h>

int jitop__built_state_init(jitop__built_state *s, jitop_ctx *ctx, jitop__unit_report_fn fn,
                            void *user)
{
    int err = pthread_mutex_init(&s->lock, NULL);
    if (err)
        return err;
    s->ctx = ctx;
    s->fn = fn;
    s->user = user;
    return 0;
}

void jitop__built_state_fini(jitop__built_state *s)
{
    jitop__strv_free(&s->files);
    pthread_mutex_destroy(&s->lock);
}

int jitop__built_state_files(jitop__built_state *s, jitop__strv *out)
{
    int rc = JITOP_OK;
    pthread_mutex_lock(&s->lock);
    for (size_t i = 0; rc == JITOP_OK && i < s->files.n; i++)
        rc = jitop__strv_push(out, s->files.v[i]);
    pthread_mutex_unlock(&s->lock);
    return rc;
}

void jitop__built_state_set_files(jitop__built_state *s, jitop__strv *files)
{
    pthread_mutex_lock(&s->lock);
    jitop__strv swap = s->files;
    s->files = *files;
    pthread_mutex_unlock(&s->lock);
    *files = (jitop__strv){0};
    jitop__strv_free(&swap);
}

bool jitop__built_state_same(jitop__built_state *s, const char key[33])
{
    pthread_mutex_lock(&s->lock);
    bool same = strcmp(s->key, key) == 0;
    pthread_mutex_unlock(&s->lock);
    return same;
}

void jitop__built_state_commit(jitop__built_state *s, const char key[33], bool cached)
{
    pthread_mutex_lock(&s->lock);
    memcpy(s->key, key, sizeof s->key);
    s->cached = cached;
    s->generation++;
    pthread_mutex_unlock(&s->lock);
}

void jitop__built_state_report(jitop__built_state *s, const jitop__reload_report *r,
                               const char *path, const char *arch)
{
    jitop__unit_report ur = {.r = r, .path = path, .arch = arch};
    char key[33];
    pthread_mutex_lock(&s->lock);
    memcpy(key, s->key, sizeof key);
    ur.cached = s->cached;
    ur.generation = s->generation;
    pthread_mutex_unlock(&s->lock);
    ur.key = key;
    if (r->stopped)
        jitop__log(s->ctx, "watch %s: %s", path, r->message);
    if (s->fn)
        s->fn(s->user, &ur);
}
