/* handgrad_data.h - tokenizer, token shards and the batch loader of libhandgrad.
 *
 * Tokenizer. BPE: text is split into pieces by a pre-tokenization pattern (PCRE2),
 * each piece's bytes start as byte tokens and pairs merge lowest rank first. Loads
 * Hugging Face tokenizer.json files (the BPE models of GPT-2, Llama 3, Qwen2 and
 * Mistral/Llama 2 with their pre-tokenizer patterns, normalizers, added and special
 * tokens), Hugging Face vocabularies (vocab.json + merges.txt) and tiktoken rank files
 * (gpt2.tiktoken), trains new ones, saves in the Hugging Face format. Encoded ids equal
 * tiktoken's for a tiktoken file and the tokenizers package's for a tokenizer.json.
 * Special tokens (<|endoftext|>, a tokenizer.json's special added tokens) are never
 * produced from text unless HG_ENCODE_ALLOW_SPECIAL is passed.
 *
 * Shards. `handgrad prepare` (hg_prepare_files) writes token shards: a 64-byte header
 * (magic "HGTOKENS", version, token width, count, V) then the tokens, see
 * docs/formats.md. The loader also reads nanoGPT's raw uint16 train.bin/val.bin and
 * llm.c's shards.
 *
 * Loader. Maps shards and fills caller buffers with (B, T) inputs and the (B, T)
 * targets shifted by one, from windows of T+1 tokens; sequential or seeded shuffled
 * order, disjoint slices per rank, an exact resume position, no allocation per batch.
 *
 * Example: tokenize, then read batches.
 *
 *     hg_tokenizer *tok;
 *     if (hg_tokenizer_load(&tok, "assets/gpt2.tiktoken") != HG_OK) {
 *         fprintf(stderr, "%s\n", hg_last_error());
 *         return 1;
 *     }
 *     int32_t ids[64];
 *     size_t n;
 *     hg_tokenizer_encode(tok, "Hello world", 11, 0, ids, 64, &n); // 15496 995
 *
 *     hg_loader_options o = hg_loader_options_default();
 *     o.batch = 4; o.seq_len = 64; o.shuffle = 1; o.seed = 1;
 *     hg_loader *ld;
 *     hg_loader_open_glob(&ld, "data/kjv/train_*.bin", &o);
 *     int32_t x[4 * 64], y[4 * 64];                 // (B, T) each
 *     for (int step = 0; step < 100; step++) hg_loader_next(ld, x, y);
 *     hg_loader_position pos = hg_loader_tell(ld);  // save with the checkpoint
 *     hg_loader_close(ld);
 *     hg_tokenizer_free(tok);
 *
 * Every call that can fail returns hg_status; hg_last_error() then names the file
 * and the line or byte offset at fault. */
#ifndef HANDGRAD_DATA_H
#define HANDGRAD_DATA_H

#include <stddef.h>
#include <stdint.h>

#include "handgrad.h"

#ifdef __cplusplus
extern "C" {
#endif
#if defined(__GNUC__) && !defined(__CUDACC__)
#pragma GCC visibility push(default) /* what a shared libhandgrad exports: this API only */
#endif

/* ------------------------------------------------------------- tokenizer */

typedef struct hg_tokenizer hg_tokenizer;

/* Loads by path: a .tiktoken file; a file whose name ends in tokenizer.json; a
 * vocab.json (merges.txt beside it); or a folder holding tokenizer.json or, when it
 * has none, vocab.json and merges.txt. */
hg_status hg_tokenizer_load(hg_tokenizer **out, const char *path);
/* A Hugging Face tokenizer.json with a BPE model, as the tokenizers package runs it:
 *  - added_tokens are matched in the text before anything else, longest first at the
 *    leftmost position; the non-special ones always, the special ones only with
 *    HG_ENCODE_ALLOW_SPECIAL (without it their text is encoded as ordinary text);
 *  - the normalizer (null, NFC, or Prepend/Replace as Mistral and Llama 2 use) runs on
 *    the text between them;
 *  - the pre-tokenizer (ByteLevel, or a Sequence of Split regexes and Digits followed
 *    by ByteLevel; or Metaspace) splits it; its regexes are read from the file;
 *  - BPE merges each piece by the file's merges (ignore_merges: a piece that is a
 *    vocabulary token is that token; byte_fallback: characters that are no token
 *    become their <0xNN> byte tokens).
 * V is 1 + the largest id in model.vocab and added_tokens; every id below it must be a
 * token. Anything in the file that would change the ids and that handgrad does not
 * run (another model type, dropout, lstrip/rstrip/single_word, other normalizers,
 * pre-tokenizers, post-processors or decoders, ...) is refused with HG_ERR_UNSUPPORTED
 * and a message naming the file and the key. Token bytes (hg_tokenizer_token_bytes,
 * decoding) are the decoded text: "Ġ" or "▁" is a space, <0xNN> is its byte, an added
 * token is its content. */
hg_status hg_tokenizer_load_tokjson(hg_tokenizer **out, const char *path);
/* Hugging Face format. The entry "<|endoftext|>" in vocab.json is the special token.
 * Pairs merge by their line in merges.txt. */
hg_status hg_tokenizer_load_hf(hg_tokenizer **out, const char *vocab_json, const char *merges_txt);
/* tiktoken format: one "base64(bytes) rank" per line; the id of a token is its rank.
 * Adds <|endoftext|> with the id after the last rank (50256 for GPT-2). Encoding
 * follows tiktoken: a piece that is a whole token is that token, otherwise adjacent
 * parts whose concatenation is a token merge, lowest rank first. */
hg_status hg_tokenizer_load_tiktoken(hg_tokenizer **out, const char *path);
/* Writes dir/tokenizer.json, byte for byte the file it was loaded from, when the
 * tokenizer came from one; otherwise dir/vocab.json and dir/merges.txt. The folder
 * must exist. */
hg_status hg_tokenizer_save_hf(const hg_tokenizer *tok, const char *dir);
void hg_tokenizer_free(hg_tokenizer *tok);

int hg_tokenizer_vocab_size(const hg_tokenizer *tok); /* V: ids are in [0, V) */
int32_t hg_tokenizer_eot(const hg_tokenizer *tok);    /* <|endoftext|>'s id, or -1 */
/* The id a tokenizer.json's post-processor puts before every text (Llama 3's
 * <|begin_of_text|>), or -1. hg_tokenizer_encode never adds it: prepend it yourself. */
int32_t hg_tokenizer_bos(const hg_tokenizer *tok);
/* The id of a token given as text: an added or special token by its content
 * ("<|eot_id|>", "<s>"), else an ordinary token by its bytes (" the"), or, in a
 * byte-fallback vocabulary, a byte token by its name ("<0x0A>"). HG_ERR_INVALID naming
 * the text when there is none. */
hg_status hg_tokenizer_token_id(const hg_tokenizer *tok, const char *text, int32_t *id);
size_t hg_tokenizer_max_token_bytes(const hg_tokenizer *tok);
/* The bytes of one token (not NUL-terminated; valid while tok lives). */
hg_status hg_tokenizer_token_bytes(const hg_tokenizer *tok, int32_t id, const uint8_t **bytes, size_t *len);

#define HG_ENCODE_ALLOW_SPECIAL 1 /* special tokens' text ("<|endoftext|>") becomes their ids */

/* The most ids len bytes of text can give: len, except with a normalizer that can
 * lengthen the text (NFC, a prepended "▁"). */
size_t hg_tokenizer_max_ids(const hg_tokenizer *tok, size_t len);
/* Encodes len bytes of text (any bytes; invalid UTF-8 is encoded as bytes) into ids;
 * *n_ids receives the count. cap must be at least len; hg_tokenizer_max_ids(tok, len)
 * is always enough, and with less room the call fails with HG_ERR_INVALID when the ids
 * do not fit. Safe to call from many threads on one tokenizer. */
hg_status hg_tokenizer_encode(const hg_tokenizer *tok, const void *text, size_t len, int flags,
                              int32_t *ids, size_t cap, size_t *n_ids);
/* Decodes n ids to bytes. Writes at most cap bytes and sets *n_bytes to the full
 * length, as snprintf does: the output is whole when *n_bytes <= cap. The ids are one
 * whole text: a sentencepiece-style decoder (Strip) drops its leading space. */
hg_status hg_tokenizer_decode(const hg_tokenizer *tok, const int32_t *ids, size_t n, void *out,
                              size_t cap, size_t *n_bytes);

/* Streaming decoder: decodes one id at a time and holds back the bytes of a UTF-8
 * character that is not complete yet, so that each chunk it gives out can be printed.
 * The chunks, followed by the flush, always add up to hg_tokenizer_decode's bytes. */
typedef struct hg_decoder hg_decoder;
hg_status hg_decoder_create(hg_decoder **out, const hg_tokenizer *tok);
/* out must hold hg_tokenizer_max_token_bytes(tok) + 3 bytes. */
hg_status hg_decoder_push(hg_decoder *dec, int32_t id, void *out, size_t cap, size_t *n_bytes);
/* Gives out the held-back bytes (at most 3). */
hg_status hg_decoder_flush(hg_decoder *dec, void *out, size_t cap, size_t *n_bytes);
void hg_decoder_free(hg_decoder *dec);

/* BPE training: add texts, then finish with a tokenizer of vocab_size ids: 256 byte
 * tokens (in GPT-2's byte order), vocab_size - 257 merges, and <|endoftext|> last.
 * Texts are pre-tokenized as in encoding; "<|endoftext|>" in a text separates
 * documents and is not learned. The most frequent pair merges first; ties go to the
 * smaller (left id, right id). Fewer merges are learned when no pair is left. */
typedef struct hg_bpe_trainer hg_bpe_trainer;
hg_status hg_bpe_trainer_create(hg_bpe_trainer **out, int vocab_size);
hg_status hg_bpe_trainer_add(hg_bpe_trainer *tr, const void *text, size_t len);
hg_status hg_bpe_trainer_finish(hg_bpe_trainer *tr, hg_tokenizer **out);
void hg_bpe_trainer_free(hg_bpe_trainer *tr);

/* ---------------------------------------------------------------- shards */

typedef enum hg_shard_format {
    HG_SHARD_AUTO = 0, /* by header: handgrad, then llm.c; else a .bin file is nanoGPT */
    HG_SHARD_HANDGRAD, /* "HGTOKENS" header, uint16 or uint32 tokens */
    HG_SHARD_LLMC,     /* 256 int32 header (20240520, 1, count), uint16 tokens */
    HG_SHARD_NANOGPT,  /* no header, uint16 tokens */
} hg_shard_format;

typedef struct hg_shard_info {
    hg_shard_format format;
    int token_bytes;   /* 2 or 4 */
    uint64_t n_tokens;
    int vocab_size;    /* V recorded in a handgrad header; 0 when the format has none */
    int32_t separator; /* the document separator id a handgrad header records; -1 if none */
    uint32_t id_bound; /* every token is below it, as a handgrad header records (its
                          largest id + 1); 0 when not recorded */
    int has_flags;     /* a handgrad version 2 shard with a byte of HG_TOKEN_* flags a
                          token after the tokens (chat data: the loss mask, the
                          documents); 0: every token a target, documents start at the
                          separator */
} hg_shard_info;

/* A token's flags in a shard that has them (docs/formats.md). */
enum {
    HG_TOKEN_TRAIN = 1, /* the loss counts predicting this token */
    HG_TOKEN_DOC = 2,   /* a document starts at this token */
};

/* Reads and checks a shard's header and length. */
hg_status hg_shard_inspect(const char *path, hg_shard_format format, hg_shard_info *out);

/* --------------------------------------------------------------- prepare */

/* Progress of a long job; bytes of input done so far out of total. */
typedef void hg_progress_fn(void *ctx, uint64_t bytes_done, uint64_t bytes_total, uint64_t tokens_done);

typedef struct hg_prepare_options {
    const char *out_dir;   /* created if missing; shards train_NNNNNN.bin, val_NNNNNN.bin */
    double val_fraction;   /* in [0, 1): the last fraction of the input bytes, from a line
                              start (val is empty when no line starts there) */
    uint64_t shard_tokens; /* most tokens in one shard */
    int threads;           /* encoding threads; 0 means all cores */
    const char *separator; /* the token that starts every document, whose text also
                              splits documents inside a file ("<|eot_id|>", "<s>"); NULL:
                              <|endoftext|> when the tokenizer has it, else its BOS */
    hg_progress_fn *progress; /* may be NULL */
    void *progress_ctx;
} hg_prepare_options;

hg_prepare_options hg_prepare_options_default(void); /* val 0.05, 100M tokens a shard */

typedef struct hg_prepare_stats {
    uint64_t bytes, documents, train_tokens, val_tokens;
    int train_shards, val_shards;
    uint64_t targets;   /* hg_prepare_chat: tokens the loss is on (HG_TOKEN_TRAIN) */
    uint64_t untrained; /* hg_prepare_chat: records left out, having no trained token */
} hg_prepare_stats;

/* Tokenizes the input files into shards. Each file, and each part of a file between
 * markers (the separator token's text, "<|endoftext|>" by default), is one document;
 * every document starts with the separator token. The split into train and val is by position: val is the tail of the input
 * from the first line start at or after (1 - val_fraction) of its bytes. */
hg_status hg_prepare_files(const hg_tokenizer *tok, const char *const *inputs, int n_inputs,
                           const hg_prepare_options *opt, hg_prepare_stats *stats);

/* Which tokens of a conversation the loss is on. */
typedef enum hg_train_on {
    HG_TRAIN_ON_ASSISTANT = 0, /* every assistant message's (its end-of-turn included) */
    HG_TRAIN_ON_ALL,           /* every token's */
    HG_TRAIN_ON_LAST,          /* the last assistant message's */
} hg_train_on;

typedef struct hg_chat_options {
    const char *config; /* a tokenizer_config.json: its chat_template, bos_token, eos_token */
    hg_train_on train_on;
    const char *date_string; /* the template's date_string ("26 Jul 2024"); NULL: undefined,
                                and a template that prints the date (Llama 3.2's) prints
                                today's, as transformers does, so the shards depend on it */
} hg_chat_options;

/* Chat data into shards with token flags (a loss mask, and where each record starts):
 * JSONL files, a record a line, either {"messages": [{"role": "system" | "user" |
 * "assistant", "content": TEXT}, ...]}, rendered with the config's chat template as
 * transformers' apply_chat_template renders it and encoded with special tokens, or
 * {"prompt": TEXT, "completion": TEXT}, encoded as the tokenizer's BOS (if any), the
 * prompt, the completion and eos_token, the loss on the completion and eos. An
 * assistant message's tokens are found by rendering the conversation up to it (with
 * the generation prompt, which is not trained) and through it. A record with no
 * trained token is left out and counted (stats->untrained). val is the last
 * val_fraction of the records. Errors name the file and line, and the field or the
 * template's line; shards already written by the call are removed on failure. */
hg_status hg_prepare_chat(const hg_tokenizer *tok, const char *const *inputs, int n_inputs,
                          const hg_prepare_options *opt, const hg_chat_options *chat, hg_prepare_stats *stats);

/* ---------------------------------------------------------------- loader */

/* How the loader cuts rows of T+1 tokens out of the shards. */
typedef enum hg_loader_rows {
    HG_ROWS_WINDOWS = 0, /* windows every T tokens, across documents (pretraining) */
    HG_ROWS_PADDED,      /* a document a row, padded to T+1 with targets of -1; a longer
                            document is cut into windows of T+1 every T tokens, or
                            refused with no_split. Causal attention never reads the
                            padding, so a row computes as its document alone. */
    HG_ROWS_PACKED,      /* those documents (and pieces), several to a row of T inputs,
                            best fit (a document of L tokens takes L, its last token
                            no target), the rest of the row padding; each
                            token's position in its document comes with the batch
                            (hg_loader_next_rows) for hg_set_positions, so that no
                            document attends to another */
} hg_loader_rows;

typedef struct hg_loader_options {
    int batch;           /* B */
    int seq_len;         /* T: windows are T+1 tokens; windows follow each other every
                            T tokens within a shard and never cross shards */
    int rank, world_size;/* this process's slice: batches are disjoint across ranks */
    int shuffle;         /* 0: windows in order; 1: a seeded permutation per epoch */
    uint64_t seed;
    int vocab_size;      /* V: a token >= V is an error naming file and offset; 0 takes
                            V from the handgrad header, else 65536 for uint16 formats */
    hg_shard_format format;
    hg_loader_rows rows;
    int no_split;        /* HG_ROWS_PADDED, PACKED: a document longer than T+1 tokens is
                            an error */
} hg_loader_options;

hg_loader_options hg_loader_options_default(void); /* B=1, T=1024, rank 0 of 1, in order */

/* Where the loader stands: the next batch is batch `batch` of epoch `epoch`. */
typedef struct hg_loader_position {
    uint64_t epoch;
    uint64_t batch;
} hg_loader_position;

typedef struct hg_loader hg_loader;

/* Maps the shards (in the order given) and checks their headers and every token: a
 * token >= V, or a header separator id >= V, fails here naming the file and offset, not
 * at the batch that reads it. A handgrad shard's header bound on its ids answers this
 * at once; other shards are read once (docs/benchmarks.md has the cost).
 * Fails when there is not one full batch for every rank: B * world_size windows of T+1
 * tokens. */
hg_status hg_loader_open(hg_loader **out, const char *const *paths, int n_paths, const hg_loader_options *opt);
/* The shards that match a glob pattern, in sorted order. */
hg_status hg_loader_open_glob(hg_loader **out, const char *pattern, const hg_loader_options *opt);
/* Fills tokens (B, T) and targets (B, T) (targets[t] = tokens[t+1] of each window, or -1
 * where that token's HG_TOKEN_TRAIN flag is clear, and past a padded row's document) and
 * advances; after the last batch of an epoch comes the first of the next. */
hg_status hg_loader_next(hg_loader *ld, int32_t *tokens, int32_t *targets);
/* hg_loader_next, and positions (B, T) (NULL: not wanted): each input's position in its
 * document (a window's or padded row's 0..T-1; in a packed row 0.. for each document,
 * and again for the padding). HG_ROWS_PACKED needs them. */
hg_status hg_loader_next_rows(hg_loader *ld, int32_t *tokens, int32_t *targets, int32_t *positions);
hg_loader_position hg_loader_tell(const hg_loader *ld);
/* Continues exactly from a position that hg_loader_tell gave with the same shards and
 * options. */
hg_status hg_loader_seek(hg_loader *ld, hg_loader_position pos);
hg_status hg_loader_reset(hg_loader *ld); /* back to batch 0 of epoch 0 */
uint64_t hg_loader_batches_per_epoch(const hg_loader *ld);
uint64_t hg_loader_tokens(const hg_loader *ld); /* tokens in all shards */
/* Rows (windows, or padded documents and their pieces) in all shards, and of them the
 * documents cut into pieces (HG_ROWS_PADDED). */
uint64_t hg_loader_rows_total(const hg_loader *ld);
uint64_t hg_loader_split_documents(const hg_loader *ld);
/* The tokens the rows hold (each window T+1; a padded row its document's; a packed row
 * its documents'), against the rows' T+1 each: what padding leaves of the compute. */
uint64_t hg_loader_row_tokens(const hg_loader *ld);
/* Whether the shards carry token flags (a loss mask): every shard, or none. */
int hg_loader_has_flags(const hg_loader *ld);
void hg_loader_close(hg_loader *ld);

#if defined(__GNUC__) && !defined(__CUDACC__)
#pragma GCC visibility pop
#endif

#ifdef __cplusplus
}
#endif

#endif /* HANDGRAD_DATA_H */
