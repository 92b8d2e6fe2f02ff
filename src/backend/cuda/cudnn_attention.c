/* cuDNN's fused flash attention through its backend API (cudnn_attention.h). */
#define _GNU_SOURCE
#include "backend/cuda/cudnn_attention.h"

#include <cuda_runtime_api.h>
#include <cudnn_graph.h>
#include <dlfcn.h>
#include <float.h>
#include <glob.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- the library */

/* The functions handgrad calls, looked up by name (fn_names) into this table. */
typedef struct cudnn_fns {
    size_t (*GetVersion)(void);
    const char *(*GetErrorString)(cudnnStatus_t);
    void (*GetLastErrorString)(char *, size_t);
    cudnnStatus_t (*Create)(cudnnHandle_t *);
    cudnnStatus_t (*Destroy)(cudnnHandle_t);
    cudnnStatus_t (*SetStream)(cudnnHandle_t, cudaStream_t);
    cudnnStatus_t (*BackendCreateDescriptor)(cudnnBackendDescriptorType_t, cudnnBackendDescriptor_t *);
    cudnnStatus_t (*BackendDestroyDescriptor)(cudnnBackendDescriptor_t);
    cudnnStatus_t (*BackendFinalize)(cudnnBackendDescriptor_t);
    cudnnStatus_t (*BackendSetAttribute)(cudnnBackendDescriptor_t, cudnnBackendAttributeName_t,
                                         cudnnBackendAttributeType_t, int64_t, const void *);
    cudnnStatus_t (*BackendGetAttribute)(cudnnBackendDescriptor_t const, cudnnBackendAttributeName_t,
                                         cudnnBackendAttributeType_t, int64_t, int64_t *, void *);
    cudnnStatus_t (*BackendExecute)(cudnnHandle_t, cudnnBackendDescriptor_t, cudnnBackendDescriptor_t);
} cudnn_fns;

#define FN(f) {"cudnn" #f, offsetof(cudnn_fns, f)}
static const struct {
    const char *name;
    size_t offset;
} fn_names[] = {FN(GetVersion), FN(GetErrorString), FN(GetLastErrorString), FN(Create), FN(Destroy), FN(SetStream),
                FN(BackendCreateDescriptor), FN(BackendDestroyDescriptor), FN(BackendFinalize), FN(BackendSetAttribute),
                FN(BackendGetAttribute), FN(BackendExecute)};
#undef FN

/* One library for the process, loaded on first use and kept (cuDNN is not unloaded). */
static struct {
    pthread_mutex_t lock;
    int tried;
    cudnn_fns fn;
    char path[512], name[600], why[1024];
    char log[640]; /* what each candidate said */
} lib = {.lock = PTHREAD_MUTEX_INITIALIZER};

static void appendf(char *buf, size_t n, const char *fmt, ...) {
    size_t len = strlen(buf);
    if (len + 1 >= n) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf + len, n - len, fmt, ap);
    va_end(ap);
}

/* cuDNN's parts beside a libcudnn.so.9 found by path, and NVRTC from a sibling wheel
 * (the runtime-compiled engines use it), loaded first and globally: the shim then finds
 * them by soname without the folder being on LD_LIBRARY_PATH. Best effort. */
static void preload_parts(const char *path) {
    static const char *parts[] = {"libcudnn_graph.so.9", "libcudnn_engines_precompiled.so.9",
                                  "libcudnn_engines_runtime_compiled.so.9", "libcudnn_heuristic.so.9",
                                  "libcudnn_ops.so.9", "libcudnn_cnn.so.9", "libcudnn_adv.so.9"};
    char dir[512], file[700];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (!slash) return;
    *slash = 0;
    glob_t g;
    snprintf(file, sizeof file, "%s/../../*/lib/libnvrtc.so.[0-9]*", dir);
    if (glob(file, 0, NULL, &g) == 0) {
        for (size_t i = 0; i < g.gl_pathc; i++)
            if (!strstr(g.gl_pathv[i], "builtins")) dlopen(g.gl_pathv[i], RTLD_NOW | RTLD_GLOBAL);
        globfree(&g);
    }
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) {
        snprintf(file, sizeof file, "%s/%s", dir, parts[i]);
        dlopen(file, RTLD_NOW | RTLD_GLOBAL);
    }
}

/* Tries one candidate: a path (with a '/') or a soname. 1 when loaded and complete. */
static int try_load(const char *cand) {
    if (strchr(cand, '/')) preload_parts(cand);
    void *so = dlopen(cand, RTLD_NOW | RTLD_LOCAL);
    if (!so) {
        const char *e = dlerror();
        appendf(lib.log, sizeof lib.log, "%s%s", lib.log[0] ? "; " : "", e ? e : cand);
        return 0;
    }
    for (size_t i = 0; i < sizeof fn_names / sizeof fn_names[0]; i++) {
        void *f = dlsym(so, fn_names[i].name);
        if (!f) {
            appendf(lib.log, sizeof lib.log, "%s%s lacks %s", lib.log[0] ? "; " : "", cand, fn_names[i].name);
            dlclose(so);
            return 0;
        }
        memcpy((char *)&lib.fn + fn_names[i].offset, &f, sizeof f);
    }
    Dl_info info;
    const char *where = dladdr((void *)lib.fn.GetVersion, &info) && info.dli_fname ? info.dli_fname : cand;
    snprintf(lib.path, sizeof lib.path, "%s", where);
    size_t v = lib.fn.GetVersion();
    if (v < 90000) {
        appendf(lib.log, sizeof lib.log, "%scuDNN %zu.%zu.%zu at %s is older than 9.0", lib.log[0] ? "; " : "",
                v / 10000, v / 100 % 100, v % 100, lib.path);
        memset(&lib.fn, 0, sizeof lib.fn);
        return 0;
    }
    snprintf(lib.name, sizeof lib.name, "cuDNN %zu.%zu.%zu (%s)", v / 10000, v / 100 % 100, v % 100, lib.path);
    return 1;
}

/* Candidates matching a glob pattern, tried in order. */
static int try_glob(const char *pattern) {
    glob_t g;
    int ok = 0;
    if (glob(pattern, 0, NULL, &g) == 0) {
        for (size_t i = 0; !ok && i < g.gl_pathc; i++) ok = try_load(g.gl_pathv[i]);
        globfree(&g);
    }
    return ok;
}

static int load_library(void) {
    const char *env = getenv("HANDGRAD_CUDNN");
    if (env && *env) {
        if (try_load(env)) return 1;
        snprintf(lib.why, sizeof lib.why, "HANDGRAD_CUDNN=%.300s: %s", env, lib.log);
        return 0;
    }
    if (try_load("libcudnn.so.9")) return 1;
    const char *fixed[] = {"/usr/local/cuda/lib64/libcudnn.so.9", "/usr/local/cuda/lib/libcudnn.so.9"};
    for (size_t i = 0; i < 2; i++)
        if (try_load(fixed[i])) return 1;
    char pat[1024];
    const char *wheel = "lib/python3*/site-packages/nvidia/cudnn/lib/libcudnn.so.9";
    const char *venv = getenv("VIRTUAL_ENV");
    if (venv) {
        snprintf(pat, sizeof pat, "%s/%s", venv, wheel);
        if (try_glob(pat)) return 1;
    }
    const char *path = getenv("PATH");
    for (const char *p = path; p && *p;) {
        const char *end = strchr(p, ':');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len > 0 && len < 512) {
            snprintf(pat, sizeof pat, "%.*s/../%s", (int)len, p, wheel);
            if (try_glob(pat)) return 1;
        }
        p = end ? end + 1 : NULL;
    }
    const char *home = getenv("HOME");
    if (home) {
        snprintf(pat, sizeof pat, "%s/.local/%s", home, wheel);
        if (try_glob(pat)) return 1;
    }
    if (try_glob("/usr/local/lib/python3*/dist-packages/nvidia/cudnn/lib/libcudnn.so.9")) return 1;
    if (try_glob("/usr/lib/python3/dist-packages/nvidia/cudnn/lib/libcudnn.so.9")) return 1;
    snprintf(lib.why, sizeof lib.why, "no usable libcudnn.so.9 (searched the loader's path, /usr/local/cuda, PyTorch's "
             "wheel beside python3 on PATH; HANDGRAD_CUDNN=PATH names one): %s", lib.log);
    return 0;
}

/* ---------------------------------------------------------------- descriptors */

/* One attribute of a descriptor: set by dnn_make in table order. */
typedef struct dnn_attr {
    cudnnBackendAttributeName_t name;
    const char *label;
    cudnnBackendAttributeType_t type;
    int64_t count;
    const void *value;
} dnn_attr;
#define ATTR(n, t, c, v) {n, #n, t, c, v}

#define MAX_DESC 192 /* descriptors of one graph and its plan (about 80, and the configurations tried) */

/* A graph under construction, then its plan: the descriptors it owns. */
typedef struct dnn_graph {
    cudnnBackendDescriptor_t own[MAX_DESC];
    int nown;
    char *why;
    size_t n;
} dnn_graph;

static void dnn_why(dnn_graph *g, const char *node, const char *what, cudnnStatus_t st) {
    char last[512] = "";
    lib.fn.GetLastErrorString(last, sizeof last);
    snprintf(g->why, g->n, "cuDNN: %s: %s: %s%s%s", node, what, lib.fn.GetErrorString(st), last[0] ? ": " : "", last);
}

/* Creates a descriptor of `type`, sets the attributes in order, finalizes it unless
 * finalize is 0, and keeps it in g (destroyed with g). NULL on failure, the reason in
 * g->why naming `node` and the attribute. */
static cudnnBackendDescriptor_t dnn_make(dnn_graph *g, cudnnBackendDescriptorType_t type, const char *node,
                                         const dnn_attr *at, int nat, int finalize) {
    cudnnBackendDescriptor_t d = NULL;
    if (g->nown == MAX_DESC) {
        snprintf(g->why, g->n, "cuDNN: %s: more than %d descriptors in one graph", node, MAX_DESC);
        return NULL;
    }
    cudnnStatus_t st = lib.fn.BackendCreateDescriptor(type, &d);
    if (st != CUDNN_STATUS_SUCCESS) {
        dnn_why(g, node, "create", st);
        return NULL;
    }
    g->own[g->nown++] = d;
    for (int i = 0; i < nat; i++) {
        st = lib.fn.BackendSetAttribute(d, at[i].name, at[i].type, at[i].count, at[i].value);
        if (st != CUDNN_STATUS_SUCCESS) {
            dnn_why(g, node, at[i].label, st);
            return NULL;
        }
    }
    if (finalize && (st = lib.fn.BackendFinalize(d)) != CUDNN_STATUS_SUCCESS) {
        dnn_why(g, node, "finalize", st);
        return NULL;
    }
    return d;
}

static void dnn_free(dnn_graph *g) {
    while (g->nown > 0) lib.fn.BackendDestroyDescriptor(g->own[--g->nown]);
}

/* ---------------------------------------------------------------- the graphs as tables */

/* Tensor layouts, from the shape (B, T, NH, NKV, hs; W = (NH + 2 NKV) hs, C = NH hs). */
typedef enum {
    L_Q,      /* (B, NH, T, hs) in the packed qkv or dqkv rows */
    L_KV,     /* (B, NKV, T, hs) in qkv: K or V, and dK, dV in dqkv */
    L_KVT,    /* (B, NKV, hs, T): K^T or V^T read from qkv */
    L_O,      /* (B, NH, T, hs) in out / dout rows (B, T, C) */
    L_ROW,    /* (B, NH, T, 1): lse and other row statistics */
    L_SCALAR, /* (1, 1, 1, 1), passed by value */
    L_S,      /* (B, NH, T, T), virtual scores */
    L_ST,     /* (B, NH, T, T) with transposed strides (P^T, dS^T) */
    L_HS,     /* (B, NH, T, hs) contiguous: fp32 dQ accumulator, dO * O */
} dnn_layout;

static void layout_of(dnn_layout l, const hg_attention_shape *s, int64_t dim[4], int64_t stride[4]) {
    const int64_t B = s->B, T = s->T, H = s->NH, K = s->NKV ? s->NKV : s->NH, hs = s->hs, W = (H + 2 * K) * hs,
                  C = H * hs;
    int64_t d[4] = {1, 1, 1, 1}, st[4] = {1, 1, 1, 1};
    switch (l) {
    case L_Q: d[0] = B, d[1] = H, d[2] = T, d[3] = hs, st[0] = T * W, st[1] = hs, st[2] = W, st[3] = 1; break;
    case L_KV: d[0] = B, d[1] = K, d[2] = T, d[3] = hs, st[0] = T * W, st[1] = hs, st[2] = W, st[3] = 1; break;
    case L_KVT: d[0] = B, d[1] = K, d[2] = hs, d[3] = T, st[0] = T * W, st[1] = hs, st[2] = 1, st[3] = W; break;
    case L_O: d[0] = B, d[1] = H, d[2] = T, d[3] = hs, st[0] = T * C, st[1] = hs, st[2] = C, st[3] = 1; break;
    case L_ROW: d[0] = B, d[1] = H, d[2] = T, st[0] = H * T, st[1] = T, st[2] = 1; break;
    case L_SCALAR: break;
    case L_S: d[0] = B, d[1] = H, d[2] = T, d[3] = T, st[0] = H * T * T, st[1] = T * T, st[2] = T, st[3] = 1; break;
    case L_ST: d[0] = B, d[1] = H, d[2] = T, d[3] = T, st[0] = H * T * T, st[1] = T * T, st[2] = 1, st[3] = T; break;
    case L_HS: d[0] = B, d[1] = H, d[2] = T, d[3] = hs, st[0] = H * T * hs, st[1] = T * hs, st[2] = hs, st[3] = 1; break;
    }
    memcpy(dim, d, sizeof d);
    memcpy(stride, st, sizeof st);
}

/* Where a non-virtual tensor's data comes from at execution. */
typedef enum {
    R_VIRTUAL, R_Q, R_K, R_V, R_OUT, R_DOUT, R_LSE, R_DQ, R_DK, R_DV, R_SCALE, R_ONE, R_MASKED, R_DELTA, R_DQACC, R_NROLES
} dnn_role;

typedef struct tensor_spec {
    const char *name;
    cudnnDataType_t type;
    dnn_layout layout;
    dnn_role role; /* R_VIRTUAL: an intermediate inside the fused kernel */
} tensor_spec;

enum { OP_MATMUL, OP_POINTWISE, OP_REDUCTION, OP_RESHAPE };
/* op_spec.when: the graphs an op is part of (0: all): masked; as many kv heads as query
 * heads, or fewer; dQ through the fp32 accumulator, or directly */
enum { W_CAUSAL = 1, W_MHA = 2, W_GQA = 4, W_ACC = 8, W_DIRECT = 16 };
#define NONE (-1)
typedef struct op_spec {
    int kind;
    const char *name;
    int mode;      /* cudnnPointwiseMode_t or cudnnReduceTensorOp_t */
    int64_t axis;  /* GEN_INDEX */
    int when;      /* W_* */
    int x, b, t, y; /* tensor indices (matmul: x A, b B, y C) */
} op_spec;

#define F32 CUDNN_DATA_FLOAT
#define BF16 CUDNN_DATA_BFLOAT16
#define I32 CUDNN_DATA_INT32
#define BOOL CUDNN_DATA_BOOLEAN
#define V R_VIRTUAL
#define PW(name, mode, x, b, y) {OP_POINTWISE, name, CUDNN_POINTWISE_##mode, 0, 0, x, b, NONE, y}

/* The forward: O = softmax(scale Q K^T, causal) V and the row statistics
 * lse = max + log(sum exp), as cudnn-frontend's composite SDPA node builds it. */
enum { FQ, FKT, FV, FO, FLSE, FSCALE, FMASKED, FS, FSS, FROW, FCOL, FKEEP, FSM, FMAX, FSD, FE, FSUM, FLOG, FP, FN };
static const tensor_spec fwd_tensors[FN] = {
    [FQ] = {"Q", BF16, L_Q, R_Q},
    [FKT] = {"K^T", BF16, L_KVT, R_K},
    [FV] = {"V", BF16, L_KV, R_V},
    [FO] = {"O", BF16, L_O, R_OUT},
    [FLSE] = {"stats (lse)", F32, L_ROW, R_LSE},
    [FSCALE] = {"scale", F32, L_SCALAR, R_SCALE},
    [FMASKED] = {"masked value", F32, L_SCALAR, R_MASKED},
    [FS] = {"S", F32, L_S, V},
    [FSS] = {"S scaled", F32, L_S, V},
    [FROW] = {"row index", I32, L_S, V},
    [FCOL] = {"column index", I32, L_S, V},
    [FKEEP] = {"causal keep", BOOL, L_S, V},
    [FSM] = {"S masked", F32, L_S, V},
    [FMAX] = {"row max", F32, L_ROW, V},
    [FSD] = {"S - max", F32, L_S, V},
    [FE] = {"exp", F32, L_S, V},
    [FSUM] = {"row sum", F32, L_ROW, V},
    [FLOG] = {"log sum", F32, L_ROW, V},
    [FP] = {"P", BF16, L_S, V},
};
static const op_spec fwd_ops[] = {
    {OP_MATMUL, "S = Q K^T", 0, 0, 0, FQ, FKT, NONE, FS},
    PW("S * scale", MUL, FS, FSCALE, FSS),
    {OP_POINTWISE, "row index", CUDNN_POINTWISE_GEN_INDEX, 2, W_CAUSAL, FSS, NONE, NONE, FROW},
    {OP_POINTWISE, "column index", CUDNN_POINTWISE_GEN_INDEX, 3, W_CAUSAL, FSS, NONE, NONE, FCOL},
    {OP_POINTWISE, "row >= column", CUDNN_POINTWISE_CMP_GE, 0, W_CAUSAL, FROW, FCOL, NONE, FKEEP},
    {OP_POINTWISE, "causal mask", CUDNN_POINTWISE_BINARY_SELECT, 0, W_CAUSAL, FSS, FMASKED, FKEEP, FSM},
    {OP_REDUCTION, "row max", CUDNN_REDUCE_TENSOR_MAX, 0, 0, FSM, NONE, NONE, FMAX},
    PW("S - max", SUB, FSM, FMAX, FSD),
    PW("exp", EXP, FSD, NONE, FE),
    {OP_REDUCTION, "row sum", CUDNN_REDUCE_TENSOR_ADD, 0, 0, FE, NONE, NONE, FSUM},
    PW("log sum", LOG, FSUM, NONE, FLOG),
    PW("stats = max + log sum", ADD, FMAX, FLOG, FLSE),
    PW("P = exp / sum", DIV, FE, FSUM, FP),
    {OP_MATMUL, "O = P V", 0, 0, 0, FP, FV, NONE, FO},
};

/* The backward: delta = rowsum(dO * O); P = exp(scale Q K^T - lse) (masked);
 * dV = P^T dO; dS = P (dO V^T - delta) scale; dK = dS^T Q; dQ = dS K (accumulated in
 * fp32 in the workspace, then converted). With fewer kv heads than query heads, dK and dV
 * are formed per query head and summed over each kv head's group by a reduction. */
enum {
    BQ, BKT, BVT, BO, BDO, BLSE, BSCALE, BONE, BMASKED, BDQ, BDK, BDV, BDELTA, BDQACC, BDOO, BDRAW, BS, BSS, BSD,
    BROW, BCOL, BKEEP, BSM, BP, BPT, BDP, BDPD, BDS0, BDS, BDST, BK, BDKF, BDVF, BN
};
static const tensor_spec bwd_tensors[BN] = {
    [BQ] = {"Q", BF16, L_Q, R_Q},
    [BKT] = {"K^T", BF16, L_KVT, R_K},
    [BVT] = {"V^T", BF16, L_KVT, R_V},
    [BO] = {"O", BF16, L_O, R_OUT},
    [BDO] = {"dO", BF16, L_O, R_DOUT},
    [BLSE] = {"stats (lse)", F32, L_ROW, R_LSE},
    [BSCALE] = {"scale", F32, L_SCALAR, R_SCALE},
    [BONE] = {"one", F32, L_SCALAR, R_ONE},
    [BMASKED] = {"masked value", F32, L_SCALAR, R_MASKED},
    [BDQ] = {"dQ", BF16, L_Q, R_DQ},
    [BDK] = {"dK", BF16, L_KV, R_DK},
    [BDV] = {"dV", BF16, L_KV, R_DV},
    [BDELTA] = {"delta = rowsum(dO * O)", F32, L_ROW, R_DELTA},
    [BDQACC] = {"dQ (fp32 accumulator)", F32, L_HS, R_DQACC},
    [BDOO] = {"dO * O", F32, L_HS, V},
    [BDRAW] = {"rowsum(dO * O)", F32, L_ROW, V},
    [BS] = {"S", F32, L_S, V},
    [BSS] = {"S scaled", F32, L_S, V},
    [BSD] = {"S - lse", F32, L_S, V},
    [BROW] = {"row index", I32, L_S, V},
    [BCOL] = {"column index", I32, L_S, V},
    [BKEEP] = {"causal keep", BOOL, L_S, V},
    [BSM] = {"S masked", F32, L_S, V},
    [BP] = {"P", F32, L_S, V},
    [BPT] = {"P^T", BF16, L_ST, V},
    [BDP] = {"dP", F32, L_S, V},
    [BDPD] = {"dP - delta", F32, L_S, V},
    [BDS0] = {"P (dP - delta)", F32, L_S, V},
    [BDS] = {"dS", F32, L_S, V},
    [BDST] = {"dS^T", BF16, L_ST, V},
    [BK] = {"K", F32, L_KV, V},
    [BDKF] = {"dK per query head", BF16, L_HS, V},
    [BDVF] = {"dV per query head", BF16, L_HS, V},
};
static const op_spec bwd_ops[] = {
    PW("dO * O", MUL, BDO, BO, BDOO),
    {OP_REDUCTION, "rowsum(dO * O)", CUDNN_REDUCE_TENSOR_ADD, 0, 0, BDOO, NONE, NONE, BDRAW},
    PW("delta", MUL, BDRAW, BONE, BDELTA),
    {OP_MATMUL, "S = Q K^T", 0, 0, 0, BQ, BKT, NONE, BS},
    PW("S * scale", MUL, BS, BSCALE, BSS),
    PW("S - lse", SUB, BSS, BLSE, BSD),
    {OP_POINTWISE, "row index", CUDNN_POINTWISE_GEN_INDEX, 2, W_CAUSAL, BSD, NONE, NONE, BROW},
    {OP_POINTWISE, "column index", CUDNN_POINTWISE_GEN_INDEX, 3, W_CAUSAL, BSD, NONE, NONE, BCOL},
    {OP_POINTWISE, "row >= column", CUDNN_POINTWISE_CMP_GE, 0, W_CAUSAL, BROW, BCOL, NONE, BKEEP},
    {OP_POINTWISE, "causal mask", CUDNN_POINTWISE_BINARY_SELECT, 0, W_CAUSAL, BSD, BMASKED, BKEEP, BSM},
    PW("P = exp", EXP, BSM, NONE, BP),
    {OP_RESHAPE, "P^T", 0, 0, 0, BP, NONE, NONE, BPT},
    {OP_MATMUL, "dV = P^T dO", 0, 0, W_MHA, BPT, BDO, NONE, BDV},
    {OP_MATMUL, "dV per query head = P^T dO", 0, 0, W_GQA, BPT, BDO, NONE, BDVF},
    {OP_REDUCTION, "dV = sum over the group", CUDNN_REDUCE_TENSOR_ADD, 0, W_GQA, BDVF, NONE, NONE, BDV},
    {OP_MATMUL, "dP = dO V^T", 0, 0, 0, BDO, BVT, NONE, BDP},
    PW("dP - delta", SUB, BDP, BDELTA, BDPD),
    PW("P (dP - delta)", MUL, BDPD, BP, BDS0),
    PW("dS = P (dP - delta) scale", MUL, BDS0, BSCALE, BDS),
    {OP_RESHAPE, "dS^T", 0, 0, 0, BDS, NONE, NONE, BDST},
    {OP_MATMUL, "dK = dS^T Q", 0, 0, W_MHA, BDST, BQ, NONE, BDK},
    {OP_MATMUL, "dK per query head = dS^T Q", 0, 0, W_GQA, BDST, BQ, NONE, BDKF},
    {OP_REDUCTION, "dK = sum over the group", CUDNN_REDUCE_TENSOR_ADD, 0, W_GQA, BDKF, NONE, NONE, BDK},
    {OP_RESHAPE, "K", 0, 0, 0, BKT, NONE, NONE, BK},
    {OP_MATMUL, "dQ = dS K", 0, 0, W_ACC, BDS, BK, NONE, BDQACC},
    {OP_POINTWISE, "dQ to bf16", CUDNN_POINTWISE_IDENTITY, 0, W_ACC, BDQACC, NONE, NONE, BDQ},
    {OP_MATMUL, "dQ = dS K (direct)", 0, 0, W_DIRECT, BDS, BK, NONE, BDQ},
};

static const struct {
    const tensor_spec *tensors;
    int ntensors;
    const op_spec *ops;
    int nops;
    int masked_in, masked_out; /* without the causal ops, the masked scores are these */
} graphs[3] = {
    {fwd_tensors, FN, fwd_ops, (int)(sizeof fwd_ops / sizeof fwd_ops[0]), FSS, FSM},
    {bwd_tensors, BN, bwd_ops, (int)(sizeof bwd_ops / sizeof bwd_ops[0]), BSD, BSM},
    {bwd_tensors, BN, bwd_ops, (int)(sizeof bwd_ops / sizeof bwd_ops[0]), BSD, BSM},
};
static const char *const graph_names[3] = {"forward graph", "backward graph", "deterministic backward graph"};

/* ---------------------------------------------------------------- plans */

#define MAX_IO 16 /* non-virtual tensors of one graph */
#define CACHE 16

typedef struct plan {
    int used;
    int dir, B, T, NH, NKV, hs, causal;
    int refused;           /* a refusal is cached too: the reason in why */
    char why[600];
    dnn_graph g;           /* every descriptor of the graph and plan */
    cudnnBackendDescriptor_t exec;
    size_t engine_ws, ws;  /* the engine's workspace; all the call needs */
    size_t delta_off, dqacc_off, engine_off, dqacc_bytes;
    int nio;
    int64_t uid[MAX_IO];
    dnn_role role[MAX_IO];
    float scale, one, masked; /* the by-value scalars (their addresses go in the variant pack) */
    char engine[96];
    unsigned long stamp;
} plan;

struct cudnn_attn {
    cudnnHandle_t handle;
    cudaStream_t stream;
    cudnnBackendDescriptor_t deviceprop; /* device-less mode */
    dnn_graph dp;                        /* owns deviceprop */
    plan cache[CACHE];
    unsigned long clock;
};

static size_t align256(size_t x) { return (x + 255) & ~(size_t)255; }

/* The workspace pointer is aligned up to 256 bytes first: 256 more. */
size_t cudnn_attn_reserve_bytes(const hg_attention_shape *s) {
    size_t rows = (size_t)s->B * s->NH * s->T;
    return 256 + align256(rows * sizeof(float)) + align256(rows * s->hs * sizeof(float)) + CUDNN_ATTN_ENGINE_RESERVE;
}
static char *ws_base(void *ws) { return (char *)(((uintptr_t)ws + 255) & ~(uintptr_t)255); }

cudnn_attn *cudnn_attn_open(void *stream, const char *deviceprop_json, char *why, size_t n) {
    pthread_mutex_lock(&lib.lock);
    if (!lib.tried) {
        lib.tried = 1;
        if (!load_library()) memset(&lib.fn, 0, sizeof lib.fn);
    }
    pthread_mutex_unlock(&lib.lock);
    if (!lib.fn.GetVersion) {
        snprintf(why, n, "%s", lib.why);
        return NULL;
    }
    cudnn_attn *a = calloc(1, sizeof *a);
    if (!a) {
        snprintf(why, n, "out of memory");
        return NULL;
    }
    a->stream = (cudaStream_t)stream;
    cudnnStatus_t st;
    if (stream) {
        if ((st = lib.fn.Create(&a->handle)) != CUDNN_STATUS_SUCCESS ||
            (st = lib.fn.SetStream(a->handle, a->stream)) != CUDNN_STATUS_SUCCESS) {
            char last[400] = "";
            lib.fn.GetLastErrorString(last, sizeof last);
            snprintf(why, n, "%s: cudnnCreate: %s%s%s", lib.name, lib.fn.GetErrorString(st), last[0] ? ": " : "", last);
            cudnn_attn_close(a);
            return NULL;
        }
    } else {
        if (!deviceprop_json) {
            snprintf(why, n, "cudnn_attn_open: neither a stream nor a device description");
            free(a);
            return NULL;
        }
        a->dp.why = why, a->dp.n = n;
        const dnn_attr at[] = {ATTR(CUDNN_ATTR_DEVICEPROP_JSON_REPRESENTATION, CUDNN_TYPE_CHAR,
                                    (int64_t)strlen(deviceprop_json) + 1, deviceprop_json)};
        a->deviceprop = dnn_make(&a->dp, CUDNN_BACKEND_DEVICEPROP_DESCRIPTOR, "device description", at, 1, 1);
        if (!a->deviceprop) {
            cudnn_attn_close(a);
            return NULL;
        }
    }
    return a;
}

static void plan_free(plan *p) {
    dnn_free(&p->g);
    memset(p, 0, sizeof *p);
}

void cudnn_attn_close(cudnn_attn *a) {
    if (!a) return;
    for (int i = 0; i < CACHE; i++) plan_free(&a->cache[i]);
    dnn_free(&a->dp);
    if (a->handle) lib.fn.Destroy(a->handle);
    free(a);
}

const char *cudnn_attn_library(const cudnn_attn *a) { return a ? lib.name : "cuDNN not loaded"; }

/* The tensor descriptors of the graph's ops, created on first use, so that the graph
 * without the causal ops has no mask tensors. */
static cudnnBackendDescriptor_t tensor_of(plan *p, const hg_attention_shape *s, cudnnBackendDescriptor_t *made,
                                          int i) {
    if (made[i]) return made[i];
    const tensor_spec *t = &graphs[p->dir].tensors[i];
    int64_t dim[4], stride[4], uid = i, align = 16;
    layout_of(t->layout, s, dim, stride);
    bool virt = t->role == R_VIRTUAL, byval = t->layout == L_SCALAR;
    const dnn_attr at[] = {
        ATTR(CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &t->type),
        ATTR(CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dim),
        ATTR(CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, stride),
        ATTR(CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid),
        ATTR(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align),
        ATTR(CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &virt),
        ATTR(CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &byval),
    };
    made[i] = dnn_make(&p->g, CUDNN_BACKEND_TENSOR_DESCRIPTOR, t->name, at, 7, 1);
    if (made[i] && !virt) {
        if (p->nio == MAX_IO) {
            snprintf(p->g.why, p->g.n, "cuDNN: %s: more than %d graph inputs and outputs", t->name, MAX_IO);
            return NULL;
        }
        p->uid[p->nio] = uid, p->role[p->nio] = t->role, p->nio++;
    }
    return made[i];
}

/* One op of the table: its descriptor (and, for matmul, pointwise and reduction, the
 * descriptor of its math), or NULL with the reason. */
static cudnnBackendDescriptor_t op_of(plan *p, const hg_attention_shape *s, cudnnBackendDescriptor_t *made,
                                      const op_spec *o, int alias_from, int alias_to) {
#define T_(i) ((i) == alias_to ? alias_from : (i))
    cudnnBackendDescriptor_t x = tensor_of(p, s, made, T_(o->x)), y = tensor_of(p, s, made, o->y);
    cudnnBackendDescriptor_t b = o->b != NONE ? tensor_of(p, s, made, T_(o->b)) : NULL;
    cudnnBackendDescriptor_t t = o->t != NONE ? tensor_of(p, s, made, T_(o->t)) : NULL;
#undef T_
    if (!x || !y || (o->b != NONE && !b) || (o->t != NONE && !t)) return NULL;
    const cudnnDataType_t f32 = CUDNN_DATA_FLOAT;
    const float one = 1.0f;
    switch (o->kind) {
    case OP_MATMUL: {
        const dnn_attr mm[] = {ATTR(CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &f32)};
        cudnnBackendDescriptor_t d = dnn_make(&p->g, CUDNN_BACKEND_MATMUL_DESCRIPTOR, o->name, mm, 1, 1);
        if (!d) return NULL;
        const dnn_attr at[] = {
            ATTR(CUDNN_ATTR_OPERATION_MATMUL_ADESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x),
            ATTR(CUDNN_ATTR_OPERATION_MATMUL_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b),
            ATTR(CUDNN_ATTR_OPERATION_MATMUL_CDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y),
            ATTR(CUDNN_ATTR_OPERATION_MATMUL_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &d),
        };
        return dnn_make(&p->g, CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, o->name, at, 4, 1);
    }
    case OP_POINTWISE: {
        const cudnnPointwiseMode_t mode = (cudnnPointwiseMode_t)o->mode;
        const cudnnDataType_t prec = mode == CUDNN_POINTWISE_CMP_GE ? CUDNN_DATA_BOOLEAN : CUDNN_DATA_FLOAT;
        const dnn_attr pw[] = {
            ATTR(CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode),
            ATTR(CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec),
            ATTR(CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &o->axis),
        };
        cudnnBackendDescriptor_t d = dnn_make(&p->g, CUDNN_BACKEND_POINTWISE_DESCRIPTOR, o->name, pw,
                                              mode == CUDNN_POINTWISE_GEN_INDEX ? 3 : 2, 1);
        if (!d) return NULL;
        dnn_attr at[7] = {
            ATTR(CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &d),
            ATTR(CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x),
            ATTR(CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y),
            ATTR(CUDNN_ATTR_OPERATION_POINTWISE_ALPHA1, CUDNN_TYPE_FLOAT, 1, &one),
            ATTR(CUDNN_ATTR_OPERATION_POINTWISE_ALPHA2, CUDNN_TYPE_FLOAT, 1, &one),
        };
        int nat = 5;
        if (b) at[nat++] = (dnn_attr)ATTR(CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b);
        if (t) at[nat++] = (dnn_attr)ATTR(CUDNN_ATTR_OPERATION_POINTWISE_TDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &t);
        return dnn_make(&p->g, CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, o->name, at, nat, 1);
    }
    case OP_REDUCTION: {
        const cudnnReduceTensorOp_t op = (cudnnReduceTensorOp_t)o->mode;
        const bool det = false;
        const dnn_attr rd[] = {
            ATTR(CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &f32),
            ATTR(CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &op),
            ATTR(CUDNN_ATTR_REDUCTION_IS_DETERMINISTIC, CUDNN_TYPE_BOOLEAN, 1, &det),
        };
        cudnnBackendDescriptor_t d = dnn_make(&p->g, CUDNN_BACKEND_REDUCTION_DESCRIPTOR, o->name, rd, 3, 1);
        if (!d) return NULL;
        const dnn_attr at[] = {
            ATTR(CUDNN_ATTR_OPERATION_REDUCTION_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &d),
            ATTR(CUDNN_ATTR_OPERATION_REDUCTION_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x),
            ATTR(CUDNN_ATTR_OPERATION_REDUCTION_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y),
        };
        return dnn_make(&p->g, CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR, o->name, at, 3, 1);
    }
    default: {
        const dnn_attr at[] = {
            ATTR(CUDNN_ATTR_OPERATION_RESHAPE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x),
            ATTR(CUDNN_ATTR_OPERATION_RESHAPE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y),
        };
        return dnn_make(&p->g, CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR, o->name, at, 2, 1);
    }
    }
}

/* Reads a plan's engine: its global index and whether cuDNN marks it nondeterministic. */
static void describe_engine(plan *p, cudnnBackendDescriptor_t cfg) {
    snprintf(p->engine, sizeof p->engine, "cudnn");
    cudnnBackendDescriptor_t eng = NULL;
    int64_t got = 0, index = -1;
    if (lib.fn.BackendCreateDescriptor(CUDNN_BACKEND_ENGINE_DESCRIPTOR, &eng) != CUDNN_STATUS_SUCCESS) return;
    if (lib.fn.BackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &got, &eng) ==
        CUDNN_STATUS_SUCCESS) {
        cudnnBackendNumericalNote_t notes[16];
        int64_t nn = 0;
        int nondet = 0;
        lib.fn.BackendGetAttribute(eng, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &got, &index);
        if (lib.fn.BackendGetAttribute(eng, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE, 16, &nn,
                                       notes) == CUDNN_STATUS_SUCCESS)
            for (int64_t i = 0; i < nn && i < 16; i++) nondet |= notes[i] == CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC;
        snprintf(p->engine, sizeof p->engine, "cudnn engine %lld%s", (long long)index, nondet ? ", nondeterministic" : "");
    }
    lib.fn.BackendDestroyDescriptor(eng);
}

/* Builds the graph of p->dir for shape s and plans it: heuristics in mode A, then the
 * fallback list, the first engine configuration that finalizes. 0, or -1 with p->why. */
static int build(cudnn_attn *a, plan *p, const hg_attention_shape *s) {
    p->g.why = p->why, p->g.n = sizeof p->why;
    cudnnBackendDescriptor_t made[BN] = {0}, ops[32];
    int nops = 0;
    const int causal = s->causal, grouped = s->NKV && s->NKV != s->NH;
    const int has = (causal ? W_CAUSAL : 0) | (grouped ? W_GQA : W_MHA) |
                    (p->dir == CUDNN_ATTN_BACKWARD_DETERMINISTIC ? W_DIRECT : W_ACC);
    for (int i = 0; i < graphs[p->dir].nops; i++) {
        const op_spec *o = &graphs[p->dir].ops[i];
        if ((o->when & W_CAUSAL && !causal) || (o->when & (W_MHA | W_GQA) && !(o->when & has)) ||
            (o->when & (W_ACC | W_DIRECT) && !(o->when & has)))
            continue;
        ops[nops] = op_of(p, s, made, o, causal ? NONE : graphs[p->dir].masked_in,
                          causal ? NONE : graphs[p->dir].masked_out);
        if (!ops[nops++]) return -1;
    }
    dnn_attr gat[2] = {ATTR(CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, nops, ops)};
    int ngat = 1;
    if (a->handle) gat[ngat++] = (dnn_attr)ATTR(CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &a->handle);
    const char *gname = graph_names[p->dir];
    cudnnBackendDescriptor_t graph = dnn_make(&p->g, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, gname, gat, ngat, 1);
    if (!graph) return -1;
    char first[600] = "";
    const cudnnBackendHeurMode_t modes[2] = {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK};
    for (int m = 0; m < 2; m++) {
        dnn_attr hat[3] = {
            ATTR(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &graph),
            ATTR(CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &modes[m]),
        };
        int nhat = 2;
        if (a->deviceprop)
            hat[nhat++] = (dnn_attr)ATTR(CUDNN_ATTR_ENGINEHEUR_DEVICEPROP, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &a->deviceprop);
        cudnnBackendDescriptor_t heur =
            dnn_make(&p->g, CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, m ? "heuristics (fallback)" : "heuristics (mode A)", hat,
                     nhat, 1);
        if (!heur) {
            if (!first[0]) snprintf(first, sizeof first, "%s", p->why);
            continue;
        }
        int64_t count = 0;
        cudnnStatus_t st = lib.fn.BackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                                      0, &count, NULL);
        if (st != CUDNN_STATUS_SUCCESS || count <= 0) {
            if (st != CUDNN_STATUS_SUCCESS) dnn_why(&p->g, gname, "heuristic results", st);
            else snprintf(p->why, sizeof p->why, "cuDNN: %s: no engine configuration", gname);
            if (!first[0]) snprintf(first, sizeof first, "%s", p->why);
            continue;
        }
        const int64_t offered = count;
        if (count > 8) count = 8;
        cudnnBackendDescriptor_t cfgs[8];
        int ncfg = 0;
        for (; ncfg < count; ncfg++) {
            cfgs[ncfg] = dnn_make(&p->g, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, "engine configuration", NULL, 0, 0);
            if (!cfgs[ncfg]) return -1;
        }
        st = lib.fn.BackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, ncfg, &count,
                                        cfgs);
        if (st != CUDNN_STATUS_SUCCESS) {
            dnn_why(&p->g, gname, "heuristic results", st);
            return -1;
        }
        if (count == 0 && !first[0]) /* cuDNN filters the configurations its support checks refuse */
            snprintf(first, sizeof first, "cuDNN: %s: none of the %lld engine configurations of the heuristics (%s) "
                     "passed cuDNN's support checks (CUDNN_LOGWARN_DBG=1 CUDNN_LOGDEST_DBG=stderr says why)", gname,
                     (long long)offered, m ? "fallback" : "mode A");
        for (int c = 0; c < count && c < ncfg; c++) {
            dnn_attr pat[2] = {ATTR(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfgs[c])};
            int npat = 1;
            if (a->deviceprop)
                pat[npat++] =
                    (dnn_attr)ATTR(CUDNN_ATTR_EXECUTION_PLAN_DEVICEPROP, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &a->deviceprop);
            p->exec = dnn_make(&p->g, CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, "execution plan", pat, npat, 1);
            if (!p->exec) {
                if (!first[0]) snprintf(first, sizeof first, "%s", p->why);
                continue;
            }
            int64_t ws = 0, got = 0;
            st = lib.fn.BackendGetAttribute(p->exec, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &got, &ws);
            if (st != CUDNN_STATUS_SUCCESS) {
                dnn_why(&p->g, "execution plan", "workspace size", st);
                return -1;
            }
            p->engine_ws = (size_t)ws;
            describe_engine(p, cfgs[c]);
            return 0;
        }
    }
    snprintf(p->why, sizeof p->why, "%s", first[0] ? first : "cuDNN: no engine configuration finalized");
    return -1;
}

static plan *find(cudnn_attn *a, int dir, const hg_attention_shape *s) {
    const int nkv = s->NKV ? s->NKV : s->NH;
    for (int i = 0; i < CACHE; i++) {
        plan *p = &a->cache[i];
        if (p->used && p->dir == dir && p->B == s->B && p->T == s->T && p->NH == s->NH && p->NKV == nkv &&
            p->hs == s->hs && p->causal == s->causal)
            return p;
    }
    return NULL;
}

int cudnn_attn_plan(cudnn_attn *a, int dir, const hg_attention_shape *s, size_t *workspace, const char **engine,
                    char *why, size_t n) {
    plan *p = find(a, dir, s);
    if (!p) {
        p = &a->cache[0]; /* the least recently used place */
        for (int i = 1; i < CACHE; i++)
            if (!a->cache[i].used || (p->used && a->cache[i].stamp < p->stamp)) p = &a->cache[i];
        plan_free(p);
        p->used = 1, p->dir = dir, p->B = s->B, p->T = s->T, p->NH = s->NH, p->NKV = s->NKV ? s->NKV : s->NH;
        p->hs = s->hs, p->causal = s->causal;
        p->scale = 1.0f / sqrtf((float)s->hs), p->one = 1.0f, p->masked = -FLT_MAX;
        const size_t v = lib.fn.GetVersion();
        if (s->hs % 8 || s->hs > 128)
            snprintf(p->why, sizeof p->why, "head size %d: cuDNN's fused attention takes multiples of 8 up to 128", s->hs);
        else if (v == 91000 || v == 91001) /* cudnn-frontend refuses these for fp16 and bf16 attention */
            snprintf(p->why, sizeof p->why, "cuDNN 9.10.0 and 9.10.1 have known faults in bf16 attention; use another "
                     "version (HANDGRAD_CUDNN=PATH)");
        else if (dir != CUDNN_ATTN_FORWARD && v < 91600 && s->T % 128)
            /* cudnn-frontend turns such a backward into a padded one on these versions */
            snprintf(p->why, sizeof p->why, "T=%d: cuDNN before 9.16 runs this backward only for T a multiple of 128",
                     s->T);
        else if (build(a, p, s) != 0)
            ;
        else {
            size_t rows = (size_t)s->B * s->NH * s->T;
            p->dqacc_bytes = dir == CUDNN_ATTN_BACKWARD ? rows * s->hs * sizeof(float) : 0;
            p->delta_off = 0;
            p->dqacc_off = dir != CUDNN_ATTN_FORWARD ? align256(rows * sizeof(float)) : 0;
            p->engine_off = p->dqacc_off + align256(p->dqacc_bytes);
            p->ws = 256 + p->engine_off + p->engine_ws;
            if (p->engine_ws > CUDNN_ATTN_ENGINE_RESERVE)
                snprintf(p->why, sizeof p->why, "cuDNN's %s asks %zu MiB of workspace for its engine, more than the %zu MiB "
                         "the memory plan keeps", graph_names[dir], p->engine_ws >> 20,
                         CUDNN_ATTN_ENGINE_RESERVE >> 20);
        }
        p->refused = p->why[0] != 0;
        if (p->refused) dnn_free(&p->g); /* keep the reason, not the descriptors */
    }
    p->stamp = ++a->clock;
    if (p->refused) {
        snprintf(why, n, "%s", p->why);
        return -1;
    }
    if (workspace) *workspace = p->ws;
    if (engine) *engine = p->engine;
    return 0;
}

/* Runs plan p with the data pointers of each role. */
static int run(cudnn_attn *a, plan *p, void *const ptr[R_NROLES], void *ws, char *why, size_t n) {
    if (!a->handle) {
        snprintf(why, n, "cuDNN: a device-less context cannot run graphs");
        return -1;
    }
    void *data[MAX_IO];
    for (int i = 0; i < p->nio; i++) data[i] = ptr[p->role[i]];
    char reason[600];
    dnn_graph g = {.why = reason, .n = sizeof reason};
    void *engine_ws = ws_base(ws) + p->engine_off;
    const dnn_attr at[] = {
        ATTR(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, p->nio, p->uid),
        ATTR(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, p->nio, data),
        ATTR(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &engine_ws),
    };
    cudnnBackendDescriptor_t pack = dnn_make(&g, CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, "variant pack", at, 3, 1);
    int rc = 0;
    if (!pack) {
        rc = -1;
    } else {
        cudnnStatus_t st = lib.fn.BackendExecute(a->handle, p->exec, pack);
        if (st != CUDNN_STATUS_SUCCESS) {
            dnn_why(&g, graph_names[p->dir], "execute", st);
            rc = -1;
        }
    }
    dnn_free(&g);
    if (rc) snprintf(why, n, "%s", reason);
    return rc;
}

static int planned(cudnn_attn *a, int dir, const hg_attention_shape *s, plan **out, char *why, size_t n) {
    if (cudnn_attn_plan(a, dir, s, NULL, NULL, why, n) != 0) return -1;
    *out = find(a, dir, s);
    return 0;
}

/* ptr[first .. first+2] = the q, k and v parts (or dq, dk, dv) of the packed rows at base. */
static void packed_parts(void *ptr[R_NROLES], dnn_role first, const void *base, const hg_attention_shape *s) {
    const size_t hs2 = (size_t)s->hs * 2, nkv = s->NKV ? s->NKV : s->NH;
    ptr[first] = (void *)base;
    ptr[first + 1] = (char *)base + s->NH * hs2;
    ptr[first + 2] = (char *)base + (s->NH + nkv) * hs2;
}

int cudnn_attn_forward(cudnn_attn *a, void *out, float *lse, const void *qkv, const hg_attention_shape *s, void *ws,
                       char *why, size_t n) {
    plan *p;
    if (planned(a, CUDNN_ATTN_FORWARD, s, &p, why, n) != 0) return -1;
    void *ptr[R_NROLES] = {0};
    packed_parts(ptr, R_Q, qkv, s);
    ptr[R_OUT] = out, ptr[R_LSE] = lse, ptr[R_SCALE] = &p->scale, ptr[R_MASKED] = &p->masked;
    return run(a, p, ptr, ws, why, n);
}

int cudnn_attn_backward(cudnn_attn *a, int dir, void *dqkv, const void *dout, const void *qkv, const void *out,
                        const float *lse, const hg_attention_shape *s, void *ws, char *why, size_t n) {
    plan *p;
    if (planned(a, dir, s, &p, why, n) != 0) return -1;
    void *ptr[R_NROLES] = {0};
    packed_parts(ptr, R_Q, qkv, s);
    packed_parts(ptr, R_DQ, dqkv, s);
    ptr[R_OUT] = (void *)out, ptr[R_DOUT] = (void *)dout, ptr[R_LSE] = (void *)lse;
    ptr[R_SCALE] = &p->scale, ptr[R_ONE] = &p->one, ptr[R_MASKED] = &p->masked;
    ptr[R_DELTA] = ws_base(ws) + p->delta_off, ptr[R_DQACC] = ws_base(ws) + p->dqacc_off;
    /* the dQ accumulator is added into */
    cudaError_t e = p->dqacc_bytes ? cudaMemsetAsync(ptr[R_DQACC], 0, p->dqacc_bytes, a->stream) : cudaSuccess;
    if (e != cudaSuccess) {
        snprintf(why, n, "cudaMemsetAsync (cuDNN's dQ accumulator): %s", cudaGetErrorString(e));
        return -1;
    }
    return run(a, p, ptr, ws, why, n);
}
