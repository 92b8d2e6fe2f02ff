/* Op tests, part 1 and main: the Philox generator's known answers, and the elementwise
 * ops (encoder, GELU, AdamW, sumsq); the other groups are in test_ops_*.c.
 *
 * Every kernel runs on the CPU backend at 1 and 2 threads, twice each: the two runs must
 * agree bitwise. Forwards are compared with a double reference (ops_reference.c), and
 * backwards with central finite differences of a random projection L = sum(out * R) of
 * that double reference, on sampled elements, plus a full-tensor comparison with an
 * analytic double gradient. Outputs a kernel writes are poisoned with NaN first;
 * outputs it accumulates into are prefilled with random values, and the check is
 * out = prefill + gradient.
 *
 * Tolerances are in units of u = 2^-24, fp32's unit roundoff, against the magnitude
 * each element is computed from; each is stated where it is used. HG_TEST_VERBOSE=1
 * prints every check's worst error as a fraction of its tolerance. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu.h"
#include "check.h"
#include "core/rng.h"
#include "ops_reference.h"
#include "ops_util.h"
#include "test_ops.h"

/* ---- Philox4x32-10 known answers (Random123's kat_vectors) ---- */

static void test_philox(void) {
    static const struct {
        uint32_t ctr[4], key[2], want[4];
    } kat[] = {
        {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
        {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff},
         {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
        {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0},
         {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
    };
    for (size_t k = 0; k < sizeof kat / sizeof kat[0]; k++) {
        /* hg_philox takes the key as one seed, k0 in the low 32 bits */
        uint64_t seed = (uint64_t)kat[k].key[1] << 32 | kat[k].key[0];
        hg_u32x4 r = hg_philox(seed, kat[k].ctr[0], kat[k].ctr[1], kat[k].ctr[2], kat[k].ctr[3]);
        for (int i = 0; i < 4; i++) CHECK(r.v[i] == kat[k].want[i]);
    }
}

/* cpu_dropout_scales gives hg_dropout_scale's scales bit for bit on every kernel this
 * CPU runs: from any first index (aligned to its four-element blocks or not), any length,
 * across 2^34 (the block counter's high word), and rates at their edges. */
static void test_dropout_scales(void) {
    static const struct {
        uint64_t first;
        size_t n;
        float p;
    } cases[] = {{0, 4096, 0.1f}, {3, 1000, 0.5f}, {1, 67, 0.05f}, {(1ull << 34) - 37, 300, 0.3f}, {5, 3, 0.9f},
                 {64, 64, 1e-7f}, {0, 1, 0.5f}, {(1ull << 34) - 4096, 4096, 0.2f}, {12345, 2048, 0.999f}};
    float got[4096];
    int kernels = 0;
    for (int k = 0; k < 8; k++) {
        const char *name = cpu_dropout_kernel_name(k);
        if (!name) continue;
        kernels++;
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
            const hg_dropout d = {.p = cases[c].p, .seed = 0x9e3779b97f4a7c15ull, .step = 11, .site = 5 + (uint32_t)c};
            for (size_t i = 0; i < cases[c].n; i++) got[i] = -1.0f; /* poison */
            cpu_dropout_scales_with(k, &d, cases[c].first, cases[c].n, got);
            int bad = 0, dropped = 0;
            for (size_t i = 0; i < cases[c].n; i++) {
                const float want = hg_dropout_scale(&d, cases[c].first + i);
                bad += memcmp(&got[i], &want, sizeof want) != 0;
                dropped += want == 0.0f;
            }
            if (bad) fprintf(stderr, "dropout scales, kernel %s, case %zu: %d of %zu differ\n", name, c, bad, cases[c].n);
            CHECK(!bad);
            if (c == 0) CHECK(dropped > 300 && dropped < 520); /* p = 0.1 of 4096 */
        }
    }
    CHECK(kernels >= 1);
}

/* ---- encoder ---- */

typedef struct enc_ctx {
    const int32_t *tok;
    double *wte, *wpe, *out;
    const double *R;
    int B, T, C;
    float scale;
    const hg_dropout *drop;
} enc_ctx;

/* L = sum(out * R) through the full reference forward. */
static double enc_loss(void *vctx, size_t i) {
    enc_ctx *c = vctx;
    (void)i;
    ref_encoder_forward(c->out, c->tok, c->wte, c->wpe, c->B, c->T, c->C, c->scale, c->drop);
    double L = 0.0;
    for (size_t j = 0; j < (size_t)c->B * c->T * c->C; j++) L += c->out[j] * c->R[j];
    return L;
}

/* scale: the token embeddings' (1, or Gemma's sqrt(C)). */
static void test_encoder(hg_backend *bes[OPS_NBE], float p, float scale) {
    enum { B = 2, T = 37, C = 96, V = 1000, Vp = 1024, TMAX = 64, N = B * T };
    const hg_dropout drop = {.p = p, .seed = 0x5eedull, .step = 3, .site = 0};
    trng r = trng_seed(100 + (p > 0));
    /* half the ids from a pool of 5, so the scatter-add into dwte collides */
    static const int32_t pool[] = {0, 5, 17, 512, V - 1};
    int32_t tok[N];
    for (int n = 0; n < N; n++) tok[n] = trng_unit(&r) < 0.5 ? pool[trng_int(&r, 5)] : trng_int(&r, V);
    tok[0] = tok[T] = V - 1; /* the same id at the same position in both sequences */

    float *wte = fvec(Vp * C), *wpe = fvec(TMAX * C), *R = fvec(N * C);
    float *pre_te = fvec(Vp * C), *pre_pe = fvec(TMAX * C);
    fill(wte, Vp * C, &r, -1, 1), fill(wpe, TMAX * C, &r, -1, 1), fill(R, N * C, &r, -1, 1);
    fill(pre_te, Vp * C, &r, -1, 1), fill(pre_pe, TMAX * C, &r, -1, 1);
    double *wte_d = dvec(Vp * C), *wpe_d = dvec(TMAX * C), *R_d = dvec(N * C), *out_ref = dvec(N * C);
    widen(wte_d, wte, Vp * C), widen(wpe_d, wpe, TMAX * C), widen(R_d, R, N * C);
    ref_encoder_forward(out_ref, tok, wte_d, wpe_d, B, T, C, scale, &drop);

    /* analytic gradients, and which rows of dwte a token touches */
    double *gte = calloc(Vp * C, sizeof(double)), *gpe = calloc(TMAX * C, sizeof(double));
    char used[Vp] = {0};
    for (int n = 0; n < N; n++) {
        used[tok[n]] = 1;
        for (int c = 0; c < C; c++) {
            double g = R_d[n * C + c] * ref_dropout_scale(&drop, (size_t)n * C + c);
            gte[tok[n] * C + c] += scale * g;
            gpe[(n % T) * C + c] += g;
        }
    }
    /* finite differences: dwte at elements of used rows (most rows have zero gradient),
     * dwpe anywhere in its first T rows */
    enum { NTE = 120, NPE = 80 };
    size_t ite[NTE], kpe;
    for (int j = 0; j < NTE; j++) ite[j] = (size_t)tok[trng_int(&r, N)] * C + trng_int(&r, C);
    size_t *ipe = sample_indices(T * C, NPE, 7, &kpe);
    double *scratch = dvec(N * C), fte[NTE], fpe[NPE];
    enc_ctx ctx = {tok, wte_d, wpe_d, scratch, R_d, B, T, C, scale, &drop};
    for (int j = 0; j < NTE; j++) fte[j] = fd_central(wte_d, ite[j], FD_H, enc_loss, &ctx);
    for (size_t j = 0; j < kpe; j++) fpe[j] = fd_central(wpe_d, ipe[j], FD_H, enc_loss, &ctx);
    double ste = rms(fte, NTE), spe = rms(fpe, kpe);
    char tag[96], name[160];
    snprintf(name, sizeof name, "encoder p=%g scale=%g ref dwte vs fd", p, scale);
    check_failures += check_grad_d(name, gte, fte, ite, NTE, NULL, ste, FD_TOL);
    snprintf(name, sizeof name, "encoder p=%g scale=%g ref dwpe vs fd", p, scale);
    check_failures += check_grad_d(name, gpe, fpe, ipe, kpe, NULL, spe, FD_TOL);

    float *out[2] = {fvec(N * C), fvec(N * C)}, *dte[2] = {fvec(Vp * C), fvec(Vp * C)};
    float *dpe[2] = {fvec(TMAX * C), fvec(TMAX * C)};
    for (int k = 0; k < OPS_NBE; k++) {
        hg_backend *be = bes[k];
        use_backend(be);
        for (int run = 0; run < 2; run++) {
            poison(out[run], N * C);
            be->ops->encoder_forward(be, out[run], tok, NULL, wte, wpe, B, T, C, scale, &drop);
            memcpy(dte[run], pre_te, sizeof(float) * Vp * C);
            memcpy(dpe[run], pre_pe, sizeof(float) * TMAX * C);
            be->ops->encoder_backward(be, dte[run], dpe[run], R, tok, NULL, B, T, C, scale, &drop);
        }
        snprintf(tag, sizeof tag, "encoder p=%g scale=%g threads=%d", p, scale, be->threads);
        snprintf(name, sizeof name, "%s out", tag);
        check_failures += check_bitwise(name, out[0], out[1], N * C);
        check_failures += check_bitwise(name, dte[0], dte[1], Vp * C);
        check_failures += check_bitwise(name, dpe[0], dpe[1], TMAX * C);
        check_failures += check_finite(name, out[0], N * C);
        /* the embedding scale's multiply, one fp32 add and one multiply by the fp32 scale
         * 1/(1-p): within 3u of the double result's terms (a dropped element is exactly 0;
         * with a scale the sum may cancel, so the terms' size is the scale) */
        check_failures += check_vec(name, out[0], out_ref, NULL, N * C, 3 * U32, scale != 1.0f ? 8 * U32 * scale : 0.0);
        /* dwte, dwpe: fp32 sums of at most N terms of size <= |R|/(1-p) < 1.5 in token
         * order; typical rounding ~sqrt(k) u |term|, so 1e-6 of (rms + |g|) holds with
         * margin and any lost, doubled or unscaled term (error >= 0.1) fails */
        snprintf(name, sizeof name, "%s dwte fd", tag);
        check_failures += check_grad(name, dte[0], pre_te, fte, ite, NTE, NULL, ste, 1e-6);
        snprintf(name, sizeof name, "%s dwpe fd", tag);
        check_failures += check_grad(name, dpe[0], pre_pe, fpe, ipe, kpe, NULL, spe, 1e-6);
        snprintf(name, sizeof name, "%s dwte", tag);
        check_failures += check_grad(name, dte[0], pre_te, gte, NULL, Vp * C, NULL, ste, 1e-6);
        snprintf(name, sizeof name, "%s dwpe", tag);
        check_failures += check_grad(name, dpe[0], pre_pe, gpe, NULL, TMAX * C, NULL, spe, 1e-6);
        /* rows no token uses, and positions >= T, are not touched at all */
        int touched = 0;
        for (int v = 0; v < Vp; v++)
            if (!used[v]) touched += memcmp(dte[0] + v * C, pre_te + v * C, sizeof(float) * C) != 0;
        touched += memcmp(dpe[0] + T * C, pre_pe + T * C, sizeof(float) * (TMAX - T) * C) != 0;
        if (touched) fprintf(stderr, "%s: %d rows without gradient were modified\n", tag, touched);
        check_failures += touched;
    }
    for (int run = 0; run < 2; run++) free(out[run]), free(dte[run]), free(dpe[run]);
    free(wte), free(wpe), free(R), free(pre_te), free(pre_pe), free(wte_d), free(wpe_d), free(R_d);
    free(out_ref), free(gte), free(gpe), free(ipe), free(scratch);
}

/* ---- GELU ---- */

typedef struct gelu_ctx {
    double *x;
    const double *R;
} gelu_ctx;

static double gelu_loss(void *v, size_t i) {
    gelu_ctx *c = v;
    return ref_gelu(c->x[i]) * c->R[i]; /* element i only affects out[i] */
}

static void test_gelu(hg_backend *bes[OPS_NBE]) {
    enum { N = 2 * 37 * 384 };
    trng r = trng_seed(400);
    float *x = fvec(N), *R = fvec(N);
    fill(x, N, &r, -6, 6), fill(R, N, &r, -1, 1);
    static const float special[] = {0.0f, -0.0f, 1e-30f, -1e-4f, 1.0f, -1.0f, 3.0f, -3.0f, 9.0f, -9.0f, 20.0f, -20.0f};
    memcpy(x, special, sizeof special);
    double *xd = dvec(N), *Rd = dvec(N), *want = dvec(N), *scale = dvec(N), *fd = dvec(N), *gscale = dvec(N);
    widen(xd, x, N), widen(Rd, R, N);
    gelu_ctx ctx = {xd, Rd};
    for (int i = 0; i < N; i++) {
        want[i] = ref_gelu(xd[i]);
        /* 0.5 x (1 + tanh): tanhf errs by a few u of 1, which 1 + tanh keeps in absolute
         * terms where it cancels (x << 0); so the scale is |x| */
        scale[i] = fabs(xd[i]);
        fd[i] = fd_central(xd, i, FD_H, gelu_loss, &ctx);
        /* the gradient's terms 0.5 (1 + th) and 0.5 x sech^2 K (1 + 3A x^2) are each at
         * most (1 + |x|) in size */
        gscale[i] = (1.0 + fabs(xd[i])) * fabs(Rd[i]);
    }
    float *out[2] = {fvec(N), fvec(N)}, *din[2] = {fvec(N), fvec(N)}, *alias = fvec(N);
    for (int k = 0; k < OPS_NBE; k++) {
        hg_backend *be = bes[k];
        use_backend(be);
        char name[96];
        for (int run = 0; run < 2; run++) {
            poison(out[run], N), poison(din[run], N);
            be->ops->gelu_forward(be, out[run], x, N);
            be->ops->gelu_backward(be, din[run], x, R, N);
        }
        memcpy(alias, R, sizeof(float) * N); /* dinp aliasing dout, as the model calls it */
        be->ops->gelu_backward(be, alias, x, alias, N);
        snprintf(name, sizeof name, "gelu threads=%d out", be->threads);
        check_failures += check_bitwise(name, out[0], out[1], N) + check_finite(name, out[0], N);
        /* 8u of |x|: tanhf within ~4u, then two roundings */
        check_failures += check_vec(name, out[0], want, scale, N, 8 * U32, 0.0);
        snprintf(name, sizeof name, "gelu threads=%d dinp", be->threads);
        check_failures += check_bitwise(name, din[0], din[1], N) + check_finite(name, din[0], N);
        check_failures += check_bitwise(name, din[0], alias, N);
        /* every element against its finite difference: 16u of the terms' size */
        check_failures += check_grad(name, din[0], NULL, fd, NULL, N, gscale, 0, 16 * U32);
    }
    for (int run = 0; run < 2; run++) free(out[run]), free(din[run]);
    free(alias), free(x), free(R), free(xd), free(Rd), free(want), free(scale), free(fd), free(gscale);
}

/* ---- AdamW and sumsq ---- */

static void test_adamw(hg_backend *bes[OPS_NBE], float lr, float wd, float gs, int t) {
    enum { N = 1237 }; /* not a multiple of any vector width */
    hg_adamw_update u = {.lr = lr, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = wd,
                         .grad_scale = gs};
    u.bias_correction1 = 1.0f - powf(u.beta1, (float)t);
    u.bias_correction2 = 1.0f - powf(u.beta2, (float)t);
    trng r = trng_seed(500 + t);
    float *p0 = fvec(N), *g = fvec(N), *m0 = fvec(N), *v0 = fvec(N);
    for (int i = 0; i < N; i++) {
        /* gradients over seven decades; every 16th element with a tiny v and g, where
         * eps dominates the denominator */
        double mag = pow(10.0, trng_range(&r, -6, 1));
        int tiny = i % 16 == 5;
        p0[i] = (float)trng_range(&r, -1, 1);
        g[i] = (float)(trng_range(&r, -1, 1) * (tiny ? 1e-9 : mag));
        m0[i] = (float)(trng_range(&r, -1, 1) * (tiny ? 1e-10 : 0.1 * mag));
        v0[i] = (float)(trng_unit(&r) * (tiny ? 1e-19 : 0.01 * mag * mag));
    }
    double *p = dvec(N), *m = dvec(N), *v = dvec(N), *sp = dvec(N), *sm = dvec(N);
    widen(p, p0, N), widen(m, m0, N), widen(v, v0, N);
    for (int i = 0; i < N; i++) sm[i] = fabs(u.beta1 * m[i]) + fabs((1.0 - u.beta1) * (double)g[i] * gs);
    ref_adamw(p, m, v, g, N, &u);
    for (int i = 0; i < N; i++) {
        double decayed = p0[i] * (1.0 - (double)lr * wd);
        sp[i] = fabs(decayed) + fabs(decayed - p[i]);
    }
    float *pk[2] = {fvec(N), fvec(N)}, *mk[2] = {fvec(N), fvec(N)}, *vk[2] = {fvec(N), fvec(N)};
    hg_table tab; /* one tensor, decayed */
    hg_table_init(&tab);
    int64_t shape[1] = {N};
    CHECK(hg_table_add(&tab, "p", 1, shape, 0, 1, sizeof(float), HG_SPEC_DECAY) == 0);
    hg_table_layout(&tab);
    for (int k = 0; k < OPS_NBE; k++) {
        hg_backend *be = bes[k];
        use_backend(be);
        for (int run = 0; run < 2; run++) {
            memcpy(pk[run], p0, sizeof(float) * N), memcpy(mk[run], m0, sizeof(float) * N), memcpy(vk[run], v0, sizeof(float) * N);
            hg_adamw_args a = {.p = pk[run], .g = g, .m = mk[run], .v = vk[run], .params = &tab, .weights = &tab, .n = N, .u = u};
            be->ops->adamw(be, &a);
        }
        char name[128];
        snprintf(name, sizeof name, "adamw lr=%g wd=%g gs=%g t=%d threads=%d", lr, wd, gs, t, be->threads);
        check_failures += check_bitwise(name, pk[0], pk[1], N) + check_bitwise(name, mk[0], mk[1], N) + check_bitwise(name, vk[0], vk[1], N);
        /* m: two products and a sum, 4u of its terms' size; v: positive terms after
         * squaring the scaled gradient, 8u relative */
        check_failures += check_vec(name, mk[0], m, sm, N, 4 * U32, 0.0);
        check_failures += check_vec(name, vk[0], v, NULL, N, 8 * U32, 0.0);
        /* p: the update's ~8 roundings (fp32 lr/bc1, 1/sqrt(bc2), sqrt, +eps, divide)
         * and the decay: 16u of |p decayed| + |update| */
        check_failures += check_vec(name, pk[0], p, sp, N, 16 * U32, 0.0);
    }
    hg_table_free(&tab);
    for (int run = 0; run < 2; run++) free(pk[run]), free(mk[run]), free(vk[run]);
    free(p0), free(g), free(m0), free(v0), free(p), free(m), free(v), free(sp), free(sm);
}

static void test_sumsq(hg_backend *bes[OPS_NBE]) {
    static const size_t sizes[] = {0, 5, 65536, 200003}; /* none, one block, exact block, 4 blocks */
    trng r = trng_seed(600);
    float *x = fvec(200003);
    fill(x, 200003, &r, -2, 2);
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        size_t n = sizes[s];
        /* squares of floats are exact in double; the sum of n positive terms errs by at
         * most (n-1) u_double of it: the reference is summed the same naive way */
        double want = 0.0, got[OPS_NBE][2];
        for (size_t i = 0; i < n; i++) want += (double)x[i] * x[i];
        for (int k = 0; k < OPS_NBE; k++) {
            use_backend(bes[k]);
            for (int run = 0; run < 2; run++) bes[k]->ops->sumsq(bes[k], x, HG_PRECISION_FP32, n, &got[k][run]);
            CHECK(memcmp(&got[k][0], &got[k][1], sizeof(double)) == 0);
            CHECK_CLOSE(got[k][0], want, 2.0 * (double)n * 1.1102230246251565e-16, 0.0);
        }
        /* fixed blocks added in block order: the same bits for any thread count */
        CHECK(memcmp(&got[0][0], &got[1][0], sizeof(double)) == 0);
    }
    free(x);
}

int main(void) {
    const char *verbose = getenv("HG_TEST_VERBOSE");
    ops_verbose = verbose && *verbose && *verbose != '0';
    hg_backend *bes[OPS_NBE];
    for (int k = 0; k < OPS_NBE; k++) CHECK_OK(hg_backend_cpu_create(&bes[k], k + 1, HG_PRECISION_FP32));
    if (check_failures) CHECK_DONE();

    test_philox();
    test_dropout_scales();
    test_encoder(bes, 0.0f, 1.0f);
    test_encoder(bes, 0.3f, 1.0f);
    test_encoder(bes, 0.0f, 9.797959f); /* Gemma's sqrt(C) = sqrt(96) */
    check_failures += test_ops_layernorm(bes);
    test_gelu(bes);
    test_adamw(bes, 0.05f, 0.1f, 0.37f, 3);
    test_adamw(bes, 1e-3f, 0.0f, 1.0f, 1);
    test_sumsq(bes);
    check_failures += test_ops_matmul(bes);
    check_failures += test_ops_classifier(bes);
    check_failures += test_ops_attention(bes);
    check_failures += test_ops_llama(bes);

    for (int k = 0; k < OPS_NBE; k++) bes[k]->ops->destroy(bes[k]);
    CHECK_DONE();
}
