/* Two runs with the same seed and thread count give bitwise identical losses and
 * parameters, with dropout on; a different seed gives different ones. */
#include <stdint.h>

#include "check.h"
#include "handgrad.h"

enum { B = 3, T = 37, STEPS = 3 };

/* Trains a fresh "odd" model for STEPS steps; losses[STEPS]; returns the model. */
static hg_model *run(uint64_t seed, int threads, float *losses) {
    hg_config cfg;
    CHECK_OK(hg_config_preset("odd", &cfg));
    cfg.dropout = 0.2f;
    hg_options o = hg_options_default();
    o.batch = B, o.seq_len = T, o.threads = threads, o.seed = seed;
    hg_model *m = NULL;
    CHECK_OK(hg_model_create(&m, &cfg, &o));
    if (!m) return NULL;
    int32_t tok[B * T], tgt[B * T];
    for (int i = 0; i < B * T; i++) tok[i] = (i * 7919) % 1000, tgt[i] = (i * 104729 + 11) % 1000;
    hg_adamw a = hg_adamw_default();
    for (int s = 0; s < STEPS; s++) {
        CHECK_OK(hg_zero_grad(m));
        CHECK_OK(hg_forward_backward(m, tok, tgt, B, T, 1.0f, &losses[s]));
        CHECK_OK(hg_optimizer_step(m, &a, NULL));
    }
    return m;
}

static int same_params(hg_model *a, hg_model *b) {
    for (int i = 0; i < hg_param_count(a); i++) {
        hg_param_info pa, pb;
        hg_param_at(a, i, &pa);
        hg_param_at(b, i, &pb);
        if (memcmp(pa.data, pb.data, sizeof(float) * (size_t)pa.numel)) return 0;
    }
    return 1;
}

int main(void) {
    for (int threads = 1; threads <= 2; threads++) {
        float l1[STEPS], l2[STEPS], l3[STEPS];
        hg_model *a = run(42, threads, l1), *b = run(42, threads, l2), *c = run(43, threads, l3);
        if (!a || !b || !c) CHECK_DONE();
        CHECK(!memcmp(l1, l2, sizeof l1));
        CHECK(same_params(a, b));
        CHECK(memcmp(l1, l3, sizeof l1) != 0);
        CHECK(!same_params(a, c));
        printf("threads %d: losses %.7f %.7f %.7f\n", threads, l1[0], l1[1], l1[2]);
        hg_model_free(a), hg_model_free(b), hg_model_free(c);
    }
    CHECK_DONE();
}
