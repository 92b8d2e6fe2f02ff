/* LayerNorm and RMSNorm on the CPU: forward, forward fused with the residual add, and a
 * one-pass backward per row. Rows are independent and split statically across threads.
 * One code path serves both norms: RMSNorm is LayerNorm with the mean taken as 0 and no
 * bias; a norm without affine parameters reads no weight. The residual stream (inp of
 * the norms, res_in and res_out, dinp of the backward; a post norm's inp and dinp are a
 * branch's, in the compute type: hg_norm_spec.branch) and the norms' weights and biases
 * are fp32, the CPU's residual type; outputs, the branch output delta and dout are in the
 * compute type, read and written in rows converted on the thread's stack in bf16 (bf16.h;
 * C is at most CPU_BF16_ROW_MAX there) and normalised in fp32. Statistics and parameter
 * gradients are fp32. */
#include <math.h>
#include <string.h>

#include "backend/cpu/bf16.h"
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
    #pragma omp parallel num_threads(be->threads)
    {
        float ob[CPU_ROWBUF(be, C)], xb[CPU_ROWBUF(be, C)];
        #pragma omp for schedule(static)
        for (int n = 0; n < N; n++) {
            size_t at = (size_t)n * C;
            float *o = cpu_out(be, out, at, ob);
            const float *x = ns->branch ? cpu_view(be, inp, at, (size_t)C, xb) : inp + at;
            norm_row(o, ns->rms ? NULL : &mean[n], &rstd[n], x, w, b, C, ns);
            cpu_commit(be, out, at, o, (size_t)C);
        }
    }
}

void cpu_residual_layernorm_forward(hg_backend *be, float *res_out, float *out, float *mean,
                                    float *rstd, const float *res_in, const float *delta,
                                    const float *w, const float *b, int N, int C,
                                    const hg_dropout *drop, const hg_norm_spec *ns) {
    int dropping = hg_dropout_on(drop);
    #pragma omp parallel num_threads(be->threads)
    {
        float db[CPU_ROWBUF(be, C)], ob[CPU_ROWBUF(be, C)], sc[dropping ? C : 1];
        #pragma omp for schedule(static)
        for (int n = 0; n < N; n++) {
            size_t o = (size_t)n * C;
            const float *x = res_in + o, *dl = cpu_view(be, delta, o, (size_t)C, db);
            float *r = res_out + o, *y = cpu_out(be, out, o, ob);
            if (dropping) {
                cpu_dropout_scales(drop, o, (size_t)C, sc);
                #pragma omp simd
                for (int i = 0; i < C; i++) r[i] = x[i] + dl[i] * sc[i];
            } else {
                #pragma omp simd
                for (int i = 0; i < C; i++) r[i] = x[i] + dl[i];
            }
            norm_row(y, ns->rms ? NULL : &mean[n], &rstd[n], r, w, b, C, ns);
            cpu_commit(be, out, o, y, (size_t)C);
        }
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
        float yb[CPU_ROWBUF(be, C)], xb[CPU_ROWBUF(be, C)], db[CPU_ROWBUF(be, C)];
        float *pw = scratch + (size_t)t * 2 * C, *pb = pw + C;
        for (int i = 0; i < C; i++) pw[i] = pb[i] = 0.0f;
        int per = (N + nt - 1) / nt, n0 = t * per, n1 = n0 + per < N ? n0 + per : N;
        for (int n = n0; n < n1; n++) {
            size_t at = (size_t)n * C;
            /* a branch's input and its gradient are in the compute type, the stream's fp32 */
            const float *x = ns->branch ? cpu_view(be, inp, at, (size_t)C, xb) : inp + at;
            float *d = ns->branch ? cpu_inout(be, dinp, at, (size_t)C, db) : dinp + at;
            norm_row_backward(d, pw, pb, cpu_view(be, dout, at, (size_t)C, yb), x, w, rms ? 0.0f : mean[n], rstd[n], C,
                              rms, 0);
            if (ns->branch) cpu_commit(be, dinp, at, d, (size_t)C);
        }
    }
    add_partials(dw, scratch, nt_used, 2 * (size_t)C, C);
    add_partials(db, scratch + C, nt_used, 2 * (size_t)C, C);
}

/* Rows split statically across threads; within a row, the q units then the k units
 * (heads, or with s->whole all q heads and all k heads), contiguous from the row's start. */
void cpu_qk_norm_forward(hg_backend *be, float *qkv, float *raw, float *rstd, const float *wq, const float *wk,
                         const hg_qk_norm_shape *s) {
    int nq, uq, nk, uk;
    hg_qk_norm_units(s, &nq, &uq, &nk, &uk);
    const int U = nq + nk, wmax = uq > uk ? uq : uk;
    const size_t W = (size_t)(s->NH + 2 * s->NKV) * s->hs, QK = (size_t)(s->NH + s->NKV) * s->hs;
    const hg_norm_spec ns = {1, s->eps, 0};
    #pragma omp parallel num_threads(be->threads)
    {
        float xb[CPU_ROWBUF(be, wmax)], ob[CPU_ROWBUF(be, wmax)];
        #pragma omp for schedule(static)
        for (int n = 0; n < s->N; n++) {
            if (raw) /* the q|k part as it was */
                memcpy(cpu_elems(be, raw, (size_t)n * QK), cpu_elems(be, qkv, (size_t)n * W), QK * hg_precision_bytes(be->precision));
            for (int u = 0; u < U; u++) {
                const int q = u < nq, width = q ? uq : uk;
                size_t at = (size_t)n * W + (q ? (size_t)u * uq : (size_t)nq * uq + (size_t)(u - nq) * uk);
                const float *x = cpu_view(be, qkv, at, (size_t)width, xb); /* normalised in place */
                float *o = cpu_out(be, qkv, at, ob);
                norm_row(o, NULL, &rstd[(size_t)n * U + u], x, q ? wq : wk, NULL, width, &ns);
                cpu_commit(be, qkv, at, o, (size_t)width);
            }
        }
    }
}

/* Per thread, partial sums of dwq (uq) then dwk (uk) in scratch, added in thread order. */
void cpu_qk_norm_backward(hg_backend *be, float *dqkv, float *dwq, float *dwk, const float *raw, const float *rstd,
                          const float *wq, const float *wk, const hg_qk_norm_shape *s, float *scratch) {
    int nq, uq, nk, uk;
    hg_qk_norm_units(s, &nq, &uq, &nk, &uk);
    const int U = nq + nk, wmax = uq > uk ? uq : uk, N = s->N;
    const size_t W = (size_t)(s->NH + 2 * s->NKV) * s->hs, QK = (size_t)(s->NH + s->NKV) * s->hs;
    int nt_used = 1;
    #pragma omp parallel num_threads(be->threads)
    {
        int nt = omp_get_num_threads(), t = omp_get_thread_num();
        #pragma omp single
        nt_used = nt;
        float xb[CPU_ROWBUF(be, wmax)], db[CPU_ROWBUF(be, wmax)];
        float *pq = scratch + (size_t)t * (uq + uk), *pk = pq + uq;
        for (int i = 0; i < uq + uk; i++) pq[i] = 0.0f;
        int per = (N + nt - 1) / nt, n0 = t * per, n1 = n0 + per < N ? n0 + per : N;
        for (int n = n0; n < n1; n++)
            for (int u = 0; u < U; u++) {
                const int q = u < nq, width = q ? uq : uk;
                const size_t off = q ? (size_t)u * uq : (size_t)nq * uq + (size_t)(u - nq) * uk, at = (size_t)n * W + off;
                float *d = cpu_inout(be, dqkv, at, (size_t)width, db);
                norm_row_backward(d, q ? pq : pk, NULL, d, cpu_view(be, raw, (size_t)n * QK + off, (size_t)width, xb),
                                  q ? wq : wk, 0.0f, rstd[(size_t)n * U + u], width, 1, 1);
                cpu_commit(be, dqkv, at, d, (size_t)width);
            }
    }
    add_partials(dwq, scratch, nt_used, (size_t)(uq + uk), uq);
    add_partials(dwk, scratch + uq, nt_used, (size_t)(uq + uk), uk);
}

size_t cpu_layernorm_scratch_bytes(hg_backend *be, int N, int C) {
    (void)N;
    return (size_t)be->threads * 2 * (size_t)C * sizeof(float);
}

/* dres is fp32 (the residual type), dbranch the compute type; with dropout off (p = 0),
 * dbranch is dres in the compute type. */
void cpu_dropout_backward(hg_backend *be, float *dbranch, const float *dres, size_t n,
                          const hg_dropout *drop) {
    const int dropping = hg_dropout_on(drop);
    long blocks = (long)((n + CPU_BLOCK - 1) / CPU_BLOCK);
    #pragma omp parallel for schedule(static) num_threads(be->threads)
    for (long blk = 0; blk < blocks; blk++) {
        size_t at = (size_t)blk * CPU_BLOCK, m = n - at < CPU_BLOCK ? n - at : CPU_BLOCK;
        float ob[CPU_BLOCK], sc[CPU_BLOCK], *o = cpu_out(be, dbranch, at, ob);
        if (dropping) {
            cpu_dropout_scales(drop, at, m, sc);
            #pragma omp simd
            for (size_t i = 0; i < m; i++) o[i] = dres[at + i] * sc[i];
        } else
            memcpy(o, dres + at, m * sizeof(float));
        cpu_commit(be, dbranch, at, o, m);
    }
}

/* res_in, res_out fp32; delta in the compute type, read a block at a time. */
void cpu_residual_add(hg_backend *be, float *res_out, const float *res_in, const float *delta, size_t n,
                      const hg_dropout *drop) {
    const int dropping = hg_dropout_on(drop);
    long blocks = (long)((n + CPU_BLOCK - 1) / CPU_BLOCK);
    #pragma omp parallel for schedule(static) num_threads(be->threads)
    for (long blk = 0; blk < blocks; blk++) {
        size_t at = (size_t)blk * CPU_BLOCK, m = n - at < CPU_BLOCK ? n - at : CPU_BLOCK;
        float db[CPU_BLOCK], sc[CPU_BLOCK];
        const float *d = cpu_view(be, delta, at, m, db), *x = res_in + at;
        float *r = res_out + at;
        if (dropping) {
            cpu_dropout_scales(drop, at, m, sc);
            #pragma omp simd
            for (size_t i = 0; i < m; i++) r[i] = x[i] + d[i] * sc[i];
        } else {
            #pragma omp simd
            for (size_t i = 0; i < m; i++) r[i] = x[i] + d[i];
        }
    }
}
