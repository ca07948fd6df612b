/* Listing a remote (jitop ls --remote): WebDAV PROPFIND, Depth 1, of
 * <base>/v<F>/ (the <ab>/ folders) and of each folder (the entries with
 * their getcontentlength). Plain GET/PUT servers cannot list, and say so
 * with a 4xx/5xx status; the caller is told "cannot list".
 *
 * The multistatus reply is read for two elements only, <href> and
 * <getcontentlength>, whatever their namespace prefix: names that are not
 * 32 hex digits (or 2, for folders) are skipped, so an odd reply can only
 * make the list shorter. */
#include "cache/remote_private.h"

#include <ctype.h>

static const char propfind_body[] =
    "<?xml version=\"1.0\" encoding=\"utf-8\"?>\n"
    "<D:propfind xmlns:D=\"DAV:\"><D:prop><D:getcontentlength/></D:prop></D:propfind>\n";

/* The text of the next element whose local name is name, from *p on:
 * [*vs, *ve). false when there is none before end. */
static bool next_elem(const char **p, const char *end, const char *name, const char **vs,
                      const char **ve)
{
    size_t nl = strlen(name);
    for (const char *q = *p; q < end && (q = memchr(q, '<', (size_t)(end - q))); q++) {
        const char *t = q + 1;
        if (t < end && (*t == '/' || *t == '?' || *t == '!'))
            continue;
        const char *te = t;
        while (te < end && !isspace((unsigned char)*te) && *te != '>' && *te != '/')
            te++;
        const char *local = t;
        for (const char *c = t; c < te; c++)
            if (*c == ':')
                local = c + 1;
        if ((size_t)(te - local) != nl || strncasecmp(local, name, nl) != 0)
            continue;
        const char *gt = memchr(te, '>', (size_t)(end - te));
        if (!gt)
            return false;
        if (gt[-1] == '/') { /* an empty element */
            *vs = *ve = gt + 1;
            *p = gt + 1;
            return true;
        }
        const char *close = gt + 1;
        while (close < end && *close != '<')
            close++;
        if (close >= end)
            return false;
        *vs = gt + 1;
        *ve = close;
        *p = close;
        return true;
    }
    return false;
}

/* Whether [s, s + n) is n lowercase hex digits (jitop__is_hex wants a
 * whole string). */
static bool hex_run(const char *s, const char *e, size_t n)
{
    if ((size_t)(e - s) != n)
        return false;
    for (; s < e; s++)
        if (!((*s >= '0' && *s <= '9') || (*s >= 'a' && *s <= 'f')))
            return false;
    return true;
}

/* The last path segment of an href (a trailing '/' dropped). */
static void last_segment(const char *s, const char *e, const char **ls, const char **le)
{
    while (e > s && e[-1] == '/')
        e--;
    const char *b = e;
    while (b > s && b[-1] != '/')
        b--;
    *ls = b;
    *le = e;
}

/* One PROPFIND of path: 0 with the reply; else a failure said. */
static int propfind(const jitop__remote_server *s, const char *path, jitop__http_reply *rep)
{
    char err[CURL_ERR_CAP];
    if (jitop__http_request(s, "PROPFIND", path, (const unsigned char *)propfind_body,
                            sizeof propfind_body - 1, "1", s->put_timeout_ms, rep, err,
                            sizeof err) != 0)
        return jitop__fail(JITOP_EIO, "remote cache %s: PROPFIND %s failed: %s", s->shown, path,
                           err);
    if (rep->status == 404) /* nothing pushed yet */
        return JITOP_OK;
    if (rep->status != 207) {
        long st = rep->status;
        jitop__http_reply_free(rep);
        return jitop__fail(JITOP_EINVAL,
                           "remote cache %s: cannot list: the server answered HTTP %ld to "
                           "PROPFIND (listing needs WebDAV PROPFIND, e.g. nginx's dav_ext_methods "
                           "PROPFIND; GET and PUT still work without it)",
                           s->shown, st);
    }
    return JITOP_OK;
}

int jitop__remote_list_server(const jitop__remote_server *s,
                              int (*fn)(const char *key, int64_t size, void *user), void *user)
{
    jitop__http_reply top = {0};
    char path[64];
    snprintf(path, sizeof path, "/v%d/", JITOP__FORMAT_VERSION);
    int status = propfind(s, path, &top);
    if (status != JITOP_OK || top.status != 207)
        goto out;
    const char *p = (const char *)top.body, *end = p + top.len, *vs, *ve;
    while (status == JITOP_OK && next_elem(&p, end, "href", &vs, &ve)) {
        const char *ls, *le;
        last_segment(vs, ve, &ls, &le);
        if (!hex_run(ls, le, 2))
            continue;
        jitop__http_reply sub = {0};
        char subpath[64];
        snprintf(subpath, sizeof subpath, "/v%d/%.2s/", JITOP__FORMAT_VERSION, ls);
        status = propfind(s, subpath, &sub);
        const char *q = sub.body ? (const char *)sub.body : "", *qend = q + sub.len;
        while (status == JITOP_OK && sub.status == 207 && next_elem(&q, qend, "href", &vs, &ve)) {
            const char *ks, *ke, *cs, *ce;
            last_segment(vs, ve, &ks, &ke);
            if (!hex_run(ks, ke, 32))
                continue;
            char key[33];
            memcpy(key, ks, 32);
            key[32] = '\0';
            /* The size belongs to this response when it comes before the
             * next href. */
            const char *probe = q, *nh = q, *nhe;
            int64_t size = -1;
            if (!next_elem(&nh, qend, "href", &nhe, &nhe))
                nh = qend;
            if (next_elem(&probe, nh, "getcontentlength", &cs, &ce)) {
                char *e2 = NULL;
                long long v = strtoll(cs, &e2, 10);
                if (e2 != cs && v >= 0)
                    size = v;
            }
            int rc = fn(key, size, user);
            if (rc != 0)
                status = rc;
        }
        jitop__http_reply_free(&sub);
    }
out:
    jitop__http_reply_free(&top);
    return status;
}
