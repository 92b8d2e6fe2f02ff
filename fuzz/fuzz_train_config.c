/* Fuzz target: the `handgrad train` config file parser. Whatever it accepts must print
 * as run.json and read back to the same settings; whatever it refuses must say why. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "train_options.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    train_opts a, b;
    char err[600] = "";
    train_opts_defaults(&a);
    if (train_opts_apply_json(&a, "fuzz.json", (const char *)data, size, err, sizeof err)) {
        if (!err[0]) __builtin_trap();
    } else {
        char *j1 = train_opts_to_json(&a);
        train_opts_defaults(&b);
        if (!j1 || train_opts_apply_json(&b, "run.json", j1, strlen(j1), err, sizeof err)) __builtin_trap();
        char *j2 = train_opts_to_json(&b);
        if (!j2 || strcmp(j1, j2)) __builtin_trap();
        free(j1);
        free(j2);
        train_opts_free(&b);
    }
    train_opts_free(&a);
    return 0;
}
