/* The backend interface: one entry per op, plus memory and sync.
 *
 * The model (src/model) is described once and drives every backend through this table;
 * nothing else differs between backends. Each op's contract (shapes, who writes what)
 * is in src/ops/<op>.h. */
#ifndef HG_BACKEND_H
#define HG_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "handgrad.h"
#include "ops/activation.h"
#include "ops/adamw.h"
#include "ops/attention.h"
#include "ops/classifier.h"
#include "ops/encoder.h"
#include "ops/gelu.h"
#include "ops/layernorm.h"
#include "ops/lora.h"
#include "ops/matmul.h"
#include "ops/rope.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct hg_backend_ops hg_backend_ops;

/* Element types. Pointers to weights and activations are declared float * everywhere;
 * they hold elements of the backend's compute type: fp32, or bf16 in a backend created
 * with HG_PRECISION_BF16 (CPU or CUDA). The residual stream, its gradient and the
 * norms' weights and biases (the arguments the op contracts call residual-typed) hold the
 * backend's residual type: the compute type, or fp32 in a backend with residual_fp32 (the
 * CPU, as under PyTorch's autocast). Parameter gradients, the fp32 parameters (masters),
 * AdamW moments, LayerNorm mean/rstd, attention lse and losses are always fp32. */
static inline size_t hg_precision_bytes(hg_precision p) { return p == HG_PRECISION_FP32 ? 4 : 2; }

struct hg_backend {
    const hg_backend_ops *ops;
    int threads;            /* host worker threads the ops may use */
    hg_precision precision; /* the compute type of weights and activations */
    unsigned flags;         /* hg_options.flags */
    void *impl;             /* backend-private state */
};

struct hg_backend_ops {
    const char *name;
    size_t classifier_chunk_bytes; /* largest (chunk, Vp) logits buffer the classifier wants */
    /* 1: the residual type is fp32 whatever the compute type; 0: it is the compute type. */
    int residual_fp32;
    /* The compute types the kernels take: bit (1u << p) for each hg_precision p. */
    unsigned precisions;
    void (*destroy)(hg_backend *be);
    /* Limits of the kernels beyond the entries the table has (which ops a config needs and
     * whether they are here is checked by the model: gpt_check_ops): HG_OK when the kernels
     * take cfg's shapes in opt's precision, else the reason, naming the field (NULL: no
     * limits). */
    hg_status (*supports)(const hg_config *cfg, const hg_options *opt);
    /* HG_OK when the kernels take packed documents' positions (hg_set_positions), else
     * the refusal, naming them; NULL: they do. */
    hg_status (*positions)(hg_backend *be);

    /* memory: device allocations for tables and scratch (never called inside a step) */
    void *(*alloc)(hg_backend *be, size_t bytes);
    void (*free)(hg_backend *be, void *p);
    size_t (*mem_available)(hg_backend *be); /* bytes the backend may still allocate */
    void (*zero)(hg_backend *be, void *p, size_t bytes);
    void (*upload)(hg_backend *be, void *dst, const void *host_src, size_t bytes);
    void (*download)(hg_backend *be, void *host_dst, const void *src, size_t bytes);
    /* dst (n, compute type) = src (n, fp32): the compute copy of parameters */
    void (*to_compute)(hg_backend *be, void *dst, const float *src, size_t n);
    /* Waits for queued work; reports the first failure of any op since the last sync
     * (ops that return void record theirs here). */
    hg_status (*sync)(hg_backend *be);
    /* Waits for queued work and keeps any failure for the next sync (the profiler times
     * ops with it). NULL: the backend queues nothing (the CPU). */
    void (*wait)(hg_backend *be);
    /* The device stream ops are queued on (CUDA: a cudaStream_t), which a communicator must
     * follow (hg_comm_follow_backend). NULL: ops have finished when they return (the CPU). */
    void *(*stream)(hg_backend *be);
    /* Which kernels the last attention forward and backward ran, in words (for profile
     * and bench), or NULL where there is one kind. */
    const char *(*attention_kernels)(hg_backend *be);
    /* How often each GEMM epilogue ran fused in the GEMM library and how often as a
     * kernel of its own, since creation, in words (tests), or NULL where there is one way. */
    const char *(*gemm_epilogues)(hg_backend *be);
    /* Runs body(ctx), which issues ops only. A backend may record it once and replay it
     * while `key` is unchanged (a CUDA graph). NULL: the model calls body directly. */
    hg_status (*run_graph)(hg_backend *be, uint64_t key, hg_status (*body)(void *ctx), void *ctx);
    size_t (*workspace_bytes)(hg_backend *be); /* allocated at first use, outside the tables */

    hg_encoder_forward_fn *encoder_forward;
    hg_encoder_backward_fn *encoder_backward;
    hg_layernorm_forward_fn *layernorm_forward;
    hg_residual_layernorm_forward_fn *residual_layernorm_forward;
    hg_layernorm_backward_fn *layernorm_backward;
    hg_layernorm_scratch_fn *layernorm_scratch_bytes;
    hg_qk_norm_forward_fn *qk_norm_forward;
    hg_qk_norm_backward_fn *qk_norm_backward;
    hg_dropout_backward_fn *dropout_backward;
    hg_residual_add_fn *residual_add;
    hg_matmul_forward_fn *matmul_forward;
    hg_matmul_backward_fn *matmul_backward;
    hg_matmul_gelu_forward_fn *matmul_gelu_forward;
    hg_matmul_gelu_backward_fn *matmul_gelu_backward;
    hg_gelu_forward_fn *gelu_forward;
    hg_gelu_backward_fn *gelu_backward;
    hg_activation_forward_fn *activation_forward;
    hg_activation_backward_fn *activation_backward;
    hg_rope_forward_fn *rope_forward;
    hg_rope_backward_fn *rope_backward;
    hg_attention_forward_fn *attention_forward;
    hg_attention_backward_fn *attention_backward;
    hg_attention_scratch_fn *attention_scratch_bytes;
    hg_classifier_forward_fn *classifier_forward;
    hg_classifier_backward_fn *classifier_backward;
    hg_attention_cached_fn *attention_cached;
    hg_lora_forward_fn *lora_forward;
    hg_lora_backward_fn *lora_backward;
    hg_adamw_fn *adamw;
    hg_sumsq_fn *sumsq;
};

/* The residual type of a backend (or of a probe with ops and precision set). */
static inline hg_precision hg_residual_precision(const hg_backend *be) {
    return be->ops->residual_fp32 ? HG_PRECISION_FP32 : be->precision;
}

/* The backend for opt->device and opt->precision: the CPU, or CUDA when this build has it
 * and a usable GPU is present (HG_ERR_UNSUPPORTED otherwise, saying why). */
hg_status hg_backend_create(hg_backend **out, const hg_options *opt, int threads);
/* The op table for a device, for size queries before any backend exists; fails (saying
 * why) when this build lacks the device or its module cannot be loaded. Size queries
 * read only ops, threads and precision of the backend. The CUDA backend is a module
 * (cuda_module.h). */
hg_status hg_backend_ops_for(hg_device device, const hg_backend_ops **out);

/* The CPU backend: fp32 or bf16 (opt->precision), OpenMP over `threads` threads, oneDNN
 * for GEMMs. */
hg_status hg_backend_cpu_create(hg_backend **out, int threads, hg_precision precision);
const hg_backend_ops *hg_backend_cpu_ops(void);


#ifdef __cplusplus
}
#endif

#endif
