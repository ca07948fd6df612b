/* A watch target that builds host sources (one module's host object) into
 * the cache, for `jitop watch` on .c/.cpp files: nothing is loaded (no
 * code of the user's runs in the tool), only built, as `jitop build` does. */
#include "host/host.h"
#include "watch/watch.h"

#include <stdlib.h>
#include <string.h>

typedef struct host_target {
    jitop__strv sources, cflags, ldflags;
    jitop__built_state st;
} host_target;

static int host_files(void *self, jitop__strv *out)
{
    host_target *t = self;
    return jitop__built_state_files(&t->st, out);
}

static int host_prepare(void *self, void **next)
{
    host_target *t = self;
    *next = NULL;
    jitop__host_lib *lib = calloc(1, sizeof *lib);
    if (!lib)
        return jitop__fail(JITOP_ENOMEM, "watch: out of memory");
    int rc = jitop__host_lib_build(t->st.ctx, "jitop watch", &t->sources, &t->cflags, &t->ldflags,
                                   lib);
    if (rc != JITOP_OK) {
        /* The sources stay watched: a fix of one of them rebuilds. */
        free(lib);
        return rc;
    }
    /* Sources first, then every header the compiler listed. */
    jitop__strv files = {0};
    for (size_t i = 0; rc == JITOP_OK && i < t->sources.n; i++)
        rc = jitop__strv_push(&files, t->sources.v[i]);
    for (size_t i = 0; rc == JITOP_OK && i < lib->deps.n; i++) {
        bool dup = false;
        for (size_t j = 0; j < files.n && !dup; j++)
            dup = strcmp(files.v[j], lib->deps.v[i].path) == 0;
        if (!dup)
            rc = jitop__strv_push(&files, lib->deps.v[i].path);
    }
    if (rc == JITOP_OK)
        jitop__built_state_set_files(&t->st, &files);
    jitop__strv_free(&files); /* on ENOMEM: keep watching the earlier list */
    if (jitop__built_state_same(&t->st, lib->key)) {
        jitop__host_lib_free(lib);
        free(lib);
    } else {
        *next = lib;
    }
    return JITOP_OK;
}

static int host_commit(void *self, void *next)
{
    host_target *t = self;
    jitop__host_lib *lib = next;
    jitop__built_state_commit(&t->st, lib->key, lib->cached);
    jitop__host_lib_free(lib);
    free(lib);
    return JITOP_OK;
}

static void host_discard(void *self, void *next)
{
    (void)self;
    jitop__host_lib_free(next);
    free(next);
}

static void host_report(void *self, const jitop__reload_report *r)
{
    host_target *t = self;
    jitop__built_state_report(&t->st, r, t->sources.v[0], "host");
}

static void host_target_free(void *self)
{
    host_target *t = self;
    jitop__strv_free(&t->sources);
    jitop__strv_free(&t->cflags);
    jitop__strv_free(&t->ldflags);
    jitop__built_state_fini(&t->st);
    free(t);
}

static const jitop__target_ops host_ops = {
    .files = host_files,
    .prepare = host_prepare,
    .commit = host_commit,
    .discard = host_discard,
    .report = host_report,
    .free = host_target_free,
};

int jitop__watch_host(jitop__watch *w, jitop_ctx *ctx, jitop_reload_mode mode,
                      const char *const *paths, size_t npaths, const char *const *options,
                      size_t noptions, jitop__unit_report_fn fn, void *user, uint64_t *id)
{
    if (npaths == 0)
        return jitop__fail(JITOP_EINVAL, "watch: no host source");
    host_target *t = calloc(1, sizeof *t);
    if (!t)
        return jitop__fail(JITOP_ENOMEM, "watch: out of memory");
    if (jitop__built_state_init(&t->st, ctx, fn, user) != 0) {
        free(t);
        return jitop__fail(JITOP_ENOMEM, "watch: cannot create a mutex");
    }
    jitop__strv device = {0};
    int rc = jitop__host_split_options(options, noptions, &device, &t->cflags, &t->ldflags);
    jitop__strv_free(&device);
    for (size_t i = 0; rc == JITOP_OK && i < npaths; i++) {
        char *abs = jitop__abspath(paths[i]);
        rc = abs ? jitop__strv_push(&t->sources, abs) : jitop__fail_abspath(paths[i]);
        if (rc == JITOP_OK)
            rc = jitop__strv_push(&t->st.files, abs);
        free(abs);
    }
    if (rc != JITOP_OK) {
        host_target_free(t);
        return rc;
    }
    return jitop__watch_add(w, mode, &host_ops, t, id);
}
