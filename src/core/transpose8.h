/* The 8 x 8 float transpose in AVX2 registers, shared by the AVX2 tile kernels
 * (src/backend/cpu/tile_avx2.c) and the bulk conversions of safetensors loads. It
 * carries its own target attribute, so it inlines into functions compiled for AVX2
 * either way: by their target attribute or by the build's -march. */
#ifndef HG_CORE_TRANSPOSE8_H
#define HG_CORE_TRANSPOSE8_H

#if defined(__x86_64__)
#include <immintrin.h>

/* r[j] becomes column j of the block whose rows were r[0..7]. After the 32-bit
 * interleave of row pairs and the 64-bit shuffle of those, u[j] holds column j (rows
 * 0-3) in its low half and column j + 4 in its high half, and u[j + 4] the same for
 * rows 4-7; swapping 128-bit halves gives the columns. */
static inline __attribute__((always_inline, target("avx2"))) void hg_transpose8(__m256 r[8]) {
    __m256 t[8], u[8];
    for (int i = 0; i < 8; i += 2) {
        t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int h = 0; h < 8; h += 4) {
        u[h] = _mm256_shuffle_ps(t[h], t[h + 2], 0x44);
        u[h + 1] = _mm256_shuffle_ps(t[h], t[h + 2], 0xEE);
        u[h + 2] = _mm256_shuffle_ps(t[h + 1], t[h + 3], 0x44);
        u[h + 3] = _mm256_shuffle_ps(t[h + 1], t[h + 3], 0xEE);
    }
    for (int j = 0; j < 4; j++) {
        r[j] = _mm256_permute2f128_ps(u[j], u[j + 4], 0x20);
        r[j + 4] = _mm256_permute2f128_ps(u[j], u[j + 4], 0x31);
    }
}
#endif

#endif
