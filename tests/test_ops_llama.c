/* Op tests, part 6: the ops of Llama-family models. RMSNorm (alone and fused with the
 * residual add), LayerNorm without affine parameters, a non-default epsilon; rotary
 * position embedding with fewer kv heads than query heads; the q/k norm (RMSNorm per head,
 * in place on QKV); the SwiGLU and ReLU^2
 * activations; grouped-query attention's dK, dV as the sums over each group (its
 * checks against the double reference, and the cached forward, are in
 * test_ops_attention.c). Conventions as in test_ops.c: poisoned outputs, prefilled
 * accumulators, two bitwise-equal runs, double references and finite differences,
 * tolerances in units of u = 2^-24. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "ops_reference.h"
#include "ops_util.h"
#include "test_ops.h"

/* ---- RMSNorm, and LayerNorm without affine parameters ---- */

/* Spread of row n's values. Every fourth row has sd = sqrt(eps) and an offset within
 * sd/2 (RMSNorm) or 0.5 (LayerNorm): its mean square (RMSNorm) or variance (LayerNorm)
 * is about eps, so a wrong or missing eps moves its rstd by 30% or more (1e-5 for 1e-6:
 * a factor 2.3). The other rows have spreads 0.1 to 4. */
static double norm_spread(int n, const hg_norm_spec *ns) {
    static const double spread[] = {0.0, 0.1, 1.0, 4.0};
    return n % 4 ? spread[n % 4] : sqrt((double)ns->eps);
}

static void fill_norm_rows(float *x, int N, int C, trng *r, const hg_norm_spec *ns) {
    for (int n = 0; n < N; n++) {
        double sd = norm_spread(n, ns), mu = trng_range(r, -0.5, 0.5) * (ns->rms ? sd : 1.0);
        for (int c = 0; c < C; c++) x[n * C + c] = (float)(mu + sd * trng_range(r, -1.7, 1.7));
    }
}

/* A row's dinp is rstd * (dy w - means): its scale is rstd * rms(dy w) of the row. */
static void norm_grad_scale(double *sx, const double *dy, const double *w, const double *rstd, int N, int C, double add) {
    for (int n = 0; n < N; n++) {
        double s2 = 0.0;
        for (int c = 0; c < C; c++) {
            double g = dy[n * C + c] * (w ? w[c] : 1.0);
            s2 += g * g;
        }
        for (int c = 0; c < C; c++) sx[n * C + c] = add + rstd[n] * sqrt(s2 / C);
    }
}

/* Bitwise: x still holds the poison pattern (a buffer the kernel must not write). */
static int check_untouched(const char *what, const float *x, size_t n) {
    float *p = fvec(n);
    poison(p, n);
    int bad = memcmp(p, x, sizeof(float) * n) != 0;
    if (bad) fprintf(stderr, "%s: written, though the contract says it is not\n", what);
    free(p);
    return bad;
}

/* The norm of ns on its own, forward and backward. With has_w/has_b 0, w/b and dw/db are
 * NULL. For RMSNorm the first runs pass mean = NULL and the second a poisoned buffer,
 * which must stay untouched (RMSNorm neither reads nor writes mean) and give the same
 * bits. */
static void test_norm(hg_backend *bes[OPS_NBE], hg_norm_spec ns, int has_w, int has_b, uint64_t seed) {
    enum { N = 74, C = 96 };
    trng r = trng_seed(seed);
    float *x = fvec(N * C), *w = has_w ? fvec(C) : NULL, *b = has_b ? fvec(C) : NULL, *R = fvec(N * C);
    float *pre_dx = fvec(N * C), *pre_dw = fvec(C), *pre_db = fvec(C);
    fill_norm_rows(x, N, C, &r, &ns);
    if (w) fill(w, C, &r, -1.5, 1.5);
    if (b) fill(b, C, &r, -0.5, 0.5);
    fill(R, N * C, &r, -1, 1);
    fill(pre_dx, N * C, &r, -1, 1), fill(pre_dw, C, &r, -1, 1), fill(pre_db, C, &r, -1, 1);
    double *xd = dvec(N * C), *wd = w ? dvec(C) : NULL, *bd = b ? dvec(C) : NULL, *Rd = dvec(N * C);
    widen(xd, x, N * C), widen(Rd, R, N * C);
    if (w) widen(wd, w, C);
    if (b) widen(bd, b, C);

    double *out_ref = dvec(N * C), mean_ref[N], rstd_ref[N], mabs[N], *scale = dvec(N * C);
    for (int n = 0; n < N; n++) {
        ref_norm_row(out_ref + n * C, &mean_ref[n], &rstd_ref[n], xd + n * C, wd, bd, C, &ns);
        mabs[n] = 0.0;
        for (int c = 0; c < C; c++) mabs[n] += fabs(xd[n * C + c]) / C;
    }
    ref_norm_scale(scale, xd, mean_ref, rstd_ref, wd, bd, N, C);

    double *gx = dvec(N * C), gw[C], gb[C], *sx = dvec(N * C);
    ref_norm_backward(gx, w ? gw : NULL, b ? gb : NULL, Rd, xd, wd, N, C, &ns);
    norm_grad_scale(sx, Rd, wd, rstd_ref, N, C, 0.0);
    /* finite differences of x with a step scaled to the row's spread (1/rstd): the
     * eps-sized rows are ~1e-3 wide, where a fixed 1e-5 step would leave a truncation
     * error of (1e-2)^2 */
    size_t kx, *ix = sample_indices(N * C, 250, 61, &kx);
    double row[C], *fx = dvec(kx), fw[C], fb[C];
    ref_norm_fd ctx = {xd, wd, bd, row, Rd, N, C, &ns};
    for (size_t j = 0; j < kx; j++) fx[j] = fd_central(xd, ix[j], FD_H / rstd_ref[ix[j] / C], ref_norm_loss_row, &ctx);
    char tag[96], name[160];
    snprintf(tag, sizeof tag, "%s eps=%g%s%s", ns.rms ? "rmsnorm" : "layernorm", (double)ns.eps, w ? " w" : "", b ? " b" : "");
    snprintf(name, sizeof name, "%s ref dinp vs fd", tag);
    check_failures += check_grad_d(name, gx, fx, ix, kx, sx, 0, FD_TOL);
    double sw = w ? rms(gw, C) : 0.0, sb = b ? rms(gb, C) : 0.0;
    if (w) { /* the output is linear in w and b: their differences are exact but for rounding */
        for (int c = 0; c < C; c++) fw[c] = fd_central(wd, c, FD_H, ref_norm_loss_all, &ctx);
        snprintf(name, sizeof name, "%s ref dw vs fd", tag);
        check_failures += check_grad_d(name, gw, fw, NULL, C, NULL, sw, FD_TOL);
    }
    if (b) {
        for (int c = 0; c < C; c++) fb[c] = fd_central(bd, c, FD_H, ref_norm_loss_all, &ctx);
        snprintf(name, sizeof name, "%s ref db vs fd", tag);
        check_failures += check_grad_d(name, gb, fb, NULL, C, NULL, sb, FD_TOL);
    }

    float *out[2] = {fvec(N * C), fvec(N * C)}, *mean[2] = {fvec(N), fvec(N)}, *rstd[2] = {fvec(N), fvec(N)};
    float *dx[2] = {fvec(N * C), fvec(N * C)}, *dw[2] = {fvec(C), fvec(C)}, *db[2] = {fvec(C), fvec(C)};
    for (int k = 0; k < OPS_NBE; k++) {
        hg_backend *be = bes[k];
        use_backend(be);
        float *scr = fvec((size_t)2 * C * be->threads);
        snprintf(tag, sizeof tag, "%s eps=%g%s%s threads=%d", ns.rms ? "rmsnorm" : "layernorm", (double)ns.eps,
                 w ? " w" : "", b ? " b" : "", be->threads);
        for (int run = 0; run < 2; run++) {
            poison(out[run], N * C), poison(mean[run], N), poison(rstd[run], N);
            float *m = ns.rms && run == 0 ? NULL : mean[run];
            be->ops->layernorm_forward(be, out[run], m, rstd[run], x, w, b, N, C, &ns);
        }
        snprintf(name, sizeof name, "%s out", tag);
        check_failures += check_bitwise(name, out[0], out[1], N * C) + check_bitwise(name, rstd[0], rstd[1], N);
        check_failures += check_finite(name, out[0], N * C);
        /* as LayerNorm's (test_ops_layernorm.c): C-term fp32 sums, ~sqrt(C) u of the
         * computed magnitude, 4 sqrt(C) u = 2.3e-6 */
        check_failures += check_vec(name, out[0], out_ref, scale, N * C, 4 * sqrt(C) * U32, 0.0);
        snprintf(name, sizeof name, "%s rstd", tag);
        check_failures += check_finite(name, rstd[0], N);
        check_failures += check_vec(name, rstd[0], rstd_ref, NULL, N, 4 * sqrt(C) * U32, 0.0);
        snprintf(name, sizeof name, "%s mean", tag);
        if (ns.rms) {
            check_failures += check_untouched(name, mean[1], N);
        } else {
            check_failures += check_bitwise(name, mean[0], mean[1], N) + check_finite(name, mean[0], N);
            check_failures += check_vec(name, mean[0], mean_ref, mabs, N, 4 * sqrt(C) * U32, 0.0);
        }

        for (int run = 0; run < 2; run++) {
            memcpy(dx[run], pre_dx, sizeof(float) * N * C);
            memcpy(dw[run], pre_dw, sizeof(float) * C);
            memcpy(db[run], pre_db, sizeof(float) * C);
            poison(scr, (size_t)2 * C * be->threads);
            /* RMSNorm: NULL, then the poisoned mean of the forward's second run (NaN if read) */
            float *m = ns.rms && run == 0 ? NULL : mean[1];
            be->ops->layernorm_backward(be, dx[run], w ? dw[run] : NULL, b ? db[run] : NULL, R, x, w, m, rstd[0], N, C, scr, &ns);
        }
        snprintf(name, sizeof name, "%s backward", tag);
        check_failures += check_bitwise(name, dx[0], dx[1], N * C) + check_finite(name, dx[0], N * C);
        check_failures += check_bitwise(name, dw[0], dw[1], C) + check_bitwise(name, db[0], db[1], C);
        /* dinp: two C-term reductions per row, 1e-5 of the row's scale, as LayerNorm's */
        snprintf(name, sizeof name, "%s dinp fd", tag);
        check_failures += check_grad(name, dx[0], pre_dx, fx, ix, kx, sx, 0, 1e-5);
        snprintf(name, sizeof name, "%s dinp", tag);
        check_failures += check_grad(name, dx[0], pre_dx, gx, NULL, N * C, sx, 0, 1e-5);
        check_failures += check_rel_l2(name, dx[0], pre_dx, gx, N * C, 2e-6);
        /* dw, db: N-row sums (per-thread partials, then in thread order) of dy xh and dy,
         * |xh| < ~2.5: 1e-5 of the tensor's rms, as LayerNorm's. Without w, b: passed as
         * NULL, so the prefilled buffers must come back bitwise as given */
        snprintf(name, sizeof name, "%s dw fd", tag);
        if (w) check_failures += check_grad(name, dw[0], pre_dw, fw, NULL, C, NULL, sw, 1e-5);
        else check_failures += check_bitwise(name, dw[0], pre_dw, C);
        snprintf(name, sizeof name, "%s db fd", tag);
        if (b) check_failures += check_grad(name, db[0], pre_db, fb, NULL, C, NULL, sb, 1e-5);
        else check_failures += check_bitwise(name, db[0], pre_db, C);
        free(scr);
    }
    free(x), free(w), free(b), free(R), free(pre_dx), free(pre_dw), free(pre_db);
    free(xd), free(wd), free(bd), free(Rd), free(out_ref), free(scale), free(gx), free(sx), free(ix), free(fx);
    for (int run = 0; run < 2; run++) {
        free(out[run]), free(mean[run]), free(rstd[run]), free(dx[run]), free(dw[run]), free(db[run]);
    }
}

/* residual_layernorm_forward with RMSNorm (Llama: weight, no bias, mean NULL), then the
 * backward chained as the model chains it: layernorm_backward into the stream's
 * gradient, dropout_backward to the branch. */
static void test_residual_rmsnorm(hg_backend *bes[OPS_NBE], hg_norm_spec ns, float p) {
    enum { N = 74, C = 96 };
    const hg_dropout drop = {.p = p, .seed = 77, .step = 5, .site = 2};
    trng r = trng_seed(1300 + (p > 0));
    float *res = fvec(N * C), *delta = fvec(N * C), *w = fvec(C), *R1 = fvec(N * C), *R2 = fvec(N * C), *pre_dw = fvec(C);
    fill_norm_rows(res, N, C, &r, &ns);
    /* a branch output 5% of its row's spread, so the eps-sized rows stay eps-sized */
    for (int n = 0; n < N; n++)
        for (int c = 0; c < C; c++) delta[n * C + c] = (float)(0.05 * norm_spread(n, &ns) * trng_range(&r, -1, 1));
    fill(w, C, &r, -1.5, 1.5), fill(R1, N * C, &r, -1, 1), fill(R2, N * C, &r, -1, 1), fill(pre_dw, C, &r, -1, 1);
    double *resd = dvec(N * C), *deltad = dvec(N * C), *wd = dvec(C), *R1d = dvec(N * C), *R2d = dvec(N * C);
    widen(resd, res, N * C), widen(deltad, delta, N * C), widen(wd, w, C), widen(R1d, R1, N * C), widen(R2d, R2, N * C);

    double *sum_ref = dvec(N * C), *sum_scale = dvec(N * C), *out_ref = dvec(N * C), mean_ref[N], rstd_ref[N];
    double *scale = dvec(N * C);
    for (int i = 0; i < N * C; i++) {
        double d = deltad[i] * ref_dropout_scale(&drop, i);
        sum_ref[i] = resd[i] + d;
        sum_scale[i] = fabs(resd[i]) + fabs(d);
    }
    for (int n = 0; n < N; n++) ref_norm_row(out_ref + n * C, &mean_ref[n], &rstd_ref[n], sum_ref + n * C, wd, NULL, C, &ns);
    ref_norm_scale(scale, sum_ref, mean_ref, rstd_ref, wd, NULL, N, C);

    /* analytic: dres_in = R2 + RMSNorm'(R1); ddelta = mask * dres_in; dw = sum R1 xh */
    double *gres = dvec(N * C), *gdelta = dvec(N * C), gw[C], *sx = dvec(N * C);
    ref_norm_backward(gres, gw, NULL, R1d, sum_ref, wd, N, C, &ns);
    norm_grad_scale(sx, R1d, wd, rstd_ref, N, C, 1.0);
    for (int i = 0; i < N * C; i++) {
        gres[i] += R2d[i];
        gdelta[i] = gres[i] * ref_dropout_scale(&drop, i);
    }
    size_t kr, *ir = sample_indices(N * C, 200, 71, &kr);
    double row[C], rowsum[C], *fres = dvec(kr), *fdelta = dvec(kr);
    ref_residual_norm_fd ctx = {resd, deltad, row, rowsum, wd, NULL, R1d, R2d, C, &drop, &ns};
    for (size_t j = 0; j < kr; j++) {
        double h = FD_H / rstd_ref[ir[j] / C]; /* the step scaled to the row, as above */
        fres[j] = fd_central(resd, ir[j], h, ref_residual_norm_loss, &ctx);
        fdelta[j] = fd_central(deltad, ir[j], h, ref_residual_norm_loss, &ctx);
    }
    char tag[96], name[160];
    snprintf(tag, sizeof tag, "residual_rmsnorm eps=%g p=%g", (double)ns.eps, p);
    snprintf(name, sizeof name, "%s ref dres vs fd", tag);
    check_failures += check_grad_d(name, gres, fres, ir, kr, sx, 0, FD_TOL);
    snprintf(name, sizeof name, "%s ref ddelta vs fd", tag);
    check_failures += check_grad_d(name, gdelta, fdelta, ir, kr, sx, 0, FD_TOL);
    double sw = rms(gw, C);

    float *sum[2] = {fvec(N * C), fvec(N * C)}, *out[2] = {fvec(N * C), fvec(N * C)}, *mean = fvec(N);
    float *rstd[2] = {fvec(N), fvec(N)}, *dw[2] = {fvec(C), fvec(C)};
    float *dres[2] = {fvec(N * C), fvec(N * C)}, *ddelta[2] = {fvec(N * C), fvec(N * C)};
    for (int k = 0; k < OPS_NBE; k++) {
        hg_backend *be = bes[k];
        use_backend(be);
        float *scr = fvec((size_t)2 * C * be->threads);
        snprintf(tag, sizeof tag, "residual_rmsnorm eps=%g p=%g threads=%d", (double)ns.eps, p, be->threads);
        poison(mean, N);
        for (int run = 0; run < 2; run++) {
            /* mean: NULL, then a poisoned buffer that must stay so */
            float *m = run ? mean : NULL;
            poison(sum[run], N * C), poison(out[run], N * C), poison(rstd[run], N);
            be->ops->residual_layernorm_forward(be, sum[run], out[run], m, rstd[run], res, delta, w, NULL, N, C, &drop, &ns);
            memcpy(dres[run], R2, sizeof(float) * N * C);
            memcpy(dw[run], pre_dw, sizeof(float) * C);
            be->ops->layernorm_backward(be, dres[run], dw[run], NULL, R1, sum[run], w, m, rstd[run], N, C, scr, &ns);
            poison(ddelta[run], N * C);
            if (hg_dropout_on(&drop)) be->ops->dropout_backward(be, ddelta[run], dres[run], (size_t)N * C, &drop);
            else memcpy(ddelta[run], dres[run], sizeof(float) * N * C);
        }
        snprintf(name, sizeof name, "%s forward", tag);
        check_failures += check_bitwise(name, sum[0], sum[1], N * C) + check_bitwise(name, out[0], out[1], N * C);
        check_failures += check_bitwise(name, rstd[0], rstd[1], N);
        check_failures += check_finite(name, out[0], N * C) + check_finite(name, rstd[0], N);
        snprintf(name, sizeof name, "%s mean", tag);
        check_failures += check_untouched(name, mean, N);
        snprintf(name, sizeof name, "%s backward", tag);
        check_failures += check_bitwise(name, dres[0], dres[1], N * C) + check_bitwise(name, ddelta[0], ddelta[1], N * C);
        check_failures += check_bitwise(name, dw[0], dw[1], C) + check_finite(name, ddelta[0], N * C);
        /* tolerances as test_ops_layernorm.c's residual test: res_out 3u of |res| +
         * |delta'|, out and rstd 4 sqrt(C) u, gradients 1e-5 of each row's scale */
        snprintf(name, sizeof name, "%s res_out", tag);
        check_failures += check_vec(name, sum[0], sum_ref, sum_scale, N * C, 3 * U32, 0.0);
        snprintf(name, sizeof name, "%s out", tag);
        check_failures += check_vec(name, out[0], out_ref, scale, N * C, 4 * sqrt(C) * U32, 0.0);
        snprintf(name, sizeof name, "%s rstd", tag);
        check_failures += check_vec(name, rstd[0], rstd_ref, NULL, N, 4 * sqrt(C) * U32, 0.0);
        snprintf(name, sizeof name, "%s dres_in fd", tag);
        check_failures += check_grad(name, dres[0], NULL, fres, ir, kr, sx, 0, 1e-5);
        snprintf(name, sizeof name, "%s ddelta fd", tag);
        check_failures += check_grad(name, ddelta[0], NULL, fdelta, ir, kr, sx, 0, 1e-5);
        snprintf(name, sizeof name, "%s ddelta", tag);
        check_failures += check_grad(name, ddelta[0], NULL, gdelta, NULL, N * C, sx, 0, 1e-5);
        snprintf(name, sizeof name, "%s dw", tag);
        check_failures += check_grad(name, dw[0], pre_dw, gw, NULL, C, NULL, sw, 1e-5);
        free(scr);
    }
    for (int run = 0; run < 2; run++) {
        free(sum[run]), free(out[run]), free(rstd[run]), free(dw[run]), free(dres[run]), free(ddelta[run]);
    }
    free(mean), free(res), free(delta), free(w), free(R1), free(R2), free(pre_dw);
    free(resd), free(deltad), free(wd), free(R1d), free(R2d), free(sum_ref), free(sum_scale);
    free(out_ref), free(scale), free(gres), free(gdelta), free(sx), free(ir), free(fres), free(fdelta);
}

/* ---- RoPE ---- */

/* Rounding scale of each rotated element: |x_i c| + |x_partner s| of its pair (one
 * product each, one add); 0 for the v columns, which must come back unchanged. */
/* Whether column j of a QKV row is rotated: in a q or k head, among its first r dims. */
static int rope_turns(const hg_rope_shape *s, int j) {
    return j < (s->NH + s->NKV) * s->hs && j % s->hs < hg_rope_dims(s);
}

static void rope_scale(double *scale, const double *x, const float *cs, const hg_rope_shape *s) {
    const int hs = s->hs, rot = hg_rope_dims(s), half = rot / 2, W = (s->NH + 2 * s->NKV) * hs;
    for (int n = 0; n < s->B * s->T; n++) {
        const float *row = cs + (size_t)(s->pos0 + n % s->T) * rot;
        const double *xr = x + (size_t)n * W;
        double *sr = scale + (size_t)n * W;
        for (int j = 0; j < W; j++) {
            if (!rope_turns(s, j)) {
                sr[j] = 0.0;
                continue;
            }
            int i = j % hs % half, first = j % hs < half, partner = first ? j + half : j - half;
            sr[j] = fabs(xr[j] * row[i]) + fabs(xr[partner] * row[half + i]);
        }
    }
}

/* Counts the v columns of a that differ bitwise from b's. */
/* The columns rope does not turn (v, and the q and k dims past r) are a's as they were in b. */
static int check_v_untouched(const char *what, const float *a, const float *b, const hg_rope_shape *s) {
    const int W = (s->NH + 2 * s->NKV) * s->hs;
    int bad = 0;
    for (int n = 0; n < s->B * s->T; n++)
        for (int j = 0; j < W; j++)
            bad += !rope_turns(s, j) && memcmp(a + (size_t)n * W + j, b + (size_t)n * W + j, sizeof(float)) != 0;
    if (bad) fprintf(stderr, "%s: %d elements rope does not turn changed\n", what, bad);
    return bad;
}

/* rot: the rotated dims of a head (0: all hs; fewer: a partial rotary embedding). */
static void test_rope(hg_backend *bes[OPS_NBE], int B, int T, int pos0, int NH, int NKV, int hs, float theta, int rot) {
    const hg_rope_shape s = {B, T, pos0, NH, NKV, hs, rot, NULL};
    const int W = (NH + 2 * NKV) * hs, Tmax = pos0 + T, R = hg_rope_dims(&s); /* the table has exactly the rows used */
    const size_t NQ = (size_t)B * T * W;
    trng r = trng_seed(1400 + (uint64_t)pos0 + (uint64_t)hs + (uint64_t)rot);
    float *cs = fvec((size_t)Tmax * R), *x = fvec(NQ), *y = fvec(NQ);
    ref_rope_table(cs, Tmax, R, theta);
    fill(x, NQ, &r, -2, 2), fill(y, NQ, &r, -1, 1);
    double *xd = dvec(NQ), *yd = dvec(NQ), *fx = dvec(NQ), *by = dvec(NQ), *fscale = dvec(NQ), *bscale = dvec(NQ);
    double *pscale = dvec(NQ);
    widen(xd, x, NQ), widen(yd, y, NQ);
    memcpy(fx, xd, sizeof(double) * NQ), memcpy(by, yd, sizeof(double) * NQ);
    ref_rope(fx, cs, &s, 0);
    ref_rope(by, cs, &s, 1);
    rope_scale(fscale, xd, cs, &s);
    rope_scale(bscale, yd, cs, &s);
    /* the round trip's scale: |x_i| + |x_partner| of each rotated element */
    for (size_t i = 0; i < NQ; i++) {
        int j = (int)(i % W), half = R / 2;
        size_t partner = j % hs < half ? i + half : i - half;
        pscale[i] = rope_turns(&s, j) ? fabs(xd[i]) + fabs(xd[partner]) : 0.0;
    }
    char tag[128], name[192];
    float *fwd[2] = {fvec(NQ), fvec(NQ)}, *bwd[2] = {fvec(NQ), fvec(NQ)}, *rt = fvec(NQ);
    for (int k = 0; k < OPS_NBE; k++) {
        hg_backend *be = bes[k];
        use_backend(be);
        snprintf(tag, sizeof tag, "rope B=%d T=%d pos0=%d NH=%d NKV=%d hs=%d rot=%d threads=%d", B, T, pos0, NH, NKV, hs, R,
                 be->threads);
        for (int run = 0; run < 2; run++) {
            memcpy(fwd[run], x, sizeof(float) * NQ), memcpy(bwd[run], y, sizeof(float) * NQ);
            be->ops->rope_forward(be, fwd[run], cs, &s);
            be->ops->rope_backward(be, bwd[run], cs, &s);
        }
        memcpy(rt, fwd[0], sizeof(float) * NQ);
        be->ops->rope_backward(be, rt, cs, &s);
        /* each rotated element is two products and an add (or a fused multiply-add):
         * within 2u of |x_i c| + |x_partner s|; 3u for margin. v exact. */
        snprintf(name, sizeof name, "%s forward", tag);
        check_failures += check_bitwise(name, fwd[0], fwd[1], NQ) + check_finite(name, fwd[0], NQ);
        check_failures += check_vec(name, fwd[0], fx, fscale, NQ, 3 * U32, 0.0);
        check_failures += check_v_untouched(name, fwd[0], x, &s);
        snprintf(name, sizeof name, "%s backward", tag);
        check_failures += check_bitwise(name, bwd[0], bwd[1], NQ) + check_finite(name, bwd[0], NQ);
        check_failures += check_vec(name, bwd[0], by, bscale, NQ, 3 * U32, 0.0);
        check_failures += check_v_untouched(name, bwd[0], y, &s);
        /* backward is the transpose: <rope(x), y> = <x, rope_backward(y)> exactly for the
         * fp32 table's values; each kernel output is within 2u (1 + u) of its scale, so
         * the two sums in double differ by at most 2.1u (sum fscale |y| + sum |x| bscale) */
        double d1 = 0.0, d2 = 0.0, bound = 0.0;
        for (size_t i = 0; i < NQ; i++) {
            d1 += (double)fwd[0][i] * yd[i];
            d2 += xd[i] * (double)bwd[0][i];
            bound += fscale[i] * fabs(yd[i]) + fabs(xd[i]) * bscale[i];
        }
        bound *= 2.1 * U32;
        if (ops_verbose) printf("  %-44s <rope x, y> - <x, rope' y> = %.3g of bound %.3g\n", "rope transpose", fabs(d1 - d2), bound);
        if (!(fabs(d1 - d2) <= bound)) {
            fprintf(stderr, "%s: <rope(x), y> = %.12g, <x, rope_backward(y)> = %.12g (bound %.3g)\n", tag, d1, d2, bound);
            check_failures++;
        }
        /* backward(forward(x)) = (c^2 + s^2) x up to two rotations' rounding: c, s are
         * rounded from double, so c^2 + s^2 = 1 within 2u; each rotation adds 2u of
         * sqrt(2) (|x_i| + |x_partner|): 8u of |x_i| + |x_partner| */
        snprintf(name, sizeof name, "%s backward(forward)", tag);
        check_failures += check_vec(name, rt, xd, pscale, NQ, 8 * U32, 0.0);
        check_failures += check_v_untouched(name, rt, x, &s);
    }
    for (int run = 0; run < 2; run++) free(fwd[run]), free(bwd[run]);
    free(rt), free(cs), free(x), free(y), free(xd), free(yd), free(fx), free(by), free(fscale), free(bscale), free(pscale);
}

/* ---- SwiGLU, GeGLU and ReLU^2 ---- */

typedef struct act_ctx {
    double *pre;
    const double *R;
    int F;
    hg_mlp_kind kind;
} act_ctx;

/* The only term of sum(out * R) that pre element i moves. */
static double act_loss(void *v, size_t i) {
    act_ctx *c = v;
    if (c->kind == HG_MLP_RELU2) {
        double r = c->pre[i] > 0.0 ? c->pre[i] : 0.0;
        return r * r * c->R[i];
    }
    size_t n = i / (2 * (size_t)c->F), j = i % (2 * (size_t)c->F) % (size_t)c->F;
    const double *g = c->pre + n * 2 * c->F;
    double a = c->kind == HG_MLP_GEGLU ? ref_gelu(g[j]) : ref_silu(g[j]);
    return a * g[c->F + j] * c->R[n * c->F + j];
}

/* The gated activations: kind HG_MLP_SWIGLU or HG_MLP_GEGLU. */
static void test_gated(hg_backend *bes[OPS_NBE], hg_mlp_kind kind) {
    enum { N = 74, F = 171, NP = N * 2 * F, NO = N * F }; /* F: no multiple of a vector width */
    const int geglu = kind == HG_MLP_GEGLU;
    const char *kname = geglu ? "geglu" : "swiglu";
    trng r = trng_seed(1500 + (uint64_t)geglu);
    float *pre = fvec(NP), *R = fvec(NO);
    fill(pre, NP, &r, -6, 6), fill(R, NO, &r, -1, 1);
    /* gates at 0, -0, the ends of the range, and near where the gate's derivative is 0:
     * -1.2785 for silu, -0.7518 for GELU's tanh form */
    const float special[] = {0.0f, -0.0f, 6.0f, -6.0f, geglu ? -0.75179f : -1.2784645f, 1e-3f};
    memcpy(pre, special, sizeof special);
    double *pd = dvec(NP), *Rd = dvec(NO), *want = dvec(NO), *g = dvec(NP), *gscale = dvec(NP), *fd = dvec(NP);
    double *oscale = dvec(NO);
    widen(pd, pre, NP), widen(Rd, R, NO);
    for (int n = 0; n < N; n++)
        for (int j = 0; j < F; j++) {
            size_t ig = (size_t)n * 2 * F + j, iu = ig + F, o = (size_t)n * F + j;
            double x = pd[ig], u = pd[iu], sg = 1.0 / (1.0 + exp(-x));
            double a = geglu ? ref_gelu(x) : ref_silu(x), da = geglu ? ref_gelu_grad(x) : ref_silu_grad(x);
            want[o] = a * u;
            g[ig] = Rd[o] * u * da;
            g[iu] = Rd[o] * a;
            /* dgate = dy u sg (1 + g (1 - sg)) for silu: the terms' size is |dy u| sg (1 + |g|);
             * it cancels near g = -1.28, and 1 - sg cancels for g >> 0. GELU's derivative,
             * 0.5 (1 + th) + 0.5 g sech^2 k (1 + 3 a g^2), has terms of size up to 1 + |g| */
            gscale[ig] = fabs(Rd[o] * u) * (geglu ? 1.0 : sg) * (1.0 + fabs(x));
            /* GELU's 0.5 x (1 + tanh(...)) cancels for x << 0: its terms' size is |x| */
            gscale[iu] = geglu ? fabs(Rd[o] * x) : fabs(g[iu]);
            oscale[o] = geglu ? fabs(x * u) : fabs(want[o]);
        }
    act_ctx ctx = {pd, Rd, F, kind};
    for (size_t i = 0; i < NP; i++) fd[i] = fd_central(pd, i, FD_H, act_loss, &ctx);
    char name[96];
    snprintf(name, sizeof name, "%s ref dpre vs fd", kname);
    check_failures += check_grad_d(name, g, fd, NULL, NP, gscale, 0, FD_TOL);

    float *out[2] = {fvec(NO), fvec(NO)}, *dpre[2] = {fvec(NP), fvec(NP)};
    for (int k = 0; k < OPS_NBE; k++) {
        hg_backend *be = bes[k];
        use_backend(be);
        for (int run = 0; run < 2; run++) {
            poison(out[run], NO), poison(dpre[run], NP);
            be->ops->activation_forward(be, kind, out[run], pre, N, F);
            be->ops->activation_backward(be, kind, dpre[run], pre, R, N, F);
        }
        snprintf(name, sizeof name, "%s threads=%d out", kname, be->threads);
        check_failures += check_bitwise(name, out[0], out[1], NO) + check_finite(name, out[0], NO);
        /* g / (1 + expf(-g)) * u: expf within a few u, then an add, a divide and a
         * multiply, all relative: 8u of |out|; GELU's tanhf form 8u of |g u|, as GELU's */
        check_failures += check_vec(name, out[0], want, oscale, NO, 8 * U32, 0.0);
        snprintf(name, sizeof name, "%s threads=%d dpre", kname, be->threads);
        check_failures += check_bitwise(name, dpre[0], dpre[1], NP) + check_finite(name, dpre[0], NP);
        /* ~8 roundings after expf, against the terms' size: 16u, as GELU's backward */
        check_failures += check_grad(name, dpre[0], NULL, g, NULL, NP, gscale, 0, 16 * U32);
        check_failures += check_grad(name, dpre[0], NULL, fd, NULL, NP, gscale, 0, 16 * U32);
    }
    for (int run = 0; run < 2; run++) free(out[run]), free(dpre[run]);
    free(pre), free(R), free(pd), free(Rd), free(want), free(g), free(gscale), free(fd), free(oscale);
}

static void test_relu2(hg_backend *bes[OPS_NBE]) {
    enum { N = 74, F = 171, NP = N * F, NZ = 2 };
    trng r = trng_seed(1600);
    float *pre = fvec(NP), *R = fvec(NP);
    fill(pre, NP, &r, -3, 3), fill(R, NP, &r, -1, 1);
    /* relu^2 has a kink in its derivative at 0, where a central difference errs by h/2:
     * every input but the first NZ (0 and -0, checked against the analytic gradient
     * only) is at least 1e-3 = 100 FD_H away from 0, so x +- h stay on one side */
    for (int i = 0; i < NP; i++)
        if (fabsf(pre[i]) < 1e-3f) pre[i] = pre[i] < 0 ? -1e-3f : 1e-3f;
    pre[0] = 0.0f, pre[1] = -0.0f;
    double *pd = dvec(NP), *Rd = dvec(NP), *want = dvec(NP), *g = dvec(NP), *fd = dvec(NP - NZ);
    size_t *idx = malloc(sizeof(size_t) * (NP - NZ));
    widen(pd, pre, NP), widen(Rd, R, NP);
    for (int i = 0; i < NP; i++) {
        double x = pd[i] > 0.0 ? pd[i] : 0.0;
        want[i] = x * x;
        g[i] = 2.0 * x * Rd[i];
    }
    act_ctx ctx = {pd, Rd, F, HG_MLP_RELU2};
    for (int i = NZ; i < NP; i++) idx[i - NZ] = (size_t)i, fd[i - NZ] = fd_central(pd, (size_t)i, FD_H, act_loss, &ctx);
    /* the difference of a quadratic is exact but for rounding (1e-16 |x| / h) */
    check_failures += check_grad_d("relu2 ref dpre vs fd", g, fd, idx, NP - NZ, NULL, 0, 1e-9);

    float *out[2] = {fvec(NP), fvec(NP)}, *dpre[2] = {fvec(NP), fvec(NP)};
    for (int k = 0; k < OPS_NBE; k++) {
        hg_backend *be = bes[k];
        use_backend(be);
        char name[96];
        for (int run = 0; run < 2; run++) {
            poison(out[run], NP), poison(dpre[run], NP);
            be->ops->activation_forward(be, HG_MLP_RELU2, out[run], pre, N, F);
            be->ops->activation_backward(be, HG_MLP_RELU2, dpre[run], pre, R, N, F);
        }
        /* out = r * r and dpre = (2 x) * dy: one rounding of an exact product each, so
         * within u relative (exactly 0 for x <= 0); 2u leaves room for the finite
         * differences' own 1e-11 */
        snprintf(name, sizeof name, "relu2 threads=%d out", be->threads);
        check_failures += check_bitwise(name, out[0], out[1], NP) + check_finite(name, out[0], NP);
        check_failures += check_vec(name, out[0], want, NULL, NP, U32, 0.0);
        snprintf(name, sizeof name, "relu2 threads=%d dpre", be->threads);
        check_failures += check_bitwise(name, dpre[0], dpre[1], NP) + check_finite(name, dpre[0], NP);
        check_failures += check_grad(name, dpre[0], NULL, g, NULL, NP, NULL, 0, U32);
        check_failures += check_grad(name, dpre[0], NULL, fd, idx, NP - NZ, NULL, 0, 2 * U32);
    }
    for (int run = 0; run < 2; run++) free(out[run]), free(dpre[run]);
    free(pre), free(R), free(pd), free(Rd), free(want), free(g), free(fd), free(idx);
}

/* ---- grouped-query attention ---- */

/* Grouped-query attention against the kernels' own multi-head attention on an expanded
 * copy, where each query head has its group's k and v: the same out and lse, the same dq,
 * and a kv head's dk, dv = the sum over its query heads of theirs. Both runs are checked
 * against the double reference in test_ops_attention.c; here two kernels' errors meet, so
 * twice its budgets: out 8e-6, lse 8e-6, dqkv 4e-5 of the reference gradient's rms. */
static void test_gqa_groups(hg_backend *bes[OPS_NBE], int B, int T, int NH, int NKV, int hs, int causal) {
    const hg_attention_shape s = {.B = B, .T = T, .NH = NH, .hs = hs, .causal = causal, .NKV = NKV};
    const hg_attention_shape se = {.B = B, .T = T, .NH = NH, .hs = hs, .causal = causal, .NKV = 0};
    const int C = NH * hs, W = (NH + 2 * NKV) * hs, rep = NH / NKV;
    const size_t NQ = (size_t)B * T * W, NE = (size_t)B * T * 3 * C, NO = (size_t)B * T * C, NL = (size_t)B * NH * T;
    trng r = trng_seed(1700 + (uint64_t)T * 8 + (uint64_t)NKV * 2 + (uint64_t)causal);
    float *qkv = fvec(NQ), *R = fvec(NO), *qkve = fvec(NE);
    fill_qkv(qkv, (size_t)B * T, W, (NH + NKV) * hs, &r);
    fill(R, NO, &r, -1, 1);
    for (size_t bt = 0; bt < (size_t)B * T; bt++)
        for (int h = 0; h < NH; h++)
            for (int d = 0; d < hs; d++) {
                const float *src = qkv + bt * W;
                float *dst = qkve + bt * 3 * C;
                dst[h * hs + d] = src[h * hs + d];
                dst[C + h * hs + d] = src[C + h / rep * hs + d];
                dst[2 * C + h * hs + d] = src[C + NKV * hs + h / rep * hs + d];
            }
    double *qkvd = dvec(NQ), *Rd = dvec(NO), *g = dvec(NQ);
    widen(qkvd, qkv, NQ), widen(Rd, R, NO);
    ref_attention_backward(g, Rd, qkvd, &s);
    double sg = rms(g, NQ), *gsum = dvec(NQ), *oe = dvec(NO), *le = dvec(NL);
    float *out = fvec(NO), *lse = fvec(NL), *dqkv = fvec(NQ), *oute = fvec(NO), *lsee = fvec(NL), *dqkve = fvec(NE);
    char tag[160], name[224];
    for (int kb = 0; kb < OPS_NBE; kb++) {
        hg_backend *be = bes[kb];
        use_backend(be);
        size_t bytes = be->ops->attention_scratch_bytes(be, &s), bytese = be->ops->attention_scratch_bytes(be, &se);
        float *scratch = fvec(bytes / sizeof(float)), *scre = fvec(bytese / sizeof(float));
        snprintf(tag, sizeof tag, "gqa B=%d T=%d NH=%d NKV=%d hs=%d %s threads=%d", B, T, NH, NKV, hs,
                 causal ? "causal" : "full", be->threads);
        poison(out, NO), poison(lse, NL), poison(dqkv, NQ), poison(scratch, bytes / sizeof(float));
        CHECK_OK(be->ops->attention_forward(be, out, lse, qkv, &s, scratch));
        CHECK_OK(be->ops->attention_backward(be, dqkv, R, qkv, out, lse, &s, scratch));
        poison(oute, NO), poison(lsee, NL), poison(dqkve, NE), poison(scre, bytese / sizeof(float));
        CHECK_OK(be->ops->attention_forward(be, oute, lsee, qkve, &se, scre));
        CHECK_OK(be->ops->attention_backward(be, dqkve, R, qkve, oute, lsee, &se, scre));
        memset(gsum, 0, sizeof(double) * NQ);
        for (size_t bt = 0; bt < (size_t)B * T; bt++)
            for (int h = 0; h < NH; h++)
                for (int d = 0; d < hs; d++) {
                    const float *e = dqkve + bt * 3 * C;
                    double *dst = gsum + bt * W;
                    dst[h * hs + d] = e[h * hs + d];
                    dst[C + h / rep * hs + d] += e[C + h * hs + d];
                    dst[C + NKV * hs + h / rep * hs + d] += e[2 * C + h * hs + d];
                }
        widen(oe, oute, NO), widen(le, lsee, NL);
        snprintf(name, sizeof name, "%s out vs NKV=NH", tag);
        check_failures += check_vec(name, out, oe, NULL, NO, 0.0, 8e-6);
        snprintf(name, sizeof name, "%s lse vs NKV=NH", tag);
        check_failures += check_vec(name, lse, le, NULL, NL, 8e-6, 8e-6);
        snprintf(name, sizeof name, "%s dqkv vs group sums", tag);
        check_failures += check_grad(name, dqkv, NULL, gsum, NULL, NQ, NULL, sg, 4e-5);
        free(scratch), free(scre);
    }
    free(qkv), free(R), free(qkve), free(qkvd), free(Rd), free(g), free(gsum), free(oe), free(le);
    free(out), free(lse), free(dqkv), free(oute), free(lsee), free(dqkve);
}

/* ---- q/k norm: RMSNorm per q and k head, in place on QKV ---- */

/* The heads of group g (0: the NH q heads, 1: the NKV k heads) of every row of x (N, W),
 * as (N * heads, hs) rows: dst = those of x (to_qkv 0), or x's = src's (to_qkv 1). */
static void head_rows(double *rows, float *x, int N, int NH, int NKV, int hs, int g, int to_qkv) {
    const int W = (NH + 2 * NKV) * hs, heads = g ? NKV : NH, c0 = g ? NH * hs : 0;
    for (int n = 0; n < N; n++)
        for (int i = 0; i < heads * hs; i++) {
            size_t a = (size_t)n * W + c0 + i, r = (size_t)n * heads * hs + i;
            if (to_qkv) x[a] = (float)rows[r];
            else rows[r] = x[a];
        }
}

/* Forward against ref_norm_row per unit (a head, or with `whole` all q heads and all k
 * heads) and backward against ref_norm_backward per group, the reference against finite
 * differences; raw kept bitwise, v untouched, raw NULL giving the same bits, dwq/dwk
 * accumulated (or left alone when NULL). A group's units are contiguous in each row, so
 * its (N, heads hs) block is (N units, width) reference rows either way. */
static void test_qk_norm(hg_backend *bes[OPS_NBE], int N, int NH, int NKV, int hs, int has_w, int whole, uint64_t seed) {
    const hg_norm_spec ns = {1, 1e-6f, 0};
    const hg_qk_norm_shape s = {N, NH, NKV, hs, ns.eps, whole};
    const hg_rope_shape rows_shape = {1, N, 0, NH, NKV, hs, 0, NULL}; /* for check_v_untouched */
    int units[2], width[2];
    hg_qk_norm_units(&s, &units[0], &width[0], &units[1], &width[1]);
    const int U = units[0] + units[1], W = (NH + 2 * NKV) * hs, QK = (NH + NKV) * hs, wmax = width[0] > width[1] ? width[0] : width[1];
    trng r = trng_seed(seed);
    float *qkv = fvec((size_t)N * W), *R = fvec((size_t)N * W), *w[2] = {NULL, NULL}, *pre_dw[2];
    fill(qkv, (size_t)N * W, &r, -1, 1);
    fill(R, (size_t)N * W, &r, -1, 1);
    double *xd[2], *Rd[2], *wd[2] = {NULL, NULL}, *out_ref[2], *rstd_ref[2], *scale[2], *gx[2], *gw[2], *sx[2];
    char name[160], tag[112];
    for (int g = 0; g < 2; g++) {
        const int rows = N * units[g], wg = width[g];
        const size_t n = (size_t)rows * wg;
        float *x = fvec(n); /* norm rows of every spread, eps-sized ones included */
        fill_norm_rows(x, rows, wg, &r, &ns);
        xd[g] = dvec(n), Rd[g] = dvec(n);
        widen(xd[g], x, n);
        head_rows(xd[g], qkv, N, NH, NKV, hs, g, 1);
        head_rows(Rd[g], R, N, NH, NKV, hs, g, 0);
        free(x);
        pre_dw[g] = fvec(wg);
        fill(pre_dw[g], wg, &r, -1, 1);
        if (has_w) {
            w[g] = fvec(wg), wd[g] = dvec(wg);
            fill(w[g], wg, &r, 0.5, 1.5);
            widen(wd[g], w[g], wg);
        }
        out_ref[g] = dvec(n), rstd_ref[g] = dvec(rows), scale[g] = dvec(n);
        double *mean = dvec(rows);
        for (int i = 0; i < rows; i++)
            ref_norm_row(out_ref[g] + (size_t)i * wg, &mean[i], &rstd_ref[g][i], xd[g] + (size_t)i * wg, wd[g], NULL, wg, &ns);
        ref_norm_scale(scale[g], xd[g], mean, rstd_ref[g], wd[g], NULL, rows, wg);
        free(mean);
        gx[g] = dvec(n), gw[g] = dvec(wg), sx[g] = dvec(n);
        ref_norm_backward(gx[g], wd[g] ? gw[g] : NULL, NULL, Rd[g], xd[g], wd[g], rows, wg, &ns);
        norm_grad_scale(sx[g], Rd[g], wd[g], rstd_ref[g], rows, wg, 0.0);
        /* the reference's gradient against finite differences, as in test_norm */
        size_t k, *ix = sample_indices(n, 120, 71 + g, &k);
        double row[1024], *fx = dvec(k), *fw = dvec(wg);
        ref_norm_fd ctx = {xd[g], wd[g], NULL, row, Rd[g], rows, wg, &ns};
        for (size_t j = 0; j < k; j++) fx[j] = fd_central(xd[g], ix[j], FD_H / rstd_ref[g][ix[j] / wg], ref_norm_loss_row, &ctx);
        snprintf(name, sizeof name, "qk norm %s ref dx vs fd", g ? "k" : "q");
        check_failures += check_grad_d(name, gx[g], fx, ix, k, sx[g], 0, FD_TOL);
        if (has_w) {
            for (int c = 0; c < wg; c++) fw[c] = fd_central(wd[g], c, FD_H, ref_norm_loss_all, &ctx);
            snprintf(name, sizeof name, "qk norm %s ref dw vs fd", g ? "k" : "q");
            check_failures += check_grad_d(name, gw[g], fw, NULL, wg, NULL, rms(gw[g], wg), FD_TOL);
        }
        free(ix), free(fx), free(fw);
    }

    float *out[3], *raw[2], *rstd[3], *d[2], *dw[2][2];
    for (int i = 0; i < 3; i++) out[i] = fvec((size_t)N * W), rstd[i] = fvec((size_t)N * U);
    for (int i = 0; i < 2; i++) {
        raw[i] = fvec((size_t)N * QK), d[i] = fvec((size_t)N * W);
        dw[i][0] = fvec(width[0]), dw[i][1] = fvec(width[1]);
    }
    for (int b = 0; b < OPS_NBE; b++) {
        hg_backend *be = bes[b];
        use_backend(be);
        size_t nscr = be->ops->layernorm_scratch_bytes(be, N, wmax) / sizeof(float);
        float *scr = fvec(nscr);
        snprintf(tag, sizeof tag, "qk norm N=%d NH=%d NKV=%d hs=%d%s%s threads=%d", N, NH, NKV, hs, has_w ? " w" : "",
                 whole ? " whole" : "", be->threads);
        /* runs 0 and 1 keep raw; run 2 passes NULL and must give the same bits */
        for (int run = 0; run < 3; run++) {
            memcpy(out[run], qkv, sizeof(float) * N * W);
            poison(rstd[run], (size_t)N * U);
            if (run < 2) poison(raw[run], (size_t)N * QK);
            be->ops->qk_norm_forward(be, out[run], run < 2 ? raw[run] : NULL, rstd[run], w[0], w[1], &s);
        }
        snprintf(name, sizeof name, "%s out", tag);
        check_failures += check_bitwise(name, out[0], out[1], (size_t)N * W) + check_bitwise(name, out[0], out[2], (size_t)N * W);
        check_failures += check_bitwise(name, rstd[0], rstd[1], (size_t)N * U) + check_finite(name, out[0], (size_t)N * W);
        check_failures += check_v_untouched(name, out[0], qkv, &rows_shape);
        snprintf(name, sizeof name, "%s raw", tag);
        for (int n = 0; n < N; n++) check_failures += check_bitwise(name, raw[0] + (size_t)n * QK, qkv + (size_t)n * W, QK);
        for (int g = 0; g < 2; g++) {
            const int rows = N * units[g], wg = width[g];
            const size_t n = (size_t)rows * wg;
            double *got = dvec(n);
            float *gotf = fvec(n), *rsf = fvec(rows);
            head_rows(got, out[0], N, NH, NKV, hs, g, 0);
            for (size_t i = 0; i < n; i++) gotf[i] = (float)got[i];
            for (int t = 0; t < N; t++)
                for (int u = 0; u < units[g]; u++) rsf[t * units[g] + u] = rstd[0][(size_t)t * U + (g ? units[0] : 0) + u];
            snprintf(name, sizeof name, "%s %s", tag, g ? "k" : "q");
            check_failures += check_vec(name, gotf, out_ref[g], scale[g], n, 4 * sqrt(wg) * U32, 0.0);
            snprintf(name, sizeof name, "%s %s rstd", tag, g ? "k" : "q");
            check_failures += check_vec(name, rsf, rstd_ref[g], NULL, rows, 4 * sqrt(wg) * U32, 0.0);
            free(got), free(gotf), free(rsf);
        }

        for (int run = 0; run < 2; run++) {
            memcpy(d[run], R, sizeof(float) * N * W);
            for (int g = 0; g < 2; g++) memcpy(dw[run][g], pre_dw[g], sizeof(float) * width[g]);
            poison(scr, nscr);
            be->ops->qk_norm_backward(be, d[run], w[0] ? dw[run][0] : NULL, w[1] ? dw[run][1] : NULL, raw[0], rstd[0],
                                      w[0], w[1], &s, scr);
        }
        snprintf(name, sizeof name, "%s backward", tag);
        check_failures += check_bitwise(name, d[0], d[1], (size_t)N * W) + check_finite(name, d[0], (size_t)N * W);
        check_failures += check_v_untouched(name, d[0], R, &rows_shape);
        for (int g = 0; g < 2; g++) {
            const int wg = width[g];
            const size_t n = (size_t)N * units[g] * wg;
            double *got = dvec(n);
            float *gotf = fvec(n);
            head_rows(got, d[0], N, NH, NKV, hs, g, 0);
            for (size_t i = 0; i < n; i++) gotf[i] = (float)got[i];
            /* dx: two width-term reductions per row, 1e-5 of the row's scale, as the norms' */
            snprintf(name, sizeof name, "%s d%s", tag, g ? "k" : "q");
            check_failures += check_grad(name, gotf, NULL, gx[g], NULL, n, sx[g], 0, 1e-5);
            snprintf(name, sizeof name, "%s dw%s", tag, g ? "k" : "q");
            check_failures += check_bitwise(name, dw[0][g], dw[1][g], wg);
            if (has_w) check_failures += check_grad(name, dw[0][g], pre_dw[g], gw[g], NULL, wg, NULL, rms(gw[g], wg), 1e-5);
            else check_failures += check_bitwise(name, dw[0][g], pre_dw[g], wg);
            free(got), free(gotf);
        }
        free(scr);
    }
    free(qkv), free(R);
    for (int g = 0; g < 2; g++) {
        free(w[g]), free(pre_dw[g]), free(xd[g]), free(Rd[g]), free(wd[g]), free(out_ref[g]), free(rstd_ref[g]);
        free(scale[g]), free(gx[g]), free(gw[g]), free(sx[g]);
    }
    for (int i = 0; i < 3; i++) free(out[i]), free(rstd[i]);
    for (int i = 0; i < 2; i++) free(raw[i]), free(d[i]), free(dw[i][0]), free(dw[i][1]);
}

int test_ops_llama(hg_backend *bes[OPS_NBE]) {
    const hg_norm_spec rms5 = {1, 1e-5f, 0}, rms6 = {1, 1e-6f, 0}, ln5 = {0, 1e-5f, 0};
    test_norm(bes, rms5, 1, 0, 1200); /* Llama's RMSNorm: a weight, no bias */
    test_norm(bes, rms6, 1, 0, 1201); /* rows whose mean square is ~1e-6 */
    test_norm(bes, rms5, 0, 0, 1202); /* without a weight */
    test_norm(bes, ln5, 0, 0, 1203);  /* LayerNorm without affine parameters */
    test_residual_rmsnorm(bes, rms6, 0.0f);
    test_residual_rmsnorm(bes, rms5, 0.3f);
    test_qk_norm(bes, 37, 4, 2, 32, 1, 0, 1210); /* Qwen3's: a weight per q and per k */
    test_qk_norm(bes, 5, 3, 1, 16, 0, 0, 1211);  /* multi-query, without weights */
    test_qk_norm(bes, 23, 4, 2, 32, 1, 1, 1212); /* OLMo 2's: all q heads as one, all k heads as one */
    test_qk_norm(bes, 7, 3, 1, 16, 0, 1, 1213);

    test_rope(bes, 2, 37, 0, 6, 2, 16, 10000.0f, 0);
    test_rope(bes, 2, 37, 211, 6, 2, 32, 10000.0f, 0);  /* a later chunk of the sequences */
    test_rope(bes, 3, 1, 4000, 4, 1, 32, 500000.0f, 0); /* one generated row, Llama 3's theta */
    test_rope(bes, 2, 37, 5, 6, 2, 32, 10000.0f, 10);   /* partial: 10 of 32 dims turn (Phi-2's 0.4 is 32 of 80) */

    test_gated(bes, HG_MLP_SWIGLU);
    test_gated(bes, HG_MLP_GEGLU);
    test_relu2(bes);

    test_gqa_groups(bes, 2, 37, 6, 2, 16, 1);  /* one partial block */
    test_gqa_groups(bes, 2, 37, 4, 1, 16, 1);  /* multi-query */
    test_gqa_groups(bes, 2, 37, 6, 2, 16, 0);  /* non-causal */
    test_gqa_groups(bes, 2, 130, 6, 2, 16, 1); /* three blocks, their diagonal slabs */
    test_gqa_groups(bes, 2, 130, 4, 1, 16, 1);
    return check_failures;
}
