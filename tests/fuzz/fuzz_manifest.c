/* libFuzzer target: the stat manifest reader, whose dep list decides
 * whether the stat fast path may skip hashing.
 *
 * Each input is checked as it is, then with its header repaired (magic,
 * format version, payload length and checksum made right) so that the
 * mutations reach the payload parser. A parse that succeeds must give a
 * 32-character key and paths that fit in the input. Seeds: manifests
 * written by jitop (tests/fuzz/corpus/fuzz_manifest/). */
#include "cache/cache_private.h"

#include <stdlib.h>
#include <string.h>

static void parse(const unsigned char *data, size_t size)
{
    uint32_t flags = 0;
    jitop__deps deps;
    char key[33];
    bool valid = false;
    if (jitop__file_check(data, size, JITOP__MANIFEST_MAGIC, &flags))
        return;
    if (jitop__manifest_parse(data, size, &deps, key, &valid) != JITOP_OK || !valid)
        return;
    if (strlen(key) != 32)
        abort();
    size_t total = 0;
    for (size_t i = 0; i < deps.n; i++)
        total += strlen(deps.v[i].path);
    if (total > size)
        abort();
    jitop__deps_free(&deps);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    parse(data, size);
    if (size < JITOP__FILE_HEADER_SIZE)
        return 0;
    unsigned char *fixed = malloc(size);
    if (!fixed)
        return 0;
    memcpy(fixed, data, size);
    struct jitop__wbuf head = {0};
    jitop__file_begin(&head, JITOP__MANIFEST_MAGIC, 0);
    if (!head.oom) {
        memcpy(fixed, head.p, 12);
        uint64_t len = size - JITOP__FILE_HEADER_SIZE;
        for (int i = 0; i < 8; i++)
            fixed[16 + i] = (unsigned char)(len >> (8 * i));
        XXH128_canonical_t c;
        XXH128_canonicalFromHash(&c, XXH3_128bits(fixed + JITOP__FILE_HEADER_SIZE, len));
        memcpy(fixed + 24, c.digest, sizeof c.digest);
        parse(fixed, size);
    }
    free(head.p);
    free(fixed);
    return 0;
}
