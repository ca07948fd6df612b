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
    {"bwd_pf_from", offsetof(jitop__ln_cfg, bwd_pf_from), LN_INT, 0, 1 << 30, 1},
    {"bwd_pf_bytes", offsetof(jitop__ln_cfg, bwd_pf_bytes), LN_INT, 0, 1024, 1},
    {"bwd_min_blocks", offsetof(jitop__ln_cfg, bwd_min_blocks), LN_INT, 0, 32, 1},
    {"bwd_min_blocks_from", offsetof(jitop__ln_cfg, bwd_min_blocks_from), LN_INT, 0, 1024, 1},
    {"bwd_min_blocks_to", offsetof(jitop__ln_cfg, bwd_min_blocks_to), LN_INT, 0, 1024, 1},
    {"bwd_bulk", offsetof(jitop__ln_cfg, bwd_bulk), LN_BOOL, 0, 1, 1},
    {"bulk_chunk", offsetof(jitop__ln_cfg, bulk_chunk), LN_INT, 512, 65536, 16},
    {"bulk_ept", offsetof(jitop__ln_cfg, bulk_ept), LN_INT, 1, 256, 1},
    {"bwd_bulk_bytes", offsetof(jitop__ln_cfg, bwd_bulk_bytes), LN_INT, 0, 1 << 30, 1},
    {"fwd_bulk", offsetof(jitop__ln_cfg, fwd_bulk), LN_BOOL, 0, 1, 1},
    {"fwd_bulk_bytes", offsetof(jitop__ln_cfg, fwd_bulk_bytes), LN_INT, 0, 1 << 30, 1},
    {"fwd_bulk_chunk", offsetof(jitop__ln_cfg, fwd_bulk_chunk), LN_INT, 512, 65536, 16},
    {"fwd_bulk_ept", offsetof(jitop__ln_cfg, fwd_bulk_ept), LN_INT, 1, 256, 1},
    {"fwd_one_sync", offsetof(jitop__ln_cfg, fwd_one_sync), LN_BOOL, 0, 1, 1},
    {"fwd_bulk_stages", offsetof(jitop__ln_cfg, fwd_bulk_stages), LN_INT, 2, 4, 1},
    {"fwd_bulk_gb", offsetof(jitop__ln_cfg, fwd_bulk_gb), LN_INT, 0, 2, 1},
    {"bwd_bulk_stages", offsetof(jitop__ln_cfg, bwd_bulk_stages), LN_INT, 2, 4, 1},
    {"bulk_idle", offsetof(jitop__ln_cfg, bulk_idle), LN_INT, 0, 100, 1},
    {"row_shift", offsetof(jitop__ln_cfg, row_shift), LN_BOOL, 0, 1, 1},
    {"shift_bwd_tpr", offsetof(jitop__ln_cfg, shift_bwd_tpr), LN_INT, 0, 1024, 32},
    {"shift_bwd_pf", offsetof(jitop__ln_cfg, shift_bwd_pf), LN_BOOL, 0, 1, 1},
    {"shift_fwd_stages", offsetof(jitop__ln_cfg, shift_fwd_stages), LN_INT, 2, 4, 1},
    {"shift_bwd_bulk", offsetof(jitop__ln_cfg, shift_bwd_bulk), LN_BOOL, 0, 1, 1},
    {"bulk_long_from", offsetof(jitop__ln_cfg, bulk_long_from), LN_INT, 0, 1 << 30, 1},
    {"bulk_long_chunk", offsetof(jitop__ln_cfg, bulk_long_chunk), LN_INT, 512, 65536, 16},
    {"bulk_long_ept", offsetof(jitop__ln_cfg, bulk_long_ept), LN_INT, 1, 256, 1},
    {"shift_bulk_long_from", offsetof(jitop__ln_cfg, shift_bulk_long_from), LN_INT, 0, 1 << 30, 1},
    {"shift_fwd_bulk_bytes", offsetof(jitop__ln_cfg, shift_fwd_bulk_bytes), LN_INT, 0, 1 << 30, 1},
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

/* The dtype prefixes: a field named "f32_" or "h16_" plus a field's name
 * applies to float32 rows or to 16-bit rows only, over the unprefixed one
 * whatever their order (the more specific wins). */
static const char *const LN_PREFIX[2] = {"f32_", "h16_"};

/* One item of the spec, into scoped[0] unprefixed, scoped[1] with this
 * dtype's prefix (self: 0 float32, 1 16-bit); the other dtype's is checked,
 * not applied. set[scope] the fields seen (scope 2: the other dtype's). */
static int ln_item(const char *what, char *item, int self, jitop__ln_cfg *scoped[2],
                   unsigned long long set[3])
{
    char *eq = strchr(item, '=');
    if (eq == NULL)
        return jitop__fail(JITOP_EINVAL, "%s: '%s' is not field=value", what, item);
    *eq = '\0';
    const char *name = item;
    int scope = 0;
    for (int d = 0; d < 2; d++)
        if (strncmp(item, LN_PREFIX[d], 4) == 0) {
            name = item + 4;
            scope = d == self ? 1 : 2;
        }
    for (size_t k = 0; k < LN_NFIELDS; k++) {
        if (strcmp(name, LN_FIELDS[k].name) != 0)
            continue;
        if (set[scope] & (1ull << k))
            return jitop__fail(JITOP_EINVAL, "%s: %s is set twice", what, item);
        set[scope] |= 1ull << k;
        int v = 0;
        int rc = ln_value(what, k, eq + 1, &v);
        if (rc == JITOP_OK && scope < 2)
            *ln_field(scoped[scope], k) = v;
        return rc;
    }
    char names[1024]; /* every field's name, ", "-separated */
    size_t len = 0;
    names[0] = '\0';
    for (size_t k = 0; k < LN_NFIELDS; k++) {
        int w = snprintf(names + len, sizeof names - len, "%s%s", k ? ", " : "", LN_FIELDS[k].name);
        if (w < 0 || (size_t)w >= sizeof names - len)
            break;
        len += (size_t)w;
    }
    return jitop__fail(JITOP_EINVAL, "%s: unknown field '%s' (fields: %s, each also with an f32_ "
                       "or h16_ prefix)", what, name, names);
}

/* The canonical text of the fields in set, after "legacy" when legacy. */
static void ln_text(jitop__ln_cfg *c, unsigned long long set, int legacy)
{
    size_t len = 0;
    c->text[0] = '\0';
    if (legacy)
        len = (size_t)snprintf(c->text, sizeof c->text, "legacy");
    for (size_t k = 0; k < LN_NFIELDS; k++) {
        if (!(set & (1ull << k)))
            continue;
        const int v = *ln_field(c, k);
        char val[16];
        if (LN_FIELDS[k].kind == LN_PF && v < 0)
            snprintf(val, sizeof val, "auto");
        else
            snprintf(val, sizeof val, "%d", v);
        /* every field at its widest value, with "legacy,", fits text */
        int w = snprintf(c->text + len, sizeof c->text - len, "%s%s=%s", len ? "," : "",
                         LN_FIELDS[k].name, val);
        if (w > 0 && (size_t)w < sizeof c->text - len)
            len += (size_t)w;
    }
    if (len == 0)
        snprintf(c->text, sizeof c->text, "default");
}

int jitop__ln_cfg_parse(const char *what, const char *spec, size_t es,
                        const jitop__ln_cfg *defaults, const jitop__ln_cfg *legacy,
                        jitop__ln_cfg *out)
{
    _Static_assert(LN_NFIELDS <= sizeof(unsigned long long) * CHAR_BIT, "one bit per field");
    const int self = es == 4 ? 0 : 1;
    int is_legacy = 0;
    /* the prefixed fields go to their own copy first, laid over the rest
     * at the end */
    jitop__ln_cfg all, mine;
    unsigned long long set[3] = {0, 0, 0};
    int rc = JITOP_OK;
    char *copy = NULL;
    if (spec != NULL && *spec != '\0' && (copy = strdup(spec)) == NULL)
        return jitop__fail(JITOP_ENOMEM, "%s: out of memory", what);
    char *save = NULL;
    char *item = copy != NULL ? strtok_r(copy, ",", &save) : NULL;
    if (item != NULL && strcmp(item, "legacy") == 0) {
        is_legacy = 1;
        item = strtok_r(NULL, ",", &save);
    }
    all = is_legacy ? *legacy : *defaults;
    mine = all;
    jitop__ln_cfg *scoped[2] = {&all, &mine};
    for (; item != NULL && rc == JITOP_OK; item = strtok_r(NULL, ",", &save))
        rc = strcmp(item, "legacy") == 0
                 ? jitop__fail(JITOP_EINVAL, "%s: legacy must come first", what)
                 : ln_item(what, item, self, scoped, set);
    free(copy);
    if (rc != JITOP_OK) {
        *out = *defaults;
        return rc;
    }
    *out = all;
    for (size_t k = 0; k < LN_NFIELDS; k++)
        if (set[1] & (1ull << k))
            *ln_field(out, k) = *ln_field(&mine, k);
    ln_text(out, set[0] | set[1], is_legacy);
    return JITOP_OK;
}
