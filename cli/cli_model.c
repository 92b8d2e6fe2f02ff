/* The shared model and shape flags (cli_model.h). */
#include "cli_model.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_args.h"

cli_model cli_model_default(void) {
    cli_model o = {.preset = "small", .batch = 4, .ctx = 256, .threads = 0, .seed = 1,
                   .device = "cpu", .precision = "fp32", .flags = 0};
    return o;
}

int cli_model_flag(const char *cmd, cli_model *o, int c, const char *arg) {
    int64_t v;
    switch (c) {
    case CLI_OPT_MODEL: o->preset = arg; return 1;
    case CLI_OPT_BATCH: return cli_parse_int(cmd, "--batch", arg, 1, INT_MAX, &o->batch) ? -1 : 1;
    case CLI_OPT_CTX: return cli_parse_int(cmd, "--ctx", arg, 1, INT_MAX, &o->ctx) ? -1 : 1;
    case CLI_OPT_THREADS: return cli_parse_int(cmd, "--threads", arg, 0, INT_MAX, &o->threads) ? -1 : 1;
    case CLI_OPT_SEED: if (cli_parse_i64(cmd, "--seed", arg, 0, INT64_MAX, &v)) return -1; o->seed = (uint64_t)v; return 1;
    case CLI_OPT_DEVICE:
        if (strcmp(arg, "cpu") && strcmp(arg, "cuda")) {
            fprintf(stderr, "handgrad %s: --device '%s' must be cpu or cuda\n", cmd, arg);
            return -1;
        }
        o->device = arg;
        return 1;
    case CLI_OPT_PRECISION:
        if (strcmp(arg, "fp32") && strcmp(arg, "bf16")) {
            fprintf(stderr, "handgrad %s: --precision '%s' must be fp32 or bf16\n", cmd, arg);
            return -1;
        }
        o->precision = arg;
        return 1;
    case CLI_OPT_CUDA_GRAPHS: o->flags |= HG_FLAG_CUDA_GRAPHS; return 1;
    case CLI_OPT_ARCH: o->arch = arg; return 1;
    default: return 0;
    }
}

int cli_model_setup(const char *cmd, const cli_model *o, int training, hg_config *cfg, hg_options *opt) {
    if (hg_config_preset(o->preset, cfg) != HG_OK) {
        fprintf(stderr, "handgrad %s: %s\n", cmd, hg_last_error());
        return 1;
    }
    if (cli_apply_arch(cmd, o->arch, cfg)) return 1;
    *opt = hg_options_default();
    opt->batch = o->batch;
    opt->seq_len = o->ctx;
    opt->threads = o->threads;
    opt->seed = o->seed;
    opt->training = training;
    cli_model_device(o, opt);
    return 0;
}

void cli_model_device(const cli_model *o, hg_options *opt) {
    opt->device = strcmp(o->device, "cuda") ? HG_DEVICE_CPU : HG_DEVICE_CUDA;
    opt->precision = strcmp(o->precision, "bf16") ? HG_PRECISION_FP32 : HG_PRECISION_BF16;
    opt->flags = o->flags;
}

int cli_apply_arch(const char *cmd, const char *spec, hg_config *cfg) {
    if (!spec || !*spec) return 0;
    char buf[1024];
    if (strlen(spec) >= sizeof buf) {
        fprintf(stderr, "handgrad %s: --arch is longer than %zu characters\n", cmd, sizeof buf - 1);
        return 1;
    }
    snprintf(buf, sizeof buf, "%s", spec);
    char *save = NULL;
    for (char *item = strtok_r(buf, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(item, '=');
        if (!eq) {
            fprintf(stderr, "handgrad %s: --arch '%s' is not FIELD=VALUE\n", cmd, item);
            return 1;
        }
        *eq = 0;
        if (hg_config_set(cfg, item, eq + 1) != HG_OK) {
            fprintf(stderr, "handgrad %s: --arch: %s\n", cmd, hg_last_error());
            return 1;
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
