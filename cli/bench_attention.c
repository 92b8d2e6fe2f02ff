/* handgrad bench --attention: the backend's attention op alone, forward and backward,
 * over head size x sequence length, on random inputs (never zeros).
 *
 * FLOPs are counted as FlashAttention counts them: forward 4*B*NH*T^2*hs, halved when
 * causal; backward 2.5x forward. Under --doc-len or --window, T^2 / 2 becomes the
 * (query, key) pairs the mask leaves visible. The share of the sgemm ceiling uses the ceiling measured
 * at the start of the same run. Memory per cell: the bytes the op touches (q, k, v, out,
 * lse, their gradients and the op's scratch) and the process's peak resident set while
 * the cell ran. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "bench.h"
#include "cli_io.h"
#include "core/table.h"
#include "core/timer.h"

/* Beyond the op's own buffers: the OpenMP runtime and per-thread stacks. */
#define ATTENTION_ALLOWANCE ((size_t)64 << 20)

typedef struct att_cell {
    int hs, T, threads;
    bench_stat fwd, bwd; /* seconds */
    double fwd_flop, bwd_flop, peak;
    size_t op_bytes, rss, need, avail;
    int skipped;
} att_cell;

static void fill_uniform(float *x, size_t n, uint64_t *state) {
    uint64_t s = *state;
    for (size_t i = 0; i < n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = (float)(s >> 40) * (2.0f / 16777216.0f) - 1.0f; /* [-1, 1) */
    }
    *state = s;
}

/* n values of the backend's compute type at p, uniform as fill_uniform draws them. */
static void fill_compute(hg_backend *be, float *p, size_t n, uint64_t *state) {
    float tmp[4096];
    for (size_t at = 0; at < n; at += 4096) {
        size_t m = n - at < 4096 ? n - at : 4096;
        fill_uniform(tmp, m, state);
        be->ops->to_compute(be, (char *)p + at * hg_precision_bytes(be->precision), tmp, m);
    }
}

static int run_cell(const bench_opts *o, hg_backend *be, att_cell *c, size_t baseline) {
    hg_attention_shape s = {o->m.batch, c->T, o->heads, c->hs, o->causal, 0, 0, o->window, NULL};
    int32_t *pos = NULL; /* packed documents of doc_len tokens, the last one cut */
    if (o->doc_len > 0 && !(pos = malloc(sizeof(int32_t) * (size_t)o->m.batch * c->T))) {
        fprintf(stderr, "handgrad bench: out of memory\n");
        return 1;
    }
    for (size_t i = 0; pos && i < (size_t)o->m.batch * c->T; i++) pos[i] = (int32_t)(i % (size_t)c->T % o->doc_len);
    s.pos = pos;
    size_t C = (size_t)o->heads * c->hs, nqkv = (size_t)o->m.batch * c->T * 3 * C, nout = (size_t)o->m.batch * c->T * C;
    size_t nlse = (size_t)o->m.batch * o->heads * c->T, scratch = be->ops->attention_scratch_bytes(be, &s);
    const size_t E = hg_precision_bytes(be->precision); /* q, k, v, out and their gradients */
    c->op_bytes = E * (2 * nqkv + 2 * nout) + sizeof(float) * nlse + scratch;
    c->need = c->op_bytes + baseline + ATTENTION_ALLOWANCE;
    c->avail = hg_memory_available();
    double fwd = 4.0 * o->m.batch * o->heads * (double)c->T * c->T * c->hs * (o->causal ? 0.5 : 1.0);
    if (pos || s.window > 0) fwd = 2.0 * hg_attention_pair_flops(&s);
    c->fwd_flop = fwd, c->bwd_flop = 2.5 * fwd;
    if (c->need > c->avail) {
        c->skipped = 1;
        free(pos);
        return 0;
    }
    hg_options popt = hg_options_default();
    popt.threads = c->threads;
    popt.precision = be->precision;
    if (bench_peak(&popt, &c->peak)) {
        free(pos);
        return 1;
    }
    bench_reset_peak_rss();
    float *qkv = hg_aligned_alloc(nqkv * E), *dqkv = hg_aligned_alloc(nqkv * E), *out = hg_aligned_alloc(nout * E);
    float *dout = hg_aligned_alloc(nout * E), *lse = hg_aligned_alloc(nlse * 4), *work = hg_aligned_alloc(scratch);
    double *t = malloc(sizeof(double) * 2 * (size_t)o->steps);
    int rc = 0;
    if (!qkv || !dqkv || !out || !dout || !lse || !work || !t) {
        c->skipped = 1; /* the estimate said it fits; memory went elsewhere */
    } else {
        uint64_t state = o->m.seed * 0x9E3779B97F4A7C15ull + (uint64_t)c->T * 131 + (uint64_t)c->hs;
        fill_compute(be, qkv, nqkv, &state);
        fill_compute(be, dout, nout, &state);
        for (int i = 0; i < o->warmup + o->steps && !rc; i++) {
            double t0 = hg_now();
            rc = be->ops->attention_forward(be, out, lse, qkv, &s, work) != HG_OK;
            double t1 = hg_now();
            rc = rc || be->ops->attention_backward(be, dqkv, dout, qkv, out, lse, &s, work) != HG_OK;
            double t2 = hg_now();
            if (i >= o->warmup) t[i - o->warmup] = t1 - t0, t[o->steps + i - o->warmup] = t2 - t1;
        }
        if (rc) cli_fail("bench");
        c->fwd = bench_stats(t, o->steps);
        c->bwd = bench_stats(t + o->steps, o->steps);
        c->rss = bench_peak_rss();
    }
    hg_aligned_free(qkv), hg_aligned_free(dqkv), hg_aligned_free(out), hg_aligned_free(dout);
    hg_aligned_free(lse), hg_aligned_free(work);
    free(t), free(pos);
    return rc;
}

static void print_cell(const bench_opts *o, const att_cell *c, int *header) {
    double ftf = c->fwd_flop / c->fwd.mean / 1e12, btf = c->bwd_flop / c->bwd.mean / 1e12;
    double tf = (c->fwd_flop + c->bwd_flop) / (c->fwd.mean + c->bwd.mean) / 1e12, frac = tf * 1e3 / c->peak;
    if (o->format == OUT_TABLE) {
        printf("%8d %6d %3d", c->hs, c->T, c->threads);
        if (c->skipped)
            printf("  skipped: needs %.1f GiB, have %.1f GiB\n", bench_gib(c->need), bench_gib(c->avail));
        else
            printf(" %10.3f %8.3f %10.3f %8.3f %7.3f %7.3f %7.1f%% %9.1f %9.1f\n", 1e3 * c->fwd.mean, 1e3 * c->fwd.std,
                   1e3 * c->bwd.mean, 1e3 * c->bwd.std, ftf, btf, 100 * frac, c->op_bytes / 1048576.0,
                   c->rss / 1048576.0);
        return;
    }
    double run = c->skipped ? NAN : 1.0;
    bench_rec r = {.n = 0};
    rec_str(&r, "kind", "attention");
    rec_int(&r, "head_dim", c->hs);
    rec_int(&r, "heads", o->heads);
    rec_int(&r, "batch", o->m.batch);
    rec_int(&r, "ctx", c->T);
    rec_int(&r, "threads", c->threads);
    rec_bool(&r, "causal", o->causal);
    rec_int(&r, "doc_len", o->doc_len);
    rec_int(&r, "window", o->window);
    rec_int(&r, "warmup", o->warmup);
    rec_int(&r, "steps", o->steps);
    rec_bool(&r, "skipped", c->skipped);
    char note[96] = "";
    if (c->skipped) snprintf(note, sizeof note, "skipped: needs %.1f GiB, have %.1f GiB", bench_gib(c->need), bench_gib(c->avail));
    rec_str(&r, "note", note);
    rec_num(&r, "forward_ms", 1e3 * c->fwd.mean * run);
    rec_num(&r, "forward_std_ms", 1e3 * c->fwd.std * run);
    rec_num(&r, "backward_ms", 1e3 * c->bwd.mean * run);
    rec_num(&r, "backward_std_ms", 1e3 * c->bwd.std * run);
    rec_num(&r, "forward_gflop", c->fwd_flop / 1e9);
    rec_num(&r, "backward_gflop", c->bwd_flop / 1e9);
    rec_num(&r, "forward_tflops", ftf * run);
    rec_num(&r, "backward_tflops", btf * run);
    rec_num(&r, "tflops", tf * run);
    rec_str(&r, "precision", o->m.dev.precision);
    rec_num(&r, "gemm_peak_gflops", c->peak);
    rec_num(&r, "peak_fraction", frac * run);
    rec_int(&r, "op_bytes", (long long)c->op_bytes);
    if (c->skipped) rec_null(&r, "peak_rss_bytes");
    else rec_int(&r, "peak_rss_bytes", (long long)c->rss);
    rec_int(&r, "available_bytes", (long long)c->avail);
    rec_print(&r, o->format, header);
}

static const char *const attention_plots[] = {"attention_time.svg", "attention_memory.svg"};

/* Time and memory against T: one series per (head size, threads) and direction. */
static int plot_cells(const bench_opts *o, const att_cell *cells, int n) {
    enum { MAXS = 24 };
    static double x[MAXS][BENCH_MAX_LIST], y[4][MAXS][BENCH_MAX_LIST];
    svg_series ts[2 * MAXS], ms[2 * MAXS];
    char labels[4][MAXS][48];
    int ns = 0, key[MAXS][2];
    for (int i = 0; i < n; i++) {
        const att_cell *c = &cells[i];
        int s = 0;
        while (s < ns && !(key[s][0] == c->hs && key[s][1] == c->threads)) s++;
        if (s == ns) {
            if (ns == MAXS) continue;
            key[s][0] = c->hs, key[s][1] = c->threads;
            char thr[24] = "";
            if (o->threads.n > 1) snprintf(thr, sizeof thr, ", %d thr", c->threads);
            snprintf(labels[0][s], 48, "forward d=%d%s", c->hs, thr);
            snprintf(labels[1][s], 48, "backward d=%d%s", c->hs, thr);
            snprintf(labels[2][s], 48, "op memory d=%d%s", c->hs, thr);
            snprintf(labels[3][s], 48, "peak RSS d=%d%s", c->hs, thr);
            ns++;
        }
        int k = 0;
        while (k < BENCH_MAX_LIST && x[s][k] != 0 && x[s][k] != c->T) k++;
        if (k == BENCH_MAX_LIST) continue;
        x[s][k] = c->T;
        y[0][s][k] = c->skipped ? NAN : 1e3 * c->fwd.mean;
        y[1][s][k] = c->skipped ? NAN : 1e3 * c->bwd.mean;
        y[2][s][k] = c->op_bytes / 1048576.0;
        y[3][s][k] = c->skipped ? NAN : c->rss / 1048576.0;
    }
    for (int s = 0; s < ns; s++) {
        int k = 0;
        while (k < BENCH_MAX_LIST && x[s][k] != 0) k++;
        ts[2 * s] = (svg_series){labels[0][s], x[s], y[0][s], k, 0, 1};
        ts[2 * s + 1] = (svg_series){labels[1][s], x[s], y[1][s], k, 1, 1};
        ms[2 * s] = (svg_series){labels[2][s], x[s], y[2][s], k, 0, 1};
        ms[2 * s + 1] = (svg_series){labels[3][s], x[s], y[3][s], k, 1, 1};
    }
    char title[160];
    snprintf(title, sizeof title, "handgrad attention, batch %d, %d head%s, %s: time against T", o->m.batch, o->heads,
             o->heads > 1 ? "s" : "", o->causal ? "causal" : "not causal");
    svg_plot pt = {.title = title, .xlabel = "sequence length T", .ylabel = "milliseconds", .logx = 1, .logy = 1,
                   .series = ts, .nseries = 2 * ns};
    int rc = bench_write_plot(o->plot_dir, attention_plots[0], &pt);
    snprintf(title, sizeof title, "handgrad attention, batch %d: memory against T", o->m.batch);
    svg_plot pm = {.title = title, .xlabel = "sequence length T", .ylabel = "MiB", .logx = 1, .logy = 1,
                   .series = ms, .nseries = 2 * ns};
    return rc | bench_write_plot(o->plot_dir, attention_plots[1], &pm);
}

int bench_attention(const bench_opts *o) {
    if (o->plot_dir && bench_check_plots(o->plot_dir, attention_plots, 2)) return 2;
    size_t baseline = bench_rss();
    int n = 0, header = 1, rc = 0;
    att_cell *cells = calloc((size_t)o->head_dims.n * o->ctx.n * o->threads.n, sizeof *cells);
    if (!cells) {
        fprintf(stderr, "handgrad bench: out of memory\n");
        return 1;
    }
    if (o->format == OUT_TABLE) {
        char mask[96] = "";
        if (o->doc_len > 0) snprintf(mask, sizeof mask, ", documents of %d", o->doc_len);
        if (o->window > 0) snprintf(mask + strlen(mask), sizeof mask - strlen(mask), ", window %d", o->window);
        printf("handgrad bench --attention: batch %d, %d head%s, %s%s, %s, warmup %d, steps %d\n", o->m.batch,
               o->heads, o->heads > 1 ? "s" : "", o->causal ? "causal" : "not causal", mask, o->m.dev.precision,
               o->warmup, o->steps);
        printf("TFLOP/s counted as FlashAttention does (forward 4BT^2d%s, backward 2.5x); %% peak is forward+backward\n",
               o->causal ? "/2" : "");
        printf("%8s %6s %3s %10s %8s %10s %8s %7s %7s %8s %9s %9s\n", "Head dim", "Ctx", "Thr", "Fwd (ms)", "Std",
               "Bwd (ms)", "Std", "Fwd TF", "Bwd TF", "% peak", "Op MiB", "Peak MiB");
    }
    for (int k = 0; k < o->threads.n && !rc; k++) {
        hg_backend *be;
        hg_precision p = strcmp(o->m.dev.precision, "bf16") ? HG_PRECISION_FP32 : HG_PRECISION_BF16;
        if (bench_backend_create(&be, o->threads.v[k], p) != HG_OK) {
            rc = cli_fail("bench");
            break;
        }
        for (int i = 0; i < o->head_dims.n && !rc; i++)
            for (int j = 0; j < o->ctx.n && !rc; j++) {
                att_cell *c = &cells[n++];
                *c = (att_cell){.hs = o->head_dims.v[i], .T = o->ctx.v[j], .threads = o->threads.v[k], .peak = NAN};
                rc = run_cell(o, be, c, baseline);
                if (!rc) print_cell(o, c, &header);
            }
        be->ops->destroy(be);
    }
    if (!rc && o->format == OUT_TABLE) bench_print_peaks();
    if (!rc) bench_check_peaks();
    if (!rc && o->plot_dir) rc = plot_cells(o, cells, n);
    free(cells);
    return rc;
}
