/* The step's trace and what is derived from it (plan.h): the buffers, their copies, which
 * are kept, and the backend entries a model needs. */
#include "model/plan.h"

#include <stdlib.h>
#include <string.h>

#include "core/error.h"

void gpt_trace_op(hg_model *m, size_t entry, const prof_op *op) {
    gpt_trace *t = m->trace;
    if (t->n == t->cap) {
        int cap = t->cap ? 2 * t->cap : 1024;
        gpt_event *ev = realloc(t->ev, sizeof *ev * (size_t)cap);
        if (!ev) {
            t->failed = 1;
            return;
        }
        t->ev = ev, t->cap = cap;
    }
    gpt_event *e = &t->ev[t->n++];
    *e = (gpt_event){.kind = op->kind, .layer = op->layer, .pass = t->pass, .recompute = m->recomputing,
                     .phase = t->phase, .entry = entry, .flops = op->cost.flops};
    for (int i = 0; i < PROF_MAX_RD; i++) e->nrd += gpt_act_locate(m, op->rd[i], &e->rd[e->nrd].buffer, &e->rd[e->nrd].copy);
    for (int i = 0; i < PROF_MAX_WR; i++) e->nwr += gpt_act_locate(m, op->wr[i], &e->wr[e->nwr].buffer, &e->wr[e->nwr].copy);
}

void gpt_trace_free(gpt_trace *t) {
    free(t->ev);
    memset(t, 0, sizeof *t);
}

/* ---- liveness ---- */

/* A value of one buffer: the copy it lives in and the events from its write (or the
 * pass's start, for an input of the pass) to its last read (or the pass's end, for an
 * output). kept: it outlives the forward region that wrote it, or the pass. */
typedef struct value {
    int copy, birth, death, kept;
    gpt_phase_kind born;
} value;

typedef struct values {
    value *v;
    int n, cap;
    int *open; /* per copy: the index of its current value, or -1 */
} values;

static int values_push(values *vs, value x) {
    if (vs->n == vs->cap) {
        int cap = vs->cap ? 2 * vs->cap : 64;
        value *v = realloc(vs->v, sizeof *v * (size_t)cap);
        if (!v) return 0;
        vs->v = v, vs->cap = cap;
    }
    vs->v[vs->n++] = x;
    return 1;
}

static int by_birth(const void *a, const void *b) {
    const value *x = a, *y = b;
    return (x->birth > y->birth) - (x->birth < y->birth);
}

/* The fewest copies P (copy c in slot c % P) such that no two values of different copies
 * alive at once share a slot; an op that reads one copy and writes another holds both.
 * slot_death, slot_copy: scratch of max_copies ints each. */
static int64_t fewest_copies(value *v, int n, int64_t max_copies, int *slot_death, int *slot_copy) {
    qsort(v, (size_t)n, sizeof *v, by_birth);
    for (int64_t P = 1; P < max_copies; P++) {
        for (int64_t s = 0; s < P; s++) slot_death[s] = -1, slot_copy[s] = -1;
        int ok = 1;
        for (int i = 0; i < n && ok; i++) {
            int64_t s = v[i].copy % P;
            /* the same copy may be written by the op that reads it last (in place) */
            if (slot_death[s] > v[i].birth || (slot_death[s] == v[i].birth && slot_copy[s] != v[i].copy)) ok = 0;
            if (v[i].death >= slot_death[s]) slot_death[s] = v[i].death, slot_copy[s] = v[i].copy;
        }
        if (ok) return P;
    }
    return max_copies;
}

static hg_status nomem(void) { return hg_fail(HG_ERR_NOMEM, "out of memory deriving the memory plan"); }

/* The values of each buffer over the events [e0, e1) of one pass. A read before any write
 * must be of a buffer the caller fills (HG_SPEC_INPUT): anything else is a step that
 * reads what it never wrote, or an op whose writes its wrapper does not declare. */
static hg_status pass_values(const gpt_event *ev, int e0, int e1, const hg_table *acts, values *vs) {
    for (int k = e0; k < e1; k++) {
        const gpt_event *e = &ev[k];
        for (int i = 0; i < e->nrd; i++) {
            const gpt_access *a = &e->rd[i];
            values *x = &vs[a->buffer];
            int *o = &x->open[a->copy];
            if (*o < 0) {
                if (!(acts->specs[a->buffer].flags & HG_SPEC_INPUT))
                    return hg_fail(HG_ERR_STATE, "the step's plan: %s (block %d) reads %s (copy %d) before any op writes "
                                   "it", prof_kind_name(e->kind), e->layer, acts->specs[a->buffer].name, a->copy);
                if (!values_push(x, (value){a->copy, e0, k, 1, TRACE_FORWARD})) return nomem();
                *o = x->n - 1;
            }
            value *v = &x->v[*o];
            v->death = k;
            if (v->born == TRACE_FORWARD && e->phase > TRACE_FORWARD) v->kept = 1;
        }
        for (int i = 0; i < e->nwr; i++) {
            const gpt_access *a = &e->wr[i];
            values *x = &vs[a->buffer];
            if (!values_push(x, (value){a->copy, k, k, 0, e->phase})) return nomem();
            x->open[a->copy] = x->n - 1;
        }
    }
    return HG_OK;
}

/* The plan from the events of every pass (pass p: events [bounds[p], bounds[p + 1])): the
 * values of each buffer over all passes, so that one number of copies serves them all,
 * and whether any value of it is kept. */
static hg_status derive(const gpt_event *ev, const int *bounds, int passes, const hg_table *acts, gpt_plan *plan) {
    const int nb = acts->count;
    int64_t maxc = 1;
    for (int b = 0; b < nb; b++)
        if (acts->specs[b].copies > maxc) maxc = acts->specs[b].copies;
    values *vs = calloc(nb > 0 ? (size_t)nb : 1, sizeof *vs);
    int *slots = malloc(sizeof(int) * 2 * (size_t)maxc);
    hg_status st = vs && slots ? HG_OK : nomem();
    for (int b = 0; b < nb && st == HG_OK; b++)
        if (!(vs[b].open = malloc(sizeof(int) * (size_t)acts->specs[b].copies))) st = nomem();
    for (int p = 0; p < passes && st == HG_OK; p++) {
        for (int b = 0; b < nb; b++) {
            values *x = &vs[b];
            for (int64_t c = 0; c < acts->specs[b].copies; c++) { /* an output lives to the pass's end */
                if (x->open[c] >= 0 && p > 0 && (acts->specs[b].flags & HG_SPEC_OUTPUT)) x->v[x->open[c]].death = bounds[p] - 1;
                x->open[c] = -1;
            }
        }
        st = pass_values(ev, bounds[p], bounds[p + 1], acts, vs);
    }
    for (int b = 0; b < nb && st == HG_OK; b++) {
        values *x = &vs[b];
        const int out = (acts->specs[b].flags & HG_SPEC_OUTPUT) != 0;
        for (int64_t c = 0; out && c < acts->specs[b].copies; c++)
            if (x->open[c] >= 0) x->v[x->open[c]].death = bounds[passes] - 1;
        int kept = out && x->n;
        for (int i = 0; i < x->n; i++) kept |= x->v[i].kept;
        plan->copies[b] = x->n ? fewest_copies(x->v, x->n, acts->specs[b].copies, slots, slots + maxc) : 0;
        plan->kept[b] = (unsigned char)kept;
    }
    for (int b = 0; vs && b < nb; b++) free(vs[b].v), free(vs[b].open);
    free(vs);
    free(slots);
    return st;
}

/* ---- what a model needs of its backend ---- */

/* The config field (or option) that brings in the ops of an entry, for a refusal; the
 * entries no switch brings in are needed by every model ("device"). */
#define FIELD(entry, field) {offsetof(hg_backend_ops, entry), #entry, field}
static const struct entry_field {
    size_t entry;
    const char *name, *field;
} entry_fields[] = {
    FIELD(encoder_forward, "device"), FIELD(encoder_backward, "device"),
    FIELD(layernorm_forward, "device"), FIELD(residual_layernorm_forward, "device"),
    FIELD(layernorm_backward, "device"), FIELD(matmul_forward, "device"), FIELD(matmul_backward, "device"),
    FIELD(attention_forward, "device"), FIELD(attention_backward, "device"),
    FIELD(classifier_forward, "device"), FIELD(classifier_backward, "device"),
    FIELD(attention_cached, "batch"), FIELD(qk_norm_forward, "qk_norm"), FIELD(qk_norm_backward, "qk_norm"),
    FIELD(rope_forward, "position"), FIELD(rope_backward, "position"),
    FIELD(activation_forward, "mlp"), FIELD(activation_backward, "mlp"),
    FIELD(gelu_forward, "mlp"), FIELD(gelu_backward, "mlp"),
    FIELD(matmul_gelu_forward, "mlp"), FIELD(matmul_gelu_backward, "mlp"),
    FIELD(dropout_backward, "dropout"), FIELD(residual_add, "block"),
    FIELD(lora_forward, "lora"), FIELD(lora_backward, "lora"),
};
#undef FIELD

static int has_entry(const hg_backend_ops *ops, size_t entry) {
    return *(void *const *)((const char *)ops + entry) != NULL;
}

/* The first entry the trace calls that ops lacks, refused naming its field. */
static hg_status check_entries(const gpt_trace *t, const hg_backend_ops *ops) {
    for (int k = 0; k < t->n; k++) {
        size_t entry = t->ev[k].entry;
        if (!entry || has_entry(ops, entry)) continue;
        const struct entry_field *f = NULL;
        for (size_t i = 0; i < sizeof entry_fields / sizeof entry_fields[0]; i++)
            if (entry_fields[i].entry == entry) f = &entry_fields[i];
        HG_ASSERT(f); /* every entry the step calls is listed above */
        return hg_fail(HG_ERR_UNSUPPORTED, "%s: the %s backend has no %s kernel, which this model needs", f->field,
                       ops->name, f->name);
    }
    return HG_OK;
}

/* ---- tracing the passes ---- */

/* Fake bases for the tables: the trace resolves addresses and never dereferences them.
 * Apart, so that a weight or gradient address never falls in the activations' range. */
#define FAKE_BASE(k) ((void *)((uintptr_t)1 << (48 + (k))))

hg_status gpt_plan_derive(const hg_config *cfg, const hg_options *opt, const hg_backend_ops *ops, int threads,
                          const hg_table *params, const hg_table *weights, const hg_table *acts, int chunk,
                          const gpt_sites *sites, gpt_plan *plan, gpt_trace *trace_out) {
    hg_backend probe = {.ops = ops, .threads = threads, .precision = opt->precision, .flags = opt->flags};
    hg_model *m = calloc(1, sizeof *m);
    gpt_trace t = {0};
    if (!m) return nomem();
    m->cfg = *cfg, m->opt = *opt, m->d = gpt_dims_of(cfg), m->threads = threads, m->chunk = chunk, m->be = &probe;
    m->params = *params, m->weights = *weights, m->acts = *acts, m->sites = *sites;
    m->pm = gpt_param_map_of(params);
    m->param = FAKE_BASE(0), m->grad = FAKE_BASE(1), m->weight = FAKE_BASE(2), m->act = FAKE_BASE(4);
    m->B = opt->batch, m->T = opt->seq_len, m->has_targets = 1, m->loss_scale_n = 1.0f;
    m->trace = &t;
    hg_status st = HG_OK;
    /* every pass the model can run: a training step, the forward (eval and inference),
     * generation through the KV cache */
    int bounds[4] = {0}, passes = 0;
    if (opt->training) {
        m->train_mode = 1;
        t.pass = passes;
        st = gpt_pass_train(m);
        bounds[++passes] = t.n;
        m->train_mode = 0;
    }
    if (st == HG_OK) {
        t.pass = passes;
        st = gpt_pass_forward(m, NULL);
        bounds[++passes] = t.n;
    }
    if (st == HG_OK && gpt_has_kv(opt)) {
        t.pass = passes;
        m->has_targets = 0;
        st = gpt_pass_kv(m, NULL);
        bounds[++passes] = t.n;
    }
    if (st == HG_OK && t.failed) st = nomem();
    if (st == HG_OK) st = check_entries(&t, ops);
    memset(plan, 0, sizeof *plan);
    if (st == HG_OK) st = derive(t.ev, bounds, passes, acts, plan);
    free(m);
    if (st == HG_OK && trace_out) *trace_out = t;
    else gpt_trace_free(&t);
    return st;
}
