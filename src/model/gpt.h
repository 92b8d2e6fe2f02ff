/* The decoder (GPT-2, the Llama family and the CS336 model as switches of hg_config),
 * described once: parameter and activation tables, and the orchestration of forward and
 * backward through the backend interface. */
#ifndef HG_MODEL_GPT_H
#define HG_MODEL_GPT_H

#include "backend/backend.h"
#include "core/table.h"
#include "handgrad.h"
#include "handgrad_ext.h"

/* Sizes derived from a config: C d_model, NH query heads, NKV key/value heads, hs head
 * size, QD = NH*hs and KVD = NKV*hs the query and key (or value) widths, QKV = QD + 2*KVD
 * the fused projection's width, F the MLP width, FI the MLP's first linear's width (2F for
 * the gated MLPs: gate | up), V the vocabulary and Vp it padded to a multiple of 64, rot
 * the rotated dimensions of a head (hs, or the config's rotary_dim). */
typedef struct gpt_dims {
    int C, NH, NKV, hs, QD, KVD, QKV, F, FI, V, Vp, L, rot;
} gpt_dims;
gpt_dims gpt_dims_of(const hg_config *c);
float gpt_norm_eps(const hg_config *c);
float gpt_rope_theta(const hg_config *c);
/* How config field `name` is written in JSON: 'n' a number, 'b' a boolean, 's' a string
 * (the enumerations and op names: an op may be named "5e5"); 0 when there is no such field. */
char gpt_config_field_json(const char *name);
/* 1 when a and b describe the same parameters and computation (every config field but
 * dropout); else 0 with the first difference in why ("n_layer 2 against 3", a's value first). */
int gpt_same_architecture(const hg_config *a, const hg_config *b, char *why, size_t size);
static inline int gpt_has_norm_weight(const hg_config *c) { return !(c->omit & HG_OMIT_NORM_WEIGHT); }
static inline int gpt_has_norm_bias(const hg_config *c) {
    return c->norm == HG_NORM_LAYERNORM && !(c->omit & HG_OMIT_NORM_BIAS);
}

/* Which norms a block layout has (hg_block_kind): ln_1 before the attention (the
 * parallel block's MLP reads it too), ln_2 before the MLP, and the post norms on the two
 * branch outputs. */
static inline int gpt_has_ln1(const hg_config *c) { return c->block != HG_BLOCK_POSTNORM; }
static inline int gpt_has_ln2(const hg_config *c) { return c->block == HG_BLOCK_PRENORM || c->block == HG_BLOCK_SANDWICH; }
static inline int gpt_has_post_norm(const hg_config *c) {
    return c->block == HG_BLOCK_POSTNORM || c->block == HG_BLOCK_SANDWICH;
}

/* What a parameter is to the model: its role, with its layer in the tensor spec. The
 * parameter table holds, in this order (and Hugging Face GPT-2's names): wte, wpe; per
 * block ln_1, attn.c_attn, attn.q_norm, attn.k_norm, attn.c_proj, attn.post_norm, ln_2,
 * mlp.c_fc, mlp.c_proj, mlp.post_norm; ln_f; lm_head, its bias. A tensor the config omits (or its
 * block layout lacks) is not in the table. Linear weights are input-major (in, out).
 * A site op's parameters (R_SITE_*, all of them under one role) follow attn.c_proj,
 * mlp.c_fc, or precede ln_f. */
typedef enum gpt_role {
    R_WTE, R_WPE, R_SITE_FINAL, R_LNF_W, R_LNF_B, R_LM_HEAD, R_LM_HEAD_B, /* model-wide */
    R_LN1_W, R_LN1_B, R_QKV_W, R_QKV_B, R_QNORM_W, R_KNORM_W, R_PROJ_W, R_PROJ_B, R_SITE_ATTN,
    R_POST1_W, R_POST1_B, R_LN2_W, R_LN2_B, R_FC_W, R_FC_B, R_SITE_MLP, R_FCPROJ_W, R_FCPROJ_B,
    R_POST2_W, R_POST2_B,
    /* a linear group's LoRA adapters (hg_lora): A then B of each adapted module, in module
     * order, after the group's weight and bias */
    R_LORA_QKV, R_LORA_ATTN_OUT, R_LORA_MLP_IN, R_LORA_MLP_OUT, /* per block */
    GPT_ROLES
} gpt_role;
#define GPT_FIRST_LAYER_ROLE R_LN1_W

/* The role of site s's op parameters. */
static inline gpt_role gpt_site_role(hg_site s) {
    return s == HG_SITE_ATTN_PROJ ? R_SITE_ATTN : s == HG_SITE_MLP_ACT ? R_SITE_MLP : R_SITE_FINAL;
}

/* A LoRA group of a model (ops/lora.h, hg_lora): the layer's input and output widths,
 * and its adapted modules, each's index in the group's split and its output columns. */
typedef struct gpt_lora_group {
    int K, OUT, n;
    int module[HG_LORA_MAX_MODULES], c0[HG_LORA_MAX_MODULES], cols[HG_LORA_MAX_MODULES];
} gpt_lora_group;
gpt_lora_group gpt_lora_group_of(const hg_config *c, const hg_lora *lora, hg_lora_group g);
/* The group's role, and the weight role of its linear layer. */
static inline gpt_role gpt_lora_role(hg_lora_group g) { return (gpt_role)(R_LORA_QKV + g); }
/* Checks lora (r, alpha, dropout, splits and targets against cfg's layers), naming the
 * field that is wrong. */
hg_status gpt_lora_check(const hg_config *cfg, const hg_lora *lora);

/* Where each role sits in a parameter table: model-wide roles at their index, block roles
 * at layer0 + layer * per_layer + at[role]; -1 where the config omits it. A role with
 * several tensors (a site op's) maps to its first. */
typedef struct gpt_param_map {
    int at[GPT_ROLES];
    int layer0, per_layer;
} gpt_param_map;

/* Activations and scratch, in table order. The step addresses a per-layer tensor by its
 * layer, and the plan (model/plan.h) decides from the step's trace how many copies it
 * gets (a copy per layer where its values are kept for the backward, fewer where they
 * are not) and gives a tensor no op touches no bytes. Activations are in the backend's
 * compute type (backend.h); tokens, targets, mean, rstd, lse, losses and the rotary
 * table are int32 or fp32 on every backend. */
enum gpt_act {
    A_TOKENS,    /* (N) int32 */
    A_TARGETS,   /* (N) int32 */
    A_RESIDUAL,  /* (L+1, N, C) residual stream entering each layer, and after the last */
    A_LN1,       /* (L, N, C) */
    A_LN1_MEAN,  /* (L, N) LayerNorm only */
    A_LN1_RSTD,  /* (L, N) */
    A_QKV,       /* (L, N, QKV) q | k | v, after the q/k norm and the rotary embedding */
    A_QK_RAW,    /* (L, N, QD+KVD) q | k before the q/k norm (qk_norm, training only) */
    A_QK_RSTD,   /* (L, N, NH+NKV) the q/k norm's rstd per head, or (L, N, 2) with
                    qk_norm_whole (qk_norm only) */
    A_ATTY,      /* (L, N, QD) attention output before its projection */
    A_LSE,       /* (L, B, NH, T) attention row log-sum-exp */
    A_RESIDUAL2, /* (L, N, C) residual after the attention block */
    A_LN2,       /* (L, N, C) */
    A_LN2_MEAN,  /* (L, N) LayerNorm only */
    A_LN2_RSTD,  /* (L, N) */
    A_FCH,       /* (L, N, FI) MLP pre-activation; the activation is recomputed from it */
    A_POST1,     /* (L, N, C) the attention branch's output, the input of attn.post_norm */
    A_POST1_MEAN, /* (L, N) LayerNorm only */
    A_POST1_RSTD, /* (L, N) */
    A_POST2,     /* (L, N, C) the MLP branch's output, the input of mlp.post_norm */
    A_POST2_MEAN, /* (L, N) LayerNorm only */
    A_POST2_RSTD, /* (L, N); the post norms' tensors only in postnorm and sandwich blocks */
    A_LNF,       /* (N, C) */
    A_LNF_MEAN,  /* (N) LayerNorm only */
    A_LNF_RSTD,  /* (N) */
    A_LOSSES,    /* (N) per-token loss */
    A_KV,        /* (L, 2, NKV, T, hs) key then value cache; inference models with B = 1 only */
    A_ROPE,      /* (Tmax, hs) fp32: cos then sin of each position's hs/2 angles (rotary only) */
    S_PROJ,      /* (N, C) output of a projection before its residual add */
    S_POST,      /* (N, C) a post norm's output, added to the residual (post norms only) */
    S_ACT,       /* (N, F) MLP activation output, forward and recomputed in backward */
    S_LOGITS,    /* (chunk, Vp) classifier chunk */
    S_ATTENTION, /* attention scratch */
    S_DRES,      /* (N, C) gradient of the residual stream (backward only) */
    S_DBRANCH,   /* (N, C) gradient of a branch output after dropout (backward, dropout>0) */
    S_DLN,       /* (N, C) gradient of a norm output (backward only) */
    S_DATTY,     /* (N, QD) (backward only) */
    S_DWIDE,     /* (N, max(FI, QKV)) dpre of the MLP, then dQKV (backward only) */
    S_DACT,      /* (N, F) gradient of the MLP activation (backward, MLPs other than GELU) */
    S_DPOST,     /* (N, C) gradient at a post norm's input (backward, post norms only) */
    S_REDUCE,    /* norm backward partial sums, layernorm_scratch_bytes (backward only) */
    A_LORA_H,    /* HG_LORA_GROUPS tensors, one per linear group (hg_lora_group): (L, N, r n)
                    the adapters' down-projection h (ops/lora.h), kept for backward */
    A_LORA_KEEP = A_LORA_H + HG_LORA_GROUPS, /* HG_LORA_GROUPS tensors: (L, hg_lora_keep_bytes)
                    the adapters' dropout mask as bits, kept for backward (dropout > 0) */
    S_LORA = A_LORA_KEEP + HG_LORA_GROUPS, /* the adapters' scratch (hg_lora_scratch_bytes) */
    /* site ops (gpt_sites); sizes 0 for a site without one */
    A_SITE_IN,   /* (L, N, C) attn.c_proj's output: the input of the op after it */
    A_SITE_OUT,  /* (N, C) the output of the op before the final norm: the norm's input */
    S_SITE_GRAD, /* (N, C) backward: the gradient at the attention op's input, or at the
                    final op's output */
    S_SITE_SCRATCH, /* HG_SITES buffers: each op's scratch_bytes */
    A_SITE_SAVED = S_SITE_SCRATCH + HG_SITES, /* HG_SITES * HG_OP_MAX_TENSORS tensors, site
                    major: each op's saved tensors, a copy per block in training (floats) */
    GPT_ACTS = A_SITE_SAVED + HG_SITES * HG_OP_MAX_TENSORS
};

/* A site op as the registry and a model hold it: the definition with its strings copied
 * (op.name and op.param_name point at name and param_name; copy with gpt_site_def_copy). */
typedef struct gpt_site_def {
    hg_site_op op;
    char name[HG_OP_NAME_MAX];
    char param_name[HG_OP_MAX_TENSORS][24];
} gpt_site_def;
void gpt_site_def_copy(gpt_site_def *dst, const gpt_site_def *src);
/* Checks op's fields (naming the first bad one) and copies it into d; its sizes are
 * probed on a small shape. */
hg_status gpt_site_def_from(const hg_site_op *op, gpt_site_def *d);
/* d's sizes for shape s into z (zeroed first); refused, naming the entry, when one is
 * negative or too large, or a declared parameter or saved tensor is empty. */
hg_status gpt_site_sizes(const gpt_site_def *d, const hg_site_shape *s, hg_site_sizes *z);

/* The ops a config places, resolved for a model's shape: on[s] when site s has one. */
typedef struct gpt_sites {
    int on[HG_SITES];
    gpt_site_def def[HG_SITES];
    hg_site_shape shape[HG_SITES];
    hg_site_sizes z[HG_SITES];
} gpt_sites;

/* A model with its parameter table alone (no backend, no buffers: its addresses are
 * placeholders, never to be read), for naming tensors before a model is built (with
 * lora's adapters when lora is given). Freed with gpt_names_free. */
hg_status gpt_names_model(const hg_config *cfg, const hg_lora *lora, hg_model **out);
void gpt_names_free(hg_model *m);

/* 1 when s is a valid op name in a buffer of cap bytes (NUL-terminated within it). */
int gpt_op_name_ok(const char *s, size_t cap);
/* Looks up the ops cfg names in the registry and sizes them for opt's shape; refuses an
 * unregistered op, one registered for another site, and a device other than the CPU. */
hg_status gpt_sites_resolve(const hg_config *cfg, const hg_options *opt, int threads, gpt_sites *out);
/* The ops cfg names that are registered for their sites, sized for one row (enough for
 * their parameters; an op not registered is left off, as is one whose sizes fail). */
void gpt_sites_registered(const hg_config *cfg, gpt_sites *out);
/* Runs the model hooks (hg_add_model_hook, src/ext/override.c) on a model just built. */
hg_status gpt_run_model_hooks(hg_model *m);

typedef enum gpt_phase { PHASE_NONE, PHASE_FORWARD } gpt_phase;
struct gpt_trace;

struct hg_model {
    hg_config cfg;
    hg_options opt;
    gpt_dims d;
    gpt_param_map pm;
    int threads, chunk;         /* threads: opt.threads resolved (0 -> all cores) */
    hg_backend *be;
    hg_backend_ops own_ops;     /* be->ops once an hg_override_* has patched a copy */
    hg_table params;            /* parameter specs; grads, m, v share the layout */
    float *param;
    void *grad;                 /* the trained parameters' gradients, of opt.grad_precision's type */
    void *adam_m, *adam_v;      /* (shard_n) elements from shard_lo, of opt.optim_state's type */
    float *grad_win;            /* with bf16 gradients: the fp32 windows the ops write them
                                   into (gpt_grad), else NULL */
    int64_t *win_off;           /* (params.count) each trained tensor's place in grad_win */
    size_t win_floats;          /* grad_win's size */
    size_t train_bytes;         /* the trainable parameters: the first bytes of the layout,
                                   all the gradient buffer holds (frozen ones follow) */
    size_t shard_lo, shard_n;   /* the flat range of them the AdamW state covers (ZeRO-1) */
    hg_grad_ready_fn *grad_ready; /* hg_set_grad_ready_hook; NULL: none */
    void *grad_ready_ctx;
    hg_table weights;           /* the same specs in the compute type: the layout of weight */
    void *weight;               /* the weights the ops read: param itself in fp32, else a
                                   bf16 copy that the optimizer refreshes */
    hg_table acts;              /* activation and scratch specs */
    void *act;
    float *host_losses;         /* (B*T) per-token losses, downloaded for the mean */
    hg_memory_plan plan;
    gpt_sites sites;            /* the ops at the decoder's sites */
    /* state of the step in progress */
    int B, T, has_targets;
    gpt_phase phase;
    int train_mode;
    uint32_t rng_step;          /* dropout masks of the last training forward */
    uint64_t dropout_seed;      /* opt.seed; a rank's own stream under data parallelism */
    int64_t adam_t;
    float loss_scale_n;         /* targets that count in the mean of the last forward */
    float grad_scale;           /* hg_forward_backward's, for the recorded training pass */
    hg_profiler *prof;          /* attached profiler, or NULL (profile/profile.h) */
    int kv_len;                 /* positions held in the KV cache */
    int32_t *pos;               /* hg_set_positions: (pos_B, pos_T) of (opt.batch,
                                   opt.seq_len), host memory; pos_B = 0: none set */
    int32_t *pos_dev;           /* their copy in the backend's memory where that is not
                                   the host's (CUDA), or NULL */
    int pos_B, pos_T;
    int recomputing;            /* 1 while the backward runs forward ops again (opt.recompute) */
    struct gpt_trace *trace;    /* the plan's recording: ops are recorded, not run (model/plan.h) */
    struct gpt_trace *steps;    /* the recording the plan was derived from (hg_step_op_at) */
    int hf_arch;                /* the Hugging Face class it was loaded as (io/hf.h's hf_arch), or -1 */
};

/* HG_OK when the backend table ops has every kernel the step of (cfg, opt) calls (in
 * opt's precision; model/plan.h), else HG_ERR_UNSUPPORTED naming the config field or
 * option that brings in the first missing one. */
hg_status gpt_check_ops(const hg_config *cfg, const hg_options *opt, const hg_backend_ops *ops);
/* Builds the tables for (cfg, opt) without allocating, with the site ops in sites: the
 * parameters with the frozen ones laid out last (*train_bytes: the bytes before them),
 * the activations as the step's trace plans them, after the backend's checks
 * (gpt_check_ops, then its own limits). trace_out (NULL: not kept) receives the trace
 * (gpt_trace_free). */
hg_status gpt_build_tables(const hg_config *cfg, const hg_options *opt, int threads, hg_table *params,
                           hg_table *weights, hg_table *acts, int *chunk, gpt_sites *sites, size_t *train_bytes,
                           struct gpt_trace *trace_out);
/* The role map of a parameter table built by gpt_build_tables. */
gpt_param_map gpt_param_map_of(const hg_table *params);

/* The positions of the step's tokens (hg_set_positions), or NULL: none set, or a step
 * through the KV cache (kv_pos >= 0), whose tokens sit at kv_pos.. */
static inline const int32_t *gpt_positions(const hg_model *m, int kv_pos) {
    return kv_pos < 0 && m->pos_B ? (m->pos_dev ? m->pos_dev : m->pos) : NULL;
}

/* Table index of parameter `role` of block `layer` (layer ignored for model-wide roles),
 * or -1 when the config omits it. */
static inline int gpt_pi(const hg_model *m, int layer, gpt_role role) {
    int at = m->pm.at[role];
    if (at < 0 || role < GPT_FIRST_LAYER_ROLE) return at;
    return m->pm.layer0 + layer * m->pm.per_layer + at;
}
/* First table index of block `layer` (layer == L: the first after the blocks). */
static inline int gpt_layer_first(const hg_model *m, int layer) { return m->pm.layer0 + layer * m->pm.per_layer; }

/* Slice `shard` of `shards` of a flat buffer of P floats (P a multiple of 16): equal
 * slices of a multiple of 16 floats, the last ones shorter or empty. */
void gpt_shard(size_t P, int shards, int shard, size_t *lo, size_t *n);

/* Bytes of an AdamW moment element: 2 under optim_state BF16, else 4. */
static inline size_t gpt_state_bytes(const hg_model *m) { return m->opt.optim_state == HG_PRECISION_BF16 ? 2 : 4; }
/* Flat element i of the parameter layout (inside [shard_lo, shard_lo + shard_n]) in
 * moment buffer buf (adam_m, adam_v, or a host copy of one). */
static inline void *gpt_moment_at(const hg_model *m, const void *buf, size_t i) {
    return (char *)buf + (i - m->shard_lo) * gpt_state_bytes(m);
}
/* Copies the elements [lo, lo+n) (flat, inside the slice) of moment buffer buf to fp32
 * host memory (write 0), or from it (write 1), widening or rounding to nearest even. */
hg_status gpt_moments_io(const hg_model *m, void *buf, size_t lo, size_t n, float *host, int write);
/* Sets parameter i's AdamW moments from whole tensors (numel floats each, host memory):
 * the part inside this model's slice [shard_lo, shard_lo + shard_n). */
hg_status gpt_moments_set(hg_model *m, int i, const float *mo, const float *vo);

/* The gradients of parameters [first, end) of the table are final for this backward:
 * with bf16 gradients their windows are added into the kept ones and zeroed; then the
 * gradient-ready hook is told the flat range of the trained ones among them (none: no
 * call). */
void gpt_grad_ready(const hg_model *m, int first, int end);
/* Lays out the fp32 gradient windows of a model with bf16 gradients (win_off, and
 * win_floats; NULL win_off: the count alone): the model-wide tensors' (embeddings,
 * final norm, output) each its own place, every block's in one shared place. */
size_t gpt_grad_windows(const hg_table *params, const gpt_param_map *pm, int n_layer, int64_t *win_off);

/* AdamW over the flat range [lo, lo+n) of the parameters, given the squared norm of the
 * gradients it was computed from; g, mom, var point at the range's first element. Each
 * gradient is multiplied by grad_mult (1/ranks for gradients summed over ranks) before
 * clipping. *norm: the pre-clip norm, sqrt(sumsq) * grad_mult. Advances adam_t. */
hg_status gpt_adamw_range(hg_model *m, const hg_adamw *a, double sumsq, float grad_mult, size_t lo, size_t n,
                          const void *g, void *mom, void *var, float *norm);

/* Tensor idx of the fp32 buffers (param, grad; adam_m and adam_v only with one shard);
 * NULL for idx -1 (an omitted parameter). */
static inline float *gpt_param(const hg_model *m, float *buf, int idx) {
    return idx < 0 ? NULL : (float *)hg_table_ptr(&m->params, buf, idx, 0);
}
/* 1 when tensor idx is trained (it has a gradient and AdamW state). */
static inline int gpt_trained(const hg_model *m, int idx) {
    return idx >= 0 && !(m->params.specs[idx].flags & HG_SPEC_FROZEN);
}
/* Bytes of a kept gradient element: 2 under grad_precision BF16, else 4. */
static inline size_t gpt_grad_bytes(const hg_model *m) { return m->opt.grad_precision == HG_PRECISION_BF16 ? 2 : 4; }
/* Tensor idx's gradient where the step's ops accumulate it in fp32: in the gradient
 * buffer, or with bf16 gradients in its window (gpt_grad_ready adds the window into the
 * buffer); NULL for an omitted or frozen parameter. */
static inline float *gpt_grad(const hg_model *m, int idx) {
    if (!gpt_trained(m, idx)) return NULL;
    return m->grad_win ? m->grad_win + m->win_off[idx] : gpt_param(m, m->grad, idx);
}
/* Tensor idx's kept gradient, of gpt_grad_bytes elements (NULL as gpt_grad). */
static inline void *gpt_grad_kept(const hg_model *m, int idx) {
    if (!gpt_trained(m, idx)) return NULL;
    return (char *)m->grad + m->params.specs[idx].offset / sizeof(float) * gpt_grad_bytes(m);
}
/* 1 when tensor idx is held in bf16 (a frozen one under hg_options.base_precision BF16):
 * its place in the parameter buffer holds bf16 elements, and it is its own compute copy
 * (HG_SPEC_ALIAS in the weights table). */
static inline int gpt_held_bf16(const hg_model *m, int idx) { return idx >= 0 && m->params.specs[idx].elem_size == 2; }
/* Tensor idx of the weights the ops read, in the compute type; NULL for idx -1. */
static inline float *gpt_weight(const hg_model *m, int idx) {
    if (idx < 0) return NULL;
    if (m->weights.specs[idx].flags & HG_SPEC_ALIAS) return gpt_param(m, m->param, idx);
    return (float *)hg_table_ptr(&m->weights, m->weight, idx, 0);
}
/* Tensor idx of a host staging buffer of the parameters (gpt_host_begin(m, m->param))
 * in fp32: the tensor itself, or for one held in bf16 a widened copy (NULL when out of
 * memory), which gpt_param_put rounds back into place (when store) and frees. */
float *gpt_param_get(const hg_model *m, float *host, int idx);
void gpt_param_put(const hg_model *m, float *host, int idx, float *p, int store);
/* p advanced by n elements of the compute type (weights and activations). */
static inline float *gpt_elems(const hg_model *m, const void *p, size_t n) {
    return (float *)((char *)p + n * hg_precision_bytes(m->be->precision));
}
/* Refreshes the compute copy of the flat parameter range [lo, lo+n) from the fp32
 * parameters, after anything but the optimizer wrote them (a no-op when weight == param). */
void gpt_refresh_weights(hg_model *m, size_t lo, size_t n);
/* A whole-table buffer of m (param, grad, or with one shard adam_m, adam_v) in host
 * memory: buf itself on the CPU, else a downloaded copy (NULL when out of memory).
 * gpt_host_end writes the copy back (refreshing the compute copy when buf is m->param)
 * and frees it; gpt_host_free only frees it. */
void *gpt_host_begin(const hg_model *m, void *buf);
hg_status gpt_host_end(hg_model *m, void *buf, void *host);
static inline void gpt_host_free(const void *buf, void *host) {
    if (host != buf) hg_aligned_free(host);
}
/* Activation a of block `layer` (scratch: layer 0); the copy is the layer modulo the
 * copies the plan gave it. */
static inline void *gpt_act(const hg_model *m, int a, int layer) {
    return hg_table_ptr(&m->acts, m->act, a, layer);
}
/* The activation buffer and copy that p points into: 1, or 0 when it points into none. */
int gpt_act_locate(const hg_model *m, const void *p, int *buffer, int *copy);

/* 1 when the model holds a KV cache (created with training=0 and batch=1). */
int gpt_has_kv(const hg_options *o);

/* Forward through the layers to the final LayerNorm, for the (B, T) tokens already in
 * A_TOKENS. kv_pos < 0: the plain forward. kv_pos >= 0 (B = 1): the tokens sit at
 * positions kv_pos.. and attend through the KV cache, which they are appended to. */
hg_status gpt_forward_body(hg_model *m, int kv_pos);
/* The classifier on A_LNF; with backward, also dx into S_DLN and dwte. */
hg_status gpt_classifier(hg_model *m, int backward, float grad_scale, float *logits);
/* Runs site s's op in block `layer` (ignored at the final site): forward (y from x),
 * its recompute, or backward (dx from dy). A failing op's status comes back with its
 * name, site and block in the message. */
typedef enum gpt_site_pass { SITE_FORWARD, SITE_RECOMPUTE, SITE_BACKWARD } gpt_site_pass;
hg_status gpt_site_run(hg_model *m, hg_site s, gpt_site_pass pass, int layer, const float *x, float *y,
                       const float *dy, float *dx);
/* "forward", "recompute", "backward" (the profiler's and the messages' word). */
const char *gpt_site_pass_name(gpt_site_pass pass);

/* Backward from S_DLN (gradient at the final LayerNorm output) to the embeddings. */
hg_status gpt_backward_body(hg_model *m);

/* The passes a model runs, on the (B, T) inputs already staged, as the public calls run
 * them and as the plan traces them: a training pass (forward, the classifier with its
 * backward, backward); the forward with the classifier (logits: host memory or NULL); the
 * forward of T new tokens through the KV cache at kv_len with the last row's logits. */
hg_status gpt_pass_train(hg_model *m);
hg_status gpt_pass_forward(hg_model *m, float *logits);
hg_status gpt_pass_kv(hg_model *m, float *logits);

#endif
