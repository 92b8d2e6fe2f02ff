/* Token + position embedding. */
#ifndef HG_OPS_ENCODER_H
#define HG_OPS_ENCODER_H

#include <stdint.h>

#include "ops/dropout.h"

typedef struct hg_backend hg_backend;

/* out (B,T,C) = dropout(wte[tokens[b,t]] + wpe[t]); tokens (B,T), wte (Vp,C), wpe (Tmax,C)
 * or NULL (no learned positions: the wpe term is left out). */
typedef void hg_encoder_forward_fn(hg_backend *be, float *out, const int32_t *tokens,
                                   const float *wte, const float *wpe, int B, int T, int C,
                                   const hg_dropout *drop);
/* dwte (Vp,C) += scatter of dropout'(dout) by token; dwpe (Tmax,C) += sum over b (dwpe
 * NULL exactly when wpe is). */
typedef void hg_encoder_backward_fn(hg_backend *be, float *dwte, float *dwpe, const float *dout,
                                    const int32_t *tokens, int B, int T, int C,
                                    const hg_dropout *drop);

#endif
