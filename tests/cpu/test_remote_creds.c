/* Credentials of the remote cache tier that hold every byte a password may
 * hold, against a real server: nginx's /auth2/ location
 * (tests/support/nginx_dav.sh) lets in only the user "c i,|@x" with the
 * password of every byte from 0x01 to 0xff, or the bearer token
 * "tok,en|with space;and=%41+/~" — bytes that are separators in
 * JITOP_REMOTE_CACHE (blanks, ',', '|') or in a URL (':', '@', '/', '?',
 * '#', '%').
 *
 * Each way of giving them is used: the URL's own user:password (',', '|'
 * and '@' as they are, the rest percent-encoded), the URL with every byte
 * percent-encoded, $JITOP_REMOTE_CACHE_USER, $JITOP_REMOTE_CACHE_TOKEN, and a
 * .netrc with quoted strings. And no message shows a secret, however the
 * spec is wrong. */
#include "remote_server.h"

#include <sys/stat.h>

static const char hairy_user[] = "c i,|@x";
static const char hairy_token[] = "tok,en|with space;and=%41+/~";

/* The password: bytes 1 to 255, NUL-terminated. */
static void hairy_password(char pw[256])
{
    for (int i = 1; i < 256; i++)
        pw[i - 1] = (char)i;
    pw[255] = '\0';
}

/* s percent-encoded, except the bytes in keep (malloc'd). */
static char *pct(const char *s, const char *keep)
{
    char *out = malloc(strlen(s) * 3 + 1), *o = out;
    assert_non_null(out);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
            strchr(keep, *p))
            *o++ = (char)*p;
        else
            o += sprintf(o, "%%%02X", *p);
    }
    *o = '\0';
    return out;
}

/* Builds src into a fresh local cache through spec (the writer), then
 * reads it back into another fresh cache (the reader): 1 when the reader
 * hit the remote, 0 when it compiled. *err: what both wrote on stderr. */
static int round_trip(const char *spec, const char *src, char **err)
{
    char *c1 = jt_tmpdir(), *c2 = jt_tmpdir(), key[33];
    jitop__remote_forget_dead();
    rs_capture_begin();
    jitop_ctx *ctx = rs_ctx(c1, spec);
    assert_int_equal(rs_build(ctx, src, key), 0);
    jitop_ctx_destroy(ctx); /* drains the push */
    ctx = rs_ctx(c2, spec);
    int hit = rs_build(ctx, src, NULL);
    jitop_ctx_destroy(ctx);
    *err = rs_capture_end();
    free(c1);
    free(c2);
    return hit;
}

/* No 4 bytes in a row of the secret that a message could show (letters,
 * digits, punctuation) are in text. */
static void assert_no_secret(const char *text, const char *secret)
{
    size_t n = strlen(secret);
    for (size_t i = 0; i + 4 <= n; i++) {
        char piece[5] = {secret[i], secret[i + 1], secret[i + 2], secret[i + 3], 0};
        bool printable = true;
        for (int k = 0; k < 4; k++)
            printable = printable && piece[k] > ' ' && piece[k] < 0x7f;
        if (printable && strstr(text, piece))
            fail_msg("the message shows '%s' of a secret: %s", piece, text);
    }
}

/* The bug: ',' and '|' in the URL's password split the spec (',' between
 * remotes, '|' before an attribute), so the remote was not used and a
 * piece of the password was shown as a URL or an attribute. Here a dead
 * remote comes first, separated by ", ": both separators still work. */
static void test_url_password_with_separators(void **state)
{
    (void)state;
    RS_NEED_SERVER();
    char pw[256], *err = NULL, *spec = NULL;
    hairy_password(pw);
    char *u = pct(hairy_user, ",|@"), *p = pct(pw, ",|@");
    assert_true(asprintf(&spec, "http://127.0.0.1:1/down%s,  http://%s:%s@127.0.0.1:%d/auth2%s",
                         RS_PATIENT, u, p, rs_port, RS_PATIENT) > 0);
    char *src = rs_source("sep");
    assert_int_equal(round_trip(spec, src, &err), 1);
    assert_null(strstr(err, "remote cache not used"));
    assert_null(strstr(err, "auth2")); /* the hairy remote never failed */
    assert_non_null(strstr(err, "http://127.0.0.1:1/down"));
    assert_no_secret(err, pw);
    free(err);
    free(spec);
    free(src);
    free(u);
    free(p);
}

/* Every byte percent-encoded (RFC 3986): what curl decodes. */
static void test_url_password_all_encoded(void **state)
{
    (void)state;
    RS_NEED_SERVER();
    char pw[256], *err = NULL, *spec = NULL;
    hairy_password(pw);
    char *u = pct(hairy_user, ""), *p = pct(pw, "");
    assert_true(asprintf(&spec, "http://%s:%s@127.0.0.1:%d/auth2%s", u, p, rs_port,
                         RS_PATIENT) > 0);
    char *src = rs_source("enc");
    assert_int_equal(round_trip(spec, src, &err), 1);
    assert_null(strstr(err, "warning"));
    free(err);
    free(spec);
    free(src);
    free(u);
    free(p);
}

/* $JITOP_REMOTE_CACHE_USER: user, the first ':', then the password as it
 * is, every byte. */
static void test_env_user(void **state)
{
    (void)state;
    RS_NEED_SERVER();
    char pw[256], *err = NULL, *cred = NULL;
    hairy_password(pw);
    assert_true(asprintf(&cred, "%s:%s", hairy_user, pw) > 0);
    char *spec = rs_url("auth2", RS_PATIENT), *src = rs_source("envuser");
    assert_int_equal(setenv("JITOP_REMOTE_CACHE_USER", cred, 1), 0);
    assert_int_equal(round_trip(spec, src, &err), 1);
    assert_int_equal(unsetenv("JITOP_REMOTE_CACHE_USER"), 0);
    assert_null(strstr(err, "warning"));
    free(err);
    free(cred);
    free(spec);
    free(src);
}

static void test_env_token(void **state)
{
    (void)state;
    RS_NEED_SERVER();
    char *err = NULL, *spec = rs_url("auth2", RS_PATIENT), *src = rs_source("envtoken");
    assert_int_equal(setenv("JITOP_REMOTE_CACHE_TOKEN", hairy_token, 1), 0);
    assert_int_equal(round_trip(spec, src, &err), 1);
    assert_int_equal(unsetenv("JITOP_REMOTE_CACHE_TOKEN"), 0);
    assert_null(strstr(err, "warning"));
    free(err);
    free(spec);
    free(src);
}

/* A token with a line break would be a second header (a request smuggled
 * into the server): refused, fail-open, and not shown. */
static void test_token_with_line_break(void **state)
{
    (void)state;
    RS_NEED_SERVER();
    char *err = NULL, *spec = rs_url("auth2", RS_PATIENT), *src = rs_source("crlf");
    assert_int_equal(setenv("JITOP_REMOTE_CACHE_TOKEN", "qwe1\r\nX-Smuggled: qwe2", 1), 0);
    assert_int_equal(round_trip(spec, src, &err), 0);
    assert_int_equal(unsetenv("JITOP_REMOTE_CACHE_TOKEN"), 0);
    assert_non_null(strstr(err, "JITOP_REMOTE_CACHE_TOKEN"));
    assert_non_null(strstr(err, "control"));
    assert_null(strstr(err, "qwe"));
    free(err);
    free(spec);
    free(src);
}

/* .netrc with quoted strings (curl's syntax: "..." with \" \\ \n \r \t):
 * a password with blanks, quotes and control bytes. */
static void test_netrc_quoted(void **state)
{
    (void)state;
    RS_NEED_SERVER();
    char pw[256], *err = NULL;
    hairy_password(pw);
    char *dir = jt_tmpdir(), *path = jt_path(dir, "netrc");
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    const char *fields[2] = {hairy_user, pw};
    fputs("machine 127.0.0.1 login ", f);
    for (int k = 0; k < 2; k++) {
        fputc('"', f);
        for (const char *p = fields[k]; *p; p++) {
            const char *esc = *p == '"' ? "\\\"" : *p == '\\' ? "\\\\" : *p == '\n' ? "\\n"
                            : *p == '\r'                      ? "\\r"
                            : *p == '\t'                      ? "\\t"
                                                              : NULL;
            if (esc)
                fputs(esc, f);
            else
                fputc(*p, f);
        }
        fputs(k == 0 ? "\" password " : "\"\n", f);
    }
    assert_int_equal(fclose(f), 0);
    assert_int_equal(chmod(path, 0600), 0);
    char *spec = rs_url("auth2", RS_PATIENT), *src = rs_source("netrc");
    assert_int_equal(setenv("NETRC", path, 1), 0);
    assert_int_equal(round_trip(spec, src, &err), 1);
    assert_int_equal(unsetenv("NETRC"), 0);
    assert_null(strstr(err, "warning"));
    free(err);
    free(spec);
    free(src);
    free(path);
    free(dir);
}

/* What a context says about a spec it cannot use, or a remote that is
 * down (its stderr). */
static char *said(const char *spec)
{
    char *cache = jt_tmpdir(), *src = rs_source("said");
    jitop__remote_forget_dead();
    rs_capture_begin();
    jitop_ctx *ctx = rs_ctx(cache, spec);
    rs_build(ctx, src, NULL);
    jitop_ctx_destroy(ctx);
    char *err = rs_capture_end();
    free(cache);
    free(src);
    return err;
}

/* However the spec is wrong, no message shows a secret ("qw" marks each
 * one here): a down remote names the redacted URL; a URL whose password
 * holds bytes that must be encoded (blanks, '/', '?', '#') is refused
 * without showing it; an unknown attribute is named, not its value. */
static void test_messages_never_show_secrets(void **state)
{
    (void)state;
    const char *specs[] = {
        "http://u:qw1,qw2|qw3@127.0.0.1:1/x?sig=qw4#qw5",
        "http://u:qw1 qw2 qw3@127.0.0.1:1/x",
        "http://u:qw1/qw2@127.0.0.1:1/x",
        "http://u:12/qw2@127.0.0.1:1/x",
        "http://u:qw1?qw2@127.0.0.1:1/x",
        "http://u:qw1#qw2@127.0.0.1:1/x",
        "http://u:qw1\tqw2@127.0.0.1:1/x",
        "http://qw1:qw2@127.0.0.1:1/x|token=qw3",
        "http://127.0.0.1:1/x|qw1",
        "qw1 qw2",
        "http://u:qw1|qw2",
        "http://u:qw1,http://u2:qw2@127.0.0.1:1/x",
    };
    for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++) {
        char *err = said(specs[i]);
        if (strstr(err, "qw"))
            fail_msg("spec %zu shows a secret: %s", i, err);
        if (!strstr(err, "warning"))
            fail_msg("spec %zu: no warning: %s", i, err);
        free(err);
    }
    /* The first is a good spec of a down remote: the message names it. */
    char *err = said(specs[0]);
    assert_non_null(strstr(err, "http://127.0.0.1:1/x"));
    free(err);
    err = said(specs[7]);
    assert_non_null(strstr(err, "unknown attribute 'token'"));
    free(err);
}

/* An attribute's value is percent-decoded, so a value can hold any byte
 * (',', '|' and blanks included); a bad escape is refused by name. */
static void test_attribute_values_decoded(void **state)
{
    (void)state;
    char *err = said("http://127.0.0.1:1/x|timeout=%35%30%30|connect-timeout=1%30%30");
    assert_null(strstr(err, "remote cache not used"));
    assert_non_null(strstr(err, "http://127.0.0.1:1/x")); /* down: asked */
    free(err);
    err = said("http://127.0.0.1:1/x|timeout=5%2C0");
    assert_non_null(strstr(err, "timeout"));
    assert_non_null(strstr(err, "milliseconds"));
    free(err);
    err = said("http://127.0.0.1:1/x|timeout=5%G0");
    assert_non_null(strstr(err, "timeout"));
    assert_non_null(strstr(err, "percent"));
    free(err);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_url_password_with_separators),
        cmocka_unit_test(test_url_password_all_encoded),
        cmocka_unit_test(test_env_user),
        cmocka_unit_test(test_env_token),
        cmocka_unit_test(test_token_with_line_break),
        cmocka_unit_test(test_netrc_quoted),
        cmocka_unit_test(test_messages_never_show_secrets),
        cmocka_unit_test(test_attribute_values_decoded),
    };
    int rc = cmocka_run_group_tests(tests, rs_setup, rs_teardown);
    jt_cleanup();
    return rc;
}
