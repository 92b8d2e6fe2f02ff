/* Fuzz target: PEFT's adapter_config.json must be refused with a status when handgrad
 * cannot use it, and every config it accepts must hold a usable LoRA: a rank in
 * [1, 65536], a finite alpha > 0, a dropout in [0, 1), target module names (no empty
 * one), which then resolve against a Llama-family model or are refused. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "handgrad.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    hg_peft_config pc;
    if (hg_peft_config_parse("fuzz", (const char *)data, size, &pc) != HG_OK) return 0;
    const hg_lora *l = &pc.lora;
    if (l->r < 1 || l->r > 65536 || !(l->alpha > 0) || isinf(l->alpha) || !(l->dropout >= 0 && l->dropout < 1))
        __builtin_trap();
    size_t n = strlen(pc.targets);
    if (!n || pc.targets[0] == ',' || pc.targets[n - 1] == ',' || strstr(pc.targets, ",,")) __builtin_trap();
    hg_config cfg;
    if (hg_config_preset("llama-tiny", &cfg) != HG_OK) __builtin_trap();
    hg_lora resolved = pc.lora;
    if (hg_hf_lora_targets(&cfg, "LlamaForCausalLM", pc.targets, &resolved) == HG_OK) {
        unsigned any = 0;
        for (int g = 0; g < HG_LORA_GROUPS; g++) any |= resolved.targets[g];
        if (!any) __builtin_trap(); /* every accepted name adapts some layer */
    }
    return 0;
}
