/* libFuzzer target: the tokenizer.json parser. Whatever it accepts must encode a fixed
 * text (with and without special tokens) into ids below V, decode them, stream-decode
 * the same bytes, and, for a byte-level tokenizer without normalizer, non-special added
 * tokens or a Split that drops text, give the text back. The text is short, so the work
 * per input stays bounded even with the input's own regexes. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "data/tokenizer.h"
#include "data/vocab.h"

static const char text[] = "The cafe\xcc\x81 <|endoftext|>  12345\t\xe4\xb8\xad\xf0\x9f\x98\x80 it's\r\n\xff<s>\xe2\x96\x81x";

static void check(const hg_tokenizer *tok, int flags) {
    size_t len = sizeof text - 1, cap = hg_tokenizer_max_ids(tok, len), n, nb;
    int32_t *ids = malloc(cap * sizeof *ids);
    hg_status s = hg_tokenizer_encode(tok, text, len, flags, ids, cap, &n);
    /* Only a pattern that exhausts PCRE2's match limit may fail. */
    if (s != HG_OK && s != HG_ERR_INVALID) abort();
    if (s != HG_OK) {
        free(ids);
        return;
    }
    size_t out_cap = n * hg_tokenizer_max_token_bytes(tok) + 1;
    uint8_t *out = malloc(out_cap), *stream = malloc(out_cap + 3);
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= hg_tokenizer_vocab_size(tok)) abort();
    if (hg_tokenizer_decode(tok, ids, n, out, out_cap, &nb) != HG_OK || nb > out_cap) abort();
    if (!flags && !tok->chars && !tok->norm.n_steps && !tok->pre.may_drop && !tok->added[0].has_plain &&
        !tok->added[1].has_plain && (nb != len || memcmp(out, text, len)))
        abort();
    hg_decoder *dec;
    if (hg_decoder_create(&dec, tok) != HG_OK) abort();
    size_t total = 0, k;
    for (size_t i = 0; i < n; i++) {
        if (hg_decoder_push(dec, ids[i], stream + total, out_cap + 3 - total, &k) != HG_OK) abort();
        total += k;
    }
    if (hg_decoder_flush(dec, stream + total, out_cap + 3 - total, &k) != HG_OK) abort();
    total += k;
    if (total != nb || memcmp(stream, out, nb)) abort();
    hg_decoder_free(dec);
    free(ids);
    free(out);
    free(stream);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    hg_tokenizer *tok;
    if (vocab_parse_tokjson(&tok, data, size, "tokenizer.json") != HG_OK) return 0;
    check(tok, 0);
    check(tok, HG_ENCODE_ALLOW_SPECIAL);
    int32_t id;
    (void)hg_tokenizer_token_id(tok, "<|endoftext|>", &id);
    (void)hg_tokenizer_token_id(tok, "<0x41>", &id);
    hg_tokenizer_free(tok);
    return 0;
}
