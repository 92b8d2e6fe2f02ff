/* Hugging Face GPT-2 directories: config.json to hg_config and back, the weights of
 * model.safetensors into a model, and the export of a model (and tokenizer) as such a
 * directory.
 *
 * handgrad's parameter table already uses GPT-2's names and Conv1D layouts (in, out), so
 * the mapping is by name: "transformer.h.0.attn.c_attn.weight" or "h.0.attn.c_attn.weight"
 * is parameter "h.0.attn.c_attn.weight". lm_head.weight is tied to wte.weight. The fields
 * and layouts are in docs/formats.md. */
#include "io/hf.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/error.h"
#include "data/fileio.h"
#include "io/atomic.h"
#include "io/safetensors.h"
#include "model/gpt.h"
#include "train/checkpoint.h"

#define PREFIX "transformer."

/* ---- config.json ---- */

/* An integer field; absent gives *out = dflt when dflt >= 0, else an error. */
static hg_status get_int(const char *name, const cJSON *j, const char *key, int dflt, int *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
    if (!v || cJSON_IsNull(v)) {
        if (dflt >= 0) {
            *out = dflt;
            return HG_OK;
        }
        return hg_fail(HG_ERR_FORMAT, "%s: field '%s' is missing", name, key);
    }
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || v->valuedouble < 0 || v->valuedouble > 1e9)
        return hg_fail(HG_ERR_FORMAT, "%s: field '%s' must be a non-negative integer", name, key);
    *out = (int)v->valuedouble;
    return HG_OK;
}

/* A boolean field that handgrad supports only with one value. */
static hg_status need_bool(const char *name, const cJSON *j, const char *key, int want, const char *why) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
    if (!v || cJSON_IsNull(v)) return HG_OK;
    if (!cJSON_IsBool(v)) return hg_fail(HG_ERR_FORMAT, "%s: field '%s' must be true or false", name, key);
    if (cJSON_IsTrue(v) != want)
        return hg_fail(HG_ERR_UNSUPPORTED, "%s: field '%s' = %s is not supported: %s", name, key,
                       want ? "false" : "true", why);
    return HG_OK;
}

/* Activations handgrad computes: GELU's tanh approximation under its three names. */
static const char *const gelu_tanh_names[] = {"gelu_new", "gelu_pytorch_tanh", "gelu_fast"};

static hg_status parse_config(const char *name, const cJSON *j, hg_config *cfg) {
    if (!cJSON_IsObject(j)) return hg_fail(HG_ERR_FORMAT, "%s: not a JSON object", name);
    const cJSON *mt = cJSON_GetObjectItemCaseSensitive(j, "model_type");
    if (mt && !(cJSON_IsString(mt) && !strcmp(mt->valuestring, "gpt2")))
        return hg_fail(HG_ERR_UNSUPPORTED, "%s: field 'model_type' must be \"gpt2\"", name);
    memset(cfg, 0, sizeof *cfg);
    int n_ctx = -1;
    HG_TRY(get_int(name, j, "n_ctx", 0, &n_ctx));
    HG_TRY(get_int(name, j, "vocab_size", -1, &cfg->vocab_size));
    HG_TRY(get_int(name, j, "n_positions", n_ctx > 0 ? n_ctx : -1, &cfg->max_seq_len));
    HG_TRY(get_int(name, j, "n_embd", -1, &cfg->d_model));
    HG_TRY(get_int(name, j, "n_layer", -1, &cfg->n_layer));
    HG_TRY(get_int(name, j, "n_head", -1, &cfg->n_head));
    HG_TRY(get_int(name, j, "n_inner", 0, &cfg->d_ff));
    const cJSON *act = cJSON_GetObjectItemCaseSensitive(j, "activation_function");
    if (act) {
        int ok = 0;
        for (size_t i = 0; i < sizeof gelu_tanh_names / sizeof gelu_tanh_names[0]; i++)
            ok |= cJSON_IsString(act) && !strcmp(act->valuestring, gelu_tanh_names[i]);
        if (!ok)
            return hg_fail(HG_ERR_UNSUPPORTED, "%s: field 'activation_function' = \"%.40s\" is not supported: handgrad "
                           "computes GELU's tanh approximation (gelu_new)", name,
                           cJSON_IsString(act) ? act->valuestring : "(not a string)");
    }
    const cJSON *eps = cJSON_GetObjectItemCaseSensitive(j, "layer_norm_epsilon");
    if (eps && !(cJSON_IsNumber(eps) && eps->valuedouble > 0.0 && eps->valuedouble <= 1.0))
        return hg_fail(HG_ERR_FORMAT, "%s: field 'layer_norm_epsilon' must be a number in (0, 1]", name);
    if (eps) cfg->norm_eps = (float)eps->valuedouble;
    HG_TRY(need_bool(name, j, "scale_attn_weights", 1, "handgrad scales scores by 1/sqrt(head size)"));
    HG_TRY(need_bool(name, j, "scale_attn_by_inverse_layer_idx", 0, "handgrad does not scale scores by layer"));
    HG_TRY(need_bool(name, j, "add_cross_attention", 0, "handgrad is decoder-only"));
    HG_TRY(need_bool(name, j, "tie_word_embeddings", 1, "handgrad ties lm_head to wte"));
    if (hg_config_validate(cfg) != HG_OK) {
        char why[512];
        snprintf(why, sizeof why, "%s", hg_last_error());
        return hg_fail(HG_ERR_UNSUPPORTED, "%s: %s (fields vocab_size, n_positions, n_embd, n_layer, n_head, n_inner)",
                       name, why);
    }
    return HG_OK;
}

hg_status hf_config_parse(const char *name, const char *text, size_t len, hg_config *cfg) {
    cJSON *j = cJSON_ParseWithLength(text, len);
    if (!j) return hg_fail(HG_ERR_FORMAT, "%s: not valid JSON", name);
    hg_status st = parse_config(name, j, cfg);
    cJSON_Delete(j);
    return st;
}

hg_status hg_hf_config_load(const char *path, hg_config *cfg) {
    if (!path || !cfg) return hg_fail(HG_ERR_INVALID, "hg_hf_config_load: NULL argument");
    uint8_t *text;
    size_t len;
    HG_TRY(file_read_all(path, &text, &len));
    hg_status st = hf_config_parse(path, (const char *)text, len, cfg);
    free(text);
    return st;
}

char *hf_config_json(const hg_config *cfg, int eot) {
    cJSON *j = cJSON_CreateObject();
    if (!j) return NULL;
    cJSON *arch = cJSON_AddArrayToObject(j, "architectures");
    if (arch) cJSON_AddItemToArray(arch, cJSON_CreateString("GPT2LMHeadModel"));
    cJSON_AddStringToObject(j, "model_type", "gpt2");
    cJSON_AddNumberToObject(j, "vocab_size", cfg->vocab_size);
    cJSON_AddNumberToObject(j, "n_positions", cfg->max_seq_len);
    cJSON_AddNumberToObject(j, "n_embd", cfg->d_model);
    cJSON_AddNumberToObject(j, "n_layer", cfg->n_layer);
    cJSON_AddNumberToObject(j, "n_head", cfg->n_head);
    if (gpt_dims_of(cfg).F == 4 * cfg->d_model) cJSON_AddNullToObject(j, "n_inner"); /* GPT-2's default: 4 n_embd */
    else cJSON_AddNumberToObject(j, "n_inner", cfg->d_ff);
    cJSON_AddStringToObject(j, "activation_function", "gelu_new");
    cJSON_AddNumberToObject(j, "layer_norm_epsilon", gpt_norm_eps(cfg));
    cJSON_AddNumberToObject(j, "resid_pdrop", cfg->dropout);
    cJSON_AddNumberToObject(j, "embd_pdrop", cfg->dropout);
    cJSON_AddNumberToObject(j, "attn_pdrop", 0.0);
    cJSON_AddBoolToObject(j, "scale_attn_weights", 1);
    cJSON_AddBoolToObject(j, "tie_word_embeddings", 1);
    if (eot >= 0) {
        cJSON_AddNumberToObject(j, "bos_token_id", eot);
        cJSON_AddNumberToObject(j, "eos_token_id", eot);
    }
    char *s = cJSON_Print(j);
    cJSON_Delete(j);
    return s;
}

/* ---- model.safetensors ---- */

/* GPT2Attention's causal-mask buffers, stored by older checkpoints: h.N.attn.bias and
 * h.N.attn.masked_bias. They hold no weights. */
static int is_mask_buffer(const char *n) {
    int layer, end = 0;
    char rest[16];
    if (sscanf(n, "h.%d.attn.%15s%n", &layer, rest, &end) != 2 || n[end]) return 0;
    return !strcmp(rest, "bias") || !strcmp(rest, "masked_bias");
}

static void shape_str(char *buf, size_t cap, const int64_t *shape, int ndim) {
    size_t at = (size_t)snprintf(buf, cap, "[");
    for (int d = 0; d < ndim && at < cap; d++) at += (size_t)snprintf(buf + at, cap - at, d ? ", %lld" : "%lld", (long long)shape[d]);
    if (at < cap) snprintf(buf + at, cap - at, "]");
}

/* The weights into `host`, the parameter buffer in host memory. */
static hg_status load_into(hg_model *m, const hg_st_file *f, const char *name, float *host) {
    const int np = m->params.count;
    char *seen = calloc((size_t)np, 1);
    if (!seen) return hg_fail(HG_ERR_NOMEM, "%s: out of memory", name);
    const hg_st_tensor *lm_head = NULL;
    hg_status st = HG_OK;
    for (int i = 0; i < hg_st_count(f) && st == HG_OK; i++) {
        const hg_st_tensor *t = hg_st_at(f, i);
        const char *n = strncmp(t->name, PREFIX, strlen(PREFIX)) ? t->name : t->name + strlen(PREFIX);
        if (!strcmp(n, "lm_head.weight")) {
            lm_head = t;
            continue;
        }
        if (is_mask_buffer(n)) continue;
        int k = hg_table_find(&m->params, n);
        if (k < 0) {
            st = hg_fail(HG_ERR_FORMAT, "%s: tensor '%s' is not a parameter of the configured model (n_layer=%d)", name,
                         t->name, m->cfg.n_layer);
            break;
        }
        if (seen[k]) {
            st = hg_fail(HG_ERR_FORMAT, "%s: tensor '%s' appears twice (with and without '" PREFIX "')", name, n);
            break;
        }
        seen[k] = 1;
        hg_param_info p;
        hg_param_at(m, k, &p);
        if (t->ndim != p.ndim || memcmp(t->shape, p.shape, sizeof(int64_t) * (size_t)p.ndim)) {
            char got[96], want[96];
            shape_str(got, sizeof got, t->shape, t->ndim);
            shape_str(want, sizeof want, p.shape, p.ndim);
            st = hg_fail(HG_ERR_FORMAT, "%s: tensor '%s' has shape %s but the config implies %s", name, t->name, got, want);
            break;
        }
        if (t->dtype != HG_ST_F32 && t->dtype != HG_ST_F16 && t->dtype != HG_ST_BF16 && t->dtype != HG_ST_F64) {
            st = hg_fail(HG_ERR_FORMAT, "%s: tensor '%s' has dtype %s; weights must be F32, F16, BF16 or F64", name,
                         t->name, hg_st_dtype_name(t->dtype));
            break;
        }
        st = hg_st_read_f32(f, t, gpt_param(m, host, k), p.numel);
    }
    for (int k = 0; k < np && st == HG_OK; k++)
        if (!seen[k]) st = hg_fail(HG_ERR_FORMAT, "%s: tensor '%s' is missing", name, m->params.specs[k].name);
    free(seen);
    if (st != HG_OK || !lm_head) return st;
    /* a tied head: equal to wte after conversion, element for element */
    hg_param_info wte;
    hg_param_at(m, gpt_pi(m, -1, R_WTE), &wte);
    if (lm_head->ndim != 2 || lm_head->shape[0] != wte.shape[0] || lm_head->shape[1] != wte.shape[1])
        return hg_fail(HG_ERR_FORMAT, "%s: lm_head.weight's shape differs from wte.weight's", name);
    float *head = malloc(sizeof(float) * (size_t)wte.numel);
    if (!head) return hg_fail(HG_ERR_NOMEM, "%s: out of memory", name);
    st = hg_st_read_f32(f, lm_head, head, wte.numel);
    if (st == HG_OK && memcmp(head, gpt_param(m, host, gpt_pi(m, -1, R_WTE)), sizeof(float) * (size_t)wte.numel))
        st = hg_fail(HG_ERR_UNSUPPORTED, "%s: lm_head.weight differs from wte.weight; handgrad ties the two", name);
    free(head);
    return st;
}

hg_status hf_load_weights(hg_model *m, const hg_st_file *f, const char *name) {
    float *host = gpt_host_begin(m, m->param);
    if (!host) return hg_fail(HG_ERR_NOMEM, "%s: out of memory staging the weights", name);
    hg_status st = load_into(m, f, name, host);
    if (st == HG_OK) return gpt_host_end(m, m->param, host);
    gpt_host_free(m->param, host);
    return st;
}

hg_status hg_model_load_hf(hg_model **out, const char *dir, const hg_options *opt) {
    if (!out || !dir || !opt) return hg_fail(HG_ERR_INVALID, "hg_model_load_hf: NULL argument");
    *out = NULL;
    size_t n = strlen(dir) + 32;
    char *path = malloc(n);
    if (!path) return hg_fail(HG_ERR_NOMEM, "out of memory");
    hg_config cfg;
    snprintf(path, n, "%s/config.json", dir);
    hg_status st = hg_hf_config_load(path, &cfg);
    hg_st_file *f = NULL;
    snprintf(path, n, "%s/model.safetensors", dir);
    if (st == HG_OK) st = hg_st_open(&f, path);
    hg_model *m = NULL;
    if (st == HG_OK) st = hg_model_create(&m, &cfg, opt);
    if (st == HG_OK) st = hf_load_weights(m, f, path);
    hg_st_close(f);
    free(path);
    if (st != HG_OK) {
        hg_model_free(m);
        return st;
    }
    *out = m;
    return HG_OK;
}

/* ---- export ---- */

static const char tokenizer_config[] =
    "{\n  \"tokenizer_class\": \"GPT2Tokenizer\",\n  \"model_max_length\": %d,\n  \"add_prefix_space\": false,\n"
    "  \"bos_token\": \"<|endoftext|>\",\n  \"eos_token\": \"<|endoftext|>\",\n  \"unk_token\": \"<|endoftext|>\"\n}\n";

/* The files of an export, written into the (new, empty) folder tmp. */
static hg_status write_files(const hg_model *m, const hg_tokenizer *tok, const char *tmp, char *path, size_t cap) {
    const int eot = tok ? hg_tokenizer_eot(tok) : -1;
    char *json = hf_config_json(&m->cfg, eot);
    if (!json) return hg_fail(HG_ERR_NOMEM, "out of memory");
    snprintf(path, cap, "%s/config.json", tmp);
    hg_status st = hg_write_file_atomic(path, json, strlen(json));
    free(json);
    HG_TRY(st);

    /* the names save_pretrained writes: "transformer." + the parameter's name */
    float *const bufs[] = {gpt_host_begin(m, m->param)};
    const char *const prefixes[] = {PREFIX}, *const meta[] = {"format", "pt"}; /* transformers checks it */
    snprintf(path, cap, "%s/model.safetensors", tmp);
    st = bufs[0] ? ckpt_write_tensors(m, path, bufs, prefixes, 1, meta, 1) : hg_fail(HG_ERR_NOMEM, "out of memory");
    gpt_host_free(m->param, bufs[0]);
    if (st != HG_OK || !tok) return st;

    HG_TRY(hg_tokenizer_save_hf(tok, tmp));
    char text[sizeof tokenizer_config + 16];
    snprintf(text, sizeof text, tokenizer_config, m->cfg.max_seq_len);
    snprintf(path, cap, "%s/tokenizer_config.json", tmp);
    return hg_write_file_atomic(path, text, strlen(text));
}

/* The first config field that GPT2LMHeadModel cannot express, or NULL. */
static const char *not_gpt2(const hg_config *c) {
    gpt_dims d = gpt_dims_of(c);
    return c->norm != HG_NORM_LAYERNORM           ? "norm"
           : c->position != HG_POS_LEARNED       ? "position"
           : c->mlp != HG_MLP_GELU               ? "mlp"
           : c->omit                             ? "a bias or norm weight omitted"
           : c->untied                           ? "tied (false)"
           : d.NKV != d.NH                       ? "n_kv_head"
           : d.QD != d.C                         ? "head_dim"
                                                 : NULL;
}

hg_status hg_model_save_hf(const hg_model *m, const hg_tokenizer *tok, const char *dir) {
    if (!m || !dir) return hg_fail(HG_ERR_INVALID, "hg_model_save_hf: NULL argument");
    const char *field = not_gpt2(&m->cfg);
    if (field)
        return hg_fail(HG_ERR_UNSUPPORTED, "export --hf writes GPT-2 folders only so far; this model's config differs "
                       "from GPT-2 in %s", field);
    if (tok && hg_tokenizer_vocab_size(tok) != m->cfg.vocab_size)
        return hg_fail(HG_ERR_INVALID, "the tokenizer has %d ids but the model's vocab_size is %d",
                       hg_tokenizer_vocab_size(tok), m->cfg.vocab_size);
    if (tok && hg_tokenizer_eot(tok) < 0)
        return hg_fail(HG_ERR_UNSUPPORTED, "the tokenizer has no <|endoftext|>, which GPT-2's tokenizer files need");
    struct stat sb;
    if (stat(dir, &sb) == 0) {
        DIR *d = S_ISDIR(sb.st_mode) ? opendir(dir) : NULL;
        int entries = 0;
        for (struct dirent *de; d && (de = readdir(d));) entries += strcmp(de->d_name, ".") && strcmp(de->d_name, "..");
        if (d) closedir(d);
        if (!d || entries) return hg_fail(HG_ERR_IO, "%s: exists and is not an empty folder", dir);
    }
    size_t cap = strlen(dir) + 64;
    char *tmp = malloc(cap), *path = malloc(cap);
    if (!tmp || !path) {
        free(tmp), free(path);
        return hg_fail(HG_ERR_NOMEM, "out of memory");
    }
    /* everything goes into DIR.tmp, which becomes DIR by one rename: a failure at any
     * point leaves no DIR (or the empty one that was there) */
    snprintf(tmp, cap, "%s.tmp", dir);
    hg_remove_dir(tmp);
    hg_status st = mkdir(tmp, 0777) == 0 ? HG_OK : hg_fail(HG_ERR_IO, "%s: cannot create: %s", tmp, strerror(errno));
    if (st == HG_OK) st = write_files(m, tok, tmp, path, cap);
    if (st == HG_OK && rename(tmp, dir) != 0)
        st = hg_fail(HG_ERR_IO, "%s: cannot rename %s into place: %s", dir, tmp, strerror(errno));
    if (st == HG_OK) {
        snprintf(path, cap, "%s/..", dir);
        st = hg_fsync_dir(path);
    } else {
        hg_remove_dir(tmp);
    }
    free(tmp), free(path);
    return st;
}
