/* The lm_head and cross-entropy on the CPU, on one chunk of rows.
 *
 * Forward: logits = x @ wte^T (oneDNN), then per row the log-sum-exp and the loss, and,
 * when training, the softmax gradient written over the logits in place. Backward:
 * dx = dlogits @ wte and dwte += dlogits^T @ x (oneDNN). Only one (chunk, Vp) buffer
 * exists; normalised probabilities are never stored. Padded vocabulary columns
 * (>= V) score nothing and get zero gradient. */
#include <string.h>

#include "backend/cpu/cpu.h"
#include "backend/cpu/vecmath.h"

/* Loss of one row of logits; when training, its gradient over the row in place: the
 * exponentials are written once and scaled by dscale / sum afterwards. */
static float row_loss(float *z, int V, int Vp, int target, float dscale, int backward) {
    float mx = -INFINITY; /* a compare, not fmaxf, which would stay a scalar call */
    #pragma omp simd reduction(max : mx)
    for (int c = 0; c < V; c++) mx = z[c] > mx ? z[c] : mx;
    float zt = target >= 0 ? z[target] : 0.0f, sum = 0.0f;
    if (backward && target >= 0) {
        #pragma omp simd reduction(+ : sum)
        for (int c = 0; c < V; c++) {
            float e = expf(z[c] - mx);
            z[c] = e;
            sum += e;
        }
        float scale = dscale / sum;
        #pragma omp simd
        for (int c = 0; c < V; c++) z[c] *= scale;
        for (int c = V; c < Vp; c++) z[c] = 0.0f;
        z[target] -= dscale;
    } else {
        #pragma omp simd reduction(+ : sum)
        for (int c = 0; c < V; c++) sum += expf(z[c] - mx);
        if (backward) memset(z, 0, sizeof(float) * (size_t)Vp); /* an ignored target */
    }
    return target >= 0 ? mx + logf(sum) - zt : 0.0f;
}

hg_status cpu_classifier_forward(hg_backend *be, const hg_classifier_args *a) {
    const int C = a->C, V = a->V, Vp = a->Vp, backward = a->dx != NULL;
    float *z = a->scratch;
    cpu_gemm_desc fwd = {.M = a->N, .N = Vp, .K = C, .trans_b = 1, .lda = C, .ldb = C, .ldc = Vp};
    HG_TRY(cpu_gemm(be, &fwd, a->x, a->wte, NULL, z));
    #pragma omp parallel for schedule(static) num_threads(be->threads)
    for (int r = 0; r < a->N; r++) {
        float *zr = z + (size_t)r * Vp;
        if (a->logits) memcpy(a->logits + (size_t)r * V, zr, sizeof(float) * (size_t)V);
        if (a->targets) a->losses[r] = row_loss(zr, V, Vp, a->targets[r], a->dscale, backward);
    }
    return HG_OK;
}

hg_status cpu_classifier_backward(hg_backend *be, const hg_classifier_args *a) {
    const int C = a->C, Vp = a->Vp;
    cpu_gemm_desc dx = {.M = a->N, .N = C, .K = Vp, .lda = Vp, .ldb = C, .ldc = C};
    HG_TRY(cpu_gemm(be, &dx, a->scratch, a->wte, NULL, a->dx));
    cpu_gemm_desc dw = {.M = Vp, .N = C, .K = a->N, .trans_a = 1, .lda = Vp, .ldb = C, .ldc = C, .accumulate = 1};
    return cpu_gemm(be, &dw, a->scratch, a->x, NULL, a->dwte);
}
