/* handgrad profile: runs warm-up plus N training steps with the op profiler attached and
 * prints where the time goes: per op (nsys-style summary), per layer (forward and
 * backward side by side), and totals; optionally a Chrome trace and the memory report. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_io.h"
#include "cli_model.h"
#include "commands.h"
#include "profile.h"

static const char synopsis[] = "usage: handgrad profile [options]\n";
static const char about[] =
    "Times every op of a training step per layer against the GEMM ceiling and the memory bandwidth "
    "measured in the same run; optionally a Chrome trace and a memory report.\n";

typedef struct prof_args {
    cli_model m;
    int warmup, steps, json, memory, plan;
    const char *trace, *plot;
} prof_args;

#define O(field) offsetof(prof_args, field)
static const cli_opt prof_options[] = {
    {"Model", CLI_SECTION, 0, 0, 0, 0, 0, 0},
    CLI_OPTS_MODEL(prof_args, m.shape.),
    CLI_OPTS_SHAPE(prof_args, m.shape.),
    {"Run", CLI_SECTION, 0, 0, 0, 0, 0, 0},
    CLI_OPT_BATCH(prof_args, m.),
    CLI_OPT_CTX(prof_args, m.),
    CLI_OPT_THREADS(prof_args, m.),
    CLI_OPT_SEED(prof_args, m.),
    CLI_OPTS_DEVICE(prof_args, m.dev.),
    CLI_OPT_CUDA_GRAPHS(prof_args, m.dev.),
    CLI_OPT_RECOMPUTE(prof_args, m.dev.),
    CLI_OPT_BASE_PRECISION(prof_args, m.dev.),
    CLI_OPT_OPTIM_STATE(prof_args, m.dev.),
    CLI_OPT_GRAD_PRECISION(prof_args, m.dev.),
    CLI_OPTS_ADAPT(prof_args, m.),
    {"warmup", CLI_INT, O(warmup), "N", 0, 1 << 20, 0, "untimed steps first"},
    {"steps", CLI_INT, O(steps), "N", 1, 1 << 20, 0, "profiled training steps"},
    {"Output", CLI_SECTION, 0, 0, 0, 0, 0, 0},
    {"json", CLI_BOOL, O(json), 0, 0, 1, 0, "one JSON object instead of tables"},
    {"trace", CLI_STR, O(trace), "FILE", 0, 0, 0, "write a Chrome trace (chrome://tracing, Perfetto)"},
    {"memory", CLI_BOOL, O(memory), 0, 0, 1, 0, "the memory report: bytes by category, peaks, live activations"},
    {"memory-plot", CLI_STR, O(plot), "FILE", 0, 0, 0, "an SVG of live activation bytes over the step"},
    {"plan", CLI_BOOL, O(plan), 0, 0, 1, 0,
     "print the step as the model plans it (each op, what it reads and writes; each buffer's copies and whether it "
     "is kept) instead of timing it"},
};
#undef O

/* Statistics of one row of the per-op table: every instance of an op kind and pass. */
typedef struct op_row {
    const char *name;
    hg_prof_pass pass;
    int gemm, flop_bound;
    double *dur; /* (n) seconds */
    int n, cap;
    double total, flops, bytes;
} op_row;

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int by_total(const void *a, const void *b) {
    double x = ((const op_row *)a)->total, y = ((const op_row *)b)->total;
    return (x < y) - (x > y);
}

/* Groups the op events of timed steps by name; rows sorted by total time, largest first. */
static op_row *op_rows(const prof_run *r, int *nrows) {
    op_row *rows = calloc((size_t)r->nev + 1, sizeof *rows);
    int n = 0;
    for (int i = 0; rows && i < r->nev; i++) {
        const hg_prof_event *e = &r->ev[i];
        if (e->region || e->step < 0) continue;
        int k = 0;
        while (k < n && strcmp(rows[k].name, e->name)) k++;
        op_row *row = &rows[k];
        if (k == n) {
            *row = (op_row){.name = e->name, .pass = e->pass, .gemm = e->gemm, .flop_bound = e->flop_bound};
            n++;
        }
        if (row->n == row->cap) {
            row->cap = row->cap ? 2 * row->cap : 64;
            double *grown = realloc(row->dur, sizeof(double) * (size_t)row->cap);
            if (!grown) {
                for (int q = 0; q < n; q++) free(rows[q].dur);
                free(rows);
                return NULL;
            }
            row->dur = grown;
        }
        double d = e->end - e->start;
        row->dur[row->n++] = d;
        row->total += d;
        row->flops += e->flops;
        row->bytes += e->bytes;
    }
    if (rows) qsort(rows, (size_t)n, sizeof *rows, by_total);
    *nrows = n;
    return rows;
}

typedef struct row_stats {
    double avg, med, min, max, std, rate; /* rate: GFLOP/s or GB/s */
    double ceiling_pct; /* rate as a share of the run's GEMM peak or bandwidth; <0: none */
} row_stats;

static row_stats stats_of(const prof_run *r, op_row *row) {
    row_stats s = {.avg = row->total / row->n};
    qsort(row->dur, (size_t)row->n, sizeof(double), cmp_double);
    s.min = row->dur[0];
    s.max = row->dur[row->n - 1];
    s.med = row->n % 2 ? row->dur[row->n / 2] : 0.5 * (row->dur[row->n / 2 - 1] + row->dur[row->n / 2]);
    for (int i = 0; i < row->n; i++) s.std += (row->dur[i] - s.avg) * (row->dur[i] - s.avg);
    s.std = row->n > 1 ? sqrt(s.std / (row->n - 1)) : 0.0;
    s.rate = row->total > 0 ? (row->flop_bound ? row->flops : row->bytes) / row->total / 1e9 : 0.0;
    double ceiling = row->flop_bound ? r->peak_gflops : r->bandwidth_gbps;
    s.ceiling_pct = ceiling > 0 ? 100 * s.rate / ceiling : -1;
    return s;
}

/* Per-step totals over the timed steps. */
typedef struct totals {
    double step_mean, step_std, ops, forward, backward, optimizer, gemm;
} totals;

static totals totals_of(const prof_run *r) {
    totals t = {0};
    double sq = 0;
    int nstep = 0;
    for (int i = 0; i < r->nev; i++) {
        const hg_prof_event *e = &r->ev[i];
        double d = e->end - e->start;
        if (e->step < 0) continue;
        if (e->region) {
            if (e->pass == HG_PASS_STEP) t.step_mean += d, sq += d * d, nstep++;
            continue;
        }
        t.ops += d;
        if (e->gemm) t.gemm += d;
        if (e->pass == HG_PASS_FORWARD) t.forward += d;
        else if (e->pass == HG_PASS_BACKWARD) t.backward += d;
        else t.optimizer += d;
    }
    double n = nstep > 0 ? nstep : 1;
    t.step_std = nstep > 1 ? sqrt(fmax(0.0, (sq - t.step_mean * t.step_mean / n) / (n - 1))) : 0.0;
    t.step_mean /= n, t.ops /= n, t.gemm /= n, t.forward /= n, t.backward /= n, t.optimizer /= n;
    return t;
}

/* Forward and backward seconds per step of layer slot s: 0 the embedding, 1..L the
 * blocks, L+1 the classifier. */
static void layer_times(const prof_run *r, double *fwd, double *bwd) {
    const int L = r->cfg.n_layer;
    memset(fwd, 0, sizeof(double) * (size_t)(L + 2));
    memset(bwd, 0, sizeof(double) * (size_t)(L + 2));
    for (int i = 0; i < r->nev; i++) {
        const hg_prof_event *e = &r->ev[i];
        if (e->region || e->step < 0 || e->layer < -1 || e->layer > L) continue;
        if (e->pass == HG_PASS_FORWARD) fwd[e->layer + 1] += (e->end - e->start) / r->steps;
        if (e->pass == HG_PASS_BACKWARD) bwd[e->layer + 1] += (e->end - e->start) / r->steps;
    }
}

static void print_tables(const prof_run *r, op_row *rows, int nrows) {
    const int L = r->cfg.n_layer;
    totals t = totals_of(r);
    printf("handgrad profile: %s, batch %d, ctx %d, %d threads, %s, warmup %d, %d profiled steps\n\n", r->preset, r->B,
           r->T, r->threads, r->opt.precision == HG_PRECISION_BF16 ? "bf16" : "fp32", r->warmup, r->steps);
    printf("ceilings, measured after the steps: %sGEMM peak %.1f GF/s",
           r->opt.precision == HG_PRECISION_BF16 ? "bf16 " : "", r->peak_gflops);
    if (r->bandwidth_gbps > 0) printf(", memory bandwidth %.1f GB/s (triad)", r->bandwidth_gbps);
    printf("; Ceil%%: an op's rate as a share of the one its kind is bound by\n");
    const char *att = hg_model_attention_kernels(r->m);
    if (*att) printf("attention kernels: %s\n", att);
    printf("\n");
    printf("per op, over %d steps (times in ms)\n", r->steps);
    printf(" %6s %11s %9s %10s %10s %10s %10s %10s %14s %6s  %s\n", "Time%", "Total", "Instances", "Avg", "Med", "Min",
           "Max", "StdDev", "Rate", "Ceil%", "Op");
    for (int k = 0; k < nrows; k++) {
        row_stats s = stats_of(r, &rows[k]);
        char ceil[16] = "-";
        if (s.ceiling_pct >= 0) snprintf(ceil, sizeof ceil, "%.0f%%", s.ceiling_pct);
        printf(" %5.1f%% %11.3f %9d %10.3f %10.3f %10.3f %10.3f %10.3f %8.1f %-5s %6s  %s\n",
               100 * rows[k].total / (t.ops * r->steps), 1e3 * rows[k].total, rows[k].n, 1e3 * s.avg, 1e3 * s.med,
               1e3 * s.min, 1e3 * s.max, 1e3 * s.std, s.rate, rows[k].flop_bound ? "GF/s" : "GB/s", ceil, rows[k].name);
    }
    double *fwd = malloc(sizeof(double) * (size_t)(L + 2)), *bwd = malloc(sizeof(double) * (size_t)(L + 2));
    if (fwd && bwd) {
        layer_times(r, fwd, bwd);
        printf("\nper layer (ms per step)\n  %-12s %10s %10s %10s %8s %7s\n", "layer", "forward", "backward", "total",
               "bwd/fwd", "share");
        for (int s = 0; s < L + 2; s++) {
            char name[32];
            profile_layer_name(name, sizeof name, s - 1, L);
            printf("  %-12s %10.3f %10.3f %10.3f %8.2f %6.1f%%\n", name, 1e3 * fwd[s], 1e3 * bwd[s],
                   1e3 * (fwd[s] + bwd[s]), fwd[s] > 0 ? bwd[s] / fwd[s] : 0.0, 100 * (fwd[s] + bwd[s]) / t.step_mean);
        }
    }
    free(fwd);
    free(bwd);
    printf("\ntotals (ms per step)\n");
    printf("  step        %10.3f  (std %.3f)\n", 1e3 * t.step_mean, 1e3 * t.step_std);
    printf("  forward     %10.3f  %5.1f%%\n", 1e3 * t.forward, 100 * t.forward / t.step_mean);
    printf("  backward    %10.3f  %5.1f%%   backward/forward %.2f\n", 1e3 * t.backward, 100 * t.backward / t.step_mean,
           t.forward > 0 ? t.backward / t.forward : 0.0);
    printf("  optimizer   %10.3f  %5.1f%%   (zero_grad, grad norm, adamw)\n", 1e3 * t.optimizer,
           100 * t.optimizer / t.step_mean);
    printf("  outside ops %10.3f  %5.1f%%   (input checks, loss readback, hooks)\n", 1e3 * (t.step_mean - t.ops),
           100 * (t.step_mean - t.ops) / t.step_mean);
    printf("  GEMMs       %10.3f  %5.1f%% of op time; outside GEMMs %.1f%%\n", 1e3 * t.gemm, 100 * t.gemm / t.ops,
           100 * (1 - t.gemm / t.ops));
}

static cJSON *json_tables(const prof_run *r, op_row *rows, int nrows) {
    const int L = r->cfg.n_layer;
    totals t = totals_of(r);
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "model", r->preset);
    cJSON_AddNumberToObject(j, "batch", r->B);
    cJSON_AddNumberToObject(j, "ctx", r->T);
    cJSON_AddNumberToObject(j, "threads", r->threads);
    cJSON_AddNumberToObject(j, "warmup", r->warmup);
    cJSON_AddNumberToObject(j, "steps", r->steps);
    cJSON_AddNumberToObject(j, "dropped_events", (double)hg_profiler_dropped(r->p));
    cJSON *cj = cJSON_AddObjectToObject(j, "ceilings");
    cJSON_AddNumberToObject(cj, "gemm_gflops", r->peak_gflops);
    cJSON_AddStringToObject(cj, "attention_kernels", hg_model_attention_kernels(r->m));
    if (r->bandwidth_gbps > 0) cJSON_AddNumberToObject(cj, "memory_gbps", r->bandwidth_gbps);
    cJSON *tj = cJSON_AddObjectToObject(j, "totals");
    cJSON_AddNumberToObject(tj, "step_s", t.step_mean);
    cJSON_AddNumberToObject(tj, "step_std_s", t.step_std);
    cJSON_AddNumberToObject(tj, "ops_s", t.ops);
    cJSON_AddNumberToObject(tj, "forward_s", t.forward);
    cJSON_AddNumberToObject(tj, "backward_s", t.backward);
    cJSON_AddNumberToObject(tj, "optimizer_s", t.optimizer);
    cJSON_AddNumberToObject(tj, "gemm_s", t.gemm);
    cJSON_AddNumberToObject(tj, "outside_gemm_share", t.ops > 0 ? 1 - t.gemm / t.ops : 0);
    cJSON *ops = cJSON_AddArrayToObject(j, "ops");
    for (int k = 0; k < nrows; k++) {
        row_stats s = stats_of(r, &rows[k]);
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "name", rows[k].name);
        cJSON_AddStringToObject(o, "pass", profile_pass_name(rows[k].pass));
        cJSON_AddBoolToObject(o, "gemm", rows[k].gemm);
        cJSON_AddNumberToObject(o, "time_pct", 100 * rows[k].total / (t.ops * r->steps));
        cJSON_AddNumberToObject(o, "total_s", rows[k].total);
        cJSON_AddNumberToObject(o, "instances", rows[k].n);
        cJSON_AddNumberToObject(o, "avg_s", s.avg);
        cJSON_AddNumberToObject(o, "med_s", s.med);
        cJSON_AddNumberToObject(o, "min_s", s.min);
        cJSON_AddNumberToObject(o, "max_s", s.max);
        cJSON_AddNumberToObject(o, "std_s", s.std);
        cJSON_AddNumberToObject(o, rows[k].flop_bound ? "gflops" : "gbps", s.rate);
        if (s.ceiling_pct >= 0) cJSON_AddNumberToObject(o, "ceiling_pct", s.ceiling_pct);
        cJSON_AddItemToArray(ops, o);
    }
    double *fwd = malloc(sizeof(double) * (size_t)(L + 2)), *bwd = malloc(sizeof(double) * (size_t)(L + 2));
    cJSON *layers = cJSON_AddArrayToObject(j, "layers");
    if (fwd && bwd) {
        layer_times(r, fwd, bwd);
        for (int s = 0; s < L + 2; s++) {
            char name[32];
            profile_layer_name(name, sizeof name, s - 1, L);
            cJSON *o = cJSON_CreateObject();
            cJSON_AddStringToObject(o, "name", name);
            cJSON_AddNumberToObject(o, "layer", s - 1);
            cJSON_AddNumberToObject(o, "forward_s", fwd[s]);
            cJSON_AddNumberToObject(o, "backward_s", bwd[s]);
            cJSON_AddItemToArray(layers, o);
        }
    }
    free(fwd);
    free(bwd);
    return j;
}

/* A training step as bench times it, between step marks. */
static hg_status train_step(const prof_run *r, const int32_t *tok, const int32_t *tgt, const hg_adamw *a) {
    float loss;
    hg_profiler_step_begin(r->p);
    hg_status s = hg_zero_grad(r->m);
    if (s == HG_OK) s = hg_forward_backward(r->m, tok, tgt, r->B, r->T, 1.0f, &loss);
    if (s == HG_OK) s = hg_optimizer_step(r->m, a, NULL);
    hg_profiler_step_end(r->p);
    return s;
}

/* Events a step records: about 30 per block, one AdamW call per parameter tensor, two
 * per classifier chunk (at least 16 rows each), and the regions. */
static int events_per_step(const prof_run *r) {
    return 30 * r->cfg.n_layer + hg_param_count(r->m) + 2 * (r->B * r->T / 16 + 1) + 64;
}

int cmd_profile(int argc, char **argv) {
    prof_args a = {.m = cli_model_default(), .warmup = 1, .steps = 3};
    cli_cmd cmd = CLI_CMD("profile", synopsis, about, NULL, prof_options, NULL);
    int parsed = cli_parse(&cmd, &a, argc, argv, NULL);
    if (parsed) return cli_exit(parsed);
    /* output paths first: a bad one fails now, not after the run */
    if ((a.trace && cli_check_writable("profile", "--trace", a.trace)) ||
        (a.plot && cli_check_writable("profile", "--memory-plot", a.plot)))
        return 2;
    const char *trace = a.trace, *plot = a.plot;
    int json = a.json, memory = a.memory || plot;
    prof_run r = {.warmup = a.warmup, .steps = a.steps};
    int rc;
    char *freeze = NULL;
    if (cli_model_setup("profile", &a.m, 1, &r.cfg, &r.opt)) return 2;
    if ((rc = cli_model_adapt("profile", &a.m, &r.cfg, &r.opt, &freeze))) return rc;
    r.preset = a.m.shape.model ? a.m.shape.model : "custom", r.B = r.opt.batch, r.T = r.opt.seq_len;

    rc = 1;
    int32_t *tok = malloc(sizeof(int32_t) * (size_t)r.B * r.T), *tgt = malloc(sizeof(int32_t) * (size_t)r.B * r.T);
    op_row *rows = NULL;
    int nrows = 0;
    if (!tok || !tgt) {
        fprintf(stderr, "handgrad profile: out of memory\n");
        goto done;
    }
    cli_random_batch((uint64_t)a.m.seed, r.cfg.vocab_size, r.B * r.T, tok, tgt);
    prof_rss rss = {.baseline = profile_peak_rss()};
    if (memory && profile_measure_forward(&r, tok, tgt, &rss)) goto done;
    profile_reset_peak_rss();
    hg_status st = hg_model_create(&r.m, &r.cfg, &r.opt);
    if (st != HG_OK) {
        char what[300], why[1400];
        snprintf(what, sizeof what, "--model %s", r.preset);
        fprintf(stderr, "handgrad profile: %s\n", cli_model_why(&r.opt, what, why, sizeof why));
        goto done;
    }
    r.threads = hg_model_options(r.m)->threads;
    if (a.plan) {
        rc = profile_plan(r.m, stdout);
        goto done;
    }
    if (hg_profiler_create(&r.p, events_per_step(&r) * r.steps) != HG_OK || hg_model_set_profiler(r.m, r.p) != HG_OK) {
        rc = cli_fail("profile");
        goto done;
    }
    hg_adamw adamw = hg_adamw_default();
    for (int s = 0; s < r.warmup + r.steps; s++) {
        if (s == r.warmup) hg_profiler_reset(r.p); /* warm-up ran the hooks too, untimed */
        if (train_step(&r, tok, tgt, &adamw) != HG_OK) {
            rc = cli_fail("profile");
            goto done;
        }
    }
    hg_model_set_profiler(r.m, NULL);
    rss.train_peak = profile_peak_rss();
    if (hg_gemm_peak_gflops(&r.opt, &r.peak_gflops) != HG_OK ||
        (r.opt.device == HG_DEVICE_CPU && hg_memory_bandwidth(r.threads, &r.bandwidth_gbps) != HG_OK)) {
        rc = cli_fail("profile");
        goto done;
    }
    if (hg_profiler_dropped(r.p)) {
        fprintf(stderr, "handgrad profile: the event buffer overflowed (%lld events dropped)\n",
                (long long)hg_profiler_dropped(r.p));
        goto done;
    }
    r.nev = hg_profiler_count(r.p);
    r.ev = malloc(sizeof *r.ev * (size_t)(r.nev + 1));
    for (int i = 0; r.ev && i < r.nev; i++) hg_profiler_event(r.p, i, &r.ev[i]);
    if (r.ev) rows = op_rows(&r, &nrows);
    if (!r.ev || !rows) {
        fprintf(stderr, "handgrad profile: out of memory\n");
        goto done;
    }
    if (json) {
        cJSON *j = json_tables(&r, rows, nrows);
        if (memory && profile_memory(&r, &rss, NULL, j, plot)) {
            cJSON_Delete(j);
            goto done;
        }
        char *s = cJSON_Print(j);
        if (s) puts(s);
        free(s);
        cJSON_Delete(j);
    } else {
        print_tables(&r, rows, nrows);
        if (memory && profile_memory(&r, &rss, stdout, NULL, plot)) goto done;
    }
    if (trace && profile_write_trace(&r, trace)) {
        fprintf(stderr, "handgrad profile: --trace %s: %s\n", trace, strerror(errno));
        goto done;
    }
    rc = 0;
done:
    for (int k = 0; rows && k < nrows; k++) free(rows[k].dur);
    free(rows);
    free(r.ev);
    hg_model_free(r.m);
    hg_profiler_free(r.p);
    free(tok);
    free(tgt);
    free(freeze);
    return rc;
}
