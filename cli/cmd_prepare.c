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

static const char synopsis[] = "usage: handgrad prepare --tokenizer PATH --out DIR [options] FILE...\n"
                               "       handgrad prepare --chat --tokenizer PATH --out DIR [options] JSONL...\n";
static const char about[] =
    "Tokenizes the text FILEs into token shards DIR/train_NNNNNN.bin and DIR/val_NNNNNN.bin. Each "
    "file, and each part of a file between separator markers, is a document; every document starts "
    "with the separator token. val is the tail of the input, from the first line start after (1 - F) "
    "of its bytes.\n\nWith --chat the FILEs are JSONL, a record a line: {\"messages\": [{\"role\", "
    "\"content\"}, ...]} rendered with the model's chat template, or {\"prompt\", \"completion\"}. The "
    "shards then carry a loss mask (--train-on) and where each record starts; train reads them a "
    "record a row (docs/data.md). val is the last F of the records.\n";

typedef struct prep_args {
    const char *tokenizer;
    hg_prepare_options o;
    int64_t shard_tokens;
    int quiet;
    int chat;
    const char *config;   /* --template: a tokenizer_config.json */
    const char *train_on; /* "assistant", "all", "last" */
    const char *date;     /* --date-string */
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
    {"chat", CLI_BOOL, O(chat), 0, 0, 1, 0, "the FILEs are JSONL chat records (above)"},
    {"template", CLI_STR, O(config), "PATH", 0, 0, 0,
     "--chat: the tokenizer_config.json whose chat_template, bos_token and eos_token to use (default: the one in "
     "--tokenizer's folder)"},
    {"date-string", CLI_STR, O(date), "TEXT", 0, 0, 0,
     "--chat: the template's date_string (\"26 Jul 2024\"); without it a template that prints the date prints "
     "today's, as transformers does"},
    {"train-on", CLI_CHOICE, O(train_on), "assistant|all|last", 0, 0, 0,
     "--chat: the tokens the loss is on: every assistant message, everything, or the last assistant message; "
     "a prompt/completion record trains its completion"},
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
    char config[4096];
    hg_chat_options co = {.config = a.config, .train_on = HG_TRAIN_ON_ASSISTANT, .date_string = a.date};
    if (a.train_on) co.train_on = !strcmp(a.train_on, "all") ? HG_TRAIN_ON_ALL : !strcmp(a.train_on, "last") ? HG_TRAIN_ON_LAST
                                                                                                                : HG_TRAIN_ON_ASSISTANT;
    if (a.chat && !co.config) { /* beside the tokenizer, or in its folder */
        size_t n = strlen(tok_path);
        const char *slash = strrchr(tok_path, '/');
        int file = n > 5 && !strcmp(tok_path + n - 5, ".json");
        if (file) snprintf(config, sizeof config, "%.*stokenizer_config.json", slash ? (int)(slash - tok_path + 1) : 0, tok_path);
        else snprintf(config, sizeof config, "%s/tokenizer_config.json", tok_path);
        co.config = config;
    }
    hg_status s = a.chat ? hg_prepare_chat(tok, (const char *const *)argv + files, argc - files, &o, &co, &st)
                         : hg_prepare_files(tok, (const char *const *)argv + files, argc - files, &o, &st);
    if (s != HG_OK && !strncmp(hg_last_error(), "separator: ", 11)) {
        fprintf(stderr, "handgrad prepare: --separator: %s\n", hg_last_error() + 11);
        rc = 1;
    } else if (s != HG_OK) {
        rc = cli_fail("prepare");
    } else {
        double el = hg_now() - ps.start;
        fprintf(stderr,
                "prepare: %llu bytes, %llu %s -> train %llu tokens in %d shard(s), val %llu tokens in %d "
                "shard(s), in %s/ (%.2f s, %.1f MB/s)\n",
                (unsigned long long)st.bytes, (unsigned long long)st.documents, a.chat ? "records" : "documents",
                (unsigned long long)st.train_tokens, st.train_shards, (unsigned long long)st.val_tokens, st.val_shards,
                o.out_dir, el, el > 0 ? (double)st.bytes / el / 1e6 : 0.0);
        if (a.chat)
            fprintf(stderr, "prepare: the loss is on %llu tokens (--train-on %s); %llu record(s) left out for having "
                    "no such token\n", (unsigned long long)st.targets, a.train_on ? a.train_on : "assistant",
                    (unsigned long long)st.untrained);
    }
    hg_tokenizer_free(tok);
    return rc;
}
