/* tokenizer.json: the fixtures of tools/gen_tokjson_fixture.py (Llama 3, Qwen2, GPT-2,
 * sentencepiece, Gemma 1 and 2, Phi-3 and OLMo 2 styles, trained tiny with the tokenizers
 * package) give the package's ids on every test text, with and without special tokens
 * and with the BOS; decoding gives the package's text back; token lookups, saving and
 * reloading; the regex translation, the split rules and behaviors, and NFC; and bad
 * files, each refused with the file and the key in the message. */
#define _POSIX_C_SOURCE 200809L
#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <utf8proc.h>

#include "check.h"
#include "data/fileio.h"
#include "data/normalize.h"
#include "data/pretok.h"
#include "data/tokenizer.h"
#include "data/vocab.h"
#include "handgrad_data.h"

#define FIXTURES "fixtures/tokenizers/"

static uint64_t rng_state = 7;
static uint32_t rng_next(void) {
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(rng_state >> 33);
}

static char *read_text(const char *path, size_t *len) {
    uint8_t *buf;
    if (file_read_all(path, &buf, len) != HG_OK) {
        fprintf(stderr, "%s: %s\n", path, hg_last_error());
        exit(1);
    }
    char *s = realloc(buf, *len + 1);
    s[*len] = 0;
    return s;
}

static int ids_equal(const int32_t *a, size_t n, const cJSON *want) {
    if ((size_t)cJSON_GetArraySize(want) != n) return 0;
    size_t i = 0;
    for (const cJSON *e = want->child; e; e = e->next, i++)
        if (a[i] != (int32_t)e->valuedouble) return 0;
    return 1;
}

static void print_ids(const char *what, const int32_t *ids, size_t n, const cJSON *want) {
    fprintf(stderr, "  %s: got", what);
    for (size_t i = 0; i < n && i < 40; i++) fprintf(stderr, " %d", (int)ids[i]);
    fprintf(stderr, "\n  %s: want", what);
    int i = 0;
    for (const cJSON *e = want->child; e && i < 40; e = e->next, i++) fprintf(stderr, " %d", (int)e->valuedouble);
    fprintf(stderr, "\n");
}

/* Encodes text with flags and compares with want; returns the ids (malloc'd). */
static int32_t *check_encode(const hg_tokenizer *tok, const char *name, int k, const char *text, int flags,
                             const cJSON *want, size_t *n_out) {
    size_t len = strlen(text), cap = hg_tokenizer_max_ids(tok, len), n = 0;
    int32_t *ids = malloc((cap + 1) * sizeof *ids);
    CHECK_OK(hg_tokenizer_encode(tok, text, len, flags, ids, cap, &n));
    if (!ids_equal(ids, n, want)) {
        fprintf(stderr, "%s: text %d, flags %d: ids differ from the tokenizers package's\n", name, k, flags);
        print_ids(name, ids, n, want);
        check_failures++;
    }
    *n_out = n;
    return ids;
}

/* hg_tokenizer_decode and the streaming decoder both give want. */
static void check_decode(const hg_tokenizer *tok, const char *name, int k, const int32_t *ids, size_t n,
                         const char *want) {
    size_t wl = strlen(want), cap = n * hg_tokenizer_max_token_bytes(tok) + 8, nb;
    char *out = malloc(cap);
    CHECK_OK(hg_tokenizer_decode(tok, ids, n, out, cap, &nb));
    if (nb != wl || memcmp(out, want, wl)) {
        fprintf(stderr, "%s: text %d: decoded \"%.*s\", want \"%s\"\n", name, k, (int)nb, out, want);
        check_failures++;
    }
    hg_decoder *d;
    CHECK_OK(hg_decoder_create(&d, tok));
    size_t o = 0, got;
    for (size_t i = 0; i < n; i++) {
        CHECK_OK(hg_decoder_push(d, ids[i], out + o, cap - o, &got));
        o += got;
    }
    CHECK_OK(hg_decoder_flush(d, out + o, cap - o, &got));
    o += got;
    CHECK(o == wl && !memcmp(out, want, wl));
    hg_decoder_free(d);
    free(out);
}

/* Every ordinary token is found by its bytes, every added one by its content. */
static void check_token_ids(const hg_tokenizer *tok, const char *name, const cJSON *specials) {
    for (const cJSON *e = specials->child; e; e = e->next) {
        int32_t id = -2;
        CHECK_OK(hg_tokenizer_token_id(tok, e->string, &id));
        if (id != (int32_t)e->valuedouble) {
            fprintf(stderr, "%s: token_id(\"%s\") = %d, want %d\n", name, e->string, (int)id, (int)e->valuedouble);
            check_failures++;
        }
    }
    int found = 0;
    for (int32_t id = 0; id < hg_tokenizer_vocab_size(tok); id++) {
        const uint8_t *b;
        size_t n;
        CHECK_OK(hg_tokenizer_token_bytes(tok, id, &b, &n));
        char text[256];
        if (n >= sizeof text || memchr(b, 0, n) || (tok->flags[id] & (TOK_BYTE | TOK_ADDED))) continue;
        memcpy(text, b, n);
        text[n] = 0;
        int32_t got = -1;
        CHECK_OK(hg_tokenizer_token_id(tok, text, &got));
        CHECK(got == id);
        found++;
    }
    CHECK(found > 150);
    if (tok->chars && strncmp(name, "sp_unk", 6)) { /* the sp_unk ones have no byte tokens */
        int32_t id = -1;
        CHECK_OK(hg_tokenizer_token_id(tok, "<0x0A>", &id));
        CHECK(id == tok->byte_id['\n'] && id >= 0);
    }
    int32_t id = 0;
    CHECK(hg_tokenizer_token_id(tok, "no such token zq", &id) == HG_ERR_INVALID && id == -1);
    CHECK(strstr(hg_last_error(), "\"no such token zq\"") != NULL);
}

/* Saving writes the file back byte for byte; the reloaded tokenizer encodes the same. */
static void check_save(const hg_tokenizer *tok, const char *path, const char *text) {
    char dir[] = "/tmp/hg_tokjson_XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    CHECK_OK(hg_tokenizer_save_hf(tok, dir));
    char saved[256];
    snprintf(saved, sizeof saved, "%s/tokenizer.json", dir);
    size_t a, b;
    char *orig = read_text(path, &a), *back = read_text(saved, &b);
    CHECK(a == b && !memcmp(orig, back, a));
    hg_tokenizer *again;
    CHECK_OK(hg_tokenizer_load(&again, dir)); /* a folder with tokenizer.json */
    size_t len = strlen(text), n1, n2, cap = hg_tokenizer_max_ids(tok, len);
    int32_t *x = malloc(cap * sizeof *x), *y = malloc(cap * sizeof *y);
    CHECK_OK(hg_tokenizer_encode(tok, text, len, HG_ENCODE_ALLOW_SPECIAL, x, cap, &n1));
    CHECK_OK(hg_tokenizer_encode(again, text, len, HG_ENCODE_ALLOW_SPECIAL, y, cap, &n2));
    CHECK(n1 == n2 && !memcmp(x, y, n1 * sizeof *x));
    CHECK(hg_tokenizer_bos(again) == hg_tokenizer_bos(tok) && hg_tokenizer_eot(again) == hg_tokenizer_eot(tok));
    free(x);
    free(y);
    free(orig);
    free(back);
    hg_tokenizer_free(again);
    unlink(saved);
    rmdir(dir);
}

/* Random bytes, invalid UTF-8 included, round-trip through a byte-level tokenizer. */
static void check_random_bytes(const hg_tokenizer *tok) {
    uint8_t text[600], back[4096];
    int32_t ids[600];
    for (int r = 0; r < 300; r++) {
        size_t len = 1 + rng_next() % sizeof text, n, nb;
        for (size_t i = 0; i < len; i++) {
            uint32_t x = rng_next();
            text[i] = x % 4 == 0 ? (uint8_t)(x >> 8) : (uint8_t)" aé\xe2\x96\x81\t\n<|>1"[(x >> 8) % 13];
        }
        CHECK_OK(hg_tokenizer_encode(tok, text, len, 0, ids, len, &n));
        CHECK_OK(hg_tokenizer_decode(tok, ids, n, back, sizeof back, &nb));
        CHECK(nb == len && !memcmp(back, text, len));
    }
}

/* The pipelines of the families' files were read as meant: OLMo 2's inverted Removed
 * keeps the matches (its pattern leaves nothing between them, so no text is lost);
 * Gemma 2's Split " " after the Replace normalizer is no step at all. */
static void check_pipeline(const char *name, const hg_tokenizer *tok) {
    if (!strcmp(name, "olmo2"))
        CHECK(tok->pre.n_steps == 1 && tok->pre.step[0].behavior == PRETOK_MATCHES_ONLY && !tok->pre.may_drop &&
              !tok->chars && tok->cut_safe);
    if (!strcmp(name, "gemma2") || !strcmp(name, "gemma"))
        CHECK(tok->pre.n_steps == 0 && tok->chars && tok->byte_id['\t'] < 0 && !tok->strip_space);
    if (!strcmp(name, "phi3")) CHECK(tok->bos == -1 && tok->strip_space && tok->chars);
}

static void check_fixture(const char *name, const cJSON *ref, const cJSON *texts) {
    const char *file = cJSON_GetObjectItem(ref, "file")->valuestring;
    char path[256];
    snprintf(path, sizeof path, FIXTURES "%s", file);
    hg_tokenizer *tok, *by_path;
    char dir[256];
    snprintf(dir, sizeof dir, FIXTURES "%s", name);
    CHECK_OK(hg_tokenizer_load(&tok, dir));
    CHECK_OK(hg_tokenizer_load(&by_path, path));
    if (!tok || !by_path) return;
    hg_tokenizer_free(by_path);
    CHECK(hg_tokenizer_vocab_size(tok) == (int)cJSON_GetObjectItem(ref, "vocab_size")->valuedouble);
    CHECK(hg_tokenizer_bos(tok) == (int32_t)cJSON_GetObjectItem(ref, "bos")->valuedouble);
    const cJSON *specials = cJSON_GetObjectItem(ref, "specials"), *eot = cJSON_GetObjectItem(specials, "<|endoftext|>");
    CHECK(hg_tokenizer_eot(tok) == (eot ? (int32_t)eot->valuedouble : -1));
    check_token_ids(tok, name, specials);
    int k = 0, compared = 0;
    const cJSON *text = texts->child;
    for (const cJSON *c = cJSON_GetObjectItem(ref, "cases")->child; c; c = c->next, text = text->next, k++) {
        size_t n;
        int32_t *ids = check_encode(tok, name, k, text->valuestring, 0, cJSON_GetObjectItem(c, "plain"), &n);
        /* without a normalizer, the ids of a byte-level tokenizer give the text back */
        if (!tok->chars && !tok->norm.n_steps && !tok->pre.may_drop)
            check_decode(tok, name, k, ids, n, text->valuestring);
        free(ids);
        ids = check_encode(tok, name, k, text->valuestring, HG_ENCODE_ALLOW_SPECIAL, cJSON_GetObjectItem(c, "special"),
                           &n);
        check_decode(tok, name, k, ids, n, cJSON_GetObjectItem(c, "decoded")->valuestring);
        const cJSON *bos = cJSON_GetObjectItem(c, "bos");
        if (bos) { /* the post-processor's BOS, then the ids */
            CHECK(cJSON_GetArraySize(bos) == (int)n + 1 && (int32_t)bos->child->valuedouble == hg_tokenizer_bos(tok));
            int i = 0;
            for (const cJSON *e = bos->child->next; e && (size_t)i < n; e = e->next, i++)
                CHECK((int32_t)e->valuedouble == ids[i]);
        }
        free(ids);
        compared++;
    }
    CHECK(compared >= 20);
    check_save(tok, path, texts->child->valuestring);
    if (!tok->chars && !tok->norm.n_steps && !tok->pre.may_drop) check_random_bytes(tok);
    check_pipeline(name, tok);
    hg_tokenizer_free(tok);
}

/* ------------------------------------------------------------- units */

static void check_translate(const char *in, const char *want) {
    const char *why = NULL;
    size_t at = 0;
    char *out = pretok_translate(in, strlen(in), &why, &at);
    if (!want) {
        CHECK(out == NULL && why != NULL);
    } else if (!out || strcmp(out, want)) {
        fprintf(stderr, "translate(%s) = %s, want %s\n", in, out ? out : why, want);
        check_failures++;
    }
    free(out);
}

/* Pieces of one Split step with a behavior, as the tokenizers package gives them
 * (checked with pre_tokenizers.Split(Regex(...), behavior, invert).pre_tokenize_str). */
static void check_split_as(const char *pattern, pretok_behavior behavior, const char *text, const char *const *want,
                           int n_want) {
    pretok p;
    pretok_init_empty(&p);
    const char *why;
    size_t at;
    char *pcre = pretok_translate(pattern, strlen(pattern), &why, &at);
    CHECK_OK(pretok_add_split(&p, pcre, strlen(pcre), 0, behavior, "test pattern"));
    free(pcre);
    pretok_iter it;
    CHECK_OK(pretok_iter_init(&it, &p, (const uint8_t *)text, strlen(text)));
    size_t a, b;
    int k = 0;
    while (pretok_iter_next(&it, &a, &b)) {
        if (k >= n_want || strlen(want[k]) != b - a || memcmp(want[k], text + a, b - a)) {
            fprintf(stderr, "split(%s, %d, %s): piece %d is \"%.*s\"\n", pattern, (int)behavior, text, k, (int)(b - a),
                    text + a);
            check_failures++;
        }
        k++;
    }
    CHECK(k == n_want);
    pretok_iter_free(&it);
    pretok_free(&p);
}

static void check_split(const char *pattern, const char *text, const char *const *want, int n_want) {
    check_split_as(pattern, PRETOK_ISOLATED, text, want, n_want);
}

static void test_units(void) {
    check_translate("\\s+(?!\\S)", "\\p{White_Space}+(?!\\P{White_Space})");
    check_translate("[^\\s\\p{L}]", "[^\\p{White_Space}\\p{L}]");
    check_translate("\\d\\w[\\w-]\\h\\u00e9{,3}", "\\p{Nd}[\\p{L}\\p{M}\\p{Nd}\\p{Pc}][\\p{L}\\p{M}\\p{Nd}\\p{Pc}-][0-9a-fA-F]\\x{00e9}{0,3}");
    check_translate("\\bword", NULL);
    check_translate("(a)\\1", NULL);
    check_translate("[[:alpha:]]", NULL);
    check_translate("[a-z&&[^x]]", NULL);
    check_translate("(?m:.)", NULL);
    check_translate("[abc", NULL);
    /* Oniguruma's \s, as the package's Split showed it: no U+180E, U+200B, U+FEFF, 0x1C-0x1F */
    const char *ws[] = {"a", "\xc2\xa0", "b", "\xe3\x80\x80", "c\xe1\xa0\x8e" "d"};
    check_split("\\s", "a\xc2\xa0" "b\xe3\x80\x80" "c\xe1\xa0\x8e" "d", ws, 5);
    /* Text between matches is a piece; an empty match splits, and one right after the
     * last match is skipped. */
    const char *gap[] = {"ab", "12", "cd", "3"};
    check_split("[0-9]+", "ab12cd3", gap, 4);
    const char *empty[] = {"a", "xx", "b", "c"};
    check_split("x*", "axxbc", empty, 4);
    const char *ci[] = {"IT", "'S"};
    check_split("(?i:'s)", "IT'S", ci, 2);
    /* The other behaviors: Removed drops the matches, Removed with invert the text
     * between them (OLMo 2's file), MergedWithPrevious joins a match to the text before
     * it (Gemma's), a match after a match stays alone. */
    const char *rm[] = {"ab", "cd", "ef"}, *rm2[] = {"ab"}, *only[] = {"12", "3"}, *merged[] = {"ab12", "cd3", "ef"};
    const char *merged2[] = {"12", "ab3"};
    check_split_as("[0-9]+", PRETOK_REMOVED, "ab12cd3ef", rm, 3);
    check_split_as("[0-9]+", PRETOK_REMOVED, "12ab3", rm2, 1);
    check_split_as("[0-9]+", PRETOK_MATCHES_ONLY, "ab12cd3ef", only, 2);
    check_split_as("[0-9]+", PRETOK_MATCHES_ONLY, "12ab3", only, 2);
    check_split_as("[0-9]+", PRETOK_MERGED_PREV, "ab12cd3ef", merged, 3);
    check_split_as("[0-9]+", PRETOK_MERGED_PREV, "12ab3", merged2, 2);
    const char *dash_rm[] = {"the", "final", "countdown"}, *dash_only[] = {"-", "-", "-", "-"};
    const char *dash_merged[] = {"the-", "final-", "-", "countdown-"};
    check_split_as("-", PRETOK_REMOVED, "the-final--countdown-", dash_rm, 3);
    check_split_as("-", PRETOK_MATCHES_ONLY, "the-final--countdown-", dash_only, 4);
    check_split_as("-", PRETOK_MERGED_PREV, "the-final--countdown-", dash_merged, 4);
    const char *x_rm[] = {"a", "b", "c"}, *x_only[] = {"xx"}, *x_merged[] = {"axx", "b", "c"};
    check_split_as("x*", PRETOK_REMOVED, "axxbc", x_rm, 3);
    check_split_as("x*", PRETOK_MATCHES_ONLY, "axxbc", x_only, 1);
    check_split_as("x*", PRETOK_MERGED_PREV, "axxbc", x_merged, 3);
    const char *a_rm[] = {"b"}, *a_only[] = {"a"}, *a_merged[] = {"ba"};
    check_split_as("a*", PRETOK_REMOVED, "ba", a_rm, 1);
    check_split_as("a*", PRETOK_MATCHES_ONLY, "ba", a_only, 1);
    check_split_as("a*", PRETOK_MERGED_PREV, "ba", a_merged, 1);
    const char *s_merged[] = {"a ", "b ", " ", "c "};
    check_split_as("\\s", PRETOK_MERGED_PREV, "a b  c ", s_merged, 4);
    /* NFC: the stable ranges have combining class 0 and are their own NFC in
     * utf8proc's tables too (the rest of the claim was checked with Python's
     * unicodedata when the ranges were written). */
    int bad = 0;
    for (uint32_t cp = 0; cp < 0x110000; cp++) {
        if (!norm_nfc_stable(cp) || (cp >= 0xD800 && cp <= 0xDFFF)) continue;
        utf8proc_uint8_t one[4], *nfc = NULL;
        utf8proc_ssize_t k = utf8proc_encode_char((utf8proc_int32_t)cp, one);
        utf8proc_ssize_t m = utf8proc_map(one, k, &nfc, UTF8PROC_STABLE | UTF8PROC_COMPOSE);
        if (utf8proc_get_property((utf8proc_int32_t)cp)->combining_class != 0 || m != k || memcmp(nfc, one, (size_t)k))
            bad++;
        free(nfc);
    }
    CHECK(bad == 0);
    const uint8_t *out;
    size_t n;
    uint8_t *owned;
    const char *dec = "cafe\xcc\x81 A\xcc\x8a \xe1\x84\x80\xe1\x85\xa1 x\xff" "e\xcc\x81";
    CHECK_OK(norm_nfc((const uint8_t *)dec, strlen(dec), &out, &n, &owned));
    const char *pre = "caf\xc3\xa9 \xc3\x85 \xea\xb0\x80 x\xff" "\xc3\xa9";
    CHECK(owned && n == strlen(pre) && !memcmp(out, pre, n));
    free(owned);
    CHECK_OK(norm_nfc((const uint8_t *)"plain \xe4\xb8\xad\xf0\x9f\x98\x80", 13, &out, &n, &owned));
    CHECK(owned == NULL && n == 13);
}

/* ------------------------------------------------------------ bad input */

typedef void mutate_fn(cJSON *root);

static cJSON *path_get(cJSON *root, const char *a, const char *b) {
    cJSON *x = cJSON_GetObjectItem(root, a);
    return b ? cJSON_GetObjectItem(x, b) : x;
}

static void set_item(cJSON *obj, const char *key, cJSON *value) {
    if (cJSON_GetObjectItem(obj, key)) cJSON_ReplaceItemInObject(obj, key, value);
    else cJSON_AddItemToObject(obj, key, value);
}

static void m_wordpiece(cJSON *r) { set_item(path_get(r, "model", NULL), "type", cJSON_CreateString("WordPiece")); }
static void m_nfkc(cJSON *r) {
    cJSON *n = cJSON_CreateObject();
    cJSON_AddStringToObject(n, "type", "NFKC");
    set_item(r, "normalizer", n);
}
static cJSON *split_step(cJSON *r) { return cJSON_GetArrayItem(path_get(r, "pre_tokenizer", "pretokenizers"), 0); }
static void m_behavior(cJSON *r) { set_item(split_step(r), "behavior", cJSON_CreateString("MergedWithNext")); }
static void m_invert(cJSON *r) { /* Isolated ignores invert, Removed flips it; MergedWithPrevious refuses it */
    set_item(split_step(r), "behavior", cJSON_CreateString("MergedWithPrevious"));
    set_item(split_step(r), "invert", cJSON_CreateTrue());
}
static void m_sp_split(cJSON *r, const char *kind, const char *pattern, const char *behavior, int invert) {
    cJSON *p = cJSON_CreateObject(), *pat = cJSON_CreateObject();
    cJSON_AddStringToObject(p, "type", "Split");
    cJSON_AddStringToObject(pat, kind, pattern);
    cJSON_AddItemToObject(p, "pattern", pat);
    cJSON_AddStringToObject(p, "behavior", behavior);
    cJSON_AddBoolToObject(p, "invert", invert);
    set_item(r, "pre_tokenizer", p);
}
/* Sentencepiece style: a regex would see spaces where the package sees "▁" */
static void m_sp_regex(cJSON *r) { m_sp_split(r, "Regex", "\\s+", "Isolated", 0); }
/* A space never matches after the Replace normalizer: inverted Removed would drop all text */
static void m_sp_space_removed(cJSON *r) { m_sp_split(r, "String", " ", "Removed", 1); }
static void m_regex_b(cJSON *r) {
    cJSON *pat = cJSON_CreateObject();
    cJSON_AddStringToObject(pat, "Regex", "\\b\\w+");
    set_item(split_step(r), "pattern", pat);
}
static void m_prefix_space(cJSON *r) {
    set_item(cJSON_GetArrayItem(path_get(r, "pre_tokenizer", "pretokenizers"), 1), "add_prefix_space",
             cJSON_CreateTrue());
}
static void m_added_collide(cJSON *r) { /* <|eot_id|> takes <|end_of_text|>'s id */
    cJSON *a = path_get(r, "added_tokens", NULL);
    set_item(cJSON_GetArrayItem(a, 2), "id", cJSON_CreateNumber(cJSON_GetObjectItem(cJSON_GetArrayItem(a, 1), "id")->valuedouble));
}
static void m_added_vocab(cJSON *r) { /* <|begin_of_text|> takes a vocabulary id */
    set_item(cJSON_GetArrayItem(path_get(r, "added_tokens", NULL), 0), "id", cJSON_CreateNumber(300));
}
static void m_merge_unknown(cJSON *r) {
    cJSON_ReplaceItemInArray(path_get(r, "model", "merges"), 3, cJSON_CreateString("\xc4\xa0 zqzq"));
}
static void m_merge_twice(cJSON *r) {
    cJSON *m = path_get(r, "model", "merges");
    cJSON_ReplaceItemInArray(m, 7, cJSON_CreateString(cJSON_GetArrayItem(m, 2)->valuestring));
}
static void m_dropout(cJSON *r) { set_item(path_get(r, "model", NULL), "dropout", cJSON_CreateNumber(0.1)); }
static void m_suffix(cJSON *r) { set_item(path_get(r, "model", NULL), "end_of_word_suffix", cJSON_CreateString("</w>")); }
static void m_hole(cJSON *r) { cJSON_DeleteItemFromObject(path_get(r, "model", "vocab"), "the"); }
static void m_unknown_key(cJSON *r) { cJSON_AddStringToObject(r, "tokenizer_extra", "x"); }
static void m_roberta(cJSON *r) {
    cJSON *p = cJSON_CreateObject();
    cJSON_AddStringToObject(p, "type", "RobertaProcessing");
    set_item(r, "post_processor", p);
}
static void m_decoder(cJSON *r) {
    cJSON *d = cJSON_CreateObject();
    cJSON_AddStringToObject(d, "type", "WordPiece");
    set_item(r, "decoder", d);
}
static void m_alphabet(cJSON *r) { /* a space is no character of GPT-2's byte alphabet */
    cJSON *v = path_get(r, "model", "vocab");
    double id = cJSON_GetObjectItem(v, "Hello")->valuedouble;
    cJSON_DeleteItemFromObject(v, "Hello");
    cJSON_AddNumberToObject(v, "a b", id);
}
static void m_byte_fallback(cJSON *r) { set_item(path_get(r, "model", NULL), "byte_fallback", cJSON_CreateTrue()); }
static void m_sp_no_fallback_decoder(cJSON *r) {
    cJSON_DeleteItemFromArray(path_get(r, "decoder", "decoders"), 1);
}

static void check_bad(const char *base, mutate_fn *fn, hg_status want, const char *key) {
    cJSON *root = cJSON_Parse(base);
    fn(root);
    char *text = cJSON_Print(root);
    cJSON_Delete(root);
    hg_tokenizer *tok = NULL;
    hg_status s = vocab_parse_tokjson(&tok, (const uint8_t *)text, strlen(text), "bad/tokenizer.json");
    const char *msg = hg_last_error();
    if (s != want || tok || strncmp(msg, "bad/tokenizer.json: ", 20) || !strstr(msg, key)) {
        fprintf(stderr, "bad input (want %s naming %s): got %s: %s\n", hg_status_name(want), key, hg_status_name(s),
                s == HG_OK ? "(accepted)" : msg);
        check_failures++;
    }
    hg_tokenizer_free(tok);
    free(text);
}

static void test_bad_input(void) {
    size_t len;
    char *llama = read_text(FIXTURES "llama3/tokenizer.json", &len);
    check_bad(llama, m_wordpiece, HG_ERR_UNSUPPORTED, "model.type");
    check_bad(llama, m_nfkc, HG_ERR_UNSUPPORTED, "normalizer.type");
    check_bad(llama, m_behavior, HG_ERR_UNSUPPORTED, "pre_tokenizer.pretokenizers[0].behavior");
    check_bad(llama, m_invert, HG_ERR_UNSUPPORTED, "pre_tokenizer.pretokenizers[0].invert");
    check_bad(llama, m_regex_b, HG_ERR_UNSUPPORTED, "pre_tokenizer.pretokenizers[0].pattern.Regex");
    check_bad(llama, m_prefix_space, HG_ERR_UNSUPPORTED, "pre_tokenizer.pretokenizers[1].add_prefix_space");
    check_bad(llama, m_added_collide, HG_ERR_FORMAT, "added_tokens[2].id");
    check_bad(llama, m_added_vocab, HG_ERR_FORMAT, "added_tokens[0].id");
    check_bad(llama, m_merge_unknown, HG_ERR_FORMAT, "model.merges[3]");
    check_bad(llama, m_merge_twice, HG_ERR_FORMAT, "model.merges[7]");
    check_bad(llama, m_dropout, HG_ERR_UNSUPPORTED, "model.dropout");
    check_bad(llama, m_suffix, HG_ERR_UNSUPPORTED, "model.end_of_word_suffix");
    check_bad(llama, m_hole, HG_ERR_FORMAT, "neither in model.vocab nor in added_tokens");
    check_bad(llama, m_unknown_key, HG_ERR_UNSUPPORTED, "tokenizer_extra");
    check_bad(llama, m_roberta, HG_ERR_UNSUPPORTED, "post_processor.type");
    check_bad(llama, m_decoder, HG_ERR_UNSUPPORTED, "decoder.type");
    check_bad(llama, m_alphabet, HG_ERR_FORMAT, "model.vocab: \"a b\"");
    /* byte_fallback changes nothing in a byte-level model: every character is a token */
    cJSON *root = cJSON_Parse(llama);
    m_byte_fallback(root);
    char *text = cJSON_Print(root);
    hg_tokenizer *tok = NULL;
    CHECK_OK(vocab_parse_tokjson(&tok, (const uint8_t *)text, strlen(text), "fallback.json"));
    hg_tokenizer_free(tok);
    free(text);
    cJSON_Delete(root);
    char *sp = read_text(FIXTURES "sp/tokenizer.json", &len);
    check_bad(sp, m_sp_no_fallback_decoder, HG_ERR_UNSUPPORTED, "decoder.decoders");
    check_bad(sp, m_nfkc, HG_ERR_UNSUPPORTED, "normalizer.type");
    check_bad(sp, m_sp_regex, HG_ERR_UNSUPPORTED, "pre_tokenizer.pattern.Regex");
    check_bad(sp, m_sp_space_removed, HG_ERR_UNSUPPORTED, "pre_tokenizer.pattern.String");
    /* Invalid JSON: cut the file short. */
    tok = NULL;
    CHECK(vocab_parse_tokjson(&tok, (const uint8_t *)llama, len / 2, "half/tokenizer.json") == HG_ERR_FORMAT);
    CHECK(!tok && strstr(hg_last_error(), "half/tokenizer.json:") && strstr(hg_last_error(), "not valid JSON"));
    /* The file name from the loader. */
    FILE *f = fopen("/tmp/hg_tokjson_bad_tokenizer.json", "w");
    fwrite(llama, 1, len / 3, f);
    fclose(f);
    CHECK(hg_tokenizer_load(&tok, "/tmp/hg_tokjson_bad_tokenizer.json") == HG_ERR_FORMAT);
    CHECK(strstr(hg_last_error(), "/tmp/hg_tokjson_bad_tokenizer.json:") == hg_last_error());
    unlink("/tmp/hg_tokjson_bad_tokenizer.json");
    free(llama);
    free(sp);
}

int main(void) {
    test_units();
    size_t len;
    char *text = read_text(FIXTURES "reference.json", &len);
    cJSON *ref = cJSON_Parse(text);
    CHECK(ref != NULL);
    const cJSON *texts = cJSON_GetObjectItem(ref, "texts");
    int n = 0;
    for (const cJSON *t = cJSON_GetObjectItem(ref, "tokenizers")->child; t; t = t->next, n++) check_fixture(t->string, t, texts);
    CHECK(n == 12);
    test_bad_input();
    cJSON_Delete(ref);
    free(text);
    CHECK_DONE();
}
