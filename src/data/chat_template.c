/* Jinja2 chat templates: a lexer that follows Jinja's (trim_blocks and lstrip_blocks as
 * transformers sets them), a recursive-descent parser to a tree of nodes, and an
 * evaluator over Python-like values. The contract and the subset are in chat_template.h.
 *
 * Memory: a compiled template's nodes and literals live in its arena; a render's values
 * live in a per-render arena freed at its end (so error paths free everything with one
 * call), and only the output is malloc'd. Strings are (pointer, length) pairs of UTF-8,
 * never NUL-terminated on their own; messages are read in place. */
#define _GNU_SOURCE /* memmem, strftime_l */
#include "data/chat_template.h"

#include <locale.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/error.h"
#include "data/utf8.h"

#define MAX_EXPR_DEPTH 64 /* nesting of an expression tree */
#define MAX_BLOCKS 64     /* nesting of blocks (if, for, set, generation) */
#define MAX_ARGS 8        /* arguments of one call, filter or test */
#define SHOWN 60          /* bytes of a name or message quoted in an error */

/* ------------------------------------------------------------------------------------
 * Arena */

typedef struct chunk {
    struct chunk *next;
    size_t used, cap;
} chunk;

typedef struct arena {
    chunk *head;
    size_t total, limit;
    int over; /* the last failure was the limit, not malloc */
} arena;

#define CHUNK_BYTES ((size_t)64 << 10)
#define CHUNK_HDR ((sizeof(chunk) + 15) & ~(size_t)15)

static void *arena_alloc(arena *a, size_t n) {
    if (n > a->limit) {
        a->over = 1;
        return NULL;
    }
    n = (n + 15) & ~(size_t)15;
    if (!n) n = 16;
    chunk *c = a->head;
    if (!c || c->cap - c->used < n) {
        size_t cap = n > CHUNK_BYTES ? n : CHUNK_BYTES;
        if (cap > a->limit - a->total) {
            a->over = 1;
            return NULL;
        }
        c = malloc(CHUNK_HDR + cap);
        if (!c) {
            a->over = 0;
            return NULL;
        }
        c->used = 0, c->cap = cap, a->total += cap;
        if (a->head && cap > CHUNK_BYTES) { /* a big block: keep filling the current chunk */
            c->used = cap;
            c->next = a->head->next;
            a->head->next = c;
            return (char *)c + CHUNK_HDR;
        }
        c->next = a->head;
        a->head = c;
    }
    void *p = (char *)c + CHUNK_HDR + c->used;
    c->used += n;
    return p;
}

static void arena_free(arena *a) {
    for (chunk *c = a->head, *next; c; c = next) next = c->next, free(c);
    a->head = NULL;
}

/* ------------------------------------------------------------------------------------
 * Text helpers */

/* Bytes of the whitespace code point at p (Python's str.isspace), 0 if none. */
static size_t space_at(const char *s, size_t n) {
    const unsigned char *p = (const unsigned char *)s;
    if (!n) return 0;
    if (p[0] == ' ' || (p[0] >= 0x09 && p[0] <= 0x0d) || (p[0] >= 0x1c && p[0] <= 0x1f)) return 1;
    if (p[0] == 0xc2 && n >= 2 && (p[1] == 0x85 || p[1] == 0xa0)) return 2;
    if (n < 3) return 0;
    if (p[0] == 0xe1 && p[1] == 0x9a && p[2] == 0x80) return 3;                      /* U+1680 */
    if (p[0] == 0xe2 && p[1] == 0x80 && (p[2] <= 0x8a || p[2] == 0xa8 || p[2] == 0xa9 || p[2] == 0xaf))
        return 3;                                                                     /* U+2000..200A, 2028, 2029, 202F */
    if (p[0] == 0xe2 && p[1] == 0x81 && p[2] == 0x9f) return 3;                      /* U+205F */
    if (p[0] == 0xe3 && p[1] == 0x80 && p[2] == 0x80) return 3;                      /* U+3000 */
    return 0;
}

/* Bytes of the whitespace code point that ends s[0..n), 0 if none (s is valid UTF-8). */
static size_t space_before(const char *s, size_t n) {
    for (size_t k = 1; k <= 3 && k <= n; k++)
        if (space_at(s + n - k, k) == k) return k;
    return 0;
}

static size_t lstrip_len(const char *s, size_t n) { /* leading whitespace bytes */
    size_t i = 0, k;
    while (i < n && (k = space_at(s + i, n - i))) i += k;
    return i;
}

static size_t rstrip_len(const char *s, size_t n) { /* n less the trailing whitespace */
    size_t k;
    while (n && (k = space_before(s, n))) n -= k;
    return n;
}

static int count_newlines(const char *s, size_t n) {
    int c = 0;
    for (size_t i = 0; i < n; i++) c += s[i] == '\n';
    return c;
}

static int is_alpha(char ch) { return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || ch == '_'; }
static int is_digit(char ch) { return ch >= '0' && ch <= '9'; }
static int is_hex(char ch) { return is_digit(ch) || (ch >= 'a' && ch <= 'f') || (ch >= 'A' && ch <= 'F'); }
static int hex_val(char ch) { return is_digit(ch) ? ch - '0' : (ch | 0x20) - 'a' + 10; }

static int same(const char *s, size_t n, const char *w) { return strlen(w) == n && !memcmp(s, w, n); }

static size_t utf8_put(uint32_t cp, char *o) {
    if (cp < 0x80) return o[0] = (char)cp, 1;
    if (cp < 0x800) return o[0] = (char)(0xc0 | cp >> 6), o[1] = (char)(0x80 | (cp & 0x3f)), 2;
    if (cp < 0x10000)
        return o[0] = (char)(0xe0 | cp >> 12), o[1] = (char)(0x80 | ((cp >> 6) & 0x3f)),
               o[2] = (char)(0x80 | (cp & 0x3f)), 3;
    o[0] = (char)(0xf0 | cp >> 18), o[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3f)), o[3] = (char)(0x80 | (cp & 0x3f));
    return 4;
}

/* Bytes of the code point at s (valid UTF-8). */
static size_t cp_len(const char *s, size_t n) {
    int k = utf8_seq_len((const uint8_t *)s, n);
    return k > 0 ? (size_t)k : 1;
}

static size_t cp_count(const char *s, size_t n) {
    size_t c = 0;
    for (size_t i = 0; i < n; i += cp_len(s + i, n - i)) c++;
    return c;
}

/* ------------------------------------------------------------------------------------
 * Tokens and nodes */

enum { T_EOF, T_DATA, T_VAR_BEGIN, T_VAR_END, T_BLOCK_BEGIN, T_BLOCK_END, T_NAME, T_STRING, T_INT, T_OP };
enum {
    OP_ADD = 1, OP_SUB, OP_MUL, OP_DIV, OP_FLOORDIV, OP_MOD, OP_POW, OP_TILDE, OP_LBRACKET, OP_RBRACKET,
    OP_LPAREN, OP_RPAREN, OP_LBRACE, OP_RBRACE, OP_EQ, OP_NE, OP_LT, OP_GT, OP_LE, OP_GE, OP_ASSIGN,
    OP_DOT, OP_COLON, OP_PIPE, OP_COMMA, OP_SEMICOLON, OP_IN, OP_NOTIN
};
static const char *const op_text[] = {"",  "+", "-",  "*",  "/",  "//", "%", "**", "~", "[", "]", "(", ")", "{",
                                      "}", "==", "!=", "<", ">", "<=", ">=", "=", ".", ":", "|", ",", ";", "in", "not in"};

typedef struct token {
    int kind, line, op;
    const char *s; /* text of data, names and (decoded) strings */
    size_t n;
    int64_t i;
} token;

enum {
    /* expressions */
    E_STR, E_INT, E_BOOL, E_NONE, E_NAME, E_LIST, E_TUPLE, E_DICT, E_ATTR, E_ITEM, E_SLICE, E_BIN, E_CMP,
    E_CMPOP, E_AND, E_OR, E_NOT, E_NEG, E_POS, E_COND, E_FILTER, E_TEST, E_CALL, E_NSATTR,
    /* statements */
    S_TEXT, S_PRINT, S_IF, S_FOR, S_SET, S_SETBLOCK, S_BREAK, S_CONTINUE, S_GENERATION
};

typedef struct node node;
struct node {
    int kind, line, op, depth;
    node *a, *b, *c, *d; /* operands, as each kind says below */
    node *body, *orelse; /* statement lists */
    node *next;          /* the next statement, list item, argument or target */
    const char *s;       /* a name, text, or string constant */
    size_t n;
    const char *kw; /* an argument's keyword; a namespace target's attribute */
    size_t kwn;
    int64_t i;
};
/* E_LIST/E_TUPLE: a = items; E_DICT: a = key, value, key, value...; E_ATTR: a.s;
 * E_ITEM: a[b]; E_SLICE: a[b:c:d]; E_BIN: a op b; E_CMP: a, then b = E_CMPOP list
 * (op, a); E_COND: a if b else c; E_FILTER: a|s(b...); E_TEST: a is [not: i] s(b...);
 * E_CALL: a(b...); E_NSATTR: target s.kw. S_IF: if a: body, c = elif (S_IF), orelse;
 * S_FOR: for a (targets) in b if c: body else orelse; S_SET: a = b; S_SETBLOCK: a. */

struct hg_chat_template {
    arena a;
    node *body;
    char *where;
};

/* ------------------------------------------------------------------------------------
 * Lexer */

typedef struct comp {
    arena *a;
    const char *where;
    const char *src;
    size_t n;
    token *tok;
    size_t ntok, cap, at;
    int nopen; /* open blocks */
    struct {
        const char *name;
        int line;
    } open[MAX_BLOCKS];
    int loops;  /* enclosing for loops in the current block set */
    int edepth; /* parse_expression and parse_unary calls in progress */
    hg_status st; /* the first failure */
} comp;

/* st, with "WHERE: line N: " and the message (compile and render failures alike). */
static hg_status vfail_at(const char *where, int line, hg_status st, const char *fmt, va_list ap) {
    char msg[768];
    vsnprintf(msg, sizeof msg, fmt, ap);
    return hg_fail(st, "%s: line %d: %s", where, line, msg);
}

static hg_status cfail(comp *c, int line, hg_status st, const char *fmt, ...) HG_PRINTF(4, 5);
static hg_status cfail(comp *c, int line, hg_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    c->st = vfail_at(c->where, line, st, fmt, ap);
    va_end(ap);
    return c->st;
}

static hg_status cnomem(comp *c) {
    return c->st = c->a->over ? hg_fail(HG_ERR_INVALID, "%s: the template needs more than %zu MiB", c->where,
                                        c->a->limit >> 20)
                              : hg_fail(HG_ERR_NOMEM, "%s: out of memory compiling the template", c->where);
}

static hg_status push(comp *c, int kind, int line, const char *s, size_t n) {
    if (c->ntok == c->cap) {
        size_t cap = c->cap ? 2 * c->cap : 256;
        token *t = realloc(c->tok, cap * sizeof *t);
        if (!t) return c->st = hg_fail(HG_ERR_NOMEM, "%s: out of memory compiling the template", c->where);
        c->tok = t, c->cap = cap;
    }
    token *t = &c->tok[c->ntok++];
    memset(t, 0, sizeof *t);
    t->kind = kind, t->line = line, t->s = s, t->n = n;
    return HG_OK;
}

/* Decodes the string literal body s[0..n) (Python's unicode-escape, as Jinja reads it)
 * into the arena. */
static hg_status decode_string(comp *c, int line, const char *s, size_t n, token *t) {
    char *o = arena_alloc(c->a, n + 1);
    if (!o) return cnomem(c);
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] != '\\') {
            o[k++] = s[i];
            continue;
        }
        char e = s[++i]; /* a literal never ends in a lone backslash */
        uint32_t cp = 0;
        int digits = 0;
        switch (e) {
        case '\n': continue;
        case '\\': o[k++] = '\\'; continue;
        case '\'': o[k++] = '\''; continue;
        case '"': o[k++] = '"'; continue;
        case 'a': o[k++] = '\a'; continue;
        case 'b': o[k++] = '\b'; continue;
        case 'f': o[k++] = '\f'; continue;
        case 'n': o[k++] = '\n'; continue;
        case 'r': o[k++] = '\r'; continue;
        case 't': o[k++] = '\t'; continue;
        case 'v': o[k++] = '\v'; continue;
        case 'x': digits = 2; break;
        case 'u': digits = 4; break;
        case 'U': digits = 8; break;
        case 'N': return cfail(c, line, HG_ERR_UNSUPPORTED, "\\N{...} escapes in strings are not implemented");
        default:
            if (e >= '0' && e <= '7') {
                for (int d = 0; d < 3 && i < n && s[i] >= '0' && s[i] <= '7'; d++, i++) cp = cp * 8 + (uint32_t)(s[i] - '0');
                i--;
                k += utf8_put(cp, o + k);
                continue;
            }
            if ((unsigned char)e >= 0x80)
                return cfail(c, line, HG_ERR_UNSUPPORTED, "a backslash before a non-ASCII character is not implemented");
            o[k++] = '\\', o[k++] = e; /* Python keeps unknown escapes */
            continue;
        }
        for (int d = 0; d < digits; d++) {
            if (i + 1 >= n || !is_hex(s[i + 1]))
                return cfail(c, line, HG_ERR_FORMAT, "truncated \\%c escape in a string", e);
            cp = cp * 16 + (uint32_t)hex_val(s[++i]);
        }
        if (cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
            return cfail(c, line, HG_ERR_FORMAT, "escape \\%c gives no valid character (U+%X)", e, cp);
        k += utf8_put(cp, o + k); /* at most as long as the escape */
    }
    o[k] = '\0';
    t->s = o, t->n = k;
    return HG_OK;
}

/* The tokens of one {{ }} or {% %} tag, from *pos just after its opening; leaves *pos
 * after its end, the trim_blocks newline or the whitespace a '-' strips. */
static hg_status lex_tag(comp *c, char kind, size_t *pos, int *line, int *line_starting) {
    const char *s = c->src;
    size_t n = c->n, p = *pos;
    int start_line = *line;
    char want[MAX_EXPR_DEPTH]; /* closing brackets expected */
    int nb = 0;
    for (;;) {
        if (p >= n)
            return cfail(c, start_line, HG_ERR_FORMAT, "'%s' is never closed (missing '%s')", kind == '{' ? "{{" : "{%",
                         kind == '{' ? "}}" : "%}");
        if (!nb) { /* Jinja looks for the end only outside brackets */
            size_t end = 0;
            char close = kind == '{' ? '}' : '%';
            if (p + 2 < n && (s[p] == '-' || (s[p] == '+' && kind == '%')) && s[p + 1] == close && s[p + 2] == '}') {
                end = p + 3;
                if (s[p] == '-') end += lstrip_len(s + end, n - end);
            } else if (p + 1 < n && s[p] == close && s[p + 1] == '}') {
                end = p + 2;
                if (kind == '%' && end < n && s[end] == '\n') end++; /* trim_blocks */
            }
            if (end) {
                HG_TRY(push(c, kind == '{' ? T_VAR_END : T_BLOCK_END, *line, NULL, 0));
                *line += count_newlines(s + p, end - p);
                *line_starting = s[end - 1] == '\n';
                *pos = end;
                return HG_OK;
            }
        }
        size_t k = space_at(s + p, n - p);
        if (k) {
            *line += s[p] == '\n';
            p += k;
            continue;
        }
        char ch = s[p];
        if (is_digit(ch)) {
            size_t q = p;
            while (q < n && (is_digit(s[q]) || s[q] == '_')) q++;
            int shown = (int)(q - p > SHOWN ? SHOWN : q - p);
            if (!(p > 0 && s[p - 1] == '.')) { /* Jinja's float_re: 1.5, 1e5, 1.5E-3 */
                size_t e = q < n && (s[q] | 0x20) == 'e' ? q + 1 : 0;
                if (e && e < n && (s[e] == '+' || s[e] == '-')) e++;
                if ((q + 1 < n && s[q] == '.' && is_digit(s[q + 1])) || (e && e < n && is_digit(s[e])))
                    return cfail(c, *line, HG_ERR_UNSUPPORTED, "float numbers are not implemented");
            }
            if (s[p] == '0' && q < n && ((s[q] | 0x20) == 'x' || (s[q] | 0x20) == 'o' || (s[q] | 0x20) == 'b'))
                return cfail(c, *line, HG_ERR_UNSUPPORTED, "integers other than decimal ones are not implemented");
            int64_t v = 0;
            for (size_t i = p; i < q; i++) {
                if (s[i] == '_') {
                    if (i + 1 >= q || s[i + 1] == '_')
                        return cfail(c, *line, HG_ERR_FORMAT, "malformed integer '%.*s'", shown, s + p);
                    continue;
                }
                if (s[p] == '0' && s[i] != '0')
                    return cfail(c, *line, HG_ERR_FORMAT, "malformed integer '%.*s' (leading zero)", shown, s + p);
                if (v > (INT64_MAX - (s[i] - '0')) / 10)
                    return cfail(c, *line, HG_ERR_UNSUPPORTED, "integer '%.*s' is larger than 64 bits", shown, s + p);
                v = v * 10 + (s[i] - '0');
            }
            HG_TRY(push(c, T_INT, *line, s + p, q - p));
            c->tok[c->ntok - 1].i = v;
            p = q;
        } else if (is_alpha(ch)) {
            size_t q = p;
            while (q < n && (is_alpha(s[q]) || is_digit(s[q]))) q++;
            HG_TRY(push(c, T_NAME, *line, s + p, q - p));
            p = q;
        } else if (ch == '\'' || ch == '"') {
            size_t q = p + 1;
            while (q < n && s[q] != ch) q += s[q] == '\\' ? 2 : 1;
            if (q >= n) return cfail(c, *line, HG_ERR_FORMAT, "a string is never closed (missing %c)", ch);
            HG_TRY(push(c, T_STRING, *line, NULL, 0));
            HG_TRY(decode_string(c, *line, s + p + 1, q - p - 1, &c->tok[c->ntok - 1]));
            *line += count_newlines(s + p, q - p);
            p = q + 1;
        } else {
            static const char *const two[] = {"//", "**", "==", "!=", "<=", ">="};
            static const int two_op[] = {OP_FLOORDIV, OP_POW, OP_EQ, OP_NE, OP_LE, OP_GE};
            static const char one[] = "+-*/%~[](){}<>=.:|,;";
            static const int one_op[] = {OP_ADD,    OP_SUB,    OP_MUL,    OP_DIV,   OP_MOD,    OP_TILDE, OP_LBRACKET,
                                         OP_RBRACKET, OP_LPAREN, OP_RPAREN, OP_LBRACE, OP_RBRACE, OP_LT,    OP_GT,
                                         OP_ASSIGN, OP_DOT,    OP_COLON,  OP_PIPE,  OP_COMMA,  OP_SEMICOLON};
            int op = 0;
            size_t len = 2;
            for (int i = 0; i < 6 && !op; i++)
                if (p + 1 < n && s[p] == two[i][0] && s[p + 1] == two[i][1]) op = two_op[i];
            const char *f = op ? NULL : memchr(one, ch, sizeof one - 1);
            if (f && ch) op = one_op[f - one], len = 1;
            if (!op) {
                if ((unsigned char)ch < 0x20 || (unsigned char)ch >= 0x7f)
                    return cfail(c, *line, HG_ERR_FORMAT, "unexpected byte 0x%02x", (unsigned char)ch);
                return cfail(c, *line, HG_ERR_FORMAT, "unexpected character '%c'", ch);
            }
            if (op == OP_LPAREN || op == OP_LBRACKET || op == OP_LBRACE) {
                if (nb == MAX_EXPR_DEPTH) return cfail(c, *line, HG_ERR_FORMAT, "brackets nested too deeply");
                want[nb++] = op == OP_LPAREN ? ')' : op == OP_LBRACKET ? ']' : '}';
            } else if (op == OP_RPAREN || op == OP_RBRACKET || op == OP_RBRACE) {
                if (!nb) return cfail(c, *line, HG_ERR_FORMAT, "unexpected '%c'", ch);
                if (want[--nb] != ch)
                    return cfail(c, *line, HG_ERR_FORMAT, "unexpected '%c', expected '%c'", ch, want[nb]);
            }
            HG_TRY(push(c, T_OP, *line, s + p, len));
            c->tok[c->ntok - 1].op = op;
            p += len;
        }
    }
}

static hg_status lex(comp *c) {
    const char *s = c->src;
    size_t n = c->n, pos = 0;
    int line = 1, line_starting = 1;
    while (pos < n) {
        size_t t = pos;
        while (t + 1 < n && !(s[t] == '{' && (s[t + 1] == '{' || s[t + 1] == '%' || s[t + 1] == '#'))) t++;
        if (t + 1 >= n) {
            HG_TRY(push(c, T_DATA, line, s + pos, n - pos));
            line += count_newlines(s + pos, n - pos);
            break;
        }
        char kind = s[t + 1];
        char sign = t + 2 < n && (s[t + 2] == '-' || s[t + 2] == '+') ? s[t + 2] : 0;
        size_t text = t - pos;
        if (sign == '-') {
            text = rstrip_len(s + pos, text);
        } else if (sign != '+' && kind != '{') { /* lstrip_blocks */
            size_t l = text;
            while (l > 0 && s[pos + l - 1] != '\n') l--;
            if ((l > 0 || line_starting) && l < text && lstrip_len(s + pos + l, text - l) == text - l) text = l;
        }
        if (text) HG_TRY(push(c, T_DATA, line, s + pos, text));
        line += count_newlines(s + pos, t - pos);
        pos = t + 2 + (sign != 0);
        if (kind == '#') {
            size_t q = pos, end = 0;
            for (; q + 1 < n && !end; q++) {
                if ((s[q] == '+' || s[q] == '-') && q + 2 < n && s[q + 1] == '#' && s[q + 2] == '}') {
                    end = q + 3;
                    if (s[q] == '-') end += lstrip_len(s + end, n - end);
                } else if (s[q] == '#' && s[q + 1] == '}') {
                    end = q + 2;
                    if (end < n && s[end] == '\n') end++;
                }
            }
            if (!end) return cfail(c, line, HG_ERR_FORMAT, "'{#' is never closed (missing '#}')");
            line += count_newlines(s + pos, end - pos);
            line_starting = s[end - 1] == '\n';
            pos = end;
            continue;
        }
        if (kind == '%') {
            size_t q = pos + lstrip_len(s + pos, n - pos);
            if (q + 3 <= n && !memcmp(s + q, "raw", 3) && (q + 3 == n || !(is_alpha(s[q + 3]) || is_digit(s[q + 3]))))
                return cfail(c, line, HG_ERR_UNSUPPORTED, "statement 'raw' is not implemented");
        }
        HG_TRY(push(c, kind == '{' ? T_VAR_BEGIN : T_BLOCK_BEGIN, line, NULL, 0));
        HG_TRY(lex_tag(c, kind, &pos, &line, &line_starting));
    }
    return push(c, T_EOF, line, NULL, 0);
}

/* ------------------------------------------------------------------------------------
 * Parser */

static token *cur(comp *c) { return &c->tok[c->at]; }
static token *ahead(comp *c, size_t k) { return &c->tok[c->at + k < c->ntok ? c->at + k : c->ntok - 1]; }
static int is_op(const token *t, int op) { return t->kind == T_OP && t->op == op; }
static int is_name(const token *t, const char *w) { return t->kind == T_NAME && same(t->s, t->n, w); }

static const char *describe(const token *t, char *buf, size_t bn) {
    switch (t->kind) {
    case T_EOF: return "the end of the template";
    case T_DATA: return "text";
    case T_VAR_BEGIN: return "'{{'";
    case T_VAR_END: return "'}}'";
    case T_BLOCK_BEGIN: return "'{%'";
    case T_BLOCK_END: return "'%}'";
    case T_STRING: return "a string";
    case T_INT: return "an integer";
    case T_OP: snprintf(buf, bn, "'%s'", op_text[t->op]); return buf;
    default: snprintf(buf, bn, "'%.*s'", (int)(t->n > SHOWN ? SHOWN : t->n), t->s); return buf;
    }
}

static node *fail_at(comp *c, const token *t, const char *what) {
    char buf[SHOWN + 8];
    cfail(c, t->line, HG_ERR_FORMAT, "expected %s, got %s", what, describe(t, buf, sizeof buf));
    return NULL;
}

static int expect_op(comp *c, int op) {
    if (!is_op(cur(c), op)) {
        char what[16];
        snprintf(what, sizeof what, "'%s'", op_text[op]);
        fail_at(c, cur(c), what);
        return 0;
    }
    c->at++;
    return 1;
}

static int expect_kind(comp *c, int kind, const char *what) {
    if (cur(c)->kind != kind) {
        fail_at(c, cur(c), what);
        return 0;
    }
    c->at++;
    return 1;
}

static node *mk(comp *c, int kind, int line) {
    node *x = arena_alloc(c->a, sizeof *x);
    if (!x) {
        cnomem(c);
        return NULL;
    }
    memset(x, 0, sizeof *x);
    x->kind = kind, x->line = line, x->depth = 1;
    return x;
}

/* Sets x's depth from its operands; NULL past MAX_EXPR_DEPTH, so evaluation recursion
 * stays bounded however long a chain (a + b + c ...) is. */
static int depth_of(const node *y, int list) {
    int d = 0;
    for (; y; y = list ? y->next : NULL)
        if (y->depth > d) d = y->depth;
    return d;
}

static node *done(comp *c, node *x) {
    int a_list = x->kind == E_LIST || x->kind == E_TUPLE || x->kind == E_DICT;
    int b_list = x->kind == E_FILTER || x->kind == E_TEST || x->kind == E_CALL || x->kind == E_CMP;
    int d = depth_of(x->a, a_list), k;
    if ((k = depth_of(x->b, b_list)) > d) d = k;
    if ((k = depth_of(x->c, 0)) > d) d = k;
    if ((k = depth_of(x->d, 0)) > d) d = k;
    x->depth = d + 1;
    if (x->depth > MAX_EXPR_DEPTH) {
        cfail(c, x->line, HG_ERR_FORMAT, "expression nested too deeply (more than %d levels)", MAX_EXPR_DEPTH);
        return NULL;
    }
    return x;
}

static const char *const jinja_filters[] = {
    "abs", "attr", "batch", "capitalize", "center", "count", "d", "default", "dictsort", "e", "escape",
    "filesizeformat", "first", "float", "forceescape", "format", "groupby", "indent", "int", "items", "join",
    "last", "length", "list", "lower", "map", "max", "min", "pprint", "random", "reject", "rejectattr", "replace",
    "reverse", "round", "safe", "select", "selectattr", "slice", "sort", "string", "striptags", "sum", "title",
    "tojson", "trim", "truncate", "unique", "upper", "urlencode", "urlize", "wordcount", "wordwrap", "xmlattr", NULL};
static const char *const jinja_tests[] = {
    "boolean", "callable", "defined", "divisibleby", "eq", "equalto", "escaped", "even", "false", "filter", "float",
    "ge", "greaterthan", "gt", "in", "integer", "iterable", "le", "lessthan", "lower", "lt", "mapping", "ne", "none",
    "number", "odd", "sameas", "sequence", "string", "test", "true", "undefined", "upper", "==", "!=", "<", "<=",
    ">", ">=", NULL};

static int listed(const char *const *list, const char *s, size_t n) {
    for (int i = 0; list[i]; i++)
        if (same(s, n, list[i])) return 1;
    return 0;
}

static node *parse_expression(comp *c, int with_cond);
static node *parse_tuple(comp *c, int with_cond, const char *end_name, int explicit_parens);
static node *parse_unary(comp *c, int with_filter);

/* Call arguments after '(' up to ')': positional, then name=value. */
static node *parse_args(comp *c, node *owner) {
    if (!expect_op(c, OP_LPAREN)) return NULL;
    node **tail = &owner->b;
    int nargs = 0, kw = 0;
    while (!is_op(cur(c), OP_RPAREN)) {
        if (nargs && !expect_op(c, OP_COMMA)) return NULL;
        if (is_op(cur(c), OP_RPAREN)) break;
        if (is_op(cur(c), OP_MUL) || is_op(cur(c), OP_POW)) {
            cfail(c, cur(c)->line, HG_ERR_UNSUPPORTED, "*args and **kwargs in calls are not implemented");
            return NULL;
        }
        if (++nargs > MAX_ARGS) {
            cfail(c, cur(c)->line, HG_ERR_UNSUPPORTED, "calls with more than %d arguments are not implemented", MAX_ARGS);
            return NULL;
        }
        const char *k = NULL;
        size_t kn = 0;
        if (cur(c)->kind == T_NAME && is_op(ahead(c, 1), OP_ASSIGN)) {
            k = cur(c)->s, kn = cur(c)->n, kw = 1;
            c->at += 2;
        } else if (kw) {
            cfail(c, cur(c)->line, HG_ERR_FORMAT, "a positional argument follows keyword arguments");
            return NULL;
        }
        node *v = parse_expression(c, 1);
        if (!v) return NULL;
        v->kw = k, v->kwn = kn;
        *tail = v, tail = &v->next;
    }
    c->at++;
    return owner;
}

static node *parse_primary(comp *c) {
    token *t = cur(c);
    node *x;
    if (t->kind == T_NAME) {
        c->at++;
        if (same(t->s, t->n, "true") || same(t->s, t->n, "True") || same(t->s, t->n, "false") || same(t->s, t->n, "False")) {
            if (!(x = mk(c, E_BOOL, t->line))) return NULL;
            x->i = t->s[0] == 't' || t->s[0] == 'T';
        } else if (same(t->s, t->n, "none") || same(t->s, t->n, "None")) {
            x = mk(c, E_NONE, t->line);
        } else if ((x = mk(c, E_NAME, t->line))) {
            x->s = t->s, x->n = t->n;
        }
        return x;
    }
    if (t->kind == T_STRING) { /* adjacent literals join, as in Python */
        size_t total = 0, k = c->at;
        for (; c->tok[k].kind == T_STRING; k++) total += c->tok[k].n;
        if (!(x = mk(c, E_STR, t->line))) return NULL;
        if (k == c->at + 1) {
            x->s = t->s, x->n = t->n;
        } else {
            char *o = arena_alloc(c->a, total + 1);
            if (!o) return cnomem(c), NULL;
            for (size_t j = c->at, at = 0; j < k; at += c->tok[j].n, j++) memcpy(o + at, c->tok[j].s, c->tok[j].n);
            o[total] = '\0';
            x->s = o, x->n = total;
        }
        c->at = k;
        return x;
    }
    if (t->kind == T_INT) {
        c->at++;
        if ((x = mk(c, E_INT, t->line))) x->i = t->i;
        return x;
    }
    if (is_op(t, OP_LPAREN)) {
        c->at++;
        if (!(x = parse_tuple(c, 1, NULL, 1))) return NULL;
        return expect_op(c, OP_RPAREN) ? x : NULL;
    }
    if (is_op(t, OP_LBRACKET) || is_op(t, OP_LBRACE)) {
        int dict = is_op(t, OP_LBRACE), close = dict ? OP_RBRACE : OP_RBRACKET;
        c->at++;
        if (!(x = mk(c, dict ? E_DICT : E_LIST, t->line))) return NULL;
        node **tail = &x->a;
        for (int first = 1; !is_op(cur(c), close); first = 0) {
            if (!first && !expect_op(c, OP_COMMA)) return NULL;
            if (is_op(cur(c), close)) break;
            node *v = parse_expression(c, 1);
            if (!v) return NULL;
            *tail = v, tail = &v->next;
            if (dict) {
                if (!expect_op(c, OP_COLON) || !(v = parse_expression(c, 1))) return NULL;
                *tail = v, tail = &v->next;
            }
        }
        c->at++;
        return done(c, x);
    }
    return fail_at(c, t, "an expression");
}

/* .name, .0, [index], [slice] and (call) after a primary. */
static node *parse_postfix(comp *c, node *x) {
    for (;;) {
        token *t = cur(c);
        node *y;
        if (is_op(t, OP_DOT)) {
            c->at++;
            token *a = cur(c);
            if (a->kind == T_NAME) {
                if (!(y = mk(c, E_ATTR, a->line))) return NULL;
                y->a = x, y->s = a->s, y->n = a->n;
            } else if (a->kind == T_INT) {
                node *k = mk(c, E_INT, a->line);
                if (!k || !(y = mk(c, E_ITEM, a->line))) return NULL;
                k->i = a->i, y->a = x, y->b = k;
            } else {
                return fail_at(c, a, "an attribute name");
            }
            c->at++;
        } else if (is_op(t, OP_LBRACKET)) {
            c->at++;
            node *parts[3] = {NULL, NULL, NULL};
            int colons = 0;
            for (;;) {
                if (is_op(cur(c), OP_COLON)) {
                    if (++colons > 2) return fail_at(c, cur(c), "']'");
                    c->at++;
                    continue;
                }
                if (is_op(cur(c), OP_RBRACKET)) break;
                if (parts[colons]) return fail_at(c, cur(c), "':' or ']'");
                if (!(parts[colons] = parse_expression(c, 1))) return NULL;
            }
            c->at++;
            if (!colons && !parts[0]) return fail_at(c, t, "an index");
            if (!(y = mk(c, colons ? E_SLICE : E_ITEM, t->line))) return NULL;
            y->a = x, y->b = parts[0], y->c = parts[1], y->d = parts[2];
        } else if (is_op(t, OP_LPAREN)) {
            if (!(y = mk(c, E_CALL, t->line)) || !parse_args(c, y)) return NULL;
            y->a = x;
        } else {
            return x;
        }
        if (!(x = done(c, y))) return NULL;
    }
}

/* |filter(args), is [not] test(args), (call) after a unary expression. */
static node *parse_filters(comp *c, node *x) {
    for (;;) {
        token *t = cur(c);
        node *y;
        if (is_op(t, OP_PIPE) || is_name(t, "is")) {
            int test = t->kind == T_NAME, neg = 0;
            c->at++;
            if (test && is_name(cur(c), "not")) neg = 1, c->at++;
            token *name = cur(c);
            if (name->kind != T_NAME) return fail_at(c, name, test ? "a test name" : "a filter name");
            c->at++;
            if (!listed(test ? jinja_tests : jinja_filters, name->s, name->n)) {
                cfail(c, name->line, HG_ERR_FORMAT, "no %s named '%.*s'", test ? "test" : "filter",
                      (int)(name->n > SHOWN ? SHOWN : name->n), name->s);
                return NULL;
            }
            if (!(y = mk(c, test ? E_TEST : E_FILTER, name->line))) return NULL;
            y->a = x, y->s = name->s, y->n = name->n, y->i = neg;
            token *n = cur(c);
            if (is_op(n, OP_LPAREN)) {
                if (!parse_args(c, y)) return NULL;
            } else if (test &&
                       (n->kind == T_NAME || n->kind == T_STRING || n->kind == T_INT || is_op(n, OP_LBRACKET) ||
                        is_op(n, OP_LBRACE)) &&
                       !is_name(n, "else") && !is_name(n, "or") && !is_name(n, "and")) {
                if (is_name(n, "is")) return fail_at(c, n, "one test, not a chain of 'is'");
                node *arg = parse_primary(c);
                if (!arg || !(arg = parse_postfix(c, arg))) return NULL;
                y->b = arg;
            }
        } else if (is_op(t, OP_LPAREN)) {
            if (!(y = mk(c, E_CALL, t->line)) || !parse_args(c, y)) return NULL;
            y->a = x;
        } else {
            return x;
        }
        if (!(x = done(c, y))) return NULL;
    }
}

/* Guards the recursion of the parser (parentheses, unary signs, nested calls). */
static int deeper(comp *c) {
    if (c->edepth >= MAX_EXPR_DEPTH) {
        cfail(c, cur(c)->line, HG_ERR_FORMAT, "expression nested too deeply (more than %d levels)", MAX_EXPR_DEPTH);
        return 0;
    }
    c->edepth++;
    return 1;
}

static node *parse_unary(comp *c, int with_filter) {
    token *t = cur(c);
    node *x;
    if (!deeper(c)) return NULL;
    if (is_op(t, OP_SUB) || is_op(t, OP_ADD)) {
        c->at++;
        node *a = parse_unary(c, 0);
        if (a && (x = mk(c, is_op(t, OP_SUB) ? E_NEG : E_POS, t->line))) {
            x->a = a;
            x = done(c, x);
        } else {
            x = NULL;
        }
    } else {
        x = parse_primary(c);
    }
    if (x) x = parse_postfix(c, x);
    if (x && with_filter) x = parse_filters(c, x);
    c->edepth--;
    return x;
}

static node *binary(comp *c, int kind, int op, int line, node *a, node *b) {
    node *x = mk(c, kind, line);
    if (!x) return NULL;
    x->op = op, x->a = a, x->b = b;
    return done(c, x);
}

/* Jinja's precedence, loosest first: or, and, not, comparisons, + -, ~, * / // %, **,
 * unary - +, then filters and tests. The binary levels from + - to ** associate to the
 * left; each row lists a level's operators, 0-ended, loosest first. */
static const int binary_ops[][5] = {
    {OP_ADD, OP_SUB, 0}, {OP_TILDE, 0}, {OP_MUL, OP_DIV, OP_FLOORDIV, OP_MOD, 0}, {OP_POW, 0},
};
enum { BINARY_LEVELS = sizeof binary_ops / sizeof binary_ops[0] };

static int binary_at(const token *t, int level) {
    for (const int *op = binary_ops[level]; t->kind == T_OP && *op; op++)
        if (t->op == *op) return 1;
    return 0;
}

static node *parse_binary(comp *c, int level) {
    if (level == BINARY_LEVELS) return parse_unary(c, 1);
    node *x = parse_binary(c, level + 1);
    while (x && binary_at(cur(c), level)) {
        int op = cur(c)->op, line = cur(c)->line;
        c->at++;
        node *y = parse_binary(c, level + 1);
        x = y ? binary(c, E_BIN, op, line, x, y) : NULL;
    }
    return x;
}

static node *parse_compare(comp *c) {
    node *x = parse_binary(c, 0), *cmp = NULL, **tail = NULL;
    while (x) {
        token *t = cur(c);
        int op = 0;
        if (t->kind == T_OP && t->op >= OP_EQ && t->op <= OP_GE)
            op = t->op, c->at++;
        else if (is_name(t, "in"))
            op = OP_IN, c->at++;
        else if (is_name(t, "not") && is_name(ahead(c, 1), "in"))
            op = OP_NOTIN, c->at += 2;
        else
            break;
        node *y = parse_binary(c, 0), *link;
        if (!y || !(link = mk(c, E_CMPOP, t->line))) return NULL;
        link->op = op, link->a = y;
        if (!(link = done(c, link))) return NULL;
        if (!cmp) {
            if (!(cmp = mk(c, E_CMP, t->line))) return NULL;
            cmp->a = x, tail = &cmp->b;
        }
        *tail = link, tail = &link->next;
    }
    return cmp && x ? done(c, cmp) : x;
}

static node *parse_not(comp *c) {
    if (!is_name(cur(c), "not")) return parse_compare(c);
    int line = cur(c)->line;
    if (!deeper(c)) return NULL;
    c->at++;
    node *a = parse_not(c);
    c->edepth--;
    return a ? binary(c, E_NOT, 0, line, a, NULL) : NULL;
}

/* x and y ... (or_level 0), or those joined by or (1): left-associative. */
static node *parse_logic(comp *c, int or_level) {
    const char *word = or_level ? "or" : "and";
    node *x = or_level ? parse_logic(c, 0) : parse_not(c);
    while (x && is_name(cur(c), word)) {
        int line = cur(c)->line;
        c->at++;
        node *y = or_level ? parse_logic(c, 0) : parse_not(c);
        x = y ? binary(c, or_level ? E_OR : E_AND, 0, line, x, y) : NULL;
    }
    return x;
}
static node *parse_or(comp *c) { return parse_logic(c, 1); }

static node *parse_expression(comp *c, int with_cond) {
    if (!deeper(c)) return NULL;
    node *x = parse_or(c);
    while (with_cond && x && is_name(cur(c), "if")) {
        node *y = mk(c, E_COND, cur(c)->line);
        c->at++;
        if (!y || !(y->b = parse_or(c))) {
            x = NULL;
            break;
        }
        y->a = x;
        if (is_name(cur(c), "else")) {
            c->at++;
            if (!(y->c = parse_expression(c, 1))) {
                x = NULL;
                break;
            }
        }
        x = done(c, y);
    }
    c->edepth--;
    return x;
}

static int tuple_end(comp *c, const char *end_name) {
    token *t = cur(c);
    return t->kind == T_VAR_END || t->kind == T_BLOCK_END || is_op(t, OP_RPAREN) || (end_name && is_name(t, end_name));
}

/* Expressions separated by commas: a tuple when there is a comma, else the one
 * expression. */
static node *parse_tuple(comp *c, int with_cond, const char *end_name, int explicit_parens) {
    int line = cur(c)->line, n = 0, comma = 0;
    node *first = NULL, **tail = &first;
    for (;;) {
        if (n) {
            if (!is_op(cur(c), OP_COMMA)) break;
            c->at++, comma = 1;
        }
        if (tuple_end(c, end_name)) break;
        node *x = with_cond ? parse_expression(c, 1) : parse_or(c);
        if (!x) return NULL;
        *tail = x, tail = &x->next, n++;
    }
    if (!n && !explicit_parens) return fail_at(c, cur(c), "an expression");
    if (n == 1 && !comma) return first;
    node *t = mk(c, E_TUPLE, line);
    if (!t) return NULL;
    t->a = first;
    return done(c, t);
}

/* An assignment target: a name, names separated by commas, or (set only) ns.attr. */
static node *parse_target(comp *c, int allow_attr, const char *end_name) {
    int line = cur(c)->line, n = 0;
    node *first = NULL, **tail = &first;
    int parens = is_op(cur(c), OP_LPAREN);
    if (parens) c->at++;
    for (;;) {
        token *t = cur(c);
        if (t->kind != T_NAME) return fail_at(c, t, "a variable name");
        c->at++;
        node *x;
        if (allow_attr && !n && is_op(cur(c), OP_DOT)) {
            c->at++;
            token *a = cur(c);
            if (a->kind != T_NAME) return fail_at(c, a, "an attribute name");
            c->at++;
            if (!(x = mk(c, E_NSATTR, t->line))) return NULL;
            x->s = t->s, x->n = t->n, x->kw = a->s, x->kwn = a->n;
            return x;
        }
        if (!(x = mk(c, E_NAME, t->line))) return NULL;
        x->s = t->s, x->n = t->n;
        *tail = x, tail = &x->next, n++;
        if (!is_op(cur(c), OP_COMMA)) break;
        c->at++;
        if ((parens && is_op(cur(c), OP_RPAREN)) || (end_name && is_name(cur(c), end_name))) break;
    }
    if (parens && !expect_op(c, OP_RPAREN)) return NULL;
    if (n == 1 && !is_op(&c->tok[c->at - 1], OP_COMMA) && !parens) return first;
    node *t = mk(c, E_TUPLE, line);
    if (t) t->a = first;
    return t;
}

static node *parse_body(comp *c, const char *const *ends, int *which);

static int block_end(comp *c) { return expect_kind(c, T_BLOCK_END, "'%}'"); }

static int open_block(comp *c, const char *name, int line) {
    if (c->nopen == MAX_BLOCKS) {
        cfail(c, line, HG_ERR_FORMAT, "blocks nested too deeply (more than %d)", MAX_BLOCKS);
        return 0;
    }
    c->open[c->nopen].name = name, c->open[c->nopen].line = line;
    c->nopen++;
    return 1;
}

/* A statement whose '{%' and name are read; t is the name. */
static node *parse_statement(comp *c, token *t) {
    int line = t->line;
    node *x;
    if (is_name(t, "if")) {
        static const char *const ends[] = {"elif", "else", "endif", NULL};
        if (!open_block(c, "if", line) || !(x = mk(c, S_IF, line))) return NULL;
        node *branch = x;
        for (;;) {
            int which;
            if (!(branch->a = parse_tuple(c, 0, NULL, 0)) || !block_end(c)) return NULL;
            if (!(branch->body = parse_body(c, ends, &which)) && which < -1) return NULL;
            if (which == 0) { /* elif */
                if (!(branch->c = mk(c, S_IF, c->tok[c->at - 1].line))) return NULL;
                branch = branch->c;
                continue;
            }
            if (which == 1) {
                if (!block_end(c)) return NULL;
                static const char *const endif[] = {"endif", NULL};
                if (!(x->orelse = parse_body(c, endif, &which)) && which < -1) return NULL;
            }
            break;
        }
        c->nopen--;
        return block_end(c) ? x : NULL;
    }
    if (is_name(t, "for")) {
        static const char *const ends[] = {"else", "endfor", NULL};
        int which;
        if (!open_block(c, "for", line) || !(x = mk(c, S_FOR, line))) return NULL;
        if (!(x->a = parse_target(c, 0, "in"))) return NULL;
        if (!is_name(cur(c), "in")) return fail_at(c, cur(c), "'in'");
        c->at++;
        if (!(x->b = parse_tuple(c, 0, "recursive", 0))) return NULL;
        if (is_name(cur(c), "if")) {
            c->at++;
            if (!(x->c = parse_expression(c, 1))) return NULL;
        }
        if (is_name(cur(c), "recursive")) {
            cfail(c, cur(c)->line, HG_ERR_UNSUPPORTED, "recursive loops are not implemented");
            return NULL;
        }
        if (!block_end(c)) return NULL;
        c->loops++;
        x->body = parse_body(c, ends, &which);
        c->loops--;
        if (!x->body && which < -1) return NULL;
        if (which == 0) {
            static const char *const endfor[] = {"endfor", NULL};
            if (!block_end(c)) return NULL;
            if (!(x->orelse = parse_body(c, endfor, &which)) && which < -1) return NULL;
        }
        c->nopen--;
        return block_end(c) ? x : NULL;
    }
    if (is_name(t, "set")) {
        if (!(x = mk(c, S_SET, line)) || !(x->a = parse_target(c, 1, NULL))) return NULL;
        if (is_op(cur(c), OP_ASSIGN)) {
            c->at++;
            if (!(x->b = parse_tuple(c, 1, NULL, 0))) return NULL;
            return block_end(c) ? x : NULL;
        }
        if (is_op(cur(c), OP_PIPE)) {
            cfail(c, cur(c)->line, HG_ERR_UNSUPPORTED, "filters on a block set are not implemented");
            return NULL;
        }
        static const char *const ends[] = {"endset", NULL};
        int which, loops = c->loops;
        if (!block_end(c) || !open_block(c, "set", line)) return NULL;
        x->kind = S_SETBLOCK;
        c->loops = 0; /* break and continue do not leave a set block */
        x->body = parse_body(c, ends, &which);
        c->loops = loops;
        if (!x->body && which < -1) return NULL;
        c->nopen--;
        return block_end(c) ? x : NULL;
    }
    if (is_name(t, "break") || is_name(t, "continue")) {
        if (!c->loops) {
            cfail(c, line, HG_ERR_FORMAT, "'%.*s' outside a for loop", (int)t->n, t->s);
            return NULL;
        }
        if (!(x = mk(c, t->s[0] == 'b' ? S_BREAK : S_CONTINUE, line))) return NULL;
        return block_end(c) ? x : NULL;
    }
    if (is_name(t, "generation")) { /* transformers' tag marking assistant text */
        static const char *const ends[] = {"endgeneration", NULL};
        int which;
        if (!block_end(c) || !open_block(c, "generation", line) || !(x = mk(c, S_GENERATION, line))) return NULL;
        if (!(x->body = parse_body(c, ends, &which)) && which < -1) return NULL;
        c->nopen--;
        return block_end(c) ? x : NULL;
    }
    static const char *const known[] = {"macro", "call", "filter", "with", "include", "import", "from", "extends",
                                        "block", "autoescape", "do", "print", "trans", NULL};
    int shown = (int)(t->n > SHOWN ? SHOWN : t->n);
    if (listed(known, t->s, t->n))
        cfail(c, line, HG_ERR_UNSUPPORTED, "statement '%.*s' is not implemented", shown, t->s);
    else if ((t->n > 3 && !memcmp(t->s, "end", 3)) || same(t->s, t->n, "elif") || same(t->s, t->n, "else")) {
        if (c->nopen)
            cfail(c, line, HG_ERR_FORMAT, "'%.*s' where the '%s' of line %d is still open", shown, t->s,
                  c->open[c->nopen - 1].name, c->open[c->nopen - 1].line);
        else
            cfail(c, line, HG_ERR_FORMAT, "'%.*s' without an open block", shown, t->s);
    } else
        cfail(c, line, HG_ERR_FORMAT, "unknown statement '%.*s'", shown, t->s);
    return NULL;
}

/* Statements up to the end of the template (ends NULL) or a tag named ends[k]: then
 * *which = k with the parser just past that name. Returns the list (NULL when empty,
 * with *which >= -1) or NULL with *which = -2 on error. */
static node *parse_body(comp *c, const char *const *ends, int *which) {
    node *first = NULL, **tail = &first, *x;
    *which = -2;
    for (;;) {
        token *t = cur(c);
        if (t->kind == T_EOF) {
            if (ends) {
                int k = 0;
                while (ends[k + 1]) k++; /* the closing tag comes last */
                cfail(c, c->open[c->nopen - 1].line, HG_ERR_FORMAT, "'%s' is never closed (missing '%s')",
                      c->open[c->nopen - 1].name, ends[k]);
                return NULL;
            }
            *which = -1;
            return first;
        }
        c->at++;
        if (t->kind == T_DATA) {
            if (!(x = mk(c, S_TEXT, t->line))) return NULL;
            x->s = t->s, x->n = t->n;
        } else if (t->kind == T_VAR_BEGIN) {
            node *e = parse_tuple(c, 1, NULL, 0);
            if (!e || !expect_kind(c, T_VAR_END, "'}}'") || !(x = mk(c, S_PRINT, t->line))) return NULL;
            x->a = e;
        } else if (t->kind == T_BLOCK_BEGIN) {
            token *name = cur(c);
            if (name->kind != T_NAME) return fail_at(c, name, "a statement name");
            c->at++;
            for (int k = 0; ends && ends[k]; k++)
                if (is_name(name, ends[k])) {
                    *which = k;
                    return first;
                }
            if (!(x = parse_statement(c, name))) return NULL;
        } else {
            return fail_at(c, t, "text, '{{' or '{%'");
        }
        *tail = x, tail = &x->next;
    }
}

/* ------------------------------------------------------------------------------------
 * Compile */

hg_status hg_chat_template_compile(const char *src, size_t len, const char *where, hg_chat_template **out) {
    if (!out) return hg_fail(HG_ERR_INVALID, "hg_chat_template_compile: out is NULL");
    *out = NULL;
    if (!where) where = "chat template";
    if (!src && len) return hg_fail(HG_ERR_INVALID, "%s: the template source is NULL", where);
    if (len > HG_CHAT_MAX_SOURCE)
        return hg_fail(HG_ERR_INVALID, "%s: the template is %zu bytes, more than the %zu MiB allowed", where, len,
                       HG_CHAT_MAX_SOURCE >> 20);
    size_t valid = utf8_valid_prefix((const uint8_t *)src, len);
    if (valid < len)
        return hg_fail(HG_ERR_FORMAT, "%s: line %zu: the template is not valid UTF-8 (byte %zu)", where,
                       (size_t)count_newlines(src, valid) + 1, valid);
    hg_chat_template *t = calloc(1, sizeof *t);
    if (!t) return hg_fail(HG_ERR_NOMEM, "%s: out of memory", where);
    t->a.limit = 128 * HG_CHAT_MAX_SOURCE;
    size_t wn = strlen(where);
    comp c = {.a = &t->a};
    hg_status st = HG_ERR_NOMEM;
    t->where = arena_alloc(&t->a, wn + 1);
    char *norm = arena_alloc(&t->a, len + 1);
    if (!t->where || !norm) {
        hg_fail(st, "%s: out of memory", where);
        goto fail;
    }
    memcpy(t->where, where, wn + 1);
    c.where = t->where;
    /* Jinja reads \r\n and \r as \n and drops one trailing newline */
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        if (src[i] == '\r') {
            norm[n++] = '\n';
            if (i + 1 < len && src[i + 1] == '\n') i++;
        } else {
            norm[n++] = src[i];
        }
    }
    if (n && norm[n - 1] == '\n') n--;
    norm[n] = '\0';
    c.src = norm, c.n = n;
    if ((st = lex(&c)) != HG_OK) goto fail;
    int which;
    t->body = parse_body(&c, NULL, &which);
    if (which == -2) {
        st = c.st ? c.st : HG_ERR_FORMAT;
        goto fail;
    }
    free(c.tok);
    *out = t;
    return HG_OK;
fail:
    free(c.tok);
    arena_free(&t->a);
    free(t);
    return st;
}

void hg_chat_template_free(hg_chat_template *t) {
    if (!t) return;
    arena_free(&t->a);
    free(t);
}

/* ------------------------------------------------------------------------------------
 * Values */

enum { V_ABSENT = -1, V_UNDEF, V_NONE, V_BOOL, V_INT, V_STR, V_LIST, V_DICT, V_NS, V_LOOP, V_FUNC };
enum { F_RAISE, F_STRFTIME, F_NAMESPACE, F_RANGE, F_DICT, F_LIPSUM, F_CYCLER, F_JOINER, F_COUNT };
static const char *const func_names[F_COUNT] = {"raise_exception", "strftime_now", "namespace", "range",
                                                "dict",            "lipsum",       "cycler",    "joiner"};

#define MAX_VALUE_DEPTH 64 /* lists and dicts within lists and dicts */
#define MAX_WORK ((uint64_t)1 << 32) /* a render's steps and bytes: bounds its time */
#define MAX_RANGE 100000   /* Jinja's sandbox refuses larger ranges */

typedef struct vlist vlist;
typedef struct vdict vdict;
typedef struct vloop vloop;

typedef struct value {
    int k;
    union {
        int64_t i; /* V_BOOL, V_INT, V_FUNC */
        struct {
            const char *p;
            size_t n;
        } s;      /* V_STR; V_UNDEF: the name that was looked up */
        vlist *l; /* V_LIST (lists and tuples) */
        vdict *d; /* V_DICT, V_NS */
        vloop *lp;
    };
} value;

struct vlist {
    value *v;
    size_t n;
    int tuple, depth;
};

typedef struct entry {
    const char *k;
    size_t kn;
    value v;
} entry;

struct vdict { /* string keys in insertion order; namespaces and scopes grow in place */
    entry *e;
    size_t n, cap;
    int depth;
};

struct vloop {
    const vlist *items;
    size_t i;
};

typedef struct scope {
    struct scope *up;
    vdict vars;
} scope;

enum { FLOW_NONE, FLOW_BREAK, FLOW_CONTINUE };

typedef struct rstate {
    const hg_chat_template *t;
    arena a;
    char *out; /* malloc'd; always room for a NUL */
    size_t on, ocap;
    scope *sc; /* innermost */
    int64_t iters;
    uint64_t work; /* evaluation steps and bytes scanned or copied */
    time_t now;
    int flow;
} rstate;

/* Call arguments, evaluated. */
typedef struct args {
    int n;
    value v[MAX_ARGS];
    const char *kw[MAX_ARGS]; /* NULL for a positional one */
    size_t kwn[MAX_ARGS];
} args;

static value v_of(int k) {
    value v;
    memset(&v, 0, sizeof v);
    v.k = k;
    return v;
}
static value v_int(int64_t i) {
    value v = v_of(V_INT);
    v.i = i;
    return v;
}
static value v_bool(int b) {
    value v = v_of(V_BOOL);
    v.i = !!b;
    return v;
}
static value v_str(const char *p, size_t n) {
    value v = v_of(V_STR);
    v.s.p = p, v.s.n = n;
    return v;
}
static value v_undef(const char *name, size_t n) {
    value v = v_of(V_UNDEF);
    v.s.p = name, v.s.n = n;
    return v;
}

static const char *type_name(const value *v) {
    switch (v->k) {
    case V_UNDEF: return "Undefined";
    case V_NONE: return "NoneType";
    case V_BOOL: return "bool";
    case V_INT: return "int";
    case V_STR: return "str";
    case V_LIST: return v->l->tuple ? "tuple" : "list";
    case V_DICT: return "dict";
    case V_NS: return "Namespace";
    case V_LOOP: return "LoopContext";
    default: return "function";
    }
}

static int as_int(const value *v, int64_t *i) {
    if (v->k != V_INT && v->k != V_BOOL) return 0;
    *i = v->i;
    return 1;
}

static int value_depth(const value *v) {
    return v->k == V_LIST ? v->l->depth : v->k == V_DICT ? v->d->depth : 0;
}

static int truthy(const value *v) {
    switch (v->k) {
    case V_UNDEF:
    case V_NONE: return 0;
    case V_BOOL:
    case V_INT: return v->i != 0;
    case V_STR: return v->s.n != 0;
    case V_LIST: return v->l->n != 0;
    case V_DICT: return v->d->n != 0;
    default: return 1;
    }
}

static hg_status rfail(rstate *r, int line, hg_status st, const char *fmt, ...) HG_PRINTF(4, 5);
static hg_status rfail(rstate *r, int line, hg_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    hg_status out = vfail_at(r->t->where, line, st, fmt, ap);
    va_end(ap);
    return out;
}

static hg_status nomem(rstate *r, int line) {
    if (r->a.over)
        return rfail(r, line, HG_ERR_INVALID, "rendering needs more than %zu MiB of memory", HG_CHAT_MAX_MEMORY >> 20);
    return rfail(r, line, HG_ERR_NOMEM, "out of memory");
}

static hg_status undefined(rstate *r, int line, const value *v) {
    return rfail(r, line, HG_ERR_INVALID, "'%.*s' is undefined", (int)(v->s.n > SHOWN ? SHOWN : v->s.n), v->s.p);
}

static void *ralloc(rstate *r, size_t n) { return arena_alloc(&r->a, n); }

/* Charges units of work (a step of evaluation, a byte scanned or copied): iterations and
 * memory are bounded, and this bounds the time between them (a scan of a long string
 * in every iteration of a loop). */
static hg_status spend(rstate *r, int line, size_t units) {
    r->work += units;
    if (r->work > MAX_WORK)
        return rfail(r, line, HG_ERR_INVALID, "the template does too much work (more than 2^32 steps and bytes)");
    return HG_OK;
}

static hg_status new_list(rstate *r, int line, size_t n, int tuple, value *out) {
    vlist *l = ralloc(r, sizeof *l);
    value *v = n > HG_CHAT_MAX_MEMORY / sizeof *v ? NULL : ralloc(r, n * sizeof *v);
    if (!l || !v) return nomem(r, line);
    memset(v, 0, n * sizeof *v);
    l->v = v, l->n = n, l->tuple = tuple, l->depth = 1;
    *out = v_of(V_LIST);
    out->l = l;
    return HG_OK;
}

/* Sets a new list's depth from its items. */
static hg_status list_done(rstate *r, int line, value *v) {
    for (size_t i = 0; i < v->l->n; i++)
        if (value_depth(&v->l->v[i]) + 1 > v->l->depth) v->l->depth = value_depth(&v->l->v[i]) + 1;
    if (v->l->depth > MAX_VALUE_DEPTH)
        return rfail(r, line, HG_ERR_INVALID, "lists and dicts nested more than %d deep", MAX_VALUE_DEPTH);
    return HG_OK;
}

static hg_status new_string(rstate *r, int line, size_t n, char **p) {
    if (n > HG_CHAT_MAX_OUTPUT)
        return rfail(r, line, HG_ERR_INVALID, "a string longer than %zu MiB", HG_CHAT_MAX_OUTPUT >> 20);
    HG_TRY(spend(r, line, n));
    if (!(*p = ralloc(r, n + 1))) return nomem(r, line);
    (*p)[n] = '\0';
    return HG_OK;
}

static hg_status concat(rstate *r, int line, const char *a, size_t an, const char *b, size_t bn, value *out) {
    char *p;
    if (an > HG_CHAT_MAX_OUTPUT || bn > HG_CHAT_MAX_OUTPUT - an)
        return rfail(r, line, HG_ERR_INVALID, "a string longer than %zu MiB", HG_CHAT_MAX_OUTPUT >> 20);
    HG_TRY(new_string(r, line, an + bn, &p));
    memcpy(p, a, an);
    memcpy(p + an, b, bn);
    *out = v_str(p, an + bn);
    return HG_OK;
}

static long dict_find(const vdict *d, const char *k, size_t kn) {
    for (size_t i = 0; i < d->n; i++)
        if (d->e[i].kn == kn && !memcmp(d->e[i].k, k, kn)) return (long)i;
    return -1;
}

static hg_status dict_put(rstate *r, int line, vdict *d, const char *k, size_t kn, value v) {
    long at = dict_find(d, k, kn);
    if (at >= 0) {
        d->e[at].v = v;
        return HG_OK;
    }
    if (d->n == d->cap) {
        size_t cap = d->cap ? 2 * d->cap : 8;
        entry *e = ralloc(r, cap * sizeof *e);
        if (!e) return nomem(r, line);
        if (d->n) memcpy(e, d->e, d->n * sizeof *e);
        d->e = e, d->cap = cap;
    }
    d->e[d->n].k = k, d->e[d->n].kn = kn, d->e[d->n].v = v;
    d->n++;
    return HG_OK;
}

static value lookup(const rstate *r, const char *s, size_t n) {
    for (const scope *sc = r->sc; sc; sc = sc->up) {
        long at = dict_find(&sc->vars, s, n);
        if (at >= 0) return sc->vars.e[at].v;
    }
    return v_undef(s, n);
}

/* ------------------------------------------------------------------------------------
 * Output and str() */

static hg_status emit(rstate *r, int line, const char *p, size_t n) {
    if (n > HG_CHAT_MAX_OUTPUT - r->on)
        return rfail(r, line, HG_ERR_INVALID, "the rendered text is longer than %zu MiB", HG_CHAT_MAX_OUTPUT >> 20);
    HG_TRY(spend(r, line, n));
    if (r->on + n + 1 > r->ocap) {
        size_t cap = r->ocap ? r->ocap : 4096;
        while (cap < r->on + n + 1) cap *= 2;
        char *o = realloc(r->out, cap);
        if (!o) return rfail(r, line, HG_ERR_NOMEM, "out of memory for the rendered text");
        r->out = o, r->ocap = cap;
    }
    memcpy(r->out + r->on, p, n);
    r->on += n;
    return HG_OK;
}

static hg_status emit_cstr(rstate *r, int line, const char *s) { return emit(r, line, s, strlen(s)); }

/* Python's repr() of an ASCII string. */
static hg_status emit_repr_str(rstate *r, int line, const char *s, size_t n) {
    char q = memchr(s, '\'', n) && !memchr(s, '"', n) ? '"' : '\'';
    HG_TRY(emit(r, line, &q, 1));
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        char esc[8];
        if (ch >= 0x80)
            return rfail(r, line, HG_ERR_UNSUPPORTED,
                         "printing a list or dict that holds non-ASCII text is not implemented");
        if (ch == '\\' || ch == (unsigned char)q)
            snprintf(esc, sizeof esc, "\\%c", ch);
        else if (ch == '\n' || ch == '\r' || ch == '\t')
            snprintf(esc, sizeof esc, "\\%c", ch == '\n' ? 'n' : ch == '\r' ? 'r' : 't');
        else if (ch < 0x20 || ch == 0x7f)
            snprintf(esc, sizeof esc, "\\x%02x", ch);
        else
            esc[0] = (char)ch, esc[1] = '\0';
        HG_TRY(emit_cstr(r, line, esc));
    }
    return emit(r, line, &q, 1);
}

/* Appends str(v), or repr(v), as Python writes them. */
static hg_status emit_value(rstate *r, int line, const value *v, int repr, int depth) {
    char buf[32];
    if (depth > MAX_VALUE_DEPTH) return rfail(r, line, HG_ERR_INVALID, "a value nested too deeply to print");
    switch (v->k) {
    case V_UNDEF: return repr ? emit_cstr(r, line, "Undefined") : HG_OK;
    case V_NONE: return emit_cstr(r, line, "None");
    case V_BOOL: return emit_cstr(r, line, v->i ? "True" : "False");
    case V_INT: snprintf(buf, sizeof buf, "%lld", (long long)v->i); return emit_cstr(r, line, buf);
    case V_STR: return repr ? emit_repr_str(r, line, v->s.p, v->s.n) : emit(r, line, v->s.p, v->s.n);
    case V_LIST:
        HG_TRY(emit_cstr(r, line, v->l->tuple ? "(" : "["));
        for (size_t i = 0; i < v->l->n; i++) {
            if (i) HG_TRY(emit_cstr(r, line, ", "));
            HG_TRY(emit_value(r, line, &v->l->v[i], 1, depth + 1));
        }
        if (v->l->tuple && v->l->n == 1) HG_TRY(emit_cstr(r, line, ","));
        return emit_cstr(r, line, v->l->tuple ? ")" : "]");
    case V_DICT:
    case V_NS:
        if (v->k == V_NS) HG_TRY(emit_cstr(r, line, "<Namespace "));
        HG_TRY(emit_cstr(r, line, "{"));
        for (size_t i = 0; i < v->d->n; i++) {
            if (i) HG_TRY(emit_cstr(r, line, ", "));
            HG_TRY(emit_repr_str(r, line, v->d->e[i].k, v->d->e[i].kn));
            HG_TRY(emit_cstr(r, line, ": "));
            HG_TRY(emit_value(r, line, &v->d->e[i].v, 1, depth + 1));
        }
        return emit_cstr(r, line, v->k == V_NS ? "}>" : "}");
    default: return rfail(r, line, HG_ERR_UNSUPPORTED, "printing a %s is not implemented", type_name(v));
    }
}

/* str(v) as a string value. */
static hg_status to_str(rstate *r, int line, const value *v, value *out) {
    if (v->k == V_STR) {
        *out = *v;
        return HG_OK;
    }
    if (v->k == V_UNDEF) {
        *out = v_str("", 0);
        return HG_OK;
    }
    size_t mark = r->on;
    char *p;
    HG_TRY(emit_value(r, line, v, 0, 0));
    HG_TRY(new_string(r, line, r->on - mark, &p));
    if (r->on > mark) memcpy(p, r->out + mark, r->on - mark);
    *out = v_str(p, r->on - mark);
    r->on = mark;
    return HG_OK;
}

/* ------------------------------------------------------------------------------------
 * Operations */

/* The items a for loop or a filter iterates: a list's items, a string's characters, a
 * dict's keys; Undefined iterates as empty. */
static hg_status iter_items(rstate *r, int line, const value *v, const vlist **out) {
    static const vlist empty = {NULL, 0, 0, 1};
    value l;
    switch (v->k) {
    case V_LIST: *out = v->l; return HG_OK;
    case V_UNDEF: *out = &empty; return HG_OK;
    case V_STR: {
        HG_TRY(spend(r, line, v->s.n));
        HG_TRY(new_list(r, line, cp_count(v->s.p, v->s.n), 0, &l));
        for (size_t i = 0, k = 0; i < v->s.n; k++) {
            size_t len = cp_len(v->s.p + i, v->s.n - i);
            l.l->v[k] = v_str(v->s.p + i, len);
            i += len;
        }
        *out = l.l;
        return HG_OK;
    }
    case V_DICT:
        HG_TRY(new_list(r, line, v->d->n, 0, &l));
        for (size_t i = 0; i < v->d->n; i++) l.l->v[i] = v_str(v->d->e[i].k, v->d->e[i].kn);
        *out = l.l;
        return HG_OK;
    default: return rfail(r, line, HG_ERR_INVALID, "'%s' object is not iterable", type_name(v));
    }
}

/* Python's a == b. Charges r->work and gives up (0) past MAX_WORK: callers then spend(). */
static int equal(rstate *r, const value *a, const value *b) {
    int64_t x, y;
    if ((r->work += 1) > MAX_WORK) return 0;
    if (as_int(a, &x) && as_int(b, &y)) return x == y;
    if (a->k != b->k) return 0;
    switch (a->k) {
    case V_UNDEF:
    case V_NONE: return 1;
    case V_STR: return a->s.n == b->s.n && (r->work += a->s.n) <= MAX_WORK && !memcmp(a->s.p, b->s.p, a->s.n);
    case V_LIST:
        if (a->l->tuple != b->l->tuple || a->l->n != b->l->n) return 0;
        for (size_t i = 0; i < a->l->n; i++)
            if (!equal(r, &a->l->v[i], &b->l->v[i])) return 0;
        return 1;
    case V_DICT:
        if (a->d->n != b->d->n) return 0;
        for (size_t i = 0; i < a->d->n; i++) {
            long at = dict_find(b->d, a->d->e[i].k, a->d->e[i].kn);
            if (at < 0 || !equal(r, &a->d->e[i].v, &b->d->e[at].v)) return 0;
        }
        return 1;
    case V_NS: return a->d == b->d;
    case V_LOOP: return a->lp == b->lp;
    default: return a->i == b->i;
    }
}

/* *lt = a < b, for ints, strings (by code point) and lists of them. */
static hg_status less(rstate *r, int line, const value *a, const value *b, int *lt) {
    int64_t x, y;
    if (a->k == V_UNDEF) return undefined(r, line, a);
    if (b->k == V_UNDEF) return undefined(r, line, b);
    HG_TRY(spend(r, line, 1));
    if (as_int(a, &x) && as_int(b, &y)) {
        *lt = x < y;
        return HG_OK;
    }
    if (a->k == V_STR && b->k == V_STR) {
        HG_TRY(spend(r, line, a->s.n < b->s.n ? a->s.n : b->s.n));
        int c = memcmp(a->s.p, b->s.p, a->s.n < b->s.n ? a->s.n : b->s.n);
        *lt = c < 0 || (c == 0 && a->s.n < b->s.n);
        return HG_OK;
    }
    if (a->k == V_LIST && b->k == V_LIST && a->l->tuple == b->l->tuple) {
        for (size_t i = 0; i < a->l->n && i < b->l->n; i++)
            if (!equal(r, &a->l->v[i], &b->l->v[i])) return less(r, line, &a->l->v[i], &b->l->v[i], lt);
        HG_TRY(spend(r, line, 0));
        *lt = a->l->n < b->l->n;
        return HG_OK;
    }
    return rfail(r, line, HG_ERR_INVALID, "'<' not supported between '%s' and '%s'", type_name(a), type_name(b));
}

/* The first s in h at or after from, or -1 (glibc's memmem: linear time). */
static long index_of(const char *h, size_t hn, const char *s, size_t n, size_t from) {
    const char *at = from <= hn ? memmem(h + from, hn - from, s, n) : NULL;
    return at ? (long)(at - h) : -1;
}

/* *in = needle in hay */
static hg_status contains(rstate *r, int line, const value *needle, const value *hay, int *in) {
    switch (hay->k) {
    case V_STR:
        if (needle->k == V_UNDEF) return undefined(r, line, needle);
        if (needle->k != V_STR)
            return rfail(r, line, HG_ERR_INVALID, "'in <string>' requires a string on the left, not '%s'",
                         type_name(needle));
        HG_TRY(spend(r, line, hay->s.n));
        *in = index_of(hay->s.p, hay->s.n, needle->s.p, needle->s.n, 0) >= 0;
        return HG_OK;
    case V_LIST:
        *in = 0;
        for (size_t i = 0; i < hay->l->n && !*in; i++) *in = equal(r, needle, &hay->l->v[i]);
        return spend(r, line, 0);
    case V_DICT: *in = needle->k == V_STR && dict_find(hay->d, needle->s.p, needle->s.n) >= 0; return HG_OK;
    case V_UNDEF: *in = 0; return HG_OK;
    default: return rfail(r, line, HG_ERR_INVALID, "argument of type '%s' is not iterable", type_name(hay));
    }
}

static hg_status binop(rstate *r, int line, int op, const value *a, const value *b, value *out) {
    int64_t x, y, z;
    if (op == OP_TILDE) {
        value sa, sb;
        HG_TRY(to_str(r, line, a, &sa));
        HG_TRY(to_str(r, line, b, &sb));
        return concat(r, line, sa.s.p, sa.s.n, sb.s.p, sb.s.n, out);
    }
    if (a->k == V_UNDEF) return undefined(r, line, a);
    if (b->k == V_UNDEF) return undefined(r, line, b);
    int ints = as_int(a, &x) && as_int(b, &y);
    switch (op) {
    case OP_ADD:
        if (ints) {
            if (__builtin_add_overflow(x, y, &z)) break;
            *out = v_int(z);
            return HG_OK;
        }
        if (a->k == V_STR && b->k == V_STR) return concat(r, line, a->s.p, a->s.n, b->s.p, b->s.n, out);
        if (a->k == V_LIST && b->k == V_LIST && a->l->tuple == b->l->tuple) {
            HG_TRY(new_list(r, line, a->l->n + b->l->n, a->l->tuple, out));
            memcpy(out->l->v, a->l->v, a->l->n * sizeof(value));
            memcpy(out->l->v + a->l->n, b->l->v, b->l->n * sizeof(value));
            return list_done(r, line, out);
        }
        goto types;
    case OP_SUB:
    case OP_MUL:
        if (ints) {
            if (op == OP_SUB ? __builtin_sub_overflow(x, y, &z) : __builtin_mul_overflow(x, y, &z)) break;
            *out = v_int(z);
            return HG_OK;
        }
        if (op == OP_MUL && (a->k == V_STR || b->k == V_STR) && (as_int(a, &x) || as_int(b, &x))) {
            const value *s = a->k == V_STR ? a : b;
            size_t times = x > 0 && s->s.n ? (size_t)x : 0; /* '' * 10**12 is '' at once */
            char *p;
            if (times && times > HG_CHAT_MAX_OUTPUT / s->s.n)
                return rfail(r, line, HG_ERR_INVALID, "a string longer than %zu MiB", HG_CHAT_MAX_OUTPUT >> 20);
            HG_TRY(new_string(r, line, s->s.n * times, &p));
            for (size_t i = 0; i < times; i++) memcpy(p + i * s->s.n, s->s.p, s->s.n);
            *out = v_str(p, s->s.n * times);
            return HG_OK;
        }
        if (op == OP_MUL && (a->k == V_LIST || b->k == V_LIST))
            return rfail(r, line, HG_ERR_UNSUPPORTED, "'*' on a list is not implemented");
        goto types;
    case OP_FLOORDIV:
    case OP_MOD:
        if (op == OP_MOD && a->k == V_STR)
            return rfail(r, line, HG_ERR_UNSUPPORTED, "string formatting with '%%' is not implemented");
        if (!ints) goto types;
        if (y == 0) return rfail(r, line, HG_ERR_INVALID, "integer division or modulo by zero");
        if (x == INT64_MIN && y == -1) break;
        z = op == OP_FLOORDIV ? x / y : x % y; /* then Python's floor rounding */
        if (op == OP_FLOORDIV && x % y && ((x < 0) != (y < 0))) z--;
        if (op == OP_MOD && z && ((z < 0) != (y < 0))) z += y;
        *out = v_int(z);
        return HG_OK;
    case OP_DIV: return rfail(r, line, HG_ERR_UNSUPPORTED, "'/' gives a float, and floats are not implemented");
    case OP_POW:
        if (!ints) goto types;
        if (y < 0)
            return rfail(r, line, HG_ERR_UNSUPPORTED, "'**' with a negative exponent gives a float, not implemented");
        for (z = 1; y > 0;) { /* by squaring: base^2 is needed whenever bits remain */
            if ((y & 1) && __builtin_mul_overflow(z, x, &z)) goto overflow;
            y >>= 1;
            if (y && __builtin_mul_overflow(x, x, &x)) goto overflow;
        }
        *out = v_int(z);
        return HG_OK;
    }
overflow:
    return rfail(r, line, HG_ERR_UNSUPPORTED, "integer overflow (integers beyond 64 bits are not implemented)");
types:
    return rfail(r, line, HG_ERR_INVALID, "unsupported operand types for %s: '%s' and '%s'", op_text[op], type_name(a),
                 type_name(b));
}

/* ------------------------------------------------------------------------------------
 * Attributes, items, slices */

static int loop_attr(const vloop *lp, const char *s, size_t n, value *out) {
    size_t i = lp->i, len = lp->items->n;
    if (same(s, n, "index")) *out = v_int((int64_t)i + 1);
    else if (same(s, n, "index0")) *out = v_int((int64_t)i);
    else if (same(s, n, "revindex")) *out = v_int((int64_t)(len - i));
    else if (same(s, n, "revindex0")) *out = v_int((int64_t)(len - i - 1));
    else if (same(s, n, "first")) *out = v_bool(i == 0);
    else if (same(s, n, "last")) *out = v_bool(i + 1 == len);
    else if (same(s, n, "length")) *out = v_int((int64_t)len);
    else if (same(s, n, "depth")) *out = v_int(1);
    else if (same(s, n, "depth0")) *out = v_int(0);
    else if (same(s, n, "previtem")) *out = i ? lp->items->v[i - 1] : v_undef(s, n);
    else if (same(s, n, "nextitem")) *out = i + 1 < len ? lp->items->v[i + 1] : v_undef(s, n);
    else return 0;
    return 1;
}

/* o.name: a dict's key or a loop's attribute; Undefined otherwise, as Jinja gives. */
static hg_status get_attr(rstate *r, int line, const value *o, const char *s, size_t n, value *out) {
    if (o->k == V_UNDEF) return undefined(r, line, o);
    if (o->k == V_DICT || o->k == V_NS) {
        long at = dict_find(o->d, s, n);
        *out = at >= 0 ? o->d->e[at].v : v_undef(s, n);
    } else if (o->k != V_LOOP || !loop_attr(o->lp, s, n, out)) {
        *out = v_undef(s, n);
    }
    return HG_OK;
}

/* Python's index i into n items: *at, or 0 when out of range. */
static int py_index(int64_t i, size_t n, size_t *at) {
    if (i < 0) i += (int64_t)n;
    if (i < 0 || (uint64_t)i >= n) return 0;
    *at = (size_t)i;
    return 1;
}

/* Byte offsets of a string's code points, with its length at [count]. */
static hg_status cp_offsets(rstate *r, int line, const char *s, size_t n, size_t **off, size_t *count) {
    HG_TRY(spend(r, line, n));
    size_t k = cp_count(s, n);
    if (!(*off = ralloc(r, (k + 1) * sizeof **off))) return nomem(r, line);
    for (size_t i = 0, j = 0; i < n; i += cp_len(s + i, n - i)) (*off)[j++] = i;
    (*off)[k] = n, *count = k;
    return HG_OK;
}

/* o[key]: a list's or string's item, a dict's key; Undefined when absent. */
static hg_status get_item(rstate *r, int line, const value *o, const value *key, value *out) {
    int64_t i;
    size_t at;
    if (o->k == V_UNDEF) return undefined(r, line, o);
    if (key->k == V_STR && (o->k == V_DICT || o->k == V_NS || o->k == V_LOOP))
        return get_attr(r, line, o, key->s.p, key->s.n, out);
    *out = key->k == V_STR ? v_undef(key->s.p, key->s.n) : v_undef("[...]", 5);
    if (o->k == V_LIST && as_int(key, &i) && py_index(i, o->l->n, &at)) *out = o->l->v[at];
    if (o->k == V_STR && as_int(key, &i)) {
        HG_TRY(spend(r, line, o->s.n));
        if (py_index(i, cp_count(o->s.p, o->s.n), &at)) {
            size_t b = 0;
            while (at--) b += cp_len(o->s.p + b, o->s.n - b);
            *out = v_str(o->s.p + b, cp_len(o->s.p + b, o->s.n - b));
        }
    }
    return HG_OK;
}

/* Python's slice bound: an int, or none/absent for the default. */
static hg_status slice_bound(rstate *r, int line, const value *v, int64_t *b, int *given) {
    *given = 0;
    if (v->k == V_ABSENT || v->k == V_NONE) return HG_OK;
    if (v->k == V_UNDEF) return undefined(r, line, v);
    if (!as_int(v, b))
        return rfail(r, line, HG_ERR_INVALID, "slice indices must be integers or none, not '%s'", type_name(v));
    *given = 1;
    return HG_OK;
}

static hg_status get_slice(rstate *r, int line, const value *o, const value *bounds, value *out) {
    int64_t b[3] = {0, 0, 1};
    int g[3];
    for (int k = 0; k < 3; k++) HG_TRY(slice_bound(r, line, &bounds[k], &b[k], &g[k]));
    if (o->k == V_UNDEF) return undefined(r, line, o);
    if (o->k != V_LIST && o->k != V_STR)
        return rfail(r, line, HG_ERR_INVALID, "'%s' object cannot be sliced", type_name(o));
    if (b[2] == 0) return rfail(r, line, HG_ERR_INVALID, "slice step cannot be zero");
    size_t *off = NULL, count = o->k == V_LIST ? o->l->n : 0;
    if (o->k == V_STR) HG_TRY(cp_offsets(r, line, o->s.p, o->s.n, &off, &count));
    int64_t len = (int64_t)count, step = b[2], start, stop;
    for (int k = 0; k < 2; k++) { /* CPython's PySlice_AdjustIndices */
        int64_t *v = &b[k];
        if (!g[k]) {
            *v = step > 0 ? (k ? len : 0) : (k ? -1 : len - 1);
            continue;
        }
        if (*v < 0) *v = *v + len < 0 ? (step > 0 ? 0 : -1) : *v + len;
        else if (*v >= len) *v = step > 0 ? len : len - 1;
    }
    start = b[0], stop = b[1];
    size_t n = 0, bytes = 0;
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
        n++;
        if (off) bytes += off[i + 1] - off[i];
        if (step > 0 ? step > stop - i : step < stop - i) break; /* no overflow past stop */
    }
    if (o->k == V_LIST) {
        HG_TRY(new_list(r, line, n, o->l->tuple, out));
        size_t k = 0;
        for (int64_t i = start; k < n; i += step) out->l->v[k++] = o->l->v[i];
        return list_done(r, line, out);
    }
    char *p;
    HG_TRY(new_string(r, line, bytes, &p));
    size_t at = 0, k = 0;
    for (int64_t i = start; k < n; i += step, k++) {
        memcpy(p + at, o->s.p + off[i], off[i + 1] - off[i]);
        at += off[i + 1] - off[i];
    }
    *out = v_str(p, bytes);
    return HG_OK;
}

/* ------------------------------------------------------------------------------------
 * Arguments */

/* Binds a's arguments to the parameters params (by position, or by keyword) into p;
 * absent ones are V_ABSENT. The first `required` must be given. */
static hg_status bind(rstate *r, int line, const char *what, const args *a, const char *const *params, int required,
                      value *p) {
    int np = 0;
    while (params[np]) np++;
    for (int k = 0; k < np; k++) p[k] = v_of(V_ABSENT);
    for (int i = 0; i < a->n; i++) {
        int k = i;
        if (a->kw[i]) {
            for (k = 0; k < np && !same(a->kw[i], a->kwn[i], params[k]); k++) {
            }
            if (k == np)
                return rfail(r, line, HG_ERR_INVALID, "%s has no argument '%.*s'", what,
                             (int)(a->kwn[i] > SHOWN ? SHOWN : a->kwn[i]), a->kw[i]);
        } else if (k >= np) {
            return rfail(r, line, HG_ERR_INVALID, "%s takes at most %d argument%s", what, np, np == 1 ? "" : "s");
        }
        if (p[k].k != V_ABSENT) return rfail(r, line, HG_ERR_INVALID, "%s got argument '%s' twice", what, params[k]);
        p[k] = a->v[i];
    }
    for (int k = 0; k < required; k++)
        if (p[k].k == V_ABSENT) return rfail(r, line, HG_ERR_INVALID, "%s needs argument '%s'", what, params[k]);
    return HG_OK;
}

static hg_status need_str(rstate *r, int line, const char *what, const value *v) {
    if (v->k == V_STR) return HG_OK;
    if (v->k == V_UNDEF) return undefined(r, line, v);
    return rfail(r, line, HG_ERR_INVALID, "%s needs a string, not '%s'", what, type_name(v));
}

/* ------------------------------------------------------------------------------------
 * Strings */

/* Python's str.strip/lstrip/rstrip(chars): whitespace when chars is absent or none. */
static hg_status strip(rstate *r, int line, const value *s, const value *chars, int left, int right, value *out) {
    const char *p = s->s.p;
    size_t n = s->s.n;
    HG_TRY(spend(r, line, n));
    if (chars->k == V_ABSENT || chars->k == V_NONE) {
        if (left) {
            size_t k = lstrip_len(p, n);
            p += k, n -= k;
        }
        if (right) n = rstrip_len(p, n);
    } else {
        HG_TRY(need_str(r, line, "strip", chars));
        if (chars->s.n > 256)
            return rfail(r, line, HG_ERR_UNSUPPORTED, "strip with more than 256 bytes of characters is not implemented");
        for (;;) { /* drop code points found in chars from either end */
            HG_TRY(spend(r, line, chars->s.n));
            size_t k = n ? cp_len(p, n) : 0, at = 0;
            int hit = 0;
            for (; left && k && at < chars->s.n && !hit; at += cp_len(chars->s.p + at, chars->s.n - at))
                hit = cp_len(chars->s.p + at, chars->s.n - at) == k && !memcmp(chars->s.p + at, p, k);
            if (!hit) break;
            p += k, n -= k;
        }
        for (;;) {
            size_t k = 0, at = 0;
            int hit = 0;
            HG_TRY(spend(r, line, chars->s.n));
            if (n) {
                k = 1;
                while (k < n && k < 4 && ((unsigned char)p[n - k] & 0xc0) == 0x80) k++;
            }
            for (; right && k && at < chars->s.n && !hit; at += cp_len(chars->s.p + at, chars->s.n - at))
                hit = cp_len(chars->s.p + at, chars->s.n - at) == k && !memcmp(chars->s.p + at, p + n - k, k);
            if (!hit) break;
            n -= k;
        }
    }
    *out = v_str(p, n);
    return HG_OK;
}

/* upper() or lower() of ASCII text; Unicode case mapping is refused. */
static hg_status change_case(rstate *r, int line, const value *s, int upper, value *out) {
    char *p;
    HG_TRY(new_string(r, line, s->s.n, &p));
    for (size_t i = 0; i < s->s.n; i++) {
        char ch = s->s.p[i];
        if ((unsigned char)ch >= 0x80)
            return rfail(r, line, HG_ERR_UNSUPPORTED, "%s of non-ASCII text is not implemented", upper ? "upper" : "lower");
        p[i] = upper && ch >= 'a' && ch <= 'z' ? (char)(ch - 32) : !upper && ch >= 'A' && ch <= 'Z' ? (char)(ch + 32) : ch;
    }
    *out = v_str(p, s->s.n);
    return HG_OK;
}

/* ------------------------------------------------------------------------------------
 * Filters, tests, methods, functions */

static hg_status eval(rstate *r, const node *x, value *out);

static hg_status eval_args(rstate *r, const node *first, args *a) {
    a->n = 0;
    for (const node *x = first; x; x = x->next) {
        HG_TRY(eval(r, x, &a->v[a->n]));
        a->kw[a->n] = x->kw, a->kwn[a->n] = x->kwn;
        a->n++;
    }
    return HG_OK;
}

static hg_status filter(rstate *r, const node *x, const value *v, const args *a, value *out) {
    char what[SHOWN + 16];
    value p[4], s;
    const vlist *items;
    int line = x->line;
    snprintf(what, sizeof what, "filter '%.*s'", (int)x->n, x->s);
#define IS(name) same(x->s, x->n, name)
    if (IS("trim")) {
        static const char *const params[] = {"chars", NULL};
        HG_TRY(bind(r, line, what, a, params, 0, p));
        HG_TRY(to_str(r, line, v, &s));
        return strip(r, line, &s, &p[0], 1, 1, out);
    }
    static const char *const none[] = {NULL};
    if (IS("length") || IS("count")) {
        HG_TRY(bind(r, line, what, a, none, 0, p));
        HG_TRY(spend(r, line, v->k == V_STR ? v->s.n : 0));
        if (v->k == V_STR) *out = v_int((int64_t)cp_count(v->s.p, v->s.n));
        else if (v->k == V_LIST) *out = v_int((int64_t)v->l->n);
        else if (v->k == V_DICT) *out = v_int((int64_t)v->d->n);
        else if (v->k == V_UNDEF) *out = v_int(0);
        else return rfail(r, line, HG_ERR_INVALID, "object of type '%s' has no len()", type_name(v));
        return HG_OK;
    }
    if (IS("upper") || IS("lower")) {
        HG_TRY(bind(r, line, what, a, none, 0, p));
        HG_TRY(to_str(r, line, v, &s));
        return change_case(r, line, &s, IS("upper"), out);
    }
    if (IS("default") || IS("d")) {
        static const char *const params[] = {"default_value", "boolean", NULL};
        HG_TRY(bind(r, line, what, a, params, 0, p));
        int use = v->k == V_UNDEF || (p[1].k != V_ABSENT && truthy(&p[1]) && !truthy(v));
        *out = !use ? *v : p[0].k != V_ABSENT ? p[0] : v_str("", 0);
        return HG_OK;
    }
    if (IS("string")) {
        HG_TRY(bind(r, line, what, a, none, 0, p));
        return to_str(r, line, v, out);
    }
    if (IS("join")) {
        static const char *const params[] = {"d", "attribute", NULL};
        value sep = v_str("", 0);
        HG_TRY(bind(r, line, what, a, params, 0, p));
        if (p[1].k != V_ABSENT && p[1].k != V_NONE)
            return rfail(r, line, HG_ERR_UNSUPPORTED, "join with an attribute is not implemented");
        if (p[0].k != V_ABSENT) HG_TRY(to_str(r, line, &p[0], &sep));
        HG_TRY(iter_items(r, line, v, &items));
        value *parts = items->n ? ralloc(r, items->n * sizeof *parts) : NULL;
        size_t total = 0, at = 0;
        char *o;
        if (items->n && !parts) return nomem(r, line);
        for (size_t i = 0; i < items->n; i++) { /* measure, then copy once */
            HG_TRY(to_str(r, line, &items->v[i], &parts[i]));
            total += parts[i].s.n + (i ? sep.s.n : 0);
            if (total > HG_CHAT_MAX_OUTPUT) return new_string(r, line, total, &o);
        }
        HG_TRY(new_string(r, line, total, &o));
        for (size_t i = 0; i < items->n; i++) {
            if (i) memcpy(o + at, sep.s.p, sep.s.n), at += sep.s.n;
            memcpy(o + at, parts[i].s.p, parts[i].s.n), at += parts[i].s.n;
        }
        *out = v_str(o, total);
        return HG_OK;
    }
    if (IS("first") || IS("last") || IS("list")) {
        HG_TRY(bind(r, line, what, a, none, 0, p));
        HG_TRY(iter_items(r, line, v, &items));
        if (IS("list")) {
            HG_TRY(new_list(r, line, items->n, 0, out));
            if (items->n) memcpy(out->l->v, items->v, items->n * sizeof(value));
            return list_done(r, line, out);
        }
        *out = !items->n ? v_undef(x->s, x->n) : items->v[IS("first") ? 0 : items->n - 1];
        return HG_OK;
    }
    if (IS("replace")) {
        static const char *const params[] = {"old", "new", "count", NULL};
        value old, rep;
        int64_t count = -1;
        HG_TRY(bind(r, line, what, a, params, 2, p));
        HG_TRY(to_str(r, line, v, &s));
        HG_TRY(to_str(r, line, &p[0], &old));
        HG_TRY(to_str(r, line, &p[1], &rep));
        if (p[2].k != V_ABSENT && p[2].k != V_NONE && !as_int(&p[2], &count))
            return rfail(r, line, HG_ERR_INVALID, "%s: count must be an integer", what);
        if (!old.s.n) return rfail(r, line, HG_ERR_UNSUPPORTED, "%s with an empty pattern is not implemented", what);
        size_t hits = 0, at = 0, total = s.s.n, k = 0;
        long hit;
        HG_TRY(spend(r, line, 2 * s.s.n)); /* two scans */
        for (int64_t left = count; left != 0 && (hit = index_of(s.s.p, s.s.n, old.s.p, old.s.n, at)) >= 0; left--) {
            hits++, at = (size_t)hit + old.s.n; /* measure, then copy once */
            total = total - old.s.n + rep.s.n;
            if (total > HG_CHAT_MAX_OUTPUT) break;
        }
        char *o;
        HG_TRY(new_string(r, line, total, &o));
        at = 0;
        for (size_t h = 0; h < hits; h++) {
            hit = index_of(s.s.p, s.s.n, old.s.p, old.s.n, at);
            memcpy(o + k, s.s.p + at, (size_t)hit - at), k += (size_t)hit - at;
            memcpy(o + k, rep.s.p, rep.s.n), k += rep.s.n;
            at = (size_t)hit + old.s.n;
        }
        memcpy(o + k, s.s.p + at, s.s.n - at);
        *out = v_str(o, total);
        return HG_OK;
    }
#undef IS
    return rfail(r, line, HG_ERR_UNSUPPORTED, "%s is not implemented", what);
}

static hg_status test(rstate *r, const node *x, const value *v, const args *a, int *out) {
    char what[SHOWN + 16];
    value p[2];
    int64_t i, d;
    int line = x->line;
    static const char *const none[] = {NULL}, *const one[] = {"other", NULL};
    snprintf(what, sizeof what, "test '%.*s'", (int)x->n, x->s);
#define IS(name) same(x->s, x->n, name)
    if (IS("eq") || IS("equalto") || IS("==") || IS("ne") || IS("!=")) {
        HG_TRY(bind(r, line, what, a, one, 1, p));
        *out = equal(r, v, &p[0]) == (IS("eq") || IS("equalto") || IS("=="));
        return spend(r, line, 0);
    }
    if (IS("divisibleby")) {
        HG_TRY(bind(r, line, what, a, one, 1, p));
        if (v->k == V_UNDEF) return undefined(r, line, v);
        if (!as_int(v, &i) || !as_int(&p[0], &d)) return rfail(r, line, HG_ERR_INVALID, "%s needs integers", what);
        if (!d) return rfail(r, line, HG_ERR_INVALID, "integer division or modulo by zero");
        *out = d == -1 || i % d == 0;
        return HG_OK;
    }
    HG_TRY(bind(r, line, what, a, none, 0, p));
    if (IS("defined")) *out = v->k != V_UNDEF;
    else if (IS("undefined")) *out = v->k == V_UNDEF;
    else if (IS("none")) *out = v->k == V_NONE;
    else if (IS("string")) *out = v->k == V_STR;
    else if (IS("number")) *out = v->k == V_INT || v->k == V_BOOL;
    else if (IS("integer")) *out = v->k == V_INT;
    else if (IS("boolean")) *out = v->k == V_BOOL;
    else if (IS("true")) *out = v->k == V_BOOL && v->i;
    else if (IS("false")) *out = v->k == V_BOOL && !v->i;
    else if (IS("mapping")) *out = v->k == V_DICT;
    else if (IS("iterable")) *out = v->k == V_STR || v->k == V_LIST || v->k == V_DICT || v->k == V_UNDEF || v->k == V_LOOP;
    else if (IS("sequence")) *out = v->k == V_STR || v->k == V_LIST || v->k == V_DICT || v->k == V_UNDEF;
    else if (IS("callable")) *out = v->k == V_FUNC;
    else if (IS("odd") || IS("even")) {
        if (v->k == V_UNDEF) return undefined(r, line, v);
        if (!as_int(v, &i)) return rfail(r, line, HG_ERR_INVALID, "%s needs an integer, not '%s'", what, type_name(v));
        *out = (i % 2 != 0) == IS("odd");
    } else
        return rfail(r, line, HG_ERR_UNSUPPORTED, "%s is not implemented", what);
#undef IS
    return HG_OK;
}

/* A method of a string or dict: o.name(args). */
static hg_status method(rstate *r, int line, const value *o, const char *name, size_t nn, const args *a, value *out) {
    char what[SHOWN + 16];
    value p[2];
    snprintf(what, sizeof what, "method '%.*s'", (int)(nn > SHOWN ? SHOWN : nn), name);
    if (o->k == V_STR) {
        static const char *const chars[] = {"chars", NULL}, *const prefix[] = {"prefix", NULL}, *const none[] = {NULL};
        int l = same(name, nn, "strip") || same(name, nn, "lstrip");
        int rt = same(name, nn, "strip") || same(name, nn, "rstrip");
        if (l || rt) {
            HG_TRY(bind(r, line, what, a, chars, 0, p));
            return strip(r, line, o, &p[0], l, rt, out);
        }
        int starts = same(name, nn, "startswith");
        if (starts || same(name, nn, "endswith")) {
            HG_TRY(bind(r, line, what, a, prefix, 1, p));
            const value *cand = p[0].k == V_LIST && p[0].l->tuple ? p[0].l->v : &p[0];
            size_t nc = p[0].k == V_LIST && p[0].l->tuple ? p[0].l->n : 1;
            int hit = 0;
            for (size_t i = 0; i < nc && !hit; i++) {
                HG_TRY(need_str(r, line, what, &cand[i]));
                size_t k = cand[i].s.n;
                HG_TRY(spend(r, line, k));
                hit = k <= o->s.n && !memcmp(o->s.p + (starts ? 0 : o->s.n - k), cand[i].s.p, k);
            }
            *out = v_bool(hit);
            return HG_OK;
        }
        if (same(name, nn, "upper") || same(name, nn, "lower")) {
            HG_TRY(bind(r, line, what, a, none, 0, p));
            return change_case(r, line, o, same(name, nn, "upper"), out);
        }
    } else if (o->k == V_DICT && same(name, nn, "get")) {
        static const char *const params[] = {"key", "default", NULL};
        HG_TRY(bind(r, line, what, a, params, 1, p));
        long at = p[0].k == V_STR ? dict_find(o->d, p[0].s.p, p[0].s.n) : -1;
        *out = at >= 0 ? o->d->e[at].v : p[1].k != V_ABSENT ? p[1] : v_of(V_NONE);
        return HG_OK;
    }
    return rfail(r, line, HG_ERR_UNSUPPORTED, "%s of a %s is not implemented", what, type_name(o));
}

/* strftime_now(format): Python's datetime.now().strftime(format), which is C's
 * strftime in the C locale except for the directives datetime handles itself. */
static hg_status strftime_now(rstate *r, int line, const value *fmt, value *out) {
    char f[256], buf[1024];
    HG_TRY(need_str(r, line, "strftime_now", fmt));
    if (fmt->s.n >= sizeof f)
        return rfail(r, line, HG_ERR_UNSUPPORTED, "strftime_now formats longer than 255 bytes are not implemented");
    memcpy(f, fmt->s.p, fmt->s.n);
    f[fmt->s.n] = '\0';
    for (size_t i = 0; i + 1 < fmt->s.n; i++)
        if (f[i] == '%') {
            i++;
            if (f[i] == 'f' || f[i] == 'z' || f[i] == 'Z' || f[i] == ':')
                return rfail(r, line, HG_ERR_UNSUPPORTED, "strftime_now: '%%%c' is not implemented", f[i]);
        }
    struct tm tm;
    time_t now = r->now;
    locale_t c = newlocale(LC_ALL_MASK, "C", (locale_t)0);
    if (!c) return rfail(r, line, HG_ERR_NOMEM, "strftime_now: no C locale");
    size_t n = localtime_r(&now, &tm) ? strftime_l(buf, sizeof buf, f, &tm, c) : 0;
    freelocale(c);
    if (!n && f[0]) return rfail(r, line, HG_ERR_UNSUPPORTED, "strftime_now(\"%s\") gives an empty or overlong text", f);
    char *p;
    HG_TRY(new_string(r, line, n, &p));
    memcpy(p, buf, n);
    *out = v_str(p, n);
    return HG_OK;
}

static hg_status call_function(rstate *r, int line, int fn, const args *a, value *out) {
    value p[3];
    char what[64];
    snprintf(what, sizeof what, "%s()", func_names[fn]);
    if (fn == F_RAISE) {
        static const char *const params[] = {"message", NULL};
        value msg;
        HG_TRY(bind(r, line, what, a, params, 1, p));
        HG_TRY(to_str(r, line, &p[0], &msg));
        return rfail(r, line, HG_ERR_INVALID, "raise_exception: %.*s", (int)(msg.s.n > 600 ? 600 : msg.s.n), msg.s.p);
    }
    if (fn == F_STRFTIME) {
        static const char *const params[] = {"format", NULL};
        HG_TRY(bind(r, line, what, a, params, 1, p));
        return strftime_now(r, line, &p[0], out);
    }
    if (fn == F_NAMESPACE) { /* namespace(dict?, name=value...) */
        vdict *d = ralloc(r, sizeof *d);
        if (!d) return nomem(r, line);
        memset(d, 0, sizeof *d);
        for (int i = 0; i < a->n; i++) {
            if (!a->kw[i] && (i > 0 || a->v[i].k != V_DICT))
                return rfail(r, line, HG_ERR_UNSUPPORTED,
                             "namespace() with positional arguments other than one dict is not implemented");
            const vdict *src = a->kw[i] ? NULL : a->v[i].d;
            for (size_t j = 0; j < (src ? src->n : 1); j++) {
                const char *k = src ? src->e[j].k : a->kw[i];
                size_t kn = src ? src->e[j].kn : a->kwn[i];
                if (kn && k[0] == '_')
                    return rfail(r, line, HG_ERR_INVALID, "namespace attribute '%.*s': names starting with '_' are refused",
                                 (int)(kn > SHOWN ? SHOWN : kn), k);
                HG_TRY(dict_put(r, line, d, k, kn, src ? src->e[j].v : a->v[i]));
            }
        }
        *out = v_of(V_NS);
        out->d = d;
        return HG_OK;
    }
    if (fn == F_RANGE) {
        static const char *const params[] = {"start", "stop", "step", NULL};
        int64_t b[3] = {0, 0, 1};
        HG_TRY(bind(r, line, what, a, params, 1, p));
        for (int k = 0; k < 3; k++)
            if (p[k].k != V_ABSENT && !as_int(&p[k], &b[k]))
                return rfail(r, line, HG_ERR_INVALID, "range() needs integers, not '%s'", type_name(&p[k]));
        if (p[1].k == V_ABSENT) b[1] = b[0], b[0] = 0;
        if (!b[2]) return rfail(r, line, HG_ERR_INVALID, "range() step must not be zero");
        uint64_t n = 0;
        if (b[2] > 0 && b[1] > b[0]) n = ((uint64_t)b[1] - (uint64_t)b[0] - 1) / (uint64_t)b[2] + 1;
        if (b[2] < 0 && b[1] < b[0]) n = ((uint64_t)b[0] - (uint64_t)b[1] - 1) / ((uint64_t)0 - (uint64_t)b[2]) + 1;
        if (n > MAX_RANGE) return rfail(r, line, HG_ERR_INVALID, "range() of more than %d items", MAX_RANGE);
        HG_TRY(new_list(r, line, (size_t)n, 0, out));
        for (uint64_t i = 0; i < n; i++) out->l->v[i] = v_int((int64_t)((uint64_t)b[0] + i * (uint64_t)b[2]));
        return HG_OK;
    }
    return rfail(r, line, HG_ERR_UNSUPPORTED, "function '%s' is not implemented", func_names[fn]);
}

static hg_status eval_call(rstate *r, const node *x, value *out) {
    const node *f = x->a;
    value fv, o;
    args a;
    if (f->kind == E_ATTR) { /* a method, or a callable attribute */
        HG_TRY(eval(r, f->a, &o));
        if (o.k == V_STR || o.k == V_DICT || o.k == V_LIST || o.k == V_LOOP) {
            HG_TRY(eval_args(r, x->b, &a));
            return method(r, f->line, &o, f->s, f->n, &a, out);
        }
        HG_TRY(get_attr(r, f->line, &o, f->s, f->n, &fv));
    } else {
        HG_TRY(eval(r, f, &fv));
    }
    if (fv.k == V_UNDEF) return undefined(r, x->line, &fv);
    if (fv.k != V_FUNC) return rfail(r, x->line, HG_ERR_INVALID, "'%s' object is not callable", type_name(&fv));
    HG_TRY(eval_args(r, x->b, &a));
    return call_function(r, x->line, (int)fv.i, &a, out);
}

/* ------------------------------------------------------------------------------------
 * Evaluation */

static hg_status eval(rstate *r, const node *x, value *out) {
    value a, b;
    int line = x->line;
    HG_TRY(spend(r, line, 16));
    switch (x->kind) {
    case E_STR: *out = v_str(x->s, x->n); return HG_OK;
    case E_INT: *out = v_int(x->i); return HG_OK;
    case E_BOOL: *out = v_bool((int)x->i); return HG_OK;
    case E_NONE: *out = v_of(V_NONE); return HG_OK;
    case E_NAME: *out = lookup(r, x->s, x->n); return HG_OK;
    case E_LIST:
    case E_TUPLE: {
        size_t n = 0, i = 0;
        for (const node *y = x->a; y; y = y->next) n++;
        HG_TRY(new_list(r, line, n, x->kind == E_TUPLE, &a));
        for (const node *y = x->a; y; y = y->next) HG_TRY(eval(r, y, &a.l->v[i++]));
        *out = a;
        return list_done(r, line, out);
    }
    case E_DICT: {
        vdict *d = ralloc(r, sizeof *d);
        if (!d) return nomem(r, line);
        memset(d, 0, sizeof *d);
        d->depth = 1;
        for (const node *k = x->a; k; k = k->next->next) {
            HG_TRY(eval(r, k, &a));
            HG_TRY(eval(r, k->next, &b));
            if (a.k != V_STR)
                return rfail(r, k->line, HG_ERR_UNSUPPORTED, "dict keys other than strings are not implemented");
            HG_TRY(dict_put(r, line, d, a.s.p, a.s.n, b));
            if (value_depth(&b) + 1 > d->depth) d->depth = value_depth(&b) + 1;
        }
        if (d->depth > MAX_VALUE_DEPTH)
            return rfail(r, line, HG_ERR_INVALID, "lists and dicts nested more than %d deep", MAX_VALUE_DEPTH);
        *out = v_of(V_DICT);
        out->d = d;
        return HG_OK;
    }
    case E_ATTR: HG_TRY(eval(r, x->a, &a)); return get_attr(r, line, &a, x->s, x->n, out);
    case E_ITEM:
        HG_TRY(eval(r, x->a, &a));
        HG_TRY(eval(r, x->b, &b));
        return get_item(r, line, &a, &b, out);
    case E_SLICE: {
        value bounds[3] = {v_of(V_ABSENT), v_of(V_ABSENT), v_of(V_ABSENT)};
        const node *parts[3] = {x->b, x->c, x->d};
        HG_TRY(eval(r, x->a, &a));
        for (int k = 0; k < 3; k++)
            if (parts[k]) HG_TRY(eval(r, parts[k], &bounds[k]));
        return get_slice(r, line, &a, bounds, out);
    }
    case E_BIN:
        HG_TRY(eval(r, x->a, &a));
        HG_TRY(eval(r, x->b, &b));
        return binop(r, line, x->op, &a, &b, out);
    case E_CMP: /* a < b < c is a < b and b < c */
        HG_TRY(eval(r, x->a, &a));
        for (const node *y = x->b; y; y = y->next, a = b) {
            int res = 0;
            HG_TRY(eval(r, y->a, &b));
            switch (y->op) {
            case OP_EQ: res = equal(r, &a, &b); break;
            case OP_NE: res = !equal(r, &a, &b); break;
            case OP_LT: HG_TRY(less(r, y->line, &a, &b, &res)); break;
            case OP_GT: HG_TRY(less(r, y->line, &b, &a, &res)); break;
            case OP_LE: HG_TRY(less(r, y->line, &b, &a, &res)); res = !res; break;
            case OP_GE: HG_TRY(less(r, y->line, &a, &b, &res)); res = !res; break;
            case OP_IN: HG_TRY(contains(r, y->line, &a, &b, &res)); break;
            default: HG_TRY(contains(r, y->line, &a, &b, &res)); res = !res; break;
            }
            HG_TRY(spend(r, y->line, 0)); /* equal() may have run out */
            if (!res) {
                *out = v_bool(0);
                return HG_OK;
            }
        }
        *out = v_bool(1);
        return HG_OK;
    case E_AND:
    case E_OR: /* Python's: the deciding operand itself */
        HG_TRY(eval(r, x->a, out));
        if (truthy(out) == (x->kind == E_OR)) return HG_OK;
        return eval(r, x->b, out);
    case E_NOT:
        HG_TRY(eval(r, x->a, &a));
        *out = v_bool(!truthy(&a));
        return HG_OK;
    case E_NEG:
    case E_POS: {
        int64_t i;
        HG_TRY(eval(r, x->a, &a));
        if (a.k == V_UNDEF) return undefined(r, line, &a);
        if (!as_int(&a, &i))
            return rfail(r, line, HG_ERR_INVALID, "bad operand type for unary %s: '%s'", x->kind == E_NEG ? "-" : "+",
                         type_name(&a));
        if (x->kind == E_NEG && i == INT64_MIN)
            return rfail(r, line, HG_ERR_UNSUPPORTED, "integer overflow (integers beyond 64 bits are not implemented)");
        *out = v_int(x->kind == E_NEG ? -i : i);
        return HG_OK;
    }
    case E_COND:
        HG_TRY(eval(r, x->b, &a));
        if (truthy(&a)) return eval(r, x->a, out);
        if (x->c) return eval(r, x->c, out);
        *out = v_undef("else", 4);
        return HG_OK;
    case E_FILTER:
    case E_TEST: {
        args av;
        int res = 0;
        HG_TRY(eval(r, x->a, &a));
        HG_TRY(eval_args(r, x->b, &av));
        if (x->kind == E_FILTER) return filter(r, x, &a, &av, out);
        HG_TRY(test(r, x, &a, &av, &res));
        *out = v_bool(res != (int)x->i);
        return HG_OK;
    }
    case E_CALL: return eval_call(r, x, out);
    default: return rfail(r, line, HG_ERR_INVALID, "internal error: node %d is not an expression", x->kind);
    }
}

/* ------------------------------------------------------------------------------------
 * Statements */

static hg_status exec_list(rstate *r, const node *s);

/* Binds target (a name, names, or ns.attr) to v. */
static hg_status assign(rstate *r, const node *target, const value *v) {
    int line = target->line;
    if (target->kind == E_NAME) return dict_put(r, line, &r->sc->vars, target->s, target->n, *v);
    if (target->kind == E_NSATTR) {
        value ns = lookup(r, target->s, target->n);
        if (ns.k == V_UNDEF) return undefined(r, line, &ns);
        if (ns.k != V_NS)
            return rfail(r, line, HG_ERR_INVALID, "cannot assign an attribute of a %s (only of a namespace)",
                         type_name(&ns));
        if (target->kwn && target->kw[0] == '_')
            return rfail(r, line, HG_ERR_INVALID, "namespace attribute '%.*s': names starting with '_' are refused",
                         (int)(target->kwn > SHOWN ? SHOWN : target->kwn), target->kw);
        return dict_put(r, line, ns.d, target->kw, target->kwn, *v);
    }
    size_t n = 0, i = 0; /* a tuple of names */
    const vlist *items;
    for (const node *y = target->a; y; y = y->next) n++;
    if (v->k != V_LIST && v->k != V_STR)
        return rfail(r, line, HG_ERR_INVALID, "cannot unpack a '%s' into %zu names", type_name(v), n);
    HG_TRY(iter_items(r, line, v, &items));
    if (items->n != n) return rfail(r, line, HG_ERR_INVALID, "cannot unpack %zu values into %zu names", items->n, n);
    for (const node *y = target->a; y; y = y->next) HG_TRY(dict_put(r, line, &r->sc->vars, y->s, y->n, items->v[i++]));
    return HG_OK;
}

static hg_status count_iteration(rstate *r, int line) {
    if (++r->iters > HG_CHAT_MAX_ITERATIONS)
        return rfail(r, line, HG_ERR_INVALID, "more than %d loop iterations", HG_CHAT_MAX_ITERATIONS);
    return HG_OK;
}

/* for target in iter [if cond]: body, with a fresh scope for each item (Jinja's loop
 * scoping: what the body sets is gone at the next item and after the loop). */
static hg_status exec_for(rstate *r, const node *s) {
    value it, lv = v_of(V_LOOP);
    const vlist *items;
    HG_TRY(eval(r, s->b, &it));
    HG_TRY(iter_items(r, s->b->line, &it, &items));
    scope sc = {.up = r->sc};
    r->sc = &sc;
    if (s->c) { /* the filter sees the target, not loop */
        value kept;
        size_t n = 0;
        HG_TRY(new_list(r, s->line, items->n, 0, &kept));
        for (size_t i = 0; i < items->n; i++) {
            value ok;
            HG_TRY(count_iteration(r, s->line));
            sc.vars.n = 0;
            HG_TRY(assign(r, s->a, &items->v[i]));
            HG_TRY(eval(r, s->c, &ok));
            if (truthy(&ok)) kept.l->v[n++] = items->v[i];
        }
        kept.l->n = n;
        kept.l->depth = items->depth;
        items = kept.l;
    }
    vloop *lp = ralloc(r, sizeof *lp); /* a value: it may outlive the loop in a namespace */
    if (!lp) return nomem(r, s->line);
    lp->items = items;
    lv.lp = lp;
    for (size_t i = 0; i < items->n; i++) {
        HG_TRY(count_iteration(r, s->line));
        sc.vars.n = 0;
        lp->i = i;
        HG_TRY(dict_put(r, s->line, &sc.vars, "loop", 4, lv));
        HG_TRY(assign(r, s->a, &items->v[i]));
        HG_TRY(exec_list(r, s->body));
        int brk = r->flow == FLOW_BREAK;
        r->flow = FLOW_NONE;
        if (brk) break;
    }
    if (!items->n) { /* else: in a scope of its own too */
        sc.vars.n = 0;
        HG_TRY(exec_list(r, s->orelse));
    }
    r->sc = sc.up;
    return HG_OK;
}

static hg_status exec(rstate *r, const node *s) {
    value v;
    HG_TRY(spend(r, s->line, 16));
    switch (s->kind) {
    case S_TEXT: return emit(r, s->line, s->s, s->n);
    case S_PRINT:
        HG_TRY(eval(r, s->a, &v));
        return emit_value(r, s->a->line, &v, 0, 0);
    case S_IF:
        for (const node *b = s; b; b = b->c) {
            HG_TRY(eval(r, b->a, &v));
            if (truthy(&v)) return exec_list(r, b->body);
        }
        return exec_list(r, s->orelse);
    case S_FOR: return exec_for(r, s);
    case S_SET:
        HG_TRY(eval(r, s->b, &v));
        return assign(r, s->a, &v);
    case S_SETBLOCK: { /* render the body, then take it back out of the output */
        size_t mark = r->on;
        char *p;
        HG_TRY(exec_list(r, s->body));
        HG_TRY(new_string(r, s->line, r->on - mark, &p));
        if (r->on > mark) memcpy(p, r->out + mark, r->on - mark); /* no output yet: r->out is NULL */
        v = v_str(p, r->on - mark);
        r->on = mark;
        return assign(r, s->a, &v);
    }
    case S_BREAK: r->flow = FLOW_BREAK; return HG_OK;
    case S_CONTINUE: r->flow = FLOW_CONTINUE; return HG_OK;
    case S_GENERATION: return exec_list(r, s->body);
    default: return rfail(r, s->line, HG_ERR_INVALID, "internal error: node %d is not a statement", s->kind);
    }
}

static hg_status exec_list(rstate *r, const node *s) {
    for (; s && r->flow == FLOW_NONE; s = s->next) HG_TRY(exec(r, s));
    return HG_OK;
}

/* ------------------------------------------------------------------------------------
 * Render */

static hg_status check_text(const hg_chat_template *t, const char *s, const char *what, int i) {
    size_t n = strlen(s), ok = utf8_valid_prefix((const uint8_t *)s, n);
    if (ok == n) return HG_OK;
    if (i >= 0)
        return hg_fail(HG_ERR_INVALID, "%s: message %d's %s is not valid UTF-8 (byte %zu)", t->where, i, what, ok);
    return hg_fail(HG_ERR_INVALID, "%s: %s is not valid UTF-8 (byte %zu)", t->where, what, ok);
}

/* The variables transformers passes a template for a tool-free conversation. */
static hg_status set_globals(rstate *r, const hg_chat_msg *msgs, int n, const hg_chat_vars *vars) {
    vdict *g = &r->sc->vars;
    value m, f = v_of(V_FUNC);
    HG_TRY(new_list(r, 0, (size_t)n, 0, &m));
    m.l->depth = 2;
    for (int i = 0; i < n; i++) {
        vdict *d = ralloc(r, sizeof *d);
        if (!d) return nomem(r, 0);
        memset(d, 0, sizeof *d);
        d->depth = 1;
        if (msgs[i].role) HG_TRY(dict_put(r, 0, d, "role", 4, v_str(msgs[i].role, strlen(msgs[i].role))));
        if (msgs[i].content) HG_TRY(dict_put(r, 0, d, "content", 7, v_str(msgs[i].content, strlen(msgs[i].content))));
        m.l->v[i] = v_of(V_DICT);
        m.l->v[i].d = d;
    }
    HG_TRY(dict_put(r, 0, g, "messages", 8, m));
    HG_TRY(dict_put(r, 0, g, "tools", 5, v_of(V_NONE)));
    HG_TRY(dict_put(r, 0, g, "documents", 9, v_of(V_NONE)));
    HG_TRY(dict_put(r, 0, g, "add_generation_prompt", 21, v_bool(vars->add_generation_prompt)));
    if (vars->bos_token) HG_TRY(dict_put(r, 0, g, "bos_token", 9, v_str(vars->bos_token, strlen(vars->bos_token))));
    if (vars->eos_token) HG_TRY(dict_put(r, 0, g, "eos_token", 9, v_str(vars->eos_token, strlen(vars->eos_token))));
    if (vars->date_string) HG_TRY(dict_put(r, 0, g, "date_string", 11, v_str(vars->date_string, strlen(vars->date_string))));
    for (int k = 0; k < F_COUNT; k++) {
        f.i = k;
        HG_TRY(dict_put(r, 0, g, func_names[k], strlen(func_names[k]), f));
    }
    return HG_OK;
}

hg_status hg_chat_template_render(const hg_chat_template *t, const hg_chat_msg *msgs, int n,
                                  const hg_chat_vars *vars, char **out, size_t *out_len) {
    if (!out || !out_len) return hg_fail(HG_ERR_INVALID, "hg_chat_template_render: out or out_len is NULL");
    *out = NULL, *out_len = 0;
    if (!t) return hg_fail(HG_ERR_INVALID, "hg_chat_template_render: the template is NULL");
    if (n < 0 || (n && !msgs)) return hg_fail(HG_ERR_INVALID, "%s: %d messages (or none given)", t->where, n);
    if (!n) return hg_fail(HG_ERR_INVALID, "%s: cannot render an empty conversation", t->where);
    static const hg_chat_vars no_vars;
    if (!vars) vars = &no_vars;
    for (int i = 0; i < n; i++) {
        if (msgs[i].role) HG_TRY(check_text(t, msgs[i].role, "role", i));
        if (msgs[i].content) HG_TRY(check_text(t, msgs[i].content, "content", i));
    }
    if (vars->bos_token) HG_TRY(check_text(t, vars->bos_token, "bos_token", -1));
    if (vars->eos_token) HG_TRY(check_text(t, vars->eos_token, "eos_token", -1));
    if (vars->date_string) HG_TRY(check_text(t, vars->date_string, "date_string", -1));

    scope root = {0};
    rstate r = {.t = t, .sc = &root};
    r.a.limit = HG_CHAT_MAX_MEMORY;
    r.now = vars->now ? (time_t)vars->now : time(NULL);
    hg_status st = set_globals(&r, msgs, n, vars);
    if (st == HG_OK) st = exec_list(&r, t->body);
    if (st == HG_OK && !r.out) st = emit(&r, 0, "", 0);
    arena_free(&r.a);
    if (st != HG_OK) {
        free(r.out);
        return st;
    }
    r.out[r.on] = '\0';
    *out = r.out, *out_len = r.on;
    return HG_OK;
}
