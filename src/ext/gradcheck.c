/* hg_gradcheck (handgrad_ext.h): an op's backward against central finite differences
 * of L = sum_k dout[k] . out[k], in double when the op has a double forward. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "handgrad_ext.h"
#include "model/gpt.h"

hg_gradcheck_options hg_gradcheck_options_default(void) {
    hg_gradcheck_options o = {.seed = 1};
    return o;
}

/* All buffers of one check, in one allocation each. */
typedef struct gc_bufs {
    float *in[HG_OP_MAX_TENSORS], *out[HG_OP_MAX_TENSORS], *dout[HG_OP_MAX_TENSORS];
    float *din[HG_OP_MAX_TENSORS], *din0[HG_OP_MAX_TENSORS], *start[HG_OP_MAX_TENSORS];
    double *in64[HG_OP_MAX_TENSORS], *out64[HG_OP_MAX_TENSORS];
} gc_bufs;

static uint64_t gc_next(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return *s >> 11;
}
/* Uniform in [lo, hi], never exactly zero. */
static float gc_uniform(uint64_t *s, float lo, float hi) {
    for (;;) {
        float u = lo + (hi - lo) * (float)((double)gc_next(s) / 9007199254740992.0);
        if (u != 0.0f) return u;
    }
}

static hg_status gc_check_def(const hg_op_def *op) {
    if (!op || !op->forward || !op->backward)
        return hg_fail(HG_ERR_INVALID, "hg_gradcheck: the op needs forward and backward");
    const char *name = op->name ? op->name : "op";
    if (op->n_in < 1 || op->n_in > HG_OP_MAX_TENSORS)
        return hg_fail(HG_ERR_INVALID, "%s: n_in %d must be in [1, %d]", name, op->n_in, HG_OP_MAX_TENSORS);
    if (op->n_out < 1 || op->n_out > HG_OP_MAX_TENSORS)
        return hg_fail(HG_ERR_INVALID, "%s: n_out %d must be in [1, %d]", name, op->n_out, HG_OP_MAX_TENSORS);
    for (int i = 0; i < op->n_in; i++)
        if (op->in_size[i] < 1) return hg_fail(HG_ERR_INVALID, "%s: in_size[%d] is %lld; must be >= 1", name, i, (long long)op->in_size[i]);
    for (int k = 0; k < op->n_out; k++)
        if (op->out_size[k] < 1) return hg_fail(HG_ERR_INVALID, "%s: out_size[%d] is %lld; must be >= 1", name, k, (long long)op->out_size[k]);
    if (op->params >> op->n_in) return hg_fail(HG_ERR_INVALID, "%s: params marks an input past n_in", name);
    return HG_OK;
}

static void gc_free(gc_bufs *b) {
    for (int i = 0; i < HG_OP_MAX_TENSORS; i++) {
        free(b->in[i]), free(b->out[i]), free(b->dout[i]), free(b->din[i]), free(b->din0[i]), free(b->start[i]);
        free(b->in64[i]), free(b->out64[i]);
    }
}

static hg_status gc_alloc(const hg_op_def *op, gc_bufs *b) {
    int ok = 1;
    for (int i = 0; i < op->n_in; i++) {
        size_t n = (size_t)op->in_size[i];
        b->in[i] = malloc(n * sizeof(float)), b->din[i] = malloc(n * sizeof(float));
        b->din0[i] = malloc(n * sizeof(float)), b->start[i] = malloc(n * sizeof(float));
        b->in64[i] = malloc(n * sizeof(double));
        ok = ok && b->in[i] && b->din[i] && b->din0[i] && b->start[i] && b->in64[i];
    }
    for (int k = 0; k < op->n_out; k++) {
        size_t n = (size_t)op->out_size[k];
        b->out[k] = malloc(n * sizeof(float)), b->dout[k] = malloc(n * sizeof(float));
        b->out64[k] = malloc(n * sizeof(double));
        ok = ok && b->out[k] && b->dout[k] && b->out64[k];
    }
    return ok ? HG_OK : hg_fail(HG_ERR_NOMEM, "hg_gradcheck: out of memory");
}

/* L = sum_k dout[k] . out[k] at the current inputs: in double through forward_f64, else
 * through the float forward (summed in double). */
static hg_status gc_loss(const hg_op_def *op, gc_bufs *b, int f64, double *L) {
    double s = 0;
    if (f64) {
        HG_TRY(op->forward_f64(op->ctx, (const double *const *)b->in64, b->out64));
        for (int k = 0; k < op->n_out; k++)
            for (int64_t j = 0; j < op->out_size[k]; j++) s += (double)b->dout[k][j] * b->out64[k][j];
    } else {
        HG_TRY(op->forward(op->ctx, (const float *const *)b->in, b->out));
        for (int k = 0; k < op->n_out; k++)
            for (int64_t j = 0; j < op->out_size[k]; j++) s += (double)b->dout[k][j] * b->out[k][j];
    }
    *L = s;
    return HG_OK;
}

/* The central difference of L in element j of input i with step h. */
static hg_status gc_diff(const hg_op_def *op, gc_bufs *b, int f64, int i, int64_t j, double h, double *d) {
    double lp = 0, lm = 0;
    const float x = b->in[i][j];
    const double x64 = b->in64[i][j];
    if (f64) b->in64[i][j] = x64 + h;
    else b->in[i][j] = (float)(x + h);
    hg_status s = gc_loss(op, b, f64, &lp);
    if (f64) b->in64[i][j] = x64 - h;
    else b->in[i][j] = (float)(x - h);
    if (s == HG_OK) s = gc_loss(op, b, f64, &lm);
    b->in[i][j] = x;
    b->in64[i][j] = x64;
    /* the step actually taken in float is what the rounding of x +- h left */
    double span = f64 ? 2 * h : (double)(float)(x + h) - (double)(float)(x - h);
    *d = (lp - lm) / span;
    return s;
}

static void gc_worst(hg_gradcheck_worst *w, double got, double want, double floor, int64_t index) {
    double den = fabs(want) > floor ? fabs(want) : floor;
    double err = den > 0 ? fabs(got - want) / den : fabs(got - want);
    if (isnan(got) || isnan(want)) err = INFINITY;
    if (w->index < 0 || err > w->err) *w = (hg_gradcheck_worst){err, index, got, want};
}

static const char *gc_name(const char *const *names, int i, char *buf, size_t cap, const char *kind) {
    if (names[i]) return names[i];
    snprintf(buf, cap, "%s %d", kind, i);
    return buf;
}

static hg_status gc_run(const hg_op_def *op, const hg_gradcheck_options *o, gc_bufs *b, hg_gradcheck_report *r) {
    const int f64 = op->forward_f64 != NULL;
    const double tol = o->tol > 0 ? o->tol : f64 ? 1e-4 : 1e-2;
    const char *name = op->name ? op->name : "op";
    char nb[32];
    uint64_t seed = o->seed ? o->seed : 1;
    for (int i = 0; i < op->n_in; i++) {
        float lo = o->lo[i], hi = o->hi[i];
        if (lo == 0 && hi == 0) lo = -1, hi = 1;
        for (int64_t j = 0; j < op->in_size[i]; j++) {
            b->in[i][j] = gc_uniform(&seed, lo, hi);
            b->in64[i][j] = b->in[i][j];
            b->start[i][j] = op->params >> i & 1 ? gc_uniform(&seed, -1, 1) : NAN;
        }
    }
    for (int k = 0; k < op->n_out; k++)
        for (int64_t j = 0; j < op->out_size[k]; j++) b->dout[k][j] = gc_uniform(&seed, -1, 1);

    /* forward with poisoned outputs: every element written, and against the double one */
    for (int k = 0; k < op->n_out; k++)
        for (int64_t j = 0; j < op->out_size[k]; j++) b->out[k][j] = NAN;
    HG_TRY(op->forward(op->ctx, (const float *const *)b->in, b->out));
    for (int k = 0; k < op->n_out; k++)
        for (int64_t j = 0; j < op->out_size[k] && r->unwritten_out[k] < 0; j++)
            if (isnan(b->out[k][j])) r->unwritten_out[k] = j;
    if (f64) {
        HG_TRY(op->forward_f64(op->ctx, (const double *const *)b->in64, b->out64));
        for (int k = 0; k < op->n_out; k++) {
            double big = 0;
            for (int64_t j = 0; j < op->out_size[k]; j++) big = fmax(big, fabs(b->out64[k][j]));
            for (int64_t j = 0; j < op->out_size[k]; j++) gc_worst(&r->out[k], b->out[k][j], b->out64[k][j], 1e-3 * big, j);
        }
    }

    /* backward twice: from poison / zero (din0), and from the random start values (din),
     * whose difference from start must be din0 for a parameter */
    for (int pass = 0; pass < 2; pass++) {
        float **d = pass ? b->din : b->din0;
        for (int i = 0; i < op->n_in; i++)
            for (int64_t j = 0; j < op->in_size[i]; j++) d[i][j] = op->params >> i & 1 ? (pass ? b->start[i][j] : 0.0f) : NAN;
        HG_TRY(op->backward(op->ctx, (const float *const *)b->in, (const float *const *)b->out,
                            (const float *const *)b->dout, d));
    }
    for (int i = 0; i < op->n_in; i++) {
        const int param = op->params >> i & 1;
        r->accumulates[i] = param;
        for (int64_t j = 0; j < op->in_size[i]; j++) {
            if (!param && isnan(b->din0[i][j]) && r->unwritten_in[i] < 0) r->unwritten_in[i] = j;
            if (param) {
                double added = (double)b->din[i][j] - b->start[i][j], alone = b->din0[i][j];
                if (!(fabs(added - alone) <= 1e-5 * (fabs(alone) + fabs(b->start[i][j])) + 1e-30)) r->accumulates[i] = 0;
                b->din[i][j] = (float)added; /* the gradient, as the check sees it */
            }
        }
    }

    /* finite differences at up to max_points elements of each input */
    double noise = 0;
    for (int i = 0; i < op->n_in; i++) {
        const int64_t n = op->in_size[i], pts = o->max_points > 0 && o->max_points < n ? o->max_points : n;
        double *fd = malloc((size_t)pts * sizeof *fd);
        int64_t *at = malloc((size_t)pts * sizeof *at);
        if (!fd || !at) {
            free(fd), free(at);
            return hg_fail(HG_ERR_NOMEM, "hg_gradcheck: out of memory");
        }
        double big = 0;
        hg_status s = HG_OK;
        for (int64_t p = 0; p < pts && s == HG_OK; p++) {
            at[p] = pts == n ? p : p * (n - 1) / (pts > 1 ? pts - 1 : 1);
            const double x = fabs((double)b->in[i][at[p]]), scale = x > 1 ? x : 1;
            if (f64) {
                s = gc_diff(op, b, 1, i, at[p], 1e-5 * scale, &fd[p]);
            } else { /* two steps: their disagreement estimates the differences' error */
                double half = 0;
                s = gc_diff(op, b, 0, i, at[p], 1e-2 * scale, &fd[p]);
                if (s == HG_OK) s = gc_diff(op, b, 0, i, at[p], 5e-3 * scale, &half);
                if (s == HG_OK) noise = fmax(noise, fabs(fd[p] - half) / fmax(fabs(half), 1e-30));
                fd[p] = half;
            }
            big = fmax(big, fabs(fd[p]));
        }
        for (int64_t p = 0; p < pts && s == HG_OK; p++) gc_worst(&r->in[i], b->din[i][at[p]], fd[p], 1e-3 * big, at[p]);
        free(fd), free(at);
        HG_TRY(s);
    }
    r->fd_noise = f64 ? 0 : noise;

    /* the verdict: the first failure, by name */
    r->ok = 1;
    snprintf(r->summary, sizeof r->summary, "ok");
#define GC_FAIL(...)                                                       \
    do {                                                                   \
        if (r->ok) snprintf(r->summary, sizeof r->summary, __VA_ARGS__);   \
        r->ok = 0;                                                         \
    } while (0)
    for (int k = 0; k < op->n_out; k++) {
        const char *on = gc_name(op->out_name, k, nb, sizeof nb, "output");
        if (r->unwritten_out[k] >= 0) GC_FAIL("%s: forward left %s[%lld] unwritten", name, on, (long long)r->unwritten_out[k]);
        if (f64 && r->out[k].err > tol)
            GC_FAIL("%s: forward %s[%lld] = %.9g, double reference %.9g (relative error %.2e > %.1e)", name, on,
                    (long long)r->out[k].index, r->out[k].got, r->out[k].want, r->out[k].err, tol);
    }
    for (int i = 0; i < op->n_in; i++) {
        const char *in = gc_name(op->in_name, i, nb, sizeof nb, "input");
        if (r->unwritten_in[i] >= 0) GC_FAIL("%s: backward left d%s[%lld] unwritten", name, in, (long long)r->unwritten_in[i]);
        if (op->params >> i & 1 && !r->accumulates[i])
            GC_FAIL("%s: backward overwrote d%s instead of adding to it (parameter gradients accumulate)", name, in);
        if (r->in[i].err > tol)
            GC_FAIL("%s: d%s[%lld] = %.9g, finite differences %.9g (relative error %.2e > %.1e)", name, in,
                    (long long)r->in[i].index, r->in[i].got, r->in[i].want, r->in[i].err, tol);
    }
#undef GC_FAIL
    return HG_OK;
}

hg_status hg_gradcheck(const hg_op_def *op, const hg_gradcheck_options *opt, hg_gradcheck_report *r) {
    if (!r) return hg_fail(HG_ERR_INVALID, "hg_gradcheck: report is NULL");
    memset(r, 0, sizeof *r);
    for (int i = 0; i < HG_OP_MAX_TENSORS; i++) {
        r->in[i].index = r->out[i].index = -1;
        r->unwritten_in[i] = r->unwritten_out[i] = -1;
    }
    snprintf(r->summary, sizeof r->summary, "not run");
    HG_TRY(gc_check_def(op));
    const hg_gradcheck_options plain = hg_gradcheck_options_default();
    gc_bufs b = {0};
    hg_status s = gc_alloc(op, &b);
    if (s == HG_OK) s = gc_run(op, opt ? opt : &plain, &b, r);
    gc_free(&b);
    if (s != HG_OK && s != HG_ERR_NOMEM) { /* the op's own error, with its name */
        char why[768];
        snprintf(why, sizeof why, "%s", hg_last_error());
        return hg_fail(s, "%s: %s", op->name ? op->name : "op", why);
    }
    return s;
}

/* ---- a site op through hg_gradcheck: inputs x and the parameters, output y ---- */

typedef struct site_check {
    gpt_site_def d;
    hg_site_shape s;
    hg_site_sizes z;
    float *saved[HG_OP_MAX_TENSORS];
    void *scratch;
} site_check;

static hg_site_call site_call(site_check *c, const float *const *in) {
    hg_site_call a = {.layer = c->d.op.site == HG_SITE_FINAL_NORM ? -1 : 0, .B = 1, .T = c->s.N, .N = c->s.N,
                      .in_width = c->s.in_width, .out_width = c->s.out_width, .x = in[0], .w = in + 1,
                      .saved = c->saved, .scratch = c->scratch};
    return a;
}

static hg_status site_forward(void *ctx, const float *const *in, float *const *out) {
    site_check *c = ctx;
    hg_site_call a = site_call(c, in);
    a.y = out[0];
    return c->d.op.forward(c->d.op.ctx, &a);
}

/* The checker runs backward after a forward at the same inputs: saved holds its tensors. */
static hg_status site_backward(void *ctx, const float *const *in, const float *const *out, const float *const *dout,
                               float *const *din) {
    (void)out;
    site_check *c = ctx;
    hg_site_call a = site_call(c, in);
    a.dy = dout[0], a.dx = din[0], a.dw = din + 1;
    return c->d.op.backward(c->d.op.ctx, &a);
}

hg_status hg_gradcheck_site(const hg_site_op *op, const hg_site_shape *s, const hg_gradcheck_options *opt,
                            hg_gradcheck_report *r) {
    if (!s || !r) return hg_fail(HG_ERR_INVALID, "hg_gradcheck_site: NULL argument");
    if (s->N < 1 || s->C < 1 || s->in_width < 1 || s->out_width < 1 || s->threads < 0)
        return hg_fail(HG_ERR_INVALID, "hg_gradcheck_site: the shape needs N, C, in_width, out_width >= 1");
    site_check c = {.s = *s};
    HG_TRY(gpt_site_def_from(op, &c.d));
    HG_TRY(gpt_site_sizes(&c.d, s, &c.z));
    const int np = c.d.op.n_params;
    if (np + 1 > HG_OP_MAX_TENSORS)
        return hg_fail(HG_ERR_INVALID, "hg_gradcheck_site: op '%s' has %d parameters; the checker takes x and at most %d",
                       c.d.name, np, HG_OP_MAX_TENSORS - 1);
    hg_op_def def = {.name = c.d.name, .n_in = 1 + np, .n_out = 1, .in_name = {"x"}, .out_name = {"y"},
                     .in_size = {(int64_t)s->N * s->in_width}, .out_size = {(int64_t)s->N * s->out_width},
                     .params = ((1u << np) - 1) << 1, .forward = site_forward, .backward = site_backward, .ctx = &c};
    for (int i = 0; i < np; i++) {
        def.in_name[1 + i] = c.d.param_name[i];
        def.in_size[1 + i] = c.z.param[i][0] * (c.z.param[i][1] ? c.z.param[i][1] : 1);
    }
    int ok = 1;
    for (int i = 0; i < c.d.op.n_saved; i++) ok = ok && (c.saved[i] = hg_aligned_alloc(sizeof(float) * (size_t)c.z.saved[i]));
    if (ok && c.z.scratch_bytes) ok = (c.scratch = hg_aligned_alloc((size_t)c.z.scratch_bytes)) != NULL;
    hg_status st = ok ? hg_gradcheck(&def, opt, r) : hg_fail(HG_ERR_NOMEM, "hg_gradcheck_site: out of memory");
    for (int i = 0; i < HG_OP_MAX_TENSORS; i++) hg_aligned_free(c.saved[i]);
    hg_aligned_free(c.scratch);
    return st;
}
