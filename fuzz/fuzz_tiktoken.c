/* libFuzzer target: the tiktoken rank-file parser, then encode/decode with whatever
 * vocabulary it accepted. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "data/vocab.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    hg_tokenizer *tok;
    if (vocab_parse_tiktoken(&tok, data, size, "fuzz.tiktoken") != HG_OK) return 0;
    static const char text[] = "Hello world, it's 2024! \xf0\x9f\x98\x80 \xff";
    int32_t ids[sizeof text];
    uint8_t back[sizeof text];
    size_t n, nb;
    if (hg_tokenizer_encode(tok, text, sizeof text - 1, 0, ids, sizeof text, &n) != HG_OK) abort();
    if (hg_tokenizer_decode(tok, ids, n, back, sizeof back, &nb) != HG_OK || nb != sizeof text - 1 ||
        memcmp(back, text, nb))
        abort();
    hg_tokenizer_free(tok);
    return 0;
}
