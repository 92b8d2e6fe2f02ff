/* handgrad profile --memory and --memory-plot: bytes by category from the model's tables,
 * planned and measured peaks for a forward-only and a training step, and the curve of
 * live activation bytes over the last profiled step. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_io.h"
#include "profile.h"
#include "svg.h"

#define MIB (1024.0 * 1024.0)

size_t profile_peak_rss(void) {
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return 0;
    char line[256];
    size_t kb = 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "VmHWM: %zu kB", &kb) == 1) break;
    fclose(f);
    return kb * 1024;
}

void profile_reset_peak_rss(void) {
    /* "5" resets VmHWM to the current RSS (Linux 4.0+); without it the peaks only grow,
     * which still orders forward-only (measured first) below training */
    FILE *f = fopen("/proc/self/clear_refs", "w");
    if (!f) return;
    fputs("5", f);
    fclose(f);
}

int profile_measure_forward(const prof_run *r, const int32_t *tokens, const int32_t *targets, prof_rss *rss) {
    hg_options o = r->opt;
    o.training = 0;
    hg_model *m;
    float loss;
    profile_reset_peak_rss();
    hg_status st = hg_model_create(&m, &r->cfg, &o);
    if (st == HG_OK) {
        st = hg_forward(m, tokens, targets, r->B, r->T, &loss, NULL);
        rss->forward_peak = profile_peak_rss();
        hg_model_free(m);
    }
    if (st != HG_OK) fprintf(stderr, "handgrad profile: forward-only model: %s\n", hg_last_error());
    return st != HG_OK;
}

/* The last step's curve, and where its peak is. */
typedef struct curve {
    hg_live_point *pts;
    int n, peak;
    int cls_first, cls_last; /* op positions of the classifier's chunks */
    size_t *holders;         /* (nbuf) live bytes of each buffer at the peak */
    int nbuf;
} curve;

/* Returns 0, or 1 with the error printed. */
static int curve_build(const prof_run *r, curve *c) {
    int step = r->steps - 1;
    memset(c, 0, sizeof *c);
    c->nbuf = hg_buffer_count(r->m);
    if (hg_profiler_memory_curve(r->p, step, NULL, 0, &c->n) != HG_OK) return cli_fail("profile");
    c->pts = malloc(sizeof *c->pts * (size_t)c->n);
    c->holders = malloc(sizeof(size_t) * (size_t)c->nbuf);
    if (!c->pts || !c->holders) {
        fprintf(stderr, "handgrad profile: out of memory\n");
        return 1;
    }
    if (hg_profiler_memory_curve(r->p, step, c->pts, c->n, &c->n) != HG_OK) return cli_fail("profile");
    c->cls_first = -1;
    for (int k = 0; k < c->n; k++) {
        if (c->pts[k].bytes > c->pts[c->peak].bytes) c->peak = k;
        if (r->ev[c->pts[k].event].layer == r->cfg.n_layer) {
            if (c->cls_first < 0) c->cls_first = k;
            c->cls_last = k;
        }
    }
    if (hg_profiler_live_buffers(r->p, step, c->pts[c->peak].event, c->holders, c->nbuf) != HG_OK)
        return cli_fail("profile");
    return 0;
}

static void curve_free(curve *c) {
    free(c->pts);
    free(c->holders);
}

/* "fch 33%, qkv 25%, ...": the largest holders of the peak, at most `most`. */
static void holders_text(const prof_run *r, const curve *c, char *buf, size_t cap, int most) {
    size_t total = c->pts[c->peak].bytes, n = 0;
    int *used = calloc((size_t)c->nbuf, sizeof *used);
    buf[0] = 0;
    for (int k = 0; used && k < most; k++) {
        int best = -1;
        for (int i = 0; i < c->nbuf; i++)
            if (!used[i] && c->holders[i] && (best < 0 || c->holders[i] > c->holders[best])) best = i;
        if (best < 0) break;
        used[best] = 1;
        hg_buffer_info b;
        hg_buffer_at(r->m, best, &b);
        if (n < cap)
            n += (size_t)snprintf(buf + n, cap - n, "%s%s %.0f%%", k ? ", " : "", b.name,
                                  100.0 * (double)c->holders[best] / (double)total);
    }
    free(used);
}

static const char *op_name(const prof_run *r, const curve *c, int k) { return r->ev[c->pts[k].event].name; }

static int write_plot(const prof_run *r, const curve *c, const char *path, size_t stored) {
    double *x = malloc(sizeof(double) * (size_t)c->n), *y = malloc(sizeof(double) * (size_t)c->n);
    if (!x || !y) {
        free(x);
        free(y);
        fprintf(stderr, "handgrad profile: out of memory\n");
        return 1;
    }
    for (int k = 0; k < c->n; k++) x[k] = k, y[k] = (double)c->pts[k].bytes / MIB;
    char holders[160], title[320];
    holders_text(r, c, holders, sizeof holders, 3);
    double px = c->peak, py = y[c->peak], sx[2] = {0, c->n - 1}, sy[2] = {(double)stored / MIB, (double)stored / MIB};
    svg_series s[3] = {{"live activations", x, y, c->n, 0, 0},
                       {"all stored (table)", sx, sy, 2, 1, 0},
                       {"peak", &px, &py, 1, 0, 1}};
    double cf = c->cls_first >= 0 ? c->cls_first - 0.5 : c->n - 0.5, cl = c->cls_first >= 0 ? c->cls_last + 0.5 : cf;
    svg_band bands[3] = {{-0.5, cf, "forward", "#eef4ff"}, {cf, cl, "classifier", "#f4f4f4"},
                         {cl, c->n - 0.5, "backward", "#fff0ee"}};
    snprintf(title, sizeof title, "live activations, %s B=%d T=%d: peak %.1f MiB at op %d (%s), held by %s", r->preset,
             r->B, r->T, y[c->peak], c->peak, op_name(r, c, c->peak), holders);
    svg_plot p = {.title = title, .xlabel = "op index in the step", .ylabel = "MiB", .series = s, .nseries = 3,
                  .bands = bands, .nbands = 3, .width = 1000, .height = 480};
    int rc = svg_write(path, &p);
    if (rc) perror("handgrad profile: --memory-plot");
    free(x);
    free(y);
    return rc != 0;
}

int profile_memory(const prof_run *r, const prof_rss *rss, FILE *f, cJSON *json, const char *plot_path) {
    hg_memory_plan plan = hg_model_memory(r->m), fwd_plan;
    hg_options fo = r->opt;
    fo.training = 0;
    if (hg_memory_required(&r->cfg, &fo, &fwd_plan) != HG_OK) {
        fprintf(stderr, "handgrad profile: %s\n", hg_last_error());
        return 1;
    }
    curve c;
    if (curve_build(r, &c)) {
        curve_free(&c);
        return 1;
    }
    size_t workspace = hg_model_workspace_bytes(r->m), stored = 0;
    cJSON *mj = json ? cJSON_AddObjectToObject(json, "memory") : NULL, *acts = NULL, *scratch = NULL;
    if (mj) {
        cJSON_AddNumberToObject(mj, "params", (double)plan.params);
        cJSON_AddNumberToObject(mj, "grads", (double)plan.grads);
        cJSON_AddNumberToObject(mj, "optimizer", (double)plan.optimizer);
        acts = cJSON_AddObjectToObject(mj, "activations");
        cJSON_AddNumberToObject(mj, "activations_total", (double)plan.activations);
        scratch = cJSON_AddObjectToObject(mj, "scratch");
        cJSON_AddNumberToObject(mj, "scratch_total", (double)plan.scratch);
        cJSON_AddNumberToObject(mj, "gemm_workspace", (double)workspace);
        cJSON_AddNumberToObject(mj, "planned_total", (double)plan.total);
    } else {
        fprintf(f, "\nmemory (MiB; from the model's tables, allocated before step 0)\n");
        fprintf(f, "  %-26s %10.1f\n", "parameters", plan.params / MIB);
        fprintf(f, "  %-26s %10.1f\n", "gradients", plan.grads / MIB);
        fprintf(f, "  %-26s %10.1f   AdamW m and v\n", "optimizer state", plan.optimizer / MIB);
        fprintf(f, "  %-26s %10.1f   stored for backward:\n", "activations", plan.activations / MIB);
    }
    for (int pass = 0; pass < 2; pass++) { /* activations, then scratch */
        if (f && pass == 1) fprintf(f, "  %-26s %10.1f   per-op temporaries:\n", "scratch", plan.scratch / MIB);
        for (int i = 0; i < c.nbuf; i++) {
            hg_buffer_info b;
            hg_buffer_at(r->m, i, &b);
            if (b.scratch != pass || !b.bytes) continue;
            if (!pass) stored += b.bytes;
            if (mj) cJSON_AddNumberToObject(pass ? scratch : acts, b.name, (double)b.bytes);
            else fprintf(f, "    %-24s %10.1f   %lld x %.2f\n", b.name, b.bytes / MIB, (long long)b.copies,
                         b.bytes / MIB / (double)b.copies);
        }
    }
    char holders[256];
    holders_text(r, &c, holders, sizeof holders, 6);
    const hg_prof_event *pe = &r->ev[c.pts[c.peak].event];
    if (mj) {
        cJSON *pk = cJSON_AddObjectToObject(mj, "forward_only");
        cJSON_AddNumberToObject(pk, "planned", (double)fwd_plan.total);
        cJSON_AddNumberToObject(pk, "measured_rss", (double)rss->forward_peak);
        pk = cJSON_AddObjectToObject(mj, "training");
        cJSON_AddNumberToObject(pk, "planned", (double)(plan.total + workspace));
        cJSON_AddNumberToObject(pk, "measured_rss", (double)rss->train_peak);
        cJSON_AddNumberToObject(mj, "baseline_rss", (double)rss->baseline);
        pk = cJSON_AddObjectToObject(mj, "live_peak");
        cJSON_AddNumberToObject(pk, "op_index", c.peak);
        cJSON_AddStringToObject(pk, "op", pe->name);
        cJSON_AddNumberToObject(pk, "bytes", (double)c.pts[c.peak].bytes);
        cJSON_AddStringToObject(pk, "holders", holders);
        cJSON *cv = cJSON_AddArrayToObject(mj, "curve");
        for (int k = 0; k < c.n; k++) {
            cJSON *o = cJSON_CreateObject();
            cJSON_AddStringToObject(o, "op", op_name(r, &c, k));
            cJSON_AddNumberToObject(o, "layer", r->ev[c.pts[k].event].layer);
            cJSON_AddNumberToObject(o, "bytes", (double)c.pts[k].bytes);
            cJSON_AddItemToArray(cv, o);
        }
    } else {
        fprintf(f, "  %-26s %10.1f   oneDNN scratchpad, allocated at first use\n", "GEMM workspace", workspace / MIB);
        fprintf(f, "  %-26s %10.1f\n", "total", (plan.total + workspace) / MIB);
        fprintf(f, "\npeak (MiB)                    planned   measured RSS\n");
        fprintf(f, "  forward-only step        %10.1f %14.1f   an inference model: one copy of each activation\n",
                fwd_plan.total / MIB, rss->forward_peak / MIB);
        fprintf(f, "  training step            %10.1f %14.1f\n", (plan.total + workspace) / MIB, rss->train_peak / MIB);
        fprintf(f, "  process before any model            %14.1f\n", rss->baseline / MIB);
        fprintf(f, "\nlive activations over the last step: %d ops (forward 0-%d, classifier %d-%d, backward %d-%d)\n", c.n,
                c.cls_first - 1, c.cls_first, c.cls_last, c.cls_last + 1, c.n - 1);
        fprintf(f, "  peak %.1f MiB during op %d, %s: %s\n", c.pts[c.peak].bytes / MIB, c.peak, pe->name, holders);
        fprintf(f, "  %-12s %16s %16s\n", "layer", "after forward", "after backward");
        const int L = r->cfg.n_layer;
        for (int slot = -1; slot <= L; slot++) { /* the last op of each layer in each pass */
            double after[2] = {-1, -1};
            for (int k = 0; k < c.n; k++) {
                const hg_prof_event *e = &r->ev[c.pts[k].event];
                if (e->layer == slot && (e->pass == HG_PASS_FORWARD || e->pass == HG_PASS_BACKWARD))
                    after[e->pass == HG_PASS_BACKWARD] = c.pts[k].bytes / MIB;
            }
            char name[32];
            profile_layer_name(name, sizeof name, slot, L);
            fprintf(f, "  %-12s %16.1f %16.1f\n", name, after[0], after[1]);
        }
    }
    int rc = plot_path ? write_plot(r, &c, plot_path, stored) : 0;
    curve_free(&c);
    return rc;
}
