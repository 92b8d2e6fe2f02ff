/* The lm_head and cross-entropy on the CPU, on one chunk of rows.
 *
 * Forward: logits = x @ wte^T (+ bias, in the GEMM) (oneDNN) into the scratch, in the compute type (bf16 in
 * bf16, from fp32 accumulators, as PyTorch's autocast gives its lm_head), then per row
 * the log-sum-exp and the loss in fp32, and, when training, the softmax gradient written
 * over the logits in place. Backward: dx = dlogits @ wte and dwte += dlogits^T @ x
 * (oneDNN; dwte fp32). Only one (chunk, Vp) buffer exists; normalised probabilities are
 * never stored. Padded vocabulary columns (>= V) score nothing and get zero gradient. */
#include <string.h>

#include "backend/cpu/bf16.h"
#include "backend/cpu/cpu.h"
#include "backend/cpu/vecmath.h"

/* Row r of z (V scores of Vp) capped in place: cap tanh(z / cap). */
static void row_softcap(hg_backend *be, float *z, size_t r, int V, int Vp, float cap) {
    float buf[CPU_BLOCK];
    for (int c0 = 0; c0 < V; c0 += CPU_BLOCK) {
        int m = V - c0 < CPU_BLOCK ? V - c0 : CPU_BLOCK;
        float *x = cpu_inout(be, z, r * (size_t)Vp + c0, (size_t)m, buf);
        #pragma omp simd
        for (int c = 0; c < m; c++) x[c] = cap * tanhf(x[c] / cap);
        cpu_commit(be, z, r * (size_t)Vp + c0, x, (size_t)m);
    }
}

/* Loss of row r of logits z (V scores of Vp), blocks of CPU_BLOCK read as fp32: the
 * running maximum and sum of exponentials in one pass (the sum rescaled when the maximum
 * moves); then, when training, the gradient (softmax - onehot) * dscale over the row in
 * place, times 1 - (z / cap)^2 where the logits were capped (cap > 0). logits: the row
 * copied out in fp32, or NULL. */
static float row_loss(hg_backend *be, float *z, size_t r, int V, int Vp, int target, float dscale, int backward,
                      float cap, float *logits) {
    const size_t row = r * (size_t)Vp;
    float mx = -INFINITY, sum = 0.0f, buf[CPU_BLOCK];
    if (cap > 0) row_softcap(be, z, r, V, Vp, cap);
    for (int c0 = 0; c0 < V; c0 += CPU_BLOCK) {
        int m = V - c0 < CPU_BLOCK ? V - c0 : CPU_BLOCK;
        const float *x = cpu_view(be, z, row + c0, (size_t)m, buf);
        if (logits) memcpy(logits + c0, x, sizeof(float) * (size_t)m);
        float bmax = -INFINITY, bsum = 0.0f; /* a compare, not fmaxf, which would stay a scalar call */
        #pragma omp simd reduction(max : bmax)
        for (int c = 0; c < m; c++) bmax = x[c] > bmax ? x[c] : bmax;
        if (bmax > mx) sum *= expf(mx - bmax), mx = bmax;
        #pragma omp simd reduction(+ : bsum)
        for (int c = 0; c < m; c++) bsum += expf(x[c] - mx);
        sum += bsum;
    }
    float zt = 0.0f;
    if (target >= 0) cpu_load(be, &zt, z, row + (size_t)target, 1);
    if (backward) {
        /* an ignored target (-1): zero gradient */
        const float scale = dscale / sum;
        const int live = target >= 0 ? V : 0;
        for (int c0 = 0; c0 < Vp; c0 += CPU_BLOCK) {
            int m = Vp - c0 < CPU_BLOCK ? Vp - c0 : CPU_BLOCK;
            float *x = cpu_inout(be, z, row + c0, (size_t)m, buf);
            if (cap > 0) {
                const float inv = 1.0f / cap;
                #pragma omp simd
                for (int c = 0; c < m; c++) {
                    float t = x[c] * inv, d = expf(x[c] - mx) * scale - (c0 + c == target ? dscale : 0.0f);
                    x[c] = c0 + c < live ? d * (1.0f - t * t) : 0.0f;
                }
            } else {
                #pragma omp simd
                for (int c = 0; c < m; c++) x[c] = c0 + c < live ? expf(x[c] - mx) * scale : 0.0f;
                if (target >= c0 && target < c0 + m) x[target - c0] -= dscale;
            }
            cpu_commit(be, z, row + c0, x, (size_t)m);
        }
    }
    return target >= 0 ? mx + logf(sum) - zt : 0.0f;
}

hg_status cpu_classifier_forward(hg_backend *be, const hg_classifier_args *a) {
    const int C = a->C, V = a->V, Vp = a->Vp, backward = a->dx != NULL, h = cpu_bf16(be);
    float *z = a->scratch;
    cpu_gemm_desc fwd = {.M = a->N, .N = Vp, .K = C, .trans_b = 1, .lda = C, .ldb = C, .ldc = Vp, .bias = a->bias != NULL,
                         .bf16_in = h, .bf16_out = h};
    HG_TRY(cpu_gemm(be, &fwd, a->x, a->wte, a->bias, z));
    #pragma omp parallel for schedule(static) num_threads(be->threads)
    for (int r = 0; r < a->N; r++) {
        float *logits = a->logits ? a->logits + (size_t)r * V : NULL;
        if (a->targets) {
            a->losses[r] = row_loss(be, z, (size_t)r, V, Vp, a->targets[r], a->dscale, backward, a->softcap, logits);
        } else if (logits) {
            if (a->softcap > 0) row_softcap(be, z, (size_t)r, V, Vp, a->softcap);
            cpu_load(be, logits, z, (size_t)r * Vp, (size_t)V);
        }
    }
    return HG_OK;
}

/* dbias (Vp) += the column sums of dlogits (N, Vp), a block of columns per task, rows in
 * order. */
static void column_sums(hg_backend *be, float *dbias, const float *z, int N, int Vp) {
    const int blocks = (Vp + CPU_BLOCK - 1) / CPU_BLOCK;
    #pragma omp parallel for schedule(static) num_threads(be->threads)
    for (int blk = 0; blk < blocks; blk++) {
        const int c0 = blk * CPU_BLOCK, m = Vp - c0 < CPU_BLOCK ? Vp - c0 : CPU_BLOCK;
        float sum[CPU_BLOCK] = {0}, buf[CPU_BLOCK];
        for (int r = 0; r < N; r++) {
            const float *x = cpu_view(be, z, (size_t)r * Vp + c0, (size_t)m, buf);
            #pragma omp simd
            for (int c = 0; c < m; c++) sum[c] += x[c];
        }
        for (int c = 0; c < m; c++) dbias[c0 + c] += sum[c];
    }
}

hg_status cpu_classifier_backward(hg_backend *be, const hg_classifier_args *a) {
    const int C = a->C, Vp = a->Vp, h = cpu_bf16(be);
    if (a->dbias) column_sums(be, a->dbias, a->scratch, a->N, Vp);
    cpu_gemm_desc dx = {.M = a->N, .N = C, .K = Vp, .lda = Vp, .ldb = C, .ldc = C, .bf16_in = h, .bf16_out = h};
    HG_TRY(cpu_gemm(be, &dx, a->scratch, a->wte, NULL, a->dx));
    cpu_gemm_desc dw = {.M = Vp, .N = C, .K = a->N, .trans_a = 1, .lda = Vp, .ldb = C, .ldc = C, .accumulate = 1, .bf16_in = h};
    return a->dwte ? cpu_gemm(be, &dw, a->scratch, a->x, NULL, a->dwte) : HG_OK; /* NULL: the matrix is frozen */
}
