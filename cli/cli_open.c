/* Opening a model (Hugging Face folder or handgrad checkpoint) and its tokenizer. */
#include "cli_open.h"

#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

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

int cli_open_model(const char *cmd, const char *path, const hg_options *opt, hg_model **out, char *dir, size_t cap) {
    struct stat sb;
    char probe[4096], weights[4096];
    hg_config cfg;
    *out = NULL;
    snprintf(probe, sizeof probe, "%s/config.json", path);
    int hf = stat(path, &sb) == 0 && S_ISDIR(sb.st_mode) && stat(probe, &sb) == 0;
    if (hf) {
        snprintf(dir, cap, "%s", path);
        if (hg_hf_config_load(probe, &cfg) != HG_OK) return fail(cmd, "--model", path);
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
    if (hf) return hg_model_load_hf(out, path, opt) == HG_OK ? 0 : fail_create(cmd, opt, path);
    if (hg_model_create(out, &cfg, opt) != HG_OK) return fail_create(cmd, opt, weights);
    if (hg_model_load(*out, weights) != HG_OK) {
        hg_model_free(*out);
        *out = NULL;
        return fail(cmd, "--model", weights);
    }
    return 0;
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
