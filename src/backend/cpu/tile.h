/* Small dense products for attention tiles (e.g. 64 x 64 x 64), and the 16 x 16 transposes
 * that lay K and V out for them, run inside one thread.
 *
 * The attention kernels need thousands of these per head. oneDNN's primitive API costs
 * microseconds and a small allocation per call at this size, and its micro-kernel API is
 * not in the oneDNN that Debian ships, so the tiles have their own register-blocked
 * kernel. All large matrix products still go through oneDNN (gemm.c). */
#ifndef HG_BACKEND_CPU_TILE_H
#define HG_BACKEND_CPU_TILE_H

#include <stddef.h>

/* C (m x n) = [C +] A (m x k) @ B (k x n).
 * A's element (i, p) is at A[i*a_rs + p*a_cs], so A may be read transposed in place.
 * B's row p is the n contiguous floats at B + p*ldb; C's row i is at C + i*ldc.
 * n must be a multiple of 16. */
void tile_gemm(int m, int n, int k, const float *A, ptrdiff_t a_rs, ptrdiff_t a_cs,
               const float *B, ptrdiff_t ldb, float *C, ptrdiff_t ldc, int accumulate);

/* dst (16 x 16, row stride ldd) = the transpose of src (16 x 16, row stride lds). */
void tile_transpose16(const float *src, ptrdiff_t lds, float *dst, ptrdiff_t ldd);

#endif
