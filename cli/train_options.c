/* The options of `handgrad train` (train_options.h): the table, parsing from flags and
 * JSON, range checks, --help and run.json. */
#include "train_options.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli_io.h"
#include "handgrad.h"

typedef enum { OT_STR, OT_INT, OT_I64, OT_F64, OT_FLAG, OT_SECTION } opt_type;

typedef struct opt_def {
    const char *name; /* the long flag and the config key */
    opt_type type;
    size_t off;       /* into train_opts */
    const char *arg;  /* the value's name in --help */
    double lo, hi;    /* accepted range for numbers */
    int saved;        /* kept in run.json */
    const char *help;
} opt_def;

#define F(field) offsetof(train_opts, field)
#define I64MAX 9.2e18
static const opt_def defs[] = {
    {"Run", OT_SECTION, 0, 0, 0, 0, 0, 0},
    {"out", OT_STR, F(out), "DIR", 0, 0, 0, "run folder: checkpoints, train.jsonl, loss.svg (required)"},
    {"config", OT_STR, F(config), "FILE", 0, 0, 0, "JSON object of settings, keys as these flags; flags override it"},
    {"resume", OT_FLAG, F(resume), 0, 0, 1, 0, "continue from the newest complete checkpoint in --out, with its settings"},
    {"Model", OT_SECTION, 0, 0, 0, 0, 0, 0},
    {"model", OT_STR, F(model), "NAME", 0, 0, 1, "preset, e.g. tiny, small, cs336-small, llama-tiny (vocab from the tokenizer)"},
    {"arch", OT_STR, F(arch), "F=V,...", 0, 0, 1, "config fields over the preset, e.g. norm=rmsnorm,position=rope"},
    {"n-layer", OT_INT, F(n_layer), "L", 0, 4096, 1, "layers (overrides the preset)"},
    {"n-head", OT_INT, F(n_head), "NH", 0, 65536, 1, "attention heads; d_model/n_head must be a multiple of 16"},
    {"d-model", OT_INT, F(d_model), "C", 0, 65536, 1, "model width"},
    {"d-ff", OT_INT, F(d_ff), "F", 0, 262144, 1, "MLP width (default 4*C)"},
    {"max-seq-len", OT_INT, F(max_seq_len), "TMAX", 0, 1 << 20, 1, "position rows (default: the preset's, widened to --ctx; else --ctx, else 256)"},
    {"vocab-size", OT_INT, F(vocab_size), "V", 0, 1 << 24, 1, "vocabulary (default: the tokenizer's)"},
    {"dropout", OT_F64, F(dropout), "P", 0, 0.999999, 1, "dropout probability (default 0)"},
    {"init-from", OT_STR, F(init_from), "CKPT", 0, 0, 1, "start from these weights: a checkpoint or run folder, or a .safetensors"},
    {"init-from-hf", OT_STR, F(init_from_hf), "DIR", 0, 0, 1, "start from a Hugging Face folder (GPT-2, Llama, Mistral, Qwen2, Qwen3)"},
    {"Data", OT_SECTION, 0, 0, 0, 0, 0, 0},
    {"train", OT_STR, F(train), "GLOB", 0, 0, 1, "training token shards, e.g. 'data/kjv/train_*.bin' (required)"},
    {"val", OT_STR, F(val), "GLOB", 0, 0, 1, "validation shards (evaluation needs them)"},
    {"tokenizer", OT_STR, F(tokenizer), "PATH", 0, 0, 1, "tokenizer (default: tokenizer/ beside the shards, if any)"},
    {"batch", OT_INT, F(batch), "B", 1, 1 << 20, 1, "sequences per micro-batch (default 8)"},
    {"ctx", OT_INT, F(ctx), "T", 0, 1 << 20, 1, "tokens per sequence (default: the model's max_seq_len)"},
    {"total-batch-tokens", OT_I64, F(total_batch_tokens), "N", 0, I64MAX, 1,
     "tokens per optimizer step; a multiple of B*T sets gradient accumulation"},
    {"sequential", OT_FLAG, F(sequential), 0, 0, 1, 1, "read windows in order instead of a seeded shuffle"},
    {"allow-data-change", OT_FLAG, F(allow_data_change), 0, 0, 1, 0,
     "resume although the shards differ from the checkpoint's (names, sizes, heads): warn, not refuse"},
    {"Optimisation", OT_SECTION, 0, 0, 0, 0, 0, 0},
    {"lr", OT_F64, F(lr), "LR", 0, 1e9, 1, "peak learning rate (default 6e-4)"},
    {"min-lr", OT_F64, F(min_lr), "LR", 0, 1e9, 1, "final learning rate (default lr/10)"},
    {"warmup-steps", OT_I64, F(warmup_steps), "N", 0, I64MAX, 1, "linear warmup steps (default 0)"},
    {"lr-schedule", OT_STR, F(lr_schedule), "KIND", 0, 0, 1, "cosine, linear or constant (default cosine)"},
    {"weight-decay", OT_F64, F(weight_decay), "W", 0, 1e9, 1, "AdamW decoupled weight decay on matrices (default 0.1)"},
    {"grad-clip", OT_F64, F(grad_clip), "G", 0, 1e30, 1, "clip the global gradient norm; 0 disables (default 1)"},
    {"beta1", OT_F64, F(beta1), "B1", 0, 0.999999, 1, "AdamW beta1 (default 0.9)"},
    {"beta2", OT_F64, F(beta2), "B2", 0, 0.999999999, 1, "AdamW beta2 (default 0.95)"},
    {"max-steps", OT_I64, F(max_steps), "N", 0, I64MAX, 1, "optimizer steps to train (this or --max-tokens is required)"},
    {"max-tokens", OT_I64, F(max_tokens), "N", 0, I64MAX, 1, "train until this many tokens are consumed"},
    {"seed", OT_I64, F(seed), "S", 0, I64MAX, 1, "init, data order, dropout and sampling seed (default 1)"},
    {"threads", OT_INT, F(threads), "N", 0, 1024, 1, "threads; 0 = all cores (default 0)"},
    {"max-nan-steps", OT_INT, F(max_nan_steps), "K", 1, 1 << 30, 1,
     "stop after K steps in a row with a non-finite loss or gradient norm (default 5)"},
    {"loss-band-z", OT_F64, F(loss_band_z), "Z", 0, 1e6, 1,
     "a loss above mean + Z spreads of the last 128 is out of band; 0: off (default 6)"},
    {"max-band-steps", OT_INT, F(max_band_steps), "K", 1, 1 << 30, 1,
     "stop after K steps in a row out of band, naming the checkpoint from before (default 100)"},
    {"skip-outliers", OT_FLAG, F(skip_outliers), 0, 0, 1, 1, "skip the update of a step whose loss is out of band"},
    {"Evaluation and samples", OT_SECTION, 0, 0, 0, 0, 0, 0},
    {"eval-every", OT_I64, F(eval_every), "N", 0, I64MAX, 1, "val loss every N steps and at the end; 0: end only (default 100)"},
    {"eval-batches", OT_INT, F(eval_batches), "N", 1, 1 << 30, 1, "val batches per evaluation (default 20)"},
    {"sample-every", OT_I64, F(sample_every), "N", 0, I64MAX, 1, "print a sample every N steps and at the end; 0: never"},
    {"prompt", OT_STR, F(prompt), "TEXT", 0, 0, 1, "the samples' prompt (default: <|endoftext|>)"},
    {"sample-tokens", OT_INT, F(sample_tokens), "N", 1, 1 << 20, 1, "tokens per sample (default 96)"},
    {"temperature", OT_F64, F(temperature), "X", 0, 100, 1, "sampling temperature; 0 is greedy (default 0.8)"},
    {"top-k", OT_INT, F(top_k), "K", 0, 1 << 24, 1, "sample from the K most likely tokens; 0: all (default 40)"},
    {"top-p", OT_F64, F(top_p), "P", 0, 1, 1, "nucleus sampling; 0 or 1: off (default 0)"},
    {"Checkpoints and output", OT_SECTION, 0, 0, 0, 0, 0, 0},
    {"ckpt-every", OT_I64, F(ckpt_every), "N", 0, I64MAX, 1, "checkpoint every N steps and at the end; 0: end only (default 0)"},
    {"keep-last", OT_INT, F(keep_last), "K", 0, 1 << 30, 1, "keep the K newest checkpoints; 0 keeps all (default 3)"},
    {"print-every", OT_I64, F(print_every), "N", 0, I64MAX, 0,
     "without a terminal, a progress line every N steps; 0: every ~5 s (default 0)"},
    {"peak-gflops", OT_F64, F(peak_gflops), "G", 0, 1e12, 0, "sgemm ceiling for '% of peak'; 0: measure it at start (~1 s)"},
    {"inject-nan", OT_STR, F(inject_nan), "S,S..", 0, 0, 0, "testing aid: poison the gradients at these steps"},
    {"Data parallel (mpirun -np N handgrad train ..., or srun; docs/distributed.md)", OT_SECTION, 0, 0, 0, 0, 0, 0},
    {"zero", OT_INT, F(zero), "0|1", 0, 1, 1, "1: shard the AdamW state across ranks (ZeRO-1) (default 0)"},
    {"bucket-mb", OT_F64, F(bucket_mb), "MB", 0.001, 1e6, 1, "gradient all-reduce bucket size (default 25)"},
    {"dist-timeout", OT_F64, F(dist_timeout), "S", 1, 1e7, 0, "give up when another rank is silent this long (default 300)"},
};
#define NDEFS ((int)(sizeof defs / sizeof defs[0]))

void train_opts_defaults(train_opts *o) {
    memset(o, 0, sizeof *o);
    o->dropout = -1;
    o->batch = 8;
    o->lr = 6e-4;
    o->min_lr = -1;
    o->weight_decay = 0.1;
    o->grad_clip = 1.0;
    o->beta1 = 0.9;
    o->beta2 = 0.95;
    o->seed = 1;
    o->max_nan_steps = 5;
    o->loss_band_z = 6;
    o->max_band_steps = 100;
    o->bucket_mb = 25;
    o->dist_timeout = 300;
    o->eval_every = -1; /* unset: every 100 steps when there is --val */
    o->eval_batches = 20;
    o->sample_tokens = 96;
    o->temperature = 0.8;
    o->top_k = 40;
    o->keep_last = 3;
    o->lr_schedule = strdup("cosine");
}

void train_opts_free(train_opts *o) {
    for (int i = 0; i < NDEFS; i++)
        if (defs[i].type == OT_STR) {
            char **p = (char **)((char *)o + defs[i].off);
            free(*p);
            *p = NULL;
        }
}

static const opt_def *find_def(const char *name) {
    for (int i = 0; i < NDEFS; i++)
        if (defs[i].type != OT_SECTION && !strcmp(defs[i].name, name)) return &defs[i];
    return NULL;
}

/* Sets one option from text; `who` names its origin ("--lr", "cfg.json: key 'lr'"). */
static int set_value(train_opts *o, const opt_def *d, const char *v, const char *who, char *err, size_t cap) {
    void *p = (char *)o + d->off;
    char *end = NULL;
    errno = 0;
    switch (d->type) {
    case OT_STR: {
        if (!strcmp(d->name, "lr-schedule") && strcmp(v, "cosine") && strcmp(v, "linear") && strcmp(v, "constant")) {
            snprintf(err, cap, "%s: '%s' is not cosine, linear or constant", who, v);
            return 1;
        }
        char *s = strdup(v);
        if (!s) return snprintf(err, cap, "out of memory"), 1;
        free(*(char **)p);
        *(char **)p = s;
        return 0;
    }
    case OT_FLAG:
        if (!strcmp(v, "1") || !strcmp(v, "true")) *(int *)p = 1;
        else if (!strcmp(v, "0") || !strcmp(v, "false")) *(int *)p = 0;
        else return snprintf(err, cap, "%s: '%s' is not true or false", who, v), 1;
        return 0;
    case OT_INT:
    case OT_I64: {
        long long x = strtoll(v, &end, 10);
        if (end == v || *end || errno || x < d->lo || (double)x > d->hi) {
            snprintf(err, cap, "%s: '%s' is not an integer in [%.0f, %.0f]", who, v, d->lo, d->hi);
            return 1;
        }
        if (d->type == OT_INT) *(int *)p = (int)x;
        else *(int64_t *)p = x;
        return 0;
    }
    case OT_F64: {
        double x = strtod(v, &end);
        if (end == v || *end || !isfinite(x) || x < d->lo || x > d->hi) {
            snprintf(err, cap, "%s: '%s' is not a number in [%g, %g]", who, v, d->lo, d->hi);
            return 1;
        }
        *(double *)p = x;
        return 0;
    }
    case OT_SECTION: break;
    }
    return 1;
}

int train_opts_apply_json(train_opts *o, const char *name, const char *text, size_t len, char *err, size_t cap) {
    const char *nul = memchr(text, 0, len), *end = NULL;
    if (nul) {
        snprintf(err, cap, "%s: byte %ld is a NUL byte; a config is JSON text", name, (long)(nul - text));
        return 1;
    }
    cJSON *j = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    while (j && end && end < text + len && strchr(" \t\r\n", *end)) end++;
    if (cJSON_IsObject(j) && end && end < text + len) {
        snprintf(err, cap, "%s: text after the JSON object at byte %ld", name, (long)(end - text));
        cJSON_Delete(j);
        return 1;
    }
    if (!cJSON_IsObject(j)) {
        const char *at = cJSON_GetErrorPtr();
        long off = j || !at || at < text || at > text + len ? -1 : (long)(at - text);
        if (off >= 0) snprintf(err, cap, "%s: not a valid JSON object (error near byte %ld)", name, off);
        else snprintf(err, cap, "%s: not a JSON object", name);
        cJSON_Delete(j);
        return 1;
    }
    int rc = 0;
    char who[300], num[64];
    for (const cJSON *e = j->child; e && !rc; e = e->next) {
        const opt_def *d = find_def(e->string);
        snprintf(who, sizeof who, "%s: key '%.200s'", name, e->string);
        if (!d || !strcmp(d->name, "config")) {
            snprintf(err, cap, "%s is not a setting (see handgrad train --help)", who);
            rc = 1;
        } else if (cJSON_IsString(e)) {
            rc = set_value(o, d, e->valuestring, who, err, cap);
        } else if (cJSON_IsBool(e)) {
            rc = set_value(o, d, cJSON_IsTrue(e) ? "true" : "false", who, err, cap);
        } else if (cJSON_IsNumber(e) && d->type != OT_STR) {
            snprintf(num, sizeof num, "%.17g", e->valuedouble);
            rc = set_value(o, d, num, who, err, cap);
        } else {
            snprintf(err, cap, "%s: the value has the wrong type", who);
            rc = 1;
        }
    }
    cJSON_Delete(j);
    return rc;
}

char *train_opts_to_json(const train_opts *o) {
    cJSON *j = cJSON_CreateObject();
    for (int i = 0; j && i < NDEFS; i++) {
        const opt_def *d = &defs[i];
        const void *p = (const char *)o + d->off;
        if (!d->saved) continue;
        switch (d->type) {
        case OT_STR:
            if (*(char *const *)p) cJSON_AddStringToObject(j, d->name, *(char *const *)p);
            break;
        case OT_FLAG: cJSON_AddBoolToObject(j, d->name, *(const int *)p); break;
        case OT_INT: cJSON_AddNumberToObject(j, d->name, *(const int *)p); break;
        case OT_I64: {
            char buf[32];
            if (*(const int64_t *)p < 0) break; /* unset */
            snprintf(buf, sizeof buf, "%lld", (long long)*(const int64_t *)p);
            cJSON_AddRawToObject(j, d->name, buf);
            break;
        }
        case OT_F64:
            if (*(const double *)p >= 0) cJSON_AddNumberToObject(j, d->name, *(const double *)p);
            break;
        case OT_SECTION: break;
        }
    }
    char *s = j ? cJSON_Print(j) : NULL;
    cJSON_Delete(j);
    return s;
}

static void usage(FILE *f) {
    fprintf(f, "usage: handgrad train --train GLOB --out DIR (--model NAME | --n-layer L --n-head NH --d-model C |\n"
               "                      --init-from CKPT) (--max-steps N | --max-tokens N) [options]\n"
               "       handgrad train --resume --out DIR [options]\n\n"
               "Trains a GPT-2 style model on token shards (handgrad prepare), with a progress bar,\n"
               "a JSONL log and a loss plot in DIR, checkpoints that resume exactly, and samples.\n"
               "Ctrl-C (or SIGTERM) saves a checkpoint after the current step and exits; a second\n"
               "Ctrl-C aborts at once.\n");
    char flag[64];
    for (int i = 0; i < NDEFS; i++) {
        const opt_def *d = &defs[i];
        if (d->type == OT_SECTION) {
            fprintf(f, "\n%s:\n", d->name);
            continue;
        }
        snprintf(flag, sizeof flag, "--%s%s%s", d->name, d->arg ? " " : "", d->arg ? d->arg : "");
        fprintf(f, "  %-26s %s\n", flag, d->help);
    }
    fprintf(f, "  %-26s %s\n", "--help", "this text");
}

/* A file's whole text, or NULL after printing why. */
static char *slurp(const char *path, size_t *len) {
    uint8_t *b = cli_read_input("train", path, len);
    return (char *)b;
}

/* Applies run.json of the newest checkpoint in out to o; without a checkpoint, the
 * run.json a run writes into out when it starts (if any), and from stays "". */
static int apply_resume(train_opts *o, const char *out, char *from, size_t cap) {
    from[0] = 0;
    char dir[4096], path[4200], err[512];
    hg_status s = hg_checkpoint_latest(out, dir, sizeof dir, NULL);
    if (s != HG_OK && s != HG_ERR_IO) return fprintf(stderr, "handgrad train: --resume: %s\n", hg_last_error()), 1;
    snprintf(path, sizeof path, "%s/run.json", s == HG_OK ? dir : out);
    if (s != HG_OK && access(path, F_OK) != 0) return 0; /* a fresh start */
    size_t len;
    char *text = slurp(path, &len);
    if (!text) return 1;
    int rc = train_opts_apply_json(o, path, text, len, err, sizeof err);
    free(text);
    if (rc) fprintf(stderr, "handgrad train: %s\n", err);
    else if (s == HG_OK) snprintf(from, cap, "%s", dir);
    return rc;
}

int train_opts_parse(train_opts *o, int argc, char **argv, char *resumed_from, size_t cap) {
    struct option lo[NDEFS + 2];
    int n = 0;
    for (int i = 0; i < NDEFS; i++)
        if (defs[i].type != OT_SECTION)
            lo[n++] = (struct option){defs[i].name, defs[i].type == OT_FLAG ? no_argument : required_argument, 0, 1000 + i};
    lo[n++] = (struct option){"help", no_argument, 0, 'h'};
    lo[n] = (struct option){0, 0, 0, 0};
    /* first pass: collect; --config, --out and --resume are needed before the rest */
    int *which = calloc((size_t)argc + 1, sizeof *which);
    char **vals = calloc((size_t)argc + 1, sizeof *vals);
    int count = 0, c, rc = 0, help = 0;
    const char *config = NULL, *out = NULL;
    int resume = 0;
    if (!which || !vals) {
        free(which), free(vals);
        fprintf(stderr, "handgrad train: out of memory\n");
        return 1;
    }
    optind = 1;
    opterr = 0;
    while (!rc && (c = getopt_long(argc, argv, ":h", lo, NULL)) != -1) {
        if (c == 'h') help = 1;
        else if (c == '?') {
            fprintf(stderr, "handgrad train: unknown option '%s' (see handgrad train --help)\n", argv[optind - 1]);
            rc = 1;
        } else if (c == ':') {
            fprintf(stderr, "handgrad train: option '%s' needs a value\n", argv[optind - 1]);
            rc = 1;
        } else if (optarg && !strncmp(optarg, "--", 2)) {
            fprintf(stderr, "handgrad train: option '--%s' needs a value, not '%s'\n", defs[c - 1000].name, optarg);
            rc = 1;
        } else {
            const opt_def *d = &defs[c - 1000];
            which[count] = c - 1000;
            vals[count++] = d->type == OT_FLAG ? "1" : optarg;
            if (!strcmp(d->name, "config")) config = optarg;
            if (!strcmp(d->name, "out")) out = optarg;
            if (!strcmp(d->name, "resume")) resume = 1;
        }
    }
    if (!rc && optind < argc) {
        fprintf(stderr, "handgrad train: unexpected argument '%s' (options are --name value)\n", argv[optind]);
        rc = 1;
    }
    if (!rc && help) {
        usage(stdout);
        rc = -1;
    }
    char err[600];
    char *cfg_text = NULL;
    size_t cfg_len = 0;
    train_opts probe;
    train_opts_defaults(&probe);
    if (!rc && config) {
        cfg_text = slurp(config, &cfg_len);
        if (!cfg_text) rc = 1;
        /* --out and --resume may come from the config file */
        else if (train_opts_apply_json(&probe, config, cfg_text, cfg_len, err, sizeof err)) {
            fprintf(stderr, "handgrad train: %s\n", err);
            rc = 1;
        } else {
            if (!out) out = probe.out;
            resume |= probe.resume;
        }
    }
    resumed_from[0] = 0;
    if (!rc && resume && out) rc = apply_resume(o, out, resumed_from, cap);
    if (!rc && cfg_text && train_opts_apply_json(o, config, cfg_text, cfg_len, err, sizeof err)) {
        fprintf(stderr, "handgrad train: %s\n", err);
        rc = 1;
    }
    for (int i = 0; !rc && i < count; i++) {
        char who[80];
        snprintf(who, sizeof who, "--%s", defs[which[i]].name);
        if (set_value(o, &defs[which[i]], vals[i], who, err, sizeof err)) {
            fprintf(stderr, "handgrad train: %s\n", err);
            rc = 1;
        }
    }
    train_opts_free(&probe);
    free(cfg_text);
    free(which);
    free(vals);
    return rc;
}
