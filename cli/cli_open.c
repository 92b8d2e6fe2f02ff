/* Opening a model (Hugging Face folder or handgrad checkpoint) and its tokenizer. */
#include "cli_open.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli_io.h"
#include "cli_model.h"

static int fail(const char *cmd, const char *flag, const char *path) {
    fprintf(stderr, "handgrad %s: %s %s: %s\n", cmd, flag, path, hg_last_error());
    return 1;
}

/* A model that could not be made on opt's device names --device or --precision, else
 * the file. */
static int fail_create(const char *cmd, const hg_options *opt, const char *path) {
    char what[4200], why[5400];
    snprintf(what, sizeof what, "--model %s", path);
    fprintf(stderr, "handgrad %s: %s\n", cmd, cli_model_why(opt, what, why, sizeof why));
    return 1;
}

int cli_base_hash(const char *cmd, const hg_model *m, char out[17]) {
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a over 8-byte words, the tail byte by byte */
    float *host = NULL;
    hg_status s = HG_OK;
    for (int i = 0; s == HG_OK && i < hg_param_count(m); i++) {
        hg_param_info p;
        hg_param_at(m, i, &p);
        if (!p.frozen) continue;
        float *grown = realloc(host, sizeof(float) * (size_t)p.numel);
        if (!grown) {
            fprintf(stderr, "handgrad %s: out of memory reading %s\n", cmd, p.name);
            free(host);
            return 1;
        }
        host = grown;
        if ((s = hg_param_read(m, i, HG_PARAM_DATA, host)) != HG_OK) break;
        const size_t n = sizeof(float) * (size_t)p.numel;
        const unsigned char *b = (const unsigned char *)host;
        size_t k = 0;
        for (uint64_t w; k + 8 <= n; k += 8) memcpy(&w, b + k, 8), h = (h ^ w) * 0x100000001b3ull;
        for (; k < n; k++) h = (h ^ b[k]) * 0x100000001b3ull;
    }
    free(host);
    snprintf(out, 17, "%016llx", (unsigned long long)h);
    if (s != HG_OK) fprintf(stderr, "handgrad %s: %s\n", cmd, hg_last_error());
    return s != HG_OK;
}

int cli_lora_checkpoint(const char *path, char *ckpt, size_t cap) {
    struct stat sb;
    char p[4200];
    snprintf(p, sizeof p, "%s/base.json", path);
    if (stat(p, &sb) == 0) return snprintf(ckpt, cap, "%s", path), 1;
    snprintf(p, sizeof p, "%s/config.json", path);
    if (stat(p, &sb) == 0 || stat(path, &sb) != 0 || !S_ISDIR(sb.st_mode)) return 0;
    char latest[4096];
    if (hg_checkpoint_latest(path, latest, sizeof latest, NULL) != HG_OK) return 0;
    snprintf(p, sizeof p, "%s/base.json", latest);
    return stat(p, &sb) == 0 ? (snprintf(ckpt, cap, "%s", latest), 1) : 0;
}

int cli_base_json(const char *cmd, const char *ckpt, char *base, size_t cap, char hash[17]) {
    char p[4200];
    snprintf(p, sizeof p, "%s/base.json", ckpt);
    size_t len;
    char *text = (char *)cli_read_input(cmd, p, &len);
    if (!text) return 1;
    cJSON *j = cJSON_ParseWithLength(text, len);
    free(text);
    const char *h = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(j, "hash"));
    const char *was = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(j, "path"));
    int rc = !j ? 1 : !h || strlen(h) != 16 ? 2 : !was || !*was ? 3 : 0;
    if (rc == 0) snprintf(hash, 17, "%s", h), snprintf(base, cap, "%s", was);
    else fprintf(stderr, "handgrad %s: %s: %s\n", cmd, p,
                 rc == 1 ? "not JSON" : rc == 2 ? "'hash' is not 16 hex digits" : "'path' (the base model) is missing");
    cJSON_Delete(j);
    return rc != 0;
}

/* The model at path alone: a Hugging Face folder or a handgrad checkpoint. */
static int open_plain(const char *cmd, const char *path, const char *adapter, const char *aflag, hg_options *opt,
                      hg_model **out, char *dir, size_t cap) {
    struct stat sb;
    char probe[4200], weights[4096];
    hg_config cfg;
    snprintf(probe, sizeof probe, "%s/config.json", path);
    int hf = stat(path, &sb) == 0 && S_ISDIR(sb.st_mode) && stat(probe, &sb) == 0;
    const char *cls = NULL;
    if (hf) {
        snprintf(dir, cap, "%s", path);
        if (hg_hf_config_load(probe, &cfg) != HG_OK || hg_hf_config_class(probe, &cls) != HG_OK)
            return fail(cmd, "--model", path);
    } else {
        if (hg_checkpoint_resolve(path, weights, sizeof weights) != HG_OK || hg_checkpoint_config(weights, &cfg) != HG_OK)
            return fail(cmd, "--model", path);
        const char *slash = strrchr(weights, '/');
        snprintf(dir, cap, "%.*s", slash ? (int)(slash - weights) : 1, slash ? weights : ".");
    }
    if (opt->seq_len > cfg.max_seq_len) {
        fprintf(stderr, "handgrad %s: --ctx %d is longer than the model's context (%d positions)\n", cmd, opt->seq_len,
                cfg.max_seq_len);
        return 1;
    }
    if (adapter) { /* the adapters' shapes follow the base's class's module names */
        hg_peft_config pc;
        if (hg_peft_config_load(adapter, &pc) != HG_OK || hg_hf_lora_targets(&cfg, cls, pc.targets, &pc.lora) != HG_OK)
            return fail(cmd, aflag, adapter);
        opt->lora = pc.lora;
    }
    if (hf) return hg_model_load_hf(out, path, opt) == HG_OK ? 0 : fail_create(cmd, opt, path);
    if (hg_model_create(out, &cfg, opt) != HG_OK) return fail_create(cmd, opt, weights);
    if (hg_model_load(*out, weights) != HG_OK) {
        hg_model_free(*out);
        *out = NULL;
        return fail(cmd, "--model", weights);
    }
    return 0;
}

int cli_open_model(const char *cmd, const char *path, const char *adapter, const hg_options *opt, hg_model **out,
                   char *dir, size_t cap) {
    *out = NULL;
    hg_options o = *opt;
    char ckpt[4096], base[4096], want[17], have[17], inner[4096], adapter_dir[4200];
    const int lora_run = cli_lora_checkpoint(path, ckpt, sizeof ckpt);
    if (lora_run && adapter) {
        fprintf(stderr, "handgrad %s: --adapter: %s holds a LoRA run's adapters already; give its base as --model\n",
                cmd, path);
        return 2;
    }
    if (lora_run) { /* a LoRA run's checkpoint: its base, named in base.json, and adapter/ */
        if (cli_base_json(cmd, ckpt, base, sizeof base, want)) return 1;
        snprintf(adapter_dir, sizeof adapter_dir, "%s/adapter", ckpt);
        adapter = adapter_dir;
    }
    /* a LoRA run's adapters are named by its --model, a PEFT folder's by --adapter */
    const char *aflag = lora_run ? "--model" : "--adapter";
    if (open_plain(cmd, lora_run ? base : path, adapter, aflag, &o, out, inner, sizeof inner)) return 1;
    snprintf(dir, cap, "%s", lora_run ? ckpt : inner); /* the tokenizer sits beside the adapters */
    if (lora_run && cli_base_hash(cmd, *out, have)) {
        /* printed */
    } else if (lora_run && strcmp(have, want)) {
        fprintf(stderr, "handgrad %s: --model %s: the adapters were trained on %s as it was (hash %s), but it holds "
                        "other weights now (hash %s)\n", cmd, path, base, want, have);
    } else if (!adapter || hg_peft_load(*out, adapter) == HG_OK) {
        return 0;
    } else {
        fail(cmd, aflag, adapter);
    }
    hg_model_free(*out);
    *out = NULL;
    return 1;
}

int cli_open_tokenizer(const char *cmd, const char *path, const char *dir, const hg_model *m, hg_tokenizer **out) {
    const char *flag = path ? "--tokenizer" : "--model";
    const char *where = path ? path : dir;
    if (hg_tokenizer_load(out, where) != HG_OK) {
        if (path) return fail(cmd, flag, where);
        fprintf(stderr, "handgrad %s: no tokenizer beside the model in %s (give --tokenizer): %s\n", cmd, dir,
                hg_last_error());
        return 1;
    }
    /* a model may have more embedding rows than its tokenizer has ids (Qwen2.5 pads its
     * vocabulary), never fewer */
    int tv = hg_tokenizer_vocab_size(*out), mv = hg_model_config(m)->vocab_size;
    if (tv > mv) {
        fprintf(stderr, "handgrad %s: %s %s: the tokenizer has %d ids but the model's vocab_size is %d\n", cmd, flag,
                where, tv, mv);
        hg_tokenizer_free(*out);
        *out = NULL;
        return 1;
    }
    return 0;
}
