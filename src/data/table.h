/* Open-addressing hash tables of the tokenizer: token pair -> merge, and token
 * bytes -> id. Both are sized once when a vocabulary is built and never grow
 * during encoding, so lookups from many threads need no lock. */
#ifndef HG_DATA_TABLE_H
#define HG_DATA_TABLE_H

#include <stddef.h>
#include <stdint.h>

#include "handgrad.h"

/* (left id, right id) -> (rank, merged id). Lower rank merges first. */
typedef struct pair_slot {
    uint64_t key; /* left << 32 | right; PAIR_EMPTY when free */
    int32_t rank;
    int32_t id;
} pair_slot;

typedef struct pair_table {
    pair_slot *slots;
    uint64_t mask;
    int shift; /* 64 - log2(slots): the hash takes the product's top bits */
    size_t count;
} pair_table;

#define PAIR_EMPTY UINT64_MAX

hg_status pair_table_init(pair_table *t, size_t capacity);
void pair_table_free(pair_table *t);
/* Inserts unless the pair is already present (the first insert wins). */
void pair_table_put(pair_table *t, int32_t left, int32_t right, int32_t rank, int32_t id);

static inline const pair_slot *pair_table_get(const pair_table *t, int32_t left, int32_t right) {
    uint64_t key = (uint64_t)(uint32_t)left << 32 | (uint32_t)right;
    uint64_t i = (key * 0x9E3779B97F4A7C15ull) >> t->shift;
    for (;;) {
        const pair_slot *s = &t->slots[i];
        if (s->key == key) return s;
        if (s->key == PAIR_EMPTY) return NULL;
        i = (i + 1) & t->mask;
    }
}

/* Token bytes -> id, over a vocabulary's byte strings: id i has bytes
 * blob[off[i] .. off[i+1]). */
typedef struct bytes_table {
    int32_t *ids; /* -1 when free */
    uint32_t *hashes;
    uint64_t mask;
    const uint8_t *blob;
    const uint32_t *off;
} bytes_table;

uint64_t bytes_hash(const uint8_t *p, size_t n);
hg_status bytes_table_init(bytes_table *t, size_t capacity, const uint8_t *blob, const uint32_t *off);
void bytes_table_free(bytes_table *t);
/* Adds id unless a token with the same bytes is already present; returns the id
 * that holds those bytes afterwards. */
int32_t bytes_table_put(bytes_table *t, int32_t id);
/* The id with exactly these bytes, or -1. */
int32_t bytes_table_get(const bytes_table *t, const uint8_t *p, size_t n);

#endif
