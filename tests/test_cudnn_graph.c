/* cuDNN's attention graphs (src/backend/cuda/cudnn_attention.c) without a GPU.
 *
 * test_cudnn_graph missing
 *   HANDGRAD_CUDNN names a file that does not exist: opening fails, and the reason names
 *   the variable and the file (the CUDA module then runs its own kernels).
 * test_cudnn_graph graphs DEVICEPROP.json
 *   cuDNN is loaded by the module's own search and a device-less context is opened from
 *   cuDNN's description of an H200 (tests/fixtures/cudnn, written on one by
 *   tools/cudnn_sdpa_reference.py). Each graph is built from the tables, finalized, given
 *   to cuDNN's heuristics and planned for that GPU: cuDNN checks the graph against its
 *   fused-attention patterns and compiles the kernel (NVRTC). Without a GPU the plan
 *   then stops where the kernel would be loaded into the driver; ctest runs this with
 *   the CUDA toolkit's stub libcuda on the library path, which fails exactly there. So a
 *   plan passes when it succeeds (a real driver) or fails at that last step, and fails
 *   on anything earlier: a graph cuDNN's patterns refuse, a bad attribute, no engine.
 *   Skipped (77) where no cuDNN 9 or no libcuda (not even the stub) can be loaded.
 * A refusal names the graph node and carries cuDNN's own message (seen in the log of a
 * failing run). cuDNN's pattern checks cover the graph's shape and the forward's softmax;
 * a wrong pointwise mode in the backward still compiles, so the backward's numbers are
 * checked on a GPU only (test_cuda_ops' attention group). */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cudnn_attention.h"

static int failures;

static void expect(int ok, const char *what, const char *detail) {
    printf("  %s %s%s%s\n", ok ? "ok  " : "FAIL", what, detail ? ": " : "", detail ? detail : "");
    failures += !ok;
}

static int missing(void) {
    setenv("HANDGRAD_CUDNN", "/nonexistent/libcudnn.so.9", 1);
    char why[1024] = "";
    cudnn_attn *a = cudnn_attn_open(NULL, "{}", why, sizeof why);
    expect(!a, "HANDGRAD_CUDNN naming a missing file is refused", why);
    expect(strstr(why, "HANDGRAD_CUDNN=/nonexistent/libcudnn.so.9") != NULL, "the reason names the variable and file", NULL);
    expect(strstr(why, "No such file") != NULL, "the reason carries the loader's message", NULL);
    cudnn_attn_close(a);
    return failures ? 1 : 0;
}

/* 1 when the plan succeeded or failed only where the compiled kernel meets the driver. */
static int planned(int rc, const char *why) {
    return rc == 0 || strstr(why, "cuLibraryLoadData") || strstr(why, "CUDA_DRIVER");
}

static void plan_all(cudnn_attn *a, const char *name, hg_attention_shape s) {
    static const char *dirs[] = {"forward", "backward", "backward, dQ direct"};
    for (int d = 0; d < 3; d++) {
        char why[1024] = "", what[200];
        size_t ws = 0;
        const char *engine = NULL;
        int rc = cudnn_attn_plan(a, d, &s, &ws, &engine, why, sizeof why);
        snprintf(what, sizeof what, "%s %s (B=%d T=%d NH=%d NKV=%d hs=%d%s)", name, dirs[d], s.B, s.T, s.NH,
                 s.NKV ? s.NKV : s.NH, s.hs, s.causal ? ", causal" : "");
        expect(planned(rc, why), what, rc == 0 ? engine : why);
        char again[1024] = "";
        int rc2 = cudnn_attn_plan(a, d, &s, &ws, &engine, again, sizeof again);
        expect(rc2 == rc && !strcmp(again, why), "  planned again from the cache, the same answer", NULL);
    }
}

static int graphs(const char *json_path) {
    FILE *f = fopen(json_path, "rb");
    if (!f) {
        printf("FAIL: cannot open %s\n", json_path);
        return 1;
    }
    char json[8192];
    size_t n = fread(json, 1, sizeof json - 1, f);
    fclose(f);
    json[n] = 0;
    char why[1024] = "";
    cudnn_attn *a = cudnn_attn_open(NULL, json, why, sizeof why);
    if (!a && strstr(why, "no usable libcudnn")) {
        printf("skipped: %s\n", why);
        return 77;
    }
    expect(a != NULL, "device-less context from the H200's description", a ? cudnn_attn_library(a) : why);
    if (!a) return 1;
    void *cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!cuda) {
        printf("skipped: no libcuda.so.1, not even the CUDA toolkit's stub: cuDNN stops before its pattern checks\n");
        cudnn_attn_close(a);
        return 77;
    }
    hg_attention_shape big = {2, 256, 4, 256, 1, 0, 0, 0, NULL};
    int rc = cudnn_attn_plan(a, CUDNN_ATTN_FORWARD, &big, NULL, NULL, why, sizeof why);
    expect(rc != 0 && strstr(why, "head size 256"), "head size 256 is refused, naming it", why);
    plan_all(a, "GPT-2's heads", (hg_attention_shape){2, 256, 4, 64, 1, 0, 0, 0, NULL});
    plan_all(a, "head width 128", (hg_attention_shape){1, 256, 2, 128, 1, 0, 0, 0, NULL});
    plan_all(a, "no mask", (hg_attention_shape){1, 128, 2, 64, 0, 0, 0, 0, NULL});
    plan_all(a, "grouped-query", (hg_attention_shape){1, 128, 4, 64, 1, 2, 0, 0, NULL});
    /* 3 query heads cannot share 2 kv heads: cuDNN refuses the first product's shapes */
    hg_attention_shape odd = {1, 128, 3, 64, 1, 2, 0, 0, NULL};
    rc = cudnn_attn_plan(a, CUDNN_ATTN_FORWARD, &odd, NULL, NULL, why, sizeof why);
    expect(rc != 0 && strstr(why, "cuDNN: S = Q K^T: ") && strstr(why, "CUDNN_STATUS_"),
           "a graph cuDNN refuses: the reason names the node and cuDNN's status", why);
    cudnn_attn_close(a);
    printf(failures ? "%d check(s) failed\n" : "ok\n", failures);
    return failures ? 1 : 0;
}

int main(int argc, char **argv) {
    if (argc == 2 && !strcmp(argv[1], "missing")) return missing();
    if (argc == 3 && !strcmp(argv[1], "graphs")) return graphs(argv[2]);
    fprintf(stderr, "usage: test_cudnn_graph missing | graphs DEVICEPROP.json\n");
    return 2;
}
