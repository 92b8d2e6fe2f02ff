/* Helpers for the op tests (test_ops*.c): seeded test data, NaN poisoning, tolerance
 * checks that report every failure, and central finite differences in double.
 *
 * Every check function returns the number of failed elements and prints the first few;
 * the callers add those counts to their CHECK failure counter. */
#ifndef HG_TESTS_OPS_UTIL_H
#define HG_TESTS_OPS_UTIL_H

#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"

#define U32 5.9604644775390625e-08 /* fp32 unit roundoff, 2^-24 */

/* splitmix64: test data only (the library's own RNG is under test). */
typedef struct trng {
    uint64_t s;
} trng;

static inline trng trng_seed(uint64_t seed) { return (trng){seed * 0x9E3779B97F4A7C15ull + 1}; }
uint64_t trng_next(trng *r);
double trng_unit(trng *r);                    /* [0, 1) */
double trng_range(trng *r, double lo, double hi);
int trng_int(trng *r, int n);                 /* [0, n) */

/* Heap buffers of exactly n elements (ASan sees any overrun); abort when out of memory. */
float *fvec(size_t n);
double *dvec(size_t n);
int32_t *ivec(size_t n);

void fill(float *x, size_t n, trng *r, double lo, double hi);
/* Attention inputs, rows of W floats: the first qk of each (q and k) in [-2, 2], so scaled
 * scores are a few units and softmaxes neither flat nor one-hot; the rest (v) in [-1, 1]. */
void fill_qkv(float *qkv, size_t rows, int W, int qk, trng *r);
/* Signalling-NaN pattern: any element a kernel forgets to write shows as NaN. */
void poison(float *x, size_t n);
void widen(double *dst, const float *src, size_t n);

/* k indices into [0, n) from a fixed seed, always including 0 and n-1; all of them when
 * n <= k. *count gets the number returned. The caller frees. */
size_t *sample_indices(size_t n, size_t k, uint64_t seed, size_t *count);

/* Set HG_TEST_VERBOSE=1 to print each comparison's worst error relative to its tolerance. */
extern int ops_verbose;

int check_finite(const char *what, const float *x, size_t n);
int check_bitwise(const char *what, const float *a, const float *b, size_t n);
/* Elementwise: |got[i] - want[i]| <= tol * scale[i], with scale[i] = |want[i]| when scale
 * is NULL, plus atol. */
int check_vec(const char *what, const float *got, const double *want, const double *scale, size_t n,
              double tol, double atol);
/* Gradient check, elementwise on all n or on the listed indices (idx NULL: all):
 * g = got[i] - prefill[i] (prefill NULL: 0) against want (want[j] for idx[j]); passes when
 *   |g - want| <= tol * (s_i + |want|) + 2u |got[i]|,
 * with s_i = scale_v[i] (the element's natural magnitude) or the scalar scale when
 * scale_v is NULL; the last term is the rounding of the fp32 accumulation into the
 * prefill (only when prefill is given). */
int check_grad(const char *what, const float *got, const float *prefill, const double *want,
               const size_t *idx, size_t n, const double *scale_v, double scale, double tol);
/* The same for a double gradient (the analytic reference against finite differences). */
int check_grad_d(const char *what, const double *got, const double *want, const size_t *idx,
                 size_t n, const double *scale_v, double scale, double tol);
/* ||got - prefill - want||_2 / ||want||_2 <= tol. */
int check_rel_l2(const char *what, const float *got, const float *prefill, const double *want,
                 size_t n, double tol);
double rms(const double *x, size_t n);

/* Central difference of loss(ctx, i) with respect to p[i], p[i] restored afterwards. */
double fd_central(double *p, size_t i, double h, double (*loss)(void *ctx, size_t i), void *ctx);
#define FD_H 1e-5 /* truncation ~h^2 f''' ~ 1e-10, rounding ~1e-16 |L| / h ~ 1e-11 |L| */
/* Agreement of an analytic double gradient with the finite differences, as a fraction of
 * the gradient's scale (check_grad_d). The finite differences of losses summed over
 * thousands of O(1) terms carry ~eps_double * sum|terms| / h ~ 1e-8 of rounding (up to
 * 6e-8 seen); 2e-7 is still 5x or more below every tolerance a kernel is held to. */
#define FD_TOL 2e-7

/* Both backends (threads 1 and 2); sets OpenMP's thread count for oneDNN as the model does. */
void use_backend(hg_backend *be);

#endif
