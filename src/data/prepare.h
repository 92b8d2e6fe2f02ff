/* Internal entry to data preparation with the work-unit size exposed, so tests can
 * check that cutting documents into units does not change the tokens. */
#ifndef HG_DATA_PREPARE_H
#define HG_DATA_PREPARE_H

#include "data/shard.h"
#include "handgrad_data.h"

/* Documents longer than unit_bytes are encoded in units of about that size, cut only
 * where the cut provably leaves the pieces unchanged: after a '\n' that has an ASCII
 * non-space character on both sides. */
#define PREPARE_UNIT_BYTES (1u << 20)

hg_status prepare_files_units(const hg_tokenizer *tok, const char *const *inputs, int n_inputs,
                              const hg_prepare_options *opt, size_t unit_bytes, hg_prepare_stats *stats);

/* The shards of one split, written in turn: DIR/SPLIT_NNNNNN.bin, at most shard_tokens
 * tokens each, with token flags when with_flags. */
typedef struct prep_out {
    const char *dir, *split;
    const hg_tokenizer *tok;
    int32_t sep; /* recorded in the shard header */
    uint64_t shard_tokens, tokens;
    int n_shards; /* shards opened so far */
    int with_flags;
    shard_writer w;
    int open;
} prep_out;

/* Appends n tokens (and with flags their flag bytes). whole: a new shard rather than cut
 * them, unless they alone are more than a shard. */
hg_status prep_out_write(prep_out *o, const int32_t *ids, const uint8_t *flags, size_t n, int whole);
/* Closes the last shard and removes shards of the same split left by an earlier run. */
hg_status prep_out_finish(prep_out *o);
/* The options' folder (created), fraction and shard size. */
hg_status prepare_check(int n_inputs, const hg_prepare_options *opt);

/* Chat records (prepare_chat.c), one at a time: the fuzz target's way in. tmpl: a chat
 * template's source (NULL: none, and "messages" records are refused); bos, eos: its
 * tokens' text (NULL: undefined); source names the config in messages. */
typedef struct prep_chat prep_chat;
hg_status prep_chat_create(prep_chat **out, const hg_tokenizer *tok, const char *tmpl, const char *bos, const char *eos,
                           const char *source);
/* The template's date_string (NULL: undefined); the text must outlive c. */
void prep_chat_date(prep_chat *c, const char *date_string);
/* One JSONL line into ids and HG_TOKEN_* flags (n of each; 0 for a blank line), valid
 * until the next call. */
hg_status prep_chat_record(prep_chat *c, const char *line, size_t len, hg_train_on on, const int32_t **ids,
                           const uint8_t **flags, size_t *n);
void prep_chat_free(prep_chat *c);

#endif
