/* Decoding ids to bytes, whole or streamed one id at a time. */
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "data/tokenizer.h"
#include "data/utf8.h"

hg_status hg_tokenizer_decode(const hg_tokenizer *t, const int32_t *ids, size_t n, void *out, size_t cap,
                              size_t *n_bytes) {
    uint8_t *o = out;
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        size_t skip = 0; /* a decoder that strips the output's leading space */
        if (ids[i] < 0 || ids[i] >= t->n_vocab) {
            *n_bytes = total;
            return hg_fail(HG_ERR_INVALID, "ids[%zu]: %d is outside the vocabulary [0, %d)", i, (int)ids[i],
                           (int)t->n_vocab);
        }
        const uint8_t *b = t->blob + t->off[ids[i]];
        size_t len = t->off[ids[i] + 1] - t->off[ids[i]];
        if (i == 0 && t->strip_space && b[0] == ' ') skip = 1;
        b += skip;
        len -= skip;
        if (total + len <= cap) memcpy(o + total, b, len);
        else if (total < cap) memcpy(o + total, b, cap - total);
        total += len;
    }
    *n_bytes = total;
    return HG_OK;
}

struct hg_decoder {
    const hg_tokenizer *tok;
    uint8_t held[3]; /* the start of a UTF-8 character still missing bytes */
    int n_held;
    int started;     /* an id has been pushed */
};

hg_status hg_decoder_create(hg_decoder **out, const hg_tokenizer *tok) {
    *out = calloc(1, sizeof **out);
    if (!*out) return hg_fail(HG_ERR_NOMEM, "decoder: out of memory");
    (*out)->tok = tok;
    return HG_OK;
}

void hg_decoder_free(hg_decoder *d) { free(d); }

hg_status hg_decoder_push(hg_decoder *d, int32_t id, void *out, size_t cap, size_t *n_bytes) {
    *n_bytes = 0;
    const uint8_t *bytes;
    size_t len;
    HG_TRY(hg_tokenizer_token_bytes(d->tok, id, &bytes, &len));
    if (!d->started && d->tok->strip_space && bytes[0] == ' ') {
        bytes++;
        len--;
    }
    d->started = 1;
    if (cap < (size_t)d->n_held + len)
        return hg_fail(HG_ERR_INVALID, "cap: %zu bytes of room, need %zu", cap, (size_t)d->n_held + len);
    uint8_t *o = out;
    memcpy(o, d->held, (size_t)d->n_held);
    memcpy(o + d->n_held, bytes, len);
    size_t total = (size_t)d->n_held + len;
    int keep = utf8_incomplete_tail(o, total);
    memcpy(d->held, o + total - keep, (size_t)keep);
    d->n_held = keep;
    *n_bytes = total - (size_t)keep;
    return HG_OK;
}

hg_status hg_decoder_flush(hg_decoder *d, void *out, size_t cap, size_t *n_bytes) {
    *n_bytes = 0;
    if (cap < (size_t)d->n_held) return hg_fail(HG_ERR_INVALID, "cap: %zu bytes of room, need %d", cap, d->n_held);
    memcpy(out, d->held, (size_t)d->n_held);
    *n_bytes = (size_t)d->n_held;
    d->n_held = 0;
    return HG_OK;
}
