/* Times handgrad's CUDA attention (bf16) forward and forward+backward over the attention
 * sweep: T from 512 to 16384, head sizes 64 and 128, causal, d_model 2048 (NH = 2048 /
 * hs) and B*T = 16384 tokens, on three paths: "handgrad" as the library picks (cuDNN's
 * fused attention where cuDNN is loaded), "handgrad_deterministic" (its own kernels,
 * HG_FLAG_DETERMINISTIC) and "handgrad_deterministic_cudnn" (HANDGRAD_CUDNN_DETERMINISTIC=1:
 * cuDNN with the backward that writes dQ without the accumulator, an experiment). One
 * JSON object per line, the fields that
 * bench/compare_torch_cuda.py reads:
 *   {"impl", "T", "hs", "B", "NH", "causal", "forward_ms", "forward_backward_ms",
 *    "forward_tflops", "forward_backward_tflops", "device_bytes", "kernels"}
 * FLOPs are counted as FlashAttention's benchmarks count them: forward 4 B NH T^2 hs,
 * halved when causal; backward 2.5x forward.
 * Measured as compare_torch_cuda.py measures PyTorch's SDPA (one method on both sides):
 *   time: the median over BATCHES batches of CALLS back-to-back calls, synchronised
 *   around each batch, after WARM untimed calls;
 *   device_bytes: the device memory the shape took, cudaMemGetInfo's free memory before
 *   its buffers were allocated less the free memory after the timed calls (a backend of
 *   its own for each shape, so workspace grown for an earlier shape is not reused).
 * Usage: attention_cuda [--T T,... --hs D,...]. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "core/error.h"
#include "core/timer.h"

static hg_backend *be; /* the backend being timed */

static void die(const char *what) {
    fprintf(stderr, "attention_cuda: %s: %s\n", what, hg_last_error());
    exit(1);
}

static void *dev(size_t bytes) {
    void *p = be->ops->alloc(be, bytes);
    if (!p) {
        fprintf(stderr, "attention_cuda: out of GPU memory (%zu bytes)\n", bytes);
        exit(1);
    }
    return p;
}

/* n random bf16 values in [-1, 1) at d. */
static void fill(void *d, size_t n, unsigned seed) {
    float *h = malloc(n * sizeof(float)), *tmp = dev(n * sizeof(float));
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
    for (size_t i = 0; i < n; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        h[i] = (float)((double)(x >> 11) / 9007199254740992.0 * 2.0 - 1.0);
    }
    be->ops->upload(be, tmp, h, n * sizeof(float));
    be->ops->to_compute(be, d, tmp, n);
    if (be->ops->sync(be) != HG_OK) die("fill");
    be->ops->free(be, tmp);
    free(h);
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

typedef struct bufs {
    void *qkv, *out, *lse, *dout, *dqkv, *scratch;
} bufs;

static hg_status pass(const hg_attention_shape *s, const bufs *b, int backward) {
    HG_TRY(be->ops->attention_forward(be, b->out, b->lse, b->qkv, s, b->scratch));
    if (backward) HG_TRY(be->ops->attention_backward(be, b->dqkv, b->dout, b->qkv, b->out, b->lse, s, b->scratch));
    return HG_OK;
}

/* the timing method, the same as compare_torch_cuda.py's for SDPA */
enum { WARM = 3, BATCHES = 15, CALLS = 4 };

/* Median over BATCHES batches of the mean seconds per call. */
static double time_pass(const hg_attention_shape *s, const bufs *b, int backward) {
    for (int i = 0; i < WARM; i++)
        if (pass(s, b, backward) != HG_OK) die("attention");
    if (be->ops->sync(be) != HG_OK) die("sync");
    double t[BATCHES];
    for (int k = 0; k < BATCHES; k++) {
        double t0 = hg_now();
        for (int i = 0; i < CALLS; i++)
            if (pass(s, b, backward) != HG_OK) die("attention");
        if (be->ops->sync(be) != HG_OK) die("sync");
        t[k] = (hg_now() - t0) / CALLS;
    }
    qsort(t, BATCHES, sizeof t[0], cmp_double);
    return t[BATCHES / 2];
}

static void run(const char *impl, int T, int hs) {
    const int C = 2048, NH = C / hs, B = 16384 / T > 0 ? 16384 / T : 1;
    hg_attention_shape s = {B, T, NH, hs, 1, 0, 0, 0, NULL};
    size_t n = (size_t)B * T * C, E = 2, scratch = be->ops->attention_scratch_bytes(be, &s);
    size_t free0 = be->ops->mem_available(be);
    bufs b = {dev(3 * n * E), dev(n * E), dev((size_t)B * NH * T * 4), dev(n * E), dev(3 * n * E), dev(scratch)};
    fill(b.qkv, 3 * n, 1);
    fill(b.dout, n, 2);
    double fwd = time_pass(&s, &b, 0), fb = time_pass(&s, &b, 1);
    double flops = 4.0 * B * NH * (double)T * T * hs * 0.5;
    size_t free1 = be->ops->mem_available(be), bytes = free0 > free1 ? free0 - free1 : 0;
    char kernels[512];
    const char *k = be->ops->attention_kernels(be);
    snprintf(kernels, sizeof kernels, "%s", k ? k : "");
    for (char *c = kernels; *c; c++)
        if (*c == '"' || *c == '\\' || (unsigned char)*c < 32) *c = '\'';
    printf("{\"impl\": \"%s\", \"T\": %d, \"hs\": %d, \"B\": %d, \"NH\": %d, \"causal\": 1, \"forward_ms\": %.4f, "
           "\"forward_backward_ms\": %.4f, \"forward_tflops\": %.2f, \"forward_backward_tflops\": %.2f, \"device_bytes\": %zu, "
           "\"kernels\": \"%s\"}\n",
           impl, T, hs, B, NH, fwd * 1e3, fb * 1e3, flops / fwd / 1e12, 3.5 * flops / fb / 1e12, bytes, kernels);
    fflush(stdout);
    void *all[] = {b.qkv, b.out, b.lse, b.dout, b.dqkv, b.scratch};
    for (int i = 0; i < 6; i++) be->ops->free(be, all[i]);
}

/* Up to 16 positive integers "a,b,c" into v; their count, or 0 if malformed. */
static int parse_list(const char *s, int *v) {
    int n = 0;
    for (char *end; n < 16; s = end + 1) {
        long x = strtol(s, &end, 10);
        if (end == s || x <= 0 || x > (1 << 20) || (*end && *end != ',')) return 0;
        v[n++] = (int)x;
        if (!*end) return n;
    }
    return 0;
}

int main(int argc, char **argv) {
    int Ts[16] = {512, 1024, 2048, 4096, 8192, 16384}, nT = 6, hss[16] = {64, 128}, nhs = 2;
    for (int i = 1; i < argc; i += 2) {
        if (i + 1 < argc && !strcmp(argv[i], "--T")) nT = parse_list(argv[i + 1], Ts);
        else if (i + 1 < argc && !strcmp(argv[i], "--hs")) nhs = parse_list(argv[i + 1], hss);
        else nT = 0;
        if (nT < 1 || nhs < 1) {
            fprintf(stderr, "usage: attention_cuda [--T T,... --hs D,...]\n");
            return 2;
        }
    }
    hg_options opt = hg_options_default();
    opt.device = HG_DEVICE_CUDA, opt.precision = HG_PRECISION_BF16;
    static const struct {
        const char *impl;
        unsigned flags;
    } paths[] = {{"handgrad", 0}, {"handgrad_deterministic", HG_FLAG_DETERMINISTIC},
                 {"handgrad_deterministic_cudnn", HG_FLAG_DETERMINISTIC}};
    for (int p = 0; p < 3; p++) {
        opt.flags = paths[p].flags;
        /* the third: cuDNN's backward without the dQ accumulator (an experiment) */
        setenv("HANDGRAD_CUDNN_DETERMINISTIC", p == 2 ? "1" : "0", 1);
        for (int h = 0; h < nhs; h++)
            for (int t = 0; t < nT; t++) {
                if (hg_backend_create(&be, &opt, 1) != HG_OK) die("CUDA backend");
                run(paths[p].impl, Ts[t], hss[h]);
                be->ops->destroy(be);
            }
    }
    return 0;
}
