/* handgrad bench: times forward, backward and a full training step over a ladder of model
 * sizes (or, with --attention, attention alone over head size x sequence length; see
 * bench_attention.c), after warm-up, against the sgemm ceiling measured in the same run.
 * Every row first estimates its memory and is skipped, not run, when it would not fit. */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "bench.h"
#include "cli_args.h"
#include "cli_io.h"
#include "commands.h"
#include "core/timer.h"
#include "svg.h"

/* What a model costs beyond its plan (hg_memory_required): the process itself (code,
 * oneDNN and OpenMP runtimes: its resident size at start-up) plus this allowance for
 * oneDNN's GEMM scratchpad and primitive cache, which grow as shapes are first seen. The
 * measured peak was 5 MiB above plan + start-up for GPT-2 small and medium (B=4 T=256,
 * B=8 T=1024), so the estimate is an upper bound by about 60 MiB (docs/benchmarks.md). */
#define RUNTIME_ALLOWANCE ((size_t)64 << 20)

static void usage(FILE *f) {
    fprintf(f,
            "usage: handgrad bench [options]            model ladder: forward, backward, train step\n"
            "       handgrad bench --attention [options] attention alone: head size x sequence length\n"
            "models:\n"
            "  --model LIST       presets (default small): small, medium, large, xl, 2.7B (GPT-2),\n"
            "                     cs336-small ... cs336-2.7B (the CS336 model), smollm-135m,\n"
            "                     tiny, odd, llama-tiny, qwen2-tiny, qwen3-tiny\n"
            "  --arch F=V,...     config fields over one preset, e.g. n_kv_head=4,mlp=relu2\n"
            "  --d-model C --n-layer L --n-head NH [--d-ff F] [--vocab-size V]\n"
            "                     an explicit shape (F default 4*C, V default 50257, Tmax 1024);\n"
            "                     with one --model preset, these override its fields; spelled\n"
            "                     as train spells them (--layers, --heads, --vocab: the same)\n"
            "  --pass LIST        forward, backward, step (default all three); backward is\n"
            "                     (forward+backward) - forward, step adds zero_grad and AdamW\n"
            "attention (--attention):\n"
            "  --head-dims LIST   head sizes, multiples of 16 (default 16,32,64,128)\n"
            "  --n-head NH        heads per cell (default 1)\n"
            "  --causal, --no-causal   causal mask (default on)\n"
            "both:\n"
            "  --batch B          batch size (default 4; attention 8)\n"
            "  --ctx LIST         sequence lengths (default 256; attention 256,1024,4096,8192,16384)\n"
            "  --threads LIST     OpenMP threads, 0 for all cores (default 0)\n"
            "  --warmup N         untimed repetitions first, 0 allowed (default 1)\n"
            "  --steps N          timed repetitions (default 3)\n"
            "  --seed S           parameter and input seed (default 1)\n"
            "  --json | --csv     one JSON object per row (JSON lines), or CSV; default a table\n"
            "  --plot DIR         also write SVG plots into DIR (--svg is the same)\n"
            "  --device D         model ladder on cpu (default) or cuda; --precision fp32|bf16,\n"
            "                     --cuda-graphs (docs/cuda.md)\n");
}

/* ---- option parsing ---- */

static int parse_int(const char *flag, const char *s, int min, int *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < min || v > INT_MAX) {
        fprintf(stderr, "handgrad bench: %s must be an integer >= %d, got '%s'\n", flag, min, s);
        return -1;
    }
    *out = (int)v;
    return 0;
}

static int parse_int_list(const char *flag, char *s, int min, int *out, int *n) {
    *n = 0;
    for (char *save = NULL, *tok = strtok_r(s, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (*n == BENCH_MAX_LIST) {
            fprintf(stderr, "handgrad bench: %s takes at most %d values\n", flag, BENCH_MAX_LIST);
            return -1;
        }
        if (parse_int(flag, tok, min, &out[(*n)++])) return -1;
    }
    if (*n == 0) {
        fprintf(stderr, "handgrad bench: %s needs at least one value\n", flag);
        return -1;
    }
    return 0;
}

static int parse_passes(char *s, int *passes) {
    *passes = 0;
    for (char *save = NULL, *tok = strtok_r(s, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (!strcmp(tok, "forward")) *passes |= PASS_FORWARD;
        else if (!strcmp(tok, "backward")) *passes |= PASS_BACKWARD;
        else if (!strcmp(tok, "step")) *passes |= PASS_STEP;
        else {
            fprintf(stderr, "handgrad bench: --pass '%s' is unknown (forward, backward, step)\n", tok);
            return -1;
        }
    }
    if (!*passes) fprintf(stderr, "handgrad bench: --pass needs at least one of forward, backward, step\n");
    return *passes ? 0 : -1;
}

enum { O_MODEL = 0x200, /* clear of cli_model.h's CLI_OPT_* */ O_DMODEL, O_DFF, O_LAYERS, O_HEADS, O_VOCAB, O_PASS, O_BATCH, O_CTX, O_THREADS,
       O_WARMUP, O_STEPS, O_SEED, O_JSON, O_CSV, O_PLOT, O_ATTENTION, O_HEAD_DIMS, O_CAUSAL, O_NO_CAUSAL, O_HELP };

/* Returns 0 and fills o, 1 after --help, or -1 after printing an error. */
static int parse_options(int argc, char **argv, bench_opts *o, char *modelbuf) {
    static const struct option opts[] = {
        {"model", required_argument, 0, O_MODEL},     {"d-model", required_argument, 0, O_DMODEL},
        {"d-ff", required_argument, 0, O_DFF},        {"layers", required_argument, 0, O_LAYERS},
        {"n-layer", required_argument, 0, O_LAYERS},  {"n-head", required_argument, 0, O_HEADS},
        {"vocab-size", required_argument, 0, O_VOCAB},
        {"heads", required_argument, 0, O_HEADS},     {"vocab", required_argument, 0, O_VOCAB},
        {"pass", required_argument, 0, O_PASS},       {"batch", required_argument, 0, O_BATCH},
        {"ctx", required_argument, 0, O_CTX},         {"threads", required_argument, 0, O_THREADS},
        {"warmup", required_argument, 0, O_WARMUP},   {"steps", required_argument, 0, O_STEPS},
        {"seed", required_argument, 0, O_SEED},       {"json", no_argument, 0, O_JSON},
        {"csv", no_argument, 0, O_CSV},               {"plot", required_argument, 0, O_PLOT},
        {"svg", required_argument, 0, O_PLOT},        {"attention", no_argument, 0, O_ATTENTION},
        {"head-dims", required_argument, 0, O_HEAD_DIMS}, {"causal", no_argument, 0, O_CAUSAL},
        {"no-causal", no_argument, 0, O_NO_CAUSAL},   {"help", no_argument, 0, O_HELP},
        {"device", required_argument, 0, CLI_OPT_DEVICE}, {"precision", required_argument, 0, CLI_OPT_PRECISION},
        {"arch", required_argument, 0, CLI_OPT_ARCH},
        {"cuda-graphs", no_argument, 0, CLI_OPT_CUDA_GRAPHS},
        {0, 0, 0, 0}};
    int dmodel = 0, dff = -1, layers = 0, heads = 0, vocab = 0, batch = 0, pass_given = 0;
    char *models = NULL, *ctx = NULL, *threads = NULL, *head_dims = NULL, *passes = NULL;
    memset(o, 0, sizeof *o);
    o->dev = cli_model_default();
    o->warmup = 1;
    o->steps = 3;
    o->seed = 1;
    o->causal = 1;
    int c, bad = 0;
    optind = 1, opterr = 0; /* one-line messages of our own */
    while (!bad && (c = getopt_long(argc, argv, ":", opts, NULL)) != -1) {
        switch (c) {
        case O_MODEL: models = optarg; break;
        case CLI_OPT_DEVICE:
        case CLI_OPT_PRECISION:
        case CLI_OPT_CUDA_GRAPHS:
        case CLI_OPT_ARCH: bad = cli_model_flag("bench", &o->dev, c, optarg) < 0; break;
        case O_DMODEL: bad = parse_int("--d-model", optarg, 1, &dmodel); break;
        case O_DFF: bad = parse_int("--d-ff", optarg, 1, &dff); break;
        case O_LAYERS: bad = parse_int("--n-layer", optarg, 1, &layers); break;
        case O_HEADS: bad = parse_int("--n-head", optarg, 1, &heads); break;
        case O_VOCAB: bad = parse_int("--vocab-size", optarg, 1, &vocab); break;
        case O_PASS: passes = optarg, pass_given = 1; break;
        case O_BATCH: bad = parse_int("--batch", optarg, 1, &batch); break;
        case O_CTX: ctx = optarg; break;
        case O_THREADS: threads = optarg; break;
        case O_WARMUP: bad = parse_int("--warmup", optarg, 0, &o->warmup); break;
        case O_STEPS: bad = parse_int("--steps", optarg, 1, &o->steps); break;
        case O_SEED: {
            char *end;
            errno = 0;
            o->seed = strtoull(optarg, &end, 10);
            if (errno || end == optarg || *end || *optarg == '-') {
                fprintf(stderr, "handgrad bench: --seed must be a non-negative integer, got '%s'\n", optarg);
                bad = -1;
            }
            break;
        }
        case O_JSON: o->format = OUT_JSON; break;
        case O_CSV: o->format = OUT_CSV; break;
        case O_PLOT: o->plot_dir = optarg; break;
        case O_ATTENTION: o->attention = 1; break;
        case O_HEAD_DIMS: head_dims = optarg; break;
        case O_CAUSAL: o->causal = 1; break;
        case O_NO_CAUSAL: o->causal = 0; break;
        case O_HELP: usage(stdout); return 1;
        default: cli_bad_option("bench", c, argv); return -1;
        }
    }
    if (bad) return -1;
    if (optind < argc) {
        fprintf(stderr, "handgrad bench: unexpected argument '%s'\n", argv[optind]);
        return -1;
    }
    int explicit_shape = dmodel || dff > 0 || layers || vocab || (heads && !o->attention) || o->dev.arch;
    if (o->attention && (models || explicit_shape || pass_given)) {
        fprintf(stderr, "handgrad bench: --attention times attention alone: --model, --pass and model sizes do not apply\n");
        return -1;
    }
    if (!o->attention && head_dims) {
        fprintf(stderr, "handgrad bench: --head-dims needs --attention\n");
        return -1;
    }
    o->batch = batch ? batch : o->attention ? 8 : 4;
    o->heads = o->attention ? (heads ? heads : 1) : 0;
    static int default_ctx[] = {256, 1024, 4096, 8192, 16384}, default_hd[] = {16, 32, 64, 128};
    if (ctx) {
        if (parse_int_list("--ctx", ctx, 1, o->ctx, &o->nctx)) return -1;
    } else if (o->attention) {
        memcpy(o->ctx, default_ctx, sizeof default_ctx);
        o->nctx = 5;
    } else {
        o->ctx[0] = 256, o->nctx = 1;
    }
    if (threads) {
        if (parse_int_list("--threads", threads, 0, o->threads, &o->nthreads)) return -1;
    } else {
        o->threads[0] = 0, o->nthreads = 1;
    }
    for (int i = 0; i < o->nthreads; i++)
        if (o->threads[i] == 0) o->threads[i] = omp_get_num_procs();
    if (o->attention) {
        if (head_dims) {
            if (parse_int_list("--head-dims", head_dims, 1, o->head_dims, &o->nhead_dims)) return -1;
        } else {
            memcpy(o->head_dims, default_hd, sizeof default_hd);
            o->nhead_dims = 4;
        }
        for (int i = 0; i < o->nhead_dims; i++)
            if (o->head_dims[i] % 16) {
                fprintf(stderr, "handgrad bench: --head-dims %d is not a multiple of 16 (attention tiles are 16-float vectors)\n",
                        o->head_dims[i]);
                return -1;
            }
        return 0;
    }
    if (passes) {
        if (parse_passes(passes, &o->passes)) return -1;
    } else {
        o->passes = PASS_FORWARD | PASS_BACKWARD | PASS_STEP;
    }
    /* models: a preset list, or one shape (a preset with overrides, or explicit) */
    if (models) {
        if (strlen(models) >= 1024) {
            fprintf(stderr, "handgrad bench: --model list is too long\n");
            return -1;
        }
        strcpy(modelbuf, models);
        for (char *save = NULL, *tok = strtok_r(modelbuf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
            if (o->nmodels == BENCH_MAX_LIST) {
                fprintf(stderr, "handgrad bench: --model takes at most %d presets\n", BENCH_MAX_LIST);
                return -1;
            }
            hg_config probe;
            if (hg_config_preset(tok, &probe) != HG_OK) {
                fprintf(stderr, "handgrad bench: %s\n", hg_last_error());
                return -1;
            }
            o->models[o->nmodels++] = tok;
        }
        if (!o->nmodels) {
            fprintf(stderr, "handgrad bench: --model needs at least one preset\n");
            return -1;
        }
    }
    if (explicit_shape) {
        hg_config *e = &o->explicit_cfg;
        if (o->nmodels > 1) {
            fprintf(stderr, "handgrad bench: explicit sizes override one --model preset, not a list\n");
            return -1;
        }
        if (o->nmodels == 1) hg_config_preset(o->models[0], e);
        else if (!dmodel || !layers || !heads) {
            fprintf(stderr, "handgrad bench: an explicit model needs --d-model, --n-layer and --n-head (or a --model to override)\n");
            return -1;
        } else {
            *e = (hg_config){.vocab_size = 50257, .max_seq_len = 1024};
        }
        if (dmodel) e->d_model = dmodel, e->d_ff = 0;
        if (dff > 0) e->d_ff = dff;
        if (layers) e->n_layer = layers;
        if (heads) e->n_head = heads;
        if (vocab) e->vocab_size = vocab;
        if (cli_apply_arch("bench", o->dev.arch, e)) return -1;
        if (hg_config_validate(e) != HG_OK) {
            fprintf(stderr, "handgrad bench: %s\n", hg_last_error());
            return -1;
        }
        o->has_explicit = 1;
        o->nmodels = 1;
    } else if (!o->nmodels) {
        o->models[o->nmodels++] = "small";
    }
    return 0;
}

/* ---- one place that builds what a row runs on ---- */

hg_status bench_backend_create(hg_backend **out, int threads) { return hg_backend_cpu_create(out, threads); }

static hg_status bench_model_create(hg_model **m, const hg_config *cfg, const hg_options *opt) {
    return hg_model_create(m, cfg, opt);
}

/* ---- the model ladder ---- */

typedef struct model_case {
    char name[64];
    hg_config cfg;
} model_case;

static void model_case_at(const bench_opts *o, int i, model_case *mc) {
    if (o->has_explicit) {
        const hg_config *c = &o->explicit_cfg;
        mc->cfg = *c;
        hg_config preset;
        if (o->models[0] && hg_config_preset(o->models[0], &preset) == HG_OK && !memcmp(&preset, c, sizeof preset))
            snprintf(mc->name, sizeof mc->name, "%s", o->models[0]);
        else if (c->vocab_size == 50257)
            snprintf(mc->name, sizeof mc->name, "d%d-f%d-l%d-h%d", c->d_model, c->d_ff ? c->d_ff : 4 * c->d_model, c->n_layer, c->n_head);
        else
            snprintf(mc->name, sizeof mc->name, "d%d-f%d-l%d-h%d-v%d", c->d_model, c->d_ff ? c->d_ff : 4 * c->d_model,
                     c->n_layer, c->n_head, c->vocab_size);
    } else {
        hg_config_preset(o->models[i], &mc->cfg);
        snprintf(mc->name, sizeof mc->name, "%s", o->models[i]);
    }
}

/* One row's result; a skipped row has no times. */
typedef struct model_row {
    double params;       /* parameter count, for the plots */
    int ctx, threads, pass, training;
    bench_stat t, fb;    /* t: this pass; fb: forward+backward (backward rows) */
    double gflop, peak;  /* per call; the sgemm ceiling for these threads */
    size_t estimate, rss, avail;
    int skipped;
} model_row;

static const char *pass_name(int pass) {
    return pass == PASS_FORWARD ? "forward" : pass == PASS_BACKWARD ? "backward" : "step";
}

static void print_model_row(const bench_opts *o, const model_case *mc, const model_row *r, int *header) {
    const char *pn = pass_name(r->pass);
    double tps = (double)o->batch * r->ctx / r->t.mean, gflops = r->gflop / r->t.mean;
    if (o->format == OUT_TABLE) {
        char pass[32];
        snprintf(pass, sizeof pass, "%s%s", pn, r->pass == PASS_FORWARD && !r->training ? "/infer" : "");
        printf("%-18s %5d %3d  %-14s %6d", mc->name, r->ctx, r->threads, pass, o->warmup);
        if (r->skipped)
            printf("  skipped: needs %.1f GiB, have %.1f GiB\n", bench_gib(r->estimate), bench_gib(r->avail));
        else
            printf(" %10.4f %9.4f %10.1f %9.1f %7.1f%% %7.2f GiB\n", r->t.mean, r->t.std, tps, gflops,
                   100 * gflops / r->peak, bench_gib(r->rss));
        return;
    }
    bench_rec rec = {.n = 0};
    const hg_config *c = &mc->cfg;
    rec_str(&rec, "kind", "model");
    rec_str(&rec, "model", mc->name);
    rec_int(&rec, "params", (long long)r->params);
    rec_int(&rec, "d_model", c->d_model);
    rec_int(&rec, "d_ff", c->d_ff ? c->d_ff : 4 * c->d_model);
    rec_int(&rec, "layers", c->n_layer);
    rec_int(&rec, "heads", c->n_head);
    rec_int(&rec, "vocab", c->vocab_size);
    rec_int(&rec, "batch", o->batch);
    rec_int(&rec, "ctx", r->ctx);
    rec_int(&rec, "threads", r->threads);
    rec_str(&rec, "pass", pn);
    rec_bool(&rec, "training", r->training);
    rec_int(&rec, "warmup", o->warmup);
    rec_int(&rec, "steps", o->steps);
    rec_bool(&rec, "skipped", r->skipped);
    char note[96] = "";
    if (r->skipped) snprintf(note, sizeof note, "skipped: needs %.1f GiB, have %.1f GiB", bench_gib(r->estimate), bench_gib(r->avail));
    rec_str(&rec, "note", note);
    double nan = NAN, run = r->skipped ? nan : 1.0;
    rec_num(&rec, "mean_s", r->t.mean * run);
    rec_num(&rec, "std_s", r->t.std * run);
    int bw = r->pass == PASS_BACKWARD;
    rec_num(&rec, "forward_backward_mean_s", bw ? r->fb.mean * run : nan);
    rec_num(&rec, "forward_backward_std_s", bw ? r->fb.std * run : nan);
    rec_num(&rec, "tokens_per_s", tps * run);
    rec_num(&rec, "gflop", r->gflop);
    rec_num(&rec, "gflops", gflops * run);
    rec_num(&rec, "sgemm_peak_gflops", r->peak);
    rec_num(&rec, "peak_fraction", gflops / r->peak * run);
    rec_int(&rec, "estimate_bytes", (long long)r->estimate);
    if (r->skipped) rec_null(&rec, "peak_rss_bytes");
    else rec_int(&rec, "peak_rss_bytes", (long long)r->rss);
    rec_int(&rec, "available_bytes", (long long)r->avail);
    rec_print(&rec, o->format, header);
}

static int run_pass(hg_model *m, int pass, const int32_t *tok, const int32_t *tgt, int B, int T, const hg_adamw *a) {
    float loss;
    hg_status s = HG_OK;
    if (pass == PASS_FORWARD) s = hg_forward(m, tok, tgt, B, T, &loss, NULL);
    else if (pass == PASS_BACKWARD) s = hg_forward_backward(m, tok, tgt, B, T, 1.0f, &loss);
    else {
        s = hg_zero_grad(m);
        if (s == HG_OK) s = hg_forward_backward(m, tok, tgt, B, T, 1.0f, &loss);
        if (s == HG_OK) s = hg_optimizer_step(m, a, NULL);
    }
    return s == HG_OK ? 0 : cli_fail("bench");
}

/* Times `pass` (PASS_BACKWARD: the whole forward+backward) warmup + steps times. */
static int time_pass(const bench_opts *o, hg_model *m, int pass, const int32_t *tok, const int32_t *tgt, int T,
                     bench_stat *out) {
    hg_adamw adamw = hg_adamw_default();
    double *t = malloc(sizeof(double) * (size_t)o->steps);
    int rc = t ? 0 : 1;
    for (int w = 0; w < o->warmup && !rc; w++) rc = run_pass(m, pass, tok, tgt, o->batch, T, &adamw);
    for (int s = 0; s < o->steps && !rc; s++) {
        double t0 = hg_now();
        rc = run_pass(m, pass, tok, tgt, o->batch, T, &adamw);
        t[s] = hg_now() - t0;
    }
    if (!rc) *out = bench_stats(t, o->steps);
    free(t);
    return rc;
}

/* The options were checked before the run (bench_models), so the plan cannot fail. */
static size_t estimate(const hg_config *cfg, const hg_options *opt, size_t baseline) {
    hg_memory_plan plan;
    if (hg_memory_required(cfg, opt, &plan) != HG_OK) return SIZE_MAX;
    return plan.total + baseline + RUNTIME_ALLOWANCE;
}

/* Runs every requested pass of one (model, ctx, threads), appending rows to rows[*n]. */
static int run_model(const bench_opts *o, const model_case *mc, int T, int threads, size_t baseline,
                     model_row *rows, int *n, int *header) {
    hg_options opt = hg_options_default();
    opt.batch = o->batch;
    opt.seq_len = T;
    opt.threads = threads;
    opt.seed = o->seed;
    cli_model_device(&o->dev, &opt);
    size_t need_train = estimate(&mc->cfg, &opt, baseline);
    opt.training = 0;
    size_t need_infer = estimate(&mc->cfg, &opt, baseline);
    size_t avail = hg_memory_available();
    int trains = (o->passes & (PASS_BACKWARD | PASS_STEP)) && need_train <= avail;
    int infer = !trains && (o->passes & PASS_FORWARD) && need_infer <= avail;
    model_row base = {.params = (double)hg_config_param_count(&mc->cfg, 0), .ctx = T, .threads = threads,
                      .training = trains, .peak = NAN, .avail = avail};
    if ((trains || infer) && bench_peak(&opt, &base.peak)) return 1;
    double flop = hg_train_flops(&mc->cfg, o->batch, T) / 1e9;
    model_row *r0 = rows + *n;
    for (int p = PASS_FORWARD; p <= PASS_STEP; p <<= 1) {
        if (!(o->passes & p)) continue;
        model_row *r = &rows[(*n)++];
        *r = base;
        r->pass = p;
        r->gflop = p == PASS_FORWARD ? flop / 3 : p == PASS_BACKWARD ? 2 * flop / 3 : flop;
        r->estimate = p == PASS_FORWARD && !trains ? need_infer : need_train;
        r->training = p == PASS_FORWARD ? trains : 1;
        r->skipped = !(trains || (infer && p == PASS_FORWARD));
    }
    int nrows = (int)(rows + *n - r0), rc = 0;
    if (trains || infer) {
        opt.training = trains;
        hg_model *m = NULL;
        bench_reset_peak_rss();
        hg_status st = bench_model_create(&m, &mc->cfg, &opt);
        if (st == HG_ERR_NOMEM) { /* memory went elsewhere since the estimate */
            for (int i = 0; i < nrows; i++) r0[i].skipped = 1;
        } else if (st != HG_OK) {
            return cli_fail("bench");
        } else {
            int32_t *tok = malloc(sizeof(int32_t) * (size_t)o->batch * T), *tgt = malloc(sizeof(int32_t) * (size_t)o->batch * T);
            if (!tok || !tgt) {
                fprintf(stderr, "handgrad bench: out of memory for tokens\n");
                rc = 1;
            }
            uint64_t x = o->seed * 6364136223846793005ull + 1442695040888963407ull;
            for (int i = 0; !rc && i < o->batch * T; i++) {
                x = x * 6364136223846793005ull + 1442695040888963407ull;
                tok[i] = (int32_t)((x >> 33) % (uint64_t)mc->cfg.vocab_size);
                x = x * 6364136223846793005ull + 1442695040888963407ull;
                tgt[i] = (int32_t)((x >> 33) % (uint64_t)mc->cfg.vocab_size);
            }
            bench_stat f = {0, 0}, fb = {0, 0}, step = {0, 0};
            if (!rc && (o->passes & (PASS_FORWARD | PASS_BACKWARD))) rc = time_pass(o, m, PASS_FORWARD, tok, tgt, T, &f);
            if (!rc && trains && (o->passes & PASS_BACKWARD)) rc = time_pass(o, m, PASS_BACKWARD, tok, tgt, T, &fb);
            if (!rc && trains && (o->passes & PASS_STEP)) rc = time_pass(o, m, PASS_STEP, tok, tgt, T, &step);
            size_t rss = bench_peak_rss();
            for (int i = 0; i < nrows; i++) {
                model_row *r = &r0[i];
                r->rss = rss;
                if (r->pass == PASS_FORWARD) r->t = f;
                if (r->pass == PASS_STEP) r->t = step;
                if (r->pass == PASS_BACKWARD) {
                    r->fb = fb;
                    r->t.mean = fb.mean - f.mean;
                    r->t.std = hypot(fb.std, f.std); /* independent samples: stds in quadrature */
                }
            }
            free(tok);
            free(tgt);
            hg_model_free(m);
        }
    }
    if (rc) return rc;
    for (int i = 0; i < nrows; i++) print_model_row(o, mc, &r0[i], header);
    if (o->format == OUT_TABLE && nrows > 1 && !r0[0].skipped) {
        const model_row *f = NULL, *b = NULL;
        for (int i = 0; i < nrows; i++) {
            if (r0[i].pass == PASS_FORWARD) f = &r0[i];
            if (r0[i].pass == PASS_BACKWARD && !r0[i].skipped) b = &r0[i];
        }
        printf("%-18s %5s %3s  memory estimate %.2f GiB, measured peak %.2f GiB", "", "", "", bench_gib(r0[0].estimate),
               bench_gib(r0[0].rss));
        if (f && b) printf("; backward/forward %.2f", b->t.mean / f->t.mean);
        printf("\n");
    }
    return 0;
}

/* ---- plots ---- */

static const char *const model_plots[] = {"bench_time.svg", "bench_gflops.svg"};

/* Step time and GFLOP/s against parameters: one series per (pass, ctx, threads). */
static int plot_models(const bench_opts *o, const model_row *rows, int n) {
    enum { MAXS = 24 };
    svg_series ts[MAXS], gs[MAXS + 1];
    char labels[MAXS][64];
    double *x = malloc(sizeof(double) * (size_t)n * 4), *tsec = x + n, *gf = tsec + n, *peak_y = gf + n;
    int ns = 0;
    if (!x) return 1;
    for (int i = 0; i < n; i++) {
        x[i] = rows[i].params / 1e6;
        tsec[i] = rows[i].skipped ? NAN : rows[i].t.mean;
        gf[i] = rows[i].skipped ? NAN : rows[i].gflop / rows[i].t.mean;
    }
    /* rows come grouped by (ctx, threads) within each model: gather a series for each key */
    static double sx[MAXS][BENCH_MAX_LIST], sy[MAXS][BENCH_MAX_LIST], sg[MAXS][BENCH_MAX_LIST];
    int key[MAXS][3];
    for (int i = 0; i < n; i++) {
        int s = 0;
        while (s < ns && !(key[s][0] == rows[i].pass && key[s][1] == rows[i].ctx && key[s][2] == rows[i].threads)) s++;
        if (s == ns) {
            if (ns == MAXS) continue;
            key[s][0] = rows[i].pass, key[s][1] = rows[i].ctx, key[s][2] = rows[i].threads;
            snprintf(labels[s], sizeof labels[s], "%s", pass_name(rows[i].pass));
            if (o->nctx > 1 || o->nthreads > 1)
                snprintf(labels[s] + strlen(labels[s]), sizeof labels[s] - strlen(labels[s]), " T=%d, %d thr", rows[i].ctx,
                         rows[i].threads);
            ts[s] = (svg_series){labels[s], sx[s], sy[s], 0, 0, 1};
            gs[s] = (svg_series){labels[s], sx[s], sg[s], 0, 0, 1};
            ns++;
        }
        int k = ts[s].n;
        if (k == BENCH_MAX_LIST) continue;
        sx[s][k] = x[i], sy[s][k] = tsec[i], sg[s][k] = gf[i];
        ts[s].n = gs[s].n = k + 1;
    }
    for (int i = 0; i < n; i++) peak_y[i] = rows[i].peak;
    gs[ns] = (svg_series){"sgemm peak", x, peak_y, n, 1, 0};
    char title[160];
    snprintf(title, sizeof title, "handgrad, batch %d: time per call against model size", o->batch);
    svg_plot pt = {.title = title, .xlabel = "parameters (millions)", .ylabel = "seconds", .logx = 1, .logy = 1,
                   .series = ts, .nseries = ns};
    int rc = bench_write_plot(o->plot_dir, model_plots[0], &pt);
    snprintf(title, sizeof title, "handgrad, batch %d: model GFLOP/s against model size", o->batch);
    svg_plot pg = {.title = title, .xlabel = "parameters (millions)", .ylabel = "GFLOP/s", .logx = 1,
                   .series = gs, .nseries = ns + 1};
    rc |= bench_write_plot(o->plot_dir, model_plots[1], &pg);
    free(x);
    return rc;
}

static int bench_models(const bench_opts *o) {
    /* bad input before anything runs: T beyond a model's Tmax, or a batch, B*T or thread
     * count beyond what a model accepts */
    for (int i = 0; i < o->nmodels; i++) {
        model_case mc;
        model_case_at(o, i, &mc);
        for (int j = 0; j < o->nctx; j++) {
            if (o->ctx[j] > mc.cfg.max_seq_len) {
                fprintf(stderr, "handgrad bench: --ctx %d is more than %s's max_seq_len %d\n", o->ctx[j], mc.name,
                        mc.cfg.max_seq_len);
                return 2;
            }
            hg_options opt = hg_options_default();
            opt.batch = o->batch, opt.seq_len = o->ctx[j];
            for (int k = 0; k < o->nthreads; k++) opt.threads = o->threads[k] > opt.threads ? o->threads[k] : opt.threads;
            hg_memory_plan plan;
            if (hg_memory_required(&mc.cfg, &opt, &plan) != HG_OK) {
                fprintf(stderr, "handgrad bench: %s\n", hg_last_error());
                return 2;
            }
        }
    }
    if (o->plot_dir && bench_check_plots(o->plot_dir, model_plots, 2)) return 2;
    size_t baseline = bench_rss(); /* the process so far: code, runtimes */
    int maxrows = o->nmodels * o->nctx * o->nthreads * 3, n = 0, header = 1, rc = 0;
    model_row *rows = calloc((size_t)maxrows, sizeof *rows);
    if (!rows) {
        fprintf(stderr, "handgrad bench: out of memory\n");
        return 1;
    }
    if (o->format == OUT_TABLE) {
        printf("handgrad bench: batch %d, warmup %d, steps %d\n", o->batch, o->warmup, o->steps);
        printf("%-18s %5s %3s  %-14s %6s %10s %9s %10s %9s %8s %11s\n", "Model", "Ctx", "Thr", "Pass", "Warmup",
               "Mean (s)", "Std (s)", "tokens/s", "GFLOP/s", "% peak", "Peak mem");
    }
    for (int i = 0; i < o->nmodels && !rc; i++) {
        model_case mc;
        model_case_at(o, i, &mc);
        for (int j = 0; j < o->nctx && !rc; j++)
            for (int k = 0; k < o->nthreads && !rc; k++)
                rc = run_model(o, &mc, o->ctx[j], o->threads[k], baseline, rows, &n, &header);
    }
    if (!rc && o->format == OUT_TABLE) bench_print_peaks();
    if (!rc) bench_check_peaks();
    if (!rc && o->plot_dir) rc = plot_models(o, rows, n);
    free(rows);
    return rc;
}

int cmd_bench(int argc, char **argv) {
    bench_opts o;
    char modelbuf[1024];
    int p = parse_options(argc, argv, &o, modelbuf);
    if (p) return p > 0 ? 0 : 2;
    return o.attention ? bench_attention(&o) : bench_models(&o);
}
