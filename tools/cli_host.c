/* `jitop build` of host sources (.c, .cc, .cpp, .cxx): built together, as
 * the host half of one module, into the cache (objects and the linked
 * shared object), so that a later jitop_load of the same sources and host
 * options finds them; no GPU needed. */
#include "cli.h"
#include "host/host.h"

#include <stdlib.h>
#include <string.h>

/* Moves the items of from that is() accepts to to. */
static int take(jitop_cli_strs *from, jitop_cli_strs *to, int (*is)(const char *))
{
    size_t kept = 0;
    int rc = 0;
    for (size_t i = 0; i < from->n; i++) {
        if (rc == 0 && is(from->v[i])) {
            rc = jitop_cli_strs_push(to, from->v[i]);
            free(from->v[i]);
        } else {
            from->v[kept++] = from->v[i];
        }
    }
    from->n = kept;
    return rc;
}

static int is_host_source(const char *p)
{
    return jitop__host_is_source(p);
}

static int is_host_option(const char *o)
{
    return strncmp(o, "-Xhost=", 7) == 0 || strncmp(o, "-Xhost-ld=", 10) == 0;
}

int jitop_cli_take_host(const char *cmd, jitop_cli_strs *files, jitop_cli_strs *options,
                        jitop_cli_strs *srcs, jitop_cli_strs *host_options)
{
    int rc = take(files, srcs, is_host_source);
    if (rc == 0)
        rc = take(options, host_options, is_host_option);
    for (size_t i = 0; rc == 0 && i < options->n; i++)
        rc = jitop_cli_strs_push(host_options, options->v[i]);
    if (rc != 0) {
        fprintf(stderr, "jitop %s: out of memory\n", cmd);
        return JITOP_CLI_EXIT_FAIL;
    }
    return JITOP_CLI_EXIT_OK;
}

int jitop_cli_build_host(const char *cmd, jitop_ctx *ctx, jitop_cli_strs *files,
                         jitop_cli_strs *options, int json)
{
    jitop_cli_strs srcs = {0}, host_opts = {0};
    jitop__strv abs = {0}, dev = {0}, cflags = {0}, ldflags = {0};
    jitop__host_lib lib;
    memset(&lib, 0, sizeof lib);
    int rc = jitop_cli_take_host(cmd, files, options, &srcs, &host_opts);
    if (rc != JITOP_CLI_EXIT_OK || srcs.n == 0)
        goto out;
    /* The host options and the shared ones (-D, -U, -I), as jitop_load
     * splits a module's options. */
    int st = jitop__host_split_options((const char *const *)host_opts.v, host_opts.n, &dev,
                                       &cflags, &ldflags);
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
    jitop_cli_strs_free(&srcs);
    jitop_cli_strs_free(&host_opts);
    jitop__strv_free(&abs);
    jitop__strv_free(&dev);
    jitop__strv_free(&cflags);
    jitop__strv_free(&ldflags);
    return rc;
}
