/* Linear layers on the GPU: cuBLASLt GEMMs with bias and GELU in the epilogue, and the
 * bias gradient in the dW GEMM's epilogue (or, where cuBLASLt refuses it or epilogues
 * are off, as a fixed-order column sum). Weights are (K, N), input-major, as Hugging
 * Face's Conv1D stores them. Activations and weights are T; dw and dbias are fp32 and
 * accumulate (the dW GEMM writes fp32 with beta = 1). */
#include "backend/cuda/cuda.h"
#include "backend/cuda/reduce.cuh"

template <typename T>
struct column_value {
    const T *x;
    int N;
    __device__ float2 operator()(int m, int c) const { return make_float2(to_f(x[(size_t)m * N + c]), 0.0f); }
};

hg_status cuda_bias_backward(hg_backend *be, float *dbias, const void *src, int M, int N) {
    float2 *partial = (float2 *)cuda_work(be, sizeof(float2) * COLSUM_MAX_SPLITS * (size_t)N);
    if (!partial) return cuda_of(be)->err;
    hg_status st = HG_OK;
    CUDA_DISPATCH(be, st = colsum(be, dbias, NULL, partial, M, N, column_value<T>{(const T *)src, N}, "bias_backward"));
    return st;
}

extern "C" hg_status cuda_matmul_forward(hg_backend *be, float *out, const float *inp, const float *w, const float *bias, int M,
                                         int K, int N) {
    CUDA_OP("matmul_forward");
    cuda_gemm_desc d = {M, N, K, 0, 0, K, N, N, 0, 0, bias ? EPI_BIAS : EPI_NONE};
    return cuda_gemm(be, &d, inp, w, out, bias, NULL);
}

/* dinp (M,K) = dout @ w^T, w read as stored (K,N); dw (K,N) += inp^T @ dout; dbias. */
static hg_status backward(hg_backend *be, float *dinp, float *dw, float *dbias, const float *dout, const float *inp,
                          const float *w, int M, int K, int N, cuda_epilogue epi, const float *pre) {
    cuda_gemm_desc dx = {M, K, N, 0, 1, N, N, K, 0, 0, epi};
    HG_TRY(cuda_gemm(be, &dx, dout, w, dinp, NULL, (void *)pre));
    if (!dw) /* a frozen weight (hg_options.freeze): no product; its bias frozen with it */
        return dbias ? hg_fail(HG_ERR_UNSUPPORTED, "freeze: a frozen weight with a trained bias on cuda") : HG_OK;
    cuda_gemm_desc dwd = {K, N, M, 1, 0, K, N, N, 1, 1, dbias ? EPI_BGRAD : EPI_NONE};
    return cuda_gemm(be, &dwd, inp, dout, dw, dbias, NULL);
}

extern "C" hg_status cuda_matmul_backward(hg_backend *be, float *dinp, float *dw, float *dbias, const float *dout,
                                          const float *inp, const float *w, int M, int K, int N) {
    CUDA_OP("matmul_backward");
    return backward(be, dinp, dw, dbias, dout, inp, w, M, K, N, EPI_NONE, NULL);
}

/* pre = inp @ w + bias and out = GELU(pre) from one GEMM (GELU_AUX_BIAS epilogue). */
extern "C" hg_status cuda_matmul_gelu_forward(hg_backend *be, float *out, float *pre, const float *inp, const float *w,
                                              const float *bias, int M, int K, int N) {
    CUDA_OP("matmul_gelu_forward");
    cuda_gemm_desc d = {M, N, K, 0, 0, K, N, N, 0, 0, EPI_GELU_AUX};
    return cuda_gemm(be, &d, inp, w, out, bias, pre);
}

/* GELU(pre) is recomputed for dW; dpre = (dout @ w^T) * GELU'(pre) in one GEMM (DGELU). */
extern "C" hg_status cuda_matmul_gelu_backward(hg_backend *be, float *dpre, float *dw, float *dbias, float *act,
                                               const float *dout, const float *pre, const float *w, int M, int K, int N) {
    CUDA_OP("matmul_gelu_backward");
    cuda_gelu_forward(be, act, pre, (size_t)M * K);
    return backward(be, dpre, dw, dbias, dout, act, w, M, K, N, EPI_DGELU, pre);
}
