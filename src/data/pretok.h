/* GPT-2's pre-tokenizer: splits text into the pieces that BPE then encodes on their
 * own. It is PCRE2 (with JIT when available) running GPT-2's pattern
 *
 *   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 *
 * with \s spelled \p{White_Space}, which is what the Rust regex behind tiktoken
 * means by \s (PCRE2's own \s also takes U+180E). */
#ifndef HG_DATA_PRETOK_H
#define HG_DATA_PRETOK_H

#include <stddef.h>
#include <stdint.h>

#include "handgrad.h"

typedef struct pretok {
    void *code; /* pcre2_code_8 */
    int jit;    /* 1 when JIT-compiled */
} pretok;

hg_status pretok_init(pretok *p);
void pretok_free(pretok *p);

/* Iterates the pieces of a valid UTF-8 subject. Not shared between threads; the
 * compiled pattern is. */
typedef struct pretok_iter {
    const pretok *p;
    void *match; /* pcre2_match_data_8 */
    const uint8_t *subject;
    size_t n, pos;
} pretok_iter;

/* The subject PCRE2 matches for arbitrary bytes: the text itself when it is valid
 * UTF-8, else a copy with each invalid byte replaced by '#', so that an invalid byte
 * splits like a character that is no letter, number or space. Piece offsets are the
 * same in both. *owned is the copy to free, or NULL. */
hg_status pretok_subject(const uint8_t *text, size_t len, const uint8_t **subject, uint8_t **owned);

hg_status pretok_iter_init(pretok_iter *it, const pretok *p, const uint8_t *subject, size_t n);
/* Sets the next piece [*start, *end); returns 0 at the end of the subject. */
int pretok_iter_next(pretok_iter *it, size_t *start, size_t *end);
void pretok_iter_free(pretok_iter *it);

#endif
