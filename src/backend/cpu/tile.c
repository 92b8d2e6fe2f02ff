/* Which tile kernel runs (tile.h): the widest this CPU supports, chosen at the first call. */
#include <pthread.h>
#include <string.h>

#include "backend/cpu/tile.h"

static const tile_kernel *const all[] = {
#if defined(__x86_64__)
    &tile_avx512,
    &tile_avx2,
#endif
    &tile_portable,
    NULL,
};

static const tile_kernel *active;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void pick(void) {
    for (int i = 0; all[i]; i++)
        if (all[i]->supported()) {
            active = all[i];
            return;
        }
}

const tile_kernel *const *tile_kernels(void) { return all; }

const tile_kernel *tile_active(void) {
    pthread_once(&once, pick);
    return active;
}

int tile_use(const char *name) {
    pthread_once(&once, pick);
    for (int i = 0; all[i]; i++)
        if (!strcmp(all[i]->name, name) && all[i]->supported()) {
            active = all[i];
            return 1;
        }
    return 0;
}

void tile_gemm(int m, int n, int k, const float *A, ptrdiff_t a_rs, ptrdiff_t a_cs,
               const float *B, ptrdiff_t ldb, float *C, ptrdiff_t ldc, int accumulate) {
    tile_active()->gemm(m, n, k, A, a_rs, a_cs, B, ldb, C, ldc, accumulate);
}

void tile_transpose16(const float *src, ptrdiff_t lds, float *dst, ptrdiff_t ldd) {
    tile_active()->transpose16(src, lds, dst, ldd);
}
