/* The CUDA backend as a module: libhandgrad_cuda.so, built beside the command when CMake
 * finds a CUDA compiler, and loaded only when a program asks for HG_DEVICE_CUDA (or an
 * NCCL communicator). A CPU run of any build maps neither the module nor the CUDA
 * libraries it links (cudart, cuBLASLt, NCCL).
 *
 * The module exports one symbol, hg_cuda_module_entry. The library hands it the few
 * library functions the module's code calls (hg_host), and gets back the module's entry
 * points. Both sides check HG_CUDA_MODULE_ABI, so a module from another build is refused
 * by name rather than misread. */
#ifndef HG_BACKEND_CUDA_MODULE_H
#define HG_BACKEND_CUDA_MODULE_H

#include <stdarg.h>

#include "backend/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

#define HG_CUDA_MODULE_ABI 1
#define HG_CUDA_MODULE_FILE "libhandgrad_cuda.so"
#define HG_CUDA_MODULE_ENTRY "hg_cuda_module_entry"

struct hg_comm;
struct hg_comm_req;

/* The library, as the module sees it. */
typedef struct hg_host {
    int abi;
    hg_status (*vfail)(hg_status status, const char *fmt, va_list ap);
    /* MPI, for the NCCL communicator's bootstrap: NULL in a library built without MPI */
    hg_status (*comm_mpi_open)(struct hg_comm **out);
    void (*comm_close)(struct hg_comm *c);
    hg_status (*comm_check)(const struct hg_comm *c);
    hg_status (*comm_wait)(struct hg_comm *c, struct hg_comm_req *req, double timeout_s, const char *what);
} hg_host;

/* The module, as the library sees it. */
typedef struct hg_cuda_module {
    int abi;
    hg_status (*backend_create)(hg_backend **out, int threads, hg_precision precision, unsigned flags);
    const hg_backend_ops *(*backend_ops)(void);
    hg_status (*gemm_peak_gflops)(hg_precision precision, double *gflops);
    hg_status (*comm_nccl_open)(struct hg_comm **out); /* NULL: built without NCCL */
} hg_cuda_module;

typedef const hg_cuda_module *hg_cuda_module_entry_fn(const hg_host *host);

/* The module, loaded at the first call and kept. Looked for, in order: the path in
 * $HANDGRAD_CUDA_MODULE (only there, when set); beside the program or library that holds
 * libhandgrad; the build tree that made it; the loader's search path. Fails with
 * HG_ERR_UNSUPPORTED naming each path tried and the loader's reason (a missing
 * libcudart, say), or that this build has no CUDA backend. */
hg_status hg_cuda_module_get(const hg_cuda_module **out);

/* The module's side (cuda/module.c): these are in the module what hg_backend_cuda_*
 * were in the library. */
hg_status hg_backend_cuda_create(hg_backend **out, int threads, hg_precision precision, unsigned flags);
const hg_backend_ops *hg_backend_cuda_ops(void);
hg_status hg_cuda_gemm_peak_gflops(hg_precision precision, double *gflops);

#ifdef __cplusplus
}
#endif

#endif
