/* The step described once: what it runs, and what memory that takes.
 *
 * The step is the explicit code of gpt_step.c. Before a model is built, that code runs
 * once over fake addresses with every op recorded instead of run (the wrappers of
 * gpt_ops.h check m->trace): each op's kind, layer, backend entry and the activation-
 * table buffers (and copies) it reads and writes, in order, for every pass the model can
 * run (the training pass, the forward, the KV-cache forward). From that trace, and
 * nothing else:
 *   - which buffers exist: one no op touches has no bytes;
 *   - how many copies each needs: the fewest such that values alive at the same time
 *     never share one (so a value written in the forward and read in the backward keeps
 *     a copy per layer, and one made again in the backward by a recompute does not);
 *   - which are kept (read in a later pass than the one that wrote them, or read by the
 *     caller) and which are scratch: the memory plan's activations and scratch;
 *   - which backend entries the model needs, so a backend without one refuses it,
 *     naming the config field or option that brought the op in.
 * The step therefore cannot disagree with its memory plan or its refusals: a new op or
 * layout is a change to the step and the kernels alone. */
#ifndef HG_MODEL_PLAN_H
#define HG_MODEL_PLAN_H

#include "model/gpt.h"
#include "profile/profile.h"

/* One access: buffer (index in the activation table) and the copy addressed. */
typedef struct gpt_access {
    int buffer, copy;
} gpt_access;

/* Where in a pass an op ran: the regions of gpt_step.c. */
typedef enum gpt_phase_kind { TRACE_FORWARD, TRACE_CLASSIFIER, TRACE_BACKWARD } gpt_phase_kind;

typedef struct gpt_event {
    prof_kind kind;
    int layer, pass, recompute;
    gpt_phase_kind phase;
    size_t entry; /* offsetof(hg_backend_ops, the entry called); 0: a site op's own code */
    int nrd, nwr;
    gpt_access rd[PROF_MAX_RD], wr[PROF_MAX_WR];
    double flops; /* the op's cost at the traced shape */
} gpt_event;

/* The recording: events of the traced passes, in order. */
typedef struct gpt_trace {
    gpt_event *ev;
    int n, cap, pass;
    gpt_phase_kind phase;
    int failed; /* out of memory while recording */
} gpt_trace;

/* Records an op call of m (the wrappers' side; entry as gpt_event's). */
void gpt_trace_op(hg_model *m, size_t entry, const prof_op *op);
/* The region the traced step is in (gpt_step.c sets it where the profiler's regions begin). */
static inline void gpt_trace_phase(hg_model *m, gpt_phase_kind phase) {
    if (m->trace) m->trace->phase = phase;
}

/* What the trace says about each activation-table buffer. */
typedef struct gpt_plan {
    int64_t copies[GPT_ACTS]; /* copies to allocate; 0: no op touches it */
    unsigned char kept[GPT_ACTS]; /* 1: a value outlives the pass region that wrote it */
} gpt_plan;

/* Traces the passes a model of (cfg, opt) runs on a backend with table ops (the fused
 * entries it has decide which ops run), over the maximal activation table `acts` (every
 * buffer at full size with a copy per layer and one more), and derives *plan. Refuses,
 * HG_ERR_UNSUPPORTED naming the config field or option, a model whose step calls an
 * entry ops lacks. trace_out (may be NULL) receives the recording, to be freed with
 * gpt_trace_free. */
hg_status gpt_plan_derive(const hg_config *cfg, const hg_options *opt, const hg_backend_ops *ops, int threads,
                          const hg_table *params, const hg_table *weights, const hg_table *acts, int chunk,
                          const gpt_sites *sites, gpt_plan *plan, gpt_trace *trace_out);
void gpt_trace_free(gpt_trace *t);

#endif
