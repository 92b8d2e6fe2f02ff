/* GELU, tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))). */
#ifndef HG_OPS_GELU_H
#define HG_OPS_GELU_H

#include <stddef.h>

#include "ops/cost.h"

typedef struct hg_backend hg_backend;

/* out (n) = gelu(inp). */
typedef void hg_gelu_forward_fn(hg_backend *be, float *out, const float *inp, size_t n);
/* dinp (n) = gelu'(inp) * dout; dinp may alias dout. */
typedef void hg_gelu_backward_fn(hg_backend *be, float *dinp, const float *inp, const float *dout,
                                 size_t n);

/* GELU_RECOMPUTE: the forward run again in backward, where the MLP keeps only pre. */
#define HG_GELU_OPS(X)                                      \
    X(GELU_FWD, "gelu forward", FORWARD, MEMORY)            \
    X(GELU_RECOMPUTE, "gelu recompute", BACKWARD, MEMORY)   \
    X(GELU_BWD, "gelu backward", BACKWARD, MEMORY)

static inline hg_op_cost hg_gelu_forward_cost(size_t n) { return hg_elementwise_cost((double)n, 10.0, 2.0); }
static inline hg_op_cost hg_gelu_backward_cost(size_t n) { return hg_elementwise_cost((double)n, 16.0, 3.0); }

#endif
