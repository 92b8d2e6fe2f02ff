/* Kernel lab, GEMM: every matrix product of one GPT-2 training step, timed several ways on
 * the same data: dnnl_sgemm, one oneDNN matmul primitive, the primitive over column blocks
 * of a few widths, and the library's own choice (cpu_gemm). Medians of repeated runs, in
 * GFLOP/s. The winner's rule lives in src/backend/cpu/gemm.c; the rest stays here.
 *
 * usage: kernel_lab_gemm [preset] [B] [T] [threads] [reps] */
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

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* oneDNN matmul over column blocks of width w (w >= N: one primitive). */
typedef struct variant {
    dnnl_primitive_t prim[2];
    dnnl_memory_t src[2], wei[2], dst[2], scr[2];
    int w, nfull, rem;
} variant;

static dnnl_engine_t eng;
static dnnl_stream_t strm;
static void *scratch;

static void make_prim(variant *v, int i, const shape *s, int n) {
    dnnl_memory_desc_t a, b, c;
    dnnl_dims_t ad = {s->M, s->K}, bd = {s->K, n}, cd = {s->M, n};
    dnnl_dims_t as = {s->ta ? 1 : s->K, s->ta ? s->M : 1}, bs = {s->tb ? 1 : s->N, s->tb ? s->K : 1}, cs = {s->N, 1};
    dnnl_memory_desc_init_by_strides(&a, 2, ad, dnnl_f32, as);
    dnnl_memory_desc_init_by_strides(&b, 2, bd, dnnl_f32, bs);
    dnnl_memory_desc_init_by_strides(&c, 2, cd, dnnl_f32, cs);
    dnnl_matmul_desc_t d;
    dnnl_matmul_desc_init(&d, &a, &b, NULL, &c);
    dnnl_primitive_attr_t attr;
    dnnl_primitive_attr_create(&attr);
    dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user);
    if (s->acc) {
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
    dnnl_memory_create(&v->wei[i], &b, eng, DNNL_MEMORY_NONE);
    dnnl_memory_create(&v->dst[i], &c, eng, DNNL_MEMORY_NONE);
    dnnl_memory_create(&v->scr[i], dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0), eng, scratch);
    dnnl_primitive_desc_destroy(pd);
    dnnl_primitive_attr_destroy(attr);
}

static void run_variant(variant *v, const shape *s, const float *A, const float *B, float *C) {
    for (int blk = 0; blk <= v->nfull; blk++) {
        int i = blk < v->nfull ? 0 : 1;
        if (i == 1 && !v->rem) break;
        size_t c0 = (size_t)blk * v->w;
        dnnl_memory_set_data_handle(v->src[i], (void *)A);
        dnnl_memory_set_data_handle(v->wei[i], (void *)(s->tb ? B + c0 * s->K : B + c0));
        dnnl_memory_set_data_handle(v->dst[i], C + c0);
        dnnl_exec_arg_t args[] = {{DNNL_ARG_SRC, v->src[i]}, {DNNL_ARG_WEIGHTS, v->wei[i]},
                                  {DNNL_ARG_DST, v->dst[i]}, {DNNL_ARG_SCRATCHPAD, v->scr[i]}};
        dnnl_primitive_execute(v->prim[i], strm, 4, args);
    }
}

typedef void run_fn(void *ctx, const shape *s, const float *A, const float *B, float *C);

static double median_gflops(run_fn *f, void *ctx, const shape *s, const float *A, const float *B, float *C) {
    double t[64];
    f(ctx, s, A, B, C);
    for (int r = 0; r < reps; r++) {
        double t0 = hg_now();
        f(ctx, s, A, B, C);
        t[r] = hg_now() - t0;
    }
    qsort(t, (size_t)reps, sizeof t[0], cmp_double);
    return 2.0 * s->M * s->N * (double)s->K / t[reps / 2] / 1e9;
}

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
    int N = B * T, C = cfg.d_model, F = gpt_dims_of(&cfg).F, Vp = gpt_dims_of(&cfg).Vp, chunk = 256;
    shape shapes[] = {
        {"qkv fwd", N, 3 * C, C, 0, 0, 0},     {"attn.proj fwd", N, C, C, 0, 0, 0},
        {"fc fwd", N, F, C, 0, 0, 0},          {"fc.proj fwd", N, C, F, 0, 0, 0},
        {"qkv dX", N, C, 3 * C, 0, 1, 0},      {"attn.proj dX", N, C, C, 0, 1, 0},
        {"fc dX", N, C, F, 0, 1, 0},           {"fc.proj dX", N, F, C, 0, 1, 0},
        {"qkv dW", C, 3 * C, N, 1, 0, 1},      {"attn.proj dW", C, C, N, 1, 0, 1},
        {"fc dW", C, F, N, 1, 0, 1},           {"fc.proj dW", F, C, N, 1, 0, 1},
        {"lm_head chunk", chunk, Vp, C, 0, 1, 0}, {"lm_head dX", chunk, C, Vp, 0, 0, 0},
        {"lm_head dW", Vp, C, chunk, 1, 0, 1},
        {"lm_head 2chunk", 2 * chunk, Vp, C, 0, 1, 0}, {"lm_head 2dX", 2 * chunk, C, Vp, 0, 0, 0},
        {"lm_head 2dW", Vp, C, 2 * chunk, 1, 0, 1},
        {"lm_head 4chunk", 4 * chunk, Vp, C, 0, 1, 0}, {"lm_head 4dX", 4 * chunk, C, Vp, 0, 0, 0},
        {"lm_head 4dW", Vp, C, 4 * chunk, 1, 0, 1},
    };
    int widths[] = {1 << 30, 384, 768, 1024, 1536};
    dnnl_engine_create(&eng, dnnl_cpu, 0);
    dnnl_stream_create(&strm, eng, dnnl_stream_default_flags);
    scratch = hg_aligned_alloc((size_t)64 << 20);
    hg_backend *be;
    if (hg_backend_cpu_create(&be, threads) != HG_OK) return 1;
    printf("GEMMs of one %s step, B=%d T=%d, %d threads, median of %d (GFLOP/s)\n", argv[1] ? argv[1] : "small", B, T, threads, reps);
    printf("%-15s %6s %6s %6s %7s %7s", "gemm", "M", "N", "K", "sgemm", "whole");
    for (int w = 1; w < 5; w++) printf("  w%-5d", widths[w]);
    printf(" library\n");
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        shape *s = &shapes[i];
        size_t na = (size_t)s->M * s->K, nb = (size_t)s->K * s->N, nc = (size_t)s->M * s->N;
        float *A = hg_aligned_alloc(na * 4), *Bm = hg_aligned_alloc(nb * 4), *Cm = hg_aligned_alloc(nc * 4);
        for (size_t j = 0; j < na; j++) A[j] = (float)((j * 2654435761u) % 1000) / 1000.0f - 0.5f;
        for (size_t j = 0; j < nb; j++) Bm[j] = (float)((j * 40503u) % 1000) / 1000.0f - 0.5f;
        memset(Cm, 0, nc * 4);
        printf("%-15s %6d %6d %6d %7.1f", s->what, s->M, s->N, s->K, median_gflops(run_sgemm, NULL, s, A, Bm, Cm));
        for (int w = 0; w < 5; w++) {
            variant v = {.w = widths[w] < s->N ? widths[w] : s->N};
            v.nfull = s->N / v.w;
            v.rem = s->N - v.nfull * v.w;
            make_prim(&v, 0, s, v.w);
            if (v.rem) make_prim(&v, 1, s, v.rem);
            printf(" %7.1f", median_gflops(run_prim, &v, s, A, Bm, Cm));
            for (int k = 0; k < 2; k++) {
                if (!v.prim[k]) continue;
                dnnl_primitive_destroy(v.prim[k]);
                dnnl_memory_t mems[] = {v.src[k], v.wei[k], v.dst[k], v.scr[k]};
                for (int q = 0; q < 4; q++) dnnl_memory_destroy(mems[q]);
            }
        }
        printf(" %7.1f\n", median_gflops(run_library, be, s, A, Bm, Cm));
        hg_aligned_free(A), hg_aligned_free(Bm), hg_aligned_free(Cm);
    }
    be->ops->destroy(be);
    return 0;
}
