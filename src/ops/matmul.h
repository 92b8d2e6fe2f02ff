/* Linear layers: out = inp @ w + bias, with w stored input-major (K, N) as in HF Conv1D. */
#ifndef HG_OPS_MATMUL_H
#define HG_OPS_MATMUL_H

#include "handgrad_ext.h" /* the matmul kernel types are public (overrides) */
#include "ops/cost.h"

typedef struct hg_backend hg_backend;

/* hg_matmul_forward_fn and hg_matmul_backward_fn are public, with their contracts, in
 * handgrad_ext.h (overrides). */

/* Optional fused ops (NULL in a backend's table: the step runs matmul_forward and
 * gelu_forward, or gelu_forward, matmul_backward and gelu_backward, instead; model/gpt_ops.h).
 * The MLP's first layer and its activation: pre (M,N) = inp @ w + bias (kept for backward),
 * out (M,N) = GELU(pre). A backend may run GELU in the GEMM's epilogue. */
typedef hg_status hg_matmul_gelu_forward_fn(hg_backend *be, float *out, float *pre, const float *inp,
                                            const float *w, const float *bias, int M, int K, int N);
/* Backward of a layer whose input was GELU(pre): act (M,K) = GELU(pre) is recomputed into
 * scratch; dw (K,N) += act^T @ dout; dbias (N) += column sums of dout;
 * dpre (M,K) = (dout @ w^T) * GELU'(pre). dpre may not alias pre or act. */
typedef hg_status hg_matmul_gelu_backward_fn(hg_backend *be, float *dpre, float *dw, float *dbias,
                                             float *act, const float *dout, const float *pre,
                                             const float *w, int M, int K, int N);

/* One row per linear layer of the decoder block and pass, so each is timed apart. */
#define HG_MATMUL_OPS(X)                                                        \
    X(C_ATTN_FWD, "matmul c_attn forward", FORWARD, GEMM)                       \
    X(ATTN_PROJ_FWD, "matmul attn.c_proj forward", FORWARD, GEMM)               \
    X(C_FC_FWD, "matmul c_fc forward", FORWARD, GEMM)                           \
    X(C_FC_GELU_FWD, "matmul c_fc+gelu forward", FORWARD, GEMM)                 \
    X(MLP_PROJ_FWD, "matmul mlp.c_proj forward", FORWARD, GEMM)                 \
    X(MLP_PROJ_BWD, "matmul mlp.c_proj backward", BACKWARD, GEMM)               \
    X(MLP_PROJ_GELU_BWD, "matmul mlp.c_proj+gelu backward", BACKWARD, GEMM)     \
    X(C_FC_BWD, "matmul c_fc backward", BACKWARD, GEMM)                         \
    X(ATTN_PROJ_BWD, "matmul attn.c_proj backward", BACKWARD, GEMM)             \
    X(C_ATTN_BWD, "matmul c_attn backward", BACKWARD, GEMM)

/* GEMMs count 2 FLOPs a multiply-add. Backward: the dinp product, and with dw 1 the dw
 * product and the bias's column sums, dw read and written (dw 0: a frozen weight). The GELU forms add GELU (10 FLOPs an element) or
 * its recompute and derivative (26), and the pre/act tensors they move. */
static inline hg_op_cost hg_matmul_forward_cost(int M, int K, int N) {
    hg_op_cost c = {2.0 * M * K * N, HG_COST_F4 * ((double)M * K + (double)K * N + (double)M * N)};
    return c;
}
static inline hg_op_cost hg_matmul_backward_cost(int M, int K, int N, int dw) {
    hg_op_cost c = {(2.0 + 2.0 * dw) * M * K * N + dw * (double)M * N,
                    HG_COST_F4 * ((1.0 + dw) * M * K + (1.0 + 2.0 * dw) * K * N + (double)M * N)};
    return c;
}
static inline hg_op_cost hg_matmul_gelu_forward_cost(int M, int K, int N) {
    hg_op_cost c = {2.0 * M * K * N + 10.0 * M * N, HG_COST_F4 * ((double)M * K + (double)K * N + 2.0 * M * N)};
    return c;
}
static inline hg_op_cost hg_matmul_gelu_backward_cost(int M, int K, int N, int dw) {
    hg_op_cost c = {(2.0 + 2.0 * dw) * M * K * N + dw * (double)M * N + 26.0 * M * K,
                    HG_COST_F4 * (3.0 * M * K + (1.0 + 2.0 * dw) * K * N + (double)M * N)};
    return c;
}

#endif
