/* The host compiler: found on PATH, identified, run with its output
 * captured; its -MMD dependency files read; host options split from the
 * device's. */
#include "host/host.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

bool jitop__host_is_source(const char *path)
{
    const char *dot = path ? strrchr(path, '.') : NULL;
    if (!dot || strchr(dot, '/'))
        return false;
    return strcmp(dot, ".c") == 0 || strcmp(dot, ".cc") == 0 || strcmp(dot, ".cpp") == 0 ||
           strcmp(dot, ".cxx") == 0 || strcmp(dot, ".C") == 0;
}

/* Flags whose job is jitop's: where the output goes, what is produced. */
static bool host_flag_refused(const char *f)
{
    static const char *const exact[] = {"-c", "-E", "-S", "-shared", "-o", "-MD", "-MMD",
                                        "-M", "-MM", "-MF", "-MT", "-MQ", "-x"};
    for (size_t i = 0; i < sizeof exact / sizeof *exact; i++)
        if (strcmp(f, exact[i]) == 0)
            return true;
    return strncmp(f, "-o", 2) == 0 || strncmp(f, "-MF", 3) == 0 || strncmp(f, "-x", 2) == 0;
}

/* -I with its folder made absolute (the key and the compiler's current
 * directory then do not matter), in one word. */
static int push_include(jitop__strv *to, const char *dir)
{
    char *abs = jitop__abspath(dir);
    if (!abs)
        return jitop__fail_abspath(dir);
    int status = jitop__strv_pushf(to, "-I%s", abs);
    free(abs);
    return status;
}

int jitop__host_split_options(const char *const *options, size_t n, jitop__strv *device,
                              jitop__strv *cflags, jitop__strv *ldflags)
{
    int status = JITOP_OK;
    for (size_t i = 0; status == JITOP_OK && i < n; i++) {
        const char *o = options[i];
        if (!o)
            return jitop__fail(JITOP_EINVAL, "option %zu is NULL", i);
        if (strncmp(o, "-Xhost-ld=", 10) == 0) {
            status = jitop__strv_push(ldflags, o + 10);
        } else if (strncmp(o, "-Xhost=", 7) == 0) {
            const char *f = o + 7;
            if (host_flag_refused(f))
                return jitop__fail(JITOP_EINVAL,
                                   "option %s: %s is jitop's to choose for host code (it "
                                   "compiles each source with -c -MMD into the cache)",
                                   o, f);
            status = strncmp(f, "-I", 2) == 0 && f[2] ? push_include(cflags, f + 2)
                                                     : jitop__strv_push(cflags, f);
        } else {
            status = jitop__strv_push(device, o);
            if (status != JITOP_OK)
                break;
            /* -D/-U/-I mean the same to both compilers; a separate "-I dir"
             * (two words) is the device's spelling too. */
            if (strncmp(o, "-D", 2) == 0 || strncmp(o, "-U", 2) == 0) {
                if (o[2])
                    status = jitop__strv_push(cflags, o);
            } else if (strncmp(o, "-I", 2) == 0 && o[2]) {
                status = push_include(cflags, o + 2);
            } else if (strcmp(o, "-I") == 0 && i + 1 < n && options[i + 1]) {
                status = push_include(cflags, options[i + 1]);
            }
        }
    }
    return status;
}

/* ----------------------------------------------------------- finding */

/* prog made absolute, its links kept: a compiler driver behaves by the
 * name it is started under (clang++ is a link to clang, and started as
 * clang it links C++ objects without the C++ library). */
static char *absolute(const char *prog)
{
    if (prog[0] == '/')
        return jitop__strdup(prog);
    char cwd[PATH_MAX];
    if (!getcwd(cwd, sizeof cwd))
        return NULL;
    return jitop__sprintf("%s/%s", cwd, prog);
}

/* The first executable file named prog on PATH (prog with a '/' as it
 * is), as execvp would find it, made absolute (not resolved: see
 * absolute). */
static char *path_search(const char *prog)
{
    if (strchr(prog, '/'))
        return access(prog, X_OK) == 0 ? absolute(prog) : NULL;
    const char *path = getenv("PATH");
    if (!path || !*path)
        path = "/usr/local/bin:/usr/bin:/bin";
    while (*path) {
        const char *end = strchr(path, ':');
        size_t len = end ? (size_t)(end - path) : strlen(path);
        char buf[PATH_MAX];
        if ((size_t)snprintf(buf, sizeof buf, "%.*s/%s", (int)len, len ? path : ".", prog) <
            sizeof buf) {
            struct stat st;
            if (stat(buf, &st) == 0 && S_ISREG(st.st_mode) && access(buf, X_OK) == 0)
                return absolute(buf);
        }
        path += len;
        if (*path == ':')
            path++;
    }
    return NULL;
}

int jitop__host_cc_find(bool cxx, jitop__host_cc *out)
{
    memset(out, 0, sizeof *out);
    out->cxx = cxx;
    const char *var = cxx ? "CXX" : "CC";
    const char *val = getenv(var);
    if (!val || !*val)
        val = cxx ? "c++" : "cc";
    int status = JITOP_OK;
    if (!(out->var = jitop__strdup(var)) || !(out->asked = jitop__strdup(val)))
        status = jitop__fail(JITOP_ENOMEM, "out of memory");
    /* $CC may hold words after the program ("gcc -m64"): they are flags of
     * every call. Split on blanks, as make does. */
    const char *p = val;
    while (status == JITOP_OK && *p) {
        while (*p == ' ' || *p == '\t')
            p++;
        size_t len = strcspn(p, " \t");
        if (len) {
            char *word = jitop__sprintf("%.*s", (int)len, p);
            if (!word) {
                status = jitop__fail(JITOP_ENOMEM, "out of memory");
                break;
            }
            if (out->argv0.n == 0) {
                char *resolved = path_search(word);
                if (!resolved)
                    status = jitop__fail(JITOP_ENOTFOUND,
                                         "no host compiler: %s '%s' not found on PATH (set %s "
                                         "to a %s compiler to build host sources)",
                                         getenv(var) && *getenv(var) ? var : "the default", word,
                                         var, cxx ? "C++" : "C");
                else
                    status = jitop__strv_push(&out->argv0, resolved);
                free(resolved);
            } else {
                status = jitop__strv_push(&out->argv0, word);
            }
            free(word);
        }
        p += len;
    }
    if (status == JITOP_OK && out->argv0.n == 0)
        status = jitop__fail(JITOP_ENOTFOUND, "no host compiler: %s is blank", var);
    struct stat st;
    if (status == JITOP_OK) {
        if (stat(out->argv0.v[0], &st) != 0)
            status = jitop__fail(JITOP_EIO, "cannot stat the host compiler %s: %s",
                                 out->argv0.v[0], strerror(errno));
        else if (!(out->rec.path = jitop__strdup(out->argv0.v[0])))
            status = jitop__fail(JITOP_ENOMEM, "out of memory");
    }
    if (status == JITOP_OK) {
        out->rec.size = st.st_size;
        jitop__dep_set_stat(&out->rec, &st);
    }
    if (status != JITOP_OK)
        jitop__host_cc_free(out);
    return status;
}

void jitop__host_cc_free(jitop__host_cc *cc)
{
    if (!cc)
        return;
    free(cc->var);
    free(cc->asked);
    jitop__strv_free(&cc->argv0);
    free(cc->rec.path);
    memset(cc, 0, sizeof *cc);
}

/* Identities already asked in this process, by the compiler file's stat
 * data: `--version` costs a process start (~1 ms for gcc's driver). */
struct ident_memo {
    struct ident_memo *next;
    char *path;
    int64_t size, mtime_ns, ctime_ns;
    uint64_t ino;
    XXH128_hash_t hash;
};
static struct ident_memo *g_memo;
static pthread_mutex_t g_memo_lock = PTHREAD_MUTEX_INITIALIZER;

int jitop__host_cc_identify(jitop__host_cc *cc)
{
    if (cc->identified)
        return JITOP_OK;
    const jitop__dep *r = &cc->rec;
    pthread_mutex_lock(&g_memo_lock);
    for (struct ident_memo *m = g_memo; m; m = m->next) {
        if (strcmp(m->path, r->path) == 0 && m->size == r->size && m->mtime_ns == r->mtime_ns &&
            m->ctime_ns == r->ctime_ns && m->ino == r->ino) {
            cc->rec.hash = m->hash;
            cc->identified = true;
        }
    }
    pthread_mutex_unlock(&g_memo_lock);
    if (cc->identified)
        return JITOP_OK;
    const char *argv[] = {r->path, "--version", NULL};
    char *log = NULL;
    int code = 0;
    int status = jitop__host_run(argv, &log, &code);
    if (status == JITOP_OK && code != 0)
        status = jitop__fail(JITOP_ENOTFOUND, "host compiler %s (%s): `%s --version` failed: %s",
                             r->path, cc->var, r->path, log ? log : "");
    if (status == JITOP_OK) {
        XXH3_state_t st;
        XXH3_INITSTATE(&st);
        XXH3_128bits_reset(&st);
        XXH3_128bits_update(&st, r->path, strlen(r->path) + 1);
        /* The file it resolves to as well: the same name may lead to
         * another compiler (update-alternatives) with a look-alike
         * --version. */
        char *real = realpath(r->path, NULL);
        if (real)
            XXH3_128bits_update(&st, real, strlen(real) + 1);
        free(real);
        XXH3_128bits_update(&st, log, strlen(log) + 1);
        cc->rec.hash = XXH3_128bits_digest(&st);
        cc->identified = true;
        struct ident_memo *m = calloc(1, sizeof *m);
        if (m && (m->path = jitop__strdup(r->path))) {
            m->size = r->size;
            m->mtime_ns = r->mtime_ns;
            m->ctime_ns = r->ctime_ns;
            m->ino = r->ino;
            m->hash = cc->rec.hash;
            pthread_mutex_lock(&g_memo_lock);
            m->next = g_memo;
            g_memo = m;
            pthread_mutex_unlock(&g_memo_lock);
        } else {
            free(m); /* only a memo: the next call asks again */
        }
    }
    free(log);
    return status;
}

/* ------------------------------------------------------------ running */

int jitop__host_run(const char *const *argv, char **log, int *exit_code)
{
    int pipefd[2] = {-1, -1};
    posix_spawn_file_actions_t fa;
    bool fa_init = false;
    pid_t pid = -1;
    char *buf = NULL;
    size_t len = 0, cap = 0;
    int status = JITOP_OK;
    *log = NULL;
    *exit_code = -1;
    if (pipe2(pipefd, O_CLOEXEC) != 0)
        return jitop__fail(JITOP_EIO, "pipe: %s", strerror(errno));
    int rc = posix_spawn_file_actions_init(&fa);
    fa_init = rc == 0;
    if (rc == 0)
        rc = posix_spawn_file_actions_adddup2(&fa, pipefd[1], 1);
    if (rc == 0)
        rc = posix_spawn_file_actions_adddup2(&fa, pipefd[1], 2);
    if (rc == 0)
        rc = posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    if (rc == 0)
        rc = posix_spawn(&pid, argv[0], &fa, NULL, (char *const *)argv, environ);
    close(pipefd[1]);
    if (rc != 0) {
        status = jitop__fail(JITOP_ENOTFOUND, "cannot run %s: %s", argv[0], strerror(rc));
        goto out;
    }
    for (;;) {
        if (cap - len < 4096) {
            size_t ncap = cap ? cap * 2 : 8192;
            char *nb = realloc(buf, ncap);
            if (!nb) {
                status = jitop__fail(JITOP_ENOMEM, "out of memory");
                break; /* keep draining below so the child can exit */
            }
            buf = nb;
            cap = ncap;
        }
        ssize_t got = read(pipefd[0], buf + len, cap - len - 1);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0)
            break;
        len += (size_t)got;
    }
    int ws = 0;
    while (waitpid(pid, &ws, 0) < 0) {
        if (errno != EINTR) {
            if (status == JITOP_OK)
                status = jitop__fail(JITOP_EIO, "waitpid %s: %s", argv[0], strerror(errno));
            break;
        }
    }
    if (status == JITOP_OK)
        *exit_code = WIFEXITED(ws) ? WEXITSTATUS(ws) : -1;
out:
    if (fa_init)
        posix_spawn_file_actions_destroy(&fa);
    close(pipefd[0]);
    if (status == JITOP_OK) {
        if (!buf && !(buf = malloc(1)))
            status = jitop__fail(JITOP_ENOMEM, "out of memory");
        else {
            buf[len] = '\0';
            *log = buf;
            buf = NULL;
        }
    }
    free(buf);
    return status;
}

int jitop__host_run_strv(const jitop__strv *argv, char **log, int *exit_code)
{
    const char **v = calloc(argv->n + 1, sizeof *v);
    if (!v)
        return jitop__fail(JITOP_ENOMEM, "out of memory");
    for (size_t i = 0; i < argv->n; i++)
        v[i] = argv->v[i];
    int status = jitop__host_run(v, log, exit_code);
    free(v);
    return status;
}

/* --------------------------------------------------------- dep files */

int jitop__host_depfile_parse(const char *text, jitop__strv *out)
{
    /* "target: pre1 pre2 \\\n pre3": the prerequisites of the first rule
     * (gcc writes one, -MP's phony rules after it are left out). */
    const char *p = text;
    bool in_target = true;
    char word[PATH_MAX];
    size_t wl = 0;
    int status = JITOP_OK;
    for (;; p++) {
        char c = *p;
        bool end_word = false, end_rule = false;
        if (c == '\\' && p[1] == '\n') {
            p++;
            end_word = true;
        } else if (c == '\\' && (p[1] == ' ' || p[1] == '#' || p[1] == '\\')) {
            if (wl + 1 < sizeof word)
                word[wl++] = p[1];
            p++;
            continue;
        } else if (c == '$' && p[1] == '$') {
            if (wl + 1 < sizeof word)
                word[wl++] = '$';
            p++;
            continue;
        } else if (c == ' ' || c == '\t') {
            end_word = true;
        } else if (c == '\n' || c == '\0') {
            end_word = end_rule = true;
        } else if (in_target && c == ':' && (p[1] == ' ' || p[1] == '\n' || p[1] == '\0')) {
            in_target = false;
            wl = 0;
            continue;
        } else {
            if (wl + 1 >= sizeof word)
                return jitop__fail(JITOP_EIO, "dependency file: a path longer than PATH_MAX");
            word[wl++] = c;
            continue;
        }
        if (end_word && wl && !in_target) {
            word[wl] = '\0';
            char *abs = jitop__abspath(word);
            if (!abs)
                return jitop__fail_abspath(word);
            status = jitop__strv_push(out, abs);
            free(abs);
            if (status != JITOP_OK)
                return status;
        }
        if (end_word)
            wl = 0;
        if (end_rule && !in_target)
            break;
        if (c == '\0')
            break;
    }
    if (in_target)
        return jitop__fail(JITOP_EIO, "dependency file: no rule");
    return JITOP_OK;
}

/* ------------------------------------------------------- jitop_host.h */

const char *jitop__host_include_dir(void)
{
    const char *env = getenv("JITOP_INCLUDE_DIR");
    if (env && *env)
        return env;
    static const char *const dirs[] = {JITOP_INSTALL_INCLUDE_DIR, JITOP_SOURCE_INCLUDE_DIR};
    for (size_t i = 0; i < sizeof dirs / sizeof *dirs; i++) {
        char path[PATH_MAX];
        if ((size_t)snprintf(path, sizeof path, "%s/jitop_host.h", dirs[i]) < sizeof path &&
            access(path, R_OK) == 0)
            return dirs[i];
    }
    return JITOP_SOURCE_INCLUDE_DIR;
}
