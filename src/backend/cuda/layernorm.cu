/* LayerNorm on the GPU (RMSNorm and norms without affine parameters are not written yet:
 * cuda_supports refuses them): forward, forward fused with the residual add (and its dropout),
 * and backward; dropout's backward. One warp per row; statistics and every sum in fp32.
 * The row (C elements of T) is read from L1/L2 on the second and third passes.
 *
 * Backward writes dinp per row, and the parameter gradients dw, db as a fixed-order
 * column sum (reduce.cuh) over dy * xhat and dy: no atomics, so they are deterministic.
 * With dropout, masks come from the same Philox counters as the CPU (ops/dropout.h). */
#include "backend/cuda/cuda.h"
#include "backend/cuda/reduce.cuh"

enum { LN_WARPS = 8 };

/* Mean and rstd of row x (C) as the CPU computes them: two passes, fp32. */
template <typename T>
__device__ __forceinline__ void row_stats(const T *x, int C, float eps, float *mean, float *rstd) {
    int lane = threadIdx.x % 32;
    float s = 0.0f;
    for (int i = lane; i < C; i += 32) s += to_f(x[i]);
    float m = warp_sum(s) / (float)C;
    float v = 0.0f;
    for (int i = lane; i < C; i += 32) {
        float d = to_f(x[i]) - m;
        v += d * d;
    }
    *mean = m;
    *rstd = rsqrtf(warp_sum(v) / (float)C + eps);
}

template <typename T>
__device__ __forceinline__ void norm_row(T *out, const T *x, const T *w, const T *b, int C, float m, float s) {
    for (int i = threadIdx.x % 32; i < C; i += 32) out[i] = from_f<T>((to_f(x[i]) - m) * s * to_f(w[i]) + to_f(b[i]));
}

template <typename T>
__global__ void __launch_bounds__(32 * LN_WARPS)
    layernorm_forward_kernel(T *out, float *mean, float *rstd, const T *inp, const T *w, const T *b, int N, int C, float eps) {
    int n = blockIdx.x * LN_WARPS + threadIdx.x / 32;
    if (n >= N) return;
    const T *x = inp + (size_t)n * C;
    float m, s;
    row_stats(x, C, eps, &m, &s);
    norm_row(out + (size_t)n * C, x, w, b, C, m, s);
    if (threadIdx.x % 32 == 0) mean[n] = m, rstd[n] = s;
}

/* res_out = res_in + dropout(delta), stored first; the statistics are of the stored
 * (rounded) residual, the values backward will read. */
template <typename T>
__global__ void __launch_bounds__(32 * LN_WARPS)
    residual_layernorm_forward_kernel(T *res_out, T *out, float *mean, float *rstd, const T *res_in, const T *delta,
                                      const T *w, const T *b, int N, int C, hg_dropout drop, float eps) {
    int n = blockIdx.x * LN_WARPS + threadIdx.x / 32;
    if (n >= N) return;
    size_t o = (size_t)n * C;
    int dropping = hg_dropout_on(&drop);
    for (int i = threadIdx.x % 32; i < C; i += 32) {
        float d = to_f(delta[o + i]);
        if (dropping) d *= hg_dropout_scale(&drop, o + i);
        res_out[o + i] = from_f<T>(to_f(res_in[o + i]) + d);
    }
    __syncwarp();
    float m, s;
    row_stats(res_out + o, C, eps, &m, &s);
    norm_row(out + o, res_out + o, w, b, C, m, s);
    if (threadIdx.x % 32 == 0) mean[n] = m, rstd[n] = s;
}

/* dinp (row) += rstd * (dy*w - mean(dy*w) - xhat * mean(dy*w*xhat)). */
template <typename T>
__global__ void __launch_bounds__(32 * LN_WARPS)
    layernorm_backward_kernel(T *dinp, const T *dout, const T *inp, const T *w, const float *mean, const float *rstd, int N,
                              int C) {
    int n = blockIdx.x * LN_WARPS + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (n >= N) return;
    size_t o = (size_t)n * C;
    float m = mean[n], s = rstd[n], sum_g = 0.0f, sum_gx = 0.0f;
    for (int i = lane; i < C; i += 32) {
        float g = to_f(dout[o + i]) * to_f(w[i]);
        sum_g += g;
        sum_gx += g * (to_f(inp[o + i]) - m) * s;
    }
    float mg = warp_sum(sum_g) / (float)C, mgx = warp_sum(sum_gx) / (float)C;
    for (int i = lane; i < C; i += 32) {
        float xh = (to_f(inp[o + i]) - m) * s;
        float dx = s * (to_f(dout[o + i]) * to_f(w[i]) - mg - xh * mgx);
        dinp[o + i] = from_f<T>(to_f(dinp[o + i]) + dx);
    }
}

/* (dy * xhat, dy) at (n, c): the terms of dw and db. */
template <typename T>
struct ln_param_terms {
    const T *dout, *inp;
    const float *mean, *rstd;
    int C;
    __device__ float2 operator()(int n, int c) const {
        float dy = to_f(dout[(size_t)n * C + c]);
        return make_float2(dy * (to_f(inp[(size_t)n * C + c]) - mean[n]) * rstd[n], dy);
    }
};

template <typename T>
__global__ void dropout_backward_kernel(T *dbranch, const T *dres, size_t n, hg_dropout drop) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        dbranch[i] = from_f<T>(to_f(dres[i]) * hg_dropout_scale(&drop, i));
}

static unsigned row_blocks(int N) { return (unsigned)((N + LN_WARPS - 1) / LN_WARPS); }

extern "C" void cuda_layernorm_forward(hg_backend *be, float *out, float *mean, float *rstd, const float *inp, const float *w,
                                       const float *b, int N, int C, const hg_norm_spec *ns) {
    CUDA_OP("layernorm_forward");
    CUDA_DISPATCH(be, layernorm_forward_kernel<T><<<row_blocks(N), 32 * LN_WARPS, 0, cuda_stream(be)>>>(
                          (T *)out, mean, rstd, (const T *)inp, (const T *)w, (const T *)b, N, C, ns->eps));
    cuda_launched(be, "layernorm_forward_kernel");
}

extern "C" void cuda_residual_layernorm_forward(hg_backend *be, float *res_out, float *out, float *mean, float *rstd,
                                                const float *res_in, const float *delta, const float *w, const float *b, int N,
                                                int C, const hg_dropout *drop, const hg_norm_spec *ns) {
    CUDA_OP("residual_layernorm_forward");
    CUDA_DISPATCH(be, residual_layernorm_forward_kernel<T><<<row_blocks(N), 32 * LN_WARPS, 0, cuda_stream(be)>>>(
                          (T *)res_out, (T *)out, mean, rstd, (const T *)res_in, (const T *)delta, (const T *)w, (const T *)b, N,
                          C, cuda_dropout(drop), ns->eps));
    cuda_launched(be, "residual_layernorm_forward_kernel");
}

extern "C" size_t cuda_layernorm_scratch_bytes(hg_backend *be, int N, int C) {
    (void)be, (void)N;
    return sizeof(float2) * COLSUM_MAX_SPLITS * (size_t)C;
}

extern "C" void cuda_layernorm_backward(hg_backend *be, float *dinp, float *dw, float *db, const float *dout, const float *inp,
                                        const float *w, const float *mean, const float *rstd, int N, int C, float *scratch,
                                        const hg_norm_spec *ns) {
    (void)ns; /* LayerNorm only on CUDA (cuda_supports); its eps is folded into rstd */
    CUDA_OP("layernorm_backward");
    CUDA_DISPATCH(be, layernorm_backward_kernel<T><<<row_blocks(N), 32 * LN_WARPS, 0, cuda_stream(be)>>>(
                          (T *)dinp, (const T *)dout, (const T *)inp, (const T *)w, mean, rstd, N, C);
                  if (cuda_launched(be, "layernorm_backward_kernel") == HG_OK)
                      colsum(be, dw, db, (float2 *)scratch, N, C, ln_param_terms<T>{(const T *)dout, (const T *)inp, mean, rstd, C},
                             "layernorm_backward (dw, db)"));
}

extern "C" void cuda_dropout_backward(hg_backend *be, float *dbranch, const float *dres, size_t n, const hg_dropout *drop) {
    CUDA_OP("dropout_backward");
    CUDA_DISPATCH(be, dropout_backward_kernel<T><<<cuda_grid(be, n), 256, 0, cuda_stream(be)>>>((T *)dbranch, (const T *)dres, n,
                                                                                                   cuda_dropout(drop)));
    cuda_launched(be, "dropout_backward_kernel");
}
