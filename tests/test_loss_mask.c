/* A loss mask (targets of -1) against its definition, as an identity rather than a
 * second implementation: with the set M of targets kept, the loss is the mean of the
 * kept tokens' own losses, and every parameter gradient the mean of their gradients,
 * each token's taken with every other target masked:
 *   L_M = (1/|M|) sum_{t in M} L_{t},   dL_M/dw = (1/|M|) sum_{t in M} dL_{t}/dw.
 * The per-token runs compute the same forward with one target each, so the identity
 * holds to rounding. A batch with no target has loss 0 and no gradient. On GPT-2 and
 * Llama-shaped models (learned positions and LayerNorm, rotary and RMSNorm). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "handgrad.h"

enum { B = 2, T = 8, N = B * T };

/* Every parameter gradient, concatenated into g (count floats); returns the count. */
static size_t grads(hg_model *m, float *g) {
    size_t n = 0;
    for (int i = 0; i < hg_param_count(m); i++) {
        hg_param_info p;
        CHECK_OK(hg_param_at(m, i, &p));
        if (g) CHECK_OK(hg_param_read(m, i, HG_PARAM_GRAD, g + n));
        n += (size_t)p.numel;
    }
    return n;
}

static void identity(const char *preset) {
    hg_config c;
    CHECK_OK(hg_config_preset(preset, &c));
    c.n_layer = 2, c.vocab_size = 64, c.max_seq_len = 16, c.dropout = 0.0f;
    hg_options o = hg_options_default();
    o.batch = B, o.seq_len = T, o.threads = 2, o.seed = 5;
    hg_model *m = NULL;
    CHECK_OK(hg_model_create(&m, &c, &o));
    if (!m) return;
    int32_t tok[N], all[N], tgt[N];
    for (int i = 0; i < N; i++) tok[i] = (i * 11 + 2) % c.vocab_size, all[i] = (i * 17 + 5) % c.vocab_size;
    static const int kept[] = {1, 4, 5, 9, 14}; /* both rows, not their first or last */
    const int K = (int)(sizeof kept / sizeof kept[0]);
    const size_t P = grads(m, NULL);
    float *g_m = calloc(P, sizeof(float)), *g_t = calloc(P, sizeof(float));
    double *sum = calloc(P, sizeof(double)), loss_sum = 0;
    for (int i = 0; i < N; i++) tgt[i] = -1;
    for (int k = 0; k < K; k++) tgt[kept[k]] = all[kept[k]];
    float loss_m = NAN;
    CHECK_OK(hg_zero_grad(m));
    CHECK_OK(hg_forward_backward(m, tok, tgt, B, T, 1.0f, &loss_m));
    grads(m, g_m);
    for (int k = 0; k < K; k++) {
        for (int i = 0; i < N; i++) tgt[i] = i == kept[k] ? all[i] : -1;
        float l = NAN;
        CHECK_OK(hg_zero_grad(m));
        CHECK_OK(hg_forward_backward(m, tok, tgt, B, T, 1.0f, &l));
        grads(m, g_t);
        loss_sum += l;
        for (size_t j = 0; j < P; j++) sum[j] += g_t[j];
    }
    double num = 0, den = 0;
    for (size_t j = 0; j < P; j++) {
        double want = sum[j] / K;
        num += (g_m[j] - want) * (g_m[j] - want), den += want * want;
    }
    const double loss_err = fabs(loss_m - loss_sum / K) / fabs(loss_sum / K), grad_err = sqrt(num / den);
    printf("%s: loss with %d of %d targets %.7f, mean of their own %.7f (rel %.1e); gradients rel L2 %.1e\n", preset, K,
           N, loss_m, loss_sum / K, loss_err, grad_err);
    CHECK(loss_err < 1e-6 && grad_err < 1e-5 && den > 0);
    /* no target: loss 0, no gradient */
    for (int i = 0; i < N; i++) tgt[i] = -1;
    float none = NAN;
    CHECK_OK(hg_zero_grad(m));
    CHECK_OK(hg_forward_backward(m, tok, tgt, B, T, 1.0f, &none));
    grads(m, g_t);
    size_t nonzero = 0;
    for (size_t j = 0; j < P; j++) nonzero += g_t[j] != 0.0f;
    CHECK(none == 0.0f && nonzero == 0);
    free(g_m), free(g_t), free(sum);
    hg_model_free(m);
}

int main(void) {
    identity("odd");
    identity("llama-tiny");
    identity("qwen3-tiny");
    CHECK_DONE();
}
