/* The lm_head and loss: logits = x @ wte^T, softmax cross-entropy, and their backward,
 * done in chunks of rows so the (N, V) logits are never stored whole. */
#ifndef HG_OPS_CLASSIFIER_H
#define HG_OPS_CLASSIFIER_H

#include <stddef.h>
#include <stdint.h>

#include "handgrad.h"

typedef struct hg_backend hg_backend;

typedef struct hg_classifier_args {
    int N, C, V, Vp;
    int chunk;             /* rows per chunk; scratch holds (chunk, Vp) floats */
    const float *x;        /* (N, C) final LayerNorm output */
    const float *wte;      /* (Vp, C); rows >= V are padding and never score */
    const int32_t *targets;/* (N) or NULL; -1 is ignored */
    float *losses;         /* (N) out: per-row loss, 0 where ignored; NULL without targets */
    float *logits;         /* (N, V) fp32 out, in host memory on every backend, or NULL */
    /* backward, when dx != NULL: dlogits = (softmax - onehot) * dscale on rows with a target */
    float dscale;
    float *dx;             /* (N, C) written */
    float *dwte;           /* (Vp, C) accumulated */
    float *scratch;
} hg_classifier_args;

typedef hg_status hg_classifier_fn(hg_backend *be, const hg_classifier_args *a);

#endif
