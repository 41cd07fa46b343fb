/* jinja_lex.c — template source to tokens, with Jinja2's whitespace rules as HF sets them.
 *
 * Text between tags becomes JT_TEXT (pointing into the source). Rules, in Jinja2's order:
 *   `{%-` `{{-` `{#-`  strip all whitespace before the tag;
 *   `-%}` `-}}` `-#}`  strip all whitespace after it;
 *   lstrip_blocks: spaces/tabs between the start of a line and `{%` / `{#` go (not before
 *                  `{{`, not with `{%+`; "start of a line" includes right after a tag whose
 *                  end consumed a newline);
 *   trim_blocks:   the newline right after `%}` / `#}` goes (not after `+%}`).
 * The caller has already normalised newlines to \n and dropped one trailing newline.
 * Inside a tag: names, numbers, strings (Python escapes), operators; `}}` closes a variable
 * only when no bracket is open. `{% raw %}...{% endraw %}` is text.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat/jinja_internal.h"

typedef struct jlexer {
    const char *s;
    size_t      n, pos;
    size_t      counted;      /* line/line_start are valid for offset `counted` */
    int         line;
    size_t      line_start;
    bool        line_starting;
    int         balance;      /* open brackets inside the current tag */
    jarena     *a;
    jtoks      *toks;
    char       *err;
    size_t      err_len;
    recur_status st;
} jlexer;

static bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }
static bool is_alpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
static bool is_digit(char c) { return c >= '0' && c <= '9'; }

/* line and column (1-based) of offset p; offsets are asked for in increasing order */
static void where(jlexer *lx, size_t p, int *line, int *col) {
    if (p < lx->counted) { lx->counted = 0; lx->line = 1; lx->line_start = 0; }
    for (size_t i = lx->counted; i < p && i < lx->n; i++)
        if (lx->s[i] == '\n') { lx->line++; lx->line_start = i + 1; }
    lx->counted = p;
    *line = lx->line;
    *col = (int)(p - lx->line_start) + 1;
}

static bool lex_fail(jlexer *lx, size_t at, const char *fmt, ...) RC_PRINTF(3, 4);
static bool lex_fail(jlexer *lx, size_t at, const char *fmt, ...) {
    int line, col;
    where(lx, at, &line, &col);
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    lx->st = rc_fail(lx->err, lx->err_len, RECUR_E_INVALID, "line %d, column %d: %s", line, col, msg);
    return false;
}

static bool lex_nomem(jlexer *lx) {
    lx->st = rc_fail(lx->err, lx->err_len, RECUR_E_NOMEM, "out of memory");
    return false;
}

static jtok *emit(jlexer *lx, jtok_type t, size_t at) {
    jtoks *ts = lx->toks;
    if (ts->n == ts->cap) {
        size_t cap = ts->cap ? ts->cap * 2 : 256;
        jtok *v = realloc(ts->v, cap * sizeof *v);
        if (!v) { lex_nomem(lx); return NULL; }
        ts->v = v;
        ts->cap = cap;
    }
    jtok *k = &ts->v[ts->n++];
    memset(k, 0, sizeof *k);
    k->t = t;
    where(lx, at, &k->line, &k->col);
    return k;
}

static bool emit_text(jlexer *lx, size_t b, size_t e) {
    if (e <= b) return true;
    jtok *k = emit(lx, JT_TEXT, b);
    if (!k) return false;
    k->s = lx->s + b;
    k->len = e - b;
    return true;
}

/* ---- string literals -------------------------------------------------------------------- */

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* One escape after a backslash at s[*i] (the char after '\'); appends to out. */
static bool unescape_one(jlexer *lx, size_t at, const char *s, size_t end, size_t *i, char *out, size_t *o) {
    static const char simple_in[] = "\\'\"abfnrtv", simple_out[] = "\\'\"\a\b\f\n\r\t\v";
    char c = s[*i];
    const char *k = strchr(simple_in, c);
    if (c && k) { out[(*o)++] = simple_out[k - simple_in]; (*i)++; return true; }
    if (c == '\n') { (*i)++; return true; }   /* line continuation */
    if (c >= '0' && c <= '7') {
        unsigned v = 0;
        for (int d = 0; d < 3 && *i < end && s[*i] >= '0' && s[*i] <= '7'; d++) v = v * 8 + (unsigned)(s[(*i)++] - '0');
        *o += jutf8_encode(v, out + *o);
        return true;
    }
    int nd = c == 'x' ? 2 : c == 'u' ? 4 : c == 'U' ? 8 : 0;
    if (!nd) { out[(*o)++] = '\\'; return true; }   /* unknown escapes stay as written */
    uint32_t v = 0;
    for (int d = 1; d <= nd; d++) {
        int h = *i + d < end ? hexval(s[*i + d]) : -1;
        if (h < 0) return lex_fail(lx, at, "truncated \\%c escape in a string", c);
        v = v * 16 + (uint32_t)h;
    }
    if (v > 0x10FFFF) return lex_fail(lx, at, "illegal Unicode character in a string");
    *i += (size_t)nd + 1;
    *o += jutf8_encode(v, out + *o);
    return true;
}

static bool lex_string(jlexer *lx) {
    const char *s = lx->s;
    size_t start = lx->pos, i = start + 1;
    char q = s[start];
    while (i < lx->n && s[i] != q) i += (s[i] == '\\' && i + 1 < lx->n) ? 2 : 1;
    if (i >= lx->n) return lex_fail(lx, start, "unterminated string");
    size_t end = i;
    char *out = jarena_alloc(lx->a, end - start + 1);
    if (!out) return lex_nomem(lx);
    size_t o = 0;
    for (i = start + 1; i < end;) {
        if (s[i] != '\\') { out[o++] = s[i++]; continue; }
        i++;
        if (!unescape_one(lx, i - 1, s, end, &i, out, &o)) return false;
    }
    out[o] = 0;
    jtok *k = emit(lx, JT_STRING, start);
    if (!k) return false;
    k->s = out;
    k->len = o;
    lx->pos = end + 1;
    return true;
}

/* ---- numbers, names, operators ------------------------------------------------------------ */

static size_t digits(const char *s, size_t i, size_t n) {   /* \d+(_\d+)* */
    while (i < n && (is_digit(s[i]) || (s[i] == '_' && i + 1 < n && is_digit(s[i + 1])))) i++;
    return i;
}

static bool lex_number(jlexer *lx) {
    const char *s = lx->s;
    size_t b = lx->pos, i = digits(s, b, lx->n);
    bool is_float = false;
    if (i + 1 < lx->n && s[i] == '.' && is_digit(s[i + 1])) { i = digits(s, i + 1, lx->n); is_float = true; }
    if (i < lx->n && (s[i] == 'e' || s[i] == 'E')) {
        size_t j = i + 1;
        if (j < lx->n && (s[j] == '+' || s[j] == '-')) j++;
        if (j < lx->n && is_digit(s[j])) { i = digits(s, j, lx->n); is_float = true; }
    }
    char tmp[128];
    size_t o = 0;
    for (size_t k = b; k < i && o + 1 < sizeof tmp; k++)
        if (s[k] != '_') tmp[o++] = s[k];
    tmp[o] = 0;
    if (i - b >= sizeof tmp - 1) return lex_fail(lx, b, "number too long");
    jtok *k = emit(lx, is_float ? JT_FLOAT : JT_INT, b);
    if (!k) return false;
    if (is_float) {
        k->f = strtod(tmp, NULL);
    } else {
        char *e;
        errno = 0;
        unsigned long long v = strtoull(tmp, &e, 10);
        if (errno || v > (unsigned long long)INT64_MAX) return lex_fail(lx, b, "integer too large");
        k->i = (int64_t)v;
    }
    lx->pos = i;
    return true;
}

static int op_at(const char *s, size_t n, size_t i, size_t *len) {
    static const struct { char a, b; int op; } two[] = {
        {'=', '=', JTO_EQ}, {'!', '=', JTO_NE}, {'<', '=', JTO_LE}, {'>', '=', JTO_GE},
        {'/', '/', JTO_FLOORDIV}, {'*', '*', JTO_POW},
    };
    for (size_t k = 0; k < sizeof two / sizeof two[0]; k++)
        if (i + 1 < n && s[i] == two[k].a && s[i + 1] == two[k].b) { *len = 2; return two[k].op; }
    if (strchr("+-*/%~<>=.,:|()[]{};", s[i])) { *len = 1; return (unsigned char)s[i]; }
    return 0;
}

static bool lex_op(jlexer *lx) {
    size_t len;
    int op = op_at(lx->s, lx->n, lx->pos, &len);
    if (!op) return lex_fail(lx, lx->pos, "unexpected character '%c'", lx->s[lx->pos]);
    if (op == '(' || op == '[' || op == '{') lx->balance++;
    if ((op == ')' || op == ']' || op == '}') && lx->balance > 0) lx->balance--;
    jtok *k = emit(lx, JT_OP, lx->pos);
    if (!k) return false;
    k->op = op;
    lx->pos += len;
    return true;
}

/* ---- tags ------------------------------------------------------------------------------- */

/* Length of a tag end at pos (`}}`/`%}` with an optional '-' or '+' first), else 0. */
static size_t tag_end_at(const jlexer *lx, char kind, size_t p, char *sign) {
    const char *s = lx->s;
    char close = kind == '{' ? '}' : '%';
    *sign = 0;
    if (p < lx->n && (s[p] == '-' || s[p] == '+')) { *sign = s[p]; p++; }
    if (p + 1 < lx->n && s[p] == close && s[p + 1] == '}') {
        if (kind == '{' && lx->balance > 0) return 0;
        return *sign ? 3 : 2;
    }
    *sign = 0;
    return 0;
}

/* After a tag end: `-` eats all whitespace, otherwise a block end eats one newline. */
static void after_tag_end(jlexer *lx, char kind, char sign) {
    size_t p0 = lx->pos;
    if (sign == '-') {
        while (lx->pos < lx->n && is_ws(lx->s[lx->pos])) lx->pos++;
    } else if (kind != '{' && sign != '+' && lx->pos < lx->n && lx->s[lx->pos] == '\n') {
        lx->pos++;
    }
    lx->line_starting = lx->pos > p0 && lx->s[lx->pos - 1] == '\n';
}

static bool lex_tag_body(jlexer *lx, char kind, size_t tag_at) {
    lx->balance = 0;
    for (;;) {
        while (lx->pos < lx->n && is_ws(lx->s[lx->pos])) lx->pos++;
        if (lx->pos >= lx->n)
            return lex_fail(lx, tag_at, kind == '{' ? "unclosed '{{'" : "unclosed '{%%'");
        char sign;
        size_t el = tag_end_at(lx, kind, lx->pos, &sign);
        if (el) {
            if (!emit(lx, kind == '{' ? JT_VAR_END : JT_BLOCK_END, lx->pos)) return false;
            lx->pos += el;
            after_tag_end(lx, kind, sign);
            return true;
        }
        char c = lx->s[lx->pos];
        bool ok;
        if (is_alpha(c)) {
            size_t b = lx->pos;
            while (lx->pos < lx->n && (is_alpha(lx->s[lx->pos]) || is_digit(lx->s[lx->pos]))) lx->pos++;
            jtok *k = emit(lx, JT_NAME, b);
            if (!k) return false;
            k->s = lx->s + b;
            k->len = lx->pos - b;
            ok = true;
        } else if (is_digit(c)) {
            ok = lex_number(lx);
        } else if (c == '\'' || c == '"') {
            ok = lex_string(lx);
        } else {
            ok = lex_op(lx);
        }
        if (!ok) return false;
    }
}

/* `{% raw %}` at tag_at (pos is past "{%" and its sign): if so, emits the raw text up to
 * `{% endraw %}` and returns true in *done. */
static bool lex_raw(jlexer *lx, size_t tag_at, bool *done) {
    const char *s = lx->s;
    size_t p = lx->pos;
    *done = false;
    while (p < lx->n && is_ws(s[p])) p++;
    if (p + 3 > lx->n || memcmp(s + p, "raw", 3) || (p + 3 < lx->n && (is_alpha(s[p + 3]) || is_digit(s[p + 3]))))
        return true;
    p += 3;
    while (p < lx->n && is_ws(s[p])) p++;
    char sign;
    size_t el = tag_end_at(lx, '%', p, &sign);
    if (!el) return true;
    lx->pos = p + el;
    after_tag_end(lx, '%', sign);
    for (size_t q = lx->pos; q + 1 < lx->n; q++) {
        if (s[q] != '{' || s[q + 1] != '%') continue;
        size_t r = q + 2;
        char bsign = (r < lx->n && (s[r] == '-' || s[r] == '+')) ? s[r++] : 0;
        while (r < lx->n && is_ws(s[r])) r++;
        if (r + 6 > lx->n || memcmp(s + r, "endraw", 6)) continue;
        r += 6;
        while (r < lx->n && is_ws(s[r])) r++;
        size_t eel = tag_end_at(lx, '%', r, &sign);
        if (!eel) continue;
        size_t te = q;
        if (bsign == '-') while (te > lx->pos && is_ws(s[te - 1])) te--;
        if (!emit_text(lx, lx->pos, te)) return false;
        lx->pos = r + eel;
        after_tag_end(lx, '%', sign);
        *done = true;
        return true;
    }
    return lex_fail(lx, tag_at, "unclosed raw block");
}

/* ---- the text/tag loop -------------------------------------------------------------------- */

static size_t find_tag(const jlexer *lx, size_t from) {
    for (const char *p = lx->s + from; (p = memchr(p, '{', (size_t)(lx->s + lx->n - p))) != NULL; p++)
        if (p + 1 < lx->s + lx->n && (p[1] == '{' || p[1] == '%' || p[1] == '#')) return (size_t)(p - lx->s);
    return lx->n;
}

/* The end of the text before a tag, after `-` stripping or lstrip_blocks. */
static size_t text_end(const jlexer *lx, size_t b, size_t tag, char kind, char sign) {
    const char *s = lx->s;
    size_t e = tag;
    if (sign == '-') {
        while (e > b && is_ws(s[e - 1])) e--;
        return e;
    }
    if (kind == '{' || sign == '+') return e;
    size_t l = e;
    while (l > b && s[l - 1] != '\n') l--;
    bool newline = l > b;   /* the text holds a newline: l is just past the last one */
    if (!newline && !lx->line_starting) return e;
    for (size_t i = l; i < e; i++)
        if (!is_ws(s[i])) return e;
    return l;
}

static bool lex_comment(jlexer *lx, size_t tag) {
    const char *s = lx->s;
    for (size_t p = tag + 2; p + 1 < lx->n; p++) {
        if (s[p] != '#' || s[p + 1] != '}') continue;
        char sign = (p > tag + 2 && (s[p - 1] == '-' || s[p - 1] == '+')) ? s[p - 1] : 0;
        lx->pos = p + 2;
        after_tag_end(lx, '#', sign);
        return true;
    }
    return lex_fail(lx, tag, "unclosed comment");
}

static bool lex_all(jlexer *lx) {
    while (lx->pos < lx->n) {
        size_t tag = find_tag(lx, lx->pos);
        char kind = tag < lx->n ? lx->s[tag + 1] : 0;
        char sign = tag + 2 < lx->n && (lx->s[tag + 2] == '-' || lx->s[tag + 2] == '+') ? lx->s[tag + 2] : 0;
        size_t e = tag < lx->n ? text_end(lx, lx->pos, tag, kind, sign) : lx->n;
        if (!emit_text(lx, lx->pos, e)) return false;
        if (tag >= lx->n) break;
        lx->pos = tag + 2 + (sign ? 1 : 0);
        if (kind == '#') {
            if (!lex_comment(lx, tag)) return false;
            continue;
        }
        if (kind == '%') {
            bool done;
            if (!lex_raw(lx, tag, &done)) return false;
            if (done) continue;
        }
        if (!emit(lx, kind == '{' ? JT_VAR_BEGIN : JT_BLOCK_BEGIN, tag)) return false;
        if (!lex_tag_body(lx, kind, tag)) return false;
    }
    return emit(lx, JT_EOF, lx->n) != NULL;
}

recur_status jlex(const char *src, size_t len, jarena *a, jtoks *toks, char *err, size_t err_len) {
    jlexer lx = {.s = src, .n = len, .line = 1, .line_starting = true, .a = a, .toks = toks,
                 .err = err, .err_len = err_len, .st = RECUR_OK};
    return lex_all(&lx) ? RECUR_OK : lx.st;
}
