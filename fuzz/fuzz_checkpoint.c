/* Fuzz target: checkpoint metadata. The input is a safetensors image whose metadata is
 * read as a weights file's config and an optimizer file's training state, and also,
 * as text, a config JSON object. Anything accepted must be a valid config. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "io/safetensors.h"
#include "model/gpt.h"
#include "train/checkpoint.h"

static void accepted(const hg_config *c) {
    if (hg_config_validate(c) != HG_OK) __builtin_trap();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    hg_config c;
    hg_st_file *f;
    if (hg_st_parse(&f, "fuzz", data, size) == HG_OK) {
        if (ckpt_read_config(f, "fuzz", CKPT_WEIGHTS_FORMAT, &c, NULL) == HG_OK) accepted(&c);
        if (ckpt_read_config(f, "fuzz", CKPT_OPTIMIZER_FORMAT, &c, NULL) == HG_OK) accepted(&c);
        ckpt_state s;
        if (ckpt_read_state(f, "fuzz", &s) == HG_OK && (s.train.B < 1 || s.train.T < 1 || s.train.world_size < 1))
            __builtin_trap();
        hg_st_close(f);
    }
    char *text = malloc(size + 1);
    if (!text) return 0;
    memcpy(text, data, size);
    text[size] = 0;
    if (ckpt_config_parse("fuzz", text, &c) == HG_OK) {
        accepted(&c);
        char *back = ckpt_config_json(&c); /* and it prints back to the same config */
        hg_config d;
        char why[256]; /* fields that mean "the default" when 0 are written resolved */
        if (!back || ckpt_config_parse("fuzz", back, &d) != HG_OK || !gpt_same_architecture(&c, &d, why, sizeof why) ||
            c.dropout != d.dropout)
            __builtin_trap();
        free(back);
    }
    free(text);
    return 0;
}
