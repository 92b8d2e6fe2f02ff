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

#endif
