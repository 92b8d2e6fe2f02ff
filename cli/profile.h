/* handgrad profile's parts: the run and its tables (cmd_profile.c), the Chrome trace
 * (profile_trace.c), the memory report and plot (profile_memory.c), the step's
 * description (profile_plan.c). */
#ifndef HG_CLI_PROFILE_H
#define HG_CLI_PROFILE_H

#include <stdio.h>

#include "handgrad.h"

typedef struct cJSON cJSON;

static inline const char *profile_pass_name(hg_prof_pass p) {
    static const char *names[] = {"forward", "backward", "optimizer", "step"};
    return names[p];
}

/* "embedding" (layer -1), "block l", or "classifier" (layer L). */
static inline void profile_layer_name(char *buf, size_t n, int layer, int L) {
    if (layer == -1) snprintf(buf, n, "embedding");
    else if (layer == L) snprintf(buf, n, "classifier");
    else snprintf(buf, n, "block %d", layer);
}

/* One profiled run: the model, and the events of its timed steps. */
typedef struct prof_run {
    const char *preset;
    int B, T, threads, warmup, steps;
    hg_config cfg;
    hg_options opt;
    hg_model *m;
    hg_profiler *p;
    hg_prof_event *ev; /* every recorded event, in recording order */
    int nev;
    /* ceilings measured in the same run after the profiled steps (0: not measured): the
     * device's GEMM peak, and on the CPU the memory bandwidth */
    double peak_gflops, bandwidth_gbps;
} prof_run;

/* Writes the Chrome trace event format (chrome://tracing, Perfetto) to path, through a
 * temporary file renamed into place. Returns 0, or -1 with errno set. */
int profile_write_trace(const prof_run *r, const char *path);

/* Peak resident memory, measured. */
typedef struct prof_rss {
    size_t baseline;     /* before any model existed */
    size_t forward_peak; /* peak while an inference model ran one forward; 0 if not measured */
    size_t train_peak;   /* peak over the profiled training run */
} prof_rss;

/* The process's peak RSS (VmHWM) in bytes, 0 if unknown; reset_peak restarts it. */
size_t profile_peak_rss(void);
void profile_reset_peak_rss(void);
/* Creates an inference model of the run's shape, runs one forward, frees it: the
 * measured peak of a forward-only step. Returns 0, or 1 with the error printed. */
int profile_measure_forward(const prof_run *r, const int32_t *tokens, const int32_t *targets, prof_rss *rss);

/* The memory report of the last timed step: printed to f, or added to json as "memory"
 * when json is not NULL; the curve drawn to plot_path when not NULL. Returns 0, or 1
 * with the error printed. */
int profile_memory(const prof_run *r, const prof_rss *rss, FILE *f, cJSON *json, const char *plot_path);

/* handgrad profile --plan: the step as m planned it (hg_step_op_at) and the buffers the
 * plan derived from it, printed to f. Returns 0, or 1 with the error printed. */
int profile_plan(const hg_model *m, FILE *f);

#endif
