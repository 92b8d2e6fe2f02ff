/* Double-precision reference ops for test_ops: plain loops that follow each contract in
 * src/ops/<op>.h literally, with no blocking, no fusion and no fp32 anywhere. Forwards feed
 * the finite differences; the analytic backwards give full-tensor comparisons and are
 * themselves checked against the finite differences.
 *
 * Legend as in src/ops/README.md: B batch, T time, C channels, V vocab, Vp padded vocab,
 * NH heads, hs head size, N = B*T rows. */
#ifndef HG_TESTS_OPS_REFERENCE_H
#define HG_TESTS_OPS_REFERENCE_H

#include <stdint.h>

#include "backend/backend.h"

/* 0 or 1/(1-p) for element i: the kernel's mask (hg_dropout_scale), the scale in double. */
double ref_dropout_scale(const hg_dropout *d, uint64_t i);

/* out (B,T,C) = dropout(scale * wte[tokens] + wpe[t]). */
void ref_encoder_forward(double *out, const int32_t *tokens, const double *wte, const double *wpe,
                         int B, int T, int C, double scale, const hg_dropout *drop);

/* One row of LayerNorm or RMSNorm (ns->rms) with epsilon ns->eps (taken as the fp32
 * value the kernels add, widened): out (C), mean (0 for RMSNorm), rstd of x (C). w and b
 * may be NULL (weight 1, bias 0). */
void ref_norm_row(double *out, double *mean, double *rstd, const double *x, const double *w,
                  const double *b, int C, const hg_norm_spec *ns);
/* dinp (N,C), dw (C), db (C) = gradients of sum(out * dout) of ref_norm_row, written;
 * w NULL means weight 1; dw and db may be NULL (not computed). */
void ref_norm_backward(double *dinp, double *dw, double *db, const double *dout, const double *inp,
                       const double *w, int N, int C, const hg_norm_spec *ns);
/* Forward tolerance scale of element (n, c): the size of what is computed,
 * (|x| + |mean|) rstd |w| + |b| (w, b NULL: 1, 0). The fp32 mean's error (~sqrt(C) u
 * |mean|) shifts every x - mean of a row and is amplified by rstd, hence this scale
 * rather than |out|. */
void ref_norm_scale(double *scale, const double *x, const double *mean, const double *rstd, const double *w,
                    const double *b, int N, int C);
/* Losses for finite differences of a norm (ref_norm_row of each row of x (N,C)):
 * sum(out * R) over the row of input element i (ref_norm_loss_row), or over all rows, for
 * a weight or bias element (ref_norm_loss_all). row: C doubles of scratch. */
typedef struct ref_norm_fd {
    const double *x, *w, *b;
    double *row;
    const double *R;
    int N, C;
    const hg_norm_spec *ns;
} ref_norm_fd;
double ref_norm_loss_row(void *ctx, size_t i);
double ref_norm_loss_all(void *ctx, size_t i);
/* The residual add fused with the norm: sum(out * R1) + sum(res_out * R2) over the row of
 * element i, res_out = res + dropout(delta). row, sum: C doubles of scratch each. */
typedef struct ref_residual_norm_fd {
    const double *res, *delta;
    double *row, *sum;
    const double *w, *b, *R1, *R2;
    int C;
    const hg_dropout *drop;
    const hg_norm_spec *ns;
} ref_residual_norm_fd;
double ref_residual_norm_loss(void *ctx, size_t i);

/* out (M,N) = inp (M,K) @ w (K,N) + bias; mag (M,N) = sum_k |inp||w| + |bias|, the
 * scale of a dot product's rounding error. bias and mag may be NULL. */
void ref_matmul_forward(double *out, double *mag, const double *inp, const double *w,
                        const double *bias, int M, int K, int N);
/* dinp (M,K) = dout @ w^T; dw (K,N) = inp^T @ dout; dbias (N) = column sums (may be NULL). */
void ref_matmul_backward(double *dinp, double *dw, double *dbias, const double *dout,
                         const double *inp, const double *w, int M, int K, int N);

double ref_gelu(double x);
double ref_gelu_grad(double x);

/* silu(x) = x / (1 + exp(-x)) and its derivative. */
double ref_silu(double x);
double ref_silu_grad(double x);

/* The rotary table as the model builds it (init_rope in src/model/gpt.c): cos_sin
 * (Tmax, hs) fp32, row p = cos(p f_i) for i < hs/2, then sin(p f_i), f_i = 1/theta^(2i/hs)
 * rounded to float, the angle p f_i and its cosine and sine in double. */
void ref_rope_table(float *cos_sin, int Tmax, int hs, float theta);
/* RoPE of ops/rope.h in double with the fp32 table's values: the q and k heads of qkv
 * (B,T,W) rotated in place by +a (inverse = 0), or by the transpose (inverse = 1,
 * rope_backward); v untouched. */
void ref_rope(double *qkv, const float *cos_sin, const hg_rope_shape *s, int inverse);

/* Attention as in ops/attention.h, grouped-query when s->NKV (0 means NH): qkv (B,T,W),
 * W = (NH + 2 NKV) hs, q | k | v with query head h reading kv head h / (NH/NKV). */
/* Query row t of head (b, h): out (hs) and its log-sum-exp. */
void ref_attention_row(double *out, double *lse, const double *qkv, const hg_attention_shape *s,
                       int b, int h, int t);
/* out (B,T,C), lse (B,NH,T). */
void ref_attention_forward(double *out, double *lse, const double *qkv, const hg_attention_shape *s);
/* dqkv (B,T,W) = gradient of sum(out * dout): a kv head's dk, dv summed over its query
 * heads. */
void ref_attention_backward(double *dqkv, const double *dout, const double *qkv,
                            const hg_attention_shape *s);

/* z (V) = x (C) @ wte[:V]^T: one row of logits (padded rows of wte never score). */
void ref_logits_row(double *z, const double *x, const double *wte, int V, int C);
/* Cross-entropy of one row of logits: lse(z) - z[target] (0 when target < 0). */
double ref_row_loss(const double *z, int V, int target);
/* Gradients of dscale * sum of the losses: dx (N,C) and dwte (Vp,C), written. */
void ref_classifier_backward(double *dx, double *dwte, const double *x, const double *wte,
                             const int32_t *targets, int N, int C, int V, int Vp, double dscale);

/* AdamW as documented in src/ops/adamw.h, in double, on double state. */
void ref_adamw(double *p, double *m, double *v, const float *g, size_t n, const hg_adamw_update *u);

#endif
