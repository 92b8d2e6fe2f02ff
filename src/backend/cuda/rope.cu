/* Rotary position embedding on the GPU (src/ops/rope.h), in place on the q and k heads of
 * QKV. One thread per rotated pair (row, head, i < r/2, r = hs or fewer): it reads x_i and x_{i+r/2} of
 * its head in T and that position's cos and sin in fp32, rotates in fp32 and stores T.
 * Consecutive threads take consecutive i, so a warp reads contiguous halves of a head.
 * The backward is the same rotation by -a (its transpose). No reductions.
 *
 * Legend: B batch, T time, NH query heads, NKV key/value heads, hs head size,
 * W = (NH + 2 NKV) hs the QKV row, Tmax the table's rows (max_seq_len). */
#include "backend/cuda/cuda.h"

/* The q heads (NH) and then the k heads (NKV) lead each row, so head h of either starts at
 * column h*hs; v (the last NKV heads) is not touched. sign: 1 forward, -1 backward. */
template <typename T>
__global__ void rope_kernel(T *qkv /* (B,T,W) */, const float *cos_sin /* (Tmax,r) fp32 */, hg_rope_shape s, float sign) {
    const int rot = s.rot ? s.rot : s.hs, half = rot / 2, heads = s.NH + s.NKV;
    const size_t W = (size_t)(s.NH + 2 * s.NKV) * s.hs, pairs = (size_t)s.B * s.T * heads * half;
    for (size_t p = blockIdx.x * (size_t)blockDim.x + threadIdx.x; p < pairs; p += (size_t)gridDim.x * blockDim.x) {
        const int i = (int)(p % half), h = (int)(p / half % heads);
        const size_t n = p / half / heads; /* row b*T + t, at position pos0 + t or pos[n] */
        const float *cs = cos_sin + (size_t)(s.pos ? s.pos[n] : s.pos0 + (int)(n % s.T)) * rot;
        const float c = cs[i], sn = sign * cs[half + i];
        T *x = qkv + n * W + (size_t)h * s.hs + i, *y = x + half;
        const float a = to_f(*x), b = to_f(*y);
        *x = from_f<T>(a * c - b * sn);
        *y = from_f<T>(b * c + a * sn);
    }
}

static void rotate(hg_backend *be, float *qkv, const float *cos_sin, const hg_rope_shape *s, float sign) {
    size_t pairs = (size_t)s->B * s->T * (s->NH + s->NKV) * (hg_rope_dims(s) / 2);
    if (!pairs) return;
    CUDA_DISPATCH(be, rope_kernel<T><<<cuda_grid(be, pairs), 256, 0, cuda_stream(be)>>>((T *)qkv, cos_sin, *s, sign));
    cuda_launched(be, "rope_kernel");
}

extern "C" void cuda_rope_forward(hg_backend *be, float *qkv, const float *cos_sin, const hg_rope_shape *s) {
    CUDA_OP("rope_forward");
    rotate(be, qkv, cos_sin, s, 1.0f);
}

extern "C" void cuda_rope_backward(hg_backend *be, float *dqkv, const float *cos_sin, const hg_rope_shape *s) {
    CUDA_OP("rope_backward");
    rotate(be, dqkv, cos_sin, s, -1.0f);
}
