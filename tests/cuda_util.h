/* Helpers for the GPU tests (test_cuda_*.c): device buffers in the backend's compute type
 * through the backend interface alone, bf16 rounding on the host, and the comparison of
 * a GPU result with the CPU backend's.
 *
 * Without a CUDA device these tests print "skipped: no CUDA device (...)" and exit 77,
 * which ctest reports as skipped (SKIP_RETURN_CODE), so CPU-only CI stays green. */
#ifndef HG_TESTS_CUDA_UTIL_H
#define HG_TESTS_CUDA_UTIL_H

#include <stddef.h>

#include "backend/backend.h"

#define CUDA_SKIP 77

/* The CUDA backend in `precision` (with hg_options.flags `flags`), or exits 77 with the
 * reason when there is no usable GPU (any other failure exits 1). */
hg_backend *cuda_backend_or_skip(hg_precision precision);
hg_backend *cuda_backend_flags_or_skip(hg_precision precision, unsigned flags);

/* x rounded to the nearest bf16 (ties to even), as a float. */
float bf16_round(float x);
/* Rounds x in place when the backend computes in bf16, so that the CPU reference sees
 * exactly the values the GPU does. */
void round_for(hg_backend *be, float *x, size_t n);

/* Device buffers. `compute`: n elements of the compute type; else n floats. Every buffer
 * is freed by dev_free_all. */
void *dev_from(hg_backend *be, const float *host, size_t n, int compute);
void *dev_bytes(hg_backend *be, const void *host, size_t bytes); /* raw copy (int32 ids) */
void *dev_poison(hg_backend *be, size_t n, int compute);         /* NaN everywhere */
void dev_to_host(hg_backend *be, float *host, const void *dev, size_t n, int compute);
void dev_free_all(hg_backend *be);

/* Compares got (GPU) with want (CPU) over n elements: fails on any non-finite element
 * (an unwritten output shows as the NaN poison) or when ||got - want|| / ||want|| > tol.
 * Prints one line either way. Returns the number of failures (0 or 1). */
int compare(const char *what, const float *got, const float *want, size_t n, double tol);

#endif
