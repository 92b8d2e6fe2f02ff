/* Data-parallel step time: run alone for 1 rank, under mpirun for N. Rank 0 prints the
 * mean step time, tokens/s over all ranks, and where the communication went: buckets
 * whose reduction finished while backward was still running (overlap), the time left
 * waiting after backward (exposed), the optimizer (with ZeRO-1's all-gather), and
 * memory per rank (optimizer state from the plan, peak RSS).
 *
 *   dist_bench --model small --batch 4 --ctx 256 --threads 1                # 1 rank
 *   mpirun -np 2 dist_bench --model small --batch 8 --ctx 256 --threads 1   # 2 ranks
 *
 * --batch is the global batch (each rank takes batch/N). Scaling efficiency at N ranks
 * with the same per-rank batch: tokens/s(N) / (N * tokens/s(1)). --bucket-mb 100000
 * (one bucket, started after backward) shows what the overlap saves. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "core/timer.h"
#include "handgrad.h"

static int fail(int rank, const char *what) {
    fprintf(stderr, "rank %d: %s: %s\n", rank, what, hg_last_error());
    return 1;
}

int main(int argc, char **argv) {
    const char *model = "small";
    int batch = 4, T = 256, threads = 1, steps = 5, warmup = 1, zero = 0;
    double bucket_mb = 25;
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *k = argv[i], *v = argv[i + 1];
        if (!strcmp(k, "--model")) model = v;
        else if (!strcmp(k, "--batch")) batch = atoi(v);
        else if (!strcmp(k, "--ctx")) T = atoi(v);
        else if (!strcmp(k, "--threads")) threads = atoi(v);
        else if (!strcmp(k, "--steps")) steps = atoi(v);
        else if (!strcmp(k, "--warmup")) warmup = atoi(v);
        else if (!strcmp(k, "--zero")) zero = atoi(v);
        else if (!strcmp(k, "--bucket-mb")) bucket_mb = atof(v);
        else return fprintf(stderr, "dist_bench: unknown flag %s\n", k), 2;
    }
    hg_comm *comm;
    if (hg_comm_open(&comm, HG_COMM_AUTO) != HG_OK) return fail(0, "hg_comm_open");
    int N = hg_comm_size(comm), r = hg_comm_rank(comm);
    hg_config cfg;
    if (hg_config_preset(model, &cfg) != HG_OK) return fail(r, "--model");
    cfg.dropout = 0.0f;
    hg_dist_options dopt = hg_dist_options_default();
    dopt.zero = zero, dopt.global_batch = batch, dopt.bucket_bytes = (size_t)(bucket_mb * 1048576);
    hg_options opt = hg_options_default();
    opt.batch = batch / N > 0 ? batch / N : 1, opt.seq_len = T, opt.threads = threads, opt.seed = 1;
    if (zero) opt.shards = N, opt.shard = r;
    hg_model *m;
    hg_dist *d;
    if (hg_model_create(&m, &cfg, &opt) != HG_OK) return fail(r, "hg_model_create");
    if (hg_dist_create(&d, comm, m, &dopt) != HG_OK) return fail(r, "hg_dist_create");
    int B = opt.batch;
    int32_t *x = malloc(sizeof(int32_t) * (size_t)B * T), *y = malloc(sizeof(int32_t) * (size_t)B * T);
    for (int i = 0; i < B * T; i++) x[i] = (i * 7919 + r * 31) % cfg.vocab_size, y[i] = (i * 104729 + 11) % cfg.vocab_size;
    hg_adamw adamw = hg_adamw_default();
    double sum[4] = {0}; /* step, exposed, optimizer, buckets done in backward */
    for (int s = 0; s < warmup + steps; s++) {
        double t0 = hg_now();
        float loss;
        if (hg_zero_grad(m) != HG_OK || hg_dist_forward_backward(d, x, y, B, T, 1.0f, 1, &loss) != HG_OK ||
            hg_dist_optimizer_step(d, &adamw, NULL) != HG_OK)
            return fail(r, "step");
        double dt = hg_now() - t0;
        hg_dist_stats st = hg_dist_get_stats(d);
        if (s >= warmup) sum[0] += dt, sum[1] += st.exposed_comm_s, sum[2] += st.optimizer_s, sum[3] += st.buckets_done_in_backward;
    }
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    double rss = (double)ru.ru_maxrss * 1024;
    hg_dist_stats st = hg_dist_get_stats(d);
    hg_memory_plan plan = hg_model_memory(m);
    double all[5] = {sum[0], sum[1], sum[2], sum[3], rss};
    if (hg_dist_sum(d, all, 5) != HG_OK) return fail(r, "sum");
    if (r == 0) {
        double step = all[0] / steps / N;
        printf("%s B=%d T=%d ranks=%d threads/rank=%d zero=%d bucket=%.0f MB\n", model, batch, T, N, threads, zero, bucket_mb);
        printf("  step %.3f s, %.0f tokens/s (all ranks)\n", step, batch * T / step);
        printf("  gradient reduction: %d buckets, %.1f of them finished during backward; %.3f s exposed after backward\n",
               st.buckets, all[3] / steps / N, all[1] / steps / N);
        printf("  optimizer%s: %.3f s\n", zero ? " + all-gather" : "", all[2] / steps / N);
        printf("  per rank: optimizer state %.1f MB (plan), peak RSS %.1f MB (mean over ranks)\n", plan.optimizer / 1e6,
               all[4] / N / 1e6);
    }
    free(x), free(y);
    hg_dist_free(d);
    hg_model_free(m);
    hg_comm_close(comm);
    return 0;
}
