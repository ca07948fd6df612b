/* See fakedriver.h. */
#include "fakedriver.h"

#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Set in the re-executed process. */
#define FAKE_CHILD_MARKER "JITOP_TEST_FAKEDRIVER_CHILD"

static void reexec(char **argv)
{
    char *path = NULL, *wrapper = NULL;
    char **args = NULL;
    const char *build = getenv("JITOP_BUILD");
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (!build || !*build) {
        fprintf(stderr, "%s: JITOP_BUILD is not set (make test sets it)\n", argv[0]);
        return;
    }
    if (n < 0) {
        fprintf(stderr, "%s: readlink /proc/self/exe: %s\n", argv[0], strerror(errno));
        return;
    }
    self[n] = '\0';
    const char *old = getenv("LD_LIBRARY_PATH");
    const char *given = getenv("JITOP_TEST_WRAPPER");
    size_t argc = 0;
    while (argv[argc])
        argc++;
    wrapper = strdup(given ? given : "");
    if (asprintf(&path, "%s/fakecuda%s%s", build, old && *old ? ":" : "", old ? old : "") < 0)
        path = NULL;
    /* The wrapper's words (at most one per character), self, the arguments. */
    if (wrapper)
        args = calloc(strlen(wrapper) + argc + 2, sizeof *args);
    if (path && args) {
        size_t nargs = 0;
        for (char *save = NULL, *word = strtok_r(wrapper, " \t", &save); word;
             word = strtok_r(NULL, " \t", &save))
            args[nargs++] = word;
        args[nargs++] = self;
        for (size_t i = 1; i < argc; i++)
            args[nargs++] = argv[i];
        if (setenv("LD_LIBRARY_PATH", path, 1) == 0 && setenv(FAKE_CHILD_MARKER, "1", 1) == 0)
            execvp(args[0], args);
        fprintf(stderr, "%s: cannot run %s: %s\n", argv[0], args[0], strerror(errno));
    } else {
        fprintf(stderr, "%s: out of memory\n", argv[0]);
    }
    free(args);
    free(wrapper);
    free(path);
}

fake_cuda_stats_fn jt_fake_driver(char **argv)
{
    if (!getenv(FAKE_CHILD_MARKER)) {
        reexec(argv);
        return NULL;
    }
    fake_cuda_stats_fn stats = NULL;
    char *path = NULL;
    if (asprintf(&path, "%s/fakecuda/libcuda.so.1", getenv("JITOP_BUILD")) < 0) {
        fprintf(stderr, "%s: out of memory\n", argv[0]);
        return NULL;
    }
    /* Kept open for the life of the process, as jitop keeps the driver. */
    void *fake = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    void *by_name = fake ? dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD) : NULL;
    if (!fake)
        fprintf(stderr, "%s: cannot open the fake driver %s: %s\n", argv[0], path, dlerror());
    else if (by_name != fake || !(stats = (fake_cuda_stats_fn)dlsym(fake, FAKE_CUDA_STATS_SYMBOL)))
        fprintf(stderr, "%s: libcuda.so.1 is not the fake driver\n", argv[0]);
    /* RTLD_NOLOAD took a reference too. */
    if (by_name && dlclose(by_name) != 0) {
        fprintf(stderr, "%s: dlclose: %s\n", argv[0], dlerror());
        stats = NULL;
    }
    free(path);
    return stats;
}
