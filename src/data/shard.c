/* Shard headers: parsing the three formats the loader reads, and writing handgrad's. */
#include "data/shard.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "data/fileio.h"

static uint32_t le32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t le64(const uint8_t *p) { return (uint64_t)le32(p) | (uint64_t)le32(p + 4) << 32; }

static void put32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static int ends_with_bin(const char *path) {
    size_t n = strlen(path);
    return n >= 4 && !strcmp(path + n - 4, ".bin");
}

static hg_status parse_handgrad(const uint8_t *d, size_t len, const char *path, hg_shard_info *info, size_t *at) {
    if (len < SHARD_HEADER_BYTES)
        return hg_fail(HG_ERR_FORMAT, "%s: offset 0: %zu bytes, shorter than the %d-byte header", path, len,
                       SHARD_HEADER_BYTES);
    if (memcmp(d, SHARD_MAGIC, 8))
        return hg_fail(HG_ERR_FORMAT, "%s: offset 0: bad magic; not a handgrad token shard", path);
    uint32_t version = le32(d + 8), width = le32(d + 12), vocab = le32(d + 24), streams = le32(d + 36);
    int32_t sep = (int32_t)le32(d + 28);
    uint32_t bound = le32(d + 32);
    uint64_t count = le64(d + 16);
    if (version != 1 && version != SHARD_VERSION)
        return hg_fail(HG_ERR_FORMAT, "%s: offset 8: version %u; this handgrad reads versions 1 and %d, re-run prepare",
                       path, version, SHARD_VERSION);
    if (version == 1) streams = 0; /* reserved, zero */
    if (streams & ~SHARD_HAS_FLAGS)
        return hg_fail(HG_ERR_FORMAT, "%s: offset 36: streams word %#x has bits this handgrad does not know", path,
                       streams);
    const int flags = (streams & SHARD_HAS_FLAGS) != 0;
    if (width != 2 && width != 4)
        return hg_fail(HG_ERR_FORMAT, "%s: offset 12: token width %u; want 2 (uint16) or 4 (uint32)", path, width);
    if (vocab > (uint32_t)INT32_MAX || (width == 2 && vocab > 65536))
        return hg_fail(HG_ERR_FORMAT, "%s: offset 24: vocabulary size %u does not fit %u-byte tokens", path, vocab,
                       width);
    if (sep < -1 || (vocab && sep >= (int64_t)vocab))
        return hg_fail(HG_ERR_FORMAT, "%s: offset 28: separator id %d is not -1 (none) or an id below the vocabulary size %u",
                       path, sep, vocab);
    if (vocab && bound > vocab)
        return hg_fail(HG_ERR_FORMAT, "%s: offset 32: the header says ids reach %u, beyond the vocabulary size %u", path,
                       bound - 1, vocab);
    uint64_t body = len - SHARD_HEADER_BYTES, per = width + (uint64_t)flags;
    if (count > body / per || body != count * per)
        return hg_fail(HG_ERR_FORMAT, "%s: offset 16: header says %llu tokens (%llu bytes%s) but %llu bytes follow the header",
                       path, (unsigned long long)count, (unsigned long long)(count * per),
                       flags ? " with their flags" : "", (unsigned long long)body);
    *info = (hg_shard_info){HG_SHARD_HANDGRAD, (int)width, count, (int)vocab, sep, bound, flags};
    *at = SHARD_HEADER_BYTES;
    return HG_OK;
}

static hg_status parse_llmc(const uint8_t *d, size_t len, const char *path, hg_shard_info *info, size_t *at) {
    if (len < LLMC_HEADER_BYTES)
        return hg_fail(HG_ERR_FORMAT, "%s: offset 0: %zu bytes, shorter than llm.c's %d-byte header", path, len,
                       LLMC_HEADER_BYTES);
    uint32_t magic = le32(d), version = le32(d + 4), count = le32(d + 8);
    if (magic != LLMC_MAGIC)
        return hg_fail(HG_ERR_FORMAT, "%s: offset 0: bad magic %u; llm.c shards start with %d", path, magic, LLMC_MAGIC);
    if (version != LLMC_VERSION)
        return hg_fail(HG_ERR_FORMAT, "%s: offset 4: llm.c version %u; only version %d (uint16 tokens) is read", path,
                       version, LLMC_VERSION);
    uint64_t body = len - LLMC_HEADER_BYTES;
    if (body != (uint64_t)count * 2)
        return hg_fail(HG_ERR_FORMAT, "%s: offset 8: header says %u tokens (%llu bytes) but %llu bytes follow the header",
                       path, count, (unsigned long long)count * 2, (unsigned long long)body);
    *info = (hg_shard_info){HG_SHARD_LLMC, 2, count, 0, -1, 0, 0};
    *at = LLMC_HEADER_BYTES;
    return HG_OK;
}

static hg_status parse_nanogpt(size_t len, const char *path, hg_shard_info *info, size_t *at) {
    if (len % 2)
        return hg_fail(HG_ERR_FORMAT, "%s: offset %zu: %zu bytes is not a whole number of uint16 tokens", path,
                       len - 1, len);
    *info = (hg_shard_info){HG_SHARD_NANOGPT, 2, len / 2, 0, -1, 0, 0};
    *at = 0;
    return HG_OK;
}

hg_status shard_parse(const uint8_t *d, size_t len, const char *path, hg_shard_format format, hg_shard_info *info,
                      size_t *at) {
    switch (format) {
    case HG_SHARD_HANDGRAD: return parse_handgrad(d, len, path, info, at);
    case HG_SHARD_LLMC: return parse_llmc(d, len, path, info, at);
    case HG_SHARD_NANOGPT: return parse_nanogpt(len, path, info, at);
    case HG_SHARD_AUTO: break;
    }
    if (len >= 8 && !memcmp(d, SHARD_MAGIC, 8)) return parse_handgrad(d, len, path, info, at);
    if (len >= 4 && le32(d) == LLMC_MAGIC) return parse_llmc(d, len, path, info, at);
    if (ends_with_bin(path)) return parse_nanogpt(len, path, info, at);
    return hg_fail(HG_ERR_FORMAT,
                   "%s: offset 0: bad magic; neither a handgrad (HGTOKENS) nor an llm.c (20240520) shard, and not a "
                   ".bin file to read as nanoGPT's raw uint16",
                   path);
}

hg_status hg_shard_inspect(const char *path, hg_shard_format format, hg_shard_info *out) {
    const uint8_t *d;
    size_t len, at;
    HG_TRY(file_map(path, &d, &len));
    hg_status s = shard_parse(d, len, path, format, out, &at);
    file_unmap(d, len);
    return s;
}

/* ---------------------------------------------------------------- writer */

static void header_bytes(const shard_writer *w, uint8_t h[SHARD_HEADER_BYTES]) {
    memset(h, 0, SHARD_HEADER_BYTES);
    memcpy(h, SHARD_MAGIC, 8);
    put32(h + 8, SHARD_VERSION);
    put32(h + 12, (uint32_t)w->width);
    put32(h + 16, (uint32_t)w->count);
    put32(h + 20, (uint32_t)(w->count >> 32));
    put32(h + 24, (uint32_t)w->vocab_size);
    put32(h + 28, (uint32_t)w->eot);
    put32(h + 32, w->id_bound);
    put32(h + 36, w->with_flags ? SHARD_HAS_FLAGS : 0);
}

hg_status shard_writer_open(shard_writer *w, const char *path, int vocab_size, int32_t eot, int with_flags) {
    memset(w, 0, sizeof *w);
    size_t n = strlen(path);
    w->path = malloc(n + 5);
    if (!w->path) return hg_fail(HG_ERR_NOMEM, "%s: out of memory", path);
    memcpy(w->path, path, n + 1);
    memcpy(w->path + n, ".tmp", 5);
    w->width = vocab_size <= 65536 ? 2 : 4;
    w->vocab_size = vocab_size;
    w->eot = eot;
    w->with_flags = with_flags;
    w->f = fopen(w->path, "wb");
    if (!w->f) {
        hg_status s = hg_fail(HG_ERR_IO, "%s: cannot create: %s", w->path, strerror(errno));
        free(w->path);
        w->path = NULL;
        return s;
    }
    uint8_t h[SHARD_HEADER_BYTES];
    header_bytes(w, h);
    if (fwrite(h, 1, sizeof h, w->f) != sizeof h) {
        shard_writer_abort(w);
        return hg_fail(HG_ERR_IO, "%s: write failed", path);
    }
    return HG_OK;
}

hg_status shard_writer_write(shard_writer *w, const int32_t *ids, const uint8_t *flags, size_t n) {
    if (w->with_flags) {
        if (w->count + n > w->flags_cap) {
            size_t cap = w->flags_cap ? 2 * w->flags_cap : 1 << 16;
            while (cap < w->count + n) cap *= 2;
            uint8_t *f = realloc(w->flags, cap);
            if (!f) return hg_fail(HG_ERR_NOMEM, "%s: out of memory for the token flags", w->path);
            w->flags = f, w->flags_cap = cap;
        }
        memcpy(w->flags + w->count, flags, n);
    }
    uint8_t buf[4096];
    size_t per = sizeof buf / (size_t)w->width;
    for (size_t i = 0; i < n; i += per) {
        size_t k = n - i < per ? n - i : per;
        for (size_t j = 0; j < k; j++) {
            uint32_t v = (uint32_t)ids[i + j];
            w->id_bound = v >= w->id_bound ? v + 1 : w->id_bound;
            buf[j * w->width] = (uint8_t)v;
            buf[j * w->width + 1] = (uint8_t)(v >> 8);
            if (w->width == 4) {
                buf[j * 4 + 2] = (uint8_t)(v >> 16);
                buf[j * 4 + 3] = (uint8_t)(v >> 24);
            }
        }
        if (fwrite(buf, (size_t)w->width, k, w->f) != k) return hg_fail(HG_ERR_IO, "%s: write failed", w->path);
    }
    w->count += n;
    return HG_OK;
}

hg_status shard_writer_close(shard_writer *w) {
    uint8_t h[SHARD_HEADER_BYTES];
    header_bytes(w, h);
    int ok = !w->with_flags || fwrite(w->flags, 1, w->count, w->f) == w->count;
    ok = ok && fseek(w->f, 0, SEEK_SET) == 0 && fwrite(h, 1, sizeof h, w->f) == sizeof h;
    ok = (fclose(w->f) == 0) && ok;
    w->f = NULL;
    free(w->flags);
    w->flags = NULL;
    size_t n = strlen(w->path);
    w->path[n - 4] = 0; /* drop ".tmp" */
    char *tmp = malloc(n + 1);
    hg_status s = HG_OK;
    if (tmp) {
        memcpy(tmp, w->path, n - 4);
        memcpy(tmp + n - 4, ".tmp", 5);
    }
    if (!ok || !tmp || rename(tmp, w->path) != 0) {
        s = hg_fail(HG_ERR_IO, "%s: write failed: %s", w->path, strerror(errno));
        if (tmp) remove(tmp);
    }
    free(tmp);
    free(w->path);
    w->path = NULL;
    return s;
}

void shard_writer_abort(shard_writer *w) {
    free(w->flags);
    w->flags = NULL;
    if (w->f) fclose(w->f);
    if (w->path) remove(w->path);
    free(w->path);
    w->f = NULL;
    w->path = NULL;
}
