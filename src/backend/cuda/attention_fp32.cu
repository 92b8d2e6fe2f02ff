/* Attention in fp32 on the GPU: the checking mode's kernels, written for clarity rather
 * than speed. One warp per row: lane l holds elements l, l+32, l+64, l+96 of the row's
 * head vectors (hs <= 128); each dot product is a warp sum. Memory is linear in T, as in
 * the flash kernels (attention.cu), and the same quantities are kept: out, lse, and in
 * backward D = rowsum(dO * O).
 *
 *   forward  - per query row: online softmax over the keys it may see;
 *   backward - per query row: D and dQ; then per key row of a kv head: dK and dV over
 *              the queries that see it, for each query head of its group in turn
 *              (grouped-query attention). Each gradient row is owned by one warp: no
 *              atomics, a fixed order.
 *
 * QKV rows (B,T,W) as in cuda.h: q (NH heads) | k (NKV) | v (NKV); out (B,T,C), C = NH hs;
 * lse and D (B,NH,T). */
#include <math.h>

#include "backend/cuda/cuda.h"

enum { ROW_WARPS = 8, PER_LANE = 4 }; /* hs <= 32 * PER_LANE */

typedef struct row_geom {
    int Tn, NH, NKV, hs, causal;
    float scale;
} row_geom;

/* v[u] = x[lane + 32u] for the lanes' elements of a head vector (0 past hs). */
__device__ __forceinline__ void load_row(float v[PER_LANE], const float *x, int hs) {
#pragma unroll
    for (int u = 0; u < PER_LANE; u++) {
        int d = threadIdx.x % 32 + 32 * u;
        v[u] = d < hs ? x[d] : 0.0f;
    }
}

__device__ __forceinline__ float dot_row(const float a[PER_LANE], const float *x, int hs) {
    float s = 0.0f;
#pragma unroll
    for (int u = 0; u < PER_LANE; u++) {
        int d = threadIdx.x % 32 + 32 * u;
        if (d < hs) s += a[u] * x[d];
    }
    return warp_sum(s);
}

__device__ __forceinline__ void store_row(float *x, const float v[PER_LANE], float scale, int hs) {
#pragma unroll
    for (int u = 0; u < PER_LANE; u++) {
        int d = threadIdx.x % 32 + 32 * u;
        if (d < hs) x[d] = v[u] * scale;
    }
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

__global__ void attention_fp32_forward_kernel(float *out /* (B,T,C) */, float *lse /* (B,NH,T) */, const float *qkv /* (B,T,W) */,
                                              int B, row_geom g) {
    int b, h, i;
    if (!row_of(g, B, g.NH, &b, &h, &i)) return;
    const int C = g.NH * g.hs, kh = kv_head_of(h, g.NH, g.NKV);
    const size_t ld = qkv_width(g.NH, g.NKV, g.hs);
    const float *rows = qkv + (size_t)b * g.Tn * ld, *k = rows + k_column(kh, g.NH, g.hs);
    const float *vs = rows + v_column(kh, g.NH, g.NKV, g.hs);
    float q[PER_LANE], o[PER_LANE] = {0.0f, 0.0f, 0.0f, 0.0f}, m = -INFINITY, l = 0.0f;
    load_row(q, rows + (size_t)i * ld + h * g.hs, g.hs);
    int last = g.causal ? i : g.Tn - 1;
    for (int j = 0; j <= last; j++) {
        float s = dot_row(q, k + (size_t)j * ld, g.hs) * g.scale;
        float mnew = fmaxf(m, s), corr = expf(m - mnew), p = expf(s - mnew);
        const float *v = vs + (size_t)j * ld;
        l = l * corr + p;
#pragma unroll
        for (int u = 0; u < PER_LANE; u++) {
            int d = threadIdx.x % 32 + 32 * u;
            o[u] = o[u] * corr + (d < g.hs ? p * v[d] : 0.0f);
        }
        m = mnew;
    }
    store_row(out + ((size_t)b * g.Tn + i) * C + h * g.hs, o, 1.0f / l, g.hs);
    if (threadIdx.x % 32 == 0) lse[((size_t)b * g.NH + h) * g.Tn + i] = m + logf(l);
}

/* D for row i, then dQ_i = scale * sum_j P_ij (dP_ij - D_i) k_j. */
__global__ void attention_fp32_backward_q_kernel(float *dqkv /* (B,T,W) */, float *D /* (B,NH,T) */,
                                                 const float *dout /* (B,T,C) */, const float *qkv /* (B,T,W) */,
                                                 const float *out /* (B,T,C) */, const float *lse /* (B,NH,T) */, int B,
                                                 row_geom g) {
    int b, h, i;
    if (!row_of(g, B, g.NH, &b, &h, &i)) return;
    const int C = g.NH * g.hs, kh = kv_head_of(h, g.NH, g.NKV);
    const size_t ld = qkv_width(g.NH, g.NKV, g.hs), head = (size_t)b * g.NH + h;
    const float *rows = qkv + (size_t)b * g.Tn * ld, *ks = rows + k_column(kh, g.NH, g.hs);
    const float *vs = rows + v_column(kh, g.NH, g.NKV, g.hs);
    float q[PER_LANE], dO[PER_LANE], dq[PER_LANE] = {0.0f, 0.0f, 0.0f, 0.0f};
    load_row(q, rows + (size_t)i * ld + h * g.hs, g.hs);
    load_row(dO, dout + ((size_t)b * g.Tn + i) * C + h * g.hs, g.hs);
    float Di = dot_row(dO, out + ((size_t)b * g.Tn + i) * C + h * g.hs, g.hs), li = lse[head * g.Tn + i];
    if (threadIdx.x % 32 == 0) D[head * g.Tn + i] = Di;
    int last = g.causal ? i : g.Tn - 1;
    for (int j = 0; j <= last; j++) {
        const float *k = ks + (size_t)j * ld;
        float p = expf(dot_row(q, k, g.hs) * g.scale - li);
        float ds = p * (dot_row(dO, vs + (size_t)j * ld, g.hs) - Di);
#pragma unroll
        for (int u = 0; u < PER_LANE; u++) {
            int d = threadIdx.x % 32 + 32 * u;
            if (d < g.hs) dq[u] += ds * k[d];
        }
    }
    store_row(dqkv + ((size_t)b * g.Tn + i) * ld + h * g.hs, dq, g.scale, g.hs);
}

/* Key row j of kv head kh: dK_j = scale * sum dS_ij q_i, dV_j = sum P_ij dO_i over the
 * queries i that see j, of each query head of the group in turn. Row index i of row_of
 * is the key here, and its head the kv head. */
__global__ void attention_fp32_backward_kv_kernel(float *dqkv /* (B,T,W) */, const float *D /* (B,NH,T) */,
                                                  const float *dout /* (B,T,C) */, const float *qkv /* (B,T,W) */,
                                                  const float *lse /* (B,NH,T) */, int B, row_geom g) {
    int b, kh, j;
    if (!row_of(g, B, g.NKV, &b, &kh, &j)) return;
    const int C = g.NH * g.hs, group = g.NH / g.NKV;
    const size_t ld = qkv_width(g.NH, g.NKV, g.hs);
    const float *rows = qkv + (size_t)b * g.Tn * ld;
    float k[PER_LANE], v[PER_LANE], dk[PER_LANE] = {0.0f, 0.0f, 0.0f, 0.0f}, dv[PER_LANE] = {0.0f, 0.0f, 0.0f, 0.0f};
    load_row(k, rows + (size_t)j * ld + k_column(kh, g.NH, g.hs), g.hs);
    load_row(v, rows + (size_t)j * ld + v_column(kh, g.NH, g.NKV, g.hs), g.hs);
    for (int h = kh * group; h < (kh + 1) * group; h++) {
        const size_t head = (size_t)b * g.NH + h;
        for (int i = g.causal ? j : 0; i < g.Tn; i++) {
            const float *q = rows + (size_t)i * ld + h * g.hs, *dO = dout + ((size_t)b * g.Tn + i) * C + h * g.hs;
            float p = expf(dot_row(k, q, g.hs) * g.scale - lse[head * g.Tn + i]);
            float ds = p * (dot_row(v, dO, g.hs) - D[head * g.Tn + i]);
#pragma unroll
            for (int u = 0; u < PER_LANE; u++) {
                int d = threadIdx.x % 32 + 32 * u;
                if (d < g.hs) dk[u] += ds * q[d], dv[u] += p * dO[d];
            }
        }
    }
    float *y = dqkv + ((size_t)b * g.Tn + j) * ld;
    store_row(y + k_column(kh, g.NH, g.hs), dk, g.scale, g.hs);
    store_row(y + v_column(kh, g.NH, g.NKV, g.hs), dv, 1.0f, g.hs);
}

static hg_status check(hg_backend *be, const hg_attention_shape *s, row_geom *g, unsigned *blocks) {
    if (s->hs <= 0 || s->hs > 32 * PER_LANE)
        return cuda_fail(be, HG_ERR_UNSUPPORTED, "attention: head size %d is not supported on CUDA in fp32 (at most %d)", s->hs,
                         32 * PER_LANE);
    *g = (row_geom){s->T, s->NH, hg_attention_kv_heads(s), s->hs, s->causal, 1.0f / sqrtf((float)s->hs)};
    *blocks = (unsigned)(((size_t)s->B * s->NH * s->T + ROW_WARPS - 1) / ROW_WARPS);
    return HG_OK;
}

hg_status cuda_attention_fp32_forward(hg_backend *be, float *out, float *lse, const float *qkv, const hg_attention_shape *s) {
    row_geom g;
    unsigned blocks = 0;
    HG_TRY(check(be, s, &g, &blocks));
    attention_fp32_forward_kernel<<<blocks, 32 * ROW_WARPS, 0, cuda_stream(be)>>>(out, lse, qkv, s->B, g);
    return cuda_launched(be, "attention_fp32_forward_kernel");
}

hg_status cuda_attention_fp32_backward(hg_backend *be, float *dqkv, const float *dout, const float *qkv, const float *out,
                                       const float *lse, const hg_attention_shape *s, float *D) {
    row_geom g;
    unsigned blocks = 0;
    HG_TRY(check(be, s, &g, &blocks));
    attention_fp32_backward_q_kernel<<<blocks, 32 * ROW_WARPS, 0, cuda_stream(be)>>>(dqkv, D, dout, qkv, out, lse, s->B, g);
    HG_TRY(cuda_launched(be, "attention_fp32_backward_q_kernel"));
    unsigned kv_blocks = (unsigned)(((size_t)s->B * g.NKV * s->T + ROW_WARPS - 1) / ROW_WARPS);
    attention_fp32_backward_kv_kernel<<<kv_blocks, 32 * ROW_WARPS, 0, cuda_stream(be)>>>(dqkv, D, dout, qkv, lse, s->B, g);
    return cuda_launched(be, "attention_fp32_backward_kv_kernel");
}
