/* The options that the commands building a model share (cli_model.h). */
#include "cli_model.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

cli_model cli_model_default(void) {
    return (cli_model){.shape.model = "small", .batch = 4, .ctx = 256, .seed = 1, .dev = CLI_DEVICE_DEFAULT};
}

int cli_shape_config(const char *cmd, const cli_shape *s, const hg_config *bare, hg_config *cfg) {
    if (s->model) {
        if (hg_config_preset(s->model, cfg) != HG_OK) {
            fprintf(stderr, "handgrad %s: --model: %s\n", cmd, hg_last_error());
            return CLI_USAGE;
        }
    } else if (!s->n_layer || !s->n_head || !s->d_model) {
        fprintf(stderr, "handgrad %s: no model: give --model NAME, or --n-layer, --n-head and --d-model\n", cmd);
        return CLI_USAGE;
    } else {
        *cfg = *bare;
    }
    if (s->n_layer) cfg->n_layer = s->n_layer;
    if (s->n_head) cfg->n_head = s->n_head;
    if (s->d_model) cfg->d_model = s->d_model, cfg->d_ff = s->model ? cfg->d_ff : 0;
    if (s->d_ff) cfg->d_ff = s->d_ff;
    if (s->max_seq_len) cfg->max_seq_len = s->max_seq_len;
    if (s->vocab_size) cfg->vocab_size = s->vocab_size;
    return cli_apply_arch(cmd, s->arch, cfg);
}

int cli_model_setup(const char *cmd, const cli_model *m, int training, hg_config *cfg, hg_options *opt) {
    hg_config bare = {.vocab_size = 50257, .max_seq_len = m->ctx > 1024 ? m->ctx : 1024};
    if (cli_shape_config(cmd, &m->shape, &bare, cfg) || cli_device_check(cmd, &m->dev)) return CLI_USAGE;
    if (hg_config_validate(cfg) != HG_OK) {
        fprintf(stderr, "handgrad %s: model: %s\n", cmd, hg_last_error());
        return CLI_USAGE;
    }
    *opt = hg_options_default();
    opt->batch = m->batch;
    opt->seq_len = m->ctx ? m->ctx : cfg->max_seq_len;
    opt->threads = m->threads;
    opt->seed = (uint64_t)m->seed;
    opt->training = training;
    cli_device_options(&m->dev, opt);
    return 0;
}

int cli_device_check(const char *cmd, const cli_device *d) {
    if (strcmp(d->precision, "bf16") || !strcmp(d->device, "cuda")) return 0;
    const char *slow = hg_cpu_bf16_slow();
    if (slow) fprintf(stderr, "handgrad %s: note: --precision bf16: %s\n", cmd, slow);
    return 0;
}

void cli_device_options(const cli_device *d, hg_options *opt) {
    opt->device = strcmp(d->device, "cuda") ? HG_DEVICE_CPU : HG_DEVICE_CUDA;
    opt->precision = strcmp(d->precision, "bf16") ? HG_PRECISION_FP32 : HG_PRECISION_BF16;
    opt->base_precision = d->base_precision && !strcmp(d->base_precision, "bf16") ? HG_PRECISION_BF16 : HG_PRECISION_FP32;
    opt->optim_state = d->optim_state && !strcmp(d->optim_state, "bf16") ? HG_PRECISION_BF16 : HG_PRECISION_FP32;
    opt->grad_precision = d->grad_precision && !strcmp(d->grad_precision, "bf16") ? HG_PRECISION_BF16 : HG_PRECISION_FP32;
    opt->flags = (d->cuda_graphs ? HG_FLAG_CUDA_GRAPHS : 0) | (d->deterministic ? HG_FLAG_DETERMINISTIC : 0);
    static const char *const modes[] = {"none", "attn", "mlp", "block"};
    for (int i = 0; d->recompute && i < 4; i++)
        if (!strcmp(d->recompute, modes[i])) opt->recompute = (hg_recompute)i;
}

/* buf with each `from` replaced by `to` (as long as it fits in cap). */
static void replace_all(char *buf, size_t cap, const char *from, const char *to) {
    size_t nf = strlen(from), nt = strlen(to);
    for (char *at = strstr(buf, from); at; at = strstr(at + nt, from)) {
        size_t tail = strlen(at + nf);
        if ((size_t)(at - buf) + nt + tail + 1 > cap) return;
        memmove(at + nt, at + nf, tail + 1);
        memcpy(at, to, nt);
    }
}

const char *cli_model_why(const hg_options *opt, const char *what, char *buf, size_t cap) {
    const char *e = hg_last_error();
    if (!strncmp(e, "device: ", 8))
        snprintf(buf, cap, "--device %s: %s", opt->device == HG_DEVICE_CUDA ? "cuda" : "cpu", e + 8);
    else if (!strncmp(e, "precision: ", 11))
        snprintf(buf, cap, "--precision %s: %s", opt->precision == HG_PRECISION_BF16 ? "bf16" : "fp32", e + 11);
    else if (!strncmp(e, "base_precision: ", 16))
        snprintf(buf, cap, "--base-precision %s: %s", opt->base_precision == HG_PRECISION_BF16 ? "bf16" : "fp32", e + 16);
    else if (!strncmp(e, "optim_state: ", 13))
        snprintf(buf, cap, "--optim-state %s: %s", opt->optim_state == HG_PRECISION_BF16 ? "bf16" : "fp32", e + 13);
    else if (!strncmp(e, "grad_precision: ", 16))
        snprintf(buf, cap, "--grad-precision %s: %s", opt->grad_precision == HG_PRECISION_BF16 ? "bf16" : "fp32", e + 16);
    else if (!strncmp(e, "recompute: ", 11))
        snprintf(buf, cap, "--recompute: %s", e + 11);
    else snprintf(buf, cap, "%s: %s", what, e);
    /* the memory dials hg_model_create names, as this command's options */
    replace_all(buf, cap, "recompute BLOCK", "--recompute block");
    replace_all(buf, cap, "optim_state BF16", "--optim-state bf16");
    replace_all(buf, cap, "grad_precision BF16", "--grad-precision bf16");
    replace_all(buf, cap, "adapters (lora)", "adapters (--lora)");
    return buf;
}

int cli_apply_arch(const char *cmd, const char *spec, hg_config *cfg) {
    if (!spec || !*spec) return 0;
    char buf[1024];
    if (strlen(spec) >= sizeof buf) {
        fprintf(stderr, "handgrad %s: --arch is longer than %zu characters\n", cmd, sizeof buf - 1);
        return CLI_USAGE;
    }
    snprintf(buf, sizeof buf, "%s", spec);
    char *save = NULL;
    for (char *item = strtok_r(buf, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(item, '=');
        if (!eq) {
            fprintf(stderr, "handgrad %s: --arch '%s' is not FIELD=VALUE\n", cmd, item);
            return CLI_USAGE;
        }
        *eq = 0;
        if (hg_config_set(cfg, item, eq + 1) != HG_OK) {
            fprintf(stderr, "handgrad %s: --arch: %s\n", cmd, hg_last_error());
            return CLI_USAGE;
        }
    }
    return 0;
}

void cli_random_batch(uint64_t seed, int vocab, int n, int32_t *tokens, int32_t *targets) {
    uint64_t x = seed * 6364136223846793005ull + 1442695040888963407ull;
    for (int i = 0; i < n; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        tokens[i] = (int32_t)((x >> 33) % (uint64_t)vocab);
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        targets[i] = (int32_t)((x >> 33) % (uint64_t)vocab);
    }
}

/* ---- adapters and frozen tensors ---- */

__attribute__((format(printf, 2, 3))) static int usage(const char *cmd, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "handgrad %s: ", cmd);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return CLI_USAGE;
}

int cli_parse_lora(const char *cmd, const char *spec, hg_lora *lora, char *targets, size_t cap) {
    char buf[1024];
    if (strlen(spec) >= sizeof buf) return usage(cmd, "--lora: the spec is longer than %zu characters", sizeof buf - 1);
    snprintf(buf, sizeof buf, "%s", spec);
    *lora = (hg_lora){.r = 8, .alpha = 16};
    targets[0] = 0;
    int in_targets = 0;
    for (char *save = NULL, *kv = strtok_r(buf, ",", &save); kv; kv = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(kv, '='), *end = NULL;
        const char *key = kv, *v = eq ? eq + 1 : kv;
        if (eq) *eq = 0, in_targets = 0;
        else if (!in_targets) return usage(cmd, "--lora: '%s' is not KEY=VALUE (r, alpha, dropout, targets, init, rslora)", kv);
        if (!eq || !strcmp(key, "targets")) { /* a word without '=' continues targets */
            size_t at = strlen(targets);
            if (!*v || at + strlen(v) + 2 > cap) return usage(cmd, "--lora: targets: a module name is empty, or too many");
            snprintf(targets + at, cap - at, "%s%s", at ? "," : "", v);
            in_targets = 1;
        } else if (!strcmp(key, "r")) {
            long r = strtol(v, &end, 10);
            if (end == v || *end || r < 1 || r > 65536) return usage(cmd, "--lora: r=%s is not an integer in [1, 65536]", v);
            lora->r = (int)r;
        } else if (!strcmp(key, "alpha") || !strcmp(key, "dropout")) {
            double x = strtod(v, &end);
            if (end == v || *end || !(x >= 0) || x > 1e30) return usage(cmd, "--lora: %s=%s is not a number >= 0", key, v);
            if (*key == 'a') lora->alpha = (float)x;
            else lora->dropout = (float)x;
        } else if (!strcmp(key, "init")) {
            if (!strcmp(v, "gaussian")) lora->init = HG_LORA_INIT_GAUSSIAN;
            else if (!strcmp(v, "kaiming") || !strcmp(v, "true")) lora->init = HG_LORA_INIT_KAIMING;
            else return usage(cmd, "--lora: init=%s: kaiming (PEFT's default) or gaussian", v);
        } else if (!strcmp(key, "rslora")) {
            if (strcmp(v, "true") && strcmp(v, "false")) return usage(cmd, "--lora: rslora=%s: true or false", v);
            lora->rslora = !strcmp(v, "true");
        } else {
            return usage(cmd, "--lora: '%s' is unknown (r, alpha, dropout, targets, init, rslora)", key);
        }
    }
    if (!targets[0]) return usage(cmd, "--lora: give targets=MODULE,... (PEFT's module names, e.g. targets=q_proj,v_proj)");
    return 0;
}

int cli_adapt(const char *cmd, const char *lora, const char *adapter, const char *freeze, const hg_config *cfg,
              const char *hf_class, hg_lora *out, char **freeze_out) {
    char targets[1024] = "";
    *out = (hg_lora){0};
    *freeze_out = NULL;
    if (lora && adapter) return usage(cmd, "use one of --lora (new adapters) and --adapter DIR (PEFT's)");
    if (adapter) {
        hg_peft_config pc;
        if (hg_peft_config_load(adapter, &pc) != HG_OK)
            return fprintf(stderr, "handgrad %s: --adapter: %s\n", cmd, hg_last_error()), 1;
        *out = pc.lora;
        snprintf(targets, sizeof targets, "%s", pc.targets);
    } else if (lora && cli_parse_lora(cmd, lora, out, targets, sizeof targets)) {
        return CLI_USAGE;
    }
    if ((lora || adapter) && hg_hf_lora_targets(cfg, hf_class, targets, out) != HG_OK)
        return fprintf(stderr, "handgrad %s: %s: %s\n", cmd, lora ? "--lora" : "--adapter", hg_last_error()), 1;
    if (!freeze) return 0;
    const size_t cap = 1 << 20;
    if (!(*freeze_out = malloc(cap))) return fprintf(stderr, "handgrad %s: out of memory\n", cmd), 1;
    if (hg_hf_freeze_names(cfg, hf_class, freeze, *freeze_out, cap) == HG_OK) return 0;
    const char *e = hg_last_error();
    fprintf(stderr, "handgrad %s: --freeze: %s\n", cmd, e + (strncmp(e, "freeze: ", 8) ? 0 : 8));
    free(*freeze_out);
    *freeze_out = NULL;
    return 1;
}

int cli_model_adapt(const char *cmd, const cli_model *m, const hg_config *cfg, hg_options *opt, char **freeze) {
    int rc = cli_adapt(cmd, m->lora, NULL, m->freeze, cfg, NULL, &opt->lora, freeze);
    opt->freeze = *freeze;
    return rc;
}
