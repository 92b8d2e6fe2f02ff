/* libFuzzer target: the Hugging Face vocab.json + merges.txt parser. The input is
 * vocab.json, a NUL byte, then merges.txt. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "data/vocab.h"
#include "fuzz_roundtrip.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const uint8_t *nul = memchr(data, 0, size);
    size_t json_len = nul ? (size_t)(nul - data) : size;
    const uint8_t *merges = nul ? nul + 1 : data + size;
    size_t merges_len = size - json_len - (nul ? 1 : 0);
    hg_tokenizer *tok;
    if (vocab_parse_hf(&tok, data, json_len, "vocab.json", merges, merges_len, "merges.txt") != HG_OK) return 0;
    static const char text[] = "the theme, then 12 \xc3\xa9\xff";
    fuzz_roundtrip(tok, text, sizeof text - 1);
    return 0;
}
