/* The remote tier: memory -> local -> remote -> compile. This file defines
 * the room's jitop__cache_get (the local entry, else each live remote in
 * turn), jitop__cache_put (the local write, then a push to every writable
 * remote from a background thread) and jitop__cache_close (the push thread
 * drained, within a bound, then the local cache freed).
 *
 * Fail-open: a remote that refuses the connection, times out, answers 5xx
 * or an error status, or serves anything that does not verify (truncated,
 * garbage, a bad checksum, another key's entry, a missing or bad signature
 * where a secret is set) is warned about once and not asked again by this
 * process; the caller then compiles. A 404 is a plain miss.
 *
 * A body is accepted only after exactly the checks a local read makes
 * (magic, version, payload length, checksum, the key inside the payload),
 * plus its signature where a secret is set; it is then written to the local
 * cache through the same atomic path as a compile's entry. */
#include "cache/remote_private.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <time.h>

/* Checks a GET's body as a local read would, plus the signature: NULL with
 * *entry_len set when it is good, else why not (a constant, or the text
 * written into why). */
static const char *verify_body(const struct jitop__remote *r, const unsigned char *p, size_t len,
                               size_t *entry_len, uint32_t *flags, char *why, size_t whycap)
{
    if (len == 0)
        return "served an empty body";
    if (len < JITOP__FILE_HEADER_SIZE || memcmp(p, JITOP__ENTRY_MAGIC, 8) != 0)
        return len < 8 || memcmp(p, JITOP__ENTRY_MAGIC, len < 8 ? len : 8) != 0
                   ? "served something that is not a jitop entry (garbage)"
                   : "served a truncated entry (shorter than its header)";
    struct jitop__rbuf rb = {p, len, 16, false};
    uint64_t payload = jitop__rb_u64(&rb);
    if (payload > len - JITOP__FILE_HEADER_SIZE)
        return "served a truncated entry (body shorter than its recorded length)";
    size_t n = JITOP__FILE_HEADER_SIZE + (size_t)payload;
    bool is_signed = len == n + JITOP__REMOTE_TRAILER_SIZE &&
                     memcmp(p + n, JITOP__REMOTE_SIG_MAGIC, 8) == 0;
    if (len != n && !is_signed)
        return "served an entry followed by bytes that are no signature (garbage)";
    if (r->secret) {
        unsigned char mac[JITOP__REMOTE_MAC_SIZE];
        const char *err = NULL;
        if (!is_signed)
            return "served an unsigned entry (JITOP_REMOTE_CACHE_SECRET is set: only signed "
                   "entries are accepted)";
        if (!jitop__remote_mac(r->secret, r->secret_len, p, n, mac, &err)) {
            snprintf(why, whycap, "cannot check signatures: %s", err);
            return why;
        }
        if (!jitop__remote_mac_equal(mac, p + n + 8))
            return "served an entry with a bad signature (another secret, or altered)";
    }
    const char *bad = jitop__file_check(p, n, JITOP__ENTRY_MAGIC, flags);
    if (bad) {
        snprintf(why, whycap, "served an invalid entry: %s", bad);
        return why;
    }
    *entry_len = n;
    return NULL;
}

static bool recently_missed(struct jitop__remote *r, const char key[33])
{
    double now = jitop__now_ms();
    bool hit = false;
    pthread_mutex_lock(&r->lock);
    for (size_t i = 0; i < JITOP__REMOTE_MISS_MEMO_N && !hit; i++)
        hit = strcmp(r->misses[i].key, key) == 0 &&
              now - r->misses[i].at < JITOP__REMOTE_MISS_MEMO_MS;
    pthread_mutex_unlock(&r->lock);
    return hit;
}

static void note_miss(struct jitop__remote *r, const char key[33])
{
    pthread_mutex_lock(&r->lock);
    unsigned i = r->next_miss++ % JITOP__REMOTE_MISS_MEMO_N;
    memcpy(r->misses[i].key, key, 33);
    r->misses[i].at = jitop__now_ms();
    pthread_mutex_unlock(&r->lock);
}

/* One GET from s: 1 with *e filled (and *bytes the verified entry file,
 * when wanted), 0 a miss, -1 down (warned, marked dead). Fails only on
 * ENOMEM. */
static int fetch_one(struct jitop__remote *r, const jitop__remote_server *s, const char key[33],
                     jitop__entry *e, struct jitop__wbuf *bytes, int *answer)
{
    char path[64], err[CURL_ERR_CAP];
    jitop__http_reply rep;
    snprintf(path, sizeof path, "/v%d/%.2s/%s", JITOP__FORMAT_VERSION, key, key);
    double t0 = jitop__now_ms();
    *answer = -1;
    if (jitop__http_request(s, "GET", path, NULL, 0, NULL, s->timeout_ms, &rep, err,
                            sizeof err) != 0) {
        jitop__remote_mark_dead(s, "GET failed: %s", err);
        return JITOP_OK;
    }
    int status = JITOP_OK;
    if (rep.status == 404) {
        *answer = 0;
        jitop__remote_log(r, "remote cache %s: miss %s (%.1f ms)", s->shown, key,
                          jitop__now_ms() - t0);
        goto out;
    }
    if (rep.status != 200) {
        jitop__remote_mark_dead(s, "GET answered HTTP %ld", rep.status);
        goto out;
    }
    size_t n = 0;
    uint32_t flags = 0;
    char whybuf[192];
    const char *why = verify_body(r, rep.body, rep.len, &n, &flags, whybuf, sizeof whybuf);
    if (why) {
        jitop__remote_mark_dead(s, "%s (key %s)", why, key);
        goto out;
    }
    if (bytes) {
        jitop__wb_bytes(bytes, rep.body, n);
        if (bytes->oom) {
            status = jitop__fail(JITOP_ENOMEM, "out of memory");
            goto out;
        }
    }
    /* The parse takes the buffer (the binary is moved to its front). */
    unsigned char *buf = rep.body;
    rep.body = NULL;
    why = jitop__cache_entry_parse(key, &buf, n, flags, e);
    free(buf);
    if (why) {
        jitop__remote_mark_dead(s, "served an invalid entry under key %s: %s", key, why);
        goto out;
    }
    *answer = 1;
    jitop__remote_log(r, "remote cache %s: hit %s (%zu bytes, %.1f ms)", s->shown, key, n,
                      jitop__now_ms() - t0);
out:
    jitop__http_reply_free(&rep);
    return status;
}

int jitop__cache_get(jitop__cache *c, const char key[33], jitop__entry *out, bool *found)
{
    int status = jitop__cache_get_local(c, key, out, found);
    struct jitop__remote *r = c->remote;
    if (status != JITOP_OK || *found || !r || recently_missed(r, key))
        return status;
    bool asked = false;
    for (size_t i = 0; i < r->n && !*found; i++) {
        const jitop__remote_server *s = &r->servers[i];
        if (jitop__remote_is_dead(s))
            continue;
        asked = true;
        struct jitop__wbuf bytes = {0};
        jitop__entry e;
        int answer = 0;
        status = fetch_one(r, s, key, &e, &bytes, &answer);
        if (status == JITOP_OK && answer == 1) {
            /* Stored locally through the same atomic write as a compile's
             * entry: the next process hits on its own disk. A failed write
             * only costs the next process a remote hit. */
            if (jitop__cache_put_bytes(c, key, &bytes) != JITOP_OK) {
                jitop__cache_vlog(c, "remote: cannot store %s locally: %s", key,
                                  jitop_errmsg(NULL));
                jitop__clear_error();
            }
            if (out)
                *out = e;
            else
                jitop__entry_free(&e);
            *found = true;
        }
        free(bytes.p);
        if (status != JITOP_OK)
            return status;
    }
    if (asked && !*found)
        note_miss(r, key);
    return JITOP_OK;
}

/* The body a push sends: the entry file, signed when a secret is set.
 * false (said why, once) when it cannot be signed. */
static bool sign_body(struct jitop__remote *r, const jitop__remote_server *s,
                      struct jitop__wbuf *b)
{
    if (!r->secret)
        return true;
    unsigned char mac[JITOP__REMOTE_MAC_SIZE];
    const char *why = NULL;
    if (!jitop__remote_mac(r->secret, r->secret_len, b->p, b->n, mac, &why)) {
        jitop__remote_mark_dead(s, "cannot sign entries: %s", why);
        return false;
    }
    jitop__wb_bytes(b, JITOP__REMOTE_SIG_MAGIC, 8);
    jitop__wb_bytes(b, mac, sizeof mac);
    return !b->oom;
}

/* The slot of key in the pushed set (r->lock held): its own, or the empty
 * one where it would go; NULL when the set has no room (none allocated). */
static struct pushed_slot *pushed_slot(struct pushed_set *p, const char key[33])
{
    if (p->cap == 0)
        return NULL;
    uint64_t h = 1469598103934665603ull; /* FNV-1a of the hex key */
    for (int i = 0; i < 32; i++)
        h = (h ^ (unsigned char)key[i]) * 1099511628211ull;
    for (size_t i = (size_t)h & (p->cap - 1);; i = (i + 1) & (p->cap - 1))
        if (!p->v[i].key[0] || memcmp(p->v[i].key, key, 33) == 0)
            return &p->v[i];
}

/* The remotes (bits) that took key from this process; r->lock held. */
static uint64_t pushed_mask(struct jitop__remote *r, const char key[33])
{
    struct pushed_slot *s = pushed_slot(&r->pushed, key);
    return s && s->key[0] ? s->mask : 0;
}

/* Records that the remotes in mask took key (r->lock held). Out of memory
 * only forgets it: the entry is then pushed again, never lost. */
static void note_pushed(struct jitop__remote *r, const char key[33], uint64_t mask)
{
    struct pushed_set *p = &r->pushed;
    if (!mask)
        return;
    if ((p->n + 1) * 2 > p->cap) {
        size_t cap = p->cap ? p->cap * 2 : 64;
        struct pushed_slot *v = calloc(cap, sizeof *v);
        if (!v)
            return;
        struct pushed_set grown = {v, cap, 0};
        for (size_t i = 0; i < p->cap; i++)
            if (p->v[i].key[0]) {
                *pushed_slot(&grown, p->v[i].key) = p->v[i];
                grown.n++;
            }
        free(p->v);
        *p = grown;
    }
    struct pushed_slot *s = pushed_slot(p, key);
    if (!s->key[0]) {
        memcpy(s->key, key, 33);
        p->n++;
    }
    s->mask |= mask;
}

static uint64_t server_bit(size_t i)
{
    return i < 64 ? (uint64_t)1 << i : 0;
}

/* PUTs one entry file (data, len bytes) to every live writable remote
 * whose bit is not in skip. Returns how many took it; *took gets their
 * bits. */
static int push_one(struct jitop__remote *r, const char key[33], const unsigned char *data,
                    size_t len, uint64_t skip, uint64_t *took)
{
    char path[64], err[CURL_ERR_CAP];
    int pushed = 0;
    *took = 0;
    snprintf(path, sizeof path, "/v%d/%.2s/%s", JITOP__FORMAT_VERSION, key, key);
    for (size_t i = 0; i < r->n; i++) {
        const jitop__remote_server *s = &r->servers[i];
        if (s->read_only || (skip & server_bit(i)) || jitop__remote_is_dead(s))
            continue;
        struct jitop__wbuf b = {0};
        jitop__wb_bytes(&b, data, len);
        if (b.oom || !sign_body(r, s, &b)) {
            free(b.p);
            continue;
        }
        jitop__http_reply rep;
        double t0 = jitop__now_ms();
        if (jitop__http_request(s, "PUT", path, b.p, b.n, NULL, s->put_timeout_ms, &rep, err,
                                sizeof err) != 0) {
            jitop__remote_mark_dead(s, "PUT failed: %s", err);
        } else if (rep.status < 200 || rep.status > 299) {
            jitop__remote_mark_dead(s,
                                    "PUT answered HTTP %ld (is the server writable? mark it "
                                    "read-only with URL|read-only)",
                                    rep.status);
        } else {
            pushed++;
            *took |= server_bit(i);
            jitop__remote_log(r, "remote cache %s: pushed %s (%zu bytes, %.1f ms)", s->shown,
                              key, b.n, jitop__now_ms() - t0);
        }
        jitop__http_reply_free(&rep);
        free(b.p);
    }
    return pushed;
}

static bool any_writable(struct jitop__remote *r)
{
    for (size_t i = 0; i < r->n; i++)
        if (!r->servers[i].read_only && !jitop__remote_is_dead(&r->servers[i]))
            return true;
    return false;
}

static void *push_thread(void *arg)
{
    struct jitop__remote *r = arg;
    pthread_mutex_lock(&r->lock);
    for (;;) {
        while (!r->head && !r->stop)
            pthread_cond_wait(&r->wake, &r->lock);
        struct push_item *it = r->head;
        if (!it)
            break; /* stopped, nothing left */
        if (r->stop && jitop__now_ms() > r->drain_until) {
            size_t dropped = 0;
            for (; it; dropped++) {
                struct push_item *next = it->next;
                free(it->data);
                free(it);
                it = next;
            }
            r->head = r->tail = NULL;
            jitop__remote_log(r, "remote cache: %zu pushes dropped at exit (over %d ms)", dropped,
                              JITOP__REMOTE_DRAIN_MS);
            break;
        }
        r->head = it->next;
        if (!r->head)
            r->tail = NULL;
        r->busy = true;
        pthread_mutex_unlock(&r->lock);
        uint64_t took = 0;
        (void)push_one(r, it->key, it->data, it->len, 0, &took);
        pthread_mutex_lock(&r->lock);
        note_pushed(r, it->key, took);
        r->busy = false;
        if (!r->head)
            pthread_cond_broadcast(&r->idle);
        free(it->data);
        free(it);
    }
    r->busy = false;
    pthread_cond_broadcast(&r->idle);
    pthread_mutex_unlock(&r->lock);
    return NULL;
}

/* Hands the entry file in b (consumed) to the push thread, started on the
 * first push. Pushing never fails a build: a thread that cannot start
 * means a synchronous push instead. */
static void push_later(struct jitop__remote *r, const char key[33], struct jitop__wbuf *b)
{
    struct push_item *it = calloc(1, sizeof *it);
    if (!it) {
        free(b->p);
        return;
    }
    memcpy(it->key, key, 33);
    it->data = b->p;
    it->len = b->n;
    b->p = NULL;
    pthread_mutex_lock(&r->lock);
    if (!r->started && !r->stop) {
        /* The thread blocks every signal: they belong to the application. */
        sigset_t all, old;
        sigfillset(&all);
        pthread_sigmask(SIG_SETMASK, &all, &old);
        r->started = pthread_create(&r->thread, NULL, push_thread, r) == 0;
        pthread_sigmask(SIG_SETMASK, &old, NULL);
    }
    if (r->started) {
        if (r->tail)
            r->tail->next = it;
        else
            r->head = it;
        r->tail = it;
        pthread_cond_signal(&r->wake);
        it = NULL;
    }
    pthread_mutex_unlock(&r->lock);
    if (it) {
        uint64_t took = 0;
        (void)push_one(r, it->key, it->data, it->len, 0, &took);
        pthread_mutex_lock(&r->lock);
        note_pushed(r, it->key, took);
        pthread_mutex_unlock(&r->lock);
        free(it->data);
        free(it);
    }
}

/* Waits until the push thread has sent (or failed) everything queued. */
static void flush(struct jitop__remote *r)
{
    pthread_mutex_lock(&r->lock);
    while (r->started && (r->head || r->busy))
        pthread_cond_wait(&r->idle, &r->lock);
    pthread_mutex_unlock(&r->lock);
}

void jitop__cache_push_flush(jitop__cache *c)
{
    if (c && c->remote)
        flush(c->remote);
}

uint64_t jitop__cache_pushed(jitop__cache *c, const char key[33])
{
    struct jitop__remote *r = c ? c->remote : NULL;
    if (!r)
        return 0;
    pthread_mutex_lock(&r->lock);
    uint64_t mask = pushed_mask(r, key);
    pthread_mutex_unlock(&r->lock);
    return mask;
}

void jitop__cache_note_pushed(jitop__cache *c, const char key[33], uint64_t mask)
{
    struct jitop__remote *r = c ? c->remote : NULL;
    if (!r)
        return;
    pthread_mutex_lock(&r->lock);
    note_pushed(r, key, mask);
    pthread_mutex_unlock(&r->lock);
}

int jitop__cache_put(jitop__cache *c, const char key[33], const jitop__entry *e)
{
    struct jitop__wbuf b = {0}, copy = {0};
    int status = jitop__cache_entry_serialize(key, e, &b);
    if (status != JITOP_OK) {
        free(b.p);
        return status;
    }
    bool push = c->remote && any_writable(c->remote);
    if (push) {
        jitop__wb_bytes(&copy, b.p, b.n);
        push = !copy.oom;
    }
    status = jitop__cache_put_bytes(c, key, &b);
    if (status == JITOP_OK && push)
        push_later(c->remote, key, &copy);
    free(copy.p);
    return status;
}

void jitop__cache_close(jitop__cache *c)
{
    if (!c)
        return;
    struct jitop__remote *r = c->remote;
    if (r) {
        pthread_mutex_lock(&r->lock);
        r->stop = true;
        r->drain_until = jitop__now_ms() + JITOP__REMOTE_DRAIN_MS;
        bool started = r->started;
        pthread_cond_signal(&r->wake);
        pthread_mutex_unlock(&r->lock);
        if (started && pthread_join(r->thread, NULL) != 0)
            fprintf(stderr, "jitop: warning: remote cache: cannot join the push thread\n");
        jitop__remote_free(r);
        c->remote = NULL;
    }
    jitop__cache_free(c);
}

int jitop__cache_remote_probe(jitop__cache *c, const char key[33], int *state, char **where)
{
    struct jitop__remote *r = c->remote;
    *state = JITOP__REMOTE_NONE;
    *where = NULL;
    if (!r)
        return JITOP_OK;
    *state = JITOP__REMOTE_DOWN;
    for (size_t i = 0; i < r->n; i++) {
        const jitop__remote_server *s = &r->servers[i];
        int answer = -1;
        jitop__entry e;
        if (!jitop__remote_is_dead(s)) {
            int status = fetch_one(r, s, key, &e, NULL, &answer);
            if (status != JITOP_OK)
                return status;
        }
        if (answer == 1)
            jitop__entry_free(&e);
        if (answer >= 0 && *state != JITOP__REMOTE_HIT) {
            *state = answer == 1 ? JITOP__REMOTE_HIT : JITOP__REMOTE_MISS;
            free(*where);
            if (!(*where = jitop__strdup(s->shown)))
                return jitop__fail(JITOP_ENOMEM, "out of memory");
        }
        if (answer == 1)
            break;
    }
    return JITOP_OK;
}

int jitop_remote_push(jitop_ctx *ctx, const char *key, int *pushed)
{
    jitop__entry e;
    struct jitop__wbuf b = {0};
    bool found = false;
    if (pushed)
        *pushed = 0;
    if (!ctx || !ctx->cache || !key || strlen(key) != 32 || !jitop__is_hex(key, 32))
        return jitop__fail(JITOP_EINVAL, "jitop_remote_push: NULL context or a key that is "
                                         "not 32 hex digits");
    jitop__cache *c = ctx->cache;
    struct jitop__remote *r = c->remote;
    if (!r)
        return jitop__fail(JITOP_EINVAL, "jitop_remote_push: no remote cache configured "
                                         "(JITOP_REMOTE_CACHE or jitop_config.remote_cache)");
    int status = jitop__cache_get_local(c, key, &e, &found);
    if (status != JITOP_OK)
        return status;
    if (!found)
        return jitop__fail(JITOP_ENOTFOUND, "jitop_remote_push: no valid entry %s in %s", key,
                           c->root);
    status = jitop__cache_entry_serialize(key, &e, &b);
    jitop__entry_free(&e);
    if (status == JITOP_OK) {
        /* What this process (or a worker that said so) already sent is not
         * sent again: the background push of a compile, then --push. */
        flush(r);
        pthread_mutex_lock(&r->lock);
        uint64_t had = pushed_mask(r, key), took = 0;
        pthread_mutex_unlock(&r->lock);
        int n = push_one(r, key, b.p, b.n, had, &took);
        pthread_mutex_lock(&r->lock);
        note_pushed(r, key, took);
        pthread_mutex_unlock(&r->lock);
        n += __builtin_popcountll(had);
        if (pushed)
            *pushed = n;
        if (n == 0)
            status = jitop__fail(JITOP_EIO,
                                 "jitop_remote_push: %s was pushed to no remote (each is "
                                 "read-only or down; the warnings say why)",
                                 key);
    }
    free(b.p);
    return status;
}

struct list_ctx {
    const char *url;
    int (*fn)(const char *url, const char *key, int64_t size, void *user);
    void *user;
};

static int list_one(const char *key, int64_t size, void *user)
{
    struct list_ctx *l = user;
    return l->fn(l->url, key, size, l->user);
}

int jitop_remote_list(jitop_ctx *ctx,
                      int (*fn)(const char *url, const char *key, int64_t size, void *user),
                      void *user)
{
    if (!ctx || !ctx->cache || !fn)
        return jitop__fail(JITOP_EINVAL, "jitop_remote_list: NULL context or callback");
    struct jitop__remote *r = ctx->cache->remote;
    if (!r)
        return jitop__fail(JITOP_EINVAL, "jitop_remote_list: no remote cache configured "
                                         "(JITOP_REMOTE_CACHE or jitop_config.remote_cache)");
    for (size_t i = 0; i < r->n; i++) {
        struct list_ctx l = {r->servers[i].shown, fn, user};
        int status = jitop__remote_list_server(&r->servers[i], list_one, &l);
        if (status != JITOP_OK)
            return status;
    }
    return JITOP_OK;
}
