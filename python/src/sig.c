/*
 * What a C++ kernel's parameters are, from its mangled name: a kernel that
 * is not extern "C" carries its parameter types in its symbol
 * ("_Z4axpyIfLi4EEvT_PS0_" -> "void axpy<float, 4>(float, float*)"), so a
 * Python int given to a float parameter can be passed as a float, and a
 * float given to a pointer or an int parameter refused. extern "C" kernels
 * carry nothing: their arguments go by size alone (PJ_ANY).
 *
 * The demangler is the C++ runtime's (__cxa_demangle in libstdc++), opened
 * on first use as libjitop does; where there is none every kind is PJ_ANY.
 */
#include "pyjitop.h"

#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

typedef char *(*cxa_demangle_fn)(const char *mangled, char *buf, size_t *len, int *status);

static cxa_demangle_fn demangler(void)
{
    static int tried; /* under the GIL */
    static cxa_demangle_fn fn;
    if (!tried) {
        tried = 1;
        void *h = dlopen("libstdc++.so.6", RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
        if (!h)
            h = dlopen("libstdc++.so.6", RTLD_NOW | RTLD_LOCAL);
        if (h)
            fn = (cxa_demangle_fn)(uintptr_t)dlsym(h, "__cxa_demangle");
        /* The handle stays open for the process: the function lives in it. */
    }
    return fn;
}

static int is_one_of(const char *t, size_t n, const char *const *names)
{
    for (; *names; names++)
        if (strlen(*names) == n && memcmp(t, *names, n) == 0)
            return 1;
    return 0;
}

/* The kind of one parameter type, t[0..n) (trimmed). */
static unsigned char classify(const char *t, size_t n)
{
    static const char *const ints[] = {
        "bool", "char", "signed char", "unsigned char", "short", "unsigned short", "int",
        "unsigned int", "long", "unsigned long", "long long", "unsigned long long", NULL};
    static const char *const floats[] = {"float", "double", NULL};
    int depth = 0;
    for (size_t k = 0; k < n; k++) {
        if (t[k] == '<' || t[k] == '(' || t[k] == '[')
            depth++;
        else if (t[k] == '>' || t[k] == ')' || t[k] == ']')
            depth--;
        else if ((t[k] == '*' || t[k] == '&') && depth == 0)
            return PJ_PTR;
    }
    /* cv-qualifiers on a by-value parameter change nothing for the caller. */
    for (int again = 1; again;) {
        again = 0;
        if (n > 6 && memcmp(t, "const ", 6) == 0)
            t += 6, n -= 6, again = 1;
        if (n > 9 && memcmp(t, "volatile ", 9) == 0)
            t += 9, n -= 9, again = 1;
    }
    if (is_one_of(t, n, ints))
        return PJ_INT;
    if (is_one_of(t, n, floats))
        return PJ_FLOAT;
    return PJ_ANY;
}

void pj_param_kinds(const char *lowered, size_t nparams, unsigned char *kinds)
{
    memset(kinds, PJ_ANY, nparams);
    cxa_demangle_fn fn;
    if (!lowered || strncmp(lowered, "_Z", 2) != 0 || !(fn = demangler()))
        return;
    int status = -1;
    char *sig = fn(lowered, NULL, NULL, &status);
    if (!sig || status != 0) {
        free(sig);
        return;
    }
    /* The parameter list is the last parenthesized group. */
    size_t len = strlen(sig), open = 0;
    int depth = 0, found = 0;
    if (len && sig[len - 1] == ')') {
        for (size_t k = len; k-- > 0;) {
            if (sig[k] == ')')
                depth++;
            else if (sig[k] == '(' && --depth == 0) {
                open = k, found = 1;
                break;
            }
        }
    }
    unsigned char tmp[256];
    unsigned char *out = nparams <= sizeof tmp ? tmp : NULL;
    size_t count = 0;
    if (found && out) {
        const char *p = sig + open + 1, *end = sig + len - 1;
        int d = 0;
        const char *start = p;
        for (; p <= end && count <= nparams; p++) {
            if (p < end && (*p == '<' || *p == '(' || *p == '['))
                d++;
            else if (p < end && (*p == '>' || *p == ')' || *p == ']'))
                d--;
            else if (p == end || (*p == ',' && d == 0)) {
                const char *a = start, *b = p;
                while (a < b && *a == ' ')
                    a++;
                while (b > a && b[-1] == ' ')
                    b--;
                if (b > a && count < nparams)
                    out[count] = classify(a, (size_t)(b - a));
                if (b > a)
                    count++;
                start = p + 1;
            }
        }
        /* "k(void)"-style lists and any disagreement with the driver's count
         * leave every kind PJ_ANY: sizes alone are still right. */
        if (count == nparams)
            memcpy(kinds, out, nparams);
    }
    free(sig);
}
