/* The CPU backend: its op table, memory and state. */
#include <stdlib.h>
#include <string.h>
#if defined(__x86_64__)
#include <cpuid.h>
#endif

#include "backend/cpu/bf16.h"
#include "backend/cpu/cpu.h"
#include "core/error.h"
#include "core/table.h"
#include "core/timer.h"

static void cpu_destroy(hg_backend *be) {
    if (!be) return;
    cpu_state *s = cpu_of(be);
    if (s) cpu_gemm_cache_free(s->gemm);
    free(s);
    free(be);
}

static void *cpu_alloc(hg_backend *be, size_t bytes) {
    (void)be;
    return hg_aligned_alloc(bytes);
}

static void cpu_free(hg_backend *be, void *p) {
    (void)be;
    hg_aligned_free(p);
}

static void cpu_zero(hg_backend *be, void *p, size_t bytes) {
    /* Parallel, so large gradient buffers are cleared at memory bandwidth on all cores. */
    char *c = p;
    size_t chunk = 1 << 20;
    long nchunks = (long)((bytes + chunk - 1) / chunk);
    #pragma omp parallel for schedule(static) num_threads(be->threads)
    for (long i = 0; i < nchunks; i++) {
        size_t off = (size_t)i * chunk, n = bytes - off < chunk ? bytes - off : chunk;
        memset(c + off, 0, n);
    }
}

static void cpu_copy(hg_backend *be, void *dst, const void *src, size_t bytes) {
    (void)be;
    memcpy(dst, src, bytes);
}

static hg_status cpu_sync(hg_backend *be) {
    (void)be;
    return HG_OK;
}

static size_t cpu_workspace_bytes(hg_backend *be) { return cpu_gemm_scratch_bytes(cpu_of(be)->gemm); }

static size_t cpu_mem_available(hg_backend *be) {
    (void)be;
    return hg_memory_available();
}

static void cpu_to_compute(hg_backend *be, void *dst, const float *src, size_t n) {
    long blocks = (long)((n + CPU_BLOCK - 1) / CPU_BLOCK);
    #pragma omp parallel for schedule(static) num_threads(be->threads)
    for (long b = 0; b < blocks; b++) {
        size_t at = (size_t)b * CPU_BLOCK;
        cpu_store(be, dst, at, src + at, n - at < CPU_BLOCK ? n - at : CPU_BLOCK);
    }
}

/* fp32 runs every config. bf16 converts a norm's rows on each thread's stack, so d_model
 * has a bound there. */
static hg_status cpu_supports(const hg_config *c, const hg_options *o) {
    if (o->precision == HG_PRECISION_BF16 && c->d_model > CPU_BF16_ROW_MAX)
        return hg_fail(HG_ERR_UNSUPPORTED, "d_model: the CPU's bf16 kernels take d_model up to %d, this model's is %d; use fp32",
                       CPU_BF16_ROW_MAX, c->d_model);
    const int hs = hg_head_size(c), qd = c->n_head * hs;
    if (o->precision == HG_PRECISION_BF16 && c->qk_norm_whole && qd > CPU_BF16_ROW_MAX)
        return hg_fail(HG_ERR_UNSUPPORTED, "qk_norm_whole: the CPU's bf16 kernels normalise rows of up to %d, this model's "
                       "q rows are %d wide; use fp32", CPU_BF16_ROW_MAX, qd);
    return HG_OK;
}

/* Each chunk's dwte += dlogits^T x reads and writes all of dwte, so larger chunks cost
 * less traffic, and its K = chunk runs faster (190-198 GFLOP/s at 256, 205-212 at 512+,
 * bench/kernel_lab_gemm.c). 128 MiB holds 667 rows of GPT-2's vocabulary. */
#define CLASSIFIER_CHUNK_BYTES ((size_t)128 << 20)

static const hg_backend_ops cpu_ops = {
    .name = "cpu",
    .classifier_chunk_bytes = CLASSIFIER_CHUNK_BYTES,
    /* The residual stream, its gradient and the norms' weights stay fp32 in bf16 too, as
     * under PyTorch's autocast: the residual's sums are not rounded to 8 bits layer after
     * layer, and a norm weight near 1 keeps updates smaller than bf16's step there
     * (2^-7) (docs/architecture.md). */
    .residual_fp32 = 1,
    .precisions = 1u << HG_PRECISION_FP32 | 1u << HG_PRECISION_BF16,
    .destroy = cpu_destroy,
    .supports = cpu_supports,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .mem_available = cpu_mem_available,
    .zero = cpu_zero,
    .upload = cpu_copy,
    .download = cpu_copy,
    .to_compute = cpu_to_compute,
    .sync = cpu_sync,
    .run_graph = NULL,
    .workspace_bytes = cpu_workspace_bytes,
    .encoder_forward = cpu_encoder_forward,
    .encoder_backward = cpu_encoder_backward,
    .layernorm_forward = cpu_layernorm_forward,
    .residual_layernorm_forward = cpu_residual_layernorm_forward,
    .layernorm_backward = cpu_layernorm_backward,
    .layernorm_scratch_bytes = cpu_layernorm_scratch_bytes,
    .qk_norm_forward = cpu_qk_norm_forward,
    .qk_norm_backward = cpu_qk_norm_backward,
    .dropout_backward = cpu_dropout_backward,
    .residual_add = cpu_residual_add,
    .matmul_forward = cpu_matmul_forward,
    .matmul_backward = cpu_matmul_backward,
    .matmul_gelu_forward = NULL, /* the step runs matmul and GELU as two ops */
    .matmul_gelu_backward = NULL,
    .gelu_forward = cpu_gelu_forward,
    .gelu_backward = cpu_gelu_backward,
    .activation_forward = cpu_activation_forward,
    .activation_backward = cpu_activation_backward,
    .rope_forward = cpu_rope_forward,
    .rope_backward = cpu_rope_backward,
    .attention_forward = cpu_attention_forward,
    .attention_backward = cpu_attention_backward,
    .attention_scratch_bytes = cpu_attention_scratch_bytes,
    .classifier_forward = cpu_classifier_forward,
    .classifier_backward = cpu_classifier_backward,
    .attention_cached = cpu_attention_cached,
    .lora_forward = cpu_lora_forward,
    .lora_backward = cpu_lora_backward,
    .adamw = cpu_adamw,
    .sumsq = cpu_sumsq,
};

const hg_backend_ops *hg_backend_cpu_ops(void) { return &cpu_ops; }

hg_status hg_backend_cpu_create(hg_backend **out, int threads, hg_precision precision) {
    if (precision != HG_PRECISION_FP32 && precision != HG_PRECISION_BF16)
        return hg_fail(HG_ERR_UNSUPPORTED, "precision: the CPU backend runs fp32 and bf16");
    hg_backend *be = calloc(1, sizeof *be);
    cpu_state *s = calloc(1, sizeof *s);
    if (!be || !s) {
        free(be);
        free(s);
        return hg_fail(HG_ERR_NOMEM, "out of memory creating the CPU backend");
    }
    be->ops = &cpu_ops;
    be->threads = threads;
    be->precision = precision;
    be->impl = s;
    hg_status st = cpu_gemm_cache_create(&s->gemm);
    if (st != HG_OK) {
        cpu_destroy(be);
        return st;
    }
    *out = be;
    return HG_OK;
}

/* Whether the CPU has AMX-BF16 (CPUID leaf 7.0, EDX bit 22) or AVX512-BF16 (leaf 7.1, EAX
 * bit 5), asked of CPUID itself: not every compiler's __builtin_cpu_supports knows them. */
static int cpu_has_bf16_products(void) {
#if defined(__x86_64__)
    unsigned a, b, c, d;
    int amx = __get_cpuid_count(7, 0, &a, &b, &c, &d) && (d >> 22 & 1);
    int avx512 = __get_cpuid_count(7, 1, &a, &b, &c, &d) && (a >> 5 & 1);
    return amx || avx512;
#else
    return 0;
#endif
}

const char *hg_cpu_bf16_slow(void) {
    if (cpu_bf16_portable_forced())
        return "HANDGRAD_BF16=portable: bf16 runs on the portable path (fp32 products of bf16 values), no faster than fp32";
    if (!cpu_bf16_gemm_native())
        return "this CPU lacks amx_bf16 and avx512_bf16 (and oneDNN has no bf16 kernels for it): bf16 runs on the "
               "portable path (fp32 products of bf16 values), no faster than fp32";
    if (!cpu_has_bf16_products())
        return "this CPU lacks amx_bf16 and avx512_bf16: oneDNN emulates bf16 products with AVX-512, no faster than fp32";
    return NULL;
}

/* STREAM's triad a = b + s c over three 64 MiB arrays, far larger than any cache, each
 * thread touching first (and then always) its own static share; the best of 7 passes
 * after one untimed pass, counting 12 bytes an element as STREAM does (the write-allocate
 * read of a is not counted, so the figure is what an op's "each tensor once" bytes can
 * reach). */
hg_status hg_memory_bandwidth(int threads, double *gbps) {
    if (!gbps) return hg_fail(HG_ERR_INVALID, "hg_memory_bandwidth: NULL argument");
    if (threads < 0) return hg_fail(HG_ERR_INVALID, "threads must be >= 0, got %d", threads);
    const long n = 16L << 20;
    float *a = hg_aligned_alloc(sizeof(float) * n), *b = hg_aligned_alloc(sizeof(float) * n);
    float *c = hg_aligned_alloc(sizeof(float) * n);
    if (!a || !b || !c) {
        hg_aligned_free(a), hg_aligned_free(b), hg_aligned_free(c);
        return hg_fail(HG_ERR_NOMEM, "out of memory for the bandwidth measurement");
    }
    int nt = threads > 0 ? threads : omp_get_num_procs();
    #pragma omp parallel for schedule(static) num_threads(nt)
    for (long i = 0; i < n; i++) a[i] = 0.5f, b[i] = 1.0f + (float)(i & 1023) * 1e-3f, c[i] = 2.0f - (float)(i & 511) * 1e-3f;
    double best = 0.0;
    for (int rep = 0; rep < 8; rep++) {
        double t0 = hg_now();
        #pragma omp parallel for schedule(static) num_threads(nt)
        for (long i = 0; i < n; i++) a[i] = b[i] + 0.75f * c[i];
        double t = hg_now() - t0;
        if (rep > 0 && (best == 0.0 || t < best)) best = t;
    }
    /* keep the stores observable */
    volatile float sink = a[n / 3];
    (void)sink;
    hg_aligned_free(a), hg_aligned_free(b), hg_aligned_free(c);
    *gbps = 12.0 * (double)n / best / 1e9;
    return HG_OK;
}

hg_status hg_sgemm_peak_gflops(int threads, double *gflops) {
    if (!gflops) return hg_fail(HG_ERR_INVALID, "hg_sgemm_peak_gflops: NULL argument");
    if (threads < 0) return hg_fail(HG_ERR_INVALID, "threads must be >= 0, got %d", threads);
    int saved = omp_get_max_threads();
    omp_set_num_threads(threads > 0 ? threads : omp_get_num_procs());
    hg_status st = cpu_sgemm_peak(gflops);
    omp_set_num_threads(saved);
    return st;
}
