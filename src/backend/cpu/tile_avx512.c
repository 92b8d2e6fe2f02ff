/* AVX-512 tile kernel: MR rows x NV 16-float vectors of C held in registers; each step
 * loads NV vectors of a B row and broadcasts MR elements of A. */
#if defined(__AVX512F__)
#include <immintrin.h>

#include "backend/cpu/tile.h"

static inline __attribute__((always_inline)) void micro(const int MR, const int NV, int k,
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
static inline __attribute__((always_inline)) void block(const int MR, int nv, int k, const float *A, ptrdiff_t a_rs,
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
static void panel(int m, int nv, int k, const float *A, ptrdiff_t a_rs, ptrdiff_t a_cs,
                  const float *B, ptrdiff_t ldb, float *C, ptrdiff_t ldc, int acc) {
    int i = 0;
    for (; i + 6 <= m; i += 6) block(6, nv, k, A + i * a_rs, a_rs, a_cs, B, ldb, C + i * ldc, ldc, acc);
    if (m - i >= 4) block(4, nv, k, A + i * a_rs, a_rs, a_cs, B, ldb, C + i * ldc, ldc, acc), i += 4;
    if (m - i >= 2) block(2, nv, k, A + i * a_rs, a_rs, a_cs, B, ldb, C + i * ldc, ldc, acc), i += 2;
    if (m - i >= 1) block(1, nv, k, A + i * a_rs, a_rs, a_cs, B, ldb, C + i * ldc, ldc, acc);
}

void tile_gemm(int m, int n, int k, const float *A, ptrdiff_t a_rs, ptrdiff_t a_cs,
               const float *B, ptrdiff_t ldb, float *C, ptrdiff_t ldc, int accumulate) {
    for (int j = 0; j < n; j += 64) {
        int nv = (n - j) / 16 < 4 ? (n - j) / 16 : 4;
        panel(m, nv, k, A, a_rs, a_cs, B + j, ldb, C + j, ldc, accumulate);
    }
}
#endif
