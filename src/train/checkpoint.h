/* Checkpoint metadata: the model config as JSON and the training state as decimal
 * strings in a safetensors file's "__metadata__" (docs/formats.md). Separate from the
 * file I/O in checkpoint.c so the fuzz target can reach the parsers. */
#ifndef HG_TRAIN_CHECKPOINT_H
#define HG_TRAIN_CHECKPOINT_H

#include "handgrad.h"
#include "io/safetensors.h"

#define CKPT_WEIGHTS_FORMAT "handgrad-weights"
#define CKPT_OPTIMIZER_FORMAT "handgrad-optimizer"
#define CKPT_VERSION "2" /* 2 records the architecture; 1 (GPT-2 only) still loads */
/* Weights a Hugging Face class holds are written in its names and layouts instead, so a
 * checkpoint folder with config.json is a folder transformers loads: metadata "format"
 * "pt" (transformers requires it), "handgrad" "weights", "version" "3", "config" and
 * "architecture" (the class). */
#define CKPT_HF_MARK "weights"
#define CKPT_HF_VERSION "3"

/* The config as one JSON object; returns a malloc'd string or NULL. */
char *ckpt_config_json(const hg_config *cfg);
/* Parses and validates a config JSON object; messages name `file`. */
hg_status ckpt_config_parse(const char *file, const char *json, hg_config *out);
/* Checks "format" and "version" and reads "config" from a file's metadata. A weights
 * file (format CKPT_WEIGHTS_FORMAT) may be either layout; *arch (may be NULL) gets the
 * architecture class of one in Hugging Face layout, or NULL for handgrad's own. */
hg_status ckpt_read_config(const hg_st_file *f, const char *file, const char *format, hg_config *out,
                           const char **arch);

/* Writes the parameter-shaped buffers bufs[0..nbufs) (param, or under a prefix adam_m,
 * adam_v) to path as tensors named prefixes[b] + the parameter's name, in the type the
 * model holds them, with n_meta metadata pairs. */
hg_status ckpt_write_tensors(const hg_model *m, const char *path, void *const *bufs, const char *const *prefixes,
                             int nbufs, const char *const *meta, int n_meta);

/* Optimizer-file metadata beyond the config. */
typedef struct ckpt_state {
    hg_train_state train;
    int64_t adam_t;
    uint64_t rng_counter;
} ckpt_state;

/* Writes an optimizer file from moments laid out like the parameter table (gpt_moment_at,
 * in the model's state type). */
hg_status ckpt_optimizer_write(const hg_model *m, const hg_train_state *st, const char *path, void *mbuf, void *vbuf);

hg_status ckpt_read_state(const hg_st_file *f, const char *file, ckpt_state *out);

#endif
