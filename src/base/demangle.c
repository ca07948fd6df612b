/* C++ symbol names as people write them: the Itanium ABI demangler of the
 * C++ runtime (__cxa_demangle in libstdc++), opened with dlopen the first
 * time a name needs it, so that the C library links no C++ runtime and a
 * warm load never pays for it. Kernels and globals are found by the names
 * the compiler gave them; this turns those back into what the user asked
 * for ("_Z3axpIfLi4EEvPT_" -> "void axp<float, 4>(float*)"). */
#include "base/base.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef char *(*cxa_demangle_fn)(const char *mangled, char *buf, size_t *len, int *status);

static pthread_once_t demangler_once = PTHREAD_ONCE_INIT;
static cxa_demangle_fn demangler;

static void open_demangler(void)
{
    /* RTLD_NOLOAD first: a process with C++ in it has the runtime already. */
    void *h = dlopen("libstdc++.so.6", RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
    if (!h)
        h = dlopen("libstdc++.so.6", RTLD_NOW | RTLD_LOCAL);
    if (h)
        demangler = (cxa_demangle_fn)(uintptr_t)dlsym(h, "__cxa_demangle");
    /* The handle stays open for the process: the function lives in it. */
}

char *jitop__demangle(const char *symbol)
{
    if (!symbol)
        return NULL;
    if (strncmp(symbol, "_Z", 2) == 0 && pthread_once(&demangler_once, open_demangler) == 0 &&
        demangler) {
        int status = -1;
        char *out = demangler(symbol, NULL, NULL, &status);
        if (out && status == 0)
            return out;
        free(out);
    }
    return jitop__strdup(symbol);
}
