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

#endif
