/* Pre-tokenization: splits text into the pieces that BPE then encodes on their own.
 *
 * A pre-tokenizer is a list of steps, each a PCRE2 pattern (JIT-compiled when
 * available) applied in order, each to the pieces of the one before, as Hugging Face's
 * Sequence of Split steps does. A step isolates its matches by default: each match is a
 * piece, and so is each stretch of text between matches; the other behaviors drop the
 * matches, drop the text between them, or join each match to the text before it. With
 * no steps the whole text is one piece.
 *
 * The default (pretok_init) is GPT-2's single pattern
 *
 *   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 *
 * with \s spelled \p{White_Space}, which is what the Rust regex behind tiktoken and
 * Oniguruma behind the tokenizers package mean by \s (PCRE2's own \s also takes
 * U+180E). It matches at every position, so it runs anchored. Patterns read from a
 * tokenizer.json are written for Oniguruma and go through pretok_translate first. */
#ifndef HG_DATA_PRETOK_H
#define HG_DATA_PRETOK_H

#include <stddef.h>
#include <stdint.h>

#include "handgrad.h"

#define PRETOK_MAX_STEPS 8

/* What a step makes of its matches and of the text between them (the gaps), as the
 * tokenizers package's Split behaviors do. */
typedef enum pretok_behavior {
    PRETOK_ISOLATED = 0, /* matches and gaps are pieces (Isolated, inverted or not) */
    PRETOK_REMOVED,      /* gaps are pieces, matches are dropped (Removed) */
    PRETOK_MATCHES_ONLY, /* matches are pieces, gaps are dropped (Removed, inverted) */
    PRETOK_MERGED_PREV,  /* a match joins the gap before it (MergedWithPrevious) */
} pretok_behavior;

typedef struct pretok_step {
    void *code;   /* pcre2_code_8 */
    int jit;      /* 1 when JIT-compiled */
    int anchored; /* matches at every position, so no text lies between matches */
    pretok_behavior behavior;
} pretok_step;

typedef struct pretok {
    pretok_step step[PRETOK_MAX_STEPS];
    int n_steps;  /* 0: the whole text is one piece */
    int may_drop; /* a step may leave text out of every piece (its owner sets this) */
} pretok;

/* GPT-2's pattern, one step. */
hg_status pretok_init(pretok *p);
/* No steps yet (a zeroed struct is the same). */
void pretok_init_empty(pretok *p);
/* Appends GPT-2's pattern as a step. */
hg_status pretok_add_gpt2(pretok *p);
/* Appends a step: a PCRE2 pattern (literal: the pattern is plain text). where names
 * the pattern in messages, e.g. "tokenizer.json: pre_tokenizer.pattern.Regex". */
hg_status pretok_add(pretok *p, const char *pattern, size_t len, int literal, const char *where);
/* The same with a behavior other than PRETOK_ISOLATED. */
hg_status pretok_add_split(pretok *p, const char *pattern, size_t len, int literal, pretok_behavior behavior,
                           const char *where);
void pretok_free(pretok *p);

/* Rewrites an Oniguruma pattern (Ruby syntax, as the tokenizers package compiles it)
 * into a PCRE2 pattern that matches the same: \s \S \d \D \w \W \h \H \v \uHHHH are
 * spelled out with Unicode properties. Constructs whose meaning differs and that are
 * not rewritten (\b, back references, POSIX brackets, nested classes, (?m), ...) are
 * refused: returns NULL and sets *why and *at (byte offset). The result is malloc'd. */
char *pretok_translate(const char *pattern, size_t len, const char **why, size_t *at);

/* One step's position within a piece of the step before. */
typedef struct pretok_level {
    size_t start, end;     /* the piece this step splits */
    size_t pos;            /* next piece starts here */
    size_t search;         /* next search starts here */
    size_t last_match_end; /* end of the last match, for the empty-match rule */
    size_t pend_s, pend_e; /* a match waiting behind the text before it */
    int has_pend, has_last, done;
} pretok_level;

/* Iterates the pieces of a valid UTF-8 subject. Not shared between threads; the
 * compiled patterns are. */
typedef struct pretok_iter {
    const pretok *p;
    void *match; /* pcre2_match_data_8 */
    const uint8_t *subject;
    size_t n, pos;
    int depth;
    int failed; /* a pattern's match failed (e.g. its backtracking limit): see pretok_iter_error */
    size_t failed_at;
    pretok_level lv[PRETOK_MAX_STEPS];
} pretok_iter;

/* The subject PCRE2 matches for arbitrary bytes: the text itself when it is valid
 * UTF-8, else a copy with each invalid byte replaced by '#', so that an invalid byte
 * splits like a character that is no letter, number or space. Piece offsets are the
 * same in both. *owned is the copy to free, or NULL. */
hg_status pretok_subject(const uint8_t *text, size_t len, const uint8_t **subject, uint8_t **owned);

hg_status pretok_iter_init(pretok_iter *it, const pretok *p, const uint8_t *subject, size_t n);
/* Sets the next piece [*start, *end); returns 0 at the end of the subject, or when a
 * match failed (then pretok_iter_error says so). */
int pretok_iter_next(pretok_iter *it, size_t *start, size_t *end);
/* HG_OK, or the failure that stopped the iteration, with a message. */
hg_status pretok_iter_error(const pretok_iter *it);
void pretok_iter_free(pretok_iter *it);

#endif
