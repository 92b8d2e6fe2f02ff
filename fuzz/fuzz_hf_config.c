/* Fuzz target: Hugging Face config.json parsing must reject any input it cannot use with
 * a status, and every config it accepts must pass hg_config_validate and write back to a
 * config.json that parses to the same config. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "io/hf.h"
#include "model/gpt.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    hg_config cfg, again;
    if (hf_config_parse("fuzz", (const char *)data, size, &cfg) != HG_OK) return 0;
    if (hg_config_validate(&cfg) != HG_OK) __builtin_trap();
    char *text = hf_config_json(&cfg, -1);
    if (!text) return 0;
    if (hf_config_parse("again", text, strlen(text), &again) != HG_OK) __builtin_trap();
    char why[256]; /* defaults may be written resolved (n_inner: null, layer_norm_epsilon) */
    if (!gpt_same_architecture(&cfg, &again, why, sizeof why) || cfg.dropout != again.dropout) __builtin_trap();
    free(text);
    return 0;
}
