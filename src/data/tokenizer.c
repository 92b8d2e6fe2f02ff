/* Tokenizer construction, the encoder (pre-tokenize, then BPE each piece) and
 * accessors. */
#define _GNU_SOURCE /* memmem */
#include "data/tokenizer.h"

#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "data/utf8.h"

hg_status tok_create(hg_tokenizer **out, int32_t n_vocab, const uint8_t *const *bytes,
                     const uint32_t *lens, int32_t eot, const char *src) {
    *out = NULL;
    if (n_vocab < 256 || n_vocab > INT32_MAX / 2)
        return hg_fail(HG_ERR_FORMAT, "%s: %d tokens; a byte-level vocabulary has at least 256", src, (int)n_vocab);
    uint64_t total = 0;
    for (int32_t i = 0; i < n_vocab; i++) total += lens[i];
    if (total > UINT32_MAX) return hg_fail(HG_ERR_FORMAT, "%s: tokens too long in total", src);
    hg_tokenizer *t = calloc(1, sizeof *t);
    if (!t) return hg_fail(HG_ERR_NOMEM, "%s: out of memory", src);
    t->off = malloc(((size_t)n_vocab + 1) * sizeof *t->off);
    t->blob = malloc(total ? total : 1);
    if (!t->off || !t->blob) {
        hg_tokenizer_free(t);
        return hg_fail(HG_ERR_NOMEM, "%s: out of memory", src);
    }
    t->n_vocab = n_vocab;
    t->eot = eot;
    uint32_t o = 0;
    for (int32_t i = 0; i < n_vocab; i++) {
        t->off[i] = o;
        memcpy(t->blob + o, bytes[i], lens[i]);
        o += lens[i];
        if (lens[i] > t->max_token_len) t->max_token_len = lens[i];
    }
    t->off[n_vocab] = o;
    hg_status s = bytes_table_init(&t->by_bytes, (size_t)n_vocab, t->blob, t->off);
    if (s == HG_OK) s = pretok_init(&t->pre);
    if (s != HG_OK) {
        hg_tokenizer_free(t);
        return s;
    }
    for (int32_t i = 0; i < n_vocab; i++)
        if (i != eot) bytes_table_put(&t->by_bytes, i);
    for (int b = 0; b < 256; b++) {
        uint8_t c = (uint8_t)b;
        t->byte_id[b] = bytes_table_get(&t->by_bytes, &c, 1);
        if (t->byte_id[b] < 0) {
            hg_tokenizer_free(t);
            return hg_fail(HG_ERR_FORMAT, "%s: no token for byte 0x%02x; a byte-level vocabulary has all 256", src, b);
        }
    }
    *out = t;
    return HG_OK;
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
            if (id == t->eot) continue;
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
    if (t->pre.code) pretok_free(&t->pre);
    bytes_table_free(&t->by_bytes);
    pair_table_free(&t->pairs);
    free(t->merges);
    free(t->off);
    free(t->blob);
    free(t);
}

int hg_tokenizer_vocab_size(const hg_tokenizer *t) { return t->n_vocab; }
int32_t hg_tokenizer_eot(const hg_tokenizer *t) { return t->eot; }
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

/* ---------------------------------------------------------------- encode */

static hg_status encode_piece(const hg_tokenizer *t, const uint8_t *p, size_t n, int32_t *out, size_t *k) {
    if (n == 1) {
        out[0] = t->byte_id[p[0]];
        *k = 1;
        return HG_OK;
    }
    if (t->mode == TOK_MODE_RANKS) {
        int32_t id = bytes_table_get(&t->by_bytes, p, n);
        if (id >= 0) {
            out[0] = id;
            *k = 1;
            return HG_OK;
        }
    }
    for (size_t i = 0; i < n; i++) out[i] = t->byte_id[p[i]];
    if (n <= BPE_SMALL_MAX) {
        *k = bpe_merge_small(t, out, n, INT32_MAX);
        return HG_OK;
    }
    return bpe_merge_large(t, out, n, INT32_MAX, k);
}

hg_status tok_encode_ordinary(const hg_tokenizer *t, const uint8_t *text, size_t len, int32_t *ids, size_t *n_ids) {
    *n_ids = 0;
    if (!len) return HG_OK;
    /* The pattern runs on valid UTF-8. Each invalid byte stands in as '#', a character
     * that is neither letter, number nor space, as Python's surrogateescape makes it;
     * BPE then runs on the original bytes. */
    const uint8_t *subject;
    uint8_t *subst;
    HG_TRY(pretok_subject(text, len, &subject, &subst));
    pretok_iter it;
    hg_status s = pretok_iter_init(&it, &t->pre, subject, len);
    size_t count = 0, a, b;
    while (s == HG_OK && pretok_iter_next(&it, &a, &b)) {
        size_t k;
        s = encode_piece(t, text + a, b - a, ids + count, &k);
        count += k;
    }
    pretok_iter_free(&it);
    free(subst);
    *n_ids = count;
    return s;
}

hg_status hg_tokenizer_encode(const hg_tokenizer *t, const void *text, size_t len, int flags, int32_t *ids,
                              size_t cap, size_t *n_ids) {
    *n_ids = 0;
    if (cap < len)
        return hg_fail(HG_ERR_INVALID, "cap: %zu ids of room for %zu bytes of text; give at least %zu", cap, len, len);
    const uint8_t *p = text;
    size_t count = 0;
    while (len) {
        size_t seg = len;
        const uint8_t *eot = NULL;
        if ((flags & HG_ENCODE_ALLOW_SPECIAL) && t->eot >= 0) {
            eot = memmem(p, len, HG_EOT_TEXT, HG_EOT_LEN);
            if (eot) seg = (size_t)(eot - p);
        }
        size_t k;
        HG_TRY(tok_encode_ordinary(t, p, seg, ids + count, &k));
        count += k;
        p += seg;
        len -= seg;
        if (eot) {
            ids[count++] = t->eot;
            p += HG_EOT_LEN;
            len -= HG_EOT_LEN;
        }
    }
    *n_ids = count;
    return HG_OK;
}
