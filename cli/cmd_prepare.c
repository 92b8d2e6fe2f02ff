/* `handgrad prepare`: tokenizes text files into train and val token shards. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli_model.h"
#include "cli_io.h"
#include "commands.h"
#include "handgrad_data.h"
#include "core/timer.h"

static const char synopsis[] = "usage: handgrad prepare --tokenizer PATH --out DIR [options] FILE...\n";
static const char about[] =
    "Tokenizes the text FILEs into token shards DIR/train_NNNNNN.bin and DIR/val_NNNNNN.bin. Each "
    "file, and each part of a file between separator markers, is a document; every document starts "
    "with the separator token. val is the tail of the input, from the first line start after (1 - F) "
    "of its bytes.\n";

typedef struct prep_args {
    const char *tokenizer;
    hg_prepare_options o;
    int64_t shard_tokens;
    int quiet;
} prep_args;

#define O(field) offsetof(prep_args, field)
static const cli_opt prep_options[] = {
    {"tokenizer", CLI_STR, O(tokenizer), "PATH", 0, 0, 0,
     "a .tiktoken file, a tokenizer.json, a vocab.json (merges.txt beside it) or a folder holding them (required)"},
    {"out", CLI_STR, O(o.out_dir), "DIR", 0, 0, 0, "output folder, created if missing (required)"},
    {"separator", CLI_STR, O(o.separator), "TOKEN", 0, 0, CLI_TEXT,
     "the token that starts each document; its text in a FILE splits documents (default: <|endoftext|> if the "
     "tokenizer has it, else the BOS its tokenizer.json adds, such as <|begin_of_text|>)"},
    {"val-fraction", CLI_F64, O(o.val_fraction), "F", 0, 0.999999, 0, "share of the input for val"},
    {"shard-tokens", CLI_I64, O(shard_tokens), "N", 1, 9.2e18, 0, "most tokens in one shard"},
    CLI_OPT_THREADS(prep_args, o.),
    {"quiet", CLI_BOOL, O(quiet), 0, 0, 1, 0, "no progress"},
};
#undef O

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
    prep_args a = {.o = hg_prepare_options_default()};
    a.shard_tokens = (int64_t)a.o.shard_tokens;
    cli_cmd cmd = CLI_CMD("prepare", synopsis, about, NULL, prep_options, "FILE...");
    int files, parsed = cli_parse(&cmd, &a, argc, argv, &files);
    if (parsed) return cli_exit(parsed);
    hg_prepare_options o = a.o;
    o.shard_tokens = (uint64_t)a.shard_tokens;
    const char *tok_path = a.tokenizer;
    if (!tok_path || !o.out_dir || files >= argc) {
        fprintf(stderr, "handgrad prepare: give %s (see handgrad prepare --help)\n",
                !tok_path ? "--tokenizer PATH" : !o.out_dir ? "--out DIR" : "at least one input FILE");
        return 2;
    }
    hg_tokenizer *tok;
    if (hg_tokenizer_load(&tok, tok_path) != HG_OK) return cli_fail("prepare");
    progress_state ps = {hg_now(), hg_now(), isatty(2)};
    if (!a.quiet) {
        o.progress = progress_print;
        o.progress_ctx = &ps;
    }
    hg_prepare_stats st;
    int rc = 0;
    if (hg_prepare_files(tok, (const char *const *)argv + files, argc - files, &o, &st) != HG_OK) {
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
