/* Dropout masks from a counter-based RNG: element i of site s in forward call `step`
 * is kept with probability 1-p and scaled by 1/(1-p). The backward pass regenerates
 * the same mask from the same (seed, step, site, i) instead of storing it. */
#ifndef HG_OPS_DROPOUT_H
#define HG_OPS_DROPOUT_H

#include <stdint.h>

#include "core/rng.h"

typedef struct hg_dropout {
    float p;       /* 0 disables */
    uint64_t seed;
    uint32_t step; /* advances once per training forward */
    uint32_t site; /* 0: embeddings, 1+2l: attention output of layer l, 2+2l: MLP output */
} hg_dropout;

HG_HOST_DEVICE static inline int hg_dropout_on(const hg_dropout *d) { return d && d->p > 0.0f; }

/* 0 or 1/(1-p) for element i; four consecutive elements share one Philox block. */
HG_HOST_DEVICE static inline float hg_dropout_scale(const hg_dropout *d, uint64_t i) {
    hg_u32x4 r = hg_philox(d->seed, (uint32_t)(i >> 2), d->site, HG_RNG_DROPOUT | (uint32_t)(i >> 34) << 8, d->step);
    /* r.v[i & 3], chosen without a run-time index (which puts r in a GPU's local memory) */
    uint32_t u = i & 2 ? (i & 1 ? r.v[3] : r.v[2]) : (i & 1 ? r.v[1] : r.v[0]);
    return hg_u32_to_unit(u) < d->p ? 0.0f : 1.0f / (1.0f - d->p);
}

#endif
