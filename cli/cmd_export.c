/* `handgrad export`: writes a model as a Hugging Face GPT-2 folder. */
#include <getopt.h>
#include <stdio.h>

#include "cli_io.h"
#include "cli_open.h"
#include "commands.h"
#include "handgrad.h"

static const char *usage_text =
    "usage: handgrad export --model PATH --hf DIR [--tokenizer PATH]\n"
    "\n"
    "Writes DIR as a Hugging Face GPT-2 folder that transformers' GPT2LMHeadModel.from_pretrained\n"
    "loads: config.json, model.safetensors, and the tokenizer's vocab.json, merges.txt and\n"
    "tokenizer_config.json. DIR must not exist or be empty; it appears only when complete.\n"
    "\n"
    "  --model PATH       a handgrad checkpoint (weights .safetensors file, ckpt_N folder or run\n"
    "                     folder) or a Hugging Face folder\n"
    "  --hf DIR           the folder to write\n"
    "  --tokenizer PATH   the tokenizer (default: the files beside the model)\n";

int cmd_export(int argc, char **argv) {
    static const struct option opts[] = {{"model", required_argument, 0, 'm'}, {"hf", required_argument, 0, 'o'},
                                         {"tokenizer", required_argument, 0, 't'}, {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    const char *model = NULL, *out = NULL, *tok_path = NULL;
    int c;
    optind = 1, opterr = 0; /* one-line messages of our own */
    while ((c = getopt_long(argc, argv, ":", opts, NULL)) != -1) {
        switch (c) {
        case 'm': model = optarg; break;
        case 'o': out = optarg; break;
        case 't': tok_path = optarg; break;
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
    if (rc == 0 && hg_model_save_hf(m, tok, out) != HG_OK) rc = cli_fail("export");
    if (rc == 0) fprintf(stderr, "export: wrote %s (config.json, model.safetensors, tokenizer files)\n", out);
    hg_tokenizer_free(tok);
    hg_model_free(m);
    return rc;
}
