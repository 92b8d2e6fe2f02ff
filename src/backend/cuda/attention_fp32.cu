/* Attention in fp32 on the GPU: the checking mode's kernels, written for clarity rather
 * than speed. One warp per row: lane l holds elements l, l+32, l+64, l+96 of the row's
 * head vectors (hs <= 128); each dot product is a warp sum. Memory is linear in T, as in
 * the flash kernels (attention.cu), and the same quantities are kept: out, lse, and in
 * backward D = rowsum(dO * O).
 *
 *   forward  - per query row: online softmax over the keys it may see;
 *   backward - per query row: D and dQ; then per key row: dK and dV over the queries
 *              that see it. Each gradient row is owned by one warp: no atomics. */
#include <math.h>

#include "backend/cuda/cuda.h"

enum { ROW_WARPS = 8, PER_LANE = 4 }; /* hs <= 32 * PER_LANE */

typedef struct row_geom {
    int Tn, NH, hs, causal;
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

/* Row r of this launch: (b, h, i); returns 0 past the end. */
__device__ __forceinline__ int row_of(const row_geom &g, int B, int *b, int *h, int *i) {
    int r = blockIdx.x * ROW_WARPS + threadIdx.x / 32;
    if (r >= B * g.NH * g.Tn) return 0;
    *i = r % g.Tn;
    *h = r / g.Tn % g.NH;
    *b = r / g.Tn / g.NH;
    return 1;
}

__global__ void attention_fp32_forward_kernel(float *out, float *lse, const float *qkv, int B, row_geom g) {
    int b, h, i;
    if (!row_of(g, B, &b, &h, &i)) return;
    const int C = g.NH * g.hs;
    const size_t ld = 3 * (size_t)C;
    const float *base = qkv + (size_t)b * g.Tn * ld + h * g.hs;
    float q[PER_LANE], o[PER_LANE] = {0.0f, 0.0f, 0.0f, 0.0f}, m = -INFINITY, l = 0.0f;
    load_row(q, base + (size_t)i * ld, g.hs);
    int last = g.causal ? i : g.Tn - 1;
    for (int j = 0; j <= last; j++) {
        float s = dot_row(q, base + (size_t)j * ld + C, g.hs) * g.scale;
        float mnew = fmaxf(m, s), corr = expf(m - mnew), p = expf(s - mnew);
        const float *v = base + (size_t)j * ld + 2 * C;
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
__global__ void attention_fp32_backward_q_kernel(float *dqkv, float *D, const float *dout, const float *qkv, const float *out,
                                                 const float *lse, int B, row_geom g) {
    int b, h, i;
    if (!row_of(g, B, &b, &h, &i)) return;
    const int C = g.NH * g.hs;
    const size_t ld = 3 * (size_t)C, head = (size_t)b * g.NH + h;
    const float *base = qkv + (size_t)b * g.Tn * ld + h * g.hs;
    float q[PER_LANE], dO[PER_LANE], dq[PER_LANE] = {0.0f, 0.0f, 0.0f, 0.0f};
    load_row(q, base + (size_t)i * ld, g.hs);
    load_row(dO, dout + ((size_t)b * g.Tn + i) * C + h * g.hs, g.hs);
    float Di = dot_row(dO, out + ((size_t)b * g.Tn + i) * C + h * g.hs, g.hs), li = lse[head * g.Tn + i];
    if (threadIdx.x % 32 == 0) D[head * g.Tn + i] = Di;
    int last = g.causal ? i : g.Tn - 1;
    for (int j = 0; j <= last; j++) {
        const float *k = base + (size_t)j * ld + C;
        float p = expf(dot_row(q, k, g.hs) * g.scale - li);
        float ds = p * (dot_row(dO, k + C, g.hs) - Di);
#pragma unroll
        for (int u = 0; u < PER_LANE; u++) {
            int d = threadIdx.x % 32 + 32 * u;
            if (d < g.hs) dq[u] += ds * k[d];
        }
    }
    store_row(dqkv + ((size_t)b * g.Tn + i) * ld + h * g.hs, dq, g.scale, g.hs);
}

/* Key row j: dK_j = scale * sum_i dS_ij q_i, dV_j = sum_i P_ij dO_i over the queries i
 * that see j. Row index i of row_of is the key here. */
__global__ void attention_fp32_backward_kv_kernel(float *dqkv, const float *D, const float *dout, const float *qkv,
                                                  const float *lse, int B, row_geom g) {
    int b, h, j;
    if (!row_of(g, B, &b, &h, &j)) return;
    const int C = g.NH * g.hs;
    const size_t ld = 3 * (size_t)C, head = (size_t)b * g.NH + h;
    const float *base = qkv + (size_t)b * g.Tn * ld + h * g.hs;
    float k[PER_LANE], v[PER_LANE], dk[PER_LANE] = {0.0f, 0.0f, 0.0f, 0.0f}, dv[PER_LANE] = {0.0f, 0.0f, 0.0f, 0.0f};
    load_row(k, base + (size_t)j * ld + C, g.hs);
    load_row(v, base + (size_t)j * ld + 2 * C, g.hs);
    for (int i = g.causal ? j : 0; i < g.Tn; i++) {
        const float *q = base + (size_t)i * ld, *dO = dout + ((size_t)b * g.Tn + i) * C + h * g.hs;
        float p = expf(dot_row(k, q, g.hs) * g.scale - lse[head * g.Tn + i]);
        float ds = p * (dot_row(v, dO, g.hs) - D[head * g.Tn + i]);
#pragma unroll
        for (int u = 0; u < PER_LANE; u++) {
            int d = threadIdx.x % 32 + 32 * u;
            if (d < g.hs) dk[u] += ds * q[d], dv[u] += p * dO[d];
        }
    }
    float *y = dqkv + ((size_t)b * g.Tn + j) * ld + h * g.hs;
    store_row(y + C, dk, g.scale, g.hs);
    store_row(y + 2 * C, dv, 1.0f, g.hs);
}

static hg_status check(hg_backend *be, const hg_attention_shape *s, row_geom *g, unsigned *blocks) {
    if (s->hs <= 0 || s->hs > 32 * PER_LANE)
        return cuda_fail(be, HG_ERR_UNSUPPORTED, "attention: head size %d is not supported on CUDA in fp32 (at most %d)", s->hs,
                         32 * PER_LANE);
    *g = (row_geom){s->T, s->NH, s->hs, s->causal, 1.0f / sqrtf((float)s->hs)};
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
    attention_fp32_backward_kv_kernel<<<blocks, 32 * ROW_WARPS, 0, cuda_stream(be)>>>(dqkv, D, dout, qkv, lse, s->B, g);
    return cuda_launched(be, "attention_fp32_backward_kv_kernel");
}
