/* Whole-file reads, read-only maps and atomic writes for the data module. */
#define _POSIX_C_SOURCE 200809L
#include "data/fileio.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"

hg_status file_read_all(const char *path, uint8_t **data, size_t *len) {
    *data = NULL;
    *len = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return hg_fail(HG_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    size_t cap = 1 << 16, n = 0;
    uint8_t *buf = malloc(cap + 1);
    if (!buf) {
        fclose(f);
        return hg_fail(HG_ERR_NOMEM, "%s: out of memory reading the file", path);
    }
    for (;;) {
        if (n == cap) {
            uint8_t *grown = realloc(buf, 2 * cap + 1);
            if (!grown) {
                free(buf);
                fclose(f);
                return hg_fail(HG_ERR_NOMEM, "%s: out of memory reading the file", path);
            }
            buf = grown;
            cap *= 2;
        }
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (got == 0) break;
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        return hg_fail(HG_ERR_IO, "%s: read error", path);
    }
    buf[n] = 0;
    *data = buf;
    *len = n;
    return HG_OK;
}

hg_status file_map(const char *path, const uint8_t **data, size_t *len) {
    *data = NULL;
    *len = 0;
    int fd = open(path, O_RDONLY);
    if (fd < 0) return hg_fail(HG_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return hg_fail(HG_ERR_IO, "%s: not a regular file", path);
    }
    if (st.st_size == 0) {
        close(fd);
        return HG_OK;
    }
    void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (p == MAP_FAILED) return hg_fail(HG_ERR_IO, "%s: cannot map: %s", path, strerror(errno));
    *data = p;
    *len = (size_t)st.st_size;
    return HG_OK;
}

void file_unmap(const uint8_t *data, size_t len) {
    if (data && len) munmap((void *)data, len);
}

hg_status file_write_all(const char *path, const void *data, size_t len) {
    return hg_write_file_atomic(path, data, len);
}

size_t text_line_of(const uint8_t *buf, size_t off) {
    size_t line = 1;
    for (size_t i = 0; i < off; i++) line += buf[i] == '\n';
    return line;
}
