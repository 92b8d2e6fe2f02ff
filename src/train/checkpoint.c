/* Checkpoints: weights and optimizer state as safetensors (metadata parsed here), and
 * the run folder's checkpoint folders: begin, commit, prune, find the newest. */
#define _GNU_SOURCE
#include "train/checkpoint.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/bf16.h"
#include "core/error.h"
#include "io/atomic.h"
#include "io/hf.h"
#include "model/gpt.h"

/* ---- metadata ---- */

/* Every config field by name (hg_config_field_name), each as its JSON kind
 * (gpt_config_field_json): a value is never guessed from its text. */
char *ckpt_config_json(const hg_config *c) {
    cJSON *o = cJSON_CreateObject();
    const char *name;
    char v[64];
    for (int i = 0; o && (name = hg_config_field_name(i, NULL)); i++) {
        if (hg_config_get(c, name, v, sizeof v) != HG_OK) break;
        char kind = gpt_config_field_json(name);
        if (kind == 'b') cJSON_AddBoolToObject(o, name, !strcmp(v, "true"));
        else if (kind == 'n') cJSON_AddNumberToObject(o, name, strtod(v, NULL));
        else cJSON_AddStringToObject(o, name, v);
    }
    char *out = o ? cJSON_PrintUnformatted(o) : NULL;
    cJSON_Delete(o);
    return out;
}

/* Each key must be a config field, its value of the field's JSON kind; fields a file
 * leaves out keep GPT-2's choice (so a version 1 config, which has the sizes and dropout
 * only, reads as the GPT-2 it was). */
hg_status ckpt_config_parse(const char *file, const char *json, hg_config *out) {
    cJSON *o = cJSON_Parse(json);
    hg_status s = cJSON_IsObject(o) ? HG_OK : hg_fail(HG_ERR_FORMAT, "%s: metadata 'config' is not a JSON object", file);
    hg_config c = {0};
    const cJSON *it = NULL;
    if (s == HG_OK) cJSON_ArrayForEach(it, o) {
        char v[64], kind = gpt_config_field_json(it->string);
        if (kind == 'n' && cJSON_IsNumber(it)) snprintf(v, sizeof v, "%.17g", it->valuedouble);
        else if (kind == 'b' && cJSON_IsBool(it)) snprintf(v, sizeof v, "%s", cJSON_IsTrue(it) ? "true" : "false");
        else if (kind == 's' && cJSON_IsString(it) && strlen(it->valuestring) < sizeof v)
            snprintf(v, sizeof v, "%s", it->valuestring);
        else if (!kind) {
            s = hg_fail(HG_ERR_FORMAT, "%s: metadata config has no field '%.64s' (a newer handgrad's checkpoint?)", file,
                        it->string);
            break;
        } else {
            s = hg_fail(HG_ERR_FORMAT, "%s: config field '%.64s' must be a JSON %s", file, it->string,
                        kind == 'n' ? "number" : kind == 'b' ? "boolean" : "string of at most 63 bytes");
            break;
        }
        if (hg_config_set(&c, it->string, v) != HG_OK) {
            char why[512];
            snprintf(why, sizeof why, "%s", hg_last_error());
            s = hg_fail(HG_ERR_FORMAT, "%s: bad config in metadata: %s", file, why);
            break;
        }
    }
    cJSON_Delete(o);
    if (s == HG_OK && hg_config_validate(&c) != HG_OK) {
        char why[512];
        snprintf(why, sizeof why, "%s", hg_last_error());
        s = hg_fail(HG_ERR_FORMAT, "%s: bad config in metadata: %s", file, why);
    }
    if (s == HG_OK) *out = c;
    return s;
}

hg_status ckpt_read_config(const hg_st_file *f, const char *file, const char *format, hg_config *out,
                           const char **arch) {
    const char *fmt = hg_st_metadata(f, "format"), *ver = hg_st_metadata(f, "version");
    const char *cfg = hg_st_metadata(f, "config"), *mark = hg_st_metadata(f, "handgrad");
    const char *cls = hg_st_metadata(f, "architecture");
    if (arch) *arch = NULL;
    if (!strcmp(format, CKPT_WEIGHTS_FORMAT) && fmt && !strcmp(fmt, "pt") && mark && !strcmp(mark, CKPT_HF_MARK)) {
        if (!ver || strcmp(ver, CKPT_HF_VERSION))
            return hg_fail(HG_ERR_FORMAT, "%s: checkpoint version '%.32s' is not supported (weights in Hugging Face "
                           "layout are version %s)", file, ver ? ver : "(none)", CKPT_HF_VERSION);
        hf_arch a;
        if (!cls || hf_arch_parse(cls, &a) != HG_OK)
            return hg_fail(HG_ERR_FORMAT, "%s: metadata 'architecture' is '%.64s', not a class handgrad writes", file,
                           cls ? cls : "(none)");
        if (arch) *arch = cls;
    } else {
        if (!fmt || strcmp(fmt, format))
            return hg_fail(HG_ERR_FORMAT, "%s: metadata 'format' is '%s', expected '%s' (not a handgrad checkpoint "
                           "file?)", file, fmt ? fmt : "(none)", format);
        if (!ver || (strcmp(ver, "1") && strcmp(ver, CKPT_VERSION)))
            return hg_fail(HG_ERR_FORMAT, "%s: checkpoint version '%.32s' is not supported (this build reads versions "
                           "1 and %s)", file, ver ? ver : "(none)", CKPT_VERSION);
    }
    if (!cfg) return hg_fail(HG_ERR_FORMAT, "%s: metadata has no 'config'", file);
    return ckpt_config_parse(file, cfg, out);
}

/* A metadata value as a decimal integer in [0, max]. */
static hg_status meta_u64(const hg_st_file *f, const char *file, const char *key, uint64_t max, uint64_t *out) {
    const char *v = hg_st_metadata(f, key);
    if (!v) return hg_fail(HG_ERR_FORMAT, "%s: metadata has no '%s'", file, key);
    uint64_t x = 0;
    const char *p = v;
    for (; *p >= '0' && *p <= '9'; p++) {
        uint64_t d = (uint64_t)(*p - '0');
        if (x > (UINT64_MAX - d) / 10) break; /* past UINT64_MAX: refused below */
        x = 10 * x + d;
    }
    if (p == v || *p || x > max)
        return hg_fail(HG_ERR_FORMAT, "%s: metadata '%s' = '%s' is not an integer in [0, %" PRIu64 "]", file, key, v, max);
    *out = x;
    return HG_OK;
}

hg_status ckpt_read_state(const hg_st_file *f, const char *file, ckpt_state *out) {
    uint64_t v[10];
    static const char *const keys[10] = {"step", "adam_t", "rng_counter", "tokens", "loader_epoch", "loader_batch",
                                         "batch", "seq_len", "world_size", "seed"};
    static const uint64_t max[10] = {INT64_MAX, INT64_MAX, UINT32_MAX, UINT64_MAX, UINT64_MAX, UINT64_MAX,
                                     1 << 20, 1 << 20, 1 << 20, UINT64_MAX};
    for (int i = 0; i < 10; i++) HG_TRY(meta_u64(f, file, keys[i], max[i], &v[i]));
    if (!v[6] || !v[7] || !v[8]) return hg_fail(HG_ERR_FORMAT, "%s: metadata batch, seq_len and world_size must be >= 1", file);
    ckpt_state s = {.train = {.step = (int64_t)v[0], .tokens = v[3], .epoch = v[4], .batch = v[5], .B = (int)v[6],
                              .T = (int)v[7], .world_size = (int)v[8], .seed = v[9]},
                    .adam_t = (int64_t)v[1], .rng_counter = v[2]};
    *out = s;
    return HG_OK;
}

/* ---- weights and optimizer files ---- */

/* Whether a file of tensors under prefix holds parameter i: the weights all of them,
 * the optimizer's moments ("m.", "v.") the trained ones. */
static int holds(const hg_model *m, const char *prefix, int i) { return !*prefix || gpt_trained(m, i); }

/* One entry per parameter of buffer buf (param, or under a prefix adam_m or adam_v, in
 * the model's state type) it holds, names prefixed; their count. */
static int entries(const hg_model *m, void *buf, const char *prefix, hg_st_entry *e, char (*names)[80]) {
    int n = 0;
    for (int i = 0; i < m->params.count; i++) {
        const hg_tensor_spec *s = &m->params.specs[i];
        if (!holds(m, prefix, i)) continue;
        snprintf(names[n], sizeof names[n], "%s%s", prefix, s->name);
        e[n].name = names[n];
        /* as the model holds it; host memory (gpt_host_begin) */
        const int bf16 = *prefix ? gpt_state_bytes(m) == 2 : gpt_held_bf16(m, i);
        e[n].dtype = bf16 ? HG_ST_BF16 : HG_ST_F32;
        e[n].ndim = s->ndim;
        for (int d = 0; d < s->ndim; d++) e[n].shape[d] = s->shape[d];
        e[n].data = *prefix ? gpt_moment_at(m, buf, s->offset / sizeof(float)) : gpt_param(m, buf, i);
        n++;
    }
    return n;
}

hg_status ckpt_write_tensors(const hg_model *m, const char *path, void *const *bufs, const char *const *prefixes,
                             int nbufs, const char *const *meta, int n_meta) {
    int n = m->params.count;
    hg_st_entry *e = calloc((size_t)n * nbufs, sizeof *e);
    char(*names)[80] = calloc((size_t)n * nbufs, sizeof *names);
    hg_status s = e && names ? HG_OK : hg_fail(HG_ERR_NOMEM, "%s: out of memory", path);
    int k = 0;
    for (int b = 0; s == HG_OK && b < nbufs; b++) k += entries(m, bufs[b], prefixes[b], e + k, names + k);
    if (s == HG_OK) s = hg_st_write(path, e, k, meta, n_meta);
    free(e);
    free(names);
    return s;
}

hg_status hg_model_save(const hg_model *m, const char *path) {
    if (!m || !path) return hg_fail(HG_ERR_INVALID, "hg_model_save: NULL argument");
    char *cfg = ckpt_config_json(&m->cfg);
    if (!cfg) return hg_fail(HG_ERR_NOMEM, "%s: out of memory", path);
    hf_arch a = HF_GPT2;
    hg_status s, held = hf_arch_for(&m->cfg, NULL, path, &a);
    hg_clear_error(); /* a refusal only chooses the layout */
    if (held == HG_OK) { /* the layout transformers loads */
        const char *meta[] = {"format", "pt", "handgrad", CKPT_HF_MARK, "version", CKPT_HF_VERSION, "config", cfg,
                              "architecture", hf_arch_class(a)};
        s = hf_save_weights(m, a, 0, path, 0, meta, 5);
    } else { /* handgrad's own: a site op, or a config no class holds */
        const char *meta[] = {"format", CKPT_WEIGHTS_FORMAT, "version", CKPT_VERSION, "config", cfg};
        void *bufs[] = {gpt_host_begin(m, m->param)};
        const char *prefixes[] = {""};
        s = bufs[0] ? ckpt_write_tensors(m, path, bufs, prefixes, 1, meta, 3) : hg_fail(HG_ERR_NOMEM, "%s: out of memory", path);
        gpt_host_free(m->param, bufs[0]);
    }
    free(cfg);
    return s;
}

hg_status hg_checkpoint_config(const char *path, hg_config *out) {
    if (!path || !out) return hg_fail(HG_ERR_INVALID, "hg_checkpoint_config: NULL argument");
    hg_st_file *f;
    HG_TRY(hg_st_open(&f, path));
    hg_status s = ckpt_read_config(f, path, CKPT_WEIGHTS_FORMAT, out, NULL);
    hg_st_close(f);
    return s;
}

/* The two configs describe the same model; the message names the first field that differs. */
static hg_status same_shape(const char *file, const hg_config *a, const hg_config *m) {
    char why[256];
    if (!gpt_same_architecture(a, m, why, sizeof why))
        return hg_fail(HG_ERR_INVALID, "%s: the checkpoint and the model differ: %s (checkpoint against model)", file, why);
    return HG_OK;
}

/* Every value of an F32 tensor is finite (and >= 0 with nonneg: AdamW's v), else the
 * first that is not, by index. A NaN loaded is a NaN in every weight a step later. */
static hg_status check_values(const hg_st_tensor *t, const char *file, const char *name, int nonneg, int threads) {
    double v = 0;
    int64_t j = hg_st_find_nonfinite(t, &v, threads);
    for (int64_t i = 0; nonneg && j < 0 && i < t->numel; i++) { /* F32 or BF16: checked before */
        float x = 0.0f;
        if (t->dtype == HG_ST_BF16) {
            uint16_t h;
            memcpy(&h, t->data + 2 * i, 2);
            x = bf16_to_f32(h);
        } else {
            memcpy(&x, t->data + 4 * i, 4); /* offsets in a file need not be 4-byte aligned */
        }
        if (x < 0.0f) j = i, v = x;
    }
    if (j >= 0)
        return hg_fail(HG_ERR_FORMAT, "%s: tensor '%s' holds %g at element %lld; a checkpoint's values must be %s",
                       file, name, v, (long long)j, nonneg ? "finite and >= 0 (AdamW's v)" : "finite");
    return HG_OK;
}

/* Checks that f holds the tensor prefix+name of every parameter, with the parameter's
 * shape and finite values (prefix "v.": >= 0 too), F32 (BF16 as the model holds it; a
 * moment either); with copy=1 copies them into buf (the parameters) instead. */
static hg_status read_tensors(hg_model *m, const hg_st_file *f, const char *file, const char *prefix, float *buf,
                              int copy) {
    char name[80];
    for (int i = 0; i < m->params.count; i++) {
        const hg_tensor_spec *s = &m->params.specs[i];
        if (!holds(m, prefix, i)) continue;
        snprintf(name, sizeof name, "%s%s", prefix, s->name);
        const hg_st_tensor *t = hg_st_find(f, name);
        if (!t) return hg_fail(HG_ERR_FORMAT, "%s: tensor '%s' is missing", file, name);
        const int bf16 = gpt_held_bf16(m, i) && !*prefix;
        if (t->dtype != (bf16 ? HG_ST_BF16 : HG_ST_F32) && !(*prefix && t->dtype == HG_ST_BF16))
            return hg_fail(HG_ERR_FORMAT, "%s: tensor '%s' is not %s%s", file, name,
                           bf16 ? "BF16" : *prefix ? "F32 or BF16" : "F32",
                           bf16 ? " (the model holds it in bf16: base_precision)" : "");
        int same = t->ndim == s->ndim;
        for (int d = 0; same && d < s->ndim; d++) same = t->shape[d] == s->shape[d];
        if (!same)
            return hg_fail(HG_ERR_FORMAT, "%s: tensor '%s' has shape (%lld%s) but the model needs (%lld%s%lld)", file, name,
                           (long long)(t->ndim ? t->shape[0] : 0), t->ndim > 1 ? ", ..." : "", (long long)s->shape[0],
                           s->ndim > 1 ? ", " : "", s->ndim > 1 ? (long long)s->shape[1] : 0LL);
        if (copy) m->be->ops->upload(m->be, gpt_param(m, buf, i), t->data, s->elem_size * (size_t)s->numel);
        else HG_TRY(check_values(t, file, name, !strcmp(prefix, "v."), m->threads));
    }
    return HG_OK;
}

/* After read_tensors found every parameter under each prefix: no tensor besides them
 * (the message names one that is not the model's). */
static hg_status no_extra(const hg_model *m, const hg_st_file *f, const char *file, const char *const *prefixes, int np) {
    int expected = 0;
    for (int p = 0; p < np; p++)
        for (int i = 0; i < m->params.count; i++) expected += holds(m, prefixes[p], i);
    if (hg_st_count(f) == expected) return HG_OK;
    for (int t = 0; t < hg_st_count(f); t++) {
        const char *name = hg_st_at(f, t)->name;
        int known = 0;
        for (int p = 0; p < np && !known; p++) {
            size_t k = strlen(prefixes[p]);
            for (int i = 0; !strncmp(name, prefixes[p], k) && i < m->params.count && !known; i++)
                known = holds(m, prefixes[p], i) && !strcmp(name + k, m->params.specs[i].name);
        }
        if (!known)
            return hg_fail(HG_ERR_FORMAT, "%s: tensor '%s' is not a parameter of this model (%d tensors, expected %d)",
                           file, name, hg_st_count(f), expected);
    }
    return HG_OK; /* not reached: duplicate names are refused when the file is parsed */
}

/* The config.json beside a model.safetensors in Hugging Face layout, when there is one,
 * must describe the same model as the weights' own config. */
static hg_status same_as_config_json(const char *path, const hg_config *weights) {
    const char *slash = strrchr(path, '/');
    if (strcmp(slash ? slash + 1 : path, "model.safetensors")) return HG_OK;
    size_t n = strlen(path) + 16;
    char *json = malloc(n);
    if (!json) return hg_fail(HG_ERR_NOMEM, "out of memory");
    snprintf(json, n, "%.*sconfig.json", slash ? (int)(slash - path + 1) : 0, path);
    hg_config c;
    char why[256];
    const int there = access(json, F_OK) == 0;
    hg_status s = there ? hf_config_load(json, &c, NULL) : HG_OK;
    if (s == HG_OK && there && !gpt_same_architecture(&c, weights, why, sizeof why))
        s = hg_fail(HG_ERR_FORMAT, "%s disagrees with %s: %s (config.json against the weights; docs/formats.md maps "
                    "the fields to config.json's keys)", json, path, why);
    free(json);
    return s;
}

hg_status hg_model_load(hg_model *m, const char *path) {
    if (!m || !path) return hg_fail(HG_ERR_INVALID, "hg_model_load: NULL argument");
    hg_st_file *f;
    HG_TRY(hg_st_open(&f, path));
    hg_config c;
    const char *arch = NULL;
    hg_status s = ckpt_read_config(f, path, CKPT_WEIGHTS_FORMAT, &c, &arch);
    if (s == HG_OK) s = same_shape(path, &c, &m->cfg);
    if (s == HG_OK && arch) { /* Hugging Face layout: the recipes of io/hf.c */
        hf_arch a;
        hf_tensors *t = NULL;
        hf_arch_parse(arch, &a); /* checked by ckpt_read_config */
        s = same_as_config_json(path, &c); /* hf_load_weights checks the values */
        if (s == HG_OK) s = hf_tensors_open_file(&t, path);
        if (s == HG_OK) s = hf_load_weights(m, a, t);
        hf_tensors_close(t);
    } else if (s == HG_OK) {
        s = read_tensors(m, f, path, "", m->param, 0);
        if (s == HG_OK) s = no_extra(m, f, path, (const char *const[]){""}, 1);
        if (s == HG_OK) s = read_tensors(m, f, path, "", m->param, 1);
        if (s == HG_OK) gpt_refresh_weights(m, 0, m->params.bytes / sizeof(float));
    }
    if (s == HG_OK) s = m->be->ops->sync(m->be);
    hg_st_close(f);
    return s;
}

hg_status hg_optimizer_save(const hg_model *m, const hg_train_state *st, const char *path) {
    if (!m || !st || !path) return hg_fail(HG_ERR_INVALID, "hg_optimizer_save: NULL argument");
    if (!m->opt.training) return hg_fail(HG_ERR_STATE, "this model was created with training=0: it has no optimizer state");
    if (m->opt.shards > 1)
        return hg_fail(HG_ERR_STATE, "this model holds 1/%d of the AdamW state (ZeRO-1): save it with hg_dist_optimizer_save",
                       m->opt.shards);
    void *mo = gpt_host_begin(m, m->adam_m), *vo = mo ? gpt_host_begin(m, m->adam_v) : NULL;
    hg_status s = vo ? ckpt_optimizer_write(m, st, path, mo, vo) : hg_fail(HG_ERR_NOMEM, "%s: out of memory", path);
    gpt_host_free(m->adam_m, mo);
    gpt_host_free(m->adam_v, vo);
    return s;
}

hg_status ckpt_optimizer_write(const hg_model *m, const hg_train_state *st, const char *path, void *mbuf, void *vbuf) {
    char *cfg = ckpt_config_json(&m->cfg);
    if (!cfg) return hg_fail(HG_ERR_NOMEM, "%s: out of memory", path);
    char v[10][24];
    snprintf(v[0], 24, "%" PRId64, st->step);
    snprintf(v[1], 24, "%" PRId64, m->adam_t);
    snprintf(v[2], 24, "%" PRIu32, m->rng_step);
    snprintf(v[3], 24, "%" PRIu64, st->tokens);
    snprintf(v[4], 24, "%" PRIu64, st->epoch);
    snprintf(v[5], 24, "%" PRIu64, st->batch);
    snprintf(v[6], 24, "%d", st->B);
    snprintf(v[7], 24, "%d", st->T);
    snprintf(v[8], 24, "%d", st->world_size);
    snprintf(v[9], 24, "%" PRIu64, st->seed);
    const char *meta[] = {"format", CKPT_OPTIMIZER_FORMAT, "version", CKPT_VERSION, "config", cfg,
                          "step", v[0], "adam_t", v[1], "rng_counter", v[2], "tokens", v[3],
                          "loader_epoch", v[4], "loader_batch", v[5], "batch", v[6], "seq_len", v[7],
                          "world_size", v[8], "seed", v[9]};
    void *bufs[] = {mbuf, vbuf};
    const char *prefixes[] = {"m.", "v."};
    hg_status s = ckpt_write_tensors(m, path, bufs, prefixes, 2, meta, (int)(sizeof meta / sizeof meta[0] / 2));
    free(cfg);
    return s;
}

hg_status hg_optimizer_load(hg_model *m, const char *path, hg_train_state *st) {
    if (!m || !path || !st) return hg_fail(HG_ERR_INVALID, "hg_optimizer_load: NULL argument");
    if (!m->opt.training) return hg_fail(HG_ERR_STATE, "this model was created with training=0: it has no optimizer state");
    hg_st_file *f;
    HG_TRY(hg_st_open(&f, path));
    hg_config c;
    ckpt_state cs;
    hg_status s = ckpt_read_config(f, path, CKPT_OPTIMIZER_FORMAT, &c, NULL);
    if (s == HG_OK) s = same_shape(path, &c, &m->cfg);
    if (s == HG_OK) s = ckpt_read_state(f, path, &cs);
    if (s == HG_OK) s = read_tensors(m, f, path, "m.", NULL, 0);
    if (s == HG_OK) s = read_tensors(m, f, path, "v.", NULL, 0);
    if (s == HG_OK) s = no_extra(m, f, path, (const char *const[]){"m.", "v."}, 2);
    /* whole tensors in the file, F32 or BF16 whatever the model keeps (converted); a
     * sharded (ZeRO-1) model keeps its slice */
    for (int i = 0; s == HG_OK && i < m->params.count; i++) {
        if (!gpt_trained(m, i)) continue;
        const int64_t n = m->params.specs[i].numel;
        float *mv = malloc(2 * sizeof(float) * (size_t)(n ? n : 1));
        if (!mv) s = hg_fail(HG_ERR_NOMEM, "%s: out of memory", path);
        for (int k = 0; s == HG_OK && k < 2; k++) {
            char name[80];
            snprintf(name, sizeof name, "%s%s", k ? "v." : "m.", m->params.specs[i].name);
            s = hg_st_read_f32(f, hg_st_find(f, name), mv + k * n, n);
        }
        if (s == HG_OK) s = gpt_moments_set(m, i, mv, mv + n);
        free(mv);
    }
    if (s == HG_OK) {
        m->adam_t = cs.adam_t;
        m->rng_step = (uint32_t)cs.rng_counter;
        *st = cs.train;
    }
    hg_st_close(f);
    return s;
}

/* ---- the run folder ---- */

#define CKPT_PREFIX "ckpt_"

/* The step of a checkpoint folder name "ckpt_<digits><suffix>", or -1. Suffixes: "" a
 * complete checkpoint, ".tmp" one being written, ".del" one being pruned. */
static int64_t ckpt_step_of(const char *name, const char *suffix) {
    if (strncmp(name, CKPT_PREFIX, strlen(CKPT_PREFIX))) return -1;
    const char *p = name + strlen(CKPT_PREFIX), *start = p;
    int64_t step = 0;
    for (; *p >= '0' && *p <= '9' && p - start < 18; p++) step = 10 * step + (*p - '0');
    if (p == start) return -1;
    return strcmp(p, suffix) ? -1 : step;
}

hg_status hg_checkpoint_begin(const char *run_dir, int64_t step, char *tmp_dir, size_t cap) {
    if (!run_dir || !tmp_dir || step < 0) return hg_fail(HG_ERR_INVALID, "hg_checkpoint_begin: bad argument");
    if ((size_t)snprintf(tmp_dir, cap, "%s/" CKPT_PREFIX "%08" PRId64 ".tmp", run_dir, step) >= cap)
        return hg_fail(HG_ERR_INVALID, "%s: path too long", run_dir);
    hg_remove_dir(tmp_dir); /* left by a crash */
    if (mkdir(tmp_dir, 0755) != 0) return hg_fail(HG_ERR_IO, "%s: cannot create: %s", tmp_dir, strerror(errno));
    return HG_OK;
}

void hg_checkpoint_abort(const char *tmp_dir) {
    if (tmp_dir) hg_remove_dir(tmp_dir);
}

hg_status hg_checkpoint_commit(const char *run_dir, int64_t step, const char *tmp_dir) {
    if (!run_dir || !tmp_dir) return hg_fail(HG_ERR_INVALID, "hg_checkpoint_commit: NULL argument");
    char final[PATH_MAX];
    snprintf(final, sizeof final, "%s/" CKPT_PREFIX "%08" PRId64, run_dir, step);
    HG_TRY(hg_fsync_dir(tmp_dir));
    struct stat sb;
    if (stat(final, &sb) == 0) {
        /* the same step again (a run resumed and stopped at once): swap, drop the old */
        if (renameat2(AT_FDCWD, tmp_dir, AT_FDCWD, final, RENAME_EXCHANGE) != 0)
            return hg_fail(HG_ERR_IO, "%s: cannot replace with %s: %s", final, tmp_dir, strerror(errno));
        hg_remove_dir(tmp_dir);
    } else if (rename(tmp_dir, final) != 0) {
        return hg_fail(HG_ERR_IO, "%s: cannot rename to %s: %s", tmp_dir, final, strerror(errno));
    }
    return hg_fsync_dir(run_dir);
}

/* Steps of the complete checkpoints in run_dir, ascending; *n receives the count. */
static hg_status list_steps(const char *run_dir, int64_t **steps, int *n) {
    *steps = NULL;
    *n = 0;
    DIR *d = opendir(run_dir);
    if (!d) return hg_fail(HG_ERR_IO, "%s: cannot open folder: %s", run_dir, strerror(errno));
    int cap = 0;
    struct dirent *e;
    hg_status s = HG_OK;
    struct stat sb;
    while ((e = readdir(d)) && s == HG_OK) {
        int64_t step = ckpt_step_of(e->d_name, "");
        /* a symlink is never taken as a checkpoint (nor pruned: that would empty its target) */
        if (step < 0 || fstatat(dirfd(d), e->d_name, &sb, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISDIR(sb.st_mode)) continue;
        if (*n == cap) {
            cap = cap ? 2 * cap : 16;
            int64_t *g = realloc(*steps, sizeof **steps * (size_t)cap);
            if (!g) {
                s = hg_fail(HG_ERR_NOMEM, "out of memory listing %s", run_dir);
                break;
            }
            *steps = g;
        }
        (*steps)[(*n)++] = step;
    }
    closedir(d);
    for (int i = 1; i < *n; i++) /* insertion sort: a handful of entries */
        for (int j = i; j > 0 && (*steps)[j - 1] > (*steps)[j]; j--) {
            int64_t t = (*steps)[j];
            (*steps)[j] = (*steps)[j - 1];
            (*steps)[j - 1] = t;
        }
    return s;
}

hg_status hg_checkpoint_prune(const char *run_dir, int keep) {
    if (!run_dir || keep < 1) return hg_fail(HG_ERR_INVALID, "hg_checkpoint_prune: keep must be >= 1");
    int64_t *steps;
    int n;
    HG_TRY(list_steps(run_dir, &steps, &n));
    char p[PATH_MAX], del[PATH_MAX + 8];
    hg_status s = HG_OK;
    /* renamed out of the way first: a kill while deleting leaves a ckpt_N.del, never a
     * half-deleted folder under a checkpoint's name */
    for (int i = 0; i < n - keep && s == HG_OK; i++) {
        snprintf(p, sizeof p, "%s/" CKPT_PREFIX "%08" PRId64, run_dir, steps[i]);
        snprintf(del, sizeof del, "%s.del", p);
        hg_remove_dir(del);
        if (rename(p, del) != 0) s = hg_fail(HG_ERR_IO, "%s: cannot rename to %s: %s", p, del, strerror(errno));
    }
    free(steps);
    if (s == HG_OK) s = hg_fsync_dir(run_dir);
    DIR *d = opendir(run_dir);
    struct dirent *e;
    while (d && (e = readdir(d)))
        if (ckpt_step_of(e->d_name, ".tmp") >= 0 || ckpt_step_of(e->d_name, ".del") >= 0) {
            snprintf(p, sizeof p, "%s/%s", run_dir, e->d_name);
            hg_remove_dir(p);
        }
    if (d) closedir(d);
    return s == HG_OK ? hg_fsync_dir(run_dir) : s;
}

/* A checkpoint folder is whole: it has its weights, and the step its optimizer state
 * records (if it has one) is the step its name says. */
static hg_status verify_folder(const char *dir, int64_t step) {
    char p[PATH_MAX + 32];
    struct stat sb;
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    if (stat(p, &sb) != 0) { /* a LoRA run's checkpoint holds its adapters as a PEFT folder */
        snprintf(p, sizeof p, "%s/adapter/adapter_model.safetensors", dir);
        if (stat(p, &sb) != 0)
            return hg_fail(HG_ERR_FORMAT, "%s: a checkpoint folder without model.safetensors or adapter/ (%s): copied "
                           "in part?", dir, strerror(errno));
    }
    snprintf(p, sizeof p, "%s/optimizer.safetensors", dir);
    if (stat(p, &sb) != 0) return HG_OK; /* weights only */
    hg_st_file *f;
    HG_TRY(hg_st_open(&f, p));
    ckpt_state st;
    hg_status s = ckpt_read_state(f, p, &st);
    hg_st_close(f);
    if (s == HG_OK && st.train.step != step)
        s = hg_fail(HG_ERR_FORMAT, "%s: its optimizer state is at step %" PRId64 " but the folder's name says step %" PRId64
                    ": renamed or copied by hand? Give it its own step's name, or remove it",
                    dir, st.train.step, step);
    return s;
}

hg_status hg_checkpoint_latest(const char *run_dir, char *ckpt_dir, size_t cap, int64_t *step) {
    if (!run_dir || !ckpt_dir) return hg_fail(HG_ERR_INVALID, "hg_checkpoint_latest: NULL argument");
    int64_t *steps;
    int n;
    HG_TRY(list_steps(run_dir, &steps, &n));
    int64_t last = n ? steps[n - 1] : -1;
    free(steps);
    if (last < 0) return hg_fail(HG_ERR_IO, "%s: no checkpoint (ckpt_NNNNNNNN/) in this folder", run_dir);
    if ((size_t)snprintf(ckpt_dir, cap, "%s/" CKPT_PREFIX "%08" PRId64, run_dir, last) >= cap)
        return hg_fail(HG_ERR_INVALID, "%s: path too long", run_dir);
    HG_TRY(verify_folder(ckpt_dir, last));
    if (step) *step = last;
    return HG_OK;
}

hg_status hg_checkpoint_resolve(const char *path, char *weights, size_t cap) {
    if (!path || !weights) return hg_fail(HG_ERR_INVALID, "hg_checkpoint_resolve: NULL argument");
    struct stat sb;
    if (stat(path, &sb) != 0) return hg_fail(HG_ERR_IO, "%s: %s", path, strerror(errno));
    char dir[PATH_MAX];
    if (!S_ISDIR(sb.st_mode)) snprintf(dir, sizeof dir, "%s", "");
    else {
        char probe[PATH_MAX], opt[PATH_MAX];
        snprintf(probe, sizeof probe, "%s/model.safetensors", path);
        snprintf(opt, sizeof opt, "%s/optimizer.safetensors", path);
        if (stat(probe, &sb) == 0) snprintf(dir, sizeof dir, "%s", path);
        else if (stat(opt, &sb) == 0) /* a checkpoint folder, not a run folder */
            return hg_fail(HG_ERR_IO, "%s: a checkpoint folder without model.safetensors", path);
        else HG_TRY(hg_checkpoint_latest(path, dir, sizeof dir, NULL));
    }
    int len = dir[0] ? snprintf(weights, cap, "%s/model.safetensors", dir) : snprintf(weights, cap, "%s", path);
    if (len < 0 || (size_t)len >= cap) return hg_fail(HG_ERR_INVALID, "%s: path too long", path);
    return HG_OK;
}
