/* Normalizers: NFC (libutf8proc, only where the text needs it), Prepend, Replace. */
#include "data/normalize.h"

#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "core/error.h"
#include "data/utf8.h"

hg_status norm_add(tok_norm *n, norm_kind kind, const void *a, size_t na, const void *b, size_t nb,
                   const char *where) {
    if (n->n_steps == NORM_MAX_STEPS)
        return hg_fail(HG_ERR_UNSUPPORTED, "%s: more than %d normalizer steps", where, NORM_MAX_STEPS);
    norm_step *s = &n->step[n->n_steps];
    memset(s, 0, sizeof *s);
    s->kind = kind;
    s->a = malloc(na + 1);
    s->b = malloc(nb + 1);
    if (!s->a || !s->b) {
        free(s->a);
        free(s->b);
        return hg_fail(HG_ERR_NOMEM, "%s: out of memory", where);
    }
    if (na) memcpy(s->a, a, na);
    if (nb) memcpy(s->b, b, nb);
    s->na = na;
    s->nb = nb;
    n->n_steps++;
    return HG_OK;
}

void norm_free(tok_norm *n) {
    for (int i = 0; i < n->n_steps; i++) {
        free(n->step[i].a);
        free(n->step[i].b);
    }
    n->n_steps = 0;
}

size_t norm_max_len(const tok_norm *n, size_t len) {
    for (int i = 0; i < n->n_steps; i++) {
        const norm_step *s = &n->step[i];
        if (s->kind == NORM_NFC) len *= 3; /* NFC lengthens UTF-8 at most 3 times (U+1D160) */
        else if (s->kind == NORM_PREPEND) len += s->na;
        else if (s->nb > s->na) len = len / s->na * s->nb + len % s->na;
    }
    return len;
}

/* ------------------------------------------------------------------- NFC */

/* Code point ranges whose characters have combining class 0, NFC_Quick_Check Yes and
 * are never the second character of a canonical composition, checked against
 * Python's unicodedata (Unicode 14) when written: text made only of them is its own
 * NFC, and a boundary before one of them is a boundary of NFC. Sorted. */
static const uint32_t nfc_stable_ranges[][2] = {
    {0x0000, 0x02FF},   {0x0370, 0x0373},   {0x0400, 0x0482},   {0x048A, 0x052F},   {0x05D0, 0x05EA},
    {0x0620, 0x064A},   {0x200B, 0x200F},   {0x2010, 0x2027},   {0x2030, 0x205E},   {0x2060, 0x2064},
    {0x20A0, 0x20C0},   {0x2100, 0x2125},   {0x2190, 0x2328},   {0x232B, 0x24FF},   {0x2500, 0x2ADB},
    {0x2ADD, 0x2BFF},   {0x3000, 0x3029},   {0x3030, 0x303F},   {0x3041, 0x3096},   {0x30A1, 0x30FA},
    {0x30FC, 0x30FF},   {0x3400, 0x4DBF},   {0x4E00, 0x9FFF},   {0xAC00, 0xD7A3},   {0xFE00, 0xFE0F},
    {0xFF01, 0xFFEE},   {0x1F000, 0x1FAFF}, {0xE0020, 0xE007F},
};

int norm_nfc_stable(uint32_t cp) {
    size_t lo = 0, hi = sizeof nfc_stable_ranges / sizeof nfc_stable_ranges[0];
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (cp < nfc_stable_ranges[mid][0]) hi = mid;
        else if (cp > nfc_stable_ranges[mid][1]) lo = mid + 1;
        else return 1;
    }
    return 0;
}

static uint32_t utf8_cp(const uint8_t *p, int k) {
    if (k == 1) return p[0];
    if (k == 2) return (uint32_t)(p[0] & 0x1F) << 6 | (p[1] & 0x3F);
    if (k == 3) return (uint32_t)(p[0] & 0x0F) << 12 | (uint32_t)(p[1] & 0x3F) << 6 | (p[2] & 0x3F);
    return (uint32_t)(p[0] & 0x07) << 18 | (uint32_t)(p[1] & 0x3F) << 12 | (uint32_t)(p[2] & 0x3F) << 6 | (p[3] & 0x3F);
}

typedef struct nfc_out {
    uint8_t *buf;
    size_t n, cap;
} nfc_out;

static int out_put(nfc_out *o, const uint8_t *p, size_t n) {
    if (o->n + n > o->cap) {
        size_t cap = 2 * o->cap + n;
        uint8_t *b = realloc(o->buf, cap);
        if (!b) return 0;
        o->buf = b;
        o->cap = cap;
    }
    memcpy(o->buf + o->n, p, n);
    o->n += n;
    return 1;
}

hg_status norm_nfc(const uint8_t *text, size_t len, const uint8_t **out, size_t *out_len, uint8_t **owned) {
    *out = text;
    *out_len = len;
    *owned = NULL;
    /* Every code point below U+0300 is stable, and those are exactly the characters
     * whose UTF-8 bytes are all below 0xCC. */
    size_t i = 0;
    while (i < len && text[i] < 0xCC) i++;
    if (i == len) return HG_OK;
    /* Back to the start of the character before the one holding byte i: it may compose
     * with what follows. */
    while (i > 0 && (text[i] & 0xC0) == 0x80) i--;
    if (i > 0) i--;
    while (i > 0 && (text[i] & 0xC0) == 0x80) i--;
    nfc_out o = {0};
    size_t copied = 0, prev = SIZE_MAX; /* prev: start of the last stable character */
    hg_status s = HG_OK;
    while (i < len && s == HG_OK) {
        int k = utf8_seq_len(text + i, len - i);
        if (!k || norm_nfc_stable(utf8_cp(text + i, k))) {
            prev = k ? i : SIZE_MAX;
            i += k ? (size_t)k : 1;
            continue;
        }
        /* An unstable run, with the stable character before it (it may compose). */
        size_t a = prev != SIZE_MAX && prev >= copied ? prev : i, b = i;
        while (b < len) {
            int kb = utf8_seq_len(text + b, len - b);
            if (!kb || norm_nfc_stable(utf8_cp(text + b, kb))) break;
            b += (size_t)kb;
        }
        utf8proc_uint8_t *dst = NULL;
        utf8proc_ssize_t m = utf8proc_map(text + a, (utf8proc_ssize_t)(b - a), &dst, UTF8PROC_STABLE | UTF8PROC_COMPOSE);
        if (m < 0) s = hg_fail(HG_ERR_BACKEND, "text: byte %zu: utf8proc: %s", a, utf8proc_errmsg(m));
        else if (!out_put(&o, text + copied, a - copied) || !out_put(&o, dst, (size_t)m))
            s = hg_fail(HG_ERR_NOMEM, "text: out of memory normalizing %zu bytes", len);
        free(dst);
        copied = i = b;
        prev = SIZE_MAX;
    }
    if (s == HG_OK && copied == 0 && !o.buf) return HG_OK; /* nothing unstable */
    if (s == HG_OK && !out_put(&o, text + copied, len - copied))
        s = hg_fail(HG_ERR_NOMEM, "text: out of memory normalizing %zu bytes", len);
    if (s != HG_OK) {
        free(o.buf);
        return s;
    }
    *out = *owned = o.buf;
    *out_len = o.n;
    return HG_OK;
}

/* ---------------------------------------------------------------- others */

static hg_status norm_replace(const norm_step *st, const uint8_t *text, size_t len, uint8_t **res, size_t *res_len) {
    *res = NULL;
    size_t count = 0;
    for (size_t i = 0; i + st->na <= len;) {
        if (!memcmp(text + i, st->a, st->na)) {
            count++;
            i += st->na;
        } else {
            i++;
        }
    }
    if (!count) return HG_OK;
    size_t n = len - count * st->na + count * st->nb;
    uint8_t *o = malloc(n ? n : 1);
    if (!o) return hg_fail(HG_ERR_NOMEM, "text: out of memory normalizing %zu bytes", len);
    size_t k = 0, i = 0;
    while (i < len) {
        if (i + st->na <= len && !memcmp(text + i, st->a, st->na)) {
            memcpy(o + k, st->b, st->nb);
            k += st->nb;
            i += st->na;
        } else {
            o[k++] = text[i++];
        }
    }
    *res = o;
    *res_len = k;
    return HG_OK;
}

hg_status norm_apply(const tok_norm *n, const uint8_t *text, size_t len, const uint8_t **out, size_t *out_len,
                     uint8_t **owned) {
    const uint8_t *cur = text;
    size_t cur_len = len;
    uint8_t *cur_owned = NULL;
    for (int i = 0; i < n->n_steps; i++) {
        const norm_step *st = &n->step[i];
        uint8_t *res = NULL;
        const uint8_t *res_view = NULL;
        size_t res_len = 0;
        hg_status s = HG_OK;
        if (st->kind == NORM_NFC) {
            s = norm_nfc(cur, cur_len, &res_view, &res_len, &res);
        } else if (st->kind == NORM_PREPEND) {
            if (cur_len) {
                res = malloc(cur_len + st->na);
                if (!res) s = hg_fail(HG_ERR_NOMEM, "text: out of memory normalizing %zu bytes", len);
                else {
                    memcpy(res, st->a, st->na);
                    memcpy(res + st->na, cur, cur_len);
                    res_len = cur_len + st->na;
                }
            }
        } else {
            s = norm_replace(st, cur, cur_len, &res, &res_len);
        }
        if (s != HG_OK) {
            free(cur_owned);
            return s;
        }
        if (res) {
            free(cur_owned);
            cur = cur_owned = res;
            cur_len = res_len;
        }
    }
    *out = cur;
    *out_len = cur_len;
    *owned = cur_owned;
    return HG_OK;
}
