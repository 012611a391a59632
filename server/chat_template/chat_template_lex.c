// chat_template_lex.c — the lexer of chat templates (chat_template_lex.h), and the text
// helpers the whole interpreter uses (chat_template_ast.h): ct_fail's one-line messages, and
// UTF-8 and whitespace as Python's str.isspace has it (Jinja's \s and strip() use it). The
// text between tags is cut by ct_lex_text with Jinja's whitespace control under transformers'
// settings: trim_blocks, lstrip_blocks; inside a tag ct_next reads one token on demand, as
// the parser (chat_template.c) asks for it.
#include "chat_template_lex.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "base/kg.h"
#include "chat_template_ast.h"

int ct_fail(char *err, int code, int line, const char *fmt, ...) {
    char msg[KG_ERRLEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    size_t k = strlen(msg), max = KG_ERRLEN - 48; // room for the prefix and the line
    if (k > max) {
        for (k = max; k > 0 && ((unsigned char)msg[k] & 0xc0) == 0x80;)
            k--;
        msg[k] = '\0';
    }
    for (char *c = msg; *c; c++)
        if ((unsigned char)*c < 0x20) *c = ' ';
    if (line > 0) return kg_err(err, code, "chat template: %s (line %d)", msg, line);
    return kg_err(err, code, "chat template: %s", msg);
}

// --- UTF-8 and whitespace (Python's str.isspace, which Jinja's \s and strip() use) ---

// Bytes of the character at s[0..n) (n >= 1), its code point in *cp. A byte that starts no
// valid sequence is one character of its own, 0x110000 + byte (matching nothing else).
static size_t ct_utf8(const char *s, size_t n, uint32_t *cp) {
    const unsigned char *u = (const unsigned char *)s;
    size_t k = u[0] < 0x80   ? 1
               : u[0] < 0xc2 ? 0
               : u[0] < 0xe0 ? 2
               : u[0] < 0xf0 ? 3
               : u[0] < 0xf5 ? 4
                             : 0;
    if (k > n) k = 0;
    for (size_t j = 1; j < k; j++)
        if ((u[j] & 0xc0) != 0x80) k = 0;
    if (k == 0) {
        *cp = 0x110000u + u[0];
        return 1;
    }
    static const unsigned char MASK[] = {0, 0x7f, 0x1f, 0x0f, 0x07};
    uint32_t c = u[0] & MASK[k];
    for (size_t j = 1; j < k; j++)
        c = c << 6 | (u[j] & 0x3f);
    *cp = c;
    return k;
}

static int ct_is_space(uint32_t c) {
    return (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0 ||
           c == 0x1680 || (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 ||
           c == 0x202f || c == 0x205f || c == 0x3000;
}

// Is c one of the characters of set[0..m) (NULL: whitespace)?
static int ct_in_set(uint32_t c, const char *set, size_t m) {
    if (!set) return ct_is_space(c);
    for (size_t j = 0; j < m;) {
        uint32_t d;
        j += ct_utf8(set + j, m - j, &d);
        if (d == c) return 1;
    }
    return 0;
}

size_t ct_skip_set(const char *s, size_t lo, size_t hi, const char *set, size_t m) {
    while (lo < hi) {
        uint32_t c;
        size_t k = ct_utf8(s + lo, hi - lo, &c);
        if (!ct_in_set(c, set, m)) break;
        lo += k;
    }
    return lo;
}

size_t ct_rskip_set(const char *s, size_t lo, size_t hi, const char *set, size_t m) {
    while (hi > lo) {
        size_t b = hi - 1; // the start of the last character
        while (b > lo && hi - b < 4 && ((unsigned char)s[b] & 0xc0) == 0x80)
            b--;
        uint32_t c;
        if (b + ct_utf8(s + b, hi - b, &c) != hi) { // not one valid character: the byte alone
            b = hi - 1;
            ct_utf8(s + b, 1, &c);
        }
        if (!ct_in_set(c, set, m)) break;
        hi = b;
    }
    return hi;
}

// c (<= U+10FFFF) as UTF-8 into out; its length.
static size_t ct_utf8_put(char *out, uint32_t c) {
    size_t k = c < 0x80 ? 1 : c < 0x800 ? 2 : c < 0x10000 ? 3 : 4;
    static const unsigned char LEAD[] = {0, 0, 0xc0, 0xe0, 0xf0};
    for (size_t j = k - 1; j > 0; j--, c >>= 6)
        out[j] = (char)(0x80 | (c & 0x3f));
    out[0] = (char)(LEAD[k] | c);
    return k;
}

static int ct_alpha(int c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
static int ct_digit(int c) { return c >= '0' && c <= '9'; }

// --- lexer: ct_lex_text cuts the text between tags; inside a tag, ct_next reads one token ---

static int ct_line_at(CtParser *p, size_t pos) {
    for (; p->line_pos < pos && p->line_pos < p->n; p->line_pos++)
        p->line += p->s[p->line_pos] == '\n';
    return p->line;
}

int ct_unexpected(CtParser *p) {
    if (p->tok == CT_TK_EOF) return ct_fail(p->err, KG_EFORMAT, p->tag_line, "a tag is not closed");
    if (p->tok == CT_TK_END) return ct_fail(p->err, KG_EFORMAT, p->tline, "unexpected end of tag");
    const char *what = p->tok == CT_TK_STR ? "string" : p->tok == CT_TK_INT ? "number" : "";
    if (*what) return ct_fail(p->err, KG_EFORMAT, p->tline, "unexpected %s", what);
    return ct_fail(p->err, KG_EFORMAT, p->tline, "unexpected '%.*s'",
                   (int)(p->tn > 40 ? 40 : p->tn), p->ts);
}

// A string literal at s[pos] (a quote), decoded as Python's unicode-escape does (Jinja's
// way) into t->lits.
static int ct_lex_string(CtParser *p) {
    const char *s = p->s;
    char quote = s[p->pos], *out = p->t->lits + p->t->n_lits, *o = out;
    size_t i = p->pos + 1;
    while (i < p->n && s[i] != quote) {
        if (s[i] != '\\') {
            *o++ = s[i++];
            continue;
        }
        if (i + 1 >= p->n) break;
        char e = s[i + 1];
        i += 2;
        static const char SIMPLE[] = "\n\\'\"abfnrtv", VALUE[] = "\0\\'\"\a\b\f\n\r\t\v";
        const char *hit = e ? strchr(SIMPLE, e) : NULL;
        if (hit) {
            if (e != '\n') *o++ = VALUE[hit - SIMPLE]; // \ + newline: a line continuation
            continue;
        }
        uint32_t c = 0;
        int digits = e == 'x' ? 2 : e == 'u' ? 4 : e == 'U' ? 8 : 0;
        if (e >= '0' && e <= '7') { // up to three octal digits
            c = (uint32_t)(e - '0');
            for (int j = 0; j < 2 && i < p->n && s[i] >= '0' && s[i] <= '7'; j++, i++)
                c = c * 8 + (uint32_t)(s[i] - '0');
        } else if (digits) {
            for (int j = 0; j < digits; j++, i++) {
                int h = i >= p->n                                      ? -1
                        : ct_digit(s[i])                               ? s[i] - '0'
                        : (s[i] | 0x20) >= 'a' && (s[i] | 0x20) <= 'f' ? (s[i] | 0x20) - 'a' + 10
                                                                       : -1;
                if (h < 0) return ct_fail(p->err, KG_EFORMAT, p->tline, "truncated \\%c escape", e);
                c = c * 16 + (uint32_t)h;
            }
        } else if (e == 'N') {
            return ct_fail(p->err, KG_EUNSUP, p->tline, "\\N{...} escapes are not supported");
        } else if ((unsigned char)e >= 0x80) {
            return ct_fail(p->err, KG_EUNSUP, p->tline,
                           "a backslash before a non-ASCII character is not supported");
        } else { // unknown escapes stay as written
            *o++ = '\\', *o++ = e;
            continue;
        }
        if (c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff))
            return ct_fail(p->err, KG_EUNSUP, p->tline, "the escape \\%c gives no character", e);
        o += ct_utf8_put(o, c);
    }
    if (i >= p->n) return ct_fail(p->err, KG_EFORMAT, p->tline, "a string is not closed");
    p->pos = i + 1;
    p->tok = CT_TK_STR, p->ts = out, p->tn = (size_t)(o - out);
    p->t->n_lits += p->tn;
    return KG_OK;
}

static int ct_lex_int(CtParser *p) {
    const char *s = p->s;
    size_t i = p->pos;
    long long v = 0;
    for (; i < p->n; i++) {
        if (s[i] == '_' && i + 1 < p->n && ct_digit(s[i + 1]) && ct_digit(s[i - 1])) continue;
        if (!ct_digit(s[i])) break;
        if (__builtin_mul_overflow(v, 10, &v) || __builtin_add_overflow(v, s[i] - '0', &v))
            return ct_fail(p->err, KG_EUNSUP, p->tline, "the integer is too large");
    }
    // a float (1.5, 1e3), hex, octal, binary or 007: Jinja reads them, we do not
    int after_dot = p->pos > 0 && s[p->pos - 1] == '.'; // x.0.1 is x[0][1]
    if ((i < p->n && (ct_alpha(s[i]) || ct_digit(s[i]))) ||
        (!after_dot && i + 1 < p->n && s[i] == '.' && ct_digit(s[i + 1])) ||
        (s[p->pos] == '0' && i - p->pos > 1 && v))
        return ct_fail(p->err, KG_EUNSUP, p->tline, "only decimal integers are supported");
    p->tok = CT_TK_INT, p->ti = v, p->ts = s + p->pos, p->tn = i - p->pos;
    p->pos = i;
    return KG_OK;
}

// The closing mark of the current tag at s[pos], with the whitespace it takes: -}} and
// -%} all that follows, %} one newline (trim_blocks), +%} none.
static int ct_lex_end(CtParser *p) {
    const char *c = p->s + p->pos;
    size_t left = p->n - p->pos, k = 0;
    char close = p->tag == '{' ? '}' : '%';
    int minus = left >= 3 && c[0] == '-' && c[1] == close && c[2] == '}';
    int plus = p->tag == '%' && left >= 3 && c[0] == '+' && c[1] == '%' && c[2] == '}';
    if (minus || plus)
        k = 3;
    else if (left >= 2 && c[0] == close && c[1] == '}')
        k = 2;
    if (!k) return 0;
    p->pos += k;
    if (minus)
        p->pos = ct_skip_set(p->s, p->pos, p->n, NULL, 0);
    else if (!plus && p->tag == '%' && p->pos < p->n && p->s[p->pos] == '\n')
        p->pos++;
    p->line_starting = p->s[p->pos - 1] == '\n';
    p->tok = CT_TK_END, p->tag = 0;
    return 1;
}

int ct_next(CtParser *p) {
    const char *s = p->s;
    p->pos = ct_skip_set(s, p->pos, p->n, NULL, 0);
    p->ts = s + p->pos, p->tn = 0, p->tline = ct_line_at(p, p->pos);
    if (p->pos >= p->n) return p->tok = CT_TK_EOF, KG_OK;
    if (p->balance == 0 && ct_lex_end(p)) return KG_OK;
    char c = s[p->pos];
    if (ct_alpha(c)) {
        size_t i = p->pos;
        while (i < p->n && (ct_alpha(s[i]) || ct_digit(s[i])))
            i++;
        p->tok = CT_TK_NAME, p->tn = i - p->pos, p->pos = i;
        return KG_OK;
    }
    if (ct_digit(c)) return ct_lex_int(p);
    if (c == '\'' || c == '"') return ct_lex_string(p);
    static const char TWO[][3] = {"//", "**", "==", "!=", "<=", ">="};
    for (int j = 0; j < 6; j++)
        if (p->pos + 1 < p->n && c == TWO[j][0] && s[p->pos + 1] == TWO[j][1]) {
            p->tok = CT_TK_OP, p->op = CT_OP_FLOORDIV + j, p->tn = 2, p->pos += 2;
            return KG_OK;
        }
    if (!strchr("+-*/%~()[]{}.,:|<>=;", c) || !c) {
        if (c > 32 && c < 127)
            return ct_fail(p->err, KG_EFORMAT, p->tline, "unexpected character '%c'", c);
        return ct_fail(p->err, KG_EFORMAT, p->tline, "unexpected byte 0x%02x", (unsigned char)c);
    }
    if (c == '(' || c == '[' || c == '{') p->balance++;
    if ((c == ')' || c == ']' || c == '}') && p->balance > 0) p->balance--;
    p->tok = CT_TK_OP, p->op = c, p->tn = 1, p->pos++;
    return KG_OK;
}

int ct_is_name(const CtParser *p, const char *kw) {
    return p->tok == CT_TK_NAME && p->tn == strlen(kw) && !memcmp(p->ts, kw, p->tn);
}

int ct_is_op(const CtParser *p, int op) { return p->tok == CT_TK_OP && p->op == op; }

int ct_expect_op(CtParser *p, int op) { return ct_is_op(p, op) ? ct_next(p) : ct_unexpected(p); }

int ct_expect_end(CtParser *p) { return p->tok == CT_TK_END ? KG_OK : ct_unexpected(p); }

// --- the text between tags ---

// Where text before a block tag or comment at s[open] ends under lstrip_blocks: before the
// spaces that alone precede the tag on its line.
static size_t ct_lstrip(const CtParser *p, size_t start, size_t open) {
    size_t l = open;
    while (l > start && p->s[l - 1] != '\n')
        l--;
    if ((l == start && !p->line_starting) || l == open) return open;
    return ct_skip_set(p->s, l, open, NULL, 0) == open ? l : open;
}

int ct_lex_comment(CtParser *p) {
    const char *s = p->s;
    size_t q = p->pos;
    while (q + 1 < p->n && !(s[q] == '#' && s[q + 1] == '}'))
        q++;
    if (q + 1 >= p->n) return ct_fail(p->err, KG_EFORMAT, p->tag_line, "a comment is not closed");
    char sign = q > p->pos && (s[q - 1] == '-' || s[q - 1] == '+') ? s[q - 1] : 0;
    p->pos = q + 2;
    if (sign == '-')
        p->pos = ct_skip_set(s, p->pos, p->n, NULL, 0);
    else if (!sign && p->pos < p->n && s[p->pos] == '\n')
        p->pos++;
    p->line_starting = s[p->pos - 1] == '\n';
    return KG_OK;
}

char ct_lex_text(CtParser *p, size_t *start, size_t *end, int *line) {
    const char *s = p->s;
    size_t open = *start = p->pos;
    for (; open + 1 < p->n; open++)
        if (s[open] == '{' && (s[open + 1] == '{' || s[open + 1] == '%' || s[open + 1] == '#'))
            break;
    char kind = open + 1 < p->n ? s[open + 1] : 0;
    if (!kind) open = p->n;
    char sign =
        kind && open + 2 < p->n && (s[open + 2] == '-' || s[open + 2] == '+') ? s[open + 2] : 0;
    *end = open;
    if (sign == '-')
        *end = ct_rskip_set(s, *start, open, NULL, 0);
    else if (kind && kind != '{' && sign != '+')
        *end = ct_lstrip(p, *start, open);
    *line = ct_line_at(p, *start); // before the tag's: ct_line_at only counts forward
    if (!kind) {
        p->pos = p->n;
        return 0;
    }
    p->pos = open + 2 + (sign != 0);
    p->tag_line = ct_line_at(p, open);
    return kind;
}
