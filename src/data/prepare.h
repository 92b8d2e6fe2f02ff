/* Internal entry to data preparation with the work-unit size exposed, so tests can
 * check that cutting documents into units does not change the tokens. */
#ifndef HG_DATA_PREPARE_H
#define HG_DATA_PREPARE_H

#include "handgrad_data.h"

/* Documents longer than unit_bytes are encoded in units of about that size, cut only
 * where the cut provably leaves the pieces unchanged: after a '\n' that has an ASCII
 * non-space character on both sides. */
#define PREPARE_UNIT_BYTES (1u << 20)

hg_status prepare_files_units(const hg_tokenizer *tok, const char *const *inputs, int n_inputs,
                              const hg_prepare_options *opt, size_t unit_bytes, hg_prepare_stats *stats);

#endif
