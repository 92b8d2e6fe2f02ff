/* Hugging Face interop inside the library: config.json for GPT-2, the Llama family, Gemma
 * (1 and 2), Phi-2, Phi-3 and OLMo 2,
 * weights from single or sharded safetensors, and export (public API: hg_model_load_hf
 * and friends in include/handgrad.h; the mapping is in docs/formats.md). */
#ifndef HG_IO_HF_H
#define HG_IO_HF_H

#include <stddef.h>

#include "handgrad.h"
#include "io/safetensors.h"

/* The architectures handgrad reads and writes, by transformers' class. */
typedef enum hf_arch { HF_GPT2, HF_LLAMA, HF_MISTRAL, HF_QWEN2, HF_QWEN3, HF_GEMMA, HF_GEMMA2, HF_PHI3, HF_OLMO2,
                       HF_PHI, HF_NARCH } hf_arch;

const char *hf_arch_class(hf_arch a);                          /* "LlamaForCausalLM" */
hg_status hf_arch_parse(const char *class_name, hf_arch *out); /* its inverse */

/* Parses a config.json image; `name` is used in messages. Every key is read, checked
 * or known not to change the computation; any other is refused by name. *arch (may be
 * NULL) gets the architecture. */
hg_status hf_config_parse(const char *name, const char *text, size_t len, hg_config *cfg, hf_arch *arch);
hg_status hf_config_load(const char *path, hg_config *cfg, hf_arch *arch);
/* The first config field architecture a cannot express, or NULL when it can. */
const char *hf_arch_cannot(hf_arch a, const hg_config *cfg);
/* The architecture a config is written as when none is asked for: GPT-2 when it can,
 * else Gemma 2 for a sandwich block, Gemma for GeGLU, Phi-3 for a partial rotary
 * embedding, OLMo 2 for a postnorm block, Phi-2 for a parallel one, Qwen3 with a q/k norm, Qwen2 with q/k/v biases only, else Llama. */
hf_arch hf_arch_default(const hg_config *cfg);
/* config.json text for cfg as architecture a (malloc'd, NULL when out of memory); bos or
 * eos < 0 writes that id as null; dtype ("float32", "bfloat16") may be NULL. */
char *hf_config_json(const hg_config *cfg, hf_arch a, int bos, int eos, const char *dtype);
/* bos_token_id and eos_token_id (one id or a list) of a generation_config.json or
 * config.json image, into the fields of s still unset (bos < 0, n_eos == 0). */
hg_status hf_special_parse(const char *file, const char *text, size_t len, hg_hf_special *s);

/* The tensors of a folder: model.safetensors, or the shards that
 * model.safetensors.index.json's weight_map names. */
typedef struct hf_tensors hf_tensors;
hg_status hf_tensors_open(hf_tensors **out, const char *dir);
/* The same from memory: an index image (NULL for a single file) and the file images,
 * named as the index names them; used by the fuzz target. Buffers must outlive it. */
hg_status hf_tensors_parse(hf_tensors **out, const char *index_name, const char *index, size_t index_len,
                           const char *const *names, const uint8_t *const *bufs, const size_t *lens, int n);
void hf_tensors_close(hf_tensors *t);
/* Tensors in the set, tensor i (in name order), and a tensor by name (NULL if absent). */
int hf_tensors_count(const hf_tensors *t);
const hg_st_tensor *hf_tensors_at(const hf_tensors *t, int i);
const hg_st_tensor *hf_tensors_find(const hf_tensors *t, const char *name);

/* The tensors of one safetensors file, as a set (a checkpoint's model.safetensors). */
hg_status hf_tensors_open_file(hf_tensors **out, const char *path);
/* Architecture `ask` (a class name), or hf_arch_default's when NULL, if it holds cfg;
 * else HG_ERR_UNSUPPORTED naming the config field (or site op), the message starting
 * with `who`. */
hg_status hf_arch_for(const hg_config *cfg, const char *ask, const char *who, hf_arch *out);
/* m's weights as architecture a's tensors (names, layouts), F32 or rounded to BF16, with
 * the given metadata pairs, into the safetensors file path; or, when max_shard > 0 and
 * they are larger, into shards of at most max_shard bytes (a larger tensor alone) and
 * model.safetensors.index.json in path's folder, named as transformers names them. */
hg_status hf_save_weights(const hg_model *m, hf_arch a, int bf16, const char *path, int64_t max_shard,
                          const char *const *meta, int n_meta);
/* Fills every parameter of m from the tensors of architecture a; shapes must match
 * exactly; F32, F16, BF16 or F64; every tensor must be used (GPT-2's mask buffers and
 * a tied lm_head equal to the embedding aside). */
hg_status hf_load_weights(hg_model *m, hf_arch a, hf_tensors *t);

/* The Hugging Face tensors parameter k of m is made of in architecture a (its parts, in
 * order); their count (0: a tensor the class does not store, or an adapter). */
int hf_param_names(const hg_model *m, hf_arch a, int k, char (*names)[112]);
/* The modules (Hugging Face names without ".weight", e.g. "model.layers.0.self_attn.q_proj")
 * that LoRA group g's linear layer in block `layer` of m is stored as in architecture a,
 * in the order of its output columns; their count (0: none). */
int hf_lora_modules(const hg_model *m, hf_arch a, hg_lora_group g, int layer, char (*names)[112]);
/* Writes a folder through DIR.tmp: fill(ctx, tmp) writes the files, then one rename makes
 * it DIR (which must not exist, or be empty); a failure leaves no DIR. */
hg_status hf_folder_write(const char *dir, hg_status (*fill)(void *ctx, const char *tmp), void *ctx);

#endif
