/* The NCCL communicator on one GPU, one rank (bootstrapped over MPI as a singleton):
 *
 * 1. Ordering. A collective must start after the kernels queued before it on the CUDA
 *    backend's stream, which is non-blocking. The backend's stream is kept busy with
 *    large GEMMs, a kernel writing new values B into the send buffer is queued behind
 *    them, then a one-rank reduce-scatter copies send to recv. Once the communicator follows
 *    the backend's stream (hg_comm_follow_backend), recv must hold B exactly. Before the
 *    hand-over (the legacy default stream, which does not wait for a non-blocking one)
 *    the test reports what recv held: the old values A show that the check can fail.
 * 2. hg_dist over NCCL with a CUDA model (one rank: the parameter broadcast runs on
 *    NCCL) trains three deterministic steps bit-identically to the model alone.
 *
 * Without a GPU: "skipped: no CUDA device" and exit 77. Without NCCL or MPI in this
 * build, or where MPI cannot start, likewise skipped with the reason. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "core/error.h"
#include "cuda_util.h"
#include "dist/comm.h"
#include "handgrad.h"

static int failures;

/* recv after busy work, a queued copy of B into send, and a reduce-scatter; returns how
 * many elements of recv equal B (n when ordered), and sets *old to how many equal A. */
static size_t ordered_copy(hg_backend *be, hg_comm *c, size_t n, size_t *old) {
    enum { G = 4096, BUSY = 24 }; /* 24 fp32 GEMMs of 4096^3: tens of milliseconds */
    float *A = malloc(n * sizeof *A), *B = malloc(n * sizeof *B), *got = malloc(n * sizeof *got);
    float *g = malloc((size_t)G * G * sizeof *g);
    for (size_t i = 0; i < n; i++) A[i] = (float)(i % 1000) + 0.5f, B[i] = -(float)(i % 777) - 0.25f;
    for (size_t i = 0; i < (size_t)G * G; i++) g[i] = (float)((i * 2654435761u) % 1000) / 1000.0f - 0.5f;
    float *send = dev_from(be, A, n, 0), *recv = dev_poison(be, n, 0), *b = dev_from(be, B, n, 0);
    float *x = dev_from(be, g, (size_t)G * G, 0), *w = dev_from(be, g, (size_t)G * G, 0), *y = dev_poison(be, (size_t)G * G, 0);
    if (be->ops->sync(be) != HG_OK) fprintf(stderr, "sync: %s\n", hg_last_error()), exit(1);
    for (int i = 0; i < BUSY; i++) be->ops->matmul_forward(be, y, x, w, NULL, G, G, G);
    be->ops->to_compute(be, send, b, n); /* a kernel (fp32: a copy) queued behind the GEMMs */
    hg_comm_req r = {0};
    hg_status st = c->ops->reduce_scatter_start(c, send, recv, n, &n, &r);
    if (st == HG_OK) st = hg_comm_wait(c, &r, 60.0, "the reduce-scatter");
    if (st != HG_OK) fprintf(stderr, "reduce-scatter: %s\n", hg_last_error()), exit(1);
    dev_to_host(be, got, recv, n, 0); /* waits for the backend's stream too */
    size_t same = 0;
    *old = 0;
    for (size_t i = 0; i < n; i++) same += got[i] == B[i], *old += got[i] == A[i];
    dev_free_all(be);
    free(A), free(B), free(got), free(g);
    return same;
}

static void ordering(hg_backend *be, hg_comm *c) {
    const size_t n = (size_t)1 << 20;
    size_t old = 0, same = ordered_copy(be, c, n, &old);
    printf("  info before the hand-over (legacy default stream): %zu of %zu received the new values, %zu the old%s\n", same, n,
           old, old ? " (the race the hand-over removes)" : "");
    if (hg_comm_follow_backend(c, be) != HG_OK) fprintf(stderr, "follow: %s\n", hg_last_error()), exit(1);
    same = ordered_copy(be, c, n, &old);
    int ok = same == n;
    printf("  %-4s following the backend's stream: %zu of %zu received the new values, %zu the old\n", ok ? "ok" : "FAIL", same, n,
           old);
    failures += !ok;
}

static void dist_over_nccl(hg_comm *c) {
    hg_config cfg;
    hg_config_preset("tiny", &cfg);
    cfg.dropout = 0.0f;
    hg_options o = hg_options_default();
    o.batch = 2, o.seq_len = 32, o.training = 1, o.seed = 3;
    o.device = HG_DEVICE_CUDA, o.precision = HG_PRECISION_BF16, o.flags = HG_FLAG_DETERMINISTIC;
    hg_model *a = NULL, *b = NULL;
    hg_dist *d = NULL;
    hg_dist_options dopt = hg_dist_options_default();
    if (hg_model_create(&a, &cfg, &o) != HG_OK || hg_model_create(&b, &cfg, &o) != HG_OK ||
        hg_dist_create(&d, c, b, &dopt) != HG_OK) {
        printf("  FAIL hg_dist over NCCL: %s\n", hg_last_error());
        failures++;
        hg_model_free(a), hg_model_free(b);
        return;
    }
    hg_adamw adamw = hg_adamw_default();
    adamw.lr = 1e-3f;
    int same = 1, ok = 1;
    for (int s = 0; s < 3 && ok; s++) {
        int32_t x[64], y[64];
        for (int i = 0; i < 64; i++) x[i] = (i * 7 + s * 13 + 1) % cfg.vocab_size, y[i] = (i * 5 + s + 3) % cfg.vocab_size;
        float la = 0, lb = 0, na = 0, nb = 0;
        ok = hg_zero_grad(a) == HG_OK && hg_forward_backward(a, x, y, 2, 32, 1.0f, &la) == HG_OK &&
             hg_optimizer_step(a, &adamw, &na) == HG_OK && hg_zero_grad(b) == HG_OK &&
             hg_dist_forward_backward(d, x, y, 2, 32, 1.0f, 1, &lb) == HG_OK && hg_dist_optimizer_step(d, &adamw, &nb) == HG_OK;
        same &= la == lb && na == nb && isfinite(la);
    }
    if (!ok) printf("  FAIL a step: %s\n", hg_last_error());
    printf("  %-4s hg_dist over NCCL, one rank, CUDA bf16 deterministic: 3 steps %s the model alone\n", ok && same ? "ok" : "FAIL",
           same ? "bit-identical to" : "differ from");
    failures += !(ok && same);
    hg_dist_free(d);
    hg_model_free(a), hg_model_free(b);
}

int main(void) {
    hg_backend *be = cuda_backend_or_skip(HG_PRECISION_FP32);
    hg_comm *c = NULL;
    if (hg_comm_open(&c, HG_COMM_NCCL) != HG_OK) {
        printf("skipped: no NCCL communicator (%s)\n", hg_last_error());
        be->ops->destroy(be);
        return CUDA_SKIP;
    }
    printf("NCCL communicator: rank %d of %d\n", hg_comm_rank(c), hg_comm_size(c));
    if (hg_comm_size(c) != 1) {
        printf("FAIL: this test runs one rank (started with %d)\n", hg_comm_size(c));
        return 1;
    }
    ordering(be, c);
    be->ops->destroy(be);
    dist_over_nccl(c);
    hg_comm_close(c);
    printf("%s\n", failures ? "FAILED" : "ok");
    return failures ? 1 : 0;
}
