/* GEMMs through cuBLASLt, row-major as the rest of handgrad: gemm_map.h maps each call
 * to cuBLASLt's column-major terms (our B is its A, our A its B).
 *
 * Bias and GELU run in cuBLASLt's epilogue (BIAS, GELU_AUX_BIAS or GELU_AUX when there is
 * no bias, DGELU), and the bias gradient in the dW GEMM's (BGRADA, or BGRADB for the
 * classifier's; both write the column sums, so they go to backend scratch and a small
 * kernel adds them to the accumulating dbias), when it can: the fused call is a trial
 * whose failures are not recorded, and on any failure, or where its preconditions do not
 * hold, the GEMM runs plain and small kernels apply the epilogue (gelu.cu; the column
 * sums of reduce.cuh for the bias gradients). The unfused path is also taken for GELU in
 * fp32 (cuBLASLt's GELU may use a cheaper tanh than ours; fp32 is the checking mode) and
 * for every epilogue with HANDGRAD_CUDA_UNFUSED=1 (so tests cover both paths); for the bias
 * gradient alone with HANDGRAD_CUDA_BGRAD=off (to time the two against each other).
 *
 * The heuristic's choice is cached per shape, transposes, types, epilogue (and whether it
 * has a bias) and pointer alignment (the alignment limits which kernels are valid).
 * HANDGRAD_CUDA_GEMM_TUNE=1 (an experiment): the first call of a shape times up to
 * TUNE_ALGOS of the heuristic's candidates on its own operands and caches the fastest
 * (tune_pick).
 * Accumulation is fp32 (CUBLAS_COMPUTE_32F; no TF32 in fp32 mode). */
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda.h"
#include "backend/cuda/gemm_map.h"
#include "core/rng.h"

typedef struct gemm_key {
    cuda_gemm_desc d;
    int precision;
    int align[4]; /* bytes: A, B, C/D, aux */
    int bias;     /* GELU_AUX: with a bias (GELU_AUX_BIAS) or without (GELU_AUX) */
} gemm_key;

typedef struct gemm_entry {
    gemm_key key;
    int found; /* 0: cuBLASLt has no kernel for this key */
    cublasLtMatmulAlgo_t algo;
} gemm_entry;

enum { GEMM_CACHE = 512 };

struct cuda_gemm_cache {
    int count;
    gemm_entry e[GEMM_CACHE];
};

hg_status cuda_gemm_cache_create(cuda_gemm_cache **out) {
    *out = (cuda_gemm_cache *)calloc(1, sizeof **out);
    return *out ? HG_OK : hg_fail(HG_ERR_NOMEM, "out of memory for the GEMM cache");
}

void cuda_gemm_cache_free(cuda_gemm_cache *c) { free(c); }

static int alignment(const void *p) {
    uintptr_t a = (uintptr_t)p;
    int al = 256;
    while (al > 1 && a % (uintptr_t)al) al >>= 1;
    return al;
}

/* Whether an epilogue is a bias gradient (EPI_BGRAD, EPI_BGRAD_A). */
static inline int is_bgrad(cuda_epilogue e) { return e == EPI_BGRAD || e == EPI_BGRAD_A; }

/* The descriptors of one call, destroyed together. */
typedef struct lt_call {
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t a, b, c;
    cublasLtMatmulPreference_t pref;
} lt_call;

static void lt_call_free(lt_call *k) {
    if (k->pref) cublasLtMatmulPreferenceDestroy(k->pref);
    if (k->c) cublasLtMatrixLayoutDestroy(k->c);
    if (k->b) cublasLtMatrixLayoutDestroy(k->b);
    if (k->a) cublasLtMatrixLayoutDestroy(k->a);
    if (k->op) cublasLtMatmulDescDestroy(k->op);
}

#define LT(call) HG_TRY(cuda_check_lt(be, (call), #call))

static hg_status lt_call_init(hg_backend *be, lt_call *k, const cuda_gemm_desc *d, const gemm_key *key,
                              const void *bias, void *aux) {
    cudaDataType_t t = cuda_type(be->precision), dt = d->out_fp32 ? CUDA_R_32F : t;
    const gemm_lt_map g = gemm_lt_map_of(d->M, d->N, d->K, d->trans_a, d->trans_b, d->lda, d->ldb, d->ldd);
    cublasOperation_t opa = g.op_a ? CUBLAS_OP_T : CUBLAS_OP_N, opb = g.op_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    LT(cublasLtMatmulDescCreate(&k->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    LT(cublasLtMatmulDescSetAttribute(k->op, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa));
    LT(cublasLtMatmulDescSetAttribute(k->op, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb));
    LT(cublasLtMatrixLayoutCreate(&k->a, t, g.a_rows, g.a_cols, g.a_ld));
    LT(cublasLtMatrixLayoutCreate(&k->b, t, g.b_rows, g.b_cols, g.b_ld));
    LT(cublasLtMatrixLayoutCreate(&k->c, dt, g.c_rows, g.c_cols, g.c_ld));
    cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_DEFAULT;
    if (d->epilogue == EPI_BIAS) epi = CUBLASLT_EPILOGUE_BIAS;
    if (d->epilogue == EPI_GELU_AUX) epi = bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
    if (d->epilogue == EPI_DGELU) epi = CUBLASLT_EPILOGUE_DGELU;
    const int bgrad = is_bgrad(d->epilogue);
    if (bgrad) /* our B's column sums, or our A's */
        epi = gemm_lt_bgrad_is_a(d->epilogue == EPI_BGRAD ? GEMM_BGRAD_OF_B : GEMM_BGRAD_OF_A) ? CUBLASLT_EPILOGUE_BGRADA
                                                                                                : CUBLASLT_EPILOGUE_BGRADB;
    LT(cublasLtMatmulDescSetAttribute(k->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
    if (bgrad) {
        cudaDataType_t f = CUDA_R_32F;
        LT(cublasLtMatmulDescSetAttribute(k->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
        LT(cublasLtMatmulDescSetAttribute(k->op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &f, sizeof f));
    }
    if ((d->epilogue == EPI_BIAS || d->epilogue == EPI_GELU_AUX) && bias) {
        LT(cublasLtMatmulDescSetAttribute(k->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
        LT(cublasLtMatmulDescSetAttribute(k->op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &t, sizeof t));
    }
    if (d->epilogue == EPI_GELU_AUX || d->epilogue == EPI_DGELU) {
        int64_t ld = d->ldd;
        LT(cublasLtMatmulDescSetAttribute(k->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof aux));
        LT(cublasLtMatmulDescSetAttribute(k->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, sizeof ld));
        LT(cublasLtMatmulDescSetAttribute(k->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE, &t, sizeof t));
    }
    LT(cublasLtMatmulPreferenceCreate(&k->pref));
    size_t ws = CUDA_LT_WORKSPACE;
    LT(cublasLtMatmulPreferenceSetAttribute(k->pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
    uint32_t al[4] = {(uint32_t)key->align[1], (uint32_t)key->align[0], (uint32_t)key->align[2], (uint32_t)key->align[2]};
    LT(cublasLtMatmulPreferenceSetAttribute(k->pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al[0], sizeof al[0]));
    LT(cublasLtMatmulPreferenceSetAttribute(k->pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al[1], sizeof al[1]));
    LT(cublasLtMatmulPreferenceSetAttribute(k->pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al[2], sizeof al[2]));
    LT(cublasLtMatmulPreferenceSetAttribute(k->pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al[3], sizeof al[3]));
    return HG_OK;
}

/* The cache's entry for key, or NULL. */
static gemm_entry *cached(hg_backend *be, const gemm_key *key) {
    cuda_gemm_cache *c = cuda_of(be)->gemm;
    for (int i = 0; i < c->count; i++)
        if (!memcmp(&c->e[i].key, key, sizeof *key)) return &c->e[i];
    return NULL;
}

/* One call's operands, for timing candidates on them. */
typedef struct gemm_operands {
    const void *A, *B;
    void *D;
    int accumulate;
    size_t d_bytes;
} gemm_operands;

enum { TUNE_ALGOS = 8, TUNE_REPS = 3 };

/* The index of the fastest of the n candidates in res, each run once to warm up and then
 * TUNE_REPS times (the least time counts). A call that accumulates is timed with beta = 0
 * into a scratch D of its size (allocated here, on a shape's first call only, never
 * inside graph capture), so its real D is written once, by the call itself; the others
 * write D, and aux or the bias gradient's sums, with the call's own values again. A
 * candidate that fails is passed over; the heuristic's first (0) stands if none can be
 * timed. */
static int tune_pick(hg_backend *be, const lt_call *k, const gemm_operands *o, const cublasLtMatmulHeuristicResult_t *res,
                     int n) {
    cuda_state *s = cuda_of(be);
    void *D = o->D, *tmp = NULL;
    cudaEvent_t ev[2] = {NULL, NULL};
    if (o->accumulate && cudaMalloc(&tmp, o->d_bytes) != cudaSuccess) n = 0;
    if (tmp) D = tmp;
    if (cudaEventCreate(&ev[0]) != cudaSuccess || cudaEventCreate(&ev[1]) != cudaSuccess) n = 0;
    const float alpha = 1.0f, beta = 0.0f;
    float best_ms = INFINITY;
    int best = 0;
    for (int i = 0; i < n; i++) {
        float least = INFINITY, ms = 0.0f;
        int ok = 1;
        for (int r = 0; r <= TUNE_REPS && ok; r++) {
            ok = cudaEventRecord(ev[0], s->stream) == cudaSuccess &&
                 cublasLtMatmul(s->lt, k->op, &alpha, o->B, k->a, o->A, k->b, &beta, D, k->c, D, k->c, &res[i].algo,
                                s->lt_workspace, CUDA_LT_WORKSPACE, s->stream) == CUBLAS_STATUS_SUCCESS &&
                 cudaEventRecord(ev[1], s->stream) == cudaSuccess && cudaEventSynchronize(ev[1]) == cudaSuccess &&
                 cudaEventElapsedTime(&ms, ev[0], ev[1]) == cudaSuccess;
            if (ok && r > 0 && ms < least) least = ms;
        }
        if (ok && least < best_ms) best_ms = least, best = i;
    }
    cudaStreamSynchronize(s->stream);
    for (int i = 0; i < 2; i++)
        if (ev[i]) cudaEventDestroy(ev[i]);
    cudaFree(tmp);
    cudaGetLastError(); /* a candidate's launch failure is not the step's */
    s->gemm_tuned++;
    s->gemm_retuned += best != 0;
    return best;
}

/* *algo = the cached (or newly found) kernel for key; *found = 0 when cuBLASLt has none.
 * o: the call's operands, for tuning. */
static hg_status find_algo(hg_backend *be, lt_call *k, const gemm_key *key, const gemm_operands *o, cublasLtMatmulAlgo_t *algo,
                           int *found) {
    const gemm_entry *e = cached(be, key);
    if (e) {
        *algo = e->algo;
        *found = e->found;
        return HG_OK;
    }
    cuda_state *s = cuda_of(be);
    const int tune = s->gemm_tune && !s->capturing && !(be->flags & HG_FLAG_DETERMINISTIC);
    cublasLtMatmulHeuristicResult_t res[TUNE_ALGOS];
    memset(res, 0, sizeof res);
    int n = 0;
    cublasStatus_t st =
        cublasLtMatmulAlgoGetHeuristic(s->lt, k->op, k->a, k->b, k->c, k->c, k->pref, tune ? TUNE_ALGOS : 1, res, &n);
    if (st != CUBLAS_STATUS_SUCCESS && st != CUBLAS_STATUS_NOT_SUPPORTED) HG_TRY(cuda_check_lt(be, st, "cublasLtMatmulAlgoGetHeuristic"));
    *found = st == CUBLAS_STATUS_SUCCESS && n > 0;
    const int pick = *found && tune && n > 1 ? tune_pick(be, k, o, res, n) : 0;
    *algo = res[pick].algo;
    cuda_gemm_cache *c = s->gemm;
    if (c->count < GEMM_CACHE) c->e[c->count++] = (gemm_entry){*key, *found, res[pick].algo};
    return HG_OK;
}

static hg_status gemm_plain_or_fused(hg_backend *be, const cuda_gemm_desc *d, const void *A, const void *B, void *D,
                                     const void *bias, void *aux, int *ran) {
    gemm_key key;
    memset(&key, 0, sizeof key);
    key.d = *d;
    key.precision = (int)be->precision;
    key.align[0] = alignment(A);
    key.align[1] = alignment(B);
    key.align[2] = alignment(D);
    key.align[3] = aux ? alignment(aux) : 0;
    key.bias = bias != NULL;
    lt_call k;
    memset(&k, 0, sizeof k);
    hg_status st = lt_call_init(be, &k, d, &key, bias, aux);
    cublasLtMatmulAlgo_t algo;
    int found = 0;
    const size_t d_bytes = (size_t)d->ldd * d->M * (d->out_fp32 ? 4 : hg_precision_bytes(be->precision));
    const gemm_operands o = {A, B, D, d->accumulate, d_bytes};
    if (st == HG_OK) st = find_algo(be, &k, &key, &o, &algo, &found);
    *ran = 0;
    if (st == HG_OK && found) {
        float alpha = 1.0f, beta = d->accumulate ? 1.0f : 0.0f;
        cuda_state *s = cuda_of(be);
        st = cuda_check_lt(be, cublasLtMatmul(s->lt, k.op, &alpha, B, k.a, A, k.b, &beta, D, k.c, D, k.c, &algo,
                                              s->lt_workspace, CUDA_LT_WORKSPACE, s->stream),
                           "cublasLtMatmul");
        *ran = st == HG_OK;
        gemm_entry *e = *ran ? NULL : cached(be, &key);
        if (e) e->found = 0; /* a fused trial that failed: unfused from now on */
    }
    lt_call_free(&k);
    return st;
}

/* Whether d's epilogue may be tried in cuBLASLt: not when forced off, not GELU in fp32,
 * and for the aux matrix (GELU_AUX, DGELU) a leading dimension that is a multiple of 8
 * and 16-byte alignment, which cuBLASLt requires (a d_ff such as 300 breaks them). */
static int fused_allowed(hg_backend *be, const cuda_gemm_desc *d, const void *aux) {
    if (cuda_of(be)->unfused) return 0;
    if (is_bgrad(d->epilogue)) return !cuda_of(be)->bgrad_off;
    if (d->epilogue != EPI_GELU_AUX && d->epilogue != EPI_DGELU) return 1;
    return be->precision != HG_PRECISION_FP32 && d->ldd % 8 == 0 && alignment(aux) >= 16;
}

static hg_status gemm_run(hg_backend *be, const cuda_gemm_desc *d, const void *A, const void *B, void *D, const void *bias,
                          void *aux, int *fused) {
    int ran = 0;
    if (d->epilogue == EPI_NONE) {
        HG_TRY(gemm_plain_or_fused(be, d, A, B, D, NULL, NULL, &ran));
        if (ran) return HG_OK;
        return cuda_fail(be, HG_ERR_BACKEND, "cuBLASLt has no kernel for a %dx%dx%d GEMM (trans %d%d, ld %d %d %d)", d->M, d->N,
                         d->K, d->trans_a, d->trans_b, d->lda, d->ldb, d->ldd);
    }
    /* the bias gradients' vector: its length, and the stored (rows, len) operand summed */
    const int bgrad = is_bgrad(d->epilogue), len = d->epilogue == EPI_BGRAD ? d->N : d->M;
    HG_ASSERT(d->epilogue != EPI_BGRAD || (!d->trans_b && d->ldb == d->N && d->out_fp32 && bias));
    HG_ASSERT(d->epilogue != EPI_BGRAD_A || (d->trans_a && d->lda == d->M && d->out_fp32 && bias));
    if (fused_allowed(be, d, aux)) {
        cuda_state *s = cuda_of(be);
        /* BGRADA/B write the sums, so they go to scratch and are added to the gradient */
        float *sums = bgrad ? (float *)cuda_work(be, sizeof(float) * (size_t)len) : NULL;
        if (bgrad && !sums) return s->err;
        s->trial++;
        hg_status st = gemm_plain_or_fused(be, d, A, B, D, sums ? sums : bias, aux, &ran);
        s->trial--;
        if (st == HG_OK && ran) {
            *fused = 1;
            return sums ? cuda_add_f32(be, (float *)bias, sums, len) : HG_OK;
        }
    }
    /* unfused: the plain GEMM, then the epilogue as its own pass */
    cuda_gemm_desc plain = *d;
    plain.epilogue = EPI_NONE;
    switch (d->epilogue) {
    case EPI_BIAS:
        HG_TRY(cuda_gemm(be, &plain, A, B, D, NULL, NULL));
        return cuda_bias_add(be, D, bias, d->M, d->N, d->ldd);
    case EPI_GELU_AUX:
        HG_TRY(cuda_gemm(be, &plain, A, B, aux, NULL, NULL));
        HG_TRY(cuda_bias_add(be, aux, bias, d->M, d->N, d->ldd));
        return cuda_gelu_inplace(be, D, aux, d->M, d->N, d->ldd);
    case EPI_DGELU:
        HG_TRY(cuda_gemm(be, &plain, A, B, D, NULL, NULL));
        return cuda_dgelu_inplace(be, D, aux, d->M, d->N, d->ldd);
    case EPI_BGRAD:
    case EPI_BGRAD_A:
        HG_TRY(cuda_gemm(be, &plain, A, B, D, NULL, NULL));
        return cuda_bias_backward(be, (float *)bias, d->epilogue == EPI_BGRAD ? B : A, d->K, len);
    case EPI_NONE:
    case EPI_COUNT: break;
    }
    return HG_OK;
}

hg_status cuda_gemm(hg_backend *be, const cuda_gemm_desc *d, const void *A, const void *B, void *D, const void *bias,
                    void *aux) {
    int fused = 0;
    hg_status st = gemm_run(be, d, A, B, D, bias, aux, &fused);
    if (st == HG_OK && d->epilogue != EPI_NONE) cuda_of(be)->epi_runs[fused][d->epilogue]++;
    return st;
}

const char *cuda_gemm_epilogues(hg_backend *be) {
    cuda_state *s = cuda_of(be);
    static const char *names[EPI_COUNT] = {"none", "bias", "gelu_aux", "dgelu", "bgrad", "bgrad_a"};
    int n = snprintf(s->epi_words, sizeof s->epi_words, "fused/own kernels:");
    for (int e = EPI_BIAS; e < EPI_COUNT && n > 0 && (size_t)n < sizeof s->epi_words; e++)
        n += snprintf(s->epi_words + n, sizeof s->epi_words - (size_t)n, " %s %u/%u", names[e], s->epi_runs[1][e], s->epi_runs[0][e]);
    if (s->gemm_tune && n > 0 && (size_t)n < sizeof s->epi_words)
        snprintf(s->epi_words + n, sizeof s->epi_words - (size_t)n, "; tuned %u shapes, %u not the heuristic's first",
                 s->gemm_tuned, s->gemm_retuned);
    return s->epi_words;
}

/* ---- the GEMM ceiling: hg_gemm_peak_gflops ---- */

/* x (n) uniform in [-1, 1) from Philox: random data (zeros run faster than real data). */
template <typename T>
__global__ void fill_uniform_kernel(T *x, size_t n, uint32_t stream) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        hg_u32x4 r = hg_philox(1, (uint32_t)i, (uint32_t)(i >> 32), 0x100 + stream, 0);
        x[i] = from_f<T>(2.0f * hg_u32_to_unit(r.v[0]) - 1.0f);
    }
}

static hg_status gemm_peak(hg_backend *be, double *gflops) {
    enum { NDIM = 8192, WARMUP = 3, REPS = 10 };
    const size_t n = (size_t)NDIM * NDIM, E = hg_precision_bytes(be->precision);
    cudaStream_t st = cuda_stream(be);
    void *m[3] = {NULL, NULL, NULL};
    cudaEvent_t ev[REPS + 1] = {};
    hg_status s = HG_OK;
    for (int i = 0; i < 3 && s == HG_OK; i++) s = cuda_check(be, cudaMalloc(&m[i], n * E), "cudaMalloc (GEMM ceiling)");
    for (int i = 0; i < 2 && s == HG_OK; i++) {
        CUDA_DISPATCH(be, fill_uniform_kernel<T><<<1024, 256, 0, st>>>((T *)m[i], n, (uint32_t)i));
        s = cuda_launched(be, "fill_uniform_kernel");
    }
    for (int i = 0; i <= REPS && s == HG_OK; i++) s = cuda_check(be, cudaEventCreate(&ev[i]), "cudaEventCreate");
    cuda_gemm_desc d = {NDIM, NDIM, NDIM, 0, 0, NDIM, NDIM, NDIM, 0, 0, EPI_NONE};
    for (int i = 0; i < WARMUP && s == HG_OK; i++) s = cuda_gemm(be, &d, m[0], m[1], m[2], NULL, NULL);
    for (int i = 0; i < REPS && s == HG_OK; i++) {
        s = cuda_check(be, cudaEventRecord(ev[i], st), "cudaEventRecord");
        if (s == HG_OK) s = cuda_gemm(be, &d, m[0], m[1], m[2], NULL, NULL);
        if (s == HG_OK && i == REPS - 1) s = cuda_check(be, cudaEventRecord(ev[REPS], st), "cudaEventRecord");
    }
    if (s == HG_OK) s = cuda_check(be, cudaEventSynchronize(ev[REPS]), "cudaEventSynchronize");
    float ms[REPS];
    for (int i = 0; i < REPS && s == HG_OK; i++) s = cuda_check(be, cudaEventElapsedTime(&ms[i], ev[i], ev[i + 1]), "cudaEventElapsedTime");
    if (s == HG_OK) {
        for (int i = 1; i < REPS; i++) /* insertion sort for the median */
            for (int j = i; j > 0 && ms[j] < ms[j - 1]; j--) {
                float t = ms[j];
                ms[j] = ms[j - 1], ms[j - 1] = t;
            }
        double med = 0.5 * (ms[REPS / 2 - 1] + ms[REPS / 2]) * 1e-3;
        *gflops = 2.0 * NDIM * (double)NDIM * NDIM / med / 1e9;
    }
    for (int i = 0; i <= REPS; i++)
        if (ev[i]) cudaEventDestroy(ev[i]);
    for (int i = 0; i < 3; i++) cudaFree(m[i]);
    return s;
}

extern "C" hg_status hg_cuda_gemm_peak_gflops(hg_precision precision, double *gflops) {
    hg_backend *be = NULL;
    HG_TRY(hg_backend_cuda_create(&be, 1, precision, 0));
    hg_status s = gemm_peak(be, gflops);
    be->ops->destroy(be);
    return s;
}
