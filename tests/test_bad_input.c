/* Bad input gets an error status whose message names the field; nothing crashes and
 * nothing is left half-done: a failed call leaves the model as it was. */
#include <math.h>
#include <stdint.h>
#include <sys/resource.h>

#include "check.h"
#include "core/isa.h"
#include "handgrad.h"
#include "model/gpt.h"

static void bad_configs(void) {
    hg_config good, c;
    CHECK_OK(hg_config_preset("odd", &good));
    CHECK_OK(hg_config_validate(&good));
    CHECK_FAILS(hg_config_preset("huge", &c), HG_ERR_INVALID, "huge");
    c = good, c.n_head = 5;
    CHECK_FAILS(hg_config_validate(&c), HG_ERR_INVALID, "n_head");
    c = good, c.d_model = 0;
    CHECK_FAILS(hg_config_validate(&c), HG_ERR_INVALID, "d_model");
    c = good, c.vocab_size = 0;
    CHECK_FAILS(hg_config_validate(&c), HG_ERR_INVALID, "vocab_size");
    c = good, c.n_layer = 0;
    CHECK_FAILS(hg_config_validate(&c), HG_ERR_INVALID, "n_layer");
    c = good, c.max_seq_len = -3;
    CHECK_FAILS(hg_config_validate(&c), HG_ERR_INVALID, "max_seq_len");
    c = good, c.dropout = NAN;
    CHECK_FAILS(hg_config_validate(&c), HG_ERR_INVALID, "dropout");
    c = good, c.dropout = 1.0f;
    CHECK_FAILS(hg_config_validate(&c), HG_ERR_INVALID, "dropout");
    c = good, c.d_ff = -1;
    CHECK_FAILS(hg_config_validate(&c), HG_ERR_INVALID, "d_ff");
    /* a derived head size above head_dim's range (it would not read back from a
     * checkpoint; found by fuzz_checkpoint) */
    c = good, c.d_model = 2912, c.n_head = 1;
    CHECK_FAILS(hg_config_validate(&c), HG_ERR_INVALID, "head_dim = 2912");
    c = good, c.qk_norm = 2;
    CHECK_FAILS(hg_config_validate(&c), HG_ERR_INVALID, "qk_norm");

    hg_options o = hg_options_default();
    hg_model *m = (hg_model *)&o; /* must be reset to NULL on failure */
    o.batch = 2, o.seq_len = 65;
    CHECK_FAILS(hg_model_create(&m, &good, &o), HG_ERR_INVALID, "seq_len");
    CHECK(m == NULL);
    o.seq_len = 8, o.batch = 0;
    CHECK_FAILS(hg_model_create(&m, &good, &o), HG_ERR_INVALID, "batch");
    o.batch = 2, o.threads = -1;
    CHECK_FAILS(hg_model_create(&m, &good, &o), HG_ERR_INVALID, "threads");
    c = good, c.n_head = 7;
    o.threads = 1;
    CHECK_FAILS(hg_model_create(&m, &c, &o), HG_ERR_INVALID, "n_head");
    c = good, c.rotary_dim = 8; /* a partial rotary embedding without rope */
    CHECK_FAILS(hg_model_create(&m, &c, &o), HG_ERR_INVALID, "rotary_dim");
    c.position = HG_POS_ROPE, c.rotary_dim = 7; /* odd */
    CHECK_FAILS(hg_model_create(&m, &c, &o), HG_ERR_INVALID, "rotary_dim");
    c = good, c.qk_norm_whole = 1; /* without qk_norm */
    CHECK_FAILS(hg_model_create(&m, &c, &o), HG_ERR_INVALID, "qk_norm_whole");
    c = good, c.block = (hg_block_kind)4;
    CHECK_FAILS(hg_model_create(&m, &c, &o), HG_ERR_INVALID, "block");
    CHECK_FAILS(hg_config_set(&c, "block", "post"), HG_ERR_INVALID, "block");
    o.device = (hg_device)7;
    CHECK_FAILS(hg_model_create(&m, &good, &o), HG_ERR_INVALID, "device");
    o.device = HG_DEVICE_CPU, o.precision = HG_PRECISION_FP16;
    CHECK_FAILS(hg_model_create(&m, &good, &o), HG_ERR_UNSUPPORTED, "fp16");
    /* bf16 on the CPU converts norm rows on the threads' stacks: d_model has a bound */
    o.precision = HG_PRECISION_BF16;
    c = good, c.d_model = 16896, c.n_head = 33;
    CHECK_FAILS(hg_model_create(&m, &c, &o), HG_ERR_UNSUPPORTED, "d_model");
    CHECK(m == NULL);
}

/* A model that cannot fit is refused before anything is allocated. */
static void refuses_what_does_not_fit(void) {
    hg_config c;
    CHECK_OK(hg_config_preset("2.7B", &c));
    hg_options o = hg_options_default();
    o.batch = 64, o.seq_len = 1024;
    hg_memory_plan plan;
    CHECK_OK(hg_memory_required(&c, &o, &plan));
    CHECK(plan.total > hg_memory_available());
    CHECK(plan.total == plan.params + plan.grads + plan.optimizer + plan.activations + plan.scratch);
    CHECK(plan.grads == plan.params && plan.optimizer == 2 * plan.params);
    struct rusage before, after;
    getrusage(RUSAGE_SELF, &before);
    hg_model *m = NULL;
    CHECK_FAILS(hg_model_create(&m, &c, &o), HG_ERR_NOMEM, "GiB");
    getrusage(RUSAGE_SELF, &after);
    CHECK(m == NULL);
    CHECK(after.ru_maxrss - before.ru_maxrss < 64 * 1024); /* KiB: nothing big was touched */
    /* the refusal names the dial that would make it fit, or what both dials still need */
    hg_options d = o;
    d.recompute = HG_RECOMPUTE_BLOCK, d.optim_state = d.grad_precision = HG_PRECISION_BF16;
    hg_memory_plan small;
    CHECK_OK(hg_memory_required(&c, &d, &small));
    CHECK(small.optimizer == plan.optimizer / 2 && small.activations < plan.activations && small.grads < plan.grads);
    CHECK_FAILS(hg_model_create(&m, &c, &o), HG_ERR_NOMEM,
                small.total > hg_memory_available()
                    ? "even with recompute BLOCK, optim_state BF16 and grad_precision BF16 it needs"
                    : "it would fit with");    /* a state type that is not one, and bf16 moments under ZeRO-1, are refused by name */
    hg_options bad = o;
    bad.optim_state = (hg_precision)7;
    CHECK_FAILS(hg_memory_required(&c, &bad, &small), HG_ERR_INVALID, "optim_state");
    bad.optim_state = HG_PRECISION_BF16, bad.shards = 2;
    CHECK_FAILS(hg_memory_required(&c, &bad, &small), HG_ERR_UNSUPPORTED, "optim_state: AdamW moments in bf16 with ZeRO-1");
    bad = o;
    bad.grad_precision = (hg_precision)9;
    CHECK_FAILS(hg_memory_required(&c, &bad, &small), HG_ERR_INVALID, "grad_precision");
    bad.grad_precision = HG_PRECISION_BF16, bad.shards = 2;
    CHECK_FAILS(hg_memory_required(&c, &bad, &small), HG_ERR_UNSUPPORTED, "grad_precision: bf16 gradients with ZeRO-1");
}

/* The CPU check (core/isa.c): this machine has what the build was compiled for, and a
 * CPU said to lack everything is refused with a message naming the first instruction
 * set. tests/cli_isa_guard.sh runs the command's guard on a real missing one. */
#if defined(__x86_64__) && defined(__AVX2__) /* the test compiles with the library's flags */
static int has_none(const char *isa) {
    (void)isa;
    return 0;
}
#endif
static int has_all(const char *isa) {
    (void)isa;
    return 1;
}
static void cpu_check(void) {
    CHECK(hg_cpu_lacks() == NULL);
    CHECK_OK(hg_cpu_check());
    CHECK(hg_isa_first_missing(hg_isa_library, has_all) == NULL);
#if defined(__x86_64__) && defined(__AVX2__) /* the test compiles with the library's flags */
    const char *isa = hg_isa_first_missing(hg_isa_library, has_none);
    CHECK(isa != NULL);
#if defined(__AVX512F__)
    CHECK(isa && !strcmp(isa, "avx512f"));
#else
    CHECK(isa && !strcmp(isa, "avx2"));
#endif
#endif
}

static void bad_calls(void) {
    hg_config c;
    CHECK_OK(hg_config_preset("odd", &c));
    hg_options o = hg_options_default();
    o.batch = 2, o.seq_len = 16, o.threads = 2, o.seed = 3;
    hg_model *m = NULL;
    CHECK_OK(hg_model_create(&m, &c, &o));
    if (!m) return;
    int32_t tok[32], tgt[32];
    for (int i = 0; i < 32; i++) tok[i] = (i * 37) % 1000, tgt[i] = (i * 101) % 1000;
    float loss0 = NAN, loss = NAN;
    CHECK_FAILS(hg_backward(m, 1.0f), HG_ERR_STATE, "hg_forward"); /* no forward yet */
    CHECK_OK(hg_forward(m, tok, tgt, 2, 16, &loss0, NULL));

    CHECK_FAILS(hg_backward(NULL, 1.0f), HG_ERR_INVALID, "model");
    tok[17] = 1000;
    CHECK_FAILS(hg_forward(m, tok, tgt, 2, 16, &loss, NULL), HG_ERR_INVALID, "tokens[b=1, t=1]");
    tok[17] = -2;
    CHECK_FAILS(hg_forward_backward(m, tok, tgt, 2, 16, 1.0f, &loss), HG_ERR_INVALID, "tokens[b=1, t=1]");
    tok[17] = 5;
    tgt[3] = -2;
    CHECK_FAILS(hg_forward(m, tok, tgt, 2, 16, &loss, NULL), HG_ERR_INVALID, "targets[b=0, t=3]");
    tgt[3] = 1000;
    CHECK_FAILS(hg_forward(m, tok, tgt, 2, 16, &loss, NULL), HG_ERR_INVALID, "targets[b=0, t=3]");
    tgt[3] = (3 * 101) % 1000;
    tok[17] = (17 * 37) % 1000;
    CHECK_FAILS(hg_forward(m, tok, tgt, 3, 16, &loss, NULL), HG_ERR_INVALID, "B must be");
    CHECK_FAILS(hg_forward(m, tok, tgt, 2, 17, &loss, NULL), HG_ERR_INVALID, "T must be");
    CHECK_FAILS(hg_forward(m, tok, tgt, 2, 0, &loss, NULL), HG_ERR_INVALID, "T must be");
    CHECK_FAILS(hg_forward(m, NULL, tgt, 2, 16, &loss, NULL), HG_ERR_INVALID, "tokens");
    CHECK_FAILS(hg_forward_backward(m, tok, NULL, 2, 16, 1.0f, &loss), HG_ERR_INVALID, "targets");
    CHECK_FAILS(hg_forward_backward(m, tok, tgt, 2, 16, NAN, &loss), HG_ERR_INVALID, "grad_scale");

    hg_adamw a = hg_adamw_default();
    a.lr = NAN;
    CHECK_FAILS(hg_optimizer_step(m, &a, NULL), HG_ERR_INVALID, "lr");
    a.lr = -1e-3f;
    CHECK_FAILS(hg_optimizer_step(m, &a, NULL), HG_ERR_INVALID, "lr");
    a = hg_adamw_default(), a.beta2 = 1.0f;
    CHECK_FAILS(hg_optimizer_step(m, &a, NULL), HG_ERR_INVALID, "beta2");
    a = hg_adamw_default(), a.eps = 0.0f;
    CHECK_FAILS(hg_optimizer_step(m, &a, NULL), HG_ERR_INVALID, "eps");
    a = hg_adamw_default(), a.weight_decay = INFINITY;
    CHECK_FAILS(hg_optimizer_step(m, &a, NULL), HG_ERR_INVALID, "weight_decay");
    CHECK(hg_optimizer_steps(m) == 0); /* no refused step counted */

    hg_param_info p;
    CHECK_FAILS(hg_param_find(m, "h.9.ln_1.weight", &p), HG_ERR_INVALID, "h.9.ln_1.weight");
    CHECK_FAILS(hg_param_at(m, 10000, &p), HG_ERR_INVALID, "10000");
    float row[96];
    CHECK_FAILS(hg_param_read(m, -1, HG_PARAM_GRAD, row), HG_ERR_INVALID, "-1");
    CHECK_FAILS(hg_param_write(m, 2, (hg_param_part)9, row), HG_ERR_INVALID, "part");
    CHECK_FAILS(hg_param_write(m, 2, HG_PARAM_DATA, NULL), HG_ERR_INVALID, "NULL");
    /* a read then write of the same values leaves the model as it was */
    CHECK_OK(hg_param_read(m, 2, HG_PARAM_DATA, row)); /* h.0.ln_1.weight (96) */
    CHECK_OK(hg_param_write(m, 2, HG_PARAM_DATA, row));

    /* a refused call does not cancel a pending backward */
    CHECK_OK(hg_forward(m, tok, tgt, 2, 16, &loss, NULL));
    tok[0] = -5;
    CHECK_FAILS(hg_forward(m, tok, tgt, 2, 16, &loss, NULL), HG_ERR_INVALID, "tokens[b=0, t=0]");
    tok[0] = 0;
    CHECK_OK(hg_backward(m, 1.0f));

    /* positions (packed documents): each 0 or one more than the one before, below
     * max_seq_len (64), for the B and T of the forward calls; refused ones change nothing */
    int32_t pos[32];
    for (int i = 0; i < 32; i++) pos[i] = i % 16 < 5 ? i % 16 : i % 16 - 5; /* documents of 5 and 11 a row */
    pos[20] = 7;
    CHECK_FAILS(hg_set_positions(m, pos, 2, 16), HG_ERR_INVALID, "positions[b=1, t=4] = 7");
    pos[20] = 4, pos[16] = 64; /* a row may start inside a document, but not past the table */
    CHECK_FAILS(hg_set_positions(m, pos, 2, 16), HG_ERR_INVALID, "positions[b=1, t=0] = 64");
    pos[16] = -1;
    CHECK_FAILS(hg_set_positions(m, pos, 2, 16), HG_ERR_INVALID, "positions[b=1, t=0] = -1");
    pos[16] = 0;
    CHECK_FAILS(hg_set_positions(m, pos, 3, 16), HG_ERR_INVALID, "B must be");
    CHECK_OK(hg_forward(m, tok, tgt, 2, 16, &loss, NULL));
    CHECK(loss == loss0); /* none of them was set */
    CHECK_OK(hg_set_positions(m, pos, 2, 16));
    CHECK_FAILS(hg_forward(m, tok, tgt, 1, 16, &loss, NULL), HG_ERR_INVALID, "positions were set for B=2, T=16");
    CHECK_OK(hg_forward(m, tok, tgt, 2, 16, &loss, NULL));
    CHECK(loss != loss0); /* two documents a row compute otherwise than one */
    CHECK_OK(hg_set_positions(m, NULL, 0, 0));

    /* after all that, the model computes exactly what it did before */
    CHECK_OK(hg_forward(m, tok, tgt, 2, 16, &loss, NULL));
    CHECK(loss == loss0);
    hg_model_free(m);

    o.training = 0;
    CHECK_OK(hg_model_create(&m, &c, &o));
    if (!m) return;
    CHECK_FAILS(hg_zero_grad(m), HG_ERR_STATE, "training=0");
    CHECK_FAILS(hg_forward_backward(m, tok, tgt, 2, 16, 1.0f, &loss), HG_ERR_STATE, "training=0");
    CHECK_FAILS(hg_set_train_mode(m, 1), HG_ERR_STATE, "training=1");
    CHECK_OK(hg_forward(m, tok, tgt, 2, 16, &loss, NULL));
    CHECK(loss == loss0); /* an inference model computes the same forward */
    CHECK_FAILS(hg_backward(m, 1.0f), HG_ERR_STATE, "training=0");
    hg_model_free(m);
}

/* A fused matmul+GELU entry for the table below (never called). */
static hg_status fused_gelu(hg_backend *be, float *out, float *pre, const float *inp, const float *w,
                            const float *bias, int M, int K, int N) {
    (void)be, (void)out, (void)pre, (void)inp, (void)w, (void)bias, (void)M, (void)K, (void)N;
    return HG_ERR_UNSUPPORTED;
}

static hg_status fused_gelu_backward(hg_backend *be, float *dpre, float *dw, float *dbias, float *act,
                                     const float *dout, const float *pre, const float *w, int M, int K, int N) {
    (void)be, (void)dpre, (void)dw, (void)dbias, (void)act, (void)dout, (void)pre, (void)w, (void)M, (void)K, (void)N;
    return HG_ERR_UNSUPPORTED;
}

/* Refusals derived from the step's trace (gpt_check_ops, model/plan.h): a backend table without a kernel a
 * config needs, or without its precision, refuses the model naming the field. */
static void missing_ops(void) {
    hg_config gpt2, llama;
    CHECK_OK(hg_config_preset("tiny", &gpt2));
    CHECK_OK(hg_config_preset("llama-tiny", &llama));
    hg_options o = hg_options_default();
    o.batch = 2, o.seq_len = 8;
    hg_backend_ops ops = *hg_backend_cpu_ops();
    CHECK_OK(gpt_check_ops(&gpt2, &o, &ops));
    CHECK_OK(gpt_check_ops(&llama, &o, &ops));
    ops.rope_backward = NULL; /* needed in training only */
    CHECK_FAILS(gpt_check_ops(&llama, &o, &ops), HG_ERR_UNSUPPORTED, "position: the cpu backend has no rope_backward");
    CHECK_OK(gpt_check_ops(&gpt2, &o, &ops));
    o.training = 0;
    CHECK_OK(gpt_check_ops(&llama, &o, &ops));
    ops.attention_cached = NULL; /* a KV-cache model: inference with batch 1 */
    CHECK_OK(gpt_check_ops(&llama, &o, &ops));
    o.batch = 1;
    CHECK_FAILS(gpt_check_ops(&llama, &o, &ops), HG_ERR_UNSUPPORTED, "batch: the cpu backend has no attention_cached");
    ops = *hg_backend_cpu_ops(), o = hg_options_default();
    ops.gelu_forward = NULL; /* a fused matmul+GELU does its work */
    CHECK_FAILS(gpt_check_ops(&gpt2, &o, &ops), HG_ERR_UNSUPPORTED, "mlp: the cpu backend has no gelu_forward");
    ops.matmul_gelu_forward = fused_gelu;
    /* the unfused backward recomputes GELU with gelu_forward: a training model needs it,
     * or the fused backward too */
    CHECK_FAILS(gpt_check_ops(&gpt2, &o, &ops), HG_ERR_UNSUPPORTED, "mlp: the cpu backend has no gelu_forward");
    o.training = 0;
    CHECK_OK(gpt_check_ops(&gpt2, &o, &ops));
    o.training = 1;
    ops.matmul_gelu_backward = fused_gelu_backward;
    CHECK_OK(gpt_check_ops(&gpt2, &o, &ops));
    ops = *hg_backend_cpu_ops();
    ops.precisions = 1u << HG_PRECISION_FP32;
    o.precision = HG_PRECISION_BF16;
    CHECK_FAILS(gpt_check_ops(&gpt2, &o, &ops), HG_ERR_UNSUPPORTED, "precision: the cpu backend has no kernels in bf16");
    /* the postnorm and parallel blocks' plain residual add */
    ops = *hg_backend_cpu_ops(), o = hg_options_default();
    ops.residual_add = NULL;
    CHECK_OK(gpt_check_ops(&gpt2, &o, &ops));
    gpt2.block = HG_BLOCK_SANDWICH; /* its adds are all fused with a norm */
    CHECK_OK(gpt_check_ops(&gpt2, &o, &ops));
    gpt2.block = HG_BLOCK_PARALLEL;
    CHECK_FAILS(gpt_check_ops(&gpt2, &o, &ops), HG_ERR_UNSUPPORTED, "block: the cpu backend has no residual_add");
    /* bf16 on the CPU copies the fp32 residual stream into bf16 for a postnorm block's
     * branches with dropout_backward, in inference too */
    ops = *hg_backend_cpu_ops();
    ops.dropout_backward = NULL;
    o.precision = HG_PRECISION_BF16, o.training = 0;
    gpt2.block = HG_BLOCK_SANDWICH;
    CHECK_OK(gpt_check_ops(&gpt2, &o, &ops));
    gpt2.block = HG_BLOCK_POSTNORM;
    CHECK_FAILS(gpt_check_ops(&gpt2, &o, &ops), HG_ERR_UNSUPPORTED, "precision: the cpu backend has no dropout_backward");
    o.precision = HG_PRECISION_FP32;
    CHECK_OK(gpt_check_ops(&gpt2, &o, &ops));
}

int main(void) {
    bad_configs();
    missing_ops();
    refuses_what_does_not_fit();
    bad_calls();
    cpu_check();
    CHECK_DONE();
}
