#include "cli.h"

#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* The files found so far, with their identity so that one file reached by
 * two spellings ("a.cu", "./a.cu", or a directory and a file in it) is built
 * once. Linear search: a CLI invocation names tens of files, not millions. */
typedef struct seen {
    dev_t *dev;
    ino_t *ino;
    size_t n, cap;
} seen;

static int seen_add(seen *s, const struct stat *st, int *dup)
{
    *dup = 0;
    for (size_t i = 0; i < s->n; i++) {
        if (s->dev[i] == st->st_dev && s->ino[i] == st->st_ino) {
            *dup = 1;
            return 0;
        }
    }
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 16;
        dev_t *d = realloc(s->dev, cap * sizeof *d);
        if (!d)
            return -1;
        s->dev = d;
        ino_t *in = realloc(s->ino, cap * sizeof *in);
        if (!in)
            return -1;
        s->ino = in;
        s->cap = cap;
    }
    s->dev[s->n] = st->st_dev;
    s->ino[s->n] = st->st_ino;
    s->n++;
    return 0;
}

static int has_cu_suffix(const char *name)
{
    size_t len = strlen(name);
    return len > 3 && strcmp(name + len - 3, ".cu") == 0;
}

static char *join(const char *dir, const char *name)
{
    size_t dl = strlen(dir), nl = strlen(name);
    while (dl > 1 && dir[dl - 1] == '/')
        dl--;
    char *p = malloc(dl + 1 + nl + 1);
    if (!p)
        return NULL;
    memcpy(p, dir, dl);
    size_t at = dl;
    if (!(dl == 1 && dir[0] == '/'))
        p[at++] = '/';
    memcpy(p + at, name, nl + 1);
    return p;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Collects every .cu file below dir into out (unsorted). Symlinks to files
 * are followed, symlinks to directories are not (no cycles). */
static int walk(const char *cmd, const char *dir, jitop_cli_strs *out)
{
    int rc = 0;
    DIR *d = opendir(dir);
    if (!d) {
        fprintf(stderr, "jitop %s: %s: cannot open directory: %s\n", cmd, dir, strerror(errno));
        return JITOP_CLI_EXIT_FAIL;
    }
    for (;;) {
        errno = 0;
        struct dirent *e = readdir(d);
        if (!e) {
            if (errno) {
                fprintf(stderr, "jitop %s: %s: readdir: %s\n", cmd, dir, strerror(errno));
                rc = JITOP_CLI_EXIT_FAIL;
            }
            break;
        }
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        char *path = join(dir, e->d_name);
        struct stat st;
        if (!path) {
            fprintf(stderr, "jitop %s: out of memory\n", cmd);
            rc = JITOP_CLI_EXIT_FAIL;
            break;
        }
        if (lstat(path, &st) != 0) {
            fprintf(stderr, "jitop %s: %s: %s\n", cmd, path, strerror(errno));
            rc = JITOP_CLI_EXIT_FAIL;
        } else if (S_ISDIR(st.st_mode)) {
            rc = walk(cmd, path, out);
        } else if (has_cu_suffix(e->d_name) && (S_ISREG(st.st_mode) || S_ISLNK(st.st_mode))) {
            /* a dangling or non-file symlink is skipped, not an error */
            if ((S_ISREG(st.st_mode) || (stat(path, &st) == 0 && S_ISREG(st.st_mode))) &&
                jitop_cli_strs_push(out, path) != 0) {
                fprintf(stderr, "jitop %s: out of memory\n", cmd);
                rc = JITOP_CLI_EXIT_FAIL;
            }
        }
        free(path);
        if (rc)
            break;
    }
    if (closedir(d) != 0 && !rc) {
        fprintf(stderr, "jitop %s: %s: closedir: %s\n", cmd, dir, strerror(errno));
        rc = JITOP_CLI_EXIT_FAIL;
    }
    return rc;
}

/* Appends path to files unless the same file is there already. */
static int add_file(const char *cmd, const char *path, seen *s, jitop_cli_strs *files)
{
    struct stat st;
    int dup = 0;
    if (stat(path, &st) != 0) {
        fprintf(stderr, "jitop %s: %s: %s\n", cmd, path, strerror(errno));
        return JITOP_CLI_EXIT_FAIL;
    }
    if (seen_add(s, &st, &dup) != 0 || (!dup && jitop_cli_strs_push(files, path) != 0)) {
        fprintf(stderr, "jitop %s: out of memory\n", cmd);
        return JITOP_CLI_EXIT_FAIL;
    }
    return 0;
}

int jitop_cli_expand_paths(const char *cmd, const jitop_cli_strs *paths, jitop_cli_strs *files)
{
    int rc = 0;
    seen s = {0};
    jitop_cli_strs found = {0};
    for (size_t i = 0; i < paths->n && !rc; i++) {
        const char *p = paths->v[i];
        struct stat st;
        if (stat(p, &st) != 0) {
            fprintf(stderr, "jitop %s: %s: %s\n", cmd, p, strerror(errno));
            rc = JITOP_CLI_EXIT_FAIL;
            break;
        }
        if (!S_ISDIR(st.st_mode)) {
            rc = add_file(cmd, p, &s, files);
            continue;
        }
        jitop_cli_strs_free(&found);
        rc = walk(cmd, p, &found);
        if (rc)
            break;
        if (found.n == 0) {
            fprintf(stderr, "jitop %s: %s: no .cu files in this directory\n", cmd, p);
            rc = JITOP_CLI_EXIT_FAIL;
            break;
        }
        qsort(found.v, found.n, sizeof found.v[0], cmp_str);
        for (size_t k = 0; k < found.n && !rc; k++)
            rc = add_file(cmd, found.v[k], &s, files);
    }
    jitop_cli_strs_free(&found);
    free(s.dev);
    free(s.ino);
    return rc;
}
