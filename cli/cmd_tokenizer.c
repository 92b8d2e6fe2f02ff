/* `handgrad tokenizer encode|decode|train|bench`: the tokenizer on the command line. */
#define _POSIX_C_SOURCE 200809L
#define _GNU_SOURCE /* memmem */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_model.h"
#include "cli_io.h"
#include "commands.h"
#include "handgrad_data.h"
#include "core/timer.h"

static const char synopsis[] =
    "usage: handgrad tokenizer encode --tokenizer PATH [--allow-special] [--binary]\n"
    "                                 [FILE...]\n"
    "       handgrad tokenizer decode --tokenizer PATH [--binary] [FILE...]\n"
    "       handgrad tokenizer train --vocab-size N --out DIR FILE...\n"
    "       handgrad tokenizer bench --tokenizer PATH [--threads N] [--repeat N] FILE\n";
static const char about[] =
    "encode prints the ids of each input (stdin when no FILE, or '-'), one line per input.\n"
    "decode reads ids (whitespace separated) and writes the bytes they stand for.\n"
    "train learns a byte-level BPE of N ids from the files; writes DIR/vocab.json and "
    "DIR/merges.txt (Hugging Face format).\n"
    "bench encodes FILE's documents (split at <|endoftext|>) on N threads and prints MB/s as JSON.\n";

typedef struct tok_args {
    const char *tokenizer, *out;
    int allow_special, binary, vocab_size, threads, repeat;
    char **files;
    int n_files;
} tok_args;

#define O(field) offsetof(tok_args, field)
static const cli_opt tok_options[] = {
    {"tokenizer", CLI_STR, O(tokenizer), "PATH", 0, 0, 0,
     "a .tiktoken file, a tokenizer.json, a vocab.json (merges.txt beside it) or a folder with tokenizer.json or "
     "vocab.json and merges.txt"},
    {"allow-special", CLI_BOOL, O(allow_special), 0, 0, 1, 0,
     "encode special tokens' text (<|endoftext|>, <|eot_id|>, ...) as their ids"},
    {"binary", CLI_BOOL, O(binary), 0, 0, 1, 0, "ids as little-endian int32 instead of text"},
    {"vocab-size", CLI_INT, O(vocab_size), "N", 257, 1 << 24, 0,
     "train: ids in the trained vocabulary, including 256 bytes and <|endoftext|>"},
    {"out", CLI_STR, O(out), "DIR", 0, 0, 0, "train: where it writes, created if missing"},
    CLI_OPT_THREADS(tok_args, ),
    {"repeat", CLI_INT, O(repeat), "N", 1, 1 << 20, 0, "bench: repetitions; the best is reported"},
};
#undef O

static const char *const actions[] = {"encode", "decode", "train", "bench"};

static int load(const tok_args *a, hg_tokenizer **tok) {
    if (!a->tokenizer) {
        fprintf(stderr, "handgrad tokenizer: --tokenizer PATH is required\n");
        return 2;
    }
    return hg_tokenizer_load(tok, a->tokenizer) == HG_OK ? 0 : cli_fail("tokenizer");
}

static int run_encode(const tok_args *a) {
    hg_tokenizer *tok;
    int rc = load(a, &tok);
    if (rc) return rc;
    char *stdin_only[] = {"-"};
    char **files = a->n_files ? a->files : stdin_only;
    int n_files = a->n_files ? a->n_files : 1;
    for (int i = 0; i < n_files && !rc; i++) {
        size_t len, n;
        uint8_t *text = cli_read_input("tokenizer encode", files[i], &len);
        size_t cap = text ? hg_tokenizer_max_ids(tok, len) : 0;
        int32_t *ids = text ? malloc((cap ? cap : 1) * sizeof *ids) : NULL;
        if (!ids) rc = 1;
        else if (hg_tokenizer_encode(tok, text, len, a->allow_special ? HG_ENCODE_ALLOW_SPECIAL : 0, ids, cap, &n))
            rc = cli_fail("tokenizer encode");
        else if (a->binary)
            fwrite(ids, sizeof *ids, n, stdout);
        else {
            for (size_t k = 0; k < n; k++) printf(k ? " %d" : "%d", (int)ids[k]);
            putchar('\n');
        }
        free(text);
        free(ids);
    }
    hg_tokenizer_free(tok);
    return rc;
}

/* Streams ids through the decoder; returns 0, or 1 after printing an error. */
static int decode_ids(hg_decoder *dec, const int32_t *ids, size_t n, char *buf, size_t cap) {
    for (size_t i = 0; i < n; i++) {
        size_t k;
        if (hg_decoder_push(dec, ids[i], buf, cap, &k) != HG_OK) return cli_fail("tokenizer decode");
        fwrite(buf, 1, k, stdout);
    }
    return 0;
}

static int run_decode(const tok_args *a) {
    hg_tokenizer *tok;
    hg_decoder *dec = NULL;
    int rc = load(a, &tok);
    if (rc) return rc;
    size_t cap = hg_tokenizer_max_token_bytes(tok) + 4;
    char *buf = malloc(cap);
    if (!buf || hg_decoder_create(&dec, tok) != HG_OK) rc = cli_fail("tokenizer decode");
    char *stdin_only[] = {"-"};
    char **files = a->n_files ? a->files : stdin_only;
    int n_files = a->n_files ? a->n_files : 1;
    for (int i = 0; i < n_files && !rc; i++) {
        size_t len, n = 0;
        uint8_t *in = cli_read_input("tokenizer decode", files[i], &len);
        int32_t *ids = in ? malloc((len / 2 + 1) * sizeof *ids) : NULL;
        if (!ids) {
            free(in);
            rc = 1;
            break;
        }
        if (a->binary) {
            n = len / 4;
            memcpy(ids, in, n * 4);
        } else {
            char *p = (char *)in, *end = (char *)in + len;
            while (p < end && !rc) {
                while (p < end && (*p == ' ' || *p == '\n' || *p == '\t' || *p == '\r')) p++;
                if (p == end) break;
                long v = 0;
                char *q = p;
                while (q < end && *q >= '0' && *q <= '9' && v < 1L << 31) v = v * 10 + (*q++ - '0');
                if (q == p || (q < end && !(*q == ' ' || *q == '\n' || *q == '\t' || *q == '\r'))) {
                    fprintf(stderr, "handgrad tokenizer decode: %s: offset %zu: not an id\n", files[i],
                            (size_t)(p - (char *)in));
                    rc = 1;
                }
                ids[n++] = (int32_t)v;
                p = q;
            }
        }
        if (!rc) rc = decode_ids(dec, ids, n, buf, cap);
        free(in);
        free(ids);
    }
    size_t k;
    if (!rc && hg_decoder_flush(dec, buf, cap, &k) == HG_OK) fwrite(buf, 1, k, stdout);
    hg_decoder_free(dec);
    free(buf);
    hg_tokenizer_free(tok);
    return rc;
}

static int run_train(const tok_args *a) {
    if (!a->out || a->vocab_size <= 0 || a->n_files < 1) {
        fprintf(stderr, "handgrad tokenizer train: needs --vocab-size N, --out DIR and at least one FILE\n");
        return 2;
    }
    if (cli_mkdir_p("tokenizer train", "--out", a->out)) return 1; /* a bad folder fails now, not after training */
    hg_bpe_trainer *tr;
    hg_tokenizer *tok = NULL;
    if (hg_bpe_trainer_create(&tr, a->vocab_size) != HG_OK) return cli_fail("tokenizer train");
    int rc = 0;
    size_t total = 0;
    for (int i = 0; i < a->n_files && !rc; i++) {
        size_t len;
        uint8_t *text = cli_read_input("tokenizer train", a->files[i], &len);
        if (!text) rc = 1;
        else if (hg_bpe_trainer_add(tr, text, len) != HG_OK) rc = cli_fail("tokenizer train");
        total += text ? len : 0;
        free(text);
    }
    if (!rc && hg_bpe_trainer_finish(tr, &tok) != HG_OK) {
        fprintf(stderr, "handgrad tokenizer train: %s (%s%s)\n", hg_last_error(), a->files[0],
                a->n_files > 1 ? " and the other files" : "");
        rc = 1;
    }
    if (!rc && hg_tokenizer_save_hf(tok, a->out) != HG_OK) rc = cli_fail("tokenizer train");
    if (!rc)
        fprintf(stderr, "tokenizer train: %zu bytes, %d ids (asked for %d) -> %s/vocab.json, %s/merges.txt\n", total,
                hg_tokenizer_vocab_size(tok), a->vocab_size, a->out, a->out);
    hg_tokenizer_free(tok);
    hg_bpe_trainer_free(tr);
    return rc;
}

static int run_bench(const tok_args *a) {
    if (a->n_files != 1) {
        fprintf(stderr, "handgrad tokenizer bench: needs one FILE\n");
        return 2;
    }
    hg_tokenizer *tok;
    int rc = load(a, &tok);
    if (rc) return rc;
    size_t len;
    uint8_t *text = cli_read_input("tokenizer bench", a->files[0], &len);
    /* Documents: the parts between <|endoftext|> markers. */
    size_t n_docs = 0, cap_docs = 1;
    for (size_t i = 0; text && i + 13 <= len;) {
        uint8_t *m = memmem(text + i, len - i, "<|endoftext|>", 13);
        if (!m) break;
        cap_docs++;
        i = (size_t)(m - text) + 13;
    }
    size_t *doc_start = text ? malloc(cap_docs * sizeof *doc_start) : NULL;
    size_t *doc_len = text ? malloc(cap_docs * sizeof *doc_len) : NULL;
    size_t *doc_ids = text ? malloc(cap_docs * sizeof *doc_ids) : NULL; /* where each document's ids go */
    if (!doc_start || !doc_len || !doc_ids) rc = 1;
    size_t n_ids = 0;
    for (size_t i = 0; !rc && i <= len;) {
        uint8_t *m = memmem(text + i, len - i, "<|endoftext|>", 13);
        size_t end = m ? (size_t)(m - text) : len;
        doc_start[n_docs] = i;
        doc_ids[n_docs] = n_ids;
        n_ids += hg_tokenizer_max_ids(tok, end - i);
        doc_len[n_docs++] = end - i;
        if (!m) break;
        i = end + 13;
    }
    int32_t *ids = rc ? NULL : malloc((n_ids ? n_ids : 1) * sizeof *ids);
    if (!ids) rc = 1;
    double best = 1e30;
    size_t tokens = 0;
    for (int r = 0; r < a->repeat && !rc; r++) {
        double t0 = hg_now();
        size_t count = 0;
        int failed = 0;
#pragma omp parallel for schedule(dynamic, 1) num_threads(a->threads) reduction(+ : count, failed)
        for (size_t d = 0; d < n_docs; d++) {
            size_t k = 0;
            failed += hg_tokenizer_encode(tok, text + doc_start[d], doc_len[d], 0, ids + doc_ids[d],
                                          hg_tokenizer_max_ids(tok, doc_len[d]), &k) != HG_OK;
            count += k;
        }
        double dt = hg_now() - t0;
        if (failed) rc = cli_fail("tokenizer bench");
        if (dt < best) best = dt;
        tokens = count;
    }
    if (!rc)
        printf("{\"bytes\": %zu, \"documents\": %zu, \"tokens\": %zu, \"threads\": %d, \"seconds\": %.4f, "
               "\"mb_per_s\": %.2f}\n",
               len, n_docs, tokens, a->threads, best, (double)len / best / 1e6);
    free(text);
    free(ids);
    free(doc_start);
    free(doc_len);
    free(doc_ids);
    hg_tokenizer_free(tok);
    return rc;
}

int cmd_tokenizer(int argc, char **argv) {
    tok_args a = {.threads = 1, .repeat = 3};
    cli_cmd cmd = CLI_CMD("tokenizer", synopsis, about, NULL, tok_options, NULL);
    if (argc < 2 || !strcmp(argv[1], "--help")) {
        cli_usage(&cmd, &a, argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    const char *action = argv[1];
    int which = 0;
    while (which < 4 && strcmp(action, actions[which])) which++;
    if (which == 4) {
        fprintf(stderr, "handgrad tokenizer: unknown action '%s' (encode, decode, train or bench; see handgrad "
                "tokenizer --help)\n", action);
        return 2;
    }
    cmd.operands = "FILE...";
    int files, rc = cli_parse(&cmd, &a, argc - 1, argv + 1, &files);
    if (rc) return cli_exit(rc);
    a.files = argv + 1 + files;
    a.n_files = argc - 1 - files;
    if (!a.threads) a.threads = omp_get_num_procs();
    int (*const run[])(const tok_args *) = {run_encode, run_decode, run_train, run_bench};
    return run[which](&a);
}
