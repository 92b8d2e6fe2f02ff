/* Token and position embeddings on the GPU, forward and backward. wpe and dwpe are NULL
 * in a model without learned positions (RoPE): the position term is left out.
 *
 * Backward: dwpe (Tmax,C) is a sum over the batch, one thread per (t, c) walking b in
 * order (deterministic). dwte is a scatter by token id: fp32 atomicAdd, so its
 * summation order, unlike the CPU's, varies between runs (last bits only). */
#include "backend/cuda/cuda.h"

template <typename T>
__global__ void encoder_forward_kernel(T *out, const int32_t *tokens, const T *wte, const T *wpe, int BT, int T_, int C,
                                       hg_dropout drop) {
    size_t n = (size_t)BT * C;
    int dropping = hg_dropout_on(&drop);
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        size_t r = i / C, c = i % C;
        float v = to_f(wte[(size_t)tokens[r] * C + c]);
        if (wpe) v += to_f(wpe[(r % T_) * C + c]);
        if (dropping) v *= hg_dropout_scale(&drop, i);
        out[i] = from_f<T>(v);
    }
}

template <typename T>
__global__ void encoder_backward_wte_kernel(float *dwte, const T *dout, const int32_t *tokens, int BT, int C, hg_dropout drop) {
    size_t n = (size_t)BT * C;
    int dropping = hg_dropout_on(&drop);
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        size_t r = i / C, c = i % C;
        float g = to_f(dout[i]);
        if (dropping) g *= hg_dropout_scale(&drop, i);
        atomicAdd(&dwte[(size_t)tokens[r] * C + c], g);
    }
}

template <typename T>
__global__ void encoder_backward_wpe_kernel(float *dwpe, const T *dout, int B, int T_, int C, hg_dropout drop) {
    size_t n = (size_t)T_ * C;
    int dropping = hg_dropout_on(&drop);
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float s = 0.0f;
        for (int b = 0; b < B; b++) {
            size_t j = (size_t)b * n + i; /* element (b, t, c) of dout */
            float g = to_f(dout[j]);
            if (dropping) g *= hg_dropout_scale(&drop, j);
            s += g;
        }
        dwpe[i] += s;
    }
}

extern "C" void cuda_encoder_forward(hg_backend *be, float *out, const int32_t *tokens, const float *wte, const float *wpe, int B,
                                     int T_, int C, const hg_dropout *drop) {
    CUDA_OP("encoder_forward");
    size_t n = (size_t)B * T_ * C;
    CUDA_DISPATCH(be, encoder_forward_kernel<T><<<cuda_grid(be, n), 256, 0, cuda_stream(be)>>>(
                          (T *)out, tokens, (const T *)wte, (const T *)wpe, B * T_, T_, C, cuda_dropout(drop)));
    cuda_launched(be, "encoder_forward_kernel");
}

extern "C" void cuda_encoder_backward(hg_backend *be, float *dwte, float *dwpe, const float *dout, const int32_t *tokens, int B,
                                      int T_, int C, const hg_dropout *drop) {
    CUDA_OP("encoder_backward");
    hg_dropout d = cuda_dropout(drop);
    CUDA_DISPATCH(be, encoder_backward_wte_kernel<T><<<cuda_grid(be, (size_t)B * T_ * C), 256, 0, cuda_stream(be)>>>(
                          dwte, (const T *)dout, tokens, B * T_, C, d));
    if (cuda_launched(be, "encoder_backward_wte_kernel") != HG_OK || !dwpe) return;
    CUDA_DISPATCH(be, encoder_backward_wpe_kernel<T><<<cuda_grid(be, (size_t)T_ * C), 256, 0, cuda_stream(be)>>>(
                          dwpe, (const T *)dout, B, T_, C, d));
    cuda_launched(be, "encoder_backward_wpe_kernel");
}
