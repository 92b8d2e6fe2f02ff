/* Opening a communicator, and what every implementation shares: waiting on a request
 * with a timeout (the watchdog), and the barrier. */
#include "dist/comm.h"

#include <sched.h>
#include <stdlib.h>
#include <time.h>

#include "backend/backend.h"
#include "backend/cuda_module.h"
#include "core/error.h"
#include "core/timer.h"

static int env_int(const char *name) {
    const char *s = getenv(name);
    return s && *s ? atoi(s) : 0;
}

int hg_comm_launcher_size(void) {
    int n = env_int("OMPI_COMM_WORLD_SIZE"); /* Open MPI's mpirun */
    if (!n) n = env_int("PMI_SIZE");         /* MPICH's mpiexec, srun --mpi=pmi2 */
    if (!n && getenv("PMIX_RANK")) n = env_int("SLURM_NTASKS") > 0 ? env_int("SLURM_NTASKS") : 1; /* srun --mpi=pmix */
    if (!n && getenv("SLURM_STEP_ID")) n = env_int("SLURM_NTASKS");                             /* any srun step */
    return n;
}

hg_status hg_comm_open(hg_comm **out, hg_comm_kind kind) {
    if (!out) return hg_fail(HG_ERR_INVALID, "hg_comm_open: NULL argument");
    *out = NULL;
    if (kind == HG_COMM_AUTO) {
        int n = hg_comm_launcher_size();
#ifdef HANDGRAD_HAVE_MPI
        kind = n > 0 ? HG_COMM_MPI : HG_COMM_LOCAL;
#else
        if (n > 1)
            return hg_fail(HG_ERR_UNSUPPORTED, "started by a launcher with %d ranks, but this handgrad was built without MPI "
                           "(install libopenmpi-dev and rebuild)", n);
        kind = HG_COMM_LOCAL;
#endif
    }
    switch (kind) {
    case HG_COMM_LOCAL: return hg_comm_local_open(out);
    case HG_COMM_MPI:
#ifdef HANDGRAD_HAVE_MPI
        return hg_comm_mpi_open(out);
#else
        return hg_fail(HG_ERR_UNSUPPORTED, "this handgrad was built without MPI (install libopenmpi-dev and rebuild)");
#endif
    case HG_COMM_NCCL: { /* in the CUDA module (backend/cuda_module.h) */
        const hg_cuda_module *m;
        HG_TRY(hg_cuda_module_get(&m));
        if (!m->comm_nccl_open)
            return hg_fail(HG_ERR_UNSUPPORTED, "this handgrad was built without NCCL (a CUDA build with NCCL and MPI)");
        return m->comm_nccl_open(out);
    }
    default: return hg_fail(HG_ERR_INVALID, "hg_comm_open: unknown kind %d", (int)kind);
    }
}

void hg_comm_close(hg_comm *c) {
    if (c) c->ops->close(c);
}

int hg_comm_rank(const hg_comm *c) { return c ? c->rank : 0; }
int hg_comm_size(const hg_comm *c) { return c ? c->size : 1; }
const char *hg_comm_name(const hg_comm *c) { return c ? c->ops->name : ""; }

hg_status hg_comm_check(const hg_comm *c) {
    if (c->broken)
        return hg_fail(HG_ERR_STATE, "rank %d: an earlier collective failed; this communicator can no longer be used", c->rank);
    return HG_OK;
}

hg_status hg_comm_wait(hg_comm *c, hg_comm_req *req, double timeout_s, const char *what) {
    double t0 = hg_now(), now = t0;
    for (long polls = 0;; polls++) {
        int done;
        hg_status st = c->ops->test(c, req, &done);
        if (st != HG_OK) {
            c->broken = 1;
            return st;
        }
        if (done) return HG_OK;
        if ((polls & 255) == 255) {
            now = hg_now();
            if (now - t0 > timeout_s) {
                c->broken = 1;
                return hg_fail(HG_ERR_BACKEND, "rank %d of %d: %s did not complete within %.0f s: another rank has died, "
                               "hung or is running a different step; stopping", c->rank, c->size, what, now - t0);
            }
            /* after the first millisecond, let other processes on this core run */
            if (now - t0 > 1e-3) sched_yield();
        }
    }
}

hg_status hg_comm_barrier(hg_comm *c, double timeout_s) {
    if (!c) return hg_fail(HG_ERR_INVALID, "hg_comm_barrier: NULL communicator");
    HG_TRY(hg_comm_check(c));
    hg_comm_req r = {0};
    HG_TRY(c->ops->barrier_start(c, &r));
    return hg_comm_wait(c, &r, timeout_s, "a barrier");
}

hg_status hg_comm_follow_backend(hg_comm *c, hg_backend *be) {
    void *stream = be->ops->stream ? be->ops->stream(be) : NULL;
    if (!stream) return HG_OK;
    if (!c->ops->follow)
        return hg_fail(HG_ERR_UNSUPPORTED, "the %s communicator cannot order its collectives after the %s backend's stream: "
                       "use NCCL", c->ops->name, be->ops->name);
    return c->ops->follow(c, stream);
}
