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

/* adamw_tensor with the moments m, v held in bf16: GROUPS rounding groups of 8 elements
 * at a time, their draws made in bulk (cpu_philox_words) for m, v and a stochastic w and
 * laid out by element, so that the update runs as one loop the compiler vectorizes. */
static void adamw_tensor_bf16_state(hg_backend *be, float *p, const float *g, uint16_t *m, uint16_t *v, uint16_t *w,
                                    size_t i0, size_t n, const hg_adamw_args *a, float wd) {
    enum { GROUPS = 256, E = GROUPS * ROUND_GROUP }; /* a multiple of every bulk width: no chunk crosses 2^32 groups */
    const hg_adamw_update *u = &a->u;
    const float b1 = u->beta1, b2 = u->beta2, gs = u->grad_scale;
    const float decay = 1.0f - u->lr * wd, eps = u->eps;
    const float step = u->lr / u->bias_correction1, inv_sqrt_bc2 = 1.0f / sqrtf(u->bias_correction2);
    const int sw = w && a->stochastic, nw = w && !a->stochastic;
    const size_t c0 = i0 / E, c1 = (i0 + n + E - 1) / E;
    #pragma omp parallel for schedule(static) num_threads(be->threads)
    for (size_t c = c0; c < c1; c++) {
        uint32_t words[4][GROUPS];
        uint16_t r16[3][E]; /* stream k's 16 bits for element e of the chunk */
        const size_t gfirst = c * GROUPS;
        for (uint32_t k = 0; k < 3; k++) {
            if (!k && !sw) continue;
            uint32_t *const wq[4] = {words[0], words[1], words[2], words[3]};
            cpu_philox_words(a->seed, (uint32_t)gfirst, GROUPS, (uint32_t)(gfirst >> 32), HG_RNG_ROUNDING | k << 8,
                             a->step, wq);
            for (int l = 0; l < GROUPS; l++)
                for (int j = 0; j < ROUND_GROUP; j++) r16[k][l * ROUND_GROUP + j] = (uint16_t)(words[j / 2][l] >> (16 * (j % 2)));
        }
        const size_t e0 = c * E > i0 ? c * E : i0, e1 = (c + 1) * E < i0 + n ? (c + 1) * E : i0 + n;
        float *pc = p + (e0 - i0);
        const float *gc = g + (e0 - i0);
        uint16_t *mc = m + (e0 - i0), *vc = v + (e0 - i0), *wc = w ? w + (e0 - i0) : NULL;
        const uint16_t *rm = r16[1] + (e0 - c * E), *rv = r16[2] + (e0 - c * E), *rw = r16[0] + (e0 - c * E);
        #pragma omp simd
        for (size_t i = 0; i < e1 - e0; i++) {
            float gi_ = gc[i] * gs;
            float mi = b1 * bf16_to_f32(mc[i]) + (1.0f - b1) * gi_;
            float vi = b2 * bf16_to_f32(vc[i]) + (1.0f - b2) * gi_ * gi_;
            mc[i] = bf16_stochastic(mi, rm[i]);
            vc[i] = bf16_stochastic(vi, rv[i]);
            float pi = pc[i] * decay - step * mi / (sqrtf(vi) * inv_sqrt_bc2 + eps);
            pc[i] = pi;
            if (sw) wc[i] = bf16_stochastic(pi, rw[i]);
            if (nw) wc[i] = f32_to_bf16(pi);
        }
    }
}

/* Elements [a0, a1) of tensor i: its kernel for the moments' type, with fp32 gradients g
 * (element a0 at g[0]). */
static void adamw_part(hg_backend *be, const hg_adamw_args *a, int i, size_t a0, size_t a1, const float *g) {
    const hg_tensor_spec *s = &a->params->specs[i];
    const size_t t0 = s->offset / sizeof(float), o = a0 - a->lo;
    const float wd = (s->flags & HG_SPEC_DECAY) ? a->u.weight_decay : 0.0f;
    char *w = a->w ? (char *)a->w + a->weights->specs[i].offset : NULL;
    const int w32 = w && a->weights->specs[i].elem_size == sizeof(float);
    uint16_t *w16 = w && !w32 ? (uint16_t *)w + (a0 - t0) : NULL;
    if (a->state == HG_PRECISION_BF16)
        adamw_tensor_bf16_state(be, a->p + a0, g, (uint16_t *)a->m + o, (uint16_t *)a->v + o, w16, a0, a1 - a0, a, wd);
    else
        adamw_tensor(be, a->p + a0, g, (float *)a->m + o, (float *)a->v + o, w16, a0, a1 - a0, a, wd);
    if (w32) memcpy((float *)w + (a0 - t0), a->p + a0, (a1 - a0) * sizeof(float));
}

void cpu_adamw(hg_backend *be, const hg_adamw_args *a) {
    enum { CHUNK = 1 << 15 }; /* bf16 gradients are widened a chunk at a time */
    for (int i = 0; i < a->params->count; i++) {
        const hg_tensor_spec *s = &a->params->specs[i];
        size_t t0 = s->offset / sizeof(float), t1 = t0 + (size_t)s->alloc;
        size_t a0 = t0 > a->lo ? t0 : a->lo, a1 = t1 < a->lo + a->n ? t1 : a->lo + a->n;
        if (a0 >= a1) continue;
        if (a->grad != HG_PRECISION_BF16) {
            adamw_part(be, a, i, a0, a1, (const float *)a->g + (a0 - a->lo));
            continue;
        }
        float g[CHUNK];
        for (size_t c0 = a0; c0 < a1; c0 += CHUNK) {
            const size_t c1 = a1 - c0 < CHUNK ? a1 : c0 + CHUNK;
            const uint16_t *gb = (const uint16_t *)a->g + (c0 - a->lo);
            #pragma omp parallel for simd schedule(static) num_threads(be->threads)
            for (size_t j = 0; j < c1 - c0; j++) g[j] = bf16_to_f32(gb[j]);
            adamw_part(be, a, i, c0, c1, g);
        }
    }
}

/* Fixed blocks summed in double, then added in block order: the same result for any
 * thread count or schedule. */
void cpu_sumsq(hg_backend *be, const void *xv, hg_precision type, size_t n, double *out) {
    const float *x = xv;
    const uint16_t *xb = xv; /* type BF16 */
    const int bf = type == HG_PRECISION_BF16;
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
            if (bf) {
                #pragma omp simd reduction(+ : acc)
                for (size_t i = i0; i < i1; i++) acc += (double)bf16_to_f32(xb[i]) * bf16_to_f32(xb[i]);
            } else {
                #pragma omp simd reduction(+ : acc)
                for (size_t i = i0; i < i1; i++) acc += (double)x[i] * x[i];
            }
            part[bi] = acc;
        }
        for (long bi = 0; bi < cnt; bi++) total += part[bi];
    }
    *out = total;
}
