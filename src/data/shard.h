/* Token shard formats: handgrad's own (a 64-byte header, docs/formats.md), llm.c's
 * (256 int32 header words) and nanoGPT's raw uint16 files. Parsing works on bytes in
 * memory (a mapped file, or a fuzz input) and checks every length before reading. */
#ifndef HG_DATA_SHARD_H
#define HG_DATA_SHARD_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "handgrad_data.h"

#define SHARD_MAGIC "HGTOKENS"
#define SHARD_VERSION 2 /* written; version 1 (no flags) is still read */
#define SHARD_HAS_FLAGS 1u /* the header's streams word (offset 36): the flags follow the tokens */
#define SHARD_HEADER_BYTES 64
#define LLMC_MAGIC 20240520
#define LLMC_VERSION 1
#define LLMC_HEADER_BYTES 1024

/* Checks the header and length of a shard of len bytes; *tokens_at receives the
 * offset of the first token. path names the file in messages. */
hg_status shard_parse(const uint8_t *data, size_t len, const char *path, hg_shard_format format,
                      hg_shard_info *info, size_t *tokens_at);

/* Token i of a shard's token bytes (little-endian, width 2 or 4). */
static inline uint32_t shard_token(const uint8_t *tokens, int width, uint64_t i) {
    const uint8_t *p = tokens + i * (uint64_t)width;
    return width == 2 ? (uint32_t)p[0] | (uint32_t)p[1] << 8
                      : (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Writes one handgrad shard: the header is finished with the count on close, and the
 * file appears under its name only then (written as path.tmp, renamed). With flags, each
 * write gives a flag byte a token (HG_TOKEN_*), held in memory and written after the
 * tokens on close. */
typedef struct shard_writer {
    FILE *f;
    char *path;
    uint64_t count;
    int width;       /* 2 when V <= 65536, else 4 */
    int vocab_size;
    int32_t eot;
    uint32_t id_bound; /* largest id written + 1 */
    int with_flags;
    uint8_t *flags;    /* count of them, with_flags */
    size_t flags_cap;
} shard_writer;

hg_status shard_writer_open(shard_writer *w, const char *path, int vocab_size, int32_t eot, int with_flags);
/* n tokens, and with flags n flag bytes (NULL otherwise). */
hg_status shard_writer_write(shard_writer *w, const int32_t *ids, const uint8_t *flags, size_t n);
hg_status shard_writer_close(shard_writer *w);
void shard_writer_abort(shard_writer *w);

#endif
