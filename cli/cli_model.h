/* The options that the commands building a model share, each defined once here as
 * cli_opts.h table entries, so that every command spells, bounds and explains them the
 * same way: the model (--model, --arch, the six shape flags), the run (--batch, --ctx,
 * --threads, --seed), the device (--device, --precision, --cuda-graphs) and sampling
 * (--temperature, --top-k, --top-p).
 *
 * The entry macros take the settings struct T and the path P of the fields in it,
 * with its dot ("shape." or "m.shape."), or nothing when they are T's own fields. */
#ifndef HG_CLI_MODEL_H
#define HG_CLI_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "cli_opts.h"
#include "handgrad.h"

/* A model from a preset and explicit fields; 0 and NULL: not given. */
typedef struct cli_shape {
    const char *model; /* a preset's name */
    const char *arch;  /* "FIELD=VALUE,...": config fields over the preset */
    int n_layer, n_head, d_model, d_ff, max_seq_len, vocab_size;
} cli_shape;

/* Where a model runs: --device, --precision, and --cuda-graphs (bench, profile and train;
 * generation never records one). */
typedef struct cli_device {
    const char *device, *precision; /* "cpu" or "cuda"; "fp32" or "bf16" */
    int cuda_graphs;
    int deterministic;     /* HG_FLAG_DETERMINISTIC */
    const char *recompute; /* "none", "attn", "mlp", "block" (NULL: none); not generate's */
    const char *base_precision; /* how frozen tensors are held: "fp32" (NULL) or "bf16" */
    const char *optim_state;    /* AdamW's moments: "fp32" (NULL) or "bf16" */
    const char *grad_precision; /* the kept gradients: "fp32" (NULL) or "bf16" */
} cli_device;
#define CLI_DEVICE_DEFAULT ((cli_device){.device = "cpu", .precision = "fp32"})

/* What bench and profile build and run. */
typedef struct cli_model {
    cli_shape shape;
    int batch, ctx, threads;
    int64_t seed;
    cli_device dev;
    const char *lora, *freeze; /* --lora SPEC, --freeze GLOBS (cli_model_adapt); NULL: none */
} cli_model;

#define CLI_PRESETS                                                                             \
    "small, medium, large, xl, 2.7B (GPT-2); cs336-small ... cs336-2.7B (RMSNorm, RoPE, SwiGLU, " \
    "V=10000); smollm-135m; tiny, odd, llama-tiny, qwen2-tiny, qwen3-tiny"

#define CLI_OPTS_MODEL(T, P)                                                                              \
    {"model", CLI_STR, offsetof(T, P model), "NAME", 0, 0, CLI_SAVED, "preset: " CLI_PRESETS},             \
    {"arch", CLI_STR, offsetof(T, P arch), "F=V,...", 0, 0, CLI_SAVED,                                     \
     "config fields over the preset, e.g. norm=rmsnorm,position=rope,n_kv_head=4 (the fields: handgrad.h, " \
     "hg_config_field_name)"}

#define CLI_OPTS_SHAPE(T, P)                                                                               \
    {"n-layer", CLI_INT, offsetof(T, P n_layer), "L", 0, 4096, CLI_SAVED, "layers (over the preset's)"},    \
    {"n-head", CLI_INT, offsetof(T, P n_head), "NH", 0, 65536, CLI_SAVED,                                   \
     "attention heads; d_model/n_head must be a multiple of 16"},                                           \
    {"d-model", CLI_INT, offsetof(T, P d_model), "C", 0, 65536, CLI_SAVED, "model width"},                  \
    {"d-ff", CLI_INT, offsetof(T, P d_ff), "F", 0, 262144, CLI_SAVED, "MLP width (without a preset: 4*C)"}, \
    {"max-seq-len", CLI_INT, offsetof(T, P max_seq_len), "TMAX", 0, 1 << 20, CLI_SAVED,                     \
     "position rows (without a preset: --ctx)"},                                                            \
    {"vocab-size", CLI_INT, offsetof(T, P vocab_size), "V", 0, 1 << 24, CLI_SAVED, "vocabulary size"}

#define CLI_OPT_BATCH(T, P) {"batch", CLI_INT, offsetof(T, P batch), "B", 1, 1 << 20, CLI_SAVED, "sequences per batch"}
#define CLI_OPT_CTX(T, P)                                                                                      \
    {"ctx", CLI_INT, offsetof(T, P ctx), "T", 0, 1 << 20, CLI_SAVED, "tokens per sequence; 0: the model's " \
                                                                     "max_seq_len"}
#define CLI_OPT_THREADS(T, P) {"threads", CLI_INT, offsetof(T, P threads), "N", 0, 4096, CLI_SAVED | CLI_SHOW0, "threads; 0: all cores"}
#define CLI_OPT_SEED(T, P)                                                                      \
    {"seed", CLI_I64, offsetof(T, P seed), "S", 0, 9.2e18, CLI_SAVED,                           \
     "random seed: the same seed and settings give the same result"}

/* P: the path of a cli_device ("dev." or "m.dev."). Kept in train's run.json, so that a
 * resumed run goes on where it ran. */
#define CLI_OPTS_DEVICE(T, P)                                                                                  \
    {"device", CLI_CHOICE, offsetof(T, P device), "cpu|cuda", 0, 0, CLI_SAVED, "where it runs (docs/cuda.md)"}, \
    {"precision", CLI_CHOICE, offsetof(T, P precision), "fp32|bf16", 0, 0, CLI_SAVED,                         \
     "bf16: bf16 weights and activations for compute, fp32 master weights, gradients and AdamW state "          \
     "(docs/architecture.md)"},                                    \
    {"deterministic", CLI_BOOL, offsetof(T, P deterministic), 0, 0, 1, CLI_SAVED,                              \
     "bit-identical runs on cuda: handgrad's own attention kernels, not cuDNN's (the default in bf16, faster, "  \
     "with a backward that adds by atomics), and a token-embedding gradient without atomics; the cpu is always " \
     "deterministic"}
#define CLI_OPT_RECOMPUTE(T, P)                                                                               \
    {"recompute", CLI_CHOICE, offsetof(T, P recompute), "none|attn|mlp|block", 0, 0, CLI_SAVED,                \
     "what the backward computes again instead of keeping: attn ln_1 and q|k|v, mlp ln_2 and the MLP's "         \
     "pre-activation, block all of a block but its input; less memory for more time, the same results "         \
     "(docs/training.md)"}
/* P: the path of a cli_device. */
#define CLI_OPT_BASE_PRECISION(T, P)                                                                           \
    {"base-precision", CLI_CHOICE, offsetof(T, P base_precision), "fp32|bf16", 0, 0, CLI_SAVED,                 \
     "how frozen tensors (--lora's base, --freeze) are held: bf16 keeps only their bf16 compute copy, half the " \
     "memory of fp32 masters; needs --precision bf16"}
/* P: the path of a cli_device. */
#define CLI_OPT_OPTIM_STATE(T, P)                                                                              \
    {"optim-state", CLI_CHOICE, offsetof(T, P optim_state), "fp32|bf16", 0, 0, CLI_SAVED,                        \
     "how AdamW's two moments are held: bf16 (rounded stochastically) takes 4 bytes a trained parameter "         \
     "instead of 8 (docs/training.md)"}
/* P: the path of a cli_device. */
#define CLI_OPT_GRAD_PRECISION(T, P)                                                                           \
    {"grad-precision", CLI_CHOICE, offsetof(T, P grad_precision), "fp32|bf16", 0, 0, CLI_SAVED,                  \
     "how the gradients are kept for the optimizer: bf16 takes 2 bytes a trained parameter instead of 4, each "  \
     "block's summed in fp32 and rounded once a micro-batch (the CPU; docs/training.md)"}
#define CLI_OPTS_ADAPT(T, P)                                                                                  \
    {"lora", CLI_STR, offsetof(T, P lora), "SPEC", 0, 0, 0,                                                    \
     "LoRA adapters on a frozen model: r=16,alpha=32,dropout=0.05,targets=q_proj,v_proj (PEFT's module names)"}, \
    {"freeze", CLI_STR, offsetof(T, P freeze), "GLOBS", 0, 0, 0,                                               \
     "tensors no optimizer trains: Hugging Face or handgrad names, globs, comma-separated, or all"}
#define CLI_OPT_CUDA_GRAPHS(T, P) \
    {"cuda-graphs", CLI_BOOL, offsetof(T, P cuda_graphs), 0, 0, 1, CLI_SAVED,                                  \
     "cuda: replay the training pass as a CUDA graph (not while dropout is on, nor across ranks)"}

#define CLI_OPTS_SAMPLE(T, P)                                                                               \
    {"temperature", CLI_F64, offsetof(T, P temperature), "X", 0, 100, CLI_SAVED, "sampling temperature; 0 is " \
                                                                                  "greedy"},                   \
    {"top-k", CLI_INT, offsetof(T, P top_k), "K", 0, 1 << 24, CLI_SAVED,                                      \
     "sample among the K most likely tokens; 0: all"},                                                         \
    {"top-p", CLI_F64, offsetof(T, P top_p), "P", 0, 1, CLI_SAVED,                                            \
     "sample among the most likely tokens that make up P of the probability; 0 or 1: all"}

/* The sampling defaults of generate and of train's samples. */
#define CLI_SAMPLE_TEMPERATURE 0.8
#define CLI_SAMPLE_TOP_K 40

cli_model cli_model_default(void);
/* The config a shape asks for: the preset, or `bare` when there is none and n_layer,
 * n_head and d_model are all given; then the explicit fields, then arch. Prints the
 * error ("handgrad CMD: ...") and returns CLI_USAGE if the shape is bad. */
int cli_shape_config(const char *cmd, const cli_shape *s, const hg_config *bare, hg_config *cfg);
/* cli_shape_config (bare: V 50257, Tmax the larger of 1024 and --ctx) and the options
 * of a run of B x T tokens on the device asked for; CLI_USAGE after printing if bad. */
int cli_model_setup(const char *cmd, const cli_model *m, int training, hg_config *cfg, hg_options *opt);
/* --precision bf16 on a CPU without bf16 hardware: prints one note saying why it is no
 * faster than fp32 (hg_cpu_bf16_slow). Returns 0 (CLI_USAGE is kept for refusals). */
int cli_device_check(const char *cmd, const cli_device *d);
/* Copies the device, precision, flags and recompute mode of d into opt (part of
 * cli_model_setup). */
void cli_device_options(const cli_device *d, hg_options *opt);
/* Why a model could not be created (or loaded) with opt, from hg_last_error(), into buf:
 * the library's "device: why" and "precision: why" as the flag that asked for them
 * ("--device cuda: no CUDA device found"), any other message after `what` ("model:
 * why"). Returns buf. */
const char *cli_model_why(const hg_options *opt, const char *what, char *buf, size_t cap);
/* Sets the config fields of spec "FIELD=VALUE,FIELD=VALUE" (NULL or "": none); prints
 * the error and returns CLI_USAGE if a field or value is bad. */
int cli_apply_arch(const char *cmd, const char *spec, hg_config *cfg);
/* --lora's SPEC, "r=16,alpha=32,dropout=0.05,targets=q_proj,v_proj,init=gaussian,rslora=true"
 * (a word without '=' continues targets), into lora (r 8, alpha 16 unless given) and
 * targets (a comma list of PEFT module names, cap bytes). Prints the error and returns
 * CLI_USAGE if the spec is bad. */
int cli_parse_lora(const char *cmd, const char *spec, hg_lora *lora, char *targets, size_t cap);
/* --lora SPEC or --adapter DIR (a PEFT folder's adapter_config.json; at most one of the
 * two) and --freeze GLOBS (NULL: not given), resolved against cfg stored as class hf_class
 * (NULL: the config's default) into out (r 0: no adapters) and *freeze_out (malloc'd
 * handgrad names for hg_options.freeze, or NULL; the caller frees it). Prints the error
 * and returns 1 or CLI_USAGE on failure. */
int cli_adapt(const char *cmd, const char *lora, const char *adapter, const char *freeze, const hg_config *cfg,
              const char *hf_class, hg_lora *out, char **freeze_out);
/* cli_adapt for bench and profile: m's --lora and --freeze on cfg (its default class) into
 * opt->lora and opt->freeze, whose names *freeze holds (free it after the model). */
int cli_model_adapt(const char *cmd, const cli_model *m, const hg_config *cfg, hg_options *opt, char **freeze);
/* Random token ids and next-token targets in [0, vocab), reproducible from seed. */
void cli_random_batch(uint64_t seed, int vocab, int n, int32_t *tokens, int32_t *targets);

#endif
