#include "cli.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

int jitop_cli_strs_pushn(jitop_cli_strs *l, const char *s, size_t len)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 8;
        char **v = realloc(l->v, cap * sizeof *v);
        if (!v)
            return -1;
        l->v = v;
        l->cap = cap;
    }
    char *copy = malloc(len + 1);
    if (!copy)
        return -1;
    memcpy(copy, s, len);
    copy[len] = '\0';
    l->v[l->n++] = copy;
    return 0;
}

int jitop_cli_strs_push(jitop_cli_strs *l, const char *s)
{
    return jitop_cli_strs_pushn(l, s, strlen(s));
}

void jitop_cli_strs_free(jitop_cli_strs *l)
{
    for (size_t i = 0; i < l->n; i++)
        free(l->v[i]);
    free(l->v);
    l->v = NULL;
    l->n = l->cap = 0;
}

void jitop_cli_build_args_free(struct jitop_cli_build_args *a)
{
    jitop_cli_strs_free(&a->archs);
    jitop_cli_strs_free(&a->options);
    jitop_cli_strs_free(&a->names);
    jitop_cli_strs_free(&a->ops);
    jitop_cli_strs_free(&a->paths);
    free(a->cache_dir);
    a->cache_dir = NULL;
}

/* Splits "sm_80,sm_90" into the list; empty items are a usage error. */
static int push_arch_list(const char *cmd, const char *list, jitop_cli_strs *archs)
{
    const char *p = list;
    for (;;) {
        size_t len = strcspn(p, ",");
        if (len == 0) {
            fprintf(stderr, "jitop %s: --arch '%s': empty architecture in the list\n", cmd, list);
            return JITOP_CLI_EXIT_USAGE;
        }
        if (jitop_cli_strs_pushn(archs, p, len) != 0) {
            fprintf(stderr, "jitop %s: out of memory\n", cmd);
            return JITOP_CLI_EXIT_FAIL;
        }
        if (p[len] == '\0')
            return JITOP_CLI_EXIT_OK;
        p += len + 1;
    }
}

static int parse_jobs(const char *cmd, const char *s, int *jobs)
{
    char *end = NULL;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end != '\0' || v < 1 || v > 4096) {
        fprintf(stderr, "jitop %s: -j '%s': expected a number of jobs from 1 to 4096\n", cmd, s);
        return JITOP_CLI_EXIT_USAGE;
    }
    *jobs = (int)v;
    return JITOP_CLI_EXIT_OK;
}

/* Matches argv[*i] against one flag that takes a value, in the spellings
 * "FLAG VALUE", "FLAG=VALUE" and, when attached is set (-I, -D, -U, -j),
 * "FLAGVALUE". Returns 0 when it is not this flag, 1 with *value set (and
 * *i advanced past a separate value), -1 when the value is missing. */
static int flag_value(const char *flag, int attached, int argc, char **argv, int *i,
                      const char **value)
{
    const char *arg = argv[*i];
    size_t len = strlen(flag);
    if (strncmp(arg, flag, len) != 0)
        return 0;
    if (arg[len] == '\0') {
        if (*i + 1 >= argc)
            return -1;
        *value = argv[++*i];
        return 1;
    }
    if (arg[len] == '=') {
        *value = arg + len + 1;
        return 1;
    }
    if (attached) {
        *value = arg + len;
        return 1;
    }
    return 0;
}

/* NVRTC switches the CLI takes directly (nvcc's spellings), with the option
 * each is passed on as. */
static const struct {
    const char *flag;
    const char *nvrtc;
} switches[] = {
    {"--use_fast_math", "--use_fast_math"},
    {"--use-fast-math", "--use_fast_math"},
    {"-use_fast_math", "--use_fast_math"},
    {"-lineinfo", "-lineinfo"},
    {"--lineinfo", "-lineinfo"},
    {"--generate-line-info", "-lineinfo"},
};

/* Flags with a value; prefix is what the NVRTC option is spelled with. */
enum valued_kind {
    V_ARCH,
    V_INCLUDE,
    V_DEFINE,
    V_UNDEF,
    V_STD,
    V_CACHE,
    V_JOBS,
    V_XNVRTC,
    V_NAME,
    V_OP
};
static const struct {
    const char *flag;
    int attached;
    enum valued_kind kind;
    const char *prefix;
} valued[] = {
    {"--arch", 0, V_ARCH, NULL},
    {"-arch", 0, V_ARCH, NULL},
    {"--include-path", 0, V_INCLUDE, "-I"},
    {"-I", 1, V_INCLUDE, "-I"},
    {"--define-macro", 0, V_DEFINE, "-D"},
    {"-D", 1, V_DEFINE, "-D"},
    {"--undefine-macro", 0, V_UNDEF, "-U"},
    {"-U", 1, V_UNDEF, "-U"},
    {"--std", 0, V_STD, "-std="},
    {"-std", 0, V_STD, "-std="},
    {"--cache-dir", 0, V_CACHE, NULL},
    {"--jobs", 0, V_JOBS, NULL},
    {"-j", 1, V_JOBS, NULL},
    {"-Xnvrtc", 0, V_XNVRTC, ""},
    {"--name", 0, V_NAME, NULL},
    {"--op", 0, V_OP, NULL},
};

static int push_option(const char *cmd, jitop_cli_strs *opts, const char *prefix,
                       const char *value)
{
    size_t plen = strlen(prefix), vlen = strlen(value);
    char *opt = malloc(plen + vlen + 1);
    int rc = JITOP_CLI_EXIT_OK;
    if (opt) {
        memcpy(opt, prefix, plen);
        memcpy(opt + plen, value, vlen + 1);
    }
    if (!opt || jitop_cli_strs_push(opts, opt) != 0) {
        fprintf(stderr, "jitop %s: out of memory\n", cmd);
        rc = JITOP_CLI_EXIT_FAIL;
    }
    free(opt);
    return rc;
}

static int take_valued(const char *cmd, size_t k, const char *value,
                       struct jitop_cli_build_args *out)
{
    if (value[0] == '\0' && valued[k].kind != V_XNVRTC) {
        fprintf(stderr, "jitop %s: %s: empty value\n", cmd, valued[k].flag);
        return JITOP_CLI_EXIT_USAGE;
    }
    switch (valued[k].kind) {
    case V_ARCH:
        return push_arch_list(cmd, value, &out->archs);
    case V_CACHE:
        free(out->cache_dir);
        out->cache_dir = strdup(value);
        if (!out->cache_dir) {
            fprintf(stderr, "jitop %s: out of memory\n", cmd);
            return JITOP_CLI_EXIT_FAIL;
        }
        return JITOP_CLI_EXIT_OK;
    case V_JOBS:
        return parse_jobs(cmd, value, &out->jobs);
    case V_NAME:
        if (jitop_cli_strs_push(&out->names, value) != 0) {
            fprintf(stderr, "jitop %s: out of memory\n", cmd);
            return JITOP_CLI_EXIT_FAIL;
        }
        return JITOP_CLI_EXIT_OK;
    case V_OP:
        if (strcmp(cmd, "build") != 0) {
            fprintf(stderr, "jitop %s: --op: only jitop build prewarms the shipped ops\n", cmd);
            return JITOP_CLI_EXIT_USAGE;
        }
        if (jitop_cli_op_check(cmd, value) != JITOP_CLI_EXIT_OK)
            return JITOP_CLI_EXIT_USAGE;
        if (jitop_cli_strs_push(&out->ops, value) != 0) {
            fprintf(stderr, "jitop %s: out of memory\n", cmd);
            return JITOP_CLI_EXIT_FAIL;
        }
        return JITOP_CLI_EXIT_OK;
    case V_XNVRTC:
        if (value[0] == '\0') {
            fprintf(stderr, "jitop %s: -Xnvrtc: empty value\n", cmd);
            return JITOP_CLI_EXIT_USAGE;
        }
        return push_option(cmd, &out->options, "", value);
    case V_INCLUDE:
    case V_DEFINE:
    case V_UNDEF:
    case V_STD:
        return push_option(cmd, &out->options, valued[k].prefix, value);
    }
    return JITOP_CLI_EXIT_USAGE;
}

/* One flag at argv[*i]. */
static int parse_flag(const char *cmd, int argc, char **argv, int *i,
                      struct jitop_cli_build_args *out, jitop_cli_extra_flag_fn extra,
                      void *user)
{
    const char *arg = argv[*i];
    if (strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0) {
        out->help = 1;
        return JITOP_CLI_EXIT_OK;
    }
    if (strcmp(arg, "--json") == 0) {
        out->json = 1;
        return JITOP_CLI_EXIT_OK;
    }
    if (strcmp(arg, "--verbose") == 0 || strcmp(arg, "-v") == 0) {
        out->verbose = 1;
        return JITOP_CLI_EXIT_OK;
    }
    for (size_t k = 0; k < sizeof switches / sizeof switches[0]; k++) {
        if (strcmp(arg, switches[k].flag) == 0)
            return push_option(cmd, &out->options, "", switches[k].nvrtc);
    }
    for (size_t k = 0; k < sizeof valued / sizeof valued[0]; k++) {
        const char *value = NULL;
        int m = flag_value(valued[k].flag, valued[k].attached, argc, argv, i, &value);
        if (m < 0) {
            fprintf(stderr, "jitop %s: %s needs a value (see jitop %s --help)\n", cmd,
                    valued[k].flag, cmd);
            return JITOP_CLI_EXIT_USAGE;
        }
        if (m > 0)
            return take_valued(cmd, k, value, out);
    }
    if (extra) {
        int e = extra(user, argc, argv, i);
        if (e > 0)
            return JITOP_CLI_EXIT_OK;
        if (e < 0)
            return JITOP_CLI_EXIT_USAGE;
    }
    fprintf(stderr, "jitop %s: unknown flag '%s' (see jitop %s --help)\n", cmd, arg, cmd);
    return JITOP_CLI_EXIT_USAGE;
}

int jitop_cli_parse_build_args(int argc, char **argv, struct jitop_cli_build_args *out,
                               int *rest, jitop_cli_extra_flag_fn extra, void *user)
{
    const char *cmd = argc > 0 ? argv[0] : "build";
    int rc = JITOP_CLI_EXIT_OK;
    int only_paths = 0;
    if (rest)
        *rest = argc;
    for (int i = 1; i < argc && rc == JITOP_CLI_EXIT_OK; i++) {
        const char *arg = argv[i];
        if (!only_paths && strcmp(arg, "--") == 0) {
            if (rest) {
                *rest = i + 1;
                break;
            }
            only_paths = 1;
            continue;
        }
        if (!only_paths && arg[0] == '-' && arg[1] != '\0') {
            rc = parse_flag(cmd, argc, argv, &i, out, extra, user);
            continue;
        }
        if (jitop_cli_strs_push(&out->paths, arg) != 0) {
            fprintf(stderr, "jitop %s: out of memory\n", cmd);
            rc = JITOP_CLI_EXIT_FAIL;
        }
    }
    return rc;
}

int jitop_cli_parse_size(const char *s, int64_t *out)
{
    char *end = NULL;
    if (!s || s[0] < '0' || s[0] > '9')
        return -1;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno)
        return -1;
    int shift = 0;
    switch (*end) {
    case 'k': case 'K': shift = 10; end++; break;
    case 'm': case 'M': shift = 20; end++; break;
    case 'g': case 'G': shift = 30; end++; break;
    case 't': case 'T': shift = 40; end++; break;
    default: break;
    }
    if (shift && strcmp(end, "iB") == 0)
        end += 2;
    else if (*end == 'B' || *end == 'b')
        end++;
    if (*end != '\0' || v > ((unsigned long long)INT64_MAX >> shift))
        return -1;
    *out = (int64_t)(v << shift);
    return 0;
}
