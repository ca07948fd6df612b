/* HTTP for the remote tier: libcurl opened with dlopen on first need (the
 * header comes from libcurl4-openssl-dev at build time; nothing is linked),
 * one easy handle per request, every request bounded by a connect and a
 * total timeout. Credentials come from the environment or .netrc and never
 * appear in a message: errors name the redacted URL. */
#include "cache/remote_private.h"

#include <curl/curl.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>

/* Requests and signatures under way in this process, on any thread (for
 * the fork handlers: remote_private.h). */
static atomic_int io_count;

void jitop__remote_io_begin(void)
{
    atomic_fetch_add(&io_count, 1);
}

void jitop__remote_io_end(void)
{
    atomic_fetch_sub(&io_count, 1);
}

bool jitop__remote_io_child(void)
{
    bool busy = atomic_load(&io_count) > 0;
    atomic_store(&io_count, 0);
    return busy;
}

static struct {
    pthread_once_t once;
    const char *why; /* set when opening failed */
    CURLcode (*global_init)(long flags);
    CURL *(*easy_init)(void);
    CURLcode (*easy_setopt)(CURL *h, CURLoption opt, ...);
    CURLcode (*easy_perform)(CURL *h);
    CURLcode (*easy_getinfo)(CURL *h, CURLINFO info, ...);
    void (*easy_cleanup)(CURL *h);
    const char *(*easy_strerror)(CURLcode c);
    struct curl_slist *(*slist_append)(struct curl_slist *l, const char *s);
    void (*slist_free_all)(struct curl_slist *l);
} curl = {.once = PTHREAD_ONCE_INIT};

static void open_curl(void)
{
    /* libcurl.so.4 is the soname of every libcurl 7.x and 8.x; the library
     * stays mapped for the life of the process (it may hold threads and
     * atexit handlers of its TLS backend). */
    void *h = dlopen("libcurl.so.4", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        curl.why = "cannot open libcurl.so.4 (install libcurl4)";
        return;
    }
#define SYM(field, name)                                                                         \
    do {                                                                                         \
        *(void **)&curl.field = dlsym(h, name);                                                  \
        if (!curl.field) {                                                                       \
            curl.why = "libcurl.so.4 lacks " name;                                               \
            return;                                                                              \
        }                                                                                        \
    } while (0)
    SYM(global_init, "curl_global_init");
    SYM(easy_init, "curl_easy_init");
    SYM(easy_setopt, "curl_easy_setopt");
    SYM(easy_perform, "curl_easy_perform");
    SYM(easy_getinfo, "curl_easy_getinfo");
    SYM(easy_cleanup, "curl_easy_cleanup");
    SYM(easy_strerror, "curl_easy_strerror");
    SYM(slist_append, "curl_slist_append");
    SYM(slist_free_all, "curl_slist_free_all");
#undef SYM
    /* Not thread-safe in older libcurl: done once here, under pthread_once. */
    if (curl.global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
        curl.why = "curl_global_init failed";
}

bool jitop__http_open(const char **why)
{
    pthread_once(&curl.once, open_curl);
    *why = curl.why;
    return curl.why == NULL;
}

char *jitop__url_redact(const char *url)
{
    const char *scheme_end = strstr(url, "://");
    const char *host = scheme_end ? scheme_end + 3 : url;
    size_t auth_end = strcspn(host, "/?#");
    /* The last '@': a user part may hold one unencoded (an e-mail address
     * as the user name), and everything before the last is credentials. */
    const char *at = memrchr(host, '@', auth_end);
    const char *rest = at ? at + 1 : host;
    size_t keep = strcspn(rest, "?#");
    /* An '@' after the host: a password with an unencoded '/' could be
     * what follows it. The spec's parser refuses such a URL; this is the
     * second line of defence: the path is not shown. */
    size_t hostlen = strcspn(rest, "/?#");
    if (memchr(rest + hostlen, '@', keep - hostlen))
        return jitop__sprintf("%.*s%.*s/...", (int)(host - url), url, (int)hostlen, rest);
    return jitop__sprintf("%.*s%.*s", (int)(host - url), url, (int)keep, rest);
}

struct sink {
    jitop__http_reply *r;
    size_t cap;
    bool too_big, oom;
};

static size_t on_data(char *p, size_t size, size_t n, void *user)
{
    struct sink *s = user;
    size_t add = size * n;
    if (add > JITOP__REMOTE_MAX_BODY - s->r->len) {
        s->too_big = true;
        return 0; /* curl stops with CURLE_WRITE_ERROR */
    }
    if (s->r->len + add + 1 > s->cap) {
        size_t cap = s->cap ? s->cap : 64 * 1024;
        while (cap < s->r->len + add + 1)
            cap *= 2;
        unsigned char *nb = realloc(s->r->body, cap);
        if (!nb) {
            s->oom = true;
            return 0;
        }
        s->r->body = nb;
        s->cap = cap;
    }
    memcpy(s->r->body + s->r->len, p, add);
    s->r->len += add;
    s->r->body[s->r->len] = '\0';
    return add;
}

void jitop__http_reply_free(jitop__http_reply *r)
{
    if (!r)
        return;
    free(r->body);
    memset(r, 0, sizeof *r);
}

static const char *nonempty(const char *name)
{
    const char *v = getenv(name);
    return v && *v ? v : NULL;
}

int jitop__http_request(const jitop__remote_server *s, const char *method, const char *path,
                        const unsigned char *body, size_t len, const char *depth, long timeout_ms,
                        jitop__http_reply *out, char *err, size_t errcap)
{
    const char *why = NULL;
    CURL *h = NULL;
    struct curl_slist *hdrs = NULL;
    char *url = NULL, *auth = NULL, *login = NULL, *depth_hdr = NULL;
    size_t login_size = 0; /* the bytes of login to wipe */
    char cerr[CURL_ERROR_SIZE] = "";
    struct sink sink = {.r = out};
    int rc = -1;
    memset(out, 0, sizeof *out);
    jitop__remote_io_begin();
    if (!jitop__http_open(&why)) {
        snprintf(err, errcap, "%s", why);
        jitop__remote_io_end();
        return -1;
    }
    url = jitop__sprintf("%s%s", s->url, path);
    h = curl.easy_init();
    if (!url || !h) {
        snprintf(err, errcap, "out of memory");
        goto out;
    }
    const char *token = nonempty("JITOP_REMOTE_CACHE_TOKEN");
    const char *user = nonempty("JITOP_REMOTE_CACHE_USER");
    /* A token is sent as it is, every byte but the ones that would end the
     * header (a line break would smuggle a header of its own into the
     * request): those are refused, and the token is never shown. */
    for (const char *p = token; p && *p; p++)
        if ((unsigned char)*p < 0x20 || *p == 0x7f) {
            snprintf(err, errcap, "$JITOP_REMOTE_CACHE_TOKEN holds a control byte (a line "
                                  "break?), so it is not sent (not shown: it is a secret)");
            goto out;
        }
    if (token && !(auth = jitop__sprintf("Authorization: Bearer %s", token))) {
        snprintf(err, errcap, "out of memory");
        goto out;
    }
    /* user:password split at the first ':' (a basic user name holds none),
     * handed to curl apart: the password is sent as it is, every byte. */
    if (!token && user) {
        if (!(login = jitop__strdup(user))) {
            snprintf(err, errcap, "out of memory");
            goto out;
        }
        login_size = strlen(user);
    }
    char *password = login ? strchr(login, ':') : NULL;
    if (password)
        *password++ = '\0';
    if (depth && !(depth_hdr = jitop__sprintf("Depth: %s", depth))) {
        snprintf(err, errcap, "out of memory");
        goto out;
    }
    /* No "Expect: 100-continue" round trip before a PUT's body. */
    const char *lines[] = {"Expect:", auth, depth_hdr,
                           depth ? "Content-Type: application/xml" : NULL};
    for (size_t i = 0; i < sizeof lines / sizeof lines[0]; i++) {
        if (!lines[i])
            continue;
        struct curl_slist *n = curl.slist_append(hdrs, lines[i]);
        if (!n) {
            snprintf(err, errcap, "out of memory");
            goto out;
        }
        hdrs = n;
    }
    bool head = strcmp(method, "HEAD") == 0, get = strcmp(method, "GET") == 0;
    CURLcode c = CURLE_OK;
#define SET(opt, val)                                                                            \
    do {                                                                                         \
        if (c == CURLE_OK)                                                                       \
            c = curl.easy_setopt(h, opt, val);                                                   \
    } while (0)
    SET(CURLOPT_URL, url);
    SET(CURLOPT_ERRORBUFFER, cerr);
    /* Signals would be unsafe in a multi-threaded process (the push thread,
     * the application's); the resolver then uses curl's own thread or none. */
    SET(CURLOPT_NOSIGNAL, 1L);
    SET(CURLOPT_CONNECTTIMEOUT_MS, s->connect_ms);
    SET(CURLOPT_TIMEOUT_MS, timeout_ms);
    SET(CURLOPT_FOLLOWLOCATION, 0L);
    SET(CURLOPT_HTTPHEADER, hdrs);
    SET(CURLOPT_WRITEFUNCTION, on_data);
    SET(CURLOPT_WRITEDATA, &sink);
    SET(CURLOPT_NETRC, (long)CURL_NETRC_OPTIONAL);
    if (nonempty("NETRC"))
        SET(CURLOPT_NETRC_FILE, nonempty("NETRC"));
    if (login)
        SET(CURLOPT_USERNAME, login);
    if (password)
        SET(CURLOPT_PASSWORD, password);
    if (head) {
        SET(CURLOPT_NOBODY, 1L);
    } else if (!get) {
        SET(CURLOPT_CUSTOMREQUEST, method);
        SET(CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
        SET(CURLOPT_POSTFIELDS, body ? (const char *)body : "");
    }
#undef SET
    if (c != CURLE_OK) {
        snprintf(err, errcap, "curl_easy_setopt: %s", curl.easy_strerror(c));
        goto out;
    }
    c = curl.easy_perform(h);
    if (c != CURLE_OK) {
        snprintf(err, errcap, "%s", sink.too_big ? "body over 1 GiB"
                                    : sink.oom   ? "out of memory"
                                    : *cerr      ? cerr
                                                 : curl.easy_strerror(c));
        goto out;
    }
    if (curl.easy_getinfo(h, CURLINFO_RESPONSE_CODE, &out->status) != CURLE_OK) {
        snprintf(err, errcap, "no HTTP status");
        goto out;
    }
    rc = 0;
out:
    if (rc != 0)
        jitop__http_reply_free(out);
    if (h)
        curl.easy_cleanup(h);
    if (hdrs)
        curl.slist_free_all(hdrs);
    if (auth) {
        /* The token does not outlive the request in our memory. */
        memset(auth, 0, strlen(auth));
        free(auth);
    }
    if (login) {
        memset(login, 0, login_size);
        free(login);
    }
    free(depth_hdr);
    free(url);
    jitop__remote_io_end();
    return rc;
}
