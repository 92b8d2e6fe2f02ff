/* The single-rank communicator: every collective is a copy or nothing, and completes
 * at once. It makes the data-parallel code path run in one process without MPI. */
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "dist/comm.h"

static void local_close(hg_comm *c) { free(c); }

static hg_status done_now(hg_comm_req *req) {
    req->active = 1;
    return HG_OK;
}

static hg_status local_allreduce(hg_comm *c, float *buf, size_t n, hg_comm_req *req) {
    (void)c, (void)buf, (void)n;
    return done_now(req);
}

static hg_status local_reduce_scatter(hg_comm *c, const float *send, float *recv, size_t n, const size_t *counts,
                                      hg_comm_req *req) {
    (void)c, (void)n;
    if (counts[0]) memmove(recv, send, counts[0] * sizeof(float));
    return done_now(req);
}

static hg_status local_allgather(hg_comm *c, float *buf, const size_t *counts, const size_t *displs, hg_comm_req *req) {
    (void)c, (void)buf, (void)counts, (void)displs;
    return done_now(req);
}

static hg_status local_gather(hg_comm *c, const float *send, float *buf, const size_t *counts, const size_t *displs,
                              int root, hg_comm_req *req) {
    (void)c, (void)root;
    if (counts[0] && buf + displs[0] != send) memmove(buf + displs[0], send, counts[0] * sizeof(float));
    return done_now(req);
}

static hg_status local_broadcast(hg_comm *c, float *buf, size_t n, int root, hg_comm_req *req) {
    (void)c, (void)buf, (void)n, (void)root;
    return done_now(req);
}

static hg_status local_sum_f64(hg_comm *c, double *x, size_t n, hg_comm_req *req) {
    (void)c, (void)x, (void)n;
    return done_now(req);
}

static hg_status local_allgather_u64(hg_comm *c, const uint64_t *mine, size_t n, uint64_t *all, hg_comm_req *req) {
    (void)c;
    memcpy(all, mine, n * sizeof *mine);
    return done_now(req);
}

static hg_status local_barrier(hg_comm *c, hg_comm_req *req) {
    (void)c;
    return done_now(req);
}

static hg_status local_test(hg_comm *c, hg_comm_req *req, int *done) {
    (void)c;
    req->active = 0;
    *done = 1;
    return HG_OK;
}

static const hg_comm_ops local_ops = {
    .name = "local",
    .close = local_close,
    .allreduce_start = local_allreduce,
    .reduce_scatter_start = local_reduce_scatter,
    .allgather_start = local_allgather,
    .gather_start = local_gather,
    .broadcast_start = local_broadcast,
    .sum_f64_start = local_sum_f64,
    .allgather_u64_start = local_allgather_u64,
    .barrier_start = local_barrier,
    .test = local_test,
};

hg_status hg_comm_local_open(hg_comm **out) {
    hg_comm *c = calloc(1, sizeof *c);
    if (!c) return hg_fail(HG_ERR_NOMEM, "out of memory for a communicator");
    c->ops = &local_ops;
    c->size = 1;
    *out = c;
    return HG_OK;
}
