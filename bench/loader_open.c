/* The cost of checking every token when shards are opened: hg_loader_open (map, parse,
 * the max over every token) against reading the same bytes once from the page cache
 * (a sum over the mapped words: what any pass over the data costs), best of R runs each
 * after a warm-up that puts the files in the page cache.
 * A handgrad shard's header records a bound on its ids, which spares the read; a shard
 * made with "unbounded" has it cleared, as shards written before 2026-11-24 and the
 * llm.c and nanoGPT formats have none.
 * Usage: loader_open GLOB [repeats]
 *        loader_open --make FILE MiB V [unbounded]   (a synthetic handgrad shard) */
#define _POSIX_C_SOURCE 200809L
#include <glob.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/timer.h"
#include "data/fileio.h"
#include "data/shard.h"
#include "handgrad.h"

/* A shard of MiB mebibytes of pseudo-random ids below V, written with handgrad's writer;
 * unbounded clears the header's id bound. */
static int make(const char *path, long mib, int V, int unbounded) {
    shard_writer w;
    if (shard_writer_open(&w, path, V, 0, 0) != HG_OK) return fprintf(stderr, "%s\n", hg_last_error()), 1;
    enum { CHUNK = 1 << 16 };
    static int32_t ids[CHUNK];
    uint64_t x = 88172645463325252ull, n = (uint64_t)mib * 1048576 / (V > 65536 ? 4 : 2);
    for (uint64_t done = 0; done < n; done += CHUNK) {
        size_t k = n - done < CHUNK ? (size_t)(n - done) : CHUNK;
        for (size_t i = 0; i < k; i++) x ^= x << 13, x ^= x >> 7, x ^= x << 17, ids[i] = (int32_t)(x % (uint64_t)V);
        if (shard_writer_write(&w, ids, NULL, k) != HG_OK) return shard_writer_abort(&w), fprintf(stderr, "%s\n", hg_last_error()), 1;
    }
    if (shard_writer_close(&w) != HG_OK) return fprintf(stderr, "%s\n", hg_last_error()), 1;
    FILE *f = unbounded ? fopen(path, "r+b") : NULL;
    if (unbounded && (!f || fseek(f, 32, SEEK_SET) || fwrite("\0\0\0\0", 1, 4, f) != 4 || fclose(f)))
        return fprintf(stderr, "%s: cannot clear the id bound\n", path), 1;
    return 0;
}

/* Sums every 8-byte word of the files: one read of their bytes. */
static uint64_t read_once(const glob_t *g, uint64_t *bytes) {
    uint64_t sum = 0;
    *bytes = 0;
    for (size_t f = 0; f < g->gl_pathc; f++) {
        const uint8_t *d;
        size_t len;
        if (file_map(g->gl_pathv[f], &d, &len) != HG_OK) continue;
        const uint64_t *w = (const uint64_t *)(const void *)d;
        for (size_t i = 0; i < len / 8; i++) sum += w[i];
        *bytes += len;
        file_unmap(d, len);
    }
    return sum;
}

int main(int argc, char **argv) {
    if ((argc == 5 || argc == 6) && !strcmp(argv[1], "--make"))
        return make(argv[2], atol(argv[3]), atoi(argv[4]), argc == 6 && !strcmp(argv[5], "unbounded"));
    if (argc < 2) {
        fprintf(stderr, "usage: loader_open GLOB [repeats] | loader_open --make FILE MiB V [unbounded]\n");
        return 2;
    }
    int R = argc > 2 ? atoi(argv[2]) : 5;
    glob_t g;
    if (glob(argv[1], 0, NULL, &g) != 0) return fprintf(stderr, "%s: no file matches\n", argv[1]), 1;
    hg_loader_options o = hg_loader_options_default();
    o.seq_len = 64;
    double best_open = 1e30, best_read = 1e30;
    uint64_t bytes = 0, sum = 0;
    for (int r = 0; r <= R; r++) { /* r = 0 warms the page cache */
        double t0 = hg_now();
        sum += read_once(&g, &bytes);
        double t1 = hg_now();
        hg_loader *ld;
        if (hg_loader_open(&ld, (const char *const *)g.gl_pathv, (int)g.gl_pathc, &o) != HG_OK)
            return fprintf(stderr, "%s\n", hg_last_error()), 1;
        double t2 = hg_now();
        hg_loader_close(ld);
        if (r) best_read = t1 - t0 < best_read ? t1 - t0 : best_read, best_open = t2 - t1 < best_open ? t2 - t1 : best_open;
    }
    printf("%zu file(s), %.1f MiB: hg_loader_open %.6f s (%.2f GB/s), one read of the bytes %.6f s (%.2f GB/s), "
           "ratio %.2f (checksum %llx)\n",
           g.gl_pathc, bytes / 1048576.0, best_open, bytes / best_open / 1e9, best_read, bytes / best_read / 1e9,
           best_open / best_read, (unsigned long long)(sum & 0xffff));
    globfree(&g);
    return 0;
}
