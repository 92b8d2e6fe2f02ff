/* Model configurations: presets, validation and derived sizes. */
#include <math.h>
#include <string.h>

#include "core/error.h"
#include "model/gpt.h"

typedef struct preset {
    const char *name;
    hg_config cfg;
} preset;

/* The ladder from the benchmarking notes, plus two small sizes for tests. */
static const preset presets[] = {
    {"small", {50257, 1024, 12, 12, 768, 3072, 0.0f}},
    {"medium", {50257, 1024, 24, 16, 1024, 4096, 0.0f}},
    {"large", {50257, 1024, 36, 20, 1280, 5120, 0.0f}},
    {"xl", {50257, 1024, 48, 25, 1600, 6400, 0.0f}},
    {"2.7B", {50257, 1024, 32, 32, 2560, 10240, 0.0f}},
    {"tiny", {512, 64, 2, 4, 64, 256, 0.0f}},
    {"odd", {1000, 64, 2, 3, 96, 384, 0.0f}},
};

hg_status hg_config_preset(const char *name, hg_config *out) {
    if (!name || !out) return hg_fail(HG_ERR_INVALID, "hg_config_preset: NULL argument");
    for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++)
        if (!strcmp(presets[i].name, name)) {
            *out = presets[i].cfg;
            return HG_OK;
        }
    return hg_fail(HG_ERR_INVALID,
                   "model preset '%s' is unknown (small, medium, large, xl, 2.7B, tiny, odd)", name);
}

/* Limits keep every derived size inside int and int64 arithmetic. */
#define LIMIT_DIM (1 << 20)

hg_status hg_config_validate(const hg_config *c) {
    if (!c) return hg_fail(HG_ERR_INVALID, "config is NULL");
    if (c->vocab_size <= 0 || c->vocab_size > (1 << 24))
        return hg_fail(HG_ERR_INVALID, "vocab_size must be in [1, 16777216], got %d", c->vocab_size);
    if (c->max_seq_len <= 0 || c->max_seq_len > LIMIT_DIM)
        return hg_fail(HG_ERR_INVALID, "max_seq_len must be in [1, %d], got %d", LIMIT_DIM, c->max_seq_len);
    if (c->n_layer <= 0 || c->n_layer > 4096)
        return hg_fail(HG_ERR_INVALID, "n_layer must be in [1, 4096], got %d", c->n_layer);
    if (c->d_model <= 0 || c->d_model > 65536)
        return hg_fail(HG_ERR_INVALID, "d_model must be in [1, 65536], got %d", c->d_model);
    if (c->n_head <= 0 || c->n_head > c->d_model)
        return hg_fail(HG_ERR_INVALID, "n_head must be in [1, d_model=%d], got %d", c->d_model, c->n_head);
    if (c->d_model % c->n_head)
        return hg_fail(HG_ERR_INVALID, "n_head (%d) must divide d_model (%d)", c->n_head, c->d_model);
    if ((c->d_model / c->n_head) % 16)
        return hg_fail(HG_ERR_INVALID,
                       "head size d_model/n_head = %d must be a multiple of 16 (attention tiles are "
                       "16-float vectors)", c->d_model / c->n_head);
    if (c->d_ff < 0 || c->d_ff > 4 * 65536)
        return hg_fail(HG_ERR_INVALID, "d_ff must be 0 (4*d_model) or in [1, 262144], got %d", c->d_ff);
    if (!(c->dropout >= 0.0f && c->dropout < 1.0f))
        return hg_fail(HG_ERR_INVALID, "dropout must be in [0, 1), got %g", (double)c->dropout);
    return HG_OK;
}

int gpt_dff(const hg_config *c) { return c->d_ff ? c->d_ff : 4 * c->d_model; }

int gpt_padded_vocab(const hg_config *c) { return (c->vocab_size + 63) / 64 * 64; }

int64_t hg_config_param_count(const hg_config *c, int with_position_embedding) {
    int64_t C = c->d_model, F = gpt_dff(c), L = c->n_layer;
    int64_t per_layer = 2 * C              /* ln_1 */
                        + C * 3 * C + 3 * C /* c_attn */
                        + C * C + C         /* attn c_proj */
                        + 2 * C             /* ln_2 */
                        + C * F + F         /* c_fc */
                        + F * C + C;        /* mlp c_proj */
    int64_t n = (int64_t)c->vocab_size * C + L * per_layer + 2 * C;
    if (with_position_embedding) n += (int64_t)c->max_seq_len * C;
    return n;
}

double hg_train_flops(const hg_config *c, int B, int T) {
    double tokens = (double)B * T;
    double n = (double)hg_config_param_count(c, 0);
    return 6.0 * n * tokens + 12.0 * c->n_layer * c->d_model * (double)T * tokens;
}
