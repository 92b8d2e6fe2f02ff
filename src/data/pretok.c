/* GPT-2 pre-tokenization with PCRE2. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "data/pretok.h"

#include <pcre2.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "data/utf8.h"

/* Anchored, so that each match starts exactly where the last one ended. */
static const char gpt2_pattern[] =
    "'(?:[sdmt]|ll|ve|re)"
    "| ?\\p{L}+"
    "| ?\\p{N}+"
    "| ?[^\\p{White_Space}\\p{L}\\p{N}]+"
    "|\\p{White_Space}+(?!\\P{White_Space})"
    "|\\p{White_Space}+";

hg_status pretok_init(pretok *p) {
    int err;
    PCRE2_SIZE at;
    pcre2_code *code = pcre2_compile((PCRE2_SPTR)gpt2_pattern, PCRE2_ZERO_TERMINATED,
                                     PCRE2_UTF | PCRE2_ANCHORED, &err, &at, NULL);
    if (!code) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(err, msg, sizeof msg);
        return hg_fail(HG_ERR_BACKEND, "pre-tokenizer: PCRE2 rejected the pattern at %zu: %s", (size_t)at, (char *)msg);
    }
    p->code = code;
    p->jit = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
    return HG_OK;
}

void pretok_free(pretok *p) {
    pcre2_code_free(p->code);
    p->code = NULL;
}

hg_status pretok_iter_init(pretok_iter *it, const pretok *p, const uint8_t *subject, size_t n) {
    it->p = p;
    it->subject = subject;
    it->n = n;
    it->pos = 0;
    it->match = pcre2_match_data_create(1, NULL);
    if (!it->match) return hg_fail(HG_ERR_NOMEM, "pre-tokenizer: out of memory");
    return HG_OK;
}

void pretok_iter_free(pretok_iter *it) {
    pcre2_match_data_free(it->match);
    it->match = NULL;
}

int pretok_iter_next(pretok_iter *it, size_t *start, size_t *end) {
    if (it->pos >= it->n) return 0;
    pcre2_match_data *md = it->match;
    int rc = it->p->jit ? pcre2_jit_match(it->p->code, it->subject, it->n, it->pos, 0, md, NULL)
                        : PCRE2_ERROR_JIT_BADOPTION;
    if (rc < 0 && rc != PCRE2_ERROR_NOMATCH)
        /* JIT out of stack on a pathological run: the interpreter keeps its frames on
         * the heap. */
        rc = pcre2_match(it->p->code, it->subject, it->n, it->pos, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, md, NULL);
    size_t e;
    if (rc > 0 && pcre2_get_ovector_pointer(md)[1] > it->pos) {
        e = pcre2_get_ovector_pointer(md)[1];
    } else {
        /* Every character matches one alternative, so this is only a safety net:
         * one character becomes its own piece. */
        int k = utf8_seq_len(it->subject + it->pos, it->n - it->pos);
        e = it->pos + (size_t)(k ? k : 1);
    }
    *start = it->pos;
    *end = e;
    it->pos = e;
    return 1;
}

hg_status pretok_subject(const uint8_t *text, size_t len, const uint8_t **subject, uint8_t **owned) {
    *subject = text;
    *owned = NULL;
    size_t valid = utf8_valid_prefix(text, len);
    if (valid == len) return HG_OK;
    uint8_t *copy = malloc(len);
    if (!copy) return hg_fail(HG_ERR_NOMEM, "out of memory for %zu bytes of text", len);
    memcpy(copy, text, len);
    for (size_t i = valid; i < len;) {
        int k = utf8_seq_len(text + i, len - i);
        if (!k) copy[i] = '#';
        i += k ? (size_t)k : 1;
    }
    *subject = *owned = copy;
    return HG_OK;
}
