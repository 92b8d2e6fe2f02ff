/* LayerNorm and RMSNorm on the CPU: forward, forward fused with the residual add, and a
 * one-pass backward per row. Rows are independent and split statically across threads.
 * One code path serves both norms: RMSNorm is LayerNorm with the mean taken as 0 and no
 * bias; a norm without affine parameters reads no weight. */
#include <math.h>
#include <string.h>

#include "backend/cpu/cpu.h"

/* Normalises one row x (C) into out, returning its mean (0 for RMSNorm) and rstd. */
static inline void norm_row(float *out, float *mean, float *rstd, const float *x, const float *w,
                            const float *b, int C, const hg_norm_spec *ns) {
    float m = 0.0f;
    if (!ns->rms) {
        float sum = 0.0f;
        #pragma omp simd reduction(+ : sum)
        for (int i = 0; i < C; i++) sum += x[i];
        m = sum / (float)C;
    }
    float var = 0.0f;
    #pragma omp simd reduction(+ : var)
    for (int i = 0; i < C; i++) var += (x[i] - m) * (x[i] - m);
    float s = 1.0f / sqrtf(var / (float)C + ns->eps);
    if (w && b) {
        #pragma omp simd
        for (int i = 0; i < C; i++) out[i] = (x[i] - m) * s * w[i] + b[i];
    } else if (w) {
        #pragma omp simd
        for (int i = 0; i < C; i++) out[i] = (x[i] - m) * s * w[i];
    } else {
        #pragma omp simd
        for (int i = 0; i < C; i++) out[i] = (x[i] - m) * s + (b ? b[i] : 0.0f);
    }
    if (mean) *mean = m;
    *rstd = s;
}

void cpu_layernorm_forward(hg_backend *be, float *out, float *mean, float *rstd, const float *inp,
                           const float *w, const float *b, int N, int C, const hg_norm_spec *ns) {
    #pragma omp parallel for schedule(static) num_threads(be->threads)
    for (int n = 0; n < N; n++)
        norm_row(out + (size_t)n * C, ns->rms ? NULL : &mean[n], &rstd[n], inp + (size_t)n * C, w, b, C, ns);
}

void cpu_residual_layernorm_forward(hg_backend *be, float *res_out, float *out, float *mean,
                                    float *rstd, const float *res_in, const float *delta,
                                    const float *w, const float *b, int N, int C,
                                    const hg_dropout *drop, const hg_norm_spec *ns) {
    int dropping = hg_dropout_on(drop);
    #pragma omp parallel for schedule(static) num_threads(be->threads)
    for (int n = 0; n < N; n++) {
        size_t o = (size_t)n * C;
        float *r = res_out + o;
        if (dropping) {
            for (int i = 0; i < C; i++) r[i] = res_in[o + i] + delta[o + i] * hg_dropout_scale(drop, o + i);
        } else {
            #pragma omp simd
            for (int i = 0; i < C; i++) r[i] = res_in[o + i] + delta[o + i];
        }
        norm_row(out + o, ns->rms ? NULL : &mean[n], &rstd[n], r, w, b, C, ns);
    }
}

/* One row's backward, with xh = (x - m) s and g = dy w: dx = s (g - mean(g) - xh mean(g xh))
 * for LayerNorm; RMSNorm has no mean term (m = 0 and no mean(g)). dx (C) is added to, or
 * with `write` overwritten (then it may alias dy); pw, pb (C) += dy xh, dy (pb may be NULL). */
static inline void norm_row_backward(float *dx, float *pw, float *pb, const float *dy, const float *x,
                                     const float *w, float m, float s, int C, int rms, int write) {
    /* the row's two reductions, then dx and the parameter partials */
    float sum_g = 0.0f, sum_gx = 0.0f;
    #pragma omp simd reduction(+ : sum_g, sum_gx)
    for (int i = 0; i < C; i++) {
        float g = w ? dy[i] * w[i] : dy[i];
        sum_g += g;
        sum_gx += g * (x[i] - m) * s;
    }
    float mg = rms ? 0.0f : sum_g / (float)C, mgx = sum_gx / (float)C;
    #pragma omp simd
    for (int i = 0; i < C; i++) {
        float xh = (x[i] - m) * s, d = dy[i];
        float v = s * ((w ? d * w[i] : d) - mg - xh * mgx);
        dx[i] = write ? v : dx[i] + v;
        pw[i] += d * xh;
        if (pb) pb[i] += d;
    }
}

/* dst (C) += the nt partial sums of C floats that lie `stride` floats apart from src. */
static void add_partials(float *dst, const float *src, int nt, size_t stride, int C) {
    if (!dst) return;
    for (int t = 0; t < nt; t++) {
        const float *p = src + (size_t)t * stride;
        #pragma omp simd
        for (int i = 0; i < C; i++) dst[i] += p[i];
    }
}

void cpu_layernorm_backward(hg_backend *be, float *dinp, float *dw, float *db, const float *dout,
                            const float *inp, const float *w, const float *mean, const float *rstd,
                            int N, int C, float *scratch, const hg_norm_spec *ns) {
    int nt_used = 1, rms = ns->rms;
    #pragma omp parallel num_threads(be->threads)
    {
        int nt = omp_get_num_threads(), t = omp_get_thread_num();
        #pragma omp single
        nt_used = nt;
        float *pw = scratch + (size_t)t * 2 * C, *pb = pw + C;
        for (int i = 0; i < C; i++) pw[i] = pb[i] = 0.0f;
        int per = (N + nt - 1) / nt, n0 = t * per, n1 = n0 + per < N ? n0 + per : N;
        for (int n = n0; n < n1; n++)
            norm_row_backward(dinp + (size_t)n * C, pw, pb, dout + (size_t)n * C, inp + (size_t)n * C, w,
                              rms ? 0.0f : mean[n], rstd[n], C, rms, 0);
    }
    add_partials(dw, scratch, nt_used, 2 * (size_t)C, C);
    add_partials(db, scratch + C, nt_used, 2 * (size_t)C, C);
}

/* Rows split statically across threads; within a row, NH q heads then NKV k heads. */
void cpu_head_norm_forward(hg_backend *be, float *qkv, float *raw, float *rstd, const float *wq, const float *wk,
                           const hg_head_norm_shape *s) {
    const int H = s->NH + s->NKV, hs = s->hs;
    const size_t W = (size_t)(s->NH + 2 * s->NKV) * hs, QK = (size_t)H * hs;
    const hg_norm_spec ns = {1, s->eps};
    #pragma omp parallel for schedule(static) num_threads(be->threads)
    for (int n = 0; n < s->N; n++) {
        float *row = qkv + (size_t)n * W;
        const float *x = row; /* normalised in place when raw is not kept */
        if (raw) {
            memcpy(raw + (size_t)n * QK, row, QK * sizeof(float));
            x = raw + (size_t)n * QK;
        }
        for (int h = 0; h < H; h++)
            norm_row(row + (size_t)h * hs, NULL, &rstd[(size_t)n * H + h], x + (size_t)h * hs, h < s->NH ? wq : wk,
                     NULL, hs, &ns);
    }
}

/* Per thread, partial sums of dwq then dwk (hs each) in scratch, added in thread order. */
void cpu_head_norm_backward(hg_backend *be, float *dqkv, float *dwq, float *dwk, const float *raw, const float *rstd,
                            const float *wq, const float *wk, const hg_head_norm_shape *s, float *scratch) {
    const int H = s->NH + s->NKV, hs = s->hs, N = s->N;
    const size_t W = (size_t)(s->NH + 2 * s->NKV) * hs, QK = (size_t)H * hs;
    int nt_used = 1;
    #pragma omp parallel num_threads(be->threads)
    {
        int nt = omp_get_num_threads(), t = omp_get_thread_num();
        #pragma omp single
        nt_used = nt;
        float *pq = scratch + (size_t)t * 2 * hs, *pk = pq + hs;
        for (int i = 0; i < 2 * hs; i++) pq[i] = 0.0f;
        int per = (N + nt - 1) / nt, n0 = t * per, n1 = n0 + per < N ? n0 + per : N;
        for (int n = n0; n < n1; n++)
            for (int h = 0; h < H; h++) {
                float *d = dqkv + (size_t)n * W + (size_t)h * hs;
                norm_row_backward(d, h < s->NH ? pq : pk, NULL, d, raw + (size_t)n * QK + (size_t)h * hs,
                                  h < s->NH ? wq : wk, 0.0f, rstd[(size_t)n * H + h], hs, 1, 1);
            }
    }
    add_partials(dwq, scratch, nt_used, 2 * (size_t)hs, hs);
    add_partials(dwk, scratch + hs, nt_used, 2 * (size_t)hs, hs);
}

size_t cpu_layernorm_scratch_bytes(hg_backend *be, int N, int C) {
    (void)N;
    return (size_t)be->threads * 2 * (size_t)C * sizeof(float);
}

void cpu_dropout_backward(hg_backend *be, float *dbranch, const float *dres, size_t n,
                          const hg_dropout *drop) {
    #pragma omp parallel for schedule(static) num_threads(be->threads)
    for (size_t i = 0; i < n; i++) dbranch[i] = dres[i] * hg_dropout_scale(drop, i);
}
