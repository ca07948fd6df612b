/* The include scanner: finds the directives that make a preprocessor read
 * another file, applying the translation phases a preprocessor applies
 * before it sees a directive (C11 5.1.1.2, C++ [lex.phases]): trigraphs,
 * line splices, comments as white space, the %: digraph for #. What NVRTC
 * (and gcc) honour, this scanner sees, whatever the spelling:
 * "#/ * * /include", "#include/ * * /\"h.h\"", "#\\<newline>include",
 * "#inc\\<newline>lude", "%:include", form feed and vertical tab inside the
 * directive, #include_next, a header name split by a splice.
 *
 * Where compilers differ, every reading is taken: trigraphs are replaced
 * only before C++17 (NVRTC's default is C++17; -std=c++14 turns them on),
 * and gcc also splices a backslash followed by blanks before the newline,
 * NVRTC does not. A text that holds such sequences is scanned once per
 * reading and the union kept, so that a header is never missed for want of
 * knowing the options; the cost is a second pass over the rare text that
 * needs one.
 *
 * Every directive of every #if branch is taken (a header that does not
 * exist on a branch that is not compiled is then simply not found by the
 * caller). A directive whose header name comes from macros ("#include
 * CONFIG", "#include HDR(x)") is reported with name NULL, and the caller
 * must not ignore it: with the object-like #defines the scan also reports,
 * it can resolve "#include CONFIG" when every definition of CONFIG is a
 * header name; anything else only a preprocessor can resolve. */
#include "compile/compile.h"

#include <stdlib.h>
#include <string.h>

struct lexer {
    const char *p, *end; /* physical position */
    unsigned line;       /* physical line of p, from 1 */
    bool trigraphs;      /* ??= and the eight others (phase 1) */
    bool blank_splice;   /* backslash, blanks, newline splices too (gcc) */
};

/* The character the trigraph ??c stands for, 0 when ??c is none. */
static char trigraph(char c)
{
    switch (c) {
    case '=': return '#';
    case '/': return '\\';
    case '\'': return '^';
    case '(': return '[';
    case ')': return ']';
    case '!': return '|';
    case '<': return '{';
    case '>': return '}';
    case '-': return '~';
    default: return 0;
    }
}

static bool is_blank(int c)
{
    return c == ' ' || c == '\t' || c == '\f' || c == '\v' || c == '\r';
}

/* Letters, digits, '_', '$' and every byte of a UTF-8 sequence. */
static bool is_ident(int c)
{
    return (unsigned)((c | 0x20) - 'a') < 26 || (unsigned)(c - '0') < 10 || c == '_' ||
           c == '$' || c >= 0x80;
}

static bool is_digit(int c)
{
    return c >= '0' && c <= '9';
}

/* Bytes of the line splice at p ("\\\n", "\\\r\n", ??/ for the backslash
 * with trigraphs, blanks before the newline with blank_splice); 0: none. */
static size_t splice_len(const struct lexer *lx, const char *p)
{
    const char *q = p;
    if (q < lx->end && *q == '\\')
        q++;
    else if (lx->trigraphs && lx->end - q >= 3 && q[0] == '?' && q[1] == '?' && q[2] == '/')
        q += 3;
    else
        return 0;
    if (lx->blank_splice)
        while (q < lx->end && is_blank((unsigned char)*q))
            q++;
    else if (lx->end - q >= 2 && q[0] == '\r' && q[1] == '\n')
        q++;
    return q < lx->end && *q == '\n' ? (size_t)(q + 1 - p) : 0;
}

/* The character at p after phases 1 and 2, -1 at the end; *n receives the
 * physical bytes it spans, splices before it included. */
static int peek_at(const struct lexer *lx, const char *p, size_t *n)
{
    const char *q = p;
    size_t s;
    while ((s = splice_len(lx, q)) > 0)
        q += s;
    if (q >= lx->end) {
        *n = (size_t)(q - p);
        return -1;
    }
    if (lx->trigraphs && lx->end - q >= 3 && q[0] == '?' && q[1] == '?' && trigraph(q[2])) {
        *n = (size_t)(q + 3 - p);
        return (unsigned char)trigraph(q[2]);
    }
    *n = (size_t)(q + 1 - p);
    return (unsigned char)*q;
}

static int peek(const struct lexer *lx)
{
    size_t n;
    return peek_at(lx, lx->p, &n);
}

/* The character after the next one. */
static int peek2(const struct lexer *lx)
{
    size_t n, m;
    if (peek_at(lx, lx->p, &n) < 0)
        return -1;
    return peek_at(lx, lx->p + n, &m);
}

/* Moves past n physical bytes, counting lines. */
static void advance(struct lexer *lx, size_t n)
{
    for (const char *q = lx->p; q < lx->p + n; q++)
        if (*q == '\n')
            lx->line++;
    lx->p += n;
}

static int get(struct lexer *lx)
{
    size_t n;
    int c = peek_at(lx, lx->p, &n);
    advance(lx, n);
    return c;
}

/* After the opening slash-star; a comment is one space (phase 3), so
 * whether a token came first on the line does not change. */
static void skip_block_comment(struct lexer *lx)
{
    get(lx);
    get(lx);
    for (int c; (c = get(lx)) >= 0;)
        if (c == '*' && peek(lx) == '/') {
            get(lx);
            return;
        }
}

static void skip_line_comment(struct lexer *lx)
{
    while (peek(lx) >= 0 && peek(lx) != '\n')
        get(lx);
}

/* A string or character literal; it ends at its quote or, unterminated, at
 * the end of the line (never beyond: a directive starts a line). */
static void skip_literal(struct lexer *lx)
{
    int quote = get(lx);
    for (int c; (c = peek(lx)) >= 0 && c != '\n';) {
        get(lx);
        if (c == quote)
            return;
        if (c == '\\' && peek(lx) >= 0 && peek(lx) != '\n')
            get(lx);
    }
}

/* A C++ raw string, after its prefix (R, u8R, uR, UR, LR): R"delim(...)delim".
 * Phases 1 and 2 are undone inside its body, so the body is read as
 * physical bytes. A delimiter that is not one (too long, a bad character)
 * leaves an ordinary string. */
static void skip_raw_string(struct lexer *lx)
{
    struct lexer save = *lx;
    char delim[18];
    size_t nd = 0;
    get(lx); /* the quote */
    for (;;) {
        int c = peek(lx);
        if (c == '(')
            break;
        if (c < 0 || nd == 16 || c == ' ' || c == ')' || c == '\\' || c == '\t' || c == '\v' ||
            c == '\f' || c == '\n') {
            *lx = save;
            skip_literal(lx);
            return;
        }
        delim[nd++] = (char)get(lx);
    }
    get(lx); /* the parenthesis */
    for (const char *q = lx->p; q < lx->end; q++) {
        if (*q == ')' && (size_t)(lx->end - q) >= nd + 2 && memcmp(q + 1, delim, nd) == 0 &&
            q[1 + nd] == '"') {
            advance(lx, (size_t)(q + nd + 2 - lx->p));
            return;
        }
    }
    advance(lx, (size_t)(lx->end - lx->p));
}

/* A preprocessing number: digits, letters, '.', exponent signs, and C++14
 * digit separators ('), which must not start a character literal here. */
static void skip_pp_number(struct lexer *lx)
{
    get(lx);
    for (;;) {
        int c = peek(lx);
        if ((c == 'e' || c == 'E' || c == 'p' || c == 'P') &&
            (peek2(lx) == '+' || peek2(lx) == '-')) {
            get(lx);
            get(lx);
        } else if (c == '\'' && is_ident(peek2(lx))) {
            get(lx);
            get(lx);
        } else if (is_ident(c) || c == '.') {
            get(lx);
        } else {
            return;
        }
    }
}

/* Blanks and comments inside a directive line. */
static void skip_directive_space(struct lexer *lx)
{
    for (;;) {
        int c = peek(lx);
        if (is_blank(c))
            get(lx);
        else if (c == '/' && peek2(lx) == '*')
            skip_block_comment(lx);
        else
            return;
    }
}

/* An identifier into buf (truncated to cap - 1, NUL-terminated). */
static void read_ident(struct lexer *lx, char *buf, size_t cap)
{
    size_t n = 0;
    while (is_ident(peek(lx))) {
        int c = get(lx);
        if (n + 1 < cap)
            buf[n++] = (char)c;
    }
    buf[n] = '\0';
}

/* A growable character buffer for names and messages. */
struct text {
    char *s;
    size_t n, cap;
    bool oom;
};

static void text_add(struct text *t, char c)
{
    if (t->oom)
        return;
    if (t->n + 1 >= t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 64;
        char *s = realloc(t->s, cap);
        if (!s) {
            t->oom = true;
            return;
        }
        t->s = s;
        t->cap = cap;
    }
    t->s[t->n++] = c;
    t->s[t->n] = '\0';
}

static int includes_add(jitop__includes *l, const jitop__include *inc)
{
    for (size_t i = 0; i < l->n; i++) {
        const jitop__include *o = &l->v[i];
        if (o->quoted == inc->quoted && o->next == inc->next && o->embed == inc->embed &&
            ((!o->name && !inc->name && !strcmp(o->text, inc->text)) ||
             (o->name && inc->name && !strcmp(o->name, inc->name))))
            return JITOP_OK; /* the same directive from another reading, or repeated */
    }
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 16;
        jitop__include *v = realloc(l->v, cap * sizeof *v);
        if (!v)
            return JITOP_ENOMEM;
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n] = *inc;
    l->v[l->n].name = inc->name ? jitop__strdup(inc->name) : NULL;
    l->v[l->n].text = inc->text ? jitop__strdup(inc->text) : NULL;
    if ((inc->name && !l->v[l->n].name) || (inc->text && !l->v[l->n].text)) {
        free(l->v[l->n].name);
        free(l->v[l->n].text);
        return JITOP_ENOMEM;
    }
    l->n++;
    return JITOP_OK;
}

/* The longest directive text kept for a message. */
#define DIRECTIVE_TEXT_MAX 200

/* The rest of a directive's logical line, comments as one space, blanks
 * folded, into words (at most DIRECTIVE_TEXT_MAX characters kept): the
 * message of a directive whose header name comes from macros. */
static void directive_words(struct lexer *lx, struct text *words)
{
    bool space = false;
    for (int c; (c = peek(lx)) >= 0 && c != '\n';) {
        if (c == '/' && peek2(lx) == '*') {
            skip_block_comment(lx);
            space = true;
            continue;
        }
        if (c == '/' && peek2(lx) == '/')
            return;
        get(lx);
        if (is_blank(c)) {
            space = true;
            continue;
        }
        if (words->n < DIRECTIVE_TEXT_MAX) {
            if (space && words->n > 0)
                text_add(words, ' ');
            text_add(words, (char)c);
        }
        space = false;
    }
}

static int defines_add(jitop__includes *l, const char *name, const char *value)
{
    if (l->ndefs == l->defcap) {
        size_t cap = l->defcap ? l->defcap * 2 : 16;
        jitop__define *v = realloc(l->defs, cap * sizeof *v);
        if (!v)
            return JITOP_ENOMEM;
        l->defs = v;
        l->defcap = cap;
    }
    jitop__define *d = &l->defs[l->ndefs];
    d->name = jitop__strdup(name);
    d->value = value ? jitop__strdup(value) : NULL;
    if (!d->name || (value && !d->value)) {
        free(d->name);
        free(d->value);
        return JITOP_ENOMEM;
    }
    l->ndefs++;
    return JITOP_OK;
}

/* After "#define": records an object-like macro whose whole value is a
 * header name ("x.h" or <x.h>, delimiters kept) or one identifier, and any
 * other macro with no value, so that "#include NAME" can be resolved from
 * the definitions of NAME (macros.c). */
static int define_directive(struct lexer *lx, jitop__includes *out)
{
    struct text name = {0}, value = {0};
    int status = JITOP_OK;
    skip_directive_space(lx);
    while (is_ident(peek(lx)))
        text_add(&name, (char)get(lx));
    if (name.n == 0 || name.oom)
        goto out;
    bool simple = false;
    if (peek(lx) != '(') { /* not function-like */
        skip_directive_space(lx);
        int c = peek(lx);
        if (c == '"' || c == '<') {
            int close = c == '"' ? '"' : '>';
            text_add(&value, (char)get(lx));
            while ((c = peek(lx)) >= 0 && c != '\n' && c != close)
                text_add(&value, (char)get(lx));
            if (c == close) {
                text_add(&value, (char)get(lx));
                simple = value.n > 2;
            }
        } else if (is_ident(c) && !is_digit(c)) {
            while (is_ident(peek(lx)))
                text_add(&value, (char)get(lx));
            simple = true;
        }
        skip_directive_space(lx);
        c = peek(lx);
        simple = simple && (c < 0 || c == '\n' || (c == '/' && peek2(lx) == '/'));
    }
    if (value.oom) {
        status = JITOP_ENOMEM;
        goto out;
    }
    status = defines_add(out, name.s, simple ? value.s : NULL);
out:
    if (name.oom)
        status = JITOP_ENOMEM;
    free(name.s);
    free(value.s);
    return status;
}

/* After the '#' (or %:) that starts a directive line. Reads the directive
 * name and, for the ones that read a file, the header name; leaves the rest
 * of the line to the caller, which lexes it as usual (a comment there may
 * run over several lines). */
static int directive(struct lexer *lx, unsigned line, jitop__includes *out)
{
    char word[16];
    jitop__include inc = {.line = line};
    struct text t = {0};
    int status = JITOP_OK;
    skip_directive_space(lx);
    read_ident(lx, word, sizeof word);
    if (strcmp(word, "define") == 0)
        return define_directive(lx, out);
    if (strcmp(word, "include") == 0)
        ;
    else if (strcmp(word, "include_next") == 0)
        inc.next = true;
    else if (strcmp(word, "embed") == 0) /* C23 / C++26: read as bytes */
        inc.embed = true;
    else
        return JITOP_OK;
    skip_directive_space(lx);
    int c = peek(lx);
    if (c < 0 || c == '\n')
        return JITOP_OK; /* "#include" alone: an error for the compiler */
    if (c == '"' || c == '<') {
        int close = c == '"' ? '"' : '>';
        text_add(&t, (char)get(lx));
        while ((c = peek(lx)) >= 0 && c != '\n' && c != close)
            text_add(&t, (char)get(lx));
        if (c == close && t.n == 1) {
            get(lx); /* "" or <>: an error for the compiler */
            goto out;
        }
        if (c == close) {
            get(lx);
            inc.name = t.s + 1;
            inc.quoted = close == '"';
            status = t.oom ? JITOP_ENOMEM : includes_add(out, &inc);
            goto out;
        }
        /* Unterminated: an error for the compiler too, but reported as
         * unresolved rather than guessed at. t keeps what was read. */
    }
    directive_words(lx, &t);
    if (t.oom) {
        status = JITOP_ENOMEM;
        goto out;
    }
    inc.text = t.s ? t.s : "";
    status = includes_add(out, &inc);
out:
    free(t.s);
    return status;
}

/* One token (or blank, newline, comment, directive) of a reading, from
 * lx->p, with every character read through phases 1 and 2: the path for
 * whatever the fast loop below leaves to it. */
static int slow_token(struct lexer *lx, bool *line_start, jitop__includes *out)
{
    int c = peek(lx), c2 = peek2(lx);
    if (c == '\n') {
        get(lx);
        *line_start = true;
    } else if (is_blank(c)) {
        get(lx);
    } else if (c == '/' && c2 == '*') {
        skip_block_comment(lx);
    } else if (c == '/' && c2 == '/') {
        skip_line_comment(lx);
    } else if (*line_start && (c == '#' || (c == '%' && c2 == ':'))) {
        unsigned line = lx->line;
        get(lx);
        if (c == '%')
            get(lx);
        *line_start = false;
        /* "##" (or %:%:) first on a line is a token, not a directive. */
        bool paste = peek(lx) == '#' || (peek(lx) == '%' && peek2(lx) == ':');
        return paste ? JITOP_OK : directive(lx, line, out);
    } else if (c == '"' || c == '\'') {
        *line_start = false;
        skip_literal(lx);
    } else if (is_digit(c) || (c == '.' && is_digit(c2))) {
        *line_start = false;
        skip_pp_number(lx);
    } else if (is_ident(c)) {
        char word[8];
        *line_start = false;
        read_ident(lx, word, sizeof word);
        bool raw = !strcmp(word, "R") || !strcmp(word, "u8R") || !strcmp(word, "uR") ||
                   !strcmp(word, "UR") || !strcmp(word, "LR");
        if (raw && peek(lx) == '"')
            skip_raw_string(lx);
    } else {
        *line_start = false;
        get(lx);
    }
    return JITOP_OK;
}

/* The fast loop reads physical bytes directly, which is what phases 1 and 2
 * give wherever no byte that can start a splice or a trigraph is involved:
 * a backslash, or '?' when trigraphs are read. A token that meets one is
 * read again from its start by slow_token (or, for a comment or literal
 * whose state is only "inside", continued by the slow reader from there), so
 * both paths find the same directives; the fast one runs at memory speed on
 * the common text (headers are mostly comments, identifiers and blanks). */
static bool special(const struct lexer *lx, const char *q)
{
    return *q == '\\' || (lx->trigraphs && *q == '?');
}

/* The physical byte after q when it is an ordinary one (no splice or
 * trigraph can start there), else -1: the caller takes the slow path. */
static int plain_next(const struct lexer *lx, const char *q)
{
    if (q + 1 >= lx->end || special(lx, q + 1))
        return -1;
    return (unsigned char)q[1];
}

static void count_lines(struct lexer *lx, const char *from, const char *to)
{
    for (const char *q = from; (q = memchr(q, '\n', (size_t)(to - q))) != NULL; q++)
        lx->line++;
}

/* After a plain slash-star at lx->p. */
static void fast_block_comment(struct lexer *lx)
{
    const char *start = lx->p, *q = lx->p + 2;
    for (;;) {
        const char *star = memchr(q, '*', (size_t)(lx->end - q));
        if (!star) {
            count_lines(lx, start, lx->end);
            lx->p = lx->end;
            return;
        }
        size_t n = 1;
        int next = plain_next(lx, star);
        if (next < 0 && star + 1 < lx->end)
            next = peek_at(lx, star + 1, &n); /* "*\<newline>/" ends it too */
        if (next == '/') {
            count_lines(lx, start, star + 1 + n);
            lx->p = star + 1 + n;
            return;
        }
        q = star + 1;
    }
}

/* At a plain "//": up to the newline, or on from a special byte by the slow
 * reader (a splice continues the comment). */
static void fast_line_comment(struct lexer *lx)
{
    const char *q = lx->p + 2;
    while (q < lx->end && *q != '\n' && !special(lx, q))
        q++;
    lx->p = q;
    if (q < lx->end && *q != '\n')
        skip_line_comment(lx);
}

/* At a quote: an escape of an ordinary character is read here; anything
 * else but the closing quote or the end of the line sends the literal back
 * to its start for skip_literal. Never crosses a newline. */
static void fast_literal(struct lexer *lx)
{
    const char *start = lx->p, *q = lx->p + 1;
    char quote = *start;
    while (q < lx->end) {
        char c = *q;
        if (c == quote) {
            lx->p = q + 1;
            return;
        }
        if (c == '\n') {
            lx->p = q;
            return;
        }
        if (lx->trigraphs && c == '?')
            break;
        if (c == '\\') {
            int e = plain_next(lx, q);
            if (e < 0 || e == '\n' || e == '\r' || (lx->blank_splice && is_blank(e)))
                break;
            q += 2;
            continue;
        }
        q++;
    }
    if (q >= lx->end) {
        lx->p = lx->end;
        return;
    }
    lx->p = start;
    skip_literal(lx);
}

/* At a digit, or a '.' before one: skip_pp_number's rule on plain bytes;
 * false (nothing consumed) where a special byte is involved. */
static bool fast_pp_number(struct lexer *lx)
{
    const char *q = lx->p + 1;
    for (;;) {
        if (q >= lx->end)
            break;
        if (special(lx, q))
            return false;
        int c = (unsigned char)*q;
        if (c == 'e' || c == 'E' || c == 'p' || c == 'P' || c == '\'') {
            if (q + 1 < lx->end && special(lx, q + 1))
                return false;
            int c2 = q + 1 < lx->end ? (unsigned char)q[1] : -1;
            if ((c != '\'' && (c2 == '+' || c2 == '-')) || (c == '\'' && is_ident(c2))) {
                q += 2;
                continue;
            }
        }
        if (is_ident(c) || c == '.')
            q++;
        else
            break;
    }
    lx->p = q;
    return true;
}

/* At an identifier's first byte: false (nothing consumed) where a special
 * byte ends it, which may be a splice inside it. */
static bool fast_ident(struct lexer *lx)
{
    const char *start = lx->p, *q = lx->p + 1;
    while (q < lx->end && is_ident((unsigned char)*q))
        q++;
    if (q < lx->end && special(lx, q))
        return false;
    lx->p = q;
    size_t n = (size_t)(q - start);
    bool raw = (n == 1 && start[0] == 'R') || (n == 3 && !memcmp(start, "u8R", 3)) ||
               (n == 2 && (!memcmp(start, "uR", 2) || !memcmp(start, "UR", 2) ||
                           !memcmp(start, "LR", 2)));
    if (raw && peek(lx) == '"')
        skip_raw_string(lx);
    return true;
}

/* One reading of the text. */
static int scan_pass(const char *text, size_t len, bool trigraphs, bool blank_splice, bool fast,
                     jitop__includes *out)
{
    struct lexer lx = {text, text + len, 1, trigraphs, blank_splice};
    bool line_start = true; /* no token yet on this logical line */
    if (len >= 3 && memcmp(text, "\xEF\xBB\xBF", 3) == 0)
        lx.p += 3; /* a UTF-8 byte order mark: gcc skips it (NVRTC rejects it) */
    while (lx.p < lx.end) {
        int c = (unsigned char)*lx.p, c2;
        bool done = true;
        if (!fast || special(&lx, lx.p)) {
            done = false;
        } else if (c == '\n') {
            lx.p++;
            lx.line++;
            line_start = true;
        } else if (is_blank(c)) {
            lx.p++;
        } else if (c == '/') {
            c2 = plain_next(&lx, lx.p);
            if (c2 == '*')
                fast_block_comment(&lx);
            else if (c2 == '/')
                fast_line_comment(&lx);
            else if (c2 < 0 && lx.p + 1 < lx.end)
                done = false;
            else {
                line_start = false;
                lx.p++;
            }
        } else if (c == '#' || c == '%') {
            done = false; /* a directive, or a token: slow_token tells */
        } else if (c == '"' || c == '\'') {
            line_start = false;
            fast_literal(&lx);
        } else if (is_digit(c) || c == '.') {
            c2 = plain_next(&lx, lx.p);
            if (c == '.' && c2 < 0 && lx.p + 1 < lx.end) {
                done = false;
            } else if (c == '.' && !is_digit(c2)) {
                line_start = false;
                lx.p++;
            } else {
                line_start = false;
                done = fast_pp_number(&lx);
            }
        } else if (is_ident(c)) {
            line_start = false;
            done = fast_ident(&lx);
        } else {
            line_start = false;
            lx.p++;
        }
        if (!done) {
            int rc = slow_token(&lx, &line_start, out);
            if (rc != JITOP_OK)
                return rc;
        }
    }
    return JITOP_OK;
}

static bool has_trigraph(const char *text, size_t len)
{
    const char *end = text + len;
    for (const char *q = text; (q = memchr(q, '?', (size_t)(end - q))) != NULL; q++)
        if (end - q >= 3 && q[1] == '?' && trigraph(q[2]))
            return true;
    return false;
}

/* A backslash (or ??/) with blanks before a newline: a splice for gcc, not
 * for NVRTC ("\\\r\n" is one for both and needs no second reading). Looked
 * for back from each newline: the blanks before it, then the backslash. */
static bool has_blank_splice(const char *text, size_t len)
{
    const char *end = text + len;
    for (const char *nl = text; (nl = memchr(nl, '\n', (size_t)(end - nl))) != NULL; nl++) {
        const char *q = nl;
        while (q > text && is_blank((unsigned char)q[-1]))
            q--;
        if (q == nl || q == text)
            continue;
        bool backslash = q[-1] == '\\' || (q[-1] == '/' && q - text >= 3 && q[-2] == '?' &&
                                          q[-3] == '?');
        bool crlf = q == nl - 1 && nl[-1] == '\r';
        if (backslash && !crlf)
            return true;
    }
    return false;
}

static int scan_all(const char *text, size_t len, bool fast, jitop__includes *out)
{
    memset(out, 0, sizeof *out);
    bool tri = has_trigraph(text, len), blank = has_blank_splice(text, len);
    int status = scan_pass(text, len, false, false, fast, out);
    if (status == JITOP_OK && tri)
        status = scan_pass(text, len, true, false, fast, out);
    if (status == JITOP_OK && blank)
        status = scan_pass(text, len, false, true, fast, out);
    if (status == JITOP_OK && tri && blank)
        status = scan_pass(text, len, true, true, fast, out);
    if (status != JITOP_OK)
        jitop__includes_free(out);
    return status;
}

int jitop__scan_includes(const char *text, size_t len, jitop__includes *out)
{
    return scan_all(text, len, true, out);
}

int jitop__scan_includes_reference(const char *text, size_t len, jitop__includes *out)
{
    return scan_all(text, len, false, out);
}

void jitop__includes_free(jitop__includes *l)
{
    if (!l)
        return;
    for (size_t i = 0; i < l->n; i++) {
        free(l->v[i].name);
        free(l->v[i].text);
    }
    for (size_t i = 0; i < l->ndefs; i++) {
        free(l->defs[i].name);
        free(l->defs[i].value);
    }
    free(l->v);
    free(l->defs);
    memset(l, 0, sizeof *l);
}
