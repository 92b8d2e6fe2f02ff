/* CPU backend internals shared by its op files: the oneDNN GEMM and OpenMP helpers. */
#ifndef HG_BACKEND_CPU_H
#define HG_BACKEND_CPU_H

#include <omp.h>

#include "backend/backend.h"
#include "core/error.h"

/* C (M,N) = op(A) @ op(B) (+ bias (N)) (+ C when accumulate), row-major.
 * A is (M,K) with row stride lda, or stored (K,M) when trans_a; B is (K,N) with row
 * stride ldb, or stored (N,K) when trans_b; C has row stride ldc.
 * bf16_in: A, B and the bias hold bf16 (else fp32); bf16_out: C holds bf16 (else fp32).
 * Products accumulate in fp32 either way. */
typedef struct cpu_gemm_desc {
    int M, N, K;
    int trans_a, trans_b;
    int lda, ldb, ldc;
    int bias;
    int accumulate;
    int bf16_in, bf16_out;
} cpu_gemm_desc;

/* Runs a GEMM through a cached oneDNN matmul primitive. The first call with a new
 * descriptor creates the primitive (this allocates); later calls allocate nothing of
 * handgrad's own. A bf16 product runs on oneDNN's bf16 kernels where this CPU has them
 * (AVX512-BF16, AMX), else on the portable path: its bf16 operands converted to fp32 in
 * buffers owned by the cache, an fp32 product, and C rounded back. */
hg_status cpu_gemm(hg_backend *be, const cpu_gemm_desc *d, const float *A, const float *B,
                   const float *bias, float *C);

/* Whether cpu_gemm reorders B into a blocked layout before the product for descriptor d
 * (known once a call with d has run; 0 before). */
int cpu_gemm_packs(hg_backend *be, const cpu_gemm_desc *d);

/* The best median GFLOP/s of large oneDNN sgemm calls on the current threads. */
hg_status cpu_sgemm_peak(double *gflops);
/* The same for bf16 products (fp32 accumulation, bf16 out) through cpu_gemm's path on
 * this CPU: oneDNN's bf16 kernels, or the portable path where it has none. */
hg_status cpu_bf16_gemm_peak(int threads, double *gflops);

/* Whether bf16 products run on oneDNN's bf16 kernels on this CPU (1), or on the portable
 * path (0): asked of oneDNN once, or forced to 0 by HANDGRAD_BF16=portable (which
 * cpu_bf16_portable_forced reports). A product oneDNN refuses in bf16 runs portable. */
int cpu_bf16_gemm_native(void);
int cpu_bf16_portable_forced(void);

/* GEMM state kept by the backend. */
typedef struct cpu_gemm_cache cpu_gemm_cache;
hg_status cpu_gemm_cache_create(cpu_gemm_cache **out);
void cpu_gemm_cache_free(cpu_gemm_cache *c);
/* Bytes of the oneDNN scratchpad, grown to the largest GEMM seen so far. */
size_t cpu_gemm_scratch_bytes(const cpu_gemm_cache *c);

typedef struct cpu_state {
    cpu_gemm_cache *gemm;
} cpu_state;

static inline cpu_state *cpu_of(hg_backend *be) { return (cpu_state *)be->impl; }

/* The ops, one file each (forward and backward side by side). */
hg_encoder_forward_fn cpu_encoder_forward;
hg_encoder_backward_fn cpu_encoder_backward;
hg_layernorm_forward_fn cpu_layernorm_forward;
hg_residual_layernorm_forward_fn cpu_residual_layernorm_forward;
hg_layernorm_backward_fn cpu_layernorm_backward;
hg_layernorm_scratch_fn cpu_layernorm_scratch_bytes;
hg_qk_norm_forward_fn cpu_qk_norm_forward;
hg_qk_norm_backward_fn cpu_qk_norm_backward;
hg_dropout_backward_fn cpu_dropout_backward;
hg_residual_add_fn cpu_residual_add;
hg_matmul_forward_fn cpu_matmul_forward;
hg_matmul_backward_fn cpu_matmul_backward;
hg_gelu_forward_fn cpu_gelu_forward;
hg_gelu_backward_fn cpu_gelu_backward;
hg_activation_forward_fn cpu_activation_forward;
hg_activation_backward_fn cpu_activation_backward;
hg_rope_forward_fn cpu_rope_forward;
hg_rope_backward_fn cpu_rope_backward;
hg_attention_forward_fn cpu_attention_forward;
hg_attention_backward_fn cpu_attention_backward;
hg_attention_scratch_fn cpu_attention_scratch_bytes;
hg_classifier_forward_fn cpu_classifier_forward;
hg_classifier_backward_fn cpu_classifier_backward;
hg_attention_cached_fn cpu_attention_cached;
hg_lora_forward_fn cpu_lora_forward;
hg_lora_backward_fn cpu_lora_backward;
hg_adamw_fn cpu_adamw;
hg_sumsq_fn cpu_sumsq;

/* out[k] = hg_dropout_scale(d, first + k) for k < n, bit for bit, a Philox block per
 * four elements, on the widest kernel this CPU runs (dropout.c). */
void cpu_dropout_scales(const hg_dropout *d, uint64_t first, size_t n, float *out);
/* Philox words in bulk: block l < nb of counter (b0 + l, c1, c2, c3) under seed, its
 * word q at w[q][l], bit for bit hg_philox's (AVX-512 where the CPU has it; dropout.c).
 * The first counter word wraps at 2^32 as hg_philox's uint32_t argument does. */
void cpu_philox_words(uint64_t seed, uint32_t b0, size_t nb, uint32_t c1, uint32_t c2, uint32_t c3,
                      uint32_t *const w[4]);
/* The same on kernel k (for the tests): its name ("avx512", "avx2", "portable"), NULL
 * when this CPU does not run it or past the last. */
const char *cpu_dropout_kernel_name(int k);
void cpu_dropout_scales_with(int k, const hg_dropout *d, uint64_t first, size_t n, float *out);

#endif
