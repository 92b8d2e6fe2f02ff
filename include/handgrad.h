/* handgrad.h - the public API of libhandgrad.
 *
 * handgrad trains GPT-2 style decoder transformers. Every layer's backward pass is
 * written by hand, memory is planned once from tables of tensor specs, and a training
 * step allocates nothing. This header is the whole API; nothing under src/ is.
 *
 * Conventions
 *  - Every call returns hg_status. HG_OK is 0. On failure hg_last_error() gives a
 *    message naming the field or file at fault, for the calling thread. The library
 *    never prints and never exits.
 *  - Shapes are written (rows, cols) in row-major order. B batch, T time,
 *    C d_model, V vocab, L layers, NH heads, F d_ff.
 *  - Parameters use the Hugging Face GPT-2 names and layouts (see hg_param_info).
 *
 * Example: ten training steps on random tokens.
 *
 *     hg_config cfg;
 *     hg_config_preset("tiny", &cfg);
 *     hg_options opt = hg_options_default();
 *     opt.batch = 4; opt.seq_len = 64; opt.seed = 1;
 *     hg_model *m;
 *     if (hg_model_create(&m, &cfg, &opt) != HG_OK) {
 *         fprintf(stderr, "%s\n", hg_last_error());
 *         return 1;
 *     }
 *     hg_adamw adamw = hg_adamw_default();          // lr 3e-4, betas (0.9, 0.95)
 *     for (int step = 0; step < 10; step++) {
 *         float loss;
 *         hg_zero_grad(m);
 *         hg_forward_backward(m, tokens, targets, 4, 64, 1.0f, &loss);
 *         hg_optimizer_step(m, &adamw, NULL);
 *     }
 *     hg_model_free(m);
 */
#ifndef HANDGRAD_H
#define HANDGRAD_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif
#if defined(__GNUC__) && !defined(__CUDACC__)
#pragma GCC visibility push(default) /* what a shared libhandgrad exports: this API only */
#endif

/* ---------------------------------------------------------------- version */

/* The version of this header; CMake's project version is read from these lines. */
#define HG_VERSION_MAJOR 0
#define HG_VERSION_MINOR 1
#define HG_VERSION_PATCH 0
#define HG_VERSION_STRING "0.1.0"

/* The version of the library linked, e.g. "0.1.0"; compare with HG_VERSION_STRING to
 * catch a program built against one version's header and run with another's library. */
const char *hg_version(void);

/* ---------------------------------------------------------------- status */

typedef enum hg_status {
    HG_OK = 0,
    HG_ERR_INVALID,     /* a bad argument or config field; the message names it */
    HG_ERR_NOMEM,       /* allocation failed, or the request does not fit in memory */
    HG_ERR_IO,          /* a file could not be opened, read or written */
    HG_ERR_FORMAT,      /* a file's contents are malformed; the message names file and offset */
    HG_ERR_UNSUPPORTED, /* a valid request this build cannot serve */
    HG_ERR_BACKEND,     /* the compute library (oneDNN, CUDA) failed */
    HG_ERR_STATE,       /* a call out of order, e.g. backward before forward */
} hg_status;

/* The message of the last failing call on this thread ("" if none). */
const char *hg_last_error(void);
/* A short fixed name for a status, e.g. "invalid argument". */
const char *hg_status_name(hg_status s);

/* Whether this CPU has every instruction set the library was compiled for (a build with
 * HANDGRAD_NATIVE=ON uses -march=native, so a copy run on an older CPU would die of
 * SIGILL). hg_cpu_lacks names the first missing one ("avx512f"), or returns NULL;
 * hg_cpu_check fails with HG_ERR_UNSUPPORTED naming it. Backend creation calls
 * hg_cpu_check; call it first thing if the program runs other library code before. Both
 * run on any x86-64 CPU. */
const char *hg_cpu_lacks(void);
hg_status hg_cpu_check(void);
/* NULL where bf16 CPU models can run their matrix products on bf16 hardware (AMX-BF16 or
 * AVX512-BF16, through oneDNN); else one line saying why bf16 is no faster than fp32
 * here, naming the missing instruction sets (as /proc/cpuinfo spells them), or saying
 * that HANDGRAD_BF16=portable forces the portable path. bf16 runs correctly either way. */
const char *hg_cpu_bf16_slow(void);

/* ---------------------------------------------------------------- config */

/* A decoder-only transformer, described once. A block is pre-norm by default:
 *     x = x + proj(attention(rope(qkv(norm_1(x)))));  x = x + mlp(norm_2(x))
 * then a final norm and the output layer (`block` picks another order of the same parts:
 * hg_block_kind). The switches below choose the norm, the
 * position encoding, the MLP, which linear groups have biases, grouped-query attention,
 * the head size and whether the output layer is tied to the token embedding. A field left
 * 0 takes GPT-2's choice, so a zeroed struct plus the sizes is GPT-2. Examples: GPT-2 is
 * the "small" preset; Llama 2/3, Mistral and SmolLM are rmsnorm + rope + swiglu with
 * HG_OMIT_ALL_BIAS and n_kv_head < n_head; Qwen2 the same with the q/k/v bias kept;
 * the CS336 model of docs/benchmarks.md is the "cs336-*" presets. */
typedef enum hg_norm_kind {
    HG_NORM_LAYERNORM = 0, /* (x - mean) * rstd * w + b */
    HG_NORM_RMSNORM = 1,   /* x * rstd * w, rstd from the mean square; never a bias */
} hg_norm_kind;
typedef enum hg_position_kind {
    HG_POS_LEARNED = 0, /* a (Tmax, C) position embedding added to the token embedding */
    HG_POS_ROPE = 1,    /* rotary embedding of q and k (rotate-half pairs i, i + hs/2) */
} hg_position_kind;
/* Rescaling of the rotary frequencies f_i = theta^(-2i/hs). HG_ROPE_LLAMA3 is Llama 3.1's:
 * with wavelength w_i = 2 pi / f_i and L = rope_original_max_len, frequencies whose w_i
 * exceeds L / rope_low_freq_factor are divided by rope_factor, those below L /
 * rope_high_freq_factor are kept, and the band between blends the two linearly in L / w_i. */
typedef enum hg_rope_scaling {
    HG_ROPE_NONE = 0,
    HG_ROPE_LLAMA3 = 1,
} hg_rope_scaling;
typedef enum hg_mlp_kind {
    HG_MLP_GELU = 0,   /* proj(gelu_tanh(fc(x))) */
    HG_MLP_SWIGLU = 1, /* proj(silu(gate(x)) * up(x)); fc holds gate | up, width 2F */
    HG_MLP_RELU2 = 2,  /* proj(relu(fc(x))^2) */
    HG_MLP_GEGLU = 3,  /* proj(gelu_tanh(gate(x)) * up(x)) (Gemma); fc holds gate | up, width 2F */
} hg_mlp_kind;
/* The order of a block's parts, with A = proj(attention(...)) and M = mlp(...):
 *   HG_BLOCK_PRENORM   x = x + A(n1(x));       x = x + M(n2(x))       (GPT-2, Llama)
 *   HG_BLOCK_POSTNORM  x = x + p1(A(x));       x = x + p2(M(x))       (OLMo 2)
 *   HG_BLOCK_SANDWICH  x = x + p1(A(n1(x)));   x = x + p2(M(n2(x)))   (Gemma 2)
 *   HG_BLOCK_PARALLEL  x = x + A(n1(x)) + M(n1(x))                    (Phi-2, GPT-J)
 * n1, n2 are ln_1 and ln_2, before a branch; p1, p2 are attn.post_norm and mlp.post_norm,
 * on a branch's output. Every layout ends with the final norm, ln_f. */
typedef enum hg_block_kind {
    HG_BLOCK_PRENORM = 0,
    HG_BLOCK_POSTNORM = 1,
    HG_BLOCK_SANDWICH = 2,
    HG_BLOCK_PARALLEL = 3,
} hg_block_kind;
/* Whether an MLP kind is gated: its first linear is gate | up, 2F wide. */
static inline int hg_mlp_gated(hg_mlp_kind k) { return k == HG_MLP_SWIGLU || k == HG_MLP_GEGLU; }
/* hg_config.omit: parameters the blocks do without. */
enum {
    HG_OMIT_QKV_BIAS = 1u << 0,    /* the q, k, v projection's bias */
    HG_OMIT_PROJ_BIAS = 1u << 1,   /* the attention output projection's bias */
    HG_OMIT_MLP_BIAS = 1u << 2,    /* both MLP linears' biases */
    HG_OMIT_NORM_BIAS = 1u << 3,   /* LayerNorm's bias (RMSNorm never has one) */
    HG_OMIT_NORM_WEIGHT = 1u << 4, /* the norms' weight: no affine part at all */
    HG_OMIT_ALL_BIAS = 0xF,
};

/* Sites of the decoder where an op of your own (handgrad_ext.h, hg_register_op) runs:
 *   HG_SITE_ATTN_PROJ   in each block, on the attention output projection's output
 *                       (N, C) -> (N, C), before dropout and the residual add;
 *   HG_SITE_MLP_ACT     in each block, as the MLP activation (N, FI) -> (N, F), in place
 *                       of `mlp`'s (FI = 2F when mlp is swiglu, else F);
 *   HG_SITE_FINAL_NORM  once, on the residual stream (N, C) -> (N, C) before the final
 *                       norm. */
typedef enum hg_site { HG_SITE_ATTN_PROJ = 0, HG_SITE_MLP_ACT = 1, HG_SITE_FINAL_NORM = 2, HG_SITES } hg_site;
#define HG_OP_NAME_MAX 32 /* bytes of an op's name, its terminating NUL included */

typedef struct hg_config {
    int vocab_size;  /* V: token ids are in [0, V); padded to a multiple of 64 internally */
    int max_seq_len; /* Tmax: longest sequence; rows of a learned position embedding */
    int n_layer;     /* L */
    int n_head;      /* NH: query heads */
    int d_model;     /* C */
    int d_ff;        /* F: MLP width; 0 means 4*C */
    float dropout;   /* p in [0, 1): on embeddings, attention output, MLP output */
    /* the architecture switches; 0 is GPT-2's choice in each */
    hg_norm_kind norm;
    float norm_eps;          /* 0 means 1e-5 */
    hg_position_kind position;
    float rope_theta;        /* HG_POS_ROPE's base; 0 means 10000 */
    hg_rope_scaling rope_scaling; /* how the rotary frequencies are rescaled */
    float rope_factor;       /* HG_ROPE_LLAMA3: the factor long wavelengths are divided by */
    float rope_low_freq_factor, rope_high_freq_factor; /* HG_ROPE_LLAMA3's band edges */
    int rope_original_max_len; /* HG_ROPE_LLAMA3: the context the base model was trained at */
    hg_mlp_kind mlp;
    unsigned omit;           /* HG_OMIT_* flags */
    int n_kv_head;           /* key/value heads, dividing n_head (grouped-query attention);
                                0 means n_head */
    int head_dim;            /* hs; 0 means d_model / n_head (which must then divide) */
    int untied;              /* 1: the output layer has its own (V, C) matrix lm_head;
                                0: it is the token embedding wte */
    int qk_norm;             /* 1: each q and k head is RMS-normalised (norm_eps, a weight
                                of hs per q and per k unless norm_weight is off) before
                                the rotary embedding, as in Qwen3 */
    float logit_softcap;     /* > 0: logits = c tanh(logits / c) before the softmax, c this
                                value (Gemma 2's final_logit_softcapping); 0: none */
    float embed_scale;       /* > 0: token embeddings times this on the way in (Gemma's
                                sqrt(d_model)); 0: 1 */
    int rotary_dim;          /* HG_POS_ROPE: the rotary embedding turns the first rotary_dim
                                (even, <= the head size) dimensions of each q and k head and
                                passes the rest (Phi's partial_rotary_factor); 0: all */
    hg_block_kind block;     /* the order of the block's parts (above); 0: pre-norm */
    int lm_head_bias;        /* 1: the output layer has a bias of V (Phi-2's lm_head) */
    float attn_softcap;      /* > 0: attention scores z = q.k / sqrt(hs) become c tanh(z / c),
                                c this value (Gemma 2's attn_logit_softcapping); 0: none */
    int qk_norm_whole;       /* with qk_norm: all q heads are normalised as one vector (a
                                weight of n_head * head_dim) and all k heads as another
                                (n_kv_head * head_dim), as in OLMo 2; 0: each head */
    int sliding_window;      /* > 0: the layers that slide (below) attend to the last
                                sliding_window keys only, the query's own included
                                (Mistral, Gemma 2, Qwen2); 0: none */
    int window_period;       /* which layers slide: with a period P > 1, layer l slides
                                unless l % P == P - 1 (Gemma 2: 2, Gemma 3: 6); 0 or 1:
                                every layer from window_first_layer on (Mistral: all) */
    int window_first_layer;  /* layers below this attend to every earlier key (Qwen2's
                                max_window_layers) */
    char site_op[HG_SITES][HG_OP_NAME_MAX]; /* the registered op at each site, by name;
                                               "" for none (the built-in path) */
} hg_config;

/* The window of layer l of c (hg_config.sliding_window and the fields after it): its
 * width, or 0 when the layer attends to every earlier key. */
static inline int hg_layer_window(const hg_config *c, int l) {
    int P = c->window_period;
    if (c->sliding_window <= 0 || l < c->window_first_layer || (P > 1 && l % P == P - 1)) return 0;
    return c->sliding_window;
}

/* The head size of c: head_dim, or d_model / n_head (0 when n_head is not positive). Safe
 * on a config not yet validated. */
static inline int hg_head_size(const hg_config *c) {
    return c->head_dim ? c->head_dim : c->n_head > 0 ? c->d_model / c->n_head : 0;
}

/* Presets: the GPT-2 ladder "small", "medium", "large", "xl", "2.7B" (V=50257,
 * Tmax=1024); the same ladder as the CS336 model, "cs336-small" ... "cs336-2.7B"
 * (RMSNorm, RoPE, SwiGLU, no biases, untied, V=10000, Tmax=1024); "smollm-135m"
 * (SmolLM's shape: C=576, L=30, NH=9, NKV=3, F=1536, V=49152, tied); and the test sizes
 * "tiny" (V=512, Tmax=64, L=2, NH=4, C=64), "odd" (V=1000, Tmax=64, L=2, NH=3, C=96),
 * "llama-tiny" (GQA 4/2, untied), "qwen2-tiny" (GQA 4/2, q/k/v bias, tied) and
 * "qwen3-tiny" (GQA 4/2, q/k norm, head_dim 32 > d_model/n_head, tied).
 * hg_config_preset_name(i) lists them (NULL past the last). */
hg_status hg_config_preset(const char *name, hg_config *out);
const char *hg_config_preset_name(int i);
/* Checks every field; the message names the first bad one. */
hg_status hg_config_validate(const hg_config *cfg);
/* Number of parameters, counting V rows of the embedding and output matrices (not the
 * padded rows) and a tied output layer once; a site op's count when it is registered.
 * Read off the parameter table a model of cfg builds; -1 when out of memory. */
int64_t hg_config_param_count(const hg_config *cfg, int with_position_embedding);

/* The config's fields by name: one table drives validation, checkpoint metadata, the
 * Hugging Face mapping and command-line flags. Names are the JSON keys: vocab_size,
 * max_seq_len, n_layer, n_head, n_kv_head, d_model, d_ff, head_dim, dropout, norm
 * ("layernorm" | "rmsnorm"), norm_eps, norm_weight, norm_bias, position ("learned" |
 * "rope"), rope_theta, rope_scaling ("none" | "llama3"), rope_factor, rope_low_freq_factor,
 * rope_high_freq_factor, rope_original_max_len, mlp ("gelu" | "swiglu" | "relu2" | "geglu"),
 * block ("prenorm" | "postnorm" | "sandwich" | "parallel"), qkv_bias, proj_bias, mlp_bias,
 * tied and qk_norm (booleans "true" | "false" | "1" | "0"), and the site ops op_attn_proj,
 * op_mlp_act and op_final_norm (an op's name, or "none"). */
int hg_config_field_count(void);
/* Field i's name and a one-line description (NULL past the last). */
const char *hg_config_field_name(int i, const char **help);
/* Sets field `name` from its text; the message names the field and the bad value. */
hg_status hg_config_set(hg_config *cfg, const char *name, const char *value);
/* Field `name` as text ("rmsnorm", "true", "1e-05", "768"; 0-means-default fields give
 * the value they stand for), written into buf (at least 32 bytes). */
hg_status hg_config_get(const hg_config *cfg, const char *name, char *buf, size_t size);

/* --------------------------------------------------------------- options */

/* Where a model runs. A CUDA model keeps its parameters, gradients, optimizer state and
 * activations in GPU memory (see hg_param_info); everything else in this API is the
 * same. HG_DEVICE_CUDA needs a build with the CUDA backend and a Hopper (sm_90) or newer GPU;
 * otherwise hg_model_create fails with HG_ERR_UNSUPPORTED and says why. */
typedef enum hg_device { HG_DEVICE_CPU = 0, HG_DEVICE_CUDA = 1 } hg_device;

/* Numerics of a model (docs/architecture.md, docs/cuda.md).
 *  FP32: everything in fp32 (CUDA's checking mode: fp32 GEMMs, no TF32).
 *  BF16: mixed precision, CPU or CUDA: weights and activations in bf16 for compute; fp32 master
 *        weights, gradients, AdamW moments, LayerNorm/softmax statistics and every
 *        reduction's accumulator. The optimizer updates the fp32 masters and writes the
 *        bf16 copy (rounded to nearest, or stochastically with HG_FLAG_STOCHASTIC_ROUNDING).
 *  FP16: reserved (needs dynamic loss scaling); refused with HG_ERR_UNSUPPORTED. */
typedef enum hg_precision { HG_PRECISION_FP32 = 0, HG_PRECISION_BF16 = 1, HG_PRECISION_FP16 = 2 } hg_precision;

/* hg_options.flags */
enum {
    HG_FLAG_CUDA_GRAPHS = 1u << 0,         /* CUDA: replay hg_forward_backward as a CUDA graph
                                              (used while dropout is off; docs/cuda.md) */
    HG_FLAG_STOCHASTIC_ROUNDING = 1u << 1, /* BF16: stochastic rounding of the weight copy */
    HG_FLAG_DETERMINISTIC = 1u << 2,       /* bit-identical results run to run: on CUDA, handgrad's
                                              own attention kernels instead of cuDNN's (whose
                                              backward adds dQ by atomics) and a token-embedding
                                              gradient without atomics. The CPU is always
                                              deterministic. Default off: docs/cuda.md says why */
};

/* What a training step's backward computes again instead of keeping from the forward:
 * memory for time, with the same results (bit for bit on the CPU). The memory plan keeps
 * only what the backward then reads from the forward (hg_memory_required shows it).
 *  NONE   keeps every activation the backward reads (the MLP's activation is always
 *         recomputed from its pre-activation);
 *  ATTN   keeps each block's input, attention output and log-sum-exp, and recomputes
 *         ln_1 and q|k|v (with the q/k norm and the rotary embedding);
 *  MLP    recomputes ln_2 (where the MLP has a norm of its own) and the MLP's
 *         pre-activation from the stream after the attention half;
 *  BLOCK  keeps each block's input alone and recomputes the block but for its last add. */
typedef enum hg_recompute {
    HG_RECOMPUTE_NONE = 0,
    HG_RECOMPUTE_ATTN,
    HG_RECOMPUTE_MLP,
    HG_RECOMPUTE_BLOCK
} hg_recompute;

/* Low-rank adapters (LoRA; docs/training.md): a trained low-rank update on linear layers
 * of a frozen model, y = x W + b + s (drop(x) A^T) B^T, A (r, in), B (out, r), s = alpha / r
 * (alpha / sqrt(r) with rslora), as PEFT computes it. The layers come in four groups, and
 * a group's output splits into the modules a Hugging Face class stores apart: the q|k|v
 * projection into q, k and v (split 3) or whole (1, GPT-2's c_attn, Phi-3's qkv_proj); a
 * gated MLP's first layer into gate and up (2) or whole (1); the others whole. Bit j of
 * targets[g] puts an adapter on module j of group g. With r > 0 every parameter but the
 * adapters is frozen. hg_hf_lora_targets resolves PEFT's module names into these. */
typedef enum hg_lora_group {
    HG_LORA_QKV,      /* attn.c_attn: q|k|v */
    HG_LORA_ATTN_OUT, /* attn.c_proj (o_proj, dense) */
    HG_LORA_MLP_IN,   /* mlp.c_fc: gate|up, or fc1 */
    HG_LORA_MLP_OUT,  /* mlp.c_proj (down_proj, fc2) */
    HG_LORA_GROUPS
} hg_lora_group;
typedef enum hg_lora_init {
    HG_LORA_INIT_KAIMING = 0, /* PEFT's default: A uniform in +-1/sqrt(in), B = 0 */
    HG_LORA_INIT_GAUSSIAN,    /* A normal with std 1/r, B = 0 */
} hg_lora_init;
typedef struct hg_lora {
    int r;                            /* rank; 0: no adapters */
    float alpha;                      /* the scale's numerator */
    float dropout;                    /* on the adapters' input, while training */
    int rslora;                       /* 1: s = alpha / sqrt(r) */
    hg_lora_init init;
    int split[HG_LORA_GROUPS];        /* modules a group's output splits into; 0 means 1 */
    unsigned targets[HG_LORA_GROUPS]; /* bit j: an adapter on module j */
} hg_lora;

typedef struct hg_options {
    int batch;    /* B: largest batch a call may pass */
    int seq_len;  /* T: largest sequence length a call may pass (<= Tmax) */
    int training; /* 1: allocate grads, AdamW state and per-layer activations */
    int threads;  /* OpenMP threads for this model's calls; 0 means all cores (resolved
                     to the core count in hg_model_options) */
    uint64_t seed;/* parameter init and dropout masks */
    hg_device device;       /* HG_DEVICE_CPU (default) or HG_DEVICE_CUDA */
    hg_precision precision; /* HG_PRECISION_FP32 (default) or HG_PRECISION_BF16 */
    unsigned flags;         /* HG_FLAG_* */
    /* ZeRO-1 (handgrad_dist.h): the AdamW state covers only slice `shard` of `shards`
     * equal slices of the flat parameter buffer. 0 or 1 shards: the whole state. */
    int shards, shard;
    hg_recompute recompute; /* what the backward recomputes (above) */
    hg_lora lora;           /* adapters (above); lora.r = 0: none */
    /* Parameters trained by no optimizer: comma-separated globs (fnmatch) over
     * hg_param_info names ("h.*.mlp.*", "wte.weight"), or "all"; NULL: none. A frozen
     * tensor has no gradient and no AdamW state, and its linear layer's backward skips
     * its weight-gradient product. A glob that matches nothing is refused. */
    const char *freeze;
    /* How frozen tensors are held: HG_PRECISION_FP32 (default), as every parameter, or
     * HG_PRECISION_BF16 (with precision BF16 and something frozen): a frozen matrix is
     * kept only as its bf16 compute copy, half the memory of an fp32 master, the
     * setting of a base model loaded in bf16 under autocast. Values set or loaded into
     * it are rounded to bf16 (nearest even). Norm weights stay fp32 where the backend
     * computes norms in fp32. */
    hg_precision base_precision;
    /* How AdamW's two moments are held: HG_PRECISION_FP32 (default) or HG_PRECISION_BF16
     * (any compute precision): 4 bytes a trained parameter instead of 8. Each step
     * updates them in fp32 and rounds them back stochastically, with draws that depend
     * only on (seed, element, step), the CUDA backend's alike; hg_param_read/write and
     * checkpoints convert. Not with shards > 1. */
    hg_precision optim_state;
    /* How the gradients are kept between the backward and the optimizer step:
     * HG_PRECISION_FP32 (default) or HG_PRECISION_BF16 (the CPU, one shard): 2 bytes a
     * trained parameter instead of 4. Each block's gradients (and the embeddings', the
     * final norm's and the output's) are computed and summed in an fp32 window of their
     * own, then added into the bf16 gradients, rounded to nearest even, once that block's
     * backward is done: one rounding a micro-batch. */
    hg_precision grad_precision;
} hg_options;

/* B=1, T=Tmax, training=1, threads=0, seed=0, CPU, fp32, no flags, shards=1, recompute
 * none, no adapters, nothing frozen, fp32 AdamW state and gradients */
hg_options hg_options_default(void);

/* ---------------------------------------------------------------- memory */

typedef struct hg_memory_plan {
    size_t params;      /* parameters (fp32, padded vocab), plus their bf16 compute copy
                           under HG_PRECISION_BF16 */
    size_t grads;       /* parameter gradients, in grad_precision's type (with bf16 ones,
                           their fp32 windows too) */
    size_t optimizer;   /* AdamW m and v (this rank's slice with shards > 1), in
                           optim_state's type */
    size_t activations; /* stored activations for backward, sized from (B, T) */
    size_t scratch;     /* per-op temporaries: activation grads, classifier chunk,
                           attention tiles, GEMM scratch */
    size_t total;
} hg_memory_plan;

/* Bytes that hg_model_create(cfg, opt) would allocate (on opt.device), computed without
 * allocating. */
hg_status hg_memory_required(const hg_config *cfg, const hg_options *opt, hg_memory_plan *out);
/* Bytes of memory this process may still use (MemAvailable, or the cgroup limit). */
size_t hg_memory_available(void);

/* ----------------------------------------------------------------- model */

typedef struct hg_model hg_model;

/* Creates a model with freshly initialised parameters (GPT-2 init: N(0, 0.02), residual
 * projections scaled by 1/sqrt(2L), LayerNorm weight 1, biases 0). Refuses with
 * HG_ERR_NOMEM, before allocating, when the plan does not fit in available memory (GPU
 * memory for a CUDA model). */
hg_status hg_model_create(hg_model **out, const hg_config *cfg, const hg_options *opt);
void hg_model_free(hg_model *m);

const hg_config *hg_model_config(const hg_model *m);
const hg_options *hg_model_options(const hg_model *m);
hg_memory_plan hg_model_memory(const hg_model *m);
/* Which attention kernels the model's last forward and backward ran, in words: on CUDA
 * in bf16 cuDNN's fused attention (its engine, and whether cuDNN marks it
 * nondeterministic) or
 * handgrad's own kernels, with the reason where cuDNN could not be used (not found, too
 * old, a shape it refuses, --deterministic). "" before the first step, and on the CPU. */
const char *hg_model_attention_kernels(const hg_model *m);

/* Forward pass. tokens and targets are (B, T) int32 with B <= opt.batch and
 * T <= opt.seq_len. targets may be NULL (no loss); a target of -1 is ignored.
 * loss (may be NULL) receives the mean cross-entropy over non-ignored targets.
 * logits (may be NULL) receives (B, T, V) floats, unpadded.
 * In a training model the activations needed by hg_backward are kept. */
hg_status hg_forward(hg_model *m, const int32_t *tokens, const int32_t *targets,
                     int B, int T, float *loss, float *logits);

/* Backward pass of the last hg_forward, which must have had targets. Parameter
 * gradients accumulate (+=) scaled by grad_scale, so micro-batches can be summed;
 * use 1/accumulation_steps. The classifier's logits are recomputed in chunks, so
 * hg_forward_backward is cheaper when the forward's logits are not wanted. */
hg_status hg_backward(hg_model *m, float grad_scale);

/* hg_forward then hg_backward in one pass, with the classifier's softmax,
 * cross-entropy and their backward fused chunk by chunk. The training path. */
hg_status hg_forward_backward(hg_model *m, const int32_t *tokens, const int32_t *targets,
                              int B, int T, float grad_scale, float *loss);

hg_status hg_zero_grad(hg_model *m);

/* Packed documents: pos (B, T) gives each token's position in its document for the
 * forward (and backward) calls that follow, until set again; NULL (B, T ignored) goes
 * back to one document a row, positions 0..T-1. A position of 0 starts a document, any
 * other is one more than the token's before it (a row may start inside a document, at
 * any position), and every one is below max_seq_len. A token attends only to its own
 * document's earlier tokens, and rotary or learned position embeddings take pos: each
 * document computes what it would alone (transformers' position_ids with a
 * block-diagonal causal mask). Attention costs the sum of the documents' squared
 * lengths, not T^2. Forward calls must then have this B and T. The KV cache
 * (hg_kv_forward) is unaffected. A CUDA model copies them to the GPU; its kernels for
 * them have not run on a GPU yet, and it refuses them (naming positions) unless
 * HANDGRAD_CUDA_UNTESTED=1. */
hg_status hg_set_positions(hg_model *m, const int32_t *pos, int B, int T);

/* Gradient-ready hook, for overlapping communication with the backward pass. During
 * each backward, fn(ctx, offset, count) is called on the calling thread each time a
 * range of the flat gradient buffer is final: ln_f first, then each layer from the last
 * to the first, then the embeddings. offset and count are in floats from the start of
 * the buffer (hg_param_info.grad of parameter 0); the ranges of one backward tile the
 * whole buffer downwards, the last one starting at 0. NULL fn removes the hook. */
typedef void hg_grad_ready_fn(void *ctx, size_t offset_floats, size_t count_floats);
hg_status hg_set_grad_ready_hook(hg_model *m, hg_grad_ready_fn *fn, void *ctx);

/* Dropout on (1) or off (0); a training model starts on, but dropout only acts
 * when cfg.dropout > 0. */
hg_status hg_set_train_mode(hg_model *m, int on);

/* ------------------------------------------------------------- optimizer */

typedef struct hg_adamw {
    float lr;
    float beta1, beta2;
    float eps;
    float weight_decay; /* decoupled; applied to 2-D weight matrices only */
    float grad_clip;    /* clip the global gradient norm to this; 0 disables */
} hg_adamw;

hg_adamw hg_adamw_default(void); /* lr 3e-4, (0.9, 0.95), eps 1e-8, wd 0.1, clip 1.0 */

/* One AdamW step over all parameters (PyTorch's AdamW numerics). grad_norm (may be
 * NULL) receives the global L2 norm of the gradients before clipping, also when the
 * step is refused (HG_ERR_INVALID, nothing changed) because that norm is not finite. */
hg_status hg_optimizer_step(hg_model *m, const hg_adamw *opt, float *grad_norm);
/* Completed optimizer steps (AdamW's t). */
int64_t hg_optimizer_steps(const hg_model *m);

/* Learning rate at a step: linear warmup from lr/warmup_steps to lr over warmup_steps
 * steps, then a decay to min_lr at total_steps (cosine or linear), or lr throughout
 * (constant). step counts from 0; past total_steps the rate stays at min_lr. */
typedef enum hg_lr_kind { HG_LR_COSINE, HG_LR_LINEAR, HG_LR_CONSTANT } hg_lr_kind;
typedef struct hg_lr_schedule {
    hg_lr_kind kind;
    float lr, min_lr;
    int64_t warmup_steps, total_steps;
} hg_lr_schedule;
float hg_lr_at(const hg_lr_schedule *s, int64_t step);

/* ------------------------------------------------------------ parameters */

#define HG_MAX_DIMS 4

typedef struct hg_param_info {
    const char *name;  /* Hugging Face GPT-2 name, e.g. "h.0.attn.c_attn.weight" */
    int ndim;
    int64_t shape[HG_MAX_DIMS];
    int64_t numel;
    float *data;       /* row-major, shape as above (the fp32 master weights; a bf16
                          model computes from a bf16 copy of them, which hg_param_write
                          refreshes and a store through this pointer does not); NULL
                          for a tensor held in bf16 (dtype) */
    uint16_t *data_bf16; /* the tensor, when it is held in bf16 (a frozen one under
                          hg_options.base_precision BF16): it is also the compute copy;
                          hg_param_read / hg_param_write convert from and to fp32 */
    hg_precision dtype;  /* the element type of data or data_bf16 */
    float *grad;       /* same layout; NULL in an inference model, for a frozen tensor,
                          and when the gradients are kept in bf16 (grad_dtype) */
    uint16_t *grad_bf16; /* the gradient under hg_options.grad_precision BF16 (final once
                          a step's backward has returned) */
    hg_precision grad_dtype; /* the element type of the gradient */
    float *adam_m;     /* AdamW first moment; NULL in an inference model, with
                          shards > 1 (see hg_dist_optimizer_get), and when the moments
                          are held in bf16 (state_dtype) */
    float *adam_v;     /* AdamW second moment; NULL likewise */
    uint16_t *adam_m_bf16, *adam_v_bf16; /* the moments under hg_options.optim_state
                          BF16; hg_param_read / hg_param_write convert */
    hg_precision state_dtype; /* the element type of the moments */
    int decay;         /* 1 if weight decay applies (2-D matrices) */
    int frozen;        /* 1: trained by no optimizer (hg_options.freeze, or LoRA's base) */
    hg_device device;  /* where data..adam_v live: with HG_DEVICE_CUDA they are GPU
                          addresses; copy with hg_param_read / hg_param_write */
} hg_param_info;

/* Parameter tensors, in this order per the HF naming, with shapes:
 *   wte.weight                 (V, C)    token embedding, tied lm_head
 *   wpe.weight                 (Tmax, C)
 *   h.{i}.ln_1.weight/.bias    (C)
 *   h.{i}.attn.c_attn.weight   (C, 3C)   input-major: qkv = x @ W + b, q|k|v columns
 *   h.{i}.attn.c_attn.bias     (3C)
 *   h.{i}.attn.c_proj.weight   (C, C)
 *   h.{i}.attn.c_proj.bias     (C)
 *   h.{i}.ln_2.weight/.bias    (C)
 *   h.{i}.mlp.c_fc.weight      (C, F)
 *   h.{i}.mlp.c_fc.bias        (F)
 *   h.{i}.mlp.c_proj.weight    (F, C)
 *   h.{i}.mlp.c_proj.bias      (C)
 *   ln_f.weight/.bias          (C)
 * Weights are stored as Hugging Face's Conv1D does: (in_features, out_features). */
int hg_param_count(const hg_model *m);
hg_status hg_param_at(const hg_model *m, int index, hg_param_info *out);
hg_status hg_param_find(const hg_model *m, const char *name, hg_param_info *out);

/* Copies parameter `index`'s values (numel fp32) between the model and host memory, on
 * any device. Writing HG_PARAM_DATA also refreshes the compute copy (bf16); a tensor held
 * in bf16 (hg_param_info.dtype), and moments held in bf16 (state_dtype), are widened on
 * read and rounded to nearest even on write. The AdamW parts need shards = 1 (HG_ERR_STATE otherwise: see hg_dist_optimizer_get). */
typedef enum hg_param_part { HG_PARAM_DATA, HG_PARAM_GRAD, HG_PARAM_ADAM_M, HG_PARAM_ADAM_V } hg_param_part;
hg_status hg_param_read(const hg_model *m, int index, hg_param_part part, float *host);
hg_status hg_param_write(hg_model *m, int index, hg_param_part part, const float *host);

/* RNG stream position for dropout (advances once per training forward), so a
 * resumed run regenerates the same masks. */
uint64_t hg_model_rng_counter(const hg_model *m);
hg_status hg_model_set_rng_counter(hg_model *m, uint64_t counter);

/* -------------------------------------------------------------- profiler
 *
 * A profiler records one event per op call (and per region: step, forward, classifier,
 * backward, optimizer) of the models it is attached to, into a buffer allocated when it
 * is created: recording allocates nothing and a step runs unchanged. With no profiler
 * attached an op pays one predictable branch; a build with HANDGRAD_PROFILE=OFF has no
 * hooks at all and hg_model_set_profiler returns HG_ERR_UNSUPPORTED.
 *
 *     hg_profiler *p;
 *     hg_profiler_create(&p, 100000);
 *     hg_model_set_profiler(m, p);
 *     hg_profiler_step_begin(p);
 *     hg_zero_grad(m); hg_forward_backward(m, ...); hg_optimizer_step(m, ...);
 *     hg_profiler_step_end(p);
 *     for (int i = 0; i < hg_profiler_count(p); i++) hg_profiler_event(p, i, &ev);
 */

typedef struct hg_profiler hg_profiler;

typedef enum hg_prof_pass {
    HG_PASS_FORWARD, HG_PASS_BACKWARD, HG_PASS_OPTIMIZER,
    HG_PASS_STEP, /* the step region itself */
} hg_prof_pass;

typedef struct hg_prof_event {
    const char *name;    /* op and pass, e.g. "matmul c_fc backward", "adamw"; a region:
                            "step", "forward", "classifier", "backward", "optimizer"; a
                            site op (handgrad_ext.h): "<its name> forward". Valid while
                            the profiler lives and is not attached to another model */
    int region;          /* 1: a region enclosing op events; 0: one op call */
    hg_prof_pass pass;
    int gemm;            /* 1: a GEMM op (matmuls, classifier) */
    int flop_bound;      /* 1: rate it in FLOP/s; 0: in bytes/s (a memory-bound op) */
    int step;            /* index of the enclosing hg_profiler_step_begin, -1 outside steps */
    int layer;           /* 0..L-1 a block (ln_f counts to the last), -1 the embedding,
                            L the classifier, -2 none */
    int thread;          /* OS id of the calling thread */
    double start, end;   /* seconds since hg_profiler_create or hg_profiler_reset */
    double flops;        /* floating-point operations executed (recomputation included) */
    double bytes;        /* bytes the op must read and write, each tensor counted once */
    int param;           /* adamw: the parameter's index (hg_param_at); else -1 */
    char shape[64];      /* e.g. "1024x768 @ 768x3072" */
} hg_prof_event;

/* max_events: the buffer's size; events past it are counted (hg_profiler_dropped) and
 * not kept. 368 events per GPT-2 small training step. */
hg_status hg_profiler_create(hg_profiler **out, int max_events);
void hg_profiler_free(hg_profiler *p);
/* Attach p to m (NULL detaches). A profiler may serve several models and threads. */
hg_status hg_model_set_profiler(hg_model *m, hg_profiler *p);
/* Forgets all events and restarts the clock and the step count. */
void hg_profiler_reset(hg_profiler *p);
/* Marks of a step, from the thread that runs it: the step region and event.step. */
void hg_profiler_step_begin(hg_profiler *p);
void hg_profiler_step_end(hg_profiler *p);
int hg_profiler_count(const hg_profiler *p);
int64_t hg_profiler_dropped(const hg_profiler *p);
/* Events in the order they ended (an op before the regions enclosing it). */
hg_status hg_profiler_event(const hg_profiler *p, int index, hg_prof_event *out);

/* Buffers of a model's activation table: stored activations and per-op scratch. */
typedef struct hg_buffer_info {
    const char *name;    /* e.g. "qkv", "scratch.logits" */
    int scratch;         /* 1: values live within a pass region (forward, classifier,
                            backward); 0: kept, read after the region that wrote them (by
                            the backward, or by the next call: the KV cache) */
    int64_t copies;      /* one per block for a value kept for the backward */
    size_t bytes;        /* all copies; 0 for a buffer the model's step never touches */
} hg_buffer_info;
int hg_buffer_count(const hg_model *m);
hg_status hg_buffer_at(const hg_model *m, int index, hg_buffer_info *out);

/* The step as the model planned it (docs/architecture.md, "The step described once"):
 * every op of the passes the model can run, in the order the step's code calls them,
 * with the activation buffers (hg_buffer_at's indices) each reads and writes. The memory
 * plan (which buffers exist, how many copies each has, which are kept for the backward
 * and which are scratch) and the ops a backend must have are derived from this list, at
 * model creation. */
#define HG_STEP_MAX_ACCESS 10
typedef struct hg_step_access {
    int buffer; /* hg_buffer_at's index */
    int copy;   /* the copy the step addresses: the block's index for a per-block buffer,
                   0 for scratch; the plan maps it onto the buffer's copies */
} hg_step_access;
typedef struct hg_step_op {
    const char *name;   /* as the profiler names the op, e.g. "matmul c_attn forward" */
    int pass;           /* 0 a training step (hg_forward_backward), 1 the forward
                           (hg_forward), 2 new tokens through the KV cache (hg_kv_forward);
                           a pass the model cannot run is not listed */
    const char *region; /* "forward", "classifier" or "backward" */
    int layer;          /* as hg_prof_event's */
    int recompute;      /* 1: a forward op the backward runs again (hg_options.recompute) */
    double flops;       /* its floating-point operations at the model's batch and seq_len
                           (a frozen weight's backward has no dW product) */
    int nread, nwrite;
    hg_step_access read[HG_STEP_MAX_ACCESS], write[HG_STEP_MAX_ACCESS]; /* an accumulated buffer is in both */
} hg_step_op;
int hg_step_op_count(const hg_model *m);
hg_status hg_step_op_at(const hg_model *m, int index, hg_step_op *out);
/* Bytes the backend allocated at first use, outside the plan (oneDNN's GEMM scratchpad). */
size_t hg_model_workspace_bytes(const hg_model *m);

/* The live-activation curve of recorded step `step`: for each of its forward and
 * backward op events, in order, the event's index and the bytes of stored activations
 * live while it runs (produced by it or earlier, and read by it or later), derived from
 * the buffers each op touched. Writes min(cap, ops) points; *n receives the op count. */
typedef struct hg_live_point {
    int event;
    size_t bytes;
} hg_live_point;
hg_status hg_profiler_memory_curve(const hg_profiler *p, int step, hg_live_point *points, int cap, int *n);
/* Live bytes of each buffer (hg_buffer_at order, nbuffers entries) during op event
 * `event` of step `step`, for a breakdown of the peak. */
hg_status hg_profiler_live_buffers(const hg_profiler *p, int step, int event, size_t *bytes, int nbuffers);
/* ------------------------------------------------------------ generation */

/* KV-cache inference on a model created with training=0 and batch=1: its seq_len is
 * the cache length, and the cache is part of its activation memory (nothing is
 * allocated per token). Each appended token costs O(cache length), not a full forward.
 * Reset the cache after changing the parameters (hg_model_copy_params does). */
hg_status hg_kv_reset(hg_model *m); /* empty the cache */
/* Appends n tokens to the cache (a prefill when n > 1) and writes the logits (V floats)
 * of the last one; fails with HG_ERR_INVALID, cache unchanged, when the cache would
 * exceed seq_len. */
hg_status hg_kv_forward(hg_model *m, const int32_t *tokens, int n, float *logits);
int hg_kv_length(const hg_model *m);
/* Keeps the first n positions of the cache (0 <= n <= hg_kv_length) and drops the rest,
 * e.g. to generate again from a prompt's prefill without computing it again. */
hg_status hg_kv_truncate(hg_model *m, int n);

typedef struct hg_sampling {
    float temperature; /* 0: greedy (argmax, lowest id on ties) */
    int top_k;         /* keep the k most likely tokens (and ties with the k-th); 0: off */
    float top_p;       /* keep the fewest most likely tokens whose probability sums to
                          >= top_p (and ties); 0 or 1: off */
} hg_sampling;
/* Samples one id from logits (V floats, modified in place; -inf allowed, NaN and +inf
 * are errors). rng is the caller's state: a seed to start, advanced by each draw, so a
 * seed gives the same sequence on every machine. */
hg_status hg_sample(float *logits, int V, const hg_sampling *s, uint64_t *rng, int32_t *out);
/* The repetition penalty of CTRL (Keskar et al., 2019), as transformers applies it: the
 * logit of each distinct id in ids[0..n) (the context so far: prompt and generated
 * tokens) is divided by penalty when positive and multiplied by it when negative, so a
 * penalty > 1 makes the tokens already seen less likely. Apply it to the raw logits
 * (V floats, modified in place), before hg_sample's temperature, top-k and top-p; greedy
 * sampling sees it too. penalty must be finite and > 0, and 1 changes nothing; ids must
 * lie in [0, V). An id listed several times is penalised once. Uses V/8 bytes of
 * temporary memory (HG_ERR_NOMEM when there are none). */
hg_status hg_apply_repetition_penalty(float *logits, int V, const int32_t *ids, size_t n, float penalty);
/* Copies every parameter from src into dst (same config; e.g. a training model into an
 * inference model). Empties dst's KV cache. */
hg_status hg_model_copy_params(hg_model *dst, const hg_model *src);

/* ---------------------------------------------------------- Hugging Face */

/* A Hugging Face folder holds config.json, the weights (model.safetensors, or shards
 * listed by model.safetensors.index.json; F32, F16, BF16 or F64, converted to fp32) and
 * the tokenizer (tokenizer.json, or GPT-2's vocab.json and merges.txt:
 * hg_tokenizer_load(dir)). handgrad reads and writes GPT2LMHeadModel, LlamaForCausalLM,
 * MistralForCausalLM, Qwen2ForCausalLM and Qwen3ForCausalLM folders. The mapping of
 * names, layouts and config keys is in docs/formats.md. */

typedef struct hg_tokenizer hg_tokenizer; /* handgrad_data.h */

/* Reads config.json. Every key is mapped, checked to hold the value handgrad computes,
 * or known not to change the computation; any other key (a mixture of experts, a
 * rope_scaling type other than llama3, ...) is refused by name. A sliding window caps
 * max_seq_len at the window, where it equals full causal attention. */
hg_status hg_hf_config_load(const char *path, hg_config *out);
/* The transformers class a config.json names (e.g. "Phi3ForCausalLM"), as handgrad
 * reads it: a class handgrad does not read is refused as by hg_hf_config_load. */
hg_status hg_hf_config_class(const char *path, const char **class_name);
/* Creates a model from DIR's config.json and weights. opt as for hg_model_create
 * (seq_len 0: the model's context). Every tensor must be there with its exact shape,
 * and no other; the message names the file and tensor. */
hg_status hg_model_load_hf(hg_model **out, const char *dir, const hg_options *opt);

/* ---------------------------------------------------------- PEFT adapters */

/* LoRA adapters as PEFT shares them (docs/formats.md, "PEFT folders"): a folder with
 * adapter_config.json and adapter_model.safetensors, whose tensors are named after the
 * base model's Hugging Face modules ("base_model.model.model.layers.0.self_attn.q_proj.
 * lora_A.weight"). A model takes the class it was loaded as (hg_model_load_hf), else
 * hg_hf_architecture's. */
typedef struct hg_peft_config {
    hg_lora lora;         /* r, alpha, dropout, rslora, init; the splits and targets are
                             resolved against a model by hg_hf_lora_targets */
    char targets[1024];   /* target_modules, comma-separated */
    char base_model[512]; /* base_model_name_or_path, "" when null */
} hg_peft_config;
/* Reads DIR/adapter_config.json (or an image of one, named `name` in messages). A key
 * that asks for what plain LoRA does not compute (DoRA, a rank_pattern, modules_to_save,
 * bias other than "none", ...) is refused by name, as is an unknown key. */
hg_status hg_peft_config_load(const char *dir, hg_peft_config *out);
hg_status hg_peft_config_parse(const char *name, const char *text, size_t len, hg_peft_config *out);
/* Resolves PEFT target module names (comma-separated, e.g. "q_proj,v_proj" or GPT-2's
 * "c_attn,c_proj", matched as PEFT matches them: a module's name or its last components)
 * against the linear layers of cfg as class hf_class stores them (NULL: the config's
 * default), into lora's split and targets. A name that matches none is refused, naming
 * it and the class's layers. */
hg_status hg_hf_lora_targets(const hg_config *cfg, const char *hf_class, const char *targets, hg_lora *lora);
/* Translates freeze globs over Hugging Face tensor names of cfg as class hf_class stores
 * it ("model.layers.*.mlp.*", "model.embed_tokens.weight"; handgrad's own names and "all"
 * are taken too) into hg_options.freeze's list of handgrad names, in out (cap bytes). A
 * glob that matches nothing, or part of a tensor handgrad fuses (q_proj without k_proj and
 * v_proj), is refused, naming it. */
hg_status hg_hf_freeze_names(const hg_config *cfg, const char *hf_class, const char *globs, char *out, size_t cap);
/* Loads DIR/adapter_model.safetensors into the adapters of m, created with the
 * matching hg_options.lora. Every adapter must be there with its shape, finite, and no
 * other tensor; else nothing is written and the file and tensor are named. */
hg_status hg_peft_load(hg_model *m, const char *dir);
/* Writes m's adapters as a PEFT folder DIR (which must not exist or be empty), through
 * DIR.tmp renamed when whole; base_model (may be NULL) goes into base_model_name_or_path. */
hg_status hg_peft_save(const hg_model *m, const char *dir, const char *base_model);
/* Folds the adapters into the base weights, W += s (B A)^T, and zeroes each B: the model
 * computes as before, and hg_model_save_hf writes the merged model. */
hg_status hg_lora_merge(hg_model *m);

/* The token ids generation needs: bos_token_id and eos_token_id (one or a list) from
 * DIR/generation_config.json, then DIR/config.json for what that lacks; bos -1 and
 * n_eos 0 when neither file gives them. */
#define HG_HF_MAX_EOS 8
typedef struct hg_hf_special {
    int32_t bos;
    int32_t eos[HG_HF_MAX_EOS];
    int n_eos;
} hg_hf_special;
hg_status hg_hf_special_ids(const char *dir, hg_hf_special *out);
/* Copies the files that ride along with a folder's tokenizer (tokenizer_config.json,
 * special_tokens_map.json, generation_config.json), those present, from one folder to
 * another, each written atomically. `train` keeps them in every checkpoint of a run
 * that started from a Hugging Face folder, so generate and export still find its eos
 * ids. */
hg_status hg_hf_copy_extras(const char *from, const char *to);

/* How hg_model_save_hf_as writes a folder. Zero is a float32 folder of the default
 * architecture. */
typedef struct hg_hf_export {
    const char *architecture; /* transformers' class, e.g. "MistralForCausalLM"; NULL:
                                 hg_hf_architecture(cfg) */
    int bf16;                 /* 1: weights in bfloat16, rounded to nearest even;
                                 0: float32, the parameters' exact bits */
    const char *copy_from;    /* a folder whose tokenizer_config.json,
                                 special_tokens_map.json and generation_config.json are
                                 copied when present (the source model's); may be NULL */
    int64_t max_shard_bytes;  /* > 0: weights larger than this go into shards of at most
                                 this many bytes (a larger tensor alone),
                                 model-0000i-of-0000k.safetensors, with
                                 model.safetensors.index.json; 0: one model.safetensors */
} hg_hf_export;
/* The class a config is written as by default: GPT2LMHeadModel when it is GPT-2's
 * architecture, Qwen3ForCausalLM with a q/k norm, Qwen2ForCausalLM with q/k/v biases
 * only, else LlamaForCausalLM. */
const char *hg_hf_architecture(const hg_config *cfg);
/* Writes a folder that transformers' AutoModelForCausalLM.from_pretrained loads:
 * config.json, model.safetensors or its shards (transformers' names and layouts; no
 * lm_head when tied) and, when tok is given (no more ids than the model's vocab_size), its files
 * (tokenizer.json as it was read, or vocab.json, merges.txt and tokenizer_config.json).
 * dir must not exist or be empty; the files are written into dir.tmp, which is renamed
 * to dir when whole, so a failure leaves no partial folder. An architecture that cannot
 * express the model is refused, naming the config field. */
hg_status hg_model_save_hf_as(const hg_model *m, const hg_tokenizer *tok, const char *dir, const hg_hf_export *how);
/* hg_model_save_hf_as with the defaults. */
hg_status hg_model_save_hf(const hg_model *m, const hg_tokenizer *tok, const char *dir);
/* Makes folder dir, where hg_model_save wrote m's weights as model.safetensors, a folder
 * transformers' from_pretrained loads: writes config.json (hg_hf_architecture's class)
 * and, with tok, the tokenizer's files. HG_ERR_UNSUPPORTED, naming the field or site op,
 * when no Hugging Face class holds the model (hg_model_save then wrote handgrad's own
 * layout). handgrad train calls it for every checkpoint. */
hg_status hg_hf_describe(const hg_model *m, const hg_tokenizer *tok, const char *dir);

/* ----------------------------------------------------------- checkpoints */

/* Weights are a safetensors file of F32 tensors. When a Hugging Face class holds the
 * model (hg_hf_architecture), they are in that class's names and layouts with metadata
 * "format" "pt", "handgrad" "weights", "version" "3", "config" (the hg_config as JSON)
 * and "architecture" (the class), so a folder with hg_hf_describe's config.json loads
 * in transformers as it is. Otherwise (an op of one's own, a config no class holds)
 * they are one tensor per parameter under hg_param_info's name and shape, metadata
 * "format" "handgrad-weights", "version" "2" and "config"; both load. The optimizer
 * state is a second file: "m.<name>" and "v.<name>" (AdamW's moments) and the step,
 * RNG counter and data position in its metadata. Every write goes to a temporary name,
 * is fsync'd and renamed into place, so a failed write leaves the old file whole.
 * Layout and fields: docs/formats.md. */

/* Writes the parameters to path. */
hg_status hg_model_save(const hg_model *m, const char *path);
/* Reads a weights file's config (the shape fields and dropout). */
hg_status hg_checkpoint_config(const char *path, hg_config *out);
/* Loads parameters saved from a model of the same shape; the model is unchanged when the
 * file is refused (another shape, a missing tensor, a dtype other than F32). */
hg_status hg_model_load(hg_model *m, const char *path);

/* What a training run needs, besides the weights, to continue exactly. */
typedef struct hg_train_state {
    int64_t step;              /* training steps done (skipped ones included) */
    uint64_t tokens;           /* training tokens consumed */
    uint64_t epoch, batch;     /* the next training batch (hg_loader_position) */
    int B, T;                  /* loader geometry the position refers to, */
    int world_size;            /* and the ranks that read it (B is the global batch:
                                  each rank read B / world_size of it) */
    uint64_t seed;             /* the run's seed (data order, dropout) */
} hg_train_state;

/* Writes AdamW's m and v, its step count, the dropout RNG counter and *s to path. A
 * ZeRO-1 model (shards > 1) saves with hg_dist_optimizer_save instead. */
hg_status hg_optimizer_save(const hg_model *m, const hg_train_state *s, const char *path);
/* Restores them into a training model of the same shape, and fills *s. The file holds
 * whole tensors, so it loads on any number of ranks: a ZeRO-1 model keeps its slice. */
hg_status hg_optimizer_load(hg_model *m, const char *path, hg_train_state *s);

/* A run folder holds checkpoints DIR/ckpt_NNNNNNNN/ (model.safetensors,
 * optimizer.safetensors and the run's own files). A checkpoint is written into
 * ckpt_NNNNNNNN.tmp/ and renamed when whole, so a folder under its final name is
 * complete. begin creates the temporary folder (tmp_dir receives its path); commit
 * syncs and renames it (replacing a checkpoint of the same step); abort removes it. */
hg_status hg_checkpoint_begin(const char *run_dir, int64_t step, char *tmp_dir, size_t cap);
hg_status hg_checkpoint_commit(const char *run_dir, int64_t step, const char *tmp_dir);
void hg_checkpoint_abort(const char *tmp_dir);
/* Removes all but the newest keep checkpoints (each renamed to ckpt_N.del, then
 * deleted), and leftover temporary folders. Symlinks are neither counted nor followed. */
hg_status hg_checkpoint_prune(const char *run_dir, int keep);
/* The newest checkpoint folder in run_dir (ckpt_N folders; symlinks are skipped);
 * HG_ERR_IO when there is none; HG_ERR_FORMAT when the newest has no model.safetensors
 * or its optimizer state records another step than N. */
hg_status hg_checkpoint_latest(const char *run_dir, char *ckpt_dir, size_t cap, int64_t *step);
/* The weights file behind path: a .safetensors file, a checkpoint folder, or a run
 * folder (its newest checkpoint). */
hg_status hg_checkpoint_resolve(const char *path, char *weights, size_t cap);

/* Writes a whole file atomically (temporary name, fsync, rename, fsync the folder). */
hg_status hg_write_file_atomic(const char *path, const void *data, size_t len);

/* --------------------------------------------------------------- numbers */

/* FLOPs of one training step over B*T tokens: 6*N*tokens + 12*L*C*T*tokens, with N
 * the parameter count without the position embedding (the PaLM/llm.c convention) and
 * without site ops' parameters (their FLOPs are unknown to the library). */
double hg_train_flops(const hg_config *cfg, int B, int T);

/* A large oneDNN sgemm timed on `threads` threads (0: all), in GFLOP/s: the machine's
 * practical ceiling, measured in the same process as what it is compared with. */
hg_status hg_sgemm_peak_gflops(int threads, double *gflops);
/* The machine's memory bandwidth on `threads` threads (0: all), in GB/s: STREAM's triad
 * over arrays far larger than the caches, best of 7, counting each array once (12 bytes
 * an element): the ceiling of a memory-bound op, measured in the same process. */
hg_status hg_memory_bandwidth(int threads, double *gbps);
/* The same ceiling for opt->device and opt->precision: the sgemm above on the CPU; on
 * CUDA the median of ten 8192^3 cuBLASLt GEMMs on random data in the model's precision
 * (fp32 accumulation), timed with CUDA events. */
hg_status hg_gemm_peak_gflops(const hg_options *opt, double *gflops);

#if defined(__GNUC__) && !defined(__CUDACC__)
#pragma GCC visibility pop
#endif

#ifdef __cplusplus
}
#endif

/* Tokenizer, token shards and the data loader. */
#include "handgrad_data.h"
/* Data-parallel training: communicators, gradient all-reduce, ZeRO-1. */
#include "handgrad_dist.h"

#endif /* HANDGRAD_H */
