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

/* One column panel of NV vectors across all m rows: blocks of 6 rows (24 accumulators
 * for NV=4, 6 for NV=1), then the remaining rows one size down. */
static void panel(int m, int nv, int k, const float *A, ptrdiff_t a_rs, ptrdiff_t a_cs,
                  const float *B, ptrdiff_t ldb, float *C, ptrdiff_t ldc, int acc) {
    int i = 0;
    for (; i + 6 <= m; i += 6) {
        const float *Ai = A + i * a_rs;
        float *Ci = C + i * ldc;
        switch (nv) {
        case 4: micro(6, 4, k, Ai, a_rs, a_cs, B, ldb, Ci, ldc, acc); break;
        case 3: micro(6, 3, k, Ai, a_rs, a_cs, B, ldb, Ci, ldc, acc); break;
        case 2: micro(6, 2, k, Ai, a_rs, a_cs, B, ldb, Ci, ldc, acc); break;
        default: micro(6, 1, k, Ai, a_rs, a_cs, B, ldb, Ci, ldc, acc); break;
        }
    }
    for (; i < m; i++) {
        const float *Ai = A + i * a_rs;
        float *Ci = C + i * ldc;
        switch (nv) {
        case 4: micro(1, 4, k, Ai, a_rs, a_cs, B, ldb, Ci, ldc, acc); break;
        case 3: micro(1, 3, k, Ai, a_rs, a_cs, B, ldb, Ci, ldc, acc); break;
        case 2: micro(1, 2, k, Ai, a_rs, a_cs, B, ldb, Ci, ldc, acc); break;
        default: micro(1, 1, k, Ai, a_rs, a_cs, B, ldb, Ci, ldc, acc); break;
        }
    }
}

void tile_gemm(int m, int n, int k, const float *A, ptrdiff_t a_rs, ptrdiff_t a_cs,
               const float *B, ptrdiff_t ldb, float *C, ptrdiff_t ldc, int accumulate) {
    for (int j = 0; j < n; j += 64) {
        int nv = (n - j) / 16 < 4 ? (n - j) / 16 : 4;
        panel(m, nv, k, A, a_rs, a_cs, B + j, ldb, C + j, ldc, accumulate);
    }
}
#endif
