/* File helpers for the data module: whole-file reads, read-only memory maps and
 * line numbers for error messages. Every failure names the path. */
#ifndef HG_DATA_FILEIO_H
#define HG_DATA_FILEIO_H

#include <stddef.h>
#include <stdint.h>

#include "handgrad.h"

/* Reads a whole file into a malloc'd buffer with one extra NUL byte after len. */
hg_status file_read_all(const char *path, uint8_t **data, size_t *len);
/* Maps a whole file read-only. An empty file gives data NULL and len 0. */
hg_status file_map(const char *path, const uint8_t **data, size_t *len);
void file_unmap(const uint8_t *data, size_t len);
/* Writes len bytes to path through path.tmp, fsync and a rename (hg_write_file_atomic),
 * so a reader never sees half a file. */
hg_status file_write_all(const char *path, const void *data, size_t len);
/* 1-based line number of byte offset off in buf. */
size_t text_line_of(const uint8_t *buf, size_t off);

#endif
