/* Picking a backend from hg_options: the only place that knows which backends exist. The
 * CUDA backend is a module, loaded at the first request for it (cuda_module.h). */
#include "backend/backend.h"
#include "backend/cpu/cpu.h"
#include "backend/cuda_module.h"
#include "core/error.h"

hg_status hg_backend_ops_for(hg_device device, const hg_backend_ops **out) {
    const hg_cuda_module *m;
    switch (device) {
    case HG_DEVICE_CPU: *out = hg_backend_cpu_ops(); return HG_OK;
    case HG_DEVICE_CUDA: HG_TRY(hg_cuda_module_get(&m)); *out = m->backend_ops(); return HG_OK;
    }
    return hg_fail(HG_ERR_INVALID, "device: unknown device %d", (int)device);
}

hg_status hg_backend_create(hg_backend **out, const hg_options *opt, int threads) {
    HG_TRY(hg_cpu_check());
    if (opt->device == HG_DEVICE_CPU) return hg_backend_cpu_create(out, threads, opt->precision);
    const hg_cuda_module *m;
    HG_TRY(hg_cuda_module_get(&m));
    return m->backend_create(out, threads, opt->precision, opt->flags);
}

hg_status hg_gemm_peak_gflops(const hg_options *opt, double *gflops) {
    if (!opt || !gflops) return hg_fail(HG_ERR_INVALID, "hg_gemm_peak_gflops: NULL argument");
    if (opt->device == HG_DEVICE_CPU)
        return opt->precision == HG_PRECISION_BF16 ? cpu_bf16_gemm_peak(opt->threads, gflops)
                                                   : hg_sgemm_peak_gflops(opt->threads, gflops);
    const hg_cuda_module *m;
    HG_TRY(hg_cuda_module_get(&m));
    return m->gemm_peak_gflops(opt->precision, gflops);
}
