/* `handgrad prepare`: tokenizes text files into train and val token shards. */
#define _POSIX_C_SOURCE 200809L
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli_args.h"
#include "cli_io.h"
#include "commands.h"
#include "handgrad_data.h"
#include "core/timer.h"

static const char *usage_text =
    "usage: handgrad prepare --tokenizer PATH --out DIR [options] FILE...\n"
    "\n"
    "Tokenizes the text FILEs into token shards DIR/train_NNNNNN.bin and DIR/val_NNNNNN.bin.\n"
    "Each file, and each part of a file between separator markers, is a document; every\n"
    "document starts with the separator token. val is the tail of the input, from the\n"
    "first line start after (1 - F) of its bytes.\n"
    "\n"
    "  --tokenizer PATH     a .tiktoken file, a tokenizer.json, a vocab.json (merges.txt\n"
    "                       beside it) or a folder holding them\n"
    "  --out DIR            output folder (created if missing)\n"
    "  --separator TOKEN    the token that starts each document; its text in a FILE splits\n"
    "                       documents (default: <|endoftext|> if the tokenizer has it, else\n"
    "                       the BOS its tokenizer.json adds, such as <|begin_of_text|>)\n"
    "  --val-fraction F     share of the input for val, in [0, 1) (default 0.05)\n"
    "  --shard-tokens N     most tokens in one shard (default 100000000)\n"
    "  --threads N          encoding threads (default: all cores)\n"
    "  --quiet              no progress\n";

typedef struct progress_state {
    double start, last;
    int tty;
} progress_state;

static void progress_print(void *ctx, uint64_t done, uint64_t total, uint64_t tokens) {
    progress_state *p = ctx;
    double t = hg_now();
    if (done < total && t - p->last < (p->tty ? 0.5 : 5.0)) return;
    p->last = t;
    double el = t - p->start;
    fprintf(stderr, "%sprepare: %5.1f%%  %.1f / %.1f MB  %llu tokens  %.1f MB/s%s", p->tty ? "\r" : "",
            total ? 100.0 * (double)done / (double)total : 100.0, (double)done / 1e6, (double)total / 1e6,
            (unsigned long long)tokens, el > 0 ? (double)done / el / 1e6 : 0.0, p->tty ? "" : "\n");
    if (p->tty && done == total) fputc('\n', stderr);
}

int cmd_prepare(int argc, char **argv) {
    static const struct option opts[] = {
        {"tokenizer", required_argument, 0, 't'},    {"out", required_argument, 0, 'o'},
        {"val-fraction", required_argument, 0, 'v'}, {"shard-tokens", required_argument, 0, 's'},
        {"threads", required_argument, 0, 'j'},      {"quiet", no_argument, 0, 'q'},
        {"separator", required_argument, 0, 'e'},
        {"help", no_argument, 0, 'h'},               {0, 0, 0, 0}};
    hg_prepare_options o = hg_prepare_options_default();
    const char *tok_path = NULL;
    int quiet = 0, c;
    optind = 1, opterr = 0; /* one-line messages of our own */
    while ((c = getopt_long(argc, argv, ":t:o:v:s:j:e:qh", opts, NULL)) != -1) {
        int64_t n;
        switch (c) {
        case 't': tok_path = optarg; break;
        case 'o': o.out_dir = optarg; break;
        case 'v':
            if (cli_parse_f64("prepare", "--val-fraction", optarg, 0, 0.999999, &o.val_fraction)) return 2;
            break;
        case 's':
            if (cli_parse_i64("prepare", "--shard-tokens", optarg, 1, INT64_MAX, &n)) return 2;
            o.shard_tokens = (uint64_t)n;
            break;
        case 'j':
            if (cli_parse_int("prepare", "--threads", optarg, 0, 4096, &o.threads)) return 2;
            break;
        case 'e': o.separator = optarg; break;
        case 'q': quiet = 1; break;
        case 'h': fputs(usage_text, stdout); return 0;
        default: return cli_bad_option("prepare", c, argv);
        }
    }
    if (!tok_path || !o.out_dir || optind >= argc) {
        fprintf(stderr, "handgrad prepare: needs --tokenizer, --out and at least one input FILE\n%s", usage_text);
        return 2;
    }
    hg_tokenizer *tok;
    if (hg_tokenizer_load(&tok, tok_path) != HG_OK) return cli_fail("prepare");
    progress_state ps = {hg_now(), hg_now(), isatty(2)};
    if (!quiet) {
        o.progress = progress_print;
        o.progress_ctx = &ps;
    }
    hg_prepare_stats st;
    int rc = 0;
    if (hg_prepare_files(tok, (const char *const *)argv + optind, argc - optind, &o, &st) != HG_OK) {
        rc = cli_fail("prepare");
    } else {
        double el = hg_now() - ps.start;
        fprintf(stderr,
                "prepare: %llu bytes, %llu documents -> train %llu tokens in %d shard(s), val %llu tokens in %d "
                "shard(s), in %s/ (%.2f s, %.1f MB/s)\n",
                (unsigned long long)st.bytes, (unsigned long long)st.documents, (unsigned long long)st.train_tokens,
                st.train_shards, (unsigned long long)st.val_tokens, st.val_shards, o.out_dir, el,
                el > 0 ? (double)st.bytes / el / 1e6 : 0.0);
    }
    hg_tokenizer_free(tok);
    return rc;
}
