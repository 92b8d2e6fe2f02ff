/* Portable tile kernel (tile.h), for CPUs without AVX2 and for other architectures: plain
 * loops that the compiler vectorises for the target the build has. */
#include "backend/cpu/tile.h"

static void gemm(int m, int n, int k, const float *A, ptrdiff_t a_rs, ptrdiff_t a_cs,
               const float *B, ptrdiff_t ldb, float *C, ptrdiff_t ldc, int accumulate) {
    for (int i = 0; i < m; i++) {
        float *c = C + i * ldc;
        if (!accumulate)
            for (int j = 0; j < n; j++) c[j] = 0.0f;
        for (int p = 0; p < k; p++) {
            float a = A[i * a_rs + p * a_cs];
            const float *b = B + p * ldb;
            #pragma omp simd
            for (int j = 0; j < n; j++) c[j] += a * b[j];
        }
    }
}

static void transpose16(const float *src, ptrdiff_t lds, float *dst, ptrdiff_t ldd) {
    for (int i = 0; i < 16; i++)
        for (int j = 0; j < 16; j++) dst[j * ldd + i] = src[i * lds + j];
}

static int supported(void) { return 1; }

const tile_kernel tile_portable = {"portable", gemm, transpose16, supported};
