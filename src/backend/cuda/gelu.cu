/* GELU (tanh approximation) on the GPU, forward and backward, and the elementwise
 * epilogues the GEMM falls back to when cuBLASLt cannot fuse them. fp32 math, tanhf at
 * full precision (no fast-math), so fp32 mode tracks the CPU closely. */
#include "backend/cuda/cuda.h"

/* n/VW groups of VW elements (VW: 1 or VEC16(T), cuda.h). */
template <typename T, int VW>
__global__ void gelu_forward_kernel(T *out, const T *inp, size_t n) {
    float f[VW];
    for (size_t i = (blockIdx.x * (size_t)blockDim.x + threadIdx.x) * VW; i < n; i += (size_t)gridDim.x * blockDim.x * VW) {
        load_v(f, inp + i);
#pragma unroll
        for (int j = 0; j < VW; j++) f[j] = hg_gelu(f[j]);
        store_v(out + i, f);
    }
}

/* dinp may alias dout. */
template <typename T, int VW>
__global__ void gelu_backward_kernel(T *dinp, const T *inp, const T *dout, size_t n) {
    float x[VW], d[VW];
    for (size_t i = (blockIdx.x * (size_t)blockDim.x + threadIdx.x) * VW; i < n; i += (size_t)gridDim.x * blockDim.x * VW) {
        load_v(x, inp + i);
        load_v(d, dout + i);
#pragma unroll
        for (int j = 0; j < VW; j++) d[j] *= hg_gelu_grad(x[j]);
        store_v(dinp + i, d);
    }
}

/* The vector path needs n % VW == 0 and aligned pointers. */
extern "C" void cuda_gelu_forward(hg_backend *be, float *out, const float *inp, size_t n) {
    CUDA_OP("gelu_forward");
    CUDA_DISPATCH(be, {
        int vec = n % VEC16(T) == 0 && cuda_vec16_ok<T>(0, {out, inp});
        auto k = vec ? gelu_forward_kernel<T, VEC16(T)> : gelu_forward_kernel<T, 1>;
        k<<<cuda_grid(be, vec ? n / VEC16(T) : n), 256, 0, cuda_stream(be)>>>((T *)out, (const T *)inp, n);
    });
    cuda_launched(be, "gelu_forward_kernel");
}

extern "C" void cuda_gelu_backward(hg_backend *be, float *dinp, const float *inp, const float *dout, size_t n) {
    CUDA_OP("gelu_backward");
    CUDA_DISPATCH(be, {
        int vec = n % VEC16(T) == 0 && cuda_vec16_ok<T>(0, {dinp, inp, dout});
        auto k = vec ? gelu_backward_kernel<T, VEC16(T)> : gelu_backward_kernel<T, 1>;
        k<<<cuda_grid(be, vec ? n / VEC16(T) : n), 256, 0, cuda_stream(be)>>>((T *)dinp, (const T *)inp, (const T *)dout, n);
    });
    cuda_launched(be, "gelu_backward_kernel");
}

/* ---- unfused epilogues on an (M, N) matrix with row stride ld ---- */

template <typename T>
__global__ void bias_add_kernel(T *out, const T *bias, int M, int N, int ld) {
    size_t n = (size_t)M * N;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        size_t r = i / N, c = i % N;
        out[r * ld + c] = from_f<T>(to_f(out[r * ld + c]) + to_f(bias[c]));
    }
}

/* pre stays; out = GELU(pre). */
template <typename T>
__global__ void gelu_epilogue_kernel(T *out, const T *pre, int M, int N, int ld) {
    size_t n = (size_t)M * N;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        size_t j = i / N * ld + i % N;
        out[j] = from_f<T>(hg_gelu(to_f(pre[j])));
    }
}

template <typename T>
__global__ void dgelu_epilogue_kernel(T *d, const T *pre, int M, int N, int ld) {
    size_t n = (size_t)M * N;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        size_t j = i / N * ld + i % N;
        d[j] = from_f<T>(to_f(d[j]) * hg_gelu_grad(to_f(pre[j])));
    }
}

hg_status cuda_bias_add(hg_backend *be, void *out, const void *bias, int M, int N, int ld) {
    if (!bias) return HG_OK;
    CUDA_DISPATCH(be, bias_add_kernel<T><<<cuda_grid(be, (size_t)M * N), 256, 0, cuda_stream(be)>>>((T *)out, (const T *)bias, M,
                                                                                                    N, ld));
    return cuda_launched(be, "bias_add_kernel");
}

hg_status cuda_gelu_inplace(hg_backend *be, void *out, void *pre, int M, int N, int ld) {
    CUDA_DISPATCH(be, gelu_epilogue_kernel<T><<<cuda_grid(be, (size_t)M * N), 256, 0, cuda_stream(be)>>>((T *)out, (const T *)pre,
                                                                                                         M, N, ld));
    return cuda_launched(be, "gelu_epilogue_kernel");
}

hg_status cuda_dgelu_inplace(hg_backend *be, void *d, const void *pre, int M, int N, int ld) {
    CUDA_DISPATCH(be, dgelu_epilogue_kernel<T><<<cuda_grid(be, (size_t)M * N), 256, 0, cuda_stream(be)>>>((T *)d, (const T *)pre,
                                                                                                          M, N, ld));
    return cuda_launched(be, "dgelu_epilogue_kernel");
}

hg_status cuda_add_f32(hg_backend *be, float *dst, const float *src, int n) {
    bias_add_kernel<float><<<cuda_blocks((size_t)n, 256), 256, 0, cuda_stream(be)>>>(dst, src, 1, n, n);
    return cuda_launched(be, "bias_add_kernel (fp32)");
}
