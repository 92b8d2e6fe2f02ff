/* Causal multi-head self-attention, blockwise (flash-attention style): online softmax,
 * scores recomputed in the backward pass, the T x T matrix never stored. Memory is
 * linear in T. q, k, v are read in place from the fused QKV projection. */
#ifndef HG_OPS_ATTENTION_H
#define HG_OPS_ATTENTION_H

#include <stddef.h>

#include "handgrad_ext.h" /* hg_attention_shape and the kernel types are public (overrides) */
#include "ops/cost.h"

static inline int hg_attention_kv_heads(const hg_attention_shape *s) { return s->NKV ? s->NKV : s->NH; }

/* The contract of attention forward and backward is written once, in handgrad_ext.h
 * (hg_attention_forward_fn, hg_attention_backward_fn: public, for overrides); head h is
 * at columns h*hs..(h+1)*hs of each part of a qkv row. Inside the backend the scratch is
 * attention_scratch_bytes(shape) bytes, enough for forward and backward. */
/* Scratch bytes for forward and backward of shape s; with B = 1 and T = the cache length,
 * also enough for attention_cached. */
typedef size_t hg_attention_scratch_fn(hg_backend *be, const hg_attention_shape *s);

/* Attention of n new rows against a key/value cache (inference with a KV cache).
 * The new rows sit at positions pos0 .. pos0+n-1 of one sequence; Tc is the cache length
 * (pos0 + n <= Tc). First the k and v of the new rows are stored into the caches:
 *   kcache, vcache (NKV, Tc, hs): row pos0+i of kv head g = k (resp. v) of new row i;
 * then each new row attends causally to cache rows 0 .. pos0+i (with a window, only the
 * last `window` of them):
 *   out (n, C) = softmax(q K^T / sqrt(hs)) V per head, heads concatenated;
 *   qkv (n, W) = q | k | v of the new rows, as in attention_forward.
 * Cost O(n (pos0 + n) C): one new token reads the cache once. */
typedef struct hg_kv_shape {
    int pos0, n, Tc, NH, hs;
    int NKV;       /* 0 means NH */
    float softcap; /* as hg_attention_shape's */
    int window;    /* as hg_attention_shape's */
} hg_kv_shape;
typedef hg_status hg_attention_cached_fn(hg_backend *be, float *out, float *kcache, float *vcache,
                                         const float *qkv, const hg_kv_shape *s, void *scratch);

#define HG_ATTENTION_OPS(X)                                         \
    X(ATTENTION_FWD, "attention forward", FORWARD, ATTENTION)       \
    X(ATTENTION_BWD, "attention backward", BACKWARD, ATTENTION)     \
    X(ATTENTION_CACHED, "attention cached", FORWARD, ATTENTION)

/* FLOPs of one score product (QK^T, PV, ...) over the (query, key) pairs that are
 * visible: the causal half, or all of T x T, or under documents and windows the pairs
 * each row's first key leaves. */
static inline double hg_attention_pair_flops(const hg_attention_shape *s) {
    double pairs = s->causal ? 0.5 * s->T * (s->T + 1.0) : (double)s->T * s->T;
    if (s->causal && (s->pos || s->window > 0)) {
        pairs = 0.0;
        for (int b = 0; b < (s->pos ? s->B : 1); b++)
            for (int t = 0; t < s->T; t++) pairs += t + 1 - hg_attention_first_key(s, b, t);
        if (s->pos) pairs /= s->B; /* per row, as the others */
    }
    return 2.0 * s->B * s->NH * pairs * s->hs;
}
/* Forward: QK^T and PV; reads q, k, v, writes out and lse. Backward: QK^T recomputed,
 * dV, dP, dQ, dK; reads q, k, v, out, dout, lse, writes dq, dk, dv. */
static inline hg_op_cost hg_attention_forward_cost(const hg_attention_shape *s) {
    double N = (double)s->B * s->T, C = (double)s->NH * s->hs, KV = (double)hg_attention_kv_heads(s) * s->hs;
    hg_op_cost c = {2.0 * hg_attention_pair_flops(s), HG_COST_F4 * (2.0 * N * C + 2.0 * N * KV + N * s->NH)};
    return c;
}
static inline hg_op_cost hg_attention_backward_cost(const hg_attention_shape *s) {
    double N = (double)s->B * s->T, C = (double)s->NH * s->hs, KV = (double)hg_attention_kv_heads(s) * s->hs;
    hg_op_cost c = {5.0 * hg_attention_pair_flops(s), HG_COST_F4 * (4.0 * N * C + 4.0 * N * KV + N * s->NH)};
    return c;
}

/* The n new rows' two products against pos0 + n cached rows (the causal half of the new
 * block); reads the cache's rows and q, writes the new k, v and out. */
static inline hg_op_cost hg_attention_cached_cost(const hg_kv_shape *s) {
    double n = s->n, keys = s->pos0 + 0.5 * (s->n + 1.0), C = (double)s->NH * s->hs;
    if (s->window > 0 && keys > s->window) keys = s->window;
    double KV = (double)(s->NKV ? s->NKV : s->NH) * s->hs;
    hg_op_cost c = {4.0 * n * keys * C, HG_COST_F4 * (2.0 * n * C + 2.0 * (s->pos0 + n) * KV)};
    return c;
}

#endif
