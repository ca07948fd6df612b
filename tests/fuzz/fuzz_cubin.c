/* libFuzzer target: the cubin reader (jitop__cubin_global_bytes), which
 * looks inside binaries read from the cache: every ELF field it follows
 * must stay inside the input. Seeds: cubins from NVRTC
 * (tests/fuzz/corpus/fuzz_cubin/). */
#include "compile/compile.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* An exact-size copy: ASan then sees any read past the end. */
    unsigned char *copy = malloc(size ? size : 1);
    if (!copy)
        return 0;
    memcpy(copy, data, size);
    (void)jitop__cubin_global_bytes(copy, size);
    free(copy);
    return 0;
}
