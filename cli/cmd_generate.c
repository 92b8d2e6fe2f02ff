/* `handgrad generate`: continues a prompt with a model through the KV cache, streaming
 * the text to stdout as tokens come, once or --num-samples times, up to a --stop string;
 * reports tokens/s on stderr. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_io.h"
#include "cli_model.h"
#include "cli_open.h"
#include "commands.h"
#include "core/timer.h"
#include "handgrad.h"

static const char synopsis[] = "usage: handgrad generate --model PATH [options]\n";
static const char about[] =
    "Continues a prompt, printing the text as each token is produced, then tokens/s on stderr. A KV "
    "cache makes each new token cost O(context), not a full forward pass.\n";
static const char epilog[] =
    "A prompt longer than the context is cut from the left, with a warning. When the context fills "
    "up, generation goes on from the last half of it. A sample ends at --max-new-tokens, at an "
    "end-of-sequence token or at a --stop string.\n";

typedef struct gen_args {
    const char *model, *adapter, *prompt, *tokenizer;
    cli_strs stops;
    int max_new, top_k, ctx, threads, num_samples;
    int64_t seed;
    double temperature, top_p, rep_penalty;
    int echo, stop_at_eot, no_cache;
    cli_device dev; /* --device, --precision (no --cuda-graphs: cli_model.h) */
} gen_args;

#define O(field) offsetof(gen_args, field)
static const cli_opt gen_options[] = {
    {"model", CLI_STR, O(model), "PATH", 0, 0, 0,
     "a Hugging Face folder (GPT-2, Llama, Mistral, Qwen2, Qwen3, Gemma, Gemma 2, Phi-2, Phi-3, OLMo 2), or a handgrad checkpoint: a weights "
     ".safetensors file, a ckpt_N folder, or a run folder (its newest checkpoint), a LoRA run's included (required)"},
    {"adapter", CLI_STR, O(adapter), "DIR", 0, 0, 0,
     "a PEFT LoRA folder whose adapters go onto the model (a LoRA run's checkpoint, given as --model, brings its own)"},
    {"prompt", CLI_STR, O(prompt), "TEXT", 0, 0, CLI_TEXT,
     "the prompt (default: all of stdin), after the tokenizer's BOS when its tokenizer.json adds one; empty: "
     "start from BOS or <|endoftext|>"},
    {"max-new-tokens", CLI_INT, O(max_new), "N", 0, 1 << 30, 0, "tokens to generate"},
    CLI_OPTS_SAMPLE(gen_args, ),
    {"repetition-penalty", CLI_F64, O(rep_penalty), "X", 0, 100, CLI_LO_OPEN,
     "divide the logit of every token already in the context by X when positive, multiply it by X when "
     "negative, before the temperature (CTRL, as Hugging Face does); 1: off"},
    CLI_OPT_SEED(gen_args, ),
    {"num-samples", CLI_INT, O(num_samples), "N", 1, 1000000, 0,
     "N continuations of the prompt, one after the other, with a line of 15 dashes between two; sample i "
     "draws with a seed made from S and i, the first with S itself"},
    {"stop", CLI_STRS, O(stops), "TEXT", 0, 0, CLI_TEXT,
     "end a sample when its new text contains TEXT, printing only what comes before it; up to 16 --stop "
     "(TEXT is taken byte for byte: in bash, --stop $'\\n\\n' stops at a blank line)"},
    {"tokenizer", CLI_STR, O(tokenizer), "PATH", 0, 0, 0,
     "tokenizer.json, vocab.json/merges.txt folder or .tiktoken file (default: the files beside the model)"},
    CLI_OPT_CTX(gen_args, ),
    CLI_OPT_THREADS(gen_args, ),
    CLI_OPTS_DEVICE(gen_args, dev.),
    {"no-echo", CLI_SET, O(echo), 0, 0, 0, 0, "print only the new text, not the prompt"},
    {"ignore-eot", CLI_SET, O(stop_at_eot), 0, 0, 0, 0,
     "go on after an end-of-sequence token (default: stop at the eos ids of the folder's "
     "generation_config.json or config.json, and at <|endoftext|>)"},
    {"no-cache", CLI_BOOL, O(no_cache), 0, 0, 1, 0,
     "recompute the whole context for every token instead of using the KV cache (the same text, slower; for "
     "comparison)"},
};
#undef O

static int parse_args(int argc, char **argv, gen_args *a) {
    *a = (gen_args){.max_new = 256, .top_k = CLI_SAMPLE_TOP_K, .seed = 1, .num_samples = 1,
                    .temperature = CLI_SAMPLE_TEMPERATURE, .top_p = 1.0, .rep_penalty = 1.0, .echo = 1, .stop_at_eot = 1,
                    .dev = CLI_DEVICE_DEFAULT};
    cli_cmd cmd = CLI_CMD("generate", synopsis, about, epilog, gen_options, NULL);
    int rc = cli_parse(&cmd, a, argc, argv, NULL);
    if (rc || (rc = cli_device_check("generate", &a->dev))) return rc;
    for (int i = 0; i < a->stops.n; i++)
        if (!*a->stops.v[i]) {
            fprintf(stderr, "handgrad generate: --stop: the stop string is empty\n");
            return CLI_USAGE;
        }
    if (!a->model) {
        fprintf(stderr, "handgrad generate: --model is required (see handgrad generate --help)\n");
        return CLI_USAGE;
    }
    return 0;
}

enum { GEN_OK, GEN_STOP, GEN_LIB_ERROR, GEN_IO_ERROR };

/* The new text on its way to stdout: bytes that could be the start of a stop string
 * are held back until the bytes after them show whether they are. */
typedef struct stop_filter {
    const char *const *stops;
    int n_stops;
    char *hold;    /* room for the longest stop string and one token's bytes */
    size_t n_hold; /* held bytes: no stop string starts before them */
} stop_filter;

/* Where the first whole stop string starts in the held bytes; n_hold when none does. */
static size_t stop_find(const stop_filter *f) {
    for (size_t at = 0; at < f->n_hold; at++)
        for (int i = 0; i < f->n_stops; i++) {
            size_t len = strlen(f->stops[i]);
            if (len <= f->n_hold - at && !memcmp(f->hold + at, f->stops[i], len)) return at;
        }
    return f->n_hold;
}

/* The most bytes at the end of the held ones that begin a stop string. */
static size_t stop_partial(const stop_filter *f) {
    size_t keep = 0;
    for (int i = 0; i < f->n_stops; i++) {
        size_t len = strlen(f->stops[i]);
        for (size_t k = len - 1 < f->n_hold ? len - 1 : f->n_hold; k > keep; k--)
            if (!memcmp(f->hold + f->n_hold - k, f->stops[i], k)) {
                keep = k;
                break;
            }
    }
    return keep;
}

/* Appends n bytes of new text and writes what no stop string can start in (all of it
 * when last: the sample's end). GEN_STOP: a stop string is whole, the text before it
 * written and the rest dropped. */
static int stop_push(stop_filter *f, const char *bytes, size_t n, int last) {
    memcpy(f->hold + f->n_hold, bytes, n);
    f->n_hold += n;
    const size_t at = stop_find(f);
    const int hit = at < f->n_hold;
    const size_t out = hit ? at : f->n_hold - (last ? 0 : stop_partial(f));
    if (out && fwrite(f->hold, 1, out, stdout) != out) return GEN_IO_ERROR;
    if (fflush(stdout) != 0) return GEN_IO_ERROR;
    memmove(f->hold, f->hold + out, f->n_hold - out);
    f->n_hold = hit ? 0 : f->n_hold - out;
    return hit ? GEN_STOP : GEN_OK;
}

/* What the samples share. */
typedef struct gen_run {
    const gen_args *a;
    hg_model *m;
    const hg_tokenizer *tok;
    hg_decoder *dec;         /* a new one for each sample */
    hg_hf_special eos;       /* the ids that end a sample */
    hg_sampling sp;
    int V, ctx;              /* tokenizer ids, context length */
    const int32_t *prompt;   /* (n_prompt) */
    int n_prompt, n_start;   /* n_start: start tokens, which are not echoed */
    int32_t *win;            /* (ctx) the context's ids */
    float *logits;           /* (vocab_size) of the context's last token */
    float *prompt_logits;    /* (vocab_size) the prompt's, kept for the next samples */
    int prefix_ok;           /* the KV cache starts with the prompt */
    int warned;              /* the context has been full once */
    char *buf;               /* (cap) one token's bytes */
    size_t cap;
    stop_filter stop;
    long made;               /* new tokens, all samples */
    double t_prefill, t_gen; /* seconds */
} gen_run;

/* Decodes one id and writes its bytes: the prompt's straight to stdout, the new text
 * through the stop filter. */
static int emit(gen_run *r, int32_t id, int generated) {
    size_t n = 0;
    if (hg_decoder_push(r->dec, id, r->buf, r->cap, &n) != HG_OK) return GEN_LIB_ERROR;
    if (generated) return stop_push(&r->stop, r->buf, n, 0);
    if (n && fwrite(r->buf, 1, n, stdout) != n) return GEN_IO_ERROR;
    return fflush(stdout) ? GEN_IO_ERROR : GEN_OK;
}

/* The cache and the logits at the end of the prompt: the first sample's prefill, which
 * the next samples reuse while the cache still starts with the prompt. */
static int prefill(gen_run *r) {
    if (r->prefix_ok) {
        memcpy(r->logits, r->prompt_logits, sizeof(float) * (size_t)hg_model_config(r->m)->vocab_size);
        return hg_kv_truncate(r->m, r->n_prompt) != HG_OK;
    }
    if (hg_kv_reset(r->m) != HG_OK || hg_kv_forward(r->m, r->prompt, r->n_prompt, r->logits) != HG_OK) return 1;
    if (r->prompt_logits) {
        memcpy(r->prompt_logits, r->logits, sizeof(float) * (size_t)hg_model_config(r->m)->vocab_size);
        r->prefix_ok = 1;
    }
    return 0;
}

/* One continuation of the prompt, drawn from seed, then a newline. */
static int sample_one(gen_run *r, uint64_t seed) {
    const gen_args *a = r->a;
    hg_decoder_free(r->dec);
    r->dec = NULL;
    if (hg_decoder_create(&r->dec, r->tok) != HG_OK) return GEN_LIB_ERROR;
    int st;
    if (a->echo)
        for (int i = r->n_start; i < r->n_prompt; i++)
            if ((st = emit(r, r->prompt[i], 0)) != GEN_OK) return st;
    r->stop.n_hold = 0;
    double t0 = hg_now();
    if (prefill(r)) return GEN_LIB_ERROR;
    double t1 = hg_now();
    r->t_prefill += t1 - t0;
    int32_t *win = r->win;
    int n = r->n_prompt;
    memcpy(win, r->prompt, sizeof(int32_t) * (size_t)n);
    uint64_t rng = seed;
    long made = 0;
    st = GEN_OK;
    while (made < a->max_new) {
        int32_t next;
        if (a->rep_penalty != 1.0 &&
            hg_apply_repetition_penalty(r->logits, r->V, win, (size_t)n, (float)a->rep_penalty) != HG_OK)
            return GEN_LIB_ERROR;
        if (hg_sample(r->logits, r->V, &r->sp, &rng, &next) != HG_OK) return GEN_LIB_ERROR;
        int is_eos = 0;
        for (int i = 0; i < r->eos.n_eos; i++) is_eos |= next == r->eos.eos[i];
        if (is_eos && a->stop_at_eot) break;
        made++;
        if ((st = emit(r, next, 1)) != GEN_OK || made == a->max_new) break;
        if (n == r->ctx) { /* full: go on from the last half of the context */
            if (!r->warned++)
                fprintf(stderr, "\nhandgrad generate: note: the context (%d tokens) is full; continuing from its last %d\n",
                        r->ctx, r->ctx / 2);
            memmove(win, win + (r->ctx - r->ctx / 2), sizeof(int32_t) * (size_t)(r->ctx / 2));
            n = r->ctx / 2;
            r->prefix_ok = 0;
            if (hg_kv_reset(r->m) != HG_OK || (n > 0 && hg_kv_forward(r->m, win, n, r->logits) != HG_OK))
                return GEN_LIB_ERROR;
        }
        win[n++] = next;
        if (a->no_cache) { /* the whole context again: a full forward pass per token */
            if (hg_kv_reset(r->m) != HG_OK || hg_kv_forward(r->m, win, n, r->logits) != HG_OK) return GEN_LIB_ERROR;
        } else if (hg_kv_forward(r->m, &next, 1, r->logits) != HG_OK) {
            return GEN_LIB_ERROR;
        }
    }
    r->made += made;
    if (st == GEN_LIB_ERROR || st == GEN_IO_ERROR) return st;
    if (st != GEN_STOP) { /* the decoder's held bytes, and all the filter holds */
        size_t tail = 0;
        if (hg_decoder_flush(r->dec, r->buf, r->cap, &tail) != HG_OK) return GEN_LIB_ERROR;
        if (stop_push(&r->stop, r->buf, tail, 1) == GEN_IO_ERROR) return GEN_IO_ERROR;
    }
    if (fputc('\n', stdout) == EOF || fflush(stdout) != 0) return GEN_IO_ERROR;
    r->t_gen += hg_now() - t1;
    return GEN_OK;
}

/* Sample i's seed: S itself for the first, so one sample is the text --seed S always
 * gave; for the next, S mixed with a splitmix64 hash of i. Not S + i, which would make
 * sample 1 of seed 5 the text of seed 6; not S + i * c either, for the sampler's state
 * steps by a constant c, and such seeds would draw shifted copies of one sequence. */
static uint64_t sample_seed(uint64_t seed, long i) {
    uint64_t z = (uint64_t)i * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return seed ^ z ^ (z >> 31); /* the hash of 0 is 0 */
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
    if (rc) return cli_exit(rc);
    hg_options o = hg_options_default();
    o.training = 0, o.batch = 1, o.seq_len = (int)a.ctx, o.threads = (int)a.threads;
    cli_device_options(&a.dev, &o);
    hg_model *m = NULL;
    hg_tokenizer *tok = NULL;
    int32_t *prompt = NULL;
    char dir[4096];
    gen_run r = {.a = &a, .eos = {.bos = -1}, .stop = {.stops = a.stops.v, .n_stops = a.stops.n}};
    if (cli_open_model("generate", a.model, a.adapter, &o, &m, dir, sizeof dir)) return 1;
    r.m = m;
    rc = 1;
    if (cli_open_tokenizer("generate", a.tokenizer, dir, m, &tok)) goto done;
    r.tok = tok;
    /* sampled among the tokenizer's ids: a model's embedding may be padded past them */
    r.V = hg_tokenizer_vocab_size(tok), r.ctx = hg_model_options(m)->seq_len;
    if (hg_hf_special_ids(dir, &r.eos) != HG_OK) {
        cli_fail("generate");
        goto done;
    }
    if (hg_tokenizer_eot(tok) >= 0 && r.eos.n_eos < HG_HF_MAX_EOS) r.eos.eos[r.eos.n_eos++] = hg_tokenizer_eot(tok);
    prompt = encode_prompt(&a, tok, r.ctx, &r.n_prompt, &r.n_start);
    if (!prompt) goto done;
    r.prompt = prompt;
    size_t longest = 0;
    for (int i = 0; i < a.stops.n; i++) longest = strlen(a.stops.v[i]) > longest ? strlen(a.stops.v[i]) : longest;
    const size_t vocab = (size_t)hg_model_config(m)->vocab_size;
    r.cap = hg_tokenizer_max_token_bytes(tok) + 3;
    r.buf = malloc(r.cap);
    r.stop.hold = malloc(longest + r.cap);
    r.win = malloc(sizeof(int32_t) * (size_t)r.ctx);
    r.logits = malloc(sizeof(float) * vocab);
    r.prompt_logits = a.num_samples > 1 ? malloc(sizeof(float) * vocab) : NULL;
    if (!r.buf || !r.stop.hold || !r.win || !r.logits || (a.num_samples > 1 && !r.prompt_logits)) {
        fprintf(stderr, "handgrad generate: out of memory\n");
        goto done;
    }
    r.sp = (hg_sampling){(float)a.temperature, (int)a.top_k, (float)a.top_p};
    for (int i = 0; i < a.num_samples; i++) {
        if (i > 0 && fputs("---------------\n", stdout) == EOF) goto io_error;
        int st = sample_one(&r, sample_seed((uint64_t)a.seed, i));
        if (st == GEN_LIB_ERROR) goto lib_error;
        if (st == GEN_IO_ERROR) goto io_error;
    }
    fprintf(stderr, "generate: %d prompt tokens in %.3f s, %ld new tokens in %.3f s (%.1f tokens/s)", r.n_prompt,
            r.t_prefill, r.made, r.t_gen, r.t_gen > 0 ? (double)r.made / r.t_gen : 0.0);
    if (a.num_samples > 1) fprintf(stderr, ", %d samples", a.num_samples);
    fputc('\n', stderr);
    rc = 0;
    goto done;
lib_error:
    cli_fail("generate");
    goto done;
io_error:
    fprintf(stderr, "handgrad generate: writing to stdout: %s\n", strerror(errno));
done:
    hg_decoder_free(r.dec);
    hg_tokenizer_free(tok);
    hg_model_free(m);
    free(prompt), free(r.win), free(r.buf), free(r.stop.hold), free(r.logits), free(r.prompt_logits);
    return rc;
}
