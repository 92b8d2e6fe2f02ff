/* Every CUDA op against the CPU backend (which tests/test_ops.c holds to float64
 * references), in fp32 and in bf16, on random inputs that are never zero, with the GPU's
 * outputs poisoned (NaN) before each op and odd shapes (T=37, C=96, NH=3, V=1000, chunks
 * that do not divide N). In bf16 the inputs are first rounded to bf16 on the host, so
 * both backends see the same values and the differences are the GPU's own roundings.
 *
 * Tolerances are on ||gpu - cpu|| / ||cpu||, per compute type:
 *  - fp32: 1e-5 (different summation orders; fp32 GEMMs without TF32), exact ops 1e-6;
 *  - bf16: 1e-2 where one rounding to bf16 (2^-9 relative) of an output or of an operand
 *    computed on the GPU (GELU's output, dlogits) is all there is; 2e-2 where bf16
 *    intermediates feed further arithmetic (LayerNorm backward, GELU backward); 3e-2
 *    for attention backward (P and dS are bf16 operands of the second products); fp32
 *    outputs computed from exact inputs (statistics, lse, dW of a plain layer) 1e-4.
 * These figures are first guesses, not yet measured (no GPU was available when they were
 * written); docs/cuda.md lists checking them as part of the first GPU session.
 *
 * Skips (exit 77) when there is no CUDA device. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/bf16.h"
#include "cuda_util.h"
#include "ops_util.h"

static const hg_norm_spec LN = {0, 1e-5f, 0};  /* GPT-2's LayerNorm */
static const hg_norm_spec RMS = {1, 1e-6f, 0}; /* Qwen2's RMSNorm (Llama 2's eps) */

static int failures;

static double tol(hg_backend *gpu, double fp32, double bf16) { return gpu->precision == HG_PRECISION_FP32 ? fp32 : bf16; }

/* Random values in [lo, hi), rounded to what the GPU's compute type can hold. */
static float *rvec(hg_backend *gpu, size_t n, trng *r, double lo, double hi) {
    float *x = fvec(n);
    fill(x, n, r, lo, hi);
    round_for(gpu, x, n);
    return x;
}

static float *copy_of(const float *x, size_t n) {
    float *y = fvec(n);
    memcpy(y, x, n * sizeof(float));
    return y;
}

/* A check's label: fmt with %s replaced by op (valid until the next call). */
static const char *op_name(const char *fmt, const char *op) {
    static char buf[128];
    snprintf(buf, sizeof buf, fmt, op);
    return buf;
}

/* The GPU buffer d (n elements) against the CPU's want. */
static void check(hg_backend *gpu, const char *what, const void *d, const float *want, size_t n, int compute, double t) {
    float *got = fvec(n);
    dev_to_host(gpu, got, d, n, compute);
    failures += compare(what, got, want, n, t);
    free(got);
}

/* An accumulated output: the GPU buffer d, prefilled with `prefill`, against the CPU's
 * want, compared as increments (got - prefill against want - prefill), so the prefill's
 * size does not dilute the error of what the op added. */
static void check_acc(hg_backend *gpu, const char *what, const void *d, const float *want, const float *prefill, size_t n,
                      int compute, double t) {
    float *got = fvec(n), *inc = fvec(n);
    dev_to_host(gpu, got, d, n, compute);
    for (size_t i = 0; i < n; i++) got[i] -= prefill[i], inc[i] = want[i] - prefill[i];
    failures += compare(what, got, inc, n, t);
    free(got), free(inc);
}

static void sync_or_fail(hg_backend *gpu, const char *what) {
    if (gpu->ops->sync(gpu) != HG_OK) {
        printf("  FAIL %s: %s\n", what, hg_last_error());
        failures++;
    }
}

/* ---- encoder and dropout masks ---- */

/* Packed documents' positions (B,T), host memory: lengths cycling through len, 1,
 * 2 len + 3 and 5 from the start of row 0; row b > 0 begins inside a document, at
 * position 7 b (so positions reach 7 (B - 1) + T - 1). */
static int32_t *doc_positions(int B, int T, int len) {
    int32_t *pos = ivec((size_t)B * T);
    const int lens[4] = {len, 1, 2 * len + 3, 5};
    for (int b = 0; b < B; b++) {
        int p = 7 * b, k = b, left = lens[k % 4] + p;
        for (int t = 0; t < T; t++) {
            if (p >= left) p = 0, left = lens[++k % 4];
            pos[(size_t)b * T + t] = p++;
        }
    }
    return pos;
}

/* pos: packed documents' positions (doc_positions) or NULL. */
static void test_encoder(hg_backend *cpu, hg_backend *gpu, float p, const int32_t *pos) {
    const int B = 3, T = 37, C = 96, V = 1000, Tmax = 64, N = B * T;
    trng r = trng_seed(11);
    float *wte = rvec(gpu, (size_t)V * C, &r, -1, 1), *wpe = rvec(gpu, (size_t)Tmax * C, &r, -1, 1);
    float *dout = rvec(gpu, (size_t)N * C, &r, -1, 1);
    float *dwte0 = rvec(gpu, (size_t)V * C, &r, -1, 1), *dwpe0 = rvec(gpu, (size_t)Tmax * C, &r, -1, 1);
    int32_t *tok = ivec(N);
    for (int i = 0; i < N; i++) tok[i] = trng_int(&r, V);
    hg_dropout drop = {p, 7, 3, 0};
    float *out = fvec((size_t)N * C), *dwte = copy_of(dwte0, (size_t)V * C), *dwpe = copy_of(dwpe0, (size_t)Tmax * C);
    cpu->ops->encoder_forward(cpu, out, tok, pos, wte, wpe, B, T, C, 1.7f, &drop);
    cpu->ops->encoder_backward(cpu, dwte, dwpe, dout, tok, pos, B, T, C, 1.7f, &drop);

    void *d_tok = dev_bytes(gpu, tok, sizeof(int32_t) * N), *d_out = dev_poison(gpu, (size_t)N * C, 1);
    const int32_t *d_pos = pos ? dev_bytes(gpu, pos, sizeof(int32_t) * N) : NULL;
    void *d_dwte = dev_from(gpu, dwte0, (size_t)V * C, 0), *d_dwpe = dev_from(gpu, dwpe0, (size_t)Tmax * C, 0);
    gpu->ops->encoder_forward(gpu, d_out, d_tok, d_pos, dev_from(gpu, wte, (size_t)V * C, 1),
                              dev_from(gpu, wpe, (size_t)Tmax * C, 1), B, T, C, 1.7f, &drop);
    gpu->ops->encoder_backward(gpu, d_dwte, d_dwpe, dev_from(gpu, dout, (size_t)N * C, 1), d_tok, d_pos, B, T, C, 1.7f, &drop);
    sync_or_fail(gpu, "encoder");
    char name[64];
    snprintf(name, sizeof name, "encoder_forward p=%.1f%s", (double)p, pos ? " documents" : "");
    float *got = fvec((size_t)N * C);
    dev_to_host(gpu, got, d_out, (size_t)N * C, 1);
    failures += compare(name, got, out, (size_t)N * C, tol(gpu, 1e-6, 1e-2));
    int mask_diff = 0; /* the same Philox counters: the same elements dropped */
    for (int i = 0; i < N * C; i++) mask_diff += (got[i] == 0.0f) != (out[i] == 0.0f);
    if (mask_diff) printf("  FAIL %s: %d elements dropped on one backend only\n", name, mask_diff), failures++;
    free(got);
    check_acc(gpu, "encoder_backward dwte (atomics, increment)", d_dwte, dwte, dwte0, (size_t)V * C, 0, 1e-5);
    check_acc(gpu, "encoder_backward dwpe (increment)", d_dwpe, dwpe, dwpe0, (size_t)Tmax * C, 0, 1e-5);
    dev_free_all(gpu);
    free(wte), free(wpe), free(dout), free(dwte0), free(dwpe0), free(tok), free(out), free(dwte), free(dwpe);
}

/* The token-embedding gradient of HG_FLAG_DETERMINISTIC (rows of each id summed in row
 * order, no atomics): against the CPU, and bit-identical when run twice. Half of the
 * 5000 rows share one id, so its row list is refilled three times (2048 a round); C is
 * not a multiple of the block's 256 threads. */
static void test_encoder_ordered(hg_backend *cpu, hg_backend *gpu) {
    const int B = 5, T = 1000, C = 200, V = 50, N = B * T;
    trng r = trng_seed(12);
    float *dout = rvec(gpu, (size_t)N * C, &r, -1, 1), *dwte0 = rvec(gpu, (size_t)V * C, &r, -1, 1);
    int32_t *tok = ivec(N);
    for (int i = 0; i < N; i++) tok[i] = i % 2 ? 3 : trng_int(&r, V);
    hg_dropout drop = {0.1f, 9, 2, 0};
    float *dwte = copy_of(dwte0, (size_t)V * C), *first = fvec((size_t)V * C), *second = fvec((size_t)V * C);
    cpu->ops->encoder_backward(cpu, dwte, NULL, dout, tok, NULL, B, T, C, 1.0f, &drop);
    void *d_tok = dev_bytes(gpu, tok, sizeof(int32_t) * N), *d_dout = dev_from(gpu, dout, (size_t)N * C, 1);
    float *runs[2] = {first, second};
    for (int k = 0; k < 2; k++) {
        void *d_dwte = dev_from(gpu, dwte0, (size_t)V * C, 0);
        gpu->ops->encoder_backward(gpu, d_dwte, NULL, d_dout, d_tok, NULL, B, T, C, 1.0f, &drop);
        sync_or_fail(gpu, "encoder backward (ordered)");
        dev_to_host(gpu, runs[k], d_dwte, (size_t)V * C, 0);
        if (k == 0) check_acc(gpu, "encoder_backward dwte (ordered, increment)", d_dwte, dwte, dwte0, (size_t)V * C, 0, 1e-5);
    }
    int same = !memcmp(first, second, sizeof(float) * (size_t)V * C);
    printf("  %-4s encoder_backward dwte (ordered): two runs %s\n", same ? "ok" : "FAIL", same ? "bit-identical" : "differ");
    failures += !same;
    dev_free_all(gpu);
    free(dout), free(dwte0), free(tok), free(dwte), free(first), free(second);
}

/* ---- LayerNorm and RMSNorm (with and without w, b), residual + norm with dropout,
 * backward, dropout backward ---- */

enum { NORM_W = 1, NORM_B = 2 }; /* which affine parameters the norm has */

/* RMSNorm is given NULL for mean on both backends (it must neither read nor write it),
 * and a missing w or b is NULL along with its gradient. */
static void test_norm(hg_backend *cpu, hg_backend *gpu, int C, const hg_norm_spec *ns, int affine) {
    const int N = 111, rms = ns->rms;
    const size_t NC = (size_t)N * C;
    trng r = trng_seed(21 + (uint64_t)C + 100 * (uint64_t)(rms + 2 * affine));
    float *x = rvec(gpu, NC, &r, -1.5, 2.5), *delta = rvec(gpu, NC, &r, -1, 1), *w = rvec(gpu, C, &r, 0.5, 1.5);
    float *b = rvec(gpu, C, &r, -0.5, 0.5), *dout = rvec(gpu, NC, &r, -1, 1), *dinp0 = rvec(gpu, NC, &r, -1, 1);
    float *dw0 = rvec(gpu, C, &r, -1, 1), *db0 = rvec(gpu, C, &r, -1, 1);
    hg_dropout drop = {0.1f, 5, 2, 3};
    float *out = fvec(NC), *mean = rms ? NULL : fvec(N), *rstd = fvec(N), *res = fvec(NC), *out2 = fvec(NC);
    float *mean2 = rms ? NULL : fvec(N), *rstd2 = fvec(N);
    float *dinp = copy_of(dinp0, NC), *dw = copy_of(dw0, C), *db = copy_of(db0, C), *dbr = fvec(NC);
    float *scratch = fvec(cpu->ops->layernorm_scratch_bytes(cpu, N, C) / sizeof(float));
    const float *cw = affine & NORM_W ? w : NULL, *cb = affine & NORM_B ? b : NULL;
    float *cdw = affine & NORM_W ? dw : NULL, *cdb = affine & NORM_B ? db : NULL;
    cpu->ops->layernorm_forward(cpu, out, mean, rstd, x, cw, cb, N, C, ns);
    cpu->ops->residual_layernorm_forward(cpu, res, out2, mean2, rstd2, x, delta, cw, cb, N, C, &drop, ns);
    cpu->ops->layernorm_backward(cpu, dinp, cdw, cdb, dout, x, cw, mean, rstd, N, C, scratch, ns);
    cpu->ops->dropout_backward(cpu, dbr, dout, NC, &drop);

    void *dx = dev_from(gpu, x, NC, 1), *dwt = affine & NORM_W ? dev_from(gpu, w, C, 1) : NULL;
    void *dbt = affine & NORM_B ? dev_from(gpu, b, C, 1) : NULL;
    void *d_out = dev_poison(gpu, NC, 1), *d_mean = rms ? NULL : dev_poison(gpu, N, 0), *d_rstd = dev_poison(gpu, N, 0);
    void *d_res = dev_poison(gpu, NC, 1), *d_out2 = dev_poison(gpu, NC, 1), *d_mean2 = rms ? NULL : dev_poison(gpu, N, 0),
         *d_rstd2 = dev_poison(gpu, N, 0);
    void *d_dinp = dev_from(gpu, dinp0, NC, 1), *d_dw = affine & NORM_W ? dev_from(gpu, dw0, C, 0) : NULL;
    void *d_db = affine & NORM_B ? dev_from(gpu, db0, C, 0) : NULL;
    void *d_dout = dev_from(gpu, dout, NC, 1), *d_dbr = dev_poison(gpu, NC, 1);
    void *d_scr = dev_poison(gpu, gpu->ops->layernorm_scratch_bytes(gpu, N, C) / sizeof(float), 0);
    gpu->ops->layernorm_forward(gpu, d_out, d_mean, d_rstd, dx, dwt, dbt, N, C, ns);
    gpu->ops->residual_layernorm_forward(gpu, d_res, d_out2, d_mean2, d_rstd2, dx, dev_from(gpu, delta, NC, 1), dwt, dbt, N, C,
                                         &drop, ns);
    /* backward from the CPU's statistics, so only the backward is under test */
    gpu->ops->layernorm_backward(gpu, d_dinp, d_dw, d_db, d_dout, dx, dwt, rms ? NULL : dev_from(gpu, mean, N, 0),
                                 dev_from(gpu, rstd, N, 0), N, C, d_scr, ns);
    gpu->ops->dropout_backward(gpu, d_dbr, d_dout, NC, &drop);
    const char *name = rms ? "rmsnorm" : "layernorm";
    sync_or_fail(gpu, name);
    printf("  %s C=%d eps=%g, %s\n", name, C, (double)ns->eps,
           affine == (NORM_W | NORM_B) ? "w and b" : affine == NORM_W ? "w, no b" : affine == NORM_B ? "b, no w" : "no w, no b");
    check(gpu, op_name("%s_forward out", name), d_out, out, NC, 1, tol(gpu, 1e-5, 1e-2));
    if (!rms) check(gpu, op_name("%s_forward mean", name), d_mean, mean, N, 0, 1e-5);
    check(gpu, op_name("%s_forward rstd", name), d_rstd, rstd, N, 0, 1e-5);
    check(gpu, op_name("residual_%s_forward res (dropout 0.1)", name), d_res, res, NC, 1, tol(gpu, 1e-6, 1e-2));
    check(gpu, op_name("residual_%s_forward out", name), d_out2, out2, NC, 1, tol(gpu, 1e-5, 1e-2));
    if (!rms) check(gpu, op_name("residual_%s_forward mean", name), d_mean2, mean2, N, 0, tol(gpu, 1e-5, 2e-3));
    check(gpu, op_name("residual_%s_forward rstd", name), d_rstd2, rstd2, N, 0, tol(gpu, 1e-5, 2e-3));
    check_acc(gpu, op_name("%s_backward dinp (increment)", name), d_dinp, dinp, dinp0, NC, 1, tol(gpu, 1e-5, 2e-2));
    if (affine & NORM_W) check_acc(gpu, op_name("%s_backward dw (increment)", name), d_dw, dw, dw0, C, 0, 1e-4);
    if (affine & NORM_B) check_acc(gpu, op_name("%s_backward db (increment)", name), d_db, db, db0, C, 0, 1e-4);
    check(gpu, "dropout_backward", d_dbr, dbr, NC, 1, tol(gpu, 1e-6, 1e-2));
    dev_free_all(gpu);
    free(x), free(delta), free(w), free(b), free(dout), free(dinp0), free(dw0), free(db0), free(out), free(mean), free(rstd);
    free(res), free(out2), free(mean2), free(rstd2), free(dinp), free(dw), free(db), free(dbr), free(scratch);
}

/* ---- q/k norm (Qwen3): RMSNorm of each q and k head in place, forward (raw kept and
 * not) and backward. Written 2026-11-24 after the day's GPU time: cuda_supports refuses
 * qk_norm until this group has passed on a GPU. ---- */

/* whole: OLMo 2's q/k norm, all q heads as one unit and all k heads as another. */
static void test_qk_norm(hg_backend *cpu, hg_backend *gpu, int N, int NH, int NKV, int hs, int has_w, int whole) {
    const hg_qk_norm_shape s = {N, NH, NKV, hs, 1e-6f, whole};
    int nq, uq, nk, uk; /* units of q and k per row, and their widths */
    hg_qk_norm_units(&s, &nq, &uq, &nk, &uk);
    const size_t W = (size_t)(NH + 2 * NKV) * hs, n = (size_t)N * W, QK = (size_t)N * (NH + NKV) * hs, H = (size_t)N * (nq + nk);
    const size_t nw = (size_t)uq + uk;
    trng r = trng_seed(91 + (uint64_t)(NH * 10 + NKV + hs + has_w + 3 * whole));
    float *qkv = rvec(gpu, n, &r, -1.5, 2.5), *dq = rvec(gpu, n, &r, -1, 1);
    float *wq = has_w ? rvec(gpu, uq, &r, 0.5, 1.5) : NULL, *wk = has_w ? rvec(gpu, uk, &r, 0.5, 1.5) : NULL;
    float *dw0 = rvec(gpu, nw, &r, -1, 1);
    float *out = copy_of(qkv, n), *raw = fvec(QK), *rstd = fvec(H), *din = copy_of(dq, n), *dw = copy_of(dw0, nw);
    const int widest = uq > uk ? uq : uk;
    float *scr = fvec(cpu->ops->layernorm_scratch_bytes(cpu, N, widest) / sizeof(float));
    cpu->ops->qk_norm_forward(cpu, out, raw, rstd, wq, wk, &s);
    cpu->ops->qk_norm_backward(cpu, din, has_w ? dw : NULL, has_w ? dw + uq : NULL, raw, rstd, wq, wk, &s, scr);

    void *g_out = dev_from(gpu, qkv, n, 1), *g_in = dev_from(gpu, qkv, n, 1), *g_raw = dev_poison(gpu, QK, 1);
    void *g_rstd = dev_poison(gpu, H, 0), *g_rstd2 = dev_poison(gpu, H, 0), *g_d = dev_from(gpu, dq, n, 1);
    void *g_wq = has_w ? dev_from(gpu, wq, uq, 1) : NULL, *g_wk = has_w ? dev_from(gpu, wk, uk, 1) : NULL;
    float *g_dw = dev_from(gpu, dw0, nw, 0);
    void *g_scr = dev_poison(gpu, gpu->ops->layernorm_scratch_bytes(gpu, N, widest) / sizeof(float), 0);
    gpu->ops->qk_norm_forward(gpu, g_out, g_raw, g_rstd, g_wq, g_wk, &s);
    gpu->ops->qk_norm_forward(gpu, g_in, NULL, g_rstd2, g_wq, g_wk, &s); /* in place, raw not kept */
    /* backward from the CPU's raw and rstd, so only the backward is under test */
    gpu->ops->qk_norm_backward(gpu, g_d, has_w ? g_dw : NULL, has_w ? g_dw + uq : NULL, dev_from(gpu, raw, QK, 1),
                               dev_from(gpu, rstd, H, 0), g_wq, g_wk, &s, g_scr);
    sync_or_fail(gpu, "qk_norm");
    printf("  qk_norm N=%d NH=%d NKV=%d hs=%d, %s%s\n", N, NH, NKV, hs, has_w ? "wq and wk" : "no weights",
           whole ? ", whole (one q unit, one k unit)" : "");
    check(gpu, "qk_norm_forward qkv (v untouched)", g_out, out, n, 1, tol(gpu, 1e-5, 1e-2));
    check(gpu, "qk_norm_forward raw", g_raw, raw, QK, 1, 1e-6);
    check(gpu, "qk_norm_forward rstd", g_rstd, rstd, H, 0, 1e-5);
    check(gpu, "qk_norm_forward in place, raw not kept", g_in, out, n, 1, tol(gpu, 1e-5, 1e-2));
    check(gpu, "qk_norm_forward rstd (in place)", g_rstd2, rstd, H, 0, 1e-5);
    check(gpu, "qk_norm_backward dqkv", g_d, din, n, 1, tol(gpu, 1e-5, 2e-2));
    if (has_w) check_acc(gpu, "qk_norm_backward dwq | dwk (increment)", g_dw, dw, dw0, nw, 0, 1e-4);
    dev_free_all(gpu);
    free(qkv), free(dq), free(wq), free(wk), free(dw0), free(out), free(raw), free(rstd), free(din), free(dw), free(scr);
}

/* ---- linear layers: plain and with GELU, forward and backward; GELU alone ---- */

static void test_matmul(hg_backend *cpu, hg_backend *gpu, int M, int K, int N, int gelu) {
    trng r = trng_seed(31 + (uint64_t)(M + K + N + gelu));
    size_t MK = (size_t)M * K, KN = (size_t)K * N, MN = (size_t)M * N;
    float *inp = rvec(gpu, MK, &r, -1, 1), *w = rvec(gpu, KN, &r, -0.2, 0.2), *bias = rvec(gpu, N, &r, -0.5, 0.5);
    float *dout = rvec(gpu, MN, &r, -1, 1), *dw0 = rvec(gpu, KN, &r, -1, 1), *db0 = rvec(gpu, N, &r, -1, 1);
    float *out = fvec(MN), *pre = fvec(MN), *dinp = fvec(MK), *dw = copy_of(dw0, KN), *db = copy_of(db0, N), *act = fvec(MK);
    char name[96];
    void *d_inp = dev_from(gpu, inp, MK, 1), *d_w = dev_from(gpu, w, KN, 1), *d_b = dev_from(gpu, bias, N, 1);
    void *d_dout = dev_from(gpu, dout, MN, 1), *d_dw = dev_from(gpu, dw0, KN, 0), *d_db = dev_from(gpu, db0, N, 0);
    void *d_out = dev_poison(gpu, MN, 1), *d_pre = dev_poison(gpu, MN, 1), *d_dinp = dev_poison(gpu, MK, 1);
    hg_status st = HG_OK;
    if (!gelu) {
        cpu->ops->matmul_forward(cpu, out, inp, w, bias, M, K, N);
        cpu->ops->matmul_backward(cpu, dinp, dw, db, dout, inp, w, M, K, N);
        st = gpu->ops->matmul_forward(gpu, d_out, d_inp, d_w, d_b, M, K, N);
        if (st == HG_OK) st = gpu->ops->matmul_backward(gpu, d_dinp, d_dw, d_db, d_dout, d_inp, d_w, M, K, N);
    } else {
        /* forward: the MLP's c_fc (K -> N); backward: a c_proj whose input was GELU(pre),
         * pre (M,K) being the inp above */
        /* the CPU has no fused ops: the reference is what the step runs there */
        cpu->ops->matmul_forward(cpu, pre, inp, w, bias, M, K, N);
        cpu->ops->gelu_forward(cpu, out, pre, MN);
        float *wp = w; /* (K, N) serves as the c_proj weight of a K -> N layer */
        cpu->ops->gelu_forward(cpu, act, inp, MK);
        cpu->ops->matmul_backward(cpu, dinp, dw, db, dout, act, wp, M, K, N);
        cpu->ops->gelu_backward(cpu, dinp, inp, dinp, MK);
        st = gpu->ops->matmul_gelu_forward(gpu, d_out, d_pre, d_inp, d_w, d_b, M, K, N);
        void *d_act = dev_poison(gpu, MK, 1);
        if (st == HG_OK) st = gpu->ops->matmul_gelu_backward(gpu, d_dinp, d_dw, d_db, d_act, d_dout, d_inp, d_w, M, K, N);
        snprintf(name, sizeof name, "matmul_gelu_backward act %dx%d", M, K);
        if (st == HG_OK) check(gpu, name, d_act, act, MK, 1, tol(gpu, 1e-5, 1e-2));
    }
    if (st != HG_OK) {
        printf("  FAIL matmul %dx%dx%d: %s\n", M, K, N, hg_last_error());
        failures++;
    } else {
        sync_or_fail(gpu, "matmul");
        const char *op = gelu ? "matmul_gelu" : "matmul";
        snprintf(name, sizeof name, "%s_forward out %dx%dx%d", op, M, K, N);
        check(gpu, name, d_out, out, MN, 1, tol(gpu, 1e-5, 1e-2));
        if (gelu) {
            snprintf(name, sizeof name, "%s_forward pre", op);
            check(gpu, name, d_pre, pre, MN, 1, tol(gpu, 1e-5, 1e-2));
        }
        snprintf(name, sizeof name, "%s_backward dinp", op);
        check(gpu, name, d_dinp, dinp, MK, 1, tol(gpu, 1e-5, gelu ? 2e-2 : 1e-2));
        snprintf(name, sizeof name, "%s_backward dw (increment)", op);
        check_acc(gpu, name, d_dw, dw, dw0, KN, 0, tol(gpu, 1e-5, gelu ? 1e-2 : 1e-4)); /* GELU's output is a bf16 operand */
        snprintf(name, sizeof name, "%s_backward dbias (increment)", op);
        check_acc(gpu, name, d_db, db, db0, N, 0, 1e-5);
    }
    dev_free_all(gpu);
    free(inp), free(w), free(bias), free(dout), free(dw0), free(db0), free(out), free(pre), free(dinp), free(dw), free(db), free(act);
}

static void test_gelu(hg_backend *cpu, hg_backend *gpu) {
    const size_t n = 10007;
    trng r = trng_seed(41);
    float *x = rvec(gpu, n, &r, -5, 5), *g = rvec(gpu, n, &r, -1, 1), *out = fvec(n), *din = fvec(n);
    cpu->ops->gelu_forward(cpu, out, x, n);
    cpu->ops->gelu_backward(cpu, din, x, g, n);
    void *d_x = dev_from(gpu, x, n, 1), *d_out = dev_poison(gpu, n, 1), *d_din = dev_from(gpu, g, n, 1);
    gpu->ops->gelu_forward(gpu, d_out, d_x, n);
    gpu->ops->gelu_backward(gpu, d_din, d_x, d_din, n); /* in place, as the contract allows */
    sync_or_fail(gpu, "gelu");
    check(gpu, "gelu_forward", d_out, out, n, 1, tol(gpu, 1e-6, 1e-2));
    check(gpu, "gelu_backward (in place)", d_din, din, n, 1, tol(gpu, 1e-6, 1e-2));
    dev_free_all(gpu);
    free(x), free(g), free(out), free(din);
}

/* ---- SwiGLU and ReLU^2 ---- */

static void test_activation(hg_backend *cpu, hg_backend *gpu, hg_mlp_kind kind, int N, int F) {
    const int gated = hg_mlp_gated(kind);
    const size_t no = (size_t)N * F, np = gated ? 2 * no : no;
    trng r = trng_seed(45 + (uint64_t)kind);
    /* gates far enough out that the sigmoid saturates on some elements */
    float *pre = rvec(gpu, np, &r, -6, 6), *dout = rvec(gpu, no, &r, -1, 1), *out = fvec(no), *dpre = fvec(np);
    cpu->ops->activation_forward(cpu, kind, out, pre, N, F);
    cpu->ops->activation_backward(cpu, kind, dpre, pre, dout, N, F);
    void *d_pre = dev_from(gpu, pre, np, 1), *d_out = dev_poison(gpu, no, 1), *d_dpre = dev_poison(gpu, np, 1);
    gpu->ops->activation_forward(gpu, kind, d_out, d_pre, N, F);
    gpu->ops->activation_backward(gpu, kind, d_dpre, d_pre, dev_from(gpu, dout, no, 1), N, F);
    const char *name = kind == HG_MLP_SWIGLU ? "swiglu" : kind == HG_MLP_GEGLU ? "geglu" : "relu2";
    sync_or_fail(gpu, name);
    printf("  %s N=%d F=%d\n", name, N, F);
    check(gpu, op_name("%s_forward", name), d_out, out, no, 1, tol(gpu, 1e-6, 1e-2));
    check(gpu, op_name(gated ? "%s_backward dgate | dup" : "%s_backward", name), d_dpre, dpre, np, 1, tol(gpu, 1e-6, 1e-2));
    dev_free_all(gpu);
    free(pre), free(dout), free(out), free(dpre);
}

/* ---- rotary position embedding ---- */

/* The model's table (gpt.c: init_rope) for theta 10000: row p holds cos(p f_i), then
 * sin(p f_i), f_i = theta^(-2i/hs). */
static float *rope_table(int Tmax, int hs) {
    float *t = fvec((size_t)Tmax * hs);
    for (int i = 0; i < hs / 2; i++) {
        float f = 1.0f / powf(10000.0f, (float)(2 * i) / (float)hs);
        for (int p = 0; p < Tmax; p++) {
            t[(size_t)p * hs + i] = (float)cos((double)p * f);
            t[(size_t)p * hs + hs / 2 + i] = (float)sin((double)p * f);
        }
    }
    return t;
}

/* In place on QKV rows at positions pos0 .. pos0+T-1, forward on one buffer and backward
 * on another; the comparison covers the v heads, which must come back untouched. */
/* pos: packed documents' positions (doc_positions) or NULL. */
static void test_rope_at(hg_backend *cpu, hg_backend *gpu, int B, int T, int pos0, int NH, int NKV, int hs, int rot,
                         const int32_t *pos) {
    hg_rope_shape s = {B, T, pos0, NH, NKV, hs, rot, pos};
    const int Tmax = (pos ? 7 * B : pos0) + T + 3, R = hg_rope_dims(&s);
    const size_t n = (size_t)B * T * (NH + 2 * NKV) * hs;
    trng r = trng_seed(47 + (uint64_t)(pos0 + NKV));
    float *qkv = rvec(gpu, n, &r, -2, 2), *dqkv = rvec(gpu, n, &r, -1, 1), *cs = rope_table(Tmax, R);
    void *d_qkv = dev_from(gpu, qkv, n, 1), *d_dqkv = dev_from(gpu, dqkv, n, 1), *d_cs = dev_from(gpu, cs, (size_t)Tmax * R, 0);
    cpu->ops->rope_forward(cpu, qkv, cs, &s);
    cpu->ops->rope_backward(cpu, dqkv, cs, &s);
    hg_rope_shape gs = s;
    if (pos) gs.pos = dev_bytes(gpu, pos, sizeof(int32_t) * (size_t)B * T);
    gpu->ops->rope_forward(gpu, d_qkv, d_cs, &gs);
    gpu->ops->rope_backward(gpu, d_dqkv, d_cs, &gs);
    sync_or_fail(gpu, "rope");
    char name[96];
    snprintf(name, sizeof name, "rope_forward B=%d T=%d pos0=%d NH=%d NKV=%d hs=%d rot=%d%s", B, T, pos0, NH, NKV, hs, R,
             pos ? " documents" : "");
    check(gpu, name, d_qkv, qkv, n, 1, tol(gpu, 1e-6, 1e-2));
    check(gpu, "rope_backward", d_dqkv, dqkv, n, 1, tol(gpu, 1e-6, 1e-2));
    dev_free_all(gpu);
    free(qkv), free(dqkv), free(cs);
}
static void test_rope(hg_backend *cpu, hg_backend *gpu, int B, int T, int pos0, int NH, int NKV, int hs, int rot) {
    test_rope_at(cpu, gpu, B, T, pos0, NH, NKV, hs, rot, NULL);
}

/* ---- attention ---- */

/* NKV 0: as many kv heads as query heads; else grouped-query attention (dK, dV summed
 * over each group). */
static int attention_on_cudnn; /* shapes whose forward and backward both ran on cuDNN */
static int cudnn_loaded;       /* some shape ran on cuDNN, or cuDNN refused it */

/* cap > 0: Gemma 2's score cap (the own kernels' capped instantiation; cuDNN has none).
 * window > 0: a sliding window (the own kernels, flash and row; cuDNN is not asked). */
/* pos: (B,T) packed documents' positions (host), or NULL; the GPU gets a device copy. */
static void test_attention_masked(hg_backend *cpu, hg_backend *gpu, int B, int T, int NH, int NKV, int hs, int causal,
                                  float cap, int window, const int32_t *pos) {
    hg_attention_shape s = {B, T, NH, hs, causal, NKV, cap, window, pos};
    const int C = NH * hs, W = (NH + 2 * hg_attention_kv_heads(&s)) * hs;
    const size_t n3 = (size_t)B * T * W, n1 = (size_t)B * T * C, nl = (size_t)B * NH * T;
    trng r = trng_seed(51 + (uint64_t)(T * hs + causal + 7 * NKV + (cap > 0)));
    float *qkv = rvec(gpu, n3, &r, -1.5, 1.5), *dout = rvec(gpu, n1, &r, -1, 1);
    float *out = fvec(n1), *lse = fvec(nl), *dqkv = fvec(n3);
    void *scr = malloc(cpu->ops->attention_scratch_bytes(cpu, &s) + 64);
    hg_status st = cpu->ops->attention_forward(cpu, out, lse, qkv, &s, scr);
    if (st == HG_OK) st = cpu->ops->attention_backward(cpu, dqkv, dout, qkv, out, lse, &s, scr);
    if (st != HG_OK) printf("  FAIL cpu attention: %s\n", hg_last_error()), failures++;
    void *d_qkv = dev_from(gpu, qkv, n3, 1), *d_out = dev_poison(gpu, n1, 1), *d_lse = dev_poison(gpu, nl, 0);
    void *d_dqkv = dev_poison(gpu, n3, 1);
    void *d_scr = dev_poison(gpu, gpu->ops->attention_scratch_bytes(gpu, &s) / sizeof(float) + 1, 0);
    hg_attention_shape gs = s;
    if (pos) gs.pos = dev_bytes(gpu, pos, sizeof(int32_t) * (size_t)B * T);
    st = gpu->ops->attention_forward(gpu, d_out, d_lse, d_qkv, &gs, d_scr);
    if (st == HG_OK) st = gpu->ops->attention_backward(gpu, d_dqkv, dev_from(gpu, dout, n1, 1), d_qkv, d_out, d_lse, &gs, d_scr);
    char name[96];
    if (st != HG_OK) {
        printf("  FAIL attention B=%d T=%d NH=%d NKV=%d hs=%d: %s\n", B, T, NH, NKV, hs, hg_last_error());
        failures++;
    } else {
        sync_or_fail(gpu, "attention");
        snprintf(name, sizeof name, "attention_forward out B=%d T=%d NH=%d NKV=%d hs=%d%s%s window=%d%s", B, T, NH, NKV,
                 hs, causal ? "" : " full", cap > 0 ? " capped" : "", window, pos ? " documents" : "");
        check(gpu, name, d_out, out, n1, 1, tol(gpu, 1e-5, 1e-2));
        check(gpu, "attention_forward lse", d_lse, lse, nl, 0, tol(gpu, 1e-5, 1e-4));
        check(gpu, "attention_backward dqkv", d_dqkv, dqkv, n3, 1, tol(gpu, 1e-5, 3e-2));
        const char *k = gpu->ops->attention_kernels(gpu);
        printf("    kernels: %s\n", k ? k : "?");
        attention_on_cudnn += k && !strncmp(k, "forward: cuDNN", 14) && strstr(k, "backward: cuDNN");
        cudnn_loaded |= k && (strstr(k, "cuDNN refused") || strstr(k, "cuDNN 9."));
    }
    dev_free_all(gpu);
    free(qkv), free(dout), free(out), free(lse), free(dqkv), free(scr);
}

static void test_attention_window(hg_backend *cpu, hg_backend *gpu, int B, int T, int NH, int NKV, int hs, int causal,
                                  float cap, int window) {
    test_attention_masked(cpu, gpu, B, T, NH, NKV, hs, causal, cap, window, NULL);
}

/* Packed documents (causal; doc_positions). */
static void test_attention_docs(hg_backend *cpu, hg_backend *gpu, int B, int T, int NH, int NKV, int hs, float cap,
                                int window, int len) {
    int32_t *pos = doc_positions(B, T, len);
    test_attention_masked(cpu, gpu, B, T, NH, NKV, hs, 1, cap, window, pos);
    free(pos);
}

static void test_attention_cap(hg_backend *cpu, hg_backend *gpu, int B, int T, int NH, int NKV, int hs, int causal,
                               float cap) {
    test_attention_window(cpu, gpu, B, T, NH, NKV, hs, causal, cap, 0);
}

static void test_attention(hg_backend *cpu, hg_backend *gpu, int B, int T, int NH, int NKV, int hs, int causal) {
    test_attention_cap(cpu, gpu, B, T, NH, NKV, hs, causal, 0.0f);
}

/* Through the KV cache: n new rows at pos0 of a cache of Tc rows, whose first pos0 rows
 * hold the same earlier keys and values on both backends. NKV 0: as many as NH. */
static void test_attention_cached_window(hg_backend *cpu, hg_backend *gpu, int pos0, int n, int NH, int NKV, int hs,
                                         float cap, int window) {
    const int C = NH * hs, Tc = 40, KV = NKV ? NKV : NH;
    hg_kv_shape s = {pos0, n, Tc, NH, hs, NKV, cap, window};
    const size_t nc = (size_t)KV * Tc * hs, nq = (size_t)n * (NH + 2 * KV) * hs, no = (size_t)n * C;
    trng r = trng_seed(91 + (uint64_t)(pos0 + 5 * NKV));
    float *kc = rvec(gpu, nc, &r, -1.5, 1.5), *vc = rvec(gpu, nc, &r, -1, 1), *qkv = rvec(gpu, nq, &r, -1.5, 1.5);
    float *out = fvec(no);
    void *d_kc = dev_from(gpu, kc, nc, 1), *d_vc = dev_from(gpu, vc, nc, 1), *d_out = dev_poison(gpu, no, 1);
    hg_attention_shape as = {1, Tc, NH, hs, 1, NKV, cap, 0, NULL};
    void *scr = malloc(cpu->ops->attention_scratch_bytes(cpu, &as) + 64);
    hg_status st = cpu->ops->attention_cached(cpu, out, kc, vc, qkv, &s, scr);
    if (st == HG_OK) st = gpu->ops->attention_cached(gpu, d_out, d_kc, d_vc, dev_from(gpu, qkv, nq, 1), &s, NULL);
    if (st != HG_OK) {
        printf("  FAIL attention_cached pos0=%d n=%d NH=%d NKV=%d hs=%d: %s\n", pos0, n, NH, NKV, hs, hg_last_error());
        failures++;
    } else {
        sync_or_fail(gpu, "attention_cached");
        char name[96];
        snprintf(name, sizeof name, "attention_cached out pos0=%d n=%d NH=%d NKV=%d hs=%d%s window=%d", pos0, n, NH, NKV,
                 hs, cap > 0 ? " capped" : "", window);
        check(gpu, name, d_out, out, no, 1, tol(gpu, 1e-5, 1e-2));
        check(gpu, "attention_cached k cache", d_kc, kc, nc, 1, 1e-6); /* copies: exact */
        check(gpu, "attention_cached v cache", d_vc, vc, nc, 1, 1e-6);
    }
    dev_free_all(gpu);
    free(kc), free(vc), free(qkv), free(out), free(scr);
}

static void test_attention_cached(hg_backend *cpu, hg_backend *gpu, int pos0, int n, int NH, int NKV, int hs, float cap) {
    test_attention_cached_window(cpu, gpu, pos0, n, NH, NKV, hs, cap, 0);
}

/* ---- classifier ---- */

/* extras: Phi-2's output bias (and its gradient, accumulated) and Gemma 2's logit cap,
 * at 2.5, which bends these logits (their standard deviation is near 1.1) */
static void test_classifier(hg_backend *cpu, hg_backend *gpu, int backward, int extras) {
    const int N = 111, C = 96, V = 1000, Vp = 1024, chunk = 40;
    const size_t NC = (size_t)N * C, VC = (size_t)Vp * C, E = hg_precision_bytes(gpu->precision);
    trng r = trng_seed(61 + (uint64_t)backward + 2 * (uint64_t)extras);
    float *x = rvec(gpu, NC, &r, -1, 1), *wte = rvec(gpu, VC, &r, -0.3, 0.3), *dwte0 = rvec(gpu, VC, &r, -1, 1);
    for (size_t i = (size_t)V * C; i < VC; i++) wte[i] *= 10.0f; /* padding that would dominate if it scored */
    float *bias = extras ? rvec(gpu, Vp, &r, -1, 1) : NULL, *db0 = rvec(gpu, Vp, &r, -1, 1), *db = copy_of(db0, Vp);
    const float cap = extras ? 2.5f : 0.0f;
    int32_t *tg = ivec(N);
    for (int n = 0; n < N; n++) tg[n] = n % 7 == 3 ? -1 : trng_int(&r, V);
    float *losses = fvec(N), *logits = fvec((size_t)N * V), *dx = fvec(NC), *dwte = copy_of(dwte0, VC);
    float *scr = fvec((size_t)chunk * Vp), *g_logits = fvec((size_t)N * V);
    for (size_t i = 0; i < (size_t)N * V; i++) g_logits[i] = NAN;
    char *d_x = dev_from(gpu, x, NC, 1), *d_dx = dev_poison(gpu, NC, 1);
    const void *d_wte = dev_from(gpu, wte, VC, 1);
    int32_t *d_tg = dev_bytes(gpu, tg, sizeof(int32_t) * N);
    float *d_losses = dev_poison(gpu, N, 0), *d_dwte = dev_from(gpu, dwte0, VC, 0);
    const void *d_bias = extras ? dev_from(gpu, bias, Vp, 1) : NULL;
    float *d_db = dev_from(gpu, db0, Vp, 0);
    void *d_scr = dev_poison(gpu, (size_t)chunk * Vp, 1);
    hg_status st = HG_OK;
    /* chunk by chunk, as gpt_classifier calls them; the GPU's logits go to host memory */
    for (int r0 = 0; r0 < N && st == HG_OK; r0 += chunk) {
        int rows = N - r0 < chunk ? N - r0 : chunk;
        hg_classifier_args a = {.N = rows, .C = C, .V = V, .Vp = Vp, .x = x + (size_t)r0 * C, .wte = wte,
                                .bias = bias, .targets = tg + r0, .losses = losses + r0, .softcap = cap,
                                .logits = backward ? NULL : logits + (size_t)r0 * V, .dscale = 0.7f,
                                .dx = backward ? dx + (size_t)r0 * C : NULL, .dwte = backward ? dwte : NULL,
                                .dbias = backward && extras ? db : NULL, .scratch = scr};
        st = cpu->ops->classifier_forward(cpu, &a);
        if (st == HG_OK && backward) st = cpu->ops->classifier_backward(cpu, &a);
        hg_classifier_args ga = a;
        ga.x = (const float *)(d_x + (size_t)r0 * C * E), ga.wte = d_wte, ga.targets = d_tg + r0, ga.losses = d_losses + r0;
        ga.logits = backward ? NULL : g_logits + (size_t)r0 * V;
        ga.dx = backward ? (float *)(d_dx + (size_t)r0 * C * E) : NULL, ga.dwte = backward ? d_dwte : NULL;
        ga.bias = (const float *)d_bias, ga.dbias = backward && extras ? d_db : NULL;
        ga.scratch = d_scr;
        if (st == HG_OK) st = gpu->ops->classifier_forward(gpu, &ga);
        if (st == HG_OK && backward) st = gpu->ops->classifier_backward(gpu, &ga);
    }
    if (st != HG_OK) {
        printf("  FAIL classifier: %s\n", hg_last_error());
        failures++;
    } else {
        sync_or_fail(gpu, "classifier");
        const char *with = extras ? " (bias, cap)" : "";
        char name[96];
        snprintf(name, sizeof name, "classifier losses%s%s", with, backward ? " (backward pass)" : "");
        check(gpu, name, d_losses, losses, N, 0, tol(gpu, 1e-5, 1e-2));
        snprintf(name, sizeof name, "classifier logits (to host)%s", with);
        if (!backward) failures += compare(name, g_logits, logits, (size_t)N * V, tol(gpu, 1e-5, 1e-2));
        if (backward) {
            snprintf(name, sizeof name, "classifier dx%s", with);
            check(gpu, name, d_dx, dx, NC, 1, tol(gpu, 1e-5, 2e-2));
            snprintf(name, sizeof name, "classifier dwte (increment)%s", with);
            check_acc(gpu, name, d_dwte, dwte, dwte0, VC, 0, tol(gpu, 1e-5, 1e-2));
            if (extras) check_acc(gpu, "classifier dbias (increment)", d_db, db, db0, Vp, 0, tol(gpu, 1e-5, 1e-2));
        }
    }
    dev_free_all(gpu);
    free(bias), free(db0), free(db);
    free(x), free(wte), free(dwte0), free(tg), free(losses), free(logits), free(dx), free(dwte), free(scr), free(g_logits);
}

/* ---- AdamW over a table, its bf16 copy (nearest and stochastic), sumsq ---- */

/* Three tensors' parameter table (fp32) and their copy's in the GPU's compute type, laid
 * out; returns the copy's element size. */
static size_t adamw_tables(hg_backend *gpu, hg_table *tab, hg_table *wtab) {
    const int64_t sizes[3] = {1237, 96, 5000};
    const unsigned flags[3] = {HG_SPEC_DECAY, 0, HG_SPEC_DECAY};
    const size_t E = hg_precision_bytes(gpu->precision);
    hg_table_init(tab), hg_table_init(wtab);
    for (int i = 0; i < 3; i++) {
        hg_table_add(tab, "t", 1, &sizes[i], 0, 1, 4, flags[i]);
        hg_table_add(wtab, "t", 1, &sizes[i], 0, 1, E, flags[i]);
    }
    hg_table_layout(tab), hg_table_layout(wtab);
    return E;
}

/* Over elements [lo, n - hi_off) of the table's buffer: with lo = 640 and hi_off = 1000
 * the range starts inside the first tensor and ends inside the last (a ZeRO-1 slice). */
static void test_adamw(hg_backend *cpu, hg_backend *gpu, size_t lo, size_t hi_off) {
    hg_table tab, wtab;
    const size_t E = adamw_tables(gpu, &tab, &wtab);
    size_t n = tab.bytes / 4, hi = n - hi_off, nr = hi - lo;
    trng r = trng_seed(71 + lo);
    float *p = fvec(n), *g = fvec(nr), *m = fvec(nr), *v = fvec(nr);
    fill(p, n, &r, -1, 1), fill(g, nr, &r, -1, 1), fill(m, nr, &r, -0.1, 0.1), fill(v, nr, &r, 1e-4, 1e-2);
    float *p0 = copy_of(p, n), *m0 = copy_of(m, nr), *v0 = copy_of(v, nr);
    hg_adamw_args a = {.p = p, .g = g, .m = m, .v = v, .params = &tab, .weights = &tab, .lo = lo, .n = nr,
                       .u = {.lr = 0.01f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f,
                             .bias_correction1 = 0.271f, .bias_correction2 = 0.142625f, .grad_scale = 0.6f}};
    cpu->ops->adamw(cpu, &a);
    hg_adamw_args ga = a;
    ga.p = dev_from(gpu, p0, n, 0), ga.g = dev_from(gpu, g, nr, 0), ga.m = dev_from(gpu, m0, nr, 0), ga.v = dev_from(gpu, v0, nr, 0);
    ga.weights = &wtab;
    ga.w = gpu->precision == HG_PRECISION_FP32 ? NULL : dev_poison(gpu, wtab.bytes / E, 1);
    gpu->ops->adamw(gpu, &ga);
    sync_or_fail(gpu, "adamw");
    char name[64];
    snprintf(name, sizeof name, "adamw p [%zu, %zu)", lo, hi);
    check(gpu, name, ga.p, p, n, 0, 1e-6); /* outside the range both keep p0 */
    check(gpu, "adamw m", ga.m, m, nr, 0, 1e-6);
    check(gpu, "adamw v", ga.v, v, nr, 0, 1e-6);
    if (ga.w) { /* inside the range, the copy is the GPU's own p rounded to nearest */
        float *gp = fvec(n), *w = fvec(wtab.bytes / E);
        dev_to_host(gpu, gp, ga.p, n, 0);
        dev_to_host(gpu, w, ga.w, wtab.bytes / E, 1);
        int bad = 0;
        for (int i = 0; i < tab.count; i++)
            for (int64_t j = 0; j < tab.specs[i].numel; j++) {
                size_t e = tab.specs[i].offset / 4 + (size_t)j;
                if (e >= lo && e < hi) bad += w[wtab.specs[i].offset / E + j] != bf16_round(gp[e]);
            }
        printf("  %-4s adamw bf16 copy = round-to-nearest of p (%d mismatches)\n", bad ? "FAIL" : "ok", bad);
        failures += bad > 0;
        free(gp), free(w);
    }
    dev_free_all(gpu);
    hg_table_free(&tab), hg_table_free(&wtab);
    free(p), free(g), free(m), free(v), free(p0), free(m0), free(v0);
}

/* With lr = 0 the masters stay put and the copy is a pure rounding: x = 1 + 2^-10 lies
 * 1/8 of the way from 1 to the next bf16 (1 + 2^-7), so stochastic rounding must give
 * only those two values, with mean x. */
static void test_stochastic_rounding(hg_backend *gpu) {
    if (gpu->precision != HG_PRECISION_BF16) return;
    const int64_t n = 1 << 16;
    hg_table tab, wtab;
    hg_table_init(&tab), hg_table_init(&wtab);
    hg_table_add(&tab, "t", 1, &n, 0, 1, 4, 0), hg_table_add(&wtab, "t", 1, &n, 0, 1, 2, 0);
    hg_table_layout(&tab), hg_table_layout(&wtab);
    const float x = 1.0f + 1.0f / 1024.0f, up = 1.0f + 1.0f / 128.0f;
    float *p = fvec(n), *z = fvec(n), *w = fvec(n);
    for (int64_t i = 0; i < n; i++) p[i] = x, z[i] = 1e-30f;
    hg_adamw_args a = {.p = dev_from(gpu, p, n, 0), .g = dev_from(gpu, z, n, 0), .m = dev_from(gpu, z, n, 0),
                       .v = dev_from(gpu, z, n, 0), .w = dev_poison(gpu, n, 1), .params = &tab, .weights = &wtab,
                       .n = (size_t)n,
                       .u = {.lr = 0.0f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .bias_correction1 = 1.0f,
                             .bias_correction2 = 1.0f, .grad_scale = 1.0f},
                       .stochastic = 1, .seed = 99, .step = 1};
    gpu->ops->adamw(gpu, &a);
    sync_or_fail(gpu, "adamw stochastic");
    dev_to_host(gpu, w, a.w, n, 1);
    double mean = 0.0;
    int other = 0;
    for (int64_t i = 0; i < n; i++) {
        mean += w[i];
        other += w[i] != 1.0f && w[i] != up;
    }
    mean /= (double)n;
    /* the mean of n draws: sd = (up - 1) sqrt(p (1-p) / n) = 1.0e-5; 6 sd */
    int bad = other > 0 || fabs(mean - x) > 6e-5;
    printf("  %-4s stochastic rounding: mean %.7f for %.7f, %d values off the two neighbours\n", bad ? "FAIL" : "ok", mean, (double)x,
           other);
    failures += bad;
    dev_free_all(gpu);
    hg_table_free(&tab), hg_table_free(&wtab);
    free(p), free(z), free(w);
}

/* AdamW with its moments in bf16 (hg_options.optim_state; written 2026-11-28 without a
 * GPU) over the range [lo, n - hi_off): the CPU's kernel on the same inputs, p to 1e-6,
 * and m and v bit for bit (both round with Philox(seed, element / 8, ROUNDING | k << 8,
 * step)), but for the rare element whose fp32 value differs in its last bit between the
 * two, which may round to the other neighbour. */
static void test_adamw_bf16_state(hg_backend *cpu, hg_backend *gpu, size_t lo, size_t hi_off) {
    hg_table tab, wtab;
    const size_t E = adamw_tables(gpu, &tab, &wtab);
    size_t n = tab.bytes / 4, hi = n - hi_off, nr = hi - lo;
    trng r = trng_seed(171 + lo);
    float *p = fvec(n), *g = fvec(nr), *mf = fvec(nr), *vf = fvec(nr);
    fill(p, n, &r, -1, 1), fill(g, nr, &r, -1, 1), fill(mf, nr, &r, -0.1, 0.1), fill(vf, nr, &r, 1e-4, 1e-2);
    uint16_t *mb = malloc(2 * nr), *vb = malloc(2 * nr), *gm = malloc(2 * nr), *gv = malloc(2 * nr);
    for (size_t i = 0; i < nr; i++) mb[i] = f32_to_bf16(mf[i]), vb[i] = f32_to_bf16(vf[i]);
    float *p0 = copy_of(p, n);
    hg_adamw_args a = {.p = p, .g = g, .m = mb, .v = vb, .params = &tab, .weights = &tab, .lo = lo, .n = nr,
                       .u = {.lr = 0.01f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f,
                             .bias_correction1 = 0.271f, .bias_correction2 = 0.142625f, .grad_scale = 0.6f},
                       .state = HG_PRECISION_BF16, .seed = 4242, .step = 9};
    hg_adamw_args ga = a;
    ga.p = dev_from(gpu, p0, n, 0), ga.g = dev_from(gpu, g, nr, 0), ga.m = dev_bytes(gpu, mb, 2 * nr);
    ga.v = dev_bytes(gpu, vb, 2 * nr), ga.weights = &wtab;
    ga.w = gpu->precision == HG_PRECISION_FP32 ? NULL : dev_poison(gpu, wtab.bytes / E, 1);
    cpu->ops->adamw(cpu, &a);
    gpu->ops->adamw(gpu, &ga);
    sync_or_fail(gpu, "adamw bf16 moments");
    check(gpu, "adamw (bf16 moments) p", ga.p, p, n, 0, 1e-6);
    gpu->ops->download(gpu, gm, ga.m, 2 * nr);
    gpu->ops->download(gpu, gv, ga.v, 2 * nr);
    sync_or_fail(gpu, "adamw bf16 moments download");
    int other = 0;
    for (size_t i = 0; i < nr; i++) other += (gm[i] != mb[i]) + (gv[i] != vb[i]);
    int bad = other > (int)(nr / 500);
    printf("  %-4s adamw bf16 moments [%zu, %zu): %d of %zu m and v elements differ from the CPU's\n", bad ? "FAIL" : "ok",
           lo, hi, other, 2 * nr);
    failures += bad;
    dev_free_all(gpu);
    hg_table_free(&tab), hg_table_free(&wtab);
    free(p), free(g), free(mf), free(vf), free(mb), free(vb), free(gm), free(gv), free(p0);
}

static void test_sumsq(hg_backend *cpu, hg_backend *gpu) {
    const size_t n = 200003;
    trng r = trng_seed(81);
    float *x = fvec(n);
    fill(x, n, &r, -2, 2);
    double want, got;
    cpu->ops->sumsq(cpu, x, HG_PRECISION_FP32, n, &want);
    gpu->ops->sumsq(gpu, dev_from(gpu, x, n, 0), HG_PRECISION_FP32, n, &got);
    sync_or_fail(gpu, "sumsq");
    int bad = !(fabs(got - want) <= 1e-12 * want);
    printf("  %-4s sumsq %.17g, cpu %.17g\n", bad ? "FAIL" : "ok", got, want);
    failures += bad;
    dev_free_all(gpu);
    free(x);
}

/* ---- groups: each runs in its own process when named on the command line ---- */

static void g_encoder(hg_backend *cpu, hg_backend *gpu) {
    test_encoder(cpu, gpu, 0.0f, NULL);
    test_encoder(cpu, gpu, 0.1f, NULL);
    hg_backend *det = cuda_backend_flags_or_skip(gpu->precision, HG_FLAG_DETERMINISTIC);
    test_encoder_ordered(cpu, det);
    det->ops->destroy(det);
}

static void g_norm(hg_backend *cpu, hg_backend *gpu) {
    test_norm(cpu, gpu, 96, &LN, NORM_W | NORM_B);
    test_norm(cpu, gpu, 768, &LN, NORM_W | NORM_B);
    test_norm(cpu, gpu, 96, &LN, 0);
    test_norm(cpu, gpu, 77, &LN, NORM_B);
    test_norm(cpu, gpu, 96, &RMS, NORM_W);
    test_norm(cpu, gpu, 77, &RMS, 0);
    test_norm(cpu, gpu, 768, &RMS, NORM_W);
}

static void g_qk_norm(hg_backend *cpu, hg_backend *gpu) {
    test_qk_norm(cpu, gpu, 37, 4, 2, 32, 1, 0); /* Qwen3's: a weight per q and per k */
    test_qk_norm(cpu, gpu, 19, 3, 1, 128, 1, 0);
    test_qk_norm(cpu, gpu, 23, 2, 2, 64, 0, 0);
    test_qk_norm(cpu, gpu, 37, 4, 2, 32, 1, 1); /* OLMo 2's: one weight over all q, one over all k */
    test_qk_norm(cpu, gpu, 19, 12, 4, 64, 1, 1);
}

static void g_matmul(hg_backend *cpu, hg_backend *gpu) {
    test_matmul(cpu, gpu, 111, 96, 288, 0);
    test_matmul(cpu, gpu, 111, 384, 96, 0);
    test_matmul(cpu, gpu, 111, 96, 384, 1);
    test_matmul(cpu, gpu, 111, 100, 300, 1); /* d_ff not a multiple of 8: the unfused epilogue */
    test_gelu(cpu, gpu);
    /* the bias gradients above ran in the dW GEMM's epilogue (BGRADA) unless epilogues
     * are forced off; a cuBLASLt that refuses it falls back to the column sums, which the
     * checks pass too, so the path is named and, in bf16, required */
    const char *e = gpu->ops->gemm_epilogues(gpu), *unfused = getenv("HANDGRAD_CUDA_UNFUSED");
    const char *bg = e ? strstr(e, "bgrad ") : NULL;
    printf("    GEMM epilogues, %s\n", e ? e : "?");
    const char *off = getenv("HANDGRAD_CUDA_BGRAD");
    if (gpu->precision == HG_PRECISION_BF16 && !(unfused && !strcmp(unfused, "1")) && !(off && !strcmp(off, "off")) &&
        (!bg || atoi(bg + 6) == 0)) {
        printf("  FAIL no bias gradient ran in cuBLASLt's epilogue (BGRADA)\n");
        failures++;
    }
}

static void g_activation(hg_backend *cpu, hg_backend *gpu) {
    test_activation(cpu, gpu, HG_MLP_SWIGLU, 111, 173);
    test_activation(cpu, gpu, HG_MLP_GEGLU, 111, 173);
    test_activation(cpu, gpu, HG_MLP_RELU2, 111, 173);
}

static void g_rope(hg_backend *cpu, hg_backend *gpu) {
    test_rope(cpu, gpu, 2, 37, 0, 3, 3, 32, 0);
    test_rope(cpu, gpu, 1, 5, 20, 4, 2, 64, 0);
    test_rope(cpu, gpu, 3, 19, 0, 2, 1, 128, 0);
    test_rope(cpu, gpu, 2, 37, 3, 4, 2, 64, 26); /* partial: 26 of 64 dims turn */
}

static void attention_shapes(hg_backend *cpu, hg_backend *gpu) {
    test_attention(cpu, gpu, 2, 37, 3, 0, 32, 1);
    test_attention(cpu, gpu, 1, 130, 2, 0, 64, 1);
    test_attention(cpu, gpu, 2, 70, 1, 0, 128, 1);
    test_attention(cpu, gpu, 1, 100, 2, 0, 64, 0);
    test_attention(cpu, gpu, 1, 64, 4, 0, 16, 1);
    test_attention(cpu, gpu, 2, 37, 4, 2, 32, 1); /* grouped-query */
    test_attention(cpu, gpu, 1, 130, 6, 2, 48, 1);
    test_attention(cpu, gpu, 2, 70, 3, 1, 128, 1); /* one kv head */
    test_attention(cpu, gpu, 1, 100, 4, 2, 64, 0);
    /* multiples of 128 (cuDNN before 9.16 runs only those backward), a longer row */
    test_attention(cpu, gpu, 2, 256, 4, 0, 64, 1);
    test_attention(cpu, gpu, 1, 384, 2, 0, 128, 1);
    test_attention(cpu, gpu, 1, 128, 6, 2, 64, 1);
    test_attention(cpu, gpu, 1, 200, 2, 0, 128, 1);
    /* Gemma 2's score cap, at 1.0 so that it bends these scores (standard deviation 0.75),
     * on the own kernels whatever cuDNN takes; Gemma's head size 256, on cuDNN where it
     * takes it, else the row kernels */
    test_attention_cap(cpu, gpu, 2, 37, 3, 0, 32, 1, 1.0f);
    test_attention_cap(cpu, gpu, 1, 130, 4, 2, 64, 1, 1.0f);
    test_attention_cap(cpu, gpu, 2, 70, 2, 1, 128, 1, 1.0f);
    test_attention(cpu, gpu, 1, 70, 2, 0, 256, 1);
    test_attention_cap(cpu, gpu, 1, 130, 4, 2, 256, 1, 1.0f);
}

/* The backend as the library makes it: in bf16, cuDNN's fused attention where cuDNN is
 * loaded (docs/cuda.md), else the own kernels. Where cuDNN is loaded, the multi-head
 * shapes at head widths 64 and 128 must have run on it (a refusal is a failure here:
 * the fallback would hide a broken graph). */
static void g_attention(hg_backend *cpu, hg_backend *gpu) {
    attention_on_cudnn = cudnn_loaded = 0;
    attention_shapes(cpu, gpu);
    if (cudnn_loaded && attention_on_cudnn < 3) {
        printf("  FAIL cuDNN is loaded, but only %d shape(s) ran both directions on it\n", attention_on_cudnn);
        failures++;
    }
}

/* The own kernels, as --deterministic runs them (in bf16 the same shapes as above). */
static void g_attention_own(hg_backend *cpu, hg_backend *gpu) {
    hg_backend *own = cuda_backend_flags_or_skip(gpu->precision, HG_FLAG_DETERMINISTIC);
    attention_shapes(cpu, own);
    own->ops->destroy(own);
}

static void g_classifier(hg_backend *cpu, hg_backend *gpu) {
    test_classifier(cpu, gpu, 0, 0);
    test_classifier(cpu, gpu, 1, 0);
    test_classifier(cpu, gpu, 0, 1);
    test_classifier(cpu, gpu, 1, 1);
}

static void g_adamw(hg_backend *cpu, hg_backend *gpu) {
    test_adamw(cpu, gpu, 0, 0);
    test_adamw(cpu, gpu, 640, 1000);
    test_stochastic_rounding(gpu);
    test_sumsq(cpu, gpu);
}

/* AdamW with bf16 moments (written 2026-11-28 without a GPU), whole and a ZeRO-1-like
 * slice. */
static void g_adamw_state(hg_backend *cpu, hg_backend *gpu) {
    test_adamw_bf16_state(cpu, gpu, 0, 0);
    test_adamw_bf16_state(cpu, gpu, 640, 1000);
}

static void g_cached(hg_backend *cpu, hg_backend *gpu) {
    test_attention_cached(cpu, gpu, 0, 9, 3, 0, 32, 0.0f);
    test_attention_cached(cpu, gpu, 12, 1, 3, 0, 32, 0.0f);
    test_attention_cached(cpu, gpu, 0, 9, 4, 2, 32, 0.0f);
    test_attention_cached(cpu, gpu, 12, 1, 6, 1, 32, 0.0f);
    test_attention_cached(cpu, gpu, 12, 1, 4, 2, 256, 1.0f); /* Gemma 2's head size and cap */
}

/* Sliding windows (written 2026-11-28 without a GPU): the flash kernels (bf16: head
 * widths 64 and 128, windows inside a block, across blocks, of one key, with the cap)
 * and the row kernels (fp32, and head size 256), then the KV cache. */
static void g_attention_window(hg_backend *cpu, hg_backend *gpu) {
    test_attention_window(cpu, gpu, 2, 200, 4, 2, 64, 1, 0.0f, 37);
    test_attention_window(cpu, gpu, 1, 300, 2, 0, 64, 1, 0.0f, 128);
    test_attention_window(cpu, gpu, 2, 130, 3, 0, 32, 1, 0.0f, 1);
    test_attention_window(cpu, gpu, 1, 200, 4, 1, 128, 1, 1.0f, 50);
    test_attention_window(cpu, gpu, 1, 130, 4, 2, 256, 1, 0.0f, 40);
    test_attention_cached_window(cpu, gpu, 12, 1, 4, 2, 32, 0.0f, 5);
    test_attention_cached_window(cpu, gpu, 0, 9, 3, 0, 32, 0.0f, 4);
    test_attention_cached_window(cpu, gpu, 30, 5, 4, 2, 256, 1.0f, 7);
}

/* Packed documents (written 2026-11-28 without a GPU): the encoder (positions past T, and
 * dwpe summed by position) and the rotary embedding at each token's position; the flash
 * kernels (bf16: widths 64 and 128, documents shorter and longer than a 64-key block,
 * one-token documents, rows that begin inside a document, with a window and with the
 * cap) and the row kernels (fp32, and head size 256). */
static void g_attention_docs(hg_backend *cpu, hg_backend *gpu) {
    int32_t *pos = doc_positions(3, 37, 6);
    test_encoder(cpu, gpu, 0.0f, pos);
    test_encoder(cpu, gpu, 0.1f, pos);
    test_rope_at(cpu, gpu, 3, 37, 0, 4, 2, 32, 0, pos);
    test_rope_at(cpu, gpu, 3, 37, 0, 4, 2, 32, 16, pos);
    free(pos);
    test_attention_docs(cpu, gpu, 2, 200, 4, 2, 64, 0.0f, 0, 20);
    test_attention_docs(cpu, gpu, 2, 300, 2, 0, 64, 0.0f, 0, 100);
    test_attention_docs(cpu, gpu, 1, 260, 4, 1, 128, 0.0f, 0, 64);
    test_attention_docs(cpu, gpu, 2, 200, 4, 2, 128, 1.0f, 30, 50);
    test_attention_docs(cpu, gpu, 1, 130, 4, 2, 256, 0.0f, 0, 17);
}

static const struct {
    const char *name;
    void (*run)(hg_backend *cpu, hg_backend *gpu);
} groups[] = {{"encoder", g_encoder},     {"norm", g_norm},           {"qk_norm", g_qk_norm},
              {"matmul", g_matmul},       {"activation", g_activation}, {"rope", g_rope},
              {"attention", g_attention}, {"attention_own", g_attention_own}, {"classifier", g_classifier},
              {"adamw", g_adamw}, {"attention_cached", g_cached}, {"attention_window", g_attention_window},
              {"adamw_state", g_adamw_state}, {"attention_docs", g_attention_docs}};
enum { NGROUPS = sizeof groups / sizeof groups[0] };

/* test_cuda_ops                  every group, fp32 then bf16, in this process
 * test_cuda_ops PRECISION [GROUP] one precision (fp32 or bf16), one group or all
 * test_cuda_ops --list           the groups, one per line
 * A sticky CUDA error ends the process (dev_to_host exits): scripts/gpu_session.sh runs
 * each precision and group in a process of its own, so one does not hide the others. */
int main(int argc, char **argv) {
    static const hg_precision precisions[] = {HG_PRECISION_FP32, HG_PRECISION_BF16};
    static const char *const pnames[] = {"fp32", "bf16"};
    if (argc == 2 && !strcmp(argv[1], "--list")) {
        for (int g = 0; g < NGROUPS; g++) printf("%s\n", groups[g].name);
        return 0;
    }
    const char *want_p = argc > 1 ? argv[1] : NULL, *want_g = argc > 2 ? argv[2] : NULL;
    int known_p = !want_p || !strcmp(want_p, "fp32") || !strcmp(want_p, "bf16"), known_g = !want_g;
    for (int g = 0; g < NGROUPS; g++) known_g |= want_g && !strcmp(want_g, groups[g].name);
    if (argc > 3 || !known_p || !known_g) {
        fprintf(stderr, "usage: test_cuda_ops [fp32|bf16 [GROUP]] | --list (unknown %s '%s')\n", known_p ? "group" : "precision",
                known_p ? (want_g ? want_g : "") : want_p);
        return 2;
    }
    for (int k = 0; k < 2; k++) {
        if (want_p && strcmp(want_p, pnames[k])) continue;
        hg_backend *gpu = cuda_backend_or_skip(precisions[k]), *cpu = NULL;
        if (hg_backend_cpu_create(&cpu, 2, HG_PRECISION_FP32) != HG_OK) return 1;
        for (int g = 0; g < NGROUPS; g++) {
            if (want_g && strcmp(want_g, groups[g].name)) continue;
            printf("%s %s:\n", pnames[k], groups[g].name);
            groups[g].run(cpu, gpu);
        }
        cpu->ops->destroy(cpu);
        gpu->ops->destroy(gpu);
    }
    printf(failures ? "%d check(s) failed\n" : "ok\n", failures);
    return failures ? 1 : 0;
}
