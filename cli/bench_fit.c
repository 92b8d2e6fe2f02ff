/* handgrad bench --fit: whether a training step fits this machine, for each model of the
 * ladder under each memory setting, from the memory plan alone (hg_memory_required, the
 * step's trace): nothing is allocated or run. A row's need is the plan's total plus what
 * the process holds before any model and the runtimes' allowance, as the timed rows
 * estimate it (cmd_bench.c), against hg_memory_available(). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

/* The settings, in columns: what each sets on the options. */
typedef struct fit_setting {
    const char *name;
    hg_precision precision;
    hg_recompute recompute;
    hg_precision state; /* AdamW's moments, and the kept gradients */
    int lora; /* r=16 on every linear layer, the base frozen and held in bf16 */
} fit_setting;

static const fit_setting settings[] = {
    {"fp32", HG_PRECISION_FP32, HG_RECOMPUTE_NONE, HG_PRECISION_FP32, 0},
    {"bf16", HG_PRECISION_BF16, HG_RECOMPUTE_NONE, HG_PRECISION_FP32, 0},
    {"bf16 block", HG_PRECISION_BF16, HG_RECOMPUTE_BLOCK, HG_PRECISION_FP32, 0},
    {"bf16 block compact", HG_PRECISION_BF16, HG_RECOMPUTE_BLOCK, HG_PRECISION_BF16, 0},
    {"LoRA bf16", HG_PRECISION_BF16, HG_RECOMPUTE_NONE, HG_PRECISION_FP32, 1},
    {"LoRA bf16 block", HG_PRECISION_BF16, HG_RECOMPUTE_BLOCK, HG_PRECISION_FP32, 1},
};
enum { NSET = sizeof settings / sizeof settings[0] };

/* Adapters on every linear layer, by the names of the class cfg is stored as: Llama's
 * seven, or GPT-2's three. */
static hg_status every_linear(const hg_config *cfg, hg_lora *l) {
    *l = (hg_lora){.r = 16, .alpha = 32};
    if (hg_hf_lora_targets(cfg, NULL, "q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj", l) == HG_OK) return HG_OK;
    *l = (hg_lora){.r = 16, .alpha = 32};
    return hg_hf_lora_targets(cfg, NULL, "c_attn,c_proj,c_fc", l);
}

/* The need in bytes of one (model, setting), or 0 with the reason in why. */
static size_t need_of(const hg_config *cfg, const bench_opts *o, int T, const fit_setting *s, size_t baseline,
                      hg_memory_plan *plan, char *why, size_t cap) {
    hg_options opt = hg_options_default();
    opt.batch = o->m.batch, opt.seq_len = T, opt.threads = o->threads.v[0];
    opt.precision = s->precision, opt.recompute = s->recompute, opt.optim_state = opt.grad_precision = s->state;
    if (s->lora) {
        opt.base_precision = HG_PRECISION_BF16;
        if (every_linear(cfg, &opt.lora) != HG_OK) return snprintf(why, cap, "%s", hg_last_error()), 0;
    }
    if (hg_memory_required(cfg, &opt, plan) != HG_OK) return snprintf(why, cap, "%s", hg_last_error()), 0;
    return plan->total + baseline + bench_runtime_allowance(opt.precision);
}

int bench_fit(const bench_opts *o) {
    static const char *const ladder[] = {"small", "medium", "large", "xl", "2.7B",
                                         "cs336-small", "cs336-medium", "cs336-large", "cs336-xl", "cs336-2.7B"};
    const int from_flag = o->m.shape.model != NULL, n = from_flag ? o->nmodels : (int)(sizeof ladder / sizeof *ladder);
    const int T = o->ctx.v[0];
    const size_t baseline = bench_rss(), avail = hg_memory_available();
    int header = 1;
    if (o->format == OUT_TABLE) {
        printf("handgrad bench --fit: a training step at batch %d, ctx %d, against %.1f GiB available "
               "(the memory plan; block: --recompute block; compact: --optim-state bf16 --grad-precision bf16; LoRA: "
               "r=16 on every linear layer, base held in bf16)\n",
               o->m.batch, T, bench_gib(avail));
        printf("%-14s %9s", "Model", "params");
        for (int s = 0; s < NSET; s++) printf(" %17s", settings[s].name);
        printf("\n");
    }
    for (int i = 0; i < n; i++) {
        const char *name = from_flag ? o->models[i] : ladder[i];
        hg_config cfg;
        if (hg_config_preset(name, &cfg) != HG_OK) return fprintf(stderr, "handgrad bench: %s\n", hg_last_error()), 2;
        if (T > cfg.max_seq_len) cfg.max_seq_len = T;
        if (o->format == OUT_TABLE) printf("%-14s %8.2fB", name, (double)hg_config_param_count(&cfg, 1) / 1e9);
        for (int s = 0; s < NSET; s++) {
            hg_memory_plan plan = {0};
            char why[512] = "";
            const size_t need = need_of(&cfg, o, T, &settings[s], baseline, &plan, why, sizeof why);
            if (o->format == OUT_TABLE) {
                char cell[32];
                if (need) snprintf(cell, sizeof cell, "%.2f GiB %s", bench_gib(need), need <= avail ? "fits" : "no");
                else snprintf(cell, sizeof cell, "refused");
                printf(" %17s", cell);
                continue;
            }
            bench_rec rec = {.n = 0};
            rec_str(&rec, "kind", "fit");
            rec_str(&rec, "model", name);
            rec_int(&rec, "batch", o->m.batch);
            rec_int(&rec, "ctx", T);
            rec_str(&rec, "setting", settings[s].name);
            rec_int(&rec, "need_bytes", (long long)need);
            rec_int(&rec, "params_bytes", (long long)plan.params);
            rec_int(&rec, "grads_bytes", (long long)plan.grads);
            rec_int(&rec, "optimizer_bytes", (long long)plan.optimizer);
            rec_int(&rec, "activations_bytes", (long long)plan.activations);
            rec_int(&rec, "scratch_bytes", (long long)plan.scratch);
            rec_int(&rec, "available_bytes", (long long)avail);
            rec_str(&rec, "fits", need && need <= avail ? "yes" : "no");
            rec_str(&rec, "note", why);
            rec_print(&rec, o->format, &header);
        }
        if (o->format == OUT_TABLE) printf("\n");
    }
    return 0;
}
