/* Attention one warp per row on the GPU, written for clarity rather than speed: the fp32
 * checking mode's kernels, and in bf16 those of head sizes the flash kernels
 * (attention.cu) are not compiled for (up to 256: Gemma's) where cuDNN does not take the
 * shape. Lane l holds elements l, l+32, ..., l+224 of the row's head vectors (hs <=
 * 256); each dot product is a warp sum, in fp32 whatever T is. Memory is linear in T, as
 * in the flash kernels, and the same quantities are kept: out, lse, and in backward D =
 * rowsum(dO * O). With a cap c (Gemma 2's attn_softcap), a scaled score z becomes
 * c tanh(z / c), and dS is multiplied by the cap's slope 1 - tanh^2. A query's first key
 * is its window's or its packed document's start, whichever is later; a key's last
 * query, the end of its window or of its document.
 *
 *   forward  - per query row: online softmax over the keys it may see;
 *   backward - per query row: D and dQ; then per key row of a kv head: dK and dV over
 *              the queries that see it, for each query head of its group in turn
 *              (grouped-query attention). Each gradient row is owned by one warp: no
 *              atomics, a fixed order.
 *
 * QKV rows (B,T,W) as in cuda.h: q (NH heads) | k (NKV) | v (NKV); out (B,T,C), C = NH hs;
 * lse and D (B,NH,T), fp32. */
#include <math.h>

#include "backend/cuda/cuda.h"

enum { ROW_WARPS = 8, PER_LANE = CUDA_MAX_HEAD_SIZE / 32 };

typedef struct row_geom {
    int Tn, NH, NKV, hs, causal;
    float scale, cap;
    int window;         /* > 0: a query sees its last `window` keys (causal) */
    const int32_t *pos; /* (B,T) or NULL: packed documents, query i of row b sees no key
                           before its document's start i - pos[b T + i] (causal) */
} row_geom;

/* The first key query i of row b sees: its window's or its document's, the later. */
__device__ __forceinline__ int first_key(const row_geom &g, int b, int i) {
    int w = g.causal && g.window > 0 && i - g.window + 1 > 0 ? i - g.window + 1 : 0;
    int d = g.pos ? i - g.pos[(size_t)b * g.Tn + i] : 0;
    return d > w ? d : w;
}

/* v[u] = x[lane + 32u] for the lanes' elements of a head vector (0 past hs). */
template <typename T>
__device__ __forceinline__ void load_row(float v[PER_LANE], const T *x, int hs) {
#pragma unroll
    for (int u = 0; u < PER_LANE; u++) {
        int d = threadIdx.x % 32 + 32 * u;
        v[u] = d < hs ? to_f(x[d]) : 0.0f;
    }
}

template <typename T>
__device__ __forceinline__ float dot_row(const float a[PER_LANE], const T *x, int hs) {
    float s = 0.0f;
#pragma unroll
    for (int u = 0; u < PER_LANE; u++) {
        int d = threadIdx.x % 32 + 32 * u;
        if (d < hs) s += a[u] * to_f(x[d]);
    }
    return warp_sum(s);
}

template <typename T>
__device__ __forceinline__ void store_row(T *x, const float v[PER_LANE], float scale, int hs) {
#pragma unroll
    for (int u = 0; u < PER_LANE; u++) {
        int d = threadIdx.x % 32 + 32 * u;
        if (d < hs) x[d] = from_f<T>(v[u] * scale);
    }
}

/* The score of raw dot product `dot`: scaled, then capped where there is a cap; *slope
 * (may be NULL) gets the cap's derivative, 1 without one. */
__device__ __forceinline__ float score(const row_geom &g, float dot, float *slope) {
    float z = dot * g.scale;
    if (g.cap > 0.0f) {
        float t = tanhf(z / g.cap);
        if (slope) *slope = 1.0f - t * t;
        return g.cap * t;
    }
    if (slope) *slope = 1.0f;
    return z;
}

/* Row r of this launch: (b, h, i) with h one of `heads` heads; returns 0 past the end. */
__device__ __forceinline__ int row_of(const row_geom &g, int B, int heads, int *b, int *h, int *i) {
    int r = blockIdx.x * ROW_WARPS + threadIdx.x / 32;
    if (r >= B * heads * g.Tn) return 0;
    *i = r % g.Tn;
    *h = r / g.Tn % heads;
    *b = r / g.Tn / heads;
    return 1;
}

template <typename T>
__global__ void attention_rows_forward_kernel(T *out /* (B,T,C) */, float *lse /* (B,NH,T) */, const T *qkv /* (B,T,W) */,
                                              int B, row_geom g) {
    int b, h, i;
    if (!row_of(g, B, g.NH, &b, &h, &i)) return;
    const int C = g.NH * g.hs, kh = kv_head_of(h, g.NH, g.NKV);
    const size_t ld = qkv_width(g.NH, g.NKV, g.hs);
    const T *rows = qkv + (size_t)b * g.Tn * ld, *k = rows + k_column(kh, g.NH, g.hs);
    const T *vs = rows + v_column(kh, g.NH, g.NKV, g.hs);
    float q[PER_LANE], o[PER_LANE], m = -INFINITY, l = 0.0f;
    load_row(q, rows + (size_t)i * ld + h * g.hs, g.hs);
#pragma unroll
    for (int u = 0; u < PER_LANE; u++) o[u] = 0.0f;
    int last = g.causal ? i : g.Tn - 1;
    for (int j = first_key(g, b, i); j <= last; j++) {
        float s = score(g, dot_row(q, k + (size_t)j * ld, g.hs), NULL);
        float mnew = fmaxf(m, s), corr = expf(m - mnew), p = expf(s - mnew);
        const T *v = vs + (size_t)j * ld;
        l = l * corr + p;
#pragma unroll
        for (int u = 0; u < PER_LANE; u++) {
            int d = threadIdx.x % 32 + 32 * u;
            o[u] = o[u] * corr + (d < g.hs ? p * to_f(v[d]) : 0.0f);
        }
        m = mnew;
    }
    store_row(out + ((size_t)b * g.Tn + i) * C + h * g.hs, o, 1.0f / l, g.hs);
    if (threadIdx.x % 32 == 0) lse[((size_t)b * g.NH + h) * g.Tn + i] = m + logf(l);
}

/* D for row i, then dQ_i = scale * sum_j P_ij (dP_ij - D_i) slope_ij k_j. */
template <typename T>
__global__ void attention_rows_backward_q_kernel(T *dqkv /* (B,T,W) */, float *D /* (B,NH,T) */, const T *dout /* (B,T,C) */,
                                                 const T *qkv /* (B,T,W) */, const T *out /* (B,T,C) */,
                                                 const float *lse /* (B,NH,T) */, int B, row_geom g) {
    int b, h, i;
    if (!row_of(g, B, g.NH, &b, &h, &i)) return;
    const int C = g.NH * g.hs, kh = kv_head_of(h, g.NH, g.NKV);
    const size_t ld = qkv_width(g.NH, g.NKV, g.hs), head = (size_t)b * g.NH + h;
    const T *rows = qkv + (size_t)b * g.Tn * ld, *ks = rows + k_column(kh, g.NH, g.hs);
    const T *vs = rows + v_column(kh, g.NH, g.NKV, g.hs);
    float q[PER_LANE], dO[PER_LANE], dq[PER_LANE];
    load_row(q, rows + (size_t)i * ld + h * g.hs, g.hs);
    load_row(dO, dout + ((size_t)b * g.Tn + i) * C + h * g.hs, g.hs);
#pragma unroll
    for (int u = 0; u < PER_LANE; u++) dq[u] = 0.0f;
    float Di = dot_row(dO, out + ((size_t)b * g.Tn + i) * C + h * g.hs, g.hs), li = lse[head * g.Tn + i];
    if (threadIdx.x % 32 == 0) D[head * g.Tn + i] = Di;
    int last = g.causal ? i : g.Tn - 1;
    for (int j = first_key(g, b, i); j <= last; j++) {
        const T *k = ks + (size_t)j * ld;
        float slope, p = expf(score(g, dot_row(q, k, g.hs), &slope) - li);
        float ds = p * (dot_row(dO, vs + (size_t)j * ld, g.hs) - Di) * slope;
#pragma unroll
        for (int u = 0; u < PER_LANE; u++) {
            int d = threadIdx.x % 32 + 32 * u;
            if (d < g.hs) dq[u] += ds * to_f(k[d]);
        }
    }
    store_row(dqkv + ((size_t)b * g.Tn + i) * ld + h * g.hs, dq, g.scale, g.hs);
}

/* Key row j of kv head kh: dK_j = scale * sum dS_ij q_i, dV_j = sum P_ij dO_i over the
 * queries i that see j, of each query head of the group in turn. Row index i of row_of
 * is the key here, and its head the kv head. */
template <typename T>
__global__ void attention_rows_backward_kv_kernel(T *dqkv /* (B,T,W) */, const float *D /* (B,NH,T) */,
                                                  const T *dout /* (B,T,C) */, const T *qkv /* (B,T,W) */,
                                                  const float *lse /* (B,NH,T) */, int B, row_geom g) {
    int b, kh, j;
    if (!row_of(g, B, g.NKV, &b, &kh, &j)) return;
    const int C = g.NH * g.hs, group = g.NH / g.NKV;
    const size_t ld = qkv_width(g.NH, g.NKV, g.hs);
    const T *rows = qkv + (size_t)b * g.Tn * ld;
    float k[PER_LANE], v[PER_LANE], dk[PER_LANE], dv[PER_LANE];
    load_row(k, rows + (size_t)j * ld + k_column(kh, g.NH, g.hs), g.hs);
    load_row(v, rows + (size_t)j * ld + v_column(kh, g.NH, g.NKV, g.hs), g.hs);
#pragma unroll
    for (int u = 0; u < PER_LANE; u++) dk[u] = dv[u] = 0.0f;
    for (int h = kh * group; h < (kh + 1) * group; h++) {
        const size_t head = (size_t)b * g.NH + h;
        const int end = g.causal && g.window > 0 && j + g.window < g.Tn ? j + g.window : g.Tn; /* past: out of the window */
        for (int i = g.causal ? j : 0; i < end; i++) {
            if (g.pos && i > j && g.pos[(size_t)b * g.Tn + i] == 0) break; /* a later document */
            const T *q = rows + (size_t)i * ld + h * g.hs, *dO = dout + ((size_t)b * g.Tn + i) * C + h * g.hs;
            float slope, p = expf(score(g, dot_row(k, q, g.hs), &slope) - lse[head * g.Tn + i]);
            float ds = p * (dot_row(v, dO, g.hs) - D[head * g.Tn + i]) * slope;
#pragma unroll
            for (int u = 0; u < PER_LANE; u++) {
                int d = threadIdx.x % 32 + 32 * u;
                if (d < g.hs) dk[u] += ds * to_f(q[d]), dv[u] += p * to_f(dO[d]);
            }
        }
    }
    T *y = dqkv + ((size_t)b * g.Tn + j) * ld;
    store_row(y + k_column(kh, g.NH, g.hs), dk, g.scale, g.hs);
    store_row(y + v_column(kh, g.NH, g.NKV, g.hs), dv, 1.0f, g.hs);
}

static hg_status check(hg_backend *be, const hg_attention_shape *s, row_geom *g, unsigned *blocks) {
    if (s->hs <= 0 || s->hs > 32 * PER_LANE)
        return cuda_fail(be, HG_ERR_UNSUPPORTED, "attention: head size %d is not supported on CUDA (at most %d)", s->hs,
                         32 * PER_LANE);
    *g = (row_geom){s->T, s->NH, hg_attention_kv_heads(s), s->hs, s->causal, 1.0f / sqrtf((float)s->hs), s->softcap,
                    s->window, s->pos};
    *blocks = (unsigned)(((size_t)s->B * s->NH * s->T + ROW_WARPS - 1) / ROW_WARPS);
    return HG_OK;
}

hg_status cuda_attention_rows_forward(hg_backend *be, float *out, float *lse, const float *qkv, const hg_attention_shape *s) {
    row_geom g;
    unsigned blocks = 0;
    HG_TRY(check(be, s, &g, &blocks));
    CUDA_DISPATCH(be, attention_rows_forward_kernel<T><<<blocks, 32 * ROW_WARPS, 0, cuda_stream(be)>>>((T *)out, lse,
                                                                                                       (const T *)qkv, s->B, g));
    return cuda_launched(be, "attention_rows_forward_kernel");
}

hg_status cuda_attention_rows_backward(hg_backend *be, float *dqkv, const float *dout, const float *qkv, const float *out,
                                       const float *lse, const hg_attention_shape *s, float *D) {
    row_geom g;
    unsigned blocks = 0;
    HG_TRY(check(be, s, &g, &blocks));
    CUDA_DISPATCH(be, attention_rows_backward_q_kernel<T><<<blocks, 32 * ROW_WARPS, 0, cuda_stream(be)>>>(
                          (T *)dqkv, D, (const T *)dout, (const T *)qkv, (const T *)out, lse, s->B, g));
    HG_TRY(cuda_launched(be, "attention_rows_backward_q_kernel"));
    unsigned kv_blocks = (unsigned)(((size_t)s->B * g.NKV * s->T + ROW_WARPS - 1) / ROW_WARPS);
    CUDA_DISPATCH(be, attention_rows_backward_kv_kernel<T><<<kv_blocks, 32 * ROW_WARPS, 0, cuda_stream(be)>>>(
                          (T *)dqkv, D, (const T *)dout, (const T *)qkv, lse, s->B, g));
    return cuda_launched(be, "attention_rows_backward_kv_kernel");
}
