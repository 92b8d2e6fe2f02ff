/* Attention through the KV cache on the GPU (generation; src/ops/attention.h), in fp32 or
 * bf16 storage with fp32 arithmetic. Written for clarity, like attention_fp32.cu: a
 * decoding step has one query row per head, so there is little to tile.
 *
 *   kv_store_kernel       - the new rows' k and v into the caches, one thread an element;
 *   attention_cached_kernel - one warp per (head, new row): online softmax over cache rows
 *                           0 .. pos0+i; lane l holds elements l, l+32, l+64, l+96 of the
 *                           head vectors (hs <= 128), each dot product a warp sum.
 * Two launches, so every row a query reads is stored before any query runs. */
#include <math.h>

#include "backend/cuda/cuda.h"

enum { CACHED_WARPS = 8, CACHED_PER_LANE = 4 }; /* hs <= 32 * CACHED_PER_LANE */

template <typename T>
__global__ void kv_store_kernel(T *kc, T *vc, const T *qkv, hg_kv_shape s) {
    const int C = s.NH * s.hs;
    size_t idx = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (idx >= (size_t)s.n * C) return;
    int i = (int)(idx / C), c = (int)(idx % C), h = c / s.hs, d = c % s.hs;
    size_t at = ((size_t)h * s.Tc + s.pos0 + i) * s.hs + d;
    kc[at] = qkv[(size_t)i * 3 * C + C + c];
    vc[at] = qkv[(size_t)i * 3 * C + 2 * C + c];
}

template <typename T>
__global__ void attention_cached_kernel(T *out, const T *kc, const T *vc, const T *qkv, hg_kv_shape s, float scale) {
    int r = blockIdx.x * CACHED_WARPS + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (r >= s.NH * s.n) return;
    const int h = r / s.n, i = r % s.n, C = s.NH * s.hs;
    const T *K = kc + (size_t)h * s.Tc * s.hs, *V = vc + (size_t)h * s.Tc * s.hs;
    float q[CACHED_PER_LANE], o[CACHED_PER_LANE];
#pragma unroll
    for (int u = 0; u < CACHED_PER_LANE; u++) {
        int d = lane + 32 * u;
        q[u] = d < s.hs ? to_f(qkv[(size_t)i * 3 * C + h * s.hs + d]) : 0.0f;
        o[u] = 0.0f;
    }
    float m = -INFINITY, l = 0.0f;
    for (int j = 0; j <= s.pos0 + i; j++) {
        float dot = 0.0f;
#pragma unroll
        for (int u = 0; u < CACHED_PER_LANE; u++) {
            int d = lane + 32 * u;
            if (d < s.hs) dot += q[u] * to_f(K[(size_t)j * s.hs + d]);
        }
        float sc = warp_sum(dot) * scale, mnew = fmaxf(m, sc), corr = expf(m - mnew), p = expf(sc - mnew);
        l = l * corr + p;
#pragma unroll
        for (int u = 0; u < CACHED_PER_LANE; u++) {
            int d = lane + 32 * u;
            o[u] = o[u] * corr + (d < s.hs ? p * to_f(V[(size_t)j * s.hs + d]) : 0.0f);
        }
        m = mnew;
    }
#pragma unroll
    for (int u = 0; u < CACHED_PER_LANE; u++) {
        int d = lane + 32 * u;
        if (d < s.hs) out[(size_t)i * C + h * s.hs + d] = from_f<T>(o[u] / l);
    }
}

extern "C" hg_status cuda_attention_cached(hg_backend *be, float *out, float *kcache, float *vcache, const float *qkv,
                                           const hg_kv_shape *s, void *scratch) {
    CUDA_OP("attention_cached");
    (void)scratch;
    if (s->hs <= 0 || s->hs > 32 * CACHED_PER_LANE)
        return cuda_fail(be, HG_ERR_UNSUPPORTED, "attention_cached: head size %d is not supported on CUDA (at most %d)", s->hs,
                         32 * CACHED_PER_LANE);
    const size_t elems = (size_t)s->n * s->NH * s->hs;
    const unsigned rows = (unsigned)(((size_t)s->NH * s->n + CACHED_WARPS - 1) / CACHED_WARPS);
    const float scale = 1.0f / sqrtf((float)s->hs);
    CUDA_DISPATCH(be, kv_store_kernel<T><<<cuda_blocks(elems, 256), 256, 0, cuda_stream(be)>>>((T *)kcache, (T *)vcache,
                                                                                               (const T *)qkv, *s));
    HG_TRY(cuda_launched(be, "kv_store_kernel"));
    CUDA_DISPATCH(be, attention_cached_kernel<T><<<rows, 32 * CACHED_WARPS, 0, cuda_stream(be)>>>(
                          (T *)out, (const T *)kcache, (const T *)vcache, (const T *)qkv, *s, scale));
    return cuda_launched(be, "attention_cached_kernel");
}
