/* Reading and writing safetensors files: an 8-byte little-endian header length, a JSON
 * header mapping names to {dtype, shape, data_offsets}, an optional "__metadata__" map
 * of strings, then the raw little-endian tensor data. The reader checks every offset
 * and size against the file before anything is read; the writer writes atomically. */
#ifndef HG_IO_SAFETENSORS_H
#define HG_IO_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "handgrad.h"

#define HG_ST_MAX_DIMS 8
#define HG_ST_MAX_HEADER ((uint64_t)100 << 20) /* the format's own limit on the JSON */

typedef enum hg_st_dtype { HG_ST_F64, HG_ST_F32, HG_ST_F16, HG_ST_BF16, HG_ST_I64, HG_ST_I32, HG_ST_I16, HG_ST_I8, HG_ST_U8, HG_ST_BOOL } hg_st_dtype;

typedef struct hg_st_tensor {
    const char *name;
    hg_st_dtype dtype;
    int ndim;
    int64_t shape[HG_ST_MAX_DIMS];
    int64_t numel;
    const uint8_t *data; /* numel * element size bytes inside the file */
} hg_st_tensor;

typedef struct hg_st_file hg_st_file;

/* Opens and validates a file (memory-mapped). */
hg_status hg_st_open(hg_st_file **out, const char *path);
/* Validates a file image already in memory; `name` is used in messages. The buffer
 * must outlive the handle. */
hg_status hg_st_parse(hg_st_file **out, const char *name, const uint8_t *buf, size_t len);
void hg_st_close(hg_st_file *f);

int hg_st_count(const hg_st_file *f);
const hg_st_tensor *hg_st_at(const hg_st_file *f, int i);
const hg_st_tensor *hg_st_find(const hg_st_file *f, const char *name);
/* A "__metadata__" value, or NULL. */
const char *hg_st_metadata(const hg_st_file *f, const char *key);

/* "F32", "BF16", ... and bytes per element; a value outside the enum gives "?" and 0. */
const char *hg_st_dtype_name(hg_st_dtype d);
int hg_st_dtype_size(hg_st_dtype d);
/* Converts a F64, F32, F16, BF16 or I32 tensor to double or float; n must equal its numel. */
hg_status hg_st_read_f64(const hg_st_file *f, const hg_st_tensor *t, double *out, int64_t n);
hg_status hg_st_read_f32(const hg_st_file *f, const hg_st_tensor *t, float *out, int64_t n);
/* Elements [first, first + n) of a F64, F32, F16, BF16 or I32 tensor as float, unchecked
 * (the caller has checked the dtype and the range): the fast path of bulk loads. */
void hg_st_convert_f32(const hg_st_tensor *t, int64_t first, int64_t n, float *out);
/* Rows [r0, r0 + nr) and columns [c0, c0 + nc) of a (rows, cols) tensor, as float and
 * transposed: dst[j * ld + i] = t[r0 + i][c0 + j]. Unchecked like hg_st_convert_f32.
 * BF16, F16 and F32 go through 8 x 8 register transposes in AVX2 builds. */
void hg_st_convert_f32_transposed(const hg_st_tensor *t, int64_t cols, int64_t r0, int64_t nr, int64_t c0,
                                  int64_t nc, float *dst, int64_t ld);
/* The same into a destination that will not be read soon (a model's parameters): whole
 * cache lines go around the caches (streaming stores) in AVX2 builds. */
void hg_st_convert_f32_stream(const hg_st_tensor *t, int64_t first, int64_t n, float *out);
/* The index of the first NaN or infinity of a F64, F32, F16 or BF16 tensor (its value in
 * *value), or -1 when every element is finite or the dtype is an integer one; large
 * tensors are scanned on up to `threads` threads. */
int64_t hg_st_find_nonfinite(const hg_st_tensor *t, double *value, int threads);

/* ---- writing ---- */

typedef struct hg_st_entry {
    const char *name;
    hg_st_dtype dtype;
    int ndim;
    int64_t shape[HG_ST_MAX_DIMS];
    const void *data; /* numel * element size bytes, little-endian */
} hg_st_entry;

/* Writes n tensors and n_meta metadata pairs (meta[2i] key, meta[2i+1] value) to path
 * through a temporary file (io/atomic.h): the header lists the metadata, then the
 * tensors in the order given, padded with spaces to a multiple of 8 bytes; the data
 * follows in the same order. Names must be unique and not "__metadata__". */
hg_status hg_st_write(const char *path, const hg_st_entry *t, int n, const char *const *meta, int n_meta);

#endif
