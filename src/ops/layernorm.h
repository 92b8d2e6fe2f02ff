/* LayerNorm and RMSNorm over the last dimension, and their fusion with the residual add.
 * hg_norm_spec and the kernel types hg_layernorm_forward_fn,
 * hg_residual_layernorm_forward_fn and hg_layernorm_backward_fn are public, with their
 * contracts, in handgrad_ext.h (overrides). */
#ifndef HG_OPS_LAYERNORM_H
#define HG_OPS_LAYERNORM_H

#include <stddef.h>

#include "handgrad_ext.h" /* the norm kernel types are public (overrides) */
#include "ops/cost.h"
#include "ops/dropout.h"

typedef struct hg_backend hg_backend;

/* Bytes of the backward's scratch for (N, C): partial sums of dw and db (2*C floats per
 * thread on the CPU, per block on a GPU), reduced in a fixed order so that results do
 * not depend on scheduling. */
typedef size_t hg_layernorm_scratch_fn(hg_backend *be, int N, int C);
/* dbranch (n) = dropout'(dres): the gradient reaching a dropped-out branch output. */
typedef void hg_dropout_backward_fn(hg_backend *be, float *dbranch, const float *dres, size_t n,
                                    const hg_dropout *drop);
/* res_out (n) = res_in + dropout(delta): the residual add where no norm follows it (the
 * postnorm and parallel blocks; hg_block_kind). res_in and res_out are in the residual
 * type, delta in the compute type; res_out may be res_in. Backward adds a branch input's
 * gradient into the residual stream's with it (drop NULL). */
typedef void hg_residual_add_fn(hg_backend *be, float *res_out, const float *res_in, const float *delta, size_t n,
                                const hg_dropout *drop);

/* q/k norm (Qwen3, Gemma 3): RMSNorm of each q head and each k head of the fused QKV
 * projection, over its hs elements, in place; q heads scaled by wq (hs), k heads by wk
 * (hs) (NULL: 1); v untouched. With `whole` (OLMo 2) the NH q heads are one unit of QD =
 * NH hs elements and the NKV k heads one of KVD = NKV hs, scaled by wq (QD) and wk (KVD).
 * Row layout as in ops/attention.h: W = (NH + 2 NKV) hs, q heads then k heads then v heads. */
typedef struct hg_qk_norm_shape {
    int N, NH, NKV, hs;
    float eps;
    int whole;
} hg_qk_norm_shape;
/* The units a row of q|k is normalised in: nq of width wq, then nk of width wk. */
static inline void hg_qk_norm_units(const hg_qk_norm_shape *s, int *nq, int *wq, int *nk, int *wk) {
    *nq = s->whole ? 1 : s->NH, *wq = s->whole ? s->NH * s->hs : s->hs;
    *nk = s->whole ? 1 : s->NKV, *wk = s->whole ? s->NKV * s->hs : s->hs;
}
/* qkv (N,W): q and k units normalised in place. raw (N, (NH+NKV) hs): the q|k part as it
 * was, kept for backward (NULL: not kept); rstd (N, nq+nk), unit-major within a row. */
typedef void hg_qk_norm_forward_fn(hg_backend *be, float *qkv, float *raw, float *rstd, const float *wq,
                                   const float *wk, const hg_qk_norm_shape *s);
/* dqkv (N,W): its q and k parts, gradients wrt the normalised heads, turned in place into
 * gradients wrt raw; v's part untouched. dwq (wq), dwk (wk) += (NULL when wq, wk
 * are). scratch: layernorm_scratch_bytes(N, max(wq, wk)) bytes. */
typedef void hg_qk_norm_backward_fn(hg_backend *be, float *dqkv, float *dwq, float *dwk, const float *raw,
                                    const float *rstd, const float *wq, const float *wk,
                                    const hg_qk_norm_shape *s, float *scratch);

#define HG_NORM_OPS(X)                                                  \
    X(LAYERNORM_FWD, "layernorm forward", FORWARD, MEMORY)              \
    X(RESIDUAL_LN_FWD, "residual+layernorm forward", FORWARD, MEMORY)   \
    X(LAYERNORM_BWD, "layernorm backward", BACKWARD, MEMORY)            \
    X(RMSNORM_FWD, "rmsnorm forward", FORWARD, MEMORY)                  \
    X(RESIDUAL_RMS_FWD, "residual+rmsnorm forward", FORWARD, MEMORY)    \
    X(RMSNORM_BWD, "rmsnorm backward", BACKWARD, MEMORY)                \
    X(QK_NORM_FWD, "qk norm forward", FORWARD, MEMORY)                  \
    X(QK_NORM_BWD, "qk norm backward", BACKWARD, MEMORY)                \
    X(DROPOUT_BWD, "dropout backward", BACKWARD, MEMORY)                \
    X(RESIDUAL_ADD, "residual add", FORWARD, MEMORY)

/* Per row of C: the statistics (N floats each) besides inp and out; the residual form
 * also reads delta and writes res_out; backward reads dout, inp and adds into dinp. */
static inline hg_op_cost hg_norm_forward_cost(int N, int C) {
    hg_op_cost c = {8.0 * N * C, HG_COST_F4 * (2.0 * N * C + 2.0 * N)};
    return c;
}
static inline hg_op_cost hg_residual_norm_forward_cost(int N, int C) {
    hg_op_cost c = {9.0 * N * C, HG_COST_F4 * (4.0 * N * C + 2.0 * N)};
    return c;
}
static inline hg_op_cost hg_norm_backward_cost(int N, int C) {
    hg_op_cost c = {12.0 * N * C, HG_COST_F4 * (4.0 * N * C + 2.0 * N)};
    return c;
}
/* q and k elements: forward reads them and writes them and raw; backward reads dqkv and
 * raw and writes dqkv. */
static inline hg_op_cost hg_qk_norm_cost(const hg_qk_norm_shape *s, int backward) {
    double n = (double)s->N * (s->NH + s->NKV) * s->hs, units = s->whole ? 2.0 : s->NH + s->NKV;
    hg_op_cost c = {(backward ? 8.0 : 4.0) * n, HG_COST_F4 * (3.0 * n + (double)s->N * units)};
    return c;
}
static inline hg_op_cost hg_dropout_backward_cost(size_t n) { return hg_elementwise_cost((double)n, 1.0, 2.0); }
static inline hg_op_cost hg_residual_add_cost(size_t n) { return hg_elementwise_cost((double)n, 1.0, 3.0); }

#endif
