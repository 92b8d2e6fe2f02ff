/* handgrad bench, shared between its two modes: the model ladder (cmd_bench.c) and the
 * attention sweep (bench_attention.c). Options, timing statistics, memory figures, and
 * the rows every mode prints as a table, JSON lines or CSV (bench_out.c). */
#ifndef HG_CLI_BENCH_H
#define HG_CLI_BENCH_H

#include <stddef.h>
#include <stdint.h>

#include "cli_model.h"
#include "handgrad.h"
#include "svg.h"

typedef struct hg_backend hg_backend;

#define BENCH_MAX_LIST CLI_LIST_MAX

typedef enum { OUT_TABLE, OUT_JSON, OUT_CSV } bench_format;

typedef struct bench_opts {
    /* the flags (the table in cmd_bench.c) */
    int attention;                      /* 1: the attention sweep instead of the ladder */
    int fit;                            /* 1: the memory plans of the ladder instead */
    cli_model m;                        /* m.shape.model: a comma-separated preset list;
                                           m.shape.n_head: heads per attention cell */
    const char *passes_arg;             /* --pass */
    cli_ints ctx, threads, head_dims;   /* resolved: defaults filled, threads 0 = all cores */
    int warmup, steps;
    int causal;
    int doc_len, window;                /* attention: packed documents of doc_len tokens (0:
                                           one a row), a sliding window (0: none) */
    bench_format format;
    const char *plot_dir;               /* NULL: no plots */
    /* resolved from them */
    const char *models[CLI_LIST_MAX];   /* presets, or one explicit shape */
    int nmodels;
    hg_config explicit_cfg;             /* used when has_explicit */
    int has_explicit;
    int passes;                         /* PASS_* bits */
    int heads;                          /* attention: heads per cell */
    char model_list[1024];              /* --model, split at its commas */
} bench_opts;

enum { PASS_FORWARD = 1, PASS_BACKWARD = 2, PASS_STEP = 4 };

/* ---- timing ---- */

typedef struct bench_stat {
    double mean, std; /* seconds; std is the sample standard deviation (0 for one sample) */
    double median;    /* seconds; the middle sample, or the mean of the two middle ones */
} bench_stat;

bench_stat bench_stats(const double *x, int n);

/* The GEMM ceiling of opt's device, threads and precision (hg_gemm_peak_gflops): the
 * sgemm, a CPU model's bf16 GEMM in bf16 (the sgemm of the same threads is measured
 * beside it), or the GPU's; measured when first asked for in this run and kept, so runs
 * whose rows are all skipped never pay for it. Prints the error and returns 1 on failure. */
int bench_peak(const hg_options *opt, double *gflops);
/* The kind of that ceiling, for JSON: "sgemm", "bf16" or "cuda". */
const char *bench_peak_kind(const hg_options *opt);
/* Prints "sgemm peak in this run: X GFLOP/s on N threads, ...; bf16 GEMM peak ..." for
 * the table footer. */
void bench_print_peaks(void);
/* At the end of a run longer than 30 s, measures the peaks again and warns on stderr
 * when one moved by more than 10%: something else ran, and the shares are unreliable. */
void bench_check_peaks(void);

/* ---- memory ---- */

/* Resets the process's peak resident set (VmHWM) to its current size, so the next
 * bench_peak_rss() is the peak of what runs in between. Returns 0, or -1 when the kernel
 * refuses (the peak is then the process's). */
int bench_reset_peak_rss(void);
/* Peak resident bytes since the last reset (VmHWM), or since the process started. */
size_t bench_peak_rss(void);
/* Resident bytes now (VmRSS). */
size_t bench_rss(void);
double bench_gib(size_t bytes);

/* ---- rows: a flat list of named fields, printed as JSON lines or CSV ---- */

typedef struct bench_field {
    const char *key;
    char val[96]; /* already formatted; "" is null */
    int quoted;   /* a JSON string */
} bench_field;

typedef struct bench_rec {
    bench_field f[48];
    int n;
} bench_rec;

void rec_str(bench_rec *r, const char *key, const char *s);
void rec_int(bench_rec *r, const char *key, long long v);
void rec_num(bench_rec *r, const char *key, double v); /* non-finite: null */
void rec_bool(bench_rec *r, const char *key, int v);
void rec_null(bench_rec *r, const char *key);
/* One JSON object on a line, or a CSV line (with the header line first when *header). */
void rec_print(const bench_rec *r, bench_format f, int *header);

/* ---- plots ---- */

/* Before the run: creates DIR and its parents when missing (mkdir -p), then checks that
 * DIR/file can be written for each file; prints one line saying why not and returns 1. */
int bench_check_plots(const char *dir, const char *const *files, int n);
/* Writes DIR/file; prints why not and returns 1 on failure. */
int bench_write_plot(const char *dir, const char *file, const svg_plot *p);

/* ---- the modes ---- */

/* The CPU backend for the attention sweep. Model and backend construction for every
 * mode is here (cmd_bench.c), in one place. */
hg_status bench_backend_create(hg_backend **out, int threads, hg_precision precision);
int bench_attention(const bench_opts *o);
/* bench --fit (bench_fit.c): the memory plan of each model under each setting. */
int bench_fit(const bench_opts *o);
/* What a model costs beyond its plan (cmd_bench.c has the measurements behind it): 64 MiB,
 * and 128 MiB in bf16, whose oneDNN primitives take more. */
static inline size_t bench_runtime_allowance(hg_precision precision) {
    return (size_t)(precision == HG_PRECISION_BF16 ? 128 : 64) << 20;
}

#endif
