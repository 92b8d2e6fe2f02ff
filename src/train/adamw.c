/* The optimizer step: global-norm clipping, then AdamW over every parameter tensor,
 * with decoupled weight decay on 2-D weight matrices only; and the learning-rate
 * schedule. */
#include <math.h>

#include "core/error.h"
#include "model/gpt.h"
#include "model/gpt_ops.h"

hg_adamw hg_adamw_default(void) {
    hg_adamw a = {.lr = 3e-4f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f, .grad_clip = 1.0f};
    return a;
}

static hg_status check_adamw(const hg_adamw *a) {
    if (!(a->lr >= 0.0f) || isinf(a->lr)) return hg_fail(HG_ERR_INVALID, "lr must be a finite number >= 0, got %g", (double)a->lr);
    if (!(a->beta1 >= 0.0f && a->beta1 < 1.0f)) return hg_fail(HG_ERR_INVALID, "beta1 must be in [0, 1), got %g", (double)a->beta1);
    if (!(a->beta2 >= 0.0f && a->beta2 < 1.0f)) return hg_fail(HG_ERR_INVALID, "beta2 must be in [0, 1), got %g", (double)a->beta2);
    if (!(a->eps > 0.0f) || isinf(a->eps)) return hg_fail(HG_ERR_INVALID, "eps must be a finite number > 0, got %g", (double)a->eps);
    if (!(a->weight_decay >= 0.0f) || isinf(a->weight_decay))
        return hg_fail(HG_ERR_INVALID, "weight_decay must be a finite number >= 0, got %g", (double)a->weight_decay);
    if (!(a->grad_clip >= 0.0f) || isinf(a->grad_clip))
        return hg_fail(HG_ERR_INVALID, "grad_clip must be a finite number >= 0 (0 disables), got %g", (double)a->grad_clip);
    return HG_OK;
}

/* The block a parameter counts to (ln_f and lm_head: the last), -1 for the embeddings. */
static int param_layer(const hg_model *m, int i) {
    const hg_tensor_spec *s = &m->params.specs[i];
    if (s->layer >= 0) return s->layer;
    return s->role == R_WTE || s->role == R_WPE ? -1 : m->cfg.n_layer - 1;
}

hg_status gpt_adamw_range(hg_model *m, const hg_adamw *a, double sumsq, float grad_mult, size_t lo, size_t n,
                          const void *g, void *mom, void *var, float *norm_out) {
    HG_TRY(check_adamw(a));
    HG_TRY(m->be->ops->sync(m->be)); /* a failure of the sumsq behind `sumsq` stops the step */
    double norm = sqrt(sumsq) * grad_mult;
    if (norm_out) *norm_out = (float)norm;
    if (!isfinite(norm)) return hg_fail(HG_ERR_INVALID, "the gradient norm is not finite (%g); the step was not taken", norm);
    /* PyTorch's clip_grad_norm_: scale by min(1, clip / (norm + 1e-6)) */
    double clip = a->grad_clip > 0 ? a->grad_clip / (norm + 1e-6) : 1.0;
    m->adam_t++;
    hg_adamw_args args = {
        .p = m->param, .g = g, .m = mom, .v = var,
        .w = m->weight != (void *)m->param ? m->weight : NULL,
        .params = &m->params, .weights = &m->weights, .lo = lo, .n = n,
        .u = {.lr = a->lr, .beta1 = a->beta1, .beta2 = a->beta2, .eps = a->eps, .weight_decay = a->weight_decay,
              .bias_correction1 = (float)(1.0 - pow(a->beta1, (double)m->adam_t)),
              .bias_correction2 = (float)(1.0 - pow(a->beta2, (double)m->adam_t)),
              .grad_scale = (float)(clip < 1.0 ? clip : 1.0) * grad_mult},
        .state = m->opt.optim_state, .grad = m->opt.grad_precision,
        .stochastic = (m->opt.flags & HG_FLAG_STOCHASTIC_ROUNDING) != 0,
        .seed = m->opt.seed, .step = (uint32_t)m->adam_t,
    };
    if (!PROF_ON(m)) {
        op_adamw(m, -1, PROF_NO_LAYER, &args);
    } else { /* one call per tensor, so the trace names each parameter (same results) */
        for (int i = 0; i < m->params.count; i++) {
            const hg_tensor_spec *s = &m->params.specs[i];
            size_t t0 = s->offset / sizeof(float), t1 = t0 + (size_t)s->alloc;
            size_t a0 = t0 > lo ? t0 : lo, a1 = t1 < lo + n ? t1 : lo + n;
            if (a0 >= a1) continue;
            hg_adamw_args t = args;
            const size_t es = gpt_state_bytes(m);
            t.g = (const char *)g + (a0 - lo) * gpt_grad_bytes(m);
            t.m = (char *)mom + (a0 - lo) * es, t.v = (char *)var + (a0 - lo) * es;
            t.lo = a0, t.n = a1 - a0;
            op_adamw(m, i, param_layer(m, i), &t);
        }
    }
    return m->be->ops->sync(m->be); /* the step is done when the call returns, as every step call */
}

hg_status hg_optimizer_step(hg_model *m, const hg_adamw *a, float *grad_norm) {
    if (!m || !a) return hg_fail(HG_ERR_INVALID, "hg_optimizer_step: NULL argument");
    if (!m->opt.training) return hg_fail(HG_ERR_STATE, "this model was created with training=0: it has no optimizer state");
    if (m->opt.shards > 1)
        return hg_fail(HG_ERR_STATE, "this model holds 1/%d of the AdamW state (ZeRO-1): step it with hg_dist_optimizer_step",
                       m->opt.shards);
    HG_TRY(check_adamw(a));
    double t0 = prof_begin(m), sumsq;
    op_sumsq(m, m->grad, m->opt.grad_precision, m->train_bytes / sizeof(float), &sumsq); /* the trained parameters' */
    HG_TRY(gpt_adamw_range(m, a, sumsq, 1.0f, 0, m->train_bytes / sizeof(float), m->grad, m->adam_m, m->adam_v, grad_norm));
    prof_region(m, PROF_OPTIMIZER, t0);
    return HG_OK;
}

int64_t hg_optimizer_steps(const hg_model *m) { return m ? m->adam_t : 0; }

float hg_lr_at(const hg_lr_schedule *s, int64_t step) {
    if (step < s->warmup_steps) return (float)((double)s->lr * (double)(step + 1) / (double)s->warmup_steps);
    if (s->kind == HG_LR_CONSTANT) return s->lr;
    int64_t span = s->total_steps - s->warmup_steps;
    double p = span > 0 ? (double)(step - s->warmup_steps) / (double)span : 1.0;
    if (p > 1.0) p = 1.0;
    double w = s->kind == HG_LR_COSINE ? 0.5 * (1.0 + cos(3.14159265358979323846 * p)) : 1.0 - p;
    return (float)((double)s->min_lr + w * ((double)s->lr - (double)s->min_lr));
}
