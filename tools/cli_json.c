/* Escaping for the CLI's output: JSON string literals, and plain text that
 * a terminal shows as it is (no escape sequence in a path reaches it). */
#include "cli.h"

#include <stdbool.h>

/* Length of the valid UTF-8 sequence at p (1-4), or 0 when the bytes there
 * are not one (a stray continuation byte, an overlong or truncated form, a
 * surrogate, or beyond U+10FFFF). */
static size_t utf8_len(const unsigned char *p)
{
    size_t n;
    unsigned min;
    unsigned cp;
    if (p[0] < 0x80)
        return 1;
    if ((p[0] & 0xe0) == 0xc0) {
        n = 2, min = 0x80, cp = p[0] & 0x1f;
    } else if ((p[0] & 0xf0) == 0xe0) {
        n = 3, min = 0x800, cp = p[0] & 0x0f;
    } else if ((p[0] & 0xf8) == 0xf0) {
        n = 4, min = 0x10000, cp = p[0] & 0x07;
    } else {
        return 0;
    }
    for (size_t i = 1; i < n; i++) {
        if ((p[i] & 0xc0) != 0x80) /* also stops at the NUL */
            return 0;
        cp = (cp << 6) | (p[i] & 0x3f);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
        return 0;
    return n;
}

/* Paths and NVRTC logs are bytes, JSON is UTF-8 text: bytes that are not
 * UTF-8 become U+FFFD so that every line stays parseable. */
void jitop_cli_json_str(FILE *f, const char *s)
{
    fputc('"', f);
    const unsigned char *p = (const unsigned char *)s;
    while (*p) {
        size_t n = utf8_len(p);
        if (n == 0) {
            fputs("\\ufffd", f);
            p++;
            continue;
        }
        if (n > 1) {
            fwrite(p, 1, n, f);
            p += n;
            continue;
        }
        switch (*p) {
        case '"': fputs("\\\"", f); break;
        case '\\': fputs("\\\\", f); break;
        case '\n': fputs("\\n", f); break;
        case '\r': fputs("\\r", f); break;
        case '\t': fputs("\\t", f); break;
        case '\b': fputs("\\b", f); break;
        case '\f': fputs("\\f", f); break;
        default:
            if (*p < 0x20 || *p == 0x7f)
                fprintf(f, "\\u%04x", *p);
            else
                fputc(*p, f);
        }
        p++;
    }
    fputc('"', f);
}

void jitop_cli_json_str_or_null(FILE *out, const char *s)
{
    if (s)
        jitop_cli_json_str(out, s);
    else
        fputs("null", out);
}

void jitop_cli_text(FILE *f, const char *s, int keep_newlines)
{
    const unsigned char *p = (const unsigned char *)s;
    while (*p) {
        size_t n = utf8_len(p);
        /* C1 controls (U+0080-U+009F, 0xc2 0x80-0x9f in UTF-8) are control
         * sequences to some terminals too (U+009B is CSI). */
        bool c1 = n == 2 && p[0] == 0xc2 && p[1] < 0xa0;
        if (n > 1 && !c1) {
            fwrite(p, 1, n, f);
            p += n;
            continue;
        }
        if (n == 1 && *p >= 0x20 && *p != 0x7f) {
            fputc(*p, f);
        } else if (n == 1 && *p == '\n') {
            fputs(keep_newlines ? "\n" : "\\n", f);
        } else if (n == 1 && *p == '\t') {
            fputs("\\t", f);
        } else if (n == 1 && *p == '\r') {
            fputs("\\r", f);
        } else {
            /* a control byte, a C1 control's two bytes, or bytes that are
             * not UTF-8: each as \xNN */
            for (size_t i = 0; i < (c1 ? 2 : 1); i++)
                fprintf(f, "\\x%02x", p[i]);
            p += c1 ? 2 : 1;
            continue;
        }
        p++;
    }
}

void jitop_cli_text_unit(FILE *f, const char *file, const char *arch, const char *name)
{
    jitop_cli_text(f, file, 0);
    fputs(" (", f);
    jitop_cli_text(f, arch, 0);
    if (name) {
        fputs(", ", f);
        jitop_cli_text(f, name, 0);
    }
    fputc(')', f);
}
