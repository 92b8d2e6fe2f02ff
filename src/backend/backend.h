/* The backend interface: one entry per op, plus memory and sync.
 *
 * The model (src/model) is described once and drives every backend through this table;
 * nothing else differs between backends. Each op's contract (shapes, who writes what)
 * is in src/ops/<op>.h. */
#ifndef HG_BACKEND_H
#define HG_BACKEND_H

#include <stddef.h>

#include "handgrad.h"
#include "ops/adamw.h"
#include "ops/attention.h"
#include "ops/classifier.h"
#include "ops/encoder.h"
#include "ops/gelu.h"
#include "ops/layernorm.h"
#include "ops/matmul.h"

typedef struct hg_backend_ops hg_backend_ops;

struct hg_backend {
    const hg_backend_ops *ops;
    int threads; /* worker threads the ops may use */
    void *impl;  /* backend-private state */
};

struct hg_backend_ops {
    const char *name;
    void (*destroy)(hg_backend *be);

    /* memory: device allocations for tables and scratch (never called inside a step) */
    void *(*alloc)(hg_backend *be, size_t bytes);
    void (*free)(hg_backend *be, void *p);
    void (*zero)(hg_backend *be, void *p, size_t bytes);
    void (*upload)(hg_backend *be, void *dst, const void *host_src, size_t bytes);
    void (*download)(hg_backend *be, void *host_dst, const void *src, size_t bytes);
    void (*sync)(hg_backend *be);
    size_t (*workspace_bytes)(hg_backend *be); /* allocated at first use, outside the tables */

    hg_encoder_forward_fn *encoder_forward;
    hg_encoder_backward_fn *encoder_backward;
    hg_layernorm_forward_fn *layernorm_forward;
    hg_residual_layernorm_forward_fn *residual_layernorm_forward;
    hg_layernorm_backward_fn *layernorm_backward;
    hg_dropout_backward_fn *dropout_backward;
    hg_matmul_forward_fn *matmul_forward;
    hg_matmul_backward_fn *matmul_backward;
    hg_gelu_forward_fn *gelu_forward;
    hg_gelu_backward_fn *gelu_backward;
    hg_attention_forward_fn *attention_forward;
    hg_attention_backward_fn *attention_backward;
    hg_attention_scratch_fn *attention_scratch_bytes;
    hg_classifier_forward_fn *classifier_forward;
    hg_classifier_backward_fn *classifier_backward;
    hg_attention_cached_fn *attention_cached;
    hg_adamw_fn *adamw;
    hg_sumsq_fn *sumsq;
};

/* The CPU backend: fp32, OpenMP over `threads` threads, oneDNN for GEMMs. */
hg_status hg_backend_cpu_create(hg_backend **out, int threads);
/* Its op table, for size queries before any backend exists. */
const hg_backend_ops *hg_backend_cpu_ops(void);

#endif
