/* Pre-tokenization with PCRE2: steps of patterns, each isolating its matches. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "data/pretok.h"

#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "data/utf8.h"

static const char gpt2_pattern[] =
    "'(?:[sdmt]|ll|ve|re)"
    "| ?\\p{L}+"
    "| ?\\p{N}+"
    "| ?[^\\p{White_Space}\\p{L}\\p{N}]+"
    "|\\p{White_Space}+(?!\\P{White_Space})"
    "|\\p{White_Space}+";

void pretok_init_empty(pretok *p) { memset(p, 0, sizeof *p); }

/* options: PCRE2 compile options on top of UTF. */
static hg_status pretok_push(pretok *p, const char *pattern, size_t len, uint32_t options, int anchored,
                             const char *where) {
    if (p->n_steps == PRETOK_MAX_STEPS)
        return hg_fail(HG_ERR_UNSUPPORTED, "%s: more than %d pre-tokenizer patterns", where, PRETOK_MAX_STEPS);
    int err;
    PCRE2_SIZE at;
    pcre2_code *code = pcre2_compile((PCRE2_SPTR)pattern, len, PCRE2_UTF | options, &err, &at, NULL);
    if (!code) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(err, msg, sizeof msg);
        return hg_fail(HG_ERR_FORMAT, "%s: PCRE2 rejected the pattern at offset %zu: %s", where, (size_t)at,
                       (char *)msg);
    }
    pretok_step *st = &p->step[p->n_steps++];
    st->code = code;
    st->jit = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
    st->anchored = anchored;
    return HG_OK;
}

hg_status pretok_add_gpt2(pretok *p) {
    /* Anchored, so that each match starts exactly where the last one ended. */
    return pretok_push(p, gpt2_pattern, PCRE2_ZERO_TERMINATED, PCRE2_ANCHORED, 1, "pre-tokenizer (GPT-2's pattern)");
}

hg_status pretok_init(pretok *p) {
    pretok_init_empty(p);
    return pretok_add_gpt2(p);
}

hg_status pretok_add(pretok *p, const char *pattern, size_t len, int literal, const char *where) {
    return pretok_add_split(p, pattern, len, literal, PRETOK_ISOLATED, where);
}

hg_status pretok_add_split(pretok *p, const char *pattern, size_t len, int literal, pretok_behavior behavior,
                           const char *where) {
    /* Oniguruma's Ruby syntax: ^ and $ match at line ends. */
    HG_TRY(pretok_push(p, pattern, len, literal ? PCRE2_LITERAL : PCRE2_MULTILINE, 0, where));
    p->step[p->n_steps - 1].behavior = behavior;
    return HG_OK;
}

void pretok_free(pretok *p) {
    for (int i = 0; i < p->n_steps; i++) pcre2_code_free(p->step[i].code);
    p->n_steps = 0;
    p->may_drop = 0;
}

/* ------------------------------------------------------------- translate */

static int is_hex(char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }
static int is_alnum(char c) { return is_hex(c) || (c >= 'g' && c <= 'z') || (c >= 'G' && c <= 'Z'); }

char *pretok_translate(const char *in, size_t n, const char **why, size_t *at) {
    /* The longest rewrite, "[^\p{L}\p{M}\p{Nd}\p{Pc}]", is 25 bytes for 2. */
    char *out = malloc(16 * n + 1);
    if (!out) {
        *why = "out of memory";
        *at = 0;
        return NULL;
    }
    size_t o = 0, i = 0, body = 0;
    int in_class = 0;
#define PUT(s) (memcpy(out + o, s, sizeof s - 1), o += sizeof s - 1)
#define FAIL(msg)    \
    do {             \
        *why = msg;  \
        *at = i;     \
        free(out);   \
        return NULL; \
    } while (0)
    while (i < n) {
        char c = in[i];
        if (c == '\\') {
            if (i + 1 >= n) FAIL("a trailing backslash");
            char d = in[i + 1];
            switch (d) {
            case 's': PUT("\\p{White_Space}"); break;
            case 'S': PUT("\\P{White_Space}"); break;
            case 'd': PUT("\\p{Nd}"); break;
            case 'D': PUT("\\P{Nd}"); break;
            case 'w':
                if (in_class) PUT("\\p{L}\\p{M}\\p{Nd}\\p{Pc}");
                else PUT("[\\p{L}\\p{M}\\p{Nd}\\p{Pc}]");
                break;
            case 'W':
                if (in_class) FAIL("\\W inside a character class is not supported");
                PUT("[^\\p{L}\\p{M}\\p{Nd}\\p{Pc}]");
                break;
            case 'h': /* Oniguruma: a hexadecimal digit (PCRE2: horizontal space) */
                if (in_class) PUT("0-9a-fA-F");
                else PUT("[0-9a-fA-F]");
                break;
            case 'H':
                if (in_class) FAIL("\\H inside a character class is not supported");
                PUT("[^0-9a-fA-F]");
                break;
            case 'v': PUT("\\x0B"); break; /* Oniguruma: vertical tab (PCRE2: vertical space) */
            case 'u':
                if (i + 6 > n || !is_hex(in[i + 2]) || !is_hex(in[i + 3]) || !is_hex(in[i + 4]) || !is_hex(in[i + 5]))
                    FAIL("\\u wants four hexadecimal digits");
                PUT("\\x{");
                memcpy(out + o, in + i + 2, 4);
                o += 4;
                out[o++] = '}';
                i += 4;
                break;
            case 'p': case 'P': case 't': case 'n': case 'r': case 'f': case 'e': case 'a':
            case 'A': case 'z': case 'Z': case 'G': case 'x': case '0':
                out[o++] = c;
                out[o++] = d;
                break;
            default:
                if (is_alnum(d) || (unsigned char)d >= 0x80)
                    FAIL("this escape is not supported (Oniguruma and PCRE2 read it differently)");
                out[o++] = c;
                out[o++] = d;
            }
            i += 2;
            continue;
        }
        if (in_class) {
            if (c == '[') FAIL("a '[' inside a character class (nested classes, POSIX brackets) is not supported");
            if (c == '&' && i + 1 < n && in[i + 1] == '&') FAIL("class intersection && is not supported");
            if (c == ']' && i > body) in_class = 0;
            out[o++] = c;
            i++;
            continue;
        }
        if (c == '[') {
            in_class = 1;
            out[o++] = c;
            i++;
            if (i < n && in[i] == '^') out[o++] = in[i++];
            body = i;
            continue;
        }
        if (c == '(' && i + 1 < n && in[i + 1] == '?') {
            for (size_t j = i + 2; j < n && (in[j] == 'i' || in[j] == 'm' || in[j] == 'x' || in[j] == '-'); j++)
                if (in[j] == 'm') FAIL("(?m) is not supported (in Oniguruma it lets . match a newline)");
        }
        if (c == '{' && i + 1 < n && in[i + 1] == ',') { /* Oniguruma's {,n} is {0,n} */
            size_t j = i + 2;
            while (j < n && in[j] >= '0' && in[j] <= '9') j++;
            if (j > i + 2 && j < n && in[j] == '}') {
                PUT("{0");
                i++;
                continue;
            }
        }
        out[o++] = c;
        i++;
    }
    if (in_class) FAIL("an unclosed '['");
#undef PUT
#undef FAIL
    out[o] = 0;
    return out;
}

/* ------------------------------------------------------------------ iterate */

hg_status pretok_iter_init(pretok_iter *it, const pretok *p, const uint8_t *subject, size_t n) {
    it->p = p;
    it->subject = subject;
    it->n = n;
    it->pos = 0;
    it->depth = 0;
    it->failed = 0;
    it->failed_at = 0;
    memset(&it->lv[0], 0, sizeof it->lv[0]);
    it->lv[0].end = n;
    it->match = pcre2_match_data_create(1, NULL);
    if (!it->match) return hg_fail(HG_ERR_NOMEM, "pre-tokenizer: out of memory");
    return HG_OK;
}

void pretok_iter_free(pretok_iter *it) {
    pcre2_match_data_free(it->match);
    it->match = NULL;
}

hg_status pretok_iter_error(const pretok_iter *it) {
    if (!it->failed) return HG_OK;
    return hg_fail(HG_ERR_INVALID, "text: byte %zu: the pre-tokenizer's pattern could not be matched (PCRE2 error %d)",
                   it->failed_at, it->failed);
}

static int step_match(const pretok_step *st, pcre2_match_data *md, const uint8_t *sub, size_t len, size_t from) {
    int rc = st->jit ? pcre2_jit_match(st->code, sub, len, from, 0, md, NULL) : PCRE2_ERROR_JIT_BADOPTION;
    if (rc < 0 && rc != PCRE2_ERROR_NOMATCH)
        /* JIT out of stack on a pathological run: the interpreter keeps its frames on
         * the heap. */
        rc = pcre2_match(st->code, sub, len, from, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, md, NULL);
    return rc;
}

static size_t char_len(const uint8_t *p, size_t n) {
    int k = utf8_seq_len(p, n);
    return k ? (size_t)k : 1;
}

/* The next piece of level k within its piece, as offsets into the subject. Follows
 * the tokenizers package (Rust find_iter): an empty match splits but is no piece, and
 * one right where the last match ended is skipped by moving the search one character
 * on. What becomes a piece follows the step's behavior: with Isolated, each match and
 * each gap (the text before a match, or after the last one); with Removed, the gaps;
 * with Removed inverted, the matches; with MergedWithPrevious, each gap joined to the
 * match after it, and a match right after a match (or at the start) alone. */
static int level_next(pretok_iter *it, int k, size_t *a, size_t *b) {
    pretok_level *L = &it->lv[k];
    const pretok_step *st = &it->p->step[k];
    const uint8_t *sub = it->subject + L->start;
    size_t len = L->end - L->start;
    if (L->has_pend) {
        L->has_pend = 0;
        *a = L->start + L->pend_s;
        *b = L->start + L->pend_e;
        return 1;
    }
    if (st->anchored) {
        if (L->pos >= len) return 0;
        int rc = step_match(st, it->match, sub, len, L->pos);
        size_t e = rc > 0 ? pcre2_get_ovector_pointer(it->match)[1] : 0;
        /* The pattern matches every character; one character alone is only a safety net. */
        if (e <= L->pos) e = L->pos + char_len(sub + L->pos, len - L->pos);
        *a = L->start + L->pos;
        *b = L->start + e;
        L->pos = e;
        return 1;
    }
    while (!L->done) {
        int rc = L->search > len ? PCRE2_ERROR_NOMATCH : step_match(st, it->match, sub, len, L->search);
        if (rc < 0 && rc != PCRE2_ERROR_NOMATCH) {
            it->failed = rc;
            it->failed_at = L->start + L->search;
            return 0;
        }
        if (rc < 0) {
            L->done = 1;
            break;
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(it->match);
        size_t s = ov[0], e = ov[1], gap = L->pos;
        if (s == e && L->has_last && L->last_match_end == e) {
            L->search = e < len ? e + char_len(sub + e, len - e) : len + 1;
            continue;
        }
        L->search = e;
        L->last_match_end = e;
        L->has_last = 1;
        L->pos = e;
        /* [gap, s) is the text before the match, [s, e) the match */
        switch (st->behavior) {
        case PRETOK_ISOLATED:
            if (s > gap) {
                *a = L->start + gap;
                *b = L->start + s;
                if (e > s) {
                    L->pend_s = s;
                    L->pend_e = e;
                    L->has_pend = 1;
                }
                return 1;
            }
            break;
        case PRETOK_REMOVED:
            if (s > gap) {
                *a = L->start + gap;
                *b = L->start + s;
                return 1;
            }
            continue;
        case PRETOK_MATCHES_ONLY:
            break;
        case PRETOK_MERGED_PREV:
            if (s > gap) {
                *a = L->start + gap;
                *b = L->start + e;
                return 1;
            }
            break;
        }
        if (e > s) {
            *a = L->start + s;
            *b = L->start + e;
            return 1;
        }
    }
    if (L->pos < len && st->behavior != PRETOK_MATCHES_ONLY) {
        *a = L->start + L->pos;
        *b = L->start + len;
        L->pos = len;
        return 1;
    }
    return 0;
}

int pretok_iter_next(pretok_iter *it, size_t *start, size_t *end) {
    const pretok *p = it->p;
    if (p->n_steps == 0) {
        if (it->pos >= it->n) return 0;
        *start = 0;
        *end = it->pos = it->n;
        return 1;
    }
    for (;;) {
        int k = it->depth;
        size_t a, b;
        if (level_next(it, k, &a, &b)) {
            if (k == p->n_steps - 1) {
                *start = a;
                *end = b;
                return 1;
            }
            pretok_level *L = &it->lv[++it->depth];
            memset(L, 0, sizeof *L);
            L->start = a;
            L->end = b;
        } else {
            if (k == 0 || it->failed) return 0;
            it->depth--;
        }
    }
}

hg_status pretok_subject(const uint8_t *text, size_t len, const uint8_t **subject, uint8_t **owned) {
    *subject = text;
    *owned = NULL;
    size_t valid = utf8_valid_prefix(text, len);
    if (valid == len) return HG_OK;
    uint8_t *copy = malloc(len);
    if (!copy) return hg_fail(HG_ERR_NOMEM, "out of memory for %zu bytes of text", len);
    memcpy(copy, text, len);
    for (size_t i = valid; i < len;) {
        int k = utf8_seq_len(text + i, len - i);
        if (!k) copy[i] = '#';
        i += k ? (size_t)k : 1;
    }
    *subject = *owned = copy;
    return HG_OK;
}
