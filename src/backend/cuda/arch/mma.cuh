/* Warp-level tile products for the attention kernels: the one place that knows the
 * tensor-core instruction (sm_80+ mma.sync.m16n8k16, bf16 in, fp32 accumulate) and how
 * its fragments are filled. The lane maps are in arch/fragments.h (plain C, checked on
 * the host by tests/test_mma_maps.c).
 *
 * Fragments are filled from shared memory by ldmatrix, one instruction per fragment (or
 * two B fragments), from 16-byte aligned rows of 8 elements: an A tile stored by rows,
 * and two B tiles side by side (n 0-7 and 8-15) stored either by n rows (as K is for
 * Q K^T) or by k rows (as V is for P V; .trans). a_from_acc turns two accumulator tiles
 * (16 x 16, fp32) into an A fragment without shared memory: m16n8k16's C layout for
 * columns 0-7 and 8-15 is its A layout. */
#ifndef HG_BACKEND_CUDA_ARCH_MMA_CUH
#define HG_BACKEND_CUDA_ARCH_MMA_CUH

#include <stdint.h>

#include <cuda_bf16.h>

#include "backend/cuda/arch/fragments.h"

template <typename T> struct mma_a;
template <typename T> struct mma_b;

/* bf16: the instruction's own fragments, pairs of elements packed low-first. */
template <> struct mma_a<__nv_bfloat16> { uint32_t x[4]; };
template <> struct mma_b<__nv_bfloat16> { uint32_t x[2]; };

__device__ __forceinline__ uint32_t pack_bf16(__nv_bfloat16 lo, __nv_bfloat16 hi) {
    return (uint32_t)__bfloat16_as_ushort(lo) | (uint32_t)__bfloat16_as_ushort(hi) << 16;
}

__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], const void *p) {
    uint32_t a = (uint32_t)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
}
__device__ __forceinline__ void ldsm_x4_trans(uint32_t (&r)[4], const void *p) {
    uint32_t a = (uint32_t)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
}

/* A (16 x 16) with A(i, k) = a[i*ld + k]: matrices (rows 0-7, k 0-7), (8-15, 0-7),
 * (0-7, 8-15), (8-15, 8-15) are x[0..3]. */
__device__ __forceinline__ void ldsm_a(mma_a<__nv_bfloat16> &f, const __nv_bfloat16 *a, int ld) {
    int l = threadIdx.x % 32;
    ldsm_x4(f.x, a + ldsm_a_row(l) * ld + ldsm_a_col(l));
}

/* B tiles for n 0-7 (f0) and 8-15 (f1), k 0-15, with B(k, j) = b[j*ld + k]: matrices
 * (n 0-7, k 0-7), (n 0-7, k 8-15), (n 8-15, k 0-7), (n 8-15, k 8-15). */
__device__ __forceinline__ void ldsm_b2_nrows(mma_b<__nv_bfloat16> &f0, mma_b<__nv_bfloat16> &f1, const __nv_bfloat16 *b, int ld) {
    int l = threadIdx.x % 32;
    uint32_t r[4];
    ldsm_x4(r, b + ldsm_nrows_row(l) * ld + ldsm_nrows_col(l));
    f0.x[0] = r[0], f0.x[1] = r[1], f1.x[0] = r[2], f1.x[1] = r[3];
}

/* The same two B tiles with B(k, j) = b[k*ld + j], transposed on the way: matrices
 * (k 0-7, n 0-7), (k 8-15, n 0-7), (k 0-7, n 8-15), (k 8-15, n 8-15). */
__device__ __forceinline__ void ldsm_b2_krows(mma_b<__nv_bfloat16> &f0, mma_b<__nv_bfloat16> &f1, const __nv_bfloat16 *b, int ld) {
    int l = threadIdx.x % 32;
    uint32_t r[4];
    ldsm_x4_trans(r, b + ldsm_krows_row(l) * ld + ldsm_krows_col(l));
    f0.x[0] = r[0], f0.x[1] = r[1], f1.x[0] = r[2], f1.x[1] = r[3];
}

/* The A fragment of the 16 x 16 tile whose columns 0-7 are accumulator c0 and 8-15 c1. */
__device__ __forceinline__ void a_from_acc(mma_a<__nv_bfloat16> &f, const float c0[4], const float c1[4]) {
#pragma unroll
    for (int x = 0; x < 4; x++) {
        const float *c = a_from_acc_tile(x) ? c1 : c0;
        f.x[x] = pack_bf16(__float2bfloat16_rn(c[a_from_acc_elem(x, 0)]), __float2bfloat16_rn(c[a_from_acc_elem(x, 1)]));
    }
}

__device__ __forceinline__ void mma(float acc[4], const mma_a<__nv_bfloat16> &a, const mma_b<__nv_bfloat16> &b) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
                 "{%0, %1, %2, %3};\n"
                 : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])
                 : "r"(a.x[0]), "r"(a.x[1]), "r"(a.x[2]), "r"(a.x[3]), "r"(b.x[0]), "r"(b.x[1]));
}

#endif
