/* Linear layers on the CPU: forward and backward GEMMs through oneDNN, plus the bias
 * gradient. Weights are (K, N), input-major, as Hugging Face's Conv1D stores them. In
 * bf16, inp, w, bias, out, dout and dinp hold bf16 and the products accumulate in fp32;
 * dw and dbias are fp32 gradients (gemm.c). */
#include "backend/cpu/bf16.h"
#include "backend/cpu/cpu.h"

hg_status cpu_matmul_forward(hg_backend *be, float *out, const float *inp, const float *w,
                             const float *bias, int M, int K, int N) {
    int h = cpu_bf16(be);
    cpu_gemm_desc d = {.M = M, .N = N, .K = K, .lda = K, .ldb = N, .ldc = N, .bias = bias != NULL, .bf16_in = h, .bf16_out = h};
    return cpu_gemm(be, &d, inp, w, bias, out);
}

/* dbias (N) += column sums of dout (M,N). Each thread owns a range of columns and walks
 * the rows in order, so the sum order is fixed. */
static void bias_backward(hg_backend *be, float *dbias, const float *dout, int M, int N) {
    #pragma omp parallel num_threads(be->threads)
    {
        int nt = omp_get_num_threads(), t = omp_get_thread_num();
        int per = ((N + 15) / 16 + nt - 1) / nt * 16;
        int c0 = t * per, c1 = c0 + per < N ? c0 + per : N;
        for (int c = c0; c < c1; c += 256) {
            float acc[256] = {0}, buf[256];
            int w = c1 - c < 256 ? c1 - c : 256;
            for (int r = 0; r < M; r++) {
                const float *row = cpu_view(be, dout, (size_t)r * N + c, (size_t)w, buf);
                #pragma omp simd
                for (int j = 0; j < w; j++) acc[j] += row[j];
            }
            for (int j = 0; j < w; j++) dbias[c + j] += acc[j];
        }
    }
}

hg_status cpu_matmul_backward(hg_backend *be, float *dinp, float *dw, float *dbias,
                              const float *dout, const float *inp, const float *w, int M, int K, int N) {
    int h = cpu_bf16(be);
    /* dinp (M,K) = dout (M,N) @ w^T, w read as stored (K,N) */
    cpu_gemm_desc dx = {.M = M, .N = K, .K = N, .trans_b = 1, .lda = N, .ldb = N, .ldc = K, .bf16_in = h, .bf16_out = h};
    HG_TRY(cpu_gemm(be, &dx, dout, w, NULL, dinp));
    /* dw (K,N) += inp^T @ dout, inp read as stored (M,K); fp32; none for a frozen w */
    cpu_gemm_desc dwd = {.M = K, .N = N, .K = M, .trans_a = 1, .lda = K, .ldb = N, .ldc = N, .accumulate = 1, .bf16_in = h};
    if (dw) HG_TRY(cpu_gemm(be, &dwd, inp, dout, NULL, dw));
    if (dbias) bias_backward(be, dbias, dout, M, N);
    return HG_OK;
}
