/*
 * scripts/check-rooms.sh, the check that keeps src/'s rooms layered (make
 * test runs it first): jitop's own tree passes, and small trees that break
 * the rule one way each fail, naming what broke it.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

/* A malloc'd formatted string (fails the test when out of memory). */
static char *fmt(const char *f, ...) __attribute__((format(printf, 1, 2)));
static char *fmt(const char *f, ...)
{
    va_list ap;
    va_start(ap, f);
    char *s = NULL;
    int n = vasprintf(&s, f, ap);
    va_end(ap);
    if (n < 0)
        fail_msg("vasprintf: out of memory");
    return s;
}

/* The repository: the kernel directory's parent. */
static char *repo_path(const char *name)
{
    return fmt("%s/../%s", JITOP_SOURCE_KERNEL_DIR, name);
}

/* Runs the check on root (and on objdir's objects when not NULL); returns
 * its exit status, its output in *out. */
static int check(const char *root, const char *objdir, char **out)
{
    char *script = repo_path("scripts/check-rooms.sh");
    char *cmd = fmt("%s --root '%s' %s%s%s", script, root, objdir ? "'" : "",
                    objdir ? objdir : "", objdir ? "'" : "");
    int rc = jt_run(cmd, out);
    free(cmd);
    free(script);
    return rc;
}

/* Compiles dir/src/<rel>.c into dir/obj/<rel>.o. */
static void compile(const char *dir, const char *rel)
{
    char *cmd = fmt("mkdir -p \"$(dirname '%s/obj/%s')\" && cc -c '%s/src/%s.c' -o '%s/obj/%s.o'",
                    dir, rel, dir, rel, dir, rel);
    char *out = NULL;
    int rc = jt_run(cmd, &out);
    if (rc != 0)
        jt_fail_showing(out, "%s", cmd);
    free(out);
    free(cmd);
}

static void test_jitop_tree_passes(void **state)
{
    (void)state;
    const char *build = getenv("JITOP_BUILD");
    assert_non_null(build);
    char *root = repo_path("");
    char *objdir = fmt("%s/obj/src", build);
    char *out = NULL;
    int rc = check(root, objdir, &out);
    if (rc != 0)
        jt_fail_showing(out, "jitop's own tree breaks the rooms rule");
    free(out);
    free(objdir);
    free(root);
}

static void test_upward_include_fails(void **state)
{
    (void)state;
    char *dir = jt_tmpdir();
    free(jt_write(dir, "src/base/base.h", "int base_fn(void);\n"));
    free(jt_write(dir, "src/load/load.h", "#include \"base/base.h\"\n"));
    free(jt_write(dir, "src/cache/cache.c", "#include \"base/base.h\"\n\n#include \"load/load.h\"\n"));
    char *out = NULL;
    assert_int_equal(check(dir, NULL, &out), 1);
    if (!strstr(out, "src/cache/cache.c:3: includes load/load.h: the load room is above the cache room"))
        jt_fail_showing(out, "unexpected output");
    free(out);
    /* The same include from a room above load is fine. */
    free(jt_write(dir, "src/cache/cache.c", "#include \"base/base.h\"\n"));
    free(jt_write(dir, "src/op/op.c", "#include \"load/load.h\"\n"));
    assert_int_equal(check(dir, NULL, &out), 0);
    free(out);
    free(dir);
}

static void test_private_header_of_another_room_fails(void **state)
{
    (void)state;
    char *dir = jt_tmpdir();
    free(jt_write(dir, "src/cache/cache_private.h", "\n"));
    free(jt_write(dir, "src/cache/walk.c", "#include \"cache/cache_private.h\"\n"));
    free(jt_write(dir, "src/build/build.c", "#include \"cache/cache_private.h\"\n"));
    char *out = NULL;
    assert_int_equal(check(dir, NULL, &out), 1);
    if (!strstr(out, "src/build/build.c:1: includes cache/cache_private.h: a private header") ||
        strstr(out, "walk.c"))
        jt_fail_showing(out, "unexpected output");
    free(out);
    free(dir);
}

static void test_unknown_room_fails(void **state)
{
    (void)state;
    char *dir = jt_tmpdir();
    free(jt_write(dir, "src/base/util.c", "\n"));
    free(jt_write(dir, "src/misc/x.c", "#include \"base/base.h\"\n"));
    char *out = NULL;
    assert_int_equal(check(dir, NULL, &out), 1);
    if (!strstr(out, "src/misc/: not a room"))
        jt_fail_showing(out, "unexpected output");
    free(out);
    free(dir);
}

static void test_unlisted_cli_file_with_internal_header_fails(void **state)
{
    (void)state;
    char *dir = jt_tmpdir();
    free(jt_write(dir, "src/base/base.h", "\n"));
    free(jt_write(dir, "tools/cli.h", "/*\n * Privileged internal clients:\n"
                                      " *   cli_build.c   why\n *\n * cli_cache.c is not one.\n */\n"));
    free(jt_write(dir, "tools/cli_build.c", "#include \"cli.h\"\n#include \"base/base.h\"\n"));
    free(jt_write(dir, "tools/cli_cache.c", "#include \"cli.h\"\n#include \"base/base.h\"\n"));
    char *out = NULL;
    assert_int_equal(check(dir, NULL, &out), 1);
    if (!strstr(out, "tools/cli_cache.c:2: includes an internal header but is not a privileged "
                     "internal client") ||
        strstr(out, "cli_build.c"))
        jt_fail_showing(out, "unexpected output");
    free(out);
    free(jt_write(dir, "tools/cli_cache.c", "#include \"cli.h\"\n"));
    assert_int_equal(check(dir, NULL, &out), 0);
    free(out);
    free(dir);
}

/* A call is what an include check cannot see: base's file calls a function
 * defined in load, declared by hand. */
static void test_upward_call_fails(void **state)
{
    (void)state;
    char *dir = jt_tmpdir();
    free(jt_write(dir, "src/base/util.c", "int load_fn(void);\nint base_fn(void) { return load_fn(); }\n"));
    free(jt_write(dir, "src/load/module.c", "int base_fn(void);\nint load_fn(void) { return 1; }\n"
                                            "int load_other(void) { return base_fn(); }\n"));
    compile(dir, "base/util");
    compile(dir, "load/module");
    char *objdir = jt_path(dir, "obj");
    char *out = NULL;
    assert_int_equal(check(dir, objdir, &out), 1);
    if (!strstr(out, "base/util.o calls load_fn, defined in load/module.o: the load room is above "
                     "the base room") ||
        strstr(out, "base_fn"))
        jt_fail_showing(out, "unexpected output");
    free(out);
    /* Downward only: passes. */
    free(jt_write(dir, "src/base/util.c", "int base_fn(void) { return 0; }\n"));
    compile(dir, "base/util");
    assert_int_equal(check(dir, objdir, &out), 0);
    free(out);
    free(objdir);
    free(dir);
}

static void test_circle_inside_a_room_fails(void **state)
{
    (void)state;
    char *dir = jt_tmpdir();
    free(jt_write(dir, "src/cache/file.c", "int file_fn(void) { return 0; }\n"));
    free(jt_write(dir, "src/cache/cache.c", "int walk_fn(void);\nint file_fn(void);\n"
                                            "int cache_fn(void) { return walk_fn() + file_fn(); }\n"));
    free(jt_write(dir, "src/cache/walk.c", "int cache_fn(void);\nint walk_fn(void) { return 1; }\n"
                                           "int walk_other(void) { return cache_fn(); }\n"));
    compile(dir, "cache/file");
    compile(dir, "cache/cache");
    compile(dir, "cache/walk");
    char *objdir = jt_path(dir, "obj");
    char *out = NULL;
    assert_int_equal(check(dir, objdir, &out), 1);
    if (!strstr(out, "the cache room's files call each other in a circle") ||
        !strstr(out, "cache/cache.o") || !strstr(out, "cache/walk.o"))
        jt_fail_showing(out, "unexpected output");
    free(out);
    /* One way (walk.c no longer calls cache.c): passes. */
    free(jt_write(dir, "src/cache/walk.c", "int file_fn(void);\n"
                                           "int walk_fn(void) { return file_fn(); }\n"));
    compile(dir, "cache/walk");
    assert_int_equal(check(dir, objdir, &out), 0);
    free(out);
    free(objdir);
    free(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_jitop_tree_passes),
        cmocka_unit_test(test_upward_include_fails),
        cmocka_unit_test(test_private_header_of_another_room_fails),
        cmocka_unit_test(test_unknown_room_fails),
        cmocka_unit_test(test_unlisted_cli_file_with_internal_header_fails),
        cmocka_unit_test(test_upward_call_fails),
        cmocka_unit_test(test_circle_inside_a_room_fails),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    jt_cleanup();
    return rc;
}
