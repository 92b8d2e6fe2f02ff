/* GELU's tanh form and its derivative, one formula for the CPU's kernels (through
 * backend/cpu/vecmath.h, which declares tanhf's vector variant first so that the `omp
 * simd` loops these inline into take it) and the CUDA ones (GELU, and GeGLU's gate). */
#ifndef HG_OPS_GELU_MATH_H
#define HG_OPS_GELU_MATH_H

#include <math.h>

#include "core/rng.h" /* HG_HOST_DEVICE */

#define HG_GELU_K 0.7978845608028654f /* sqrt(2/pi) */
#define HG_GELU_A 0.044715f
HG_HOST_DEVICE static inline float hg_gelu(float x) {
    return 0.5f * x * (1.0f + tanhf(HG_GELU_K * (x + HG_GELU_A * x * x * x)));
}
HG_HOST_DEVICE static inline float hg_gelu_grad(float x) {
    float th = tanhf(HG_GELU_K * (x + HG_GELU_A * x * x * x));
    return 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * HG_GELU_K * (1.0f + 3.0f * HG_GELU_A * x * x);
}

#endif
