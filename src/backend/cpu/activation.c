/* SwiGLU, GeGLU and ReLU^2 on the CPU, forward and backward (GELU is gelu.c). Rows split
 * statically across threads, each row in blocks of CPU_BLOCK columns read and written in
 * the compute type and computed in fp32 (bf16.h); expf vectorises through libmvec
 * (vecmath.h). */
#include "backend/cpu/bf16.h"
#include "backend/cpu/cpu.h"
#include "backend/cpu/vecmath.h"

/* Row-major (N, F) output over blocks of columns: pre's row is in_w = 2F (gated) or F
 * wide. */
void cpu_activation_forward(hg_backend *be, hg_mlp_kind kind, float *out, const float *pre, int N, int F) {
    const int gated = hg_mlp_gated(kind), nb = (F + CPU_BLOCK - 1) / CPU_BLOCK;
    const size_t in_w = (size_t)(gated ? 2 : 1) * F;
    #pragma omp parallel for schedule(static) num_threads(be->threads)
    for (long item = 0; item < (long)N * nb; item++) {
        size_t n = (size_t)(item / nb), c0 = (size_t)(item % nb) * CPU_BLOCK;
        size_t m = F - c0 < CPU_BLOCK ? F - c0 : CPU_BLOCK, at = n * F + c0;
        float gb[CPU_BLOCK], ub[CPU_BLOCK], ob[CPU_BLOCK];
        const float *g = cpu_view(be, pre, n * in_w + c0, m, gb);
        float *o = cpu_out(be, out, at, ob);
        if (gated) {
            const float *u = cpu_view(be, pre, n * in_w + F + c0, m, ub);
            if (kind == HG_MLP_SWIGLU) {
                #pragma omp simd
                for (size_t i = 0; i < m; i++) o[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
            } else {
                #pragma omp simd
                for (size_t i = 0; i < m; i++) o[i] = hg_gelu(g[i]) * u[i];
            }
        } else {
            #pragma omp simd
            for (size_t i = 0; i < m; i++) {
                float r = g[i] > 0.0f ? g[i] : 0.0f * g[i]; /* 0 * NaN keeps a NaN input visible */
                o[i] = r * r;
            }
        }
        cpu_commit(be, out, at, o, m);
    }
}

/* SwiGLU: with sg = sigmoid(g), d/dg silu(g) = sg (1 + g (1 - sg)):
 * dgate = dout * u * sg (1 + g (1 - sg)), dup = dout * g sg. GeGLU: dgate = dout * u *
 * gelu'(g), dup = dout * gelu(g). ReLU^2: 2 relu(x) dout. */
void cpu_activation_backward(hg_backend *be, hg_mlp_kind kind, float *dpre, const float *pre, const float *dout,
                             int N, int F) {
    const int gated = hg_mlp_gated(kind), nb = (F + CPU_BLOCK - 1) / CPU_BLOCK;
    const size_t in_w = (size_t)(gated ? 2 : 1) * F;
    #pragma omp parallel for schedule(static) num_threads(be->threads)
    for (long item = 0; item < (long)N * nb; item++) {
        size_t n = (size_t)(item / nb), c0 = (size_t)(item % nb) * CPU_BLOCK;
        size_t m = F - c0 < CPU_BLOCK ? F - c0 : CPU_BLOCK, at = n * in_w + c0;
        float gb[CPU_BLOCK], yb[CPU_BLOCK], db[CPU_BLOCK];
        const float *g = cpu_view(be, pre, at, m, gb), *dy = cpu_view(be, dout, n * F + c0, m, yb);
        float *dg = cpu_out(be, dpre, at, db);
        if (gated) {
            float ub[CPU_BLOCK], eb[CPU_BLOCK];
            const float *u = cpu_view(be, pre, at + F, m, ub);
            float *du = cpu_out(be, dpre, at + F, eb);
            if (kind == HG_MLP_SWIGLU) {
                #pragma omp simd
                for (size_t i = 0; i < m; i++) {
                    float sg = 1.0f / (1.0f + expf(-g[i]));
                    dg[i] = dy[i] * u[i] * sg * (1.0f + g[i] * (1.0f - sg));
                    du[i] = dy[i] * g[i] * sg;
                }
            } else {
                #pragma omp simd
                for (size_t i = 0; i < m; i++) {
                    dg[i] = dy[i] * u[i] * hg_gelu_grad(g[i]);
                    du[i] = dy[i] * hg_gelu(g[i]);
                }
            }
            cpu_commit(be, dpre, at + F, du, m);
        } else {
            #pragma omp simd
            for (size_t i = 0; i < m; i++) dg[i] = (g[i] > 0.0f ? 2.0f * g[i] : 0.0f * g[i]) * dy[i];
        }
        cpu_commit(be, dpre, at, dg, m);
    }
}
