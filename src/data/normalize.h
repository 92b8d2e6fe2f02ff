/* Text normalizers of Hugging Face tokenizers that handgrad runs: NFC, Prepend and
 * Replace (of a literal string), as a list of steps applied in order. */
#ifndef HG_DATA_NORMALIZE_H
#define HG_DATA_NORMALIZE_H

#include <stddef.h>
#include <stdint.h>

#include "handgrad.h"

#define NORM_MAX_STEPS 8

typedef enum norm_kind {
    NORM_NFC,     /* Unicode canonical composition */
    NORM_PREPEND, /* a before a non-empty text */
    NORM_REPLACE, /* every a (non-overlapping, left to right) becomes b */
} norm_kind;

typedef struct norm_step {
    norm_kind kind;
    uint8_t *a, *b; /* malloc'd */
    size_t na, nb;
} norm_step;

typedef struct tok_norm {
    norm_step step[NORM_MAX_STEPS];
    int n_steps;
} tok_norm;

/* Appends a step; a and b are copied. where names the step in messages. */
hg_status norm_add(tok_norm *n, norm_kind kind, const void *a, size_t na, const void *b, size_t nb, const char *where);
void norm_free(tok_norm *n);
/* An upper bound on the normalized length of len bytes. */
size_t norm_max_len(const tok_norm *n, size_t len);
/* Normalizes text: *out is text itself when nothing changed (*owned NULL), else a
 * malloc'd buffer (*owned, to free). Invalid UTF-8 bytes pass through unchanged and
 * never combine with their neighbours. */
hg_status norm_apply(const tok_norm *n, const uint8_t *text, size_t len, const uint8_t **out, size_t *out_len,
                     uint8_t **owned);

/* NFC of one text alone (the step NORM_NFC), same ownership rules. */
hg_status norm_nfc(const uint8_t *text, size_t len, const uint8_t **out, size_t *out_len, uint8_t **owned);
/* 1 when the code point is unchanged by NFC whatever surrounds it (combining class 0,
 * NFC_Quick_Check Yes, never the second of a composition), for the ranges handgrad
 * lists; 0 means "maybe not". */
int norm_nfc_stable(uint32_t cp);

#endif
