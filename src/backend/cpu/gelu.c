/* GELU (tanh approximation) on the CPU, forward and backward, in blocks of CPU_BLOCK
 * elements (read and written in the compute type, computed in fp32: bf16.h). tanhf
 * vectorises through glibc's libmvec under `omp simd` (vecmath.h; checked in
 * tests/check_vectorized.sh). */
#include "backend/cpu/bf16.h"
#include "backend/cpu/cpu.h"
#include "backend/cpu/vecmath.h"

void cpu_gelu_forward(hg_backend *be, float *out, const float *inp, size_t n) {
    long blocks = (long)((n + CPU_BLOCK - 1) / CPU_BLOCK);
    #pragma omp parallel for schedule(static) num_threads(be->threads)
    for (long blk = 0; blk < blocks; blk++) {
        size_t at = (size_t)blk * CPU_BLOCK, m = n - at < CPU_BLOCK ? n - at : CPU_BLOCK;
        float xb[CPU_BLOCK], ob[CPU_BLOCK];
        const float *x = cpu_view(be, inp, at, m, xb);
        float *o = cpu_out(be, out, at, ob);
        #pragma omp simd
        for (size_t i = 0; i < m; i++) o[i] = hg_gelu(x[i]);
        cpu_commit(be, out, at, o, m);
    }
}

void cpu_gelu_backward(hg_backend *be, float *dinp, const float *inp, const float *dout, size_t n) {
    long blocks = (long)((n + CPU_BLOCK - 1) / CPU_BLOCK);
    #pragma omp parallel for schedule(static) num_threads(be->threads)
    for (long blk = 0; blk < blocks; blk++) {
        size_t at = (size_t)blk * CPU_BLOCK, m = n - at < CPU_BLOCK ? n - at : CPU_BLOCK;
        float xb[CPU_BLOCK], gb[CPU_BLOCK], ob[CPU_BLOCK];
        const float *x = cpu_view(be, inp, at, m, xb), *dy = cpu_view(be, dout, at, m, gb);
        float *dx = cpu_out(be, dinp, at, ob);
        #pragma omp simd
        for (size_t i = 0; i < m; i++) dx[i] = hg_gelu_grad(x[i]) * dy[i];
        cpu_commit(be, dinp, at, dx, m);
    }
}
