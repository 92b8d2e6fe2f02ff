/* Your own backward rule inside a GPT-2 model (shared/seeds/000: "find the bottleneck in
 * the backward pass and write some custom backward rule to make things go faster").
 *
 * GELU's backward, rewritten: since 1 + tanh(u) = 2 sigmoid(2u), with s = sigmoid(2u),
 * u = k (x + a x^3),
 *     gelu(x)  = x s
 *     gelu'(x) = s + 2 x s (1 - s) k (1 + 3 a x^2)
 * which needs one expf per element where the built-in takes a tanhf (gelu_rule.h; the
 * plugin gelu_rule_ops.c puts the same rule into the handgrad command). The program
 *   1. checks the new backward with hg_gradcheck against finite differences in double;
 *   2. trains a small GPT-2 with the built-in GELU and with the override, from the same
 *      weights and data, and checks the losses agree;
 *   3. prints the profiler's per-layer backward table of both, and GELU backward's time.
 * Exit status 0 when the check passes and the losses agree. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gelu_rule.h" /* the rule: gelu_rule_backward */

/* ---- GELU as an op for hg_gradcheck: input x (n), output y (n) ---- */

static hg_status ref_forward(void *ctx, const float *const *in, float *const *out) {
    const int64_t n = *(const int64_t *)ctx;
    for (int64_t i = 0; i < n; i++) {
        const float x = in[0][i];
        out[0][i] = 0.5f * x * (1.0f + tanhf(K * (x + A * x * x * x)));
    }
    return HG_OK;
}

static hg_status ref_forward_f64(void *ctx, const double *const *in, double *const *out) {
    const int64_t n = *(const int64_t *)ctx;
    for (int64_t i = 0; i < n; i++) {
        const double x = in[0][i];
        out[0][i] = 0.5 * x * (1.0 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
    }
    return HG_OK;
}

static hg_status my_backward(void *ctx, const float *const *in, const float *const *out, const float *const *dout,
                             float *const *din) {
    (void)out;
    gelu_rule_backward(NULL, din[0], in[0], dout[0], (size_t)*(const int64_t *)ctx);
    return HG_OK;
}

/* Per-layer backward milliseconds of the profiled step, and GELU backward's part. */
static void backward_table(hg_profiler *p, int L, double *layer_ms, double *gelu_ms) {
    memset(layer_ms, 0, sizeof(double) * (size_t)L);
    *gelu_ms = 0;
    for (int i = 0; i < hg_profiler_count(p); i++) {
        hg_prof_event ev;
        if (hg_profiler_event(p, i, &ev) != HG_OK || ev.region || ev.pass != HG_PASS_BACKWARD) continue;
        if (ev.layer >= 0 && ev.layer < L) layer_ms[ev.layer] += (ev.end - ev.start) * 1e3;
        if (!strcmp(ev.name, "gelu backward")) *gelu_ms += (ev.end - ev.start) * 1e3;
    }
}

/* Trains m for `steps` steps on the fixed batch; the profile covers the last. */
static int train(hg_model *m, hg_profiler *p, const int32_t *tok, const int32_t *tgt, int B, int T, int steps,
                 float *loss) {
    hg_adamw adamw = hg_adamw_default();
    for (int s = 0; s < steps; s++) {
        if (s == steps - 1) hg_profiler_reset(p), hg_profiler_step_begin(p);
        if (hg_zero_grad(m) != HG_OK || hg_forward_backward(m, tok, tgt, B, T, 1.0f, loss) != HG_OK ||
            hg_optimizer_step(m, &adamw, NULL) != HG_OK) {
            fprintf(stderr, "gelu_override: %s\n", hg_last_error());
            return 1;
        }
        if (s == steps - 1) hg_profiler_step_end(p);
    }
    return 0;
}

int main(void) {
    /* 1. the rule alone */
    int64_t n = 4096;
    hg_op_def op = {.name = "gelu", .n_in = 1, .n_out = 1, .in_name = {"x"}, .out_name = {"y"}, .in_size = {n},
                    .out_size = {n}, .forward = ref_forward, .backward = my_backward,
                    .forward_f64 = ref_forward_f64, .ctx = &n};
    hg_gradcheck_options go = hg_gradcheck_options_default();
    go.lo[0] = -6, go.hi[0] = 6;
    hg_gradcheck_report r;
    if (hg_gradcheck(&op, &go, &r) != HG_OK) {
        fprintf(stderr, "gelu_override: %s\n", hg_last_error());
        return 1;
    }
    printf("gradcheck of gelu_rule_backward: %s (worst dx[%lld] relative error %.1e)\n", r.summary,
           (long long)r.in[0].index, r.in[0].err);

    /* 2. in a model: the built-in, then the override, from the same start */
    hg_config cfg;
    hg_config_preset("tiny", &cfg);
    hg_options opt = hg_options_default();
    const int B = 4, T = 64, steps = 4;
    opt.batch = B, opt.seq_len = T, opt.seed = 7;
    int32_t *tok = malloc(sizeof(int32_t) * B * T), *tgt = malloc(sizeof(int32_t) * B * T);
    for (int i = 0; i < B * T; i++) tok[i] = (int32_t)((i * 7919u + 13) % (unsigned)cfg.vocab_size);
    for (int i = 0; i < B * T; i++) tgt[i] = tok[(i + 1) % (B * T)];
    hg_profiler *p;
    hg_model *m[2] = {NULL, NULL};
    float loss[2];
    double layer_ms[2][64], gelu_ms[2];
    const int L = cfg.n_layer < 64 ? cfg.n_layer : 64;
    if (hg_profiler_create(&p, 100000) != HG_OK) return 1;
    for (int k = 0; k < 2; k++) {
        if (hg_model_create(&m[k], &cfg, &opt) != HG_OK) {
            fprintf(stderr, "gelu_override: %s\n", hg_last_error());
            return 1;
        }
        if (k == 1) hg_override_gelu(m[1], HG_DEVICE_CPU, NULL, gelu_rule_backward);
        hg_model_set_profiler(m[k], p);
        if (train(m[k], p, tok, tgt, B, T, steps, &loss[k])) return 1;
        backward_table(p, L, layer_ms[k], &gelu_ms[k]);
    }
    const double agree = fabsf(loss[0] - loss[1]) / fabsf(loss[0]);
    printf("loss after %d steps: built-in %.6f, override %.6f (relative difference %.1e)\n", steps, loss[0], loss[1],
           agree);
    printf("\nbackward per layer, ms (last step, B=%d T=%d)\nlayer  built-in  override\n", B, T);
    for (int l = 0; l < L; l++) printf("%5d  %8.3f  %8.3f\n", l, layer_ms[0][l], layer_ms[1][l]);
    printf("gelu backward, all layers: built-in %.3f ms, override %.3f ms\n", gelu_ms[0], gelu_ms[1]);
    for (int k = 0; k < 2; k++) hg_model_free(m[k]);
    hg_profiler_free(p);
    free(tok), free(tgt);
    return !(r.ok && agree < 1e-4);
}
