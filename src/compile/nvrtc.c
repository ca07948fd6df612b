/* NVRTC: option normalization, opening NVRTC on first use, compiling a unit,
 * its log, name expressions. The only file that calls NVRTC. */
#include "compile/compile.h"

#include <cuda.h>
#include <nvrtc.h>

#include <ctype.h>
#include <dlfcn.h>
#include <limits.h>
#include <sys/stat.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* How an option takes its value. */
enum opt_kind {
    OPT_FLAG,   /* no value: "--use_fast_math" */
    OPT_JOINED, /* value glued to the canonical spelling: "-DNAME=1", "-I/abs" */
    OPT_EQUALS  /* "--maxrregcount=32", "-std=c++17" */
};

/* Spellings NVRTC accepts for the options whose spelling must not change the
 * key: "-DX", "-D X" and "--define-macro=X" all give "-DX". */
struct opt_spec {
    const char *canonical;
    enum opt_kind kind;
    const char *spellings[4]; /* NULL-terminated */
};

static const struct opt_spec opt_specs[] = {
    {"-D", OPT_JOINED, {"-D", "--define-macro", NULL}},
    {"-U", OPT_JOINED, {"-U", "--undefine-macro", NULL}},
    {"-I", OPT_JOINED, {"-I", "--include-path", NULL}},
    {"-std=", OPT_EQUALS, {"-std", "--std", NULL}},
    {"--maxrregcount=", OPT_EQUALS, {"-maxrregcount", "--maxrregcount", NULL}},
    {"--use_fast_math", OPT_FLAG, {"--use_fast_math", "-use_fast_math", "-use-fast-math", NULL}},
    {"--generate-line-info", OPT_FLAG, {"-lineinfo", "--generate-line-info", NULL}},
    {"--device-debug", OPT_FLAG, {"-G", "--device-debug", NULL}},
};

bool jitop__arch_valid(const char *arch)
{
    const char *p;
    if (strncmp(arch, "sm_", 3) == 0)
        p = arch + 3;
    else if (strncmp(arch, "compute_", 8) == 0)
        p = arch + 8;
    else
        return false;
    size_t digits = 0;
    while (isdigit((unsigned char)p[digits]))
        digits++;
    if (digits < 2 || digits > 3)
        return false;
    p += digits;
    if (*p == 'a' || *p == 'f')
        p++;
    return *p == '\0';
}

static bool is_arch_option(const char *opt)
{
    return strncmp(opt, "-arch", 5) == 0 || strncmp(opt, "--gpu-architecture", 18) == 0;
}

/* opt is name, or name=value. */
static bool is_option(const char *opt, const char *name)
{
    size_t n = strlen(name);
    return strncmp(opt, name, n) == 0 && (opt[n] == '\0' || opt[n] == '=');
}

/* "-include FILE" / "--pre-include=FILE": NVRTC would read a header that the
 * include scanner never sees, so it would be neither in the key nor
 * watched, and an edit to it would go unnoticed. */
static bool is_pre_include_option(const char *opt)
{
    return is_option(opt, "-include") || is_option(opt, "--pre-include");
}

/* Matches opt against one spelling. Returns the value (pointing into opt, or
 * "" when it is the next option) or NULL when the spelling does not match.
 * Single-dash spellings of one letter take a glued value ("-DX"); every
 * spelling takes "=value" and a separate next option. */
static const char *match_spelling(const char *opt, const char *sp, bool *value_is_next)
{
    size_t n = strlen(sp);
    *value_is_next = false;
    if (strncmp(opt, sp, n) != 0)
        return NULL;
    if (opt[n] == '\0') {
        *value_is_next = true;
        return "";
    }
    bool one_letter = sp[0] == '-' && sp[1] != '-' && n == 2;
    if (one_letter)
        return opt + n;
    if (opt[n] == '=')
        return opt + n + 1;
    return NULL;
}

static bool positive_int(const char *s)
{
    if (!*s)
        return false;
    for (const char *p = s; *p; p++)
        if (!isdigit((unsigned char)*p))
            return false;
    return atol(s) > 0;
}

/* The options that make a unit relocatable (-rdc) or LTO-IR (-dlto), in
 * every spelling NVRTC and nvcc users write: they set u's flags, and
 * unit_init appends their canonical spelling once, after the others, so
 * that "-dc", "-rdc=true -dlto" and "-dlto -rdc" give one key. The last of
 * -rdc=true / -rdc=false wins, as in nvcc; -dlto implies -rdc. Returns
 * false when opt is none of them. */
static bool link_option(jitop__unit *u, const char *opt)
{
    static const char *const on[] = {"-rdc", "-rdc=true", "--relocatable-device-code",
                                     "--relocatable-device-code=true", "-dc", "--device-c"};
    static const char *const off[] = {"-rdc=false", "--relocatable-device-code=false"};
    for (size_t i = 0; i < sizeof on / sizeof on[0]; i++)
        if (strcmp(opt, on[i]) == 0)
            return u->relocatable = true;
    for (size_t i = 0; i < sizeof off / sizeof off[0]; i++)
        if (strcmp(opt, off[i]) == 0) {
            u->relocatable = false;
            return true;
        }
    if (strcmp(opt, "-dlto") == 0 || strcmp(opt, "--dlink-time-opt") == 0)
        return u->lto = true;
    return false;
}

/* Normalizes options[*i] (and the value after it, if it takes one). */
static int normalize_option(jitop__unit *u, const char *const *options, size_t noptions, size_t *i)
{
    const char *opt = options[*i];
    if (!opt || !*opt)
        return jitop__fail(JITOP_EINVAL, "option %zu is empty", *i);
    if (is_arch_option(opt))
        return jitop__fail(JITOP_EINVAL,
                           "option %s: the architecture is chosen by the arch argument "
                           "(or JITOP_ARCH / --arch), not by an NVRTC option",
                           opt);
    if (is_pre_include_option(opt))
        return jitop__fail(JITOP_EINVAL,
                           "option %s: a pre-included header would be neither in the cache key "
                           "nor watched; #include it in the source instead",
                           opt);
    if (link_option(u, opt))
        return JITOP_OK;
    for (size_t s = 0; s < sizeof opt_specs / sizeof opt_specs[0]; s++) {
        const struct opt_spec *spec = &opt_specs[s];
        for (const char *const *sp = spec->spellings; *sp; sp++) {
            if (spec->kind == OPT_FLAG) {
                if (strcmp(opt, *sp) == 0)
                    return jitop__strv_push(&u->options, spec->canonical) == JITOP_OK
                               ? JITOP_OK
                               : jitop__fail(JITOP_ENOMEM, "out of memory");
                continue;
            }
            bool next;
            const char *value = match_spelling(opt, *sp, &next);
            if (!value)
                continue;
            if (next) {
                if (*i + 1 >= noptions || !options[*i + 1])
                    return jitop__fail(JITOP_EINVAL, "option %s needs a value", opt);
                value = options[++*i];
            }
            if (!*value)
                return jitop__fail(JITOP_EINVAL, "option %s needs a value", opt);
            if (strcmp(spec->canonical, "--maxrregcount=") == 0 && !positive_int(value))
                return jitop__fail(JITOP_EINVAL, "option %s: '%s' is not a positive register count",
                                   opt, value);
            if (strcmp(spec->canonical, "-I") == 0) {
                /* Absolute, so that the key and NVRTC do not depend on the
                 * current directory. */
                char *abs = jitop__abspath(value);
                if (!abs)
                    return jitop__fail_prefix(jitop__fail_abspath(value), "option %s", opt);
                int rc = jitop__strv_pushf(&u->options, "-I%s", abs);
                if (rc == JITOP_OK)
                    rc = jitop__strv_push(&u->include_dirs, abs);
                free(abs);
                return rc;
            }
            return jitop__strv_pushf(&u->options, "%s%s", spec->canonical, value) == JITOP_OK
                       ? JITOP_OK
                       : jitop__fail(JITOP_ENOMEM, "out of memory");
        }
    }
    /* Any other NVRTC flag goes through as given; NVRTC itself rejects an
     * unknown one (JITOP_EINVAL with its message at compile time). */
    return jitop__strv_push(&u->options, opt) == JITOP_OK ? JITOP_OK
                                                           : jitop__fail(JITOP_ENOMEM, "out of memory");
}

static bool name_word_char(char c)
{
    return isalnum((unsigned char)c) || c == '_' || c == '.' || c == '$';
}

/* Operator characters that never join a neighbour into another token. */
static bool name_separator(char c)
{
    return c && strchr(",;()[]{}", c) != NULL;
}

char *jitop__name_canonical(const char *expr)
{
    size_t n = strlen(expr), o = 0;
    char *out = malloc(2 * n + 1); /* a space may follow every comma */
    if (!out)
        return NULL;
    for (size_t i = 0; i < n;) {
        char c = expr[i];
        if (isspace((unsigned char)c)) {
            while (i < n && isspace((unsigned char)expr[i]))
                i++;
            char a = o ? out[o - 1] : '\0', b = i < n ? expr[i] : '\0';
            if (a == ' ')
                continue; /* the space a comma put there */
            bool words = name_word_char(a) && name_word_char(b);
            bool ops = a && b && !name_word_char(a) && !name_word_char(b) &&
                       !name_separator(a) && !name_separator(b);
            if (words || ops)
                out[o++] = ' ';
            continue;
        }
        out[o++] = expr[i++];
        if (c == ',') {
            out[o++] = ' '; /* one space after each comma: "f<float, 4>", as people write it */
            continue;
        }
        if (c == '"' || c == '\'') {
            /* A literal as it is, escapes included. */
            while (i < n && expr[i] != c) {
                if (expr[i] == '\\' && i + 1 < n)
                    out[o++] = expr[i++];
                out[o++] = expr[i++];
            }
            if (i < n)
                out[o++] = expr[i++];
        }
    }
    out[o] = '\0';
    return out;
}

/* The toolkit's include folders after the user's (a header of the user's
 * with a toolkit header's name wins, as with nvcc), each one not already
 * given as an -I. */
static int add_toolkit_dirs(jitop__unit *u)
{
    jitop__strv dirs = {0};
    int status = jitop__toolkit_include_dirs(&dirs);
    for (size_t i = 0; status == JITOP_OK && i < dirs.n; i++) {
        bool given = false;
        for (size_t j = 0; j < u->include_dirs.n && !given; j++)
            given = strcmp(u->include_dirs.v[j], dirs.v[i]) == 0;
        if (given)
            continue;
        if (jitop__strv_push(&u->include_dirs, dirs.v[i]) != JITOP_OK)
            status = jitop__fail(JITOP_ENOMEM, "out of memory");
        else
            u->toolkit_dirs++;
    }
    jitop__strv_free(&dirs);
    return status;
}

int jitop__unit_init(jitop__unit *u, const char *path, const char *inline_text,
                     const char *const *options, size_t noptions,
                     const char *const *names, size_t nnames, const char *arch)
{
    int status = JITOP_OK;
    memset(u, 0, sizeof *u);
    if ((path == NULL) == (inline_text == NULL)) {
        status = jitop__fail(JITOP_EINVAL, "a unit needs either a source path or inline text");
        goto out;
    }
    if (!arch || !jitop__arch_valid(arch) || strlen(arch) >= sizeof u->arch) {
        status = jitop__fail(JITOP_EINVAL,
                             "arch '%s' is not valid: expected sm_NN or compute_NN (for example "
                             "sm_90, sm_90a, compute_90)",
                             arch ? arch : "(null)");
        goto out;
    }
    if ((noptions && !options) || (nnames && !names)) {
        status = jitop__fail(JITOP_EINVAL, "options or names: NULL array with a non-zero count");
        goto out;
    }
    snprintf(u->arch, sizeof u->arch, "%s", arch);
    if (path) {
        if (!*path) {
            status = jitop__fail(JITOP_EINVAL, "source path is empty");
            goto out;
        }
        u->source_path = jitop__abspath(path);
        if (!u->source_path) {
            status = jitop__fail_abspath(path);
            goto out;
        }
        /* NVRTC prints this name in "file(line): error"; the real path makes
         * the message clickable and unambiguous. */
        u->source_name = jitop__strdup(u->source_path);
        char *dir = jitop__dirname(u->source_path);
        if (!u->source_name || !dir || jitop__strv_push(&u->include_dirs, dir) != JITOP_OK) {
            free(dir);
            status = jitop__fail(JITOP_ENOMEM, "out of memory");
            goto out;
        }
        free(dir);
    } else {
        u->inline_text = jitop__strdup(inline_text);
        u->source_name = jitop__strdup("jitop_inline.cu");
        if (!u->inline_text || !u->source_name) {
            status = jitop__fail(JITOP_ENOMEM, "out of memory");
            goto out;
        }
    }
    for (size_t i = 0; i < noptions; i++) {
        status = normalize_option(u, options, noptions, &i);
        if (status != JITOP_OK)
            goto out;
    }
    u->relocatable = u->relocatable || u->lto;
    if ((u->relocatable && jitop__strv_push(&u->options, "-rdc=true") != JITOP_OK) ||
        (u->lto && jitop__strv_push(&u->options, "-dlto") != JITOP_OK)) {
        status = jitop__fail(JITOP_ENOMEM, "out of memory");
        goto out;
    }
    /* Everything before here came from the caller (-I); toolkit folders
     * follow, and the scanner treats them as the toolkit's own. */
    u->user_include_dirs = u->include_dirs.n;
    status = add_toolkit_dirs(u);
    if (status != JITOP_OK)
        goto out;
    for (size_t i = 0; i < nnames; i++) {
        if (!names[i] || !*names[i]) {
            status = jitop__fail(JITOP_EINVAL, "name expression %zu is empty", i);
            goto out;
        }
        char *canon = jitop__name_canonical(names[i]);
        if (!canon || jitop__strv_push(&u->names, canon) != JITOP_OK) {
            free(canon);
            status = jitop__fail(JITOP_ENOMEM, "out of memory");
            goto out;
        }
        free(canon);
        if (!u->names.v[u->names.n - 1][0]) {
            status = jitop__fail(JITOP_EINVAL, "name expression %zu is empty", i);
            goto out;
        }
    }
out:
    if (status != JITOP_OK)
        jitop__unit_free(u);
    return status;
}

void jitop__unit_free(jitop__unit *u)
{
    if (!u)
        return;
    free(u->source_path);
    free(u->source_name);
    free(u->inline_text);
    jitop__strv_free(&u->options);
    jitop__strv_free(&u->include_dirs);
    jitop__strv_free(&u->names);
    memset(u, 0, sizeof *u);
}

/* NVRTC is opened with dlopen on the first real compile, never linked.
 * libnvrtc.so is 109 MB with ~200k relocations: linked, it costs every
 * process 8-10 ms at start, while a warm cache hit or a no-op `jitop build`
 * never compiles. Everything jitop calls goes through this table, whose
 * types come from <nvrtc.h>. */
#define JITOP__NVRTC_FUNCS(X)                                                                     \
    X(nvrtcVersion)                                                                               \
    X(nvrtcGetNumSupportedArchs)                                                                  \
    X(nvrtcGetSupportedArchs)                                                                     \
    X(nvrtcGetErrorString)                                                                        \
    X(nvrtcCreateProgram)                                                                         \
    X(nvrtcDestroyProgram)                                                                        \
    X(nvrtcAddNameExpression)                                                                     \
    X(nvrtcCompileProgram)                                                                        \
    X(nvrtcGetProgramLogSize)                                                                     \
    X(nvrtcGetProgramLog)                                                                         \
    X(nvrtcGetLoweredName)                                                                        \
    X(nvrtcGetCUBINSize)                                                                          \
    X(nvrtcGetCUBIN)                                                                              \
    X(nvrtcGetPTXSize)                                                                            \
    X(nvrtcGetPTX)                                                                                \
    X(nvrtcGetLTOIRSize)                                                                          \
    X(nvrtcGetLTOIR)

struct nvrtc_api {
#define JITOP__NVRTC_SLOT(fn) __typeof__(fn) *fn;
    JITOP__NVRTC_FUNCS(JITOP__NVRTC_SLOT)
#undef JITOP__NVRTC_SLOT
};

/* The soname of the NVRTC whose header we compiled against: its ABI is the
 * one the table's types describe. */
#define NVRTC_MAJOR (CUDA_VERSION / 1000)

/* Where NVRTC would be opened from, found without opening it (one stat).
 * The toolkit the library was built against comes first, so that another
 * NVRTC on the loader's path cannot shadow it; then the soname through the
 * normal search path (LD_LIBRARY_PATH, the executable's RUNPATH,
 * ld.so.cache). Written once by where_init, read after it. */
static pthread_once_t where_once = PTHREAD_ONCE_INIT;
static char g_soname[32];
static char g_home_path[PATH_MAX]; /* JITOP_CUDA_HOME's copy, "" if none */
static bool g_in_home;             /* open g_home_path, not the soname */
static long long g_home_size = -1; /* its size (through links) */
static char g_file[PATH_MAX];      /* in the soname case the file the loader
                                      took, set by load_init; "" until then */

static void where_init(void)
{
    snprintf(g_soname, sizeof g_soname, "libnvrtc.so.%d", NVRTC_MAJOR);
#ifdef JITOP_CUDA_HOME
    snprintf(g_home_path, sizeof g_home_path, "%s/lib64/%s", JITOP_CUDA_HOME, g_soname);
    /* Found and sized by one stat through its links: every key needs the
     * size (jitop__nvrtc_identity), so a warm load pays for this once per
     * process (a link, a lstat, a readlink and a stat took 20-35 us there
     * in a new process on the GPU machine). A file there that cannot be
     * read is still the one: its load fails, naming it (load_init). */
    struct stat st;
    if (stat(g_home_path, &st) == 0 && S_ISREG(st.st_mode)) {
        g_in_home = true;
        g_home_size = (long long)st.st_size;
    }
#endif
}

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static struct nvrtc_api g_nv;

/* NVRTC's precompiled-header calls (CUDA 12.8 and later), looked up apart
 * from the table above: an NVRTC without them still compiles, with no PCH
 * (jitop__nvrtc_has_pch). */
static struct {
    __typeof__(nvrtcGetPCHCreateStatus) *create_status;
    __typeof__(nvrtcGetPCHHeapSizeRequired) *heap_required;
    __typeof__(nvrtcSetPCHHeapSize) *set_heap;
} g_pch;
static int g_load_status = JITOP_ENVRTC;
static char g_load_msg[2 * PATH_MAX + 512];

/* Runs once per process. The handle is never dlclose'd: NVRTC keeps state
 * for the life of the process, and reopening would cost the load again.
 * A copy in the toolkit that fails to open is an error, not a reason to try
 * the search path: the key already names that file. */
static void load_init(void)
{
    pthread_once(&where_once, where_init);
    const char *name = g_in_home ? g_home_path : g_soname;
    void *h = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *why = dlerror();
        if (g_in_home)
            snprintf(g_load_msg, sizeof g_load_msg, "cannot load NVRTC from %s: %s", name,
                     why ? why : "unknown error");
        else
            snprintf(g_load_msg, sizeof g_load_msg,
                     "cannot load NVRTC: tried %s%s%s on the library search path (%s); install "
                     "the CUDA toolkit's NVRTC %d.x or put its lib64 directory on "
                     "LD_LIBRARY_PATH",
                     g_home_path, g_home_path[0] ? " (missing), then " : "", g_soname,
                     why ? why : "not found", NVRTC_MAJOR);
        return;
    }
#define JITOP__NVRTC_LOOKUP(fn)                                                                   \
    if (!(*(void **)&g_nv.fn = dlsym(h, #fn))) {                                                  \
        snprintf(g_load_msg, sizeof g_load_msg, "NVRTC at %s has no %s: not a usable NVRTC %d",   \
                 name, #fn, NVRTC_MAJOR);                                                         \
        return;                                                                                   \
    }
    JITOP__NVRTC_FUNCS(JITOP__NVRTC_LOOKUP)
#undef JITOP__NVRTC_LOOKUP
    *(void **)&g_pch.create_status = dlsym(h, "nvrtcGetPCHCreateStatus");
    *(void **)&g_pch.heap_required = dlsym(h, "nvrtcGetPCHHeapSizeRequired");
    *(void **)&g_pch.set_heap = dlsym(h, "nvrtcSetPCHHeapSize");
    if (!g_pch.create_status || !g_pch.heap_required || !g_pch.set_heap)
        memset(&g_pch, 0, sizeof g_pch);
    if (!g_in_home) {
        /* Found by soname: the loader knows which file it took. */
        Dl_info info;
        if (dladdr(*(void **)&g_nv.nvrtcVersion, &info) != 0 && info.dli_fname)
            snprintf(g_file, sizeof g_file, "%s", info.dli_fname);
    }
    g_load_status = JITOP_OK;
}

/* The table, or JITOP_ENVRTC naming every place tried. */
static int nvrtc_load(void)
{
    pthread_once(&load_once, load_init);
    return g_load_status == JITOP_OK ? JITOP_OK : jitop__fail(g_load_status, "%s", g_load_msg);
}

/* The file NVRTC is (or would be) loaded from; "" when it cannot be had.
 * Free in the usual case; found by soname, it costs the load. */
const char *jitop__nvrtc_file(void)
{
    pthread_once(&where_once, where_init);
    if (g_in_home)
        return g_home_path;
    if (nvrtc_load() != JITOP_OK)
        jitop__clear_error(); /* no NVRTC: the caller says "unknown" */
    return g_file;
}

/* ------------------------------------------------------------ the toolkit */

/* The process's toolkit: toolkit.c's search for the NVRTC jitop compiles
 * with, done once (a few stats); read-only afterwards. Here rather than in
 * toolkit.c, which calls nothing of nvrtc.c (calls in a room go one way). */
static pthread_once_t toolkit_once = PTHREAD_ONCE_INIT;
static jitop__toolkit g_toolkit;

static void toolkit_init(void)
{
#ifdef JITOP_CUDA_HOME
    const char *built = JITOP_CUDA_HOME;
#else
    const char *built = NULL;
#endif
    jitop__toolkit_find(&g_toolkit, jitop__nvrtc_file(), getenv("CUDA_HOME"), built);
}

const jitop__toolkit *jitop__toolkit_get(void)
{
    pthread_once(&toolkit_once, toolkit_init);
    return &g_toolkit;
}

int jitop__toolkit_include_dirs(jitop__strv *dirs)
{
    const jitop__toolkit *t = jitop__toolkit_get();
    int rc = JITOP_OK;
    if (t->include[0])
        rc = jitop__strv_push(dirs, t->include);
    if (rc == JITOP_OK && t->cccl[0])
        rc = jitop__strv_push(dirs, t->cccl);
    return rc == JITOP_OK ? JITOP_OK : jitop__fail(JITOP_ENOMEM, "out of memory");
}

char *jitop__missing_header_hint(const char *log)
{
    return jitop__toolkit_hint(jitop__toolkit_get(), log);
}

static pthread_once_t version_once = PTHREAD_ONCE_INIT;
static char version_text[32] = "unknown";

/* major.minor from the versioned file name the links lead to
 * (libnvrtc.so.13 -> libnvrtc.so.13.0.88: "13.0") costs a readlink or two;
 * a bare soname (libnvrtc.so.13 as a plain file) leaves only nvrtcVersion,
 * which loads NVRTC. Callers are messages, entry metadata written after a
 * compile, and --version: never the hit path. */
static void version_init(void)
{
    char file[PATH_MAX];
    jitop__last_link_target(jitop__nvrtc_file(), file, sizeof file);
    const char *base = strrchr(file, '/');
    base = base ? base + 1 : file;
    int major = 0, minor = 0;
    char rest;
    if (sscanf(base, "libnvrtc.so.%d.%d%c", &major, &minor, &rest) >= 2) {
        snprintf(version_text, sizeof version_text, "%d.%d", major, minor);
        return;
    }
    if (nvrtc_load() != JITOP_OK) {
        jitop__clear_error();
        return;
    }
    if (g_nv.nvrtcVersion(&major, &minor) == NVRTC_SUCCESS)
        snprintf(version_text, sizeof version_text, "%d.%d", major, minor);
}

const char *jitop__nvrtc_version(void)
{
    pthread_once(&version_once, version_init);
    return version_text;
}

static pthread_once_t identity_once = PTHREAD_ONCE_INIT;
static char identity_text[64] = "unknown";

/* The soname and the size of the file behind it: the same text wherever a
 * release is installed, however its links are laid out. */
static void identity_init(void)
{
    struct stat st;
    const char *file = jitop__nvrtc_file();
    long long size = g_in_home ? g_home_size : -1;
    if (size < 0 && file[0] && stat(file, &st) == 0)
        size = (long long)st.st_size;
    if (size >= 0)
        snprintf(identity_text, sizeof identity_text, "%s %lld", g_soname, size);
}

const char *jitop__nvrtc_identity(void)
{
    pthread_once(&identity_once, identity_init);
    return identity_text;
}

static pthread_once_t archs_once = PTHREAD_ONCE_INIT;
static int g_archs[128];
static int g_narchs = -1; /* -1: the list could not be had */

static void archs_init(void)
{
    int n = 0;
    if (g_nv.nvrtcGetNumSupportedArchs(&n) == NVRTC_SUCCESS && n > 0 &&
        n <= (int)(sizeof g_archs / sizeof g_archs[0]) &&
        g_nv.nvrtcGetSupportedArchs(g_archs) == NVRTC_SUCCESS)
        g_narchs = n;
}

int jitop__nvrtc_check_arch(const char *arch)
{
    if (!jitop__arch_valid(arch))
        return jitop__fail(JITOP_EINVAL,
                           "arch '%s' is not valid: expected sm_NN or compute_NN (for example "
                           "sm_90, sm_90a, compute_90)",
                           arch);
    int status = nvrtc_load();
    if (status != JITOP_OK)
        return status;
    pthread_once(&archs_once, archs_init);
    if (g_narchs < 0)
        return JITOP_OK; /* nothing to check against: NVRTC itself decides */
    const char *digits = arch + strcspn(arch, "0123456789");
    int number = atoi(digits);
    for (int i = 0; i < g_narchs; i++)
        if (g_archs[i] == number)
            return JITOP_OK;
    char list[1024];
    size_t off = 0;
    for (int i = 0; i < g_narchs && off < sizeof list; i++) {
        int w = snprintf(list + off, sizeof list - off, "%s%s_%d", i ? ", " : "",
                         strncmp(arch, "compute_", 8) == 0 ? "compute" : "sm", g_archs[i]);
        off += w > 0 ? (size_t)w : 0;
    }
    return jitop__fail(JITOP_EINVAL,
                       "arch %s is not one this NVRTC (%s) compiles for; it supports %s "
                       "(nvrtcGetSupportedArchs)",
                       arch, jitop__nvrtc_version(), list);
}

const char *jitop__binary_lowered(const jitop__binary *bin, const char *name)
{
    for (size_t k = 0; k < bin->names.n && k < bin->lowered.n; k++)
        if (strcmp(bin->names.v[k], name) == 0)
            return bin->lowered.v[k];
    /* A binary of the one name asked (a unit's own compile), whatever its
     * spelling there. */
    return bin->names.n == 1 && bin->lowered.n == 1 ? bin->lowered.v[0] : NULL;
}

void jitop__binary_free(jitop__binary *b)
{
    if (!b)
        return;
    free(b->data);
    jitop__strv_free(&b->names);
    jitop__strv_free(&b->lowered);
    free(b->log);
    memset(b, 0, sizeof *b);
}

/* NVRTC's log (the caller frees it); NULL when it cannot be had. */
static char *program_log(nvrtcProgram prog)
{
    size_t n = 0;
    if (g_nv.nvrtcGetProgramLogSize(prog, &n) != NVRTC_SUCCESS || n == 0)
        return NULL;
    char *log = malloc(n);
    if (log && g_nv.nvrtcGetProgramLog(prog, log) != NVRTC_SUCCESS) {
        free(log);
        return NULL;
    }
    return log;
}

/* Whether the log has anything but white space (NVRTC gives "" or a lone
 * newline for a quiet compile). */
static bool log_says_something(const char *log)
{
    for (const char *p = log; p && *p; p++)
        if (!isspace((unsigned char)*p))
            return true;
    return false;
}

/* NVRTC compiles each name expression as a line of a pseudo-file named
 * __nv_name_map ("#pragma nv_mangled_name NAME"): an error there is about
 * the name (an identifier the unit does not declare, a name that does not
 * parse, wrong template arguments), one anywhere else is about the source
 * (an instantiation that fails, a syntax error). Error lines look like
 * "FILE(LINE): error: ..." (also "catastrophic error", "internal error").
 * True when there is at least one error and every one is in the name map. */
static bool errors_only_in_names(const char *log)
{
    static const char map[] = "__nv_name_map(";
    bool any = false;
    for (const char *line = log; line && *line;) {
        const char *nl = strchr(line, '\n');
        size_t n = nl ? (size_t)(nl - line) : strlen(line);
        const char *paren = memchr(line, '(', n);
        const char *close = paren ? memchr(paren, ')', n - (size_t)(paren - line)) : NULL;
        const char *rest = close ? close + 1 : NULL;
        size_t left = rest ? n - (size_t)(rest - line) : 0;
        bool error = rest && left > 2 && rest[0] == ':' && rest[1] == ' ' &&
                     ((left >= 8 && strncmp(rest + 2, "error:", 6) == 0) ||
                      (left >= 21 && strncmp(rest + 2, "catastrophic error:", 19) == 0) ||
                      (left >= 17 && strncmp(rest + 2, "internal error:", 15) == 0));
        if (error) {
            if (strncmp(line, map, sizeof map - 1) != 0)
                return false;
            any = true;
        }
        line = nl ? nl + 1 : NULL;
    }
    return any;
}

int jitop__unresolved_fail(const jitop__unit *u, const jitop__binary *b)
{
    char *names = jitop__strv_join(&u->names, "', '");
    int status = jitop__fail(JITOP_ENOTFOUND, "%s declares nothing named '%s' (for %s):\n%s",
                             u->source_name, names ? names : "?", u->arch,
                             b->log ? b->log : "(NVRTC gave no log)");
    free(names);
    return status;
}

/* Copies the compiled code out; data[size] is always a NUL, so that PTX can
 * be handed to the driver as a string. For PTX, size excludes that NUL. A
 * -dlto unit's code is LTO-IR (is_ptx false), which only nvJitLink reads. */
static int take_code(nvrtcProgram prog, const jitop__unit *u, jitop__binary *out)
{
    out->is_ptx = !u->lto && strncmp(u->arch, "compute_", 8) == 0;
    size_t n = 0;
    const char *size_call = u->lto ? "nvrtcGetLTOIRSize"
                            : out->is_ptx ? "nvrtcGetPTXSize"
                                          : "nvrtcGetCUBINSize";
    nvrtcResult r = u->lto        ? g_nv.nvrtcGetLTOIRSize(prog, &n)
                    : out->is_ptx ? g_nv.nvrtcGetPTXSize(prog, &n)
                                  : g_nv.nvrtcGetCUBINSize(prog, &n);
    if (r != NVRTC_SUCCESS)
        return jitop__fail(JITOP_ENVRTC, "%s: %s: %s", u->source_name, size_call,
                           g_nv.nvrtcGetErrorString(r));
    out->data = malloc(n + 1);
    if (!out->data)
        return jitop__fail(JITOP_ENOMEM, "%s: out of memory for a %zu-byte binary",
                           u->source_name, n);
    r = u->lto        ? g_nv.nvrtcGetLTOIR(prog, (char *)out->data)
        : out->is_ptx ? g_nv.nvrtcGetPTX(prog, (char *)out->data)
                      : g_nv.nvrtcGetCUBIN(prog, (char *)out->data);
    if (r != NVRTC_SUCCESS)
        return jitop__fail(JITOP_ENVRTC, "%s: %s: %s", u->source_name,
                           u->lto        ? "nvrtcGetLTOIR"
                           : out->is_ptx ? "nvrtcGetPTX"
                                         : "nvrtcGetCUBIN",
                           g_nv.nvrtcGetErrorString(r));
    out->data[n] = '\0';
    out->size = out->is_ptx && n > 0 ? n - 1 : n;
    return JITOP_OK;
}

static int take_lowered_names(nvrtcProgram prog, const jitop__unit *u, jitop__binary *out)
{
    for (size_t i = 0; i < u->names.n; i++) {
        const char *lowered = NULL;
        nvrtcResult r = g_nv.nvrtcGetLoweredName(prog, u->names.v[i], &lowered);
        if (r != NVRTC_SUCCESS)
            return jitop__fail(JITOP_ENVRTC, "%s: nvrtcGetLoweredName(\"%s\"): %s",
                               u->source_name, u->names.v[i], g_nv.nvrtcGetErrorString(r));
        if (jitop__strv_push(&out->names, u->names.v[i]) != JITOP_OK ||
            jitop__strv_push(&out->lowered, lowered) != JITOP_OK)
            return jitop__fail(JITOP_ENOMEM, "out of memory");
    }
    return JITOP_OK;
}

/* The argument vector NVRTC sees: the arch, the source's own directory
 * (so that <...> includes next to the source resolve, as the dependency
 * scanner assumes), then the normalized options, which hold every -I of
 * the user's, then the toolkit's include folders. */
static int compile_args(const jitop__unit *u, jitop__strv *args)
{
    if (jitop__strv_pushf(args, "--gpu-architecture=%s", u->arch) != JITOP_OK)
        return JITOP_ENOMEM;
    if (u->source_path && u->include_dirs.n > 0 &&
        jitop__strv_pushf(args, "-I%s", u->include_dirs.v[0]) != JITOP_OK)
        return JITOP_ENOMEM;
    for (size_t i = 0; i < u->options.n; i++)
        if (jitop__strv_push(args, u->options.v[i]) != JITOP_OK)
            return JITOP_ENOMEM;
    for (size_t i = u->include_dirs.n - u->toolkit_dirs; i < u->include_dirs.n; i++)
        if (jitop__strv_pushf(args, "-I%s", u->include_dirs.v[i]) != JITOP_OK)
            return JITOP_ENOMEM;
    return JITOP_OK;
}

/* The line NVRTC puts in the log when it creates or uses a PCH
 * ("NAME": using precompiled header file "PATH"), taken out, so that the
 * log kept with the binary is the one a compile without PCH gives. Any
 * other mention of a precompiled header left in the log (a PCH NVRTC could
 * not open or refused) marks the compile suspect: it is done again
 * without PCH (jitop__compile_pch). */
static void pch_log_filter(char *log, jitop__pch_req *pch)
{
    if (!log)
        return;
    static const char *const said[] = {"\": creating precompiled header file \"",
                                       "\": using precompiled header file \""};
    char *line = log;
    while (*line) {
        char *nl = strchr(line, '\n');
        size_t n = nl ? (size_t)(nl - line) + 1 : strlen(line);
        bool ours = false;
        for (size_t i = 0; i < 2 && !ours; i++) {
            char *at = line[0] == '"' ? strstr(line, said[i]) : NULL;
            if (at && (!nl || at < nl)) {
                ours = true;
                if (i == 0)
                    pch->said_created = true;
                else
                    pch->said_used = true;
            }
        }
        if (ours) {
            memmove(line, line + n, strlen(line + n) + 1);
            continue;
        }
        char saved = nl ? nl[1] : '\0';
        if (nl)
            nl[1] = '\0';
        if (strstr(line, "precompiled header") || strstr(line, "PCH"))
            pch->suspect = true;
        if (nl)
            nl[1] = saved;
        line += n;
    }
}

/* One NVRTC program; pch_opt: NULL, or the --create-pch / --use-pch option
 * of pch (whose results it fills). */
static int compile_once(const jitop__unit *u, const char *text, const char *pch_opt,
                        jitop__pch_req *pch, jitop__binary *out)
{
    int status = JITOP_OK;
    nvrtcProgram prog = NULL;
    jitop__strv args = {0};
    char *log = NULL;
    memset(out, 0, sizeof *out);

    status = nvrtc_load();
    if (status != JITOP_OK)
        goto out;
    if (compile_args(u, &args) != JITOP_OK || (pch_opt && jitop__strv_push(&args, pch_opt) != JITOP_OK)) {
        status = jitop__fail(JITOP_ENOMEM, "out of memory");
        goto out;
    }
    /* What NVRTC compiles must be what was hashed. The source is handed as
     * the hashed text. Headers NVRTC reads from disk itself, and three things
     * make those the hashed ones: the scanner resolves every name as NVRTC
     * does (the including file's directory as the path it was opened by,
     * then -I in order; ".." after the links before it, which is how NVRTC's
     * open() goes: resolve.c, checked against NVRTC itself by
     * tests/cpu/test_deps_diff.c); the program is named by the source's
     * absolute path, so that its directory is the one the scanner used
     * (inline text, named relatively, has its quoted names looked up in the
     * current directory by both); and
     * after the compile every hashed file is checked again
     * (jitop__deps_changed: size, mtime, ctime, inode, and a hash where the
     * record is recent), so that a header saved while NVRTC read it is never
     * cached under the old hash.
     *
     * Handing NVRTC the hashed header bytes instead (headers/includeNames)
     * would not be the same program: NVRTC matches an include name as
     * spelled, from any including file, before any directory (a registered
     * "c.h" replaces the "c.h" beside another header), resolves a registered
     * header's own quoted includes against its name rather than its folder,
     * and names it by that spelling in diagnostics ("c.h(3): error"),
     * losing the path a user clicks on. Rewriting each directive to a
     * unique name would change the text NVRTC sees, where a misread
     * directive (inside a raw string, say) would change the program. */
    nvrtcResult r = g_nv.nvrtcCreateProgram(&prog, text, u->source_name, 0, NULL, NULL);
    if (r != NVRTC_SUCCESS) {
        prog = NULL;
        status = jitop__fail(JITOP_ENVRTC, "%s: nvrtcCreateProgram: %s", u->source_name,
                             g_nv.nvrtcGetErrorString(r));
        goto out;
    }
    for (size_t i = 0; i < u->names.n; i++) {
        r = g_nv.nvrtcAddNameExpression(prog, u->names.v[i]);
        if (r != NVRTC_SUCCESS) {
            status = jitop__fail(JITOP_ENVRTC, "%s: nvrtcAddNameExpression(\"%s\"): %s",
                                 u->source_name, u->names.v[i], g_nv.nvrtcGetErrorString(r));
            goto out;
        }
    }
    r = g_nv.nvrtcCompileProgram(prog, (int)args.n, (const char *const *)args.v);
    log = program_log(prog);
    if (pch_opt) {
        pch_log_filter(log, pch);
        if (pch->create && r == NVRTC_SUCCESS) {
            nvrtcResult c = g_pch.create_status(prog);
            if (c == NVRTC_ERROR_PCH_CREATE_HEAP_EXHAUSTED) {
                pch->exhausted = true;
                if (g_pch.heap_required(prog, &pch->heap_required) != NVRTC_SUCCESS)
                    pch->heap_required = 0;
            } else if (c != NVRTC_SUCCESS) {
                snprintf(pch->why, sizeof pch->why, "nvrtcGetPCHCreateStatus: %s",
                         g_nv.nvrtcGetErrorString(c));
            } else {
                pch->created = true;
            }
        }
    }
    if (r == NVRTC_ERROR_COMPILATION && u->names.n > 0 && errors_only_in_names(log)) {
        out->unresolved = true;
        out->log = log;
        log = NULL;
        status = jitop__unresolved_fail(u, out);
        goto out;
    }
    if (r == NVRTC_ERROR_COMPILATION) {
        char *hint = jitop__missing_header_hint(log);
        status = jitop__fail(JITOP_ECOMPILE, "%s: compile for %s failed:\n%s%s%s", u->source_name,
                             u->arch, log ? log : "(NVRTC gave no log)", hint ? "\n" : "",
                             hint ? hint : "");
        free(hint);
        goto out;
    }
    if (r == NVRTC_ERROR_INVALID_OPTION) {
        /* The arch is an option too: a well-formed one NVRTC does not know
         * (sm_10, compute_999) is named, with the ones it does. */
        status = jitop__nvrtc_check_arch(u->arch);
        if (status != JITOP_OK) {
            jitop__fail_prefix(status, "%s", u->source_name);
            goto out;
        }
        char *joined = jitop__strv_join(&args, " ");
        status = jitop__fail(JITOP_EINVAL, "%s: NVRTC rejected the options [%s]: %s",
                             u->source_name, joined ? joined : "?",
                             log && *log ? log : g_nv.nvrtcGetErrorString(r));
        free(joined);
        goto out;
    }
    if (r != NVRTC_SUCCESS) {
        status = jitop__fail(JITOP_ENVRTC, "%s: nvrtcCompileProgram: %s%s%s", u->source_name,
                             g_nv.nvrtcGetErrorString(r), log ? "\n" : "", log ? log : "");
        goto out;
    }
    status = take_lowered_names(prog, u, out);
    if (status == JITOP_OK)
        status = take_code(prog, u, out);
    if (status == JITOP_OK && log_says_something(log)) {
        out->log = log;
        log = NULL;
    }
out:
    if (prog) {
        r = g_nv.nvrtcDestroyProgram(&prog);
        if (r != NVRTC_SUCCESS && status == JITOP_OK)
            status = jitop__fail(JITOP_ENVRTC, "%s: nvrtcDestroyProgram: %s", u->source_name,
                                 g_nv.nvrtcGetErrorString(r));
    }
    if (status != JITOP_OK && !(status == JITOP_ENOTFOUND && out->unresolved))
        jitop__binary_free(out);
    free(log);
    jitop__strv_free(&args);
    return status;
}

int jitop__compile(const jitop__unit *u, const char *text, jitop__binary *out)
{
    return compile_once(u, text, NULL, NULL, out);
}

bool jitop__nvrtc_has_pch(void)
{
    if (nvrtc_load() != JITOP_OK) {
        jitop__clear_error();
        return false;
    }
    return g_pch.create_status != NULL;
}

int jitop__compile_pch(const jitop__unit *u, const char *text, jitop__pch_req *pch,
                       jitop__binary *out)
{
    if (!pch || (!pch->create && !pch->use) || !jitop__nvrtc_has_pch())
        return compile_once(u, text, NULL, NULL, out);
    char *opt = NULL;
    if (asprintf(&opt, "--%s-pch=%s", pch->create ? "create" : "use",
                 pch->create ? pch->create : pch->use) < 0)
        return jitop__fail(JITOP_ENOMEM, "out of memory");
    int status = compile_once(u, text, opt, pch, out);
    if (status == JITOP_OK && pch->exhausted && pch->heap_required > 0) {
        /* The heap NVRTC keeps for PCH creation (256 MiB by default in
         * 13.0) was too small: resized to what this preamble needs, and
         * the compile run again, as nvrtcGetPCHCreateStatus's contract
         * says. A resize frees the old heap, so every PCH made before it
         * is void (the caller drops them). */
        nvrtcResult r = g_pch.set_heap(pch->heap_required);
        if (r != NVRTC_SUCCESS) {
            snprintf(pch->why, sizeof pch->why, "nvrtcSetPCHHeapSize(%zu): %s",
                     pch->heap_required, g_nv.nvrtcGetErrorString(r));
        } else {
            pch->heap_resized = true;
            pch->exhausted = false;
            jitop__binary_free(out);
            status = compile_once(u, text, opt, pch, out);
            if (status == JITOP_OK && pch->exhausted)
                snprintf(pch->why, sizeof pch->why,
                         "the PCH heap was still too small after nvrtcSetPCHHeapSize(%zu)",
                         pch->heap_required);
        }
    } else if (pch->exhausted) {
        snprintf(pch->why, sizeof pch->why, "the PCH heap is too small and NVRTC did not say how "
                                            "large it must be");
    }
    free(opt);
    if (pch->use && !pch->said_used && !pch->suspect)
        pch->suspect = true; /* NVRTC did not say it used it: not what was asked */
    bool source_error = status == JITOP_ECOMPILE || (status == JITOP_ENOTFOUND && out->unresolved);
    if (pch->suspect || (status != JITOP_OK && !source_error)) {
        /* Fail-open: the PCH must never change a result, so a compile that
         * went wrong with it (NVRTC could not read or refused the file, or
         * anything but an error in the source) is done again without. */
        if (!pch->why[0])
            snprintf(pch->why, sizeof pch->why, "%s", status != JITOP_OK ? jitop_errmsg(NULL)
                                                   : "NVRTC's log named the PCH");
        pch->fell_back = true;
        pch->created = false;
        jitop__clear_error();
        jitop__binary_free(out);
        status = compile_once(u, text, NULL, NULL, out);
    }
    return status;
}

const char *jitop_nvrtc_version(void)
{
    return jitop__nvrtc_version();
}
