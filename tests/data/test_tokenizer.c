/* Tokenizer unit tests that need no downloaded vocabulary: UTF-8 and the byte
 * alphabet, the pre-tokenizer's pieces, BPE training, encode/decode round trips, the
 * streaming decoder, special tokens, saving and loading, and the two BPE merge
 * routines against each other. */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "data/pretok.h"
#include "data/tokenizer.h"
#include "data/utf8.h"
#include "handgrad_data.h"

static uint64_t rng_state = 12345;
static uint32_t rng_next(void) {
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(rng_state >> 33);
}

static void test_utf8(void) {
    CHECK(utf8_seq_len((const uint8_t *)"a", 1) == 1);
    CHECK(utf8_seq_len((const uint8_t *)"\xc3\xa9", 2) == 2);
    CHECK(utf8_seq_len((const uint8_t *)"\xe2\x82\xac", 3) == 3);
    CHECK(utf8_seq_len((const uint8_t *)"\xf0\x9f\x98\x80", 4) == 4);
    CHECK(utf8_seq_len((const uint8_t *)"\xc0\xaf", 2) == 0);         /* overlong */
    CHECK(utf8_seq_len((const uint8_t *)"\xed\xa0\x80", 3) == 0);     /* surrogate */
    CHECK(utf8_seq_len((const uint8_t *)"\xf4\x90\x80\x80", 4) == 0); /* > U+10FFFF */
    CHECK(utf8_seq_len((const uint8_t *)"\xe2\x82", 2) == 0);         /* truncated */
    CHECK(utf8_valid_prefix((const uint8_t *)"abcdefghij\xc3\xa9k\xff", 14) == 13);
    CHECK(utf8_incomplete_tail((const uint8_t *)"ab\xe2\x82", 4) == 2);
    CHECK(utf8_incomplete_tail((const uint8_t *)"ab\xf0", 3) == 1);
    CHECK(utf8_incomplete_tail((const uint8_t *)"ab\xe2\x82\xac", 5) == 0);
    CHECK(utf8_incomplete_tail((const uint8_t *)"ab\xff", 3) == 0);     /* never valid */
    CHECK(utf8_incomplete_tail((const uint8_t *)"ab\xe0\x80", 4) == 0); /* overlong start */
}

static void test_byte_alphabet(void) {
    CHECK(byteunicode_codepoint(' ') == 0x120);  /* 'Ġ' */
    CHECK(byteunicode_codepoint('\n') == 0x10A); /* 'Ċ' */
    CHECK(byteunicode_codepoint('A') == 'A');
    CHECK(byteunicode_codepoint(0xAD) == 0x143);
    CHECK(byteunicode_order(0) == '!');
    CHECK(byteunicode_order(188) == 0);
    int seen[256] = {0};
    for (int i = 0; i < 256; i++) {
        uint8_t b = byteunicode_order(i);
        seen[b]++;
        CHECK(byteunicode_byte(byteunicode_codepoint(b)) == b);
    }
    for (int b = 0; b < 256; b++) CHECK(seen[b] == 1);
    CHECK(byteunicode_byte(0x20) == -1);
    CHECK(byteunicode_byte(0x200) == -1);
}

/* Pieces of GPT-2's pattern, as Python's regex module gives them. */
static void check_pieces(const pretok *p, const char *text, const char *const *want, int n_want) {
    pretok_iter it;
    CHECK_OK(pretok_iter_init(&it, p, (const uint8_t *)text, strlen(text)));
    size_t a, b;
    int k = 0;
    while (pretok_iter_next(&it, &a, &b)) {
        if (k >= n_want || strlen(want[k]) != b - a || memcmp(want[k], text + a, b - a)) {
            fprintf(stderr, "%s: piece %d is \"%.*s\"\n", text, k, (int)(b - a), text + a);
            check_failures++;
        }
        k++;
    }
    CHECK(k == n_want);
    pretok_iter_free(&it);
}

static void test_pretok(void) {
    pretok p;
    CHECK_OK(pretok_init(&p));
    const char *a[] = {"Hello", " world", "'s", " ", " end"};
    check_pieces(&p, "Hello world's  end", a, 5);
    const char *b[] = {"a", " ", " b", "\n\n", " c"};
    check_pieces(&p, "a  b\n\n c", b, 5);
    const char *c[] = {"x", "123", " 4", ".", "5", " !!?", "  "};
    check_pieces(&p, "x123 4.5 !!?  ", c, 7);
    const char *d[] = {"I", "'", "LL", " it", "'s", "'d"};
    check_pieces(&p, "I'LL it's'd", d, 6);
    const char *e[] = {"caf\xc3\xa9", " \xe6\x97\xa5\xe6\x9c\xac", "\xcc\x81", "x"};
    check_pieces(&p, "caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac\xcc\x81x", e, 4);
    pretok_free(&p);
}

static const char *corpus =
    "the cat sat on the mat. the dog sat on the log. a cat and a dog met on the mat!\n"
    "Numbers 123 4567 and more 123. I'm sure they'll say it's the cat's mat.\n"
    "caf\xc3\xa9 na\xc3\xafve \xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e \xf0\x9f\x98\x80\xf0\x9f\x98\x80 the end\n";

static hg_tokenizer *train_small(int vocab_size) {
    hg_bpe_trainer *tr;
    hg_tokenizer *tok = NULL;
    CHECK_OK(hg_bpe_trainer_create(&tr, vocab_size));
    for (int i = 0; i < 3; i++) CHECK_OK(hg_bpe_trainer_add(tr, corpus, strlen(corpus)));
    CHECK_OK(hg_bpe_trainer_add(tr, "<|endoftext|>the theme<|endoftext|>", 35));
    CHECK_OK(hg_bpe_trainer_finish(tr, &tok));
    hg_bpe_trainer_free(tr);
    return tok;
}

static void check_round_trip(const hg_tokenizer *tok, const void *text, size_t len) {
    int32_t *ids = malloc((len + 1) * sizeof *ids);
    uint8_t *back = malloc(len + 1);
    size_t n, nb;
    CHECK_OK(hg_tokenizer_encode(tok, text, len, 0, ids, len, &n));
    for (size_t i = 0; i < n; i++) CHECK(ids[i] != hg_tokenizer_eot(tok));
    CHECK_OK(hg_tokenizer_decode(tok, ids, n, back, len, &nb));
    CHECK(nb == len && memcmp(back, text, len) == 0);
    free(ids);
    free(back);
}

static void test_train(void) {
    hg_tokenizer *tok = train_small(300);
    if (!tok) return;
    CHECK(hg_tokenizer_vocab_size(tok) == 300);
    CHECK(hg_tokenizer_eot(tok) == 299);
    /* The most frequent pair: " t"+"h"... every " the" starts with (Ġ, t) or (t, h). */
    const uint8_t *bytes;
    size_t len;
    CHECK_OK(hg_tokenizer_token_bytes(tok, 256, &bytes, &len));
    CHECK(len == 2);
    /* ids 0..255 are the bytes in GPT-2's order. */
    CHECK_OK(hg_tokenizer_token_bytes(tok, 0, &bytes, &len));
    CHECK(len == 1 && bytes[0] == '!');
    /* " the" is learned as one token and used. */
    int32_t ids[16];
    size_t n;
    CHECK_OK(hg_tokenizer_encode(tok, " the", 4, 0, ids, 16, &n));
    CHECK(n == 1);
    check_round_trip(tok, corpus, strlen(corpus));
    /* A vocabulary larger than the corpus supports stops early. */
    hg_tokenizer *big = train_small(5000);
    CHECK(big && hg_tokenizer_vocab_size(big) < 5000);
    if (big) check_round_trip(big, corpus, strlen(corpus));
    hg_tokenizer_free(big);
    hg_tokenizer_free(tok);
    hg_bpe_trainer *tr;
    CHECK(hg_bpe_trainer_create(&tr, 256) == HG_ERR_INVALID);
    CHECK_OK(hg_bpe_trainer_create(&tr, 300));
    CHECK(hg_bpe_trainer_finish(tr, &tok) == HG_ERR_INVALID); /* empty corpus */
    CHECK(strstr(hg_last_error(), "empty") != NULL);
    hg_bpe_trainer_free(tr);
}

static void test_round_trip_random(void) {
    hg_tokenizer *tok = train_small(320);
    if (!tok) return;
    static const char *bits[] = {"the", " cat", "\xff", "\xc3", "\xa9", "\xe2\x82", "\xf0\x9f\x98\x80", "  ", "\n",
                                 "'s", "123", "<|endoftext|>", "\t", "\xed\xa0\x80", "x"};
    uint8_t buf[4096];
    for (int round = 0; round < 300; round++) {
        size_t len = 0, target = rng_next() % 2000;
        while (len < target) {
            if (rng_next() % 3 == 0) {
                buf[len++] = (uint8_t)rng_next();
            } else {
                const char *b = bits[rng_next() % (sizeof bits / sizeof *bits)];
                size_t k = strlen(b);
                memcpy(buf + len, b, k);
                len += k;
            }
        }
        check_round_trip(tok, buf, len);
    }
    hg_tokenizer_free(tok);
}

static void test_special(void) {
    hg_tokenizer *tok = train_small(300);
    if (!tok) return;
    int32_t eot = hg_tokenizer_eot(tok), ids[64];
    const char *text = "a<|endoftext|>b<|endoftext|>";
    size_t n, len = strlen(text), nb;
    CHECK_OK(hg_tokenizer_encode(tok, text, len, 0, ids, 64, &n));
    for (size_t i = 0; i < n; i++) CHECK(ids[i] != eot);
    CHECK_OK(hg_tokenizer_encode(tok, text, len, HG_ENCODE_ALLOW_SPECIAL, ids, 64, &n));
    CHECK(n == 4 && ids[1] == eot && ids[3] == eot);
    char back[64];
    CHECK_OK(hg_tokenizer_decode(tok, ids, n, back, sizeof back, &nb));
    CHECK(nb == len && !memcmp(back, text, len));
    CHECK(hg_tokenizer_encode(tok, text, len, 0, ids, 3, &n) == HG_ERR_INVALID);
    ids[0] = 300;
    CHECK(hg_tokenizer_decode(tok, ids, 1, back, sizeof back, &nb) == HG_ERR_INVALID);
    CHECK(strstr(hg_last_error(), "ids[0]") != NULL);
    hg_tokenizer_free(tok);
}

static void test_streaming_decoder(void) {
    hg_tokenizer *tok = train_small(300);
    if (!tok) return;
    /* Byte-level ids cut multi-byte characters apart; chunks must be whole characters. */
    const char *text = "\xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x98\x80x\xe2\x82\xff\xc3\xa9";
    size_t len = strlen(text);
    hg_decoder *dec;
    CHECK_OK(hg_decoder_create(&dec, tok));
    char out[64], all[64];
    size_t total = 0, k;
    const uint8_t *bytes;
    size_t blen;
    for (size_t i = 0; i < len; i++) {
        int32_t id = tok->byte_id[(uint8_t)text[i]];
        CHECK_OK(hg_tokenizer_token_bytes(tok, id, &bytes, &blen));
        CHECK_OK(hg_decoder_push(dec, id, out, sizeof out, &k));
        /* Each chunk ends on a character boundary unless the bytes can never be valid. */
        CHECK(utf8_incomplete_tail((const uint8_t *)out, k) == 0);
        memcpy(all + total, out, k);
        total += k;
        if (i == 0 || i == 1) CHECK(k == 0); /* first two bytes of a 3-byte character */
        if (i == 2) CHECK(k == 3);
    }
    CHECK_OK(hg_decoder_flush(dec, out, sizeof out, &k));
    memcpy(all + total, out, k);
    total += k;
    CHECK(total == len && !memcmp(all, text, len));
    CHECK(hg_decoder_push(dec, 0, out, 0, &k) == HG_ERR_INVALID);
    hg_decoder_free(dec);
    hg_tokenizer_free(tok);
}

static void test_save_load(void) {
    hg_tokenizer *tok = train_small(320), *back = NULL;
    if (!tok) return;
    char dir[] = "/tmp/hg_tok_XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    CHECK_OK(hg_tokenizer_save_hf(tok, dir));
    CHECK_OK(hg_tokenizer_load(&back, dir));
    if (back) {
        CHECK(hg_tokenizer_vocab_size(back) == 320 && hg_tokenizer_eot(back) == 319);
        size_t len = strlen(corpus), n1, n2;
        int32_t *a = malloc(len * sizeof *a), *b = malloc(len * sizeof *b);
        CHECK_OK(hg_tokenizer_encode(tok, corpus, len, 0, a, len, &n1));
        CHECK_OK(hg_tokenizer_encode(back, corpus, len, 0, b, len, &n2));
        CHECK(n1 == n2 && !memcmp(a, b, n1 * sizeof *a));
        free(a);
        free(b);
    }
    char path[128];
    snprintf(path, sizeof path, "%s/vocab.json", dir);
    unlink(path);
    snprintf(path, sizeof path, "%s/merges.txt", dir);
    unlink(path);
    rmdir(dir);
    hg_tokenizer_free(back);
    hg_tokenizer_free(tok);
}

/* The heap merge must pick the same merges as the rescanning one. */
static void test_merge_routines(void) {
    hg_tokenizer *tok = train_small(400);
    if (!tok) return;
    int32_t a[BPE_SMALL_MAX], b[BPE_SMALL_MAX];
    const char alphabet[] = "the catsdogm ";
    for (int round = 0; round < 2000; round++) {
        size_t n = 2 + rng_next() % (BPE_SMALL_MAX - 1), k1, k2 = 0;
        for (size_t i = 0; i < n; i++) a[i] = b[i] = tok->byte_id[(uint8_t)alphabet[rng_next() % 13]];
        int32_t max_rank = round % 3 ? INT32_MAX : (int32_t)(rng_next() % 100);
        k1 = bpe_merge_small(tok, a, n, max_rank);
        CHECK_OK(bpe_merge_large(tok, b, n, max_rank, &k2));
        CHECK(k1 == k2 && !memcmp(a, b, k1 * sizeof *a));
    }
    hg_tokenizer_free(tok);
}

int main(void) {
    test_utf8();
    test_byte_alphabet();
    test_pretok();
    test_train();
    test_round_trip_random();
    test_special();
    test_streaming_decoder();
    test_save_load();
    test_merge_routines();
    CHECK_DONE();
}
