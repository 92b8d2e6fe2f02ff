/* Byte-level BPE training.
 *
 * Texts are pre-tokenized as for encoding and only distinct pieces ("words") are kept,
 * with their counts. Training then repeats: take the most frequent adjacent pair
 * (ties: the smaller (left, right)), give it a new id, and rewrite the words that hold
 * it. Pair counts are updated only around each rewritten occurrence, words holding a
 * pair are found through per-pair occurrence lists, and a lazy max-heap orders pairs:
 * a pair's count only falls after the step that created it, so a stale heap entry is
 * re-pushed with its current count when popped. A merge whose concatenation is
 * already a token (reached before by another pair) reuses that token's id, as Hugging
 * Face's trainer does, so every id has distinct bytes. */
#define _GNU_SOURCE /* memmem */
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "data/table.h"
#include "data/tokenizer.h"
#include "data/utf8.h"

/* A growable array: *p holds *n of *cap elements of size sz. */
static int grow(void **p, size_t *cap, size_t need, size_t sz) {
    if (need <= *cap) return 1;
    size_t c = *cap ? *cap : 64;
    while (c < need) c *= 2;
    void *q = realloc(*p, c * sz);
    if (!q) return 0;
    *p = q;
    *cap = c;
    return 1;
}

/* Growable open-addressing map of 64-bit hash -> index, for words and pairs. */
typedef struct index_map {
    uint64_t *keys; /* for words: the bytes' hash; for pairs: left << 32 | right */
    int32_t *vals;  /* -1 when free */
    uint64_t mask;
    size_t count;
} index_map;

static int map_init(index_map *m, size_t slots) {
    m->keys = malloc(slots * sizeof *m->keys);
    m->vals = malloc(slots * sizeof *m->vals);
    m->mask = slots - 1;
    m->count = 0;
    if (!m->keys || !m->vals) return 0;
    memset(m->vals, 0xFF, slots * sizeof *m->vals);
    return 1;
}

static void map_free(index_map *m) {
    free(m->keys);
    free(m->vals);
}

static uint64_t mix(uint64_t k) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    return k ^ (k >> 33);
}

static int map_grow(index_map *m) {
    index_map bigger;
    if (!map_init(&bigger, 2 * (m->mask + 1))) {
        map_free(&bigger);
        return 0;
    }
    for (uint64_t i = 0; i <= m->mask; i++) {
        if (m->vals[i] < 0) continue;
        uint64_t j = mix(m->keys[i]) & bigger.mask;
        while (bigger.vals[j] >= 0) j = (j + 1) & bigger.mask;
        bigger.keys[j] = m->keys[i];
        bigger.vals[j] = m->vals[i];
    }
    bigger.count = m->count;
    map_free(m);
    *m = bigger;
    return 1;
}

struct hg_bpe_trainer {
    int vocab_size;
    pretok pre;
    index_map words;       /* bytes hash -> word */
    uint8_t *bytes;        /* word bytes, back to back */
    size_t n_bytes, cap_bytes;
    uint64_t *word_off;    /* (n_words + 1 slots used as start offsets) */
    uint32_t *word_len;
    int64_t *word_count;
    size_t n_words, cap_words;
};

hg_status hg_bpe_trainer_create(hg_bpe_trainer **out, int vocab_size) {
    *out = NULL;
    if (vocab_size < 257 || vocab_size > (1 << 24))
        return hg_fail(HG_ERR_INVALID, "vocab_size: %d; want 257 (256 bytes and <|endoftext|>) to 2^24", vocab_size);
    hg_bpe_trainer *tr = calloc(1, sizeof *tr);
    if (!tr || !map_init(&tr->words, 1 << 12)) {
        hg_bpe_trainer_free(tr);
        return hg_fail(HG_ERR_NOMEM, "trainer: out of memory");
    }
    tr->vocab_size = vocab_size;
    hg_status s = pretok_init(&tr->pre);
    if (s != HG_OK) {
        hg_bpe_trainer_free(tr);
        return s;
    }
    *out = tr;
    return HG_OK;
}

void hg_bpe_trainer_free(hg_bpe_trainer *tr) {
    if (!tr) return;
    pretok_free(&tr->pre);
    map_free(&tr->words);
    free(tr->bytes);
    free(tr->word_off);
    free(tr->word_len);
    free(tr->word_count);
    free(tr);
}

static hg_status word_add(hg_bpe_trainer *tr, const uint8_t *p, size_t n) {
    if (2 * (tr->words.count + 1) > tr->words.mask + 1 && !map_grow(&tr->words))
        return hg_fail(HG_ERR_NOMEM, "trainer: out of memory");
    uint64_t h = bytes_hash(p, n), i = mix(h) & tr->words.mask;
    for (; tr->words.vals[i] >= 0; i = (i + 1) & tr->words.mask) {
        int32_t w = tr->words.vals[i];
        if (tr->words.keys[i] == h && tr->word_len[w] == n && !memcmp(tr->bytes + tr->word_off[w], p, n)) {
            tr->word_count[w]++;
            return HG_OK;
        }
    }
    if (tr->n_words >= INT32_MAX - 1 || n > UINT32_MAX) return hg_fail(HG_ERR_INVALID, "trainer: too many words");
    size_t cw = tr->cap_words;
    if (!grow((void **)&tr->bytes, &tr->cap_bytes, tr->n_bytes + n, 1) ||
        !grow((void **)&tr->word_off, &cw, tr->n_words + 1, sizeof *tr->word_off) ||
        (cw = tr->cap_words, !grow((void **)&tr->word_len, &cw, tr->n_words + 1, sizeof *tr->word_len)) ||
        (cw = tr->cap_words, !grow((void **)&tr->word_count, &cw, tr->n_words + 1, sizeof *tr->word_count)))
        return hg_fail(HG_ERR_NOMEM, "trainer: out of memory");
    tr->cap_words = cw;
    memcpy(tr->bytes + tr->n_bytes, p, n);
    int32_t w = (int32_t)tr->n_words++;
    tr->word_off[w] = tr->n_bytes;
    tr->word_len[w] = (uint32_t)n;
    tr->word_count[w] = 1;
    tr->n_bytes += n;
    tr->words.keys[i] = h;
    tr->words.vals[i] = w;
    tr->words.count++;
    return HG_OK;
}

static hg_status trainer_add_ordinary(hg_bpe_trainer *tr, const uint8_t *text, size_t len) {
    if (!len) return HG_OK;
    const uint8_t *subject;
    uint8_t *subst;
    HG_TRY(pretok_subject(text, len, &subject, &subst));
    pretok_iter it;
    hg_status s = pretok_iter_init(&it, &tr->pre, subject, len);
    size_t a, b;
    while (s == HG_OK && pretok_iter_next(&it, &a, &b)) s = word_add(tr, text + a, b - a);
    pretok_iter_free(&it);
    free(subst);
    return s;
}

hg_status hg_bpe_trainer_add(hg_bpe_trainer *tr, const void *text, size_t len) {
    const uint8_t *p = text;
    while (len) {
        const uint8_t *eot = memmem(p, len, HG_EOT_TEXT, HG_EOT_LEN);
        size_t seg = eot ? (size_t)(eot - p) : len;
        HG_TRY(trainer_add_ordinary(tr, p, seg));
        size_t skip = seg + (eot ? HG_EOT_LEN : 0);
        p += skip;
        len -= skip;
    }
    return HG_OK;
}

/* ------------------------------------------------------------- training */

typedef struct occurrence {
    int32_t word, next; /* next occurrence record of the same pair, or -1 */
} occurrence;

typedef struct heap_entry {
    int64_t count;
    int32_t pair;
} heap_entry;

typedef struct train_state {
    int32_t *sym;       /* symbols of all words, at word_off */
    uint32_t *len;      /* current symbol count per word */
    int32_t *stamp;     /* last merge step that rewrote the word */
    index_map pair_map; /* left << 32 | right -> pair */
    int32_t *left, *right, *head;
    int64_t *count;
    size_t n_pairs, cap_pairs;
    occurrence *occ;
    size_t n_occ, cap_occ;
    heap_entry *heap;
    size_t n_heap, cap_heap;
    int32_t *pair_stamp;  /* last step that added to the pair (n_pairs of cap_pairs) */
    int32_t *touched;     /* pairs added to in this step */
    size_t n_touched, cap_touched;
    /* tokens: id i has bytes tok_arena[tok_off[i] .. + tok_len[i]) */
    uint8_t *tok_arena;
    size_t n_arena, cap_arena;
    uint64_t *tok_off;
    uint32_t *tok_len;
    size_t n_tok, cap_tok;
    index_map tok_map;    /* bytes hash -> id */
} train_state;

static int heap_above(const train_state *st, heap_entry a, heap_entry b) {
    if (a.count != b.count) return a.count > b.count;
    if (st->left[a.pair] != st->left[b.pair]) return st->left[a.pair] < st->left[b.pair];
    return st->right[a.pair] < st->right[b.pair];
}

static int heap_push(train_state *st, int32_t pair) {
    if (!grow((void **)&st->heap, &st->cap_heap, st->n_heap + 1, sizeof *st->heap)) return 0;
    heap_entry e = {st->count[pair], pair};
    size_t i = st->n_heap++;
    while (i > 0 && heap_above(st, e, st->heap[(i - 1) / 2])) {
        st->heap[i] = st->heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    st->heap[i] = e;
    return 1;
}

static heap_entry heap_pop(train_state *st) {
    heap_entry top = st->heap[0], last = st->heap[--st->n_heap];
    size_t i = 0, n = st->n_heap;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && heap_above(st, st->heap[c + 1], st->heap[c])) c++;
        if (!heap_above(st, st->heap[c], last)) break;
        st->heap[i] = st->heap[c];
        i = c;
    }
    st->heap[i] = last;
    return top;
}

/* The pair (l, r), created with count 0 if new; -1 when out of memory. */
static int32_t pair_get(train_state *st, int32_t l, int32_t r) {
    index_map *m = &st->pair_map;
    if (2 * (m->count + 1) > m->mask + 1 && !map_grow(m)) return -1;
    uint64_t key = (uint64_t)(uint32_t)l << 32 | (uint32_t)r, i = mix(key) & m->mask;
    for (; m->vals[i] >= 0; i = (i + 1) & m->mask)
        if (m->keys[i] == key) return m->vals[i];
    size_t cap = st->cap_pairs;
    if (!grow((void **)&st->left, &cap, st->n_pairs + 1, sizeof *st->left) ||
        (cap = st->cap_pairs, !grow((void **)&st->right, &cap, st->n_pairs + 1, sizeof *st->right)) ||
        (cap = st->cap_pairs, !grow((void **)&st->head, &cap, st->n_pairs + 1, sizeof *st->head)) ||
        (cap = st->cap_pairs, !grow((void **)&st->count, &cap, st->n_pairs + 1, sizeof *st->count)) ||
        (cap = st->cap_pairs, !grow((void **)&st->pair_stamp, &cap, st->n_pairs + 1, sizeof *st->pair_stamp)))
        return -1;
    st->cap_pairs = cap;
    int32_t p = (int32_t)st->n_pairs++;
    st->left[p] = l;
    st->right[p] = r;
    st->head[p] = -1;
    st->count[p] = 0;
    st->pair_stamp[p] = -1;
    m->keys[i] = key;
    m->vals[i] = p;
    m->count++;
    return p;
}

/* Adds c to pair (l, r) seen in word w at merge step `step`; records w as holding it
 * and the pair as touched. 0 when out of memory. */
static int pair_add(train_state *st, int32_t l, int32_t r, int64_t c, int32_t w, int32_t step) {
    int32_t p = pair_get(st, l, r);
    if (p < 0) return 0;
    st->count[p] += c;
    if (c > 0 && st->pair_stamp[p] != step) {
        if (!grow((void **)&st->touched, &st->cap_touched, st->n_touched + 1, sizeof *st->touched)) return 0;
        st->pair_stamp[p] = step;
        st->touched[st->n_touched++] = p;
    }
    if (c > 0 && (st->head[p] < 0 || st->occ[st->head[p]].word != w)) {
        if (!grow((void **)&st->occ, &st->cap_occ, st->n_occ + 1, sizeof *st->occ)) return 0;
        st->occ[st->n_occ] = (occurrence){w, st->head[p]};
        st->head[p] = (int32_t)st->n_occ++;
    }
    return 1;
}

static void train_state_free(train_state *st) {
    free(st->sym);
    free(st->len);
    free(st->stamp);
    map_free(&st->pair_map);
    free(st->left);
    free(st->right);
    free(st->head);
    free(st->count);
    free(st->occ);
    free(st->heap);
    free(st->pair_stamp);
    free(st->touched);
    free(st->tok_arena);
    free(st->tok_off);
    free(st->tok_len);
    map_free(&st->tok_map);
}

/* The id of the token l + r: an existing one with those bytes, or a new one. -1 when
 * out of memory. */
static int32_t token_concat(train_state *st, int32_t l, int32_t r, int *is_new) {
    size_t n = (size_t)st->tok_len[l] + st->tok_len[r], cap = st->cap_tok;
    if (!grow((void **)&st->tok_arena, &st->cap_arena, st->n_arena + n, 1) ||
        !grow((void **)&st->tok_off, &cap, st->n_tok + 1, sizeof *st->tok_off) ||
        (cap = st->cap_tok, !grow((void **)&st->tok_len, &cap, st->n_tok + 1, sizeof *st->tok_len)))
        return -1;
    st->cap_tok = cap;
    if (2 * (st->tok_map.count + 1) > st->tok_map.mask + 1 && !map_grow(&st->tok_map)) return -1;
    uint8_t *p = st->tok_arena + st->n_arena;
    memcpy(p, st->tok_arena + st->tok_off[l], st->tok_len[l]);
    memcpy(p + st->tok_len[l], st->tok_arena + st->tok_off[r], st->tok_len[r]);
    uint64_t h = bytes_hash(p, n), i = mix(h) & st->tok_map.mask;
    for (; st->tok_map.vals[i] >= 0; i = (i + 1) & st->tok_map.mask) {
        int32_t id = st->tok_map.vals[i];
        if (st->tok_map.keys[i] == h && st->tok_len[id] == n && !memcmp(st->tok_arena + st->tok_off[id], p, n)) {
            *is_new = 0;
            return id;
        }
    }
    int32_t id = (int32_t)st->n_tok++;
    st->tok_off[id] = st->n_arena;
    st->tok_len[id] = (uint32_t)n;
    st->n_arena += n;
    st->tok_map.keys[i] = h;
    st->tok_map.vals[i] = id;
    st->tok_map.count++;
    *is_new = 1;
    return id;
}

/* Rewrites every occurrence of pair p = (l, r) as z; pairs that grew go to the heap. */
static int merge_pair(train_state *st, const hg_bpe_trainer *tr, int32_t p, int32_t z, int32_t step) {
    int32_t l = st->left[p], r = st->right[p];
    st->n_touched = 0;
    for (int32_t o = st->head[p]; o >= 0; o = st->occ[o].next) {
        int32_t w = st->occ[o].word;
        if (st->stamp[w] == step) continue;
        st->stamp[w] = step;
        int32_t *s = st->sym + tr->word_off[w];
        uint32_t n = st->len[w];
        int64_t c = tr->word_count[w];
        for (uint32_t i = 0; i + 1 < n; i++) {
            if (s[i] != l || s[i + 1] != r) continue;
            if (i > 0 && (!pair_add(st, s[i - 1], l, -c, w, step) || !pair_add(st, s[i - 1], z, c, w, step)))
                return 0;
            if (i + 2 < n && (!pair_add(st, r, s[i + 2], -c, w, step) || !pair_add(st, z, s[i + 2], c, w, step)))
                return 0;
            s[i] = z;
            memmove(s + i + 1, s + i + 2, (n - i - 2) * sizeof *s);
            n--;
        }
        st->len[w] = n;
    }
    st->count[p] = 0;
    for (size_t k = 0; k < st->n_touched; k++)
        if (st->count[st->touched[k]] > 0 && !heap_push(st, st->touched[k])) return 0;
    return 1;
}

/* Words to symbol sequences, the 256 byte tokens, and the initial pair counts. */
static int train_state_init(train_state *st, const hg_bpe_trainer *tr) {
    if (!map_init(&st->pair_map, 1 << 12) || !map_init(&st->tok_map, 1 << 10)) return 0;
    for (int i = 0; i < 256; i++) {
        uint8_t b = byteunicode_order(i);
        size_t cap = st->cap_tok;
        if (!grow((void **)&st->tok_arena, &st->cap_arena, st->n_arena + 1, 1) ||
            !grow((void **)&st->tok_off, &cap, st->n_tok + 1, sizeof *st->tok_off) ||
            (cap = st->cap_tok, !grow((void **)&st->tok_len, &cap, st->n_tok + 1, sizeof *st->tok_len)))
            return 0;
        st->cap_tok = cap;
        st->tok_arena[st->n_arena] = b;
        st->tok_off[i] = st->n_arena++;
        st->tok_len[i] = 1;
        uint64_t h = bytes_hash(&b, 1), k = mix(h) & st->tok_map.mask;
        while (st->tok_map.vals[k] >= 0) k = (k + 1) & st->tok_map.mask;
        st->tok_map.keys[k] = h;
        st->tok_map.vals[k] = i;
        st->tok_map.count++;
        st->n_tok++;
    }
    int32_t byte_id[256];
    for (int i = 0; i < 256; i++) byte_id[byteunicode_order(i)] = i;
    st->sym = malloc((tr->n_bytes + 1) * sizeof *st->sym);
    st->len = malloc(tr->n_words * sizeof *st->len);
    st->stamp = malloc(tr->n_words * sizeof *st->stamp);
    if (!st->sym || !st->len || !st->stamp) return 0;
    for (size_t w = 0; w < tr->n_words; w++) {
        const uint8_t *b = tr->bytes + tr->word_off[w];
        int32_t *s = st->sym + tr->word_off[w];
        st->len[w] = tr->word_len[w];
        st->stamp[w] = -1;
        for (uint32_t i = 0; i < tr->word_len[w]; i++) s[i] = byte_id[b[i]];
        for (uint32_t i = 0; i + 1 < tr->word_len[w]; i++)
            if (!pair_add(st, s[i], s[i + 1], tr->word_count[w], (int32_t)w, -1)) return 0;
    }
    for (size_t q = 0; q < st->n_pairs; q++)
        if (!heap_push(st, (int32_t)q)) return 0;
    return 1;
}

/* The trained tokenizer: the tokens in id order, <|endoftext|> last, and the merges. */
static hg_status trained_tokenizer(train_state *st, tok_merge *merges, int32_t n_merges, hg_tokenizer **out) {
    int32_t n_vocab = (int32_t)st->n_tok + 1;
    const uint8_t **bytes = malloc((size_t)n_vocab * sizeof *bytes);
    uint32_t *lens = malloc((size_t)n_vocab * sizeof *lens);
    if (!bytes || !lens) {
        free(bytes);
        free(lens);
        free(merges);
        return hg_fail(HG_ERR_NOMEM, "trainer: out of memory");
    }
    for (size_t i = 0; i < st->n_tok; i++) {
        bytes[i] = st->tok_arena + st->tok_off[i];
        lens[i] = st->tok_len[i];
    }
    bytes[n_vocab - 1] = (const uint8_t *)HG_EOT_TEXT;
    lens[n_vocab - 1] = HG_EOT_LEN;
    hg_status s = tok_create(out, n_vocab, bytes, lens, n_vocab - 1, "trained vocabulary");
    free(bytes);
    free(lens);
    if (s != HG_OK) {
        free(merges);
        return s;
    }
    s = tok_build_merges(*out, merges, n_merges, "trained vocabulary"); /* takes merges */
    if (s != HG_OK) {
        hg_tokenizer_free(*out);
        *out = NULL;
    }
    return s;
}

hg_status hg_bpe_trainer_finish(hg_bpe_trainer *tr, hg_tokenizer **out) {
    *out = NULL;
    if (tr->n_words == 0) return hg_fail(HG_ERR_INVALID, "training text: empty; there is nothing to learn from");
    train_state st = {0};
    size_t want = (size_t)tr->vocab_size - 1; /* tokens before <|endoftext|> */
    tok_merge *merges = NULL;
    size_t n_merges = 0, cap_merges = 0;
    int ok = train_state_init(&st, tr);
    while (ok && st.n_tok < want && st.n_heap) {
        heap_entry e = heap_pop(&st);
        int64_t now = st.count[e.pair];
        if (now != e.count) {
            if (now > 0) ok = heap_push(&st, e.pair);
            continue;
        }
        if (now <= 0) continue;
        int is_new;
        int32_t z = token_concat(&st, st.left[e.pair], st.right[e.pair], &is_new);
        ok = z >= 0 && n_merges < INT32_MAX && grow((void **)&merges, &cap_merges, n_merges + 1, sizeof *merges);
        if (!ok) break;
        merges[n_merges++] = (tok_merge){st.left[e.pair], st.right[e.pair], z};
        ok = merge_pair(&st, tr, e.pair, z, (int32_t)n_merges);
    }
    hg_status s;
    if (!ok) {
        free(merges);
        s = hg_fail(HG_ERR_NOMEM, "trainer: out of memory");
    } else {
        s = trained_tokenizer(&st, merges, (int32_t)n_merges, out);
    }
    train_state_free(&st);
    return s;
}
