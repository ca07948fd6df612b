/* libFuzzer target: the cache entry reader (the file header check and the
 * entry parser), the bytes a cubin handed to the driver comes from.
 *
 * Each input is read twice: as it is (the header check must refuse any
 * damage without reading past the end), and with its header repaired (magic,
 * format version, payload length and checksum made right), so that the
 * mutations reach the parser behind the checksum. A valid parse must give a
 * binary inside the input. Seeds: entries written by jitop
 * (tests/fuzz/corpus/fuzz_entry/). */
#include "cache/cache_private.h"

#include <stdlib.h>
#include <string.h>

static void parse(const unsigned char *data, size_t size)
{
    uint32_t flags = 0;
    if (jitop__file_check(data, size, JITOP__ENTRY_MAGIC, &flags))
        return;
    unsigned char *buf = malloc(size ? size : 1);
    if (!buf)
        return;
    memcpy(buf, data, size);
    jitop__entry e;
    const char *why = jitop__cache_entry_parse(NULL, &buf, size, flags, &e);
    if (!why) {
        /* The binary is NUL-terminated and no larger than the file. */
        if (e.bin.size >= size || e.bin.data[e.bin.size] != '\0')
            abort();
        jitop__entry_free(&e);
    }
    free(buf);
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
    jitop__file_begin(&head, JITOP__ENTRY_MAGIC, 0);
    if (!head.oom) {
        memcpy(fixed, head.p, 12); /* magic and version; the flags are the input's */
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
