/* What an op costs, and how its registry rows are written. Each op header lists, beside
 * its contract, the rows it adds to the op registry (ops/registry.h) and the functions
 * that give its work for a call's shape; the profiler's rates (FLOP/s, bytes/s) come
 * from them.
 *
 * A registry row is X(ID, "name", PASS, CLASS):
 *   ID     the kind's identifier (OP_<ID> in the profiler's enum);
 *   name   as the profiler, traces and tables print it;
 *   PASS   FORWARD, BACKWARD or OPTIMIZER (hg_prof_pass without its prefix);
 *   CLASS  GEMM (rated in FLOP/s, shape M x K @ K x N), ATTENTION (FLOP/s, shape
 *          B T NH hs) or MEMORY (bytes/s, shape printed as its dims).
 * One op may have several rows: a pass each, or a site each (the linear layers). */
#ifndef HG_OPS_COST_H
#define HG_OPS_COST_H

/* Work of one call: FLOPs executed (recomputation included) and bytes moved, each tensor
 * read or written counted once at 4 bytes an element (a bf16 model, on the CPU or CUDA,
 * moves about half of the activation bytes, so its memory-bound rates read high by up
 * to 2x). */
typedef struct hg_op_cost {
    double flops, bytes;
} hg_op_cost;

#define HG_COST_F4 4.0 /* bytes per counted element */

/* Cost of a pass over n elements: f FLOPs and `tensors` element-sized accesses each. */
static inline hg_op_cost hg_elementwise_cost(double n, double f, double tensors) {
    hg_op_cost c = {f * n, HG_COST_F4 * tensors * n};
    return c;
}

#endif
