/* Which tile kernel runs (tile.h): the one $HANDGRAD_TILES names, if this build has it and
 * this CPU runs it, else the widest this CPU supports; chosen at the first call. */
#include <pthread.h>
#include <stdlib.h>
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

static const tile_kernel *find(const char *name) {
    for (int i = 0; all[i]; i++)
        if (!strcmp(all[i]->name, name) && all[i]->supported()) return all[i];
    return NULL;
}

static void pick(void) {
    const char *env = getenv("HANDGRAD_TILES");
    active = env ? find(env) : NULL;
    for (int i = 0; all[i] && !active; i++)
        if (all[i]->supported()) active = all[i];
}

const tile_kernel *const *tile_kernels(void) { return all; }

const tile_kernel *tile_active(void) {
    pthread_once(&once, pick);
    return active;
}

int tile_use(const char *name) {
    pthread_once(&once, pick);
    const tile_kernel *k = find(name);
    if (k) active = k;
    return k != NULL;
}

void tile_gemm(int m, int n, int k, const float *A, ptrdiff_t a_rs, ptrdiff_t a_cs,
               const float *B, ptrdiff_t ldb, float *C, ptrdiff_t ldc, int accumulate) {
    tile_active()->gemm(m, n, k, A, a_rs, a_cs, B, ldb, C, ldc, accumulate);
}

void tile_transpose16(const float *src, ptrdiff_t lds, float *dst, ptrdiff_t ldd) {
    tile_active()->transpose16(src, lds, dst, ldd);
}

const char *tile_env_refused(void) {
    const char *env = getenv("HANDGRAD_TILES");
    return env && !find(env) ? env : NULL;
}
