/* Op tests, part 3: matmul_forward and matmul_backward (oneDNN GEMMs and the bias
 * gradient), including an output wide enough for the GEMM's column-block split.
 *
 * Each product's tolerance is against the magnitude it is computed from,
 * mag = sum |a_i b_i| (ref_matmul_forward's `mag`, and the same products of absolute
 * values for the backward): a K-term fp32 dot product, summed in any order, is within
 * gamma_K = K u / (1 - K u) of mag (Higham, Accuracy and Stability, 3.1). Any real bug
 * (a lost term, a wrong block offset, a missing bias) moves an element by a sizeable
 * fraction of mag, far outside K u. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu.h"
#include "check.h"
#include "ops_reference.h"
#include "ops_util.h"
#include "test_ops.h"

typedef struct mm_ctx {
    double *inp, *w, *bias;
    const double *R;
    int M, K, N;
} mm_ctx;

/* out[m, n] of the reference forward: bias[n] + sum_k inp[m, k] w[k, n]. */
static double mm_out(const mm_ctx *c, int m, int n) {
    double acc = c->bias ? c->bias[n] : 0.0;
    for (int k = 0; k < c->K; k++) acc += c->inp[(size_t)m * c->K + k] * c->w[(size_t)k * c->N + n];
    return acc;
}
/* L = sum(out * R) over what element i moves: row m for inp[m, k]; column n for w[k, n]
 * and bias[n]. */
static double mm_loss_inp(void *v, size_t i) {
    mm_ctx *c = v;
    int m = (int)(i / c->K);
    double L = 0.0;
    for (int n = 0; n < c->N; n++) L += mm_out(c, m, n) * c->R[(size_t)m * c->N + n];
    return L;
}
static double mm_loss_col(mm_ctx *c, int n) {
    double L = 0.0;
    for (int m = 0; m < c->M; m++) L += mm_out(c, m, n) * c->R[(size_t)m * c->N + n];
    return L;
}
static double mm_loss_w(void *v, size_t i) { return mm_loss_col(v, (int)(i % ((mm_ctx *)v)->N)); }
static double mm_loss_bias(void *v, size_t i) { return mm_loss_col(v, (int)i); }

static double *dabs(const double *x, size_t n) {
    double *y = dvec(n);
    for (size_t i = 0; i < n; i++) y[i] = fabs(x[i]);
    return y;
}

static void test_matmul(hg_backend *bes[OPS_NBE], int M, int K, int N, int with_bias) {
    const size_t MK = (size_t)M * K, KN = (size_t)K * N, MN = (size_t)M * N;
    trng r = trng_seed(700 + (uint64_t)N);
    float *inp = fvec(MK), *w = fvec(KN), *bias = with_bias ? fvec(N) : NULL, *R = fvec(MN);
    float *pre_dw = fvec(KN), *pre_db = fvec(N);
    fill(inp, MK, &r, -1, 1), fill(w, KN, &r, -0.3, 0.3), fill(R, MN, &r, -1, 1);
    if (bias) fill(bias, N, &r, -0.5, 0.5);
    fill(pre_dw, KN, &r, -1, 1), fill(pre_db, N, &r, -1, 1);
    double *inpd = dvec(MK), *wd = dvec(KN), *biasd = with_bias ? dvec(N) : NULL, *Rd = dvec(MN);
    widen(inpd, inp, MK), widen(wd, w, KN), widen(Rd, R, MN);
    if (bias) widen(biasd, bias, N);

    double *out_ref = dvec(MN), *mag = dvec(MN);
    ref_matmul_forward(out_ref, mag, inpd, wd, biasd, M, K, N);
    double *gin = dvec(MK), *gw = dvec(KN), *gb = dvec(N);
    ref_matmul_backward(gin, gw, gb, Rd, inpd, wd, M, K, N);
    /* the backward's magnitudes: the same products of absolute values */
    double *ainp = dabs(inpd, MK), *aw = dabs(wd, KN), *aR = dabs(Rd, MN);
    double *min = dvec(MK), *mw = dvec(KN), *mb = dvec(N);
    ref_matmul_backward(min, mw, mb, aR, ainp, aw, M, K, N);

    size_t ki, kw, kb;
    size_t *ii = sample_indices(MK, 200, 1, &ki), *iw = sample_indices(KN, 200, 2, &kw), *ib = sample_indices(N, 200, 3, &kb);
    double *fin = dvec(ki), *fw = dvec(kw), *fb = dvec(kb);
    mm_ctx ctx = {inpd, wd, biasd, Rd, M, K, N};
    for (size_t j = 0; j < ki; j++) fin[j] = fd_central(inpd, ii[j], FD_H, mm_loss_inp, &ctx);
    for (size_t j = 0; j < kw; j++) fw[j] = fd_central(wd, iw[j], FD_H, mm_loss_w, &ctx);
    if (bias)
        for (size_t j = 0; j < kb; j++) fb[j] = fd_central(biasd, ib[j], FD_H, mm_loss_bias, &ctx);
    char tag[96], name[160];
    snprintf(tag, sizeof tag, "matmul M=%d K=%d N=%d%s", M, K, N, bias ? " bias" : "");
    /* the double analytic gradients against the finite differences (FD error ~1e-10) */
    snprintf(name, sizeof name, "%s ref dinp vs fd", tag);
    check_failures += check_grad_d(name, gin, fin, ii, ki, min, 0, FD_TOL);
    snprintf(name, sizeof name, "%s ref dw vs fd", tag);
    check_failures += check_grad_d(name, gw, fw, iw, kw, mw, 0, FD_TOL);
    if (bias) {
        snprintf(name, sizeof name, "%s ref dbias vs fd", tag);
        check_failures += check_grad_d(name, gb, fb, ib, kb, mb, 0, FD_TOL);
    }

    float *out[2] = {fvec(MN), fvec(MN)}, *din[2] = {fvec(MK), fvec(MK)}, *dw[2] = {fvec(KN), fvec(KN)};
    float *db[2] = {fvec(N), fvec(N)};
    for (int k = 0; k < OPS_NBE; k++) {
        hg_backend *be = bes[k];
        use_backend(be);
        snprintf(tag, sizeof tag, "matmul M=%d K=%d N=%d%s threads=%d", M, K, N, bias ? " bias" : "", be->threads);
        for (int run = 0; run < 2; run++) {
            poison(out[run], MN), poison(din[run], MK);
            memcpy(dw[run], pre_dw, sizeof(float) * KN), memcpy(db[run], pre_db, sizeof(float) * N);
            CHECK_OK(be->ops->matmul_forward(be, out[run], inp, w, bias, M, K, N));
            /* with no bias in the forward, the backward gets dbias NULL and must skip it */
            CHECK_OK(be->ops->matmul_backward(be, din[run], dw[run], bias ? db[run] : NULL, R, inp, w, M, K, N));
        }
        snprintf(name, sizeof name, "%s out", tag);
        check_failures += check_bitwise(name, out[0], out[1], MN) + check_finite(name, out[0], MN);
        check_failures += check_vec(name, out[0], out_ref, mag, MN, K * U32, 0.0);
        snprintf(name, sizeof name, "%s dinp", tag);
        check_failures += check_bitwise(name, din[0], din[1], MK) + check_finite(name, din[0], MK);
        check_failures += check_grad(name, din[0], NULL, gin, NULL, MK, min, 0, N * U32);
        check_failures += check_grad(name, din[0], NULL, fin, ii, ki, min, 0, N * U32);
        /* dw: M-term sums added to the prefill (the 2u |dw| term of check_grad) */
        snprintf(name, sizeof name, "%s dw", tag);
        check_failures += check_bitwise(name, dw[0], dw[1], KN);
        check_failures += check_grad(name, dw[0], pre_dw, gw, NULL, KN, mw, 0, M * U32);
        check_failures += check_grad(name, dw[0], pre_dw, fw, iw, kw, mw, 0, M * U32);
        if (bias) {
            snprintf(name, sizeof name, "%s dbias", tag);
            check_failures += check_bitwise(name, db[0], db[1], N);
            check_failures += check_grad(name, db[0], pre_db, gb, NULL, N, mb, 0, M * U32);
            check_failures += check_grad(name, db[0], pre_db, fb, ib, kb, mb, 0, M * U32);
        }
    }
    for (int run = 0; run < 2; run++) free(out[run]), free(din[run]), free(dw[run]), free(db[run]);
    free(inp), free(w), free(bias), free(R), free(pre_dw), free(pre_db), free(inpd), free(wd), free(biasd), free(Rd);
    free(out_ref), free(mag), free(gin), free(gw), free(gb), free(ainp), free(aw), free(aR), free(min), free(mw), free(mb);
    free(ii), free(iw), free(ib), free(fin), free(fw), free(fb);
}

/* cpu_gemm checked directly against a double reference, with a K u bound, on every
 * element, for accumulate off and on (and a bias with the first): the deep product
 * (K >= 16384, as the classifier's dx with GPT-2's vocabulary) runs as 384-column blocks
 * plus a tail; the deep one with many rows (K >= 2048, M >= 1024, as the MLP's output
 * product) has B reordered into oneDNN's blocked layout first where its kernel asks for
 * one (the AVX-512 brgemm's; the check's name says which ran). */
static void test_gemm_direct(hg_backend *be, const char *what, int M, int K, int N, uint64_t seed) {
    trng r = trng_seed(seed);
    float *A = fvec((size_t)M * K), *B = fvec((size_t)K * N), *C = fvec((size_t)M * N), *C0 = fvec((size_t)M * N);
    float *bias = fvec((size_t)N);
    double *want = dvec((size_t)M * N), *mag = dvec((size_t)M * N);
    fill(A, (size_t)M * K, &r, -1, 1);
    fill(B, (size_t)K * N, &r, -1, 1);
    fill(C0, (size_t)M * N, &r, -1, 1);
    fill(bias, (size_t)N, &r, -1, 1);
    for (int acc = 0; acc < 2; acc++) {
        for (int m = 0; m < M; m++)
            for (int n = 0; n < N; n++) {
                double s = acc ? C0[(size_t)m * N + n] : bias[n], a = fabs(s);
                for (int k = 0; k < K; k++) {
                    double p = (double)A[(size_t)m * K + k] * B[(size_t)k * N + n];
                    s += p, a += fabs(p);
                }
                want[(size_t)m * N + n] = s, mag[(size_t)m * N + n] = a;
            }
        if (acc) memcpy(C, C0, sizeof(float) * (size_t)M * N);
        else poison(C, (size_t)M * N);
        cpu_gemm_desc d = {.M = M, .N = N, .K = K, .lda = K, .ldb = N, .ldc = N, .bias = !acc, .accumulate = acc};
        CHECK_OK(cpu_gemm(be, &d, A, B, acc ? NULL : bias, C));
        char name[96];
        snprintf(name, sizeof name, "%s%s%s", what, cpu_gemm_packs(be, &d) ? " (B packed)" : "",
                 acc ? ", accumulate" : ", bias");
        check_failures += check_vec(name, C, want, mag, (size_t)M * N, (K + 2) * U32, 0);
    }
    free(A), free(B), free(C), free(C0), free(bias), free(want), free(mag);
}

int test_ops_matmul(hg_backend *bes[OPS_NBE]) {
    test_gemm_direct(bes[0], "deep gemm", 3, 16400, 400, 77);
    test_gemm_direct(bes[0], "deep gemm, many rows", 1024, 2048, 32, 78);
    test_matmul(bes, 74, 96, 384, 1);   /* c_fc at B=2, T=37, C=96, F=384 */
    test_matmul(bes, 74, 384, 96, 0);   /* c_proj shape, no bias: dbias NULL */
    test_matmul(bes, 37, 96, 3100, 1);  /* N > 1536: three column blocks, the last narrower */
    test_matmul(bes, 37, 1700, 48, 1);  /* K > 1536: dinp's GEMM splits a transposed B */
    test_matmul(bes, 1, 96, 17, 1);     /* one row, a width no kernel blocks evenly */
    return check_failures;
}
