/* A GELU backward rule of one's own (shared/seeds/000), shared by the program
 * gelu_override.c and the command plugin gelu_rule_ops.c. Since 1 + tanh(u) =
 * 2 sigmoid(2u), with s = sigmoid(2u), u = k (x + a x^3),
 *     gelu(x)  = x s
 *     gelu'(x) = s + 2 x s (1 - s) k (1 + 3 a x^2)
 * one expf per element where the built-in takes a tanhf. */
#ifndef GELU_RULE_H
#define GELU_RULE_H

#include <math.h>
#include <stddef.h>

#include "handgrad_ext.h"

#if defined(__x86_64__) && defined(__GLIBC__) && defined(_OPENMP) && !defined(__FAST_MATH__)
#pragma omp declare simd notinbranch
float expf(float x);
#endif

#define K 0.7978845608028654f /* sqrt(2/pi) */
#define A 0.044715f

/* dinp (n) = gelu'(inp) * dout, the contract of hg_gelu_backward_fn (handgrad_ext.h). */
static inline void gelu_rule_backward(hg_backend *be, float *dinp, const float *inp, const float *dout, size_t n) {
    const int threads = hg_backend_threads(be) > 0 ? hg_backend_threads(be) : 1;
    #pragma omp parallel for simd schedule(static) num_threads(threads)
    for (size_t i = 0; i < n; i++) {
        const float x = inp[i], u = K * (x + A * x * x * x);
        const float s = 1.0f / (1.0f + expf(-2.0f * u));
        dinp[i] = (s + 2.0f * x * s * (1.0f - s) * K * (1.0f + 3.0f * A * x * x)) * dout[i];
    }
}

#endif
