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
 * the range up to each spec's alloc are updated; the alignment gaps between specs are not. */
typedef struct hg_adamw_args {
    float *p;                 /* fp32 parameters (the masters), the whole `params` layout */
    const float *g;           /* fp32 gradients of the range: g[i - lo] for element i */
    float *m, *v;             /* fp32 moments of the range, likewise */
    void *w;                  /* compute copy (the whole `weights` layout) written from the
                                 new p in the backend's compute type, or NULL (p is it) */
    const hg_table *params, *weights;
    size_t lo, n;             /* the range, in floats of the `params` layout */
    hg_adamw_update u;
    int stochastic;           /* round w stochastically: Philox(seed, element, step) */
    uint64_t seed;
    uint32_t step;
} hg_adamw_args;

typedef void hg_adamw_fn(hg_backend *be, const hg_adamw_args *a);
/* *out = sum of x^2 over n elements, accumulated in double. */
typedef void hg_sumsq_fn(hg_backend *be, const float *x, size_t n, double *out);

#define HG_ADAMW_OPS(X)                                 \
    X(GRAD_NORM, "grad norm", OPTIMIZER, MEMORY)        \
    X(ADAMW, "adamw", OPTIMIZER, MEMORY)

/* Reads p, g, m, v and writes p, m, v, plus the compute copy: w_bytes an element when
 * there is one (0 when p is it). */
static inline hg_op_cost hg_adamw_cost(size_t n, double w_bytes) {
    hg_op_cost c = {14.0 * (double)n, (HG_COST_F4 * 7.0 + w_bytes) * (double)n};
    return c;
}
static inline hg_op_cost hg_sumsq_cost(size_t n) { return hg_elementwise_cost((double)n, 2.0, 1.0); }

#endif
