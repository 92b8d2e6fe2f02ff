/* The profiler: a preallocated buffer of op and region events, filled by the hooks in
 * model/gpt_ops.h, read back through handgrad.h; and the live-activation curve derived
 * from the activation-table buffers each recorded op touched. */
#define _GNU_SOURCE /* syscall(SYS_gettid) */
#include "profile/profile.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "core/error.h"

/* How a kind is rated and its shape printed: the CLASS column of a registry row. */
typedef enum { CLASS_MEMORY, CLASS_GEMM, CLASS_ATTENTION } op_class;

static const struct kind_info {
    const char *name;
    hg_prof_pass pass;
    int region;
    op_class cls;
} kinds[PROF_KINDS] = {
    [PROF_STEP] = {"step", HG_PASS_STEP, 1, CLASS_MEMORY},
    [PROF_FORWARD] = {"forward", HG_PASS_FORWARD, 1, CLASS_MEMORY},
    [PROF_CLASSIFIER] = {"classifier", HG_PASS_FORWARD, 1, CLASS_MEMORY},
    [PROF_BACKWARD] = {"backward", HG_PASS_BACKWARD, 1, CLASS_MEMORY},
    [PROF_OPTIMIZER] = {"optimizer", HG_PASS_OPTIMIZER, 1, CLASS_MEMORY},
#define KIND_ROW(id, name, pass, cls) [OP_##id] = {name, HG_PASS_##pass, 0, CLASS_##cls},
    HG_OP_REGISTRY(KIND_ROW)
#undef KIND_ROW
};

const char *prof_kind_name(prof_kind kind) { return kinds[kind].name; }

/* An activation-table buffer (index into the table) and which of its copies. */
typedef struct prof_touch {
    int buffer, copy;
} prof_touch;

typedef struct prof_event {
    double t0, t1, flops, bytes;
    long long dims[4];
    int kind, step, layer, thread, param, ntouch, recompute;
    prof_touch touch[PROF_MAX_TOUCH];
} prof_event;

/* What the memory curve needs of the attached model's activation table. */
typedef struct prof_buffer {
    size_t copy_bytes;
    int64_t copies;
    int scratch;
} prof_buffer;

struct hg_profiler {
    prof_event *ev;
    int cap;
    atomic_llong count; /* events claimed; those past cap were dropped */
    double epoch;
    int step, steps; /* the step in progress (-1 none), steps begun */
    double step_t0;
    prof_buffer *buf;
    int nbuf;
    /* the site-op kinds' names for the attached model: "<op> forward", ... */
    char site_name[OP_SITE_FINAL_BWD - OP_SITE_ATTN_FWD + 1][HG_OP_NAME_MAX + 16];
    /* an op run again in backward by a recompute policy: "<name> (recompute)" */
    char recompute_name[PROF_KINDS][64];
};

static int is_site_kind(int kind) { return kind >= OP_SITE_ATTN_FWD && kind <= OP_SITE_FINAL_BWD; }

/* Names the site-op kinds after m's ops (the registry's names where a site has none). */
static void name_site_kinds(hg_profiler *p, const hg_model *m) {
    for (int k = OP_SITE_ATTN_FWD; k <= OP_SITE_FINAL_BWD; k++) {
        int i = k - OP_SITE_ATTN_FWD, s = i / 3;
        if (m->sites.on[s]) snprintf(p->site_name[i], sizeof p->site_name[i], "%s %s", m->sites.def[s].name,
                     gpt_site_pass_name((gpt_site_pass)(i % 3)));
        else snprintf(p->site_name[i], sizeof p->site_name[i], "%s", kinds[k].name);
    }
}

static int thread_id(void) {
    static _Thread_local int tid;
    if (!tid) tid = (int)syscall(SYS_gettid);
    return tid;
}

static prof_event *claim(hg_profiler *p) {
    long long i = atomic_fetch_add_explicit(&p->count, 1, memory_order_relaxed);
    return i < p->cap ? &p->ev[i] : NULL;
}

/* The buffer and copy of the activation table that ptr points into; 0 if none. */
static int resolve(const hg_model *m, const void *ptr, prof_touch *out) {
    return gpt_act_locate(m, ptr, &out->buffer, &out->copy);
}

double prof_now(const hg_model *m) {
    if (m->be->ops->wait) m->be->ops->wait(m->be);
    return hg_now();
}

void prof_record(const hg_model *m, const prof_op *op, double t0) {
    double t1 = prof_now(m);
    hg_profiler *p = m->prof;
    prof_event *e = claim(p);
    if (!e) return;
    *e = (prof_event){.t0 = t0 - p->epoch, .t1 = t1 - p->epoch, .flops = op->cost.flops, .bytes = op->cost.bytes,
                      .kind = op->kind, .step = p->step, .layer = op->layer, .thread = thread_id(),
                      .param = op->param, .recompute = m->recomputing};
    memcpy(e->dims, op->dims, sizeof e->dims);
    for (int i = 0; i < PROF_MAX_RD; i++) e->ntouch += resolve(m, op->rd[i], &e->touch[e->ntouch]);
    for (int i = 0; i < PROF_MAX_WR; i++) e->ntouch += resolve(m, op->wr[i], &e->touch[e->ntouch]);
}

static void record_region(hg_profiler *p, prof_kind kind, double t0, double t1) {
    prof_event *e = claim(p);
    if (e)
        *e = (prof_event){.t0 = t0 - p->epoch, .t1 = t1 - p->epoch, .kind = kind, .step = p->step,
                          .layer = PROF_NO_LAYER, .thread = thread_id()};
}

void prof_record_region(const hg_model *m, prof_kind kind, double t0) { record_region(m->prof, kind, t0, prof_now(m)); }

/* ---- the public API ---- */

hg_status hg_profiler_create(hg_profiler **out, int max_events) {
    if (!out) return hg_fail(HG_ERR_INVALID, "hg_profiler_create: NULL argument");
    *out = NULL;
    if (max_events < 1) return hg_fail(HG_ERR_INVALID, "max_events must be >= 1, got %d", max_events);
    hg_profiler *p = calloc(1, sizeof *p);
    if (p) p->ev = malloc(sizeof(prof_event) * (size_t)max_events);
    if (!p || !p->ev) {
        free(p);
        return hg_fail(HG_ERR_NOMEM, "out of memory for %d profiler events", max_events);
    }
    p->cap = max_events;
    for (int k = 0; k < PROF_KINDS; k++) snprintf(p->recompute_name[k], sizeof p->recompute_name[k], "%s (recompute)", kinds[k].name);
    hg_profiler_reset(p);
    *out = p;
    return HG_OK;
}

void hg_profiler_free(hg_profiler *p) {
    if (!p) return;
    free(p->ev);
    free(p->buf);
    free(p);
}

void hg_profiler_reset(hg_profiler *p) {
    if (!p) return;
    atomic_store(&p->count, 0);
    p->epoch = hg_now();
    p->step = -1;
    p->steps = 0;
}

hg_status hg_model_set_profiler(hg_model *m, hg_profiler *p) {
    if (!m) return hg_fail(HG_ERR_INVALID, "hg_model_set_profiler: NULL model");
    if (!HG_PROFILE && p)
        return hg_fail(HG_ERR_UNSUPPORTED, "this build has profiling compiled out (CMake HANDGRAD_PROFILE=OFF)");
    if (p) {
        prof_buffer *buf = calloc((size_t)m->acts.count, sizeof *buf);
        if (!buf) return hg_fail(HG_ERR_NOMEM, "out of memory attaching a profiler");
        for (int i = 0; i < m->acts.count; i++) {
            const hg_tensor_spec *s = &m->acts.specs[i];
            buf[i] = (prof_buffer){(size_t)s->alloc * s->elem_size, s->copies, !(s->flags & HG_SPEC_KEPT)};
        }
        free(p->buf);
        p->buf = buf;
        p->nbuf = m->acts.count;
        name_site_kinds(p, m);
    }
    m->prof = p;
    return HG_OK;
}

void hg_profiler_step_begin(hg_profiler *p) {
    if (!p) return;
    p->step = p->steps++;
    p->step_t0 = hg_now();
}

void hg_profiler_step_end(hg_profiler *p) {
    if (!p || p->step < 0) return;
    record_region(p, PROF_STEP, p->step_t0, hg_now());
    p->step = -1;
}

int hg_profiler_count(const hg_profiler *p) {
    if (!p) return 0;
    long long n = atomic_load(&p->count);
    return n < p->cap ? (int)n : p->cap;
}

int64_t hg_profiler_dropped(const hg_profiler *p) {
    long long n = p ? atomic_load(&p->count) : 0;
    return n > p->cap ? n - p->cap : 0;
}

static void format_shape(char *s, size_t cap, op_class k, const long long *d) {
    if (k == CLASS_GEMM) snprintf(s, cap, "%lldx%lld @ %lldx%lld", d[0], d[1], d[1], d[2]);
    else if (k == CLASS_ATTENTION) snprintf(s, cap, "B=%lld T=%lld NH=%lld hs=%lld", d[0], d[1], d[2], d[3]);
    else {
        size_t n = 0;
        s[0] = 0;
        for (int i = 0; i < 4 && d[i] && n < cap; i++) n += (size_t)snprintf(s + n, cap - n, "%s%lld", i ? "x" : "", d[i]);
    }
}

hg_status hg_profiler_event(const hg_profiler *p, int index, hg_prof_event *out) {
    if (!p || !out) return hg_fail(HG_ERR_INVALID, "hg_profiler_event: NULL argument");
    if (index < 0 || index >= hg_profiler_count(p))
        return hg_fail(HG_ERR_INVALID, "event index %d is out of range [0, %d)", index, hg_profiler_count(p));
    const prof_event *e = &p->ev[index];
    const struct kind_info *k = &kinds[e->kind];
    const char *name = is_site_kind(e->kind) ? p->site_name[e->kind - OP_SITE_ATTN_FWD]
                       : e->recompute        ? p->recompute_name[e->kind]
                                             : k->name;
    *out = (hg_prof_event){.name = name, .region = k->region, .pass = e->recompute ? HG_PASS_BACKWARD : k->pass,
                           .gemm = k->cls == CLASS_GEMM,
                           .flop_bound = k->cls != CLASS_MEMORY, .step = e->step, .layer = e->layer, .thread = e->thread,
                           .start = e->t0, .end = e->t1, .flops = e->flops, .bytes = e->bytes,
                           .param = e->kind == OP_ADAMW ? e->param : -1};
    if (!k->region) format_shape(out->shape, sizeof out->shape, k->cls, e->dims);
    return HG_OK;
}

/* ---- the live-activation curve ---- */

/* The forward and backward op events of one step in start order, and for each stored
 * activation copy the first and last of those ops that touched it. */
typedef struct liveness {
    int *ops, n;
    int *first, *last, slots, max_copies;
} liveness;

static void liveness_free(liveness *lv) {
    free(lv->ops);
    free(lv->first);
    free(lv->last);
}

static int by_start(const void *a, const void *b, void *ev) {
    const prof_event *e = ev;
    double x = e[*(const int *)a].t0, y = e[*(const int *)b].t0;
    return (x > y) - (x < y);
}

static hg_status liveness_build(const hg_profiler *p, int step, liveness *lv) {
    memset(lv, 0, sizeof *lv);
    if (!p->buf) return hg_fail(HG_ERR_STATE, "the profiler was never attached to a model");
    int count = hg_profiler_count(p);
    for (int i = 0; i < p->nbuf; i++)
        if (p->buf[i].copies > lv->max_copies) lv->max_copies = (int)p->buf[i].copies;
    lv->slots = p->nbuf * lv->max_copies;
    lv->ops = malloc(sizeof(int) * (size_t)(count + 1));
    lv->first = malloc(sizeof(int) * (size_t)lv->slots);
    lv->last = malloc(sizeof(int) * (size_t)lv->slots);
    if (!lv->ops || !lv->first || !lv->last) {
        liveness_free(lv);
        return hg_fail(HG_ERR_NOMEM, "out of memory for the memory curve");
    }
    for (int i = 0; i < count; i++) {
        const prof_event *e = &p->ev[i];
        hg_prof_pass pass = kinds[e->kind].pass;
        if (e->step == step && !kinds[e->kind].region && (pass == HG_PASS_FORWARD || pass == HG_PASS_BACKWARD))
            lv->ops[lv->n++] = i;
    }
    if (!lv->n) {
        liveness_free(lv);
        return hg_fail(HG_ERR_INVALID, "step %d has no recorded forward or backward ops", step);
    }
    qsort_r(lv->ops, (size_t)lv->n, sizeof(int), by_start, p->ev);
    for (int s = 0; s < lv->slots; s++) lv->first[s] = lv->last[s] = -1;
    for (int k = 0; k < lv->n; k++) {
        const prof_event *e = &p->ev[lv->ops[k]];
        for (int t = 0; t < e->ntouch; t++) {
            const prof_touch *tc = &e->touch[t];
            if (tc->buffer >= p->nbuf || p->buf[tc->buffer].scratch) continue;
            int s = tc->buffer * lv->max_copies + tc->copy;
            if (lv->first[s] < 0) lv->first[s] = k;
            lv->last[s] = k;
        }
    }
    return HG_OK;
}

hg_status hg_profiler_memory_curve(const hg_profiler *p, int step, hg_live_point *points, int cap, int *n) {
    if (!p || !n || (cap > 0 && !points)) return hg_fail(HG_ERR_INVALID, "hg_profiler_memory_curve: NULL argument");
    liveness lv;
    HG_TRY(liveness_build(p, step, &lv));
    /* a difference array: +bytes at an interval's first op, -bytes after its last */
    int64_t *delta = calloc((size_t)lv.n + 1, sizeof *delta);
    if (!delta) {
        liveness_free(&lv);
        return hg_fail(HG_ERR_NOMEM, "out of memory for the memory curve");
    }
    for (int s = 0; s < lv.slots; s++) {
        if (lv.first[s] < 0) continue;
        int64_t b = (int64_t)p->buf[s / lv.max_copies].copy_bytes;
        delta[lv.first[s]] += b;
        delta[lv.last[s] + 1] -= b;
    }
    int64_t live = 0;
    for (int k = 0; k < lv.n; k++) {
        live += delta[k];
        if (k < cap) points[k] = (hg_live_point){lv.ops[k], (size_t)live};
    }
    *n = lv.n;
    free(delta);
    liveness_free(&lv);
    return HG_OK;
}

hg_status hg_profiler_live_buffers(const hg_profiler *p, int step, int event, size_t *bytes, int nbuffers) {
    if (!p || !bytes) return hg_fail(HG_ERR_INVALID, "hg_profiler_live_buffers: NULL argument");
    liveness lv;
    HG_TRY(liveness_build(p, step, &lv));
    int at = -1;
    for (int k = 0; k < lv.n; k++)
        if (lv.ops[k] == event) at = k;
    hg_status st = HG_OK;
    if (at < 0) st = hg_fail(HG_ERR_INVALID, "event %d is not a forward or backward op of step %d", event, step);
    else if (nbuffers != p->nbuf)
        st = hg_fail(HG_ERR_INVALID, "nbuffers is %d but the attached model has %d buffers", nbuffers, p->nbuf);
    else {
        memset(bytes, 0, sizeof(size_t) * (size_t)nbuffers);
        for (int s = 0; s < lv.slots; s++)
            if (lv.first[s] >= 0 && lv.first[s] <= at && at <= lv.last[s])
                bytes[s / lv.max_copies] += p->buf[s / lv.max_copies].copy_bytes;
    }
    liveness_free(&lv);
    return st;
}
