/* AdamW update (decoupled weight decay, bias-corrected moments) in one pass over p, g, m, v,
 * and the squared gradient norm it clips with. */
#ifndef HG_OPS_ADAMW_H
#define HG_OPS_ADAMW_H

#include <stddef.h>
#include <stdint.h>

#include "core/table.h"
#include "ops/cost.h"

typedef struct hg_backend hg_backend;

typedef struct hg_adamw_update {
    float lr, beta1, beta2, eps, weight_decay; /* weight_decay: for HG_SPEC_DECAY tensors */
    float bias_correction1, bias_correction2;  /* 1 - beta^t */
    float grad_scale;                          /* clip coefficient, applied to g on the fly */
} hg_adamw_update;

/* One AdamW step over the range [lo, lo+n) of a parameter table's flat buffer (the whole
 * table, one tensor, or a ZeRO-1 slice that cuts tensors anywhere), in one pass (one
 * launch on a GPU). Per element, with g' = g * grad_scale (PyTorch's AdamW order):
 *   p -= lr * wd * p;  m = b1 m + (1-b1) g';  v = b2 v + (1-b2) g'^2;
 *   p -= (lr / bc1) * m / (sqrt(v) / sqrt(bc2) + eps),
 * wd = u.weight_decay on tensors flagged HG_SPEC_DECAY and 0 on the others. Elements of
 * the range up to each spec's alloc are updated; the alignment gaps between specs are not.
 * The step's p uses the fp32 m and v it computed, before they are rounded for keeping.
 * Stochastic rounding to bf16 adds 16 random bits below the mantissa and truncates, so
 * E[round(x)] = x; element e of the parameter buffer takes its bits from Philox(seed,
 * e / 8, HG_RNG_ROUNDING | k << 8, step): k = 0 for w, 1 for m, 2 for v. The draws do
 * not depend on how the buffer is cut into ranges or threads, and every backend makes
 * the same ones. */
typedef struct hg_adamw_args {
    float *p;                 /* fp32 parameters (the masters), the whole `params` layout */
    const void *g;            /* gradients of the range: g[i - lo] for element i, of type `grad` */
    void *m, *v;              /* moments of the range, likewise, of type `state` */
    void *w;                  /* compute copy (the whole `weights` layout) written from the
                                 new p in the backend's compute type, or NULL (p is it) */
    const hg_table *params, *weights;
    size_t lo, n;             /* the range, in floats of the `params` layout */
    hg_adamw_update u;
    hg_precision state;       /* the moments' type: FP32, or BF16, updated in fp32 and
                                 rounded back stochastically (below) */
    hg_precision grad;        /* the gradients' type: FP32, or BF16 (widened) */
    int stochastic;           /* round w stochastically (below) */
    uint64_t seed;
    uint32_t step;
} hg_adamw_args;

typedef void hg_adamw_fn(hg_backend *be, const hg_adamw_args *a);
/* *out = sum of x^2 over n elements of type `type` (FP32, or BF16: widened), accumulated
 * in double. */
typedef void hg_sumsq_fn(hg_backend *be, const void *x, hg_precision type, size_t n, double *out);

#define HG_ADAMW_OPS(X)                                 \
    X(GRAD_NORM, "grad norm", OPTIMIZER, MEMORY)        \
    X(ADAMW, "adamw", OPTIMIZER, MEMORY)

/* Reads p, g, m, v and writes p, m, v (state_bytes each), plus the compute copy: w_bytes
 * an element when there is one (0 when p is it). */
static inline hg_op_cost hg_adamw_cost(size_t n, double w_bytes, double state_bytes) {
    hg_op_cost c = {14.0 * (double)n, (HG_COST_F4 * 3.0 + 4.0 * state_bytes + w_bytes) * (double)n};
    return c;
}
static inline hg_op_cost hg_sumsq_cost(size_t n) { return hg_elementwise_cost((double)n, 2.0, 1.0); }

#endif
