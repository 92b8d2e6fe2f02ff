/* Parameter and FLOP counts, read off the parameter table a model builds: against counts
 * known from elsewhere (GPT-2 small's published 124,439,808), a formula written out by
 * hand for the CS336 model, and each preset's model, whose tensors must add up to it. */
#include <stdio.h>

#include "check.h"
#include "handgrad.h"

int main(void) {
    hg_config c;
    CHECK_OK(hg_config_preset("small", &c));
    CHECK(hg_config_param_count(&c, 1) == 124439808);
    CHECK(hg_config_param_count(&c, 0) == 124439808 - 1024 * 768); /* without wpe */
    /* 6 N per token plus attention's 12 L C T: N leaves out wpe (a lookup) */
    CHECK_CLOSE(hg_train_flops(&c, 4, 256), 6.0 * 123653376.0 * 1024 + 12.0 * 12 * 768 * 256 * 1024, 1e-12, 0);

    /* cs336-small: RMSNorm (weights only), RoPE, SwiGLU (gate | up: 2 F wide), no biases,
     * untied: per layer 2 C + C 3C + C C + C 2F + F C; then wte, lm_head and ln_f */
    CHECK_OK(hg_config_preset("cs336-small", &c));
    const int64_t C = 768, F = 3072, L = 12, V = 10000;
    const int64_t per_layer = 2 * C + C * 3 * C + C * C + C * 2 * F + F * C;
    CHECK(hg_config_param_count(&c, 1) == L * per_layer + 2 * V * C + C);
    /* an untied wte is a lookup: no FLOPs */
    CHECK_CLOSE(hg_train_flops(&c, 1, 128), 6.0 * (double)(L * per_layer + V * C + C) * 128 + 12.0 * L * C * 128 * 128,
                1e-12, 0);

    /* every preset: the count is what its model holds (training state left out) */
    for (int i = 0; hg_config_preset_name(i); i++) {
        CHECK_OK(hg_config_preset(hg_config_preset_name(i), &c));
        if (hg_config_param_count(&c, 1) > 200000000) continue; /* keep the test's memory small */
        hg_options o = hg_options_default();
        o.training = 0, o.seq_len = 1;
        hg_model *m = NULL;
        CHECK_OK(hg_model_create(&m, &c, &o));
        if (!m) continue;
        int64_t n = 0;
        for (int k = 0; k < hg_param_count(m); k++) {
            hg_param_info p;
            CHECK_OK(hg_param_at(m, k, &p));
            n += p.numel;
        }
        if (n != hg_config_param_count(&c, 1)) {
            fprintf(stderr, "%s: tensors hold %lld parameters, the count says %lld\n", hg_config_preset_name(i),
                    (long long)n, (long long)hg_config_param_count(&c, 1));
            check_failures++;
        }
        hg_model_free(m);
    }
    CHECK_DONE();
}
