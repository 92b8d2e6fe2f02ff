/* Rotary position embedding (RoPE), applied in place to the q and k heads of the fused
 * QKV projection, so that attention reads rotated q and k where they already are and no
 * permuted copy exists. Pairs (i, i + r/2) of the first r dimensions of each head are
 * rotated (the rotate-half convention of Hugging Face's Llama; r = hs, or fewer with a
 * partial rotary embedding, Phi's partial_rotary_factor, whose other hs - r dimensions
 * pass through):
 *   x'_i = x_i cos(a) - x_{i+r/2} sin(a),  x'_{i+r/2} = x_{i+r/2} cos(a) + x_i sin(a)
 * with a = pos * f_i. Legend as in README.md; W = (NH + 2 NKV) hs. */
#ifndef HG_OPS_ROPE_H
#define HG_OPS_ROPE_H

#include <stdint.h>

#include "ops/cost.h"

typedef struct hg_backend hg_backend;

typedef struct hg_rope_shape {
    int B, T;   /* rows n = b*T + t sit at position pos0 + t, or pos[n] */
    int pos0;
    int NH, NKV, hs;
    int rot;    /* r, the rotated dimensions of a head: even, <= hs; 0 means hs */
    const int32_t *pos; /* (B,T) or NULL: row n sits at position pos[n] instead (packed
                           documents; the backend's memory, as the tokens) */
} hg_rope_shape;

static inline int hg_rope_dims(const hg_rope_shape *s) { return s->rot ? s->rot : s->hs; }

/* qkv (B,T,W): its q and k heads rotated in place; v untouched. cos_sin (Tmax, r) fp32:
 * row p holds cos(p f_i) for i < r/2, then sin(p f_i). */
typedef void hg_rope_forward_fn(hg_backend *be, float *qkv, const float *cos_sin, const hg_rope_shape *s);
/* dqkv (B,T,W): the q and k parts rotated back in place (the transpose of the forward
 * rotation), turning gradients wrt rotated q, k into gradients wrt the projection's. */
typedef void hg_rope_backward_fn(hg_backend *be, float *dqkv, const float *cos_sin, const hg_rope_shape *s);

#define HG_ROPE_OPS(X)                              \
    X(ROPE_FWD, "rope forward", FORWARD, MEMORY)    \
    X(ROPE_BWD, "rope backward", BACKWARD, MEMORY)

/* Either direction: the q and k elements read and written once, plus the T rows of the
 * cos|sin table. */
static inline hg_op_cost hg_rope_cost(const hg_rope_shape *s) {
    double n = (double)s->B * s->T * (s->NH + s->NKV) * hg_rope_dims(s);
    hg_op_cost c = {3.0 * n, HG_COST_F4 * (2.0 * n + (double)s->T * hg_rope_dims(s))};
    return c;
}

#endif
