/* The whole model's gradient against central differences of its own loss, for each MLP
 * kind (GELU, SwiGLU, ReLU^2, GeGLU), each block layout (prenorm, postnorm, sandwich,
 * parallel; each tensor sampled at least twice), with the logits soft-capped and the
 * embeddings scaled, with a partial rotary embedding, and with OLMo 2's q/k norm over all
 * heads at once, on a small CPU
 * model in fp32: the wiring of the step around each op (whose kernels test_ops holds to
 * float64 references) checked end to end, including what no PyTorch fixture covers yet
 * (GeGLU, the soft cap). With the cap, the logits handed out must be capped too.
 *
 * The loss is fp32, so a difference with step h = 2e-3 carries ~|L| 2^-24 / h ~ 1e-4 of
 * rounding (L ~ 4; 2e-2 at the postnorm's h = 1e-5, against its gradients of 30-110); its h^2
 * truncation is below that even where the loss bends sharply
 * (a cap of 0.15: tanh(z / c)'s third derivative is ~2 / c^3 = 600; an RMSNorm weight's
 * effect through the rotary embedding; h = 1e-2 missed one of 24 samples there by 0.5%).
 * Each sampled gradient element must be within 2e-3 of the difference, plus 2e-3 of the
 * largest sampled gradient (elements near 0 carry the absolute noise). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "handgrad.h"

static double loss_of(hg_model *m, const int32_t *tok, const int32_t *tgt, int B, int T) {
    float l = NAN;
    CHECK_OK(hg_forward(m, tok, tgt, B, T, &l, NULL));
    return l;
}

/* extra: more config fields, "name=value,..." (or NULL). */
static void check_kind(const char *mlp, const char *block, const char *norm, float softcap, float embed_scale,
                       int rotary_dim, const char *extra) {
    enum { B = 2, T = 8, MAX_SAMPLES = 96 };
    hg_config c;
    CHECK_OK(hg_config_preset("tiny", &c));
    c.n_layer = 2, c.d_model = 32, c.n_head = 2, c.d_ff = 48, c.vocab_size = 64, c.max_seq_len = 16;
    CHECK_OK(hg_config_set(&c, "mlp", mlp));
    CHECK_OK(hg_config_set(&c, "block", block));
    CHECK_OK(hg_config_set(&c, "norm", norm));
    char fields[128] = "", *save = NULL;
    if (extra) snprintf(fields, sizeof fields, "%s", extra);
    for (char *kv = strtok_r(fields, ",", &save); kv; kv = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(kv, '=');
        *eq = 0;
        CHECK_OK(hg_config_set(&c, kv, eq + 1));
    }
    c.logit_softcap = softcap, c.embed_scale = embed_scale;
    if (rotary_dim) c.position = HG_POS_ROPE, c.norm = HG_NORM_RMSNORM, c.rotary_dim = rotary_dim;
    hg_options o = hg_options_default();
    o.batch = B, o.seq_len = T, o.threads = 2, o.seed = 11;
    hg_model *m = NULL;
    CHECK_OK(hg_model_create(&m, &c, &o));
    if (!m) return;
    if (c.attn_softcap > 0) /* scores of ~0.01 at init stay on tanh's straight part: q|k|v weights x8 */
        for (int k = 0; k < hg_param_count(m); k++) {
            hg_param_info p;
            CHECK_OK(hg_param_at(m, k, &p));
            if (!strstr(p.name, "c_attn.weight")) continue;
            float *w = malloc(sizeof(float) * (size_t)p.numel);
            CHECK_OK(hg_param_read(m, k, HG_PARAM_DATA, w));
            for (int64_t j = 0; j < p.numel; j++) w[j] *= 8.0f;
            CHECK_OK(hg_param_write(m, k, HG_PARAM_DATA, w));
            free(w);
        }
    int32_t tok[B * T], tgt[B * T];
    for (int i = 0; i < B * T; i++) tok[i] = (i * 37 + 5) % 64, tgt[i] = (i * 11 + 3) % 64;
    float l0 = NAN;
    if (softcap > 0) { /* the logits are capped: inside (-cap, cap), and not all tiny */
        float logits[B * T * 64], big = 0.0f;
        CHECK_OK(hg_forward(m, tok, tgt, B, T, &l0, logits));
        for (int i = 0; i < B * T * 64; i++) {
            CHECK(fabsf(logits[i]) < softcap);
            big = fmaxf(big, fabsf(logits[i]));
        }
        CHECK(big > 0.3f * softcap); /* the cap bends them: tanh(0.3) is 3% below 0.3 */
    }
    CHECK_OK(hg_zero_grad(m));
    CHECK_OK(hg_forward_backward(m, tok, tgt, B, T, 1.0f, &l0));
    /* samples spread over every tensor: element (s * 7919) mod numel of tensor s mod count */
    const int SAMPLES = 2 * hg_param_count(m) > 24 ? 2 * hg_param_count(m) : 24;
    CHECK(SAMPLES <= MAX_SAMPLES);
    double g[MAX_SAMPLES], fd[MAX_SAMPLES], gmax = 0.0;
    /* a post norm divides by its branch output's scale (weights ~0.01 at init), so the
     * loss bends ~100x sharper in the projections: a smaller step there (postnorm, with no
     * pre-norm to damp the inputs, most) */
    const double h = c.block == HG_BLOCK_POSTNORM ? 1e-5 : c.block == HG_BLOCK_SANDWICH ? 2e-4 : 2e-3;
    for (int s = 0; s < SAMPLES && s < MAX_SAMPLES; s++) {
        const int k = s % hg_param_count(m);
        hg_param_info p;
        CHECK_OK(hg_param_at(m, k, &p));
        const int64_t j = ((int64_t)s * 7919) % p.numel;
        float *data = malloc(sizeof(float) * (size_t)p.numel), *grad = malloc(sizeof(float) * (size_t)p.numel);
        CHECK_OK(hg_param_read(m, k, HG_PARAM_DATA, data));
        CHECK_OK(hg_param_read(m, k, HG_PARAM_GRAD, grad));
        const float v = data[j];
        g[s] = grad[j];
        data[j] = v + (float)h;
        CHECK_OK(hg_param_write(m, k, HG_PARAM_DATA, data));
        double lp = loss_of(m, tok, tgt, B, T);
        data[j] = v - (float)h;
        CHECK_OK(hg_param_write(m, k, HG_PARAM_DATA, data));
        double lm = loss_of(m, tok, tgt, B, T);
        data[j] = v;
        CHECK_OK(hg_param_write(m, k, HG_PARAM_DATA, data));
        fd[s] = (lp - lm) / (2 * h);
        gmax = fmax(gmax, fabs(g[s]));
        free(data), free(grad);
    }
    int bad = 0;
    for (int s = 0; s < SAMPLES && s < MAX_SAMPLES; s++)
        if (!(fabs(g[s] - fd[s]) <= 2e-3 * fabs(fd[s]) + 2e-3 * gmax)) {
            fprintf(stderr, "mlp %s block %s sample %d: gradient %.6g, central difference %.6g\n", mlp, block, s, g[s],
                    fd[s]);
            bad++;
        }
    printf("mlp %s, block %s, %s, logit cap %g, embedding scale %g, rotary dims %d%s%s: %d samples, largest gradient "
           "%.3g, %d outside\n", mlp, block, norm, softcap, embed_scale, rotary_dim, extra ? ", " : "", extra ? extra : "",
           SAMPLES, gmax, bad);
    check_failures += bad;
    hg_model_free(m);
}

int main(void) {
    check_kind("gelu", "prenorm", "layernorm", 0.0f, 0.0f, 0, NULL);
    check_kind("swiglu", "prenorm", "layernorm", 0.0f, 0.0f, 0, NULL);
    check_kind("relu2", "prenorm", "layernorm", 0.0f, 0.0f, 0, NULL);
    check_kind("geglu", "prenorm", "layernorm", 0.0f, 0.0f, 0, NULL);
    /* Gemma 2's shape of head: a cap near the logits' size, embeddings times sqrt(C) */
    check_kind("geglu", "prenorm", "rmsnorm", 0.15f, 5.656854f, 0, NULL);
    /* Phi's partial rotary embedding: 6 of the 16 dims of each head turn */
    check_kind("gelu", "prenorm", "layernorm", 0.0f, 0.0f, 6, NULL);
    check_kind("gelu", "prenorm", "layernorm", 0.0f, 0.0f, 16, NULL);
    /* the block layouts, with both norms (LayerNorm's bias in the post norms) */
    const char *blocks[] = {"postnorm", "sandwich", "parallel"}, *norms[] = {"layernorm", "rmsnorm"};
    for (int b = 0; b < 3; b++)
        for (int n = 0; n < 2; n++) check_kind(n ? "swiglu" : "gelu", blocks[b], norms[n], 0.0f, 0.0f, 0, NULL);
    /* Gemma 2 (sandwich, GeGLU, the cap, the scale) and Phi-2 (parallel, partial rotary,
     * an untied output layer with a bias) */
    check_kind("geglu", "sandwich", "rmsnorm", 0.15f, 5.656854f, 0, NULL);
    check_kind("geglu", "sandwich", "rmsnorm", 0.15f, 5.656854f, 0, "attn_softcap=0.5");
    check_kind("gelu", "parallel", "layernorm", 0.0f, 0.0f, 6, "tied=false,lm_head_bias=true");
    /* OLMo 2: postnorm, RMSNorm, SwiGLU, rope, a q/k norm over all heads at once */
    check_kind("swiglu", "postnorm", "rmsnorm", 0.0f, 0.0f, 0, "position=rope,qk_norm=true,qk_norm_whole=true");
    check_kind("swiglu", "prenorm", "rmsnorm", 0.0f, 0.0f, 0, "position=rope,qk_norm=true,qk_norm_whole=true");
    CHECK_DONE();
}
