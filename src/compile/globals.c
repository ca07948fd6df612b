/* The variables a binary defines (__device__, __constant__), by the symbols
 * the compiler gave them: what module globals are looked up by. A cubin
 * lists them in its ELF symbol table; PTX declares them at file scope. */
#include "compile/compile.h"

#include <ctype.h>
#include <elf.h>
#include <string.h>

/* The CUDA object symbol type of relocatable cubins (STT_LOPROC). Linked
 * and whole-program cubins use STT_OBJECT. */
#define JITOP__STT_CUDA_OBJECT 13

static bool elf_section(const unsigned char *data, size_t size, const Elf64_Ehdr *eh, size_t i,
                        Elf64_Shdr *sh)
{
    if (i >= eh->e_shnum)
        return false;
    memcpy(sh, data + eh->e_shoff + i * sizeof *sh, sizeof *sh);
    return sh->sh_type == SHT_NOBITS ||
           (sh->sh_offset <= size && sh->sh_size <= size - sh->sh_offset);
}

/* Every field read is bounds-checked, as in cubin.c: a damaged binary
 * gives fewer names, never a read past its end. */
static int cubin_globals(const unsigned char *data, size_t size, jitop__strv *names)
{
    Elf64_Ehdr eh;
    if (size < sizeof eh)
        return JITOP_OK;
    memcpy(&eh, data, sizeof eh);
    if (memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 || eh.e_ident[EI_CLASS] != ELFCLASS64 ||
        eh.e_shentsize != sizeof(Elf64_Shdr) || eh.e_shoff > size ||
        (size - eh.e_shoff) / sizeof(Elf64_Shdr) < eh.e_shnum)
        return JITOP_OK;
    for (size_t i = 0; i < eh.e_shnum; i++) {
        Elf64_Shdr symtab, strtab;
        if (!elf_section(data, size, &eh, i, &symtab) || symtab.sh_type != SHT_SYMTAB)
            continue;
        if (!elf_section(data, size, &eh, symtab.sh_link, &strtab) ||
            strtab.sh_type == SHT_NOBITS)
            return JITOP_OK;
        const char *str = (const char *)data + strtab.sh_offset;
        for (size_t j = 0; j < symtab.sh_size / sizeof(Elf64_Sym); j++) {
            Elf64_Sym sym;
            memcpy(&sym, data + symtab.sh_offset + j * sizeof sym, sizeof sym);
            unsigned type = ELF64_ST_TYPE(sym.st_info);
            if ((type != STT_OBJECT && type != JITOP__STT_CUDA_OBJECT) ||
                sym.st_shndx == SHN_UNDEF || sym.st_shndx >= SHN_LORESERVE ||
                sym.st_name >= strtab.sh_size)
                continue;
            const char *name = str + sym.st_name;
            size_t room = strtab.sh_size - sym.st_name;
            /* '$' names are the compiler's own (string literals). */
            if (strnlen(name, room) == room || !*name || *name == '$')
                continue;
            if (jitop__strv_push(names, name) != JITOP_OK)
                return jitop__fail(JITOP_ENOMEM, "out of memory");
        }
        break; /* one symbol table */
    }
    return JITOP_OK;
}

/* A file-scope PTX declaration of a variable in .global or .const space,
 * not an .extern one: "[.visible|.weak] .global|.const [.align N] [.v2] .type
 * NAME[...] [= ...];". The name is the first token that is neither a
 * directive nor the number after .align. */
static int ptx_line_global(const char *line, size_t len, jitop__strv *names)
{
    bool space = false, after_align = false;
    size_t i = 0;
    while (i < len) {
        while (i < len && isspace((unsigned char)line[i]))
            i++;
        size_t start = i;
        while (i < len && !isspace((unsigned char)line[i]) && line[i] != '[' && line[i] != ';' &&
               line[i] != '=')
            i++;
        size_t n = i - start;
        if (n == 0)
            return JITOP_OK;
        const char *tok = line + start;
        if (*tok == '.') {
            if ((n == 7 && memcmp(tok, ".extern", 7) == 0) ||
                (n == 6 && memcmp(tok, ".entry", 6) == 0) ||
                (n == 5 && memcmp(tok, ".func", 5) == 0))
                return JITOP_OK;
            if ((n == 7 && memcmp(tok, ".global", 7) == 0) ||
                (n == 6 && memcmp(tok, ".const", 6) == 0))
                space = true;
            after_align = n == 6 && memcmp(tok, ".align", 6) == 0;
            continue;
        }
        if (after_align) {
            after_align = false;
            continue;
        }
        if (!space || *tok == '$')
            return JITOP_OK;
        return jitop__strv_pushf(names, "%.*s", (int)n, tok) == JITOP_OK
                   ? JITOP_OK
                   : jitop__fail(JITOP_ENOMEM, "out of memory");
    }
    return JITOP_OK;
}

/* Declarations at brace depth 0 only: inside a function, .global and
 * .const appear in instructions (ld.global...) and local declarations. */
static int ptx_globals(const char *text, size_t size, jitop__strv *names)
{
    int depth = 0, status = JITOP_OK;
    const char *end = text + size;
    for (const char *line = text; status == JITOP_OK && line < end;) {
        const char *nl = memchr(line, '\n', (size_t)(end - line));
        size_t len = nl ? (size_t)(nl - line) : (size_t)(end - line);
        const char *p = line;
        while (p < line + len && isspace((unsigned char)*p))
            p++;
        if (depth == 0 && *p == '.')
            status = ptx_line_global(line, len, names);
        for (size_t i = 0; i < len; i++) {
            if (line[i] == '/' && i + 1 < len && line[i + 1] == '/')
                break;
            depth += line[i] == '{' ? 1 : line[i] == '}' ? -1 : 0;
        }
        line = nl ? nl + 1 : end;
    }
    return status;
}

int jitop__binary_globals(const jitop__binary *bin, jitop__strv *names)
{
    if (!bin || !bin->data)
        return JITOP_OK;
    return bin->is_ptx ? ptx_globals((const char *)bin->data, bin->size, names)
                       : cubin_globals(bin->data, bin->size, names);
}
