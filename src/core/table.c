/* Tables of tensor specs and their layout in one allocation. */
#include "core/table.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void hg_table_init(hg_table *t) { memset(t, 0, sizeof *t); }

void hg_table_free(hg_table *t) {
    free(t->specs);
    memset(t, 0, sizeof *t);
}

int hg_table_add(hg_table *t, const char *name, int ndim, const int64_t *shape,
                 int64_t alloc, int64_t copies, size_t elem_size, unsigned flags) {
    if (t->count == t->cap) {
        int cap = t->cap ? 2 * t->cap : 64;
        hg_tensor_spec *s = realloc(t->specs, (size_t)cap * sizeof *s);
        if (!s) return -1;
        t->specs = s;
        t->cap = cap;
    }
    hg_tensor_spec *s = &t->specs[t->count];
    memset(s, 0, sizeof *s);
    snprintf(s->name, sizeof s->name, "%s", name);
    s->ndim = ndim;
    s->numel = 1;
    for (int d = 0; d < ndim; d++) {
        s->shape[d] = shape[d];
        s->numel *= shape[d];
    }
    s->alloc = alloc > s->numel ? alloc : s->numel;
    s->copies = copies > 0 ? copies : 1;
    s->elem_size = elem_size;
    s->flags = flags;
    s->layer = s->role = -1;
    return t->count++;
}

size_t hg_table_layout_last(hg_table *t, unsigned last) {
    size_t off = 0, first = 0;
    for (int pass = 0; pass < 2; pass++) {
        if (pass) first = off;
        for (int i = 0; i < t->count; i++) {
            hg_tensor_spec *s = &t->specs[i];
            if (!(s->flags & last) != !pass) continue;
            s->offset = 0;
            if (s->flags & HG_SPEC_ALIAS) continue;
            s->offset = off;
            size_t bytes = (size_t)s->alloc * (size_t)s->copies * s->elem_size;
            off += (bytes + HG_ALIGN - 1) / HG_ALIGN * HG_ALIGN;
        }
    }
    t->bytes = off;
    return first;
}

void hg_table_layout(hg_table *t) { hg_table_layout_last(t, 0); }

int hg_table_find(const hg_table *t, const char *name) {
    for (int i = 0; i < t->count; i++)
        if (!strcmp(t->specs[i].name, name)) return i;
    return -1;
}

void *hg_aligned_alloc(size_t bytes) {
    void *p = NULL;
    if (bytes == 0) bytes = HG_ALIGN;
    if (posix_memalign(&p, HG_ALIGN, (bytes + HG_ALIGN - 1) / HG_ALIGN * HG_ALIGN)) return NULL;
    return p;
}

void hg_aligned_free(void *p) { free(p); }
