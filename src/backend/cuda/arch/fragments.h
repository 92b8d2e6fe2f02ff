/* Where each lane's data sits in the fragments of the attention kernels' tile products:
 * plain C, shared by arch/mma.cuh (on the GPU) and tests/test_mma_maps.c (on the host,
 * in CI, which has no GPU), so the maps the kernels use are the maps the test checks.
 *
 * mma.sync.m16n8k16 (bf16 in, fp32 accumulate), lane l = 4g + t (g = l/4, t = l%4):
 *   A (16 x 16): register x (0-3), half h (0-1) holds A(g + 8(x%2), 2t + h + 8(x/2));
 *   B (16 x 8):  register x (0-1), half h holds B(2t + h + 8x, g);
 *   C (16 x 8):  element e (0-3) is C(g + 8(e/2), 2t + e%2).
 * ldmatrix.x4 reads four 8x8 matrices of 16-bit elements; lane 8m + r gives the address
 * of row r of matrix m, and lane l receives, in register m, elements (l/4, 2(l%4) + h)
 * of matrix m (with .trans, elements (2(l%4) + h, l/4)).
 *
 * The kernels' three ldmatrix reads, each as (row, column) of the element whose address
 * lane l gives, in a tile stored by rows with any 16-byte aligned stride:
 *   - ldsm_a: an A tile stored as A(i, k) at row i, column k;
 *   - ldsm_b2_nrows: two B tiles (n 0-7, n 8-15) stored as B(k, j) at row j, column k
 *     (K for Q K^T): registers 0, 1 are the first tile's, 2, 3 the second's;
 *   - ldsm_b2_krows: the same two tiles stored as B(k, j) at row k, column j (V for P V),
 *     read with .trans.
 * a_from_acc: two accumulator tiles c0 (columns 0-7) and c1 (8-15) of one lane become its
 * A fragment of the 16 x 16 tile: register x, half h is element a_from_acc_elem(x, h) of
 * tile a_from_acc_tile(x). */
#ifndef HG_BACKEND_CUDA_ARCH_FRAGMENTS_H
#define HG_BACKEND_CUDA_ARCH_FRAGMENTS_H

#include "core/rng.h" /* HG_HOST_DEVICE */

HG_HOST_DEVICE static inline int ldsm_a_row(int l) { return l % 16; }
HG_HOST_DEVICE static inline int ldsm_a_col(int l) { return l / 16 * 8; }
HG_HOST_DEVICE static inline int ldsm_nrows_row(int l) { return l % 8 + l / 16 * 8; }
HG_HOST_DEVICE static inline int ldsm_nrows_col(int l) { return l / 8 % 2 * 8; }
HG_HOST_DEVICE static inline int ldsm_krows_row(int l) { return l % 8 + l / 8 % 2 * 8; }
HG_HOST_DEVICE static inline int ldsm_krows_col(int l) { return l / 16 * 8; }

HG_HOST_DEVICE static inline int a_from_acc_tile(int x) { return x / 2; }
HG_HOST_DEVICE static inline int a_from_acc_elem(int x, int h) { return x % 2 * 2 + h; }

#endif
