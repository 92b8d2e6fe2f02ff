/* The lm_head and loss: logits = x @ wte^T, softmax cross-entropy, and their backward, on
 * one chunk of rows at a time, so the (N, V) logits are never stored whole. The caller
 * loops over chunks (gpt_classifier); forward and backward are separate ops so that
 * each can be timed. */
#ifndef HG_OPS_CLASSIFIER_H
#define HG_OPS_CLASSIFIER_H

#include <stddef.h>
#include <stdint.h>

#include "handgrad.h"
#include "ops/cost.h"

typedef struct hg_backend hg_backend;

/* Pointers are to this chunk's first row. */
typedef struct hg_classifier_args {
    int N, C, V, Vp;       /* N: rows of this chunk */
    const float *x;        /* (N, C) final LayerNorm output */
    const float *wte;      /* (Vp, C); rows >= V are padding and never score */
    const float *bias;     /* (Vp) added to the product before the cap (lm_head_bias), or NULL */
    const int32_t *targets;/* (N) or NULL; -1 is ignored */
    float *losses;         /* (N) out: per-row loss, 0 where ignored; NULL without targets */
    float *logits;         /* (N, V) fp32 out, in host memory on every backend, or NULL */
    float softcap;         /* > 0: the logits are softcap tanh(z / softcap) of the product z,
                              in the scratch and in `logits` alike; 0: z itself */
    /* backward, when dx != NULL: dlogits = (softmax - onehot) * dscale on rows with a target,
     * times the cap's derivative 1 - (logit / softcap)^2 where there is one */
    float dscale;
    float *dx;             /* (N, C) written */
    float *dwte;           /* (Vp, C) accumulated; NULL when the matrix is frozen */
    float *dbias;          /* (Vp) fp32, accumulated: dlogits' column sums; NULL without a bias */
    float *scratch;        /* (N, Vp) */
} hg_classifier_args;

/* scratch = x @ wte^T; logits and losses out. With dx set (training), the scratch is
 * left holding dlogits for classifier_backward. */
typedef hg_status hg_classifier_forward_fn(hg_backend *be, const hg_classifier_args *a);
/* After classifier_forward on the same chunk with dx set: dx = dlogits @ wte;
 * dwte += dlogits^T @ x; dbias += the column sums of dlogits. */
typedef hg_status hg_classifier_backward_fn(hg_backend *be, const hg_classifier_args *a);

#define HG_CLASSIFIER_OPS(X)                                    \
    X(CLASSIFIER_FWD, "classifier forward", FORWARD, GEMM)      \
    X(CLASSIFIER_BWD, "classifier backward", BACKWARD, GEMM)

/* Per chunk: the logits GEMM, and backward's two products; the (N, Vp) scratch is written
 * and read back, dwte read and written. */
static inline hg_op_cost hg_classifier_forward_cost(const hg_classifier_args *a) {
    double N = a->N, C = a->C, Vp = a->Vp;
    hg_op_cost c = {2.0 * N * C * Vp, HG_COST_F4 * (N * C + Vp * C + 2.0 * N * Vp)};
    return c;
}
static inline hg_op_cost hg_classifier_backward_cost(const hg_classifier_args *a) {
    double N = a->N, C = a->C, Vp = a->Vp;
    const double dw = a->dwte != NULL; /* a frozen matrix: dx alone */
    hg_op_cost c = {(2.0 + 2.0 * dw) * N * C * Vp, HG_COST_F4 * (2.0 * N * C + (1.0 + 2.0 * dw) * Vp * C + 2.0 * N * Vp)};
    return c;
}

#endif
