/* handgrad bench: statistics, memory figures, JSON-lines / CSV rows and plot files (bench.h). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/tile.h"
#include "bench.h"
#include "cli_io.h"
#include "core/timer.h"

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

bench_stat bench_stats(const double *x, int n) {
    bench_stat s = {0, 0, 0};
    for (int i = 0; i < n; i++) s.mean += x[i];
    s.mean /= n;
    for (int i = 0; i < n; i++) s.std += (x[i] - s.mean) * (x[i] - s.mean);
    s.std = n > 1 ? sqrt(s.std / (n - 1)) : 0.0;
    double *sorted = malloc(sizeof(double) * (size_t)n);
    s.median = NAN; /* without memory for the copy: not computed */
    if (sorted) {
        memcpy(sorted, x, sizeof(double) * (size_t)n);
        qsort(sorted, (size_t)n, sizeof(double), cmp_double);
        s.median = n % 2 ? sorted[n / 2] : 0.5 * (sorted[n / 2 - 1] + sorted[n / 2]);
        free(sorted);
    }
    return s;
}

/* Ceilings measured in this run, by (device, threads, precision): the sgemm, or the bf16
 * GEMM of a CPU model in bf16; a CUDA model's is its device's GEMM (threads -1). */
static struct {
    hg_options opt; /* device, threads and precision */
    double gflops, when;
} peaks[BENCH_MAX_LIST];
static int npeaks;

static int cuda_peak(const hg_options *o) { return o->device == HG_DEVICE_CUDA; }
static int bf16_peak(const hg_options *o) { return !cuda_peak(o) && o->precision == HG_PRECISION_BF16; }

static int peak_measure(const hg_options *opt, double *gflops) {
    if (hg_gemm_peak_gflops(opt, gflops) == HG_OK) return 0;
    fprintf(stderr, "handgrad bench: %s\n", hg_last_error());
    return 1;
}

const char *bench_peak_kind(const hg_options *opt) { return cuda_peak(opt) ? "cuda" : bf16_peak(opt) ? "bf16" : "sgemm"; }

int bench_peak(const hg_options *opt, double *gflops) {
    hg_options key = hg_options_default();
    key.device = opt->device, key.precision = opt->precision, key.threads = cuda_peak(opt) ? -1 : opt->threads;
    if (!cuda_peak(opt) && !bf16_peak(opt)) key.precision = HG_PRECISION_FP32;
    for (int i = 0; i < npeaks; i++)
        if (peaks[i].opt.device == key.device && peaks[i].opt.threads == key.threads &&
            peaks[i].opt.precision == key.precision) {
            *gflops = peaks[i].gflops;
            return 0;
        }
    /* a bf16 row is shown against its own ceiling, with the sgemm's beside it */
    double sgemm;
    if (bf16_peak(&key)) {
        hg_options f = key;
        f.precision = HG_PRECISION_FP32;
        if (bench_peak(&f, &sgemm)) return 1;
    }
    if (peak_measure(&key, gflops)) return 1;
    if (npeaks < BENCH_MAX_LIST) peaks[npeaks].opt = key, peaks[npeaks].when = hg_now(), peaks[npeaks++].gflops = *gflops;
    return 0;
}

void bench_check_peaks(void) {
    for (int i = 0; i < npeaks; i++) {
        double now;
        if (cuda_peak(&peaks[i].opt) || hg_now() - peaks[i].when < 30 || hg_gemm_peak_gflops(&peaks[i].opt, &now) != HG_OK)
            continue;
        if (fabs(now - peaks[i].gflops) > 0.1 * peaks[i].gflops)
            fprintf(stderr, "handgrad bench: the %s peak on %d threads moved from %.1f to %.1f GFLOP/s during the "
                    "run: the machine is busy, so the %% of peak figures are unreliable\n",
                    bf16_peak(&peaks[i].opt) ? "bf16 GEMM" : "sgemm", peaks[i].opt.threads, peaks[i].gflops, now);
    }
}

void bench_print_peaks(void) {
    if (!npeaks) return;
    int cpu = 0;
    for (int kind = 0; kind < 3; kind++) { /* sgemm, bf16 GEMM, GPU */
        const char *title[] = {"sgemm peak in this run:", "bf16 GEMM peak in this run:", "GEMM peak in this run:"};
        int first = 1;
        for (int i = 0; i < npeaks; i++) {
            const hg_options *o = &peaks[i].opt;
            if ((cuda_peak(o) ? 2 : bf16_peak(o) ? 1 : 0) != kind) continue;
            printf("%s%s %.1f GFLOP/s", first ? (kind ? "; " : "") : ",", first ? title[kind] : "", peaks[i].gflops);
            if (kind == 2) printf(" on the GPU");
            else printf(" on %d thread%s", o->threads, o->threads > 1 ? "s" : ""), cpu = 1;
            if (kind == 1 && first && hg_cpu_bf16_slow()) printf(" (portable or emulated: no bf16 hardware)");
            first = 0;
        }
    }
    if (cpu) printf("; CPU attention tiles: %s", tile_active()->name);
    printf("\n");
}

int bench_reset_peak_rss(void) {
    FILE *f = fopen("/proc/self/clear_refs", "w");
    if (!f) return -1;
    int ok = fputs("5", f) >= 0;
    return fclose(f) == 0 && ok ? 0 : -1;
}

static size_t status_kb(const char *field) {
    FILE *f = fopen("/proc/self/status", "r");
    size_t kb = 0, n = strlen(field);
    if (!f) return 0;
    char line[256];
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, field, n) && sscanf(line + n, ": %zu kB", &kb) == 1) break;
    fclose(f);
    return kb * 1024;
}

size_t bench_peak_rss(void) { return status_kb("VmHWM"); }
size_t bench_rss(void) { return status_kb("VmRSS"); }

double bench_gib(size_t bytes) { return (double)bytes / 1073741824.0; }

static bench_field *rec_add(bench_rec *r, const char *key, int quoted) {
    if (r->n == (int)(sizeof r->f / sizeof r->f[0])) return NULL;
    bench_field *f = &r->f[r->n++];
    f->key = key;
    f->quoted = quoted;
    f->val[0] = 0;
    return f;
}

void rec_str(bench_rec *r, const char *key, const char *s) {
    bench_field *f = rec_add(r, key, 1);
    if (f) snprintf(f->val, sizeof f->val, "%s", s);
}

void rec_int(bench_rec *r, const char *key, long long v) {
    bench_field *f = rec_add(r, key, 0);
    if (f) snprintf(f->val, sizeof f->val, "%lld", v);
}

void rec_num(bench_rec *r, const char *key, double v) {
    bench_field *f = rec_add(r, key, 0);
    if (f && isfinite(v)) snprintf(f->val, sizeof f->val, "%.6g", v);
}

void rec_bool(bench_rec *r, const char *key, int v) {
    bench_field *f = rec_add(r, key, 0);
    if (f) snprintf(f->val, sizeof f->val, "%s", v ? "true" : "false");
}

void rec_null(bench_rec *r, const char *key) { rec_add(r, key, 0); }

static void put_json_string(const char *s) {
    putchar('"');
    for (; *s; s++) {
        if (*s == '"' || *s == '\\') putchar('\\');
        if ((unsigned char)*s >= 0x20) putchar(*s);
    }
    putchar('"');
}

static void put_csv(const char *s) {
    if (!strpbrk(s, ",\"\n")) {
        fputs(s, stdout);
        return;
    }
    putchar('"');
    for (; *s; s++) {
        if (*s == '"') putchar('"');
        putchar(*s);
    }
    putchar('"');
}

void rec_print(const bench_rec *r, bench_format fmt, int *header) {
    if (fmt == OUT_JSON) {
        putchar('{');
        for (int i = 0; i < r->n; i++) {
            const bench_field *f = &r->f[i];
            printf("%s\"%s\": ", i ? ", " : "", f->key);
            if (f->quoted) put_json_string(f->val);
            else fputs(f->val[0] ? f->val : "null", stdout);
        }
        printf("}\n");
    } else if (fmt == OUT_CSV) {
        if (*header) {
            for (int i = 0; i < r->n; i++) printf("%s%s", i ? "," : "", r->f[i].key);
            putchar('\n');
            *header = 0;
        }
        for (int i = 0; i < r->n; i++) {
            if (i) putchar(',');
            put_csv(r->f[i].val);
        }
        putchar('\n');
    }
    fflush(stdout);
}

static int plot_path(char *buf, size_t cap, const char *dir, const char *file) {
    return snprintf(buf, cap, "%s/%s", dir, file) < (int)cap ? 0 : -1;
}

int bench_check_plots(const char *dir, const char *const *files, int n) {
    char path[4096];
    if (cli_mkdir_p("bench", "--plot", dir)) return 1;
    for (int i = 0; i < n; i++) {
        if (plot_path(path, sizeof path, dir, files[i])) {
            fprintf(stderr, "handgrad bench: --plot %s: path too long\n", dir);
            return 1;
        }
        if (cli_check_writable("bench", "--plot", path)) return 1;
    }
    return 0;
}

int bench_write_plot(const char *dir, const char *file, const svg_plot *p) {
    char path[4096];
    plot_path(path, sizeof path, dir, file);
    if (svg_write(path, p) == 0) return 0;
    fprintf(stderr, "handgrad bench: cannot write %s: %s\n", path, strerror(errno));
    return 1;
}
