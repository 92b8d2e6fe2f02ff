/* A program outside the tree, built against an installed handgrad (install_check.sh):
 * checks the header and library versions agree, then trains the tiny preset for a few
 * steps on one batch of random tokens and checks the loss starts near ln(V) and falls. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <handgrad.h>

#define B 2
#define T 32

int main(void) {
    char header[32];
    snprintf(header, sizeof header, "%d.%d.%d", HG_VERSION_MAJOR, HG_VERSION_MINOR, HG_VERSION_PATCH);
    if (strcmp(header, HG_VERSION_STRING) || strcmp(hg_version(), HG_VERSION_STRING)) {
        fprintf(stderr, "consumer: versions differ: header %s (%s), library %s\n", HG_VERSION_STRING, header,
                hg_version());
        return 1;
    }
    hg_config cfg;
    hg_options opt = hg_options_default();
    opt.batch = B, opt.seq_len = T, opt.seed = 7, opt.threads = 1;
    hg_model *m = NULL;
    if (hg_config_preset("tiny", &cfg) != HG_OK || hg_model_create(&m, &cfg, &opt) != HG_OK) {
        fprintf(stderr, "consumer: %s\n", hg_last_error());
        return 1;
    }
    int32_t tokens[B * T], targets[B * T];
    uint64_t x = 88172645463325252u;
    for (int i = 0; i < B * T; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        tokens[i] = (int32_t)(x % (uint64_t)cfg.vocab_size);
    }
    for (int i = 0; i < B * T; i++) targets[i] = tokens[(i + 1) % (B * T)];
    hg_adamw adamw = hg_adamw_default();
    adamw.lr = 1e-3f;
    float first = 0, loss = 0;
    for (int step = 0; step < 8; step++) {
        if (hg_zero_grad(m) != HG_OK || hg_forward_backward(m, tokens, targets, B, T, 1.0f, &loss) != HG_OK ||
            hg_optimizer_step(m, &adamw, NULL) != HG_OK) {
            fprintf(stderr, "consumer: step %d: %s\n", step, hg_last_error());
            return 1;
        }
        if (step == 0) first = loss;
    }
    hg_model_free(m);
    float uniform = logf((float)cfg.vocab_size);
    printf("handgrad %s: loss %.4f -> %.4f (ln V = %.4f)\n", hg_version(), first, loss, uniform);
    if (!(fabsf(first - uniform) < 0.5f) || !(loss < first - 0.1f)) {
        fprintf(stderr, "consumer: the loss did not start near ln V or did not fall\n");
        return 1;
    }
    return 0;
}
