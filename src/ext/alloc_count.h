/* The counters of the allocation-counting object library (alloc_count.c), which a
 * program links to interpose malloc and friends. libhandgrad refers to them weakly:
 * without that library they are absent and hg_bench_op reports counted = 0. */
#ifndef HG_EXT_ALLOC_COUNT_H
#define HG_EXT_ALLOC_COUNT_H

#include <stdint.h>

typedef struct hg_alloc_counts {
    int64_t allocs, frees, bytes;          /* outside oneDNN */
    int64_t onednn_allocs, onednn_frees;   /* inside dnnl_primitive_execute */
    int64_t onednn_bytes, onednn_largest;
} hg_alloc_counts;

/* Starts (on = 1) or stops counting; counting starts from zero. */
void hg_alloc_count_enable(int on);
/* The counts since counting last started. */
void hg_alloc_count_read(hg_alloc_counts *out);

#endif
