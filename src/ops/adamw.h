/* AdamW update (decoupled weight decay, bias-corrected moments) in one pass over p, g, m, v,
 * and the squared gradient norm it clips with. */
#ifndef HG_OPS_ADAMW_H
#define HG_OPS_ADAMW_H

#include <stddef.h>

typedef struct hg_backend hg_backend;

typedef struct hg_adamw_update {
    float lr, beta1, beta2, eps, weight_decay; /* weight_decay 0 for non-decayed tensors */
    float bias_correction1, bias_correction2;  /* 1 - beta^t */
    float grad_scale;                          /* clip coefficient, applied to g on the fly */
} hg_adamw_update;

/* Over n elements, with g' = g * grad_scale (PyTorch's AdamW order):
 *   p -= lr * wd * p;  m = b1 m + (1-b1) g';  v = b2 v + (1-b2) g'^2;
 *   p -= (lr / bc1) * m / (sqrt(v) / sqrt(bc2) + eps). */
typedef void hg_adamw_fn(hg_backend *be, float *p, const float *g, float *m, float *v, size_t n,
                         const hg_adamw_update *u);
/* *out = sum of x^2 over n elements, accumulated in double. */
typedef void hg_sumsq_fn(hg_backend *be, const float *x, size_t n, double *out);

#endif
