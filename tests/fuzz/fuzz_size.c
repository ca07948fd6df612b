/* libFuzzer target: size parsing ($JITOP_CACHE_MAX_SIZE,
 * jitop__parse_size). Besides memory safety, an independent check of the
 * grammar: whatever the parser accepts must be -?DIGITS[.DIGITS][K|M|G|T]
 * [iB|B] (no hex, exponent, blank, inf or nan), and a plain number must
 * give exactly its value. Seeds: tests/fuzz/corpus/fuzz_size/. */
#include "base/base.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

static bool grammar_ok(const char *s)
{
    const char *p = s;
    if (*p == '-')
        p++;
    if (!isdigit((unsigned char)*p))
        return false;
    while (isdigit((unsigned char)*p))
        p++;
    if (*p == '.') {
        p++;
        if (!isdigit((unsigned char)*p))
            return false;
        while (isdigit((unsigned char)*p))
            p++;
    }
    bool unit = *p && strchr("kKmMgGtT", *p);
    if (unit)
        p++;
    if (unit && p[0] == 'i' && p[1] == 'B')
        p += 2;
    else if (*p == 'B')
        p++;
    return *p == '\0';
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1);
    if (!s)
        return 0;
    memcpy(s, data, size);
    s[size] = '\0';
    int64_t v = 12345;
    if (jitop__parse_size(s, &v) == JITOP_OK) {
        if (!grammar_ok(s) || v < -1)
            abort();
        if (s[0] == '-' && v != -1)
            abort();
        if (strspn(s, "0123456789") == strlen(s) && v != (int64_t)strtoull(s, NULL, 10))
            abort();
    } else if (v != 12345) {
        abort(); /* a failure leaves the output alone */
    }
    free(s);
    return 0;
}
