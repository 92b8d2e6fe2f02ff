/* The communicator follows the backend's stream (hg_comm_follow_backend, dist/comm.c), so
 * that NCCL's collectives start after the kernels that write the gradients: checked on
 * the host with a backend and communicators of this test's own. A backend that queues
 * work hands its stream to a communicator that can follow it; one that does not queue
 * (the CPU) hands nothing; a communicator that cannot follow a stream is refused, naming
 * it. Then the one-rank data-parallel layer: it installs no gradient hook (CUDA graphs
 * stay possible) and trains exactly as the model alone does. */
#include <stdio.h>
#include <string.h>

#include "backend/backend.h"
#include "check.h"
#include "core/error.h"
#include "dist/comm.h"
#include "handgrad.h"

static int queue_token; /* the address stands for a device stream */
static void *followed;
static int follow_calls;

static void *fake_stream(hg_backend *be) {
    (void)be;
    return &queue_token;
}

static hg_status fake_follow(hg_comm *c, void *stream) {
    (void)c;
    followed = stream;
    follow_calls++;
    return HG_OK;
}

static void handover(void) {
    hg_backend_ops queued = {.name = "queued", .stream = fake_stream}, at_once = {.name = "at_once"};
    hg_backend bq = {.ops = &queued}, bn = {.ops = &at_once};
    hg_comm_ops nccl_like = {.name = "nccl_like", .follow = fake_follow}, host_only = {.name = "host_only"};
    hg_comm cf = {.ops = &nccl_like, .size = 2}, ch = {.ops = &host_only, .size = 2};

    CHECK(hg_comm_follow_backend(&cf, &bq) == HG_OK);
    CHECK(follow_calls == 1 && followed == &queue_token);
    followed = NULL, follow_calls = 0;
    CHECK(hg_comm_follow_backend(&cf, &bn) == HG_OK); /* nothing queued, nothing to follow */
    CHECK(follow_calls == 0 && followed == NULL);
    CHECK(hg_comm_follow_backend(&ch, &bn) == HG_OK);
    hg_clear_error();
    CHECK(hg_comm_follow_backend(&ch, &bq) == HG_ERR_UNSUPPORTED);
    CHECK(strstr(hg_last_error(), "host_only") && strstr(hg_last_error(), "queued"));
    printf("stream hand-over: %s\n", hg_last_error());
}

/* One rank: hg_dist installs no hook and steps as the bare model does, bit for bit. */
static void one_rank(void) {
    hg_config cfg;
    hg_config_preset("tiny", &cfg);
    cfg.dropout = 0.0f;
    hg_options o = hg_options_default();
    o.batch = 2, o.seq_len = 16, o.training = 1, o.threads = 1, o.seed = 5;
    hg_model *a = NULL, *b = NULL;
    hg_comm *comm = NULL;
    hg_dist *d = NULL;
    CHECK(hg_model_create(&a, &cfg, &o) == HG_OK && hg_model_create(&b, &cfg, &o) == HG_OK);
    CHECK(hg_comm_open(&comm, HG_COMM_LOCAL) == HG_OK);
    hg_dist_options dopt = hg_dist_options_default();
    CHECK(a && b && comm && hg_dist_create(&d, comm, b, &dopt) == HG_OK);
    if (!d) return;
    hg_adamw adamw = hg_adamw_default();
    adamw.lr = 1e-3f, adamw.grad_clip = 1.0f;
    int same = 1;
    for (int s = 0; s < 3; s++) {
        int32_t x[32], y[32];
        for (int i = 0; i < 32; i++) x[i] = (i * 7 + s * 13 + 1) % cfg.vocab_size, y[i] = (i * 5 + s + 3) % cfg.vocab_size;
        float la = 0, lb = 0, na = 0, nb = 0;
        CHECK(hg_zero_grad(a) == HG_OK && hg_zero_grad(b) == HG_OK);
        CHECK(hg_forward_backward(a, x, y, 2, 16, 1.0f, &la) == HG_OK);
        CHECK(hg_optimizer_step(a, &adamw, &na) == HG_OK);
        CHECK(hg_dist_forward_backward(d, x, y, 2, 16, 1.0f, 1, &lb) == HG_OK);
        CHECK(hg_dist_optimizer_step(d, &adamw, &nb) == HG_OK);
        same &= la == lb && na == nb;
    }
    CHECK(same);
    hg_dist_stats st = hg_dist_get_stats(d);
    CHECK(st.ranks == 1 && st.buckets == 0); /* no hook: no buckets */
    printf("one rank: %s the bare model over 3 steps, %d buckets\n", same ? "bit-identical to" : "DIFFERS from", st.buckets);
    hg_dist_free(d);
    hg_comm_close(comm);
    hg_model_free(a), hg_model_free(b);
}

int main(void) {
    handover();
    one_rank();
    CHECK_DONE();
}
