/* GEMM through oneDNN's matmul primitive.
 *
 * Why the primitive and not dnnl_sgemm: sgemm mallocs its packing buffers on every call
 * (0.15-39 MB per call at GPT-2 shapes, measured), while a primitive created once per
 * shape runs on a scratchpad we own. Primitives are cached by descriptor.
 *
 * Why N is split: on the development machine (Zen 4, oneDNN 2.6) the brgemm matmul
 * runs wide outputs (N >= 2048) at 130-160 GFLOP/s but blocks of <= 1536 columns at
 * 190-215, and a very deep product (the classifier's dx, K = 50304, N = 768) at 135-185
 * whole but 210-220 in blocks of 384 (bench/kernel_lab_gemm.c). Each block is an
 * independent product over the full K.
 *
 * Why B is packed for deep products: a product run as one block, with B not transposed,
 * K >= 2048 and M >= 1024 (the MLP's output product, K = d_ff), asks oneDNN for the layout
 * of B its kernel reads best; where that is a blocked layout (the AVX-512 brgemm's), B is
 * reordered into it on every call before the product (read in place, a panel of B spans
 * K rows N floats apart, which is the likely cost). With operands cold, as in a step
 * (kernel_lab_gemm with KERNEL_LAB_COLD=1, Ice Lake server VM, oneDNN 2.6.3, 2026-11-24),
 * the product at K = 3072, N = 768, M = 1024 ran 10-20% faster packed at 1 thread (142-145
 * against 118-130 GFLOP/s) and level to 45% faster at 2, the reorder included. Shallower
 * or narrower products (K = 768 or 1024, or M = 256) came out level or slower packed,
 * within the VM's noise. Where oneDNN reads B plain (its AVX2 kernels), nothing is
 * packed. The packed B lives in one buffer owned by the cache, like the scratchpad.
 *
 * bf16 products (bf16_in) hand oneDNN bf16 A and B with fp32 accumulation, and C in bf16
 * or fp32; the bias goes in as fp32 (converted into a cache buffer, N values). Where
 * oneDNN has no bf16 matmul for this CPU (before AVX-512: oneDNN 2.6 reports
 * "unimplemented" on AVX2), or HANDGRAD_BF16=portable asks, the entry is portable: A, B
 * (and C when it accumulates) are converted to fp32 in cache buffers, the fp32 primitive
 * runs, and a bf16 C is rounded back. The portable path gives the same products up to
 * fp32 summation order, which is what lets CI check the bf16 numerics on any CPU.
 */
#include <dnnl.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/bf16.h"
#include "backend/cpu/cpu.h"
#include "core/error.h"
#include "core/table.h"
#include "core/timer.h"

#define GEMM_MAX_BLOCK_N 1536
#define GEMM_DEEP_K 16384      /* K at which blocks narrow to GEMM_DEEP_BLOCK_N */
#define GEMM_DEEP_BLOCK_N 384
#define GEMM_PACK_MIN_K 2048 /* B packed from this depth... */
#define GEMM_PACK_MIN_M 1024 /* ...when this many rows of A share it */
#define GEMM_MAX_PACKED_BYTES ((size_t)64 << 20) /* a larger B is read in place */

typedef struct gemm_prim {
    dnnl_primitive_t prim;
    dnnl_memory_t src, wei, dst, bias, scratch;
    dnnl_primitive_t pack; /* B's reorder into the layout prim reads (wei), or NULL */
    dnnl_memory_t b_plain, pack_scratch;
    int n; /* columns of this primitive's block */
} gemm_prim;

typedef struct gemm_entry {
    cpu_gemm_desc desc;
    int block_n, nfull, rem; /* nfull blocks of block_n columns, then one of rem */
    int portable;            /* bf16 operands staged in fp32 around fp32 primitives */
    gemm_prim full, tail;
} gemm_entry;

struct cpu_gemm_cache {
    dnnl_engine_t engine;
    dnnl_stream_t stream;
    gemm_entry *entries;
    int count, cap;
    void *scratch, *packed; /* the scratchpad (matmuls' and reorders'), the packed B */
    size_t scratch_bytes, packed_bytes;
    /* fp32 copies: of a bf16 bias, and of the portable path's A, B and C */
    void *stage[4];
    size_t stage_bytes[4];
};

enum { STAGE_BIAS, STAGE_A, STAGE_B, STAGE_C };

#define DNNL_TRY(call, what)                                                                  \
    do {                                                                                      \
        dnnl_status_t s_ = (call);                                                            \
        if (s_ != dnnl_success)                                                               \
            return hg_fail(HG_ERR_BACKEND, "oneDNN %s failed (status %d)", what, (int)s_);     \
    } while (0)

hg_status cpu_gemm_cache_create(cpu_gemm_cache **out) {
    cpu_gemm_cache *c = calloc(1, sizeof *c);
    if (!c) return hg_fail(HG_ERR_NOMEM, "out of memory for the GEMM cache");
    if (dnnl_engine_create(&c->engine, dnnl_cpu, 0) != dnnl_success ||
        dnnl_stream_create(&c->stream, c->engine, dnnl_stream_default_flags) != dnnl_success) {
        cpu_gemm_cache_free(c);
        return hg_fail(HG_ERR_BACKEND, "oneDNN could not create a CPU engine and stream");
    }
    *out = c;
    return HG_OK;
}

size_t cpu_gemm_scratch_bytes(const cpu_gemm_cache *c) {
    size_t n = c->scratch_bytes + c->packed_bytes;
    for (int i = 0; i < 4; i++) n += c->stage_bytes[i];
    return n;
}

static void prim_free(gemm_prim *p) {
    if (p->prim) dnnl_primitive_destroy(p->prim);
    if (p->pack) dnnl_primitive_destroy(p->pack);
    dnnl_memory_t mems[] = {p->src, p->wei, p->dst, p->bias, p->scratch, p->b_plain, p->pack_scratch};
    for (size_t i = 0; i < sizeof mems / sizeof mems[0]; i++)
        if (mems[i]) dnnl_memory_destroy(mems[i]);
    memset(p, 0, sizeof *p);
}

void cpu_gemm_cache_free(cpu_gemm_cache *c) {
    if (!c) return;
    for (int i = 0; i < c->count; i++) {
        prim_free(&c->entries[i].full);
        prim_free(&c->entries[i].tail);
    }
    free(c->entries);
    hg_aligned_free(c->scratch);
    hg_aligned_free(c->packed);
    for (int i = 0; i < 4; i++) hg_aligned_free(c->stage[i]);
    if (c->stream) dnnl_stream_destroy(c->stream);
    if (c->engine) dnnl_engine_destroy(c->engine);
    free(c);
}

/* A memory descriptor for a rows x cols view with the given strides. */
static dnnl_status_t md_strided(dnnl_memory_desc_t *md, int64_t rows, int64_t cols, int64_t s0, int64_t s1,
                                int bf16) {
    dnnl_dims_t dims = {rows, cols}, strides = {s0, s1};
    return dnnl_memory_desc_init_by_strides(md, 2, dims, bf16 ? dnnl_bf16 : dnnl_f32, strides);
}

/* Grows buffer *buf of *bytes to at least need bytes (its contents are not kept). */
static hg_status grow(void **buf, size_t *bytes, size_t need, const char *what) {
    if (need <= *bytes) return HG_OK;
    void *p = hg_aligned_alloc(need);
    if (!p) return hg_fail(HG_ERR_NOMEM, "out of memory for %zu bytes of GEMM %s", need, what);
    hg_aligned_free(*buf);
    *buf = p;
    *bytes = need;
    return HG_OK;
}

/* A primitive descriptor for the product, on a user scratchpad, with a sum post-op when
 * it accumulates; B as b_md, or in the layout oneDNN prefers when any_b. */
static dnnl_status_t pd_create(cpu_gemm_cache *c, dnnl_primitive_desc_t *pd, const cpu_gemm_desc *d, int n,
                               const dnnl_memory_desc_t *a_md, const dnnl_memory_desc_t *b_md,
                               const dnnl_memory_desc_t *bias_md, const dnnl_memory_desc_t *c_md, int any_b) {
    dnnl_memory_desc_t b_any;
    dnnl_dims_t b_dims = {d->K, n};
    dnnl_status_t st = dnnl_memory_desc_init_by_tag(&b_any, 2, b_dims, d->bf16_in ? dnnl_bf16 : dnnl_f32, dnnl_format_tag_any);
    dnnl_matmul_desc_t desc;
    if (st == dnnl_success)
        st = dnnl_matmul_desc_init(&desc, a_md, any_b ? &b_any : b_md, d->bias ? bias_md : NULL, c_md);
    dnnl_primitive_attr_t attr = NULL;
    dnnl_post_ops_t post = NULL;
    if (st == dnnl_success) st = dnnl_primitive_attr_create(&attr);
    if (st == dnnl_success) st = dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user);
    if (st == dnnl_success && d->accumulate) {
        st = dnnl_post_ops_create(&post);
        if (st == dnnl_success) st = dnnl_post_ops_append_sum(post, 1.0f);
        if (st == dnnl_success) st = dnnl_primitive_attr_set_post_ops(attr, post);
    }
    if (st == dnnl_success) st = dnnl_primitive_desc_create(pd, &desc, attr, c->engine, NULL);
    if (post) dnnl_post_ops_destroy(post);
    if (attr) dnnl_primitive_attr_destroy(attr);
    return st;
}

/* The reorder of B from b_md into the primitive's layout w_md, its memories and its
 * scratchpad (which shares the cache's with the matmuls: they run one after the other). */
static hg_status pack_create(cpu_gemm_cache *c, gemm_prim *p, const dnnl_memory_desc_t *b_md,
                             const dnnl_memory_desc_t *w_md) {
    dnnl_primitive_attr_t attr;
    DNNL_TRY(dnnl_primitive_attr_create(&attr), "attribute");
    dnnl_primitive_desc_t rpd = NULL;
    dnnl_status_t st = dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user);
    if (st == dnnl_success) st = dnnl_reorder_primitive_desc_create(&rpd, b_md, c->engine, w_md, c->engine, attr);
    dnnl_primitive_attr_destroy(attr);
    if (st != dnnl_success)
        return hg_fail(HG_ERR_BACKEND, "oneDNN has no reorder of B into its matmul's layout (status %d)", (int)st);
    const dnnl_memory_desc_t *sp_md = dnnl_primitive_desc_query_md(rpd, dnnl_query_scratchpad_md, 0);
    hg_status hs = grow(&c->scratch, &c->scratch_bytes, dnnl_memory_desc_get_size(sp_md), "scratch");
    if (hs == HG_OK) hs = grow(&c->packed, &c->packed_bytes, dnnl_memory_desc_get_size(w_md), "packed B");
    if (hs == HG_OK) {
        st = dnnl_primitive_create(&p->pack, rpd);
        if (st == dnnl_success) st = dnnl_memory_create(&p->b_plain, b_md, c->engine, DNNL_MEMORY_NONE);
        if (st == dnnl_success) st = dnnl_memory_create(&p->pack_scratch, sp_md, c->engine, DNNL_MEMORY_NONE);
        if (st != dnnl_success) hs = hg_fail(HG_ERR_BACKEND, "oneDNN could not create B's reorder (status %d)", (int)st);
    }
    dnnl_primitive_desc_destroy(rpd);
    return hs;
}

/* pack: ask for B in oneDNN's preferred layout, and reorder it into that on every call
 * where that is a blocked layout that fits GEMM_MAX_PACKED_BYTES (else B is read as it is). */
static hg_status prim_create(cpu_gemm_cache *c, gemm_prim *p, const cpu_gemm_desc *d, int n, int pack) {
    dnnl_memory_desc_t a_md, b_md, c_md, bias_md;
    const int in = d->bf16_in, out = d->bf16_out;
    DNNL_TRY(d->trans_a ? md_strided(&a_md, d->M, d->K, 1, d->lda, in) : md_strided(&a_md, d->M, d->K, d->lda, 1, in),
             "A descriptor");
    DNNL_TRY(d->trans_b ? md_strided(&b_md, d->K, n, 1, d->ldb, in) : md_strided(&b_md, d->K, n, d->ldb, 1, in),
             "B descriptor");
    DNNL_TRY(md_strided(&c_md, d->M, n, d->ldc, 1, out), "C descriptor");
    DNNL_TRY(md_strided(&bias_md, 1, n, n, 1, 0), "bias descriptor");

    dnnl_primitive_desc_t pd = NULL;
    dnnl_status_t st = pd_create(c, &pd, d, n, &a_md, &b_md, &bias_md, &c_md, pack);
    const dnnl_memory_desc_t *w_md = st == dnnl_success ? dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0) : NULL;
    if (w_md && pack && (w_md->format_kind != dnnl_blocked || !w_md->format_desc.blocking.inner_nblks ||
                         dnnl_memory_desc_get_size(w_md) > GEMM_MAX_PACKED_BYTES)) {
        dnnl_primitive_desc_destroy(pd); /* plain: B is read in place after all */
        pd = NULL, pack = 0;
        st = pd_create(c, &pd, d, n, &a_md, &b_md, &bias_md, &c_md, 0);
        w_md = st == dnnl_success ? dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0) : NULL;
    }
    if (st != dnnl_success)
        return hg_fail(HG_ERR_BACKEND, "oneDNN has no matmul for M=%d N=%d K=%d (status %d)", d->M, n, d->K, (int)st);

    const dnnl_memory_desc_t *sp_md = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    hg_status hs = grow(&c->scratch, &c->scratch_bytes, dnnl_memory_desc_get_size(sp_md), "scratch");
    if (hs == HG_OK && pack) hs = pack_create(c, p, &b_md, w_md);
    if (hs != HG_OK) {
        dnnl_primitive_desc_destroy(pd);
        prim_free(p);
        return hs;
    }
    st = dnnl_primitive_create(&p->prim, pd);
    if (st == dnnl_success) st = dnnl_memory_create(&p->src, &a_md, c->engine, DNNL_MEMORY_NONE);
    if (st == dnnl_success) st = dnnl_memory_create(&p->wei, w_md, c->engine, DNNL_MEMORY_NONE);
    if (st == dnnl_success) st = dnnl_memory_create(&p->dst, &c_md, c->engine, DNNL_MEMORY_NONE);
    if (st == dnnl_success && d->bias) st = dnnl_memory_create(&p->bias, &bias_md, c->engine, DNNL_MEMORY_NONE);
    if (st == dnnl_success) st = dnnl_memory_create(&p->scratch, sp_md, c->engine, DNNL_MEMORY_NONE);
    dnnl_primitive_desc_destroy(pd);
    if (st != dnnl_success) {
        prim_free(p);
        return hg_fail(HG_ERR_BACKEND, "oneDNN could not create a matmul primitive (status %d)", (int)st);
    }
    p->n = n;
    return HG_OK;
}

static gemm_entry *entry_lookup(const cpu_gemm_cache *c, const cpu_gemm_desc *d) {
    for (int i = 0; i < c->count; i++)
        if (!memcmp(&c->entries[i].desc, d, sizeof *d)) return &c->entries[i];
    return NULL;
}

/* Elements a strided view spans in memory: rows of cols, ld apart. */
static size_t span(int rows, int cols, int ld) { return rows ? (size_t)(rows - 1) * (size_t)ld + (size_t)cols : 0; }
static size_t span_a(const cpu_gemm_desc *d) { return d->trans_a ? span(d->K, d->M, d->lda) : span(d->M, d->K, d->lda); }
static size_t span_b(const cpu_gemm_desc *d) { return d->trans_b ? span(d->N, d->K, d->ldb) : span(d->K, d->N, d->ldb); }

/* Sizes the fp32 copies entry e needs (at its creation, never inside a step). */
static hg_status stage_create(cpu_gemm_cache *c, const gemm_entry *e) {
    const cpu_gemm_desc *d = &e->desc;
    if (d->bias && d->bf16_in) HG_TRY(grow(&c->stage[STAGE_BIAS], &c->stage_bytes[STAGE_BIAS], sizeof(float) * d->N, "bias"));
    if (!e->portable) return HG_OK;
    HG_TRY(grow(&c->stage[STAGE_A], &c->stage_bytes[STAGE_A], sizeof(float) * span_a(d), "fp32 A"));
    HG_TRY(grow(&c->stage[STAGE_B], &c->stage_bytes[STAGE_B], sizeof(float) * span_b(d), "fp32 B"));
    if (d->bf16_out) HG_TRY(grow(&c->stage[STAGE_C], &c->stage_bytes[STAGE_C], sizeof(float) * span(d->M, d->N, d->ldc), "fp32 C"));
    return HG_OK;
}

int cpu_bf16_portable_forced(void) {
    const char *e = getenv("HANDGRAD_BF16");
    return e && !strcmp(e, "portable");
}

/* e's primitives, in fp32 when it is portable. */
static hg_status entry_prims(cpu_gemm_cache *c, gemm_entry *e, int pack) {
    cpu_gemm_desc run = e->desc;
    if (e->portable) run.bf16_in = run.bf16_out = 0;
    hg_status s = prim_create(c, &e->full, &run, e->block_n, pack);
    if (s == HG_OK && e->rem) s = prim_create(c, &e->tail, &run, e->rem, 0);
    if (s != HG_OK) prim_free(&e->full), prim_free(&e->tail);
    return s;
}

static hg_status entry_find(cpu_gemm_cache *c, const cpu_gemm_desc *d, gemm_entry **out) {
    if ((*out = entry_lookup(c, d))) return HG_OK;
    if (c->count == c->cap) {
        int cap = c->cap ? 2 * c->cap : 32;
        gemm_entry *e = realloc(c->entries, (size_t)cap * sizeof *e);
        if (!e) return hg_fail(HG_ERR_NOMEM, "out of memory for the GEMM cache");
        c->entries = e;
        c->cap = cap;
    }
    gemm_entry *e = &c->entries[c->count];
    memset(e, 0, sizeof *e);
    e->desc = *d;
    int max_block = d->K >= GEMM_DEEP_K ? GEMM_DEEP_BLOCK_N : GEMM_MAX_BLOCK_N;
    int nsplit = (d->N + max_block - 1) / max_block;
    e->block_n = (d->N + nsplit - 1) / nsplit;
    if (nsplit > 1) e->block_n = (e->block_n + 15) / 16 * 16;
    e->nfull = d->N / e->block_n;
    e->rem = d->N - e->nfull * e->block_n;
    /* deep products with B read whole and not transposed (see the top of the file) */
    int pack = nsplit == 1 && !d->trans_b && d->K >= GEMM_PACK_MIN_K && d->M >= GEMM_PACK_MIN_M;
    /* a bf16 product: oneDNN's bf16 kernels where it has them, else (or where it refuses
     * this one) the portable path */
    const int bf16 = d->bf16_in || d->bf16_out;
    e->portable = bf16 && !cpu_bf16_gemm_native();
    hg_status s = entry_prims(c, e, pack);
    if (s != HG_OK && bf16 && !e->portable) {
        e->portable = 1;
        s = entry_prims(c, e, pack);
    }
    if (s == HG_OK) s = stage_create(c, e);
    if (s != HG_OK) {
        prim_free(&e->full);
        prim_free(&e->tail);
        return s;
    }
    c->count++;
    *out = e;
    return HG_OK;
}

static hg_status prim_run(cpu_gemm_cache *c, gemm_prim *p, const void *A, const void *B,
                          const float *bias, void *C) {
    if (p->pack) {
        dnnl_memory_set_data_handle(p->b_plain, (void *)B);
        dnnl_memory_set_data_handle(p->wei, c->packed);
        dnnl_memory_set_data_handle(p->pack_scratch, c->scratch);
        dnnl_exec_arg_t args[3] = {
            {DNNL_ARG_FROM, p->b_plain}, {DNNL_ARG_TO, p->wei}, {DNNL_ARG_SCRATCHPAD, p->pack_scratch}};
        DNNL_TRY(dnnl_primitive_execute(p->pack, c->stream, 3, args), "reorder of B");
    } else {
        dnnl_memory_set_data_handle(p->wei, (void *)B);
    }
    dnnl_memory_set_data_handle(p->src, (void *)A);
    dnnl_memory_set_data_handle(p->dst, C);
    dnnl_memory_set_data_handle(p->scratch, c->scratch);
    dnnl_exec_arg_t args[5] = {{DNNL_ARG_SRC, p->src}, {DNNL_ARG_WEIGHTS, p->wei},
                               {DNNL_ARG_DST, p->dst}, {DNNL_ARG_SCRATCHPAD, p->scratch}};
    int nargs = 4;
    if (p->bias) {
        dnnl_memory_set_data_handle(p->bias, (void *)bias);
        args[nargs++] = (dnnl_exec_arg_t){DNNL_ARG_BIAS, p->bias};
    }
    DNNL_TRY(dnnl_primitive_execute(p->prim, c->stream, nargs, args), "matmul execution");
    return HG_OK;
}

/* n bf16 values to fp32 and back, over the backend's threads. */
static void to_f32(hg_backend *be, float *dst, const void *src, size_t n) {
    long blocks = (long)((n + CPU_BLOCK - 1) / CPU_BLOCK);
    #pragma omp parallel for schedule(static) num_threads(be->threads)
    for (long b = 0; b < blocks; b++) {
        size_t at = (size_t)b * CPU_BLOCK;
        elem_load(1, dst + at, src, at, n - at < CPU_BLOCK ? n - at : CPU_BLOCK);
    }
}
static void to_bf16(hg_backend *be, void *dst, const float *src, size_t n) {
    long blocks = (long)((n + CPU_BLOCK - 1) / CPU_BLOCK);
    #pragma omp parallel for schedule(static) num_threads(be->threads)
    for (long b = 0; b < blocks; b++) {
        size_t at = (size_t)b * CPU_BLOCK;
        elem_store(1, dst, at, src + at, n - at < CPU_BLOCK ? n - at : CPU_BLOCK);
    }
}

/* The column blocks of entry e; eb and ec: bytes of an element of B and of C. */
static hg_status gemm_blocks(cpu_gemm_cache *c, const gemm_entry *e, const void *A, const void *B,
                             const float *bias, void *C, size_t eb, size_t ec) {
    const cpu_gemm_desc *d = &e->desc;
    for (int blk = 0; blk <= e->nfull; blk++) {
        gemm_prim *p = blk < e->nfull ? (gemm_prim *)&e->full : (gemm_prim *)&e->tail;
        if (blk == e->nfull && !e->rem) break;
        size_t c0 = (size_t)blk * (size_t)e->block_n;
        const char *Bb = (const char *)B + eb * (d->trans_b ? c0 * (size_t)d->ldb : c0);
        HG_TRY(prim_run(c, p, A, Bb, bias ? bias + c0 : NULL, (char *)C + ec * c0));
    }
    return HG_OK;
}

/* The product with its bf16 operands staged: bias to fp32 for oneDNN; on the portable
 * path also A, B and C to fp32 around the fp32 primitives, and C back to bf16. */
static hg_status gemm_run(hg_backend *be, const cpu_gemm_desc *d, const void *A, const void *B,
                          const void *bias, void *C) {
    cpu_gemm_cache *c = cpu_of(be)->gemm;
    gemm_entry *e = NULL;
    HG_TRY(entry_find(c, d, &e));
    if (!d->bf16_in && !d->bf16_out) return gemm_blocks(c, e, A, B, bias, C, 4, 4);
    const float *bias32 = bias;
    if (bias && d->bf16_in) {
        to_f32(be, c->stage[STAGE_BIAS], bias, (size_t)d->N);
        bias32 = c->stage[STAGE_BIAS];
    }
    if (!e->portable) return gemm_blocks(c, e, A, B, bias32, C, d->bf16_in ? 2 : 4, d->bf16_out ? 2 : 4);
    if (d->bf16_in) {
        to_f32(be, c->stage[STAGE_A], A, span_a(d));
        to_f32(be, c->stage[STAGE_B], B, span_b(d));
        A = c->stage[STAGE_A], B = c->stage[STAGE_B];
    }
    void *C32 = C;
    size_t nc = span(d->M, d->N, d->ldc);
    if (d->bf16_out) {
        C32 = c->stage[STAGE_C];
        if (d->accumulate) to_f32(be, C32, C, nc);
    }
    HG_TRY(gemm_blocks(c, e, A, B, bias32, C32, 4, 4));
    if (d->bf16_out) to_bf16(be, C, C32, nc);
    return HG_OK;
}

/* oneDNN takes its thread count from OpenMP, both when a primitive is created and when
 * it runs, so the backend's count is set around the call and the caller's restored. */
hg_status cpu_gemm(hg_backend *be, const cpu_gemm_desc *d, const float *A, const float *B,
                   const float *bias, float *C) {
    int saved = omp_get_max_threads();
    omp_set_num_threads(be->threads);
    hg_status st = gemm_run(be, d, A, B, bias, C);
    omp_set_num_threads(saved);
    return st;
}

int cpu_gemm_packs(hg_backend *be, const cpu_gemm_desc *d) {
    const gemm_entry *e = entry_lookup(cpu_of(be)->gemm, d);
    return e && e->full.pack;
}

/* A 64 x 64 bf16 product: whether oneDNN has bf16 matmul kernels for this CPU. */
static int probe_bf16(void) {
    dnnl_engine_t eng = NULL;
    if (dnnl_engine_create(&eng, dnnl_cpu, 0) != dnnl_success) return 0;
    dnnl_memory_desc_t a, b, c;
    dnnl_matmul_desc_t md;
    dnnl_primitive_desc_t pd = NULL;
    int ok = md_strided(&a, 64, 64, 64, 1, 1) == dnnl_success && md_strided(&b, 64, 64, 64, 1, 1) == dnnl_success &&
             md_strided(&c, 64, 64, 64, 1, 1) == dnnl_success &&
             dnnl_matmul_desc_init(&md, &a, &b, NULL, &c) == dnnl_success &&
             dnnl_primitive_desc_create(&pd, &md, NULL, eng, NULL) == dnnl_success;
    if (pd) dnnl_primitive_desc_destroy(pd);
    dnnl_engine_destroy(eng);
    return ok;
}

int cpu_bf16_gemm_native(void) {
    static int native = -1; /* probed once; every thread finds the same answer */
    if (native < 0) native = probe_bf16();
    return native && !cpu_bf16_portable_forced();
}

/* ---- the sgemm ceiling ---- */

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Median GFLOP/s of dnnl_sgemm on (M,N,K), NN layout, with random inputs. */
static double sgemm_rate(int M, int N, int K, float *A, float *B, float *C) {
    enum { REPS = 5 };
    double t[REPS];
    dnnl_sgemm('N', 'N', M, N, K, 1.0f, A, K, B, N, 0.0f, C, N); /* warm-up */
    for (int r = 0; r < REPS; r++) {
        double t0 = hg_now();
        dnnl_sgemm('N', 'N', M, N, K, 1.0f, A, K, B, N, 0.0f, C, N);
        t[r] = hg_now() - t0;
    }
    qsort(t, REPS, sizeof t[0], cmp_double);
    return 2.0 * M * N * K / t[REPS / 2] / 1e9;
}

hg_status cpu_sgemm_peak(double *gflops) {
    /* The best of a cubic product and the GPT-2 small MLP shapes: the ceiling is the
     * fastest the library runs, so peak fractions are never flattered. */
    static const int shapes[][3] = {{2048, 2048, 2048}, {1024, 3072, 768}, {1024, 768, 3072}};
    size_t na = 2048 * 3072, nb = 3072 * 2048, nc = 2048 * 3072;
    float *A = hg_aligned_alloc(na * 4), *B = hg_aligned_alloc(nb * 4), *C = hg_aligned_alloc(nc * 4);
    if (!A || !B || !C) {
        hg_aligned_free(A), hg_aligned_free(B), hg_aligned_free(C);
        return hg_fail(HG_ERR_NOMEM, "out of memory for the sgemm peak measurement");
    }
    uint32_t x = 12345;
    for (size_t i = 0; i < na; i++) A[i] = (float)((x = x * 1664525u + 1013904223u) >> 8) / 16777216.0f - 0.5f;
    for (size_t i = 0; i < nb; i++) B[i] = (float)((x = x * 1664525u + 1013904223u) >> 8) / 16777216.0f - 0.5f;
    double best = 0;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        double r = sgemm_rate(shapes[s][0], shapes[s][1], shapes[s][2], A, B, C);
        if (r > best) best = r;
    }
    hg_aligned_free(A), hg_aligned_free(B), hg_aligned_free(C);
    *gflops = best;
    return HG_OK;
}

/* Median GFLOP/s of cpu_gemm on a bf16 (M,N,K) product, NN layout, bf16 out. */
static double bf16_rate(hg_backend *be, int M, int N, int K, const void *A, const void *B, void *C, hg_status *st) {
    enum { REPS = 5 };
    double t[REPS];
    cpu_gemm_desc d = {.M = M, .N = N, .K = K, .lda = K, .ldb = N, .ldc = N, .bf16_in = 1, .bf16_out = 1};
    *st = cpu_gemm(be, &d, A, B, NULL, C); /* creates the primitive; warm-up */
    for (int r = 0; r < REPS && *st == HG_OK; r++) {
        double t0 = hg_now();
        *st = cpu_gemm(be, &d, A, B, NULL, C);
        t[r] = hg_now() - t0;
    }
    if (*st != HG_OK) return 0.0;
    qsort(t, REPS, sizeof t[0], cmp_double);
    return 2.0 * M * N * K / t[REPS / 2] / 1e9;
}

hg_status cpu_bf16_gemm_peak(int threads, double *gflops) {
    static const int shapes[][3] = {{2048, 2048, 2048}, {1024, 3072, 768}, {1024, 768, 3072}};
    size_t na = 2048 * 3072, nb = 3072 * 2048, nc = 2048 * 3072;
    hg_backend *be = NULL;
    HG_TRY(hg_backend_cpu_create(&be, threads > 0 ? threads : omp_get_num_procs(), HG_PRECISION_BF16));
    uint16_t *A = hg_aligned_alloc(na * 2), *B = hg_aligned_alloc(nb * 2), *C = hg_aligned_alloc(nc * 2);
    hg_status st = A && B && C ? HG_OK : hg_fail(HG_ERR_NOMEM, "out of memory for the bf16 GEMM peak measurement");
    uint32_t x = 12345;
    for (size_t i = 0; st == HG_OK && i < na; i++) A[i] = f32_to_bf16((float)((x = x * 1664525u + 1013904223u) >> 8) / 16777216.0f - 0.5f);
    for (size_t i = 0; st == HG_OK && i < nb; i++) B[i] = f32_to_bf16((float)((x = x * 1664525u + 1013904223u) >> 8) / 16777216.0f - 0.5f);
    double best = 0;
    for (size_t s = 0; st == HG_OK && s < sizeof shapes / sizeof shapes[0]; s++) {
        double r = bf16_rate(be, shapes[s][0], shapes[s][1], shapes[s][2], A, B, C, &st);
        if (r > best) best = r;
    }
    hg_aligned_free(A), hg_aligned_free(B), hg_aligned_free(C);
    be->ops->destroy(be);
    if (st == HG_OK) *gflops = best;
    return st;
}
