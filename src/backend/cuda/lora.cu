/* LoRA adapters on the GPU (ops/lora.h), the CPU's computation (backend/cpu/lora.c) as
 * cuBLASLt products: h kept pre-scaled, h_j = s_j drop(x) A_j^T, so the up product needs
 * no scale and dB_j = dy_j^T h_j; dh_j = s_j dy_j B_j is scaled after its product. The
 * dropout mask is hg_dropout_scale's, the CPU's bit for bit. Operands are the compute
 * type T; dA and dB are fp32 gradients, accumulated (the dW GEMMs' fp32 output).
 * Written 2026-11-28 without a GPU: cuda_supports refuses LoRA unless
 * HANDGRAD_CUDA_UNTESTED=1 (the GPU session's checks, scripts/gpu_session.sh new). */
#include "backend/cuda/cuda.h"

/* xd (n) = x * the mask's scale. */
template <typename T>
__global__ void lora_drop_kernel(T *xd, const T *x, size_t n, hg_dropout d) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        xd[i] = from_f<T>(to_f(x[i]) * hg_dropout_scale(&d, i));
}

/* p (rows, cols, row stride ld) *= s. */
template <typename T>
__global__ void lora_scale_kernel(T *p, int rows, int cols, int ld, float s) {
    size_t n = (size_t)rows * cols;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        T *e = p + (i / cols) * ld + i % cols;
        *e = from_f<T>(to_f(*e) * s);
    }
}

/* dx += t * scale (the input's share through the mask), then t = x * scale (drop(x), for dA). */
template <typename T>
__global__ void lora_dx_kernel(T *dx, T *t, const T *x, size_t n, hg_dropout d) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const float sc = hg_dropout_scale(&d, i);
        dx[i] = from_f<T>(to_f(dx[i]) + to_f(t[i]) * sc);
        t[i] = from_f<T>(to_f(x[i]) * sc);
    }
}

template <typename T>
static hg_status scale(hg_backend *be, T *p, int rows, int cols, int ld, float s) {
    lora_scale_kernel<T><<<cuda_grid(be, (size_t)rows * cols), 256, 0, cuda_stream(be)>>>(p, rows, cols, ld, s);
    return cuda_launched(be, "lora_scale_kernel");
}

template <typename T>
static hg_status forward(hg_backend *be, T *y, T *h, const T *x, const hg_lora_weights *w, const hg_lora_shape *s,
                         const hg_dropout *drop, T *scratch) {
    const int R = s->r * s->n;
    const size_t nk = (size_t)s->N * s->K;
    const T *xd = x;
    if (hg_dropout_on(drop)) {
        lora_drop_kernel<T><<<cuda_grid(be, nk), 256, 0, cuda_stream(be)>>>(scratch, x, nk, *drop);
        HG_TRY(cuda_launched(be, "lora_drop_kernel"));
        xd = scratch;
    }
    for (int j = 0; j < s->n; j++) {
        T *hj = h + (size_t)j * s->r;
        /* h_j (N, r) = xd (N, K) @ A_j^T, A_j stored (r, K) */
        cuda_gemm_desc down = {s->N, s->r, s->K, 0, 1, s->K, s->K, R, 0, 0, EPI_NONE};
        HG_TRY(cuda_gemm(be, &down, xd, w->A[j], hj, NULL, NULL));
        HG_TRY(scale(be, hj, s->N, s->r, R, s->scale[j]));
        /* y[:, c0_j ..] (N, cols_j) += h_j @ B_j^T, B_j stored (cols_j, r) */
        cuda_gemm_desc up = {s->N, s->cols[j], s->r, 0, 1, R, s->r, s->OUT, 0, 1, EPI_NONE};
        HG_TRY(cuda_gemm(be, &up, hj, w->B[j], y + s->c0[j], NULL, NULL));
    }
    return HG_OK;
}

template <typename T>
static hg_status backward(hg_backend *be, T *dx, const T *dy, const T *x, const T *h, const hg_lora_weights *w,
                          const hg_lora_shape *s, const hg_dropout *drop, T *scratch) {
    const int R = s->r * s->n, on = hg_dropout_on(drop);
    const size_t nk = (size_t)s->N * s->K;
    T *t = scratch, *dh = on ? scratch + nk : scratch;
    for (int j = 0; j < s->n; j++) {
        const T *dyj = dy + s->c0[j], *hj = h + (size_t)j * s->r;
        T *dhj = dh + (size_t)j * s->r;
        /* dB_j (cols_j, r) += dy_j^T (cols_j, N) @ h_j (N, r) */
        cuda_gemm_desc db = {s->cols[j], s->r, s->N, 1, 0, s->OUT, R, s->r, 1, 1, EPI_NONE};
        HG_TRY(cuda_gemm(be, &db, dyj, hj, w->dB[j], NULL, NULL));
        /* dh_j (N, r) = s_j dy_j (N, cols_j) @ B_j (cols_j, r) */
        cuda_gemm_desc dhd = {s->N, s->r, s->cols[j], 0, 0, s->OUT, s->r, R, 0, 0, EPI_NONE};
        HG_TRY(cuda_gemm(be, &dhd, dyj, w->B[j], dhj, NULL, NULL));
        HG_TRY(scale(be, dhj, s->N, s->r, R, s->scale[j]));
    }
    /* the input's share, sum_j dh_j @ A_j: into dx, or with the dropout on into t */
    for (int j = 0; j < s->n; j++) {
        cuda_gemm_desc dxs = {s->N, s->K, s->r, 0, 0, R, s->K, s->K, 0, !on || j > 0, EPI_NONE};
        HG_TRY(cuda_gemm(be, &dxs, dh + (size_t)j * s->r, w->A[j], on ? t : dx, NULL, NULL));
    }
    if (on) {
        lora_dx_kernel<T><<<cuda_grid(be, nk), 256, 0, cuda_stream(be)>>>(dx, t, x, nk, *drop);
        HG_TRY(cuda_launched(be, "lora_dx_kernel"));
    }
    /* dA_j (r, K) += dh_j^T (r, N) @ drop(x) (N, K) */
    const T *xd = on ? t : x;
    for (int j = 0; j < s->n; j++) {
        cuda_gemm_desc da = {s->r, s->K, s->N, 1, 0, R, s->K, s->K, 1, 1, EPI_NONE};
        HG_TRY(cuda_gemm(be, &da, dh + (size_t)j * s->r, xd, w->dA[j], NULL, NULL));
    }
    return HG_OK;
}

/* keep is left unwritten: the backward draws the mask again (ops/lora.h allows it). */
extern "C" hg_status cuda_lora_forward(hg_backend *be, float *y, float *h, uint32_t *keep, const float *x,
                                       const hg_lora_weights *w, const hg_lora_shape *s, const hg_dropout *drop,
                                       void *scratch) {
    (void)keep;
    CUDA_OP("lora_forward");
    hg_status st = HG_OK;
    CUDA_DISPATCH(be, st = forward<T>(be, (T *)y, (T *)h, (const T *)x, w, s, drop, (T *)scratch));
    return st;
}

extern "C" hg_status cuda_lora_backward(hg_backend *be, float *dx, const float *dy, const float *x, const float *h,
                                        const uint32_t *keep, const hg_lora_weights *w, const hg_lora_shape *s,
                                        const hg_dropout *drop, void *scratch) {
    (void)keep;
    CUDA_OP("lora_backward");
    hg_status st = HG_OK;
    CUDA_DISPATCH(be, st = backward<T>(be, (T *)dx, (const T *)dy, (const T *)x, (const T *)h, w, s, drop, (T *)scratch));
    return st;
}
