/* The options of `handgrad train` (train_options.h): the table, and the order in which
 * run.json, --config and the flags apply. */
#include "train_options.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli_io.h"
#include "handgrad.h"

#define F(field) offsetof(train_opts, field)
#define I64MAX 9.2e18
static const cli_opt defs[] = {
    {"Run", CLI_SECTION, 0, 0, 0, 0, 0, 0},
    {"out", CLI_STR, F(out), "DIR", 0, 0, 0, "run folder: checkpoints, train.jsonl, loss.svg (required)"},
    {"config", CLI_STR, F(config), "FILE", 0, 0, CLI_ARGV,
     "JSON object of settings, keys as these flags; flags override it"},
    {"resume", CLI_BOOL, F(resume), 0, 0, 1, 0, "continue from the newest complete checkpoint in --out, with its settings"},
    {"Model", CLI_SECTION, 0, 0, 0, 0, 0, 0},
    CLI_OPTS_MODEL(train_opts, shape.),
    CLI_OPTS_SHAPE(train_opts, shape.),
    {"dropout", CLI_F64, F(dropout), "P", 0, 0.999999, CLI_SAVED, "dropout probability (default 0)"},
    {"init-from", CLI_STR, F(init_from), "CKPT", 0, 0, CLI_SAVED,
     "start from these weights: a checkpoint or run folder, or a .safetensors"},
    {"init-from-hf", CLI_STR, F(init_from_hf), "DIR", 0, 0, CLI_SAVED,
     "start from a Hugging Face folder (GPT-2, Llama, Mistral, Qwen2, Qwen3, Gemma, Gemma 2, Phi-2, Phi-3, OLMo 2)"},
    {"lora", CLI_STR, F(lora), "SPEC", 0, 0, CLI_SAVED,
     "train LoRA adapters on a frozen model: r=16,alpha=32,dropout=0.05,targets=q_proj,v_proj (PEFT's module names; "
     "also init=gaussian, rslora=true)"},
    {"adapter", CLI_STR, F(adapter), "DIR", 0, 0, CLI_SAVED,
     "start the adapters from a PEFT LoRA folder (its adapter_config.json sets r, alpha, dropout and targets)"},
    {"freeze", CLI_STR, F(freeze), "GLOBS", 0, 0, CLI_SAVED,
     "tensors no optimizer trains: Hugging Face names or handgrad's, globs, comma-separated (*.mlp.*), or all"},
    {"Data", CLI_SECTION, 0, 0, 0, 0, 0, 0},
    {"train", CLI_STR, F(train), "GLOB", 0, 0, CLI_SAVED, "training token shards, e.g. 'data/kjv/train_*.bin' (required)"},
    {"val", CLI_STR, F(val), "GLOB", 0, 0, CLI_SAVED, "validation shards (evaluation needs them)"},
    {"tokenizer", CLI_STR, F(tokenizer), "PATH", 0, 0, CLI_SAVED, "tokenizer (default: tokenizer/ beside the shards, if any)"},
    CLI_OPT_BATCH(train_opts, ),
    CLI_OPT_CTX(train_opts, ),
    {"total-batch-tokens", CLI_I64, F(total_batch_tokens), "N", 0, I64MAX, CLI_SAVED,
     "tokens per optimizer step; a multiple of B*T sets gradient accumulation"},
    {"sequential", CLI_BOOL, F(sequential), 0, 0, 1, CLI_SAVED, "read windows in order instead of a seeded shuffle"},
    {"rows", CLI_CHOICE, F(rows), "auto|windows|padded|packed", 0, 0, CLI_SAVED,
     "windows: T+1 tokens every T, across documents; padded: a document a row, padded, the padding never a target; "
     "packed: as many whole documents a row as fit, none attending to another, positions restarting in each; "
     "auto: packed for shards with a loss mask (prepare --chat; padded on CUDA), else windows (docs/data.md)"},
    {"pack", CLI_BOOL, F(pack), 0, 0, 1, CLI_SAVED, "the same as --rows packed"},
    {"no-split", CLI_BOOL, F(no_split), 0, 0, 1, CLI_SAVED,
     "padded and packed rows: refuse a document longer than --ctx + 1 tokens instead of cutting it into windows"},
    {"allow-data-change", CLI_BOOL, F(allow_data_change), 0, 0, 1, 0,
     "resume although the shards differ from the checkpoint's (names, sizes, heads): warn, not refuse"},
    {"Optimisation", CLI_SECTION, 0, 0, 0, 0, 0, 0},
    {"lr", CLI_F64, F(lr), "LR", 0, 1e9, CLI_SAVED, "peak learning rate"},
    {"min-lr", CLI_F64, F(min_lr), "LR", 0, 1e9, CLI_SAVED, "final learning rate (default lr/10)"},
    {"warmup-steps", CLI_I64, F(warmup_steps), "N", 0, I64MAX, CLI_SAVED, "linear warmup steps (default 0)"},
    {"lr-schedule", CLI_CHOICE, F(lr_schedule), "cosine|linear|constant", 0, 0, CLI_SAVED, "the decay after warmup"},
    {"weight-decay", CLI_F64, F(weight_decay), "W", 0, 1e9, CLI_SAVED, "AdamW decoupled weight decay on matrices"},
    {"grad-clip", CLI_F64, F(grad_clip), "G", 0, 1e30, CLI_SAVED, "clip the global gradient norm; 0 disables"},
    {"beta1", CLI_F64, F(beta1), "B1", 0, 0.999999, CLI_SAVED, "AdamW beta1"},
    {"beta2", CLI_F64, F(beta2), "B2", 0, 0.999999999, CLI_SAVED, "AdamW beta2"},
    {"max-steps", CLI_I64, F(max_steps), "N", 0, I64MAX, CLI_SAVED,
     "optimizer steps to train (this or --max-tokens is required)"},
    {"max-tokens", CLI_I64, F(max_tokens), "N", 0, I64MAX, CLI_SAVED, "train until this many tokens are consumed"},
    CLI_OPT_SEED(train_opts, ),
    CLI_OPT_THREADS(train_opts, ),
    CLI_OPTS_DEVICE(train_opts, dev.),
    CLI_OPT_CUDA_GRAPHS(train_opts, dev.),
    CLI_OPT_RECOMPUTE(train_opts, dev.),
    CLI_OPT_BASE_PRECISION(train_opts, dev.),
    CLI_OPT_OPTIM_STATE(train_opts, dev.),
    CLI_OPT_GRAD_PRECISION(train_opts, dev.),
    {"max-nan-steps", CLI_INT, F(max_nan_steps), "K", 1, 1 << 30, CLI_SAVED,
     "stop after K steps in a row with a non-finite loss or gradient norm"},
    {"loss-band-z", CLI_F64, F(loss_band_z), "Z", 0, 1e6, CLI_SAVED,
     "a loss above mean + Z spreads of the last 128 is out of band; 0: off"},
    {"max-band-steps", CLI_INT, F(max_band_steps), "K", 1, 1 << 30, CLI_SAVED,
     "stop after K steps in a row out of band, naming the checkpoint from before"},
    {"skip-outliers", CLI_BOOL, F(skip_outliers), 0, 0, 1, CLI_SAVED, "skip the update of a step whose loss is out of band"},
    {"Evaluation and samples", CLI_SECTION, 0, 0, 0, 0, 0, 0},
    {"eval-every", CLI_I64, F(eval_every), "N", 0, I64MAX, CLI_SAVED,
     "val loss every N steps and at the end; 0: end only (default 100)"},
    {"eval-batches", CLI_INT, F(eval_batches), "N", 1, 1 << 30, CLI_SAVED, "val batches per evaluation"},
    {"sample-every", CLI_I64, F(sample_every), "N", 0, I64MAX, CLI_SAVED, "print a sample every N steps and at the end; 0: never"},
    {"prompt", CLI_STR, F(prompt), "TEXT", 0, 0, CLI_SAVED | CLI_TEXT, "the samples' prompt (default: <|endoftext|>)"},
    {"sample-tokens", CLI_INT, F(sample_tokens), "N", 1, 1 << 20, CLI_SAVED, "tokens per sample"},
    CLI_OPTS_SAMPLE(train_opts, ),
    {"Checkpoints and output", CLI_SECTION, 0, 0, 0, 0, 0, 0},
    {"ckpt-every", CLI_I64, F(ckpt_every), "N", 0, I64MAX, CLI_SAVED,
     "checkpoint every N steps and at the end; 0: end only (default 0)"},
    {"keep-last", CLI_INT, F(keep_last), "K", 0, 1 << 30, CLI_SAVED, "keep the K newest checkpoints; 0 keeps all"},
    {"print-every", CLI_I64, F(print_every), "N", 0, I64MAX, 0,
     "without a terminal, a progress line every N steps; 0: every ~5 s (default 0)"},
    {"peak-gflops", CLI_F64, F(peak_gflops), "G", 0, 1e12, 0,
     "GEMM ceiling for '% of peak' (sgemm; on cuda cuBLASLt's in --precision); 0: measure it at start (~1 s)"},
    {"inject-nan", CLI_INTS, F(inject_nan), "S,S..", 1, INT_MAX, 0, "testing aid: poison the gradients at these steps"},
    {"Data parallel (mpirun -np N handgrad train ..., or srun; docs/distributed.md)", CLI_SECTION, 0, 0, 0, 0, 0, 0},
    {"zero", CLI_INT, F(zero), "0|1", 0, 1, CLI_SAVED, "1: shard the AdamW state across ranks (ZeRO-1) (default 0)"},
    {"bucket-mb", CLI_F64, F(bucket_mb), "MB", 0.001, 1e6, CLI_SAVED, "gradient all-reduce bucket size"},
    {"dist-timeout", CLI_F64, F(dist_timeout), "S", 1, 1e7, 0, "give up when another rank is silent this long"},
};
#undef F

static const char synopsis[] =
    "usage: handgrad train --train GLOB --out DIR (--max-steps N | --max-tokens N)\n"
    "                      (--model NAME | --n-layer L --n-head NH --d-model C |\n"
    "                       --init-from CKPT | --init-from-hf DIR) [options]\n"
    "       handgrad train --resume --out DIR [options]\n";
static const char about[] =
    "Trains a model on token shards (handgrad prepare), with a progress bar, a JSONL log and a loss "
    "plot in DIR, checkpoints that resume exactly, and samples. A preset's vocabulary comes from the "
    "tokenizer, and its max_seq_len widens to --ctx. Ctrl-C (or SIGTERM) saves a checkpoint after "
    "the current step and exits with status 130; a second Ctrl-C aborts at once.\n";

static cli_cmd train_cmd(void) { return CLI_CMD("train", synopsis, about, NULL, defs, NULL); }

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
    o->dev = CLI_DEVICE_DEFAULT;
    o->max_nan_steps = 5;
    o->loss_band_z = 6;
    o->max_band_steps = 100;
    o->bucket_mb = 25;
    o->dist_timeout = 300;
    o->eval_every = -1; /* unset: every 100 steps when there is --val */
    o->eval_batches = 20;
    o->sample_tokens = 96;
    o->temperature = CLI_SAMPLE_TEMPERATURE;
    o->top_k = CLI_SAMPLE_TOP_K;
    o->keep_last = 3;
    o->lr_schedule = "cosine";
}

void train_opts_free(train_opts *o) { cli_pool_free(&o->pool); }

int train_opts_apply_json(train_opts *o, const char *name, const char *text, size_t len, char *err, size_t cap) {
    cli_cmd cmd = train_cmd();
    return cli_apply_json(&cmd, o, &o->pool, name, text, len, err, cap);
}

char *train_opts_to_json(const train_opts *o) {
    cli_cmd cmd = train_cmd();
    return cli_to_json(&cmd, o);
}

/* A file's whole text, or NULL after printing why. */
static char *slurp(const char *path, size_t *len) { return (char *)cli_read_input("train", path, len); }

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

int train_opts_parse(train_opts *o, int argc, char **argv, char *resumed_from, size_t cap,
                     int (*lock)(const char *out, void *ctx), void *ctx) {
    cli_cmd cmd = train_cmd();
    cli_hit *hits;
    int n, rc = cli_scan(&cmd, o, argc, argv, &hits, &n, NULL);
    if (rc) return rc;
    /* --config, --out and --resume are needed before the rest */
    const char *config = NULL, *out = NULL;
    int resume = 0;
    for (int i = 0; i < n; i++) {
        const char *name = hits[i].opt->name;
        if (!strcmp(name, "config")) config = hits[i].value;
        if (!strcmp(name, "out")) out = hits[i].value;
        if (!strcmp(name, "resume")) resume = 1;
    }
    char err[600];
    char *cfg_text = NULL;
    size_t cfg_len = 0;
    train_opts probe;
    train_opts_defaults(&probe);
    if (config) {
        cfg_text = slurp(config, &cfg_len);
        if (!cfg_text) rc = 1;
        /* --out and --resume may come from the config file */
        else if (train_opts_apply_json(&probe, config, cfg_text, cfg_len, err, sizeof err)) {
            fprintf(stderr, "handgrad train: %s\n", err);
            rc = CLI_USAGE;
        } else {
            resume |= probe.resume;
        }
    }
    resumed_from[0] = 0;
    if (!out) out = probe.out;
    if (!rc && resume && out && lock) rc = lock(out, ctx);
    if (!rc && resume && out) rc = apply_resume(o, out, resumed_from, cap);
    if (!rc && cfg_text && train_opts_apply_json(o, config, cfg_text, cfg_len, err, sizeof err)) {
        fprintf(stderr, "handgrad train: %s\n", err);
        rc = CLI_USAGE;
    }
    if (!rc) rc = cli_apply(&cmd, o, hits, n);
    train_opts_free(&probe);
    free(cfg_text);
    free(hits);
    return rc;
}
