/* The remote tier's configuration and state (remote_private.h): the
 * JITOP_REMOTE_CACHE spec parsed into servers and their attributes, the
 * secret loaded, the process-wide list of dead remotes with its one
 * warning per URL, and the verbose log. remote.c does the lookups and
 * pushes with what this file sets up. */
#include "cache/remote_private.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>

/* Remotes found broken, by base URL, for the life of the process (as
 * ccache does): a new context does not ask a dead server again either. */
static pthread_mutex_t dead_lock = PTHREAD_MUTEX_INITIALIZER;
static jitop__strv dead_urls;

bool jitop__remote_is_dead(const jitop__remote_server *s)
{
    bool dead = false;
    pthread_mutex_lock(&dead_lock);
    for (size_t i = 0; i < dead_urls.n && !dead; i++)
        dead = strcmp(dead_urls.v[i], s->url) == 0;
    pthread_mutex_unlock(&dead_lock);
    return dead;
}

void jitop__remote_mark_dead(const jitop__remote_server *s, const char *fmt, ...)
{
    char why[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    pthread_mutex_lock(&dead_lock);
    bool first = true;
    for (size_t i = 0; i < dead_urls.n && first; i++)
        first = strcmp(dead_urls.v[i], s->url) != 0;
    if (first && jitop__strv_push(&dead_urls, s->url) != JITOP_OK)
        first = false; /* out of memory: said nothing, asked again later */
    pthread_mutex_unlock(&dead_lock);
    if (first)
        fprintf(stderr,
                "jitop: warning: remote cache %s: %s; not used again by this process "
                "(binaries are compiled locally)\n",
                s->shown, why);
}

void jitop__remote_forget_dead(void)
{
    pthread_mutex_lock(&dead_lock);
    jitop__strv_free(&dead_urls);
    pthread_mutex_unlock(&dead_lock);
}

void jitop__remote_log(const struct jitop__remote *r, const char *fmt, ...)
{
    if (!r->verbose)
        return;
    va_list ap;
    va_start(ap, fmt);
    jitop__vlog(fmt, ap);
    va_end(ap);
}

static void server_free(jitop__remote_server *s)
{
    free(s->url);
    free(s->shown);
}

/* One item of the spec: URL|attr|attr=value. */
static int parse_server(const char *item, jitop__remote_server *s)
{
    int status = JITOP_OK;
    char *copy = jitop__strdup(item), *save = NULL;
    memset(s, 0, sizeof *s);
    s->connect_ms = JITOP__REMOTE_CONNECT_MS;
    s->timeout_ms = JITOP__REMOTE_TIMEOUT_MS;
    s->put_timeout_ms = JITOP__REMOTE_PUT_TIMEOUT_MS;
    if (!copy)
        return jitop__fail(JITOP_ENOMEM, "out of memory");
    char *url = strtok_r(copy, "|", &save);
    if (!url || (strncmp(url, "http://", 7) != 0 && strncmp(url, "https://", 8) != 0)) {
        char *shown = url ? jitop__url_redact(url) : NULL;
        status = jitop__fail(JITOP_EINVAL, "'%s': expected an http:// or https:// URL",
                             shown ? shown : "");
        free(shown);
        goto out;
    }
    size_t n = strlen(url);
    while (n > 0 && url[n - 1] == '/')
        url[--n] = '\0';
    s->url = jitop__strdup(url);
    s->shown = jitop__url_redact(url);
    if (!s->url || !s->shown) {
        status = jitop__fail(JITOP_ENOMEM, "out of memory");
        goto out;
    }
    for (char *a = strtok_r(NULL, "|", &save); a; a = strtok_r(NULL, "|", &save)) {
        char *eq = strchr(a, '=');
        long *ms = NULL;
        if (strcmp(a, "read-only") == 0 || strcmp(a, "read-only=true") == 0) {
            s->read_only = true;
            continue;
        }
        if (strcmp(a, "read-only=false") == 0) {
            s->read_only = false;
            continue;
        }
        if (eq && (size_t)(eq - a) == 15 && strncmp(a, "connect-timeout", 15) == 0)
            ms = &s->connect_ms;
        else if (eq && (size_t)(eq - a) == 7 && strncmp(a, "timeout", 7) == 0)
            ms = &s->timeout_ms;
        else if (eq && (size_t)(eq - a) == 11 && strncmp(a, "put-timeout", 11) == 0)
            ms = &s->put_timeout_ms;
        if (!ms) {
            status = jitop__fail(JITOP_EINVAL,
                                 "%s: unknown attribute '%s' (known: read-only, "
                                 "connect-timeout=MS, timeout=MS, put-timeout=MS)",
                                 s->shown, a);
            goto out;
        }
        char *end = NULL;
        errno = 0;
        long v = strtol(eq + 1, &end, 10);
        if (errno || end == eq + 1 || *end || v <= 0 || v > 600000) {
            status = jitop__fail(JITOP_EINVAL, "%s: %s: expected milliseconds from 1 to 600000",
                                 s->shown, a);
            goto out;
        }
        *ms = v;
    }
out:
    free(copy);
    if (status != JITOP_OK)
        server_free(s);
    return status;
}

void jitop__remote_free(struct jitop__remote *r)
{
    if (!r)
        return;
    for (size_t i = 0; i < r->n; i++)
        server_free(&r->servers[i]);
    free(r->servers);
    if (r->secret) {
        memset(r->secret, 0, r->secret_len);
        free(r->secret);
    }
    pthread_cond_destroy(&r->wake);
    pthread_mutex_destroy(&r->lock);
    free(r);
}

static int remote_new(const char *spec, const char *secret_path, int verbose,
                      struct jitop__remote **out)
{
    int status = JITOP_OK;
    char *copy = NULL, *save = NULL;
    *out = NULL;
    struct jitop__remote *r = calloc(1, sizeof *r);
    if (!r)
        return jitop__fail(JITOP_ENOMEM, "out of memory");
    if (pthread_mutex_init(&r->lock, NULL) != 0) {
        free(r);
        return jitop__fail(JITOP_ENOMEM, "remote cache: cannot create a mutex");
    }
    if (pthread_cond_init(&r->wake, NULL) != 0) {
        pthread_mutex_destroy(&r->lock);
        free(r);
        return jitop__fail(JITOP_ENOMEM, "remote cache: cannot create a condition variable");
    }
    r->verbose = verbose;
    if (!(copy = jitop__strdup(spec))) {
        status = jitop__fail(JITOP_ENOMEM, "out of memory");
        goto out;
    }
    /* URLs are separated by blanks (or commas), as in ccache's
     * remote_storage. */
    for (char *it = strtok_r(copy, " \t\n,", &save); it; it = strtok_r(NULL, " \t\n,", &save)) {
        jitop__remote_server *grown = realloc(r->servers, (r->n + 1) * sizeof *grown);
        if (!grown) {
            status = jitop__fail(JITOP_ENOMEM, "out of memory");
            goto out;
        }
        r->servers = grown;
        if ((status = parse_server(it, &r->servers[r->n])) != JITOP_OK)
            goto out;
        r->n++;
    }
    if (secret_path && *secret_path)
        status = jitop__remote_secret_load(secret_path, &r->secret, &r->secret_len);
out:
    free(copy);
    if (status != JITOP_OK || r->n == 0) {
        jitop__remote_free(r);
        return status;
    }
    *out = r;
    return JITOP_OK;
}

int jitop__cache_remote_setup(jitop__cache *c, const char *spec, const char *secret_path)
{
    if (!spec || !*spec)
        return JITOP_OK;
    int status = remote_new(spec, secret_path, c->verbose, &c->remote);
    if (status == JITOP_ENOMEM)
        return status;
    if (status != JITOP_OK) {
        /* A remote that cannot be set up is one that is down: the process
         * still builds, locally, and says why once. */
        fprintf(stderr, "jitop: warning: remote cache not used: %s\n", jitop_errmsg(NULL));
        jitop__clear_error();
    }
    return JITOP_OK;
}
