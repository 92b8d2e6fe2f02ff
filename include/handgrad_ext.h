/* handgrad_ext.h - extending handgrad: your own kernels for built-in ops, ops of your
 * own at sites of the decoder (with parameters, saved tensors and scratch in the memory
 * plan), a gradient checker for any op, and an allocation and timing harness.
 * docs/extending.md says how to use each.
 *
 * Example: check a hand-written gradient, prove it allocates nothing, time it.
 *
 *     // E(x) = sum_i x_i^3: forward and backward on plain float arrays
 *     static hg_status fwd(void *ctx, const float *const *in, float *const *out) {
 *         const int64_t n = *(const int64_t *)ctx;
 *         double e = 0;
 *         for (int64_t i = 0; i < n; i++) e += in[0][i] * in[0][i] * in[0][i];
 *         out[0][0] = (float)e;
 *         return HG_OK;
 *     }
 *     static hg_status bwd(void *ctx, const float *const *in, const float *const *out,
 *                          const float *const *dout, float *const *din) {
 *         const int64_t n = *(const int64_t *)ctx;
 *         for (int64_t i = 0; i < n; i++) din[0][i] = 3 * in[0][i] * in[0][i] * dout[0][0];
 *         return HG_OK;
 *     }
 *     ...
 *     int64_t n = 100;
 *     hg_op_def op = {.name = "cube_sum", .n_in = 1, .n_out = 1, .in_name = {"x"},
 *                     .out_name = {"E"}, .in_size = {n}, .out_size = {1},
 *                     .forward = fwd, .backward = bwd, .ctx = &n};
 *     hg_gradcheck_report r;
 *     hg_gradcheck(&op, NULL, &r);          // r.ok; r.in[0].err, r.in[0].index
 *     hg_bench_result b;
 *     hg_bench_op(call_bwd, &args, 1000, &b); // b.median_s; b.allocs when counted
 *
 * The gradient convention is the library's own (src/ops/README.md): an activation's
 * gradient is written (din = ...), a parameter's accumulates (dw += ...).
 *
 * Overriding a built-in op. A model runs every op through a table of kernels (its
 * backend). hg_override_* replaces entries of one model's table with yours; they get
 * the same arguments the built-in gets, as its contract in src/ops/<op>.h documents
 * (shapes on every pointer, who writes what). Each override names the device it is
 * for: a model on another device keeps its built-in. Memory stays planned: your kernel
 * gets the buffers the built-in would have got and must not keep pointers to them. On a
 * model in bf16 (hg_options.precision, CPU or CUDA), activations and weights are bf16
 * though typed float *; parameter gradients, the norms' statistics and lse stay fp32.
 */
#ifndef HANDGRAD_EXT_H
#define HANDGRAD_EXT_H

#include "handgrad.h"

#ifdef __cplusplus
extern "C" {
#endif
#if defined(__GNUC__) && !defined(__CUDACC__)
#pragma GCC visibility push(default) /* what a shared libhandgrad exports: this API only */
#endif

/* ------------------------------------------------------- overriding built-ins */

/* The kernel table a model runs: the first argument of every kernel. */
typedef struct hg_backend hg_backend;
/* Host worker threads the kernels of this backend may use; 1 for be NULL (a site op
 * called by hg_gradcheck_site). */
int hg_backend_threads(const hg_backend *be);

/* GELU, tanh approximation (src/ops/gelu.h): out (n) = gelu(inp); dinp (n) =
 * gelu'(inp) * dout, where dinp may alias dout. Called on the MLP's c_fc output: in
 * forward, recomputed in backward (the MLP keeps only the pre-activation), and its
 * backward. The same types as the contract's. */
typedef void hg_gelu_forward_fn(hg_backend *be, float *out, const float *inp, size_t n);
typedef void hg_gelu_backward_fn(hg_backend *be, float *dinp, const float *inp, const float *dout, size_t n);
/* Replaces GELU's forward and/or backward (NULL keeps the built-in) for m when m runs on
 * device. A backend that fuses GELU into the MLP's matmuls runs them unfused from then
 * on, so that your kernels are the ones called. */
hg_status hg_override_gelu(hg_model *m, hg_device device, hg_gelu_forward_fn *forward, hg_gelu_backward_fn *backward);

/* The MLP activations other than GELU (src/ops/activation.h): kind SwiGLU, pre (N, 2F)
 * = gate | up, out (N, F) = silu(gate) * up; kind ReLU^2, pre (N, F), out = relu(pre)^2.
 * Backward: dpre (N, FI) from pre and dout (N, F). */
typedef void hg_activation_forward_fn(hg_backend *be, hg_mlp_kind kind, float *out, const float *pre, int N, int F);
typedef void hg_activation_backward_fn(hg_backend *be, hg_mlp_kind kind, float *dpre, const float *pre,
                                       const float *dout, int N, int F);
hg_status hg_override_activation(hg_model *m, hg_device device, hg_activation_forward_fn *forward,
                                 hg_activation_backward_fn *backward);

/* Causal multi-head self-attention (src/ops/attention.h). The shape of a call: */
typedef struct hg_attention_shape {
    int B, T, NH, hs; /* C = NH * hs: the width of the output */
    int causal;       /* 1 in a model; 0 only in the attention benchmark */
    int NKV;          /* key/value heads, dividing NH: query head h reads kv head
                         h / (NH/NKV) (grouped-query attention); 0 means NH */
    float softcap;    /* > 0: each scaled score z becomes softcap tanh(z / softcap) before
                         the softmax (Gemma 2's attn_logit_softcapping); 0: none */
    int window;       /* > 0: query t sees only the last `window` keys, t - window + 1 .. t
                         (sliding-window attention); 0: every earlier key */
    const int32_t *pos; /* (B,T) or NULL: each token's position in its document (hg_set_
                         positions); query t sees no key before its document's start,
                         t - pos[t] (packed documents). NULL: a row is one document.
                         In the backend's memory, as qkv (a device copy on CUDA) */
} hg_attention_shape;
/* The first key query t of row b may see: its document's start and its window's, and
 * with neither 0. Never decreasing in t (documents are contiguous), which lets kernels
 * skip whole blocks of keys. */
static inline int hg_attention_first_key(const hg_attention_shape *s, int b, int t) {
    int lo = s->pos ? t - s->pos[(size_t)b * s->T + t] : 0;
    if (s->window > 0 && t - s->window + 1 > lo) lo = t - s->window + 1;
    return lo > 0 ? lo : 0;
}
/* out (B,T,C) = softmax(q k^T / sqrt(hs), causal) v per head (scores capped when
 * s->softcap is set; query t of row b attends to keys hg_attention_first_key(s, b, t)
 * .. t), heads concatenated; qkv
 * (B,T,W), W = (NH + 2 NKV) hs, holds q (NH heads) | k (NKV heads) | v (NKV heads) per
 * row; lse (B,NH,T) = each row's log-sum-exp of its scaled (and capped) scores, kept for backward.
 * scratch: hg_attention_scratch_bytes(m) bytes, planned for the built-in kernels. */
typedef hg_status hg_attention_forward_fn(hg_backend *be, float *out, float *lse, const float *qkv,
                                          const hg_attention_shape *s, void *scratch);
/* dqkv (B,T,W) = the gradient at qkv, written in full (a kv head's dK and dV summed over
 * the query heads that read it), from dout (B,T,C), qkv, out and lse. */
typedef hg_status hg_attention_backward_fn(hg_backend *be, float *dqkv, const float *dout, const float *qkv,
                                           const float *out, const float *lse, const hg_attention_shape *s,
                                           void *scratch);
/* Replaces attention's forward and/or backward (NULL keeps the built-in) for m when m
 * runs on device. Generation with the KV cache keeps the built-in cached kernel. A
 * status other than HG_OK from your kernel stops the step. */
hg_status hg_override_attention(hg_model *m, hg_device device, hg_attention_forward_fn *forward,
                                hg_attention_backward_fn *backward);
/* Bytes of the attention scratch the model planned (what an override may use). */
size_t hg_attention_scratch_bytes(const hg_model *m);

/* The norms (src/ops/layernorm.h), over the last dimension of (N, C):
 *   LayerNorm: out = (inp - mean) * rstd * w + b,  rstd = 1/sqrt(var + eps)
 *   RMSNorm:   out = inp * rstd * w,               rstd = 1/sqrt(mean(inp^2) + eps)
 * w and b may be NULL (weight 1, bias 0: a norm without affine parameters); RMSNorm never
 * has b, and neither reads nor writes mean (which may then be NULL). */
typedef struct hg_norm_spec {
    int rms; /* 0 LayerNorm, 1 RMSNorm */
    float eps;
    int branch; /* 1: inp (and backward's dinp) is a branch output in the compute type,
                   not the residual stream in the residual type: a post norm
                   (hg_block_kind); the two types differ in bf16 on the CPU only */
} hg_norm_spec;
/* out (N,C) = norm(inp); mean, rstd (N) kept for backward. Called on the first block's
 * ln_1, on the post norms of the postnorm and sandwich blocks (ns->branch), and on ln_f
 * after a site op: every other norm follows a residual add, and runs the residual form. */
typedef void hg_layernorm_forward_fn(hg_backend *be, float *out, float *mean, float *rstd, const float *inp,
                                     const float *w, const float *b, int N, int C, const hg_norm_spec *ns);
/* Dropout on a branch output: NULL when the model trains without it. Element i of the
 * branch is multiplied by hg_dropout_factor(drop, i): 0 or 1/(1-p), from a counter-based
 * generator, so that backward regenerates the mask. It is a host function: a CUDA kernel
 * of the residual form cannot call it, so such an override suits models without dropout. */
typedef struct hg_dropout hg_dropout;
float hg_dropout_factor(const hg_dropout *drop, uint64_t i);
/* res_out (N,C) = res_in + dropout(delta); then the norm of res_out into out, mean, rstd. */
typedef void hg_residual_layernorm_forward_fn(hg_backend *be, float *res_out, float *out, float *mean,
                                              float *rstd, const float *res_in, const float *delta,
                                              const float *w, const float *b, int N, int C,
                                              const hg_dropout *drop, const hg_norm_spec *ns);
/* dinp (N,C) += the gradient wrt inp (it is the residual stream's gradient: it
 * accumulates); dw (C) += ..., db (C) += ... (NULL when w, b are, or are frozen). inp is the
 * norm's input, mean and rstd the forward's. scratch: hg_norm_scratch_bytes(m) bytes
 * (the built-in keeps per-thread partial sums of dw and db there). */
typedef void hg_layernorm_backward_fn(hg_backend *be, float *dinp, float *dw, float *db, const float *dout,
                                      const float *inp, const float *w, const float *mean, const float *rstd,
                                      int N, int C, float *scratch, const hg_norm_spec *ns);
/* Replaces the norm's forward, its residual form and/or its backward (NULL keeps the
 * built-in) for m when m runs on device: every block's ln_1 and ln_2 and the final norm.
 * The q/k norm (a different op) keeps the built-in. */
hg_status hg_override_norm(hg_model *m, hg_device device, hg_layernorm_forward_fn *forward,
                           hg_residual_layernorm_forward_fn *residual_forward, hg_layernorm_backward_fn *backward);
/* Bytes of the norm backward's scratch the model planned. */
size_t hg_norm_scratch_bytes(const hg_model *m);

/* The linear layers of the decoder block (src/ops/matmul.h): q|k|v, the attention output
 * projection, the MLP's first (gate|up under SwiGLU) and second layers. Weights are
 * input-major, w (K,N), as Hugging Face's Conv1D stores them (a Linear's weight
 * transposed). The classifier is its own fused op and keeps the built-in. */
/* out (M,N) = inp (M,K) @ w (K,N) + bias (N); bias may be NULL. */
typedef hg_status hg_matmul_forward_fn(hg_backend *be, float *out, const float *inp, const float *w,
                                       const float *bias, int M, int K, int N);
/* dinp (M,K) = dout @ w^T (written); dw (K,N) += inp^T @ dout (dw NULL: w is frozen,
 * no product); dbias (N) += the column sums of dout (dbias NULL: no bias, or frozen). */
typedef hg_status hg_matmul_backward_fn(hg_backend *be, float *dinp, float *dw, float *dbias, const float *dout,
                                        const float *inp, const float *w, int M, int K, int N);
/* Replaces the linear layers' forward and/or backward (NULL keeps the built-in) for m
 * when m runs on device. A backend that fuses GELU into the MLP's matmuls runs them as
 * separate ops from then on, so that your kernels are the ones called. A status other
 * than HG_OK from your kernel stops the step. */
hg_status hg_override_matmul(hg_model *m, hg_device device, hg_matmul_forward_fn *forward,
                             hg_matmul_backward_fn *backward);

/* Overrides for every model of the process: hook(m, ctx) runs on each model that
 * hg_model_create builds (hg_model_load_hf's included), after its tables and weights and
 * before it returns, in the order the hooks were added. It is where a plugin loaded with
 * `handgrad --ops` installs its hg_override_* kernels, so that train, profile, bench and
 * generate run them. A status other than HG_OK fails the creation, and hg_last_error()
 * names the hook. */
typedef hg_status hg_model_hook_fn(hg_model *m, void *ctx);
/* Adds a hook under `name` (1 to HG_OP_NAME_MAX - 1 characters, unique; at most 8 hooks). */
hg_status hg_add_model_hook(const char *name, hg_model_hook_fn *hook, void *ctx);
/* Removes hook `name`; models already created keep what it installed. */
hg_status hg_remove_model_hook(const char *name);

/* ---------------------------------------------------------- gradient checker */

#define HG_OP_MAX_TENSORS 8

/* An op as the checker sees it: inputs (activations and parameters) and outputs, each a
 * flat float array of a fixed size. */
typedef struct hg_op_def {
    const char *name;
    int n_in, n_out;                           /* at most HG_OP_MAX_TENSORS each */
    const char *in_name[HG_OP_MAX_TENSORS];    /* for the report; may be NULL */
    const char *out_name[HG_OP_MAX_TENSORS];
    int64_t in_size[HG_OP_MAX_TENSORS];        /* elements, >= 1 */
    int64_t out_size[HG_OP_MAX_TENSORS];
    unsigned params;                           /* bit i: input i is a parameter, whose
                                                  gradient accumulates (+=) */
    /* out[k] (out_size[k]) from in; must write every output element. */
    hg_status (*forward)(void *ctx, const float *const *in, float *const *out);
    /* din[i] (in_size[i]) = d(sum_k dout[k] . out[k]) / d in[i]: written for an
     * activation, added for a parameter. out holds the forward's outputs. */
    hg_status (*backward)(void *ctx, const float *const *in, const float *const *out, const float *const *dout,
                          float *const *din);
    /* Optional: the forward in double. With it, finite differences run in double and the
     * float forward is checked against it too. */
    hg_status (*forward_f64)(void *ctx, const double *const *in, double *const *out);
    void *ctx;
} hg_op_def;

typedef struct hg_gradcheck_options {
    uint64_t seed;                   /* inputs and upstream gradients (default 1) */
    float lo[HG_OP_MAX_TENSORS];     /* input i uniform in [lo[i], hi[i]]; both 0: [-1, 1] */
    float hi[HG_OP_MAX_TENSORS];
    int64_t max_points;              /* elements checked per input, spread evenly; 0: all */
    double tol;                      /* pass mark for relative errors; 0: 1e-4 with
                                        forward_f64, else 1e-2 */
} hg_gradcheck_options;

hg_gradcheck_options hg_gradcheck_options_default(void);

/* The worst element of one tensor: relative error |got - want| / max(|want|, floor),
 * floor = 1e-3 * the tensor's largest |want| (so that entries near zero are judged
 * against the tensor's scale). */
typedef struct hg_gradcheck_worst {
    double err;
    int64_t index; /* -1: nothing compared */
    double got, want;
} hg_gradcheck_worst;

typedef struct hg_gradcheck_report {
    int ok;                                       /* every check passed */
    hg_gradcheck_worst in[HG_OP_MAX_TENSORS];     /* backward against finite differences */
    hg_gradcheck_worst out[HG_OP_MAX_TENSORS];    /* forward against forward_f64 (with it) */
    int accumulates[HG_OP_MAX_TENSORS];           /* parameters: 1 when the gradient was
                                                     added to what the buffer held */
    int64_t unwritten_out[HG_OP_MAX_TENSORS];     /* an element forward left unwritten, or -1 */
    int64_t unwritten_in[HG_OP_MAX_TENSORS];      /* an activation gradient element backward
                                                     left unwritten, or -1 */
    double fd_noise;                              /* estimated relative error of the finite
                                                     differences themselves */
    char summary[512];                            /* the first failure, or "ok" */
} hg_gradcheck_report;

/* Runs op on random inputs (never zeros) with its outputs and activation gradients
 * poisoned (NaN) first, and compares its backward with central finite differences of
 * L = sum_k dout[k] . out[k] for random dout: in double when the op has forward_f64, else
 * in float, with the differences' own error estimated from two step sizes. Parameter
 * gradient buffers start from random values, and the backward's result is taken as the
 * change, so an op that overwrites instead of adding fails. opt may be NULL. Returns
 * HG_OK when the check ran (r->ok says whether the op passed), else the op's or the
 * definition's error. */
hg_status hg_gradcheck(const hg_op_def *op, const hg_gradcheck_options *opt, hg_gradcheck_report *r);

/* ------------------------------------------------------- ops at decoder sites */

/* An op of your own at a site of the decoder (hg_site, handgrad.h): registered once per
 * process by name, then placed by a config that names it (hg_config.site_op, or the
 * config fields op_attn_proj, op_mlp_act, op_final_norm). Its parameters join the
 * model's parameter table, so hg_param_*, checkpoints, data parallelism and AdamW see
 * them (2-D ones with weight decay). The tensors it saves for backward and its scratch
 * join the memory plan: the step still allocates nothing. The profiler records its
 * calls under its name. Checkpoints name the op through the config; a model whose
 * config names an op that is not registered is refused with the op's name. Ops run on
 * CPU models; a CUDA model that names one is refused with HG_ERR_UNSUPPORTED.
 *
 * Sketch: a per-channel gain after the attention projection, y = x * g.
 *
 *     static void sizes(void *ctx, const hg_site_shape *s, hg_site_sizes *z) {
 *         z->param[0][0] = s->C;                                   // g: (C)
 *     }
 *     static hg_status init(void *ctx, const hg_site_shape *s, int layer,
 *                           float *const *p, uint64_t seed) {
 *         for (int c = 0; c < s->C; c++) p[0][c] = 1.0f;
 *         return HG_OK;
 *     }
 *     static hg_status fwd(void *ctx, const hg_site_call *a) {     // y = x * g
 *         for (int64_t i = 0; i < (int64_t)a->N * a->in_width; i++)
 *             a->y[i] = a->x[i] * a->w[0][i % a->in_width];
 *         return HG_OK;
 *     }
 *     static hg_status bwd(void *ctx, const hg_site_call *a) { ... } // dx = dy * g; dg += dy * x
 *     ...
 *     hg_site_op op = {.name = "gain", .site = HG_SITE_ATTN_PROJ, .n_params = 1,
 *                      .param_name = {"g"}, .sizes = sizes, .init = init,
 *                      .forward = fwd, .backward = bwd};
 *     hg_register_op(&op);
 *     hg_config_set(&cfg, "op_attn_proj", "gain");                 // then hg_model_create
 *
 * Parameter i of the op in block l is named "h.{l}.{op}.{param_name[i]}"; at the final
 * site "{op}.{param_name[i]}". */

/* The shapes an op is planned for. */
typedef struct hg_site_shape {
    int N;                   /* rows: the model's batch * seq_len, the most a call passes */
    int C;                   /* d_model */
    int in_width, out_width; /* (C, C) at HG_SITE_ATTN_PROJ and HG_SITE_FINAL_NORM; (FI, F)
                                at HG_SITE_MLP_ACT */
    int threads;             /* the model's worker threads (for per-thread scratch) */
} hg_site_shape;

/* The shape config cfg gives site s's op for N rows and `threads` threads (what a model
 * plans it for, and what hg_gradcheck_site can check it on). */
hg_site_shape hg_site_shape_of(const hg_config *cfg, hg_site s, int N, int threads);

/* What an op needs for a shape. Parameter shapes may depend on C and the widths, not on
 * N or threads. */
typedef struct hg_site_sizes {
    int64_t param[HG_OP_MAX_TENSORS][2]; /* parameter i: (rows) with [1] = 0, or (rows, cols) */
    int64_t saved[HG_OP_MAX_TENSORS];    /* floats of saved tensor i: forward writes it and
                                            the same block's backward reads it; one copy per
                                            block in a training model */
    int64_t scratch_bytes;               /* shared by every call; nothing survives a call */
} hg_site_sizes;

/* One call of an op. Tensors are row-major floats in the model's memory. */
typedef struct hg_site_call {
    hg_backend *be;            /* hg_backend_threads(be) workers may run; NULL in
                                  hg_gradcheck_site */
    int layer;                 /* the block, or -1 at HG_SITE_FINAL_NORM */
    int B, T, N;               /* N = B * T rows in this call (at most the planned N) */
    int in_width, out_width;
    const float *x;            /* (N, in_width): the input, in forward and in backward */
    float *y;                  /* forward: (N, out_width), to be written in full */
    const float *dy;           /* backward: (N, out_width), the gradient at y */
    float *dx;                 /* backward: (N, in_width), to be written in full */
    const float *const *w;     /* parameter i, in its declared shape */
    float *const *dw;          /* backward: parameter i's gradient, to be added to (+=) */
    float *const *saved;       /* saved tensor i (its declared floats) */
    void *scratch;             /* scratch_bytes, 64-byte aligned */
    int recompute;             /* forward: 1 when the MLP site's output is recomputed in
                                  backward (the block keeps only its input) */
} hg_site_call;

typedef struct hg_site_op {
    const char *name;          /* 1 to HG_OP_NAME_MAX - 1 letters, digits, '_' or '-' */
    hg_site site;
    int n_params, n_saved;     /* each in [0, HG_OP_MAX_TENSORS] */
    const char *param_name[HG_OP_MAX_TENSORS]; /* 1 to 23 of the same characters each */
    /* Fills z (zeroed before the call) for shape s. Required. */
    void (*sizes)(void *ctx, const hg_site_shape *s, hg_site_sizes *z);
    /* A new model's initial parameters in block `layer` (-1 at the final site): param[i]
     * in host memory, in its declared shape; seed is the model's. Required when
     * n_params > 0. */
    hg_status (*init)(void *ctx, const hg_site_shape *s, int layer, float *const *param, uint64_t seed);
    /* y from x and w; may write saved. At HG_SITE_MLP_ACT it runs again in backward with
     * recompute = 1 and must give the same y. */
    hg_status (*forward)(void *ctx, const hg_site_call *c);
    /* dx (written) and dw (added to) from dy, x, w and saved. */
    hg_status (*backward)(void *ctx, const hg_site_call *c);
    void *ctx;
} hg_site_op;

/* The config field that names site s's op: "op_attn_proj", "op_mlp_act",
 * "op_final_norm" ("?" for no site). */
const char *hg_site_field(hg_site s);

/* Registers op, copying the definition and its strings (ctx stays a pointer). Refused,
 * naming the field: a count or the site out of range, a bad name, a missing function,
 * a name already registered, or negative sizes for a probe shape. */
hg_status hg_register_op(const hg_site_op *op);
/* Removes op `name` from the registry; models created with it keep their own copy. */
hg_status hg_unregister_op(const char *name);
/* The registered ops: how many, and op i (0 <= i < count) in the order of registration.
 * out's strings belong to the registry: valid until that op is unregistered. */
int hg_op_count(void);
hg_status hg_op_at(int i, hg_site_op *out);

/* hg_gradcheck of a site op for shape s: the checked inputs are x (N, in_width) and the
 * parameters, the output y. Saved tensors and scratch are allocated for the check, and
 * each backward follows a forward at the same inputs. */
hg_status hg_gradcheck_site(const hg_site_op *op, const hg_site_shape *s, const hg_gradcheck_options *opt,
                            hg_gradcheck_report *r);

/* ----------------------------------------------- allocation and timing harness */

typedef struct hg_bench_result {
    int runs;                        /* timed runs */
    int64_t calls_per_run;           /* calls in each timed run (short calls are batched) */
    double min_s, median_s, max_s;   /* seconds per call */
    int counted;                     /* allocations were counted (the program links
                                        handgrad_alloc_count); else the counts are -1 */
    int64_t allocs, alloc_bytes;     /* over all timed calls, outside oneDNN */
    int64_t onednn_allocs;           /* over all timed calls, inside oneDNN's primitive
                                        execution (its C API allocates in every call) */
} hg_bench_result;

/* Calls fn(ctx) once to warm up, then times `runs` runs of it. A call shorter than
 * about 20 us is repeated within a run so the clock's resolution does not matter.
 * Allocations during the timed calls are counted when the program links the
 * handgrad_alloc_count object library, which interposes malloc and friends; oneDNN's
 * own, inside its primitive execution, are counted apart. fn's first failure is
 * returned. */
hg_status hg_bench_op(hg_status (*fn)(void *ctx), void *ctx, int runs, hg_bench_result *out);

#if defined(__GNUC__) && !defined(__CUDACC__)
#pragma GCC visibility pop
#endif

#ifdef __cplusplus
}
#endif

#endif
