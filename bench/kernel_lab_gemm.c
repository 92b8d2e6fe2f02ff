/* Kernel lab, GEMM: every matrix product of one training step of a preset, timed several
 * ways on the same data: dnnl_sgemm, one oneDNN matmul primitive, the primitive over
 * column blocks of a few widths, over row blocks, over parts of K summed in turn, whole
 * with B reordered on every call into the layout oneDNN asks for (where B is not
 * transposed and that layout is blocked), and the library's own choice (cpu_gemm). The
 * ways are timed in turn, round after round, and each one's best round is printed, in
 * GFLOP/s. The winner's rule lives in src/backend/cpu/gemm.c; the rest stays here.
 *
 * usage: kernel_lab_gemm [preset] [B] [T] [threads] [reps] [only: GEMMs whose name has this]
 * With KERNEL_LAB_COLD=1 in the environment, the caches are flushed before every call. */
#include <dnnl.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu.h"
#include "core/table.h"
#include "core/timer.h"
#include "model/gpt.h"

typedef struct shape {
    const char *what;
    int M, N, K, ta, tb, acc;
} shape;

static int reps = 7;

/* oneDNN matmul over blocks: columns of width w (w >= N: one block), rows of mb (mb >= M:
 * one block; M a multiple of mb) and kp parts of K (K a multiple of kp) summed in turn. prim
 * index: bit 0 the column tail, bit 1 a K part after the first (which accumulates). */
typedef struct variant {
    dnnl_primitive_t prim[4], pack; /* pack: B's reorder (whole products only), or NULL */
    dnnl_memory_t src[4], wei[4], dst[4], scr[4], b_plain;
    void *packed;
    int w, nfull, rem, mb, kp, want_pack;
} variant;

static dnnl_engine_t eng;
static dnnl_stream_t strm;
static void *scratch;

static void make_prim(variant *v, int i, const shape *s, int m, int n, int k, int acc, int pack) {
    dnnl_memory_desc_t a, b, c, b_any;
    dnnl_dims_t ad = {m, k}, bd = {k, n}, cd = {m, n};
    dnnl_dims_t as = {s->ta ? 1 : s->K, s->ta ? s->M : 1}, bs = {s->tb ? 1 : s->N, s->tb ? s->K : 1}, cs = {s->N, 1};
    dnnl_memory_desc_init_by_strides(&a, 2, ad, dnnl_f32, as);
    dnnl_memory_desc_init_by_strides(&b, 2, bd, dnnl_f32, bs);
    dnnl_memory_desc_init_by_strides(&c, 2, cd, dnnl_f32, cs);
    dnnl_memory_desc_init_by_tag(&b_any, 2, bd, dnnl_f32, dnnl_format_tag_any);
    dnnl_matmul_desc_t d;
    dnnl_matmul_desc_init(&d, &a, pack ? &b_any : &b, NULL, &c);
    dnnl_primitive_attr_t attr;
    dnnl_primitive_attr_create(&attr);
    dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user);
    if (acc) {
        dnnl_post_ops_t po;
        dnnl_post_ops_create(&po);
        dnnl_post_ops_append_sum(po, 1.0f);
        dnnl_primitive_attr_set_post_ops(attr, po);
        dnnl_post_ops_destroy(po);
    }
    dnnl_primitive_desc_t pd;
    dnnl_primitive_desc_create(&pd, &d, attr, eng, NULL);
    dnnl_primitive_create(&v->prim[i], pd);
    dnnl_memory_create(&v->src[i], &a, eng, DNNL_MEMORY_NONE);
    const dnnl_memory_desc_t *w = dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
    if (pack && w->format_kind == dnnl_blocked && w->format_desc.blocking.inner_nblks) {
        /* the reorder runs without a scratchpad of its own */
        dnnl_primitive_desc_t rpd;
        dnnl_reorder_primitive_desc_create(&rpd, &b, eng, w, eng, NULL);
        dnnl_primitive_create(&v->pack, rpd);
        dnnl_primitive_desc_destroy(rpd);
        dnnl_memory_create(&v->b_plain, &b, eng, DNNL_MEMORY_NONE);
        v->packed = hg_aligned_alloc(dnnl_memory_desc_get_size(w));
    }
    dnnl_memory_create(&v->wei[i], w, eng, v->pack ? v->packed : DNNL_MEMORY_NONE);
    dnnl_memory_create(&v->dst[i], &c, eng, DNNL_MEMORY_NONE);
    dnnl_memory_create(&v->scr[i], dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0), eng, scratch);
    dnnl_primitive_desc_destroy(pd);
    dnnl_primitive_attr_destroy(attr);
}

static void make_variant(variant *v, const shape *s) {
    int m = v->mb, k = s->K / v->kp;
    for (int kpart = 0; kpart < (v->kp > 1 ? 2 : 1); kpart++) {
        make_prim(v, 2 * kpart, s, m, v->w, k, s->acc || kpart, v->want_pack);
        if (v->rem) make_prim(v, 2 * kpart + 1, s, m, v->rem, k, s->acc || kpart, 0);
    }
}

static void run_variant(variant *v, const shape *s, const float *A, const float *B, float *C) {
    int k = s->K / v->kp;
    for (size_t r0 = 0; r0 < (size_t)s->M; r0 += (size_t)v->mb)
        for (int kpart = 0; kpart < v->kp; kpart++) {
            size_t k0 = (size_t)kpart * k;
            for (int blk = 0; blk <= v->nfull; blk++) {
                int i = (blk < v->nfull ? 0 : 1) + (kpart ? 2 : 0);
                if (blk == v->nfull && !v->rem) break;
                size_t c0 = (size_t)blk * v->w;
                dnnl_memory_set_data_handle(v->src[i], (void *)(s->ta ? A + k0 * s->M + r0 : A + r0 * s->K + k0));
                const float *Bb = s->tb ? B + c0 * s->K + k0 : B + k0 * s->N + c0;
                if (v->pack) {
                    dnnl_memory_set_data_handle(v->b_plain, (void *)Bb);
                    dnnl_exec_arg_t ra[] = {{DNNL_ARG_FROM, v->b_plain}, {DNNL_ARG_TO, v->wei[i]}};
                    dnnl_primitive_execute(v->pack, strm, 2, ra);
                } else {
                    dnnl_memory_set_data_handle(v->wei[i], (void *)Bb);
                }
                dnnl_memory_set_data_handle(v->dst[i], C + r0 * s->N + c0);
                dnnl_exec_arg_t args[] = {{DNNL_ARG_SRC, v->src[i]}, {DNNL_ARG_WEIGHTS, v->wei[i]},
                                          {DNNL_ARG_DST, v->dst[i]}, {DNNL_ARG_SCRATCHPAD, v->scr[i]}};
                dnnl_primitive_execute(v->prim[i], strm, 4, args);
            }
        }
}

typedef void run_fn(void *ctx, const shape *s, const float *A, const float *B, float *C);

static void run_sgemm(void *ctx, const shape *s, const float *A, const float *B, float *C) {
    (void)ctx;
    dnnl_sgemm(s->ta ? 'T' : 'N', s->tb ? 'T' : 'N', s->M, s->N, s->K, 1.0f, A, s->ta ? s->M : s->K, B,
               s->tb ? s->K : s->N, s->acc ? 1.0f : 0.0f, C, s->N);
}

static void run_prim(void *ctx, const shape *s, const float *A, const float *B, float *C) {
    run_variant(ctx, s, A, B, C);
}

static void run_library(void *ctx, const shape *s, const float *A, const float *B, float *C) {
    cpu_gemm_desc d = {.M = s->M, .N = s->N, .K = s->K, .trans_a = s->ta, .trans_b = s->tb,
                       .lda = s->ta ? s->M : s->K, .ldb = s->tb ? s->K : s->N, .ldc = s->N, .accumulate = s->acc};
    if (cpu_gemm(ctx, &d, A, B, NULL, C) != HG_OK) fprintf(stderr, "cpu_gemm: %s\n", hg_last_error());
}

int main(int argc, char **argv) {
    hg_config cfg;
    if (hg_config_preset(argc > 1 ? argv[1] : "small", &cfg) != HG_OK) return 2;
    int B = argc > 2 ? atoi(argv[2]) : 4, T = argc > 3 ? atoi(argv[3]) : 256;
    int threads = argc > 4 ? atoi(argv[4]) : omp_get_num_procs();
    reps = argc > 5 ? atoi(argv[5]) : 7;
    if (reps < 1 || reps > 64) reps = 7;
    omp_set_num_threads(threads);
    gpt_dims d = gpt_dims_of(&cfg);
    int N = B * T, C = d.C, Q = d.QD, F = d.F, FI = d.FI, Vp = d.Vp, chunk = 256;
    /* fc is the MLP's input product (w1 | w3 for SwiGLU, FI columns), fc.proj its output. */
    shape shapes[] = {
        {"qkv fwd", N, d.QKV, C, 0, 0, 0},     {"attn.proj fwd", N, C, Q, 0, 0, 0},
        {"fc fwd", N, FI, C, 0, 0, 0},         {"fc.proj fwd", N, C, F, 0, 0, 0},
        {"qkv dX", N, C, d.QKV, 0, 1, 0},      {"attn.proj dX", N, Q, C, 0, 1, 0},
        {"fc dX", N, C, FI, 0, 1, 0},          {"fc.proj dX", N, F, C, 0, 1, 0},
        {"qkv dW", C, d.QKV, N, 1, 0, 1},      {"attn.proj dW", Q, C, N, 1, 0, 1},
        {"fc dW", C, FI, N, 1, 0, 1},          {"fc.proj dW", F, C, N, 1, 0, 1},
        {"lm_head chunk", chunk, Vp, C, 0, 1, 0}, {"lm_head dX", chunk, C, Vp, 0, 0, 0},
        {"lm_head dW", Vp, C, chunk, 1, 0, 1},
        {"lm_head 2chunk", 2 * chunk, Vp, C, 0, 1, 0}, {"lm_head 2dX", 2 * chunk, C, Vp, 0, 0, 0},
        {"lm_head 2dW", Vp, C, 2 * chunk, 1, 0, 1},
        {"lm_head 4chunk", 4 * chunk, Vp, C, 0, 1, 0}, {"lm_head 4dX", 4 * chunk, C, Vp, 0, 0, 0},
        {"lm_head 4dW", Vp, C, 4 * chunk, 1, 0, 1},
    };
    /* the variants: column width, row block, K parts (0: the whole dimension) */
    static const struct { const char *name; int w, mb, kp, pack; } vars[] = {
        {"whole", 0, 0, 1, 0}, {"w384", 384, 0, 1, 0}, {"w768", 768, 0, 1, 0}, {"w1536", 1536, 0, 1, 0},
        {"m256", 0, 256, 1, 0}, {"m512", 0, 512, 1, 0}, {"k/2", 0, 0, 2, 0}, {"k/4", 0, 0, 4, 0},
        {"w768k/2", 768, 0, 2, 0}, {"packed", 0, 0, 1, 1},
    };
    enum { NVARS = sizeof vars / sizeof vars[0] };
    const char *only = argc > 6 ? argv[6] : NULL; /* run only the GEMMs whose name has this */
    dnnl_engine_create(&eng, dnnl_cpu, 0);
    dnnl_stream_create(&strm, eng, dnnl_stream_default_flags);
    scratch = hg_aligned_alloc((size_t)64 << 20);
    /* KERNEL_LAB_COLD set: 128 MiB are written before every timed call, so that the
     * operands come from memory, as in a training step, not from the cache */
    float *cold = NULL;
    size_t ncold = (size_t)32 << 20;
    if (getenv("KERNEL_LAB_COLD") && (cold = hg_aligned_alloc(ncold * 4))) memset(cold, 0, ncold * 4);
    hg_backend *be;
    if (hg_backend_cpu_create(&be, threads, HG_PRECISION_FP32) != HG_OK) return 1;
    printf("GEMMs of one %s step, B=%d T=%d, %d threads, best of %d rounds (GFLOP/s)\n", argv[1] ? argv[1] : "small", B, T, threads, reps);
    printf("%-15s %6s %6s %6s %8s", "gemm", "M", "N", "K", "sgemm");
    for (int w = 0; w < NVARS; w++) printf(" %8s", vars[w].name);
    printf("  library\n");
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        shape *s = &shapes[i];
        if (only && !strstr(s->what, only)) continue;
        size_t na = (size_t)s->M * s->K, nb = (size_t)s->K * s->N, nc = (size_t)s->M * s->N;
        float *A = hg_aligned_alloc(na * 4), *Bm = hg_aligned_alloc(nb * 4), *Cm = hg_aligned_alloc(nc * 4);
        for (size_t j = 0; j < na; j++) A[j] = (float)((j * 2654435761u) % 1000) / 1000.0f - 0.5f;
        for (size_t j = 0; j < nb; j++) Bm[j] = (float)((j * 40503u) % 1000) / 1000.0f - 0.5f;
        memset(Cm, 0, nc * 4);
        /* every way of running it: sgemm, the variants, the library */
        struct { run_fn *f; void *ctx; double best; } ways[NVARS + 2] = {{run_sgemm, NULL, 1e30}};
        variant v[NVARS];
        for (int w = 0; w < NVARS; w++) {
            v[w] = (variant){.w = vars[w].w && vars[w].w < s->N ? vars[w].w : s->N,
                             .mb = vars[w].mb && vars[w].mb < s->M ? vars[w].mb : s->M, .kp = vars[w].kp,
                             .want_pack = vars[w].pack};
            ways[w + 1].best = 1e30;
            if (s->M % v[w].mb || s->K % v[w].kp || (v[w].want_pack && s->tb)) continue; /* not run: printed as - */
            v[w].nfull = s->N / v[w].w;
            v[w].rem = s->N - v[w].nfull * v[w].w;
            make_variant(&v[w], s);
            ways[w + 1].f = run_prim, ways[w + 1].ctx = &v[w];
        }
        ways[NVARS + 1].f = run_library, ways[NVARS + 1].ctx = be, ways[NVARS + 1].best = 1e30;
        /* round-robin, so that a slow spell of a shared machine slows every way alike; the
         * best time of each is its speed when the machine let it run */
        for (int r = -1; r < reps; r++)
            for (int w = 0; w < NVARS + 2; w++) {
                if (!ways[w].f) continue;
                if (cold) for (size_t q = 0; q < ncold; q++) cold[q] += 1.0f;
                double t0 = hg_now();
                ways[w].f(ways[w].ctx, s, A, Bm, Cm);
                double t = hg_now() - t0;
                if (r >= 0 && t < ways[w].best) ways[w].best = t; /* round -1 warms up */
            }
        printf("%-15s %6d %6d %6d", s->what, s->M, s->N, s->K);
        for (int w = 0; w < NVARS + 2; w++) {
            if (!ways[w].f) printf(" %8s", "-");
            else printf(" %8.1f", 2.0 * s->M * s->N * (double)s->K / ways[w].best / 1e9);
        }
        printf("\n");
        for (int w = 0; w < NVARS; w++)
            for (int k = 0; k < 4; k++) {
                if (!v[w].prim[k]) continue;
                dnnl_primitive_destroy(v[w].prim[k]);
                dnnl_memory_t mems[] = {v[w].src[k], v[w].wei[k], v[w].dst[k], v[w].scr[k]};
                for (int q = 0; q < 4; q++) dnnl_memory_destroy(mems[q]);
            }
        for (int w = 0; w < NVARS; w++)
            if (v[w].pack) {
                dnnl_primitive_destroy(v[w].pack);
                dnnl_memory_destroy(v[w].b_plain);
                hg_aligned_free(v[w].packed);
            }
        hg_aligned_free(A), hg_aligned_free(Bm), hg_aligned_free(Cm);
    }
    be->ops->destroy(be);
    hg_aligned_free(cold);
    return 0;
}
