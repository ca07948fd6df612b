/* Ops: the lock-free op table, op lookup (template instances compiled on
 * demand), describing bindings, listing kernels, and launches. */
#include "load/driver.h"
#include "op/op.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Above this much dynamic shared memory a kernel needs its limit raised. */
#define JITOP__SMEM_DEFAULT_LIMIT (48u * 1024u)

/* ------------------------------------------------------------ describing bindings */

/* The parameter layout of fn into info: param_offset owns one malloc'd
 * block holding the offsets, then the sizes (NULL without parameters). The
 * driver has no parameter count call: ask for each index until it says the
 * index is past the end. No cap: the driver's 32764 bytes of parameters
 * bound the count. */
static int param_layout(const jitop__cuda_api *api, CUfunction fn, const char *what,
                        jitop_op_info *info)
{
    int status = JITOP_OK;
    size_t n = 0, cap = 0, *pairs = NULL; /* offset, size, offset, size, ... */
    info->nparams = 0;
    info->param_offset = info->param_size = NULL;
    for (size_t i = 0; status == JITOP_OK; i++) {
        size_t off = 0, size = 0;
        CUresult r = api->cuFuncGetParamInfo(fn, i, &off, &size);
        if (r == CUDA_ERROR_INVALID_VALUE)
            break;
        if (r != CUDA_SUCCESS) {
            status = jitop__cu_check(r, "cuFuncGetParamInfo", what);
            break;
        }
        if (n == cap) {
            size_t *grown = realloc(pairs, (cap = cap ? 2 * cap : 16) * 2 * sizeof *pairs);
            if (!grown) {
                status = jitop__fail(JITOP_ENOMEM, "out of memory");
                break;
            }
            pairs = grown;
        }
        pairs[2 * n] = off;
        pairs[2 * n + 1] = size;
        n++;
    }
    size_t *block = status == JITOP_OK && n ? malloc(2 * n * sizeof *block) : NULL;
    if (status == JITOP_OK && n && !block)
        status = jitop__fail(JITOP_ENOMEM, "out of memory");
    if (status == JITOP_OK && n) {
        for (size_t i = 0; i < n; i++) {
            block[i] = pairs[2 * i];
            block[n + i] = pairs[2 * i + 1];
        }
        info->nparams = n;
        info->param_offset = block;
        info->param_size = block + n;
    }
    free(pairs);
    return status;
}

/* Frees what param_layout allocated into info. */
static void param_layout_free(jitop_op_info *info)
{
    free((size_t *)info->param_offset);
    info->param_offset = info->param_size = NULL;
    info->nparams = 0;
}

/* fn's parameter layout (allocated: param_layout_free) and attributes (m's
 * context current). On failure nothing stays allocated. */
static int describe_function(const jitop_module *m, CUfunction fn, const char *what,
                             jitop_op_info *info)
{
    const jitop__cuda_api *api = m->drv->api;
    int threads = 0, regs = 0, sshared = 0;
    int status = jitop__cuda_more();
    if (status == JITOP_OK)
        status = param_layout(api, fn, what, info);
    if (status == JITOP_OK)
        status = jitop__cu_check(
            api->cuFuncGetAttribute(&threads, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, fn),
            "cuFuncGetAttribute(MAX_THREADS_PER_BLOCK)", what);
    if (status == JITOP_OK)
        status = jitop__cu_check(api->cuFuncGetAttribute(&regs, CU_FUNC_ATTRIBUTE_NUM_REGS, fn),
                                 "cuFuncGetAttribute(NUM_REGS)", what);
    if (status == JITOP_OK)
        status = jitop__cu_check(
            api->cuFuncGetAttribute(&sshared, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, fn),
            "cuFuncGetAttribute(SHARED_SIZE_BYTES)", what);
    info->max_threads_per_block = threads;
    info->num_regs = regs;
    info->static_shared_bytes = (size_t)sshared;
    if (status != JITOP_OK)
        param_layout_free(info);
    return status;
}

static int binding_describe_slow(jitop_op *op, jitop__binding *b)
{
    jitop_module *m = op->module;
    jitop_op_info info;
    int status = JITOP_OK;
    memset(&info, 0, sizeof info);
    pthread_mutex_lock(&m->lock);
    if (atomic_load_explicit(&b->described, memory_order_relaxed))
        goto out;
    /* The attributes are asked of fn in m's context, like the launch. */
    status = jitop__driver_make_current(m->drv);
    if (status == JITOP_OK)
        status = describe_function(m, b->fn, op->name, &info);
    if (status != JITOP_OK)
        goto out; /* the next caller asks the driver again */
    b->nparams = info.nparams;
    b->param_offset = (size_t *)info.param_offset; /* the block moves into b */
    b->param_size = (size_t *)info.param_size;
    b->max_threads_per_block = info.max_threads_per_block;
    b->num_regs = info.num_regs;
    b->static_shared_bytes = info.static_shared_bytes;
    atomic_store_explicit(&b->described, true, memory_order_release);
out:
    pthread_mutex_unlock(&m->lock);
    return status;
}

/* Fills b's description on first need (see jitop__binding). */
static inline int binding_describe(jitop_op *op, jitop__binding *b)
{
    if (atomic_load_explicit(&b->described, memory_order_acquire))
        return JITOP_OK;
    return binding_describe_slow(op, b);
}

/* ------------------------------------------------------------ op table */

static uint64_t name_hash(const char *name)
{
    return XXH3_64bits(name, strlen(name));
}

/* Lock-free: slots are written once (release) and never cleared; a probe
 * ends at the first empty slot, and the table is at most half full. */
static jitop_op *optab_find(const jitop__optab *t, const char *name, uint64_t h)
{
    if (!t)
        return NULL;
    for (size_t i = h & (t->cap - 1);; i = (i + 1) & (t->cap - 1)) {
        jitop__opname *e = atomic_load_explicit(&t->slots[i], memory_order_acquire);
        if (!e)
            return NULL;
        if (strcmp(e->name, name) == 0)
            return e->op;
    }
}

static void optab_put(jitop__optab *t, jitop__opname *e)
{
    size_t i = name_hash(e->name) & (t->cap - 1);
    while (atomic_load_explicit(&t->slots[i], memory_order_relaxed))
        i = (i + 1) & (t->cap - 1);
    atomic_store_explicit(&t->slots[i], e, memory_order_release);
    t->count++;
}

/* Under m->lock: name now finds op. Grows by publishing a bigger table;
 * readers still probing the old one find everything it had, and the old
 * one lives until the module is freed. */
static int optab_insert(jitop_module *m, const char *name, jitop_op *op)
{
    jitop__opname *e = calloc(1, sizeof *e);
    if (!e || !(e->name = jitop__strdup(name))) {
        free(e);
        return jitop__fail(JITOP_ENOMEM, "out of memory");
    }
    e->op = op;
    jitop__optab *t = atomic_load_explicit(&m->optab, memory_order_relaxed);
    if (t && (t->count + 1) * 2 <= t->cap) {
        optab_put(t, e);
    } else {
        size_t cap = t ? t->cap * 2 : 16;
        jitop__optab *n = calloc(1, sizeof *n);
        if (n)
            n->slots = calloc(cap, sizeof *n->slots);
        if (!n || !n->slots) {
            free(n);
            free(e->name);
            free(e);
            return jitop__fail(JITOP_ENOMEM, "out of memory");
        }
        n->cap = cap;
        for (size_t i = 0; i < cap; i++)
            atomic_init(&n->slots[i], NULL);
        for (jitop__opname *o = m->opnames; o; o = o->next)
            optab_put(n, o);
        optab_put(n, e);
        n->older = t;
        atomic_store_explicit(&m->optab, n, memory_order_release);
    }
    e->next = m->opnames;
    m->opnames = e;
    return JITOP_OK;
}

/* Under m->lock: name (another spelling) finds op too, unless it finds an
 * op already. */
static int op_alias(jitop_module *m, const char *name, jitop_op *op)
{
    if (optab_find(atomic_load_explicit(&m->optab, memory_order_relaxed), name, name_hash(name)))
        return JITOP_OK;
    return optab_insert(m, name, op);
}

/* A name op_get failed on, for m->failed. */
typedef struct jitop__failed_name {
    char *name;
    int status;
    char *message;
    struct jitop__failed_name *next;
} jitop__failed_name;

/* Remembering is an optimization: past this many names (a program probing
 * names in a loop), new failures compile again instead of growing the list. */
#define JITOP__FAILED_NAMES_MAX 64

static void failed_names_free(jitop_module *m)
{
    jitop__failed_name *f = m->failed;
    while (f) {
        jitop__failed_name *next = f->next;
        free(f->name);
        free(f->message);
        free(f);
        f = next;
    }
    m->failed = NULL;
    m->nfailed = 0;
}

/* Under m->lock. The failure remembered for name in the code in place, or
 * NULL; failures of an older generation are dropped first. */
static const jitop__failed_name *failed_name_find(jitop_module *m, const char *name)
{
    uint64_t gen = atomic_load_explicit(&m->generation, memory_order_relaxed);
    if (m->failed_gen != gen) {
        failed_names_free(m);
        m->failed_gen = gen;
    }
    for (const jitop__failed_name *f = m->failed; f; f = f->next)
        if (strcmp(f->name, name) == 0)
            return f;
    return NULL;
}

/* Remembers that name failed with status and the thread's message, unless
 * a reload swapped new code in since the attempt began (gen). Known limit:
 * a source edited on disk is seen only through a reload (jitop_watch,
 * jitop_module_reload, or loading the module again), as for its kernels. */
static void failed_name_remember(jitop_module *m, const char *name, int status, uint64_t gen)
{
    jitop__failed_name *f = calloc(1, sizeof *f);
    if (!f || !(f->name = jitop__strdup(name)) ||
        !(f->message = jitop__strdup(jitop_errmsg(NULL)))) {
        if (f)
            free(f->name);
        free(f);
        return; /* not remembered: the next ask compiles again */
    }
    f->status = status;
    pthread_mutex_lock(&m->lock);
    bool keep = !failed_name_find(m, name) && m->failed_gen == gen &&
                m->nfailed < JITOP__FAILED_NAMES_MAX;
    if (keep) {
        f->next = m->failed;
        m->failed = f;
        m->nfailed++;
    }
    pthread_mutex_unlock(&m->lock);
    if (!keep) {
        free(f->name);
        free(f->message);
        free(f);
    }
}

/* m->ops_free (see jitop_module). */
static void ops_free(jitop_module *m)
{
    failed_names_free(m);
    jitop_op *op = m->ops;
    while (op) {
        jitop_op *next = op->next;
        jitop__binding_free_chain(atomic_load_explicit(&op->cur, memory_order_relaxed));
        free(op->name);
        free(op);
        op = next;
    }
    m->ops = NULL;
    while (m->opnames) {
        jitop__opname *next = m->opnames->next;
        free(m->opnames->name);
        free(m->opnames);
        m->opnames = next;
    }
    jitop__optab *t = atomic_load_explicit(&m->optab, memory_order_relaxed);
    while (t) {
        jitop__optab *older = t->older;
        free(t->slots);
        free(t);
        t = older;
    }
    atomic_store_explicit(&m->optab, NULL, memory_order_relaxed);
}

/* ------------------------------------------------------------ op lookup */

/* Whether a demangled symbol is an instance of a function template named
 * name ("void f<float, 4>(float*)" for "f"). */
static bool instance_of(const char *demangled, const char *name)
{
    size_t n = strlen(name);
    for (const char *p = strstr(demangled, name); p && n; p = strstr(p + 1, name))
        if (p[n] == '<' && (p == demangled || p[-1] == ' ' || p[-1] == ':'))
            return true;
    return false;
}

/* The kernels of the sources' images and the instances made so far, by
 * their C++ names (demangled), for the "no such op" message. *templated:
 * one is an instance of a template named name. Under m->lock. Loads the
 * source images if needed; should that fail, the list has what is loaded. */
static char *list_ops(jitop_module *m, const char *name, bool *templated)
{
    jitop__strv names = {0};
    int status = JITOP_OK;
    bool plain = jitop__name_is_plain(name);
    *templated = false;
    if (jitop__units_load(m) != JITOP_OK)
        jitop__clear_error();
    for (size_t i = 0; status == JITOP_OK && i < m->nunits + m->ninstances; i++) {
        const jitop__modunit *mu = i < m->nunits ? &m->units[i] : m->instances[i - m->nunits];
        const jitop__image *img = mu->image;
        for (size_t j = 0; status == JITOP_OK && img && j < img->nkernels; j++) {
            if (i >= m->nunits && strcmp(img->kernels[j].name, mu->lowered) != 0)
                continue;
            char *d = jitop__demangle(img->kernels[j].name);
            bool dup = false;
            for (size_t k = 0; d && k < names.n && !dup; k++)
                dup = strcmp(names.v[k], d) == 0;
            status = !d ? JITOP_ENOMEM : dup ? JITOP_OK : jitop__strv_push(&names, d);
            *templated = *templated || (d && plain && instance_of(d, name));
            free(d);
        }
    }
    char *s = status == JITOP_OK ? jitop__strv_join(&names, ", ") : NULL;
    jitop__strv_free(&names);
    return s;
}

/* JITOP_ENOTFOUND for name, listing what exists. detail: what the compiler
 * said about the name (NULL: nothing to add). Under m->lock. */
static int not_found(jitop_module *m, const char *name, const char *detail)
{
    bool templated = false;
    char *list = list_ops(m, name, &templated);
    char *hint = templated ? jitop__sprintf("; '%s' is a template: ask for an instance, as "
                                            "'%s<arguments>'",
                                            name, name)
                           : NULL;
    int status = jitop__fail(JITOP_ENOTFOUND, "module %s has no %s '%s'%s%s%s; its ops: %s%s",
                             m->name, jitop__name_is_plain(name) ? "kernel" : "op", name,
                             detail ? " (" : "", detail ? detail : "", detail ? ")" : "",
                             list && *list ? list : "(none)", hint ? hint : "");
    free(hint);
    free(list);
    return status;
}

static int not_found_locked(jitop_module *m, const char *name, const char *detail)
{
    pthread_mutex_lock(&m->lock);
    int status = not_found(m, name, detail);
    pthread_mutex_unlock(&m->lock);
    return status;
}

/* JITOP_EINVAL for a plain name that several kernels of img answer to
 * (overloads), naming them and how to ask for one. Under m->lock. */
static int ambiguous(const jitop_module *m, const jitop__image *img, const char *name)
{
    jitop__strv which = {0};
    const char *plain = name[0] == ':' ? name + 2 : name;
    char *example = NULL;
    int status = JITOP_OK;
    for (size_t j = 0; status == JITOP_OK && j < img->nkernels; j++) {
        char *d = jitop__demangle(img->kernels[j].name);
        const char *at = d ? strstr(d, plain) : NULL;
        const char *params = at ? at + strlen(plain) : NULL;
        if (!d)
            status = JITOP_ENOMEM;
        else if (params && *params == '(' && (at == d || at[-1] == ':'))
            status = jitop__strv_push(&which, d);
        if (status == JITOP_OK && params && *params == '(' && !example)
            example = jitop__sprintf("(void (*)%s)%s", params, plain);
        free(d);
    }
    char *list = status == JITOP_OK ? jitop__strv_join(&which, ", ") : NULL;
    status = list ? jitop__fail(JITOP_EINVAL,
                                "module %s: '%s' names %zu kernels (%s): ask for one by a name "
                                "expression with its type, as '%s'",
                                m->name, name, which.n, list, example ? example : "?")
                  : jitop__fail(JITOP_ENOMEM, "out of memory");
    free(list);
    free(example);
    jitop__strv_free(&which);
    return status;
}

/* The first "error: ..." line of a message (NVRTC's), malloc'd; NULL when
 * there is none. */
static char *first_error(const char *msg)
{
    const char *e = strstr(msg, "error: ");
    if (!e)
        return NULL;
    e += strlen("error: ");
    return jitop__sprintf("%.*s", (int)strcspn(e, "\n"), e);
}

/* The first binding of op name, with its time in the verbose log. */
static int op_bind(jitop_module *m, const char *name, jitop__image *img, CUfunction fn,
                   const char *lowered, jitop__binding **b)
{
    double t = jitop__now_ms();
    int status = jitop__binding_make(m, img, fn, lowered, b);
    if (status == JITOP_OK)
        jitop__log(m->ctx,
                   "module %s: op %s bound in %.3f ms (a source kernel's code goes to the GPU "
                   "here; an instance's went with its image)",
                   m->name, name, jitop__now_ms() - t);
    return status;
}

static int op_new(jitop_module *m, const char *name, size_t instance, jitop__binding *b,
                  jitop_op **out)
{
    jitop_op *op = calloc(1, sizeof *op);
    if (!op || !(op->name = jitop__strdup(name))) {
        free(op);
        return jitop__fail(JITOP_ENOMEM, "out of memory");
    }
    op->module = m;
    op->instance = instance;
    atomic_init(&op->cur, b);
    atomic_init(&op->changed_gen, atomic_load_explicit(&m->generation, memory_order_relaxed));
    int status = optab_insert(m, name, op);
    if (status != JITOP_OK) {
        free(op->name);
        free(op);
        return status;
    }
    op->next = m->ops;
    m->ops = op;
    *out = op;
    return JITOP_OK;
}

/* The op of the sources' kernel whose symbol is symbol, or NULL. Under
 * m->lock. */
static jitop_op *kernel_op(const jitop_module *m, const char *symbol)
{
    for (jitop_op *op = m->ops; op; op = op->next) {
        const jitop__binding *b = atomic_load_explicit(&op->cur, memory_order_relaxed);
        if (op->instance == SIZE_MAX && b->image && strcmp(b->lowered, symbol) == 0)
            return op;
    }
    return NULL;
}

/* The op made for instance i of m, or NULL. Under m->lock. */
static jitop_op *instance_op(const jitop_module *m, size_t i)
{
    for (jitop_op *op = m->ops; op; op = op->next)
        if (op->instance == i)
            return op;
    return NULL;
}

/* The index of s in sv, or SIZE_MAX. */
static size_t strv_index(const jitop__strv *sv, const char *s)
{
    for (size_t i = 0; i < sv->n; i++)
        if (strcmp(sv->v[i], s) == 0)
            return i;
    return SIZE_MAX;
}

/* Adds a built instance to m as the op name, unless another thread added
 * the same name meanwhile, or an instance with the same kernel symbol is
 * there already (another spelling: "f<float, 4u>" after "f<float,4>"):
 * *out is then that op, which name now finds too. *taken: mu now belongs
 * to m. known_at: for an instance whose key came from the module's file
 * hashes, m->prepares when they were copied; if a rebuild began since, mu
 * may be built from the files that rebuild replaces, and a rebuild's commit
 * keeps the instances made after it began as they are: nothing is
 * published and *stale is set (the caller builds it again from the files
 * as they are). UINT64_MAX: no such check. */
static int instance_publish(jitop_module *m, const char *name, jitop__modunit *mu,
                            uint64_t known_at, jitop_op **out, bool *taken, bool *stale)
{
    int status = JITOP_OK;
    jitop__binding *b = NULL;
    const jitop__kernel *k = NULL;
    const char *canon = mu->unit.names.v[0];
    *taken = *stale = false;
    pthread_mutex_lock(&m->lock);
    if (known_at != UINT64_MAX && known_at != m->prepares) {
        *stale = true;
        goto out;
    }
    /* Under the lock: a folded instance's image is its source's, whose
     * kernel list a reap may free once a reload retired it (which the
     * check above rules out). */
    k = jitop__image_find(mu->image, mu->lowered);
    if (!k) {
        status = jitop__fail(JITOP_ENOTFOUND,
                             "module %s: %s compiled to %s, which is not a kernel of its image "
                             "(is it __global__?)",
                             m->name, name, mu->lowered);
        goto out;
    }
    jitop_op *raced = optab_find(atomic_load_explicit(&m->optab, memory_order_relaxed), name,
                                 name_hash(name));
    if (raced) {
        *out = raced;
        goto out;
    }
    for (size_t i = 0; i < m->ninstances; i++) {
        jitop_op *same = strcmp(m->instances[i]->lowered, mu->lowered) == 0 ? instance_op(m, i)
                                                                             : NULL;
        if (same) {
            status = op_alias(m, name, same);
            if (status == JITOP_OK)
                status = op_alias(m, canon, same);
            if (status == JITOP_OK)
                *out = same;
            goto out;
        }
    }
    if (m->ninstances == m->cap_instances) {
        size_t cap = m->cap_instances ? m->cap_instances * 2 : 4;
        jitop__modunit **v = realloc(m->instances, cap * sizeof *v);
        if (!v) {
            status = jitop__fail(JITOP_ENOMEM, "out of memory");
            goto out;
        }
        m->instances = v;
        m->cap_instances = cap;
    }
    status = op_bind(m, name, mu->image, k->fn, mu->lowered, &b);
    if (status == JITOP_OK)
        status = op_new(m, name, m->ninstances, b, out);
    if (status == JITOP_OK) {
        b = NULL;
        m->instances[m->ninstances++] = mu;
        if (!mu->shared) /* a folded instance's image is its source's, in the list already */
            jitop__module_add_image(m, mu->image);
        *taken = true;
        /* The canonical spelling finds it too, without a compile. */
        status = op_alias(m, canon, *out);
    }
out:
    pthread_mutex_unlock(&m->lock);
    jitop__binding_free_chain(b);
    return status;
}

/* The instance canon of source isrc made an op from the source's own
 * binary, which has it compiled in (the fold rule): no compile, no cache
 * read. The source's image is loaded (the caller saw to it); its key,
 * files and image are the instance's. known: the source's files as copied
 * at known_at (instance_publish's check). */
static int instance_from_fold(jitop_module *m, size_t isrc, const char *name, const char *canon,
                              const jitop__deps *known, uint64_t known_at, jitop_op **out,
                              bool *taken, bool *stale)
{
    const jitop__unit *u = &m->units[isrc].unit;
    const char *names[1] = {canon};
    jitop__modunit *mu = calloc(1, sizeof *mu);
    int status = mu ? jitop__unit_init(&mu->unit, u->source_path, u->inline_text,
                                       (const char *const *)m->options.v, m->options.n, names, 1,
                                       m->arch)
                    : JITOP_ENOMEM;
    if (status == JITOP_OK)
        status = jitop__deps_copy(known, &mu->deps);
    if (status == JITOP_OK) {
        pthread_mutex_lock(&m->lock);
        const jitop__modunit *src = &m->units[isrc];
        size_t k = strv_index(&src->folded, canon);
        if (k == SIZE_MAX || k >= src->folded_lowered.n || !src->image) {
            /* A reload replaced the binary since: compile it as any other. */
            *stale = true;
        } else {
            mu->image = src->image;
            mu->shared = true;
            mu->src = isrc;
            memcpy(mu->key, src->key, sizeof mu->key);
            if (!(mu->lowered = jitop__strdup(src->folded_lowered.v[k])))
                status = JITOP_ENOMEM;
        }
        pthread_mutex_unlock(&m->lock);
    }
    if (status == JITOP_OK && !*stale) {
        status = instance_publish(m, name, mu, known_at, out, taken, stale);
        if (status == JITOP_OK && !*stale)
            jitop__log(m->ctx, "module %s: %s: compiled into %s's binary %s (no compile)",
                       m->name, name, u->source_name, mu->key);
    }
    if (!*taken && mu) {
        jitop__modunit_free(mu); /* the image stays: its source's */
        free(mu);
    }
    return status == JITOP_ENOMEM ? jitop__fail(JITOP_ENOMEM, "out of memory") : status;
}

/* Compiles name as a name expression from source src and makes it an op.
 * Compiling runs without m->lock (it may take long, and the build may take
 * ctx->lock). *undeclared: src declares no such name (NVRTC said so, now or
 * in an answer the cache kept). *about_name: the failure is the answer for
 * this name and these sources (it does not compile, it is no kernel), not a
 * passing one (memory, I/O, the driver). */
static int instantiate_from(jitop_module *m, size_t isrc, const char *name, jitop_op **out,
                            bool *undeclared, bool *about_name)
{
    const jitop__modunit *src = &m->units[isrc];
    const jitop__unit *u = &src->unit;
    jitop__deps known = {0};
    uint64_t known_at = UINT64_MAX;
    bool taken = false, stale = false, folded = false, join = false, alone = false;
    int status = JITOP_OK;
    *undeclared = *about_name = false;
    char *canon = jitop__name_canonical(name);
    if (!canon)
        return jitop__fail(JITOP_ENOMEM, "out of memory");
    /* The instance reads the files its source unit read: their hashes as
     * the module's current generation has them give the instance's key
     * without reading its manifest or stat'ing the files again (about 20 us
     * of a warm get in a new process on the GPU machine). The copy is taken
     * under the lock, which a reload holds while it replaces them; not while
     * a rebuild is prepared (its commit would leave this instance on the
     * files it replaces). An instance compiled into the source's binary
     * (the fold rule, build/build.h) is no compile at all: the source's
     * image (loaded now if it was not) and the lowered name NVRTC gave. */
    pthread_mutex_lock(&m->lock);
    if (m->pending == 0) {
        known_at = m->prepares;
        status = jitop__deps_copy(&src->deps, &known);
        if (status == JITOP_OK && !m->linked && strv_index(&src->folded, canon) != SIZE_MAX) {
            status = jitop__unit_load(m, &m->units[isrc]);
            folded = status == JITOP_OK;
        }
    }
    join = !m->linked && jitop__unit_folds(u) && strv_index(&src->asked, canon) == SIZE_MAX;
    pthread_mutex_unlock(&m->lock);
    if (folded) {
        status = instance_from_fold(m, isrc, name, canon, &known, known_at, out, &taken, &stale);
        *about_name = status == JITOP_ENOTFOUND;
        if (status != JITOP_OK || !stale)
            goto out;
    }
    /* Twice at most: a rebuild that began while the instance was built
     * from the known hashes sends it back to the files as they are. */
    for (int attempt = 0; status == JITOP_OK && attempt < 2; attempt++) {
        jitop__modunit *mu = calloc(1, sizeof *mu);
        if (!mu) {
            status = jitop__fail(JITOP_ENOMEM, "out of memory");
            break;
        }
        const char *names[1] = {name};
        bool use_known = attempt == 0 && known_at != UINT64_MAX && !stale;
        status = jitop__modunit_build(m, u->source_path, u->inline_text, names, 1, false,
                                      use_known ? &known : NULL, mu, undeclared);
        if (status != JITOP_OK) {
            *about_name = status == JITOP_ECOMPILE;
            free(mu); /* modunit_build left it empty */
            break;
        }
        mu->src = isrc;
        status = instance_publish(m, name, mu, use_known ? known_at : UINT64_MAX, out, &taken,
                                  &stale);
        alone = taken;
        *about_name = status == JITOP_ENOTFOUND; /* compiled, but to no kernel */
        if (!taken) {
            jitop__image_free(m->drv, mu->image);
            jitop__modunit_free(mu);
            free(mu);
        }
        if (!stale)
            break;
    }
    /* Compiled on its own: it joins the source's list, and its next
     * compile folds it in (the fold rule). */
    if (status == JITOP_OK && alone && join) {
        status = jitop__build_join(m->ctx, u, canon);
        pthread_mutex_lock(&m->lock);
        if (status == JITOP_OK && strv_index(&m->units[isrc].asked, canon) == SIZE_MAX)
            status = jitop__strv_push(&m->units[isrc].asked, canon);
        pthread_mutex_unlock(&m->lock);
    }
out:
    jitop__deps_free(&known);
    free(canon);
    return status;
}

/* Makes the name expression name an op: an instance compiled (through the
 * cache) from the first source, in the order given, that declares it. A
 * source that does not is asked once: NVRTC's answer is cached like a
 * binary, so a warm get compiles nothing however many sources come first.
 * Not a search of the sources' text: a template defined in a header counts
 * as the including source's own. */
static int instantiate(jitop_module *m, const char *name, jitop_op **out, bool *about_name)
{
    int status = JITOP_OK;
    jitop__strv said = {0}; /* NVRTC's first error for each source, for the message */
    char *detail = NULL;
    *about_name = false;
    for (size_t i = 0; i < m->nunits; i++) {
        bool undeclared = false;
        status = instantiate_from(m, i, name, out, &undeclared, about_name);
        if (status == JITOP_OK || !undeclared)
            goto out;
        char *e = first_error(jitop_errmsg(NULL));
        if (e && jitop__strv_pushf(&said, "%s: %s", m->units[i].unit.source_name, e) !=
                     JITOP_OK) {
            free(e);
            status = jitop__fail(JITOP_ENOMEM, "out of memory");
            goto out;
        }
        free(e);
    }
    char *joined = said.n ? jitop__strv_join(&said, "; for ") : NULL;
    detail = joined ? jitop__sprintf("NVRTC, for %s", joined) : NULL;
    free(joined);
    status = not_found_locked(m, name, detail);
    *about_name = true;
out:
    free(detail);
    jitop__strv_free(&said);
    return status;
}

/* The slow path of jitop_op_get, under m->lock but for compiles. Another
 * spelling of a name already made (the same after jitop__name_canonical)
 * is that op. A plain name is a kernel of the sources' images, the
 * compiler's own list (loading them may fail: the driver's error is the
 * answer); anything else is a name expression compiled on demand. A name
 * that failed on the code in place fails the same way again, at once. */
static int op_create(jitop_module *m, const char *name, uint64_t h, jitop_op **op)
{
    int status = JITOP_OK;
    jitop__binding *b = NULL;
    jitop__image *img = NULL;
    CUfunction fn = NULL;
    const char *symbol = NULL;
    const jitop__failed_name *failed = NULL;
    bool compile = false, missing = false;
    uint64_t gen = 0;
    char *canon = jitop__name_canonical(name);
    if (!canon)
        return jitop__fail(JITOP_ENOMEM, "out of memory");
    bool plain = jitop__name_is_plain(canon);
    pthread_mutex_lock(&m->lock);
    m->ops_free = ops_free; /* before anything of the op room goes into m */
    jitop__optab *t = atomic_load_explicit(&m->optab, memory_order_relaxed);
    *op = optab_find(t, name, h);
    if (!*op && strcmp(canon, name) != 0 && (*op = optab_find(t, canon, name_hash(canon))))
        status = op_alias(m, name, *op);
    if (*op)
        goto unlock;
    if ((failed = failed_name_find(m, canon))) {
        status = jitop__fail(failed->status, "%s", failed->message);
        goto unlock;
    }
    gen = m->failed_gen; /* the generation failed_name_find just saw */
    if (!plain) {
        compile = true;
        goto unlock;
    }
    status = jitop__units_load(m);
    if (status != JITOP_OK)
        goto unlock;
    int found = jitop__find_kernel(m, NULL, canon, &img, &fn, &symbol);
    jitop_op *same = found == 1 ? kernel_op(m, symbol) : NULL;
    if (same) {
        /* Another name of a kernel that has an op ("::ns::k", "ns::k"). */
        *op = same;
        status = op_alias(m, name, same);
    } else if (found == 1) {
        status = op_bind(m, name, img, fn, symbol, &b);
        if (status == JITOP_OK)
            status = op_new(m, name, SIZE_MAX, b, op);
        if (status == JITOP_OK) {
            b = NULL;
            status = op_alias(m, canon, *op);
        }
    } else if (found < 0) {
        status = ambiguous(m, img, canon);
    } else {
        status = not_found(m, name, NULL);
        missing = true;
    }
unlock:
    pthread_mutex_unlock(&m->lock);
    jitop__binding_free_chain(b);
    if (missing)
        failed_name_remember(m, canon, status, gen);
    if (compile) {
        bool about_name = false;
        status = instantiate(m, name, op, &about_name);
        if (status != JITOP_OK && about_name)
            failed_name_remember(m, canon, status, gen);
    }
    free(canon);
    return status;
}

int jitop_op_get(jitop_module *m, const char *name, jitop_op **out)
{
    int status = JITOP_OK;
    if (!m || !name || !out)
        return jitop__fail(JITOP_EINVAL, "jitop_op_get: NULL argument");
    uint64_t h = name_hash(name);
    jitop_op *op = optab_find(atomic_load_explicit(&m->optab, memory_order_acquire), name, h);
    if (!op)
        status = op_create(m, name, h, &op);
    if (status == JITOP_OK)
        *out = op;
    return status;
}

/* ------------------------------------------------------------ bindings in use */

static int stale(const jitop_op *op)
{
    return jitop__fail(JITOP_ESTALE,
                       "op %s: its kernel no longer exists in module %s after reload "
                       "(generation %llu)",
                       op->name, op->module->name,
                       (unsigned long long)atomic_load(&op->module->generation));
}

/* Takes the op's current binding and holds its image against unloading
 * (see load/load.h for why the re-check makes this safe). */
static inline int binding_hold(jitop_op *op, jitop__binding **out)
{
    for (;;) {
        jitop__binding *b = atomic_load_explicit(&op->cur, memory_order_seq_cst);
        jitop__image *img = b->image;
        if (!img)
            return stale(op);
        atomic_fetch_add_explicit(&img->inflight, 1, memory_order_seq_cst);
        if (atomic_load_explicit(&op->cur, memory_order_seq_cst) == b) {
            *out = b;
            return JITOP_OK;
        }
        atomic_fetch_sub_explicit(&img->inflight, 1, memory_order_release);
    }
}

static inline void binding_drop(jitop__binding *b)
{
    atomic_fetch_sub_explicit(&b->image->inflight, 1, memory_order_release);
}

int jitop_op_info_get(jitop_op *op, jitop_op_info *info)
{
    jitop__binding *b = NULL;
    if (!op || !info)
        return jitop__fail(JITOP_EINVAL, "jitop_op_info_get: NULL argument");
    int status = binding_hold(op, &b);
    if (status != JITOP_OK)
        return status;
    status = binding_describe(op, b);
    if (status != JITOP_OK) {
        binding_drop(b);
        return status;
    }
    memset(info, 0, sizeof *info);
    info->name = op->name;
    info->lowered = b->lowered;
    info->nparams = b->nparams;
    info->param_offset = b->param_offset; /* the binding lives as long as the module */
    info->param_size = b->param_size;
    info->max_threads_per_block = b->max_threads_per_block;
    info->num_regs = b->num_regs;
    info->static_shared_bytes = b->static_shared_bytes;
    binding_drop(b);
    return JITOP_OK;
}

static bool listed_before(const jitop_module *m, size_t unit, size_t kernel)
{
    const char *name = m->units[unit].image->kernels[kernel].name;
    for (size_t i = 0; i <= unit; i++) {
        const jitop__image *img = m->units[i].image;
        size_t end = !img ? 0 : i == unit ? kernel : img->nkernels; /* NULL: a linked unit */
        for (size_t j = 0; j < end; j++)
            if (strcmp(img->kernels[j].name, name) == 0)
                return true;
    }
    return false;
}

/* The description of img's kernel j into *info (lowered set, name not),
 * read from the driver once per kernel (m->lock held) and kept with the
 * kernel, so that listing a module again asks the driver nothing and the
 * arrays handed out stay valid: the image keeps its list for the life of
 * the module once it was listed (img->listed). */
static int kernel_describe(jitop_module *m, jitop__image *img, size_t j, jitop_op_info *info)
{
    jitop__kernel *k = &img->kernels[j];
    int status = JITOP_OK;
    if (!k->described) {
        memset(&k->desc, 0, sizeof k->desc);
        status = jitop__function_load(m, img, k->fn, k->name);
        if (status == JITOP_OK)
            status = describe_function(m, k->fn, k->name, &k->desc);
        if (status != JITOP_OK)
            return status;
        k->described = true;
    }
    img->listed = true;
    *info = k->desc;
    info->lowered = k->name;
    return JITOP_OK;
}

int jitop_module_ops(jitop_module *m, jitop_op_info *infos, size_t cap, size_t *count)
{
    int status = JITOP_OK;
    size_t n = 0;
    if (!m || !count || (cap && !infos))
        return jitop__fail(JITOP_EINVAL, "jitop_module_ops: NULL argument");
    pthread_mutex_lock(&m->lock);
    status = jitop__units_load(m);
    /* Kernels of the sources (first definition wins, as for jitop_op_get),
     * then the template instances made so far. Strings are owned by the
     * module's images and live as long as the module. */
    for (size_t i = 0; status == JITOP_OK && i < m->nunits + m->ninstances; i++) {
        jitop__modunit *mu = i < m->nunits ? &m->units[i] : m->instances[i - m->nunits];
        /* A linked module's units but the first have no image of their own. */
        for (size_t j = 0; status == JITOP_OK && mu->image && j < mu->image->nkernels; j++) {
            const jitop__kernel *k = &mu->image->kernels[j];
            /* A source's binary holds the instances folded into it (the fold
             * rule, build/build.h): they are listed as instances, by the
             * name asked, once made, and not as kernels of the source. */
            if (i >= m->nunits ? strcmp(k->name, mu->lowered) != 0
                               : listed_before(m, i, j) ||
                                     strv_index(&mu->folded_lowered, k->name) != SIZE_MAX)
                continue;
            if (n < cap) {
                status = kernel_describe(m, mu->image, j, &infos[n]);
                infos[n].name = i >= m->nunits ? mu->unit.names.v[0] : k->name;
            }
            n++;
        }
    }
    pthread_mutex_unlock(&m->lock);
    if (status == JITOP_OK)
        *count = n;
    return status;
}

/* ------------------------------------------------------------ launch */

static int check_args(const jitop_op *op, const jitop__binding *b, void **args,
                      const size_t *arg_sizes, size_t nargs)
{
    if ((arg_sizes || nargs) && nargs != b->nparams)
        return jitop__fail(JITOP_EARGS, "op %s takes %zu parameters, %zu arguments given",
                           op->name, b->nparams, nargs);
    if (b->nparams && !args)
        return jitop__fail(JITOP_EARGS, "op %s takes %zu parameters, args is NULL", op->name,
                           b->nparams);
    for (size_t i = 0; arg_sizes && i < nargs; i++)
        if (arg_sizes[i] != b->param_size[i])
            return jitop__fail(JITOP_EARGS,
                               "op %s: parameter %zu (at byte offset %zu) is %zu bytes, but "
                               "argument %zu is %zu bytes",
                               op->name, i, b->param_offset[i], b->param_size[i], i, arg_sizes[i]);
    return JITOP_OK;
}

/* Raises the binding's dynamic shared memory limit once (not per launch). */
static int raise_smem(jitop_op *op, jitop__binding *b, size_t bytes)
{
    int status = JITOP_OK;
    jitop_module *m = op->module;
    pthread_mutex_lock(&m->lock);
    if (bytes > atomic_load_explicit(&b->smem_raised, memory_order_relaxed) &&
        (status = jitop__cuda_more()) == JITOP_OK) {
        CUresult r = m->drv->api->cuFuncSetAttribute(
            b->fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, (int)bytes);
        if (r == CUDA_SUCCESS) {
            atomic_store_explicit(&b->smem_raised, bytes, memory_order_release);
        } else {
            int optin = 0;
            if (m->drv->api->cuDeviceGetAttribute(
                    &optin, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
                    m->drv->device) != CUDA_SUCCESS)
                optin = -1;
            status = jitop__cu_check(r, "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)",
                                     op->name);
            jitop__fail_prefix(status,
                               "op %s asks for %zu bytes of dynamic shared memory; the device "
                               "allows %d per block, of which the kernel uses %zu statically",
                               op->name, bytes, optin, b->static_shared_bytes);
        }
    }
    pthread_mutex_unlock(&m->lock);
    return status;
}

/* Raises the function's dynamic shared memory limit when shared_bytes needs
 * it; b is described when shared_bytes is not 0. */
static inline int smem_prepare(jitop_op *op, jitop__binding *b, size_t shared_bytes)
{
    /* First, so that the sum below cannot wrap and the driver's unsigned
     * (and cuFuncSetAttribute's int) get the value asked for. */
    if (shared_bytes > INT_MAX)
        return jitop__fail(JITOP_EINVAL,
                           "op %s: shared_bytes %zu is too large (at most %d bytes)", op->name,
                           shared_bytes, INT_MAX);
    /* The default 48 KiB covers static and dynamic shared memory together
     * (the function's dynamic limit starts at 48 KiB minus its static part;
     * static_shared_bytes came from an int, so the sum fits a size_t).
     * Without dynamic memory the description may not be read yet, and need
     * not be: static shared memory alone never exceeds 48 KiB. */
    if (shared_bytes && shared_bytes + b->static_shared_bytes > JITOP__SMEM_DEFAULT_LIMIT &&
        shared_bytes > atomic_load_explicit(&b->smem_raised, memory_order_acquire))
        return raise_smem(op, b, shared_bytes);
    return JITOP_OK;
}

/* Everything a launch checks before calling the driver. */
static inline int launch_prepare(jitop_op *op, jitop__binding *b, size_t shared_bytes,
                                 void **args, const size_t *arg_sizes, size_t nargs)
{
    int status = JITOP_OK;
    /* Only these need the description: an unchecked launch without dynamic
     * shared memory never asks the driver for it. */
    if ((arg_sizes || nargs || !args || shared_bytes) &&
        (status = binding_describe(op, b)) != JITOP_OK)
        return status;
    if ((arg_sizes || nargs || !args) &&
        (status = check_args(op, b, args, arg_sizes, nargs)) != JITOP_OK)
        return status;
    if ((status = smem_prepare(op, b, shared_bytes)) != JITOP_OK)
        return status;
    /* One thread-local read in the driver; a switch only when the calling
     * thread has another context current. */
    const jitop__driver *d = op->module->drv;
    CUcontext cur = NULL;
    if (d->api->cuCtxGetCurrent(&cur) != CUDA_SUCCESS || cur != d->cu)
        status = jitop__driver_make_current(d);
    return status;
}

int jitop_launch(jitop_op *op, jitop_dim3 grid, jitop_dim3 block, size_t shared_bytes,
                 void *stream, void **args, const size_t *arg_sizes, size_t nargs)
{
    jitop__binding *b = NULL;
    if (!op)
        return jitop__fail(JITOP_EINVAL, "jitop_launch: op is NULL");
    int status = binding_hold(op, &b);
    if (status != JITOP_OK)
        return status;
    status = launch_prepare(op, b, shared_bytes, args, arg_sizes, nargs);
    if (status == JITOP_OK) {
        CUresult r = op->module->drv->api->cuLaunchKernel(
            b->fn, grid.x, grid.y, grid.z, block.x, block.y, block.z, (unsigned)shared_bytes,
            (CUstream)stream, args, NULL);
        if (r != CUDA_SUCCESS)
            status = jitop__cu_check(r, "cuLaunchKernel", op->name);
    }
    binding_drop(b);
    return status;
}

int jitop_launch_ex(jitop_op *op, const jitop_launch_config *cfg, void **args,
                    const size_t *arg_sizes, size_t nargs)
{
    jitop__binding *b = NULL;
    if (!op || !cfg)
        return jitop__fail(JITOP_EINVAL, "jitop_launch_ex: NULL argument");
    int status = binding_hold(op, &b);
    if (status != JITOP_OK)
        return status;
    status = launch_prepare(op, b, cfg->shared_bytes, args, arg_sizes, nargs);
    if (status == JITOP_OK) {
        CUlaunchAttribute attrs[3];
        unsigned nattrs = 0;
        memset(attrs, 0, sizeof attrs);
        if (cfg->cluster.x || cfg->cluster.y || cfg->cluster.z) {
            attrs[nattrs].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
            attrs[nattrs].value.clusterDim.x = cfg->cluster.x ? cfg->cluster.x : 1;
            attrs[nattrs].value.clusterDim.y = cfg->cluster.y ? cfg->cluster.y : 1;
            attrs[nattrs].value.clusterDim.z = cfg->cluster.z ? cfg->cluster.z : 1;
            nattrs++;
        }
        if (cfg->cooperative) {
            attrs[nattrs].id = CU_LAUNCH_ATTRIBUTE_COOPERATIVE;
            attrs[nattrs].value.cooperative = 1;
            nattrs++;
        }
        if (cfg->programmatic) {
            attrs[nattrs].id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
            attrs[nattrs].value.programmaticStreamSerializationAllowed = 1;
            nattrs++;
        }
        CUlaunchConfig lc = {
            .gridDimX = cfg->grid.x, .gridDimY = cfg->grid.y, .gridDimZ = cfg->grid.z,
            .blockDimX = cfg->block.x, .blockDimY = cfg->block.y, .blockDimZ = cfg->block.z,
            .sharedMemBytes = (unsigned)cfg->shared_bytes, .hStream = (CUstream)cfg->stream,
            .attrs = nattrs ? attrs : NULL, .numAttrs = nattrs,
        };
        CUresult r = op->module->drv->api->cuLaunchKernelEx(&lc, b->fn, args, NULL);
        if (r != CUDA_SUCCESS)
            status = jitop__cu_check(r, "cuLaunchKernelEx", op->name);
    }
    binding_drop(b);
    return status;
}

int jitop_occupancy(jitop_op *op, size_t shared_bytes, int *block_size, int *min_grid)
{
    jitop__binding *b = NULL;
    if (!op || !block_size || !min_grid)
        return jitop__fail(JITOP_EINVAL, "jitop_occupancy: NULL argument");
    int status = binding_hold(op, &b);
    if (status != JITOP_OK)
        return status;
    int grid = 0, block = 0;
    status = jitop__cuda_more();
    if (status == JITOP_OK)
        status = jitop__driver_make_current(op->module->drv);
    if (status == JITOP_OK)
        status = jitop__cu_check(op->module->drv->api->cuOccupancyMaxPotentialBlockSize(
                                     &grid, &block, b->fn, NULL, shared_bytes, 0),
                                 "cuOccupancyMaxPotentialBlockSize", op->name);
    binding_drop(b);
    if (status == JITOP_OK) {
        *block_size = block;
        *min_grid = grid;
    }
    return status;
}

int jitop_occupancy_clusters(jitop_op *op, int block_size, size_t shared_bytes, int cluster_size,
                             int *clusters)
{
    static const char *fn = "jitop_occupancy_clusters";
    jitop__binding *b = NULL;
    if (!op || !clusters)
        return jitop__fail(JITOP_EINVAL, "%s: NULL argument", fn);
    if (block_size < 1)
        return jitop__fail(JITOP_EINVAL, "%s: block_size is %d, must be >= 1", fn, block_size);
    if (cluster_size < 0)
        return jitop__fail(JITOP_EINVAL, "%s: cluster_size is %d, must be >= 0", fn, cluster_size);
    int status = binding_hold(op, &b);
    if (status != JITOP_OK)
        return status;
    /* The driver counts with the function's dynamic shared memory limit, so
     * raise it first, as a launch with shared_bytes would. */
    if (shared_bytes)
        status = binding_describe(op, b);
    if (status == JITOP_OK)
        status = smem_prepare(op, b, shared_bytes);
    if (status == JITOP_OK)
        status = jitop__cuda_more();
    if (status == JITOP_OK)
        status = jitop__driver_make_current(op->module->drv);
    /* The grid must be a whole cluster. Without a size given: the one the
     * kernel was compiled with (__cluster_dims__, sent as no attribute),
     * else 1 (sent: with no attribute at all the driver answers 0 for a
     * kernel compiled without one). */
    int n = 0, compiled = 0, width = cluster_size;
    if (status == JITOP_OK && cluster_size == 0) {
        status = jitop__cu_check(op->module->drv->api->cuFuncGetAttribute(
                                     &compiled, CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH, b->fn),
                                 "cuFuncGetAttribute(REQUIRED_CLUSTER_WIDTH)", op->name);
        width = compiled > 0 ? compiled : 1;
    }
    if (status == JITOP_OK) {
        CUlaunchAttribute attr;
        memset(&attr, 0, sizeof attr);
        attr.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
        attr.value.clusterDim.x = (unsigned)width;
        attr.value.clusterDim.y = attr.value.clusterDim.z = 1;
        const int send = compiled == 0;
        CUlaunchConfig lc = {
            .gridDimX = (unsigned)width, .gridDimY = 1, .gridDimZ = 1,
            .blockDimX = (unsigned)block_size, .blockDimY = 1, .blockDimZ = 1,
            .sharedMemBytes = (unsigned)shared_bytes,
            .attrs = send ? &attr : NULL, .numAttrs = send ? 1 : 0,
        };
        status = jitop__cu_check(op->module->drv->api->cuOccupancyMaxActiveClusters(&n, b->fn, &lc),
                                 "cuOccupancyMaxActiveClusters", op->name);
    }
    binding_drop(b);
    if (status == JITOP_OK)
        *clusters = n;
    return status;
}
