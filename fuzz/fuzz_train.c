/* libFuzzer target: BPE training on arbitrary bytes (the first byte picks the vocabulary
 * size), then a round trip of the same bytes through the trained tokenizer. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "handgrad_data.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 2 || size > 4096) return 0;
    int vocab = 257 + data[0];
    const uint8_t *text = data + 1;
    size_t len = size - 1, n, nb;
    hg_bpe_trainer *tr;
    hg_tokenizer *tok = NULL;
    if (hg_bpe_trainer_create(&tr, vocab) != HG_OK) abort();
    if (hg_bpe_trainer_add(tr, text, len) != HG_OK) abort();
    hg_status s = hg_bpe_trainer_finish(tr, &tok);
    hg_bpe_trainer_free(tr);
    if (s != HG_OK) return 0; /* only text made of <|endoftext|> markers is empty */
    if (hg_tokenizer_vocab_size(tok) > vocab) abort();
    int32_t *ids = malloc(len * sizeof *ids);
    uint8_t *back = malloc(len);
    if (hg_tokenizer_encode(tok, text, len, 0, ids, len, &n) != HG_OK) abort();
    if (hg_tokenizer_decode(tok, ids, n, back, len, &nb) != HG_OK || nb != len || memcmp(back, text, len)) abort();
    free(ids);
    free(back);
    hg_tokenizer_free(tok);
    return 0;
}
