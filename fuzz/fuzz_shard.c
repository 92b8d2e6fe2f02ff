/* libFuzzer target: shard header parsing in every format, then reading every token
 * the header promises (ASan catches a read past the input). */
#include <stdint.h>
#include <stdlib.h>

#include "data/shard.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static const hg_shard_format formats[] = {HG_SHARD_AUTO, HG_SHARD_HANDGRAD, HG_SHARD_LLMC, HG_SHARD_NANOGPT};
    static const char *names[] = {"fuzz.bin", "fuzz.shard"};
    for (int f = 0; f < 4; f++) {
        for (int k = 0; k < 2; k++) {
            hg_shard_info info;
            size_t at;
            if (shard_parse(data, size, names[k], formats[f], &info, &at) != HG_OK) continue;
            if (at + info.n_tokens * (uint64_t)info.token_bytes != size) abort();
            uint64_t sum = 0;
            for (uint64_t i = 0; i < info.n_tokens; i++) sum += shard_token(data + at, info.token_bytes, i);
            if (sum == UINT64_MAX) abort();
        }
    }
    return 0;
}
