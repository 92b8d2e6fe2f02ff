/* handgrad bench: times forward, forward+backward and a full training step of one model
 * shape, after warm-up, and puts it against the sgemm ceiling measured in the same run. */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "cli_model.h"
#include "commands.h"
#include "handgrad.h"
#include "core/timer.h"

typedef struct timing {
    double mean, std;
} timing;

static timing stats(const double *x, int n) {
    timing t = {0, 0};
    for (int i = 0; i < n; i++) t.mean += x[i];
    t.mean /= n;
    for (int i = 0; i < n; i++) t.std += (x[i] - t.mean) * (x[i] - t.mean);
    t.std = n > 1 ? sqrt(t.std / (n - 1)) : 0.0;
    return t;
}

static void usage(FILE *f) {
    fprintf(f,
            "usage: handgrad bench [options]\n" CLI_MODEL_USAGE
            "  --warmup N       untimed steps first (default 1)\n"
            "  --steps N        timed repetitions of each pass (default 3)\n"
            "  --json           one JSON object instead of a table\n");
}

typedef enum { PASS_FORWARD, PASS_FORWARD_BACKWARD, PASS_STEP } pass;

static int run_pass(hg_model *m, pass p, const int32_t *tok, const int32_t *tgt, int B, int T, const hg_adamw *a) {
    float loss;
    hg_status s = HG_OK;
    switch (p) {
    case PASS_FORWARD: s = hg_forward(m, tok, tgt, B, T, &loss, NULL); break;
    case PASS_FORWARD_BACKWARD: s = hg_forward_backward(m, tok, tgt, B, T, 1.0f, &loss); break;
    case PASS_STEP:
        s = hg_zero_grad(m);
        if (s == HG_OK) s = hg_forward_backward(m, tok, tgt, B, T, 1.0f, &loss);
        if (s == HG_OK) s = hg_optimizer_step(m, a, NULL);
        break;
    }
    if (s != HG_OK) {
        fprintf(stderr, "handgrad bench: %s\n", hg_last_error());
        return 1;
    }
    return 0;
}

int cmd_bench(int argc, char **argv) {
    cli_model mo = cli_model_default();
    int warmup = 1, steps = 3, json = 0;
    static const struct option opts[] = {
        CLI_MODEL_OPTIONS,
        {"warmup", required_argument, 0, 'w'}, {"steps", required_argument, 0, 's'},
        {"json", no_argument, 0, 'j'},        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0}};
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        int shared = cli_model_flag("bench", &mo, c, optarg);
        if (shared < 0) return 2;
        if (shared) continue;
        switch (c) {
        case 'w': warmup = atoi(optarg); break;
        case 's': steps = atoi(optarg); break;
        case 'j': json = 1; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    const char *model = mo.preset;
    int B = mo.batch, T = mo.ctx, threads;
    uint64_t seed = mo.seed;
    if (warmup < 0 || steps < 1) {
        fprintf(stderr, "handgrad bench: --warmup must be >= 0 and --steps >= 1\n");
        return 2;
    }
    hg_config cfg;
    hg_options opt;
    if (cli_model_setup("bench", &mo, 1, &cfg, &opt)) return 2;
    hg_model *m;
    hg_status st = hg_model_create(&m, &cfg, &opt);
    if (st != HG_OK) {
        fprintf(stderr, "handgrad bench: %s%s\n", st == HG_ERR_NOMEM ? "skipped: " : "", hg_last_error());
        return st == HG_ERR_NOMEM ? 0 : 2;
    }
    threads = hg_model_options(m)->threads;
    int32_t *tok = malloc(sizeof(int32_t) * (size_t)B * T), *tgt = malloc(sizeof(int32_t) * (size_t)B * T);
    double *times = malloc(sizeof(double) * (size_t)steps);
    if (!tok || !tgt || !times) {
        fprintf(stderr, "handgrad bench: out of memory\n");
        return 1;
    }
    cli_random_batch(seed, cfg.vocab_size, B * T, tok, tgt);
    hg_adamw adamw = hg_adamw_default();
    timing res[3];
    int rc = 0;
    for (int p = 0; p < 3 && !rc; p++) {
        for (int w = 0; w < warmup && !rc; w++) rc = run_pass(m, (pass)p, tok, tgt, B, T, &adamw);
        for (int s = 0; s < steps && !rc; s++) {
            double t0 = hg_now();
            rc = run_pass(m, (pass)p, tok, tgt, B, T, &adamw);
            times[s] = hg_now() - t0;
        }
        res[p] = stats(times, steps);
    }
    double peak = 0;
    if (!rc && hg_sgemm_peak_gflops(threads, &peak) != HG_OK) {
        fprintf(stderr, "handgrad bench: %s\n", hg_last_error());
        rc = 1;
    }
    if (!rc) {
        struct rusage ru;
        getrusage(RUSAGE_SELF, &ru);
        long long rss = (long long)ru.ru_maxrss * 1024;
        double gflop = hg_train_flops(&cfg, B, T) / 1e9;
        double achieved = gflop / res[PASS_STEP].mean, tps = (double)B * T / res[PASS_STEP].mean;
        if (json) {
            printf("{\"model\": \"%s\", \"batch\": %d, \"ctx\": %d, \"threads\": %d, ", model, B, T, threads);
            const char *names[] = {"forward", "forward_backward", "train_step"};
            for (int p = 0; p < 3; p++)
                printf("\"%s\": {\"mean_s\": %.6f, \"std_s\": %.6f}, ", names[p], res[p].mean, res[p].std);
            printf("\"tokens_per_s\": %.1f, \"model_gflop_per_step\": %.3f, \"achieved_gflops\": %.2f, "
                   "\"sgemm_peak_gflops\": %.2f, \"peak_fraction\": %.4f, \"peak_rss_bytes\": %lld}\n",
                   tps, gflop, achieved, peak, achieved / peak, rss);
        } else {
            printf("handgrad bench: %s, batch %d, ctx %d, %d threads, warmup %d, steps %d\n", model, B, T, threads, warmup, steps);
            printf("  %-18s %10s %10s\n", "pass", "mean (s)", "std (s)");
            printf("  %-18s %10.4f %10.4f\n", "forward", res[0].mean, res[0].std);
            printf("  %-18s %10.4f %10.4f\n", "forward+backward", res[1].mean, res[1].std);
            printf("  %-18s %10.4f %10.4f\n", "backward (fb-f)", res[1].mean - res[0].mean, 0.0);
            printf("  %-18s %10.4f %10.4f\n", "train step", res[2].mean, res[2].std);
            printf("  tokens/s %.1f, %.1f GFLOP/step, %.1f GFLOP/s = %.1f%% of sgemm peak %.1f GFLOP/s\n", tps, gflop,
                   achieved, 100 * achieved / peak, peak);
            printf("  backward/forward %.2f, peak RSS %.2f GiB\n", (res[1].mean - res[0].mean) / res[0].mean,
                   rss / 1073741824.0);
        }
    }
    free(tok);
    free(tgt);
    free(times);
    hg_model_free(m);
    return rc;
}
