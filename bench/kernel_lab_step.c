/* Kernel lab, training step: a whole GPT-2 step (zero_grad, forward+backward, AdamW) and its
 * parts, measured by wall clock and by CPU time, next to a 2048^3 sgemm measured the same
 * two ways in the same process. On a shared machine, wall-clock shares swing with what
 * else runs; CPU-time shares (FLOPs per CPU-second of all this process's threads, against
 * the sgemm's) move much less, so compare library variants by them. Run with
 * OMP_WAIT_POLICY=passive so that threads waiting at a barrier sleep instead of spinning.
 *
 * usage: kernel_lab_step [preset] [B] [T] [threads] [rounds] */
#include <dnnl.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "core/table.h"
#include "core/timer.h"
#include "handgrad.h"

static double cpu_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

typedef struct meter {
    double wall, cpu;
} meter;

static meter meter_now(void) { return (meter){hg_now(), cpu_now()}; }

static void meter_add(meter *acc, meter t0) {
    meter t1 = meter_now();
    acc->wall += t1.wall - t0.wall;
    acc->cpu += t1.cpu - t0.cpu;
}

static int check(hg_status s) {
    if (s == HG_OK) return 0;
    fprintf(stderr, "kernel_lab_step: %s\n", hg_last_error());
    exit(1);
}

int main(int argc, char **argv) {
    const char *preset = argc > 1 ? argv[1] : "small";
    int B = argc > 2 ? atoi(argv[2]) : 4, T = argc > 3 ? atoi(argv[3]) : 256;
    int threads = argc > 4 ? atoi(argv[4]) : omp_get_num_procs(), rounds = argc > 5 ? atoi(argv[5]) : 3;
    hg_config cfg;
    check(hg_config_preset(preset, &cfg));
    hg_options opt = hg_options_default();
    opt.batch = B, opt.seq_len = T, opt.threads = threads, opt.seed = 1;
    hg_model *m;
    check(hg_model_create(&m, &cfg, &opt));
    int32_t *tok = malloc(sizeof(int32_t) * (size_t)B * T), *tgt = malloc(sizeof(int32_t) * (size_t)B * T);
    uint32_t x = 7;
    for (int i = 0; i < B * T; i++) {
        tok[i] = (int32_t)((x = x * 1664525u + 1013904223u) % (uint32_t)cfg.vocab_size);
        tgt[i] = (int32_t)((x = x * 1664525u + 1013904223u) % (uint32_t)cfg.vocab_size);
    }
    enum { SG = 2048 };
    float *A = hg_aligned_alloc((size_t)SG * SG * 4), *Bm = hg_aligned_alloc((size_t)SG * SG * 4);
    float *Cm = hg_aligned_alloc((size_t)SG * SG * 4);
    for (size_t i = 0; i < (size_t)SG * SG; i++) A[i] = Bm[i] = (float)((x = x * 1664525u + 1013904223u) >> 8) / 8388608.0f - 1.0f;
    double flop = hg_train_flops(&cfg, B, T), sg_flop = 2.0 * SG * SG * (double)SG;
    hg_adamw adamw = hg_adamw_default();
    float loss;
    omp_set_num_threads(threads); /* warm-up: the sgemm's code and buffers too */
    dnnl_sgemm('N', 'N', SG, SG, SG, 1.0f, A, SG, Bm, SG, 0.0f, Cm, SG);
    check(hg_zero_grad(m)); /* warm-up: primitives created, pages touched */
    check(hg_forward_backward(m, tok, tgt, B, T, 1.0f, &loss));
    check(hg_optimizer_step(m, &adamw, NULL));
    printf("%s B=%d T=%d, %d threads, %.1f GFLOP per step; shares of the sgemm (GFLOP/s, or GFLOP per CPU-second)\n",
           preset, B, T, threads, flop / 1e9);
    printf("%5s %9s %9s | %9s %9s %9s %9s %9s | %8s %8s\n", "round", "sg GF/s", "sg GF/cs", "step s", "zero s", "f+b s",
           "adamw s", "step cs", "wall %", "cpu %");
    double wall_sum = 0, cpu_sum = 0;
    for (int r = 0; r < rounds; r++) {
        meter sg = {0, 0}, zero = {0, 0}, fb = {0, 0}, opt_t = {0, 0};
        omp_set_num_threads(threads);
        for (int i = 0; i < 3; i++) {
            meter t0 = meter_now();
            dnnl_sgemm('N', 'N', SG, SG, SG, 1.0f, A, SG, Bm, SG, 0.0f, Cm, SG);
            meter_add(&sg, t0);
        }
        for (int i = 0; i < 2; i++) {
            meter t0 = meter_now();
            check(hg_zero_grad(m));
            meter_add(&zero, t0);
            t0 = meter_now();
            check(hg_forward_backward(m, tok, tgt, B, T, 1.0f, &loss));
            meter_add(&fb, t0);
            t0 = meter_now();
            check(hg_optimizer_step(m, &adamw, NULL));
            meter_add(&opt_t, t0);
        }
        double sgw = 3 * sg_flop / sg.wall / 1e9, sgc = 3 * sg_flop / sg.cpu / 1e9;
        double stepw = (zero.wall + fb.wall + opt_t.wall) / 2, stepc = (zero.cpu + fb.cpu + opt_t.cpu) / 2;
        double sw = flop / stepw / 1e9 / sgw, sc = flop / stepc / 1e9 / sgc;
        wall_sum += sw, cpu_sum += sc;
        printf("%5d %9.1f %9.1f | %9.4f %9.4f %9.4f %9.4f %9.4f | %7.1f%% %7.1f%%\n", r, sgw, sgc, stepw, zero.wall / 2,
               fb.wall / 2, opt_t.wall / 2, stepc, 100 * sw, 100 * sc);
    }
    printf("step share of the sgemm, mean of rounds: %.1f%% by wall clock, %.1f%% by CPU time (loss %.4f)\n",
           100 * wall_sum / rounds, 100 * cpu_sum / rounds, loss);
    hg_aligned_free(A), hg_aligned_free(Bm), hg_aligned_free(Cm);
    free(tok), free(tgt);
    hg_model_free(m);
    return 0;
}
