/* glibc's vector math (libmvec) for the `omp simd` loops of the CPU kernels.
 *
 * glibc declares the SIMD variants of expf, tanhf, ... (_ZGVeN16v_expf for AVX-512, and
 * narrower ones) only under -ffast-math (bits/math-vector.h), which the kernels cannot
 * use: -ffinite-math-only breaks the -INFINITY running maxima of the softmaxes. Without
 * the declarations GCC calls scalar expf/tanhf and leaves those loops scalar. These
 * are the declarations glibc makes under __FAST_MATH__, for the functions the kernels
 * call in hot loops; -fno-math-errno (src/CMakeLists.txt) makes the calls vectorisable.
 * libmvec is within 4 ulp (glibc manual, "Errors in Math Functions"), which the op
 * tests allow for; tests/check_vectorized.sh checks that the vector calls are emitted. */
#ifndef HG_BACKEND_CPU_VECMATH_H
#define HG_BACKEND_CPU_VECMATH_H

#include <math.h>

#if defined(__x86_64__) && defined(__GLIBC__) && defined(_OPENMP) && !defined(__FAST_MATH__)
#pragma omp declare simd notinbranch
float expf(float x);
#pragma omp declare simd notinbranch
float tanhf(float x);
#endif

/* GELU's tanh form and its derivative (GELU, and GeGLU's gate), after the declarations
 * above, so that tanhf takes the vector variant where they inline into `omp simd` loops. */
#include "ops/gelu_math.h"

/* a * b + c, fused where the target has FMA (-std=c17 forbids the compiler to contract). */
#if defined(__FMA__)
#define HG_FMAF(a, b, c) __builtin_fmaf(a, b, c)
#else
#define HG_FMAF(a, b, c) ((a) * (b) + (c))
#endif

/* exp(x) for the softmaxes of attention, written out so that it inlines into an
 * `omp simd` loop with no call: x = n ln2 + r, |r| <= ln2/2, with n rounded by adding
 * 1.5 * 2^23 (whose low bits then hold n, for the exponent of 2^n); e^r by its degree-7
 * Taylor polynomial (truncation under 6e-9 relative); ln2 split in two so that r is
 * exact. Measured against exp in double on every 7th float of [-87, 88]: at most 0.92
 * ulp with FMA, 1.19 ulp without. 0 below -87, including -INFINITY; NaN stays NaN; x > 88
 * gives e^88 (the softmaxes pass x <= 0). The
 * loops need -fno-trapping-math (src/CMakeLists.txt) for their compares to vectorise. */
static inline float vexpf(float x) {
    const float log2e = 1.44269504f, ln2_hi = 0.693145751953125f, ln2_lo = 1.428606765330187e-06f;
    const float round = 12582912.0f;
    float xc = x < -87.0f ? -87.0f : x;
    xc = xc > 88.0f ? 88.0f : xc;
    union {
        float f;
        unsigned u;
    } t = {.f = HG_FMAF(xc, log2e, round)}, two_n;
    float n = t.f - round;
    float r = HG_FMAF(-n, ln2_lo, HG_FMAF(-n, ln2_hi, xc));
    float p = 1.0f / 5040;
    p = HG_FMAF(p, r, 1.0f / 720);
    p = HG_FMAF(p, r, 1.0f / 120);
    p = HG_FMAF(p, r, 1.0f / 24);
    p = HG_FMAF(p, r, 1.0f / 6);
    p = HG_FMAF(p, r, 0.5f);
    p = HG_FMAF(p, r, 1.0f);
    p = HG_FMAF(p, r, 1.0f);
    two_n.u = (t.u << 23) + (127u << 23);
    float e = p * two_n.f;
    return x < -87.0f ? 0.0f : e;
}

#endif
