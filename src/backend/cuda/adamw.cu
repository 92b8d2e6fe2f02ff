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
 * and the draws do not depend on how the buffer is cut into ranges. Moments held in bf16
 * (S) are read widened and written back stochastically, with the streams ROUNDING | 1 << 8
 * (m) and ROUNDING | 2 << 8 (v): the CPU's draws (ops/adamw.h).
 *
 * sumsq sums in double over a fixed grid and adds the block partials in a fixed order:
 * the same bits for the same input. */
#include <stdlib.h>
#include <string.h>

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

/* 8 floats at p (16-byte aligned). */
__device__ __forceinline__ void load8(float (&f)[ADAM_GROUP], const float *p) {
    float4 a = reinterpret_cast<const float4 *>(p)[0], b = reinterpret_cast<const float4 *>(p)[1];
    f[0] = a.x, f[1] = a.y, f[2] = a.z, f[3] = a.w, f[4] = b.x, f[5] = b.y, f[6] = b.z, f[7] = b.w;
}
__device__ __forceinline__ void store8(float *p, const float (&f)[ADAM_GROUP]) {
    reinterpret_cast<float4 *>(p)[0] = make_float4(f[0], f[1], f[2], f[3]);
    reinterpret_cast<float4 *>(p)[1] = make_float4(f[4], f[5], f[6], f[7]);
}
/* 8 bf16 at p (16-byte aligned), widened. */
__device__ __forceinline__ void load8(float (&f)[ADAM_GROUP], const bf16 *p) {
    uint4 u = *reinterpret_cast<const uint4 *>(p);
    const bf16 *b = reinterpret_cast<const bf16 *>(&u);
#pragma unroll
    for (int j = 0; j < ADAM_GROUP; j++) f[j] = __bfloat162float(b[j]);
}
__device__ __forceinline__ float widen(float x) { return x; }
__device__ __forceinline__ float widen(bf16 x) { return __bfloat162float(x); }
/* One moment: kept as is in fp32, rounded stochastically with 16 random bits r16 in bf16. */
__device__ __forceinline__ void put(float *p, float x, uint32_t) { *p = x; }
__device__ __forceinline__ void put(bf16 *p, float x, uint32_t r16) { *p = round_bf16(x, r16, 1); }
__device__ __forceinline__ uint32_t group_bits(const hg_u32x4 &r, int j) { return r.v[j / 2] >> (16 * (j % 2)); }

/* The group's compute copy: 8 values, 16- or 32-byte aligned when `whole`, else the
 * first cnt. r: 16 random bits a value (stochastic rounding). */
__device__ __forceinline__ void store_w(float *w, const float (&x)[ADAM_GROUP], int cnt, int whole, const hg_u32x4 &, int) {
    if (whole) return store8(w, x);
    for (int j = 0; j < cnt; j++) w[j] = x[j];
}
__device__ __forceinline__ void store_w(bf16 *w, const float (&x)[ADAM_GROUP], int cnt, int whole, const hg_u32x4 &r,
                                        int stochastic) {
    bf16 b[ADAM_GROUP];
#pragma unroll
    for (int j = 0; j < ADAM_GROUP; j++) b[j] = round_bf16(x[j], group_bits(r, j), stochastic);
    if (whole) {
        *reinterpret_cast<uint4 *>(w) = *reinterpret_cast<const uint4 *>(b);
        return;
    }
    for (int j = 0; j < cnt; j++) w[j] = b[j];
}

/* W: the copy's type; float with w == NULL when p itself is the compute copy. S: the
 * moments' type. g, m, v hold the range only (element i at i - lo). vec: every buffer and
 * tensor start allows 16-byte access of whole groups (checked on the host); a group
 * wholly inside the range and its tensor then moves with 16-byte loads and stores,
 * others element by element. */
template <typename W, typename S>
__global__ void adamw_kernel(float *p, const float *g, S *m, S *v, W *w, const adam_seg *segs, int nsegs,
                             unsigned long long lo, unsigned long long hi, hg_adamw_update u, int stochastic,
                             unsigned long long seed, uint32_t step, int vec) {
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
    const int whole = vec && cnt == ADAM_GROUP && i0 >= lo && i0 + ADAM_GROUP <= hi;
    hg_u32x4 r = {{0, 0, 0, 0}}, rm = r, rv = r;
    if (stochastic) r = hg_philox(seed, (uint32_t)gi, (uint32_t)(gi >> 32), HG_RNG_ROUNDING, step);
    if (sizeof(S) == 2) {
        rm = hg_philox(seed, (uint32_t)gi, (uint32_t)(gi >> 32), HG_RNG_ROUNDING | 1u << 8, step);
        rv = hg_philox(seed, (uint32_t)gi, (uint32_t)(gi >> 32), HG_RNG_ROUNDING | 2u << 8, step);
    }
    const float decay = 1.0f - u.lr * u.weight_decay * s.decay;
    const float stepsize = u.lr / u.bias_correction1, inv_sqrt_bc2 = 1.0f / sqrtf(u.bias_correction2);
    float pf[ADAM_GROUP], gf[ADAM_GROUP], mf[ADAM_GROUP], vf[ADAM_GROUP];
    if (whole) {
        load8(pf, p + i0), load8(gf, g + (i0 - lo)), load8(mf, m + (i0 - lo)), load8(vf, v + (i0 - lo));
    } else {
        for (int j = 0; j < ADAM_GROUP; j++) {
            unsigned long long i = i0 + j;
            int in = j < cnt && i >= lo && i < hi;
            pf[j] = in ? p[i] : 0.0f, gf[j] = in ? g[i - lo] : 0.0f;
            mf[j] = in ? widen(m[i - lo]) : 0.0f, vf[j] = in ? widen(v[i - lo]) : 0.0f;
        }
    }
#pragma unroll
    for (int j = 0; j < ADAM_GROUP; j++) {
        float gj = gf[j] * u.grad_scale;
        mf[j] = u.beta1 * mf[j] + (1.0f - u.beta1) * gj;
        vf[j] = u.beta2 * vf[j] + (1.0f - u.beta2) * gj * gj;
        pf[j] = pf[j] * decay - stepsize * mf[j] / (sqrtf(vf[j]) * inv_sqrt_bc2 + u.eps);
    }
    if (whole) {
        store8(p + i0, pf);
        store_w(m + (i0 - lo), mf, ADAM_GROUP, 1, rm, 1);
        store_w(v + (i0 - lo), vf, ADAM_GROUP, 1, rv, 1);
    } else {
        for (int j = 0; j < cnt; j++) {
            unsigned long long i = i0 + j;
            if (i < lo || i >= hi) continue;
            p[i] = pf[j];
            put(m + (i - lo), mf[j], group_bits(rm, j));
            put(v + (i - lo), vf[j], group_bits(rv, j));
        }
    }
    if (!w) return;
    W *wt = w + s.w0 + (i0 - s.p0);
    if (whole || (i0 >= lo && i0 + cnt <= hi)) {
        store_w(wt, pf, cnt, whole, r, stochastic);
        return;
    }
    for (int j = 0; j < cnt; j++) /* a group cut by the range: its own elements only */
        if (i0 + j >= lo && i0 + j < hi) {
            float one[ADAM_GROUP] = {pf[j]};
            hg_u32x4 rj = {{r.v[j / 2] >> (16 * (j % 2)), 0, 0, 0}};
            store_w(wt + j, one, 1, 0, rj, stochastic);
        }
}

/* The tensor list for (params, weights), uploaded when it differs from the one on the
 * device (compared by content: a table rebuilt at the same address is a new list). */
static hg_status upload_segments(hg_backend *be, const hg_table *params, const hg_table *weights) {
    cuda_state *s = cuda_of(be);
    size_t bytes = sizeof(adam_seg) * (size_t)params->count;
    adam_seg *h = (adam_seg *)calloc((size_t)params->count, sizeof *h);
    if (!h) return cuda_fail(be, HG_ERR_NOMEM, "out of memory for AdamW's tensor list");
    int aligned = 1; /* every tensor starts a group that 16-byte access can move */
    for (int i = 0; i < params->count; i++) {
        const hg_tensor_spec *p = &params->specs[i], *w = &weights->specs[i];
        h[i] = (adam_seg){p->offset / 4, w->offset / w->elem_size, (unsigned long long)p->alloc,
                          (p->flags & HG_SPEC_DECAY) ? 1.0f : 0.0f};
        aligned &= h[i].p0 % ADAM_GROUP == 0 && h[i].w0 % (16 / w->elem_size) == 0;
    }
    if (s->adam_segs && s->adam_count == params->count && !memcmp(s->adam_host, h, bytes)) {
        free(h);
        return HG_OK;
    }
    cuda_adamw_free(be);
    hg_status st = cuda_check(be, cudaMalloc(&s->adam_segs, bytes), "cudaMalloc (AdamW tensor list)");
    /* on the backend's stream (a non-blocking one: the legacy stream would not order it) */
    if (st == HG_OK)
        st = cuda_check(be, cudaMemcpyAsync(s->adam_segs, h, bytes, cudaMemcpyHostToDevice, s->stream), "cudaMemcpyAsync (AdamW tensor list)");
    if (st == HG_OK) st = cuda_check(be, cudaStreamSynchronize(s->stream), "cudaStreamSynchronize");
    if (st != HG_OK) {
        free(h);
        return st;
    }
    s->adam_host = h;
    s->adam_count = params->count;
    s->adam_aligned = aligned;
    return HG_OK;
}

void cuda_adamw_free(hg_backend *be) {
    cuda_state *s = cuda_of(be);
    if (s->adam_segs) cudaFree(s->adam_segs);
    free(s->adam_host);
    s->adam_segs = NULL;
    s->adam_host = NULL;
    s->adam_count = 0;
}

template <typename W>
static void launch_adamw(cuda_state *s, unsigned blocks, const hg_adamw_args *a, W *w, int bf16_state,
                         const adam_seg *segs, unsigned long long lo, unsigned long long hi, int stochastic, int vec) {
    if (bf16_state)
        adamw_kernel<W, bf16><<<blocks, 256, 0, s->stream>>>(a->p, (const float *)a->g, (bf16 *)a->m, (bf16 *)a->v, w, segs,
                                                             a->params->count, lo, hi, a->u, stochastic, a->seed, a->step,
                                                             vec);
    else
        adamw_kernel<W, float><<<blocks, 256, 0, s->stream>>>(a->p, (const float *)a->g, (float *)a->m, (float *)a->v, w, segs,
                                                              a->params->count, lo, hi, a->u, stochastic, a->seed, a->step, vec);
}

extern "C" void cuda_adamw(hg_backend *be, const hg_adamw_args *a) {
    CUDA_OP("adamw");
    if (a->grad != HG_PRECISION_FP32) { /* refused at creation (cuda_supports) */
        cuda_fail(be, HG_ERR_UNSUPPORTED, "grad_precision: bf16 gradients have no CUDA AdamW kernel");
        return;
    }
    if (a->params->count == 0 || a->n == 0 || upload_segments(be, a->params, a->weights) != HG_OK) return;
    cuda_state *s = cuda_of(be);
    unsigned long long lo = a->lo, hi = a->lo + a->n;
    unsigned long long groups = (hi + ADAM_GROUP - 1) / ADAM_GROUP - lo / ADAM_GROUP;
    unsigned blocks = (unsigned)((groups + 255) / 256);
    const adam_seg *segs = (const adam_seg *)s->adam_segs;
    const int bf16_state = a->state == HG_PRECISION_BF16;
    int vec = s->adam_aligned && lo % (bf16_state ? 8 : 4) == 0;
    for (const void *ptr : {(const void *)a->p, a->g, (const void *)a->m, (const void *)a->v, (const void *)a->w})
        vec &= (uintptr_t)ptr % 16 == 0;
    const int bf16_w = a->w && be->precision == HG_PRECISION_BF16;
    if (bf16_w) launch_adamw<bf16>(s, blocks, a, (bf16 *)a->w, bf16_state, segs, lo, hi, a->stochastic, vec);
    else launch_adamw<float>(s, blocks, a, (float *)a->w, bf16_state, segs, lo, hi, 0, vec);
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

template <typename T>
__global__ void sumsq_partial_kernel(double *partial, const T *x, size_t n) {
    double acc = 0.0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        acc += (double)widen(x[i]) * widen(x[i]);
    acc = block_sum(acc);
    if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

__global__ void sumsq_finish_kernel(double *out, const double *partial) {
    double v = block_sum(partial[threadIdx.x]);
    if (threadIdx.x == 0) *out = v;
}

extern "C" void cuda_sumsq(hg_backend *be, const void *x, hg_precision type, size_t n, double *out) {
    CUDA_OP("sumsq");
    cuda_state *s = cuda_of(be);
    *out = 0.0;
    double *partial = (double *)cuda_work(be, sizeof(double) * (SUMSQ_BLOCKS + 1));
    if (!partial) return;
    if (type == HG_PRECISION_BF16)
        sumsq_partial_kernel<bf16><<<SUMSQ_BLOCKS, SUMSQ_THREADS, 0, s->stream>>>(partial, (const bf16 *)x, n);
    else
        sumsq_partial_kernel<float><<<SUMSQ_BLOCKS, SUMSQ_THREADS, 0, s->stream>>>(partial, (const float *)x, n);
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
