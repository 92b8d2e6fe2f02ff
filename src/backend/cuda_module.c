/* Loading the CUDA backend module (cuda_module.h). */
#define _GNU_SOURCE /* dladdr */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda_module.h"
#include "core/error.h"
#include "dist/comm.h"

#ifdef HG_HAVE_CUDA
static const hg_host host = {
    .abi = HG_CUDA_MODULE_ABI,
    .vfail = hg_vfail,
#ifdef HANDGRAD_HAVE_MPI
    .comm_mpi_open = hg_comm_mpi_open,
#endif
    .comm_close = hg_comm_close,
    .comm_check = hg_comm_check,
    .comm_wait = hg_comm_wait,
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static const hg_cuda_module *module;
static char tried[2048]; /* why the last attempt failed, for every later caller too */

/* Opens `path` and takes its entry; appends "path: reason" to `tried` on failure. */
static const hg_cuda_module *open_at(const char *path) {
    size_t used = strlen(tried);
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *why = dlerror();
        snprintf(tried + used, sizeof tried - used, "%s%s", used ? "; " : "", why ? why : path);
        return NULL;
    }
    hg_cuda_module_entry_fn *entry = (hg_cuda_module_entry_fn *)dlsym(h, HG_CUDA_MODULE_ENTRY);
    const hg_cuda_module *m = entry ? entry(&host) : NULL;
    if (!m || m->abi != HG_CUDA_MODULE_ABI) {
        snprintf(tried + used, sizeof tried - used, "%s%s: %s", used ? "; " : "", path,
                 entry ? "a module of another handgrad build (interface version differs)" : "not a handgrad CUDA module");
        dlclose(h);
        return NULL;
    }
    return m; /* kept open for the life of the process */
}

/* Tries the module in folder `dir` (dir_len bytes of it) joined with `sub` ("" or a
 * relative path ending in '/'). */
static const hg_cuda_module *open_in(const char *dir, int dir_len, const char *sub) {
    char path[4096];
    int n = snprintf(path, sizeof path, "%.*s/%s%s", dir_len, dir, sub, HG_CUDA_MODULE_FILE);
    return n > 0 && (size_t)n < sizeof path ? open_at(path) : NULL;
}

/* Where the module is looked for: $HANDGRAD_CUDA_MODULE alone when set; else beside the
 * file holding this code (libhandgrad.so, or a command linking the static library), then
 * in the lib folder of an installed command's prefix (bin/../lib), then where this build
 * tree put it, then the dynamic linker's search path. */
static const hg_cuda_module *load(void) {
    tried[0] = '\0';
    const char *env = getenv("HANDGRAD_CUDA_MODULE");
    if (env && *env) return open_at(env);
    const hg_cuda_module *m = NULL;
    Dl_info info;
    if (dladdr((void *)hg_cuda_module_get, &info) && info.dli_fname) {
        const char *slash = strrchr(info.dli_fname, '/');
        if (slash) {
            int len = (int)(slash - info.dli_fname);
            m = open_in(info.dli_fname, len, "");
            if (!m) m = open_in(info.dli_fname, len, HG_CUDA_MODULE_BIN_TO_LIB "/");
        }
    }
#ifdef HG_CUDA_MODULE_BUILD_PATH
    if (!m) m = open_at(HG_CUDA_MODULE_BUILD_PATH);
#endif
    return m ? m : open_at(HG_CUDA_MODULE_FILE);
}

hg_status hg_cuda_module_get(const hg_cuda_module **out) {
    pthread_mutex_lock(&lock);
    if (!module) module = load();
    const hg_cuda_module *m = module;
    pthread_mutex_unlock(&lock);
    if (!m)
        return hg_fail(HG_ERR_UNSUPPORTED, "device: the CUDA backend module %s could not be loaded (%s)",
                       HG_CUDA_MODULE_FILE, tried);
    *out = m;
    return HG_OK;
}
#else
hg_status hg_cuda_module_get(const hg_cuda_module **out) {
    (void)out;
    return hg_fail(HG_ERR_UNSUPPORTED, "device: this build has no CUDA backend (configure with -DHANDGRAD_CUDA=ON "
                   "on a machine with the CUDA toolkit)");
}
#endif
