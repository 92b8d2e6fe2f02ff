/* PEFT LoRA folders (adapter_config.json, adapter_model.safetensors) in and out, the
 * PEFT module names of a model's LoRA groups, and the merge of adapters into the base.
 *
 * An adapter of module j of LoRA group g in block l is handgrad's "h.{l}.<layer>.lora_A.{j}"
 * and "...lora_B.{j}" (model/gpt.c) and PEFT's "base_model.model.<module>.lora_A.weight"
 * and "...lora_B.weight", where <module> is the Hugging Face name of part j of the
 * layer's weight in the model's class (io/hf.c's recipes: "model.layers.{l}.self_attn.q_proj",
 * GPT-2's "transformer.h.{l}.attn.c_attn"). Shapes are PEFT's: A (r, in), B (out, r). */
#include <cjson/cJSON.h>
#include <fnmatch.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "data/fileio.h"
#include "io/atomic.h"
#include "io/hf.h"
#include "model/gpt.h"

#define PEFT_PREFIX "base_model.model."

/* The class whose names a model's adapters take: the one it was loaded as, else its
 * config's default. */
static hf_arch arch_of(const hg_model *m) { return m->hf_arch >= 0 ? (hf_arch)m->hf_arch : hf_arch_default(&m->cfg); }

static hg_status arch_named(const hg_config *cfg, const char *hf_class, hf_arch *a) {
    if (!hf_class) {
        *a = hf_arch_default(cfg);
        return HG_OK;
    }
    return hf_arch_parse(hf_class, a);
}

/* ---- target modules ---- */

/* 1 when PEFT's target t names module `full` ("model.layers.0.self_attn.q_proj"): the
 * whole name, or its last components. */
static int targets_module(const char *t, const char *full) {
    size_t n = strlen(full), k = strlen(t);
    return !strcmp(t, full) || (n > k && full[n - k - 1] == '.' && !strcmp(full + n - k, t));
}

hg_status hg_hf_lora_targets(const hg_config *cfg, const char *hf_class, const char *targets, hg_lora *lora) {
    if (!cfg || !targets || !lora) return hg_fail(HG_ERR_INVALID, "hg_hf_lora_targets: NULL argument");
    hf_arch a;
    HG_TRY(arch_named(cfg, hf_class, &a));
    hg_model *m;
    HG_TRY(gpt_names_model(cfg, NULL, &m));
    char names[HG_LORA_GROUPS][3][112], all[1024] = "";
    int parts[HG_LORA_GROUPS];
    for (int g = 0; g < HG_LORA_GROUPS; g++) {
        parts[g] = hf_lora_modules(m, a, (hg_lora_group)g, 0, names[g]);
        lora->split[g] = parts[g] > 0 ? parts[g] : 1;
        lora->targets[g] = 0;
        for (int j = 0; j < parts[g]; j++) {
            const char *short_name = strrchr(names[g][j], '.') ? strrchr(names[g][j], '.') + 1 : names[g][j];
            size_t at = strlen(all);
            if (!strstr(all, short_name) && at + 64 < sizeof all)
                snprintf(all + at, sizeof all - at, "%s%.60s", at ? ", " : "", short_name);
        }
    }
    gpt_names_free(m);
    char buf[1024];
    if (strlen(targets) >= sizeof buf) return hg_fail(HG_ERR_INVALID, "targets: the list is too long");
    snprintf(buf, sizeof buf, "%s", targets);
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        int hit = 0;
        for (int g = 0; g < HG_LORA_GROUPS; g++)
            for (int j = 0; j < parts[g]; j++)
                if (targets_module(t, names[g][j])) lora->targets[g] |= 1u << j, hit = 1;
        if (!hit)
            return hg_fail(HG_ERR_INVALID, "targets: '%s' names no linear layer of %s (its layers: %s)", t,
                           hf_arch_class(a), all);
    }
    return HG_OK;
}

hg_status hg_hf_freeze_names(const hg_config *cfg, const char *hf_class, const char *globs, char *out, size_t cap) {
    if (!cfg || !globs || !out || !cap) return hg_fail(HG_ERR_INVALID, "hg_hf_freeze_names: NULL argument");
    hf_arch a;
    HG_TRY(arch_named(cfg, hf_class, &a));
    hg_model *m;
    HG_TRY(gpt_names_model(cfg, NULL, &m));
    char buf[4096];
    size_t at = 0;
    out[0] = 0;
    hg_status st = strlen(globs) < sizeof buf ? HG_OK : hg_fail(HG_ERR_INVALID, "freeze: the list is too long");
    snprintf(buf, sizeof buf, "%s", globs);
    for (char *save = NULL, *g = strtok_r(buf, ",", &save); st == HG_OK && g; g = strtok_r(NULL, ",", &save)) {
        int hit = !strcmp(g, "all");
        if (hit) { /* the library's own word for every tensor */
            if (at + 5 > cap) st = hg_fail(HG_ERR_INVALID, "freeze: the names do not fit %zu bytes", cap);
            else at += (size_t)snprintf(out + at, cap - at, "%sall", at ? "," : "");
            continue;
        }
        for (int k = 0; st == HG_OK && k < m->params.count; k++) {
            const char *own = m->params.specs[k].name;
            char names[3][112];
            int n = hf_param_names(m, a, k, names), in = -1, out_of = -1;
            for (int i = 0; i < n; i++) {
                if (!fnmatch(g, names[i], 0)) in = in < 0 ? i : in;
                else out_of = out_of < 0 ? i : out_of;
            }
            if (in >= 0 && out_of >= 0)
                st = hg_fail(HG_ERR_INVALID, "freeze: '%s' matches %s but not %s, which handgrad holds as one tensor "
                             "(%s): name them all", g, names[in], names[out_of], own);
            else if (in >= 0 || !fnmatch(g, own, 0)) {
                hit = 1;
                if (at + strlen(own) + 2 > cap) st = hg_fail(HG_ERR_INVALID, "freeze: the names do not fit %zu bytes", cap);
                else at += (size_t)snprintf(out + at, cap - at, "%s%s", at ? "," : "", own);
            }
        }
        if (st == HG_OK && !hit)
            st = hg_fail(HG_ERR_INVALID, "freeze: '%s' matches no tensor of %s (e.g. %s)", g, hf_arch_class(a),
                         a == HF_GPT2 ? "transformer.h.0.mlp.c_fc.weight" : "model.layers.0.mlp.up_proj.weight");
    }
    gpt_names_free(m);
    return st;
}

/* ---- adapter_config.json ---- */

/* Keys of adapter_config.json that handgrad reads, that change nothing handgrad computes
 * whatever their value, and that must hold their default (else the adapter is not one
 * handgrad computes, and is refused naming the key). */
static const char *const read_keys[] = {"peft_type", "r", "lora_alpha", "lora_dropout", "target_modules", "use_rslora",
                                        "init_lora_weights", "bias", "fan_in_fan_out", "base_model_name_or_path",
                                        "task_type", NULL};
static const char *const inert_keys[] = {"peft_version", "revision", "inference_mode", "auto_mapping", "megatron_core",
                                         "qalora_group_size", "runtime_config", NULL};
static const char *const default_keys[] = {
    "exclude_modules", "modules_to_save", "layers_to_transform", "layers_pattern", "rank_pattern", "alpha_pattern",
    "megatron_config", "trainable_token_indices", "loftq_config", "eva_config", "corda_config", "lora_ga_config",
    "use_dora", "velora_config", "alora_invocation_tokens", "use_qalora", "monteclora_config", "layer_replication",
    "lora_bias", "target_parameters", "use_bdlora", "arrow_config", "kasa_config", "ensure_weight_tying", NULL};

static int listed(const char *const *keys, const char *k) {
    for (int i = 0; keys[i]; i++)
        if (!strcmp(keys[i], k)) return 1;
    return 0;
}

/* null, false, an empty object or list. */
static int is_default(const cJSON *v) {
    return cJSON_IsNull(v) || cJSON_IsFalse(v) || ((cJSON_IsObject(v) || cJSON_IsArray(v)) && !v->child);
}

static hg_status config_parse(const char *file, const char *text, size_t len, hg_peft_config *out) {
    cJSON *o = cJSON_ParseWithLength(text, len);
    hg_status st = cJSON_IsObject(o) ? HG_OK : hg_fail(HG_ERR_FORMAT, "%s: not a JSON object", file);
    memset(out, 0, sizeof *out);
    for (const cJSON *it = o ? o->child : NULL; st == HG_OK && it; it = it->next) {
        const char *k = it->string;
        if (listed(default_keys, k) && !is_default(it))
            st = hg_fail(HG_ERR_UNSUPPORTED, "%s: %s is set; handgrad trains plain LoRA (no %s)", file, k, k);
        else if (!listed(read_keys, k) && !listed(inert_keys, k) && !listed(default_keys, k))
            st = hg_fail(HG_ERR_FORMAT, "%s: key '%s' is unknown (a newer PEFT's, or another adapter type)", file, k);
    }
#define GET(key) cJSON_GetObjectItemCaseSensitive(o, key)
    const cJSON *v;
    if (st == HG_OK && (!cJSON_IsString(v = GET("peft_type")) || strcmp(v->valuestring, "LORA")))
        st = hg_fail(HG_ERR_UNSUPPORTED, "%s: peft_type must be \"LORA\"", file);
    if (st == HG_OK && (!cJSON_IsNumber(v = GET("r")) || !(v->valuedouble >= 1 && v->valuedouble <= 65536) ||
                        v->valuedouble != floor(v->valuedouble)))
        st = hg_fail(HG_ERR_FORMAT, "%s: r must be an integer in [1, 65536]", file);
    if (st == HG_OK) out->lora.r = (int)v->valuedouble;
    if (st == HG_OK && (!cJSON_IsNumber(v = GET("lora_alpha")) || !(v->valuedouble > 0) || v->valuedouble > 1e30))
        st = hg_fail(HG_ERR_FORMAT, "%s: lora_alpha must be a number > 0", file);
    if (st == HG_OK) out->lora.alpha = (float)v->valuedouble;
    v = GET("lora_dropout");
    if (st == HG_OK && v && !cJSON_IsNull(v) && (!cJSON_IsNumber(v) || !(v->valuedouble >= 0 && v->valuedouble < 1)))
        st = hg_fail(HG_ERR_FORMAT, "%s: lora_dropout must be a number in [0, 1)", file);
    if (st == HG_OK && cJSON_IsNumber(v)) out->lora.dropout = (float)v->valuedouble;
    v = GET("use_rslora");
    if (st == HG_OK && v && !cJSON_IsBool(v)) st = hg_fail(HG_ERR_FORMAT, "%s: use_rslora must be true or false", file);
    if (st == HG_OK) out->lora.rslora = cJSON_IsTrue(v);
    v = GET("bias");
    if (st == HG_OK && v && !cJSON_IsNull(v) && (!cJSON_IsString(v) || strcmp(v->valuestring, "none")))
        st = hg_fail(HG_ERR_UNSUPPORTED, "%s: bias must be \"none\" (handgrad trains no biases beside LoRA)", file);
    v = GET("init_lora_weights"); /* how A and B began: it matters for a new adapter only */
    if (st == HG_OK && v && !cJSON_IsBool(v) && !(cJSON_IsString(v) && !strcmp(v->valuestring, "gaussian")))
        st = hg_fail(HG_ERR_UNSUPPORTED, "%s: init_lora_weights must be true, false or \"gaussian\"", file);
    if (st == HG_OK && cJSON_IsString(v)) out->lora.init = HG_LORA_INIT_GAUSSIAN;
    v = GET("task_type");
    if (st == HG_OK && v && !cJSON_IsNull(v) && (!cJSON_IsString(v) || strcmp(v->valuestring, "CAUSAL_LM")))
        st = hg_fail(HG_ERR_UNSUPPORTED, "%s: task_type must be \"CAUSAL_LM\"", file);
    v = GET("base_model_name_or_path");
    if (st == HG_OK && cJSON_IsString(v)) snprintf(out->base_model, sizeof out->base_model, "%s", v->valuestring);
    v = GET("target_modules");
    if (st == HG_OK && cJSON_IsString(v)) { /* PEFT takes a string as a regular expression */
        if (strpbrk(v->valuestring, ".*+?[](){}|^$\\"))
            st = hg_fail(HG_ERR_UNSUPPORTED, "%s: target_modules is a regular expression; list the module names", file);
        else if (!*v->valuestring || strchr(v->valuestring, ','))
            st = hg_fail(HG_ERR_FORMAT, "%s: target_modules must name a module", file);
        else snprintf(out->targets, sizeof out->targets, "%s", v->valuestring);
    } else if (st == HG_OK && cJSON_IsArray(v) && v->child) {
        for (const cJSON *t = v->child; st == HG_OK && t; t = t->next) {
            size_t at = strlen(out->targets);
            if (!cJSON_IsString(t) || !*t->valuestring || strchr(t->valuestring, ','))
                st = hg_fail(HG_ERR_FORMAT, "%s: target_modules must list module names", file);
            else if (at + strlen(t->valuestring) + 2 > sizeof out->targets)
                st = hg_fail(HG_ERR_FORMAT, "%s: target_modules is too long", file);
            else snprintf(out->targets + at, sizeof out->targets - at, "%s%s", at ? "," : "", t->valuestring);
        }
    } else if (st == HG_OK) {
        st = hg_fail(HG_ERR_FORMAT, "%s: target_modules must be a list of module names", file);
    }
#undef GET
    cJSON_Delete(o);
    return st;
}

hg_status hg_peft_config_parse(const char *name, const char *text, size_t len, hg_peft_config *out) {
    if (!name || !text || !out) return hg_fail(HG_ERR_INVALID, "hg_peft_config_parse: NULL argument");
    return config_parse(name, text, len, out);
}

hg_status hg_peft_config_load(const char *dir, hg_peft_config *out) {
    if (!dir || !out) return hg_fail(HG_ERR_INVALID, "hg_peft_config_load: NULL argument");
    char path[4096];
    snprintf(path, sizeof path, "%s/adapter_config.json", dir);
    uint8_t *text;
    size_t len;
    HG_TRY(file_read_all(path, &text, &len));
    hg_status st = config_parse(path, (const char *)text, len, out);
    free(text);
    return st;
}

/* ---- adapter_model.safetensors ---- */

/* Calls fn for every adapter tensor of m: its table index and PEFT's name. */
typedef hg_status (*adapter_fn)(void *ctx, const hg_model *m, int k, const char *peft_name);
static hg_status each_adapter(const hg_model *m, adapter_fn fn, void *ctx) {
    if (m->opt.lora.r <= 0) return hg_fail(HG_ERR_STATE, "this model has no LoRA adapters (hg_options.lora)");
    const hf_arch a = arch_of(m);
    for (int l = 0; l < m->d.L; l++)
        for (int g = 0; g < HG_LORA_GROUPS; g++) {
            char names[3][112];
            const int parts = hf_lora_modules(m, a, (hg_lora_group)g, l, names);
            const gpt_lora_group lg = gpt_lora_group_of(&m->cfg, &m->opt.lora, (hg_lora_group)g);
            const int k = gpt_pi(m, l, gpt_lora_role((hg_lora_group)g));
            for (int j = 0; j < lg.n; j++) {
                if (lg.module[j] >= parts)
                    return hg_fail(HG_ERR_UNSUPPORTED, "%s stores no module %d of %s", hf_arch_class(a), lg.module[j],
                                   m->params.specs[k].name);
                char name[200];
                snprintf(name, sizeof name, PEFT_PREFIX "%s.lora_A.weight", names[lg.module[j]]);
                HG_TRY(fn(ctx, m, k + 2 * j, name));
                snprintf(name, sizeof name, PEFT_PREFIX "%s.lora_B.weight", names[lg.module[j]]);
                HG_TRY(fn(ctx, m, k + 2 * j + 1, name));
            }
        }
    return HG_OK;
}

typedef struct load_ctx {
    const char *file;
    hf_tensors *t;
    float *host;  /* NULL: check only */
    char (*names)[200]; /* the check's: each adapter's name, to find a tensor that is none */
    int used;
} load_ctx;

static hg_status load_adapter(void *ctx, const hg_model *m, int k, const char *name) {
    load_ctx *c = ctx;
    const hg_tensor_spec *s = &m->params.specs[k];
    const hg_st_tensor *t = hf_tensors_find(c->t, name);
    if (!t) return hg_fail(HG_ERR_FORMAT, "%s: tensor '%s' is missing", c->file, name);
    if (t->dtype != HG_ST_F32 && t->dtype != HG_ST_F16 && t->dtype != HG_ST_BF16 && t->dtype != HG_ST_F64)
        return hg_fail(HG_ERR_FORMAT, "%s: tensor '%s' has dtype %s; adapters must be F32, F16, BF16 or F64", c->file,
                       name, hg_st_dtype_name(t->dtype));
    if (t->ndim != 2 || t->shape[0] != s->shape[0] || t->shape[1] != s->shape[1])
        return hg_fail(HG_ERR_FORMAT, "%s: tensor '%s' has shape [%lld, %lld] but the model needs [%lld, %lld] (r = %d)",
                       c->file, name, (long long)(t->ndim > 0 ? t->shape[0] : 0), (long long)(t->ndim > 1 ? t->shape[1] : 0),
                       (long long)s->shape[0], (long long)s->shape[1], m->opt.lora.r);
    if (c->host) {
        hg_st_convert_f32(t, 0, t->numel, gpt_param(m, c->host, k));
        return HG_OK;
    }
    double v;
    int64_t bad = hg_st_find_nonfinite(t, &v, m->threads > 0 ? m->threads : 1);
    if (bad >= 0)
        return hg_fail(HG_ERR_FORMAT, "%s: tensor '%s' holds %g at element %lld; adapters must be finite", c->file, name,
                       v, (long long)bad);
    snprintf(c->names[c->used++], sizeof c->names[0], "%s", name);
    return HG_OK;
}

/* A tensor of the file that is none of the model's adapters, or NULL. */
static const char *stranger(const load_ctx *c) {
    for (int i = 0; i < hf_tensors_count(c->t); i++) {
        const char *n = hf_tensors_at(c->t, i)->name;
        int known = 0;
        for (int k = 0; k < c->used && !known; k++) known = !strcmp(n, c->names[k]);
        if (!known) return n;
    }
    return NULL;
}

hg_status hg_peft_load(hg_model *m, const char *dir) {
    if (!m || !dir) return hg_fail(HG_ERR_INVALID, "hg_peft_load: NULL argument");
    char path[4096];
    snprintf(path, sizeof path, "%s/adapter_model.safetensors", dir);
    hf_tensors *t;
    HG_TRY(hf_tensors_open_file(&t, path));
    load_ctx c = {path, t, NULL, malloc(sizeof *c.names * (size_t)(m->params.count + 1)), 0};
    hg_status st = c.names ? each_adapter(m, load_adapter, &c) : hg_fail(HG_ERR_NOMEM, "out of memory");
    const char *extra = st == HG_OK ? stranger(&c) : NULL; /* every tensor checked before any is written */
    if (extra)
        st = hg_fail(HG_ERR_FORMAT, "%s: tensor '%s' is not an adapter of this model (r = %d; its target_modules or "
                     "base model differ?)", path, extra, m->opt.lora.r);
    float *host = st == HG_OK ? gpt_host_begin(m, m->param) : NULL;
    if (st == HG_OK && !host) st = hg_fail(HG_ERR_NOMEM, "out of memory staging the adapters");
    if (st == HG_OK) {
        c.host = host;
        st = each_adapter(m, load_adapter, &c);
        if (st == HG_OK) st = gpt_host_end(m, m->param, host);
        else gpt_host_free(m->param, host);
    }
    free(c.names);
    hf_tensors_close(t);
    return st;
}

/* ---- out ---- */

typedef struct save_ctx {
    const hg_model *m;
    float *host;
    hg_st_entry *e;
    char (*names)[200];
    int n;
    const char *base;
} save_ctx;

static hg_status save_adapter(void *ctx, const hg_model *m, int k, const char *name) {
    save_ctx *c = ctx;
    const hg_tensor_spec *s = &m->params.specs[k];
    snprintf(c->names[c->n], sizeof c->names[0], "%s", name);
    c->e[c->n] = (hg_st_entry){.name = c->names[c->n], .dtype = HG_ST_F32, .ndim = 2,
                               .shape = {s->shape[0], s->shape[1]}, .data = gpt_param(m, c->host, k)};
    c->n++;
    return HG_OK;
}

/* adapter_config.json as PEFT writes it, with the module names of the model's class. */
static char *config_json(const hg_model *m, const char *base) {
    const hg_lora *lo = &m->opt.lora;
    const hf_arch a = arch_of(m);
    cJSON *o = cJSON_CreateObject(), *targets = cJSON_AddArrayToObject(o, "target_modules");
    for (int g = 0; g < HG_LORA_GROUPS; g++) {
        char names[3][112];
        const int parts = hf_lora_modules(m, a, (hg_lora_group)g, 0, names);
        const gpt_lora_group lg = gpt_lora_group_of(&m->cfg, lo, (hg_lora_group)g);
        for (int j = 0; j < lg.n && lg.module[j] < parts; j++) {
            const char *dot = strrchr(names[lg.module[j]], '.'), *short_name = dot ? dot + 1 : names[lg.module[j]];
            int seen = 0;
            for (const cJSON *t = targets->child; t && !seen; t = t->next) seen = !strcmp(t->valuestring, short_name);
            if (!seen) cJSON_AddItemToArray(targets, cJSON_CreateString(short_name));
        }
    }
    cJSON_AddStringToObject(o, "peft_type", "LORA");
    cJSON_AddStringToObject(o, "task_type", "CAUSAL_LM");
    cJSON_AddNumberToObject(o, "r", lo->r);
    cJSON_AddNumberToObject(o, "lora_alpha", lo->alpha);
    cJSON_AddNumberToObject(o, "lora_dropout", lo->dropout);
    cJSON_AddBoolToObject(o, "use_rslora", lo->rslora);
    if (lo->init == HG_LORA_INIT_GAUSSIAN) cJSON_AddStringToObject(o, "init_lora_weights", "gaussian");
    else cJSON_AddBoolToObject(o, "init_lora_weights", 1);
    cJSON_AddStringToObject(o, "bias", "none");
    cJSON_AddBoolToObject(o, "fan_in_fan_out", a == HF_GPT2); /* GPT-2's Conv1D layers store (in, out) */
    cJSON_AddBoolToObject(o, "use_dora", 0);
    cJSON_AddBoolToObject(o, "inference_mode", 1);
    if (base && *base) cJSON_AddStringToObject(o, "base_model_name_or_path", base);
    else cJSON_AddNullToObject(o, "base_model_name_or_path");
    cJSON_AddNullToObject(o, "modules_to_save");
    cJSON_AddItemToObject(o, "rank_pattern", cJSON_CreateObject());
    cJSON_AddItemToObject(o, "alpha_pattern", cJSON_CreateObject());
    char *text = cJSON_Print(o);
    cJSON_Delete(o);
    return text;
}

static hg_status save_fill(void *ctx, const char *tmp) {
    save_ctx *c = ctx;
    char path[4096];
    char *json = config_json(c->m, c->base);
    if (!json) return hg_fail(HG_ERR_NOMEM, "out of memory");
    snprintf(path, sizeof path, "%s/adapter_config.json", tmp);
    hg_status st = hg_write_file_atomic(path, json, strlen(json));
    free(json);
    snprintf(path, sizeof path, "%s/adapter_model.safetensors", tmp);
    const char *meta[] = {"format", "pt"};
    if (st == HG_OK) st = hg_st_write(path, c->e, c->n, meta, 1);
    return st;
}

hg_status hg_peft_save(const hg_model *m, const char *dir, const char *base_model) {
    if (!m || !dir) return hg_fail(HG_ERR_INVALID, "hg_peft_save: NULL argument");
    save_ctx c = {m, gpt_host_begin(m, m->param), calloc((size_t)m->params.count, sizeof(hg_st_entry)),
                  calloc((size_t)m->params.count, sizeof *c.names), 0, base_model};
    hg_status st = c.host && c.e && c.names ? each_adapter(m, save_adapter, &c) : hg_fail(HG_ERR_NOMEM, "out of memory");
    if (st == HG_OK) st = hf_folder_write(dir, save_fill, &c);
    if (c.host) gpt_host_free(m->param, c.host);
    free(c.e);
    free(c.names);
    return st;
}

/* ---- merge ---- */

hg_status hg_lora_merge(hg_model *m) {
    if (!m) return hg_fail(HG_ERR_INVALID, "hg_lora_merge: NULL argument");
    const hg_lora *lo = &m->opt.lora;
    if (lo->r <= 0) return hg_fail(HG_ERR_STATE, "this model has no LoRA adapters (hg_options.lora)");
    static const gpt_role weight[HG_LORA_GROUPS] = {R_QKV_W, R_PROJ_W, R_FC_W, R_FCPROJ_W};
    const double s = lo->rslora ? lo->alpha / sqrt((double)lo->r) : (double)lo->alpha / lo->r;
    float *host = gpt_host_begin(m, m->param);
    if (!host) return hg_fail(HG_ERR_NOMEM, "out of memory staging the parameters");
    const int r = lo->r;
    for (int l = 0; l < m->d.L; l++)
        for (int g = 0; g < HG_LORA_GROUPS; g++) {
            const gpt_lora_group lg = gpt_lora_group_of(&m->cfg, lo, (hg_lora_group)g);
            const int k = gpt_pi(m, l, gpt_lora_role((hg_lora_group)g));
            const int w = gpt_pi(m, l, weight[g]);
            float *W = lg.n ? gpt_param_get(m, host, w) : NULL; /* (K, OUT), input-major */
            if (lg.n && !W) {
                gpt_host_free(m->param, host);
                return hg_fail(HG_ERR_NOMEM, "out of memory staging %s", m->params.specs[w].name);
            }
            for (int j = 0; j < lg.n; j++) {
                float *A = gpt_param(m, host, k + 2 * j), *B = gpt_param(m, host, k + 2 * j + 1);
                /* W[:, c0 + c] += s (B A)^T: W[i][c0 + c] += s sum_q B[c][q] A[q][i], then B = 0 */
                #pragma omp parallel for schedule(static) num_threads(m->threads)
                for (int i = 0; i < lg.K; i++)
                    for (int c = 0; c < lg.cols[j]; c++) {
                        double acc = 0;
                        for (int q = 0; q < r; q++) acc += (double)B[(size_t)c * r + q] * A[(size_t)q * lg.K + i];
                        W[(size_t)i * lg.OUT + lg.c0[j] + c] += (float)(s * acc);
                    }
                memset(B, 0, sizeof(float) * (size_t)lg.cols[j] * r);
            }
            gpt_param_put(m, host, w, W, 1); /* rounded once, where the base is held in bf16 */
        }
    return gpt_host_end(m, m->param, host);
}
