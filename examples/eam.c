/* The embedded-atom function of a user who writes gradients by hand (shared/seeds/001):
 *
 *     E(x) = F(sum_i rho(x_i)),  rho(r) = exp(-3(r + 1)),  F(p) = p^2 + p^3 + p^4/4
 *
 * Its gradient dE/dx_i = F'(p) rho'(x_i) = -3 F'(p) rho(x_i) needs each exponential once,
 * and the exponentials need a place to live between the two passes: g itself. So the
 * gradient is two vectorised loops and no allocation. This program
 *   1. checks it with hg_gradcheck against finite differences, in double, of a plain
 *      forward written separately;
 *   2. proves with hg_bench_op that a call allocates nothing;
 *   3. times it at N = 100 and N = 1000 beside the seed's figures (Float64 there, double
 *      here): hand gradient 1.77 us and 16.3 us, LoopVectorization 108 ns at N = 100.
 * Exit status 0 when the checks pass (the inlined exp within 2 ulp of libm's, the
 * gradient against finite differences) and no allocation is seen. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "handgrad_ext.h"

/* e^x, written out so that it inlines into the vector loop below with no call (glibc's
 * vector exp is a call per 4 or 8 doubles, which at N = 100 costs more than the
 * arithmetic). x = k ln2 + r with |r| <= ln2/2: k is rounded by adding 1.5 * 2^52, whose
 * low bits then hold k, and ln2 is split in two so that r is exact; e^r is its Taylor
 * polynomial to degree 13 (truncation under 5e-18 relative); 2^k is put together in the
 * exponent bits. 0 below -708 (where e^x is subnormal). The compares vectorise under
 * -fno-trapping-math (examples/CMakeLists.txt). */
typedef union {
    double f;
    unsigned long long u;
} bits64;

static inline double exp_inline(double x) {
    const double log2e = 1.4426950408889634, shifter = 6755399441055744.0; /* 1.5 * 2^52 */
    const double ln2_hi = 0x1.62e42fee00000p-1, ln2_lo = 0x1.a39ef35793c76p-33;
    const double xc = x < -708.0 ? -708.0 : x > 709.0 ? 709.0 : x;
    bits64 t = {.f = __builtin_fma(xc, log2e, shifter)};
    const double k = t.f - shifter, r = __builtin_fma(-k, ln2_lo, __builtin_fma(-k, ln2_hi, xc));
    double p = 1.0 / 6227020800.0; /* 1/13!, then Horner down to 1/0! */
    p = __builtin_fma(p, r, 1.0 / 479001600), p = __builtin_fma(p, r, 1.0 / 39916800);
    p = __builtin_fma(p, r, 1.0 / 3628800), p = __builtin_fma(p, r, 1.0 / 362880);
    p = __builtin_fma(p, r, 1.0 / 40320), p = __builtin_fma(p, r, 1.0 / 5040);
    p = __builtin_fma(p, r, 1.0 / 720), p = __builtin_fma(p, r, 1.0 / 120);
    p = __builtin_fma(p, r, 1.0 / 24), p = __builtin_fma(p, r, 1.0 / 6);
    p = __builtin_fma(p, r, 0.5), p = __builtin_fma(p, r, 1.0), p = __builtin_fma(p, r, 1.0);
    bits64 two_k = {.u = (t.u << 52) + (1023ull << 52)};
    return x < -708.0 ? 0.0 : p * two_k.f;
}

/* E(x), and its gradient into g (n): the fused hand gradient. */
static double eam_grad(const double *restrict x, double *restrict g, int n) {
    double p = 0;
    #pragma omp simd reduction(+ : p)
    for (int i = 0; i < n; i++) {
        g[i] = exp_inline(-3.0 * x[i] - 3.0); /* rho(x_i), kept for pass 2 */
        p += g[i];
    }
    const double dF = 2 * p + 3 * p * p + p * p * p; /* F'(p) */
    #pragma omp simd
    for (int i = 0; i < n; i++) g[i] *= -3.0 * dF;
    return p * p + p * p * p + 0.25 * p * p * p * p;
}

/* ---- the function as an op for hg_gradcheck: input x (n), output E (1) ---- */

typedef struct eam_op {
    int n;
    double *x, *g; /* work arrays, made once */
} eam_op;

static hg_status op_forward(void *ctx, const float *const *in, float *const *out) {
    eam_op *e = ctx;
    for (int i = 0; i < e->n; i++) e->x[i] = in[0][i];
    out[0][0] = (float)eam_grad(e->x, e->g, e->n);
    return HG_OK;
}

static hg_status op_backward(void *ctx, const float *const *in, const float *const *out, const float *const *dout,
                             float *const *din) {
    (void)out;
    eam_op *e = ctx;
    for (int i = 0; i < e->n; i++) e->x[i] = in[0][i];
    eam_grad(e->x, e->g, e->n);
    for (int i = 0; i < e->n; i++) din[0][i] = (float)(e->g[i] * dout[0][0]);
    return HG_OK;
}

/* The reference: E as written, nothing fused. */
static hg_status op_forward_f64(void *ctx, const double *const *in, double *const *out) {
    const eam_op *e = ctx;
    double p = 0;
    for (int i = 0; i < e->n; i++) p += exp(-3 * (in[0][i] + 1));
    out[0][0] = p * p + p * p * p + p * p * p * p / 4;
    return HG_OK;
}

typedef struct call {
    const double *x;
    double *g;
    int n;
    volatile double sink;
} call;

static hg_status timed(void *ctx) {
    call *c = ctx;
    c->sink = eam_grad(c->x, c->g, c->n);
    return HG_OK;
}

int main(void) {
    const int sizes[2] = {100, 1000};
    const double seed_hand_us[2] = {1.771, 16.3};
    int failed = 0;
#if defined(__AVX512F__)
    const char *isa = "AVX-512"; /* what the loops were compiled for */
#elif defined(__AVX2__)
    const char *isa = "AVX2";
#else
    const char *isa = "baseline (no AVX2)";
#endif
    printf("EAM gradient, double, ISA %s\n", isa);
    /* The inlined exp against libm's, over the range where it is not subnormal. */
    double worst = 0, at = 0;
    for (int i = 0; i <= 1000000; i++) {
        double x = -708.0 + 1417.0 * i / 1000000, e = exp(x), err = fabs(exp_inline(x) - e) / e;
        if (err > worst) worst = err, at = x;
    }
    printf("exp_inline: worst relative error %.1e (at x = %.3f) against exp over [-708, 709]\n", worst, at);
    failed |= !(worst < 4.5e-16); /* 2 ulp */
    for (int s = 0; s < 2; s++) {
        const int n = sizes[s];
        double *x = malloc(n * sizeof *x), *g = malloc(n * sizeof *g), *wx = malloc(n * sizeof *wx);
        eam_op e = {n, wx, g};
        hg_op_def op = {.name = "eam", .n_in = 1, .n_out = 1, .in_name = {"x"}, .out_name = {"E"},
                        .in_size = {n}, .out_size = {1}, .forward = op_forward, .backward = op_backward,
                        .forward_f64 = op_forward_f64, .ctx = &e};
        hg_gradcheck_options go = hg_gradcheck_options_default();
        go.lo[0] = 0, go.hi[0] = 1; /* the seed's x = rand(N) */
        hg_gradcheck_report r;
        if (hg_gradcheck(&op, &go, &r) != HG_OK) {
            fprintf(stderr, "eam: %s\n", hg_last_error());
            return 1;
        }
        printf("N=%d  gradcheck: %s (worst dx[%lld] relative error %.1e)\n", n, r.summary, (long long)r.in[0].index,
               r.in[0].err);
        failed |= !r.ok;

        for (int i = 0; i < n; i++) x[i] = (double)rand() / RAND_MAX;
        call c = {x, g, n, 0};
        hg_bench_result b;
        if (hg_bench_op(timed, &c, 200, &b) != HG_OK) {
            fprintf(stderr, "eam: %s\n", hg_last_error());
            return 1;
        }
        printf("N=%d  time a call: min %.0f ns, median %.0f ns, max %.0f ns (%d runs of %lld calls); seed: hand "
               "%.0f ns%s\n", n, b.min_s * 1e9, b.median_s * 1e9, b.max_s * 1e9, b.runs, (long long)b.calls_per_run,
               seed_hand_us[s] * 1e3, n == 100 ? ", LoopVectorization 108 ns" : "");
        if (b.counted) {
            printf("N=%d  allocations in %lld calls: %lld\n", n, (long long)b.runs * b.calls_per_run, (long long)b.allocs);
            failed |= b.allocs != 0;
        } else {
            printf("N=%d  allocations: not counted (a sanitizer build)\n", n);
        }
        free(x), free(g), free(wx);
    }
    return failed;
}
