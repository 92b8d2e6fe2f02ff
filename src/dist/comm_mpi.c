/* The MPI communicator: non-blocking collectives on a duplicate of MPI_COMM_WORLD whose
 * errors are returned (MPI_ERRORS_RETURN), not fatal, so that every failure reaches the
 * caller as a status with MPI's message. Requests live in slots that keep the int count
 * arrays MPI reads until the operation completes; slots are allocated when first needed
 * (the first step) and reused after. */
#include <limits.h>
#include <mpi.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "dist/comm.h"

typedef struct mpi_slot {
    MPI_Request req;
    int *counts, *displs; /* (size) each */
    int in_use;
} mpi_slot;

typedef struct mpi_impl {
    MPI_Comm comm;
    int owns_mpi; /* hg_comm_mpi_open called MPI_Init */
    mpi_slot **slots;
    int nslots;
} mpi_impl;

static hg_status mpi_check(hg_comm *c, int err, const char *call) {
    if (err == MPI_SUCCESS) return HG_OK;
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(err, msg, &len);
    c->broken = 1;
    return hg_fail(HG_ERR_BACKEND, "rank %d of %d: %s failed: %.*s", c->rank, c->size, call, len, msg);
}

static hg_status to_int(hg_comm *c, size_t n, int *out) {
    if (n > INT_MAX) return hg_fail(HG_ERR_UNSUPPORTED, "rank %d: %zu elements is more than one MPI call can move (INT_MAX)", c->rank, n);
    *out = (int)n;
    return HG_OK;
}

/* A free slot, its index in req. */
static hg_status slot_get(hg_comm *c, hg_comm_req *req, mpi_slot **out) {
    HG_TRY(hg_comm_check(c));
    mpi_impl *im = c->impl;
    int i = 0;
    while (i < im->nslots && im->slots[i]->in_use) i++;
    if (i == im->nslots) {
        mpi_slot **grown = realloc(im->slots, sizeof *grown * (size_t)(im->nslots + 1));
        if (!grown) return hg_fail(HG_ERR_NOMEM, "out of memory for an MPI request");
        im->slots = grown;
        mpi_slot *s = calloc(1, sizeof *s);
        int *arrays = calloc(2 * (size_t)c->size, sizeof(int));
        if (!s || !arrays) {
            free(s), free(arrays);
            return hg_fail(HG_ERR_NOMEM, "out of memory for an MPI request");
        }
        s->counts = arrays, s->displs = arrays + c->size;
        im->slots[im->nslots++] = s;
    }
    mpi_slot *s = im->slots[i];
    s->req = MPI_REQUEST_NULL;
    req->opaque[0] = (uint64_t)i;
    *out = s;
    return HG_OK;
}

/* After the MPI call that filled the slot's request. */
static hg_status slot_started(hg_comm *c, mpi_slot *s, hg_comm_req *req, int err, const char *call) {
    HG_TRY(mpi_check(c, err, call));
    s->in_use = 1;
    req->active = 1;
    return HG_OK;
}

static hg_status fill_counts(hg_comm *c, mpi_slot *s, const size_t *counts, const size_t *displs) {
    for (int r = 0; r < c->size; r++) {
        HG_TRY(to_int(c, counts[r], &s->counts[r]));
        if (displs) HG_TRY(to_int(c, displs[r], &s->displs[r]));
    }
    return HG_OK;
}

static MPI_Comm comm_of(hg_comm *c) { return ((mpi_impl *)c->impl)->comm; }

static hg_status mpi_allreduce(hg_comm *c, float *buf, size_t n, hg_comm_req *req) {
    mpi_slot *s;
    int cnt = 0;
    HG_TRY(slot_get(c, req, &s));
    HG_TRY(to_int(c, n, &cnt));
    int err = MPI_Iallreduce(MPI_IN_PLACE, buf, cnt, MPI_FLOAT, MPI_SUM, comm_of(c), &s->req);
    return slot_started(c, s, req, err, "MPI_Iallreduce");
}

static hg_status mpi_reduce_scatter(hg_comm *c, const float *send, float *recv, size_t n, const size_t *counts,
                                    hg_comm_req *req) {
    (void)n;
    mpi_slot *s;
    HG_TRY(slot_get(c, req, &s));
    HG_TRY(fill_counts(c, s, counts, NULL));
    int err = MPI_Ireduce_scatter(send, recv, s->counts, MPI_FLOAT, MPI_SUM, comm_of(c), &s->req);
    return slot_started(c, s, req, err, "MPI_Ireduce_scatter");
}

static hg_status mpi_allgather(hg_comm *c, float *buf, const size_t *counts, const size_t *displs, hg_comm_req *req) {
    mpi_slot *s;
    HG_TRY(slot_get(c, req, &s));
    HG_TRY(fill_counts(c, s, counts, displs));
    int err = MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, s->counts, s->displs, MPI_FLOAT, comm_of(c), &s->req);
    return slot_started(c, s, req, err, "MPI_Iallgatherv");
}

static hg_status mpi_gather(hg_comm *c, const float *send, float *buf, const size_t *counts, const size_t *displs, int root,
                            hg_comm_req *req) {
    mpi_slot *s;
    HG_TRY(slot_get(c, req, &s));
    HG_TRY(fill_counts(c, s, counts, displs));
    int err = MPI_Igatherv(send, s->counts[c->rank], MPI_FLOAT, buf, s->counts, s->displs, MPI_FLOAT, root, comm_of(c), &s->req);
    return slot_started(c, s, req, err, "MPI_Igatherv");
}

static hg_status mpi_broadcast(hg_comm *c, float *buf, size_t n, int root, hg_comm_req *req) {
    mpi_slot *s;
    int cnt = 0;
    HG_TRY(slot_get(c, req, &s));
    HG_TRY(to_int(c, n, &cnt));
    int err = MPI_Ibcast(buf, cnt, MPI_FLOAT, root, comm_of(c), &s->req);
    return slot_started(c, s, req, err, "MPI_Ibcast");
}

static hg_status mpi_sum_f64(hg_comm *c, double *x, size_t n, hg_comm_req *req) {
    mpi_slot *s;
    int cnt = 0;
    HG_TRY(slot_get(c, req, &s));
    HG_TRY(to_int(c, n, &cnt));
    int err = MPI_Iallreduce(MPI_IN_PLACE, x, cnt, MPI_DOUBLE, MPI_SUM, comm_of(c), &s->req);
    return slot_started(c, s, req, err, "MPI_Iallreduce");
}

static hg_status mpi_allgather_u64(hg_comm *c, const uint64_t *mine, size_t n, uint64_t *all, hg_comm_req *req) {
    mpi_slot *s;
    int cnt = 0;
    HG_TRY(slot_get(c, req, &s));
    HG_TRY(to_int(c, n, &cnt));
    int err = MPI_Iallgather(mine, cnt, MPI_UINT64_T, all, cnt, MPI_UINT64_T, comm_of(c), &s->req);
    return slot_started(c, s, req, err, "MPI_Iallgather");
}

static hg_status mpi_barrier(hg_comm *c, hg_comm_req *req) {
    mpi_slot *s;
    HG_TRY(slot_get(c, req, &s));
    int err = MPI_Ibarrier(comm_of(c), &s->req);
    return slot_started(c, s, req, err, "MPI_Ibarrier");
}

static hg_status mpi_test(hg_comm *c, hg_comm_req *req, int *done) {
    mpi_impl *im = c->impl;
    *done = 1;
    if (!req->active) return HG_OK;
    mpi_slot *s = im->slots[req->opaque[0]];
    int flag = 0;
    HG_TRY(mpi_check(c, MPI_Test(&s->req, &flag, MPI_STATUS_IGNORE), "MPI_Test"));
    *done = flag;
    if (flag) s->in_use = 0, req->active = 0;
    return HG_OK;
}

static void mpi_close(hg_comm *c) {
    mpi_impl *im = c->impl;
    /* After a failure a peer may be gone: freeing the communicator or finalising could
     * wait for it forever. The launcher tears the job down when this process exits. */
    if (!c->broken) {
        MPI_Comm_free(&im->comm);
        if (im->owns_mpi) MPI_Finalize();
    }
    for (int i = 0; i < im->nslots; i++) free(im->slots[i]->counts), free(im->slots[i]);
    free(im->slots);
    free(im);
    free(c);
}

static const hg_comm_ops mpi_ops = {
    .name = "mpi",
    .close = mpi_close,
    .allreduce_start = mpi_allreduce,
    .reduce_scatter_start = mpi_reduce_scatter,
    .allgather_start = mpi_allgather,
    .gather_start = mpi_gather,
    .broadcast_start = mpi_broadcast,
    .sum_f64_start = mpi_sum_f64,
    .allgather_u64_start = mpi_allgather_u64,
    .barrier_start = mpi_barrier,
    .test = mpi_test,
};

hg_status hg_comm_mpi_open(hg_comm **out) {
    int inited = 0, provided;
    MPI_Initialized(&inited);
    if (!inited && MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS)
        return hg_fail(HG_ERR_BACKEND, "MPI_Init_thread failed");
    hg_comm *c = calloc(1, sizeof *c);
    mpi_impl *im = calloc(1, sizeof *im);
    if (!c || !im) {
        free(c), free(im);
        return hg_fail(HG_ERR_NOMEM, "out of memory for a communicator");
    }
    im->owns_mpi = !inited;
    c->ops = &mpi_ops;
    c->impl = im;
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    hg_status st = mpi_check(c, MPI_Comm_dup(MPI_COMM_WORLD, &im->comm), "MPI_Comm_dup");
    if (st == HG_OK) st = mpi_check(c, MPI_Comm_set_errhandler(im->comm, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
    if (st == HG_OK) st = mpi_check(c, MPI_Comm_rank(im->comm, &c->rank), "MPI_Comm_rank");
    if (st == HG_OK) st = mpi_check(c, MPI_Comm_size(im->comm, &c->size), "MPI_Comm_size");
    if (st != HG_OK) {
        free(im), free(c);
        return st;
    }
    *out = c;
    return HG_OK;
}
