/* Settings of `handgrad train`: its option table (cli_opts.h) describes every option once,
 * and drives the GNU long flags, --help, the JSON config file and the run.json a
 * checkpoint keeps.
 * Precedence, lowest first: defaults, run.json (with --resume), --config FILE, flags. */
#ifndef HG_CLI_TRAIN_OPTIONS_H
#define HG_CLI_TRAIN_OPTIONS_H

#include <stddef.h>
#include <stdint.h>

#include "cli_model.h"

typedef struct train_opts {
    /* run */
    const char *config, *out;
    int resume;
    /* model: a preset, explicit dims (0: unset), or weights to start from */
    cli_shape shape;
    double dropout; /* < 0: unset */
    const char *init_from, *init_from_hf;
    const char *lora;    /* "r=16,alpha=32,dropout=0.05,targets=q_proj,v_proj,..." (cmd_train.c) */
    const char *adapter; /* a PEFT LoRA folder to start the adapters from */
    const char *freeze;  /* globs of tensor names no optimizer trains */
    /* data */
    const char *train, *val, *tokenizer;
    int batch, ctx; /* ctx 0: the model's max_seq_len */
    int64_t total_batch_tokens; /* 0: batch * ctx (no accumulation) */
    int sequential;
    const char *rows;      /* "auto" (NULL), "windows", "padded" or "packed" (hg_loader_rows) */
    int pack;              /* --pack: --rows packed */
    int no_split;          /* padded rows: refuse a document longer than a row */
    int allow_data_change; /* resume on shards other than the checkpoint's, with a warning */
    /* optimisation */
    double lr, min_lr; /* min_lr < 0: lr / 10 */
    int64_t warmup_steps;
    const char *lr_schedule;
    double weight_decay, grad_clip, beta1, beta2;
    int64_t max_steps, max_tokens;
    int64_t seed;
    int threads;
    cli_device dev;    /* --device, --precision, --deterministic, --cuda-graphs */
    int max_nan_steps;
    double loss_band_z;   /* the loss band's width in spreads (train_band.h); 0: off */
    int max_band_steps;   /* stop after this many steps above the band in a row */
    int skip_outliers;    /* skip the update of a step whose loss is above the band */
    /* evaluation and sampling */
    int64_t eval_every; /* < 0: unset, 100 (and no warning without --val) */
    int eval_batches;
    int64_t sample_every;
    const char *prompt;
    int sample_tokens, top_k;
    double temperature, top_p;
    /* checkpoints and output */
    int64_t ckpt_every;
    int keep_last;
    int64_t print_every;
    double peak_gflops;
    cli_ints inject_nan;    /* testing aid: steps whose gradients are poisoned */
    /* data parallel (under mpirun or srun) */
    int zero;
    double bucket_mb, dist_timeout;
    cli_pool pool; /* the strings that came from JSON (run.json, --config) */
} train_opts;

void train_opts_defaults(train_opts *o);
void train_opts_free(train_opts *o);

/* Parses argv (argv[0] is the subcommand). Returns 0 and fills o; 1 or CLI_USAGE after
 * printing a one-line error; CLI_HELP after printing --help. With --resume, the newest checkpoint's
 * run.json in --out is applied first (resumed_from receives that folder, or "" when
 * there is none); then --config FILE; then the flags. lock, when given, is called with
 * --out before anything in it is read (it returns non-zero to stop: the folder's run
 * lock is held by another run). */
int train_opts_parse(train_opts *o, int argc, char **argv, char *resumed_from, size_t cap,
                     int (*lock)(const char *out, void *ctx), void *ctx);

/* Applies a JSON object of settings (a config file or run.json) to o. Returns 0, or 1
 * with a message naming `name` and the key in err. */
int train_opts_apply_json(train_opts *o, const char *name, const char *text, size_t len, char *err, size_t cap);
/* The settings a checkpoint keeps (run.json), as a malloc'd JSON object. */
char *train_opts_to_json(const train_opts *o);

#endif
