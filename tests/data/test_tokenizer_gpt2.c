/* GPT-2 ids against tiktoken: encodes the texts of tests/fixtures/gpt2_ids.bin (made by
 * tools/gen_tokenizer_fixture.py) with assets/gpt2.tiktoken and compares every id.
 * Then the same through the Hugging Face format (saved, reloaded), a fuzzed round
 * trip, and <|endoftext|>. Needs scripts/fetch_gpt2_vocab.sh; skips (77) without it. */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "handgrad_data.h"

#define VOCAB "../assets/gpt2.tiktoken"
#define FIXTURE "fixtures/gpt2_ids.bin"

typedef struct fixture_case {
    char name[64];
    uint8_t *text;
    uint32_t len, n_ids;
    uint32_t *ids;
} fixture_case;

static int read_u32(FILE *f, uint32_t *v) { return fread(v, 4, 1, f) == 1; }

static int load_fixture(fixture_case **out, int *n_out) {
    FILE *f = fopen(FIXTURE, "rb");
    char magic[4];
    uint32_t version, n;
    if (!f || fread(magic, 1, 4, f) != 4 || memcmp(magic, "HGTF", 4) || !read_u32(f, &version) || version != 1 ||
        !read_u32(f, &n) || n > 1000) {
        fprintf(stderr, "%s: missing or not an HGTF v1 fixture\n", FIXTURE);
        if (f) fclose(f);
        return 0;
    }
    fixture_case *c = calloc(n, sizeof *c);
    for (uint32_t i = 0; i < n; i++) {
        uint32_t k;
        int ok = read_u32(f, &k) && k < sizeof c[i].name && fread(c[i].name, 1, k, f) == k && read_u32(f, &c[i].len);
        ok = ok && (c[i].text = malloc(c[i].len + 1)) && fread(c[i].text, 1, c[i].len, f) == c[i].len;
        ok = ok && read_u32(f, &c[i].n_ids) && (c[i].ids = malloc(4 * (size_t)c[i].n_ids + 4)) &&
             fread(c[i].ids, 4, c[i].n_ids, f) == c[i].n_ids;
        if (!ok) {
            fprintf(stderr, "%s: truncated at case %u\n", FIXTURE, i);
            fclose(f);
            return 0;
        }
    }
    fclose(f);
    *out = c;
    *n_out = (int)n;
    return 1;
}

static void check_cases(const hg_tokenizer *tok, const fixture_case *c, int n, const char *how) {
    for (int i = 0; i < n; i++) {
        int32_t *ids = malloc(((size_t)c[i].len + 1) * sizeof *ids);
        size_t k;
        CHECK_OK(hg_tokenizer_encode(tok, c[i].text, c[i].len, 0, ids, c[i].len, &k));
        size_t first_diff = 0;
        while (first_diff < k && first_diff < c[i].n_ids && (uint32_t)ids[first_diff] == c[i].ids[first_diff])
            first_diff++;
        if (k != c[i].n_ids || first_diff != k) {
            fprintf(stderr, "%s: case %s: %zu ids, tiktoken %u; first difference at %zu\n", how, c[i].name, k,
                    c[i].n_ids, first_diff);
            check_failures++;
        }
        uint8_t *back = malloc(c[i].len + 1);
        size_t nb;
        CHECK_OK(hg_tokenizer_decode(tok, ids, k, back, c[i].len, &nb));
        CHECK(nb == c[i].len && !memcmp(back, c[i].text, nb));
        free(back);
        free(ids);
    }
}

static uint64_t rng_state = 42;
static uint32_t rng_next(void) {
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(rng_state >> 33);
}

/* decode(encode(x)) == x for random bytes, and never the eot id. */
static void check_fuzzed_round_trip(const hg_tokenizer *tok) {
    uint8_t buf[3000], back[3000];
    int32_t ids[3000];
    for (int round = 0; round < 500; round++) {
        size_t len = rng_next() % sizeof buf, n, nb;
        int mode = round % 3;
        for (size_t i = 0; i < len; i++)
            buf[i] = mode == 0 ? (uint8_t)rng_next()                             /* any byte */
                     : mode == 1 ? (uint8_t)(" \n\tae'0.,"[rng_next() % 9])      /* ASCII */
                                 : (uint8_t)(0x80 + rng_next() % 0x40 + (rng_next() % 4 ? 0x40 : 0));
        CHECK_OK(hg_tokenizer_encode(tok, buf, len, 0, ids, len, &n));
        for (size_t i = 0; i < n; i++) CHECK(ids[i] >= 0 && ids[i] < 50256);
        CHECK_OK(hg_tokenizer_decode(tok, ids, n, back, sizeof back, &nb));
        CHECK(nb == len && !memcmp(back, buf, len));
    }
}

static void check_special(const hg_tokenizer *tok) {
    CHECK(hg_tokenizer_vocab_size(tok) == 50257 && hg_tokenizer_eot(tok) == 50256);
    const char *text = "Hello world<|endoftext|>";
    int32_t ids[32];
    size_t n;
    CHECK_OK(hg_tokenizer_encode(tok, text, strlen(text), HG_ENCODE_ALLOW_SPECIAL, ids, 32, &n));
    CHECK(n == 3 && ids[0] == 15496 && ids[1] == 995 && ids[2] == 50256);
    CHECK_OK(hg_tokenizer_encode(tok, text, strlen(text), 0, ids, 32, &n));
    CHECK(n > 3);
    for (size_t i = 0; i < n; i++) CHECK(ids[i] != 50256);
}

int main(void) {
    if (access(VOCAB, R_OK) != 0) {
        fprintf(stderr, "skipped: %s is missing; run scripts/fetch_gpt2_vocab.sh\n", VOCAB);
        return 77;
    }
    fixture_case *cases = NULL;
    int n = 0;
    CHECK(load_fixture(&cases, &n));
    hg_tokenizer *tok = NULL, *hf = NULL;
    CHECK_OK(hg_tokenizer_load(&tok, VOCAB));
    if (tok) {
        check_cases(tok, cases, n, "tiktoken file");
        check_special(tok);
        check_fuzzed_round_trip(tok);
        char dir[] = "/tmp/hg_gpt2_XXXXXX";
        CHECK(mkdtemp(dir) != NULL);
        CHECK_OK(hg_tokenizer_save_hf(tok, dir));
        CHECK_OK(hg_tokenizer_load(&hf, dir));
        if (hf) {
            check_cases(hf, cases, n, "saved as vocab.json + merges.txt");
            check_special(hf);
        }
        char path[128];
        snprintf(path, sizeof path, "%s/merges.txt", dir);
        FILE *f = fopen(path, "r");
        int lines = 0;
        for (int ch; f && (ch = fgetc(f)) != EOF;) lines += ch == '\n';
        if (f) fclose(f);
        CHECK(lines == 50001); /* "#version" and GPT-2's 50000 merges */
        unlink(path);
        snprintf(path, sizeof path, "%s/vocab.json", dir);
        unlink(path);
        rmdir(dir);
    }
    hg_tokenizer_free(hf);
    hg_tokenizer_free(tok);
    for (int i = 0; i < n; i++) {
        free(cases[i].text);
        free(cases[i].ids);
    }
    free(cases);
    CHECK_DONE();
}
