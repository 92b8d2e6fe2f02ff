/* The lm_head and cross-entropy on the GPU, on one chunk of rows (the caller loops).
 *
 * Forward: logits (N, Vp) = x @ wte^T (+ bias in cuBLASLt's epilogue; T) into the
 * scratch; when the caller wants logits (hg_forward, generation) they are copied to its
 * host buffer; then one block per row reads its logits once for an online max and sum
 * of exponentials (fp32), writes the loss, and, when training, writes the gradient
 * (softmax - onehot) * dscale over the logits in place on a second read: normalised
 * probabilities are never stored. Backward, from those dlogits left in the scratch:
 * dx = dlogits @ wte (T) and dwte += dlogits^T @ x (fp32, accumulated), with
 * dbias += dlogits' column sums in that GEMM's epilogue. Padded vocabulary columns
 * (>= V) score nothing and get zero gradient. */
#include <string.h>

#include "backend/cuda/cuda.h"

enum { CE_THREADS = 512 };

/* (max, sum of exp(x - max)) pairs, combined. */
__device__ __forceinline__ void lse_combine(float &m, float &s, float m2, float s2) {
    float mx = fmaxf(m, m2);
    if (mx == -INFINITY) return;
    s = s * __expf(m - mx) + s2 * __expf(m2 - mx);
    m = mx;
}

/* VW: 1 or VEC16(T) (16-byte loads and stores of the row; cuda.h). */
template <typename T, int VW>
__global__ void __launch_bounds__(CE_THREADS)
    cross_entropy_kernel(T *logits, float *losses, const int32_t *targets, int V, int Vp, float dscale, int backward,
                         float cap) {
    __shared__ float sm[CE_THREADS / 32], ss[CE_THREADS / 32];
    T *z = logits + (size_t)blockIdx.x * Vp;
    int target = targets[blockIdx.x];
    float m = -INFINITY, s = 0.0f, f[VW];
    for (int c = threadIdx.x * VW; c < Vp; c += CE_THREADS * VW) {
        load_v(f, z + c);
        float mx = -INFINITY, sx = 0.0f;
#pragma unroll
        for (int j = 0; j < VW; j++)
            if (c + j < V) mx = fmaxf(mx, f[j]);
#pragma unroll
        for (int j = 0; j < VW; j++)
            if (c + j < V) sx += __expf(f[j] - mx);
        lse_combine(m, s, mx, sx);
    }
    for (int o = 16; o > 0; o >>= 1) lse_combine(m, s, __shfl_xor_sync(0xffffffffu, m, o), __shfl_xor_sync(0xffffffffu, s, o));
    if (threadIdx.x % 32 == 0) sm[threadIdx.x / 32] = m, ss[threadIdx.x / 32] = s;
    __syncthreads();
    m = sm[0], s = ss[0];
    for (int w = 1; w < CE_THREADS / 32; w++) lse_combine(m, s, sm[w], ss[w]);
    float lse = m + logf(s);
    if (threadIdx.x == 0) losses[blockIdx.x] = target >= 0 ? lse - to_f(z[target]) : 0.0f;
    __syncthreads(); /* z[target] is read before it is overwritten */
    if (!backward) return;
    for (int c = threadIdx.x * VW; c < Vp; c += CE_THREADS * VW) {
        load_v(f, z + c);
#pragma unroll
        for (int j = 0; j < VW; j++) {
            int cj = c + j;
            /* capped logits (cap > 0): times the cap's derivative 1 - (logit / cap)^2 */
            float d = cap > 0.0f ? 1.0f - (f[j] / cap) * (f[j] / cap) : 1.0f;
            f[j] = target >= 0 && cj < V ? (__expf(f[j] - lse) - (cj == target ? 1.0f : 0.0f)) * dscale * d : 0.0f;
        }
        store_v(z + c, f);
    }
}

/* The first V of each row of a (rows, Vp) chunk capped in place: cap tanh(z / cap). */
template <typename T>
__global__ void softcap_kernel(T *z, int rows, int V, int Vp, float cap) {
    const size_t n = (size_t)rows * V;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        T *p = z + i / V * Vp + i % V;
        *p = from_f<T>(cap * tanhf(to_f(*p) / cap));
    }
}

/* rows x V of a (rows, Vp) chunk of T to fp32 host memory at dst. bf16 arrives packed at
 * the start of dst's own region and is widened in place from the back, which never
 * overwrites an element not yet read (element i moves from byte 2i to byte 4i). */
static hg_status copy_logits(hg_backend *be, float *dst, const void *src, int rows, int V, int Vp) {
    size_t E = hg_precision_bytes(be->precision);
    cudaStream_t st = cuda_stream(be);
    HG_TRY(cuda_check(be, cudaMemcpy2DAsync(dst, V * E, src, Vp * E, V * E, rows, cudaMemcpyDeviceToHost, st), "cudaMemcpy2DAsync (logits)"));
    HG_TRY(cuda_check(be, cudaStreamSynchronize(st), "cudaStreamSynchronize (logits)"));
    if (E == 4) return HG_OK;
    const uint16_t *h = (const uint16_t *)dst;
    for (size_t i = (size_t)rows * V; i-- > 0;) {
        uint32_t bits = (uint32_t)h[i] << 16;
        memcpy(&dst[i], &bits, 4);
    }
    return HG_OK;
}

extern "C" hg_status cuda_classifier_forward(hg_backend *be, const hg_classifier_args *a) {
    CUDA_OP("classifier_forward");
    const int C = a->C, V = a->V, Vp = a->Vp;
    cuda_gemm_desc fwd = {a->N, Vp, C, 0, 1, C, C, Vp, 0, 0, a->bias ? EPI_BIAS : EPI_NONE};
    HG_TRY(cuda_gemm(be, &fwd, a->x, a->wte, a->scratch, a->bias, NULL));
    if (a->softcap > 0) {
        const size_t n = (size_t)a->N * V;
        CUDA_DISPATCH(be, softcap_kernel<T><<<cuda_grid(be, n), 256, 0, cuda_stream(be)>>>((T *)a->scratch, a->N, V, Vp,
                                                                                          a->softcap));
        HG_TRY(cuda_launched(be, "softcap_kernel"));
    }
    if (a->logits) HG_TRY(copy_logits(be, a->logits, a->scratch, a->N, V, Vp));
    if (!a->targets) return HG_OK;
    CUDA_DISPATCH(be, auto k = cuda_vec16_ok<T>(Vp, {a->scratch}) ? cross_entropy_kernel<T, VEC16(T)> : cross_entropy_kernel<T, 1>;
                  k<<<a->N, CE_THREADS, 0, cuda_stream(be)>>>((T *)a->scratch, a->losses, a->targets, V, Vp, a->dscale,
                                                              a->dx != NULL, a->softcap));
    return cuda_launched(be, "cross_entropy_kernel");
}

extern "C" hg_status cuda_classifier_backward(hg_backend *be, const hg_classifier_args *a) {
    CUDA_OP("classifier_backward");
    const int C = a->C, Vp = a->Vp;
    cuda_gemm_desc ddx = {a->N, C, Vp, 0, 0, Vp, C, C, 0, 0, EPI_NONE};
    HG_TRY(cuda_gemm(be, &ddx, a->scratch, a->wte, a->dx, NULL, NULL));
    cuda_gemm_desc dw = {Vp, C, a->N, 1, 0, Vp, C, C, 1, 1, a->dbias ? EPI_BGRAD_A : EPI_NONE};
    return cuda_gemm(be, &dw, a->scratch, a->x, a->dwte, a->dbias, NULL);
}
