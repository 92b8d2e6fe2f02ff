/* Kernel lab, attention: the CPU backend's blockwise attention, forward and backward, on
 * one shape, timed next to the sgemm ceiling measured in the same process. FLOPs are
 * counted as FlashAttention counts them: forward 4*B*NH*T^2*hs, halved when causal;
 * backward 2.5x forward.
 *
 * The machine is shared, so two measures are printed for each round:
 *  - wall clock: the ceiling, then the op, then the ceiling again; the op's share of the
 *    mean ceiling of that round;
 *  - CPU time of all this process's threads (time spent descheduled does not count):
 *    FLOPs per CPU-second of the op against those of a 2048^3 sgemm. With
 *    OMP_WAIT_POLICY=passive, threads waiting at a barrier sleep instead of spinning, so
 *    this share moves little under contention; compare variants by it.
 *
 * TILES names the tile kernel (backend/cpu/tile.h): avx512, avx2 or portable; by default
 * the widest this CPU runs. To set an AVX2 kernel against an AVX2 ceiling on an AVX-512
 * machine, run with ONEDNN_MAX_CPU_ISA=AVX2.
 *
 * With KERNEL_LAB_REPEAT=N in the environment, the lab only runs the forward and the
 * backward N times, with no ceiling: for a sampling profiler (perf record), whose samples
 * are then all the op's.
 *
 * usage: kernel_lab_attention [hs] [T] [B] [threads] [rounds] [causal] [NH] [TILES] */
#include <dnnl.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "backend/backend.h"
#include "backend/cpu/tile.h"
#include "core/table.h"
#include "core/timer.h"

/* CPU seconds used so far by all of this process's threads. */
static double cpu_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

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
        fprintf(stderr, "usage: kernel_lab_attention [hs] [T] [B] [threads] [rounds] [causal] [NH] [TILES]\n");
        return 2;
    }
    if (argc > 8 && !tile_use(argv[8])) {
        fprintf(stderr, "kernel_lab_attention: tile kernel %s: not in this build or not run by this CPU\n", argv[8]);
        return 2;
    }
    hg_backend *be;
    if (hg_backend_cpu_create(&be, threads, HG_PRECISION_FP32) != HG_OK) return 1;
    hg_attention_shape s = {B, T, NH, hs, causal, 0, 0, 0, NULL};
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

    const char *repeat = getenv("KERNEL_LAB_REPEAT");
    if (repeat) {
        for (int i = 0, n = atoi(repeat); i < n; i++) {
            be->ops->attention_forward(be, out, lse, qkv, &s, scratch);
            be->ops->attention_backward(be, dqkv, dout, qkv, out, lse, &s, scratch);
        }
        return 0;
    }
    double fwd_flop = 4.0 * B * NH * (double)T * T * hs * (causal ? 0.5 : 1.0), bwd_flop = 2.5 * fwd_flop;
    printf("attention hs=%d T=%d B=%d NH=%d %s, %d threads, %s tiles; scratch %.1f MiB; GFLOP fwd %.2f bwd %.2f\n", hs,
           T, B, NH, causal ? "causal" : "full", threads, tile_active()->name, scratch_bytes / 1048576.0,
           fwd_flop / 1e9, bwd_flop / 1e9);
    /* the sgemm whose FLOPs per cycle the op is compared with: 2048^3, NN */
    enum { SG = 2048 };
    float *A = hg_aligned_alloc((size_t)SG * SG * 4), *Bm = hg_aligned_alloc((size_t)SG * SG * 4), *Cm = hg_aligned_alloc((size_t)SG * SG * 4);
    if (!A || !Bm || !Cm) return 1;
    for (size_t i = 0; i < (size_t)SG * SG; i++) A[i] = Bm[i] = (float)((x = x * 1664525u + 1013904223u) >> 8) / 8388608.0f - 1.0f;
    printf("%5s %7s %7s %9s %9s %7s %7s %7s | %8s %8s %8s %8s\n", "round", "peak1", "peak2", "fwd ms", "bwd ms", "fwd %",
           "bwd %", "f+b %", "sg GF/cs", "fwd %cpu", "bwd %cpu", "f+b %cpu");
    omp_set_num_threads(threads); /* warm-up: the sgemm's code and buffers too */
    dnnl_sgemm('N', 'N', SG, SG, SG, 1.0f, A, SG, Bm, SG, 0.0f, Cm, SG);
    be->ops->attention_forward(be, out, lse, qkv, &s, scratch); /* warm-up */
    be->ops->attention_backward(be, dqkv, dout, qkv, out, lse, &s, scratch);
    double share_sum = 0, cshare_sum = 0;
    for (int r = 0; r < rounds; r++) {
        double p1, p2, tf[3], tb[3], cf[3], cb[3], cs[3];
        hg_sgemm_peak_gflops(threads, &p1);
        omp_set_num_threads(threads);
        for (int i = 0; i < 3; i++) {
            double c0 = cpu_now();
            dnnl_sgemm('N', 'N', SG, SG, SG, 1.0f, A, SG, Bm, SG, 0.0f, Cm, SG);
            cs[i] = cpu_now() - c0;
        }
        for (int i = 0; i < 3; i++) {
            double c0 = cpu_now(), t0 = hg_now();
            be->ops->attention_forward(be, out, lse, qkv, &s, scratch);
            double c1 = cpu_now(), t1 = hg_now();
            be->ops->attention_backward(be, dqkv, dout, qkv, out, lse, &s, scratch);
            tb[i] = hg_now() - t1, cb[i] = cpu_now() - c1;
            tf[i] = t1 - t0, cf[i] = c1 - c0;
        }
        hg_sgemm_peak_gflops(threads, &p2);
        double f = median(tf, 3), b = median(tb, 3), peak = 0.5 * (p1 + p2);
        double gf = fwd_flop / f / 1e9, gb = bwd_flop / b / 1e9, gfb = (fwd_flop + bwd_flop) / (f + b) / 1e9;
        double sg = 2.0 * SG * SG * (double)SG / median(cs, 3) / 1e9, fc = fwd_flop / median(cf, 3) / 1e9, bc = bwd_flop / median(cb, 3) / 1e9;
        double fbc = (fwd_flop + bwd_flop) / (median(cf, 3) + median(cb, 3)) / 1e9;
        share_sum += gfb / peak;
        cshare_sum += fbc / sg;
        printf("%5d %7.1f %7.1f %9.2f %9.2f %6.1f%% %6.1f%% %6.1f%% | %8.1f %7.1f%% %7.1f%% %7.1f%%\n", r, p1, p2, 1e3 * f,
               1e3 * b, 100 * gf / peak, 100 * gb / peak, 100 * gfb / peak, sg, 100 * fc / sg, 100 * bc / sg, 100 * fbc / sg);
    }
    hg_aligned_free(A), hg_aligned_free(Bm), hg_aligned_free(Cm);
    double chk = 0;
    for (size_t i = 0; i < nqkv; i += 997) chk += dqkv[i];
    printf("forward+backward share of the sgemm ceiling, mean of rounds: %.1f%% by wall clock, %.1f%% by CPU time "
           "(checksum %.6g)\n", 100 * share_sum / rounds, 100 * cshare_sum / rounds, chk);
    hg_aligned_free(qkv), hg_aligned_free(dqkv), hg_aligned_free(out), hg_aligned_free(dout), hg_aligned_free(lse);
    hg_aligned_free(scratch);
    be->ops->destroy(be);
    return 0;
}
