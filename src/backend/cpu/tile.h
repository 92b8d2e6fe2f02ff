/* Small dense products for attention tiles (e.g. 64 x 64 x 64), and the 16 x 16 transposes
 * that lay K and V out for them, run inside one thread.
 *
 * The attention kernels need thousands of these per head. oneDNN's primitive API costs
 * microseconds and a small allocation per call at this size, and its micro-kernel API is
 * not in the oneDNN that Debian ships, so the tiles have their own register-blocked
 * kernels. All large matrix products still go through oneDNN (gemm.c).
 *
 * Three kernels keep one contract: AVX-512 (tile_avx512.c), AVX2 with FMA (tile_avx2.c)
 * and plain C (tile_portable.c). On x86-64 the two vector kernels are compiled in every
 * build, each function with its own target attribute, whatever -march the build has;
 * the first call picks the widest one this CPU runs (tile.c). So a generic x86-64 build
 * gets vector tiles on any machine, and a test on an AVX-512 machine can run all three. */
#ifndef HG_BACKEND_CPU_TILE_H
#define HG_BACKEND_CPU_TILE_H

#include <stddef.h>

/* C (m x n) = [C +] A (m x k) @ B (k x n).
 * A's element (i, p) is at A[i*a_rs + p*a_cs], so A may be read transposed in place.
 * B's row p is the n contiguous floats at B + p*ldb; C's row i is at C + i*ldc.
 * n must be a multiple of 16. */
typedef void tile_gemm_fn(int m, int n, int k, const float *A, ptrdiff_t a_rs, ptrdiff_t a_cs,
                          const float *B, ptrdiff_t ldb, float *C, ptrdiff_t ldc, int accumulate);

/* dst (16 x 16, row stride ldd) = the transpose of src (16 x 16, row stride lds). */
typedef void tile_transpose16_fn(const float *src, ptrdiff_t lds, float *dst, ptrdiff_t ldd);

typedef struct tile_kernel {
    const char *name; /* "avx512", "avx2", "portable" */
    tile_gemm_fn *gemm;
    tile_transpose16_fn *transpose16;
    int (*supported)(void); /* whether this CPU (and OS) runs it */
} tile_kernel;

extern const tile_kernel tile_portable;
#if defined(__x86_64__)
extern const tile_kernel tile_avx2, tile_avx512;
#endif

/* The kernels this build has, widest first, NULL-terminated. */
const tile_kernel *const *tile_kernels(void);
/* The kernel the attention ops use: the one the environment variable HANDGRAD_TILES
 * names (avx512, avx2 or portable: to time a narrower ISA's tiles on a wider CPU) where
 * this build has it and this CPU runs it, else the widest supported one; unless
 * tile_use chose. A name that cannot run is passed over here: the command refuses it
 * (tile_env_refused). */
const tile_kernel *tile_active(void);
/* Use kernel `name` from now on (for kernel labs and tests; not thread-safe against
 * running ops). Returns 0 if this build lacks it or this CPU cannot run it. */
int tile_use(const char *name);
/* The value of HANDGRAD_TILES when it is set to a kernel this build lacks or this CPU
 * cannot run, else NULL. */
const char *tile_env_refused(void);

/* The calls the attention ops make, through tile_active(). */
void tile_gemm(int m, int n, int k, const float *A, ptrdiff_t a_rs, ptrdiff_t a_cs,
               const float *B, ptrdiff_t ldb, float *C, ptrdiff_t ldc, int accumulate);
void tile_transpose16(const float *src, ptrdiff_t lds, float *dst, ptrdiff_t ldd);

#endif
