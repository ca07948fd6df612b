#include "bench_nvrtc.h"

#include <nvrtc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int nvrtc_ok(nvrtcResult r, const char *what, char *err, size_t errcap)
{
    if (r == NVRTC_SUCCESS)
        return 1;
    snprintf(err, errcap, "%s: %s", what, nvrtcGetErrorString(r));
    return 0;
}

/* Appends the first part of the compile log to err (the file:line of a
 * source error is at its start). */
static void append_log(nvrtcProgram prog, char *err, size_t errcap)
{
    size_t size = 0;
    if (nvrtcGetProgramLogSize(prog, &size) != NVRTC_SUCCESS || size <= 1)
        return;
    char *log = malloc(size);
    if (!log)
        return;
    if (nvrtcGetProgramLog(prog, log) == NVRTC_SUCCESS) {
        size_t used = strlen(err);
        if (used + 3 < errcap)
            snprintf(err + used, errcap - used, ": %s", log);
    }
    free(log);
}

int bench_nvrtc_compile(const char *text, const char *path, const char *arch,
                        const char *const *opts, size_t nopts,
                        const char *const *names, size_t nnames,
                        bench_nvrtc_out *out, char *err, size_t errcap)
{
    int rc = -1;
    nvrtcProgram prog = NULL;
    const char **all = NULL;
    char archopt[64];
    memset(out, 0, sizeof *out);

    if (!nvrtc_ok(nvrtcCreateProgram(&prog, text, path, 0, NULL, NULL), "nvrtcCreateProgram", err, errcap)) {
        prog = NULL;
        goto out;
    }
    for (size_t i = 0; i < nnames; i++)
        if (!nvrtc_ok(nvrtcAddNameExpression(prog, names[i]), "nvrtcAddNameExpression", err, errcap))
            goto out;
    all = calloc(nopts + 1, sizeof *all);
    if (!all) {
        snprintf(err, errcap, "out of memory");
        goto out;
    }
    snprintf(archopt, sizeof archopt, "--gpu-architecture=%s", arch);
    all[0] = archopt;
    for (size_t i = 0; i < nopts; i++)
        all[i + 1] = opts[i];
    nvrtcResult cr = nvrtcCompileProgram(prog, (int)(nopts + 1), all);
    if (!nvrtc_ok(cr, "nvrtcCompileProgram", err, errcap)) {
        append_log(prog, err, errcap);
        goto out;
    }
    if (!nvrtc_ok(nvrtcGetCUBINSize(prog, &out->cubin_size), "nvrtcGetCUBINSize", err, errcap))
        goto out;
    out->cubin = malloc(out->cubin_size ? out->cubin_size : 1);
    out->lowered = calloc(nnames ? nnames : 1, sizeof *out->lowered);
    if (!out->cubin || !out->lowered) {
        snprintf(err, errcap, "out of memory");
        goto out;
    }
    if (!nvrtc_ok(nvrtcGetCUBIN(prog, out->cubin), "nvrtcGetCUBIN", err, errcap))
        goto out;
    for (size_t i = 0; i < nnames; i++) {
        const char *low = NULL;
        if (!nvrtc_ok(nvrtcGetLoweredName(prog, names[i], &low), "nvrtcGetLoweredName", err, errcap))
            goto out;
        /* The lowered name lives in the program: copy it before destroying. */
        out->lowered[i] = strdup(low);
        out->nnames = i + 1;
        if (!out->lowered[i]) {
            snprintf(err, errcap, "out of memory");
            goto out;
        }
    }
    rc = 0;
out:
    free(all);
    if (prog && nvrtcDestroyProgram(&prog) != NVRTC_SUCCESS && rc == 0) {
        snprintf(err, errcap, "nvrtcDestroyProgram failed");
        rc = -1;
    }
    if (rc != 0)
        bench_nvrtc_out_free(out);
    return rc;
}

void bench_nvrtc_out_free(bench_nvrtc_out *out)
{
    for (size_t i = 0; i < out->nnames; i++)
        free(out->lowered[i]);
    free(out->lowered);
    free(out->cubin);
    memset(out, 0, sizeof *out);
}

void bench_nvrtc_version(char *buf, size_t cap)
{
    int major = 0, minor = 0;
    if (nvrtcVersion(&major, &minor) != NVRTC_SUCCESS)
        snprintf(buf, cap, "unknown");
    else
        snprintf(buf, cap, "%d.%d", major, minor);
}
