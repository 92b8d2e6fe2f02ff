/* Column sums of an (M, N) function in fp32, in a fixed order (no atomics): the bias and
 * LayerNorm parameter gradients. Pass 1: split r of R sums rows [r*M/R, (r+1)*M/R) of
 * every column into partial (R, N) float2; pass 2 adds the R partials in order into the
 * outputs. A warp reads 32 consecutive columns of a row. */
#ifndef HG_BACKEND_CUDA_REDUCE_CUH
#define HG_BACKEND_CUDA_REDUCE_CUH

#include "backend/cuda/cuda.h"

enum { COLSUM_MAX_SPLITS = 64 };

/* F: float2 operator()(int row, int col) const, the two values summed per element. */
template <typename F>
__global__ void __launch_bounds__(256) colsum_partial_kernel(float2 *partial, int M, int N, int R, F f) {
    __shared__ float2 acc[8][33];
    int c = blockIdx.x * 32 + threadIdx.x, r = blockIdx.y;
    int m0 = (int)((long)M * r / R), m1 = (int)((long)M * (r + 1) / R);
    float2 s = make_float2(0.0f, 0.0f);
    if (c < N)
        for (int m = m0 + threadIdx.y; m < m1; m += 8) {
            float2 v = f(m, c);
            s.x += v.x;
            s.y += v.y;
        }
    acc[threadIdx.y][threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.y == 0 && c < N) {
        for (int y = 1; y < 8; y++) s.x += acc[y][threadIdx.x].x, s.y += acc[y][threadIdx.x].y;
        partial[(size_t)r * N + c] = s;
    }
}

/* out0[c] += sum of partial[r][c].x over r; out1 likewise with .y. Either may be NULL (not
 * written): a norm may have a weight and no bias, or a bias and no weight. */
__global__ static void colsum_finish_kernel(float *out0, float *out1, const float2 *partial, int N, int R) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= N) return;
    float2 s = make_float2(0.0f, 0.0f);
    for (int r = 0; r < R; r++) s.x += partial[(size_t)r * N + c].x, s.y += partial[(size_t)r * N + c].y;
    if (out0) out0[c] += s.x;
    if (out1) out1[c] += s.y;
}

/* Splits: 8 blocks a multiprocessor (a row's loads are short, so many must be in flight),
 * at most COLSUM_MAX_SPLITS, at most M. */
static inline int colsum_splits(hg_backend *be, int M, int N) {
    int groups = (N + 31) / 32, want = (8 * cuda_of(be)->sm_count + groups - 1) / groups;
    int R = want < COLSUM_MAX_SPLITS ? want : COLSUM_MAX_SPLITS;
    if (R > M) R = M;
    return R < 1 ? 1 : R;
}

/* partial must hold COLSUM_MAX_SPLITS * N float2. */
template <typename F>
static hg_status colsum(hg_backend *be, float *out0, float *out1, float2 *partial, int M, int N, F f, const char *what) {
    if (M <= 0 || N <= 0) return HG_OK;
    int R = colsum_splits(be, M, N);
    colsum_partial_kernel<F><<<dim3((N + 31) / 32, R), dim3(32, 8), 0, cuda_stream(be)>>>(partial, M, N, R, f);
    HG_TRY(cuda_launched(be, what));
    colsum_finish_kernel<<<cuda_blocks(N, 256), 256, 0, cuda_stream(be)>>>(out0, out1, partial, N, R);
    return cuda_launched(be, what);
}

#endif
