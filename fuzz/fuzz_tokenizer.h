/* Shared by the fuzz targets that encode with a tokenizer of their own: a 400-id BPE
 * trained on four copies of a corpus (aborts on failure; the caller keeps it). */
#ifndef HG_FUZZ_TOKENIZER_H
#define HG_FUZZ_TOKENIZER_H

#include <stdlib.h>

#include "handgrad_data.h"

static inline hg_tokenizer *fuzz_tokenizer(const char *corpus, size_t len) {
    hg_bpe_trainer *tr;
    hg_tokenizer *tok = NULL;
    if (hg_bpe_trainer_create(&tr, 400) != HG_OK) abort();
    for (int i = 0; i < 4; i++)
        if (hg_bpe_trainer_add(tr, corpus, len) != HG_OK) abort();
    if (hg_bpe_trainer_finish(tr, &tok) != HG_OK) abort();
    hg_bpe_trainer_free(tr);
    return tok;
}

#endif
