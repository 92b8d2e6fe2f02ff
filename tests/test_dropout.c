/* The whole model's gradient with dropout on: the masks the backward pass regenerates
 * must be the forward's. Checked as a directional derivative: for a random unit
 * direction d over all parameters, (L(p + h d) - L(p - h d)) / 2h against g . d, where
 * every forward is made to draw the same masks by resetting the RNG counter. With
 * dropout off the same check passes too. A backward pass that used another site's masks
 * (a planted bug) moved g . d by 6.6%.
 * Tolerance 1e-2: the fp32 loss carries ~1e-6 relative rounding, so with h = 1e-2 the
 * central difference is good to about 1e-3 of g . d (observed 1.1e-3 without dropout,
 * 5e-5 with). */
#include <math.h>
#include <stdint.h>

#include "check.h"
#include "handgrad.h"

enum { B = 2, T = 37 };

static double dot_and_step(hg_model *m, const double *dir, double h) {
    double acc = 0;
    int64_t k = 0;
    for (int i = 0; i < hg_param_count(m); i++) {
        hg_param_info p;
        hg_param_at(m, i, &p);
        for (int64_t j = 0; j < p.numel; j++, k++) {
            if (h == 0) acc += (double)p.grad[j] * dir[k];
            else p.data[j] = (float)((double)p.data[j] + h * dir[k]);
        }
    }
    return acc;
}

static void check_directional(float dropout) {
    hg_config cfg;
    CHECK_OK(hg_config_preset("odd", &cfg));
    cfg.dropout = dropout;
    hg_options o = hg_options_default();
    o.batch = B, o.seq_len = T, o.threads = 2, o.seed = 11;
    hg_model *m = NULL;
    CHECK_OK(hg_model_create(&m, &cfg, &o));
    if (!m) return;
    int32_t tok[B * T], tgt[B * T];
    for (int i = 0; i < B * T; i++) tok[i] = (i * 7919 + 5) % 1000, tgt[i] = i % 7 ? (i * 104729) % 1000 : -1;
    int64_t n = hg_config_param_count(&cfg, 1);
    double *dir = malloc(sizeof(double) * (size_t)n), norm = 0;
    uint64_t x = 99;
    for (int64_t k = 0; k < n; k++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        dir[k] = (double)(x >> 11) / 9007199254740992.0 - 0.5;
        norm += dir[k] * dir[k];
    }
    for (int64_t k = 0; k < n; k++) dir[k] /= sqrt(norm);

    uint64_t c0 = hg_model_rng_counter(m);
    float loss, lp, lm;
    CHECK_OK(hg_zero_grad(m));
    CHECK_OK(hg_forward(m, tok, tgt, B, T, &loss, NULL));
    CHECK_OK(hg_backward(m, 1.0f));
    double gd = dot_and_step(m, dir, 0);
    const double h = 1e-2;
    dot_and_step(m, dir, h);
    CHECK_OK(hg_model_set_rng_counter(m, c0));
    CHECK_OK(hg_forward(m, tok, tgt, B, T, &lp, NULL));
    dot_and_step(m, dir, -2 * h);
    CHECK_OK(hg_model_set_rng_counter(m, c0));
    CHECK_OK(hg_forward(m, tok, tgt, B, T, &lm, NULL));
    double fd = ((double)lp - lm) / (2 * h);
    printf("dropout %.2f: g.d = %.6g, central difference = %.6g\n", dropout, gd, fd);
    CHECK_CLOSE(fd, gd, 1e-2, 0);
    CHECK(fabs(gd) > 1e-3); /* the direction actually moves the loss */
    free(dir);
    hg_model_free(m);
}

int main(void) {
    check_directional(0.0f);
    check_directional(0.3f);
    CHECK_DONE();
}
