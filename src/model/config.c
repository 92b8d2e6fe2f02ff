/* Model configurations: presets, the table of config fields (validation, text and JSON
 * by name), and derived sizes. */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "model/gpt.h"

/* ---- presets ---- */

typedef struct preset {
    const char *name;
    hg_config cfg;
} preset;

/* The CS336 "basics" model: pre-norm RMSNorm, RoPE, SwiGLU, no biases, untied output. */
#define CS336(C, F, L, NH)                                                                      \
    {.vocab_size = 10000, .max_seq_len = 1024, .n_layer = L, .n_head = NH, .d_model = C, .d_ff = F, \
     .norm = HG_NORM_RMSNORM, .position = HG_POS_ROPE, .mlp = HG_MLP_SWIGLU, .omit = HG_OMIT_ALL_BIAS, .untied = 1}
#define GPT2(V, T, L, NH, C, F) {.vocab_size = V, .max_seq_len = T, .n_layer = L, .n_head = NH, .d_model = C, .d_ff = F}

/* The ladder from the benchmarking notes as GPT-2 and as the CS336 model, SmolLM-135M's
 * shape, and small sizes for tests. */
static const preset presets[] = {
    {"small", GPT2(50257, 1024, 12, 12, 768, 3072)},
    {"medium", GPT2(50257, 1024, 24, 16, 1024, 4096)},
    {"large", GPT2(50257, 1024, 36, 20, 1280, 5120)},
    {"xl", GPT2(50257, 1024, 48, 25, 1600, 6400)},
    {"2.7B", GPT2(50257, 1024, 32, 32, 2560, 10240)},
    {"cs336-small", CS336(768, 3072, 12, 12)},
    {"cs336-medium", CS336(1024, 4096, 24, 16)},
    {"cs336-large", CS336(1280, 5120, 36, 20)},
    {"cs336-xl", CS336(1600, 6400, 48, 25)},
    {"cs336-2.7B", CS336(2560, 10240, 32, 32)},
    {"smollm-135m", {.vocab_size = 49152, .max_seq_len = 2048, .n_layer = 30, .n_head = 9, .d_model = 576,
                     .d_ff = 1536, .norm = HG_NORM_RMSNORM, .position = HG_POS_ROPE, .rope_theta = 10000.0f,
                     .mlp = HG_MLP_SWIGLU, .omit = HG_OMIT_ALL_BIAS, .n_kv_head = 3}},
    {"tiny", GPT2(512, 64, 2, 4, 64, 256)},
    {"odd", GPT2(1000, 64, 2, 3, 96, 384)},
    {"llama-tiny", {.vocab_size = 512, .max_seq_len = 64, .n_layer = 2, .n_head = 4, .d_model = 64, .d_ff = 160,
                    .norm = HG_NORM_RMSNORM, .position = HG_POS_ROPE, .mlp = HG_MLP_SWIGLU,
                    .omit = HG_OMIT_ALL_BIAS, .n_kv_head = 2, .untied = 1}},
    {"qwen2-tiny", {.vocab_size = 512, .max_seq_len = 64, .n_layer = 2, .n_head = 4, .d_model = 64, .d_ff = 176,
                    .norm = HG_NORM_RMSNORM, .norm_eps = 1e-6f, .position = HG_POS_ROPE, .rope_theta = 1e6f,
                    .mlp = HG_MLP_SWIGLU, .omit = HG_OMIT_PROJ_BIAS | HG_OMIT_MLP_BIAS | HG_OMIT_NORM_BIAS,
                    .n_kv_head = 2}},
    {"qwen3-tiny", {.vocab_size = 512, .max_seq_len = 64, .n_layer = 2, .n_head = 4, .d_model = 64, .d_ff = 160,
                    .norm = HG_NORM_RMSNORM, .norm_eps = 1e-6f, .position = HG_POS_ROPE, .rope_theta = 1e6f,
                    .mlp = HG_MLP_SWIGLU, .omit = HG_OMIT_ALL_BIAS, .n_kv_head = 2, .head_dim = 32, .qk_norm = 1}},
};
#define NPRESETS ((int)(sizeof presets / sizeof presets[0]))

const char *hg_config_preset_name(int i) { return i >= 0 && i < NPRESETS ? presets[i].name : NULL; }

hg_status hg_config_preset(const char *name, hg_config *out) {
    if (!name || !out) return hg_fail(HG_ERR_INVALID, "hg_config_preset: NULL argument");
    for (int i = 0; i < NPRESETS; i++)
        if (!strcmp(presets[i].name, name)) {
            *out = presets[i].cfg;
            return HG_OK;
        }
    char list[512] = "";
    for (int i = 0; i < NPRESETS; i++)
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? ", " : "", presets[i].name);
    return hg_fail(HG_ERR_INVALID, "model preset '%s' is unknown (%s)", name, list);
}

/* ---- the field table ---- */

typedef enum field_type {
    F_INT,   /* int in [min, max] */
    F_FLOAT, /* float in [min, max] (max exclusive when max_open) */
    F_ENUM,  /* int, one of names[] */
    F_KEEP,  /* boolean shown as "kept": true when bit is clear in omit */
    F_BOOL,  /* int 0 or 1, shown inverted when invert (tied = !untied) */
    F_OP,    /* an op's name (HG_OP_NAME_MAX bytes), "none" when empty */
} field_type;

typedef struct field {
    const char *name;
    field_type type;
    size_t offset;
    double min, max;
    unsigned bit;      /* F_KEEP's omit flag; F_BOOL: 1 to invert */
    const char *const *names;
    const char *help;
} field;

static const char *const norm_names[] = {"layernorm", "rmsnorm", NULL};
static const char *const position_names[] = {"learned", "rope", NULL};
static const char *const rope_scaling_names[] = {"none", "llama3", NULL};
static const char *const mlp_names[] = {"gelu", "swiglu", "relu2", "geglu", NULL};
static const char *const block_names[] = {"prenorm", "postnorm", "sandwich", "parallel", NULL};

#define OFF(f) offsetof(hg_config, f)
/* Limits keep every derived size inside int and int64 arithmetic. */
static const field fields[] = {
    {"vocab_size", F_INT, OFF(vocab_size), 1, 1 << 24, 0, NULL, "V, token ids in [0, V)"},
    {"max_seq_len", F_INT, OFF(max_seq_len), 1, 1 << 20, 0, NULL, "longest sequence (learned positions: table rows)"},
    {"n_layer", F_INT, OFF(n_layer), 1, 4096, 0, NULL, "blocks"},
    {"n_head", F_INT, OFF(n_head), 1, 65536, 0, NULL, "query heads"},
    {"n_kv_head", F_INT, OFF(n_kv_head), 0, 65536, 0, NULL, "key/value heads, dividing n_head (0: n_head)"},
    {"d_model", F_INT, OFF(d_model), 1, 65536, 0, NULL, "C, the residual width"},
    {"d_ff", F_INT, OFF(d_ff), 0, 262144, 0, NULL, "MLP width (0: 4 * d_model)"},
    {"head_dim", F_INT, OFF(head_dim), 0, 1024, 0, NULL, "head size, a multiple of 16 (0: d_model / n_head)"},
    {"dropout", F_FLOAT, OFF(dropout), 0, 1, 0, NULL, "dropout probability in [0, 1)"},
    {"norm", F_ENUM, OFF(norm), 0, 1, 0, norm_names, "layernorm or rmsnorm"},
    {"norm_eps", F_FLOAT, OFF(norm_eps), 0, 1, 0, NULL, "the norms' epsilon (0: 1e-5)"},
    {"norm_weight", F_KEEP, OFF(omit), 0, 1, HG_OMIT_NORM_WEIGHT, NULL, "the norms have a weight"},
    {"norm_bias", F_KEEP, OFF(omit), 0, 1, HG_OMIT_NORM_BIAS, NULL, "LayerNorm has a bias"},
    {"position", F_ENUM, OFF(position), 0, 1, 0, position_names, "learned or rope"},
    {"rope_theta", F_FLOAT, OFF(rope_theta), 1, 1e12, 0, NULL, "rotary base (0: 10000)"},
    {"rope_scaling", F_ENUM, OFF(rope_scaling), 0, 1, 0, rope_scaling_names, "none or llama3 (Llama 3.1's frequency bands)"},
    {"rope_factor", F_FLOAT, OFF(rope_factor), 0, 1e6, 0, NULL, "llama3: long wavelengths' frequency divisor"},
    {"rope_low_freq_factor", F_FLOAT, OFF(rope_low_freq_factor), 0, 1e6, 0, NULL, "llama3: low band edge"},
    {"rope_high_freq_factor", F_FLOAT, OFF(rope_high_freq_factor), 0, 1e6, 0, NULL, "llama3: high band edge"},
    {"rope_original_max_len", F_INT, OFF(rope_original_max_len), 0, 1 << 24, 0, NULL, "llama3: the base model's context"},
    {"mlp", F_ENUM, OFF(mlp), 0, 3, 0, mlp_names, "gelu, swiglu, relu2 or geglu"},
    {"qkv_bias", F_KEEP, OFF(omit), 0, 1, HG_OMIT_QKV_BIAS, NULL, "the q/k/v projection has a bias"},
    {"proj_bias", F_KEEP, OFF(omit), 0, 1, HG_OMIT_PROJ_BIAS, NULL, "the attention output projection has a bias"},
    {"mlp_bias", F_KEEP, OFF(omit), 0, 1, HG_OMIT_MLP_BIAS, NULL, "the MLP linears have biases"},
    {"tied", F_BOOL, OFF(untied), 0, 1, 1, NULL, "the output layer is the token embedding"},
    {"qk_norm", F_BOOL, OFF(qk_norm), 0, 1, 0, NULL, "q and k heads RMS-normalised before the rotary embedding"},
    {"logit_softcap", F_FLOAT, OFF(logit_softcap), 0, 1e4, 0, NULL, "logits = c tanh(logits / c) with c this value (0: none)"},
    {"embed_scale", F_FLOAT, OFF(embed_scale), 0, 1e4, 0, NULL, "token embeddings times this on the way in (0: 1)"},
    {"rotary_dim", F_INT, OFF(rotary_dim), 0, 1024, 0, NULL, "rope: the rotated dimensions of a head, even (0: all)"},
    {"qk_norm_whole", F_BOOL, OFF(qk_norm_whole), 0, 1, 0, NULL, "qk_norm over all q heads and all k heads at once"},
    {"attn_softcap", F_FLOAT, OFF(attn_softcap), 0, 1e4, 0, NULL, "attention scores = c tanh(scores / c) (0: none)"},
    {"sliding_window", F_INT, OFF(sliding_window), 0, 1 << 20, 0, NULL, "attention window of the sliding layers (0: none)"},
    {"window_period", F_INT, OFF(window_period), 0, 4096, 0, NULL, "P > 1: layer l slides unless l % P == P-1 (0: every layer)"},
    {"window_first_layer", F_INT, OFF(window_first_layer), 0, 4096, 0, NULL, "layers below this attend fully"},
    {"lm_head_bias", F_BOOL, OFF(lm_head_bias), 0, 1, 0, NULL, "the output layer has a bias"},
    {"block", F_ENUM, OFF(block), 0, 3, 0, block_names, "prenorm, postnorm, sandwich or parallel: the block's order"},
    {"op_attn_proj", F_OP, OFF(site_op[HG_SITE_ATTN_PROJ]), 0, 0, 0, NULL, "registered op after attn.c_proj, or none"},
    {"op_mlp_act", F_OP, OFF(site_op[HG_SITE_MLP_ACT]), 0, 0, 0, NULL, "registered op as the MLP activation, or none"},
    {"op_final_norm", F_OP, OFF(site_op[HG_SITE_FINAL_NORM]), 0, 0, 0, NULL, "registered op before ln_f, or none"},
};
#undef OFF
#define NFIELDS ((int)(sizeof fields / sizeof fields[0]))

int hg_config_field_count(void) { return NFIELDS; }

const char *hg_config_field_name(int i, const char **help) {
    if (i < 0 || i >= NFIELDS) return NULL;
    if (help) *help = fields[i].help;
    return fields[i].name;
}

static const field *find_field(const char *name) {
    for (int i = 0; i < NFIELDS; i++)
        if (!strcmp(fields[i].name, name)) return &fields[i];
    return NULL;
}

char gpt_config_field_json(const char *name) {
    const field *f = find_field(name);
    if (!f) return 0;
    return f->type == F_INT || f->type == F_FLOAT ? 'n' : f->type == F_KEEP || f->type == F_BOOL ? 'b' : 's';
}

static int *int_at(hg_config *c, const field *f) { return (int *)((char *)c + f->offset); }
static float *float_at(hg_config *c, const field *f) { return (float *)((char *)c + f->offset); }

static char *name_at(hg_config *c, const field *f) { return (char *)c + f->offset; }

int gpt_op_name_ok(const char *s, size_t cap) {
    size_t n = 0;
    for (; n < cap && s[n]; n++)
        if (!((s[n] >= 'a' && s[n] <= 'z') || (s[n] >= 'A' && s[n] <= 'Z') || (s[n] >= '0' && s[n] <= '9') ||
              s[n] == '_' || s[n] == '-'))
            return 0;
    return n > 0 && n < cap && n < HG_OP_NAME_MAX && strcmp(s, "none");
}

static int parse_bool(const char *v, int *out) {
    if (!strcmp(v, "true") || !strcmp(v, "1")) return *out = 1, 1;
    if (!strcmp(v, "false") || !strcmp(v, "0")) return *out = 0, 1;
    return 0;
}

hg_status hg_config_set(hg_config *c, const char *name, const char *value) {
    if (!c || !name || !value) return hg_fail(HG_ERR_INVALID, "hg_config_set: NULL argument");
    const field *f = find_field(name);
    if (!f) return hg_fail(HG_ERR_INVALID, "config has no field '%s'", name);
    char *end = NULL;
    switch (f->type) {
    case F_INT: {
        long v = strtol(value, &end, 10);
        if (!*value || *end || v < (long)f->min || v > (long)f->max)
            return hg_fail(HG_ERR_INVALID, "%s must be an integer in [%.0f, %.0f], got '%s'", name, f->min, f->max, value);
        *int_at(c, f) = (int)v;
        return HG_OK;
    }
    case F_FLOAT: {
        double v = strtod(value, &end);
        if (!*value || *end || !(v >= 0.0 && v <= f->max))
            return hg_fail(HG_ERR_INVALID, "%s must be a number in [0, %g], got '%s'", name, f->max, value);
        *float_at(c, f) = (float)v;
        return HG_OK;
    }
    case F_ENUM:
        for (int i = 0; f->names[i]; i++)
            if (!strcmp(f->names[i], value)) {
                *int_at(c, f) = i;
                return HG_OK;
            }
        return hg_fail(HG_ERR_INVALID, "%s must be %s%s%s%s%s, got '%s'", name, f->names[0], f->names[2] ? ", " : " or ",
                       f->names[1], f->names[2] ? " or " : "", f->names[2] ? f->names[2] : "", value);
    case F_KEEP:
    case F_BOOL: {
        int b;
        if (!parse_bool(value, &b))
            return hg_fail(HG_ERR_INVALID, "%s must be true or false, got '%s'", name, value);
        if (f->type == F_KEEP) c->omit = b ? c->omit & ~f->bit : c->omit | f->bit;
        else *int_at(c, f) = f->bit ? !b : b;
        return HG_OK;
    }
    case F_OP:
        if (!*value || !strcmp(value, "none")) {
            memset(name_at(c, f), 0, HG_OP_NAME_MAX);
            return HG_OK;
        }
        if (!gpt_op_name_ok(value, HG_OP_NAME_MAX))
            return hg_fail(HG_ERR_INVALID, "%s must be none or an op name of 1 to %d letters, digits, '_' or '-', got '%.64s'",
                           name, HG_OP_NAME_MAX - 1, value);
        memset(name_at(c, f), 0, HG_OP_NAME_MAX);
        memcpy(name_at(c, f), value, strlen(value));
        return HG_OK;
    }
    return HG_OK;
}

hg_status hg_config_get(const hg_config *cfg, const char *name, char *buf, size_t size) {
    if (!cfg || !name || !buf) return hg_fail(HG_ERR_INVALID, "hg_config_get: NULL argument");
    const field *f = find_field(name);
    if (!f) return hg_fail(HG_ERR_INVALID, "config has no field '%s'", name);
    hg_config *c = (hg_config *)cfg; /* read only */
    switch (f->type) {
    case F_INT: {
        gpt_dims d = gpt_dims_of(cfg); /* a 0 that stands for a derived size, resolved */
        int v = f->offset == offsetof(hg_config, n_kv_head) ? d.NKV
                : f->offset == offsetof(hg_config, head_dim) ? d.hs
                : f->offset == offsetof(hg_config, d_ff)     ? d.F
                                                             : *int_at(c, f);
        snprintf(buf, size, "%d", v);
        break;
    }
    case F_FLOAT: {
        float v = f->offset == offsetof(hg_config, norm_eps)     ? gpt_norm_eps(cfg)
                  : f->offset == offsetof(hg_config, rope_theta) ? gpt_rope_theta(cfg)
                                                                 : *float_at(c, f);
        snprintf(buf, size, "%.9g", (double)v);
        break;
    }
    case F_ENUM: {
        int v = *int_at(c, f);
        snprintf(buf, size, "%s", v >= 0 && v <= (int)f->max ? f->names[v] : "?");
        break;
    }
    case F_KEEP: snprintf(buf, size, "%s", cfg->omit & f->bit ? "false" : "true"); break;
    case F_BOOL: snprintf(buf, size, "%s", (*int_at(c, f) != 0) != (f->bit != 0) ? "true" : "false"); break;
    case F_OP: snprintf(buf, size, "%.*s", HG_OP_NAME_MAX - 1, *name_at(c, f) ? name_at(c, f) : "none"); break;
    }
    return HG_OK;
}

/* ---- validation ---- */

hg_status hg_config_validate(const hg_config *c) {
    if (!c) return hg_fail(HG_ERR_INVALID, "config is NULL");
    hg_config *w = (hg_config *)c; /* read only */
    for (int i = 0; i < NFIELDS; i++) {
        const field *f = &fields[i];
        if (f->type == F_INT || f->type == F_ENUM) {
            int v = *int_at(w, f);
            if (v < f->min || v > f->max)
                return hg_fail(HG_ERR_INVALID, "%s must be in [%.0f, %.0f], got %d", f->name, f->min, f->max, v);
        } else if (f->type == F_FLOAT) {
            float v = *float_at(w, f);
            int ok = f->offset == offsetof(hg_config, dropout) ? v >= 0.0f && v < 1.0f : v == 0.0f || (v > 0.0f && v <= f->max);
            if (!ok) return hg_fail(HG_ERR_INVALID, "%s must be in [0, %g%c, got %g", f->name, f->max,
                                    f->offset == offsetof(hg_config, dropout) ? ')' : ']', (double)v);
        } else if (f->type == F_BOOL && (unsigned)*int_at(w, f) > 1) {
            return hg_fail(HG_ERR_INVALID, "%s: its flag must be 0 or 1, got %d", f->name, *int_at(w, f));
        } else if (f->type == F_OP && *name_at(w, f) && !gpt_op_name_ok(name_at(w, f), HG_OP_NAME_MAX)) {
            return hg_fail(HG_ERR_INVALID, "%s must be empty or an op name of 1 to %d letters, digits, '_' or '-'",
                           f->name, HG_OP_NAME_MAX - 1);
        }
    }
    if (c->omit & ~(unsigned)(HG_OMIT_ALL_BIAS | HG_OMIT_NORM_WEIGHT))
        return hg_fail(HG_ERR_INVALID, "omit has unknown flags 0x%x", c->omit);
    if (c->n_head > c->d_model) return hg_fail(HG_ERR_INVALID, "n_head must be in [1, d_model=%d], got %d", c->d_model, c->n_head);
    if (c->n_kv_head && c->n_head % c->n_kv_head)
        return hg_fail(HG_ERR_INVALID, "n_head (%d) must be a multiple of n_kv_head (%d)", c->n_head, c->n_kv_head);
    if (!c->head_dim && c->d_model % c->n_head)
        return hg_fail(HG_ERR_INVALID, "n_head (%d) must divide d_model (%d), or head_dim must be set", c->n_head, c->d_model);
    if (c->rope_scaling == HG_ROPE_LLAMA3 &&
        !(c->position == HG_POS_ROPE && c->rope_factor > 0.0f && c->rope_low_freq_factor > 0.0f &&
          c->rope_high_freq_factor > c->rope_low_freq_factor && c->rope_original_max_len > 0))
        return hg_fail(HG_ERR_INVALID, "rope_scaling llama3 needs position rope, rope_factor > 0, "
                       "0 < rope_low_freq_factor < rope_high_freq_factor and rope_original_max_len > 0");
    gpt_dims d = gpt_dims_of(c);
    /* a head size derived from d_model / n_head must fit the head_dim field too, so that a
     * config written with its resolved head_dim reads back */
    double hs_max = find_field("head_dim")->max;
    if (d.hs > hs_max)
        return hg_fail(HG_ERR_INVALID, "head_dim = %d (d_model / n_head) must be at most %.0f", d.hs, hs_max);
    if (d.hs % 16)
        return hg_fail(HG_ERR_INVALID,
                       "head_dim = %d must be a multiple of 16 (the attention tiles are 16-float vectors)", d.hs);
    if ((int64_t)d.NH * d.hs > 65536)
        return hg_fail(HG_ERR_INVALID, "n_head * head_dim = %lld is too large (at most 65536)", (long long)d.NH * d.hs);
    if (c->qk_norm_whole && !c->qk_norm) return hg_fail(HG_ERR_INVALID, "qk_norm_whole is set without qk_norm");
    if (c->rotary_dim && (c->rotary_dim % 2 || c->rotary_dim > d.hs || c->position != HG_POS_ROPE))
        return hg_fail(HG_ERR_INVALID, "rotary_dim = %d must be even, at most the head size %d, and set only with "
                       "position rope", c->rotary_dim, d.hs);
    return HG_OK;
}

/* ---- derived sizes ---- */

gpt_dims gpt_dims_of(const hg_config *c) {
    gpt_dims d;
    d.V = c->vocab_size;
    d.Vp = (c->vocab_size + 63) / 64 * 64;
    d.L = c->n_layer;
    d.C = c->d_model;
    d.NH = c->n_head;
    d.NKV = c->n_kv_head ? c->n_kv_head : c->n_head;
    d.hs = hg_head_size(c);
    d.QD = d.NH * d.hs;
    d.KVD = d.NKV * d.hs;
    d.QKV = d.QD + 2 * d.KVD;
    d.F = c->d_ff ? c->d_ff : 4 * c->d_model;
    d.FI = hg_mlp_gated(c->mlp) ? 2 * d.F : d.F;
    d.rot = c->rotary_dim ? c->rotary_dim : d.hs;
    return d;
}

float gpt_norm_eps(const hg_config *c) { return c->norm_eps > 0.0f ? c->norm_eps : 1e-5f; }
float gpt_rope_theta(const hg_config *c) { return c->rope_theta > 0.0f ? c->rope_theta : 10000.0f; }

int gpt_same_architecture(const hg_config *a, const hg_config *b, char *why, size_t size) {
    char va[64], vb[64];
    for (int i = 0; i < NFIELDS; i++) {
        if (fields[i].offset == offsetof(hg_config, dropout)) continue; /* training, not shape */
        hg_config_get(a, fields[i].name, va, sizeof va);
        hg_config_get(b, fields[i].name, vb, sizeof vb);
        if (strcmp(va, vb)) {
            snprintf(why, size, "%s %s against %s", fields[i].name, va, vb);
            return 0;
        }
    }
    return 1;
}
