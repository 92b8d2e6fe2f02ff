/* Op tests, part 2: LayerNorm forward and backward, and the residual add fused with the
 * next LayerNorm (with and without dropout), backpropagated the way the model chains
 * layernorm_backward and dropout_backward. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "ops_reference.h"
#include "ops_util.h"
#include "test_ops.h"

static const hg_norm_spec LN = {0, 1e-5f, 0}; /* GPT-2's LayerNorm */

/* Rows with varied offsets and spreads: the 0.01-spread rows have a variance (3e-5)
 * near eps, so a wrong or missing eps moves their outputs by ~10%. */
static void fill_rows(float *x, int N, int C, trng *r) {
    static const double spread[] = {0.01, 0.1, 1.0, 4.0};
    for (int n = 0; n < N; n++) {
        double mu = trng_range(r, -0.5, 0.5), sd = spread[n % 4];
        for (int c = 0; c < C; c++) x[n * C + c] = (float)(mu + sd * trng_range(r, -1.7, 1.7));
    }
}

static void test_layernorm(hg_backend *bes[OPS_NBE]) {
    enum { N = 74, C = 96 };
    trng r = trng_seed(200);
    float *x = fvec(N * C), *w = fvec(C), *b = fvec(C), *R = fvec(N * C);
    float *pre_dx = fvec(N * C), *pre_dw = fvec(C), *pre_db = fvec(C);
    fill_rows(x, N, C, &r);
    fill(w, C, &r, -1.5, 1.5), fill(b, C, &r, -0.5, 0.5), fill(R, N * C, &r, -1, 1);
    fill(pre_dx, N * C, &r, -1, 1), fill(pre_dw, C, &r, -1, 1), fill(pre_db, C, &r, -1, 1);
    double *xd = dvec(N * C), *wd = dvec(C), *bd = dvec(C), *Rd = dvec(N * C);
    widen(xd, x, N * C), widen(wd, w, C), widen(bd, b, C), widen(Rd, R, N * C);

    double *out_ref = dvec(N * C), mean_ref[N], rstd_ref[N], mabs[N], *scale = dvec(N * C);
    for (int n = 0; n < N; n++) {
        ref_norm_row(out_ref + n * C, &mean_ref[n], &rstd_ref[n], xd + n * C, wd, bd, C, &LN);
        mabs[n] = 0.0;
        for (int c = 0; c < C; c++) mabs[n] += fabs(xd[n * C + c]) / C;
    }
    ref_norm_scale(scale, xd, mean_ref, rstd_ref, wd, bd, N, C);

    /* analytic gradients, and their natural scale per element: a row's dx is
     * rstd * (dy w - means), so its scale is rstd * rms(dy w) of that row */
    double *gx = dvec(N * C), gw[C], gb[C], *sx = dvec(N * C);
    ref_norm_backward(gx, gw, gb, Rd, xd, wd, N, C, &LN);
    for (int n = 0; n < N; n++) {
        double s2 = 0.0;
        for (int c = 0; c < C; c++) s2 += Rd[n * C + c] * wd[c] * Rd[n * C + c] * wd[c];
        for (int c = 0; c < C; c++) sx[n * C + c] = rstd_ref[n] * sqrt(s2 / C);
    }
    size_t kx, *ix = sample_indices(N * C, 250, 21, &kx);
    double row[C], *fx = dvec(kx), fw[C], fb[C];
    ref_norm_fd ctx = {xd, wd, bd, row, Rd, N, C, &LN};
    for (size_t j = 0; j < kx; j++) fx[j] = fd_central(xd, ix[j], FD_H, ref_norm_loss_row, &ctx);
    for (int c = 0; c < C; c++) fw[c] = fd_central(wd, c, FD_H, ref_norm_loss_all, &ctx);
    for (int c = 0; c < C; c++) fb[c] = fd_central(bd, c, FD_H, ref_norm_loss_all, &ctx);
    double sw = rms(gw, C), sb = rms(gb, C);
    check_failures += check_grad_d("layernorm ref dinp vs fd", gx, fx, ix, kx, sx, 0, FD_TOL);
    check_failures += check_grad_d("layernorm ref dw vs fd", gw, fw, NULL, C, NULL, sw, FD_TOL);
    check_failures += check_grad_d("layernorm ref db vs fd", gb, fb, NULL, C, NULL, sb, FD_TOL);

    float *out = fvec(N * C), *mean = fvec(N), *rstd = fvec(N), *out2 = fvec(N * C), *mean2 = fvec(N), *rstd2 = fvec(N);
    float *dx[2] = {fvec(N * C), fvec(N * C)}, *dw[2] = {fvec(C), fvec(C)}, *db[2] = {fvec(C), fvec(C)};
    for (int k = 0; k < OPS_NBE; k++) {
        hg_backend *be = bes[k];
        use_backend(be);
        float *scr = fvec((size_t)2 * C * be->threads); /* exactly what the contract asks */
        char tag[64], name[128];
        snprintf(tag, sizeof tag, "layernorm threads=%d", be->threads);
        poison(out, N * C), poison(mean, N), poison(rstd, N);
        poison(out2, N * C), poison(mean2, N), poison(rstd2, N);
        be->ops->layernorm_forward(be, out, mean, rstd, x, w, b, N, C, &LN);
        be->ops->layernorm_forward(be, out2, mean2, rstd2, x, w, b, N, C, &LN);
        snprintf(name, sizeof name, "%s out", tag);
        check_failures += check_bitwise(name, out, out2, N * C) + check_bitwise(name, mean, mean2, N) + check_bitwise(name, rstd, rstd2, N);
        check_failures += check_finite(name, out, N * C);
        /* the mean's fp32 sum over C terms errs by ~sqrt(C) u |x| (C u at worst); as a
         * fraction of the computed magnitude, 4 sqrt(C) u = 2.3e-6 */
        check_failures += check_vec(name, out, out_ref, scale, N * C, 4 * sqrt(C) * U32, 0.0);
        snprintf(name, sizeof name, "%s mean", tag);
        check_failures += check_vec(name, mean, mean_ref, mabs, N, 4 * sqrt(C) * U32, 0.0);
        /* rstd: the variance sums C positive terms (the mean's error enters at second
         * order only): relative 4 sqrt(C) u */
        snprintf(name, sizeof name, "%s rstd", tag);
        check_failures += check_vec(name, rstd, rstd_ref, NULL, N, 4 * sqrt(C) * U32, 0.0);

        for (int run = 0; run < 2; run++) {
            memcpy(dx[run], pre_dx, sizeof(float) * N * C);
            memcpy(dw[run], pre_dw, sizeof(float) * C);
            memcpy(db[run], pre_db, sizeof(float) * C);
            poison(scr, (size_t)2 * C * be->threads);
            be->ops->layernorm_backward(be, dx[run], dw[run], db[run], R, x, w, mean, rstd, N, C, scr, &LN);
        }
        snprintf(name, sizeof name, "%s backward", tag);
        check_failures += check_bitwise(name, dx[0], dx[1], N * C) + check_bitwise(name, dw[0], dw[1], C) + check_bitwise(name, db[0], db[1], C);
        /* dinp: two C-term reductions per row, against the row's own scale: 1e-5
         * (~30 sqrt(C) u, room for the fp32 mean/rstd the backward is given);
         * a wrong term (say, the missing xh * mean(g xh)) is O(1) of that scale */
        snprintf(name, sizeof name, "%s dinp fd", tag);
        check_failures += check_grad(name, dx[0], pre_dx, fx, ix, kx, sx, 0, 1e-5);
        snprintf(name, sizeof name, "%s dinp", tag);
        check_failures += check_grad(name, dx[0], pre_dx, gx, NULL, N * C, sx, 0, 1e-5);
        check_failures += check_rel_l2(name, dx[0], pre_dx, gx, N * C, 2e-6);
        /* dw, db: sums over N rows (per-thread partials, then in thread order) of terms
         * up to rstd (~150) in size, against the tensor's rms: 1e-5 */
        snprintf(name, sizeof name, "%s dw fd", tag);
        check_failures += check_grad(name, dw[0], pre_dw, fw, NULL, C, NULL, sw, 1e-5);
        snprintf(name, sizeof name, "%s db fd", tag);
        check_failures += check_grad(name, db[0], pre_db, fb, NULL, C, NULL, sb, 1e-5);
        free(scr);
    }
    free(x), free(w), free(b), free(R), free(pre_dx), free(pre_dw), free(pre_db);
    free(xd), free(wd), free(bd), free(Rd), free(out_ref), free(scale), free(gx), free(sx), free(ix), free(fx);
    free(out), free(mean), free(rstd), free(out2), free(mean2), free(rstd2);
    for (int run = 0; run < 2; run++) free(dx[run]), free(dw[run]), free(db[run]);
}

static void test_residual_layernorm(hg_backend *bes[OPS_NBE], float p) {
    enum { N = 74, C = 96 };
    const hg_dropout drop = {.p = p, .seed = 99, .step = 12, .site = 3};
    trng r = trng_seed(300 + (p > 0));
    float *res = fvec(N * C), *delta = fvec(N * C), *w = fvec(C), *b = fvec(C), *R1 = fvec(N * C), *R2 = fvec(N * C);
    fill_rows(res, N, C, &r);
    fill(delta, N * C, &r, -0.05, 0.05); /* a branch output smaller than the stream */
    fill(w, C, &r, -1.5, 1.5), fill(b, C, &r, -0.5, 0.5), fill(R1, N * C, &r, -1, 1), fill(R2, N * C, &r, -1, 1);
    double *resd = dvec(N * C), *deltad = dvec(N * C), *wd = dvec(C), *bd = dvec(C), *R1d = dvec(N * C), *R2d = dvec(N * C);
    widen(resd, res, N * C), widen(deltad, delta, N * C), widen(wd, w, C), widen(bd, b, C);
    widen(R1d, R1, N * C), widen(R2d, R2, N * C);

    double *sum_ref = dvec(N * C), *sum_scale = dvec(N * C), *out_ref = dvec(N * C), mean_ref[N], rstd_ref[N];
    double *scale = dvec(N * C);
    for (int i = 0; i < N * C; i++) {
        double d = deltad[i] * ref_dropout_scale(&drop, i);
        sum_ref[i] = resd[i] + d;
        sum_scale[i] = fabs(resd[i]) + fabs(d);
    }
    for (int n = 0; n < N; n++) ref_norm_row(out_ref + n * C, &mean_ref[n], &rstd_ref[n], sum_ref + n * C, wd, bd, C, &LN);
    ref_norm_scale(scale, sum_ref, mean_ref, rstd_ref, wd, bd, N, C);

    /* analytic: dres_in = R2 + LN'(R1); ddelta = mask * dres_in */
    double *gres = dvec(N * C), *gdelta = dvec(N * C), gw[C], gb[C], *sx = dvec(N * C);
    ref_norm_backward(gres, gw, gb, R1d, sum_ref, wd, N, C, &LN);
    for (int n = 0; n < N; n++) {
        double s2 = 0.0;
        for (int c = 0; c < C; c++) s2 += R1d[n * C + c] * wd[c] * R1d[n * C + c] * wd[c];
        for (int c = 0; c < C; c++) sx[n * C + c] = 1.0 + rstd_ref[n] * sqrt(s2 / C);
    }
    for (int i = 0; i < N * C; i++) {
        gres[i] += R2d[i];
        gdelta[i] = gres[i] * ref_dropout_scale(&drop, i);
    }
    size_t kr, *ir = sample_indices(N * C, 200, 31, &kr);
    double row[C], rowsum[C], *fres = dvec(kr), *fdelta = dvec(kr);
    ref_residual_norm_fd ctx = {resd, deltad, row, rowsum, wd, bd, R1d, R2d, C, &drop, &LN};
    for (size_t j = 0; j < kr; j++) {
        fres[j] = fd_central(resd, ir[j], FD_H, ref_residual_norm_loss, &ctx);
        fdelta[j] = fd_central(deltad, ir[j], FD_H, ref_residual_norm_loss, &ctx);
    }
    char tag[96], name[160];
    snprintf(tag, sizeof tag, "residual_layernorm p=%g", p);
    snprintf(name, sizeof name, "%s ref dres vs fd", tag);
    check_failures += check_grad_d(name, gres, fres, ir, kr, sx, 0, FD_TOL);
    snprintf(name, sizeof name, "%s ref ddelta vs fd", tag);
    check_failures += check_grad_d(name, gdelta, fdelta, ir, kr, sx, 0, FD_TOL);

    float *sum[2] = {fvec(N * C), fvec(N * C)}, *out[2] = {fvec(N * C), fvec(N * C)};
    float *mean[2] = {fvec(N), fvec(N)}, *rstd[2] = {fvec(N), fvec(N)};
    float *dres[2] = {fvec(N * C), fvec(N * C)}, *ddelta[2] = {fvec(N * C), fvec(N * C)};
    float *dw = fvec(C), *db = fvec(C);
    for (int k = 0; k < OPS_NBE; k++) {
        hg_backend *be = bes[k];
        use_backend(be);
        float *scr = fvec((size_t)2 * C * be->threads);
        snprintf(tag, sizeof tag, "residual_layernorm p=%g threads=%d", p, be->threads);
        for (int run = 0; run < 2; run++) {
            poison(sum[run], N * C), poison(out[run], N * C), poison(mean[run], N), poison(rstd[run], N);
            be->ops->residual_layernorm_forward(be, sum[run], out[run], mean[run], rstd[run], res, delta, w, b, N, C, &drop, &LN);
            /* backward: the stream's gradient arrives in dres (R2), LayerNorm adds into it */
            memcpy(dres[run], R2, sizeof(float) * N * C);
            memset(dw, 0, sizeof(float) * C), memset(db, 0, sizeof(float) * C);
            be->ops->layernorm_backward(be, dres[run], dw, db, R1, sum[run], w, mean[run], rstd[run], N, C, scr, &LN);
            poison(ddelta[run], N * C);
            if (hg_dropout_on(&drop)) be->ops->dropout_backward(be, ddelta[run], dres[run], (size_t)N * C, &drop);
            else memcpy(ddelta[run], dres[run], sizeof(float) * N * C);
        }
        snprintf(name, sizeof name, "%s forward", tag);
        check_failures += check_bitwise(name, sum[0], sum[1], N * C) + check_bitwise(name, out[0], out[1], N * C);
        check_failures += check_bitwise(name, mean[0], mean[1], N) + check_bitwise(name, rstd[0], rstd[1], N);
        check_failures += check_finite(name, out[0], N * C) + check_finite(name, mean[0], N) + check_finite(name, rstd[0], N);
        snprintf(name, sizeof name, "%s backward", tag);
        check_failures += check_bitwise(name, dres[0], dres[1], N * C) + check_bitwise(name, ddelta[0], ddelta[1], N * C);
        check_failures += check_finite(name, ddelta[0], N * C);
        /* res_out: one add after one multiply by the fp32 scale: 3u of |res| + |delta'| */
        snprintf(name, sizeof name, "%s res_out", tag);
        check_failures += check_vec(name, sum[0], sum_ref, sum_scale, N * C, 3 * U32, 0.0);
        /* out: as LayerNorm alone (4 sqrt(C) u of the computed magnitude); the fp32
         * rounding of res_out (u |res|) is inside that magnitude */
        snprintf(name, sizeof name, "%s out", tag);
        check_failures += check_vec(name, out[0], out_ref, scale, N * C, 4 * sqrt(C) * U32, 0.0);
        snprintf(name, sizeof name, "%s rstd", tag);
        check_failures += check_vec(name, rstd[0], rstd_ref, NULL, N, 4 * sqrt(C) * U32, 0.0);
        /* gradients: as LayerNorm's dinp, 1e-5 of each row's scale */
        snprintf(name, sizeof name, "%s dres_in fd", tag);
        check_failures += check_grad(name, dres[0], NULL, fres, ir, kr, sx, 0, 1e-5);
        snprintf(name, sizeof name, "%s ddelta fd", tag);
        check_failures += check_grad(name, ddelta[0], NULL, fdelta, ir, kr, sx, 0, 1e-5);
        snprintf(name, sizeof name, "%s ddelta", tag);
        check_failures += check_grad(name, ddelta[0], NULL, gdelta, NULL, N * C, sx, 0, 1e-5);
        /* dropout_backward alone: one multiply by the fp32 scale, so 2u relative */
        if (hg_dropout_on(&drop)) {
            double *want = dvec(N * C);
            for (int i = 0; i < N * C; i++) want[i] = dres[0][i] * ref_dropout_scale(&drop, i);
            snprintf(name, sizeof name, "%s dropout_backward", tag);
            check_failures += check_vec(name, ddelta[0], want, NULL, N * C, 2 * U32, 0.0);
            free(want);
        }
        free(scr);
    }
    for (int run = 0; run < 2; run++) {
        free(sum[run]), free(out[run]), free(mean[run]), free(rstd[run]), free(dres[run]), free(ddelta[run]);
    }
    free(dw), free(db), free(res), free(delta), free(w), free(b), free(R1), free(R2);
    free(resd), free(deltad), free(wd), free(bd), free(R1d), free(R2d), free(sum_ref), free(sum_scale);
    free(out_ref), free(scale), free(gres), free(gdelta), free(sx), free(ir), free(fres), free(fdelta);
}

int test_ops_layernorm(hg_backend *bes[OPS_NBE]) {
    test_layernorm(bes);
    test_residual_layernorm(bes, 0.0f);
    test_residual_layernorm(bes, 0.3f);
    return check_failures;
}
