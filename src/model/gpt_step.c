/* Forward and backward through the decoder, backend-agnostic: every op goes through
 * the backend's table (src/ops/ for the contracts), by way of the wrappers in gpt_ops.h
 * that time it for an attached profiler. Nothing here allocates. */
#include <string.h>

#include "core/error.h"
#include "model/gpt.h"
#include "model/gpt_ops.h"

#define P(l, r) gpt_weight(m, gpt_pi(m, l, r))
#define G(l, r) gpt_param(m, m->grad, gpt_pi(m, l, r))

static hg_dropout dropout_site(const hg_model *m, uint32_t site) {
    hg_dropout d = {m->train_mode ? m->cfg.dropout : 0.0f, m->dropout_seed, m->rng_step, site};
    return d;
}

static hg_attention_shape attention_shape(const hg_model *m) {
    hg_attention_shape s = {m->B, m->T, m->d.NH, m->d.hs, 1, m->d.NKV};
    return s;
}

static hg_rope_shape rope_shape(const hg_model *m, int pos0) {
    hg_rope_shape s = {m->B, m->T, pos0, m->d.NH, m->d.NKV, m->d.hs, m->d.rot};
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

/* The MLP of block l from ln2 into S_PROJ: its first linear into fch, the activation (a
 * site op's, or the config's), the second linear. GELU may be fused with the first
 * linear (op_matmul_gelu_forward). */
static hg_status mlp_forward(hg_model *m, int l, float *proj, float *act, float *fch, const float *ln2) {
    const int N = m->B * m->T, C = m->d.C, F = m->d.F;
    const int site = site_on(m, HG_SITE_MLP_ACT);
    if (m->cfg.mlp == HG_MLP_GELU && !site) {
        HG_TRY(op_matmul_gelu_forward(m, l, act, fch, ln2, P(l, R_FC_W), P(l, R_FC_B), N, C, F));
    } else {
        HG_TRY(op_matmul_forward(m, OP_C_FC_FWD, l, fch, ln2, P(l, R_FC_W), P(l, R_FC_B), N, C, m->d.FI));
        if (site) HG_TRY(gpt_site_run(m, HG_SITE_MLP_ACT, SITE_FORWARD, l, fch, act, NULL, NULL));
        else op_activation_forward(m, 0, l, act, fch, N, F);
    }
    return op_matmul_forward(m, OP_MLP_PROJ_FWD, l, proj, act, P(l, R_FCPROJ_W), P(l, R_FCPROJ_B), N, F, C);
}

/* The MLP's backward from dmlp (N, C) to dpre (N, FI) in S_DWIDE, through the recomputed
 * activation; GELU's recompute and backward may be fused with the second linear's. */
static hg_status mlp_backward(hg_model *m, int l, float *dpre, const float *dmlp, const float *fch) {
    const int N = m->B * m->T, C = m->d.C, F = m->d.F;
    float *act = gpt_act(m, S_ACT, 0);
    const int site = site_on(m, HG_SITE_MLP_ACT);
    if (m->cfg.mlp == HG_MLP_GELU && !site)
        return op_matmul_gelu_backward(m, l, dpre, G(l, R_FCPROJ_W), G(l, R_FCPROJ_B), act, dmlp, fch, P(l, R_FCPROJ_W),
                                       N, F, C);
    float *dact = gpt_act(m, S_DACT, 0);
    if (site) HG_TRY(gpt_site_run(m, HG_SITE_MLP_ACT, SITE_RECOMPUTE, l, fch, act, NULL, NULL));
    else op_activation_forward(m, 1, l, act, fch, N, F);
    HG_TRY(op_matmul_backward(m, OP_MLP_PROJ_BWD, l, dact, G(l, R_FCPROJ_W), G(l, R_FCPROJ_B), dmlp, act,
                              P(l, R_FCPROJ_W), N, F, C));
    if (site) return gpt_site_run(m, HG_SITE_MLP_ACT, SITE_BACKWARD, l, fch, NULL, dact, dpre);
    op_activation_backward(m, l, dpre, fch, dact, N, F);
    return HG_OK;
}

hg_status gpt_forward_body(hg_model *m, int kv_pos) {
    const int B = m->B, T = m->T, N = B * T, C = m->d.C, L = m->d.L, QD = m->d.QD;
    hg_attention_shape as = attention_shape(m);
    hg_rope_shape rs = rope_shape(m, kv_pos > 0 ? kv_pos : 0);
    hg_kv_shape ks = {kv_pos, T, m->opt.seq_len, m->d.NH, m->d.hs, m->d.NKV};
    float *proj = gpt_act(m, S_PROJ, 0), *act = gpt_act(m, S_ACT, 0);
    const float *wpe = P(-1, R_WPE), *rope = m->cfg.position == HG_POS_ROPE ? gpt_act(m, A_ROPE, 0) : NULL;
    if (wpe) wpe = gpt_elems(m, wpe, (size_t)(kv_pos > 0 ? kv_pos : 0) * C);

    hg_dropout d0 = dropout_site(m, 0);
    op_encoder_forward(m, gpt_act(m, A_RESIDUAL, 0), gpt_act(m, A_TOKENS, 0), P(-1, R_WTE), wpe, B, T, C, &d0);
    op_layernorm_forward(m, 0, gpt_act(m, A_LN1, 0), norm_mean(m, A_LN1_MEAN, 0), gpt_act(m, A_LN1_RSTD, 0),
                         gpt_act(m, A_RESIDUAL, 0), P(0, R_LN1_W), P(0, R_LN1_B), N, C);
    for (int l = 0; l < L; l++) {
        float *ln1 = gpt_act(m, A_LN1, l), *qkv = gpt_act(m, A_QKV, l), *atty = gpt_act(m, A_ATTY, l);
        float *res = gpt_act(m, A_RESIDUAL, l), *res2 = gpt_act(m, A_RESIDUAL2, l);
        float *ln2 = gpt_act(m, A_LN2, l), *fch = gpt_act(m, A_FCH, l);
        HG_TRY(op_matmul_forward(m, OP_C_ATTN_FWD, l, qkv, ln1, P(l, R_QKV_W), P(l, R_QKV_B), N, C, m->d.QKV));
        if (m->cfg.qk_norm)
            op_qk_norm_forward(m, l, qkv, m->opt.training ? gpt_act(m, A_QK_RAW, l) : NULL,
                               gpt_act(m, A_QK_RSTD, l), P(l, R_QNORM_W), P(l, R_KNORM_W));
        if (rope) op_rope(m, OP_ROPE_FWD, l, qkv, rope, &rs);
        if (kv_pos < 0) {
            HG_TRY(op_attention_forward(m, l, atty, gpt_act(m, A_LSE, l), qkv, &as, gpt_act(m, S_ATTENTION, 0)));
        } else {
            float *kc = gpt_act(m, A_KV, l), *vc = gpt_elems(m, kc, (size_t)ks.Tc * m->d.KVD);
            HG_TRY(m->be->ops->attention_cached(m->be, atty, kc, vc, qkv, &ks, gpt_act(m, S_ATTENTION, 0)));
        }
        if (site_on(m, HG_SITE_ATTN_PROJ)) { /* the projection into the op's saved input, the op into proj */
            float *x = gpt_act(m, A_SITE_IN, l);
            HG_TRY(op_matmul_forward(m, OP_ATTN_PROJ_FWD, l, x, atty, P(l, R_PROJ_W), P(l, R_PROJ_B), N, QD, C));
            HG_TRY(gpt_site_run(m, HG_SITE_ATTN_PROJ, SITE_FORWARD, l, x, proj, NULL, NULL));
        } else {
            HG_TRY(op_matmul_forward(m, OP_ATTN_PROJ_FWD, l, proj, atty, P(l, R_PROJ_W), P(l, R_PROJ_B), N, QD, C));
        }
        hg_dropout da = dropout_site(m, 1 + 2 * l);
        op_residual_layernorm_forward(m, l, res2, ln2, norm_mean(m, A_LN2_MEAN, l), gpt_act(m, A_LN2_RSTD, l),
                                      res, proj, P(l, R_LN2_W), P(l, R_LN2_B), N, C, &da);
        HG_TRY(mlp_forward(m, l, proj, act, fch, ln2));
        /* the residual add fused with the next norm: layer l+1's ln_1, or ln_f */
        hg_dropout dm = dropout_site(m, 2 + 2 * l);
        int last = l == L - 1;
        const float *w = last ? P(-1, R_LNF_W) : P(l + 1, R_LN1_W);
        const float *b = last ? P(-1, R_LNF_B) : P(l + 1, R_LN1_B);
        op_residual_layernorm_forward(m, l, gpt_act(m, A_RESIDUAL, l + 1),
                                      last ? gpt_act(m, A_LNF, 0) : gpt_act(m, A_LN1, l + 1),
                                      last ? norm_mean(m, A_LNF_MEAN, 0) : norm_mean(m, A_LN1_MEAN, l + 1),
                                      last ? gpt_act(m, A_LNF_RSTD, 0) : gpt_act(m, A_LN1_RSTD, l + 1),
                                      res2, proj, w, b, N, C, &dm);
    }
    if (site_on(m, HG_SITE_FINAL_NORM)) { /* ln_f again, on the op's output (the fused one's is discarded) */
        float *y = gpt_act(m, A_SITE_OUT, 0);
        HG_TRY(gpt_site_run(m, HG_SITE_FINAL_NORM, SITE_FORWARD, -1, gpt_act(m, A_RESIDUAL, L), y, NULL, NULL));
        op_layernorm_forward(m, L - 1, gpt_act(m, A_LNF, 0), norm_mean(m, A_LNF_MEAN, 0), gpt_act(m, A_LNF_RSTD, 0), y,
                             P(-1, R_LNF_W), P(-1, R_LNF_B), N, C);
    }
    return HG_OK;
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
            .x = gpt_elems(m, x, (size_t)r0 * C), .wte = gpt_weight(m, head_index(m)), .softcap = m->cfg.logit_softcap,
            .targets = targets ? targets + r0 : NULL, .losses = losses ? losses + r0 : NULL,
            .logits = logits ? logits + (size_t)r0 * V : NULL, .scratch = gpt_act(m, S_LOGITS, 0),
        };
        if (backward) {
            a.dscale = m->loss_scale_n > 0 ? grad_scale / m->loss_scale_n : 0.0f;
            a.dx = gpt_elems(m, dx, (size_t)r0 * C);
            a.dwte = gpt_param(m, m->grad, head_index(m));
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

hg_status gpt_backward_body(hg_model *m) {
    const int B = m->B, T = m->T, N = B * T, C = m->d.C, L = m->d.L, QD = m->d.QD;
    hg_attention_shape as = attention_shape(m);
    hg_rope_shape rs = rope_shape(m, 0);
    const float *rope = m->cfg.position == HG_POS_ROPE ? gpt_act(m, A_ROPE, 0) : NULL;
    float *dres = gpt_act(m, S_DRES, 0), *dln = gpt_act(m, S_DLN, 0), *datty = gpt_act(m, S_DATTY, 0);
    float *dwide = gpt_act(m, S_DWIDE, 0), *reduce = gpt_act(m, S_REDUCE, 0);

    /* ln_f, fused into the last block's forward, counts to that block here too; with an op
     * before it, ln_f's gradient goes to the op's output and the op's to the residual */
    const int final = site_on(m, HG_SITE_FINAL_NORM);
    float *dnorm_in = final ? gpt_act(m, S_SITE_GRAD, 0) : dres;
    op_zero(m, OP_ZERO_DRES, L - 1, dnorm_in, hg_precision_bytes(hg_residual_precision(m->be)) * (size_t)N * C);
    op_layernorm_backward(m, L - 1, dnorm_in, G(-1, R_LNF_W), G(-1, R_LNF_B), dln,
                          gpt_act(m, final ? A_SITE_OUT : A_RESIDUAL, final ? 0 : L), P(-1, R_LNF_W),
                          norm_mean(m, A_LNF_MEAN, 0), gpt_act(m, A_LNF_RSTD, 0), N, C, reduce);
    if (final) HG_TRY(gpt_site_run(m, HG_SITE_FINAL_NORM, SITE_BACKWARD, -1, gpt_act(m, A_RESIDUAL, L), NULL, dnorm_in, dres));
    gpt_grad_ready(m, gpt_layer_first(m, L), m->params.count);
    for (int l = L - 1; l >= 0; l--) {
        float *fch = gpt_act(m, A_FCH, l), *qkv = gpt_act(m, A_QKV, l), *atty = gpt_act(m, A_ATTY, l);
        /* MLP: c_proj and the activation (recomputed), c_fc, ln_2 */
        HG_TRY(mlp_backward(m, l, dwide, branch_grad(m, l, dres, 2 + 2 * l), fch));
        HG_TRY(op_matmul_backward(m, OP_C_FC_BWD, l, dln, G(l, R_FC_W), G(l, R_FC_B), dwide, gpt_act(m, A_LN2, l),
                                  P(l, R_FC_W), N, C, m->d.FI));
        op_layernorm_backward(m, l, dres, G(l, R_LN2_W), G(l, R_LN2_B), dln, gpt_act(m, A_RESIDUAL2, l), P(l, R_LN2_W),
                              norm_mean(m, A_LN2_MEAN, l), gpt_act(m, A_LN2_RSTD, l), N, C, reduce);
        /* attention: c_proj, attention, rope, q/k norm, c_attn, ln_1 */
        const float *dattn = branch_grad(m, l, dres, 1 + 2 * l);
        if (site_on(m, HG_SITE_ATTN_PROJ)) {
            float *dx = gpt_act(m, S_SITE_GRAD, 0);
            HG_TRY(gpt_site_run(m, HG_SITE_ATTN_PROJ, SITE_BACKWARD, l, gpt_act(m, A_SITE_IN, l), NULL, dattn, dx));
            dattn = dx;
        }
        HG_TRY(op_matmul_backward(m, OP_ATTN_PROJ_BWD, l, datty, G(l, R_PROJ_W), G(l, R_PROJ_B), dattn, atty,
                                  P(l, R_PROJ_W), N, QD, C));
        HG_TRY(op_attention_backward(m, l, dwide, datty, qkv, atty, gpt_act(m, A_LSE, l), &as, gpt_act(m, S_ATTENTION, 0)));
        if (rope) op_rope(m, OP_ROPE_BWD, l, dwide, rope, &rs);
        if (m->cfg.qk_norm)
            op_qk_norm_backward(m, l, dwide, G(l, R_QNORM_W), G(l, R_KNORM_W), gpt_act(m, A_QK_RAW, l),
                                gpt_act(m, A_QK_RSTD, l), P(l, R_QNORM_W), P(l, R_KNORM_W), reduce);
        HG_TRY(op_matmul_backward(m, OP_C_ATTN_BWD, l, dln, G(l, R_QKV_W), G(l, R_QKV_B), dwide, gpt_act(m, A_LN1, l),
                                  P(l, R_QKV_W), N, C, m->d.QKV));
        op_layernorm_backward(m, l, dres, G(l, R_LN1_W), G(l, R_LN1_B), dln, gpt_act(m, A_RESIDUAL, l), P(l, R_LN1_W),
                              norm_mean(m, A_LN1_MEAN, l), gpt_act(m, A_LN1_RSTD, l), N, C, reduce);
        gpt_grad_ready(m, gpt_layer_first(m, l), gpt_layer_first(m, l + 1));
    }
    hg_dropout d0 = dropout_site(m, 0);
    op_encoder_backward(m, G(-1, R_WTE), G(-1, R_WPE), dres, gpt_act(m, A_TOKENS, 0), B, T, C, &d0);
    gpt_grad_ready(m, 0, gpt_layer_first(m, 0));
    return HG_OK;
}

/* ---- the public step API ---- */

/* Checks shapes and ids, then copies tokens and targets into the model. */
static hg_status stage_inputs(hg_model *m, const int32_t *tokens, const int32_t *targets, int B, int T) {
    if (!tokens) return hg_fail(HG_ERR_INVALID, "tokens is NULL");
    if (B <= 0 || B > m->opt.batch) return hg_fail(HG_ERR_INVALID, "B must be in [1, batch=%d], got %d", m->opt.batch, B);
    if (T <= 0 || T > m->opt.seq_len) return hg_fail(HG_ERR_INVALID, "T must be in [1, seq_len=%d], got %d", m->opt.seq_len, T);
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

/* The three parts of a step, each a region for an attached profiler. */
static hg_status forward_body(hg_model *m) {
    double t0 = prof_begin(m);
    HG_TRY(gpt_forward_body(m, -1));
    prof_region(m, PROF_FORWARD, t0);
    return HG_OK;
}

static hg_status classifier(hg_model *m, int backward, float grad_scale, float *logits) {
    double t0 = prof_begin(m);
    HG_TRY(gpt_classifier(m, backward, grad_scale, logits));
    prof_region(m, PROF_CLASSIFIER, t0);
    return HG_OK;
}

static hg_status backward_body(hg_model *m) {
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
    HG_TRY(forward_body(m));
    HG_TRY(classifier(m, 0, 0.0f, logits));
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

/* The training pass after stage_inputs: what a backend may record as one graph. */
static hg_status train_body(void *ctx) {
    hg_model *m = ctx;
    HG_TRY(forward_body(m));
    HG_TRY(classifier(m, 1, m->grad_scale, NULL));
    return backward_body(m);
}

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
    op_zero(m, OP_ZERO_GRAD, PROF_NO_LAYER, m->grad, m->params.bytes); /* a failure shows at the next sync */
    return HG_OK;
}

/* ---- generation with the KV cache ---- */

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
    HG_TRY(gpt_forward_body(m, m->kv_len));
    const int C = m->d.C;
    hg_classifier_args a = {
        .N = 1, .C = C, .V = m->d.V, .Vp = m->d.Vp,
        .x = gpt_elems(m, gpt_act(m, A_LNF, 0), (size_t)(n - 1) * C),
        .wte = gpt_weight(m, head_index(m)), .logits = logits, .scratch = gpt_act(m, S_LOGITS, 0),
        .softcap = m->cfg.logit_softcap,
    };
    HG_TRY(op_classifier_forward(m, &a));
    HG_TRY(m->be->ops->sync(m->be));
    m->kv_len += n;
    return HG_OK;
}
