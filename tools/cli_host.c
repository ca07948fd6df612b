/* `jitop build` of host sources (.c, .cc, .cpp, .cxx): built together, as
 * the host half of one module, into the cache (objects and the linked
 * shared object), so that a later jitop_load of the same sources and host
 * options finds them; no GPU needed. */
#include "cli.h"
#include "host/host.h"

#include <stdlib.h>
#include <string.h>

/* Takes the host sources out of files and the host-only options
 * (-Xhost=..., -Xhost-ld=...) out of options. */
static int take(jitop_cli_strs *from, jitop__strv *to, int (*is)(const char *))
{
    size_t kept = 0;
    for (size_t i = 0; i < from->n; i++) {
        if (is(from->v[i])) {
            if (jitop__strv_push(to, from->v[i]) != JITOP_OK)
                return -1;
            free(from->v[i]);
        } else {
            from->v[kept++] = from->v[i];
        }
    }
    from->n = kept;
    return 0;
}

static int is_host_source(const char *p)
{
    return jitop__host_is_source(p);
}

static int is_host_option(const char *o)
{
    return strncmp(o, "-Xhost=", 7) == 0 || strncmp(o, "-Xhost-ld=", 10) == 0;
}

int jitop_cli_build_host(const char *cmd, jitop_ctx *ctx, jitop_cli_strs *files,
                         jitop_cli_strs *options, int json)
{
    jitop__strv srcs = {0}, host_opts = {0}, abs = {0}, dev = {0}, cflags = {0}, ldflags = {0};
    jitop__host_lib lib;
    memset(&lib, 0, sizeof lib);
    int rc = JITOP_CLI_EXIT_OK;
    if (take(files, &srcs, is_host_source) != 0 || take(options, &host_opts, is_host_option) != 0) {
        fprintf(stderr, "jitop %s: out of memory\n", cmd);
        rc = JITOP_CLI_EXIT_FAIL;
        goto out;
    }
    if (srcs.n == 0)
        goto out;
    /* The host options, then the shared ones (-D, -U, -I), as jitop_load
     * splits a module's options. */
    for (size_t i = 0; i < options->n && rc == JITOP_CLI_EXIT_OK; i++)
        if (jitop__strv_push(&host_opts, options->v[i]) != JITOP_OK)
            rc = JITOP_CLI_EXIT_FAIL;
    int st = rc == JITOP_CLI_EXIT_OK
                 ? jitop__host_split_options((const char *const *)host_opts.v, host_opts.n, &dev,
                                             &cflags, &ldflags)
                 : JITOP_ENOMEM;
    for (size_t i = 0; st == JITOP_OK && i < srcs.n; i++) {
        char *p = jitop__abspath(srcs.v[i]);
        st = p ? jitop__strv_push(&abs, p) : jitop__fail_abspath(srcs.v[i]);
        free(p);
    }
    if (st == JITOP_OK)
        st = jitop__host_lib_build(ctx, "jitop build", &abs, &cflags, &ldflags, &lib);
    if (st != JITOP_OK) {
        fprintf(stderr, "jitop %s: host sources: %s\n", cmd, jitop_strerror(st));
        jitop_cli_text(stderr, jitop_errmsg(ctx), 1);
        fputc('\n', stderr);
        rc = JITOP_CLI_EXIT_FAIL;
        goto out;
    }
    for (size_t i = 0; i < srcs.n; i++) {
        if (json) {
            fputs("{\"file\":", stdout);
            jitop_cli_json_str(stdout, srcs.v[i]);
            printf(",\"arch\":\"host\",\"name\":null,\"status\":\"%s\",\"key\":\"%s\"}\n",
                   lib.cached ? "hit" : "built", lib.key);
        } else {
            jitop_cli_text(stdout, srcs.v[i], 0);
            printf(" host %s %s (%s)\n", lib.cached ? "hit" : "built", lib.key, lib.builder);
        }
    }
out:
    jitop__host_lib_free(&lib);
    jitop__strv_free(&srcs);
    jitop__strv_free(&host_opts);
    jitop__strv_free(&abs);
    jitop__strv_free(&dev);
    jitop__strv_free(&cflags);
    jitop__strv_free(&ldflags);
    return rc;
}
