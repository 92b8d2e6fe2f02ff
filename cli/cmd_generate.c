/* `handgrad generate`: continues a prompt with a model through the KV cache, streaming
 * the text to stdout as tokens come, and reports tokens/s on stderr. */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_io.h"
#include "cli_open.h"
#include "commands.h"
#include "core/timer.h"
#include "handgrad.h"

static const char *usage_text =
    "usage: handgrad generate --model PATH [options]\n"
    "\n"
    "Continues a prompt, printing the text as each token is produced, then tokens/s on\n"
    "stderr. A KV cache makes each new token cost O(context), not a full forward pass.\n"
    "\n"
    "  --model PATH          a Hugging Face folder (GPT-2, Llama, Mistral, Qwen2, Qwen3), or a\n"
    "                        handgrad checkpoint: a weights .safetensors file, a ckpt_N folder,\n"
    "                        or a run folder (its newest checkpoint)\n"
    "  --prompt TEXT         the prompt (default: all of stdin), after the tokenizer's BOS when\n"
    "                        its tokenizer.json adds one; empty: start from BOS or <|endoftext|>\n"
    "  --max-new-tokens N    tokens to generate (default 256)\n"
    "  --temperature T       softmax temperature; 0 is greedy (default 0.8)\n"
    "  --top-k K             sample among the K most likely tokens; 0: all (default 200)\n"
    "  --top-p P             sample among the most likely tokens that make up P of the\n"
    "                        probability; 1: all (default 1)\n"
    "  --seed S              sampling seed: the same seed gives the same text (default 1)\n"
    "  --tokenizer PATH      tokenizer.json, vocab.json/merges.txt folder or .tiktoken file (default: the\n"
    "                        files beside the model)\n"
    "  --ctx N               context (KV cache) length (default: the model's n_positions)\n"
    "  --threads N           threads (default: all cores)\n"
    "  --no-echo             print only the new text, not the prompt\n"
    "  --ignore-eot          go on after an end-of-sequence token (default: stop at the\n"
    "                        eos ids of the folder's generation_config.json or config.json,\n"
    "                        and at <|endoftext|>)\n"
    "  --no-cache            recompute the whole context for every token instead of using\n"
    "                        the KV cache (the same text, slower; for comparison)\n"
    "\n"
    "A prompt longer than the context is cut from the left, with a warning. When the\n"
    "context fills up, generation goes on from the last half of it.\n";

/* Strict number parsing: the whole text, within [lo, hi]; prints the error naming the flag. */
static int parse_long(const char *flag, const char *text, long lo, long hi, long *out) {
    char *end;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (errno || end == text || *end || v < lo || v > hi) {
        fprintf(stderr, "handgrad generate: %s: '%s' is not an integer in [%ld, %ld]\n", flag, text, lo, hi);
        return 1;
    }
    *out = v;
    return 0;
}

static int parse_double(const char *flag, const char *text, double lo, double hi, double *out) {
    char *end;
    errno = 0;
    double v = strtod(text, &end);
    if (errno || end == text || *end || !(v >= lo && v <= hi)) {
        fprintf(stderr, "handgrad generate: %s: '%s' is not a number in [%g, %g]\n", flag, text, lo, hi);
        return 1;
    }
    *out = v;
    return 0;
}

typedef struct gen_args {
    const char *model, *prompt, *tokenizer;
    long max_new, top_k, ctx, threads, seed;
    double temperature, top_p;
    int echo, stop_at_eot, no_cache;
} gen_args;

static int parse_args(int argc, char **argv, gen_args *a) {
    static const struct option opts[] = {
        {"model", required_argument, 0, 'm'},       {"prompt", required_argument, 0, 'p'},
        {"max-new-tokens", required_argument, 0, 'n'}, {"temperature", required_argument, 0, 't'},
        {"top-k", required_argument, 0, 'k'},       {"top-p", required_argument, 0, 'P'},
        {"seed", required_argument, 0, 's'},        {"tokenizer", required_argument, 0, 'T'},
        {"ctx", required_argument, 0, 'c'},         {"threads", required_argument, 0, 'j'},
        {"no-echo", no_argument, 0, 'E'},           {"ignore-eot", no_argument, 0, 'I'},
        {"no-cache", no_argument, 0, 'C'},          {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0}};
    *a = (gen_args){.max_new = 256, .top_k = 200, .seed = 1, .temperature = 0.8, .top_p = 1.0, .echo = 1,
                    .stop_at_eot = 1};
    int c, bad = 0;
    optind = 1, opterr = 0; /* one-line messages of our own */
    while ((c = getopt_long(argc, argv, ":", opts, NULL)) != -1) {
        switch (c) {
        case 'm': a->model = optarg; break;
        case 'p': a->prompt = optarg; break;
        case 'T': a->tokenizer = optarg; break;
        case 'n': bad |= parse_long("--max-new-tokens", optarg, 0, 1L << 30, &a->max_new); break;
        case 'k': bad |= parse_long("--top-k", optarg, 0, 1L << 24, &a->top_k); break;
        case 'c': bad |= parse_long("--ctx", optarg, 1, 1 << 20, &a->ctx); break;
        case 'j': bad |= parse_long("--threads", optarg, 0, 1024, &a->threads); break;
        case 's': bad |= parse_long("--seed", optarg, 0, __LONG_MAX__, &a->seed); break;
        case 't': bad |= parse_double("--temperature", optarg, 0.0, 1e6, &a->temperature); break;
        case 'P': bad |= parse_double("--top-p", optarg, 0.0, 1.0, &a->top_p); break;
        case 'E': a->echo = 0; break;
        case 'I': a->stop_at_eot = 0; break;
        case 'C': a->no_cache = 1; break;
        case 'h': fputs(usage_text, stdout); return -1;
        case ':': fprintf(stderr, "handgrad generate: %s needs a value (see --help)\n", argv[optind - 1]); return 2;
        default: fprintf(stderr, "handgrad generate: unknown option '%s' (see --help)\n", argv[optind - 1]); return 2;
        }
    }
    if (bad) return 2;
    if (optind < argc) {
        fprintf(stderr, "handgrad generate: unexpected argument '%s' (the prompt goes in --prompt or stdin)\n", argv[optind]);
        return 2;
    }
    if (!a->model) {
        fprintf(stderr, "handgrad generate: --model is required (see --help)\n");
        return 2;
    }
    return 0;
}

/* Decodes one id through the streaming decoder to stdout. */
static int emit(hg_decoder *dec, int32_t id, char *buf, size_t cap) {
    size_t n = 0;
    if (hg_decoder_push(dec, id, buf, cap, &n) != HG_OK) return 1;
    if (n && fwrite(buf, 1, n, stdout) != n) return 1;
    fflush(stdout);
    return 0;
}

/* The prompt's ids in a buffer of at least ctx, after the tokenizer's BOS when it adds
 * one; an empty prompt without one is <|endoftext|> alone. Cut from the left to ctx. */
static int32_t *encode_prompt(const gen_args *a, const hg_tokenizer *tok, int ctx, int *n_out, int *n_start) {
    size_t len = 0;
    uint8_t *text = a->prompt ? (uint8_t *)strdup(a->prompt) : cli_read_input("generate", "-", &len);
    if (!text) return NULL;
    if (a->prompt) len = strlen(a->prompt);
    /* room for BOS and the most ids the text can give (NFC and sentencepiece
     * tokenizers can give more ids than bytes) */
    const size_t room = hg_tokenizer_max_ids(tok, len) + 1;
    int32_t *ids = malloc(sizeof(int32_t) * (room + 1 > (size_t)ctx ? room + 1 : (size_t)ctx));
    const int32_t bos = hg_tokenizer_bos(tok);
    size_t n = 0, at = bos >= 0;
    if (ids && bos >= 0) ids[0] = bos;
    if (!ids || hg_tokenizer_encode(tok, text, len, 0, ids + at, room, &n) != HG_OK) {
        fprintf(stderr, "handgrad generate: %s\n", ids ? hg_last_error() : "out of memory");
        free(ids), free(text);
        return NULL;
    }
    free(text);
    n += at;
    *n_start = (int)at; /* start tokens, which are not echoed */
    if (n == 0) {
        *n_start = 1;
        if (hg_tokenizer_eot(tok) < 0) {
            fprintf(stderr, "handgrad generate: the prompt is empty and the tokenizer has no <|endoftext|> to start from\n");
            free(ids);
            return NULL;
        }
        ids[n++] = hg_tokenizer_eot(tok);
    }
    if (n > (size_t)ctx) {
        fprintf(stderr, "handgrad generate: warning: the prompt has %zu tokens but the context holds %d; keeping the last %d\n",
                n, ctx, ctx);
        memmove(ids, ids + (n - (size_t)ctx), sizeof(int32_t) * (size_t)ctx);
        n = (size_t)ctx;
        *n_start = 0;
    }
    *n_out = (int)n;
    return ids;
}

int cmd_generate(int argc, char **argv) {
    gen_args a;
    int rc = parse_args(argc, argv, &a);
    if (rc) return rc < 0 ? 0 : rc;
    hg_options o = hg_options_default();
    o.training = 0, o.batch = 1, o.seq_len = (int)a.ctx, o.threads = (int)a.threads;
    hg_model *m = NULL;
    hg_tokenizer *tok = NULL;
    hg_decoder *dec = NULL;
    int32_t *win = NULL;
    float *logits = NULL;
    char dir[4096], *buf = NULL;
    if (cli_open_model("generate", a.model, &o, &m, dir, sizeof dir)) return 1;
    rc = 1;
    if (cli_open_tokenizer("generate", a.tokenizer, dir, m, &tok)) goto done;
    /* sampled among the tokenizer's ids: a model's embedding may be padded past them */
    const int V = hg_tokenizer_vocab_size(tok), ctx = hg_model_options(m)->seq_len;
    hg_hf_special stop = {.bos = -1};
    if (hg_hf_special_ids(dir, &stop) != HG_OK) {
        cli_fail("generate");
        goto done;
    }
    if (hg_tokenizer_eot(tok) >= 0 && stop.n_eos < HG_HF_MAX_EOS) stop.eos[stop.n_eos++] = hg_tokenizer_eot(tok);
    int n = 0, n_start = 0;
    win = encode_prompt(&a, tok, ctx, &n, &n_start); /* the context's tokens */
    const int n_prompt = n;
    size_t cap = hg_tokenizer_max_token_bytes(tok) + 3;
    buf = malloc(cap);
    logits = malloc(sizeof(float) * (size_t)hg_model_config(m)->vocab_size);
    if (!win) goto done;
    if (!buf || !logits) {
        fprintf(stderr, "handgrad generate: out of memory\n");
        goto done;
    }
    if (hg_decoder_create(&dec, tok) != HG_OK) {
        cli_fail("generate");
        goto done;
    }
    if (a.echo)
        for (int i = n_start; i < n; i++)
            if (emit(dec, win[i], buf, cap)) goto io_error;

    hg_sampling sp = {(float)a.temperature, (int)a.top_k, (float)a.top_p};
    uint64_t rng = (uint64_t)a.seed;
    double t0 = hg_now();
    if (hg_kv_forward(m, win, n, logits) != HG_OK) goto lib_error;
    double t1 = hg_now();
    long made = 0;
    int warned = 0;
    while (made < a.max_new) {
        int32_t next;
        if (hg_sample(logits, V, &sp, &rng, &next) != HG_OK) goto lib_error;
        int is_eos = 0;
        for (int i = 0; i < stop.n_eos; i++) is_eos |= next == stop.eos[i];
        if (is_eos && a.stop_at_eot) break;
        if (emit(dec, next, buf, cap)) goto io_error;
        if (++made == a.max_new) break;
        if (n == ctx) { /* full: go on from the last half of the context */
            if (!warned++)
                fprintf(stderr, "\nhandgrad generate: note: the context (%d tokens) is full; continuing from its last %d\n",
                        ctx, ctx / 2);
            memmove(win, win + (ctx - ctx / 2), sizeof(int32_t) * (size_t)(ctx / 2));
            n = ctx / 2;
            if (hg_kv_reset(m) != HG_OK || (n > 0 && hg_kv_forward(m, win, n, logits) != HG_OK)) goto lib_error;
        }
        win[n++] = next;
        if (a.no_cache) { /* the whole context again: a full forward pass per token */
            if (hg_kv_reset(m) != HG_OK || hg_kv_forward(m, win, n, logits) != HG_OK) goto lib_error;
        } else if (hg_kv_forward(m, &next, 1, logits) != HG_OK) {
            goto lib_error;
        }
    }
    size_t tail = 0;
    if (hg_decoder_flush(dec, buf, cap, &tail) != HG_OK) goto lib_error;
    if (tail && fwrite(buf, 1, tail, stdout) != tail) goto io_error;
    if (fputc('\n', stdout) == EOF || fflush(stdout) != 0) goto io_error;
    double t2 = hg_now();
    fprintf(stderr, "generate: %d prompt tokens in %.3f s, %ld new tokens in %.3f s (%.1f tokens/s)\n", n_prompt,
            t1 - t0, made, t2 - t1, t2 > t1 ? (double)made / (t2 - t1) : 0.0);
    rc = 0;
    goto done;
lib_error:
    cli_fail("generate");
    goto done;
io_error:
    fprintf(stderr, "handgrad generate: writing to stdout: %s\n", strerror(errno));
done:
    hg_decoder_free(dec);
    hg_tokenizer_free(tok);
    hg_model_free(m);
    free(win), free(buf), free(logits);
    return rc;
}
