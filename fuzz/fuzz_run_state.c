/* Fuzz target: the two small files `handgrad train --resume` reads from a checkpoint
 * besides the safetensors: band.json (the loss band) and data.json (the record of the
 * training shards). The first byte picks the file. A band that is accepted prints and
 * reads back to the same text; one that is refused says why. A data.json compared with
 * a record of the shards either matches or says how it differs. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "train_band.h"
#include "train_data.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!size) return 0;
    const char *text = (const char *)data + 1;
    size_t len = size - 1;
    char err[600] = "";
    if (data[0] & 1) {
        loss_band a = {.z = 6}, b = {.z = 6};
        int64_t good_a, good_b;
        if (band_from_json(&a, &good_a, text, len, err, sizeof err)) {
            if (!err[0]) __builtin_trap();
            return 0;
        }
        char *j1 = band_to_json(&a, good_a);
        if (!j1 || band_from_json(&b, &good_b, j1, strlen(j1), err, sizeof err)) __builtin_trap();
        char *j2 = band_to_json(&b, good_b);
        if (!j2 || strcmp(j1, j2) || good_a != good_b) __builtin_trap();
        free(j1);
        free(j2);
    } else {
        static const char now[] = "{\"train\": \"t_*.bin\", \"files\": [{\"name\": \"t_0.bin\", \"bytes\": 8064, "
                                  "\"head\": \"81e7d367e52d1df0\"}]}";
        char *was = malloc(len + 1);
        if (!was) return 0;
        memcpy(was, text, len);
        was[len] = 0;
        if (train_data_differ(was, now, err, sizeof err) && !err[0]) __builtin_trap();
        free(was);
    }
    return 0;
}
