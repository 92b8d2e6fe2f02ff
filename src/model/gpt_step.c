/* Forward and backward through the decoder, backend-agnostic: every op goes through
 * the backend's table (src/ops/ for the contracts), by way of the wrappers in gpt_ops.h
 * that time it for an attached profiler. Nothing here allocates. */
#include <math.h>
#include <string.h>

#include "core/error.h"
#include "model/gpt.h"
#include "model/gpt_ops.h"
#include "model/plan.h"

#define P(l, r) gpt_weight(m, gpt_pi(m, l, r))
#define G(l, r) gpt_grad(m, gpt_pi(m, l, r))

static hg_dropout dropout_site(const hg_model *m, uint32_t site) {
    hg_dropout d = {m->train_mode ? m->cfg.dropout : 0.0f, m->dropout_seed, m->rng_step, site};
    return d;
}

/* Block l's attention: its window, and the documents of the step's rows. */
static hg_attention_shape attention_shape(const hg_model *m, int l) {
    hg_attention_shape s = {m->B, m->T, m->d.NH, m->d.hs, 1, m->d.NKV, m->cfg.attn_softcap,
                            hg_layer_window(&m->cfg, l), gpt_positions(m, -1)};
    return s;
}

/* The rotary embedding's rows: at kv_pos.. through the KV cache, else at the step's
 * positions, or 0.. */
static hg_rope_shape rope_shape(const hg_model *m, int kv_pos) {
    hg_rope_shape s = {m->B, m->T, kv_pos > 0 ? kv_pos : 0, m->d.NH, m->d.NKV, m->d.hs, m->d.rot,
                       gpt_positions(m, kv_pos)};
    return s;
}

/* A norm's saved mean: NULL for RMSNorm, which has none. */
static float *norm_mean(const hg_model *m, int a, int layer) {
    return m->cfg.norm == HG_NORM_RMSNORM ? NULL : gpt_act(m, a, layer);
}

/* The output matrix: lm_head, or the token embedding when tied. */
static int head_index(const hg_model *m) { return m->cfg.untied ? gpt_pi(m, -1, R_LM_HEAD) : gpt_pi(m, -1, R_WTE); }

/* 1 when site s runs an op of its own. */
static int site_on(const hg_model *m, hg_site s) { return m->sites.on[s]; }

/* ---- LoRA adapters (ops/lora.h) on the four linear groups ---- */

/* The dropout site of group g's adapters in block l: past the model's own sites. */
#define LORA_SITE(l, g) ((1u << 24) + 4u * (uint32_t)(l) + (uint32_t)(g))

static int lora_on(const hg_model *m, hg_lora_group g) { return m->opt.lora.r > 0 && m->opt.lora.targets[g]; }

/* The adapters of group g in block l: their shape, weights (and gradients), dropout. */
static void lora_args(hg_model *m, int l, hg_lora_group g, hg_lora_shape *s, hg_lora_weights *w, hg_dropout *d) {
    const hg_lora *lo = &m->opt.lora;
    const gpt_lora_group lg = gpt_lora_group_of(&m->cfg, lo, g);
    const float scale = lo->rslora ? lo->alpha / sqrtf((float)lo->r) : lo->alpha / (float)lo->r;
    const int k = gpt_pi(m, l, gpt_lora_role(g)); /* A then B of each module */
    *s = (hg_lora_shape){.N = m->B * m->T, .K = lg.K, .OUT = lg.OUT, .r = lo->r, .n = lg.n};
    memset(w, 0, sizeof *w);
    for (int j = 0; j < lg.n; j++) {
        s->c0[j] = lg.c0[j], s->cols[j] = lg.cols[j], s->scale[j] = scale;
        w->A[j] = gpt_weight(m, k + 2 * j), w->B[j] = gpt_weight(m, k + 2 * j + 1);
        w->dA[j] = gpt_grad(m, k + 2 * j), w->dB[j] = gpt_grad(m, k + 2 * j + 1);
    }
    *d = (hg_dropout){m->train_mode ? lo->dropout : 0.0f, m->dropout_seed, m->rng_step, LORA_SITE(l, g)};
}

/* y (the group's output) += its adapters' product of x, where the group has adapters. */
static hg_status lora_forward(hg_model *m, int l, hg_lora_group g, float *y, const float *x) {
    if (!lora_on(m, g)) return HG_OK;
    hg_lora_shape s;
    hg_lora_weights w;
    hg_dropout d;
    lora_args(m, l, g, &s, &w, &d);
    return op_lora_forward(m, l, y, gpt_act(m, A_LORA_H + g, l), (uint32_t *)gpt_act(m, A_LORA_KEEP + g, l), x, &w, &s,
                           &d, gpt_act(m, S_LORA, 0));
}

/* dx += the adapters' share of the input gradient, from dy; their gradients. */
static hg_status lora_backward(hg_model *m, int l, hg_lora_group g, float *dx, const float *dy, const float *x) {
    if (!lora_on(m, g)) return HG_OK;
    hg_lora_shape s;
    hg_lora_weights w;
    hg_dropout d;
    lora_args(m, l, g, &s, &w, &d);
    return op_lora_backward(m, l, dx, dy, x, gpt_act(m, A_LORA_H + g, l), (const uint32_t *)gpt_act(m, A_LORA_KEEP + g, l),
                            &w, &s, &d, gpt_act(m, S_LORA, 0));
}

/* The MLP's first linear, with its adapters: fch (N, FI) from its input. */
static hg_status fc_forward(hg_model *m, int l, float *fch, const float *in) {
    HG_TRY(op_matmul_forward(m, OP_C_FC_FWD, l, fch, in, P(l, R_FC_W), P(l, R_FC_B), m->B * m->T, m->d.C, m->d.FI));
    return lora_forward(m, l, HG_LORA_MLP_IN, fch, in);
}

/* The MLP of block l from its input `in` into out: its first linear into fch, the
 * activation (a site op's, or the config's), the second linear. GELU may be fused with
 * the first linear (op_matmul_gelu_forward) where no adapter sits between them. */
static hg_status mlp_forward(hg_model *m, int l, float *out, float *act, float *fch, const float *in) {
    const int N = m->B * m->T, C = m->d.C, F = m->d.F;
    const int site = site_on(m, HG_SITE_MLP_ACT);
    if (m->cfg.mlp == HG_MLP_GELU && !site && !lora_on(m, HG_LORA_MLP_IN)) {
        HG_TRY(op_matmul_gelu_forward(m, l, act, fch, in, P(l, R_FC_W), P(l, R_FC_B), N, C, F));
    } else {
        HG_TRY(fc_forward(m, l, fch, in));
        if (site) HG_TRY(gpt_site_run(m, HG_SITE_MLP_ACT, SITE_FORWARD, l, fch, act, NULL, NULL));
        else if (m->cfg.mlp == HG_MLP_GELU) op_gelu_forward(m, OP_GELU_FWD, l, act, fch, (size_t)N * F);
        else op_activation_forward(m, 0, l, act, fch, N, F);
    }
    HG_TRY(op_matmul_forward(m, OP_MLP_PROJ_FWD, l, out, act, P(l, R_FCPROJ_W), P(l, R_FCPROJ_B), N, F, C));
    return lora_forward(m, l, HG_LORA_MLP_OUT, out, act);
}

/* The MLP's backward from dmlp (N, C) to dpre (N, FI) in S_DWIDE, through the recomputed
 * activation; GELU's recompute and backward may be fused with the second linear's where
 * no adapter sits between them. */
static hg_status mlp_backward(hg_model *m, int l, float *dpre, const float *dmlp, const float *fch) {
    const int N = m->B * m->T, C = m->d.C, F = m->d.F;
    float *act = gpt_act(m, S_ACT, 0);
    const int site = site_on(m, HG_SITE_MLP_ACT), gelu = m->cfg.mlp == HG_MLP_GELU;
    if (gelu && !site && !lora_on(m, HG_LORA_MLP_OUT))
        return op_matmul_gelu_backward(m, l, dpre, G(l, R_FCPROJ_W), G(l, R_FCPROJ_B), act, dmlp, fch, P(l, R_FCPROJ_W),
                                       N, F, C);
    float *dact = gpt_act(m, S_DACT, 0);
    if (site) HG_TRY(gpt_site_run(m, HG_SITE_MLP_ACT, SITE_RECOMPUTE, l, fch, act, NULL, NULL));
    else if (gelu) op_gelu_forward(m, OP_GELU_RECOMPUTE, l, act, fch, (size_t)N * F);
    else op_activation_forward(m, 1, l, act, fch, N, F);
    HG_TRY(op_matmul_backward(m, OP_MLP_PROJ_BWD, l, dact, G(l, R_FCPROJ_W), G(l, R_FCPROJ_B), dmlp, act,
                              P(l, R_FCPROJ_W), N, F, C));
    HG_TRY(lora_backward(m, l, HG_LORA_MLP_OUT, dact, dmlp, act));
    if (site) return gpt_site_run(m, HG_SITE_MLP_ACT, SITE_BACKWARD, l, fch, NULL, dact, dpre);
    if (gelu) op_gelu_backward(m, l, dpre, fch, dact, (size_t)N * F);
    else op_activation_backward(m, l, dpre, fch, dact, N, F);
    return HG_OK;
}

/* q|k|v of block l from the attention half's input `in` (N, C): the projection, the q/k
 * norm, the rotary embedding (at position kv_pos with the KV cache). */
static hg_status qkv_forward(hg_model *m, int l, int kv_pos, const float *in) {
    const int N = m->B * m->T, C = m->d.C;
    float *qkv = gpt_act(m, A_QKV, l);
    HG_TRY(op_matmul_forward(m, OP_C_ATTN_FWD, l, qkv, in, P(l, R_QKV_W), P(l, R_QKV_B), N, C, m->d.QKV));
    HG_TRY(lora_forward(m, l, HG_LORA_QKV, qkv, in));
    if (m->cfg.qk_norm)
        op_qk_norm_forward(m, l, qkv, m->opt.training ? gpt_act(m, A_QK_RAW, l) : NULL, gpt_act(m, A_QK_RSTD, l),
                           P(l, R_QNORM_W), P(l, R_KNORM_W));
    if (m->cfg.position == HG_POS_ROPE) {
        hg_rope_shape rs = rope_shape(m, kv_pos);
        op_rope(m, OP_ROPE_FWD, l, qkv, gpt_act(m, A_ROPE, 0), &rs);
    }
    return HG_OK;
}

/* The rest of the attention half of block l, from q|k|v into out (N, C): attention
 * (kv_pos >= 0: through the KV cache), the output projection and the op after it. */
static hg_status attention_out_forward(hg_model *m, int l, int kv_pos, float *out) {
    const int N = m->B * m->T, C = m->d.C, QD = m->d.QD;
    float *qkv = gpt_act(m, A_QKV, l), *atty = gpt_act(m, A_ATTY, l);
    if (kv_pos < 0) {
        hg_attention_shape as = attention_shape(m, l);
        HG_TRY(op_attention_forward(m, l, atty, gpt_act(m, A_LSE, l), qkv, &as, gpt_act(m, S_ATTENTION, 0)));
    } else {
        hg_kv_shape ks = {kv_pos, m->T, m->opt.seq_len, m->d.NH, m->d.hs, m->d.NKV, m->cfg.attn_softcap,
                          hg_layer_window(&m->cfg, l)};
        float *kc = gpt_act(m, A_KV, l), *vc = gpt_elems(m, kc, (size_t)ks.Tc * m->d.KVD);
        HG_TRY(op_attention_cached(m, l, atty, kc, vc, qkv, &ks, gpt_act(m, S_ATTENTION, 0)));
    }
    /* the projection: into out, or into the saved input of the op after it */
    const int site = site_on(m, HG_SITE_ATTN_PROJ);
    float *y = site ? gpt_act(m, A_SITE_IN, l) : out;
    HG_TRY(op_matmul_forward(m, OP_ATTN_PROJ_FWD, l, y, atty, P(l, R_PROJ_W), P(l, R_PROJ_B), N, QD, C));
    HG_TRY(lora_forward(m, l, HG_LORA_ATTN_OUT, y, atty));
    return site ? gpt_site_run(m, HG_SITE_ATTN_PROJ, SITE_FORWARD, l, y, out, NULL, NULL) : HG_OK;
}

/* The attention half's backward in two parts: from dattn (N, C) at its output through the
 * op after the projection and the projection into S_DATTY; then from there through
 * attention, the rotary embedding, the q/k norm and q|k|v into din (N, C), the gradient at
 * its input `in`. The parallel block acts between the two. */
static hg_status attention_backward_out(hg_model *m, int l, const float *dattn) {
    const int N = m->B * m->T, C = m->d.C, QD = m->d.QD;
    if (site_on(m, HG_SITE_ATTN_PROJ)) {
        float *dx = gpt_act(m, S_SITE_GRAD, 0);
        HG_TRY(gpt_site_run(m, HG_SITE_ATTN_PROJ, SITE_BACKWARD, l, gpt_act(m, A_SITE_IN, l), NULL, dattn, dx));
        dattn = dx;
    }
    HG_TRY(op_matmul_backward(m, OP_ATTN_PROJ_BWD, l, gpt_act(m, S_DATTY, 0), G(l, R_PROJ_W), G(l, R_PROJ_B), dattn,
                              gpt_act(m, A_ATTY, l), P(l, R_PROJ_W), N, QD, C));
    return lora_backward(m, l, HG_LORA_ATTN_OUT, gpt_act(m, S_DATTY, 0), dattn, gpt_act(m, A_ATTY, l));
}

static hg_status attention_backward_in(hg_model *m, int l, float *din, const float *in) {
    const int N = m->B * m->T, C = m->d.C;
    float *dqkv = gpt_act(m, S_DWIDE, 0), *qkv = gpt_act(m, A_QKV, l);
    hg_attention_shape as = attention_shape(m, l);
    HG_TRY(op_attention_backward(m, l, dqkv, gpt_act(m, S_DATTY, 0), qkv, gpt_act(m, A_ATTY, l), gpt_act(m, A_LSE, l),
                                 &as, gpt_act(m, S_ATTENTION, 0)));
    if (m->cfg.position == HG_POS_ROPE) {
        hg_rope_shape rs = rope_shape(m, -1);
        op_rope(m, OP_ROPE_BWD, l, dqkv, gpt_act(m, A_ROPE, 0), &rs);
    }
    if (m->cfg.qk_norm)
        op_qk_norm_backward(m, l, dqkv, G(l, R_QNORM_W), G(l, R_KNORM_W), gpt_act(m, A_QK_RAW, l),
                            gpt_act(m, A_QK_RSTD, l), P(l, R_QNORM_W), P(l, R_KNORM_W), gpt_act(m, S_REDUCE, 0));
    HG_TRY(op_matmul_backward(m, OP_C_ATTN_BWD, l, din, G(l, R_QKV_W), G(l, R_QKV_B), dqkv, in, P(l, R_QKV_W), N, C,
                              m->d.QKV));
    return lora_backward(m, l, HG_LORA_QKV, din, dqkv, in);
}

/* A post norm (half 0: attn.post_norm, 1: mlp.post_norm; postnorm and sandwich blocks):
 * where its branch writes (A_POST1/A_POST2, its saved input; S_PROJ without one), its
 * forward into S_POST, and its backward from dy into S_DPOST. Without post norms the
 * branch output and its gradient pass through. Its mean and rstd follow its input in
 * enum gpt_act (a + 1, a + 2). */
static float *branch_out(hg_model *m, int l, int half) {
    return gpt_has_post_norm(&m->cfg) ? gpt_act(m, half ? A_POST2 : A_POST1, l) : gpt_act(m, S_PROJ, 0);
}

static const float *post_norm_forward(hg_model *m, int l, int half, const float *x) {
    if (!gpt_has_post_norm(&m->cfg)) return x;
    const int a = half ? A_POST2 : A_POST1;
    const gpt_role w = half ? R_POST2_W : R_POST1_W, b = half ? R_POST2_B : R_POST1_B;
    float *y = gpt_act(m, S_POST, 0);
    op_layernorm_forward(m, l, y, norm_mean(m, a + 1, l), gpt_act(m, a + 2, l), x, P(l, w), P(l, b), m->B * m->T, m->d.C, 1);
    return y;
}

static const float *post_norm_backward(hg_model *m, int l, int half, const float *dy) {
    if (!gpt_has_post_norm(&m->cfg)) return dy;
    const int N = m->B * m->T, C = m->d.C, a = half ? A_POST2 : A_POST1;
    const gpt_role w = half ? R_POST2_W : R_POST1_W, b = half ? R_POST2_B : R_POST1_B;
    float *dx = gpt_act(m, S_DPOST, 0);
    op_zero(m, OP_ZERO_DPOST, l, dx, hg_precision_bytes(m->be->precision) * (size_t)N * C);
    op_layernorm_backward(m, l, dx, G(l, w), G(l, b), dy, gpt_act(m, a, l), P(l, w), norm_mean(m, a + 1, l),
                          gpt_act(m, a + 2, l), N, C, gpt_act(m, S_REDUCE, 0), 1);
    return dx;
}

/* The residual stream `res` as the input of a branch no norm precedes (the postnorm
 * block's): res itself, or where the residual type is not the compute type (bf16 on the
 * CPU) its copy in the compute type in `slot` (A_LN1 or A_LN2, which the block has no
 * norm for), made in forward (`make`) and read again in backward. */
static const float *plain_input(hg_model *m, int l, const float *res, int slot, int make) {
    if (hg_residual_precision(m->be) == m->be->precision) return res;
    float *copy = gpt_act(m, slot, l);
    hg_dropout off = {0};
    if (make) op_dropout_backward(m, l, copy, res, (size_t)m->B * m->T * m->d.C, &off); /* p = 0: a copy */
    return copy;
}

/* Block l's ln_1 (l == L: ln_f) forward from res, fused with the residual add into res
 * (res = res_in + dropout(delta)) when res_in is given; the profiler counts it to block
 * `layer`, the one whose add it is. */
static void pre_norm_forward(hg_model *m, int l, int layer, float *res, const float *res_in, const float *delta,
                             const hg_dropout *d) {
    const int N = m->B * m->T, C = m->d.C, last = l == m->d.L;
    float *out = gpt_act(m, last ? A_LNF : A_LN1, last ? 0 : l), *rstd = gpt_act(m, last ? A_LNF_RSTD : A_LN1_RSTD, last ? 0 : l);
    float *mean = last ? norm_mean(m, A_LNF_MEAN, 0) : norm_mean(m, A_LN1_MEAN, l);
    const float *w = last ? P(-1, R_LNF_W) : P(l, R_LN1_W), *b = last ? P(-1, R_LNF_B) : P(l, R_LN1_B);
    if (res_in) op_residual_layernorm_forward(m, layer, res, out, mean, rstd, res_in, delta, w, b, N, C, d);
    else op_layernorm_forward(m, layer, out, mean, rstd, res, w, b, N, C, 0);
}

/* The input of block l's attention half: ln_1's output, or (the postnorm block) the
 * residual stream, as plain_input gives it; `make`: as plain_input's. */
static const float *attention_input(hg_model *m, int l, int make) {
    if (gpt_has_ln1(&m->cfg)) return gpt_act(m, A_LN1, l);
    return plain_input(m, l, gpt_act(m, A_RESIDUAL, l), A_LN1, make);
}

/* The input of block l's MLP: ln_2's output, the parallel block's ln_1, or the residual
 * stream after the attention half (the postnorm block). */
static const float *mlp_input(hg_model *m, int l, int make) {
    if (gpt_has_ln2(&m->cfg)) return gpt_act(m, A_LN2, l);
    if (m->cfg.block == HG_BLOCK_PARALLEL) return gpt_act(m, A_LN1, l);
    return plain_input(m, l, gpt_act(m, A_RESIDUAL2, l), A_LN2, make);
}

/* Block l up to the add that ends it: the attention half, its post norm and its add
 * (fused with ln_2 where the MLP reads ln_2), then the MLP. whole_mlp 1: the MLP branch
 * and its post norm, *delta the branch's output to add; 0: the MLP's first linear alone
 * (its pre-activation A_FCH, what a recomputing backward needs of it without post norms). */
static hg_status block_forward(hg_model *m, int l, int kv_pos, int whole_mlp, const float **delta) {
    const int N = m->B * m->T, C = m->d.C;
    float *res = gpt_act(m, A_RESIDUAL, l), *res2 = gpt_act(m, A_RESIDUAL2, l);
    float *out = branch_out(m, l, 0);
    HG_TRY(qkv_forward(m, l, kv_pos, attention_input(m, l, 1)));
    HG_TRY(attention_out_forward(m, l, kv_pos, out));
    const float *d = post_norm_forward(m, l, 0, out);
    hg_dropout da = dropout_site(m, 1 + 2 * l);
    if (gpt_has_ln2(&m->cfg))
        op_residual_layernorm_forward(m, l, res2, gpt_act(m, A_LN2, l), norm_mean(m, A_LN2_MEAN, l),
                                      gpt_act(m, A_LN2_RSTD, l), res, d, P(l, R_LN2_W), P(l, R_LN2_B), N, C, &da);
    else
        op_residual_add(m, l, res2, res, d, (size_t)N * C, &da);
    if (!whole_mlp) return fc_forward(m, l, gpt_act(m, A_FCH, l), mlp_input(m, l, 1));
    out = branch_out(m, l, 1);
    HG_TRY(mlp_forward(m, l, out, gpt_act(m, S_ACT, 0), gpt_act(m, A_FCH, l), mlp_input(m, l, 1)));
    *delta = post_norm_forward(m, l, 1, out);
    return HG_OK;
}

/* The blocks in the order of cfg.block (hg_block_kind). A residual add is fused with the
 * norm that reads its result, where one does: the next ln_1 (or ln_f) after a block, ln_2
 * after the attention half; elsewhere it is a plain add. */
hg_status gpt_forward_body(hg_model *m, int kv_pos) {
    const int B = m->B, T = m->T, N = B * T, C = m->d.C, L = m->d.L, ln1 = gpt_has_ln1(&m->cfg);
    const float *wpe = P(-1, R_WPE);
    if (wpe) wpe = gpt_elems(m, wpe, (size_t)(kv_pos > 0 ? kv_pos : 0) * C);

    hg_dropout d0 = dropout_site(m, 0);
    op_encoder_forward(m, gpt_act(m, A_RESIDUAL, 0), gpt_act(m, A_TOKENS, 0), gpt_positions(m, kv_pos), P(-1, R_WTE),
                       wpe, B, T, C, &d0);
    if (ln1) pre_norm_forward(m, 0, 0, gpt_act(m, A_RESIDUAL, 0), NULL, NULL, NULL);
    for (int l = 0; l < L; l++) {
        const float *delta;
        HG_TRY(block_forward(m, l, kv_pos, 1, &delta));
        /* the MLP's add: fused with the next ln_1, or ln_f */
        float *res2 = gpt_act(m, A_RESIDUAL2, l), *next = gpt_act(m, A_RESIDUAL, l + 1);
        hg_dropout dm = dropout_site(m, 2 + 2 * l);
        if (ln1 || l == L - 1) pre_norm_forward(m, l + 1, l, next, res2, delta, &dm);
        else op_residual_add(m, l, next, res2, delta, (size_t)N * C, &dm);
    }
    if (site_on(m, HG_SITE_FINAL_NORM)) { /* ln_f again, on the op's output (the fused one's is discarded) */
        float *y = gpt_act(m, A_SITE_OUT, 0);
        HG_TRY(gpt_site_run(m, HG_SITE_FINAL_NORM, SITE_FORWARD, -1, gpt_act(m, A_RESIDUAL, L), y, NULL, NULL));
        op_layernorm_forward(m, L - 1, gpt_act(m, A_LNF, 0), norm_mean(m, A_LNF_MEAN, 0), gpt_act(m, A_LNF_RSTD, 0), y,
                             P(-1, R_LNF_W), P(-1, R_LNF_B), N, C, 0);
    }
    return HG_OK;
}

/* What opt.recompute left out of block l's kept activations, made again before its
 * backward from what is kept (the plan, model/plan.h, sizes the memory by whatever this
 * writes): attn, ln_1 and q|k|v from the block's input; mlp, ln_2 (where the MLP has its
 * own norm) and the MLP's pre-activation; block, the whole block from its input but the
 * add that ends it. Deterministic kernels make the same values as the forward. */
static hg_status recompute(hg_model *m, int l) {
    const hg_recompute r = m->opt.recompute;
    const int N = m->B * m->T, C = m->d.C;
    if (r == HG_RECOMPUTE_NONE) return HG_OK;
    m->recomputing = 1;
    hg_status st = HG_OK;
    if (r == HG_RECOMPUTE_ATTN || r == HG_RECOMPUTE_BLOCK) {
        if (gpt_has_ln1(&m->cfg)) pre_norm_forward(m, l, l, gpt_act(m, A_RESIDUAL, l), NULL, NULL, NULL);
        const float *delta;
        if (r == HG_RECOMPUTE_BLOCK) st = block_forward(m, l, -1, gpt_has_post_norm(&m->cfg), &delta);
        else st = qkv_forward(m, l, -1, attention_input(m, l, 1));
    } else {
        if (gpt_has_ln2(&m->cfg))
            op_layernorm_forward(m, l, gpt_act(m, A_LN2, l), norm_mean(m, A_LN2_MEAN, l), gpt_act(m, A_LN2_RSTD, l),
                                 gpt_act(m, A_RESIDUAL2, l), P(l, R_LN2_W), P(l, R_LN2_B), N, C, 0);
        st = fc_forward(m, l, gpt_act(m, A_FCH, l), mlp_input(m, l, 1));
    }
    m->recomputing = 0;
    return st;
}

/* Chunk by chunk (S_LOGITS holds one): forward, then in training its backward. */
hg_status gpt_classifier(hg_model *m, int backward, float grad_scale, float *logits) {
    const int N = m->B * m->T, C = m->d.C, V = m->d.V;
    const float *x = gpt_act(m, A_LNF, 0);
    int32_t *targets = m->has_targets ? gpt_act(m, A_TARGETS, 0) : NULL;
    float *losses = m->has_targets ? gpt_act(m, A_LOSSES, 0) : NULL, *dx = gpt_act(m, S_DLN, 0);
    for (int r0 = 0; r0 < N; r0 += m->chunk) {
        hg_classifier_args a = {
            .N = N - r0 < m->chunk ? N - r0 : m->chunk, .C = C, .V = V, .Vp = m->d.Vp,
            .x = gpt_elems(m, x, (size_t)r0 * C), .wte = gpt_weight(m, head_index(m)), .bias = P(-1, R_LM_HEAD_B),
            .softcap = m->cfg.logit_softcap,
            .targets = targets ? targets + r0 : NULL, .losses = losses ? losses + r0 : NULL,
            .logits = logits ? logits + (size_t)r0 * V : NULL, .scratch = gpt_act(m, S_LOGITS, 0),
        };
        if (backward) {
            a.dscale = m->loss_scale_n > 0 ? grad_scale / m->loss_scale_n : 0.0f;
            a.dx = gpt_elems(m, dx, (size_t)r0 * C);
            a.dwte = gpt_grad(m, head_index(m));
            a.dbias = G(-1, R_LM_HEAD_B);
        }
        HG_TRY(op_classifier_forward(m, &a));
        if (backward) HG_TRY(op_classifier_backward(m, &a));
    }
    return HG_OK;
}

/* The gradient reaching a branch, in the compute type: dres itself when dropout is off
 * and the residual type is the compute type, else dropout'(dres) (with p = 0, a copy
 * into the compute type) in S_DBRANCH. */
static const float *branch_grad(hg_model *m, int layer, const float *dres, uint32_t site) {
    hg_dropout d = dropout_site(m, site);
    if (!hg_dropout_on(&d) && hg_residual_precision(m->be) == m->be->precision) return dres;
    float *out = gpt_act(m, S_DBRANCH, 0);
    op_dropout_backward(m, layer, out, dres, (size_t)m->B * m->T * m->d.C, &d);
    return out;
}

/* The gradient din at a branch's input added into dres: through ln_1 (which = 0) or ln_2
 * (which = 1) where the layout has it, else straight (the postnorm's branches read the
 * residual stream). */
static void input_backward(hg_model *m, int l, int which, float *dres, const float *din) {
    const int N = m->B * m->T, C = m->d.C;
    if (!(which ? gpt_has_ln2(&m->cfg) : gpt_has_ln1(&m->cfg))) {
        op_residual_add(m, l, dres, dres, din, (size_t)N * C, NULL);
        return;
    }
    const gpt_role w = which ? R_LN2_W : R_LN1_W, b = which ? R_LN2_B : R_LN1_B;
    op_layernorm_backward(m, l, dres, G(l, w), G(l, b), din, gpt_act(m, which ? A_RESIDUAL2 : A_RESIDUAL, l), P(l, w),
                          norm_mean(m, which ? A_LN2_MEAN : A_LN1_MEAN, l), gpt_act(m, which ? A_LN2_RSTD : A_LN1_RSTD, l),
                          N, C, gpt_act(m, S_REDUCE, 0), 0);
}

hg_status gpt_backward_body(hg_model *m) {
    const int B = m->B, T = m->T, N = B * T, C = m->d.C, L = m->d.L, parallel = m->cfg.block == HG_BLOCK_PARALLEL;
    float *dres = gpt_act(m, S_DRES, 0), *dln = gpt_act(m, S_DLN, 0), *dwide = gpt_act(m, S_DWIDE, 0);

    /* ln_f, fused into the last block's forward, counts to that block here too; with an op
     * before it, ln_f's gradient goes to the op's output and the op's to the residual */
    const int final = site_on(m, HG_SITE_FINAL_NORM);
    float *dnorm_in = final ? gpt_act(m, S_SITE_GRAD, 0) : dres;
    op_zero(m, OP_ZERO_DRES, L - 1, dnorm_in, hg_precision_bytes(hg_residual_precision(m->be)) * (size_t)N * C);
    op_layernorm_backward(m, L - 1, dnorm_in, G(-1, R_LNF_W), G(-1, R_LNF_B), dln,
                          gpt_act(m, final ? A_SITE_OUT : A_RESIDUAL, final ? 0 : L), P(-1, R_LNF_W),
                          norm_mean(m, A_LNF_MEAN, 0), gpt_act(m, A_LNF_RSTD, 0), N, C, gpt_act(m, S_REDUCE, 0), 0);
    if (final) HG_TRY(gpt_site_run(m, HG_SITE_FINAL_NORM, SITE_BACKWARD, -1, gpt_act(m, A_RESIDUAL, L), NULL, dnorm_in, dres));
    gpt_grad_ready(m, gpt_layer_first(m, L), m->params.count);
    for (int l = L - 1; l >= 0; l--) {
        HG_TRY(recompute(m, l));
        /* the MLP: its post norm, c_proj and the activation (recomputed), c_fc, its input */
        HG_TRY(mlp_backward(m, l, dwide, post_norm_backward(m, l, 1, branch_grad(m, l, dres, 2 + 2 * l)),
                            gpt_act(m, A_FCH, l)));
        HG_TRY(op_matmul_backward(m, OP_C_FC_BWD, l, dln, G(l, R_FC_W), G(l, R_FC_B), dwide, mlp_input(m, l, 0),
                                  P(l, R_FC_W), N, C, m->d.FI));
        HG_TRY(lora_backward(m, l, HG_LORA_MLP_IN, dln, dwide, mlp_input(m, l, 0)));
        /* the parallel block's branches both read the residual before it: the MLP's input
         * gradient joins dres once the attention half has taken its gradient from it */
        if (!parallel) input_backward(m, l, 1, dres, dln);
        HG_TRY(attention_backward_out(m, l, post_norm_backward(m, l, 0, branch_grad(m, l, dres, 1 + 2 * l))));
        if (parallel) input_backward(m, l, 0, dres, dln);
        HG_TRY(attention_backward_in(m, l, dln, attention_input(m, l, 0)));
        input_backward(m, l, 0, dres, dln);
        gpt_grad_ready(m, gpt_layer_first(m, l), gpt_layer_first(m, l + 1));
    }
    hg_dropout d0 = dropout_site(m, 0);
    if (G(-1, R_WTE) || G(-1, R_WPE)) /* (not when the embeddings are frozen) */
        op_encoder_backward(m, G(-1, R_WTE), G(-1, R_WPE), dres, gpt_act(m, A_TOKENS, 0), gpt_positions(m, -1), B, T, C,
                            &d0);
    gpt_grad_ready(m, 0, gpt_layer_first(m, 0));
    return HG_OK;
}

/* ---- the public step API ---- */

static hg_status check_shape(const hg_model *m, int B, int T) {
    if (B <= 0 || B > m->opt.batch) return hg_fail(HG_ERR_INVALID, "B must be in [1, batch=%d], got %d", m->opt.batch, B);
    if (T <= 0 || T > m->opt.seq_len) return hg_fail(HG_ERR_INVALID, "T must be in [1, seq_len=%d], got %d", m->opt.seq_len, T);
    return HG_OK;
}

hg_status hg_set_positions(hg_model *m, const int32_t *pos, int B, int T) {
    if (!m) return hg_fail(HG_ERR_INVALID, "model is NULL");
    if (!pos) {
        m->pos_B = m->pos_T = 0;
        return HG_OK;
    }
    if (m->be->ops->positions) HG_TRY(m->be->ops->positions(m->be));
    HG_TRY(check_shape(m, B, T));
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            int32_t p = pos[(size_t)b * T + t], prev = t ? pos[(size_t)b * T + t - 1] : -1;
            if (p < 0 || p >= m->cfg.max_seq_len)
                return hg_fail(HG_ERR_INVALID, "positions[b=%d, t=%d] = %d is outside [0, max_seq_len=%d)", b, t, p,
                               m->cfg.max_seq_len);
            if (t && p && p != prev + 1)
                return hg_fail(HG_ERR_INVALID, "positions[b=%d, t=%d] = %d: a position is 0 (a new document) or one "
                               "more than the one before it (%d)", b, t, p, prev);
        }
    memcpy(m->pos, pos, sizeof(int32_t) * (size_t)B * T);
    if (m->pos_dev) {
        m->be->ops->upload(m->be, m->pos_dev, pos, sizeof(int32_t) * (size_t)B * T);
        HG_TRY(m->be->ops->sync(m->be));
    }
    m->pos_B = B, m->pos_T = T;
    return HG_OK;
}

/* Checks shapes and ids, then copies tokens and targets into the model. */
static hg_status stage_inputs(hg_model *m, const int32_t *tokens, const int32_t *targets, int B, int T) {
    if (!tokens) return hg_fail(HG_ERR_INVALID, "tokens is NULL");
    HG_TRY(check_shape(m, B, T));
    if (m->pos_B && (B != m->pos_B || T != m->pos_T))
        return hg_fail(HG_ERR_INVALID, "positions were set for B=%d, T=%d and this batch is B=%d, T=%d; set them "
                       "again, or clear them with hg_set_positions(m, NULL, 0, 0)", m->pos_B, m->pos_T, B, T);
    const int V = m->cfg.vocab_size;
    int valid = 0;
    for (int i = 0; i < B * T; i++) {
        if (tokens[i] < 0 || tokens[i] >= V)
            return hg_fail(HG_ERR_INVALID, "tokens[b=%d, t=%d] = %d is outside the vocabulary [0, %d)", i / T, i % T, tokens[i], V);
        if (targets) {
            if (targets[i] < -1 || targets[i] >= V)
                return hg_fail(HG_ERR_INVALID, "targets[b=%d, t=%d] = %d is outside [-1, %d)", i / T, i % T, targets[i], V);
            valid += targets[i] >= 0;
        }
    }
    m->B = B;
    m->T = T;
    m->has_targets = targets != NULL;
    m->loss_scale_n = (float)valid;
    m->be->ops->upload(m->be, gpt_act(m, A_TOKENS, 0), tokens, sizeof(int32_t) * (size_t)B * T);
    if (targets) m->be->ops->upload(m->be, gpt_act(m, A_TARGETS, 0), targets, sizeof(int32_t) * (size_t)B * T);
    if (m->train_mode) m->rng_step++;
    return HG_OK;
}

/* The three parts of a step, each a region for an attached profiler and for the trace. */
static hg_status forward_body(hg_model *m) {
    gpt_trace_phase(m, TRACE_FORWARD);
    double t0 = prof_begin(m);
    HG_TRY(gpt_forward_body(m, -1));
    prof_region(m, PROF_FORWARD, t0);
    return HG_OK;
}

static hg_status classifier(hg_model *m, int backward, float grad_scale, float *logits) {
    gpt_trace_phase(m, TRACE_CLASSIFIER);
    double t0 = prof_begin(m);
    HG_TRY(gpt_classifier(m, backward, grad_scale, logits));
    prof_region(m, PROF_CLASSIFIER, t0);
    return HG_OK;
}

static hg_status backward_body(hg_model *m) {
    gpt_trace_phase(m, TRACE_BACKWARD);
    double t0 = prof_begin(m);
    HG_TRY(gpt_backward_body(m));
    prof_region(m, PROF_BACKWARD, t0);
    return HG_OK;
}

/* Waits for the step's work; *loss (when not NULL) = the mean loss over the targets that
 * count (0 when every target is ignored). */
static hg_status finish(hg_model *m, float *loss) {
    if (loss) {
        float *losses = m->host_losses;
        m->be->ops->download(m->be, losses, gpt_act(m, A_LOSSES, 0), sizeof(float) * (size_t)m->B * m->T);
    }
    HG_TRY(m->be->ops->sync(m->be));
    if (loss) {
        double sum = 0.0;
        for (int i = 0; i < m->B * m->T; i++) sum += m->host_losses[i];
        *loss = m->loss_scale_n > 0 ? (float)(sum / m->loss_scale_n) : 0.0f;
    }
    return HG_OK;
}

hg_status hg_forward(hg_model *m, const int32_t *tokens, const int32_t *targets, int B, int T,
                     float *loss, float *logits) {
    if (!m) return hg_fail(HG_ERR_INVALID, "model is NULL");
    HG_TRY(stage_inputs(m, tokens, targets, B, T));
    m->phase = PHASE_NONE;
    HG_TRY(gpt_pass_forward(m, logits));
    HG_TRY(finish(m, targets ? loss : NULL));
    m->phase = PHASE_FORWARD;
    if (loss && !targets) *loss = 0.0f;
    return HG_OK;
}

static hg_status check_trainable(const hg_model *m) {
    if (!m) return hg_fail(HG_ERR_INVALID, "model is NULL");
    if (!m->opt.training) return hg_fail(HG_ERR_STATE, "this model was created with training=0: it has no gradients");
    return HG_OK;
}

hg_status hg_backward(hg_model *m, float grad_scale) {
    HG_TRY(check_trainable(m));
    if (m->phase != PHASE_FORWARD || !m->has_targets)
        return hg_fail(HG_ERR_STATE, "hg_backward needs a preceding hg_forward with targets");
    if (!(grad_scale == grad_scale)) return hg_fail(HG_ERR_INVALID, "grad_scale is NaN");
    m->phase = PHASE_NONE;
    HG_TRY(classifier(m, 1, grad_scale, NULL));
    HG_TRY(backward_body(m));
    return finish(m, NULL);
}

hg_status gpt_pass_train(hg_model *m) {
    HG_TRY(forward_body(m));
    HG_TRY(classifier(m, 1, m->grad_scale, NULL));
    return backward_body(m);
}

hg_status gpt_pass_forward(hg_model *m, float *logits) {
    HG_TRY(forward_body(m));
    return classifier(m, 0, 0.0f, logits);
}

/* The training pass after stage_inputs: what a backend may record as one graph. */
static hg_status train_body(void *ctx) { return gpt_pass_train(ctx); }

/* A graph bakes in every op argument, so it is replayed only while they are unchanged:
 * the shape, the loss normaliser and the gradient scale. Dropout masks change every step
 * (rng_step is an argument), so a step with dropout runs without a graph; so does a step
 * with a profiler attached or a gradient-ready hook set, which act between the ops. */
static int graph_key(const hg_model *m, uint64_t *key) {
    if (!m->be->ops->run_graph || !(m->opt.flags & HG_FLAG_CUDA_GRAPHS)) return 0;
    if ((m->train_mode && m->cfg.dropout > 0.0f) || PROF_ON(m) || m->grad_ready) return 0;
    uint32_t n, g;
    memcpy(&n, &m->loss_scale_n, 4);
    memcpy(&g, &m->grad_scale, 4);
    *key = ((uint64_t)m->B << 32 | (uint64_t)m->T) ^ ((uint64_t)n << 32 | g) * 0x9E3779B97F4A7C15ull;
    return 1;
}

hg_status hg_forward_backward(hg_model *m, const int32_t *tokens, const int32_t *targets, int B, int T,
                              float grad_scale, float *loss) {
    HG_TRY(check_trainable(m));
    if (!targets) return hg_fail(HG_ERR_INVALID, "targets is NULL: training needs targets");
    if (!(grad_scale == grad_scale)) return hg_fail(HG_ERR_INVALID, "grad_scale is NaN");
    HG_TRY(stage_inputs(m, tokens, targets, B, T));
    m->phase = PHASE_NONE;
    m->grad_scale = grad_scale;
    uint64_t key;
    if (graph_key(m, &key)) HG_TRY(m->be->ops->run_graph(m->be, key, train_body, m));
    else HG_TRY(train_body(m));
    return finish(m, loss);
}

hg_status hg_zero_grad(hg_model *m) {
    HG_TRY(check_trainable(m));
    op_zero(m, OP_ZERO_GRAD, PROF_NO_LAYER, m->grad, m->train_bytes / sizeof(float) * gpt_grad_bytes(m));
    if (m->grad_win) /* zero already, unless a backward stopped part way */
        op_zero(m, OP_ZERO_GRAD, PROF_NO_LAYER, m->grad_win, m->win_floats * sizeof(float));
    /* a failure shows at the next sync */
    return HG_OK;
}

/* ---- generation with the KV cache ---- */

hg_status gpt_pass_kv(hg_model *m, float *logits) {
    gpt_trace_phase(m, TRACE_FORWARD);
    HG_TRY(gpt_forward_body(m, m->kv_len));
    const int C = m->d.C;
    hg_classifier_args a = {
        .N = 1, .C = C, .V = m->d.V, .Vp = m->d.Vp,
        .x = gpt_elems(m, gpt_act(m, A_LNF, 0), (size_t)(m->T - 1) * C),
        .wte = gpt_weight(m, head_index(m)), .bias = P(-1, R_LM_HEAD_B), .logits = logits, .scratch = gpt_act(m, S_LOGITS, 0),
        .softcap = m->cfg.logit_softcap,
    };
    return op_classifier_forward(m, &a);
}

static hg_status check_kv(const hg_model *m) {
    if (!m) return hg_fail(HG_ERR_INVALID, "model is NULL");
    if (!gpt_has_kv(&m->opt))
        return hg_fail(HG_ERR_STATE, "the KV cache needs a model created with training=0 and batch=1");
    return HG_OK;
}

hg_status hg_kv_reset(hg_model *m) {
    HG_TRY(check_kv(m));
    m->kv_len = 0;
    return HG_OK;
}

int hg_kv_length(const hg_model *m) { return m ? m->kv_len : 0; }

hg_status hg_kv_truncate(hg_model *m, int n) {
    HG_TRY(check_kv(m));
    if (n < 0 || n > m->kv_len)
        return hg_fail(HG_ERR_INVALID, "n = %d is outside the cache's [0, %d] positions", n, m->kv_len);
    m->kv_len = n; /* positions n.. are written again by the next hg_kv_forward */
    return HG_OK;
}

hg_status hg_kv_forward(hg_model *m, const int32_t *tokens, int n, float *logits) {
    HG_TRY(check_kv(m));
    if (!logits) return hg_fail(HG_ERR_INVALID, "logits is NULL");
    if (n <= 0 || n > m->opt.seq_len - m->kv_len)
        return hg_fail(HG_ERR_INVALID, "n = %d new tokens do not fit the KV cache (%d of seq_len=%d used)", n,
                       m->kv_len, m->opt.seq_len);
    HG_TRY(stage_inputs(m, tokens, NULL, 1, n));
    m->phase = PHASE_NONE;
    HG_TRY(gpt_pass_kv(m, logits));
    HG_TRY(m->be->ops->sync(m->be));
    m->kv_len += n;
    return HG_OK;
}
