/* Helpers for the op tests: test data, poisoning, tolerance checks, finite differences. */
#include "ops_util.h"

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int ops_verbose = 0;

enum { MAX_REPORTS = 5 }; /* failures printed per check; all are counted */

uint64_t trng_next(trng *r) {
    uint64_t z = (r->s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

double trng_unit(trng *r) { return (double)(trng_next(r) >> 11) * (1.0 / 9007199254740992.0); }
double trng_range(trng *r, double lo, double hi) { return lo + (hi - lo) * trng_unit(r); }
int trng_int(trng *r, int n) { return (int)(trng_unit(r) * n); }

static void *xmalloc(size_t bytes) {
    void *p = malloc(bytes ? bytes : 1);
    if (!p) {
        fprintf(stderr, "out of memory (%zu bytes)\n", bytes);
        abort();
    }
    return p;
}

float *fvec(size_t n) { return xmalloc(n * sizeof(float)); }
double *dvec(size_t n) { return xmalloc(n * sizeof(double)); }
int32_t *ivec(size_t n) { return xmalloc(n * sizeof(int32_t)); }

void fill(float *x, size_t n, trng *r, double lo, double hi) {
    for (size_t i = 0; i < n; i++) x[i] = (float)trng_range(r, lo, hi);
}

void fill_qkv(float *qkv, size_t rows, int W, int qk, trng *r) {
    for (size_t i = 0; i < rows * (size_t)W; i++)
        qkv[i] = (float)(i % (size_t)W < (size_t)qk ? trng_range(r, -2, 2) : trng_range(r, -1, 1));
}

void poison(float *x, size_t n) {
    const uint32_t snan = 0x7FA5A5A5u;
    for (size_t i = 0; i < n; i++) memcpy(&x[i], &snan, sizeof snan);
}

void widen(double *dst, const float *src, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = src[i];
}

size_t *sample_indices(size_t n, size_t k, uint64_t seed, size_t *count) {
    if (n <= k) {
        size_t *idx = xmalloc(n * sizeof *idx);
        for (size_t i = 0; i < n; i++) idx[i] = i;
        *count = n;
        return idx;
    }
    size_t *idx = xmalloc(k * sizeof *idx);
    trng r = trng_seed(seed);
    idx[0] = 0;
    idx[1] = n - 1;
    for (size_t j = 2; j < k; j++) idx[j] = (size_t)(trng_unit(&r) * (double)n);
    *count = k;
    return idx;
}

static void report_worst(const char *what, double worst, size_t n) {
    if (ops_verbose) printf("  %-44s worst %.3g of tolerance over %zu\n", what, worst, n);
}

int check_finite(const char *what, const float *x, size_t n) {
    int bad = 0;
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i]) && bad++ < MAX_REPORTS) fprintf(stderr, "%s[%zu] = %g: not written or not finite\n", what, i, x[i]);
    if (bad) fprintf(stderr, "%s: %d non-finite of %zu\n", what, bad, n);
    return bad;
}

int check_bitwise(const char *what, const float *a, const float *b, size_t n) {
    int bad = 0;
    for (size_t i = 0; i < n; i++)
        if (memcmp(&a[i], &b[i], sizeof(float)) && bad++ < MAX_REPORTS)
            fprintf(stderr, "%s[%zu]: %.9g then %.9g: runs differ\n", what, i, a[i], b[i]);
    if (bad) fprintf(stderr, "%s: %d of %zu differ between identical runs\n", what, bad, n);
    return bad;
}

int check_vec(const char *what, const float *got, const double *want, const double *scale, size_t n,
              double tol, double atol) {
    int bad = 0;
    double worst = 0.0;
    for (size_t i = 0; i < n; i++) {
        double lim = tol * (scale ? scale[i] : fabs(want[i])) + atol, err = fabs((double)got[i] - want[i]);
        if (lim > 0 && err / lim > worst) worst = err / lim;
        if (!(err <= lim) && bad++ < MAX_REPORTS)
            fprintf(stderr, "%s[%zu] = %.9g, want %.12g (error %.3g > %.3g)\n", what, i, got[i], want[i], err, lim);
    }
    if (bad) fprintf(stderr, "%s: %d of %zu outside tolerance\n", what, bad, n);
    report_worst(what, worst, n);
    return bad;
}

/* One gradient element; counts it and prints it while few have failed. */
static int grad_one(const char *what, size_t i, double g, double want, double s, double extra,
                    double tol, int bad, double *worst) {
    double lim = tol * (s + fabs(want)) + extra, err = fabs(g - want);
    if (lim > 0 && err / lim > *worst) *worst = err / lim;
    if (err <= lim) return 0;
    if (bad < MAX_REPORTS)
        fprintf(stderr, "%s[%zu]: gradient %.9g, want %.12g (error %.3g > %.3g)\n", what, i, g, want, err, lim);
    return 1;
}

static int grad_done(const char *what, int bad, size_t n, double worst, double tol) {
    if (bad) fprintf(stderr, "%s: %d of %zu outside tolerance (tol %.3g)\n", what, bad, n, tol);
    report_worst(what, worst, n);
    return bad;
}

int check_grad(const char *what, const float *got, const float *prefill, const double *want,
               const size_t *idx, size_t n, const double *scale_v, double scale, double tol) {
    int bad = 0;
    double worst = 0.0;
    for (size_t j = 0; j < n; j++) {
        size_t i = idx ? idx[j] : j;
        double g = (double)got[i] - (prefill ? (double)prefill[i] : 0.0);
        double extra = prefill && isfinite(got[i]) ? 2.0 * U32 * fabs((double)got[i]) : 0.0;
        bad += grad_one(what, i, g, want[j], scale_v ? scale_v[i] : scale, extra, tol, bad, &worst);
    }
    return grad_done(what, bad, n, worst, tol);
}

int check_grad_d(const char *what, const double *got, const double *want, const size_t *idx,
                 size_t n, const double *scale_v, double scale, double tol) {
    int bad = 0;
    double worst = 0.0;
    for (size_t j = 0; j < n; j++) {
        size_t i = idx ? idx[j] : j;
        bad += grad_one(what, i, got[i], want[j], scale_v ? scale_v[i] : scale, 0.0, tol, bad, &worst);
    }
    return grad_done(what, bad, n, worst, tol);
}

int check_rel_l2(const char *what, const float *got, const float *prefill, const double *want,
                 size_t n, double tol) {
    double num = 0.0, den = 0.0;
    for (size_t i = 0; i < n; i++) {
        double g = (double)got[i] - (prefill ? (double)prefill[i] : 0.0), d = g - want[i];
        num += d * d;
        den += want[i] * want[i];
    }
    double rel = sqrt(num) / sqrt(den);
    if (ops_verbose) printf("  %-44s relative L2 error %.3g (tolerance %.3g)\n", what, rel, tol);
    if (rel <= tol) return 0;
    fprintf(stderr, "%s: relative L2 error %.3g > %.3g\n", what, rel, tol);
    return 1;
}

double rms(const double *x, size_t n) {
    double s = 0.0;
    for (size_t i = 0; i < n; i++) s += x[i] * x[i];
    return n ? sqrt(s / (double)n) : 0.0;
}

double fd_central(double *p, size_t i, double h, double (*loss)(void *ctx, size_t i), void *ctx) {
    double x = p[i], xp = x + h, xm = x - h;
    p[i] = xp;
    double lp = loss(ctx, i);
    p[i] = xm;
    double lm = loss(ctx, i);
    p[i] = x;
    return (lp - lm) / (xp - xm);
}

void use_backend(hg_backend *be) { omp_set_num_threads(be->threads); }
