/* libFuzzer target: the include scanner and the dependency scan
 * (jitop__deps_scan: directives, recursion, resolution against the
 * including file's directory and -I dirs, reading and hashing), then the
 * stat fast path over what it found (jitop__deps_fresh, _changed).
 *
 * Each input is scanned twice: as a source file in a private directory
 * that holds a few headers including each other (a cycle, a subdirectory
 * reached through -I), and as inline text (with that directory current).
 * The scan goes through the scanner's stable entry point, not its directive
 * matcher, so the target follows any rewrite of it. Every dep found must be an absolute path, and
 * the first one the source itself. Seeds: sources with tricky includes
 * (tests/fuzz/corpus/fuzz_deps/). */
#include "compile/compile.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char g_dir[64];
static char g_src[128];
static char g_home[4096]; /* the fuzzer's directory (its corpus paths are relative) */
static jitop__unit g_file_unit;
static bool g_ready;

static void put(const char *name, const char *text)
{
    char path[256];
    snprintf(path, sizeof path, "%s/%s", g_dir, name);
    FILE *f = fopen(path, "w");
    if (!f || fputs(text, f) < 0 || fclose(f) != 0)
        abort();
}

static void remove_dir(void)
{
    static const char *const names[] = {"src.cu", "a.h", "b.h", "sub/c.h", "sub/d.cuh", "sub"};
    char path[256];
    jitop__unit_free(&g_file_unit);
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", g_dir, names[i]);
        if (unlink(path) != 0)
            rmdir(path);
    }
    rmdir(g_dir);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    snprintf(g_dir, sizeof g_dir, "/tmp/jitop-fuzz-deps-XXXXXX");
    if (!mkdtemp(g_dir))
        abort();
    char sub[128];
    snprintf(sub, sizeof sub, "%s/sub", g_dir);
    if (mkdir(sub, 0700) != 0)
        abort();
    put("a.h", "#pragma once\n#include \"b.h\"\n#include <c.h>\n");
    put("b.h", "#include \"a.h\" // a cycle\n#define B 1\n");
    put("sub/c.h", "#include \"d.cuh\"\n");
    put("sub/d.cuh", "/* #include \"nowhere.h\" */\n#include <cuda_fp16.h>\n");
    snprintf(g_src, sizeof g_src, "%s/src.cu", g_dir);
    put("src.cu", "");
    char inc[160];
    snprintf(inc, sizeof inc, "-I%s", sub);
    const char *opts[] = {inc};
    if (jitop__unit_init(&g_file_unit, g_src, NULL, opts, 1, NULL, 0, "sm_90") != JITOP_OK)
        abort();
    if (!getcwd(g_home, sizeof g_home))
        abort();
    g_ready = true;
    atexit(remove_dir);
    return 0;
}

static void check(const jitop__unit *u, const jitop__deps *d)
{
    for (size_t i = 0; i < d->n; i++)
        if (d->v[i].path[0] != '/')
            abort();
    if (u->source_path && (d->n == 0 || strcmp(d->v[0].path, u->source_path) != 0))
        abort();
    bool fresh = false;
    char *why = NULL, *changed = NULL;
    if (jitop__deps_fresh(d, &fresh, &why) == JITOP_OK)
        free(why);
    if (jitop__deps_changed(d, &changed) == JITOP_OK)
        free(changed);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!g_ready)
        return 0;
    /* A new file each time, not O_TRUNC: on ext4 a file truncated to 0
     * and rewritten is flushed to disk at close (auto_da_alloc), which
     * made each input cost a few ms of I/O. */
    if (unlink(g_src) != 0)
        abort();
    int fd = open(g_src, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0)
        abort();
    size_t done = 0;
    while (done < size) {
        ssize_t w = write(fd, data + done, size - done);
        if (w <= 0)
            abort();
        done += (size_t)w;
    }
    if (close(fd) != 0)
        abort();
    jitop__deps d;
    char *text = NULL;
    if (jitop__deps_scan(&g_file_unit, &d, &text) == JITOP_OK) {
        if (strlen(text) > size)
            abort();
        check(&g_file_unit, &d);
        jitop__deps_free(&d);
        free(text);
    }
    /* Inline text: C string, so up to the first NUL; quoted includes
     * resolve against the current directory (the private one), then the
     * -I dirs. */
    char *inline_text = malloc(size + 1);
    if (!inline_text)
        return 0;
    memcpy(inline_text, data, size);
    inline_text[size] = '\0';
    char inc[160];
    snprintf(inc, sizeof inc, "-I%s", g_dir);
    const char *opts[] = {inc};
    jitop__unit u;
    /* Inline text's quoted names, and safe mode's walk for it, start in the
     * current directory: the private one, not wherever the fuzzer runs. */
    if (chdir(g_dir) != 0)
        abort();
    if (jitop__unit_init(&u, NULL, inline_text, opts, 1, NULL, 0, "sm_90") == JITOP_OK) {
        if (jitop__deps_scan(&u, &d, &text) == JITOP_OK) {
            check(&u, &d);
            jitop__deps_free(&d);
            free(text);
        }
        jitop__unit_free(&u);
    }
    if (chdir(g_home) != 0)
        abort();
    free(inline_text);
    return 0;
}
