/* The backend's ops as the step calls them: each wrapper runs the op through the
 * model's backend and, when a profiler is attached, records its kind (a row of the op
 * registry, ops/registry.h), layer, shape, work (the op's cost function, beside its
 * contract) and the activation-table buffers it reads and writes (profile/profile.h).
 * While the model is traced (model/plan.h) a wrapper records the same and runs nothing:
 * the reads and writes declared here are what the memory plan is made from, so each
 * must match its op's contract (an accumulated output is read and written). Legend as
 * in src/ops/README.md. */
#ifndef HG_MODEL_GPT_OPS_H
#define HG_MODEL_GPT_OPS_H

#include <stddef.h>

#include "core/error.h"
#include "model/gpt.h"
#include "model/plan.h"
#include "profile/profile.h"

/* Calls backend entry `entry` with the parenthesised `args`, then records the call (the
 * fields of a prof_op follow) for an attached profiler; or, while m is traced, records
 * it in the trace and calls nothing. OP_RUN_STATUS keeps the entry's status in st. */
#define OP_RUN(m, entry, args, ...)                                                        \
    do {                                                                                   \
        const prof_op op_ = {__VA_ARGS__};                                                 \
        if ((m)->trace) {                                                                  \
            gpt_trace_op((m), offsetof(hg_backend_ops, entry), &op_);                      \
            break;                                                                         \
        }                                                                                  \
        double t0_ = prof_begin(m);                                                        \
        (m)->be->ops->entry args;                                                          \
        if (PROF_ON(m)) prof_record((m), &op_, t0_);                                       \
    } while (0)
#define OP_RUN_STATUS(st, m, entry, args, ...)                                             \
    do {                                                                                   \
        const prof_op op_ = {__VA_ARGS__};                                                 \
        if ((m)->trace) {                                                                  \
            gpt_trace_op((m), offsetof(hg_backend_ops, entry), &op_);                      \
            (st) = HG_OK;                                                                  \
            break;                                                                         \
        }                                                                                  \
        double t0_ = prof_begin(m);                                                        \
        hg_clear_error();                                                                  \
        (st) = (m)->be->ops->entry args;                                                   \
        if (PROF_ON(m)) prof_record((m), &op_, t0_);                                       \
    } while (0)

/* The status of a kernel that returns one; on failure hg_last_error() names the op and
 * its block (layer < 0: none) before the kernel's own message (an override may leave none). The wrappers
 * clear the message before the call. */
static inline hg_status op_status(prof_kind kind, int layer, hg_status st) {
    if (st == HG_OK) return st;
    if (layer < 0) return hg_fail_returned(st, "%s", prof_kind_name(kind));
    return hg_fail_returned(st, "%s (block %d)", prof_kind_name(kind), layer);
}

/* The token embeddings' scale: the config's embed_scale, or 1. */
static inline float gpt_embed_scale(const hg_model *m) { return m->cfg.embed_scale > 0 ? m->cfg.embed_scale : 1.0f; }

static inline void op_encoder_forward(hg_model *m, float *out, const int32_t *tokens, const int32_t *pos,
                                      const float *wte, const float *wpe, int B, int T, int C, const hg_dropout *d) {
    OP_RUN(m, encoder_forward, (m->be, out, tokens, pos, wte, wpe, B, T, C, gpt_embed_scale(m), d),
           .kind = OP_ENCODER_FWD, .layer = -1, .dims = {B, T, C}, .cost = hg_encoder_forward_cost(B, T, C, wpe != NULL),
           .rd = {tokens}, .wr = {out});
}

static inline void op_encoder_backward(hg_model *m, float *dwte, float *dwpe, const float *dout,
                                       const int32_t *tokens, const int32_t *pos, int B, int T, int C,
                                       const hg_dropout *d) {
    OP_RUN(m, encoder_backward, (m->be, dwte, dwpe, dout, tokens, pos, B, T, C, gpt_embed_scale(m), d),
           .kind = OP_ENCODER_BWD, .layer = -1, .dims = {B, T, C}, .cost = hg_encoder_backward_cost(B, T, C, dwpe != NULL),
           .rd = {dout, tokens});
}

/* The model's norm: which one, and its epsilon. */
static inline hg_norm_spec gpt_norm_spec(const hg_model *m) {
    hg_norm_spec ns = {m->cfg.norm == HG_NORM_RMSNORM, gpt_norm_eps(&m->cfg), 0};
    return ns;
}

/* branch: inp is a branch output (a post norm's), not the residual stream. */
static inline void op_layernorm_forward(hg_model *m, int layer, float *out, float *mean, float *rstd,
                                        const float *inp, const float *w, const float *b, int N, int C, int branch) {
    hg_norm_spec ns = gpt_norm_spec(m);
    ns.branch = branch;
    OP_RUN(m, layernorm_forward, (m->be, out, mean, rstd, inp, w, b, N, C, &ns),
           .kind = ns.rms ? OP_RMSNORM_FWD : OP_LAYERNORM_FWD, .layer = layer, .dims = {N, C},
           .cost = hg_norm_forward_cost(N, C), .rd = {inp}, .wr = {out, mean, rstd});
}

static inline void op_residual_layernorm_forward(hg_model *m, int layer, float *res_out, float *out, float *mean,
                                                 float *rstd, const float *res_in, const float *delta,
                                                 const float *w, const float *b, int N, int C,
                                                 const hg_dropout *d) {
    hg_norm_spec ns = gpt_norm_spec(m);
    OP_RUN(m, residual_layernorm_forward, (m->be, res_out, out, mean, rstd, res_in, delta, w, b, N, C, d, &ns),
           .kind = ns.rms ? OP_RESIDUAL_RMS_FWD : OP_RESIDUAL_LN_FWD, .layer = layer, .dims = {N, C},
           .cost = hg_residual_norm_forward_cost(N, C), .rd = {res_in, delta}, .wr = {res_out, out, mean, rstd});
}

static inline void op_layernorm_backward(hg_model *m, int layer, float *dinp, float *dw, float *db,
                                         const float *dout, const float *inp, const float *w,
                                         const float *mean, const float *rstd, int N, int C, float *scratch,
                                         int branch) {
    hg_norm_spec ns = gpt_norm_spec(m);
    ns.branch = branch;
    OP_RUN(m, layernorm_backward, (m->be, dinp, dw, db, dout, inp, w, mean, rstd, N, C, scratch, &ns),
           .kind = ns.rms ? OP_RMSNORM_BWD : OP_LAYERNORM_BWD, .layer = layer, .dims = {N, C},
           .cost = hg_norm_backward_cost(N, C), .rd = {dinp, dout, inp, mean, rstd}, .wr = {dinp, scratch});
}

/* The q/k norm of block `layer` on qkv: forward, or with dqkv its backward in place. */
static inline hg_qk_norm_shape gpt_qk_norm_shape(const hg_model *m) {
    hg_qk_norm_shape s = {m->B * m->T, m->d.NH, m->d.NKV, m->d.hs, gpt_norm_eps(&m->cfg), m->cfg.qk_norm_whole};
    return s;
}

static inline void op_qk_norm_forward(hg_model *m, int layer, float *qkv, float *raw, float *rstd, const float *wq,
                                      const float *wk) {
    hg_qk_norm_shape s = gpt_qk_norm_shape(m);
    OP_RUN(m, qk_norm_forward, (m->be, qkv, raw, rstd, wq, wk, &s),
           .kind = OP_QK_NORM_FWD, .layer = layer, .dims = {s.N, s.NH + s.NKV, s.hs},
           .cost = hg_qk_norm_cost(&s, 0), .rd = {qkv}, .wr = {qkv, raw, rstd});
}

static inline void op_qk_norm_backward(hg_model *m, int layer, float *dqkv, float *dwq, float *dwk,
                                       const float *raw, const float *rstd, const float *wq, const float *wk,
                                       float *scratch) {
    hg_qk_norm_shape s = gpt_qk_norm_shape(m);
    OP_RUN(m, qk_norm_backward, (m->be, dqkv, dwq, dwk, raw, rstd, wq, wk, &s, scratch),
           .kind = OP_QK_NORM_BWD, .layer = layer, .dims = {s.N, s.NH + s.NKV, s.hs},
           .cost = hg_qk_norm_cost(&s, 1), .rd = {dqkv, raw, rstd}, .wr = {dqkv, scratch});
}

/* kind: OP_ROPE_FWD on qkv, or OP_ROPE_BWD on dqkv. */
static inline void op_rope(hg_model *m, prof_kind kind, int layer, float *qkv, const float *cos_sin,
                           const hg_rope_shape *s) {
#define ROPE_OP(entry) \
    OP_RUN(m, entry, (m->be, qkv, cos_sin, s), .kind = kind, .layer = layer, \
           .dims = {s->B, s->T, s->NH + s->NKV, s->hs}, .cost = hg_rope_cost(s), .rd = {qkv, cos_sin}, .wr = {qkv})
    if (kind == OP_ROPE_FWD) ROPE_OP(rope_forward);
    else ROPE_OP(rope_backward);
#undef ROPE_OP
}

/* The MLP activations other than GELU: the forward, or with recompute its recompute in
 * backward, recorded under the model's MLP kind. */
static inline void op_activation_forward(hg_model *m, int recompute, int layer, float *out, const float *pre, int N,
                                         int F) {
    hg_mlp_kind mk = m->cfg.mlp;
    prof_kind kind = mk == HG_MLP_SWIGLU   ? (recompute ? OP_SWIGLU_RECOMPUTE : OP_SWIGLU_FWD)
                     : mk == HG_MLP_GEGLU ? (recompute ? OP_GEGLU_RECOMPUTE : OP_GEGLU_FWD)
                                          : (recompute ? OP_RELU2_RECOMPUTE : OP_RELU2_FWD);
    OP_RUN(m, activation_forward, (m->be, mk, out, pre, N, F), .kind = kind, .layer = layer, .dims = {N, F},
           .cost = hg_activation_forward_cost(mk, N, F), .rd = {pre}, .wr = {out});
}

static inline void op_activation_backward(hg_model *m, int layer, float *dpre, const float *pre, const float *dout,
                                          int N, int F) {
    hg_mlp_kind mk = m->cfg.mlp;
    OP_RUN(m, activation_backward, (m->be, mk, dpre, pre, dout, N, F),
           .kind = mk == HG_MLP_SWIGLU ? OP_SWIGLU_BWD : mk == HG_MLP_GEGLU ? OP_GEGLU_BWD : OP_RELU2_BWD,
           .layer = layer, .dims = {N, F}, .cost = hg_activation_backward_cost(mk, N, F), .rd = {pre, dout},
           .wr = {dpre});
}

static inline void op_residual_add(hg_model *m, int layer, float *res_out, const float *res_in, const float *delta,
                                   size_t n, const hg_dropout *d) {
    OP_RUN(m, residual_add, (m->be, res_out, res_in, delta, n, d), .kind = OP_RESIDUAL_ADD, .layer = layer,
           .dims = {(long long)n}, .cost = hg_residual_add_cost(n), .rd = {res_in, delta}, .wr = {res_out});
}

static inline void op_dropout_backward(hg_model *m, int layer, float *dbranch, const float *dres, size_t n,
                                       const hg_dropout *d) {
    OP_RUN(m, dropout_backward, (m->be, dbranch, dres, n, d), .kind = OP_DROPOUT_BWD, .layer = layer,
           .dims = {(long long)n}, .cost = hg_dropout_backward_cost(n), .rd = {dres}, .wr = {dbranch});
}

/* kind: which linear layer and pass, e.g. OP_C_FC_FWD. */
static inline hg_status op_matmul_forward(hg_model *m, prof_kind kind, int layer, float *out, const float *inp,
                                          const float *w, const float *bias, int M, int K, int N) {
    hg_status st;
    OP_RUN_STATUS(st, m, matmul_forward, (m->be, out, inp, w, bias, M, K, N), .kind = kind, .layer = layer,
                  .dims = {M, K, N}, .cost = hg_matmul_forward_cost(M, K, N), .rd = {inp}, .wr = {out});
    return op_status(kind, layer, st);
}

static inline hg_status op_matmul_backward(hg_model *m, prof_kind kind, int layer, float *dinp, float *dw,
                                           float *dbias, const float *dout, const float *inp, const float *w,
                                           int M, int K, int N) {
    hg_status st;
    OP_RUN_STATUS(st, m, matmul_backward, (m->be, dinp, dw, dbias, dout, inp, w, M, K, N), .kind = kind,
                  .layer = layer, .dims = {M, K, N}, .cost = hg_matmul_backward_cost(M, K, N, dw != NULL), .rd = {dout, inp},
                  .wr = {dinp});
    return op_status(kind, layer, st);
}

/* The adapters of a linear layer of block `layer` (ops/lora.h): y += their product of x,
 * h kept; backward dx += their share, dA and dB accumulated. */
static inline hg_status op_lora_forward(hg_model *m, int layer, float *y, float *h, uint32_t *keep, const float *x,
                                        const hg_lora_weights *w, const hg_lora_shape *s, const hg_dropout *d,
                                        void *scratch) {
    hg_status st;
    OP_RUN_STATUS(st, m, lora_forward, (m->be, y, h, keep, x, w, s, d, scratch), .kind = OP_LORA_FWD, .layer = layer,
                  .dims = {s->N, s->K, (long long)s->r * s->n}, .cost = hg_lora_forward_cost(s), .rd = {x, y},
                  .wr = {y, h, keep, scratch});
    return op_status(OP_LORA_FWD, layer, st);
}

static inline hg_status op_lora_backward(hg_model *m, int layer, float *dx, const float *dy, const float *x,
                                         const float *h, const uint32_t *keep, const hg_lora_weights *w,
                                         const hg_lora_shape *s, const hg_dropout *d, void *scratch) {
    hg_status st;
    OP_RUN_STATUS(st, m, lora_backward, (m->be, dx, dy, x, h, keep, w, s, d, scratch), .kind = OP_LORA_BWD,
                  .layer = layer, .dims = {s->N, s->K, (long long)s->r * s->n}, .cost = hg_lora_backward_cost(s),
                  .rd = {dx, dy, x, h, keep}, .wr = {dx, scratch});
    return op_status(OP_LORA_BWD, layer, st);
}

/* kind: OP_GELU_FWD, or OP_GELU_RECOMPUTE in backward. */
static inline void op_gelu_forward(hg_model *m, prof_kind kind, int layer, float *out, const float *inp, size_t n) {
    OP_RUN(m, gelu_forward, (m->be, out, inp, n), .kind = kind, .layer = layer, .dims = {(long long)n},
           .cost = hg_gelu_forward_cost(n), .rd = {inp}, .wr = {out});
}

static inline void op_gelu_backward(hg_model *m, int layer, float *dinp, const float *inp, const float *dout,
                                    size_t n) {
    OP_RUN(m, gelu_backward, (m->be, dinp, inp, dout, n), .kind = OP_GELU_BWD, .layer = layer,
           .dims = {(long long)n}, .cost = hg_gelu_backward_cost(n), .rd = {inp, dout}, .wr = {dinp});
}

/* The MLP's c_fc and its GELU: pre (M,N) = inp @ w + bias, out = GELU(pre). One fused op
 * where the backend has it (GELU in the GEMM's epilogue), else the matmul and the GELU,
 * each recorded as itself. */
static inline hg_status op_matmul_gelu_forward(hg_model *m, int layer, float *out, float *pre, const float *inp,
                                               const float *w, const float *bias, int M, int K, int N) {
    if (!m->be->ops->matmul_gelu_forward) {
        HG_TRY(op_matmul_forward(m, OP_C_FC_FWD, layer, pre, inp, w, bias, M, K, N));
        op_gelu_forward(m, OP_GELU_FWD, layer, out, pre, (size_t)M * N);
        return HG_OK;
    }
    hg_status st;
    OP_RUN_STATUS(st, m, matmul_gelu_forward, (m->be, out, pre, inp, w, bias, M, K, N), .kind = OP_C_FC_GELU_FWD,
                  .layer = layer, .dims = {M, K, N}, .cost = hg_matmul_gelu_forward_cost(M, K, N), .rd = {inp},
                  .wr = {out, pre});
    return op_status(OP_C_FC_GELU_FWD, layer, st);
}

/* The backward of mlp.c_proj, whose input was GELU(pre), with GELU's: act (M,K) =
 * GELU(pre) recomputed; dw += act^T dout; dbias += colsums of dout; dpre = (dout w^T)
 * GELU'(pre). One fused op where the backend has it, else the GELU recompute, the
 * matmul backward and the GELU backward, each recorded as itself. */
static inline hg_status op_matmul_gelu_backward(hg_model *m, int layer, float *dpre, float *dw, float *dbias,
                                                float *act, const float *dout, const float *pre, const float *w,
                                                int M, int K, int N) {
    if (!m->be->ops->matmul_gelu_backward) {
        op_gelu_forward(m, OP_GELU_RECOMPUTE, layer, act, pre, (size_t)M * K);
        HG_TRY(op_matmul_backward(m, OP_MLP_PROJ_BWD, layer, dpre, dw, dbias, dout, act, w, M, K, N));
        op_gelu_backward(m, layer, dpre, pre, dpre, (size_t)M * K);
        return HG_OK;
    }
    hg_status st;
    OP_RUN_STATUS(st, m, matmul_gelu_backward, (m->be, dpre, dw, dbias, act, dout, pre, w, M, K, N),
                  .kind = OP_MLP_PROJ_GELU_BWD, .layer = layer, .dims = {M, K, N},
                  .cost = hg_matmul_gelu_backward_cost(M, K, N, dw != NULL), .rd = {dout, pre}, .wr = {dpre, act});
    return op_status(OP_MLP_PROJ_GELU_BWD, layer, st);
}

/* s as the host reads it for costs: packed documents' positions in host memory (the
 * kernels may get a device copy, gpt_positions). */
static inline hg_attention_shape host_shape(const hg_model *m, const hg_attention_shape *s) {
    hg_attention_shape h = *s;
    if (s->pos) h.pos = m->pos;
    return h;
}

static inline hg_status op_attention_forward(hg_model *m, int layer, float *out, float *lse, const float *qkv,
                                             const hg_attention_shape *s, void *scratch) {
    hg_status st;
    const hg_attention_shape hs = host_shape(m, s);
    OP_RUN_STATUS(st, m, attention_forward, (m->be, out, lse, qkv, s, scratch), .kind = OP_ATTENTION_FWD,
                  .layer = layer, .dims = {s->B, s->T, s->NH, s->hs}, .cost = hg_attention_forward_cost(&hs),
                  .rd = {qkv}, .wr = {out, lse, scratch});
    return op_status(OP_ATTENTION_FWD, layer, st);
}

static inline hg_status op_attention_backward(hg_model *m, int layer, float *dqkv, const float *dout,
                                              const float *qkv, const float *out, const float *lse,
                                              const hg_attention_shape *s, void *scratch) {
    hg_status st;
    const hg_attention_shape hs = host_shape(m, s);
    OP_RUN_STATUS(st, m, attention_backward, (m->be, dqkv, dout, qkv, out, lse, s, scratch),
                  .kind = OP_ATTENTION_BWD, .layer = layer, .dims = {s->B, s->T, s->NH, s->hs},
                  .cost = hg_attention_backward_cost(&hs), .rd = {dout, qkv, out, lse}, .wr = {dqkv, scratch});
    return op_status(OP_ATTENTION_BWD, layer, st);
}

/* Attention of n new rows through block `layer`'s KV cache (ops/attention.h): reads and
 * appends to the cache. */
static inline hg_status op_attention_cached(hg_model *m, int layer, float *out, float *kc, float *vc,
                                            const float *qkv, const hg_kv_shape *s, void *scratch) {
    hg_status st;
    OP_RUN_STATUS(st, m, attention_cached, (m->be, out, kc, vc, qkv, s, scratch), .kind = OP_ATTENTION_CACHED,
                  .layer = layer, .dims = {1, s->n, s->NH, s->hs}, .cost = hg_attention_cached_cost(s),
                  .rd = {qkv, kc, vc}, .wr = {out, kc, vc, scratch});
    return op_status(OP_ATTENTION_CACHED, layer, st);
}

/* One chunk: logits GEMM, loss, and in training the softmax gradient in place. */
static inline hg_status op_classifier_forward(hg_model *m, const hg_classifier_args *a) {
    hg_status st;
    OP_RUN_STATUS(st, m, classifier_forward, (m->be, a), .kind = OP_CLASSIFIER_FWD, .layer = m->cfg.n_layer,
                  .dims = {a->N, a->C, a->Vp}, .cost = hg_classifier_forward_cost(a), .rd = {a->x, a->targets},
                  .wr = {a->losses, a->scratch});
    return op_status(OP_CLASSIFIER_FWD, -1, st);
}

static inline hg_status op_classifier_backward(hg_model *m, const hg_classifier_args *a) {
    hg_status st;
    OP_RUN_STATUS(st, m, classifier_backward, (m->be, a), .kind = OP_CLASSIFIER_BWD, .layer = m->cfg.n_layer,
                  .dims = {a->N, a->C, a->Vp}, .cost = hg_classifier_backward_cost(a), .rd = {a->x, a->scratch},
                  .wr = {a->dx});
    return op_status(OP_CLASSIFIER_BWD, -1, st);
}

/* kind: OP_ZERO_GRAD, or OP_ZERO_DRES in backward. */
static inline void op_zero(hg_model *m, prof_kind kind, int layer, void *p, size_t bytes) {
    OP_RUN(m, zero, (m->be, p, bytes), .kind = kind, .layer = layer, .dims = {(long long)(bytes / sizeof(float))},
           .cost = hg_zero_cost(bytes), .wr = {p});
}

static inline void op_sumsq(hg_model *m, const void *x, hg_precision type, size_t n, double *out) {
    double t0 = prof_begin(m);
    m->be->ops->sumsq(m->be, x, type, n, out);
    PROF_OP(m, t0, .kind = OP_GRAD_NORM, .layer = PROF_NO_LAYER, .dims = {(long long)n},
            .cost = hg_sumsq_cost(n));
}

/* param: the table index of the one tensor the range lies in (for the trace), or -1. */
static inline void op_adamw(hg_model *m, int param, int layer, const hg_adamw_args *a) {
    double t0 = prof_begin(m);
    m->be->ops->adamw(m->be, a);
    double w = a->w ? (double)hg_precision_bytes(m->be->precision) : 0.0;
    PROF_OP(m, t0, .kind = OP_ADAMW, .layer = layer, .param = param, .dims = {(long long)a->n},
            .cost = hg_adamw_cost(a->n, w, (double)hg_precision_bytes(a->state)));
}

#endif
