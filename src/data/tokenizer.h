/* The tokenizer's internal layout, shared by its loaders, encoder, decoder and
 * trainer. Ids are int32 in [0, V). */
#ifndef HG_DATA_TOKENIZER_H
#define HG_DATA_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "handgrad_data.h"
#include "data/pretok.h"
#include "data/table.h"

#define HG_EOT_TEXT "<|endoftext|>"
#define HG_EOT_LEN 13

/* How pairs merge. */
typedef enum tok_mode {
    TOK_MODE_MERGES, /* Hugging Face: the pairs listed in merges.txt, by line */
    TOK_MODE_RANKS,  /* tiktoken: any two parts whose concatenation is a token, by that
                        token's rank; a piece that is a whole token skips BPE */
} tok_mode;

typedef struct tok_merge {
    int32_t left, right, id;
} tok_merge;

struct hg_tokenizer {
    int32_t n_vocab;      /* V */
    int32_t eot;          /* <|endoftext|>, or -1 */
    uint32_t *off;        /* (V+1): token i has bytes blob[off[i] .. off[i+1]) */
    uint8_t *blob;
    size_t max_token_len;
    int32_t byte_id[256]; /* the id of each single byte */
    tok_mode mode;
    pair_table pairs;     /* (left, right) -> (rank, merged id) */
    bytes_table by_bytes; /* ordinary tokens' bytes -> id */
    tok_merge *merges;    /* (n_merges) in rank order; NULL in TOK_MODE_RANKS */
    int32_t n_merges;
    pretok pre;
};

/* Creates a tokenizer from V byte strings (token i is bytes[i][0..lens[i]), each
 * non-empty), eot = <|endoftext|>'s id or -1. Tables are built by tok_build_*.
 * src names the vocabulary in messages. */
hg_status tok_create(hg_tokenizer **out, int32_t n_vocab, const uint8_t *const *bytes,
                     const uint32_t *lens, int32_t eot, const char *src);
/* TOK_MODE_MERGES from merges (taken over by the tokenizer, malloc'd). */
hg_status tok_build_merges(hg_tokenizer *t, tok_merge *merges, int32_t n_merges, const char *src);
/* TOK_MODE_RANKS: rank = id. */
hg_status tok_build_ranks(hg_tokenizer *t, const char *src);

/* BPE of one piece: ids (n) hold the byte ids on entry and the merged ids on return;
 * returns the new count. Only pairs with rank < max_rank merge. The small version
 * rescans every step (n <= BPE_SMALL_MAX), the large one keeps a heap; both merge the
 * lowest rank first and the leftmost among equal ranks, as tiktoken does. */
#define BPE_SMALL_MAX 128
size_t bpe_merge_small(const hg_tokenizer *t, int32_t *ids, size_t n, int32_t max_rank);
hg_status bpe_merge_large(const hg_tokenizer *t, int32_t *ids, size_t n, int32_t max_rank, size_t *n_out);

/* Encodes text with no special tokens into ids (room for len). */
hg_status tok_encode_ordinary(const hg_tokenizer *t, const uint8_t *text, size_t len, int32_t *ids, size_t *n_ids);

#endif
