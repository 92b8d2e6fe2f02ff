/* Overrides of built-in ops for one model (handgrad_ext.h): the model's backend gets a
 * copy of its kernel table, and the entries named are replaced in the copy. */
#include "handgrad_ext.h"

#include "core/error.h"
#include "model/gpt.h"

int hg_backend_threads(const hg_backend *be) { return be ? be->threads : 1; }

/* The model's own, writable kernel table, or NULL when m runs on another device. */
static hg_backend_ops *own_table(hg_model *m, hg_device device) {
    if (m->opt.device != device) return NULL;
    if (m->be->ops != &m->own_ops) {
        m->own_ops = *m->be->ops;
        m->be->ops = &m->own_ops;
    }
    return &m->own_ops;
}

hg_status hg_override_gelu(hg_model *m, hg_device device, hg_gelu_forward_fn *forward, hg_gelu_backward_fn *backward) {
    if (!m) return hg_fail(HG_ERR_INVALID, "hg_override_gelu: model is NULL");
    hg_backend_ops *t = own_table(m, device);
    if (!t) return HG_OK;
    /* the fused matmul+GELU kernels would bypass the override: run them as two ops */
    if (forward) t->gelu_forward = forward, t->matmul_gelu_forward = NULL;
    if (forward || backward) t->matmul_gelu_backward = NULL; /* it recomputes the forward too */
    if (backward) t->gelu_backward = backward;
    return HG_OK;
}

hg_status hg_override_activation(hg_model *m, hg_device device, hg_activation_forward_fn *forward,
                                 hg_activation_backward_fn *backward) {
    if (!m) return hg_fail(HG_ERR_INVALID, "hg_override_activation: model is NULL");
    hg_backend_ops *t = own_table(m, device);
    if (!t) return HG_OK;
    if (forward) t->activation_forward = forward;
    if (backward) t->activation_backward = backward;
    return HG_OK;
}

hg_status hg_override_attention(hg_model *m, hg_device device, hg_attention_forward_fn *forward,
                                hg_attention_backward_fn *backward) {
    if (!m) return hg_fail(HG_ERR_INVALID, "hg_override_attention: model is NULL");
    hg_backend_ops *t = own_table(m, device);
    if (!t) return HG_OK;
    if (forward) t->attention_forward = forward;
    if (backward) t->attention_backward = backward;
    return HG_OK;
}

size_t hg_attention_scratch_bytes(const hg_model *m) {
    if (!m) return 0;
    const hg_tensor_spec *s = &m->acts.specs[S_ATTENTION];
    return (size_t)s->alloc * s->elem_size;
}
