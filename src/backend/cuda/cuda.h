/* CUDA backend internals shared by its op files: state, error checks, element types,
 * launch helpers and the cuBLASLt GEMM.
 *
 * Legend as in src/ops/README.md. T is the compute type (float or __nv_bfloat16) of
 * weights and activations; gradients of parameters, statistics and accumulators are
 * float. Every op runs on the backend's one stream; nothing here synchronises except
 * download, sumsq and sync. */
#ifndef HG_BACKEND_CUDA_H
#define HG_BACKEND_CUDA_H

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <nvtx3/nvToolsExt.h>
#include <stdint.h>

#include <initializer_list>

#include "backend/backend.h"
#include "backend/cuda_module.h"
#include "core/error.h"

/* ---- state ---- */

typedef struct cuda_gemm_cache cuda_gemm_cache;

/* The GEMM epilogues (gemm.cu: cuda_gemm). */
typedef enum cuda_epilogue {
    EPI_NONE,      /* D = alpha op(A) op(B) + beta C */
    EPI_BIAS,      /* + bias (N) */
    EPI_GELU_AUX,  /* aux = AB + bias; D = GELU(aux) */
    EPI_DGELU,     /* D = (AB) * GELU'(aux) */
    EPI_BGRAD,     /* D as EPI_NONE; bias (N, fp32) += column sums of B (K, N), trans_b = 0,
                      out_fp32: the dW GEMM that also yields dbias (cuBLASLt's BGRADA) */
    EPI_BGRAD_A,   /* D as EPI_NONE; bias (M, fp32) += column sums of A (K, M), trans_a = 1,
                      out_fp32: the classifier's dwte GEMM and the output bias (BGRADB) */
    EPI_COUNT
} cuda_epilogue;

struct cudnn_attn;

typedef struct cuda_state {
    int device, sm_count;
    size_t smem_optin;            /* largest dynamic shared memory a block may ask for */
    cudaStream_t stream;
    cublasLtHandle_t lt;
    void *lt_workspace;           /* cuBLASLt's workspace, CUDA_LT_WORKSPACE bytes */
    cuda_gemm_cache *gemm;        /* heuristic results per GEMM shape (gemm.cu) */
    void *work;                   /* backend scratch for reductions, grown outside capture */
    size_t work_bytes;
    double *host_sum;             /* pinned: sumsq's result */
    /* the first failure since the last sync; while `trial` is set (a fused GEMM that
     * may fall back, gemm.cu) failures are returned but not recorded */
    hg_status err;
    char errmsg[512];
    int trial;
    int unfused; /* HANDGRAD_CUDA_UNFUSED=1: GEMM epilogues as their own kernels (tests) */
    int bgrad_off; /* HANDGRAD_CUDA_BGRAD=off: bias gradients as column sums (A/B timing) */
    int gemm_tune; /* HANDGRAD_CUDA_GEMM_TUNE=1: time the heuristic's candidates (gemm.cu) */
    unsigned gemm_tuned, gemm_retuned; /* shapes tuned; those whose pick was not the first */
    unsigned epi_runs[2][EPI_COUNT]; /* [fused?][cuda_epilogue]: how each epilogue ran (gemm.cu) */
    char epi_words[260];
    /* CUDA graph of the training pass (cuda.cu: cuda_run_graph) */
    int capturing;
    cudaGraphExec_t graph;
    uint64_t graph_key, last_key;
    /* AdamW's tensor list on the device and its host copy (adamw.cu) */
    void *adam_segs, *adam_host;
    int adam_count;
    int adam_aligned; /* every tensor allows 16-byte access of whole groups */
    /* cuDNN's fused attention (cudnn_attention.h, attention.cu): NULL where it is not
     * loaded or not wanted (fp32, HG_FLAG_DETERMINISTIC, HANDGRAD_CUDNN_ATTENTION=off, a
     * build without cuDNN's headers); dnn_dirs bit d: direction d may use it */
    struct cudnn_attn *dnn;
    unsigned dnn_dirs;
    int dnn_graph[2];         /* the cuDNN graph (CUDNN_ATTN_*) each direction plans */
    char dnn_note[600];       /* the library loaded, or why none is used */
    char att_used[2][700];    /* what the last forward and backward ran, and why */
    char att_words[1500];     /* both, for attention_kernels */
} cuda_state;

#define CUDA_LT_WORKSPACE ((size_t)32 << 20)

static inline cuda_state *cuda_of(hg_backend *be) { return (cuda_state *)be->impl; }
static inline cudaStream_t cuda_stream(hg_backend *be) { return cuda_of(be)->stream; }

/* ---- errors: every CUDA and cuBLASLt call is checked ---- */

/* Records the first failure (for the next sync) and returns HG_ERR_BACKEND with the
 * message set; HG_OK when e is cudaSuccess. */
hg_status cuda_check(hg_backend *be, cudaError_t e, const char *what);
hg_status cuda_check_lt(hg_backend *be, cublasStatus_t e, const char *what);
/* After a launch: the launch error, if any, recorded as above. */
static inline hg_status cuda_launched(hg_backend *be, const char *kernel) {
    return cuda_check(be, cudaGetLastError(), kernel);
}
/* Records a failure that is not a CUDA error code (e.g. an unsupported shape). */
hg_status cuda_fail(hg_backend *be, hg_status st, const char *fmt, ...) HG_PRINTF(3, 4);

/* Backend scratch of at least `bytes`, or NULL with the failure recorded. Grows only
 * outside graph capture (the first, eager, run of a shape allocates). */
void *cuda_work(hg_backend *be, size_t bytes);

/* ---- profiling: an NVTX range around each op, so Nsight shows ops ---- */

struct cuda_range {
    explicit cuda_range(const char *name) { nvtxRangePushA(name); }
    ~cuda_range() { nvtxRangePop(); }
    cuda_range(const cuda_range &) = delete;
    cuda_range &operator=(const cuda_range &) = delete;
};
#define CUDA_OP(name) cuda_range cuda_op_range_(name)

/* ---- element types ---- */

typedef __nv_bfloat16 bf16;

__device__ __forceinline__ float to_f(float x) { return x; }
__device__ __forceinline__ float to_f(bf16 x) { return __bfloat162float(x); }
template <typename T> __device__ __forceinline__ T from_f(float x);
template <> __device__ __forceinline__ float from_f<float>(float x) { return x; }
template <> __device__ __forceinline__ bf16 from_f<bf16>(float x) { return __float2bfloat16_rn(x); }

/* Vector access: V elements of T at p, as floats. V is 1 (any p) or VEC16(T), 16 bytes
 * (p 16-byte aligned): one load or store instruction a lane. Row kernels are
 * instantiated for both and take the 16-byte form when the row length and every
 * pointer allow it (cuda_vec16_ok). */
#define VEC16(T) ((int)(16 / sizeof(T)))
template <int V, typename T>
__device__ __forceinline__ void load_v(float (&f)[V], const T *p) {
    static_assert(V == 1 || V * sizeof(T) == 16, "V is 1 or 16 bytes");
    if constexpr (V == 1) {
        f[0] = to_f(*p);
    } else {
        uint4 u = *reinterpret_cast<const uint4 *>(p);
        const T *e = reinterpret_cast<const T *>(&u);
#pragma unroll
        for (int j = 0; j < V; j++) f[j] = to_f(e[j]);
    }
}
template <int V, typename T>
__device__ __forceinline__ void store_v(T *p, const float (&f)[V]) {
    static_assert(V == 1 || V * sizeof(T) == 16, "V is 1 or 16 bytes");
    if constexpr (V == 1) {
        *p = from_f<T>(f[0]);
    } else {
        uint4 u;
        T *e = reinterpret_cast<T *>(&u);
#pragma unroll
        for (int j = 0; j < V; j++) e[j] = from_f<T>(f[j]);
        *reinterpret_cast<uint4 *>(p) = u;
    }
}
/* Whether rows of n elements of T at these pointers (NULL ones ignored) take 16-byte
 * access: n a multiple of VEC16(T) and every pointer 16-byte aligned. */
template <typename T>
static inline int cuda_vec16_ok(int n, std::initializer_list<const void *> ptrs) {
    if (n % VEC16(T)) return 0;
    for (const void *p : ptrs)
        if ((uintptr_t)p % 16) return 0;
    return 1;
}

static inline cudaDataType_t cuda_type(hg_precision p) { return p == HG_PRECISION_FP32 ? CUDA_R_32F : CUDA_R_16BF; }

/* Calls f.template operator()<T>() with T the backend's compute type. */
#define CUDA_DISPATCH(be, ...)                                                   \
    do {                                                                         \
        if ((be)->precision == HG_PRECISION_FP32) {                              \
            typedef float T;                                                     \
            __VA_ARGS__;                                                         \
        } else {                                                                 \
            typedef bf16 T;                                                      \
            __VA_ARGS__;                                                         \
        }                                                                        \
    } while (0)

/* GELU's tanh form and its derivative, the CPU's formulas (gelu.cu, and GeGLU's gate in
 * activation.cu). */
#include "ops/gelu_math.h"

__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ double warp_sum(double v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

static inline unsigned cuda_blocks(size_t n, unsigned threads) { return (unsigned)((n + threads - 1) / threads); }

/* Blocks of 256 threads for a grid-stride loop over n elements: one per 256, at most 16
 * per multiprocessor, at least one. */
static inline unsigned cuda_grid(hg_backend *be, size_t n) {
    size_t cap = (size_t)cuda_of(be)->sm_count * 16, want = (n + 255) / 256;
    return (unsigned)(want < cap ? (want ? want : 1) : cap);
}

/* Dropout settings by value for a kernel argument (off when d is NULL). */
static inline hg_dropout cuda_dropout(const hg_dropout *d) {
    hg_dropout off = {0.0f, 0, 0, 0};
    return d ? *d : off;
}

/* ---- the QKV row of attention (src/ops/attention.h) ----
 * q (NH heads) | k (NKV heads) | v (NKV heads), hs elements a head: W = (NH + 2 NKV) hs.
 * Query head h reads kv head h / (NH/NKV) (grouped-query attention; NKV = NH without). */
__host__ __device__ __forceinline__ int qkv_width(int NH, int NKV, int hs) { return (NH + 2 * NKV) * hs; }
__host__ __device__ __forceinline__ int k_column(int kh, int NH, int hs) { return (NH + kh) * hs; }
__host__ __device__ __forceinline__ int v_column(int kh, int NH, int NKV, int hs) { return (NH + NKV + kh) * hs; }
__host__ __device__ __forceinline__ int kv_head_of(int h, int NH, int NKV) { return h / (NH / NKV); }

/* The largest head size the attention kernels take (attention.cu's flash kernels: widths
 * 64 and 128; attention_rows.cu and attention_cached.cu: 8 elements a lane, up to 256);
 * cuda_supports refuses larger ones at model creation. */
#define CUDA_MAX_HEAD_SIZE 256

/* ---- GEMM (gemm.cu): row-major, as cpu_gemm_desc ---- */

/* D (M,N) = op(A) @ op(B) with A (M,K) stored row-major with row stride lda, or (K,M)
 * when trans_a; B (K,N) with stride ldb, or (N,K) when trans_b; D with stride ldd.
 * A and B are compute-type T; D is T, or fp32 when out_fp32 (then accumulate adds into
 * it: the dW += GEMMs). bias (N) and aux (M,N, stride ldd) are T; EPI_BGRAD's bias is
 * an fp32 gradient. */
typedef struct cuda_gemm_desc {
    int M, N, K;
    int trans_a, trans_b;
    int lda, ldb, ldd;
    int out_fp32, accumulate;
    cuda_epilogue epilogue;
} cuda_gemm_desc;

/* Runs the GEMM through cuBLASLt. When cuBLASLt has no kernel for an epilogue, runs it
 * unfused (the plain GEMM, then bias/GELU/dGELU kernels), so callers need not care. */
hg_status cuda_gemm(hg_backend *be, const cuda_gemm_desc *d, const void *A, const void *B, void *D,
                    const void *bias, void *aux);
const char *cuda_gemm_epilogues(hg_backend *be);
hg_status cuda_gemm_cache_create(cuda_gemm_cache **out);
void cuda_gemm_cache_free(cuda_gemm_cache *c);

/* Elementwise helpers used by the unfused fallbacks (gelu.cu). */
hg_status cuda_bias_add(hg_backend *be, void *out, const void *bias, int M, int N, int ld);
hg_status cuda_gelu_inplace(hg_backend *be, void *out, void *pre, int M, int N, int ld);
hg_status cuda_dgelu_inplace(hg_backend *be, void *d, const void *pre, int M, int N, int ld);
/* dst (n) += src (n), fp32. */
hg_status cuda_add_f32(hg_backend *be, float *dst, const float *src, int n);

/* dst (N) += column sums of src (M,N) in T, accumulated in fp32, in a fixed order
 * (matmul.cu). */
hg_status cuda_bias_backward(hg_backend *be, float *dbias, const void *src, int M, int N);

/* ---- the ops, one file each ---- */

extern "C" {
hg_encoder_forward_fn cuda_encoder_forward;
hg_encoder_backward_fn cuda_encoder_backward;
hg_layernorm_forward_fn cuda_layernorm_forward;
hg_residual_layernorm_forward_fn cuda_residual_layernorm_forward;
hg_layernorm_backward_fn cuda_layernorm_backward;
hg_layernorm_scratch_fn cuda_layernorm_scratch_bytes;
hg_dropout_backward_fn cuda_dropout_backward;
hg_residual_add_fn cuda_residual_add;
hg_qk_norm_forward_fn cuda_qk_norm_forward;
hg_qk_norm_backward_fn cuda_qk_norm_backward;
hg_matmul_forward_fn cuda_matmul_forward;
hg_matmul_backward_fn cuda_matmul_backward;
hg_matmul_gelu_forward_fn cuda_matmul_gelu_forward;
hg_matmul_gelu_backward_fn cuda_matmul_gelu_backward;
hg_gelu_forward_fn cuda_gelu_forward;
hg_gelu_backward_fn cuda_gelu_backward;
hg_activation_forward_fn cuda_activation_forward;
hg_activation_backward_fn cuda_activation_backward;
hg_rope_forward_fn cuda_rope_forward;
hg_rope_backward_fn cuda_rope_backward;
hg_attention_forward_fn cuda_attention_forward;
hg_attention_backward_fn cuda_attention_backward;
hg_attention_scratch_fn cuda_attention_scratch_bytes;
hg_attention_cached_fn cuda_attention_cached;
hg_classifier_forward_fn cuda_classifier_forward;
hg_classifier_backward_fn cuda_classifier_backward;
hg_lora_forward_fn cuda_lora_forward;
hg_lora_backward_fn cuda_lora_backward;
hg_adamw_fn cuda_adamw;
hg_sumsq_fn cuda_sumsq;
}

/* dst (n, T) = src (n, fp32) (adamw.cu). */
void cuda_to_compute(hg_backend *be, void *dst, const float *src, size_t n);
/* Attention one warp per row (attention_rows.cu): fp32, and bf16 head sizes the flash
 * kernels are not compiled for; D (B,NH,T) scratch. */
hg_status cuda_attention_rows_forward(hg_backend *be, float *out, float *lse, const float *qkv, const hg_attention_shape *s);
hg_status cuda_attention_rows_backward(hg_backend *be, float *dqkv, const float *dout, const float *qkv, const float *out,
                                       const float *lse, const hg_attention_shape *s, float *D);
/* Raises the dynamic shared-memory limit of the attention kernels and, in bf16 unless
 * HG_FLAG_DETERMINISTIC, loads cuDNN's fused attention (attention.cu). */
hg_status cuda_attention_init(hg_backend *be);
void cuda_attention_free(hg_backend *be);
const char *cuda_attention_kernels(hg_backend *be);
void cuda_adamw_free(hg_backend *be);

#endif
