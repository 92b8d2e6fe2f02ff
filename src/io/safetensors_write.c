/* safetensors writer: builds the JSON header, then streams the tensors through an
 * atomic file (temp name, fsync, rename). */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "io/atomic.h"
#include "io/safetensors.h"

/* An integer as raw JSON text, so offsets above 2^31 print exactly. */
static cJSON *raw_int(uint64_t v) {
    char buf[24];
    snprintf(buf, sizeof buf, "%llu", (unsigned long long)v);
    return cJSON_CreateRaw(buf);
}

/* The header JSON; sizes[i] receives tensor i's byte count. */
static hg_status build_header(const char *path, const hg_st_entry *t, int n, const char *const *meta, int n_meta,
                              uint64_t *sizes, char **out) {
    cJSON *h = cJSON_CreateObject(), *md = n_meta ? cJSON_AddObjectToObject(h, "__metadata__") : NULL;
    hg_status s = h && (md || !n_meta) ? HG_OK : hg_fail(HG_ERR_NOMEM, "%s: out of memory", path);
    for (int i = 0; s == HG_OK && i < n_meta; i++)
        if (!meta[2 * i] || !meta[2 * i + 1] || !cJSON_AddStringToObject(md, meta[2 * i], meta[2 * i + 1]))
            s = hg_fail(HG_ERR_INVALID, "%s: metadata pair %d is NULL or out of memory", path, i);
    uint64_t off = 0;
    for (int i = 0; s == HG_OK && i < n; i++) {
        int esize = hg_st_dtype_size(t[i].dtype);
        const char *dt = esize ? hg_st_dtype_name(t[i].dtype) : NULL;
        if (!t[i].name || !strcmp(t[i].name, "__metadata__") || cJSON_GetObjectItemCaseSensitive(h, t[i].name))
            s = hg_fail(HG_ERR_INVALID, "%s: tensor %d's name '%s' is missing, reserved or repeated", path, i,
                        t[i].name ? t[i].name : "(null)");
        else if (!dt || t[i].ndim < 0 || t[i].ndim > HG_ST_MAX_DIMS)
            s = hg_fail(HG_ERR_INVALID, "%s: tensor '%s' has a bad dtype or ndim", path, t[i].name);
        if (s != HG_OK) break;
        uint64_t numel = 1;
        cJSON *e = cJSON_AddObjectToObject(h, t[i].name), *shape = cJSON_CreateArray(), *offs = cJSON_CreateArray();
        cJSON_AddItemToObject(e, "dtype", cJSON_CreateString(dt));
        cJSON_AddItemToObject(e, "shape", shape);
        for (int d = 0; d < t[i].ndim; d++) {
            cJSON_AddItemToArray(shape, raw_int((uint64_t)t[i].shape[d]));
            numel *= (uint64_t)t[i].shape[d];
        }
        sizes[i] = numel * (uint64_t)esize;
        cJSON_AddItemToArray(offs, raw_int(off));
        cJSON_AddItemToArray(offs, raw_int(off + sizes[i]));
        cJSON_AddItemToObject(e, "data_offsets", offs);
        off += sizes[i];
    }
    *out = s == HG_OK ? cJSON_PrintUnformatted(h) : NULL;
    if (s == HG_OK && !*out) s = hg_fail(HG_ERR_NOMEM, "%s: out of memory printing the header", path);
    cJSON_Delete(h);
    return s;
}

hg_status hg_st_write(const char *path, const hg_st_entry *t, int n, const char *const *meta, int n_meta) {
    if (!path || (n && !t) || (n_meta && !meta) || n < 0 || n_meta < 0)
        return hg_fail(HG_ERR_INVALID, "hg_st_write: NULL or negative argument");
    uint64_t *sizes = calloc((size_t)n + 1, sizeof *sizes);
    if (!sizes) return hg_fail(HG_ERR_NOMEM, "%s: out of memory", path);
    char *json = NULL;
    hg_status s = build_header(path, t, n, meta, n_meta, sizes, &json);
    hg_afile *f = NULL;
    if (s == HG_OK) s = hg_afile_open(&f, path);
    if (s == HG_OK) {
        size_t jlen = strlen(json), hlen = (jlen + 7) / 8 * 8;
        uint8_t len8[8];
        for (int i = 0; i < 8; i++) len8[i] = (uint8_t)((uint64_t)hlen >> (8 * i));
        s = hg_afile_write(f, len8, 8);
        if (s == HG_OK) s = hg_afile_write(f, json, jlen);
        if (s == HG_OK && hlen > jlen) s = hg_afile_write(f, "       ", hlen - jlen);
        for (int i = 0; s == HG_OK && i < n; i++) s = hg_afile_write(f, t[i].data, (size_t)sizes[i]);
        if (s == HG_OK) s = hg_afile_commit(f);
        else hg_afile_abort(f);
    }
    free(json);
    free(sizes);
    return s;
}
