/* Token and position embeddings on the GPU, forward and backward. wpe and dwpe are NULL
 * in a model without learned positions (RoPE): the position term is left out. With
 * packed documents (pos, (B,T) on the device) token (b, t) takes wpe row pos[b, t].
 *
 * Backward: dwpe (Tmax,C) is a sum over the batch, one thread per (t, c) walking b in
 * order (deterministic); with positions, one block per position p sums the rows at p in
 * row order, as the ordered dwte below. dwte is a scatter by token id: fp32 atomicAdd, so its
 * summation order, unlike the CPU's, varies between runs (last bits only); with
 * HG_FLAG_DETERMINISTIC a block per row instead, where the first row of each token id
 * sums that id's rows in row order and adds the sum alone (no atomics). */
#include "backend/cuda/cuda.h"

template <typename T>
__global__ void encoder_forward_kernel(T *out, const int32_t *tokens, const int32_t *pos, const T *wte, const T *wpe, int BT,
                                       int T_, int C, float scale, hg_dropout drop) {
    size_t n = (size_t)BT * C;
    int dropping = hg_dropout_on(&drop);
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        size_t r = i / C, c = i % C;
        float v = scale * to_f(wte[(size_t)tokens[r] * C + c]);
        if (wpe) v += to_f(wpe[(size_t)(pos ? pos[r] : (int)(r % T_)) * C + c]);
        if (dropping) v *= hg_dropout_scale(&drop, i);
        out[i] = from_f<T>(v);
    }
}

template <typename T>
__global__ void encoder_backward_wte_kernel(float *dwte, const T *dout, const int32_t *tokens, int BT, int C, float scale,
                                            hg_dropout drop) {
    size_t n = (size_t)BT * C;
    int dropping = hg_dropout_on(&drop);
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        size_t r = i / C, c = i % C;
        float g = to_f(dout[i]);
        if (dropping) g *= hg_dropout_scale(&drop, i);
        atomicAdd(&dwte[(size_t)tokens[r] * C + c], scale * g);
    }
}

/* out (C) += scale * the sum of the rows j of dout whose keys[j] is id, from row j0 on,
 * taken in row order (a block of 256 threads): the rows are listed in order in shared
 * memory (ORDERED_LIST at a time, found by a ballot over 256 rows), then each thread sums
 * its channels down the list; a longer run adds list by list, in order. */
#define ORDERED_LIST 2048
template <typename T>
__device__ void add_rows_ordered(float *out, const T *dout, const int32_t *keys, int id, int j0, int BT, int C, float scale,
                                 const hg_dropout &drop) {
    __shared__ int rows[ORDERED_LIST];
    __shared__ int warp_count[8];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int dropping = hg_dropout_on(&drop);
    while (j0 < BT) {
        /* list the rows with the id from j0 on, in order, until the list is full */
        int n = 0;
        for (; j0 < BT && n + 256 <= ORDERED_LIST; j0 += 256) {
            const int j = j0 + threadIdx.x;
            const bool hit = j < BT && keys[j] == id;
            const unsigned ballot = __ballot_sync(0xffffffffu, hit);
            if (lane == 0) warp_count[warp] = __popc(ballot);
            __syncthreads();
            int before = n;
            for (int w = 0; w < warp; w++) before += warp_count[w];
            if (hit) rows[before + __popc(ballot & ((1u << lane) - 1u))] = j;
            for (int w = 0; w < 8; w++) n += warp_count[w];
            __syncthreads();
        }
        for (int c = threadIdx.x; c < C; c += blockDim.x) {
            float s = 0.0f;
            for (int k = 0; k < n; k++) {
                const size_t i = (size_t)rows[k] * C + c;
                const float g = to_f(dout[i]);
                s += dropping ? g * hg_dropout_scale(&drop, i) : g;
            }
            out[c] += scale * s;
        }
        __syncthreads(); /* the list is rewritten next round */
    }
}

/* Block r: if row r is the first with its token id, dwte[id] += the sum of every row with
 * that id, taken in row order; other blocks return. */
template <typename T>
__global__ void __launch_bounds__(256) encoder_backward_wte_ordered_kernel(float *dwte, const T *dout,
                                                                           const int32_t *tokens, int BT, int C,
                                                                           float scale, hg_dropout drop) {
    const int r = blockIdx.x, id = tokens[r];
    int seen = 0;
    for (int j = threadIdx.x; j < r && !seen; j += blockDim.x) seen = tokens[j] == id;
    if (__syncthreads_or(seen)) return;
    add_rows_ordered<T>(dwte + (size_t)id * C, dout, tokens, id, r, BT, C, scale, drop);
}

/* Block x: for each position p = x, x + gridDim.x, ... up to the largest in pos (a row
 * that begins inside a document holds positions past T), dwpe[p] += the sum of the rows
 * at p, in row order. */
template <typename T>
__global__ void __launch_bounds__(256) encoder_backward_wpe_pos_kernel(float *dwpe, const T *dout, const int32_t *pos,
                                                                       int BT, int C, hg_dropout drop) {
    __shared__ int top;
    if (threadIdx.x == 0) top = 0;
    __syncthreads();
    int mine = 0;
    for (int j = threadIdx.x; j < BT; j += blockDim.x) mine = pos[j] > mine ? pos[j] : mine;
    atomicMax(&top, mine);
    __syncthreads();
    for (int p = (int)blockIdx.x; p <= top; p += (int)gridDim.x)
        add_rows_ordered<T>(dwpe + (size_t)p * C, dout, pos, p, 0, BT, C, 1.0f, drop);
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

extern "C" void cuda_encoder_forward(hg_backend *be, float *out, const int32_t *tokens, const int32_t *pos, const float *wte,
                                     const float *wpe, int B, int T_, int C, float scale, const hg_dropout *drop) {
    CUDA_OP("encoder_forward");
    size_t n = (size_t)B * T_ * C;
    CUDA_DISPATCH(be, encoder_forward_kernel<T><<<cuda_grid(be, n), 256, 0, cuda_stream(be)>>>(
                          (T *)out, tokens, pos, (const T *)wte, (const T *)wpe, B * T_, T_, C, scale, cuda_dropout(drop)));
    cuda_launched(be, "encoder_forward_kernel");
}

extern "C" void cuda_encoder_backward(hg_backend *be, float *dwte, float *dwpe, const float *dout, const int32_t *tokens,
                                      const int32_t *pos, int B, int T_, int C, float scale, const hg_dropout *drop) {
    CUDA_OP("encoder_backward");
    hg_dropout d = cuda_dropout(drop);
    if (be->flags & HG_FLAG_DETERMINISTIC) {
        CUDA_DISPATCH(be, encoder_backward_wte_ordered_kernel<T><<<B * T_, 256, 0, cuda_stream(be)>>>(
                              dwte, (const T *)dout, tokens, B * T_, C, scale, d));
        if (cuda_launched(be, "encoder_backward_wte_ordered_kernel") != HG_OK) return;
    } else {
        CUDA_DISPATCH(be, encoder_backward_wte_kernel<T><<<cuda_grid(be, (size_t)B * T_ * C), 256, 0, cuda_stream(be)>>>(
                              dwte, (const T *)dout, tokens, B * T_, C, scale, d));
        if (cuda_launched(be, "encoder_backward_wte_kernel") != HG_OK) return;
    }
    if (!dwpe) return;
    if (pos) {
        CUDA_DISPATCH(be, encoder_backward_wpe_pos_kernel<T><<<T_, 256, 0, cuda_stream(be)>>>(dwpe, (const T *)dout, pos,
                                                                                                B * T_, C, d));
        cuda_launched(be, "encoder_backward_wpe_pos_kernel");
        return;
    }
    CUDA_DISPATCH(be, encoder_backward_wpe_kernel<T><<<cuda_grid(be, (size_t)T_ * C), 256, 0, cuda_stream(be)>>>(
                          dwpe, (const T *)dout, B, T_, C, d));
    cuda_launched(be, "encoder_backward_wpe_kernel");
}
