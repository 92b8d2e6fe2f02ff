/* Forward and backward through the GPT-2 model, backend-agnostic: every op goes through
 * the backend's table (src/ops/ for the contracts), by way of the wrappers in gpt_ops.h
 * that time it for an attached profiler. Nothing here allocates. */
#include <string.h>

#include "core/error.h"
#include "model/gpt.h"
#include "model/gpt_ops.h"

#define P(l, k) gpt_param(m, m->param, GPT_P_LAYER(l, k))
#define G(l, k) gpt_param(m, m->grad, GPT_P_LAYER(l, k))

static hg_dropout dropout_site(const hg_model *m, uint32_t site) {
    hg_dropout d = {m->train_mode ? m->cfg.dropout : 0.0f, m->dropout_seed, m->rng_step, site};
    return d;
}

static hg_attention_shape attention_shape(const hg_model *m) {
    hg_attention_shape s = {m->B, m->T, m->cfg.n_head, m->hs, 1};
    return s;
}

hg_status gpt_forward_body(hg_model *m, int kv_pos) {
    const int B = m->B, T = m->T, N = B * T, C = m->cfg.d_model, F = m->F, L = m->cfg.n_layer;
    hg_attention_shape as = attention_shape(m);
    hg_kv_shape ks = {kv_pos, T, m->opt.seq_len, m->cfg.n_head, m->hs};
    float *proj = gpt_act(m, S_PROJ, 0), *gelu = gpt_act(m, S_GELU, 0);
    const float *wpe = gpt_param(m, m->param, GPT_P_WPE) + (size_t)(kv_pos > 0 ? kv_pos : 0) * C;

    hg_dropout d0 = dropout_site(m, 0);
    op_encoder_forward(m, gpt_act(m, A_RESIDUAL, 0), gpt_act(m, A_TOKENS, 0),
                       gpt_param(m, m->param, GPT_P_WTE), wpe, B, T, C, &d0);
    op_layernorm_forward(m, 0, gpt_act(m, A_LN1, 0), gpt_act(m, A_LN1_MEAN, 0), gpt_act(m, A_LN1_RSTD, 0),
                         gpt_act(m, A_RESIDUAL, 0), P(0, LP_LN1_W), P(0, LP_LN1_B), N, C);
    for (int l = 0; l < L; l++) {
        float *ln1 = gpt_act(m, A_LN1, l), *qkv = gpt_act(m, A_QKV, l), *atty = gpt_act(m, A_ATTY, l);
        float *res = gpt_act(m, A_RESIDUAL, l), *res2 = gpt_act(m, A_RESIDUAL2, l);
        float *ln2 = gpt_act(m, A_LN2, l), *fch = gpt_act(m, A_FCH, l);
        HG_TRY(op_matmul_forward(m, OP_C_ATTN_FWD, l, qkv, ln1, P(l, LP_QKV_W), P(l, LP_QKV_B), N, C, 3 * C));
        if (kv_pos < 0) {
            HG_TRY(op_attention_forward(m, l, atty, gpt_act(m, A_LSE, l), qkv, &as, gpt_act(m, S_ATTENTION, 0)));
        } else {
            float *kc = gpt_act(m, A_KV, l), *vc = kc + (size_t)ks.Tc * C;
            HG_TRY(m->be->ops->attention_cached(m->be, atty, kc, vc, qkv, &ks, gpt_act(m, S_ATTENTION, 0)));
        }
        HG_TRY(op_matmul_forward(m, OP_ATTN_PROJ_FWD, l, proj, atty, P(l, LP_ATTN_PROJ_W), P(l, LP_ATTN_PROJ_B), N, C, C));
        hg_dropout da = dropout_site(m, 1 + 2 * l);
        op_residual_layernorm_forward(m, l, res2, ln2, gpt_act(m, A_LN2_MEAN, l), gpt_act(m, A_LN2_RSTD, l),
                                      res, proj, P(l, LP_LN2_W), P(l, LP_LN2_B), N, C, &da);
        HG_TRY(op_matmul_forward(m, OP_C_FC_FWD, l, fch, ln2, P(l, LP_FC_W), P(l, LP_FC_B), N, C, F));
        op_gelu_forward(m, OP_GELU_FWD, l, gelu, fch, (size_t)N * F);
        HG_TRY(op_matmul_forward(m, OP_MLP_PROJ_FWD, l, proj, gelu, P(l, LP_FC_PROJ_W), P(l, LP_FC_PROJ_B), N, F, C));
        /* the residual add fused with the next LayerNorm: layer l+1's ln_1, or ln_f */
        hg_dropout dm = dropout_site(m, 2 + 2 * l);
        int last = l == L - 1;
        const float *w = last ? gpt_param(m, m->param, GPT_P_LNF_W(L)) : P(l + 1, LP_LN1_W);
        const float *b = last ? gpt_param(m, m->param, GPT_P_LNF_B(L)) : P(l + 1, LP_LN1_B);
        op_residual_layernorm_forward(m, l, gpt_act(m, A_RESIDUAL, l + 1),
                                      last ? gpt_act(m, A_LNF, 0) : gpt_act(m, A_LN1, l + 1),
                                      last ? gpt_act(m, A_LNF_MEAN, 0) : gpt_act(m, A_LN1_MEAN, l + 1),
                                      last ? gpt_act(m, A_LNF_RSTD, 0) : gpt_act(m, A_LN1_RSTD, l + 1),
                                      res2, proj, w, b, N, C, &dm);
    }
    return HG_OK;
}

/* Chunk by chunk (S_LOGITS holds one): forward, then in training its backward. */
hg_status gpt_classifier(hg_model *m, int backward, float grad_scale, float *logits) {
    const int N = m->B * m->T, C = m->cfg.d_model, V = m->cfg.vocab_size;
    const float *x = gpt_act(m, A_LNF, 0);
    int32_t *targets = m->has_targets ? gpt_act(m, A_TARGETS, 0) : NULL;
    float *losses = m->has_targets ? gpt_act(m, A_LOSSES, 0) : NULL, *dx = gpt_act(m, S_DLN, 0);
    for (int r0 = 0; r0 < N; r0 += m->chunk) {
        hg_classifier_args a = {
            .N = N - r0 < m->chunk ? N - r0 : m->chunk, .C = C, .V = V, .Vp = m->Vp,
            .x = x + (size_t)r0 * C, .wte = gpt_param(m, m->param, GPT_P_WTE),
            .targets = targets ? targets + r0 : NULL, .losses = losses ? losses + r0 : NULL,
            .logits = logits ? logits + (size_t)r0 * V : NULL, .scratch = gpt_act(m, S_LOGITS, 0),
        };
        if (backward) {
            a.dscale = m->loss_scale_n > 0 ? grad_scale / m->loss_scale_n : 0.0f;
            a.dx = dx + (size_t)r0 * C;
            a.dwte = gpt_param(m, m->grad, GPT_P_WTE);
        }
        HG_TRY(op_classifier_forward(m, &a));
        if (backward) HG_TRY(op_classifier_backward(m, &a));
    }
    return HG_OK;
}

/* The gradient reaching a dropped-out branch: dres itself when dropout is off. */
static const float *branch_grad(hg_model *m, int layer, const float *dres, uint32_t site) {
    hg_dropout d = dropout_site(m, site);
    if (!hg_dropout_on(&d)) return dres;
    float *out = gpt_act(m, S_DBRANCH, 0);
    op_dropout_backward(m, layer, out, dres, (size_t)m->B * m->T * m->cfg.d_model, &d);
    return out;
}

hg_status gpt_backward_body(hg_model *m) {
    const int B = m->B, T = m->T, N = B * T, C = m->cfg.d_model, F = m->F, L = m->cfg.n_layer;
    hg_attention_shape as = attention_shape(m);
    float *dres = gpt_act(m, S_DRES, 0), *dln = gpt_act(m, S_DLN, 0), *datty = gpt_act(m, S_DATTY, 0);
    float *dwide = gpt_act(m, S_DWIDE, 0), *gelu = gpt_act(m, S_GELU, 0), *reduce = gpt_act(m, S_REDUCE, 0);

    /* ln_f, fused into the last block's forward, counts to that block here too */
    op_zero(m, OP_ZERO_DRES, L - 1, dres, sizeof(float) * (size_t)N * C);
    op_layernorm_backward(m, L - 1, dres, gpt_param(m, m->grad, GPT_P_LNF_W(L)), gpt_param(m, m->grad, GPT_P_LNF_B(L)),
                          dln, gpt_act(m, A_RESIDUAL, L), gpt_param(m, m->param, GPT_P_LNF_W(L)),
                          gpt_act(m, A_LNF_MEAN, 0), gpt_act(m, A_LNF_RSTD, 0), N, C, reduce);
    gpt_grad_ready(m, GPT_P_LNF_W(L), m->params.count);
    for (int l = L - 1; l >= 0; l--) {
        float *fch = gpt_act(m, A_FCH, l), *qkv = gpt_act(m, A_QKV, l), *atty = gpt_act(m, A_ATTY, l);
        /* MLP: c_proj, GELU (recomputed), c_fc, ln_2 */
        const float *dmlp = branch_grad(m, l, dres, 2 + 2 * l);
        op_gelu_forward(m, OP_GELU_RECOMPUTE, l, gelu, fch, (size_t)N * F);
        HG_TRY(op_matmul_backward(m, OP_MLP_PROJ_BWD, l, dwide, G(l, LP_FC_PROJ_W), G(l, LP_FC_PROJ_B), dmlp, gelu, P(l, LP_FC_PROJ_W), N, F, C));
        op_gelu_backward(m, l, dwide, fch, dwide, (size_t)N * F);
        HG_TRY(op_matmul_backward(m, OP_C_FC_BWD, l, dln, G(l, LP_FC_W), G(l, LP_FC_B), dwide, gpt_act(m, A_LN2, l), P(l, LP_FC_W), N, C, F));
        op_layernorm_backward(m, l, dres, G(l, LP_LN2_W), G(l, LP_LN2_B), dln, gpt_act(m, A_RESIDUAL2, l), P(l, LP_LN2_W),
                              gpt_act(m, A_LN2_MEAN, l), gpt_act(m, A_LN2_RSTD, l), N, C, reduce);
        /* attention: c_proj, attention, c_attn, ln_1 */
        const float *dattn = branch_grad(m, l, dres, 1 + 2 * l);
        HG_TRY(op_matmul_backward(m, OP_ATTN_PROJ_BWD, l, datty, G(l, LP_ATTN_PROJ_W), G(l, LP_ATTN_PROJ_B), dattn, atty, P(l, LP_ATTN_PROJ_W), N, C, C));
        HG_TRY(op_attention_backward(m, l, dwide, datty, qkv, atty, gpt_act(m, A_LSE, l), &as, gpt_act(m, S_ATTENTION, 0)));
        HG_TRY(op_matmul_backward(m, OP_C_ATTN_BWD, l, dln, G(l, LP_QKV_W), G(l, LP_QKV_B), dwide, gpt_act(m, A_LN1, l), P(l, LP_QKV_W), N, C, 3 * C));
        op_layernorm_backward(m, l, dres, G(l, LP_LN1_W), G(l, LP_LN1_B), dln, gpt_act(m, A_RESIDUAL, l), P(l, LP_LN1_W),
                              gpt_act(m, A_LN1_MEAN, l), gpt_act(m, A_LN1_RSTD, l), N, C, reduce);
        gpt_grad_ready(m, GPT_P_LAYER(l, 0), GPT_P_LAYER(l + 1, 0));
    }
    hg_dropout d0 = dropout_site(m, 0);
    op_encoder_backward(m, gpt_param(m, m->grad, GPT_P_WTE), gpt_param(m, m->grad, GPT_P_WPE), dres,
                        gpt_act(m, A_TOKENS, 0), B, T, C, &d0);
    gpt_grad_ready(m, GPT_P_WTE, GPT_P_LAYER(0, 0));
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

/* Mean loss over the targets that count (0 when every target is ignored). */
static float mean_loss(hg_model *m) {
    float *losses = m->host_losses;
    m->be->ops->download(m->be, losses, gpt_act(m, A_LOSSES, 0), sizeof(float) * (size_t)m->B * m->T);
    double sum = 0.0;
    for (int i = 0; i < m->B * m->T; i++) sum += losses[i];
    return m->loss_scale_n > 0 ? (float)(sum / m->loss_scale_n) : 0.0f;
}

hg_status hg_forward(hg_model *m, const int32_t *tokens, const int32_t *targets, int B, int T,
                     float *loss, float *logits) {
    if (!m) return hg_fail(HG_ERR_INVALID, "model is NULL");
    HG_TRY(stage_inputs(m, tokens, targets, B, T));
    m->phase = PHASE_NONE;
    HG_TRY(forward_body(m));
    HG_TRY(classifier(m, 0, 0.0f, logits));
    m->phase = PHASE_FORWARD;
    if (loss) *loss = targets ? mean_loss(m) : 0.0f;
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
    return backward_body(m);
}

hg_status hg_forward_backward(hg_model *m, const int32_t *tokens, const int32_t *targets, int B, int T,
                              float grad_scale, float *loss) {
    HG_TRY(check_trainable(m));
    if (!targets) return hg_fail(HG_ERR_INVALID, "targets is NULL: training needs targets");
    if (!(grad_scale == grad_scale)) return hg_fail(HG_ERR_INVALID, "grad_scale is NaN");
    HG_TRY(stage_inputs(m, tokens, targets, B, T));
    m->phase = PHASE_NONE;
    HG_TRY(forward_body(m));
    HG_TRY(classifier(m, 1, grad_scale, NULL));
    HG_TRY(backward_body(m));
    if (loss) *loss = mean_loss(m);
    return HG_OK;
}

hg_status hg_zero_grad(hg_model *m) {
    HG_TRY(check_trainable(m));
    op_zero(m, OP_ZERO_GRAD, PROF_NO_LAYER, m->grad, m->params.bytes);
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

hg_status hg_kv_forward(hg_model *m, const int32_t *tokens, int n, float *logits) {
    HG_TRY(check_kv(m));
    if (!logits) return hg_fail(HG_ERR_INVALID, "logits is NULL");
    if (n <= 0 || n > m->opt.seq_len - m->kv_len)
        return hg_fail(HG_ERR_INVALID, "n = %d new tokens do not fit the KV cache (%d of seq_len=%d used)", n,
                       m->kv_len, m->opt.seq_len);
    HG_TRY(stage_inputs(m, tokens, NULL, 1, n));
    m->phase = PHASE_NONE;
    HG_TRY(gpt_forward_body(m, m->kv_len));
    const int C = m->cfg.d_model;
    hg_classifier_args a = {
        .N = 1, .C = C, .V = m->cfg.vocab_size, .Vp = m->Vp,
        .x = (const float *)gpt_act(m, A_LNF, 0) + (size_t)(n - 1) * C,
        .wte = gpt_param(m, m->param, GPT_P_WTE), .logits = logits, .scratch = gpt_act(m, S_LOGITS, 0),
    };
    HG_TRY(op_classifier_forward(m, &a));
    m->kv_len += n;
    return HG_OK;
}
