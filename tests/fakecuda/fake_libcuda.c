/*
 * A fake CUDA driver (libcuda.so.1) for testing jitop's loader on machines
 * without a GPU. It is built only for the tests (never installed, never part
 * of libjitop) and loaded in place of the real driver through
 * LD_LIBRARY_PATH (tests/cpu/test_loader_fake.c).
 *
 * What it fakes. Every entry point jitop resolves (JITOP__CUDA_FUNCS in
 * src/load/driver.h; the fake fails to compile when that list gains one it
 * lacks) is served through cuGetProcAddress_v2. One device, "Fake H100",
 * compute capability 9.0, 132 SMs, 227 KiB of opt-in shared memory per block;
 * $FAKE_CUDA_DEVICES ("90,80,90": one compute capability per device, at most
 * FAKE_MAX_DEVICES) presents several, each with its own primary context.
 * cuModuleLoadData takes the cubin jitop built with the real NVRTC and finds
 * its kernels from the ELF section names (".text.<kernel>"), or PTX and its
 * ".entry" kernels (see "PTX images" below). Loading is lazy,
 * as on a real driver: a listed function's code is put on the "GPU" by
 * cuFuncLoad, cuModuleGetFunction or, failing those, its first launch (which
 * the stats count, so a test can see that jitop_op_get did it). No kernel
 * runs: a launch only records that it happened, and stores the id of the
 * module it launched from into the int its first argument points to, so that
 * a test can see which image a launch used (only when its first parameter is
 * a pointer). Parameter layouts are read from the cubin's .nv.info.<kernel>
 * attributes (EIATTR_KPARAM_INFO), as the real driver reports them. A
 * module's __device__ / __constant__ variables are its symbol table's
 * objects: cuModuleGetGlobal hands out host memory holding their initial
 * bytes. Memory calls use host memory; event timings read 0 ms.
 *
 * What it checks (abort() with a "FAKE:" line on stderr, so the test program
 * dies and the runner counts a failure):
 *  - a module unloaded twice, or used (function lookup, load, launch) after
 *    its unload;
 *  - an unload that could race a queued kernel: the real driver queues a
 *    launch and returns, and cuModuleUnload promises nothing about kernels
 *    still queued, so jitop must finish a cuCtxSynchronize *started after* an
 *    image's last launch before unloading that image. Launches get sequence
 *    numbers; a sync covers the launches numbered up to what it saw when it
 *    started; unloading a module whose last launch no finished sync covers
 *    aborts;
 *  - loading, unloading or looking up a function without a current context
 *    (CUDA_ERROR_INVALID_CONTEXT, as the module API answers);
 *  - a launch with more than 48 KiB of dynamic shared memory on a function
 *    whose limit was not raised (cuFuncSetAttribute) fails, as on a GPU;
 *  - primary context releases without a retain;
 *  - a module unloaded, looked up or launched while another device's
 *    context is current (one module lives in the context it was loaded in);
 *  - a copy into or out of a module's global after its unload, or past the
 *    global's end.
 * Modules stay allocated after their unload (that is how use-after-unload
 * is seen) and are freed when the fake itself is unloaded at process exit.
 *
 * Costs: one mutex around all bookkeeping, which serializes launches; fine
 * for tests, which count interleavings, not throughput.
 */
#include "load/driver.h"
#include "fake_libcuda.h"

#include <elf.h>
#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FAKE_DRIVER_VERSION 13000
#define FAKE_SM_COUNT 132
#define FAKE_SMEM_OPTIN 232448
#define FAKE_SMEM_DEFAULT 49152
#define FAKE_MAX_DEVICES 8

typedef struct fake_module fake_module;

typedef struct fake_kernel {
    char *name;
    fake_module *mod;
    bool code_loaded;     /* on the "GPU" (g_lock) */
    int max_dynamic_smem; /* CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES (g_lock) */
    /* Its parameters, from the cubin's .nv.info.<name> (see find_params);
     * a kernel without that section takes one 8-byte parameter. */
    size_t nparams;
    size_t *param_offset, *param_size;
} fake_kernel;

/* A __device__ / __constant__ variable of a module: host memory standing
 * in for device memory, with the cubin's initial bytes. */
typedef struct fake_global {
    char *name;
    unsigned char *bytes;
    size_t size;
} fake_global;

struct fake_module {
    long id;                   /* 1, 2, ... in load order */
    CUcontext ctx;             /* the context current at its load */
    bool loaded;               /* false after cuModuleUnload */
    unsigned long last_launch; /* sequence number of its newest launch, 0: none */
    fake_kernel *kernels;
    size_t nkernels;
    fake_global *globals;
    size_t nglobals;
    fake_module *next;         /* every module ever loaded, freed at exit */
};

/* Guards everything below and every module's fields. */
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static fake_module *g_modules;
static unsigned long g_launch_seq;    /* launches so far */
static unsigned long g_completed_seq; /* launches a finished sync covers */
static fake_cuda_stats g_stats;

/* One primary context per device: any non-NULL handle will do, jitop only
 * passes it back; the device is the handle's index. */
static int g_primary_ctx_objects[FAKE_MAX_DEVICES];
static int g_primary_refs[FAKE_MAX_DEVICES];
/* The context current on each thread. A pthread key, not _Thread_local:
 * with a _Thread_local here, LeakSanitizer's exit scan crashed (signal 11 in
 * its tracer) in the SAN=1 build, where this library is dlopen'ed. */
static pthread_once_t g_current_once = PTHREAD_ONCE_INIT;
static pthread_key_t g_current_key;

static void current_key_create(void)
{
    if (pthread_key_create(&g_current_key, NULL) != 0)
        abort();
}

static CUcontext current(void)
{
    if (pthread_once(&g_current_once, current_key_create) != 0)
        abort();
    return (CUcontext)pthread_getspecific(g_current_key);
}

static CUresult set_current(CUcontext ctx)
{
    if (pthread_once(&g_current_once, current_key_create) != 0)
        abort();
    return pthread_setspecific(g_current_key, ctx) == 0 ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

static int g_stream_object, g_event_object;

/* The devices' compute capabilities (major * 10 + minor), from
 * $FAKE_CUDA_DEVICES, read once; a malformed list aborts. */
static pthread_once_t g_devices_once = PTHREAD_ONCE_INIT;
static int g_device_cc[FAKE_MAX_DEVICES];
static int g_device_count;

static void devices_read(void)
{
    const char *list = getenv("FAKE_CUDA_DEVICES");
    if (!list || !*list) {
        g_device_cc[0] = 90;
        g_device_count = 1;
        return;
    }
    for (const char *p = list; *p;) {
        char *end;
        long cc = strtol(p, &end, 10);
        if (end == p || cc < 10 || cc > 999 || g_device_count == FAKE_MAX_DEVICES ||
            (*end != ',' && *end != '\0')) {
            fprintf(stderr, "FAKE: FAKE_CUDA_DEVICES=%s: want up to %d compute capabilities "
                            "like 90,80\n", list, FAKE_MAX_DEVICES);
            abort();
        }
        g_device_cc[g_device_count++] = (int)cc;
        p = *end ? end + 1 : end;
    }
}

static int device_count(void)
{
    if (pthread_once(&g_devices_once, devices_read) != 0)
        abort();
    return g_device_count;
}

static bool device_ok(CUdevice device)
{
    return device >= 0 && device < device_count();
}

static void lock(void)
{
    if (pthread_mutex_lock(&g_lock) != 0)
        abort();
}

static void unlock(void)
{
    if (pthread_mutex_unlock(&g_lock) != 0)
        abort();
}

static void die(const char *what, const fake_module *mod)
{
    fprintf(stderr, "FAKE: %s (module %ld)\n", what, mod ? mod->id : 0L);
    abort();
}

/* Called with g_lock held: mod is loaded, in the context current now. */
static void require_loaded(const fake_module *mod, const char *use)
{
    if (!mod->loaded)
        die(use, mod);
    CUcontext cur = current();
    if (cur && mod->ctx != cur) {
        fprintf(stderr, "FAKE: %s: module %ld belongs to another context than the current one\n",
                use, mod->id);
        abort();
    }
}

/* Puts k's code on the "GPU" once (g_lock held). */
static void code_load(fake_kernel *k)
{
    if (!k->code_loaded) {
        k->code_loaded = true;
        g_stats.functions_loaded++;
    }
}

static CUresult CUDAAPI fake_cuInit(unsigned int flags)
{
    return flags == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

static CUresult CUDAAPI fake_cuDriverGetVersion(int *version)
{
    if (!version)
        return CUDA_ERROR_INVALID_VALUE;
    *version = FAKE_DRIVER_VERSION;
    return CUDA_SUCCESS;
}

static CUresult CUDAAPI fake_cuGetErrorName(CUresult error, const char **name)
{
    switch (error) {
    case CUDA_SUCCESS: *name = "CUDA_SUCCESS"; break;
    case CUDA_ERROR_INVALID_VALUE: *name = "CUDA_ERROR_INVALID_VALUE"; break;
    case CUDA_ERROR_OUT_OF_MEMORY: *name = "CUDA_ERROR_OUT_OF_MEMORY"; break;
    case CUDA_ERROR_INVALID_CONTEXT: *name = "CUDA_ERROR_INVALID_CONTEXT"; break;
    case CUDA_ERROR_INVALID_DEVICE: *name = "CUDA_ERROR_INVALID_DEVICE"; break;
    case CUDA_ERROR_INVALID_IMAGE: *name = "CUDA_ERROR_INVALID_IMAGE"; break;
    case CUDA_ERROR_NOT_FOUND: *name = "CUDA_ERROR_NOT_FOUND"; break;
    case CUDA_ERROR_UNSUPPORTED_PTX_VERSION: *name = "CUDA_ERROR_UNSUPPORTED_PTX_VERSION"; break;
    default: *name = "CUDA_ERROR_UNKNOWN"; break;
    }
    return CUDA_SUCCESS;
}

static CUresult CUDAAPI fake_cuGetErrorString(CUresult error, const char **text)
{
    (void)error;
    *text = "reported by the fake CUDA driver (tests/fakecuda)";
    return CUDA_SUCCESS;
}

static CUresult CUDAAPI fake_cuDeviceGet(CUdevice *device, int ordinal)
{
    if (!device_ok(ordinal))
        return CUDA_ERROR_INVALID_DEVICE;
    *device = ordinal;
    return CUDA_SUCCESS;
}

static CUresult CUDAAPI fake_cuDeviceGetCount(int *count)
{
    *count = device_count();
    return CUDA_SUCCESS;
}

static CUresult CUDAAPI fake_cuDeviceGetAttribute(int *value, CUdevice_attribute attr,
                                                  CUdevice device)
{
    if (!device_ok(device))
        return CUDA_ERROR_INVALID_DEVICE;
    switch (attr) {
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: *value = g_device_cc[device] / 10; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: *value = g_device_cc[device] % 10; break;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: *value = FAKE_SM_COUNT; break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: *value = FAKE_SMEM_OPTIN; break;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *value = 1024; break;
    default: return CUDA_ERROR_INVALID_VALUE; /* jitop asks only for the ones above */
    }
    return CUDA_SUCCESS;
}

static CUresult CUDAAPI fake_cuDeviceGetName(char *name, int len, CUdevice device)
{
    if (!device_ok(device))
        return CUDA_ERROR_INVALID_DEVICE;
    if (len <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    snprintf(name, (size_t)len, "Fake sm_%d", g_device_cc[device]);
    return CUDA_SUCCESS;
}

static CUresult CUDAAPI fake_cuDevicePrimaryCtxRetain(CUcontext *ctx, CUdevice device)
{
    if (!device_ok(device))
        return CUDA_ERROR_INVALID_DEVICE;
    lock();
    g_stats.primary_ctx_refs++;
    g_primary_refs[device]++;
    unlock();
    *ctx = (CUcontext)&g_primary_ctx_objects[device];
    return CUDA_SUCCESS;
}

static CUresult CUDAAPI fake_cuDevicePrimaryCtxRelease(CUdevice device)
{
    if (!device_ok(device))
        return CUDA_ERROR_INVALID_DEVICE;
    lock();
    if (g_primary_refs[device] == 0)
        die("primary context released more often than retained", NULL);
    g_primary_refs[device]--;
    g_stats.primary_ctx_refs--;
    unlock();
    return CUDA_SUCCESS;
}

static CUresult CUDAAPI fake_cuCtxGetCurrent(CUcontext *ctx)
{
    *ctx = current();
    return CUDA_SUCCESS;
}

static CUresult CUDAAPI fake_cuCtxSetCurrent(CUcontext ctx)
{
    return set_current(ctx);
}

/* No context stack: one context exists, so push and pop only set it. */
static CUresult CUDAAPI fake_cuCtxPushCurrent(CUcontext ctx)
{
    return set_current(ctx);
}

static CUresult CUDAAPI fake_cuCtxPopCurrent(CUcontext *ctx)
{
    if (ctx)
        *ctx = current();
    return set_current(NULL);
}

static CUresult CUDAAPI fake_cuCtxGetDevice(CUdevice *device)
{
    CUcontext cur = current();
    if (!cur)
        return CUDA_ERROR_INVALID_CONTEXT;
    *device = (CUdevice)((int *)cur - g_primary_ctx_objects);
    return CUDA_SUCCESS;
}

/* Covers the launches made before it started: a launch that another thread
 * makes while the sync waits may still be queued when it returns. The yield
 * between the two halves lets other threads launch in that window. */
static CUresult CUDAAPI fake_cuCtxSynchronize(void)
{
    if (!current())
        return CUDA_ERROR_INVALID_CONTEXT;
    lock();
    unsigned long covered = g_launch_seq;
    unlock();
    sched_yield();
    lock();
    if (covered > g_completed_seq)
        g_completed_seq = covered;
    g_stats.syncs++;
    unlock();
    return CUDA_SUCCESS;
}

/* Reads an ELF structure at any offset without assuming alignment. */
static bool read_at(const unsigned char *image, size_t image_size, size_t offset, void *out,
                    size_t size)
{
    if (offset > image_size || size > image_size - offset)
        return false;
    memcpy(out, image + offset, size);
    return true;
}

/* ---- parameters and globals, read from the cubin as the real driver does */

static bool section_at(const unsigned char *image, size_t image_size, const Elf64_Ehdr *eh,
                       size_t i, Elf64_Shdr *sh)
{
    return i < eh->e_shnum &&
           read_at(image, image_size, eh->e_shoff + i * sizeof *sh, sh, sizeof *sh) &&
           (sh->sh_type == SHT_NOBITS ||
            (sh->sh_offset <= image_size && sh->sh_size <= image_size - sh->sh_offset));
}

/* The parameter entries of a kernel's .nv.info.<name> section: the
 * attribute list is 4-byte records (format, attribute, a u16 value or, for
 * format 4 (EIFMT_SVAL), the size of a payload that follows). A parameter's
 * payload: u32 index, u16 ordinal, u16 offset, then a u32 whose bits 18..31
 * are the size (EIATTR_KPARAM_INFO, 0x17), or the size itself (0x45, which
 * long parameter lists use: seen with 2000 parameters). */
static CUresult kernel_params(const unsigned char *p, size_t n, fake_kernel *k)
{
    size_t count = 0;
    for (int pass = 0; pass < 2; pass++) {
        for (size_t off = 0; off + 4 <= n;) {
            unsigned fmt = p[off], attr = p[off + 1];
            unsigned val = (unsigned)p[off + 2] | (unsigned)p[off + 3] << 8;
            size_t payload = fmt == 4 ? val : 0;
            if (payload > n - off - 4)
                return CUDA_ERROR_INVALID_IMAGE;
            if (fmt == 4 && (attr == 0x17 || attr == 0x45) && payload >= 12) {
                const unsigned char *q = p + off + 4;
                unsigned ordinal = (unsigned)q[4] | (unsigned)q[5] << 8;
                unsigned offset = (unsigned)q[6] | (unsigned)q[7] << 8;
                uint32_t flags = (uint32_t)q[8] | (uint32_t)q[9] << 8 | (uint32_t)q[10] << 16 |
                                 (uint32_t)q[11] << 24;
                if (pass == 0) {
                    count = ordinal + 1 > count ? ordinal + 1 : count;
                } else if (ordinal < count) {
                    k->param_offset[ordinal] = offset;
                    k->param_size[ordinal] = attr == 0x17 ? flags >> 18 : flags & 0xffff;
                }
            }
            off += 4 + payload;
        }
        if (pass == 0) {
            if (count == 0)
                return CUDA_SUCCESS;
            k->param_offset = calloc(2 * count, sizeof *k->param_offset);
            if (!k->param_offset)
                return CUDA_ERROR_OUT_OF_MEMORY;
            k->param_size = k->param_offset + count;
            k->nparams = count;
        }
    }
    return CUDA_SUCCESS;
}

static CUresult find_params(const unsigned char *image, size_t image_size, const Elf64_Ehdr *eh,
                            const char *strtab, size_t strtab_size, fake_module *mod)
{
    static const char prefix[] = ".nv.info.";
    for (size_t i = 0; i < eh->e_shnum; i++) {
        Elf64_Shdr sh;
        if (!section_at(image, image_size, eh, i, &sh) || sh.sh_name >= strtab_size)
            return CUDA_ERROR_INVALID_IMAGE;
        const char *section = strtab + sh.sh_name;
        if (strncmp(section, prefix, sizeof prefix - 1) != 0 || sh.sh_type == SHT_NOBITS)
            continue;
        for (size_t j = 0; j < mod->nkernels; j++) {
            fake_kernel *k = &mod->kernels[j];
            if (strcmp(k->name, section + sizeof prefix - 1) != 0 || k->param_offset)
                continue;
            CUresult r = kernel_params(image + sh.sh_offset, sh.sh_size, k);
            if (r != CUDA_SUCCESS)
                return r;
        }
    }
    return CUDA_SUCCESS;
}

/* Only kernels are functions of a module: in a linked (-rdc) image device
 * functions have .text sections too. A kernel's symbol is marked as an
 * entry (STO_CUDA_ENTRY, 0x10, in st_other). */
static CUresult keep_entries(const unsigned char *image, size_t image_size, const Elf64_Ehdr *eh,
                             fake_module *mod)
{
    for (size_t i = 0; i < eh->e_shnum; i++) {
        Elf64_Shdr symtab, names;
        if (!section_at(image, image_size, eh, i, &symtab))
            return CUDA_ERROR_INVALID_IMAGE;
        if (symtab.sh_type != SHT_SYMTAB)
            continue;
        if (!section_at(image, image_size, eh, symtab.sh_link, &names) ||
            names.sh_type == SHT_NOBITS)
            return CUDA_ERROR_INVALID_IMAGE;
        size_t kept = 0;
        for (size_t k = 0; k < mod->nkernels; k++) {
            bool entry = false;
            for (size_t j = 0; !entry && j < symtab.sh_size / sizeof(Elf64_Sym); j++) {
                Elf64_Sym sym;
                memcpy(&sym, image + symtab.sh_offset + j * sizeof sym, sizeof sym);
                entry = ELF64_ST_TYPE(sym.st_info) == STT_FUNC && (sym.st_other & 0x10) &&
                        sym.st_name < names.sh_size &&
                        strncmp((const char *)image + names.sh_offset + sym.st_name,
                                mod->kernels[k].name, names.sh_size - sym.st_name) == 0;
            }
            if (entry)
                mod->kernels[kept++] = mod->kernels[k];
            else
                free(mod->kernels[k].name);
        }
        mod->nkernels = kept;
        break;
    }
    return CUDA_SUCCESS;
}

/* The variables of the symbol table: objects (STT_OBJECT, or the CUDA
 * object type 13 of a relocatable cubin) defined in a section; those of
 * PROGBITS sections get their initial bytes, the rest (.nv.global) zeros. */
static CUresult find_globals(const unsigned char *image, size_t image_size, const Elf64_Ehdr *eh,
                             fake_module *mod)
{
    for (size_t i = 0; i < eh->e_shnum; i++) {
        Elf64_Shdr symtab, names;
        if (!section_at(image, image_size, eh, i, &symtab))
            return CUDA_ERROR_INVALID_IMAGE;
        if (symtab.sh_type != SHT_SYMTAB)
            continue;
        if (!section_at(image, image_size, eh, symtab.sh_link, &names) ||
            names.sh_type == SHT_NOBITS)
            return CUDA_ERROR_INVALID_IMAGE;
        size_t nsyms = symtab.sh_size / sizeof(Elf64_Sym);
        mod->globals = calloc(nsyms ? nsyms : 1, sizeof *mod->globals);
        if (!mod->globals)
            return CUDA_ERROR_OUT_OF_MEMORY;
        for (size_t j = 0; j < nsyms; j++) {
            Elf64_Sym sym;
            Elf64_Shdr where;
            memcpy(&sym, image + symtab.sh_offset + j * sizeof sym, sizeof sym);
            unsigned type = ELF64_ST_TYPE(sym.st_info);
            if ((type != STT_OBJECT && type != 13) || sym.st_shndx == SHN_UNDEF ||
                sym.st_shndx >= SHN_LORESERVE)
                continue;
            if (sym.st_name >= names.sh_size ||
                !memchr(image + names.sh_offset + sym.st_name, '\0', names.sh_size - sym.st_name) ||
                !section_at(image, image_size, eh, sym.st_shndx, &where))
                return CUDA_ERROR_INVALID_IMAGE;
            fake_global *g = &mod->globals[mod->nglobals];
            g->size = sym.st_size;
            g->name = strdup((const char *)image + names.sh_offset + sym.st_name);
            g->bytes = calloc(g->size ? g->size : 1, 1);
            if (!g->name || !g->bytes) {
                free(g->name);
                free(g->bytes);
                return CUDA_ERROR_OUT_OF_MEMORY;
            }
            mod->nglobals++;
            if (where.sh_type == SHT_PROGBITS && sym.st_value <= where.sh_size &&
                g->size <= where.sh_size - sym.st_value)
                memcpy(g->bytes, image + where.sh_offset + sym.st_value, g->size);
        }
        break;
    }
    return CUDA_SUCCESS;
}

/* The kernels of a cubin: its ".text.<name>" sections. The image has no
 * size argument; the section header table ends it (nvcc and NVRTC put it
 * last), so its end bounds every read. */
static CUresult find_kernels(const unsigned char *image, fake_module *mod)
{
    static const char prefix[] = ".text.";
    Elf64_Ehdr eh;
    memcpy(&eh, image, sizeof eh);
    if (memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 || eh.e_ident[EI_CLASS] != ELFCLASS64 ||
        eh.e_shentsize != sizeof(Elf64_Shdr) || eh.e_shstrndx >= eh.e_shnum)
        return CUDA_ERROR_INVALID_IMAGE;
    size_t image_size = (size_t)eh.e_shoff + (size_t)eh.e_shnum * sizeof(Elf64_Shdr);
    Elf64_Shdr names;
    if (!read_at(image, image_size, eh.e_shoff + (size_t)eh.e_shstrndx * sizeof names, &names,
                 sizeof names) ||
        names.sh_offset > image_size || names.sh_size > image_size - names.sh_offset)
        return CUDA_ERROR_INVALID_IMAGE;
    const char *strtab = (const char *)image + names.sh_offset;

    mod->kernels = calloc(eh.e_shnum, sizeof *mod->kernels);
    if (!mod->kernels)
        return CUDA_ERROR_OUT_OF_MEMORY;
    for (size_t i = 0; i < eh.e_shnum; i++) {
        Elf64_Shdr sh;
        if (!read_at(image, image_size, eh.e_shoff + i * sizeof sh, &sh, sizeof sh) ||
            sh.sh_name >= names.sh_size ||
            !memchr(strtab + sh.sh_name, '\0', names.sh_size - sh.sh_name))
            return CUDA_ERROR_INVALID_IMAGE;
        const char *section = strtab + sh.sh_name;
        if (strncmp(section, prefix, sizeof prefix - 1) != 0)
            continue;
        fake_kernel *k = &mod->kernels[mod->nkernels];
        k->name = strdup(section + sizeof prefix - 1);
        if (!k->name)
            return CUDA_ERROR_OUT_OF_MEMORY;
        k->mod = mod;
        k->max_dynamic_smem = FAKE_SMEM_DEFAULT;
        mod->nkernels++;
    }
    CUresult r = keep_entries(image, image_size, &eh, mod);
    if (r == CUDA_SUCCESS)
        r = find_params(image, image_size, &eh, strtab, names.sh_size, mod);
    if (r == CUDA_SUCCESS)
        r = find_globals(image, image_size, &eh, mod);
    return r;
}

/* ------------------------------------------------- PTX images
 *
 * A PTX image (text, as NVRTC makes for a compute_XX arch) is "compiled" by
 * listing its ".entry" kernels. FAKE_CUDA_MAX_PTX ("8.5") is the newest PTX
 * ISA version the fake's JIT takes, as an older driver's: a newer
 * ".version" fails with CUDA_ERROR_UNSUPPORTED_PTX_VERSION. Unset: any. */

static CUresult find_ptx_kernels(const char *ptx, fake_module *mod)
{
    const char *v = strstr(ptx, ".version ");
    const char *max = getenv("FAKE_CUDA_MAX_PTX");
    int major = 0, minor = 0, max_major = 0, max_minor = 0;
    if (!v || sscanf(v, ".version %d.%d", &major, &minor) != 2)
        return CUDA_ERROR_INVALID_IMAGE;
    if (max && sscanf(max, "%d.%d", &max_major, &max_minor) == 2 &&
        (major > max_major || (major == max_major && minor > max_minor)))
        return CUDA_ERROR_UNSUPPORTED_PTX_VERSION;
    size_t cap = 0;
    for (const char *p = strstr(ptx, ".entry "); p; p = strstr(p + 1, ".entry "))
        cap++;
    mod->kernels = calloc(cap + 1, sizeof *mod->kernels);
    if (!mod->kernels)
        return CUDA_ERROR_OUT_OF_MEMORY;
    for (const char *p = strstr(ptx, ".entry "); p; p = strstr(p + 1, ".entry ")) {
        const char *name = p + strlen(".entry ");
        size_t n = strcspn(name, "( \t\n");
        fake_kernel *k = &mod->kernels[mod->nkernels];
        if (!(k->name = strndup(name, n)))
            return CUDA_ERROR_OUT_OF_MEMORY;
        k->mod = mod;
        k->max_dynamic_smem = FAKE_SMEM_DEFAULT;
        mod->nkernels++;
    }
    return CUDA_SUCCESS;
}

/* ------------------------------------------------- end of PTX images */

static void module_free(fake_module *mod)
{
    for (size_t i = 0; i < mod->nkernels; i++) {
        free(mod->kernels[i].name);
        free(mod->kernels[i].param_offset);
    }
    free(mod->kernels);
    for (size_t i = 0; i < mod->nglobals; i++) {
        free(mod->globals[i].name);
        free(mod->globals[i].bytes);
    }
    free(mod->globals);
    free(mod);
}

/* A module goes into the current context, so there must be one. */
static CUresult CUDAAPI fake_cuModuleLoadData(CUmodule *module, const void *code)
{
    if (!module || !code)
        return CUDA_ERROR_INVALID_VALUE;
    if (!current())
        return CUDA_ERROR_INVALID_CONTEXT;
    fake_module *mod = calloc(1, sizeof *mod);
    if (!mod)
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult r = memcmp(code, ELFMAG, SELFMAG) == 0 ? find_kernels(code, mod)
                                                    : find_ptx_kernels(code, mod);
    if (r != CUDA_SUCCESS) {
        module_free(mod);
        return r;
    }
    lock();
    mod->id = ++g_stats.modules_ever;
    mod->loaded = true;
    mod->ctx = current();
    mod->next = g_modules;
    g_modules = mod;
    g_stats.modules_loaded++;
    unlock();
    *module = (CUmodule)mod;
    return CUDA_SUCCESS;
}

static CUresult CUDAAPI fake_cuModuleUnload(CUmodule module)
{
    fake_module *mod = (fake_module *)module;
    if (!current())
        return CUDA_ERROR_INVALID_CONTEXT;
    lock();
    require_loaded(mod, "cuModuleUnload of a module already unloaded");
    if (mod->last_launch > g_completed_seq) {
        fprintf(stderr,
                "FAKE: module %ld unloaded while its launch %lu may still be queued (the last "
                "finished cuCtxSynchronize covers launches up to %lu)\n",
                mod->id, mod->last_launch, g_completed_seq);
        abort();
    }
    mod->loaded = false;
    g_stats.modules_loaded--;
    g_stats.unloads++;
    unlock();
    return CUDA_SUCCESS;
}

/* Like the real driver's, a lookup by name also loads the function's code. */
static CUresult CUDAAPI fake_cuModuleGetFunction(CUfunction *fn, CUmodule module,
                                                 const char *name)
{
    fake_module *mod = (fake_module *)module;
    CUresult r = CUDA_ERROR_NOT_FOUND;
    if (!current())
        return CUDA_ERROR_INVALID_CONTEXT;
    lock();
    require_loaded(mod, "cuModuleGetFunction on an unloaded module");
    for (size_t i = 0; i < mod->nkernels; i++) {
        if (strcmp(mod->kernels[i].name, name) == 0) {
            code_load(&mod->kernels[i]);
            *fn = (CUfunction)&mod->kernels[i];
            r = CUDA_SUCCESS;
            break;
        }
    }
    unlock();
    return r;
}

static CUresult CUDAAPI fake_cuModuleGetFunctionCount(unsigned int *count, CUmodule module)
{
    fake_module *mod = (fake_module *)module;
    lock();
    require_loaded(mod, "cuModuleGetFunctionCount on an unloaded module");
    *count = (unsigned int)mod->nkernels;
    unlock();
    return CUDA_SUCCESS;
}

/* Listed functions are not loaded (the driver's lazy loading). */
static CUresult CUDAAPI fake_cuModuleEnumerateFunctions(CUfunction *fns, unsigned int n,
                                                        CUmodule module)
{
    fake_module *mod = (fake_module *)module;
    lock();
    require_loaded(mod, "cuModuleEnumerateFunctions on an unloaded module");
    for (size_t i = 0; i < n && i < mod->nkernels; i++)
        fns[i] = (CUfunction)&mod->kernels[i];
    unlock();
    return CUDA_SUCCESS;
}

/* The name is owned by the module, which outlives every unload. */
static CUresult CUDAAPI fake_cuFuncGetName(const char **name, CUfunction fn)
{
    *name = ((const fake_kernel *)fn)->name;
    return CUDA_SUCCESS;
}

static CUresult CUDAAPI fake_cuFuncLoad(CUfunction fn)
{
    fake_kernel *k = (fake_kernel *)fn;
    if (!current())
        return CUDA_ERROR_INVALID_CONTEXT;
    lock();
    require_loaded(k->mod, "cuFuncLoad on an unloaded module");
    code_load(k);
    unlock();
    return CUDA_SUCCESS;
}

static CUresult CUDAAPI fake_cuFuncGetParamInfo(CUfunction fn, size_t index, size_t *offset,
                                                size_t *size)
{
    const fake_kernel *k = (const fake_kernel *)fn;
    lock();
    g_stats.describe_calls++;
    unlock();
    if (!k->param_offset) { /* no .nv.info for it: one pointer */
        if (index >= 1)
            return CUDA_ERROR_INVALID_VALUE;
        *offset = 0;
        *size = sizeof(void *);
        return CUDA_SUCCESS;
    }
    if (index >= k->nparams)
        return CUDA_ERROR_INVALID_VALUE;
    *offset = k->param_offset[index];
    *size = k->param_size[index];
    return CUDA_SUCCESS;
}

static CUresult CUDAAPI fake_cuFuncGetAttribute(int *value, CUfunction_attribute attr,
                                                CUfunction fn)
{
    fake_kernel *k = (fake_kernel *)fn;
    lock();
    g_stats.describe_calls++;
    unlock();
    switch (attr) {
    case CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *value = 1024; break;
    case CU_FUNC_ATTRIBUTE_NUM_REGS: /* FAKE_CUDA_NUM_REGS: what a test needs the build to have */
        *value = getenv("FAKE_CUDA_NUM_REGS") ? atoi(getenv("FAKE_CUDA_NUM_REGS")) : 16;
        break;
    case CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES: *value = 0; break;
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH: *value = 0; break; /* no __cluster_dims__ */
    case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES:
        lock();
        *value = k->max_dynamic_smem;
        unlock();
        break;
    default: return CUDA_ERROR_INVALID_VALUE;
    }
    return CUDA_SUCCESS;
}

static CUresult CUDAAPI fake_cuFuncSetAttribute(CUfunction fn, CUfunction_attribute attr,
                                                int value)
{
    fake_kernel *k = (fake_kernel *)fn;
    if (attr != CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES)
        return CUDA_ERROR_INVALID_VALUE;
    if (value < 0 || value > FAKE_SMEM_OPTIN)
        return CUDA_ERROR_INVALID_VALUE;
    lock();
    require_loaded(k->mod, "cuFuncSetAttribute on an unloaded module");
    k->max_dynamic_smem = value;
    unlock();
    return CUDA_SUCCESS;
}

/* Records the launch (see the queued-kernel check at the top). */
static CUresult launch(fake_kernel *k, unsigned int shared_bytes, void **args)
{
    if (!current())
        return CUDA_ERROR_INVALID_CONTEXT;
    CUresult r = CUDA_SUCCESS;
    lock();
    require_loaded(k->mod, "launch of a kernel of an unloaded module");
    if (shared_bytes > (unsigned int)k->max_dynamic_smem) {
        r = CUDA_ERROR_INVALID_VALUE;
    } else {
        if (!k->code_loaded)
            g_stats.loaded_at_launch++;
        code_load(k);
        k->mod->last_launch = ++g_launch_seq;
        g_stats.launches++;
        /* Only where the first parameter is a pointer (or unknown). */
        if (args && args[0] && (!k->param_offset || k->param_size[0] == sizeof(int *))) {
            int *out = *(int **)args[0];
            if (out)
                *out = (int)k->mod->id;
        }
    }
    unlock();
    return r;
}

static CUresult CUDAAPI fake_cuLaunchKernel(CUfunction fn, unsigned int gx, unsigned int gy,
                                            unsigned int gz, unsigned int bx, unsigned int by,
                                            unsigned int bz, unsigned int shared_bytes,
                                            CUstream stream, void **args, void **extra)
{
    (void)stream;
    if (gx == 0 || gy == 0 || gz == 0 || bx == 0 || by == 0 || bz == 0 || extra)
        return CUDA_ERROR_INVALID_VALUE;
    lock();
    g_stats.last_grid[0] = gx, g_stats.last_grid[1] = gy, g_stats.last_grid[2] = gz;
    g_stats.last_block[0] = bx, g_stats.last_block[1] = by, g_stats.last_block[2] = bz;
    g_stats.last_smem = shared_bytes;
    g_stats.last_cooperative = 0;
    unlock();
    return launch((fake_kernel *)fn, shared_bytes, args);
}

static CUresult CUDAAPI fake_cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction fn,
                                              void **args, void **extra)
{
    if (!config)
        return CUDA_ERROR_INVALID_VALUE;
    int cooperative = 0;
    for (unsigned i = 0; i < config->numAttrs; i++)
        if (config->attrs[i].id == CU_LAUNCH_ATTRIBUTE_COOPERATIVE)
            cooperative = config->attrs[i].value.cooperative != 0;
    /* FAKE_CUDA_NO_COOPERATIVE set: a device that refuses cooperative grids
     * (as under MPS limits), read at each launch */
    if (cooperative && getenv("FAKE_CUDA_NO_COOPERATIVE") != NULL)
        return CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE;
    const CUresult r = fake_cuLaunchKernel(fn, config->gridDimX, config->gridDimY,
                                           config->gridDimZ, config->blockDimX, config->blockDimY,
                                           config->blockDimZ, config->sharedMemBytes,
                                           config->hStream, args, extra);
    lock();
    g_stats.last_cooperative = cooperative;
    unlock();
    return r;
}

static CUresult CUDAAPI fake_cuOccupancyMaxPotentialBlockSize(int *min_grid, int *block_size,
                                                              CUfunction fn,
                                                              CUoccupancyB2DSize smem_of_block,
                                                              size_t smem, int block_limit)
{
    (void)fn, (void)smem_of_block, (void)smem, (void)block_limit;
    *min_grid = FAKE_SM_COUNT;
    *block_size = 1024;
    return CUDA_SUCCESS;
}

static CUresult CUDAAPI fake_cuOccupancyMaxActiveBlocksPerMultiprocessor(int *blocks,
                                                                         CUfunction fn,
                                                                         int block_size,
                                                                         size_t smem)
{
    (void)fn, (void)smem;
    *blocks = block_size > 0 ? 2048 / block_size : 0;
    return CUDA_SUCCESS;
}

/* Like a GPU whose SMs do not all group into clusters: 12 of the fake's SMs
 * take no cluster of 2 or more, and a block with over half the shared
 * memory has an SM to itself (else two per SM). */
static CUresult CUDAAPI fake_cuOccupancyMaxActiveClusters(int *clusters, CUfunction fn,
                                                          const CUlaunchConfig *config)
{
    (void)fn;
    unsigned size = 0;
    for (unsigned i = 0; i < config->numAttrs; i++)
        if (config->attrs[i].id == CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION)
            size = config->attrs[i].value.clusterDim.x;
    lock();
    g_stats.cluster_queries++;
    g_stats.last_cluster_size = size;
    g_stats.last_cluster_smem = config->sharedMemBytes;
    unlock();
    const int per_sm = config->sharedMemBytes > FAKE_SMEM_OPTIN / 2 ? 1 : 2;
    const int cl = size ? (int)size : 1;
    *clusters = (FAKE_SM_COUNT - (cl > 1 ? 12 : 0)) * per_sm / cl;
    return CUDA_SUCCESS;
}

static CUresult CUDAAPI fake_cuMemAlloc(CUdeviceptr *ptr, size_t bytes)
{
    void *p = malloc(bytes ? bytes : 1);
    if (!p)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *ptr = (CUdeviceptr)p;
    return CUDA_SUCCESS;
}

static CUresult CUDAAPI fake_cuMemFree(CUdeviceptr ptr)
{
    free((void *)ptr);
    return CUDA_SUCCESS;
}

/* Stream order means nothing to the fake: it runs nothing on a device. */
static CUresult CUDAAPI fake_cuMemAllocAsync(CUdeviceptr *ptr, size_t bytes, CUstream stream)
{
    (void)stream;
    return fake_cuMemAlloc(ptr, bytes);
}

static CUresult CUDAAPI fake_cuMemFreeAsync(CUdeviceptr ptr, CUstream stream)
{
    (void)stream;
    return fake_cuMemFree(ptr);
}

/* A copy that touches a module's global must stay inside it, and the
 * module must still be loaded (its memory is gone on a real GPU). Other
 * addresses are cuMemAlloc's. Counts the copies into or out of globals. */
static void check_global_copy(CUdeviceptr dptr, size_t bytes, bool async)
{
    lock();
    for (fake_module *mod = g_modules; mod; mod = mod->next) {
        for (size_t i = 0; i < mod->nglobals; i++) {
            const fake_global *g = &mod->globals[i];
            uintptr_t lo = (uintptr_t)g->bytes, p = (uintptr_t)dptr;
            if (p < lo || p >= lo + (g->size ? g->size : 1))
                continue;
            require_loaded(mod, "copy to or from a global of an unloaded module");
            if (bytes > g->size - (p - lo))
                die("copy past the end of a global", mod);
            g_stats.global_copies++;
            if (async)
                g_stats.global_async_copies++;
        }
    }
    unlock();
}

static CUresult CUDAAPI fake_cuMemcpyHtoD(CUdeviceptr dst, const void *src, size_t bytes)
{
    check_global_copy(dst, bytes, false);
    memcpy((void *)dst, src, bytes);
    return CUDA_SUCCESS;
}

static CUresult CUDAAPI fake_cuMemcpyDtoH(void *dst, CUdeviceptr src, size_t bytes)
{
    check_global_copy(src, bytes, false);
    memcpy(dst, (const void *)src, bytes);
    return CUDA_SUCCESS;
}

/* Nothing runs on a device: an async copy is done when it returns. */
static CUresult CUDAAPI fake_cuMemcpyHtoDAsync(CUdeviceptr dst, const void *src, size_t bytes,
                                               CUstream stream)
{
    (void)stream;
    check_global_copy(dst, bytes, true);
    memcpy((void *)dst, src, bytes);
    return CUDA_SUCCESS;
}

static CUresult CUDAAPI fake_cuMemcpyDtoHAsync(void *dst, CUdeviceptr src, size_t bytes,
                                               CUstream stream)
{
    (void)stream;
    check_global_copy(src, bytes, true);
    memcpy(dst, (const void *)src, bytes);
    return CUDA_SUCCESS;
}

static CUresult CUDAAPI fake_cuModuleGetGlobal(CUdeviceptr *dptr, size_t *bytes, CUmodule module,
                                               const char *name)
{
    fake_module *mod = (fake_module *)module;
    CUresult r = CUDA_ERROR_NOT_FOUND;
    if (!current())
        return CUDA_ERROR_INVALID_CONTEXT;
    if (!name)
        return CUDA_ERROR_INVALID_VALUE;
    lock();
    require_loaded(mod, "cuModuleGetGlobal on an unloaded module");
    g_stats.global_lookups++;
    for (size_t i = 0; i < mod->nglobals; i++) {
        if (strcmp(mod->globals[i].name, name) == 0) {
            if (dptr)
                *dptr = (CUdeviceptr)mod->globals[i].bytes;
            if (bytes)
                *bytes = mod->globals[i].size;
            r = CUDA_SUCCESS;
            break;
        }
    }
    unlock();
    return r;
}

static CUresult CUDAAPI fake_cuMemsetD8(CUdeviceptr dst, unsigned char value, size_t bytes)
{
    memset((void *)dst, value, bytes);
    return CUDA_SUCCESS;
}

static CUresult CUDAAPI fake_cuStreamCreate(CUstream *stream, unsigned int flags)
{
    (void)flags;
    *stream = (CUstream)&g_stream_object;
    return CUDA_SUCCESS;
}

static CUresult CUDAAPI fake_cuStreamDestroy(CUstream stream)
{
    (void)stream;
    return CUDA_SUCCESS;
}

static CUresult CUDAAPI fake_cuStreamSynchronize(CUstream stream)
{
    (void)stream;
    return CUDA_SUCCESS;
}

static CUresult CUDAAPI fake_cuEventCreate(CUevent *event, unsigned int flags)
{
    (void)flags;
    *event = (CUevent)&g_event_object;
    return CUDA_SUCCESS;
}

static CUresult CUDAAPI fake_cuEventDestroy(CUevent event)
{
    (void)event;
    return CUDA_SUCCESS;
}

static CUresult CUDAAPI fake_cuEventRecord(CUevent event, CUstream stream)
{
    (void)event, (void)stream;
    return CUDA_SUCCESS;
}

static CUresult CUDAAPI fake_cuEventSynchronize(CUevent event)
{
    (void)event;
    return CUDA_SUCCESS;
}

static CUresult CUDAAPI fake_cuEventElapsedTime(float *ms, CUevent start, CUevent end)
{
    (void)start, (void)end;
    *ms = 0.0f;
    return CUDA_SUCCESS;
}

static CUresult CUDAAPI fake_cuMemcpyDtoDAsync(CUdeviceptr dst, CUdeviceptr src, size_t bytes,
                                               CUstream stream)
{
    (void)stream;
    memmove((void *)dst, (const void *)src, bytes);
    return CUDA_SUCCESS;
}

static CUresult CUDAAPI fake_cuStreamWaitEvent(CUstream stream, CUevent event, unsigned int flags)
{
    (void)stream, (void)event, (void)flags;
    return CUDA_SUCCESS;
}

static CUresult CUDAAPI fake_cuMemsetD32Async(CUdeviceptr dst, unsigned int value, size_t n,
                                              CUstream stream)
{
    (void)stream;
    unsigned int *p = (unsigned int *)dst;
    for (size_t i = 0; i < n; i++)
        p[i] = value;
    lock();
    g_stats.memsets++;
    unlock();
    return CUDA_SUCCESS;
}

/* Checks what the driver checks of a 2-D map (alignment of the address and
 * the strides, the box within 256 and the inner box within the swizzle's span) and
 * writes the arguments' bytes into the map, so that a launch passes them. */
static CUresult CUDAAPI fake_cuTensorMapEncodeTiled(
    CUtensorMap *map, CUtensorMapDataType type, cuuint32_t rank, void *base,
    const cuuint64_t *dims, const cuuint64_t *strides, const cuuint32_t *box,
    const cuuint32_t *elem_strides, CUtensorMapInterleave interleave, CUtensorMapSwizzle swizzle,
    CUtensorMapL2promotion l2, CUtensorMapFloatOOBfill oob)
{
    (void)l2, (void)oob, (void)interleave;
    if (!map || !base || !dims || !box || !elem_strides || rank < 1 || rank > 5 ||
        (uintptr_t)base % 16 != 0)
        return CUDA_ERROR_INVALID_VALUE;
    const size_t es = type == CU_TENSOR_MAP_DATA_TYPE_FLOAT16 ||
                              type == CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                          ? 2
                          : 4;
    for (cuuint32_t i = 0; i < rank; i++) {
        if (box[i] < 1 || box[i] > 256 || dims[i] < 1)
            return CUDA_ERROR_INVALID_VALUE;
        if (i + 1 < rank && (!strides || strides[i] % 16 != 0))
            return CUDA_ERROR_INVALID_VALUE;
    }
    if ((swizzle == CU_TENSOR_MAP_SWIZZLE_128B && box[0] * es > 128) ||
        (swizzle == CU_TENSOR_MAP_SWIZZLE_64B && box[0] * es > 64) ||
        (swizzle == CU_TENSOR_MAP_SWIZZLE_32B && box[0] * es > 32))
        return CUDA_ERROR_INVALID_VALUE;
    if ((box[0] * es) % 16 != 0)
        return CUDA_ERROR_INVALID_VALUE;
    memset(map, 0, sizeof *map);
    memcpy(map, &base, sizeof base);
    lock();
    g_stats.tensor_maps++;
    g_stats.last_box[0] = box[0];
    g_stats.last_box[1] = rank > 1 ? box[1] : 1;
    unlock();
    return CUDA_SUCCESS;
}

/* Each fake must have the prototype jitop calls it with (the header's, which
 * cuda.c checks against the ABI version it asks for). */
#define FAKE_CHECK_PROTOTYPE(fn, version)                                                         \
    _Static_assert(__builtin_types_compatible_p(__typeof__(fn) *, __typeof__(&fake_##fn)),       \
                   "fake_" #fn " does not have the prototype of " #fn);
JITOP__CUDA_FUNCS(FAKE_CHECK_PROTOTYPE)
#undef FAKE_CHECK_PROTOTYPE

#define FAKE_ENTRY(fn, version) {#fn, (void *)fake_##fn},
static const struct {
    const char *name;
    void *fn;
} g_entry_points[] = {JITOP__CUDA_FUNCS(FAKE_ENTRY)};
#undef FAKE_ENTRY

/* The only symbol jitop looks up with dlsym. The version asked for is not
 * checked: each fake has the one prototype jitop uses. */
__attribute__((visibility("default"))) CUresult CUDAAPI
cuGetProcAddress_v2(const char *symbol, void **pfn, int version, cuuint64_t flags,
                    CUdriverProcAddressQueryResult *found)
{
    (void)version, (void)flags;
    for (size_t i = 0; i < sizeof g_entry_points / sizeof g_entry_points[0]; i++) {
        if (strcmp(g_entry_points[i].name, symbol) == 0) {
            lock();
            g_stats.symbols_resolved++;
            unlock();
            *pfn = g_entry_points[i].fn;
            if (found)
                *found = CU_GET_PROC_ADDRESS_SUCCESS;
            return CUDA_SUCCESS;
        }
    }
    *pfn = NULL;
    if (found)
        *found = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    return CUDA_ERROR_NOT_FOUND;
}

__attribute__((visibility("default"))) void fake_cuda_get_stats(fake_cuda_stats *out)
{
    lock();
    *out = g_stats;
    unlock();
}

/* Runs when the process exits (the fake is never dlclose'd before): frees
 * the modules kept for the use-after-unload check. */
__attribute__((destructor)) static void free_modules(void)
{
    lock();
    while (g_modules) {
        fake_module *next = g_modules->next;
        module_free(g_modules);
        g_modules = next;
    }
    unlock();
}
