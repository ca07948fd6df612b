/* The remote tier's configuration and state (remote_private.h): the
 * JITOP_REMOTE_CACHE spec parsed into servers and their attributes, the
 * secret loaded, the process-wide list of dead remotes with its one
 * warning per URL, the fork handlers, and the verbose log. remote.c does
 * the lookups and pushes with what this file sets up. */
#include "cache/remote_private.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <strings.h>

/* Remotes found broken, by base URL, for the life of the process (as
 * ccache does): a new context does not ask a dead server again either. */
static pthread_mutex_t dead_lock = PTHREAD_MUTEX_INITIALIZER;
static jitop__strv dead_urls;
/* This process was forked while another thread was inside a request:
 * every remote is dead here (remote_private.h says why); said once. */
static bool forked_mid_request, forked_said;

bool jitop__remote_is_dead(const jitop__remote_server *s)
{
    bool dead = false, say = false;
    pthread_mutex_lock(&dead_lock);
    if (forked_mid_request) {
        dead = true;
        say = !forked_said;
        forked_said = true;
    }
    for (size_t i = 0; i < dead_urls.n && !dead; i++)
        dead = strcmp(dead_urls.v[i], s->url) == 0;
    pthread_mutex_unlock(&dead_lock);
    if (say)
        fprintf(stderr, "jitop: warning: remote cache not used by this process: it was forked "
                        "while another thread was inside a request to a remote (what that "
                        "thread held in libcurl or its TLS library stays held here); binaries "
                        "are compiled locally\n");
    return dead;
}

/* The process's remotes, for the fork handlers. Lock order: fork_lock,
 * then each remote's lock, then dead_lock; nothing takes fork_lock while
 * holding either of the others. */
static pthread_mutex_t fork_lock = PTHREAD_MUTEX_INITIALIZER;
static struct jitop__remote *fork_list;
static pthread_once_t fork_once = PTHREAD_ONCE_INIT;
static int fork_rc; /* pthread_atfork's answer */

static void before_fork(void)
{
    pthread_mutex_lock(&fork_lock);
    for (struct jitop__remote *r = fork_list; r; r = r->fork_next)
        pthread_mutex_lock(&r->lock);
    pthread_mutex_lock(&dead_lock);
}

static void after_fork_parent(void)
{
    pthread_mutex_unlock(&dead_lock);
    for (struct jitop__remote *r = fork_list; r; r = r->fork_next)
        pthread_mutex_unlock(&r->lock);
    pthread_mutex_unlock(&fork_lock);
}

/* In the child, the only thread is the one that forked, holding every lock
 * before_fork took. The parent's push thread does not exist here: its
 * queue is the parent's to send (dropped here: sending it too would push
 * twice), its pthread_t must never be joined, and a condition variable it
 * waited on still counts it as a waiter (a signal could go to it and be
 * lost), so both are made anew. Nothing here allocates or prints; it
 * frees the dropped queue (glibc's fork makes malloc usable in a child's
 * handler). */
static void after_fork_child(void)
{
    if (jitop__remote_io_child())
        forked_mid_request = true;
    pthread_mutex_unlock(&dead_lock);
    for (struct jitop__remote *r = fork_list; r; r = r->fork_next) {
        for (struct push_item *it = r->head, *next; it; it = next) {
            next = it->next;
            free(it->data);
            free(it);
        }
        r->head = r->tail = NULL;
        r->started = r->busy = false;
        memset(&r->thread, 0, sizeof r->thread);
        /* Made anew rather than destroyed: glibc's destroy would wait for
         * the waiter that no longer exists. Failure cannot happen for a
         * default condition variable (glibc's init always succeeds). */
        (void)pthread_cond_init(&r->wake, NULL);
        (void)pthread_cond_init(&r->idle, NULL);
        pthread_mutex_unlock(&r->lock);
    }
    pthread_mutex_unlock(&fork_lock);
}

static void fork_init(void)
{
    fork_rc = pthread_atfork(before_fork, after_fork_parent, after_fork_child);
}

/* Puts r on the process's list: false when the fork handlers cannot be
 * installed (ENOMEM). */
static bool fork_register(struct jitop__remote *r)
{
    pthread_once(&fork_once, fork_init);
    if (fork_rc != 0)
        return false;
    pthread_mutex_lock(&fork_lock);
    r->fork_next = fork_list;
    fork_list = r;
    pthread_mutex_unlock(&fork_lock);
    return true;
}

static void fork_unregister(struct jitop__remote *r)
{
    pthread_mutex_lock(&fork_lock);
    for (struct jitop__remote **p = &fork_list; *p; p = &(*p)->fork_next)
        if (*p == r) {
            *p = r->fork_next;
            break;
        }
    pthread_mutex_unlock(&fork_lock);
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
    forked_mid_request = forked_said = false;
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

/* The spec's grammar (docs/GUIDE.md, "Remote cache"): items separated by
 * blanks or commas, each URL|attr|attr=value. A URL's user:password may
 * hold ',', '|' and '@' as they are: inside the authority, everything up to
 * its last '@' is credentials, never a separator. Any other byte of it that
 * a URL cannot hold as is (blanks, '/', '?', '#', '%', control bytes) is
 * percent-encoded, as RFC 3986 asks; curl decodes it. An attribute's value
 * is percent-decoded here, so it can hold any byte too.
 *
 * No message shows a part of an item that could be a secret: a URL is
 * shown redacted (scheme, host, port, path), an item that is no usable URL
 * by its number and at most its scheme, an attribute by its name only. */
static bool is_sep(char ch)
{
    return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r' || ch == ',';
}

/* The length of a scheme followed by "://" at p (0: none). */
static size_t scheme_len(const char *p)
{
    size_t n = 0;
    if (!((p[0] >= 'a' && p[0] <= 'z') || (p[0] >= 'A' && p[0] <= 'Z')))
        return 0;
    while ((p[n] >= 'a' && p[n] <= 'z') || (p[n] >= 'A' && p[n] <= 'Z') ||
           (p[n] >= '0' && p[n] <= '9') || p[n] == '+' || p[n] == '-' || p[n] == '.')
        n++;
    return strncmp(p + n, "://", 3) == 0 ? n : 0;
}

/* Where the item at p ends, and (*cred_end) where its URL's credentials
 * end: just past the authority's last '@', or the authority's start. The
 * authority runs from "://" to the first '/', '?', '#' or blank; hosts and
 * ports hold no ',' or '|', so one of those before the last '@' is part
 * of the credentials. */
static const char *item_end(const char *p, const char **cred_end)
{
    size_t sl = scheme_len(p);
    const char *q = p;
    if (sl) {
        const char *auth = p + sl + 3, *at = NULL;
        size_t run = strcspn(auth, "/?# \t\n\r");
        for (size_t i = 0; i < run; i++)
            if (auth[i] == '@')
                at = auth + i;
        q = at ? at + 1 : auth;
    }
    *cred_end = q;
    while (*q && !is_sep(*q))
        q++;
    return q;
}

static int hexval(char ch)
{
    return ch >= '0' && ch <= '9'   ? ch - '0'
           : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10
           : ch >= 'A' && ch <= 'F' ? ch - 'A' + 10
                                    : -1;
}

/* Percent-decodes s in place; false on a '%' that is no %XX or a %00. */
static bool pct_decode(char *s)
{
    char *o = s;
    for (char *p = s; *p; p++) {
        if (*p != '%') {
            *o++ = *p;
            continue;
        }
        int hi = hexval(p[1]), lo = hi < 0 ? -1 : hexval(p[2]);
        if (lo < 0 || (hi == 0 && lo == 0))
            return false;
        *o++ = (char)(hi * 16 + lo);
        p += 2;
    }
    *o = '\0';
    return true;
}

/* Whether an attribute's name may be shown: a word of lowercase letters
 * and '-' (what every attribute is); anything else could be a secret put
 * in the wrong place. */
static bool showable_name(const char *a, size_t n)
{
    if (n == 0 || n > 32)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!((a[i] >= 'a' && a[i] <= 'z') || a[i] == '-'))
            return false;
    return true;
}

/* The URL as curl is given it: [item, item + len) with its credentials
 * (scheme:// to cred_end, an '@' last) percent-encoded but for letters,
 * digits, "-._~", the first ':' and %XX escapes already there, so that
 * curl, which reads the user part up to the first '@', decodes exactly the
 * bytes meant. malloc'd; NULL on ENOMEM. */
static char *url_for_curl(const char *item, size_t len, size_t sl, const char *cred_end)
{
    const char *cred = item + sl + 3;
    if (cred_end == cred)
        return strndup(item, len);
    size_t clen = (size_t)(cred_end - 1 - cred);
    char *u = malloc(len + 2 * clen + 1);
    if (!u)
        return NULL;
    char *o = u;
    bool colon = false;
    memcpy(o, item, sl + 3);
    o += sl + 3;
    for (size_t i = 0; i < clen; i++) {
        unsigned char ch = (unsigned char)cred[i];
        bool keep = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
                    (ch >= '0' && ch <= '9') || ch == '-' || ch == '.' || ch == '_' || ch == '~' ||
                    (ch == ':' && !colon) ||
                    (ch == '%' && i + 2 < clen && hexval(cred[i + 1]) >= 0 &&
                     hexval(cred[i + 2]) >= 0);
        colon = colon || ch == ':';
        if (keep) {
            *o++ = (char)ch;
        } else {
            snprintf(o, 4, "%%%02X", ch);
            o += 3;
        }
    }
    size_t rest = len - (size_t)(cred_end - 1 - item);
    memcpy(o, cred_end - 1, rest);
    o[rest] = '\0';
    return u;
}

/* Checks the URL's host[:port] (from host to its path) and path: false
 * with why (a constant that shows nothing of the URL) when it cannot be a
 * remote's base URL. */
static bool url_shape(const char *host, const char **why)
{
    size_t n = strcspn(host, "/?#");
    const char *colon = NULL;
    if (n > 0 && host[0] == '[') { /* an IPv6 literal */
        const char *close = memchr(host, ']', n);
        if (!close) {
            *why = "an IPv6 host without its ']'";
            return false;
        }
        colon = close + 1 < host + n ? close + 1 : NULL;
        if (colon && *colon != ':') {
            *why = "bytes after an IPv6 host's ']'";
            return false;
        }
    } else {
        for (size_t i = 0; i < n && !colon; i++)
            if (host[i] == ':')
                colon = host + i;
        size_t hn = colon ? (size_t)(colon - host) : n;
        for (size_t i = 0; i < hn; i++) {
            char ch = host[i];
            if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
                  (ch >= '0' && ch <= '9') || ch == '.' || ch == '-' || ch == '_' || ch == '%')) {
                *why = "a host name with a byte no host name holds (a user:password's blanks, "
                       "'/', '?' and '#' must be percent-encoded: %20, %2F, %3F, %23)";
                return false;
            }
        }
        if (hn == 0) {
            *why = "no host";
            return false;
        }
    }
    if (colon) {
        size_t pn = (size_t)(host + n - colon - 1);
        for (size_t i = 0; i < pn; i++)
            if (colon[1 + i] < '0' || colon[1 + i] > '9')
                pn = 0;
        if (pn == 0 || pn > 5) {
            *why = "a port that is not a number (a user:password's blanks, '/', '?' and '#' "
                   "must be percent-encoded: %20, %2F, %3F, %23)";
            return false;
        }
    }
    for (const char *p = host + n; *p; p++) {
        if (*p == '@') {
            *why = "an '@' after the host (percent-encode a user:password's '/', '?' and '#': "
                   "%2F, %3F, %23; and an '@' of the path: %40)";
            return false;
        }
        if ((unsigned char)*p <= ' ' || *p == 0x7f) {
            *why = "a blank or a control byte in the path (percent-encode it)";
            return false;
        }
    }
    return true;
}

/* Item number idx of the spec, [item, end), with its credentials ending at
 * cred_end: URL|attr|attr=value. */
static int parse_server(const char *item, const char *cred_end, const char *end, size_t idx,
                        jitop__remote_server *s)
{
    int status = JITOP_OK;
    size_t n = (size_t)(end - item), sl = scheme_len(item);
    size_t url_len = (size_t)(cred_end - item) + strcspn(cred_end, "|");
    char *attrs = NULL, *save = NULL;
    const char *why = NULL;
    memset(s, 0, sizeof *s);
    s->connect_ms = JITOP__REMOTE_CONNECT_MS;
    s->timeout_ms = JITOP__REMOTE_TIMEOUT_MS;
    s->put_timeout_ms = JITOP__REMOTE_PUT_TIMEOUT_MS;
    if (url_len > n)
        url_len = n;
    if (!sl || !((sl == 4 && strncasecmp(item, "http", 4) == 0) ||
                 (sl == 5 && strncasecmp(item, "https", 5) == 0))) {
        if (sl)
            return jitop__fail(JITOP_EINVAL, "item %zu ('%.*s://...'): expected an http:// or "
                                             "https:// URL",
                               idx, (int)sl, item);
        return jitop__fail(JITOP_EINVAL, "item %zu (not shown: it could hold a secret): expected "
                                         "an http:// or https:// URL",
                           idx);
    }
    if (!(s->url = url_for_curl(item, url_len, sl, cred_end)) ||
        !(attrs = strndup(item + url_len, n - url_len))) {
        status = jitop__fail(JITOP_ENOMEM, "out of memory");
        goto out;
    }
    /* The credentials are encoded now: the first '@' ends them. */
    const char *host = s->url + sl + 3;
    if (cred_end != item + sl + 3)
        host = strchr(host, '@') + 1;
    size_t un = strlen(s->url);
    while (un > (size_t)(host - s->url) && s->url[un - 1] == '/')
        s->url[--un] = '\0';
    if (!url_shape(host, &why)) {
        status = jitop__fail(JITOP_EINVAL, "item %zu (%.*s://..., not shown: it could hold a "
                                           "secret): %s",
                             idx, (int)sl, item, why);
        goto out;
    }
    if (!(s->shown = jitop__url_redact(s->url))) {
        status = jitop__fail(JITOP_ENOMEM, "out of memory");
        goto out;
    }
    for (char *a = strtok_r(attrs, "|", &save); a; a = strtok_r(NULL, "|", &save)) {
        char *eq = strchr(a, '=');
        size_t name_len = eq ? (size_t)(eq - a) : strlen(a);
        long *ms = NULL;
        bool flag = false;
        if (eq && !pct_decode(eq + 1)) {
            status = jitop__fail(JITOP_EINVAL,
                                 "%s: attribute '%.*s': a '%%' that is no percent-escape (%%XX, "
                                 "not %%00)",
                                 s->shown, showable_name(a, name_len) ? (int)name_len : 0, a);
            goto out;
        }
        if (name_len == 9 && strncmp(a, "read-only", 9) == 0) {
            if (!eq || strcmp(eq + 1, "true") == 0)
                flag = s->read_only = true;
            else if (strcmp(eq + 1, "false") == 0)
                flag = true, s->read_only = false;
            if (!flag) {
                status = jitop__fail(JITOP_EINVAL, "%s: read-only: expected no value, true or "
                                                   "false",
                                     s->shown);
                goto out;
            }
            continue;
        }
        if (eq && name_len == 15 && strncmp(a, "connect-timeout", 15) == 0)
            ms = &s->connect_ms;
        else if (eq && name_len == 7 && strncmp(a, "timeout", 7) == 0)
            ms = &s->timeout_ms;
        else if (eq && name_len == 11 && strncmp(a, "put-timeout", 11) == 0)
            ms = &s->put_timeout_ms;
        if (!ms) {
            if (showable_name(a, name_len))
                status = jitop__fail(JITOP_EINVAL,
                                     "%s: unknown attribute '%.*s' (known: read-only, "
                                     "connect-timeout=MS, timeout=MS, put-timeout=MS)",
                                     s->shown, (int)name_len, a);
            else
                status = jitop__fail(JITOP_EINVAL,
                                     "%s: an unknown attribute (not shown: it could hold a "
                                     "secret; known: read-only, connect-timeout=MS, timeout=MS, "
                                     "put-timeout=MS)",
                                     s->shown);
            goto out;
        }
        char *vend = NULL;
        errno = 0;
        long v = strtol(eq + 1, &vend, 10);
        if (errno || vend == eq + 1 || *vend || v <= 0 || v > 600000) {
            status = jitop__fail(JITOP_EINVAL, "%s: %.*s: expected milliseconds from 1 to 600000",
                                 s->shown, (int)name_len, a);
            goto out;
        }
        *ms = v;
    }
out:
    free(attrs);
    if (status != JITOP_OK)
        server_free(s);
    return status;
}

void jitop__remote_free(struct jitop__remote *r)
{
    if (!r)
        return;
    fork_unregister(r); /* first: a fork must not take a destroyed lock */
    for (size_t i = 0; i < r->n; i++)
        server_free(&r->servers[i]);
    free(r->servers);
    if (r->secret) {
        memset(r->secret, 0, r->secret_len);
        free(r->secret);
    }
    free(r->pushed.v);
    pthread_cond_destroy(&r->idle);
    pthread_cond_destroy(&r->wake);
    pthread_mutex_destroy(&r->lock);
    free(r);
}

static int remote_new(const char *spec, const char *secret_path, int verbose,
                      struct jitop__remote **out)
{
    int status = JITOP_OK;
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
    if (pthread_cond_init(&r->idle, NULL) != 0) {
        pthread_cond_destroy(&r->wake);
        pthread_mutex_destroy(&r->lock);
        free(r);
        return jitop__fail(JITOP_ENOMEM, "remote cache: cannot create a condition variable");
    }
    r->verbose = verbose;
    for (const char *p = spec;;) {
        while (is_sep(*p))
            p++;
        if (!*p)
            break;
        const char *cred_end = NULL, *end = item_end(p, &cred_end);
        jitop__remote_server *grown = realloc(r->servers, (r->n + 1) * sizeof *grown);
        if (!grown) {
            status = jitop__fail(JITOP_ENOMEM, "out of memory");
            goto out;
        }
        r->servers = grown;
        if ((status = parse_server(p, cred_end, end, r->n + 1, &r->servers[r->n])) != JITOP_OK)
            goto out;
        r->n++;
        p = end;
    }
    if (secret_path && *secret_path)
        status = jitop__remote_secret_load(secret_path, &r->secret, &r->secret_len);
    if (status == JITOP_OK && r->n > 0 && !fork_register(r))
        status = jitop__fail(JITOP_ENOMEM, "remote cache: cannot install its fork handlers "
                                           "(pthread_atfork: out of memory)");
out:
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
