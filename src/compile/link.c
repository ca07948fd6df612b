/* nvJitLink: relocatable units (-rdc, -dlto) linked into one loadable
 * binary. The only file that calls nvJitLink. Opened with dlopen on the
 * first link, never linked into libjitop, as NVRTC is (nvrtc.c): the
 * library is ~95 MB, and a warm load, whose linked image comes from the
 * cache, never needs it. */
#include "compile/compile.h"

#include <cuda.h>
#include <nvJitLink.h>

#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define NVJITLINK_MAJOR (CUDA_VERSION / 1000)

/* The header's calls are inline wrappers of versioned symbols
 * (__nvJitLinkCreate_13_0): the table takes the wrappers' types and dlsym
 * looks up the versioned names of the header's major version. */
#define JITOP__NVJITLINK_FUNCS(X)                                                                 \
    X(nvJitLinkCreate)                                                                            \
    X(nvJitLinkDestroy)                                                                           \
    X(nvJitLinkAddData)                                                                           \
    X(nvJitLinkAddFile)                                                                           \
    X(nvJitLinkComplete)                                                                          \
    X(nvJitLinkGetLinkedCubinSize)                                                                \
    X(nvJitLinkGetLinkedCubin)                                                                    \
    X(nvJitLinkGetLinkedPtxSize)                                                                  \
    X(nvJitLinkGetLinkedPtx)                                                                      \
    X(nvJitLinkGetErrorLogSize)                                                                   \
    X(nvJitLinkGetErrorLog)

struct nvjitlink_api {
#define JITOP__NVJITLINK_SLOT(fn) __typeof__(fn) *fn;
    JITOP__NVJITLINK_FUNCS(JITOP__NVJITLINK_SLOT)
#undef JITOP__NVJITLINK_SLOT
    __typeof__(nvJitLinkVersion) *nvJitLinkVersion;
};

/* Where nvJitLink would be opened from, found without opening it: the
 * toolkit jitop was built against first, then the soname on the search
 * path, as for NVRTC. The device runtime (libcudadevrt.a) is the one of the
 * same toolkit: beside the library file. Written once by where_init. */
static pthread_once_t where_once = PTHREAD_ONCE_INIT;
static char g_soname[32];
static char g_home_path[PATH_MAX]; /* JITOP_CUDA_HOME's copy, "" if none */
static bool g_in_home;
static char g_file[PATH_MAX];      /* the file found by soname (load_init) */

static void where_init(void)
{
    snprintf(g_soname, sizeof g_soname, "libnvJitLink.so.%d", NVJITLINK_MAJOR);
#ifdef JITOP_CUDA_HOME
    snprintf(g_home_path, sizeof g_home_path, "%s/lib64/%s", JITOP_CUDA_HOME, g_soname);
    struct stat st;
    g_in_home = stat(g_home_path, &st) == 0 && S_ISREG(st.st_mode);
#endif
}

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static struct nvjitlink_api g_nj;
static int g_load_status = JITOP_ENVRTC;
static char g_load_msg[2 * PATH_MAX + 512];

/* Runs once per process; the handle is never closed (as NVRTC's). */
static void load_init(void)
{
    pthread_once(&where_once, where_init);
    const char *name = g_in_home ? g_home_path : g_soname;
    void *h = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *why = dlerror();
        snprintf(g_load_msg, sizeof g_load_msg,
                 "cannot load nvJitLink, which links -rdc units: tried %s (%s); install the CUDA "
                 "toolkit's nvJitLink %d.x or put its lib64 directory on LD_LIBRARY_PATH",
                 name, why ? why : "not found", NVJITLINK_MAJOR);
        return;
    }
    char sym[64];
#define JITOP__NVJITLINK_LOOKUP(fn)                                                               \
    snprintf(sym, sizeof sym, "__%s_%d_0", #fn, NVJITLINK_MAJOR);                                 \
    if (!(*(void **)&g_nj.fn = dlsym(h, sym))) {                                                  \
        snprintf(g_load_msg, sizeof g_load_msg, "nvJitLink at %s has no %s: not nvJitLink %d",    \
                 name, sym, NVJITLINK_MAJOR);                                                     \
        return;                                                                                   \
    }
    JITOP__NVJITLINK_FUNCS(JITOP__NVJITLINK_LOOKUP)
#undef JITOP__NVJITLINK_LOOKUP
    if (!(*(void **)&g_nj.nvJitLinkVersion = dlsym(h, "nvJitLinkVersion"))) {
        snprintf(g_load_msg, sizeof g_load_msg, "nvJitLink at %s has no nvJitLinkVersion", name);
        return;
    }
    if (!g_in_home) {
        Dl_info info;
        if (dladdr(*(void **)&g_nj.nvJitLinkVersion, &info) != 0 && info.dli_fname)
            snprintf(g_file, sizeof g_file, "%s", info.dli_fname);
    }
    g_load_status = JITOP_OK;
}

static int nvjitlink_load(void)
{
    pthread_once(&load_once, load_init);
    return g_load_status == JITOP_OK ? JITOP_OK : jitop__fail(g_load_status, "%s", g_load_msg);
}

/* The library file (loading it only when it is not in the toolkit). */
static const char *nvjitlink_file(void)
{
    pthread_once(&where_once, where_init);
    if (g_in_home)
        return g_home_path;
    if (nvjitlink_load() != JITOP_OK)
        jitop__clear_error();
    return g_file;
}

static pthread_once_t devrt_once = PTHREAD_ONCE_INIT;
static char g_devrt[PATH_MAX]; /* "" when there is none */
static long long g_devrt_size = -1;

static void devrt_init(void)
{
    const char *lib = nvjitlink_file();
    const char *slash = strrchr(lib, '/');
    struct stat st;
    if (!slash)
        return;
    snprintf(g_devrt, sizeof g_devrt, "%.*s/libcudadevrt.a", (int)(slash - lib), lib);
    if (stat(g_devrt, &st) == 0 && S_ISREG(st.st_mode))
        g_devrt_size = (long long)st.st_size;
    else
        g_devrt[0] = '\0';
}

static pthread_once_t identity_once = PTHREAD_ONCE_INIT;
static char identity_text[96] = "unknown";

/* The library's soname and file size, and the device runtime's size: a
 * patch release changes both files' sizes, and either changes the image. */
static void identity_init(void)
{
    struct stat st;
    const char *file = nvjitlink_file();
    pthread_once(&devrt_once, devrt_init);
    if (file[0] && stat(file, &st) == 0)
        snprintf(identity_text, sizeof identity_text, "%s %lld, libcudadevrt.a %lld", g_soname,
                 (long long)st.st_size, g_devrt_size);
}

const char *jitop__nvjitlink_identity(void)
{
    pthread_once(&identity_once, identity_init);
    return identity_text;
}

int jitop__link_options(const jitop__unit *u, jitop__strv *out)
{
    bool ptx = strncmp(u->arch, "compute_", 8) == 0;
    if (ptx && !u->lto)
        return jitop__fail(JITOP_EINVAL,
                           "linking -rdc units for %s (PTX) needs -dlto as well: nvJitLink emits "
                           "PTX only from LTO-IR (or choose an sm_XX arch)",
                           u->arch);
    int rc = jitop__strv_pushf(out, "-arch=%s", u->arch);
    if (rc == JITOP_OK && u->lto)
        rc = jitop__strv_push(out, "-lto");
    if (rc == JITOP_OK && ptx)
        rc = jitop__strv_push(out, "-ptx");
    for (size_t i = 0; rc == JITOP_OK && i < u->options.n; i++) {
        const char *o = u->options.v[i];
        if (strcmp(o, "--generate-line-info") == 0)
            rc = jitop__strv_push(out, "-lineinfo");
        else if (strcmp(o, "--device-debug") == 0)
            rc = jitop__strv_push(out, "-g");
        else if (strncmp(o, "--maxrregcount=", 15) == 0)
            rc = jitop__strv_pushf(out, "-maxrregcount=%s", o + 15);
        else if (u->lto && strcmp(o, "--use_fast_math") == 0)
            /* What --use_fast_math means for the code generated at the link. */
            rc = jitop__strv_push(out, "-ftz=1") || jitop__strv_push(out, "-prec-div=0") ||
                 jitop__strv_push(out, "-prec-sqrt=0") || jitop__strv_push(out, "-fma=1");
    }
    return rc == JITOP_OK ? JITOP_OK : jitop__fail(JITOP_ENOMEM, "out of memory");
}

static char *error_log(nvJitLinkHandle h)
{
    size_t n = 0;
    if (g_nj.nvJitLinkGetErrorLogSize(h, &n) != NVJITLINK_SUCCESS || n == 0)
        return NULL;
    char *log = malloc(n + 1);
    if (log && g_nj.nvJitLinkGetErrorLog(h, log) != NVJITLINK_SUCCESS) {
        free(log);
        return NULL;
    }
    if (log)
        log[n] = '\0';
    return log;
}

/* A device-side launch (dynamic parallelism) calls the device runtime's
 * __cudaCDP2* functions, which only libcudadevrt.a defines: the link's
 * error log names them when it is missing. */
static bool wants_devrt(const char *log)
{
    return log && (strstr(log, "__cudaCDP") || strstr(log, "cudaGetParameterBuffer") ||
                   strstr(log, "cudaLaunchDevice"));
}

/* Whether an input calls the device runtime, seen before linking: a
 * relocatable cubin names the functions in its symbol table and PTX in its
 * declarations. LTO-IR is opaque; its units learn it from a failed link
 * (wants_devrt), which costs a second link, and nvJitLink keeps a few KB
 * of a failed link (measured under ASan: ~6.5 KB, not freed by
 * nvJitLinkDestroy). */
static bool calls_devrt(const jitop__binary *b)
{
    static const char name[] = "__cudaCDP";
    bool readable = b->is_ptx || (b->size >= 4 && memcmp(b->data, "\177ELF", 4) == 0);
    return readable && memmem(b->data, b->size, name, sizeof name - 1) != NULL;
}

/* One nvJitLink run. *log gets its error log (malloc'd) on a link error. */
static int link_once(const jitop__strv *options, const jitop__binary *const *in,
                     const char *const *names, size_t n, bool devrt, bool ptx,
                     jitop__binary *out, char **log)
{
    nvJitLinkHandle h = NULL;
    int status = JITOP_OK;
    *log = NULL;
    nvJitLinkResult r = g_nj.nvJitLinkCreate(&h, (uint32_t)options->n, (const char **)options->v);
    if (r != NVJITLINK_SUCCESS) {
        h = NULL;
        char *joined = jitop__strv_join(options, " ");
        status = jitop__fail(JITOP_EINVAL, "nvJitLinkCreate rejected the options [%s]: error %d",
                             joined ? joined : "?", (int)r);
        free(joined);
        goto out;
    }
    for (size_t i = 0; i < n && r == NVJITLINK_SUCCESS; i++)
        r = g_nj.nvJitLinkAddData(h, NVJITLINK_INPUT_ANY, in[i]->data,
                                  in[i]->is_ptx ? in[i]->size + 1 : in[i]->size, names[i]);
    if (r == NVJITLINK_SUCCESS && devrt)
        r = g_nj.nvJitLinkAddFile(h, NVJITLINK_INPUT_LIBRARY, g_devrt);
    if (r == NVJITLINK_SUCCESS)
        r = g_nj.nvJitLinkComplete(h);
    if (r != NVJITLINK_SUCCESS) {
        *log = error_log(h);
        status = jitop__fail(JITOP_ECOMPILE, "error %d", (int)r);
        goto out;
    }
    size_t size = 0;
    r = ptx ? g_nj.nvJitLinkGetLinkedPtxSize(h, &size) : g_nj.nvJitLinkGetLinkedCubinSize(h, &size);
    if (r == NVJITLINK_SUCCESS && !(out->data = malloc(size + 1)))
        status = jitop__fail(JITOP_ENOMEM, "out of memory for a %zu-byte linked image", size);
    if (r == NVJITLINK_SUCCESS && status == JITOP_OK)
        r = ptx ? g_nj.nvJitLinkGetLinkedPtx(h, (char *)out->data)
                : g_nj.nvJitLinkGetLinkedCubin(h, out->data);
    if (status == JITOP_OK && r != NVJITLINK_SUCCESS)
        status = jitop__fail(JITOP_ENVRTC, "nvJitLink could not hand out the linked %s: error %d",
                             ptx ? "PTX" : "cubin", (int)r);
    if (status == JITOP_OK) {
        out->data[size] = '\0';
        out->is_ptx = ptx;
        /* PTX: size without its NUL, as NVRTC's (nvrtc.c, take_code). */
        out->size = ptx && size > 0 && out->data[size - 1] == '\0' ? size - 1 : size;
    }
out:
    if (h && g_nj.nvJitLinkDestroy(&h) != NVJITLINK_SUCCESS && status == JITOP_OK)
        status = jitop__fail(JITOP_ENVRTC, "nvJitLinkDestroy failed");
    if (status != JITOP_OK)
        jitop__binary_free(out);
    return status;
}

int jitop__link(const char *arch, const jitop__strv *options, const jitop__binary *const *in,
                const char *const *names, size_t n, jitop__binary *out)
{
    char *log = NULL;
    bool ptx = strncmp(arch, "compute_", 8) == 0;
    memset(out, 0, sizeof *out);
    int status = nvjitlink_load();
    if (status != JITOP_OK)
        return status;
    pthread_once(&devrt_once, devrt_init);
    bool devrt = false;
    for (size_t i = 0; i < n && !devrt; i++)
        devrt = calls_devrt(in[i]);
    status = link_once(options, in, names, n, devrt && g_devrt[0], ptx, out, &log);
    if (status == JITOP_ECOMPILE && wants_devrt(log) && g_devrt[0] && !devrt) {
        free(log);
        status = link_once(options, in, names, n, true, ptx, out, &log);
    }
    if (status == JITOP_ECOMPILE) {
        char *joined = jitop__strv_join(options, " ");
        status = jitop__fail(
            JITOP_ECOMPILE, "link of %zu units for %s failed (nvJitLink %s):\n%s%s", n, arch,
            joined ? joined : "", log ? log : "(nvJitLink gave no log)",
            wants_devrt(log) && !g_devrt[0]
                ? "\nthe code launches kernels from the device, which needs the device runtime "
                  "libcudadevrt.a beside libnvJitLink: none was found"
                : "");
        free(joined);
    }
    free(log);
    return status;
}
