/* safetensors reader: validation of the header and bounds, and typed reads. */
#include "io/safetensors.h"

#include <cjson/cJSON.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include "core/transpose8.h"

#include "core/error.h"

struct hg_st_file {
    char *name;
    const uint8_t *buf;
    size_t len;
    int mapped;
    cJSON *header;
    hg_st_tensor *tensors;
    int count;
};

static const struct {
    const char *name;
    hg_st_dtype dtype;
    int size;
} dtypes[] = {{"F64", HG_ST_F64, 8}, {"F32", HG_ST_F32, 4}, {"F16", HG_ST_F16, 2}, {"BF16", HG_ST_BF16, 2},
              {"I64", HG_ST_I64, 8}, {"I32", HG_ST_I32, 4}, {"I16", HG_ST_I16, 2}, {"I8", HG_ST_I8, 1},
              {"U8", HG_ST_U8, 1},   {"BOOL", HG_ST_BOOL, 1}};

const char *hg_st_dtype_name(hg_st_dtype d) {
    for (size_t i = 0; i < sizeof dtypes / sizeof dtypes[0]; i++)
        if (dtypes[i].dtype == d) return dtypes[i].name;
    return "?";
}

int hg_st_dtype_size(hg_st_dtype d) {
    for (size_t i = 0; i < sizeof dtypes / sizeof dtypes[0]; i++)
        if (dtypes[i].dtype == d) return dtypes[i].size;
    return 0;
}

void hg_st_close(hg_st_file *f) {
    if (!f) return;
    if (f->mapped && f->buf) munmap((void *)f->buf, f->len);
    cJSON_Delete(f->header);
    free(f->tensors);
    free(f->name);
    free(f);
}

typedef struct span {
    uint64_t begin, end;
    const char *name; /* the tensor's */
} span;

static int cmp_span_name(const void *a, const void *b) {
    return strcmp(((const span *)a)->name, ((const span *)b)->name);
}

static int cmp_span(const void *a, const void *b) {
    const span *x = a, *y = b;
    return x->begin < y->begin ? -1 : x->begin > y->begin;
}

/* Parses one tensor entry; data_len is the size of the data section. */
static hg_status parse_entry(hg_st_file *f, const cJSON *e, hg_st_tensor *t, uint64_t data_len, const uint8_t *data, span *sp) {
    const char *nm = e->string;
    if (!cJSON_IsObject(e)) return hg_fail(HG_ERR_FORMAT, "%s: header entry '%s' is not an object", f->name, nm);
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(e, "dtype");
    const cJSON *shape = cJSON_GetObjectItemCaseSensitive(e, "shape");
    const cJSON *offs = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
    if (!cJSON_IsString(dt)) return hg_fail(HG_ERR_FORMAT, "%s: tensor '%s' has no string 'dtype'", f->name, nm);
    int found = 0;
    for (size_t i = 0; i < sizeof dtypes / sizeof dtypes[0]; i++)
        if (!strcmp(dt->valuestring, dtypes[i].name)) t->dtype = dtypes[i].dtype, found = 1;
    if (!found) return hg_fail(HG_ERR_FORMAT, "%s: tensor '%s' has unsupported dtype '%s'", f->name, nm, dt->valuestring);
    if (!cJSON_IsArray(shape) || cJSON_GetArraySize(shape) > HG_ST_MAX_DIMS)
        return hg_fail(HG_ERR_FORMAT, "%s: tensor '%s' needs a 'shape' array of at most %d dims", f->name, nm, HG_ST_MAX_DIMS);
    t->name = nm;
    t->ndim = cJSON_GetArraySize(shape);
    t->numel = 1;
    for (int d = 0; d < t->ndim; d++) {
        const cJSON *v = cJSON_GetArrayItem(shape, d);
        if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble > 9.0e15 || v->valuedouble != (double)(int64_t)v->valuedouble)
            return hg_fail(HG_ERR_FORMAT, "%s: tensor '%s' shape[%d] is not a non-negative integer", f->name, nm, d);
        t->shape[d] = (int64_t)v->valuedouble;
        if (t->shape[d] && t->numel > INT64_MAX / 16 / t->shape[d])
            return hg_fail(HG_ERR_FORMAT, "%s: tensor '%s' is too large", f->name, nm);
        t->numel *= t->shape[d];
    }
    if (!cJSON_IsArray(offs) || cJSON_GetArraySize(offs) != 2)
        return hg_fail(HG_ERR_FORMAT, "%s: tensor '%s' needs 'data_offsets' [begin, end]", f->name, nm);
    double b = cJSON_GetArrayItem(offs, 0)->valuedouble, en = cJSON_GetArrayItem(offs, 1)->valuedouble;
    if (!cJSON_IsNumber(cJSON_GetArrayItem(offs, 0)) || !cJSON_IsNumber(cJSON_GetArrayItem(offs, 1)) || b < 0 || en < 0 ||
        b != floor(b) || en != floor(en))
        return hg_fail(HG_ERR_FORMAT, "%s: tensor '%s' data_offsets [%.17g, %.17g] are not two integers >= 0", f->name, nm, b, en);
    if (en < b) return hg_fail(HG_ERR_FORMAT, "%s: tensor '%s' data_offsets [%.0f, %.0f] end before they begin", f->name, nm, b, en);
    if (en > (double)data_len)
        return hg_fail(HG_ERR_FORMAT, "%s: tensor '%s' data_offsets [%.0f, %.0f] lie outside the %llu data bytes",
                       f->name, nm, b, en, (unsigned long long)data_len);
    sp->begin = (uint64_t)b;
    sp->end = (uint64_t)en;
    sp->name = nm;
    if ((uint64_t)t->numel * (uint64_t)hg_st_dtype_size(t->dtype) != sp->end - sp->begin)
        return hg_fail(HG_ERR_FORMAT, "%s: tensor '%s' has %lld elements of %s but %llu data bytes", f->name, nm,
                       (long long)t->numel, dt->valuestring, (unsigned long long)(sp->end - sp->begin));
    t->data = data + sp->begin;
    return HG_OK;
}

static hg_status parse(hg_st_file *f) {
    if (f->len < 8) return hg_fail(HG_ERR_FORMAT, "%s: %zu bytes is too short for a safetensors header", f->name, f->len);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | f->buf[i];
    if (hlen > HG_ST_MAX_HEADER || hlen > f->len - 8)
        return hg_fail(HG_ERR_FORMAT, "%s: header length %llu at offset 0 exceeds the file (%zu bytes)", f->name,
                       (unsigned long long)hlen, f->len);
    f->header = cJSON_ParseWithLength((const char *)f->buf + 8, (size_t)hlen);
    if (!f->header || !cJSON_IsObject(f->header))
        return hg_fail(HG_ERR_FORMAT, "%s: the JSON header (bytes 8..%llu) is not a valid JSON object", f->name,
                       (unsigned long long)(8 + hlen));
    const uint8_t *data = f->buf + 8 + hlen;
    uint64_t data_len = f->len - 8 - hlen;
    int n = cJSON_GetArraySize(f->header);
    f->tensors = calloc((size_t)n + 1, sizeof *f->tensors);
    span *spans = calloc((size_t)n + 1, sizeof *spans);
    if (!f->tensors || !spans) {
        free(spans);
        return hg_fail(HG_ERR_NOMEM, "%s: out of memory for %d tensor entries", f->name, n);
    }
    hg_status st = HG_OK;
    for (const cJSON *e = f->header->child; e && st == HG_OK; e = e->next) {
        if (!strcmp(e->string, "__metadata__")) {
            if (!cJSON_IsObject(e)) {
                st = hg_fail(HG_ERR_FORMAT, "%s: __metadata__ is not an object", f->name);
                break;
            }
            for (const cJSON *kv = e->child; kv && st == HG_OK; kv = kv->next)
                if (!cJSON_IsString(kv)) st = hg_fail(HG_ERR_FORMAT, "%s: __metadata__ value '%s' is not a string", f->name, kv->string);
            continue;
        }
        st = parse_entry(f, e, &f->tensors[f->count], data_len, data, &spans[f->count]);
        if (st == HG_OK) f->count++;
    }
    if (st == HG_OK) { /* a name twice (JSON allows it; the second would be unreachable) */
        qsort(spans, (size_t)f->count, sizeof *spans, cmp_span_name);
        for (int i = 1; i < f->count && st == HG_OK; i++)
            if (!strcmp(spans[i].name, spans[i - 1].name))
                st = hg_fail(HG_ERR_FORMAT, "%s: tensor '%s' appears twice in the header", f->name, spans[i].name);
    }
    if (st == HG_OK) {
        /* empty tensors take no bytes and overlap nothing */
        int ns = 0;
        for (int i = 0; i < f->count; i++)
            if (spans[i].end > spans[i].begin) spans[ns++] = spans[i];
        qsort(spans, (size_t)ns, sizeof *spans, cmp_span);
        for (int i = 1; i < ns; i++)
            if (spans[i].begin < spans[i - 1].end) {
                st = hg_fail(HG_ERR_FORMAT, "%s: the data of tensors '%s' and '%s' overlap at data offset %llu", f->name,
                             spans[i - 1].name, spans[i].name, (unsigned long long)spans[i].begin);
                break;
            }
        /* the data is the tensors' bytes, back to back, and nothing else (as the format's
         * own reader requires): a gap or a tail is a damaged or appended file */
        for (int i = 0; i <= ns && st == HG_OK; i++) {
            uint64_t from = i ? spans[i - 1].end : 0, to = i < ns ? spans[i].begin : data_len;
            if (to > from)
                st = hg_fail(HG_ERR_FORMAT, "%s: %llu bytes at data offset %llu belong to no tensor (file offset %llu)",
                             f->name, (unsigned long long)(to - from), (unsigned long long)from,
                             (unsigned long long)(8 + hlen + from));
        }
    }
    free(spans);
    return st;
}

static hg_status make(hg_st_file **out, const char *name, const uint8_t *buf, size_t len, int mapped) {
    hg_st_file *f = calloc(1, sizeof *f);
    char *nm = strdup(name);
    if (!f || !nm) {
        free(f);
        free(nm);
        if (mapped) munmap((void *)buf, len);
        return hg_fail(HG_ERR_NOMEM, "%s: out of memory", name);
    }
    f->name = nm;
    f->buf = buf;
    f->len = len;
    f->mapped = mapped;
    hg_status st = parse(f);
    if (st != HG_OK) {
        hg_st_close(f);
        return st;
    }
    *out = f;
    return HG_OK;
}

hg_status hg_st_parse(hg_st_file **out, const char *name, const uint8_t *buf, size_t len) {
    if (!out || !name || (!buf && len)) return hg_fail(HG_ERR_INVALID, "hg_st_parse: NULL argument");
    *out = NULL;
    return make(out, name, buf, len, 0);
}

hg_status hg_st_open(hg_st_file **out, const char *path) {
    if (!out || !path) return hg_fail(HG_ERR_INVALID, "hg_st_open: NULL argument");
    *out = NULL;
    int fd = open(path, O_RDONLY);
    if (fd < 0) return hg_fail(HG_ERR_IO, "%s: cannot open for reading", path);
    struct stat sb;
    if (fstat(fd, &sb) || !S_ISREG(sb.st_mode)) {
        close(fd);
        return hg_fail(HG_ERR_IO, "%s: not a regular file", path);
    }
    size_t len = (size_t)sb.st_size;
    void *p = len ? mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0) : NULL;
    close(fd);
    if (len && p == MAP_FAILED) return hg_fail(HG_ERR_IO, "%s: cannot map %zu bytes", path, len);
    return make(out, path, p, len, len > 0);
}

int hg_st_count(const hg_st_file *f) { return f->count; }
const hg_st_tensor *hg_st_at(const hg_st_file *f, int i) { return i >= 0 && i < f->count ? &f->tensors[i] : NULL; }

const hg_st_tensor *hg_st_find(const hg_st_file *f, const char *name) {
    for (int i = 0; i < f->count; i++)
        if (!strcmp(f->tensors[i].name, name)) return &f->tensors[i];
    return NULL;
}

const char *hg_st_metadata(const hg_st_file *f, const char *key) {
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(f->header, "__metadata__");
    const cJSON *v = m ? cJSON_GetObjectItemCaseSensitive(m, key) : NULL;
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* IEEE half to float, subnormals and specials included. */
static float half_to_float(uint16_t h) {
    uint32_t sign = (uint32_t)(h >> 15) << 31, exp = (h >> 10) & 31, man = h & 1023;
    if (exp == 31) {
        uint32_t u = sign | 0x7F800000u | man << 13;
        float v;
        memcpy(&v, &u, 4);
        return v;
    }
    float mag = exp ? ldexpf((float)(man | 1024), (int)exp - 25) : ldexpf((float)man, -24);
    return sign ? -mag : mag;
}

/* Element i of a tensor as double; the data is little-endian and may be unaligned. */
static double element(const hg_st_tensor *t, int64_t i) {
    switch (t->dtype) {
    case HG_ST_F64: { double v; memcpy(&v, t->data + 8 * i, 8); return v; }
    case HG_ST_F32: { float v; memcpy(&v, t->data + 4 * i, 4); return v; }
    case HG_ST_F16: { uint16_t h; memcpy(&h, t->data + 2 * i, 2); return half_to_float(h); }
    case HG_ST_BF16: {
        uint16_t h;
        memcpy(&h, t->data + 2 * i, 2);
        uint32_t u = (uint32_t)h << 16;
        float v;
        memcpy(&v, &u, 4);
        return v;
    }
    default: { int32_t v; memcpy(&v, t->data + 4 * i, 4); return v; }
    }
}

static hg_status check_read(const hg_st_file *f, const hg_st_tensor *t, int64_t n) {
    if (!t) return hg_fail(HG_ERR_INVALID, "%s: tensor is NULL", f->name);
    if (t->dtype != HG_ST_F64 && t->dtype != HG_ST_F32 && t->dtype != HG_ST_F16 && t->dtype != HG_ST_BF16 &&
        t->dtype != HG_ST_I32)
        return hg_fail(HG_ERR_FORMAT, "%s: tensor '%s' has dtype %s, not F64, F32, F16, BF16 or I32", f->name,
                       t->name, hg_st_dtype_name(t->dtype));
    if (n != t->numel)
        return hg_fail(HG_ERR_FORMAT, "%s: tensor '%s' has %lld elements, expected %lld", f->name, t->name,
                       (long long)t->numel, (long long)n);
    return HG_OK;
}

hg_status hg_st_read_f64(const hg_st_file *f, const hg_st_tensor *t, double *out, int64_t n) {
    HG_TRY(check_read(f, t, n));
    for (int64_t i = 0; i < n; i++) out[i] = element(t, i);
    return HG_OK;
}

/* bfloat16 is the top half of a float: the bits moved up 16 (a loop the compiler
 * vectorizes; the data is 2-byte aligned in any file whose header keeps the format's
 * 8-byte padding, else the bytes are copied one element at a time). */
static void bf16_to_f32(const uint8_t *restrict p, int64_t n, float *restrict out) {
    if ((uintptr_t)p % 2) {
        for (int64_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, p + 2 * i, 2);
            uint32_t u = (uint32_t)h << 16;
            memcpy(out + i, &u, 4);
        }
        return;
    }
    const uint16_t *restrict h = (const uint16_t *)(const void *)p;
    uint32_t *restrict o = (uint32_t *)(void *)out;
    for (int64_t i = 0; i < n; i++) o[i] = (uint32_t)h[i] << 16;
}

void hg_st_convert_f32(const hg_st_tensor *t, int64_t first, int64_t n, float *out) {
    const uint8_t *p = t->data + (size_t)first * (size_t)hg_st_dtype_size(t->dtype);
    switch (t->dtype) {
    case HG_ST_F32: memcpy(out, p, 4 * (size_t)n); break;
    case HG_ST_BF16: bf16_to_f32(p, n, out); break;
    case HG_ST_F16:
        for (int64_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, p + 2 * i, 2);
            out[i] = half_to_float(h);
        }
        break;
    default:
        for (int64_t i = 0; i < n; i++) out[i] = (float)element(t, first + i);
    }
}

#if defined(__AVX2__)
/* Eight elements of a BF16, F16 (with F16C) or F32 tensor from element i, as floats. */
static inline __m256 load8_f32(const hg_st_tensor *t, int64_t i) {
    const uint8_t *p = t->data + (size_t)i * (size_t)hg_st_dtype_size(t->dtype);
    if (t->dtype == HG_ST_F32) return _mm256_loadu_ps((const float *)(const void *)p);
    __m128i h = _mm_loadu_si128((const __m128i *)(const void *)p);
#if defined(__F16C__)
    if (t->dtype == HG_ST_F16) return _mm256_cvtph_ps(h);
#endif
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

/* Whether load8_f32 reads dtype d. */
static int has_load8(hg_st_dtype d) {
#if defined(__F16C__)
    if (d == HG_ST_F16) return 1;
#endif
    return d == HG_ST_BF16 || d == HG_ST_F32;
}
#endif

void hg_st_convert_f32_stream(const hg_st_tensor *t, int64_t first, int64_t n, float *out) {
    int64_t i = 0;
#if defined(__AVX2__)
    if (has_load8(t->dtype)) {
        i = (int64_t)((64 - (uintptr_t)out % 64) % 64 / 4); /* to a cache line, when out is float-aligned */
        if ((uintptr_t)out % 4 || i > n) i = n;
        hg_st_convert_f32(t, first, i, out);
        for (; i + 16 <= n; i += 16) {
            _mm256_stream_ps(out + i, load8_f32(t, first + i));
            _mm256_stream_ps(out + i + 8, load8_f32(t, first + i + 8));
        }
        _mm_sfence();
    }
#endif
    hg_st_convert_f32(t, first + i, n - i, out + i);
}

void hg_st_convert_f32_transposed(const hg_st_tensor *t, int64_t cols, int64_t r0, int64_t nr, int64_t c0,
                                  int64_t nc, float *dst, int64_t ld) {
    int64_t nr8 = 0, nc8 = 0;
#if defined(__AVX2__)
    if (has_load8(t->dtype)) nr8 = nr & ~(int64_t)7, nc8 = nc & ~(int64_t)7;
    for (int64_t j = 0; j < nc8; j += 8)
        for (int64_t i = 0; i < nr8; i += 16) {
            /* two blocks down the rows where there are, so that each row of dst gets 16
             * floats in a row: a whole cache line, written around the caches when aligned */
            const int two = i + 16 <= nr8;
            __m256 v[16];
            for (int k = 0; k < (two ? 16 : 8); k++) v[k] = load8_f32(t, (r0 + i + k) * cols + c0 + j);
            hg_transpose8(v);
            if (two) hg_transpose8(v + 8);
            for (int k = 0; k < 8; k++) {
                float *d = dst + (j + k) * ld + i;
                if (two && (uintptr_t)d % 64 == 0) {
                    _mm256_stream_ps(d, v[k]);
                    _mm256_stream_ps(d + 8, v[k + 8]);
                } else {
                    _mm256_storeu_ps(d, v[k]);
                    if (two) _mm256_storeu_ps(d + 8, v[k + 8]);
                }
            }
        }
    _mm_sfence();
#endif
    /* what the 8 x 8 blocks left: the last nr % 8 rows, and the last nc % 8 columns of the others */
    float row[64];
    for (int64_t i = 0; i < nr; i++)
        for (int64_t j = i < nr8 ? nc8 : 0; j < nc; j += 64) {
            int64_t n = nc - j < 64 ? nc - j : 64;
            hg_st_convert_f32(t, (r0 + i) * cols + c0 + j, n, row);
            for (int64_t k = 0; k < n; k++) dst[(j + k) * ld + i] = row[k];
        }
}

/* Whether elements [b, b + n) hold an infinity or a NaN: their exponent bits all set
 * (mask), tested by ORing over the block, a loop the compiler vectorizes. */
static int block_nonfinite(const hg_st_tensor *t, int size, uint64_t mask, int64_t b, int64_t n) {
    const uint8_t *p = t->data + (size_t)b * (size_t)size;
    int bad = 0;
    if (size == 4) {
        for (int64_t i = 0; i < n; i++) {
            uint32_t u;
            memcpy(&u, p + 4 * i, 4);
            bad |= (u & (uint32_t)mask) == (uint32_t)mask;
        }
    } else if (size == 2) {
        for (int64_t i = 0; i < n; i++) {
            uint16_t u;
            memcpy(&u, p + 2 * i, 2);
            bad |= (u & (uint16_t)mask) == (uint16_t)mask;
        }
    } else {
        for (int64_t i = 0; i < n; i++) {
            uint64_t u;
            memcpy(&u, p + 8 * i, 8);
            bad |= (u & mask) == mask;
        }
    }
    return bad;
}

/* The blocks are scanned in parallel; the first bad one is then searched element by element. */
int64_t hg_st_find_nonfinite(const hg_st_tensor *t, double *value, int threads) {
    int size = hg_st_dtype_size(t->dtype);
    uint64_t mask = t->dtype == HG_ST_F64 ? 0x7FF0000000000000ull : t->dtype == HG_ST_F32 ? 0x7F800000u
                  : t->dtype == HG_ST_BF16 ? 0x7F80u : t->dtype == HG_ST_F16 ? 0x7C00u : 0;
    if (!mask) return -1;
    enum { BLOCK = 4096 };
    const int64_t blocks = (t->numel + BLOCK - 1) / BLOCK;
    int64_t first = blocks;
    #pragma omp parallel for schedule(static) reduction(min : first) num_threads(threads > 0 ? threads : 1) \
        if (blocks > 16)
    for (int64_t k = 0; k < blocks; k++)
        if (k < first && block_nonfinite(t, size, mask, k * BLOCK, t->numel - k * BLOCK < BLOCK ? t->numel - k * BLOCK : BLOCK))
            first = k;
    for (int64_t i = first * BLOCK; i < t->numel; i++) {
        double v = element(t, i);
        if (!isfinite(v)) {
            if (value) *value = v;
            return i;
        }
    }
    return -1;
}

hg_status hg_st_read_f32(const hg_st_file *f, const hg_st_tensor *t, float *out, int64_t n) {
    HG_TRY(check_read(f, t, n));
    for (int64_t i = 0; i < n; i++) out[i] = (float)element(t, i);
    return HG_OK;
}
