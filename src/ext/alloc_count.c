/* Allocation counting for hg_bench_op and the tests (alloc_count.h): malloc, calloc,
 * realloc, aligned_alloc, posix_memalign, memalign and free are interposed and forwarded
 * to glibc's; dnnl_primitive_execute is interposed too, so that the allocations oneDNN's
 * C API makes inside every call (an argument map) are told apart from everyone else's.
 * Linked into a program as an object library; never into a sanitizer build, where the
 * sanitizer owns malloc. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <dnnl.h>
#include <stdatomic.h>
#include <stddef.h>

#include "ext/alloc_count.h"

extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);
extern void __libc_free(void *);

static atomic_int counting, in_onednn;
static atomic_llong allocs, frees, bytes, d_allocs, d_frees, d_bytes, d_largest;

void hg_alloc_count_enable(int on) {
    if (on) {
        atomic_store(&allocs, 0), atomic_store(&frees, 0), atomic_store(&bytes, 0);
        atomic_store(&d_allocs, 0), atomic_store(&d_frees, 0), atomic_store(&d_bytes, 0);
        atomic_store(&d_largest, 0);
    }
    atomic_store(&counting, on);
}

void hg_alloc_count_read(hg_alloc_counts *out) {
    *out = (hg_alloc_counts){atomic_load(&allocs),  atomic_load(&frees),   atomic_load(&bytes),
                             atomic_load(&d_allocs), atomic_load(&d_frees), atomic_load(&d_bytes),
                             atomic_load(&d_largest)};
}

static void note_alloc(size_t n) {
    if (!atomic_load_explicit(&counting, memory_order_relaxed)) return;
    if (atomic_load(&in_onednn)) {
        atomic_fetch_add(&d_allocs, 1);
        atomic_fetch_add(&d_bytes, (long long)n);
        long long big = atomic_load(&d_largest);
        while ((long long)n > big && !atomic_compare_exchange_weak(&d_largest, &big, (long long)n)) {
        }
    } else {
        atomic_fetch_add(&allocs, 1);
        atomic_fetch_add(&bytes, (long long)n);
    }
}

void *malloc(size_t n) { note_alloc(n); return __libc_malloc(n); }
void *calloc(size_t a, size_t b) { note_alloc(a * b); return __libc_calloc(a, b); }
void *realloc(void *p, size_t n) { note_alloc(n); return __libc_realloc(p, n); }
void *aligned_alloc(size_t a, size_t n) { note_alloc(n); return __libc_memalign(a, n); }
void *memalign(size_t a, size_t n) { note_alloc(n); return __libc_memalign(a, n); }
int posix_memalign(void **p, size_t a, size_t n) {
    note_alloc(n);
    *p = __libc_memalign(a, n);
    return *p ? 0 : 12; /* ENOMEM */
}
void free(void *p) {
    if (p && atomic_load_explicit(&counting, memory_order_relaxed))
        atomic_fetch_add(atomic_load(&in_onednn) ? &d_frees : &frees, 1);
    __libc_free(p);
}

/* oneDNN's entry, marked so that what it allocates is counted apart. The counting is
 * process-wide: other threads' allocations during the call count as oneDNN's. */
dnnl_status_t dnnl_primitive_execute(const_dnnl_primitive_t p, dnnl_stream_t s, int nargs, const dnnl_exec_arg_t *args) {
    static dnnl_status_t (*real)(const_dnnl_primitive_t, dnnl_stream_t, int, const dnnl_exec_arg_t *);
    if (!real) *(void **)&real = dlsym(RTLD_NEXT, "dnnl_primitive_execute");
    atomic_fetch_add(&in_onednn, 1);
    dnnl_status_t st = real(p, s, nargs, args);
    atomic_fetch_sub(&in_onednn, 1);
    return st;
}
