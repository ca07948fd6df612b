/* Several units linked together (-rdc, -dlto) with the real NVRTC and the
 * real nvJitLink, loaded through the fake CUDA driver (tests/fakecuda),
 * which lists a linked cubin's kernels and globals from its ELF sections:
 * cross-unit calls and extern __device__ variables, the option spellings,
 * the cache (cold, warm, an edit of one unit), hot reload, template
 * instances, dynamic parallelism (the device runtime), link errors, and
 * PTX linking for compute_XX. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fakecuda.h"
#include "jitop.h"
#include "build/build.h"
#include "load/driver.h"
#include "load/load.h"
#include "testutil.h"

static fake_cuda_stats_fn g_fake_stats;

/* nvJitLink keeps a few KB of every link that fails (the error tests'
 * links, and an LTO link retried with the device runtime), which
 * nvJitLinkDestroy does not free: not jitop's memory. LeakSanitizer reads
 * this in the SAN build (valgrind: tests/valgrind.supp). */
const char *__lsan_default_suppressions(void);
const char *__lsan_default_suppressions(void)
{
    return "leak:libnvJitLink.so\n";
}

static fake_cuda_stats stats(void)
{
    fake_cuda_stats s;
    g_fake_stats(&s);
    return s;
}

static int g_compiles, g_links;
static void count_compile(const char *source)
{
    (void)source;
    g_compiles++;
}
static void count_link(const char *label)
{
    (void)label;
    g_links++;
}

static const jitop_dim3 one = {1, 1, 1};

/* a.cu calls b.cu's device function and reads its extern variable. */
static const char a_src[] =
    "extern __device__ int shared_counter;\n"
    "extern __device__ float bscale(float x);\n"
    "__constant__ float coeffs[4];\n"
    "extern \"C\" __global__ void ka(float *o, int n)\n"
    "{ int i = threadIdx.x; if (i < n) o[i] = bscale(o[i]) + shared_counter + coeffs[i & 3]; }\n"
    "template <typename T> __global__ void ta(T *o) { o[0] = (T)bscale((float)o[0]); }\n";
static const char b_fmt[] =
    "__device__ int shared_counter = %d;\n"
    "__device__ float bscale(float x) { return %d.0f * x; }\n"
    "extern \"C\" __global__ void kb(int *o) { *o = shared_counter; }\n";

typedef struct two {
    char *dir, *cache, *a, *b;
} two;

static void write_b(two *t, int version)
{
    char *text = NULL;
    if (asprintf(&text, b_fmt, 7 + version, 2 + version) < 0)
        fail_msg("asprintf failed");
    free(t->b);
    t->b = jt_write_rename(t->dir, "b.cu", text);
    free(text);
}

static void two_open(two *t)
{
    memset(t, 0, sizeof *t);
    t->dir = jt_tmpdir();
    t->cache = jt_path(t->dir, "cache");
    t->a = jt_write(t->dir, "a.cu", a_src);
    write_b(t, 0);
}

static void two_close(two *t)
{
    jt_rm_rf(t->dir);
    free(t->dir);
    free(t->cache);
    free(t->a);
    free(t->b);
}

static jitop_module *load_two(jitop_ctx *ctx, two *t, const char *opt1, const char *opt2)
{
    const char *sources[] = {t->a, t->b};
    const char *options[] = {opt1, opt2};
    jitop_module *m = NULL;
    int st = jitop_load(ctx, "linked", sources, 2, options, opt2 ? 2 : 1, &m);
    if (st != JITOP_OK)
        fail_msg("jitop_load -rdc: %s: %s", jitop_strerror(st), jitop_errmsg(NULL));
    return m;
}

static void hooks_on(void)
{
    g_compiles = g_links = 0;
    jitop__before_compile_hook = count_compile;
    jitop__before_link_hook = count_link;
}

static void hooks_off(void)
{
    jitop__before_compile_hook = NULL;
    jitop__before_link_hook = NULL;
}

/* One image from two units: kernels of both, one copy of the extern
 * variable, the cross-unit call; cold, then warm (a new context compiles
 * and links nothing), and every spelling of -rdc gives the same keys. */
static void test_link_two_units(void **state)
{
    (void)state;
    two t;
    two_open(&t);
    hooks_on();
    jitop_ctx *ctx = jt_ctx_driver(t.cache);
    long loaded = stats().modules_loaded;
    jitop_module *m = load_two(ctx, &t, "-rdc", NULL);
    assert_int_equal(g_compiles, 2);
    assert_int_equal(g_links, 1);
    jitop_op *ka = NULL, *kb = NULL;
    assert_int_equal(jitop_op_get(m, "ka", &ka), JITOP_OK);
    assert_int_equal(jitop_op_get(m, "kb", &kb), JITOP_OK);
    assert_int_equal(stats().modules_loaded, loaded + 1); /* one linked image */

    jitop_op_info info;
    assert_int_equal(jitop_op_info_get(ka, &info), JITOP_OK);
    assert_int_equal(info.nparams, 2);
    assert_int_equal(info.param_size[1], sizeof(int));
    size_t count = 0;
    assert_int_equal(jitop_module_ops(m, NULL, 0, &count), JITOP_OK);
    assert_int_equal(count, 2);

    /* The extern variable is b.cu's, once; a.cu's constant is there too. */
    int v = 0;
    assert_int_equal(jitop_global_read(m, "shared_counter", &v, sizeof v, NULL), JITOP_OK);
    assert_int_equal(v, 7);
    jitop_global_info g;
    assert_int_equal(jitop_global_get(m, "coeffs", &g), JITOP_OK);
    assert_int_equal(g.size, 4 * sizeof(float));
    long copies = stats().global_copies;
    v = 9;
    assert_int_equal(jitop_global_write(m, "shared_counter", &v, sizeof v, NULL), JITOP_OK);
    assert_int_equal(stats().global_copies, copies + 1);

    int out = 0, *pout = &out;
    void *args[] = {&pout};
    size_t sizes[] = {sizeof pout};
    assert_int_equal(jitop_launch(kb, one, one, 0, NULL, args, sizes, 1), JITOP_OK);
    jitop_ctx_destroy(ctx);

    /* Warm, in a new context, and with the other spellings. */
    static const char *const spellings[][2] = {
        {"-rdc", NULL}, {"-rdc=true", NULL}, {"--relocatable-device-code=true", NULL},
        {"-dc", NULL}, {"-rdc=false", "-rdc=true"}};
    for (size_t i = 0; i < sizeof spellings / sizeof spellings[0]; i++) {
        g_compiles = g_links = 0;
        ctx = jt_ctx_driver(t.cache);
        m = load_two(ctx, &t, spellings[i][0], spellings[i][1]);
        assert_int_equal(jitop_op_get(m, "ka", &ka), JITOP_OK);
        assert_int_equal(g_compiles, 0);
        assert_int_equal(g_links, 0);
        jitop_ctx_destroy(ctx);
    }
    hooks_off();
    two_close(&t);
}

/* An edit of one unit recompiles that unit only and links again, at a
 * reload and at a new load; ops keep their handles and move to the new
 * image; globals are the new code's. */
static void test_link_edit_one_unit(void **state)
{
    (void)state;
    two t;
    two_open(&t);
    hooks_on();
    jitop_ctx *ctx = jt_ctx_driver(t.cache);
    jitop_module *m = load_two(ctx, &t, "-rdc=true", NULL);
    jitop_op *kb = NULL, *ta = NULL;
    assert_int_equal(jitop_op_get(m, "kb", &kb), JITOP_OK);
    assert_int_equal(jitop_op_get(m, "ta<float>", &ta), JITOP_OK); /* a.cu's template, linked */
    assert_int_equal(g_compiles, 3);
    assert_int_equal(g_links, 2);
    int out = 0, *pout = &out;
    void *args[] = {&pout};
    assert_int_equal(jitop_launch(kb, one, one, 0, NULL, args, NULL, 0), JITOP_OK);
    int image0 = out;
    assert_int_equal(jitop_launch(ta, one, one, 0, NULL, args, NULL, 0), JITOP_OK);
    int inst0 = out;
    assert_true(inst0 != image0);

    /* Nothing changed: nothing rebuilt. */
    g_compiles = g_links = 0;
    assert_int_equal(jitop_module_reload(m), JITOP_OK);
    assert_int_equal(g_compiles + g_links, 0);
    assert_int_equal(jitop_module_generation(m), 0);

    write_b(&t, 1);
    assert_int_equal(jitop_module_reload(m), JITOP_OK);
    assert_int_equal(g_compiles, 1); /* b.cu only */
    assert_int_equal(g_links, 2);    /* the module's image and the instance's */
    assert_int_equal(jitop_module_generation(m), 1);
    assert_int_equal(jitop_launch(kb, one, one, 0, NULL, args, NULL, 0), JITOP_OK);
    assert_true(out != image0);
    assert_int_equal(jitop_launch(ta, one, one, 0, NULL, args, NULL, 0), JITOP_OK);
    assert_true(out != inst0);
    jitop_global_info g;
    assert_int_equal(jitop_global_get(m, "shared_counter", &g), JITOP_OK);
    assert_int_equal(g.generation, 1);
    int v = 0;
    assert_int_equal(jitop_global_read(m, "shared_counter", &v, sizeof v, NULL), JITOP_OK);
    assert_int_equal(v, 8);
    size_t left = 9;
    assert_int_equal(jitop__module_reap(m, true, &left), JITOP_OK);
    assert_int_equal(left, 0);
    jitop_ctx_destroy(ctx);

    /* A new process after another edit: b.cu compiled, a.cu's entry used. */
    write_b(&t, 2);
    g_compiles = g_links = 0;
    ctx = jt_ctx_driver(t.cache);
    m = load_two(ctx, &t, "-rdc=true", NULL);
    assert_int_equal(jitop_op_get(m, "ta<float>", &ta), JITOP_OK);
    assert_int_equal(g_compiles, 1);
    assert_int_equal(g_links, 2);
    assert_int_equal(jitop_global_read(m, "shared_counter", &v, sizeof v, NULL), JITOP_OK);
    assert_int_equal(v, 9);
    jitop_ctx_destroy(ctx);

    /* And back to a version linked before: all from the cache. */
    write_b(&t, 1);
    g_compiles = g_links = 0;
    ctx = jt_ctx_driver(t.cache);
    m = load_two(ctx, &t, "-rdc=true", NULL);
    assert_int_equal(jitop_op_get(m, "ta<float>", &ta), JITOP_OK);
    assert_int_equal(g_compiles + g_links, 0);
    jitop_ctx_destroy(ctx);
    hooks_off();
    two_close(&t);
}

/* The watch sees every unit's files: an edit of b.cu swaps in the relinked
 * image, having compiled b.cu only. */
static void test_link_watch(void **state)
{
    (void)state;
    two t;
    two_open(&t);
    jitop_ctx *ctx = jt_ctx_driver(t.cache);
    jitop_module *m = load_two(ctx, &t, "-rdc", NULL);
    jitop_op *kb = NULL;
    assert_int_equal(jitop_op_get(m, "kb", &kb), JITOP_OK);
    /* The hooks are set before the watch thread starts, so that its reads
     * of them come after these writes (what links an edit to the thread's
     * wake-up is the kernel, which ThreadSanitizer does not see). */
    hooks_on();
    assert_int_equal(jitop_watch(m, JITOP_RELOAD_POLL, NULL, NULL), JITOP_OK);
    write_b(&t, 3);
    int swapped = 0;
    for (int i = 0; i < 500 && swapped == 0; i++) {
        assert_int_equal(jitop_poll(ctx, &swapped), JITOP_OK);
        if (!swapped) {
            struct timespec ts = {0, 10 * 1000 * 1000};
            nanosleep(&ts, NULL);
        }
    }
    assert_int_equal(swapped, 1);
    assert_int_equal(g_compiles, 1);
    assert_int_equal(g_links, 1);
    int v = 0;
    assert_int_equal(jitop_global_read(m, "shared_counter", &v, sizeof v, NULL), JITOP_OK);
    assert_int_equal(v, 10);
    hooks_off();
    jitop_ctx_destroy(ctx);
    two_close(&t);
}

/* The linked image evicted while the module is loaded lazily: linked again
 * from the units' entries when first needed. */
static void test_link_entry_gone(void **state)
{
    (void)state;
    two t;
    two_open(&t);
    jitop_ctx *ctx = jt_ctx_driver(t.cache);
    jitop_module *m = load_two(ctx, &t, "-rdc", NULL);
    jitop_ctx_destroy(ctx);
    ctx = jt_ctx_driver(t.cache);
    m = load_two(ctx, &t, "-rdc", NULL); /* warm: the image is not read yet */
    char *entry = NULL;
    if (asprintf(&entry, "%s/v%d/%.2s/%s", t.cache, JITOP__FORMAT_VERSION, m->link_key,
                 m->link_key) < 0)
        fail_msg("asprintf failed");
    assert_int_equal(remove(entry), 0);
    free(entry);
    hooks_on();
    jitop_op *ka = NULL;
    assert_int_equal(jitop_op_get(m, "ka", &ka), JITOP_OK);
    assert_int_equal(g_compiles, 0);
    assert_int_equal(g_links, 1);
    hooks_off();
    jitop_ctx_destroy(ctx);
    two_close(&t);
}

/* LTO-IR units (-dlto) linked with -lto. */
static void test_link_lto(void **state)
{
    (void)state;
    two t;
    two_open(&t);
    hooks_on();
    jitop_ctx *ctx = jt_ctx_driver(t.cache);
    jitop_module *m = load_two(ctx, &t, "-dlto", NULL);
    assert_int_equal(g_compiles, 2);
    assert_int_equal(g_links, 1);
    jitop_op *ka = NULL;
    assert_int_equal(jitop_op_get(m, "ka", &ka), JITOP_OK);
    int v = 0;
    assert_int_equal(jitop_global_read(m, "shared_counter", &v, sizeof v, NULL), JITOP_OK);
    assert_int_equal(v, 7);
    jitop_ctx_destroy(ctx);
    /* "-rdc=true -dlto" is "-dlto": the same keys. */
    g_compiles = g_links = 0;
    ctx = jt_ctx_driver(t.cache);
    m = load_two(ctx, &t, "-dlto", "-rdc=true");
    assert_int_equal(jitop_op_get(m, "ka", &ka), JITOP_OK);
    assert_int_equal(g_compiles + g_links, 0);
    jitop_ctx_destroy(ctx);
    hooks_off();
    two_close(&t);
}

static const char dp_src[] =
    "extern \"C\" __global__ void child(int *p) { p[threadIdx.x] += 1; }\n"
    "extern \"C\" __global__ void parent(int *p, int n)\n"
    "{ if (threadIdx.x == 0) child<<<1, n>>>(p); }\n";

/* A kernel launching a kernel: linked with the device runtime, in one
 * source and with -dlto. */
static void test_link_dynamic_parallelism(void **state)
{
    (void)state;
    char *dir = jt_tmpdir();
    char *cache = jt_path(dir, "cache");
    char *src = jt_write(dir, "dp.cu", dp_src);
    static const char *const opts[] = {"-rdc=true", "-dlto"};
    for (size_t i = 0; i < 2; i++) {
        jitop_ctx *ctx = jt_ctx_driver(cache);
        const char *sources[] = {src};
        jitop_module *m = NULL;
        assert_int_equal(jitop_load(ctx, "dp", sources, 1, &opts[i], 1, &m), JITOP_OK);
        jitop_op *parent = NULL, *child = NULL;
        assert_int_equal(jitop_op_get(m, "parent", &parent), JITOP_OK);
        assert_int_equal(jitop_op_get(m, "child", &child), JITOP_OK);
        jitop_ctx_destroy(ctx);
    }
    /* Without -rdc a device-side launch does not compile (NVRTC's rule). */
    jitop_ctx *ctx = jt_ctx_driver(cache);
    const char *sources[] = {src};
    jitop_module *m = NULL;
    assert_int_equal(jitop_load(ctx, "dp", sources, 1, NULL, 0, &m), JITOP_ECOMPILE);
    jitop_ctx_destroy(ctx);
    free(src);
    free(cache);
    jt_rm_rf(dir);
    free(dir);
}

/* An undefined device function is a link error naming it; the units stay
 * cached (only the link failed); PTX needs -dlto. */
static void test_link_errors(void **state)
{
    (void)state;
    char *dir = jt_tmpdir();
    char *cache = jt_path(dir, "cache");
    char *a = jt_write(dir, "a.cu", a_src); /* bscale and shared_counter are missing */
    jitop_ctx *ctx = jt_ctx_driver(cache);
    const char *sources[] = {a};
    const char *rdc[] = {"-rdc"};
    jitop_module *m = NULL;
    assert_int_equal(jitop_load(ctx, "broken", sources, 1, rdc, 1, &m), JITOP_ECOMPILE);
    const char *msg = jitop_errmsg(NULL);
    assert_non_null(strstr(msg, "link"));
    assert_non_null(strstr(msg, "_Z6bscalef"));
    assert_null(m);
    jitop_ctx_destroy(ctx);

    jitop_config cfg;
    jitop_config_init(&cfg);
    cfg.cache_dir = cache;
    cfg.arch = "compute_90";
    assert_int_equal(jitop_ctx_create(&cfg, &ctx), JITOP_OK);
    assert_int_equal(jitop_load(ctx, "ptx", sources, 1, rdc, 1, &m), JITOP_EINVAL);
    assert_non_null(strstr(jitop_errmsg(NULL), "-dlto"));
    jitop_ctx_destroy(ctx);
    free(a);
    free(cache);
    jt_rm_rf(dir);
    free(dir);
}

/* compute_XX with -dlto: linked PTX, whose kernels and variables are its
 * declarations (no driver needed: the build room's link directly). */
static void test_link_ptx(void **state)
{
    (void)state;
    two t;
    two_open(&t);
    jitop_ctx *ctx = jt_ctx(t.cache, "compute_90");
    const char *opts[] = {"-dlto"};
    jitop__unit ua, ub;
    jitop__built ba, bb, linked;
    assert_int_equal(jitop__unit_init(&ua, t.a, NULL, opts, 1, NULL, 0, "compute_90"), JITOP_OK);
    assert_int_equal(jitop__unit_init(&ub, t.b, NULL, opts, 1, NULL, 0, "compute_90"), JITOP_OK);
    assert_true(ua.relocatable && ua.lto);
    assert_int_equal(jitop__build_unit(ctx, &ua, &ba), JITOP_OK);
    assert_int_equal(jitop__build_unit(ctx, &ub, &bb), JITOP_OK);
    jitop__link_input in[] = {{&ua, ba.key, &ba.entry.bin}, {&ub, bb.key, &bb.entry.bin}};
    assert_int_equal(jitop__build_link(ctx, in, 2, false, &linked), JITOP_OK);
    assert_false(linked.cached);
    assert_true(linked.entry.bin.is_ptx);
    const char *ptx = (const char *)linked.entry.bin.data;
    assert_non_null(strstr(ptx, ".entry ka"));
    assert_non_null(strstr(ptx, ".entry kb"));
    jitop__strv globals = {0};
    assert_int_equal(jitop__binary_globals(&linked.entry.bin, &globals), JITOP_OK);
    bool counter = false, coeffs = false;
    for (size_t i = 0; i < globals.n; i++) {
        counter = counter || strcmp(globals.v[i], "shared_counter") == 0;
        coeffs = coeffs || strcmp(globals.v[i], "coeffs") == 0;
    }
    assert_true(counter && coeffs);
    jitop__strv_free(&globals);
    char key[33];
    memcpy(key, linked.key, sizeof key);
    jitop__built_free(&linked);

    /* Warm: the same key without any unit's binary in hand. */
    jitop__link_input keys_only[] = {{&ua, ba.key, NULL}, {&ub, bb.key, NULL}};
    assert_int_equal(jitop__build_link(ctx, keys_only, 2, true, &linked), JITOP_OK);
    assert_true(linked.cached && linked.deferred);
    assert_string_equal(linked.key, key);
    jitop__built_free(&linked);
    /* Another order is another image; its miss asks for the binaries. */
    jitop__link_input swapped[] = {{&ub, bb.key, NULL}, {&ua, ba.key, NULL}};
    assert_int_equal(jitop__build_link(ctx, swapped, 2, false, &linked), JITOP_OK);
    assert_true(linked.needs_inputs);
    assert_string_not_equal(linked.key, key);
    jitop__built_free(&linked);

    jitop__built_free(&ba);
    jitop__built_free(&bb);
    jitop__unit_free(&ua);
    jitop__unit_free(&ub);
    jitop_ctx_destroy(ctx);
    two_close(&t);
}

int main(int argc, char **argv)
{
    (void)argc;
    int started = jt_fake_cuda_start(argv, &g_fake_stats);
    if (started >= 0)
        return started;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_link_two_units),
        cmocka_unit_test(test_link_edit_one_unit),
        cmocka_unit_test(test_link_watch),
        cmocka_unit_test(test_link_entry_gone),
        cmocka_unit_test(test_link_lto),
        cmocka_unit_test(test_link_dynamic_parallelism),
        cmocka_unit_test(test_link_errors),
        cmocka_unit_test(test_link_ptx),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    jt_cleanup();
    return failed;
}
