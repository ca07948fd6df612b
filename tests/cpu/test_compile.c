/* NVRTC through jitop: option normalization, arch checks, cubin and PTX,
 * name expressions, compile errors with file:line. Real NVRTC, no GPU. */
#include "testutil.h"

#include "build/build.h"

#include <cuda.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *const kernel_src =
    "template <typename T, int N> __global__ void scale(T *x) { x[threadIdx.x] *= (T)N; }\n"
    "extern \"C\" __global__ void twice(float *x) { x[threadIdx.x] *= 2.0f; }\n";

static void assert_options(const jitop__unit *u, const char *const *want, size_t n)
{
    for (size_t i = 0; i < n && i < u->options.n; i++)
        assert_string_equal(u->options.v[i], want[i]);
    assert_int_equal(u->options.n, n);
}

/* Whether this process has NVRTC loaded, asked without loading it. */
static bool nvrtc_loaded(void)
{
    char soname[32];
    snprintf(soname, sizeof soname, "libnvrtc.so.%d", CUDA_VERSION / 1000);
    void *h = dlopen(soname, RTLD_LAZY | RTLD_NOLOAD);
    if (h)
        assert_int_equal(dlclose(h), 0);
    return h != NULL;
}

/* Every hit puts NVRTC's identity into the key: learning it must not load
 * NVRTC (8-10 ms per process), only the first compile does. Runs first in
 * this program, before anything has compiled. */
static void test_nvrtc_loaded_only_by_a_compile(void **state)
{
    (void)state;
    assert_false(nvrtc_loaded());
    const char *id = jitop__nvrtc_identity();
    long long size = 0;
    char extra;
    const char *space = strrchr(id, ' ');
    assert_non_null(strstr(id, "libnvrtc.so."));
    assert_non_null(space);
    assert_int_equal(sscanf(space + 1, "%lld%c", &size, &extra), 1);
    assert_true(size > 0);
    char key[33];
    jitop__unit u;
    jitop__deps none = {0};
    assert_int_equal(jitop__unit_init(&u, NULL, kernel_src, NULL, 0, NULL, 0, "sm_90"), JITOP_OK);
    jitop__cache_key(&u, &none, key);
    assert_false(nvrtc_loaded());
    jitop__binary b;
    assert_int_equal(jitop__compile(&u, kernel_src, &b), JITOP_OK);
    assert_true(b.size > 0);
    assert_true(nvrtc_loaded());
    jitop__binary_free(&b);
    jitop__unit_free(&u);
}

static void test_options_normalized(void **state)
{
    (void)state;
    char *dir = jt_tmpdir();
    char *src = jt_write(dir, "k.cu", kernel_src);
    char cwd[PATH_MAX];
    assert_non_null(getcwd(cwd, sizeof cwd));
    const char *opts[] = {"-D", "A=1", "--define-macro=B", "-DC", "--define-macro", "D=2",
                          "-U", "X", "-UY", "--undefine-macro=Z",
                          "-I", "rel/inc", "--include-path=/abs/inc",
                          "-std", "c++17", "--std=c++14", "--std", "c++20", "-std=c++11",
                          "-use_fast_math", "--use_fast_math", "-lineinfo", "--generate-line-info",
                          "-G", "--device-debug", "-maxrregcount", "32", "--maxrregcount=40",
                          "-maxrregcount=48", "--maxrregcount", "64", "--extra-device-vectorization"};
    jitop__unit u;
    assert_int_equal(jitop__unit_init(&u, src, NULL, opts, sizeof opts / sizeof opts[0], NULL, 0,
                                      "sm_90"),
                     JITOP_OK);
    char rel[PATH_MAX + 16];
    snprintf(rel, sizeof rel, "-I%s/rel/inc", cwd);
    const char *want[] = {"-DA=1", "-DB", "-DC", "-DD=2", "-UX", "-UY", "-UZ", rel, "-I/abs/inc",
                          "-std=c++17", "-std=c++14", "-std=c++20", "-std=c++11",
                          "--use_fast_math", "--use_fast_math", "--generate-line-info",
                          "--generate-line-info", "--device-debug", "--device-debug",
                          "--maxrregcount=32", "--maxrregcount=40", "--maxrregcount=48",
                          "--maxrregcount=64", "--extra-device-vectorization"};
    assert_options(&u, want, sizeof want / sizeof want[0]);
    /* The source's own directory first, then each -I in order, then the
     * toolkit's include folders. */
    assert_true(u.toolkit_dirs > 0);
    assert_int_equal(u.include_dirs.n, 3 + u.toolkit_dirs);
    assert_string_equal(u.include_dirs.v[0], dir);
    assert_string_equal(u.include_dirs.v[1], rel + 2);
    assert_string_equal(u.include_dirs.v[2], "/abs/inc");
    assert_string_equal(u.source_path, src);
    assert_string_equal(u.source_name, src);
    jitop__unit_free(&u);
    free(src);
    free(dir);
}

static void test_arch_options_refused(void **state)
{
    (void)state;
    const char *bad[][2] = {{"-arch=sm_80", NULL}, {"-arch", "sm_80"},
                            {"--gpu-architecture=compute_80", NULL}, {"--gpu-architecture", "sm_90"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const char *opts[2] = {bad[i][0], bad[i][1]};
        jitop__unit u;
        int st = jitop__unit_init(&u, "/tmp/x.cu", NULL, opts, bad[i][1] ? 2 : 1, NULL, 0, "sm_90");
        assert_int_equal(st, JITOP_EINVAL);
        assert_non_null(strstr(jitop_errmsg(NULL), bad[i][0]));
        assert_non_null(strstr(jitop_errmsg(NULL), "arch argument"));
    }
}

static void test_arch_validated(void **state)
{
    (void)state;
    const char *good[] = {"sm_90", "sm_90a", "sm_100f", "sm_120a", "compute_90", "compute_100a", "sm_75"};
    const char *bad[] = {"sm_9", "sm90", "gfx90a", "compute_90x", "sm_", "", "sm_1000", "SM_90",
                         "sm_90ab"};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        jitop__unit u;
        assert_int_equal(jitop__unit_init(&u, "/tmp/x.cu", NULL, NULL, 0, NULL, 0, good[i]), JITOP_OK);
        assert_string_equal(u.arch, good[i]);
        jitop__unit_free(&u);
    }
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        jitop__unit u;
        assert_int_equal(jitop__unit_init(&u, "/tmp/x.cu", NULL, NULL, 0, NULL, 0, bad[i]),
                         JITOP_EINVAL);
        assert_non_null(strstr(jitop_errmsg(NULL), "arch"));
    }
    jitop__unit u;
    assert_int_equal(jitop__unit_init(&u, "/tmp/x.cu", NULL, NULL, 0, NULL, 0, NULL), JITOP_EINVAL);
}

static void test_bad_values_refused(void **state)
{
    (void)state;
    const char *cases[][2] = {{"-D", NULL}, {"-maxrregcount", "lots"}, {"--maxrregcount=0", NULL},
                              {"-std", NULL}, {"", NULL}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *opts[2] = {cases[i][0], cases[i][1]};
        jitop__unit u;
        assert_int_equal(jitop__unit_init(&u, "/tmp/x.cu", NULL, opts, cases[i][1] ? 2 : 1, NULL, 0,
                                          "sm_90"),
                         JITOP_EINVAL);
    }
    const char *empty_name[] = {""};
    jitop__unit u;
    assert_int_equal(jitop__unit_init(&u, "/tmp/x.cu", NULL, NULL, 0, empty_name, 1, "sm_90"),
                     JITOP_EINVAL);
    /* Both a path and inline text, or neither. */
    assert_int_equal(jitop__unit_init(&u, "/tmp/x.cu", "text", NULL, 0, NULL, 0, "sm_90"), JITOP_EINVAL);
    assert_int_equal(jitop__unit_init(&u, NULL, NULL, NULL, 0, NULL, 0, "sm_90"), JITOP_EINVAL);
}

/* A pre-included header is read by NVRTC behind the include scanner's back:
 * it would be neither in the key nor watched, so the options are refused. */
static void test_pre_include_refused(void **state)
{
    (void)state;
    const char *bad[][2] = {{"-include", "/tmp/h.cuh"}, {"-include=/tmp/h.cuh", NULL},
                            {"--pre-include=/tmp/h.cuh", NULL}, {"--pre-include", "/tmp/h.cuh"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const char *opts[2] = {bad[i][0], bad[i][1]};
        jitop__unit u;
        int st = jitop__unit_init(&u, "/tmp/x.cu", NULL, opts, bad[i][1] ? 2 : 1, NULL, 0, "sm_90");
        assert_int_equal(st, JITOP_EINVAL);
        if (!strstr(jitop_errmsg(NULL), bad[i][0]) || !strstr(jitop_errmsg(NULL), "#include"))
            fail_msg("%s: the message should name the option and say to #include the header: %s",
                     bad[i][0], jitop_errmsg(NULL));
    }
    /* The include path is not a pre-include. */
    const char *ok[] = {"--include-path=/tmp"};
    jitop__unit u;
    assert_int_equal(jitop__unit_init(&u, "/tmp/x.cu", NULL, ok, 1, NULL, 0, "sm_90"), JITOP_OK);
    assert_string_equal(u.options.v[0], "-I/tmp");
    jitop__unit_free(&u);
}

/* A relative path cannot be resolved once the working directory is deleted:
 * the failure names the path and the reason, not "out of memory". */
static void test_deleted_working_directory(void **state)
{
    (void)state;
    char *dir = jt_tmpdir();
    char *gone = jt_path(dir, "gone");
    int back = open(".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    assert_true(back >= 0);
    assert_int_equal(mkdir(gone, 0700), 0);
    assert_int_equal(chdir(gone), 0);
    assert_int_equal(rmdir(gone), 0);

    jitop__unit u;
    assert_int_equal(jitop__unit_init(&u, "k.cu", NULL, NULL, 0, NULL, 0, "sm_90"), JITOP_EIO);
    const char *msg = jitop_errmsg(NULL);
    int ok = strstr(msg, "cannot resolve k.cu") != NULL;
    const char *inc[] = {"-I", "include"};
    int st = jitop__unit_init(&u, "/tmp/x.cu", NULL, inc, 2, NULL, 0, "sm_90");
    int inc_ok = st == JITOP_EIO && strstr(jitop_errmsg(NULL), "-I") &&
                 strstr(jitop_errmsg(NULL), "cannot resolve include");
    jitop_config cfg;
    jitop_config_init(&cfg);
    cfg.cache_dir = "cache";
    cfg.compile_only = 1;
    jitop_ctx *ctx = NULL;
    int cst = jitop_ctx_create(&cfg, &ctx);
    int ctx_ok = cst == JITOP_EIO && strstr(jitop_errmsg(NULL), "cache_dir") &&
                 strstr(jitop_errmsg(NULL), "cannot resolve cache");

    assert_int_equal(fchdir(back), 0); /* before any assertion can leave the test */
    assert_int_equal(close(back), 0);
    assert_true(ok);
    assert_true(inc_ok);
    assert_true(ctx_ok);
    assert_null(ctx);
    free(gone); free(dir);
}

static void test_cubin_and_lowered_names(void **state)
{
    (void)state;
    char *dir = jt_tmpdir();
    char *src = jt_write(dir, "k.cu", kernel_src);
    const char *names[] = {"scale<float, 4>", "scale<double, 2>"};
    const char *opts[] = {"-std=c++17", "-DUNUSED=1"};
    jitop__unit u;
    assert_int_equal(jitop__unit_init(&u, src, NULL, opts, 2, names, 2, "sm_90"), JITOP_OK);
    jitop__binary b;
    assert_int_equal(jitop__compile(&u, kernel_src, &b), JITOP_OK);
    assert_false(b.is_ptx);
    assert_true(b.size > 64);
    assert_memory_equal(b.data, "\177ELF", 4);
    assert_int_equal(b.data[b.size], 0);
    assert_int_equal(b.names.n, 2);
    assert_int_equal(b.lowered.n, 2);
    assert_string_equal(b.names.v[0], "scale<float, 4>"); /* canonical spelling */
    assert_string_equal(b.lowered.v[0], "_Z5scaleIfLi4EEvPT_");
    assert_string_equal(b.lowered.v[1], "_Z5scaleIdLi2EEvPT_");
    jitop__binary_free(&b);
    jitop__unit_free(&u);
    free(src);
    free(dir);
}

/* __device__ variables make every load of a module slower (the driver
 * allocates and fills them): jitop counts their bytes to say so. A static
 * constexpr member is one in C++17; an enumerator is not. */
static void test_cubin_global_bytes(void **state)
{
    (void)state;
    static const char *const with =
        "__device__ int table[4] = {1, 2, 3, 4};\n"
        "__device__ float scratch[8];\n"
        "template <int N> struct shape { static constexpr int n = N; };\n"
        "extern \"C\" __global__ void k(int *x) { x[0] = table[x[1]] + shape<3>::n; "
        "scratch[x[2]] = 1.0f; }\n";
    static const char *const without =
        "template <int N> struct shape { enum : int { n = N }; };\n"
        "extern \"C\" __global__ void k(int *x) { x[0] = shape<3>::n; }\n";
    const char *opts[] = {"-std=c++17"};
    jitop__unit u;
    jitop__binary b;
    assert_int_equal(jitop__unit_init(&u, NULL, with, opts, 1, NULL, 0, "sm_90"), JITOP_OK);
    assert_int_equal(jitop__compile(&u, u.inline_text, &b), JITOP_OK);
    size_t bytes = jitop__cubin_global_bytes(b.data, b.size);
    assert_true(bytes >= 4 * sizeof(int) + 8 * sizeof(float));
    /* Cut anywhere, the ELF headers point past the end: 0, and ASan sees
     * no read outside the buffer. */
    for (size_t cut = 0; cut < b.size; cut += 97)
        assert_true(jitop__cubin_global_bytes(b.data, cut) <= bytes);
    jitop__binary_free(&b);
    jitop__unit_free(&u);

    assert_int_equal(jitop__unit_init(&u, NULL, without, opts, 1, NULL, 0, "sm_90"), JITOP_OK);
    assert_int_equal(jitop__compile(&u, u.inline_text, &b), JITOP_OK);
    assert_int_equal(jitop__cubin_global_bytes(b.data, b.size), 0);
    jitop__binary_free(&b);
    jitop__unit_free(&u);

    assert_int_equal(jitop__cubin_global_bytes((const unsigned char *)"not an ELF file", 15), 0);
    assert_int_equal(jitop__cubin_global_bytes(NULL, 0), 0);
}

static void test_ptx_for_compute_arch(void **state)
{
    (void)state;
    jitop__unit u;
    assert_int_equal(jitop__unit_init(&u, NULL, kernel_src, NULL, 0, NULL, 0, "compute_90"), JITOP_OK);
    jitop__binary b;
    assert_int_equal(jitop__compile(&u, u.inline_text, &b), JITOP_OK);
    assert_true(b.is_ptx);
    assert_int_equal(strlen((const char *)b.data), b.size);
    assert_non_null(strstr((const char *)b.data, ".target sm_90"));
    assert_non_null(strstr((const char *)b.data, ".entry twice"));
    jitop__binary_free(&b);
    jitop__unit_free(&u);
}

static void test_syntax_error_has_file_and_line(void **state)
{
    (void)state;
    char *dir = jt_tmpdir();
    const char *text = "extern \"C\" __global__ void k(float *x) {\n"
                       "    x[0] = 1.0f +;\n"
                       "}\n";
    char *src = jt_write(dir, "broken.cu", text);
    jitop__unit u;
    assert_int_equal(jitop__unit_init(&u, src, NULL, NULL, 0, NULL, 0, "sm_90"), JITOP_OK);
    jitop__binary b;
    assert_int_equal(jitop__compile(&u, text, &b), JITOP_ECOMPILE);
    assert_null(b.data);
    char where[PATH_MAX + 32];
    snprintf(where, sizeof where, "%s(2): error", src);
    if (!strstr(jitop_errmsg(NULL), where))
        fail_msg("expected '%s' in: %s", where, jitop_errmsg(NULL));
    jitop__unit_free(&u);
    free(src);
    free(dir);
}

static void test_unknown_option_rejected_by_nvrtc(void **state)
{
    (void)state;
    const char *opts[] = {"--no-such-nvrtc-flag"};
    jitop__unit u;
    assert_int_equal(jitop__unit_init(&u, NULL, kernel_src, opts, 1, NULL, 0, "sm_90"), JITOP_OK);
    assert_string_equal(u.options.v[0], "--no-such-nvrtc-flag");
    jitop__binary b;
    assert_int_equal(jitop__compile(&u, kernel_src, &b), JITOP_EINVAL);
    assert_non_null(strstr(jitop_errmsg(NULL), "--no-such-nvrtc-flag"));
    /* The options as NVRTC got them, the arch included. */
    assert_non_null(strstr(jitop_errmsg(NULL), "--gpu-architecture=sm_90"));
    jitop__unit_free(&u);
}

/* A well-formed arch this NVRTC does not compile for (sm_10, compute_999)
 * is named, with the archs it does compile for (nvrtcGetSupportedArchs),
 * not reported as "NVRTC rejected the options []". */
static void test_unsupported_arch_named(void **state)
{
    (void)state;
    const char *ok[] = {"sm_90", "sm_90a", "compute_90", "sm_80"};
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++)
        if (jitop__nvrtc_check_arch(ok[i]) != JITOP_OK)
            fail_msg("%s: %s", ok[i], jitop_errmsg(NULL));
    const char *unsupported[][2] = {{"sm_10", "sm_90"}, {"compute_999", "compute_90"}};
    for (size_t i = 0; i < 2; i++) {
        assert_int_equal(jitop__nvrtc_check_arch(unsupported[i][0]), JITOP_EINVAL);
        const char *msg = jitop_errmsg(NULL);
        assert_non_null(strstr(msg, unsupported[i][0]));
        assert_non_null(strstr(msg, unsupported[i][1])); /* the list of supported ones */
        assert_non_null(strstr(msg, "nvrtcGetSupportedArchs"));
        jitop__unit u;
        jitop__binary b;
        assert_int_equal(jitop__unit_init(&u, NULL, kernel_src, NULL, 0, NULL, 0,
                                          unsupported[i][0]),
                         JITOP_OK);
        assert_int_equal(jitop__compile(&u, kernel_src, &b), JITOP_EINVAL);
        msg = jitop_errmsg(NULL);
        if (!strstr(msg, unsupported[i][0]) || !strstr(msg, unsupported[i][1]) ||
            strstr(msg, "options []"))
            fail_msg("%s: %s", unsupported[i][0], msg);
        jitop__unit_free(&u);
    }
    assert_int_equal(jitop__nvrtc_check_arch("sm_9"), JITOP_EINVAL);
    assert_non_null(strstr(jitop_errmsg(NULL), "not valid"));
}

/* A name the unit does not declare (or that does not parse, or names no
 * instance) is NVRTC's answer about the name, kept with its errors so that
 * the cache can hold it: JITOP_ENOTFOUND, unresolved, no code. */
static void test_bad_name_expression(void **state)
{
    (void)state;
    const char *bad[] = {"no_such_kernel<int>", "scale<float, 4", "scale<float>",
                         "scale<no_such_type, 4>"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        jitop__unit u;
        assert_int_equal(jitop__unit_init(&u, NULL, kernel_src, NULL, 0, &bad[i], 1, "sm_90"),
                         JITOP_OK);
        jitop__binary b;
        int st = jitop__compile(&u, kernel_src, &b);
        if (st != JITOP_ENOTFOUND || !b.unresolved || !b.log || b.data ||
            !strstr(b.log, "__nv_name_map"))
            fail_msg("%s: status %d, unresolved %d: %s", bad[i], st, b.unresolved,
                     jitop_errmsg(NULL));
        assert_non_null(strstr(jitop_errmsg(NULL), "declares nothing named"));
        jitop__binary_free(&b);
        jitop__unit_free(&u);
    }
}

/* An instance whose template is declared but does not compile is an error
 * in the source (file:line), not an answer about the name. */
static void test_instance_error_is_a_compile_error(void **state)
{
    (void)state;
    static const char src[] = "template <int N> __global__ void pos(int *x) {\n"
                              "  static_assert(N > 0, \"N must be positive\");\n  *x = N;\n}\n";
    const char *names[] = {"pos<-1>"};
    jitop__unit u;
    assert_int_equal(jitop__unit_init(&u, NULL, src, NULL, 0, names, 1, "sm_90"), JITOP_OK);
    jitop__binary b;
    assert_int_equal(jitop__compile(&u, src, &b), JITOP_ECOMPILE);
    assert_false(b.unresolved);
    assert_null(b.log);
    assert_non_null(strstr(jitop_errmsg(NULL), "jitop_inline.cu(2): error"));
    assert_non_null(strstr(jitop_errmsg(NULL), "N must be positive"));
    jitop__unit_free(&u);
}

/* White space that changes no token goes, one space follows each comma;
 * the rest stays. */
static void test_name_canonical(void **state)
{
    (void)state;
    const char *cases[][2] = {
        {"f<float,4>", "f<float, 4>"},
        {"f<float, 4>", "f<float, 4>"},
        {"  f < float ,\t4 >  ", "f<float, 4>"},
        {"f<float ,  4>", "f<float, 4>"},
        {"f<unsigned  int, 2>", "f<unsigned int, 2>"},
        {"ns::f<const float *, -1>", "ns::f<const float*, -1>"},
        {"f<g<int> >", "f<g<int> >"},     /* "> >" is not ">>" to every reader */
        {"f<1 - -1>", "f<1- -1>"},         /* "- -" is not "--" */
        {"f<1 - - 1>", "f<1- -1>"},
        {"f< ::ns::T>", "f< ::ns::T>"},    /* "<:" is a digraph */
        {"f<'a', \" x,  y \">", "f<'a', \" x,  y \">"}, /* literals as they are */
        {"(void (*)(float *, int))k", "(void(*)(float*, int))k"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *c = jitop__name_canonical(cases[i][0]);
        assert_non_null(c);
        if (strcmp(c, cases[i][1]) != 0)
            fail_msg("'%s' -> '%s', expected '%s'", cases[i][0], c, cases[i][1]);
        free(c);
    }
    /* Every spelling has one key: one compile. */
    const char *a[] = {"scale<float, 4>"}, *b[] = {"scale< float ,4 >"}, *c[] = {"scale<float,8>"};
    jitop__unit ua, ub, uc;
    jitop__deps none = {0};
    char ka[33], kb[33], kc[33];
    assert_int_equal(jitop__unit_init(&ua, NULL, kernel_src, NULL, 0, a, 1, "sm_90"), JITOP_OK);
    assert_int_equal(jitop__unit_init(&ub, NULL, kernel_src, NULL, 0, b, 1, "sm_90"), JITOP_OK);
    assert_int_equal(jitop__unit_init(&uc, NULL, kernel_src, NULL, 0, c, 1, "sm_90"), JITOP_OK);
    jitop__cache_key(&ua, &none, ka);
    jitop__cache_key(&ub, &none, kb);
    jitop__cache_key(&uc, &none, kc);
    assert_string_equal(ka, kb);
    assert_string_not_equal(ka, kc);
    jitop__unit_free(&ua);
    jitop__unit_free(&ub);
    jitop__unit_free(&uc);
    /* A name of nothing but white space is empty. */
    const char *blank[] = {"  \t "};
    assert_int_equal(jitop__unit_init(&ua, NULL, kernel_src, NULL, 0, blank, 1, "sm_90"),
                     JITOP_EINVAL);
}

/* The NVRTC file is named after the links of its last component only:
 * relative and absolute links, a linked directory above (kept), a loop. */
static void test_last_link_target(void **state)
{
    (void)state;
    char *dir = jt_tmpdir(), out[PATH_MAX], path[PATH_MAX], want[PATH_MAX];
    free(jt_write(dir, "libx.so.1.2.3", "x"));
    snprintf(path, sizeof path, "%s/libx.so.1", dir);
    assert_int_equal(symlink("libx.so.1.2.3", path), 0);
    snprintf(path, sizeof path, "%s/libx.so", dir);
    snprintf(want, sizeof want, "%s/libx.so.1", dir);
    assert_int_equal(symlink(want, path), 0); /* absolute */
    snprintf(path, sizeof path, "%s/lib64", dir);
    assert_int_equal(symlink(".", path), 0);

    snprintf(path, sizeof path, "%s/lib64/libx.so", dir);
    jitop__last_link_target(path, out, sizeof out);
    snprintf(want, sizeof want, "%s/libx.so.1.2.3", dir);
    assert_string_equal(out, want);
    snprintf(path, sizeof path, "%s/lib64/libx.so.1", dir);
    jitop__last_link_target(path, out, sizeof out);
    snprintf(want, sizeof want, "%s/lib64/libx.so.1.2.3", dir);
    assert_string_equal(out, want);
    snprintf(path, sizeof path, "%s/libx.so.1.2.3", dir);
    jitop__last_link_target(path, out, sizeof out);
    assert_string_equal(out, path);

    char a[PATH_MAX], b[PATH_MAX];
    snprintf(a, sizeof a, "%s/a", dir);
    snprintf(b, sizeof b, "%s/b", dir);
    assert_int_equal(symlink("b", a), 0);
    assert_int_equal(symlink("a", b), 0);
    jitop__last_link_target(a, out, sizeof out);
    assert_true(strcmp(out, a) == 0 || strcmp(out, b) == 0);
    snprintf(path, sizeof path, "%s/missing", dir);
    jitop__last_link_target(path, out, sizeof out);
    assert_string_equal(out, path);
    jt_rm_rf(dir);
    free(dir);
}

static void test_nvrtc_version(void **state)
{
    (void)state;
    const char *v = jitop__nvrtc_version();
    int major = 0, minor = -1;
    char extra;
    assert_int_equal(sscanf(v, "%d.%d%c", &major, &minor, &extra), 2);
    assert_true(major >= 11);
    assert_true(minor >= 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_nvrtc_loaded_only_by_a_compile),
        cmocka_unit_test(test_options_normalized),
        cmocka_unit_test(test_instance_error_is_a_compile_error),
        cmocka_unit_test(test_name_canonical),
        cmocka_unit_test(test_arch_options_refused),
        cmocka_unit_test(test_arch_validated),
        cmocka_unit_test(test_bad_values_refused),
        cmocka_unit_test(test_pre_include_refused),
        cmocka_unit_test(test_deleted_working_directory),
        cmocka_unit_test(test_cubin_and_lowered_names),
        cmocka_unit_test(test_cubin_global_bytes),
        cmocka_unit_test(test_ptx_for_compute_arch),
        cmocka_unit_test(test_syntax_error_has_file_and_line),
        cmocka_unit_test(test_unknown_option_rejected_by_nvrtc),
        cmocka_unit_test(test_unsupported_arch_named),
        cmocka_unit_test(test_bad_name_expression),
        cmocka_unit_test(test_last_link_target),
        cmocka_unit_test(test_nvrtc_version),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
