/* AdamW and the gradient norm on the CPU, one pass each over the flat buffers. In bf16 the
 * pass also writes the weights' bf16 copy from the new fp32 value, rounded to nearest
 * even, or stochastically with the CUDA backend's draws (adamw.cu); moments held in bf16
 * are rounded stochastically with draws of their own (ops/adamw.h), so a CPU and a GPU
 * run round alike. */
#include <math.h>

#include "backend/cpu/bf16.h"
#include "backend/cpu/cpu.h"
#include "core/rng.h"

enum { ROUND_GROUP = 8 };

/* x to bf16 with 16 random bits r16 added below the mantissa (inf and NaN to nearest). */
static inline uint16_t bf16_stochastic(float x, uint32_t r16) {
    uint32_t u;
    memcpy(&u, &x, 4);
    if ((u & 0x7f800000u) == 0x7f800000u) return f32_to_bf16(x);
    return (uint16_t)((u + (r16 & 0xffffu)) >> 16);
}

/* The 16 random bits of element j of a group of 8 from its Philox block. */
static inline uint32_t group_bits(hg_u32x4 r, int j) { return r.v[j / 2] >> (16 * (j % 2)); }

static inline hg_u32x4 rounding_draws(const hg_adamw_args *a, size_t group, uint32_t k) {
    return hg_philox(a->seed, (uint32_t)group, (uint32_t)(group >> 32), HG_RNG_ROUNDING | k << 8, a->step);
}

/* Elements [i0, i0+n) of the parameter buffer: p, g, m, v, and w (their bf16 copy, or
 * NULL: none, or one kept in fp32, which the caller copies) at their first element. */
static void adamw_tensor(hg_backend *be, float *p, const float *g, float *m, float *v, uint16_t *w, size_t i0, size_t n,
                         const hg_adamw_args *a, float wd) {
    const hg_adamw_update *u = &a->u;
    const float b1 = u->beta1, b2 = u->beta2, gs = u->grad_scale;
    const float decay = 1.0f - u->lr * wd;
    const float step = u->lr / u->bias_correction1, inv_sqrt_bc2 = 1.0f / sqrtf(u->bias_correction2);
    const int round_nearest = w && !a->stochastic;
    #pragma omp parallel for simd schedule(static) num_threads(be->threads)
    for (size_t i = 0; i < n; i++) {
        float gi = g[i] * gs;
        float mi = b1 * m[i] + (1.0f - b1) * gi;
        float vi = b2 * v[i] + (1.0f - b2) * gi * gi;
        m[i] = mi;
        v[i] = vi;
        p[i] = p[i] * decay - step * mi / (sqrtf(vi) * inv_sqrt_bc2 + u->eps);
        if (round_nearest) w[i] = f32_to_bf16(p[i]);
    }
    if (!w || round_nearest) return;
    /* stochastic: one Philox block per group of 8 elements of the whole buffer */
    size_t g0 = i0 / ROUND_GROUP, g1 = (i0 + n + ROUND_GROUP - 1) / ROUND_GROUP;
    #pragma omp parallel for schedule(static) num_threads(be->threads)
    for (size_t gi = g0; gi < g1; gi++) {
        hg_u32x4 r = rounding_draws(a, gi, 0);
        for (int j = 0; j < ROUND_GROUP; j++) {
            size_t e = gi * ROUND_GROUP + (size_t)j;
            if (e >= i0 && e < i0 + n) w[e - i0] = bf16_stochastic(p[e - i0], group_bits(r, j));
        }
    }
}

/* adamw_tensor with the moments m, v held in bf16: a group of 8 elements of the buffer
 * at a time, each with its draws. */
static void adamw_tensor_bf16_state(hg_backend *be, float *p, const float *g, uint16_t *m, uint16_t *v, uint16_t *w,
                                    size_t i0, size_t n, const hg_adamw_args *a, float wd) {
    const hg_adamw_update *u = &a->u;
    const float b1 = u->beta1, b2 = u->beta2, gs = u->grad_scale;
    const float decay = 1.0f - u->lr * wd;
    const float step = u->lr / u->bias_correction1, inv_sqrt_bc2 = 1.0f / sqrtf(u->bias_correction2);
    size_t g0 = i0 / ROUND_GROUP, g1 = (i0 + n + ROUND_GROUP - 1) / ROUND_GROUP;
    #pragma omp parallel for schedule(static) num_threads(be->threads)
    for (size_t gi = g0; gi < g1; gi++) {
        hg_u32x4 rm = rounding_draws(a, gi, 1), rv = rounding_draws(a, gi, 2);
        hg_u32x4 rw = w && a->stochastic ? rounding_draws(a, gi, 0) : (hg_u32x4){{0, 0, 0, 0}};
        size_t e0 = gi * ROUND_GROUP > i0 ? gi * ROUND_GROUP : i0;
        size_t e1 = gi * ROUND_GROUP + ROUND_GROUP < i0 + n ? gi * ROUND_GROUP + ROUND_GROUP : i0 + n;
        for (size_t e = e0; e < e1; e++) {
            const size_t i = e - i0;
            const int j = (int)(e % ROUND_GROUP);
            float gi_ = g[i] * gs;
            float mi = b1 * bf16_to_f32(m[i]) + (1.0f - b1) * gi_;
            float vi = b2 * bf16_to_f32(v[i]) + (1.0f - b2) * gi_ * gi_;
            m[i] = bf16_stochastic(mi, group_bits(rm, j));
            v[i] = bf16_stochastic(vi, group_bits(rv, j));
            p[i] = p[i] * decay - step * mi / (sqrtf(vi) * inv_sqrt_bc2 + u->eps);
            if (w) w[i] = a->stochastic ? bf16_stochastic(p[i], group_bits(rw, j)) : f32_to_bf16(p[i]);
        }
    }
}

/* a->w: the compute copy (the `weights` layout) in bf16, whose norm tensors are fp32
 * (residual_fp32); NULL in fp32, where p is it. */
void cpu_adamw(hg_backend *be, const hg_adamw_args *a) {
    for (int i = 0; i < a->params->count; i++) {
        const hg_tensor_spec *s = &a->params->specs[i];
        size_t t0 = s->offset / sizeof(float), t1 = t0 + (size_t)s->alloc;
        size_t a0 = t0 > a->lo ? t0 : a->lo, a1 = t1 < a->lo + a->n ? t1 : a->lo + a->n;
        if (a0 >= a1) continue;
        float wd = (s->flags & HG_SPEC_DECAY) ? a->u.weight_decay : 0.0f;
        size_t o = a0 - a->lo;
        char *w = a->w ? (char *)a->w + a->weights->specs[i].offset : NULL;
        int w32 = w && a->weights->specs[i].elem_size == sizeof(float);
        uint16_t *w16 = w && !w32 ? (uint16_t *)w + (a0 - t0) : NULL;
        if (a->state == HG_PRECISION_BF16)
            adamw_tensor_bf16_state(be, a->p + a0, a->g + o, (uint16_t *)a->m + o, (uint16_t *)a->v + o, w16, a0, a1 - a0,
                                    a, wd);
        else
            adamw_tensor(be, a->p + a0, a->g + o, (float *)a->m + o, (float *)a->v + o, w16, a0, a1 - a0, a, wd);
        if (w32) memcpy((float *)w + (a0 - t0), a->p + a0, (a1 - a0) * sizeof(float));
    }
}

/* Fixed blocks summed in double, then added in block order: the same result for any
 * thread count or schedule. */
void cpu_sumsq(hg_backend *be, const float *x, size_t n, double *out) {
    enum { BLOCK = 1 << 16, MAX_BLOCKS = 1 << 14 };
    size_t nblocks = (n + BLOCK - 1) / BLOCK;
    double total = 0.0;
    for (size_t base = 0; base < nblocks; base += MAX_BLOCKS) {
        double part[MAX_BLOCKS];
        long cnt = (long)(nblocks - base < MAX_BLOCKS ? nblocks - base : MAX_BLOCKS);
        #pragma omp parallel for schedule(static) num_threads(be->threads)
        for (long bi = 0; bi < cnt; bi++) {
            size_t i0 = (base + (size_t)bi) * BLOCK, i1 = i0 + BLOCK < n ? i0 + BLOCK : n;
            double acc = 0.0;
            #pragma omp simd reduction(+ : acc)
            for (size_t i = i0; i < i1; i++) acc += (double)x[i] * x[i];
            part[bi] = acc;
        }
        for (long bi = 0; bi < cnt; bi++) total += part[bi];
    }
    *out = total;
}
