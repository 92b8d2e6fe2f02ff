/* AdamW over a range of the parameters in one launch, the gradient norm, and fp32 ->
 * compute-type copies, on the GPU.
 *
 * AdamW walks the range [lo, hi) of the fp32 buffers (params layout) in groups of 8
 * elements, numbered from the start of the buffer; a group finds its tensor by binary
 * search in a tensor list uploaded on the first step (offsets are 64-byte aligned, so a
 * group never straddles two tensors), takes the tensor's weight decay, updates the
 * elements of the range in p, m, v in fp32 and writes the compute copy w. bf16 copies
 * are rounded to nearest, or stochastically: 16 random bits from Philox(seed, group,
 * ROUNDING, step) are added below the bf16 mantissa before truncation, so E[round(x)] = x,
 * and the draws do not depend on how the buffer is cut into ranges.
 *
 * sumsq sums in double over a fixed grid and adds the block partials in a fixed order:
 * the same bits for the same input. */
#include <stdlib.h>

#include "backend/cuda/cuda.h"
#include "core/rng.h"

typedef struct adam_seg {
    unsigned long long p0, w0, n; /* first element in the fp32 buffers and in w; elements */
    float decay;                  /* 1: weight decay applies */
} adam_seg;

enum { ADAM_GROUP = 8 };

__device__ __forceinline__ bf16 round_bf16(float x, uint32_t r16, int stochastic) {
    if (!stochastic) return __float2bfloat16_rn(x);
    uint32_t u = __float_as_uint(x);
    if ((u & 0x7f800000u) == 0x7f800000u) return __float2bfloat16_rn(x); /* inf, nan */
    u += r16 & 0xffffu;
    return __ushort_as_bfloat16((unsigned short)(u >> 16));
}

template <typename W>
__device__ __forceinline__ void store_w(W *w, int j, float x, uint32_t r16, int stochastic);
template <>
__device__ __forceinline__ void store_w<float>(float *w, int j, float x, uint32_t, int) {
    w[j] = x;
}
template <>
__device__ __forceinline__ void store_w<bf16>(bf16 *w, int j, float x, uint32_t r16, int stochastic) {
    w[j] = round_bf16(x, r16, stochastic);
}

/* W: the copy's type; float with w == NULL when p itself is the compute copy. g, m, v
 * hold the range only (element i at i - lo). */
template <typename W>
__global__ void adamw_kernel(float *p, const float *g, float *m, float *v, W *w, const adam_seg *segs, int nsegs,
                             unsigned long long lo, unsigned long long hi, hg_adamw_update u, int stochastic,
                             unsigned long long seed, uint32_t step) {
    unsigned long long gi = lo / ADAM_GROUP + blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
    unsigned long long i0 = gi * ADAM_GROUP;
    if (i0 >= hi) return;
    int a = 0, b = nsegs - 1; /* last segment with p0 <= i0 */
    while (a < b) {
        int mid = (a + b + 1) / 2;
        if (segs[mid].p0 <= i0) a = mid;
        else b = mid - 1;
    }
    adam_seg s = segs[a];
    if (i0 < s.p0 || i0 >= s.p0 + s.n) return; /* alignment padding between tensors */
    int cnt = (int)(s.p0 + s.n - i0 < ADAM_GROUP ? s.p0 + s.n - i0 : ADAM_GROUP);
    hg_u32x4 r = {{0, 0, 0, 0}};
    if (stochastic) r = hg_philox(seed, (uint32_t)gi, (uint32_t)(gi >> 32), HG_RNG_ROUNDING, step);
    const float decay = 1.0f - u.lr * u.weight_decay * s.decay;
    const float stepsize = u.lr / u.bias_correction1, inv_sqrt_bc2 = 1.0f / sqrtf(u.bias_correction2);
    W *wt = w ? w + s.w0 + (i0 - s.p0) : NULL;
    for (int j = 0; j < cnt; j++) {
        unsigned long long i = i0 + j;
        if (i < lo || i >= hi) continue;
        size_t k = i - lo;
        float gj = g[k] * u.grad_scale;
        float mj = u.beta1 * m[k] + (1.0f - u.beta1) * gj;
        float vj = u.beta2 * v[k] + (1.0f - u.beta2) * gj * gj;
        m[k] = mj;
        v[k] = vj;
        float pj = p[i] * decay - stepsize * mj / (sqrtf(vj) * inv_sqrt_bc2 + u.eps);
        p[i] = pj;
        if (wt) store_w(wt, j, pj, r.v[j / 2] >> (16 * (j % 2)), stochastic);
    }
}

/* The tensor list for (params, weights), uploaded when the table changes. */
static hg_status upload_segments(hg_backend *be, const hg_table *params, const hg_table *weights) {
    cuda_state *s = cuda_of(be);
    if (s->adam_segs && s->adam_table == params && s->adam_count == params->count) return HG_OK;
    cuda_adamw_free(be);
    adam_seg *h = (adam_seg *)calloc((size_t)params->count, sizeof *h);
    if (!h) return cuda_fail(be, HG_ERR_NOMEM, "out of memory for AdamW's tensor list");
    for (int i = 0; i < params->count; i++) {
        const hg_tensor_spec *p = &params->specs[i], *w = &weights->specs[i];
        h[i] = (adam_seg){p->offset / 4, w->offset / w->elem_size, (unsigned long long)p->alloc,
                          (p->flags & HG_SPEC_DECAY) ? 1.0f : 0.0f};
    }
    size_t bytes = sizeof *h * (size_t)params->count;
    hg_status st = cuda_check(be, cudaMalloc(&s->adam_segs, bytes), "cudaMalloc (AdamW tensor list)");
    /* on the backend's stream (a non-blocking one: the legacy stream would not order it) */
    if (st == HG_OK)
        st = cuda_check(be, cudaMemcpyAsync(s->adam_segs, h, bytes, cudaMemcpyHostToDevice, s->stream), "cudaMemcpyAsync (AdamW tensor list)");
    if (st == HG_OK) st = cuda_check(be, cudaStreamSynchronize(s->stream), "cudaStreamSynchronize");
    free(h);
    if (st != HG_OK) return st;
    s->adam_table = params;
    s->adam_count = params->count;
    return HG_OK;
}

void cuda_adamw_free(hg_backend *be) {
    cuda_state *s = cuda_of(be);
    if (s->adam_segs) cudaFree(s->adam_segs);
    s->adam_segs = NULL;
    s->adam_table = NULL;
    s->adam_count = 0;
}

extern "C" void cuda_adamw(hg_backend *be, const hg_adamw_args *a) {
    CUDA_OP("adamw");
    if (a->params->count == 0 || a->n == 0 || upload_segments(be, a->params, a->weights) != HG_OK) return;
    cuda_state *s = cuda_of(be);
    unsigned long long lo = a->lo, hi = a->lo + a->n;
    unsigned long long groups = (hi + ADAM_GROUP - 1) / ADAM_GROUP - lo / ADAM_GROUP;
    unsigned blocks = (unsigned)((groups + 255) / 256);
    const adam_seg *segs = (const adam_seg *)s->adam_segs;
    if (a->w && be->precision == HG_PRECISION_BF16)
        adamw_kernel<bf16><<<blocks, 256, 0, s->stream>>>(a->p, a->g, a->m, a->v, (bf16 *)a->w, segs, a->params->count, lo, hi,
                                                          a->u, a->stochastic, a->seed, a->step);
    else
        adamw_kernel<float><<<blocks, 256, 0, s->stream>>>(a->p, a->g, a->m, a->v, (float *)a->w, segs, a->params->count, lo,
                                                           hi, a->u, 0, a->seed, a->step);
    cuda_launched(be, "adamw_kernel");
}

/* ---- sumsq ---- */

enum { SUMSQ_BLOCKS = 1024, SUMSQ_THREADS = 256 };

__device__ double block_sum(double v) {
    __shared__ double part[32];
    v = warp_sum(v);
    if (threadIdx.x % 32 == 0) part[threadIdx.x / 32] = v;
    __syncthreads();
    v = threadIdx.x < blockDim.x / 32 ? part[threadIdx.x] : 0.0;
    return threadIdx.x < 32 ? warp_sum(v) : 0.0;
}

__global__ void sumsq_partial_kernel(double *partial, const float *x, size_t n) {
    double acc = 0.0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        acc += (double)x[i] * x[i];
    acc = block_sum(acc);
    if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

__global__ void sumsq_finish_kernel(double *out, const double *partial) {
    double v = block_sum(partial[threadIdx.x]);
    if (threadIdx.x == 0) *out = v;
}

extern "C" void cuda_sumsq(hg_backend *be, const float *x, size_t n, double *out) {
    CUDA_OP("sumsq");
    cuda_state *s = cuda_of(be);
    *out = 0.0;
    double *partial = (double *)cuda_work(be, sizeof(double) * (SUMSQ_BLOCKS + 1));
    if (!partial) return;
    sumsq_partial_kernel<<<SUMSQ_BLOCKS, SUMSQ_THREADS, 0, s->stream>>>(partial, x, n);
    if (cuda_launched(be, "sumsq_partial_kernel") != HG_OK) return;
    sumsq_finish_kernel<<<1, SUMSQ_BLOCKS, 0, s->stream>>>(partial + SUMSQ_BLOCKS, partial);
    if (cuda_launched(be, "sumsq_finish_kernel") != HG_OK) return;
    if (cuda_check(be, cudaMemcpyAsync(s->host_sum, partial + SUMSQ_BLOCKS, sizeof(double), cudaMemcpyDeviceToHost, s->stream),
                   "cudaMemcpyAsync (sumsq)") != HG_OK)
        return;
    if (cuda_check(be, cudaStreamSynchronize(s->stream), "cudaStreamSynchronize (sumsq)") == HG_OK) *out = *s->host_sum;
}

/* ---- fp32 -> compute type ---- */

template <typename T>
__global__ void to_compute_kernel(T *dst, const float *src, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        dst[i] = from_f<T>(src[i]);
}

void cuda_to_compute(hg_backend *be, void *dst, const float *src, size_t n) {
    CUDA_DISPATCH(be, to_compute_kernel<T><<<cuda_grid(be, n), 256, 0, cuda_stream(be)>>>(
                          (T *)dst, src, n));
    cuda_launched(be, "to_compute_kernel");
}
