/* Loading a Hugging Face folder against reading its bytes: how long hg_model_load_hf's
 * weight load (open the shards, check, convert to fp32, transpose into handgrad's
 * layouts) takes next to read()ing the same weight files from the page cache into one
 * buffer, best of R runs each, after a warm-up that puts the files in the page cache.
 * Usage: hf_load DIR [repeats] [threads]   (bench/hf_load.py makes a SmolLM-135M-shaped
 * bf16 folder and runs this) */
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/timer.h"
#include "handgrad.h"
#include "io/hf.h"

/* read()s every .safetensors file of dir into buf; returns the bytes. */
static size_t read_all(const char *dir, char *buf, size_t cap) {
    DIR *d = opendir(dir);
    size_t total = 0;
    for (struct dirent *de; d && (de = readdir(d));) {
        size_t n = strlen(de->d_name);
        if (n < 12 || strcmp(de->d_name + n - 12, ".safetensors")) continue;
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        int fd = open(path, O_RDONLY);
        for (ssize_t r; fd >= 0 && (r = read(fd, buf, cap)) > 0;) total += (size_t)r;
        if (fd >= 0) close(fd);
    }
    if (d) closedir(d);
    return total;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: hf_load DIR [repeats] [threads]\n");
        return 2;
    }
    const char *dir = argv[1];
    int reps = argc > 2 ? atoi(argv[2]) : 5, threads = argc > 3 ? atoi(argv[3]) : 0;
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    hg_config cfg;
    hf_arch arch;
    if (hf_config_load(path, &cfg, &arch) != HG_OK) {
        fprintf(stderr, "%s\n", hg_last_error());
        return 1;
    }
    hg_options o = hg_options_default();
    o.training = 0, o.seq_len = 1, o.threads = threads;
    hg_model *m = NULL;
    if (hg_model_create(&m, &cfg, &o) != HG_OK) {
        fprintf(stderr, "%s\n", hg_last_error());
        return 1;
    }
    const size_t cap = 64u << 20;
    char *buf = malloc(cap);
    size_t bytes = read_all(dir, buf, cap); /* warm the page cache */
    double best_read = 1e30, best_load = 1e30;
    for (int r = 0; r < reps; r++) {
        double t0 = hg_now();
        read_all(dir, buf, cap);
        double t1 = hg_now();
        hf_tensors *t = NULL;
        if (hf_tensors_open(&t, dir) != HG_OK || hf_load_weights(m, arch, t) != HG_OK) {
            fprintf(stderr, "%s\n", hg_last_error());
            return 1;
        }
        hf_tensors_close(t);
        double t2 = hg_now();
        if (t1 - t0 < best_read) best_read = t1 - t0;
        if (t2 - t1 < best_load) best_load = t2 - t1;
    }
    printf("%s: %lld parameters, %.1f MB of weight files, %s, %d threads\n", dir,
           (long long)hg_config_param_count(&cfg, 1), bytes / 1e6, hf_arch_class(arch), hg_model_options(m)->threads);
    printf("read from page cache  %.1f ms (%.2f GB/s)\n", best_read * 1e3, bytes / best_read / 1e9);
    printf("load into fp32 model  %.1f ms (%.2f GB/s of files)\n", best_load * 1e3, bytes / best_load / 1e9);
    printf("ratio load/read       %.2f\n", best_load / best_read);
    free(buf);
    hg_model_free(m);
    return 0;
}
