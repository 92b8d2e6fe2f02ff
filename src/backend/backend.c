/* Picking a backend from hg_options: the only place that knows which backends exist. */
#include "backend/backend.h"
#include "core/error.h"

const hg_backend_ops *hg_backend_ops_for(hg_device device) {
    switch (device) {
    case HG_DEVICE_CPU: return hg_backend_cpu_ops();
#ifdef HG_HAVE_CUDA
    case HG_DEVICE_CUDA: return hg_backend_cuda_ops();
#else
    case HG_DEVICE_CUDA: return NULL;
#endif
    }
    return NULL;
}

hg_status hg_backend_create(hg_backend **out, const hg_options *opt, int threads) {
    HG_TRY(hg_cpu_check());
    if (opt->device == HG_DEVICE_CPU) {
        if (opt->precision != HG_PRECISION_FP32)
            return hg_fail(HG_ERR_UNSUPPORTED, "precision: the CPU backend runs fp32 only");
        return hg_backend_cpu_create(out, threads);
    }
#ifdef HG_HAVE_CUDA
    return hg_backend_cuda_create(out, threads, opt->precision, opt->flags);
#else
    return hg_fail(HG_ERR_UNSUPPORTED, "device: this build has no CUDA backend (configure with -DHANDGRAD_CUDA=ON "
                   "on a machine with the CUDA toolkit)");
#endif
}

hg_status hg_gemm_peak_gflops(const hg_options *opt, double *gflops) {
    if (!opt || !gflops) return hg_fail(HG_ERR_INVALID, "hg_gemm_peak_gflops: NULL argument");
    if (opt->device == HG_DEVICE_CPU) return hg_sgemm_peak_gflops(opt->threads, gflops);
#ifdef HG_HAVE_CUDA
    return hg_cuda_gemm_peak_gflops(opt->precision, gflops);
#else
    return hg_fail(HG_ERR_UNSUPPORTED, "device: this build has no CUDA backend");
#endif
}
