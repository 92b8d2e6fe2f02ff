/* SwiGLU, GeGLU and ReLU^2 on the GPU (src/ops/activation.h), forward and backward; GELU
 * is gelu.cu. Elementwise over the (N, F) output, a grid-stride loop of one thread per
 * element, loads and stores in T and the math in fp32 with the CPU's formulas (expf and
 * tanhf at full precision, no fast-math), so fp32 mode tracks the CPU closely. No
 * reductions.
 *
 * Legend: N rows, F the MLP width; a gated pre-activation row is gate (F) | up (F). */
#include "backend/cuda/cuda.h"

/* GELU: GeGLU's gate, gelu(g); else SwiGLU's, silu(g) = g / (1 + exp(-g)). */
template <typename T, bool GELU>
__global__ void gated_forward_kernel(T *out /* (N,F) */, const T *pre /* (N,2F) */, int N, int F) {
    const size_t n = (size_t)N * F;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const T *g = pre + i / F * 2 * F + i % F, *u = g + F;
        float x = to_f(*g), a = GELU ? hg_gelu(x) : x / (1.0f + expf(-x));
        out[i] = from_f<T>(a * to_f(*u));
    }
}

/* SwiGLU, with sg = sigmoid(g): dgate = dout u sg (1 + g (1 - sg)), dup = dout g sg.
 * GeGLU: dgate = dout u gelu'(g), dup = dout gelu(g). */
template <typename T, bool GELU>
__global__ void gated_backward_kernel(T *dpre /* (N,2F) */, const T *pre /* (N,2F) */, const T *dout /* (N,F) */, int N, int F) {
    const size_t n = (size_t)N * F;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const size_t j = i / F * 2 * F + i % F; /* gate at j, up at j + F */
        float g = to_f(pre[j]), u = to_f(pre[j + F]), dy = to_f(dout[i]);
        if (GELU) {
            dpre[j] = from_f<T>(dy * u * hg_gelu_grad(g));
            dpre[j + F] = from_f<T>(dy * hg_gelu(g));
        } else {
            float sg = 1.0f / (1.0f + expf(-g));
            dpre[j] = from_f<T>(dy * u * sg * (1.0f + g * (1.0f - sg)));
            dpre[j + F] = from_f<T>(dy * g * sg);
        }
    }
}

/* 0 * x rather than 0 for x <= 0, as on the CPU: a NaN input stays visible. */
template <typename T>
__global__ void relu2_forward_kernel(T *out /* (N,F) */, const T *pre /* (N,F) */, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float x = to_f(pre[i]), r = x > 0.0f ? x : 0.0f * x;
        out[i] = from_f<T>(r * r);
    }
}

template <typename T>
__global__ void relu2_backward_kernel(T *dpre /* (N,F) */, const T *pre /* (N,F) */, const T *dout /* (N,F) */, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float x = to_f(pre[i]);
        dpre[i] = from_f<T>((x > 0.0f ? 2.0f * x : 0.0f * x) * to_f(dout[i]));
    }
}

/* A kind other than the gated ones runs ReLU^2, as on the CPU (GELU never reaches this op). */
extern "C" void cuda_activation_forward(hg_backend *be, hg_mlp_kind kind, float *out, const float *pre, int N, int F) {
    const size_t n = (size_t)N * F;
    if (!n) return;
    if (kind == HG_MLP_SWIGLU) {
        CUDA_OP("swiglu_forward");
        CUDA_DISPATCH(be, gated_forward_kernel<T, false><<<cuda_grid(be, n), 256, 0, cuda_stream(be)>>>((T *)out, (const T *)pre, N, F));
        cuda_launched(be, "gated_forward_kernel");
        return;
    }
    if (kind == HG_MLP_GEGLU) {
        CUDA_OP("geglu_forward");
        CUDA_DISPATCH(be, gated_forward_kernel<T, true><<<cuda_grid(be, n), 256, 0, cuda_stream(be)>>>((T *)out, (const T *)pre, N, F));
        cuda_launched(be, "gated_forward_kernel");
        return;
    }
    CUDA_OP("relu2_forward");
    CUDA_DISPATCH(be, relu2_forward_kernel<T><<<cuda_grid(be, n), 256, 0, cuda_stream(be)>>>((T *)out, (const T *)pre, n));
    cuda_launched(be, "relu2_forward_kernel");
}

extern "C" void cuda_activation_backward(hg_backend *be, hg_mlp_kind kind, float *dpre, const float *pre, const float *dout, int N,
                                         int F) {
    const size_t n = (size_t)N * F;
    if (!n) return;
    if (hg_mlp_gated(kind)) {
        CUDA_OP(kind == HG_MLP_GEGLU ? "geglu_backward" : "swiglu_backward");
        if (kind == HG_MLP_GEGLU)
            CUDA_DISPATCH(be, gated_backward_kernel<T, true><<<cuda_grid(be, n), 256, 0, cuda_stream(be)>>>(
                                  (T *)dpre, (const T *)pre, (const T *)dout, N, F));
        else
            CUDA_DISPATCH(be, gated_backward_kernel<T, false><<<cuda_grid(be, n), 256, 0, cuda_stream(be)>>>(
                                  (T *)dpre, (const T *)pre, (const T *)dout, N, F));
        cuda_launched(be, "gated_backward_kernel");
        return;
    }
    CUDA_OP("relu2_backward");
    CUDA_DISPATCH(be, relu2_backward_kernel<T><<<cuda_grid(be, n), 256, 0, cuda_stream(be)>>>((T *)dpre, (const T *)pre,
                                                                                             (const T *)dout, n));
    cuda_launched(be, "relu2_backward_kernel");
}
