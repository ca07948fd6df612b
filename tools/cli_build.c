/*
 * `jitop build` and `jitop explain`: every unit of the command line (each
 * file alone and with each --name, for each arch:
 * jitop_cli_units), built into the cache or explained.
 *
 * A no-op build must cost a few milliseconds for the whole process, so the
 * pairs are first built, in this process, only if they hit
 * (jitop__build_if_cached: the stat fast path, no file read when nothing
 * changed, one hashing pass when the stat data does not vouch; unlike
 * jitop_explain it never walks the cache to say why a pair would miss),
 * and worker processes (tools/cli_pool.c) start only for the pairs that
 * need NVRTC, as many as -j, $JITOP_JOBS or the cores say and the memory
 * holds (tools/cli_mem.c). A worker builds through the same cache path as
 * any process (per-key lock, atomic write), so a worker killed mid-compile
 * leaves no partial entry, at most a temporary file `jitop gc` removes. One
 * pending pair, or -j1, compiles here without a fork. A hit's reported time
 * is that whole call, hashing included; a compile's includes the check
 * that found it missing.
 */
#include "cli.h"

#include "build/build.h" /* jitop__build_if_cached, jitop__build_before_fork, jitop__pch_plan_sources, jitop__now_ms: see cli.h */

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct job {
    const char *file, *arch; /* borrowed from the file and arch lists */
    const char *name;        /* a --name (borrowed), NULL for the file alone */
    int status;              /* JITOP_OK, or the jitop_build failure */
    jitop_build_result res;
    char *error;             /* jitop_errmsg of a failure, malloc'd */
    double check_ms;         /* the hit check that found it missing */
    int64_t input_bytes;     /* what that check read: its compile's estimate */
    double start_ms;         /* when its compile was handed out (jitop__now_ms) */
    int hit;                 /* build: built by the hit check; explain: would hit */
    char *why;               /* explain's answer (jitop_free) */
    char *log;               /* NVRTC's warnings for the binary (from the cache on a hit), malloc'd */
    int log_printed;         /* print_log printed it (under the output lock) */
} job;

/* A --name the file does not declare (NVRTC's answer, maybe cached): not a
 * failure of the build as long as another file of the command line
 * declares the name (checked at the end). A missing file fails its
 * file-alone job too. */
static int undeclared(const job *j)
{
    return j->name && j->status == JITOP_ENOTFOUND;
}

typedef struct build_run {
    jitop_ctx *ctx;
    const struct jitop_cli_build_args *a;
    job *jobs;
    size_t njobs;
    size_t *todo;            /* indices of the jobs that need a compile */
    size_t ntodo;
    size_t shown;            /* jobs answered or started: the N of [N/total] */
    size_t failed;
    size_t in_flight;        /* compiles running now */
    const job *last_started; /* what the progress line names */
    int progress;            /* stderr is a terminal: keep a progress line */
    int progress_drawn;
} build_run;

static const char *const *opts_of(const struct jitop_cli_build_args *a)
{
    return (const char *const *)a->options.v;
}

/* The name list of a job's unit for jitop_build: none, or its one name. */
static const char *const *names_of(const job *j)
{
    return j->name ? &j->name : NULL;
}

static size_t nnames_of(const job *j)
{
    return j->name ? 1 : 0;
}

/* build's own flag: --push (every entry of the command line, compiled or
 * cached, pushed to the writable remotes before the command ends). */
static int push_flag(void *user, int argc, char **argv, int *i)
{
    (void)argc;
    if (strcmp(argv[*i], "--push") != 0)
        return 0;
    *(int *)user = 1;
    return 1;
}

/* Parses the flags, resolves the arch and expands the paths: what build and
 * explain share (push: build's --push, NULL for explain). *done is set when
 * the command is over already (help printed, or an error reported); the
 * return value is then its exit status. */
static int prepare(int argc, char **argv, struct jitop_cli_build_args *a, jitop_cli_strs *files,
                   int *done, int *push)
{
    const char *cmd = argv[0];
    int rc = jitop_cli_parse_build_args(argc, argv, a, NULL, push ? push_flag : NULL, push);
    *done = 1;
    if (rc != JITOP_CLI_EXIT_OK)
        return rc;
    if (a->help) {
        jitop_cli_help(stdout, cmd);
        return JITOP_CLI_EXIT_OK;
    }
    if (a->paths.n == 0 && a->ops.n == 0) {
        fprintf(stderr, "jitop %s: no PATH given: name .cu files or directories (see jitop %s "
                        "--help)\n",
                cmd, cmd);
        return JITOP_CLI_EXIT_USAGE;
    }
    if ((rc = jitop_cli_resolve_archs(cmd, a)) != JITOP_CLI_EXIT_OK)
        return rc;
    if (a->paths.n > 0 &&
        (rc = jitop_cli_expand_paths(cmd, &a->paths, files)) != JITOP_CLI_EXIT_OK)
        return rc;
    *done = 0;
    return JITOP_CLI_EXIT_OK;
}

static void clear_progress(build_run *r)
{
    if (r->progress_drawn) {
        fputs("\r\033[K", stderr);
        r->progress_drawn = 0;
    }
}

/* NVRTC's log as a compiler prints its diagnostics, on stderr: NVRTC's
 * "FILE(LINE): warning ..." as "FILE:LINE: warning ...", the source lines
 * and carets as they are. A log printed already (an instance's compile
 * repeats its source's warnings) is not printed again. */
static void print_log(build_run *r, const job *j)
{
    if (!j->log || !*j->log)
        return;
    for (const job *o = r->jobs; o < r->jobs + r->njobs; o++)
        if (o->log_printed && strcmp(o->log, j->log) == 0)
            return;
    ((job *)j)->log_printed = 1;
    for (const char *line = j->log; *line;) {
        size_t n = strcspn(line, "\n");
        const char *open = memchr(line, '(', n);
        const char *close = open ? memchr(open, ')', n - (size_t)(open - line)) : NULL;
        size_t digits = open ? strspn(open + 1, "0123456789") : 0;
        if (open && close && digits > 0 && open + 1 + digits == close && close[1] == ':')
            fprintf(stderr, "%.*s:%.*s%.*s\n", (int)(open - line), line, (int)digits, open + 1,
                    (int)(n - (size_t)(close + 1 - line)), close + 1);
        else
            fprintf(stderr, "%.*s\n", (int)n, line);
        line += n + (line[n] == '\n');
    }
}

static void print_result(build_run *r, const job *j)
{
    const char *status = j->status != JITOP_OK ? "error" : j->res.cached ? "cached" : "compiled";
    clear_progress(r);
    if (undeclared(j)) {
        /* Expected for every file but the one(s) that declare the name. */
        if (r->a->json) {
            fputs("{\"file\":", stdout);
            jitop_cli_json_str(stdout, j->file);
            fputs(",\"arch\":", stdout);
            jitop_cli_json_str(stdout, j->arch);
            fputs(",\"name\":", stdout);
            jitop_cli_json_str(stdout, j->name);
            printf(",\"status\":\"undeclared\",\"key\":null,\"ms\":%.3f}\n", j->res.ms);
            fflush(stdout);
        }
        return;
    }
    print_log(r, j);
    if (r->a->json) {
        fputs("{\"file\":", stdout);
        jitop_cli_json_str(stdout, j->file);
        fputs(",\"arch\":", stdout);
        jitop_cli_json_str(stdout, j->arch);
        fputs(",\"name\":", stdout);
        jitop_cli_json_str_or_null(stdout, j->name);
        printf(",\"status\":\"%s\",\"key\":", status);
        if (j->status == JITOP_OK)
            jitop_cli_json_str(stdout, j->res.key);
        else
            fputs("null", stdout);
        printf(",\"ms\":%.3f", j->res.ms);
        if (j->status != JITOP_OK) {
            fputs(",\"error\":", stdout);
            jitop_cli_json_str(stdout, j->error ? j->error : jitop_strerror(j->status));
        }
        fputs("}\n", stdout);
    } else {
        jitop_cli_text(stdout, j->file, 0);
        putchar(' ');
        jitop_cli_text(stdout, j->arch, 0);
        if (j->status == JITOP_OK)
            printf(" %s %s %.1f ms", status, j->res.key, j->res.ms);
        else
            printf(" error %.1f ms", j->res.ms);
        if (j->name) {
            fputs("  ", stdout);
            jitop_cli_text(stdout, j->name, 0);
        }
        putchar('\n');
    }
    fflush(stdout);
    if (j->status != JITOP_OK) {
        fputs("jitop build: ", stderr);
        jitop_cli_text_unit(stderr, j->file, j->arch, j->name);
        fprintf(stderr, ": %s\n", jitop_strerror(j->status));
        jitop_cli_text(stderr, j->error ? j->error : "", 1);
        fputc('\n', stderr);
    }
}

/* Runs jitop_build for one job and keeps its outcome. A failing jitop_build
 * leaves its result untouched, so the time of a failure is taken here. */
static void build_job(build_run *r, job *j)
{
    const struct jitop_cli_build_args *a = r->a;
    double t0 = jitop__now_ms();
    j->status = jitop_build(r->ctx, j->file, j->arch, opts_of(a), a->options.n, names_of(j),
                            nnames_of(j), &j->res);
    if (j->status != JITOP_OK) {
        const char *msg = jitop_errmsg(r->ctx);
        j->error = strdup(msg && *msg ? msg : jitop_strerror(j->status));
        memset(&j->res, 0, sizeof j->res);
        j->res.ms = jitop__now_ms() - t0;
    } else if (j->res.warnings && jitop_build_log(r->ctx, j->res.key, &j->log) != JITOP_OK) {
        j->log = NULL; /* evicted meanwhile: the warnings are only not shown */
    }
    j->res.ms += j->check_ms;
}

static void draw_progress(build_run *r)
{
    if (!r->progress || r->in_flight == 0 || !r->last_started)
        return;
    fprintf(stderr, "\r\033[K[%zu/%zu] compiling ", r->shown, r->njobs);
    jitop_cli_text_unit(stderr, r->last_started->file, r->last_started->arch,
                        r->last_started->name);
    r->progress_drawn = 1;
}

/* The parent's side of one pending pair: started, then done. */
static void task_started(void *user, size_t task)
{
    build_run *r = user;
    r->shown++;
    r->in_flight++;
    r->last_started = &r->jobs[r->todo[task]];
    r->jobs[r->todo[task]].start_ms = jitop__now_ms();
    draw_progress(r);
}

static void task_done(build_run *r, job *j)
{
    r->in_flight--;
    if (j->status != JITOP_OK && !undeclared(j))
        r->failed++;
    print_result(r, j);
    draw_progress(r);
}

/* In a worker process: the compile of one pending pair, its outcome sent
 * back as status, cached, warnings, ms, key, the remotes it was pushed to,
 * error, log. The push is done before the answer: the worker ends with
 * _exit, which would drop it. */
static void worker_task(void *user, size_t task, jitop_cli_buf *reply)
{
    build_run *r = user;
    job *j = &r->jobs[r->todo[task]];
    int32_t v[3];
    build_job(r, j);
    uint64_t pushed =
        jitop__build_worker_pushes(r->ctx, j->status == JITOP_OK ? j->res.key : NULL);
    v[0] = j->status;
    v[1] = j->res.cached;
    v[2] = j->res.warnings;
    jitop_cli_buf_put(reply, v, sizeof v);
    jitop_cli_buf_put(reply, &j->res.ms, sizeof j->res.ms);
    jitop_cli_buf_put(reply, j->res.key, sizeof j->res.key);
    jitop_cli_buf_put(reply, &pushed, sizeof pushed);
    jitop_cli_buf_put_str(reply, j->error);
    jitop_cli_buf_put_str(reply, j->log);
    /* sent: this worker's copies are not needed again */
    free(j->error);
    free(j->log);
    j->error = j->log = NULL;
}

/* In the parent: a worker's reply read into the job, or its death made the
 * job's failure. */
static void worker_done(void *user, size_t task, const void *data, size_t len, const char *died)
{
    build_run *r = user;
    job *j = &r->jobs[r->todo[task]];
    const char *p = data, *end = p ? p + len : NULL;
    int32_t v[3];
    uint64_t pushed = 0;
    if (!died && (jitop_cli_buf_get(&p, end, v, sizeof v) != 0 ||
                  jitop_cli_buf_get(&p, end, &j->res.ms, sizeof j->res.ms) != 0 ||
                  jitop_cli_buf_get(&p, end, j->res.key, sizeof j->res.key) != 0 ||
                  jitop_cli_buf_get(&p, end, &pushed, sizeof pushed) != 0 ||
                  jitop_cli_buf_get_str(&p, end, &j->error) != 0 ||
                  jitop_cli_buf_get_str(&p, end, &j->log) != 0 || p != end ||
                  j->res.key[sizeof j->res.key - 1] != '\0'))
        died = "the worker process sent a reply that does not parse";
    if (died) {
        free(j->error);
        free(j->log);
        j->log = NULL;
        memset(&j->res, 0, sizeof j->res);
        j->res.ms = jitop__now_ms() - j->start_ms + j->check_ms;
        j->status = JITOP_ENVRTC;
        size_t n = strlen(j->file) + strlen(died) + 128;
        if ((j->error = malloc(n)) != NULL)
            snprintf(j->error, n,
                     "%s: %s while it compiled this file; the cache holds no partial "
                     "entry for it (an entry appears whole, by one rename, or not at all)",
                     j->file, died);
    } else {
        j->status = v[0];
        j->res.cached = v[1];
        j->res.warnings = v[2];
        if (j->status == JITOP_OK && pushed)
            jitop__build_note_pushed(r->ctx, j->res.key, pushed);
    }
    task_done(r, j);
}

/* The compiles of the pending pairs, here (one at a time) or in worker
 * processes. 0, or an errno value when no worker could be started. */
static int compile_pending(build_run *r, int jobs)
{
    if (jobs <= 1 || r->ntodo <= 1) {
        for (size_t t = 0; t < r->ntodo; t++) {
            task_started(r, t);
            build_job(r, &r->jobs[r->todo[t]]);
            task_done(r, &r->jobs[r->todo[t]]);
        }
        return 0;
    }
    jitop_cli_pool_ops ops = {.run = worker_task, .started = task_started, .done = worker_done};
    /* Longest first (tools/cli_pool.c), by the bytes each compile reads. */
    int64_t *est = calloc(r->ntodo, sizeof *est);
    if (est) {
        for (size_t t = 0; t < r->ntodo; t++)
            est[t] = r->jobs[r->todo[t]].input_bytes;
        jitop_cli_longest_first(r->todo, est, r->ntodo);
        free(est);
    }
    jitop__build_before_fork(r->ctx);
    /* A preamble that more pending files share than there are workers: its
     * first file is compiled here, making the PCH that every worker then
     * inherits (build/pch.c). */
    const char **files = calloc(r->ntodo, sizeof *files), **archs = calloc(r->ntodo, sizeof *archs);
    for (size_t t = 0; files && archs && t < r->ntodo; t++) {
        files[t] = r->jobs[r->todo[t]].file;
        archs[t] = r->jobs[r->todo[t]].arch;
    }
    int first = files && archs ? jitop__pch_plan_sources(r->ctx, files, archs, r->ntodo, jobs,
                                                         opts_of(r->a), r->a->options.n)
                               : -1;
    free(files);
    free(archs);
    if (first >= 0) {
        job *j = &r->jobs[r->todo[first]];
        task_started(r, (size_t)first);
        build_job(r, j);
        task_done(r, j);
        memmove(&r->todo[first], &r->todo[first + 1], (r->ntodo - first - 1) * sizeof *r->todo);
        r->ntodo--;
    }
    return jitop_cli_pool_procs(r->ntodo, jobs, &ops, r);
}

/* -j (or $JITOP_JOBS, or the cores), then as many as the memory holds. A
 * cut is said on stderr. */
static int choose_jobs(const struct jitop_cli_build_args *a, size_t ntodo)
{
    int want = a->jobs > 0 ? a->jobs : jitop_cli_default_jobs();
    int64_t per_job = JITOP_CLI_JOB_MEM_DEFAULT;
    const char *env = getenv("JITOP_JOB_MEM");
    if (want < 2 || ntodo < 2)
        return want;
    if ((size_t)want > ntodo)
        want = (int)ntodo;
    if (env && *env && jitop_cli_parse_size(env, &per_job) != 0) {
        fprintf(stderr, "jitop build: JITOP_JOB_MEM='%s' is not a size (e.g. 512M, or 0 for "
                        "no memory guard); using %lld MiB\n",
                env, (long long)(JITOP_CLI_JOB_MEM_DEFAULT >> 20));
        per_job = JITOP_CLI_JOB_MEM_DEFAULT;
    }
    int64_t avail = jitop_cli_mem_available("/proc/meminfo");
    int jobs = jitop_cli_mem_jobs(want, avail, per_job);
    if (jobs < want)
        fprintf(stderr,
                "jitop build: %d compiles at once, not %d: %lld MiB of memory available "
                "(MemAvailable), about %lld MiB per compile (JITOP_JOB_MEM sets it, 0 turns "
                "this guard off)\n",
                jobs, want, (long long)(avail >> 20), (long long)(per_job >> 20));
    return jobs;
}

/* Reports each --name that no file declares, for each arch (NVRTC's first
 * answer says why); returns how many. */
static size_t names_nowhere(const build_run *r)
{
    size_t bad = 0;
    for (size_t i = 0; i < r->njobs; i++) {
        const job *j = &r->jobs[i];
        if (!undeclared(j))
            continue;
        /* Once per (name, arch): at its first job. */
        bool earlier = false, declared = false;
        for (size_t k = 0; k < r->njobs; k++) {
            const job *o = &r->jobs[k];
            if (!o->name || strcmp(o->name, j->name) != 0 || strcmp(o->arch, j->arch) != 0)
                continue;
            earlier = earlier || k < i;
            declared = declared || !undeclared(o);
        }
        if (earlier || declared)
            continue;
        fprintf(stderr, "jitop build: --name '%s' (%s): no file given declares it\n%s\n", j->name,
                j->arch, j->error ? j->error : "");
        bad++;
    }
    return bad;
}

/* One job per unit of the command line. */
static int make_jobs(const char *cmd, const jitop_cli_strs *files,
                     const struct jitop_cli_build_args *a, job **out, size_t *n)
{
    jitop_cli_unit *units = NULL;
    int rc = jitop_cli_units(cmd, files, &a->archs, &a->names, &units, n);
    if (rc != JITOP_CLI_EXIT_OK)
        return rc;
    *out = calloc(*n ? *n : 1, sizeof **out);
    if (!*out) {
        free(units);
        fprintf(stderr, "jitop %s: out of memory\n", cmd);
        return JITOP_CLI_EXIT_FAIL;
    }
    for (size_t i = 0; i < *n; i++)
        (*out)[i] = (job){.file = units[i].file, .arch = units[i].arch, .name = units[i].name};
    free(units);
    return JITOP_CLI_EXIT_OK;
}

/* --push: each built entry (compiled or cached) to every writable remote,
 * now, so that the fleet hits once the command returns. Returns how many
 * could not be pushed (1 when no remote is configured: said once). */
static size_t push_all(build_run *r)
{
    size_t failed = 0, pushed = 0;
    for (size_t i = 0; i < r->njobs; i++) {
        job *j = &r->jobs[i];
        if (j->status != JITOP_OK || !j->res.key[0])
            continue;
        int n = 0;
        int st = jitop_remote_push(r->ctx, j->res.key, &n);
        if (st == JITOP_EINVAL) { /* no remote configured: said once */
            fprintf(stderr, "jitop build --push: %s\n", jitop_errmsg(r->ctx));
            return 1;
        }
        if (st != JITOP_OK) {
            fprintf(stderr, "jitop build: push %s (%s %s): %s\n", j->res.key, j->file, j->arch,
                    jitop_errmsg(r->ctx));
            failed++;
        } else {
            pushed++;
        }
    }
    if (!r->a->json)
        fprintf(stderr, "jitop build: pushed %zu entries to the remote cache%s\n", pushed,
                failed ? " (some failed)" : "");
    return failed;
}

int jitop_cli_build(int argc, char **argv)
{
    struct jitop_cli_build_args a = {0};
    jitop_cli_strs files = {0};
    build_run r = {0};
    int done = 0, push = 0;
    int rc = prepare(argc, argv, &a, &files, &done, &push);
    if (done)
        goto out;
    if ((rc = jitop_cli_ctx_create("build", &a, &r.ctx)) != JITOP_CLI_EXIT_OK)
        goto out;
    r.a = &a;
    r.progress = isatty(STDERR_FILENO);
    if ((rc = jitop_cli_build_host("build", r.ctx, &files, &a.options, a.json)) !=
        JITOP_CLI_EXIT_OK)
        goto out;
    if ((rc = make_jobs("build", &files, &a, &r.jobs, &r.njobs)) != JITOP_CLI_EXIT_OK)
        goto out;
    if (!(r.todo = calloc(r.njobs ? r.njobs : 1, sizeof *r.todo))) {
        fprintf(stderr, "jitop build: out of memory\n");
        rc = JITOP_CLI_EXIT_FAIL;
        goto out;
    }

    /* The shipped ops (--op) first: each folds its instances into its
     * source's binary, which a file job of that source then finds. */
    size_t ops_failed = jitop_cli_build_ops(r.ctx, &a.ops, &a.archs, a.json);

    /* Cached pairs first, on this thread; a failure to ask (an unreadable
     * file, a bad option) is left to jitop_build to report. */
    for (size_t i = 0; i < r.njobs; i++) {
        job *j = &r.jobs[i];
        bool hit = false;
        jitop_build_result res;
        double t0 = jitop__now_ms();
        int st = jitop__build_if_cached(r.ctx, j->file, j->arch, opts_of(&a), a.options.n,
                                        names_of(j), nnames_of(j), &hit, &res, &j->input_bytes);
        if (st == JITOP_OK && hit) {
            j->status = JITOP_OK;
            j->res = res;
            j->hit = 1;
            if (res.warnings && jitop_build_log(r.ctx, res.key, &j->log) != JITOP_OK)
                j->log = NULL; /* evicted meanwhile: the warnings are only not shown */
            continue;
        }
        if (st == JITOP_ENOTFOUND && j->name) {
            /* The file does not declare the name: the answer the cache
             * kept (jitop_build would give the same, compiling nothing). */
            const char *msg = jitop_errmsg(r.ctx);
            j->status = st;
            j->error = strdup(msg && *msg ? msg : jitop_strerror(st));
            memset(&j->res, 0, sizeof j->res);
            j->res.ms = jitop__now_ms() - t0;
            j->hit = 1;
            continue;
        }
        j->check_ms = st == JITOP_OK ? res.ms : 0;
        r.todo[r.ntodo++] = i;
    }
    /* An arch this NVRTC does not compile for is a usage error, said once
     * for the command rather than once per file. Asked only when something
     * is to be compiled: it loads NVRTC, which a no-op build never does. */
    if (r.ntodo > 0) {
        const char **archs = calloc(r.ntodo, sizeof *archs);
        if (!archs) {
            fprintf(stderr, "jitop build: out of memory\n");
            rc = JITOP_CLI_EXIT_FAIL;
            goto out;
        }
        for (size_t t = 0; t < r.ntodo; t++)
            archs[t] = r.jobs[r.todo[t]].arch;
        rc = jitop_cli_check_archs("build", archs, r.ntodo);
        free(archs);
        if (rc != JITOP_CLI_EXIT_OK)
            goto out;
    }
    for (size_t i = 0; i < r.njobs; i++) {
        if (!r.jobs[i].hit)
            continue;
        r.shown++;
        print_result(&r, &r.jobs[i]);
    }

    int pool_rc = compile_pending(&r, choose_jobs(&a, r.ntodo));
    if (pool_rc != 0) {
        clear_progress(&r);
        fprintf(stderr, "jitop build: cannot start a compile worker process: %s\n",
                strerror(pool_rc));
        rc = JITOP_CLI_EXIT_FAIL;
        goto out;
    }
    clear_progress(&r);
    r.failed += names_nowhere(&r) + ops_failed;
    if (r.failed) {
        fprintf(stderr, "jitop build: %zu of %zu builds failed\n", r.failed,
                r.njobs + a.ops.n * a.archs.n);
        rc = JITOP_CLI_EXIT_FAIL;
    }
    if (push && push_all(&r) > 0)
        rc = JITOP_CLI_EXIT_FAIL;
    if (fflush(stdout) != 0 || ferror(stdout)) {
        perror("jitop build: stdout");
        rc = JITOP_CLI_EXIT_FAIL;
    }
out:
    for (size_t i = 0; i < r.njobs; i++) {
        free(r.jobs[i].error);
        free(r.jobs[i].log);
    }
    free(r.jobs);
    free(r.todo);
    jitop_ctx_destroy(r.ctx);
    jitop_cli_strs_free(&files);
    jitop_cli_build_args_free(&a);
    return rc;
}

static void print_explain(const struct jitop_cli_build_args *a, const job *j, int hit,
                          const char *why)
{
    if (a->json) {
        fputs("{\"file\":", stdout);
        jitop_cli_json_str(stdout, j->file);
        fputs(",\"arch\":", stdout);
        jitop_cli_json_str(stdout, j->arch);
        fputs(",\"name\":", stdout);
        jitop_cli_json_str_or_null(stdout, j->name);
        printf(",\"hit\":%s,\"why\":", hit ? "true" : "false");
        jitop_cli_json_str(stdout, why ? why : "");
        fputs("}\n", stdout);
    } else {
        jitop_cli_text(stdout, j->file, 0);
        putchar(' ');
        jitop_cli_text(stdout, j->arch, 0);
        if (j->name) {
            putchar(' ');
            jitop_cli_text(stdout, j->name, 0);
        }
        printf(" %s", hit ? "hit" : "miss");
        /* one line per pair: the library's reasons are joined with "; " */
        for (const char *p = why ? why : ""; *p;) {
            size_t len = strcspn(p, "\n");
            char *reason = strndup(p, len);
            fputs(p == why ? ": " : "; ", stdout);
            jitop_cli_text(stdout, reason ? reason : "?", 0);
            free(reason);
            p += len;
            if (*p == '\n')
                p++;
        }
        putchar('\n');
    }
}

int jitop_cli_explain(int argc, char **argv)
{
    struct jitop_cli_build_args a = {0};
    jitop_cli_strs files = {0};
    jitop_ctx *ctx = NULL;
    job *jobs = NULL;
    size_t njobs = 0;
    int done = 0;
    int rc = prepare(argc, argv, &a, &files, &done, NULL);
    if (done)
        goto out;
    if ((rc = jitop_cli_ctx_create("explain", &a, &ctx)) != JITOP_CLI_EXIT_OK)
        goto out;
    if ((rc = make_jobs("explain", &files, &a, &jobs, &njobs)) != JITOP_CLI_EXIT_OK)
        goto out;
    /* Every answer first: a miss for an arch this NVRTC does not compile
     * for ("never built") is a usage error, said once instead. */
    const char **missed = calloc(njobs ? njobs : 1, sizeof *missed);
    size_t nmissed = 0;
    if (!missed) {
        fprintf(stderr, "jitop explain: out of memory\n");
        rc = JITOP_CLI_EXIT_FAIL;
        goto out;
    }
    for (size_t i = 0; i < njobs; i++) {
        job *j = &jobs[i];
        j->status = jitop_explain(ctx, j->file, j->arch, opts_of(&a), a.options.n, names_of(j),
                                  nnames_of(j), &j->hit, &j->why);
        if (j->status != JITOP_OK) {
            const char *msg = jitop_errmsg(ctx);
            j->error = strdup(msg && *msg ? msg : jitop_strerror(j->status));
        } else if (!j->hit) {
            missed[nmissed++] = j->arch;
        }
    }
    if (nmissed > 0)
        rc = jitop_cli_check_archs("explain", missed, nmissed);
    free(missed);
    for (size_t i = 0; rc != JITOP_CLI_EXIT_USAGE && i < njobs; i++) {
        const job *j = &jobs[i];
        if (j->status != JITOP_OK) {
            fputs("jitop explain: ", stderr);
            jitop_cli_text_unit(stderr, j->file, j->arch, NULL);
            fprintf(stderr, ": %s: ", jitop_strerror(j->status));
            jitop_cli_text(stderr, j->error ? j->error : "", 1);
            fputc('\n', stderr);
            rc = JITOP_CLI_EXIT_FAIL;
        } else {
            print_explain(&a, j, j->hit, j->why);
        }
    }
    if (fflush(stdout) != 0 || ferror(stdout)) {
        perror("jitop explain: stdout");
        rc = JITOP_CLI_EXIT_FAIL;
    }
out:
    for (size_t i = 0; i < njobs; i++) {
        jitop_free(jobs[i].why);
        free(jobs[i].error);
    }
    free(jobs);
    jitop_ctx_destroy(ctx);
    jitop_cli_strs_free(&files);
    jitop_cli_build_args_free(&a);
    return rc;
}
