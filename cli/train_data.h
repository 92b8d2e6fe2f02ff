/* The training data a run read, recorded in each checkpoint as data.json, so that a
 * resume on other shards is noticed: the data position (epoch, batch) only means the
 * same windows on the same files. */
#ifndef HG_CLI_TRAIN_DATA_H
#define HG_CLI_TRAIN_DATA_H

#include <stddef.h>

/* The shards a glob matches, in sorted order, as a JSON object (malloc'd):
 * {"train": GLOB, "files": [{"name": BASENAME, "bytes": SIZE, "head": HEX}, ...]}, where
 * head is the FNV-1a 64 hash of the file's first 4096 bytes (its header and first
 * tokens). NULL with why filled when a file cannot be read. */
char *train_data_json(const char *pattern, char *why, size_t cap);

/* 0 when two records name the same files with the same sizes and heads; else 1 with the
 * first difference in why ("train_000001.bin: 1900000 bytes, was 1857068"). A record
 * that cannot be parsed differs. */
int train_data_differ(const char *was, const char *now, char *why, size_t cap);

#endif
