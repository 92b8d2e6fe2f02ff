/* Packed chat fine-tuning against padding each conversation to the longest in its batch,
 * end to end: the same conversations, the same model, training steps (forward, backward,
 * AdamW) timed over all of them, and the unpadded tokens a second of each.
 *
 * The conversations: n lengths drawn log-normal (median and sigma below, seeded), cut to
 * [16, ctx]; random ids below V; the first 40% of each a prompt (not trained), the rest
 * its answer. They are written to a handgrad shard with token flags, as prepare --chat
 * writes one, and:
 *   packed  - read by the loader in packed rows (HG_ROWS_PACKED, hg_loader_next_rows),
 *             B_packed rows of ctx a step, their positions set on the model
 *             (hg_set_positions), as train --rows packed does;
 *   padded  - B_padded conversations a step in the same order, each padded to the
 *             longest of its step (what a collator with dynamic padding does), no
 *             positions (a row is one conversation).
 * Rounds alternate the two; the ratio is taken per round.
 * Usage: packing [model [n [rounds [median [sigma [ctx [B_packed [B_padded]]]]]]]]
 *        (defaults cs336-small 64 2 200 0.9 1024 2 8; threads: all cores) */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/timer.h"
#include "data/shard.h"
#include "handgrad.h"
#include "handgrad_data.h"

static uint64_t next_u64(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static double uniform(uint64_t *s) { return ((next_u64(s) >> 11) + 0.5) / 9007199254740992.0; }

#define TRY(x)                                                                 \
    do {                                                                       \
        if ((x) != HG_OK) {                                                    \
            fprintf(stderr, "packing: %s: %s\n", #x, hg_last_error());         \
            exit(1);                                                           \
        }                                                                      \
    } while (0)

/* One pass over every conversation, packed; returns seconds, and in *tokens the
 * conversations' tokens the rows held: each row's but its padding, the last run of
 * positions from 0 when none of its targets counts (every conversation here has some). */
static double run_packed(hg_model *m, const char *shard, int B, int T, int V, size_t *tokens) {
    hg_loader_options o = hg_loader_options_default();
    o.batch = B, o.seq_len = T, o.rows = HG_ROWS_PACKED, o.vocab_size = V;
    const char *p[1] = {shard};
    hg_loader *ld;
    TRY(hg_loader_open(&ld, p, 1, &o));
    int32_t *x = malloc(sizeof(int32_t) * B * T), *y = malloc(sizeof(int32_t) * B * T), *pos = malloc(sizeof(int32_t) * B * T);
    const hg_adamw a = hg_adamw_default();
    double t0 = hg_now();
    *tokens = 0;
    for (uint64_t s = 0; s < hg_loader_batches_per_epoch(ld); s++) {
        float loss, gn;
        TRY(hg_loader_next_rows(ld, x, y, pos));
        for (int b = 0; b < B; b++) {
            int last = T - 1, trained = 0;
            while (pos[b * T + last] > 0) last--;
            for (int t = last; t < T; t++) trained |= y[b * T + t] >= 0;
            *tokens += (size_t)(trained ? T : last);
        }
        TRY(hg_set_positions(m, pos, B, T));
        TRY(hg_zero_grad(m));
        TRY(hg_forward_backward(m, x, y, B, T, 1.0f, &loss));
        TRY(hg_optimizer_step(m, &a, &gn));
    }
    double t = hg_now() - t0;
    TRY(hg_set_positions(m, NULL, 0, 0));
    hg_loader_close(ld);
    free(x), free(y), free(pos);
    return t;
}

/* One pass, B conversations a step padded to the step's longest; returns seconds. */
static double run_padded(hg_model *m, const int32_t *ids, const uint8_t *flags, const int *len, const size_t *at, int n,
                         int B) {
    const hg_adamw a = hg_adamw_default();
    int Tmax = 0;
    for (int i = 0; i < n; i++) Tmax = len[i] > Tmax ? len[i] : Tmax;
    int32_t *x = malloc(sizeof(int32_t) * B * Tmax), *y = malloc(sizeof(int32_t) * B * Tmax);
    double t0 = hg_now();
    for (int c0 = 0; c0 + B <= n; c0 += B) {
        int T = 0;
        for (int b = 0; b < B; b++) T = len[c0 + b] - 1 > T ? len[c0 + b] - 1 : T; /* inputs: all but the last */
        for (int b = 0; b < B; b++)
            for (int t = 0; t < T; t++) {
                const int c = c0 + b, in = t + 1 < len[c];
                x[b * T + t] = in ? ids[at[c] + t] : 0;
                y[b * T + t] = in && (flags[at[c] + t + 1] & HG_TOKEN_TRAIN) ? ids[at[c] + t + 1] : -1;
            }
        float loss, gn;
        TRY(hg_zero_grad(m));
        TRY(hg_forward_backward(m, x, y, B, T, 1.0f, &loss));
        TRY(hg_optimizer_step(m, &a, &gn));
    }
    double t = hg_now() - t0;
    free(x), free(y);
    return t;
}

int main(int argc, char **argv) {
    const char *model = argc > 1 ? argv[1] : "cs336-small";
    const int n = argc > 2 ? atoi(argv[2]) : 64, rounds = argc > 3 ? atoi(argv[3]) : 2;
    const double median = argc > 4 ? atof(argv[4]) : 200, sigma = argc > 5 ? atof(argv[5]) : 0.9;
    const int T = argc > 6 ? atoi(argv[6]) : 1024, Bk = argc > 7 ? atoi(argv[7]) : 2, Bd = argc > 8 ? atoi(argv[8]) : 8;
    hg_config cfg;
    TRY(hg_config_preset(model, &cfg));
    const int V = cfg.vocab_size;
    /* the conversations, their shard */
    int *len = malloc(sizeof(int) * n);
    size_t *at = malloc(sizeof(size_t) * n), total = 0;
    uint64_t seed = 2026;
    for (int i = 0; i < n; i++) {
        double z = sqrt(-2.0 * log(uniform(&seed))) * cos(6.283185307179586 * uniform(&seed));
        int L = (int)lround(median * exp(sigma * z));
        len[i] = L < 16 ? 16 : L > T ? T : L;
        at[i] = total, total += (size_t)len[i];
    }
    int32_t *ids = malloc(sizeof(int32_t) * total);
    uint8_t *flags = malloc(total);
    for (int i = 0; i < n; i++)
        for (int t = 0; t < len[i]; t++) {
            ids[at[i] + t] = (int32_t)(next_u64(&seed) % (uint64_t)V);
            flags[at[i] + t] = (uint8_t)((t == 0 ? HG_TOKEN_DOC : 0) | (t >= len[i] * 2 / 5 ? HG_TOKEN_TRAIN : 0));
        }
    char shard[] = "/tmp/hg_packing_XXXXXX";
    int fd = mkstemp(shard);
    if (fd < 0) return perror("mkstemp"), 1;
    close(fd);
    shard_writer w;
    TRY(shard_writer_open(&w, shard, V, -1, 1));
    TRY(shard_writer_write(&w, ids, flags, total));
    TRY(shard_writer_close(&w));

    hg_options opt = hg_options_default();
    opt.batch = Bd > Bk ? Bd : Bk, opt.seq_len = T, opt.threads = 0;
    hg_model *m;
    TRY(hg_model_create(&m, &cfg, &opt));
    /* the tokens each pass trains on: the padded steps cover the first n - n % Bd
     * conversations, the packed steps the rows of whole batches (run_packed counts) */
    size_t padded_tokens = 0, packed_tokens = 0;
    for (int i = 0; i < n - n % Bd; i++) padded_tokens += (size_t)len[i];
    (void)run_packed(m, shard, Bk, T, V, &packed_tokens); /* warm-up: both paths once */
    (void)run_padded(m, ids, flags, len, at, Bd, Bd);
    printf("# packing %s: %d conversations, %zu tokens, lengths log-normal (median %.0f, sigma %.2f) in [16, %d]; "
           "packed: %d rows of %d a step (%zu tokens in whole steps); padded: %d conversations a step, to the "
           "step's longest (%zu tokens in whole steps); %d threads\n",
           model, n, total, median, sigma, T, Bk, T, packed_tokens, Bd, padded_tokens, hg_model_options(m)->threads);
    printf("%-6s %10s %12s %10s %12s %8s\n", "round", "packed s", "packed tok/s", "padded s", "padded tok/s", "ratio");
    for (int r = 0; r < rounds; r++) {
        double tk = run_packed(m, shard, Bk, T, V, &packed_tokens), td = run_padded(m, ids, flags, len, at, n, Bd);
        double rk = (double)packed_tokens / tk, rd = (double)padded_tokens / td;
        printf("%-6d %10.2f %12.1f %10.2f %12.1f %7.2fx\n", r + 1, tk, rk, td, rd, rk / rd);
    }
    hg_model_free(m);
    remove(shard);
    free(len), free(at), free(ids), free(flags);
    return 0;
}
