/* Vocabulary parsers over memory buffers (the file loaders and the fuzz targets call
 * these). name is the file name used in messages. */
#ifndef HG_DATA_VOCAB_H
#define HG_DATA_VOCAB_H

#include <stddef.h>
#include <stdint.h>

#include "handgrad_data.h"

hg_status vocab_parse_tiktoken(hg_tokenizer **out, const uint8_t *buf, size_t len, const char *name);
hg_status vocab_parse_hf(hg_tokenizer **out, const uint8_t *json, size_t json_len, const char *json_name,
                         const uint8_t *merges, size_t merges_len, const char *merges_name);
hg_status vocab_parse_tokjson(hg_tokenizer **out, const uint8_t *buf, size_t len, const char *name);

/* Reads the file at path whole and parses it with one of the single-file parsers above. */
typedef hg_status vocab_parse_fn(hg_tokenizer **out, const uint8_t *buf, size_t len, const char *name);
hg_status vocab_load_file(hg_tokenizer **out, const char *path, vocab_parse_fn *parse);

#endif
