/* The NCCL communicator: collectives between GPUs on a stream of their own, bootstrapped
 * over MPI (rank 0's ncclUniqueId is broadcast with MPI). UNVERIFIED: written without a
 * GPU or NCCL on the development machine; compiled into the CUDA module
 * (backend/cuda_module.h) when CMake finds NCCL.
 *
 * - Float buffers are device memory. Each collective first waits (cudaStreamWaitEvent)
 *   for the work queued so far on the stream it follows: the CUDA backend's, handed over
 *   by hg_dist_create (hg_comm_follow_backend), else the legacy default stream. Then it
 *   runs on the communicator's stream; its request is an event recorded after it, polled
 *   with cudaEventQuery, so hg_comm_wait's timeout applies as for MPI, and the backend's
 *   later work (the optimizer step) is queued only after the wait.
 * - A variable-count reduce-scatter is one ncclReduce per rank whose piece is not empty,
 *   and the in-place variable all-gather one ncclBroadcast per rank, each set in one
 *   group. The gather of optimizer state to a host buffer is not supported yet.
 * - Host-memory collectives (sums of doubles, the handshake, barriers) go over MPI.
 * - After a failure or timeout the communicator is aborted (ncclCommAbort), not
 *   destroyed, so closing does not wait for a lost rank. */
#include <cuda_runtime.h>
#include <nccl.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "dist/comm.h"

enum { EVENTS = 64 }; /* requests in flight at once (buckets per step + a few) */

typedef struct nccl_impl {
    hg_comm *mpi;            /* bootstrap and host collectives */
    ncclComm_t comm;
    cudaStream_t stream;     /* the communicator's own */
    cudaStream_t compute;    /* whose queued work a collective waits for (0: legacy default) */
    cudaEvent_t ready;       /* recorded on compute before each collective */
    cudaEvent_t events[EVENTS];
    int in_use[EVENTS];
} nccl_impl;

#define DELEGATED 1 /* req->opaque[1]: an MPI request of impl->mpi */

static hg_status cuda_check(hg_comm *c, cudaError_t e, const char *call) {
    if (e == cudaSuccess) return HG_OK;
    c->broken = 1;
    return hg_fail(HG_ERR_BACKEND, "rank %d of %d: %s failed: %s", c->rank, c->size, call, cudaGetErrorString(e));
}

static hg_status nccl_check(hg_comm *c, ncclResult_t r, const char *call) {
    if (r == ncclSuccess) return HG_OK;
    c->broken = 1;
    return hg_fail(HG_ERR_BACKEND, "rank %d of %d: %s failed: %s", c->rank, c->size, call, ncclGetErrorString(r));
}

/* Orders the collective after the compute stream's queued work. */
static hg_status begin(hg_comm *c) {
    HG_TRY(hg_comm_check(c));
    nccl_impl *im = c->impl;
    HG_TRY(cuda_check(c, cudaEventRecord(im->ready, im->compute), "cudaEventRecord"));
    return cuda_check(c, cudaStreamWaitEvent(im->stream, im->ready, 0), "cudaStreamWaitEvent");
}

/* Records the request's event after the collective just queued. */
static hg_status finish(hg_comm *c, hg_comm_req *req) {
    nccl_impl *im = c->impl;
    int i = 0;
    while (i < EVENTS && im->in_use[i]) i++;
    if (i == EVENTS) return hg_fail(HG_ERR_UNSUPPORTED, "rank %d: more than %d NCCL collectives in flight", c->rank, EVENTS);
    HG_TRY(cuda_check(c, cudaEventRecord(im->events[i], im->stream), "cudaEventRecord"));
    im->in_use[i] = 1;
    req->opaque[0] = (uint64_t)i;
    req->opaque[1] = 0;
    req->active = 1;
    return HG_OK;
}

static hg_status nccl_allreduce(hg_comm *c, float *buf, size_t n, hg_comm_req *req) {
    nccl_impl *im = c->impl;
    HG_TRY(begin(c));
    HG_TRY(nccl_check(c, ncclAllReduce(buf, buf, n, ncclFloat, ncclSum, im->comm, im->stream), "ncclAllReduce"));
    return finish(c, req);
}

static hg_status nccl_reduce_scatter(hg_comm *c, const float *send, float *recv, size_t n, const size_t *counts,
                                     hg_comm_req *req) {
    (void)n;
    nccl_impl *im = c->impl;
    HG_TRY(begin(c));
    HG_TRY(nccl_check(c, ncclGroupStart(), "ncclGroupStart"));
    size_t at = 0;
    for (int r = 0; r < c->size; at += counts[r], r++)
        if (counts[r])
            HG_TRY(nccl_check(c, ncclReduce(send + at, recv, counts[r], ncclFloat, ncclSum, r, im->comm, im->stream),
                              "ncclReduce"));
    HG_TRY(nccl_check(c, ncclGroupEnd(), "ncclGroupEnd"));
    return finish(c, req);
}

static hg_status nccl_allgather(hg_comm *c, float *buf, const size_t *counts, const size_t *displs, hg_comm_req *req) {
    nccl_impl *im = c->impl;
    HG_TRY(begin(c));
    HG_TRY(nccl_check(c, ncclGroupStart(), "ncclGroupStart"));
    for (int r = 0; r < c->size; r++)
        if (counts[r])
            HG_TRY(nccl_check(c, ncclBroadcast(buf + displs[r], buf + displs[r], counts[r], ncclFloat, r, im->comm, im->stream),
                              "ncclBroadcast"));
    HG_TRY(nccl_check(c, ncclGroupEnd(), "ncclGroupEnd"));
    return finish(c, req);
}

static hg_status nccl_gather(hg_comm *c, const float *send, float *buf, const size_t *counts, const size_t *displs, int root,
                             hg_comm_req *req) {
    (void)send, (void)buf, (void)counts, (void)displs, (void)root, (void)req;
    return hg_fail(HG_ERR_UNSUPPORTED, "rank %d: gathering ZeRO-1 optimizer state to the host is not implemented for NCCL yet", c->rank);
}

static hg_status nccl_broadcast(hg_comm *c, float *buf, size_t n, int root, hg_comm_req *req) {
    nccl_impl *im = c->impl;
    HG_TRY(begin(c));
    HG_TRY(nccl_check(c, ncclBroadcast(buf, buf, n, ncclFloat, root, im->comm, im->stream), "ncclBroadcast"));
    return finish(c, req);
}

/* Host-memory collectives: MPI's, with the request marked as MPI's. */
static hg_status delegated(hg_comm *c, hg_status s, hg_comm_req *req) {
    if (s != HG_OK) c->broken = 1;
    else req->opaque[1] = DELEGATED;
    return s;
}

static hg_status nccl_sum_f64(hg_comm *c, double *x, size_t n, hg_comm_req *req) {
    hg_comm *mpi = ((nccl_impl *)c->impl)->mpi;
    return delegated(c, mpi->ops->sum_f64_start(mpi, x, n, req), req);
}

static hg_status nccl_allgather_u64(hg_comm *c, const uint64_t *mine, size_t n, uint64_t *all, hg_comm_req *req) {
    hg_comm *mpi = ((nccl_impl *)c->impl)->mpi;
    return delegated(c, mpi->ops->allgather_u64_start(mpi, mine, n, all, req), req);
}

static hg_status nccl_barrier(hg_comm *c, hg_comm_req *req) {
    hg_comm *mpi = ((nccl_impl *)c->impl)->mpi;
    return delegated(c, mpi->ops->barrier_start(mpi, req), req);
}

static hg_status nccl_test(hg_comm *c, hg_comm_req *req, int *done) {
    nccl_impl *im = c->impl;
    *done = 1;
    if (!req->active) return HG_OK;
    if (req->opaque[1] == DELEGATED) {
        hg_status s = im->mpi->ops->test(im->mpi, req, done);
        if (s != HG_OK) c->broken = 1;
        return s;
    }
    int i = (int)req->opaque[0];
    cudaError_t e = cudaEventQuery(im->events[i]);
    if (e == cudaErrorNotReady) {
        /* a peer's failure shows here, not as a stalled event */
        ncclResult_t async;
        HG_TRY(nccl_check(c, ncclCommGetAsyncError(im->comm, &async), "ncclCommGetAsyncError"));
        HG_TRY(nccl_check(c, async, "an NCCL collective"));
        *done = 0;
        return HG_OK;
    }
    HG_TRY(cuda_check(c, e, "cudaEventQuery"));
    im->in_use[i] = 0;
    req->active = 0;
    return HG_OK;
}

static hg_status nccl_follow(hg_comm *c, void *stream) {
    ((nccl_impl *)c->impl)->compute = (cudaStream_t)stream;
    return HG_OK;
}

static void nccl_close(hg_comm *c) {
    nccl_impl *im = c->impl;
    if (im->comm) {
        if (c->broken) ncclCommAbort(im->comm);
        else ncclCommDestroy(im->comm);
    }
    for (int i = 0; i < EVENTS; i++)
        if (im->events[i]) cudaEventDestroy(im->events[i]);
    if (im->ready) cudaEventDestroy(im->ready);
    if (im->stream) cudaStreamDestroy(im->stream);
    im->mpi->broken |= c->broken;
    hg_comm_close(im->mpi);
    free(im);
    free(c);
}

static const hg_comm_ops nccl_ops = {
    .name = "nccl",
    .close = nccl_close,
    .allreduce_start = nccl_allreduce,
    .reduce_scatter_start = nccl_reduce_scatter,
    .allgather_start = nccl_allgather,
    .gather_start = nccl_gather,
    .broadcast_start = nccl_broadcast,
    .sum_f64_start = nccl_sum_f64,
    .allgather_u64_start = nccl_allgather_u64,
    .barrier_start = nccl_barrier,
    .test = nccl_test,
    .follow = nccl_follow,
};

/* The rank among those on this node: the launcher's, else the rank modulo the GPUs. */
static int local_rank(int rank, int devices) {
    const char *names[] = {"OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID", "MPI_LOCALRANKID"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        const char *v = getenv(names[i]);
        if (v && *v) return atoi(v);
    }
    return devices > 0 ? rank % devices : 0;
}

hg_status hg_comm_nccl_open(hg_comm **out) {
    hg_comm *mpi;
    HG_TRY(hg_comm_mpi_open(&mpi));
    hg_comm *c = calloc(1, sizeof *c);
    nccl_impl *im = calloc(1, sizeof *im);
    if (!c || !im) {
        free(c), free(im);
        hg_comm_close(mpi);
        return hg_fail(HG_ERR_NOMEM, "out of memory for a communicator");
    }
    c->ops = &nccl_ops, c->impl = im, c->rank = mpi->rank, c->size = mpi->size;
    im->mpi = mpi;
    int devices = 0;
    hg_status s = cuda_check(c, cudaGetDeviceCount(&devices), "cudaGetDeviceCount");
    if (s == HG_OK) s = cuda_check(c, cudaSetDevice(local_rank(c->rank, devices) % (devices > 0 ? devices : 1)), "cudaSetDevice");
    if (s == HG_OK) s = cuda_check(c, cudaStreamCreateWithFlags(&im->stream, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
    if (s == HG_OK) s = cuda_check(c, cudaEventCreateWithFlags(&im->ready, cudaEventDisableTiming), "cudaEventCreateWithFlags");
    for (int i = 0; s == HG_OK && i < EVENTS; i++)
        s = cuda_check(c, cudaEventCreateWithFlags(&im->events[i], cudaEventDisableTiming), "cudaEventCreateWithFlags");
    /* rank 0's id to every rank, over MPI (32 floats carry its 128 bytes) */
    ncclUniqueId id;
    memset(&id, 0, sizeof id);
    if (s == HG_OK && c->rank == 0) s = nccl_check(c, ncclGetUniqueId(&id), "ncclGetUniqueId");
    hg_comm_req r = {0};
    if (s == HG_OK) s = mpi->ops->broadcast_start(mpi, (float *)(void *)&id, sizeof id / sizeof(float), 0, &r);
    if (s == HG_OK) s = hg_comm_wait(mpi, &r, 300.0, "the broadcast of the NCCL id");
    if (s == HG_OK) s = nccl_check(c, ncclCommInitRank(&im->comm, c->size, id, c->rank), "ncclCommInitRank");
    if (s != HG_OK) {
        c->broken = 1;
        nccl_close(c);
        return s;
    }
    *out = c;
    return HG_OK;
}
