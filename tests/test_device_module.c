/* The CUDA backend is a module (backend/cuda_module.h): a CPU run maps none of it or of
 * the CUDA libraries, in any build; asking for the CUDA device loads it, or fails with
 * HG_ERR_UNSUPPORTED naming what is missing (the module path, or the build's lack of a
 * CUDA backend), and the CPU model still trains after that. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "handgrad.h"

/* Whether this process has a file whose name contains `part` mapped. */
static int mapped(const char *part) {
    FILE *f = fopen("/proc/self/maps", "r");
    if (!f) return -1;
    char line[4096];
    int found = 0;
    while (!found && fgets(line, sizeof line, f)) found = strstr(line, part) != NULL;
    fclose(f);
    return found;
}

static const char *const cuda_libs[] = {"libhandgrad_cuda", "libcudart", "libcublas", "libnccl", "libcuda.so"};

static void cpu_step(hg_model *m) {
    enum { B = 2, T = 16 };
    int32_t tok[B * T], tgt[B * T];
    for (int i = 0; i < B * T; i++) tok[i] = (i * 7919) % 1000, tgt[i] = (i * 104729 + 11) % 1000;
    float loss = NAN;
    CHECK_OK(hg_forward_backward(m, tok, tgt, B, T, 1.0f, &loss));
    CHECK(isfinite(loss) && loss > 0.0f);
}

int main(void) {
    hg_config cfg;
    CHECK_OK(hg_config_preset("odd", &cfg));
    hg_options o = hg_options_default();
    o.batch = 2, o.seq_len = 16, o.threads = 2;
    hg_model *m = NULL;
    CHECK_OK(hg_model_create(&m, &cfg, &o));
    if (!m) CHECK_DONE();
    cpu_step(m);
    for (size_t i = 0; i < sizeof cuda_libs / sizeof cuda_libs[0]; i++) {
        int got = mapped(cuda_libs[i]);
        if (got != 0) fprintf(stderr, "a CPU run maps %s (%d)\n", cuda_libs[i], got);
        CHECK(got == 0);
    }

    /* a module path that does not exist: refused, naming it */
    hg_options g = o;
    g.device = HG_DEVICE_CUDA;
    hg_model *gm = NULL;
    setenv("HANDGRAD_CUDA_MODULE", "/nonexistent/libhandgrad_cuda.so", 1);
    hg_status st = hg_model_create(&gm, &cfg, &g);
    CHECK(st == HG_ERR_UNSUPPORTED && gm == NULL);
    printf("with a missing module: %s\n", hg_last_error());
#ifdef HG_TEST_CUDA_BUILD
    CHECK(strstr(hg_last_error(), "/nonexistent/libhandgrad_cuda.so") != NULL);
#else
    CHECK(strstr(hg_last_error(), "no CUDA backend") != NULL);
#endif
    unsetenv("HANDGRAD_CUDA_MODULE");

    /* the module as built: loads; without a GPU the backend says so */
    st = hg_model_create(&gm, &cfg, &g);
    printf("the CUDA device: %s%s%s\n", hg_status_name(st), st == HG_OK ? "" : ": ", st == HG_OK ? "" : hg_last_error());
#ifdef HG_TEST_CUDA_BUILD
    CHECK(st == HG_OK || (st == HG_ERR_UNSUPPORTED && strstr(hg_last_error(), "device") != NULL));
    CHECK(mapped("libhandgrad_cuda") == 1);
#else
    CHECK(st == HG_ERR_UNSUPPORTED && mapped("libhandgrad_cuda") == 0);
#endif
    if (gm) hg_model_free(gm);
    cpu_step(m);
    hg_model_free(m);
    CHECK_DONE();
}
