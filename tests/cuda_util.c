/* Helpers for the GPU tests; see cuda_util.h. */
#include "cuda_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

hg_backend *cuda_backend_or_skip(hg_precision precision) { return cuda_backend_flags_or_skip(precision, 0); }

hg_backend *cuda_backend_flags_or_skip(hg_precision precision, unsigned flags) {
    hg_backend *be = NULL;
    hg_options opt = hg_options_default();
    opt.device = HG_DEVICE_CUDA, opt.precision = precision, opt.flags = flags;
    hg_status st = hg_backend_create(&be, &opt, 2);
    if (st == HG_ERR_UNSUPPORTED) {
        printf("skipped: no CUDA device (%s)\n", hg_last_error());
        exit(CUDA_SKIP);
    }
    if (st != HG_OK) {
        fprintf(stderr, "creating the CUDA backend failed: %s\n", hg_last_error());
        exit(1);
    }
    return be;
}

float bf16_round(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    if ((u & 0x7f800000u) == 0x7f800000u) return x;
    u += 0x7fffu + ((u >> 16) & 1u);
    u &= 0xffff0000u;
    memcpy(&x, &u, 4);
    return x;
}

void round_for(hg_backend *be, float *x, size_t n) {
    if (be->precision != HG_PRECISION_BF16) return;
    for (size_t i = 0; i < n; i++) x[i] = bf16_round(x[i]);
}

enum { MAX_BUFS = 256 };
static void *bufs[MAX_BUFS];
static int nbufs;

static void *dev_alloc(hg_backend *be, size_t bytes) {
    void *p = be->ops->alloc(be, bytes);
    if (!p || nbufs == MAX_BUFS) {
        fprintf(stderr, "device allocation of %zu bytes failed\n", bytes);
        exit(1);
    }
    return bufs[nbufs++] = p;
}

void dev_free_all(hg_backend *be) {
    while (nbufs) be->ops->free(be, bufs[--nbufs]);
}

void *dev_bytes(hg_backend *be, const void *host, size_t bytes) {
    void *d = dev_alloc(be, bytes);
    be->ops->upload(be, d, host, bytes);
    return d;
}

void *dev_from(hg_backend *be, const float *host, size_t n, int compute) {
    void *d = dev_alloc(be, n * sizeof(float));
    be->ops->upload(be, d, host, n * sizeof(float));
    if (!compute || be->precision == HG_PRECISION_FP32) return d;
    void *c = dev_alloc(be, n * hg_precision_bytes(be->precision));
    be->ops->to_compute(be, c, d, n);
    return c;
}

void *dev_poison(hg_backend *be, size_t n, int compute) {
    float *h = malloc(n * sizeof(float) + 1);
    for (size_t i = 0; i < n; i++) h[i] = NAN;
    void *d = dev_from(be, h, n, compute);
    free(h);
    return d;
}

void dev_to_host(hg_backend *be, float *host, const void *dev, size_t n, int compute) {
    size_t E = compute ? hg_precision_bytes(be->precision) : sizeof(float);
    be->ops->download(be, host, dev, n * E);
    if (be->ops->sync(be) != HG_OK) {
        fprintf(stderr, "dev_to_host: %s\n", hg_last_error());
        exit(1);
    }
    if (E == 4) return;
    const uint16_t *h = (const uint16_t *)host; /* widen in place from the back */
    for (size_t i = n; i-- > 0;) {
        uint32_t bits = (uint32_t)h[i] << 16;
        memcpy(&host[i], &bits, 4);
    }
}

int compare(const char *what, const float *got, const float *want, size_t n, double tol) {
    double num = 0.0, den = 0.0, worst = 0.0, scale = 0.0;
    size_t nonfinite = 0, first = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(got[i])) {
            if (!nonfinite++) first = i;
            continue;
        }
        double d = (double)got[i] - want[i];
        num += d * d;
        den += (double)want[i] * want[i];
        if (fabs(d) > worst) worst = fabs(d);
        if (fabs(want[i]) > scale) scale = fabs(want[i]);
    }
    double rel = den > 0 ? sqrt(num / den) : sqrt(num);
    int bad = nonfinite > 0 || !(rel <= tol);
    printf("  %-4s %-48s rel L2 %.2e (tol %.0e), max |err| %.2e of max |ref| %.2e, n %zu\n", bad ? "FAIL" : "ok", what, rel,
           tol, worst, scale, n);
    if (nonfinite) printf("       %zu non-finite elements (first at %zu = %g): unwritten or overflowed\n", nonfinite, first, got[first]);
    return bad;
}
