/* The tokenizer's internal layout, shared by its loaders, encoder, decoder and
 * trainer. Ids are int32 in [0, V). */
#ifndef HG_DATA_TOKENIZER_H
#define HG_DATA_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "handgrad_data.h"
#include "data/normalize.h"
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

/* Per-token flags. */
enum {
    TOK_ADDED = 1,      /* matched in the text before pre-tokenization, by its content */
    TOK_SPECIAL = 2,    /* an added token matched only with HG_ENCODE_ALLOW_SPECIAL */
    TOK_NORMALIZED = 4, /* an added token matched in the normalized text (else the raw text) */
    TOK_OUTSIDE = 8,    /* not a model token: kept out of the bytes -> id table */
    TOK_BYTE = 16,      /* a byte-fallback token <0xNN> (also TOK_OUTSIDE) */
    /* added tokens' matching rules, as the tokenizers package applies them: */
    TOK_LSTRIP = 32,      /* the match takes the whitespace before it */
    TOK_RSTRIP = 64,      /* ... and after it */
    TOK_SINGLE_WORD = 128 /* matched only where no word character touches it on either side */
};

/* The added tokens matched in one pass over the text: at the leftmost position where
 * any content matches, the longest content wins (the tokenizers package's
 * leftmost-longest rule). */
typedef struct tok_added_set {
    int32_t *ids;       /* (n) sorted by content bytes */
    int32_t n;
    int has_plain;      /* some are not special */
    uint8_t first[32];  /* bitmap of the contents' first bytes */
    int n_first;        /* distinct first bytes */
    uint8_t only_first; /* the first byte when n_first == 1 */
} tok_added_set;

struct hg_tokenizer {
    int32_t n_vocab;      /* V */
    int32_t eot;          /* <|endoftext|>, or -1 */
    int32_t bos;          /* what the post-processor prepends, or -1 */
    int32_t unk;          /* the model's unk_token, or -1 */
    uint32_t *off;        /* (V+1): token i has bytes blob[off[i] .. off[i+1]) */
    uint8_t *blob;
    uint8_t *flags;       /* (V) TOK_* */
    size_t max_token_len;
    int32_t byte_id[256]; /* the id of each single byte (-1: none, in a character-level model) */
    tok_mode mode;
    pair_table pairs;     /* (left, right) -> (rank, merged id) */
    bytes_table by_bytes; /* model tokens' bytes -> id */
    tok_merge *merges;    /* (n_merges) in rank order; NULL in TOK_MODE_RANKS */
    int32_t n_merges;
    pretok pre;
    tok_norm norm;        /* applied to the text between added tokens; empty: none */
    /* Added tokens' contents: content of id i is added_blob[added_off[i] .. added_off[i+1])
     * (empty unless TOK_ADDED); [0] matched in the raw text, [1] in the normalized text. */
    uint32_t *added_off;
    uint8_t *added_blob;
    tok_added_set added[2];
    void *word_class, *space_class; /* pcre2_code_8 for one character: Unicode \w and
                                       White_Space (compiled when a rule above needs them) */
    uint8_t ignore_merges;  /* a piece that is a model token is that token */
    uint8_t chars;          /* initial symbols are characters (sentencepiece style), else bytes */
    uint8_t fuse_unk;       /* consecutive unknown characters give one unk */
    uint8_t meta_prepend;   /* Metaspace: 0 never, 1 first, 2 always prepend a space to a piece */
    uint8_t strip_space;    /* decoding drops one leading space of the whole output */
    uint8_t cut_safe;       /* a cut after "\n" between ASCII graphic characters keeps pieces */
    uint8_t *source;        /* the tokenizer.json it came from (saved back as is), or NULL */
    size_t source_len;
};

/* Creates a tokenizer from V byte strings (token i is bytes[i][0..lens[i]), each
 * non-empty), eot = <|endoftext|>'s id or -1; eot is a special added token. Byte-level:
 * every byte must be a token. Tables are built by tok_build_*. src names the vocabulary
 * in messages. */
hg_status tok_create(hg_tokenizer **out, int32_t n_vocab, const uint8_t *const *bytes,
                     const uint32_t *lens, int32_t eot, const char *src);
/* The general form: flags (V) TOK_* (copied), or NULL for none. byte_level: every byte
 * must be a token. The eot is the token whose bytes are <|endoftext|> (an added one
 * first). Added tokens can be matched once tok_build_added has run. */
hg_status tok_create_flags(hg_tokenizer **out, int32_t n_vocab, const uint8_t *const *bytes,
                           const uint32_t *lens, const uint8_t *flags, int byte_level, const char *src);
/* Contents of the added tokens (content[i], clen[i] for each id flagged TOK_ADDED,
 * ignored for others; content NULL: their bytes), then the two matching sets. */
hg_status tok_build_added(hg_tokenizer *t, const uint8_t *const *content, const uint32_t *clen, const char *src);/* The longest content in set that s[0..n) starts with: its id and *len, or -1. */
int32_t tok_added_match(const hg_tokenizer *t, const tok_added_set *set, const uint8_t *s, size_t n, size_t *len);
/* Token id matched text[*start, *end): 0 when its single-word rule rejects the match;
 * else 1, with *start moved back over the whitespace before it (lstrip, not before
 * `from`, the end of the previous token) and *end on over the whitespace after it
 * (rstrip). */
int tok_added_rules(const hg_tokenizer *t, int32_t id, const uint8_t *text, size_t len, size_t from, size_t *start,
                    size_t *end);

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

/* Encodes normalized text with no added tokens into ids (room for cap); at_start: the
 * text begins the input (Metaspace's "first" scheme). */
hg_status tok_encode_ordinary(const hg_tokenizer *t, const uint8_t *text, size_t len, int at_start, int32_t *ids,
                              size_t cap, size_t *n_ids);

#endif
