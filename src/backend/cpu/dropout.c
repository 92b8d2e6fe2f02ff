/* Dropout masks in bulk (cpu.h): the scales hg_dropout_scale gives, bit for bit, with
 * one Philox block for each four elements (hg_dropout_scale computes a block per element
 * and keeps a quarter of it), many blocks at a time. On x86-64 the AVX-512 and AVX2
 * kernels are compiled in every build, each with its own target attribute, and the first
 * call picks the widest this CPU runs, as the attention tiles do (tile.h): a block's four
 * words in four registers of 64-bit lanes, whose low halves hold them, so that Philox's
 * 32 x 32 -> 64-bit products are one vpmuludq each; independent groups of lanes go
 * through the rounds together.
 *
 * Element i is dropped when its word u has (u >> 8) 2^-24 < p, that is (u >> 8) < t
 * with t = ceil(p 2^24) (u >> 8 is an integer below 2^24, and scaling p by 2^24 is
 * exact), compared as integers. */
#include <math.h>
#include <string.h>

#include "backend/cpu/cpu.h"

/* The blocks' scales, element 4 l + q from word q of block l, into out. */
static void scales_of(const uint32_t *w0, const uint32_t *w1, const uint32_t *w2, const uint32_t *w3, int blocks,
                      uint32_t t, float keep, float *out) {
    for (int l = 0; l < blocks; l++) {
        out[4 * l + 0] = w0[l] >> 8 < t ? 0.0f : keep;
        out[4 * l + 1] = w1[l] >> 8 < t ? 0.0f : keep;
        out[4 * l + 2] = w2[l] >> 8 < t ? 0.0f : keep;
        out[4 * l + 3] = w3[l] >> 8 < t ? 0.0f : keep;
    }
}

/* Counter words of block b (element 4 b) as hg_dropout_scale forms them. */
#define CTR0(b) ((uint32_t)(b))
#define CTR2(b) (HG_RNG_DROPOUT | (uint32_t)((b) >> 32) << 8)

static void blocks_scalar(const hg_dropout *d, uint64_t b0, int nb, uint32_t t, float keep, float *out) {
    for (int l = 0; l < nb; l++) {
        const uint64_t b = b0 + (uint64_t)l;
        hg_u32x4 r = hg_philox(d->seed, CTR0(b), d->site, CTR2(b), d->step);
        scales_of(&r.v[0], &r.v[1], &r.v[2], &r.v[3], 1, t, keep, out + 4 * l);
    }
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

/* G groups of lanes through Philox's ten rounds together: the rounds of one group are a
 * chain of dependent products, so independent groups keep the multipliers busy. */
#define PHILOX_GROUPS(V, G, SET1, MUL, SRL, XOR, AND)                                                \
    do {                                                                                            \
        const V m0 = SET1(0xD2511F53ll), m1 = SET1(0xCD9E8D57ll), low = SET1(0xFFFFFFFFll);        \
        uint32_t k0 = (uint32_t)d->seed, k1 = (uint32_t)(d->seed >> 32);                           \
        for (int r = 0; r < 10; r++) {                                                              \
            const V c0 = SET1((long long)k0), c1 = SET1((long long)k1);                             \
            for (int g = 0; g < (G); g++) {                                                         \
                const V p0 = MUL(x0[g], m0), p1 = MUL(x2[g], m1);                                   \
                x0[g] = XOR(XOR(SRL(p1, 32), x1[g]), c0);                                           \
                x2[g] = XOR(XOR(SRL(p0, 32), x3[g]), c1);                                           \
                x1[g] = AND(p1, low), x3[g] = AND(p0, low);                                         \
            }                                                                                       \
            k0 += 0x9E3779B9u, k1 += 0xBB67AE85u;                                                   \
        }                                                                                           \
    } while (0)

/* The scales of 8 blocks from their words (word q of block j in lane j of wq), stored as
 * elements 4 j + q: each word compared with t, then a 4 x 8 transpose. */
__attribute__((target("avx2"))) static inline void scales8(__m256i w0, __m256i w1, __m256i w2, __m256i w3,
                                                           uint32_t t, float keep, float *out) {
    const __m256i tv = _mm256_set1_epi32((int)t); /* t <= 2^24: a signed compare is exact */
    const __m256 k = _mm256_set1_ps(keep);
#define SCALE(w) _mm256_andnot_ps(_mm256_castsi256_ps(_mm256_cmpgt_epi32(tv, _mm256_srli_epi32(w, 8))), k)
    const __m256 s0 = SCALE(w0), s1 = SCALE(w1), s2 = SCALE(w2), s3 = SCALE(w3);
#undef SCALE
    const __m256 a = _mm256_unpacklo_ps(s0, s1), b = _mm256_unpackhi_ps(s0, s1); /* blocks 0,1,4,5 / 2,3,6,7 */
    const __m256 c = _mm256_unpacklo_ps(s2, s3), e = _mm256_unpackhi_ps(s2, s3);
    const __m256 b04 = _mm256_castpd_ps(_mm256_unpacklo_pd(_mm256_castps_pd(a), _mm256_castps_pd(c)));
    const __m256 b15 = _mm256_castpd_ps(_mm256_unpackhi_pd(_mm256_castps_pd(a), _mm256_castps_pd(c)));
    const __m256 b26 = _mm256_castpd_ps(_mm256_unpacklo_pd(_mm256_castps_pd(b), _mm256_castps_pd(e)));
    const __m256 b37 = _mm256_castpd_ps(_mm256_unpackhi_pd(_mm256_castps_pd(b), _mm256_castps_pd(e)));
    _mm256_storeu_ps(out, _mm256_permute2f128_ps(b04, b15, 0x20));
    _mm256_storeu_ps(out + 8, _mm256_permute2f128_ps(b26, b37, 0x20));
    _mm256_storeu_ps(out + 16, _mm256_permute2f128_ps(b04, b15, 0x31));
    _mm256_storeu_ps(out + 24, _mm256_permute2f128_ps(b26, b37, 0x31));
}

/* The same for 4 blocks. */
__attribute__((target("avx2"))) static inline void scales4(__m128i w0, __m128i w1, __m128i w2, __m128i w3, uint32_t t,
                                                           float keep, float *out) {
    const __m128i tv = _mm_set1_epi32((int)t);
    const __m128 k = _mm_set1_ps(keep);
#define SCALE(w) _mm_andnot_ps(_mm_castsi128_ps(_mm_cmpgt_epi32(tv, _mm_srli_epi32(w, 8))), k)
    __m128 s0 = SCALE(w0), s1 = SCALE(w1), s2 = SCALE(w2), s3 = SCALE(w3);
#undef SCALE
    _MM_TRANSPOSE4_PS(s0, s1, s2, s3);
    _mm_storeu_ps(out, s0);
    _mm_storeu_ps(out + 4, s1);
    _mm_storeu_ps(out + 8, s2);
    _mm_storeu_ps(out + 12, s3);
}

/* 4 groups of 8 blocks (128 elements) a call, from block b0. */
__attribute__((target("avx512f"))) static void blocks_avx512(const hg_dropout *d, uint64_t b0, int nb, uint32_t t,
                                                             float keep, float *out) {
    enum { G = 4, L = 8 };
    for (int l = 0; l + G * L <= nb; l += G * L) {
        __m512i x0[G], x1[G], x2[G], x3[G];
        for (int g = 0; g < G; g++) { /* lane j of group g: block b0 + l + g L + j (no 2^32 crossing) */
            x0[g] = _mm512_add_epi64(_mm512_set1_epi64((long long)CTR0(b0 + (uint64_t)(l + g * L))),
                                     _mm512_set_epi64(7, 6, 5, 4, 3, 2, 1, 0));
            x1[g] = _mm512_set1_epi64(d->site), x2[g] = _mm512_set1_epi64(CTR2(b0 + (uint64_t)l));
            x3[g] = _mm512_set1_epi64(d->step);
        }
        PHILOX_GROUPS(__m512i, G, _mm512_set1_epi64, _mm512_mul_epu32, _mm512_srli_epi64, _mm512_xor_si512,
                      _mm512_and_si512);
        for (int g = 0; g < G; g++)
            scales8(_mm512_cvtepi64_epi32(x0[g]), _mm512_cvtepi64_epi32(x1[g]), _mm512_cvtepi64_epi32(x2[g]),
                    _mm512_cvtepi64_epi32(x3[g]), t, keep, out + 4 * (size_t)(l + g * L));
    }
}

/* Philox's words in bulk (cpu_philox_words): nb blocks from counter (b0, c1, c2, c3), the
 * first word counting, each word q of block l stored at w[q][l]. AVX-512: 4 groups of 8
 * blocks at a time, the rest one by one. */
typedef struct philox_key {
    uint64_t seed;
} philox_key;

__attribute__((target("avx512f"))) static void words_avx512(uint64_t seed, uint32_t b0, size_t nb, uint32_t c1,
                                                            uint32_t c2, uint32_t c3, uint32_t *const w[4]) {
    enum { G = 4, L = 8 };
    const philox_key key = {seed}, *d = &key;
    size_t l = 0;
    for (; l + G * L <= nb; l += G * L) {
        __m512i x0[G], x1[G], x2[G], x3[G];
        for (int g = 0; g < G; g++) {
            x0[g] = _mm512_add_epi64(_mm512_set1_epi64((long long)(uint32_t)(b0 + l + (size_t)g * L)),
                                     _mm512_set_epi64(7, 6, 5, 4, 3, 2, 1, 0));
            x1[g] = _mm512_set1_epi64(c1), x2[g] = _mm512_set1_epi64(c2), x3[g] = _mm512_set1_epi64(c3);
        }
        PHILOX_GROUPS(__m512i, G, _mm512_set1_epi64, _mm512_mul_epu32, _mm512_srli_epi64, _mm512_xor_si512,
                      _mm512_and_si512);
        for (int g = 0; g < G; g++) {
            const size_t at = l + (size_t)g * L;
            _mm256_storeu_si256((__m256i *)(w[0] + at), _mm512_cvtepi64_epi32(x0[g]));
            _mm256_storeu_si256((__m256i *)(w[1] + at), _mm512_cvtepi64_epi32(x1[g]));
            _mm256_storeu_si256((__m256i *)(w[2] + at), _mm512_cvtepi64_epi32(x2[g]));
            _mm256_storeu_si256((__m256i *)(w[3] + at), _mm512_cvtepi64_epi32(x3[g]));
        }
    }
    for (; l < nb; l++) {
        hg_u32x4 r = hg_philox(seed, b0 + (uint32_t)l, c1, c2, c3);
        for (int q = 0; q < 4; q++) w[q][l] = r.v[q];
    }
}

/* 2 groups of 4 blocks (32 elements) a call: AVX2's 16 registers hold two groups' state. */
__attribute__((target("avx2"))) static void blocks_avx2(const hg_dropout *d, uint64_t b0, int nb, uint32_t t,
                                                        float keep, float *out) {
    enum { G = 2, L = 4 };
    for (int l = 0; l + G * L <= nb; l += G * L) {
        __m256i x0[G], x1[G], x2[G], x3[G];
        for (int g = 0; g < G; g++) {
            x0[g] = _mm256_add_epi64(_mm256_set1_epi64x((long long)CTR0(b0 + (uint64_t)(l + g * L))),
                                     _mm256_set_epi64x(3, 2, 1, 0));
            x1[g] = _mm256_set1_epi64x(d->site), x2[g] = _mm256_set1_epi64x(CTR2(b0 + (uint64_t)l));
            x3[g] = _mm256_set1_epi64x(d->step);
        }
        PHILOX_GROUPS(__m256i, G, _mm256_set1_epi64x, _mm256_mul_epu32, _mm256_srli_epi64, _mm256_xor_si256,
                      _mm256_and_si256);
        const __m256i even = _mm256_set_epi32(7, 5, 3, 1, 6, 4, 2, 0); /* the low words to the low half */
        for (int g = 0; g < G; g++)
            scales4(_mm256_castsi256_si128(_mm256_permutevar8x32_epi32(x0[g], even)),
                    _mm256_castsi256_si128(_mm256_permutevar8x32_epi32(x1[g], even)),
                    _mm256_castsi256_si128(_mm256_permutevar8x32_epi32(x2[g], even)),
                    _mm256_castsi256_si128(_mm256_permutevar8x32_epi32(x3[g], even)), t, keep,
                    out + 4 * (size_t)(l + g * L));
    }
}
#endif

void cpu_philox_words(uint64_t seed, uint32_t b0, size_t nb, uint32_t c1, uint32_t c2, uint32_t c3,
                      uint32_t *const w[4]) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    static int wide = -1; /* threads racing store the same value */
    int k = __atomic_load_n(&wide, __ATOMIC_RELAXED);
    if (k < 0) __atomic_store_n(&wide, k = __builtin_cpu_supports("avx512f"), __ATOMIC_RELAXED);
    if (k && (uint64_t)b0 + nb <= (1ull << 32)) {
        words_avx512(seed, b0, nb, c1, c2, c3, w);
        return;
    }
#endif
    for (size_t l = 0; l < nb; l++) {
        hg_u32x4 r = hg_philox(seed, b0 + (uint32_t)l, c1, c2, c3);
        for (int q = 0; q < 4; q++) w[q][l] = r.v[q];
    }
}

typedef void blocks_fn(const hg_dropout *d, uint64_t b0, int nb, uint32_t t, float keep, float *out);
typedef struct dropout_kernel {
    const char *name;
    blocks_fn *fn;
    int width; /* blocks a call takes at a time */
} dropout_kernel;

static const dropout_kernel kernels[] = {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    {"avx512", blocks_avx512, 32},
    {"avx2", blocks_avx2, 8},
#endif
    {"portable", blocks_scalar, 1},
};
#define NKERNELS ((int)(sizeof kernels / sizeof kernels[0]))

static int runs(const dropout_kernel *k) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    if (!strcmp(k->name, "avx512")) return __builtin_cpu_supports("avx512f");
    if (!strcmp(k->name, "avx2")) return __builtin_cpu_supports("avx2");
#endif
    return 1;
}

const char *cpu_dropout_kernel_name(int k) { return k >= 0 && k < NKERNELS && runs(&kernels[k]) ? kernels[k].name : NULL; }

void cpu_dropout_scales_with(int kernel, const hg_dropout *d, uint64_t first, size_t n, float *out) {
    const dropout_kernel *kn = &kernels[kernel];
    const float keep = 1.0f / (1.0f - d->p);
    const double td = ceil((double)d->p * 16777216.0);
    const uint32_t t = td > 16777216.0 ? 16777216u : (uint32_t)td;
    size_t k = 0;
    for (; k < n && ((first + k) & 3); k++) out[k] = hg_dropout_scale(d, first + k);
    enum { CHUNK = 64 }; /* blocks a call, a multiple of every kernel's width */
    while (n - k >= 4 * (size_t)kn->width) {
        const uint64_t b = (first + k) >> 2;
        size_t nb = (n - k) / 4;
        nb = nb < CHUNK ? nb : CHUNK;
        nb -= nb % (size_t)kn->width;
        /* word 2 holds the block index's high half: a call must not cross 2^32 blocks */
        const uint64_t to_wrap = ((b >> 32) + 1) * (1ull << 32) - b;
        if (to_wrap < nb) nb = to_wrap < (uint64_t)kn->width ? 0 : to_wrap - to_wrap % (uint64_t)kn->width;
        if (!nb) {
            blocks_scalar(d, b, 1, t, keep, out + k);
            k += 4;
            continue;
        }
        kn->fn(d, b, (int)nb, t, keep, out + k);
        k += 4 * nb;
    }
    for (; k < n; k++) out[k] = hg_dropout_scale(d, first + k);
}

void cpu_dropout_scales(const hg_dropout *d, uint64_t first, size_t n, float *out) {
    static int chosen = -1; /* the first kernel this CPU runs; threads racing store the same value */
    int k = __atomic_load_n(&chosen, __ATOMIC_RELAXED);
    if (k < 0) {
        for (k = 0; !cpu_dropout_kernel_name(k);) k++;
        __atomic_store_n(&chosen, k, __ATOMIC_RELAXED);
    }
    cpu_dropout_scales_with(k, d, first, n, out);
}
