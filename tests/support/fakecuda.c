/* Test programs that run against the fake CUDA driver (tests/fakecuda):
 * the program re-executes itself with $JITOP_BUILD/fakecuda first in
 * LD_LIBRARY_PATH, so that jitop's dlopen("libcuda.so.1") finds the fake
 * even on a machine with a real driver, which these tests never touch. The
 * re-exec runs under the same $JITOP_TEST_WRAPPER (valgrind): the outer
 * process only execs, and valgrind does not follow an exec unless told to
 * (--trace-children=yes, which would also trace every shell the other tests
 * start), so the wrapper is put in front of the new process explicitly. */
#include "fakecuda.h"

#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Set in the re-executed process: the fake is first in LD_LIBRARY_PATH. */
#define CHILD_MARKER "JITOP_TEST_FAKECUDA_CHILD"

/* Runs this program again with the fake first in the library path, behind
 * the same wrapper. Returns (1) only on failure. */
static int reexec_with_fake(char **argv, const char *prog)
{
    char *path = NULL, *wrapper = NULL;
    char **args = NULL;
    const char *build = getenv("JITOP_BUILD");
    if (!build || !*build) {
        fprintf(stderr, "%s: JITOP_BUILD is not set (make test sets it)\n", prog);
        goto out;
    }
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n < 0) {
        fprintf(stderr, "%s: readlink /proc/self/exe: %s\n", prog, strerror(errno));
        goto out;
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
    /* The wrapper's words (at most one per character), self, our arguments. */
    if (wrapper)
        args = calloc(strlen(wrapper) + argc + 2, sizeof *args);
    if (!path || !args) {
        fprintf(stderr, "%s: out of memory\n", prog);
        goto out;
    }
    size_t nargs = 0;
    for (char *save = NULL, *word = strtok_r(wrapper, " \t", &save); word;
         word = strtok_r(NULL, " \t", &save))
        args[nargs++] = word;
    args[nargs++] = self;
    for (size_t i = 1; i < argc; i++)
        args[nargs++] = argv[i];
    if (setenv("LD_LIBRARY_PATH", path, 1) != 0 || setenv(CHILD_MARKER, "1", 1) != 0) {
        fprintf(stderr, "%s: setenv: %s\n", prog, strerror(errno));
        goto out;
    }
    execvp(args[0], args);
    fprintf(stderr, "%s: cannot run %s: %s\n", prog, args[0], strerror(errno));
out:
    free(args);
    free(wrapper);
    free(path);
    return 1;
}

/* Opens the fake by its path and checks that the name jitop opens,
 * libcuda.so.1, now resolves to it. The handle stays open for the life of
 * the process (jitop never closes the driver either). */
static int open_fake(const char *prog, fake_cuda_stats_fn *stats)
{
    int status = 1;
    char *path = NULL;
    if (asprintf(&path, "%s/fakecuda/libcuda.so.1", getenv("JITOP_BUILD")) < 0) {
        path = NULL;
        fprintf(stderr, "%s: out of memory\n", prog);
        goto out;
    }
    void *fake = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!fake) {
        fprintf(stderr, "%s: cannot open the fake driver: %s\n", prog, dlerror());
        goto out;
    }
    *stats = (fake_cuda_stats_fn)dlsym(fake, FAKE_CUDA_STATS_SYMBOL);
    void *by_name = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
    if (by_name != fake || !*stats) {
        fprintf(stderr, "%s: libcuda.so.1 is not the fake driver\n", prog);
        goto out;
    }
    /* RTLD_NOLOAD took a reference too. */
    if (dlclose(by_name) != 0) {
        fprintf(stderr, "%s: dlclose: %s\n", prog, dlerror());
        goto out;
    }
    status = 0;
out:
    free(path);
    return status;
}

int jt_fake_cuda_start(char **argv, fake_cuda_stats_fn *stats)
{
    const char *slash = strrchr(argv[0], '/');
    const char *prog = slash ? slash + 1 : argv[0];
    if (!getenv(CHILD_MARKER))
        return reexec_with_fake(argv, prog);
    return open_fake(prog, stats) == 0 ? -1 : 1;
}
