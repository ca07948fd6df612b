/*
 * JITOP_LN_PLAN's parser (ops/ln_plan.h): a comma-separated list of
 * field=value over the defaults layernorm.c passes in. The table below is
 * the one place that lists the fields, their ranges and their order in the
 * canonical text (which JITOP_VERBOSE prints, so that a log says which plan
 * made a figure).
 */
#include "ops/ln_plan.h"

#include "base/base.h"

#include <errno.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { LN_INT, LN_BOOL, LN_PF };

static const struct {
    const char *name;
    size_t off;
    int kind, lo, hi, step; /* LN_INT: a multiple of step in [lo, hi] */
} LN_FIELDS[] = {
    {"fwd_bytes", offsetof(jitop__ln_cfg, fwd_bytes), LN_INT, 2, 1024, 1},
    {"fwd_max_tpr", offsetof(jitop__ln_cfg, fwd_max_tpr), LN_INT, 32, 1024, 32},
    {"fwd_cluster_tpr", offsetof(jitop__ln_cfg, fwd_cluster_tpr), LN_INT, 32, 1024, 32},
    {"fwd_fit", offsetof(jitop__ln_cfg, fwd_fit), LN_BOOL, 0, 1, 1},
    {"fwd_min_blocks", offsetof(jitop__ln_cfg, fwd_min_blocks), LN_INT, 0, 32, 1},
    {"fwd_min_blocks_from", offsetof(jitop__ln_cfg, fwd_min_blocks_from), LN_INT, 0, 1024, 1},
    {"fwd_min_blocks_to", offsetof(jitop__ln_cfg, fwd_min_blocks_to), LN_INT, 0, 1024, 1},
    {"bwd_bytes", offsetof(jitop__ln_cfg, bwd_bytes), LN_INT, 2, 1024, 1},
    {"bwd_long_bytes", offsetof(jitop__ln_cfg, bwd_long_bytes), LN_INT, 2, 1024, 1},
    {"bwd_max_tpr", offsetof(jitop__ln_cfg, bwd_max_tpr), LN_INT, 32, 1024, 32},
    {"bwd_cluster_tpr", offsetof(jitop__ln_cfg, bwd_cluster_tpr), LN_INT, 32, 1024, 32},
    {"bwd_fit", offsetof(jitop__ln_cfg, bwd_fit), LN_BOOL, 0, 1, 1},
    {"bwd_pf", offsetof(jitop__ln_cfg, bwd_pf), LN_PF, -1, 1, 1},
    {"bwd_min_blocks", offsetof(jitop__ln_cfg, bwd_min_blocks), LN_INT, 0, 32, 1},
    {"bwd_min_blocks_from", offsetof(jitop__ln_cfg, bwd_min_blocks_from), LN_INT, 0, 1024, 1},
    {"bwd_min_blocks_to", offsetof(jitop__ln_cfg, bwd_min_blocks_to), LN_INT, 0, 1024, 1},
    {"bwd_bulk", offsetof(jitop__ln_cfg, bwd_bulk), LN_BOOL, 0, 1, 1},
    {"bulk_chunk", offsetof(jitop__ln_cfg, bulk_chunk), LN_INT, 512, 65536, 16},
    {"bulk_ept", offsetof(jitop__ln_cfg, bulk_ept), LN_INT, 1, 256, 1},
};
#define LN_NFIELDS (sizeof LN_FIELDS / sizeof LN_FIELDS[0])

static int *ln_field(jitop__ln_cfg *c, size_t k)
{
    return (int *)(void *)((char *)c + LN_FIELDS[k].off);
}

/* The value text v of field k into *out, or the error naming both. */
static int ln_value(const char *what, size_t k, const char *v, int *out)
{
    const char *name = LN_FIELDS[k].name;
    if (LN_FIELDS[k].kind == LN_PF && strcmp(v, "auto") == 0) {
        *out = -1;
        return JITOP_OK;
    }
    char *end = NULL;
    errno = 0;
    long x = *v != '\0' ? strtol(v, &end, 10) : 0;
    const int ok = *v != '\0' && errno == 0 && end != NULL && *end == '\0' &&
                   x >= (LN_FIELDS[k].kind == LN_PF ? 0 : LN_FIELDS[k].lo) &&
                   x <= LN_FIELDS[k].hi && x % LN_FIELDS[k].step == 0;
    if (ok) {
        *out = (int)x;
        return JITOP_OK;
    }
    switch (LN_FIELDS[k].kind) {
    case LN_PF:
        return jitop__fail(JITOP_EINVAL, "%s: %s is '%s': expected auto, 0 or 1", what, name, v);
    case LN_BOOL:
        return jitop__fail(JITOP_EINVAL, "%s: %s is '%s': expected 0 or 1", what, name, v);
    default:
        if (LN_FIELDS[k].step > 1)
            return jitop__fail(JITOP_EINVAL, "%s: %s is '%s': expected a multiple of %d in [%d, %d]",
                               what, name, v, LN_FIELDS[k].step, LN_FIELDS[k].lo, LN_FIELDS[k].hi);
        return jitop__fail(JITOP_EINVAL, "%s: %s is '%s': expected an integer in [%d, %d]", what,
                           name, v, LN_FIELDS[k].lo, LN_FIELDS[k].hi);
    }
}

static int ln_item(const char *what, char *item, jitop__ln_cfg *out, unsigned *set)
{
    char *eq = strchr(item, '=');
    if (eq == NULL)
        return jitop__fail(JITOP_EINVAL, "%s: '%s' is not field=value", what, item);
    *eq = '\0';
    for (size_t k = 0; k < LN_NFIELDS; k++) {
        if (strcmp(item, LN_FIELDS[k].name) != 0)
            continue;
        if (*set & (1u << k))
            return jitop__fail(JITOP_EINVAL, "%s: %s is set twice", what, item);
        *set |= 1u << k;
        return ln_value(what, k, eq + 1, ln_field(out, k));
    }
    char names[640];
    size_t len = 0;
    names[0] = '\0';
    for (size_t k = 0; k < LN_NFIELDS; k++) {
        int w = snprintf(names + len, sizeof names - len, "%s%s", k ? ", " : "", LN_FIELDS[k].name);
        if (w < 0 || (size_t)w >= sizeof names - len)
            break;
        len += (size_t)w;
    }
    return jitop__fail(JITOP_EINVAL, "%s: unknown field '%s' (fields: %s)", what, item, names);
}

/* The canonical text of the fields in set. */
static void ln_text(jitop__ln_cfg *c, unsigned set)
{
    size_t len = 0;
    c->text[0] = '\0';
    for (size_t k = 0; k < LN_NFIELDS; k++) {
        if (!(set & (1u << k)))
            continue;
        const int v = *ln_field(c, k);
        char val[16];
        if (LN_FIELDS[k].kind == LN_PF && v < 0)
            snprintf(val, sizeof val, "auto");
        else
            snprintf(val, sizeof val, "%d", v);
        /* 19 fields of at most 26 characters fit text */
        int w = snprintf(c->text + len, sizeof c->text - len, "%s%s=%s", len ? "," : "",
                         LN_FIELDS[k].name, val);
        if (w > 0 && (size_t)w < sizeof c->text - len)
            len += (size_t)w;
    }
    if (len == 0)
        snprintf(c->text, sizeof c->text, "default");
}

int jitop__ln_cfg_parse(const char *what, const char *spec, const jitop__ln_cfg *defaults,
                        jitop__ln_cfg *out)
{
    _Static_assert(LN_NFIELDS <= sizeof(unsigned) * CHAR_BIT, "one bit per field");
    *out = *defaults;
    unsigned set = 0;
    int rc = JITOP_OK;
    if (spec != NULL && *spec != '\0') {
        char *copy = strdup(spec);
        if (copy == NULL)
            return jitop__fail(JITOP_ENOMEM, "%s: out of memory", what);
        char *save = NULL;
        for (char *item = strtok_r(copy, ",", &save); item != NULL && rc == JITOP_OK;
             item = strtok_r(NULL, ",", &save))
            rc = ln_item(what, item, out, &set);
        free(copy);
    }
    if (rc != JITOP_OK) {
        *out = *defaults;
        return rc;
    }
    ln_text(out, set);
    return JITOP_OK;
}
