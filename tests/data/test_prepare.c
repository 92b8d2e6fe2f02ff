/* Data preparation: the shards hold every input byte back (documents separated by
 * eot, or another separator token), the val split is the input's tail from a line start, shards respect their
 * size limit, and neither the thread count nor the cutting of documents into work
 * units changes a single token. */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "data/fileio.h"
#include "data/prepare.h"
#include "data/shard.h"
#include "handgrad_data.h"

static char dir[] = "/tmp/hg_prepare_XXXXXX";

static uint64_t rng_state = 7;
static uint32_t rng_next(void) {
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(rng_state >> 33);
}

/* Lines of words, some indented or blank, some non-ASCII: text with many safe and
 * unsafe cut points. */
static size_t make_text(char *buf, size_t len) {
    static const char *words[] = {"the", "cat", "sat", "on", "mat", "and", "it's", "42", "caf\xc3\xa9", "!", ","};
    size_t n = 0;
    while (n + 64 < len) {
        int r = (int)(rng_next() % 20);
        if (r == 0) buf[n++] = ' ';
        if (r == 1) buf[n++] = '\n';
        int k = 1 + (int)(rng_next() % 12);
        for (int i = 0; i < k; i++) n += (size_t)sprintf(buf + n, "%s%s", i ? " " : "", words[rng_next() % 11]);
        buf[n++] = rng_next() % 7 ? '\n' : ' ';
    }
    return n;
}

static void write_file(const char *path, const void *data, size_t len) {
    FILE *f = fopen(path, "wb");
    CHECK(f && fwrite(data, 1, len, f) == len);
    if (f) fclose(f);
}

/* Reads all shards of a split into one token array. */
static int32_t *read_split(const char *out, const char *split, size_t *n, int *n_shards, uint64_t max_per_shard) {
    int32_t *all = NULL;
    *n = 0;
    *n_shards = 0;
    for (int k = 0;; k++) {
        char path[512];
        snprintf(path, sizeof path, "%s/%s_%06d.bin", out, split, k);
        if (access(path, F_OK) != 0) break;
        const uint8_t *d;
        size_t len, at;
        hg_shard_info info;
        CHECK_OK(file_map(path, &d, &len));
        CHECK_OK(shard_parse(d, len, path, HG_SHARD_AUTO, &info, &at));
        CHECK(info.n_tokens <= max_per_shard);
        all = realloc(all, (*n + info.n_tokens + 1) * sizeof *all);
        for (uint64_t i = 0; i < info.n_tokens; i++) all[(*n)++] = (int32_t)shard_token(d + at, info.token_bytes, i);
        file_unmap(d, len);
        (*n_shards)++;
    }
    return all;
}

static hg_tokenizer *tokenizer_for(const char *text, size_t len) {
    hg_bpe_trainer *tr;
    hg_tokenizer *tok = NULL;
    CHECK_OK(hg_bpe_trainer_create(&tr, 400));
    CHECK_OK(hg_bpe_trainer_add(tr, text, len));
    CHECK_OK(hg_bpe_trainer_finish(tr, &tok));
    hg_bpe_trainer_free(tr);
    return tok;
}

static int file_equal(const char *a, const char *b) {
    uint8_t *x, *y;
    size_t nx, ny;
    if (file_read_all(a, &x, &nx) != HG_OK) return 0;
    if (file_read_all(b, &y, &ny) != HG_OK) {
        free(x);
        return 0;
    }
    int eq = nx == ny && !memcmp(x, y, nx);
    free(x);
    free(y);
    return eq;
}

/* A Llama 3 tokenizer.json has no <|endoftext|>: documents start with the BOS its
 * post-processor adds, or with the separator named; an unknown separator is refused. */
static void separators(void) {
    hg_tokenizer *tok = NULL;
    CHECK_OK(hg_tokenizer_load(&tok, "fixtures/tokenizers/llama3/tokenizer.json"));
    if (!tok) return;
    CHECK(hg_tokenizer_eot(tok) < 0 && hg_tokenizer_bos(tok) >= 0);
    char in[512], out[512];
    snprintf(in, sizeof in, "%s/llama.txt", dir);
    snprintf(out, sizeof out, "%s/llama", dir);
    const char *inputs[1] = {in};
    hg_prepare_options o = hg_prepare_options_default();
    o.out_dir = out;
    o.val_fraction = 0;
    o.threads = 1;
    const char *names[2] = {NULL, "<|end_of_text|>"};
    for (int k = 0; k < 2; k++) {
        int32_t sep = hg_tokenizer_bos(tok);
        if (names[k]) CHECK_OK(hg_tokenizer_token_id(tok, names[k], &sep));
        char text[128];
        int len = snprintf(text, sizeof text, "the cat%ssat on%s the mat", names[k] ? names[k] : "<|begin_of_text|>",
                           names[k] ? names[k] : "<|begin_of_text|>");
        write_file(in, text, (size_t)len);
        o.separator = names[k];
        hg_prepare_stats st;
        CHECK_OK(hg_prepare_files(tok, inputs, 1, &o, &st));
        CHECK(st.documents == 3);
        size_t n;
        int shards;
        int32_t *ids = read_split(out, "train", &n, &shards, o.shard_tokens);
        size_t seps = 0;
        for (size_t i = 0; i < n; i++) seps += ids[i] == sep;
        CHECK(n > 3 && ids[0] == sep && seps == 3);
        char path[600];
        snprintf(path, sizeof path, "%s/train_000000.bin", out);
        const uint8_t *d;
        size_t flen, at;
        hg_shard_info info;
        CHECK_OK(file_map(path, &d, &flen));
        CHECK_OK(shard_parse(d, flen, path, HG_SHARD_AUTO, &info, &at));
        int32_t header_sep;
        memcpy(&header_sep, d + 28, 4);
        CHECK(header_sep == sep);
        file_unmap(d, flen);
        free(ids);
    }
    o.separator = "<|no_such_token|>";
    hg_prepare_stats st;
    CHECK(hg_prepare_files(tok, inputs, 1, &o, &st) == HG_ERR_INVALID && strstr(hg_last_error(), "separator") &&
          strstr(hg_last_error(), "<|no_such_token|>"));
    hg_tokenizer_free(tok);
}

int main(void) {
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    enum { LEN = 200000 };
    char *text = malloc(3 * LEN);
    size_t n1 = make_text(text, LEN);
    size_t n2 = make_text(text + n1, LEN / 4);
    memcpy(text + n1 + n2, "<|endoftext|>", 13); /* file 2 holds two documents */
    size_t n3 = make_text(text + n1 + n2 + 13, LEN / 2);
    char in[3][512];
    for (int i = 0; i < 3; i++) snprintf(in[i], sizeof in[i], "%s/in%d.txt", dir, i);
    write_file(in[0], text, n1);
    write_file(in[1], text + n1, n2 + 13 + n3);
    write_file(in[2], "", 0); /* an empty file is no document */
    hg_tokenizer *tok = tokenizer_for(text, n1);
    if (!tok) return 1;
    int32_t eot = hg_tokenizer_eot(tok);
    const char *inputs[3] = {in[0], in[1], in[2]};

    char out_a[512], out_b[512];
    snprintf(out_a, sizeof out_a, "%s/a", dir);
    snprintf(out_b, sizeof out_b, "%s/b", dir);
    hg_prepare_options o = hg_prepare_options_default();
    o.out_dir = out_a;
    o.val_fraction = 0.1;
    o.shard_tokens = 5000;
    o.threads = 1;
    hg_prepare_stats st;
    CHECK_OK(prepare_files_units(tok, inputs, 3, &o, PREPARE_UNIT_BYTES, &st));
    CHECK(st.documents == 4); /* file 0, two in file 1, and the val part split off */
    CHECK(st.bytes == n1 + n2 + 13 + n3);

    /* Threads and small units give the same shards, byte for byte. */
    o.out_dir = out_b;
    o.threads = 2;
    hg_prepare_stats st2;
    CHECK_OK(prepare_files_units(tok, inputs, 3, &o, 4096, &st2));
    CHECK(st2.train_tokens == st.train_tokens && st2.val_tokens == st.val_tokens);
    CHECK(st2.train_shards == st.train_shards && st.train_shards > 1);
    for (int k = 0; k < st.train_shards; k++) {
        char pa[600], pb[600];
        snprintf(pa, sizeof pa, "%s/train_%06d.bin", out_a, k);
        snprintf(pb, sizeof pb, "%s/train_%06d.bin", out_b, k);
        CHECK(file_equal(pa, pb));
    }

    /* Decoded, the splits give back the inputs without markers, documents led by eot. */
    size_t nt, nv;
    int shards_t, shards_v;
    int32_t *tr = read_split(out_a, "train", &nt, &shards_t, 5000);
    int32_t *va = read_split(out_a, "val", &nv, &shards_v, 5000);
    CHECK(nt == st.train_tokens && nv == st.val_tokens && shards_t == st.train_shards);
    CHECK(nt > 0 && nv > 0 && tr[0] == eot && va[0] == eot);
    int32_t *all = malloc((nt + nv) * sizeof *all);
    memcpy(all, tr, nt * sizeof *all);
    memcpy(all + nt, va, nv * sizeof *all);
    size_t kept = 0, eots = 0;
    for (size_t i = 0; i < nt + nv; i++) {
        if (all[i] == eot) eots++;
        else all[kept++] = all[i];
    }
    CHECK(eots == 4);
    char *back = malloc(3 * LEN), *want = malloc(3 * LEN);
    size_t nb;
    CHECK_OK(hg_tokenizer_decode(tok, all, kept, back, 3 * LEN, &nb));
    memcpy(want, text, n1 + n2);
    memcpy(want + n1 + n2, text + n1 + n2 + 13, n3);
    CHECK(nb == n1 + n2 + n3 && !memcmp(back, want, nb));
    /* val is the tail from a line start, about 10% of the bytes. */
    size_t val_bytes;
    CHECK_OK(hg_tokenizer_decode(tok, va + 1, nv - 1, back, 3 * LEN, &val_bytes));
    CHECK(val_bytes > 0 && val_bytes <= (n1 + n2 + 13 + n3) / 10);
    CHECK(want[nb - val_bytes - 1] == '\n');

    separators();

    /* A rerun with bigger shards removes the extra shards of the first run. */
    o.shard_tokens = 1000000;
    CHECK_OK(hg_prepare_files(tok, inputs, 3, &o, &st2));
    CHECK(st2.train_shards == 1);
    char stale[600];
    snprintf(stale, sizeof stale, "%s/train_%06d.bin", out_b, 1);
    CHECK(access(stale, F_OK) != 0);

    free(tr);
    free(va);
    free(all);
    free(back);
    free(want);
    free(text);
    hg_tokenizer_free(tok);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK(system(cmd) == 0);
    CHECK_DONE();
}
