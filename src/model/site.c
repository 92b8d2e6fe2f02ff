/* Ops of one's own at the decoder's sites (handgrad_ext.h): the process-wide registry,
 * resolving a config's site ops for a model's shape, and running one call of an op from
 * the step (gpt_step.c). */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "core/error.h"
#include "model/gpt.h"
#include "model/plan.h"
#include "profile/profile.h"

/* ---- the registry ---- */

#define MAX_REGISTERED 64

static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;
static gpt_site_def reg[MAX_REGISTERED];
static int nreg;

static const char *const site_fields[HG_SITES] = {"op_attn_proj", "op_mlp_act", "op_final_norm"};

const char *hg_site_field(hg_site s) { return (unsigned)s < HG_SITES ? site_fields[s] : "?"; }

/* Points the definition's strings at its own copies (after a struct copy). */
static void def_fix(gpt_site_def *d) {
    d->op.name = d->name;
    for (int i = 0; i < HG_OP_MAX_TENSORS; i++) d->op.param_name[i] = i < d->op.n_params ? d->param_name[i] : NULL;
}

void gpt_site_def_copy(gpt_site_def *dst, const gpt_site_def *src) {
    *dst = *src;
    def_fix(dst);
}

hg_status gpt_site_sizes(const gpt_site_def *d, const hg_site_shape *s, hg_site_sizes *z) {
    memset(z, 0, sizeof *z);
    d->op.sizes(d->op.ctx, s, z);
    for (int i = 0; i < d->op.n_params; i++)
        if (z->param[i][0] < 1 || z->param[i][1] < 0 || z->param[i][0] > (1ll << 40) || z->param[i][1] > (1ll << 40))
            return hg_fail(HG_ERR_INVALID, "op '%s': sizes gives param[%d] (%s) the shape (%lld, %lld); rows must be "
                           ">= 1 and cols >= 0 (0: a vector)", d->name, i, d->param_name[i],
                           (long long)z->param[i][0], (long long)z->param[i][1]);
    for (int i = 0; i < HG_OP_MAX_TENSORS; i++)
        if (z->saved[i] < (i < d->op.n_saved) || z->saved[i] > (1ll << 40) || (i >= d->op.n_saved && z->saved[i]))
            return hg_fail(HG_ERR_INVALID, "op '%s': sizes gives saved[%d] %lld floats; it must be in [1, 2^40] for "
                           "each of n_saved = %d tensors and 0 past them", d->name, i, (long long)z->saved[i],
                           d->op.n_saved);
    if (z->scratch_bytes < 0 || z->scratch_bytes > (1ll << 42))
        return hg_fail(HG_ERR_INVALID, "op '%s': sizes gives scratch_bytes %lld; it must be in [0, 2^42]", d->name,
                       (long long)z->scratch_bytes);
    return HG_OK;
}

hg_status gpt_site_def_from(const hg_site_op *op, gpt_site_def *d) {
    if (!op) return hg_fail(HG_ERR_INVALID, "hg_register_op: op is NULL");
    if (!op->name || !gpt_op_name_ok(op->name, HG_OP_NAME_MAX))
        return hg_fail(HG_ERR_INVALID, "hg_register_op: name '%.64s' must be 1 to %d letters, digits, '_' or '-' "
                       "(and not 'none')", op->name ? op->name : "(NULL)", HG_OP_NAME_MAX - 1);
    const char *n = op->name;
    if ((unsigned)op->site >= HG_SITES)
        return hg_fail(HG_ERR_INVALID, "op '%s': site %d does not exist (HG_SITE_ATTN_PROJ, HG_SITE_MLP_ACT or "
                       "HG_SITE_FINAL_NORM)", n, (int)op->site);
    if (op->n_params < 0 || op->n_params > HG_OP_MAX_TENSORS)
        return hg_fail(HG_ERR_INVALID, "op '%s': n_params %d must be in [0, %d]", n, op->n_params, HG_OP_MAX_TENSORS);
    if (op->n_saved < 0 || op->n_saved > HG_OP_MAX_TENSORS)
        return hg_fail(HG_ERR_INVALID, "op '%s': n_saved %d must be in [0, %d]", n, op->n_saved, HG_OP_MAX_TENSORS);
    if (!op->sizes || !op->forward || !op->backward)
        return hg_fail(HG_ERR_INVALID, "op '%s': %s is NULL", n, !op->sizes ? "sizes" : !op->forward ? "forward" : "backward");
    if (op->n_params > 0 && !op->init)
        return hg_fail(HG_ERR_INVALID, "op '%s': init is NULL but the op has %d parameters", n, op->n_params);
    memset(d, 0, sizeof *d);
    d->op = *op;
    memcpy(d->name, n, strlen(n));
    for (int i = 0; i < op->n_params; i++) {
        const char *p = op->param_name[i];
        if (!p || !gpt_op_name_ok(p, sizeof d->param_name[i]))
            return hg_fail(HG_ERR_INVALID, "op '%s': param_name[%d] '%.64s' must be 1 to %zu letters, digits, '_' or '-'",
                           n, i, p ? p : "(NULL)", sizeof d->param_name[i] - 1);
        for (int j = 0; j < i; j++)
            if (!strcmp(p, d->param_name[j])) return hg_fail(HG_ERR_INVALID, "op '%s': param_name[%d] '%s' repeats param_name[%d]", n, i, p, j);
        memcpy(d->param_name[i], p, strlen(p));
    }
    def_fix(d);
    /* a probe shape: every size is asked again, for the real shape, at model creation */
    hg_site_shape probe = {.N = 64, .C = 64, .in_width = op->site == HG_SITE_MLP_ACT ? 512 : 64,
                           .out_width = op->site == HG_SITE_MLP_ACT ? 256 : 64, .threads = 1};
    hg_site_sizes z;
    return gpt_site_sizes(d, &probe, &z);
}

static int reg_find(const char *name) {
    for (int i = 0; i < nreg; i++)
        if (!strcmp(reg[i].name, name)) return i;
    return -1;
}

hg_status hg_register_op(const hg_site_op *op) {
    gpt_site_def d;
    HG_TRY(gpt_site_def_from(op, &d));
    hg_status st = HG_OK;
    pthread_mutex_lock(&reg_lock);
    if (reg_find(d.name) >= 0) st = hg_fail(HG_ERR_INVALID, "op '%s' is already registered (hg_unregister_op first)", d.name);
    else if (nreg == MAX_REGISTERED) st = hg_fail(HG_ERR_NOMEM, "op '%s': the registry is full (%d ops)", d.name, MAX_REGISTERED);
    else gpt_site_def_copy(&reg[nreg++], &d);
    pthread_mutex_unlock(&reg_lock);
    return st;
}

hg_status hg_unregister_op(const char *name) {
    if (!name) return hg_fail(HG_ERR_INVALID, "hg_unregister_op: name is NULL");
    pthread_mutex_lock(&reg_lock);
    int i = reg_find(name);
    if (i >= 0) {
        for (int j = i; j + 1 < nreg; j++) gpt_site_def_copy(&reg[j], &reg[j + 1]);
        nreg--;
    }
    pthread_mutex_unlock(&reg_lock);
    return i >= 0 ? HG_OK : hg_fail(HG_ERR_INVALID, "hg_unregister_op: no op named '%.64s' is registered", name);
}

int hg_op_count(void) {
    pthread_mutex_lock(&reg_lock);
    int n = nreg;
    pthread_mutex_unlock(&reg_lock);
    return n;
}

hg_status hg_op_at(int i, hg_site_op *out) {
    if (!out) return hg_fail(HG_ERR_INVALID, "hg_op_at: out is NULL");
    pthread_mutex_lock(&reg_lock);
    int n = nreg;
    if (i >= 0 && i < n) *out = reg[i].op;
    pthread_mutex_unlock(&reg_lock);
    return i >= 0 && i < n ? HG_OK : hg_fail(HG_ERR_INVALID, "hg_op_at: index %d is out of range [0, %d)", i, n);
}

/* Copies the registered op `name` into d; 0 when there is none. */
static int reg_get(const char *name, gpt_site_def *d) {
    pthread_mutex_lock(&reg_lock);
    int i = reg_find(name);
    if (i >= 0) gpt_site_def_copy(d, &reg[i]);
    pthread_mutex_unlock(&reg_lock);
    return i >= 0;
}

/* ---- resolving a config's ops ---- */

hg_site_shape hg_site_shape_of(const hg_config *cfg, hg_site s, int N, int threads) {
    gpt_dims d = gpt_dims_of(cfg);
    hg_site_shape sh = {.N = N, .C = d.C, .in_width = d.C, .out_width = d.C, .threads = threads};
    if (s == HG_SITE_MLP_ACT) sh.in_width = d.FI, sh.out_width = d.F;
    return sh;
}

hg_status gpt_sites_resolve(const hg_config *cfg, const hg_options *opt, int threads, gpt_sites *out) {
    memset(out, 0, sizeof *out);
    for (int s = 0; s < HG_SITES; s++) {
        const char *name = cfg->site_op[s];
        if (!*name) continue;
        gpt_site_def *d = &out->def[s];
        if (!reg_get(name, d))
            return hg_fail(HG_ERR_INVALID, "%s: op '%s' is not registered (register it with hg_register_op, or "
                           "load its plugin, before creating or loading the model)", site_fields[s], name);
        if (d->op.site != (hg_site)s)
            return hg_fail(HG_ERR_INVALID, "%s: op '%s' is registered for site %s", site_fields[s], name,
                           site_fields[d->op.site]);
        if (opt->device != HG_DEVICE_CPU)
            return hg_fail(HG_ERR_UNSUPPORTED, "%s: op '%s' has CPU kernels only; site ops run on CPU models",
                           site_fields[s], name);
        if (opt->precision != HG_PRECISION_FP32)
            return hg_fail(HG_ERR_UNSUPPORTED, "%s: op '%s' has fp32 kernels only; site ops run on fp32 models (precision)",
                           site_fields[s], name);
        out->shape[s] = hg_site_shape_of(cfg, (hg_site)s, opt->batch * opt->seq_len, threads);
        HG_TRY(gpt_site_sizes(d, &out->shape[s], &out->z[s]));
        hg_site_shape one = out->shape[s];
        one.N = 1, one.threads = 1;
        hg_site_sizes z1;
        HG_TRY(gpt_site_sizes(d, &one, &z1));
        if (memcmp(z1.param, out->z[s].param, sizeof z1.param))
            return hg_fail(HG_ERR_INVALID, "op '%s': its parameter shapes change with N or threads", name);
        out->on[s] = 1;
    }
    return HG_OK;
}

void gpt_sites_registered(const hg_config *cfg, gpt_sites *out) {
    memset(out, 0, sizeof *out);
    for (int s = 0; s < HG_SITES; s++) {
        gpt_site_def *d = &out->def[s];
        if (!*cfg->site_op[s] || !reg_get(cfg->site_op[s], d) || d->op.site != (hg_site)s) continue;
        out->shape[s] = hg_site_shape_of(cfg, (hg_site)s, 1, 1);
        out->on[s] = gpt_site_sizes(d, &out->shape[s], &out->z[s]) == HG_OK;
    }
}

/* ---- one call from the step ---- */

const char *gpt_site_pass_name(gpt_site_pass pass) {
    static const char *const names[] = {"forward", "recompute", "backward"};
    return names[pass];
}

hg_status gpt_site_run(hg_model *m, hg_site s, gpt_site_pass pass, int layer, const float *x, float *y,
                       const float *dy, float *dx) {
    const gpt_site_def *d = &m->sites.def[s];
    const hg_site_sizes *z = &m->sites.z[s];
    const int n = d->op.n_params, copy = s == HG_SITE_FINAL_NORM ? 0 : layer;
    const float *w[HG_OP_MAX_TENSORS] = {0};
    float *dw[HG_OP_MAX_TENSORS] = {0}, *saved[HG_OP_MAX_TENSORS] = {0};
    const gpt_role role = gpt_site_role(s);
    for (int i = 0; i < n; i++) {
        w[i] = gpt_weight(m, gpt_pi(m, layer, role) + i);
        if (pass == SITE_BACKWARD) dw[i] = gpt_grad(m, gpt_pi(m, layer, role) + i); /* NULL: frozen */
    }
    for (int i = 0; i < d->op.n_saved; i++) saved[i] = gpt_act(m, A_SITE_SAVED + s * HG_OP_MAX_TENSORS + i, copy);
    hg_site_call c = {.be = m->be, .layer = s == HG_SITE_FINAL_NORM ? -1 : layer, .B = m->B, .T = m->T,
                      .N = m->B * m->T, .in_width = m->sites.shape[s].in_width,
                      .out_width = m->sites.shape[s].out_width, .x = x, .y = y, .dy = dy, .dx = dx, .w = w, .dw = dw,
                      .saved = saved, .scratch = z->scratch_bytes ? gpt_act(m, S_SITE_SCRATCH + s, 0) : NULL,
                      .recompute = pass == SITE_RECOMPUTE};
    double in = (double)c.N * c.in_width, out = (double)c.N * c.out_width;
    /* forward writes its saved tensors, backward reads them; a recompute is taken to read
     * them, so that the plan keeps them whether or not the op writes them again */
    prof_op op = {.kind = OP_SITE_ATTN_FWD + 3 * s + pass, .layer = c.layer, .dims = {c.N, c.in_width, c.out_width},
                  .cost = {0.0, HG_COST_F4 * (pass == SITE_BACKWARD ? 2 * in + out : in + out)},
                  .rd = {x, dy}, .wr = {y, dx, c.scratch}};
    for (int i = 0; i < d->op.n_saved; i++) {
        if (pass == SITE_FORWARD) op.wr[3 + i] = saved[i];
        else op.rd[2 + i] = saved[i];
    }
    if (m->trace) {
        gpt_trace_op(m, 0, &op);
        return HG_OK;
    }
    hg_clear_error();
    double t0 = prof_begin(m);
    hg_status st = pass == SITE_BACKWARD ? d->op.backward(d->op.ctx, &c) : d->op.forward(d->op.ctx, &c);
    if (PROF_ON(m)) prof_record(m, &op, t0);
    if (st == HG_OK) return HG_OK;
    return hg_fail_returned(st, "op '%s' (%s, block %d): its %s", d->name, site_fields[s], c.layer,
                            gpt_site_pass_name(pass));
}
