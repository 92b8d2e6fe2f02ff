/* The CPU backend's bf16 ops against its fp32 ops fed the same bf16-rounded inputs.
 *
 * Every op runs on a bf16 backend (inputs as bf16) and on an fp32 backend (the same
 * values, rounded to bf16 and held in fp32). The fp32 ops are held to float64 references
 * by test_ops; here the bf16 op must give what the fp32 op gives, up to rounding its
 * results to bf16. The residual stream, its gradient and the norms' weights are fp32 on
 * both sides (the CPU's residual type), and so are the fp32 results, which must then
 * agree to summation order.
 * Outputs are poisoned with NaN before each call; outputs that accumulate are prefilled
 * with the same values on both sides.
 *
 * Tolerances, with u = 2^-8 the unit roundoff of bf16's 8-bit significand (rounding to
 * nearest moves a value by at most u |value|):
 *   - an output rounded once from the fp32 op's arithmetic: |bf16 - fp32| <= u |fp32|,
 *     plus 64 fp32 units (2^-18) of its magnitude where the two sides may sum in another
 *     order (oneDNN's bf16 kernels against its fp32 ones);
 *   - fp32 outputs (parameter gradients, statistics, losses) computed from the same
 *     values: 2^-18 relative, for summation order;
 *   - the classifier, whose logits are rounded to bf16 before the softmax (as in
 *     PyTorch's autocast): a logit moves by u |z|, so a loss by at most 2 u max|z| of its
 *     row, and the gradients by a relative 2 u (1 + 2 max|z|), checked as a norm;
 *   - attention's dK and dV cut into query chunks (few kv heads per thread): the partial
 *     sums are added into the bf16 rows, one rounding each; checked as a norm, 4u.
 * Then the same with HANDGRAD_BF16=portable where oneDNN has bf16 kernels on this CPU,
 * so the portable path and the fast kernels are both held to the fp32 op. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/bf16.h"
#include "backend/cpu/cpu.h"
#include "check.h"
#include "core/rng.h"
#include "ops_util.h"

#define UB 0.00390625 /* 2^-8 */
#define SUM_SLACK 3.814697265625e-06 /* 2^-18 */

static hg_backend *F, *H; /* fp32 and bf16, 2 threads */

static uint16_t *bvec(size_t n) {
    uint16_t *p = malloc(n ? n * 2 : 2);
    if (!p) abort();
    return p;
}
/* x rounded to bf16 in place; and as a bf16 copy. */
static void rnd(float *x, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] = bf16_round(x[i]);
}
static uint16_t *to_bf(const float *x, size_t n) {
    uint16_t *b = bvec(n);
    for (size_t i = 0; i < n; i++) b[i] = f32_to_bf16(x[i]);
    return b;
}
static void bpoison(uint16_t *x, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] = 0x7FC1;
}
/* Random values in [lo, hi), already bf16: the fp32 copy and the bf16 copy. */
static float *rvec(size_t n, trng *r, double lo, double hi, uint16_t **b) {
    float *x = fvec(n);
    fill(x, n, r, lo, hi);
    rnd(x, n);
    *b = to_bf(x, n);
    return x;
}

/* |got - want| <= k u |want| + SUM_SLACK |want| + atol elementwise. */
static int close_bf(const char *what, const uint16_t *got, const float *want, size_t n, double k, double atol) {
    int bad = 0;
    double worst = 0.0;
    for (size_t i = 0; i < n; i++) {
        double g = bf16_to_f32(got[i]), w = want[i], tol = (k * UB + SUM_SLACK) * fabs(w) + atol;
        double e = fabs(g - w);
        if (tol > 0 && e / tol > worst) worst = e / tol;
        if (!(e <= tol)) {
            if (bad < 5) fprintf(stderr, "  %s[%zu]: bf16 %.9g, fp32 %.9g (tol %.3g)\n", what, i, g, w, tol);
            bad++;
        }
    }
    if (ops_verbose) printf("  %-44s worst %.3f of tolerance\n", what, worst);
    if (bad) fprintf(stderr, "FAIL %s: %d of %zu elements\n", what, bad, n);
    return bad;
}
/* fp32 results of both sides: |got - want| <= 2^-18 (|want| + scale). */
static int close_f(const char *what, const float *got, const float *want, size_t n, double scale) {
    int bad = 0;
    for (size_t i = 0; i < n; i++)
        if (!(fabs((double)got[i] - want[i]) <= SUM_SLACK * (fabs(want[i]) + scale))) {
            if (bad < 5) fprintf(stderr, "  %s[%zu]: bf16 side %.9g, fp32 side %.9g\n", what, i, got[i], want[i]);
            bad++;
        }
    if (bad) fprintf(stderr, "FAIL %s: %d of %zu elements\n", what, bad, n);
    return bad;
}
/* ||got - want|| / ||want|| <= tol. */
static int close_norm(const char *what, const uint16_t *got, const float *want, size_t n, double tol) {
    double d = 0.0, w = 0.0;
    for (size_t i = 0; i < n; i++) {
        double g = bf16_to_f32(got[i]);
        d += (g - want[i]) * (g - want[i]), w += (double)want[i] * want[i];
    }
    double rel = sqrt(d / w);
    if (ops_verbose) printf("  %-44s relative %.3g (tol %.3g)\n", what, rel, tol);
    if (!(rel <= tol)) {
        fprintf(stderr, "FAIL %s: relative error %.3g > %.3g\n", what, rel, tol);
        return 1;
    }
    return 0;
}
static double max_abs(const float *x, size_t n) {
    double m = 0.0;
    for (size_t i = 0; i < n; i++) m = fmax(m, fabs(x[i]));
    return m;
}

/* ---- conversions ---- */

/* Round to nearest even, decided in double: the two bf16 neighbours of x and the nearer. */
static uint16_t ref_bf16(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    if (isnan(x)) return (uint16_t)(u >> 16 | 0x40);
    if (isinf(x)) return (uint16_t)(u >> 16);
    uint16_t lo = (uint16_t)(u >> 16), hi = (uint16_t)(lo + 1);
    double dl = fabs((double)x - bf16_to_f32(lo)), dh = fabs((double)x - bf16_to_f32(hi));
    return dl < dh ? lo : dh < dl ? hi : (lo & 1) ? hi : lo;
}

static void test_to_compute(void) {
    enum { N = 5000 };
    trng r = trng_seed(1);
    float *x = fvec(N);
    fill(x, N, &r, -3, 3);
    /* halfway cases, both parities, carries into the exponent, large and tiny values */
    const float special[] = {1.00390625f, 1.01171875f, 1.99609375f, -1.99609375f, 3.3895314e38f, 1e-40f, 0.0f, -0.0f,
                             INFINITY, -INFINITY, NAN};
    memcpy(x, special, sizeof special);
    uint16_t *w = bvec(N);
    bpoison(w, N);
    H->ops->to_compute(H, w, x, N);
    int bad = 0;
    for (int i = 0; i < N; i++) bad += w[i] != ref_bf16(x[i]);
    CHECK(bad == 0);
    CHECK(w[0] == 0x3F80 && w[1] == 0x3F82); /* 1 + 2^-8 ties down to 1; 1 + 3 2^-8 up */
    free(x), free(w);
}

/* ---- elementwise and row ops ---- */

static void test_encoder(float p) {
    enum { B = 2, T = 37, C = 96, V = 300, TMAX = 64, N = B * T };
    const hg_dropout drop = {.p = p, .seed = 7, .step = 2, .site = 0};
    trng r = trng_seed(10);
    int32_t tok[N];
    for (int n = 0; n < N; n++) tok[n] = n % 5 ? trng_int(&r, V) : 3; /* colliding ids */
    uint16_t *wte_b, *wpe_b;
    float *wte = rvec(V * C, &r, -1, 1, &wte_b), *wpe = rvec(TMAX * C, &r, -1, 1, &wpe_b), *dout = fvec(N * C);
    fill(dout, N * C, &r, -1, 1);
    float *want = fvec(N * C), *got = fvec(N * C); /* the residual stream: fp32 */
    poison(want, N * C), poison(got, N * C);
    F->ops->encoder_forward(F, want, tok, NULL, wte, wpe, B, T, C, 1.5f, &drop);
    H->ops->encoder_forward(H, got, tok, NULL, (float *)wte_b, (float *)wpe_b, B, T, C, 1.5f, &drop);
    check_failures += close_f(p > 0 ? "encoder forward, dropout" : "encoder forward", got, want, N * C, 0.0);
    /* backward: fp32 gradients prefilled alike */
    float *dte[2], *dpe[2];
    for (int k = 0; k < 2; k++) {
        trng q = trng_seed(11);
        dte[k] = fvec(V * C), dpe[k] = fvec(TMAX * C);
        fill(dte[k], V * C, &q, -1, 1), fill(dpe[k], TMAX * C, &q, -1, 1);
    }
    F->ops->encoder_backward(F, dte[0], dpe[0], dout, tok, NULL, B, T, C, 1.5f, &drop);
    H->ops->encoder_backward(H, dte[1], dpe[1], dout, tok, NULL, B, T, C, 1.5f, &drop);
    check_failures += close_f("encoder backward dwte", dte[1], dte[0], V * C, 1.0);
    check_failures += close_f("encoder backward dwpe", dpe[1], dpe[0], TMAX * C, 1.0);
    free(wte), free(wpe), free(dout), free(want), free(got), free(wte_b), free(wpe_b);
    for (int k = 0; k < 2; k++) free(dte[k]), free(dpe[k]);
}

static void test_elementwise(void) {
    enum { N = 37, F1 = 2100 }; /* a width past one block of CPU_BLOCK */
    const size_t n = (size_t)N * F1;
    trng r = trng_seed(20);
    uint16_t *x_b, *dy_b;
    float *x = rvec(2 * n, &r, -4, 4, &x_b), *dy = rvec(n, &r, -1, 1, &dy_b);
    float *want = fvec(2 * n);
    uint16_t *got = bvec(2 * n);
    /* GELU */
    poison(want, n), bpoison(got, n);
    F->ops->gelu_forward(F, want, x, n);
    H->ops->gelu_forward(H, (float *)got, (float *)x_b, n);
    check_failures += close_bf("gelu forward", got, want, n, 1, 0);
    poison(want, n), bpoison(got, n);
    F->ops->gelu_backward(F, want, x, dy, n);
    H->ops->gelu_backward(H, (float *)got, (float *)x_b, (float *)dy_b, n);
    check_failures += close_bf("gelu backward", got, want, n, 1, 0);
    /* SwiGLU and GeGLU (pre 2F wide), ReLU^2 */
    for (int kind = 0; kind < 3; kind++) {
        hg_mlp_kind k = kind == 2 ? HG_MLP_RELU2 : kind ? HG_MLP_GEGLU : HG_MLP_SWIGLU;
        size_t npre = hg_mlp_gated(k) ? 2 * n : n;
        const char *name[3][2] = {{"swiglu forward", "swiglu backward"}, {"geglu forward", "geglu backward"},
                                  {"relu2 forward", "relu2 backward"}};
        poison(want, n), bpoison(got, n);
        F->ops->activation_forward(F, k, want, x, N, F1);
        H->ops->activation_forward(H, k, (float *)got, (float *)x_b, N, F1);
        check_failures += close_bf(name[kind][0], got, want, n, 1, 0);
        poison(want, npre), bpoison(got, npre);
        F->ops->activation_backward(F, k, want, x, dy, N, F1);
        H->ops->activation_backward(H, k, (float *)got, (float *)x_b, (float *)dy_b, N, F1);
        check_failures += close_bf(name[kind][1], got, want, npre, 1, 0);
    }
    /* dropout backward, from the fp32 residual gradient; with p = 0 a conversion */
    float *dres = fvec(n);
    fill(dres, n, &r, -1, 1);
    for (int on = 0; on < 2; on++) {
        const hg_dropout drop = {.p = on ? 0.25f : 0.0f, .seed = 3, .step = 1, .site = 4};
        poison(want, n), bpoison(got, n);
        F->ops->dropout_backward(F, want, dres, n, &drop);
        H->ops->dropout_backward(H, (float *)got, dres, n, &drop);
        check_failures += close_bf(on ? "dropout backward" : "dropout backward, p = 0", got, want, n, 1, 0);
    }
    free(dres);
    free(x), free(dy), free(want), free(got), free(x_b), free(dy_b);
}

/* rot: the rotated dims (0: all). */
static void test_rope(int rot) {
    const hg_rope_shape s = {.B = 2, .T = 19, .pos0 = 3, .NH = 4, .NKV = 2, .hs = 32, .rot = rot};
    const int W = (s.NH + 2 * s.NKV) * s.hs, TMAX = 32, R = hg_rope_dims(&s);
    const size_t n = (size_t)s.B * s.T * W;
    trng r = trng_seed(30);
    float *cs = fvec((size_t)TMAX * R);
    for (int p = 0; p < TMAX; p++)
        for (int i = 0; i < R / 2; i++) {
            double a = p * pow(10000.0, -2.0 * i / R);
            cs[p * R + i] = (float)cos(a), cs[p * R + R / 2 + i] = (float)sin(a);
        }
    uint16_t *x_b;
    float *x = rvec(n, &r, -2, 2, &x_b);
    for (int back = 0; back < 2; back++) {
        float *want = fvec(n);
        uint16_t *got = bvec(n);
        memcpy(want, x, n * 4), memcpy(got, x_b, n * 2); /* in place */
        (back ? F->ops->rope_backward : F->ops->rope_forward)(F, want, cs, &s);
        (back ? H->ops->rope_backward : H->ops->rope_forward)(H, (float *)got, cs, &s);
        check_failures += close_bf(back ? "rope backward" : "rope forward", got, want, n, 1, 0);
        free(want), free(got);
    }
    free(cs), free(x), free(x_b);
}

/* ---- norms ---- */

/* The residual stream (x, res_in, res_out, dinp) and the weights are fp32 on both sides;
 * d (the branch output), out and dout are bf16 on the bf16 side. */
static void test_norm(int rms, int affine, float drop_p) {
    enum { N = 45, C = 160 };
    const hg_norm_spec ns = {rms, 1e-5f, 0};
    const hg_dropout drop = {.p = drop_p, .seed = 9, .step = 4, .site = 3};
    trng r = trng_seed(40 + (uint64_t)rms * 2 + (uint64_t)affine);
    uint16_t *d_b, *dy_b;
    float *x = fvec(N * C), *d = rvec(N * C, &r, -1, 1, &d_b), *w = fvec(C), *b = fvec(C);
    float *dy = rvec(N * C, &r, -1, 1, &dy_b), *pre = fvec(N * C);
    fill(x, N * C, &r, -2, 2), fill(pre, N * C, &r, -1, 1), fill(w, C, &r, 0.5, 1.5), fill(b, C, &r, -0.5, 0.5);
    const float *wf = affine ? w : NULL, *bf = affine && !rms ? b : NULL, *wh = wf, *bh = bf;
    float *want = fvec(N * C), *res[2] = {fvec(N * C), fvec(N * C)}, *mean[2], *rstd[2];
    uint16_t *got = bvec(N * C);
    for (int k = 0; k < 2; k++) mean[k] = fvec(N), rstd[k] = fvec(N);
    char name[96];
    const char *kind = rms ? "rmsnorm" : "layernorm";

    poison(want, N * C), bpoison(got, N * C);
    F->ops->layernorm_forward(F, want, mean[0], rstd[0], x, wf, bf, N, C, &ns);
    H->ops->layernorm_forward(H, (float *)got, mean[1], rstd[1], x, wh, bh, N, C, &ns);
    snprintf(name, sizeof name, "%s forward%s", kind, affine ? "" : " (no affine)");
    check_failures += close_bf(name, got, want, N * C, 1, 0);
    check_failures += close_f("norm rstd", rstd[1], rstd[0], N, 0.0);
    if (!rms) check_failures += close_f("norm mean", mean[1], mean[0], N, 1.0);

    poison(want, N * C), bpoison(got, N * C), poison(res[0], N * C), poison(res[1], N * C);
    F->ops->residual_layernorm_forward(F, res[0], want, mean[0], rstd[0], x, d, wf, bf, N, C, &drop, &ns);
    H->ops->residual_layernorm_forward(H, res[1], (float *)got, mean[1], rstd[1], x, (float *)d_b, wh, bh, N, C, &drop, &ns);
    snprintf(name, sizeof name, "residual+%s forward%s", kind, drop_p > 0 ? ", dropout" : "");
    check_failures += close_bf(name, got, want, N * C, 1, 0);
    check_failures += close_f("residual sum", res[1], res[0], N * C, 0.0);
    check_failures += close_f("residual norm rstd", rstd[1], rstd[0], N, 0.0);

    /* backward: dinp (fp32) accumulates into the same prefill; dw, db fp32 */
    float *dw[2], *db[2];
    for (int k = 0; k < 2; k++) {
        trng q = trng_seed(41);
        dw[k] = fvec(C), db[k] = fvec(C);
        fill(dw[k], C, &q, -1, 1), fill(db[k], C, &q, -1, 1);
    }
    float *scratch = fvec(F->ops->layernorm_scratch_bytes(F, N, C) / 4);
    memcpy(res[0], pre, N * C * 4), memcpy(res[1], pre, N * C * 4);
    F->ops->layernorm_forward(F, want, mean[0], rstd[0], x, wf, bf, N, C, &ns);
    F->ops->layernorm_backward(F, res[0], affine ? dw[0] : NULL, affine && !rms ? db[0] : NULL, dy, x, wf, mean[0], rstd[0],
                               N, C, scratch, &ns);
    H->ops->layernorm_backward(H, res[1], affine ? dw[1] : NULL, affine && !rms ? db[1] : NULL, (float *)dy_b, x, wh,
                               mean[0], rstd[0], N, C, scratch, &ns);
    snprintf(name, sizeof name, "%s backward dinp (accumulated)", kind);
    check_failures += close_f(name, res[1], res[0], N * C, 1.0);
    if (affine) check_failures += close_f("norm backward dw", dw[1], dw[0], C, (double)N);
    if (affine && !rms) check_failures += close_f("norm backward db", db[1], db[0], C, (double)N);
    free(x), free(d), free(w), free(b), free(dy), free(pre), free(want), free(res[0]), free(res[1]), free(got), free(scratch);
    free(d_b), free(dy_b);
    for (int k = 0; k < 2; k++) free(mean[k]), free(rstd[k]), free(dw[k]), free(db[k]);
}

static void test_qk_norm(int whole) {
    const hg_qk_norm_shape s = {.N = 23, .NH = 4, .NKV = 2, .hs = 32, .eps = 1e-6f, .whole = whole};
    int nq, uq, nk, uk;
    hg_qk_norm_units(&s, &nq, &uq, &nk, &uk);
    const int U = nq + nk, H2 = s.NH + s.NKV, W = (s.NH + 2 * s.NKV) * s.hs;
    const size_t n = (size_t)s.N * W, nraw = (size_t)s.N * H2 * s.hs;
    trng r = trng_seed(50);
    uint16_t *x_b, *dy_b;
    float *x = rvec(n, &r, -2, 2, &x_b), *wq = fvec(uq), *wk = fvec(uk), *dy = rvec(n, &r, -1, 1, &dy_b);
    fill(wq, uq, &r, 0.5, 1.5), fill(wk, uk, &r, 0.5, 1.5); /* norm weights: fp32 */
    float *want = fvec(n), *raw = fvec(nraw), *rstd[2];
    uint16_t *got = bvec(n), *raw_b = bvec(nraw);
    for (int k = 0; k < 2; k++) rstd[k] = fvec((size_t)s.N * U);
    memcpy(want, x, n * 4), memcpy(got, x_b, n * 2);
    poison(raw, nraw), bpoison(raw_b, nraw);
    F->ops->qk_norm_forward(F, want, raw, rstd[0], wq, wk, &s);
    H->ops->qk_norm_forward(H, (float *)got, (float *)raw_b, rstd[1], wq, wk, &s);
    check_failures += close_bf(whole ? "qk norm (whole) forward" : "qk norm forward", got, want, n, 1, 0);
    check_failures += close_bf("qk norm raw copy", raw_b, raw, nraw, 0, 0);
    check_failures += close_f("qk norm rstd", rstd[1], rstd[0], (size_t)s.N * U, 0.0);
    float *dwq[2], *dwk[2];
    for (int k = 0; k < 2; k++) {
        trng q = trng_seed(51);
        dwq[k] = fvec(uq), dwk[k] = fvec(uk);
        fill(dwq[k], uq, &q, -1, 1), fill(dwk[k], uk, &q, -1, 1);
    }
    float *scratch = fvec(F->ops->layernorm_scratch_bytes(F, s.N, uq > uk ? uq : uk) / 4);
    memcpy(want, dy, n * 4), memcpy(got, dy_b, n * 2);
    F->ops->qk_norm_backward(F, want, dwq[0], dwk[0], raw, rstd[0], wq, wk, &s, scratch);
    H->ops->qk_norm_backward(H, (float *)got, dwq[1], dwk[1], (float *)raw_b, rstd[0], wq, wk, &s, scratch);
    check_failures += close_bf("qk norm backward", got, want, n, 1, 0);
    check_failures += close_f("qk norm backward dwq", dwq[1], dwq[0], uq, (double)s.N * nq);
    check_failures += close_f("qk norm backward dwk", dwk[1], dwk[0], uk, (double)s.N * nk);
    free(x), free(wq), free(wk), free(dy), free(want), free(raw), free(got), free(raw_b), free(scratch);
    free(x_b), free(dy_b);
    for (int k = 0; k < 2; k++) free(rstd[k]), free(dwq[k]), free(dwk[k]);
}

/* A post norm (ns.branch): its input is a branch output and its input gradient the
 * branch's, both bf16 on the bf16 side; the gradient accumulates into a bf16 prefill
 * (one rounding of the sum). */
static void test_post_norm(int rms) {
    enum { N = 29, C = 96 };
    const hg_norm_spec ns = {rms, 1e-5f, 1};
    trng r = trng_seed(48 + (uint64_t)rms);
    uint16_t *x_b, *dy_b, *pre_b;
    float *x = rvec(N * C, &r, -0.2, 0.2, &x_b), *dy = rvec(N * C, &r, -1, 1, &dy_b), *pre = rvec(N * C, &r, -1, 1, &pre_b);
    float *w = fvec(C), *b = fvec(C), *want = fvec(N * C), *mean[2] = {fvec(N), fvec(N)}, *rstd[2] = {fvec(N), fvec(N)};
    fill(w, C, &r, 0.5, 1.5), fill(b, C, &r, -0.5, 0.5);
    const float *bias = rms ? NULL : b;
    uint16_t *got = bvec(N * C);
    poison(want, N * C), bpoison(got, N * C);
    F->ops->layernorm_forward(F, want, mean[0], rstd[0], x, w, bias, N, C, &ns);
    H->ops->layernorm_forward(H, (float *)got, mean[1], rstd[1], (float *)x_b, w, bias, N, C, &ns);
    check_failures += close_bf(rms ? "post rmsnorm forward" : "post layernorm forward", got, want, N * C, 1, 0);
    check_failures += close_f("post norm rstd", rstd[1], rstd[0], N, 0.0);
    float *dw[2] = {fvec(C), fvec(C)}, *db[2] = {fvec(C), fvec(C)};
    for (int k = 0; k < 2; k++) memset(dw[k], 0, C * 4), memset(db[k], 0, C * 4);
    float *scratch = fvec(F->ops->layernorm_scratch_bytes(F, N, C) / 4);
    memcpy(want, pre, N * C * 4), memcpy(got, pre_b, N * C * 2);
    F->ops->layernorm_backward(F, want, dw[0], rms ? NULL : db[0], dy, x, w, mean[0], rstd[0], N, C, scratch, &ns);
    H->ops->layernorm_backward(H, (float *)got, dw[1], rms ? NULL : db[1], (float *)dy_b, (float *)x_b, w, mean[0],
                               rstd[0], N, C, scratch, &ns);
    /* the sum pre + dx rounded once: 2^-8 of it, or of pre (|pre| <= 1) where the two cancel */
    check_failures += close_bf("post norm backward dinp (accumulated)", got, want, N * C, 1, 4e-3);
    check_failures += close_f("post norm backward dw", dw[1], dw[0], C, (double)N);
    if (!rms) check_failures += close_f("post norm backward db", db[1], db[0], C, (double)N);
    free(x), free(dy), free(pre), free(w), free(b), free(want), free(got), free(scratch), free(x_b), free(dy_b), free(pre_b);
    for (int k = 0; k < 2; k++) free(mean[k]), free(rstd[k]), free(dw[k]), free(db[k]);
}

/* ---- matmul ---- */

static void test_matmul(int M, int K, int N, int bias) {
    trng r = trng_seed(60 + (uint64_t)M);
    uint16_t *a_b, *w_b, *bias_b, *dy_b, *pre_b;
    float *a = rvec((size_t)M * K, &r, -1, 1, &a_b), *w = rvec((size_t)K * N, &r, -1, 1, &w_b);
    float *bv = rvec(N, &r, -1, 1, &bias_b), *dy = rvec((size_t)M * N, &r, -1, 1, &dy_b);
    float *pre = rvec((size_t)M * K, &r, -1, 1, &pre_b);
    float *want = fvec((size_t)M * N), *dx = fvec((size_t)M * K);
    uint16_t *got = bvec((size_t)M * N), *dx_b = bvec((size_t)M * K);
    char name[96];
    poison(want, (size_t)M * N), bpoison(got, (size_t)M * N);
    CHECK_OK(F->ops->matmul_forward(F, want, a, w, bias ? bv : NULL, M, K, N));
    use_backend(H);
    CHECK_OK(H->ops->matmul_forward(H, (float *)got, (float *)a_b, (float *)w_b, bias ? (float *)bias_b : NULL, M, K, N));
    use_backend(F);
    /* a sum of K products of values in [-1, 1]: |want| can cancel to far below its terms,
     * whose scale is sqrt(K) / 3; the order of summation may differ by K units of that */
    const double order = K * 5.9604644775390625e-08 * sqrt((double)K);
    snprintf(name, sizeof name, "matmul forward %dx%dx%d%s", M, K, N, bias ? " +bias" : "");
    check_failures += close_bf(name, got, want, (size_t)M * N, 1, order);
    /* backward */
    float *dw[2], *db[2];
    for (int k = 0; k < 2; k++) {
        trng q = trng_seed(61);
        dw[k] = fvec((size_t)K * N), db[k] = fvec(N);
        fill(dw[k], (size_t)K * N, &q, -1, 1), fill(db[k], N, &q, -1, 1);
    }
    poison(dx, (size_t)M * K), bpoison(dx_b, (size_t)M * K);
    CHECK_OK(F->ops->matmul_backward(F, dx, dw[0], bias ? db[0] : NULL, dy, a, w, M, K, N));
    use_backend(H);
    CHECK_OK(H->ops->matmul_backward(H, (float *)dx_b, dw[1], bias ? db[1] : NULL, (float *)dy_b, (float *)a_b, (float *)w_b,
                                     M, K, N));
    use_backend(F);
    snprintf(name, sizeof name, "matmul backward dinp %dx%dx%d", M, K, N);
    check_failures += close_bf(name, dx_b, dx, (size_t)M * K, 1, N * 5.9604644775390625e-08 * sqrt((double)N));
    check_failures += close_f("matmul backward dw", dw[1], dw[0], (size_t)K * N, sqrt((double)M));
    if (bias) check_failures += close_f("matmul backward dbias", db[1], db[0], N, sqrt((double)M));
    free(a), free(w), free(bv), free(dy), free(pre), free(want), free(dx), free(got), free(dx_b);
    free(a_b), free(w_b), free(bias_b), free(dy_b), free(pre_b);
    for (int k = 0; k < 2; k++) free(dw[k]), free(db[k]);
}

/* ---- attention ---- */

static void test_attention(int B, int T, int NH, int NKV, int hs, int causal, int chunked) {
    const hg_attention_shape s = {.B = B, .T = T, .NH = NH, .hs = hs, .causal = causal, .NKV = NKV};
    const int KV = hg_attention_kv_heads(&s), W = (NH + 2 * KV) * hs, C = NH * hs;
    const size_t nq = (size_t)B * T * W, no = (size_t)B * T * C, nl = (size_t)B * NH * T;
    trng r = trng_seed(70 + (uint64_t)T);
    float *qkv = fvec(nq);
    fill_qkv(qkv, (size_t)B * T, W, (NH + KV) * hs, &r);
    rnd(qkv, nq);
    uint16_t *qkv_b = to_bf(qkv, nq), *dout_b;
    float *dout = rvec(no, &r, -1, 1, &dout_b);
    void *sf = malloc(F->ops->attention_scratch_bytes(F, &s)), *sh = malloc(H->ops->attention_scratch_bytes(H, &s));
    float *out = fvec(no), *lse[2] = {fvec(nl), fvec(nl)}, *dq = fvec(nq);
    uint16_t *out_b = bvec(no), *dq_b = bvec(nq);
    char name[128];
    snprintf(name, sizeof name, "attention B%d T%d NH%d NKV%d hs%d%s", B, T, NH, KV, hs, causal ? " causal" : "");
    poison(out, no), bpoison(out_b, no), poison(lse[0], nl), poison(lse[1], nl);
    CHECK_OK(F->ops->attention_forward(F, out, lse[0], qkv, &s, sf));
    CHECK_OK(H->ops->attention_forward(H, (float *)out_b, lse[1], (float *)qkv_b, &s, sh));
    char what[160];
    snprintf(what, sizeof what, "%s forward out", name);
    check_failures += close_bf(what, out_b, out, no, 1, 0);
    check_failures += close_f("attention lse", lse[1], lse[0], nl, 0.0);
    /* backward from the rounded output, which both sides read */
    float *out_r = fvec(no);
    for (size_t i = 0; i < no; i++) out_r[i] = bf16_to_f32(out_b[i]);
    poison(dq, nq), bpoison(dq_b, nq);
    CHECK_OK(F->ops->attention_backward(F, dq, dout, qkv, out_r, lse[1], &s, sf));
    CHECK_OK(H->ops->attention_backward(H, (float *)dq_b, (float *)dout_b, (float *)qkv_b, (float *)out_b, lse[1], &s, sh));
    snprintf(what, sizeof what, "%s backward dqkv", name);
    if (!chunked) {
        check_failures += close_bf(what, dq_b, dq, nq, 1, 0);
    } else { /* q exact to one rounding; k and v rounded once per query chunk */
        float *q = fvec(no);
        uint16_t *q_b = bvec(no);
        for (size_t row = 0; row < (size_t)B * T; row++)
            memcpy(q + row * C, dq + row * W, (size_t)C * 4), memcpy(q_b + row * C, dq_b + row * W, (size_t)C * 2);
        check_failures += close_bf(what, q_b, q, no, 1, 0);
        check_failures += close_norm(what, dq_b, dq, nq, 4 * UB);
        free(q), free(q_b);
    }
    /* the cached forward of generation: B = 1, the last rows against a cache */
    if (B == 1) {
        const hg_kv_shape ks = {.pos0 = T - 5, .n = 5, .Tc = T, .NH = NH, .hs = hs, .NKV = NKV};
        size_t nc = (size_t)KV * T * hs;
        float *kc = fvec(nc), *vc = fvec(nc), *o = fvec((size_t)5 * C);
        uint16_t *kc_b = bvec(nc), *vc_b = bvec(nc), *o_b = bvec((size_t)5 * C);
        /* the caches hold rows 0 .. pos0-1 already: the rows of qkv */
        for (int t = 0; t < T; t++)
            for (int g = 0; g < KV; g++)
                for (int d = 0; d < hs; d++) {
                    size_t at = ((size_t)g * T + t) * hs + d, k = (size_t)t * W + C + g * hs + d;
                    kc[at] = qkv[k], vc[at] = qkv[k + (size_t)KV * hs];
                    kc_b[at] = qkv_b[k], vc_b[at] = qkv_b[k + (size_t)KV * hs];
                }
        poison(o, (size_t)5 * C), bpoison(o_b, (size_t)5 * C);
        CHECK_OK(F->ops->attention_cached(F, o, kc, vc, qkv + (size_t)(T - 5) * W, &ks, sf));
        CHECK_OK(H->ops->attention_cached(H, (float *)o_b, (float *)kc_b, (float *)vc_b, (float *)(qkv_b + (size_t)(T - 5) * W),
                                          &ks, sh));
        snprintf(what, sizeof what, "%s cached", name);
        check_failures += close_bf(what, o_b, o, (size_t)5 * C, 1, 0);
        free(kc), free(vc), free(o), free(kc_b), free(vc_b), free(o_b);
    }
    free(qkv), free(qkv_b), free(dout), free(dout_b), free(sf), free(sh), free(out), free(out_b), free(out_r);
    free(lse[0]), free(lse[1]), free(dq), free(dq_b);
}

/* ---- classifier ---- */

static void test_classifier(int N, int V, int Vp, float softcap) {
    const int C = 64;
    trng r = trng_seed(80);
    uint16_t *x_b, *wte_b;
    float *x = rvec((size_t)N * C, &r, -1, 1, &x_b), *wte = rvec((size_t)Vp * C, &r, -0.5, 0.5, &wte_b);
    int32_t *tg = ivec(N);
    for (int n = 0; n < N; n++) tg[n] = n % 7 == 3 ? -1 : trng_int(&r, V);
    float *sf = fvec((size_t)N * Vp), *logits[2] = {fvec((size_t)N * V), fvec((size_t)N * V)};
    float *loss[2] = {fvec(N), fvec(N)}, *dx = fvec((size_t)N * C), *dw[2];
    uint16_t *sh = bvec((size_t)N * Vp), *dx_b = bvec((size_t)N * C);
    for (int k = 0; k < 2; k++) {
        trng q = trng_seed(81);
        dw[k] = fvec((size_t)Vp * C);
        fill(dw[k], (size_t)Vp * C, &q, -1, 1);
    }
    poison(logits[0], (size_t)N * V), poison(logits[1], (size_t)N * V), poison(loss[0], N), poison(loss[1], N);
    poison(dx, (size_t)N * C), bpoison(dx_b, (size_t)N * C);
    hg_classifier_args a = {.N = N, .C = C, .V = V, .Vp = Vp, .x = x, .wte = wte, .targets = tg, .losses = loss[0],
                            .logits = logits[0], .softcap = softcap, .dscale = 0.37f, .dx = dx, .dwte = dw[0],
                            .scratch = sf};
    hg_classifier_args b = a;
    b.x = (float *)x_b, b.wte = (float *)wte_b, b.losses = loss[1], b.logits = logits[1], b.dx = (float *)dx_b;
    b.dwte = dw[1], b.scratch = (float *)sh;
    CHECK_OK(F->ops->classifier_forward(F, &a));
    CHECK_OK(F->ops->classifier_backward(F, &a));
    use_backend(H);
    CHECK_OK(H->ops->classifier_forward(H, &b));
    CHECK_OK(H->ops->classifier_backward(H, &b));
    use_backend(F);
    /* logits: one rounding; losses: 2 u max|z| of the row */
    uint16_t *lb = to_bf(logits[1], (size_t)N * V);
    int bad = 0;
    for (size_t i = 0; i < (size_t)N * V; i++) bad += lb[i] != f32_to_bf16(logits[1][i]) || isnan(logits[1][i]);
    CHECK(bad == 0); /* the fp32 logits handed out are the bf16 ones */
    /* capped, the product is rounded, capped (|d cap tanh(z / cap) / dz| <= 1, so the
     * rounding moves the capped value by at most u |z|, |z| <= 3 |logit| here) and rounded
     * again: 4u */
    check_failures += close_bf(softcap > 0 ? "classifier logits, capped" : "classifier logits", lb, logits[0],
                               (size_t)N * V, softcap > 0 ? 4 : 1, 64 * 5.9604644775390625e-08);
    double zmax = 0.0;
    for (int n = 0; n < N; n++) {
        double m = max_abs(logits[0] + (size_t)n * V, V);
        zmax = fmax(zmax, m);
        if (tg[n] < 0) {
            CHECK(loss[1][n] == 0.0f);
            continue;
        }
        CHECK_CLOSE(loss[1][n], loss[0][n], SUM_SLACK, 2 * UB * m);
    }
    check_failures += close_norm("classifier backward dx", dx_b, dx, (size_t)N * C, 2 * UB * (1 + 2 * zmax));
    /* dwte as a norm too: of what was added to the prefill */
    trng q = trng_seed(81);
    float *pre = fvec((size_t)Vp * C);
    fill(pre, (size_t)Vp * C, &q, -1, 1);
    double d = 0.0, w = 0.0;
    for (size_t i = 0; i < (size_t)Vp * C; i++) {
        double g1 = (double)dw[1][i] - pre[i], g0 = (double)dw[0][i] - pre[i];
        d += (g1 - g0) * (g1 - g0), w += g0 * g0;
        if (i >= (size_t)V * C) bad += dw[1][i] != pre[i]; /* padded rows get no gradient */
    }
    CHECK(bad == 0);
    CHECK(sqrt(d / w) <= 2 * UB * (1 + 2 * zmax));
    if (ops_verbose) printf("  classifier dwte relative %.3g (max |z| %.2f)\n", sqrt(d / w), zmax);
    free(x), free(wte), free(tg), free(sf), free(logits[0]), free(logits[1]), free(loss[0]), free(loss[1]), free(dx);
    free(sh), free(dx_b), free(x_b), free(wte_b), free(lb), free(pre);
    for (int k = 0; k < 2; k++) free(dw[k]);
}

/* ---- AdamW and its bf16 copy ---- */

/* A parameter layout and its bf16 copy's, as the model builds them. */
static void adamw_tables(hg_table *t, hg_table *tw) {
    const int64_t sa[2] = {37, 29}, sb[1] = {301};
    for (int k = 0; k < 2; k++) {
        hg_table *x = k ? tw : t;
        hg_table_init(x);
        CHECK(hg_table_add(x, "a", 2, sa, 0, 1, k ? 2 : 4, HG_SPEC_DECAY) == 0);
        CHECK(hg_table_add(x, "b", 1, sb, 0, 1, k ? 2 : 4, 0) == 1);
        hg_table_layout(x);
    }
}

static void test_adamw(int stochastic) {
    hg_table t, tw;
    adamw_tables(&t, &tw);
    const size_t P = t.bytes / 4, lo = 5, n = P - 13; /* a range that cuts rounding groups */
    trng r = trng_seed(90);
    float *p[2], *g = fvec(n), *m[2], *v[2];
    fill(g, n, &r, -1, 1);
    for (int k = 0; k < 2; k++) {
        trng q = trng_seed(91);
        p[k] = fvec(P), m[k] = fvec(n), v[k] = fvec(n);
        fill(p[k], P, &q, -1, 1), fill(m[k], n, &q, -0.1, 0.1), fill(v[k], n, &q, 0, 0.01);
    }
    uint16_t *w = bvec(tw.bytes / 2);
    bpoison(w, tw.bytes / 2);
    hg_adamw_args a = {.p = p[0], .g = g, .m = m[0], .v = v[0], .w = NULL, .params = &t, .weights = &tw, .lo = lo, .n = n,
                       .u = {1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.271f, 0.0975f, 0.8f}, .stochastic = stochastic,
                       .seed = 1234, .step = 7};
    F->ops->adamw(F, &a);
    a.p = p[1], a.m = m[1], a.v = v[1], a.w = w;
    H->ops->adamw(H, &a);
    check_failures += close_f("adamw p", p[1], p[0], P, 0.0);
    check_failures += close_f("adamw m", m[1], m[0], n, 0.0);
    check_failures += close_f("adamw v", v[1], v[0], n, 0.0);
    /* the copy: every element of the range, from the new p; nothing outside it */
    int bad = 0;
    double bias = 0.0;
    for (int i = 0; i < t.count; i++) {
        size_t t0 = t.specs[i].offset / 4, w0 = tw.specs[i].offset / 2;
        for (size_t j = 0; j < (size_t)t.specs[i].numel; j++) {
            size_t e = t0 + j;
            uint16_t got = w[w0 + j];
            if (e < lo || e >= lo + n) {
                bad += got != 0x7FC1;
                continue;
            }
            uint16_t want = ref_bf16(p[1][e]);
            if (stochastic) { /* the CUDA backend's draw: Philox(seed, e / 8, ROUNDING, step) */
                hg_u32x4 rr = hg_philox(1234, (uint32_t)(e / 8), (uint32_t)(e / 8 >> 32), HG_RNG_ROUNDING, 7);
                uint32_t u, r16 = rr.v[(e % 8) / 2] >> (16 * (e % 2)) & 0xffffu;
                memcpy(&u, &p[1][e], 4);
                want = (uint16_t)((u + r16) >> 16);
                bias += bf16_to_f32(got) - (double)p[1][e];
            }
            bad += got != want;
        }
    }
    CHECK(bad == 0);
    if (stochastic) /* unbiased: the mean error is far below the ~2^-9 of one rounding */
        CHECK(fabs(bias / (double)n) < 2e-4);
    hg_table_free(&t), hg_table_free(&tw);
    free(g), free(w);
    for (int k = 0; k < 2; k++) free(p[k]), free(m[k]), free(v[k]);
}

/* The stochastic rounding of element e from stream k (0: the copy w, 1: m, 2: v):
 * 16 bits of Philox(seed, e / 8, ROUNDING | k << 8, step) added below the mantissa. */
static uint16_t sr_bf16(float x, uint64_t seed, uint32_t step, size_t e, uint32_t k) {
    hg_u32x4 rr = hg_philox(seed, (uint32_t)(e / 8), (uint32_t)(e / 8 >> 32), HG_RNG_ROUNDING | k << 8, step);
    uint32_t u, r16 = rr.v[(e % 8) / 2] >> (16 * (e % 2)) & 0xffffu;
    memcpy(&u, &x, 4);
    return (uint16_t)((u + r16) >> 16);
}

/* AdamW with its moments in bf16 (state BF16) against the fp32-state kernel on the same
 * (widened) moments: p to fp32 rounding, m and v each its stochastic rounding of the
 * fp32 value with its own draws, and the bf16 copy w from the new p with stream 0. Then
 * the rounding is unbiased: a moment fixed between two bf16 neighbours keeps its mean. */
static void test_adamw_bf16_state(void) {
    hg_table t, tw;
    adamw_tables(&t, &tw);
    const size_t P = t.bytes / 4, lo = 5, n = P - 13; /* a range that cuts rounding groups */
    trng r = trng_seed(92);
    uint16_t *mb, *vb;
    float *g = fvec(n), *m = rvec(n, &r, -0.1, 0.1, &mb), *v = rvec(n, &r, 0, 0.01, &vb);
    fill(g, n, &r, -1, 1);
    float *p[2];
    for (int k = 0; k < 2; k++) {
        trng q = trng_seed(93);
        p[k] = fvec(P);
        fill(p[k], P, &q, -1, 1);
    }
    uint16_t *w = bvec(tw.bytes / 2);
    bpoison(w, tw.bytes / 2);
    hg_adamw_args a = {.p = p[0], .g = g, .m = m, .v = v, .params = &t, .weights = &tw, .lo = lo, .n = n,
                       .u = {1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.271f, 0.0975f, 0.8f}, .stochastic = 1, .seed = 77,
                       .step = 3};
    F->ops->adamw(F, &a); /* the reference: fp32 state, m and v updated in place */
    a.p = p[1], a.m = mb, a.v = vb, a.w = w, a.state = HG_PRECISION_BF16;
    H->ops->adamw(H, &a);
    check_failures += close_f("adamw (bf16 moments) p", p[1], p[0], P, 0.0);
    int bad_m = 0, bad_w = 0, off = 0;
    for (size_t i = 0; i < n; i++) {
        const size_t e = lo + i;
        bad_m += mb[i] != sr_bf16(m[i], 77, 3, e, 1);
        bad_m += vb[i] != sr_bf16(v[i], 77, 3, e, 2);
        /* whatever the draws, one of the two bf16 neighbours */
        for (int k = 0; k < 2; k++) {
            float x = k ? v[i] : m[i];
            uint32_t bits;
            memcpy(&bits, &x, 4);
            uint16_t got = k ? vb[i] : mb[i], down = (uint16_t)(bits >> 16);
            off += got != down && got != (uint16_t)(down + 1);
        }
    }
    for (int i = 0; i < t.count; i++)
        for (size_t j = 0; j < (size_t)t.specs[i].numel; j++) {
            size_t e = t.specs[i].offset / 4 + j;
            uint16_t got = w[tw.specs[i].offset / 2 + j];
            bad_w += e < lo || e >= lo + n ? got != 0x7FC1 : got != sr_bf16(p[1][e], 77, 3, e, 0);
        }
    if (bad_m || bad_w || off)
        fprintf(stderr, "FAIL adamw (bf16 moments): %d moments not their draw's rounding, %d off both neighbours, "
                "%d copy elements wrong\n", bad_m, off, bad_w);
    CHECK(bad_m == 0 && off == 0 && bad_w == 0);
    hg_table_free(&t), hg_table_free(&tw);
    free(g), free(m), free(v), free(mb), free(vb), free(w), free(p[0]), free(p[1]);

    /* unbiased: m = 0.9 + 0.1 g lies 3/8 of the way between two bf16 values */
    const int64_t N = 1 << 16;
    hg_table u;
    hg_table_init(&u);
    hg_table_add(&u, "t", 1, &N, 0, 1, 4, 0);
    hg_table_layout(&u);
    const float want = 1.0f + 3.0f / 1024.0f, gv = (want - 0.9f) / 0.1f;
    float *pp = fvec((size_t)N), *gg = fvec((size_t)N);
    uint16_t *m1 = bvec((size_t)N), *v1 = bvec((size_t)N);
    for (int64_t i = 0; i < N; i++) pp[i] = 0.5f, gg[i] = gv, m1[i] = f32_to_bf16(1.0f), v1[i] = f32_to_bf16(1.0f);
    const float exact = 0.9f * 1.0f + (1.0f - 0.9f) * gv; /* as the kernel computes it */
    hg_adamw_args b = {.p = pp, .g = gg, .m = m1, .v = v1, .params = &u, .weights = &u, .n = (size_t)N,
                       .u = {.lr = 0.0f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .bias_correction1 = 1.0f,
                             .bias_correction2 = 1.0f, .grad_scale = 1.0f},
                       .state = HG_PRECISION_BF16, .seed = 5, .step = 1};
    F->ops->adamw(F, &b);
    double mean = 0.0;
    for (int64_t i = 0; i < N; i++) mean += bf16_to_f32(m1[i]);
    mean /= (double)N;
    /* the spacing is 2^-7; sd of the mean = 2^-7 sqrt(p (1 - p) / N) = 1.5e-5; 6 sd */
    if (ops_verbose || fabs(mean - exact) > 9e-5)
        printf("  adamw bf16 moments: mean %.7f for %.7f\n", mean, (double)exact);
    CHECK(fabs(mean - exact) <= 9e-5);
    hg_table_free(&u);
    free(pp), free(gg), free(m1), free(v1);
}

static void run_all(void) {
    test_to_compute();
    test_encoder(0.0f);
    test_encoder(0.3f);
    test_elementwise();
    test_rope(0);
    test_rope(12); /* partial */
    test_norm(0, 1, 0.0f);
    test_norm(0, 1, 0.2f);
    test_norm(1, 1, 0.0f);
    test_norm(0, 0, 0.0f);
    test_post_norm(0);
    test_post_norm(1);
    test_qk_norm(0);
    test_qk_norm(1); /* OLMo 2's: all q heads as one unit, all k heads as another */
    test_matmul(37, 96, 160, 1);
    test_matmul(64, 256, 48, 0);
    test_matmul(300, 64, 1600, 1); /* N cut into column blocks */
    test_attention(2, 100, 4, 0, 64, 1, 0);
    test_attention(4, 70, 4, 2, 32, 1, 0);  /* grouped-query */
    test_attention(1, 150, 2, 1, 16, 1, 1); /* one kv head: the backward in query chunks; cached */
    test_attention(1, 65, 2, 0, 128, 0, 1); /* not causal */
    test_classifier(37, 500, 512, 0.0f);
    test_classifier(37, 500, 512, 3.0f); /* soft-capped logits */
    test_adamw(0);
    test_adamw(1);
    test_adamw_bf16_state();
}

int main(void) {
    const char *verbose = getenv("HG_TEST_VERBOSE");
    ops_verbose = verbose && *verbose && *verbose != '0';
    CHECK_OK(hg_backend_cpu_create(&F, 2, HG_PRECISION_FP32));
    CHECK_OK(hg_backend_cpu_create(&H, 2, HG_PRECISION_BF16));
    if (check_failures) CHECK_DONE();
    use_backend(F);
    const char *slow = hg_cpu_bf16_slow();
    printf("bf16 products: %s\n", slow ? slow : "oneDNN's bf16 kernels");
    run_all();
    if (cpu_bf16_gemm_native()) { /* again on the portable path: both held to the fp32 op */
        setenv("HANDGRAD_BF16", "portable", 1);
        H->ops->destroy(H);
        CHECK_OK(hg_backend_cpu_create(&H, 2, HG_PRECISION_BF16));
        printf("again with HANDGRAD_BF16=portable\n");
        run_all();
    }
    /* refusals */
    hg_backend *be = NULL;
    CHECK(hg_backend_cpu_create(&be, 2, HG_PRECISION_FP16) == HG_ERR_UNSUPPORTED);
    CHECK(strstr(hg_last_error(), "precision") != NULL);
    F->ops->destroy(F), H->ops->destroy(H);
    CHECK_DONE();
}
