/* Causal self-attention on the CPU, blockwise: forward with online softmax, backward
 * recomputing the scores; no T x T matrix is ever stored.
 *
 * q, k, v come from the QKV projection (B,T,W), W = (NH + 2 NKV) hs, with no permuted
 * copy of the whole tensor. K (and, for backward, V) are first transposed per kv head
 * into one (hs, BK) panel per key block, so that every tile product reads contiguous
 * rows (tile.h). Under grouped-query attention the NH/NKV query heads of a group share
 * their kv head's transposes and copies. Work items:
 *   forward  - one (head, query block), heaviest first, so causal blocks balance; the
 *              block's O stays in L1 while it sweeps over the key blocks;
 *   backward - one kv head with its group of query heads, which owns its dQ, dK and dV
 *              rows and sums dK, dV over the group in order: no atomics, and results do
 *              not depend on scheduling. Per query head the key blocks are the outer
 *              loop, as in FlashAttention-2's backward: a key block's dK and dV stay in L1
 *              while it sweeps over the query blocks that see it, and q, dO and dQ
 *              stream instead: 64 KB read or written per pair of blocks at hs = 64,
 *              against 112 KB for K, both panels, dK and dV the other way round. The
 *              group's first query head writes dK and dV, the others add.
 *              Taking the query blocks outer had the backward 10-15% slower at T = 4096
 *              and 256 (kernel lab, 2026-11-24; docs/benchmarks.md).
 *              With fewer than 4 groups per thread (B = 1 with 2 kv heads is 2 items),
 *              each group's query blocks are cut into chunks of equal causal work, one
 *              item each: a chunk owns its queries' dQ rows. The last chunk, whose
 *              queries see every key, writes dK and dV; the others' go to partials,
 *              added in chunk order afterwards (backward_chunks). The chunks depend on
 *              the thread count, as every reduction's order does.
 * Query t sees keys hg_attention_first_key .. t: its document's and its window's start
 * (packed documents, sliding windows) to itself. That first key never decreases along a
 * row, so a query block starts at its first row's first key block (and the backward stops
 * a key block's query blocks at the first that sees none of it). A tile that a mask edge
 * crosses (the causal diagonal, a document's start, a window's lower edge) runs in slabs
 * of SLAB query rows, each against only the columns it may see, 16 at a time (and, for dK
 * and dV, slabs of keys against the rows that see them); a whole tile is one product.
 * Every row a product streams is contiguous, not W floats apart in qkv and dqkv: the
 * forward reads V from a copy of all kv heads (where the backward keeps VT) and copies a
 * query block's q rows before its sweep; the backward copies a query head's q and dO rows
 * and a key block's K rows, and sums dQ in the thread's scratch. With the panels, that
 * made the backward 25-30% faster at T = 4096 on AVX2 tiles and about 18% on AVX-512
 * ones, and the forward 10-15% on AVX2, in the kernel lab (2026-11-24).
 * Scratch: KT and VT (forward: V) for all kv heads, (B*NKV, Tp/BK, hs, BK) each (V: (B*NKV,
 * Tp, hs)), plus per thread the tiles (the backward's K, dK and dV blocks among them) and
 * the backward's q, dO and dQ rows of a query head, (Tp, hs) each, and its row dots D (Tp);
 * then, for a backward cut into chunks, each group's dK and dV partials of all chunks but
 * the last.
 *
 * attention_cached (generation) is a separate, plain kernel: its queries are one row or
 * one prompt, and its keys are already stored head-major in the cache.
 *
 * In bf16, qkv, out, dout and dqkv (and the KV cache) hold bf16: every copy above
 * converts to fp32 on the way into the panels and rows, the tiles and softmax statistics
 * are fp32, and results are rounded once on the way out. So the bf16 op computes what the
 * fp32 op computes on the same bf16 inputs. dK and dV, which the group's query heads
 * add to, are summed in fp32 rows of the thread's scratch before that rounding. */
#include <string.h>

#include "backend/cpu/bf16.h"
#include "backend/cpu/cpu.h"
#include "backend/cpu/tile.h"
#include "backend/cpu/vecmath.h"

#define BQ 64 /* query rows per block */
#define BK 64 /* keys per block */
#define SLAB 16 /* rows per slab of a tile a mask edge crosses */
#define MAX_CHUNKS 16 /* backward: query chunks per kv group */

static size_t round16(size_t n) { return (n + 15) / 16 * 16; }
static int padded_len(int T) { return (T + BK - 1) / BK * BK; }
static int query_blocks(int T) { return (T + BQ - 1) / BQ; }
static size_t head_floats(const hg_attention_shape *s) { return (size_t)s->hs * padded_len(s->T); }
/* Backward: the P and dS tiles and the key block's K, dK and dV rows. Forward, in less:
 * the S tile, its O accumulator, the query block's q rows and two row vectors. */
static size_t tile_floats(int hs) { return round16(2 * BQ * BK + 3 * (size_t)BK * hs); }

/* m rows of hs values between fp32 rows (f, ldf apart) and rows of a buffer p starting at
 * element `at`, ldp apart, that holds bf16 when h, else fp32: loaded from p, stored to p,
 * or added to p. */
static inline void load_rows(int h, float *f, int ldf, const void *p, size_t at, size_t ldp, int m, int hs) {
    for (int r = 0; r < m; r++) elem_load(h, f + (size_t)r * ldf, p, at + r * ldp, (size_t)hs);
}
static inline void store_rows(int h, void *p, size_t at, size_t ldp, const float *f, int ldf, int m, int hs) {
    for (int r = 0; r < m; r++) elem_store(h, p, at + r * ldp, f + (size_t)r * ldf, (size_t)hs);
}
static inline void add_rows(int h, void *p, size_t at, size_t ldp, const float *f, int ldf, int m, int hs) {
    for (int r = 0; r < m; r++) elem_accum(h, p, at + r * ldp, f + (size_t)r * ldf, (size_t)hs);
}
/* The tiles, and the backward's contiguous q, dO and dQ rows of one query head and its
 * row dots D; in bf16 also the fp32 dK and dV rows of a kv group. */
static size_t thread_floats(const hg_backend *be, const hg_attention_shape *s) {
    return tile_floats(s->hs) + (cpu_bf16(be) ? 5 : 3) * head_floats(s) + round16((size_t)padded_len(s->T));
}

/* attention_cached: one row of scores per thread. */
static size_t cached_thread_floats(int Tc) { return round16((size_t)Tc); }

/* The layout of a QKV row: W floats, k of kv head g at k0 + g*hs, v at v0 + g*hs; query
 * head h reads kv head h / rep. */
typedef struct qkv_layout {
    int NKV, rep, W, k0, v0;
} qkv_layout;

static qkv_layout layout_of(const hg_attention_shape *s) {
    int NKV = hg_attention_kv_heads(s);
    return (qkv_layout){NKV, s->NH / NKV, (s->NH + 2 * NKV) * s->hs, s->NH * s->hs, (s->NH + NKV) * s->hs};
}

/* Backward work items. A kv group's query blocks are cut into chunks of about equal
 * causal work, so that a batch of few kv heads still spreads over the threads: enough
 * chunks for 4 items per thread, and for the same number on every thread where that
 * fits (at most MAX_CHUNKS, at least one block each); 1 when there are items enough, or
 * one thread. A chunk owns its query rows' dQ. The last chunk sees every key and writes
 * dK and dV; each other chunk's go to a partial of its own, added in chunk order
 * afterwards. */
static int backward_chunks(const hg_attention_shape *s, int threads) {
    int groups = s->B * hg_attention_kv_heads(s), nqb = query_blocks(s->T), want = 4 * threads;
    if (threads <= 1 || groups >= want) return 1;
    int n = (want + groups - 1) / groups, most = nqb < MAX_CHUNKS ? nqb : MAX_CHUNKS;
    while (n < most && groups * n % threads) n++; /* the same number of items per thread */
    return n < most ? n : most;
}

/* start[c]: the first query block of chunk c of n (start[n] = nqb), cutting the work
 * (causal: block i sees i + 1 key blocks) evenly; keys[c]: the key rows the chunk's
 * queries see; returns the sum of keys[]. One chunk is all blocks and keys. */
static size_t chunk_bounds(const hg_attention_shape *s, int n, int *start, int *keys) {
    int nqb = query_blocks(s->T);
    double total = s->causal ? 0.5 * nqb * (nqb + 1.0) : nqb;
    size_t sum = 0;
    start[0] = 0, start[n] = nqb;
    for (int c = 1; c < n; c++) {
        int k = start[c - 1] + 1;
        while (k < nqb - (n - c) && (s->causal ? 0.5 * k * (k + 1.0) : k) < total * c / n) k++;
        start[c] = k;
    }
    for (int c = 0; c < n; c++) {
        int end = start[c + 1] * BQ;
        keys[c] = s->causal && end < s->T ? end : s->T;
        sum += (size_t)keys[c];
    }
    return sum;
}

/* The backward's dK and dV partials: per kv group, per chunk but the last (which has all
 * T keys), (keys, hs) each. */
static size_t partial_floats(const hg_attention_shape *s, int n) {
    int start[MAX_CHUNKS + 1], keys[MAX_CHUNKS];
    return 2 * (size_t)s->B * hg_attention_kv_heads(s) * s->hs * (chunk_bounds(s, n, start, keys) - (size_t)s->T);
}

size_t cpu_attention_scratch_bytes(hg_backend *be, const hg_attention_shape *s) {
    size_t heads = (size_t)s->B * hg_attention_kv_heads(s);
    size_t blocked = 2 * heads * head_floats(s) + (size_t)be->threads * thread_floats(be, s) +
                     partial_floats(s, backward_chunks(s, be->threads));
    size_t cached = (size_t)be->threads * cached_thread_floats(s->T);
    return (blocked > cached ? blocked : cached) * sizeof(float);
}

/* dst (B*NKV, Tp/BK, hs, BK) = the kv heads of src (B,T,W, compute type) at column offset col0,
 * transposed in panels of BK time steps (key block j0's starts at j0 * hs), zero beyond
 * T: 16 x 16 blocks in registers (tile.h), the last partial block of time steps element
 * by element. A tile product reads a panel whole, 16 KB in one piece at hs = BK = 64,
 * where a (hs, Tp) layout put its rows Tp floats apart: all in the same L1 sets when Tp
 * is a multiple of 1024. One panel per work item, so that few heads still spread over
 * the threads (as in copy_heads). */
static void transpose_heads(hg_backend *be, float *dst, const float *src, int col0,
                            const hg_attention_shape *s) {
    const qkv_layout q = layout_of(s);
    int T = s->T, hs = s->hs, Tp = padded_len(T), ld = q.W, full = T / 16 * 16, nkb = Tp / BK;
    #pragma omp parallel for schedule(static) num_threads(be->threads)
    for (int item = 0; item < s->B * q.NKV * nkb; item++) { /* one panel each */
        int head = item / nkb, j0 = item % nkb * BK, b = head / q.NKV, h = head % q.NKV;
        int end = j0 + BK < full ? j0 + BK : full, tail = end > j0 ? end : j0;
        const size_t x = (size_t)b * T * ld + col0 + h * hs; /* element (0, 0) of the head in src */
        float *y = dst + (size_t)head * hs * Tp + (size_t)j0 * hs, blk[16 * 16], one;
        for (int t0 = j0; t0 < end; t0 += 16)
            for (int d0 = 0; d0 < hs; d0 += 16) {
                if (cpu_bf16(be)) { /* to fp32 first, 16 x 16 */
                    load_rows(1, blk, 16, src, x + (size_t)t0 * ld + d0, (size_t)ld, 16, 16);
                    tile_transpose16(blk, 16, y + d0 * BK + t0 - j0, BK);
                } else {
                    tile_transpose16(src + x + (size_t)t0 * ld + d0, ld, y + d0 * BK + t0 - j0, BK);
                }
            }
        for (int d = 0; d < hs; d++)
            for (int t = tail; t < j0 + BK; t++) {
                if (t < T) cpu_load(be, &one, src, x + (size_t)t * ld + d, 1);
                y[d * BK + t - j0] = t < T ? one : 0.0f;
            }
    }
}

/* dst (B*NKV, Tp, hs) = the kv heads of src (B,T,W, compute type) at column offset col0,
 * in contiguous fp32 rows (rows T..Tp-1 untouched). */
static void copy_heads(hg_backend *be, float *dst, const float *src, int col0, const hg_attention_shape *s) {
    const qkv_layout q = layout_of(s);
    int T = s->T, nkb = padded_len(T) / BK;
    #pragma omp parallel for schedule(static) num_threads(be->threads)
    for (int item = 0; item < s->B * q.NKV * nkb; item++) { /* BK rows each */
        int head = item / nkb, j0 = item % nkb * BK, b = head / q.NKV, h = head % q.NKV;
        size_t x = ((size_t)b * T + j0) * q.W + col0 + h * s->hs;
        float *y = dst + (size_t)head * head_floats(s) + (size_t)j0 * s->hs;
        load_rows(cpu_bf16(be), y, s->hs, src, x, (size_t)q.W, T - j0 < BK ? T - j0 : BK, s->hs);
    }
}

/* Keys of block j0 that query row i may see. */
static inline int visible_keys(const hg_attention_shape *s, int i, int j0) {
    int n = s->T - j0 < BK ? s->T - j0 : BK;
    if (s->causal && i - j0 + 1 < n) n = i - j0 + 1;
    return n;
}

/* The first key of block j0 that query row i of batch row b may see (0 unless a
 * document's or a window's start falls inside the block). */
static inline int first_visible(const hg_attention_shape *s, int b, int i, int j0) {
    int lo = hg_attention_first_key(s, b, i) - j0;
    return lo > 0 ? lo : 0;
}

/* Whether every query row up to i_last sees every key of the full block j0: off the
 * diagonal, and no row's document or window starts after j0 (the first key never
 * decreases, so the last row's decides). */
static inline int block_whole(const hg_attention_shape *s, int b, int i_last, int j0, int diag, int nk) {
    return !diag && nk == BK && hg_attention_first_key(s, b, i_last) <= j0;
}

/* Rows of the slab starting at r0 of an m-row block. */
static inline int slab_rows(int m, int r0) { return m - r0 < SLAB ? m - r0 : SLAB; }

/* The columns [*lo, *hi) of key block j0 (multiples of 16) that the slab of rows from r0
 * of query block i0 needs: up to the diagonal's when diag, from its first row's first
 * visible key (rounded down), the smallest of the slab's; empty when the slab sees none. */
static inline void slab_cols(const hg_attention_shape *s, int b, int i0, int r0, int j0, int diag, int *lo, int *hi) {
    *hi = diag ? r0 + SLAB : BK;
    *lo = first_visible(s, b, i0 + r0, j0) / 16 * 16;
    if (*lo > *hi) *lo = *hi;
}

/* The end of the rows (of m, from r_first) of query block i0 that see a key of the slab
 * of block j0 from c0: past the last whose first visible key is in or before it. */
static inline int slab_row_end(const hg_attention_shape *s, int b, int i0, int m, int r_first, int j0, int c0) {
    int r = m;
    while (r > r_first && first_visible(s, b, i0 + r - 1, j0) >= c0 + SLAB) r--;
    return r;
}

static inline int last_key_block(const hg_attention_shape *s, int i_last) {
    return (s->causal ? i_last : s->T - 1) / BK;
}

/* One row of the forward's online softmax over a block: the columns [a, b) of row (BK
 * scores, those in [lo, n) visible, a <= lo, n <= b) become its unnormalised
 * probabilities against the new running maximum *mx; the running sum *l and the output
 * accumulator o (hs) are rescaled to that maximum, which is skipped when the maximum did
 * not move (then the factor is exactly 1). Inlined with a = lo = 0, n = b = BK for the
 * blocks every row sees whole, so that those loops carry no mask; elsewhere [a, b) is
 * what the row's slab computed (slab_cols), and only those columns are read after.
 * Hidden keys are selected away whatever the slabs left there. The maximum is taken over
 * the raw scores and then scaled (scale > 0: the same value as the maximum of the scaled
 * scores). */
static inline __attribute__((always_inline)) void softmax_row(float *row, int a, int b, int lo, int n, float scale,
                                                              float *mx, float *l, float *o, int hs) {
    if (n <= lo) {
        if (b > a) memset(row + a, 0, sizeof(float) * (size_t)(b - a));
        return;
    }
    float bmax = -INFINITY;
    #pragma omp simd reduction(max : bmax)
    for (int c = a; c < b; c++) {
        float v = c >= lo && c < n ? row[c] : -INFINITY;
        bmax = v > bmax ? v : bmax;
    }
    float mnew = bmax * scale, sum = 0.0f;
    if (mnew > *mx) {
        float corr = expf(*mx - mnew);
        *l *= corr;
        #pragma omp simd
        for (int d = 0; d < hs; d++) o[d] *= corr;
        *mx = mnew;
    } else {
        mnew = *mx;
    }
    #pragma omp simd reduction(+ : sum)
    for (int c = a; c < b; c++) {
        float e = vexpf(HG_FMAF(row[c], scale, -mnew)), p = c >= lo && c < n ? e : 0.0f;
        row[c] = p;
        sum += p;
    }
    *l += sum;
}

/* A soft cap on a tile's raw scores (hs-term dots, not yet scaled): each z becomes
 * cap tanh(z scale / cap) / scale in place, so that the softmax's scaling gives the
 * capped score; with fac, fac[c] = 1 - tanh^2, the cap's derivative, for backward. */
static void cap_scores(float *row, int n, float scale, float cap, float *fac) {
    const float in = scale / cap, out = cap / scale;
    for (int c = 0; c < n; c++) {
        float t = tanhf(row[c] * in);
        row[c] = out * t;
        if (fac) fac[c] = 1.0f - t * t;
    }
}

hg_status cpu_attention_forward(hg_backend *be, float *out, float *lse, const float *qkv,
                                const hg_attention_shape *s, void *scratch) {
    const qkv_layout q = layout_of(s);
    const int T = s->T, hs = s->hs, C = s->NH * hs, ld = q.W, Tp = padded_len(T);
    const int heads = s->B * s->NH, nqb = query_blocks(T);
    const float scale = 1.0f / sqrtf((float)hs);
    const int bf = cpu_bf16(be);
    const size_t kv_floats = (size_t)s->B * q.NKV * head_floats(s);
    float *KT = scratch, *Vc = KT + kv_floats, *tiles = Vc + kv_floats;
    transpose_heads(be, KT, qkv, q.k0, s);
    copy_heads(be, Vc, qkv, q.v0, s);

    #pragma omp parallel num_threads(be->threads)
    {
        float *S = tiles + (size_t)omp_get_thread_num() * thread_floats(be, s);
        float *O = S + BQ * BK, *Q = O + BQ * hs, *mx = Q + BQ * hs, *l = mx + BQ;
        #pragma omp for schedule(dynamic, 1)
        for (long item = 0; item < (long)heads * nqb; item++) {
            int head = (int)(item / nqb), qb = nqb - 1 - (int)(item % nqb);
            int b = head / s->NH, h = head % s->NH, g = h / q.rep, i0 = qb * BQ, m = T - i0 < BQ ? T - i0 : BQ;
            load_rows(bf, Q, hs, qkv, ((size_t)b * T + i0) * ld + h * hs, (size_t)ld, m, hs);
            const float *V = Vc + ((size_t)b * q.NKV + g) * hs * Tp;
            const float *KTh = KT + ((size_t)b * q.NKV + g) * hs * Tp;
            for (int r = 0; r < m; r++) mx[r] = -INFINITY, l[r] = 0.0f;
            memset(O, 0, sizeof(float) * (size_t)m * hs);
            /* key blocks before the first row's document or window are hidden from the block */
            for (int kb = hg_attention_first_key(s, b, i0) / BK; kb <= last_key_block(s, i0 + m - 1); kb++) {
                int j0 = kb * BK, nk = T - j0 < BK ? T - j0 : BK, diag = s->causal && j0 == i0, lo, hi;
                const int whole = block_whole(s, b, i0 + m - 1, j0, diag, nk);
                if (whole) {
                    tile_gemm(m, BK, hs, Q, hs, 1, KTh + (size_t)j0 * hs, BK, S, BK, 0);
                } else { /* slabs of rows, each against the columns it may see */
                    for (int r0 = 0; r0 < m; r0 += SLAB) {
                        slab_cols(s, b, i0, r0, j0, diag, &lo, &hi);
                        if (hi > lo)
                            tile_gemm(slab_rows(m, r0), hi - lo, hs, Q + (size_t)r0 * hs, hs, 1, KTh + (size_t)j0 * hs + lo,
                                      BK, S + r0 * BK + lo, BK, 0);
                    }
                }
                if (s->softcap > 0)
                    for (int r = 0; r < m; r++) cap_scores(S + r * BK, visible_keys(s, i0 + r, j0), scale, s->softcap, NULL);
                if (whole) { /* every key visible to every row */
                    for (int r = 0; r < m; r++) softmax_row(S + r * BK, 0, BK, 0, BK, scale, mx + r, l + r, O + r * hs, hs);
                } else {
                    for (int r0 = 0; r0 < m; r0 += SLAB) {
                        slab_cols(s, b, i0, r0, j0, diag, &lo, &hi);
                        for (int r = r0; r < r0 + slab_rows(m, r0); r++)
                            softmax_row(S + r * BK, lo, hi, first_visible(s, b, i0 + r, j0), visible_keys(s, i0 + r, j0),
                                        scale, mx + r, l + r, O + r * hs, hs);
                    }
                }
                if (whole) {
                    tile_gemm(m, hs, nk, S, BK, 1, V + (size_t)j0 * hs, hs, O, hs, 1);
                } else {
                    for (int r0 = 0; r0 < m; r0 += SLAB) {
                        slab_cols(s, b, i0, r0, j0, diag, &lo, &hi);
                        if (hi > nk) hi = nk;
                        if (hi > lo)
                            tile_gemm(slab_rows(m, r0), hs, hi - lo, S + r0 * BK + lo, BK, 1, V + (size_t)(j0 + lo) * hs,
                                      hs, O + r0 * hs, hs, 1);
                    }
                }
            }
            for (int r = 0; r < m; r++) {
                float *o = O + r * hs, inv = 1.0f / l[r];
                #pragma omp simd
                for (int d = 0; d < hs; d++) o[d] *= inv;
                lse[(size_t)head * T + i0 + r] = mx[r] + logf(l[r]);
            }
            store_rows(bf, out, ((size_t)b * T + i0) * C + h * hs, (size_t)C, O, hs, m, hs);
        }
    }
    return HG_OK;
}

/* One row of the backward's recomputed probabilities and score gradients over the
 * columns [a, b): p (scores in, probabilities out) = exp(score * scale - ls), ds (dP in,
 * dS out) = p (dP - D) scale, both zero outside the visible keys [lo, n). Inlined with
 * a = lo = 0, n = b = BK as softmax_row is; elsewhere [a, b) is the slab's columns, the
 * only ones the products read after. */
static inline __attribute__((always_inline)) void grad_row(float *p, float *ds, int a, int b, int lo, int n,
                                                           float scale, float ls, float D) {
    #pragma omp simd
    for (int c = a; c < b; c++) {
        int in = c >= lo && c < n;
        float e = vexpf(p[c] * scale - ls), pc = in ? e : 0.0f;
        p[c] = pc;
        ds[c] = in ? pc * (ds[c] - D) * scale : 0.0f;
    }
}

hg_status cpu_attention_backward(hg_backend *be, float *dqkv, const float *dout, const float *qkv,
                                 const float *out, const float *lse, const hg_attention_shape *s,
                                 void *scratch) {
    const qkv_layout q = layout_of(s);
    const int T = s->T, hs = s->hs, C = s->NH * hs, ld = q.W, Tp = padded_len(T);
    const int groups = s->B * q.NKV, nkb = last_key_block(s, T - 1) + 1;
    const int nch = backward_chunks(s, be->threads);
    const float scale = 1.0f / sqrtf((float)hs);
    const int bf = cpu_bf16(be);
    int start[MAX_CHUNKS + 1], keys[MAX_CHUNKS];
    size_t part_off[MAX_CHUNKS], per_group = 0; /* a chunk's partials within its group's */
    chunk_bounds(s, nch, start, keys);
    for (int c = 0; c < nch - 1; c++) part_off[c] = per_group, per_group += 2 * (size_t)keys[c] * hs;
    float *KT = scratch, *VT = KT + groups * head_floats(s), *tiles = VT + groups * head_floats(s);
    float *part = tiles + (size_t)be->threads * thread_floats(be, s);
    transpose_heads(be, KT, qkv, q.k0, s);
    transpose_heads(be, VT, qkv, q.v0, s);

    #pragma omp parallel num_threads(be->threads)
    {
        float *P = tiles + (size_t)omp_get_thread_num() * thread_floats(be, s);
        float *dS = P + BQ * BK, *Kb = dS + BQ * BK, *dKb = Kb + BK * hs, *dVb = dKb + BK * hs; /* (BK, hs) */
        float *Qc = P + tile_floats(hs), *dOc = Qc + head_floats(s), *dQc = dOc + head_floats(s); /* (Tp, hs) */
        float *D = dQc + head_floats(s); /* (Tp) */
        float *dKf = D + round16((size_t)Tp), *dVf = dKf + head_floats(s); /* bf16: a group's dK, dV (Tp, hs) */
        #pragma omp for schedule(dynamic, 1)
        for (int item = 0; item < groups * nch; item++) {
            int group = item / nch, ch = item % nch, b = group / q.NKV, g = group % q.NKV;
            int qb0 = start[ch], qb1 = start[ch + 1], qa = qb0 * BQ, qe = qb1 * BQ < T ? qb1 * BQ : T;
            const size_t kg = (size_t)b * T * ld + q.k0 + g * hs, vg = kg + (q.v0 - q.k0); /* elements of qkv */
            const float *KTh = KT + (size_t)group * hs * Tp, *VTh = VT + (size_t)group * hs * Tp;
            /* where the chunk's dK and dV rows go: dqkv itself for the last chunk in fp32 (in
             * bf16 the fp32 rows dKf, dVf, rounded into dqkv after the group), a partial
             * for the others */
            float *dKg, *dVg;
            int ldkv = hs;
            if (ch < nch - 1)
                dKg = part + group * per_group + part_off[ch], dVg = dKg + (size_t)keys[ch] * hs;
            else if (bf)
                dKg = dKf, dVg = dVf;
            else
                dKg = dqkv + kg, dVg = dqkv + vg, ldkv = ld;
            for (int h = g * q.rep; h < (g + 1) * q.rep; h++) {
                const float *lse_h = lse + ((size_t)b * s->NH + h) * T;
                const size_t oh = (size_t)b * T * C + h * hs, qh = (size_t)b * T * ld + h * hs; /* elements */
                load_rows(bf, Qc + (size_t)qa * hs, hs, qkv, qh + (size_t)qa * ld, (size_t)ld, qe - qa, hs);
                load_rows(bf, dOc + (size_t)qa * hs, hs, dout, oh + (size_t)qa * C, (size_t)C, qe - qa, hs);
                for (int i = qa; i < qe; i++) {
                    /* in bf16 the row of O goes through dQc's row, unused until the key loop */
                    const float *o = cpu_view(be, out, oh + (size_t)i * C, (size_t)hs, dQc + (size_t)i * hs);
                    const float *gr = dOc + (size_t)i * hs;
                    float dot = 0.0f;
                    #pragma omp simd reduction(+ : dot)
                    for (int d = 0; d < hs; d++) dot += o[d] * gr[d];
                    D[i] = dot;
                }
                /* dQ accumulates from zero: under documents or windows a query block's first
                 * key block need not be block 0 */
                memset(dQc + (size_t)qa * hs, 0, sizeof(float) * (size_t)(qe - qa) * hs);
                for (int kb = 0; kb <= last_key_block(s, qe - 1); kb++) {
                    int j0 = kb * BK, nk = T - j0 < BK ? T - j0 : BK, qbs = s->causal && kb > qb0 ? kb : qb0;
                    memset(dKb, 0, sizeof(float) * 2 * BK * hs);
                    /* no query of the chunk sees the block: its dK and dV rows are 0 */
                    if (qbs < qb1 && hg_attention_first_key(s, b, qbs * BQ) < j0 + nk)
                        load_rows(bf, Kb, hs, qkv, kg + (size_t)j0 * ld, (size_t)ld, nk, hs);
                    for (int qb = qbs; qb < qb1; qb++) {
                        int i0 = qb * BQ, m = T - i0 < BQ ? T - i0 : BQ, diag = s->causal && j0 == i0;
                        /* this query block's first row, and so every later one, sees none of
                         * the key block: past its documents or windows */
                        if (hg_attention_first_key(s, b, i0) >= j0 + nk) break;
                        const float *Q = Qc + (size_t)i0 * hs, *dO = dOc + (size_t)i0 * hs;
                        float *dQ = dQc + (size_t)i0 * hs;
                        const int whole = block_whole(s, b, i0 + m - 1, j0, diag, nk);
                        int lo, hi;
                        if (whole) {
                            tile_gemm(m, BK, hs, Q, hs, 1, KTh + (size_t)j0 * hs, BK, P, BK, 0);   /* S = Q K^T */
                            tile_gemm(m, BK, hs, dO, hs, 1, VTh + (size_t)j0 * hs, BK, dS, BK, 0);  /* dP = dO V^T */
                        } else { /* slabs of rows against the columns they see */
                            for (int r0 = 0; r0 < m; r0 += SLAB) {
                                const int mr = slab_rows(m, r0);
                                slab_cols(s, b, i0, r0, j0, diag, &lo, &hi);
                                if (hi == lo) continue;
                                tile_gemm(mr, hi - lo, hs, Q + (size_t)r0 * hs, hs, 1, KTh + (size_t)j0 * hs + lo, BK,
                                          P + r0 * BK + lo, BK, 0);
                                tile_gemm(mr, hi - lo, hs, dO + (size_t)r0 * hs, hs, 1, VTh + (size_t)j0 * hs + lo, BK,
                                          dS + r0 * BK + lo, BK, 0);
                            }
                        }
                        if (s->softcap > 0) { /* the scores capped again, dS times the cap's derivative */
                            float fac[BK];
                            for (int r = 0; r < m; r++) { /* (columns a slab left unwritten are masked) */
                                const int n = visible_keys(s, i0 + r, j0), first = first_visible(s, b, i0 + r, j0);
                                cap_scores(P + r * BK, n, scale, s->softcap, fac);
                                grad_row(P + r * BK, dS + r * BK, 0, BK, first, n, scale, lse_h[i0 + r], D[i0 + r]);
                                for (int c = first; c < n; c++) dS[r * BK + c] *= fac[c];
                            }
                        } else if (whole) {
                            for (int r = 0; r < m; r++)
                                grad_row(P + r * BK, dS + r * BK, 0, BK, 0, BK, scale, lse_h[i0 + r], D[i0 + r]);
                        } else {
                            for (int r0 = 0; r0 < m; r0 += SLAB) {
                                slab_cols(s, b, i0, r0, j0, diag, &lo, &hi);
                                for (int r = r0; r < r0 + slab_rows(m, r0); r++)
                                    grad_row(P + r * BK, dS + r * BK, lo, hi, first_visible(s, b, i0 + r, j0),
                                             visible_keys(s, i0 + r, j0), scale, lse_h[i0 + r], D[i0 + r]);
                            }
                        }
                        if (!whole) {
                            /* query slab r0 sees its columns [lo, hi); key slab c0 is seen by the
                             * rows from the diagonal's (c0; 0 off it) to the last whose first
                             * visible key is in or before the slab. P and dS are 0 elsewhere. */
                            for (int r0 = 0; r0 < m; r0 += SLAB) {
                                slab_cols(s, b, i0, r0, j0, diag, &lo, &hi);
                                if (hi > nk) hi = nk;
                                if (hi > lo)
                                    tile_gemm(slab_rows(m, r0), hs, hi - lo, dS + r0 * BK + lo, BK, 1, Kb + (size_t)lo * hs,
                                              hs, dQ + r0 * hs, hs, 1);
                            }
                            for (int c0 = 0; c0 < nk; c0 += SLAB) {
                                const int r1 = diag ? c0 : 0, r2 = slab_row_end(s, b, i0, m, r1, j0, c0);
                                if (r2 <= r1) continue;
                                tile_gemm(slab_rows(nk, c0), hs, r2 - r1, dS + r1 * BK + c0, 1, BK, Q + (size_t)r1 * hs, hs,
                                          dKb + c0 * hs, hs, 1);
                                tile_gemm(slab_rows(nk, c0), hs, r2 - r1, P + r1 * BK + c0, 1, BK, dO + (size_t)r1 * hs, hs,
                                          dVb + c0 * hs, hs, 1);
                            }
                            continue;
                        }
                        tile_gemm(m, hs, nk, dS, BK, 1, Kb, hs, dQ, hs, 1); /* dQ += dS K */
                        tile_gemm(nk, hs, m, dS, 1, BK, Q, hs, dKb, hs, 1);      /* dK += dS^T Q */
                        tile_gemm(nk, hs, m, P, 1, BK, dO, hs, dVb, hs, 1);      /* dV += P^T dO */
                    }
                    /* the group's first query head writes the key block's dK and dV rows, the
                     * others add to them */
                    if (h == g * q.rep) {
                        store_rows(0, dKg, (size_t)j0 * ldkv, (size_t)ldkv, dKb, hs, nk, hs);
                        store_rows(0, dVg, (size_t)j0 * ldkv, (size_t)ldkv, dVb, hs, nk, hs);
                    } else {
                        add_rows(0, dKg, (size_t)j0 * ldkv, (size_t)ldkv, dKb, hs, nk, hs);
                        add_rows(0, dVg, (size_t)j0 * ldkv, (size_t)ldkv, dVb, hs, nk, hs);
                    }
                }
                store_rows(bf, dqkv, qh + (size_t)qa * ld, (size_t)ld, dQc + (size_t)qa * hs, hs, qe - qa, hs);
            }
            if (bf && ch == nch - 1) {
                store_rows(1, dqkv, kg, (size_t)ld, dKf, hs, T, hs);
                store_rows(1, dqkv, vg, (size_t)ld, dVf, hs, T, hs);
            }
        }
        if (nch > 1) { /* each key block's dK and dV: the other chunks' partials, in order */
            #pragma omp for schedule(static)
            for (int item = 0; item < groups * nkb; item++) {
                int group = item / nkb, b = group / q.NKV, g = group % q.NKV, j0 = item % nkb * BK;
                int nk = T - j0 < BK ? T - j0 : BK;
                size_t dk = ((size_t)b * T + j0) * ld + q.k0 + g * hs, dv = dk + (q.v0 - q.k0);
                for (int c = 0; c < nch - 1; c++) {
                    if (keys[c] <= j0) continue; /* its queries do not see the block */
                    const float *pK = part + group * per_group + part_off[c] + (size_t)j0 * hs;
                    add_rows(bf, dqkv, dk, (size_t)ld, pK, hs, nk, hs);
                    add_rows(bf, dqkv, dv, (size_t)ld, pK + (size_t)keys[c] * hs, hs, nk, hs);
                }
            }
        }
    }
    return HG_OK;
}

/* Work items are (head, new row), longest rows first. Each row's scores go to the
 * thread's scratch row, then one pass of exponentials and one weighted sum of values:
 * O(len * hs) per (head, row). */
hg_status cpu_attention_cached(hg_backend *be, float *out, float *kcache, float *vcache, const float *qkv,
                               const hg_kv_shape *s, void *scratch) {
    const int n = s->n, hs = s->hs, NH = s->NH, NKV = s->NKV ? s->NKV : NH, C = NH * hs, Tc = s->Tc;
    const int ld = (NH + 2 * NKV) * hs, rep = NH / NKV;
    const size_t E = hg_precision_bytes(be->precision);
    const float scale = 1.0f / sqrtf((float)hs);
    #pragma omp parallel num_threads(be->threads)
    {
        #pragma omp for schedule(static)
        for (long item = 0; item < (long)NKV * n; item++) {
            int g = (int)(item / n), i = (int)(item % n);
            size_t row = (size_t)i * ld + C + g * hs, at = ((size_t)g * Tc + s->pos0 + i) * hs;
            memcpy(cpu_elems(be, kcache, at), cpu_elems(be, qkv, row), E * hs);
            memcpy(cpu_elems(be, vcache, at), cpu_elems(be, qkv, row + (size_t)NKV * hs), E * hs);
        }
        float *sc = (float *)scratch + (size_t)omp_get_thread_num() * cached_thread_floats(Tc);
        float qb[CPU_ROWBUF(be, hs)], kb[CPU_ROWBUF(be, hs)], ob[hs];
        #pragma omp for schedule(dynamic, 1)
        for (long item = 0; item < (long)NH * n; item++) {
            int h = (int)(item / n), i = n - 1 - (int)(item % n), len = s->pos0 + i + 1;
            /* with a window only its last `window` rows: sc[] and the loops start at j0 */
            const int j0 = s->window > 0 && len > s->window ? len - s->window : 0;
            const float *q = cpu_view(be, qkv, (size_t)i * ld + h * hs, (size_t)hs, qb);
            const size_t K = (size_t)(h / rep) * Tc * hs; /* the kv head's first row, in elements */
            float mx = -INFINITY, sum = 0.0f;
            for (int j = j0; j < len; j++) {
                const float *k = cpu_view(be, kcache, K + (size_t)j * hs, (size_t)hs, kb);
                float dot = 0.0f;
                #pragma omp simd reduction(+ : dot)
                for (int d = 0; d < hs; d++) dot += q[d] * k[d];
                sc[j] = s->softcap > 0 ? s->softcap * tanhf(dot * scale / s->softcap) : dot * scale;
                mx = sc[j] > mx ? sc[j] : mx;
            }
            #pragma omp simd reduction(+ : sum)
            for (int j = j0; j < len; j++) {
                float p = expf(sc[j] - mx);
                sc[j] = p;
                sum += p;
            }
            float *o = ob, inv = 1.0f / sum;
            memset(o, 0, sizeof(float) * hs);
            for (int j = j0; j < len; j++) {
                const float *v = cpu_view(be, vcache, K + (size_t)j * hs, (size_t)hs, kb);
                float p = sc[j];
                #pragma omp simd
                for (int d = 0; d < hs; d++) o[d] += p * v[d];
            }
            #pragma omp simd
            for (int d = 0; d < hs; d++) o[d] *= inv;
            cpu_store(be, out, (size_t)i * C + h * hs, o, (size_t)hs);
        }
    }
    return HG_OK;
}
