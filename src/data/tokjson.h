/* Reading a tokenizer.json: the parse context and JSON helpers shared by the model
 * reader (vocab_tokjson.c) and the pipeline reader (tokjson_pipeline.c). */
#ifndef HG_DATA_TOKJSON_H
#define HG_DATA_TOKJSON_H

#include <cjson/cJSON.h>

#include "data/tokenizer.h"

#define SPACE_MARK "\xe2\x96\x81" /* U+2581 "▁", sentencepiece's space */

typedef struct tj {
    const char *name; /* the file, in messages */
    int byte_level;   /* a ByteLevel pre-tokenizer: vocabulary in GPT-2's byte alphabet */
    int ends_byte_level; /* the pre-tokenizer ends in ByteLevel, known before its steps */
    int byte_fallback;
    int metaspace;    /* a Metaspace pre-tokenizer (sentencepiece style) */
    int meta_prepend; /* its prepend scheme: 0 never, 1 first, 2 always */
    int meta_split;
    int spaces_marked; /* the normalizer or pre-tokenizer turns " " into "▁" */
    int known_patterns;
    int strip_space;
} tj;

const cJSON *tj_get(const cJSON *o, const char *key);
int tj_is_null(const cJSON *j); /* absent or null */
/* Refuses keys of o that are not in allowed (NULL-terminated): a key handgrad does not
 * know may change the ids. path is the object's path in messages ("" for the root). */
hg_status tj_check_keys(const tj *c, const cJSON *o, const char *path, const char *const *allowed);
hg_status tj_want_object(const tj *c, const cJSON *o, const char *path);
/* A boolean key: absent or null gives dflt. */
hg_status tj_get_bool(const tj *c, const cJSON *o, const char *path, const char *key, int dflt, int *out);
hg_status tj_get_string(const tj *c, const cJSON *o, const char *path, const char *key, const char **out);
const char *tj_type_of(const cJSON *o); /* the "type" string, or NULL */
int tj_json_id(const cJSON *j, int32_t *id);  /* 1 when j is an integer in [0, 2^30) */

/* The pipeline around the model. The pre-tokenizer comes first: it decides how the
 * vocabulary is written (c->byte_level, c->metaspace). */
hg_status tj_parse_pre_tokenizer(tj *c, pretok *pre, const cJSON *p);
hg_status tj_parse_normalizer(tj *c, hg_tokenizer *t, const cJSON *n, const char *path);
/* Sets t->bos from a TemplateProcessing. */
hg_status tj_parse_post_processor(const tj *c, hg_tokenizer *t, const cJSON *p, const char *path);
hg_status tj_parse_decoder(tj *c, const cJSON *d);

#endif
