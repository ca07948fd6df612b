#include "cli.h"

#include <string.h>

const char jitop_cli_build_flags_help[] =
    "  --arch LIST        comma-separated targets: sm_90 (cubin), compute_90 (PTX);\n"
    "                     default $JITOP_ARCH, else the arch of GPU 0\n"
    "  -I DIR             add an include directory (the source's own is always on)\n"
    "  -D NAME[=VAL]      define a macro\n"
    "  -U NAME            undefine a macro\n"
    "  --std STD          C++ dialect, e.g. c++17\n"
    "  --use_fast_math    fast, less precise math\n"
    "  -lineinfo          line information for profilers\n"
    "  -Xnvrtc FLAG       pass any other NVRTC flag (e.g. -Xnvrtc -G, -Xnvrtc -maxrregcount=64)\n"
    "  --name EXPR        also build a template instance, e.g. 'k<float, 256>': on its\n"
    "                     own, from each file that declares k (in it or in a header it\n"
    "                     includes), as jitop_op_get does; a name no file declares fails\n"
    "  --cache-dir DIR    cache root (default $JITOP_CACHE_DIR, $XDG_CACHE_HOME/jitop,\n"
    "                     ~/.cache/jitop)\n"
    "  -j N               parallel compiles, in worker processes (default: $JITOP_JOBS,\n"
    "                     else one per online core; never more than the memory holds at\n"
    "                     $JITOP_JOB_MEM per compile, default 384M, 0: no limit)\n"
    "  --json             one JSON object per line\n"
    "  --verbose          say why each binary is (re)built\n"
    "  -h, --help         this help\n";

static const char overview[] =
    "usage: jitop COMMAND [ARGS]\n"
    "\n"
    "Compiles CUDA .cu files with NVRTC into jitop's on-disk cache and manages it.\n"
    "\n"
    "commands:\n"
    "  build PATH...      compile .cu files (or directories of them) into the cache\n"
    "  explain PATH...    say whether a build would hit the cache, and why not\n"
    "  watch PATH...      rebuild on every save [-- COMMAND to rerun after each]\n"
    "  ls                 list cache entries\n"
    "  gc                 evict least-recently-used entries down to a size\n"
    "  clean              remove every cache entry\n"
    "  help [COMMAND]     help on a command (also: jitop COMMAND --help)\n"
    "  --version          jitop and NVRTC versions\n"
    "\n"
    "exit status: 0 success, 1 a build or cache operation failed, 2 usage error\n";

static const char help_help[] =
    "usage: jitop help [COMMAND]\n"
    "\n"
    "Prints the help of COMMAND (build, explain, watch, ls, gc, clean), or the\n"
    "list of commands.\n";

static const char build_head[] =
    "usage: jitop build [FLAGS] PATH...\n"
    "\n"
    "Compiles every .cu file (a directory: all .cu files below it, sorted) for\n"
    "each arch into the cache, in parallel: each file alone, and each --name\n"
    "with the file that defines it. Prints one line per (file, arch[, name]):\n"
    "  FILE ARCH compiled|cached KEY MS ms[  NAME]\n"
    "or with --json one object per line with file, arch, name (null for the file\n"
    "alone), status, key, ms (and \"error\" when status is \"error\"). Failing\n"
    "files' NVRTC logs (file:line) go to stderr. A progress line is shown when\n"
    "stderr is a terminal. A file's binary has every template instance asked\n"
    "of it so far (by a program, or a prewarm) compiled in: one NVRTC program\n"
    "per (file, options, arch).\n"
    "Host sources named (.c, .cc, .cpp, .cxx) are built together, as one\n"
    "module's host code, by $CC/$CXX (ninja when on PATH): one line each,\n"
    "  FILE host built|hit KEY (BUILDER)\n"
    "with their flags as -Xnvrtc -Xhost=FLAG and -Xnvrtc -Xhost-ld=FLAG.\n"
    "\n"
    "  --op SPEC          prewarm a shipped op for each arch: exactly what it\n"
    "                     compiles at run time, so that a run on that GPU hits.\n"
    "                     SPEC: layernorm:DTYPE:COLS (DTYPE f32, f16, bf16; COLS the\n"
    "                     row length) or lltm:DTYPE (f32, f64); repeatable; PATH is\n"
    "                     then optional. One line each: op SPEC ARCH prewarmed MS ms\n"
    "                     (--json: op, arch, status, ms)\n"
    "\n"
    "flags:\n";

static const char build_tail[] =
    "  --push             push every entry built or found (compiled or cached) to\n"
    "                     each writable remote in $JITOP_REMOTE_CACHE before exiting\n"
    "                     (prewarm a fleet's remote cache from CI, no GPU needed)\n"
    "\n"
    "exit status: 0 all built, 1 a file failed to compile, 2 usage error\n"
    "example: jitop build --arch sm_80,sm_90 -I include -DBLOCK=256 kernels/\n";

static const char explain_head[] =
    "usage: jitop explain [FLAGS] PATH...\n"
    "\n"
    "Says for each (file, arch), without compiling, whether `jitop build` with\n"
    "the same flags would hit the cache and, if not, why: which file changed,\n"
    "which option differs, a new NVRTC. Prints \"FILE ARCH hit|miss REASON\", or\n"
    "with --json objects with file, arch, hit (true/false) and why. With a remote\n"
    "cache ($JITOP_REMOTE_CACHE) a miss also says \"remote hit\", \"remote miss\" or\n"
    "\"remote down\".\n"
    "\n"
    "flags (the same as build; -j is accepted and ignored):\n";

static const char explain_tail[] =
    "\n"
    "exit status: 0 answered (hit or miss), 1 a file could not be examined,\n"
    "2 usage error\n";

static const char watch_head[] =
    "usage: jitop watch [FLAGS] PATH... [-- COMMAND [ARGS]]\n"
    "\n"
    "Builds PATH... like `jitop build`, then rebuilds on every save of a source\n"
    "or of a header it includes, and prints the result (ok with the time, or the\n"
    "compile errors with file:line). With -- COMMAND, reruns COMMAND after every\n"
    "successful build. Ctrl-C exits. Host sources (.c, .cpp, ...) are built\n"
    "together as one module's host code, reported as FILE (host).\n"
    "\n"
    "flags (the same as build):\n";

static const char ls_help[] =
    "usage: jitop ls [--json] [--remote] [--cache-dir DIR]\n"
    "\n"
    "Lists the valid cache entries, least recently used first, one per line:\n"
    "  KEY ARCH SIZE LAST-USE SOURCES\n"
    "(SOURCES: the source then the headers it included, comma-separated). With\n"
    "--json one object per line with key, arch, size, atime, created, sources\n"
    "(an array). --remote lists the entries of the remotes in $JITOP_REMOTE_CACHE\n"
    "instead (KEY SIZE URL; WebDAV PROPFIND), or says the server cannot list.\n"
    "\n"
    "exit status: 0 listed, 1 the cache could not be read, 2 usage error\n";

static const char gc_help[] =
    "usage: jitop gc [--max-size SIZE] [--cache-dir DIR]\n"
    "\n"
    "Evicts least-recently-used entries until the cache holds at most SIZE\n"
    "bytes (a number with an optional K, M, G or T suffix, powers of 1024;\n"
    "default: the cap, $JITOP_CACHE_MAX_SIZE or 1G), and removes invalid\n"
    "entries and stale temporary files. Prints the bytes freed.\n"
    "\n"
    "exit status: 0 done, 1 the cache could not be cleaned, 2 usage error\n";

static const char clean_help[] =
    "usage: jitop clean [--cache-dir DIR]\n"
    "\n"
    "Removes every entry, manifest and lock of the cache; the root directory\n"
    "and its markers stay. Only trees jitop made are touched, and in them only\n"
    "the names jitop makes: anything else stays, and clean says what it left.\n"
    "\n"
    "exit status: 0 done, 1 something could not be removed, 2 usage error\n";

int jitop_cli_help(FILE *f, const char *cmd)
{
    if (!cmd)
        fputs(overview, f);
    else if (strcmp(cmd, "help") == 0)
        fputs(help_help, f);
    else if (strcmp(cmd, "build") == 0)
        fprintf(f, "%s%s%s", build_head, jitop_cli_build_flags_help, build_tail);
    else if (strcmp(cmd, "explain") == 0)
        fprintf(f, "%s%s%s", explain_head, jitop_cli_build_flags_help, explain_tail);
    else if (strcmp(cmd, "watch") == 0)
        fprintf(f, "%s%s", watch_head, jitop_cli_build_flags_help);
    else if (strcmp(cmd, "ls") == 0)
        fputs(ls_help, f);
    else if (strcmp(cmd, "gc") == 0)
        fputs(gc_help, f);
    else if (strcmp(cmd, "clean") == 0)
        fputs(clean_help, f);
    else
        return -1;
    return 0;
}
