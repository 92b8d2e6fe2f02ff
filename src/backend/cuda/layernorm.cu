/* LayerNorm and RMSNorm on the GPU: forward, forward fused with the residual add (and its
 * dropout), and backward; dropout's backward. One warp per row, 16-byte loads where the
 * row length and pointers allow; statistics and every sum in fp32. The row (C elements of
 * T) is read from L1/L2 on the second and third passes.
 * As on the CPU, one code path serves both norms: RMSNorm is LayerNorm with the mean
 * taken as 0 (never stored: mean may be NULL) and no bias; a NULL w or b reads as weight
 * 1 or bias 0 (a norm without affine parameters).
 *
 * Backward writes dinp per row, and the parameter gradients dw, db as a fixed-order
 * column sum (reduce.cuh) over dy * xhat and dy: no atomics, so they are deterministic.
 * dw, db are NULL exactly when w, b are, and a NULL one is not summed.
 * With dropout, masks come from the same Philox counters as the CPU (ops/dropout.h).
 * The q/k norm (Qwen3) is RMSNorm of each q and k head of the QKV row, a warp per (row,
 * head), its weight gradients column sums over (row, head) pairs.
 *
 * Legend: N rows, C channels. */
#include "backend/cuda/cuda.h"
#include "backend/cuda/reduce.cuh"

enum { LN_WARPS = 8 };

/* Each kernel is instantiated for V = 1 and V = VEC16(T) (16-byte loads and stores, cuda.h);
 * a lane handles V consecutive elements at a time, columns lane*V, lane*V + 32V, ... */

/* Mean (0 for RMSNorm) and rstd of row x (C) as the CPU computes them: two passes, fp32. */
template <typename T, int V>
__device__ __forceinline__ void row_stats(const T *x /* (C) */, int C, int rms, float eps, float *mean, float *rstd) {
    const int lane = threadIdx.x % 32;
    float m = 0.0f, f[V];
    if (!rms) {
        float s = 0.0f;
        for (int i = lane * V; i < C; i += 32 * V) {
            load_v(f, x + i);
#pragma unroll
            for (int j = 0; j < V; j++) s += f[j];
        }
        m = warp_sum(s) / (float)C;
    }
    float v = 0.0f;
    for (int i = lane * V; i < C; i += 32 * V) {
        load_v(f, x + i);
#pragma unroll
        for (int j = 0; j < V; j++) v += (f[j] - m) * (f[j] - m);
    }
    *mean = m;
    *rstd = rsqrtf(warp_sum(v) / (float)C + eps);
}

/* out (C) = (x - m) s w + b; w, b (C) or NULL. */
template <typename T, int V>
__device__ __forceinline__ void norm_row(T *out, const T *x, const T *w, const T *b, int C, float m, float s) {
    float f[V], wf[V], bf[V];
    for (int i = threadIdx.x % 32 * V; i < C; i += 32 * V) {
        load_v(f, x + i);
        if (w) load_v(wf, w + i);
        if (b) load_v(bf, b + i);
#pragma unroll
        for (int j = 0; j < V; j++) f[j] = (f[j] - m) * s * (w ? wf[j] : 1.0f) + (b ? bf[j] : 0.0f);
        store_v(out + i, f);
    }
}

/* mean is NULL for RMSNorm. */
template <typename T, int V>
__global__ void __launch_bounds__(32 * LN_WARPS)
    layernorm_forward_kernel(T *out /* (N,C) */, float *mean /* (N) or NULL */, float *rstd /* (N) */, const T *inp /* (N,C) */,
                             const T *w /* (C) or NULL */, const T *b /* (C) or NULL */, int N, int C, int rms, float eps) {
    int n = blockIdx.x * LN_WARPS + threadIdx.x / 32;
    if (n >= N) return;
    const T *x = inp + (size_t)n * C;
    float m, s;
    row_stats<T, V>(x, C, rms, eps, &m, &s);
    norm_row<T, V>(out + (size_t)n * C, x, w, b, C, m, s);
    if (threadIdx.x % 32 == 0) {
        if (mean) mean[n] = m;
        rstd[n] = s;
    }
}

/* res_out = res_in + dropout(delta), stored first; the statistics are of the stored
 * (rounded) residual, the values backward will read. Each lane reads back only what it
 * wrote. */
template <typename T, int V>
__global__ void __launch_bounds__(32 * LN_WARPS)
    residual_layernorm_forward_kernel(T *res_out /* (N,C) */, T *out /* (N,C) */, float *mean /* (N) or NULL */,
                                      float *rstd /* (N) */, const T *res_in /* (N,C) */, const T *delta /* (N,C) */,
                                      const T *w /* (C) or NULL */, const T *b /* (C) or NULL */, int N, int C, hg_dropout drop,
                                      int rms, float eps) {
    int n = blockIdx.x * LN_WARPS + threadIdx.x / 32;
    if (n >= N) return;
    size_t o = (size_t)n * C;
    int dropping = hg_dropout_on(&drop);
    float d[V], r[V];
    for (int i = threadIdx.x % 32 * V; i < C; i += 32 * V) {
        load_v(d, delta + o + i);
        load_v(r, res_in + o + i);
#pragma unroll
        for (int j = 0; j < V; j++) r[j] += dropping ? d[j] * hg_dropout_scale(&drop, o + i + j) : d[j];
        store_v(res_out + o + i, r);
    }
    __syncwarp();
    float m, s;
    row_stats<T, V>(res_out + o, C, rms, eps, &m, &s);
    norm_row<T, V>(out + o, res_out + o, w, b, C, m, s);
    if (threadIdx.x % 32 == 0) {
        if (mean) mean[n] = m;
        rstd[n] = s;
    }
}

/* With g = dy w (dy when w is NULL) and xhat = (x - m) rstd:
 * dinp (row) += rstd (g - mean(g) - xhat mean(g xhat)); RMSNorm has m = 0 and no mean(g). */
template <typename T, int V>
__global__ void __launch_bounds__(32 * LN_WARPS)
    layernorm_backward_kernel(T *dinp /* (N,C) */, const T *dout /* (N,C) */, const T *inp /* (N,C) */,
                              const T *w /* (C) or NULL */, const float *mean /* (N); NULL for RMSNorm */,
                              const float *rstd /* (N) */, int N, int C, int rms) {
    int n = blockIdx.x * LN_WARPS + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (n >= N) return;
    size_t o = (size_t)n * C;
    float m = rms ? 0.0f : mean[n], s = rstd[n], sum_g = 0.0f, sum_gx = 0.0f;
    float g[V], x[V], wf[V], di[V];
    for (int i = lane * V; i < C; i += 32 * V) {
        load_v(g, dout + o + i);
        load_v(x, inp + o + i);
        if (w) load_v(wf, w + i);
#pragma unroll
        for (int j = 0; j < V; j++) {
            float gj = w ? g[j] * wf[j] : g[j];
            sum_g += gj;
            sum_gx += gj * (x[j] - m) * s;
        }
    }
    float mg = warp_sum(sum_g) / (float)C, mgx = warp_sum(sum_gx) / (float)C;
    if (rms) mg = 0.0f;
    for (int i = lane * V; i < C; i += 32 * V) {
        load_v(g, dout + o + i);
        load_v(x, inp + o + i);
        load_v(di, dinp + o + i);
        if (w) load_v(wf, w + i);
#pragma unroll
        for (int j = 0; j < V; j++) di[j] += s * ((w ? g[j] * wf[j] : g[j]) - mg - (x[j] - m) * s * mgx);
        store_v(dinp + o + i, di);
    }
}

/* (dy * xhat, dy) at (n, c): the terms of dw and db. mean is NULL for RMSNorm. */
template <typename T>
struct ln_param_terms {
    const T *dout, *inp;
    const float *mean, *rstd;
    int C;
    __device__ float2 operator()(int n, int c) const {
        float dy = to_f(dout[(size_t)n * C + c]), m = mean ? mean[n] : 0.0f;
        return make_float2(dy * (to_f(inp[(size_t)n * C + c]) - m) * rstd[n], dy);
    }
};

/* ---- q/k norm (ops/layernorm.h): RMSNorm of each unit of a row's q|k part in place, a
 * warp per (row, unit). A unit is a head (hs wide; unit u < NH is a q head, weighted by
 * wq, else a k head, by wk), or with `whole` (OLMo 2) all q heads as one unit (QD wide)
 * and all k heads as another (KVD wide). ---- */

/* Units per row, and unit u's column in the row's q|k part, its width, whether it is q. */
struct qk_unit {
    int off, width, q;
};
__host__ __device__ __forceinline__ int qk_units(const hg_qk_norm_shape &s) { return s.whole ? 2 : s.NH + s.NKV; }
__device__ __forceinline__ qk_unit qk_unit_of(const hg_qk_norm_shape &s, int u) {
    if (s.whole) return {u ? s.NH * s.hs : 0, (u ? s.NKV : s.NH) * s.hs, u == 0};
    return {u * s.hs, s.hs, u < s.NH};
}

template <typename T>
__global__ void __launch_bounds__(32 * LN_WARPS)
    qk_norm_forward_kernel(T *qkv /* (N,W) */, T *raw /* (N,(NH+NKV) hs) or NULL */, float *rstd /* (N, units) */,
                           const T *wq /* (unit width) or NULL */, const T *wk /* likewise */, hg_qk_norm_shape s) {
    const int U = qk_units(s), QK = (s.NH + s.NKV) * s.hs;
    const long long r = (long long)blockIdx.x * LN_WARPS + threadIdx.x / 32;
    if (r >= (long long)s.N * U) return;
    const int n = (int)(r / U);
    const qk_unit u = qk_unit_of(s, (int)(r % U));
    T *y = qkv + (size_t)n * qkv_width(s.NH, s.NKV, s.hs) + u.off;
    T *kept = raw ? raw + (size_t)n * QK + u.off : NULL;
    if (kept) { /* kept for backward; each lane copies, then reads back, its own elements */
        for (int i = threadIdx.x % 32; i < u.width; i += 32) kept[i] = y[i];
        __syncwarp();
    }
    const T *x = kept ? kept : y;
    float m, rs;
    row_stats<T, 1>(x, u.width, 1, s.eps, &m, &rs);
    norm_row<T, 1>(y, x, u.q ? wq : wk, NULL, u.width, 0.0f, rs);
    if (threadIdx.x % 32 == 0) rstd[r] = rs;
}

/* d (one unit of dqkv) = rstd (g - xhat mean(g xhat)), g = d w, in place. */
template <typename T>
__global__ void __launch_bounds__(32 * LN_WARPS)
    qk_norm_backward_kernel(T *dqkv /* (N,W) */, const T *raw /* (N,(NH+NKV) hs) */, const float *rstd /* (N, units) */,
                            const T *wq, const T *wk, hg_qk_norm_shape s) {
    const int U = qk_units(s), QK = (s.NH + s.NKV) * s.hs;
    const long long r = (long long)blockIdx.x * LN_WARPS + threadIdx.x / 32;
    if (r >= (long long)s.N * U) return;
    const int n = (int)(r / U), lane = threadIdx.x % 32;
    const qk_unit u = qk_unit_of(s, (int)(r % U));
    T *d = dqkv + (size_t)n * qkv_width(s.NH, s.NKV, s.hs) + u.off;
    const T *x = raw + (size_t)n * QK + u.off, *w = u.q ? wq : wk;
    const float rs = rstd[r];
    float sum_gx = 0.0f;
    for (int i = lane; i < u.width; i += 32) sum_gx += to_f(d[i]) * (w ? to_f(w[i]) : 1.0f) * to_f(x[i]) * rs;
    const float mgx = warp_sum(sum_gx) / (float)u.width;
    for (int i = lane; i < u.width; i += 32) {
        float g = to_f(d[i]) * (w ? to_f(w[i]) : 1.0f);
        d[i] = from_f<T>(rs * (g - to_f(x[i]) * rs * mgx));
    }
}

/* (dy xhat, 0) at (m, c) for the q units (m = n nq + j) or the k units (m = n nk + j):
 * the terms of dwq or dwk. */
template <typename T>
struct qk_norm_terms {
    const T *dqkv, *raw;
    const float *rstd;
    hg_qk_norm_shape s;
    int k; /* 0: q units, 1: k units */
    __device__ float2 operator()(int m, int c) const {
        const int per = s.whole ? 1 : k ? s.NKV : s.NH, n = m / per, U = qk_units(s);
        const int j = s.whole ? k : m % per + (k ? s.NH : 0);
        const qk_unit u = qk_unit_of(s, j);
        const size_t r = (size_t)n * U + j;
        float dy = to_f(dqkv[(size_t)n * qkv_width(s.NH, s.NKV, s.hs) + u.off + c]);
        return make_float2(dy * to_f(raw[(size_t)n * (s.NH + s.NKV) * s.hs + u.off + c]) * rstd[r], 0.0f);
    }
};

template <typename T>
__global__ void dropout_backward_kernel(T *dbranch, const T *dres, size_t n, hg_dropout drop) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        dbranch[i] = from_f<T>(to_f(dres[i]) * hg_dropout_scale(&drop, i));
}

/* res_out = res_in + dropout(delta), element by element (res_out may be res_in). */
template <typename T>
__global__ void residual_add_kernel(T *res_out, const T *res_in, const T *delta, size_t n, hg_dropout drop) {
    int dropping = hg_dropout_on(&drop);
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float d = to_f(delta[i]);
        res_out[i] = from_f<T>(to_f(res_in[i]) + (dropping ? d * hg_dropout_scale(&drop, i) : d));
    }
}

static unsigned row_blocks(int N) { return (unsigned)((N + LN_WARPS - 1) / LN_WARPS); }

/* RMSNorm neither reads nor writes mean: the kernels see NULL. */
static float *mean_of(float *mean, const hg_norm_spec *ns) { return ns->rms ? NULL : mean; }

extern "C" void cuda_layernorm_forward(hg_backend *be, float *out, float *mean, float *rstd, const float *inp, const float *w,
                                       const float *b, int N, int C, const hg_norm_spec *ns) {
    CUDA_OP(ns->rms ? "rmsnorm_forward" : "layernorm_forward");
    CUDA_DISPATCH(be, {
        auto k = cuda_vec16_ok<T>(C, {out, inp, w, b}) ? layernorm_forward_kernel<T, VEC16(T)> : layernorm_forward_kernel<T, 1>;
        k<<<row_blocks(N), 32 * LN_WARPS, 0, cuda_stream(be)>>>((T *)out, mean_of(mean, ns), rstd, (const T *)inp, (const T *)w,
                                                                (const T *)b, N, C, ns->rms, ns->eps);
    });
    cuda_launched(be, "layernorm_forward_kernel");
}

extern "C" void cuda_residual_layernorm_forward(hg_backend *be, float *res_out, float *out, float *mean, float *rstd,
                                                const float *res_in, const float *delta, const float *w, const float *b, int N,
                                                int C, const hg_dropout *drop, const hg_norm_spec *ns) {
    CUDA_OP(ns->rms ? "residual_rmsnorm_forward" : "residual_layernorm_forward");
    CUDA_DISPATCH(be, {
        auto k = cuda_vec16_ok<T>(C, {res_out, out, res_in, delta, w, b}) ? residual_layernorm_forward_kernel<T, VEC16(T)>
                                                                          : residual_layernorm_forward_kernel<T, 1>;
        k<<<row_blocks(N), 32 * LN_WARPS, 0, cuda_stream(be)>>>((T *)res_out, (T *)out, mean_of(mean, ns), rstd,
                                                                (const T *)res_in, (const T *)delta, (const T *)w, (const T *)b, N,
                                                                C, cuda_dropout(drop), ns->rms, ns->eps);
    });
    cuda_launched(be, "residual_layernorm_forward_kernel");
}

extern "C" size_t cuda_layernorm_scratch_bytes(hg_backend *be, int N, int C) {
    (void)be, (void)N;
    return sizeof(float2) * COLSUM_MAX_SPLITS * (size_t)C;
}

/* eps is folded into rstd; ns says which norm. */
extern "C" void cuda_layernorm_backward(hg_backend *be, float *dinp, float *dw, float *db, const float *dout, const float *inp,
                                        const float *w, const float *mean, const float *rstd, int N, int C, float *scratch,
                                        const hg_norm_spec *ns) {
    CUDA_OP(ns->rms ? "rmsnorm_backward" : "layernorm_backward");
    const float *m = ns->rms ? NULL : mean;
    CUDA_DISPATCH(be, auto k = cuda_vec16_ok<T>(C, {dinp, dout, inp, w}) ? layernorm_backward_kernel<T, VEC16(T)>
                                                                         : layernorm_backward_kernel<T, 1>;
                  k<<<row_blocks(N), 32 * LN_WARPS, 0, cuda_stream(be)>>>((T *)dinp, (const T *)dout, (const T *)inp, (const T *)w,
                                                                          m, rstd, N, C, ns->rms);
                  if (cuda_launched(be, "layernorm_backward_kernel") == HG_OK && (dw || db))
                      colsum(be, dw, db, (float2 *)scratch, N, C, ln_param_terms<T>{(const T *)dout, (const T *)inp, m, rstd, C},
                             "layernorm_backward (dw, db)"));
}

static unsigned head_blocks(const hg_qk_norm_shape *s) {
    return (unsigned)(((long long)s->N * qk_units(*s) + LN_WARPS - 1) / LN_WARPS);
}

extern "C" void cuda_qk_norm_forward(hg_backend *be, float *qkv, float *raw, float *rstd, const float *wq, const float *wk,
                                     const hg_qk_norm_shape *s) {
    CUDA_OP("qk_norm_forward");
    CUDA_DISPATCH(be, qk_norm_forward_kernel<T><<<head_blocks(s), 32 * LN_WARPS, 0, cuda_stream(be)>>>(
                          (T *)qkv, (T *)raw, rstd, (const T *)wq, (const T *)wk, *s));
    cuda_launched(be, "qk_norm_forward_kernel");
}

/* dwq, dwk first (they read dqkv as it comes in), then dqkv in place. */
extern "C" void cuda_qk_norm_backward(hg_backend *be, float *dqkv, float *dwq, float *dwk, const float *raw, const float *rstd,
                                      const float *wq, const float *wk, const hg_qk_norm_shape *s, float *scratch) {
    CUDA_OP("qk_norm_backward");
    CUDA_DISPATCH(be, {
        const qk_norm_terms<T> q = {(const T *)dqkv, (const T *)raw, rstd, *s, 0}, k = {(const T *)dqkv, (const T *)raw, rstd, *s, 1};
        int nq, wqn, nk, wkn;
        hg_qk_norm_units(s, &nq, &wqn, &nk, &wkn);
        if (dwq && colsum(be, dwq, NULL, (float2 *)scratch, s->N * nq, wqn, q, "qk_norm_backward (dwq)") != HG_OK) return;
        if (dwk && colsum(be, dwk, NULL, (float2 *)scratch, s->N * nk, wkn, k, "qk_norm_backward (dwk)") != HG_OK) return;
        qk_norm_backward_kernel<T><<<head_blocks(s), 32 * LN_WARPS, 0, cuda_stream(be)>>>((T *)dqkv, (const T *)raw, rstd,
                                                                                           (const T *)wq, (const T *)wk, *s);
    });
    cuda_launched(be, "qk_norm_backward_kernel");
}

extern "C" void cuda_dropout_backward(hg_backend *be, float *dbranch, const float *dres, size_t n, const hg_dropout *drop) {
    CUDA_OP("dropout_backward");
    CUDA_DISPATCH(be, dropout_backward_kernel<T><<<cuda_grid(be, n), 256, 0, cuda_stream(be)>>>((T *)dbranch, (const T *)dres, n,
                                                                                                   cuda_dropout(drop)));
    cuda_launched(be, "dropout_backward_kernel");
}

extern "C" void cuda_residual_add(hg_backend *be, float *res_out, const float *res_in, const float *delta, size_t n,
                                  const hg_dropout *drop) {
    CUDA_OP("residual_add");
    CUDA_DISPATCH(be, residual_add_kernel<T><<<cuda_grid(be, n), 256, 0, cuda_stream(be)>>>((T *)res_out, (const T *)res_in,
                                                                                           (const T *)delta, n, cuda_dropout(drop)));
    cuda_launched(be, "residual_add_kernel");
}
