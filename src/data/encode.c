/* The encoder, in the tokenizers package's order: added tokens matched in the raw
 * text; the normalizer on each stretch between them; added tokens matched in the
 * normalized text; pre-tokenization; BPE of each piece. */
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "data/tokenizer.h"
#include "data/utf8.h"

/* ---------------------------------------------------------------- pieces */

static hg_status piece_bpe(const hg_tokenizer *t, int32_t *out, size_t n, size_t *k) {
    if (n <= BPE_SMALL_MAX) {
        *k = bpe_merge_small(t, out, n, INT32_MAX);
        return HG_OK;
    }
    return bpe_merge_large(t, out, n, INT32_MAX, k);
}

/* Byte-level: the piece's bytes are the first symbols. */
static hg_status piece_bytes(const hg_tokenizer *t, const uint8_t *p, size_t n, int32_t *out, size_t *k) {
    if (n == 1) {
        out[0] = t->byte_id[p[0]];
        *k = 1;
        return HG_OK;
    }
    if (t->mode == TOK_MODE_RANKS || t->ignore_merges) {
        int32_t id = bytes_table_get(&t->by_bytes, p, n);
        if (id >= 0) {
            out[0] = id;
            *k = 1;
            return HG_OK;
        }
    }
    for (size_t i = 0; i < n; i++) out[i] = t->byte_id[p[i]];
    return piece_bpe(t, out, n, k);
}

/* Sentencepiece style: a character that is a token is that token; otherwise its
 * bytes' <0xNN> tokens when all exist, else the unk token (runs of them fused with
 * fuse_unk), else nothing. A pending unk is written when the next character that is a
 * token comes, after any byte tokens in between, as the tokenizers package does. */
static hg_status piece_chars(const hg_tokenizer *t, const uint8_t *p, size_t n, int32_t *out, size_t *k) {
    if (t->ignore_merges) {
        int32_t id = bytes_table_get(&t->by_bytes, p, n);
        if (id >= 0) {
            out[0] = id;
            *k = 1;
            return HG_OK;
        }
    }
    size_t m = 0;
    int pending = 0;
    for (size_t i = 0; i < n;) {
        int cl = utf8_seq_len(p + i, n - i);
        size_t c = cl ? (size_t)cl : 1;
        int32_t id = bytes_table_get(&t->by_bytes, p + i, c);
        if (id >= 0) {
            if (pending) out[m++] = t->unk;
            pending = 0;
            out[m++] = id;
        } else {
            int all = 1;
            for (size_t j = 0; j < c; j++) all &= t->byte_id[p[i + j]] >= 0;
            if (all) {
                for (size_t j = 0; j < c; j++) out[m++] = t->byte_id[p[i + j]];
            } else if (t->unk >= 0) {
                if (pending && !t->fuse_unk) out[m++] = t->unk;
                pending = 1;
            }
        }
        i += c;
    }
    if (pending) out[m++] = t->unk;
    if (m == 0) {
        *k = 0;
        return HG_OK;
    }
    return piece_bpe(t, out, m, k);
}

hg_status tok_encode_ordinary(const hg_tokenizer *t, const uint8_t *text, size_t len, int at_start, int32_t *ids,
                              size_t cap, size_t *n_ids) {
    *n_ids = 0;
    if (!len) return HG_OK;
    uint8_t *spaced = NULL;
    if (t->meta_prepend && (t->meta_prepend == 2 || at_start) && text[0] != ' ') {
        /* Metaspace: a space (its "▁") before the text */
        spaced = malloc(len + 1);
        if (!spaced) return hg_fail(HG_ERR_NOMEM, "text: out of memory for %zu bytes", len);
        spaced[0] = ' ';
        memcpy(spaced + 1, text, len);
        text = spaced;
        len++;
    }
    /* The patterns run on valid UTF-8. Each invalid byte stands in as '#', a character
     * that is neither letter, number nor space, as Python's surrogateescape makes it;
     * BPE then runs on the original bytes. */
    const uint8_t *subject;
    uint8_t *subst = NULL;
    hg_status s = pretok_subject(text, len, &subject, &subst);
    pretok_iter it;
    if (s == HG_OK) s = pretok_iter_init(&it, &t->pre, subject, len);
    else it.match = NULL;
    size_t count = 0, a, b;
    while (s == HG_OK && pretok_iter_next(&it, &a, &b)) {
        if (b - a > cap - count) {
            s = hg_fail(HG_ERR_INVALID, "cap: %zu ids of room are not enough; give hg_tokenizer_max_ids", cap);
            break;
        }
        size_t k;
        s = t->chars ? piece_chars(t, text + a, b - a, ids + count, &k) : piece_bytes(t, text + a, b - a, ids + count, &k);
        count += k;
    }
    if (s == HG_OK) s = pretok_iter_error(&it);
    if (it.match) pretok_iter_free(&it);
    free(subst);
    free(spaced);
    *n_ids = count;
    return s;
}

/* ----------------------------------------------------------- added tokens */

typedef struct enc_state {
    const hg_tokenizer *t;
    int32_t *ids;
    size_t cap, n;
    int allow_special;
} enc_state;

static hg_status enc_pass(enc_state *e, int pass, const uint8_t *text, size_t len, int at_start);

/* A stretch of text between added tokens of the pass. */
static hg_status enc_gap(enc_state *e, int pass, const uint8_t *text, size_t len, int at_start) {
    if (!len) return HG_OK;
    if (pass == 1) {
        size_t k;
        HG_TRY(tok_encode_ordinary(e->t, text, len, at_start, e->ids + e->n, e->cap - e->n, &k));
        e->n += k;
        return HG_OK;
    }
    if (!e->t->norm.n_steps) return enc_pass(e, 1, text, len, at_start);
    const uint8_t *norm;
    size_t n;
    uint8_t *owned;
    HG_TRY(norm_apply(&e->t->norm, text, len, &norm, &n, &owned));
    hg_status s = enc_pass(e, 1, norm, n, at_start);
    free(owned);
    return s;
}

static hg_status enc_pass(enc_state *e, int pass, const uint8_t *text, size_t len, int at_start) {
    const hg_tokenizer *t = e->t;
    const tok_added_set *set = &t->added[pass];
    if (!set->n || (!set->has_plain && !e->allow_special)) return enc_gap(e, pass, text, len, at_start);
    size_t seg = 0, p = 0;
    while (p < len) {
        size_t q = p;
        if (set->n_first == 1) {
            const uint8_t *f = memchr(text + p, set->only_first, len - p);
            if (!f) break;
            q = (size_t)(f - text);
        } else {
            while (q < len && !(set->first[text[q] >> 3] & (1u << (text[q] & 7)))) q++;
            if (q == len) break;
        }
        size_t m;
        int32_t id = tok_added_match(t, set, text + q, len - q, &m);
        if (id < 0) {
            p = q + 1;
            continue;
        }
        p = q + m;
        /* A special token the caller does not allow stays text, as does a single-word
         * one inside a word, and the search goes on after it. */
        if ((t->flags[id] & TOK_SPECIAL) && !e->allow_special) continue;
        if ((t->flags[id] & (TOK_LSTRIP | TOK_RSTRIP | TOK_SINGLE_WORD)) &&
            !tok_added_rules(t, id, text, len, seg, &q, &p))
            continue;
        HG_TRY(enc_gap(e, pass, text + seg, q - seg, at_start && seg == 0));
        if (e->n >= e->cap)
            return hg_fail(HG_ERR_INVALID, "cap: %zu ids of room are not enough; give hg_tokenizer_max_ids", e->cap);
        e->ids[e->n++] = id;
        seg = p;
    }
    return enc_gap(e, pass, text + seg, len - seg, at_start && seg == 0);
}

size_t hg_tokenizer_max_ids(const hg_tokenizer *t, size_t len) {
    if (!t->norm.n_steps && !t->meta_prepend) return len;
    if (len > SIZE_MAX / 64) return SIZE_MAX;
    /* Each added token takes at least one byte for its one id; each stretch between
     * them grows by the normalizer's factor and may gain a prepended piece. */
    size_t grown = norm_max_len(&t->norm, len), prepend = norm_max_len(&t->norm, 0) + (t->meta_prepend ? 1 : 0);
    return grown + (prepend + 1) * (len + 1);
}

hg_status hg_tokenizer_encode(const hg_tokenizer *t, const void *text, size_t len, int flags, int32_t *ids,
                              size_t cap, size_t *n_ids) {
    *n_ids = 0;
    if (cap < len)
        return hg_fail(HG_ERR_INVALID, "cap: %zu ids of room for %zu bytes of text; give at least %zu", cap, len, len);
    enc_state e = {t, ids, cap, 0, (flags & HG_ENCODE_ALLOW_SPECIAL) != 0};
    hg_status s = enc_pass(&e, 0, text, len, 1);
    *n_ids = s == HG_OK ? e.n : 0;
    return s;
}
