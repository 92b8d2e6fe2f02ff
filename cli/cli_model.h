/* The model and shape flags that the commands which build a model share (bench,
 * profile): --model, --batch, --ctx, --threads, --seed, --device, --precision,
 * --cuda-graphs, parsed in one place, and the random batch they run on. */
#ifndef HG_CLI_MODEL_H
#define HG_CLI_MODEL_H

#include <getopt.h>
#include <stdint.h>

#include "handgrad.h"

typedef struct cli_model {
    const char *preset;
    int batch, ctx, threads;
    uint64_t seed;
    const char *device, *precision; /* "cpu" or "cuda"; "fp32" or "bf16" (checked) */
    unsigned flags;                 /* HG_FLAG_* */
    const char *arch;               /* --arch FIELD=VALUE,...: config fields over the preset */
} cli_model;

/* getopt_long values of the shared flags, clear of any short option. */
enum { CLI_OPT_MODEL = 0x100, CLI_OPT_BATCH, CLI_OPT_CTX, CLI_OPT_THREADS, CLI_OPT_SEED,
       CLI_OPT_DEVICE, CLI_OPT_PRECISION, CLI_OPT_CUDA_GRAPHS, CLI_OPT_ARCH };

/* Entries for a command's struct option array. */
#define CLI_MODEL_OPTIONS                                                                            \
    {"model", required_argument, 0, CLI_OPT_MODEL}, {"batch", required_argument, 0, CLI_OPT_BATCH},  \
    {"ctx", required_argument, 0, CLI_OPT_CTX}, {"threads", required_argument, 0, CLI_OPT_THREADS},  \
    {"seed", required_argument, 0, CLI_OPT_SEED}, {"device", required_argument, 0, CLI_OPT_DEVICE},  \
    {"precision", required_argument, 0, CLI_OPT_PRECISION}, {"cuda-graphs", no_argument, 0, CLI_OPT_CUDA_GRAPHS}, \
    {"arch", required_argument, 0, CLI_OPT_ARCH}

#define CLI_MODEL_USAGE                                                                              \
    "  --model NAME     preset (default small): small, medium, large, xl, 2.7B (GPT-2);\n"           \
    "                   cs336-small ... cs336-2.7B (RMSNorm, RoPE, SwiGLU, V=10000); smollm-135m;\n" \
    "                   tiny, odd, llama-tiny, qwen2-tiny, qwen3-tiny\n"                                        \
    "  --arch F=V,...   config fields over the preset, e.g. norm=rmsnorm,n_kv_head=4 (fields:\n"    \
    "                   handgrad.h, hg_config_field_name)\n"                                         \
    "  --batch B        batch size (default 4)\n"                                                    \
    "  --ctx T          sequence length (default 256)\n"                                             \
    "  --threads N      OpenMP threads (default: all cores)\n"                                       \
    "  --seed S         parameter init and token seed (default 1)\n"                                 \
    "  --device D       cpu (default) or cuda (docs/cuda.md)\n"                                      \
    "  --precision P    fp32 (default) or bf16 (cuda only)\n"                                        \
    "  --cuda-graphs    replay the training pass as a CUDA graph\n"

cli_model cli_model_default(void);
/* Takes one getopt_long result: 1 if c was a shared flag and its value is good, 0 if c
 * is not a shared flag, -1 (message printed) if its value is bad. */
int cli_model_flag(const char *cmd, cli_model *o, int c, const char *arg);
/* The config and options the flags ask for; prints the error and returns 1 if bad. */
int cli_model_setup(const char *cmd, const cli_model *o, int training, hg_config *cfg, hg_options *opt);
/* Copies the device, precision and flags of o into opt (part of cli_model_setup). */
void cli_model_device(const cli_model *o, hg_options *opt);
/* Sets the config fields of spec "FIELD=VALUE,FIELD=VALUE" (NULL or "": none); prints
 * the error and returns 1 if a field or value is bad. */
int cli_apply_arch(const char *cmd, const char *spec, hg_config *cfg);
/* Random token ids and next-token targets in [0, vocab), reproducible from seed. */
void cli_random_batch(uint64_t seed, int vocab, int n, int32_t *tokens, int32_t *targets);

#endif
