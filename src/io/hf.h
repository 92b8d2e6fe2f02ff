/* Hugging Face GPT-2 interop inside the library: config.json parsing and writing, and
 * loading model.safetensors weights by name (public API: hg_model_load_hf and friends
 * in include/handgrad.h). */
#ifndef HG_IO_HF_H
#define HG_IO_HF_H

#include <stddef.h>

#include "handgrad.h"
#include "io/safetensors.h"

/* Parses a config.json image; `name` is used in messages. Rejects every field value
 * handgrad cannot compute, naming the field. */
hg_status hf_config_parse(const char *name, const char *text, size_t len, hg_config *cfg);
/* config.json text for cfg (malloc'd, NULL when out of memory); eot < 0 leaves out the
 * bos/eos token ids. */
char *hf_config_json(const hg_config *cfg, int eot);
/* Fills every parameter of m from f: names with or without "transformer.", mask buffers
 * skipped, lm_head.weight accepted when equal to wte.weight; shapes must match exactly;
 * F32, F16, BF16 or F64. `name` (the file) is used in messages. */
hg_status hf_load_weights(hg_model *m, const hg_st_file *f, const char *name);

#endif
