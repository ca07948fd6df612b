#include "bench_args.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *value_of(const char *arg, const char *flag, int argc, char **argv, int *i)
{
    size_t n = strlen(flag);
    if (strncmp(arg, flag, n) != 0)
        return NULL;
    if (arg[n] == '=')
        return arg + n + 1;
    if (arg[n] == '\0' && *i + 1 < argc)
        return argv[++*i];
    return NULL;
}

int bench_args_parse(int argc, char **argv, const char *usage, bench_args *a)
{
    memset(a, 0, sizeof *a);
    a->reps = 0;
    if (argc < 2 || argv[1][0] == '-') {
        fprintf(stderr, "usage: %s\n", usage);
        return -1;
    }
    a->mode = argv[1];
    for (int i = 2; i < argc; i++) {
        const char *v;
        const char *arg = argv[i];
        if ((v = value_of(arg, "--src", argc, argv, &i)))
            a->src = v;
        else if ((v = value_of(arg, "--kernel", argc, argv, &i)))
            a->kernel = v;
        else if ((v = value_of(arg, "--op", argc, argv, &i)))
            a->op = v;
        else if ((v = value_of(arg, "--arch", argc, argv, &i)))
            a->arch = v;
        else if ((v = value_of(arg, "--area", argc, argv, &i)))
            a->area = v;
        else if ((v = value_of(arg, "--cubin", argc, argv, &i)))
            a->cubin = v;
        else if ((v = value_of(arg, "--reps", argc, argv, &i))) {
            char *end = NULL;
            long r = strtol(v, &end, 10);
            if (!end || *end || r < 1 || r > 1000000) {
                fprintf(stderr, "--reps: '%s' is not a count from 1 to 1000000\n", v);
                return -1;
            }
            a->reps = (int)r;
        } else if ((v = value_of(arg, "--opt", argc, argv, &i))) {
            if (a->nopts == BENCH_MAX_OPTS) {
                fprintf(stderr, "--opt: more than %d options\n", BENCH_MAX_OPTS);
                return -1;
            }
            a->opts[a->nopts++] = v;
        } else {
            fprintf(stderr, "unknown or incomplete argument '%s'\nusage: %s\n", arg, usage);
            return -1;
        }
    }
    if (!a->src || !a->kernel) {
        fprintf(stderr, "--src and --kernel are required\nusage: %s\n", usage);
        return -1;
    }
    return 0;
}

char *bench_edit_text(const char *text, int value, int *semantic)
{
    static const char key[] = "#define SAXPY_BIAS ";
    const char *line = strstr(text, key);
    size_t len = strlen(text);
    char repl[64];
    char *out;
    *semantic = 0;
    if (line) {
        const char *eol = strchr(line, '\n');
        size_t head = (size_t)(line - text);
        size_t tail_at = eol ? (size_t)(eol - text) : len;
        int r = snprintf(repl, sizeof repl, "%s%d.0f", key, value);
        out = malloc(len + (size_t)r + 1);
        if (!out)
            return NULL;
        memcpy(out, text, head);
        memcpy(out + head, repl, (size_t)r);
        memcpy(out + head + (size_t)r, text + tail_at, len - tail_at + 1);
        *semantic = 1;
        return out;
    }
    int r = snprintf(repl, sizeof repl, "\n// bench edit %d\n", value);
    out = malloc(len + (size_t)r + 1);
    if (!out)
        return NULL;
    memcpy(out, text, len);
    memcpy(out + len, repl, (size_t)r + 1);
    return out;
}
