/* Recomputation (hg_options.recompute) trades memory for time and nothing else: for every
 * block layout, MLP, position, q/k norm and precision, with dropout on, three AdamW steps
 * under each mode end with the losses, gradients and parameters of no recompute, bit for
 * bit. And the memory plan, derived from the step's trace (model/plan.h), keeps only what
 * the backward still reads from the forward: each mode's recomputed buffers drop to one
 * copy, and `block` keeps a copy per layer of the block's input alone. */
#include <stdint.h>
#include <string.h>

#include "check.h"
#include "handgrad.h"

enum { B = 2, T = 24, STEPS = 3 };

static const char *const modes[] = {"none", "attn", "mlp", "block"};

typedef struct run {
    float loss[STEPS];
    hg_model *m;
} run;

/* Trains a fresh model of cfg for STEPS steps under recompute mode r. */
static run train(const hg_config *cfg, hg_precision p, hg_recompute r) {
    run out = {{0}, NULL};
    hg_options o = hg_options_default();
    o.batch = B, o.seq_len = T, o.threads = 2, o.seed = 7, o.precision = p, o.recompute = r;
    CHECK_OK(hg_model_create(&out.m, cfg, &o));
    if (!out.m) return out;
    int32_t tok[B * T], tgt[B * T];
    for (int i = 0; i < B * T; i++) tok[i] = (i * 7919 + 3) % cfg->vocab_size, tgt[i] = (i * 104729 + 11) % cfg->vocab_size;
    tgt[5] = -1; /* an ignored target */
    hg_adamw a = hg_adamw_default();
    for (int s = 0; s < STEPS; s++) {
        CHECK_OK(hg_zero_grad(out.m));
        CHECK_OK(hg_forward_backward(out.m, tok, tgt, B, T, 1.0f, &out.loss[s]));
        if (s < STEPS - 1) CHECK_OK(hg_optimizer_step(out.m, &a, NULL));
    }
    return out;
}

/* 1 when a and b hold the same parameters and gradients, bit for bit. */
static int same_state(hg_model *a, hg_model *b) {
    for (int i = 0; i < hg_param_count(a); i++) {
        hg_param_info pa, pb;
        hg_param_at(a, i, &pa);
        hg_param_at(b, i, &pb);
        size_t n = sizeof(float) * (size_t)pa.numel;
        if (memcmp(pa.data, pb.data, n) || memcmp(pa.grad, pb.grad, n)) {
            printf("  differs at %s\n", pa.name);
            return 0;
        }
    }
    return 1;
}

/* The copies model m's plan gives buffer `name` (-1: no such buffer). */
static int64_t copies(const hg_model *m, const char *name) {
    for (int i = 0; i < hg_buffer_count(m); i++) {
        hg_buffer_info b;
        hg_buffer_at(m, i, &b);
        if (!strcmp(b.name, name)) return b.bytes ? b.copies : 0;
    }
    return -1;
}

/* 1 when the training step of m runs op `name` again in its backward. */
static int recomputes(const hg_model *m, const char *name) {
    for (int i = 0; i < hg_step_op_count(m); i++) {
        hg_step_op op;
        CHECK_OK(hg_step_op_at(m, i, &op));
        if (op.pass == 0 && op.recompute && !strcmp(op.region, "backward") && !strcmp(op.name, name)) return 1;
    }
    return 0;
}

/* What each mode no longer keeps: its buffers have one copy (or none: a buffer the
 * layout does not have), where `none` keeps one a layer. */
static void check_plan(const hg_config *cfg, hg_recompute r, const hg_model *none, const hg_model *m) {
    static const char *const attn[] = {"ln1", "ln1.mean", "ln1.rstd", "qkv", "qk_raw", "qk_rstd", NULL};
    static const char *const mlp[] = {"ln2", "ln2.mean", "ln2.rstd", "fch", NULL};
    static const char *const block[] = {"ln1", "ln1.rstd", "qkv", "atty", "lse", "residual2", "ln2", "ln2.rstd", "fch",
                                        "post1", "post2", "post1.rstd", "post2.rstd", NULL};
    const char *const *gone = r == HG_RECOMPUTE_ATTN ? attn : r == HG_RECOMPUTE_MLP ? mlp : block;
    for (int i = 0; gone[i]; i++) {
        int64_t c = copies(m, gone[i]);
        if (cfg->block == HG_BLOCK_PARALLEL && r == HG_RECOMPUTE_MLP && !strcmp(gone[i], "fch")) continue;
        if (c > 1) printf("  %s: %s keeps %lld copies\n", modes[r], gone[i], (long long)c);
        CHECK(c <= 1);
    }
    if (r == HG_RECOMPUTE_BLOCK) CHECK(copies(m, "residual") == cfg->n_layer + 1); /* what it starts from */
    /* the step's description says what runs again */
    CHECK(!recomputes(none, "matmul c_attn forward") && !recomputes(none, "matmul c_fc forward"));
    CHECK(recomputes(m, "matmul c_attn forward") == (r != HG_RECOMPUTE_MLP));
    CHECK(recomputes(m, "attention forward") == (r == HG_RECOMPUTE_BLOCK));
    CHECK(recomputes(m, "matmul c_fc forward") == (r != HG_RECOMPUTE_ATTN));
    hg_memory_plan pn = hg_model_memory(none), pm = hg_model_memory(m);
    CHECK(pm.activations < pn.activations);
    CHECK(pm.params == pn.params && pm.grads == pn.grads && pm.optimizer == pn.optimizer);
    if (r == HG_RECOMPUTE_BLOCK) {
        /* every per-layer buffer but the stream between blocks is down to one copy */
        for (int i = 0; i < hg_buffer_count(m); i++) {
            hg_buffer_info b;
            hg_buffer_at(m, i, &b);
            if (b.bytes && b.copies > 1 && strcmp(b.name, "residual")) {
                printf("  block keeps %lld copies of %s\n", (long long)b.copies, b.name);
                CHECK(0);
            }
        }
    }
}

static void layouts(hg_precision p) {
    struct {
        const char *preset, *arch;
    } cases[] = {
        {"odd", "dropout=0.1"},                                           /* GPT-2: LayerNorm, GELU, learned */
        {"llama-tiny", "dropout=0.1"},                                    /* RMSNorm, SwiGLU, RoPE, GQA */
        {"qwen3-tiny", ""},                                               /* the q/k norm */
        {"odd", "block=postnorm,qk_norm=true,qk_norm_whole=true"},        /* OLMo 2 */
        {"odd", "block=sandwich,mlp=geglu,position=rope,attn_softcap=30"}, /* Gemma 2 */
        {"odd", "block=parallel,position=rope,rotary_dim=16,dropout=0.1"}, /* Phi-2 */
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        hg_config cfg;
        CHECK_OK(hg_config_preset(cases[c].preset, &cfg));
        char spec[128];
        snprintf(spec, sizeof spec, "%s", cases[c].arch);
        for (char *save = NULL, *kv = strtok_r(spec, ",", &save); kv; kv = strtok_r(NULL, ",", &save)) {
            char *eq = strchr(kv, '=');
            *eq = 0;
            CHECK_OK(hg_config_set(&cfg, kv, eq + 1));
        }
        run none = train(&cfg, p, HG_RECOMPUTE_NONE);
        if (!none.m) continue;
        printf("%s %s (%s): none loss %.7f %.7f %.7f, activations %zu bytes\n", cases[c].preset, cases[c].arch,
               p == HG_PRECISION_BF16 ? "bf16" : "fp32", none.loss[0], none.loss[1], none.loss[2],
               hg_model_memory(none.m).activations);
        for (int r = HG_RECOMPUTE_ATTN; r <= HG_RECOMPUTE_BLOCK; r++) {
            run x = train(&cfg, p, (hg_recompute)r);
            if (!x.m) continue;
            int same = !memcmp(x.loss, none.loss, sizeof x.loss) && same_state(none.m, x.m);
            printf("  %-5s: %s, activations %zu bytes\n", modes[r], same ? "bit-identical" : "DIFFERS",
                   hg_model_memory(x.m).activations);
            CHECK(same);
            check_plan(&cfg, (hg_recompute)r, none.m, x.m);
            hg_model_free(x.m);
        }
        hg_model_free(none.m);
    }
}

/* An unknown mode is refused by name; inference ignores the mode (it has no backward). */
static void bad_modes(void) {
    hg_config cfg;
    CHECK_OK(hg_config_preset("tiny", &cfg));
    hg_options o = hg_options_default();
    o.batch = 1, o.seq_len = 8, o.recompute = (hg_recompute)7;
    hg_memory_plan plan;
    CHECK_FAILS(hg_memory_required(&cfg, &o, &plan), HG_ERR_INVALID, "recompute");
    o.recompute = HG_RECOMPUTE_BLOCK, o.training = 0;
    hg_memory_plan a, b;
    CHECK_OK(hg_memory_required(&cfg, &o, &a));
    o.recompute = HG_RECOMPUTE_NONE;
    CHECK_OK(hg_memory_required(&cfg, &o, &b));
    CHECK(a.total == b.total);
}

int main(void) {
    layouts(HG_PRECISION_FP32);
    layouts(HG_PRECISION_BF16);
    bad_modes();
    CHECK_DONE();
}
