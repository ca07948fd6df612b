#include "cli.h"

#include "compile/compile.h" /* jitop__arch_valid: the CLI links the static library */

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

int jitop_cli_ctx_create(const char *cmd, const struct jitop_cli_build_args *a, jitop_ctx **ctx)
{
    jitop_config cfg;
    jitop_config_init(&cfg);
    /* The CLI only compiles and manages the cache: opening the driver would
     * cost milliseconds on every no-op build and fail on machines with no
     * GPU. The one place it is wanted (the default arch) has its own ctx. */
    cfg.compile_only = 1;
    if (a) {
        cfg.cache_dir = a->cache_dir;
        if (a->verbose)
            cfg.verbose = 1;
    }
    int rc = jitop_ctx_create(&cfg, ctx);
    if (rc != JITOP_OK) {
        fprintf(stderr, "jitop %s: %s: %s\n", cmd, jitop_strerror(rc), jitop_errmsg(NULL));
        return JITOP_CLI_EXIT_FAIL;
    }
    return JITOP_CLI_EXIT_OK;
}

/* Asks GPU 0 for its arch through a context that may open the driver. */
static int driver_arch(const char *cmd, struct jitop_cli_build_args *a)
{
    jitop_config cfg;
    jitop_ctx *ctx = NULL;
    const char *arch = NULL;
    int rc;
    jitop_config_init(&cfg);
    cfg.cache_dir = a->cache_dir;
    rc = jitop_ctx_create(&cfg, &ctx);
    if (rc == JITOP_OK)
        rc = jitop_ctx_arch(ctx, &arch);
    if (rc != JITOP_OK) {
        fprintf(stderr,
                "jitop %s: no target architecture: pass one with --arch sm_90 (several: --arch "
                "sm_80,sm_90) or set JITOP_ARCH=sm_90\n"
                "  (without either, GPU 0 is asked, and that failed: %s)\n",
                cmd, jitop_errmsg(ctx));
        rc = JITOP_CLI_EXIT_USAGE;
    } else if (jitop_cli_strs_push(&a->archs, arch) != 0) {
        fprintf(stderr, "jitop %s: out of memory\n", cmd);
        rc = JITOP_CLI_EXIT_FAIL;
    }
    jitop_ctx_destroy(ctx);
    return rc;
}

/* The archs from $JITOP_ARCH (a comma-separated list), else GPU 0's. */
static int default_archs(const char *cmd, struct jitop_cli_build_args *a)
{
    const char *env = getenv("JITOP_ARCH");
    if (!env || !*env)
        return driver_arch(cmd, a);
    const char *p = env;
    for (;;) {
        size_t len = strcspn(p, ",");
        if (len == 0) {
            fprintf(stderr, "jitop %s: JITOP_ARCH='%s': empty architecture in the list\n", cmd,
                    env);
            return JITOP_CLI_EXIT_USAGE;
        }
        if (jitop_cli_strs_pushn(&a->archs, p, len) != 0) {
            fprintf(stderr, "jitop %s: out of memory\n", cmd);
            return JITOP_CLI_EXIT_FAIL;
        }
        if (p[len] == '\0')
            return JITOP_CLI_EXIT_OK;
        p += len + 1;
    }
}

int jitop_cli_resolve_archs(const char *cmd, struct jitop_cli_build_args *a)
{
    int rc = a->archs.n > 0 ? JITOP_CLI_EXIT_OK : default_archs(cmd, a);
    if (rc != JITOP_CLI_EXIT_OK)
        return rc;
    /* An arch named twice (--arch sm_90,sm_90, or in two --arch flags) is
     * one target: the work is done once. The first spelling's place is
     * kept. */
    size_t kept = 0;
    for (size_t i = 0; i < a->archs.n; i++) {
        bool seen = false;
        for (size_t k = 0; k < kept && !seen; k++)
            seen = strcmp(a->archs.v[k], a->archs.v[i]) == 0;
        if (seen) {
            free(a->archs.v[i]);
            continue;
        }
        a->archs.v[kept++] = a->archs.v[i];
    }
    a->archs.n = kept;
    /* A malformed arch is a usage error, said once rather than once per
     * file; whether NVRTC supports a well-formed one is asked only where
     * something is compiled (it loads NVRTC). */
    for (size_t i = 0; i < a->archs.n; i++) {
        if (!jitop__arch_valid(a->archs.v[i])) {
            fputs("jitop ", stderr);
            jitop_cli_text(stderr, cmd, 0);
            fputs(": arch '", stderr);
            jitop_cli_text(stderr, a->archs.v[i], 0);
            fputs("' is not valid: expected sm_NN or compute_NN (for example sm_90, sm_90a, "
                  "compute_90; several: --arch sm_80,sm_90)\n",
                  stderr);
            return JITOP_CLI_EXIT_USAGE;
        }
    }
    return JITOP_CLI_EXIT_OK;
}

int jitop_cli_check_archs(const char *cmd, const char *const *archs, size_t n)
{
    int rc = JITOP_CLI_EXIT_OK;
    for (size_t i = 0; i < n; i++) {
        bool seen = false;
        for (size_t k = 0; k < i && !seen; k++)
            seen = strcmp(archs[k], archs[i]) == 0;
        if (seen)
            continue;
        int st = jitop__nvrtc_check_arch(archs[i]);
        if (st == JITOP_EINVAL) {
            fprintf(stderr, "jitop %s: ", cmd);
            jitop_cli_text(stderr, jitop_errmsg(NULL), 1);
            fputc('\n', stderr);
            rc = JITOP_CLI_EXIT_USAGE;
        }
    }
    return rc;
}
