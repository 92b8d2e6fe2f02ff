/* The cuBLASLt call of a row-major GEMM, as plain C so that tests/test_gemm_map.c checks
 * it in CI (no GPU) against a column-major GEMM with BLAS semantics.
 *
 * handgrad's GEMM: D (M, N) = op(A) op(B), row-major, op(A) (M, K), op(B) (K, N), row
 * strides lda, ldb, ldd, trans_a/trans_b saying A is stored (K, M) / B is stored (N, K).
 * cuBLASLt is column-major: a row-major (R, C) matrix with row stride ld is the
 * column-major (C, R) matrix with leading dimension ld. So D^T = op(B)^T op(A)^T:
 * cuBLASLt's A is our B, its B is our A, its m is our N and its n our M, with the
 * transposes carried over unchanged. Layouts are the stored matrices, before op. */
#ifndef HG_BACKEND_CUDA_GEMM_MAP_H
#define HG_BACKEND_CUDA_GEMM_MAP_H

#include "core/rng.h" /* HG_HOST_DEVICE */

typedef struct gemm_lt_map {
    int op_a, op_b;            /* cuBLASLt's transposes of its A (our B) and B (our A) */
    int a_rows, a_cols, a_ld;  /* its A's layout: our B, column-major */
    int b_rows, b_cols, b_ld;  /* its B's layout: our A */
    int c_rows, c_cols, c_ld;  /* C and D: our D, (N, M) column-major */
} gemm_lt_map;

HG_HOST_DEVICE static inline gemm_lt_map gemm_lt_map_of(int M, int N, int K, int trans_a, int trans_b, int lda, int ldb,
                                                         int ldd) {
    gemm_lt_map g;
    g.op_a = trans_b, g.op_b = trans_a;
    g.a_rows = trans_b ? K : N, g.a_cols = trans_b ? N : K, g.a_ld = ldb;
    g.b_rows = trans_a ? M : K, g.b_cols = trans_a ? K : M, g.b_ld = lda;
    g.c_rows = N, g.c_cols = M, g.c_ld = ldd;
    return g;
}

/* A bias gradient fused into the GEMM: the sums over K of op(B)'s columns (length N, one
 * per column of our D) or of op(A)'s rows (length M). cuBLASLt's BGRADA reduces its
 * op(A) over k into a vector of its m (the rows of its D), BGRADB its op(B) into one of
 * its n. Its A is our B and its m our N, so our B's sums are BGRADA and our A's BGRADB.
 * Returns 1 for BGRADA, 0 for BGRADB. */
typedef enum gemm_bgrad_of { GEMM_BGRAD_OF_A, GEMM_BGRAD_OF_B } gemm_bgrad_of;

HG_HOST_DEVICE static inline int gemm_lt_bgrad_is_a(gemm_bgrad_of of) { return of == GEMM_BGRAD_OF_B; }

#endif
