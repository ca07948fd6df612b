/* jitop_ctx: its configuration (cache root, kernel directory, arch, cache
 * cap, verbosity), its teardown hooks, and its arch (jitop_ctx_arch).
 * jitop_ctx_create, which opens the cache and gives the context its way to
 * ask the device (ctx->device_arch), is the load room's (load/open.c). */
#include "base/base.h"

#include <errno.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define JITOP__STR2(x) #x
#define JITOP__STR(x) JITOP__STR2(x)

int jitop_version(void)
{
    return JITOP_VERSION_NUMBER;
}

const char *jitop_version_string(void)
{
    return JITOP__STR(JITOP_VERSION_MAJOR) "." JITOP__STR(JITOP_VERSION_MINOR) "." JITOP__STR(
        JITOP_VERSION_PATCH);
}

void jitop_config_init(jitop_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->verbose = -1;
}

static const char *nonempty_env(const char *name)
{
    const char *v = getenv(name);
    return v && *v ? v : NULL;
}

/* path made absolute into *out; what names it (an option, a variable) goes
 * first in the message of a failure. */
static int resolve_dir(const char *what, const char *path, char **out)
{
    *out = jitop__abspath(path);
    return *out ? JITOP_OK : jitop__fail_prefix(jitop__fail_abspath(path), "%s", what);
}

/* $JITOP_CACHE_DIR, else $XDG_CACHE_HOME/jitop, else ~/.cache/jitop. */
static int default_cache_dir(char **out)
{
    const char *v = nonempty_env("JITOP_CACHE_DIR");
    if (v)
        return resolve_dir("JITOP_CACHE_DIR", v, out);
    v = nonempty_env("XDG_CACHE_HOME");
    if (v && v[0] == '/') { /* the XDG spec says relative values are ignored */
        *out = jitop__sprintf("%s/jitop", v);
    } else {
        const char *home = nonempty_env("HOME");
        if (!home) {
            struct passwd *pw = getpwuid(getuid());
            home = pw ? pw->pw_dir : NULL;
        }
        if (!home)
            return jitop__fail(JITOP_EINVAL, "no cache directory: set JITOP_CACHE_DIR or HOME");
        *out = jitop__sprintf("%s/.cache/jitop", home);
    }
    return *out ? JITOP_OK : jitop__fail(JITOP_ENOMEM, "out of memory");
}

static bool is_dir(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* $JITOP_KERNEL_DIR, else the installed kernels, else the source tree's: an
 * installed library must not read a stale checkout, and a developer running
 * from the tree must not read an old install, hence the order and the test
 * that the directory really holds kernels. */
static int default_kernel_dir(char **out)
{
    const char *v = nonempty_env("JITOP_KERNEL_DIR");
    if (v)
        return resolve_dir("JITOP_KERNEL_DIR", v, out);
    const char *candidates[] = {JITOP_INSTALL_KERNEL_DIR, JITOP_SOURCE_KERNEL_DIR};
    const char *dir = NULL;
    for (size_t i = 0; !dir && i < sizeof candidates / sizeof *candidates; i++) {
        char *probe = jitop__sprintf("%s/layernorm.cu", candidates[i]);
        if (probe && access(probe, R_OK) == 0)
            dir = candidates[i];
        free(probe);
    }
    if (!dir)
        dir = is_dir(JITOP_SOURCE_KERNEL_DIR) ? JITOP_SOURCE_KERNEL_DIR : JITOP_INSTALL_KERNEL_DIR;
    *out = jitop__strdup(dir);
    return *out ? JITOP_OK : jitop__fail(JITOP_ENOMEM, "out of memory");
}

int jitop__parse_size(const char *s, int64_t *out)
{
    const char *p = s;
    bool negative = *p == '-';
    if (negative)
        p++;
    /* The whole part, exactly (no strtod: it takes hex, exponents, blanks,
     * inf and nan, none of which is a size). */
    uint64_t whole = 0;
    const char *digits = p;
    for (; *p >= '0' && *p <= '9'; p++) {
        if (whole > (UINT64_MAX - 9) / 10)
            return JITOP_EINVAL;
        whole = whole * 10 + (uint64_t)(*p - '0');
    }
    if (p == digits)
        return JITOP_EINVAL;
    /* A fraction: at most 9 digits, and at least one. */
    uint64_t frac = 0, scale = 1;
    if (*p == '.') {
        const char *fd = ++p;
        for (; *p >= '0' && *p <= '9'; p++) {
            if (p - fd == 9)
                return JITOP_EINVAL;
            frac = frac * 10 + (uint64_t)(*p - '0');
            scale *= 10;
        }
        if (p == fd)
            return JITOP_EINVAL;
    }
    int shift = 0;
    switch (*p) {
    case 'k': case 'K': shift = 10; p++; break;
    case 'm': case 'M': shift = 20; p++; break;
    case 'g': case 'G': shift = 30; p++; break;
    case 't': case 'T': shift = 40; p++; break;
    default: break;
    }
    if (shift && p[0] == 'i' && p[1] == 'B')
        p += 2;
    else if (*p == 'B')
        p++;
    if (*p != '\0' || whole > ((uint64_t)INT64_MAX >> shift))
        return JITOP_EINVAL;
    /* The fraction's bytes, rounded down: frac / scale < 1, so this is
     * below 2^40 and a double holds it exactly enough. A fraction of a
     * byte (0.5, 1.5) or one that rounds to nothing (0.0001K) is refused
     * rather than read as 0, which means the default. */
    uint64_t extra = (uint64_t)((double)frac / (double)scale * (double)((uint64_t)1 << shift));
    if (frac && (shift == 0 || extra == 0))
        return JITOP_EINVAL;
    uint64_t v = (whole << shift) + extra;
    if (v > (uint64_t)INT64_MAX)
        return JITOP_EINVAL;
    if (negative) {
        if (v == 0)
            return JITOP_EINVAL; /* "-0" says nothing */
        *out = -1;
    } else {
        *out = (int64_t)v;
    }
    return JITOP_OK;
}

int jitop__ctx_new(const jitop_config *cfg_in, jitop_ctx **out)
{
    int status = JITOP_OK;
    jitop_ctx *ctx = NULL;
    jitop_config defaults;
    if (!out)
        return jitop__fail(JITOP_EINVAL, "jitop_ctx_create: out is NULL");
    *out = NULL;
    if (!cfg_in) {
        jitop_config_init(&defaults);
        cfg_in = &defaults;
    }
    ctx = calloc(1, sizeof *ctx);
    if (!ctx)
        return jitop__fail(JITOP_ENOMEM, "out of memory");
    ctx->cfg = *cfg_in;
    ctx->cfg.cache_dir = ctx->cfg.arch = ctx->cfg.kernel_dir = NULL;
    if (pthread_mutex_init(&ctx->lock, NULL) != 0) {
        free(ctx);
        return jitop__fail(JITOP_ENOMEM, "jitop_ctx_create: cannot create a mutex");
    }

    ctx->verbose = cfg_in->verbose;
    if (ctx->verbose < 0) {
        const char *v = getenv("JITOP_VERBOSE");
        ctx->verbose = v && *v && strcmp(v, "0") != 0;
    }

    status = cfg_in->cache_dir ? resolve_dir("cache_dir", cfg_in->cache_dir, &ctx->cache_dir_owned)
                               : default_cache_dir(&ctx->cache_dir_owned);
    if (status != JITOP_OK)
        goto out;
    ctx->cfg.cache_dir = ctx->cache_dir_owned;

    status = cfg_in->kernel_dir ? resolve_dir("kernel_dir", cfg_in->kernel_dir, &ctx->kernel_dir)
                                : default_kernel_dir(&ctx->kernel_dir);
    if (status != JITOP_OK)
        goto out;
    ctx->cfg.kernel_dir = ctx->kernel_dir;

    const char *arch = cfg_in->arch ? cfg_in->arch : nonempty_env("JITOP_ARCH");
    if (arch) {
        ctx->arch = jitop__strdup(arch);
        if (!ctx->arch) {
            status = jitop__fail(JITOP_ENOMEM, "out of memory");
            goto out;
        }
    }

    int64_t max_size = cfg_in->cache_max_size;
    if (max_size == 0) {
        const char *v = nonempty_env("JITOP_CACHE_MAX_SIZE");
        max_size = JITOP__DEFAULT_CACHE_MAX;
        if (v && jitop__parse_size(v, &max_size) != JITOP_OK) {
            status = jitop__fail(JITOP_EINVAL,
                                 "JITOP_CACHE_MAX_SIZE=%s: expected a number of bytes or a size "
                                 "such as 64K, 500M or 1.5G (powers of 1024), 0 for the default "
                                 "(1G) or -1 for no cap",
                                 v);
            goto out;
        }
        if (max_size == 0) /* as for cache_max_size, 0 means the default */
            max_size = JITOP__DEFAULT_CACHE_MAX;
    }
    ctx->cfg.cache_max_size = max_size;
    *out = ctx;
    ctx = NULL;
out:
    jitop_ctx_destroy(ctx);
    return status;
}

int jitop__ctx_on_destroy(jitop_ctx *ctx, void (*fn)(jitop_ctx *ctx))
{
    for (int i = 0; i < ctx->nhooks; i++)
        if (ctx->hooks[i].fn == fn)
            return JITOP_OK;
    if (ctx->nhooks == (int)(sizeof ctx->hooks / sizeof ctx->hooks[0]))
        return jitop__fail(JITOP_ENOMEM, "jitop: too many context teardown hooks");
    ctx->hooks[ctx->nhooks++].fn = fn;
    return JITOP_OK;
}

void jitop_ctx_destroy(jitop_ctx *ctx)
{
    if (!ctx)
        return;
    while (ctx->nhooks > 0)
        ctx->hooks[--ctx->nhooks].fn(ctx);
    pthread_mutex_destroy(&ctx->lock);
    free(ctx->cache_dir_owned);
    free(ctx->kernel_dir);
    free(ctx->arch);
    free(ctx);
}

const char *jitop_cache_dir(const jitop_ctx *ctx)
{
    return ctx ? ctx->cache_dir_owned : NULL;
}

int jitop_ctx_arch(jitop_ctx *ctx, const char **arch)
{
    int status = JITOP_OK;
    if (!ctx || !arch)
        return jitop__fail(JITOP_EINVAL, "jitop_ctx_arch: NULL argument");
    if (pthread_mutex_lock(&ctx->lock) != 0)
        return jitop__fail(JITOP_EINVAL, "jitop_ctx_arch: cannot lock the context");
    if (!ctx->arch) {
        char buf[32];
        if (ctx->cfg.compile_only) {
            status = jitop__fail(JITOP_ENODRIVER,
                                 "no target architecture: this context is compile-only, so the GPU "
                                 "is not asked; pass an arch (for example --arch sm_90) or set "
                                 "JITOP_ARCH=sm_90");
            goto out;
        }
        pthread_mutex_unlock(&ctx->lock);
        status = ctx->device_arch(ctx, buf, sizeof buf);
        if (pthread_mutex_lock(&ctx->lock) != 0)
            return jitop__fail(JITOP_EINVAL, "jitop_ctx_arch: cannot lock the context");
        if (status != JITOP_OK) {
            jitop__fail_prefix(status, "no target architecture (pass one, for example --arch "
                                       "sm_90, or set JITOP_ARCH=sm_90), and the GPU could not be "
                                       "asked");
            goto out;
        }
        if (!ctx->arch && !(ctx->arch = jitop__strdup(buf))) {
            status = jitop__fail(JITOP_ENOMEM, "out of memory");
            goto out;
        }
    }
    *arch = ctx->arch;
out:
    pthread_mutex_unlock(&ctx->lock);
    return status;
}
