/* Writes the fuzz seeds that jitop itself makes: entries and manifests of
 * a few real builds (a cubin with __device__ variables, template instances
 * with a header chain, PTX) and the cubins inside them, into
 * CORPUS/fuzz_entry, CORPUS/fuzz_manifest and CORPUS/fuzz_cubin. Run by
 * `make fuzz-seeds` after a format change. Real NVRTC, no GPU. */
#include "cache/cache_private.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *corpus;
static char dir[64];

static void die(const char *what)
{
    fprintf(stderr, "seeds: %s: %s\n", what, jitop_errmsg(NULL));
    exit(1);
}

static char *put(const char *name, const char *text)
{
    char *path = jitop__sprintf("%s/%s", dir, name);
    FILE *f = path ? fopen(path, "w") : NULL;
    if (!f || fputs(text, f) < 0 || fclose(f) != 0)
        die(name);
    return path;
}

static void copy(const char *from, const char *target, const char *name)
{
    char *data = NULL, *to = jitop__sprintf("%s/%s/%s", corpus, target, name);
    size_t len = 0;
    if (!to || jitop__read_file(from, &data, &len) != JITOP_OK)
        die(from);
    FILE *f = fopen(to, "wb");
    if (!f || fwrite(data, 1, len, f) != len || fclose(f) != 0)
        die(to);
    printf("%s (%zu bytes)\n", to, len);
    free(data);
    free(to);
}

static void seed(jitop_ctx *ctx, const char *label, const char *src, const char *arch,
                 const char *const *opts, size_t nopts, const char *const *names, size_t nnames,
                 bool cubin)
{
    jitop_build_result r;
    int status = jitop_build(ctx, src, arch, opts, nopts, names, nnames, &r);
    if (status == JITOP_ENOTFOUND && nnames > 0) {
        /* A name the source does not declare: the answer is an entry too
         * (no code, NVRTC's errors as its log), under the key the unit's
         * explain gives. */
        char *why = NULL;
        int hit = 0;
        if (jitop_explain(ctx, src, arch, opts, nopts, names, nnames, &hit, &why) != JITOP_OK ||
            !hit || sscanf(why, "cached: %32s", r.key) != 1)
            die(label);
        jitop_free(why);
        status = JITOP_OK;
    }
    if (status != JITOP_OK)
        die(label);
    char *entry = jitop__sprintf("%s/v%d/%.2s/%s", jitop_cache_dir(ctx), JITOP__FORMAT_VERSION,
                                 r.key, r.key);
    char *name = jitop__sprintf("%s-%s", label, arch);
    copy(entry, "fuzz_entry", name);
    jitop__unit u;
    char id[33];
    if (jitop__unit_init(&u, src, NULL, opts, nopts, names, nnames, arch) != JITOP_OK)
        die(label);
    jitop__manifest_id(&u, id);
    jitop__unit_free(&u);
    char *manifest = jitop__sprintf("%s/v%d/manifests/%.2s/%s", jitop_cache_dir(ctx),
                                    JITOP__FORMAT_VERSION, id, id);
    copy(manifest, "fuzz_manifest", name);
    if (cubin) {
        jitop__entry e;
        bool found = false;
        if (jitop__cache_get(ctx->cache, r.key, &e, &found) != JITOP_OK || !found)
            die(label);
        char *to = jitop__sprintf("%s/fuzz_cubin/%s.cubin", corpus, name);
        FILE *f = to ? fopen(to, "wb") : NULL;
        if (!f || fwrite(e.bin.data, 1, e.bin.size, f) != e.bin.size || fclose(f) != 0)
            die("cubin");
        printf("%s (%zu bytes)\n", to, e.bin.size);
        free(to);
        jitop__entry_free(&e);
    }
    free(entry);
    free(manifest);
    free(name);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: seeds CORPUS_DIR\n");
        return 2;
    }
    corpus = argv[1];
    snprintf(dir, sizeof dir, "/tmp/jitop-seeds-XXXXXX");
    if (!mkdtemp(dir))
        die("mkdtemp");
    char *sub = jitop__sprintf("%s/inc", dir), *cache = jitop__sprintf("%s/cache", dir);
    if (!sub || !cache || mkdir(sub, 0700) != 0)
        die("mkdir");
    char *globals = put("globals.cu", "__device__ float table[64];\n"
                                      "__device__ int counter = 3;\n"
                                      "extern \"C\" __global__ void bump(float *x) {\n"
                                      "    x[threadIdx.x] = table[threadIdx.x] + counter++;\n"
                                      "}\n");
    put("inc/scale.cuh", "#pragma once\n#include \"../common.h\"\n"
                         "template <typename T> __device__ T scale(T v) { return v * FACTOR; }\n");
    put("common.h", "#define FACTOR 3\n");
    char *tmpl = put("tmpl.cu", "#include <scale.cuh>\n"
                                "template <typename T, int N>\n"
                                "__global__ void fill(T *x) { x[threadIdx.x] = scale(T(N)); }\n");
    jitop_config cfg;
    jitop_config_init(&cfg);
    cfg.cache_dir = cache;
    cfg.compile_only = 1;
    cfg.verbose = 0;
    jitop_ctx *ctx = NULL;
    if (jitop_ctx_create(&cfg, &ctx) != JITOP_OK)
        die("context");
    char *inc = jitop__sprintf("-I%s", sub);
    const char *opts[] = {inc, "-DEXTRA=1", "--use_fast_math"};
    const char *names[] = {"fill<float, 4>", "fill<int, 7>"};
    seed(ctx, "globals", globals, "sm_90", NULL, 0, NULL, 0, true);
    seed(ctx, "template-names", tmpl, "sm_80", opts, 3, names, 2, true);
    seed(ctx, "ptx", globals, "compute_90", opts + 1, 1, NULL, 0, false);
    /* An entry with NVRTC's warnings as its log, and the cached answer
     * that a source declares no such name (flag bit 1). */
    char *warn = put("warn.cu", "extern \"C\" __global__ void w(int *out) {\n"
                                "    int unused_here = 1;\n"
                                "    *out = 1;\n"
                                "}\n");
    const char *absent[] = {"absent<float>"};
    seed(ctx, "warnings", warn, "sm_90", NULL, 0, NULL, 0, false);
    seed(ctx, "undeclared", warn, "sm_90", NULL, 0, absent, 1, false);
    jitop_ctx_destroy(ctx);
    char *rm = jitop__sprintf("rm -rf '%s'", dir);
    if (!rm || system(rm) != 0)
        die("rm");
    free(rm); free(inc); free(globals); free(tmpl); free(warn); free(sub); free(cache);
    return 0;
}
