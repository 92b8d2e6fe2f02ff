/* The batch loader: maps token shards and cuts (B, T+1) rows out of them.
 *
 * Windows: a shard of n tokens holds floor((n - 1) / T) windows; window k covers
 * tokens [k*T, k*T + T] (so neighbours share one token) and windows never cross
 * shards. Padded rows (HG_ROWS_PADDED): each document of L >= 2 tokens (from the
 * HG_TOKEN_DOC flags, else from the separator token) is one row, or when L > T+1 its
 * windows as above, the last one shorter; a shard's rows are listed once when it is
 * opened. Packed rows (HG_ROWS_PACKED): those same pieces, best fit: each in turn goes to
 * the row with the least room that holds it (a piece of L tokens takes min(L, T) of a
 * row's T inputs), or starts a new one; the rest of a row is padding. All shards' rows
 * are numbered 0..W-1 in shard order, and below a row of any kind is a "window".
 * Order: an epoch has floor(W / (B * world_size)) batches. Batch s of rank r takes
 * the slots j = (s * world_size + r) * B + b, b < B, and slot j reads window
 * perm(j): the identity, or with shuffle a seeded permutation of [0, W) that changes
 * every epoch. Slots are disjoint across ranks, so are the windows they read.
 * The permutation is a 4-round Feistel network on the smallest even power of two >= W,
 * walking cycles until the value falls below W: no table, so nothing is allocated
 * per epoch or per batch. */
#define _POSIX_C_SOURCE 200809L
#include <glob.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "data/fileio.h"
#include "data/shard.h"

typedef struct loader_shard {
    char *path;
    const uint8_t *map;
    size_t map_len;
    const uint8_t *tokens; /* map + header */
    size_t header;         /* bytes before the first token */
    hg_shard_info info;
    const uint8_t *flags;  /* HG_TOKEN_* a token, or NULL */
    uint32_t vocab;        /* tokens must be < vocab */
    uint64_t first_window; /* number of windows in earlier shards */
    uint64_t n_rows;       /* HG_ROWS_PADDED and PACKED: piece k is tokens [row_start[k], +
                              row_len[k]), and under PADDED it is row k */
    uint64_t *row_start;
    uint32_t *row_len;
    uint64_t n_packed;     /* HG_ROWS_PACKED: row k holds pieces order[row_first[k]] ..
                              order[row_first[k + 1] - 1] */
    uint64_t *row_first, *order;
} loader_shard;

struct hg_loader {
    hg_loader_options opt;
    loader_shard *shards;
    int n_shards;
    uint64_t n_windows, n_tokens, batches_per_epoch, split_docs;
    int half_bits;         /* Feistel halves: the domain is 2^(2*half_bits) >= W */
    uint64_t keys[4];      /* round keys of the current epoch */
    hg_loader_position pos;
};

hg_loader_options hg_loader_options_default(void) {
    return (hg_loader_options){.batch = 1, .seq_len = 1024, .rank = 0, .world_size = 1};
}

static uint64_t splitmix64(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static void loader_epoch_keys(hg_loader *ld) {
    uint64_t s = ld->opt.seed ^ (ld->pos.epoch * 0xD1B54A32D192ED03ull);
    for (int i = 0; i < 4; i++) ld->keys[i] = splitmix64(&s);
}

static uint64_t feistel(const hg_loader *ld, uint64_t x) {
    int h = ld->half_bits;
    uint64_t mask = (1ull << h) - 1, l = x >> h, r = x & mask;
    for (int i = 0; i < 4; i++) {
        uint64_t f = r ^ ld->keys[i];
        f = (f ^ (f >> 31)) * 0x7FB5D329728EA185ull;
        f = (f ^ (f >> 27)) * 0x81DADEF4BC2DD44Dull;
        uint64_t nl = r;
        r = l ^ ((f ^ (f >> 33)) & mask);
        l = nl;
    }
    return l << h | r;
}

static uint64_t loader_window_of_slot(const hg_loader *ld, uint64_t j) {
    if (!ld->opt.shuffle) return j;
    do j = feistel(ld, j);
    while (j >= ld->n_windows);
    return j;
}

void hg_loader_close(hg_loader *ld) {
    if (!ld) return;
    for (int i = 0; i < ld->n_shards; i++) {
        file_unmap(ld->shards[i].map, ld->shards[i].map_len);
        free(ld->shards[i].path);
        free(ld->shards[i].row_start);
        free(ld->shards[i].row_len);
        free(ld->shards[i].row_first);
        free(ld->shards[i].order);
    }
    free(ld->shards);
    free(ld);
}

/* The largest of n tokens (little-endian, width 2 or 4): plain loops over the mapped
 * words that the compiler vectorises (a max per lane, then across lanes). */
static uint32_t max_token(const uint8_t *tokens, int width, uint64_t n) {
    uint32_t m = 0;
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    if (width == 2 && (uintptr_t)tokens % 2 == 0) {
        const uint16_t *t = (const uint16_t *)(const void *)tokens;
        uint16_t m16 = 0;
        for (uint64_t i = 0; i < n; i++) m16 = t[i] > m16 ? t[i] : m16;
        return m16;
    }
    if (width == 4 && (uintptr_t)tokens % 4 == 0) {
        const uint32_t *t = (const uint32_t *)(const void *)tokens;
        for (uint64_t i = 0; i < n; i++) m = t[i] > m ? t[i] : m;
        return m;
    }
#endif
    for (uint64_t i = 0; i < n; i++) {
        uint32_t v = shard_token(tokens, width, i);
        m = v > m ? v : m;
    }
    return m;
}

static hg_status bad_token(const loader_shard *sh, uint64_t i) {
    int width = sh->info.token_bytes;
    return hg_fail(HG_ERR_FORMAT, "%s: offset %llu: token %u is not below the vocabulary size %u%s", sh->path,
                   (unsigned long long)(sh->header + i * (uint64_t)width), shard_token(sh->tokens, width, i), sh->vocab,
                   sh->info.format == HG_SHARD_NANOGPT ? " (the file has no handgrad or llm.c header, so it was read "
                                                         "as headerless nanoGPT uint16 tokens)" : "");
}

/* Every token of a shard is below its vocab; else the first that is not, by offset. */
static hg_status check_tokens(const loader_shard *sh) {
    int width = sh->info.token_bytes;
    uint64_t n = sh->info.n_tokens;
    if (sh->info.separator >= 0 && (uint32_t)sh->info.separator >= sh->vocab)
        return hg_fail(HG_ERR_FORMAT, "%s: offset 28: the header's separator id %d is not below the vocabulary size %u",
                       sh->path, sh->info.separator, sh->vocab);
    if ((width == 2 && sh->vocab >= 65536u) || (sh->info.id_bound && sh->info.id_bound <= sh->vocab) ||
        max_token(sh->tokens, width, n) < sh->vocab)
        return HG_OK; /* (a header bound that lies is still caught by the batch that reads the token) */
    uint64_t i = 0;
    while (shard_token(sh->tokens, width, i) < sh->vocab) i++;
    return bad_token(sh, i);
}

/* Whether a document starts at token i of a shard. */
static int doc_starts(const loader_shard *sh, uint64_t i) {
    if (i == 0) return 1;
    if (sh->flags) return (sh->flags[i] & HG_TOKEN_DOC) != 0;
    return shard_token(sh->tokens, sh->info.token_bytes, i) == (uint32_t)sh->info.separator;
}

/* Appends row (start, len) to sh's list, growing it (cap rows so far). */
static int add_row(loader_shard *sh, uint64_t *cap, uint64_t start, uint64_t len) {
    if (sh->n_rows == *cap) {
        uint64_t c = *cap ? 2 * *cap : 256;
        uint64_t *a = realloc(sh->row_start, c * sizeof *a);
        if (a) sh->row_start = a;
        uint32_t *b = a ? realloc(sh->row_len, c * sizeof *b) : NULL;
        if (!b) return 0;
        sh->row_len = b, *cap = c;
    }
    sh->row_start[sh->n_rows] = start, sh->row_len[sh->n_rows] = (uint32_t)len;
    sh->n_rows++;
    return 1;
}

/* A piece of L tokens in a packed row: its inputs (its last token is a target only when
 * it is a whole window of T+1). */
static uint64_t piece_inputs(uint64_t L, uint64_t T) { return L < T ? L : T; }

/* The smallest room >= want (<= T) that some row has: the first set bit of bits at or
 * after want, or T + 1 when none. */
static uint64_t least_room(const uint64_t *bits, uint64_t want, uint64_t T) {
    for (uint64_t w = want / 64; w <= T / 64; w++) {
        uint64_t m = bits[w] & (w == want / 64 ? ~0ull << (want % 64) : ~0ull);
        if (m) return w * 64 + (uint64_t)__builtin_ctzll(m);
    }
    return T + 1;
}

/* Packs a shard's pieces into rows, best fit: each piece in turn goes to the row whose
 * room is the least that holds it (the newest such row), or starts a new one. The rows
 * with some room are kept in a list per room, with a bitmap of the non-empty lists, so a
 * piece finds its row in T/64 word reads. Then the pieces are ordered by row, each row's
 * in shard order (order, row_first). */
static hg_status pack_rows(loader_shard *sh, uint64_t T) {
    const uint64_t n = sh->n_rows, none = UINT64_MAX;
    uint64_t *row_of = malloc((n + 1) * sizeof *row_of), *next = malloc((n + 1) * sizeof *next);
    uint64_t *head = malloc((T + 1) * sizeof *head), *bits = calloc(T / 64 + 1, sizeof *bits);
    uint64_t *room = malloc((n + 1) * sizeof *room);
    sh->row_first = calloc(n + 2, sizeof *sh->row_first);
    sh->order = malloc((n + 1) * sizeof *sh->order);
    hg_status st = HG_OK;
    if (!row_of || !next || !head || !bits || !room || !sh->row_first || !sh->order) {
        st = hg_fail(HG_ERR_NOMEM, "loader: out of memory");
    } else {
        for (uint64_t c = 0; c <= T; c++) head[c] = none;
        uint64_t rows = 0;
        for (uint64_t k = 0; k < n; k++) {
            const uint64_t in = piece_inputs(sh->row_len[k], T), c = least_room(bits, in, T);
            uint64_t r;
            if (c <= T) { /* off its room's list */
                r = head[c], head[c] = next[r];
                if (head[c] == none) bits[c / 64] &= ~(1ull << (c % 64));
                room[r] = c - in;
            } else {
                r = rows++, room[r] = T - in;
            }
            row_of[k] = r;
            if (room[r] > 0) { /* onto its new room's list */
                next[r] = head[room[r]], head[room[r]] = r;
                bits[room[r] / 64] |= 1ull << (room[r] % 64);
            }
        }
        for (uint64_t k = 0; k < n; k++) sh->row_first[row_of[k] + 1]++; /* pieces by row, in order */
        for (uint64_t r = 0; r < rows; r++) sh->row_first[r + 1] += sh->row_first[r];
        for (uint64_t k = 0; k < n; k++) sh->order[sh->row_first[row_of[k]]++] = k;
        for (uint64_t r = rows; r > 0; r--) sh->row_first[r] = sh->row_first[r - 1];
        sh->row_first[0] = 0;
        sh->n_packed = rows;
    }
    free(row_of), free(next), free(head), free(bits), free(room);
    return st;
}

/* The padded rows of a shard: each document of L >= 2 tokens, cut into windows of T+1
 * every T when it is longer (or refused, no_split); *split counts the documents cut. */
static hg_status list_rows(loader_shard *sh, const hg_loader_options *o, uint64_t *split) {
    const uint64_t n = sh->info.n_tokens, T = (uint64_t)o->seq_len;
    if (!sh->flags && sh->info.separator < 0 && n > 0)
        return hg_fail(HG_ERR_INVALID, "%s: padded and packed rows need where documents start, and this shard has neither "
                       "token flags nor a separator token (prepare it again, or use windows)", sh->path);
    uint64_t cap = 0;
    for (uint64_t a = 0; a < n;) {
        uint64_t b = a + 1;
        while (b < n && !doc_starts(sh, b)) b++;
        const uint64_t L = b - a;
        if (L > T + 1 && o->no_split)
            return hg_fail(HG_ERR_INVALID, "%s: offset %llu: a document of %llu tokens is longer than a row of T+1 = "
                           "%llu (no_split)", sh->path, (unsigned long long)(sh->header + a * (uint64_t)sh->info.token_bytes),
                           (unsigned long long)L, (unsigned long long)T + 1);
        *split += L > T + 1;
        for (uint64_t s = a; L >= 2 && s + 1 < b; s += T)
            if (!add_row(sh, &cap, s, b - s < T + 1 ? b - s : T + 1)) return hg_fail(HG_ERR_NOMEM, "loader: out of memory");
        a = b;
    }
    return HG_OK;
}

static hg_status loader_check_options(const hg_loader_options *o) {
    if (o->batch < 1) return hg_fail(HG_ERR_INVALID, "batch: %d; must be >= 1", o->batch);
    if (o->seq_len < 1) return hg_fail(HG_ERR_INVALID, "seq_len: %d; must be >= 1", o->seq_len);
    if (o->world_size < 1) return hg_fail(HG_ERR_INVALID, "world_size: %d; must be >= 1", o->world_size);
    if (o->rank < 0 || o->rank >= o->world_size)
        return hg_fail(HG_ERR_INVALID, "rank: %d; must be in [0, world_size = %d)", o->rank, o->world_size);
    if (o->vocab_size < 0) return hg_fail(HG_ERR_INVALID, "vocab_size: %d; must be >= 0", o->vocab_size);
    if (o->format < HG_SHARD_AUTO || o->format > HG_SHARD_NANOGPT)
        return hg_fail(HG_ERR_INVALID, "format: %d is not an hg_shard_format", (int)o->format);
    if (o->rows != HG_ROWS_WINDOWS && o->rows != HG_ROWS_PADDED && o->rows != HG_ROWS_PACKED)
        return hg_fail(HG_ERR_INVALID, "rows: %d is not an hg_loader_rows", (int)o->rows);
    return HG_OK;
}

hg_status hg_loader_open(hg_loader **out, const char *const *paths, int n_paths, const hg_loader_options *opt) {
    *out = NULL;
    HG_TRY(loader_check_options(opt));
    if (n_paths < 1) return hg_fail(HG_ERR_INVALID, "paths: no shards given");
    hg_loader *ld = calloc(1, sizeof *ld);
    if (!ld || !(ld->shards = calloc((size_t)n_paths, sizeof *ld->shards))) {
        free(ld);
        return hg_fail(HG_ERR_NOMEM, "loader: out of memory");
    }
    ld->opt = *opt;
    uint64_t T = (uint64_t)opt->seq_len;
    for (int i = 0; i < n_paths; i++) {
        loader_shard *sh = &ld->shards[i];
        ld->n_shards = i + 1;
        sh->path = strdup(paths[i]);
        if (!sh->path) {
            hg_loader_close(ld);
            return hg_fail(HG_ERR_NOMEM, "loader: out of memory");
        }
        hg_status s = file_map(paths[i], &sh->map, &sh->map_len);
        if (s == HG_OK) s = shard_parse(sh->map, sh->map_len, paths[i], opt->format, &sh->info, &sh->header);
        if (s == HG_OK) {
            sh->tokens = sh->map + sh->header;
            if (sh->info.has_flags) sh->flags = sh->tokens + sh->info.n_tokens * (uint64_t)sh->info.token_bytes;
            sh->vocab = opt->vocab_size        ? (uint32_t)opt->vocab_size
                        : sh->info.vocab_size  ? (uint32_t)sh->info.vocab_size
                        : sh->info.token_bytes == 2 ? 65536u
                                                    : (uint32_t)INT32_MAX;
            s = check_tokens(sh);
        }
        if (s == HG_OK && i > 0 && !sh->flags != !ld->shards[0].flags)
            s = hg_fail(HG_ERR_INVALID, "%s has token flags (a loss mask) and %s has none: prepare them alike",
                        sh->flags ? paths[i] : paths[0], sh->flags ? paths[0] : paths[i]);
        if (s == HG_OK && opt->rows != HG_ROWS_WINDOWS) s = list_rows(sh, opt, &ld->split_docs);
        if (s == HG_OK && opt->rows == HG_ROWS_PACKED) s = pack_rows(sh, T);
        if (s != HG_OK) {
            hg_loader_close(ld);
            return s;
        }
        sh->first_window = ld->n_windows;
        if (opt->rows == HG_ROWS_PADDED) ld->n_windows += sh->n_rows;
        else if (opt->rows == HG_ROWS_PACKED) ld->n_windows += sh->n_packed;
        else ld->n_windows += sh->info.n_tokens > 0 ? (sh->info.n_tokens - 1) / T : 0;
        ld->n_tokens += sh->info.n_tokens;
    }
    uint64_t per_batch = (uint64_t)opt->batch * (uint64_t)opt->world_size;
    ld->batches_per_epoch = ld->n_windows / per_batch;
    if (ld->batches_per_epoch == 0) {
        hg_status s = hg_fail(HG_ERR_INVALID,
                              "%s%s: %llu tokens make %llu %s of T+1 = %llu tokens; one batch for %d rank(s) "
                              "needs B * world_size = %llu",
                              paths[0], n_paths > 1 ? " and the other shards" : "", (unsigned long long)ld->n_tokens,
                              (unsigned long long)ld->n_windows,
                              opt->rows == HG_ROWS_PADDED   ? "padded rows (a document each)"
                              : opt->rows == HG_ROWS_PACKED ? "packed rows"
                                                            : "windows",
                              (unsigned long long)T + 1, opt->world_size, (unsigned long long)per_batch);
        hg_loader_close(ld);
        return s;
    }
    while ((1ull << (2 * ld->half_bits)) < ld->n_windows) ld->half_bits++;
    if (ld->half_bits == 0) ld->half_bits = 1;
    loader_epoch_keys(ld);
    *out = ld;
    return HG_OK;
}

hg_status hg_loader_open_glob(hg_loader **out, const char *pattern, const hg_loader_options *opt) {
    *out = NULL;
    glob_t g;
    int rc = glob(pattern, 0, NULL, &g);
    if (rc == GLOB_NOMATCH) return hg_fail(HG_ERR_IO, "%s: no file matches", pattern);
    if (rc != 0) return hg_fail(HG_ERR_IO, "%s: cannot list the files", pattern);
    hg_status s = g.gl_pathc > (size_t)INT32_MAX
                      ? hg_fail(HG_ERR_INVALID, "%s: too many files", pattern)
                      : hg_loader_open(out, (const char *const *)g.gl_pathv, (int)g.gl_pathc, opt);
    globfree(&g);
    return s;
}

/* The shard holding window w: the last shard whose first_window <= w. */
static const loader_shard *loader_shard_of(const hg_loader *ld, uint64_t w) {
    int lo = 0, hi = ld->n_shards - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (ld->shards[mid].first_window <= w) lo = mid;
        else hi = mid - 1;
    }
    /* A shard with no windows shares first_window with the next one, and the search
     * takes the last of equals, so it lands on the shard that holds windows. */
    return &ld->shards[lo];
}

/* Tokens [start, start + len) of a shard into n inputs of a row, their targets (the
 * next token where it is trained, -1 past the piece) and positions 0.. (pos may be
 * NULL). Past len the inputs are padding: token 0, never a target. */
static hg_status fill_piece(const loader_shard *sh, uint64_t start, int len, int n, int32_t *tok, int32_t *tgt,
                            int32_t *pos) {
    const int width = sh->info.token_bytes;
    for (int t = 0; t <= n; t++) {
        uint32_t v = 0;
        if (t < len) {
            v = shard_token(sh->tokens, width, start + (uint64_t)t);
            if (v >= sh->vocab) return bad_token(sh, start + (uint64_t)t); /* the file changed since open */
        }
        const int trained = t < len && (!sh->flags || sh->flags[start + (uint64_t)t] & HG_TOKEN_TRAIN);
        if (t < n) tok[t] = (int32_t)v;
        if (t < n && pos) pos[t] = t;
        if (t > 0) tgt[t - 1] = trained ? (int32_t)v : -1;
    }
    return HG_OK;
}

hg_status hg_loader_next_rows(hg_loader *ld, int32_t *tokens, int32_t *targets, int32_t *positions) {
    const int B = ld->opt.batch, T = ld->opt.seq_len;
    if (ld->opt.rows == HG_ROWS_PACKED && !positions)
        return hg_fail(HG_ERR_INVALID, "positions: packed rows hold several documents, whose positions the model "
                       "needs (hg_loader_next_rows)");
    uint64_t base = (ld->pos.batch * (uint64_t)ld->opt.world_size + (uint64_t)ld->opt.rank) * (uint64_t)B;
    for (int b = 0; b < B; b++) {
        const uint64_t w = loader_window_of_slot(ld, base + (uint64_t)b);
        const loader_shard *sh = loader_shard_of(ld, w);
        const uint64_t k = w - sh->first_window;
        int32_t *tok = tokens + (size_t)b * T, *tgt = targets + (size_t)b * T, *pos = positions ? positions + (size_t)b * T : NULL;
        if (ld->opt.rows == HG_ROWS_PACKED) { /* its pieces, then one run of padding */
            int c = 0;
            for (uint64_t u = sh->row_first[k]; u < sh->row_first[k + 1]; u++) {
                const uint64_t i = sh->order[u];
                const int in = (int)piece_inputs(sh->row_len[i], (uint64_t)T);
                HG_TRY(fill_piece(sh, sh->row_start[i], (int)sh->row_len[i], in, tok + c, tgt + c, pos + c));
                c += in;
            }
            if (c < T) HG_TRY(fill_piece(sh, 0, 0, T - c, tok + c, tgt + c, pos + c));
        } else if (ld->opt.rows == HG_ROWS_PADDED) {
            HG_TRY(fill_piece(sh, sh->row_start[k], (int)sh->row_len[k], T, tok, tgt, pos));
        } else {
            HG_TRY(fill_piece(sh, k * (uint64_t)T, T + 1, T, tok, tgt, pos));
        }
    }
    if (++ld->pos.batch == ld->batches_per_epoch) {
        ld->pos.batch = 0;
        ld->pos.epoch++;
        loader_epoch_keys(ld);
    }
    return HG_OK;
}

hg_status hg_loader_next(hg_loader *ld, int32_t *tokens, int32_t *targets) {
    return hg_loader_next_rows(ld, tokens, targets, NULL);
}

hg_loader_position hg_loader_tell(const hg_loader *ld) { return ld->pos; }

hg_status hg_loader_seek(hg_loader *ld, hg_loader_position pos) {
    if (pos.batch >= ld->batches_per_epoch)
        return hg_fail(HG_ERR_INVALID, "pos.batch: %llu; an epoch of these shards has %llu batches",
                       (unsigned long long)pos.batch, (unsigned long long)ld->batches_per_epoch);
    ld->pos = pos;
    loader_epoch_keys(ld);
    return HG_OK;
}

hg_status hg_loader_reset(hg_loader *ld) { return hg_loader_seek(ld, (hg_loader_position){0, 0}); }

uint64_t hg_loader_batches_per_epoch(const hg_loader *ld) { return ld->batches_per_epoch; }
uint64_t hg_loader_tokens(const hg_loader *ld) { return ld->n_tokens; }
uint64_t hg_loader_rows_total(const hg_loader *ld) { return ld->n_windows; }
uint64_t hg_loader_split_documents(const hg_loader *ld) { return ld->split_docs; }
uint64_t hg_loader_row_tokens(const hg_loader *ld) {
    if (ld->opt.rows == HG_ROWS_WINDOWS) return ld->n_windows * ((uint64_t)ld->opt.seq_len + 1);
    uint64_t n = 0;
    for (int i = 0; i < ld->n_shards; i++)
        for (uint64_t k = 0; k < ld->shards[i].n_rows; k++) n += ld->shards[i].row_len[k];
    return n;
}
int hg_loader_has_flags(const hg_loader *ld) { return ld->n_shards > 0 && ld->shards[0].flags != NULL; }
