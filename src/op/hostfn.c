/* Host functions: jitop_fn handles, prototypes checked against the record
 * JITOP_EXPORT left in the object, calls through libffi, the list, and the
 * API table handed to host code. The objects themselves are the load
 * room's (load/hostlib.c, where the in-flight protocol is described). */
#include "load/load.h"

#include <ffi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A C type as libffi passes it. */
typedef enum {
    T_VOID, T_I8, T_U8, T_I16, T_U16, T_I32, T_U32, T_I64, T_U64, T_F32, T_F64, T_BOOL, T_PTR,
    T_COUNT
} ctype;

static const char *const code_name[T_COUNT] = {"void", "i8",  "u8",  "i16", "u16", "i32", "u32",
                                               "i64",  "u64", "f32", "f64", "bool", "ptr"};

static ffi_type *ffi_of(ctype t)
{
    switch (t) {
    case T_VOID: return &ffi_type_void;
    case T_I8: return &ffi_type_sint8;
    case T_U8: case T_BOOL: return &ffi_type_uint8;
    case T_I16: return &ffi_type_sint16;
    case T_U16: return &ffi_type_uint16;
    case T_I32: return &ffi_type_sint32;
    case T_U32: return &ffi_type_uint32;
    case T_I64: return &ffi_type_sint64;
    case T_U64: return &ffi_type_uint64;
    case T_F32: return &ffi_type_float;
    case T_F64: return &ffi_type_double;
    default: return &ffi_type_pointer;
    }
}

static size_t size_of(ctype t)
{
    return t == T_VOID ? 0 : ffi_of(t)->size;
}

static bool ident_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

/* An integer of sizeof n bytes, signed or not. */
static ctype int_of(size_t n, bool is_signed)
{
    switch (n) {
    case 1: return is_signed ? T_I8 : T_U8;
    case 2: return is_signed ? T_I16 : T_U16;
    case 4: return is_signed ? T_I32 : T_U32;
    default: return is_signed ? T_I64 : T_U64;
    }
}

/* Words that are part of a type jitop cannot call by value (long double,
 * _Complex, 128-bit and half floats): never read as a parameter's name, or
 * "long double" would pass as a long and "double _Complex" as a double. */
static bool uncallable_word(const char *w, size_t l)
{
    static const char *const words[] = {"_Complex", "_Imaginary", "__complex__", "__int128",
                                        "__int128_t", "__uint128_t", "__float128", "_Float128",
                                        "_Float16", "_Float32", "_Float64", "_Float32x",
                                        "_Float64x", "__fp16", "__bf16", "_BitInt", "_Decimal32",
                                        "_Decimal64", "_Decimal128"};
    for (size_t i = 0; i < sizeof words / sizeof *words; i++)
        if (strlen(words[i]) == l && memcmp(words[i], w, l) == 0)
            return true;
    return false;
}

/* C keywords that name a type: never a parameter's name, so "long double"
 * is not a long named double. */
static bool type_keyword(const char *w, size_t l)
{
    static const char *const words[] = {"void", "float", "double", "bool", "_Bool"};
    for (size_t i = 0; i < sizeof words / sizeof *words; i++)
        if (strlen(words[i]) == l && memcmp(words[i], w, l) == 0)
            return true;
    return false;
}

/* One type as written ("const float *restrict x", "unsigned long", "size_t
 * n", "i32"): its ctype, or -1 (*why says what could not be read). may_name:
 * whether the last word may be a parameter's name (a return type has none,
 * so its last word is always part of the type). */
static int parse_type(const char *text, size_t len, bool may_name, const char **why)
{
    char buf[256];
    if (len >= sizeof buf) {
        *why = "too long";
        return -1;
    }
    memcpy(buf, text, len);
    buf[len] = '\0';
    if (strpbrk(buf, "*[("))
        return T_PTR; /* pointers, arrays and function pointers all pass as a pointer */
    if (strstr(buf, "..."))
        return *why = "variadic functions cannot be called by signature", -1;
    /* The words, qualifiers left out. */
    const char *words[8];
    size_t wl[8], nw = 0;
    for (const char *p = buf; *p;) {
        if (!ident_char(*p)) {
            p++;
            continue;
        }
        const char *s = p;
        while (ident_char(*p))
            p++;
        size_t l = (size_t)(p - s);
        static const char *const skip[] = {"const", "volatile", "restrict", "__restrict",
                                           "__restrict__", "register", "struct", "enum"};
        bool skipped = false;
        for (size_t i = 0; i < sizeof skip / sizeof *skip && !skipped; i++)
            skipped = strlen(skip[i]) == l && memcmp(skip[i], s, l) == 0;
        if (l == 6 && memcmp(s, "struct", 6) == 0)
            return *why = "a struct by value cannot be called by signature", -1;
        if (skipped)
            continue;
        if (uncallable_word(s, l))
            return *why = "a type jitop cannot call (long double, _Complex, 128-bit or half "
                          "floats: pass a pointer)",
                   -1;
        if (nw == 8)
            return *why = "too many words", -1;
        words[nw] = s;
        wl[nw++] = l;
    }
    if (nw == 0)
        return *why = "no type", -1;
    static const struct {
        const char *name;
        int t;
    } named[] = {
        {"void", T_VOID},     {"i8", T_I8},        {"u8", T_U8},        {"i16", T_I16},
        {"u16", T_U16},       {"i32", T_I32},      {"u32", T_U32},      {"i64", T_I64},
        {"u64", T_U64},       {"f32", T_F32},      {"f64", T_F64},      {"ptr", T_PTR},
        {"float", T_F32},     {"double", T_F64},   {"bool", T_BOOL},    {"_Bool", T_BOOL},
        {"int8_t", T_I8},     {"uint8_t", T_U8},   {"int16_t", T_I16},  {"uint16_t", T_U16},
        {"int32_t", T_I32},   {"uint32_t", T_U32}, {"int64_t", T_I64},  {"uint64_t", T_U64},
        {"size_t", -2},       {"ssize_t", -3},     {"ptrdiff_t", -3},   {"intptr_t", -3},
        {"uintptr_t", -2},
    };
    /* The builtin integer words, in any order: signed/unsigned, char,
     * short, int, long (once or twice). */
    bool is_unsigned = false, has_char = false, has_short = false, any_int = false;
    int longs = 0;
    int found = -1;
    size_t used = 0;
    for (size_t i = 0; i < nw; i++) {
        const char *w = words[i];
        size_t l = wl[i];
#define IS(lit) (l == sizeof(lit) - 1 && memcmp(w, lit, l) == 0)
        if (IS("unsigned")) {
            is_unsigned = any_int = true;
        } else if (IS("signed")) {
            any_int = true;
        } else if (IS("char")) {
            has_char = any_int = true;
        } else if (IS("short")) {
            has_short = any_int = true;
        } else if (IS("int")) {
            any_int = true;
        } else if (IS("long")) {
            longs++;
            any_int = true;
        } else if (found == -1 && !any_int) {
            /* found == -1 only: after size_t & co (-2, -3), as after any
             * other type, the next word is the parameter's name, even one
             * spelt like a type code ("uintptr_t ptr", "size_t f32"). */
            for (size_t k = 0; k < sizeof named / sizeof *named; k++)
                if (strlen(named[k].name) == l && memcmp(named[k].name, w, l) == 0)
                    found = named[k].t;
            if (found == -1) {
                /* The parameter's name (the last word, after a type). */
                if (may_name && i == nw - 1 && i > 0)
                    break;
                return *why = "a type jitop cannot call (a typedef or struct by value: spell "
                              "it as a C type or code)",
                       -1;
            }
        } else if (may_name && i == nw - 1 && !type_keyword(w, l)) {
            break; /* the name */
        } else {
            return *why = "a type jitop cannot read", -1;
        }
        used++;
#undef IS
    }
    (void)used;
    if (found != -1 && any_int)
        return *why = "a type jitop cannot read", -1;
    if (found == -2)
        return int_of(sizeof(size_t), false);
    if (found == -3)
        return int_of(sizeof(ptrdiff_t), true);
    if (found >= 0)
        return found;
    if (has_char)
        return int_of(1, !is_unsigned);
    if (has_short)
        return int_of(sizeof(short), !is_unsigned);
    if (longs >= 2)
        return int_of(sizeof(long long), !is_unsigned);
    if (longs == 1)
        return int_of(sizeof(long), !is_unsigned);
    return int_of(sizeof(int), !is_unsigned);
}

/* "ret(params)" to types. */
typedef struct sig {
    ctype ret;
    ctype *params;
    size_t n;
} sig;

static int parse_sig(const char *text, sig *out, char **err)
{
    memset(out, 0, sizeof *out);
    *err = NULL;
    const char *open = strchr(text, '(');
    const char *close = open ? strrchr(text, ')') : NULL;
    const char *why = NULL;
    if (!open || !close || close < open)
        return *err = jitop__sprintf("'%s' is not \"ret(params)\"", text), -1;
    int r = parse_type(text, (size_t)(open - text), false, &why);
    if (r < 0)
        return *err = jitop__sprintf("return type of '%s': %s", text, why), -1;
    out->ret = (ctype)r;
    size_t cap = 1;
    for (const char *p = open + 1; p < close; p++)
        cap += *p == ',';
    out->params = calloc(cap, sizeof *out->params);
    if (!out->params)
        return *err = NULL, -2;
    const char *p = open + 1;
    while (p <= close) {
        int depth = 0;
        const char *s = p;
        while (p < close && (depth > 0 || *p != ',')) {
            depth += (*p == '(' || *p == '[') - (*p == ')' || *p == ']');
            p++;
        }
        size_t l = (size_t)(p - s);
        bool blank = true;
        for (size_t i = 0; i < l; i++)
            blank = blank && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n');
        if (!(blank && out->n == 0 && p == close)) {
            r = parse_type(s, l, true, &why);
            if (r < 0) {
                *err = jitop__sprintf("parameter %zu of '%s': %s", out->n + 1, text, why);
                free(out->params);
                out->params = NULL;
                return -1;
            }
            out->params[out->n++] = (ctype)r;
        }
        p++;
    }
    /* "(void)" is no parameter. */
    if (out->n == 1 && out->params[0] == T_VOID)
        out->n = 0;
    for (size_t i = 0; i < out->n; i++) {
        if (out->params[i] == T_VOID) {
            *err = jitop__sprintf("parameter %zu of '%s' is void", i + 1, text);
            free(out->params);
            out->params = NULL;
            return -1;
        }
    }
    return 0;
}

static char *sig_codes(const sig *s)
{
    jitop__strv parts = {0};
    for (size_t i = 0; i < s->n; i++)
        if (jitop__strv_push(&parts, code_name[s->params[i]]) != JITOP_OK) {
            jitop__strv_free(&parts);
            return NULL;
        }
    char *joined = parts.n ? jitop__strv_join(&parts, ", ") : jitop__strdup("");
    char *out = joined ? jitop__sprintf("%s(%s)", code_name[s->ret], joined) : NULL;
    free(joined);
    jitop__strv_free(&parts);
    return out;
}

/* ---------------------------------------------------------- handles */

/* What a handle calls in one object: immutable once published. */
typedef struct fnrec {
    jitop__hostlib *lib;
    void *addr;        /* NULL: stale (why says so) */
    char *why;
    struct fnrec *older;
} fnrec;

struct jitop_fn {
    jitop_module *m;
    char *name;
    char *asked;
    sig sig;
    ffi_cif cif;
    ffi_type **atypes;
    _Atomic(fnrec *) rec;
    struct jitop_fn *next;
};

/* A handle and every record it holds. Accepts NULL. */
static void fn_free(jitop_fn *f)
{
    if (!f)
        return;
    for (fnrec *r = atomic_load(&f->rec), *o; r; r = o) {
        o = r->older;
        free(r->why);
        free(r);
    }
    free(f->name);
    free(f->asked);
    free(f->sig.params);
    free(f->atypes);
    free(f);
}

static void fns_free(jitop_module *m)
{
    for (jitop_fn *f = m->host->fns, *next; f; f = next) {
        next = f->next;
        fn_free(f);
    }
    m->host->fns = NULL;
}

static size_t find_export(const jitop__hostlib *lib, const char *name)
{
    for (size_t i = 0; i < lib->n; i++)
        if (strcmp(lib->names[i], name) == 0)
            return i;
    return SIZE_MAX;
}

static char *list_exports(const jitop__hostlib *lib)
{
    jitop__strv parts = {0};
    for (size_t i = 0; i < lib->n; i++)
        if (jitop__strv_pushf(&parts, "  %s: %s", lib->names[i], lib->sigs[i]) != JITOP_OK)
            break;
    char *s = parts.n ? jitop__strv_join(&parts, "\n") : jitop__strdup("  (none)");
    jitop__strv_free(&parts);
    return s;
}

/* Does the export match the handle's signature? NULL when it does, else
 * why not (malloc'd). */
static char *mismatch(const jitop_fn *f, const char *recorded)
{
    sig rs;
    char *err = NULL;
    int rc = parse_sig(recorded, &rs, &err);
    if (rc == -2)
        return jitop__strdup("out of memory");
    if (rc < 0) {
        char *s = jitop__sprintf("its recorded prototype cannot be called by signature: %s",
                                 err ? err : "");
        free(err);
        return s;
    }
    char *why = NULL;
    if (rs.n != f->sig.n)
        why = jitop__sprintf("it takes %zu parameters, not %zu", rs.n, f->sig.n);
    else if (rs.ret != f->sig.ret)
        why = jitop__sprintf("it returns %s, not %s", code_name[rs.ret], code_name[f->sig.ret]);
    for (size_t i = 0; !why && i < rs.n; i++)
        if (rs.params[i] != f->sig.params[i])
            why = jitop__sprintf("parameter %zu is %s, not %s", i + 1, code_name[rs.params[i]],
                                 code_name[f->sig.params[i]]);
    if (why) {
        char *codes = sig_codes(&rs);
        char *full = jitop__sprintf("it is %s (%s): %s", recorded, codes ? codes : "?", why);
        free(codes);
        free(why);
        why = full;
    }
    free(rs.params);
    return why;
}

/* The handle's record for lib (m->lock held). */
static int resolve(jitop_fn *f, jitop__hostlib *lib, fnrec **out)
{
    fnrec *cur = atomic_load_explicit(&f->rec, memory_order_acquire);
    if (cur && cur->lib == lib) {
        *out = cur;
        return JITOP_OK;
    }
    fnrec *r = calloc(1, sizeof *r);
    if (!r)
        return jitop__fail(JITOP_ENOMEM, "out of memory");
    r->lib = lib;
    size_t i = find_export(lib, f->name);
    if (i == SIZE_MAX)
        r->why = jitop__sprintf("the module's host object %s no longer exports %s", lib->key,
                                f->name);
    else if ((r->why = mismatch(f, lib->sigs[i])) == NULL)
        r->addr = lib->addrs[i];
    r->older = cur;
    atomic_store_explicit(&f->rec, r, memory_order_release);
    *out = r;
    return JITOP_OK;
}

/* The API table host code gets (jitop_host.h), filled once per module. */
static void api_fill(jitop_module *m)
{
    jitop_host_api *a = &m->host->api;
    a->size = sizeof *a;
    a->version = JITOP_HOST_API_VERSION;
    a->module = m;
    a->ctx = m->ctx;
    a->op_get = jitop_op_get;
    a->launch = jitop_launch;
    a->launch_ex = jitop_launch_ex;
    a->occupancy = jitop_occupancy;
    a->op_info_get = jitop_op_info_get;
    a->ctx_cuda = jitop_ctx_cuda;
    a->global_get = jitop_global_get;
    a->global_write = jitop_global_write;
    a->errmsg = jitop_errmsg;
    a->strerror = jitop_strerror;
    m->host->api_ready = true;
}

int jitop_fn_get(jitop_module *m, const char *name, const char *signature, jitop_fn **out)
{
    if (!m || !name || !signature || !out)
        return jitop__fail(JITOP_EINVAL, "jitop_fn_get: m, name, signature and out must be set");
    *out = NULL;
    if (!m->host)
        return jitop__fail(JITOP_ENOTFOUND,
                           "module %s has no host code (give it a .c or .cpp source) and no "
                           "host function %s",
                           m->name, name);
    int status = JITOP_OK;
    jitop_fn *f = NULL;
    pthread_mutex_lock(&m->lock);
    jitop__host *h = m->host;
    jitop__hostlib *lib = atomic_load(&h->cur);
    if (!h->api_ready) {
        api_fill(m);
        h->fns_free = fns_free;
    }
    status = jitop__hostlib_init(m, lib);
    if (status != JITOP_OK)
        goto out;
    for (jitop_fn *g = h->fns; g; g = g->next) {
        if (strcmp(g->name, name) == 0 && strcmp(g->asked, signature) == 0) {
            *out = g;
            goto out;
        }
    }
    size_t i = find_export(lib, name);
    if (i == SIZE_MAX) {
        char *list = list_exports(lib);
        status = jitop__fail(JITOP_ENOTFOUND,
                             "module %s: no host function %s; its host object exports:\n%s",
                             m->name, name, list ? list : "");
        free(list);
        goto out;
    }
    if (!(f = calloc(1, sizeof *f)) || !(f->name = jitop__strdup(name)) ||
        !(f->asked = jitop__strdup(signature))) {
        status = jitop__fail(JITOP_ENOMEM, "out of memory");
        goto out;
    }
    f->m = m;
    atomic_init(&f->rec, NULL);
    char *err = NULL;
    int rc = parse_sig(signature, &f->sig, &err);
    if (rc != 0) {
        status = rc == -2 ? jitop__fail(JITOP_ENOMEM, "out of memory")
                          : jitop__fail(JITOP_EINVAL, "jitop_fn_get %s: signature %s", name,
                                        err ? err : "");
        free(err);
        goto out;
    }
    char *why = mismatch(f, lib->sigs[i]);
    if (why) {
        char *codes = sig_codes(&f->sig);
        status = jitop__fail(JITOP_EARGS,
                             "module %s: host function %s was asked for as %s (%s), but %s",
                             m->name, name, signature, codes ? codes : "?", why);
        free(codes);
        free(why);
        goto out;
    }
    if (!(f->atypes = calloc(f->sig.n ? f->sig.n : 1, sizeof *f->atypes))) {
        status = jitop__fail(JITOP_ENOMEM, "out of memory");
        goto out;
    }
    for (size_t k = 0; k < f->sig.n; k++)
        f->atypes[k] = ffi_of(f->sig.params[k]);
    ffi_status fs = ffi_prep_cif(&f->cif, FFI_DEFAULT_ABI, (unsigned)f->sig.n, ffi_of(f->sig.ret),
                                 f->atypes);
    if (fs != FFI_OK) {
        status = jitop__fail(JITOP_EINVAL, "module %s: ffi_prep_cif for %s failed (%d)", m->name,
                             name, (int)fs);
        goto out;
    }
    fnrec *r = NULL;
    if ((status = resolve(f, lib, &r)) != JITOP_OK)
        goto out;
    f->next = h->fns;
    h->fns = f;
    *out = f;
    f = NULL;
out:
    pthread_mutex_unlock(&m->lock);
    fn_free(f);
    return status;
}

/* Takes hold of the module's current object (its in-flight count) and the
 * handle's record for it. */
static int enter(jitop_fn *f, jitop__hostlib **held, fnrec **rec)
{
    jitop__host *h = f->m->host;
    jitop__hostlib *lib;
    for (;;) {
        lib = atomic_load_explicit(&h->cur, memory_order_seq_cst);
        atomic_fetch_add_explicit(&lib->inflight, 1, memory_order_seq_cst);
        if (atomic_load_explicit(&h->cur, memory_order_seq_cst) == lib)
            break;
        atomic_fetch_sub_explicit(&lib->inflight, 1, memory_order_seq_cst);
    }
    fnrec *r = atomic_load_explicit(&f->rec, memory_order_acquire);
    int status = JITOP_OK;
    if (!r || r->lib != lib) {
        pthread_mutex_lock(&f->m->lock);
        status = resolve(f, lib, &r);
        pthread_mutex_unlock(&f->m->lock);
    }
    if (status == JITOP_OK && !r->addr)
        status = jitop__fail(JITOP_ESTALE, "module %s: host function %s: %s", f->m->name,
                             f->name, r->why ? r->why : "stale");
    if (status != JITOP_OK) {
        atomic_fetch_sub_explicit(&lib->inflight, 1, memory_order_seq_cst);
        return status;
    }
    *held = lib;
    *rec = r;
    return JITOP_OK;
}

int jitop_call(jitop_fn *fn, void **args, void *ret)
{
    if (!fn)
        return jitop__fail(JITOP_EINVAL, "jitop_call: fn is NULL");
    if (fn->sig.n > 0 && !args)
        return jitop__fail(JITOP_EINVAL, "jitop_call %s: args is NULL for %zu parameters",
                           fn->name, fn->sig.n);
    jitop__hostlib *lib;
    fnrec *r;
    int status = enter(fn, &lib, &r);
    if (status != JITOP_OK)
        return status;
    /* libffi writes a whole register's worth for narrow integers: the
     * result lands here, and ret gets exactly its type's size. */
    union {
        ffi_arg u;
        ffi_sarg s;
        float f;
        double d;
        void *p;
        uint64_t u64;
    } rv;
    memset(&rv, 0, sizeof rv);
    ffi_call(&fn->cif, FFI_FN(r->addr), &rv, args);
    atomic_fetch_sub_explicit(&lib->inflight, 1, memory_order_seq_cst);
    if (ret) {
        switch (fn->sig.ret) {
        case T_VOID: break;
        case T_I8: *(int8_t *)ret = (int8_t)rv.s; break;
        case T_U8: case T_BOOL: *(uint8_t *)ret = (uint8_t)rv.u; break;
        case T_I16: *(int16_t *)ret = (int16_t)rv.s; break;
        case T_U16: *(uint16_t *)ret = (uint16_t)rv.u; break;
        case T_I32: *(int32_t *)ret = (int32_t)rv.s; break;
        case T_U32: *(uint32_t *)ret = (uint32_t)rv.u; break;
        default: memcpy(ret, &rv, size_of(fn->sig.ret)); break;
        }
    }
    return JITOP_OK;
}

int jitop_fn_addr(jitop_fn *fn, void **addr)
{
    if (!fn || !addr)
        return jitop__fail(JITOP_EINVAL, "jitop_fn_addr: fn and addr must be set");
    jitop__hostlib *lib;
    fnrec *r;
    int status = enter(fn, &lib, &r);
    if (status != JITOP_OK)
        return status;
    *addr = r->addr;
    atomic_fetch_sub_explicit(&lib->inflight, 1, memory_order_seq_cst);
    return JITOP_OK;
}

int jitop_module_fns(jitop_module *m, jitop_fn_info *infos, size_t cap, size_t *count)
{
    if (!m || !count || (cap && !infos))
        return jitop__fail(JITOP_EINVAL, "jitop_module_fns: m, count (and infos) must be set");
    *count = 0;
    if (!m->host)
        return JITOP_OK;
    pthread_mutex_lock(&m->lock);
    const jitop__hostlib *lib = atomic_load(&m->host->cur);
    for (size_t i = 0; i < lib->n && i < cap; i++)
        infos[i] = (jitop_fn_info){lib->names[i], lib->sigs[i]};
    *count = lib->n;
    pthread_mutex_unlock(&m->lock);
    return JITOP_OK;
}
