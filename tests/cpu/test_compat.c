/* The compatibility suite (tests/compat) on the CPU: every case compiled
 * through jitop for sm_90 with the real NVRTC (template instances and C++
 * globals through name expressions, -dc units one by one), and the kernels
 * and globals the case names looked up in the cubins' ELF symbol tables.
 * One cmocka test per case, plus the manifest's own checks and `jitop
 * build --name` for a template from a header. All cases share one cache,
 * so a source several cases use compiles once. The GPU half is
 * tests/gpu/test_compat. */
#include "testutil.h"

#include "build/build.h"
#include "compat.h"

#include <dirent.h>
#include <elf.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static jitop_ctx *g_ctx;
static char *g_cache, *g_gen, *g_kernels;

/* What one compiled unit holds. */
typedef struct unit_syms {
    jitop__strv kernels; /* symbol names of the kernels */
    jitop__strv objects; /* defined global variables */
    jitop__strv names;   /* name expressions, and their lowered names */
    jitop__strv lowered;
} unit_syms;

static void unit_syms_free(unit_syms *u)
{
    jitop__strv_free(&u->kernels);
    jitop__strv_free(&u->objects);
    jitop__strv_free(&u->names);
    jitop__strv_free(&u->lowered);
}

static bool strv_has(const jitop__strv *sv, const char *s)
{
    for (size_t i = 0; i < sv->n; i++)
        if (strcmp(sv->v[i], s) == 0)
            return true;
    return false;
}

static void push(jitop__strv *sv, const char *s)
{
    if (jitop__strv_push(sv, s) != JITOP_OK)
        fail_msg("out of memory");
}

/* Records the first failure of a test into err (ERR_SIZE bytes), so that
 * the test frees what it holds before it fails; returns false. */
#define ERR_SIZE 4096
static bool failf(char *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static bool failf(char *err, const char *fmt, ...)
{
    if (err[0])
        return false;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, ERR_SIZE, fmt, ap);
    va_end(ap);
    if (!err[0])
        snprintf(err, ERR_SIZE, "(failure without a message)");
    return false;
}

/* A NUL-terminated string at offset of a string table, or NULL. */
static const char *elf_str(const unsigned char *img, size_t size, const Elf64_Shdr *tab, size_t off)
{
    if (tab->sh_offset > size || tab->sh_size > size - tab->sh_offset || off >= tab->sh_size)
        return NULL;
    const char *s = (const char *)img + tab->sh_offset + off;
    return memchr(s, '\0', tab->sh_size - off) ? s : NULL;
}

/* st_other of a kernel's symbol in a cubin (the ELF flag NVIDIA's tools
 * print as "<other>: 10"). */
#define STO_CUDA_ENTRY 0x10

/* The kernels and defined objects of a cubin, from its symbol table (every
 * read bounds-checked). */
static bool elf_symbols(const char *what, const unsigned char *img, size_t size, unit_syms *out,
                        char *err)
{
    Elf64_Ehdr eh;
    if (size < sizeof eh)
        return failf(err, "%s: %zu bytes is no ELF file", what, size);
    memcpy(&eh, img, sizeof eh);
    if (memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 || eh.e_ident[EI_CLASS] != ELFCLASS64 ||
        eh.e_shentsize != sizeof(Elf64_Shdr) || eh.e_shoff > size ||
        (size_t)eh.e_shnum * sizeof(Elf64_Shdr) > size - eh.e_shoff || eh.e_shstrndx >= eh.e_shnum)
        return failf(err, "%s: not a 64-bit ELF cubin", what);
    Elf64_Shdr *sh = calloc(eh.e_shnum, sizeof *sh);
    assert_non_null(sh);
    memcpy(sh, img + eh.e_shoff, (size_t)eh.e_shnum * sizeof *sh);
    bool ok = true;
    for (size_t i = 0; ok && i < eh.e_shnum; i++) {
        const char *name = elf_str(img, size, &sh[eh.e_shstrndx], sh[i].sh_name);
        if (!name) {
            ok = failf(err, "%s: section %zu has no name", what, i);
            break;
        }
        if (sh[i].sh_type != SHT_SYMTAB)
            continue;
        if (sh[i].sh_link >= eh.e_shnum || sh[i].sh_offset > size ||
            sh[i].sh_size > size - sh[i].sh_offset) {
            ok = failf(err, "%s: bad symbol table", what);
            break;
        }
        for (size_t off = 0; off + sizeof(Elf64_Sym) <= sh[i].sh_size; off += sizeof(Elf64_Sym)) {
            Elf64_Sym sym;
            memcpy(&sym, img + sh[i].sh_offset + off, sizeof sym);
            const char *sname = elf_str(img, size, &sh[sh[i].sh_link], sym.st_name);
            int type = ELF64_ST_TYPE(sym.st_info);
            if (!sname || sym.st_shndx == SHN_UNDEF)
                continue;
            /* A kernel is a function marked as an entry point
             * (STO_CUDA_ENTRY), unlike a __device__ function that a
             * relocatable unit keeps. */
            if (type == STT_FUNC && (sym.st_other & STO_CUDA_ENTRY))
                push(&out->kernels, sname);
            /* A relocatable (-dc) unit types its externally visible
             * variables STT_CUDA_OBJECT, the first processor-specific type. */
            if (type == STT_OBJECT || type == STT_LOPROC)
                push(&out->objects, sname);
        }
    }
    free(sh);
    return ok;
}

/* A global's name in C++ ("ns::t", "v<float>"), which only a name
 * expression turns into its symbol. */
static bool is_cpp_name(const char *name)
{
    return strchr(name, '<') || strstr(name, "::");
}

static size_t count(const char *const *list)
{
    size_t n = 0;
    while (list && list[n])
        n++;
    return n;
}

/* Compiles source s of case c (with the case's template ops and C++
 * globals as name expressions when it is the first) and reads what the
 * binary holds into out. */
static bool build_unit(const compat_case *c, size_t s, unit_syms *out, char *err)
{
    char needs[160];
    jitop__strv names = {0};
    jitop__entry entry;
    bool found = false, ok = false;
    memset(&entry, 0, sizeof entry);
    for (size_t k = 0; s == 0 && c->ops[k]; k++)
        if (strchr(c->ops[k], '<'))
            push(&names, c->ops[k]);
    for (size_t k = 0; s == 0 && c->globals && c->globals[k]; k++)
        if (is_cpp_name(c->globals[k]) && jitop__strv_pushf(&names, "&%s", c->globals[k]) != JITOP_OK)
            fail_msg("out of memory");
    char *path = compat_source_path(g_kernels, g_gen, c->sources[s]);
    jitop_build_result r;
    int st = jitop_build(g_ctx, path, "sm_90", c->options, count(c->options),
                         (const char *const *)names.v, names.n, &r);
    if (st != JITOP_OK) {
        failf(err, "case %s (needs: %s): jitop_build %s: %s: %s", c->name,
              compat_needs_text(c->needs, needs, sizeof needs), c->sources[s], jitop_strerror(st),
              jitop_errmsg(g_ctx));
        goto out;
    }
    assert_int_equal(jitop__cache_get(g_ctx->cache, r.key, &entry, &found), JITOP_OK);
    if (!found) {
        failf(err, "case %s: the entry %s that jitop_build reported is not in the cache", c->name,
              r.key);
        goto out;
    }
    if (entry.bin.is_ptx) {
        failf(err, "case %s: %s gave PTX for sm_90, not a cubin", c->name, c->sources[s]);
        goto out;
    }
    if (!elf_symbols(path, entry.bin.data, entry.bin.size, out, err))
        goto out;
    for (size_t i = 0; i < entry.bin.names.n && i < entry.bin.lowered.n; i++) {
        push(&out->names, entry.bin.names.v[i]);
        push(&out->lowered, entry.bin.lowered.v[i]);
    }
    ok = true;
out:
    if (found)
        jitop__entry_free(&entry);
    jitop__strv_free(&names);
    free(path);
    return ok;
}

/* The symbol of a name expression compiled into u, or NULL. The entry
 * holds the names as jitop__unit_init keeps them: canonical spelling. */
static const char *lowered_of(const unit_syms *u, const char *expr)
{
    char *canon = jitop__name_canonical(expr);
    const char *found = NULL;
    if (!canon)
        fail_msg("out of memory");
    for (size_t i = 0; i < u->names.n && !found; i++)
        if (strcmp(u->names.v[i], canon) == 0)
            found = u->lowered.v[i];
    free(canon);
    return found;
}

/* Every op and global of c in the units' binaries. */
static bool check_symbols(const compat_case *c, const unit_syms *units, size_t nsrc, char *err)
{
    char needs[160], expr[512];
    size_t total = 0;
    compat_needs_text(c->needs, needs, sizeof needs);
    for (size_t k = 0; c->ops[k]; k++) {
        const char *sym = c->ops[k];
        bool in = false;
        if (strchr(sym, '<') && !(sym = lowered_of(&units[0], c->ops[k])))
            return failf(err, "case %s (needs: %s): no lowered name for %s", c->name, needs,
                         c->ops[k]);
        for (size_t s = 0; s < nsrc && !in; s++)
            in = strv_has(&units[s].kernels, sym);
        if (!in)
            return failf(err, "case %s (needs: %s): kernel %s (%s) is not in the binary", c->name,
                         needs, c->ops[k], sym);
    }
    for (size_t k = 0; c->globals && c->globals[k]; k++) {
        const char *sym = c->globals[k];
        bool in = false;
        snprintf(expr, sizeof expr, "&%s", sym);
        if (is_cpp_name(sym) && !(sym = lowered_of(&units[0], expr)))
            return failf(err, "case %s (needs: %s): no lowered name for %s", c->name, needs, expr);
        for (size_t s = 0; s < nsrc && !in; s++)
            in = strv_has(&units[s].objects, sym);
        if (!in)
            return failf(err, "case %s (needs: %s): global %s (%s) is not defined in the binary",
                         c->name, needs, c->globals[k], sym);
    }
    for (size_t s = 0; s < nsrc; s++)
        total += units[s].kernels.n;
    if (total < c->min_kernels)
        return failf(err, "case %s: %zu kernels in the binary, expected at least %zu", c->name,
                     total, c->min_kernels);
    return true;
}

static void test_case(void **state)
{
    const compat_case *c = *state;
    size_t nsrc = count(c->sources);
    char err[ERR_SIZE] = "";
    unit_syms *units = calloc(nsrc, sizeof *units);
    assert_non_null(units);
    bool ok = true;
    for (size_t s = 0; s < nsrc && ok; s++)
        ok = build_unit(c, s, &units[s], err);
    if (ok)
        check_symbols(c, units, nsrc, err);
    for (size_t s = 0; s < nsrc; s++)
        unit_syms_free(&units[s]);
    free(units);
    if (err[0])
        fail_msg("%s", err);
}

/* The template spellings of one instance compile to one symbol (what
 * NVRTC itself guarantees; jitop_op_get's side is the GPU case's). */
static void test_spellings_one_symbol(void **state)
{
    (void)state;
    for (size_t i = 0; i < compat_ncases; i++) {
        const compat_case *c = &compat_cases[i];
        if (!(c->needs & COMPAT_NEEDS_NAME_SPELLING))
            continue;
        unit_syms u = {0};
        char err[ERR_SIZE] = "";
        if (build_unit(c, 0, &u, err)) {
            const char *first = lowered_of(&u, c->ops[0]);
            for (size_t k = 1; first && c->ops[k]; k++) {
                const char *other = lowered_of(&u, c->ops[k]);
                if (!other || strcmp(other, first) != 0)
                    failf(err, "'%s' is %s, '%s' is %s", c->ops[k], other ? other : "(none)",
                          c->ops[0], first);
            }
            if (!first)
                failf(err, "no lowered name for '%s'", c->ops[0]);
        }
        unit_syms_free(&u);
        if (err[0])
            fail_msg("%s", err);
    }
}

/* The manifest itself: at least 40 hand-written kernels, unique names,
 * every category of issue 20, sources that exist, every kernel file used,
 * and templates or C++ globals only in one-source cases (their name
 * expressions go to sources[0]). */
static void test_manifest(void **state)
{
    (void)state;
    static const char *const categories[] = {
        "extern C", "templates", "half/bf16", "cooperative groups", "cub", "curand", "globals",
        "many params/kernels", "header kernels", "rdc", "shared memory", "warp", "atomics",
        "struct params", "math", "64-bit indexing", "libcu++",
    };
    jitop__strv kernels = {0}, files = {0};
    for (size_t i = 0; i < compat_ncases; i++) {
        const compat_case *c = &compat_cases[i];
        assert_non_null(c->run);
        assert_non_null(c->ops);
        for (size_t j = 0; j < i; j++)
            if (strcmp(compat_cases[j].name, c->name) == 0)
                fail_msg("two cases named %s", c->name);
        bool cpp = false;
        for (size_t k = 0; c->ops[k]; k++) {
            /* A kernel is its name without template arguments: the
             * instances of one template count once. */
            char kernel[256];
            snprintf(kernel, sizeof kernel, "%.*s", (int)strcspn(c->ops[k], "<"), c->ops[k]);
            cpp = cpp || strchr(c->ops[k], '<');
            if (c->sources[0][0] != '@' && !strv_has(&kernels, kernel))
                push(&kernels, kernel);
        }
        for (size_t k = 0; c->globals && c->globals[k]; k++)
            cpp = cpp || is_cpp_name(c->globals[k]);
        if (cpp && count(c->sources) != 1)
            fail_msg("case %s: templates or C++ globals need a case of one source", c->name);
        for (size_t s = 0; c->sources[s]; s++) {
            char *path = compat_source_path(g_kernels, g_gen, c->sources[s]);
            struct stat st;
            if (stat(path, &st) != 0)
                fail_msg("case %s: source %s does not exist", c->name, path);
            free(path);
            if (!strv_has(&files, c->sources[s]))
                push(&files, c->sources[s]);
        }
    }
    if (kernels.n < 40)
        fail_msg("%zu hand-written kernels, at least 40 expected", kernels.n);
    for (size_t k = 0; k < sizeof categories / sizeof categories[0]; k++) {
        bool seen = false;
        for (size_t i = 0; i < compat_ncases && !seen; i++)
            seen = strcmp(compat_cases[i].category, categories[k]) == 0;
        if (!seen)
            fail_msg("no case of category %s", categories[k]);
    }
    DIR *d = opendir(g_kernels);
    assert_non_null(d);
    for (struct dirent *de; (de = readdir(d));) {
        size_t len = strlen(de->d_name);
        if (len > 3 && strcmp(de->d_name + len - 3, ".cu") == 0 && !strv_has(&files, de->d_name))
            fail_msg("kernels/%s is in no case", de->d_name);
    }
    closedir(d);
    print_message("compat: %zu cases, %zu hand-written kernels and %d generated\n", compat_ncases,
                  kernels.n, COMPAT_MANY_KERNELS + 1);
    jitop__strv_free(&kernels);
    jitop__strv_free(&files);
}

/* `jitop build --name` of a template the source only includes. */
static void test_cli_header_template(void **state)
{
    (void)state;
    char *cmd = NULL, *out = NULL;
    if (asprintf(&cmd, "'%s' build --arch sm_90 --cache-dir '%s' --name 'tile_accumulate<float, 4>' "
                       "'%s/hdr_template.cu'",
                 jt_cli(), g_cache, g_kernels) < 0)
        fail_msg("out of memory");
    char err[ERR_SIZE] = "";
    int rc = jt_run(cmd, &out);
    if (rc != 0 || !strstr(out, "tile_accumulate<float, 4>"))
        failf(err, "%s (needs: HEADER_KERNELS) exited %d:\n%s", cmd, rc, out);
    free(cmd);
    free(out);
    if (err[0])
        fail_msg("%s", err);
}

static int setup(void **state)
{
    (void)state; /* left NULL: each test's own state is its case */
    g_cache = jt_tmpdir();
    g_gen = jt_tmpdir();
    g_kernels = compat_kernel_dir();
    compat_generate(g_gen);
    g_ctx = jt_ctx(g_cache, "sm_90");
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    jitop_ctx_destroy(g_ctx);
    free(g_cache);
    free(g_gen);
    free(g_kernels);
    return 0;
}

int main(void)
{
    size_t n = compat_ncases + 3;
    struct CMUnitTest *tests = calloc(n, sizeof *tests);
    if (!tests)
        return 1;
    tests[0] = (struct CMUnitTest)cmocka_unit_test(test_manifest);
    for (size_t i = 0; i < compat_ncases; i++)
        tests[i + 1] = (struct CMUnitTest){compat_cases[i].name, test_case, NULL, NULL,
                                           (void *)&compat_cases[i]};
    tests[compat_ncases + 1] = (struct CMUnitTest)cmocka_unit_test(test_spellings_one_symbol);
    tests[compat_ncases + 2] = (struct CMUnitTest)cmocka_unit_test(test_cli_header_template);
    int rc = _cmocka_run_group_tests("compat_cpu", tests, n, setup, teardown);
    free(tests);
    return rc;
}
