/* handgrad_ext.h - extending handgrad: your own kernels for built-in ops, a gradient
 * checker for any op, and an allocation and timing harness.
 *
 * Example: check a hand-written gradient, prove it allocates nothing, time it.
 *
 *     // E(x) = sum_i x_i^3: forward and backward on plain float arrays
 *     static hg_status fwd(void *ctx, const float *const *in, float *const *out) {
 *         const int64_t n = *(const int64_t *)ctx;
 *         double e = 0;
 *         for (int64_t i = 0; i < n; i++) e += in[0][i] * in[0][i] * in[0][i];
 *         out[0][0] = (float)e;
 *         return HG_OK;
 *     }
 *     static hg_status bwd(void *ctx, const float *const *in, const float *const *out,
 *                          const float *const *dout, float *const *din) {
 *         const int64_t n = *(const int64_t *)ctx;
 *         for (int64_t i = 0; i < n; i++) din[0][i] = 3 * in[0][i] * in[0][i] * dout[0][0];
 *         return HG_OK;
 *     }
 *     ...
 *     int64_t n = 100;
 *     hg_op_def op = {.name = "cube_sum", .n_in = 1, .n_out = 1, .in_name = {"x"},
 *                     .out_name = {"E"}, .in_size = {n}, .out_size = {1},
 *                     .forward = fwd, .backward = bwd, .ctx = &n};
 *     hg_gradcheck_report r;
 *     hg_gradcheck(&op, NULL, &r);          // r.ok; r.in[0].err, r.in[0].index
 *     hg_bench_result b;
 *     hg_bench_op(call_bwd, &args, 1000, &b); // b.median_s; b.allocs when counted
 *
 * The gradient convention is the library's own (src/ops/README.md): an activation's
 * gradient is written (din = ...), a parameter's accumulates (dw += ...).
 *
 * Overriding a built-in op. A model runs every op through a table of kernels (its
 * backend). hg_override_* replaces entries of one model's table with yours; they get
 * the same arguments the built-in gets, as its contract in src/ops/<op>.h documents
 * (shapes on every pointer, who writes what). Each override names the device it is
 * for: a model on another device keeps its built-in. Memory stays planned: your kernel
 * gets the buffers the built-in would have got and must not keep pointers to them.
 */
#ifndef HANDGRAD_EXT_H
#define HANDGRAD_EXT_H

#include "handgrad.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------- overriding built-ins */

/* The kernel table a model runs: the first argument of every kernel. */
typedef struct hg_backend hg_backend;
/* Host worker threads the kernels of this backend may use. */
int hg_backend_threads(const hg_backend *be);

/* GELU, tanh approximation (src/ops/gelu.h): out (n) = gelu(inp); dinp (n) =
 * gelu'(inp) * dout, where dinp may alias dout. Called on the MLP's c_fc output: in
 * forward, recomputed in backward (the MLP keeps only the pre-activation), and its
 * backward. The same types as the contract's. */
typedef void hg_gelu_forward_fn(hg_backend *be, float *out, const float *inp, size_t n);
typedef void hg_gelu_backward_fn(hg_backend *be, float *dinp, const float *inp, const float *dout, size_t n);
/* Replaces GELU's forward and/or backward (NULL keeps the built-in) for m when m runs on
 * device. A backend that fuses GELU into the MLP's matmuls runs them unfused from then
 * on, so that your kernels are the ones called. */
hg_status hg_override_gelu(hg_model *m, hg_device device, hg_gelu_forward_fn *forward, hg_gelu_backward_fn *backward);

/* The MLP activations other than GELU (src/ops/activation.h): kind SwiGLU, pre (N, 2F)
 * = gate | up, out (N, F) = silu(gate) * up; kind ReLU^2, pre (N, F), out = relu(pre)^2.
 * Backward: dpre (N, FI) from pre and dout (N, F). */
typedef void hg_activation_forward_fn(hg_backend *be, hg_mlp_kind kind, float *out, const float *pre, int N, int F);
typedef void hg_activation_backward_fn(hg_backend *be, hg_mlp_kind kind, float *dpre, const float *pre,
                                       const float *dout, int N, int F);
hg_status hg_override_activation(hg_model *m, hg_device device, hg_activation_forward_fn *forward,
                                 hg_activation_backward_fn *backward);

/* ---------------------------------------------------------- gradient checker */

#define HG_OP_MAX_TENSORS 8

/* An op as the checker sees it: inputs (activations and parameters) and outputs, each a
 * flat float array of a fixed size. */
typedef struct hg_op_def {
    const char *name;
    int n_in, n_out;                           /* at most HG_OP_MAX_TENSORS each */
    const char *in_name[HG_OP_MAX_TENSORS];    /* for the report; may be NULL */
    const char *out_name[HG_OP_MAX_TENSORS];
    int64_t in_size[HG_OP_MAX_TENSORS];        /* elements, >= 1 */
    int64_t out_size[HG_OP_MAX_TENSORS];
    unsigned params;                           /* bit i: input i is a parameter, whose
                                                  gradient accumulates (+=) */
    /* out[k] (out_size[k]) from in; must write every output element. */
    hg_status (*forward)(void *ctx, const float *const *in, float *const *out);
    /* din[i] (in_size[i]) = d(sum_k dout[k] . out[k]) / d in[i]: written for an
     * activation, added for a parameter. out holds the forward's outputs. */
    hg_status (*backward)(void *ctx, const float *const *in, const float *const *out, const float *const *dout,
                          float *const *din);
    /* Optional: the forward in double. With it, finite differences run in double and the
     * float forward is checked against it too. */
    hg_status (*forward_f64)(void *ctx, const double *const *in, double *const *out);
    void *ctx;
} hg_op_def;

typedef struct hg_gradcheck_options {
    uint64_t seed;                   /* inputs and upstream gradients (default 1) */
    float lo[HG_OP_MAX_TENSORS];     /* input i uniform in [lo[i], hi[i]]; both 0: [-1, 1] */
    float hi[HG_OP_MAX_TENSORS];
    int64_t max_points;              /* elements checked per input, spread evenly; 0: all */
    double tol;                      /* pass mark for relative errors; 0: 1e-4 with
                                        forward_f64, else 1e-2 */
} hg_gradcheck_options;

hg_gradcheck_options hg_gradcheck_options_default(void);

/* The worst element of one tensor: relative error |got - want| / max(|want|, floor),
 * floor = 1e-3 * the tensor's largest |want| (so that entries near zero are judged
 * against the tensor's scale). */
typedef struct hg_gradcheck_worst {
    double err;
    int64_t index; /* -1: nothing compared */
    double got, want;
} hg_gradcheck_worst;

typedef struct hg_gradcheck_report {
    int ok;                                       /* every check passed */
    hg_gradcheck_worst in[HG_OP_MAX_TENSORS];     /* backward against finite differences */
    hg_gradcheck_worst out[HG_OP_MAX_TENSORS];    /* forward against forward_f64 (with it) */
    int accumulates[HG_OP_MAX_TENSORS];           /* parameters: 1 when the gradient was
                                                     added to what the buffer held */
    int64_t unwritten_out[HG_OP_MAX_TENSORS];     /* an element forward left unwritten, or -1 */
    int64_t unwritten_in[HG_OP_MAX_TENSORS];      /* an activation gradient element backward
                                                     left unwritten, or -1 */
    double fd_noise;                              /* estimated relative error of the finite
                                                     differences themselves */
    char summary[512];                            /* the first failure, or "ok" */
} hg_gradcheck_report;

/* Runs op on random inputs (never zeros) with its outputs and activation gradients
 * poisoned (NaN) first, and compares its backward with central finite differences of
 * L = sum_k dout[k] . out[k] for random dout: in double when the op has forward_f64, else
 * in float, with the differences' own error estimated from two step sizes. Parameter
 * gradient buffers start from random values, and the backward's result is taken as the
 * change, so an op that overwrites instead of adding fails. opt may be NULL. Returns
 * HG_OK when the check ran (r->ok says whether the op passed), else the op's or the
 * definition's error. */
hg_status hg_gradcheck(const hg_op_def *op, const hg_gradcheck_options *opt, hg_gradcheck_report *r);

/* ----------------------------------------------- allocation and timing harness */

typedef struct hg_bench_result {
    int runs;                        /* timed runs */
    int64_t calls_per_run;           /* calls in each timed run (short calls are batched) */
    double min_s, median_s, max_s;   /* seconds per call */
    int counted;                     /* allocations were counted (the program links
                                        handgrad_alloc_count); else the counts are -1 */
    int64_t allocs, alloc_bytes;     /* over all timed calls, outside oneDNN */
    int64_t onednn_allocs;           /* over all timed calls, inside oneDNN's primitive
                                        execution (its C API allocates in every call) */
} hg_bench_result;

/* Calls fn(ctx) once to warm up, then times `runs` runs of it. A call shorter than
 * about 20 us is repeated within a run so the clock's resolution does not matter.
 * Allocations during the timed calls are counted when the program links the
 * handgrad_alloc_count object library, which interposes malloc and friends; oneDNN's
 * own, inside its primitive execution, are counted apart. fn's first failure is
 * returned. */
hg_status hg_bench_op(hg_status (*fn)(void *ctx), void *ctx, int runs, hg_bench_result *out);

#ifdef __cplusplus
}
#endif

#endif
