/* Linear layers: out = inp @ w + bias, with w stored input-major (K, N) as in HF Conv1D. */
#ifndef HG_OPS_MATMUL_H
#define HG_OPS_MATMUL_H

#include "handgrad.h"

typedef struct hg_backend hg_backend;

/* out (M,N) = inp (M,K) @ w (K,N) + bias (N); bias may be NULL. */
typedef hg_status hg_matmul_forward_fn(hg_backend *be, float *out, const float *inp,
                                       const float *w, const float *bias, int M, int K, int N);
/* dinp (M,K) = dout @ w^T;  dw (K,N) += inp^T @ dout;  dbias (N) += column sums of dout
 * (skipped when dbias is NULL). */
typedef hg_status hg_matmul_backward_fn(hg_backend *be, float *dinp, float *dw, float *dbias,
                                        const float *dout, const float *inp, const float *w,
                                        int M, int K, int N);

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

#endif
