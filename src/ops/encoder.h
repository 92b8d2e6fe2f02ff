/* Token + position embedding. */
#ifndef HG_OPS_ENCODER_H
#define HG_OPS_ENCODER_H

#include <stdint.h>

#include "ops/cost.h"
#include "ops/dropout.h"

typedef struct hg_backend hg_backend;

/* out (B,T,C) = dropout(scale * wte[tokens[b,t]] + wpe[p]), p = pos[b,t], or t when pos
 * is NULL; tokens (B,T), pos (B,T) (packed documents: each token's position in its own,
 * each < Tmax; host memory, and NULL on CUDA), wte (Vp,C), wpe (Tmax,C) or NULL (no
 * learned positions: the wpe term is left out); scale is 1, or the config's embed_scale
 * (Gemma's sqrt(C)). out is residual-typed (backend.h). */
typedef void hg_encoder_forward_fn(hg_backend *be, float *out, const int32_t *tokens, const int32_t *pos,
                                   const float *wte, const float *wpe, int B, int T, int C, float scale,
                                   const hg_dropout *drop);
/* dwte (Vp,C) += scale * scatter of dropout'(dout) by token; dwpe (Tmax,C) += scatter of
 * dropout'(dout) by position (dwpe NULL when wpe is, or is frozen; dwte NULL when wte is
 * frozen). dout is residual-typed. */
typedef void hg_encoder_backward_fn(hg_backend *be, float *dwte, float *dwpe, const float *dout,
                                    const int32_t *tokens, const int32_t *pos, int B, int T, int C, float scale,
                                    const hg_dropout *drop);

#define HG_ENCODER_OPS(X)                                   \
    X(ENCODER_FWD, "encoder forward", FORWARD, MEMORY)      \
    X(ENCODER_BWD, "encoder backward", BACKWARD, MEMORY)

/* wpe: 1 with learned positions (wpe != NULL), else 0. Forward reads a wte row (and a wpe
 * row) and writes out per row; backward reads dout and adds into dwte rows (and dwpe). */
static inline hg_op_cost hg_encoder_forward_cost(int B, int T, int C, int wpe) {
    double n = (double)B * T * C;
    hg_op_cost c = {n, HG_COST_F4 * ((2.0 + wpe) * n + (double)B * T)};
    return c;
}
static inline hg_op_cost hg_encoder_backward_cost(int B, int T, int C, int wpe) {
    double n = (double)B * T * C;
    hg_op_cost c = {(1.0 + wpe) * n, HG_COST_F4 * (3.0 * n + 2.0 * wpe * T * C + (double)B * T)};
    return c;
}

#endif
