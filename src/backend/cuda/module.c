/* The CUDA module's entry (backend/cuda_module.h): the one exported symbol, and the
 * library functions the module's code calls, forwarded to the library that loaded it
 * (every other symbol of the module is hidden). */
#include <stddef.h>

#include "backend/cuda_module.h"
#include "core/error.h"
#include "dist/comm.h"

static const hg_host *host;

hg_status hg_fail(hg_status status, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    hg_status s = host->vfail(status, fmt, ap);
    va_end(ap);
    return s;
}

#ifdef HANDGRAD_HAVE_NCCL
hg_status hg_comm_mpi_open(hg_comm **out) {
    if (!host->comm_mpi_open)
        return hg_fail(HG_ERR_UNSUPPORTED, "NCCL starts over MPI, and this handgrad was built without MPI");
    return host->comm_mpi_open(out);
}
void hg_comm_close(hg_comm *c) { host->comm_close(c); }
hg_status hg_comm_check(const hg_comm *c) { return host->comm_check(c); }
hg_status hg_comm_wait(hg_comm *c, hg_comm_req *req, double timeout_s, const char *what) {
    return host->comm_wait(c, req, timeout_s, what);
}
#define NCCL_OPEN hg_comm_nccl_open
#else
#define NCCL_OPEN NULL
#endif

__attribute__((visibility("default"))) const hg_cuda_module *hg_cuda_module_entry(const hg_host *h) {
    static const hg_cuda_module m = {HG_CUDA_MODULE_ABI, hg_backend_cuda_create, hg_backend_cuda_ops,
                                     hg_cuda_gemm_peak_gflops, NCCL_OPEN};
    if (!h || h->abi != HG_CUDA_MODULE_ABI) return NULL;
    host = h;
    return &m;
}
