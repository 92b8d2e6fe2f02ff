/* The op test groups, one file each, run by test_ops.c's main. Each group runs its ops
 * on every backend in `bes` (the CPU backend at 1 and 2 threads) and returns its number
 * of failed checks. */
#ifndef HG_TESTS_TEST_OPS_H
#define HG_TESTS_TEST_OPS_H

#include "backend/backend.h"

enum { OPS_NBE = 2 }; /* backends under test: threads 1 and 2 */

int test_ops_layernorm(hg_backend *bes[OPS_NBE]);  /* test_ops_layernorm.c */
int test_ops_matmul(hg_backend *bes[OPS_NBE]);     /* test_ops_matmul.c */
int test_ops_classifier(hg_backend *bes[OPS_NBE]); /* test_ops_classifier.c */
int test_ops_attention(hg_backend *bes[OPS_NBE]);  /* test_ops_attention.c */
int test_ops_llama(hg_backend *bes[OPS_NBE]);      /* test_ops_llama.c */

#endif
