/* Attention through the KV cache on the GPU (generation; src/ops/attention.h), in fp32 or
 * bf16 storage with fp32 arithmetic. Written for clarity, like attention_rows.cu: a
 * decoding step has one query row per head, so there is little to tile.
 *
 *   kv_store_kernel       - the new rows' k and v into the caches, one thread an element;
 *   attention_cached_kernel - one warp per (head, new row): online softmax over cache rows
 *                           0 .. pos0+i of the head's kv head; lane l holds elements l,
 *                           l+32, ..., l+224 of the head vectors (hs <= 256), each dot
 *                           product a warp sum; scores capped where s.softcap is set.
 * Two launches, so every row a query reads is stored before any query runs.
 *
 * qkv (n,W) as in cuda.h: q (NH heads) | k (NKV) | v (NKV); caches (NKV,Tc,hs); out (n,C),
 * C = NH hs. The kernels get the shape with NKV resolved (never 0). */
#include <math.h>

#include "backend/cuda/cuda.h"

enum { CACHED_WARPS = 8, CACHED_PER_LANE = CUDA_MAX_HEAD_SIZE / 32 }; /* hs <= 32 * CACHED_PER_LANE */

template <typename T>
__global__ void kv_store_kernel(T *kc /* (NKV,Tc,hs) */, T *vc /* (NKV,Tc,hs) */, const T *qkv /* (n,W) */, hg_kv_shape s) {
    const int KVD = s.NKV * s.hs;
    const size_t W = qkv_width(s.NH, s.NKV, s.hs);
    size_t idx = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (idx >= (size_t)s.n * KVD) return;
    int i = (int)(idx / KVD), c = (int)(idx % KVD), kh = c / s.hs, d = c % s.hs;
    size_t at = ((size_t)kh * s.Tc + s.pos0 + i) * s.hs + d;
    kc[at] = qkv[i * W + k_column(0, s.NH, s.hs) + c];
    vc[at] = qkv[i * W + v_column(0, s.NH, s.NKV, s.hs) + c];
}

template <typename T>
__global__ void attention_cached_kernel(T *out /* (n,C) */, const T *kc /* (NKV,Tc,hs) */, const T *vc /* (NKV,Tc,hs) */,
                                        const T *qkv /* (n,W) */, hg_kv_shape s, float scale) {
    int r = blockIdx.x * CACHED_WARPS + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (r >= s.NH * s.n) return;
    const int h = r / s.n, i = r % s.n, C = s.NH * s.hs, kh = kv_head_of(h, s.NH, s.NKV);
    const size_t W = qkv_width(s.NH, s.NKV, s.hs);
    const T *K = kc + (size_t)kh * s.Tc * s.hs, *V = vc + (size_t)kh * s.Tc * s.hs;
    float q[CACHED_PER_LANE], o[CACHED_PER_LANE];
#pragma unroll
    for (int u = 0; u < CACHED_PER_LANE; u++) {
        int d = lane + 32 * u;
        q[u] = d < s.hs ? to_f(qkv[i * W + h * s.hs + d]) : 0.0f;
        o[u] = 0.0f;
    }
    float m = -INFINITY, l = 0.0f;
    /* with a window, only its last `window` rows */
    for (int j = s.window > 0 && s.pos0 + i + 1 > s.window ? s.pos0 + i + 1 - s.window : 0; j <= s.pos0 + i; j++) {
        float dot = 0.0f;
#pragma unroll
        for (int u = 0; u < CACHED_PER_LANE; u++) {
            int d = lane + 32 * u;
            if (d < s.hs) dot += q[u] * to_f(K[(size_t)j * s.hs + d]);
        }
        float sc = warp_sum(dot) * scale;
        if (s.softcap > 0.0f) sc = s.softcap * tanhf(sc / s.softcap);
        float mnew = fmaxf(m, sc), corr = expf(m - mnew), p = expf(sc - mnew);
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
    hg_kv_shape ks = *s;
    if (!ks.NKV) ks.NKV = ks.NH;
    const size_t elems = (size_t)ks.n * ks.NKV * ks.hs;
    const unsigned rows = (unsigned)(((size_t)ks.NH * ks.n + CACHED_WARPS - 1) / CACHED_WARPS);
    const float scale = 1.0f / sqrtf((float)ks.hs);
    CUDA_DISPATCH(be, kv_store_kernel<T><<<cuda_blocks(elems, 256), 256, 0, cuda_stream(be)>>>((T *)kcache, (T *)vcache,
                                                                                               (const T *)qkv, ks));
    HG_TRY(cuda_launched(be, "kv_store_kernel"));
    CUDA_DISPATCH(be, attention_cached_kernel<T><<<rows, 32 * CACHED_WARPS, 0, cuda_stream(be)>>>(
                          (T *)out, (const T *)kcache, (const T *)vcache, (const T *)qkv, ks, scale));
    return cuda_launched(be, "attention_cached_kernel");
}
