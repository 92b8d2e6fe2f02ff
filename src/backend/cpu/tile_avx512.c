/* AVX-512 tile kernels (tile.h). The product: MR rows x NV 16-float vectors of C held in
 * registers; each step loads NV vectors of a B row and broadcasts MR elements of A. The
 * transpose: 16 rows in 16 registers, interleaved in four rounds of shuffles. Every
 * function carries the target attribute, so the file compiles for AVX-512 in any x86-64
 * build and runs only where tile.c finds the CPU has it. */
#if defined(__x86_64__)
#include <immintrin.h>

#include "backend/cpu/tile.h"

#define TARGET __attribute__((target("avx512f")))

static inline __attribute__((always_inline)) TARGET void micro(const int MR, const int NV, int k,
                                                        const float *A, ptrdiff_t a_rs, ptrdiff_t a_cs,
                                                        const float *B, ptrdiff_t ldb, float *C,
                                                        ptrdiff_t ldc, int accumulate) {
    __m512 c[8][4];
    for (int i = 0; i < MR; i++)
        for (int v = 0; v < NV; v++)
            c[i][v] = accumulate ? _mm512_loadu_ps(C + i * ldc + 16 * v) : _mm512_setzero_ps();
    for (int p = 0; p < k; p++) {
        __m512 b[4];
        const float *bp = B + p * ldb;
        for (int v = 0; v < NV; v++) b[v] = _mm512_loadu_ps(bp + 16 * v);
        const float *ap = A + p * a_cs;
        for (int i = 0; i < MR; i++) {
            __m512 a = _mm512_set1_ps(ap[i * a_rs]);
            for (int v = 0; v < NV; v++) c[i][v] = _mm512_fmadd_ps(a, b[v], c[i][v]);
        }
    }
    for (int i = 0; i < MR; i++)
        for (int v = 0; v < NV; v++) _mm512_storeu_ps(C + i * ldc + 16 * v, c[i][v]);
}

/* MR rows by nv vectors, with both counts compile-time constants inside micro(). */
static inline __attribute__((always_inline)) TARGET void block(const int MR, int nv, int k, const float *A, ptrdiff_t a_rs,
                                                        ptrdiff_t a_cs, const float *B, ptrdiff_t ldb, float *C,
                                                        ptrdiff_t ldc, int acc) {
    switch (nv) {
    case 4: micro(MR, 4, k, A, a_rs, a_cs, B, ldb, C, ldc, acc); break;
    case 3: micro(MR, 3, k, A, a_rs, a_cs, B, ldb, C, ldc, acc); break;
    case 2: micro(MR, 2, k, A, a_rs, a_cs, B, ldb, C, ldc, acc); break;
    default: micro(MR, 1, k, A, a_rs, a_cs, B, ldb, C, ldc, acc); break;
    }
}

/* One column panel of nv vectors across all m rows: blocks of 6 rows (24 accumulators
 * for nv=4), then what remains in blocks of 4, 2 and 1 (a 64-row tile is 10 x 6 + 4; a
 * 1-row block has too few independent accumulators to keep the FMA units busy). */
static TARGET void panel(int m, int nv, int k, const float *A, ptrdiff_t a_rs, ptrdiff_t a_cs,
                  const float *B, ptrdiff_t ldb, float *C, ptrdiff_t ldc, int acc) {
    int i = 0;
    for (; i + 6 <= m; i += 6) block(6, nv, k, A + i * a_rs, a_rs, a_cs, B, ldb, C + i * ldc, ldc, acc);
    if (m - i >= 4) block(4, nv, k, A + i * a_rs, a_rs, a_cs, B, ldb, C + i * ldc, ldc, acc), i += 4;
    if (m - i >= 2) block(2, nv, k, A + i * a_rs, a_rs, a_cs, B, ldb, C + i * ldc, ldc, acc), i += 2;
    if (m - i >= 1) block(1, nv, k, A + i * a_rs, a_rs, a_cs, B, ldb, C + i * ldc, ldc, acc);
}

static TARGET void gemm(int m, int n, int k, const float *A, ptrdiff_t a_rs, ptrdiff_t a_cs,
               const float *B, ptrdiff_t ldb, float *C, ptrdiff_t ldc, int accumulate) {
    for (int j = 0; j < n; j += 64) {
        int nv = (n - j) / 16 < 4 ? (n - j) / 16 : 4;
        panel(m, nv, k, A, a_rs, a_cs, B + j, ldb, C + j, ldc, accumulate);
    }
}

static TARGET void transpose16(const float *src, ptrdiff_t lds, float *dst, ptrdiff_t ldd) {
    __m512 r[16], t[16];
    for (int i = 0; i < 16; i++) r[i] = _mm512_loadu_ps(src + i * lds);
    /* 32-bit interleave of row pairs, then 64-bit of pairs of those: each 128-bit lane of
     * r[4k..4k+3] is then a transposed 4 x 4 block of rows 4k..4k+3 */
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int i = 0; i < 16; i += 4) {
        r[i] = _mm512_shuffle_ps(t[i], t[i + 2], 0x44);
        r[i + 1] = _mm512_shuffle_ps(t[i], t[i + 2], 0xEE);
        r[i + 2] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0x44);
        r[i + 3] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0xEE);
    }
    /* then the 4 x 4 blocks move across registers, 128-bit lanes at a time */
    for (int h = 0; h < 16; h += 8)
        for (int i = 0; i < 4; i++) {
            t[h + i] = _mm512_shuffle_f32x4(r[h + i], r[h + i + 4], 0x88);
            t[h + i + 4] = _mm512_shuffle_f32x4(r[h + i], r[h + i + 4], 0xDD);
        }
    for (int i = 0; i < 8; i++) {
        r[i] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0x88);
        r[i + 8] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0xDD);
    }
    for (int i = 0; i < 16; i++) _mm512_storeu_ps(dst + i * ldd, r[i]);
}
static int supported(void) { return __builtin_cpu_supports("avx512f"); }

const tile_kernel tile_avx512 = {"avx512", gemm, transpose16, supported};
#endif
