/* Op tests, part 4: the classifier (logits = x @ wte^T, softmax cross-entropy, and its
 * backward), in chunks of rows that do not divide N, with ignored targets (-1), a
 * dscale != 1, and padded vocabulary rows that must neither score nor get gradient.
 *
 * The loss the backward differentiates is L = dscale * sum of the per-row losses. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "ops_reference.h"
#include "ops_util.h"
#include "test_ops.h"

typedef struct cls_ctx {
    double *x, *wte, *zrow;
    const double *Z; /* (N, V) reference logits at the unperturbed point */
    const int32_t *targets;
    int N, C, V;
    double dscale;
} cls_ctx;

/* x[n, c] moves row n's logits only. */
static double cls_loss_x(void *v, size_t i) {
    cls_ctx *c = v;
    int n = (int)(i / c->C);
    ref_logits_row(c->zrow, c->x + (size_t)n * c->C, c->wte, c->V, c->C);
    return c->dscale * ref_row_loss(c->zrow, c->V, c->targets[n]);
}

/* wte[v, c] moves logit v of every row: recompute that one, keep the others. */
static double cls_loss_wte(void *v, size_t i) {
    cls_ctx *c = v;
    int col = (int)(i / c->C);
    double L = 0.0;
    for (int n = 0; n < c->N; n++) {
        if (c->targets[n] < 0) continue;
        memcpy(c->zrow, c->Z + (size_t)n * c->V, sizeof(double) * c->V);
        ref_logits_row(c->zrow + col, c->x + (size_t)n * c->C, c->wte + (size_t)col * c->C, 1, c->C);
        L += ref_row_loss(c->zrow, c->V, c->targets[n]);
    }
    return c->dscale * L;
}

enum { WITH_LOGITS = 1, WITH_TARGETS = 2, BACKWARD = 4 };

static void test_classifier(hg_backend *bes[OPS_NBE], int N, int chunk, int V, int Vp, int mode) {
    const int C = 96;
    const size_t NC = (size_t)N * C, VC = (size_t)Vp * C;
    const int logits_on = mode & WITH_LOGITS, targets_on = mode & WITH_TARGETS, backward = mode & BACKWARD;
    trng r = trng_seed(800 + (uint64_t)N * 8 + (uint64_t)mode);
    float *x = fvec(NC), *wte = fvec(VC);
    int32_t *targets = ivec(N);
    fill(x, NC, &r, -1, 1);
    for (int n = 0; n < N; n += 3) /* every third row 4x larger: peaked softmaxes, logits ~10 */
        for (int c = 0; c < C; c++) x[n * C + c] *= 4.0f;
    fill(wte, (size_t)V * C, &r, -0.3, 0.3);
    fill(wte + (size_t)V * C, (size_t)(Vp - V) * C, &r, -3, 3); /* padding that would dominate if it scored */
    for (int n = 0; n < N; n++) targets[n] = n % 7 == 3 ? -1 : trng_int(&r, V);
    targets[0] = V - 1;
    if (N > 1) targets[N - 1] = 0;
    int valid = 0;
    for (int n = 0; n < N; n++) valid += targets[n] >= 0;
    const float dscale = 0.75f / (float)valid; /* a mean over the targets, times a clip factor */

    double *xd = dvec(NC), *wted = dvec(VC), *Z = dvec((size_t)N * V), *zmag = dvec((size_t)N * V);
    double *loss_ref = dvec(N), *loss_scale = dvec(N);
    widen(xd, x, NC), widen(wted, wte, VC);
    for (int n = 0; n < N; n++) {
        ref_logits_row(Z + (size_t)n * V, xd + (size_t)n * C, wted, V, C);
        loss_ref[n] = ref_row_loss(Z + (size_t)n * V, V, targets_on ? targets[n] : -1);
        double mx = 0.0;
        for (int v = 0; v < V; v++) {
            double a = 0.0;
            for (int c = 0; c < C; c++) a += fabs(xd[(size_t)n * C + c] * wted[(size_t)v * C + c]);
            zmag[(size_t)n * V + v] = a;
            mx = a > mx ? a : mx;
        }
        /* a loss is lse - z[t]: it moves with the logits' errors (C-term dots,
         * ~sqrt(C) u of their magnitude, which is at most mx) and the fp32 sum of V
         * exponentials (~sqrt(V) u relative, the same absolute in the log), plus a few u
         * of |loss| for expf and logf. The worst-case bounds (C and V in place of the
         * square roots) are far looser than what is seen; these scales times 2u
         * (<= 4e-5) are ~10x it, and a vocabulary entry lost from the sum (~1/V =
         * 1e-3) is 25x or more. */
        loss_scale[n] = sqrt((double)C) * mx + sqrt((double)V) + fabs(loss_ref[n]);
    }

    double *gx = dvec(NC), *gw = dvec(VC);
    size_t kx = 0, kw = 0, *ix = NULL, *iw = NULL;
    double *fx = NULL, *fw = NULL, sx = 0, sw = 0;
    float *pre_dwte = fvec(VC);
    if (backward) {
        ref_classifier_backward(gx, gw, xd, wted, targets, N, C, V, Vp, dscale);
        sx = rms(gx, NC), sw = rms(gw, (size_t)V * C);
        /* prefill dwte at the gradient's own scale, as a running accumulation would be */
        fill(pre_dwte, VC, &r, -sw, sw);
        ix = sample_indices(NC, 200, 11, &kx);
        iw = sample_indices((size_t)V * C, 120, 12, &kw);
        fx = dvec(kx), fw = dvec(kw);
        double *zrow = dvec(V);
        cls_ctx ctx = {xd, wted, zrow, Z, targets, N, C, V, dscale};
        for (size_t j = 0; j < kx; j++) fx[j] = fd_central(xd, ix[j], FD_H, cls_loss_x, &ctx);
        for (size_t j = 0; j < kw; j++) fw[j] = fd_central(wted, iw[j], FD_H, cls_loss_wte, &ctx);
        free(zrow);
    }
    char tag[128], name[192];
    snprintf(tag, sizeof tag, "classifier N=%d chunk=%d V=%d%s%s%s", N, chunk, V, logits_on ? " logits" : "",
             targets_on ? " targets" : "", backward ? " backward" : "");
    if (backward) {
        snprintf(name, sizeof name, "%s ref dx vs fd", tag);
        check_failures += check_grad_d(name, gx, fx, ix, kx, NULL, sx, FD_TOL);
        snprintf(name, sizeof name, "%s ref dwte vs fd", tag);
        check_failures += check_grad_d(name, gw, fw, iw, kw, NULL, sw, FD_TOL);
    }

    float *losses[2] = {fvec(N), fvec(N)}, *logits[2] = {fvec((size_t)N * V), fvec((size_t)N * V)};
    float *dx[2] = {fvec(NC), fvec(NC)}, *dwte[2] = {fvec(VC), fvec(VC)};
    float *scratch = fvec((size_t)chunk * Vp);
    for (int k = 0; k < OPS_NBE; k++) {
        hg_backend *be = bes[k];
        use_backend(be);
        snprintf(tag, sizeof tag, "classifier N=%d chunk=%d V=%d%s%s%s threads=%d", N, chunk, V, logits_on ? " logits" : "",
                 targets_on ? " targets" : "", backward ? " backward" : "", be->threads);
        for (int run = 0; run < 2; run++) {
            poison(losses[run], N), poison(logits[run], (size_t)N * V), poison(dx[run], NC), poison(scratch, (size_t)chunk * Vp);
            memcpy(dwte[run], pre_dwte, sizeof(float) * VC);
            for (int r0 = 0; r0 < N; r0 += chunk) { /* chunk by chunk, as gpt_classifier runs it */
                hg_classifier_args a = {
                    .N = N - r0 < chunk ? N - r0 : chunk, .C = C, .V = V, .Vp = Vp, .x = x + (size_t)r0 * C,
                    .wte = wte, .targets = targets_on ? targets + r0 : NULL,
                    .losses = targets_on ? losses[run] + r0 : NULL,
                    .logits = logits_on ? logits[run] + (size_t)r0 * V : NULL, .scratch = scratch,
                };
                if (backward) a.dscale = dscale, a.dx = dx[run] + (size_t)r0 * C, a.dwte = dwte[run];
                CHECK_OK(be->ops->classifier_forward(be, &a));
                if (backward) CHECK_OK(be->ops->classifier_backward(be, &a));
            }
        }
        if (logits_on) {
            snprintf(name, sizeof name, "%s logits", tag);
            check_failures += check_bitwise(name, logits[0], logits[1], (size_t)N * V) + check_finite(name, logits[0], (size_t)N * V);
            /* a C-term dot product: gamma_C = C u of its magnitude */
            check_failures += check_vec(name, logits[0], Z, zmag, (size_t)N * V, C * U32, 0.0);
        }
        if (targets_on) {
            snprintf(name, sizeof name, "%s losses", tag);
            check_failures += check_bitwise(name, losses[0], losses[1], N) + check_finite(name, losses[0], N);
            check_failures += check_vec(name, losses[0], loss_ref, loss_scale, N, 2 * U32, 0.0);
        }
        if (!backward) continue;
        snprintf(name, sizeof name, "%s dx", tag);
        check_failures += check_bitwise(name, dx[0], dx[1], NC) + check_finite(name, dx[0], NC);
        /* dx sums Vp terms dlogit * wte whose dlogits carry the loss's relative error;
         * against the tensor's rms (the per-element magnitudes are alike): 2e-5,
         * ~sqrt(Vp) u (2e-6) with a 10x margin. A missing dscale, a target not
         * subtracted or a padded logit let in is an O(1) error. */
        check_failures += check_grad(name, dx[0], NULL, gx, NULL, NC, NULL, sx, 2e-5);
        check_failures += check_grad(name, dx[0], NULL, fx, ix, kx, NULL, sx, 2e-5);
        check_failures += check_rel_l2(name, dx[0], NULL, gx, NC, 5e-6);
        snprintf(name, sizeof name, "%s dwte", tag);
        check_failures += check_bitwise(name, dwte[0], dwte[1], VC);
        /* dwte sums N terms per chunk, accumulated chunk by chunk into the prefill */
        check_failures += check_grad(name, dwte[0], pre_dwte, gw, NULL, (size_t)V * C, NULL, sw, 2e-5);
        check_failures += check_grad(name, dwte[0], pre_dwte, fw, iw, kw, NULL, sw, 2e-5);
        check_failures += check_rel_l2(name, dwte[0], pre_dwte, gw, (size_t)V * C, 5e-6);
        /* padded rows: no gradient, so exactly the prefill */
        snprintf(name, sizeof name, "%s dwte padding", tag);
        check_failures += check_bitwise(name, dwte[0] + (size_t)V * C, pre_dwte + (size_t)V * C, (size_t)(Vp - V) * C);
    }
    for (int run = 0; run < 2; run++) free(losses[run]), free(logits[run]), free(dx[run]), free(dwte[run]);
    free(scratch), free(x), free(wte), free(targets), free(xd), free(wted), free(Z), free(zmag), free(loss_ref), free(loss_scale);
    free(gx), free(gw), free(pre_dwte), free(ix), free(iw), free(fx), free(fw);
}

/* With a bias b (lm_head_bias): logits = x @ wte^T + b is the bias-free product of
 * x' = [x, 1] and wte' = [wte, b], which the tests above hold to float64. So the op with
 * (x, wte, b) must give the same losses, logits, dx, dwte and, as dbias, wte''s last
 * gradient column, to the summation order of one more term. Padded columns get no bias
 * gradient. */
static void test_classifier_bias(hg_backend *bes[OPS_NBE], int N, int chunk, int V, int Vp) {
    const int C = 40, C1 = C + 1;
    trng r = trng_seed(870 + (uint64_t)N);
    float *x = fvec((size_t)N * C), *wte = fvec((size_t)Vp * C), *b = fvec(Vp), *x1 = fvec((size_t)N * C1);
    float *wte1 = fvec((size_t)Vp * C1);
    int32_t *targets = ivec(N);
    fill(x, (size_t)N * C, &r, -1, 1), fill(wte, (size_t)Vp * C, &r, -0.5, 0.5), fill(b, Vp, &r, -2, 2);
    for (int n = 0; n < N; n++) {
        memcpy(x1 + (size_t)n * C1, x + (size_t)n * C, sizeof(float) * C), x1[(size_t)n * C1 + C] = 1.0f;
        targets[n] = n % 5 == 2 ? -1 : trng_int(&r, V);
    }
    for (int v = 0; v < Vp; v++) memcpy(wte1 + (size_t)v * C1, wte + (size_t)v * C, sizeof(float) * C), wte1[(size_t)v * C1 + C] = b[v];
    float *loss[2] = {fvec(N), fvec(N)}, *logits[2] = {fvec((size_t)N * V), fvec((size_t)N * V)};
    float *dx = fvec((size_t)N * C), *dx1 = fvec((size_t)N * C1), *dwte = fvec((size_t)Vp * C), *dwte1 = fvec((size_t)Vp * C1);
    float *dbias = fvec(Vp), *scratch = fvec((size_t)chunk * Vp);
    for (int k = 0; k < OPS_NBE; k++) {
        hg_backend *be = bes[k];
        use_backend(be);
        poison(dx, (size_t)N * C), poison(dx1, (size_t)N * C1), poison(loss[0], N), poison(loss[1], N);
        memset(dwte, 0, sizeof(float) * (size_t)Vp * C), memset(dwte1, 0, sizeof(float) * (size_t)Vp * C1);
        for (int v = 0; v < Vp; v++) dbias[v] = 0.25f; /* accumulated into */
        for (int with = 0; with < 2; with++)
            for (int r0 = 0; r0 < N; r0 += chunk) {
                const int n = N - r0 < chunk ? N - r0 : chunk, c = with ? C : C1;
                hg_classifier_args a = {
                    .N = n, .C = c, .V = V, .Vp = Vp, .x = (with ? x : x1) + (size_t)r0 * c, .wte = with ? wte : wte1,
                    .bias = with ? b : NULL, .targets = targets + r0, .losses = loss[with] + r0,
                    .logits = logits[with] + (size_t)r0 * V, .scratch = scratch, .dscale = 0.7f,
                    .dx = (with ? dx : dx1) + (size_t)r0 * c, .dwte = with ? dwte : dwte1, .dbias = with ? dbias : NULL,
                };
                CHECK_OK(be->ops->classifier_forward(be, &a));
                CHECK_OK(be->ops->classifier_backward(be, &a));
            }
        char name[96];
        snprintf(name, sizeof name, "classifier bias N=%d chunk=%d V=%d threads=%d", N, chunk, V, be->threads);
        int bad = 0;
        double worst = 0.0;
        for (int i = 0; i < N * V; i++) worst = fmax(worst, fabs(logits[1][i] - logits[0][i]) / (1.0 + fabs(logits[0][i])));
        for (int n = 0; n < N; n++) worst = fmax(worst, fabs(loss[1][n] - loss[0][n]) / (1.0 + fabs(loss[0][n])));
        for (int n = 0; n < N; n++)
            for (int c = 0; c < C; c++) worst = fmax(worst, fabs(dx[(size_t)n * C + c] - dx1[(size_t)n * C1 + c]));
        for (int v = 0; v < Vp; v++) {
            for (int c = 0; c < C; c++) worst = fmax(worst, fabs(dwte[(size_t)v * C + c] - dwte1[(size_t)v * C1 + c]));
            worst = fmax(worst, fabs(dbias[v] - 0.25f - dwte1[(size_t)v * C1 + C]));
            bad += v >= V && dbias[v] != 0.25f; /* padding: no gradient */
        }
        if (bad || !(worst < 1e-5)) {
            fprintf(stderr, "%s: largest difference from the augmented product %.3g, %d padded columns moved\n", name,
                    worst, bad);
            check_failures++;
        }
    }
    free(x), free(wte), free(b), free(x1), free(wte1), free(targets), free(loss[0]), free(loss[1]), free(logits[0]);
    free(logits[1]), free(dx), free(dx1), free(dwte), free(dwte1), free(dbias), free(scratch);
}

int test_ops_classifier(hg_backend *bes[OPS_NBE]) {
    const int all = WITH_LOGITS | WITH_TARGETS | BACKWARD;
    test_classifier(bes, 74, 16, 1000, 1024, all);                      /* 4 chunks of 16, then 10 */
    test_classifier(bes, 74, 16, 1000, 1024, WITH_TARGETS | BACKWARD); /* training: no logits out */
    test_classifier(bes, 74, 16, 1000, 1024, WITH_TARGETS);            /* evaluation: losses only */
    test_classifier(bes, 74, 16, 1000, 1024, WITH_LOGITS);             /* inference: logits only */
    test_classifier(bes, 5, 16, 1000, 1024, all);                      /* chunk larger than N */
    test_classifier(bes, 20, 7, 2000, 2048, all); /* Vp > 1536: the logits GEMM splits wte^T */
    test_classifier_bias(bes, 37, 16, 1000, 1024);
    test_classifier_bias(bes, 9, 4, 2100, 2112); /* columns past one CPU block */
    return check_failures;
}
