/* bf16 <-> fp32 for one element: widening is exact; narrowing rounds to nearest even,
 * and a NaN stays a (quiet) NaN. The CPU kernels (backend/cpu/bf16.h) and the host code
 * that holds tensors in bf16 (a frozen base under hg_options.base_precision) use these,
 * so a value rounds the same wherever it is rounded. */
#ifndef HG_CORE_BF16_H
#define HG_CORE_BF16_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

static inline float bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline uint16_t f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return (uint16_t)((u >> 16) | 0x40);
    return (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1)) >> 16);
}

/* x rounded to bf16 and back (what a bf16 tensor holds of x). */
static inline float bf16_round(float x) { return bf16_to_f32(f32_to_bf16(x)); }

#endif
