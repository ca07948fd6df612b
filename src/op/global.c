/* Module globals: __device__ and __constant__ variables found by the names
 * people write ("table", "ns::table", "scale<float>"), their addresses in
 * the module's current code, and copies to and from them.
 *
 * A name is matched against the symbols each loaded image defines (read
 * from its binary at load: jitop__image.globals): exactly (C names, or a
 * mangled name given as it is), then demangled, with spacing normalized on
 * both sides. A C++ name the demangler spells otherwise ("scale<4>" for
 * "scale<4u>") is compiled as the name expression "&name" against the
 * module's sources until one accepts it: NVRTC's lowered name is the
 * symbol (one compile per name, cached on disk like any build; remembered
 * in the module).
 *
 * Copies hold each image they touch against unloading with the image's
 * in-flight count, as a launch does (load.h), instead of holding m->lock
 * while a synchronous copy waits for the GPU. */
#include "load/driver.h"
#include "load/load.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct jitop__global_alias {
    char *name;   /* normalized */
    char *symbol; /* the name expression's lowered name */
    struct jitop__global_alias *next;
} jitop__global_alias;

/* m->globals_free (see jitop_module). */
static void globals_free(jitop_module *m)
{
    jitop__global_alias *a = m->global_aliases;
    while (a) {
        jitop__global_alias *next = a->next;
        free(a->name);
        free(a->symbol);
        free(a);
        a = next;
    }
    m->global_aliases = NULL;
}

static bool ident_char(char c)
{
    return isalnum((unsigned char)c) || c == '_' || c == '$';
}

/* A name as compared: no leading '&' or "::", and whitespace only where
 * it separates two identifier characters ("unsigned int"), one blank
 * there. "&ns :: scale< float, 4 >" -> "ns::scale<float,4>". Malloc'd. */
static char *normalize(const char *name)
{
    const char *p = name;
    while (isspace((unsigned char)*p))
        p++;
    if (*p == '&')
        p++;
    while (isspace((unsigned char)*p))
        p++;
    if (p[0] == ':' && p[1] == ':')
        p += 2;
    char *out = malloc(strlen(p) + 1);
    if (!out)
        return NULL;
    size_t n = 0;
    bool blank = false;
    for (; *p; p++) {
        if (isspace((unsigned char)*p)) {
            blank = true;
            continue;
        }
        if (blank && n > 0 && ident_char(out[n - 1]) && ident_char(*p))
            out[n++] = ' ';
        blank = false;
        out[n++] = *p;
    }
    out[n] = '\0';
    return out;
}

/* Fills img->globals_cxx (m->lock held). */
static int image_cxx_names(jitop__image *img)
{
    for (size_t i = img->globals_cxx.n; i < img->globals.n; i++) {
        char *d = jitop__demangle(img->globals.v[i]);
        char *norm = d ? normalize(d) : NULL;
        int rc = norm ? jitop__strv_push(&img->globals_cxx, norm) : JITOP_ENOMEM;
        free(d);
        free(norm);
        if (rc != JITOP_OK)
            return jitop__fail(JITOP_ENOMEM, "out of memory");
    }
    return JITOP_OK;
}

/* The symbol of img that is the variable norm (or, given, the symbol
 * sym), or NULL (m->lock held). */
static int image_global(jitop__image *img, const char *norm, const char *sym, const char **found)
{
    *found = NULL;
    for (size_t i = 0; img && i < img->globals.n; i++)
        if (strcmp(img->globals.v[i], sym ? sym : norm) == 0) {
            *found = img->globals.v[i];
            return JITOP_OK;
        }
    if (!img || sym)
        return JITOP_OK;
    int status = image_cxx_names(img);
    for (size_t i = 0; status == JITOP_OK && i < img->globals_cxx.n; i++)
        if (strcmp(img->globals_cxx.v[i], norm) == 0) {
            *found = img->globals.v[i];
            break;
        }
    return status;
}

/* One copy of a variable: an image holding it (held: inflight) and its
 * address there. */
typedef struct gcopy {
    jitop__image *img;
    CUdeviceptr dptr;
    size_t size;
} gcopy;

typedef struct gcopies {
    gcopy *v;
    size_t n;
    uint64_t generation;
} gcopies;

static void copies_release(gcopies *c)
{
    for (size_t i = 0; i < c->n; i++)
        atomic_fetch_sub_explicit(&c->v[i].img->inflight, 1, memory_order_release);
    free(c->v);
    memset(c, 0, sizeof *c);
}

/* The images a lookup searches, in order (m->lock held, sources loaded):
 * the sources' (a linked module's one image is the first unit's), then
 * each template instance's; or only the image op runs from. */
static jitop__image *candidate(jitop_module *m, jitop_op *op, size_t i)
{
    if (op) {
        jitop__binding *b = atomic_load_explicit(&op->cur, memory_order_acquire);
        return i == 0 ? b->image : NULL;
    }
    if (i < m->nunits)
        return m->units[i].image;
    return i - m->nunits < m->ninstances ? m->instances[i - m->nunits]->image : NULL;
}

static size_t ncandidates(const jitop_module *m, const jitop_op *op)
{
    return op ? 1 : m->nunits + m->ninstances;
}

/* Under m->lock: the copies of the variable (norm, or the symbol sym) in
 * the candidate images, each held; only the first unless all. */
static int copies_locked(jitop_module *m, jitop_op *op, const char *norm, const char *sym,
                         bool all, gcopies *out)
{
    int status = JITOP_OK;
    size_t n = ncandidates(m, op);
    for (size_t i = 0; status == JITOP_OK && i < n && (all || out->n == 0); i++) {
        jitop__image *img = candidate(m, op, i);
        const char *found = NULL;
        if (!img || !img->mod)
            continue;
        status = image_global(img, norm, sym, &found);
        if (status != JITOP_OK || !found)
            continue;
        if (!out->v && !(out->v = calloc(n, sizeof *out->v))) {
            status = jitop__fail(JITOP_ENOMEM, "out of memory");
            break;
        }
        gcopy *c = &out->v[out->n];
        status = jitop__cu_check(m->drv->api->cuModuleGetGlobal(&c->dptr, &c->size, img->mod,
                                                                found),
                                 "cuModuleGetGlobal", found);
        if (status == JITOP_OK) {
            c->img = img;
            atomic_fetch_add_explicit(&img->inflight, 1, memory_order_seq_cst);
            out->n++;
        }
    }
    out->generation = atomic_load_explicit(&m->generation, memory_order_acquire);
    return status;
}

static const char *alias_find(const jitop_module *m, const char *norm)
{
    for (const jitop__global_alias *a = m->global_aliases; a; a = a->next)
        if (strcmp(a->name, norm) == 0)
            return a->symbol;
    return NULL;
}

/* Under m->lock: remembers norm -> symbol (replacing an older answer). */
static void alias_remember(jitop_module *m, const char *norm, const char *symbol)
{
    for (jitop__global_alias *a = m->global_aliases; a; a = a->next)
        if (strcmp(a->name, norm) == 0) {
            char *s = jitop__strdup(symbol);
            if (s) {
                free(a->symbol);
                a->symbol = s;
            }
            return;
        }
    jitop__global_alias *a = calloc(1, sizeof *a);
    if (!a || !(a->name = jitop__strdup(norm)) || !(a->symbol = jitop__strdup(symbol))) {
        if (a)
            free(a->name);
        free(a);
        return; /* not remembered: the next lookup compiles again */
    }
    m->globals_free = globals_free;
    a->next = m->global_aliases;
    m->global_aliases = a;
}

/* NVRTC's lowered name of "&norm", from the first source (in load order)
 * that compiles it with the module's options, or NULL (no lock held: it
 * may compile; units and options never change). */
static int alias_compile(jitop_module *m, const char *norm, char **symbol)
{
    int status = JITOP_OK;
    char *expr = jitop__sprintf("&%s", norm);
    *symbol = NULL;
    if (!expr)
        return jitop__fail(JITOP_ENOMEM, "out of memory");
    for (size_t i = 0; status == JITOP_OK && !*symbol && i < m->nunits; i++) {
        const jitop__unit *src = &m->units[i].unit;
        const char *names[1] = {expr};
        jitop__unit u;
        jitop__built built;
        status = jitop__unit_init(&u, src->source_path, src->inline_text,
                                  (const char *const *)m->options.v, m->options.n, names, 1,
                                  m->arch);
        if (status != JITOP_OK)
            break;
        status = jitop__build_unit(m->ctx, &u, &built);
        jitop__unit_free(&u);
        /* Not this source's: it declares no such variable (NVRTC's answer,
         * kept in the cache), or the expression does not compile there. */
        if (status == JITOP_ECOMPILE || (status == JITOP_ENOTFOUND && built.unresolved)) {
            jitop__clear_error();
            status = JITOP_OK;
            continue;
        }
        if (status != JITOP_OK)
            break;
        /* The binary may hold other names beside expr (a fold's or a
         * bin's, sorted): expr's own lowered name. */
        const char *lowered = jitop__binary_lowered(&built.entry.bin, expr);
        if (lowered && !(*symbol = jitop__strdup(lowered)))
            status = jitop__fail(JITOP_ENOMEM, "out of memory");
        jitop__built_free(&built);
    }
    free(expr);
    return status;
}

/* "a, ns::table, scale<float>": the variables of the candidate images,
 * demangled, each once (m->lock held). Malloc'd; NULL on ENOMEM. */
static char *list_globals(jitop_module *m, jitop_op *op)
{
    jitop__strv names = {0};
    int status = JITOP_OK;
    for (size_t i = 0; status == JITOP_OK && i < ncandidates(m, op); i++) {
        jitop__image *img = candidate(m, op, i);
        if (!img)
            continue;
        status = image_cxx_names(img);
        for (size_t j = 0; status == JITOP_OK && j < img->globals_cxx.n; j++) {
            bool seen = false;
            for (size_t k = 0; k < names.n && !seen; k++)
                seen = strcmp(names.v[k], img->globals_cxx.v[j]) == 0;
            if (!seen)
                status = jitop__strv_push(&names, img->globals_cxx.v[j]);
        }
    }
    char *s = status == JITOP_OK ? jitop__strv_join(&names, ", ") : NULL;
    jitop__strv_free(&names);
    return s;
}

/* The copies of variable name (only the first unless all) in m's current
 * code, or in the image op runs from, each held against unloading; on
 * success at least one. */
static int find(jitop_module *m, jitop_op *op, const char *name, bool all, gcopies *out)
{
    int status = JITOP_OK;
    char *symbol = NULL, *norm = normalize(name);
    memset(out, 0, sizeof *out);
    if (!norm)
        return jitop__fail(JITOP_ENOMEM, "out of memory");
    if (!*norm) {
        free(norm);
        return jitop__fail(JITOP_EINVAL, "module %s: empty global name", m->name);
    }
    bool cxx = strpbrk(norm, "<:") != NULL;
    status = jitop__cuda_more();
    pthread_mutex_lock(&m->lock);
    if (status == JITOP_OK && !op)
        status = jitop__units_load(m);
    if (status == JITOP_OK)
        status = jitop__driver_make_current(m->drv);
    if (status == JITOP_OK && op && !candidate(m, op, 0))
        status = jitop__fail(JITOP_ESTALE, "op %s: its kernel no longer exists in module %s",
                             op->name, m->name);
    if (status == JITOP_OK)
        status = copies_locked(m, op, norm, NULL, all, out);
    const char *known = status == JITOP_OK && out->n == 0 && cxx ? alias_find(m, norm) : NULL;
    if (known)
        status = copies_locked(m, op, norm, known, all, out);
    pthread_mutex_unlock(&m->lock);

    if (status == JITOP_OK && out->n == 0 && cxx) {
        /* A spelling the demangler does not give: NVRTC says which symbol. */
        status = alias_compile(m, norm, &symbol);
        pthread_mutex_lock(&m->lock);
        if (status == JITOP_OK && symbol) {
            alias_remember(m, norm, symbol);
            status = jitop__driver_make_current(m->drv);
            if (status == JITOP_OK && (!op || candidate(m, op, 0)))
                status = copies_locked(m, op, norm, symbol, all, out);
        }
        pthread_mutex_unlock(&m->lock);
    }
    if (status == JITOP_OK && out->n == 0) {
        pthread_mutex_lock(&m->lock);
        char *list = list_globals(m, op);
        pthread_mutex_unlock(&m->lock);
        status = jitop__fail(JITOP_ENOTFOUND,
                             "%s %s has no global variable '%s'; its globals: %s (a variable "
                             "template's instance must be used in device code or instantiated "
                             "explicitly)",
                             op ? "op" : "module", op ? op->name : m->name, norm,
                             list && *list ? list : "(none)");
        free(list);
    }
    if (status != JITOP_OK)
        copies_release(out);
    free(symbol);
    free(norm);
    return status;
}

static void fill_info(const gcopies *c, jitop_global_info *out)
{
    out->dptr = (uint64_t)c->v[0].dptr;
    out->size = c->v[0].size;
    out->generation = c->generation;
}

int jitop_global_get(jitop_module *m, const char *name, jitop_global_info *out)
{
    gcopies c;
    if (!m || !name || !out)
        return jitop__fail(JITOP_EINVAL, "jitop_global_get: NULL argument");
    int status = find(m, NULL, name, false, &c);
    if (status == JITOP_OK)
        fill_info(&c, out);
    copies_release(&c);
    return status;
}

int jitop_op_global_get(jitop_op *op, const char *name, jitop_global_info *out)
{
    gcopies c;
    if (!op || !name || !out)
        return jitop__fail(JITOP_EINVAL, "jitop_op_global_get: NULL argument");
    int status = find(op->module, op, name, false, &c);
    if (status == JITOP_OK)
        fill_info(&c, out);
    copies_release(&c);
    return status;
}

static int check_size(const jitop_module *m, const char *name, const gcopy *c, size_t size)
{
    if (size == c->size)
        return JITOP_OK;
    return jitop__fail(JITOP_EINVAL,
                       "module %s: global %s is %zu bytes, %zu given (the whole variable is "
                       "copied; for a part, copy through jitop_global_get's address)",
                       m->name, name, c->size, size);
}

int jitop_global_write(jitop_module *m, const char *name, const void *src, size_t size,
                       void *stream)
{
    gcopies c;
    if (!m || !name || !src)
        return jitop__fail(JITOP_EINVAL, "jitop_global_write: NULL argument");
    int status = find(m, NULL, name, true, &c);
    for (size_t i = 0; status == JITOP_OK && i < c.n; i++)
        status = check_size(m, name, &c.v[i], size);
    if (status == JITOP_OK)
        status = jitop__driver_make_current(m->drv);
    const jitop__cuda_api *api = m->drv->api;
    for (size_t i = 0; status == JITOP_OK && i < c.n; i++)
        status = stream ? jitop__cu_check(api->cuMemcpyHtoDAsync(c.v[i].dptr, src, size,
                                                                 (CUstream)stream),
                                          "cuMemcpyHtoDAsync", name)
                        : jitop__cu_check(api->cuMemcpyHtoD(c.v[i].dptr, src, size),
                                          "cuMemcpyHtoD", name);
    copies_release(&c);
    return status;
}

int jitop_global_read(jitop_module *m, const char *name, void *dst, size_t size, void *stream)
{
    gcopies c;
    if (!m || !name || !dst)
        return jitop__fail(JITOP_EINVAL, "jitop_global_read: NULL argument");
    int status = find(m, NULL, name, false, &c);
    if (status == JITOP_OK)
        status = check_size(m, name, &c.v[0], size);
    if (status == JITOP_OK)
        status = jitop__driver_make_current(m->drv);
    const jitop__cuda_api *api = m->drv->api;
    if (status == JITOP_OK)
        status = stream ? jitop__cu_check(api->cuMemcpyDtoHAsync(dst, c.v[0].dptr, size,
                                                                 (CUstream)stream),
                                          "cuMemcpyDtoHAsync", name)
                        : jitop__cu_check(api->cuMemcpyDtoH(dst, c.v[0].dptr, size),
                                          "cuMemcpyDtoH", name);
    copies_release(&c);
    return status;
}
