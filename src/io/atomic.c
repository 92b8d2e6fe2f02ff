/* Atomic file writes: temp file, fsync, rename, fsync of the folder (atomic.h). */
#define _GNU_SOURCE
#include "io/atomic.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"

struct hg_afile {
    char *path, *tmp;
    int fd;
    size_t written;
};

hg_status hg_afile_open(hg_afile **out, const char *path) {
    *out = NULL;
    hg_afile *f = calloc(1, sizeof *f);
    size_t n = strlen(path);
    if (f) f->path = strdup(path), f->tmp = malloc(n + 5);
    if (!f || !f->path || !f->tmp) {
        if (f) free(f->path), free(f->tmp);
        free(f);
        return hg_fail(HG_ERR_NOMEM, "%s: out of memory", path);
    }
    memcpy(f->tmp, path, n);
    memcpy(f->tmp + n, ".tmp", 5);
    f->fd = open(f->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (f->fd < 0) {
        hg_status s = hg_fail(HG_ERR_IO, "%s: cannot create: %s", f->tmp, strerror(errno));
        free(f->path), free(f->tmp), free(f);
        return s;
    }
    *out = f;
    return HG_OK;
}

hg_status hg_afile_write(hg_afile *f, const void *data, size_t n) {
    const char *p = data;
    while (n > 0) {
        ssize_t w = write(f->fd, p, n > (1u << 30) ? (1u << 30) : n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0)
            return hg_fail(HG_ERR_IO, "%s: write failed after %zu bytes: %s", f->tmp, f->written,
                           w < 0 ? strerror(errno) : "no progress");
        p += w;
        n -= (size_t)w;
        f->written += (size_t)w;
    }
    return HG_OK;
}

static void afile_free(hg_afile *f) {
    free(f->path);
    free(f->tmp);
    free(f);
}

void hg_afile_abort(hg_afile *f) {
    if (!f) return;
    if (f->fd >= 0) close(f->fd);
    unlink(f->tmp);
    afile_free(f);
}

/* The folder part of a path ("." when there is none). */
static void dir_of(const char *path, char *dir, size_t cap) {
    const char *slash = strrchr(path, '/');
    if (!slash) snprintf(dir, cap, ".");
    else if (slash == path) snprintf(dir, cap, "/");
    else snprintf(dir, cap, "%.*s", (int)(slash - path), path);
}

hg_status hg_fsync_dir(const char *dir) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return hg_fail(HG_ERR_IO, "%s: cannot open folder to sync: %s", dir, strerror(errno));
    int bad = fsync(fd) != 0 && errno != EINVAL; /* some filesystems cannot sync a folder */
    int err = errno;
    close(fd);
    if (bad) return hg_fail(HG_ERR_IO, "%s: fsync of the folder failed: %s", dir, strerror(err));
    return HG_OK;
}

hg_status hg_afile_commit(hg_afile *f) {
    hg_status s = HG_OK;
    if (fsync(f->fd) != 0) s = hg_fail(HG_ERR_IO, "%s: fsync failed: %s", f->tmp, strerror(errno));
    if (close(f->fd) != 0 && s == HG_OK) s = hg_fail(HG_ERR_IO, "%s: close failed: %s", f->tmp, strerror(errno));
    f->fd = -1;
    if (s == HG_OK && rename(f->tmp, f->path) != 0)
        s = hg_fail(HG_ERR_IO, "%s: cannot rename to %s: %s", f->tmp, f->path, strerror(errno));
    if (s != HG_OK) {
        hg_afile_abort(f);
        return s;
    }
    char dir[PATH_MAX];
    dir_of(f->path, dir, sizeof dir);
    afile_free(f);
    return hg_fsync_dir(dir);
}

void hg_remove_dir(const char *dir) {
    struct stat sb;
    if (lstat(dir, &sb) != 0) return;
    if (!S_ISDIR(sb.st_mode)) { /* a symlink goes, never what it points to */
        unlink(dir);
        return;
    }
    DIR *d = opendir(dir);
    if (d) {
        struct dirent *e;
        char p[PATH_MAX];
        while ((e = readdir(d)))
            if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
                snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
                unlink(p);
            }
        closedir(d);
    }
    rmdir(dir);
}

hg_status hg_write_file_atomic(const char *path, const void *data, size_t len) {
    if (!path || (!data && len)) return hg_fail(HG_ERR_INVALID, "hg_write_file_atomic: NULL argument");
    hg_afile *f;
    HG_TRY(hg_afile_open(&f, path));
    hg_status s = hg_afile_write(f, data, len);
    if (s != HG_OK) {
        hg_afile_abort(f);
        return s;
    }
    return hg_afile_commit(f);
}
