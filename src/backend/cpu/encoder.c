/* Token and position embeddings on the CPU, forward and backward. wpe and dwpe are NULL
 * for a model without learned positions. wte and wpe are read in the compute type in
 * blocks of CPU_BLOCK channels (bf16.h); out and dout, the residual stream, are fp32 (the
 * CPU's residual type), as are the gradients dwte and dwpe. */
#include "backend/cpu/bf16.h"
#include "backend/cpu/cpu.h"

void cpu_encoder_forward(hg_backend *be, float *out, const int32_t *tokens, const int32_t *pos, const float *wte,
                         const float *wpe, int B, int T, int C, float scale, const hg_dropout *drop) {
    int dropping = hg_dropout_on(drop), nb = (C + CPU_BLOCK - 1) / CPU_BLOCK;
    #pragma omp parallel for schedule(static) num_threads(be->threads)
    for (long item = 0; item < (long)B * T * nb; item++) {
        size_t n = (size_t)(item / nb), c0 = (size_t)(item % nb) * CPU_BLOCK, at = n * C + c0;
        size_t m = C - c0 < CPU_BLOCK ? C - c0 : CPU_BLOCK;
        float eb[CPU_BLOCK], pb[CPU_BLOCK], sc[CPU_BLOCK];
        const float *te = cpu_view(be, wte, (size_t)tokens[n] * C + c0, m, eb);
        const float *pe = cpu_view(be, wpe, (pos ? (size_t)pos[n] : n % (size_t)T) * C + c0, m, pb);
        float *o = out + at;
        if (pe) {
            #pragma omp simd
            for (size_t i = 0; i < m; i++) o[i] = scale * te[i] + pe[i];
        } else {
            #pragma omp simd
            for (size_t i = 0; i < m; i++) o[i] = scale * te[i];
        }
        if (dropping) {
            cpu_dropout_scales(drop, at, m, sc);
            #pragma omp simd
            for (size_t i = 0; i < m; i++) o[i] *= sc[i];
        }
    }
}

/* Each thread owns a range of channels and walks every token in order: a scatter-add
 * into wte with no races and a fixed summation order. */
void cpu_encoder_backward(hg_backend *be, float *dwte, float *dwpe, const float *dout, const int32_t *tokens,
                          const int32_t *pos, int B, int T, int C, float scale, const hg_dropout *drop) {
    int dropping = hg_dropout_on(drop);
    #pragma omp parallel num_threads(be->threads)
    {
        int nt = omp_get_num_threads(), t = omp_get_thread_num();
        int per = ((C + 15) / 16 + nt - 1) / nt * 16;
        int c0 = t * per, c1 = c0 + per < C ? c0 + per : C;
        for (int n = 0; n < B * T; n++) {
            const float *g = dout + (size_t)n * C;
            float *te = dwte ? dwte + (size_t)tokens[n] * C : NULL;
            float *pe = dwpe ? dwpe + (pos ? (size_t)pos[n] : (size_t)(n % T)) * C : NULL;
            if (dropping || !te) { /* (a frozen wte has no gradient) */
                for (int i = c0; i < c1; i++) {
                    float gi = g[i] * (dropping ? hg_dropout_scale(drop, (size_t)n * C + i) : 1.0f);
                    if (te) te[i] += scale * gi;
                    if (pe) pe[i] += gi;
                }
            } else if (!pe) {
                #pragma omp simd
                for (int i = c0; i < c1; i++) te[i] += scale * g[i];
            } else {
                #pragma omp simd
                for (int i = c0; i < c1; i++) {
                    te[i] += scale * g[i];
                    pe[i] += g[i];
                }
            }
        }
    }
}
