/* The CUDA backend: device checks, memory, errors, the graph of the training pass, and
 * the op table. Device 0 (CUDA_VISIBLE_DEVICES picks it), one stream. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda.h"

/* ---- errors ---- */

static hg_status record(hg_backend *be, hg_status st, const char *msg) {
    cuda_state *s = cuda_of(be);
    if (s->err == HG_OK && !s->trial) {
        s->err = st;
        snprintf(s->errmsg, sizeof s->errmsg, "%s", msg);
    }
    return hg_fail(st, "%s", msg);
}

hg_status cuda_check(hg_backend *be, cudaError_t e, const char *what) {
    if (e == cudaSuccess) return HG_OK;
    char msg[400];
    snprintf(msg, sizeof msg, "CUDA: %s failed: %s (%s)", what, cudaGetErrorString(e), cudaGetErrorName(e));
    hg_status st = e == cudaErrorMemoryAllocation ? HG_ERR_NOMEM : HG_ERR_BACKEND;
    return record(be, st, msg);
}

hg_status cuda_check_lt(hg_backend *be, cublasStatus_t e, const char *what) {
    if (e == CUBLAS_STATUS_SUCCESS) return HG_OK;
    char msg[400];
    snprintf(msg, sizeof msg, "cuBLASLt: %s failed: %s (status %d)", what, cublasLtGetStatusString(e), (int)e);
    return record(be, e == CUBLAS_STATUS_ALLOC_FAILED ? HG_ERR_NOMEM : HG_ERR_BACKEND, msg);
}

hg_status cuda_fail(hg_backend *be, hg_status st, const char *fmt, ...) {
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return record(be, st, msg);
}

void *cuda_work(hg_backend *be, size_t bytes) {
    cuda_state *s = cuda_of(be);
    if (bytes <= s->work_bytes) return s->work;
    if (s->capturing) {
        cuda_fail(be, HG_ERR_STATE, "CUDA: scratch must grow to %zu bytes during graph capture", bytes);
        return NULL;
    }
    if (s->work && cuda_check(be, cudaStreamSynchronize(s->stream), "cudaStreamSynchronize") != HG_OK) return NULL;
    if (s->work) cudaFree(s->work);
    if (s->graph) { /* it holds the old address */
        cudaGraphExecDestroy(s->graph);
        s->graph = NULL;
        s->last_key = 0;
    }
    s->work = NULL;
    s->work_bytes = 0;
    if (cuda_check(be, cudaMalloc(&s->work, bytes), "cudaMalloc (backend scratch)") != HG_OK) return NULL;
    s->work_bytes = bytes;
    return s->work;
}

/* ---- memory ---- */

/* A failure returns NULL, which the caller reports with the sizes. */
static void *cuda_alloc(hg_backend *be, size_t bytes) {
    (void)be;
    void *p = NULL;
    if (cudaMalloc(&p, bytes ? bytes : 256) != cudaSuccess) {
        cudaGetLastError(); /* clears it: an allocation failure is not sticky */
        return NULL;
    }
    return p;
}

static void cuda_free_mem(hg_backend *be, void *p) {
    (void)be;
    cudaFree(p);
}

/* Free device memory less a reserve for cuBLASLt, the graph and the context's growth. */
static size_t cuda_mem_available(hg_backend *be) {
    size_t free_b = 0, total = 0;
    if (cuda_check(be, cudaMemGetInfo(&free_b, &total), "cudaMemGetInfo") != HG_OK) return 0;
    size_t reserve = (size_t)512 << 20;
    return free_b > reserve ? free_b - reserve : 0;
}

static void cuda_zero(hg_backend *be, void *p, size_t bytes) {
    cuda_check(be, cudaMemsetAsync(p, 0, bytes, cuda_stream(be)), "cudaMemsetAsync");
}

/* From pageable memory the copy is staged before the call returns, so the caller may
 * reuse its buffer at once. */
static void cuda_upload(hg_backend *be, void *dst, const void *src, size_t bytes) {
    cuda_check(be, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, cuda_stream(be)), "cudaMemcpyAsync (upload)");
}

static void cuda_download(hg_backend *be, void *dst, const void *src, size_t bytes) {
    if (cuda_check(be, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, cuda_stream(be)), "cudaMemcpyAsync (download)") ==
        HG_OK)
        cuda_check(be, cudaStreamSynchronize(cuda_stream(be)), "cudaStreamSynchronize (download)");
}

static hg_status cuda_sync(hg_backend *be) {
    cuda_state *s = cuda_of(be);
    cuda_check(be, cudaStreamSynchronize(s->stream), "cudaStreamSynchronize");
    if (s->err == HG_OK) return HG_OK;
    hg_status st = hg_fail(s->err, "%s", s->errmsg);
    s->err = HG_OK;
    return st;
}

static void cuda_wait(hg_backend *be) { cuda_check(be, cudaStreamSynchronize(cuda_stream(be)), "cudaStreamSynchronize"); }
static void *cuda_stream_of(hg_backend *be) { return (void *)cuda_stream(be); }

/* cuBLASLt's workspace and the backend scratch, allocated outside the tables. */
static size_t cuda_workspace_bytes(hg_backend *be) { return CUDA_LT_WORKSPACE + cuda_of(be)->work_bytes; }

/* ---- the training pass as a CUDA graph ----
 * The first run with a key is eager: it creates cuBLASLt plans and grows scratch, which
 * capture forbids. The second consecutive run with it is captured and launched; later
 * runs with it replay. Any other key runs eagerly and becomes the candidate. */
static hg_status cuda_run_graph(hg_backend *be, uint64_t key, hg_status (*body)(void *ctx), void *ctx) {
    cuda_state *s = cuda_of(be);
    if (s->graph && s->graph_key == key)
        return cuda_check(be, cudaGraphLaunch(s->graph, s->stream), "cudaGraphLaunch");
    if (s->last_key != key) {
        s->last_key = key;
        return body(ctx);
    }
    HG_TRY(cuda_check(be, cudaStreamBeginCapture(s->stream, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture"));
    s->capturing = 1;
    hg_status st = body(ctx);
    cudaGraph_t g = NULL;
    cudaError_t e = cudaStreamEndCapture(s->stream, &g);
    s->capturing = 0;
    if (st == HG_OK) st = cuda_check(be, e, "cudaStreamEndCapture");
    if (st == HG_OK && s->graph) {
        cudaGraphExecDestroy(s->graph);
        s->graph = NULL;
    }
    if (st == HG_OK) st = cuda_check(be, cudaGraphInstantiate(&s->graph, g, 0), "cudaGraphInstantiate");
    if (g) cudaGraphDestroy(g);
    if (st != HG_OK) return st;
    s->graph_key = key;
    return cuda_check(be, cudaGraphLaunch(s->graph, s->stream), "cudaGraphLaunch");
}

/* ---- create / destroy ---- */

static void cuda_destroy(hg_backend *be) {
    if (!be) return;
    cuda_state *s = cuda_of(be);
    if (s) {
        if (s->stream) cudaStreamSynchronize(s->stream);
        if (s->graph) cudaGraphExecDestroy(s->graph);
        cuda_adamw_free(be);
        cuda_attention_free(be);
        cuda_gemm_cache_free(s->gemm);
        if (s->lt) cublasLtDestroy(s->lt);
        cudaFree(s->lt_workspace);
        cudaFree(s->work);
        cudaFreeHost(s->host_sum);
        if (s->stream) cudaStreamDestroy(s->stream);
    }
    free(s);
    free(be);
}

/* Whether a usable GPU is present: HG_ERR_UNSUPPORTED naming what is missing. */
static hg_status check_device(cudaDeviceProp *prop) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e == cudaErrorNoDevice || (e == cudaSuccess && n == 0))
        return hg_fail(HG_ERR_UNSUPPORTED, "device: no CUDA device found");
    if (e == cudaErrorInsufficientDriver)
        return hg_fail(HG_ERR_UNSUPPORTED, "device: the NVIDIA driver is missing or older than this build's CUDA runtime");
    if (e != cudaSuccess)
        return hg_fail(HG_ERR_UNSUPPORTED, "device: no usable CUDA device (%s: %s)", cudaGetErrorName(e), cudaGetErrorString(e));
    e = cudaGetDeviceProperties(prop, 0);
    if (e != cudaSuccess)
        return hg_fail(HG_ERR_BACKEND, "CUDA: cudaGetDeviceProperties failed: %s", cudaGetErrorString(e));
    if (prop->major < 9) /* sm_90a code runs on Hopper; later GPUs JIT the compute_90 PTX (untested) */
        return hg_fail(HG_ERR_UNSUPPORTED, "device: GPU 0 is %s (sm_%d%d); this build needs sm_90 (Hopper: H100, H200) or newer",
                       prop->name, prop->major, prop->minor);
    return HG_OK;
}

extern "C" hg_status hg_backend_cuda_create(hg_backend **out, int threads, hg_precision precision, unsigned flags) {
    if (precision != HG_PRECISION_FP32 && precision != HG_PRECISION_BF16)
        return hg_fail(HG_ERR_UNSUPPORTED, "precision: the CUDA backend runs fp32 or bf16");
    cudaDeviceProp prop;
    HG_TRY(check_device(&prop));
    hg_backend *be = (hg_backend *)calloc(1, sizeof *be);
    cuda_state *s = (cuda_state *)calloc(1, sizeof *s);
    if (!be || !s) {
        free(be);
        free(s);
        return hg_fail(HG_ERR_NOMEM, "out of memory creating the CUDA backend");
    }
    be->ops = hg_backend_cuda_ops();
    be->threads = threads;
    be->precision = precision;
    be->flags = flags;
    be->impl = s;
    s->device = 0;
    s->sm_count = prop.multiProcessorCount;
    s->smem_optin = prop.sharedMemPerBlockOptin;
    const char *unfused = getenv("HANDGRAD_CUDA_UNFUSED");
    s->unfused = unfused && !strcmp(unfused, "1");
    const char *bgrad = getenv("HANDGRAD_CUDA_BGRAD");
    s->bgrad_off = bgrad && !strcmp(bgrad, "off");
    const char *tune = getenv("HANDGRAD_CUDA_GEMM_TUNE");
    s->gemm_tune = tune && !strcmp(tune, "1");
    hg_status st = cuda_check(be, cudaSetDevice(0), "cudaSetDevice");
    if (st == HG_OK) st = cuda_check(be, cudaStreamCreateWithFlags(&s->stream, cudaStreamNonBlocking), "cudaStreamCreate");
    if (st == HG_OK) st = cuda_check_lt(be, cublasLtCreate(&s->lt), "cublasLtCreate");
    if (st == HG_OK) st = cuda_check(be, cudaMalloc(&s->lt_workspace, CUDA_LT_WORKSPACE), "cudaMalloc (cuBLASLt workspace)");
    if (st == HG_OK) st = cuda_check(be, cudaMallocHost((void **)&s->host_sum, sizeof(double)), "cudaMallocHost");
    if (st == HG_OK) st = cuda_gemm_cache_create(&s->gemm);
    if (st == HG_OK) st = cuda_attention_init(be);
    if (st != HG_OK) {
        cuda_destroy(be);
        return st;
    }
    s->err = HG_OK;
    *out = be;
    return HG_OK;
}

/* Larger chunks than the CPU's: each chunk's dwte += dlogits^T x reads and writes all of
 * dwte (fp32), so fewer chunks move less; 1 GiB of bf16 logits is 10672 rows of GPT-2. */
#define CUDA_CLASSIFIER_CHUNK_BYTES ((size_t)1 << 30)

/* What the CUDA kernels run: every switch of hg_config (norms with or without affine
 * parameters, RoPE, the MLP activations, biases, tying, grouped-query attention, a
 * head_dim of its own, the q/k norm per head or whole, the block layouts, the output
 * bias, the attention and logit caps), with head sizes up to CUDA_MAX_HEAD_SIZE. A
 * config the kernels cannot run is refused at creation, naming the field, rather than
 * failing inside a step; a new config switch without CUDA kernels belongs here. */
/* What was written without a GPU and has not run on one is refused by name, unless
 * HANDGRAD_CUDA_UNTESTED=1 (the GPU session's checks of it, scripts/gpu_session.sh new). */
static int untested_allowed(void) {
    const char *e = getenv("HANDGRAD_CUDA_UNTESTED");
    return e && !strcmp(e, "1");
}

static hg_status cuda_supports(const hg_config *c, const hg_options *o) {
    int hs = hg_head_size(c);
    if (hs > CUDA_MAX_HEAD_SIZE)
        return hg_fail(HG_ERR_UNSUPPORTED, "head_dim: the CUDA attention kernels take head sizes up to %d, this model's is %d; use "
                       "the CPU", CUDA_MAX_HEAD_SIZE, hs);
    for (int l = 0; l < c->n_layer; l++)
        if (hg_layer_window(c, l) && hg_layer_window(c, l) < o->seq_len && !untested_allowed())
            return hg_fail(HG_ERR_UNSUPPORTED, "sliding_window: a window (%d) shorter than the context (--ctx %d) has not "
                           "run on a GPU (the flash, row and KV-cache kernels' windows, written 2026-11-28); use the CPU, "
                           "a context of at most the window, or HANDGRAD_CUDA_UNTESTED=1 to run it unchecked",
                           hg_layer_window(c, l), o->seq_len);
    if (o->training && o->recompute != HG_RECOMPUTE_NONE && !untested_allowed())
        return hg_fail(HG_ERR_UNSUPPORTED, "recompute: not yet run on a GPU (written 2026-11-28); use the CPU, or "
                       "HANDGRAD_CUDA_UNTESTED=1 to run it unchecked");
    if (o->lora.r > 0 && !untested_allowed())
        return hg_fail(HG_ERR_UNSUPPORTED, "lora: LoRA adapters have not run on a GPU (lora.cu, written 2026-11-28); "
                       "use the CPU, or HANDGRAD_CUDA_UNTESTED=1 to run them unchecked");
    if (o->training && o->grad_precision == HG_PRECISION_BF16)
        return hg_fail(HG_ERR_UNSUPPORTED, "grad_precision: bf16 gradients are kept on the CPU only; use fp32 "
                       "gradients on a GPU");
    if (o->training && o->optim_state == HG_PRECISION_BF16 && !untested_allowed())
        return hg_fail(HG_ERR_UNSUPPORTED, "optim_state: AdamW moments in bf16 have not run on a GPU (adamw.cu, written "
                       "2026-11-28); use fp32 moments, the CPU, or HANDGRAD_CUDA_UNTESTED=1 to run them unchecked");
    if (o->training && o->freeze && !untested_allowed())
        return hg_fail(HG_ERR_UNSUPPORTED, "freeze: frozen parameters have not run on a GPU (written 2026-11-28); use "
                       "the CPU, or HANDGRAD_CUDA_UNTESTED=1 to run it unchecked");
    return HG_OK;
}

static hg_status cuda_positions(hg_backend *be) {
    (void)be;
    if (untested_allowed()) return HG_OK;
    return hg_fail(HG_ERR_UNSUPPORTED, "positions: packed documents have not run on a GPU (the flash, row, encoder and "
                   "rotary kernels' positions, written 2026-11-28); use the CPU, padded rows (train --rows padded), or "
                   "HANDGRAD_CUDA_UNTESTED=1 to run them unchecked");
}

static const hg_backend_ops cuda_ops = {
    .name = "cuda",
    .classifier_chunk_bytes = CUDA_CLASSIFIER_CHUNK_BYTES,
    .residual_fp32 = 0, /* the residual stream and the norms' weights in the compute type */
    .precisions = 1u << HG_PRECISION_FP32 | 1u << HG_PRECISION_BF16,
    .destroy = cuda_destroy,
    .supports = cuda_supports,
    .positions = cuda_positions,
    .alloc = cuda_alloc,
    .free = cuda_free_mem,
    .mem_available = cuda_mem_available,
    .zero = cuda_zero,
    .upload = cuda_upload,
    .download = cuda_download,
    .to_compute = cuda_to_compute,
    .sync = cuda_sync,
    .wait = cuda_wait,
    .stream = cuda_stream_of,
    .attention_kernels = cuda_attention_kernels,
    .gemm_epilogues = cuda_gemm_epilogues,
    .run_graph = cuda_run_graph,
    .workspace_bytes = cuda_workspace_bytes,
    .encoder_forward = cuda_encoder_forward,
    .encoder_backward = cuda_encoder_backward,
    .layernorm_forward = cuda_layernorm_forward,
    .residual_layernorm_forward = cuda_residual_layernorm_forward,
    .layernorm_backward = cuda_layernorm_backward,
    .layernorm_scratch_bytes = cuda_layernorm_scratch_bytes,
    .qk_norm_forward = cuda_qk_norm_forward,
    .qk_norm_backward = cuda_qk_norm_backward,
    .dropout_backward = cuda_dropout_backward,
    .residual_add = cuda_residual_add,
    .matmul_forward = cuda_matmul_forward,
    .matmul_backward = cuda_matmul_backward,
    .matmul_gelu_forward = cuda_matmul_gelu_forward,
    .matmul_gelu_backward = cuda_matmul_gelu_backward,
    .gelu_forward = cuda_gelu_forward,
    .gelu_backward = cuda_gelu_backward,
    .activation_forward = cuda_activation_forward,
    .activation_backward = cuda_activation_backward,
    .rope_forward = cuda_rope_forward,
    .rope_backward = cuda_rope_backward,
    .attention_forward = cuda_attention_forward,
    .attention_backward = cuda_attention_backward,
    .attention_scratch_bytes = cuda_attention_scratch_bytes,
    .classifier_forward = cuda_classifier_forward,
    .classifier_backward = cuda_classifier_backward,
    .attention_cached = cuda_attention_cached,
    .lora_forward = cuda_lora_forward,
    .lora_backward = cuda_lora_backward,
    .adamw = cuda_adamw,
    .sumsq = cuda_sumsq,
};

extern "C" const hg_backend_ops *hg_backend_cuda_ops(void) { return &cuda_ops; }
