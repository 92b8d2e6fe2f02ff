/* `handgrad export`: writes a model as a Hugging Face folder. */
#include <cjson/cJSON.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_io.h"
#include "cli_open.h"
#include "commands.h"
#include "handgrad.h"

static const char *usage_text =
    "usage: handgrad export --model PATH --hf DIR [--tokenizer PATH] [--architecture CLASS] [--bf16]\n"
    "\n"
    "Writes DIR as a Hugging Face folder that transformers' AutoModelForCausalLM.from_pretrained\n"
    "loads: config.json, model.safetensors and the tokenizer's files (tokenizer.json as it was\n"
    "read, or vocab.json, merges.txt and tokenizer_config.json), with the tokenizer_config.json,\n"
    "special_tokens_map.json and generation_config.json found beside the tokenizer. DIR must\n"
    "not exist or be empty; it appears only when complete.\n"
    "\n"
    "  --model PATH          a handgrad checkpoint (weights .safetensors file, ckpt_N folder or\n"
    "                        run folder) or a Hugging Face folder\n"
    "  --hf DIR              the folder to write\n"
    "  --tokenizer PATH      the tokenizer (default: the files beside the model)\n"
    "  --architecture CLASS  GPT2LMHeadModel, LlamaForCausalLM, MistralForCausalLM,\n"
    "                        Qwen2ForCausalLM or Qwen3ForCausalLM (default: a Hugging Face\n"
    "                        model's own class; a checkpoint's is GPT-2 when its config is\n"
    "                        GPT-2's, Qwen3 with a q/k norm, Qwen2 with q/k/v biases only,\n"
    "                        else Llama)\n"
    "  --bf16                weights in bfloat16 (rounded to nearest even); default float32,\n"
    "                        the parameters' exact bits\n";

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

int cmd_export(int argc, char **argv) {
    static const struct option opts[] = {{"model", required_argument, 0, 'm'}, {"hf", required_argument, 0, 'o'},
                                         {"tokenizer", required_argument, 0, 't'}, {"help", no_argument, 0, 'h'},
                                         {"architecture", required_argument, 0, 'a'}, {"bf16", no_argument, 0, 'b'},
                                         {0, 0, 0, 0}};
    const char *model = NULL, *out = NULL, *tok_path = NULL, *arch = NULL;
    int bf16 = 0;
    int c;
    optind = 1, opterr = 0; /* one-line messages of our own */
    while ((c = getopt_long(argc, argv, ":", opts, NULL)) != -1) {
        switch (c) {
        case 'm': model = optarg; break;
        case 'o': out = optarg; break;
        case 't': tok_path = optarg; break;
        case 'a': arch = optarg; break;
        case 'b': bf16 = 1; break;
        case 'h': fputs(usage_text, stdout); return 0;
        case ':': fprintf(stderr, "handgrad export: %s needs a value (see --help)\n", argv[optind - 1]); return 2;
        default: fprintf(stderr, "handgrad export: unknown option '%s' (see --help)\n", argv[optind - 1]); return 2;
        }
    }
    if (!model || !out || optind < argc) {
        fprintf(stderr, "handgrad export: needs --model and --hf, and no other arguments (see --help)\n");
        return 2;
    }
    hg_options o = hg_options_default();
    o.training = 0, o.seq_len = 1; /* no activations to speak of: the weights are all it needs */
    hg_model *m = NULL;
    hg_tokenizer *tok = NULL;
    char dir[4096];
    if (cli_open_model("export", model, &o, &m, dir, sizeof dir)) return 1;
    int rc = cli_open_tokenizer("export", tok_path, dir, m, &tok);
    /* the extra tokenizer and generation files sit beside the tokenizer (a folder, or
     * the folder of a tokenizer.json) */
    char from[4096];
    cli_folder_of(tok_path ? tok_path : dir, from, sizeof from);
    char *own = arch ? NULL : folder_class(dir);
    hg_hf_export how = {arch ? arch : own, bf16, from};
    if (rc == 0 && hg_model_save_hf_as(m, tok, out, &how) != HG_OK) rc = cli_fail("export");
    if (rc == 0)
        fprintf(stderr, "export: wrote %s as %s in %s (config.json, model.safetensors, tokenizer files)\n", out,
                how.architecture ? how.architecture : hg_hf_architecture(hg_model_config(m)), bf16 ? "bfloat16" : "float32");
    free(own);
    hg_tokenizer_free(tok);
    hg_model_free(m);
    return rc;
}
