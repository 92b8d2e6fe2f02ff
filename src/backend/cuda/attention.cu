/* Causal multi-head attention on the GPU: handgrad's flash attention, forward and
 * backward. Memory is linear in T: no T x T matrix exists; scores live in registers a
 * 16 x 64 tile at a time.
 *
 * Tiles: 64 queries x 64 keys; a block of 4 warps, each warp owning 16 rows (queries in
 * forward and dQ, keys in dK/dV). Q, K, V (and dO) tiles are staged in shared memory from
 * the QKV projection in place (B,T,W; q | k | v heads as in cuda.h), 16 bytes per load. Tile
 * products go through arch/mma.cuh (tensor cores for bf16, FMAs for fp32); P and dS pass
 * through a per-warp shared buffer in T to become the next product's A operand. All
 * softmax arithmetic and every accumulator is fp32.
 *
 *   forward  - grid (query blocks, B*NH), heaviest (last) query block first: online
 *              softmax, O rescaled per key block; writes out (B,T,C) and lse (B,NH,T),
 *              C = NH hs.
 *   backward - D = rowsum(dO * O) (B,NH,T) into scratch; then dK, dV with a block per key
 *              block of a kv head walking the query blocks of each query head of its
 *              group in turn (grouped-query attention's sum over the group, in a fixed
 *              order), and dQ with a block per query block walking the key blocks. Two
 *              kernels recompute P instead of sharing dQ through atomics: no atomics,
 *              deterministic, about 1.4x the backward FLOPs of a single pass
 *              (docs/cuda.md).
 *
 * Head sizes: any multiple of 16 up to 128, compiled for widths 64 and 128. These
 * kernels are bf16 (tensor cores); fp32 mode runs the simple kernels of
 * attention_fp32.cu instead (fp32 tile products unrolled like these took minutes to
 * compile, and fp32 is a checking mode). */
#include <math.h>

#include "backend/cuda/arch/mma.cuh"
#include "backend/cuda/cuda.h"

enum { BQ = 64, BK = 64, WARPS = 4, THREADS = 32 * WARPS };

template <typename T, int HSM>
struct tiles {
    static constexpr int LD = HSM + 16 / (int)sizeof(T); /* row pad of 16 bytes against bank conflicts */
    static constexpr int LDP = BK + 16 / (int)sizeof(T);
    static constexpr size_t tile = (size_t)64 * LD * sizeof(T);
    static constexpr size_t warp_buf = (size_t)WARPS * 16 * LDP * sizeof(T);
    static constexpr size_t forward = 3 * tile + warp_buf;
    static constexpr size_t backward = 4 * tile + warp_buf + 2 * 64 * sizeof(float);
};

/* dst (64, LD) = rows r0.. of src (rows of stride ld, hs columns); rows >= n are zero. */
template <typename T, int LD>
__device__ __forceinline__ void load_tile(T *dst, const T *src, size_t ld, int r0, int n, int hs) {
    constexpr int V = 16 / (int)sizeof(T);
    const int per_row = hs / V;
    for (int idx = threadIdx.x; idx < 64 * per_row; idx += THREADS) {
        int r = idx / per_row, c = idx % per_row * V;
        uint4 v = make_uint4(0, 0, 0, 0);
        if (r0 + r < n) v = *(const uint4 *)(src + (size_t)(r0 + r) * ld + c);
        *(uint4 *)(dst + r * LD + c) = v;
    }
}

/* acc[8][4] (16 rows x 64 columns) = A (16 x hs) @ B^T, where A rows are a (stride LD)
 * and B rows are b (64 rows, stride LD): the score tile of this warp. */
template <typename T, int HSM, int LD>
__device__ __forceinline__ void tile_scores(float acc[8][4], const T *a, const T *b, int hs) {
#pragma unroll
    for (int nt = 0; nt < 8; nt++) acc[nt][0] = acc[nt][1] = acc[nt][2] = acc[nt][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < HSM / 16; kk++) {
        if (kk * 16 >= hs) break;
        mma_a<T> fa;
        load_a(fa, a + kk * 16, LD, 1);
#pragma unroll
        for (int nt = 0; nt < 8; nt++) {
            mma_b<T> fb;
            load_b(fb, b + nt * 8 * LD + kk * 16, 1, LD);
            mma(acc[nt], fa, fb);
        }
    }
}

/* acc[HSM/8][4] (16 x hs) += W (16 x 64, this warp's buffer) @ X (64 x hs, stride LD). */
template <typename T, int HSM, int LD, int LDP>
__device__ __forceinline__ void tile_accumulate(float acc[HSM / 8][4], const T *w, const T *x, int hs) {
#pragma unroll
    for (int kk = 0; kk < BK / 16; kk++) {
        mma_a<T> fa;
        load_a(fa, w + kk * 16, LDP, 1);
#pragma unroll
        for (int nt = 0; nt < HSM / 8; nt++) {
            if (nt * 8 >= hs) break;
            mma_b<T> fb;
            load_b(fb, x + kk * 16 * LD + nt * 8, LD, 1);
            mma(acc[nt], fa, fb);
        }
    }
}

/* This warp's 16 x 64 buffer = v, element (row, col) of the C layout. */
template <typename T, int LDP>
__device__ __forceinline__ void store_warp_tile(T *w, const float v[8][4]) {
    int g = threadIdx.x % 32 / 4, t = threadIdx.x % 4;
#pragma unroll
    for (int nt = 0; nt < 8; nt++)
#pragma unroll
        for (int e = 0; e < 4; e++) w[(g + 8 * (e >> 1)) * LDP + nt * 8 + 2 * t + (e & 1)] = from_f<T>(v[nt][e]);
}

__device__ __forceinline__ float quad_max(float v) {
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
    return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
__device__ __forceinline__ float quad_sum(float v) {
    v += __shfl_xor_sync(0xffffffffu, v, 1);
    return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

/* Whether query i may see key j. */
__device__ __forceinline__ bool visible(int i, int j, int n, int causal) { return i < n && j < n && (!causal || j <= i); }

template <typename T, int HSM>
__global__ void __launch_bounds__(THREADS)
    flash_forward_kernel(T *out /* (B,T,C) */, float *lse /* (B,NH,T) */, const T *qkv /* (B,T,W) */, int Tn, int NH, int NKV,
                         int hs, int causal, float scale) {
    typedef tiles<T, HSM> L;
    constexpr int LD = L::LD, LDP = L::LDP;
    extern __shared__ __align__(16) unsigned char smem[];
    T *Qs = (T *)smem, *Ks = Qs + 64 * LD, *Vs = Ks + 64 * LD, *Ws = Vs + 64 * LD;
    const int nqb = (Tn + BQ - 1) / BQ, qb = causal ? nqb - 1 - (int)blockIdx.x : (int)blockIdx.x;
    const int head = blockIdx.y, b = head / NH, h = head % NH, kh = kv_head_of(h, NH, NKV), C = NH * hs;
    const size_t ld = qkv_width(NH, NKV, hs);
    const T *rows = qkv + (size_t)b * Tn * ld, *q = rows + h * hs;
    const T *k = rows + k_column(kh, NH, hs), *v = rows + v_column(kh, NH, NKV, hs);
    const int warp = threadIdx.x / 32, g = threadIdx.x % 32 / 4, t = threadIdx.x % 4;
    const int row[2] = {qb * BQ + warp * 16 + g, qb * BQ + warp * 16 + g + 8};
    T *Ww = Ws + warp * 16 * LDP;

    load_tile<T, LD>(Qs, q, ld, qb * BQ, Tn, hs);
    float o[HSM / 8][4];
#pragma unroll
    for (int nt = 0; nt < HSM / 8; nt++) o[nt][0] = o[nt][1] = o[nt][2] = o[nt][3] = 0.0f;
    float mrow[2] = {-INFINITY, -INFINITY}, lpart[2] = {0.0f, 0.0f};
    const int last = causal ? qb : (Tn + BK - 1) / BK - 1;
    for (int kb = 0; kb <= last; kb++) {
        __syncthreads(); /* the last tiles are consumed; on entry, Q is being loaded */
        load_tile<T, LD>(Ks, k, ld, kb * BK, Tn, hs);
        load_tile<T, LD>(Vs, v, ld, kb * BK, Tn, hs);
        __syncthreads();
        float s[8][4];
        tile_scores<T, HSM, LD>(s, Qs + warp * 16 * LD, Ks, hs);
        float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
        for (int nt = 0; nt < 8; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                int j = kb * BK + nt * 8 + 2 * t + (e & 1);
                /* rows past T are computed like the others (every row sees key 0) and never written */
                float x = j < Tn && (!causal || j <= row[e >> 1]) ? s[nt][e] * scale : -INFINITY;
                s[nt][e] = x;
                mx[e >> 1] = fmaxf(mx[e >> 1], x);
            }
        float corr[2];
#pragma unroll
        for (int r = 0; r < 2; r++) {
            float mnew = fmaxf(mrow[r], quad_max(mx[r]));
            corr[r] = mnew == -INFINITY ? 1.0f : __expf(mrow[r] - mnew);
            mrow[r] = mnew;
        }
        float lsum[2] = {0.0f, 0.0f};
#pragma unroll
        for (int nt = 0; nt < 8; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                float m = mrow[e >> 1];
                float p = m == -INFINITY ? 0.0f : __expf(s[nt][e] - m);
                s[nt][e] = p;
                lsum[e >> 1] += p;
            }
#pragma unroll
        for (int r = 0; r < 2; r++) lpart[r] = lpart[r] * corr[r] + lsum[r];
#pragma unroll
        for (int nt = 0; nt < HSM / 8; nt++) {
            o[nt][0] *= corr[0], o[nt][1] *= corr[0];
            o[nt][2] *= corr[1], o[nt][3] *= corr[1];
        }
        store_warp_tile<T, LDP>(Ww, s);
        __syncwarp();
        tile_accumulate<T, HSM, LD, LDP>(o, Ww, Vs, hs);
        __syncwarp(); /* the buffer is read before the next key block overwrites it */
    }
#pragma unroll
    for (int r = 0; r < 2; r++) {
        if (row[r] >= Tn) continue;
        float l = quad_sum(lpart[r]), inv = 1.0f / l;
        T *y = out + ((size_t)b * Tn + row[r]) * C + h * hs;
#pragma unroll
        for (int nt = 0; nt < HSM / 8; nt++) {
            if (nt * 8 >= hs) break;
            y[nt * 8 + 2 * t] = from_f<T>(o[nt][2 * r] * inv);
            y[nt * 8 + 2 * t + 1] = from_f<T>(o[nt][2 * r + 1] * inv);
        }
        if (t == 0) lse[(size_t)head * Tn + row[r]] = mrow[r] + logf(l);
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
 * blocks. */
template <typename T, int HSM>
__global__ void __launch_bounds__(THREADS)
    flash_backward_kv_kernel(T *dqkv /* (B,T,W) */, const T *dout /* (B,T,C) */, const T *qkv /* (B,T,W) */,
                             const float *lse /* (B,NH,T) */, const float *D /* (B,NH,T) */, int Tn, int NH, int NKV, int hs,
                             int causal, float scale) {
    typedef tiles<T, HSM> L;
    constexpr int LD = L::LD, LDP = L::LDP;
    extern __shared__ __align__(16) unsigned char smem[];
    T *Ks = (T *)smem, *Vs = Ks + 64 * LD, *Qs = Vs + 64 * LD, *dOs = Qs + 64 * LD, *Ws = dOs + 64 * LD;
    float *lse_s = (float *)(Ws + WARPS * 16 * LDP), *D_s = lse_s + 64;
    const int kb = blockIdx.x, nqb = (Tn + BQ - 1) / BQ, group = NH / NKV;
    const int b = blockIdx.y / NKV, kh = blockIdx.y % NKV, C = NH * hs;
    const size_t ld = qkv_width(NH, NKV, hs);
    const T *rows = qkv + (size_t)b * Tn * ld, *k = rows + k_column(kh, NH, hs), *v = rows + v_column(kh, NH, NKV, hs);
    const int warp = threadIdx.x / 32, g = threadIdx.x % 32 / 4, t = threadIdx.x % 4;
    const int key[2] = {kb * BK + warp * 16 + g, kb * BK + warp * 16 + g + 8};
    T *Ww = Ws + warp * 16 * LDP;

    load_tile<T, LD>(Ks, k, ld, kb * BK, Tn, hs);
    load_tile<T, LD>(Vs, v, ld, kb * BK, Tn, hs);
    float dk[HSM / 8][4], dv[HSM / 8][4];
#pragma unroll
    for (int nt = 0; nt < HSM / 8; nt++)
#pragma unroll
        for (int e = 0; e < 4; e++) dk[nt][e] = dv[nt][e] = 0.0f;
    for (int h = kh * group; h < (kh + 1) * group; h++) {
        const size_t head = (size_t)b * NH + h;
        const T *q = rows + h * hs, *dO = dout + (size_t)b * Tn * C + h * hs;
        for (int qb = causal ? kb : 0; qb < nqb; qb++) {
            __syncthreads();
            load_tile<T, LD>(Qs, q, ld, qb * BQ, Tn, hs);
            load_tile<T, LD>(dOs, dO, C, qb * BQ, Tn, hs);
            for (int r = threadIdx.x; r < 64; r += THREADS) {
                int i = qb * BQ + r;
                lse_s[r] = i < Tn ? lse[head * Tn + i] : 0.0f;
                D_s[r] = i < Tn ? D[head * Tn + i] : 0.0f;
            }
            __syncthreads();
            float p[8][4]; /* P^T: keys x queries */
            tile_scores<T, HSM, LD>(p, Ks + warp * 16 * LD, Qs, hs);
#pragma unroll
            for (int nt = 0; nt < 8; nt++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    int c = nt * 8 + 2 * t + (e & 1);
                    p[nt][e] = visible(qb * BQ + c, key[e >> 1], Tn, causal) ? __expf(p[nt][e] * scale - lse_s[c]) : 0.0f;
                }
            store_warp_tile<T, LDP>(Ww, p);
            __syncwarp();
            tile_accumulate<T, HSM, LD, LDP>(dv, Ww, dOs, hs); /* dV += P^T dO */
            float dp[8][4];                                   /* dP^T = V dO^T */
            tile_scores<T, HSM, LD>(dp, Vs + warp * 16 * LD, dOs, hs);
#pragma unroll
            for (int nt = 0; nt < 8; nt++)
#pragma unroll
                for (int e = 0; e < 4; e++) dp[nt][e] = p[nt][e] * (dp[nt][e] - D_s[nt * 8 + 2 * t + (e & 1)]);
            __syncwarp(); /* every lane has read P^T */
            store_warp_tile<T, LDP>(Ww, dp);
            __syncwarp();
            tile_accumulate<T, HSM, LD, LDP>(dk, Ww, Qs, hs); /* dK += dS^T Q */
        }
    }
#pragma unroll
    for (int r = 0; r < 2; r++) {
        if (key[r] >= Tn) continue;
        T *y = dqkv + ((size_t)b * Tn + key[r]) * ld, *yk = y + k_column(kh, NH, hs), *yv = y + v_column(kh, NH, NKV, hs);
#pragma unroll
        for (int nt = 0; nt < HSM / 8; nt++) {
            if (nt * 8 >= hs) break;
            int c = nt * 8 + 2 * t;
            yk[c] = from_f<T>(dk[nt][2 * r] * scale);
            yk[c + 1] = from_f<T>(dk[nt][2 * r + 1] * scale);
            yv[c] = from_f<T>(dv[nt][2 * r]);
            yv[c + 1] = from_f<T>(dv[nt][2 * r + 1]);
        }
    }
}

template <typename T, int HSM>
__global__ void __launch_bounds__(THREADS)
    flash_backward_q_kernel(T *dqkv /* (B,T,W) */, const T *dout /* (B,T,C) */, const T *qkv /* (B,T,W) */,
                            const float *lse /* (B,NH,T) */, const float *D /* (B,NH,T) */, int Tn, int NH, int NKV, int hs,
                            int causal, float scale) {
    typedef tiles<T, HSM> L;
    constexpr int LD = L::LD, LDP = L::LDP;
    extern __shared__ __align__(16) unsigned char smem[];
    T *Qs = (T *)smem, *dOs = Qs + 64 * LD, *Ks = dOs + 64 * LD, *Vs = Ks + 64 * LD, *Ws = Vs + 64 * LD;
    const int nqb = (Tn + BQ - 1) / BQ, qb = causal ? nqb - 1 - (int)blockIdx.x : (int)blockIdx.x;
    const int head = blockIdx.y, b = head / NH, h = head % NH, kh = kv_head_of(h, NH, NKV), C = NH * hs;
    const size_t ld = qkv_width(NH, NKV, hs);
    const T *rows = qkv + (size_t)b * Tn * ld, *q = rows + h * hs;
    const T *k = rows + k_column(kh, NH, hs), *v = rows + v_column(kh, NH, NKV, hs);
    const T *dO = dout + (size_t)b * Tn * C + h * hs;
    const int warp = threadIdx.x / 32, g = threadIdx.x % 32 / 4, t = threadIdx.x % 4;
    const int row[2] = {qb * BQ + warp * 16 + g, qb * BQ + warp * 16 + g + 8};
    float lse_r[2], D_r[2];
#pragma unroll
    for (int r = 0; r < 2; r++) {
        lse_r[r] = row[r] < Tn ? lse[(size_t)head * Tn + row[r]] : 0.0f;
        D_r[r] = row[r] < Tn ? D[(size_t)head * Tn + row[r]] : 0.0f;
    }
    T *Ww = Ws + warp * 16 * LDP;

    load_tile<T, LD>(Qs, q, ld, qb * BQ, Tn, hs);
    load_tile<T, LD>(dOs, dO, C, qb * BQ, Tn, hs);
    float dq[HSM / 8][4];
#pragma unroll
    for (int nt = 0; nt < HSM / 8; nt++) dq[nt][0] = dq[nt][1] = dq[nt][2] = dq[nt][3] = 0.0f;
    const int last = causal ? qb : (Tn + BK - 1) / BK - 1;
    for (int kb = 0; kb <= last; kb++) {
        __syncthreads();
        load_tile<T, LD>(Ks, k, ld, kb * BK, Tn, hs);
        load_tile<T, LD>(Vs, v, ld, kb * BK, Tn, hs);
        __syncthreads();
        float p[8][4], dp[8][4];
        tile_scores<T, HSM, LD>(p, Qs + warp * 16 * LD, Ks, hs);  /* S = Q K^T */
        tile_scores<T, HSM, LD>(dp, dOs + warp * 16 * LD, Vs, hs); /* dP = dO V^T */
#pragma unroll
        for (int nt = 0; nt < 8; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                int j = kb * BK + nt * 8 + 2 * t + (e & 1), r = e >> 1;
                float pe = visible(row[r], j, Tn, causal) ? __expf(p[nt][e] * scale - lse_r[r]) : 0.0f;
                dp[nt][e] = pe * (dp[nt][e] - D_r[r]);
            }
        store_warp_tile<T, LDP>(Ww, dp);
        __syncwarp();
        tile_accumulate<T, HSM, LD, LDP>(dq, Ww, Ks, hs); /* dQ += dS K */
        __syncwarp();
    }
#pragma unroll
    for (int r = 0; r < 2; r++) {
        if (row[r] >= Tn) continue;
        T *y = dqkv + (q - qkv) + (size_t)row[r] * ld; /* where q's row is */
#pragma unroll
        for (int nt = 0; nt < HSM / 8; nt++) {
            if (nt * 8 >= hs) break;
            y[nt * 8 + 2 * t] = from_f<T>(dq[nt][2 * r] * scale);
            y[nt * 8 + 2 * t + 1] = from_f<T>(dq[nt][2 * r + 1] * scale);
        }
    }
}

/* ---- host side ---- */

/* The compiled width for head size hs, or 0 when unsupported. */
static int width_for(int hs) {
    if (hs <= 0 || hs % 16 || hs > 128) return 0;
    return hs <= 64 ? 64 : 128;
}

template <typename T, int HSM>
static hg_status set_smem(hg_backend *be) {
    typedef tiles<T, HSM> L;
    size_t limit = cuda_of(be)->smem_optin;
    if (L::forward <= limit)
        HG_TRY(cuda_check(be, cudaFuncSetAttribute(flash_forward_kernel<T, HSM>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)L::forward),
                          "cudaFuncSetAttribute (flash_forward_kernel)"));
    if (L::backward <= limit) {
        HG_TRY(cuda_check(be, cudaFuncSetAttribute(flash_backward_kv_kernel<T, HSM>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                   (int)L::backward),
                          "cudaFuncSetAttribute (flash_backward_kv_kernel)"));
        HG_TRY(cuda_check(be, cudaFuncSetAttribute(flash_backward_q_kernel<T, HSM>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                   (int)L::backward),
                          "cudaFuncSetAttribute (flash_backward_q_kernel)"));
    }
    return HG_OK;
}

hg_status cuda_attention_init(hg_backend *be) {
    HG_TRY((set_smem<bf16, 64>(be)));
    return set_smem<bf16, 128>(be);
}

static hg_status check_shape(hg_backend *be, const hg_attention_shape *s, size_t smem) {
    if (!width_for(s->hs))
        return cuda_fail(be, HG_ERR_UNSUPPORTED, "attention: head size %d is not supported on CUDA (a multiple of 16, at most 128)",
                         s->hs);
    if (smem > cuda_of(be)->smem_optin)
        return cuda_fail(be, HG_ERR_UNSUPPORTED, "attention: head size %d needs %zu bytes of shared memory; this GPU allows %zu",
                         s->hs, smem, cuda_of(be)->smem_optin);
    return HG_OK;
}

template <typename T, int HSM>
static hg_status forward_launch(hg_backend *be, T *out, float *lse, const T *qkv, const hg_attention_shape *s) {
    size_t smem = tiles<T, HSM>::forward;
    HG_TRY(check_shape(be, s, smem));
    dim3 grid((s->T + BQ - 1) / BQ, s->B * s->NH);
    flash_forward_kernel<T, HSM><<<grid, THREADS, smem, cuda_stream(be)>>>(out, lse, qkv, s->T, s->NH, hg_attention_kv_heads(s),
                                                                           s->hs, s->causal, 1.0f / sqrtf((float)s->hs));
    return cuda_launched(be, "flash_forward_kernel");
}

template <typename T, int HSM>
static hg_status backward_launch(hg_backend *be, T *dqkv, const T *dout, const T *qkv, const T *out, const float *lse,
                                 const hg_attention_shape *s, float *D) {
    size_t smem = tiles<T, HSM>::backward;
    HG_TRY(check_shape(be, s, smem));
    int BT = s->B * s->T;
    flash_backward_dot_kernel<T><<<(BT + 7) / 8, 256, 0, cuda_stream(be)>>>(D, dout, out, BT, s->T, s->NH, s->hs);
    HG_TRY(cuda_launched(be, "flash_backward_dot_kernel"));
    const int NKV = hg_attention_kv_heads(s), blocks = (s->T + BQ - 1) / BQ;
    float scale = 1.0f / sqrtf((float)s->hs);
    flash_backward_kv_kernel<T, HSM><<<dim3(blocks, s->B * NKV), THREADS, smem, cuda_stream(be)>>>(
        dqkv, dout, qkv, lse, D, s->T, s->NH, NKV, s->hs, s->causal, scale);
    HG_TRY(cuda_launched(be, "flash_backward_kv_kernel"));
    flash_backward_q_kernel<T, HSM><<<dim3(blocks, s->B * s->NH), THREADS, smem, cuda_stream(be)>>>(
        dqkv, dout, qkv, lse, D, s->T, s->NH, NKV, s->hs, s->causal, scale);
    return cuda_launched(be, "flash_backward_q_kernel");
}

/* Calls launch<bf16, width>(...) for hs's compiled width. */
#define ATTENTION_DISPATCH(be, s, launch, ...)                                                          \
    do {                                                                                                \
        int w_ = width_for((s)->hs);                                                                    \
        if (!w_) return check_shape(be, s, 0);                                                          \
        typedef bf16 T;                                                                                 \
        return w_ == 64 ? launch<T, 64>(be, __VA_ARGS__) : launch<T, 128>(be, __VA_ARGS__);             \
    } while (0)

extern "C" hg_status cuda_attention_forward(hg_backend *be, float *out, float *lse, const float *qkv, const hg_attention_shape *s,
                                            void *scratch) {
    CUDA_OP("attention_forward");
    if (be->precision == HG_PRECISION_FP32) return cuda_attention_fp32_forward(be, out, lse, qkv, s);
    (void)scratch;
    ATTENTION_DISPATCH(be, s, forward_launch, (T *)out, lse, (const T *)qkv, s);
}

extern "C" hg_status cuda_attention_backward(hg_backend *be, float *dqkv, const float *dout, const float *qkv, const float *out,
                                             const float *lse, const hg_attention_shape *s, void *scratch) {
    CUDA_OP("attention_backward");
    if (be->precision == HG_PRECISION_FP32) return cuda_attention_fp32_backward(be, dqkv, dout, qkv, out, lse, s, (float *)scratch);
    ATTENTION_DISPATCH(be, s, backward_launch, (T *)dqkv, (const T *)dout, (const T *)qkv, (const T *)out, lse, s,
                       (float *)scratch);
}

/* D: one float per (b, head, t). */
extern "C" size_t cuda_attention_scratch_bytes(hg_backend *be, const hg_attention_shape *s) {
    (void)be;
    return sizeof(float) * (size_t)s->B * s->NH * s->T;
}
