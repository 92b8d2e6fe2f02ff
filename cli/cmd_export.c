/* `handgrad export`: writes a model as a Hugging Face folder. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli_io.h"
#include "cli_opts.h"
#include "cli_open.h"
#include "commands.h"
#include "handgrad.h"

static const char synopsis[] =
    "usage: handgrad export --model PATH [--adapter DIR]\n"
    "                       (--hf DIR [--merge] | --peft DIR)\n"
    "                       [--tokenizer PATH] [--architecture CLASS] [--bf16]\n"
    "                       [--max-shard-size SIZE]\n";
static const char about[] =
    "Writes DIR as a Hugging Face folder that transformers' AutoModelForCausalLM.from_pretrained "
    "loads: config.json, model.safetensors (or its shards and model.safetensors.index.json) and "
    "the tokenizer's files (tokenizer.json as it was read, or vocab.json, merges.txt and "
    "tokenizer_config.json), with the tokenizer_config.json, "
    "special_tokens_map.json and generation_config.json found beside the tokenizer. DIR must not "
    "exist or be empty; it appears only when complete. A model with LoRA adapters (a LoRA run, or "
    "--adapter) is written as a PEFT folder with --peft, or with --hf --merge as one model whose "
    "weights hold the adapters (W + s B A), as PEFT's merge_and_unload gives.\n";

typedef struct export_args {
    const char *model, *adapter, *out, *peft, *tokenizer, *arch, *max_shard;
    int bf16, merge;
} export_args;

#define O(field) offsetof(export_args, field)
static const cli_opt export_options[] = {
    {"model", CLI_STR, O(model), "PATH", 0, 0, 0,
     "a handgrad checkpoint (weights .safetensors file, ckpt_N folder or run folder, a LoRA run's included) or a "
     "Hugging Face folder (required)"},
    {"adapter", CLI_STR, O(adapter), "DIR", 0, 0, 0, "a PEFT LoRA folder whose adapters go onto the model"},
    {"hf", CLI_STR, O(out), "DIR", 0, 0, 0, "the Hugging Face folder to write"},
    {"merge", CLI_BOOL, O(merge), 0, 0, 1, 0, "with --hf: fold the model's LoRA adapters into its weights"},
    {"peft", CLI_STR, O(peft), "DIR", 0, 0, 0, "write the model's LoRA adapters as a PEFT folder (with or without --hf)"},
    {"tokenizer", CLI_STR, O(tokenizer), "PATH", 0, 0, 0, "the tokenizer (default: the files beside the model)"},
    {"architecture", CLI_STR, O(arch), "CLASS", 0, 0, 0,
     "GPT2LMHeadModel, LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM or Qwen3ForCausalLM (default: a Hugging Face model's own class; a checkpoint's is GPT-2 when its config is GPT-2's, "
     "Qwen3 with a q/k norm, Qwen2 with q/k/v biases only, else Llama)"},
    {"bf16", CLI_BOOL, O(bf16), 0, 0, 1, 0,
     "weights in bfloat16 (rounded to nearest even); default float32, the parameters' exact bits"},
    {"max-shard-size", CLI_STR, O(max_shard), "SIZE", 0, 0, 0,
     "weights larger than SIZE go into shards of at most SIZE (a larger tensor alone), as transformers' "
     "save_pretrained writes them: bytes, or a number with KB, MB, GB (powers of 1000) or KiB, MiB, GiB "
     "(default: one file)"},
};
#undef O

/* The class a Hugging Face folder's config.json names, or NULL (a checkpoint). */
static char *folder_class(const char *dir) {
    char path[4200];
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *text = malloc(1 << 20), *out = NULL;
    size_t n = text ? fread(text, 1, (1 << 20) - 1, f) : 0;
    fclose(f);
    if (!text) return NULL;
    text[n] = 0;
    cJSON *j = cJSON_Parse(text);
    const cJSON *a = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "architectures"), 0);
    if (cJSON_GetStringValue(a)) out = strdup(a->valuestring);
    cJSON_Delete(j);
    free(text);
    return out;
}

/* m's adapters as the PEFT folder dir, naming as their base the folder a LoRA run's
 * base.json names, else the model given (the base an --adapter went onto). */
static int write_peft(const hg_model *m, const char *model, const char *adapter, const char *dir) {
    char base[4096], ckpt[4096], hash[17];
    const int run = !adapter && cli_lora_checkpoint(model, ckpt, sizeof ckpt);
    if (run && cli_base_json("export", ckpt, base, sizeof base, hash)) return 1;
    if (hg_peft_save(m, dir, run ? base : model) != HG_OK) return cli_fail("export");
    fprintf(stderr, "export: wrote %s as a PEFT LoRA folder (adapter_config.json, adapter_model.safetensors)\n", dir);
    return 0;
}

/* "5GB", "500MiB", "100000": bytes, > 0; -1 when the text is none of these. */
static int64_t parse_size(const char *text) {
    static const struct {
        const char *unit;
        double scale;
    } units[] = {{"", 1}, {"B", 1}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12}, {"KiB", 1024.0},
                 {"MiB", 1048576.0}, {"GiB", 1073741824.0}, {"TiB", 1099511627776.0}};
    char *end;
    double v = strtod(text, &end);
    if (end == text || !(v > 0)) return -1;
    for (size_t u = 0; u < sizeof units / sizeof units[0]; u++)
        if (!strcmp(end, units[u].unit) && v * units[u].scale >= 1 && v * units[u].scale < 9e18)
            return (int64_t)(v * units[u].scale);
    return -1;
}

int cmd_export(int argc, char **argv) {
    export_args a = {0};
    cli_cmd cmd = CLI_CMD("export", synopsis, about, NULL, export_options, NULL);
    int parsed = cli_parse(&cmd, &a, argc, argv, NULL);
    if (parsed) return cli_exit(parsed);
    if (!a.model || (!a.out && !a.peft)) {
        fprintf(stderr, "handgrad export: needs --model, and --hf or --peft (see handgrad export --help)\n");
        return 2;
    }
    if (a.merge && !a.out) {
        fprintf(stderr, "handgrad export: --merge writes a Hugging Face folder: give --hf DIR\n");
        return 2;
    }
    const char *model = a.model, *out = a.out, *tok_path = a.tokenizer, *arch = a.arch;
    const int bf16 = a.bf16;
    const int64_t max_shard = a.max_shard ? parse_size(a.max_shard) : 0;
    if (max_shard < 0) {
        fprintf(stderr, "handgrad export: --max-shard-size: '%s' is not a size (bytes, or a number with KB, MB, GB, KiB, "
                        "MiB or GiB)\n", a.max_shard);
        return 2;
    }
    hg_options o = hg_options_default();
    o.training = 0, o.seq_len = 1; /* no activations to speak of: the weights are all it needs */
    hg_model *m = NULL;
    hg_tokenizer *tok = NULL;
    char dir[4096];
    int rc = cli_open_model("export", model, a.adapter, &o, &m, dir, sizeof dir);
    if (rc) return rc;
    const int lora = hg_model_options(m)->lora.r > 0;
    char *own = NULL;
    if (!lora && (a.merge || a.peft))
        rc = 2, fprintf(stderr, "handgrad export: %s: %s has no LoRA adapters (give --adapter DIR, or a LoRA run)\n",
                        a.merge ? "--merge" : "--peft", model);
    else if (lora && a.out && !a.merge)
        rc = 2, fprintf(stderr, "handgrad export: --hf: %s has LoRA adapters: add --merge to fold them into the "
                                "weights, or write them alone with --peft DIR\n", model);
    else if (a.peft)
        rc = write_peft(m, model, a.adapter, a.peft);
    if (rc || !out) goto done;
    if (a.merge && hg_lora_merge(m) != HG_OK) rc = cli_fail("export");
    if (rc == 0) rc = cli_open_tokenizer("export", tok_path, dir, m, &tok);
    /* the extra tokenizer and generation files sit beside the tokenizer (a folder, or
     * the folder of a tokenizer.json) */
    char from[4096];
    cli_folder_of(tok_path ? tok_path : dir, from, sizeof from);
    own = arch ? NULL : folder_class(dir);
    hg_hf_export how = {arch ? arch : own, bf16, from, max_shard};
    if (rc == 0 && hg_model_save_hf_as(m, tok, out, &how) != HG_OK) rc = cli_fail("export");
    if (rc == 0) {
        char index[4200];
        snprintf(index, sizeof index, "%s/model.safetensors.index.json", out);
        fprintf(stderr, "export: wrote %s as %s in %s (config.json, %s, tokenizer files)\n", out,
                how.architecture ? how.architecture : hg_hf_architecture(hg_model_config(m)), bf16 ? "bfloat16" : "float32",
                access(index, F_OK) == 0 ? "safetensors shards and their index" : "model.safetensors");
    }
done:
    free(own);
    hg_tokenizer_free(tok);
    hg_model_free(m);
    return rc;
}
