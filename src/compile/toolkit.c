/* The CUDA toolkit's headers: where they are, so that <cuda_fp16.h>,
 * <cooperative_groups.h>, <cub/...> or <curand_kernel.h> compile without an
 * -I, as with nvcc, CuPy and torch; and what to say when NVRTC cannot open a
 * header (a toolkit header on a machine without one, a C++ standard library
 * header NVRTC does not have).
 *
 * NVRTC 13.0 resolves no #include by itself: without an -I, cuda_fp16.h,
 * cuda_runtime.h, vector_types.h, nv/target, cuda/std/... all fail with "no
 * directories in search list" (its libnvrtc-builtins holds only what it
 * includes implicitly). So every header it reads comes from the search path,
 * which the include scanner resolves the same way (deps.c): adding the
 * toolkit's folders after the user's shadows no built-in header, and the
 * key holds each toolkit header that is included, hashed like any other. */
#include "compile/compile.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static bool is_file(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

static bool is_dir(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* Takes dir (malloc'd, consumed) when it holds the toolkit's cuda_fp16.h:
 * the include folder of NVRTC's own pip wheel has nvrtc.h only. */
static bool try_include(jitop__toolkit *t, char *dir)
{
    bool taken = false;
    if (!dir)
        return false;
    size_t used = strlen(t->tried);
    snprintf(t->tried + used, sizeof t->tried - used, "%s%s", used ? ", " : "", dir);
    char *marker = jitop__sprintf("%s/cuda_fp16.h", dir);
    if (marker && is_file(marker) && strlen(dir) + sizeof "/cccl" <= sizeof t->include) {
        snprintf(t->include, sizeof t->include, "%s", dir);
        snprintf(t->cccl, sizeof t->cccl, "%s/cccl", dir);
        if (!is_dir(t->cccl))
            t->cccl[0] = '\0';
        taken = true;
    }
    free(marker);
    free(dir);
    return taken;
}

/* dir/rel made absolute, its ".." taken after the links before it as the
 * kernel does (jitop__abspath); NULL on ENOMEM. */
static char *joined(const char *dir, const char *rel)
{
    char *j = jitop__sprintf("%s/%s", dir, rel);
    char *abs = j ? jitop__abspath(j) : NULL;
    free(j);
    return abs;
}

void jitop__toolkit_find(jitop__toolkit *t, const char *nvrtc_file, const char *cuda_home,
                         const char *built_home)
{
    memset(t, 0, sizeof *t);
    if (nvrtc_file && nvrtc_file[0]) {
        char *lib = jitop__dirname(nvrtc_file);
        bool found = lib && try_include(t, joined(lib, "../include"));
        free(lib);
        if (found)
            return;
    }
    if (cuda_home && cuda_home[0] && try_include(t, joined(cuda_home, "include")))
        return;
    if (built_home && built_home[0] && try_include(t, joined(built_home, "include")))
        return;
}

/* C++ standard library headers, and the C headers NVRTC users reach for:
 * NVRTC has none of them. */
static const char *const std_headers[] = {
    "algorithm", "any", "array", "atomic", "barrier", "bit", "bitset", "cassert", "cctype",
    "cerrno", "cfenv", "cfloat", "charconv", "chrono", "cinttypes", "climits", "clocale", "cmath",
    "compare", "complex", "concepts", "condition_variable", "coroutine", "csetjmp", "csignal",
    "cstdarg", "cstddef", "cstdint", "cstdio", "cstdlib", "cstring", "ctime", "cuchar", "cwchar",
    "cwctype", "deque", "exception", "execution", "expected", "filesystem", "format",
    "forward_list", "fstream", "functional", "future", "initializer_list", "iomanip", "ios",
    "iosfwd", "iostream", "istream", "iterator", "latch", "limits", "list", "locale", "map",
    "mdspan", "memory", "memory_resource", "mutex", "new", "numbers", "numeric", "optional",
    "ostream", "print", "queue", "random", "ranges", "ratio", "regex", "scoped_allocator",
    "semaphore", "set", "shared_mutex", "source_location", "span", "sstream", "stack",
    "stdexcept", "stop_token", "streambuf", "string", "string_view", "syncstream",
    "system_error", "thread", "tuple", "type_traits", "typeindex", "typeinfo", "unordered_map",
    "unordered_set", "utility", "valarray", "variant", "vector", "version",
    "assert.h", "ctype.h", "errno.h", "float.h", "inttypes.h", "limits.h", "math.h",
    "stdarg.h", "stdbool.h", "stddef.h", "stdint.h", "stdio.h", "stdlib.h", "string.h",
    "time.h", "wchar.h",
};

static bool is_std_header(const char *name)
{
    for (size_t i = 0; i < sizeof std_headers / sizeof std_headers[0]; i++)
        if (strcmp(name, std_headers[i]) == 0)
            return true;
    return false;
}

/* "<cuda/std/X>" when the toolkit's libcu++ has X for the standard header
 * name ("stdint.h" -> "cstdint"), else NULL. Malloc'd. */
static char *libcudacxx_for(const jitop__toolkit *t, const char *name)
{
    char *cxx = NULL, *found = NULL;
    size_t n = strlen(name);
    if (n > 2 && strcmp(name + n - 2, ".h") == 0)
        cxx = jitop__sprintf("c%.*s", (int)(n - 2), name);
    else
        cxx = jitop__strdup(name);
    const char *roots[] = {t->cccl, t->include};
    for (size_t i = 0; cxx && !found && i < 2; i++) {
        if (!roots[i][0])
            continue;
        char *path = jitop__sprintf("%s/cuda/std/%s", roots[i], cxx);
        if (path && is_file(path))
            found = jitop__sprintf("<cuda/std/%s>", cxx);
        free(path);
    }
    free(cxx);
    return found;
}

char *jitop__toolkit_hint(const jitop__toolkit *t, const char *log)
{
    static const char *const marks[] = {"open source file \"", "open include file \""};
    const char *p = NULL;
    for (size_t i = 0; !p && i < 2; i++)
        if ((p = log ? strstr(log, marks[i]) : NULL))
            p += strlen(marks[i]);
    const char *end = p ? strchr(p, '"') : NULL;
    if (!end || end == p)
        return NULL;
    char *name = jitop__sprintf("%.*s", (int)(end - p), p);
    char *hint = NULL;
    if (!name)
        return NULL;
    if (is_std_header(name)) {
        char *alt = libcudacxx_for(t, name);
        hint = alt ? jitop__sprintf("NVRTC has no C++ standard library, so <%s> does not exist "
                                    "in device code: include %s (libcu++, which ships with the "
                                    "CUDA toolkit and is found without an -I) instead",
                                    name, alt)
                   : jitop__sprintf("NVRTC has no C++ standard library, so <%s> does not exist "
                                    "in device code; libcu++ (<cuda/std/...>, in the CUDA "
                                    "toolkit) has device versions of much of it",
                                    name);
        free(alt);
    } else if (!t->include[0]) {
        hint = jitop__sprintf("the CUDA toolkit's headers were not found (jitop looked for "
                              "cuda_fp16.h in %s): if %s is one of them, install the toolkit's "
                              "headers or set CUDA_HOME to the toolkit's folder",
                              t->tried[0] ? t->tried : "no folder", name);
    }
    free(name);
    return hint;
}
