/* Atomic file and folder writes: data goes to a temporary name, is flushed to disk
 * (fsync), renamed into place, and the folder holding it is fsync'd, so after a crash
 * or a failed write (a full disk, say) a reader finds either the old file or the whole
 * new one, never a part. */
#ifndef HG_IO_ATOMIC_H
#define HG_IO_ATOMIC_H

#include <stddef.h>

#include "handgrad.h"

/* A file being written under "<path>.tmp"; committing renames it to path. */
typedef struct hg_afile hg_afile;

hg_status hg_afile_open(hg_afile **out, const char *path);
/* Appends n bytes; a failure (ENOSPC, EFBIG) names the file and the bytes written. */
hg_status hg_afile_write(hg_afile *f, const void *data, size_t n);
/* fsync, close, rename over path, fsync the folder; frees f. On failure the
 * temporary file is removed and path is untouched. */
hg_status hg_afile_commit(hg_afile *f);
/* Closes and removes the temporary file; frees f. NULL is allowed. */
void hg_afile_abort(hg_afile *f);

/* fsync a folder, so that a rename or a new entry in it is durable. */
hg_status hg_fsync_dir(const char *dir);
/* Removes a folder and the plain files in it (not recursive beyond one level); a
 * symlink is removed itself, never what it points to. */
void hg_remove_dir(const char *dir);

#endif
