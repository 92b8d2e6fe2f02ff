/* SwiGLU and ReLU^2 on the CPU, forward and backward (GELU is gelu.c). Rows split
 * statically across threads; expf vectorises through libmvec (vecmath.h). */
#include "backend/cpu/cpu.h"
#include "backend/cpu/vecmath.h"

void cpu_activation_forward(hg_backend *be, hg_mlp_kind kind, float *out, const float *pre, int N, int F) {
    if (kind == HG_MLP_SWIGLU) {
        #pragma omp parallel for schedule(static) num_threads(be->threads)
        for (int n = 0; n < N; n++) {
            const float *g = pre + (size_t)n * 2 * F, *u = g + F;
            float *o = out + (size_t)n * F;
            #pragma omp simd
            for (int i = 0; i < F; i++) o[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
        }
        return;
    }
    size_t n = (size_t)N * F;
    #pragma omp parallel for simd schedule(static) num_threads(be->threads)
    for (size_t i = 0; i < n; i++) {
        float r = pre[i] > 0.0f ? pre[i] : 0.0f * pre[i]; /* 0 * NaN keeps a NaN input visible */
        out[i] = r * r;
    }
}

/* SwiGLU: with sg = sigmoid(g), d/dg silu(g) = sg (1 + g (1 - sg)):
 * dgate = dout * u * sg (1 + g (1 - sg)), dup = dout * g sg. ReLU^2: 2 relu(x) dout. */
void cpu_activation_backward(hg_backend *be, hg_mlp_kind kind, float *dpre, const float *pre, const float *dout,
                             int N, int F) {
    if (kind == HG_MLP_SWIGLU) {
        #pragma omp parallel for schedule(static) num_threads(be->threads)
        for (int n = 0; n < N; n++) {
            const float *g = pre + (size_t)n * 2 * F, *u = g + F, *dy = dout + (size_t)n * F;
            float *dg = dpre + (size_t)n * 2 * F, *du = dg + F;
            #pragma omp simd
            for (int i = 0; i < F; i++) {
                float sg = 1.0f / (1.0f + expf(-g[i]));
                dg[i] = dy[i] * u[i] * sg * (1.0f + g[i] * (1.0f - sg));
                du[i] = dy[i] * g[i] * sg;
            }
        }
        return;
    }
    size_t n = (size_t)N * F;
    #pragma omp parallel for simd schedule(static) num_threads(be->threads)
    for (size_t i = 0; i < n; i++) dpre[i] = (pre[i] > 0.0f ? 2.0f * pre[i] : 0.0f * pre[i]) * dout[i];
}
