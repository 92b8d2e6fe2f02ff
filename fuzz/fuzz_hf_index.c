/* Fuzz target: a Hugging Face folder's weights, model.safetensors.index.json and its
 * shards, must be refused with a status unless the index and the shards agree tensor for
 * tensor; every tensor of an accepted set lies inside its shard and is found by name.
 *
 * Input: a little-endian u16 n, then n bytes of index JSON (n = 0: no index, one file
 * named model.safetensors), then up to 4 shards, each a u32 length and its bytes, named
 * s0.safetensors, s1.safetensors, ... (the first also answers to model.safetensors). */
#include <stdint.h>
#include <string.h>

#include "io/hf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 2) return 0;
    size_t n_index = (size_t)data[0] | (size_t)data[1] << 8, at = 2;
    if (n_index > size - at) return 0;
    const char *index = n_index ? (const char *)data + at : NULL;
    at += n_index;
    const char *names[5] = {"s0.safetensors", "s1.safetensors", "s2.safetensors", "s3.safetensors"};
    const uint8_t *bufs[5];
    size_t lens[5];
    int n = 0;
    while (n < 4 && size - at >= 4) {
        uint32_t len;
        memcpy(&len, data + at, 4);
        at += 4;
        if (len > size - at) len = (uint32_t)(size - at);
        bufs[n] = data + at, lens[n] = len;
        at += len;
        n++;
    }
    if (n == 0) return 0;
    if (!index) names[0] = "model.safetensors";
    hf_tensors *t;
    if (hf_tensors_parse(&t, "index", index, n_index, names, bufs, lens, n) != HG_OK) return 0;
    for (int i = 0; i < hf_tensors_count(t); i++) {
        const hg_st_tensor *x = hf_tensors_at(t, i);
        int inside = 0;
        for (int k = 0; k < n; k++) inside |= x->data >= bufs[k] && x->data <= bufs[k] + lens[k];
        if (!inside || hf_tensors_find(t, x->name) != x) __builtin_trap();
    }
    hf_tensors_close(t);
    return 0;
}
