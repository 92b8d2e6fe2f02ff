/* Kernel lab, attention: the CPU backend's blockwise attention, forward and backward, on
 * one shape, timed next to the sgemm ceiling measured in the same process. The machine is
 * shared, so each round measures the ceiling, then the op, then the ceiling again, and
 * prints the op's share of the mean ceiling of that round; compare shares, not seconds.
 * FLOPs are counted as FlashAttention counts them: forward 4*B*NH*T^2*hs, halved when
 * causal; backward 2.5x forward.
 *
 * usage: kernel_lab_attention [hs] [T] [B] [threads] [rounds] [causal] [NH] */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>

#include "backend/backend.h"
#include "core/table.h"
#include "core/timer.h"

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *t, int n) {
    qsort(t, (size_t)n, sizeof t[0], cmp_double);
    return t[n / 2];
}

int main(int argc, char **argv) {
    int hs = argc > 1 ? atoi(argv[1]) : 64, T = argc > 2 ? atoi(argv[2]) : 4096;
    int B = argc > 3 ? atoi(argv[3]) : 8, threads = argc > 4 ? atoi(argv[4]) : omp_get_num_procs();
    int rounds = argc > 5 ? atoi(argv[5]) : 3, causal = argc > 6 ? atoi(argv[6]) : 1;
    int NH = argc > 7 ? atoi(argv[7]) : 1;
    if (hs <= 0 || hs % 16 || T <= 0 || B <= 0 || threads <= 0 || rounds <= 0 || NH <= 0) {
        fprintf(stderr, "usage: kernel_lab_attention [hs] [T] [B] [threads] [rounds] [causal] [NH]\n");
        return 2;
    }
    hg_backend *be;
    if (hg_backend_cpu_create(&be, threads) != HG_OK) return 1;
    hg_attention_shape s = {B, T, NH, hs, causal};
    size_t C = (size_t)NH * hs, nqkv = (size_t)B * T * 3 * C, nout = (size_t)B * T * C, nlse = (size_t)B * NH * T;
    size_t scratch_bytes = be->ops->attention_scratch_bytes(be, &s);
    float *qkv = hg_aligned_alloc(nqkv * 4), *dqkv = hg_aligned_alloc(nqkv * 4), *out = hg_aligned_alloc(nout * 4);
    float *dout = hg_aligned_alloc(nout * 4), *lse = hg_aligned_alloc(nlse * 4), *scratch = hg_aligned_alloc(scratch_bytes);
    if (!qkv || !dqkv || !out || !dout || !lse || !scratch) {
        fprintf(stderr, "kernel_lab_attention: out of memory\n");
        return 1;
    }
    uint32_t x = 2024;
    for (size_t i = 0; i < nqkv; i++) qkv[i] = (float)((x = x * 1664525u + 1013904223u) >> 8) / 8388608.0f - 1.0f;
    for (size_t i = 0; i < nout; i++) dout[i] = (float)((x = x * 1664525u + 1013904223u) >> 8) / 8388608.0f - 1.0f;

    double fwd_flop = 4.0 * B * NH * (double)T * T * hs * (causal ? 0.5 : 1.0), bwd_flop = 2.5 * fwd_flop;
    printf("attention hs=%d T=%d B=%d NH=%d %s, %d threads; scratch %.1f MiB; GFLOP fwd %.2f bwd %.2f\n", hs, T, B,
           NH, causal ? "causal" : "full", threads, scratch_bytes / 1048576.0, fwd_flop / 1e9, bwd_flop / 1e9);
    printf("%5s %9s %9s %9s %9s %9s %9s %8s %8s %8s\n", "round", "peak1", "peak2", "fwd ms", "bwd ms", "fwd GF/s",
           "bwd GF/s", "fwd %", "bwd %", "f+b %");
    be->ops->attention_forward(be, out, lse, qkv, &s, scratch); /* warm-up */
    be->ops->attention_backward(be, dqkv, dout, qkv, out, lse, &s, scratch);
    double share_sum = 0;
    for (int r = 0; r < rounds; r++) {
        double p1, p2, tf[3], tb[3];
        hg_sgemm_peak_gflops(threads, &p1);
        for (int i = 0; i < 3; i++) {
            double t0 = hg_now();
            be->ops->attention_forward(be, out, lse, qkv, &s, scratch);
            double t1 = hg_now();
            be->ops->attention_backward(be, dqkv, dout, qkv, out, lse, &s, scratch);
            tb[i] = hg_now() - t1;
            tf[i] = t1 - t0;
        }
        hg_sgemm_peak_gflops(threads, &p2);
        double f = median(tf, 3), b = median(tb, 3), peak = 0.5 * (p1 + p2);
        double gf = fwd_flop / f / 1e9, gb = bwd_flop / b / 1e9, gfb = (fwd_flop + bwd_flop) / (f + b) / 1e9;
        share_sum += gfb / peak;
        printf("%5d %9.1f %9.1f %9.2f %9.2f %9.1f %9.1f %7.1f%% %7.1f%% %7.1f%%\n", r, p1, p2, 1e3 * f, 1e3 * b, gf, gb,
               100 * gf / peak, 100 * gb / peak, 100 * gfb / peak);
    }
    double chk = 0;
    for (size_t i = 0; i < nqkv; i += 997) chk += dqkv[i];
    printf("mean forward+backward share of the sgemm ceiling: %.1f%% (checksum %.6g)\n", 100 * share_sum / rounds, chk);
    hg_aligned_free(qkv), hg_aligned_free(dqkv), hg_aligned_free(out), hg_aligned_free(dout), hg_aligned_free(lse);
    hg_aligned_free(scratch);
    be->ops->destroy(be);
    return 0;
}
