/* The loader: window contents, targets, sequential and shuffled order, disjoint rank
 * slices, epochs, exact resume, reset, the llm.c and nanoGPT formats, and no
 * allocation per batch. Tokens are written so that each one tells its own position. */
#define _POSIX_C_SOURCE 200809L
#define _GNU_SOURCE /* mallinfo2 */
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "data/shard.h"
#include "handgrad_data.h"

static char dir[] = "/tmp/hg_loader_XXXXXX";
static char paths[3][256];

/* Shard s holds tokens s * 100000 + i: V = 2^20, so they are stored as uint32. */
static const uint64_t sizes[3] = {50, 33, 81};

static void write_shards(void) {
    for (int s = 0; s < 3; s++) {
        snprintf(paths[s], sizeof paths[s], "%s/train_%06d.bin", dir, s);
        shard_writer w;
        CHECK_OK(shard_writer_open(&w, paths[s], 1 << 20, -1, 0));
        for (uint64_t i = 0; i < sizes[s]; i++) {
            int32_t v = (int32_t)(s * 100000 + i);
            CHECK_OK(shard_writer_write(&w, &v, NULL, 1));
        }
        CHECK_OK(shard_writer_close(&w));
    }
}

static hg_loader *open_loader(int B, int T, int rank, int world, int shuffle, uint64_t seed) {
    hg_loader_options o = hg_loader_options_default();
    o.batch = B;
    o.seq_len = T;
    o.rank = rank;
    o.world_size = world;
    o.shuffle = shuffle;
    o.seed = seed;
    const char *p[3] = {paths[0], paths[1], paths[2]};
    hg_loader *ld = NULL;
    CHECK_OK(hg_loader_open(&ld, p, 3, &o));
    return ld;
}

/* Window id of a batch row: shard * 1000 + window index in the shard; checks that
 * the row is T+1 consecutive tokens and targets are tokens shifted by one. */
static int window_of_row(const int32_t *x, const int32_t *y, int T) {
    int shard = x[0] / 100000, start = x[0] % 100000;
    CHECK(start % T == 0);
    for (int t = 0; t < T; t++) {
        CHECK(x[t] == x[0] + t);
        CHECK(y[t] == x[0] + t + 1);
    }
    return shard * 1000 + start / T;
}

static void test_sequential(void) {
    enum { B = 2, T = 8 };
    /* Windows: (50-1)/8 = 6, (33-1)/8 = 4, (81-1)/8 = 10: W = 20, 10 batches. */
    hg_loader *ld = open_loader(B, T, 0, 1, 0, 0);
    if (!ld) return;
    CHECK(hg_loader_batches_per_epoch(ld) == 10);
    CHECK(hg_loader_tokens(ld) == 164);
    int32_t x[B * T], y[B * T], first[B * T];
    int expect_shard[20], expect_win[20], k = 0;
    for (int s = 0; s < 3; s++)
        for (uint64_t w = 0; w < (sizes[s] - 1) / T; w++, k++) {
            expect_shard[k] = s;
            expect_win[k] = (int)w;
        }
    for (int step = 0; step < 10; step++) {
        CHECK_OK(hg_loader_next(ld, x, y));
        if (step == 0) memcpy(first, x, sizeof x);
        for (int b = 0; b < B; b++) {
            int w = window_of_row(x + b * T, y + b * T, T), slot = step * B + b;
            CHECK(w == expect_shard[slot] * 1000 + expect_win[slot]);
        }
    }
    hg_loader_position pos = hg_loader_tell(ld);
    CHECK(pos.epoch == 1 && pos.batch == 0);
    CHECK_OK(hg_loader_next(ld, x, y)); /* the epoch wrapped: the first batch again */
    CHECK(!memcmp(x, first, sizeof x));
    CHECK_OK(hg_loader_reset(ld));
    CHECK(hg_loader_tell(ld).epoch == 0 && hg_loader_tell(ld).batch == 0);
    CHECK(hg_loader_seek(ld, (hg_loader_position){0, 10}) == HG_ERR_INVALID);
    hg_loader_close(ld);
}

/* Window ids of one epoch of (rank, world) into seen[]; returns the count. */
static int epoch_windows(hg_loader *ld, int B, int T, int *seen) {
    int32_t x[64 * 8], y[64 * 8];
    int n = 0;
    uint64_t batches = hg_loader_batches_per_epoch(ld);
    for (uint64_t s = 0; s < batches; s++) {
        CHECK_OK(hg_loader_next(ld, x, y));
        for (int b = 0; b < B; b++) seen[n++] = window_of_row(x + b * T, y + b * T, T);
    }
    return n;
}

static int count_in(const int *a, int n, int v) {
    int c = 0;
    for (int i = 0; i < n; i++) c += a[i] == v;
    return c;
}

static void test_shuffle_and_ranks(void) {
    enum { B = 5, T = 8 }; /* W = 20 = 2 ranks * 2 batches * 5 */
    int all[3][40], n[3];
    /* One rank: a shuffled epoch visits each window once, in another order. */
    hg_loader *ld = open_loader(B, T, 0, 1, 1, 7);
    if (!ld) return;
    n[0] = epoch_windows(ld, B, T, all[0]);
    n[1] = epoch_windows(ld, B, T, all[1]); /* epoch 1 */
    CHECK(n[0] == 20 && n[1] == 20);
    int differs_from_sorted = 0, differs_between_epochs = 0;
    for (int i = 0; i < 20; i++) {
        CHECK(count_in(all[0], 20, all[0][i]) == 1);
        CHECK(count_in(all[1], 20, all[0][i]) == 1);
        differs_between_epochs += all[0][i] != all[1][i];
        differs_from_sorted += i > 0 && all[0][i] < all[0][i - 1];
    }
    CHECK(differs_from_sorted > 0 && differs_between_epochs > 0);
    hg_loader_close(ld);
    /* The same seed repeats the order; another seed changes it. */
    ld = open_loader(B, T, 0, 1, 1, 7);
    if (ld) {
        n[2] = epoch_windows(ld, B, T, all[2]);
        CHECK(!memcmp(all[2], all[0], sizeof all[0][0] * 20));
        hg_loader_close(ld);
    }
    ld = open_loader(B, T, 0, 1, 1, 8);
    if (ld) {
        n[2] = epoch_windows(ld, B, T, all[2]);
        CHECK(memcmp(all[2], all[0], sizeof all[0][0] * 20) != 0);
        hg_loader_close(ld);
    }
    /* Two ranks: disjoint, and together every window. */
    for (int shuffle = 0; shuffle < 2; shuffle++) {
        hg_loader *r0 = open_loader(B, T, 0, 2, shuffle, 3), *r1 = open_loader(B, T, 1, 2, shuffle, 3);
        if (!r0 || !r1) return;
        CHECK(hg_loader_batches_per_epoch(r0) == 2);
        n[0] = epoch_windows(r0, B, T, all[0]);
        n[1] = epoch_windows(r1, B, T, all[1]);
        CHECK(n[0] == 10 && n[1] == 10);
        for (int i = 0; i < 10; i++) {
            CHECK(count_in(all[1], 10, all[0][i]) == 0);
            CHECK(count_in(all[0], 10, all[0][i]) == 1);
        }
        hg_loader_close(r0);
        hg_loader_close(r1);
    }
}

static void test_resume(void) {
    enum { B = 3, T = 4 };
    int32_t x[B * T], y[B * T], want[6][B * T];
    hg_loader *ld = open_loader(B, T, 0, 1, 1, 99);
    if (!ld) return;
    uint64_t per_epoch = hg_loader_batches_per_epoch(ld);
    for (uint64_t i = 0; i < per_epoch + 2; i++) CHECK_OK(hg_loader_next(ld, x, y)); /* into epoch 1 */
    hg_loader_position pos = hg_loader_tell(ld);
    CHECK(pos.epoch == 1 && pos.batch == 2);
    for (int i = 0; i < 6; i++) CHECK_OK(hg_loader_next(ld, want[i], y));
    hg_loader_close(ld);
    ld = open_loader(B, T, 0, 1, 1, 99);
    if (!ld) return;
    CHECK_OK(hg_loader_seek(ld, pos));
    for (int i = 0; i < 6; i++) {
        CHECK_OK(hg_loader_next(ld, x, y));
        CHECK(!memcmp(x, want[i], sizeof x));
    }
    hg_loader_close(ld);
}

static void test_no_allocation(void) {
    enum { B = 4, T = 8 };
    int32_t x[B * T], y[B * T];
    hg_loader *ld = open_loader(B, T, 0, 1, 1, 5);
    if (!ld) return;
    CHECK_OK(hg_loader_next(ld, x, y));
    struct mallinfo2 before = mallinfo2();
    for (int i = 0; i < 200; i++) CHECK_OK(hg_loader_next(ld, x, y));
    struct mallinfo2 after = mallinfo2();
    /* Under ASan malloc bypasses glibc and this compares zeros; the release run checks. */
    CHECK(after.uordblks == before.uordblks && after.hblks == before.hblks);
    hg_loader_close(ld);
}

static void write_raw(const char *path, const void *data, size_t len) {
    FILE *f = fopen(path, "wb");
    CHECK(f && fwrite(data, 1, len, f) == len);
    if (f) fclose(f);
}

static void test_other_formats(void) {
    enum { N = 40, T = 8 };
    uint16_t tok[N];
    for (int i = 0; i < N; i++) tok[i] = (uint16_t)(1000 + i); /* little-endian host */
    char nano[300], llmc[300], glob_pat[300];
    snprintf(nano, sizeof nano, "%s/val.bin", dir);
    write_raw(nano, tok, sizeof tok);
    uint8_t *l = calloc(1, 1024 + sizeof tok);
    int32_t head[3] = {LLMC_MAGIC, 1, N};
    memcpy(l, head, sizeof head);
    memcpy(l + 1024, tok, sizeof tok);
    snprintf(llmc, sizeof llmc, "%s/llmc_val_000000.bin", dir);
    write_raw(llmc, l, 1024 + sizeof tok);
    free(l);
    hg_loader_options o = hg_loader_options_default();
    o.batch = 2;
    o.seq_len = T;
    const char *files[2] = {nano, llmc};
    hg_shard_format fmt[2] = {HG_SHARD_NANOGPT, HG_SHARD_LLMC};
    for (int k = 0; k < 2; k++) {
        hg_shard_info info;
        CHECK_OK(hg_shard_inspect(files[k], HG_SHARD_AUTO, &info));
        CHECK(info.format == fmt[k] && info.n_tokens == N && info.token_bytes == 2);
        hg_loader *ld = NULL;
        CHECK_OK(hg_loader_open(&ld, &files[k], 1, &o));
        if (!ld) continue;
        int32_t x[2 * T], y[2 * T];
        CHECK_OK(hg_loader_next(ld, x, y));
        for (int i = 0; i < 2 * T; i++) {
            CHECK(x[i] == 1000 + i);
            CHECK(y[i] == 1000 + i + 1);
        }
        CHECK(x[T] == 1000 + T && y[T - 1] == 1000 + T);
        hg_loader_close(ld);
    }
    snprintf(glob_pat, sizeof glob_pat, "%s/train_*.bin", dir);
    hg_loader *ld = NULL;
    CHECK_OK(hg_loader_open_glob(&ld, glob_pat, &o));
    if (ld) CHECK(hg_loader_tokens(ld) == 164);
    hg_loader_close(ld);
}

/* Token flags and padded rows: documents of lengths 1, 5, 9, 3, 12 (ids 1000 d + i),
 * the loss on odd positions inside each; with T = 4 the 9- and 12-token documents are
 * cut into windows, the 1-token one has no row. Windows read the same flags. */
static void test_flags_and_rows(void) {
    char path[300], plain[300];
    snprintf(path, sizeof path, "%s/chat_000000.bin", dir);
    snprintf(plain, sizeof plain, "%s/plain_000000.bin", dir);
    static const int lens[] = {1, 5, 9, 3, 12};
    shard_writer w;
    CHECK_OK(shard_writer_open(&w, path, 1 << 20, -1, 1));
    int total = 0;
    for (int d = 0; d < 5; d++)
        for (int i = 0; i < lens[d]; i++, total++) {
            int32_t v = 1000 * (d + 1) + i;
            uint8_t f = (uint8_t)((i == 0 ? HG_TOKEN_DOC : 0) | (i % 2 ? HG_TOKEN_TRAIN : 0));
            CHECK_OK(shard_writer_write(&w, &v, &f, 1));
        }
    CHECK_OK(shard_writer_close(&w));
    hg_shard_info info;
    CHECK_OK(hg_shard_inspect(path, HG_SHARD_AUTO, &info));
    CHECK(info.has_flags && info.n_tokens == (uint64_t)total);

    enum { T = 4 };
    hg_loader_options o = hg_loader_options_default();
    o.batch = 1, o.seq_len = T, o.rows = HG_ROWS_PADDED;
    const char *p[1] = {path};
    hg_loader *ld = NULL;
    CHECK_OK(hg_loader_open(&ld, p, 1, &o));
    /* rows: doc 2 (5: one row), doc 3 (9: windows at 0, 4; the second 5 long), doc 4 (3),
     * doc 5 (12: at 0, 4, 8; the last 4 long) */
    static const int want_doc[] = {2, 3, 3, 4, 5, 5, 5}, want_at[] = {0, 0, 4, 0, 0, 4, 8};
    CHECK(ld && hg_loader_rows_total(ld) == 7 && hg_loader_split_documents(ld) == 2 && hg_loader_has_flags(ld));
    CHECK(ld && hg_loader_row_tokens(ld) == 5 + 5 + 5 + 3 + 5 + 5 + 4);
    for (int r = 0; ld && r < 7; r++) {
        int32_t x[T], y[T];
        CHECK_OK(hg_loader_next(ld, x, y));
        const int d = want_doc[r], a = want_at[r], len = lens[d - 1] - a < T + 1 ? lens[d - 1] - a : T + 1;
        for (int t = 0; t < T; t++) {
            CHECK(x[t] == (t < len ? 1000 * d + a + t : 0));
            const int next = a + t + 1; /* the target's position in its document */
            CHECK(y[t] == (t + 1 < len && next % 2 ? 1000 * d + next : -1));
        }
    }
    hg_loader_close(ld);
    o.no_split = 1;
    CHECK(hg_loader_open(&ld, p, 1, &o) == HG_ERR_INVALID && strstr(hg_last_error(), "chat_000000.bin: offset") &&
          strstr(hg_last_error(), "9 tokens"));
    /* packed rows, T = 6: the pieces d2 (5), d3 at 0 (7 tokens, 6 inputs) and at 6 (3),
     * d4 (3), d5 at 0 (7) and at 6 (6), each into the row with the least room that holds
     * it (best fit): rows [d2], [d3@0], [d3@6 d4], [d5@0], [d5@6] */
    o.no_split = 0, o.rows = HG_ROWS_PACKED, o.seq_len = 6;
    CHECK_OK(hg_loader_open(&ld, p, 1, &o));
    CHECK(ld && hg_loader_rows_total(ld) == 5 && hg_loader_split_documents(ld) == 2);
    CHECK(ld && hg_loader_row_tokens(ld) == 5 + 7 + 3 + 3 + 7 + 6);
    if (ld) {
        int32_t x[6], y[6], pos[6];
        CHECK(hg_loader_next(ld, x, y) == HG_ERR_INVALID && strstr(hg_last_error(), "positions"));
        CHECK_OK(hg_loader_next_rows(ld, x, y, pos)); /* row 0: d2, then one input of padding */
        static const int32_t x0[6] = {2000, 2001, 2002, 2003, 2004, 0}, y0[6] = {2001, -1, 2003, -1, -1, -1},
                             p0[6] = {0, 1, 2, 3, 4, 0};
        CHECK(!memcmp(x, x0, sizeof x) && !memcmp(y, y0, sizeof y) && !memcmp(pos, p0, sizeof pos));
        CHECK_OK(hg_loader_next_rows(ld, x, y, pos)); /* row 1: d3's first window, 6 inputs and 6 targets */
        CHECK(x[0] == 3000 && x[5] == 3005 && y[4] == 3005 && y[5] == -1 && pos[5] == 5);
        CHECK_OK(hg_loader_next_rows(ld, x, y, pos)); /* row 2: d3's last 3 tokens, then d4 */
        static const int32_t x2[6] = {3006, 3007, 3008, 4000, 4001, 4002}, y2[6] = {3007, -1, -1, 4001, -1, -1},
                             p2[6] = {0, 1, 2, 0, 1, 2};
        CHECK(!memcmp(x, x2, sizeof x) && !memcmp(y, y2, sizeof y) && !memcmp(pos, p2, sizeof pos));
    }
    hg_loader_close(ld);
    o.no_split = 1;
    CHECK(hg_loader_open(&ld, p, 1, &o) == HG_ERR_INVALID && strstr(hg_last_error(), "9 tokens"));
    o.no_split = 0;
    { /* best fit, not the next row only: documents of 4, 5 and 2 in rows of 6 make [4 2] [5] */
        char fit[300];
        snprintf(fit, sizeof fit, "%s/fit_000000.bin", dir);
        CHECK_OK(shard_writer_open(&w, fit, 1 << 20, -1, 1));
        static const int flen[] = {4, 5, 2};
        for (int d = 0; d < 3; d++)
            for (int i = 0; i < flen[d]; i++) {
                int32_t v = 100 * (d + 1) + i;
                uint8_t f = (uint8_t)((i == 0 ? HG_TOKEN_DOC : 0) | HG_TOKEN_TRAIN);
                CHECK_OK(shard_writer_write(&w, &v, &f, 1));
            }
        CHECK_OK(shard_writer_close(&w));
        const char *fp[1] = {fit};
        CHECK_OK(hg_loader_open(&ld, fp, 1, &o));
        int32_t x[6], y[6], pos[6];
        CHECK(ld && hg_loader_rows_total(ld) == 2);
        if (ld) CHECK_OK(hg_loader_next_rows(ld, x, y, pos));
        static const int32_t xf[6] = {100, 101, 102, 103, 300, 301}, pf[6] = {0, 1, 2, 3, 0, 1};
        CHECK(ld && !memcmp(x, xf, sizeof x) && !memcmp(pos, pf, sizeof pos) && y[3] == -1 && y[4] == 301);
        hg_loader_close(ld);
    }
    o.seq_len = T;
    /* windows read the mask too, across documents */
    o.no_split = 0, o.rows = HG_ROWS_WINDOWS;
    CHECK_OK(hg_loader_open(&ld, p, 1, &o));
    {
        int32_t x[T], y[T];
        CHECK_OK(hg_loader_next(ld, x, y)); /* tokens 0..4: 1000, 2000..2003 */
        CHECK(x[0] == 1000 && x[1] == 2000 && y[0] == -1 && y[1] == 2001 && y[2] == -1 && y[3] == 2003);
    }
    hg_loader_close(ld);
    /* a shard with flags and one without do not mix */
    CHECK_OK(shard_writer_open(&w, plain, 1 << 20, -1, 0));
    for (int32_t v = 0; v < 20; v++) CHECK_OK(shard_writer_write(&w, &v, NULL, 1));
    CHECK_OK(shard_writer_close(&w));
    const char *mixed[2] = {path, plain};
    CHECK(hg_loader_open(&ld, mixed, 2, &o) == HG_ERR_INVALID && strstr(hg_last_error(), "plain_000000.bin has none"));
    /* padded rows of a shard with neither flags nor a separator: refused */
    o.rows = HG_ROWS_PADDED;
    CHECK(hg_loader_open(&ld, mixed + 1, 1, &o) == HG_ERR_INVALID && strstr(hg_last_error(), "separator"));
}

int main(void) {
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    write_shards();
    test_sequential();
    test_shuffle_and_ranks();
    test_resume();
    test_no_allocation();
    test_other_formats();
    test_flags_and_rows();
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK(system(cmd) == 0);
    CHECK_DONE();
}
