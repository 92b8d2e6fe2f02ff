/* The training data record of a run: file names, sizes and head hashes (train_data.h). */
#define _POSIX_C_SOURCE 200809L
#include "train_data.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

enum { HEAD_BYTES = 4096 };

/* One file's entry: its size and the FNV-1a 64 hash of its first HEAD_BYTES bytes. */
static int file_entry(const char *path, cJSON *files, char *why, size_t cap) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        snprintf(why, cap, "%s: %s", path, strerror(errno));
        if (fd >= 0) close(fd);
        return 1;
    }
    unsigned char head[HEAD_BYTES];
    ssize_t n = pread(fd, head, sizeof head, 0);
    close(fd);
    if (n < 0) {
        snprintf(why, cap, "%s: cannot read: %s", path, strerror(errno));
        return 1;
    }
    uint64_t h = 0xcbf29ce484222325ull;
    for (ssize_t i = 0; i < n; i++) h = (h ^ head[i]) * 0x100000001b3ull;
    const char *slash = strrchr(path, '/');
    char hex[17];
    snprintf(hex, sizeof hex, "%016" PRIx64, h);
    cJSON *e = cJSON_CreateObject();
    if (!e || !cJSON_AddItemToArray(files, e) || !cJSON_AddStringToObject(e, "name", slash ? slash + 1 : path) ||
        !cJSON_AddNumberToObject(e, "bytes", (double)st.st_size) || !cJSON_AddStringToObject(e, "head", hex)) {
        snprintf(why, cap, "out of memory");
        return 1;
    }
    return 0;
}

char *train_data_json(const char *pattern, char *why, size_t cap) {
    glob_t g;
    if (glob(pattern, 0, NULL, &g) != 0) {
        snprintf(why, cap, "%s: no file matches", pattern);
        return NULL;
    }
    cJSON *o = cJSON_CreateObject(), *files = cJSON_CreateArray();
    int bad = !o || !files || !cJSON_AddStringToObject(o, "train", pattern) || !cJSON_AddItemToObject(o, "files", files);
    if (bad) snprintf(why, cap, "out of memory");
    if (!o || bad) cJSON_Delete(files); /* not yet owned by o */
    for (size_t i = 0; !bad && i < g.gl_pathc; i++) bad = file_entry(g.gl_pathv[i], files, why, cap);
    globfree(&g);
    char *out = bad ? NULL : cJSON_Print(o);
    if (!bad && !out) snprintf(why, cap, "out of memory");
    cJSON_Delete(o);
    return out;
}

static const char *str_of(const cJSON *e, const char *key) {
    return cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(e, key));
}

int train_data_differ(const char *was, const char *now, char *why, size_t cap) {
    cJSON *a = cJSON_Parse(was), *b = cJSON_Parse(now);
    const cJSON *fa = cJSON_GetObjectItemCaseSensitive(a, "files"), *fb = cJSON_GetObjectItemCaseSensitive(b, "files");
    int na = cJSON_GetArraySize(fa), nb = cJSON_GetArraySize(fb), differ = 0;
    if (!cJSON_IsArray(fa) || !cJSON_IsArray(fb)) {
        snprintf(why, cap, "its \"files\" list cannot be read");
        differ = 1;
    }
    for (int i = 0; !differ && i < na && i < nb; i++) {
        const cJSON *x = cJSON_GetArrayItem(fa, i), *y = cJSON_GetArrayItem(fb, i);
        const char *nx = str_of(x, "name"), *ny = str_of(y, "name"), *hx = str_of(x, "head"), *hy = str_of(y, "head");
        double bx = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(x, "bytes"));
        double by = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(y, "bytes"));
        if (!nx || !ny || !hx || !hy) snprintf(why, cap, "file %d's record cannot be read", i + 1), differ = 1;
        else if (strcmp(nx, ny)) snprintf(why, cap, "file %d is %s, was %s", i + 1, ny, nx), differ = 1;
        else if (bx != by) snprintf(why, cap, "%s: %.0f bytes, was %.0f", nx, by, bx), differ = 1;
        else if (strcmp(hx, hy)) snprintf(why, cap, "%s: its first %d bytes changed", nx, HEAD_BYTES), differ = 1;
    }
    if (!differ && na != nb) {
        const char *first = str_of(cJSON_GetArrayItem(na < nb ? fb : fa, na < nb ? na : nb), "name");
        snprintf(why, cap, "%d file(s), was %d (first %s: %s)", nb, na, na < nb ? "new" : "gone", first ? first : "?");
        differ = 1;
    }
    cJSON_Delete(a);
    cJSON_Delete(b);
    return differ;
}
