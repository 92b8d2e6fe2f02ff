/* cuDNN's fused flash attention, reached through cuDNN's backend (graph) API from C.
 *
 * libcudnn is loaded at run time (dlopen), so the CUDA module loads and runs where cuDNN
 * is missing, and then uses its own attention kernels (attention.cu). The search, first
 * hit wins: HANDGRAD_CUDNN=PATH (that file only); libcudnn.so.9 by the loader's rules
 * (LD_LIBRARY_PATH, the ld.so cache); the CUDA toolkit's lib64 and lib; PyTorch's wheel
 * (site-packages/nvidia/cudnn/lib) next to each python3 on PATH, under $VIRTUAL_ENV and
 * in the system's dist-packages. cuDNN's own parts beside the file found
 * (libcudnn_graph.so.9, the engine libraries) are loaded from that folder first, so the
 * folder need not be on LD_LIBRARY_PATH. cuDNN 9 is required; the version is named in
 * the reason when it is older.
 *
 * The graphs are the composite ones cudnn-frontend builds for its SDPA node (matmul,
 * pointwise, reduction, generated-index and compare nodes; the causal mask by a select),
 * written as two tables (cudnn_attention.c): the forward (O and the softmax statistics,
 * log-sum-exp in natural log, which is handgrad's lse) and the backward (dQ, dK, dV from
 * Q, K, V, O, dO and the statistics). Q, K and V are read in place from the packed QKV
 * rows (B, T, NH + 2 NKV, hs) and dQ, dK, dV written in place into dqkv, so a forward or
 * a backward can run on either implementation.
 *
 * Each (shape, direction) is built and planned once and cached. A plan needs workspace:
 * its engine's, plus, in the backward, the fp32 dQ accumulator and the row sums of
 * dO * O; the caller passes it from the memory plan (cudnn_attn_reserve_bytes).
 *
 * Every failure is a reason string naming the graph node and cuDNN's own error text;
 * nothing is printed. The backward is not expected to be bit-reproducible (dQ is added
 * into its fp32 accumulator from many blocks); HG_FLAG_DETERMINISTIC keeps the caller on
 * its own kernels. */
#ifndef HG_CUDNN_ATTENTION_H
#define HG_CUDNN_ATTENTION_H

#include <stddef.h>

#include "handgrad_ext.h" /* hg_attention_shape */

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cudnn_attn cudnn_attn;

/* The graphs: the forward, the backward, and the backward that writes dQ by a plain
 * product instead of adding it into an fp32 accumulator from many blocks (cudnn-frontend's
 * deterministic mode; an experiment, HANDGRAD_CUDNN_DETERMINISTIC=1 in attention.cu). */
enum { CUDNN_ATTN_FORWARD = 0, CUDNN_ATTN_BACKWARD = 1, CUDNN_ATTN_BACKWARD_DETERMINISTIC = 2 };

/* Loads libcudnn and creates a handle bound to `stream` (a cudaStream_t). With stream
 * NULL and a device description (cuDNN's JSON of a CUDNN_BACKEND_DEVICEPROP_DESCRIPTOR),
 * opens a device-less context instead: graphs are built, checked and planned for that
 * device without a GPU, but not run (tests). NULL on failure, with the reason in why. */
cudnn_attn *cudnn_attn_open(void *stream, const char *deviceprop_json, char *why, size_t n);
void cudnn_attn_close(cudnn_attn *a);
/* "cuDNN 9.19.0 (PATH)" */
const char *cudnn_attn_library(const cudnn_attn *a);

/* Builds, or finds in the cache, the graph and execution plan of one direction for shape
 * s (bf16; any head count and grouping; head sizes up to 128 that are multiples of 8).
 * 0 with *workspace set, or -1 with the reason in why (the caller runs its own kernels).
 * *engine (may be NULL) gets a short description of the engine chosen. */
int cudnn_attn_plan(cudnn_attn *a, int dir, const hg_attention_shape *s, size_t *workspace, const char **engine,
                    char *why, size_t n);

/* Runs a planned direction on the stream (the backward: dir one of the two backward
 * graphs). Device pointers; bf16 except lse (float).
 * ws: at least the plan's workspace bytes (any alignment). 0, or -1 with the reason. */
int cudnn_attn_forward(cudnn_attn *a, void *out, float *lse, const void *qkv, const hg_attention_shape *s, void *ws,
                       char *why, size_t n);
int cudnn_attn_backward(cudnn_attn *a, int dir, void *dqkv, const void *dout, const void *qkv, const void *out,
                        const float *lse, const hg_attention_shape *s, void *ws, char *why, size_t n);

/* Workspace the memory plan keeps for shape s so that the backward's plan fits: the fp32
 * dQ accumulator and row sums, plus CUDNN_ATTN_ENGINE_RESERVE for the engine. A plan
 * that asks more is refused with that reason. */
#define CUDNN_ATTN_ENGINE_RESERVE ((size_t)32 << 20)
size_t cudnn_attn_reserve_bytes(const hg_attention_shape *s);

#ifdef __cplusplus
}
#endif

#endif
