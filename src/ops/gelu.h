/* GELU, tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))). */
#ifndef HG_OPS_GELU_H
#define HG_OPS_GELU_H

#include <stddef.h>

typedef struct hg_backend hg_backend;

/* out (n) = gelu(inp). */
typedef void hg_gelu_forward_fn(hg_backend *be, float *out, const float *inp, size_t n);
/* dinp (n) = gelu'(inp) * dout; dinp may alias dout. */
typedef void hg_gelu_backward_fn(hg_backend *be, float *dinp, const float *inp, const float *dout,
                                 size_t n);

#endif
