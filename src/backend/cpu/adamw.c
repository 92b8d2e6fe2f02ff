/* AdamW and the gradient norm on the CPU, one pass each over the flat buffers. */
#include <math.h>

#include "backend/cpu/cpu.h"

static void adamw_tensor(hg_backend *be, float *p, const float *g, float *m, float *v, size_t n,
                         const hg_adamw_update *u, float wd) {
    const float b1 = u->beta1, b2 = u->beta2, gs = u->grad_scale;
    const float decay = 1.0f - u->lr * wd;
    const float step = u->lr / u->bias_correction1, inv_sqrt_bc2 = 1.0f / sqrtf(u->bias_correction2);
    #pragma omp parallel for simd schedule(static) num_threads(be->threads)
    for (size_t i = 0; i < n; i++) {
        float gi = g[i] * gs;
        float mi = b1 * m[i] + (1.0f - b1) * gi;
        float vi = b2 * v[i] + (1.0f - b2) * gi * gi;
        m[i] = mi;
        v[i] = vi;
        p[i] = p[i] * decay - step * mi / (sqrtf(vi) * inv_sqrt_bc2 + u->eps);
    }
}

/* fp32 only: p is the compute copy, so a->w is NULL. */
void cpu_adamw(hg_backend *be, const hg_adamw_args *a) {
    for (int i = 0; i < a->params->count; i++) {
        const hg_tensor_spec *s = &a->params->specs[i];
        size_t t0 = s->offset / sizeof(float), t1 = t0 + (size_t)s->alloc;
        size_t a0 = t0 > a->lo ? t0 : a->lo, a1 = t1 < a->lo + a->n ? t1 : a->lo + a->n;
        if (a0 >= a1) continue;
        float wd = (s->flags & HG_SPEC_DECAY) ? a->u.weight_decay : 0.0f;
        size_t o = a0 - a->lo;
        adamw_tensor(be, a->p + a0, a->g + o, a->m + o, a->v + o, a1 - a0, &a->u, wd);
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
