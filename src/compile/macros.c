/* What a macro names: the object-like definitions a unit's texts and -D
 * options give, for the directives whose file a macro names
 * ("#include CONFIG"). Every definition is kept, on every #if branch, so
 * that the names found hold the one the compiler takes. */
#include "compile/compile.h"

#include <stdlib.h>
#include <string.h>

static bool ident_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           c == '_' || c == '$' || (unsigned char)c >= 0x80;
}

bool jitop__is_identifier(const char *t)
{
    if (!*t || (*t >= '0' && *t <= '9'))
        return false;
    for (; *t; t++)
        if (!ident_char(*t))
            return false;
    return true;
}

/* A definition, kept as it is: one seen twice only costs its bytes. */
int jitop__macros_add(jitop__macros *m, const char *name, const char *value)
{
    if (m->n == m->cap) {
        size_t cap = m->cap ? 2 * m->cap : 16;
        jitop__define *v = realloc(m->v, cap * sizeof *v);
        if (!v)
            return jitop__fail(JITOP_ENOMEM, "out of memory");
        m->v = v;
        m->cap = cap;
    }
    jitop__define *d = &m->v[m->n];
    d->name = jitop__strdup(name);
    d->value = value ? jitop__strdup(value) : NULL;
    if (!d->name || (value && !d->value)) {
        free(d->name);
        free(d->value);
        return jitop__fail(JITOP_ENOMEM, "out of memory");
    }
    m->n++;
    return JITOP_OK;
}

int jitop__macros_add_options(jitop__macros *m, const jitop__strv *options)
{
    int status = JITOP_OK;
    for (size_t i = 0; status == JITOP_OK && i < options->n; i++) {
        const char *o = options->v[i];
        if (strncmp(o, "-D", 2) != 0)
            continue;
        o += 2;
        size_t n = strcspn(o, "=(");
        char *name = jitop__sprintf("%.*s", (int)n, o), *value = NULL;
        if (!name)
            return jitop__fail(JITOP_ENOMEM, "out of memory");
        if (o[n] == '=') {
            const char *v = o + n + 1;
            while (*v == ' ' || *v == '\t')
                v++;
            size_t len = strlen(v);
            while (len > 0 && (v[len - 1] == ' ' || v[len - 1] == '\t'))
                len--;
            bool quoted =
                len > 2 && v[0] == '"' && v[len - 1] == '"' && !memchr(v + 1, '"', len - 2);
            bool angled =
                len > 2 && v[0] == '<' && v[len - 1] == '>' && !memchr(v + 1, '>', len - 2);
            value = jitop__sprintf("%.*s", (int)len, v);
            if (value && !quoted && !angled && !jitop__is_identifier(value)) {
                free(value);
                value = NULL;
            }
        }
        status = jitop__macros_add(m, name, value);
        free(name);
        free(value);
    }
    return status;
}

/* Whether a <name> holds an identifier some definition defines: a
 * preprocessor would replace it inside the name a macro gives
 * (#define H <ROOT/x.h>), which is not followed here. */
static bool holds_macro(const jitop__macros *m, const char *name)
{
    for (const char *p = name; *p;) {
        size_t n = 0;
        while (ident_char(p[n]))
            n++;
        if (n == 0) {
            p++;
            continue;
        }
        for (size_t i = 0; i < m->n; i++)
            if (strlen(m->v[i].name) == n && strncmp(m->v[i].name, p, n) == 0)
                return true;
        p += n;
    }
    return false;
}

static bool expand(const jitop__macros *m, const char *name, int depth, jitop__strv *out,
                   bool *oom)
{
    bool any = false;
    if (depth > 16)
        return false;
    for (size_t i = 0; i < m->n; i++) {
        const jitop__define *d = &m->v[i];
        if (strcmp(d->name, name) != 0)
            continue;
        any = true;
        if (!d->value || (d->value[0] == '<' && holds_macro(m, d->value)))
            return false;
        if (d->value[0] == '"' || d->value[0] == '<') {
            if (jitop__strv_push(out, d->value) != JITOP_OK) {
                *oom = true;
                return false;
            }
        } else if (!expand(m, d->value, depth + 1, out, oom)) {
            return false;
        }
    }
    return any;
}

int jitop__macros_expand(const jitop__macros *m, const char *name, jitop__strv *out, bool *known)
{
    bool oom = false;
    *known = expand(m, name, 0, out, &oom);
    if (oom || !*known)
        jitop__strv_free(out);
    return oom ? jitop__fail(JITOP_ENOMEM, "out of memory") : JITOP_OK;
}

void jitop__macros_free(jitop__macros *m)
{
    if (!m)
        return;
    for (size_t i = 0; i < m->n; i++) {
        free(m->v[i].name);
        free(m->v[i].value);
    }
    free(m->v);
    memset(m, 0, sizeof *m);
}
