/* Causal multi-head attention on the GPU: handgrad's flash attention, forward and
 * backward. Memory is linear in T: no T x T matrix exists; scores live in registers a
 * 16 x 64 tile at a time.
 *
 * A block is 4 warps. Tiles of 64 keys; the forward and dQ kernels own 128 query rows a
 * block at head width 64 (two 16-row tiles a warp, so each K or V fragment feeds two
 * products) and 64 at 128 (one tile a warp: two would not fit in registers); the dK/dV
 * kernel owns 64 keys, 16 a warp. Tiles are copied from the QKV projection in place
 * (B,T,W; q | k | v heads as in cuda.h) into shared memory by cp.async, the streamed ones
 * double-buffered so the next tile lands while this one is used. Fragments come from
 * shared memory by ldmatrix; P and dS stay in registers and become the next product's A
 * operand (arch/mma.cuh). Softmax runs in base 2; every accumulator is fp32, P and dS are
 * rounded to bf16 as operands. Masks are applied only to tiles the diagonal or T cuts.
 *
 *   forward  - a one-dimensional grid of (query block, b, head), heaviest (last) query
 *              blocks of every head first: online softmax, O rescaled per key block;
 *              writes out (B,T,C) and lse (B,NH,T), C = NH hs.
 *   backward - D = rowsum(dO * O) (B,NH,T) into scratch; then dK, dV with a block per key
 *              block of a kv head walking the query blocks of each query head of its
 *              group in turn (grouped-query attention's sum over the group, in a fixed
 *              order), and dQ with a block per query block walking the key blocks. Two
 *              kernels recompute P instead of sharing dQ through atomics: no atomics,
 *              deterministic, about 1.4x the backward FLOPs of a single pass
 *              (docs/cuda.md).
 *
 * Head sizes: any multiple of 16 up to 128, compiled for widths 64 and 128. These
 * kernels are bf16 (tensor cores); fp32 mode (a checking mode), and bf16 head sizes up
 * to 256 that cuDNN does not take, run the simple kernels of attention_rows.cu instead.
 *
 * Gemma 2's score cap (attn_softcap): each kernel has a second instantiation (CAP) that
 * caps the scaled scores, c tanh(z / c), before the softmax, and multiplies dS by the
 * cap's slope; cuDNN's graph has no cap, so capped attention always runs here.
 *
 * Sliding windows and packed documents (hg_attention_shape.window, .pos; 2026-11-28,
 * written without a GPU): a query's first key is its window's or its document's start,
 * which never decreases along a row, so the forward and dQ kernels start at the first
 * row's first key block, and the dK/dV kernel stops at the query block where the window
 * ends or the next document starts (found by a scan of the positions); tiles a mask edge
 * crosses are masked element by element, the rows' document starts in shared memory.
 * cuDNN's graph here has neither, so they always run here. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "backend/cuda/arch/mma.cuh"
#include "backend/cuda/cuda.h"
#ifdef HG_HAVE_CUDNN
#include "backend/cuda/cudnn_attention.h"
#endif

enum { BK = 64, WARPS = 4, THREADS = 32 * WARPS };

/* Row tiles of 16 a warp takes in the kernels that own query rows (forward, dQ): two at
 * head width 64, so each K or V fragment read from shared memory feeds two products;
 * one at 128, where two would not fit in registers. A block owns BM = 64 MT query rows.
 * The dK/dV kernel owns 64 keys (16 a warp) and walks query blocks of BQ = 64 rows. */
template <int HSM>
struct row_tiles {
    static constexpr int MT = HSM <= 64 ? 2 : 1;
    static constexpr int BM = 16 * MT * WARPS;
};
enum { BQ = 64 };

/* Shared memory: tiles of 64 rows x HSM columns padded by 16 bytes a row (ldmatrix reads
 * 8 rows at a stride of LD: the pad spreads them over all banks). The streamed tiles are
 * double-buffered. */
template <typename T, int HSM>
struct tiles {
    static constexpr int LD = HSM + 16 / (int)sizeof(T);
    static constexpr int ELEMS = 64 * LD;
    static constexpr size_t tile = (size_t)ELEMS * sizeof(T);
    static constexpr int MT = row_tiles<HSM>::MT;
    static constexpr size_t forward = (MT + 4) * tile;                      /* Q; K, V twice */
    static constexpr size_t backward_kv = 6 * tile + 2 * 2 * 64 * sizeof(float); /* K, V; Q, dO twice; lse, D twice */
    static constexpr size_t backward_q = (2 * MT + 4) * tile;                /* Q, dO; K, V twice */
    static_assert(LD * sizeof(T) % 16 == 0, "ldmatrix and cp.async need 16-byte aligned rows");
    static_assert(tile % 16 == 0, "tiles start 16-byte aligned");
};

/* 16 bytes global -> shared without registers; src_bytes 0 fills zeros (rows past T). */
__device__ __forceinline__ void cp_async16(void *dst, const void *src, int src_bytes) {
    uint32_t d = (uint32_t)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src), "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

/* Starts copying dst (R, LD) = rows r0.. of src (rows of stride ld, hs columns); rows
 * >= n become zeros. The caller commits and waits. */
template <typename T, int LD, int R = 64>
__device__ __forceinline__ void load_tile_async(T *dst, const T *src, size_t ld, int r0, int n, int hs) {
    constexpr int V = 16 / (int)sizeof(T);
    const int per_row = hs / V;
    for (int idx = threadIdx.x; idx < R * per_row; idx += THREADS) {
        int r = idx / per_row, c = idx % per_row * V;
        int in = r0 + r < n;
        cp_async16(dst + r * LD + c, src + (size_t)(in ? r0 + r : 0) * ld + c, in ? 16 : 0);
    }
}

/* acc[MT][8][4] (16 MT x 64) = A (16 MT x hs, rows a, stride LD) @ B^T (B: 64 rows b,
 * stride LD): S = Q K^T and its relatives. Each B fragment serves the MT row tiles. */
template <int HSM, int LD, int MT>
__device__ __forceinline__ void scores(float acc[MT][8][4], const bf16 *a, const bf16 *b, int hs) {
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int nt = 0; nt < 8; nt++) acc[mt][nt][0] = acc[mt][nt][1] = acc[mt][nt][2] = acc[mt][nt][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < HSM / 16; kk++) {
        if (kk * 16 >= hs) break;
        mma_a<bf16> fa[MT];
#pragma unroll
        for (int mt = 0; mt < MT; mt++) ldsm_a(fa[mt], a + mt * 16 * LD + kk * 16, LD);
#pragma unroll
        for (int np = 0; np < 4; np++) {
            mma_b<bf16> f0, f1;
            ldsm_b2_nrows(f0, f1, b + np * 16 * LD + kk * 16, LD);
#pragma unroll
            for (int mt = 0; mt < MT; mt++) {
                mma(acc[mt][2 * np], fa[mt], f0);
                mma(acc[mt][2 * np + 1], fa[mt], f1);
            }
        }
    }
}

/* acc[MT][HSM/8][4] (16 MT x hs) += W (16 MT x 64, accumulator tiles w, rounded to bf16)
 * @ X (64 rows x, stride LD): O += P V and the gradients' products. */
template <int HSM, int LD, int MT>
__device__ __forceinline__ void accumulate(float acc[MT][HSM / 8][4], const float w[MT][8][4], const bf16 *x, int hs) {
#pragma unroll
    for (int kk = 0; kk < BK / 16; kk++) {
        mma_a<bf16> fa[MT];
#pragma unroll
        for (int mt = 0; mt < MT; mt++) a_from_acc(fa[mt], w[mt][2 * kk], w[mt][2 * kk + 1]);
#pragma unroll
        for (int dp = 0; dp < HSM / 16; dp++) {
            if (dp * 16 >= hs) break;
            mma_b<bf16> f0, f1;
            ldsm_b2_krows(f0, f1, x + kk * 16 * LD + dp * 16, LD);
#pragma unroll
            for (int mt = 0; mt < MT; mt++) {
                mma(acc[mt][2 * dp], fa[mt], f0);
                mma(acc[mt][2 * dp + 1], fa[mt], f1);
            }
        }
    }
}

template <int MT, int N>
__device__ __forceinline__ void zero(float (&a)[MT][N][4]) {
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int n = 0; n < N; n++) a[mt][n][0] = a[mt][n][1] = a[mt][n][2] = a[mt][n][3] = 0.0f;
}

__device__ __forceinline__ float quad_max(float v) {
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
    return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
__device__ __forceinline__ float quad_sum(float v) {
    v += __shfl_xor_sync(0xffffffffu, v, 1);
    return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

/* The 16-bit pair (lo, hi) stored at y (4-byte aligned). */
__device__ __forceinline__ void store_pair(bf16 *y, float lo, float hi) {
    *(uint32_t *)y = pack_bf16(__float2bfloat16_rn(lo), __float2bfloat16_rn(hi));
}

/* The band of a causal mask: query i sees keys j with 0 <= i - j < band, band the
 * window, or T without one; 0 when not causal (every key). One unsigned compare. */
static inline int band_of(const hg_attention_shape *s) {
    return !s->causal ? 0 : s->window > 0 && s->window < s->T ? s->window : s->T;
}

/* Packed documents (hg_attention_shape.pos, here a device copy of one row's positions,
 * or NULL): query i sees no key before its document's start, i - pos[i]. Starts never
 * decrease along a row, so a tile's last row has its largest start. */
__device__ __forceinline__ int doc_start(const int32_t *pos, int i) { return pos ? i - pos[i] : 0; }

/* Whether query i, of document start ds, may see key j. */
__device__ __forceinline__ bool visible(int i, int j, int n, int band, int ds) {
    return i < n && j < n && j >= ds && (band <= 0 || (unsigned)(i - j) < (unsigned)band);
}

/* Whether every query of rows [q0, q0 + nq) sees every key of block kb: no mask; ds_last
 * is the document start of the last of those rows (below n). */
__device__ __forceinline__ bool all_visible(int q0, int nq, int kb, int n, int band, int ds_last) {
    return q0 + nq <= n && (kb + 1) * BK <= n && kb * BK >= ds_last &&
           (band <= 0 || ((kb + 1) * BK - 1 <= q0 && kb * BK > q0 + nq - 1 - band));
}

/* The first key block that row q0 (and so every later row) sees: its window's, or its
 * document's, whichever is later. */
__device__ __forceinline__ int first_key_block(int q0, int band, int ds0) {
    const int w = band > 0 && q0 - band + 1 > 0 ? (q0 - band + 1) / BK : 0;
    return ds0 / BK > w ? ds0 / BK : w;
}

/* The last key block that rows [q0, q0 + nq) see. */
__device__ __forceinline__ int last_key_block(int q0, int nq, int n, int causal) {
    int all = (n + BK - 1) / BK - 1, diag = (q0 + nq - 1) / BK;
    return causal && diag < all ? diag : all;
}

/* Softmax runs in base 2: scores are scaled by scale log2(e), lse by log2(e). */
#define LOG2E 1.4426950408889634f
__device__ __forceinline__ float exp2_fast(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

/* Scores in base-2 units: s scale log2(e); with the cap c of Gemma 2 (CAP),
 * c tanh(s scale / c) log2(e). slope: the cap's derivative 1 - tanh^2 at such a capped
 * score (1 without a cap). */
template <bool CAP>
struct score_map {
    float mul, inner, outer;
    __device__ __forceinline__ score_map(float scale, float cap)
        : mul(scale * LOG2E), inner(CAP ? scale / cap : 0.0f), outer(CAP ? cap * LOG2E : 0.0f) {}
    __device__ __forceinline__ float operator()(float s) const { return CAP ? outer * tanhf(s * inner) : s * mul; }
    __device__ __forceinline__ float slope(float x2) const {
        if (!CAP) return 1.0f;
        float t = x2 / outer;
        return 1.0f - t * t;
    }
};

/* The grid is one-dimensional, blocks = row blocks x heads (no 65535 limit on heads):
 * block x takes row-block rank x / heads of head x % heads, so every head's first rank
 * starts in the first wave. */
__device__ __forceinline__ void block_coords(int heads, int *rank, int *head) {
    *rank = (int)(blockIdx.x / (unsigned)heads);
    *head = (int)(blockIdx.x % (unsigned)heads);
}

template <typename T, int HSM, bool CAP>
__global__ void __launch_bounds__(THREADS)
    flash_forward_kernel(T *out /* (B,T,C) */, float *lse /* (B,NH,T) */, const T *qkv /* (B,T,W) */,
                         const int32_t *pos /* (B,T) or NULL */, int Tn, int NH, int NKV, int hs, int causal, int band,
                         float scale, float cap, int heads) {
    typedef tiles<T, HSM> L;
    constexpr int LD = L::LD, MT = row_tiles<HSM>::MT, BM = row_tiles<HSM>::BM;
    extern __shared__ __align__(16) unsigned char smem[];
    T *Qs = (T *)smem, *Ks = Qs + MT * L::ELEMS, *Vs = Ks + 2 * L::ELEMS; /* K, V: two buffers each */
    int rank, head;
    block_coords(heads, &rank, &head);
    const int nqb = (Tn + BM - 1) / BM, qb = causal ? nqb - 1 - rank : rank; /* heaviest first */
    const int b = head / NH, h = head % NH, kh = kv_head_of(h, NH, NKV), C = NH * hs;
    const size_t ld = qkv_width(NH, NKV, hs);
    const T *rows = qkv + (size_t)b * Tn * ld, *q = rows + h * hs;
    const T *k = rows + k_column(kh, NH, hs), *v = rows + v_column(kh, NH, NKV, hs);
    const int warp = threadIdx.x / 32, g = threadIdx.x % 32 / 4, t = threadIdx.x % 4, q0 = qb * BM;
    const int32_t *prow = pos ? pos + (size_t)b * Tn : NULL;
    __shared__ int ds[BM]; /* the rows' document starts; rows past T count as the last row */
    for (int r = threadIdx.x; r < BM; r += THREADS) ds[r] = doc_start(prow, q0 + r < Tn ? q0 + r : Tn - 1);
    int row[MT][2];
#pragma unroll
    for (int mt = 0; mt < MT; mt++) row[mt][0] = q0 + (warp * MT + mt) * 16 + g, row[mt][1] = row[mt][0] + 8;
    const int last = last_key_block(q0, BM, Tn, causal), first = first_key_block(q0, band, doc_start(prow, q0));
    const score_map<CAP> score2(scale, cap);

    load_tile_async<T, LD, 64 * MT>(Qs, q, ld, q0, Tn, hs);
    /* key block kb goes to buffer kb & 1, the first one too */
    load_tile_async<T, LD>(Ks + (first & 1) * L::ELEMS, k, ld, first * BK, Tn, hs);
    load_tile_async<T, LD>(Vs + (first & 1) * L::ELEMS, v, ld, first * BK, Tn, hs);
    cp_async_commit();
    float o[MT][HSM / 8][4];
    zero(o);
    float mrow[MT][2], lpart[MT][2];
#pragma unroll
    for (int mt = 0; mt < MT; mt++) mrow[mt][0] = mrow[mt][1] = -INFINITY, lpart[mt][0] = lpart[mt][1] = 0.0f;
    for (int kb = first; kb <= last; kb++) {
        const int buf = kb & 1;
        __syncthreads(); /* the other buffer's last readers are done */
        if (kb < last) {
            load_tile_async<T, LD>(Ks + (buf ^ 1) * L::ELEMS, k, ld, (kb + 1) * BK, Tn, hs);
            load_tile_async<T, LD>(Vs + (buf ^ 1) * L::ELEMS, v, ld, (kb + 1) * BK, Tn, hs);
            cp_async_commit();
            cp_async_wait<1>(); /* this block's tiles have landed, the next ones may not */
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();
        float s[MT][8][4];
        scores<HSM, LD, MT>(s, Qs + warp * MT * 16 * LD, Ks + buf * L::ELEMS, hs);
        const bool full = all_visible(q0, BM, kb, Tn, band, ds[BM - 1]);
#pragma unroll
        for (int mt = 0; mt < MT; mt++) {
            float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
            for (int nt = 0; nt < 8; nt++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    int j = kb * BK + nt * 8 + 2 * t + (e & 1);
                    /* rows past T are computed as the last row (which sees some key) and never written */
                    float x = full || visible(row[mt][e >> 1] < Tn ? row[mt][e >> 1] : Tn - 1, j, Tn, band,
                                              ds[row[mt][e >> 1] - q0])
                                  ? score2(s[mt][nt][e])
                                  : -INFINITY;
                    s[mt][nt][e] = x;
                    mx[e >> 1] = fmaxf(mx[e >> 1], x);
                }
            float corr[2];
#pragma unroll
            for (int r = 0; r < 2; r++) {
                float mnew = fmaxf(mrow[mt][r], quad_max(mx[r]));
                corr[r] = mnew == -INFINITY ? 1.0f : exp2_fast(mrow[mt][r] - mnew);
                mrow[mt][r] = mnew;
            }
            float lsum[2] = {0.0f, 0.0f};
#pragma unroll
            for (int nt = 0; nt < 8; nt++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    float m = mrow[mt][e >> 1];
                    float p = m == -INFINITY ? 0.0f : exp2_fast(s[mt][nt][e] - m);
                    s[mt][nt][e] = p;
                    lsum[e >> 1] += p;
                }
#pragma unroll
            for (int r = 0; r < 2; r++) lpart[mt][r] = lpart[mt][r] * corr[r] + lsum[r];
#pragma unroll
            for (int nt = 0; nt < HSM / 8; nt++) {
                o[mt][nt][0] *= corr[0], o[mt][nt][1] *= corr[0];
                o[mt][nt][2] *= corr[1], o[mt][nt][3] *= corr[1];
            }
        }
        accumulate<HSM, LD, MT>(o, s, Vs + buf * L::ELEMS, hs);
    }
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
        float l[2] = {quad_sum(lpart[mt][0]), quad_sum(lpart[mt][1])}; /* every lane takes part */
#pragma unroll
        for (int r = 0; r < 2; r++) {
            if (row[mt][r] >= Tn) continue;
            float inv = 1.0f / l[r];
            T *y = out + ((size_t)b * Tn + row[mt][r]) * C + h * hs;
#pragma unroll
            for (int nt = 0; nt < HSM / 8; nt++) {
                if (nt * 8 >= hs) break;
                store_pair(y + nt * 8 + 2 * t, o[mt][nt][2 * r] * inv, o[mt][nt][2 * r + 1] * inv);
            }
            if (t == 0) lse[(size_t)head * Tn + row[mt][r]] = (mrow[mt][r] + log2f(l[r])) / LOG2E;
        }
    }
}

/* D (B*NH, T) = rowsum(dO * O) per head: one warp per (b, t) row. */
template <typename T>
__global__ void flash_backward_dot_kernel(float *D, const T *dout, const T *out, int BT, int Tn, int NH, int hs) {
    int r = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (r >= BT) return;
    int b = r / Tn, i = r % Tn, C = NH * hs;
    for (int h = 0; h < NH; h++) {
        const T *g = dout + (size_t)r * C + h * hs, *o = out + (size_t)r * C + h * hs;
        float s = 0.0f;
        for (int d = lane; d < hs; d += 32) s += to_f(g[d]) * to_f(o[d]);
        s = warp_sum(s);
        if (lane == 0) D[((size_t)b * NH + h) * Tn + i] = s;
    }
}

/* One block per (key block, b, kv head): dK, dV of its 64 keys summed over the query
 * heads of the group, one head after another (a fixed order), each over its query
 * blocks; Q and dO tiles stream through two buffers. */
template <typename T, int HSM, bool CAP>
__global__ void __launch_bounds__(THREADS)
    flash_backward_kv_kernel(T *dqkv /* (B,T,W) */, const T *dout /* (B,T,C) */, const T *qkv /* (B,T,W) */,
                             const float *lse /* (B,NH,T) */, const float *D /* (B,NH,T) */,
                             const int32_t *pos /* (B,T) or NULL */, int Tn, int NH, int NKV, int hs, int causal, int band,
                             float scale, float cap, int heads) {
    typedef tiles<T, HSM> L;
    constexpr int LD = L::LD;
    extern __shared__ __align__(16) unsigned char smem[];
    T *Ks = (T *)smem, *Vs = Ks + L::ELEMS, *Qs = Vs + L::ELEMS, *dOs = Qs + 2 * L::ELEMS; /* Q, dO: two buffers each */
    float *lse_s = (float *)(dOs + 2 * L::ELEMS), *D_s = lse_s + 2 * 64;                  /* two buffers each */
    int kb, kvh;
    block_coords(heads, &kb, &kvh);
    const int nqb = (Tn + BQ - 1) / BQ, group = NH / NKV;
    const int b = kvh / NKV, kh = kvh % NKV, C = NH * hs;
    const size_t ld = qkv_width(NH, NKV, hs);
    const T *rows = qkv + (size_t)b * Tn * ld, *k = rows + k_column(kh, NH, hs), *v = rows + v_column(kh, NH, NKV, hs);
    const int warp = threadIdx.x / 32, g = threadIdx.x % 32 / 4, t = threadIdx.x % 4;
    const int key[2] = {kb * BK + warp * 16 + g, kb * BK + warp * 16 + g + 8};
    /* the query blocks that see the key block: from the diagonal's to the last row's
     * window that reaches it (key j is seen up to query j + window - 1) */
    const int q0 = causal ? kb * BK / BQ : 0;
    int qlast = nqb - 1;
    if (band > 0 && (kb * BK + BK - 1 + band - 1) / BQ < qlast) qlast = (kb * BK + BK - 1 + band - 1) / BQ;
    /* with documents, up to the row before the first document to start after the block */
    const int32_t *prow = pos ? pos + (size_t)b * Tn : NULL;
    __shared__ int next_doc;
    if (prow) {
        if (threadIdx.x == 0) next_doc = Tn;
        __syncthreads();
        for (int r = kb * BK + BK + threadIdx.x; r < Tn; r += THREADS) /* each thread to its first */
            if (prow[r] == 0) {
                atomicMin(&next_doc, r);
                break;
            }
        __syncthreads();
        if ((next_doc - 1) / BQ < qlast) qlast = (next_doc - 1) / BQ;
    }
    const int per_head = qlast - q0 + 1, steps = group * per_head;
    const score_map<CAP> score2(scale, cap);

    /* step i: query head kh*group + i/per_head, query block q0 + i%per_head */
    auto fetch = [&](int i, int buf) {
        const int h = kh * group + i / per_head, qb = q0 + i % per_head;
        const size_t head = (size_t)b * NH + h;
        load_tile_async<T, LD>(Qs + buf * L::ELEMS, rows + h * hs, ld, qb * BQ, Tn, hs);
        load_tile_async<T, LD>(dOs + buf * L::ELEMS, dout + (size_t)b * Tn * C + h * hs, C, qb * BQ, Tn, hs);
        for (int r = threadIdx.x; r < 64; r += THREADS) {
            int i2 = qb * BQ + r;
            lse_s[buf * 64 + r] = i2 < Tn ? lse[head * Tn + i2] * LOG2E : 0.0f;
            D_s[buf * 64 + r] = i2 < Tn ? D[head * Tn + i2] : 0.0f;
        }
    };
    load_tile_async<T, LD>(Ks, k, ld, kb * BK, Tn, hs);
    load_tile_async<T, LD>(Vs, v, ld, kb * BK, Tn, hs);
    fetch(0, 0);
    cp_async_commit();
    float dk[1][HSM / 8][4], dv[1][HSM / 8][4];
    zero(dk);
    zero(dv);
    for (int i = 0; i < steps; i++) {
        const int buf = i & 1, qb = q0 + i % per_head;
        __syncthreads(); /* the other buffers' last readers are done */
        if (i + 1 < steps) {
            fetch(i + 1, buf ^ 1);
            cp_async_commit();
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();
        const T *Qb = Qs + buf * L::ELEMS, *dOb = dOs + buf * L::ELEMS;
        const float *lse_b = lse_s + buf * 64, *D_b = D_s + buf * 64;
        float p[1][8][4]; /* P^T: keys x queries */
        scores<HSM, LD, 1>(p, Ks + warp * 16 * LD, Qb, hs);
        const bool full = all_visible(qb * BQ, BQ, kb, Tn, band, doc_start(prow, qb * BQ + BQ - 1 < Tn ? qb * BQ + BQ - 1 : Tn - 1));
#pragma unroll
        for (int nt = 0; nt < 8; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                int c = nt * 8 + 2 * t + (e & 1);
                p[0][nt][e] = full || visible(qb * BQ + c, key[e >> 1], Tn, band,
                                              doc_start(prow, qb * BQ + c < Tn ? qb * BQ + c : Tn - 1))
                                  ? exp2_fast(score2(p[0][nt][e]) - lse_b[c])
                                  : 0.0f;
            }
        accumulate<HSM, LD, 1>(dv, p, dOb, hs); /* dV += P^T dO */
        float dp[1][8][4];                      /* dP^T = V dO^T */
        scores<HSM, LD, 1>(dp, Vs + warp * 16 * LD, dOb, hs);
#pragma unroll
        for (int nt = 0; nt < 8; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int c = nt * 8 + 2 * t + (e & 1);
                const float pe = p[0][nt][e];
                /* dS times the cap's slope, at the capped score found again from P (no
                 * registers kept for it): x2 = log2(P) + lse2 */
                const float slope = CAP && pe > 0.0f ? score2.slope(__log2f(pe) + lse_b[c]) : 1.0f;
                dp[0][nt][e] = pe * (dp[0][nt][e] - D_b[c]) * slope;
            }
        accumulate<HSM, LD, 1>(dk, dp, Qb, hs); /* dK += dS^T Q */
    }
#pragma unroll
    for (int r = 0; r < 2; r++) {
        if (key[r] >= Tn) continue;
        T *y = dqkv + ((size_t)b * Tn + key[r]) * ld, *yk = y + k_column(kh, NH, hs), *yv = y + v_column(kh, NH, NKV, hs);
#pragma unroll
        for (int nt = 0; nt < HSM / 8; nt++) {
            if (nt * 8 >= hs) break;
            int c = nt * 8 + 2 * t;
            store_pair(yk + c, dk[0][nt][2 * r] * scale, dk[0][nt][2 * r + 1] * scale);
            store_pair(yv + c, dv[0][nt][2 * r], dv[0][nt][2 * r + 1]);
        }
    }
}

/* One block per (block of BM queries, b, head): dQ, with K and V tiles streaming through
 * two buffers. */
template <typename T, int HSM, bool CAP>
__global__ void __launch_bounds__(THREADS)
    flash_backward_q_kernel(T *dqkv /* (B,T,W) */, const T *dout /* (B,T,C) */, const T *qkv /* (B,T,W) */,
                            const float *lse /* (B,NH,T) */, const float *D /* (B,NH,T) */,
                            const int32_t *pos /* (B,T) or NULL */, int Tn, int NH, int NKV, int hs, int causal, int band,
                            float scale, float cap, int heads) {
    typedef tiles<T, HSM> L;
    constexpr int LD = L::LD, MT = row_tiles<HSM>::MT, BM = row_tiles<HSM>::BM;
    extern __shared__ __align__(16) unsigned char smem[];
    T *Qs = (T *)smem, *dOs = Qs + MT * L::ELEMS, *Ks = dOs + MT * L::ELEMS, *Vs = Ks + 2 * L::ELEMS; /* K, V: two buffers */
    int rank, head;
    block_coords(heads, &rank, &head);
    const int nqb = (Tn + BM - 1) / BM, qb = causal ? nqb - 1 - rank : rank;
    const int b = head / NH, h = head % NH, kh = kv_head_of(h, NH, NKV), C = NH * hs;
    const size_t ld = qkv_width(NH, NKV, hs);
    const T *rows = qkv + (size_t)b * Tn * ld, *q = rows + h * hs;
    const T *k = rows + k_column(kh, NH, hs), *v = rows + v_column(kh, NH, NKV, hs);
    const T *dO = dout + (size_t)b * Tn * C + h * hs;
    const int warp = threadIdx.x / 32, g = threadIdx.x % 32 / 4, t = threadIdx.x % 4, q0 = qb * BM;
    const int32_t *prow = pos ? pos + (size_t)b * Tn : NULL;
    const int last = last_key_block(q0, BM, Tn, causal), first = first_key_block(q0, band, doc_start(prow, q0));
    const score_map<CAP> score2(scale, cap);
    __shared__ int ds[BM]; /* the rows' document starts */
    for (int r = threadIdx.x; r < BM; r += THREADS) ds[r] = doc_start(prow, q0 + r < Tn ? q0 + r : Tn - 1);
    int row[MT][2];
    float lse_r[MT][2], D_r[MT][2];
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int r = 0; r < 2; r++) {
            row[mt][r] = q0 + (warp * MT + mt) * 16 + g + 8 * r;
            lse_r[mt][r] = row[mt][r] < Tn ? lse[(size_t)head * Tn + row[mt][r]] * LOG2E : 0.0f;
            D_r[mt][r] = row[mt][r] < Tn ? D[(size_t)head * Tn + row[mt][r]] : 0.0f;
        }
    load_tile_async<T, LD, 64 * MT>(Qs, q, ld, q0, Tn, hs);
    load_tile_async<T, LD, 64 * MT>(dOs, dO, C, q0, Tn, hs);
    load_tile_async<T, LD>(Ks + (first & 1) * L::ELEMS, k, ld, first * BK, Tn, hs); /* block kb in buffer kb & 1 */
    load_tile_async<T, LD>(Vs + (first & 1) * L::ELEMS, v, ld, first * BK, Tn, hs);
    cp_async_commit();
    float dq[MT][HSM / 8][4];
    zero(dq);
    for (int kb = first; kb <= last; kb++) {
        const int buf = kb & 1;
        __syncthreads();
        if (kb < last) {
            load_tile_async<T, LD>(Ks + (buf ^ 1) * L::ELEMS, k, ld, (kb + 1) * BK, Tn, hs);
            load_tile_async<T, LD>(Vs + (buf ^ 1) * L::ELEMS, v, ld, (kb + 1) * BK, Tn, hs);
            cp_async_commit();
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();
        const T *Kb = Ks + buf * L::ELEMS;
        float p[MT][8][4], dp[MT][8][4];
        scores<HSM, LD, MT>(p, Qs + warp * MT * 16 * LD, Kb, hs);                   /* S = Q K^T */
        scores<HSM, LD, MT>(dp, dOs + warp * MT * 16 * LD, Vs + buf * L::ELEMS, hs); /* dP = dO V^T */
        const bool full = all_visible(q0, BM, kb, Tn, band, ds[BM - 1]);
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
#pragma unroll
            for (int nt = 0; nt < 8; nt++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    int j = kb * BK + nt * 8 + 2 * t + (e & 1), r = e >> 1;
                    const float x2 = score2(p[mt][nt][e]);
                    float pe = full || visible(row[mt][r], j, Tn, band, ds[row[mt][r] - q0]) ? exp2_fast(x2 - lse_r[mt][r])
                                                                                             : 0.0f;
                    dp[mt][nt][e] = pe * (dp[mt][nt][e] - D_r[mt][r]) * score2.slope(x2);
                }
        accumulate<HSM, LD, MT>(dq, dp, Kb, hs); /* dQ += dS K */
    }
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int r = 0; r < 2; r++) {
            if (row[mt][r] >= Tn) continue;
            T *y = dqkv + (q - qkv) + (size_t)row[mt][r] * ld; /* where q's row is */
#pragma unroll
            for (int nt = 0; nt < HSM / 8; nt++) {
                if (nt * 8 >= hs) break;
                store_pair(y + nt * 8 + 2 * t, dq[mt][nt][2 * r] * scale, dq[mt][nt][2 * r + 1] * scale);
            }
        }
}

/* ---- host side ---- */

/* The compiled width for head size hs, or 0 when unsupported. */
static int width_for(int hs) {
    if (hs <= 0 || hs % 16 || hs > 128) return 0;
    return hs <= 64 ? 64 : 128;
}

/* Raises each kernel's dynamic shared-memory limit to what it asks for, where the GPU
 * allows it (check_shape refuses the others at launch). */
template <typename K>
static hg_status raise_smem(hg_backend *be, K kernel, size_t bytes, const char *name) {
    if (bytes > cuda_of(be)->smem_optin) return HG_OK;
    return cuda_check(be, cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes), name);
}

template <typename T, int HSM, bool CAP>
static hg_status set_smem(hg_backend *be) {
    typedef tiles<T, HSM> L;
    HG_TRY(raise_smem(be, flash_forward_kernel<T, HSM, CAP>, L::forward, "cudaFuncSetAttribute (flash_forward_kernel)"));
    HG_TRY(raise_smem(be, flash_backward_kv_kernel<T, HSM, CAP>, L::backward_kv,
                      "cudaFuncSetAttribute (flash_backward_kv_kernel)"));
    return raise_smem(be, flash_backward_q_kernel<T, HSM, CAP>, L::backward_q, "cudaFuncSetAttribute (flash_backward_q_kernel)");
}

/* ---- cuDNN's fused attention or the kernels above ----
 * In bf16, each direction runs cuDNN's graph where cuDNN is loaded and takes the shape
 * (cudnn_attention.h), else the kernels above; the two agree on every buffer (lse in
 * natural log), so a forward of one kind pairs with a backward of the other.
 * HANDGRAD_CUDNN_ATTENTION=off|forward|backward keeps cuDNN out, or to one direction.
 * HANDGRAD_CUDNN_DETERMINISTIC=1 (an experiment, docs/cuda.md): with
 * HG_FLAG_DETERMINISTIC, cuDNN's attention with the backward graph that writes dQ by a
 * plain product, instead of the own kernels. */
static bool cudnn_deterministic(const hg_backend *be) {
    const char *e = getenv("HANDGRAD_CUDNN_DETERMINISTIC");
    return (be->flags & HG_FLAG_DETERMINISTIC) && e && !strcmp(e, "1");
}

hg_status cuda_attention_init(hg_backend *be) {
    HG_TRY((set_smem<bf16, 64, false>(be)));
    HG_TRY((set_smem<bf16, 128, false>(be)));
    HG_TRY((set_smem<bf16, 64, true>(be)));
    HG_TRY((set_smem<bf16, 128, true>(be)));
    cuda_state *st = cuda_of(be);
    const char *dirs = getenv("HANDGRAD_CUDNN_ATTENTION");
    st->dnn_dirs = !dirs || !*dirs ? 3u : !strcmp(dirs, "forward") ? 1u : !strcmp(dirs, "backward") ? 2u : 0u;
    if (be->precision != HG_PRECISION_BF16)
        snprintf(st->dnn_note, sizeof st->dnn_note, "own kernels (fp32: cuDNN's attention is used in bf16 only)");
    else if (be->flags & HG_FLAG_DETERMINISTIC && !cudnn_deterministic(be))
        snprintf(st->dnn_note, sizeof st->dnn_note, "own kernels (deterministic)");
    else if (!st->dnn_dirs)
        snprintf(st->dnn_note, sizeof st->dnn_note, "own kernels (HANDGRAD_CUDNN_ATTENTION=%s)", dirs);
    else {
#ifdef HG_HAVE_CUDNN
        char why[512];
        st->dnn = cudnn_attn_open(st->stream, NULL, why, sizeof why);
        st->dnn_graph[0] = CUDNN_ATTN_FORWARD;
        st->dnn_graph[1] = cudnn_deterministic(be) ? CUDNN_ATTN_BACKWARD_DETERMINISTIC : CUDNN_ATTN_BACKWARD;
        if (st->dnn)
            snprintf(st->dnn_note, sizeof st->dnn_note, "%s", cudnn_attn_library(st->dnn));
        else
            snprintf(st->dnn_note, sizeof st->dnn_note, "own kernels (cuDNN not used: %s)", why);
#else
        snprintf(st->dnn_note, sizeof st->dnn_note, "own kernels (built without cuDNN's headers)");
#endif
    }
    return HG_OK;
}

void cuda_attention_free(hg_backend *be) {
#ifdef HG_HAVE_CUDNN
    cudnn_attn_close(cuda_of(be)->dnn);
#endif
    cuda_of(be)->dnn = NULL;
}

const char *cuda_attention_kernels(hg_backend *be) {
    cuda_state *st = cuda_of(be);
    if (!st->att_used[0][0] && !st->att_used[1][0]) return NULL;
    snprintf(st->att_words, sizeof st->att_words, "forward: %s; backward: %s", st->att_used[0][0] ? st->att_used[0] : "-",
             st->att_used[1][0] ? st->att_used[1] : "-");
    return st->att_words;
}

/* Whether direction dir (forward 0, backward 1) runs cuDNN's graph for shape s; notes
 * what runs, and why. */
static bool use_cudnn(hg_backend *be, int dir, const hg_attention_shape *s) {
    cuda_state *st = cuda_of(be);
    char *used = st->att_used[dir];
    const size_t n = sizeof st->att_used[dir];
#ifdef HG_HAVE_CUDNN
    if (st->dnn && (st->dnn_dirs >> dir & 1u) && s->softcap > 0) {
        snprintf(used, n, "own kernels (cuDNN's graph has no score cap, attn_softcap)");
        return false;
    }
    if (st->dnn && (st->dnn_dirs >> dir & 1u) && s->pos) {
        snprintf(used, n, "own kernels (packed documents: cuDNN's graph here has no ragged layout)");
        return false;
    }
    if (st->dnn && (st->dnn_dirs >> dir & 1u) && s->window > 0 && s->window < s->T) {
        snprintf(used, n, "own kernels (sliding window %d: cuDNN's graph here has no band)", s->window);
        return false;
    }
    if (st->dnn && (st->dnn_dirs >> dir & 1u)) {
        const int graph = st->dnn_graph[dir];
        char why[600];
        const char *engine = NULL;
        if (cudnn_attn_plan(st->dnn, graph, s, NULL, &engine, why, sizeof why) == 0) {
            snprintf(used, n, "%s, %s%s", cudnn_attn_library(st->dnn), engine,
                     graph == CUDNN_ATTN_BACKWARD_DETERMINISTIC ? ", dQ without the accumulator" : "");
            return true;
        }
        snprintf(used, n, "own kernels (cuDNN refused B=%d T=%d NH=%d NKV=%d hs=%d: %s)", s->B, s->T, s->NH,
                 s->NKV ? s->NKV : s->NH, s->hs, why);
        return false;
    }
#endif
    snprintf(used, n, "%s", st->dnn_dirs >> dir & 1u || !st->dnn ? st->dnn_note : "own kernels (HANDGRAD_CUDNN_ATTENTION)");
    return false;
}

static hg_status check_shape(hg_backend *be, const hg_attention_shape *s, size_t smem) {
    if (!width_for(s->hs))
        return cuda_fail(be, HG_ERR_UNSUPPORTED, "attention: head size %d is not supported by the flash kernels (a multiple "
                         "of 16, at most 128)", s->hs);
    if (smem > cuda_of(be)->smem_optin)
        return cuda_fail(be, HG_ERR_UNSUPPORTED, "attention: head size %d needs %zu bytes of shared memory; this GPU allows %zu",
                         s->hs, smem, cuda_of(be)->smem_optin);
    return HG_OK;
}

template <typename T, int HSM, bool CAP>
static hg_status forward_launch(hg_backend *be, T *out, float *lse, const T *qkv, const hg_attention_shape *s) {
    size_t smem = tiles<T, HSM>::forward;
    HG_TRY(check_shape(be, s, smem));
    const int heads = s->B * s->NH, BM = row_tiles<HSM>::BM;
    const unsigned grid = (unsigned)((s->T + BM - 1) / BM) * (unsigned)heads;
    flash_forward_kernel<T, HSM, CAP><<<grid, THREADS, smem, cuda_stream(be)>>>(
        out, lse, qkv, s->pos, s->T, s->NH, hg_attention_kv_heads(s), s->hs, s->causal, band_of(s),
        1.0f / sqrtf((float)s->hs), s->softcap, heads);
    return cuda_launched(be, "flash_forward_kernel");
}

template <typename T, int HSM, bool CAP>
static hg_status backward_launch(hg_backend *be, T *dqkv, const T *dout, const T *qkv, const T *out, const float *lse,
                                 const hg_attention_shape *s, float *D) {
    typedef tiles<T, HSM> L;
    HG_TRY(check_shape(be, s, L::backward_kv > L::backward_q ? L::backward_kv : L::backward_q));
    int BT = s->B * s->T;
    flash_backward_dot_kernel<T><<<(BT + 7) / 8, 256, 0, cuda_stream(be)>>>(D, dout, out, BT, s->T, s->NH, s->hs);
    HG_TRY(cuda_launched(be, "flash_backward_dot_kernel"));
    const int NKV = hg_attention_kv_heads(s), BM = row_tiles<HSM>::BM;
    const unsigned kblocks = (unsigned)((s->T + BK - 1) / BK), qblocks = (unsigned)((s->T + BM - 1) / BM);
    float scale = 1.0f / sqrtf((float)s->hs);
    flash_backward_kv_kernel<T, HSM, CAP><<<kblocks * (unsigned)(s->B * NKV), THREADS, L::backward_kv, cuda_stream(be)>>>(
        dqkv, dout, qkv, lse, D, s->pos, s->T, s->NH, NKV, s->hs, s->causal, band_of(s), scale, s->softcap, s->B * NKV);
    HG_TRY(cuda_launched(be, "flash_backward_kv_kernel"));
    flash_backward_q_kernel<T, HSM, CAP><<<qblocks * (unsigned)(s->B * s->NH), THREADS, L::backward_q, cuda_stream(be)>>>(
        dqkv, dout, qkv, lse, D, s->pos, s->T, s->NH, NKV, s->hs, s->causal, band_of(s), scale, s->softcap,
        s->B * s->NH);
    return cuda_launched(be, "flash_backward_q_kernel");
}

/* Calls launch<bf16, width, capped>(...) for hs's compiled width and whether scores are
 * capped. */
#define ATTENTION_DISPATCH(be, s, launch, ...)                                                          \
    do {                                                                                                \
        int w_ = width_for((s)->hs);                                                                    \
        if (!w_) return check_shape(be, s, 0);                                                          \
        typedef bf16 T;                                                                                 \
        if ((s)->softcap > 0)                                                                           \
            return w_ == 64 ? launch<T, 64, true>(be, __VA_ARGS__) : launch<T, 128, true>(be, __VA_ARGS__); \
        return w_ == 64 ? launch<T, 64, false>(be, __VA_ARGS__) : launch<T, 128, false>(be, __VA_ARGS__); \
    } while (0)

/* Whether direction dir runs the row kernels (fp32, or a head size the flash kernels
 * lack that cuDNN did not take; use_cudnn has noted why not cuDNN). */
static bool use_rows(hg_backend *be, int dir, const hg_attention_shape *s) {
    cuda_state *st = cuda_of(be);
    if (be->precision == HG_PRECISION_FP32) {
        snprintf(st->att_used[dir], sizeof st->att_used[dir], "%s", st->dnn_note);
        return true;
    }
    if (width_for(s->hs)) return false;
    char was[sizeof st->att_used[dir]];
    snprintf(was, sizeof was, "%s", st->att_used[dir]);
    snprintf(st->att_used[dir], sizeof st->att_used[dir], "own row kernels (head size %d; %.600s)", s->hs, was);
    return true;
}

extern "C" hg_status cuda_attention_forward(hg_backend *be, float *out, float *lse, const float *qkv, const hg_attention_shape *s,
                                            void *scratch) {
    CUDA_OP("attention_forward");
#ifdef HG_HAVE_CUDNN
    if (be->precision == HG_PRECISION_BF16 && use_cudnn(be, CUDNN_ATTN_FORWARD, s)) {
        char why[600];
        if (cudnn_attn_forward(cuda_of(be)->dnn, out, lse, qkv, s, scratch, why, sizeof why) != 0)
            return cuda_fail(be, HG_ERR_BACKEND, "attention forward: %s", why);
        return cuda_launched(be, "cuDNN attention forward");
    }
#else
    (void)scratch;
#endif
    if (use_rows(be, 0, s)) return cuda_attention_rows_forward(be, out, lse, qkv, s);
    ATTENTION_DISPATCH(be, s, forward_launch, (T *)out, lse, (const T *)qkv, s);
}

extern "C" hg_status cuda_attention_backward(hg_backend *be, float *dqkv, const float *dout, const float *qkv, const float *out,
                                             const float *lse, const hg_attention_shape *s, void *scratch) {
    CUDA_OP("attention_backward");
#ifdef HG_HAVE_CUDNN
    if (be->precision == HG_PRECISION_BF16 && use_cudnn(be, CUDNN_ATTN_BACKWARD, s)) {
        char why[600];
        if (cudnn_attn_backward(cuda_of(be)->dnn, cuda_of(be)->dnn_graph[1], dqkv, dout, qkv, out, lse, s, scratch, why, sizeof why) != 0)
            return cuda_fail(be, HG_ERR_BACKEND, "attention backward: %s", why);
        return cuda_launched(be, "cuDNN attention backward");
    }
#endif
    if (use_rows(be, 1, s)) return cuda_attention_rows_backward(be, dqkv, dout, qkv, out, lse, s, (float *)scratch);
    ATTENTION_DISPATCH(be, s, backward_launch, (T *)dqkv, (const T *)dout, (const T *)qkv, (const T *)out, lse, s,
                       (float *)scratch);
}

/* D: one float per (b, head, t); in bf16, unless deterministic, at least what cuDNN's
 * backward needs (its dQ accumulator and row sums, and its engine's workspace). The
 * workspace grows with B and T, so the scratch planned for the largest shape covers
 * every call. */
extern "C" size_t cuda_attention_scratch_bytes(hg_backend *be, const hg_attention_shape *s) {
    size_t d = sizeof(float) * (size_t)s->B * s->NH * s->T;
#ifdef HG_HAVE_CUDNN
    if (be->precision == HG_PRECISION_BF16 && (!(be->flags & HG_FLAG_DETERMINISTIC) || cudnn_deterministic(be))) {
        size_t w = cudnn_attn_reserve_bytes(s);
        if (w > d) d = w;
    }
#else
    (void)be;
#endif
    return d;
}
