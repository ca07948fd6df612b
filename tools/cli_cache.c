/* `jitop ls`, `jitop gc`, `jitop clean`: the cache management commands. */
#include "cli.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* The few flags these commands take. */
typedef struct cache_args {
    struct jitop_cli_build_args common; /* cache_dir, help, json */
    const char *max_size;               /* gc only */
    int remote;                         /* ls --remote */
} cache_args;

/* Parses "--cache-dir DIR", "--help", and "--json" (ls) or "--max-size
 * SIZE" (gc); anything else, positional arguments included, is a usage
 * error naming it. */
static int parse_cache_args(int argc, char **argv, int allow_json, int allow_max,
                            cache_args *out)
{
    const char *cmd = argv[0];
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        const char *value = NULL;
        size_t n;
        if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
            out->common.help = 1;
        } else if (allow_json && strcmp(arg, "--json") == 0) {
            out->common.json = 1;
        } else if (allow_json && strcmp(arg, "--remote") == 0) {
            out->remote = 1;
        } else if (strncmp(arg, "--cache-dir", n = strlen("--cache-dir")) == 0 &&
                   (arg[n] == '\0' || arg[n] == '=')) {
            value = arg[n] == '=' ? arg + n + 1 : (i + 1 < argc ? argv[++i] : NULL);
            if (!value || !*value) {
                fprintf(stderr, "jitop %s: --cache-dir needs a directory\n", cmd);
                return JITOP_CLI_EXIT_USAGE;
            }
            free(out->common.cache_dir);
            if (!(out->common.cache_dir = strdup(value))) {
                fprintf(stderr, "jitop %s: out of memory\n", cmd);
                return JITOP_CLI_EXIT_FAIL;
            }
        } else if (allow_max && strncmp(arg, "--max-size", n = strlen("--max-size")) == 0 &&
                   (arg[n] == '\0' || arg[n] == '=')) {
            value = arg[n] == '=' ? arg + n + 1 : (i + 1 < argc ? argv[++i] : NULL);
            if (!value) {
                fprintf(stderr, "jitop %s: --max-size needs a size (e.g. 500M)\n", cmd);
                return JITOP_CLI_EXIT_USAGE;
            }
            out->max_size = value;
        } else if (arg[0] == '-') {
            fprintf(stderr, "jitop %s: unknown flag '%s' (see jitop %s --help)\n", cmd, arg, cmd);
            return JITOP_CLI_EXIT_USAGE;
        } else {
            fprintf(stderr, "jitop %s: unexpected argument '%s' (see jitop %s --help)\n", cmd, arg,
                    cmd);
            return JITOP_CLI_EXIT_USAGE;
        }
    }
    return JITOP_CLI_EXIT_OK;
}

/* 1536 -> "1.5K": compact, one column wide. */
static void human_size(int64_t bytes, char *buf, size_t cap)
{
    static const char units[] = "BKMGT";
    double v = (double)bytes;
    int u = 0;
    while (v >= 1024.0 && u < 4) {
        v /= 1024.0;
        u++;
    }
    if (u == 0)
        snprintf(buf, cap, "%" PRId64 "B", bytes);
    else
        snprintf(buf, cap, "%.1f%c", v, units[u]);
}

static void iso_time(int64_t t, char *buf, size_t cap)
{
    time_t tt = (time_t)t;
    struct tm tm;
    if (!gmtime_r(&tt, &tm) || strftime(buf, cap, "%Y-%m-%dT%H:%M:%SZ", &tm) == 0)
        snprintf(buf, cap, "%" PRId64, t);
}

/* The walk's info lives only during the callback: ls copies what it prints
 * so that it can sort by last use. */
typedef struct ls_row {
    char *key, *arch;
    jitop_cli_strs sources;
    int64_t size, atime, created;
} ls_row;

typedef struct ls_rows {
    ls_row *v;
    size_t n, cap;
} ls_rows;

static int collect_row(const jitop_cache_entry_info *info, void *user)
{
    ls_rows *rows = user;
    if (rows->n == rows->cap) {
        size_t cap = rows->cap ? rows->cap * 2 : 32;
        ls_row *v = realloc(rows->v, cap * sizeof *v);
        if (!v)
            return JITOP_ENOMEM;
        rows->v = v;
        rows->cap = cap;
    }
    ls_row *r = &rows->v[rows->n];
    memset(r, 0, sizeof *r);
    r->key = strdup(info->key ? info->key : "");
    r->arch = strdup(info->arch ? info->arch : "");
    r->size = info->size;
    r->atime = info->atime;
    r->created = info->created;
    rows->n++;
    if (!r->key || !r->arch)
        return JITOP_ENOMEM;
    for (size_t i = 0; i < info->nsources; i++)
        if (jitop_cli_strs_push(&r->sources, info->source_list[i]) != 0)
            return JITOP_ENOMEM;
    return 0;
}

static int cmp_row(const void *a, const void *b)
{
    const ls_row *x = a, *y = b;
    if (x->atime != y->atime)
        return x->atime < y->atime ? -1 : 1;
    return strcmp(x->key, y->key);
}

static void print_row(const ls_row *r, int json)
{
    if (json) {
        printf("{\"key\":");
        jitop_cli_json_str(stdout, r->key);
        printf(",\"arch\":");
        jitop_cli_json_str(stdout, r->arch);
        printf(",\"size\":%" PRId64 ",\"atime\":%" PRId64 ",\"created\":%" PRId64
               ",\"sources\":[",
               r->size, r->atime, r->created);
        for (size_t i = 0; i < r->sources.n; i++) {
            if (i)
                putchar(',');
            jitop_cli_json_str(stdout, r->sources.v[i]);
        }
        printf("]}\n");
        return;
    }
    char size[32], when[64];
    human_size(r->size, size, sizeof size);
    iso_time(r->atime, when, sizeof when);
    printf("%s ", r->key);
    jitop_cli_text(stdout, r->arch, 0);
    printf("%*s %7s %s ", (int)(strlen(r->arch) < 10 ? 10 - strlen(r->arch) : 0), "", size,
           when);
    for (size_t i = 0; i < r->sources.n; i++) {
        if (i)
            putchar(',');
        jitop_cli_text(stdout, r->sources.v[i], 0);
    }
    putchar('\n');
}

static int print_remote_row(const char *url, const char *key, int64_t size, void *user)
{
    int json = *(const int *)user;
    if (json) {
        printf("{\"remote\":");
        jitop_cli_json_str(stdout, url);
        printf(",\"key\":");
        jitop_cli_json_str(stdout, key);
        printf(",\"size\":%" PRId64 "}\n", size);
        return 0;
    }
    char sz[32] = "?";
    if (size >= 0)
        human_size(size, sz, sizeof sz);
    printf("%s %7s ", key, sz);
    jitop_cli_text(stdout, url, 0);
    putchar('\n');
    return 0;
}

/* ls --remote: the entries the remotes hold (WebDAV PROPFIND), or why a
 * server cannot list. */
static int ls_remote(jitop_ctx *ctx, int json)
{
    int st = jitop_remote_list(ctx, print_remote_row, &json);
    if (st != JITOP_OK) {
        fprintf(stderr, "jitop ls --remote: %s\n", jitop_errmsg(ctx));
        return JITOP_CLI_EXIT_FAIL;
    }
    if (fflush(stdout) != 0) {
        perror("jitop ls: stdout");
        return JITOP_CLI_EXIT_FAIL;
    }
    return JITOP_CLI_EXIT_OK;
}

int jitop_cli_ls(int argc, char **argv)
{
    cache_args a = {0};
    ls_rows rows = {0};
    jitop_ctx *ctx = NULL;
    int rc = parse_cache_args(argc, argv, 1, 0, &a);
    if (rc != JITOP_CLI_EXIT_OK || a.common.help) {
        if (rc == JITOP_CLI_EXIT_OK)
            jitop_cli_help(stdout, "ls");
        goto out;
    }
    if ((rc = jitop_cli_ctx_create("ls", &a.common, &ctx)) != JITOP_CLI_EXIT_OK)
        goto out;
    if (a.remote) {
        rc = ls_remote(ctx, a.common.json);
        goto out;
    }
    int st = jitop_cache_list(ctx, collect_row, &rows);
    if (st != JITOP_OK) {
        fprintf(stderr, "jitop ls: %s: %s\n", jitop_strerror(st),
                st == JITOP_ENOMEM ? "out of memory" : jitop_errmsg(ctx));
        rc = JITOP_CLI_EXIT_FAIL;
        goto out;
    }
    if (rows.n > 1)
        qsort(rows.v, rows.n, sizeof rows.v[0], cmp_row);
    for (size_t i = 0; i < rows.n; i++)
        print_row(&rows.v[i], a.common.json);
    if (fflush(stdout) != 0) {
        perror("jitop ls: stdout");
        rc = JITOP_CLI_EXIT_FAIL;
    }
out:
    for (size_t i = 0; i < rows.n; i++) {
        free(rows.v[i].key);
        free(rows.v[i].arch);
        jitop_cli_strs_free(&rows.v[i].sources);
    }
    free(rows.v);
    jitop_ctx_destroy(ctx);
    jitop_cli_build_args_free(&a.common);
    return rc;
}

int jitop_cli_gc(int argc, char **argv)
{
    cache_args a = {0};
    jitop_ctx *ctx = NULL;
    int64_t max_size = -1, freed = 0;
    int rc = parse_cache_args(argc, argv, 0, 1, &a);
    if (rc != JITOP_CLI_EXIT_OK || a.common.help) {
        if (rc == JITOP_CLI_EXIT_OK)
            jitop_cli_help(stdout, "gc");
        goto out;
    }
    if (a.max_size && jitop_cli_parse_size(a.max_size, &max_size) != 0) {
        fprintf(stderr, "jitop gc: --max-size '%s': expected a size such as 0, 500M or 2G\n",
                a.max_size);
        rc = JITOP_CLI_EXIT_USAGE;
        goto out;
    }
    if ((rc = jitop_cli_ctx_create("gc", &a.common, &ctx)) != JITOP_CLI_EXIT_OK)
        goto out;
    int st = jitop_cache_gc(ctx, max_size, &freed);
    if (st != JITOP_OK) {
        fprintf(stderr, "jitop gc: %s: %s\n", jitop_strerror(st), jitop_errmsg(ctx));
        rc = JITOP_CLI_EXIT_FAIL;
        goto out;
    }
    char size[32];
    human_size(freed, size, sizeof size);
    printf("freed %" PRId64 " bytes (%s) in %s\n", freed, size, jitop_cache_dir(ctx));
    if (fflush(stdout) != 0) {
        perror("jitop gc: stdout");
        rc = JITOP_CLI_EXIT_FAIL;
    }
out:
    jitop_ctx_destroy(ctx);
    jitop_cli_build_args_free(&a.common);
    return rc;
}

int jitop_cli_clean(int argc, char **argv)
{
    cache_args a = {0};
    jitop_ctx *ctx = NULL;
    int rc = parse_cache_args(argc, argv, 0, 0, &a);
    if (rc != JITOP_CLI_EXIT_OK || a.common.help) {
        if (rc == JITOP_CLI_EXIT_OK)
            jitop_cli_help(stdout, "clean");
        goto out;
    }
    if ((rc = jitop_cli_ctx_create("clean", &a.common, &ctx)) != JITOP_CLI_EXIT_OK)
        goto out;
    int st = jitop_cache_clean(ctx);
    if (st != JITOP_OK) {
        fprintf(stderr, "jitop clean: %s: %s\n", jitop_strerror(st), jitop_errmsg(ctx));
        rc = JITOP_CLI_EXIT_FAIL;
        goto out;
    }
    printf("cleaned %s\n", jitop_cache_dir(ctx));
    if (fflush(stdout) != 0) {
        perror("jitop clean: stdout");
        rc = JITOP_CLI_EXIT_FAIL;
    }
out:
    jitop_ctx_destroy(ctx);
    jitop_cli_build_args_free(&a.common);
    return rc;
}
