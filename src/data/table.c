/* Open-addressing hash tables (linear probing, power-of-two sizes, load <= 1/2). */
#include "data/table.h"

#include <stdlib.h>
#include <string.h>

#include "core/error.h"

static uint64_t table_size_for(size_t capacity) {
    uint64_t n = 16;
    while (n < 2 * (uint64_t)capacity + 1) n <<= 1;
    return n;
}

hg_status pair_table_init(pair_table *t, size_t capacity) {
    uint64_t n = table_size_for(capacity);
    t->slots = malloc(n * sizeof *t->slots);
    if (!t->slots) return hg_fail(HG_ERR_NOMEM, "tokenizer: out of memory for %zu merges", capacity);
    for (uint64_t i = 0; i < n; i++) t->slots[i].key = PAIR_EMPTY;
    t->mask = n - 1;
    t->shift = 64 - __builtin_ctzll(n);
    t->count = 0;
    return HG_OK;
}

void pair_table_free(pair_table *t) {
    free(t->slots);
    t->slots = NULL;
}

void pair_table_put(pair_table *t, int32_t left, int32_t right, int32_t rank, int32_t id) {
    HG_ASSERT(2 * (t->count + 1) <= t->mask + 1);
    uint64_t key = (uint64_t)(uint32_t)left << 32 | (uint32_t)right;
    uint64_t i = (key * 0x9E3779B97F4A7C15ull) >> t->shift;
    while (t->slots[i].key != PAIR_EMPTY) {
        if (t->slots[i].key == key) return;
        i = (i + 1) & t->mask;
    }
    t->slots[i] = (pair_slot){key, rank, id};
    t->count++;
}

uint64_t bytes_hash(const uint8_t *p, size_t n) {
    uint64_t h = 0x9E3779B97F4A7C15ull ^ (n * 0xff51afd7ed558ccdull);
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        h = (h ^ w) * 0xff51afd7ed558ccdull;
        h ^= h >> 32;
        p += 8;
        n -= 8;
    }
    uint64_t w = 0;
    memcpy(&w, p, n);
    h = (h ^ w) * 0xc4ceb9fe1a85ec53ull;
    return h ^ (h >> 29);
}

hg_status bytes_table_init(bytes_table *t, size_t capacity, const uint8_t *blob, const uint32_t *off) {
    uint64_t n = table_size_for(capacity);
    t->ids = malloc(n * sizeof *t->ids);
    t->hashes = malloc(n * sizeof *t->hashes);
    if (!t->ids || !t->hashes) {
        bytes_table_free(t);
        return hg_fail(HG_ERR_NOMEM, "tokenizer: out of memory for %zu tokens", capacity);
    }
    memset(t->ids, 0xFF, n * sizeof *t->ids);
    t->mask = n - 1;
    t->blob = blob;
    t->off = off;
    return HG_OK;
}

void bytes_table_free(bytes_table *t) {
    free(t->ids);
    free(t->hashes);
    t->ids = NULL;
    t->hashes = NULL;
}

static int bytes_table_match(const bytes_table *t, int32_t id, const uint8_t *p, size_t n) {
    size_t len = t->off[id + 1] - t->off[id];
    return len == n && memcmp(t->blob + t->off[id], p, n) == 0;
}

int32_t bytes_table_put(bytes_table *t, int32_t id) {
    const uint8_t *p = t->blob + t->off[id];
    size_t n = t->off[id + 1] - t->off[id];
    uint64_t h = bytes_hash(p, n);
    uint64_t i = h & t->mask;
    while (t->ids[i] >= 0) {
        if (t->hashes[i] == (uint32_t)(h >> 32) && bytes_table_match(t, t->ids[i], p, n)) return t->ids[i];
        i = (i + 1) & t->mask;
    }
    t->ids[i] = id;
    t->hashes[i] = (uint32_t)(h >> 32);
    return id;
}

int32_t bytes_table_get(const bytes_table *t, const uint8_t *p, size_t n) {
    uint64_t h = bytes_hash(p, n);
    uint64_t i = h & t->mask;
    while (t->ids[i] >= 0) {
        if (t->hashes[i] == (uint32_t)(h >> 32) && bytes_table_match(t, t->ids[i], p, n)) return t->ids[i];
        i = (i + 1) & t->mask;
    }
    return -1;
}
