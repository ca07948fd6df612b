/* Host objects built by ninja: one build.ninja per module in a private
 * build folder (compile edges with deps = gcc, one link edge), ninja runs
 * what changed in parallel, then every object and the link are published
 * into the cache as jitop's own builder would publish them. Ninja's folder
 * is only a work area: the cache stays the source of truth (a hit never
 * needs it, and a removed folder only costs a full ninja build). */
#include "host/host.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

const char *jitop__host_ninja(void)
{
    /* Per thread: builds of two modules may ask at once. */
    static _Thread_local char found[PATH_MAX];
    const char *env = getenv("JITOP_NINJA");
    if (env && strcmp(env, "0") == 0)
        return NULL;
    if (env && *env)
        return access(env, X_OK) == 0 ? env : NULL;
    const char *path = getenv("PATH");
    while (path && *path) {
        const char *end = strchr(path, ':');
        size_t len = end ? (size_t)(end - path) : strlen(path);
        if (len && (size_t)snprintf(found, sizeof found, "%.*s/ninja", (int)len, path) <
                       sizeof found &&
            access(found, X_OK) == 0)
            return found;
        path += len;
        if (*path == ':')
            path++;
    }
    return NULL;
}

/* A word for the shell that runs ninja's commands: single-quoted. */
static int shell_word(jitop__strv *parts, const char *w)
{
    size_t n = strlen(w);
    char *q = malloc(4 * n + 3), *p = q;
    if (!q)
        return jitop__fail(JITOP_ENOMEM, "out of memory");
    *p++ = '\'';
    for (const char *s = w; *s; s++) {
        if (*s == '\'') {
            memcpy(p, "'\\''", 4);
            p += 4;
        } else {
            *p++ = *s;
        }
    }
    *p++ = '\'';
    *p = '\0';
    int status = jitop__strv_push(parts, q);
    free(q);
    return status;
}

/* A path in a build line: '$', ' ' and ':' escaped with '$'. And every
 * '$' of a command escaped too (commands are ninja text before the shell
 * sees them). */
static char *ninja_escape(const char *s, bool colon)
{
    size_t n = strlen(s);
    char *q = malloc(2 * n + 1), *p = q;
    if (!q)
        return NULL;
    for (; *s; s++) {
        if (*s == '$' || *s == ' ' || (colon && *s == ':') || *s == '\n')
            *p++ = '$';
        *p++ = *s == '\n' ? ' ' : *s;
    }
    *p = '\0';
    return q;
}

static int append(char **buf, size_t *len, const char *s)
{
    size_t n = strlen(s);
    char *nb = realloc(*buf, *len + n + 1);
    if (!nb)
        return jitop__fail(JITOP_ENOMEM, "out of memory");
    memcpy(nb + *len, s, n + 1);
    *buf = nb;
    *len += n;
    return JITOP_OK;
}

/* The rule of one compile: the compiler and its flags; $in, $out and the
 * depfile are ninja's. */
static int compile_command(const jitop__host_unit *u, const jitop__host_cc *cc, char **out)
{
    jitop__strv words = {0};
    int status = shell_word(&words, cc->argv0.v[0]);
    for (size_t i = 1; status == JITOP_OK && i < cc->argv0.n; i++)
        status = shell_word(&words, cc->argv0.v[i]);
    const char *base = strrchr(cc->argv0.v[0], '/');
    if (status == JITOP_OK && u->cxx && !strstr(base ? base + 1 : cc->argv0.v[0], "clang"))
        status = shell_word(&words, "-fno-gnu-unique");
    for (size_t i = 0; status == JITOP_OK && i < u->flags.n; i++)
        status = shell_word(&words, u->flags.v[i]);
    char *joined = status == JITOP_OK ? jitop__strv_join(&words, " ") : NULL;
    char *esc = joined ? ninja_escape(joined, false) : NULL;
    if (status == JITOP_OK && !esc)
        status = jitop__fail(JITOP_ENOMEM, "out of memory");
    /* The compiler's identity leads the command (an environment word the
     * shell hands the compiler, unused): ninja rebuilds when a command
     * changes, and the same path may now be another compiler (a link
     * pointed elsewhere, an upgrade in place), whose objects it would
     * otherwise keep. */
    char ident[33];
    jitop__hash_hex(cc->rec.hash, ident);
    if (status == JITOP_OK &&
        !(*out = jitop__sprintf("JITOP_CC_IDENTITY=%s %s -MMD -MF $out.d -c $in -o $out", ident,
                                esc)))
        status = jitop__fail(JITOP_ENOMEM, "out of memory");
    free(joined);
    free(esc);
    jitop__strv_free(&words);
    return status;
}

/* The link rule: the linker and its words, -shared, the objects, the
 * link flags. */
static int link_command(const jitop__host_cc *ld, const jitop__strv *ldflags, char **out)
{
    jitop__strv head = {0}, tail = {0};
    int status = JITOP_OK;
    for (size_t i = 0; status == JITOP_OK && i < ld->argv0.n; i++)
        status = shell_word(&head, ld->argv0.v[i]);
    for (size_t i = 0; status == JITOP_OK && i < ldflags->n; i++)
        status = shell_word(&tail, ldflags->v[i]);
    char *h = status == JITOP_OK ? jitop__strv_join(&head, " ") : NULL;
    char *t = status == JITOP_OK ? (tail.n ? jitop__strv_join(&tail, " ") : jitop__strdup(""))
                                 : NULL;
    char *he = h ? ninja_escape(h, false) : NULL, *te = t ? ninja_escape(t, false) : NULL;
    if (status == JITOP_OK &&
        (!he || !te || !(*out = jitop__sprintf("%s -shared $in %s -o $out", he, te))))
        status = jitop__fail(JITOP_ENOMEM, "out of memory");
    free(h), free(t), free(he), free(te);
    jitop__strv_free(&head);
    jitop__strv_free(&tail);
    return status;
}

static int write_build_file(const char *dir, jitop__host_unit *units, size_t n,
                            const jitop__host_cc *ccs, const jitop__host_cc *ld,
                            const jitop__strv *ldflags)
{
    char *text = NULL;
    size_t len = 0;
    int status = append(&text, &len, "# written by jitop for one module's host objects\n"
                                     "ninja_required_version = 1.5\n");
    for (size_t i = 0; status == JITOP_OK && i < n; i++) {
        char *cmd = NULL, *src = NULL, *chunk = NULL;
        status = compile_command(&units[i], &ccs[i], &cmd);
        if (status == JITOP_OK && !(src = ninja_escape(units[i].path, true)))
            status = jitop__fail(JITOP_ENOMEM, "out of memory");
        if (status == JITOP_OK &&
            !(chunk = jitop__sprintf("rule cc%zu\n  command = %s\n  depfile = $out.d\n"
                                     "  deps = gcc\n  description = CC %s\n"
                                     "build obj%zu.o: cc%zu %s\n",
                                     i, cmd, src, i, i, src)))
            status = jitop__fail(JITOP_ENOMEM, "out of memory");
        if (status == JITOP_OK)
            status = append(&text, &len, chunk);
        free(cmd);
        free(src);
        free(chunk);
    }
    char *lcmd = NULL, *chunk = NULL;
    if (status == JITOP_OK)
        status = link_command(ld, ldflags, &lcmd);
    if (status == JITOP_OK &&
        !(chunk = jitop__sprintf("rule link\n  command = %s\n  description = LINK $out\n"
                                 "build lib.so: link",
                                 lcmd)))
        status = jitop__fail(JITOP_ENOMEM, "out of memory");
    if (status == JITOP_OK)
        status = append(&text, &len, chunk);
    free(lcmd);
    free(chunk);
    for (size_t i = 0; status == JITOP_OK && i < n; i++) {
        char obj[32];
        snprintf(obj, sizeof obj, " obj%zu.o", i);
        status = append(&text, &len, obj);
    }
    if (status == JITOP_OK)
        status = append(&text, &len, "\ndefault lib.so\n");
    char *path = status == JITOP_OK ? jitop__sprintf("%s/build.ninja", dir) : NULL;
    char *tmp = path ? jitop__sprintf("%s.tmp", path) : NULL;
    if (status == JITOP_OK && (!path || !tmp))
        status = jitop__fail(JITOP_ENOMEM, "out of memory");
    if (status == JITOP_OK) {
        int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
        if (fd < 0 || write(fd, text, len) != (ssize_t)len || close(fd) != 0 ||
            rename(tmp, path) != 0)
            status = jitop__fail(JITOP_EIO, "cannot write %s: %s", path, strerror(errno));
    }
    free(path);
    free(tmp);
    free(text);
    return status;
}

/* The build folder of a module: private to this user, named by the hash
 * of the units (sources and flags): ${TMPDIR:-/tmp}/jitop-ninja-<uid>/<id>. */
static int build_dir(jitop__host_unit *units, size_t n, const jitop__host_cc *ccs, char **out)
{
    char id[33];
    char *ids = malloc(n * 32 + 1);
    if (!ids)
        return jitop__fail(JITOP_ENOMEM, "out of memory");
    for (size_t i = 0; i < n; i++) {
        char uid[33];
        jitop__host_obj_id(&units[i], &ccs[i], uid);
        memcpy(ids + 32 * i, uid, 32);
    }
    jitop__hash_hex(XXH3_128bits(ids, n * 32), id);
    free(ids);
    const char *tmp = getenv("TMPDIR");
    char *top = jitop__sprintf("%s/jitop-ninja-%lu", tmp && *tmp ? tmp : "/tmp",
                               (unsigned long)getuid());
    if (!top)
        return jitop__fail(JITOP_ENOMEM, "out of memory");
    /* A folder another user made could hold a build.ninja of theirs: run
     * nothing there. */
    struct stat s;
    int status = JITOP_OK;
    if (mkdir(top, 0700) != 0 && errno != EEXIST)
        status = jitop__fail(JITOP_EIO, "cannot make %s: %s", top, strerror(errno));
    else if (lstat(top, &s) != 0 || !S_ISDIR(s.st_mode) || s.st_uid != getuid() ||
             (s.st_mode & 077))
        status = jitop__fail(JITOP_EUNSAFE,
                             "%s is not a private folder of this user (owner, mode or a link): "
                             "ninja is not run there",
                             top);
    if (status == JITOP_OK && !(*out = jitop__sprintf("%s/%s", top, id)))
        status = jitop__fail(JITOP_ENOMEM, "out of memory");
    if (status == JITOP_OK && mkdir(*out, 0700) != 0 && errno != EEXIST) {
        status = jitop__fail(JITOP_EIO, "cannot make %s: %s", *out, strerror(errno));
        free(*out);
        *out = NULL;
    }
    free(top);
    return status;
}

/* ninja -t deps obj<i>.o: the files gcc listed for it, as ninja keeps them
 * (deps = gcc moves the depfile into .ninja_deps). Written as a depfile
 * for jitop__host_deps_from_depfile. */
static int ninja_deps(const char *ninja, const char *dir, size_t i, const char *depfile)
{
    char *target = jitop__sprintf("obj%zu.o", i);
    const char *argv[] = {ninja, "-C", dir, "-t", "deps", target, NULL};
    char *log = NULL, *text = NULL;
    size_t len = 0;
    int code = 0;
    int status = target ? jitop__host_run(argv, &log, &code)
                        : jitop__fail(JITOP_ENOMEM, "out of memory");
    if (status == JITOP_OK && (code != 0 || !strstr(log, "(VALID)")))
        status = jitop__fail(JITOP_EIO, "ninja -t deps %s in %s: no valid record:\n%s", target,
                             dir, log);
    status = status == JITOP_OK ? append(&text, &len, "obj:") : status;
    for (char *line = log; status == JITOP_OK && line && *line;) {
        char *nl = strchr(line, '\n');
        if (nl)
            *nl = '\0';
        if (strncmp(line, "    ", 4) == 0) {
            /* Escape as a depfile does. */
            status = append(&text, &len, " ");
            for (const char *c = line + 4; status == JITOP_OK && *c; c++) {
                char e[3] = {*c, 0, 0};
                if (*c == ' ' || *c == '\\' || *c == '#') {
                    e[0] = '\\';
                    e[1] = *c;
                }
                status = *c == '$' ? append(&text, &len, "$$") : append(&text, &len, e);
            }
        }
        line = nl ? nl + 1 : NULL;
    }
    status = status == JITOP_OK ? append(&text, &len, "\n") : status;
    if (status == JITOP_OK) {
        FILE *f = fopen(depfile, "w");
        if (!f || fputs(text, f) < 0 || fclose(f) != 0)
            status = jitop__fail(JITOP_EIO, "cannot write %s: %s", depfile, strerror(errno));
    }
    free(target);
    free(log);
    free(text);
    return status;
}

int jitop__host_ninja_build(jitop_ctx *ctx, const char *ninja, const char *label,
                            jitop__host_unit *units, size_t n, jitop__host_cc *ccs,
                            jitop__host_obj *objs, const jitop__host_cc *ld,
                            const jitop__strv *ldflags, jitop__binary *so)
{
    memset(so, 0, sizeof *so);
    char *dir = NULL, *lockpath = NULL;
    int lockfd = -1;
    int status = build_dir(units, n, ccs, &dir);
    if (status != JITOP_OK)
        return status;
    /* One ninja per folder at a time (processes loading the same module). */
    if (!(lockpath = jitop__sprintf("%s/jitop.lock", dir)))
        status = jitop__fail(JITOP_ENOMEM, "out of memory");
    if (status == JITOP_OK &&
        ((lockfd = open(lockpath, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600)) < 0 ||
         flock(lockfd, LOCK_EX) != 0))
        status = jitop__fail(JITOP_EIO, "cannot lock %s: %s", lockpath, strerror(errno));
    for (size_t i = 0; status == JITOP_OK && i < n; i++)
        status = jitop__host_cc_identify(&ccs[i]);
    /* Ninja's deps = gcc lists the files a compile read, not the folders
     * where a header was looked for: a header created there since (next to
     * the source, shadowing one under -I) changes nothing ninja checks.
     * The unit's manifest records those folders: when one changed, the
     * object in ninja's folder (its own file) is removed, so that ninja
     * compiles it again. */
    for (size_t i = 0; status == JITOP_OK && i < n; i++) {
        char id[33], key[33];
        jitop__deps md;
        bool have = false;
        memset(&md, 0, sizeof md);
        jitop__host_obj_id(&units[i], &ccs[i], id);
        status = jitop__manifest_get(ctx->cache, id, &md, key, &have);
        if (status == JITOP_OK && have && !jitop__host_dirs_same(&md)) {
            char *o = jitop__sprintf("%s/obj%zu.o", dir, i);
            if (!o)
                status = jitop__fail(JITOP_ENOMEM, "out of memory");
            else if (unlink(o) != 0 && errno != ENOENT)
                status = jitop__fail(JITOP_EIO, "cannot remove %s: %s", o, strerror(errno));
            free(o);
        }
        jitop__deps_free(&md);
    }
    for (int attempt = 0; status == JITOP_OK; attempt++) {
        status = write_build_file(dir, units, n, ccs, ld, ldflags);
        if (status != JITOP_OK)
            break;
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME_COARSE, &ts);
        int64_t t0 = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
        char jobs[32];
        long cpus = sysconf(_SC_NPROCESSORS_ONLN);
        snprintf(jobs, sizeof jobs, "-j%ld", cpus > 0 ? cpus : 1);
        /* -d explain says why each object was rebuilt (JITOP_VERBOSE). */
        const char *argv[] = {ninja, "-C", dir, jobs, "-d", "explain", NULL};
        if (!ctx->verbose)
            argv[4] = NULL;
        char *log = NULL;
        int code = 0;
        status = jitop__host_run(argv, &log, &code);
        if (status == JITOP_OK && code != 0)
            status = jitop__fail(JITOP_ECOMPILE, "host build of %s by ninja failed (%s, in %s):\n%s",
                                 label, ninja, dir, log);
        else if (status == JITOP_OK && ctx->verbose && log && *log)
            jitop__log(ctx, "module %s: ninja:\n%s", label, log);
        free(log);
        bool again = false;
        for (size_t i = 0; status == JITOP_OK && i < n; i++) {
            jitop__host_obj_free(&objs[i]);
            char *o = jitop__sprintf("%s/obj%zu.o", dir, i);
            char *d = jitop__sprintf("%s/obj%zu.jitop.d", dir, i);
            char *bytes = NULL;
            bool changed = false;
            if (!o || !d)
                status = jitop__fail(JITOP_ENOMEM, "out of memory");
            if (status == JITOP_OK)
                status = ninja_deps(ninja, dir, i, d);
            if (status == JITOP_OK)
                status = jitop__host_deps_from_depfile(&ccs[i], d, t0, &objs[i].deps, &changed);
            if (status == JITOP_OK)
                status = jitop__host_deps_add_dirs(&units[i], &ccs[i], t0, &objs[i].deps,
                                                   &changed);
            if (status == JITOP_OK)
                status = jitop__read_file(o, &bytes, &objs[i].bin.size);
            objs[i].bin.data = (unsigned char *)bytes;
            if (d)
                unlink(d);
            if (status == JITOP_OK && changed && attempt < 3) {
                /* A file saved while ninja ran: build again (ninja sees it). */
                again = true;
            } else if (status == JITOP_OK) {
                status = jitop__host_obj_publish(ctx, &units[i], &ccs[i], &objs[i].deps,
                                                 objs[i].bin.data, objs[i].bin.size, NULL,
                                                 objs[i].key);
            }
            free(o);
            free(d);
        }
        if (!again) {
            char *lib = status == JITOP_OK ? jitop__sprintf("%s/lib.so", dir) : NULL;
            char *bytes = NULL;
            if (status == JITOP_OK && !lib)
                status = jitop__fail(JITOP_ENOMEM, "out of memory");
            if (status == JITOP_OK)
                status = jitop__read_file(lib, &bytes, &so->size);
            so->data = (unsigned char *)bytes;
            free(lib);
            break;
        }
    }
    if (lockfd >= 0)
        close(lockfd); /* releases the flock */
    if (status != JITOP_OK) {
        for (size_t i = 0; i < n; i++)
            jitop__host_obj_free(&objs[i]);
        jitop__binary_free(so);
    }
    free(lockpath);
    free(dir);
    return status;
}
