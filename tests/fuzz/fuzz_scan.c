/* libFuzzer target: the include scanner's fast path against its reference
 * reader (src/compile/scan.c). Both must find the same directives, with the
 * same names, lines and flags, and the same #defines, for any bytes: the
 * fast path reads plain bytes directly and hands every token that meets a
 * backslash (or '?' when trigraphs are read) to the reference reader, and
 * a mistake there is a header silently missed. Aborts on any difference.
 * Seeds: the fuzz_deps sources with tricky spellings
 * (tests/fuzz/corpus/fuzz_scan/). */
#include "compile/compile.h"

#include <stdlib.h>
#include <string.h>

static bool same_str(const char *a, const char *b)
{
    return (!a && !b) || (a && b && strcmp(a, b) == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    jitop__includes f, r;
    const char *text = (const char *)data;
    int sf = jitop__scan_includes(text, size, &f);
    int sr = jitop__scan_includes_reference(text, size, &r);
    if (sf != sr)
        abort();
    if (sf != JITOP_OK)
        return 0; /* out of memory in both */
    if (f.n != r.n || f.ndefs != r.ndefs)
        abort();
    for (size_t i = 0; i < f.n; i++)
        if (!same_str(f.v[i].name, r.v[i].name) || !same_str(f.v[i].text, r.v[i].text) ||
            f.v[i].line != r.v[i].line || f.v[i].quoted != r.v[i].quoted ||
            f.v[i].next != r.v[i].next || f.v[i].embed != r.v[i].embed)
            abort();
    for (size_t i = 0; i < f.ndefs; i++)
        if (!same_str(f.defs[i].name, r.defs[i].name) ||
            !same_str(f.defs[i].value, r.defs[i].value))
            abort();
    jitop__includes_free(&f);
    jitop__includes_free(&r);
    return 0;
}
