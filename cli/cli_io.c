/* Input reading, error printing and output-path checks for the CLI (cli_io.h). */
#include "cli_io.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "handgrad.h"

uint8_t *cli_read_input(const char *cmd, const char *path, size_t *len) {
    FILE *f = strcmp(path, "-") ? fopen(path, "rb") : stdin;
    if (!f) {
        fprintf(stderr, "handgrad %s: %s: %s\n", cmd, path, strerror(errno));
        return NULL;
    }
    size_t cap = 1 << 16, n = 0;
    uint8_t *buf = malloc(cap);
    while (buf) {
        n += fread(buf + n, 1, cap - n, f);
        if (n < cap) break;
        uint8_t *grown = realloc(buf, 2 * cap);
        if (!grown) {
            free(buf);
            buf = NULL;
            break;
        }
        buf = grown;
        cap *= 2;
    }
    int bad = ferror(f), e = errno; /* a folder opens, then fails to read with EISDIR */
    if (f != stdin) fclose(f);
    if (!buf || bad) {
        fprintf(stderr, "handgrad %s: %s: %s\n", cmd, path, buf ? strerror(e) : "out of memory");
        free(buf);
        return NULL;
    }
    *len = n;
    return buf;
}

int cli_fail(const char *cmd) {
    fprintf(stderr, "handgrad %s: %s\n", cmd, hg_last_error());
    return 1;
}

int cli_check_writable(const char *cmd, const char *flag, const char *path) {
    struct stat st;
    const char *why = NULL;
    size_t n = strlen(path);
    char *dir = malloc(n + 2);
    if (!dir) why = "out of memory";
    else {
        const char *slash = strrchr(path, '/');
        if (!slash) strcpy(dir, ".");
        else if (slash == path) strcpy(dir, "/");
        else {
            memcpy(dir, path, (size_t)(slash - path));
            dir[slash - path] = 0;
        }
        if (n == 0 || path[n - 1] == '/') why = "is a directory name, not a file";
        else if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) why = "is a directory";
        else if (stat(dir, &st) != 0) why = "its directory does not exist";
        else if (!S_ISDIR(st.st_mode)) why = "its parent is not a directory";
        else if (access(dir, W_OK) != 0) why = "its directory is not writable";
        else if (access(path, F_OK) == 0 && access(path, W_OK) != 0) why = "the file is not writable";
    }
    free(dir);
    if (!why) return 0;
    fprintf(stderr, "handgrad %s: %s %s: %s\n", cmd, flag, path, why);
    return 1;
}

void cli_folder_of(const char *path, char *out, size_t cap) {
    struct stat sb;
    const char *slash = strrchr(path, '/');
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) snprintf(out, cap, "%s", path);
    else if (slash) snprintf(out, cap, "%.*s", (int)(slash - path), path);
    else snprintf(out, cap, ".");
}

/* mkdir of one path; an existing folder counts as made, an existing file is ENOTDIR */
static int make_one(const char *p) {
    struct stat st;
    if (mkdir(p, 0777) == 0) return 0;
    int e = errno;
    if (stat(p, &st) == 0) return S_ISDIR(st.st_mode) ? 0 : ENOTDIR;
    return e;
}

int cli_make_dirs(const char *dir, char *failed, size_t cap) {
    size_t n = strlen(dir);
    int e = 0;
    if (cap) failed[0] = 0;
    if (n == 0) e = ENOENT;
    char *p = e ? NULL : malloc(n + 1);
    if (!e && !p) e = ENOMEM;
    if (!e) {
        memcpy(p, dir, n + 1);
        while (n > 1 && p[n - 1] == '/') p[--n] = 0; /* "a/b/" is "a/b" */
        /* each parent in turn ("a", "a/b"), then the folder itself; repeated slashes
         * name the same parent twice, which is harmless */
        for (char *s = p + 1; !e && *s; s++)
            if (*s == '/' && s[-1] != '/') {
                *s = 0;
                e = make_one(p);
                if (!e) *s = '/';
            }
        if (!e) e = make_one(p);
        if (e && cap) snprintf(failed, cap, "%s", p);
    } else if (cap) {
        snprintf(failed, cap, "%s", dir);
    }
    free(p);
    return e;
}

int cli_mkdir_p(const char *cmd, const char *flag, const char *dir) {
    char failed[4096];
    struct stat st;
    int e = cli_make_dirs(dir, failed, sizeof failed);
    if (!e) return 0;
    if (e == ENOTDIR && stat(failed, &st) == 0 && !S_ISDIR(st.st_mode))
        fprintf(stderr, "handgrad %s: %s %s: cannot create the folder: %s is a file\n", cmd, flag, dir, failed);
    else
        fprintf(stderr, "handgrad %s: %s %s: cannot create the folder %s: %s\n", cmd, flag, dir, failed, strerror(e));
    return 1;
}
