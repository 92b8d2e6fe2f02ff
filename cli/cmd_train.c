/* `handgrad train`: trains a model on token shards with a progress bar, a JSONL log, a
 * loss plot, evaluation, samples, and checkpoints that resume bit-exactly; Ctrl-C saves
 * and stops. Options: train_options.c; display and logs: train_log.c. */
#define _GNU_SOURCE
#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli_io.h"
#include "cli_model.h"
#include "cli_open.h"
#include "commands.h"
#include "core/timer.h"
#include "handgrad.h"
#include "train_band.h"
#include "train_data.h"
#include "train_log.h"
#include "train_options.h"

static char rank_tag[32]; /* " (rank r of N)" in errors when data parallel */

/* One line on stderr, written whole so that ranks' lines do not interleave; returns 1. */
__attribute__((format(printf, 1, 2))) static int err_line(const char *fmt, ...) {
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    train_log_clear_line(); /* not after the progress bar, on its line */
    fprintf(stderr, "handgrad train%s: %s\n", rank_tag, msg);
    return 1;
}
#define ERR(...) err_line(__VA_ARGS__)
/* A usage error (a flag missing or at odds with another): the same line, exit status 2. */
#define USAGE(...) (err_line(__VA_ARGS__), 2)

typedef struct trainer {
    train_opts o;
    char resumed_from[PATH_MAX]; /* the checkpoint folder this run continues, or "" */
    hg_config cfg;
    hg_model *m;                 /* the training model */
    hg_model *gen;               /* batch-1 inference model for samples, or NULL */
    int said_kernels;            /* the attention kernels were named (after the first step) */
    hg_tokenizer *tok;           /* or NULL: no samples */
    char tok_path[PATH_MAX + 64];
    char tok_dir[PATH_MAX + 64]; /* the folder the tokenizer came from */
    hg_hf_special special;       /* its folder's eos ids (generation_config.json, config.json) */
    hg_loader *train, *val;
    int B, T, accum;             /* micro-batch (B, T); accum micro-batches a step */
    /* data parallel: rank of ranks each run Bl = B / ranks of every micro-batch */
    hg_comm *comm;
    hg_dist *dist;
    int rank, ranks, Bl;
    int stop;                    /* a stop signal reached some rank (agreed every step) */
    int64_t max_steps, step;     /* step: steps done */
    int64_t saved_step;          /* step of the newest checkpoint written or loaded */
    uint64_t tokens;
    int32_t *x, *y;              /* (accum, B, T) each: a step's micro-batches */
    int32_t *pos;                /* (accum, B, T): their positions, with packed rows */
    int packed[2];               /* the train and val loaders' rows are packed */
    double *counts;              /* (accum) their targets other than -1 */
    float *logits;               /* (V) for sampling */
    float *host;                 /* (the largest parameter tensor's numel): a tensor read or
                                    written through hg_param_read/write, as on any device */
    hg_lr_schedule sched;
    hg_adamw adamw;
    double flops_per_step, peak_gflops, ema_seconds;
    int nan_streak;
    const char *skip_why;        /* why the last step's update was skipped */
    loss_band band;              /* the loss band and its excursions (train_band.h) */
    int64_t good_step;           /* the newest checkpoint written (or loaded) outside an excursion, or -1 */
    train_log log;
    int lock_fd;                 /* OUT/.lock held with flock for the run (rank 0), or -1 */
    char *data_json;             /* the training shards' record (train_data.h), kept in checkpoints */
    hg_lora lora;                /* --lora or --adapter, resolved (r 0: none) */
    char *freeze;                /* --freeze as handgrad's names, or NULL */
    char base[17];               /* a LoRA run: the hash of its frozen base (cli_base_hash) */
    const char *hf_class;        /* the class the base is stored as (NULL: the config's default) */
} trainer;

/* ---- signals ---- */

static volatile sig_atomic_t stop_signal;

static void on_signal(int sig) {
    static const char again[] = "\nhandgrad train: second interrupt, aborting now\n";
    static const char first[] = "\nhandgrad train: stopping after this step and saving a checkpoint "
                                "(Ctrl-C again to abort)\n";
    if (stop_signal) {
        if (write(2, again, sizeof again - 1) < 0) { /* nothing to do */ }
        signal(sig, SIG_DFL);
        raise(sig);
        return;
    }
    stop_signal = sig;
    if (write(2, first, sizeof first - 1) < 0) { /* nothing to do */ }
}

static void install_signals(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGXFSZ, SIG_IGN); /* a file size limit fails the write (EFBIG) instead of killing us */
}

/* ---- set-up ---- */

static int is_dir(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

/* The run folder can be created or written: it is a writable folder, or its nearest
 * existing parent is. */
static int check_out_dir(const char *out) {
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s", out);
    struct stat st;
    for (;;) {
        if (stat(p, &st) == 0) {
            if (!S_ISDIR(st.st_mode)) return ERR("--out %s: %s is not a folder", out, p);
            if (access(p, W_OK | X_OK) != 0) return ERR("--out %s: %s is not writable", out, p);
            return 0;
        }
        char *slash = strrchr(p, '/');
        if (!slash) snprintf(p, sizeof p, ".");
        else if (slash == p) p[1] = 0;
        else *slash = 0;
    }
}

/* One writer per run folder: an exclusive flock on OUT/.lock, held until the process
 * ends (the kernel drops it even on a crash). The file names the holder, so a second run
 * on the folder is refused at once with its pid and host. */
static int lock_out_dir(trainer *t, const char *out) {
    if (t->lock_fd >= 0) return 0;
    char path[PATH_MAX];
    if (snprintf(path, sizeof path, "%s/.lock", out) >= (int)sizeof path) return ERR("--out %s: the path is too long", out);
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return ERR("--out %s: cannot open the run lock %s: %s", out, path, strerror(errno));
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        int e = errno;
        char holder[200] = "";
        ssize_t n = pread(fd, holder, sizeof holder - 1, 0);
        holder[n > 0 ? n : 0] = 0;
        holder[strcspn(holder, "\n")] = 0;
        close(fd);
        if (e != EWOULDBLOCK) return ERR("--out %s: cannot lock %s: %s", out, path, strerror(e));
        return ERR("--out %s is in use by another run (%s); one run writes a folder at a time", out,
                   holder[0] ? holder : "holder unknown");
    }
    char host[128] = "unknown host", line[256];
    gethostname(host, sizeof host - 1);
    int len = snprintf(line, sizeof line, "pid %d on %s\n", (int)getpid(), host);
    if (ftruncate(fd, 0) != 0 || pwrite(fd, line, (size_t)len, 0) != len) {
        int e = errno;
        close(fd);
        return ERR("--out %s: cannot write the run lock %s: %s", out, path, strerror(e));
    }
    t->lock_fd = fd;
    return 0;
}

/* train_opts_parse's hook: a --resume locks an existing folder before reading it. */
static int lock_before_resume(const char *out, void *ctx) {
    trainer *t = ctx;
    return t->rank == 0 && is_dir(out) ? lock_out_dir(t, out) : 0;
}

static int mkdir_p(const char *dir) {
    char p[PATH_MAX];
    int e = cli_make_dirs(dir, p, sizeof p);
    if (!e) return 0;
    if (!strcmp(p, dir)) return ERR("--out %s: cannot create: %s", dir, strerror(e));
    return ERR("--out %s: cannot create %s: %s", dir, p, strerror(e));
}

/* The tokenizer: --tokenizer, else a Hugging Face folder's, else tokenizer/ beside the
 * training shards (what `handgrad prepare` and scripts/prepare_kjv.sh lay out). */
static int load_tokenizer(trainer *t) {
    const train_opts *o = &t->o;
    t->tok_path[0] = 0;
    if (o->tokenizer) snprintf(t->tok_path, sizeof t->tok_path, "%s", o->tokenizer);
    else if (o->init_from_hf) snprintf(t->tok_path, sizeof t->tok_path, "%s", o->init_from_hf);
    else if (t->resumed_from[0]) { /* the tokenizer files a checkpoint holds */
        snprintf(t->tok_path, sizeof t->tok_path, "%s/tokenizer.json", t->resumed_from);
        if (access(t->tok_path, R_OK) != 0) snprintf(t->tok_path, sizeof t->tok_path, "%s/vocab.json", t->resumed_from);
        if (access(t->tok_path, R_OK) != 0) t->tok_path[0] = 0;
    }
    if (!t->tok_path[0] && o->train) {
        const char *slash = strrchr(o->train, '/');
        int n = slash ? (int)(slash - o->train) : 1;
        snprintf(t->tok_path, sizeof t->tok_path, "%.*s/tokenizer", n, slash ? o->train : ".");
        if (!is_dir(t->tok_path)) t->tok_path[0] = 0;
    }
    if (!t->tok_path[0]) return 0;
    if (hg_tokenizer_load(&t->tok, t->tok_path) != HG_OK) return ERR("--tokenizer: %s", hg_last_error());
    cli_folder_of(t->tok_path, t->tok_dir, sizeof t->tok_dir);
    if (hg_hf_special_ids(t->tok_dir, &t->special) != HG_OK) return ERR("--tokenizer: %s", hg_last_error());
    return 0;
}

/* Every shard of a glob whose header records a vocabulary size was written for the
 * tokenizer's ids (V_tok, when known), and none for more ids than the model has (V). */
static int check_shards(const char *flag, const char *pattern, int V_tok, int V) {
    glob_t g;
    if (glob(pattern, 0, NULL, &g) != 0) return ERR("%s '%s': no file matches", flag, pattern);
    int rc = 0;
    for (size_t i = 0; i < g.gl_pathc && !rc; i++) {
        hg_shard_info info;
        if (hg_shard_inspect(g.gl_pathv[i], HG_SHARD_AUTO, &info) != HG_OK) rc = ERR("%s: %s", flag, hg_last_error());
        else if (info.vocab_size && V_tok && info.vocab_size != V_tok)
            rc = ERR("%s: %s was written for a vocabulary of %d ids, but the tokenizer has %d", flag, g.gl_pathv[i],
                     info.vocab_size, V_tok);
        else if (info.vocab_size > V)
            rc = ERR("%s: %s was written for a vocabulary of %d ids, but the model has vocab_size %d", flag,
                     g.gl_pathv[i], info.vocab_size, V);
    }
    globfree(&g);
    return rc;
}

/* V recorded in the first shard matching a glob, or 0. */
static int shard_vocab(const char *pattern) {
    glob_t g;
    hg_shard_info info = {0};
    if (glob(pattern, 0, NULL, &g) != 0) return 0;
    if (hg_shard_inspect(g.gl_pathv[0], HG_SHARD_AUTO, &info) != HG_OK) info.vocab_size = 0;
    globfree(&g);
    return info.vocab_size;
}

/* Compares explicit shape flags with a config loaded from a checkpoint. */
static int check_dims(const train_opts *o, const hg_config *c, const char *from) {
    const int set[] = {o->shape.n_layer, o->shape.n_head, o->shape.d_model, o->shape.d_ff, o->shape.max_seq_len, o->shape.vocab_size};
    const int have[] = {c->n_layer, c->n_head, c->d_model, c->d_ff ? c->d_ff : 4 * c->d_model, c->max_seq_len,
                        c->vocab_size};
    static const char *const names[] = {"n-layer", "n-head", "d-model", "d-ff", "max-seq-len", "vocab-size"};
    for (int i = 0; i < 6; i++)
        if (set[i] && set[i] != have[i])
            return ERR("--%s %d differs from %s, which has %d", names[i], set[i], from, have[i]);
    if (o->shape.model) {
        hg_config p;
        if (hg_config_preset(o->shape.model, &p) != HG_OK) return ERR("--model: %s", hg_last_error());
        if (p.n_layer != c->n_layer || p.n_head != c->n_head || p.d_model != c->d_model)
            return ERR("--model %s differs from %s (n_layer %d, n_head %d, d_model %d)", o->shape.model, from, c->n_layer,
                       c->n_head, c->d_model);
    }
    if (o->shape.arch) { /* each field it names must already hold that value */
        hg_config want = *c;
        if (cli_apply_arch("train", o->shape.arch, &want)) return 1;
        const char *name;
        char a[64], b[64];
        for (int i = 0; (name = hg_config_field_name(i, NULL)); i++) {
            hg_config_get(&want, name, a, sizeof a);
            hg_config_get(c, name, b, sizeof b);
            if (strcmp(a, b)) return ERR("--arch %s=%s differs from %s, which has %s", name, a, from, b);
        }
    }
    return 0;
}

/* ---- adapters and frozen tensors ---- */

/* --lora or --adapter into t->lora, --freeze into t->freeze, by the module names of the
 * class the base is stored as (the --init-from-hf folder's, else the config's default). */
static int resolve_adapters(trainer *t) {
    const train_opts *o = &t->o;
    const char **cls = &t->hf_class;
    char p[PATH_MAX + 16];
    if ((o->lora || o->adapter) && !o->init_from && !o->init_from_hf)
        return USAGE("%s adapts a trained model: give it with --init-from-hf DIR or --init-from PATH",
                     o->lora ? "--lora" : "--adapter");
    if (o->init_from_hf) {
        snprintf(p, sizeof p, "%s/config.json", o->init_from_hf);
        if (hg_hf_config_class(p, cls) != HG_OK) return ERR("--init-from-hf: %s", hg_last_error());
    }
    return cli_adapt("train", o->lora, o->adapter, o->freeze, &t->cfg, *cls, &t->lora, &t->freeze);
}

/* The base a LoRA run trains on, as an absolute path: named in its checkpoints' base.json
 * and adapter_config.json, which export and generate read from anywhere. */
static const char *base_path(const train_opts *o, char *buf, size_t cap) {
    const char *p = o->init_from_hf ? o->init_from_hf : o->init_from;
    char *abs = p ? realpath(p, NULL) : NULL;
    snprintf(buf, cap, "%s", abs ? abs : p ? p : "");
    free(abs);
    return buf[0] ? buf : NULL;
}

/* A LoRA checkpoint's adapters, on the base the run loaded: refused when base.json names
 * other weights than those loaded (another folder, or the same folder changed since). */
static int load_lora_checkpoint(trainer *t) {
    char base[PATH_MAX], hash[17], p[PATH_MAX + 16];
    if (cli_base_json("train", t->resumed_from, base, sizeof base, hash)) return 1;
    if (strcmp(hash, t->base))
        return ERR("%s/base.json: the adapters were trained on %s as it was (hash %s), but the base loaded now holds "
                   "other weights (hash %s): resume on the base the run began with", t->resumed_from, base, hash, t->base);
    snprintf(p, sizeof p, "%s/adapter", t->resumed_from);
    /* the run's settings are run.json's: a folder whose config says otherwise (edited, or
     * damaged) is refused rather than read as if it agreed */
    hg_peft_config pc;
    if (hg_peft_config_load(p, &pc) != HG_OK) return ERR("%s", hg_last_error());
    const hg_lora *run = &t->lora;
    hg_lora *got = &pc.lora;
    if (hg_hf_lora_targets(&t->cfg, t->hf_class, pc.targets, got) != HG_OK)
        return ERR("%s/adapter_config.json: %s", p, hg_last_error());
    int same = got->r == run->r && got->alpha == run->alpha && got->dropout == run->dropout && got->rslora == run->rslora;
    for (int g = 0; g < HG_LORA_GROUPS; g++)
        same &= got->targets[g] == run->targets[g] && (got->targets[g] == 0 || got->split[g] == run->split[g]);
    if (!same)
        return ERR("%s/adapter_config.json: r %d, lora_alpha %g, lora_dropout %g, use_rslora %d and target_modules '%s' "
                   "are not the run's (r %d, alpha %g, dropout %g, rslora %d, its run.json): resume with the settings "
                   "the adapters were trained with", p, got->r, (double)got->alpha, (double)got->dropout, got->rslora,
                   pc.targets, run->r, (double)run->alpha, (double)run->dropout, run->rslora);
    return hg_peft_load(t->m, p) != HG_OK ? ERR("%s", hg_last_error()) : 0;
}

/* A LoRA run's checkpoint: its adapters as a PEFT folder (adapter/) and base.json naming
 * the base, in place of the model's weights. */
static hg_status save_lora(trainer *t, const char *tmp) {
    char p[PATH_MAX + 32], json[PATH_MAX + 128], buf[PATH_MAX];
    const char *base = base_path(&t->o, buf, sizeof buf);
    snprintf(p, sizeof p, "%s/adapter", tmp);
    hg_status s = hg_peft_save(t->m, p, base);
    if (s != HG_OK) return s;
    cJSON *o = cJSON_CreateObject();
    if (base) cJSON_AddStringToObject(o, "path", base);
    cJSON_AddStringToObject(o, "hash", t->base);
    char *text = cJSON_Print(o);
    cJSON_Delete(o);
    if (!text) return HG_ERR_NOMEM;
    snprintf(json, sizeof json, "%s/base.json", tmp);
    s = hg_write_file_atomic(json, text, strlen(text));
    free(text);
    return s;
}

/* The model's config: from the checkpoint being resumed or started from, or from the
 * preset and explicit dims. A LoRA run's checkpoint holds its adapters alone: the config
 * and weights come from where the run began. */
static int resolve_config(trainer *t, char *weights, size_t cap) {
    const train_opts *o = &t->o;
    hg_config *c = &t->cfg;
    weights[0] = 0;
    /* a checkpoint to resume from supersedes where the run started (run.json keeps that,
     * so that --resume before the first checkpoint starts the same way) */
    if (!t->resumed_from[0] && o->init_from && o->init_from_hf)
        return USAGE("use one of --init-from and --init-from-hf");
    char ckpt[PATH_MAX];
    const int resume_weights = t->resumed_from[0] && !cli_lora_checkpoint(t->resumed_from, ckpt, sizeof ckpt);
    if (resume_weights || o->init_from) {
        const char *src = resume_weights ? t->resumed_from : o->init_from;
        if (hg_checkpoint_resolve(src, weights, cap) != HG_OK || hg_checkpoint_config(weights, c) != HG_OK)
            return ERR("%s%s", resume_weights ? "" : "--init-from: ", hg_last_error());
        if (check_dims(o, c, weights)) return 1;
    } else if (o->init_from_hf) {
        char p[PATH_MAX];
        snprintf(p, sizeof p, "%s/config.json", o->init_from_hf);
        if (hg_hf_config_load(p, c) != HG_OK) return ERR("--init-from-hf: %s", hg_last_error());
        if (check_dims(o, c, p)) return 1;
    } else {
        if (!o->shape.model && (!o->shape.n_layer || !o->shape.n_head || !o->shape.d_model))
            return USAGE("no model: give --model NAME, or --n-layer, --n-head and --d-model, or --init-from CKPT");
        hg_config bare = {.max_seq_len = o->ctx ? o->ctx : 256};
        if (cli_shape_config("train", &o->shape, &bare, c)) return 2;
        /* a preset is an architecture: V comes from the data, and a longer --ctx widens it */
        if (!o->shape.max_seq_len && o->ctx > c->max_seq_len) c->max_seq_len = o->ctx;
        if (o->shape.vocab_size) c->vocab_size = o->shape.vocab_size;
        else if (t->tok) c->vocab_size = hg_tokenizer_vocab_size(t->tok);
        else c->vocab_size = shard_vocab(o->train);
        if (!c->vocab_size) return ERR("no vocabulary size: give --tokenizer or --vocab-size");
    }
    if (o->dropout >= 0) c->dropout = (float)o->dropout;
    /* a model may have more embedding rows than its tokenizer has ids (Qwen2.5 pads
     * its vocabulary), never fewer */
    if (t->tok && hg_tokenizer_vocab_size(t->tok) > c->vocab_size)
        return ERR("tokenizer %s has %d ids but the model has vocab_size %d", t->tok_path,
                   hg_tokenizer_vocab_size(t->tok), c->vocab_size);
    if (hg_config_validate(c) != HG_OK) return ERR("model: %s", hg_last_error());
    return 0;
}

/* --rows (or --pack): as given, or for auto packed when the first shard of pattern has
 * token flags (padded on CUDA, whose kernels for packed documents have not run on a GPU
 * yet and are refused unless HANDGRAD_CUDA_UNTESTED=1). */
static hg_loader_rows rows_of(const train_opts *o, const char *pattern) {
    if (o->pack || (o->rows && !strcmp(o->rows, "packed"))) return HG_ROWS_PACKED;
    if (o->rows && strcmp(o->rows, "auto")) return strcmp(o->rows, "padded") ? HG_ROWS_WINDOWS : HG_ROWS_PADDED;
    glob_t g;
    hg_shard_info info = {0};
    if (glob(pattern, 0, NULL, &g) != 0) return HG_ROWS_WINDOWS; /* the loader says what is wrong */
    if (g.gl_pathc > 0 && hg_shard_inspect(g.gl_pathv[0], HG_SHARD_AUTO, &info) != HG_OK) info.has_flags = 0;
    globfree(&g);
    if (!info.has_flags) return HG_ROWS_WINDOWS;
    return o->dev.device && !strcmp(o->dev.device, "cuda") ? HG_ROWS_PADDED : HG_ROWS_PACKED;
}

/* packed: whether its rows are packed, and so each batch's positions go to the model */
static int open_loader(trainer *t, hg_loader **ld, int *packed, const char *flag, const char *pattern, int shuffle) {
    if (t->o.pack && t->o.rows && strcmp(t->o.rows, "auto") && strcmp(t->o.rows, "packed"))
        return ERR("--pack: it means --rows packed, and --rows says %s", t->o.rows);
    if (check_shards(flag, pattern, t->tok ? hg_tokenizer_vocab_size(t->tok) : 0, t->cfg.vocab_size)) return 1;
    hg_loader_options lo = hg_loader_options_default();
    lo.rows = rows_of(&t->o, pattern);
    *packed = lo.rows == HG_ROWS_PACKED;
    lo.no_split = t->o.no_split;
    lo.batch = t->Bl;
    lo.rank = t->rank;
    lo.world_size = t->ranks;
    lo.seq_len = t->T;
    lo.shuffle = shuffle;
    lo.seed = (uint64_t)t->o.seed;
    lo.vocab_size = t->cfg.vocab_size;
    if (hg_loader_open_glob(ld, pattern, &lo) != HG_OK) return ERR("%s: %s", flag, hg_last_error());
    return 0;
}

/* The record of the training shards, against the checkpoint's when resuming: other
 * files (or the same names with other sizes or heads) would put the data position on
 * other windows. A checkpoint from before data.json has nothing to compare. */
static int check_data(trainer *t) {
    char why[600], was_path[PATH_MAX + 16];
    if (!(t->data_json = train_data_json(t->o.train, why, sizeof why))) return ERR("--train: %s", why);
    snprintf(was_path, sizeof was_path, "%s/data.json", t->resumed_from);
    if (!t->resumed_from[0] || access(was_path, F_OK) != 0) return 0;
    size_t len;
    char *was = (char *)cli_read_input("train", was_path, &len);
    if (!was) return 1;
    int differ = train_data_differ(was, t->data_json, why, sizeof why);
    free(was);
    if (!differ) return 0;
    if (!t->o.allow_data_change)
        return ERR("--train %s differs from the data recorded in %s: %s. The data position would land on other "
                   "windows; pass --allow-data-change to go on anyway", t->o.train, was_path, why);
    if (t->rank == 0)
        fprintf(stderr, "handgrad train: warning: --train %s differs from the data recorded in %s: %s "
                "(--allow-data-change)\n", t->o.train, was_path, why);
    return 0;
}

/* The loss band where the checkpoint left it (band.json; a checkpoint from before
 * 2026-11-24 has none, and the band starts empty). */
static int load_band(trainer *t) {
    char p[PATH_MAX + 16], err[300];
    snprintf(p, sizeof p, "%s/band.json", t->resumed_from);
    if (access(p, F_OK) != 0) return 0;
    size_t len;
    char *text = (char *)cli_read_input("train", p, &len);
    if (!text) return 1;
    int bad = band_from_json(&t->band, &t->good_step, text, len, err, sizeof err);
    free(text);
    return bad ? ERR("%s: %s", p, err) : 0;
}

/* The run's settings in OUT/run.json from the start, so that --resume works before the
 * first checkpoint (each checkpoint keeps its own copy). */
static int write_run_json(trainer *t, const char *p) {
    char *run = train_opts_to_json(&t->o);
    if (!run) return ERR("out of memory");
    hg_status s = hg_write_file_atomic(p, run, strlen(run));
    free(run);
    return s == HG_OK ? 0 : ERR("%s", hg_last_error());
}

/* What a CUDA model cannot do yet, refused before anything is read or built (and the
 * note on bf16 where this CPU runs it slowly): more than one rank (hg_dist_create refuses them); ZeRO-1, whose one-rank
 * collectives are host copies of the gradient and moment slices. */
static int check_device(const trainer *t) {
    const train_opts *o = &t->o;
    if (cli_device_check("train", &o->dev)) return 2;
    if (strcmp(o->dev.device, "cuda")) return 0;
    if (t->ranks > 1)
        return USAGE("--device cuda: data parallelism (%d ranks) is refused for CUDA models until its NCCL path has run "
                     "on GPUs (docs/cuda.md); run one rank", t->ranks);
    if (o->zero)
        return USAGE("--zero 1: ZeRO-1 is not wired for CUDA models yet (docs/cuda.md); use --zero 0 with --device cuda");
    return 0;
}

/* Batch geometry, step count and the schedule. */
static int plan(trainer *t) {
    const train_opts *o = &t->o;
    t->B = o->batch;
    if (t->B % t->ranks) return ERR("--batch %d is not divisible by the %d ranks: use a multiple of %d", t->B, t->ranks, t->ranks);
    t->Bl = t->B / t->ranks;
    t->T = o->ctx ? o->ctx : t->cfg.max_seq_len;
    if (t->T > t->cfg.max_seq_len) return ERR("--ctx %d exceeds the model's max_seq_len %d", t->T, t->cfg.max_seq_len);
    int64_t micro = (int64_t)t->B * t->T;
    int64_t total = o->total_batch_tokens ? o->total_batch_tokens : micro;
    if (total % micro) return ERR("--total-batch-tokens %lld is not a multiple of batch*ctx = %lld", (long long)total, (long long)micro);
    if (total / micro > (1 << 20)) return ERR("--total-batch-tokens %lld needs too many micro-batches", (long long)total);
    t->accum = (int)(total / micro);
    if (o->max_steps && o->max_tokens)
        return ERR("both --max-steps and --max-tokens are set (one may come from --config or run.json); keep one");
    if (!o->max_steps && !o->max_tokens) return ERR("give --max-steps N or --max-tokens N");
    t->max_steps = o->max_steps ? o->max_steps : (o->max_tokens + total - 1) / total;
    t->sched = (hg_lr_schedule){
        .kind = !strcmp(o->lr_schedule, "linear") ? HG_LR_LINEAR : !strcmp(o->lr_schedule, "constant") ? HG_LR_CONSTANT : HG_LR_COSINE,
        .lr = (float)o->lr, .min_lr = (float)(o->min_lr >= 0 ? o->min_lr : o->lr / 10),
        .warmup_steps = o->warmup_steps, .total_steps = t->max_steps};
    t->adamw = hg_adamw_default();
    t->adamw.weight_decay = (float)o->weight_decay;
    t->adamw.grad_clip = (float)o->grad_clip;
    t->adamw.beta1 = (float)o->beta1;
    t->adamw.beta2 = (float)o->beta2;
    t->flops_per_step = hg_train_flops(&t->cfg, t->Bl, t->T) * t->accum; /* per rank, as the peak */
    return 0;
}

/* The options of the training model: one rank's micro-batch on --device. */
static hg_options model_options(const trainer *t) {
    const train_opts *o = &t->o;
    hg_options mo = hg_options_default();
    mo.batch = t->Bl;
    if (o->zero) mo.shards = t->ranks, mo.shard = t->rank;
    mo.seq_len = t->T;
    mo.threads = o->threads;
    mo.seed = (uint64_t)o->seed;
    cli_device_options(&o->dev, &mo);
    mo.lora = t->lora, mo.freeze = t->freeze;
    return mo;
}

static int create_models(trainer *t, const char *weights) {
    const train_opts *o = &t->o;
    hg_options mo = model_options(t);
    char why[1200];
    if (hg_model_create(&t->m, &t->cfg, &mo) != HG_OK) return ERR("%s", cli_model_why(&mo, "model", why, sizeof why));
    if (weights[0] && hg_model_load(t->m, weights) != HG_OK) return ERR("%s", hg_last_error());
    if (o->init_from_hf && !weights[0]) { /* a checkpoint's weights, when resuming, come first */
        hg_options ho = mo; /* read on the host, then copied to the model's device */
        ho.training = 0, ho.batch = 1, ho.seq_len = 1;
        ho.device = HG_DEVICE_CPU, ho.flags = 0;
        ho.precision = ho.base_precision; /* a base held in bf16 is never staged in fp32 */
        hg_model *hf;
        if (hg_model_load_hf(&hf, o->init_from_hf, &ho) != HG_OK) return ERR("--init-from-hf: %s", hg_last_error());
        hg_status s = hg_model_copy_params(t->m, hf);
        hg_model_free(hf);
        if (s != HG_OK) return ERR("--init-from-hf: %s", hg_last_error());
    }
    hg_dist_options dopt = hg_dist_options_default();
    dopt.zero = o->zero, dopt.global_batch = t->B, dopt.timeout_s = o->dist_timeout;
    dopt.bucket_bytes = (size_t)(o->bucket_mb * 1048576);
    char *run = train_opts_to_json(o);
    for (const char *c = run; c && *c; c++) dopt.config_hash = (dopt.config_hash ^ (uint8_t)*c) * 0x100000001b3ull;
    free(run);
    if (hg_dist_create(&t->dist, t->comm, t->m, &dopt) != HG_OK) return ERR("%s", hg_last_error());
    if (t->resumed_from[0]) {
        char p[PATH_MAX + 32];
        snprintf(p, sizeof p, "%s/optimizer.safetensors", t->resumed_from);
        hg_train_state s;
        if (hg_optimizer_load(t->m, p, &s) != HG_OK) return ERR("%s", hg_last_error());
        if (s.B != t->B || s.T != t->T || s.seed != (uint64_t)o->seed) /* any number of ranks */
            return ERR("%s: the run read batch %d, ctx %d, seed %llu on %d rank(s); this one has batch %d, ctx %d, "
                       "seed %llu: the data position would not carry over", p, s.B, s.T, (unsigned long long)s.seed,
                       s.world_size, t->B, t->T, (unsigned long long)o->seed);
        hg_loader_position pos = {s.epoch, s.batch};
        if (hg_loader_seek(t->train, pos) != HG_OK)
            return ERR("%s: its data position (loader_epoch %llu, loader_batch %llu) does not fit --train %s: %s", p,
                       (unsigned long long)s.epoch, (unsigned long long)s.batch, o->train, hg_last_error());
        t->step = t->saved_step = s.step;
        t->tokens = s.tokens;
    }
    if (o->sample_every && t->tok && t->rank == 0) {
        hg_options go = mo;
        go.training = 0, go.batch = 1, go.seq_len = t->cfg.max_seq_len;
        if (hg_model_create(&t->gen, &t->cfg, &go) != HG_OK)
            return ERR("%s", cli_model_why(&go, "sampling model", why, sizeof why));
    }
    size_t n = (size_t)t->Bl * t->T, largest = 0;
    for (int i = 0; i < hg_param_count(t->m); i++) {
        hg_param_info p;
        hg_param_at(t->m, i, &p);
        largest = (size_t)p.numel > largest ? (size_t)p.numel : largest;
    }
    t->x = malloc(sizeof *t->x * n * (size_t)t->accum); /* a step's micro-batches */
    t->y = malloc(sizeof *t->y * n * (size_t)t->accum);
    t->pos = malloc(sizeof *t->pos * n * (size_t)t->accum);
    t->counts = malloc(sizeof *t->counts * (size_t)t->accum);
    t->logits = malloc(sizeof *t->logits * (size_t)t->cfg.vocab_size);
    t->host = malloc(sizeof *t->host * largest);
    if (!t->x || !t->y || !t->pos || !t->counts || !t->logits || !t->host) return ERR("out of memory");
    if (t->lora.r > 0) { /* the adapters: the checkpoint's, --adapter's, or new */
        char ckpt[PATH_MAX];
        if (cli_base_hash("train", t->m, t->base)) return 1;
        if (t->resumed_from[0] && cli_lora_checkpoint(t->resumed_from, ckpt, sizeof ckpt) ? load_lora_checkpoint(t)
            : o->adapter && hg_peft_load(t->m, o->adapter) != HG_OK ? ERR("--adapter: %s", hg_last_error()) : 0)
            return 1;
    }
    return 0;
}

/* ---- the step ---- */

static int inject_nan_at(const cli_ints *list, int64_t step) {
    for (int i = 0; i < list->n; i++)
        if (list->v[i] == step) return 1;
    return 0;
}

/* --inject-nan: the first gradient of parameter 0 becomes NaN, through host memory (a
 * CUDA model's gradients are GPU memory). */
static hg_status poison_grad(trainer *t) {
    hg_status s = hg_param_read(t->m, 0, HG_PARAM_GRAD, t->host);
    if (s == HG_OK) t->host[0] = NAN, s = hg_param_write(t->m, 0, HG_PARAM_GRAD, t->host);
    return s;
}

/* One optimizer step over accum micro-batches. A non-finite loss or gradient norm skips
 * the update (the data is still consumed). A data-parallel trainer all-reduces the
 * gradients and the loss where marked. */
static hg_status train_step(trainer *t, step_record *r) {
    hg_model *m = t->m;
    double t0 = hg_now(), loss = 0;
    memset(r, 0, sizeof *r);
    r->lr = hg_lr_at(&t->sched, t->step);
    hg_status s = hg_zero_grad(m);
    /* The loss is the mean over the step's targets, on every rank and micro-batch
     * together (as transformers divides by the step's count of labels other than
     * -100): micro-batch k of n_k targets has weight n_k ranks / N, N over all ranks.
     * Without a loss mask every n_k is B T, and the weight 1/accum. */
    const size_t n = (size_t)t->Bl * t->T;
    double targets = 0;
    for (int k = 0; k < t->accum && s == HG_OK; k++) {
        s = hg_loader_next_rows(t->train, t->x + k * n, t->y + k * n, t->pos + k * n);
        t->counts[k] = 0;
        for (size_t i = 0; s == HG_OK && i < n; i++) t->counts[k] += t->y[k * n + i] >= 0;
        targets += t->counts[k];
    }
    if (s == HG_OK && t->ranks > 1) s = hg_dist_sum(t->dist, &targets, 1);
    for (int k = 0; k < t->accum && s == HG_OK; k++) {
        float l = 0.0f, w = targets > 0 ? (float)(t->counts[k] * t->ranks / targets) : 0.0f;
        if (t->packed[0]) s = hg_set_positions(m, t->pos + k * n, t->Bl, t->T);
        if (s == HG_OK) s = hg_dist_forward_backward(t->dist, t->x + k * n, t->y + k * n, t->Bl, t->T, w, k == t->accum - 1, &l);
        loss += (double)l * t->counts[k];
    }
    if (s == HG_OK && inject_nan_at(&t->o.inject_nan, t->step + 1)) s = poison_grad(t);
    if (s != HG_OK) return s;
    /* the mean loss over ranks; stop together, on a signal or a failed log write */
    double sums[2] = {loss, stop_signal != 0 || t->log.write_errno != 0};
    if ((s = hg_dist_sum(t->dist, sums, 2)) != HG_OK) return s;
    t->stop = sums[1] > 0;
    t->tokens += (uint64_t)t->accum * t->B * t->T;
    r->loss = targets > 0 ? sums[0] / targets : 0.0;
    r->grad_norm = NAN;
    int nonfinite = !isfinite(r->loss);
    r->skipped = nonfinite || (t->o.skip_outliers && band_outside(&t->band, r->loss));
    t->skip_why = nonfinite ? "non-finite loss" : "loss out of its band";
    if (!r->skipped) {
        hg_adamw a = t->adamw;
        a.lr = (float)r->lr;
        float gn = NAN;
        s = hg_dist_optimizer_step(t->dist, &a, &gn);
        r->grad_norm = gn;
        if (s != HG_OK && isfinite(gn)) return s;
        r->skipped = nonfinite = s != HG_OK;
        t->skip_why = "non-finite gradient norm";
    } else if ((s = hg_dist_drop_step(t->dist)) != HG_OK) {
        return s;
    }
    t->step++;
    t->nan_streak = nonfinite ? t->nan_streak + 1 : 0;
    r->step = t->step;
    r->max_steps = t->max_steps;
    r->tokens = t->tokens;
    r->max_tokens = (uint64_t)t->o.max_tokens;
    r->seconds = hg_now() - t0;
    t->ema_seconds = t->ema_seconds > 0 ? 0.9 * t->ema_seconds + 0.1 * r->seconds : r->seconds;
    r->tokens_per_s = (double)t->accum * t->B * t->T / t->ema_seconds;
    r->peak_fraction = t->peak_gflops > 0 ? t->flops_per_step / t->ema_seconds / 1e9 / t->peak_gflops : 0;
    return HG_OK;
}

/* Mean loss over the first eval-batches batches of the val shards, dropout off. */
static hg_status evaluate(trainer *t, double *out) {
    uint64_t n = hg_loader_batches_per_epoch(t->val);
    if ((uint64_t)t->o.eval_batches < n) n = (uint64_t)t->o.eval_batches;
    double sums[2] = {0, 0}; /* the loss summed over the targets, and their count */
    hg_status s = hg_set_train_mode(t->m, 0);
    if (s == HG_OK) s = hg_loader_reset(t->val);
    for (uint64_t i = 0; i < n && s == HG_OK; i++) {
        float l = 0.0f;
        s = hg_loader_next_rows(t->val, t->x, t->y, t->pos);
        if (s == HG_OK) s = hg_set_positions(t->m, t->packed[1] ? t->pos : NULL, t->Bl, t->T);
        if (s == HG_OK) s = hg_forward(t->m, t->x, t->y, t->Bl, t->T, &l, NULL);
        double c = 0;
        for (size_t k = 0; k < (size_t)t->Bl * t->T; k++) c += t->y[k] >= 0;
        sums[0] += (double)l * c, sums[1] += c;
    }
    hg_set_train_mode(t->m, 1);
    if (s == HG_OK && t->packed[0] != t->packed[1]) s = hg_set_positions(t->m, NULL, 0, 0); /* set again each step */
    if (s == HG_OK) s = hg_dist_sum(t->dist, sums, 2); /* each rank read its own slice */
    *out = sums[1] > 0 ? sums[0] / sums[1] : 0.0;
    return s;
}

/* Appends n bytes to a growing string. */
static int append(char **s, size_t *len, size_t *cap, const void *p, size_t n) {
    if (*len + n + 1 > *cap) {
        size_t c = (*len + n + 1) * 2;
        char *g = realloc(*s, c);
        if (!g) return 1;
        *s = g, *cap = c;
    }
    memcpy(*s + *len, p, n);
    *len += n;
    (*s)[*len] = 0;
    return 0;
}

/* A sample from the prompt with the current weights, through the KV cache of a batch-1
 * inference model. The draw is seeded by (seed, step), so a resumed run samples alike. */
static hg_status sample(trainer *t, char **text) {
    const char *prompt = t->o.prompt ? t->o.prompt : "";
    int cache = t->cfg.max_seq_len;
    /* the prompt after the tokenizer's BOS, if it adds one; an empty prompt without
     * one starts from <|endoftext|> */
    const int32_t bos = hg_tokenizer_bos(t->tok), eot = hg_tokenizer_eot(t->tok);
    size_t plen = strlen(prompt), cap = hg_tokenizer_max_ids(t->tok, plen) + 1, n = 0, len = 0, tcap = 0;
    int32_t *ids = malloc(sizeof *ids * (cap + 1));
    char *out = NULL;
    uint8_t *piece = malloc(hg_tokenizer_max_token_bytes(t->tok) + 4);
    hg_decoder *dec = NULL;
    hg_status s = ids && piece ? HG_OK : HG_ERR_NOMEM;
    if (s == HG_OK && bos >= 0) ids[n++] = bos;
    size_t k = 0;
    if (s == HG_OK && plen) s = hg_tokenizer_encode(t->tok, prompt, plen, 0, ids + n, cap, &k);
    n += k;
    if (s == HG_OK && n == 0) ids[n++] = eot >= 0 ? eot : 0;
    int keep = cache - 1 < (int)n ? cache - 1 : (int)n; /* a long prompt keeps its end */
    if (s == HG_OK) s = hg_model_copy_params(t->gen, t->m);
    if (s == HG_OK) s = hg_kv_forward(t->gen, ids + n - keep, keep, t->logits);
    if (s == HG_OK) s = hg_decoder_create(&dec, t->tok);
    if (s == HG_OK && append(&out, &len, &tcap, "", 0)) s = HG_ERR_NOMEM;
    hg_sampling sp = {(float)t->o.temperature, t->o.top_k, (float)t->o.top_p};
    uint64_t rng = (uint64_t)t->o.seed * 0x9E3779B97F4A7C15ull ^ (uint64_t)t->step;
    for (int i = 0; i < t->o.sample_tokens && s == HG_OK && hg_kv_length(t->gen) < cache; i++) {
        int32_t id;
        size_t nb;
        s = hg_sample(t->logits, hg_tokenizer_vocab_size(t->tok), &sp, &rng, &id); /* among the tokenizer's ids */
        int stop = id == eot;
        for (int e = 0; e < t->special.n_eos; e++) stop |= id == t->special.eos[e];
        if (s != HG_OK || stop) break;
        s = hg_decoder_push(dec, id, piece, hg_tokenizer_max_token_bytes(t->tok) + 4, &nb);
        if (s == HG_OK && append(&out, &len, &tcap, piece, nb)) s = HG_ERR_NOMEM;
        if (s == HG_OK && hg_kv_length(t->gen) < cache) s = hg_kv_forward(t->gen, &id, 1, t->logits);
    }
    size_t nb;
    if (s == HG_OK && hg_decoder_flush(dec, piece, 8, &nb) == HG_OK && append(&out, &len, &tcap, piece, nb)) s = HG_ERR_NOMEM;
    hg_kv_reset(t->gen);
    hg_decoder_free(dec);
    free(ids);
    free(piece);
    if (s != HG_OK) {
        free(out);
        return s;
    }
    *text = out;
    return HG_OK;
}

/* ---- checkpoints ---- */

/* Whether every parameter, and AdamW's moments where this rank holds them whole (not
 * under ZeRO-1), is finite: *finite. Each tensor is read into host (numel floats), as on
 * any device. */
static hg_status finite_state(const hg_model *m, float *host, int *finite) {
    static const hg_param_part parts[] = {HG_PARAM_DATA, HG_PARAM_ADAM_M, HG_PARAM_ADAM_V};
    *finite = 0;
    for (int i = 0; i < hg_param_count(m); i++) {
        hg_param_info p;
        hg_param_at(m, i, &p);
        if (p.frozen) continue; /* unchanged since it was loaded */
        for (int k = 0; k < (p.adam_m || p.adam_m_bf16 ? 3 : 1); k++) {
            hg_status s = hg_param_read(m, i, parts[k], host);
            if (s != HG_OK) return s;
            for (int64_t j = 0; j < p.numel; j++)
                if (!isfinite(host[j])) return HG_OK;
        }
    }
    *finite = 1;
    return HG_OK;
}

/* With other ranks: HG_ERR_IO on every rank when s failed on any (*others: not here). */
static hg_status agree(trainer *t, hg_status s, int *others) {
    double failed = s != HG_OK;
    hg_status c = hg_dist_sum(t->dist, &failed, 1);
    if (c != HG_OK) return c;
    if (s == HG_OK && failed > 0) *others = 1, s = HG_ERR_IO;
    return s;
}

/* Writes ckpt_<step>/ atomically, then prunes. Rank 0 writes; every rank contributes
 * its slice of the optimizer state. */
static int save_checkpoint(trainer *t) {
    int finite;
    if (finite_state(t->m, t->host, &finite) != HG_OK) {
        train_log_say(&t->log, "handgrad train: checkpoint at step %lld failed, reading the parameters: %s",
                      (long long)t->step, hg_last_error());
        return 1;
    }
    if (!finite) { /* the same on every rank */
        train_log_say(&t->log, "not writing a checkpoint at step %lld: parameters or moments hold NaN or Inf",
                      (long long)t->step);
        return 1;
    }
    int r0 = t->rank == 0;
    char tmp[PATH_MAX], p[PATH_MAX + 32];
    hg_train_state st = {.step = t->step, .tokens = t->tokens, .B = t->B, .T = t->T, .world_size = t->ranks,
                         .seed = (uint64_t)t->o.seed};
    hg_loader_position pos = hg_loader_tell(t->train);
    st.epoch = pos.epoch;
    st.batch = pos.batch;
    /* the band of a checkpoint from before an excursion names itself as the one to go back to */
    char *run = r0 ? train_opts_to_json(&t->o) : NULL;
    char *band = r0 ? band_to_json(&t->band, t->band.open_since ? t->good_step : t->step) : NULL;
    int nomem = r0 && !(run && band);
    hg_status s = !r0 ? HG_OK : !nomem ? hg_checkpoint_begin(t->o.out, t->step, tmp, sizeof tmp) : HG_ERR_NOMEM;
    int begun = r0 && s == HG_OK;
    if (r0 && s == HG_OK && t->lora.r > 0) s = save_lora(t, tmp);
    else if (r0 && s == HG_OK) snprintf(p, sizeof p, "%s/model.safetensors", tmp), s = hg_model_save(t->m, p);
    if (r0) snprintf(p, sizeof p, "%s/optimizer.safetensors", tmp);
    int others = 0;
    s = agree(t, s, &others);
    if (s == HG_OK) s = agree(t, hg_dist_optimizer_save(t->dist, &st, r0 ? p : NULL), &others);
    if (r0 && s == HG_OK) snprintf(p, sizeof p, "%s/run.json", tmp), s = hg_write_file_atomic(p, run, strlen(run));
    if (r0 && s == HG_OK)
        snprintf(p, sizeof p, "%s/data.json", tmp), s = hg_write_file_atomic(p, t->data_json, strlen(t->data_json));
    if (r0 && s == HG_OK) snprintf(p, sizeof p, "%s/band.json", tmp), s = hg_write_file_atomic(p, band, strlen(band));
    if (r0 && s == HG_OK && t->lora.r > 0) { /* the adapters are a PEFT folder; the base is elsewhere */
        s = t->tok ? hg_tokenizer_save_hf(t->tok, tmp) : HG_OK;
    } else if (r0 && s == HG_OK) { /* config.json and the tokenizer: a folder transformers loads */
        s = hg_hf_describe(t->m, t->tok, tmp);
        if (s == HG_ERR_UNSUPPORTED) s = t->tok ? hg_tokenizer_save_hf(t->tok, tmp) : HG_OK;
    }
    if (r0 && s == HG_OK && t->tok) s = hg_hf_copy_extras(t->tok_dir, tmp); /* generation_config.json, ... */
    if (r0 && s == HG_OK) s = hg_checkpoint_commit(t->o.out, t->step, tmp);
    s = agree(t, s, &others);
    free(run);
    free(band);
    if (s != HG_OK) {
        char why[1100];
        snprintf(why, sizeof why, "%s", others ? "another rank failed (its message says why)"
                                        : nomem ? "out of memory" : hg_last_error());
        if (begun) hg_checkpoint_abort(tmp);
        train_log_say(&t->log, "handgrad train: checkpoint at step %lld failed, %s: %s", (long long)t->step,
                      t->saved_step > 0 ? "the previous ones are intact" : "and there is no earlier one", why);
        return 1;
    }
    t->saved_step = t->step;
    if (!t->band.open_since) t->good_step = t->step;
    /* during an excursion nothing is pruned: the checkpoint from before it stays */
    if (r0 && t->o.keep_last && !t->band.open_since && hg_checkpoint_prune(t->o.out, t->o.keep_last) != HG_OK)
        train_log_say(&t->log, "warning: pruning old checkpoints: %s", hg_last_error());
    return 0;
}

/* ---- the run ---- */

static int due(int64_t every, int64_t step, int64_t last) { return step == last || (every > 0 && step % every == 0); }

static int run(trainer *t) {
    const train_opts *o = &t->o;
    if (t->step >= t->max_steps) {
        train_log_say(&t->log, "already at step %lld of %lld; nothing to train (raise --max-steps to go on)",
                      (long long)t->step, (long long)t->max_steps);
    }
    while (t->step < t->max_steps && !t->stop) {
        step_record r;
        if (train_step(t, &r) != HG_OK) return ERR("step %lld: %s", (long long)t->step + 1, hg_last_error());
        if (!t->said_kernels && *hg_model_attention_kernels(t->m)) /* once, after the first step (CUDA) */
            train_log_say(&t->log, "attention: %s", hg_model_attention_kernels(t->m)), t->said_kernels = 1;
        train_log_step(&t->log, &r);
        int moved = band_add(&t->band, t->step, t->nan_streak ? NAN : r.loss); /* a NaN gradient counts as outside */
        if (moved > 0 && !t->nan_streak) { /* (a non-finite step says so below); an outside loss left the band as it was */
            double mean, top = band_top(&t->band, &mean);
            train_log_say(&t->log, "step %lld: loss %.4g left its band (mean %.4g, top %.4g); checkpoints are kept until "
                          "it is back", (long long)t->step, r.loss, mean, top);
        }
        if (moved < 0)
            train_log_say(&t->log, "step %lld: loss back in its band for %d steps", (long long)t->step, BAND_CLOSE);
        int nan_stop = t->nan_streak >= o->max_nan_steps;
        if (nan_stop || (o->loss_band_z > 0 && t->band.outside_streak >= o->max_band_steps)) {
            char back[PATH_MAX + 64] = "none was written";
            if (t->good_step >= 0) snprintf(back, sizeof back, "%s/ckpt_%08lld", o->out, (long long)t->good_step);
            train_log_say(&t->log, "handgrad train: stopping: %d steps in a row had %s (last at step %lld); the loss "
                          "left its band at step %lld. Newest checkpoint from before that: %s. Try a lower --lr or "
                          "--grad-clip", nan_stop ? t->nan_streak : t->band.outside_streak,
                          nan_stop ? "a non-finite loss or gradient norm" : "a loss out of its band", (long long)t->step,
                          (long long)t->band.open_since, back);
            train_log_plot(&t->log, 1);
            return 1;
        }
        if (r.skipped)
            train_log_say(&t->log, "step %lld: %s, update skipped (%d in a row)", (long long)t->step, t->skip_why,
                          t->nan_streak ? t->nan_streak : t->band.outside_streak);
        if (t->val && due(o->eval_every < 0 ? 100 : o->eval_every, t->step, t->max_steps)) {
            double vl; /* before a stop too: a resume starts after this step and would never run it */
            if (evaluate(t, &vl) != HG_OK) return ERR("evaluation: %s", hg_last_error());
            train_log_eval(&t->log, t->step, vl);
        }
        if (t->stop) break;
        if (t->gen && due(o->sample_every, t->step, t->max_steps)) {
            char *text;
            hg_status s = sample(t, &text);
            if (s != HG_OK) return ERR("sampling: %s", s == HG_ERR_NOMEM ? "out of memory" : hg_last_error());
            train_log_sample(&t->log, t->step, o->prompt ? o->prompt : "", text);
            free(text);
        }
        if (due(o->ckpt_every, t->step, t->max_steps) && save_checkpoint(t)) return 1;
        train_log_plot(&t->log, 0);
    }
    train_log_plot(&t->log, 1);
    if (t->stop && t->log.write_errno) { /* a checkpoint may still fit where the log did not */
        int lost = t->step > t->saved_step && save_checkpoint(t);
        return ERR("stopped at step %lld: %s/train.jsonl could not be written (%s); %s", (long long)t->step, o->out,
                   strerror(t->log.write_errno), lost ? "the checkpoint failed too (see above)" : "checkpoint saved");
    }
    if (t->stop) { /* exit status 128 + the signal, as a shell reports it: 130 after Ctrl-C */
        const char *sig = stop_signal == SIGINT ? "SIGINT" : stop_signal == SIGTERM ? "SIGTERM" : "a signal to another rank";
        if (t->step > t->saved_step && save_checkpoint(t)) return 1;
        if (t->step == 0) train_log_say(&t->log, "stopped by %s before the first step", sig);
        else
            train_log_say(&t->log, "stopped by %s at step %lld; checkpoint %s/ckpt_%08lld. Continue with: handgrad "
                          "train --resume --out %s", sig, (long long)t->step, o->out, (long long)t->saved_step, o->out);
        return 128 + (stop_signal ? stop_signal : SIGINT);
    } else {
        train_log_say(&t->log, "done: %lld steps, %llu tokens. Log %s/train.jsonl, loss plot %s/loss.svg, checkpoint %s/ckpt_%08lld/",
                      (long long)t->step, (unsigned long long)t->tokens, o->out, o->out, o->out, (long long)t->saved_step);
    }
    return 0;
}

static void trainer_free(trainer *t) {
    train_log_close(&t->log);
    if (t->lock_fd >= 0) close(t->lock_fd);
    hg_dist_free(t->dist);
    hg_model_free(t->m);
    hg_model_free(t->gen);
    hg_tokenizer_free(t->tok);
    hg_loader_close(t->train);
    hg_loader_close(t->val);
    free(t->x), free(t->y), free(t->pos), free(t->counts), free(t->logits), free(t->host), free(t->data_json), free(t->freeze);
    train_opts_free(&t->o);
    hg_comm_close(t->comm);
}

static int setup(trainer *t, int argc, char **argv) {
    train_opts *o = &t->o;
    /* MPI under mpirun or srun, else one rank; only rank 0 prints and writes files */
    if (hg_comm_open(&t->comm, HG_COMM_AUTO) != HG_OK) return ERR("%s", hg_last_error());
    t->rank = hg_comm_rank(t->comm), t->ranks = hg_comm_size(t->comm);
    if (t->ranks > 1) snprintf(rank_tag, sizeof rank_tag, " (rank %d of %d)", t->rank, t->ranks);
    if (t->rank && !freopen("/dev/null", "w", stdout)) return ERR("cannot silence stdout: %s", strerror(errno));
    t->log.off = t->rank != 0;
    int rc = train_opts_parse(o, argc, argv, t->resumed_from, sizeof t->resumed_from, lock_before_resume, t);
    if (rc) return rc; /* 1: a file or the run lock; CLI_USAGE; CLI_HELP */
    if ((rc = check_device(t))) return rc;
    if (!o->out) return USAGE("give the run folder with --out DIR");
    if (!o->train) return USAGE("give the training shards with --train GLOB");
    glob_t g; /* before anything is derived from the shards (their vocabulary, say) */
    int none = glob(o->train, 0, NULL, &g) != 0;
    globfree(&g);
    if (none) return ERR("--train '%s': no file matches", o->train);
    /* the longest name a run writes: OUT/ckpt_<19 digits>.tmp/<a tokenizer file>.tmp */
    size_t longest = strlen(o->out) + strlen("/ckpt_0000000000000000000.tmp/") + 64 + strlen(".tmp");
    if (longest >= PATH_MAX)
        return ERR("--out: the path is %zu bytes; the checkpoint files under it would pass the system's %d-byte limit "
                   "(keep it under %zu)", strlen(o->out), PATH_MAX, strlen(o->out) - (longest - PATH_MAX) - 1);
    if (check_out_dir(o->out)) return 1;
    /* an existing folder is locked before anything in it is read (with --resume, before
     * its run.json was read: lock_before_resume) */
    if (t->rank == 0 && is_dir(o->out) && lock_out_dir(t, o->out)) return 1;
    char any[PATH_MAX];
    hg_status ls = is_dir(o->out) ? hg_checkpoint_latest(o->out, any, sizeof any, NULL) : HG_ERR_IO;
    if (!o->resume && ls != HG_ERR_IO) /* HG_OK, or a newest checkpoint that is not whole */
        return ERR("--out %s already holds checkpoints (%s): pass --resume to continue, or choose another folder",
                   o->out, ls == HG_OK ? any : hg_last_error());
    char weights[PATH_MAX];
    if (load_tokenizer(t)) return 1;
    if ((rc = resolve_config(t, weights, sizeof weights)) || (rc = resolve_adapters(t)) || plan(t)) return rc ? rc : 1;
    if (o->sample_every && !t->tok) return ERR("--sample-every needs a tokenizer (--tokenizer PATH)");
    if (open_loader(t, &t->train, &t->packed[0], "--train", o->train, !o->sequential) || check_data(t)) return 1;
    if (o->val && open_loader(t, &t->val, &t->packed[1], "--val", o->val, 0)) return 1;
    if (!o->val && o->eval_every >= 0 && t->rank == 0)
        fprintf(stderr, "handgrad train: warning: --eval-every %lld without --val: there is nothing to evaluate\n",
                (long long)o->eval_every);
    /* the ceiling of --device and --precision, measured before the model takes its memory */
    const hg_options po = model_options(t);
    t->peak_gflops = o->peak_gflops;
    if (t->peak_gflops <= 0 && hg_gemm_peak_gflops(&po, &t->peak_gflops) != HG_OK) t->peak_gflops = 0;
    if (create_models(t, weights)) return 1;
    t->band.z = o->loss_band_z;
    t->good_step = t->resumed_from[0] ? t->step : -1;
    if (t->resumed_from[0] && load_band(t)) return 1;
    /* everything checked: only now is anything written */
    if (t->rank == 0 && (mkdir_p(o->out) || lock_out_dir(t, o->out))) return 1;
    char run_json[PATH_MAX + 16];
    snprintf(run_json, sizeof run_json, "%s/run.json", o->out);
    int had_run_json = !t->resumed_from[0] && o->resume && access(run_json, F_OK) == 0;
    if (t->rank == 0 && write_run_json(t, run_json)) return 1;
    if (t->rank == 0 && train_log_open(&t->log, o->out, t->resumed_from[0] ? t->step : -1, o->print_every)) return 1;
    const hg_options *mo = hg_model_options(t->m);
    int64_t trained = 0;
    for (int i = 0; i < hg_param_count(t->m); i++) {
        hg_param_info p;
        hg_param_at(t->m, i, &p);
        trained += p.frozen ? 0 : p.numel;
    }
    char trains[96] = "";
    if (t->lora.r > 0 || t->freeze)
        snprintf(trains, sizeof trains, " (%.*f%s trained, %.2f%%%s)", trained < 1000000 ? 1 : 2,
                 (double)trained / (trained < 1000000 ? 1e3 : 1e6), trained < 1000000 ? "K" : "M",
                 100.0 * (double)trained / (double)hg_config_param_count(&t->cfg, 1), t->lora.r > 0 ? ": LoRA adapters" : "");
    printf("model: %d layers, %d heads, d_model %d, vocab %d, %.2fM parameters%s; %s\n", t->cfg.n_layer, t->cfg.n_head,
           t->cfg.d_model, t->cfg.vocab_size, (double)hg_config_param_count(&t->cfg, 1) / 1e6, trains,
           t->resumed_from[0] ? t->resumed_from : o->init_from ? o->init_from : o->init_from_hf ? o->init_from_hf : "new");
    char where[64];
    if (mo->device == HG_DEVICE_CUDA) snprintf(where, sizeof where, "cuda, %s", o->dev.precision);
    else snprintf(where, sizeof where, "%d thread%s%s", mo->threads, mo->threads == 1 ? "" : "s",
                  mo->precision == HG_PRECISION_BF16 ? ", bf16" : "");
    printf("data: %llu tokens in %s, batch %d x ctx %d x %d micro-batches = %lld tokens a step, %lld steps, %s\n",
           (unsigned long long)hg_loader_tokens(t->train), o->train, t->B, t->T, t->accum,
           (long long)t->B * t->T * t->accum, (long long)t->max_steps, where);
    const hg_loader_rows kind = rows_of(o, o->train);
    if (hg_loader_has_flags(t->train) || kind != HG_ROWS_WINDOWS) {
        const double rows = (double)hg_loader_rows_total(t->train);
        printf("rows: %s; %.0f of them, %llu document(s) longer than a row cut into windows, %.1f%% of the rows' "
               "tokens padding%s\n",
               kind == HG_ROWS_PADDED   ? "padded rows, a document each"
               : kind == HG_ROWS_PACKED ? "packed rows, whole documents that never attend to each other"
                                        : "windows across documents",
               rows,
               (unsigned long long)hg_loader_split_documents(t->train),
               rows > 0 ? 100.0 * (1.0 - (double)hg_loader_row_tokens(t->train) / (rows * (t->T + 1))) : 0.0,
               hg_loader_has_flags(t->train) ? "; the loss on the tokens the shards' mask trains" : "");
    }
    if (t->ranks > 1)
        printf("data parallel: %d ranks (%s), %d sequences each per micro-batch%s\n", t->ranks, hg_comm_name(t->comm),
               t->Bl, o->zero ? ", AdamW state sharded (ZeRO-1)" : "");
    if (t->resumed_from[0]) printf("resuming at step %lld from %s\n", (long long)t->step, t->resumed_from);
    else if (o->resume)
        printf("no checkpoint in %s yet: starting from step 0%s\n", o->out, had_run_json ? " with its run.json" : "");
    fflush(stdout);
    return 0;
}

int cmd_train(int argc, char **argv) {
    trainer t;
    memset(&t, 0, sizeof t);
    t.lock_fd = -1;
    train_opts_defaults(&t.o);
    install_signals();
    int rc = setup(&t, argc, argv);
    if (rc == 0) rc = run(&t);
    trainer_free(&t);
    return rc < 0 ? 0 : rc;
}
