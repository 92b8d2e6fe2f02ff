/* Counter-based random numbers (Philox4x32-10, Salmon et al., SC'11).
 *
 * Every random value is a pure function of (seed, counter), so any element can be
 * generated independently, on any thread, in any order. Parameter init draws by element
 * index, and dropout masks are regenerated in the backward pass instead of stored. */
#ifndef HG_CORE_RNG_H
#define HG_CORE_RNG_H

#include <math.h>
#include <stdint.h>

/* The CUDA backend calls the same functions on the GPU, so its dropout masks and
 * rounding draws are the CPU's bit for bit. */
#ifdef __CUDACC__
#define HG_HOST_DEVICE __host__ __device__
#else
#define HG_HOST_DEVICE
#endif

typedef struct hg_u32x4 {
    uint32_t v[4];
} hg_u32x4;

HG_HOST_DEVICE static inline hg_u32x4 hg_philox(uint64_t seed, uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3) {
    uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
    uint32_t x0 = c0, x1 = c1, x2 = c2, x3 = c3;
    for (int r = 0; r < 10; r++) {
        uint64_t p0 = (uint64_t)0xD2511F53u * x0;
        uint64_t p1 = (uint64_t)0xCD9E8D57u * x2;
        uint32_t y0 = (uint32_t)(p1 >> 32) ^ x1 ^ k0;
        uint32_t y2 = (uint32_t)(p0 >> 32) ^ x3 ^ k1;
        x0 = y0;
        x1 = (uint32_t)p1;
        x2 = y2;
        x3 = (uint32_t)p0;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    hg_u32x4 out = {{x0, x1, x2, x3}};
    return out;
}

/* Uniform in [0, 1) from 24 random bits. */
HG_HOST_DEVICE static inline float hg_u32_to_unit(uint32_t x) { return (float)(x >> 8) * (1.0f / 16777216.0f); }

/* Streams: the third counter word says what a draw is for, so streams never overlap. */
enum { HG_RNG_INIT = 1, HG_RNG_DROPOUT = 2, HG_RNG_ROUNDING = 3 };

/* Uniform in [-1, 1) for element i of tensor `tensor`, from the init stream. */
static inline float hg_rng_uniform(uint64_t seed, uint32_t tensor, uint64_t i) {
    hg_u32x4 r = hg_philox(seed, (uint32_t)i, (uint32_t)(i >> 32), HG_RNG_INIT | 1u << 8, tensor);
    return 2.0f * hg_u32_to_unit(r.v[0]) - 1.0f;
}

/* Standard normal for element i of tensor `tensor` (Box-Muller on one Philox block). */
static inline float hg_rng_normal(uint64_t seed, uint32_t tensor, uint64_t i) {
    hg_u32x4 r = hg_philox(seed, (uint32_t)(i >> 1), (uint32_t)(i >> 33), HG_RNG_INIT, tensor);
    double u1 = ((double)r.v[0] + 1.0) / 4294967296.0; /* (0, 1] */
    double u2 = (double)r.v[1] / 4294967296.0;
    double rad = sqrt(-2.0 * log(u1));
    return (float)(rad * ((i & 1) ? sin(6.283185307179586 * u2) : cos(6.283185307179586 * u2)));
}

#endif
