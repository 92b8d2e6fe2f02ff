/* The communicator interface: what data parallelism needs from MPI or NCCL.
 *
 * Like the backend, a struct of function pointers with one implementation per library
 * (comm_local.c, comm_mpi.c, comm_nccl.c). Every collective is non-blocking: *_start
 * fills a request, test polls it (and drives the library's progress), and
 * hg_comm_wait polls until it completes or the communicator's timeout passes. Buffers
 * are in the memory of the model's backend (host for the CPU, device for CUDA); the
 * small ones (u64, f64) are host memory. Counts are elements. */
#ifndef HG_DIST_COMM_H
#define HG_DIST_COMM_H

#include <stddef.h>
#include <stdint.h>

#include "handgrad.h"

/* Storage for one in-flight request, opaque to callers (an MPI_Request, a CUDA event). */
typedef struct hg_comm_req {
    uint64_t opaque[2];
    int active;
} hg_comm_req;

typedef struct hg_comm_ops hg_comm_ops;

struct hg_comm {
    const hg_comm_ops *ops;
    int rank, size;
    int broken;  /* a collective failed or timed out: refuse further ones */
    void *impl;
};

struct hg_comm_ops {
    const char *name;
    void (*close)(hg_comm *c);
    /* buf[0..n) summed over ranks, in place. */
    hg_status (*allreduce_start)(hg_comm *c, float *buf, size_t n, hg_comm_req *req);
    /* send[0..n) summed over ranks; rank r receives the counts[r] elements starting at
     * sum(counts[0..r)) into recv. counts sum to n; a count may be 0. */
    hg_status (*reduce_scatter_start)(hg_comm *c, const float *send, float *recv, size_t n, const size_t *counts,
                                      hg_comm_req *req);
    /* In place: rank r's counts[r] elements at buf + displs[r] go to every rank. */
    hg_status (*allgather_start)(hg_comm *c, float *buf, const size_t *counts, const size_t *displs, hg_comm_req *req);
    /* Rank r's counts[r] elements from `send` to root's buf + displs[r]; buf and the
     * arrays are read on root only. */
    hg_status (*gather_start)(hg_comm *c, const float *send, float *buf, const size_t *counts, const size_t *displs,
                              int root, hg_comm_req *req);
    hg_status (*broadcast_start)(hg_comm *c, float *buf, size_t n, int root, hg_comm_req *req);
    /* Host memory: x[0..n) summed over ranks in place; all[size*n] receives every rank's mine[0..n). */
    hg_status (*sum_f64_start)(hg_comm *c, double *x, size_t n, hg_comm_req *req);
    hg_status (*allgather_u64_start)(hg_comm *c, const uint64_t *mine, size_t n, uint64_t *all, hg_comm_req *req);
    hg_status (*barrier_start)(hg_comm *c, hg_comm_req *req);
    /* *done = 1 once the request has completed (it is then released). */
    hg_status (*test)(hg_comm *c, hg_comm_req *req, int *done);
    /* From now on, each collective starts after the work queued so far on `stream` (a
     * device stream: the model's backend's; NULL: the default stream again, as before the
     * first call). NULL op: buffers are host memory, and a communicator without it cannot
     * serve a backend that queues work. */
    hg_status (*follow)(hg_comm *c, void *stream);
};

/* Polls req until it completes. After timeout_s seconds, marks the communicator broken
 * and fails naming `what` and the time waited. */
hg_status hg_comm_wait(hg_comm *c, hg_comm_req *req, double timeout_s, const char *what);
/* Refuses when the communicator is broken. */
hg_status hg_comm_check(const hg_comm *c);
/* Hands the backend's stream (hg_backend_ops.stream) to the communicator, so that its
 * collectives read gradients only after the kernels that write them. Nothing to do for a
 * backend whose ops finish when they return; HG_ERR_UNSUPPORTED, naming the
 * communicator, when one has a stream and the communicator cannot follow it. */
struct hg_backend;
hg_status hg_comm_follow_backend(hg_comm *c, struct hg_backend *be);

hg_status hg_comm_local_open(hg_comm **out);
/* Under a launcher (mpirun, srun), the world size its environment announces; else 0. */
int hg_comm_launcher_size(void);
/* In builds with MPI (HANDGRAD_HAVE_MPI). */
hg_status hg_comm_mpi_open(hg_comm **out);
/* In the CUDA module, when it was built with NCCL (comm_nccl.c); hg_comm_open reaches it
 * through backend/cuda_module.h. */
hg_status hg_comm_nccl_open(hg_comm **out);

#endif
