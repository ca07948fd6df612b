#include "cli.h"

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

int jitop_cli_resolve_archs(const char *cmd, struct jitop_cli_build_args *a)
{
    if (a->archs.n > 0)
        return JITOP_CLI_EXIT_OK;
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
