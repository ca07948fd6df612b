/* A process's memo of include scans, keyed by the bytes scanned: a text's
 * directives are a function of its bytes alone (scan.c), so a text whose
 * XXH3-128 hash and length match one scanned before in this process takes
 * that scan's answer. The caller has just read and hashed the file
 * (jitop__dep_read), so no stat data is trusted and nothing can be stale:
 * an edited header has another hash and is scanned. Resolution (where a
 * name is found) is not memoized: it depends on the including file's
 * directory, the include dirs and the file system, and runs every time.
 *
 * What it saves: `jitop build` looks a source up in the cache before it
 * builds it, and a process builds the same toolkit headers for each of its
 * sources, instances and reloads; each of those scans all of cuda_fp16.h
 * and company again otherwise (about 1.6 MB for kernels/layernorm.cu).
 * Cost: a copy of the answer (a few KB per header) and the memory kept:
 * at most MEMO_MAX_ENTRIES texts and MEMO_MAX_BYTES of names, after which
 * the memo starts over.
 *
 * Threads: one mutex, taken with trylock; a thread that finds it held
 * scans on its own (the answer is the same), so nothing ever waits on it
 * and a child forked while another thread held it only loses the memo. */
#include "compile/compile.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define MEMO_MAX_ENTRIES 4096
#define MEMO_MAX_BYTES (16 << 20)

struct memo_entry {
    XXH128_hash_t hash;
    size_t len;
    jitop__includes incs;
};

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static struct memo_entry *g_v; /* open addressing on the hash */
static size_t g_cap, g_n, g_bytes;

static size_t slot_of(XXH128_hash_t h, size_t cap)
{
    return (size_t)h.low64 & (cap - 1);
}

static bool same(const struct memo_entry *e, XXH128_hash_t h, size_t len)
{
    return e->len == len && XXH128_isEqual(e->hash, h);
}

/* The memory a copy of l holds beyond its arrays' slots, roughly. */
static size_t includes_bytes(const jitop__includes *l)
{
    size_t b = l->n * sizeof *l->v + l->ndefs * sizeof *l->defs;
    for (size_t i = 0; i < l->n; i++)
        b += (l->v[i].name ? strlen(l->v[i].name) + 1 : 0) +
             (l->v[i].text ? strlen(l->v[i].text) + 1 : 0);
    for (size_t i = 0; i < l->ndefs; i++)
        b += strlen(l->defs[i].name) + 1 + (l->defs[i].value ? strlen(l->defs[i].value) + 1 : 0);
    return b;
}

static bool dup_or_null(const char *s, char **out)
{
    *out = s ? jitop__strdup(s) : NULL;
    return !s || *out;
}

/* A deep copy; JITOP_ENOMEM leaves to empty. */
static int includes_copy(const jitop__includes *from, jitop__includes *to)
{
    memset(to, 0, sizeof *to);
    if (from->n) {
        to->v = calloc(from->n, sizeof *to->v);
        if (!to->v)
            goto oom;
        to->cap = from->n;
    }
    for (; to->n < from->n; to->n++) {
        jitop__include *d = &to->v[to->n];
        *d = from->v[to->n];
        d->name = d->text = NULL;
        if (!dup_or_null(from->v[to->n].name, &d->name) ||
            !dup_or_null(from->v[to->n].text, &d->text)) {
            free(d->name);
            goto oom;
        }
    }
    if (from->ndefs) {
        to->defs = calloc(from->ndefs, sizeof *to->defs);
        if (!to->defs)
            goto oom;
        to->defcap = from->ndefs;
    }
    for (; to->ndefs < from->ndefs; to->ndefs++) {
        jitop__define *d = &to->defs[to->ndefs];
        if (!dup_or_null(from->defs[to->ndefs].name, &d->name) ||
            !dup_or_null(from->defs[to->ndefs].value, &d->value)) {
            free(d->name);
            d->name = NULL;
            goto oom;
        }
    }
    return JITOP_OK;
oom:
    jitop__includes_free(to);
    return JITOP_ENOMEM;
}

static void memo_clear(void)
{
    for (size_t i = 0; i < g_cap; i++)
        if (g_v[i].len || g_v[i].incs.v || g_v[i].incs.defs)
            jitop__includes_free(&g_v[i].incs);
    free(g_v);
    g_v = NULL;
    g_cap = g_n = g_bytes = 0;
}

/* Looks (hash, len) up; under the lock. */
static struct memo_entry *memo_find(XXH128_hash_t h, size_t len, bool *found)
{
    *found = false;
    if (!g_cap)
        return NULL;
    size_t i = slot_of(h, g_cap);
    for (; g_v[i].len; i = (i + 1) & (g_cap - 1))
        if (same(&g_v[i], h, len)) {
            *found = true;
            return &g_v[i];
        }
    return &g_v[i];
}

/* Keeps a copy of incs for (hash, len); under the lock. A failure to grow
 * or copy only leaves the memo without it. Empty texts (len 0) are not
 * kept: len 0 marks a free slot. */
static void memo_put(XXH128_hash_t h, size_t len, const jitop__includes *incs)
{
    size_t bytes = includes_bytes(incs);
    if (len == 0 || bytes > MEMO_MAX_BYTES)
        return;
    if (g_n + 1 > MEMO_MAX_ENTRIES || g_bytes + bytes > MEMO_MAX_BYTES)
        memo_clear();
    if (2 * (g_n + 1) > g_cap) {
        size_t cap = g_cap ? 2 * g_cap : 64;
        struct memo_entry *v = calloc(cap, sizeof *v);
        if (!v)
            return;
        for (size_t i = 0; i < g_cap; i++) {
            if (!g_v[i].len)
                continue;
            size_t k = slot_of(g_v[i].hash, cap);
            while (v[k].len)
                k = (k + 1) & (cap - 1);
            v[k] = g_v[i];
        }
        free(g_v);
        g_v = v;
        g_cap = cap;
    }
    bool found;
    struct memo_entry *e = memo_find(h, len, &found);
    if (!e || found || includes_copy(incs, &e->incs) != JITOP_OK)
        return;
    e->hash = h;
    e->len = len;
    g_n++;
    g_bytes += bytes;
}

int jitop__scan_includes_memo(const char *text, size_t len, XXH128_hash_t hash,
                              jitop__includes *out)
{
    if (pthread_mutex_trylock(&g_lock) == 0) {
        bool found;
        struct memo_entry *e = memo_find(hash, len, &found);
        int status = found ? includes_copy(&e->incs, out) : JITOP_OK;
        pthread_mutex_unlock(&g_lock);
        if (found)
            return status;
    }
    int status = jitop__scan_includes(text, len, out);
    if (status == JITOP_OK && pthread_mutex_trylock(&g_lock) == 0) {
        memo_put(hash, len, out);
        pthread_mutex_unlock(&g_lock);
    }
    return status;
}

void jitop__scan_memo_clear(void)
{
    pthread_mutex_lock(&g_lock);
    memo_clear();
    pthread_mutex_unlock(&g_lock);
}

size_t jitop__scan_memo_size(void)
{
    pthread_mutex_lock(&g_lock);
    size_t n = g_n;
    pthread_mutex_unlock(&g_lock);
    return n;
}
