/* Rotary position embedding on the CPU, in place on the q and k heads of QKV. One pass
 * over each row's NH + NKV heads, reading that position's cos | sin row. The backward is
 * the same rotation by -a. Rows split statically across threads. */
#include "backend/cpu/cpu.h"

static void rotate(hg_backend *be, float *qkv, const float *cos_sin, const hg_rope_shape *s, float sign) {
    const int hs = s->hs, half = hs / 2, heads = s->NH + s->NKV, W = (s->NH + 2 * s->NKV) * hs;
    #pragma omp parallel for schedule(static) num_threads(be->threads)
    for (int n = 0; n < s->B * s->T; n++) {
        const float *cs = cos_sin + (size_t)(s->pos0 + n % s->T) * hs, *sn = cs + half;
        float *row = qkv + (size_t)n * W;
        for (int h = 0; h < heads; h++) {
            float *x = row + h * hs, *y = x + half;
            #pragma omp simd
            for (int i = 0; i < half; i++) {
                float a = x[i], b = y[i], c = cs[i], si = sign * sn[i];
                x[i] = a * c - b * si;
                y[i] = b * c + a * si;
            }
        }
    }
}

void cpu_rope_forward(hg_backend *be, float *qkv, const float *cos_sin, const hg_rope_shape *s) {
    rotate(be, qkv, cos_sin, s, 1.0f);
}

void cpu_rope_backward(hg_backend *be, float *dqkv, const float *cos_sin, const hg_rope_shape *s) {
    rotate(be, dqkv, cos_sin, s, -1.0f);
}
