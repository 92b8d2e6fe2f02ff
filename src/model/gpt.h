/* The GPT-2 model, described once: parameter and activation tables, and the
 * orchestration of forward and backward through the backend interface. */
#ifndef HG_MODEL_GPT_H
#define HG_MODEL_GPT_H

#include "backend/backend.h"
#include "core/table.h"
#include "handgrad.h"

int gpt_dff(const hg_config *c);
int gpt_padded_vocab(const hg_config *c);

/* Per-layer parameters, in table (and Hugging Face) order. */
enum gpt_layer_param {
    LP_LN1_W, LP_LN1_B, LP_QKV_W, LP_QKV_B, LP_ATTN_PROJ_W, LP_ATTN_PROJ_B,
    LP_LN2_W, LP_LN2_B, LP_FC_W, LP_FC_B, LP_FC_PROJ_W, LP_FC_PROJ_B,
    GPT_LAYER_PARAMS
};
/* Table index of global parameters: wte, wpe first; ln_f last. */
#define GPT_P_WTE 0
#define GPT_P_WPE 1
#define GPT_P_LAYER(l, k) (2 + (l) * GPT_LAYER_PARAMS + (k))
#define GPT_P_LNF_W(L) (2 + (L) * GPT_LAYER_PARAMS)
#define GPT_P_LNF_B(L) (3 + (L) * GPT_LAYER_PARAMS)

/* Activations and scratch, in table order. Stored tensors have one copy per layer in a
 * training model and one shared copy in an inference model. */
enum gpt_act {
    A_TOKENS,    /* (N) int32 */
    A_TARGETS,   /* (N) int32 */
    A_RESIDUAL,  /* (L+1, N, C) residual stream entering each layer, and after the last */
    A_LN1,       /* (L, N, C) */
    A_LN1_MEAN,  /* (L, N) */
    A_LN1_RSTD,  /* (L, N) */
    A_QKV,       /* (L, N, 3C) */
    A_ATTY,      /* (L, N, C) attention output before its projection */
    A_LSE,       /* (L, B, NH, T) attention row log-sum-exp */
    A_RESIDUAL2, /* (L, N, C) residual after the attention block */
    A_LN2,       /* (L, N, C) */
    A_LN2_MEAN,  /* (L, N) */
    A_LN2_RSTD,  /* (L, N) */
    A_FCH,       /* (L, N, F) MLP pre-activation; GELU is recomputed from it */
    A_LNF,       /* (N, C) */
    A_LNF_MEAN,  /* (N) */
    A_LNF_RSTD,  /* (N) */
    A_LOSSES,    /* (N) per-token loss */
    A_KV,        /* (L, 2, NH, T, hs) key then value cache; inference models with B = 1 only */
    S_PROJ,      /* (N, C) output of a projection before its residual add */
    S_GELU,      /* (N, F) GELU output, forward and recomputed in backward */
    S_LOGITS,    /* (chunk, Vp) classifier chunk */
    S_ATTENTION, /* attention scratch */
    S_DRES,      /* (N, C) gradient of the residual stream (backward only) */
    S_DBRANCH,   /* (N, C) gradient of a branch output after dropout (backward, dropout>0) */
    S_DLN,       /* (N, C) gradient of a LayerNorm output (backward only) */
    S_DATTY,     /* (N, C) (backward only) */
    S_DWIDE,     /* (N, max(F, 3C)) dGELU, then dQKV (backward only) */
    S_REDUCE,    /* (threads, 2C) LayerNorm backward partial sums (backward only) */
    GPT_ACTS
};

typedef enum gpt_phase { PHASE_NONE, PHASE_FORWARD } gpt_phase;

struct hg_model {
    hg_config cfg;
    hg_options opt;
    int F, Vp, hs, threads, chunk; /* threads: opt.threads resolved (0 -> all cores) */
    hg_backend *be;
    hg_table params;            /* parameter specs; grads, m, v share the layout */
    float *param, *grad, *adam_m, *adam_v; /* m, v: (shard_n) floats from shard_lo */
    size_t shard_lo, shard_n;   /* the flat range the AdamW state covers (ZeRO-1) */
    hg_grad_ready_fn *grad_ready; /* hg_set_grad_ready_hook; NULL: none */
    void *grad_ready_ctx;
    hg_table acts;              /* activation and scratch specs */
    void *act;
    float *host_losses;         /* (B*T) per-token losses, downloaded for the mean */
    hg_memory_plan plan;
    /* state of the step in progress */
    int B, T, has_targets;
    gpt_phase phase;
    int train_mode;
    uint32_t rng_step;          /* dropout masks of the last training forward */
    uint64_t dropout_seed;      /* opt.seed; a rank's own stream under data parallelism */
    int64_t adam_t;
    float loss_scale_n;         /* targets that count in the mean of the last forward */
    hg_profiler *prof;          /* attached profiler, or NULL (profile/profile.h) */
    int kv_len;                 /* positions held in the KV cache */
};

/* Builds both tables for (cfg, opt) without allocating. */
hg_status gpt_build_tables(const hg_config *cfg, const hg_options *opt, int threads,
                           hg_table *params, hg_table *acts, int *chunk);

/* Slice `shard` of `shards` of a flat buffer of P floats (P a multiple of 16): equal
 * slices of a multiple of 16 floats, the last ones shorter or empty. */
void gpt_shard(size_t P, int shards, int shard, size_t *lo, size_t *n);

/* Sets parameter i's AdamW moments from whole tensors (numel floats each, host memory):
 * the part inside this model's slice [shard_lo, shard_lo + shard_n). */
void gpt_moments_set(hg_model *m, int i, const float *mo, const float *vo);

/* Reports to the gradient-ready hook that the gradients of parameters [first, end) of
 * the table are final (end == count reaches the end of the buffer). */
static inline void gpt_grad_ready(const hg_model *m, int first, int end) {
    if (!m->grad_ready) return;
    size_t lo = m->params.specs[first].offset / sizeof(float);
    size_t hi = (end < m->params.count ? m->params.specs[end].offset : m->params.bytes) / sizeof(float);
    m->grad_ready(m->grad_ready_ctx, lo, hi - lo);
}

/* AdamW over the flat range [lo, lo+n) of the parameters, given the squared norm of the
 * gradients it was computed from; g, mom, var point at the range's first element. Each
 * gradient is multiplied by grad_mult (1/ranks for gradients summed over ranks) before
 * clipping. *norm: the pre-clip norm, sqrt(sumsq) * grad_mult. Advances adam_t. */
hg_status gpt_adamw_range(hg_model *m, const hg_adamw *a, double sumsq, float grad_mult, size_t lo, size_t n,
                          const float *g, float *mom, float *var, float *norm);

static inline float *gpt_param(const hg_model *m, float *buf, int idx) {
    return (float *)hg_table_ptr(&m->params, buf, idx, 0);
}
static inline void *gpt_act(const hg_model *m, int a, int layer) {
    return hg_table_ptr(&m->acts, m->act, a, layer);
}

/* 1 when the model holds a KV cache (created with training=0 and batch=1). */
int gpt_has_kv(const hg_options *o);

/* Forward through the layers to the final LayerNorm, for the (B, T) tokens already in
 * A_TOKENS. kv_pos < 0: the plain forward. kv_pos >= 0 (B = 1): the tokens sit at
 * positions kv_pos.. and attend through the KV cache, which they are appended to. */
hg_status gpt_forward_body(hg_model *m, int kv_pos);
/* The classifier on A_LNF; with backward, also dx into S_DLN and dwte. */
hg_status gpt_classifier(hg_model *m, int backward, float grad_scale, float *logits);
/* Backward from S_DLN (gradient at the final LayerNorm output) to the embeddings. */
hg_status gpt_backward_body(hg_model *m);

#endif
