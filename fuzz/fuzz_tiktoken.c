/* libFuzzer target: the tiktoken rank-file parser, then encode/decode with whatever
 * vocabulary it accepted. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "data/vocab.h"
#include "fuzz_roundtrip.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    hg_tokenizer *tok;
    if (vocab_parse_tiktoken(&tok, data, size, "fuzz.tiktoken") != HG_OK) return 0;
    static const char text[] = "Hello world, it's 2024! \xf0\x9f\x98\x80 \xff";
    fuzz_roundtrip(tok, text, sizeof text - 1);
    return 0;
}
