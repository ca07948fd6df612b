/*
 * `jitop watch [build flags] PATH... [-- COMMAND]`: builds every unit of the
 * command line (each file alone and with each --name it defines, for each
 * arch: jitop_cli_units), then rebuilds on every save of a source or of a
 * header it includes, prints one line per result, and reruns COMMAND after
 * each batch of saves once every unit builds.
 *
 * Threads: the library's watch thread builds (a compile-only context: no
 * GPU needed), prints and runs COMMAND; the main thread only waits for
 * SIGINT/SIGTERM on a signalfd (the signals are blocked, so no handler runs
 * and nothing is done in signal context), then stops the command and the
 * watch and exits 0.
 */
#include "cli.h"

#include "watch/watch.h" /* the watch engine on units: see cli.h */

#include <errno.h>
#include <signal.h>
#include <spawn.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

typedef struct pair {
    struct watch_run *run;
    const char *file, *arch; /* borrowed from the argument lists */
    const char *name;        /* a --name (borrowed); NULL: the file alone */
    bool host;               /* the host sources, built together (arch "host") */
    int status;              /* latest outcome */
    bool reported;           /* built at least once */
} pair;

typedef struct watch_run {
    pair *pairs;
    size_t npairs;
    char *command;           /* NULL: none */
    bool color;              /* stdout is a terminal */
    bool json;               /* --json: one JSON object per result */
    pthread_mutex_t lock;    /* the fields below: main thread vs watch thread */
    bool ok_in_batch;        /* some pair built (new code or recovered) since the last batch */
    bool stopping;
    pid_t child;             /* the running COMMAND, 0 when none */
    jitop_cli_strs host_srcs; /* host sources (.c, .cpp, ...): one target */
    jitop_cli_strs host_opts; /* its options (jitop_cli_take_host) */
} watch_run;

static const char *paint(const watch_run *r, const char *sgr)
{
    return r->color ? sgr : "";
}

/* On the watch thread: one line per result; a failure adds the log. */
static void on_report(void *user, const jitop__unit_report *ur)
{
    pair *p = user;
    watch_run *r = p->run;
    const jitop__reload_report *rr = ur->r;
    const char *green = paint(r, "\033[32m"), *red = paint(r, "\033[31m"),
               *reset = paint(r, "\033[0m");
    if (r->json) {
        fputs("{\"file\":", stdout);
        jitop_cli_json_str(stdout, p->file);
        fputs(",\"arch\":", stdout);
        jitop_cli_json_str(stdout, p->arch);
        fputs(",\"name\":", stdout);
        jitop_cli_json_str_or_null(stdout, p->name);
        printf(",\"status\":\"%s\",\"key\":", rr->status == JITOP_OK ? "ok" : "error");
        if (rr->status == JITOP_OK)
            jitop_cli_json_str(stdout, ur->key);
        else
            fputs("null", stdout);
        printf(",\"cached\":%s,\"unchanged\":%s,\"ms\":%.3f", ur->cached ? "true" : "false",
               rr->recovered ? "true" : "false", rr->ms);
        if (rr->status != JITOP_OK) {
            fputs(",\"error\":", stdout);
            jitop_cli_json_str(stdout, rr->message ? rr->message : jitop_strerror(rr->status));
        }
        fputs("}\n", stdout);
    } else if (rr->status == JITOP_OK) {
        const char *note = rr->recovered ? " (unchanged)" : ur->cached ? " (cached)" : "";
        printf("%sok%s ", green, reset);
        jitop_cli_text_unit(stdout, p->file, p->arch, p->name);
        printf(" %.1f ms%s\n", rr->ms, note);
    } else {
        printf("%serror%s ", red, reset);
        jitop_cli_text_unit(stdout, p->file, p->arch, p->name);
        printf(" %.1f ms: %s\n", rr->ms, jitop_strerror(rr->status));
        jitop_cli_text(stdout, rr->message ? rr->message : "", 1);
        putchar('\n');
    }
    fflush(stdout);
    pthread_mutex_lock(&r->lock);
    p->status = rr->status;
    p->reported = true;
    r->ok_in_batch = r->ok_in_batch || rr->status == JITOP_OK;
    pthread_mutex_unlock(&r->lock);
}

/* Runs COMMAND through /bin/sh -c and waits for it. The child gets the
 * default signal dispositions and an empty mask (ours blocks SIGINT/SIGTERM
 * for the signalfd, and a background start may have set SIGINT ignored). */
static void run_command(watch_run *r)
{
    posix_spawnattr_t attr;
    sigset_t none, defaults;
    sigemptyset(&none);
    sigemptyset(&defaults);
    sigaddset(&defaults, SIGINT);
    sigaddset(&defaults, SIGTERM);
    sigaddset(&defaults, SIGQUIT);
    sigaddset(&defaults, SIGPIPE);
    char *argv[] = {"sh", "-c", r->command, NULL};
    if (posix_spawnattr_init(&attr) != 0) {
        fprintf(stderr, "jitop watch: cannot run the command: out of memory\n");
        return;
    }
    int err = posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
    if (!err)
        err = posix_spawnattr_setsigmask(&attr, &none);
    if (!err)
        err = posix_spawnattr_setsigdefault(&attr, &defaults);
    pid_t pid = 0;
    /* Spawned under the lock so that a stop either sees the child (and
     * terminates it) or prevents it. */
    pthread_mutex_lock(&r->lock);
    if (!err && !r->stopping) {
        err = posix_spawn(&pid, "/bin/sh", NULL, &attr, argv, environ);
        if (!err)
            r->child = pid;
    }
    pthread_mutex_unlock(&r->lock);
    posix_spawnattr_destroy(&attr);
    if (err) {
        fprintf(stderr, "jitop watch: cannot run /bin/sh -c %s: %s\n", r->command, strerror(err));
        return;
    }
    if (pid == 0)
        return; /* stopping */
    int wstatus = 0;
    pid_t got;
    while ((got = waitpid(pid, &wstatus, 0)) < 0 && errno == EINTR)
        ;
    pthread_mutex_lock(&r->lock);
    r->child = 0;
    bool stopping = r->stopping;
    pthread_mutex_unlock(&r->lock);
    if (got < 0) {
        fprintf(stderr, "jitop watch: waitpid: %s\n", strerror(errno));
    } else if (!stopping && WIFEXITED(wstatus) && WEXITSTATUS(wstatus) != 0) {
        printf("%scommand exited with status %d%s\n", paint(r, "\033[31m"), WEXITSTATUS(wstatus),
               paint(r, "\033[0m"));
    } else if (!stopping && WIFSIGNALED(wstatus)) {
        printf("%scommand killed by signal %d%s\n", paint(r, "\033[31m"), WTERMSIG(wstatus),
               paint(r, "\033[0m"));
    }
    fflush(stdout);
}

/* After each batch of rebuilds: COMMAND, when some pair just built and every
 * pair builds (a failing one would make the command test old binaries). */
static void on_batch(void *user)
{
    watch_run *r = user;
    pthread_mutex_lock(&r->lock);
    bool all_ok = r->ok_in_batch;
    for (size_t i = 0; i < r->npairs && all_ok; i++)
        all_ok = r->pairs[i].reported && r->pairs[i].status == JITOP_OK;
    if (all_ok)
        r->ok_in_batch = false;
    pthread_mutex_unlock(&r->lock);
    if (all_ok && r->command)
        run_command(r);
}

/* COMMAND [ARGS]: the words after "--", joined with spaces for sh -c. */
static char *join_command(int argc, char **argv, int first)
{
    size_t len = 1;
    for (int i = first; i < argc; i++)
        len += strlen(argv[i]) + 1;
    char *s = malloc(len);
    if (!s)
        return NULL;
    s[0] = '\0';
    for (int i = first; i < argc; i++) {
        if (i > first)
            strcat(s, " ");
        strcat(s, argv[i]);
    }
    return s;
}

/* Blocks until SIGINT or SIGTERM arrives on fd. */
static int wait_for_signal(int fd)
{
    for (;;) {
        struct signalfd_siginfo si;
        ssize_t n = read(fd, &si, sizeof si);
        if (n == (ssize_t)sizeof si && (si.ssi_signo == SIGINT || si.ssi_signo == SIGTERM))
            return 0;
        if (n < 0 && errno != EINTR) {
            fprintf(stderr, "jitop watch: reading signals: %s\n", strerror(errno));
            return -1;
        }
    }
}

/* Parses argv: the build flags and PATH... (expanded into files, with the
 * archs resolved) and *rest, where COMMAND starts (argc: none). Returns
 * JITOP_CLI_EXIT_OK (a->help set: only the help is asked for) or the exit
 * status of a usage error or failure, already printed. */
static int parse_args(int argc, char **argv, struct jitop_cli_build_args *a, int *rest,
                      jitop_cli_strs *files)
{
    const char *cmd = argv[0];
    int rc = jitop_cli_parse_build_args(argc, argv, a, rest, NULL, NULL);
    if (rc != JITOP_CLI_EXIT_OK || a->help)
        return rc;
    if (a->paths.n == 0) {
        fprintf(stderr, "jitop %s: no PATH given: name .cu files or directories (see jitop %s "
                        "--help)\n",
                cmd, cmd);
        return JITOP_CLI_EXIT_USAGE;
    }
    if ((rc = jitop_cli_resolve_archs(cmd, a)) != JITOP_CLI_EXIT_OK)
        return rc;
    return jitop_cli_expand_paths(cmd, &a->paths, files);
}

/* r->pairs: each file alone and each --name on its own, as the runtime
 * builds them (jitop_cli_units), so that a COMMAND run after a rebuild hits
 * the cache. */
static int make_pairs(const char *cmd, watch_run *r, const jitop_cli_strs *files,
                      const struct jitop_cli_build_args *a)
{
    jitop_cli_unit *units = NULL;
    int rc = jitop_cli_units(cmd, files, &a->archs, &a->names, &units, &r->npairs);
    if (rc != JITOP_CLI_EXIT_OK)
        return rc;
    size_t host = r->host_srcs.n > 0;
    r->pairs = calloc(r->npairs + host + 1, sizeof *r->pairs);
    for (size_t i = 0; r->pairs && i < r->npairs; i++)
        r->pairs[i] = (pair){.run = r, .file = units[i].file, .arch = units[i].arch,
                             .name = units[i].name};
    if (r->pairs && host)
        r->pairs[r->npairs++] = (pair){.run = r, .file = r->host_srcs.v[0], .arch = "host",
                                       .host = true};
    free(units);
    if (!r->pairs) {
        fprintf(stderr, "jitop %s: out of memory\n", cmd);
        return JITOP_CLI_EXIT_FAIL;
    }
    return JITOP_CLI_EXIT_OK;
}

/* Blocks SIGINT and SIGTERM and opens *sigfd on them. Called before any
 * thread starts, so that every thread inherits the mask and the signals can
 * only be read from the signalfd. *masked: the mask changed (old_mask holds
 * the one to restore). 0, or -1 after printing why. */
static int block_stop_signals(const char *cmd, sigset_t *old_mask, bool *masked, int *sigfd)
{
    sigset_t stop_signals;
    sigemptyset(&stop_signals);
    sigaddset(&stop_signals, SIGINT);
    sigaddset(&stop_signals, SIGTERM);
    if (pthread_sigmask(SIG_BLOCK, &stop_signals, old_mask) != 0) {
        fprintf(stderr, "jitop %s: cannot block SIGINT/SIGTERM\n", cmd);
        return -1;
    }
    *masked = true;
    *sigfd = signalfd(-1, &stop_signals, SFD_CLOEXEC);
    if (*sigfd < 0) {
        fprintf(stderr, "jitop %s: signalfd: %s\n", cmd, strerror(errno));
        return -1;
    }
    return 0;
}

/* Starts the watch (*w) and watches every pair of r in it. 0, or -1 after
 * printing why. */
static int watch_pairs(const char *cmd, watch_run *r, jitop_ctx *ctx,
                       const struct jitop_cli_build_args *a, jitop__watch **w)
{
    if (jitop__watch_create(w) != JITOP_OK) {
        fprintf(stderr, "jitop %s: %s\n", cmd, jitop_errmsg(NULL));
        return -1;
    }
    jitop__watch_on_batch(*w, on_batch, r);
    /* Every pair is filled in before the first is watched: the watch
     * thread's batch check reads them all. */
    for (size_t i = 0; i < r->npairs; i++) {
        pair *p = &r->pairs[i];
        uint64_t id;
        int st = p->host ? jitop__watch_host(*w, ctx, JITOP_RELOAD_AUTO,
                                             (const char *const *)r->host_srcs.v, r->host_srcs.n,
                                             (const char *const *)r->host_opts.v,
                                             r->host_opts.n, on_report, p, &id)
                         : jitop__watch_unit(*w, ctx, JITOP_RELOAD_AUTO, p->file, p->arch,
                                             (const char *const *)a->options.v, a->options.n,
                                             p->name ? &p->name : NULL, p->name ? 1 : 0,
                                             on_report, p, &id);
        if (st != JITOP_OK) {
            fprintf(stderr, "jitop %s: ", cmd);
            jitop_cli_text_unit(stderr, p->file, p->arch, p->name);
            fputs(": ", stderr);
            jitop_cli_text(stderr, jitop_errmsg(NULL), 1);
            fputc('\n', stderr);
            return -1;
        }
    }
    return 0;
}

/* Ends COMMAND if it runs, and keeps another from starting. */
static void stop_command(watch_run *r)
{
    pthread_mutex_lock(&r->lock);
    r->stopping = true;
    pid_t child = r->child;
    pthread_mutex_unlock(&r->lock);
    if (child > 0)
        kill(child, SIGTERM); /* ESRCH: it just ended, the thread reaps it */
}

int jitop_cli_watch(int argc, char **argv)
{
    const char *cmd = argv[0];
    struct jitop_cli_build_args a = {0};
    jitop_cli_strs files = {0};
    watch_run r = {0};
    jitop_ctx *ctx = NULL;
    jitop__watch *w = NULL;
    int sigfd = -1, rest = argc;
    bool lock_ok = false, masked = false;
    sigset_t old_mask;

    int rc = parse_args(argc, argv, &a, &rest, &files);
    if (rc != JITOP_CLI_EXIT_OK)
        goto out;
    if (a.help) {
        jitop_cli_help(stdout, cmd);
        goto out;
    }
    rc = JITOP_CLI_EXIT_FAIL;
    if (rest < argc && !(r.command = join_command(argc, argv, rest))) {
        fprintf(stderr, "jitop %s: out of memory\n", cmd);
        goto out;
    }
    if (jitop_cli_ctx_create(cmd, &a, &ctx) != 0)
        goto out;
    r.json = a.json != 0;
    r.color = !r.json && isatty(STDOUT_FILENO);
    if ((rc = jitop_cli_take_host(cmd, &files, &a.options, &r.host_srcs, &r.host_opts)) !=
        JITOP_CLI_EXIT_OK)
        goto out;
    if ((rc = make_pairs(cmd, &r, &files, &a)) != JITOP_CLI_EXIT_OK)
        goto out;
    rc = JITOP_CLI_EXIT_FAIL;
    if (pthread_mutex_init(&r.lock, NULL) != 0) {
        fprintf(stderr, "jitop %s: out of memory\n", cmd);
        goto out;
    }
    lock_ok = true;
    if (block_stop_signals(cmd, &old_mask, &masked, &sigfd) != 0 ||
        watch_pairs(cmd, &r, ctx, &a, &w) != 0 || wait_for_signal(sigfd) != 0)
        goto out;
    rc = JITOP_CLI_EXIT_OK;
out:
    if (lock_ok)
        stop_command(&r);
    /* Joins the watch thread: after this no report or command runs. */
    jitop__watch_destroy(w);
    jitop_ctx_destroy(ctx);
    if (sigfd >= 0)
        close(sigfd);
    if (masked)
        pthread_sigmask(SIG_SETMASK, &old_mask, NULL);
    if (lock_ok)
        pthread_mutex_destroy(&r.lock);
    free(r.pairs);
    free(r.command);
    jitop_cli_strs_free(&r.host_srcs);
    jitop_cli_strs_free(&r.host_opts);
    jitop_cli_strs_free(&files);
    jitop_cli_build_args_free(&a);
    return rc;
}
