/* Warp-level tile products for the attention kernels: the one place that knows the
 * tensor-core instruction (sm_80+ mma.sync.m16n8k16, bf16 in, fp32 accumulate).
 *
 * A warp multiplies a 16x16 A tile by a 16x8 B tile into a 16x8 fp32 accumulator held
 * in mma.m16n8k16's C layout: lane = 4g + t (g = lane / 4, t = lane % 4) holds
 *   acc[0] = (g, 2t)   acc[1] = (g, 2t+1)   acc[2] = (g+8, 2t)   acc[3] = (g+8, 2t+1).
 * Operands are read from shared memory through strides: A(i, k) = a[i*rs + k*cs] and
 * B(k, j) = b[k*rs + j*cs], so a transposed operand is only a swap of strides.
 *
 * Loads are element by element; ldmatrix for the layouts that allow it is the next step
 * (docs/cuda.md). */
#ifndef HG_BACKEND_CUDA_ARCH_MMA_CUH
#define HG_BACKEND_CUDA_ARCH_MMA_CUH

#include <stdint.h>

#include <cuda_bf16.h>

template <typename T> struct mma_a;
template <typename T> struct mma_b;

/* bf16: the instruction's own fragments, pairs of elements packed low-first. */
template <> struct mma_a<__nv_bfloat16> { uint32_t x[4]; };
template <> struct mma_b<__nv_bfloat16> { uint32_t x[2]; };

__device__ __forceinline__ uint32_t pack_bf16(__nv_bfloat16 lo, __nv_bfloat16 hi) {
    return (uint32_t)__bfloat16_as_ushort(lo) | (uint32_t)__bfloat16_as_ushort(hi) << 16;
}

__device__ __forceinline__ void load_a(mma_a<__nv_bfloat16> &f, const __nv_bfloat16 *a, int rs, int cs) {
    int g = threadIdx.x % 32 / 4, t = threadIdx.x % 4;
#define A_(i, k) a[(i) * rs + (k) * cs]
    f.x[0] = pack_bf16(A_(g, 2 * t), A_(g, 2 * t + 1));
    f.x[1] = pack_bf16(A_(g + 8, 2 * t), A_(g + 8, 2 * t + 1));
    f.x[2] = pack_bf16(A_(g, 2 * t + 8), A_(g, 2 * t + 9));
    f.x[3] = pack_bf16(A_(g + 8, 2 * t + 8), A_(g + 8, 2 * t + 9));
#undef A_
}

__device__ __forceinline__ void load_b(mma_b<__nv_bfloat16> &f, const __nv_bfloat16 *b, int rs, int cs) {
    int g = threadIdx.x % 32 / 4, t = threadIdx.x % 4;
    f.x[0] = pack_bf16(b[(2 * t) * rs + g * cs], b[(2 * t + 1) * rs + g * cs]);
    f.x[1] = pack_bf16(b[(2 * t + 8) * rs + g * cs], b[(2 * t + 9) * rs + g * cs]);
}

__device__ __forceinline__ void mma(float acc[4], const mma_a<__nv_bfloat16> &a, const mma_b<__nv_bfloat16> &b) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
                 "{%0, %1, %2, %3};\n"
                 : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])
                 : "r"(a.x[0]), "r"(a.x[1]), "r"(a.x[2]), "r"(a.x[3]), "r"(b.x[0]), "r"(b.x[1]));
}

#endif
