/* Rotary position embedding on the CPU, in place on the first r dimensions of the q and k
 * heads of QKV. One pass over each row's NH + NKV heads, reading that position's cos | sin
 * row. The backward is
 * the same rotation by -a. Rows split statically across threads; a head's halves are
 * read and written in the compute type and rotated in fp32 (bf16.h). */
#include "backend/cpu/bf16.h"
#include "backend/cpu/cpu.h"

#define ROPE_HALF_MAX 512 /* head_dim is at most 1024 (config.c) */

static void rotate(hg_backend *be, float *qkv, const float *cos_sin, const hg_rope_shape *s, float sign) {
    const int hs = s->hs, rot = hg_rope_dims(s), half = rot / 2, heads = s->NH + s->NKV;
    const size_t W = (size_t)(s->NH + 2 * s->NKV) * hs;
    #pragma omp parallel for schedule(static) num_threads(be->threads)
    for (int n = 0; n < s->B * s->T; n++) {
        const float *cs = cos_sin + (size_t)(s->pos ? s->pos[n] : s->pos0 + n % s->T) * rot, *sn = cs + half;
        float xb[ROPE_HALF_MAX], yb[ROPE_HALF_MAX];
        for (int h = 0; h < heads; h++) {
            size_t at = (size_t)n * W + (size_t)h * hs;
            float *x = cpu_inout(be, qkv, at, half, xb), *y = cpu_inout(be, qkv, at + half, half, yb);
            #pragma omp simd
            for (int i = 0; i < half; i++) {
                float a = x[i], b = y[i], c = cs[i], si = sign * sn[i];
                x[i] = a * c - b * si;
                y[i] = b * c + a * si;
            }
            cpu_commit(be, qkv, at, x, half);
            cpu_commit(be, qkv, at + half, y, half);
        }
    }
}

void cpu_rope_forward(hg_backend *be, float *qkv, const float *cos_sin, const hg_rope_shape *s) {
    rotate(be, qkv, cos_sin, s, 1.0f);
}

void cpu_rope_backward(hg_backend *be, float *dqkv, const float *cos_sin, const hg_rope_shape *s) {
    rotate(be, dqkv, cos_sin, s, -1.0f);
}
