/* A plugin with one op of one's own for the handgrad command: LayerScale (a learned
 * per-channel gain on a residual branch, as in CaiT), after the attention projection.
 *
 *     y (N, C) = x * gamma,  gamma (C) starting at 0.1
 *     dx = dy * gamma;  dgamma += sum over rows of dy * x
 *
 * Built as a shared module (CMake target layerscale_ops); the command loads it with
 * --ops before the subcommand, and a config places it by name:
 *
 *     handgrad --ops ./liblayerscale_ops.so train --model tiny --arch op_attn_proj=layerscale ...
 *     handgrad --ops ./liblayerscale_ops.so profile --model tiny --arch op_attn_proj=layerscale
 *
 * The command calls handgrad_ops_init once after loading the module; it registers the
 * op with the handgrad the command carries (the module does not link handgrad itself).
 * The backward sums dgamma per thread in the op's planned scratch, then adds the
 * threads' sums in a fixed order, so the result does not depend on scheduling. */
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "handgrad_ext.h"

static int thread_num(void) {
#ifdef _OPENMP
    return omp_get_thread_num();
#else
    return 0;
#endif
}

static void sizes(void *ctx, const hg_site_shape *s, hg_site_sizes *z) {
    (void)ctx;
    z->param[0][0] = s->C;                                            /* gamma (C) */
    z->scratch_bytes = (int64_t)sizeof(float) * s->C * (s->threads > 0 ? s->threads : 1); /* per-thread dgamma */
}

static hg_status init(void *ctx, const hg_site_shape *s, int layer, float *const *param, uint64_t seed) {
    (void)ctx, (void)layer, (void)seed;
    for (int c = 0; c < s->C; c++) param[0][c] = 0.1f;
    return HG_OK;
}

static hg_status forward(void *ctx, const hg_site_call *a) {
    (void)ctx;
    const int C = a->in_width;
    const float *g = a->w[0];
    #pragma omp parallel for schedule(static) num_threads(hg_backend_threads(a->be))
    for (int n = 0; n < a->N; n++) {
        const float *x = a->x + (size_t)n * C;
        float *y = a->y + (size_t)n * C;
        #pragma omp simd
        for (int c = 0; c < C; c++) y[c] = x[c] * g[c];
    }
    return HG_OK;
}

static hg_status backward(void *ctx, const hg_site_call *a) {
    (void)ctx;
    const int C = a->in_width, threads = hg_backend_threads(a->be);
    const float *g = a->w[0];
    float *part = a->scratch; /* (threads, C) */
    memset(part, 0, sizeof(float) * (size_t)C * (size_t)threads);
    #pragma omp parallel num_threads(threads)
    {
        float *mine = part + (size_t)thread_num() * C;
        #pragma omp for schedule(static)
        for (int n = 0; n < a->N; n++) {
            const float *x = a->x + (size_t)n * C, *dy = a->dy + (size_t)n * C;
            float *dx = a->dx + (size_t)n * C;
            #pragma omp simd
            for (int c = 0; c < C; c++) {
                dx[c] = dy[c] * g[c];
                mine[c] += dy[c] * x[c];
            }
        }
    }
    for (int t = 0; t < threads; t++)
        for (int c = 0; c < C; c++) a->dw[0][c] += part[(size_t)t * C + c];
    return HG_OK;
}

hg_status handgrad_ops_init(void);
hg_status handgrad_ops_init(void) {
    hg_site_op op = {.name = "layerscale", .site = HG_SITE_ATTN_PROJ, .n_params = 1, .param_name = {"gamma"},
                     .sizes = sizes, .init = init, .forward = forward, .backward = backward};
    return hg_register_op(&op);
}
