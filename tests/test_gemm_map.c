/* The cuBLASLt call of each row-major GEMM (src/backend/cuda/gemm_map.h), checked on the
 * host, so CI catches a wrong mapping without a GPU: the mapped call is run by a
 * column-major GEMM with BLAS semantics (operands swapped as the map says) and compared
 * with a row-major reference, for every transpose pair, odd shapes and padded strides.
 * Also: each stored layout is what op() needs (op(A) m x k, op(B) k x n) and each leading
 * dimension covers its rows. And the bias-gradient epilogue the map names
 * (gemm_lt_bgrad_is_a): cuBLASLt's BGRADA/BGRADB, run as documented (its op(A) or op(B)
 * summed over k) on the mapped call, gives op(B)'s column sums or op(A)'s row sums.
 * Integer values keep every sum exact. */
#include <stdint.h>
#include <stdlib.h>

#include "backend/cuda/gemm_map.h"
#include "check.h"

/* Column-major C (m, n) = op(A) op(B); A stored (a_rows, a_cols) with leading dimension
 * lda, element (r, c) at A[r + c*lda]; likewise B and C. */
static void gemm_colmajor(int m, int n, int k, int opa, int opb, const float *A, int lda, const float *B, int ldb, float *C,
                          int ldc) {
    for (int j = 0; j < n; j++)
        for (int i = 0; i < m; i++) {
            float s = 0.0f;
            for (int p = 0; p < k; p++) {
                float a = opa ? A[p + (size_t)i * lda] : A[i + (size_t)p * lda];
                float b = opb ? B[j + (size_t)p * ldb] : B[p + (size_t)j * ldb];
                s += a * b;
            }
            C[i + (size_t)j * ldc] = s;
        }
}

/* cuBLASLt's bias-gradient epilogues on a column-major call: BGRADA (is_a) sums op(A)
 * (m, k) over k into out[0..m), BGRADB sums op(B) (k, n) over k into out[0..n). Returns
 * the vector's length. */
static int bgrad_colmajor(int is_a, int m, int n, int k, int opa, int opb, const float *A, int lda, const float *B, int ldb,
                          float *out) {
    int len = is_a ? m : n;
    for (int i = 0; i < len; i++) {
        float s = 0.0f;
        for (int p = 0; p < k; p++)
            s += is_a ? (opa ? A[p + (size_t)i * lda] : A[i + (size_t)p * lda])
                      : (opb ? B[i + (size_t)p * ldb] : B[p + (size_t)i * ldb]);
        out[i] = s;
    }
    return len;
}

static float val(uint32_t *x) {
    *x = *x * 1103515245u + 12345u;
    int v = (int)(*x >> 16) % 9 - 4;
    return (float)(v ? v : 5);
}

/* Row-major D (M, N) = op(A) op(B) with row strides lda, ldb, ldd, through the map. */
static int check_shape(int M, int N, int K, int ta, int tb, int pad) {
    const int lda = (ta ? M : K) + pad, ldb = (tb ? K : N) + pad, ldd = N + pad;
    const int arows = ta ? K : M, brows = tb ? N : K; /* rows as stored, row-major */
    float *A = malloc(sizeof(float) * (size_t)arows * lda), *B = malloc(sizeof(float) * (size_t)brows * ldb);
    float *D = malloc(sizeof(float) * (size_t)M * ldd);
    uint32_t s = (uint32_t)(M * 131 + N * 17 + K * 7 + ta * 2 + tb);
    for (int i = 0; i < arows * lda; i++) A[i] = val(&s);
    for (int i = 0; i < brows * ldb; i++) B[i] = val(&s);
    for (int i = 0; i < M * ldd; i++) D[i] = -1e30f; /* poison */
    gemm_lt_map g = gemm_lt_map_of(M, N, K, ta, tb, lda, ldb, ldd);
    /* the layouts fit the product: op(its A) (m, k), op(its B) (k, n), C (m, n) */
    int m = g.c_rows, n = g.c_cols, k = g.op_a ? g.a_rows : g.a_cols;
    int fits = (g.op_a ? g.a_cols : g.a_rows) == m && (g.op_b ? g.b_cols : g.b_rows) == k &&
               (g.op_b ? g.b_rows : g.b_cols) == n && g.a_ld >= g.a_rows && g.b_ld >= g.b_rows && g.c_ld >= g.c_rows;
    CHECK(fits);
    int bad = 0;
    if (fits) {
        gemm_colmajor(m, n, k, g.op_a, g.op_b, B, g.a_ld, A, g.b_ld, D, g.c_ld); /* its A is our B */
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++) {
                float want = 0.0f;
                for (int p = 0; p < K; p++) {
                    float a = ta ? A[(size_t)p * lda + i] : A[(size_t)i * lda + p];
                    float b = tb ? B[(size_t)j * ldb + p] : B[(size_t)p * ldb + j];
                    want += a * b;
                }
                bad += D[(size_t)i * ldd + j] != want;
            }
    }
    /* the bias gradients: op(B)'s column sums (N) and op(A)'s row sums (M) */
    for (int of = GEMM_BGRAD_OF_A; fits && of <= GEMM_BGRAD_OF_B; of++) {
        float got[64], want[64];
        for (int i = 0; i < 64; i++) got[i] = -1e30f;
        int len = bgrad_colmajor(gemm_lt_bgrad_is_a((gemm_bgrad_of)of), m, n, k, g.op_a, g.op_b, B, g.a_ld, A, g.b_ld, got);
        int wlen = of == GEMM_BGRAD_OF_B ? N : M;
        for (int i = 0; i < wlen; i++) {
            want[i] = 0.0f;
            for (int p = 0; p < K; p++)
                want[i] += of == GEMM_BGRAD_OF_B ? (tb ? B[(size_t)i * ldb + p] : B[(size_t)p * ldb + i])
                                                 : (ta ? A[(size_t)p * lda + i] : A[(size_t)i * lda + p]);
        }
        int wrong = len != wlen;
        for (int i = 0; !wrong && i < wlen; i++) wrong += got[i] != want[i];
        CHECK(!wrong);
        if (wrong) fprintf(stderr, "  M %d N %d K %d trans %d%d: the bias gradient of %s is wrong\n", M, N, K, ta, tb,
                           of == GEMM_BGRAD_OF_B ? "B" : "A");
        bad += wrong;
    }
    CHECK(bad == 0);
    if (bad || !fits) fprintf(stderr, "  M %d N %d K %d trans %d%d pad %d: %d wrong\n", M, N, K, ta, tb, pad, bad);
    free(A), free(B), free(D);
    return bad || !fits;
}

int main(void) {
    static const int shapes[][3] = {{7, 5, 3}, {1, 9, 4}, {12, 1, 6}, {5, 11, 1}, {16, 24, 8}};
    int failed = 0, n = 0;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++)
                for (int pad = 0; pad < 3; pad += 2, n++) failed += check_shape(shapes[s][0], shapes[s][1], shapes[s][2], ta, tb, pad);
    printf("%d of %d GEMM shapes mapped correctly to cuBLASLt's column-major call, bias-gradient epilogues included\n",
           n - failed, n);
    CHECK_DONE();
}
