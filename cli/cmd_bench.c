/* handgrad bench: times forward, backward and a full training step over a ladder of model
 * sizes (or, with --attention, attention alone over head size x sequence length; see
 * bench_attention.c), after warm-up, against the sgemm ceiling measured in the same run.
 * Every row first estimates its memory and is skipped, not run, when it would not fit. */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "bench.h"
#include "cli_io.h"
#include "commands.h"
#include "core/timer.h"
#include "svg.h"

/* What a model costs beyond its plan (hg_memory_required): the process itself (code,
 * oneDNN and OpenMP runtimes: its resident size at start-up) plus bench_runtime_allowance
 * for oneDNN's GEMM scratchpad and primitive cache, which grow as shapes are first seen.
 * The measured peak was 5 MiB above plan + start-up for GPT-2 small and medium in fp32
 * (B=4 T=256, B=8 T=1024), an upper bound by about 60 MiB; in bf16 up to 105 MiB above
 * (2026-11-28: GPT-2 small, cs336-small with LoRA, GPT-2 xl), so 128 there
 * (docs/benchmarks.md). */

static const char synopsis[] =
    "usage: handgrad bench [options]             models: forward, backward, step\n"
    "       handgrad bench --attention [options] attention alone: head size x length\n";
static const char about[] =
    "Times each row after warm-up against the sgemm ceiling measured in the same run; a row "
    "whose memory estimate does not fit is skipped, not run.\n";

#define O(field) offsetof(bench_opts, field)
static const cli_opt bench_options[] = {
    {"Models", CLI_SECTION, 0, 0, 0, 0, 0, 0},
    {"model", CLI_STR, O(m.shape.model), "LIST", 0, 0, 0,
     "presets, comma-separated (default small): " CLI_PRESETS},
    {"arch", CLI_STR, O(m.shape.arch), "F=V,...", 0, 0, 0, "config fields over one preset, e.g. n_kv_head=4,mlp=relu2"},
    CLI_OPTS_SHAPE(bench_opts, m.shape.),
    {"layers", CLI_INT, O(m.shape.n_layer), "L", 0, 4096, CLI_HIDDEN, "--n-layer"},
    {"heads", CLI_INT, O(m.shape.n_head), "NH", 0, 65536, CLI_HIDDEN, "--n-head"},
    {"vocab", CLI_INT, O(m.shape.vocab_size), "V", 0, 1 << 24, CLI_HIDDEN, "--vocab-size"},
    {"pass", CLI_STR, O(passes_arg), "LIST", 0, 0, 0,
     "forward, backward, step (default all three); backward is (forward+backward) - forward, step adds "
     "zero_grad and AdamW"},
    CLI_OPTS_DEVICE(bench_opts, m.dev.),
    CLI_OPT_CUDA_GRAPHS(bench_opts, m.dev.),
    CLI_OPT_RECOMPUTE(bench_opts, m.dev.),
    CLI_OPT_BASE_PRECISION(bench_opts, m.dev.),
    CLI_OPT_OPTIM_STATE(bench_opts, m.dev.),
    CLI_OPT_GRAD_PRECISION(bench_opts, m.dev.),
    CLI_OPTS_ADAPT(bench_opts, m.),
    {"Attention (--attention; --n-head NH: heads per cell, default 1)", CLI_SECTION, 0, 0, 0, 0, 0, 0},
    {"attention", CLI_BOOL, O(attention), 0, 0, 1, 0, "time attention alone over head sizes and lengths"},
    {"fit", CLI_BOOL, O(fit), 0, 0, 1, 0,
     "no timing: whether a training step of each --model (default: the GPT-2 and cs336 ladders) fits this "
     "machine in fp32, bf16, bf16 with --recompute block (and with --optim-state bf16 --grad-precision bf16), and "
     "LoRA (r=16, base held in bf16), by the memory plan; ctx default 512"},
    {"head-dims", CLI_INTS, O(head_dims), "LIST", 16, 4096, 0, "head sizes, multiples of 16 (default 16,32,64,128)"},
    {"causal", CLI_SET, O(causal), 0, 1, 0, 0, "causal mask (the default)"},
    {"no-causal", CLI_SET, O(causal), 0, 0, 0, 0, "no mask"},
    {"doc-len", CLI_INT, O(doc_len), "N", 0, 1 << 20, 0,
     "causal: each row packed with documents of N tokens that never attend to each other (0: one a row)"},
    {"window", CLI_INT, O(window), "W", 0, 1 << 20, 0, "causal: a sliding window of W keys (0: none)"},
    {"Both", CLI_SECTION, 0, 0, 0, 0, 0, 0},
    {"batch", CLI_INT, O(m.batch), "B", 1, 1 << 20, 0, "sequences per batch (default 4; attention 8)"},
    {"ctx", CLI_INTS, O(ctx), "LIST", 1, 1 << 20, 0,
     "sequence lengths (default 256; attention 256,1024,4096,8192,16384)"},
    {"threads", CLI_INTS, O(threads), "LIST", 0, 4096, 0, "thread counts, 0: all cores (default 0)"},
    {"warmup", CLI_INT, O(warmup), "N", 0, 1 << 20, 0, "untimed repetitions first, 0 allowed"},
    {"steps", CLI_INT, O(steps), "N", 1, 1 << 20, 0, "timed repetitions"},
    CLI_OPT_SEED(bench_opts, m.),
    {"json", CLI_SET, O(format), 0, OUT_JSON, 0, 0, "one JSON object per row (JSON lines)"},
    {"csv", CLI_SET, O(format), 0, OUT_CSV, 0, 0, "CSV rows (default: a table)"},
    {"plot", CLI_STR, O(plot_dir), "DIR", 0, 0, 0, "also write SVG plots into DIR, created if missing"},
    {"svg", CLI_STR, O(plot_dir), "DIR", 0, 0, CLI_HIDDEN, "--plot"},
};
#undef O

static int parse_passes(const char *s, int *passes) {
    char buf[256];
    snprintf(buf, sizeof buf, "%s", s);
    *passes = 0;
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (!strcmp(tok, "forward")) *passes |= PASS_FORWARD;
        else if (!strcmp(tok, "backward")) *passes |= PASS_BACKWARD;
        else if (!strcmp(tok, "step")) *passes |= PASS_STEP;
        else {
            fprintf(stderr, "handgrad bench: --pass '%s' is unknown (forward, backward, step)\n", tok);
            return CLI_USAGE;
        }
    }
    if (!*passes) fprintf(stderr, "handgrad bench: --pass needs at least one of forward, backward, step\n");
    return *passes ? 0 : CLI_USAGE;
}

static void ints_default(cli_ints *l, const int *v, int n) {
    if (l->n) return;
    memcpy(l->v, v, sizeof *v * (size_t)n);
    l->n = n;
}

/* Parses the flags into o, then checks and resolves them: 0, CLI_HELP or CLI_USAGE. */
static int parse_options(int argc, char **argv, bench_opts *o) {
    memset(o, 0, sizeof *o);
    o->m = cli_model_default();
    o->m.shape.model = NULL, o->m.batch = 0, o->m.ctx = 0;
    o->warmup = 1, o->steps = 3, o->causal = 1;
    cli_cmd cmd = CLI_CMD("bench", synopsis, about, NULL, bench_options, NULL);
    int rc = cli_parse(&cmd, o, argc, argv, NULL);
    if (rc || (rc = cli_device_check("bench", &o->m.dev))) return rc;
    const cli_shape *s = &o->m.shape;
    int explicit_shape = s->n_layer || s->d_model || s->d_ff || s->max_seq_len || s->vocab_size || s->arch ||
                         (s->n_head && !o->attention);
    if (o->attention && (s->model || explicit_shape || o->passes_arg)) {
        fprintf(stderr, "handgrad bench: --attention times attention alone: --model, --pass and model sizes do not apply\n");
        return CLI_USAGE;
    }
    if (!o->attention && o->head_dims.n) {
        fprintf(stderr, "handgrad bench: --head-dims needs --attention\n");
        return CLI_USAGE;
    }
    if (!o->m.batch) o->m.batch = o->attention ? 8 : 4;
    static const int fit_ctx[] = {512};
    if (o->fit) ints_default(&o->ctx, fit_ctx, 1);
    static const int attn_ctx[] = {256, 1024, 4096, 8192, 16384}, model_ctx[] = {256}, all_cores[] = {0},
                     head_dims[] = {16, 32, 64, 128};
    if (o->attention) ints_default(&o->ctx, attn_ctx, 5);
    else ints_default(&o->ctx, model_ctx, 1);
    ints_default(&o->threads, all_cores, 1);
    for (int i = 0; i < o->threads.n; i++)
        if (o->threads.v[i] == 0) o->threads.v[i] = omp_get_num_procs();
    if (o->attention) {
        o->heads = s->n_head ? s->n_head : 1;
        ints_default(&o->head_dims, head_dims, 4);
        for (int i = 0; i < o->head_dims.n; i++)
            if (o->head_dims.v[i] % 16) {
                fprintf(stderr, "handgrad bench: --head-dims %d is not a multiple of 16 (attention tiles are 16-float vectors)\n",
                        o->head_dims.v[i]);
                return CLI_USAGE;
            }
        if (!o->causal && (o->doc_len || o->window)) {
            fprintf(stderr, "handgrad bench: --doc-len and --window are masks of causal attention, not --no-causal\n");
            return CLI_USAGE;
        }
        return 0;
    }
    if (o->doc_len || o->window) {
        fprintf(stderr, "handgrad bench: --doc-len and --window belong to --attention\n");
        return CLI_USAGE;
    }
    if (o->passes_arg) {
        if (parse_passes(o->passes_arg, &o->passes)) return CLI_USAGE;
    } else {
        o->passes = PASS_FORWARD | PASS_BACKWARD | PASS_STEP;
    }
    /* models: a preset list, or one shape (a preset with overrides, or explicit) */
    if (s->model) {
        if (strlen(s->model) >= sizeof o->model_list) {
            fprintf(stderr, "handgrad bench: --model list is too long\n");
            return CLI_USAGE;
        }
        strcpy(o->model_list, s->model);
        for (char *save = NULL, *tok = strtok_r(o->model_list, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
            if (o->nmodels == CLI_LIST_MAX) {
                fprintf(stderr, "handgrad bench: --model takes at most %d presets\n", CLI_LIST_MAX);
                return CLI_USAGE;
            }
            hg_config probe;
            if (hg_config_preset(tok, &probe) != HG_OK) {
                fprintf(stderr, "handgrad bench: %s\n", hg_last_error());
                return CLI_USAGE;
            }
            o->models[o->nmodels++] = tok;
        }
        if (!o->nmodels) {
            fprintf(stderr, "handgrad bench: --model needs at least one preset\n");
            return CLI_USAGE;
        }
    }
    if (explicit_shape) {
        if (o->nmodels > 1) {
            fprintf(stderr, "handgrad bench: explicit sizes override one --model preset, not a list\n");
            return CLI_USAGE;
        }
        cli_shape one = *s;
        one.model = o->nmodels ? o->models[0] : NULL;
        hg_config bare = {.vocab_size = 50257, .max_seq_len = 1024};
        if (cli_shape_config("bench", &one, &bare, &o->explicit_cfg)) return CLI_USAGE;
        if (hg_config_validate(&o->explicit_cfg) != HG_OK) {
            fprintf(stderr, "handgrad bench: %s\n", hg_last_error());
            return CLI_USAGE;
        }
        o->has_explicit = 1;
        o->nmodels = 1;
    } else if (!o->nmodels) {
        o->models[o->nmodels++] = "small";
    }
    return 0;
}

/* ---- one place that builds what a row runs on ---- */

hg_status bench_backend_create(hg_backend **out, int threads, hg_precision precision) {
    return hg_backend_cpu_create(out, threads, precision);
}

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
    double gflop, peak;  /* per call; the GEMM ceiling of the device, threads and precision */
    double sgemm;        /* the sgemm ceiling of these threads (CPU; = peak in fp32) */
    const char *peak_kind; /* bench_peak_kind */
    size_t estimate, rss, avail;
    hg_memory_plan plan; /* the model's, of which estimate is the total */
    int skipped, bf16;
    double trained;      /* parameters an optimizer trains (all but the frozen) */
} model_row;

static const char *pass_name(int pass) {
    return pass == PASS_FORWARD ? "forward" : pass == PASS_BACKWARD ? "backward" : "step";
}

static void print_model_row(const bench_opts *o, const model_case *mc, const model_row *r, int *header) {
    const char *pn = pass_name(r->pass);
    double tps = (double)o->m.batch * r->ctx / r->t.mean, gflops = r->gflop / r->t.mean;
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
    rec_int(&rec, "batch", o->m.batch);
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
    rec_num(&rec, "median_s", r->t.median * run); /* backward rows: forward+backward's less forward's */
    int bw = r->pass == PASS_BACKWARD;
    rec_num(&rec, "forward_backward_mean_s", bw ? r->fb.mean * run : nan);
    rec_num(&rec, "forward_backward_std_s", bw ? r->fb.std * run : nan);
    rec_num(&rec, "tokens_per_s", tps * run);
    rec_num(&rec, "gflop", r->gflop);
    rec_num(&rec, "gflops", gflops * run);
    rec_str(&rec, "precision", r->bf16 ? "bf16" : "fp32");
    rec_str(&rec, "recompute", o->m.dev.recompute ? o->m.dev.recompute : "none");
    rec_str(&rec, "optim_state", o->m.dev.optim_state ? o->m.dev.optim_state : "fp32");
    rec_str(&rec, "grad_precision", o->m.dev.grad_precision ? o->m.dev.grad_precision : "fp32");
    rec_str(&rec, "lora", o->m.lora ? o->m.lora : "");
    rec_str(&rec, "freeze", o->m.freeze ? o->m.freeze : "");
    rec_int(&rec, "trained_params", (long long)r->trained);
    rec_str(&rec, "gemm_peak", r->peak_kind);
    rec_num(&rec, "gemm_peak_gflops", r->peak);
    rec_num(&rec, "sgemm_peak_gflops", r->sgemm);
    rec_num(&rec, "peak_fraction", gflops / r->peak * run);
    rec_int(&rec, "estimate_bytes", (long long)r->estimate);
    rec_int(&rec, "activations_bytes", (long long)r->plan.activations); /* kept for the backward */
    rec_int(&rec, "scratch_bytes", (long long)r->plan.scratch);
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
    for (int w = 0; w < o->warmup && !rc; w++) rc = run_pass(m, pass, tok, tgt, o->m.batch, T, &adamw);
    for (int s = 0; s < o->steps && !rc; s++) {
        double t0 = hg_now();
        rc = run_pass(m, pass, tok, tgt, o->m.batch, T, &adamw);
        t[s] = hg_now() - t0;
    }
    if (!rc) *out = bench_stats(t, o->steps);
    free(t);
    return rc;
}

/* The options were checked before the run (bench_models), so the plan cannot fail. */
static size_t estimate(const hg_config *cfg, const hg_options *opt, size_t baseline, hg_memory_plan *plan) {
    if (hg_memory_required(cfg, opt, plan) != HG_OK) return SIZE_MAX;
    return plan->total + baseline + bench_runtime_allowance(opt->precision);
}

/* A model with frozen parameters runs fewer FLOPs than hg_train_flops counts (no dW
 * product of a frozen weight) and more (its adapters' products): the rows take the
 * FLOPs of the ops the model's step runs (hg_step_op), the forward's from its forward
 * pass, and its trained parameter count. */
static void executed_gflop(const hg_model *m, model_row *rows, int nrows) {
    double step = 0, fwd = 0, trained = 0;
    for (int i = 0; i < hg_step_op_count(m); i++) {
        hg_step_op op;
        hg_step_op_at(m, i, &op);
        step += op.pass == 0 ? op.flops : 0;
        fwd += op.pass == 1 ? op.flops : 0;
    }
    for (int i = 0; i < hg_param_count(m); i++) {
        hg_param_info p;
        hg_param_at(m, i, &p);
        trained += p.frozen ? 0 : (double)p.numel;
    }
    for (int i = 0; i < nrows; i++) {
        model_row *r = &rows[i];
        r->gflop = (r->pass == PASS_FORWARD ? fwd : r->pass == PASS_BACKWARD ? step - fwd : step) / 1e9;
        r->trained = trained;
    }
}

/* Runs every requested pass of one (model, ctx, threads), appending rows to rows[*n]. */
static int run_model(const bench_opts *o, const model_case *mc, int T, int threads, size_t baseline,
                     model_row *rows, int *n, int *header) {
    char attention[1600] = ""; /* the attention kernels the model ran (CUDA) */
    hg_options opt = hg_options_default();
    opt.batch = o->m.batch;
    opt.seq_len = T;
    opt.threads = threads;
    opt.seed = o->m.seed;
    cli_device_options(&o->m.dev, &opt);
    char *freeze = NULL;
    if (cli_model_adapt("bench", &o->m, &mc->cfg, &opt, &freeze)) return 1;
    hg_memory_plan plan_train = {0}, plan_infer = {0};
    size_t need_train = estimate(&mc->cfg, &opt, baseline, &plan_train);
    opt.training = 0;
    size_t need_infer = estimate(&mc->cfg, &opt, baseline, &plan_infer);
    size_t avail = hg_memory_available();
    int trains = (o->passes & (PASS_BACKWARD | PASS_STEP)) && need_train <= avail;
    int infer = !trains && (o->passes & PASS_FORWARD) && need_infer <= avail;
    model_row base = {.params = (double)hg_config_param_count(&mc->cfg, 0), .ctx = T, .threads = threads,
                      .training = trains, .peak = NAN, .sgemm = NAN, .peak_kind = bench_peak_kind(&opt), .avail = avail,
                      .bf16 = opt.precision == HG_PRECISION_BF16};
    hg_options fp32 = opt;
    fp32.precision = HG_PRECISION_FP32;
    if ((trains || infer) && (bench_peak(&opt, &base.peak) || bench_peak(&fp32, &base.sgemm))) return free(freeze), 1;
    base.trained = base.params; /* executed_gflop counts a model with frozen parameters */
    double flop = hg_train_flops(&mc->cfg, o->m.batch, T) / 1e9;
    model_row *r0 = rows + *n;
    for (int p = PASS_FORWARD; p <= PASS_STEP; p <<= 1) {
        if (!(o->passes & p)) continue;
        model_row *r = &rows[(*n)++];
        *r = base;
        r->pass = p;
        r->gflop = p == PASS_FORWARD ? flop / 3 : p == PASS_BACKWARD ? 2 * flop / 3 : flop;
        r->estimate = p == PASS_FORWARD && !trains ? need_infer : need_train;
        r->plan = p == PASS_FORWARD && !trains ? plan_infer : plan_train;
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
            free(freeze);
            return cli_fail("bench");
        } else {
            if (opt.lora.r > 0 || opt.freeze) executed_gflop(m, r0, nrows);
            int32_t *tok = malloc(sizeof(int32_t) * (size_t)o->m.batch * T), *tgt = malloc(sizeof(int32_t) * (size_t)o->m.batch * T);
            if (!tok || !tgt) {
                fprintf(stderr, "handgrad bench: out of memory for tokens\n");
                rc = 1;
            }
            uint64_t x = o->m.seed * 6364136223846793005ull + 1442695040888963407ull;
            for (int i = 0; !rc && i < o->m.batch * T; i++) {
                x = x * 6364136223846793005ull + 1442695040888963407ull;
                tok[i] = (int32_t)((x >> 33) % (uint64_t)mc->cfg.vocab_size);
                x = x * 6364136223846793005ull + 1442695040888963407ull;
                tgt[i] = (int32_t)((x >> 33) % (uint64_t)mc->cfg.vocab_size);
            }
            bench_stat f = {0}, fb = {0}, step = {0};
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
                    r->t.median = fb.median - f.median;
                }
            }
            free(tok);
            free(tgt);
            snprintf(attention, sizeof attention, "%s", hg_model_attention_kernels(m));
            hg_model_free(m);
        }
    }
    free(freeze);
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
        if (attention[0]) printf("%-18s %5s %3s  attention: %s\n", "", "", "", attention);
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
            if (o->ctx.n > 1 || o->threads.n > 1)
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
    snprintf(title, sizeof title, "handgrad, batch %d: time per call against model size", o->m.batch);
    svg_plot pt = {.title = title, .xlabel = "parameters (millions)", .ylabel = "seconds", .logx = 1, .logy = 1,
                   .series = ts, .nseries = ns};
    int rc = bench_write_plot(o->plot_dir, model_plots[0], &pt);
    snprintf(title, sizeof title, "handgrad, batch %d: model GFLOP/s against model size", o->m.batch);
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
        for (int j = 0; j < o->ctx.n; j++) {
            if (o->ctx.v[j] > mc.cfg.max_seq_len) {
                fprintf(stderr, "handgrad bench: --ctx %d is more than %s's max_seq_len %d\n", o->ctx.v[j], mc.name,
                        mc.cfg.max_seq_len);
                return 2;
            }
            hg_options opt = hg_options_default();
            opt.batch = o->m.batch, opt.seq_len = o->ctx.v[j];
            for (int k = 0; k < o->threads.n; k++) opt.threads = o->threads.v[k] > opt.threads ? o->threads.v[k] : opt.threads;
            hg_memory_plan plan;
            char *freeze = NULL;
            int bad = cli_model_adapt("bench", &o->m, &mc.cfg, &opt, &freeze);
            if (!bad && hg_memory_required(&mc.cfg, &opt, &plan) != HG_OK)
                bad = 2, fprintf(stderr, "handgrad bench: %s\n", hg_last_error());
            free(freeze);
            if (bad) return bad;
        }
    }
    if (o->plot_dir && bench_check_plots(o->plot_dir, model_plots, 2)) return 2;
    size_t baseline = bench_rss(); /* the process so far: code, runtimes */
    int maxrows = o->nmodels * o->ctx.n * o->threads.n * 3, n = 0, header = 1, rc = 0;
    model_row *rows = calloc((size_t)maxrows, sizeof *rows);
    if (!rows) {
        fprintf(stderr, "handgrad bench: out of memory\n");
        return 1;
    }
    if (o->format == OUT_TABLE) {
        printf("handgrad bench: batch %d, warmup %d, steps %d\n", o->m.batch, o->warmup, o->steps);
        printf("%-18s %5s %3s  %-14s %6s %10s %9s %10s %9s %8s %11s\n", "Model", "Ctx", "Thr", "Pass", "Warmup",
               "Mean (s)", "Std (s)", "tokens/s", "GFLOP/s", "% peak", "Peak mem");
    }
    for (int i = 0; i < o->nmodels && !rc; i++) {
        model_case mc;
        model_case_at(o, i, &mc);
        for (int j = 0; j < o->ctx.n && !rc; j++)
            for (int k = 0; k < o->threads.n && !rc; k++)
                rc = run_model(o, &mc, o->ctx.v[j], o->threads.v[k], baseline, rows, &n, &header);
    }
    if (!rc && o->format == OUT_TABLE) bench_print_peaks();
    if (!rc) bench_check_peaks();
    if (!rc && o->plot_dir) rc = plot_models(o, rows, n);
    free(rows);
    return rc;
}

int cmd_bench(int argc, char **argv) {
    bench_opts o;
    int rc = parse_options(argc, argv, &o);
    if (rc) return cli_exit(rc);
    return o.attention ? bench_attention(&o) : o.fit ? bench_fit(&o) : bench_models(&o);
}
