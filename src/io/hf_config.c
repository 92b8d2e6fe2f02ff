/* Hugging Face config.json to hg_config and back, for GPT-2, Phi-2 and the Llama family
 * (Llama, Mistral, Qwen2, Qwen3, and Gemma, Gemma 2, Phi-3 and OLMo 2, its variations).
 *
 * Every key of the file is accounted for: read into the config, checked to hold the one
 * value handgrad computes, or listed below as not changing the computation (metadata,
 * token ids, generation defaults). Any other key is refused by name, since handgrad
 * cannot tell what it would change. The mapping is in docs/formats.md. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/error.h"
#include "data/fileio.h"
#include "io/hf.h"
#include "model/gpt.h"

static const struct {
    const char *model_type, *class_name;
} archs[HF_NARCH] = {
    [HF_GPT2] = {"gpt2", "GPT2LMHeadModel"},      [HF_LLAMA] = {"llama", "LlamaForCausalLM"},
    [HF_MISTRAL] = {"mistral", "MistralForCausalLM"}, [HF_QWEN2] = {"qwen2", "Qwen2ForCausalLM"},
    [HF_QWEN3] = {"qwen3", "Qwen3ForCausalLM"},     [HF_GEMMA] = {"gemma", "GemmaForCausalLM"},
    [HF_GEMMA2] = {"gemma2", "Gemma2ForCausalLM"},  [HF_PHI3] = {"phi3", "Phi3ForCausalLM"},
    [HF_OLMO2] = {"olmo2", "Olmo2ForCausalLM"},     [HF_PHI] = {"phi", "PhiForCausalLM"},
};
#define ARCH_LIST "gpt2, llama, mistral, qwen2, qwen3, gemma, gemma2, phi, phi3 or olmo2"
#define CLASS_LIST                                                                                              \
    "GPT2LMHeadModel, LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, GemmaForCausalLM, " \
    "Gemma2ForCausalLM, PhiForCausalLM, Phi3ForCausalLM, Olmo2ForCausalLM"

const char *hf_arch_class(hf_arch a) { return archs[a].class_name; }

hg_status hf_arch_parse(const char *class_name, hf_arch *out) {
    for (int a = 0; a < HF_NARCH; a++)
        if (!strcmp(class_name, archs[a].class_name)) return *out = (hf_arch)a, HG_OK;
    return hg_fail(HG_ERR_UNSUPPORTED, "architecture '%s' is not one handgrad writes (" CLASS_LIST ")", class_name);
}

/* Keys that do not change what the model computes: bookkeeping, token ids, and the
 * defaults transformers keeps in every config (generation settings, heads for other
 * tasks). */
static const char *const inert_keys[] = {
    "_name_or_path", "architectures", "model_type", "transformers_version", "torch_dtype", "dtype", "use_cache",
    "initializer_range", "initializer_factor", "bos_token_id", "eos_token_id", "pad_token_id", "sep_token_id",
    "decoder_start_token_id", "output_attentions", "output_hidden_states", "return_dict", "use_return_dict",
    "chunk_size_feed_forward", "id2label", "label2id", "num_labels", "problem_type", "is_encoder_decoder",
    "is_decoder", "tokenizer_class", "prefix", "task_specific_params", "torchscript", "use_bfloat16",
    "pruned_heads", "finetuning_task", "tf_legacy_loss", "tie_encoder_decoder", "max_length", "min_length",
    "do_sample", "early_stopping", "num_beams", "num_beam_groups", "diversity_penalty", "temperature", "top_k",
    "top_p", "typical_p", "repetition_penalty", "length_penalty", "no_repeat_ngram_size",
    "encoder_no_repeat_ngram_size", "bad_words_ids", "num_return_sequences", "output_scores",
    "return_dict_in_generate", "forced_bos_token_id", "forced_eos_token_id", "remove_invalid_values",
    "exponential_decay_length_penalty", "suppress_tokens", "begin_suppress_tokens",
    "pretraining_tp", /* Llama: splits the same matrix products into slices */
    "summary_type", "summary_use_proj", "summary_activation", "summary_proj_to_labels", "summary_first_dropout",
    "reorder_and_upcast_attn", /* GPT-2: the same attention with fp32 softmax */
    "resid_pdrop", "embd_pdrop", "attn_pdrop", /* GPT-2's dropouts: train takes --dropout */
};

/* A parse: the file's name for messages, the object, and the keys read so far. */
typedef struct hfc {
    const char *file;
    const cJSON *j;
    const char *used[48];
    int n_used;
} hfc;

static const cJSON *key(hfc *c, const char *k) {
    if (c->n_used < (int)(sizeof c->used / sizeof c->used[0])) c->used[c->n_used++] = k;
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(c->j, k);
    return v && !cJSON_IsNull(v) ? v : NULL;
}

/* An integer key; absent gives *out = dflt when dflt >= 0, else an error. */
static hg_status get_int(hfc *c, const char *k, int dflt, int *out) {
    const cJSON *v = key(c, k);
    if (!v) {
        if (dflt >= 0) return *out = dflt, HG_OK;
        return hg_fail(HG_ERR_FORMAT, "%s: field '%s' is missing", c->file, k);
    }
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || v->valuedouble < 0 || v->valuedouble > 1e9)
        return hg_fail(HG_ERR_FORMAT, "%s: field '%s' must be a non-negative integer", c->file, k);
    *out = (int)v->valuedouble;
    return HG_OK;
}

/* A positive number key in (0, max]; absent leaves *out. */
static hg_status get_double(hfc *c, const cJSON *obj, const char *k, double max, double *out) {
    const cJSON *v = obj == c->j ? key(c, k) : cJSON_GetObjectItemCaseSensitive(obj, k);
    if (!v || cJSON_IsNull(v)) return HG_OK;
    if (!cJSON_IsNumber(v) || !(v->valuedouble > 0.0 && v->valuedouble <= max))
        return hg_fail(HG_ERR_FORMAT, "%s: field '%s' must be a number in (0, %g]", c->file, k, max);
    *out = v->valuedouble;
    return HG_OK;
}
static hg_status get_num(hfc *c, const cJSON *obj, const char *k, double max, float *out) {
    double v = *out;
    HG_TRY(get_double(c, obj, k, max, &v));
    *out = (float)v;
    return HG_OK;
}

/* A boolean key; absent gives dflt. */
static hg_status get_bool(hfc *c, const char *k, int dflt, int *out) {
    const cJSON *v = key(c, k);
    if (!v) return *out = dflt, HG_OK;
    if (!cJSON_IsBool(v)) return hg_fail(HG_ERR_FORMAT, "%s: field '%s' must be true or false", c->file, k);
    *out = cJSON_IsTrue(v);
    return HG_OK;
}

/* A boolean key that handgrad computes with one value only. */
static hg_status need_bool(hfc *c, const char *k, int want, const char *why) {
    int v = want;
    HG_TRY(get_bool(c, k, want, &v));
    if (v != want)
        return hg_fail(HG_ERR_UNSUPPORTED, "%s: field '%s' = %s is not supported: %s", c->file, k, v ? "true" : "false",
                       why);
    return HG_OK;
}

/* A string key that must be one of names (NULL-terminated); absent is fine. */
static hg_status need_string(hfc *c, const char *k, const char *const *names, const char *why) {
    const cJSON *v = key(c, k);
    if (!v) return HG_OK;
    for (int i = 0; names[i]; i++)
        if (cJSON_IsString(v) && !strcmp(v->valuestring, names[i])) return HG_OK;
    return hg_fail(HG_ERR_UNSUPPORTED, "%s: field '%s' = \"%.40s\" is not supported: %s", c->file, k,
                   cJSON_IsString(v) ? v->valuestring : "(not a string)", why);
}

static hg_status no_dropout(hfc *c, const char *k) {
    const cJSON *v = key(c, k);
    if (v && !(cJSON_IsNumber(v) && v->valuedouble == 0.0))
        return hg_fail(HG_ERR_UNSUPPORTED, "%s: field '%s' must be 0: handgrad has no attention dropout", c->file, k);
    return HG_OK;
}

/* Every key of the file was read or is inert. */
static hg_status all_known(hfc *c) {
    const char *model_type = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(c->j, "model_type"));
    for (const cJSON *it = c->j->child; it; it = it->next) {
        int known = 0;
        for (int i = 0; i < c->n_used && !known; i++) known = !strcmp(it->string, c->used[i]);
        for (size_t i = 0; i < sizeof inert_keys / sizeof inert_keys[0] && !known; i++)
            known = !strcmp(it->string, inert_keys[i]);
        if (!known)
            return hg_fail(HG_ERR_UNSUPPORTED, "%s: field '%.64s' is not supported: handgrad does not know what it "
                           "changes in a %s model, so it refuses rather than guess", c->file, it->string,
                           model_type ? model_type : "gpt2");
    }
    return HG_OK;
}

static const char *const gelu_tanh_names[] = {"gelu_new", "gelu_pytorch_tanh", "gelu_fast", NULL};
static const char *const silu_names[] = {"silu", "swish", NULL};

static hg_status parse_gpt2(hfc *c, hg_config *cfg) {
    int n_ctx, tied = 1;
    HG_TRY(get_int(c, "n_ctx", 0, &n_ctx));
    HG_TRY(get_int(c, "vocab_size", -1, &cfg->vocab_size));
    HG_TRY(get_int(c, "n_positions", n_ctx > 0 ? n_ctx : -1, &cfg->max_seq_len));
    HG_TRY(get_int(c, "n_embd", -1, &cfg->d_model));
    HG_TRY(get_int(c, "n_layer", -1, &cfg->n_layer));
    HG_TRY(get_int(c, "n_head", -1, &cfg->n_head));
    HG_TRY(get_int(c, "n_inner", 0, &cfg->d_ff));
    HG_TRY(need_string(c, "activation_function", gelu_tanh_names,
                       "handgrad computes GELU's tanh approximation (gelu_new)"));
    const cJSON *eps = key(c, "layer_norm_epsilon");
    if (eps && !(cJSON_IsNumber(eps) && eps->valuedouble > 0.0 && eps->valuedouble <= 1.0))
        return hg_fail(HG_ERR_FORMAT, "%s: field 'layer_norm_epsilon' must be a number in (0, 1]", c->file);
    if (eps) cfg->norm_eps = (float)eps->valuedouble;
    HG_TRY(need_bool(c, "scale_attn_weights", 1, "handgrad scales scores by 1/sqrt(head size)"));
    HG_TRY(need_bool(c, "scale_attn_by_inverse_layer_idx", 0, "handgrad does not scale scores by layer"));
    HG_TRY(need_bool(c, "add_cross_attention", 0, "handgrad is decoder-only"));
    HG_TRY(get_bool(c, "tie_word_embeddings", 1, &tied));
    cfg->untied = !tied;
    return HG_OK;
}

/* rope_theta, the frequency scaling and (Phi-3) the rotated fraction of a head:
 * transformers 5 writes them into one object, rope_parameters; earlier versions wrote
 * rope_theta, rope_scaling and partial_rotary_factor. *partial is left as it is when
 * absent. */
static hg_status parse_rope(hfc *c, hg_config *cfg, float theta_default, double *partial) {
    cfg->rope_theta = theta_default;
    HG_TRY(get_num(c, c->j, "rope_theta", 1e12, &cfg->rope_theta));
    if (partial) HG_TRY(get_double(c, c->j, "partial_rotary_factor", 1.0, partial));
    const char *names[] = {"rope_parameters", "rope_scaling"};
    for (int n = 0; n < 2; n++) {
        const cJSON *r = key(c, names[n]);
        if (!r) continue;
        if (!cJSON_IsObject(r)) return hg_fail(HG_ERR_FORMAT, "%s: field '%s' must be an object", c->file, names[n]);
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(r, "rope_type");
        if (!type) type = cJSON_GetObjectItemCaseSensitive(r, "type");
        const char *t = cJSON_GetStringValue(type) ? cJSON_GetStringValue(type) : "default";
        HG_TRY(get_num(c, r, "rope_theta", 1e12, &cfg->rope_theta));
        if (partial) HG_TRY(get_double(c, r, "partial_rotary_factor", 1.0, partial));
        static const char *const llama3_keys[] = {"factor", "low_freq_factor", "high_freq_factor",
                                                  "original_max_position_embeddings"};
        if (!strcmp(t, "llama3")) {
            float orig = 0;
            cfg->rope_scaling = HG_ROPE_LLAMA3;
            float *dst[] = {&cfg->rope_factor, &cfg->rope_low_freq_factor, &cfg->rope_high_freq_factor, &orig};
            for (int i = 0; i < 4; i++) {
                if (!cJSON_GetObjectItemCaseSensitive(r, llama3_keys[i]))
                    return hg_fail(HG_ERR_FORMAT, "%s: field '%s.%s' is missing", c->file, names[n], llama3_keys[i]);
                HG_TRY(get_num(c, r, llama3_keys[i], 1e9, dst[i]));
            }
            cfg->rope_original_max_len = (int)orig;
        } else if (strcmp(t, "default")) {
            return hg_fail(HG_ERR_UNSUPPORTED, "%s: field '%s.rope_type' = \"%.40s\" is not supported: handgrad "
                           "computes plain rotary frequencies and Llama 3's (\"llama3\")", c->file, names[n], t);
        }
        for (const cJSON *it = r->child; it; it = it->next) {
            int known = !strcmp(it->string, "rope_type") || !strcmp(it->string, "type") ||
                        !strcmp(it->string, "rope_theta") || (partial && !strcmp(it->string, "partial_rotary_factor"));
            for (int i = 0; i < 4 && !known; i++) known = cfg->rope_scaling && !strcmp(it->string, llama3_keys[i]);
            if (!known)
                return hg_fail(HG_ERR_UNSUPPORTED, "%s: field '%s.%.64s' is not supported with rope_type \"%s\"",
                               c->file, names[n], it->string, t);
        }
    }
    return HG_OK;
}

/* The layers that slide, as handgrad's config says them (sliding_window, window_period,
 * window_first_layer; hg_layer_window): the per-layer list of layer_types when the file
 * has one, else the class's own rule (Mistral and Phi-3: every layer; Gemma 2: every
 * other, from layer 0; Qwen2 and Qwen3: with use_sliding_window, the layers from
 * max_window_layers on). A list no period and first layer describe is refused by name. */
static hg_status parse_window(hfc *c, hf_arch a, hg_config *cfg) {
    const int L = cfg->n_layer;
    int use = a == HF_MISTRAL || a == HF_GEMMA2 || a == HF_PHI3, window = 0, first = 0;
    if (a == HF_QWEN2 || a == HF_QWEN3) { /* (transformers' defaults when absent: false, 28) */
        HG_TRY(get_bool(c, "use_sliding_window", 0, &use));
        HG_TRY(get_int(c, "max_window_layers", 28, &first));
    }
    /* absent, MistralConfig's default is 4096; null is no window */
    const int absent = !cJSON_GetObjectItemCaseSensitive(c->j, "sliding_window");
    HG_TRY(get_int(c, "sliding_window", a == HF_MISTRAL && absent ? 4096 : 0, &window));
    if (window > (1 << 20)) window = 0; /* wider than any context handgrad takes: never cuts */
    unsigned char *slides = calloc((size_t)L, 1);
    if (!slides) return hg_fail(HG_ERR_NOMEM, "%s: out of memory", c->file);
    for (int l = 0; l < L; l++)
        slides[l] = a == HF_GEMMA2 ? l % 2 == 0 : a == HF_QWEN2 || a == HF_QWEN3 ? l >= first : 1;
    const cJSON *types = key(c, "layer_types");
    hg_status st = HG_OK;
    if (types) {
        const cJSON *it;
        int n = 0;
        cJSON_ArrayForEach(it, types) {
            const char *s = cJSON_GetStringValue(it);
            if (!s || (strcmp(s, "full_attention") && strcmp(s, "sliding_attention"))) {
                st = hg_fail(HG_ERR_UNSUPPORTED, "%s: field 'layer_types' holds \"%.40s\"; handgrad computes "
                             "full_attention and sliding_attention", c->file, s ? s : "?");
                break;
            }
            if (n < L) slides[n] = !strcmp(s, "sliding_attention");
            n++;
        }
        if (st == HG_OK && (!cJSON_IsArray(types) || n != L))
            st = hg_fail(HG_ERR_FORMAT, "%s: field 'layer_types' must list num_hidden_layers = %d types", c->file, L);
    }
    int any = 0;
    for (int l = 0; l < L; l++) any |= slides[l];
    if (st == HG_OK && use && window > 0 && any) {
        /* the pattern: sliding from a first layer on, or all but every P-th */
        hg_config t = *cfg;
        t.sliding_window = window;
        int ok = 0;
        for (int P = 0; P <= L && !ok; P = P ? P + 1 : 2) {
            t.window_period = P, t.window_first_layer = 0;
            if (P == 0)
                while (t.window_first_layer < L && !slides[t.window_first_layer]) t.window_first_layer++;
            ok = 1;
            for (int l = 0; l < L && ok; l++) ok = !hg_layer_window(&t, l) == !slides[l];
        }
        if (ok) cfg->sliding_window = t.sliding_window, cfg->window_period = t.window_period,
                cfg->window_first_layer = t.window_first_layer;
        else st = hg_fail(HG_ERR_UNSUPPORTED, "%s: field 'layer_types': handgrad's windows slide in every layer from one "
                          "on, or in all but every P-th layer; this list is neither", c->file);
    }
    free(slides);
    return st;
}

/* Gemma's "gelu" is the tanh approximation too (transformers maps it so). */
static const char *const gemma_gelu_names[] = {"gelu", "gelu_new", "gelu_pytorch_tanh", "gelu_fast", NULL};

/* What Gemma and Gemma 2 add to the Llama fields: GeGLU, embeddings times sqrt(C), norm
 * weights stored as offsets from 1 (folded at load: hf.c), and for Gemma 2 the sandwich
 * block, the caps on the logits and on the attention scores, and a score scale that must
 * be handgrad's. */
static hg_status parse_gemma(hfc *c, hf_arch a, hg_config *cfg) {
    HG_TRY(need_string(c, "hidden_act", gemma_gelu_names, "Gemma's MLP is GeGLU with GELU's tanh approximation"));
    HG_TRY(need_string(c, "hidden_activation", a == HF_GEMMA ? gemma_gelu_names : gelu_tanh_names,
                       "Gemma's MLP is GeGLU with GELU's tanh approximation"));
    HG_TRY(need_bool(c, "use_bidirectional_attention", 0, "handgrad's attention is causal"));
    cfg->mlp = HG_MLP_GEGLU;
    cfg->embed_scale = (float)sqrt((double)cfg->d_model);
    if (a == HF_GEMMA) return HG_OK;
    cfg->block = HG_BLOCK_SANDWICH;
    HG_TRY(get_num(c, c->j, "final_logit_softcapping", 1e4, &cfg->logit_softcap));
    HG_TRY(get_num(c, c->j, "attn_logit_softcapping", 1e4, &cfg->attn_softcap));
    float scalar = 256.0f; /* transformers' default, as head_dim's */
    HG_TRY(get_num(c, c->j, "query_pre_attn_scalar", 1e6, &scalar));
    const int hs = hg_head_size(cfg); /* cfg is not validated yet */
    if (scalar != (float)hs)
        return hg_fail(HG_ERR_UNSUPPORTED, "%s: field 'query_pre_attn_scalar' = %g is not supported: handgrad scales "
                       "scores by 1/sqrt(head_dim), so it must equal head_dim = %d", c->file, scalar, hs);
    return HG_OK;
}

/* The rotated dims of a head from partial_rotary_factor, truncated as transformers does;
 * and the factor that gives rot back (rot / hs, or the next double up where the product
 * rounds below rot: 30 / 176 * 176 truncates to 29). */
static double partial_factor(int rot, int hs) {
    double f = (double)rot / hs;
    while ((int)(hs * f) < rot) f = nextafter(f, 2.0);
    return f;
}

static hg_status set_partial(hfc *c, hg_config *cfg, double partial) {
    const int hs = hg_head_size(cfg), rot = (int)(hs * partial); /* cfg is not validated yet */
    if (rot < 2)
        return hg_fail(HG_ERR_UNSUPPORTED, "%s: field 'partial_rotary_factor' = %g turns %d of a head's %d dims", c->file,
                       partial, rot, hs);
    cfg->rotary_dim = rot < hs ? rot : 0;
    return HG_OK;
}

/* The sizes every class but GPT-2 writes the same way; head_dim and max_position_embeddings
 * default to the class's values when absent. */
static hg_status parse_sizes(hfc *c, hg_config *cfg, int head_dim, int max_pos) {
    HG_TRY(get_int(c, "vocab_size", -1, &cfg->vocab_size));
    HG_TRY(get_int(c, "hidden_size", -1, &cfg->d_model));
    HG_TRY(get_int(c, "intermediate_size", -1, &cfg->d_ff));
    HG_TRY(get_int(c, "num_hidden_layers", -1, &cfg->n_layer));
    HG_TRY(get_int(c, "num_attention_heads", -1, &cfg->n_head));
    HG_TRY(get_int(c, "num_key_value_heads", cfg->n_head, &cfg->n_kv_head));
    HG_TRY(get_int(c, "head_dim", head_dim, &cfg->head_dim));
    return get_int(c, "max_position_embeddings", max_pos, &cfg->max_seq_len);
}

/* Phi-2: the parallel block of LayerNorm, attention and a GELU MLP, biases on every
 * linear (the output layer's too), a partial rotary embedding (half a head by default). */
static hg_status parse_phi(hfc *c, hg_config *cfg) {
    int tied = 0;
    HG_TRY(parse_sizes(c, cfg, 0, 2048));
    cfg->norm_eps = 1e-5f;
    HG_TRY(get_num(c, c->j, "layer_norm_eps", 1.0, &cfg->norm_eps));
    double partial = 0.5; /* PhiConfig's default */
    HG_TRY(parse_rope(c, cfg, 10000.0f, &partial));
    HG_TRY(get_bool(c, "tie_word_embeddings", 0, &tied));
    HG_TRY(need_string(c, "hidden_act", gelu_tanh_names, "handgrad computes GELU's tanh approximation (gelu_new)"));
    HG_TRY(no_dropout(c, "attention_dropout"));
    HG_TRY(need_bool(c, "qk_layernorm", 0, "handgrad's q/k norm is an RMSNorm of each head, Phi's a LayerNorm"));
    cfg->norm = HG_NORM_LAYERNORM;
    cfg->position = HG_POS_ROPE;
    cfg->mlp = HG_MLP_GELU;
    cfg->block = HG_BLOCK_PARALLEL;
    cfg->lm_head_bias = 1;
    cfg->untied = !tied;
    return set_partial(c, cfg, partial);
}

static hg_status parse_llama(hfc *c, hf_arch a, hg_config *cfg) {
    int tied = 0, attn_bias = 0, mlp_bias = 0;
    const int gemma = a == HF_GEMMA || a == HF_GEMMA2;
    HG_TRY(parse_sizes(c, cfg, gemma ? 256 : 0,
                       a == HF_LLAMA || a == HF_OLMO2 ? 2048
                       : a == HF_MISTRAL             ? 131072
                       : gemma                       ? 8192
                       : a == HF_PHI3                ? 4096
                                                     : 32768));
    cfg->norm_eps = a == HF_PHI3 || a == HF_OLMO2 ? 1e-5f : 1e-6f;
    HG_TRY(get_num(c, c->j, "rms_norm_eps", 1.0, &cfg->norm_eps));
    double partial = 1.0;
    HG_TRY(parse_rope(c, cfg, 10000.0f, a == HF_PHI3 ? &partial : NULL));
    HG_TRY(get_bool(c, "tie_word_embeddings", gemma, &tied));
    if (gemma) HG_TRY(parse_gemma(c, a, cfg));
    else HG_TRY(need_string(c, "hidden_act", silu_names, "handgrad's SwiGLU gates with SiLU"));
    HG_TRY(no_dropout(c, "attention_dropout"));
    if (a == HF_LLAMA || a == HF_QWEN3 || a == HF_OLMO2 || gemma) HG_TRY(get_bool(c, "attention_bias", 0, &attn_bias));
    if (a == HF_LLAMA) HG_TRY(get_bool(c, "mlp_bias", 0, &mlp_bias));
    if (a == HF_PHI3) {
        key(c, "original_max_position_embeddings"); /* read by longrope scaling only, which is refused */
        HG_TRY(set_partial(c, cfg, partial));
    }
    HG_TRY(parse_window(c, a, cfg));
    cfg->norm = HG_NORM_RMSNORM;
    cfg->position = HG_POS_ROPE;
    if (!gemma) cfg->mlp = HG_MLP_SWIGLU;
    cfg->untied = !tied;
    cfg->qk_norm = a == HF_QWEN3 || a == HF_OLMO2;
    if (a == HF_OLMO2) cfg->block = HG_BLOCK_POSTNORM, cfg->qk_norm_whole = 1; /* its q_norm spans all heads */
    cfg->omit = HG_OMIT_NORM_BIAS | (mlp_bias ? 0 : HG_OMIT_MLP_BIAS);
    if (a == HF_QWEN2) cfg->omit |= HG_OMIT_PROJ_BIAS; /* q, k, v have biases, o_proj none */
    else if (!attn_bias) cfg->omit |= HG_OMIT_QKV_BIAS | HG_OMIT_PROJ_BIAS;
    return HG_OK;
}

static hg_status parse_config(const char *name, const cJSON *j, hg_config *cfg, hf_arch *arch) {
    if (!cJSON_IsObject(j)) return hg_fail(HG_ERR_FORMAT, "%s: not a JSON object", name);
    hfc c = {.file = name, .j = j};
    const cJSON *mt = cJSON_GetObjectItemCaseSensitive(j, "model_type");
    hf_arch a = HF_NARCH;
    for (int i = 0; i < HF_NARCH && mt; i++)
        if (cJSON_IsString(mt) && !strcmp(mt->valuestring, archs[i].model_type)) a = (hf_arch)i;
    if (!mt) a = HF_GPT2; /* the oldest GPT-2 configs have no model_type */
    if (a == HF_NARCH)
        return hg_fail(HG_ERR_UNSUPPORTED, "%s: field 'model_type' = \"%.40s\" is not supported (" ARCH_LIST ")", name,
                       cJSON_IsString(mt) ? mt->valuestring : "(not a string)");
    const cJSON *classes = cJSON_GetObjectItemCaseSensitive(j, "architectures"), *it;
    cJSON_ArrayForEach(it, classes) {
        const char *s = cJSON_GetStringValue(it);
        if (!s || strcmp(s, archs[a].class_name))
            return hg_fail(HG_ERR_UNSUPPORTED, "%s: field 'architectures' names \"%.60s\"; a %s folder handgrad "
                           "reads holds %s", name, s ? s : "?", archs[a].model_type, archs[a].class_name);
    }
    memset(cfg, 0, sizeof *cfg);
    HG_TRY(a == HF_GPT2 ? parse_gpt2(&c, cfg) : a == HF_PHI ? parse_phi(&c, cfg) : parse_llama(&c, a, cfg));
    HG_TRY(all_known(&c));
    if (hg_config_validate(cfg) != HG_OK) {
        char why[512];
        snprintf(why, sizeof why, "%s", hg_last_error());
        return hg_fail(HG_ERR_UNSUPPORTED, "%s: %s (from the fields of a %s config)", name, why, archs[a].model_type);
    }
    if (arch) *arch = a;
    return HG_OK;
}

hg_status hf_config_parse(const char *name, const char *text, size_t len, hg_config *cfg, hf_arch *arch) {
    cJSON *j = cJSON_ParseWithLength(text, len);
    if (!j) return hg_fail(HG_ERR_FORMAT, "%s: not valid JSON", name);
    hg_status st = parse_config(name, j, cfg, arch);
    cJSON_Delete(j);
    return st;
}

hg_status hf_config_load(const char *path, hg_config *cfg, hf_arch *arch) {
    uint8_t *text;
    size_t len;
    HG_TRY(file_read_all(path, &text, &len));
    hg_status st = hf_config_parse(path, (const char *)text, len, cfg, arch);
    free(text);
    return st;
}

hg_status hg_hf_config_load(const char *path, hg_config *cfg) {
    if (!path || !cfg) return hg_fail(HG_ERR_INVALID, "hg_hf_config_load: NULL argument");
    return hf_config_load(path, cfg, NULL);
}

hg_status hg_hf_config_class(const char *path, const char **class_name) {
    if (!path || !class_name) return hg_fail(HG_ERR_INVALID, "hg_hf_config_class: NULL argument");
    hg_config cfg;
    hf_arch a;
    HG_TRY(hf_config_load(path, &cfg, &a));
    *class_name = hf_arch_class(a);
    return HG_OK;
}

/* ---- writing ---- */

/* Gemma's embedding scale: sqrt(hidden_size) in fp32. */
static float gemma_scale(const hg_config *c) { return (float)sqrt((double)c->d_model); }

const char *hf_arch_cannot(hf_arch a, const hg_config *c) {
    for (int s = 0; s < HG_SITES; s++)
        if (c->site_op[s][0]) return hg_site_field((hg_site)s); /* an op of one's own: no HF class has it */
    /* which layers slide: Gemma 2 lists them; Mistral and Phi-3 slide in all, Qwen2 and
     * Qwen3 from max_window_layers on; the others have no window */
    int slides = 0, all = 1, from = 1, seen = 0;
    for (int l = 0; l < c->n_layer; l++) {
        int w = hg_layer_window(c, l);
        slides |= w != 0, all &= w != 0, from &= !seen || w != 0, seen |= w != 0;
    }
    if (slides && a != HF_GEMMA2 &&
        !((a == HF_MISTRAL || a == HF_PHI3) && all) && !((a == HF_QWEN2 || a == HF_QWEN3) && from))
        return "sliding_window";
    const int gemma = a == HF_GEMMA || a == HF_GEMMA2;
    if (c->block != (a == HF_GEMMA2  ? HG_BLOCK_SANDWICH
                     : a == HF_OLMO2 ? HG_BLOCK_POSTNORM
                     : a == HF_PHI   ? HG_BLOCK_PARALLEL
                                     : HG_BLOCK_PRENORM))
        return "block";
    if (c->logit_softcap > 0 && a != HF_GEMMA2) return "logit_softcap";
    if (c->attn_softcap > 0 && a != HF_GEMMA2) return "attn_softcap";
    if (gemma ? c->embed_scale != gemma_scale(c) : c->embed_scale > 0) return "embed_scale";
    if (c->rotary_dim && a != HF_PHI3 && a != HF_PHI) return "rotary_dim";
    if (c->lm_head_bias != (a == HF_PHI)) return "lm_head_bias";
    gpt_dims d = gpt_dims_of(c);
    const unsigned qkv = c->omit & HG_OMIT_QKV_BIAS, proj = c->omit & HG_OMIT_PROJ_BIAS;
    if (a == HF_GPT2)
        return c->norm != HG_NORM_LAYERNORM      ? "norm"
               : c->position != HG_POS_LEARNED  ? "position"
               : c->mlp != HG_MLP_GELU          ? "mlp"
               : c->omit                        ? "a bias or norm weight omitted"
               : d.NKV != d.NH                  ? "n_kv_head"
               : d.QD != d.C                    ? "head_dim"
               : c->qk_norm                     ? "qk_norm"
                                                : NULL;
    if (a == HF_PHI)
        return c->norm != HG_NORM_LAYERNORM  ? "norm"
               : c->position != HG_POS_ROPE  ? "position"
               : c->mlp != HG_MLP_GELU       ? "mlp"
               : c->omit                     ? "a bias or norm weight omitted"
               : c->qk_norm                  ? "qk_norm"
                                             : NULL;
    if (c->norm != HG_NORM_RMSNORM) return "norm";
    if (c->position != HG_POS_ROPE) return "position";
    if (c->mlp != (gemma ? HG_MLP_GEGLU : HG_MLP_SWIGLU)) return "mlp";
    if (c->omit & HG_OMIT_NORM_WEIGHT) return "norm_weight";
    if (c->qk_norm != (a == HF_QWEN3 || a == HF_OLMO2)) return "qk_norm";
    if (c->qk_norm_whole != (a == HF_OLMO2)) return "qk_norm_whole";
    if (a == HF_QWEN2) return qkv ? "qkv_bias" : !proj ? "proj_bias" : !(c->omit & HG_OMIT_MLP_BIAS) ? "mlp_bias" : NULL;
    if (!qkv != !proj) return "qkv_bias and proj_bias (one attention_bias covers both)";
    if ((a == HF_MISTRAL || a == HF_PHI3) && !qkv) return "qkv_bias";
    if (a != HF_LLAMA && !(c->omit & HG_OMIT_MLP_BIAS)) return "mlp_bias";
    return NULL;
}

hf_arch hf_arch_default(const hg_config *c) {
    /* Phi-3 holds every Llama without biases: it is the default only for what Llama cannot
     * hold, a partial rotary embedding */
    static const hf_arch order[] = {HF_GPT2, HF_GEMMA2, HF_GEMMA, HF_PHI, HF_OLMO2, HF_QWEN3, HF_QWEN2};
    for (size_t i = 0; i < sizeof order / sizeof order[0]; i++)
        if (!hf_arch_cannot(order[i], c)) return order[i];
    if (c->rotary_dim && !hf_arch_cannot(HF_PHI3, c)) return HF_PHI3;
    return hf_arch_cannot(HF_LLAMA, c) && !hf_arch_cannot(HF_MISTRAL, c) ? HF_MISTRAL : HF_LLAMA; /* a window */
}

char *hf_config_json(const hg_config *cfg, hf_arch a, int bos, int eos, const char *dtype) {
    cJSON *j = cJSON_CreateObject();
    if (!j) return NULL;
    gpt_dims d = gpt_dims_of(cfg);
    cJSON *classes = cJSON_AddArrayToObject(j, "architectures");
    if (classes) cJSON_AddItemToArray(classes, cJSON_CreateString(archs[a].class_name));
    cJSON_AddStringToObject(j, "model_type", archs[a].model_type);
    cJSON_AddNumberToObject(j, "vocab_size", cfg->vocab_size);
    if (a == HF_GPT2) {
        cJSON_AddNumberToObject(j, "n_positions", cfg->max_seq_len);
        cJSON_AddNumberToObject(j, "n_embd", cfg->d_model);
        cJSON_AddNumberToObject(j, "n_layer", cfg->n_layer);
        cJSON_AddNumberToObject(j, "n_head", cfg->n_head);
        if (d.F == 4 * cfg->d_model) cJSON_AddNullToObject(j, "n_inner"); /* GPT-2's default: 4 n_embd */
        else cJSON_AddNumberToObject(j, "n_inner", cfg->d_ff);
        cJSON_AddStringToObject(j, "activation_function", "gelu_new");
        cJSON_AddNumberToObject(j, "layer_norm_epsilon", gpt_norm_eps(cfg));
        cJSON_AddNumberToObject(j, "resid_pdrop", cfg->dropout);
        cJSON_AddNumberToObject(j, "embd_pdrop", cfg->dropout);
        cJSON_AddNumberToObject(j, "attn_pdrop", 0.0);
        cJSON_AddBoolToObject(j, "scale_attn_weights", 1);
    } else {
        cJSON_AddNumberToObject(j, "hidden_size", cfg->d_model);
        cJSON_AddNumberToObject(j, "intermediate_size", d.F);
        cJSON_AddNumberToObject(j, "num_hidden_layers", cfg->n_layer);
        cJSON_AddNumberToObject(j, "num_attention_heads", d.NH);
        cJSON_AddNumberToObject(j, "num_key_value_heads", d.NKV);
        cJSON_AddNumberToObject(j, "head_dim", d.hs);
        cJSON_AddNumberToObject(j, "max_position_embeddings", cfg->max_seq_len);
        cJSON_AddNumberToObject(j, a == HF_PHI ? "layer_norm_eps" : "rms_norm_eps", gpt_norm_eps(cfg));
        cJSON_AddNumberToObject(j, "rope_theta", gpt_rope_theta(cfg));
        if (cfg->rope_scaling == HG_ROPE_LLAMA3) {
            cJSON *r = cJSON_AddObjectToObject(j, "rope_scaling");
            cJSON_AddStringToObject(r, "rope_type", "llama3");
            cJSON_AddNumberToObject(r, "factor", cfg->rope_factor);
            cJSON_AddNumberToObject(r, "low_freq_factor", cfg->rope_low_freq_factor);
            cJSON_AddNumberToObject(r, "high_freq_factor", cfg->rope_high_freq_factor);
            cJSON_AddNumberToObject(r, "original_max_position_embeddings", cfg->rope_original_max_len);
        } else {
            cJSON_AddNullToObject(j, "rope_scaling");
        }
        const int gemma = a == HF_GEMMA || a == HF_GEMMA2;
        cJSON_AddStringToObject(j, a == HF_GEMMA2 ? "hidden_activation" : "hidden_act",
                                gemma ? "gelu_pytorch_tanh" : a == HF_PHI ? "gelu_new" : "silu");
        cJSON_AddNumberToObject(j, "attention_dropout", 0.0);
        if (a == HF_LLAMA || a == HF_QWEN3 || a == HF_OLMO2 || gemma)
            cJSON_AddBoolToObject(j, "attention_bias", !(cfg->omit & HG_OMIT_QKV_BIAS));
        if (a == HF_LLAMA) cJSON_AddBoolToObject(j, "mlp_bias", !(cfg->omit & HG_OMIT_MLP_BIAS));
        /* the window (hf_arch_cannot has checked that the class can say which layers slide) */
        int window = 0;
        for (int l = 0; l < cfg->n_layer; l++) window = window ? window : hg_layer_window(cfg, l);
        if (a == HF_GEMMA2) { /* layer_types; with no window, one no sequence reaches */
            cJSON_AddNumberToObject(j, "sliding_window", window ? window : cfg->max_seq_len);
            cJSON *types = cJSON_AddArrayToObject(j, "layer_types");
            for (int l = 0; types && l < cfg->n_layer; l++)
                cJSON_AddItemToArray(types, cJSON_CreateString(hg_layer_window(cfg, l) ? "sliding_attention"
                                                                                        : "full_attention"));
            cJSON_AddNumberToObject(j, "query_pre_attn_scalar", d.hs);
            if (cfg->attn_softcap > 0) cJSON_AddNumberToObject(j, "attn_logit_softcapping", cfg->attn_softcap);
            else cJSON_AddNullToObject(j, "attn_logit_softcapping");
            if (cfg->logit_softcap > 0) cJSON_AddNumberToObject(j, "final_logit_softcapping", cfg->logit_softcap);
            else cJSON_AddNullToObject(j, "final_logit_softcapping");
        } else if (a != HF_LLAMA && a != HF_GEMMA && a != HF_OLMO2 && a != HF_PHI) {
            if (window) cJSON_AddNumberToObject(j, "sliding_window", window);
            else cJSON_AddNullToObject(j, "sliding_window");
        }
        if (a == HF_QWEN2 || a == HF_QWEN3) {
            cJSON_AddBoolToObject(j, "use_sliding_window", window > 0);
            int first = 0;
            while (window && first < cfg->n_layer && !hg_layer_window(cfg, first)) first++;
            if (window) cJSON_AddNumberToObject(j, "max_window_layers", first);
        }
        if (a == HF_PHI3) { /* pad_token_id: Phi3Config's default (32000) must be a row of the embedding */
            cJSON_AddNullToObject(j, "pad_token_id");
            cJSON_AddNumberToObject(j, "original_max_position_embeddings", cfg->max_seq_len);
        }
        if (a == HF_PHI3 || a == HF_PHI) cJSON_AddNumberToObject(j, "partial_rotary_factor", partial_factor(d.rot, d.hs));
        if (a == HF_PHI) cJSON_AddBoolToObject(j, "qk_layernorm", 0);
    }
    cJSON_AddBoolToObject(j, "tie_word_embeddings", !cfg->untied);
    /* null, not absent: transformers' classes default to ids of their own (GPT-2's 50256) */
    if (bos >= 0) cJSON_AddNumberToObject(j, "bos_token_id", bos);
    else cJSON_AddNullToObject(j, "bos_token_id");
    if (eos >= 0) cJSON_AddNumberToObject(j, "eos_token_id", eos);
    else cJSON_AddNullToObject(j, "eos_token_id");
    if (dtype) cJSON_AddStringToObject(j, "torch_dtype", dtype);
    char *s = cJSON_Print(j);
    cJSON_Delete(j);
    return s;
}

/* ---- token ids for generation ---- */

/* One id or a list of ids appended to ids[*n] (at most cap, duplicates dropped). */
static hg_status add_ids(const char *file, const char *k, const cJSON *v, int32_t *ids, int *n, int cap) {
    const cJSON *one = cJSON_IsArray(v) ? v->child : v;
    for (; one; one = cJSON_IsArray(v) ? one->next : NULL) {
        if (!cJSON_IsNumber(one) || one->valuedouble < 0 || one->valuedouble > INT32_MAX ||
            one->valuedouble != floor(one->valuedouble))
            return hg_fail(HG_ERR_FORMAT, "%s: field '%s' must be a token id or a list of them", file, k);
        int32_t id = (int32_t)one->valuedouble, dup = 0;
        for (int i = 0; i < *n; i++) dup |= ids[i] == id;
        if (dup) continue;
        if (*n == cap) return hg_fail(HG_ERR_FORMAT, "%s: field '%s' lists more than %d ids", file, k, cap);
        ids[(*n)++] = id;
    }
    return HG_OK;
}

hg_status hf_special_parse(const char *file, const char *text, size_t len, hg_hf_special *s) {
    cJSON *j = cJSON_ParseWithLength(text, len);
    if (!j) return hg_fail(HG_ERR_FORMAT, "%s: not valid JSON", file);
    hg_status st = cJSON_IsObject(j) ? HG_OK : hg_fail(HG_ERR_FORMAT, "%s: not a JSON object", file);
    const cJSON *eos = cJSON_GetObjectItemCaseSensitive(j, "eos_token_id");
    const cJSON *bos = cJSON_GetObjectItemCaseSensitive(j, "bos_token_id");
    if (st == HG_OK && eos && !cJSON_IsNull(eos) && s->n_eos == 0)
        st = add_ids(file, "eos_token_id", eos, s->eos, &s->n_eos, HG_HF_MAX_EOS);
    if (st == HG_OK && bos && !cJSON_IsNull(bos) && s->bos < 0) {
        int n = 0;
        st = cJSON_IsArray(bos) ? hg_fail(HG_ERR_FORMAT, "%s: field 'bos_token_id' must be one token id", file)
                                : add_ids(file, "bos_token_id", bos, &s->bos, &n, 1);
    }
    cJSON_Delete(j);
    return st;
}

hg_status hg_hf_special_ids(const char *dir, hg_hf_special *out) {
    if (!dir || !out) return hg_fail(HG_ERR_INVALID, "hg_hf_special_ids: NULL argument");
    out->bos = -1;
    out->n_eos = 0;
    const char *files[] = {"generation_config.json", "config.json"};
    for (int i = 0; i < 2; i++) {
        size_t n = strlen(dir) + 32;
        char *path = malloc(n);
        if (!path) return hg_fail(HG_ERR_NOMEM, "out of memory");
        snprintf(path, n, "%s/%s", dir, files[i]);
        uint8_t *text = NULL;
        size_t len;
        hg_status st = HG_OK;
        if (access(path, F_OK) == 0) {
            st = file_read_all(path, &text, &len);
            if (st == HG_OK) st = hf_special_parse(path, (const char *)text, len, out);
        }
        free(text);
        free(path);
        HG_TRY(st);
    }
    return HG_OK;
}
