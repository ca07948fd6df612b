/*
 * What the command-line tool's files share: the build flags that `jitop build`,
 * `jitop explain` and `jitop watch` all accept, path expansion, the default
 * arch, and the command entry points that tools/jitop.c dispatches to.
 *
 * Files:
 *   jitop.c        main: command dispatch, --version, usage errors (exit 2)
 *   cli_args.c     build flag parsing, string lists, SIZE parsing
 *   cli_paths.c    PATH... to a sorted list of .cu files
 *   cli_arch.c     the default arch and the compile-only context
 *   cli_help.c     the help text of every command
 *   cli_json.c     JSON string escaping, terminal-safe plain text
 *   cli_build.c    `jitop build` / `jitop explain`
 *   cli_ops.c      `jitop build --op`: the shipped ops prewarmed
 *   cli_host.c     `jitop build` / `jitop watch` of host sources (.c, .cpp, ...)
 *   cli_units.c    the (file, arch, name) units a command line covers
 *   cli_pool.c     worker processes for `jitop build`, their protocol
 *   cli_mem.c      the memory guard: how many compiles the memory holds
 *   cli_cache.c    `jitop ls`, `jitop gc`, `jitop clean`
 *   cmd_watch.c    `jitop watch`
 *
 * The CLI uses the public API (jitop.h) only, but for four files. It links
 * the static library (libjitop.a), whose internal jitop__ symbols it can
 * reach (the shared library hides them), and these use what the public API
 * has no call for.
 * Privileged internal clients:
 *   cli_arch.c     jitop__arch_valid, jitop__nvrtc_check_arch
 *                  (compile/compile.h): an arch NVRTC does not support is a
 *                  usage error said once, before any file is compiled
 *   cli_build.c    jitop__build_if_cached (build/build.h): serves a unit
 *                  that hits from the cache on the main thread (its time
 *                  covers its hashing), so that a no-op build starts no
 *                  worker process; jitop__build_before_fork, so that the
 *                  workers inherit the cache's once-only warnings as said;
 *                  jitop__build_worker_pushes / _note_pushed, so that a
 *                  worker's pushes are sent before its _exit and --push
 *                  sends each entry once
 *   cli_host.c     jitop__host_lib_build (host/host.h): host sources are one
 *                  shared object, built without loading it (no public call
 *                  builds host code without a module)
 *   cmd_watch.c    the watch engine (watch/watch.h) on units built into the
 *                  cache: jitop_watch watches loaded modules, which need a
 *                  GPU; `jitop watch` must not
 * scripts/check-rooms.sh fails when a tools/ file not listed above includes
 * an internal header. The rooms' order does not bind these files: they sit
 * above src/.
 *
 * Exit codes of every command: 0 success, 1 a build/cache operation failed,
 * 2 a usage error (unknown command or flag, missing value, no arch).
 */
#ifndef JITOP_CLI_H
#define JITOP_CLI_H

#include "jitop.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define JITOP_CLI_EXIT_OK 0
#define JITOP_CLI_EXIT_FAIL 1
#define JITOP_CLI_EXIT_USAGE 2

/* A growable list of owned strings (the CLI keeps its own small list rather
 * than the library's internal jitop__strv). */
typedef struct jitop_cli_strs {
    char **v;
    size_t n, cap;
} jitop_cli_strs;

/* Appends a copy of s. 0, or -1 on ENOMEM. */
int jitop_cli_strs_push(jitop_cli_strs *l, const char *s);
/* Appends a copy of the first len bytes of s. 0, or -1 on ENOMEM. */
int jitop_cli_strs_pushn(jitop_cli_strs *l, const char *s, size_t len);
void jitop_cli_strs_free(jitop_cli_strs *l);

/* The build flags shared by build, explain and watch. Everything is owned by
 * the struct; zero-initialize it before parsing, free it with
 * jitop_cli_build_args_free whatever the parse returned. */
struct jitop_cli_build_args {
    /* --arch LIST split at ',' ("sm_80,sm_90" gives two). Empty after parsing
     * when no --arch was given: jitop_cli_resolve_archs fills it. */
    jitop_cli_strs archs;
    /* NVRTC options in the order given, spelled the way jitop_build takes
     * them: "-I<dir>", "-D<name>[=<val>]", "-U<name>", "-std=<std>",
     * "--use_fast_math", "-lineinfo", and each -Xnvrtc FLAG as is. */
    jitop_cli_strs options;
    /* --name EXPR: template name expressions to instantiate. */
    jitop_cli_strs names;
    /* --op SPEC (build only): shipped ops to prewarm (cli_ops.c), each
     * checked at parse time. */
    jitop_cli_strs ops;
    /* PATH... as given (files or directories); expand with
     * jitop_cli_expand_paths. */
    jitop_cli_strs paths;
    /* --cache-dir DIR, or NULL (the library's default). Owned. */
    char *cache_dir;
    /* -j N; 0 when not given (one job per online core). */
    int jobs;
    int json;    /* --json */
    int verbose; /* --verbose: the library says why each binary was built */
    int help;    /* -h / --help was given: print the command's help, exit 0 */
};

/* One binary a build, explain or watch of the command line covers. */
typedef struct jitop_cli_unit {
    const char *file, *arch; /* borrowed from the file and arch lists */
    const char *name;        /* a --name, borrowed; NULL: the file alone */
} jitop_cli_unit;

/* The units of a command line: for each file, the file alone and with each
 * --name, each for every arch. That is how the runtime builds them
 * (jitop_load compiles each source with the instances asked of it so far,
 * build/build.h's fold rule, and jitop_op_get an instance not among them as
 * its own unit, from the first source that declares it), so that what
 * `jitop build` prewarms is what a program looks up. Which file declares a
 * name is for the compiler to say, not a search of the text: a template
 * may come from a header. A file that does not declare a name answers so
 * (JITOP_ENOTFOUND), and that answer is cached like a binary, so a second
 * build compiles nothing. On success *out (free it) and *n; otherwise
 * prints "jitop CMD: out of memory" and returns JITOP_CLI_EXIT_FAIL. */
int jitop_cli_units(const char *cmd, const jitop_cli_strs *files, const jitop_cli_strs *archs,
                    const jitop_cli_strs *names, jitop_cli_unit **out, size_t *n);

/* A flag the calling command adds to the shared ones (watch's own flags).
 * Called for every argument that starts with '-' and is not a build flag;
 * argv[*i] is that argument. Returns 1 when it consumed it (advancing *i
 * past any value it took), 0 when it does not know it (a usage error), -1
 * when it knows it but its value is bad (it printed the error). */
typedef int (*jitop_cli_extra_flag_fn)(void *user, int argc, char **argv, int *i);

/* Parses argv[1..argc-1] (argv[0] is the command name, used in messages).
 * Flags and paths may be mixed. "--": when rest is NULL it ends the flags
 * and everything after it is a path; when rest is not NULL parsing stops
 * there and *rest is the index of the first argument after "--" (argc when
 * there is no "--": watch's COMMAND). extra may be NULL.
 * Returns JITOP_CLI_EXIT_OK, or JITOP_CLI_EXIT_USAGE after printing to stderr
 * "jitop CMD: ..." naming the flag at fault (unknown flag, missing or bad
 * value). Does not require paths or archs; the caller checks (help may be
 * set). */
int jitop_cli_parse_build_args(int argc, char **argv, struct jitop_cli_build_args *out,
                               int *rest, jitop_cli_extra_flag_fn extra, void *user);
void jitop_cli_build_args_free(struct jitop_cli_build_args *a);

/* Fills a->archs when empty: $JITOP_ARCH (a comma-separated list too), else
 * the arch of GPU 0 through the driver (only then is the driver opened).
 * Then drops repeated archs (keeping the first) and checks each one's form
 * (sm_NN, compute_NN). Returns JITOP_CLI_EXIT_OK, or JITOP_CLI_EXIT_USAGE
 * after printing an error that names the arch or says how to choose one
 * (--arch sm_90 or JITOP_ARCH). */
int jitop_cli_resolve_archs(const char *cmd, struct jitop_cli_build_args *a);

/* A context for compiling and cache work that never opens the driver, with
 * the cache dir and verbosity from a (a may be NULL: defaults). On failure
 * prints "jitop CMD: ..." with jitop_errmsg and returns non-zero. */
int jitop_cli_ctx_create(const char *cmd, const struct jitop_cli_build_args *a,
                         jitop_ctx **ctx);

/* Expands PATH...: a file is taken as given, a directory gives every regular
 * file ending in ".cu" below it (recursively, symlinked directories not
 * followed). Each directory's files come sorted by path, then the next
 * argument's; a file named twice is kept once. Missing paths, unreadable
 * directories, and a directory with no .cu file are errors printed as
 * "jitop CMD: PATH: reason". Returns 0 or JITOP_CLI_EXIT_FAIL. */
int jitop_cli_expand_paths(const char *cmd, const jitop_cli_strs *paths, jitop_cli_strs *files);

/* $JITOP_JOBS when it is a number from 1 to 4096 (other text is said on
 * stderr and ignored), else one per online core (sysconf), at least 1. */
int jitop_cli_default_jobs(void);

/* Writes s as a JSON string literal (quotes included, control characters,
 * quote and backslash escaped, other bytes as they are: UTF-8 passes). */
void jitop_cli_json_str(FILE *f, const char *s);
/* jitop_cli_json_str, or null when s is NULL. */
void jitop_cli_json_str_or_null(FILE *out, const char *s);
/* Writes s for a terminal: control bytes (ESC included), C1 controls and
 * bytes that are not UTF-8 as visible escapes (\n, \t, \r, \xNN); other
 * text as it is. keep_newlines: newlines pass (a multi-line message such as
 * an NVRTC log). Paths in plain output go through it, so that a file name
 * holding an escape sequence cannot drive the terminal; --json output has
 * the exact bytes. */
void jitop_cli_text(FILE *f, const char *s, int keep_newlines);
/* "FILE (ARCH)" or "FILE (ARCH, NAME)" through jitop_cli_text: how messages
 * name one unit. */
void jitop_cli_text_unit(FILE *f, const char *file, const char *arch, const char *name);

/* Parses a byte size: digits with an optional K, M, G or T suffix (powers of
 * 1024, an optional trailing 'B' or "iB"). 0, or -1 on bad text. */
int jitop_cli_parse_size(const char *s, int64_t *out);

/* A growable byte buffer for a worker's reply. failed: an allocation
 * failed, and every later put fails too. */
typedef struct jitop_cli_buf {
    char *data;
    size_t len, cap;
    int failed;
} jitop_cli_buf;
/* Appends len bytes / a string as a u32 length and its bytes (NULL: the
 * length UINT32_MAX alone). 0, or -1 on ENOMEM. */
int jitop_cli_buf_put(jitop_cli_buf *b, const void *data, size_t len);
int jitop_cli_buf_put_str(jitop_cli_buf *b, const char *s);
void jitop_cli_buf_free(jitop_cli_buf *b);
/* Reads back what put wrote, advancing *p up to end: 0, or -1 when the
 * bytes run out (or, for a string, on ENOMEM). *out is malloc'd (NULL for
 * a NULL string). */
int jitop_cli_buf_get(const char **p, const char *end, void *out, size_t len);
int jitop_cli_buf_get_str(const char **p, const char *end, char **out);

/* What a task pool calls. run is called in a worker process with its copy
 * of user, and writes its result into reply; started and done are called
 * in the calling process, one at a time: started before the task is handed
 * out, done with the worker's reply (reply, len), or when the worker died
 * holding the task with reply NULL and died saying how (a signal, an exit
 * status, with the worker's pid). */
typedef struct jitop_cli_pool_ops {
    void (*run)(void *user, size_t task, jitop_cli_buf *reply);
    void (*started)(void *user, size_t task);
    void (*done)(void *user, size_t task, const void *reply, size_t len, const char *died);
} jitop_cli_pool_ops;

/* Runs tasks 0 ... ntasks - 1, in order, in up to nworkers forked worker
 * processes, and returns when every task is done (or died). Call it only
 * while the calling process runs no other thread (fork). A worker that
 * dies fails its task only; a new one takes the rest. 0, or an errno value
 * when no worker could be started (done was not called for the tasks
 * left). The protocol: tools/cli_pool.c. */
int jitop_cli_pool_procs(size_t ntasks, int nworkers, const jitop_cli_pool_ops *ops, void *user);
/* Orders tasks (with est[i] the estimate of tasks[i]'s length; both are
 * reordered) longest first, ties in their given order: the order a pool
 * should take them in (tools/cli_pool.c says why). */
void jitop_cli_longest_first(size_t *tasks, int64_t *est, size_t n);

/* The memory guard (tools/cli_mem.c). Bytes of MemAvailable in the text of
 * a /proc/meminfo, -1 when it has none or it is malformed. */
int64_t jitop_cli_meminfo_available(const char *text);
/* The same read from the file at path (/proc/meminfo); -1 when unreadable. */
int64_t jitop_cli_mem_available(const char *path);
/* How many of want compiles fit in avail bytes at per_job bytes each: at
 * least 1, at most want; want when avail < 0 (unknown) or per_job <= 0
 * (the guard is off). */
int jitop_cli_mem_jobs(int want, int64_t avail, int64_t per_job);
/* The estimated peak of one compile (measured: tools/cli_mem.c), which
 * $JITOP_JOB_MEM (a SIZE, 0: no guard) replaces. */
#define JITOP_CLI_JOB_MEM_DEFAULT ((int64_t)384 << 20)

/* For build and explain where something must be compiled: whether NVRTC
 * compiles for each arch of archs[0..n-1] (duplicates allowed). Prints
 * "jitop CMD: arch ... is not one this NVRTC compiles for; it supports ..."
 * once per arch it does not, and returns JITOP_CLI_EXIT_USAGE then.
 * Loads NVRTC: call it only when a compile is due. Where NVRTC cannot be
 * loaded, says nothing (the compile reports it) and returns OK. */
int jitop_cli_check_archs(const char *cmd, const char *const *archs, size_t n);

/* The help of one command ("build", "explain", "watch", "ls", "gc",
 * "clean", "help", or NULL for the overview) on f. 0, or -1 for an unknown
 * command. */
int jitop_cli_help(FILE *f, const char *cmd);
/* The build flags' lines of the help, for commands that take them. */
extern const char jitop_cli_build_flags_help[];

/* --op (cli_ops.c). Whether spec is an op spec (layernorm:DTYPE:COLS,
 * lltm:DTYPE): JITOP_CLI_EXIT_OK, or JITOP_CLI_EXIT_USAGE after printing
 * "jitop CMD: --op 'SPEC': why; expected ...". */
int jitop_cli_op_check(const char *cmd, const char *spec);
/* Prewarms each op of ops for each arch (jitop_layernorm_prewarm,
 * jitop_lltm_prewarm: what the ops compile at run time, under the same
 * keys), printing one result line each (--json: one object). Returns how
 * many failed (each also reported on stderr). */
size_t jitop_cli_build_ops(jitop_ctx *ctx, const jitop_cli_strs *ops,
                           const jitop_cli_strs *archs, int json);

/* Command entry points: argv[0] is the command name. Each returns the exit
 * status. */
int jitop_cli_build(int argc, char **argv);
/* Builds the host sources among files (taken out of it) as one module's
 * host object into the cache, with the -Xhost= / -Xhost-ld= options (taken
 * out of options) and the shared -D, -U, -I; prints one line per source. */
int jitop_cli_build_host(const char *cmd, jitop_ctx *ctx, jitop_cli_strs *files,
                         jitop_cli_strs *options, int json);
/* Moves the host sources of files to srcs and the -Xhost= / -Xhost-ld=
 * options to host_options, then appends a copy of every other option to
 * host_options (the shared -D, -U, -I among them). */
int jitop_cli_take_host(const char *cmd, jitop_cli_strs *files, jitop_cli_strs *options,
                        jitop_cli_strs *srcs, jitop_cli_strs *host_options);
int jitop_cli_explain(int argc, char **argv);
int jitop_cli_ls(int argc, char **argv);
int jitop_cli_gc(int argc, char **argv);
int jitop_cli_clean(int argc, char **argv);
/* `jitop watch [build flags] PATH... [-- COMMAND]`, in tools/cmd_watch.c. */
int jitop_cli_watch(int argc, char **argv);

#endif
