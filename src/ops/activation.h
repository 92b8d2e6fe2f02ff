/* The MLP activations other than GELU (ops/gelu.h), forward and backward. Legend as in
 * README.md; N rows, F the MLP width.
 *   SwiGLU: out = silu(gate) * up, silu(x) = x / (1 + exp(-x)); pre row = gate (F) | up (F)
 *   ReLU^2: out = max(x, 0)^2;                                  pre row = x (F) */
#ifndef HG_OPS_ACTIVATION_H
#define HG_OPS_ACTIVATION_H

#include "handgrad.h"

typedef struct hg_backend hg_backend;

/* out (N,F) = act(pre); pre (N,2F) for SwiGLU, (N,F) for ReLU^2. */
typedef void hg_activation_forward_fn(hg_backend *be, hg_mlp_kind kind, float *out, const float *pre, int N, int F);
/* dpre (same shape as pre) = d act / d pre * dout, written; dout (N,F). dpre may not
 * alias dout or pre. */
typedef void hg_activation_backward_fn(hg_backend *be, hg_mlp_kind kind, float *dpre, const float *pre,
                                       const float *dout, int N, int F);

#endif
