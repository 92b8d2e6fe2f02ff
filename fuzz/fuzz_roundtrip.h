/* Shared by the vocabulary fuzz targets: any vocabulary a parser accepts must encode a
 * fixed text (including invalid UTF-8) and decode it back byte for byte. Takes ownership
 * of tok. */
#ifndef HG_FUZZ_ROUNDTRIP_H
#define HG_FUZZ_ROUNDTRIP_H

#include <stdlib.h>
#include <string.h>

#include "handgrad.h"

static inline void fuzz_roundtrip(hg_tokenizer *tok, const char *text, size_t len) {
    int32_t ids[64];
    uint8_t back[64];
    size_t n, nb;
    if (len > sizeof back) abort();
    if (hg_tokenizer_encode(tok, text, len, 0, ids, 64, &n) != HG_OK) abort();
    if (hg_tokenizer_decode(tok, ids, n, back, sizeof back, &nb) != HG_OK || nb != len || memcmp(back, text, nb))
        abort();
    hg_tokenizer_free(tok);
}

#endif
