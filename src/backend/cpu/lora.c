/* LoRA adapters on the CPU (ops/lora.h): a few small oneDNN products per adapted layer.
 * h is kept pre-scaled, h_j = s_j drop(x) A_j^T, so that the up product needs no scale
 * and dB_j = dy_j^T h_j; dh_j = s_j dy_j B_j is scaled after its product. In bf16 the
 * operands are the compute type, h and dh too, and the products accumulate in fp32
 * (gemm.c); dA and dB are fp32 gradients. Legend as in ops/README.md. */
#include "backend/cpu/bf16.h"
#include "backend/cpu/cpu.h"

/* The mask as bits (ops/lora.h): keep[(b + i) / 32] from the scales sc[0, m) of elements
 * b.., b a multiple of 32; and back. Whole words in loops the compiler vectorizes. */
static void keep_put(uint32_t *keep, size_t b, const float *sc, size_t m) {
    for (size_t i = 0; i < m; i += 32) {
        const size_t n = m - i < 32 ? m - i : 32;
        uint32_t w = 0;
        if (n == 32)
            for (int j = 0; j < 32; j++) w |= (uint32_t)(sc[i + j] != 0.0f) << j;
        else
            for (size_t j = 0; j < n; j++) w |= (uint32_t)(sc[i + j] != 0.0f) << j;
        keep[(b + i) / 32] = w;
    }
}
static void keep_get(const uint32_t *keep, size_t b, size_t m, float p, float *sc) {
    const float kept = 1.0f / (1.0f - p); /* hg_dropout_scale's */
    for (size_t i = 0; i < m; i += 32) {
        const uint32_t w = keep[(b + i) / 32];
        if (m - i >= 32)
            for (int j = 0; j < 32; j++) sc[i + j] = w >> j & 1 ? kept : 0.0f;
        else
            for (size_t j = 0; j < m - i; j++) sc[i + j] = w >> j & 1 ? kept : 0.0f;
    }
}

/* x (N, K) with the dropout applied, in the compute type: x itself when it is off, else
 * written into xd (scratch), the mask into keep. Elements are dropped as ops/dropout.h
 * numbers them, i = n K + k. */
static const float *dropped(hg_backend *be, const float *x, float *xd, uint32_t *keep, size_t n, const hg_dropout *drop) {
    if (!hg_dropout_on(drop)) return x;
    const int h = cpu_bf16(be);
    #pragma omp parallel num_threads(be->threads)
    {
        float buf[CPU_BLOCK], sc[CPU_BLOCK];
        #pragma omp for schedule(static)
        for (size_t b = 0; b < n; b += CPU_BLOCK) {
            size_t m = n - b < CPU_BLOCK ? n - b : CPU_BLOCK;
            elem_load(h, buf, x, b, m);
            cpu_dropout_scales(drop, b, m, sc);
            keep_put(keep, b, sc, m);
            #pragma omp simd
            for (size_t i = 0; i < m; i++) buf[i] *= sc[i];
            elem_store(h, xd, b, buf, m);
        }
    }
    return xd;
}

/* p (rows, cols, row stride ld) *= s, in the compute type. */
static void scale_cols(hg_backend *be, float *p, int rows, int cols, int ld, float s) {
    enum { W = 256 };
    const int h = cpu_bf16(be);
    #pragma omp parallel num_threads(be->threads)
    {
        float buf[W];
        #pragma omp for schedule(static)
        for (int i = 0; i < rows; i++)
            for (int c = 0; c < cols; c += W) {
                int m = cols - c < W ? cols - c : W;
                size_t at = (size_t)i * ld + c;
                elem_load(h, buf, p, at, (size_t)m);
                for (int k = 0; k < m; k++) buf[k] *= s;
                elem_store(h, p, at, buf, (size_t)m);
            }
    }
}

/* Element `at` of a compute-type buffer. */
static float *at_elem(hg_backend *be, const float *p, size_t at) { return cpu_elems(be, p, at); }

hg_status cpu_lora_forward(hg_backend *be, float *y, float *h, uint32_t *keep, const float *x, const hg_lora_weights *w,
                           const hg_lora_shape *s, const hg_dropout *drop, void *scratch) {
    const int bf = cpu_bf16(be), R = s->r * s->n;
    const float *xd = dropped(be, x, scratch, keep, (size_t)s->N * s->K, drop);
    for (int j = 0; j < s->n; j++) {
        float *hj = at_elem(be, h, (size_t)j * s->r);
        /* h_j (N, r) = xd (N, K) @ A_j^T, A_j stored (r, K) */
        cpu_gemm_desc down = {.M = s->N, .N = s->r, .K = s->K, .trans_b = 1, .lda = s->K, .ldb = s->K, .ldc = R,
                              .bf16_in = bf, .bf16_out = bf};
        HG_TRY(cpu_gemm(be, &down, xd, w->A[j], NULL, hj));
        scale_cols(be, hj, s->N, s->r, R, s->scale[j]);
        /* y[:, c0_j ..] (N, cols_j) += h_j @ B_j^T, B_j stored (cols_j, r) */
        cpu_gemm_desc up = {.M = s->N, .N = s->cols[j], .K = s->r, .trans_b = 1, .lda = R, .ldb = s->r, .ldc = s->OUT,
                            .accumulate = 1, .bf16_in = bf, .bf16_out = bf};
        HG_TRY(cpu_gemm(be, &up, hj, w->B[j], NULL, at_elem(be, y, (size_t)s->c0[j])));
    }
    return HG_OK;
}

hg_status cpu_lora_backward(hg_backend *be, float *dx, const float *dy, const float *x, const float *h,
                            const uint32_t *keep, const hg_lora_weights *w, const hg_lora_shape *s,
                            const hg_dropout *drop, void *scratch) {
    const int bf = cpu_bf16(be), R = s->r * s->n, on = hg_dropout_on(drop);
    const size_t nk = (size_t)s->N * s->K;
    float *t = scratch, *dh = on ? at_elem(be, scratch, nk) : scratch;
    for (int j = 0; j < s->n; j++) {
        const float *dyj = at_elem(be, dy, (size_t)s->c0[j]), *hj = at_elem(be, h, (size_t)j * s->r);
        float *dhj = at_elem(be, dh, (size_t)j * s->r);
        /* dB_j (cols_j, r) += dy_j^T (cols_j, N) @ h_j (N, r) */
        cpu_gemm_desc db = {.M = s->cols[j], .N = s->r, .K = s->N, .trans_a = 1, .lda = s->OUT, .ldb = R, .ldc = s->r,
                            .accumulate = 1, .bf16_in = bf};
        HG_TRY(cpu_gemm(be, &db, dyj, hj, NULL, w->dB[j]));
        /* dh_j (N, r) = s_j dy_j (N, cols_j) @ B_j (cols_j, r) */
        cpu_gemm_desc dhd = {.M = s->N, .N = s->r, .K = s->cols[j], .lda = s->OUT, .ldb = s->r, .ldc = R,
                             .bf16_in = bf, .bf16_out = bf};
        HG_TRY(cpu_gemm(be, &dhd, dyj, w->B[j], NULL, dhj));
        scale_cols(be, dhj, s->N, s->r, R, s->scale[j]);
    }
    /* the input's share, sum_j dh_j @ A_j: into dx, or with the dropout on into t (N, K),
     * which one pass then adds to dx through the mask and overwrites with drop(x) */
    for (int j = 0; j < s->n; j++) {
        cpu_gemm_desc dxs = {.M = s->N, .N = s->K, .K = s->r, .lda = R, .ldb = s->K, .ldc = s->K,
                             .accumulate = !on || j > 0, .bf16_in = bf, .bf16_out = bf};
        HG_TRY(cpu_gemm(be, &dxs, at_elem(be, dh, (size_t)j * s->r), w->A[j], NULL, on ? t : dx));
    }
    if (on) {
        #pragma omp parallel num_threads(be->threads)
        {
            float a[CPU_BLOCK], b[CPU_BLOCK], c[CPU_BLOCK], sc[CPU_BLOCK];
            #pragma omp for schedule(static)
            for (size_t i0 = 0; i0 < nk; i0 += CPU_BLOCK) {
                size_t m = nk - i0 < CPU_BLOCK ? nk - i0 : CPU_BLOCK;
                elem_load(bf, a, dx, i0, m);
                elem_load(bf, b, t, i0, m);
                elem_load(bf, c, x, i0, m);
                keep_get(keep, i0, m, drop->p, sc);
                #pragma omp simd
                for (size_t i = 0; i < m; i++) a[i] += b[i] * sc[i], c[i] *= sc[i];
                elem_store(bf, dx, i0, a, m);
                elem_store(bf, t, i0, c, m);
            }
        }
    }
    /* dA_j (r, K) += dh_j^T (r, N) @ drop(x) (N, K) */
    const float *xd = on ? t : x;
    for (int j = 0; j < s->n; j++) {
        cpu_gemm_desc da = {.M = s->r, .N = s->K, .K = s->N, .trans_a = 1, .lda = R, .ldb = s->K, .ldc = s->K,
                            .accumulate = 1, .bf16_in = bf};
        HG_TRY(cpu_gemm(be, &da, at_elem(be, dh, (size_t)j * s->r), xd, NULL, w->dA[j]));
    }
    return HG_OK;
}
