/* `jitop build --op SPEC`: prewarms the shipped ops (jitop_ops.h) for each
 * arch, compiling exactly what those ops ask for at run time, through their
 * own prewarm calls (the same keys: a later run on a GPU of that arch is a
 * warm hit, with no compile).
 *
 * SPEC grammar (one op per --op; the flag repeats):
 *     layernorm:DTYPE:COLS    DTYPE f32 | f16 | bf16 (or float32, float16,
 *                             bfloat16); COLS the row length, 1 to 2^30-1
 *     lltm:DTYPE              DTYPE f32 | f64 (or float32, float64)
 * Names are lowercase; nothing may follow the last field. */
#include "cli.h"
#include "jitop_ops.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const struct {
    const char *name;
    jitop_dtype dtype;
} dtypes[] = {
    {"f32", JITOP_FLOAT32},  {"float32", JITOP_FLOAT32},   {"f16", JITOP_FLOAT16},
    {"float16", JITOP_FLOAT16}, {"bf16", JITOP_BFLOAT16}, {"bfloat16", JITOP_BFLOAT16},
    {"f64", JITOP_FLOAT64},  {"float64", JITOP_FLOAT64},
};

/* The largest row length jitop_layernorm_prewarm takes (its cols check). */
#define LN_MAX_COLS (INT32_MAX / 2)

typedef struct op_spec {
    enum { OP_LAYERNORM, OP_LLTM } op;
    jitop_dtype dtype;
    long cols;
} op_spec;

/* Parses spec; on a bad one prints "jitop CMD: --op 'SPEC': why" with the
 * grammar of the op at fault and returns JITOP_CLI_EXIT_USAGE. */
static int parse_spec(const char *cmd, const char *spec, op_spec *out)
{
    const char *why = NULL, *usage = "layernorm:DTYPE:COLS or lltm:DTYPE";
    char field[3][32] = {{0}};
    size_t nfields = 0;
    for (const char *p = spec;; nfields++) {
        size_t len = strcspn(p, ":");
        if (nfields == 3) {
            why = "too many fields";
            goto bad;
        }
        if (len == 0 || len >= sizeof field[0]) {
            why = len == 0 ? "empty field" : "field too long";
            goto bad;
        }
        memcpy(field[nfields], p, len);
        if (p[len] == '\0') {
            nfields++;
            break;
        }
        p += len + 1;
    }
    if (strcmp(field[0], "layernorm") == 0) {
        out->op = OP_LAYERNORM;
        usage = "layernorm:DTYPE:COLS, DTYPE f32, f16 or bf16 (e.g. layernorm:bf16:4096)";
    } else if (strcmp(field[0], "lltm") == 0) {
        out->op = OP_LLTM;
        usage = "lltm:DTYPE, DTYPE f32 or f64 (e.g. lltm:f32)";
    } else {
        why = "unknown op (the shipped ops: layernorm, lltm)";
        goto bad;
    }
    if (nfields < 2) {
        why = "no dtype";
        goto bad;
    }
    size_t d = 0;
    while (d < sizeof dtypes / sizeof dtypes[0] && strcmp(dtypes[d].name, field[1]) != 0)
        d++;
    if (d == sizeof dtypes / sizeof dtypes[0] ||
        (out->op == OP_LAYERNORM && dtypes[d].dtype == JITOP_FLOAT64) ||
        (out->op == OP_LLTM && dtypes[d].dtype != JITOP_FLOAT32 &&
         dtypes[d].dtype != JITOP_FLOAT64)) {
        why = "unknown dtype for this op";
        goto bad;
    }
    out->dtype = dtypes[d].dtype;
    out->cols = 0;
    if (out->op == OP_LLTM) {
        if (nfields > 2) {
            why = "lltm takes no size (its instances cover every size)";
            goto bad;
        }
        return JITOP_CLI_EXIT_OK;
    }
    if (nfields < 3) {
        why = "no row length";
        goto bad;
    }
    char *end = NULL;
    errno = 0;
    long cols = strtol(field[2], &end, 10);
    if (field[2][0] < '0' || field[2][0] > '9' || *end || errno || cols < 1 ||
        cols > LN_MAX_COLS) {
        why = "the row length must be a whole number from 1 to 1073741823";
        goto bad;
    }
    out->cols = cols;
    return JITOP_CLI_EXIT_OK;
bad:
    fprintf(stderr, "jitop %s: --op '", cmd);
    jitop_cli_text(stderr, spec, 0);
    fprintf(stderr, "': %s; expected %s\n", why, usage);
    return JITOP_CLI_EXIT_USAGE;
}

int jitop_cli_op_check(const char *cmd, const char *spec)
{
    op_spec s;
    return parse_spec(cmd, spec, &s);
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

size_t jitop_cli_build_ops(jitop_ctx *ctx, const jitop_cli_strs *ops,
                           const jitop_cli_strs *archs, int json)
{
    size_t failed = 0;
    for (size_t i = 0; i < ops->n; i++) {
        op_spec s;
        /* Checked at parse time: cannot fail here but for a caller's bug. */
        if (parse_spec("build", ops->v[i], &s) != JITOP_CLI_EXIT_OK) {
            failed += archs->n;
            continue;
        }
        for (size_t a = 0; a < archs->n; a++) {
            double t0 = now_ms();
            int st = s.op == OP_LAYERNORM
                         ? jitop_layernorm_prewarm(ctx, archs->v[a], s.dtype, s.cols)
                         : jitop_lltm_prewarm(ctx, archs->v[a], s.dtype);
            double ms = now_ms() - t0;
            const char *msg = st != JITOP_OK ? jitop_errmsg(ctx) : NULL;
            if (st != JITOP_OK)
                failed++;
            if (json) {
                fputs("{\"op\":", stdout);
                jitop_cli_json_str(stdout, ops->v[i]);
                fputs(",\"arch\":", stdout);
                jitop_cli_json_str(stdout, archs->v[a]);
                printf(",\"status\":\"%s\",\"ms\":%.3f", st == JITOP_OK ? "prewarmed" : "error",
                       ms);
                if (st != JITOP_OK) {
                    fputs(",\"error\":", stdout);
                    jitop_cli_json_str(stdout, msg && *msg ? msg : jitop_strerror(st));
                }
                fputs("}\n", stdout);
            } else {
                fputs("op ", stdout);
                jitop_cli_text(stdout, ops->v[i], 0);
                putchar(' ');
                jitop_cli_text(stdout, archs->v[a], 0);
                printf(" %s %.1f ms\n", st == JITOP_OK ? "prewarmed" : "error", ms);
                if (st != JITOP_OK) {
                    fputs("jitop build: ", stderr);
                    jitop_cli_text(stderr, msg && *msg ? msg : jitop_strerror(st), 1);
                    fputc('\n', stderr);
                }
            }
            fflush(stdout);
        }
    }
    return failed;
}
