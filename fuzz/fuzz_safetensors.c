/* Fuzz target: the safetensors reader must reject any malformed image with a status,
 * and every tensor it accepts must lie inside the buffer and be readable. */
#include <stdint.h>
#include <stdlib.h>

#include "io/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    hg_st_file *f;
    if (hg_st_parse(&f, "fuzz", data, size) != HG_OK) return 0;
    for (int i = 0; i < hg_st_count(f); i++) {
        const hg_st_tensor *t = hg_st_at(f, i);
        if (t->data < data || t->data > data + size) __builtin_trap();
        if (t->numel <= 4096 && (t->dtype == HG_ST_F32 || t->dtype == HG_ST_F64 || t->dtype == HG_ST_F16 ||
                                  t->dtype == HG_ST_BF16 || t->dtype == HG_ST_I32)) {
            double *out = malloc(sizeof(double) * (size_t)(t->numel + 1));
            if (out && hg_st_read_f64(f, t, out, t->numel) != HG_OK) __builtin_trap();
            free(out);
        }
        if (hg_st_find(f, t->name) == NULL) __builtin_trap();
    }
    (void)hg_st_metadata(f, "config");
    hg_st_close(f);
    return 0;
}
