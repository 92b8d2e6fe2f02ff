/* The whole model on the GPU against the CPU backend (which tests/test_model_torch.c holds
 * to PyTorch): logits, loss, every parameter gradient, and ten AdamW steps whose losses
 * must track the CPU's, in fp32 and bf16, on odd shapes (T=37, C=96, NH=3, V=1000) and on
 * GPT-2 small's width and vocabulary; at the odd shape and in the llama-tiny, qwen2-tiny
 * and qwen3-tiny presets also the other architectures' switches (RMSNorm, RoPE, SwiGLU,
 * ReLU^2, norms and linears without parameters, an untied output layer, grouped-query
 * attention, a head_dim of its own, the q/k norm). Also: dropout masks that match the CPU's, CUDA graph replay that
 * matches eager runs, stochastic rounding that trains, and generation through the KV
 * cache from parameters copied off the CPU model.
 *
 * Both models start from the same seed, so from the same parameters (init runs on the
 * host). Tolerances on ||gpu - cpu|| / ||cpu||, by precision:
 *   fp32: logits, losses 1e-5; gradients and final parameters 1e-4 (summation orders);
 *   bf16: logits, losses 2e-2; gradients 5e-2 (bf16 activations through every layer);
 *         the loss of each of the ten steps 2e-2. Parameters are not compared in bf16:
 *         Adam turns small gradient differences into lr-sized steps.
 * First guesses, not yet measured on a GPU (docs/cuda.md).
 *
 * Skips (exit 77) when there is no CUDA device, after checking that asking for one
 * fails cleanly with HG_ERR_UNSUPPORTED and a message. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_util.h"
#include "handgrad.h"

static int failures;

typedef struct run {
    const char *name;
    hg_config cfg;
    int B, T;
    hg_precision precision;
    unsigned flags;
    hg_recompute recompute; /* on both devices: the CPU's is bit-identical to none */
    const char *lora;       /* PEFT module names: adapters r=4, alpha 8 on them (NULL: none) */
    float lora_dropout;
    const char *freeze;     /* hg_options.freeze (NULL: none) */
    int base_bf16;          /* CUDA's frozen tensors held in bf16 (hg_options.base_precision) */
    int state_bf16;         /* AdamW's moments in bf16 on both devices (hg_options.optim_state):
                               the same draws, so the CPU is the reference still */
    int doc_len;            /* > 0: packed documents (hg_set_positions) on both devices,
                               lengths cycling through doc_len, 1, 2 doc_len + 3; row b > 0
                               begins inside a document, at position 3 b */
} run;

/* An entry of the table: name, config, B, T, precision, flags, recompute, then any of
 * .lora, .lora_dropout, .freeze, .base_bf16, .state_bf16, .doc_len. */
#define RUN(n, c, b, t, p, f, r, ...) \
    {.name = n, .cfg = c, .B = b, .T = t, .precision = p, .flags = f, .recompute = r, __VA_ARGS__}

/* r's adapters and frozen tensors into o. */
static void adapt(const run *r, hg_options *o) {
    o->freeze = r->freeze;
    if (!r->lora) return;
    if (hg_hf_lora_targets(&r->cfg, NULL, r->lora, &o->lora) != HG_OK) {
        printf("  FAIL %s: lora targets: %s\n", r->name, hg_last_error());
        failures++;
    }
    o->lora.r = 4, o->lora.alpha = 8.0f, o->lora.dropout = r->lora_dropout, o->lora.init = HG_LORA_INIT_GAUSSIAN;
}

static hg_model *make(const run *r, hg_device device) {
    hg_options o = hg_options_default();
    o.batch = r->B, o.seq_len = r->T, o.seed = 5, o.threads = 2;
    o.device = device;
    o.precision = device == HG_DEVICE_CUDA ? r->precision : HG_PRECISION_FP32;
    o.flags = device == HG_DEVICE_CUDA ? r->flags : 0;
    o.recompute = r->recompute;
    o.base_precision = device == HG_DEVICE_CUDA && r->base_bf16 ? HG_PRECISION_BF16 : HG_PRECISION_FP32;
    o.optim_state = r->state_bf16 ? HG_PRECISION_BF16 : HG_PRECISION_FP32;
    adapt(r, &o);
    hg_model *m = NULL;
    if (hg_model_create(&m, &r->cfg, &o) != HG_OK) {
        printf("  FAIL %s: creating the %s model: %s\n", r->name, device == HG_DEVICE_CUDA ? "CUDA" : "CPU", hg_last_error());
        failures++;
        return NULL;
    }
    if (r->doc_len > 0) { /* every forward of the model then has these positions */
        int32_t *pos = malloc(sizeof(int32_t) * (size_t)r->B * r->T);
        const int lens[3] = {r->doc_len, 1, 2 * r->doc_len + 3};
        for (int b = 0; b < r->B; b++)
            for (int t = 0, p = 3 * b, k = b, left = lens[k % 3] + p; t < r->T; t++) {
                if (p >= left) p = 0, left = lens[++k % 3];
                pos[(size_t)b * r->T + t] = p++;
            }
        hg_status st = hg_set_positions(m, pos, r->B, r->T);
        free(pos);
        if (st != HG_OK) {
            printf("  FAIL %s: positions on the %s model: %s\n", r->name, device == HG_DEVICE_CUDA ? "CUDA" : "CPU",
                   hg_last_error());
            failures++;
            hg_model_free(m);
            return NULL;
        }
    }
    return m;
}

static int step_ok(hg_status st, const char *what) {
    if (st == HG_OK) return 1;
    printf("  FAIL %s: %s\n", what, hg_last_error());
    failures++;
    return 0;
}

static void batch(const run *r, int32_t *tok, int32_t *tgt) {
    uint64_t x = 12345;
    for (int i = 0; i < r->B * r->T; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        tok[i] = (int32_t)((x >> 33) % (uint64_t)r->cfg.vocab_size);
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        tgt[i] = i % 11 == 4 ? -1 : (int32_t)((x >> 33) % (uint64_t)r->cfg.vocab_size);
    }
}

static void compare_scalar(const char *what, double got, double want, double tol) {
    double rel = fabs(got - want) / fabs(want);
    int bad = !(rel <= tol);
    printf("  %-4s %-48s %.7g vs cpu %.7g (rel %.1e, tol %.0e)\n", bad ? "FAIL" : "ok", what, got, want, rel, tol);
    failures += bad;
}

/* Every tensor's `part`, GPU against CPU; prints the failures and the worst. lr: the
 * AdamW learning rate of the steps that led to HG_PARAM_DATA. */
static void compare_params(const run *r, hg_model *g, hg_model *c, hg_param_part part, double tol, double lr) {
    int bad = 0;
    for (int i = 0; i < hg_param_count(c); i++) {
        hg_param_info info;
        hg_param_at(c, i, &info);
        if (info.frozen && part == HG_PARAM_GRAD) continue; /* no gradient */
        float *a = malloc(sizeof(float) * (size_t)info.numel), *b = malloc(sizeof(float) * (size_t)info.numel);
        if (step_ok(hg_param_read(g, i, part, a), "hg_param_read") && step_ok(hg_param_read(c, i, part, b), "hg_param_read")) {
            char name[160];
            snprintf(name, sizeof name, "%s %s %s", r->name, part == HG_PARAM_GRAD ? "grad" : "param", info.name);
            size_t n = (size_t)info.numel;
            if (part == HG_PARAM_DATA && strstr(info.name, "attn.c_attn.bias")) {
                /* The key bias's gradient is zero in exact arithmetic (it adds q.b_k to every
                 * score of a row, which the softmax cancels), so both backends hold rounding
                 * noise there, and Adam turns noise into steps of about lr: after ten steps
                 * the key part differs by up to 10 lr. Compare q and v; bound k by 10 lr. */
                const int hs = r->cfg.head_dim ? r->cfg.head_dim : r->cfg.d_model / r->cfg.n_head;
                const size_t q = (size_t)r->cfg.n_head * (size_t)hs;
                const size_t k = (n - q) / 2;
                double worst = 0.0;
                for (size_t j = q; j < q + k; j++) worst = fmax(worst, fabs((double)a[j] - b[j]));
                int kb = !(worst <= 10.05 * lr);
                printf("  %-4s %s key part: max |gpu - cpu| %.2e (bound 10 lr = %.1e)\n", kb ? "FAIL" : "ok", name, worst, 10.0 * lr);
                bad += kb;
                for (size_t j = q; j < q + k; j++) a[j] = b[j] = 0.0f;
            }
            bad += compare(name, a, b, n, tol);
        }
        free(a), free(b);
    }
    failures += bad;
}

/* Generation through the KV cache: the trained CPU model's parameters copied into a CPU
 * and a CUDA inference model (hg_model_copy_params across devices), a 5-token prefill,
 * then 3 tokens one at a time; the logits of each call compared. */
static void test_generation(const run *r, const hg_model *trained) {
    const int V = r->cfg.vocab_size;
    hg_model *m[2] = {NULL, NULL};
    int ok = 1;
    for (int k = 0; k < 2 && ok; k++) {
        hg_options o = hg_options_default();
        o.batch = 1, o.seq_len = r->T, o.training = 0, o.threads = 2;
        o.device = k ? HG_DEVICE_CUDA : HG_DEVICE_CPU;
        o.precision = k ? r->precision : HG_PRECISION_FP32;
        adapt(r, &o);
        ok = step_ok(hg_model_create(&m[k], &r->cfg, &o), "creating an inference model") &&
             step_ok(hg_model_copy_params(m[k], trained), "hg_model_copy_params");
    }
    float *lc = malloc(sizeof(float) * (size_t)V), *lg = malloc(sizeof(float) * (size_t)V);
    int32_t tok[8];
    for (int i = 0; i < 8; i++) tok[i] = (int32_t)((i * 7919 + 11) % V);
    for (int at = 0, n = 5; ok && at < 8; at += n, n = 1) {
        for (int i = 0; i < V; i++) lg[i] = NAN;
        ok = step_ok(hg_kv_forward(m[0], tok + at, n, lc), "cpu kv_forward") &&
             step_ok(hg_kv_forward(m[1], tok + at, n, lg), "cuda kv_forward");
        char what[64];
        snprintf(what, sizeof what, "KV-cache logits after %d tokens", at + n);
        if (ok) failures += compare(what, lg, lc, (size_t)V, r->precision == HG_PRECISION_FP32 ? 1e-5 : 2e-2);
    }
    free(lc), free(lg);
    hg_model_free(m[0]), hg_model_free(m[1]);
}

static void test_run(const run *r) {
    const int fp32 = r->precision == HG_PRECISION_FP32;
    const size_t n = (size_t)r->B * r->T;
    hg_model *c = make(r, HG_DEVICE_CPU), *g = make(r, HG_DEVICE_CUDA);
    if (!c || !g) {
        hg_model_free(c), hg_model_free(g);
        return;
    }
    printf("%s:\n", r->name);
    int32_t *tok = malloc(sizeof(int32_t) * n), *tgt = malloc(sizeof(int32_t) * n);
    float *lc = malloc(sizeof(float) * n * r->cfg.vocab_size), *lg = malloc(sizeof(float) * n * r->cfg.vocab_size);
    batch(r, tok, tgt);
    for (size_t i = 0; i < n * r->cfg.vocab_size; i++) lg[i] = NAN;
    float loss_c, loss_g;
    /* forward with logits (inference path of the classifier) */
    if (step_ok(hg_forward(c, tok, tgt, r->B, r->T, &loss_c, lc), "cpu forward") &&
        step_ok(hg_forward(g, tok, tgt, r->B, r->T, &loss_g, lg), "cuda forward")) {
        failures += compare("logits", lg, lc, n * r->cfg.vocab_size, fp32 ? 1e-5 : 2e-2);
        compare_scalar("forward loss", loss_g, loss_c, fp32 ? 1e-5 : 2e-2);
    }
    /* forward + backward: every gradient */
    if (step_ok(hg_zero_grad(c), "zero") && step_ok(hg_zero_grad(g), "zero") &&
        step_ok(hg_forward_backward(c, tok, tgt, r->B, r->T, 1.0f, &loss_c), "cpu forward_backward") &&
        step_ok(hg_forward_backward(g, tok, tgt, r->B, r->T, 1.0f, &loss_g), "cuda forward_backward")) {
        compare_scalar("forward_backward loss", loss_g, loss_c, fp32 ? 1e-5 : 2e-2);
        compare_params(r, g, c, HG_PARAM_GRAD, fp32 ? 1e-4 : 5e-2, 0.0);
    }
    /* ten AdamW steps on one batch (the loss must fall), then the parameters */
    hg_adamw a = hg_adamw_default();
    a.lr = 1e-3f;
    float first = 0.0f, last = 0.0f;
    for (int s = 0; s < 10; s++) {
        float nc, ng;
        if (!step_ok(hg_zero_grad(c), "zero") || !step_ok(hg_zero_grad(g), "zero") ||
            !step_ok(hg_forward_backward(c, tok, tgt, r->B, r->T, 1.0f, &loss_c), "cpu step") ||
            !step_ok(hg_forward_backward(g, tok, tgt, r->B, r->T, 1.0f, &loss_g), "cuda step") ||
            !step_ok(hg_optimizer_step(c, &a, &nc), "cpu adamw") || !step_ok(hg_optimizer_step(g, &a, &ng), "cuda adamw"))
            break;
        char what[64];
        snprintf(what, sizeof what, "step %d loss", s);
        compare_scalar(what, loss_g, loss_c, fp32 ? 1e-5 : 2e-2);
        snprintf(what, sizeof what, "step %d grad norm", s);
        compare_scalar(what, ng, nc, fp32 ? 1e-4 : 5e-2);
        if (s == 0) first = loss_g;
        last = loss_g;
    }
    int fell = last < first;
    printf("  %-4s loss fell over ten steps: %.5f -> %.5f\n", fell ? "ok" : "FAIL", (double)first, (double)last);
    failures += !fell;
    if (fp32) compare_params(r, g, c, HG_PARAM_DATA, 1e-4, a.lr);
    test_generation(r, c);
    free(tok), free(tgt), free(lc), free(lg);
    hg_model_free(c), hg_model_free(g);
}

/* The same training pass eagerly and replayed from a CUDA graph: the same losses and
 * gradients (up to the order of dwte's atomic adds). */
static void test_graphs(const run *r) {
    run eager = *r, graphed = *r;
    eager.flags = 0;
    graphed.flags = HG_FLAG_CUDA_GRAPHS;
    hg_model *e = make(&eager, HG_DEVICE_CUDA), *g = make(&graphed, HG_DEVICE_CUDA);
    const size_t n = (size_t)r->B * r->T;
    int32_t *tok = malloc(sizeof(int32_t) * n), *tgt = malloc(sizeof(int32_t) * n);
    batch(r, tok, tgt);
    printf("%s, CUDA graph against eager:\n", r->name);
    /* calls 1 (eager), 2 (captured) and 3 (replayed) of the graphed model */
    for (int call = 0; call < 3 && e && g; call++) {
        float le, lg;
        if (!step_ok(hg_zero_grad(e), "zero") || !step_ok(hg_zero_grad(g), "zero") ||
            !step_ok(hg_forward_backward(e, tok, tgt, r->B, r->T, 1.0f, &le), "eager") ||
            !step_ok(hg_forward_backward(g, tok, tgt, r->B, r->T, 1.0f, &lg), "graphed"))
            break;
        char what[64];
        snprintf(what, sizeof what, "call %d loss", call + 1);
        compare_scalar(what, lg, le, 1e-6);
    }
    if (e && g) compare_params(&graphed, g, e, HG_PARAM_GRAD, 1e-5, 0.0);
    free(tok), free(tgt);
    hg_model_free(e), hg_model_free(g);
}

/* HG_FLAG_DETERMINISTIC: the own attention kernels (not cuDNN's) and a token-embedding
 * gradient without atomics. The first pass's gradients match the CPU's, and two runs of
 * three AdamW steps from the same seed end with bit-identical parameters. The batch
 * repeats token ids (odd's vocabulary of 1000 over 111 tokens), so the ordered sum of
 * dwte is exercised. */
static void test_deterministic(const run *r) {
    run d = *r;
    d.flags |= HG_FLAG_DETERMINISTIC;
    hg_model *a = make(&d, HG_DEVICE_CUDA), *b = make(&d, HG_DEVICE_CUDA), *c = make(&d, HG_DEVICE_CPU);
    const size_t n = (size_t)r->B * r->T;
    int32_t *tok = malloc(sizeof(int32_t) * n), *tgt = malloc(sizeof(int32_t) * n);
    batch(r, tok, tgt);
    printf("%s, deterministic:\n", r->name);
    hg_adamw opt = hg_adamw_default();
    opt.lr = 1e-3f;
    float loss, gn;
    int ok = a && b && c && step_ok(hg_zero_grad(a), "zero") && step_ok(hg_zero_grad(c), "zero") &&
             step_ok(hg_forward_backward(a, tok, tgt, r->B, r->T, 1.0f, &loss), "cuda pass") &&
             step_ok(hg_forward_backward(c, tok, tgt, r->B, r->T, 1.0f, &loss), "cpu pass");
    if (ok) {
        compare_params(&d, a, c, HG_PARAM_GRAD, r->precision == HG_PRECISION_FP32 ? 1e-4 : 5e-2, 0.0);
        const char *k = hg_model_attention_kernels(a);
        /* the own kernels; with HANDGRAD_CUDNN_DETERMINISTIC=1 cuDNN's direct-dQ backward, or
         * the own backward where that cuDNN refuses the shape (before 9.16: T=37) */
        const char *bwd = strstr(k, "backward: ");
        int own = r->precision != HG_PRECISION_BF16 || strstr(k, "own kernels (deterministic)") ||
                  (bwd && (strstr(bwd, "dQ without the accumulator") || strstr(bwd, "own kernels (cuDNN refused")));
        printf("  %-4s attention kernels: %s\n", own ? "ok" : "FAIL", k);
        failures += !own;
        ok = step_ok(hg_optimizer_step(a, &opt, &gn), "adamw");
    }
    for (int s = 1; ok && s < 3; s++)
        ok = step_ok(hg_zero_grad(a), "zero") && step_ok(hg_forward_backward(a, tok, tgt, r->B, r->T, 1.0f, &loss), "pass") &&
             step_ok(hg_optimizer_step(a, &opt, &gn), "adamw");
    for (int s = 0; ok && s < 3; s++)
        ok = step_ok(hg_zero_grad(b), "zero") && step_ok(hg_forward_backward(b, tok, tgt, r->B, r->T, 1.0f, &loss), "pass") &&
             step_ok(hg_optimizer_step(b, &opt, &gn), "adamw");
    int differ = 0;
    for (int i = 0; ok && i < hg_param_count(a); i++) {
        hg_param_info info;
        hg_param_at(a, i, &info);
        float *x = malloc(sizeof(float) * (size_t)info.numel), *y = malloc(sizeof(float) * (size_t)info.numel);
        ok = step_ok(hg_param_read(a, i, HG_PARAM_DATA, x), "read") && step_ok(hg_param_read(b, i, HG_PARAM_DATA, y), "read");
        differ += ok && memcmp(x, y, sizeof(float) * (size_t)info.numel) != 0;
        free(x), free(y);
    }
    if (ok) printf("  %-4s two runs of three steps: %d of %d parameters differ in any bit\n", differ ? "FAIL" : "ok", differ,
                   hg_param_count(a));
    failures += differ;
    free(tok), free(tgt);
    hg_model_free(a), hg_model_free(b), hg_model_free(c);
}

/* A profiled training pass on the GPU: the profiler waits for each op's kernels (the
 * backend's wait), so an op's event spans its kernels, not only their launch, and the op
 * events tile the pass as on the CPU (where tests/test_profile.c asks 95%). Checked:
 * every event is well-formed, the op events cover at least 60% of the step and their
 * sum does not exceed it. */
static void test_profiled(const run *r) {
    hg_model *g = make(r, HG_DEVICE_CUDA);
    hg_profiler *p = NULL;
    if (!g || !step_ok(hg_profiler_create(&p, 100000), "hg_profiler_create") || !step_ok(hg_model_set_profiler(g, p), "set profiler")) {
        hg_model_free(g), hg_profiler_free(p);
        return;
    }
    printf("%s, profiled on the GPU:\n", r->name);
    const size_t n = (size_t)r->B * r->T;
    int32_t *tok = malloc(sizeof(int32_t) * n), *tgt = malloc(sizeof(int32_t) * n);
    batch(r, tok, tgt);
    float loss;
    int ok = step_ok(hg_zero_grad(g), "zero") && step_ok(hg_forward_backward(g, tok, tgt, r->B, r->T, 1.0f, &loss), "warm-up");
    hg_profiler_reset(p);
    hg_profiler_step_begin(p);
    ok = ok && step_ok(hg_forward_backward(g, tok, tgt, r->B, r->T, 1.0f, &loss), "profiled pass");
    hg_profiler_step_end(p);
    double ops = 0.0, step = 0.0;
    int events = 0, bad = 0;
    for (int i = 0; ok && i < hg_profiler_count(p); i++) {
        hg_prof_event e;
        if (!step_ok(hg_profiler_event(p, i, &e), "hg_profiler_event")) break;
        bad += !(e.end >= e.start && e.start >= 0.0);
        if (e.region && e.pass == HG_PASS_STEP) step = e.end - e.start;
        if (!e.region) ops += e.end - e.start, events++;
    }
    int good = ok && !bad && events > 0 && step > 0.0 && ops <= step && ops >= 0.6 * step;
    printf("  %-4s %d op events cover %.3f ms of a %.3f ms pass (%.0f%%), %d malformed\n", good ? "ok" : "FAIL", events, ops * 1e3,
           step * 1e3, step > 0.0 ? 100.0 * ops / step : 0.0, bad);
    failures += !good;
    free(tok), free(tgt);
    hg_model_free(g), hg_profiler_free(p);
}

/* Without a usable GPU, asking for one is a clean HG_ERR_UNSUPPORTED; then skip. */
static void skip_without_gpu(void) {
    hg_config cfg;
    hg_config_preset("tiny", &cfg);
    hg_options o = hg_options_default();
    o.batch = 1, o.seq_len = 8, o.device = HG_DEVICE_CUDA;
    hg_model *m = NULL;
    hg_status st = hg_model_create(&m, &cfg, &o);
    if (st == HG_OK) {
        hg_model_free(m);
        return;
    }
    if (st != HG_ERR_UNSUPPORTED || !strlen(hg_last_error())) {
        printf("FAIL: a CUDA model without a GPU gave %s: '%s', want unsupported with a message\n", hg_status_name(st), hg_last_error());
        exit(1);
    }
    printf("skipped: no CUDA device (%s)\n", hg_last_error());
    exit(CUDA_SKIP);
}

/* test_cuda_model       every run, then the graph checks, in this process
 * test_cuda_model I     only check I (0 .. count-1: the runs, the graph checks, the
 *                       profiled pass, the deterministic runs)
 * test_cuda_model --count
 * test_cuda_model --list   "I: what check I runs", one a line
 * scripts/gpu_session.sh runs each check in a process of its own, so that a sticky CUDA
 * error in one does not hide the others. */
int main(int argc, char **argv) {
    hg_config odd, tiny, wide = {.vocab_size = 50257, .max_seq_len = 128, .n_layer = 2, .n_head = 12, .d_model = 768};
    hg_config_preset("odd", &odd);
    hg_config_preset("tiny", &tiny);
    hg_config tiny_drop = tiny;
    tiny_drop.dropout = 0.1f;
    /* the CS336 model's switches (cs336-* presets) at odd's size; ReLU^2 with RoPE and a
     * LayerNorm without affine parameters; GELU without biases (its epilogue without one) */
    hg_config cs336 = odd, relu2 = odd, gelu_nobias = odd, llama, qwen2, qwen3;
    cs336.norm = HG_NORM_RMSNORM, cs336.position = HG_POS_ROPE, cs336.mlp = HG_MLP_SWIGLU;
    cs336.omit = HG_OMIT_ALL_BIAS, cs336.untied = 1, cs336.d_ff = 160;
    relu2.position = HG_POS_ROPE, relu2.mlp = HG_MLP_RELU2, relu2.omit = HG_OMIT_NORM_WEIGHT | HG_OMIT_NORM_BIAS;
    gelu_nobias.omit = HG_OMIT_ALL_BIAS;
    /* grouped-query attention: the presets (4 query heads on 2 kv heads), and one kv head
     * for the odd shape's three with a head_dim of 48 (q and attention 144 wide, C 96) */
    hg_config_preset("llama-tiny", &llama);
    hg_config_preset("qwen2-tiny", &qwen2);
    hg_config_preset("qwen3-tiny", &qwen3);
    hg_config mqa = cs336;
    mqa.n_kv_head = 1, mqa.head_dim = 48;
    /* the block layouts with the switches of the families that use them, at odd's size:
     * Gemma 2's sandwich with GeGLU, the embedding scale, both caps and its head size 256;
     * OLMo 2's post-norm with its q/k norm over all heads; Phi-2's parallel block with
     * partial rotary embeddings and the output bias */
    hg_config sandwich = cs336, postnorm = cs336, parallel = odd;
    sandwich.block = HG_BLOCK_SANDWICH, sandwich.mlp = HG_MLP_GEGLU, sandwich.embed_scale = 9.8f;
    sandwich.logit_softcap = 30.0f, sandwich.attn_softcap = 1.0f, sandwich.head_dim = 256, sandwich.untied = 0;
    postnorm.block = HG_BLOCK_POSTNORM, postnorm.qk_norm = 1, postnorm.qk_norm_whole = 1;
    parallel.block = HG_BLOCK_PARALLEL, parallel.position = HG_POS_ROPE, parallel.rotary_dim = 16;
    parallel.lm_head_bias = 1, parallel.untied = 1;
    /* Gemma 2's windows (every other layer) and Mistral's (every layer), shorter than T */
    hg_config window_alt = sandwich, window_all = llama;
    window_alt.sliding_window = 16, window_alt.window_period = 2;
    window_all.sliding_window = 24;
    const run runs[] = {
        RUN("odd fp32", odd, 3, 37, HG_PRECISION_FP32, 0, HG_RECOMPUTE_NONE),
        RUN("odd bf16", odd, 3, 37, HG_PRECISION_BF16, 0, HG_RECOMPUTE_NONE),
        RUN("tiny fp32 dropout 0.1", tiny_drop, 2, 64, HG_PRECISION_FP32, 0, HG_RECOMPUTE_NONE),
        RUN("tiny bf16 stochastic rounding", tiny, 2, 64, HG_PRECISION_BF16, HG_FLAG_STOCHASTIC_ROUNDING, HG_RECOMPUTE_NONE),
        RUN("gpt2-small width, 2 layers, fp32", wide, 2, 128, HG_PRECISION_FP32, 0, HG_RECOMPUTE_NONE),
        RUN("gpt2-small width, 2 layers, bf16", wide, 2, 128, HG_PRECISION_BF16, 0, HG_RECOMPUTE_NONE),
        RUN("odd as cs336 (rmsnorm, rope, swiglu, untied) fp32", cs336, 3, 37, HG_PRECISION_FP32, 0, HG_RECOMPUTE_NONE),
        RUN("odd as cs336 (rmsnorm, rope, swiglu, untied) bf16", cs336, 3, 37, HG_PRECISION_BF16, 0, HG_RECOMPUTE_NONE),
        RUN("odd relu2, rope, layernorm without w, b fp32", relu2, 3, 37, HG_PRECISION_FP32, 0, HG_RECOMPUTE_NONE),
        RUN("odd relu2, rope, layernorm without w, b bf16", relu2, 3, 37, HG_PRECISION_BF16, 0, HG_RECOMPUTE_NONE),
        RUN("odd gelu without biases fp32", gelu_nobias, 3, 37, HG_PRECISION_FP32, 0, HG_RECOMPUTE_NONE),
        RUN("llama-tiny fp32", llama, 2, 64, HG_PRECISION_FP32, 0, HG_RECOMPUTE_NONE),
        RUN("llama-tiny bf16", llama, 2, 64, HG_PRECISION_BF16, 0, HG_RECOMPUTE_NONE),
        RUN("qwen2-tiny (q/k/v bias, tied) bf16", qwen2, 2, 64, HG_PRECISION_BF16, 0, HG_RECOMPUTE_NONE),
        RUN("odd as cs336, 1 kv head, head_dim 48 fp32", mqa, 3, 37, HG_PRECISION_FP32, 0, HG_RECOMPUTE_NONE),
        RUN("odd as cs336, 1 kv head, head_dim 48 bf16", mqa, 3, 37, HG_PRECISION_BF16, 0, HG_RECOMPUTE_NONE),
        RUN("qwen3-tiny (q/k norm) fp32", qwen3, 2, 64, HG_PRECISION_FP32, 0, HG_RECOMPUTE_NONE),
        RUN("qwen3-tiny (q/k norm) bf16", qwen3, 2, 64, HG_PRECISION_BF16, 0, HG_RECOMPUTE_NONE),
        RUN("odd sandwich, GeGLU, embedding scale, both caps, head_dim 256 fp32", sandwich, 3, 37, HG_PRECISION_FP32, 0, HG_RECOMPUTE_NONE),
        RUN("odd sandwich, GeGLU, embedding scale, both caps, head_dim 256 bf16", sandwich, 3, 37, HG_PRECISION_BF16, 0, HG_RECOMPUTE_NONE),
        RUN("odd post-norm, whole q/k norm fp32", postnorm, 3, 37, HG_PRECISION_FP32, 0, HG_RECOMPUTE_NONE),
        RUN("odd post-norm, whole q/k norm bf16", postnorm, 3, 37, HG_PRECISION_BF16, 0, HG_RECOMPUTE_NONE),
        RUN("odd parallel, partial rotary, output bias fp32", parallel, 3, 37, HG_PRECISION_FP32, 0, HG_RECOMPUTE_NONE),
        RUN("odd parallel, partial rotary, output bias bf16", parallel, 3, 37, HG_PRECISION_BF16, 0, HG_RECOMPUTE_NONE),
        /* written without a GPU on 2026-11-28 (recompute, LoRA, frozen tensors): refused on
         * CUDA unless HANDGRAD_CUDA_UNTESTED=1 */
        RUN("llama-tiny bf16, recompute block", llama, 2, 64, HG_PRECISION_BF16, 0, HG_RECOMPUTE_BLOCK),
        RUN("llama-tiny bf16, bf16 moments", llama, 2, 64, HG_PRECISION_BF16, 0, HG_RECOMPUTE_NONE, .state_bf16 = 1),
        RUN("odd fp32, bf16 moments", odd, 3, 37, HG_PRECISION_FP32, 0, HG_RECOMPUTE_NONE, .state_bf16 = 1),
        RUN("odd fp32, packed documents", odd, 3, 37, HG_PRECISION_FP32, 0, HG_RECOMPUTE_NONE, .doc_len = 9),
        RUN("llama-tiny bf16, packed documents", llama, 2, 48, HG_PRECISION_BF16, 0, HG_RECOMPUTE_NONE, .doc_len = 20),
        RUN("odd sandwich bf16, packed documents, windows", window_alt, 3, 37, HG_PRECISION_BF16, 0, HG_RECOMPUTE_NONE,
            .doc_len = 12),
        RUN("odd sandwich bf16, recompute attn", sandwich, 3, 37, HG_PRECISION_BF16, 0, HG_RECOMPUTE_ATTN),
        RUN("qwen3-tiny fp32, recompute mlp", qwen3, 2, 64, HG_PRECISION_FP32, 0, HG_RECOMPUTE_MLP),
        RUN("odd parallel fp32, recompute block", parallel, 3, 37, HG_PRECISION_FP32, 0, HG_RECOMPUTE_BLOCK),
        RUN("llama-tiny fp32, LoRA on all seven, dropout 0.1", llama, 2, 64, HG_PRECISION_FP32, 0, HG_RECOMPUTE_NONE,
            .lora = "q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj", .lora_dropout = 0.1f),
        RUN("llama-tiny bf16, LoRA on q|v and down", llama, 2, 64, HG_PRECISION_BF16, 0, HG_RECOMPUTE_NONE,
            .lora = "q_proj,v_proj,down_proj"),
        RUN("odd fp32, LoRA on c_attn and c_fc (GELU unfused)", odd, 3, 37, HG_PRECISION_FP32, 0, HG_RECOMPUTE_NONE,
            .lora = "c_attn,c_fc"),
        RUN("odd as cs336 bf16, frozen wte and MLPs", cs336, 3, 37, HG_PRECISION_BF16, 0, HG_RECOMPUTE_NONE,
            .freeze = "wte.weight,h.*.mlp.*"),
        RUN("llama-tiny bf16, LoRA on q|v and down, base held in bf16", llama, 2, 64, HG_PRECISION_BF16, 0,
            HG_RECOMPUTE_NONE, .lora = "q_proj,v_proj,down_proj", .base_bf16 = 1),
        RUN("odd sandwich bf16, sliding window 16 every other layer", window_alt, 3, 37, HG_PRECISION_BF16, 0,
            HG_RECOMPUTE_NONE),
        RUN("llama-tiny fp32, sliding window 24 every layer", window_all, 2, 64, HG_PRECISION_FP32, 0, HG_RECOMPUTE_NONE),
        RUN("llama-tiny bf16, sliding window 24 every layer", window_all, 2, 64, HG_PRECISION_BF16, 0, HG_RECOMPUTE_NONE),
    };
    const int nruns = (int)(sizeof runs / sizeof runs[0]), graphed[] = {1, 7, 12}, count = nruns + 6;
    if (argc == 2 && !strcmp(argv[1], "--count")) {
        printf("%d\n", count);
        return 0;
    }
    if (argc == 2 && !strcmp(argv[1], "--list")) {
        for (int i = 0; i < count; i++)
            printf("%d: %s%s\n", i, i < nruns ? runs[i].name : i < nruns + 3 ? runs[graphed[i - nruns]].name
                                   : i == nruns + 3 ? runs[5].name : runs[i == nruns + 4 ? 1 : 15].name,
                   i < nruns ? "" : i < nruns + 3 ? ", CUDA graph" : i == nruns + 3 ? ", profiled" : ", deterministic");
        return 0;
    }
    char *end = NULL;
    long only = argc == 2 ? strtol(argv[1], &end, 10) : -1;
    if (argc > 2 || (argc == 2 && (*end || only < 0 || only >= count))) {
        fprintf(stderr, "usage: test_cuda_model [0..%d | --count]\n", count - 1);
        return 2;
    }
    skip_without_gpu();
    for (int i = 0; i < count; i++) {
        if (only >= 0 && i != only) continue;
        if (i < nruns)
            test_run(&runs[i]);
        else if (i < nruns + 3)
            test_graphs(&runs[graphed[i - nruns]]);
        else if (i == nruns + 3)
            test_profiled(&runs[5]); /* GPT-2 small's width and vocabulary, bf16 */
        else
            test_deterministic(&runs[i == nruns + 4 ? 1 : 15]); /* odd bf16; one kv head, head_dim 48, bf16 */
    }
    printf(failures ? "%d check(s) failed\n" : "ok\n", failures);
    return failures ? 1 : 0;
}
