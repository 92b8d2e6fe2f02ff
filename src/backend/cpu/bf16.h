/* The CPU backend's two compute types, fp32 and bf16, behind one set of kernels.
 *
 * Under HG_PRECISION_BF16 the pointers the ops receive as float * for weights and
 * activations hold bf16 elements (backend.h); statistics, losses and parameter gradients
 * stay fp32. A kernel that is not a matrix product (norms, activations, rotary,
 * embeddings, the softmaxes) reads a row or a block of such a tensor as fp32, computes in
 * fp32 and writes it back in the compute type:
 *
 *     float xb[n], ob[n];                       (buffers used in bf16 only)
 *     const float *x = cpu_view(be, in, at, n, xb);   in fp32: in + at itself
 *     float *o = cpu_out(be, out, at, ob);            in fp32: out + at itself
 *     ... o[i] = f(x[i]) in fp32 ...
 *     cpu_commit(be, out, at, o, n);                  in fp32: nothing to do
 *
 * so the fp32 path copies nothing and both paths run the same arithmetic: a bf16 op's
 * result is the fp32 op's on the bf16 inputs, rounded once to bf16 at the end.
 * Rounding is to nearest even; a NaN stays a (quiet) NaN (core/bf16.h). */
#ifndef HG_BACKEND_CPU_BF16_H
#define HG_BACKEND_CPU_BF16_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "backend/backend.h"
#include "core/bf16.h"

/* Longest row the bf16 kernels convert on a thread's stack (d_model, an MLP width is cut
 * into blocks); backend refuses larger d_model in bf16 (cpu.c). */
#define CPU_BF16_ROW_MAX 16384
/* Elements per block of an elementwise kernel (a multiple of 16). */
#define CPU_BLOCK 2048

static inline int cpu_bf16(const hg_backend *be) { return be->precision == HG_PRECISION_BF16; }

/* n elements from element `at` of p (bf16 when bf16, else fp32) into dst (fp32). */
static inline void elem_load(int bf16, float *restrict dst, const void *p, size_t at, size_t n) {
    if (!bf16) {
        memcpy(dst, (const float *)p + at, n * sizeof(float));
        return;
    }
    const uint16_t *restrict s = (const uint16_t *)p + at;
    #pragma omp simd
    for (size_t i = 0; i < n; i++) dst[i] = bf16_to_f32(s[i]);
}

/* n fp32 values into elements [at, at+n) of p (bf16 when bf16, else fp32). */
static inline void elem_store(int bf16, void *p, size_t at, const float *restrict src, size_t n) {
    if (!bf16) {
        memcpy((float *)p + at, src, n * sizeof(float));
        return;
    }
    uint16_t *restrict d = (uint16_t *)p + at;
    #pragma omp simd
    for (size_t i = 0; i < n; i++) d[i] = f32_to_bf16(src[i]);
}

/* Elements [at, at+n) of p += src (n fp32 values), summed in fp32. */
static inline void elem_accum(int bf16, void *p, size_t at, const float *restrict src, size_t n) {
    if (!bf16) {
        float *restrict d = (float *)p + at;
        #pragma omp simd
        for (size_t i = 0; i < n; i++) d[i] += src[i];
        return;
    }
    uint16_t *restrict d = (uint16_t *)p + at;
    #pragma omp simd
    for (size_t i = 0; i < n; i++) d[i] = f32_to_bf16(bf16_to_f32(d[i]) + src[i]);
}

/* The same on a buffer of the backend's compute type. */
static inline void cpu_load(const hg_backend *be, float *dst, const void *p, size_t at, size_t n) {
    elem_load(cpu_bf16(be), dst, p, at, n);
}
static inline void cpu_store(const hg_backend *be, void *p, size_t at, const float *src, size_t n) {
    elem_store(cpu_bf16(be), p, at, src, n);
}
static inline void cpu_accum(const hg_backend *be, void *p, size_t at, const float *src, size_t n) {
    elem_accum(cpu_bf16(be), p, at, src, n);
}

/* Elements [at, at+n) of p as fp32: p + at itself in fp32, else converted into buf.
 * NULL stays NULL (an absent weight). */
static inline const float *cpu_view(const hg_backend *be, const void *p, size_t at, size_t n, float *buf) {
    if (!p) return NULL;
    if (!cpu_bf16(be)) return (const float *)p + at;
    cpu_load(be, buf, p, at, n);
    return buf;
}

/* Where a kernel writes elements from `at` of p: p + at in fp32, else buf (cpu_commit
 * then stores it). */
static inline float *cpu_out(const hg_backend *be, void *p, size_t at, float *buf) {
    return cpu_bf16(be) ? buf : (float *)p + at;
}
static inline void cpu_commit(const hg_backend *be, void *p, size_t at, const float *o, size_t n) {
    if (cpu_bf16(be)) cpu_store(be, p, at, o, n);
}

/* Elements [at, at+n) of p for reading and writing in place: p + at in fp32, else
 * loaded into buf (cpu_commit writes it back). */
static inline float *cpu_inout(const hg_backend *be, void *p, size_t at, size_t n, float *buf) {
    if (!cpu_bf16(be)) return (float *)p + at;
    cpu_load(be, buf, p, at, n);
    return buf;
}

/* Element `at` of a buffer of the compute type, as a pointer (for offsets). */
static inline void *cpu_elems(const hg_backend *be, const void *p, size_t at) {
    return (char *)p + at * hg_precision_bytes(be->precision);
}

/* The buffers a kernel converts into: n floats in bf16, one in fp32 (never used). */
#define CPU_ROWBUF(be, n) (cpu_bf16(be) ? (size_t)(n) : (size_t)1)

#endif
