/* Opening a model and its tokenizer for the commands that run one (generate, export,
 * train's LoRA checkpoints): a Hugging Face folder, a handgrad checkpoint or a LoRA run's
 * checkpoint by one path, with or without a PEFT folder's adapters. */
#ifndef HG_CLI_OPEN_H
#define HG_CLI_OPEN_H

#include <stddef.h>

#include "handgrad.h"

/* Creates a model from path with the options opt: a Hugging Face folder (it has
 * config.json), a handgrad checkpoint (a weights .safetensors file, a ckpt_N folder, or
 * a run folder, which gives its newest checkpoint), or a LoRA run's checkpoint (its
 * base.json names the base, checked by hash; adapter/ holds the adapters). adapter (may be
 * NULL) is a PEFT folder whose adapters go onto path's model. dir receives the folder
 * the tokenizer files are looked for in. Prints "handgrad <cmd>: --model <path>: why"
 * ("--device cuda: why" when the device refused) and returns 1 (2 for a misuse) on
 * failure; 0 on success. */
int cli_open_model(const char *cmd, const char *path, const char *adapter, const hg_options *opt, hg_model **out,
                   char *dir, size_t cap);
/* 1 when path is a LoRA run's checkpoint folder, or a run folder whose newest checkpoint
 * is one; ckpt receives that checkpoint's folder. */
int cli_lora_checkpoint(const char *path, char *ckpt, size_t cap);
/* A LoRA checkpoint's base.json: the base's path and the hash of its weights. Prints the
 * error and returns 1 on failure. */
int cli_base_json(const char *cmd, const char *ckpt, char *base, size_t cap, char hash[17]);
/* The hash of m's frozen parameters (FNV-1a of their float32 bits, in order): the base
 * a LoRA run's adapters belong to, as 16 hex digits. Prints the error and returns 1 on
 * failure. */
int cli_base_hash(const char *cmd, const hg_model *m, char out[17]);
/* Loads the tokenizer at path (NULL: the files in dir) and checks that it has as many
 * ids as the model's vocab_size. Prints the error and returns 1 on failure. */
int cli_open_tokenizer(const char *cmd, const char *path, const char *dir, const hg_model *m, hg_tokenizer **out);

#endif
