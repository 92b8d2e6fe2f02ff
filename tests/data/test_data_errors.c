/* Bad input to the data module: every case must fail with a status and a message that
 * names the file and the line or byte offset, never crash or read out of bounds
 * (the ASan build runs this too). */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "data/shard.h"
#include "handgrad_data.h"

static char dir[] = "/tmp/hg_errors_XXXXXX";

static const char *path_in(const char *name) {
    static char buf[16][256]; /* a ring, so a few paths can be live at once */
    static int k;
    k = (k + 1) % 16;
    snprintf(buf[k], sizeof buf[k], "%s/%s", dir, name);
    return buf[k];
}

static void write_file(const char *name, const void *data, size_t len) {
    FILE *f = fopen(path_in(name), "wb");
    CHECK(f && fwrite(data, 1, len, f) == len);
    if (f) fclose(f);
}

/* The status is `want` and the message holds each of the fragments. */
static void expect(hg_status got, hg_status want, const char *frag1, const char *frag2, int line) {
    if (got != want || !strstr(hg_last_error(), frag1) || (frag2 && !strstr(hg_last_error(), frag2))) {
        fprintf(stderr, "%s:%d: got %s \"%s\", want %s with \"%s\"%s%s\n", __FILE__, line, hg_status_name(got),
                hg_last_error(), hg_status_name(want), frag1, frag2 ? " and " : "", frag2 ? frag2 : "");
        check_failures++;
    }
}
#define EXPECT(call, want, f1, f2) expect((call), (want), (f1), (f2), __LINE__)

static void test_tiktoken_errors(void) {
    hg_tokenizer *t;
    EXPECT(hg_tokenizer_load(&t, path_in("missing.tiktoken")), HG_ERR_IO, "missing.tiktoken", NULL);
    write_file("garbled.tiktoken", "IQ== 0\nIg== 1\n!!!! 2\n", 21);
    EXPECT(hg_tokenizer_load(&t, path_in("garbled.tiktoken")), HG_ERR_FORMAT, "garbled.tiktoken:3", "base64");
    write_file("rank.tiktoken", "IQ== 0\nIg== one\n", 16);
    EXPECT(hg_tokenizer_load(&t, path_in("rank.tiktoken")), HG_ERR_FORMAT, "rank.tiktoken:2", "rank");
    write_file("dup.tiktoken", "IQ== 0\nIg== 0\n", 14);
    EXPECT(hg_tokenizer_load(&t, path_in("dup.tiktoken")), HG_ERR_FORMAT, "dup.tiktoken:2", "line 1");
    write_file("fields.tiktoken", "IQ== 0 7\n", 9);
    EXPECT(hg_tokenizer_load(&t, path_in("fields.tiktoken")), HG_ERR_FORMAT, "fields.tiktoken:1", NULL);
    /* Truncated: ranks 0..2 only, so most bytes have no token. */
    write_file("short.tiktoken", "IQ== 0\nIg== 1\nIw== 2", 20);
    EXPECT(hg_tokenizer_load(&t, path_in("short.tiktoken")), HG_ERR_FORMAT, "short.tiktoken", "256");
    write_file("gap.tiktoken", "IQ== 0\nIg== 5\n", 14);
    EXPECT(hg_tokenizer_load(&t, path_in("gap.tiktoken")), HG_ERR_FORMAT, "gap.tiktoken:2", NULL);
}

/* A valid Hugging Face pair of files from a tiny trained vocabulary. */
static void write_valid_hf(void) {
    hg_bpe_trainer *tr;
    hg_tokenizer *t = NULL;
    const char *text = "the theme then these the the";
    CHECK_OK(hg_bpe_trainer_create(&tr, 262));
    CHECK_OK(hg_bpe_trainer_add(tr, text, strlen(text)));
    CHECK_OK(hg_bpe_trainer_finish(tr, &t));
    if (t) CHECK_OK(hg_tokenizer_save_hf(t, dir));
    hg_tokenizer_free(t);
    hg_bpe_trainer_free(tr);
}

static void test_hf_errors(void) {
    hg_tokenizer *t = NULL;
    write_valid_hf();
    CHECK_OK(hg_tokenizer_load(&t, dir));
    hg_tokenizer_free(t);
    char vocab[256], merges[256];
    snprintf(vocab, sizeof vocab, "%s", path_in("vocab.json"));
    snprintf(merges, sizeof merges, "%s", path_in("merges.txt"));
    EXPECT(hg_tokenizer_load_hf(&t, path_in("nope.json"), merges), HG_ERR_IO, "nope.json", NULL);
    write_file("trunc.json", "{\"a\": 0,\n \"b\"", 13);
    EXPECT(hg_tokenizer_load_hf(&t, path_in("trunc.json"), merges), HG_ERR_FORMAT, "trunc.json:2", "offset");
    write_file("array.json", "[1, 2]", 6);
    EXPECT(hg_tokenizer_load_hf(&t, path_in("array.json"), merges), HG_ERR_FORMAT, "array.json", "object");
    write_file("space.json", "{\"!\": 0,\n\"a b\": 1}", 18);
    EXPECT(hg_tokenizer_load_hf(&t, path_in("space.json"), merges), HG_ERR_FORMAT, "space.json:2", "a b");
    write_file("id.json", "{\"!\": 0,\n\"a\": 7}", 16);
    EXPECT(hg_tokenizer_load_hf(&t, path_in("id.json"), merges), HG_ERR_FORMAT, "id.json:2", "\"a\"");
    write_file("few.json", "{\"!\": 0, \"a\": 1}", 16);
    EXPECT(hg_tokenizer_load_hf(&t, path_in("few.json"), merges), HG_ERR_FORMAT, "few.json", "256");
    /* Bad merges files start with the first, valid, merge of the saved file. */
    char good[64] = "", bad[256];
    FILE *f = fopen(merges, "r");
    CHECK(f && fgets(good, sizeof good, f) && fgets(good, sizeof good, f));
    if (f) fclose(f);
    snprintf(bad, sizeof bad, "#version: 0.2\n%sq\xc4\xa0 zz\n", good);
    write_file("m_unknown.txt", bad, strlen(bad));
    EXPECT(hg_tokenizer_load_hf(&t, vocab, path_in("m_unknown.txt")), HG_ERR_FORMAT, "m_unknown.txt:3",
           "vocabulary");
    snprintf(bad, sizeof bad, "%st h e\n", good);
    write_file("m_fields.txt", bad, strlen(bad));
    EXPECT(hg_tokenizer_load_hf(&t, vocab, path_in("m_fields.txt")), HG_ERR_FORMAT, "m_fields.txt:2", "two tokens");
    snprintf(bad, sizeof bad, "%st\t h\n", good);
    write_file("m_alpha.txt", bad, strlen(bad));
    EXPECT(hg_tokenizer_load_hf(&t, vocab, path_in("m_alpha.txt")), HG_ERR_FORMAT, "m_alpha.txt:2", "column 2");
    EXPECT(hg_tokenizer_load(&t, path_in("merges.txt")), HG_ERR_INVALID, "merges.txt", NULL);
}

static void put32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static void test_shard_errors(void) {
    hg_shard_info info;
    uint8_t h[64 + 20] = {0};
    memcpy(h, SHARD_MAGIC, 8);
    put32(h + 8, 1);
    put32(h + 12, 2);
    put32(h + 16, 10);
    put32(h + 24, 100);
    write_file("good.bin", h, sizeof h);
    CHECK_OK(hg_shard_inspect(path_in("good.bin"), HG_SHARD_AUTO, &info));
    CHECK(info.format == HG_SHARD_HANDGRAD && info.n_tokens == 10 && info.vocab_size == 100);
    write_file("garbage.tok", "not a shard at all", 18);
    EXPECT(hg_shard_inspect(path_in("garbage.tok"), HG_SHARD_AUTO, &info), HG_ERR_FORMAT, "garbage.tok: offset 0",
           "magic");
    EXPECT(hg_shard_inspect(path_in("garbage.tok"), HG_SHARD_HANDGRAD, &info), HG_ERR_FORMAT, "garbage.tok: offset 0", "header");
    put32(h + 8, 3);
    write_file("version.bin", h, sizeof h);
    EXPECT(hg_shard_inspect(path_in("version.bin"), HG_SHARD_AUTO, &info), HG_ERR_FORMAT, "version.bin: offset 8",
           "version 3");
    /* version 2: a streams word; the token flags make a byte a token more */
    put32(h + 8, 2);
    write_file("v2.bin", h, sizeof h);
    CHECK_OK(hg_shard_inspect(path_in("v2.bin"), HG_SHARD_AUTO, &info));
    CHECK(info.n_tokens == 10 && !info.has_flags);
    put32(h + 36, 1);
    write_file("v2_short.bin", h, sizeof h);
    EXPECT(hg_shard_inspect(path_in("v2_short.bin"), HG_SHARD_AUTO, &info), HG_ERR_FORMAT, "v2_short.bin: offset 16",
           "with their flags");
    {
        uint8_t f[64 + 30] = {0};
        memcpy(f, h, 64);
        write_file("v2_flags.bin", f, sizeof f);
        CHECK_OK(hg_shard_inspect(path_in("v2_flags.bin"), HG_SHARD_AUTO, &info));
        CHECK(info.n_tokens == 10 && info.has_flags);
        put32(f + 36, 6);
        write_file("v2_streams.bin", f, sizeof f);
        EXPECT(hg_shard_inspect(path_in("v2_streams.bin"), HG_SHARD_AUTO, &info), HG_ERR_FORMAT,
               "v2_streams.bin: offset 36", "streams");
    }
    put32(h + 36, 0);
    put32(h + 8, 1);
    write_file("short.bin", h, sizeof h - 2);
    EXPECT(hg_shard_inspect(path_in("short.bin"), HG_SHARD_AUTO, &info), HG_ERR_FORMAT, "short.bin: offset 16",
           "10 tokens");
    write_file("header.bin", h, 30);
    EXPECT(hg_shard_inspect(path_in("header.bin"), HG_SHARD_AUTO, &info), HG_ERR_FORMAT, "header.bin: offset 0",
           "header");
    put32(h + 12, 3);
    write_file("width.bin", h, sizeof h);
    EXPECT(hg_shard_inspect(path_in("width.bin"), HG_SHARD_AUTO, &info), HG_ERR_FORMAT, "offset 12", "width");
    uint8_t l[1024 + 8] = {0};
    put32(l, LLMC_MAGIC);
    put32(l + 4, 3);
    put32(l + 8, 4);
    write_file("llmc.bin", l, sizeof l);
    EXPECT(hg_shard_inspect(path_in("llmc.bin"), HG_SHARD_AUTO, &info), HG_ERR_FORMAT, "llmc.bin: offset 4",
           "version 3");
    put32(l + 4, 1);
    put32(l + 8, 5);
    write_file("llmc_len.bin", l, sizeof l);
    EXPECT(hg_shard_inspect(path_in("llmc_len.bin"), HG_SHARD_AUTO, &info), HG_ERR_FORMAT, "llmc_len.bin: offset 8",
           NULL);
    write_file("odd.bin", "abc", 3);
    EXPECT(hg_shard_inspect(path_in("odd.bin"), HG_SHARD_AUTO, &info), HG_ERR_FORMAT, "odd.bin: offset 2", NULL);
    EXPECT(hg_shard_inspect(path_in("none.bin"), HG_SHARD_AUTO, &info), HG_ERR_IO, "none.bin", NULL);
}

/* Writes a one-shard file and opens a loader on it. */
static hg_status open_shard(const char *name, const void *bytes, size_t n, const hg_loader_options *o, hg_loader **ld) {
    write_file(name, bytes, n);
    const char *paths[] = {path_in(name)};
    return hg_loader_open(ld, paths, 1, o);
}

static void test_loader_errors(void) {
    /* V = 100 in the header, and token 150 at index 5. */
    uint8_t h[64 + 40] = {0};
    memcpy(h, SHARD_MAGIC, 8);
    put32(h + 8, 1);
    put32(h + 12, 2);
    put32(h + 16, 20);
    put32(h + 24, 100);
    h[64 + 2 * 5] = 150;
    write_file("badtok.bin", h, sizeof h);
    hg_loader_options o = hg_loader_options_default();
    o.batch = 1;
    o.seq_len = 8;
    const char *paths[] = {path_in("badtok.bin")};
    hg_loader *ld = NULL;
    int32_t x[8], y[8];
    /* found at open, before any batch */
    EXPECT(hg_loader_open(&ld, paths, 1, &o), HG_ERR_FORMAT, "badtok.bin: offset 74", "token 150");
    /* the separator the header records must be an id too (-1: none) */
    h[64 + 2 * 5] = 7;
    put32(h + 28, 100);
    EXPECT(open_shard("badsep.bin", h, sizeof h, &o, &ld), HG_ERR_FORMAT, "badsep.bin: offset 28", "separator id 100");
    put32(h + 28, 99);
    o.vocab_size = 50; /* within the header's V, not the model's */
    EXPECT(open_shard("sep99.bin", h, sizeof h, &o, &ld), HG_ERR_FORMAT, "sep99.bin: offset 28", "99");
    o.vocab_size = 0;
    /* 4-byte tokens, 1001 of them (a vector loop's tail), the one bad token last */
    enum { N4 = 1001 };
    uint8_t *w = calloc(64 + 4 * N4, 1);
    if (w) {
        memcpy(w, h, 64);
        put32(w + 12, 4);
        put32(w + 16, N4);
        put32(w + 20, 0);
        put32(w + 24, 70000);
        put32(w + 28, 0xFFFFFFFFu);
        for (int i = 0; i < N4; i++) put32(w + 64 + 4 * i, (uint32_t)(i * 69));
        put32(w + 64 + 4 * (N4 - 1), 70000);
        EXPECT(open_shard("wide.bin", w, 64 + 4 * N4, &o, &ld), HG_ERR_FORMAT, "wide.bin: offset 4064", "token 70000");
        put32(w + 64 + 4 * (N4 - 1), 69999);
        CHECK_OK(open_shard("wide.bin", w, 64 + 4 * N4, &o, &ld));
        hg_loader_close(ld);
        free(w);
    }
    h[64 + 2 * 5] = 150;
    put32(h + 28, 0);
    /* the header's id bound: above V refused at once; one that lies (150 is above it)
     * passes the open, and the batch that reads the token still refuses it */
    put32(h + 32, 101);
    EXPECT(open_shard("bound.bin", h, sizeof h, &o, &ld), HG_ERR_FORMAT, "bound.bin: offset 32", "100");
    put32(h + 32, 50);
    CHECK_OK(open_shard("bound.bin", h, sizeof h, &o, &ld));
    if (ld) EXPECT(hg_loader_next(ld, x, y), HG_ERR_FORMAT, "bound.bin: offset 74", "150");
    hg_loader_close(ld);
    put32(h + 32, 0);
    /* the writer records the bound */
    shard_writer sw;
    const int32_t ids[] = {3, 41, 7, 0, 40};
    CHECK_OK(shard_writer_open(&sw, path_in("written.bin"), 100, 0, 0));
    CHECK_OK(shard_writer_write(&sw, ids, NULL, 5));
    CHECK_OK(shard_writer_close(&sw));
    hg_shard_info wi;
    CHECK_OK(hg_shard_inspect(path_in("written.bin"), HG_SHARD_AUTO, &wi));
    CHECK(wi.id_bound == 42 && wi.separator == 0 && wi.vocab_size == 100 && wi.n_tokens == 5);
    /* V given by the caller overrides the header. */
    o.vocab_size = 200;
    CHECK_OK(hg_loader_open(&ld, paths, 1, &o));
    if (ld) CHECK_OK(hg_loader_next(ld, x, y));
    hg_loader_close(ld);
    /* 20 tokens hold 2 windows of T+1 = 9, fewer than B = 3. */
    o.batch = 3;
    EXPECT(hg_loader_open(&ld, paths, 1, &o), HG_ERR_INVALID, "badtok.bin", "windows");
    o.batch = 1;
    o.world_size = 3;
    EXPECT(hg_loader_open(&ld, paths, 1, &o), HG_ERR_INVALID, "badtok.bin", "world_size");
    o.world_size = 1;
    o.seq_len = 0;
    EXPECT(hg_loader_open(&ld, paths, 1, &o), HG_ERR_INVALID, "seq_len", NULL);
    o.seq_len = 8;
    write_file("empty.bin", "", 0);
    const char *empty[] = {path_in("empty.bin")};
    EXPECT(hg_loader_open(&ld, empty, 1, &o), HG_ERR_INVALID, "empty.bin", "0 tokens");
    EXPECT(hg_loader_open_glob(&ld, path_in("nothing_*.bin"), &o), HG_ERR_IO, "nothing_", "no file");
}

static void test_prepare_errors(void) {
    hg_bpe_trainer *tr;
    hg_tokenizer *t = NULL;
    CHECK_OK(hg_bpe_trainer_create(&tr, 260));
    CHECK_OK(hg_bpe_trainer_add(tr, "abc abc", 7));
    CHECK_OK(hg_bpe_trainer_finish(tr, &t));
    hg_bpe_trainer_free(tr);
    if (!t) return;
    hg_prepare_options o = hg_prepare_options_default();
    char out[256];
    snprintf(out, sizeof out, "%s", path_in("out"));
    o.out_dir = out;
    hg_prepare_stats st;
    write_file("empty.txt", "", 0);
    write_file("markers.txt", "<|endoftext|><|endoftext|>", 26);
    const char *in1[] = {path_in("empty.txt")};
    EXPECT(hg_prepare_files(t, in1, 1, &o, &st), HG_ERR_INVALID, "empty.txt", "empty corpus");
    const char *in2[] = {path_in("markers.txt")};
    EXPECT(hg_prepare_files(t, in2, 1, &o, &st), HG_ERR_INVALID, "markers.txt", "empty corpus");
    const char *in3[] = {path_in("absent.txt")};
    EXPECT(hg_prepare_files(t, in3, 1, &o, &st), HG_ERR_IO, "absent.txt", NULL);
    o.val_fraction = 1.5;
    EXPECT(hg_prepare_files(t, in1, 1, &o, &st), HG_ERR_INVALID, "val_fraction", NULL);
    hg_tokenizer_free(t);
    rmdir(out);
}

int main(void) {
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    test_tiktoken_errors();
    test_hf_errors();
    test_shard_errors();
    test_loader_errors();
    test_prepare_errors();
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK(system(cmd) == 0);
    CHECK_DONE();
}
