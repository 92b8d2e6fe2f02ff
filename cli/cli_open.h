/* Opening a model and its tokenizer for the commands that run one (generate, export):
 * a Hugging Face GPT-2 folder or a handgrad checkpoint, by one path. */
#ifndef HG_CLI_OPEN_H
#define HG_CLI_OPEN_H

#include <stddef.h>

#include "handgrad.h"

/* Creates a model from path with the options opt: a Hugging Face folder (it has
 * config.json), or a handgrad checkpoint (a weights .safetensors file, a ckpt_N folder,
 * or a run folder, which gives its newest checkpoint). dir receives the folder the
 * weights are in, where the tokenizer files are looked for. Prints
 * "handgrad <cmd>: --model <path>: why" ("--device cuda: why" when the device refused)
 * and returns 1 on failure; 0 on success. */
int cli_open_model(const char *cmd, const char *path, const hg_options *opt, hg_model **out, char *dir, size_t cap);
/* Loads the tokenizer at path (NULL: the files in dir) and checks that it has as many
 * ids as the model's vocab_size. Prints the error and returns 1 on failure. */
int cli_open_tokenizer(const char *cmd, const char *path, const char *dir, const hg_model *m, hg_tokenizer **out);

#endif
