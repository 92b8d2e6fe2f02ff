/* Vector math for the CPU kernels: glibc's libmvec has AVX-512 and AVX2 versions of
 * expf, logf and tanhf, but <math.h> declares them only under -ffast-math, whose other
 * effects (no infinities, reassociation) the kernels cannot accept. Declaring them with
 * the OpenMP SIMD ABI lets `omp simd` loops call them (_ZGVeN16v_expf, ...). */
#ifndef HG_BACKEND_CPU_VMATH_H
#define HG_BACKEND_CPU_VMATH_H

#include <math.h>

#pragma omp declare simd notinbranch
float expf(float);
#pragma omp declare simd notinbranch
float tanhf(float);

/* max without fmaxf's NaN rules, so it compiles to one vmaxps */
static inline float vmax(float a, float b) { return a > b ? a : b; }

#endif
