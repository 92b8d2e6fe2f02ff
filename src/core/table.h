/* Tables of tensor specs: the one place memory is laid out.
 *
 * A table lists named tensors with their shapes. Laying it out assigns each tensor an
 * aligned byte offset from one base pointer, so a whole table (all parameters, all
 * activations) sits in one allocation. The same table drives the parameter API, the
 * memory report and checkpoint I/O.
 *
 * A spec may hold `copies` of its tensor (one per layer for activations), and may
 * reserve more elements than it shows (`alloc` >= `numel`), as the token embedding
 * does for its padded vocabulary rows. */
#ifndef HG_CORE_TABLE_H
#define HG_CORE_TABLE_H

#include <stddef.h>
#include <stdint.h>

#include "handgrad.h"

#ifdef __cplusplus
extern "C" {
#endif

#define HG_ALIGN 64 /* bytes: a cache line, and an AVX-512 vector */

/* What a parameter is, for the code that treats kinds of parameters alike (init, AdamW,
 * the weight copy's element types, counts): set by the model when it builds its table. */
enum {
    HG_SPEC_DECAY = 1u << 0,    /* gets AdamW weight decay (the matrices) */
    HG_SPEC_NORM = 1u << 1,     /* a norm's weight or bias: in the residual type in the weight
                                   copy (backend.h); weights initialised to 1 */
    HG_SPEC_BIAS = 1u << 2,     /* initialised to 0 */
    HG_SPEC_RESIDUAL = 1u << 3, /* a projection into the residual stream: init scaled by 1/sqrt(2L) */
    HG_SPEC_SITE = 1u << 4,     /* a site op's: initialised by the op, its FLOPs not counted */
    HG_SPEC_LOOKUP = 1u << 5,   /* read by row lookup only (wpe; wte when untied): no FLOPs */
    HG_SPEC_POSITION = 1u << 6, /* the learned position embedding */
    /* activations (model/plan.h): what a pass reads that no op of it wrote (the tokens,
     * the rotary table, the KV cache), and what is read after the pass (the losses, the
     * KV cache) */
    HG_SPEC_INPUT = 1u << 7,
    HG_SPEC_OUTPUT = 1u << 8,
    HG_SPEC_KEPT = 1u << 9, /* set by the plan: a stored activation, not scratch */
    HG_SPEC_FROZEN = 1u << 10, /* a parameter no optimizer trains: laid out after the
                                  trainable ones, outside the gradient and AdamW buffers */
    HG_SPEC_LORA = 1u << 11,   /* a low-rank adapter's A or B (ops/lora.h) */
    HG_SPEC_ALIAS = 1u << 12,  /* takes no room in this table: the tensor is another
                                  table's (the model says whose), offset 0 */
};

typedef struct hg_tensor_spec {
    char name[64];
    int ndim;
    int64_t shape[HG_MAX_DIMS]; /* as users see it */
    int64_t numel;              /* product of shape */
    int64_t alloc;              /* elements reserved per copy (>= numel) */
    int64_t copies;             /* >= 1 */
    size_t elem_size;           /* bytes */
    size_t offset;              /* bytes from the table base; HG_ALIGN-aligned */
    unsigned flags;
    int layer;                  /* the block it belongs to, or -1 (model-wide); set by the model */
    int role;                   /* what it is to the model (model/gpt.h: gpt_role), or -1 */
} hg_tensor_spec;

typedef struct hg_table {
    hg_tensor_spec *specs;
    int count, cap;
    size_t bytes; /* total, after hg_table_layout */
} hg_table;

void hg_table_init(hg_table *t);
void hg_table_free(hg_table *t);
/* Appends a spec; shape has ndim entries. alloc 0 means numel. Returns its index,
 * or -1 when out of memory. */
int hg_table_add(hg_table *t, const char *name, int ndim, const int64_t *shape,
                 int64_t alloc, int64_t copies, size_t elem_size, unsigned flags);
/* Assigns offsets in order and sets t->bytes. */
void hg_table_layout(hg_table *t);
/* The same, but the specs flagged `last` after all the others (each group in order);
 * returns the bytes before the first of them. */
size_t hg_table_layout_last(hg_table *t, unsigned last);
int hg_table_find(const hg_table *t, const char *name);
/* Address of copy `copy` of spec `i` (copy is taken modulo the spec's copies). */
static inline void *hg_table_ptr(const hg_table *t, void *base, int i, int64_t copy) {
    const hg_tensor_spec *s = &t->specs[i];
    return (char *)base + s->offset + (size_t)(copy % s->copies) * (size_t)s->alloc * s->elem_size;
}

/* Aligned allocation for table bases and scratch (never used inside a step). */
void *hg_aligned_alloc(size_t bytes);
void hg_aligned_free(void *p);

#ifdef __cplusplus
}
#endif

#endif
