/* Low-rank adapters (LoRA) on a linear layer: y = x W + b + sum_j s_j (drop(x) A_j^T) B_j^T
 * over the layer's adapted modules j, each covering the columns [c0_j, c0_j + n_j) of its
 * output (q, k and v of the fused q|k|v projection, say, or all of it), as PEFT writes
 * them: A_j (r, K), B_j (n_j, r), s_j = alpha / r (or alpha / sqrt(r), rsLoRA). The base
 * product runs as the plain linear layer (ops/matmul.h); these ops add the adapters'
 * part and its gradients. Legend as in README.md; N rows, K the layer's input width, OUT
 * its output width, R = n * r. drop() is the adapter's dropout, its masks regenerated in
 * backward (ops/dropout.h), site `drop.site`. */
#ifndef HG_OPS_LORA_H
#define HG_OPS_LORA_H

#include <stddef.h>
#include <stdint.h>

#include "handgrad.h"
#include "ops/cost.h"
#include "ops/dropout.h"

typedef struct hg_backend hg_backend;

#define HG_LORA_MAX_MODULES 3 /* q, k, v */

typedef struct hg_lora_shape {
    int N, K, OUT;
    int r, n;                            /* rank, adapted modules */
    int c0[HG_LORA_MAX_MODULES], cols[HG_LORA_MAX_MODULES]; /* module j's output columns */
    float scale[HG_LORA_MAX_MODULES];    /* s_j */
} hg_lora_shape;

/* The adapters' weights: A[j] (r, K), B[j] (cols[j], r), in the compute type; forward
 * reads them, backward adds into dA[j], dB[j] (fp32 gradients). */
typedef struct hg_lora_weights {
    const float *A[HG_LORA_MAX_MODULES], *B[HG_LORA_MAX_MODULES];
    float *dA[HG_LORA_MAX_MODULES], *dB[HG_LORA_MAX_MODULES];
} hg_lora_weights;

/* h (N, R) = drop(x) [A_0; ...; A_{n-1}]^T, kept for backward; then for each module j,
 * y[:, c0_j : c0_j + cols_j] += s_j h[:, j r : (j+1) r] B_j^T. x (N, K), y (N, OUT).
 * keep (hg_lora_keep_bytes, kept for backward): with the dropout on, the mask as bits,
 * bit i % 32 of word i / 32 set when element i = n K + k is kept; a backend may leave it
 * and draw the mask again in backward. scratch: hg_lora_scratch_bytes(shape) bytes
 * (drop(x) when the dropout is on). */
typedef hg_status hg_lora_forward_fn(hg_backend *be, float *y, float *h, uint32_t *keep, const float *x,
                                     const hg_lora_weights *w, const hg_lora_shape *s, const hg_dropout *drop,
                                     void *scratch);
/* From dy (N, OUT), the gradient at y: dh_j = s_j dy_j B_j; dB_j += s_j dy_j^T h_j;
 * dA_j += dh_j^T drop(x); dx (N, K) += drop'(dh [A_0; ...]) (the adapters' share of the
 * input gradient, added to what the base layer's backward wrote). keep: as forward left
 * it. dh lives in scratch. */
typedef hg_status hg_lora_backward_fn(hg_backend *be, float *dx, const float *dy, const float *x, const float *h,
                                      const uint32_t *keep, const hg_lora_weights *w, const hg_lora_shape *s,
                                      const hg_dropout *drop, void *scratch);
/* Bytes of keep: N K bits in 32-bit words. */
static inline size_t hg_lora_keep_bytes(const hg_lora_shape *s) { return 4 * (((size_t)s->N * (size_t)s->K + 31) / 32); }
/* Scratch of both: drop(x) (N, K) when the dropout is on, and dh (N, R), in the compute
 * type (sized for 4-byte elements). */
static inline size_t hg_lora_scratch_bytes(const hg_lora_shape *s, int dropout) {
    return 4 * ((size_t)s->N * (size_t)s->r * (size_t)s->n + (dropout ? (size_t)s->N * (size_t)s->K : 0));
}

#define HG_LORA_OPS(X)                                      \
    X(LORA_FWD, "lora forward", FORWARD, GEMM)              \
    X(LORA_BWD, "lora backward", BACKWARD, GEMM)

/* The down product and each up product; backward: dh, dB, dA and dx. */
static inline hg_op_cost hg_lora_forward_cost(const hg_lora_shape *s) {
    double N = s->N, K = s->K, R = (double)s->r * s->n, up = 0;
    for (int j = 0; j < s->n; j++) up += 2.0 * N * s->r * s->cols[j];
    hg_op_cost c = {2.0 * N * K * R + up, HG_COST_F4 * (N * K + R * K + N * R + 2.0 * N * s->OUT)};
    return c;
}
static inline hg_op_cost hg_lora_backward_cost(const hg_lora_shape *s) {
    double N = s->N, K = s->K, R = (double)s->r * s->n, up = 0;
    for (int j = 0; j < s->n; j++) up += 4.0 * N * s->r * s->cols[j];
    hg_op_cost c = {4.0 * N * K * R + up, HG_COST_F4 * (3.0 * N * K + 2.0 * R * K + 2.0 * N * R + N * s->OUT)};
    return c;
}

#endif
