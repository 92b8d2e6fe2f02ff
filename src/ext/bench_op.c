/* hg_bench_op (handgrad_ext.h): min, median and max time per call over timed runs, and
 * the allocations made during them when alloc_count.c is linked in. */
#include <stdlib.h>

#include "core/error.h"
#include "core/timer.h"
#include "ext/alloc_count.h"
#include "handgrad_ext.h"

/* Present only when the program links the counting object library. */
extern void hg_alloc_count_enable(int on) __attribute__((weak));
extern void hg_alloc_count_read(hg_alloc_counts *out) __attribute__((weak));

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

hg_status hg_bench_op(hg_status (*fn)(void *ctx), void *ctx, int runs, hg_bench_result *out) {
    if (!fn || !out) return hg_fail(HG_ERR_INVALID, "hg_bench_op: NULL argument");
    if (runs < 1) return hg_fail(HG_ERR_INVALID, "runs: %d; must be >= 1", runs);
    *out = (hg_bench_result){.runs = runs, .allocs = -1, .alloc_bytes = -1, .onednn_allocs = -1};
    double *t = malloc((size_t)runs * sizeof *t);
    if (!t) return hg_fail(HG_ERR_NOMEM, "hg_bench_op: out of memory");
    /* warm-up, then how many calls make a run of about 20 us, from ten more */
    hg_status s = fn(ctx);
    double t0 = hg_now();
    for (int c = 0; c < 10 && s == HG_OK; c++) s = fn(ctx);
    double one = (hg_now() - t0) / 10;
    int64_t calls = one >= 20e-6 ? 1 : one > 0 ? (int64_t)(20e-6 / one) + 1 : 1000;
    if (calls > 1000000) calls = 1000000;
    out->calls_per_run = calls;
    out->counted = hg_alloc_count_enable && hg_alloc_count_read;
    if (out->counted) hg_alloc_count_enable(1);
    for (int r = 0; r < runs && s == HG_OK; r++) {
        double a = hg_now();
        for (int64_t c = 0; c < calls && s == HG_OK; c++) s = fn(ctx);
        t[r] = (hg_now() - a) / (double)calls;
    }
    if (out->counted) {
        hg_alloc_counts n;
        hg_alloc_count_enable(0);
        hg_alloc_count_read(&n);
        out->allocs = n.allocs, out->alloc_bytes = n.bytes, out->onednn_allocs = n.onednn_allocs;
    }
    if (s == HG_OK) {
        qsort(t, (size_t)runs, sizeof *t, cmp_double);
        out->min_s = t[0], out->max_s = t[runs - 1];
        out->median_s = runs % 2 ? t[runs / 2] : 0.5 * (t[runs / 2 - 1] + t[runs / 2]);
    }
    free(t);
    return s;
}
