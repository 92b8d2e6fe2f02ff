/* libFuzzer target: encoding arbitrary bytes. decode(encode(x)) must equal x, the
 * streaming decoder must give the same bytes, and eot must appear only when allowed.
 * The first input byte picks the flags. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_tokenizer.h"
#include "handgrad_data.h"

static hg_tokenizer *tok;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    static const char corpus[] =
        "It was the best of times, it was the worst of times. I'm sure they'll come back at 10:30.\n"
        "    for (int i = 0; i < n; i++) x += y[i];   \n\n\t"
        "caf\xc3\xa9 na\xc3\xafve \xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e \xf0\x9f\x98\x80\xf0\x9f\x98\x80 12345 67.89\n";
    tok = fuzz_tokenizer(corpus, sizeof corpus - 1);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    int flags = data[0] & 1 ? HG_ENCODE_ALLOW_SPECIAL : 0;
    const uint8_t *text = data + 1;
    size_t len = size - 1, n, nb;
    int32_t *ids = malloc((len + 1) * sizeof *ids);
    uint8_t *back = malloc(len + 1);
    if (hg_tokenizer_encode(tok, text, len, flags, ids, len, &n) != HG_OK) abort();
    for (size_t i = 0; i < n; i++)
        if (!flags && ids[i] == hg_tokenizer_eot(tok)) abort();
    if (hg_tokenizer_decode(tok, ids, n, back, len, &nb) != HG_OK || nb != len || memcmp(back, text, len)) abort();
    hg_decoder *dec;
    if (hg_decoder_create(&dec, tok) != HG_OK) abort();
    uint8_t chunk[64];
    size_t total = 0, k;
    for (size_t i = 0; i < n; i++) {
        if (hg_decoder_push(dec, ids[i], chunk, sizeof chunk, &k) != HG_OK) abort();
        if (total + k > len || memcmp(chunk, text + total, k)) abort();
        total += k;
    }
    if (hg_decoder_flush(dec, chunk, sizeof chunk, &k) != HG_OK || total + k != len || memcmp(chunk, text + total, k))
        abort();
    hg_decoder_free(dec);
    free(ids);
    free(back);
    return 0;
}
