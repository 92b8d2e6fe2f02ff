/* The MLP activations other than GELU (ops/gelu.h), forward and backward. Legend as in
 * README.md; N rows, F the MLP width.
 *   SwiGLU: out = silu(gate) * up, silu(x) = x / (1 + exp(-x)); pre row = gate (F) | up (F)
 *   GeGLU:  out = gelu(gate) * up, GELU's tanh form (ops/gelu.h);   pre row = gate (F) | up (F)
 *   ReLU^2: out = max(x, 0)^2;                                  pre row = x (F) */
#ifndef HG_OPS_ACTIVATION_H
#define HG_OPS_ACTIVATION_H

#include "handgrad.h"
#include "ops/cost.h"

typedef struct hg_backend hg_backend;

/* out (N,F) = act(pre); pre (N,2F) for the gated kinds (hg_mlp_gated), (N,F) for ReLU^2. */
typedef void hg_activation_forward_fn(hg_backend *be, hg_mlp_kind kind, float *out, const float *pre, int N, int F);
/* dpre (same shape as pre) = d act / d pre * dout, written; dout (N,F). dpre may not
 * alias dout or pre. */
typedef void hg_activation_backward_fn(hg_backend *be, hg_mlp_kind kind, float *dpre, const float *pre,
                                       const float *dout, int N, int F);

#define HG_ACTIVATION_OPS(X)                                    \
    X(SWIGLU_FWD, "swiglu forward", FORWARD, MEMORY)            \
    X(SWIGLU_RECOMPUTE, "swiglu recompute", BACKWARD, MEMORY)   \
    X(SWIGLU_BWD, "swiglu backward", BACKWARD, MEMORY)          \
    X(GEGLU_FWD, "geglu forward", FORWARD, MEMORY)              \
    X(GEGLU_RECOMPUTE, "geglu recompute", BACKWARD, MEMORY)     \
    X(GEGLU_BWD, "geglu backward", BACKWARD, MEMORY)            \
    X(RELU2_FWD, "relu2 forward", FORWARD, MEMORY)              \
    X(RELU2_RECOMPUTE, "relu2 recompute", BACKWARD, MEMORY)     \
    X(RELU2_BWD, "relu2 backward", BACKWARD, MEMORY)

/* Forward reads pre (2F or F wide) and writes out; backward reads pre and dout and writes
 * dpre. SwiGLU's exp and divide are counted as 10 FLOPs. */
static inline hg_op_cost hg_activation_forward_cost(hg_mlp_kind kind, int N, int F) {
    double n = (double)N * F, in = hg_mlp_gated(kind) ? 2.0 : 1.0;
    return hg_elementwise_cost(n, kind == HG_MLP_SWIGLU ? 14.0 : kind == HG_MLP_GEGLU ? 11.0 : 2.0, in + 1.0);
}
static inline hg_op_cost hg_activation_backward_cost(hg_mlp_kind kind, int N, int F) {
    double n = (double)N * F, in = hg_mlp_gated(kind) ? 2.0 : 1.0;
    return hg_elementwise_cost(n, kind == HG_MLP_SWIGLU ? 20.0 : kind == HG_MLP_GEGLU ? 28.0 : 3.0, 2.0 * in + 1.0);
}

#endif
