/* Tokenizer construction, added-token matching, accessors and BPE merging. */
#define _GNU_SOURCE /* qsort_r */
#include "data/tokenizer.h"

#include <stdlib.h>
#include <string.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "core/error.h"
#include "data/utf8.h"

hg_status tok_create_flags(hg_tokenizer **out, int32_t n_vocab, const uint8_t *const *bytes,
                           const uint32_t *lens, const uint8_t *flags, int byte_level, const char *src) {
    *out = NULL;
    int32_t least = byte_level ? 256 : 1;
    if (n_vocab < least || n_vocab > INT32_MAX / 2)
        return hg_fail(HG_ERR_FORMAT, "%s: %d tokens; a %s vocabulary has at least %d", src, (int)n_vocab,
                       byte_level ? "byte-level" : "BPE", (int)least);
    uint64_t total = 0;
    for (int32_t i = 0; i < n_vocab; i++) total += lens[i];
    if (total > UINT32_MAX) return hg_fail(HG_ERR_FORMAT, "%s: tokens too long in total", src);
    hg_tokenizer *t = calloc(1, sizeof *t);
    if (!t) return hg_fail(HG_ERR_NOMEM, "%s: out of memory", src);
    t->off = malloc(((size_t)n_vocab + 1) * sizeof *t->off);
    t->blob = malloc(total ? total : 1);
    t->flags = calloc((size_t)n_vocab, 1);
    if (!t->off || !t->blob || !t->flags) {
        hg_tokenizer_free(t);
        return hg_fail(HG_ERR_NOMEM, "%s: out of memory", src);
    }
    if (flags) memcpy(t->flags, flags, (size_t)n_vocab);
    t->n_vocab = n_vocab;
    t->eot = t->bos = t->unk = -1;
    t->cut_safe = 1;
    uint32_t o = 0;
    for (int32_t i = 0; i < n_vocab; i++) {
        t->off[i] = o;
        memcpy(t->blob + o, bytes[i], lens[i]);
        o += lens[i];
        if (lens[i] > t->max_token_len) t->max_token_len = lens[i];
        if (lens[i] == HG_EOT_LEN && !memcmp(bytes[i], HG_EOT_TEXT, HG_EOT_LEN) &&
            (t->eot < 0 || (t->flags[i] & TOK_ADDED)))
            t->eot = i;
    }
    t->off[n_vocab] = o;
    hg_status s = bytes_table_init(&t->by_bytes, (size_t)n_vocab, t->blob, t->off);
    if (s == HG_OK) s = pretok_init(&t->pre);
    if (s != HG_OK) {
        hg_tokenizer_free(t);
        return s;
    }
    for (int32_t i = 0; i < n_vocab; i++)
        if (!(t->flags[i] & TOK_OUTSIDE)) bytes_table_put(&t->by_bytes, i);
    for (int b = 0; b < 256; b++) {
        uint8_t c = (uint8_t)b;
        t->byte_id[b] = bytes_table_get(&t->by_bytes, &c, 1);
        if (t->byte_id[b] < 0 && byte_level) {
            hg_tokenizer_free(t);
            return hg_fail(HG_ERR_FORMAT, "%s: no token for byte 0x%02x; a byte-level vocabulary has all 256", src, b);
        }
    }
    *out = t;
    return HG_OK;
}

hg_status tok_create(hg_tokenizer **out, int32_t n_vocab, const uint8_t *const *bytes,
                     const uint32_t *lens, int32_t eot, const char *src) {
    *out = NULL;
    uint8_t *flags = n_vocab > 0 ? calloc((size_t)n_vocab, 1) : NULL;
    if (!flags && n_vocab > 0) return hg_fail(HG_ERR_NOMEM, "%s: out of memory", src);
    if (eot >= 0 && eot < n_vocab) flags[eot] = TOK_ADDED | TOK_SPECIAL | TOK_OUTSIDE;
    hg_status s = tok_create_flags(out, n_vocab, bytes, lens, flags, 1, src);
    free(flags);
    if (s == HG_OK) s = tok_build_added(*out, NULL, NULL, src);
    if (s != HG_OK) {
        hg_tokenizer_free(*out);
        *out = NULL;
    }
    return s;
}

/* ------------------------------------------------------------ added tokens */

static int bytes_cmp(const uint8_t *a, size_t na, const uint8_t *b, size_t nb) {
    int c = memcmp(a, b, na < nb ? na : nb);
    return c ? c : (na > nb) - (na < nb);
}

static int added_cmp(const void *x, const void *y, void *ctx) {
    const hg_tokenizer *t = ctx;
    int32_t a = *(const int32_t *)x, b = *(const int32_t *)y;
    return bytes_cmp(t->added_blob + t->added_off[a], t->added_off[a + 1] - t->added_off[a],
                     t->added_blob + t->added_off[b], t->added_off[b + 1] - t->added_off[b]);
}

hg_status tok_build_added(hg_tokenizer *t, const uint8_t *const *content, const uint32_t *clen, const char *src) {
    size_t total = 0;
    for (int32_t i = 0; i < t->n_vocab; i++)
        if (t->flags[i] & TOK_ADDED) total += content ? clen[i] : t->off[i + 1] - t->off[i];
    if (total > UINT32_MAX) return hg_fail(HG_ERR_FORMAT, "%s: added tokens too long in total", src);
    t->added_off = malloc(((size_t)t->n_vocab + 1) * sizeof *t->added_off);
    t->added_blob = malloc(total ? total : 1);
    for (int p = 0; p < 2; p++) t->added[p].ids = malloc(((size_t)t->n_vocab) * sizeof(int32_t));
    if (!t->added_off || !t->added_blob || !t->added[0].ids || !t->added[1].ids)
        return hg_fail(HG_ERR_NOMEM, "%s: out of memory", src);
    uint32_t o = 0;
    for (int32_t i = 0; i < t->n_vocab; i++) {
        t->added_off[i] = o;
        if (!(t->flags[i] & TOK_ADDED)) continue;
        const uint8_t *c = content ? content[i] : t->blob + t->off[i];
        uint32_t n = content ? clen[i] : t->off[i + 1] - t->off[i];
        if (!n) return hg_fail(HG_ERR_FORMAT, "%s: added token %d has no content", src, (int)i);
        memcpy(t->added_blob + o, c, n);
        o += n;
        tok_added_set *set = &t->added[(t->flags[i] & TOK_NORMALIZED) ? 1 : 0];
        set->ids[set->n++] = i;
        if (!(t->flags[i] & TOK_SPECIAL)) set->has_plain = 1;
        if (!(set->first[c[0] >> 3] & (1u << (c[0] & 7)))) {
            set->first[c[0] >> 3] |= (uint8_t)(1u << (c[0] & 7));
            set->n_first++;
            set->only_first = c[0];
        }
    }
    t->added_off[t->n_vocab] = o;
    int rules = 0;
    for (int32_t i = 0; i < t->n_vocab; i++) rules |= t->flags[i] & (TOK_LSTRIP | TOK_RSTRIP | TOK_SINGLE_WORD);
    if (rules) {
        /* the Rust regex crate's \w and \s, which the tokenizers package tests with */
        static const char word[] = "[\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}\\x{200C}\\x{200D}]", space[] = "\\p{White_Space}";
        int err;
        PCRE2_SIZE at;
        t->word_class = pcre2_compile((PCRE2_SPTR)word, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_ANCHORED, &err, &at, NULL);
        t->space_class = pcre2_compile((PCRE2_SPTR)space, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_ANCHORED, &err, &at, NULL);
        if (!t->word_class || !t->space_class)
            return hg_fail(HG_ERR_UNSUPPORTED, "%s: this PCRE2 cannot compile the added tokens' character classes", src);
    }
    for (int p = 0; p < 2; p++) {
        tok_added_set *set = &t->added[p];
        qsort_r(set->ids, (size_t)set->n, sizeof *set->ids, added_cmp, t);
        for (int32_t k = 1; k < set->n; k++)
            if (!added_cmp(&set->ids[k - 1], &set->ids[k], t))
                return hg_fail(HG_ERR_FORMAT, "%s: added tokens %d and %d have the same content", src,
                               (int)set->ids[k - 1], (int)set->ids[k]);
    }
    return HG_OK;
}

int32_t tok_added_match(const hg_tokenizer *t, const tok_added_set *set, const uint8_t *s, size_t n, size_t *len) {
    /* The largest content u <= s[0..k): if u is a prefix of s it is the longest one;
     * otherwise every content that is a prefix of s is a prefix of s[0..lcp(u, s)). */
    size_t k = n;
    while (k > 0) {
        int32_t lo = 0, hi = set->n; /* find the last index with content <= s[0..k) */
        while (lo < hi) {
            int32_t mid = lo + (hi - lo) / 2, id = set->ids[mid];
            const uint8_t *c = t->added_blob + t->added_off[id];
            if (bytes_cmp(c, t->added_off[id + 1] - t->added_off[id], s, k) <= 0) lo = mid + 1;
            else hi = mid;
        }
        if (lo == 0) return -1;
        int32_t id = set->ids[lo - 1];
        const uint8_t *c = t->added_blob + t->added_off[id];
        size_t cl = t->added_off[id + 1] - t->added_off[id], l = 0;
        while (l < cl && l < k && c[l] == s[l]) l++;
        if (l == cl) {
            *len = cl;
            return id;
        }
        k = l;
    }
    return -1;
}

/* Whether the character at s[0..n) (n its UTF-8 length) is in class c; a byte that
 * starts no valid character is in none. */
static int char_in(const void *c, const uint8_t *s, size_t n) {
    pcre2_match_data *md = pcre2_match_data_create(1, NULL);
    int in = md && pcre2_match(c, s, n, 0, PCRE2_NO_UTF_CHECK, md, NULL) >= 0;
    pcre2_match_data_free(md);
    return in;
}

/* The character that ends at text[at) (0: none, or not valid UTF-8): its length. */
static size_t char_before(const uint8_t *text, size_t at) {
    size_t b = at;
    while (b > 0 && at - b < 4 && (text[b - 1] & 0xC0) == 0x80) b--;
    if (b == 0) return 0;
    b--;
    int n = utf8_seq_len(text + b, at - b);
    return n > 0 && b + (size_t)n == at ? (size_t)n : 0;
}

int tok_added_rules(const hg_tokenizer *t, int32_t id, const uint8_t *text, size_t len, size_t from, size_t *start,
                    size_t *end) {
    const uint8_t f = t->flags[id];
    if (f & TOK_SINGLE_WORD) {
        size_t before = char_before(text, *start);
        int after = *end < len ? utf8_seq_len(text + *end, len - *end) : 0;
        if ((before && char_in(t->word_class, text + *start - before, before)) ||
            (after > 0 && char_in(t->word_class, text + *end, (size_t)after)))
            return 0;
    }
    if (f & TOK_LSTRIP)
        for (size_t n; *start > from && (n = char_before(text, *start)) && *start - n >= from &&
                       char_in(t->space_class, text + *start - n, n);)
            *start -= n;
    if (f & TOK_RSTRIP)
        for (int n; *end < len && (n = utf8_seq_len(text + *end, len - *end)) > 0 &&
                    char_in(t->space_class, text + *end, (size_t)n);)
            *end += (size_t)n;
    return 1;
}

static int hex_value(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static size_t tok_len(const hg_tokenizer *t, int32_t id) { return t->off[id + 1] - t->off[id]; }

hg_status tok_build_merges(hg_tokenizer *t, tok_merge *merges, int32_t n_merges, const char *src) {
    t->mode = TOK_MODE_MERGES;
    t->merges = merges;
    t->n_merges = n_merges;
    HG_TRY(pair_table_init(&t->pairs, (size_t)n_merges));
    for (int32_t r = 0; r < n_merges; r++) {
        const tok_merge *m = &merges[r];
        HG_ASSERT(m->left >= 0 && m->right >= 0 && m->id >= 0);
        if (tok_len(t, m->id) != tok_len(t, m->left) + tok_len(t, m->right))
            return hg_fail(HG_ERR_FORMAT, "%s: merge %d does not concatenate its two tokens", src, (int)r);
        pair_table_put(&t->pairs, m->left, m->right, r, m->id);
    }
    return HG_OK;
}

hg_status tok_build_ranks(hg_tokenizer *t, const char *src) {
    (void)src;
    t->mode = TOK_MODE_RANKS;
    /* Every split of a token into two tokens is a pair that merges into it. */
    size_t n_pairs = 0;
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 1) HG_TRY(pair_table_init(&t->pairs, n_pairs));
        for (int32_t id = 0; id < t->n_vocab; id++) {
            if (t->flags[id] & TOK_OUTSIDE) continue;
            const uint8_t *p = t->blob + t->off[id];
            size_t n = tok_len(t, id);
            for (size_t k = 1; k < n; k++) {
                int32_t l = bytes_table_get(&t->by_bytes, p, k);
                int32_t r = l < 0 ? -1 : bytes_table_get(&t->by_bytes, p + k, n - k);
                if (r < 0) continue;
                if (pass == 0) n_pairs++;
                else pair_table_put(&t->pairs, l, r, id, id);
            }
        }
    }
    return HG_OK;
}

void hg_tokenizer_free(hg_tokenizer *t) {
    if (!t) return;
    pretok_free(&t->pre);
    norm_free(&t->norm);
    bytes_table_free(&t->by_bytes);
    pair_table_free(&t->pairs);
    free(t->merges);
    free(t->off);
    free(t->blob);
    free(t->flags);
    free(t->added_off);
    free(t->added_blob);
    free(t->added[0].ids);
    free(t->added[1].ids);
    pcre2_code_free(t->word_class);
    pcre2_code_free(t->space_class);
    free(t->source);
    free(t);
}

int hg_tokenizer_vocab_size(const hg_tokenizer *t) { return t->n_vocab; }
int32_t hg_tokenizer_eot(const hg_tokenizer *t) { return t->eot; }
int32_t hg_tokenizer_bos(const hg_tokenizer *t) { return t->bos; }

hg_status hg_tokenizer_token_id(const hg_tokenizer *t, const char *text, int32_t *id) {
    size_t n = strlen(text), m;
    *id = -1;
    for (int p = 0; p < 2 && *id < 0; p++) {
        int32_t a = t->added[p].n ? tok_added_match(t, &t->added[p], (const uint8_t *)text, n, &m) : -1;
        if (a >= 0 && m == n) *id = a;
    }
    if (*id < 0 && n) *id = bytes_table_get(&t->by_bytes, (const uint8_t *)text, n);
    if (*id < 0 && t->chars && n == 6 && !memcmp(text, "<0x", 3) && text[5] == '>') {
        int hi = hex_value(text[3]), lo = hex_value(text[4]);
        if (hi >= 0 && lo >= 0) *id = t->byte_id[hi * 16 + lo];
    }
    if (*id < 0) return hg_fail(HG_ERR_INVALID, "token: \"%.80s\" is not in the vocabulary", text);
    return HG_OK;
}
size_t hg_tokenizer_max_token_bytes(const hg_tokenizer *t) { return t->max_token_len; }

hg_status hg_tokenizer_token_bytes(const hg_tokenizer *t, int32_t id, const uint8_t **bytes, size_t *len) {
    if (id < 0 || id >= t->n_vocab)
        return hg_fail(HG_ERR_INVALID, "id: %d is outside the vocabulary [0, %d)", (int)id, (int)t->n_vocab);
    *bytes = t->blob + t->off[id];
    *len = tok_len(t, id);
    return HG_OK;
}

/* ------------------------------------------------------------------- BPE */

static int32_t pair_rank(const hg_tokenizer *t, int32_t l, int32_t r, int32_t max_rank, int32_t *id) {
    const pair_slot *s = pair_table_get(&t->pairs, l, r);
    if (!s || s->rank >= max_rank) return INT32_MAX;
    *id = s->id;
    return s->rank;
}

size_t bpe_merge_small(const hg_tokenizer *t, int32_t *ids, size_t n, int32_t max_rank) {
    HG_ASSERT(n <= BPE_SMALL_MAX);
    int32_t rank[BPE_SMALL_MAX], merged[BPE_SMALL_MAX];
    for (size_t i = 0; i + 1 < n; i++) rank[i] = pair_rank(t, ids[i], ids[i + 1], max_rank, &merged[i]);
    while (n > 1) {
        size_t best = 0;
        for (size_t i = 1; i + 1 < n; i++)
            if (rank[i] < rank[best]) best = i;
        if (rank[best] == INT32_MAX) break;
        ids[best] = merged[best];
        size_t tail = n - best - 2; /* entries after best + 1 */
        memmove(ids + best + 1, ids + best + 2, tail * sizeof *ids);
        memmove(rank + best + 1, rank + best + 2, (tail ? tail - 1 : 0) * sizeof *rank);
        memmove(merged + best + 1, merged + best + 2, (tail ? tail - 1 : 0) * sizeof *merged);
        n--;
        if (best > 0) rank[best - 1] = pair_rank(t, ids[best - 1], ids[best], max_rank, &merged[best - 1]);
        if (best + 1 < n) rank[best] = pair_rank(t, ids[best], ids[best + 1], max_rank, &merged[best]);
    }
    return n;
}

/* A candidate merge of node pos with its right neighbour; stale once either changes. */
typedef struct bpe_cand {
    int32_t rank, pos, left, right, id;
} bpe_cand;

static int cand_before(const bpe_cand *a, const bpe_cand *b) {
    return a->rank < b->rank || (a->rank == b->rank && a->pos < b->pos);
}

static void heap_push(bpe_cand *h, size_t *n, bpe_cand c) {
    size_t i = (*n)++;
    while (i > 0 && cand_before(&c, &h[(i - 1) / 2])) {
        h[i] = h[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h[i] = c;
}

static bpe_cand heap_pop(bpe_cand *h, size_t *n) {
    bpe_cand top = h[0], last = h[--*n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n) break;
        if (c + 1 < *n && cand_before(&h[c + 1], &h[c])) c++;
        if (!cand_before(&h[c], &last)) break;
        h[i] = h[c];
        i = c;
    }
    h[i] = last;
    return top;
}

static void cand_offer(const hg_tokenizer *t, bpe_cand *h, size_t *nh, const int32_t *id, int32_t l, int32_t r,
                       int32_t max_rank) {
    bpe_cand c = {0, l, id[l], id[r], 0};
    c.rank = pair_rank(t, id[l], id[r], max_rank, &c.id);
    if (c.rank != INT32_MAX) heap_push(h, nh, c);
}

hg_status bpe_merge_large(const hg_tokenizer *t, int32_t *ids, size_t n, int32_t max_rank, size_t *n_out) {
    if (n > INT32_MAX / 4) return hg_fail(HG_ERR_INVALID, "text: a piece of %zu bytes is too long", n);
    /* Nodes are the initial byte positions; a merge keeps the left node. */
    int32_t *next = malloc(n * sizeof *next), *prev = malloc(n * sizeof *prev);
    bpe_cand *heap = malloc(3 * n * sizeof *heap); /* n-1 initial pairs + 2 per merge */
    if (!next || !prev || !heap) {
        free(next);
        free(prev);
        free(heap);
        return hg_fail(HG_ERR_NOMEM, "text: out of memory for a piece of %zu bytes", n);
    }
    size_t nh = 0;
    for (size_t i = 0; i < n; i++) {
        next[i] = i + 1 < n ? (int32_t)(i + 1) : -1;
        prev[i] = (int32_t)i - 1;
    }
    for (size_t i = 0; i + 1 < n; i++) cand_offer(t, heap, &nh, ids, (int32_t)i, (int32_t)i + 1, max_rank);
    while (nh) {
        bpe_cand c = heap_pop(heap, &nh);
        int32_t r = next[c.pos];
        if (ids[c.pos] != c.left || r < 0 || ids[r] != c.right) continue;
        ids[c.pos] = c.id;
        ids[r] = -1;
        next[c.pos] = next[r];
        if (next[r] >= 0) prev[next[r]] = c.pos;
        if (prev[c.pos] >= 0) cand_offer(t, heap, &nh, ids, prev[c.pos], c.pos, max_rank);
        if (next[c.pos] >= 0) cand_offer(t, heap, &nh, ids, c.pos, next[c.pos], max_rank);
    }
    size_t k = 0;
    for (int32_t i = 0; i >= 0; i = next[i]) ids[k++] = ids[i];
    free(next);
    free(prev);
    free(heap);
    *n_out = k;
    return HG_OK;
}
