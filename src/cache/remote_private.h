/* The remote tier's parts, shared by the cache room's remote files only
 * (remote_http.c, remote_sign.c, remote_list.c, remote_config.c, remote.c;
 * in that order, each using only those before it and the room's lower
 * files).
 *
 * A remote is a base URL that answers GET, PUT (and for listing PROPFIND)
 * under <base>/v<F>/<ab>/<key>. Its body is the entry file exactly as the
 * local cache stores it, followed, when the writer holds a secret, by a
 * 40-byte trailer: "JITOPSIG" and the HMAC-SHA256 of the entry bytes under
 * the secret. The entry's payload holds its own key, so a signature vouches
 * for the key too.
 *
 * libcurl and libcrypto are opened with dlopen on first need (a remote is
 * configured and the local cache missed, or a push): a process that never
 * misses never maps them, and libjitop has no link-time dependency on
 * either. */
#ifndef JITOP_REMOTE_PRIVATE_H
#define JITOP_REMOTE_PRIVATE_H

#include "cache/cache_private.h"

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define JITOP__REMOTE_SIG_MAGIC "JITOPSIG"
#define JITOP__REMOTE_MAC_SIZE 32
#define JITOP__REMOTE_TRAILER_SIZE (8 + JITOP__REMOTE_MAC_SIZE)
/* A body larger than this is refused while it is read: an entry is a
 * cubin or PTX, never near it. */
#define JITOP__REMOTE_MAX_BODY ((size_t)1 << 30)

/* Defaults of the per-URL attributes (milliseconds). A GET sits on a
 * load's path, so it is bounded tightly; a PUT runs on the push thread. */
#define JITOP__REMOTE_CONNECT_MS 100
#define JITOP__REMOTE_TIMEOUT_MS 500
#define JITOP__REMOTE_PUT_TIMEOUT_MS 2000

/* Room for an error text from one request (curl's are under 256). */
#define CURL_ERR_CAP 320

typedef struct jitop__remote_server {
    char *url;   /* the base URL, no trailing '/' */
    char *shown; /* the URL for messages: no user, password, query or fragment */
    bool read_only;
    long connect_ms, timeout_ms, put_timeout_ms;
} jitop__remote_server;

/* One HTTP exchange (remote_http.c). */
typedef struct jitop__http_reply {
    long status;          /* the HTTP status; 0 when no answer came */
    unsigned char *body;  /* malloc'd (NULL when empty); NUL after len */
    size_t len;
} jitop__http_reply;

/* Opens libcurl once per process. false with *why (a static string) when
 * it cannot be. */
bool jitop__http_open(const char **why);

/* method "GET", "PUT", "HEAD" or "PROPFIND" on s->url + path (path starts
 * with '/'). body/len: what a PUT sends (PROPFIND: its XML). depth: the
 * Depth header for PROPFIND (NULL otherwise). Auth: the bearer token in
 * $JITOP_REMOTE_CACHE_TOKEN, else user:password in $JITOP_REMOTE_CACHE_USER,
 * else ~/.netrc (or $NETRC) for the host. 0 when an answer came (any
 * status, in out->status); -1 when none did, with why in err (never a
 * credential: only the redacted URL and curl's text). */
int jitop__http_request(const jitop__remote_server *s, const char *method, const char *path,
                        const unsigned char *body, size_t len, const char *depth, long timeout_ms,
                        jitop__http_reply *out, char *err, size_t errcap);
void jitop__http_reply_free(jitop__http_reply *r);

/* A URL as messages show it: scheme, host, port and path only (malloc'd;
 * NULL on ENOMEM). */
char *jitop__url_redact(const char *url);

/* Signatures (remote_sign.c). The secret is read from path: at least 16
 * bytes, one trailing newline dropped. A file others can read is refused. */
int jitop__remote_secret_load(const char *path, unsigned char **key, size_t *len);
/* HMAC-SHA256 of data under key, through libcrypto (opened once). false
 * with *why (static) when libcrypto cannot be opened or fails. */
bool jitop__remote_mac(const unsigned char *key, size_t klen, const unsigned char *data, size_t n,
                       unsigned char mac[JITOP__REMOTE_MAC_SIZE], const char **why);
/* Constant-time comparison of two MACs. */
bool jitop__remote_mac_equal(const unsigned char *a, const unsigned char *b);

/* Lists the entries under s (remote_list.c): PROPFIND of <base>/v<F>/ and
 * of each <ab>/ below it, Depth 1. fn gets each key and its size; a
 * non-zero return stops the walk and is returned. A server that cannot
 * list (no WebDAV PROPFIND) is JITOP_EINVAL with a message that says so. */
int jitop__remote_list_server(const jitop__remote_server *s,
                              int (*fn)(const char *key, int64_t size, void *user), void *user);

/* How long jitop__cache_close waits for queued pushes before it drops the
 * rest (a PUT already running still ends within its own timeout). */
#define JITOP__REMOTE_DRAIN_MS 2000
/* A key the remote just said it does not hold is not asked for again
 * within this window: the build's second look, after it takes the key's
 * lock, would otherwise cost a second round trip on every miss. */
#define JITOP__REMOTE_MISS_MEMO_MS 2000
#define JITOP__REMOTE_MISS_MEMO_N 8

struct push_item {
    struct push_item *next;
    char key[33];
    unsigned char *data;
    size_t len;
};

/* Which remotes took a key from this process (or from a forked worker that
 * said so): bit i for the spec's i-th remote, i < 64 (a remote past the
 * 64th is never recorded, so it is pushed to again rather than skipped).
 * An open-addressed table under the remote's lock; 48 bytes an entry. */
struct pushed_slot {
    char key[33];
    uint64_t mask;
};
struct pushed_set {
    struct pushed_slot *v;
    size_t cap, n; /* cap: 0 or a power of two */
};

struct jitop__remote {
    jitop__remote_server *servers;
    size_t n;
    unsigned char *secret;
    size_t secret_len;
    int verbose;

    pthread_mutex_t lock; /* guards everything below */
    pthread_cond_t wake;  /* the push thread: an item queued, or stop */
    pthread_cond_t idle;  /* flushers: the queue is empty and no push runs */
    struct push_item *head, *tail;
    bool started, stop;
    bool busy; /* the push thread is sending an item it dequeued */
    pthread_t thread;
    double drain_until; /* jitop__now_ms() deadline once stop is set */
    struct {
        char key[33];
        double at;
    } misses[JITOP__REMOTE_MISS_MEMO_N];
    unsigned next_miss;
    struct pushed_set pushed;

    /* The process's list of remotes, for its fork handlers (remote_config.c):
     * guarded by the list's own lock, not by lock above. */
    struct jitop__remote *fork_next;
};

/* Fork safety (remote_config.c). Every remote is on a process-wide list
 * that pthread_atfork handlers walk: before a fork they take the list's
 * lock, every remote's lock and the dead list's lock, so the child gets
 * each in a consistent state; in the child, each remote forgets the
 * parent's push thread and queue (the parent sends those) and gets fresh
 * condition variables, so the child's first push starts a thread of its
 * own. A request in flight on another thread at the fork (inside curl,
 * its resolver or its TLS library, whose locks that thread may hold and
 * never release in the child) turns the tier off in the child: every
 * remote is dead there, said once. jitop__remote_io_begin/_end
 * (remote_http.c) bracket each request and signature so that the handlers
 * can tell; jitop__remote_io_child, in the child's handler, says whether
 * one was under way and starts the child's count at 0. */
void jitop__remote_io_begin(void);
void jitop__remote_io_end(void);
bool jitop__remote_io_child(void);

/* Set-up and state (remote_config.c). */
void jitop__remote_free(struct jitop__remote *r);
/* Whether s was found broken by this process. */
bool jitop__remote_is_dead(const jitop__remote_server *s);
/* Marks s dead and warns on stderr, once per URL and process. */
void jitop__remote_mark_dead(const jitop__remote_server *s, const char *fmt, ...)
    JITOP__PRINTF(2, 3);
/* Logs on stderr when the context is verbose. */
void jitop__remote_log(const struct jitop__remote *r, const char *fmt, ...) JITOP__PRINTF(2, 3);

#endif
