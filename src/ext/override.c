/* Overrides of built-in ops for one model (handgrad_ext.h): the model's backend gets a
 * copy of its kernel table, and the entries named are replaced in the copy. Model hooks:
 * a process-wide list that hg_model_create runs on every model. */
#include "handgrad_ext.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "core/error.h"
#include "ops/dropout.h"
#include "model/gpt.h"

int hg_backend_threads(const hg_backend *be) { return be ? be->threads : 1; }

/* *t = the model's own, writable kernel table, or NULL when m runs on another device;
 * fn names the caller for an error. */
static hg_status own_table(hg_model *m, hg_device device, const char *fn, hg_backend_ops **t) {
    *t = NULL;
    if (!m) return hg_fail(HG_ERR_INVALID, "%s: model is NULL", fn);
    if (m->opt.device != device) return HG_OK;
    if (m->be->ops != &m->own_ops) {
        m->own_ops = *m->be->ops;
        m->be->ops = &m->own_ops;
    }
    *t = &m->own_ops;
    return HG_OK;
}

hg_status hg_override_gelu(hg_model *m, hg_device device, hg_gelu_forward_fn *forward, hg_gelu_backward_fn *backward) {
    hg_backend_ops *t;
    HG_TRY(own_table(m, device, "hg_override_gelu", &t));
    if (!t) return HG_OK;
    /* the fused matmul+GELU kernels would bypass the override: run them as two ops */
    if (forward) t->gelu_forward = forward, t->matmul_gelu_forward = NULL;
    if (forward || backward) t->matmul_gelu_backward = NULL; /* it recomputes the forward too */
    if (backward) t->gelu_backward = backward;
    return HG_OK;
}

hg_status hg_override_activation(hg_model *m, hg_device device, hg_activation_forward_fn *forward,
                                 hg_activation_backward_fn *backward) {
    hg_backend_ops *t;
    HG_TRY(own_table(m, device, "hg_override_activation", &t));
    if (!t) return HG_OK;
    if (forward) t->activation_forward = forward;
    if (backward) t->activation_backward = backward;
    return HG_OK;
}

hg_status hg_override_attention(hg_model *m, hg_device device, hg_attention_forward_fn *forward,
                                hg_attention_backward_fn *backward) {
    hg_backend_ops *t;
    HG_TRY(own_table(m, device, "hg_override_attention", &t));
    if (!t) return HG_OK;
    if (forward) t->attention_forward = forward;
    if (backward) t->attention_backward = backward;
    return HG_OK;
}

/* Bytes of activation slot `slot` of m's plan; 0 without a model. */
static size_t slot_bytes(const hg_model *m, int slot) {
    if (!m) return 0;
    const hg_tensor_spec *s = &m->acts.specs[slot];
    return (size_t)s->alloc * s->elem_size;
}

size_t hg_attention_scratch_bytes(const hg_model *m) { return slot_bytes(m, S_ATTENTION); }

hg_status hg_override_norm(hg_model *m, hg_device device, hg_layernorm_forward_fn *forward,
                           hg_residual_layernorm_forward_fn *residual_forward, hg_layernorm_backward_fn *backward) {
    hg_backend_ops *t;
    HG_TRY(own_table(m, device, "hg_override_norm", &t));
    if (!t) return HG_OK;
    if (forward) t->layernorm_forward = forward;
    if (residual_forward) t->residual_layernorm_forward = residual_forward;
    if (backward) t->layernorm_backward = backward;
    return HG_OK;
}

size_t hg_norm_scratch_bytes(const hg_model *m) { return slot_bytes(m, S_REDUCE); }

float hg_dropout_factor(const hg_dropout *drop, uint64_t i) {
    return hg_dropout_on(drop) ? hg_dropout_scale(drop, i) : 1.0f;
}

hg_status hg_override_matmul(hg_model *m, hg_device device, hg_matmul_forward_fn *forward,
                             hg_matmul_backward_fn *backward) {
    hg_backend_ops *t;
    HG_TRY(own_table(m, device, "hg_override_matmul", &t));
    if (!t) return HG_OK;
    /* the fused matmul+GELU kernels would bypass the override: run them as two ops */
    if (forward) t->matmul_forward = forward, t->matmul_gelu_forward = NULL;
    if (backward) t->matmul_backward = backward, t->matmul_gelu_backward = NULL;
    return HG_OK;
}

#define HOOKS_MAX 8

static struct model_hook {
    char name[HG_OP_NAME_MAX];
    hg_model_hook_fn *fn;
    void *ctx;
} hooks[HOOKS_MAX];
static int nhooks;
static pthread_mutex_t hook_lock = PTHREAD_MUTEX_INITIALIZER;

static int hook_find(const char *name) {
    for (int i = 0; i < nhooks; i++)
        if (!strcmp(hooks[i].name, name)) return i;
    return -1;
}

hg_status hg_add_model_hook(const char *name, hg_model_hook_fn *hook, void *ctx) {
    if (!name || !*name || strlen(name) >= HG_OP_NAME_MAX)
        return hg_fail(HG_ERR_INVALID, "hg_add_model_hook: name must be 1 to %d characters", HG_OP_NAME_MAX - 1);
    if (!hook) return hg_fail(HG_ERR_INVALID, "hg_add_model_hook: '%s': hook is NULL", name);
    hg_status st = HG_OK;
    pthread_mutex_lock(&hook_lock);
    if (hook_find(name) >= 0) st = hg_fail(HG_ERR_INVALID, "hg_add_model_hook: a hook named '%s' exists", name);
    else if (nhooks == HOOKS_MAX)
        st = hg_fail(HG_ERR_INVALID, "hg_add_model_hook: '%s': a process has at most %d hooks", name, HOOKS_MAX);
    else {
        snprintf(hooks[nhooks].name, sizeof hooks[nhooks].name, "%s", name);
        hooks[nhooks].fn = hook, hooks[nhooks].ctx = ctx;
        nhooks++;
    }
    pthread_mutex_unlock(&hook_lock);
    return st;
}

hg_status hg_remove_model_hook(const char *name) {
    if (!name) return hg_fail(HG_ERR_INVALID, "hg_remove_model_hook: name is NULL");
    pthread_mutex_lock(&hook_lock);
    int i = hook_find(name);
    if (i >= 0) {
        memmove(&hooks[i], &hooks[i + 1], sizeof hooks[0] * (size_t)(nhooks - i - 1));
        nhooks--;
    }
    pthread_mutex_unlock(&hook_lock);
    return i >= 0 ? HG_OK : hg_fail(HG_ERR_INVALID, "hg_remove_model_hook: no hook named '%.64s'", name);
}

hg_status gpt_run_model_hooks(hg_model *m) {
    pthread_mutex_lock(&hook_lock);
    struct model_hook now[HOOKS_MAX];
    int n = nhooks;
    memcpy(now, hooks, sizeof now);
    pthread_mutex_unlock(&hook_lock);
    for (int i = 0; i < n; i++) {
        hg_clear_error();
        hg_status st = now[i].fn(m, now[i].ctx);
        if (st != HG_OK) return hg_fail_returned(st, "model hook '%s'", now[i].name);
    }
    return HG_OK;
}
