/* AVX2 + FMA tile kernels (tile.h), for the many x86-64 CPUs without AVX-512. With 16
 * 8-float registers, the product holds a 6 x 16 block of C in 12 of them: each step loads
 * the two vectors of a B row and broadcasts six elements of A, 12 FMAs for 8 loads. m
 * that is not a multiple of 6 ends in blocks of 4, 2 and 1 rows. The transpose is four
 * 8 x 8 register transposes (interleave, shuffle, swap 128-bit halves). As in
 * tile_avx512.c, every function carries its target attribute. */
#if defined(__x86_64__)
#include <immintrin.h>

#include "backend/cpu/tile.h"
#include "core/transpose8.h"

#define TARGET __attribute__((target("avx2,fma")))

/* MR rows x 16 columns of C, MR a compile-time constant after inlining. */
static inline __attribute__((always_inline)) TARGET void micro(const int MR, int k, const float *A, ptrdiff_t a_rs,
                                                               ptrdiff_t a_cs, const float *B, ptrdiff_t ldb,
                                                               float *C, ptrdiff_t ldc, int accumulate) {
    __m256 c[6][2];
    for (int i = 0; i < MR; i++)
        for (int v = 0; v < 2; v++)
            c[i][v] = accumulate ? _mm256_loadu_ps(C + i * ldc + 8 * v) : _mm256_setzero_ps();
    for (int p = 0; p < k; p++) {
        const float *bp = B + p * ldb, *ap = A + p * a_cs;
        __m256 b0 = _mm256_loadu_ps(bp), b1 = _mm256_loadu_ps(bp + 8);
        for (int i = 0; i < MR; i++) {
            __m256 a = _mm256_broadcast_ss(ap + i * a_rs);
            c[i][0] = _mm256_fmadd_ps(a, b0, c[i][0]);
            c[i][1] = _mm256_fmadd_ps(a, b1, c[i][1]);
        }
    }
    for (int i = 0; i < MR; i++)
        for (int v = 0; v < 2; v++) _mm256_storeu_ps(C + i * ldc + 8 * v, c[i][v]);
}

static TARGET void gemm(int m, int n, int k, const float *A, ptrdiff_t a_rs, ptrdiff_t a_cs,
                        const float *B, ptrdiff_t ldb, float *C, ptrdiff_t ldc, int acc) {
    for (int j = 0; j < n; j += 16) {
        int i = 0;
        for (; i + 6 <= m; i += 6) micro(6, k, A + i * a_rs, a_rs, a_cs, B + j, ldb, C + i * ldc + j, ldc, acc);
        if (m - i >= 4) micro(4, k, A + i * a_rs, a_rs, a_cs, B + j, ldb, C + i * ldc + j, ldc, acc), i += 4;
        if (m - i >= 2) micro(2, k, A + i * a_rs, a_rs, a_cs, B + j, ldb, C + i * ldc + j, ldc, acc), i += 2;
        if (m - i >= 1) micro(1, k, A + i * a_rs, a_rs, a_cs, B + j, ldb, C + i * ldc + j, ldc, acc);
    }
}

/* dst (8 x 8) = the transpose of src (8 x 8), in registers (core/transpose8.h). */
static inline __attribute__((always_inline)) TARGET void transpose8(const float *src, ptrdiff_t lds, float *dst,
                                                                    ptrdiff_t ldd) {
    __m256 r[8];
    for (int i = 0; i < 8; i++) r[i] = _mm256_loadu_ps(src + i * lds);
    hg_transpose8(r);
    for (int j = 0; j < 8; j++) _mm256_storeu_ps(dst + j * ldd, r[j]);
}

static TARGET void transpose16(const float *src, ptrdiff_t lds, float *dst, ptrdiff_t ldd) {
    for (int i = 0; i < 16; i += 8)
        for (int j = 0; j < 16; j += 8) transpose8(src + i * lds + j, lds, dst + j * ldd + i, ldd);
}

static int supported(void) { return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"); }

const tile_kernel tile_avx2 = {"avx2", gemm, transpose16, supported};
#endif
