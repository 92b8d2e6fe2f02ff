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
 * Exit status 0 when the check passes and no allocation is seen. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "handgrad_ext.h"

/* glibc's vector exp (libmvec), which it declares only under -ffast-math; the loop
 * below then calls it on 8 (AVX-512) or 4 (AVX2) doubles at a time */
#if defined(__x86_64__) && defined(__GLIBC__) && defined(_OPENMP) && !defined(__FAST_MATH__)
#pragma omp declare simd notinbranch
double exp(double x);
#endif

/* E(x), and its gradient into g (n): the fused hand gradient. */
static double eam_grad(const double *restrict x, double *restrict g, int n) {
    double p = 0;
    #pragma omp simd reduction(+ : p)
    for (int i = 0; i < n; i++) {
        g[i] = exp(-3.0 * x[i] - 3.0); /* rho(x_i), kept for pass 2 */
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
    printf("EAM gradient, double, ISA %s\n", __builtin_cpu_supports("avx512f") ? "AVX-512" : "AVX2");
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
