/* Op timing hooks: what the step records about each op call when a profiler is attached.
 *
 * Every op the step runs goes through an inline wrapper (model/gpt_ops.h) that reads the
 * clock before the call and, after it, hands prof_record the op's kind, layer, shape,
 * work (FLOPs, bytes) and the buffers it touched. With no profiler attached that costs
 * one branch; with HG_PROFILE 0 (CMake HANDGRAD_PROFILE=OFF) PROF_ON is constant 0 and
 * the hooks compile away. The public side (events, memory curve) is in handgrad.h. */
#ifndef HG_PROFILE_PROFILE_H
#define HG_PROFILE_PROFILE_H

#include "core/timer.h"
#include "model/gpt.h"
#include "ops/registry.h"

#ifndef HG_PROFILE
#define HG_PROFILE 1
#endif

/* Regions first, then OP_<ID> for each row of the op registry (ops/registry.h). */
typedef enum prof_kind {
    PROF_STEP, PROF_FORWARD, PROF_CLASSIFIER, PROF_BACKWARD, PROF_OPTIMIZER,
#define PROF_KIND_ID(id, name, pass, cls) OP_##id,
    HG_OP_REGISTRY(PROF_KIND_ID)
#undef PROF_KIND_ID
    PROF_KINDS
} prof_kind;

#define PROF_NO_LAYER (-2)
#define PROF_MAX_RD 10 /* a site op's backward: x, dy and its saved tensors */
#define PROF_MAX_WR 10 /* a site op's forward: y and its saved tensors */
#define PROF_MAX_TOUCH (PROF_MAX_RD + PROF_MAX_WR)

/* What an op wrapper knows about one call: its kind, shape, work, and the buffers it
 * reads and writes (an accumulated one is in both; NULL entries are skipped). The same
 * record describes the call to the step's trace (model/plan.h), which derives the
 * memory plan from the reads and writes. */
typedef struct prof_op {
    prof_kind kind;
    int layer;
    int param;                      /* OP_ADAMW: the parameter's table index */
    long long dims[4];              /* the shape; meaning per kind (profile.c: format_shape) */
    hg_op_cost cost;                /* from the op's cost function (ops/<op>.h) */
    const void *rd[PROF_MAX_RD];    /* buffers read */
    const void *wr[PROF_MAX_WR];    /* buffers written */
} prof_op;

/* The kind's name as the profiler's tables print it, e.g. "matmul c_fc forward". */
const char *prof_kind_name(prof_kind kind);
/* Records the op ending now that started at t0, for the model's attached profiler. */
void prof_record(const hg_model *m, const prof_op *op, double t0);
/* Records region `kind` from t0 to now. */
void prof_record_region(const hg_model *m, prof_kind kind, double t0);

#if HG_PROFILE
#define PROF_ON(m) ((m)->prof != NULL)
#else
#define PROF_ON(m) ((void)(m), 0)
#endif

/* The host clock once the model's queued work is done, so that on a backend that queues
 * (the GPU) an op's time is its kernels' and not its launch's. */
double prof_now(const hg_model *m);

static inline double prof_begin(const hg_model *m) { return PROF_ON(m) ? prof_now(m) : 0.0; }

/* PROF_OP(m, t0, .kind = ..., .layer = ..., ...): the fields of a prof_op. */
#define PROF_OP(m, t0, ...)                                             \
    do {                                                                \
        if (PROF_ON(m)) prof_record((m), &(prof_op){__VA_ARGS__}, (t0)); \
    } while (0)

static inline void prof_region(const hg_model *m, prof_kind kind, double t0) {
    if (PROF_ON(m)) prof_record_region(m, kind, t0);
}

#endif
