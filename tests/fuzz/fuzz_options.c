/* libFuzzer target: option normalization (jitop__unit_init) and what is
 * derived from a unit without NVRTC: its cache key and manifest id, and
 * the escaping of what messages show (jitop__escape).
 *
 * The input is a list of NUL-separated strings: the arch, the options, an
 * empty string, then name expressions. A unit that normalizes must have
 * an absolute path for every include dir; every escaped text must hold no
 * control byte. Seeds: tests/fuzz/corpus/fuzz_options/. */
#include "cache/cache.h"

#include <stdlib.h>
#include <string.h>

static void check_escape(const char *s)
{
    char *e = jitop__escape(s);
    if (!e)
        return;
    for (const unsigned char *p = (const unsigned char *)e; *p; p++)
        if (*p < 0x20 || *p == 0x7f)
            abort();
    free(e);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *buf = malloc(size + 1);
    if (!buf)
        return 0;
    memcpy(buf, data, size);
    buf[size] = '\0';
    /* Split at NULs: tokens[0] the arch, then options until an empty
     * token, then names. */
    const char *tokens[64];
    size_t ntok = 0;
    for (size_t off = 0; off <= size && ntok < 64;) {
        tokens[ntok++] = buf + off;
        off += strlen(buf + off) + 1;
    }
    size_t split = 1;
    while (split < ntok && tokens[split][0] != '\0')
        split++;
    const char *const *opts = ntok > 1 ? tokens + 1 : NULL;
    size_t nopts = ntok > 1 ? split - 1 : 0;
    const char *const *names = split + 1 < ntok ? tokens + split + 1 : NULL;
    size_t nnames = split + 1 < ntok ? ntok - split - 1 : 0;
    for (int inline_unit = 0; inline_unit <= 1; inline_unit++) {
        jitop__unit u;
        int st = jitop__unit_init(&u, inline_unit ? NULL : "/fuzz/k.cu",
                                  inline_unit ? "__global__ void k() {}" : NULL, opts, nopts,
                                  names, nnames, tokens[0]);
        if (st != JITOP_OK)
            continue;
        for (size_t i = 0; i < u.include_dirs.n; i++)
            if (u.include_dirs.v[i][0] != '/')
                abort();
        jitop__deps none = {0};
        char key[33], id[33];
        jitop__cache_key(&u, &none, key);
        jitop__manifest_id(&u, id);
        for (size_t i = 0; i < u.options.n; i++)
            check_escape(u.options.v[i]);
        jitop__unit_free(&u);
    }
    for (size_t i = 0; i < ntok; i++)
        check_escape(tokens[i]);
    free(buf);
    return 0;
}
