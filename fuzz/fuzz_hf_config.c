/* Fuzz target: Hugging Face config.json parsing must reject any input it cannot use with
 * a status, and every config it accepts must pass hg_config_validate and write back, as
 * its own architecture, to a config.json that parses to the same config. The token ids
 * of generation_config.json are read from the same input. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "io/hf.h"
#include "model/gpt.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    hg_hf_special ids = {.bos = -1};
    if (hf_special_parse("fuzz", (const char *)data, size, &ids) == HG_OK &&
        (ids.n_eos < 0 || ids.n_eos > HG_HF_MAX_EOS || ids.bos < -1))
        __builtin_trap();
    hg_config cfg, again;
    hf_arch arch, arch2;
    if (hf_config_parse("fuzz", (const char *)data, size, &cfg, &arch) != HG_OK) return 0;
    if (hg_config_validate(&cfg) != HG_OK || hf_arch_cannot(arch, &cfg)) __builtin_trap();
    char *text = hf_config_json(&cfg, arch, -1, -1, NULL);
    if (!text) return 0;
    if (hf_config_parse("again", text, strlen(text), &again, &arch2) != HG_OK || arch2 != arch) __builtin_trap();
    char why[256]; /* defaults may be written resolved (n_inner: null, layer_norm_epsilon) */
    if (!gpt_same_architecture(&cfg, &again, why, sizeof why) || cfg.dropout != again.dropout) __builtin_trap();
    free(text);
    return 0;
}
