/* GELU (tanh approximation) on the CPU, forward and backward. tanhf vectorises through
 * glibc's libmvec under `omp simd` (vecmath.h; checked in tests/check_vectorized.sh). */
#include "backend/cpu/cpu.h"
#include "backend/cpu/vecmath.h"

#define GELU_K 0.7978845608028654f /* sqrt(2/pi) */
#define GELU_A 0.044715f

void cpu_gelu_forward(hg_backend *be, float *out, const float *inp, size_t n) {
    #pragma omp parallel for simd schedule(static) num_threads(be->threads)
    for (size_t i = 0; i < n; i++) {
        float x = inp[i];
        out[i] = 0.5f * x * (1.0f + tanhf(GELU_K * (x + GELU_A * x * x * x)));
    }
}

void cpu_gelu_backward(hg_backend *be, float *dinp, const float *inp, const float *dout, size_t n) {
    #pragma omp parallel for simd schedule(static) num_threads(be->threads)
    for (size_t i = 0; i < n; i++) {
        float x = inp[i];
        float th = tanhf(GELU_K * (x + GELU_A * x * x * x));
        float sech2 = 1.0f - th * th;
        float grad = 0.5f * (1.0f + th) + 0.5f * x * sech2 * GELU_K * (1.0f + 3.0f * GELU_A * x * x);
        dinp[i] = grad * dout[i];
    }
}
